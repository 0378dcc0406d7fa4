/* SPDX-License-Identifier: ISC */
/*
 * test_mcp_words.c: the words idem-mcp says, to people and to models
 * (issue #31, item 3).  Every tool's description, title and schema as
 * tools/list gives them, and the text of every kind of answer idem-mcp
 * can give (each conflict reason of tasks, reports and effects, a stale
 * fence, an unknown outcome, a live lease, effect_extend's answers, a
 * malformed fence, a lookup
 * of an effect and of nothing, diagnose with an effect whose outcome is
 * unknown, arguments the schema refuses, a broker that cannot be
 * reached, an unknown tool) through a real idemd, read for wrong words:
 * a "?" standing for what a text did not know, "(?)", task words
 * ("task", "file") in what an effect tool says, advice to resend the
 * content for a stale fence, "fence is required" for a malformed one.
 * And what each text must say for its case.  The broker's log is read
 * too: evidence it refused is not logged as taken.
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <ctype.h>
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
#define LEASE_SHORT	100	/* SPEC.md's least lease_ms */

struct mcp {
	pid_t	 pid;
	FILE	*in;
	FILE	*out;
	int	 id;
};

/* idem-mcp --socket socket, initialized. */
static void
mcp_open(struct mcp *m, const char *socket)
{
	const char	*prog = getenv("IDEM_MCP");
	int		 in[2], out[2];
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
	m->id = 1;
	assert_non_null(m->in);
	assert_non_null(m->out);
	assert_true(fprintf(m->in, "%s\n{\"jsonrpc\":\"2.0\",\"method\":"
	    "\"notifications/initialized\"}\n", INIT_LINE) > 0);
	assert_int_equal(fflush(m->in), 0);
	assert_true(getline(&line, &size, m->out) > 0);
	free(line);
}

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

/* One request (method, params' JSON) -> the whole response (new ref). */
static json_t *
mcp_request(struct mcp *m, const char *method, const char *params)
{
	json_t	*r;
	char	*line = NULL;
	size_t	 size = 0;

	assert_true(fprintf(m->in, "{\"jsonrpc\":\"2.0\",\"id\":%d,"
	    "\"method\":\"%s\",\"params\":%s}\n", m->id++, method,
	    params) > 0);
	assert_int_equal(fflush(m->in), 0);
	assert_true(getline(&line, &size, m->out) > 0);
	r = json_loads(line, 0, NULL);
	if (r == NULL)
		fail_msg("%s: not JSON: %s", method, line);
	free(line);
	return r;
}

/* ---- the words --------------------------------------------------------- */

/* s has word (letters on neither side), any case. */
static int
has_word(const char *s, const char *word)
{
	size_t		 n = strlen(word);
	const char	*p;

	for (p = s; *p != '\0'; p++) {
		if (strncasecmp(p, word, n) == 0 &&
		    (p == s || !isalpha((unsigned char)p[-1])) &&
		    !isalpha((unsigned char)p[n]))
			return 1;
	}
	return 0;
}

/*
 * Wrong words in what idem-mcp wrote (where: what it is, for the
 * message): a "?" (no text of idem-mcp asks a question: one is a
 * placeholder for what it did not know) and, where effect, task words.
 */
static void
assert_words(const char *where, const char *text, int effect)
{
	/* The system's name of ENOENT, quoted from connect(2), is not ours. */
	static const char	 enoent[] = "No such file or directory";
	char			*own, *p;

	if (strchr(text, '?') != NULL)
		fail_msg("%s: a \"?\" in: %s", where, text);
	assert_non_null(own = strdup(text));
	while ((p = strstr(own, enoent)) != NULL)
		memset(p, '-', sizeof enoent - 1);
	if (effect && (strcasestr(own, "task") != NULL ||
	    has_word(own, "file") || has_word(own, "files")))
		fail_msg("%s: task words in an effect's text: %s", where, text);
	free(own);
}

/* Every string in j (values, not member names), read by assert_words. */
static void
assert_words_in(const char *where, json_t *j, int effect)
{
	const char	*key;
	json_t		*v;
	size_t		 i;

	if (json_is_string(j))
		assert_words(where, json_string_value(j), effect);
	else if (json_is_object(j)) {
		json_object_foreach(j, key, v)
			assert_words_in(where, v, effect);
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			assert_words_in(where, v, effect);
	}
}

static int
is_effect_tool(const char *name)
{
	return strncmp(name, "effect_", 7) == 0;
}

/*
 * tools/call name(arguments) -> its first text block (malloc'd), read
 * by assert_words; *sc: the structuredContent (new reference) if sc.
 */
