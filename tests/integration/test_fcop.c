/* SPDX-License-Identifier: ISC */
/*
 * test_fcop.c: FCoP fidelity against a real idemd (SPEC.md, "Names",
 * "Where a task is", the task-field table): a day's numbers stop at
 * 999 unless --sequence-digits says otherwise, slot recipients are in
 * the name only, null means the default, the conformance vectors agree
 * with the broker's digest, and a moved task's replies say where it is
 * now while the receipt stays byte for byte.  Judged by the files on
 * disk and the receipts.
 */
#include <sys/stat.h>

#include <errno.h>
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

/* A foreign FCoP writer's file, as FCoP's reference library writes one. */
#define TEST_FOREIGN_FILE \
	"---\nprotocol: fcop\nversion: 1\nsender: X\nrecipient: Y\n" \
	"priority: P2\n---\nwritten by another FCoP tool\n"
#define TEST_FOREIGN_REPORT \
	"---\nprotocol: fcop\nversion: 1\nsender: X\nrecipient: Y\n" \
	"references: [TASK-20261202-001-Y-to-X]\nstatus: done\n---\n" \
	"written by another FCoP tool\n"

static json_t *
task_request(const char *id, const char *recipient, const char *subject)
{
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "op", "write_task",
	    "client_submission_id", id, "task", "sender", "PM", "recipient",
	    recipient, "subject", subject);
}

static json_t *
submit(struct broker *b, const char *id, const char *subject)
{
	return harness_must_call(b, task_request(id, "DEV", subject));
}

static void
assert_disposition(json_t *reply, const char *disposition)
{
	const char	*d = json_string_value(json_object_get(reply,
			    "disposition"));

	if (!json_is_true(json_object_get(reply, "ok")) || d == NULL ||
	    strcmp(d, disposition) != 0)
		fail_msg("wanted %s, got %s", disposition,
		    json_dumps(reply, JSON_COMPACT));
}

static void
rename_rel(const struct broker *b, const char *from, const char *to)
{
	char	f[1024], t[1024], dir[1024], *p;

	snprintf(f, sizeof f, "%s/%s", b->root, from);
	snprintf(t, sizeof t, "%s/%s", b->root, to);
	snprintf(dir, sizeof dir, "%s", t);
	for (p = dir + strlen(b->root) + 1; (p = strchr(p, '/')) != NULL;
	    p++) {
		*p = '\0';
		if (mkdir(dir, 0755) == -1 && errno != EEXIST)
			fail_msg("mkdir %s: %s", dir, strerror(errno));
		*p = '/';
	}
	if (rename(f, t) != 0)
		fail_msg("rename %s %s: %s", f, t, strerror(errno));
}

/* ---- 999 a day ------------------------------------------------------------ */

/*
 * A foreign file holds number 998, so the next creation gets 999 and the
 * one after it finds the day used up: typed, not retryable, nothing
 * written, nothing reserved (a retry answers the same, get_submission
 * does not know the id), and so after a restart.  Reports count apart.
 */
