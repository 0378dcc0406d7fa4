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
 *    keyed or a request with an id of our form (refused: proxy_raw.c,
 *    proxy_client_raw); one nothing reads is refused only if its bytes
 *    show a tools/call (proxy_unreadable_call).
 *
 * End of the client's input: the wrapped calls still running are let
 * finish (each at most its lease, so that what ran is recorded), then
 * the child's stdin is closed, and the child is given SIGTERM, then
 * SIGKILL, if it does not exit (as MCP's stdio shutdown says).  End of
 * the child's output: the proxy says so on stderr, the calls waiting
 * for the child are answered, and the proxy exits with its status.
 *
 * proxy_options.c reads the command line into proxy_cfg and hands the
 * downstream's command to proxy_run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <errno.h>
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

/* A JSON-RPC error to the client under id (borrowed; NULL: null). */
void
proxy_client_error(json_t *id, int code, const char *message)
{
	json_t	*answer;

	answer = json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0",
	    "id", id, "error", "code", code, "message", message);
	if (answer != NULL)
		proxy_to_client_json(answer);
	json_decref(answer);
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

/* Is id in the form of the proxy's own (PROXY_ID_PREFIX)? */
int
proxy_own_id(json_t *id)
{
	return json_is_string(id) && strncmp(json_string_value(id),
	    PROXY_ID_PREFIX, strlen(PROXY_ID_PREFIX)) == 0;
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

/* ---- the run ----------------------------------------------------------- */

int
proxy_run(char **command)
{
	pthread_t	 reader;
	int		 status;

	proxy_command = command[0];

	signal(SIGPIPE, SIG_IGN);
	/* Jansson seeds its hash lazily: once, before any thread does. */
	json_object_seed(0);
	if (proxy_spawn(command) != 0)
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