static char *
call_text(struct mcp *m, const char *name, const char *arguments,
    json_t **sc)
{
	json_t	*r, *result;
	char	 params[4096], *text;

	snprintf(params, sizeof params, "{\"name\":\"%s\",\"arguments\":%s}",
	    name, arguments);
	r = mcp_request(m, "tools/call", params);
	if ((result = json_object_get(r, "result")) == NULL)
		fail_msg("tools/call %s: no result: %s", name,
		    json_dumps(r, JSON_COMPACT));
	text = strdup(json_string_value(json_object_get(json_array_get(
	    json_object_get(result, "content"), 0), "text")));
	assert_non_null(text);
	assert_words(name, text, is_effect_tool(name));
	if (sc != NULL)
		*sc = json_incref(json_object_get(result,
		    "structuredContent"));
	json_decref(r);
	return text;
}

static void
assert_says(const char *text, const char *want)
{
	if (strstr(text, want) == NULL)
		fail_msg("no \"%s\" in: %s", want, text);
}

static void
assert_not_says(const char *text, const char *unwanted)
{
	if (strcasestr(text, unwanted) != NULL)
		fail_msg("\"%s\" in: %s", unwanted, text);
}

/* effect_begin (lease_ms) under id: its fence (malloc'd). */
static char *
begin(struct mcp *m, const char *id, int lease_ms)
{
	json_t	*sc;
	char	 args[512], *text, *fence;

	snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":\"a@b\"},"
	    "\"lease_ms\":%d}", id, lease_ms);
	text = call_text(m, "effect_begin", args, &sc);
	assert_says(text, "proceed");
	fence = strdup(harness_str(sc, "fence"));
	json_decref(sc);
	free(text);
	return fence;
}

/* effect_complete under id with fence: its text (malloc'd). */
static char *
complete(struct mcp *m, const char *id, const char *fence,
    const char *outcome, const char *result)
{
	char	args[1024];

	snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\",\"outcome\":"
	    "\"%s\"%s%s}", id, fence, outcome, result != NULL ?
	    ",\"result\":" : "", result != NULL ? result : "");
	return call_text(m, "effect_complete", args, NULL);
}

/* effect_extend under id with fence: its text (malloc'd). */
static char *
extend(struct mcp *m, const char *id, const char *fence)
{
	char	args[1024];

	snprintf(args, sizeof args, "{\"client_submission_id\":\"%s\","
	    "\"effect_kind\":\"" KIND "\",\"fence\":\"%s\","
	    "\"lease_ms\":60000}", id, fence);
	return call_text(m, "effect_extend", args, NULL);
}

/* ---- tests -------------------------------------------------------------- */

/* tools/list: every tool's words, and idem-mcp --help lists them all. */
static void
tool_descriptions_have_the_right_words(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r, *tools, *tool;
	const char	*prog = getenv("IDEM_MCP"), *name;
	char		 cmd[4096], help[8192];
	size_t		 i, n;
	FILE		*p;

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	r = mcp_request(&m, "tools/list", "{}");
	tools = json_object_get(json_object_get(r, "result"), "tools");
	assert_true(json_array_size(tools) >= 7);

	snprintf(cmd, sizeof cmd, "'%s' --help", prog);
	assert_non_null(p = popen(cmd, "r"));
	n = fread(help, 1, sizeof help - 1, p);
	help[n] = '\0';
	assert_int_equal(pclose(p), 0);

	json_array_foreach(tools, i, tool) {
		name = json_string_value(json_object_get(tool, "name"));
		assert_non_null(name);
		assert_words_in(name, tool, is_effect_tool(name));
		if (strstr(help, name) == NULL)
			fail_msg("idem-mcp --help does not list %s:\n%s", name,
			    help);
	}
	/* get_submission's key has its description. */
	json_array_foreach(tools, i, tool) {
		if (strcmp(json_string_value(json_object_get(tool, "name")),
		    "get_submission") != 0)
			continue;
		assert_non_null(json_string_value(json_object_get(
		    json_object_get(json_object_get(json_object_get(tool,
		    "inputSchema"), "properties"), "client_submission_id"),
		    "description")));
	}
	json_decref(r);
	mcp_close(&m);
	harness_finish(b);
}