static void
sequence_exhausted_after_999(void **state)
{
	struct broker	*b = *state;
	char		 today[9], rel[256], want[96];
	json_t		*a, *r, *legacy, *g, *retry;
	char		*ra, *rr;

	harness_today(today);
	snprintf(rel, sizeof rel, "_lifecycle/inbox/TASK-%s-998-X-to-Y.md",
	    today);
	assert_int_equal(harness_write(b, rel, TEST_FOREIGN_FILE), 0);
	harness_must_start(b, NULL, NULL);

	a = submit(b, "seq-a", "The 999th");
	assert_disposition(a, "created");
	harness_skip_if_date_moved(today, harness_receipt_str(a, "task_id"));
	snprintf(want, sizeof want, "TASK-%s-999-PM-to-DEV", today);
	assert_string_equal(harness_receipt_str(a, "task_id"), want);

	r = submit(b, "seq-b", "One too many");
	harness_skip_if_date_moved(today, harness_receipt_str(a, "task_id"));
	harness_assert_error(r, "sequence_exhausted", 0);
	assert_null(json_object_get(r, "receipt"));
	json_decref(r);
	/* The same again: nothing was reserved for it. */
	r = submit(b, "seq-b", "One too many");
	harness_assert_error(r, "sequence_exhausted", 0);
	json_decref(r);
	g = harness_must_call(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", "seq-b"));
	harness_assert_bool(g, "found", 0);
	json_decref(g);
	/* Legacy calls stop too. */
	legacy = harness_must_call(b, json_pack("{s:s, s:{s:s, s:s, s:s}}",
	    "op", "write_task", "task", "sender", "PM", "recipient", "DEV",
	    "subject", "Legacy"));
	harness_assert_error(legacy, "sequence_exhausted", 0);
	json_decref(legacy);
	assert_int_equal(harness_count_tasks(b), 2);

	/* A committed id still answers. */
	retry = submit(b, "seq-a", "The 999th");
	assert_disposition(retry, "reused");
	ra = harness_receipt_text(a);
	rr = harness_receipt_text(retry);
	assert_string_equal(ra, rr);
	free(rr);
	json_decref(retry);

	/* Reports: numbers of their own, the same limit. */
	snprintf(rel, sizeof rel, "reports/REPORT-%s-999-X-to-Y.md", today);
	assert_int_equal(harness_write(b, rel, TEST_FOREIGN_REPORT), 0);
	r = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:{s:s}}",
	    "op", "write_report",
	    "task_id", harness_receipt_str(a, "task_id"),
	    "client_submission_id", "rep-a", "report", "sender", "DEV"));
	harness_assert_error(r, "sequence_exhausted", 0);
	json_decref(r);
	assert_int_equal(harness_count_reports(b), 1);

	/* After a restart, the disk still says the day is used up. */
	assert_int_equal(harness_stop(b), 0);
	harness_must_start(b, NULL, NULL);
	r = submit(b, "seq-b", "One too many");
	harness_assert_error(r, "sequence_exhausted", 0);
	json_decref(r);
	assert_int_equal(harness_count_tasks(b), 2);
	snprintf(rel, sizeof rel, "_lifecycle/inbox/TASK-%s-1000-PM-to-DEV.md",
	    today);
	assert_false(harness_exists(b, rel));
	free(ra);
	json_decref(a);
	harness_finish(b);
}

/* --sequence-digits 4: the number after 999 is 1000. */
static void
sequence_digits_four_reaches_1000(void **state)
{
	static const char *const args[] = { "--sequence-digits", "4", NULL };
	struct broker	*b = *state;
	char		 today[9], rel[256], want[96];
	json_t		*a;

	harness_today(today);
	snprintf(rel, sizeof rel, "_lifecycle/done/TASK-%s-999-X-to-Y.md",
	    today);
	assert_int_equal(harness_write(b, rel, TEST_FOREIGN_FILE), 0);
	harness_must_start(b, args, NULL);
	a = submit(b, "seq-1000", "Past 999");
	assert_disposition(a, "created");
	harness_skip_if_date_moved(today, harness_receipt_str(a, "task_id"));
	snprintf(want, sizeof want, "TASK-%s-1000-PM-to-DEV", today);
	assert_string_equal(harness_receipt_str(a, "task_id"), want);
	assert_true(harness_exists(b, harness_receipt_str(a, "task_path")));
	json_decref(a);
	harness_finish(b);
}

/*
 * The digits are recorded in the root's state: a restart with fewer than
 * a file already has is refused, naming the file and the digits to use,
 * and changes nothing; a restart with as many serves again.
 */
