/* SPDX-License-Identifier: ISC */
/*
 * proxy.h: `idem-mcp proxy`, an idempotency proxy in front of any MCP
 * server over stdio (SPEC.md, "The MCP proxy"), grouped by the file that
 * owns each part.  proxy_options.c owns the command line; proxy.c the
 * process (the downstream child, the two readers and the two locked
 * writers, the table of requests the proxy sent downstream); proxy_raw.c
 * a client's lines that pass only as their bytes, or are refused;
 * proxy_lines.c the readers' lines; proxy_tools.c the messages it
 * rewrites (initialize's result, tools/list's result) and which tools
 * are wrapped; proxy_call.c one wrapped tools/call, on its own thread:
 * the effect protocol with idemd around the downstream's call;
 * proxy_standin.c the stand-in of a result the ledger cannot keep.
 */
#ifndef IDEM_MCP_PROXY_H
#define IDEM_MCP_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The _meta member that carries the effect's external_key downstream. */
#define PROXY_META_EXTERNAL_KEY	"io.idem/external_key"
/* The _meta member of the proxy's own tool errors: the facts, for code. */
#define PROXY_META_ERROR	"io.idem/proxy"
/* The argument a wrapped tool gains, and SEP-3182's params member. */
#define PROXY_KEY_ARGUMENT	"idempotency_key"
#define PROXY_KEY_PARAM		"idempotencyKey"
/* Ids of requests the proxy itself sends downstream start with this. */
#define PROXY_ID_PREFIX		"io.idem/proxy/"
/* The start of a result's text kept in its stand-in (proxy_standin.c). */
#define PROXY_STANDIN_TEXT_BYTES	1024
#define PROXY_DEFAULT_LEASE_MS		30000
/* Longest message line read from either side (a large file read). */
#define PROXY_MAX_LINE_BYTES		(256 * 1024 * 1024)
/* The least a test may lower it to: room for any message of the proxy's. */
#define PROXY_MIN_TEST_LINE_BYTES	4096

struct proxy_config {
	const char	 *socket_path;	/* NULL: libidem's lookup */
	const char	 *name;		/* --name; NULL: serverInfo.name */
	const char	 *scope;	/* --scope; NULL: none */
	const char	**wrap;		/* --wrap TOOL..., NULL-terminated */
	const char	**pass;		/* --pass TOOL..., NULL-terminated */
	int64_t		  lease_ms;
	/* PROXY_MAX_LINE_BYTES, or less for tests (proxy_options.c says why) */
	size_t		  max_line_bytes;
};

/* ---- proxy.c: the process ------------------------------------------- */

extern struct proxy_config proxy_cfg;

/* Run in front of command (argv's form), proxy_cfg set: the exit status. */
int	proxy_run(char **command);
/* Write one message (no newline) to the client / downstream, locked. */
int	proxy_to_client(const char *, size_t);
int	proxy_to_server(const char *, size_t);
/* Serialize and send (steals nothing; the value stays the caller's). */
int	proxy_to_client_json(json_t *);
/* A JSON-RPC error to the client under id (borrowed; NULL: null). */
void	proxy_client_error(json_t *id, int code, const char *message);
/* Is id in the form of the proxy's own (PROXY_ID_PREFIX)? */
int	proxy_own_id(json_t *id);
/*
 * Send a request downstream under a fresh id of ours (method, params
 * borrowed) and wait for its response.  client_id (may be NULL): the
 * client's request it stands for, so that a cancellation of it is sent
 * on under our id.  Every tick_ms without an answer tick(tick_arg) is
 * called (the lease's extension; NULL: none); a tick that returns
 * non-zero stops the wait.  Returns the response (a new reference), or
 * NULL: the downstream is gone (*gone set) or a tick stopped the wait.
 */
json_t	*proxy_request(const char *method, json_t *params, json_t *client_id,
	    int64_t tick_ms, int (*tick)(void *), void *tick_arg, int *gone);
/*
 * Translate a client's notifications/cancelled for a request that the
 * proxy forwarded under its own id: the id it went downstream under (a
 * new reference), or NULL.
 */
json_t	*proxy_forwarded_id(json_t *client_id);
void	 proxy_forwarded_set(json_t *client_id, json_t *proxy_id);
void	 proxy_forwarded_clear(json_t *client_id);
/* The downstream's serverInfo.name, once initialize answered (or NULL). */
const char *proxy_server_name(void);
void	 proxy_set_server_name(const char *);
int	 proxy_log(const char *, ...) __attribute__((format(printf, 1, 2)));

/*
 * A response to one of our requests: hand it over (steals msg).  1 if a
 * request waited for it, 0 if none did (msg dropped).
 */
int	 proxy_deliver(const char *key, json_t *msg);

/* ---- proxy_options.c: the command line ------------------------------ */

/* `idem-mcp proxy ARG...` (argv[0]: "proxy"): the exit status. */
int	proxy_main(int argc, char **argv);

/* ---- proxy_raw.c: client lines that pass only as their bytes -------- */

/*
 * Must a tools/call of name (params borrowed) be keyed whatever else?
 * Then one the proxy cannot serve on a thread of its own is refused.
 */
