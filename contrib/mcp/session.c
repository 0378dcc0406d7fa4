/* SPDX-License-Identifier: ISC */
/*
 * session.c: one MCP session over stdio: JSON-RPC 2.0 messages in and
 * out, the lifecycle (initialize, version negotiation, initialized,
 * ping) and the dispatch of tools/list and tools/call to tools.c.
 *
 * Rules it applies (MCP specification, basic/ and server/tools):
 *  - a line that is not JSON is a parse error (-32700), answered with
 *    id null as JSON-RPC 2.0 answers what it could not read;
 *  - a message that is not a request, notification or response is an
 *    invalid request (-32600); request ids are strings or integers,
 *    never null;
 *  - a notification (no id) never gets an answer, not even an error;
 *  - a JSON-RPC batch (an array) is served only in a 2025-03-26 session,
 *    the one revision that has them; 2025-06-18 removed them, so there,
 *    and before initialize (which must not be batched), an array is an
 *    invalid request;
 *  - requests other than initialize and ping before initialize are
 *    invalid requests; a second initialize is one too;
 *  - tool arguments that do not satisfy the inputSchema are a protocol
 *    error (-32602) up to 2025-06-18 and a tool execution error
 *    (isError) from 2025-11-25 on, as each revision says.
 * Nothing here writes to stdout: main.c writes what it returns.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mcp.h"
#include "protocol.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

#define SESSION_CURSOR_PREFIX	"idem-mcp/tools/"

/* Newest first: the first is the one offered when ours and theirs differ. */
static const char *const session_revisions[] = {
	MCP_REVISION_2025_11_25,
	MCP_REVISION_2025_06_18,
	MCP_REVISION_2025_03_26
};

static const char session_instructions[] =
    "idem makes the creation of FCoP tasks and reports idempotent. Every "
    "write_task and write_report call needs a client_submission_id: "
    "choose it once per intent and send the exact same value on every "
    "retry of that intent (after an error, a timeout or an unclear "
    "answer); never make up a new one for a retry.";

struct mcp_session {
	const struct mcp_config	*cfg;
	const char		*revision;	/* NULL before initialize */
	int			 initialized;	/* notifications/initialized */
};

void
mcp_error_set(struct mcp_error *err, int code, const char *fmt, ...)
{
	va_list	ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
}

struct mcp_session *
mcp_session_new(const struct mcp_config *cfg)
{
	struct mcp_session	*s;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return NULL;
	s->cfg = cfg;
	return s;
}

void
mcp_session_free(struct mcp_session *s)
{
	free(s);
}

/* ---- messages ----------------------------------------------------------- */

static json_t *
session_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
	    "id", id != NULL ? id : json_null(), "error", "code", code,
	    "message", message);
}

static json_t *
session_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
	    "result", result);
}

/* A request id MCP allows: a string or an integer. */
static int
session_valid_id(json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

/* ---- methods ------------------------------------------------------------ */

static json_t *
method_initialize(struct mcp_session *s, json_t *params,
    struct mcp_error *err)
{
	const char	*requested, *answer = session_revisions[0];
	size_t		 i;

	if (s->revision != NULL) {
		mcp_error_set(err, MCP_INVALID_REQUEST,
		    "already initialized (protocol %s)", s->revision);
		return NULL;
	}
	requested = json_string_value(json_object_get(params,
	    "protocolVersion"));
	if (requested == NULL) {
		mcp_error_set(err, MCP_INVALID_PARAMS,
		    "initialize: params.protocolVersion must be a string");
		return NULL;
	}
	/* Theirs if we have it, else our latest: the client decides. */
	for (i = 0; i < nitems(session_revisions); i++)
		if (strcmp(requested, session_revisions[i]) == 0)
			answer = session_revisions[i];
	s->revision = answer;
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}",
	    "protocolVersion", answer,
	    "capabilities", "tools", "listChanged", 0,
	    "serverInfo", "name", "idem-mcp", "title", "idem",
	    "version", PACKAGE_VERSION,
	    "instructions", session_instructions);
}

