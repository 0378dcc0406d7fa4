/* SPDX-License-Identifier: ISC */
/*
 * test_mcp_broker.c: idem-mcp's tools other than write_task and diagnose
 * (test_mcp_lines' own), through a real idemd: write_report (created,
 * retried, conflict), the effect ledger (effect_begin, effect_complete,
 * effect_resolve applied and not_applied after a lapsed lease,
 * effect_extend live and lapsed) and
 * get_submission, for tasks and effects.
 *
 * Receipts are compared as bytes, never re-serialized: the receipt's
 * text inside the tool result (the structuredContent serialized as the
 * result's second text block) against the receipt inside the broker's
 * own reply line for the same key, read over the socket as it came.  A
 * receipt is SPEC.md's "byte for byte"; an idem-mcp that re-encoded a
 * number, an escape or the members' order would show here.
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"

#define INIT_LINE	"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"," \
	"\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}," \
	"\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
#define KIND		"mail.send/v1"
/*
 * A result whose bytes a re-encoding would change: non-ASCII text, an
 * escaped quote and control character, a slash, numbers in several
 * forms, nesting, members out of order.
 */
#define RESULT		"{\"zeta\":\"caf\\u00e9 \\u2713 \\\"q\\\" \\t/\"," \
	"\"n\":1.5e3,\"neg\":-0.25,\"big\":12345678901234," \
	"\"list\":[1,{\"b\":true,\"a\":null}],\"alpha\":\"\"}"
#define LEASE_SHORT	100	/* SPEC.md's least lease_ms */

struct mcp {
	pid_t	 pid;
	FILE	*in;
	FILE	*out;
};

/* ---- idem-mcp ------------------------------------------------------------ */

