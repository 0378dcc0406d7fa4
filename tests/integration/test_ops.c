/* SPDX-License-Identifier: ISC */
/*
 * test_ops.c: the ops other than write_task's first creation, against a
 * real idemd: write_report (dedup, conflict, legacy, default recipient,
 * across a kill -9), get_submission (committed, not found, and the
 * intermediate states a crash leaves), diagnose (what it reports, and
 * that it changes nothing) and stats (that every counter moves as the
 * calls say).
 *
 * Judged by what is authoritative: the files on disk, their front
 * matter, and the reply bytes.  Nothing sleeps to synchronise; crashes
 * come from IDEM_CRASH_AT and are awaited with harness_wait_dead.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
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
#include "stats.h"

/* A test that takes longer than this is hung: the watchdog ends it. */
#define TEST_BODY		"Steps:\n1. reproduce\n2. fix\n"
/* The exit status of a broker that IDEM_CRASH_AT killed (SIGKILL). */
#define TEST_CRASH_STATUS	(128 + SIGKILL)
/* Older than anything a test can make: no entry is stalled past it. */
#define TEST_NEVER_STALE_MS	1000000000000LL
#define TEST_CAPACITY		"4096"

/* ---- Fixtures ------------------------------------------------------------ */

/* Start with IDEM_CRASH_AT=point: the first call to reach it kills all. */
static void
start_crashing_at(struct broker *b, const char *point)
{
	char		 env[96];
	const char	*envp[] = { env, NULL };

	snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", point);
	assert_int_equal(harness_start(b, NULL, envp), 0);
}

/* ---- Calls --------------------------------------------------------------- */

/* One raw line on a connection of its own; the reply line (malloc'd). */
static char *
call_text(struct broker *b, const char *line)
{
	struct idem_conn	*c;
	struct idem_error	 err;
	char			*response = NULL;

	c = harness_connect(b);
	assert_non_null(c);
	if (idem_call_raw(c, line, &response, &err) != 0)
		fail_msg("no reply to %.200s: %s", line, err.message);
	idem_close(c);
	return response;
}

static json_t *
parse(const char *text)
{
	json_error_t	 error;
	json_t		*v;

	if ((v = json_loads(text, 0, &error)) == NULL)
		fail_msg("not JSON (%s): %.200s", error.text, text);
	return v;
}

static json_t *
call(struct broker *b, const char *line)
{
	char	*text;
	json_t	*reply;

	text = call_text(b, line);
	reply = parse(text);
	free(text);
	return reply;
}

/* A request built with jansson, sent as one compact line. */
static json_t *
call_json(struct broker *b, json_t *request)
{
	char	*line;
	json_t	*reply;

	line = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(request);
	assert_non_null(line);
	reply = call(b, line);
	free(line);
	return reply;
}

/* A call whose broker dies on the way (IDEM_CRASH_AT): no reply comes. */
static void
call_into_crash(struct broker *b, json_t *request)
{
	struct idem_conn	*c;
	json_t			*reply;

	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, request);
	if (reply != NULL)
		fail_msg("a reply came from a broker that should have died: "
		    "%s", json_dumps(reply, JSON_COMPACT));
	idem_close(c);
	harness_wait_dead(b);
	assert_int_equal(b->exit_status, TEST_CRASH_STATUS);
}

static json_t *
write_task(struct broker *b, const char *id, const char *subject)
{
	return call_json(b, harness_write_task(id, subject));
}

static json_t *
write_report(struct broker *b, const char *task_id, const char *id,
    const char *sender, const char *recipient, const char *status,
    const char *body)
{
	json_t	*request, *report;

	report = json_pack("{s:s}", "sender", sender);
	if (recipient != NULL)
		json_object_set_new(report, "recipient",
		    json_string(recipient));
	if (status != NULL)
		json_object_set_new(report, "status", json_string(status));
	if (body != NULL)
		json_object_set_new(report, "body", json_string(body));
	request = json_pack("{s:s, s:s, s:o}", "op", "write_report",
	    "task_id", task_id, "report", report);
	if (id != NULL)
		json_object_set_new(request, "client_submission_id",
		    json_string(id));
	return call_json(b, request);
}

static json_t *
get_submission(struct broker *b, const char *id)
{
	return call_json(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", id));
}

static json_t *
diagnose(struct broker *b, long long stale_after_ms)
{
	json_t	*reply;

	if (stale_after_ms < 0)
		reply = call(b, "{\"op\":\"diagnose\"}");
	else
		reply = call_json(b, json_pack("{s:s, s:I}", "op", "diagnose",
		    "stale_after_ms", (json_int_t)stale_after_ms));
	if (!json_is_true(json_object_get(reply, "ok")))
		fail_msg("diagnose failed: %s", json_dumps(reply,
		    JSON_COMPACT));
	return reply;
}

static json_t *
stats(struct broker *b)
{
	json_t	*reply = call(b, "{\"op\":\"stats\"}");

	if (!json_is_true(json_object_get(reply, "ok")))
		fail_msg("stats failed: %s", json_dumps(reply, JSON_COMPACT));
	return reply;
}

/* ---- Judging ------------------------------------------------------------- */

static void
assert_null_member(json_t *object, const char *key)
{
	if (!json_is_null(json_object_get(object, key)))
		fail_msg("\"%s\" is not null in %s", key,
		    json_dumps(object, JSON_COMPACT));
}

static void
assert_created(json_t *reply, int recovered)
{
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	harness_assert_bool(reply, "action_taken", 1);
	if (recovered)
		harness_assert_bool(reply, "recovered", 1);
	else
		assert_null(json_object_get(reply, "recovered"));
}

static void
assert_reused(json_t *reply, int recovered)
{
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	harness_assert_bool(reply, "action_taken", 0);
	if (recovered)
		harness_assert_bool(reply, "recovered", 1);
	else
		assert_null(json_object_get(reply, "recovered"));
}

static void
assert_report(json_t *reply, int deduplicated)
{
	char	path[160];

	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "deduplicated", deduplicated);
	assert_int_equal(strncmp(harness_str(reply, "report_id"), "REPORT-", 7),
	    0);
	snprintf(path, sizeof path, "reports/%s.md", harness_str(reply,
	    "report_id"));
	assert_string_equal(harness_str(reply, "report_path"), path);
}

