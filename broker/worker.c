/* SPDX-License-Identifier: ISC */
/*
 * worker.c: a worker process and its connections.  A libevent loop
 * accepting connections on the socket the master opened, reading
 * newline-delimited JSON requests and dispatching each to its op
 * (optable.c), and writing the replies.  The requests that wait (for the
 * journal, for another request's claim) are pending.c's; this loop only
 * wakes them when the master's journaling thread or a peer worker says
 * so.  What a request does with its connection (its reply, its peer)
 * is conn.c's.
 *
 * A connection runs one request at a time; later lines wait in its input
 * buffer, so replies go out in request order.  Every way of losing a
 * peer ends in conn_free(), which detaches a running request so that it
 * still completes (its state stays consistent) and only its reply is
 * dropped.
 *
 * A connection's output is a bufferevent's (for the rare reply that does
 * not fit in the socket at once); its input is read here, by one read(2)
 * into a buffer of its own (conn_readable): a bufferevent would ask
 * the kernel how much is readable (ioctl FIONREAD) before each read, one
 * system call in seven of a retry's.  The buffer is a plain one kept
 * with the connection, not an evbuffer: an evbuffer frees its chain
 * once drained and allocates one for the next read, a malloc and a
 * free each retry besides its own bookkeeping (issue #33).
 */
#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "fastpath.h"
#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "conn.h"

static void	conn_process(struct conn *);
static void	conn_resume_reading(struct conn *);
static void	conn_free(struct conn *);

/*
 * The most one read(2) of a connection takes.  With a line pending and
 * less room than this, the input grows (up to IDEM_MAX_LINE_BYTES + 1)
 * so that a pipelined burst comes in one read, not one per 4 KiB.
 */
#define CONN_READ_BYTES	16384
/*
 * A connection's input buffer as it starts, and as conn_process shrinks
 * it back to as soon as it has taken every line a longer line or a burst
 * grew it for: an idle connection keeps no more than this.
 */
#define CONN_INPUT_BYTES	4096

/*
 * Open connections are counted for the whole broker (--max-connections)
 * and per worker, so that the master can give back a dead worker's.
 */
static void
connections_sub(struct worker *w, uint32_t n)
{
	atomic_fetch_sub(&w->d->seg.header->workers[w->index].connections, n);
	atomic_fetch_sub(&w->d->seg.header->connections, n);
}

/*
 * The notify socket carries the store's URI (read before the loop) and
 * nothing after it: the master's wake-ups come on the wake eventfd.
 * Readable, it says the master is gone (EOF).
 */
static void
worker_notified(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;
	char		 buf[64];
	ssize_t		 n;

	while ((n = read(fd, buf, sizeof buf)) > 0 ||
	    (n == -1 && errno == EINTR))
		;
	if (n == 0) {
		log_warnx("worker %u: the master is gone; exiting", w->index);
		_exit(1);
	}
}

/*
 * The master's journaling thread wrote the wake eventfd: a flush this
 * loop's parked requests may wait for.  Edge-triggered, the counter is
 * never read (each write is an edge of its own): one system call a
 * wake-up fewer.  A counter of 2^64 - 2 writes would take centuries.
 */
static void
worker_woken(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;
	uint64_t	 count;

	if (w->wake_reads)
		(void)read(fd, &count, sizeof count);
	pending_run_parked(w);
}

static void
worker_local_wake(evutil_socket_t fd, short events, void *arg)
{
	pending_run_parked(arg);
}

void
worker_wake_all(struct worker *w)
{
	event_active(w->local_wake_ev, EV_READ, 0);
	atomic_store(&w->d->seg.header->wake_requested, 1);
	journaler_kick(w->d->kick_fd);
}

/* ---- Connections --------------------------------------------------------- */

