/* SPDX-License-Identifier: ISC */
/*
 * proxy.c: the process of `idem-mcp proxy`.  It starts the downstream
 * MCP server as a child with pipes on its stdin and stdout (its stderr
 * is ours), and moves newline-delimited JSON-RPC messages both ways:
 * the main thread reads the client (our stdin), a second thread reads
 * the downstream (the child's stdout), and each side has one locked
 * writer, so that the threads of wrapped calls (proxy_call.c) write
 * whole lines too.
 *
 * Every message passes byte for byte except:
 *  - the answers to initialize and tools/list, rewritten by
 *    proxy_tools.c (their ids are remembered when the client asks);
 *  - a tools/call of a tool that is wrapped or not listed yet, or that
 *    carries a key (proxy_call_wrap: a tool the listing passes is keyed
 *    only if the ledger holds the key), handed to proxy_call.c, which
 *    answers it itself; a call of a tool wrapped or not listed yet with
 *    a null id, or none, is refused here (it cannot be answered under
 *    an id of ours);
 *  - requests the proxy sends downstream itself (the forwarded wrapped
 *    calls, its own tools/list): their ids are strings that start with
 *    PROXY_ID_PREFIX, and their answers are taken here, never passed on,
 *    even when they are not JSON (proxy_lines.c: proxy_unreadable_answer).
 *    A client request whose id happens to start with it is sent on
 *    under a fresh id of ours and its answer given back its own id, so
 *    that the two never collide;
 *  - a client's notifications/cancelled of a wrapped call: its requestId
 *    becomes the id the call went downstream under;
 *  - a JSON-RPC batch (2025-03-26), either way, is taken apart into its
 *    messages, each handled as above (their answers go one by one).
 *  - a client's line jansson reads only loosely or with its integers as
 *    doubles passes as its bytes unless it holds a call that must be
 *    keyed or a request with an id of our form (refused: proxy_client_raw);
 *    one nothing reads is refused only if its bytes show a tools/call.
 *
 * End of the client's input: the wrapped calls still running are let
 * finish (each at most its lease, so that what ran is recorded), then
 * the child's stdin is closed, and the child is given SIGTERM, then
 * SIGKILL, if it does not exit (as MCP's stdio shutdown says).  End of
 * the child's output: the proxy says so on stderr, the calls waiting
 * for the child are answered, and the proxy exits with its status.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proxy.h"
#include "protocol.h"

#define PROXY_TERM_WAIT_MS	2000	/* after stdin closed, after SIGTERM */

struct proxy_config proxy_cfg;

/* What a client's request id is remembered for. */
enum proxy_track {
	TRACK_INITIALIZE,
	TRACK_TOOLS_LIST,
	TRACK_REMAPPED,		/* sent under our id: give its own back */
	TRACK_FORWARDED		/* a wrapped call: client id -> our id */
};

struct proxy_tracked {
	struct proxy_tracked	*next;
	enum proxy_track	 what;
	char			*key;	/* the id, compact JSON */
	json_t			*id;	/* REMAPPED: theirs; FORWARDED: ours */
};

/* A request of ours waiting for its response. */
struct proxy_waiter {
	struct proxy_waiter	*next;
	char			*key;	/* our id, compact JSON */
	json_t			*response;
	pthread_cond_t		 cond;
};

static pthread_mutex_t	 proxy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t	 proxy_client_out = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t	 proxy_server_out = PTHREAD_MUTEX_INITIALIZER;
static struct proxy_tracked *proxy_tracked;
static struct proxy_waiter *proxy_waiters;
static uint64_t		 proxy_next_id;
static char		*proxy_name;		/* serverInfo.name */
static int		 proxy_server_gone;	/* its stdout ended */
static int		 proxy_client_gone;	/* our stdin ended */
static pid_t		 proxy_child = -1;
static int		 proxy_child_in = -1;	/* we write */
static int		 proxy_child_out = -1;	/* we read */
static const char	*proxy_command;