/* idem-mcp --socket socket, initialized (2025-11-25). */
static void
mcp_open(struct mcp *m, const char *socket)
{
	const char	*prog = getenv("IDEM_MCP");
	int		 in[2], out[2];
	json_t		*r;
	char		*line = NULL;
	size_t		 size = 0;

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
		execl(prog, prog, "--socket", socket, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	m->in = fdopen(in[1], "w");
	m->out = fdopen(out[0], "r");
	assert_non_null(m->in);
	assert_non_null(m->out);
	assert_true(fprintf(m->in, "%s\n", INIT_LINE) > 0);
	assert_int_equal(fflush(m->in), 0);
	assert_true(getline(&line, &size, m->out) > 0);
	r = json_loads(line, 0, NULL);
	assert_non_null(json_object_get(r, "result"));
	json_decref(r);
	free(line);
	assert_true(fprintf(m->in, "{\"jsonrpc\":\"2.0\",\"method\":"
	    "\"notifications/initialized\"}\n") > 0);
	assert_int_equal(fflush(m->in), 0);
}

/* Close its stdin: it exits 0. */
static void
mcp_close(struct mcp *m)
{
	int	status;

	fclose(m->in);
	assert_int_equal(waitpid(m->pid, &status, 0), m->pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	fclose(m->out);
}

/*
 * tools/call name with arguments (a JSON object's text) -> the
 * CallToolResult (new reference); *text: its second text block, the
 * structuredContent as idem-mcp wrote it (malloc'd).
 */
static json_t *
mcp_tool(struct mcp *m, const char *name, const char *arguments, char **text)
{
	static int	 id = 1;
	json_t		*r, *result, *block;
	char		*line = NULL;
	size_t		 size = 0;

	assert_true(fprintf(m->in, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":"
	    "\"tools/call\",\"params\":{\"name\":\"%s\",\"arguments\":%s}}\n",
	    id, name, arguments) > 0);
	assert_int_equal(fflush(m->in), 0);
	assert_true(getline(&line, &size, m->out) > 0);
	r = json_loads(line, 0, NULL);
	if (r == NULL || (result = json_object_get(r, "result")) == NULL)
		fail_msg("tools/call %s: %s", name, line);
	assert_int_equal(json_integer_value(json_object_get(r, "id")), id);
	id++;
	free(line);
	block = json_array_get(json_object_get(result, "content"), 1);
	assert_non_null(json_string_value(json_object_get(block, "text")));
	*text = strdup(json_string_value(json_object_get(block, "text")));
	json_incref(result);
	json_decref(r);
	/* The text block is the structuredContent, the same JSON. */
	r = json_loads(*text, 0, NULL);
	assert_non_null(r);
	assert_true(json_equal(r, json_object_get(result,
	    "structuredContent")));
	json_decref(r);
	return result;
}

static json_t *
sc_of(json_t *result)
{
	return json_object_get(result, "structuredContent");
}

/* ---- raw JSON ------------------------------------------------------------ */

static const char *
raw_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* The end of the JSON value that starts at p (p itself if none). */
static const char *
raw_skip(const char *p)
{
	int	depth = 0, in_string = 0;

	if (*p != '{' && *p != '[' && *p != '"') {
		while (*p != '\0' && strchr(",}] \t\r\n", *p) == NULL)
			p++;
		return p;
	}
	for (; *p != '\0'; p++) {
		if (in_string) {
			if (*p == '\\' && p[1] != '\0')
				p++;
			else if (*p == '"') {
				in_string = 0;
				if (depth == 0)
					return p + 1;
			}
		} else if (*p == '"')
			in_string = 1;
		else if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return p + 1;
	}
	return p;
}

/*
 * The bytes of member key of the JSON object that text holds, as they
 * are in text (malloc'd), or NULL.  Keys are compared as written: the
 * members asked for are plain ASCII.
 */
static char *
raw_member(const char *text, const char *key)
{
	const char	*p = raw_ws(text), *name, *end;
	size_t		 klen = strlen(key);

	if (*p++ != '{')
		return NULL;
	for (;;) {
		p = raw_ws(p);
		if (*p != '"')
			return NULL;
		name = p + 1;
		p = raw_skip(p);
		p = raw_ws(p);
		if (*p++ != ':')
			return NULL;
		p = raw_ws(p);
		end = raw_skip(p);
		if (end == p)
			return NULL;
		if ((size_t)(end - p) > 0 && name + klen + 1 <= p &&
		    strncmp(name, key, klen) == 0 && name[klen] == '"')
			return strndup(p, (size_t)(end - p));
		p = raw_ws(end);
		if (*p++ != ',')
			return NULL;
	}
}

/* raw_member along a path of keys (NULL-terminated). */
static char *
raw_path(const char *text, ...)
{
	va_list		 ap;
	const char	*key;
	char		*cur = strdup(text), *next;

	va_start(ap, text);
	while (cur != NULL && (key = va_arg(ap, const char *)) != NULL) {
		next = raw_member(cur, key);
		free(cur);
		cur = next;
	}
	va_end(ap);
	return cur;
}

/* One request line to the broker; its reply line as it came. */
static char *
broker_line(struct broker *b, const char *fmt, ...)
{
	char	line[4096], *reply;
	va_list	ap;
	int	fd;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	assert_true((fd = harness_raw_connect(b)) != -1);
	assert_int_equal(harness_raw_send(fd, line), 0);
	reply = harness_raw_read_line(fd);
	assert_non_null(reply);
	close(fd);
	return reply;
}

/* Two byte strings that must be equal, and not empty. */
static void
assert_same_bytes(const char *what, const char *a, const char *b)
{
	if (a == NULL || b == NULL || a[0] == '\0' || strcmp(a, b) != 0)
		fail_msg("%s: the bytes differ:\n  idem-mcp %s\n  idemd    %s",
		    what, a != NULL ? a : "(none)", b != NULL ? b : "(none)");
}

/* The receipt inside the tool's text equals the one in the broker's line. */
static void
assert_receipt_bytes(const char *what, const char *text, const char *line,
    const char *key)
{
	char	*a = raw_path(text, "receipt", (char *)NULL);
	char	*b = key != NULL ? raw_path(line, key, "receipt", (char *)NULL) :
		    raw_path(line, "receipt", (char *)NULL);

	assert_same_bytes(what, a, b);
	free(a);
	free(b);
}

/* ---- tests --------------------------------------------------------------- */

#define TASK_ARGS(id)	"{\"client_submission_id\":\"" id "\",\"task\":" \
	"{\"sender\":\"PM\",\"recipient\":\"DEV\",\"subject\":\"Fix login\"}}"

/*
 * get_submission of a task: the receipt in the tool's text is the broker's
 * bytes, from get_submission and from a write_task retry over the socket,
 * and write_task's own tool result carries the same bytes.
 */
static void
get_submission_of_a_task(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, *wtext, *line, *sub;

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	r = mcp_tool(&m, "write_task", TASK_ARGS("gs-1"), &wtext);
	assert_string_equal(harness_str(sc_of(r), "disposition"), "created");
	json_decref(r);

	r = mcp_tool(&m, "get_submission", "{\"client_submission_id\":"
	    "\"gs-1\"}", &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(json_object_get(sc_of(r),
	    "submission"), "state"), "committed");
	line = broker_line(b, "{\"op\":\"get_submission\","
	    "\"client_submission_id\":\"gs-1\"}");
	/* get_submission's structuredContent: {"submission":{...}}. */
	sub = raw_member(text, "submission");
	assert_non_null(sub);
	assert_receipt_bytes("get_submission (task)", sub, line,
	    "submission");
	assert_receipt_bytes("write_task's receipt", wtext, line,
	    "submission");
	free(sub);
	free(line);
	line = broker_line(b, "{\"op\":\"write_task\",\"client_submission_id\":"
	    "\"gs-1\",\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"Fix login\"}}");
	assert_receipt_bytes("write_task reused", wtext, line, NULL);
	free(line);
	free(text);
	free(wtext);
	json_decref(r);

	/* Unknown: not an error, no receipt. */
	r = mcp_tool(&m, "get_submission", "{\"client_submission_id\":"
	    "\"gs-none\"}", &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_null(raw_path(text, "submission", "receipt", (char *)NULL));
	free(text);
	json_decref(r);
	assert_int_equal(harness_count_tasks(b), 1);
	mcp_close(&m);
	harness_finish(b);
}

/*
 * write_report: created (one REPORT file), the retry reused with the
 * same report_id and report_path (deduplicated, nothing written), the
 * same id with another body a conflict; the report's facts in the tool's
 * text are the broker's bytes for the same call over the socket.
 */
static void
write_report_through_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, *line, *a, *c, args[1024];
	const char	*task_id;
	char		 task[64];

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	r = mcp_tool(&m, "write_task", TASK_ARGS("wr-task"), &text);
	task_id = harness_str(json_object_get(sc_of(r), "receipt"),
	    "task_id");
	snprintf(task, sizeof task, "%s", task_id);
	free(text);
	json_decref(r);

	snprintf(args, sizeof args, "{\"task_id\":\"%s\","
	    "\"client_submission_id\":\"wr-1\",\"report\":{\"sender\":"
	    "\"DEV\",\"status\":\"done\",\"body\":\"Fixed: caf\\u00e9\"}}",
	    task);
	r = mcp_tool(&m, "write_report", args, &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "disposition"), "created");
	harness_assert_bool(sc_of(r), "action_taken", 1);
	harness_assert_bool(sc_of(r), "deduplicated", 0);
	assert_int_equal(harness_count_reports(b), 1);
	free(text);
	json_decref(r);

	/* The retry: reused, the same report, nothing written. */
	r = mcp_tool(&m, "write_report", args, &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "disposition"), "reused");
	harness_assert_bool(sc_of(r), "action_taken", 0);
	harness_assert_bool(sc_of(r), "deduplicated", 1);
	assert_int_equal(harness_count_reports(b), 1);
	line = broker_line(b, "{\"op\":\"write_report\",\"task_id\":\"%s\","
	    "\"client_submission_id\":\"wr-1\",\"report\":{\"sender\":"
	    "\"DEV\",\"status\":\"done\",\"body\":\"Fixed: caf\\u00e9\"}}",
	    task);
	a = raw_member(text, "report_id");
	c = raw_member(line, "report_id");
	assert_same_bytes("report_id", a, c);
	free(a);
	free(c);
	a = raw_member(text, "report_path");
	c = raw_member(line, "report_path");
	assert_same_bytes("report_path", a, c);
	free(a);
	free(c);
	free(line);
	free(text);
	json_decref(r);

	/* Other content under the id: conflict, nothing written. */
	snprintf(args, sizeof args, "{\"task_id\":\"%s\","
	    "\"client_submission_id\":\"wr-1\",\"report\":{\"sender\":"
	    "\"DEV\",\"status\":\"blocked\",\"body\":\"Other\"}}", task);
	r = mcp_tool(&m, "write_report", args, &text);
	assert_true(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(json_object_get(sc_of(r), "error"),
	    "code"), "conflict");
	harness_assert_bool(sc_of(r), "action_taken", 0);
	assert_int_equal(harness_count_reports(b), 1);
	free(text);
	json_decref(r);
	mcp_close(&m);
	harness_finish(b);
}

