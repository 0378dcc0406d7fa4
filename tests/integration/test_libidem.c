/* SPDX-License-Identifier: ISC */
/*
 * test_libidem.c: the calls of idem.h against a real idemd over its
 * socket: write_report, hello, get_submission, the largest body,
 * diagnose after a crash, stats, and submission ids.  The retry helper
 * is test_libidem_retry.c's, libidem against stand-in brokers (the bytes
 * it sends, the lease keeper) test_libidem_standin.c's, effect answers
 * decoded without a tree test_libidem_decode.c's; the fixtures they
 * share are libidem_test.c.  Each test runs its own broker on a fresh
 * root and judges by what is authoritative: the files on disk and the
 * receipts.  Nothing here sleeps to synchronise; it waits on replies or
 * on the broker's exit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/libidem_test.h"
#include "protocol.h"

#define TEST_ID_DRAWS		10000

/* Create a task that must be created; its receipt goes to r. */
static void
create_task(struct idem_conn *c, const char *id, const char *subject,
    struct idem_write_result *r)
{
	struct idem_task	t;
	struct idem_error	err;

	make_task(&t, subject);
	if (idem_write_task(c, id, &t, r, &err) != 0)
		fail_msg("write_task %s: %s", id, err.message);
	assert_int_equal(r->disposition, IDEM_CREATED);
}

/* Whether the file has a front-matter line "key: value" exactly. */
static int
file_has_line(const struct broker *b, const char *relpath, const char *key,
    const char *value)
{
	char	 line[512], *data;
	int	 found;

	data = harness_read(b, relpath);
	assert_non_null(data);
	snprintf(line, sizeof line, "\n%s: %s\n", key, value);
	found = strstr(data, line) != NULL;
	free(data);
	return found;
}

/* ---- write_report ------------------------------------------------------ */

static void
write_report_created_deduplicated_conflict(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_write_result w;
	struct idem_report_result r, again, other;
	struct idem_report	 report = { .sender = "DEV", .status = "done",
				    .body = "Fixed in abc123.\n" };
	struct idem_report	 canonical;
	struct idem_error	 err;
	char			 digest[IDEM_DIGEST_HEX_SIZE], quoted[80];
	char			 suffix[32];

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	create_task(c, "task-for-report", "Fix login", &w);

	/* First call: a REPORT, addressed by default to the task's sender. */
	if (idem_write_report(c, w.receipt.task_id, "report-1", &report, &r,
	    &err) != 0)
		fail_msg("write_report: %s", err.message);
	assert_int_equal(r.disposition, IDEM_CREATED);
	assert_int_equal(r.deduplicated, 0);
	assert_int_equal(r.recovered, 0);
	assert_memory_equal(r.report_id, "REPORT-", 7);
	snprintf(suffix, sizeof suffix, "-DEV-to-PM");
	assert_string_equal(r.report_id + strlen(r.report_id) -
	    strlen(suffix), suffix);
	assert_memory_equal(r.report_path, "reports/", 8);
	assert_string_equal(r.report_path + 8 + strlen(r.report_id), ".md");
	assert_true(harness_exists(b, r.report_path));
	/* The file carries the write-report-v1 digest the library computes. */
	canonical = report;
	canonical.recipient = "PM";
	assert_int_equal(idem_report_digest(w.receipt.task_id, &canonical,
	    digest), 0);
	snprintf(quoted, sizeof quoted, "\"%s\"", digest);
	assert_true(file_has_line(b, r.report_path, "request_digest", quoted));

	/* The same content again: the first report, no new file. */
	if (idem_write_report(c, w.receipt.task_id, "report-1", &report, &again,
	    &err) != 0)
		fail_msg("write_report again: %s", err.message);
	assert_int_equal(again.disposition, IDEM_REUSED);
	assert_int_equal(again.deduplicated, 1);
	assert_string_equal(again.report_id, r.report_id);
	assert_string_equal(again.report_path, r.report_path);
	assert_int_equal(harness_count_reports(b), 1);

	/* The same id, other content: conflict, still one file. */
	report.status = "in_progress";
	assert_int_equal(idem_write_report(c, w.receipt.task_id, "report-1",
	    &report, &other, &err), 0);
	assert_int_equal(other.disposition, IDEM_CONFLICT);
	assert_int_equal(err.code, IDEM_E_CONFLICT);
	assert_int_equal(err.retryable, 0);
	assert_string_equal(err.reason, "digest_mismatch");
	assert_string_equal(other.existing_report_id, r.report_id);
	assert_int_equal(harness_count_reports(b), 1);

	/* Without an id every call writes a new REPORT. */
	assert_int_equal(idem_write_report(c, w.receipt.task_id, NULL, &report,
	    &other, &err), 0);
	assert_int_equal(other.disposition, IDEM_CREATED);
	assert_int_equal(idem_write_report(c, w.receipt.task_id, NULL, &report,
	    &again, &err), 0);
	assert_int_equal(again.disposition, IDEM_CREATED);
	assert_string_not_equal(other.report_id, again.report_id);
	assert_int_equal(harness_count_reports(b), 3);
	idem_close(c);
	harness_finish(b);
}

