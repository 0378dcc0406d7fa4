/* SPDX-License-Identifier: ISC */
/*
 * test_libidem.c: the calls of idem.h against a real idemd over its
 * socket: write_report, get_submission, diagnose, stats, submission ids
 * and the retry helper, including a broker killed in the middle of the
 * helper's request.  Each test runs its own broker on a fresh root and
 * judges by what is authoritative: the files on disk and the receipts;
 * one, about the bytes libidem sends, has a stand-in record them;
 * another, idem_effect_run's keeper, a stand-in that answers late.
 * Nothing here sleeps to synchronise; it waits on replies, on a thread
 * or on the broker's exit.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
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
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "protocol.h"

/* A test that takes longer than this is hung: the watchdog ends it. */
#define TEST_BODY		"Steps:\n1. reproduce\n2. fix\n"
#define TEST_ID_DRAWS		10000
/* The retry helper may wait this long for a broker to come back. */
#define TEST_RETRY_DEADLINE_MS	30000

/* ---- Fixtures and helpers ------------------------------------------------ */

static struct idem_conn *
connect_to(struct broker *b)
{
	struct idem_conn	*c;

	c = harness_connect(b);
	assert_non_null(c);
	return c;
}

static void
make_task(struct idem_task *t, const char *subject)
{
	memset(t, 0, sizeof *t);
	t->sender = "PM";
	t->recipient = "DEV";
	t->subject = subject;
	t->body = TEST_BODY;
}

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

/* ---- The retry helper ---------------------------------------------------- */

struct retry_call {
	const char		*socket;
	const char		*id;
	struct idem_task	 task;
	struct idem_retry_policy policy;
	struct idem_write_result result;
	struct idem_error	 err;
	int			 rc;
};

static void *
retry_thread(void *arg)
{
	struct retry_call	*rc = arg;

	rc->rc = idem_write_task_retry(rc->socket, rc->id, &rc->task,
	    &rc->policy, &rc->result, &rc->err);
	return NULL;
}

static void
retry_call_init(struct retry_call *rc, struct broker *b, const char *id)
{
	memset(rc, 0, sizeof *rc);
	rc->socket = b->socket;
	rc->id = id;
	make_task(&rc->task, "Fix login");
	rc->policy.max_attempts = 1000;
	rc->policy.base_delay_ms = 10;
	rc->policy.max_delay_ms = 200;
	rc->policy.deadline_ms = TEST_RETRY_DEADLINE_MS;
}

/*
 * The broker dies with the TASK file in place but nothing committed; the
 * helper reconnects to the restarted broker with the same id, which
 * adopts the file: one TASK, reused, recovered.
 */
