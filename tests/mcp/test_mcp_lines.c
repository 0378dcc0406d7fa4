/* SPDX-License-Identifier: ISC */
/*
 * test_mcp_lines.c: idem-mcp, line by line, at the JSON-RPC level: what
 * each kind of line on its stdin gets back on its stdout.  Parse errors,
 * invalid requests, id types, notifications (no answer), requests
 * before initialize, version negotiation, batches (served only in a
 * 2025-03-26 session), oversized lines (answered, then the stream goes
 * on in step), tools/list pages and cursors, tools/call's protocol and
 * tool errors, and write_task through a real idemd: created, reused,
 * conflict, broker down.
 *
 * "Gets no answer" is proven without waiting: a ping follows, and the
 * next line out must be the ping's answer (idem-mcp answers in order).
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "protocol.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

#define INIT_2025_03_26	"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"," \
	"\"params\":{\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}," \
	"\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
#define INIT_2025_06_18	"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"," \
	"\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}," \
	"\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
#define INIT_2025_11_25	"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"," \
	"\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}," \
	"\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
/* The tools idem-mcp lists, and the size of the pages asked for. */
#define MCP_TOOLS	8
#define MCP_PAGE	"3"
#define MCP_PAGE_SIZE	3
#define PING(id)	"{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"ping\"}"

struct mcp {
	pid_t	 pid;
	FILE	*in;	/* its stdin */
	FILE	*out;	/* its stdout */
};

/* ---- the child ---------------------------------------------------------- */

/*
 * idem-mcp with argv after its path (NULL-terminated), with IDEM_ROOT
 * and IDEM_SOCKET set to root and socket (NULL: unset).
 */