static void
write_report_errors(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_report_result r;
	struct idem_report	 report = { .sender = "DEV" };
	struct idem_error	 err;
	char			 date[9], task_id[64];

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	harness_today(date);
	snprintf(task_id, sizeof task_id, "TASK-%s-001-PM-to-DEV", date);
	assert_int_equal(idem_write_report(c, task_id, "r", &report, &r, &err),
	    -1);
	assert_int_equal(err.code, IDEM_E_TASK_NOT_FOUND);
	assert_int_equal(r.disposition, IDEM_DISPOSITION_NONE);

	report.sender = "dev";
	assert_int_equal(idem_write_report(c, task_id, "r", &report, &r, &err),
	    -1);
	assert_int_equal(err.code, IDEM_E_INVALID_REQUEST);
	assert_string_equal(err.field, "report.sender");

	assert_int_equal(idem_write_report(c, NULL, "r", &report, &r, &err),
	    -1);
	assert_int_equal(err.code, IDEM_E_ARGUMENT);
	assert_int_equal(harness_count_reports(b), 0);
	/* Errors leave the connection usable. */
	report.sender = "DEV";
	assert_int_equal(idem_write_report(c, task_id, "r", &report, &r, &err),
	    -1);
	assert_int_equal(err.code, IDEM_E_TASK_NOT_FOUND);
	idem_close(c);
	harness_finish(b);
}

/* ---- get_submission ------------------------------------------------------ */

/*
 * idem_hello: the broker's name, version and protocol, exactly as the
 * raw hello reply gives them; a connection whose broker is gone fails
 * with a transport error, its fields cleared.
 */