/*
 * effect_begin, effect_complete, get_submission: proceed; complete
 * commits; the complete's retry, a begin's reused and get_submission
 * with effect_kind all carry the receipt, and each tool's text holds
 * the broker's bytes of it (from begin and get_submission over the
 * socket), a result that re-encoding would change included.
 */
static void
effects_through_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, *ctext, *line, *sub, fence[80], args[2048];

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	r = mcp_tool(&m, "effect_begin", "{\"client_submission_id\":\"e-1\","
	    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":\"a@b\"}}",
	    &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "disposition"), "proceed");
	assert_int_equal(harness_int(sc_of(r), "attempt"), 1);
	snprintf(fence, sizeof fence, "%s", harness_str(sc_of(r), "fence"));
	free(text);
	json_decref(r);

	snprintf(args, sizeof args, "{\"client_submission_id\":\"e-1\","
	    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\",\"outcome\":"
	    "\"applied\",\"result\":%s}", fence, RESULT);
	r = mcp_tool(&m, "effect_complete", args, &ctext);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "state"), "committed");
	harness_assert_bool(sc_of(r), "action_taken", 1);
	json_decref(r);

	/* The broker's own bytes: a begin (reused) and get_submission. */
	line = broker_line(b, "{\"op\":\"effect_begin\",\"client_submission_id\":"
	    "\"e-1\",\"effect_kind\":\"" KIND "\",\"request\":{\"to\":"
	    "\"a@b\"}}");
	assert_receipt_bytes("effect_complete's receipt", ctext, line, NULL);
	free(line);
	line = broker_line(b, "{\"op\":\"get_submission\","
	    "\"client_submission_id\":\"e-1\",\"effect_kind\":\"" KIND "\"}");
	assert_receipt_bytes("effect_complete's receipt", ctext, line,
	    "submission");

	/* The complete's retry: the same receipt, nothing recorded. */
	r = mcp_tool(&m, "effect_complete", args, &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	harness_assert_bool(sc_of(r), "action_taken", 0);
	assert_receipt_bytes("effect_complete retried", text, line,
	    "submission");
	free(text);
	json_decref(r);

	/* A begin: reused, the receipt. */
	r = mcp_tool(&m, "effect_begin", "{\"client_submission_id\":\"e-1\","
	    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":\"a@b\"}}",
	    &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "disposition"), "reused");
	harness_assert_bool(sc_of(r), "action_taken", 0);
	assert_receipt_bytes("effect_begin reused", text, line, "submission");
	free(text);
	json_decref(r);

	/* get_submission with effect_kind. */
	r = mcp_tool(&m, "get_submission", "{\"client_submission_id\":"
	    "\"e-1\",\"effect_kind\":\"" KIND "\"}", &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(json_object_get(sc_of(r),
	    "submission"), "state"), "committed");
	sub = raw_member(text, "submission");
	assert_non_null(sub);
	assert_receipt_bytes("get_submission (effect)", sub, line,
	    "submission");
	free(sub);
	free(text);
	json_decref(r);

	/* Another result under the committed key: already_committed. */
	snprintf(args, sizeof args, "{\"client_submission_id\":\"e-1\","
	    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\",\"outcome\":"
	    "\"applied\",\"result\":{\"other\":1}}", fence);
	r = mcp_tool(&m, "effect_complete", args, &text);
	assert_true(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(json_object_get(sc_of(r), "error"),
	    "reason"), "already_committed");
	free(text);
	json_decref(r);

	free(line);
	free(ctext);
	mcp_close(&m);
	harness_finish(b);
}