static void
mcp_spawn(struct mcp *m, const char *const *argv, const char *root,
    const char *socket)
{
	const char	*prog = getenv("IDEM_MCP");
	const char	*args[8];
	int		 in[2], out[2];
	size_t		 i;

	assert_non_null(prog);
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	m->pid = fork();
	assert_true(m->pid != -1);
	if (m->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		if (root != NULL)
			setenv("IDEM_ROOT", root, 1);
		else
			unsetenv("IDEM_ROOT");
		if (socket != NULL)
			setenv("IDEM_SOCKET", socket, 1);
		else
			unsetenv("IDEM_SOCKET");
		args[0] = prog;
		for (i = 0; argv[i] != NULL && i + 2 < nitems(args); i++)
			args[i + 1] = argv[i];
		args[i + 1] = NULL;
		execv(prog, (char *const *)args);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	m->in = fdopen(in[1], "w");
	m->out = fdopen(out[0], "r");
	assert_non_null(m->in);
	assert_non_null(m->out);
}

/* idem-mcp on this socket (--socket), tools pages of page_size. */
static void
mcp_start(struct mcp *m, const char *socket, const char *page_size)
{
	const char	*argv[] = { "--socket", socket, "--tools-page-size",
	    page_size, NULL };

	if (page_size == NULL)
		argv[2] = NULL;
	mcp_spawn(m, argv, NULL, NULL);
}

/* Close its stdin: it must exit 0 at the end of its input. */
static void
mcp_stop(struct mcp *m)
{
	int	status;

	fclose(m->in);
	assert_int_equal(waitpid(m->pid, &status, 0), m->pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	fclose(m->out);
}

static void
mcp_send(struct mcp *m, const char *line)
{
	assert_true(fputs(line, m->in) != EOF);
	assert_true(fputc('\n', m->in) != EOF);
	assert_int_equal(fflush(m->in), 0);
}

/* The next line out, parsed (a hung idem-mcp is ended by the watchdog). */
static json_t *
mcp_read(struct mcp *m)
{
	json_error_t	 jerr;
	json_t		*j;
	char		*line = NULL;
	size_t		 size = 0;
	ssize_t		 n;

	n = getline(&line, &size, m->out);
	assert_true(n > 0);
	assert_int_equal(line[n - 1], '\n');
	/* One message per line: no newline inside it. */
	assert_null(memchr(line, '\n', (size_t)n - 1));
	j = json_loads(line, 0, &jerr);
	if (j == NULL)
		fail_msg("not JSON: %s (%s)", line, jerr.text);
	free(line);
	return j;
}

static json_t *
mcp_call(struct mcp *m, const char *line)
{
	mcp_send(m, line);
	return mcp_read(m);
}

/* A JSON-RPC error response with this code and id (NULL: id null). */
static void
assert_error(json_t *r, int code, json_t *id)
{
	json_t	*error = json_object_get(r, "error");

	assert_string_equal(json_string_value(json_object_get(r, "jsonrpc")),
	    "2.0");
	if (error == NULL)
		fail_msg("no error in %s", json_dumps(r, JSON_COMPACT));
	assert_int_equal(json_integer_value(json_object_get(error, "code")),
	    code);
	assert_non_null(json_string_value(json_object_get(error, "message")));
	assert_null(json_object_get(r, "result"));
	if (id == NULL)
		assert_true(json_is_null(json_object_get(r, "id")));
	else {
		assert_true(json_equal(json_object_get(r, "id"), id));
		json_decref(id);
	}
	json_decref(r);
}

/* A result response for this id; returns the result (borrowed from r). */
static json_t *
assert_result(json_t *r, json_t *id)
{
	json_t	*result = json_object_get(r, "result");

	if (result == NULL)
		fail_msg("no result in %s", json_dumps(r, JSON_COMPACT));
	assert_null(json_object_get(r, "error"));
	assert_true(json_equal(json_object_get(r, "id"), id));
	json_decref(id);
	return result;
}

static void
assert_pong(json_t *r, json_t *id)
{
	json_t	*result = assert_result(r, id);

	assert_true(json_is_object(result));
	assert_int_equal(json_object_size(result), 0);
	json_decref(r);
}

static void
initialize(struct mcp *m, const char *line, const char *expect)
{
	json_t	*r = mcp_call(m, line), *result;

	result = assert_result(r, json_integer(0));
	assert_string_equal(json_string_value(json_object_get(result,
	    "protocolVersion")), expect);
	json_decref(r);
	mcp_send(m, "{\"jsonrpc\":\"2.0\","
	    "\"method\":\"notifications/initialized\"}");
}

static char *
tool_call_line(int id, const char *name, json_t *arguments)
{
	json_t	*j;
	char	*line;

	j = json_pack("{s:s, s:i, s:s, s:{s:s, s:o}}", "jsonrpc", "2.0",
	    "id", id, "method", "tools/call", "params", "name", name,
	    "arguments", arguments);
	line = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return line;
}

/* tools/call -> the CallToolResult (a new reference). */
static json_t *
tool_call(struct mcp *m, int id, const char *name, json_t *arguments)
{
	json_t	*r, *result;
	char	*line = tool_call_line(id, name, arguments);

	r = mcp_call(m, line);
	free(line);
	result = assert_result(r, json_integer(id));
	json_incref(result);
	json_decref(r);
	return result;
}

static json_t *
task_arguments(const char *id, const char *subject)
{
	return json_pack("{s:s, s:{s:s, s:s, s:s}}", "client_submission_id",
	    id, "task", "sender", "PM", "recipient", "DEV", "subject",
	    subject);
}

/* A broker-less idem-mcp: its socket names nothing. */
static void
start_without_broker(struct broker *b, struct mcp *m, const char *page)
{
	snprintf(b->socket, sizeof b->socket, "%s/none.sock", b->root);
	mcp_start(m, b->socket, page);
}

/* ---- tests -------------------------------------------------------------- */

static void
parse_errors_and_invalid_requests(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;

	start_without_broker(b, &m, NULL);
	assert_error(mcp_call(&m, "nope"), -32700, NULL);
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,"), -32700,
	    NULL);
	/* Invalid UTF-8 is not JSON. */
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,"
	    "\"method\":\"p\xff\"}"), -32700, NULL);
	/*
	 * Duplicate member names are not JSON idem-mcp reads, as the
	 * broker does not (which one counts would be a guess): a parse
	 * error, at the top and deeper, the id unknown.
	 */
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,"
	    "\"method\":\"ping\",\"method\":\"tools/list\"}"), -32700, NULL);
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,"
	    "\"method\":\"ping\"}"), -32700, NULL);
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,"
	    "\"method\":\"tools/call\",\"params\":{\"name\":\"diagnose\","
	    "\"arguments\":{\"a\":1,\"a\":2}}}"), -32700, NULL);
	assert_error(mcp_call(&m, "[" PING("1") ",{\"jsonrpc\":\"2.0\","
	    "\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]"), -32700,
	    NULL);
	assert_error(mcp_call(&m, "5"), -32600, NULL);
	assert_error(mcp_call(&m, "\"ping\""), -32600, NULL);
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"1.0\",\"id\":1,"
	    "\"method\":\"ping\"}"), -32600, json_integer(1));
	assert_error(mcp_call(&m, "{\"id\":2,\"method\":\"ping\"}"), -32600,
	    json_integer(2));
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":3}"), -32600,
	    json_integer(3));
	/* A method that is not a string, even without an id. */
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"method\":5}"),
	    -32600, NULL);
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,"
	    "\"method\":\"ping\",\"params\":[1]}"), -32602, json_integer(4));
	/* Still in step: a valid request is answered. */
	assert_pong(mcp_call(&m, PING("5")), json_integer(5));
	mcp_stop(&m);
	harness_finish(b);
}