/* Conflicts of tasks and reports: each says what it is bound to. */
static void
task_and_report_texts(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*sc;
	char		*text, args[1024], task_id[128];

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);
	text = call_text(&m, "write_task", "{\"client_submission_id\":\"w-1\","
	    "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\",\"subject\":"
	    "\"One\"}}", &sc);
	snprintf(task_id, sizeof task_id, "%s", harness_str(json_object_get(sc,
	    "receipt"), "task_id"));
	json_decref(sc);
	free(text);
	text = call_text(&m, "write_task", "{\"client_submission_id\":\"w-1\","
	    "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\",\"subject\":"
	    "\"Two\"}}", NULL);
	assert_says(text, "conflict (digest_mismatch)");
	assert_says(text, task_id);
	free(text);

	snprintf(args, sizeof args, "{\"task_id\":\"%s\","
	    "\"client_submission_id\":\"r-1\",\"report\":{\"sender\":\"DEV\","
	    "\"body\":\"first\"}}", task_id);
	free(call_text(&m, "write_report", args, NULL));
	snprintf(args, sizeof args, "{\"task_id\":\"%s\","
	    "\"client_submission_id\":\"r-1\",\"report\":{\"sender\":\"DEV\","
	    "\"body\":\"second\"}}", task_id);
	text = call_text(&m, "write_report", args, NULL);
	assert_says(text, "conflict (digest_mismatch)");
	assert_says(text, "another report (REPORT-");
	free(text);

	/* get_submission: a task found, then nothing found. */
	text = call_text(&m, "get_submission", "{\"client_submission_id\":"
	    "\"w-1\"}", NULL);
	assert_says(text, task_id);
	free(text);
	text = call_text(&m, "get_submission", "{\"client_submission_id\":"
	    "\"nobody\"}", NULL);
	assert_says(text, "Not found");
	free(text);
	/* Arguments the schema refuses. */
	free(call_text(&m, "write_task", "{\"client_submission_id\":\"w-2\"}",
	    NULL));
	mcp_close(&m);
	harness_finish(b);
}

/*
 * Every effect answer: what each says for its case, and never a task
 * word, a placeholder, or advice that does not fit.
 */