static void
sequence_digits_recorded_and_never_fewer(void **state)
{
	static const char *const four[] = { "--sequence-digits", "4", NULL };
	static const char *const five[] = { "--sequence-digits", "5", NULL };
	struct broker	*b = *state;
	char		 today[9], rel[256], want[64], *recorded;
	json_t		*a;

	harness_today(today);
	snprintf(rel, sizeof rel, "_lifecycle/done/TASK-%s-999-X-to-Y.md",
	    today);
	assert_int_equal(harness_write(b, rel, TEST_FOREIGN_FILE), 0);
	harness_must_start(b, four, NULL);
	a = submit(b, "digits-1", "Past 999");
	assert_disposition(a, "created");
	harness_skip_if_date_moved(today, harness_receipt_str(a, "task_id"));
	json_decref(a);
	recorded = harness_read(b, ".idem/sequence-digits");
	assert_non_null(recorded);
	assert_string_equal(recorded, "4\n");
	free(recorded);
	assert_int_equal(harness_stop(b), 0);

	/* Three digits: refused, naming the four-digit file and 4. */
	assert_int_equal(harness_start(b, NULL, NULL), -1);
	assert_int_not_equal(b->exit_status, 0);
	snprintf(want, sizeof want, "TASK-%s-1000-PM-to-DEV.md", today);
	assert_true(harness_log_count(b, want) > 0);
	assert_true(harness_log_count(b, "--sequence-digits 4") > 0);
	recorded = harness_read(b, ".idem/sequence-digits");
	assert_string_equal(recorded, "4\n");
	free(recorded);

	/* More digits are always fine, and recorded; then 4 again. */
	harness_must_start(b, five, NULL);
	assert_int_equal(harness_stop(b), 0);
	recorded = harness_read(b, ".idem/sequence-digits");
	assert_string_equal(recorded, "5\n");
	free(recorded);
	harness_must_start(b, four, NULL);
	a = submit(b, "digits-1", "Past 999");
	assert_disposition(a, "reused");
	json_decref(a);
	harness_finish(b);
}

/* ---- Slots ---------------------------------------------------------------- */

static void
slot_recipient_is_in_the_name_only(void **state)
{
	static const char *const bad[] = { "DEV.", "DEV.d1", "DEV.D1.X",
	    ".D1", "DEV.ABCDEFGHIJKLMNOPQ", NULL };
	struct broker	*b = *state;
	json_t		*a, *retry, *r;
	char		*data, *ra, *rr;
	const char	*id;
	int		 i;

	harness_must_start(b, NULL, NULL);
	a = harness_must_call(b, task_request("slot-1", "DEV.D1",
	    "For slot 1"));
	assert_disposition(a, "created");
	id = harness_receipt_str(a, "task_id");
	assert_true(strlen(id) > 13);
	assert_string_equal(id + strlen(id) - 13, "-PM-to-DEV.D1");
	data = harness_read(b, harness_receipt_str(a, "task_path"));
	assert_non_null(data);
	assert_non_null(strstr(data, "\nrecipient: \"DEV\"\n"));
	assert_null(strstr(data, "recipient: \"DEV.D1"));
	free(data);

	/* The slot survives the journal: a retry after kill -9 is reused. */
	harness_kill(b);
	harness_must_start(b, NULL, NULL);
	retry = harness_must_call(b, task_request("slot-1", "DEV.D1",
	    "For slot 1"));
	assert_disposition(retry, "reused");
	ra = harness_receipt_text(a);
	rr = harness_receipt_text(retry);
	assert_string_equal(ra, rr);
	free(ra);
	free(rr);
	json_decref(retry);
	/* A report on a slot task: the report's names carry no slot. */
	r = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:{s:s}}",
	    "op", "write_report",
	    "task_id", harness_receipt_str(a, "task_id"),
	    "client_submission_id", "slot-report", "report", "sender", "DEV"));
	harness_assert_bool(r, "ok", 1);
	assert_true(strstr(harness_str(r, "report_id"), "-DEV-to-PM") != NULL);
	json_decref(r);
	/* Another slot is another request. */
	r = harness_must_call(b, task_request("slot-1", "DEV.D2",
	    "For slot 1"));
	harness_assert_error(r, "conflict", 0);
	json_decref(r);

	for (i = 0; bad[i] != NULL; i++) {
		r = harness_must_call(b, task_request("slot-bad", bad[i],
		    "Bad slot"));
		harness_assert_error(r, "invalid_request", 0);
		assert_string_equal(harness_str(json_object_get(r, "error"),
		    "field"), "task.recipient");
		json_decref(r);
	}
	r = harness_must_call(b, json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}",
	    "op", "write_task", "client_submission_id", "slot-sender", "task",
	    "sender", "PM.A", "recipient", "DEV", "subject", "No"));
	harness_assert_error(r, "invalid_request", 0);
	json_decref(r);
	assert_int_equal(harness_count_tasks(b), 1);
	json_decref(a);
	harness_finish(b);
}