int	proxy_call_must_key(const char *name, json_t *params);
/*
 * A client's line read only loosely (loose) or with its integers as
 * doubles (msg, so read, stolen): sent on as its bytes, or refused.
 */
void	proxy_client_raw(const char *line, size_t length, json_t *msg,
	    int loose);
/* A client's line not read exactly: 1 if handled, 0 if it is to pass. */
int	proxy_unreadable_call(const char *line, size_t length);

/* ---- proxy_lines.c: the readers' lines ------------------------------ */

/*
 * Read fd to its end, one message per line, each handed to handle; a
 * line over the limit is said on stderr (side: who wrote it) and shown
 * to dropped (may be NULL) as far as it was read; with dropped, its
 * last bytes too are taken for an answer of ours if they hold our id.
 */
void	proxy_read_lines(int fd, const char *side,
	    void (*handle)(char *, size_t),
	    void (*dropped)(const char *, size_t));
/*
 * A line that is not JSON (what: why, for the log) but may answer a
 * request of ours: if its top level holds our id, that request is handed
 * an empty message (or, none waiting, the line dropped).  1 if it did.
 */
int	proxy_unreadable_answer(const char *line, size_t length,
	    const char *what);
/*
 * json_loadb(line, length, flags | JSON_ALLOW_NUL): a new reference, or
 * NULL if not read.  JSON jansson refuses (U+0000 in an object key, an
 * escaped UTF-16 surrogate that is not one of a pair) and a line with
 * invalid UTF-8 are read loosely, each such made U+FFFD, and *loose
 * set: such a value says what the line is, never what it holds (it is
 * not relayed as data).
 */
json_t	*proxy_json_load(const char *line, size_t length, size_t flags,
	    int *loose);
/*
 * What the bytes of a client's line that nothing reads say: 1 if a
 * member of a message's top level is "method":"tools/call".  *id: the
 * top-level "id" (a string or an integer; a new reference) of a single
 * message that has a "method" member (a request), else NULL.
 */
int	proxy_unreadable_request(const char *line, size_t length,
	    json_t **id);

/* ---- proxy_tools.c: wrapped tools and the messages rewritten -------- */

enum proxy_wrap {
	PROXY_UNKNOWN = 0,	/* not listed yet */
	PROXY_WRAPPED,
	PROXY_PASSED,
	/*
	 * Passed by the listing, but the call carries a key: keyed only if
	 * the ledger already holds that key for the tool (proxy_call.c
	 * looks), else passed.
	 */
	PROXY_LOOKUP
};

/* Is the tool wrapped?  (PROXY_UNKNOWN: ask with tools/list.) */
enum proxy_wrap proxy_tool_wrap(const char *name, int *has_output_schema);
/*
 * Is this call (its tools/call params) wrapped?  As proxy_tool_wrap,
 * but a call that carries a key, unless --pass names the tool or its
 * schema owns the argument, is PROXY_LOOKUP if the listing passes the
 * tool, and PROXY_WRAPPED if the tools were listed for it (listed) and
 * it is still unknown (never listed: no annotations, wrapped).
 */
enum proxy_wrap proxy_call_wrap(const char *name, json_t *params, int listed,
	    int *has_output_schema);
/* Learn and rewrite one tools/list result in place. */
void	proxy_tools_list_result(json_t *result);
/* Rewrite initialize's result in place (the capability, the name). */
void	proxy_initialize_result(json_t *result);
/* The description of the idempotency_key property. */
extern const char proxy_key_description[];

/* ---- proxy_call.c: one wrapped tools/call --------------------------- */

/*
 * Serve a client's tools/call (request a new reference, stolen) on a
 * thread of its own (one that waits for calls, or a new one); answers
 * the client itself.  -1 if no thread could be started (the caller
 * answers an internal error).
 */
int	proxy_call_start(json_t *request);
/* A client's cancellation of a call still at the broker. */
void	proxy_call_cancel(json_t *client_id);
/* Calls still running (the process waits for them at the client's EOF). */
int	proxy_calls_running(void);
void	proxy_calls_wait(int64_t timeout_ms);

/* ---- proxy_standin.c: results the ledger cannot keep ---------------- */

enum proxy_not_kept {
	PROXY_KEPT = 0,
	PROXY_TOO_LARGE,	/* over IDEM_MAX_EFFECT_RESULT_BYTES */
	PROXY_NOT_STORABLE	/* holds U+0000 */
};

/* Can the ledger keep this result (text: its compact JSON)? */
enum proxy_not_kept proxy_not_kept(const char *text, size_t length);
/*
 * The stand-in committed instead of such a result (text: its compact
 * JSON, as answered): malloc'd JSON, or NULL with *failed saying what
 * could not be built (out of memory).
 */
char	*proxy_standin(enum proxy_not_kept why, json_t *result,
	    const char *text, size_t length, const char **failed);
/*
 * Is stored (a result from the ledger) exactly a stand-in?  Then 1, and
 * buf holds what a retry is told: applied, why the result is not kept,
 * its size, sha256 and the start of its text.  0 for a result.
 */
int	proxy_standin_told(const char *stored, const char *key,
	    const char *kind, char *buf, size_t size);

#endif