/*
 * The bytes of the object after "key": in a reply line, as sent: the
 * contract promises receipts byte for byte, so they are compared
 * unparsed.  Strings are skipped so that braces in them do not count.
 */
static char *
raw_object(const char *text, const char *key)
{
	char		 needle[64];
	const char	*p, *start;
	int		 depth = 0, in_string = 0;

	snprintf(needle, sizeof needle, "\"%s\":{", key);
	if ((p = strstr(text, needle)) == NULL)
		fail_msg("no %s in %.300s", key, text);
	start = p + strlen(needle) - 1;
	for (p = start; *p != '\0'; p++) {
		if (in_string) {
			if (*p == '\\')
				p++;
			else if (*p == '"')
				in_string = 0;
		} else if (*p == '"')
			in_string = 1;
		else if (*p == '{')
			depth++;
		else if (*p == '}' && --depth == 0)
			return strndup(start, (size_t)(p + 1 - start));
	}
	fail_msg("unbalanced %s in %.300s", key, text);
	return NULL;
}

/* ---- Files --------------------------------------------------------------- */

/* The names and sizes of the journal's files, one line each (malloc'd). */
static char *
journal_listing(const struct broker *b)
{
	char		 path[400], file[700], *out = NULL;
	size_t		 size = 0;
	FILE		*f;
	DIR		*d;
	struct dirent	*e;
	struct stat	 st;

	snprintf(path, sizeof path, "%s/.idem/journal", b->root);
	f = open_memstream(&out, &size);
	assert_non_null(f);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		snprintf(file, sizeof file, "%s/%s", path, e->d_name);
		if (e->d_name[0] != '.' && stat(file, &st) == 0)
			fprintf(f, "%s %lld\n", e->d_name,
			    (long long)st.st_size);
	}
	closedir(d);
	fclose(f);
	return out;
}

/* Whether the front matter has the line "key: value" exactly. */
static void
assert_fm_line(const char *fm, const char *key, const char *value)
{
	char	line[512];

	snprintf(line, sizeof line, "\n%s: %s\n", key, value);
	if (strstr(fm, line) == NULL)
		fail_msg("no line \"%s: %s\" in front matter:%s", key, value,
		    fm);
}

/* A legacy task PM -> DEV: its id (into out). */
static void
make_task(struct broker *b, char *out, size_t size)
{
	json_t	*reply;

	reply = write_task(b, NULL, "Something to report on");
	assert_created(reply, 0);
	snprintf(out, size, "%s", harness_receipt_str(reply, "task_id"));
	json_decref(reply);
}

/* ---- write_report -------------------------------------------------------- */

static void
report_created_then_deduplicated(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *again;
	char		 task_id[96], *data;

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	first = write_report(b, task_id, "r-1", "DEV", NULL, "done",
	    "All fixed.\n");
	assert_report(first, 0);
	assert_int_equal(harness_count_reports(b), 1);
	data = harness_read(b, harness_str(first, "report_path"));
	assert_non_null(data);
	free(data);

	again = write_report(b, task_id, "r-1", "DEV", NULL, "done",
	    "All fixed.\n");
	assert_report(again, 1);
	assert_string_equal(harness_str(again, "report_id"), harness_str(first,
	    "report_id"));
	assert_string_equal(harness_str(again, "report_path"),
	    harness_str(first, "report_path"));
	assert_int_equal(harness_count_reports(b), 1);
	json_decref(again);
	/* The defaults are part of the content: "done" said or not is one. */
	again = write_report(b, task_id, "r-1", "DEV", "PM", NULL,
	    "All fixed.\n");
	assert_report(again, 1);
	assert_string_equal(harness_str(again, "report_id"), harness_str(first,
	    "report_id"));
	assert_int_equal(harness_count_reports(b), 1);
	json_decref(again);
	json_decref(first);
	harness_finish(b);
}

static void
report_normalized_equal_is_deduplicated(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *again;
	char		 task_id[96];

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	first = write_report(b, task_id, "r-nl", "DEV", NULL, NULL,
	    "line one\nline two\n");
	assert_report(first, 0);
	/* CRLF and lone CR normalize to LF. */
	again = write_report(b, task_id, "r-nl", "DEV", NULL, NULL,
	    "line one\r\nline two\r\n");
	assert_report(again, 1);
	assert_string_equal(harness_str(again, "report_id"), harness_str(first,
	    "report_id"));
	json_decref(again);
	again = write_report(b, task_id, "r-nl", "DEV", NULL, NULL,
	    "line one\rline two\r");
	assert_report(again, 1);
	json_decref(again);
	json_decref(first);

	/* NFC: e + U+0301 is U+00E9. */
	first = write_report(b, task_id, "r-nfc", "DEV", NULL, NULL,
	    "caf\xc3\xa9");
	assert_report(first, 0);
	again = write_report(b, task_id, "r-nfc", "DEV", NULL, NULL,
	    "cafe\xcc\x81");
	assert_report(again, 1);
	assert_string_equal(harness_str(again, "report_id"), harness_str(first,
	    "report_id"));
	json_decref(again);
	json_decref(first);
	assert_int_equal(harness_count_reports(b), 2);
	harness_finish(b);
}