/* The cursor is opaque to the client: our prefix and an offset. */
static int
session_cursor_decode(const char *cursor, size_t *offset)
{
	const char	*p;
	size_t		 n = 0;

	if (strncmp(cursor, SESSION_CURSOR_PREFIX,
	    strlen(SESSION_CURSOR_PREFIX)) != 0)
		return -1;
	p = cursor + strlen(SESSION_CURSOR_PREFIX);
	if (*p == '\0' || *p == '0')
		return -1;
	for (; *p != '\0'; p++) {
		if (!isdigit((unsigned char)*p) || n > mcp_tools_count())
			return -1;
		n = n * 10 + (size_t)(*p - '0');
	}
	if (n >= mcp_tools_count())
		return -1;
	*offset = n;
	return 0;
}

static json_t *
method_tools_list(struct mcp_session *s, json_t *params,
    struct mcp_error *err)
{
	json_t		*cursor = json_object_get(params, "cursor");
	json_t		*tools, *result;
	size_t		 offset = 0, end, i;
	char		 next[64];

	if (cursor != NULL && !json_is_null(cursor) &&
	    (!json_is_string(cursor) ||
	    session_cursor_decode(json_string_value(cursor), &offset) != 0)) {
		mcp_error_set(err, MCP_INVALID_PARAMS, "invalid cursor");
		return NULL;
	}
	end = offset + s->cfg->tools_page_size;
	if (end > mcp_tools_count())
		end = mcp_tools_count();
	tools = json_array();
	for (i = offset; i < end; i++)
		json_array_append_new(tools, mcp_tools_describe(i));
	result = json_pack("{s:o}", "tools", tools);
	if (end < mcp_tools_count()) {
		snprintf(next, sizeof next, "%s%zu", SESSION_CURSOR_PREFIX,
		    end);
		json_object_set_new(result, "nextCursor", json_string(next));
	}
	return result;
}

static json_t *
method_tools_call(struct mcp_session *s, json_t *params,
    struct mcp_error *err)
{
	const char	*name;
	json_t		*arguments;

	name = json_string_value(json_object_get(params, "name"));
	arguments = json_object_get(params, "arguments");
	if (name == NULL) {
		mcp_error_set(err, MCP_INVALID_PARAMS,
		    "tools/call: params.name must be a string");
		return NULL;
	}
	if (arguments != NULL && !json_is_object(arguments)) {
		mcp_error_set(err, MCP_INVALID_PARAMS,
		    "tools/call: params.arguments must be an object");
		return NULL;
	}
	return mcp_tools_call(s->cfg, name, arguments,
	    strcmp(s->revision, MCP_REVISION_2025_11_25) != 0, err);
}

static json_t *
method_ping(struct mcp_session *s, json_t *params, struct mcp_error *err)
{
	(void)s;
	(void)params;
	(void)err;
	return json_object();
}

static const struct {
	const char	*name;
	int		 before_initialize;	/* allowed before it */
	json_t		*(*run)(struct mcp_session *, json_t *,
			    struct mcp_error *);
} session_methods[] = {
	{ "initialize",		1, method_initialize },
	{ "ping",		1, method_ping },
	{ "tools/list",		0, method_tools_list },
	{ "tools/call",		0, method_tools_call },
};

/* ---- dispatch ----------------------------------------------------------- */

static void
session_notification(struct mcp_session *s, const char *method)
{
	/*
	 * notifications/cancelled needs nothing: requests are served one
	 * at a time, so none is in flight when it is read.  Unknown
	 * notifications are ignored, as JSON-RPC asks.
	 */
	if (strcmp(method, "notifications/initialized") == 0 &&
	    s->revision != NULL)
		s->initialized = 1;
}