static void
retry_survives_broker_killed_mid_request(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc, again;
	pthread_t		 thread;
	const char		*env[] = {
		"IDEM_CRASH_AT=after_task_file_linked", NULL
	};

	harness_must_start(b, NULL, env);
	retry_call_init(&rc, b, "retry-1");
	assert_int_equal(pthread_create(&thread, NULL, retry_thread, &rc), 0);
	harness_wait_dead(b);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_must_start(b, NULL, NULL);
	assert_int_equal(pthread_join(thread, NULL), 0);

	if (rc.rc != 0)
		fail_msg("retry: %s (after %u tries)", rc.err.message,
		    rc.result.attempts);
	assert_int_equal(rc.result.disposition, IDEM_REUSED);
	assert_int_equal(rc.result.recovered, 1);
	assert_int_equal(rc.result.action_taken, 0);
	assert_true(rc.result.attempts >= 2);
	assert_string_equal(rc.result.receipt.client_submission_id, "retry-1");
	assert_int_equal(harness_count_tasks(b), 1);

	/* Once committed, every later call gets the same receipt. */
	retry_call_init(&again, b, "retry-1");
	assert_int_equal(idem_write_task_retry(b->socket, "retry-1",
	    &again.task, NULL, &again.result, &again.err), 0);
	assert_int_equal(again.result.disposition, IDEM_REUSED);
	assert_int_equal(again.result.recovered, 0);
	assert_int_equal(again.result.attempts, 1);
	assert_string_equal(again.result.receipt.raw, rc.result.receipt.raw);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* Only the worker dies; the master replaces it and the broker serves on. */
static void
retry_survives_worker_killed_mid_request(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	const char		*env[] = {
		"IDEM_CRASH_WORKER_AT=after_task_file_linked", NULL
	};

	harness_must_start(b, NULL, env);
	retry_call_init(&rc, b, "retry-2");
	rc.rc = idem_write_task_retry(rc.socket, rc.id, &rc.task, &rc.policy,
	    &rc.result, &rc.err);
	if (rc.rc != 0)
		fail_msg("retry: %s (after %u tries)", rc.err.message,
		    rc.result.attempts);
	assert_int_equal(rc.result.disposition, IDEM_REUSED);
	assert_int_equal(rc.result.recovered, 1);
	assert_true(rc.result.attempts >= 2);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

static void
retry_returns_non_retryable_at_once(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;

	harness_must_start(b, NULL, NULL);
	retry_call_init(&rc, b, "retry-3");
	rc.task.sender = "pm";		/* not an FCoP role code */
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_INVALID_REQUEST);
	assert_string_equal(rc.err.field, "task.sender");
	assert_int_equal(rc.err.retryable, 0);
	assert_int_equal(rc.result.attempts, 1);
	assert_int_equal(rc.result.disposition, IDEM_DISPOSITION_NONE);

	/* A conflict is an outcome, returned at once too. */
	rc.task.sender = "PM";
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), 0);
	assert_int_equal(rc.result.disposition, IDEM_CREATED);
	assert_int_equal(rc.result.attempts, 1);
	rc.task.subject = "Fix logout";
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), 0);
	assert_int_equal(rc.result.disposition, IDEM_CONFLICT);
	assert_int_equal(rc.err.code, IDEM_E_CONFLICT);
	assert_string_equal(rc.err.reason, "digest_mismatch");
	assert_int_equal(rc.result.attempts, 1);

	/* A legacy call is never retried: refused before any try. */
	assert_int_equal(idem_write_task_retry(rc.socket, NULL, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_ARGUMENT);
	assert_int_equal(rc.result.attempts, 0);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* No broker at all: the attempts cap and the deadline both end it. */
static void
retry_gives_up_without_broker(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	int64_t			 began;

	retry_call_init(&rc, b, "retry-4");
	rc.policy.max_attempts = 3;
	rc.policy.base_delay_ms = 1;
	rc.policy.max_delay_ms = 2;
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_int_equal(rc.err.retryable, 1);
	assert_int_equal(rc.result.attempts, 3);

	retry_call_init(&rc, b, "retry-4");
	rc.policy.max_delay_ms = 20;
	rc.policy.deadline_ms = 300;
	began = harness_now_ms();
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_true(rc.result.attempts > 1);
	assert_true(rc.result.attempts < rc.policy.max_attempts);
	/* Never sleeps past the deadline (the bound is generous). */
	assert_true(harness_now_ms() - began < 300 + 2000);
	harness_finish(b);
}

/*
 * A broker that takes the request and never answers (a stand-in that
 * does not even accept: the connection waits in its backlog): the wait
 * for the reply ends at the retry helper's deadline, not never.  The
 * reply is awaited in poll(2) (client.c, client_wait_readable), so the
 * deadline must bound the poll as it bounded the read.
 */
static void
retry_deadline_bounds_the_reply_wait(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	struct sockaddr_un	 sa;
	int64_t			 began, took;
	int			 fd;

	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/silent.sock", b->root) < sizeof sa.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd != -1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, 4), 0);
	retry_call_init(&rc, b, "retry-5");
	rc.socket = sa.sun_path;
	rc.policy.max_attempts = 1;
	rc.policy.deadline_ms = 300;
	began = harness_now_ms();
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	took = harness_now_ms() - began;
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_non_null(strstr(rc.err.message, "no reply before the deadline"));
	assert_int_equal(rc.result.attempts, 1);
	assert_true(took >= 250);
	assert_true(took < 300 + 2000);
	close(fd);
	harness_finish(b);
}

/*
 * What libidem sends, byte for byte, for every op with every optional
 * member present and absent: a stand-in for the broker on a socket of
 * the test's own records each request line and answers internal.  The
 * broker's retry fast path matches a line by its members' bytes in
 * order (libclient/fastscan.c), so a retry from another release of libidem
 * is fast only while these lines stay as they are.
 */
struct capture {
	int	 listen_fd;
	json_t	*lines;		/* every request line, as strings */
};

static void *
capture_serve(void *arg)
{
	static const char answer[] = "{\"ok\":false,\"error\":{\"code\":"
	    "\"internal\",\"message\":\"captured\",\"retryable\":false}}\n";
	struct capture	*cap = arg;
	char		 buf[4096];
	size_t		 length = 0;
	ssize_t		 n;
	char		*nl;
	int		 fd;

	if ((fd = accept(cap->listen_fd, NULL, NULL)) == -1)
		return NULL;
	while ((n = read(fd, buf + length, sizeof buf - length)) > 0) {
		length += (size_t)n;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			json_array_append_new(cap->lines, json_stringn(buf,
			    (size_t)(nl - buf)));
			length -= (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, length);
			if (write(fd, answer, sizeof answer - 1) !=
			    (ssize_t)sizeof answer - 1)
				break;
		}
		if (length == sizeof buf)
			break;
	}
	close(fd);
	return NULL;
}

