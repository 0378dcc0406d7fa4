/* SPDX-License-Identifier: ISC */
/*
 * conn.c: what a request does with its connection (conn.h): the reply
 * (conn_send, conn_reply, conn_send_iov, reply_invalid), the peer, the
 * running request (conn_start, conn_answer), and a draining worker's
 * end once nothing is connected or running.  The ops, the fast path and
 * pending.c call it; worker.c's loop owns the connections.  It calls
 * nothing of worker.c: conn_answer takes the next lines through
 * w->dispatch, which worker.c sets, so the files call each other
 * without a cycle (tests/calls.sh).
 */
#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "log.h"
#include "idemd.h"
#include "conn.h"

/* Draining ends when no connection is left and no request runs. */
void
worker_maybe_exit(struct worker *w)
{
	if (w->draining && w->conn_count == 0 && w->running == 0)
		event_base_loopbreak(w->base);
}

void
conn_peer(const struct conn *c, uint32_t *uid, uint32_t *pid)
{
	*uid = c != NULL ? c->uid : 0;
	*pid = c != NULL ? c->pid : 0;
}

/*
 * The output drained, or there never was any: conn_written decides.  It
 * runs from the loop, never from inside conn_process, which may be
 * several frames up and would find the connection freed.
 */
void
conn_after_output(struct conn *c)
{
	bufferevent_trigger(c->bev, EV_WRITE,
	    BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/*
 * --log-level debug: a refused request (an ok:false reply), once, as it
 * is sent: what refused it and whose it was, never what it carried (a
 * message may quote the request).  Every JSON reply passes here, and
 * nothing else sends one, so none is logged twice or missed; the replies
 * written as text (conn_answer_text) are ok:true ones.
 */
static void
conn_log_refusal(struct conn *c, json_t *reply)
{
	json_t		*error;
	const char	*reason, *field;

	if (!json_is_false(json_object_get(reply, "ok")))
		return;
	error = json_object_get(reply, "error");
	reason = json_string_value(json_object_get(error, "reason"));
	field = json_string_value(json_object_get(error, "field"));
	log_debug("refused a request%s%s: %s%s%s%s%s, from pid %lu uid %lu",
	    c->op[0] != '\0' ? ", op " : "", c->op,
	    json_string_value(json_object_get(error, "code")) != NULL ?
	    json_string_value(json_object_get(error, "code")) : "error",
	    reason != NULL ? " " : "", reason != NULL ? reason : "",
	    field != NULL ? ", field " : "", field != NULL ? field : "",
	    (unsigned long)c->pid, (unsigned long)c->uid);
}

/*
 * Most replies fit in the socket's buffer: write them at once instead of
 * through the bufferevent, which would arm the write event (epoll_ctl),
 * wait for the wake-up and disarm it again: three system calls a
 * request.  Only when output is already queued (order) or the socket
 * is full does the rest go through the output buffer, whose drain
 * callback is conn_written.  text is a whole reply but its newline.
 */
static void
conn_write_line(struct conn *c, const char *text, size_t length)
{
	struct evbuffer	*output = bufferevent_get_output(c->bev);
	struct iovec	 iov[2];
	size_t		 sent = 0;
	ssize_t		 n;

	if (evbuffer_get_length(output) == 0) {
		iov[0].iov_base = (void *)text;
		iov[0].iov_len = length;
		iov[1].iov_base = "\n";
		iov[1].iov_len = 1;
		do
			n = writev(bufferevent_getfd(c->bev), iov, 2);
		while (n == -1 && errno == EINTR);
		/* An error is the bufferevent's to find and report. */
		if (n > 0)
			sent = (size_t)n;
	}
	if (sent < length)
		bufferevent_write(c->bev, text + sent, length - sent);
	if (sent < length + 1)
		bufferevent_write(c->bev, "\n", 1);
	else if (c->closing || c->worker->draining)
		conn_after_output(c);
}

void
conn_send(struct conn *c, json_t *reply)
{
	char		*text;

	conn_log_refusal(c, reply);
	/* Answered: a later refusal (a line too long) is not this op's. */
	c->op[0] = '\0';
	text = json_dumps(reply, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(reply);
	if (text == NULL) {
		log_warnx("cannot serialize a reply");
		c->closing = 1;
		conn_after_output(c);
		return;
	}
	conn_write_line(c, text, strlen(text));
	free(text);
}

/* Serialised pieces (the fast path's reply, its newline included). */
void
conn_send_iov(struct conn *c, const struct iovec *iov, int count)
{
	struct evbuffer	*output = bufferevent_get_output(c->bev);
	size_t		 sent = 0, skip;
	ssize_t		 n;
	int		 i;

	if (evbuffer_get_length(output) == 0) {
		do
			n = writev(bufferevent_getfd(c->bev), iov, count);
		while (n == -1 && errno == EINTR);
		if (n > 0)
			sent = (size_t)n;
	}
	for (i = 0; i < count; i++) {
		skip = sent < iov[i].iov_len ? sent : iov[i].iov_len;
		sent -= skip;
		if (skip < iov[i].iov_len)
			bufferevent_write(c->bev, (const char *)iov[i].iov_base +
			    skip, iov[i].iov_len - skip);
		else if (i == count - 1 && (c->closing || c->worker->draining))
			conn_after_output(c);
	}
}

void
conn_reply(struct conn *c, json_t *reply)
{
	conn_send(c, reply);
}

/*
 * A request refused by an op's checks (ops.c, diagnose.c): counted, then
 * answered.  Here, not in reply.c, which only builds replies (and is
 * linked without this file into tests/fuzz/fuzz_request).
 */
void
reply_invalid(struct conn *c, json_t *id, struct request_error *err)
{
	atomic_fetch_add(&conn_idemd(c)->seg.header->counters.errors, 1);
	conn_reply(c, reply_error(err, id));
}

struct idemd *
conn_idemd(struct conn *c)
{
	return c->worker->d;
}

struct worker *
conn_worker(struct conn *c)
{
	return c->worker;
}

/* p is the connection's request now: its later lines wait. */
void
conn_start(struct conn *c, struct pending *p)
{
	c->running = p;
}

/*
 * Take the lines that waited for the running request (worker.c's
 * conn_process, through the worker), unless its loop is the caller's:
 * an op answered before its dispatch returned (the local store's reads
 * and effect ops call their done at once) would otherwise take the next
 * line one call deeper, and a client pipelining a megabyte of such
 * lines behind an unread output overflowed the worker's stack.
 */
static void
conn_next(struct conn *c)
{
	if (!c->dispatching)
		c->worker->dispatch(c);
}

/* The running request's reply; then the lines that waited for it. */
void
conn_answer(struct conn *c, json_t *reply)
{
	c->running = NULL;
	conn_send(c, reply);
	conn_next(c);
}

const char *
conn_line(struct conn *c, size_t *length)
{
	*length = c->line != NULL ? c->line_length : 0;
	return c->line;
}

const char *
conn_line_result(struct conn *c, size_t *length)
{
	*length = c->line_result != NULL ? c->line_result_length : 0;
	return c->line_result;
}

/* conn_answer with an ok:true reply written as text (replytext.c). */
void
conn_answer_text(struct conn *c, const char *text, size_t length)
{
	c->running = NULL;
	c->op[0] = '\0';
	conn_write_line(c, text, length);
	conn_next(c);
}