/* effect_begin through idem-mcp until the lease lapsed: outcome_unknown. */
static void
begin_until_unknown(struct mcp *m, const char *id)
{
	struct timespec	 ts = { 0, 20 * 1000000L };
	json_t		*r;
	char		 args[512], *text;
	int		 i;

	snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":\"a@b\"}}",
	    id);
	/* A lease is time: nothing to await but the broker's clock. */
	for (i = 0; i < 500; i++) {
		r = mcp_tool(m, "effect_begin", args, &text);
		free(text);
		if (strcmp(harness_str(json_object_get(sc_of(r), "error"),
		    "code"), "outcome_unknown") == 0) {
			assert_true(json_is_true(json_object_get(r,
			    "isError")));
			json_decref(r);
			return;
		}
		assert_string_equal(harness_str(json_object_get(sc_of(r),
		    "error"), "code"), "in_progress");
		json_decref(r);
		nanosleep(&ts, NULL);
	}
	fail_msg("%s: the lease did not lapse in 10 s", id);
}

/*
 * effect_resolve through idem-mcp after a lapsed lease: applied commits
 * (recovered; the receipt's bytes the broker's, later begins reused with
 * them), not_applied releases (the next begin proceeds at attempt 2 with
 * the same external_key), evidence against the committed receipt is
 * already_committed.
 */