static void
assert_report_conflict(json_t *reply, const char *report_id)
{
	json_t	*error = json_object_get(reply, "error");
	json_t	*existing = json_object_get(reply, "existing");

	harness_assert_bool(reply, "ok", 0);
	harness_assert_bool(reply, "action_taken", 0);
	assert_string_equal(harness_str(error, "code"), "conflict");
	assert_string_equal(harness_str(error, "reason"), "digest_mismatch");
	harness_assert_bool(error, "retryable", 0);
	assert_non_null(existing);
	assert_string_equal(harness_str(existing, "report_id"), report_id);
}

static void
report_same_id_other_content_conflicts(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *other;
	char		 task_id[96], *fm_before, *fm_after;

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	first = write_report(b, task_id, "r-1", "DEV", NULL, "done", "ok");
	assert_report(first, 0);
	fm_before = harness_read(b, harness_str(first, "report_path"));

	other = write_report(b, task_id, "r-1", "DEV", NULL, "done",
	    "not ok");
	assert_report_conflict(other, harness_str(first, "report_id"));
	json_decref(other);
	other = write_report(b, task_id, "r-1", "DEV", NULL, "aborted", "ok");
	assert_report_conflict(other, harness_str(first, "report_id"));
	json_decref(other);
	other = write_report(b, task_id, "r-1", "DEV", "QA", "done", "ok");
	assert_report_conflict(other, harness_str(first, "report_id"));
	json_decref(other);
	other = write_report(b, task_id, "r-1", "OPS", NULL, "done", "ok");
	assert_report_conflict(other, harness_str(first, "report_id"));
	json_decref(other);
	/* Trailing whitespace is content: no trimming. */
	other = write_report(b, task_id, "r-1", "DEV", NULL, "done", "ok\n");
	assert_report_conflict(other, harness_str(first, "report_id"));
	json_decref(other);

	assert_int_equal(harness_count_reports(b), 1);
	fm_after = harness_read(b, harness_str(first, "report_path"));
	assert_string_equal(fm_before, fm_after);
	free(fm_before);
	free(fm_after);
	json_decref(first);
	harness_finish(b);
}

static void
report_without_id_writes_each_time(void **state)
{
	struct broker	*b = *state;
	json_t		*r[3];
	char		 task_id[96];
	int		 i;

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	for (i = 0; i < 3; i++) {
		r[i] = write_report(b, task_id, NULL, "DEV", NULL, "in_progress",
		    "same words");
		assert_report(r[i], 0);
		assert_int_equal(harness_count_reports(b), i + 1);
	}
	assert_string_not_equal(harness_str(r[0], "report_id"),
	    harness_str(r[1], "report_id"));
	assert_string_not_equal(harness_str(r[1], "report_id"),
	    harness_str(r[2], "report_id"));
	assert_string_not_equal(harness_str(r[0], "report_id"),
	    harness_str(r[2], "report_id"));
	for (i = 0; i < 3; i++)
		json_decref(r[i]);
	harness_finish(b);
}

static void
report_recipient_defaults_to_task_sender(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		 task_id[96], quoted[128], *fm;
	const char	*report_id;

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	reply = write_report(b, task_id, "r-default", "DEV", NULL, NULL,
	    "Done.\n");
	assert_report(reply, 0);
	report_id = harness_str(reply, "report_id");
	/* REPORT-YYYYMMDD-NNN-DEV-to-PM: the task's sender gets it. */
	assert_string_equal(report_id + strlen(report_id) - 10, "-DEV-to-PM");
	fm = harness_front_matter(b, harness_str(reply, "report_path"));
	assert_fm_line(fm, "protocol", "\"fcop\"");
	assert_fm_line(fm, "type", "\"REPORT\"");
	snprintf(quoted, sizeof quoted, "\"%s\"", report_id);
	assert_fm_line(fm, "report_id", quoted);
	snprintf(quoted, sizeof quoted, "\"%s\"", task_id);
	assert_fm_line(fm, "task_id", quoted);
	assert_fm_line(fm, "sender", "\"DEV\"");
	assert_fm_line(fm, "recipient", "\"PM\"");
	assert_fm_line(fm, "status", "\"done\"");
	assert_fm_line(fm, "client_submission_id", "\"r-default\"");
	assert_fm_line(fm, "digest_schema", "\"write-report-v1\"");
	free(fm);
	json_decref(reply);

	/* Said outright, the recipient is the one said. */
	reply = write_report(b, task_id, "r-qa", "DEV", "QA", "blocked", "");
	assert_report(reply, 0);
	report_id = harness_str(reply, "report_id");
	assert_string_equal(report_id + strlen(report_id) - 10, "-DEV-to-QA");
	fm = harness_front_matter(b, harness_str(reply, "report_path"));
	assert_fm_line(fm, "recipient", "\"QA\"");
	assert_fm_line(fm, "status", "\"blocked\"");
	free(fm);
	json_decref(reply);

	/* Legacy: no submission id line worth the name. */
	reply = write_report(b, task_id, NULL, "DEV", NULL, NULL, "x");
	assert_report(reply, 0);
	fm = harness_front_matter(b, harness_str(reply, "report_path"));
	assert_fm_line(fm, "recipient", "\"PM\"");
	assert_fm_line(fm, "client_submission_id", "null");
	free(fm);
	json_decref(reply);
	harness_finish(b);
}