int
proxy_log(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	flockfile(stderr);
	fputs("idem-mcp proxy: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	funlockfile(stderr);
	va_end(ap);
	return -1;
}

static char *
proxy_id_key(json_t *id)
{
	return json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* ---- writers ----------------------------------------------------------- */

static int
proxy_write_line(int fd, pthread_mutex_t *lock, const char *line,
    size_t length)
{
	struct iovec	 iov[2];
	ssize_t		 w;
	int		 n = 2, status = 0;

	iov[0].iov_base = (void *)(uintptr_t)line;
	iov[0].iov_len = length;
	iov[1].iov_base = "\n";
	iov[1].iov_len = 1;
	pthread_mutex_lock(lock);
	while (n > 0) {
		w = writev(fd, iov + (2 - n), n);
		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1) {
			status = -1;
			break;
		}
		while (n > 0 && (size_t)w >= iov[2 - n].iov_len) {
			w -= (ssize_t)iov[2 - n].iov_len;
			n--;
		}
		if (n > 0) {
			iov[2 - n].iov_base = (char *)iov[2 - n].iov_base + w;
			iov[2 - n].iov_len -= (size_t)w;
		}
	}
	pthread_mutex_unlock(lock);
	return status;
}

int
proxy_to_client(const char *line, size_t length)
{
	/* A client gone is seen by the reader as the end of its input. */
	return proxy_write_line(STDOUT_FILENO, &proxy_client_out, line,
	    length);
}

int
proxy_to_server(const char *line, size_t length)
{
	return proxy_write_line(proxy_child_in, &proxy_server_out, line,
	    length);
}

static int
proxy_send_json(json_t *msg, int (*to)(const char *, size_t))
{
	char	*s;
	int	 status;

	if ((s = json_dumps(msg, JSON_COMPACT | JSON_PRESERVE_ORDER)) ==
	    NULL)
		return proxy_log("cannot serialize a message");
	status = to(s, strlen(s));
	free(s);
	return status;
}

int
proxy_to_client_json(json_t *msg)
{
	return proxy_send_json(msg, proxy_to_client);
}

/* ---- the tables -------------------------------------------------------- */

/* Remember id for what (id_value: a reference kept, may be NULL). */
static void
proxy_track(enum proxy_track what, json_t *id, json_t *id_value)
{
	struct proxy_tracked	*t;

	if ((t = calloc(1, sizeof *t)) == NULL ||
	    (t->key = proxy_id_key(id)) == NULL) {
		free(t);
		proxy_log("out of memory: a response will pass unchanged");
		return;
	}
	t->what = what;
	t->id = id_value != NULL ? json_incref(id_value) : NULL;
	pthread_mutex_lock(&proxy_lock);
	t->next = proxy_tracked;
	proxy_tracked = t;
	pthread_mutex_unlock(&proxy_lock);
}

/* Take the entry remembered for key (and, if what >= 0, that kind). */
static struct proxy_tracked *
proxy_untrack(const char *key, int what)
{
	struct proxy_tracked	**tp, *t;

	pthread_mutex_lock(&proxy_lock);
	for (tp = &proxy_tracked; (t = *tp) != NULL; tp = &t->next) {
		if (strcmp(t->key, key) == 0 && (what < 0 ||
		    t->what == (enum proxy_track)what)) {
			*tp = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&proxy_lock);
	return t;
}

static void
proxy_tracked_free(struct proxy_tracked *t)
{
	if (t == NULL)
		return;
	json_decref(t->id);
	free(t->key);
	free(t);
}

void
proxy_forwarded_set(json_t *client_id, json_t *proxy_id)
{
	proxy_track(TRACK_FORWARDED, client_id, proxy_id);
}

void
proxy_forwarded_clear(json_t *client_id)
{
	char	*key;

	if ((key = proxy_id_key(client_id)) != NULL)
		proxy_tracked_free(proxy_untrack(key, TRACK_FORWARDED));
	free(key);
}

json_t *
proxy_forwarded_id(json_t *client_id)
{
	struct proxy_tracked	*t;
	json_t			*id = NULL;
	char			*key;

	if ((key = proxy_id_key(client_id)) == NULL)
		return NULL;
	pthread_mutex_lock(&proxy_lock);
	for (t = proxy_tracked; t != NULL; t = t->next)
		if (t->what == TRACK_FORWARDED && strcmp(t->key, key) == 0) {
			id = json_incref(t->id);
			break;
		}
	pthread_mutex_unlock(&proxy_lock);
	free(key);
	return id;
}

const char *
proxy_server_name(void)
{
	const char	*name;

	pthread_mutex_lock(&proxy_lock);
	name = proxy_name;
	pthread_mutex_unlock(&proxy_lock);
	return name;
}

void
proxy_set_server_name(const char *name)
{
	char	*copy = strdup(name);

	pthread_mutex_lock(&proxy_lock);
	/* Kept for the process's life: proxy_server_name lends it. */
	if (proxy_name == NULL)
		proxy_name = copy;
	else
		free(copy);
	pthread_mutex_unlock(&proxy_lock);
}

/* A fresh id of ours, a string no client id has (see the top). */
static json_t *
proxy_new_id(void)
{
	char		buf[64];
	uint64_t	n;

	pthread_mutex_lock(&proxy_lock);
	n = ++proxy_next_id;
	pthread_mutex_unlock(&proxy_lock);
	snprintf(buf, sizeof buf, PROXY_ID_PREFIX "%" PRIu64, n);
	return json_string(buf);
}

static int64_t
proxy_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * *due moved on by tick_ms (CLOCK_MONOTONIC), or to now if that has
 * passed already: one late tick is made up for once, not several times.
 * A copy of libclient/monoclock.h's sum: this layer sees only idem.h and
 * protocol.h (tests/layers.sh), and monoclock.h is not public API.
 */
static void
proxy_tick_after(struct timespec *due, int64_t tick_ms)
{
	struct timespec	now;

	due->tv_sec += tick_ms / 1000;
	due->tv_nsec += (tick_ms % 1000) * 1000000;
	if (due->tv_nsec >= 1000000000) {
		due->tv_sec++;
		due->tv_nsec -= 1000000000;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (due->tv_sec < now.tv_sec ||
	    (due->tv_sec == now.tv_sec && due->tv_nsec < now.tv_nsec))
		*due = now;
}

json_t *
proxy_request(const char *method, json_t *params, json_t *client_id,
    int64_t tick_ms, int (*tick)(void *), void *tick_arg, int *gone)
{
	struct proxy_waiter	 w, **wp;
	struct timespec		 until;
	json_t			*id, *msg, *response;
	int			 status;

	*gone = 0;
	memset(&w, 0, sizeof w);
	if ((id = proxy_new_id()) == NULL ||
	    (w.key = proxy_id_key(id)) == NULL) {
		json_decref(id);
		proxy_log("out of memory");
		return NULL;
	}
	msg = json_pack("{s:s, s:O, s:s, s:O}", "jsonrpc", "2.0", "id", id,
	    "method", method, "params", params);
	pthread_cond_init(&w.cond, NULL);
	pthread_mutex_lock(&proxy_lock);
	w.next = proxy_waiters;
	proxy_waiters = &w;
	*gone = proxy_server_gone;
	pthread_mutex_unlock(&proxy_lock);
	if (client_id != NULL)
		proxy_forwarded_set(client_id, id);

	if (*gone || msg == NULL || proxy_send_json(msg, proxy_to_server) != 0)
		status = -1;
	else
		status = 0;
	json_decref(msg);

	/*
	 * The ticks keep their schedule: each is due tick_ms after the
	 * previous one was due (or at once, if that has passed: it ran late
	 * or took long), not tick_ms after it returned, and a wake-up that
	 * is no timeout does not push the next back.  A lease kept by
	 * ticks (proxy_call.c) then lapses only if one tick is more than
	 * the rest of a lease late, not if the lateness of each adds up.
	 */
	clock_gettime(CLOCK_MONOTONIC, &until);
	proxy_tick_after(&until, tick_ms);
	pthread_mutex_lock(&proxy_lock);
	while (status == 0 && w.response == NULL && !proxy_server_gone) {
		if (tick == NULL || tick_ms <= 0) {
			pthread_cond_wait(&w.cond, &proxy_lock);
			continue;
		}
		if (pthread_cond_clockwait(&w.cond, &proxy_lock,
		    CLOCK_MONOTONIC, &until) == ETIMEDOUT &&
		    w.response == NULL) {
			pthread_mutex_unlock(&proxy_lock);
			if (tick(tick_arg) != 0)
				status = 1;
			proxy_tick_after(&until, tick_ms);
			pthread_mutex_lock(&proxy_lock);
		}
	}
	response = w.response;
	/* Not sent, or no answer and none coming: the downstream is gone. */
	*gone = response == NULL && (status == -1 || proxy_server_gone);
	for (wp = &proxy_waiters; *wp != NULL; wp = &(*wp)->next)
		if (*wp == &w) {
			*wp = w.next;
			break;
		}
	pthread_mutex_unlock(&proxy_lock);
	if (client_id != NULL)
		proxy_forwarded_clear(client_id);
	pthread_cond_destroy(&w.cond);
	free(w.key);
	json_decref(id);
	return response;
}

/*
 * A response to one of our requests: hand it over (steals msg).  1 if a
 * request waited for it, 0 if none did (msg dropped).
 */
int
proxy_deliver(const char *key, json_t *msg)
{
	struct proxy_waiter	*w;

	pthread_mutex_lock(&proxy_lock);
	for (w = proxy_waiters; w != NULL; w = w->next)
		if (strcmp(w->key, key) == 0 && w->response == NULL) {
			w->response = msg;
			pthread_cond_signal(&w->cond);
			break;
		}
	pthread_mutex_unlock(&proxy_lock);
	if (w == NULL) {
		/* A late answer to a request we stopped waiting for. */
		json_decref(msg);
	}
	return w != NULL;
}

/* ---- the two directions ------------------------------------------------ */

/*
 * A JSON-RPC batch (2025-03-26 has them) is taken apart into its
 * messages, each handled as a line of its own, so that a wrapped call
 * or a tools/list answer in a batch is seen; their answers go one by one.
 * Steals msg.
 */
static void
proxy_split_batch(json_t *msg, void (*handle)(char *, size_t))
{
	json_t	*item;
	char	*s;
	size_t	 i;

	json_array_foreach(msg, i, item) {
		if ((s = json_dumps(item, JSON_COMPACT | JSON_PRESERVE_ORDER |
		    JSON_ENCODE_ANY)) == NULL) {
			proxy_log("out of memory: a batch's message dropped");
			continue;
		}
		handle(s, strlen(s));
		free(s);
	}
	json_decref(msg);
}

/*
 * Must this call be keyed whatever else, so that one the proxy cannot
 * serve on a thread of its own (no id to answer it under, a line jansson
 * cannot read exactly) is refused rather than passed?  Its tool is
 * wrapped, or not listed yet, or the listing passes it but the call
 * carries a key (PROXY_LOOKUP): the ledger may hold that key, and only a
 * call's own thread can ask it (here it would hold up the client's
 * reader), so passed unasked it could run a second time.
 */
static int
proxy_call_must_key(const char *name, json_t *params)
{
	return proxy_call_wrap(name, params, 0, NULL) != PROXY_PASSED;
}

/* A JSON-RPC error to the client under id (borrowed; NULL: null). */
static void
proxy_client_error(json_t *id, int code, const char *message)
{
	json_t	*answer;

	answer = json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0",
	    "id", id, "error", "code", code, "message", message);
	if (answer != NULL)
		proxy_to_client_json(answer);
	json_decref(answer);
}

/* Is msg a tools/call that must be keyed (proxy_call_must_key)? */
static int
proxy_must_key_call(json_t *msg)
{
	json_t		*params = json_object_get(msg, "params");
	const char	*name;

	return strcmp(json_string_value(json_object_get(msg, "method")) ?:
	    "", "tools/call") == 0 && (name = json_string_value(
	    json_object_get(params, "name"))) != NULL &&
	    proxy_call_must_key(name, params);
}

/* Is id in the form of the proxy's own (PROXY_ID_PREFIX)? */
static int
proxy_own_id(json_t *id)
{
	return json_is_string(id) && strncmp(json_string_value(id),
	    PROXY_ID_PREFIX, strlen(PROXY_ID_PREFIX)) == 0;
}

/* What becomes of a client's message that can pass only as its bytes. */
enum proxy_raw {
	RAW_PASSED,
	RAW_MUST_KEY,	/* a call that must be keyed (proxy_must_key_call) */
	RAW_OWN_ID	/* a request with an id in the proxy's own form */
};

/*
 * What becomes of msg.  Read with its integers as doubles, an integer id
 * came back a double: made one again, so that an answer gives it back.
 */
static enum proxy_raw
proxy_raw_kind(json_t *msg)
{
	json_t	*id = json_object_get(msg, "id");

	if (json_is_real(id) && json_real_value(id) ==
	    (double)(json_int_t)json_real_value(id))
		json_object_set_new(msg, "id",
		    json_integer((json_int_t)json_real_value(id)));
	if (proxy_must_key_call(msg))
		return RAW_MUST_KEY;
	if (json_object_get(msg, "method") != NULL &&
	    proxy_own_id(json_object_get(msg, "id")))
		return RAW_OWN_ID;
	return RAW_PASSED;
}

/* The refusal of one message of a line not sent on (proxy_client_raw). */
static void
proxy_raw_refuse(json_t *msg, enum proxy_raw kind, int loose)
{
	static const char	 unread[] = "idem-mcp proxy: the call was not "
	    "made: idem cannot read it exactly (U+0000 in an object key, a "
	    "UTF-16 surrogate not in a pair, or invalid UTF-8), so it "
	    "cannot key or record it";
	static const char	 own[] = "idem-mcp proxy: not sent: ids that "
	    "start with " PROXY_ID_PREFIX " are the proxy's own";
	static const char	 held[] = "idem-mcp proxy: not sent: its batch "
	    "holds a message the proxy refused; send this message on its "
	    "own";
	json_t			*id = json_object_get(msg, "id"), *answer;

	/* Only a request is answered (nothing waits for the others). */
	if (json_object_get(msg, "method") == NULL || id == NULL)
		return;
	if (kind == RAW_OWN_ID)
		proxy_client_error(id, -32600, own);
	else if (kind == RAW_PASSED)
		proxy_client_error(id, -32602, held);
	else if (loose)
		proxy_client_error(id, -32602, unread);
	else {
		answer = json_pack("{s:s, s:O, s:{s:[{s:s, s:s}], s:b, "
		    "s:{s:{s:s, s:b}}}}", "jsonrpc", "2.0", "id", id, "result",
		    "content", "type", "text", "text", "The call was not made: "
		    "its arguments hold a number beyond 64 bits, which idem "
		    "cannot key exactly; send it as a string.", "isError", 1,
		    "_meta", PROXY_META_ERROR, "disposition",
		    "refused_by_broker", "retryable", 0);
		if (answer != NULL)
			proxy_to_client_json(answer);
		json_decref(answer);
	}
}

/*
 * A client's line that can pass only as the bytes it came in: JSON that
 * jansson reads only loosely (loose: proxy_json_load) or only with its
 * integers as doubles (one past 64 bits); msg, so read, is stolen.
 * Neither reading is what was sent, so the proxy cannot handle a
 * message in it as it would the same message read exactly:
 *  - a call that must be keyed cannot be keyed as sent (and the broker
 *    refuses U+0000 anyway); passed on, it would reach the server
 *    unkeyed, run on every retry: refused, Invalid params (loose) or a
 *    tool error that says to send the number as a string;
 *  - a request whose id is in the proxy's own form cannot be sent under
 *    an id of ours (its bytes are not ours to rewrite); passed, its
 *    answer would be taken for that of a request of the proxy's own (a
 *    wrapped call's result, recorded): refused, Invalid Request.
 * Any other message passes as its bytes (it is JSON).  A batch holding
 * a refused message is not sent either (its other messages cannot pass
 * without its bytes): each request in it is refused.
 */
static void
proxy_client_raw(const char *line, size_t length, json_t *msg, int loose)
{
	json_t	*item;
	size_t	 i;
	int	 refused = 0;

	if (json_is_array(msg)) {
		json_array_foreach(msg, i, item)
			refused += proxy_raw_kind(item) != RAW_PASSED;
	} else
		refused = proxy_raw_kind(msg) != RAW_PASSED;
	if (refused == 0) {
		json_decref(msg);
		proxy_to_server(line, length);
		return;
	}
	proxy_log("client: a line read %s%s holds a tools/call that must be "
	    "keyed or an id of the proxy's form: refused, not sent on",
	    loose ? "loosely" : "with its integers as doubles",
	    json_is_array(msg) ? " (a batch)" : "");
	if (!json_is_array(msg))
		proxy_raw_refuse(msg, proxy_raw_kind(msg), loose);
	else
		json_array_foreach(msg, i, item)
			proxy_raw_refuse(item, proxy_raw_kind(item), loose);
	json_decref(msg);
}

/*
 * A client's line jansson cannot read as it stands (or is not an object
 * or a batch).  Read again, integers as doubles and loosely if need
 * be, it goes to proxy_client_raw.  A line nothing reads (a number past
 * a double, nesting deeper than jansson's limit, not JSON at all) is
 * answered Parse error and not sent on if its bytes show a tools/call
 * at a message's top level: it may be the call of a wrapped tool, and
 * a lenient server may read it (Node reads 1e400 as Infinity) and run
 * that tool unkeyed.  Any other passes as it came, as it always did:
 * the server answers its own parse error, and a message the proxy
 * cannot read but the server can (an answer to its request) reaches it.
 * 1 if handled here, 0 if the line is to pass as it came.
 */
static int
proxy_unreadable_call(const char *line, size_t length)
{
	json_t		*msg, *id;
	int		 loose;

	msg = proxy_json_load(line, length, JSON_DECODE_INT_AS_REAL, &loose);
	if (msg != NULL) {
		proxy_client_raw(line, length, msg, loose);
		return 1;
	}
	if (!proxy_unreadable_request(line, length, &id))
		return 0;
	proxy_log("client: a tools/call that cannot be read (%zu bytes): "
	    "answered Parse error, not sent on", length);
	/*
	 * Under the id its bytes show, if a request's: JSON-RPC answers a
	 * Parse error under a null id, but a client (the TypeScript SDK)
	 * drops an error with a null id, and its request would wait for
	 * ever.
	 */
	proxy_client_error(id, -32700, "idem-mcp proxy: a tools/call that "
	    "the proxy cannot read (not JSON, a number past a double, or "
	    "nested too deep): not sent on");
	json_decref(id);
	return 1;
}

static void
proxy_from_client(char *line, size_t length)
{
	json_t		*msg, *id, *params, *fid;
	const char	*method, *name;
	int		 loose;

	/* NUL in strings reads here, so that the broker refuses it. */
	msg = proxy_json_load(line, length, 0, &loose);
	if (loose) {
		proxy_client_raw(line, length, msg, 1);
		return;
	}
	if (json_is_array(msg) && json_array_size(msg) > 0) {
		proxy_split_batch(msg, proxy_from_client);
		return;
	}
	if (!json_is_object(msg)) {
		json_decref(msg);
		if (proxy_unreadable_call(line, length))
			return;
		/* JSON, not ours to judge: the downstream answers it. */
		proxy_to_server(line, length);
		return;
	}
	method = json_string_value(json_object_get(msg, "method"));
	id = json_object_get(msg, "id");
	params = json_object_get(msg, "params");
	if (method != NULL && id != NULL && !json_is_null(id)) {
		if (strcmp(method, "tools/call") == 0 &&
		    (name = json_string_value(json_object_get(params,
		    "name"))) != NULL &&
		    proxy_call_wrap(name, params, 0, NULL) != PROXY_PASSED) {
			if (proxy_call_start(msg) != 0)
				proxy_log("cannot start a thread for a call");
			return;
		}
		if (strcmp(method, "initialize") == 0)
			proxy_track(TRACK_INITIALIZE, id, NULL);
		else if (strcmp(method, "tools/list") == 0)
			proxy_track(TRACK_TOOLS_LIST, id, NULL);
		if (proxy_own_id(id)) {
			/* It would collide with ours: sent under our own. */
			fid = proxy_new_id();
			proxy_track(TRACK_REMAPPED, fid, id);
			json_object_set_new(msg, "id", fid);
			proxy_send_json(msg, proxy_to_server);
			json_decref(msg);
			return;
		}
	} else if (method != NULL && strcmp(method, "tools/call") == 0 &&
	    (name = json_string_value(json_object_get(params, "name"))) !=
	    NULL && proxy_call_must_key(name, params)) {
		/*
		 * A call that must be keyed (proxy_call_must_key) with a
		 * null id, or none (a notification): the proxy cannot answer
		 * it under an id of its own, and passed on it would reach
		 * the server unkeyed, run on every retry.  Refused (Invalid
		 * Request, as JSON-RPC answers a null id), or, with no id,
		 * dropped.
		 */
		proxy_log("client: a tools/call of %s %s: not sent on", name,
		    id != NULL ? "with a null id" : "without an id");
		if (id != NULL)
			proxy_client_error(NULL, -32600, "idem-mcp proxy: a "
			    "tools/call needs an id that is not null");
		json_decref(msg);
		return;
	} else if (method != NULL && strcmp(method,
	    "notifications/cancelled") == 0 && (id = json_object_get(params,
	    "requestId")) != NULL) {
		/* Not answered now, and not waited for past a lease. */
		proxy_call_cancel(id);
		if ((fid = proxy_forwarded_id(id)) != NULL) {
			json_object_set_new(params, "requestId", fid);
			proxy_send_json(msg, proxy_to_server);
			json_decref(msg);
			return;
		}
	}
	json_decref(msg);
	proxy_to_server(line, length);
}

static void
proxy_from_server(char *line, size_t length)
{
	struct proxy_tracked	*t;
	json_t			*msg, *id, *result;
	char			*key;
	int			 loose;

	msg = proxy_json_load(line, length, 0, &loose);
	if (json_is_array(msg) && json_array_size(msg) > 0 && !loose) {
		proxy_split_batch(msg, proxy_from_server);
		return;
	}
	if (msg == NULL) {
		/*
		 * An integer past 64 bits: an answer to a call of ours must
		 * still reach its call, read as a double (as a JavaScript
		 * client reads it anyway).
		 */
		msg = proxy_json_load(line, length, JSON_DECODE_INT_AS_REAL,
		    &loose);
		if (loose || !proxy_own_id(json_object_get(msg, "id"))) {
			json_decref(msg);
			msg = NULL;
		}
	}
	if (loose) {
		/*
		 * Read only loosely (proxy_json_load: U+0000 in an object key,
		 * a UTF-16 surrogate not in a pair, invalid UTF-8): what it
		 * holds cannot be read exactly, nor recorded.  An answer to a
		 * request of ours is that request's unreadable answer (a
		 * wrapped call: server_invalid_answer, left unsettled, even
		 * if only its result's text was cut in a character: the known
		 * limit, doc/mcp-proxy.md); any other line passes as it came.
		 */
		json_decref(msg);
		msg = NULL;
		if (proxy_unreadable_answer(line, length,
		    "that jansson reads only loosely"))
			return;
	} else if (msg == NULL && proxy_unreadable_answer(line, length,
	    "that is not JSON"))
		return;
	if (!json_is_object(msg) || json_object_get(msg, "method") != NULL ||
	    (id = json_object_get(msg, "id")) == NULL ||
	    (key = proxy_id_key(id)) == NULL) {
		json_decref(msg);
		proxy_to_client(line, length);
		return;
	}
	if (proxy_own_id(id)) {
		if ((t = proxy_untrack(key, TRACK_REMAPPED)) == NULL) {
			proxy_deliver(key, msg);
			free(key);
			return;
		}
		json_object_set(msg, "id", t->id);
		free(key);
		key = proxy_id_key(t->id);
		proxy_tracked_free(t);
		if (key == NULL) {
			json_decref(msg);
			return;
		}
		/* Rewritten anyway: no bytes left to keep. */
		length = 0;
	}
	result = json_object_get(msg, "result");
	if ((t = proxy_untrack(key, TRACK_INITIALIZE)) != NULL) {
		if (json_is_object(result))
			proxy_initialize_result(result);
		length = 0;
	} else if ((t = proxy_untrack(key, TRACK_TOOLS_LIST)) != NULL) {
		if (json_is_object(result))
			proxy_tools_list_result(result);
		length = 0;
	}
	proxy_tracked_free(t);
	free(key);
	if (length == 0)
		proxy_send_json(msg, proxy_to_client);
	else
		proxy_to_client(line, length);
	json_decref(msg);
}

/*
 * A server's line over the limit, dropped: if it answers a request of
 * ours (its first bytes hold the id; proxy_read_lines looks in its last
 * ones too), that request is told, as for an answer that is not JSON;
 * else a wrapped call would wait for ever, its lease kept alive.
 */
static void
proxy_server_dropped(const char *line, size_t length)
{
	(void)proxy_unreadable_answer(line, length, "over the line limit");
}

/* ---- the child --------------------------------------------------------- */

static int
proxy_spawn(char **argv)
{
	int	in[2], out[2];

	if (pipe(in) == -1 || pipe(out) == -1)
		return proxy_log("pipe: %s", strerror(errno));
	switch (proxy_child = fork()) {
	case -1:
		return proxy_log("fork: %s", strerror(errno));
	case 0:
		if (dup2(in[0], STDIN_FILENO) == -1 ||
		    dup2(out[1], STDOUT_FILENO) == -1)
			_exit(127);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		fprintf(stderr, "idem-mcp proxy: %s: %s\n", argv[0],
		    strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	proxy_child_in = in[1];
	proxy_child_out = out[0];
	return 0;
}

/* Reap the child within ms; its exit status (128+N for signal N) or -1. */
static int
proxy_reap(int64_t ms)
{
	int64_t	until = proxy_now_ms() + ms;
	int	status;
	pid_t	r;

	for (;;) {
		r = waitpid(proxy_child, &status, WNOHANG);
		if (r == proxy_child)
			return WIFEXITED(status) ? WEXITSTATUS(status) :
			    128 + WTERMSIG(status);
		if (r == -1 && errno != EINTR)
			return 1;
		if (proxy_now_ms() >= until)
			return -1;
		usleep(10000);
	}
}

static void *
proxy_server_reader(void *arg)
{
	int	status, client_gone;

	(void)arg;
	proxy_read_lines(proxy_child_out, "server", proxy_from_server,
	    proxy_server_dropped);
	pthread_mutex_lock(&proxy_lock);
	proxy_server_gone = 1;
	for (struct proxy_waiter *w = proxy_waiters; w != NULL; w = w->next)
		pthread_cond_signal(&w->cond);
	client_gone = proxy_client_gone;
	pthread_mutex_unlock(&proxy_lock);
	if (client_gone)
		return NULL;	/* the main thread is shutting it down */
	/* Let the calls that waited for it answer their clients. */
	proxy_calls_wait(PROXY_TERM_WAIT_MS);
	if ((status = proxy_reap(PROXY_TERM_WAIT_MS)) == -1) {
		kill(proxy_child, SIGKILL);
		status = proxy_reap(PROXY_TERM_WAIT_MS);
	}
	proxy_log("the server (%s) closed its output%s%d; exiting",
	    proxy_command, status > 128 ? " and died of signal " :
	    " and exited with status ", status > 128 ? status - 128 : status);
	_exit(status == 0 ? 0 : 1);
}

/* ---- options ----------------------------------------------------------- */

enum {
	OPT_SOCKET = 256,
	OPT_ROOT,
	OPT_NAME,
	OPT_SCOPE,
	OPT_WRAP,
	OPT_PASS,
	OPT_LEASE
};

static void	proxy_usage(FILE *, int) __attribute__((noreturn));

static void
proxy_usage(FILE *out, int status)
{
	fprintf(out,
"usage: idem-mcp proxy [--root DIR | --socket PATH] [--name NAME] [--scope S]\n"
"                      [--wrap TOOL]... [--pass TOOL]... [--lease-ms N]\n"
"                      -- COMMAND [ARG...]\n"
"\n"
"Serve MCP on stdio in front of the MCP server COMMAND, making its tools\n"
"with side effects idempotent: each gains a required idempotency_key\n"
"argument, and a call is performed at most once per key (idemd keeps the\n"
"first result and answers every retry with it).  Every other message\n"
"passes unchanged.\n"
"\n"
"  --root DIR, --socket PATH  the broker, as for idem-mcp\n"
"  --name NAME     the server's name in effect kinds, mcp/NAME/TOOL\n"
"                  (default: the server's serverInfo.name)\n"
"  --scope S       a namespace of this proxy's keys: kinds S/mcp/NAME/TOOL\n"
"  --wrap TOOL     wrap TOOL even if it says it is read-only or idempotent\n"
"  --pass TOOL     never wrap TOOL\n"
"  --lease-ms N    the lease of a call at the broker (default %d); kept\n"
"                  alive while the server works on the call\n",
	    PROXY_DEFAULT_LEASE_MS);
	exit(status);
}

/* Append s to a NULL-terminated list. */
static const char **
proxy_list_add(const char **list, size_t *n, const char *s)
{
	const char	**p;

	if ((p = realloc(list, (*n + 2) * sizeof *p)) == NULL) {
		proxy_log("out of memory");
		exit(1);
	}
	p[(*n)++] = s;
	p[*n] = NULL;
	return p;
}

/* Printable ASCII without '/', as a part of a kind must be. */
static int
proxy_kind_part_ok(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (*s < 0x21 || *s > 0x7e)
			return 0;
	return 1;
}

/*
 * The line limit: PROXY_MAX_LINE_BYTES, or, in a build with fault
 * injection only, IDEM_MCP_PROXY_MAX_LINE_BYTES (a line just over 256
 * MiB costs a test that much memory twice over and seconds on each side;
 * the limit's arithmetic is the same at any size).  Set in a build
 * without, or not a whole number of bytes within [PROXY_MIN_TEST_LINE_BYTES,
 * PROXY_MAX_LINE_BYTES], it is refused, as idemd refuses its IDEM_CRASH_*:
 * a knob silently ignored or misread ("1M" as 1) would test something
 * else.  Read once, before any thread.  -1 if refused (said).
 */
static int
proxy_line_limit(size_t *limit)
{
	const char	*value = getenv("IDEM_MCP_PROXY_MAX_LINE_BYTES");
#ifdef IDEM_FAULT_INJECTION
	char		*end;
	long long	 n;
#endif

	*limit = PROXY_MAX_LINE_BYTES;
	if (value == NULL)
		return 0;
#ifdef IDEM_FAULT_INJECTION
	errno = 0;
	n = strtoll(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' ||
	    n < PROXY_MIN_TEST_LINE_BYTES || n > PROXY_MAX_LINE_BYTES) {
		proxy_log("IDEM_MCP_PROXY_MAX_LINE_BYTES=%s: not a number of "
		    "bytes from %d to %d", value, PROXY_MIN_TEST_LINE_BYTES,
		    PROXY_MAX_LINE_BYTES);
		return -1;
	}
	*limit = (size_t)n;
	return 0;
#else
	proxy_log("IDEM_MCP_PROXY_MAX_LINE_BYTES is set, but this idem-mcp "
	    "has no fault injection (configure --enable-fault-injection)");
	return -1;
#endif
}

int
proxy_main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "root", required_argument, NULL, OPT_ROOT },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "scope", required_argument, NULL, OPT_SCOPE },
		{ "wrap", required_argument, NULL, OPT_WRAP },
		{ "pass", required_argument, NULL, OPT_PASS },
		{ "lease-ms", required_argument, NULL, OPT_LEASE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static char	 socket_buf[4096];
	static const char *empty[] = { NULL };
	pthread_t	 reader;
	const char	*root = NULL;
	size_t		 nwrap = 0, npass = 0;
	char		*end;
	long long	 n;
	int		 ch, status;

	proxy_cfg.lease_ms = PROXY_DEFAULT_LEASE_MS;
	if (proxy_line_limit(&proxy_cfg.max_line_bytes) != 0)
		return 2;
	proxy_cfg.wrap = proxy_cfg.pass = empty;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
		switch (ch) {
		case OPT_SOCKET:
			proxy_cfg.socket_path = optarg;
			break;
		case OPT_ROOT:
			root = optarg;
			break;
		case OPT_NAME:
		case OPT_SCOPE:
			if (!proxy_kind_part_ok(optarg) ||
			    strlen(optarg) > IDEM_MAX_EFFECT_KIND_BYTES / 2) {
				fprintf(stderr, "idem-mcp proxy: --%s: 1..%d "
				    "printable ASCII characters, no spaces\n",
				    ch == OPT_NAME ? "name" : "scope",
				    IDEM_MAX_EFFECT_KIND_BYTES / 2);
				return 2;
			}
			if (ch == OPT_NAME)
				proxy_cfg.name = optarg;
			else
				proxy_cfg.scope = optarg;
			break;
		case OPT_WRAP:
			proxy_cfg.wrap = proxy_list_add(nwrap == 0 ? NULL :
			    proxy_cfg.wrap, &nwrap, optarg);
			break;
		case OPT_PASS:
			proxy_cfg.pass = proxy_list_add(npass == 0 ? NULL :
			    proxy_cfg.pass, &npass, optarg);
			break;
		case OPT_LEASE:
			errno = 0;
			n = strtoll(optarg, &end, 10);
			if (errno != 0 || *end != '\0' ||
			    n < IDEM_MIN_LEASE_MS || n > IDEM_MAX_LEASE_MS) {
				fprintf(stderr, "idem-mcp proxy: --lease-ms: "
				    "%d..%d\n", IDEM_MIN_LEASE_MS,
				    IDEM_MAX_LEASE_MS);
				return 2;
			}
			proxy_cfg.lease_ms = n;
			break;
		case 'h':
			proxy_usage(stdout, 0);
		default:
			proxy_usage(stderr, 2);
		}
	}
	if (optind >= argc)
		proxy_usage(stderr, 2);
	if (proxy_cfg.socket_path == NULL && root != NULL) {
		if ((size_t)snprintf(socket_buf, sizeof socket_buf, "%s/%s",
		    root, IDEM_SOCKET_NAME) >= sizeof socket_buf) {
			fprintf(stderr, "idem-mcp proxy: --root: too long\n");
			return 2;
		}
		proxy_cfg.socket_path = socket_buf;
	}
	proxy_command = argv[optind];

	signal(SIGPIPE, SIG_IGN);
	/* Jansson seeds its hash lazily: once, before any thread does. */
	json_object_seed(0);
	if (proxy_spawn(argv + optind) != 0)
		return 1;
	if ((errno = pthread_create(&reader, NULL, proxy_server_reader,
	    NULL)) != 0) {
		proxy_log("pthread_create: %s", strerror(errno));
		kill(proxy_child, SIGKILL);
		return 1;
	}
	pthread_detach(reader);
	proxy_read_lines(STDIN_FILENO, "client", proxy_from_client, NULL);

	/* The client is gone: let what runs be recorded, then stop. */
	pthread_mutex_lock(&proxy_lock);
	proxy_client_gone = 1;
	pthread_mutex_unlock(&proxy_lock);
	proxy_calls_wait(proxy_cfg.lease_ms);
	pthread_mutex_lock(&proxy_server_out);
	close(proxy_child_in);
	pthread_mutex_unlock(&proxy_server_out);
	if ((status = proxy_reap(PROXY_TERM_WAIT_MS)) == -1) {
		kill(proxy_child, SIGTERM);
		if ((status = proxy_reap(PROXY_TERM_WAIT_MS)) == -1) {
			kill(proxy_child, SIGKILL);
			status = proxy_reap(PROXY_TERM_WAIT_MS);
		}
	}
	(void)status;
	return 0;
}