static void
id_types(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;

	start_without_broker(b, &m, NULL);
	assert_pong(mcp_call(&m, PING("\"abc\"")), json_string("abc"));
	assert_pong(mcp_call(&m, PING("7")), json_integer(7));
	assert_pong(mcp_call(&m, PING("-1")), json_integer(-1));
	assert_pong(mcp_call(&m, PING("9007199254740993")),
	    json_integer(9007199254740993LL));
	assert_pong(mcp_call(&m, PING("\"\"")), json_string(""));
	/* MCP: never null; JSON-RPC: scalars only. */
	assert_error(mcp_call(&m, PING("null")), -32600, NULL);
	assert_error(mcp_call(&m, PING("1.5")), -32600, NULL);
	assert_error(mcp_call(&m, PING("true")), -32600, NULL);
	assert_error(mcp_call(&m, PING("{\"a\":1}")), -32600, NULL);
	assert_error(mcp_call(&m, PING("[1]")), -32600, NULL);
	mcp_stop(&m);
	harness_finish(b);
}

static void
notifications_get_no_answer(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;

	start_without_broker(b, &m, NULL);
	mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/foo\"}");
	mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\","
	    "\"params\":7}");
	mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\"}");
	mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"method\":"
	    "\"notifications/cancelled\",\"params\":{\"requestId\":3}}");
	/* A response to a request of ours (we send none) is no request. */
	mcp_send(&m, "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}");
	/* Blank lines carry nothing. */
	mcp_send(&m, "");
	mcp_send(&m, "  \r");
	assert_pong(mcp_call(&m, PING("1")), json_integer(1));
	initialize(&m, INIT_2025_11_25, "2025-11-25");
	assert_pong(mcp_call(&m, PING("2")), json_integer(2));
	mcp_stop(&m);
	harness_finish(b);
}