static void
effect_texts(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*sc;
	char		*text, *f1, *f2, *f3, *f4, args[1024], *log;
	struct timespec	 ts = { 0, 20 * 1000000L };
	int		 i;

	harness_must_start(b, NULL, NULL);
	mcp_open(&m, b->socket);

	/* The same key, another request. */
	f1 = begin(&m, "e-1", 30000);
	text = call_text(&m, "effect_begin", "{\"client_submission_id\":"
	    "\"e-1\",\"effect_kind\":\"" KIND "\",\"request\":{\"to\":"
	    "\"c@d\"}}", NULL);
	assert_says(text, "conflict (digest_mismatch)");
	assert_says(text, "another request");
	assert_says(text, "attempt 1");
	free(text);
	/* A live lease: in_progress. */
	text = call_text(&m, "effect_begin", "{\"client_submission_id\":"
	    "\"e-1\",\"effect_kind\":\"" KIND "\",\"request\":{\"to\":"
	    "\"a@b\"}}", NULL);
	assert_says(text, "in_progress");
	assert_says(text, "lease");
	free(text);
	/* Evidence while the lease is live: refused, and logged so. */
	text = call_text(&m, "effect_resolve", "{\"client_submission_id\":"
	    "\"e-1\",\"effect_kind\":\"" KIND "\",\"evidence\":{\"observed\":"
	    "\"applied\",\"source\":\"desk-7\"}}", NULL);
	assert_says(text, "in_progress");
	free(text);
	harness_wait_log(b, "refused evidence applied (another caller holds "
	    "a live lease) from desk-7", 1, 10000);

	/* A malformed fence says so. */
	text = complete(&m, "e-1", "not-a-fence", "applied", NULL);
	assert_says(text, "fence is malformed");
	assert_not_says(text, "fence is required");
	free(text);

	/* An extension of the live lease says until when. */
	text = extend(&m, "e-1", f1);
	assert_says(text, "extended");
	assert_says(text, "effect_complete");
	free(text);

	/* Released, begun again: the first fence is stale. */
	free(complete(&m, "e-1", f1, "not_applied", NULL));
	f2 = begin(&m, "e-1", 30000);
	text = extend(&m, "e-1", f1);
	assert_says(text, "conflict (stale_fence)");
	assert_says(text, "not extended");
	assert_says(text, "attempt 2");
	assert_not_says(text, "resend");
	free(text);
	text = complete(&m, "e-1", f1, "applied", "{\"id\":1}");
	assert_says(text, "conflict (stale_fence)");
	assert_says(text, "attempt 2");
	assert_not_says(text, "resend");
	assert_not_says(text, "send exactly");
	assert_not_says(text, "content");
	free(text);
	/* Released again: its fence has nothing to complete or extend. */
	free(complete(&m, "e-1", f2, "not_applied", NULL));
	text = extend(&m, "e-1", f2);
	assert_says(text, "conflict (no_reservation)");
	assert_says(text, "no lease to extend");
	free(text);
	text = complete(&m, "e-1", f2, "applied", "{\"id\":1}");
	assert_says(text, "conflict (no_reservation)");
	assert_says(text, "released");
	free(text);
	/* No effect under the key at all. */
	text = complete(&m, "e-none", f2, "applied", NULL);
	assert_says(text, "conflict (no_reservation)");
	assert_says(text, "no effect was begun");
	free(text);

	/* Committed: another result, and evidence against it. */
	f3 = begin(&m, "e-2", 30000);
	free(complete(&m, "e-2", f3, "applied", "{\"id\":1}"));
	text = complete(&m, "e-2", f3, "applied", "{\"id\":2}");
	assert_says(text, "conflict (already_committed)");
	assert_says(text, "another outcome or result");
	free(text);
	text = extend(&m, "e-2", f3);
	assert_says(text, "conflict (already_committed)");
	assert_says(text, "no lease to extend");
	free(text);
	text = call_text(&m, "effect_resolve", "{\"client_submission_id\":"
	    "\"e-2\",\"effect_kind\":\"" KIND "\",\"evidence\":{\"observed\":"
	    "\"not_applied\",\"source\":\"desk-8\"}}", NULL);
	assert_says(text, "conflict (already_committed)");
	assert_says(text, "evidence contradicts");
	free(text);
	harness_wait_log(b, "refused evidence not_applied (it contradicts the "
	    "committed receipt) from desk-8", 1, 10000);

	/* get_submission of an effect: no task in it. */
	text = call_text(&m, "get_submission", "{\"client_submission_id\":"
	    "\"e-2\",\"effect_kind\":\"" KIND "\"}", NULL);
	assert_says(text, "Effect " KIND);
	assert_says(text, "committed");
	free(text);

	/* A lease that lapsed: outcome_unknown (time is the event). */
	f4 = begin(&m, "e-3", LEASE_SHORT);
	snprintf(args, sizeof args, "{\"client_submission_id\":\"e-3\","
	    "\"effect_kind\":\"" KIND "\",\"request\":{\"to\":\"a@b\"}}");
	for (i = 0; i < 500; i++) {
		text = call_text(&m, "effect_begin", args, &sc);
		if (strcmp(harness_str(json_object_get(sc, "error"), "code"),
		    "outcome_unknown") == 0)
			break;
		json_decref(sc);
		free(text);
		nanosleep(&ts, NULL);
	}
	assert_true(i < 500);
	json_decref(sc);
	assert_says(text, "outcome_unknown");
	assert_says(text, "effect_resolve");
	free(text);
	/* Its holder's extension: not extended, but it may still complete. */
	text = extend(&m, "e-3", f4);
	assert_says(text, "outcome_unknown");
	assert_says(text, "not extended");
	assert_says(text, "effect_complete with the same fence");
	free(text);
	/* diagnose: the effect is an effect, not a task. */
	text = call_text(&m, "diagnose", "{}", NULL);
	assert_says(text, "0 task submissions in an intermediate state");
	/* e-3 unknown, e-1 released; e-2 committed. */
	assert_says(text, "2 unfinished effects (outcome_unknown 1, with a "
	    "live lease 0, released 1); 1 committed.");
	free(text);

	/* The only evidence taken is none: every resolve was refused. */
	assert_non_null(log = harness_read_log(b));
	if (strstr(log, "took evidence") != NULL)
		fail_msg("refused evidence logged as taken:\n%s", log);
	free(log);
	free(f1);
	free(f2);
	free(f3);
	free(f4);
	mcp_close(&m);
	harness_finish(b);
}

/* No broker, an unknown tool: the words of idem-mcp's own failures. */
static void
texts_without_a_broker(void **state)
{
	struct broker	*b = *state;
	struct mcp	 m;
	json_t		*r;
	char		*text, path[600];

	snprintf(path, sizeof path, "%s/no-such.sock", b->root);
	mcp_open(&m, path);
	text = call_text(&m, "write_task", "{\"client_submission_id\":\"n-1\","
	    "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\",\"subject\":"
	    "\"x\"}}", NULL);
	assert_says(text, "broker_unavailable");
	free(text);
	text = call_text(&m, "effect_begin", "{\"client_submission_id\":"
	    "\"n-1\",\"effect_kind\":\"" KIND "\",\"request\":{}}", NULL);
	assert_says(text, "broker_unavailable");
	free(text);
	r = mcp_request(&m, "tools/call", "{\"name\":\"nope\",\"arguments\":"
	    "{}}");
	assert_words("unknown tool", json_string_value(json_object_get(
	    json_object_get(r, "error"), "message")), 0);
	json_decref(r);
	mcp_close(&m);
	harness_finish(b);	/* its root, made by harness_setup */
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(tool_descriptions_have_the_right_words),
		T(task_and_report_texts),
		T(effect_texts),
		T(texts_without_a_broker),
	};

	signal(SIGPIPE, SIG_IGN);
	return harness_exit_status(FILTER_RUN(tests));
}