static void
effect_resolve_through_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, *rtext, *line, args[2048], xkey[128];
	const char	*ids[] = { "res-applied", "res-not" };
	int		 i;

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	for (i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
		    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":"
		    "\"a@b\"},\"lease_ms\":%d}", ids[i], LEASE_SHORT);
		r = mcp_tool(&m, "effect_begin", args, &text);
		assert_string_equal(harness_str(sc_of(r), "disposition"),
		    "proceed");
		if (i == 1)
			snprintf(xkey, sizeof xkey, "%s", harness_str(sc_of(r),
			    "external_key"));
		free(text);
		json_decref(r);
	}
	for (i = 0; i < 2; i++)
		begin_until_unknown(&m, ids[i]);

	snprintf(args, sizeof args, "{\"client_submission_id\":"
	    "\"res-applied\",\"effect_kind\":\"" KIND "\",\"evidence\":"
	    "{\"observed\":\"applied\",\"result\":%s,\"source\":\"mailbox\"}}",
	    RESULT);
	r = mcp_tool(&m, "effect_resolve", args, &rtext);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "state"), "committed");
	harness_assert_bool(sc_of(r), "recovered", 1);
	harness_assert_bool(sc_of(r), "action_taken", 1);
	json_decref(r);
	line = broker_line(b, "{\"op\":\"get_submission\","
	    "\"client_submission_id\":\"res-applied\",\"effect_kind\":\""
	    KIND "\"}");
	assert_receipt_bytes("effect_resolve's receipt", rtext, line,
	    "submission");
	r = mcp_tool(&m, "effect_begin", "{\"client_submission_id\":"
	    "\"res-applied\",\"effect_kind\":\"" KIND "\",\"request\":"
	    "{\"to\":\"a@b\"}}", &text);
	assert_string_equal(harness_str(sc_of(r), "disposition"), "reused");
	harness_assert_bool(sc_of(r), "recovered", 1);
	assert_receipt_bytes("effect_begin after resolve", text, line,
	    "submission");
	free(text);
	json_decref(r);
	free(line);
	free(rtext);

	/* Contradicting the committed receipt: already_committed. */
	r = mcp_tool(&m, "effect_resolve", "{\"client_submission_id\":"
	    "\"res-applied\",\"effect_kind\":\"" KIND "\",\"evidence\":"
	    "{\"observed\":\"not_applied\",\"source\":\"mailbox\"}}", &text);
	assert_true(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(json_object_get(sc_of(r), "error"),
	    "reason"), "already_committed");
	free(text);
	json_decref(r);

	/* not_applied: released; the next begin proceeds, attempt 2. */
	r = mcp_tool(&m, "effect_resolve", "{\"client_submission_id\":"
	    "\"res-not\",\"effect_kind\":\"" KIND "\",\"evidence\":"
	    "{\"observed\":\"not_applied\",\"source\":\"mailbox\"}}", &text);
	assert_false(json_is_true(json_object_get(r, "isError")));
	assert_string_equal(harness_str(sc_of(r), "state"), "released");
	assert_int_equal(harness_int(sc_of(r), "attempt"), 1);
	assert_string_equal(harness_str(sc_of(r), "external_key"), xkey);
	free(text);
	json_decref(r);
	r = mcp_tool(&m, "effect_begin", "{\"client_submission_id\":"
	    "\"res-not\",\"effect_kind\":\"" KIND "\",\"request\":"
	    "{\"to\":\"a@b\"}}", &text);
	assert_string_equal(harness_str(sc_of(r), "disposition"), "proceed");
	assert_int_equal(harness_int(sc_of(r), "attempt"), 2);
	assert_string_equal(harness_str(sc_of(r), "external_key"), xkey);
	free(text);
	json_decref(r);
	mcp_close(&m);
	harness_finish(b);
}