static void
lifecycle_and_version_negotiation(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r, *result;
	size_t		 i;
	static const struct {
		const char	*requested;
		const char	*answered;
	} cases[] = {
		{ "2025-11-25", "2025-11-25" },
		{ "2025-06-18", "2025-06-18" },
		{ "2025-03-26", "2025-03-26" },
		/* Unknown to us, older or newer: our latest. */
		{ "2024-11-05", "2025-11-25" },
		{ "2099-01-01", "2025-11-25" },
	};

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char	line[256];

		start_without_broker(b, &m, NULL);
		/* Before initialize: ping only; unknown methods stay so. */
		assert_pong(mcp_call(&m, PING("1")), json_integer(1));
		assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,"
		    "\"method\":\"tools/list\"}"), -32600, json_integer(2));
		assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,"
		    "\"method\":\"tools/call\",\"params\":{\"name\":"
		    "\"diagnose\"}}"), -32600, json_integer(3));
		assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,"
		    "\"method\":\"resources/list\"}"), -32601,
		    json_integer(4));
		/* 2026-07-28's probe: not served, so its client falls back. */
		assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,"
		    "\"method\":\"server/discover\"}"), -32601,
		    json_integer(4));
		assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":5,"
		    "\"method\":\"initialize\",\"params\":{}}"), -32602,
		    json_integer(5));
		snprintf(line, sizeof line, "{\"jsonrpc\":\"2.0\",\"id\":0,"
		    "\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
		    "\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
		    "\"version\":\"1\"}}}", cases[i].requested);
		r = mcp_call(&m, line);
		result = assert_result(r, json_integer(0));
		assert_string_equal(json_string_value(json_object_get(result,
		    "protocolVersion")), cases[i].answered);
		assert_true(json_is_object(json_object_get(json_object_get(
		    result, "capabilities"), "tools")));
		assert_string_equal(json_string_value(json_object_get(
		    json_object_get(result, "serverInfo"), "name")),
		    "idem-mcp");
		assert_non_null(json_string_value(json_object_get(
		    json_object_get(result, "serverInfo"), "version")));
		json_decref(r);
		/* A second initialize is refused; the session is unchanged. */
		assert_error(mcp_call(&m, INIT_2025_06_18), -32600,
		    json_integer(0));
		mcp_send(&m, "{\"jsonrpc\":\"2.0\","
		    "\"method\":\"notifications/initialized\"}");
		r = mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":6,"
		    "\"method\":\"tools/list\"}");
		assert_int_equal(json_array_size(json_object_get(
		    assert_result(r, json_integer(6)), "tools")), MCP_TOOLS);
		json_decref(r);
		mcp_stop(&m);
	}
	harness_finish(b);
}

static void
batches_only_in_2025_03_26(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;

	/* Before initialize (which must not be batched): refused. */
	start_without_broker(b, &m, NULL);
	assert_error(mcp_call(&m, "[" INIT_2025_03_26 "]"), -32600, NULL);
	/* 2025-06-18 removed batches. */
	initialize(&m, INIT_2025_06_18, "2025-06-18");
	assert_error(mcp_call(&m, "[" PING("1") "," PING("2") "]"), -32600,
	    NULL);
	assert_error(mcp_call(&m, "[]"), -32600, NULL);
	assert_pong(mcp_call(&m, PING("3")), json_integer(3));
	mcp_stop(&m);

	start_without_broker(b, &m, NULL);
	initialize(&m, INIT_2025_11_25, "2025-11-25");
	assert_error(mcp_call(&m, "[" PING("1") "]"), -32600, NULL);
	mcp_stop(&m);

	/* 2025-03-26: served, one answer per request, in order. */
	start_without_broker(b, &m, NULL);
	initialize(&m, INIT_2025_03_26, "2025-03-26");
	r = mcp_call(&m, "[" PING("1") ","
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/foo\"},"
	    PING("\"two\"") ",5,"
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}," INIT_2025_03_26
	    "]");
	assert_true(json_is_array(r));
	assert_int_equal(json_array_size(r), 5);
	assert_pong(json_incref(json_array_get(r, 0)), json_integer(1));
	assert_pong(json_incref(json_array_get(r, 1)), json_string("two"));
	assert_error(json_incref(json_array_get(r, 2)), -32600, NULL);
	assert_error(json_incref(json_array_get(r, 3)), -32601,
	    json_integer(3));
	assert_error(json_incref(json_array_get(r, 4)), -32600,
	    json_integer(0));
	json_decref(r);
	/* Only notifications: no answer at all. */
	mcp_send(&m, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/a\"},"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/b\"}]");
	assert_pong(mcp_call(&m, PING("4")), json_integer(4));
	assert_error(mcp_call(&m, "[]"), -32600, NULL);
	mcp_stop(&m);
	harness_finish(b);
}