/* One message (not a batch) -> its response, or NULL for none. */
static json_t *
session_message(struct mcp_session *s, json_t *msg, int in_batch)
{
	struct mcp_error	 err = { 0, "" };
	json_t			*id, *params, *result;
	const char		*method, *version;
	size_t			 i;

	if (!json_is_object(msg))
		return session_error(NULL, MCP_INVALID_REQUEST,
		    "a JSON-RPC message must be an object");
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	version = json_string_value(json_object_get(msg, "jsonrpc"));
	if (version == NULL || strcmp(version, "2.0") != 0)
		return session_error(session_valid_id(id) ? id : NULL,
		    MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
	if (method == NULL) {
		/* A response to a request of ours: we send none; ignore it. */
		if (id != NULL && (json_object_get(msg, "result") != NULL ||
		    json_object_get(msg, "error") != NULL))
			return NULL;
		return session_error(session_valid_id(id) ? id : NULL,
		    MCP_INVALID_REQUEST, "method must be a string");
	}
	if (id == NULL) {
		session_notification(s, method);
		return NULL;
	}
	if (!session_valid_id(id))
		return session_error(NULL, MCP_INVALID_REQUEST,
		    "id must be a string or an integer");
	params = json_object_get(msg, "params");
	if (params != NULL && !json_is_object(params))
		return session_error(id, MCP_INVALID_PARAMS,
		    "params must be an object");

	for (i = 0; i < nitems(session_methods); i++)
		if (strcmp(session_methods[i].name, method) == 0)
			break;
	if (i == nitems(session_methods)) {
		char	message[200];

		snprintf(message, sizeof message, "Method not found: %.150s",
		    method);
		return session_error(id, MCP_METHOD_NOT_FOUND, message);
	}
	if (s->revision == NULL && !session_methods[i].before_initialize)
		return session_error(id, MCP_INVALID_REQUEST,
		    "not initialized: send initialize first");
	if (in_batch && strcmp(method, "initialize") == 0)
		return session_error(id, MCP_INVALID_REQUEST,
		    "initialize must not be part of a batch");
	if ((result = session_methods[i].run(s, params, &err)) == NULL)
		return session_error(id, err.code != 0 ? err.code :
		    MCP_INTERNAL_ERROR, err.code != 0 ? err.message :
		    "out of memory");
	return session_result(id, result);
}

static json_t *
session_batch(struct mcp_session *s, json_t *batch)
{
	json_t	*responses, *msg, *r;
	size_t	 i;

	if (s->revision == NULL ||
	    strcmp(s->revision, MCP_REVISION_2025_03_26) != 0) {
		char	message[160];

		snprintf(message, sizeof message, "JSON-RPC batches are not "
		    "supported in protocol revision %s", s->revision != NULL ?
		    s->revision : "(none: not initialized)");
		return session_error(NULL, MCP_INVALID_REQUEST, message);
	}
	if (json_array_size(batch) == 0)
		return session_error(NULL, MCP_INVALID_REQUEST,
		    "empty batch");
	responses = json_array();
	json_array_foreach(batch, i, msg)
		if ((r = session_message(s, msg, 1)) != NULL)
			json_array_append_new(responses, r);
	/* Only notifications: nothing at all is sent back. */
	if (json_array_size(responses) == 0) {
		json_decref(responses);
		return NULL;
	}
	return responses;
}

static char *
session_dump(json_t *response)
{
	char	*line;

	if (response == NULL)
		return NULL;
	/* Compact: jansson escapes every control character, so no newline. */
	line = json_dumps(response, JSON_COMPACT);
	json_decref(response);
	return line;
}

char *
mcp_session_line(struct mcp_session *s, const char *line, size_t length)
{
	json_error_t	 jerr;
	json_t		*msg, *response;
	size_t		 i;
	char		 message[200];

	for (i = 0; i < length && isspace((unsigned char)line[i]); i++)
		;
	if (i == length)
		return NULL;	/* a blank line carries no message */
	/*
	 * Duplicate member names are refused as the broker refuses them
	 * (a parse error): which of two values counts is no guess to make.
	 */
	if ((msg = json_loadb(line, length, JSON_DECODE_ANY |
	    JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		snprintf(message, sizeof message, "Parse error: %s", jerr.text);
		return session_dump(session_error(NULL, MCP_PARSE_ERROR,
		    message));
	}
	if (json_is_array(msg))
		response = session_batch(s, msg);
	else
		response = session_message(s, msg, 0);
	json_decref(msg);
	return session_dump(response);
}

char *
mcp_session_oversized(struct mcp_session *s)
{
	char	message[120];

	(void)s;
	snprintf(message, sizeof message, "message over %d bytes",
	    IDEM_MCP_MAX_LINE_BYTES);
	return session_dump(session_error(NULL, MCP_INVALID_REQUEST, message));
}