static void
hello_names_the_broker(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_hello	 h;
	struct idem_error	 err;
	json_t			*raw;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	assert_int_equal(idem_hello(c, &h, &err), 0);
	assert_int_equal(err.code, IDEM_E_NONE);
	raw = harness_call_once(b, json_pack("{s:s}", "op", "hello"));
	assert_non_null(raw);
	assert_string_equal(h.server, harness_str(raw, "server"));
	assert_string_equal(h.server, "idemd");
	assert_string_equal(h.version, harness_str(raw, "version"));
	assert_true(h.version[0] != '\0');
	assert_int_equal(h.protocol,
	    json_integer_value(json_object_get(raw, "protocol")));
	assert_true(h.protocol >= 1);
	json_decref(raw);
	/* Twice on one connection: the same answer. */
	assert_int_equal(idem_hello(c, &h, &err), 0);
	assert_string_equal(h.server, "idemd");

	harness_kill(b);
	assert_int_equal(idem_hello(c, &h, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
	assert_true(err.message[0] != '\0');
	assert_string_equal(h.server, "");
	assert_int_equal(h.protocol, 0);
	idem_close(c);
	harness_finish(b);
}

static void
get_submission_found_and_not_found(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_write_result w, again;
	struct idem_submission	 s;
	struct idem_task	 t;
	struct idem_error	 err;
	char			 digest[IDEM_DIGEST_HEX_SIZE];
	int			 found = -1;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	assert_int_equal(idem_get_submission(c, "never-sent", &found, &s,
	    &err), 0);
	assert_int_equal(found, 0);
	assert_int_equal(s.has_receipt, 0);

	create_task(c, "get-1", "Fix login", &w);
	make_task(&t, "Fix login");
	assert_int_equal(idem_task_digest(&t, digest), 0);
	assert_int_equal(idem_get_submission(c, "get-1", &found, &s, &err), 0);
	assert_int_equal(found, 1);
	assert_string_equal(s.client_submission_id, "get-1");
	assert_int_equal(s.state, IDEM_STATE_COMMITTED);
	assert_string_equal(s.state_name, "committed");
	assert_string_equal(s.digest_schema, "write-task-v1");
	assert_string_equal(s.request_digest, digest);
	assert_string_equal(s.task_id, w.receipt.task_id);
	assert_string_equal(s.task_path, w.receipt.task_path);
	assert_int_equal(strlen(s.reserved_at), 24);	/* ...T12:00:00.123Z */
	assert_int_equal(strlen(s.updated_at), 24);
	assert_true(strcmp(s.reserved_at, s.updated_at) <= 0);
	assert_int_equal(s.has_receipt, 1);
	assert_string_equal(s.receipt.raw, w.receipt.raw);
	assert_string_equal(s.receipt.file_digest, w.receipt.file_digest);

	/* A reused receipt is the same bytes again. */
	assert_int_equal(idem_write_task(c, "get-1", &t, &again, &err), 0);
	assert_int_equal(again.disposition, IDEM_REUSED);
	assert_string_equal(again.receipt.raw, s.receipt.raw);

	/* Read-only: asking changed nothing. */
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(idem_get_submission(c, NULL, &found, &s, &err), -1);
	assert_int_equal(err.code, IDEM_E_ARGUMENT);
	assert_int_equal(idem_get_submission(c, "has space", &found, &s, &err),
	    -1);
	assert_int_equal(err.code, IDEM_E_INVALID_REQUEST);
	assert_int_equal(found, 0);
	idem_close(c);
	harness_finish(b);
}

/* ---- the largest request ------------------------------------------------- */

/*
 * A body of the largest size the contract allows makes a request line
 * of over half a MiB, more than a Unix socket buffers at once: libidem
 * sends it whole with its newline, the broker reads it across many
 * reads, and the TASK file holds every byte of the body.
 */
static void
largest_body_sent_whole(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_write_result w;
	struct idem_task	 t;
	struct idem_error	 err;
	char			*body, *file;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	body = malloc(IDEM_MAX_BODY_BYTES + 1);
	assert_non_null(body);
	memset(body, 'b', IDEM_MAX_BODY_BYTES);
	body[IDEM_MAX_BODY_BYTES] = '\0';
	make_task(&t, "The largest body");
	t.body = body;
	assert_int_equal(idem_write_task(c, "largest/1", &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_CREATED);
	file = harness_read(b, w.receipt.task_path);
	assert_non_null(file);
	assert_non_null(strstr(file, body));
	free(file);
	/* The retry sends it all again and gets the same receipt. */
	assert_int_equal(idem_write_task(c, "largest/1", &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_REUSED);
	free(body);
	idem_close(c);
	harness_finish(b);
}

/* ---- diagnose ------------------------------------------------------------ */

/* Start with IDEM_CRASH_AT=point, send one write that kills it, restart. */
static void
crash_one_write(struct broker *b, const char *point, const char *id)
{
	struct idem_conn	*c;
	struct idem_write_result w;
	struct idem_task	 t;
	struct idem_error	 err;
	char			 env[64];
	const char		*envp[] = { env, NULL };

	snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", point);
	harness_must_start(b, NULL, envp);
	c = connect_to(b);
	make_task(&t, "Fix login");
	assert_int_equal(idem_write_task(c, id, &t, &w, &err), -1);
	assert_int_equal(err.code, IDEM_E_TRANSPORT);
	assert_int_equal(err.retryable, 1);
	idem_close(c);
	harness_wait_dead(b);
	harness_must_start(b, NULL, NULL);
}

static void
diagnose_after_crash_lists_reserved(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_diagnosis	 d;
	struct idem_write_result w;
	struct idem_task	 t;
	struct idem_error	 err;
	const struct idem_diagnose_entry *e;

	crash_one_write(b, "after_reserve_durable", "crashed-1");
	c = connect_to(b);
	assert_int_equal(idem_diagnose(c, -1, &d, &err), 0);
	assert_int_equal(d.count, 1);
	assert_int_equal(d.reserved, 1);
	assert_int_equal(d.task_created, 0);
	assert_int_equal(d.committed, 0);
	e = &d.entries[0];
	assert_string_equal(e->client_submission_id, "crashed-1");
	assert_int_equal(e->state, IDEM_STATE_RESERVED);
	assert_string_equal(e->state_name, "reserved");
	assert_true(e->age_ms >= 0);
	assert_memory_equal(e->task_id, "TASK-", 5);
	assert_string_equal(e->task_id + strlen(e->task_id) - 10,
	    "-PM-to-DEV");
	assert_memory_equal(e->task_path, "_lifecycle/inbox/", 17);
	assert_int_equal(e->task_exists, IDEM_TRIBOOL_FALSE);
	assert_int_equal(e->request_digest_matches, IDEM_TRIBOOL_NULL);
	assert_int_equal(e->file_digest_matches, IDEM_TRIBOOL_NULL);
	assert_int_equal(e->in_flight, IDEM_TRIBOOL_FALSE);
	assert_int_equal(e->stalled, 0);	/* under the 30 s default */
	idem_diagnosis_free(&d);
	assert_null(d.entries);

	/* Diagnostics never repair: no file appeared. */
	assert_int_equal(harness_count_tasks(b), 0);

	/* A threshold the entry is past marks it stalled. */
	assert_int_equal(idem_diagnose(c, 0, &d, &err), 0);
	assert_int_equal(d.count, 1);
	assert_int_equal(d.entries[0].stalled, d.entries[0].age_ms > 0);
	idem_diagnosis_free(&d);
	assert_int_equal(idem_diagnose(c, -2, &d, &err), -1);
	assert_int_equal(err.code, IDEM_E_ARGUMENT);

	/* The retry finishes it: nothing left to diagnose. */
	make_task(&t, "Fix login");
	assert_int_equal(idem_write_task(c, "crashed-1", &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_CREATED);
	assert_int_equal(w.recovered, 1);
	assert_int_equal(idem_diagnose(c, -1, &d, &err), 0);
	assert_int_equal(d.count, 0);
	assert_null(d.entries);
	assert_int_equal(d.reserved, 0);
	assert_int_equal(d.committed, 1);
	idem_diagnosis_free(&d);
	idem_close(c);
	harness_finish(b);
}

static void
diagnose_after_crash_lists_task_created(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_diagnosis	 d;
	struct idem_error	 err;
	const struct idem_diagnose_entry *e;

	crash_one_write(b, "after_task_created_durable", "crashed-2");
	c = connect_to(b);
	assert_int_equal(idem_diagnose(c, 3600000, &d, &err), 0);
	assert_int_equal(d.count, 1);
	assert_int_equal(d.task_created, 1);
	e = &d.entries[0];
	assert_int_equal(e->state, IDEM_STATE_TASK_CREATED);
	assert_int_equal(e->task_exists, IDEM_TRIBOOL_TRUE);
	assert_int_equal(e->request_digest_matches, IDEM_TRIBOOL_TRUE);
	assert_int_equal(e->file_digest_matches, IDEM_TRIBOOL_TRUE);
	assert_int_equal(e->stalled, 0);
	assert_true(harness_exists(b, e->task_path));
	idem_diagnosis_free(&d);
	idem_close(c);
	harness_finish(b);
}

/* ---- stats --------------------------------------------------------------- */

static void
stats_counters_move(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_stats	 s0, s1;
	struct idem_write_result w;
	struct idem_report_result r;
	struct idem_report	 report = { .sender = "DEV" };
	struct idem_task	 t;
	struct idem_error	 err;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	assert_int_equal(idem_stats(c, &s0, &err), 0);
	assert_int_equal(s0.created, 0);
	assert_true(s0.table_capacity > 0);
	assert_true(s0.workers >= 1);
	assert_true(s0.uptime_ms >= 0);

	create_task(c, "stats-1", "Fix login", &w);
	make_task(&t, "Fix login");
	assert_int_equal(idem_write_task(c, "stats-1", &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_REUSED);
	t.subject = "Fix logout";
	assert_int_equal(idem_write_task(c, "stats-1", &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_CONFLICT);
	assert_int_equal(idem_write_task(c, NULL, &t, &w, &err), 0);
	assert_int_equal(w.disposition, IDEM_CREATED);
	assert_int_equal(idem_write_report(c, w.receipt.task_id, "sr", &report,
	    &r, &err), 0);
	t.sender = "pm";
	assert_int_equal(idem_write_task(c, "stats-2", &t, &w, &err), -1);

	assert_int_equal(idem_stats(c, &s1, &err), 0);
	assert_int_equal(s1.created, s0.created + 1);
	assert_int_equal(s1.reused, s0.reused + 1);
	assert_int_equal(s1.conflict, s0.conflict + 1);
	assert_int_equal(s1.legacy_created, s0.legacy_created + 1);
	assert_true(s1.errors >= s0.errors + 1);
	assert_true(s1.journal_records > s0.journal_records);
	assert_true(s1.journal_fsyncs > s0.journal_fsyncs);
	assert_true(s1.table_used > s0.table_used);
	assert_int_equal(s1.table_capacity, s0.table_capacity);
	assert_true(s1.uptime_ms >= s0.uptime_ms);
	/* This broker sends the report counters (-1 would mean absent). */
	assert_int_equal(s1.reports_created, s0.reports_created + 1);
	assert_int_equal(s1.reports_deduplicated, s0.reports_deduplicated);
	idem_close(c);
	harness_finish(b);
}

/* ---- Submission ids ------------------------------------------------------ */

static int
compare_ids(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void
submission_ids_unique_and_valid(void **state)
{
	/* Static: a failed assertion leaves the test without freeing. */
	static char		 ids[TEST_ID_DRAWS][IDEM_SUBMISSION_ID_SIZE];
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_write_result w;
	size_t			 i, j;
	unsigned char		 ch;

	for (i = 0; i < TEST_ID_DRAWS; i++) {
		assert_int_equal(idem_submission_id_new(ids[i]), 0);
		assert_int_equal(strlen(ids[i]), IDEM_SUBMISSION_ID_SIZE - 1);
		for (j = 0; ids[i][j] != '\0'; j++) {
			ch = (unsigned char)ids[i][j];
			/* Printable ASCII, as the wire wants, and URL-safe. */
			assert_true(ch >= 0x21 && ch <= 0x7e);
			assert_true((ch >= 'A' && ch <= 'Z') ||
			    (ch >= 'a' && ch <= 'z') ||
			    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_');
		}
	}
	qsort(ids, TEST_ID_DRAWS, sizeof ids[0], compare_ids);
	for (i = 1; i < TEST_ID_DRAWS; i++)
		assert_string_not_equal(ids[i - 1], ids[i]);

	/* The broker takes one as it is. */
	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	create_task(c, ids[0], "Fix login", &w);
	assert_string_equal(w.receipt.client_submission_id, ids[0]);
	idem_close(c);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(write_report_created_deduplicated_conflict),
		T(write_report_errors),
		T(hello_names_the_broker),
		T(get_submission_found_and_not_found),
		T(largest_body_sent_whole),
		T(diagnose_after_crash_lists_reserved),
		T(diagnose_after_crash_lists_task_created),
		T(stats_counters_move),
		T(submission_ids_unique_and_valid),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