/* The dedup key is the task and the id: one id, two tasks, two reports. */
static void
report_ids_are_per_task(void **state)
{
	struct broker	*b = *state;
	json_t		*one, *two;
	char		 task1[96], task2[96];

	harness_must_start(b, NULL, NULL);
	make_task(b, task1, sizeof task1);
	make_task(b, task2, sizeof task2);
	one = write_report(b, task1, "r-1", "DEV", NULL, NULL, "same");
	two = write_report(b, task2, "r-1", "DEV", NULL, NULL, "same");
	assert_report(one, 0);
	assert_report(two, 0);
	assert_string_not_equal(harness_str(one, "report_id"), harness_str(two,
	    "report_id"));
	assert_int_equal(harness_count_reports(b), 2);
	json_decref(one);
	json_decref(two);
	harness_finish(b);
}

/* FCoP tools move tasks; a report finds its task in any stage. */
static void
report_on_a_moved_task(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		 task_id[96], from[512], to[512];

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	snprintf(from, sizeof from, "%s/_lifecycle/inbox/%s.md", b->root,
	    task_id);
	snprintf(to, sizeof to, "%s/_lifecycle/done/%s.md", b->root, task_id);
	assert_int_equal(rename(from, to), 0);
	reply = write_report(b, task_id, "r-moved", "DEV", NULL, NULL, "ok");
	assert_report(reply, 0);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 1);
	harness_finish(b);
}

static void
report_dedup_survives_kill9(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *again, *legacy;
	char		 task_id[96];

	harness_must_start(b, NULL, NULL);
	make_task(b, task_id, sizeof task_id);
	first = write_report(b, task_id, "r-9", "DEV", NULL, NULL, "before");
	assert_report(first, 0);
	legacy = write_report(b, task_id, NULL, "DEV", NULL, NULL, "legacy");
	assert_report(legacy, 0);
	harness_kill(b);

	harness_must_start(b, NULL, NULL);
	again = write_report(b, task_id, "r-9", "DEV", NULL, NULL, "before");
	assert_report(again, 1);
	assert_string_equal(harness_str(again, "report_id"), harness_str(first,
	    "report_id"));
	json_decref(again);
	again = write_report(b, task_id, "r-9", "DEV", NULL, NULL, "after");
	assert_report_conflict(again, harness_str(first, "report_id"));
	json_decref(again);
	assert_int_equal(harness_count_reports(b), 2);
	/* A number handed out before the kill is not handed out again. */
	again = write_report(b, task_id, NULL, "DEV", NULL, NULL, "legacy");
	assert_report(again, 0);
	assert_string_not_equal(harness_str(again, "report_id"),
	    harness_str(first, "report_id"));
	assert_string_not_equal(harness_str(again, "report_id"),
	    harness_str(legacy, "report_id"));
	assert_int_equal(harness_count_reports(b), 3);
	json_decref(again);
	json_decref(legacy);
	json_decref(first);
	harness_finish(b);
}

/* ---- get_submission ------------------------------------------------------ */

/* The write_task request of harness_write_task, as one line (malloc'd). */
static char *
write_task_line(const char *id, const char *subject)
{
	json_t	*request = harness_write_task(id, subject);
	char	*line;

	line = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(request);
	assert_non_null(line);
	return line;
}

/* The client's digest of harness_write_task's task. */
static void
task_digest(const char *subject, char digest[IDEM_DIGEST_HEX_SIZE])
{
	struct idem_task	t;

	memset(&t, 0, sizeof t);
	t.sender = "PM";
	t.recipient = "DEV";
	t.subject = subject;
	t.body = TEST_BODY;
	assert_int_equal(idem_task_digest(&t, digest), 0);
}

static void
assert_time(json_t *object, const char *key)
{
	const char	*at = harness_str(object, key);

	/* 2026-12-02T12:00:00.123Z */
	if (strlen(at) != 24 || at[4] != '-' || at[10] != 'T' ||
	    at[19] != '.' || at[23] != 'Z')
		fail_msg("%s is not a UTC time: %s", key, at);
}

static void
get_submission_committed_receipt_identical(void **state)
{
	struct broker	*b = *state;
	char		*line, *wrote, *reused, *got, *r_wrote, *r_reused;
	char		*r_got, digest[IDEM_DIGEST_HEX_SIZE];
	json_t		*reply, *sub, *receipt;

	harness_must_start(b, NULL, NULL);
	line = write_task_line("gs-1", "Look me up");
	wrote = call_text(b, line);
	reused = call_text(b, line);
	free(line);
	got = call_text(b, "{\"op\":\"get_submission\",\"id\":\"g\","
	    "\"client_submission_id\":\"gs-1\"}");

	reply = parse(got);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "id"), "g");
	harness_assert_bool(reply, "found", 1);
	sub = json_object_get(reply, "submission");
	receipt = json_object_get(sub, "receipt");
	assert_non_null(receipt);
	assert_string_equal(harness_str(sub, "client_submission_id"), "gs-1");
	assert_string_equal(harness_str(sub, "state"), "committed");
	assert_string_equal(harness_str(sub, "digest_schema"), "write-task-v1");
	task_digest("Look me up", digest);
	assert_string_equal(harness_str(sub, "request_digest"), digest);
	assert_string_equal(harness_str(sub, "task_id"), harness_str(receipt,
	    "task_id"));
	assert_string_equal(harness_str(sub, "task_path"), harness_str(receipt,
	    "task_path"));
	assert_time(sub, "reserved_at");
	assert_time(sub, "updated_at");
	assert_string_equal(harness_str(receipt, "state"), "committed");
	json_decref(reply);

	/* Byte for byte: the write's receipt, the reuse's, the lookup's. */
	r_wrote = raw_object(wrote, "receipt");
	r_reused = raw_object(reused, "receipt");
	r_got = raw_object(got, "receipt");
	assert_string_equal(r_wrote, r_reused);
	assert_string_equal(r_wrote, r_got);
	free(r_wrote);
	free(r_reused);
	free(r_got);
	free(wrote);
	free(reused);
	free(got);
	harness_finish(b);
}