/* A ping line of exactly `bytes` bytes, newline included. */
static char *
ping_of_size(size_t bytes, const char *id)
{
	char	*line, head[64];
	size_t	 fixed;

	snprintf(head, sizeof head, "{\"jsonrpc\":\"2.0\",\"id\":%s,"
	    "\"method\":\"ping\",\"params\":{\"pad\":\"", id);
	fixed = strlen(head) + strlen("\"}}") + 1;
	assert_true(bytes > fixed);
	line = malloc(bytes);
	assert_non_null(line);
	memcpy(line, head, strlen(head));
	memset(line + strlen(head), 'x', bytes - fixed);
	memcpy(line + bytes - strlen("\"}}") - 1, "\"}}", strlen("\"}}") + 1);
	assert_int_equal(strlen(line) + 1, bytes);
	return line;
}

static void
oversized_lines(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	char		*line;

	start_without_broker(b, &m, NULL);
	/* At the limit: served. */
	line = ping_of_size(IDEM_MCP_MAX_LINE_BYTES, "1");
	assert_pong(mcp_call(&m, line), json_integer(1));
	free(line);
	/* One byte over: an error, and the stream stays in step. */
	line = ping_of_size(IDEM_MCP_MAX_LINE_BYTES + 1, "2");
	assert_error(mcp_call(&m, line), -32600, NULL);
	free(line);
	assert_pong(mcp_call(&m, PING("3")), json_integer(3));
	/* Far over (three times the limit): one error, then in step. */
	line = ping_of_size(3 * IDEM_MCP_MAX_LINE_BYTES, "4");
	assert_error(mcp_call(&m, line), -32600, NULL);
	free(line);
	assert_pong(mcp_call(&m, PING("5")), json_integer(5));
	mcp_stop(&m);
	harness_finish(b);
}

static void
tools_list_pages(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r, *result, *names = json_array(), *tool;
	const char	*cursor;
	char		 line[256];
	size_t		 i, pages = 0;

	start_without_broker(b, &m, MCP_PAGE);
	initialize(&m, INIT_2025_11_25, "2025-11-25");
	snprintf(line, sizeof line,
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
	for (;;) {
		r = mcp_call(&m, line);
		result = assert_result(r, json_integer(1));
		pages++;
		assert_true(json_array_size(json_object_get(result, "tools"))
		    <= MCP_PAGE_SIZE);
		json_array_foreach(json_object_get(result, "tools"), i, tool) {
			json_array_append(names, json_object_get(tool, "name"));
			assert_true(json_is_object(json_object_get(tool,
			    "inputSchema")));
			assert_true(json_is_object(json_object_get(tool,
			    "outputSchema")));
		}
		cursor = json_string_value(json_object_get(result,
		    "nextCursor"));
		if (cursor == NULL) {
			json_decref(r);
			break;
		}
		snprintf(line, sizeof line, "{\"jsonrpc\":\"2.0\",\"id\":1,"
		    "\"method\":\"tools/list\",\"params\":{\"cursor\":\"%s\"}}",
		    cursor);
		json_decref(r);
	}
	assert_int_equal(pages, (MCP_TOOLS + MCP_PAGE_SIZE - 1) / MCP_PAGE_SIZE);
	assert_int_equal(json_array_size(names), MCP_TOOLS);
	assert_string_equal(json_string_value(json_array_get(names, 0)),
	    "write_task");
	assert_string_equal(json_string_value(json_array_get(names, 3)),
	    "diagnose");
	json_decref(names);
	/* A cursor it did not issue. */
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,"
	    "\"method\":\"tools/list\",\"params\":{\"cursor\":\"bogus\"}}"),
	    -32602, json_integer(2));
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,"
	    "\"method\":\"tools/list\",\"params\":{\"cursor\":"
	    "\"idem-mcp/tools/99\"}}"), -32602, json_integer(3));
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":4,"
	    "\"method\":\"tools/list\",\"params\":{\"cursor\":7}}"), -32602,
	    json_integer(4));
	mcp_stop(&m);
	harness_finish(b);
}

