/* SPDX-License-Identifier: ISC */
/*
 * proxy_call.c: one tools/call of a wrapped tool, on a thread of its own
 * so that it never holds up the messages passing by (SPEC.md, "The MCP
 * proxy"; doc/mcp-proxy.md says what the agent sees in each case).
 *
 * The call is the effect of kind [S/]mcp/NAME/TOOL keyed by its
 * idempotency_key (or SEP-3182's params.idempotencyKey), whose request
 * is the arguments without the key:
 *   proceed          forward it (key stripped, the effect's external_key
 *                    in _meta), keep the lease alive while the server
 *                    works, complete with the CallToolResult (applied) or
 *                    the JSON-RPC error (not_applied), answer it;
 *   reused           answer the stored CallToolResult as first answered
 *                    (or, for a result the ledger cannot keep, larger
 *                    than it keeps or holding U+0000, say that it was
 *                    applied and its result not kept);
 *   in_progress      poll the broker until the first call ends, at most
 *                    a lease long;
 *   conflict, outcome_unknown, broker down
 *                    a tool error (isError) saying what to do; the
 *                    server is not called.
 * The server dying or the proxy dying before the complete leaves the
 * effect reserved: once its lease lapses it is outcome_unknown, never
 * performed a second time.  Broker connections are pooled; one found
 * dead (the broker restarted) is replaced once per call.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "proxy.h"

#define CALL_POOL_SIZE		16	/* idle connections kept */
#define CALL_CONNS_MAX		32	/* connections held at once */
#define CALL_THREADS_MAX	1024	/* wrapped calls in flight */
#define CALL_IDLE_MAX		8	/* threads kept waiting for a call */
#define CALL_POLL_FIRST_MS	5	/* in_progress: the first wait */
#define CALL_POLL_MAX_MS	200
#define CALL_LIST_PAGES_MAX	100	/* our own tools/list */