static void
conn_dispatch(struct conn *c, const char *line, size_t length)
{
	struct request_error	 err;
	json_t			*request, *id;
	const char		*name;
	const struct op_entry	*op;
	size_t			 op_length;

	c->op[0] = '\0';
	request = request_parse_line(line, length, &c->line_result,
	    &c->line_result_length, &err);
	if (request == NULL) {
		atomic_fetch_add(&c->worker->d->seg.header->counters.errors, 1);
		conn_send(c, reply_error(&err, NULL));
		return;
	}
	if (request_envelope(request, line, length, &id, &name, &err) != 0)
		goto refuse;
	if ((op = optable_find(name)) == NULL) {
		request_error_set(&err, WIRE_UNKNOWN_OP, "op",
		    "unknown op \"%.64s\"", name);
		goto refuse;
	}
	/* One of the table's names: the log quotes nothing a client chose. */
	op_length = strnlen(name, sizeof c->op - 1);
	memcpy(c->op, name, op_length);
	c->op[op_length] = '\0';
	if (atomic_load(&c->worker->d->seg.header->shutting_down) &&
	    !(op->flags & OP_WHILE_DRAINING)) {
		request_error_set(&err, WIRE_SHUTTING_DOWN, NULL,
		    "idemd is shutting down");
		err.retryable = 1;
		goto refuse;
	}
	c->line = line;
	c->line_length = length;
	op->handler(c, request, id);
	c->line = NULL;
	c->line_result = NULL;
	json_decref(request);
	return;
refuse:
	c->line_result = NULL;
	atomic_fetch_add(&c->worker->d->seg.header->counters.errors, 1);
	conn_send(c, reply_error(&err, id));
	json_decref(request);
}

/* Bytes read and not yet taken as lines. */
static size_t
conn_pending(const struct conn *c)
{
	return c->in_end - c->in_start;
}

/*
 * Nothing pending: the input starts over at its beginning and, grown
 * past CONN_INPUT_BYTES, shrinks back, so that a connection idle after
 * a long line does not keep up to 1 MiB (a failed shrink keeps it).
 */
static void
conn_input_settle(struct conn *c)
{
	char	*shrunk;

	if (conn_pending(c) != 0)
		return;
	c->in_start = c->in_end = 0;
	if (c->in_size > CONN_INPUT_BYTES &&
	    (shrunk = realloc(c->in, CONN_INPUT_BYTES)) != NULL) {
		c->in = shrunk;
		c->in_size = CONN_INPUT_BYTES;
	}
}

/*
 * Handle complete lines while no request of the connection is running.
 * A line the retry fast path answers (fastpath.c) is answered where it
 * lies in the input and drained: it runs no op and nothing that could
 * resume this function, so the line need not be taken out first (a
 * retry's malloc, copy and free of its line: issue #33).  Any other
 * line is taken out first, as before.
 */
static void
conn_process(struct conn *c)
{
	struct request_error	 err;
	const char		*at, *nl;
	size_t			 length;
	char			*line;

	while (c->running == NULL && !c->closing) {
		/*
		 * A peer that sends without reading gets no more answers
		 * queued; conn_written resumes once the output drains.
		 */
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) >
		    IDEM_MAX_OUTPUT_BYTES)
			break;
		at = c->in + c->in_start;
		if ((nl = memchr(at, '\n', conn_pending(c))) == NULL) {
			if (conn_pending(c) >= IDEM_MAX_LINE_BYTES)
				goto too_large;
			break;
		}
		length = (size_t)(nl - at);
		if (length + 1 > IDEM_MAX_LINE_BYTES)
			goto too_large;
		atomic_fetch_add(&c->worker->d->seg.header->workers[
		    c->worker->index].requests, 1);
		if (fastpath_answer(c, at, length)) {
			c->in_start += length + 1;
			conn_resume_reading(c);
			continue;
		}
		/*
		 * Take the line out first: the op may keep running after
		 * dispatch returns, and its reply then resumes this function
		 * (conn_answer) while the input moves.  A reply made before
		 * dispatch returns does not (c->dispatching): this loop takes
		 * the next line, so a megabyte of lines answered at once
		 * never nests a call a line.
		 */
		if ((line = malloc(length + 1)) == NULL) {
			c->closing = 1;
			conn_after_output(c);
			return;
		}
		memcpy(line, at, length + 1);
		c->in_start += length + 1;
		conn_resume_reading(c);
		c->dispatching = 1;
		conn_dispatch(c, line, length);
		c->dispatching = 0;
		free(line);
	}
	conn_input_settle(c);
	return;