static void
get_submission_not_found(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		 task_id[96];

	harness_must_start(b, NULL, NULL);
	reply = call(b, "{\"op\":\"get_submission\",\"id\":5,"
	    "\"client_submission_id\":\"never-sent\"}");
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(harness_int(reply, "id"), 5);
	harness_assert_bool(reply, "found", 0);
	assert_null(json_object_get(reply, "submission"));
	json_decref(reply);

	/* A report's id is not a task submission. */
	make_task(b, task_id, sizeof task_id);
	json_decref(write_report(b, task_id, "r-only", "DEV", NULL, NULL,
	    "x"));
	reply = get_submission(b, "r-only");
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	harness_finish(b);
}

/* After a crash at point: the submission as get_submission shows it. */
static json_t *
crash_one_submission(struct broker *b, const char *point, const char *id,
    const char *subject)
{
	json_t	*reply, *sub;

	start_crashing_at(b, point);
	call_into_crash(b, harness_write_task(id, subject));
	harness_must_start(b, NULL, NULL);
	reply = get_submission(b, id);
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "found", 1);
	sub = json_incref(json_object_get(reply, "submission"));
	json_decref(reply);
	assert_non_null(sub);
	return sub;
}

static void
get_submission_reserved_after_crash(void **state)
{
	struct broker	*b = *state;
	json_t		*sub, *retry, *after;
	char		 digest[IDEM_DIGEST_HEX_SIZE], path[160];

	sub = crash_one_submission(b, "after_reserve_durable", "gs-res",
	    "Reserved only");
	assert_string_equal(harness_str(sub, "state"), "reserved");
	assert_null(json_object_get(sub, "receipt"));
	assert_string_equal(harness_str(sub, "client_submission_id"), "gs-res");
	assert_string_equal(harness_str(sub, "digest_schema"), "write-task-v1");
	task_digest("Reserved only", digest);
	assert_string_equal(harness_str(sub, "request_digest"), digest);
	snprintf(path, sizeof path, "_lifecycle/inbox/%s.md",
	    harness_str(sub, "task_id"));
	assert_string_equal(harness_str(sub, "task_path"), path);
	assert_time(sub, "reserved_at");
	assert_time(sub, "updated_at");
	/* Reserved: no file yet, and looking did not make one. */
	assert_int_equal(harness_count_tasks(b), 0);

	retry = write_task(b, "gs-res", "Reserved only");
	assert_created(retry, 1);
	assert_string_equal(harness_receipt_str(retry, "task_id"),
	    harness_str(sub, "task_id"));
	assert_int_equal(harness_count_tasks(b), 1);
	after = get_submission(b, "gs-res");
	assert_string_equal(harness_str(json_object_get(after, "submission"),
	    "state"), "committed");
	assert_true(json_equal(json_object_get(json_object_get(after,
	    "submission"), "receipt"), json_object_get(retry, "receipt")));
	json_decref(after);
	json_decref(retry);
	json_decref(sub);
	harness_finish(b);
}

static void
get_submission_task_created_after_crash(void **state)
{
	struct broker	*b = *state;
	json_t		*sub, *retry, *after;

	sub = crash_one_submission(b, "after_task_created_durable", "gs-tc",
	    "Created, not committed");
	assert_string_equal(harness_str(sub, "state"), "task_created");
	assert_null(json_object_get(sub, "receipt"));
	assert_int_equal(harness_count_tasks(b), 1);

	/* The file is there: the retry commits it, writing nothing. */
	retry = write_task(b, "gs-tc", "Created, not committed");
	assert_reused(retry, 1);
	assert_string_equal(harness_receipt_str(retry, "task_id"),
	    harness_str(sub, "task_id"));
	assert_int_equal(harness_count_tasks(b), 1);
	after = get_submission(b, "gs-tc");
	assert_string_equal(harness_str(json_object_get(after, "submission"),
	    "state"), "committed");
	assert_true(json_equal(json_object_get(json_object_get(after,
	    "submission"), "receipt"), json_object_get(retry, "receipt")));
	json_decref(after);
	json_decref(retry);
	json_decref(sub);
	harness_finish(b);
}

/* ---- diagnose ------------------------------------------------------------ */

/* The only entry of a diagnose reply, with its counts checked. */
static json_t *
only_entry(json_t *reply, int reserved, int task_created, int committed)
{
	json_t	*entries = json_object_get(reply, "entries");
	json_t	*counts = json_object_get(reply, "counts");

	assert_true(json_is_array(entries));
	assert_int_equal(json_array_size(entries), 1);
	assert_int_equal(harness_int(counts, "reserved"), reserved);
	assert_int_equal(harness_int(counts, "task_created"), task_created);
	assert_int_equal(harness_int(counts, "committed"), committed);
	return json_array_get(entries, 0);
}