struct call {
	struct call		*next;		/* calls_running */
	struct call		*queued;	/* calls_queue */
	json_t			*request;	/* the client's tools/call */
	json_t			*id;		/* its id (borrowed) */
	char			*id_key;	/* the id, compact JSON */
	const char		*tool;
	int			 has_output_schema;
	int			 cancelled;	/* under calls_lock */
	int64_t			 cancelled_at;	/* the tick that saw it */
	char			 key[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char			 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	json_t			*arguments;	/* without the key, or NULL */
	char			*request_json;
	struct idem_conn	*conn;
	struct idem_effect	 begun;
};

static pthread_mutex_t	 calls_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 calls_done = PTHREAD_COND_INITIALIZER;
static struct call	*calls_running;
static int		 calls_count;
/*
 * A thread whose call ended waits here for the next one instead of
 * exiting (at most CALL_IDLE_MAX do): starting a thread per call, and
 * the kernel's freeing its stack at its exit, was a tenth of what the
 * proxy added to a call.  calls_idle counts the waiting threads not yet
 * promised a queued call.
 */
static pthread_cond_t	 calls_work = PTHREAD_COND_INITIALIZER;
static struct call	*calls_queue, **calls_queue_tail = &calls_queue;
static int		 calls_idle;

static pthread_mutex_t	 pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 pool_free = PTHREAD_COND_INITIALIZER;
static struct idem_conn	*pool[CALL_POOL_SIZE];
static size_t		 npool;
static int		 pool_out;	/* connections a call holds */

/* ---- the broker's connections ----------------------------------------- */

/*
 * A connection to the broker, from the pool or new.  At most
 * CALL_CONNS_MAX are held at once (the broker refuses a process past
 * --max-connections-per-pid, 64 by default): a call past them waits for
 * one.  A call holds one only while it talks to the broker, not while
 * the server works.
 */
static struct idem_conn *
call_conn_get(struct idem_error *err)
{
	struct idem_conn	*conn = NULL;

	pthread_mutex_lock(&pool_lock);
	while (npool == 0 && pool_out >= CALL_CONNS_MAX)
		pthread_cond_wait(&pool_free, &pool_lock);
	if (npool > 0)
		conn = pool[--npool];
	pool_out++;
	pthread_mutex_unlock(&pool_lock);
	if (conn == NULL &&
	    (conn = idem_connect(proxy_cfg.socket_path, err)) == NULL) {
		pthread_mutex_lock(&pool_lock);
		pool_out--;
		pthread_cond_signal(&pool_free);
		pthread_mutex_unlock(&pool_lock);
	}
	return conn;
}

/* Give a connection back (dead: closed, not pooled); NULL is none. */
static void
call_conn_release(struct idem_conn *conn, int dead)
{
	if (conn == NULL)
		return;
	pthread_mutex_lock(&pool_lock);
	pool_out--;
	if (!dead && npool < CALL_POOL_SIZE) {
		pool[npool++] = conn;
		conn = NULL;
	}
	pthread_cond_signal(&pool_free);
	pthread_mutex_unlock(&pool_lock);
	if (conn != NULL)
		idem_close(conn);
}

static void
call_conn_put(struct call *c)
{
	call_conn_release(c->conn, 0);
	c->conn = NULL;
}

static void
call_conn_drop(struct call *c)
{
	call_conn_release(c->conn, 1);
	c->conn = NULL;
}

static void
call_sleep_ms(int64_t ms)
{
	struct timespec	ts;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int64_t
call_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- answers ------------------------------------------------------------ */

static int
call_cancelled(struct call *c)
{
	int	cancelled;

	pthread_mutex_lock(&calls_lock);
	cancelled = c->cancelled;
	pthread_mutex_unlock(&calls_lock);
	return cancelled;
}

/*
 * Answer the client with result_text, a JSON text used as is: the same
 * bytes whether the result comes from the server or from the ledger.
 */
static void
call_answer_text(struct call *c, const char *result_text)
{
	static const char	 head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
	char			*line;
	size_t			 length;

	/* A cancelled request is not answered (MCP, cancellation). */
	if (call_cancelled(c))
		return;
	length = strlen(head) + strlen(c->id_key) + strlen(",\"result\":") +
	    strlen(result_text) + 1;
	if ((line = malloc(length + 1)) == NULL) {
		proxy_log("out of memory answering a call");
		return;
	}
	snprintf(line, length + 1, "%s%s,\"result\":%s}", head, c->id_key,
	    result_text);
	proxy_to_client(line, strlen(line));
	free(line);
}

static void
call_answer_json(struct call *c, const char *member, json_t *value)
{
	json_t	*msg;

	if (call_cancelled(c))
		return;
	msg = json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", c->id,
	    member, value);
	if (msg != NULL)
		proxy_to_client_json(msg);
	json_decref(msg);
}

/*
 * A result of the proxy's own: the text for the model, and the facts
 * under _meta for programs.
 */
static void
call_vproxy_result(struct call *c, int is_error, const char *disposition,
    int retryable, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

static void
call_vproxy_result(struct call *c, int is_error, const char *disposition,
    int retryable, const char *fmt, va_list ap)
{
	json_t	*result, *facts;
	char	 text[2048];

	vsnprintf(text, sizeof text, fmt, ap);
	facts = json_pack("{s:s, s:b}", "disposition", disposition,
	    "retryable", retryable);
	if (c->kind[0] != '\0')
		json_object_set_new(facts, "effect_kind", json_string(c->kind));
	if (c->key[0] != '\0')
		json_object_set_new(facts, "idempotency_key",
		    json_string(c->key));
	result = json_pack("{s:[{s:s, s:s}], s:b, s:{s:o}}", "content",
	    "type", "text", "text", text, "isError", is_error, "_meta",
	    PROXY_META_ERROR, facts);
	call_answer_json(c, "result", result);
	json_decref(result);
}

static void
call_proxy_result(struct call *c, int is_error, const char *disposition,
    int retryable, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void
call_proxy_result(struct call *c, int is_error, const char *disposition,
    int retryable, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	call_vproxy_result(c, is_error, disposition, retryable, fmt, ap);
	va_end(ap);
}

/* A tool error (isError): the call was not made, or its end is unknown. */
static void
call_tool_error(struct call *c, const char *disposition, int retryable,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void
call_tool_error(struct call *c, const char *disposition, int retryable,
    const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	call_vproxy_result(c, 1, disposition, retryable, fmt, ap);
	va_end(ap);
}

/* reused: the stored result, or what its stand-in stands for. */
static void
call_answer_stored(struct call *c, const char *stored)
{
	char	told[2048];

	if (!proxy_standin_told(stored, c->key, c->kind, told, sizeof told)) {
		call_answer_text(c, stored);
		return;
	}
	/*
	 * Applied, not kept: not an error, or the model would try anew.
	 * But a tool with an outputSchema must return structured content
	 * unless isError, and that content is gone: there it has to be.
	 */
	call_proxy_result(c, c->has_output_schema, "reused_result_not_kept", 0,
	    "%s", told);
}

/* ---- the effect protocol ------------------------------------------------ */

/* effect_begin; a pooled connection found dead is replaced once. */
static int
call_begin(struct call *c, struct idem_error *err)
{
	int	tries;

	for (tries = 0; tries < 2; tries++) {
		if (c->conn == NULL && (c->conn = call_conn_get(err)) == NULL)
			return -1;
		idem_effect_clear(&c->begun);
		memset(&c->begun, 0, sizeof c->begun);
		if (idem_effect_begin(c->conn, c->key, c->kind,
		    c->request_json, proxy_cfg.lease_ms, &c->begun, err) == 0)
			return 0;
		if (err->code != IDEM_E_TRANSPORT)
			return -1;
		call_conn_drop(c);
	}
	return -1;
}

/*
 * effect_complete, sent again (the same fence and result) while the
 * broker cannot be reached or answers a retryable error, for at most a
 * lease: what ran is recorded if the broker comes back in time.  0 once
 * the broker answered.
 */
static int
call_complete(struct call *c, int applied, const char *result_json)
{
	struct idem_effect	out;
	struct idem_error	err;
	int64_t			until = call_now_ms() + proxy_cfg.lease_ms;
	int64_t			wait = 20;
	int			status;

	for (;;) {
		memset(&out, 0, sizeof out);
		memset(&err, 0, sizeof err);
		if (c->conn == NULL)
			c->conn = call_conn_get(&err);
		status = c->conn == NULL ? -1 : idem_effect_complete(c->conn,
		    c->key, c->kind, c->begun.fence, applied, result_json,
		    &out, &err);
		if (status == 0 && out.disposition == IDEM_EFFECT_CONFLICT)
			proxy_log("%s %s: complete: conflict (%s): %s",
			    c->kind, c->key, err.reason, err.message);
		idem_effect_clear(&out);
		if (status == 0)
			return 0;
		if (c->conn != NULL && !err.retryable)
			return proxy_log("%s %s: complete: %s", c->kind,
			    c->key, err.message);
		/* Unreachable, or storage_unavailable and the like: again. */
		if (wait == 20)
			proxy_log("%s %s: complete: %s; sent again until the "
			    "broker answers, for at most a lease", c->kind,
			    c->key, err.message);
		if (err.code == IDEM_E_TRANSPORT)
			call_conn_drop(c);
		else
			call_conn_put(c);
		if (call_now_ms() + wait > until)
			return proxy_log("%s %s: complete: %s, for a lease: "
			    "the call stays unsettled and becomes "
			    "outcome_unknown", c->kind, c->key, err.message);
		call_sleep_ms(wait);
		if (wait < 1000)
			wait *= 2;
	}
}

/*
 * Every third of a lease while the server works on the call: keep the
 * lease alive.  A call the client cancelled is waited for one lease more
 * (the server may still answer, and what ran is then recorded), without
 * extending: if no answer comes, it is left to become outcome_unknown.
 */
static int
call_tick(void *arg)
{
	struct call		*c = arg;
	struct idem_effect	 out;
	struct idem_error	 err;

	if (call_cancelled(c)) {
		if (c->cancelled_at == 0)
			c->cancelled_at = call_now_ms();
		return call_now_ms() - c->cancelled_at >= proxy_cfg.lease_ms;
	}
	memset(&out, 0, sizeof out);
	memset(&err, 0, sizeof err);
	/* A connection for the moment of the extension. */
	if (c->conn == NULL && (c->conn = call_conn_get(&err)) == NULL) {
		proxy_log("%s %s: extend: %s (tried again next tick)",
		    c->kind, c->key, err.message);
		return 0;
	}
	if (idem_effect_extend(c->conn, c->key, c->kind, c->begun.fence,
	    proxy_cfg.lease_ms, &out, &err) != 0) {
		if (err.code == IDEM_E_TRANSPORT)
			call_conn_drop(c);
		else
			call_conn_put(c);
		proxy_log("%s %s: extend: %s (tried again next tick)",
		    c->kind, c->key, err.message);
		return 0;
	}
	call_conn_put(c);
	/*
	 * Lapsed (the broker was away longer than a lease) or taken over:
	 * the server's answer is still waited for and passed on; the
	 * complete says whether it can still be recorded.
	 */
	if (out.disposition != IDEM_EFFECT_EXTENDED)
		proxy_log("%s %s: extend: %s%s%s", c->kind, c->key,
		    out.disposition == IDEM_EFFECT_OUTCOME_UNKNOWN ?
		    "the lease had lapsed" : "conflict",
		    err.reason[0] != '\0' ? ": " : "", err.reason);
	idem_effect_clear(&out);
	return 0;
}

/* proceed: forward, record, answer. */
static void
call_forward(struct call *c)
{
	json_t			*params, *meta, *response, *result;
	char			*text, *standin = NULL;
	const char		*failed = NULL;
	size_t			 length;
	enum proxy_not_kept	 why;
	int			 gone;

	if (call_cancelled(c)) {
		/* Cancelled before it went downstream: it did not run. */
		call_complete(c, 0, NULL);
		return;
	}
	/*
	 * A copy to send: the key stripped, the external_key in _meta.
	 * (The request was read strictly: no key holds U+0000, which
	 * json_deep_copy would cut.)
	 */
	meta = NULL;
	if ((params = json_deep_copy(json_object_get(c->request,
	    "params"))) != NULL) {
		json_object_del(params, PROXY_KEY_PARAM);
		meta = json_object_get(params, "_meta");
		if (c->arguments != NULL && json_object_set(params,
		    "arguments", c->arguments) != 0)
			meta = NULL;
		else if (!json_is_object(meta) && json_object_set_new(params,
		    "_meta", meta = json_object()) != 0)
			meta = NULL;	/* freed by json_object_set_new */
	}
	if (meta == NULL || json_object_set_new(meta, PROXY_META_EXTERNAL_KEY,
	    json_string(c->begun.external_key)) != 0) {
		/* Not sent: it did not run. */
		proxy_log("%s %s: out of memory building the call to send on: "
		    "released, not sent", c->kind, c->key);
		json_decref(params);
		call_complete(c, 0, NULL);
		call_tool_error(c, "internal", 1, "The call was not made: "
		    "idem-mcp proxy ran out of memory. Retry the same call "
		    "with the same idempotency key.");
		return;
	}
	/* Not held while the server works: others may need it. */
	call_conn_put(c);
	response = proxy_request("tools/call", params, c->id,
	    proxy_cfg.lease_ms / 3, call_tick, c, &gone);
	json_decref(params);

	if (response == NULL && !gone) {
		proxy_log("%s %s: cancelled and not answered within a lease: "
		    "left unsettled", c->kind, c->key);
		return;
	}
	if (response == NULL) {
		call_tool_error(c, "server_exited", 0,
		    "The MCP server exited while it worked on this call "
		    "(idempotency key %s, effect %s): the call may have "
		    "acted. idem will not perform it again for this key; once "
		    "its lease lapses a retry reports outcome_unknown until "
		    "someone checks and settles it (idemctl resolve '%s' "
		    "'%s' applied|not_applied).", c->key, c->kind, c->kind,
		    c->key);
		return;
	}
	if ((result = json_object_get(response, "result")) == NULL &&
	    !json_is_object(json_object_get(response, "error"))) {
		/*
		 * Neither a result nor an error object (or, from proxy.c,
		 * an answer that is not JSON): no answer JSON-RPC knows,
		 * so nothing says the call did not run.  Releasing the key
		 * (not_applied) would let a retry run it a second time, and
		 * answering nothing would leave the client waiting for
		 * ever: a tool error, and the effect left to become
		 * outcome_unknown, as when the server dies.
		 */
		proxy_log("%s %s: the server's answer is neither a result nor "
		    "an error: left unsettled", c->kind, c->key);
		call_tool_error(c, "server_invalid_answer", 0,
		    "The MCP server answered this call (idempotency key %s, "
		    "effect %s) with a message that is neither a result nor an "
		    "error, or is not JSON: the call may have acted. idem will "
		    "not perform it again for this key; once its lease lapses "
		    "a retry reports outcome_unknown until someone checks and "
		    "settles it (idemctl resolve '%s' '%s' "
		    "applied|not_applied).", c->key, c->kind, c->kind, c->key);
		json_decref(response);
		return;
	}
	if (result == NULL) {
		/* Refused (a JSON-RPC error): it did not run. */
		call_complete(c, 0, NULL);
		call_answer_json(c, "error", json_object_get(response,
		    "error"));
		json_decref(response);
		return;
	}
	text = json_dumps(result, JSON_COMPACT | JSON_PRESERVE_ORDER |
	    JSON_ENCODE_ANY);
	if (text == NULL) {
		proxy_log("%s %s: cannot serialize the result", c->kind,
		    c->key);
		json_decref(response);
		return;
	}
	length = strlen(text);
	/* Applied either way: a retry is told so, never left unknown. */
	if ((why = proxy_not_kept(text, length)) != PROXY_KEPT &&
	    (standin = proxy_standin(why, result, text, length,
	    &failed)) == NULL)
		proxy_log("%s %s: out of memory building %s of a result the "
		    "ledger cannot keep (%zu bytes%s): the result itself is "
		    "sent to the broker, which will refuse it, and the call "
		    "left unsettled", c->kind, c->key, failed, length,
		    why == PROXY_NOT_STORABLE ? ", U+0000" : "");
	call_complete(c, 1, standin != NULL ? standin : text);
	call_answer_text(c, text);
	free(standin);
	free(text);
	json_decref(response);
}

/* The server's name in kinds: printable ASCII, '_' for the rest. */
static void
call_kind(struct call *c)
{
	const char	*name;
	char		*p;
	int		 n;

	if ((name = proxy_cfg.name) == NULL &&
	    (name = proxy_server_name()) == NULL)
		name = "server";
	n = snprintf(c->kind, sizeof c->kind, "%s%smcp/%s/%s",
	    proxy_cfg.scope != NULL ? proxy_cfg.scope : "",
	    proxy_cfg.scope != NULL ? "/" : "", name, c->tool);
	if (n < 0 || (size_t)n >= sizeof c->kind) {
		c->kind[0] = '\0';
		return;
	}
	for (p = c->kind; *p != '\0'; p++)
		if (*p < 0x21 || *p > 0x7e)
			*p = '_';
}

/*
 * The call's key, SEP-3182's member or else the argument, if it is one
 * idem takes (1..IDEM_MAX_SUBMISSION_ID_BYTES printable ASCII), or NULL.
 */
static const char *
call_key_value(struct call *c)
{
	json_t		*params, *arg;
	const char	*key, *p;

	params = json_object_get(c->request, "params");
	/* SPEC.md: a params.idempotencyKey, when set, is the key. */
	arg = json_object_get(params, PROXY_KEY_PARAM);
	if (arg == NULL || json_is_null(arg))
		arg = json_object_get(json_object_get(params, "arguments"),
		    PROXY_KEY_ARGUMENT);
	/* A U+0000 would cut it short: "k\u0000A" and "k\u0000B" one key. */
	if ((key = json_string_value(arg)) == NULL || *key == '\0' ||
	    strlen(key) != json_string_length(arg) ||
	    strlen(key) > IDEM_MAX_SUBMISSION_ID_BYTES)
		return NULL;
	for (p = key; *p != '\0'; p++)
		if (*p < 0x21 || *p > 0x7e)
			return NULL;
	return key;
}

/* The key and the request digested; 0 or an error told. */
static int
call_key(struct call *c)
{
	json_t		*args;
	const char	*key;

	args = json_object_get(json_object_get(c->request, "params"),
	    "arguments");
	if ((key = call_key_value(c)) == NULL) {
		call_tool_error(c, "invalid_key", 0,
		    "The call was not made: %s needs the argument %s, 1-%d "
		    "printable ASCII characters without spaces. %s",
		    c->tool, PROXY_KEY_ARGUMENT, IDEM_MAX_SUBMISSION_ID_BYTES,
		    proxy_key_description);
		return -1;
	}
	snprintf(c->key, sizeof c->key, "%s", key);
	if (json_is_object(args)) {
		c->arguments = json_deep_copy(args);
		json_object_del(c->arguments, PROXY_KEY_ARGUMENT);
		c->request_json = c->arguments == NULL ? NULL :
		    json_dumps(c->arguments, JSON_COMPACT);
	} else if (args != NULL) {
		/*
		 * Arguments that are not an object (MCP says they are; a
		 * careless client) are the request as they stand: keyed as
		 * {}, "abc" and ["xyz"] under one key answered each other.
		 */
		c->request_json = json_dumps(args, JSON_COMPACT |
		    JSON_ENCODE_ANY);
	} else
		c->request_json = strdup("{}");
	if (c->request_json == NULL) {
		call_tool_error(c, "internal", 1, "out of memory");
		return -1;
	}
	return 0;
}

/* The wrapped call, from its key to its answer. */
static void
call_wrapped(struct call *c)
{
	struct idem_error	err;
	int64_t			until = 0, wait = CALL_POLL_FIRST_MS;

	if (call_key(c) != 0)
		return;
	call_kind(c);
	if (c->kind[0] == '\0') {
		call_tool_error(c, "invalid_kind", 0, "The call was not made: "
		    "its effect kind [scope/]mcp/NAME/%s is longer than %d "
		    "bytes (give the proxy a shorter --name).", c->tool,
		    IDEM_MAX_EFFECT_KIND_BYTES);
		return;
	}
	for (;;) {
		memset(&err, 0, sizeof err);
		if (call_begin(c, &err) != 0 && !err.retryable &&
		    err.code != IDEM_E_TRANSPORT) {
			/* Arguments idem cannot key (past 2^53, ...). */
			call_tool_error(c, "refused_by_broker", 0,
			    "The call was not made: idem's broker refused to "
			    "record it: %s.", err.message);
			return;
		} else if (c->begun.disposition == IDEM_EFFECT_NONE) {
			call_tool_error(c, "broker_unavailable", 1,
			    "The call was not made: idem's broker could not "
			    "record it (%s). Retry the same call with the same "
			    "idempotency key later.", err.message);
			return;
		}
		switch (c->begun.disposition) {
		case IDEM_EFFECT_PROCEED:
			call_forward(c);
			return;
		case IDEM_EFFECT_REUSED:
			call_answer_stored(c, c->begun.result != NULL ?
			    c->begun.result : "null");
			return;
		case IDEM_EFFECT_CONFLICT:
			call_tool_error(c, "conflict", 0,
			    "The call was not made: idempotency key %s was "
			    "already used for a call of %s with other "
			    "arguments (effect %s). If this is a retry, send "
			    "the first call's arguments unchanged; if it is a "
			    "new intent, choose a new key.", c->key, c->tool,
			    c->kind);
			return;
		case IDEM_EFFECT_OUTCOME_UNKNOWN:
			call_tool_error(c, "outcome_unknown", 0,
			    "The call was not made: an earlier call with "
			    "idempotency key %s (effect %s) never reported its "
			    "outcome, so it may have acted. idem will not "
			    "perform it again for this key until its outcome "
			    "is settled: check whether it took effect, then "
			    "run `idemctl resolve '%s' '%s' applied` (or "
			    "not_applied), or call the effect_resolve tool of "
			    "idem-mcp (without proxy). To act anew regardless, "
			    "use a new key.", c->key, c->kind, c->kind, c->key);
			return;
		case IDEM_EFFECT_IN_PROGRESS:
			if (until == 0)
				until = call_now_ms() + proxy_cfg.lease_ms;
			if (call_cancelled(c))
				return;
			if (call_now_ms() + wait > until) {
				call_tool_error(c, "in_progress", 1,
				    "The call was not made: a call with "
				    "idempotency key %s (effect %s) is still "
				    "running. Retry the same call with the "
				    "same key later to get its result.", c->key,
				    c->kind);
				return;
			}
			call_conn_put(c);
			call_sleep_ms(wait);
			if ((wait *= 2) > CALL_POLL_MAX_MS)
				wait = CALL_POLL_MAX_MS;
			continue;
		default:
			call_tool_error(c, "broker_unavailable", 1,
			    "The call was not made: idem's broker answered "
			    "%s. Retry later.", err.message);
			return;
		}
	}
}

/*
 * A tool not listed, or passed after listing, or one the listing passes
 * called with a key the ledger does not hold: passed unchanged (but for
 * its id: under ours, the answer given back under the client's).
 */
static void
call_relay(struct call *c)
{
	json_t		*response, *e;
	const char	*why = NULL;
	int		 gone;

	response = proxy_request("tools/call",
	    json_object_get(c->request, "params"), c->id, 0, NULL, NULL,
	    &gone);
	if (response == NULL)
		why = "the MCP server behind idem-mcp proxy exited";
	else if (json_object_get(response, "result") != NULL)
		call_answer_json(c, "result", json_object_get(response,
		    "result"));
	else if (json_object_get(response, "error") != NULL)
		call_answer_json(c, "error", json_object_get(response,
		    "error"));
	else	/* Answered, or the client would wait for ever. */
		why = "the MCP server behind idem-mcp proxy answered with "
		    "neither a result nor an error, or not in JSON";
	if (why != NULL) {
		e = json_pack("{s:i, s:s}", "code", -32603, "message", why);
		call_answer_json(c, "error", e);
		json_decref(e);
	}
	json_decref(response);
}

/* Learn the server's tools (all pages) with tools/list of our own. */
static void
call_list_tools(void)
{
	json_t		*params, *response, *result, *cursor = NULL;
	int		 pages, gone;

	for (pages = 0; pages < CALL_LIST_PAGES_MAX; pages++) {
		params = cursor != NULL ? json_pack("{s:O}", "cursor",
		    cursor) : json_object();
		json_decref(cursor);
		cursor = NULL;
		response = proxy_request("tools/list", params, NULL, 0, NULL,
		    NULL, &gone);
		json_decref(params);
		result = json_object_get(response, "result");
		if (json_is_object(result)) {
			proxy_tools_list_result(result);
			if (json_is_string(json_object_get(result,
			    "nextCursor")))
				cursor = json_incref(json_object_get(result,
				    "nextCursor"));
		}
		json_decref(response);
		if (cursor == NULL)
			break;
	}
	json_decref(cursor);
}

/*
 * A call of a tool the listing passes, with a key (PROXY_LOOKUP): is
 * that key in the ledger for this tool already?  Then the tool was
 * wrapped when it was first called (it turned read-only since, in this
 * proxy or in an earlier one) and the call is keyed, so that a retry
 * gets the first answer and the server is never called a second time
 * for the key.  Otherwise it passes, as SPEC passes such a tool's calls:
 * a read must not become a ledger entry kept for ever.  1 (keyed), 0
 * (passed), -1 (the broker could not be asked: answered, retryable).
 */
static int
call_ledger_holds(struct call *c)
{
	struct idem_error	 err;
	json_t			*request, *answer = NULL;
	const char		*key;
	char			*line, *text = NULL;
	int			 tries, status = -1;

	if ((key = call_key_value(c)) == NULL)
		return 0;	/* no key idem takes: none it holds */
	call_kind(c);
	if (c->kind[0] == '\0')
		return 0;
	request = json_pack("{s:s, s:s, s:s}", "op",
	    idem_op_names[IDEM_OPC_GET_SUBMISSION], "client_submission_id",
	    key, "effect_kind", c->kind);
	line = request == NULL ? NULL : json_dumps(request, JSON_COMPACT);
	json_decref(request);
	memset(&err, 0, sizeof err);
	/* A pooled connection found dead is replaced once (call_begin). */
	for (tries = 0; line != NULL && tries < 2; tries++) {
		if (c->conn == NULL && (c->conn = call_conn_get(&err)) == NULL)
			break;
		if (idem_call_raw(c->conn, line, &text, &err) == 0)
			break;
		if (err.code != IDEM_E_TRANSPORT)
			break;
		call_conn_drop(c);
	}
	free(line);
	answer = text == NULL ? NULL : json_loads(text, 0, NULL);
	free(text);
	if (json_is_true(json_object_get(answer, "ok")))
		status = json_is_true(json_object_get(answer, "found"));
	json_decref(answer);
	call_conn_put(c);
	if (status == -1) {
		proxy_log("%s %s: cannot look the key up in the ledger: %s",
		    c->kind, key, err.message[0] != '\0' ? err.message :
		    "the broker refused");
		call_tool_error(c, "broker_unavailable", 1,
		    "The call was not made: %s is listed as read-only or "
		    "idempotent, but the call carries idempotency key %s, and "
		    "idem's broker could not say whether that key was recorded "
		    "for it (%s). Retry the same call later.", c->tool, key,
		    err.message[0] != '\0' ? err.message :
		    "the broker refused");
	}
	return status;
}

/* One call, from its tool's lookup to its end (c freed). */
static void
call_serve(struct call *c)
{
	struct call	**cp;
	enum proxy_wrap	 wrap;
	json_t		*params;
	int		 held = 0;

	params = json_object_get(c->request, "params");
	wrap = proxy_call_wrap(c->tool, params, 0, &c->has_output_schema);
	if (wrap == PROXY_UNKNOWN) {
		call_list_tools();
		wrap = proxy_call_wrap(c->tool, params, 1,
		    &c->has_output_schema);
	}
	if (wrap == PROXY_LOOKUP && (held = call_ledger_holds(c)) == -1)
		;	/* answered: the broker could not be asked */
	else if (wrap == PROXY_WRAPPED || held == 1)
		call_wrapped(c);
	else
		call_relay(c);

	call_conn_put(c);
	idem_effect_clear(&c->begun);
	pthread_mutex_lock(&calls_lock);
	for (cp = &calls_running; *cp != NULL; cp = &(*cp)->next)
		if (*cp == c) {
			*cp = c->next;
			break;
		}
	calls_count--;
	pthread_cond_broadcast(&calls_done);
	pthread_mutex_unlock(&calls_lock);
	json_decref(c->arguments);
	json_decref(c->request);
	free(c->request_json);
	free(c->id_key);
	free(c);
}

static void *
call_thread(void *arg)
{
	struct call	*c = arg;

	for (;;) {
		call_serve(c);
		pthread_mutex_lock(&calls_lock);
		if (calls_idle >= CALL_IDLE_MAX) {
			pthread_mutex_unlock(&calls_lock);
			return NULL;
		}
		calls_idle++;
		while (calls_queue == NULL)
			pthread_cond_wait(&calls_work, &calls_lock);
		c = calls_queue;
		if ((calls_queue = c->queued) == NULL)
			calls_queue_tail = &calls_queue;
		pthread_mutex_unlock(&calls_lock);
	}
}

int
proxy_call_start(json_t *request)
{
	struct call	*c, **cp;
	pthread_t	 thread;
	pthread_attr_t	 attr;
	int		 error;

	if ((c = calloc(1, sizeof *c)) == NULL) {
		json_decref(request);
		return -1;
	}
	c->request = request;
	c->id = json_object_get(request, "id");
	c->tool = json_string_value(json_object_get(json_object_get(request,
	    "params"), "name"));
	if ((c->id_key = json_dumps(c->id, JSON_COMPACT | JSON_ENCODE_ANY)) ==
	    NULL) {
		json_decref(request);
		free(c);
		return -1;
	}
	pthread_mutex_lock(&calls_lock);
	if (calls_count >= CALL_THREADS_MAX) {
		pthread_mutex_unlock(&calls_lock);
		call_tool_error(c, "busy", 1, "The call was not made: %d calls "
		    "are in flight through this proxy already; retry the same "
		    "call with the same key later.", CALL_THREADS_MAX);
		json_decref(request);
		free(c->id_key);
		free(c);
		return 0;
	}
	c->next = calls_running;
	calls_running = c;
	calls_count++;
	if (calls_idle > 0) {
		/* A waiting thread takes it. */
		calls_idle--;
		*calls_queue_tail = c;
		calls_queue_tail = &c->queued;
		pthread_cond_signal(&calls_work);
		pthread_mutex_unlock(&calls_lock);
		return 0;
	}
	pthread_mutex_unlock(&calls_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	error = pthread_create(&thread, &attr, call_thread, c);
	pthread_attr_destroy(&attr);
	if (error != 0) {
		/* Answer it here; the thread's own ending does the rest. */
		call_tool_error(c, "internal", 1, "The call was not made: "
		    "the proxy could not start a thread (%s); retry later.",
		    strerror(error));
		pthread_mutex_lock(&calls_lock);
		for (cp = &calls_running; *cp != NULL; cp = &(*cp)->next)
			if (*cp == c) {
				*cp = c->next;
				break;
			}
		calls_count--;
		pthread_mutex_unlock(&calls_lock);
		json_decref(c->request);
		free(c->id_key);
		free(c);
		return -1;
	}
	return 0;
}

void
proxy_call_cancel(json_t *client_id)
{
	struct call	*c;
	char		*key;

	if ((key = json_dumps(client_id, JSON_COMPACT | JSON_ENCODE_ANY)) ==
	    NULL)
		return;
	pthread_mutex_lock(&calls_lock);
	for (c = calls_running; c != NULL; c = c->next)
		if (strcmp(c->id_key, key) == 0)
			c->cancelled = 1;
	pthread_mutex_unlock(&calls_lock);
	free(key);
}

int
proxy_calls_running(void)
{
	int	n;

	pthread_mutex_lock(&calls_lock);
	n = calls_count;
	pthread_mutex_unlock(&calls_lock);
	return n;
}

void
proxy_calls_wait(int64_t timeout_ms)
{
	struct timespec	until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&calls_lock);
	while (calls_count > 0)
		if (pthread_cond_timedwait(&calls_done, &calls_lock, &until) ==
		    ETIMEDOUT)
			break;
	pthread_mutex_unlock(&calls_lock);
}
