/* SPDX-License-Identifier: ISC */
/*
 * test_protocol.c: the wire protocol of a real idemd, from outside.
 *
 * A table of malformed requests, each checked for its exact error code
 * and field, for the id it echoes, for leaving the workspace as it was
 * and for leaving its connection usable (too_large excepted: that one
 * closes).  Then the peers: idle connections, clients that vanish in the
 * middle of a line, the connection cap (and a dead worker's share of
 * it), the idle timeout, pipelining, a client that does not read its
 * replies, and SIGTERM right after start-up.  Last, doc/protocol.md is
 * held to SPEC.md and to protocol.h so that the reference cannot drift.
 *
 * Nothing here sleeps to synchronise: every wait is a blocking read or a
 * poll with a generous bound that only a hung broker reaches.
 */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

/* A test that takes longer than this is hung: the watchdog ends it. */
/* How long to wait for an event that must come (a guard, not a pause). */
#define TEST_EVENT_TIMEOUT_MS	20000
/* The idle timeout the broker is given, and how long its close may take. */
#define TEST_IDLE_TIMEOUT_MS	"200"
#define TEST_IDLE_GUARD_MS	5000

#define TEST_IDLE_PEERS		500
#define TEST_IDLE_MAX_CONN	"2000"
/* Descriptors the idle test needs: its peers and some to spare. */
#define TEST_IDLE_NOFILE	(TEST_IDLE_PEERS + 100)
#define TEST_VANISHING_PEERS	50
#define TEST_PIPELINED		20
/*
 * Enough hello replies to pass IDEM_MAX_OUTPUT_BYTES and the socket, and
 * enough requests left then to fill the input past IDEM_MAX_LINE_BYTES.
 */
#define TEST_FLOOD_REQUESTS	150000

/* ---- Fixtures ------------------------------------------------------------ */

/* ---- A raw peer ---------------------------------------------------------- */

/*
 * A stream to the broker with its own read buffer.  The harness's
 * client hides how a connection ends and reads a byte at a time; these
 * tests need to tell EOF from a reset and to read megabytes of replies.
 */
struct peer {
	int	 fd;
	char	*buf;
	size_t	 length;	/* unread bytes at buf */
	size_t	 size;
};

enum peer_read {
	PEER_LINE,
	PEER_EOF,
	PEER_RESET
};

static void
peer_open(struct broker *b, struct peer *p)
{
	memset(p, 0, sizeof *p);
	p->fd = harness_raw_connect(b);
	if (p->fd == -1)
		fail_msg("connect %s: %s", b->socket, strerror(errno));
}

static void
peer_close(struct peer *p)
{
	if (p->fd != -1)
		close(p->fd);
	p->fd = -1;
	free(p->buf);
	p->buf = NULL;
	p->length = p->size = 0;
}

/* Everything, or -1 once the broker has closed (EPIPE, ECONNRESET). */
static int
send_all(int fd, const char *data, size_t length)
{
	ssize_t	n;

	while (length > 0) {
		n = send(fd, data, length, MSG_NOSIGNAL);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		data += n;
		length -= (size_t)n;
	}
	return 0;
}

static void
peer_send(struct peer *p, const char *line)
{
	size_t	 length = strlen(line);
	char	*data;

	data = malloc(length + 1);
	assert_non_null(data);
	memcpy(data, line, length);
	data[length] = '\n';
	/* One write: the line arrives whole, as most clients send it. */
	if (send_all(p->fd, data, length + 1) != 0)
		fail_msg("send: %s", strerror(errno));
	free(data);
}

/*
 * The next line (malloc'd, without its newline) within timeout_ms;
 * fails the test if nothing comes in that time.
 */
static enum peer_read
peer_read(struct peer *p, char **line, int timeout_ms)
{
	struct pollfd	 pfd = { .fd = p->fd, .events = POLLIN };
	char		*eol;
	ssize_t		 n;
	int		 ready;

	*line = NULL;
	for (;;) {
		if (p->length > 0 &&
		    (eol = memchr(p->buf, '\n', p->length)) != NULL) {
			*line = strndup(p->buf, (size_t)(eol - p->buf));
			assert_non_null(*line);
			p->length -= (size_t)(eol + 1 - p->buf);
			memmove(p->buf, eol + 1, p->length);
			return PEER_LINE;
		}
		while ((ready = poll(&pfd, 1, timeout_ms)) == -1 &&
		    errno == EINTR)
			;
		if (ready != 1)
			fail_msg("no reply within %d ms", timeout_ms);
		if (p->size - p->length < 65536) {
			p->size = p->length + 65536;
			p->buf = realloc(p->buf, p->size);
			assert_non_null(p->buf);
		}
		n = read(p->fd, p->buf + p->length, p->size - p->length);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == ECONNRESET)
			return PEER_RESET;
		if (n == -1)
			fail_msg("read: %s", strerror(errno));
		if (n == 0)
			return PEER_EOF;
		p->length += (size_t)n;
	}
}

static json_t *
peer_reply(struct peer *p)
{
	json_error_t	 error;
	json_t		*reply;
	char		*line;

	if (peer_read(p, &line, TEST_EVENT_TIMEOUT_MS) != PEER_LINE)
		fail_msg("the broker closed the connection instead of "
		    "answering");
	reply = json_loads(line, 0, &error);
	if (reply == NULL)
		fail_msg("reply is not JSON (%s): %.200s", error.text, line);
	free(line);
	return reply;
}

static json_t *
peer_call(struct peer *p, const char *line)
{
	peer_send(p, line);
	return peer_reply(p);
}

/* The broker closes: EOF, or a reset when it left our bytes unread. */
static void
peer_expect_closed(struct peer *p, int timeout_ms)
{
	enum peer_read	 r;
	char		*line;

	r = peer_read(p, &line, timeout_ms);
	if (r == PEER_LINE)
		fail_msg("expected the end of the stream, got %.200s", line);
}

/* ---- Judging replies ----------------------------------------------------- */

static void
assert_id(json_t *reply, json_int_t id)
{
	json_t	*v = json_object_get(reply, "id");

	assert_true(json_is_integer(v));
	assert_int_equal(json_integer_value(v), id);
}

static void
expect_hello(struct peer *p, json_int_t id)
{
	char	 line[64];
	json_t	*reply;

	snprintf(line, sizeof line, "{\"op\":\"hello\",\"id\":%lld}",
	    (long long)id);
	reply = peer_call(p, line);
	harness_assert_bool(reply, "ok", 1);
	assert_id(reply, id);
	assert_string_equal(harness_str(reply, "server"), "idemd");
	json_decref(reply);
}

static json_t *
stats(struct broker *b)
{
	struct peer	 p;
	json_t		*reply;

	peer_open(b, &p);
	reply = peer_call(&p, "{\"op\":\"stats\"}");
	peer_close(&p);
	harness_assert_bool(reply, "ok", 1);
	return reply;
}

/* ---- The bad-input table ------------------------------------------------- */

/*
 * One malformed request: the line is head, then fill repeated (times
 * times, or as often as it takes to make the line total bytes long
 * without its newline), then tail.  "@TASK@" stands for the id of a task
 * that exists, so that report rows fail for the reason they name.
 */
struct bad_request {
	const char	*name;
	const char	*head;
	const char	*fill;
	size_t		 times;
	size_t		 total;
	const char	*tail;
	const char	*code;
	const char	*field;		/* NULL: the error has no field */
};

#define BAD(name, line, code, field) \
	{ name, line, NULL, 0, 0, "", code, field }
#define BAD_FILL(name, head, fill, times, tail, code, field) \
	{ name, head, fill, times, 0, tail, code, field }
#define BAD_SIZED(name, head, fill, total, tail, code, field) \
	{ name, head, fill, 0, total, tail, code, field }

/* A write_task with id 7 and the given task members. */
#define WT(task)	"{\"op\":\"write_task\",\"id\":7,\"task\":{" task "}}"
/* A write_task with extra top-level members and a valid task. */
#define WT_TOP(top)	"{\"op\":\"write_task\",\"id\":\"w\"," top \
			",\"task\":{" OK_TASK "}}"
#define OK_TASK		"\"sender\":\"PM\",\"recipient\":\"DEV\"," \
			"\"subject\":\"s\""
#define WT_HEAD		"{\"op\":\"write_task\",\"id\":8,\"task\":{" OK_TASK ","
#define WR(report)	"{\"op\":\"write_report\",\"id\":9," \
			"\"task_id\":\"@TASK@\",\"report\":{" report "}}"

#define INVALID		"invalid_request"