static void
tools_call_protocol_errors(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*result, *sc;
	char		*line;

	start_without_broker(b, &m, NULL);
	initialize(&m, INIT_2025_06_18, "2025-06-18");
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,"
	    "\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}"),
	    -32602, json_integer(1));
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":2,"
	    "\"method\":\"tools/call\",\"params\":{}}"), -32602,
	    json_integer(2));
	assert_error(mcp_call(&m, "{\"jsonrpc\":\"2.0\",\"id\":3,"
	    "\"method\":\"tools/call\",\"params\":{\"name\":\"diagnose\","
	    "\"arguments\":[]}}"), -32602, json_integer(3));
	/* 2025-06-18: invalid arguments are a protocol error. */
	line = tool_call_line(4, "write_task", json_pack("{s:{s:s}}", "task",
	    "sender", "PM"));
	assert_error(mcp_call(&m, line), -32602, json_integer(4));
	free(line);
	mcp_stop(&m);

	/* 2025-11-25: a tool execution error the model can act on. */
	start_without_broker(b, &m, NULL);
	initialize(&m, INIT_2025_11_25, "2025-11-25");
	result = tool_call(&m, 5, "write_task", json_pack("{s:{s:s, s:s, "
	    "s:s}}", "task", "sender", "PM", "recipient", "DEV", "subject",
	    "no id"));
	assert_true(json_is_true(json_object_get(result, "isError")));
	sc = json_object_get(result, "structuredContent");
	assert_string_equal(json_string_value(json_object_get(
	    json_object_get(sc, "error"), "code")), "invalid_arguments");
	assert_non_null(strstr(json_string_value(json_object_get(
	    json_object_get(sc, "error"), "message")), "client_submission_id"));
	json_decref(result);
	/* A member outside the schema never reaches the broker. */
	result = tool_call(&m, 6, "get_submission", json_pack("{s:s, s:s}",
	    "client_submission_id", "x", "op", "write_task"));
	assert_true(json_is_true(json_object_get(result, "isError")));
	json_decref(result);
	mcp_stop(&m);
	harness_finish(b);
}