/* The raw reader itself: members found as written, nested, escaped. */
static void
raw_member_reads_bytes(void **state)
{
	const char	*text = "{\"a\":\"x\\\"}\" , \"receipt\" : {\"n\":1.5e3,"
	    "\"s\":\"}\"},\"z\":[1,{\"b\":2}],\"t\":true}";
	char		*v;

	(void)state;
	v = raw_member(text, "receipt");
	assert_string_equal(v, "{\"n\":1.5e3,\"s\":\"}\"}");
	free(v);
	v = raw_member(text, "z");
	assert_string_equal(v, "[1,{\"b\":2}]");
	free(v);
	v = raw_member(text, "t");
	assert_string_equal(v, "true");
	free(v);
	v = raw_member(text, "a");
	assert_string_equal(v, "\"x\\\"}\"");
	free(v);
	assert_null(raw_member(text, "n"));	/* not at the top */
	v = raw_path(text, "receipt", "n", (char *)NULL);
	assert_string_equal(v, "1.5e3");
	free(v);
}

/* A tool result's first text block: the line the model reads. */
static const char *
first_text(json_t *r)
{
	const char	*t = json_string_value(json_object_get(json_array_get(
			    json_object_get(r, "content"), 0), "text"));

	assert_non_null(t);
	return t;
}

/*
 * effect_extend through idem-mcp: a live lease moves (the tool's text
 * says until when), a lapsed one is an outcome_unknown tool error whose
 * text says the complete with the same fence is still accepted, and
 * that complete commits.
 */
static void
effect_extend_through_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, args[1024], fence[80];
	const char	*id[] = { "ext-live", "ext-lapsed" };
	int		 i;

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	for (i = 0; i < 2; i++) {
		snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
		    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":"
		    "\"a@b\"},\"lease_ms\":%d}", id[i], i == 0 ? 60000 :
		    LEASE_SHORT);
		r = mcp_tool(&m, "effect_begin", args, &text);
		assert_string_equal(harness_str(sc_of(r), "disposition"),
		    "proceed");
		snprintf(fence, sizeof fence, "%s", harness_str(sc_of(r),
		    "fence"));
		free(text);
		json_decref(r);
		if (i == 1)
			begin_until_unknown(&m, id[i]);
		snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
		    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\","
		    "\"lease_ms\":600000}", id[i], fence);
		r = mcp_tool(&m, "effect_extend", args, &text);
		if (i == 0) {
			assert_false(json_is_true(json_object_get(r,
			    "isError")));
			assert_non_null(json_object_get(sc_of(r),
			    "lease_expires_at"));
			harness_assert_bool(sc_of(r), "action_taken", 1);
			assert_non_null(strstr(first_text(r), "extended"));
		} else {
			assert_true(json_is_true(json_object_get(r,
			    "isError")));
			assert_string_equal(harness_str(sc_of(r),
			    "disposition"), "outcome_unknown");
			assert_non_null(strstr(first_text(r), "call "
			    "effect_complete with the same fence"));
		}
		free(text);
		json_decref(r);
		snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
		    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\","
		    "\"outcome\":\"applied\",\"result\":%s}", id[i], fence,
		    RESULT);
		r = mcp_tool(&m, "effect_complete", args, &text);
		assert_false(json_is_true(json_object_get(r, "isError")));
		assert_string_equal(harness_str(sc_of(r), "state"),
		    "committed");
		free(text);
		json_decref(r);
	}
	mcp_close(&m);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(raw_member_reads_bytes),
		T(get_submission_of_a_task),
		T(write_report_through_broker),
		T(effects_through_broker),
		T(effect_resolve_through_broker),
		T(effect_extend_through_broker),
	};

	/* A closed pipe to idem-mcp must fail an assertion, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	return harness_exit_status(FILTER_RUN(tests));
}