too_large:
	request_error_set(&err, WIRE_TOO_LARGE, NULL, "a request line is at "
	    "most %d bytes, newline included", IDEM_MAX_LINE_BYTES);
	atomic_fetch_add(&c->worker->d->seg.header->counters.errors, 1);
	c->closing = 1;
	conn_send(c, reply_error(&err, NULL));
	event_del(c->read_ev);
	c->in_start = c->in_end = 0;
}

/* Reading was paused on a full line buffer and there is room again. */
static void
conn_resume_reading(struct conn *c)
{
	if (c->read_paused && !c->closing &&
	    conn_pending(c) <= IDEM_MAX_LINE_BYTES) {
		c->read_paused = 0;
		event_add(c->read_ev, &c->worker->idle_timeout);
	}
}

/*
 * Room for the next read at c->in + c->in_end, at most want bytes and at
 * least one: the lines taken moved out of the way and, with a line
 * pending and less room than want, the buffer grown (up to
 * IDEM_MAX_LINE_BYTES + 1).  An empty input is read into as it is:
 * conn_process has shrunk it already.  The room, or 0 when memory is
 * short.
 */
static size_t
conn_input_room(struct conn *c, size_t want)
{
	size_t	 pending = conn_pending(c), size = c->in_size;
	char	*grown;

	if (pending == 0) {
		c->in_start = c->in_end = 0;
	} else if (c->in_start > 0 && c->in_size - c->in_end < want) {
		memmove(c->in, c->in + c->in_start, pending);
		c->in_start = 0;
		c->in_end = pending;
	}
	if (pending > 0 && c->in_size - c->in_end < want &&
	    c->in_size < IDEM_MAX_LINE_BYTES + 1) {
		while (size < c->in_end + want &&
		    size < IDEM_MAX_LINE_BYTES + 1)
			size *= 2;
		if (size > IDEM_MAX_LINE_BYTES + 1)
			size = IDEM_MAX_LINE_BYTES + 1;
		if ((grown = realloc(c->in, size)) == NULL)
			return 0;
		c->in = grown;
		c->in_size = size;
	}
	return c->in_size - c->in_end < want ? c->in_size - c->in_end : want;
}

/*
 * The socket is readable, or the connection was idle for the timeout.
 * The input holds at most one line past the limit (IDEM_MAX_LINE_BYTES
 * + 1 bytes): with that much and no line ending conn_process refuses the
 * line; with whole lines waiting behind a running request, reading
 * pauses (level-triggered, the event would fire again and again) until
 * conn_process takes one.
 */
static void
conn_readable(evutil_socket_t fd, short what, void *arg)
{
	struct conn		*c = arg;
	size_t			 room;
	ssize_t			 n;

	if (what & EV_TIMEOUT) {
		/* A silent peer times out only while it has nothing running. */
		if (c->running == NULL)
			conn_free(c);
		return;
	}
	room = IDEM_MAX_LINE_BYTES + 1 - conn_pending(c);
	if (room == 0) {
		event_del(c->read_ev);
		c->read_paused = 1;
		log_debug("connection of pid %u: its input is full, its "
		    "lines waiting to be taken: reading paused", c->pid);
		return;
	}
	if (room > CONN_READ_BYTES)
		room = CONN_READ_BYTES;
	if ((room = conn_input_room(c, room)) == 0) {
		log_warnx("connection of pid %u: no memory for its input",
		    c->pid);
		conn_free(c);
		return;
	}
	do
		n = read(fd, c->in + c->in_end, room);
	while (n == -1 && errno == EINTR);
	if (n == 0 || (n == -1 && errno != EAGAIN)) {
		/* End of stream, or the peer is gone. */
		conn_free(c);
		return;
	}
	if (n == -1)
		return;
	c->in_end += (size_t)n;
	conn_process(c);
}