/* Everything diagnose could touch, as text: files, journal, the record. */
static char *
observable(struct broker *b, const char *id)
{
	json_t	*reply, *s;
	char	*text, *journal, *sub, *file, *out;

	reply = get_submission(b, id);
	sub = json_dumps(reply, JSON_COMPACT);
	/* The file at the reserved path, byte for byte, if there is one. */
	file = harness_read(b, harness_str(json_object_get(reply, "submission"),
	    "task_path"));
	json_decref(reply);
	s = stats(b);
	journal = journal_listing(b);
	if (asprintf(&out, "tasks %d reports %d records %lld fsyncs %lld "
	    "used %lld\n%s\n%s\n%s", harness_count_tasks(b),
	    harness_count_reports(b), (long long)harness_int(s,
	    "journal_records"), (long long)harness_int(s, "journal_fsyncs"),
	    (long long)harness_int(s, "table_used"), sub, journal,
	    file != NULL ? file : "(no file)") == -1)
		fail();
	text = out;
	json_decref(s);
	free(journal);
	free(sub);
	free(file);
	return text;
}

static void
diagnose_reserved_without_file(void **state)
{
	struct broker	*b = *state;
	json_t		*sub, *reply, *entry, *retry;
	char		*before, *after;

	sub = crash_one_submission(b, "after_reserve_durable", "dg-1",
	    "Diagnose me");
	before = observable(b, "dg-1");

	/* Threshold 0: anything older than now is stalled. */
	reply = diagnose(b, 0);
	entry = only_entry(reply, 1, 0, 0);
	assert_string_equal(harness_str(entry, "client_submission_id"), "dg-1");
	assert_string_equal(harness_str(entry, "state"), "reserved");
	assert_true(harness_int(entry, "age_ms") >= 0);
	assert_string_equal(harness_str(entry, "task_id"), harness_str(sub,
	    "task_id"));
	assert_string_equal(harness_str(entry, "task_path"), harness_str(sub,
	    "task_path"));
	harness_assert_bool(entry, "task_exists", 0);
	assert_null_member(entry, "request_digest_matches");
	assert_null_member(entry, "file_digest_matches");
	harness_assert_bool(entry, "stalled", 1);
	json_decref(reply);

	reply = diagnose(b, TEST_NEVER_STALE_MS);
	entry = only_entry(reply, 1, 0, 0);
	harness_assert_bool(entry, "stalled", 0);
	json_decref(reply);
	/* The default threshold is 30 s; this reservation is younger. */
	reply = diagnose(b, -1);
	entry = only_entry(reply, 1, 0, 0);
	harness_assert_bool(entry, "stalled", 0);
	json_decref(reply);

	/* Three diagnoses later, nothing moved. */
	after = observable(b, "dg-1");
	assert_string_equal(before, after);
	free(before);
	free(after);
	assert_int_equal(harness_count_tasks(b), 0);

	/* The caller's retry finishes it; diagnose has nothing left. */
	retry = write_task(b, "dg-1", "Diagnose me");
	assert_created(retry, 1);
	json_decref(retry);
	reply = diagnose(b, 0);
	assert_int_equal(json_array_size(json_object_get(reply, "entries")),
	    0);
	assert_int_equal(harness_int(json_object_get(reply, "counts"),
	    "reserved"), 0);
	assert_int_equal(harness_int(json_object_get(reply, "counts"),
	    "task_created"), 0);
	assert_int_equal(harness_int(json_object_get(reply, "counts"),
	    "committed"), 1);
	json_decref(reply);
	json_decref(sub);
	harness_finish(b);
}

static void
diagnose_foreign_file_at_reserved_path(void **state)
{
	struct broker	*b = *state;
	json_t		*sub, *reply, *entry, *retry;
	char		 foreign[1024], *before, *after, *data;
	const char	*task_id;

	sub = crash_one_submission(b, "after_reserve_durable", "dg-2",
	    "Mine");
	task_id = harness_str(sub, "task_id");
	/* While the broker is down, another FCoP writer takes the name. */
	harness_kill(b);
	snprintf(foreign, sizeof foreign, "---\nprotocol: \"fcop\"\n"
	    "version: 1\ntype: \"TASK\"\ntask_id: \"%s\"\nsender: \"PM\"\n"
	    "recipient: \"DEV\"\nsubject: \"Somebody else's\"\n"
	    "client_submission_id: \"dg-2\"\n"
	    "digest_schema: \"write-task-v1\"\nrequest_digest: \""
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "\"\n---\nNot idem's.\n", task_id);
	assert_int_equal(harness_write(b, harness_str(sub, "task_path"),
	    foreign), 0);
	harness_must_start(b, NULL, NULL);
	before = observable(b, "dg-2");

	reply = diagnose(b, 0);
	entry = only_entry(reply, 1, 0, 0);
	assert_string_equal(harness_str(entry, "state"), "reserved");
	harness_assert_bool(entry, "task_exists", 1);
	harness_assert_bool(entry, "request_digest_matches", 0);
	assert_null_member(entry, "file_digest_matches");
	json_decref(reply);
	after = observable(b, "dg-2");
	assert_string_equal(before, after);
	free(after);

	/* The retry refuses to adopt it, and leaves it as it was. */
	retry = write_task(b, "dg-2", "Mine");
	harness_assert_bool(retry, "ok", 0);
	assert_string_equal(harness_str(json_object_get(retry, "error"),
	    "reason"), "target_mismatch");
	json_decref(retry);
	data = harness_read(b, harness_str(sub, "task_path"));
	assert_string_equal(data, foreign);
	free(data);
	assert_int_equal(harness_count_tasks(b), 1);
	reply = diagnose(b, 0);
	entry = only_entry(reply, 1, 0, 0);
	harness_assert_bool(entry, "request_digest_matches", 0);
	json_decref(reply);
	free(before);
	json_decref(sub);
	harness_finish(b);
}