static void
requests_keep_their_bytes(void **state)
{
	static const char *const expected[] = {
		"{\"op\":\"hello\"}",
		"{\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
		    "\"subject\":\"s\\\"q\",\"body\":\"b\\nb\",\"priority\":"
		    "\"P1\",\"risk_level\":\"low\",\"thread_key\":\"tk\","
		    "\"parent\":\"TASK-1\",\"references\":[\"r1\",\"r2\"],"
		    "\"depends_on\":[\"d1\"]},\"op\":\"write_task\","
		    "\"client_submission_id\":\"id-1\"}",
		"{\"task\":{\"sender\":\"PM\",\"subject\":\"x\"},"
		    "\"op\":\"write_task\"}",
		"{\"report\":{\"sender\":\"DEV\",\"recipient\":\"PM\","
		    "\"status\":\"done\",\"body\":\"rb\"},\"op\":"
		    "\"write_report\",\"task_id\":\"TASK-1\","
		    "\"client_submission_id\":\"rid\"}",
		"{\"report\":{\"body\":\"only\"},\"op\":\"write_report\","
		    "\"task_id\":\"TASK-1\"}",
		"{\"op\":\"effect_begin\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"request\":{\"b\":1,\"a\":[2]},"
		    "\"lease_ms\":5000}",
		"{\"op\":\"effect_begin\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"request\":{}}",
		"{\"op\":\"effect_complete\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"fence\":\"1-abc\",\"outcome\":"
		    "\"applied\",\"result\":{\"r\":true}}",
		"{\"op\":\"effect_complete\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"fence\":\"1-abc\",\"outcome\":"
		    "\"not_applied\"}",
		"{\"op\":\"effect_resolve\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"evidence\":{\"observed\":"
		    "\"applied\",\"result\":7,\"source\":\"src\"}}",
		"{\"op\":\"effect_resolve\",\"client_submission_id\":\"eid\","
		    "\"effect_kind\":\"mail\",\"evidence\":{\"observed\":"
		    "\"not_applied\"}}",
		"{\"op\":\"get_submission\",\"client_submission_id\":\"gid\"}",
		"{\"op\":\"diagnose\"}",
		"{\"op\":\"diagnose\",\"stale_after_ms\":1234}",
		"{\"op\":\"stats\"}",
	};
	static const char *const refs[] = { "r1", "r2" }, *const deps[] = {
		"d1"
	};
	struct broker		*b = *state;
	struct capture		 cap;
	struct sockaddr_un	 sa;
	struct idem_conn	*c;
	struct idem_error	 err;
	struct idem_hello	 hello;
	struct idem_write_result wr;
	struct idem_report_result rr;
	struct idem_effect	 e;
	struct idem_submission	 sub;
	struct idem_diagnosis	 dg;
	struct idem_stats	 st;
	struct idem_task	 task, few;
	struct idem_report	 report, body_only;
	pthread_t		 thread;
	size_t			 i;
	int			 found;

	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/capture.sock", b->root) < sizeof sa.sun_path);
	cap.lines = json_array();
	cap.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(cap.listen_fd != -1);
	assert_int_equal(bind(cap.listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(cap.listen_fd, 1), 0);
	assert_int_equal(pthread_create(&thread, NULL, capture_serve, &cap),
	    0);
	c = idem_connect(sa.sun_path, &err);
	assert_non_null(c);

	memset(&task, 0, sizeof task);
	task.sender = "PM";
	task.recipient = "DEV";
	task.subject = "s\"q";
	task.body = "b\nb";
	task.priority = "P1";
	task.risk_level = "low";
	task.thread_key = "tk";
	task.parent = "TASK-1";
	task.references = refs;
	task.references_count = 2;
	task.depends_on = deps;
	task.depends_on_count = 1;
	memset(&few, 0, sizeof few);
	few.sender = "PM";
	few.subject = "x";
	memset(&report, 0, sizeof report);
	report.sender = "DEV";
	report.recipient = "PM";
	report.status = "done";
	report.body = "rb";
	memset(&body_only, 0, sizeof body_only);
	body_only.body = "only";

	/* Each call fails with the stand-in's answer, after sending. */
	assert_int_equal(idem_hello(c, &hello, &err), -1);
	assert_int_equal(idem_write_task(c, "id-1", &task, &wr, &err), -1);
	assert_int_equal(idem_write_task(c, NULL, &few, &wr, &err), -1);
	assert_int_equal(idem_write_report(c, "TASK-1", "rid", &report, &rr,
	    &err), -1);
	assert_int_equal(idem_write_report(c, "TASK-1", NULL, &body_only, &rr,
	    &err), -1);
	assert_int_equal(idem_effect_begin(c, "eid", "mail",
	    "{\"b\":1,\"a\":[2]}", 5000, &e, &err), -1);
	assert_int_equal(idem_effect_begin(c, "eid", "mail", "{}", 0, &e,
	    &err), -1);
	assert_int_equal(idem_effect_complete(c, "eid", "mail", "1-abc", 1,
	    "{\"r\":true}", &e, &err), -1);
	assert_int_equal(idem_effect_complete(c, "eid", "mail", "1-abc", 0,
	    NULL, &e, &err), -1);
	assert_int_equal(idem_effect_resolve(c, "eid", "mail",
	    IDEM_OBSERVED_APPLIED, "7", "src", &e, &err), -1);
	assert_int_equal(idem_effect_resolve(c, "eid", "mail",
	    IDEM_OBSERVED_NOT_APPLIED, NULL, NULL, &e, &err), -1);
	assert_int_equal(idem_get_submission(c, "gid", &found, &sub, &err),
	    -1);
	assert_int_equal(idem_diagnose(c, -1, &dg, &err), -1);
	assert_int_equal(idem_diagnose(c, 1234, &dg, &err), -1);
	assert_int_equal(idem_stats(c, &st, &err), -1);
	/* The last answer came back: the stream is still whole. */
	assert_int_equal(err.code, IDEM_E_INTERNAL);
	assert_string_equal(err.message, "captured");
	idem_close(c);
	assert_int_equal(pthread_join(thread, NULL), 0);
	close(cap.listen_fd);

	for (i = 0; i < json_array_size(cap.lines) &&
	    i < sizeof expected / sizeof expected[0]; i++)
		assert_string_equal(json_string_value(json_array_get(
		    cap.lines, i)), expected[i]);
	assert_int_equal(json_array_size(cap.lines),
	    sizeof expected / sizeof expected[0]);
	json_decref(cap.lines);
	harness_finish(b);
}

/*
 * idem_effect_run's keeper waits for a slow answer to its extension on
 * its one connection, and keeps its schedule (client_effect.c): a
 * stand-in broker answers each effect_extend half a lease late (a worker
 * slow to be scheduled, on a loaded host).  The keeper used one
 * connection throughout: the caller's and the keeper's, two in all.
 * With a reply bounded by a third of the lease, each slow answer timed
 * out, the connection was dropped and a new one made a third later:
 * more connections, and the extensions a third apart plus the wait.
 * Perform ends on an event: the stand-in's third extension.
 */
#define KEEPER_LEASE_MS		600
#define KEEPER_EXTENSIONS	3

struct slow_standin {
	int		 listen_fd;
	int64_t		 delay_ms;
	pthread_mutex_t	 lock;
	pthread_cond_t	 changed;
	int		 connections;
	int		 extensions;
};

struct slow_conn {
	struct slow_standin	*s;
	int			 fd;
};

static void
slow_sleep_ms(int64_t ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* One connection's lines, each answered as its op asks. */
static void *
slow_conn_serve(void *arg)
{
	struct slow_conn	*sc = arg;
	struct slow_standin	*s = sc->s;
	char			 buf[4096];
	const char		*answer;
	size_t			 length = 0;
	ssize_t			 n;
	char			*nl;

	while ((n = read(sc->fd, buf + length, sizeof buf - length)) > 0) {
		length += (size_t)n;
		while ((nl = memchr(buf, '\n', length)) != NULL) {
			*nl = '\0';
			if (strstr(buf, "\"effect_extend\"") != NULL) {
				/* The slow broker: the answer half a lease late. */
				slow_sleep_ms(s->delay_ms);
				answer = "{\"ok\":true,\"lease_expires_at\":"
				    "\"2026-01-01T00:00:00.000Z\"}\n";
				pthread_mutex_lock(&s->lock);
				s->extensions++;
				pthread_cond_broadcast(&s->changed);
				pthread_mutex_unlock(&s->lock);
			} else if (strstr(buf, "\"effect_begin\"") != NULL)
				answer = "{\"ok\":true,\"disposition\":"
				    "\"proceed\",\"attempt\":1,\"fence\":"
				    "\"1-keeper\",\"external_key\":\"k\"}\n";
			else
				answer = "{\"ok\":false,\"error\":{\"code\":"
				    "\"internal\",\"message\":\"stand-in\","
				    "\"retryable\":false}}\n";
			/* A keeper that gave up on the answer has gone. */
			if (send(sc->fd, answer, strlen(answer),
			    MSG_NOSIGNAL) != (ssize_t)strlen(answer))
				break;
			length -= (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, length);
		}
		if (length == sizeof buf)
			break;
	}
	close(sc->fd);
	free(sc);
	return NULL;
}

/* Accepts (and counts) until the listening socket is shut down. */
static void *
slow_accept(void *arg)
{
	struct slow_standin	*s = arg;
	struct slow_conn	*sc;
	pthread_t		 thread;
	int			 fd;

	while ((fd = accept(s->listen_fd, NULL, NULL)) != -1) {
		pthread_mutex_lock(&s->lock);
		s->connections++;
		pthread_mutex_unlock(&s->lock);
		if ((sc = malloc(sizeof *sc)) == NULL) {
			close(fd);
			continue;
		}
		sc->s = s;
		sc->fd = fd;
		if (pthread_create(&thread, NULL, slow_conn_serve, sc) != 0) {
			close(fd);
			free(sc);
			continue;
		}
		pthread_detach(thread);
	}
	return NULL;
}

/* Until the stand-in has answered KEEPER_EXTENSIONS (20 s at most). */
static enum idem_effect_observed
slow_keeper_perform(const struct idem_effect *begun, char **result,
    void *arg)
{
	struct slow_standin	*s = arg;
	struct timespec		 until;

	(void)begun;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&s->lock);
	while (s->extensions < KEEPER_EXTENSIONS &&
	    pthread_cond_timedwait(&s->changed, &s->lock, &until) == 0)
		;
	pthread_mutex_unlock(&s->lock);
	*result = strdup("true");
	return IDEM_OBSERVED_APPLIED;
}

static void
keeper_waits_for_a_slow_answer(void **state)
{
	struct broker		*b = *state;
	struct slow_standin	 s;
	struct sockaddr_un	 sa;
	struct idem_conn	*c;
	struct idem_effect	 out;
	struct idem_error	 err;
	pthread_t		 acceptor;
	int64_t			 lease;

	lease = KEEPER_LEASE_MS * (int64_t)harness_slowdown();
	memset(&s, 0, sizeof s);
	s.delay_ms = lease / 2;
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.changed, NULL);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/slow.sock", b->root) < sizeof sa.sun_path);
	s.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(s.listen_fd != -1);
	assert_int_equal(bind(s.listen_fd, (struct sockaddr *)&sa,
	    sizeof sa), 0);
	assert_int_equal(listen(s.listen_fd, 8), 0);
	assert_int_equal(pthread_create(&acceptor, NULL, slow_accept, &s), 0);
	c = idem_connect(sa.sun_path, &err);
	assert_non_null(c);
	memset(&out, 0, sizeof out);
	/* The stand-in refuses the complete: -1, after the keeper's turns. */
	assert_int_equal(idem_effect_run(c, "keep", "mail", "{}", lease,
	    slow_keeper_perform, NULL, &s, &out, &err), -1);
	idem_effect_clear(&out);
	idem_close(c);
	shutdown(s.listen_fd, SHUT_RDWR);
	assert_int_equal(pthread_join(acceptor, NULL), 0);
	close(s.listen_fd);
	pthread_mutex_lock(&s.lock);
	assert_true(s.extensions >= KEEPER_EXTENSIONS);
	/* The caller's connection and the keeper's one. */
	assert_int_equal(s.connections, 2);
	pthread_mutex_unlock(&s.lock);
	harness_finish(b);
}