/* ---- null means the default ------------------------------------------------ */

static void
null_optional_fields_mean_defaults(void **state)
{
	struct broker	*b = *state;
	json_t		*a, *plain, *retry;

	harness_must_start(b, NULL, NULL);
	a = harness_must_call(b,
	    json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:n, s:n, s:n, "
	    "s:n, s:n, s:n, s:n}}", "op", "write_task",
	    "client_submission_id", "nulls", "task", "sender", "PM",
	    "recipient", "DEV", "subject", "Fix login", "body", "priority",
	    "risk_level", "thread_key", "parent", "references", "depends_on"));
	assert_disposition(a, "created");
	plain = submit(b, "plain", "Fix login");
	assert_disposition(plain, "created");
	assert_string_equal(harness_receipt_str(a, "request_digest"),
	    harness_receipt_str(plain, "request_digest"));
	/* Absent or null: the same request, so the same id is reused. */
	retry = submit(b, "nulls", "Fix login");
	assert_disposition(retry, "reused");
	json_decref(retry);
	json_decref(plain);
	json_decref(a);
	harness_finish(b);
}

/* ---- The vectors against the broker ---------------------------------------- */

static int
run_vectors(struct broker *b, const char *file, int n)
{
	const char	*dir = getenv("IDEM_VECTORS");
	char		 path[4096], id[64];
	json_t		*root, *vector, *reply;
	json_error_t	 jerr;
	size_t		 i;

	if (dir == NULL)
		fail_msg("IDEM_VECTORS is not set");
	snprintf(path, sizeof path, "%s/%s", dir, file);
	if ((root = json_load_file(path, JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL)
		fail_msg("%s:%d: %s", path, jerr.line, jerr.text);
	assert_true(json_array_size(json_object_get(root, "vectors")) > 0);
	json_array_foreach(json_object_get(root, "vectors"), i, vector) {
		snprintf(id, sizeof id, "vector-%d", n++);
		/* The broker checks a given digest against its own. */
		reply = harness_must_call(b, json_pack("{s:s, s:s, s:O, s:O}",
		    "op", "write_task", "client_submission_id", id, "task",
		    json_object_get(vector, "task"), "request_digest",
		    json_object_get(vector, "request_digest")));
		if (!json_is_true(json_object_get(reply, "ok")))
			fail_msg("%s %s: %s", file, harness_str(vector, "name"),
			    json_dumps(reply, JSON_COMPACT));
		assert_string_equal(harness_receipt_str(reply,
		    "request_digest"), harness_str(vector, "request_digest"));
		json_decref(reply);
	}
	json_decref(root);
	return n;
}

static void
vectors_match_the_broker(void **state)
{
	struct broker	*b = *state;
	int		 n;

	harness_must_start(b, NULL, NULL);
	n = run_vectors(b, "write-task-v1.json", 0);
	n = run_vectors(b, "write-task-v1-fcop.json", n);
	assert_int_equal(harness_count_tasks(b), n);
	harness_finish(b);
}

/* ---- Moved tasks: current_path ---------------------------------------------- */

static void
assert_current_path(json_t *object, const char *want)
{
	json_t	*cp = json_object_get(object, "current_path");

	if (want == NULL) {
		assert_null(cp);
		return;
	}
	assert_true(json_is_string(cp));
	assert_string_equal(json_string_value(cp), want);
}

static void
moved_task_replies_carry_current_path(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_task	 t;
	struct idem_write_result res;
	struct idem_submission	 sub;
	struct idem_error	 err;
	json_t			*a, *retry, *g;
	char			*ra, *rr, active[256], hist[256];
	const char		*id, *task_path;
	int			 found;

	harness_must_start(b, NULL, NULL);
	a = submit(b, "move-me", "Moved by FCoP tools");
	assert_disposition(a, "created");
	assert_current_path(a, NULL);
	id = harness_receipt_str(a, "task_id");
	task_path = harness_receipt_str(a, "task_path");
	ra = harness_receipt_text(a);

	/* Not moved: no current_path. */
	retry = submit(b, "move-me", "Moved by FCoP tools");
	assert_disposition(retry, "reused");
	assert_current_path(retry, NULL);
	json_decref(retry);

	snprintf(active, sizeof active, "_lifecycle/active/%s.md", id);
	rename_rel(b, task_path, active);
	retry = submit(b, "move-me", "Moved by FCoP tools");
	assert_disposition(retry, "reused");
	rr = harness_receipt_text(retry);
	assert_string_equal(ra, rr);
	free(rr);
	assert_current_path(retry, active);
	assert_string_equal(harness_receipt_str(retry, "task_path"),
	    task_path);
	json_decref(retry);
	g = harness_must_call(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", "move-me"));
	assert_current_path(json_object_get(g, "submission"), active);
	assert_current_path(g, NULL);
	json_decref(g);

	/* Archived into history/<date>/<task_id>/. */
	snprintf(hist, sizeof hist, "history/2026-12-03/%s/%s.md", id, id);
	rename_rel(b, active, hist);
	retry = submit(b, "move-me", "Moved by FCoP tools");
	assert_disposition(retry, "reused");
	assert_current_path(retry, hist);
	rr = harness_receipt_text(retry);
	assert_string_equal(ra, rr);
	free(rr);
	json_decref(retry);

	/* libidem hands it out too. */
	c = harness_connect(b);
	assert_non_null(c);
	memset(&t, 0, sizeof t);
	t.sender = "PM";
	t.recipient = "DEV";
	t.subject = "Moved by FCoP tools";
	memset(&res, 0, sizeof res);
	assert_int_equal(idem_write_task(c, "move-me", &t, &res, &err), 0);
	assert_int_equal(res.disposition, IDEM_REUSED);
	assert_string_equal(res.current_path, hist);
	assert_int_equal(idem_get_submission(c, "move-me", &found, &sub, &err),
	    0);
	assert_int_equal(found, 1);
	assert_string_equal(sub.current_path, hist);
	assert_string_equal(sub.task_path, task_path);
	idem_close(c);

	assert_int_equal(harness_count_tasks(b), 1);
	free(ra);
	json_decref(a);
	harness_finish(b);
}

/* ---- fcop-create-task-v1 ------------------------------------------------- */

#define TEST_WORKSPACE	"urn:uuid:00000000-0000-4000-8000-000000000000"

static void
declare_workspace(struct broker *b, const char *workspace_id)
{
	char	json[256];

	snprintf(json, sizeof json, "{\"protocol\":\"fcop\","
	    "\"protocol_version\":\"4.0\",\"workspace_id\":\"%s\","
	    "\"encoding\":{\"name\":\"fcop-filesystem\",\"version\":"
	    "\"4.0\"},\"profiles\":[]}\n", workspace_id);
	assert_int_equal(harness_write(b, "fcop.json", json), 0);
}

static json_t *
fcop_request(const char *id, json_t *task)
{
	return json_pack("{s:s, s:s, s:s, s:o}", "op", "write_task",
	    "client_submission_id", id, "digest_schema",
	    "fcop-create-task-v1", "task", task);
}

static json_t *
fcop_task(const char *subject)
{
	return json_pack("{s:s, s:s, s:s}", "sender", "PM", "recipient", "DEV",
	    "subject", subject);
}

/* Every vector of fcop-create-task-v1.json, digested by the broker. */
static void
fcop_create_task_vectors_match_the_broker(void **state)
{
	struct broker	*b = *state;
	const char	*dir = getenv("IDEM_VECTORS");
	char		 path[4096], *fm, *ra, *rr;
	json_t		*root, *vector, *request, *reply, *retry;
	json_error_t	 jerr;
	size_t		 i;

	if (dir == NULL)
		fail_msg("IDEM_VECTORS is not set");
	snprintf(path, sizeof path, "%s/fcop-create-task-v1.json", dir);
	if ((root = json_load_file(path, JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL)
		fail_msg("%s:%d: %s", path, jerr.line, jerr.text);
	assert_true(json_array_size(json_object_get(root, "vectors")) > 0);
	harness_must_start(b, NULL, NULL);
	json_array_foreach(json_object_get(root, "vectors"), i, vector) {
		/* The broker reads the declaration at each such call. */
		declare_workspace(b, harness_str(vector, "workspace_id"));
		request = json_pack("{s:s, s:O, s:s, s:O, s:O}",
		    "op", "write_task", "client_submission_id",
		    json_object_get(vector, "operation_id"), "digest_schema",
		    "fcop-create-task-v1", "request_digest",
		    json_object_get(vector, "request_digest"), "task",
		    json_object_get(vector, "task"));
		reply = harness_must_call(b, json_deep_copy(request));
		if (!json_is_true(json_object_get(reply, "ok")))
			fail_msg("%s: %s", harness_str(vector, "name"),
			    json_dumps(reply, JSON_COMPACT));
		assert_disposition(reply, "created");
		assert_string_equal(harness_receipt_str(reply,
		    "digest_schema"), "fcop-create-task-v1");
		assert_string_equal(harness_receipt_str(reply,
		    "request_digest"), harness_str(vector, "request_digest"));
		/* The file repeats the operation (FCoP 4's C7). */
		fm = harness_read(b, harness_receipt_str(reply, "task_path"));
		assert_non_null(fm);
		assert_non_null(strstr(fm, "\nversion: 1\n"));
		assert_non_null(strstr(fm,
		    "\noperation_kind: \"create_task\"\n"));
		assert_non_null(strstr(fm, "\ndigest_schema: "
		    "\"fcop-create-task-v1\"\n"));
		assert_non_null(strstr(fm, harness_str(vector,
		    "workspace_id")));
		assert_non_null(strstr(fm, "\nnormalized_request_digest: "));
		assert_null(strstr(fm, "\nrisk_level: "));
		assert_null(strstr(fm, "\nthread_key: "));
		assert_null(strstr(fm, "\ndepends_on: "));
		free(fm);
		retry = harness_must_call(b, request);
		assert_disposition(retry, "reused");
		ra = harness_receipt_text(reply);
		rr = harness_receipt_text(retry);
		assert_string_equal(ra, rr);
		free(ra);
		free(rr);
		json_decref(retry);
		json_decref(reply);
	}
	assert_int_equal(harness_count_tasks(b),
	    (int)json_array_size(json_object_get(root, "vectors")));
	json_decref(root);
	harness_finish(b);
}

static void
expect_refused(struct broker *b, json_t *request, const char *code,
    const char *field)
{
	json_t	*r = harness_must_call(b, request);

	harness_assert_error(r, code, 0);
	if (field != NULL)
		assert_string_equal(harness_str(json_object_get(r, "error"),
		    "field"), field);
	json_decref(r);
}

static void
fcop_create_task_rules(void **state)
{
	struct broker	*b = *state;
	json_t		*a, *r, *t, *g;
	char		*ra, *rr;

	harness_must_start(b, NULL, NULL);
	/* No FCoP 4 declaration: no 4.0 write (F4.11.1). */
	expect_refused(b, fcop_request("op-1", fcop_task("No declaration")),
	    "unsupported_schema", "digest_schema");
	assert_int_equal(harness_count_tasks(b), 0);
	assert_int_equal(harness_write(b, "fcop.json", "{\"workspace_id\":"
	    "\"urn:uuid:NOT-A-UUID\"}"), 0);
	expect_refused(b, fcop_request("op-1", fcop_task("Bad declaration")),
	    "unsupported_schema", "digest_schema");
	declare_workspace(b, TEST_WORKSPACE);

	/* Fields outside its digest are refused, not ignored. */
	t = fcop_task("Extra");
	json_object_set_new(t, "thread_key", json_string("login"));
	expect_refused(b, fcop_request("op-1", t), "invalid_request",
	    "task.thread_key");
	t = fcop_task("Extra");
	json_object_set_new(t, "risk_level", json_string("high"));
	expect_refused(b, fcop_request("op-1", t), "invalid_request",
	    "task.risk_level");
	t = fcop_task("Extra");
	json_object_set_new(t, "depends_on", json_array());
	expect_refused(b, fcop_request("op-1", t), "invalid_request",
	    "task.depends_on");
	t = fcop_task("Parent");
	json_object_set_new(t, "parent", json_string("doc/a.md"));
	expect_refused(b, fcop_request("op-1", t), "invalid_request",
	    "task.parent");
	/* operation_id's grammar; no legacy calls. */
	expect_refused(b, fcop_request("run/42", fcop_task("Bad id")),
	    "invalid_request", "client_submission_id");
	expect_refused(b, json_pack("{s:s, s:s, s:o}", "op", "write_task",
	    "digest_schema", "fcop-create-task-v1", "task",
	    fcop_task("Legacy")), "invalid_request", "client_submission_id");
	/* Another workspace's id; workspace_id under write-task-v1. */
	r = fcop_request("op-1", fcop_task("Ws"));
	json_object_set_new(r, "workspace_id", json_string(
	    "urn:uuid:11111111-0000-4000-8000-000000000000"));
	expect_refused(b, r, "invalid_request", "workspace_id");
	expect_refused(b, json_pack("{s:s, s:s, s:s, s:o}", "op", "write_task",
	    "client_submission_id", "op-w", "workspace_id", TEST_WORKSPACE,
	    "task", fcop_task("Ws")), "invalid_request", "workspace_id");
	/* branch_of is FCoP 4's: write-task-v1 does not know it. */
	t = fcop_task("Branch");
	json_object_set_new(t, "branch_of", json_string("TASK-1"));
	expect_refused(b, json_pack("{s:s, s:s, s:o}", "op", "write_task",
	    "client_submission_id", "op-b", "task", t), "invalid_request",
	    "task.branch_of");
	assert_int_equal(harness_count_tasks(b), 0);

	/* Created; retries normalized alike are reused. */
	t = fcop_task("Normalized");
	json_object_set_new(t, "body", json_string("x"));
	json_object_set_new(t, "references", json_pack("[s,s,s]", "b", "a",
	    "b"));
	r = fcop_request("op-1", t);
	json_object_set_new(r, "workspace_id", json_string(TEST_WORKSPACE));
	a = harness_must_call(b, r);
	assert_disposition(a, "created");
	t = fcop_task("Normalized");
	json_object_set_new(t, "body", json_string("x\r\n\n"));
	json_object_set_new(t, "references", json_pack("[s,s]", "a", "b"));
	r = harness_must_call(b, fcop_request("op-1", t));
	assert_disposition(r, "reused");
	json_decref(r);
	/* The same id under write-task-v1: another schema. */
	r = harness_must_call(b, task_request("op-1", "DEV", "Normalized"));
	harness_assert_error(r, "conflict", 0);
	assert_string_equal(harness_str(json_object_get(r, "error"), "reason"),
	    "schema_mismatch");
	json_decref(r);

	/* The schema survives the journal. */
	harness_kill(b);
	harness_must_start(b, NULL, NULL);
	t = fcop_task("Normalized");
	json_object_set_new(t, "body", json_string("x\n"));
	json_object_set_new(t, "references", json_pack("[s,s]", "b", "a"));
	r = harness_must_call(b, fcop_request("op-1", t));
	assert_disposition(r, "reused");
	ra = harness_receipt_text(a);
	rr = harness_receipt_text(r);
	assert_string_equal(ra, rr);
	free(ra);
	free(rr);
	json_decref(r);
	g = harness_must_call(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", "op-1"));
	assert_string_equal(harness_str(json_object_get(g, "submission"),
	    "digest_schema"), "fcop-create-task-v1");
	json_decref(g);
	assert_int_equal(harness_count_tasks(b), 1);
	json_decref(a);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(sequence_exhausted_after_999),
		T(sequence_digits_four_reaches_1000),
		T(sequence_digits_recorded_and_never_fewer),
		T(slot_recipient_is_in_the_name_only),
		T(null_optional_fields_mean_defaults),
		T(vectors_match_the_broker),
		T(moved_task_replies_carry_current_path),
		T(fcop_create_task_vectors_match_the_broker),
		T(fcop_create_task_rules),
	};

	if (sodium_init() < 0)
		return 1;
	return harness_exit_status(FILTER_RUN(tests));
}