static void
diagnose_task_created(void **state)
{
	struct broker	*b = *state;
	json_t		*sub, *reply, *entry;
	char		*before, *after;

	sub = crash_one_submission(b, "after_task_created_durable", "dg-3",
	    "Written, not committed");
	before = observable(b, "dg-3");
	reply = diagnose(b, TEST_NEVER_STALE_MS);
	entry = only_entry(reply, 0, 1, 0);
	assert_string_equal(harness_str(entry, "state"), "task_created");
	assert_string_equal(harness_str(entry, "task_id"), harness_str(sub,
	    "task_id"));
	harness_assert_bool(entry, "task_exists", 1);
	harness_assert_bool(entry, "request_digest_matches", 1);
	harness_assert_bool(entry, "file_digest_matches", 1);
	harness_assert_bool(entry, "stalled", 0);
	json_decref(reply);
	after = observable(b, "dg-3");
	assert_string_equal(before, after);
	free(before);
	free(after);
	json_decref(sub);
	harness_finish(b);
}

/* ---- stats --------------------------------------------------------------- */

static const char *const stat_keys[] = {
	"created", "reused", "conflict", "legacy_created", "errors",
	"journal_records", "journal_fsyncs", "table_used", "table_capacity",
	"workers", "worker_restarts", "uptime_ms", NULL
};

/* now - before for each key, checked against the expected deltas. */
static void
assert_deltas(json_t *before, json_t *now, const char *const *keys,
    const json_int_t *deltas)
{
	int	i;

	for (i = 0; keys[i] != NULL; i++) {
		if (harness_int(now, keys[i]) - harness_int(before, keys[i]) !=
		    deltas[i])
			fail_msg("stats %s moved by %lld, expected %lld",
			    keys[i], (long long)(harness_int(now, keys[i]) -
			    harness_int(before, keys[i])),
			    (long long)deltas[i]);
	}
}

static const char *const moving_keys[] = {
	"created", "reused", "conflict", "legacy_created", "errors",
	"table_used", "reports_created", "reports_deduplicated", NULL
};

/* Do one thing, and check that exactly the expected counters moved. */
static json_t *
step(struct broker *b, json_t *before, const char *line,
    const json_int_t *deltas)
{
	json_t	*now;

	json_decref(call(b, line));
	now = stats(b);
	assert_deltas(before, now, moving_keys, deltas);
	json_decref(before);
	return now;
}

static void
stats_counters_move(void **state)
{
	static const char *const args[] = {
		"--capacity", TEST_CAPACITY, NULL
	};
	/* created reused conflict legacy errors used reports dedup */
	static const json_int_t d_created[] = { 1, 0, 0, 0, 0, 1, 0, 0 };
	static const json_int_t d_reused[] = { 0, 1, 0, 0, 0, 0, 0, 0 };
	static const json_int_t d_conflict[] = { 0, 0, 1, 0, 0, 0, 0, 0 };
	static const json_int_t d_legacy[] = { 0, 0, 0, 1, 0, 0, 0, 0 };
	static const json_int_t d_error[] = { 0, 0, 0, 0, 1, 0, 0, 0 };
	static const json_int_t d_report[] = { 0, 0, 0, 0, 0, 1, 1, 0 };
	static const json_int_t d_report_dedup[] = { 0, 0, 0, 0, 0, 0, 0, 1 };
	struct broker	*b = *state;
	json_t		*s, *first, *reply;
	char		 line[512], task_id[96];
	json_int_t	 records, uptime;
	int		 i;

	harness_must_start(b, args, NULL);
	s = stats(b);
	for (i = 0; stat_keys[i] != NULL; i++)
		(void)harness_int(s, stat_keys[i]);
	assert_int_equal(harness_int(s, "created"), 0);
	assert_int_equal(harness_int(s, "table_used"), 0);
	assert_int_equal(harness_int(s, "table_capacity"), atoi(TEST_CAPACITY));
	assert_int_equal(harness_int(s, "workers"), 2);
	assert_int_equal(harness_int(s, "worker_restarts"), 0);
	assert_true(harness_int(s, "uptime_ms") >= 0);
	records = harness_int(s, "journal_records");
	uptime = harness_int(s, "uptime_ms");
	first = json_incref(s);

	s = step(b, s, "{\"op\":\"write_task\",\"client_submission_id\":"
	    "\"st-1\",\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"Count me\"}}", d_created);
	/* What the journal holds: reserved, task_created, committed. */
	assert_int_equal(harness_int(s, "journal_records"), records + 3);
	assert_true(harness_int(s, "journal_fsyncs") > 0);
	s = step(b, s, "{\"op\":\"write_task\",\"client_submission_id\":"
	    "\"st-1\",\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"Count me\"}}", d_reused);
	s = step(b, s, "{\"op\":\"write_task\",\"client_submission_id\":"
	    "\"st-1\",\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
	    "\"subject\":\"Count me twice\"}}", d_conflict);
	s = step(b, s, "{\"op\":\"write_task\",\"task\":{\"sender\":\"PM\","
	    "\"recipient\":\"DEV\",\"subject\":\"Legacy\"}}", d_legacy);
	s = step(b, s, "{\"op\":\"write_task\",\"task\":{\"sender\":\"PM\"}}",
	    d_error);
	/* Read-only ops count nothing. */
	s = step(b, s, "{\"op\":\"get_submission\",\"client_submission_id\":"
	    "\"st-1\"}", (const json_int_t[]){ 0, 0, 0, 0, 0, 0, 0, 0 });
	s = step(b, s, "{\"op\":\"diagnose\"}",
	    (const json_int_t[]){ 0, 0, 0, 0, 0, 0, 0, 0 });

	reply = get_submission(b, "st-1");
	snprintf(task_id, sizeof task_id, "%s", harness_str(json_object_get(
	    json_object_get(reply, "submission"), "receipt"), "task_id"));
	json_decref(reply);
	snprintf(line, sizeof line, "{\"op\":\"write_report\",\"task_id\":"
	    "\"%s\",\"client_submission_id\":\"st-r\",\"report\":{\"sender\":"
	    "\"DEV\"}}", task_id);
	s = step(b, s, line, d_report);
	s = step(b, s, line, d_report_dedup);

	assert_true(harness_int(s, "journal_records") > harness_int(first,
	    "journal_records"));
	assert_true(harness_int(s, "journal_fsyncs") >= 1);
	assert_true(harness_int(s, "uptime_ms") >= uptime);
	assert_int_equal(harness_int(s, "workers"), 2);
	assert_int_equal(harness_int(s, "worker_restarts"), 0);
	assert_int_equal(harness_int(s, "table_capacity"), atoi(TEST_CAPACITY));
	json_decref(first);
	json_decref(s);
	harness_finish(b);
}