static void
conn_written(struct bufferevent *bev, void *arg)
{
	struct conn	*c = arg;

	if (c->closing && c->running == NULL)
		conn_free(c);
	else if (c->running == NULL && !c->worker->draining)
		conn_process(c);
	else if (c->worker->draining && c->running == NULL)
		conn_free(c);
}

/* The output side: a write failed (the peer is gone). */
static void
conn_event(struct bufferevent *bev, short events, void *arg)
{
	if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(arg);
}

static void
conn_free(struct conn *c)
{
	struct worker	*w = c->worker;

	if (c->running != NULL)
		c->running->conn = NULL;	/* it completes; no reply */
	TAILQ_REMOVE(&w->conns, c, entry);
	w->conn_count--;
	connections_sub(w, 1);
	if (c->peer_counted)
		peers_release(&w->d->seg, w->index, c->pid, c->uid);
	event_free(c->read_ev);		/* before the bufferevent closes fd */
	free(c->in);
	bufferevent_free(c->bev);
	free(c);
	worker_maybe_exit(w);
}

/*
 * One connection too many, in total or from one peer: say so in one
 * line (best effort: the socket is new, so its buffer has room) and
 * close.  reason names the option whose limit was reached.
 */
static void
conn_refuse(struct worker *w, int s, enum wire_reason reason,
    const char *whose, int limit)
{
	struct ucred	cred;
	socklen_t	len = sizeof cred;
	char		line[384];
	int		n;

	/* Logged as conn_log_refusal logs a request's (debug). */
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		memset(&cred, 0, sizeof cred);
	log_debug("refused a connection: %s %s, from pid %lu uid %lu",
	    wire_error_name(WIRE_TOO_MANY_CONNECTIONS),
	    wire_reason_name(reason), (unsigned long)cred.pid,
	    (unsigned long)cred.uid);
	n = snprintf(line, sizeof line, "{\"ok\":false,\"action_taken\":false,"
	    "\"error\":{\"code\":\"%s\",\"reason\":\"%s\","
	    "\"message\":\"too many connections%s (at most %d); retry "
	    "later\",\"retryable\":true}}\n", wire_error_name(WIRE_TOO_MANY_CONNECTIONS),
	    wire_reason_name(reason), whose, limit);
	(void)send(s, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(s);
	atomic_fetch_add(&w->d->seg.header->counters.errors, 1);
}

/*
 * Within the limits of its peer process and user (counted across all
 * workers in the segment)?  Refuses the connection if not.
 */
static int
peer_admit(struct worker *w, int s, const struct ucred *cred, int *counted)
{
	char	whose[64];

	*counted = 0;
	switch (peers_admit(&w->d->seg, w->index, (uint32_t)cred->pid,
	    cred->uid, (uint32_t)w->d->max_connections_per_pid,
	    (uint32_t)w->d->max_connections_per_uid)) {
	case PEERS_ADMITTED:
		*counted = 1;
		return 0;
	case PEERS_UNCOUNTED:
		return 0;
	case PEERS_PID_LIMIT:
		snprintf(whose, sizeof whose, " from process %ld",
		    (long)cred->pid);
		conn_refuse(w, s, REASON_MAX_CONNECTIONS_PER_PID, whose,
		    w->d->max_connections_per_pid);
		return -1;
	case PEERS_UID_LIMIT:
		snprintf(whose, sizeof whose, " from user %lu",
		    (unsigned long)cred->uid);
		conn_refuse(w, s, REASON_MAX_CONNECTIONS_PER_UID, whose,
		    w->d->max_connections_per_uid);
		return -1;
	case PEERS_FULL:
		conn_refuse(w, s, REASON_MAX_CONNECTIONS,
		    " from distinct peers", SHM_PEER_SLOTS);
		return -1;
	}
	return -1;
}

/*
 * Connections are spread over the workers: whichever worker runs first
 * would otherwise take every pending connection while the others idle.
 * On the local store a worker's loop runs its connections' requests one
 * after another, so one worker holding every client is a serial
 * bottleneck (a bench's 32 clients, most or all on one of two workers:
 * doc/effects.md, "How fast").  On PostgreSQL a worker's loop also makes
 * blocking calls (get_submission, diagnose, stats; a creation or an
 * effect op runs on one of the worker's store threads, pg_pool.c;
 * measured, when a worker ran one creation at a time: all eight of a
 * bench's clients on one of two workers).  A worker holding more
 * connections than another live worker leaves a pending connection to it
 * (looking again every WORKER_YIELD_MS), and takes it itself after
 * WORKER_YIELD_MAX_MS (the other may be blocked in a long call, a
 * connection attempt to a server that is down).  1: yield now.  A lone
 * worker never yields.
 */
#define WORKER_YIELD_MS		2
#define WORKER_YIELD_MAX_MS	200

/*
 * Does another live worker hold fewer connections than this one?  With
 * sum, also the connections the other live workers hold, summed.
 */
static int
worker_sibling_below(struct worker *w, int64_t *sum)
{
	struct shm_header	*h = w->d->seg.header;
	uint32_t		 mine, theirs;
	unsigned		 i;
	int			 below = 0;

	if (sum != NULL)
		*sum = 0;
	mine = atomic_load(&h->workers[w->index].connections);
	for (i = 0; i < w->d->worker_count && i < SHM_MAX_WORKERS; i++) {
		if (i == w->index || atomic_load(&h->workers[i].pid) == 0)
			continue;
		theirs = atomic_load(&h->workers[i].connections);
		if (theirs < mine)
			below = 1;
		if (sum != NULL)
			*sum += theirs;
		else if (below)
			break;
	}
	return below;
}

static int
worker_yield(struct worker *w)
{
	struct timeval		 tv = { 0, WORKER_YIELD_MS * 1000 };
	int64_t			 now = clock_monotonic_us() / 1000, theirs;

	if (!worker_sibling_below(w, &theirs)) {
		w->yield_since_ms = 0;
		return 0;
	}
	/*
	 * A sibling that let a connection wait out a whole yield is stopped
	 * or stuck: yielding to it again would make every new connection
	 * wait the same WORKER_YIELD_MAX_MS, one after another.  Not again
	 * until the siblings' connections move (one accepted or closed).
	 */
	if (w->yield_stalled_at != -1) {
		if (theirs == w->yield_stalled_at)
			return 0;
		w->yield_stalled_at = -1;
	}
	/* A yield long after the last one is for another connection. */
	if (w->yield_since_ms == 0 ||
	    now - w->yield_last_ms > WORKER_YIELD_MAX_MS)
		w->yield_since_ms = now;
	else if (now - w->yield_since_ms >= WORKER_YIELD_MAX_MS) {
		w->yield_since_ms = 0;
		w->yield_stalled_at = theirs;
		return 0;
	}
	w->yield_last_ms = now;
	event_del(w->listen_ev);
	evtimer_add(w->accept_pause_ev, &tv);
	return 1;
}

static void
worker_accept(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;
	struct conn	*c;
	struct ucred	 cred;
	socklen_t	 len = sizeof cred;
	struct timeval	 tv;
	int		 s, counted;

	if (worker_yield(w))
		return;
	for (;;) {
		s = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s == -1) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				/* Out of descriptors: pause, do not spin. */
				log_warn("accept; pausing for a second");
				event_del(w->listen_ev);
				tv.tv_sec = 1;
				tv.tv_usec = 0;
				evtimer_add(w->accept_pause_ev, &tv);
			} else if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_warn("accept");
			return;
		}
		if (atomic_fetch_add(&w->d->seg.header->connections, 1) >=
		    (uint32_t)w->d->max_connections) {
			atomic_fetch_sub(&w->d->seg.header->connections, 1);
			conn_refuse(w, s, REASON_MAX_CONNECTIONS, "",
			    w->d->max_connections);
			continue;
		}
		/* No credentials (never seen on Linux): not counted per peer. */
		counted = 0;
		len = sizeof cred;
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
			if (peer_admit(w, s, &cred, &counted) != 0) {
				atomic_fetch_sub(&w->d->seg.header->connections,
				    1);
				continue;
			}
		} else
			memset(&cred, 0, sizeof cred);
		atomic_fetch_add(&w->d->seg.header->workers[w->index].connections,
		    1);
		if ((c = calloc(1, sizeof *c)) == NULL) {
			connections_sub(w, 1);
			if (counted)
				peers_release(&w->d->seg, w->index,
				    (uint32_t)cred.pid, cred.uid);
			close(s);
			continue;
		}
		c->worker = w;
		c->uid = cred.uid;
		c->pid = (uint32_t)cred.pid;
		c->peer_counted = counted;
		c->bev = bufferevent_socket_new(w->base, s,
		    BEV_OPT_CLOSE_ON_FREE);
		c->read_ev = event_new(w->base, s, EV_READ | EV_PERSIST,
		    conn_readable, c);
		c->in = malloc(CONN_INPUT_BYTES);
		c->in_size = CONN_INPUT_BYTES;
		if (c->bev == NULL || c->read_ev == NULL || c->in == NULL ||
		    event_add(c->read_ev, &w->idle_timeout) != 0) {
			connections_sub(w, 1);
			if (counted)
				peers_release(&w->d->seg, w->index, c->pid,
				    c->uid);
			if (c->read_ev != NULL)
				event_free(c->read_ev);
			free(c->in);
			if (c->bev != NULL)
				bufferevent_free(c->bev);	/* closes s */
			else
				close(s);
			free(c);
			continue;
		}
		/* No read callback: conn_readable reads. */
		bufferevent_setcb(c->bev, NULL, conn_written, conn_event, c);
		TAILQ_INSERT_TAIL(&w->conns, c, entry);
		w->conn_count++;
		/*
		 * On the PostgreSQL store: one per wake-up.  Elsewhere, on
		 * while no sibling holds fewer: a burst is spread too (the
		 * listening socket, still readable, wakes this loop again and
		 * worker_yield decides then).
		 */
		if ((w->d->be->flags & BACKEND_ONE_ACCEPT_A_WAKEUP) ||
		    worker_sibling_below(w, NULL))
			return;
	}
}