static void
write_task_through_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*first, *again, *conflict, *down, *sc;
	char		*r1, *r2;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	mcp_start(&m, b->socket, NULL);
	initialize(&m, INIT_2025_11_25, "2025-11-25");

	first = tool_call(&m, 1, "write_task", task_arguments("lines-1",
	    "Fix login"));
	assert_false(json_is_true(json_object_get(first, "isError")));
	sc = json_object_get(first, "structuredContent");
	assert_string_equal(harness_str(sc, "disposition"), "created");
	harness_assert_bool(sc, "action_taken", 1);
	harness_assert_bool(sc, "idempotent", 1);
	assert_int_equal(json_array_size(json_object_get(first, "content")),
	    2);
	assert_int_equal(harness_count_tasks(b), 1);

	again = tool_call(&m, 2, "write_task", task_arguments("lines-1",
	    "Fix login"));
	sc = json_object_get(again, "structuredContent");
	assert_string_equal(harness_str(sc, "disposition"), "reused");
	harness_assert_bool(sc, "action_taken", 0);
	r1 = json_dumps(json_object_get(json_object_get(first,
	    "structuredContent"), "receipt"), JSON_COMPACT | JSON_SORT_KEYS);
	r2 = json_dumps(json_object_get(sc, "receipt"),
	    JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(r1, r2);
	free(r1);
	free(r2);
	assert_int_equal(harness_count_tasks(b), 1);

	conflict = tool_call(&m, 3, "write_task", task_arguments("lines-1",
	    "Something else"));
	assert_true(json_is_true(json_object_get(conflict, "isError")));
	sc = json_object_get(conflict, "structuredContent");
	assert_string_equal(harness_str(sc, "disposition"), "conflict");
	assert_string_equal(harness_str(json_object_get(sc, "error"),
	    "reason"), "digest_mismatch");
	assert_string_equal(harness_str(json_object_get(sc, "existing"),
	    "task_id"), harness_str(json_object_get(json_object_get(first,
	    "structuredContent"), "receipt"), "task_id"));
	assert_int_equal(harness_count_tasks(b), 1);

	/* Broker down: a retryable tool error, nothing sent. */
	assert_int_equal(harness_stop(b), 0);
	down = tool_call(&m, 4, "write_task", task_arguments("lines-2",
	    "Another"));
	assert_true(json_is_true(json_object_get(down, "isError")));
	sc = json_object_get(down, "structuredContent");
	assert_string_equal(harness_str(json_object_get(sc, "error"), "code"),
	    "broker_unavailable");
	harness_assert_bool(json_object_get(sc, "error"), "retryable", 1);
	harness_assert_bool(sc, "action_taken", 0);
	assert_int_equal(harness_count_tasks(b), 1);

	json_decref(first);
	json_decref(again);
	json_decref(conflict);
	json_decref(down);
	mcp_stop(&m);
	harness_finish(b);
}

/* diagnose answered by the broker (not broker_unavailable). */
static void
assert_reaches_broker(struct mcp *m)
{
	json_t	*result;

	initialize(m, INIT_2025_11_25, "2025-11-25");
	result = tool_call(m, 1, "diagnose", json_object());
	if (!json_is_false(json_object_get(result, "isError")))
		fail_msg("diagnose failed: %s", json_dumps(result,
		    JSON_COMPACT));
	assert_true(json_is_object(json_object_get(json_object_get(result,
	    "structuredContent"), "counts")));
	json_decref(result);
	mcp_stop(m);
}

/* As idemctl: --socket, else --root, else $IDEM_SOCKET, else $IDEM_ROOT. */
static void
finds_broker_as_idemctl(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	char		 bogus[300];
	const char	*none[] = { NULL };
	const char	*root[] = { "--root", b->root, NULL };
	const char	*socket[] = { "--socket", b->socket, NULL };

	snprintf(bogus, sizeof bogus, "%s/nowhere", b->root);
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	mcp_spawn(&m, none, b->root, NULL);
	assert_reaches_broker(&m);
	mcp_spawn(&m, none, bogus, b->socket);
	assert_reaches_broker(&m);
	/* A flag beats the environment. */
	mcp_spawn(&m, root, bogus, bogus);
	assert_reaches_broker(&m);
	mcp_spawn(&m, socket, bogus, bogus);
	assert_reaches_broker(&m);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(parse_errors_and_invalid_requests),
		T(id_types),
		T(notifications_get_no_answer),
		T(lifecycle_and_version_negotiation),
		T(batches_only_in_2025_03_26),
		T(oversized_lines),
		T(tools_list_pages),
		T(tools_call_protocol_errors),
		T(write_task_through_broker),
		T(finds_broker_as_idemctl),
	};

	/* A closed pipe to idem-mcp must fail an assertion, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	return FILTER_RUN(tests);
}