static const struct bad_request bad_requests[] = {
	/* Framing and JSON. */
	BAD("truncated JSON", "{\"op\":\"hello\",\"id\":1", "invalid_json",
	    NULL),
	BAD("trailing garbage", "{\"op\":\"hello\",\"id\":1} x", "invalid_json",
	    NULL),
	BAD("two objects on a line", "{\"op\":\"hello\"}{\"op\":\"hello\"}",
	    "invalid_json", NULL),
	BAD("bare word", "hello", "invalid_json", NULL),
	BAD("empty line", "", "invalid_json", NULL),
	BAD("duplicate keys", "{\"op\":\"hello\",\"id\":1,\"id\":2}",
	    "invalid_json", NULL),
	BAD("duplicate task keys", WT(OK_TASK ",\"subject\":\"t\""),
	    "invalid_json", NULL),
	/* Valid JSON but not an object: the request is bad, not the JSON. */
	BAD("top-level array", "[{\"op\":\"hello\"}]", INVALID, NULL),
	BAD("top-level number", "42", INVALID, NULL),
	BAD("top-level string", "\"hello\"", INVALID, NULL),
	BAD_FILL("10000 nested arrays", "", "[", 10000, "", "invalid_json",
	    NULL),
	BAD_FILL("10000 nested objects", "", "{\"a\":", 10000, "",
	    "invalid_json", NULL),
	/* UTF-8: bytes that are not UTF-8 are invalid_utf8 (SPEC.md)... */
	BAD("raw 0xff", "{\"op\":\"hello\",\"id\":1,\"x\":\"\xff\"}",
	    "invalid_utf8", NULL),
	BAD("overlong 0xc0 0xaf", "{\"op\":\"hello\",\"id\":1,\"x\":\"\xc0\xaf"
	    "\"}", "invalid_utf8", NULL),
	BAD("encoded surrogate 0xed 0xa0 0x80", "{\"op\":\"hello\",\"id\":1,"
	    "\"x\":\"\xed\xa0\x80\"}", "invalid_utf8", NULL),
	BAD("truncated sequence", "{\"op\":\"hello\",\"id\":1,\"x\":\"\xe2\x82"
	    "\"}", "invalid_utf8", NULL),
	BAD("invalid UTF-8 in a task", WT("\"sender\":\"PM\",\"recipient\":"
	    "\"DEV\",\"subject\":\"\xff\""), "invalid_utf8", NULL),
	/*
	 * ...but "\ud800" is valid UTF-8 spelling an escape that JSON cannot
	 * decode to a character: the JSON is what is wrong.
	 */
	BAD("lone surrogate escape", "{\"op\":\"hello\",\"id\":1,"
	    "\"x\":\"\\ud800\"}", "invalid_json", NULL),
	BAD("lone surrogate in a task", WT("\"sender\":\"PM\",\"recipient\":"
	    "\"DEV\",\"subject\":\"\\udc00\""), "invalid_json", NULL),

	/* The envelope: id and op. */
	BAD("id an object", "{\"op\":\"hello\",\"id\":{\"a\":1}}", INVALID,
	    "id"),
	BAD("id an array", "{\"op\":\"hello\",\"id\":[1]}", INVALID, "id"),
	BAD("op missing", "{\"id\":11}", INVALID, "op"),
	BAD("op a number", "{\"op\":5,\"id\":12}", INVALID, "op"),
	BAD("op null", "{\"op\":null,\"id\":\"x\"}", INVALID, "op"),
	BAD("unknown op", "{\"op\":\"frobnicate\",\"id\":\"req-9\"}",
	    "unknown_op", "op"),
	BAD("unknown op, no id", "{\"op\":\"frobnicate\"}", "unknown_op",
	    "op"),
	BAD("unknown op, id null", "{\"op\":\"frobnicate\",\"id\":null}",
	    "unknown_op", "op"),
	BAD("unknown op, id negative", "{\"id\":-7,\"op\":\"frobnicate\"}",
	    "unknown_op", "op"),
	BAD("op in upper case", "{\"op\":\"HELLO\",\"id\":13.5}", "unknown_op",
	    "op"),
	/*
	 * No string anywhere in a request may carry a NUL (SPEC.md, "Wire
	 * protocol"): none may cut an op down to a known one, and none may
	 * be stored where every later answer would carry it.  The field is
	 * the dotted path of the member it is in; a NUL in a member name
	 * has none (jansson's parser keeps no path), nor does an id with
	 * one get echoed.
	 */
	BAD("op with a NUL", "{\"op\":\"hello\\u0000x\",\"id\":true}",
	    INVALID, "op"),
	BAD("NUL in an id", "{\"op\":\"hello\",\"id\":\"a\\u0000\"}",
	    INVALID, "id"),
	BAD("NUL in a member name", "{\"op\":\"hello\",\"id\":1,"
	    "\"a\\u0000b\":1}", INVALID, NULL),
	BAD("NUL in a member of hello", "{\"op\":\"hello\",\"id\":2,"
	    "\"x\":\"\\u0000\"}", INVALID, "x"),
	BAD("NUL with an unknown op", "{\"op\":\"frobnicate\",\"id\":3,"
	    "\"x\":[\"\\u0000\"]}", INVALID, "x"),
	BAD("NUL in meta", WT_TOP("\"meta\":{\"trace\":\"a\\u0000b\"}"),
	    INVALID, "meta.trace"),
	BAD("NUL deep in meta", WT_TOP("\"meta\":{\"a\":[1,{\"b\":"
	    "[\"\\u0000\"]}]}"), INVALID, "meta.a.b"),
	BAD("NUL in a meta member name", WT_TOP("\"meta\":{\"k\\u0000\":1}"),
	    INVALID, NULL),
	BAD("NUL in a name that is no plain name", WT_TOP("\"meta\":"
	    "{\"a b\":\"\\u0000\"}"), INVALID, "meta"),
	BAD("report: NUL in meta", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"@TASK@\",\"report\":{\"sender\":\"DEV\"},"
	    "\"meta\":{\"m\":\"\\u0000\"}}", INVALID, "meta.m"),
	BAD("effect_begin: NUL in request", "{\"op\":\"effect_begin\","
	    "\"id\":20,\"client_submission_id\":\"nul-1\",\"effect_kind\":"
	    "\"k/v1\",\"request\":{\"to\":\"a\\u0000\"}}", INVALID,
	    "request.to"),
	BAD("effect_begin: NUL in meta", "{\"op\":\"effect_begin\","
	    "\"id\":21,\"client_submission_id\":\"nul-2\",\"effect_kind\":"
	    "\"k/v1\",\"request\":{},\"meta\":{\"t\":\"\\u0000\"}}",
	    INVALID, "meta.t"),
	BAD("effect_begin: NUL in effect_kind", "{\"op\":\"effect_begin\","
	    "\"id\":22,\"client_submission_id\":\"nul-3\",\"effect_kind\":"
	    "\"k\\u0000\",\"request\":{}}", INVALID, "effect_kind"),
	BAD("effect_complete: NUL in result", "{\"op\":\"effect_complete\","
	    "\"id\":23,\"client_submission_id\":\"nul-4\",\"effect_kind\":"
	    "\"k/v1\",\"fence\":\"1-0123456789abcdef\",\"outcome\":"
	    "\"applied\",\"result\":\"a\\u0000b\"}", INVALID, "result"),
	BAD("effect_complete: NUL deep in result", "{\"op\":"
	    "\"effect_complete\",\"id\":24,\"client_submission_id\":\"nul-5\","
	    "\"effect_kind\":\"k/v1\",\"fence\":\"1-0123456789abcdef\","
	    "\"outcome\":\"applied\",\"result\":{\"ids\":[\"\\u0000\"]}}",
	    INVALID, "result.ids"),
	BAD("effect_complete: NUL in fence", "{\"op\":\"effect_complete\","
	    "\"id\":25,\"client_submission_id\":\"nul-6\",\"effect_kind\":"
	    "\"k/v1\",\"fence\":\"1-0123456789abcde\\u0000\",\"outcome\":"
	    "\"applied\"}", INVALID, "fence"),
	BAD("effect_resolve: NUL in evidence.result", "{\"op\":"
	    "\"effect_resolve\",\"id\":26,\"client_submission_id\":\"nul-7\","
	    "\"effect_kind\":\"k/v1\",\"evidence\":{\"observed\":"
	    "\"applied\",\"result\":\"\\u0000\"}}", INVALID,
	    "evidence.result"),
	BAD("effect_resolve: NUL in evidence.source", "{\"op\":"
	    "\"effect_resolve\",\"id\":27,\"client_submission_id\":\"nul-8\","
	    "\"effect_kind\":\"k/v1\",\"evidence\":{\"observed\":"
	    "\"unknown\",\"source\":\"probe\\u0000\"}}", INVALID,
	    "evidence.source"),
	BAD("get_submission: NUL in effect_kind", "{\"op\":"
	    "\"get_submission\",\"id\":28,\"client_submission_id\":\"a\","
	    "\"effect_kind\":\"k\\u0000\"}", INVALID, "effect_kind"),

	/* write_task: the top level. */
	BAD("unknown top-level field", WT_TOP("\"colour\":\"red\""), INVALID,
	    "colour"),
	BAD("task missing", "{\"op\":\"write_task\",\"id\":7}", INVALID,
	    "task"),
	BAD("task a string", "{\"op\":\"write_task\",\"id\":7,\"task\":\"x\"}",
	    INVALID, "task"),
	BAD("task null", "{\"op\":\"write_task\",\"id\":7,\"task\":null}",
	    INVALID, "task"),
	BAD("meta an array", WT_TOP("\"meta\":[]"), INVALID, "meta"),
	BAD("meta a string", WT_TOP("\"meta\":\"trace\""), INVALID, "meta"),
	BAD("client_submission_id empty", WT_TOP("\"client_submission_id\":"
	    "\"\""), INVALID, "client_submission_id"),
	BAD_FILL("client_submission_id 201 bytes", "{\"op\":\"write_task\","
	    "\"id\":7,\"client_submission_id\":\"", "x", 201, "\",\"task\":{"
	    OK_TASK "}}", INVALID, "client_submission_id"),
	BAD("client_submission_id with a space", WT_TOP(
	    "\"client_submission_id\":\"run 42\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id with a control", WT_TOP(
	    "\"client_submission_id\":\"run\\u000142\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id with a tab", WT_TOP(
	    "\"client_submission_id\":\"run\\t42\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id with DEL", WT_TOP(
	    "\"client_submission_id\":\"run\\u007f\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id not ASCII", WT_TOP(
	    "\"client_submission_id\":\"r\xc3\xa9sum\xc3\xa9\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id with a NUL", WT_TOP(
	    "\"client_submission_id\":\"a\\u0000b\""), INVALID,
	    "client_submission_id"),
	BAD("client_submission_id a number", WT_TOP(
	    "\"client_submission_id\":42"), INVALID, "client_submission_id"),
	BAD("client_submission_id an array", WT_TOP(
	    "\"client_submission_id\":[\"a\"]"), INVALID,
	    "client_submission_id"),
	BAD("digest_schema unknown", WT_TOP("\"digest_schema\":"
	    "\"write-task-v2\""), "unsupported_schema", "digest_schema"),
	BAD("digest_schema of reports", WT_TOP("\"digest_schema\":"
	    "\"write-report-v1\""), "unsupported_schema", "digest_schema"),
	BAD("digest_schema a number", WT_TOP("\"digest_schema\":1"), INVALID,
	    "digest_schema"),
	BAD("request_digest short", WT_TOP("\"request_digest\":\"abc\""),
	    INVALID, "request_digest"),
	BAD_FILL("request_digest upper case", "{\"op\":\"write_task\",\"id\":7,"
	    "\"request_digest\":\"", "A", 64, "\",\"task\":{" OK_TASK "}}",
	    INVALID, "request_digest"),
	BAD_FILL("request_digest not hex", "{\"op\":\"write_task\",\"id\":7,"
	    "\"request_digest\":\"", "g", 64, "\",\"task\":{" OK_TASK "}}",
	    INVALID, "request_digest"),
	BAD_FILL("request_digest 65 digits", "{\"op\":\"write_task\",\"id\":7,"
	    "\"request_digest\":\"", "a", 65, "\",\"task\":{" OK_TASK "}}",
	    INVALID, "request_digest"),
	BAD("request_digest a number", WT_TOP("\"request_digest\":0"),
	    INVALID, "request_digest"),
	BAD_FILL("request_digest wrong", "{\"op\":\"write_task\",\"id\":7,"
	    "\"request_digest\":\"", "0", 64, "\",\"task\":{" OK_TASK "}}",
	    "digest_disagrees", "request_digest"),

	/* write_task: every field of the task. */
	BAD("sender missing", WT("\"recipient\":\"DEV\",\"subject\":\"s\""),
	    INVALID, "task.sender"),
	BAD("recipient missing", WT("\"sender\":\"PM\",\"subject\":\"s\""),
	    INVALID, "task.recipient"),
	BAD("subject missing", WT("\"sender\":\"PM\",\"recipient\":\"DEV\""),
	    INVALID, "task.subject"),
	BAD("sender a number", WT("\"sender\":1,\"recipient\":\"DEV\","
	    "\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("sender null", WT("\"sender\":null,\"recipient\":\"DEV\","
	    "\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("recipient an array", WT("\"sender\":\"PM\",\"recipient\":"
	    "[\"DEV\"],\"subject\":\"s\""), INVALID, "task.recipient"),
	BAD("subject an object", WT("\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":{}"), INVALID, "task.subject"),
	BAD("body a boolean", WT(OK_TASK ",\"body\":true"), INVALID,
	    "task.body"),
	BAD("sender lower case", WT("\"sender\":\"pm\",\"recipient\":\"DEV\","
	    "\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("sender empty", WT("\"sender\":\"\",\"recipient\":\"DEV\","
	    "\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("sender starts with a digit", WT("\"sender\":\"1PM\","
	    "\"recipient\":\"DEV\",\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("sender starts with _", WT("\"sender\":\"_PM\","
	    "\"recipient\":\"DEV\",\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("sender with --", WT("\"sender\":\"LEAD--QA\","
	    "\"recipient\":\"DEV\",\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("recipient ends with -", WT("\"sender\":\"PM\",\"recipient\":"
	    "\"DEV-\",\"subject\":\"s\""), INVALID, "task.recipient"),
	BAD("recipient with a space", WT("\"sender\":\"PM\",\"recipient\":"
	    "\"DEV 1\",\"subject\":\"s\""), INVALID, "task.recipient"),
	BAD("recipient with a dot", WT("\"sender\":\"PM\",\"recipient\":"
	    "\"DEV.1\",\"subject\":\"s\""), INVALID, "task.recipient"),
	BAD_FILL("sender 17 characters", "{\"op\":\"write_task\",\"id\":7,"
	    "\"task\":{\"recipient\":\"DEV\",\"subject\":\"s\",\"sender\":\"",
	    "A", 17, "\"}}", INVALID, "task.sender"),
	BAD_FILL("recipient 17 characters", "{\"op\":\"write_task\",\"id\":7,"
	    "\"task\":{\"sender\":\"PM\",\"subject\":\"s\",\"recipient\":\"",
	    "B", 17, "\"}}", INVALID, "task.recipient"),
	BAD("subject empty", WT("\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"\""), INVALID, "task.subject"),
	BAD_FILL("subject 1025 bytes", "{\"op\":\"write_task\",\"id\":7,"
	    "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\",\"subject\":\"",
	    "x", 1025, "\"}}", INVALID, "task.subject"),
	/* Bytes, not characters: 513 two-byte characters are 1026 bytes. */
	BAD_FILL("subject 513 two-byte characters", "{\"op\":\"write_task\","
	    "\"id\":7,\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"", "\xc3\xa9", 513, "\"}}", INVALID,
	    "task.subject"),
	BAD_FILL("body 524289 bytes", WT_HEAD "\"body\":\"", "x", 524289,
	    "\"}}", INVALID, "task.body"),
	BAD("priority P4", WT(OK_TASK ",\"priority\":\"P4\""), INVALID,
	    "task.priority"),
	BAD("priority lower case", WT(OK_TASK ",\"priority\":\"p1\""), INVALID,
	    "task.priority"),
	BAD("priority a number", WT(OK_TASK ",\"priority\":1"), INVALID,
	    "task.priority"),
	BAD("risk_level unknown", WT(OK_TASK ",\"risk_level\":\"critical\""),
	    INVALID, "task.risk_level"),
	BAD("risk_level upper case", WT(OK_TASK ",\"risk_level\":\"LOW\""),
	    INVALID, "task.risk_level"),
	BAD("risk_level empty", WT(OK_TASK ",\"risk_level\":\"\""), INVALID,
	    "task.risk_level"),
	BAD("thread_key empty", WT(OK_TASK ",\"thread_key\":\"\""), INVALID,
	    "task.thread_key"),
	BAD_FILL("thread_key 257 bytes", WT_HEAD "\"thread_key\":\"", "k", 257,
	    "\"}}", INVALID, "task.thread_key"),
	BAD("thread_key a number", WT(OK_TASK ",\"thread_key\":1"), INVALID,
	    "task.thread_key"),
	BAD("parent empty", WT(OK_TASK ",\"parent\":\"\""), INVALID,
	    "task.parent"),
	BAD_FILL("parent 257 bytes", WT_HEAD "\"parent\":\"", "p", 257,
	    "\"}}", INVALID, "task.parent"),
	BAD("parent an object", WT(OK_TASK ",\"parent\":{}"), INVALID,
	    "task.parent"),
	BAD("references a string", WT(OK_TASK ",\"references\":\"doc/a.md\""),
	    INVALID, "task.references"),
	BAD("depends_on an object", WT(OK_TASK ",\"depends_on\":{}"), INVALID,
	    "task.depends_on"),
	BAD("references with a number", WT(OK_TASK ",\"references\":[\"a\",1]"),
	    INVALID, "task.references"),
	BAD("depends_on with null", WT(OK_TASK ",\"depends_on\":[null]"),
	    INVALID, "task.depends_on"),
	BAD("depends_on with an array", WT(OK_TASK ",\"depends_on\":[[\"a\"]]"),
	    INVALID, "task.depends_on"),
	BAD_FILL("references 257 items", WT_HEAD "\"references\":[", "\"a\",",
	    256, "\"a\"]}}", INVALID, "task.references"),
	BAD_FILL("depends_on 257 items", WT_HEAD "\"depends_on\":[", "\"a\",",
	    256, "\"a\"]}}", INVALID, "task.depends_on"),
	BAD("references empty item", WT(OK_TASK ",\"references\":[\"\"]"),
	    INVALID, "task.references"),
	BAD("depends_on empty item", WT(OK_TASK ",\"depends_on\":[\"a\",\"\"]"),
	    INVALID, "task.depends_on"),
	BAD_FILL("references 257-byte item", WT_HEAD "\"references\":[\"", "r",
	    257, "\"]}}", INVALID, "task.references"),
	BAD_FILL("depends_on 257-byte item", WT_HEAD "\"depends_on\":[\"", "d",
	    257, "\"]}}", INVALID, "task.depends_on"),
	BAD("unknown task field", WT(OK_TASK ",\"color\":\"red\""), INVALID,
	    "task.color"),
	BAD("task field in upper case", WT(OK_TASK ",\"Body\":\"x\""), INVALID,
	    "task.Body"),
	BAD("NUL in subject", WT("\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"a\\u0000b\""), INVALID, "task.subject"),
	BAD("NUL in body", WT(OK_TASK ",\"body\":\"\\u0000\""), INVALID,
	    "task.body"),
	BAD("NUL in sender", WT("\"sender\":\"PM\\u0000\","
	    "\"recipient\":\"DEV\",\"subject\":\"s\""), INVALID, "task.sender"),
	BAD("NUL in thread_key", WT(OK_TASK ",\"thread_key\":\"a\\u0000\""),
	    INVALID, "task.thread_key"),
	BAD("NUL in a reference", WT(OK_TASK ",\"references\":[\"a\\u0000\"]"),
	    INVALID, "task.references"),

	/* The line limit: the line itself is not too large... */
	BAD_SIZED("1 MiB line with a long body", WT_HEAD "\"body\":\"", "x",
	    IDEM_MAX_LINE_BYTES - 1, "\"}}", INVALID, "task.body"),
	/* ...one byte more is, and closes the connection. */
	BAD_SIZED("line 1 byte over 1 MiB", WT_HEAD "\"body\":\"", "x",
	    IDEM_MAX_LINE_BYTES, "\"}}", "too_large", NULL),

	/* write_report. */
	BAD("report: task_id missing", "{\"op\":\"write_report\",\"id\":9,"
	    "\"report\":{\"sender\":\"DEV\"}}", INVALID, "task_id"),
	BAD("report: task_id a number", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":1,\"report\":{\"sender\":\"DEV\"}}", INVALID,
	    "task_id"),
	BAD("report: task_id ../x", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"../x\",\"report\":{\"sender\":\"DEV\"}}", INVALID,
	    "task_id"),
	BAD("report: task_id escaping", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"@TASK@/../../../etc/passwd\",\"report\":"
	    "{\"sender\":\"DEV\"}}", INVALID, "task_id"),
	BAD("report: task_id with .md", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"@TASK@.md\",\"report\":{\"sender\":\"DEV\"}}",
	    INVALID, "task_id"),
	BAD("report: task_id lower case", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"task-20260101-001-pm-to-dev\",\"report\":"
	    "{\"sender\":\"DEV\"}}", INVALID, "task_id"),
	BAD("report: task_id short number", "{\"op\":\"write_report\","
	    "\"id\":9,\"task_id\":\"TASK-20260101-01-PM-to-DEV\",\"report\":"
	    "{\"sender\":\"DEV\"}}", INVALID, "task_id"),
	BAD("report: unknown task", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"TASK-20000101-001-PM-to-DEV\",\"report\":"
	    "{\"sender\":\"DEV\"}}", "task_not_found", "task_id"),
	BAD("report: report missing", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"@TASK@\"}", INVALID, "report"),
	BAD("report: report an array", "{\"op\":\"write_report\",\"id\":9,"
	    "\"task_id\":\"@TASK@\",\"report\":[]}", INVALID, "report"),
	BAD("report: sender missing", WR("\"status\":\"done\""), INVALID,
	    "report.sender"),
	BAD("report: sender lower case", WR("\"sender\":\"dev\""), INVALID,
	    "report.sender"),
	BAD("report: recipient not a role", WR("\"sender\":\"DEV\","
	    "\"recipient\":\"qa\""), INVALID, "report.recipient"),
	BAD("report: bad status", WR("\"sender\":\"DEV\",\"status\":"
	    "\"finished\""), INVALID, "report.status"),
	BAD("report: status of an earlier release", WR("\"sender\":\"DEV\","
	    "\"status\":\"partial\""), INVALID, "report.status"),
	BAD("report: status a number", WR("\"sender\":\"DEV\",\"status\":1"),
	    INVALID, "report.status"),
	BAD("report: NUL in body", WR("\"sender\":\"DEV\","
	    "\"body\":\"\\u0000\""), INVALID, "report.body"),
	BAD_FILL("report: body 524289 bytes", "{\"op\":\"write_report\","
	    "\"id\":9,\"task_id\":\"@TASK@\",\"report\":{\"sender\":\"DEV\","
	    "\"body\":\"", "x", 524289, "\"}}", INVALID, "report.body"),
	BAD("report: unknown report field", WR("\"sender\":\"DEV\","
	    "\"color\":1"), INVALID, "report.color"),
	BAD("report: unknown top-level field", "{\"op\":\"write_report\","
	    "\"id\":9,\"task_id\":\"@TASK@\",\"digest_schema\":"
	    "\"write-report-v1\",\"report\":{\"sender\":\"DEV\"}}", INVALID,
	    "digest_schema"),
	BAD("report: client_submission_id with a space", "{\"op\":"
	    "\"write_report\",\"id\":9,\"task_id\":\"@TASK@\","
	    "\"client_submission_id\":\"r 1\",\"report\":{\"sender\":\"DEV\"}}",
	    INVALID, "client_submission_id"),

	/* The read-only ops. */
	BAD("get_submission without id", "{\"op\":\"get_submission\",\"id\":3}",
	    INVALID, "client_submission_id"),
	BAD("get_submission id null", "{\"op\":\"get_submission\",\"id\":3,"
	    "\"client_submission_id\":null}", INVALID, "client_submission_id"),
	BAD("get_submission id a number", "{\"op\":\"get_submission\","
	    "\"id\":3,\"client_submission_id\":3}", INVALID,
	    "client_submission_id"),
	BAD("get_submission unknown field", "{\"op\":\"get_submission\","
	    "\"id\":3,\"client_submission_id\":\"a\",\"state\":\"x\"}", INVALID,
	    "state"),
	BAD("diagnose stale_after_ms negative", "{\"op\":\"diagnose\","
	    "\"id\":4,\"stale_after_ms\":-1}", INVALID, "stale_after_ms"),
	BAD("diagnose stale_after_ms a string", "{\"op\":\"diagnose\","
	    "\"id\":4,\"stale_after_ms\":\"30000\"}", INVALID,
	    "stale_after_ms"),
	BAD("diagnose stale_after_ms a fraction", "{\"op\":\"diagnose\","
	    "\"id\":4,\"stale_after_ms\":1.5}", INVALID, "stale_after_ms"),
	BAD("diagnose unknown field", "{\"op\":\"diagnose\",\"id\":4,"
	    "\"repair\":true}", INVALID, "repair"),
	BAD("stats unknown field", "{\"op\":\"stats\",\"id\":5,\"reset\":true}",
	    INVALID, "reset"),
};
#define BAD_REQUEST_COUNT	(sizeof bad_requests / sizeof bad_requests[0])

/* The row's line (malloc'd), "@TASK@" replaced with task_id. */
static char *
bad_line(const struct bad_request *r, const char *task_id, size_t *length)
{
	size_t	 head = strlen(r->head), tail = strlen(r->tail);
	size_t	 fill = r->fill != NULL ? strlen(r->fill) : 0, times, n, i;
	char	*line, *p, *at, *out;

	times = r->times;
	if (r->total != 0)
		times = (r->total - head - tail) / fill;
	n = head + times * fill + tail;
	line = malloc(n + 1);
	assert_non_null(line);
	memcpy(line, r->head, head);
	for (p = line + head, i = 0; i < times; i++, p += fill)
		memcpy(p, r->fill, fill);
	memcpy(p, r->tail, tail + 1);
	if (r->total != 0)
		assert_int_equal(n, r->total);
	if ((at = strstr(line, "@TASK@")) == NULL) {
		*length = n;
		return line;
	}
	/* One placeholder per row at most; only short rows have one. */
	out = malloc(n + strlen(task_id) + 1);
	assert_non_null(out);
	memcpy(out, line, (size_t)(at - line));
	strcpy(out + (at - line), task_id);
	strcat(out, at + 6);
	free(line);
	*length = strlen(out);
	return out;
}

/*
 * The id the reply must echo: the request's, if it parses as an object
 * with a scalar id (the broker's own parsing flags); NULL: no id at all.
 */
static json_t *
echoed_id(const struct bad_request *r, const char *line, size_t length)
{
	json_t	*request, *id;

	if (strcmp(r->code, "too_large") == 0)
		return NULL;
	request = json_loadb(line, length, JSON_REJECT_DUPLICATES |
	    JSON_ALLOW_NUL, NULL);
	if (request == NULL)
		return NULL;
	id = json_object_get(request, "id");
	/* An id with a NUL is refused, not echoed. */
	if (!json_is_object(request) || id == NULL || json_is_object(id) ||
	    json_is_array(id) || (json_is_string(id) &&
	    strlen(json_string_value(id)) != json_string_length(id)))
		id = NULL;
	else
		json_incref(id);
	json_decref(request);
	return id;
}

static int	row_failures;

static void __attribute__((format(printf, 2, 3)))
row_fail(const struct bad_request *r, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "FAIL [%s]: ", r->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	row_failures++;
}

/* The error reply of one row against its expectations. */
static void
judge_reply(const struct bad_request *r, json_t *reply, json_t *want_id)
{
	json_t	*error = json_object_get(reply, "error"), *id, *field;
	char	*text;

	text = json_dumps(reply, JSON_COMPACT);
	id = json_object_get(reply, "id");
	field = json_object_get(error, "field");
	if (!json_is_false(json_object_get(reply, "ok")) ||
	    !json_is_false(json_object_get(reply, "action_taken")) ||
	    !json_is_object(error))
		row_fail(r, "not an error reply: %.300s", text);
	else if (!json_is_string(json_object_get(error, "code")) ||
	    strcmp(json_string_value(json_object_get(error, "code")),
	    r->code) != 0)
		row_fail(r, "code is not %s: %.300s", r->code, text);
	else if (r->field == NULL && field != NULL)
		row_fail(r, "has a field, expected none: %.300s", text);
	else if (r->field != NULL && (!json_is_string(field) ||
	    strcmp(json_string_value(field), r->field) != 0))
		row_fail(r, "field is not %s: %.300s", r->field, text);
	else if (!json_is_false(json_object_get(error, "retryable")))
		row_fail(r, "retryable is not false: %.300s", text);
	else if (!json_is_string(json_object_get(error, "message")))
		row_fail(r, "no message: %.300s", text);
	else if (want_id == NULL && id != NULL)
		row_fail(r, "echoes an id the request did not carry: %.300s",
		    text);
	else if (want_id != NULL && (id == NULL || !json_equal(id, want_id)))
		row_fail(r, "does not echo the request's id: %.300s", text);
	free(text);
}

static void
bad_requests_answer_exact_errors(void **state)
{
	struct broker		*b = *state;
	const struct bad_request *r;
	struct peer		 p, bystander;
	enum peer_read		 got;
	json_t			*reply, *want_id, *s0, *s1;
	char			*line, *text, task_id[96], after[64];
	size_t			 length, i;
	int			 tasks, reports, rows_closing = 0;

	assert_true(BAD_REQUEST_COUNT >= 40);
	harness_must_start(b, NULL, NULL);
	peer_open(b, &p);
	/* A task that exists, so that report rows fail for their own reason. */
	reply = peer_call(&p, "{\"op\":\"write_task\",\"task\":{" OK_TASK "}}");
	harness_assert_bool(reply, "ok", 1);
	snprintf(task_id, sizeof task_id, "%s",
	    harness_str(json_object_get(reply, "receipt"), "task_id"));
	json_decref(reply);
	/* A connection that only watches: nothing here may disturb it. */
	peer_open(b, &bystander);
	expect_hello(&bystander, 1);
	s0 = stats(b);
	tasks = harness_count_tasks(b);
	reports = harness_count_reports(b);
	assert_int_equal(tasks, 1);

	row_failures = 0;
	for (i = 0; i < BAD_REQUEST_COUNT; i++) {
		r = &bad_requests[i];
		line = bad_line(r, task_id, &length);
		want_id = echoed_id(r, line, length);
		/* The whole line in one write, newline included. */
		line = realloc(line, length + 1);
		assert_non_null(line);
		line[length] = '\n';
		if (send_all(p.fd, line, length + 1) != 0 &&
		    strcmp(r->code, "too_large") != 0)
			row_fail(r, "send: %s", strerror(errno));
		free(line);
		got = peer_read(&p, &text, TEST_EVENT_TIMEOUT_MS);
		if (got != PEER_LINE) {
			row_fail(r, "the connection ended without a reply");
			json_decref(want_id);
			peer_close(&p);
			peer_open(b, &p);
			continue;
		}
		reply = json_loads(text, 0, NULL);
		if (reply == NULL)
			row_fail(r, "the reply is not JSON: %.300s", text);
		else
			judge_reply(r, reply, want_id);
		free(text);
		json_decref(reply);
		json_decref(want_id);

		if (strcmp(r->code, "too_large") == 0) {
			/* It closes; a reset if our newline was left unread. */
			got = peer_read(&p, &text, TEST_EVENT_TIMEOUT_MS);
			if (got == PEER_LINE) {
				row_fail(r, "more after too_large: %.300s",
				    text);
				free(text);
			}
			rows_closing++;
			peer_close(&p);
			peer_open(b, &p);
		} else {
			/* The same connection still answers. */
			snprintf(after, sizeof after,
			    "{\"op\":\"hello\",\"id\":\"after-%zu\"}", i);
			reply = peer_call(&p, after);
			snprintf(after, sizeof after, "after-%zu", i);
			if (!json_is_true(json_object_get(reply, "ok")) ||
			    !json_is_string(json_object_get(reply, "id")) ||
			    strcmp(json_string_value(json_object_get(reply,
			    "id")), after) != 0)
				row_fail(r, "the next hello was not answered");
			json_decref(reply);
		}
		if (harness_count_tasks(b) != tasks)
			row_fail(r, "the TASK count changed");
		if (harness_count_reports(b) != reports)
			row_fail(r, "the REPORT count changed");
	}
	fprintf(stderr, "%zu malformed requests, %d failed\n",
	    BAD_REQUEST_COUNT, row_failures);
	assert_int_equal(rows_closing, 1);

	/* Nothing was created, and the bystander never noticed. */
	assert_int_equal(harness_count_tasks(b), tasks);
	assert_int_equal(harness_count_reports(b), reports);
	expect_hello(&bystander, 2);
	s1 = stats(b);
	assert_int_equal(harness_int(s1, "created"), harness_int(s0,
	    "created"));
	assert_int_equal(harness_int(s1, "legacy_created"),
	    harness_int(s0, "legacy_created"));
	assert_int_equal(harness_int(s1, "reports_created"),
	    harness_int(s0, "reports_created"));
	assert_int_equal(harness_int(s1, "table_used"), harness_int(s0,
	    "table_used"));
	assert_int_equal(harness_int(s1, "worker_restarts"), 0);
	json_decref(s0);
	json_decref(s1);
	peer_close(&bystander);
	peer_close(&p);
	assert_int_equal(row_failures, 0);
	harness_finish(b);
}

/* ---- The line limit, exactly --------------------------------------------- */

static void
line_limit_is_one_mib_with_newline(void **state)
{
	struct broker	*b = *state;
	struct peer	 p;
	const char	*hello = "{\"op\":\"hello\",\"id\":1}";
	char		*line, *more;
	json_t		*reply;
	size_t		 n = IDEM_MAX_LINE_BYTES - 1;

	harness_must_start(b, NULL, NULL);
	peer_open(b, &p);
	/* 1048575 bytes of JSON (whitespace pads) and the newline: valid. */
	line = malloc(IDEM_MAX_LINE_BYTES + 1);
	assert_non_null(line);
	memset(line, ' ', IDEM_MAX_LINE_BYTES);
	memcpy(line, hello, strlen(hello));
	line[n] = '\0';
	peer_send(&p, line);
	reply = peer_reply(&p);
	harness_assert_bool(reply, "ok", 1);
	assert_id(reply, 1);
	json_decref(reply);
	expect_hello(&p, 2);

	/*
	 * 1048576 bytes and no newline yet can only become a line over the
	 * limit: too_large at once, then the end of the stream.  Nothing of
	 * ours is left unread, so it is a plain EOF.
	 */
	memset(line, ' ', IDEM_MAX_LINE_BYTES);
	memcpy(line, hello, strlen(hello));
	assert_int_equal(send_all(p.fd, line, IDEM_MAX_LINE_BYTES), 0);
	reply = peer_reply(&p);
	harness_assert_bool(reply, "ok", 0);
	assert_string_equal(harness_str(json_object_get(reply, "error"),
	    "code"), "too_large");
	assert_null(json_object_get(reply, "id"));
	json_decref(reply);
	assert_int_equal(peer_read(&p, &more, TEST_EVENT_TIMEOUT_MS),
	    PEER_EOF);
	peer_close(&p);
	free(line);

	/* Others are served as before. */
	peer_open(b, &p);
	expect_hello(&p, 3);
	peer_close(&p);
	harness_finish(b);
}

/* ---- Values at the limits are accepted ---------------------------------- */

static void
boundary_values_accepted(void **state)
{
	struct broker	*b = *state;
	struct peer	 p;
	json_t		*request, *task, *list, *reply;
	char		 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char		*subject, *body, *ref, *text;
	int		 i;

	harness_must_start(b, NULL, NULL);
	/* Every printable ASCII byte, 0x21..0x7e, repeated to 200 bytes. */
	for (i = 0; i < IDEM_MAX_SUBMISSION_ID_BYTES; i++)
		id[i] = (char)(0x21 + i % (0x7f - 0x21));
	id[IDEM_MAX_SUBMISSION_ID_BYTES] = '\0';
	subject = malloc(IDEM_MAX_SUBJECT_BYTES + 1);
	body = malloc(IDEM_MAX_BODY_BYTES + 1);
	ref = malloc(IDEM_MAX_REF_BYTES + 1);
	assert_true(subject != NULL && body != NULL && ref != NULL);
	memset(subject, 's', IDEM_MAX_SUBJECT_BYTES);
	subject[IDEM_MAX_SUBJECT_BYTES] = '\0';
	memset(body, 'b', IDEM_MAX_BODY_BYTES);
	body[IDEM_MAX_BODY_BYTES] = '\0';
	memset(ref, 'r', IDEM_MAX_REF_BYTES);
	ref[IDEM_MAX_REF_BYTES] = '\0';

	task = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:n}",
	    "sender", "ABCDEFGHIJKLMNOP", "recipient", "LEAD-QA_2-X",
	    "subject", subject, "body", body, "priority", "P0",
	    "risk_level", "irreversible", "thread_key", ref, "parent");
	assert_non_null(task);
	list = json_array();
	for (i = 0; i < IDEM_MAX_LIST_ITEMS; i++)
		json_array_append_new(list, json_string(ref));
	json_object_set_new(task, "references", list);
	json_object_set_new(task, "depends_on", json_array());
	request = json_pack("{s:s, s:i, s:s, s:s, s:o, s:{s:[i,{}]}}",
	    "op", "write_task", "id", 1, "client_submission_id", id,
	    "digest_schema", "write-task-v1", "task", task, "meta", "deep",
	    1);
	assert_non_null(request);
	text = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	assert_non_null(text);
	assert_true(strlen(text) < IDEM_MAX_LINE_BYTES);

	peer_open(b, &p);
	reply = peer_call(&p, text);
	if (!json_is_true(json_object_get(reply, "ok")))
		fail_msg("refused: %.400s", json_dumps(reply, JSON_COMPACT));
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	peer_close(&p);
	free(text);
	free(subject);
	free(body);
	free(ref);
	harness_finish(b);
}

/* ---- Peers --------------------------------------------------------------- */

static void
idle_connections_do_not_delay_a_writer(void **state)
{
	static const char *const args[] = {
		"--max-connections", TEST_IDLE_MAX_CONN,
		"--max-connections-per-pid", TEST_IDLE_MAX_CONN,
		"--max-connections-per-uid", TEST_IDLE_MAX_CONN, NULL
	};
	struct broker	*b = *state;
	struct peer	 writer, p;
	int		*fds, i;
	json_t		*reply;

	/* The broker inherits the limit: its workers hold these too. */
	harness_raise_nofile(2 * TEST_IDLE_NOFILE);
	harness_must_start(b, args, NULL);
	fds = calloc(TEST_IDLE_PEERS, sizeof *fds);
	assert_non_null(fds);
	for (i = 0; i < TEST_IDLE_PEERS; i++) {
		fds[i] = harness_raw_connect(b);
		if (fds[i] == -1)
			fail_msg("connection %d: %s", i, strerror(errno));
	}

	peer_open(b, &writer);
	reply = peer_call(&writer, "{\"op\":\"write_task\",\"id\":1,"
	    "\"client_submission_id\":\"among-idlers\",\"task\":{" OK_TASK
	    "}}");
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	peer_close(&writer);
	assert_int_equal(harness_count_tasks(b), 1);

	/* They were held, not dropped: each one still answers. */
	for (i = 0; i < TEST_IDLE_PEERS; i++) {
		memset(&p, 0, sizeof p);
		p.fd = fds[i];
		expect_hello(&p, i);
		peer_close(&p);
	}
	free(fds);
	harness_finish(b);
}

static void
vanishing_half_requests_leave_no_trace(void **state)
{
	struct broker	*b = *state;
	struct peer	 p;
	json_t		*reply, *s;
	char		 line[160];
	int		 i, fd;

	harness_must_start(b, NULL, NULL);
	for (i = 0; i < TEST_VANISHING_PEERS; i++) {
		fd = harness_raw_connect(b);
		assert_int_not_equal(fd, -1);
		/* Half a write_task, no newline, and gone. */
		snprintf(line, sizeof line, "{\"op\":\"write_task\",\"id\":%d,"
		    "\"client_submission_id\":\"half-%d\",\"task\":{\"sender\":"
		    "\"PM\",\"recipient\":\"DEV\",\"subj", i, i);
		assert_int_equal(send_all(fd, line, strlen(line)), 0);
		close(fd);
	}
	assert_int_equal(harness_count_tasks(b), 0);

	peer_open(b, &p);
	expect_hello(&p, 1);
	reply = peer_call(&p, "{\"op\":\"get_submission\",\"id\":2,"
	    "\"client_submission_id\":\"half-0\"}");
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	reply = peer_call(&p, "{\"op\":\"write_task\",\"id\":3,"
	    "\"client_submission_id\":\"after-the-vanished\",\"task\":{"
	    OK_TASK "}}");
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	peer_close(&p);
	assert_int_equal(harness_count_tasks(b), 1);
	s = stats(b);
	assert_int_equal(harness_int(s, "worker_restarts"), 0);
	assert_int_equal(harness_int(s, "workers"), 2);
	json_decref(s);
	assert_int_equal(kill(b->pid, 0), 0);
	harness_finish(b);
}

/* The refusal of one connection too many: one error line, then EOF. */
static void
expect_refused(struct broker *b)
{
	struct peer	 p;
	json_t		*reply, *error;

	peer_open(b, &p);
	reply = peer_reply(&p);
	harness_assert_bool(reply, "ok", 0);
	error = json_object_get(reply, "error");
	assert_string_equal(harness_str(error, "code"),
	    "too_many_connections");
	assert_string_equal(harness_str(error, "reason"), "max_connections");
	harness_assert_bool(error, "retryable", 1);
	json_decref(reply);
	peer_expect_closed(&p, TEST_EVENT_TIMEOUT_MS);
	peer_close(&p);
}

static void
connection_cap_refuses_one_too_many(void **state)
{
	/*
	 * One worker: a close and a later hello on the same worker are then
	 * seen in order (the EOF is ready before the hello's bytes arrive,
	 * and one epoll round handles both), so once the hello is answered
	 * the closed connection has been counted out.  With two workers
	 * the next connection could race the other worker's bookkeeping.
	 */
	static const char *const args[] = {
		"--workers", "1", "--max-connections", "3",
		/* One process stands for every peer: the total's test. */
		"--max-connections-per-pid", "3",
		"--max-connections-per-uid", "3", NULL
	};
	struct broker	*b = *state;
	struct peer	 p[3], extra;
	int		 i;

	harness_must_start(b, args, NULL);
	for (i = 0; i < 3; i++) {
		peer_open(b, &p[i]);
		expect_hello(&p[i], i);
	}
	expect_refused(b);
	expect_refused(b);
	/* The refusals took nothing from the three. */
	for (i = 0; i < 3; i++)
		expect_hello(&p[i], 10 + i);

	peer_close(&p[0]);
	expect_hello(&p[1], 20);
	peer_open(b, &extra);
	expect_hello(&extra, 21);
	expect_refused(b);
	peer_close(&extra);
	peer_close(&p[1]);
	peer_close(&p[2]);
	harness_finish(b);
}

static void
connection_cap_counts_all_workers(void **state)
{
	static const char *const args[] = {
		"--workers", "2", "--max-connections", "3",
		/* One process stands for every peer: the total's test. */
		"--max-connections-per-pid", "3",
		"--max-connections-per-uid", "3", NULL
	};
	struct broker	*b = *state;
	struct peer	 p[3];
	int		 i;

	harness_must_start(b, args, NULL);
	for (i = 0; i < 3; i++) {
		peer_open(b, &p[i]);
		expect_hello(&p[i], i);
	}
	/* However the three were spread, a fourth is over the total. */
	expect_refused(b);
	for (i = 0; i < 3; i++) {
		expect_hello(&p[i], 10 + i);
		peer_close(&p[i]);
	}
	harness_finish(b);
}

/* The sockets a process holds (its listening and notify sockets too). */
static int
sockets_held(pid_t pid)
{
	char		 dir[64], path[320], target[64];
	DIR		*d;
	struct dirent	*de;
	ssize_t		 n;
	int		 count = 0;

	snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
	if ((d = opendir(dir)) == NULL)
		fail_msg("%s: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if ((n = readlink(path, target, sizeof target - 1)) > 0) {
			target[n] = '\0';
			count += strncmp(target, "socket:", 7) == 0;
		}
	}
	closedir(d);
	return count;
}

/*
 * Connections are spread over the workers (worker.c, worker_yield): a
 * worker's loop runs its connections' requests one after another, and
 * one worker holding every client while the other sleeps is a serial
 * bottleneck (doc/effects.md, "How fast").  Twelve connections opened
 * one after the other (each answered, so accepted) land six and six; at
 * least four each, should a loaded machine (a sanitizer's build) make a
 * worker take one after its WORKER_YIELD_MAX_MS.  Before, the worker
 * that took the last one mostly took the next too: all or all but one
 * on one worker in nine of ten runs.
 */
static void
connections_spread_over_workers(void **state)
{
	static const char *const args[] = { "--workers", "2", NULL };
	struct broker	*b = *state;
	struct peer	 p[12];
	pid_t		 workers[2];
	int		 before[2], held, i;

	harness_must_start(b, args, NULL);
	assert_int_equal(harness_workers(b, workers, 2), 2);
	for (i = 0; i < 2; i++)
		before[i] = sockets_held(workers[i]);
	for (i = 0; i < 12; i++) {
		peer_open(b, &p[i]);
		expect_hello(&p[i], i);
	}
	for (i = 0; i < 2; i++) {
		held = sockets_held(workers[i]) - before[i];
		if (held < 4 || held > 8)
			fail_msg("worker %d holds %d of the 12 connections", i,
			    held);
	}
	for (i = 0; i < 12; i++)
		peer_close(&p[i]);
	harness_finish(b);
}

/*
 * A sibling stopped (SIGSTOP: a debugger, a long stall) takes no
 * connection it is left: the worker that yields to it takes the
 * connection itself after its bound (200 ms), and then yields no more
 * until the siblings' connections move, so one new connection waits
 * out the bound, not every one after another (each of ten did before).
 */
static void
a_stopped_sibling_costs_one_wait(void **state)
{
	static const char *const args[] = { "--workers", "2", NULL };
	struct broker	*b = *state;
	struct peer	 keep, p;
	pid_t		 workers[2], stopped;
	int		 before[2], i, slow = 0;
	int64_t		 t;

	harness_must_start(b, args, NULL);
	assert_int_equal(harness_workers(b, workers, 2), 2);
	for (i = 0; i < 2; i++)
		before[i] = sockets_held(workers[i]);
	/* One connection kept: its worker holds more than the other. */
	peer_open(b, &keep);
	expect_hello(&keep, 0);
	stopped = sockets_held(workers[0]) > before[0] ? workers[1] :
	    workers[0];
	assert_int_equal(kill(stopped, SIGSTOP), 0);
	for (i = 0; i < 10; i++) {
		t = harness_now_ms();
		peer_open(b, &p);
		expect_hello(&p, i + 1);
		peer_close(&p);
		if (harness_now_ms() - t >= 150)
			slow++;
	}
	assert_int_equal(kill(stopped, SIGCONT), 0);
	peer_close(&keep);
	/* The first waits out the bound; a loaded machine may slow two. */
	if (slow > 3)
		fail_msg("%d of 10 connections waited for the stopped worker",
		    slow);
	harness_finish(b);
}

/*
 * A worker that dies holding connections must not keep them counted:
 * otherwise every crash lowers the cap for good.
 */
static void
dead_worker_connections_are_given_back(void **state)
{
	static const char *const args[] = {
		"--workers", "1", "--max-connections", "3",
		/* One process stands for every peer: the total's test. */
		"--max-connections-per-pid", "3",
		"--max-connections-per-uid", "3", NULL
	};
	struct broker	*b = *state;
	struct peer	 p[3];
	const char	*hello = "{\"op\":\"hello\",\"id\":3}\n";
	pid_t		 workers[4];
	json_t		*s, *reply;
	int		 i;

	harness_must_start(b, args, NULL);
	for (i = 0; i < 2; i++) {
		peer_open(b, &p[i]);
		expect_hello(&p[i], i);
	}
	assert_int_equal(harness_workers(b, workers, 4), 1);
	assert_int_equal(kill(workers[0], SIGKILL), 0);
	for (i = 0; i < 2; i++) {
		peer_expect_closed(&p[i], TEST_EVENT_TIMEOUT_MS);
		peer_close(&p[i]);
	}
	/*
	 * The replacement accepts from the backlog: three fit again.  A
	 * refusal may close before our hello is sent; its line still
	 * comes, so the send is allowed to fail and the reply decides.
	 */
	for (i = 0; i < 3; i++) {
		peer_open(b, &p[i]);
		(void)send_all(p[i].fd, hello, strlen(hello));
		reply = peer_reply(&p[i]);
		if (!json_is_true(json_object_get(reply, "ok")))
			fail_msg("connection %d of 3 refused after the worker "
			    "died: its 2 connections are still counted", i + 1);
		json_decref(reply);
	}
	for (i = 0; i < 3; i++)
		peer_close(&p[i]);
	s = stats(b);
	assert_int_equal(harness_int(s, "worker_restarts"), 1);
	json_decref(s);
	harness_finish(b);
}

static void
idle_connection_closed_by_timeout(void **state)
{
	static const char *const args[] = {
		"--idle-timeout-ms", TEST_IDLE_TIMEOUT_MS, NULL
	};
	struct broker	*b = *state;
	struct peer	 silent, talked, p;

	harness_must_start(b, args, NULL);
	/* One that never says a word, one that went quiet after a hello. */
	peer_open(b, &silent);
	peer_open(b, &talked);
	expect_hello(&talked, 1);
	peer_expect_closed(&silent, TEST_IDLE_GUARD_MS);
	peer_expect_closed(&talked, TEST_IDLE_GUARD_MS);
	peer_close(&silent);
	peer_close(&talked);
	/* The broker itself is still there for a new client. */
	peer_open(b, &p);
	expect_hello(&p, 2);
	peer_close(&p);
	harness_finish(b);
}

static void
pipelined_requests_answered_in_order(void **state)
{
	struct broker	*b = *state;
	struct peer	 p;
	json_t		*reply, *sub;
	char		*all, line[256];
	size_t		 length = 0;
	int		 i;

	harness_must_start(b, NULL, NULL);
	all = malloc(TEST_PIPELINED * sizeof line);
	assert_non_null(all);
	/*
	 * Writes that wait on the journal, answers that need no wait, reads
	 * of what an earlier line wrote and errors, interleaved: only strict
	 * request order gets every reply right.
	 */
	for (i = 1; i <= TEST_PIPELINED; i++) {
		switch (i % 4) {
		case 1:
			snprintf(line, sizeof line, "{\"op\":\"write_task\","
			    "\"id\":%d,\"client_submission_id\":\"pipe-%d\","
			    "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
			    "\"subject\":\"pipelined %d\"}}\n", i, i, i);
			break;
		case 2:
			snprintf(line, sizeof line, "{\"op\":\"hello\","
			    "\"id\":%d}\n", i);
			break;
		case 3:
			snprintf(line, sizeof line, "{\"op\":"
			    "\"get_submission\",\"id\":%d,"
			    "\"client_submission_id\":\"pipe-%d\"}\n", i,
			    i - 2);
			break;
		default:
			snprintf(line, sizeof line, "{\"op\":\"write_task\","
			    "\"id\":%d,\"task\":{\"sender\":\"PM\","
			    "\"recipient\":\"DEV\"}}\n", i);
			break;
		}
		memcpy(all + length, line, strlen(line));
		length += strlen(line);
	}
	peer_open(b, &p);
	assert_int_equal(send_all(p.fd, all, length), 0);
	free(all);
	for (i = 1; i <= TEST_PIPELINED; i++) {
		reply = peer_reply(&p);
		assert_id(reply, i);
		switch (i % 4) {
		case 1:
			harness_assert_bool(reply, "ok", 1);
			assert_string_equal(harness_str(reply, "disposition"),
			    "created");
			break;
		case 2:
			harness_assert_bool(reply, "ok", 1);
			assert_string_equal(harness_str(reply, "server"),
			    "idemd");
			break;
		case 3:
			harness_assert_bool(reply, "ok", 1);
			harness_assert_bool(reply, "found", 1);
			sub = json_object_get(reply, "submission");
			assert_string_equal(harness_str(sub, "state"),
			    "committed");
			snprintf(line, sizeof line, "pipe-%d", i - 2);
			assert_string_equal(harness_str(sub,
			    "client_submission_id"), line);
			break;
		default:
			harness_assert_bool(reply, "ok", 0);
			assert_string_equal(harness_str(json_object_get(reply,
			    "error"), "field"), "task.subject");
			break;
		}
		json_decref(reply);
	}
	peer_close(&p);
	assert_int_equal(harness_count_tasks(b), TEST_PIPELINED / 4);
	harness_finish(b);
}

struct flood {
	int	fd;
	int	rc;
};

/* Send the requests and never read: the writer blocks once buffers fill. */
static void *
flood_send(void *arg)
{
	struct flood	*f = arg;
	char		*all, *at;
	int		 i;

	all = malloc((size_t)TEST_FLOOD_REQUESTS * 48);
	if (all == NULL) {
		f->rc = -1;
		return NULL;
	}
	at = all;
	for (i = 1; i <= TEST_FLOOD_REQUESTS; i++)
		at += sprintf(at, "{\"op\":\"hello\",\"id\":%d}\n", i);
	f->rc = send_all(f->fd, all, (size_t)(at - all));
	free(all);
	return NULL;
}

static void
unread_replies_do_not_stall_others(void **state)
{
	/* One worker: the flood and the other client share its loop. */
	static const char *const args[] = { "--workers", "1", "--log-level",
	    "debug", NULL };
	struct broker	*b = *state;
	struct peer	 flooder, other;
	struct flood	 f;
	pthread_t	 thread;
	json_t		*reply;
	char		*line, want[48];
	int		 i;

	harness_must_start(b, args, NULL);
	peer_open(b, &flooder);
	f.fd = flooder.fd;
	f.rc = 0;
	assert_int_equal(pthread_create(&thread, NULL, flood_send, &f), 0);

	peer_open(b, &other);
	reply = peer_call(&other, "{\"op\":\"write_task\",\"id\":1,"
	    "\"client_submission_id\":\"beside-a-flood\",\"task\":{" OK_TASK
	    "}}");
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	expect_hello(&other, 2);
	peer_close(&other);

	/*
	 * Unread, its replies pass IDEM_MAX_OUTPUT_BYTES, the broker stops
	 * taking its lines, and its input fills past the line limit: the
	 * broker stops reading it (the event it logs).
	 */
	harness_wait_log(b, "reading paused", 1, TEST_EVENT_TIMEOUT_MS);

	/* The flooder gets every answer, in order, once it reads. */
	for (i = 1; i <= TEST_FLOOD_REQUESTS; i++) {
		if (peer_read(&flooder, &line, TEST_EVENT_TIMEOUT_MS) !=
		    PEER_LINE)
			fail_msg("the flooder's stream ended at reply %d", i);
		snprintf(want, sizeof want, "{\"ok\":true,\"id\":%d,", i);
		if (strncmp(line, want, strlen(want)) != 0)
			fail_msg("reply %d is %.200s", i, line);
		free(line);
	}
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(f.rc, 0);
	peer_close(&flooder);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/*
 * Lines answered before their dispatch returns, a megabyte of them
 * waiting in the input at once: stats replies (about 700 bytes) pass
 * IDEM_MAX_OUTPUT_BYTES while the client does not read, the broker
 * stops taking lines, and the completes of an effect never begun fill
 * the input behind them (about 8,000 of them in its megabyte).  Once
 * the client reads, the worker takes them all in one go.  Each is
 * answered (no_reservation) before its dispatch returns, and each reply
 * used to start the next line one call deeper: the worker died of
 * SIGSEGV thousands of lines in, its stack spent (it fails so without
 * conn.c's dispatching guard).
 */
#define TEST_NEST_STATS		9000
#define TEST_NEST_LINES		16000
#define TEST_NEST_COMPLETE	"{\"op\":\"effect_complete\",\"id\":%d,"	\
    "\"client_submission_id\":\"n\",\"effect_kind\":\"k/v1\",\"fence\":"	\
    "\"1-0123456789abcdef\",\"outcome\":\"applied\",\"result\":{}}\n"

static void *
nest_send(void *arg)
{
	struct flood	*f = arg;
	char		*all, *at;
	int		 i;

	all = malloc((size_t)TEST_NEST_STATS * 32 +
	    (size_t)TEST_NEST_LINES * sizeof TEST_NEST_COMPLETE);
	if (all == NULL) {
		f->rc = -1;
		return NULL;
	}
	at = all;
	for (i = 1; i <= TEST_NEST_STATS; i++)
		at += sprintf(at, "{\"op\":\"stats\",\"id\":%d}\n", i);
	for (i = 1; i <= TEST_NEST_LINES; i++)
		at += sprintf(at, TEST_NEST_COMPLETE, TEST_NEST_STATS + i);
	f->rc = send_all(f->fd, all, (size_t)(at - all));
	free(all);
	return NULL;
}

static void
answered_at_once_lines_do_not_nest(void **state)
{
	static const char *const args[] = { "--workers", "1", "--log-level",
	    "debug", NULL };
	struct broker	*b = *state;
	struct peer	 p;
	struct flood	 f;
	pthread_t	 thread;
	char		*line, want[48];
	int		 i;

	harness_must_start(b, args, NULL);
	peer_open(b, &p);
	f.fd = p.fd;
	f.rc = 0;
	assert_int_equal(pthread_create(&thread, NULL, nest_send, &f), 0);
	/* The input full of them: the broker stops reading. */
	harness_wait_log(b, "reading paused", 1, TEST_EVENT_TIMEOUT_MS);
	for (i = 1; i <= TEST_NEST_STATS + TEST_NEST_LINES; i++) {
		if (peer_read(&p, &line, TEST_EVENT_TIMEOUT_MS) != PEER_LINE)
			fail_msg("the stream ended at reply %d of %d", i,
			    TEST_NEST_STATS + TEST_NEST_LINES);
		snprintf(want, sizeof want, "\"id\":%d,", i);
		if (strstr(line, want) == NULL)
			fail_msg("reply %d is %.200s", i, line);
		if (i > TEST_NEST_STATS &&
		    strstr(line, "\"no_reservation\"") == NULL)
			fail_msg("reply %d: %.200s", i, line);
		free(line);
	}
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(f.rc, 0);
	peer_close(&p);
	/* The one worker served it all: never restarted. */
	assert_int_equal(harness_stat(b, "worker_restarts"), 0);
	harness_finish(b);
}

/* ---- Lifecycle ----------------------------------------------------------- */

#define TEST_EARLY_STOPS	10

/*
 * "ready" on --ready-fd is a promise to serve, so a SIGTERM right after
 * it must stop the broker like any other; a worker still starting up
 * must not lose it.  Repeated because the window is short.
 */
static void
sigterm_right_after_ready_stops(void **state)
{
	struct broker	*b = *state;
	int		 i;

	for (i = 0; i < TEST_EARLY_STOPS; i++) {
		harness_must_start(b, NULL, NULL);
		if (harness_stop(b) != 0)
			fail_msg("start %d: idemd did not stop on SIGTERM sent "
			    "right after it said ready (exit %d)", i + 1,
			    b->exit_status);
	}
	harness_finish(b);
}

/* ---- doc/protocol.md against SPEC.md and protocol.h ---------------------- */

#define NAMES_MAX	64

struct names {
	char	*name[NAMES_MAX];
	int	 count;
};

static void
names_add(struct names *n, const char *start, size_t length)
{
	int	i;

	for (i = 0; i < n->count; i++) {
		if (strlen(n->name[i]) == length &&
		    memcmp(n->name[i], start, length) == 0)
			return;
	}
	assert_true(n->count < NAMES_MAX);
	n->name[n->count] = strndup(start, length);
	assert_non_null(n->name[n->count]);
	n->count++;
}

static void
names_free(struct names *n)
{
	int	i;

	for (i = 0; i < n->count; i++)
		free(n->name[i]);
	n->count = 0;
}

static int
names_has(const struct names *n, const char *name)
{
	int	i;

	for (i = 0; i < n->count; i++) {
		if (strcmp(n->name[i], name) == 0)
			return 1;
	}
	return 0;
}

static char *
read_text(const char *path)
{
	struct stat	 st;
	char		*text;
	ssize_t		 n;
	int		 fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		fail_msg("%s: %s", path, strerror(errno));
	assert_int_equal(fstat(fd, &st), 0);
	text = malloc((size_t)st.st_size + 1);
	assert_non_null(text);
	n = read(fd, text, (size_t)st.st_size);
	assert_int_equal(n, st.st_size);
	text[n] = '\0';
	close(fd);
	return text;
}

/*
 * The `words` of the paragraph that starts with label, outside
 * parentheses: in SPEC.md the asides in parentheses (`field`, retry
 * notes) are not members of the list.
 */
static void
spec_list(const char *spec, const char *label, struct names *out)
{
	const char	*p, *end, *close;
	int		 depth = 0;

	if ((p = strstr(spec, label)) == NULL)
		fail_msg("SPEC.md has no \"%s\"", label);
	if ((end = strstr(p, "\n\n")) == NULL)
		end = p + strlen(p);
	for (p += strlen(label); p < end; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')' && depth > 0)
			depth--;
		else if (*p == '`') {
			if ((close = memchr(p + 1, '`', (size_t)(end - p - 1)))
			    == NULL)
				break;
			if (depth == 0)
				names_add(out, p + 1, (size_t)(close - p - 1));
			p = close;
		}
	}
}

/* The "### op" headings of SPEC.md's section "## Wire protocol". */
static void
spec_ops(const char *spec, struct names *out)
{
	const char	*p, *end, *eol;

	if ((p = strstr(spec, "\n## Wire protocol")) == NULL)
		fail_msg("SPEC.md has no wire protocol section");
	p++;
	if ((end = strstr(p + 1, "\n## ")) == NULL)
		end = p + strlen(p);
	while ((p = strstr(p, "\n### ")) != NULL && p < end) {
		p += 5;
		eol = strchr(p, '\n');
		names_add(out, p, (size_t)(eol - p));
	}
}

/* The `fields` in the first column of SPEC.md's table of task fields. */
static void
spec_task_fields(const char *spec, struct names *out)
{
	const char	*p, *eol, *bar, *q, *close;

	if ((p = strstr(spec, "\n| field | type |")) == NULL)
		fail_msg("SPEC.md has no table of task fields");
	/* Past the header and the |---| line, rows until a line not a row. */
	p = strchr(p + 1, '\n');
	p = strchr(p + 1, '\n');
	while (p != NULL && p[1] == '|') {
		eol = strchr(p + 1, '\n');
		bar = strchr(p + 2, '|');
		for (q = p + 2; q < bar; q++) {
			if (*q == '`' && (close = memchr(q + 1, '`',
			    (size_t)(bar - q - 1))) != NULL) {
				names_add(out, q + 1, (size_t)(close - q - 1));
				q = close;
			}
		}
		p = eol;
	}
}

/* Whether the doc holds before, name, after in one piece. */
static int
doc_has(const char *doc, const char *before, const char *name,
    const char *after)
{
	char	needle[160];

	snprintf(needle, sizeof needle, "%s%s%s", before, name, after);
	return strstr(doc, needle) != NULL;
}

/* Every line of every ```json block is one JSON object. */
static int
doc_json_examples(const char *doc)
{
	const char	*p = doc, *end, *eol;
	json_error_t	 error;
	json_t		*v;
	int		 n = 0;

	while ((p = strstr(p, "```json\n")) != NULL) {
		p += 8;
		if ((end = strstr(p, "```")) == NULL)
			fail_msg("an unclosed ```json block");
		for (; p < end; p = eol + 1) {
			eol = memchr(p, '\n', (size_t)(end - p));
			if (eol == NULL)
				eol = end;
			if (eol == p)
				continue;
			v = json_loadb(p, (size_t)(eol - p),
			    JSON_REJECT_DUPLICATES, &error);
			if (v == NULL || !json_is_object(v))
				fail_msg("doc/protocol.md: not a JSON object "
				    "(%s): %.*s", error.text, (int)(eol - p),
				    p);
			json_decref(v);
			n++;
		}
		p = end + 3;
	}
	return n;
}

static void
protocol_doc_matches_spec(void **state)
{
#define CODE_NAME(sym, name)	name,
	static const char *const broker_codes[] = {
		IDEM_ERROR_CODES(CODE_NAME) NULL
	};
	static const char *const broker_reasons[] = {
		IDEM_CONFLICT_REASONS(CODE_NAME) NULL
	};
#undef CODE_NAME
	static const long limits[] = {
		IDEM_MAX_LINE_BYTES, IDEM_MAX_SUBMISSION_ID_BYTES,
		IDEM_MAX_ROLE_BYTES, IDEM_MAX_SUBJECT_BYTES,
		IDEM_MAX_BODY_BYTES, IDEM_MAX_REF_BYTES, IDEM_MAX_LIST_ITEMS,
		IDEM_DEFAULT_MAX_CONNECTIONS, IDEM_DEFAULT_IDLE_TIMEOUT_MS,
		IDEM_DEFAULT_INFLIGHT_WAIT_MS
	};
	const char	*srcdir = getenv("IDEM_SRCDIR");
	const char	*docdir = getenv("IDEM_DOC_DIR");
	struct names	 codes = { .count = 0 }, ops = { .count = 0 };
	struct names	 reasons = { .count = 0 }, fields = { .count = 0 };
	char		 path[1024], number[32], *spec, *doc;
	int		 i, missing = 0;
	size_t		 j;

	(void)state;
	if (srcdir == NULL)
		srcdir = ".";
	snprintf(path, sizeof path, "%s/tests/vectors/SPEC.md", srcdir);
	spec = read_text(path);
	if (docdir != NULL)
		snprintf(path, sizeof path, "%s/protocol.md", docdir);
	else
		snprintf(path, sizeof path, "%s/doc/protocol.md", srcdir);
	doc = read_text(path);

	spec_list(spec, "Error codes:", &codes);
	spec_list(spec, "Conflict reasons:", &reasons);
	spec_ops(spec, &ops);
	spec_task_fields(spec, &fields);
	/* The extraction must have found what SPEC.md is known to hold. */
	assert_true(codes.count >= 14);
	assert_true(names_has(&codes, "invalid_json"));
	assert_true(names_has(&codes, "internal"));
	assert_true(ops.count >= 6);
	assert_true(names_has(&ops, "write_task"));
	assert_true(reasons.count >= 4);
	assert_true(fields.count >= 10);

	for (i = 0; i < codes.count; i++) {
		/* A row of the doc's table of error codes. */
		if (!doc_has(doc, "| `", codes.name[i], "` |")) {
			fprintf(stderr, "doc/protocol.md: no row for error "
			    "code %s\n", codes.name[i]);
			missing++;
		}
	}
	for (i = 0; i < ops.count; i++) {
		if (!doc_has(doc, "\n### ", ops.name[i], "\n")) {
			fprintf(stderr, "doc/protocol.md: no section "
			    "\"### %s\"\n", ops.name[i]);
			missing++;
		}
	}
	for (i = 0; i < reasons.count; i++) {
		if (!doc_has(doc, "`", reasons.name[i], "`")) {
			fprintf(stderr, "doc/protocol.md: conflict reason %s "
			    "missing\n", reasons.name[i]);
			missing++;
		}
	}
	for (i = 0; i < fields.count; i++) {
		if (!doc_has(doc, "| `", fields.name[i], "` |")) {
			fprintf(stderr, "doc/protocol.md: no row for task "
			    "field %s\n", fields.name[i]);
			missing++;
		}
	}
	/* The broker's codes are the contract's, no more and no fewer. */
	for (j = 0; broker_codes[j] != NULL; j++) {
		if (!names_has(&codes, broker_codes[j])) {
			fprintf(stderr, "protocol.h lists %s, SPEC.md does "
			    "not\n", broker_codes[j]);
			missing++;
		}
	}
	if ((size_t)codes.count != j) {
		fprintf(stderr, "SPEC.md lists %d error codes, protocol.h "
		    "%zu\n", codes.count, j);
		missing++;
	}
	/* The same for the conflict reasons. */
	for (j = 0; broker_reasons[j] != NULL; j++) {
		if (!names_has(&reasons, broker_reasons[j])) {
			fprintf(stderr, "protocol.h lists conflict reason %s, "
			    "SPEC.md does not\n", broker_reasons[j]);
			missing++;
		}
	}
	if ((size_t)reasons.count != j) {
		fprintf(stderr, "SPEC.md lists %d conflict reasons, "
		    "protocol.h %zu\n", reasons.count, j);
		missing++;
	}
	for (j = 0; j < sizeof limits / sizeof limits[0]; j++) {
		snprintf(number, sizeof number, "%ld", limits[j]);
		if (!doc_has(doc, "`", number, "`")) {
			fprintf(stderr, "doc/protocol.md: limit %s missing\n",
			    number);
			missing++;
		}
	}
	assert_true(doc_json_examples(doc) >= 20);
	assert_int_equal(missing, 0);
	names_free(&codes);
	names_free(&ops);
	names_free(&reasons);
	names_free(&fields);
	free(spec);
	free(doc);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(bad_requests_answer_exact_errors),
		T(line_limit_is_one_mib_with_newline),
		T(boundary_values_accepted),
		T(idle_connections_do_not_delay_a_writer),
		T(vanishing_half_requests_leave_no_trace),
		T(connection_cap_refuses_one_too_many),
		T(connection_cap_counts_all_workers),
		T(connections_spread_over_workers),
		T(a_stopped_sibling_costs_one_wait),
		T(dead_worker_connections_are_given_back),
		T(idle_connection_closed_by_timeout),
		T(pipelined_requests_answered_in_order),
		T(unread_replies_do_not_stall_others),
		T(answered_at_once_lines_do_not_nest),
		T(sigterm_right_after_ready_stops),
		cmocka_unit_test(protocol_doc_matches_spec),
	};

	/* A broker that closes on us must not kill the test with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	return harness_exit_status(FILTER_RUN(tests));
}