static void
worker_accept_resume(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;

	if (!w->draining)
		event_add(w->listen_ev, NULL);
}

static void
worker_terminate(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;
	struct conn	*c, *next;

	if (w->draining)
		return;
	w->draining = 1;
	event_del(w->listen_ev);
	for (c = TAILQ_FIRST(&w->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c->running == NULL && evbuffer_get_length(
		    bufferevent_get_output(c->bev)) == 0)
			conn_free(c);
	}
	worker_maybe_exit(w);
}

/* SIGHUP: the master reopened the log; this process's fd 2 follows. */
static void
worker_hangup(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;
	char		*cause = NULL;

	if (log_reopen(&cause) != 0) {
		log_warnx("worker %u: %s", w->index, cause);
		free(cause);
		return;
	}
	log_info("worker %u: SIGHUP: log reopened", w->index);
}

int
worker_main(struct idemd *d, unsigned index, uint32_t generation,
    int notify_fd, int wake_fd)
{
	struct worker	 w;
	sigset_t	 term;

	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);
	signal(SIGINT, SIG_IGN);

	crash_worker_started();
	memset(&w, 0, sizeof w);
	w.d = d;
	w.dispatch = conn_process;
	w.index = index;
	w.yield_stalled_at = -1;
	w.generation = generation;
	w.notify_fd = notify_fd;
	w.wake_fd = wake_fd;
	w.watch_us = crash_durable_watch_us(IDEM_WORKER_WATCH_US);
	w.spin_max_connections =
	    crash_spin_max_connections(IDEM_SPIN_MAX_CONNECTIONS);
	TAILQ_INIT(&w.conns);
	TAILQ_INIT(&w.parked);
	w.idle_timeout.tv_sec = d->idle_timeout_ms / 1000;
	w.idle_timeout.tv_usec = (d->idle_timeout_ms % 1000) * 1000;
	if ((w.base = event_base_new()) == NULL)
		fatalx("worker %u: event_base_new failed", index);
	if ((w.io = fileio_start(w.base)) == NULL)
		fatalx("worker %u: cannot start its file threads", index);
	inboxview_open(&d->inbox_view, d->root_fd, d->inbox_fd);
	w.listen_ev = event_new(w.base, d->listen_fd, EV_READ | EV_PERSIST,
	    worker_accept, &w);
	w.notify_ev = event_new(w.base, notify_fd, EV_READ | EV_PERSIST,
	    worker_notified, &w);
	w.wake_reads = !(event_base_get_features(w.base) & EV_FEATURE_ET);
	w.wake_ev = event_new(w.base, wake_fd, EV_READ | EV_PERSIST |
	    (w.wake_reads ? 0 : EV_ET), worker_woken, &w);
	w.local_wake_ev = event_new(w.base, -1, 0, worker_local_wake, &w);
	w.term_ev = evsignal_new(w.base, SIGTERM, worker_terminate, &w);
	w.hup_ev = evsignal_new(w.base, SIGHUP, worker_hangup, &w);
	w.accept_pause_ev = evtimer_new(w.base, worker_accept_resume, &w);
	if (w.listen_ev == NULL || w.notify_ev == NULL || w.wake_ev == NULL ||
	    w.local_wake_ev == NULL || w.term_ev == NULL ||
	    w.accept_pause_ev == NULL || w.hup_ev == NULL)
		fatalx("worker %u: cannot create events", index);
	event_add(w.listen_ev, NULL);
	event_add(w.notify_ev, NULL);
	event_add(w.wake_ev, NULL);
	event_add(w.term_ev, NULL);
	event_add(w.hup_ev, NULL);
	/*
	 * The master blocked SIGTERM and SIGHUP for the exec (master.c):
	 * handle them now.
	 */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGHUP);
	sigprocmask(SIG_UNBLOCK, &term, NULL);
	log_debug("worker %u (generation %u) serving", index, generation);

	/*
	 * One pass at a time (every callback that is ready, and those they
	 * make ready, then back here): the records the pass appended get
	 * one kick (pending_kick), where each record had its own.  Then,
	 * with requests parked for durability, the loop watches for it a
	 * moment before it sleeps (pending_watch).
	 */
	while (event_base_loop(w.base, EVLOOP_ONCE) == 0 &&
	    !event_base_got_break(w.base) && !event_base_got_exit(w.base)) {
		pending_kick(&w);
		pending_watch(&w);
		/* The next event_base_loop would clear what the watch set. */
		if (event_base_got_break(w.base) ||
		    event_base_got_exit(w.base))
			break;
	}
	pending_kick(&w);

	fileio_stop(w.io);
	inboxview_close(&d->inbox_view);
	if (d->be->worker_stop != NULL)
		d->be->worker_stop(&w);
	pending_free_parked(&w);
	event_free(w.listen_ev);
	event_free(w.notify_ev);
	event_free(w.wake_ev);
	event_free(w.local_wake_ev);
	event_free(w.term_ev);
	event_free(w.hup_ev);
	event_free(w.accept_pause_ev);
	event_base_free(w.base);
	replytext_free(&w.effect_text);
	return 0;
}