/* ---- effect answers decoded without a tree ------------------------------ */

#define PARSE_REQUEST	"{\"to\":\"a@b\",\"n\":[1,2.5,\"\\u00e9\"]}"
#define PARSE_RESULT	"{\"id\":\"m-1\",\"e\":1e3,\"s\":\"q\\\"\\u00e9\"}"

/* idem_effect_parse of line, which must fail as a protocol error. */
static void
parse_refused(const char *line)
{
	struct idem_effect	out;
	struct idem_error	err;

	assert_int_equal(idem_effect_parse(line, &out, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_int_equal(out.disposition, IDEM_EFFECT_NONE);
	assert_null(out.receipt);
	idem_effect_clear(&out);
}

/*
 * A broker's reused answer, taken raw, decodes by idem_effect_parse to
 * what idem_effect_begin gives (the same code), its receipt the bytes
 * sent and its result jansson's value; a conflict's refusal to its
 * error; and every cut of the answer, a control byte put at each of its
 * places or a member doubled is a protocol error (jansson would refuse
 * each), never an outcome or a crash.
 */
static void
effect_answers_decoded_without_a_tree(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_effect	 begun, done, reused, parsed;
	struct idem_error	 err, perr;
	json_t			*tree, *want, *got;
	char			 line[1024], *answer, *cut, *conflict;
	size_t			 n, k;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    PARSE_REQUEST, 0, &begun, &err), 0);
	assert_int_equal(begun.disposition, IDEM_EFFECT_PROCEED);
	assert_int_equal(idem_effect_complete(c, "parse-1", "mail",
	    begun.fence, 1, PARSE_RESULT, &done, &err), 0);
	assert_int_equal(done.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    PARSE_REQUEST, 0, &reused, &err), 0);
	assert_int_equal(reused.disposition, IDEM_EFFECT_REUSED);

	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-1\",\"effect_kind\":\"mail\","
	    "\"request\":%s}", PARSE_REQUEST);
	assert_int_equal(idem_call_raw(c, line, &answer, &err), 0);
	assert_int_equal(idem_effect_parse(answer, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_REUSED);
	assert_int_equal(parsed.attempt, reused.attempt);
	assert_int_equal(parsed.action_taken, reused.action_taken);
	assert_string_equal(parsed.fence, reused.fence);
	assert_string_equal(parsed.external_key, reused.external_key);
	assert_string_equal(parsed.state, "committed");
	assert_string_equal(parsed.request_digest, reused.request_digest);
	assert_string_equal(parsed.committed_at, reused.committed_at);
	assert_string_equal(parsed.receipt, reused.receipt);
	assert_string_equal(parsed.receipt, done.receipt);
	assert_non_null(strstr(answer, parsed.receipt));
	assert_string_equal(parsed.result, reused.result);
	assert_non_null(tree = json_loads(answer, JSON_REJECT_DUPLICATES,
	    NULL));
	want = json_object_get(json_object_get(tree, "receipt"), "result");
	assert_non_null(got = json_loads(parsed.result, JSON_DECODE_ANY,
	    NULL));
	assert_true(json_equal(got, want));
	json_decref(got);
	json_decref(tree);

	/* A refusal: conflict, its error decoded as the call decodes it. */
	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-1\",\"effect_kind\":\"mail\","
	    "\"request\":{\"other\":1}}");
	assert_int_equal(idem_call_raw(c, line, &conflict, &err), 0);
	idem_effect_clear(&reused);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    "{\"other\":1}", 0, &reused, &err), 0);
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(conflict, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_CONFLICT);
	assert_int_equal(perr.code, IDEM_E_CONFLICT);
	assert_int_equal(perr.code, err.code);
	assert_string_equal(perr.message, err.message);
	assert_string_equal(perr.reason, err.reason);
	assert_int_equal(perr.retryable, err.retryable);
	assert_string_equal(parsed.fence, reused.fence);
	assert_string_equal(parsed.state, "committed");	/* existing's */

	/* in_progress: a retryable refusal, as its bytes say. */
	idem_effect_clear(&begun);
	assert_int_equal(idem_effect_begin(c, "parse-2", "mail",
	    PARSE_REQUEST, 0, &begun, &err), 0);
	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-2\",\"effect_kind\":\"mail\","
	    "\"request\":%s}", PARSE_REQUEST);
	free(conflict);
	assert_int_equal(idem_call_raw(c, line, &conflict, &err), 0);
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(conflict, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_IN_PROGRESS);
	assert_int_equal(perr.code, IDEM_E_IN_PROGRESS);
	assert_non_null(tree = json_loads(conflict, 0, NULL));
	assert_true(json_is_true(json_object_get(json_object_get(tree,
	    "error"), "retryable")));
	json_decref(tree);
	assert_int_equal(perr.retryable, 1);

	n = strlen(answer);
	assert_non_null(cut = malloc(2 * n + 16));
	for (k = 0; k < n; k++) {
		memcpy(cut, answer, k);
		cut[k] = '\0';
		parse_refused(cut);
		memcpy(cut, answer, n + 1);
		cut[k] = '\x01';
		parse_refused(cut);
	}
	snprintf(cut, 2 * n + 16, "{\"ok\":true,%s", answer + 1);
	parse_refused(cut);
	parse_refused("[{\"ok\":true}]");
	parse_refused("{\"ok\":1,\"disposition\":\"reused\"}");
	/* No response: refused as an argument, not read. */
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(NULL, &parsed, &perr), -1);
	assert_int_equal(perr.code, IDEM_E_ARGUMENT);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_NONE);
	/* A disposition longer than any is refused, not cut to fit. */
	parse_refused("{\"ok\":true,\"disposition\":"
	    "\"reused_reused_reused_reused_reused\"}");
	free(cut);
	free(conflict);
	free(answer);
	idem_effect_clear(&begun);
	idem_effect_clear(&done);
	idem_effect_clear(&reused);
	idem_effect_clear(&parsed);
	idem_close(c);
	harness_finish(b);
}