/* Every error reply counts once in "errors", whatever stage refused it. */
static void
stats_errors_count_every_error_reply(void **state)
{
	static const struct {
		const char	*what;
		const char	*line;
	} errors[] = {
		{ "invalid_json", "{\"op\":" },
		{ "invalid_utf8", "{\"op\":\"hello\",\"x\":\"\xff\"}" },
		{ "not an object", "[]" },
		{ "id an object", "{\"op\":\"hello\",\"id\":{}}" },
		{ "op missing", "{\"id\":1}" },
		{ "unknown_op", "{\"op\":\"frobnicate\"}" },
		{ "invalid_request", "{\"op\":\"stats\",\"x\":1}" },
		{ "task_not_found", "{\"op\":\"write_report\",\"task_id\":"
		    "\"TASK-20000101-001-PM-to-DEV\",\"report\":"
		    "{\"sender\":\"DEV\"}}" },
	};
	struct broker	*b = *state;
	json_t		*before, *now, *reply;
	size_t		 i;
	int		 wrong = 0;

	harness_must_start(b, NULL, NULL);
	before = stats(b);
	for (i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		reply = call(b, errors[i].line);
		harness_assert_bool(reply, "ok", 0);
		json_decref(reply);
		now = stats(b);
		if (harness_int(now, "errors") != harness_int(before,
		    "errors") + 1) {
			fprintf(stderr, "FAIL: %s moved errors by %lld\n",
			    errors[i].what, (long long)(harness_int(now,
			    "errors") - harness_int(before, "errors")));
			wrong++;
		}
		json_decref(before);
		before = now;
	}
	json_decref(before);
	assert_int_equal(wrong, 0);
	harness_finish(b);
}

/*
 * The stats reply has exactly the members of libclient/stats.h's table,
 * each an integer, in the table's order: a stat idemd sends that the
 * table lacks (so idemctl, Prometheus and doc/metrics.md would not know
 * it), or a row idemd does not send, fails here.  ("store" is only sent
 * with --store postgresql, which tests/cluster covers.)
 */
static void
stats_members_are_the_table(void **state)
{
	struct broker	*b = *state;
	json_t		*s, *value;
	const char	*key;
	size_t		 i = 0, n;

	harness_must_start(b, NULL, NULL);
	s = stats(b);
	json_object_del(s, "ok");
	json_object_del(s, "id");
	json_object_foreach(s, key, value) {
		for (n = 0; n < IDEM_STAT_COUNT; n++) {
			if (strcmp(idem_stat_table[n].name, key) == 0)
				break;
		}
		if (n == IDEM_STAT_COUNT)
			fail_msg("idemd's stats has \"%s\", which "
			    "libclient/stats.h's table lacks", key);
		if (n != i)
			fail_msg("stats member %zu is \"%s\", the table's is "
			    "\"%s\"", i, key, idem_stat_table[i].name);
		if (!json_is_integer(value) || json_integer_value(value) < 0)
			fail_msg("stats \"%s\" is not a count", key);
		i++;
	}
	if (i != IDEM_STAT_COUNT)
		fail_msg("idemd's stats lacks \"%s\", a row of the table",
		    idem_stat_table[i].name);
	json_decref(s);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(report_created_then_deduplicated),
		T(report_normalized_equal_is_deduplicated),
		T(report_same_id_other_content_conflicts),
		T(report_without_id_writes_each_time),
		T(report_recipient_defaults_to_task_sender),
		T(report_ids_are_per_task),
		T(report_on_a_moved_task),
		T(report_dedup_survives_kill9),
		T(get_submission_committed_receipt_identical),
		T(get_submission_not_found),
		T(get_submission_reserved_after_crash),
		T(get_submission_task_created_after_crash),
		T(diagnose_reserved_without_file),
		T(diagnose_foreign_file_at_reserved_path),
		T(diagnose_task_created),
		T(stats_counters_move),
		T(stats_errors_count_every_error_reply),
		T(stats_members_are_the_table),
	};

	signal(SIGPIPE, SIG_IGN);
	return FILTER_RUN(tests);
}