/* ---- idem_effect_parse against a jansson tree, random answers ------------ */

#define RANDOM_ANSWERS		3000
#define RANDOM_ANSWERS_SEED	0x1dea34u

/* xorshift32: the same answers every run (the seed is printed). */
static uint32_t
random_next(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* A random JSON value of jansson's: reals, integers, odd strings, wide
 * and nested objects, arrays. */
static json_t *
random_value(uint32_t *x, int depth)
{
	static const char *const strings[] = {
		"", "a", "q\"uote", "back\\slash", "\xc3\xa9t\xc3\xa9",
		"\xf0\x9f\x98\x80", "tab\there", "line\nfeed", "\x01",
		"slash/", "m3",
	};
	json_t	*v;
	size_t	 i, n;
	char	 key[32];

	switch (random_next(x) % (depth > 3 ? 5 : 7)) {
	case 0:
		return json_integer((json_int_t)random_next(x) *
		    (random_next(x) % 2 ? 1 : -1) * (json_int_t)1000003);
	case 1:
		return json_real((double)(int32_t)random_next(x) /
		    (double)(1 + random_next(x) % 100000) *
		    (random_next(x) % 3 == 0 ? 1e300 : 1e-7));
	case 2:
		return json_string(strings[random_next(x) %
		    (sizeof strings / sizeof strings[0])]);
	case 3:
		return random_next(x) % 2 ? json_true() : json_null();
	case 4:
		return json_real(0.5 * (random_next(x) % 64));
	case 5:
		v = json_object();
		n = random_next(x) % 3 == 0 ? 33 + random_next(x) % 40 :
		    random_next(x) % 6;
		for (i = 0; i < n; i++) {
			snprintf(key, sizeof key, "%s%zu", strings[
			    random_next(x) % (sizeof strings /
			    sizeof strings[0])], i);
			json_object_set_new(v, key, random_value(x, depth + 1));
		}
		return v;
	default:
		v = json_array();
		n = random_next(x) % 6;
		for (i = 0; i < n; i++)
			json_array_append_new(v, random_value(x, depth + 1));
		return v;
	}
}

/* A reused answer around a random result, compact or with spaces. */
static char *
random_answer(uint32_t *x)
{
	json_t	*answer, *receipt;
	char	*line, key[40];

	snprintf(key, sizeof key, "idem-%08x", (unsigned)random_next(x));
	receipt = json_pack("{s:s, s:s, s:s, s:I, s:o, s:s}",
	    "client_submission_id", "rand\"om\xc3\xa9", "effect_kind", "mail",
	    "external_key", key, "attempt", (json_int_t)(1 +
	    random_next(x) % 1000), "result", random_value(x, 0), "state",
	    "committed");
	answer = json_pack("{s:b, s:s, s:b, s:s, s:o}", "ok", 1,
	    "disposition", "reused", "action_taken", 0, "state", "committed",
	    "receipt", receipt);
	assert_non_null(answer);
	line = json_dumps(answer, (random_next(x) % 2 ? JSON_COMPACT : 0) |
	    (random_next(x) % 2 ? JSON_SORT_KEYS : 0));
	json_decref(answer);
	assert_non_null(line);
	return line;
}

/* A JSON text against a tree value: the same once parsed (both absent). */
static void
same_json(const char *text, json_t *want)
{
	json_t	*got;

	if (want == NULL) {
		assert_null(text);
		return;
	}
	assert_non_null(text);
	assert_non_null(got = json_loads(text, JSON_DECODE_ANY, NULL));
	assert_true(json_equal(got, want));
	json_decref(got);
}

/*
 * idem_effect_parse against a jansson tree of the same answers: 3,000
 * random reused answers (results of reals, long integers, escaped and
 * non-ASCII strings, objects past 32 members, nesting), each whole and
 * with one byte replaced.  jansson refuses a line: a protocol error;
 * the line decodes: its disposition, attempt, external key, receipt
 * and result are the tree's.  Seeded, about a second.
 */
static void
effect_parse_agrees_with_a_tree(void **state)
{
	static const char	 bytes[] = "\"\\{}[],:0e.-x \x01\x80\xc3\xff";
	struct idem_effect	 out;
	struct idem_error	 err;
	uint32_t		 x = RANDOM_ANSWERS_SEED;
	json_t			*tree, *receipt;
	const char		*text;
	json_int_t		 attempt;
	size_t			 i, n;
	char			*line;
	int			 rc, mutated;

	(void)state;
	print_message("seed %#x, %d answers\n", RANDOM_ANSWERS_SEED,
	    RANDOM_ANSWERS);
	for (i = 0; i < RANDOM_ANSWERS; i++) {
		line = random_answer(&x);
		n = strlen(line);
		if ((mutated = (int)(random_next(&x) % 2)))
			line[random_next(&x) % n] = bytes[random_next(&x) %
			    (sizeof bytes - 1)];
		tree = json_loadb(line, strlen(line), JSON_REJECT_DUPLICATES,
		    NULL);
		rc = idem_effect_parse(line, &out, &err);
		if (tree == NULL) {
			if (rc != -1 || err.code != IDEM_E_PROTOCOL)
				fail_msg("answer %zu refused by jansson, "
				    "taken: %s", i, line);
		} else if (rc == 0) {
			assert_true(json_is_object(tree));
			/* A disposition as sent, else ok's and state's. */
			text = json_string_value(json_object_get(tree,
			    "disposition"));
			assert_string_equal(text != NULL ? text : "committed",
			    text != NULL ? "reused" : out.state);
			assert_int_equal(out.disposition, text != NULL ?
			    IDEM_EFFECT_REUSED : IDEM_EFFECT_COMMITTED);
			receipt = json_object_get(tree, "receipt");
			/* libidem keeps only a positive attempt. */
			attempt = json_integer_value(json_object_get(receipt,
			    "attempt"));
			assert_int_equal(out.attempt, attempt > 0 ? attempt :
			    0);
			text = json_string_value(json_object_get(receipt,
			    "external_key"));
			assert_string_equal(out.external_key, text != NULL ?
			    text : "");
			same_json(out.receipt, receipt);
			same_json(out.result, json_object_get(receipt,
			    "result"));
		} else if (!mutated)
			fail_msg("answer %zu refused: %s: %s", i, err.message,
			    line);
		json_decref(tree);
		idem_effect_clear(&out);
		free(line);
	}
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
		T(retry_survives_broker_killed_mid_request),
		T(retry_survives_worker_killed_mid_request),
		T(retry_returns_non_retryable_at_once),
		T(retry_deadline_bounds_the_reply_wait),
		T(retry_gives_up_without_broker),
		T(requests_keep_their_bytes),
		T(keeper_waits_for_a_slow_answer),
		T(effect_answers_decoded_without_a_tree),
		cmocka_unit_test(effect_parse_agrees_with_a_tree),
	};

	if (sodium_init() < 0)
		return 1;
	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (FILTER_APPLY(tests) == -1)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
