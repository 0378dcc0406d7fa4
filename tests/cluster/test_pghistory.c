/* SPDX-License-Identifier: ISC */
/*
 * test_pghistory: the history on the PostgreSQL store (doc/cluster.md,
 * "Reports, effects, history"), with real brokers and a private server
 * (tests/cluster/pgserver.c):
 *
 * - a local history built by a real local idemd (a capacity of 8, so
 *   receipts live in the index, some compacted to tombstones) imported
 *   by idemctl store import: refused while the local idemd holds the
 *   root; then every id retried through a broker on PostgreSQL answers
 *   reused with the local broker's receipt bytes (and receipt_pruned
 *   where the local one said it), the counters past every number, no new
 *   file; a second import changes no row and no counter;
 * - an import that conflicts with the store's rows is refused with
 *   nothing written (one transaction);
 * - a history with an unfinished submission is refused, naming it;
 * - effects (kind 3 rows): imported with the local receipt bytes
 *   (tombstones too, an unfinished one refused by name), compacted by
 *   compact --store (receipt_pruned, result_digest), and answered
 *   storage_unavailable while PostgreSQL is stopped;
 * - idemctl compact --store: a retry on a second broker and on the first
 *   after a restart answers reused, receipt_pruned and the tombstone's
 *   facts, another digest still conflict, never a second file; stats'
 *   "store" counts the workspace's rows from any broker, and is null
 *   while PostgreSQL is down.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "cluster_harness.h"

static struct pgserver	server;

/* Enough ids past a capacity of 8 that most live only in the index. */
#define IMPORT_TASKS		30
#define LOCAL_CAPACITY		"8"
/* table_full while a checkpoint makes room: the client's retry. */
#define FULL_RETRY_US		2000
#define FULL_MAX_RETRIES	5000

static const char *const local_args[] = { "--capacity", LOCAL_CAPACITY,
    NULL };

static int
setup(void **state)
{
	(void)state;
	harness_watchdog(300);
	return 0;
}

/* idemctl store import of root into the server; extra: its options. */
static int
store_import(char **out, const char *root, const char *extra)
{
	return cluster_idemctl(out, "store import --store '%s' --root '%s'%s",
	    server.uri, root, extra);
}

/* The local broker stopped, its history imported. */
static void
stop_and_import(struct broker *b)
{
	char	*out;

	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(store_import(&out, b->root, ""), 0);
	free(out);
}

static long
submissions(void)
{
	return cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission");
}

/*
 * One request, its reply's raw line (malloc'd): receipts are compared
 * byte for byte as the broker sent them.  table_full (a checkpoint
 * making room in a small table) is retried as a client would.
 */
static char *
raw_call(struct broker *b, json_t *request)
{
	char	*line, *reply = NULL;
	int	 fd, i;

	assert_non_null(line = json_dumps(request, JSON_COMPACT));
	json_decref(request);
	for (i = 0; i < FULL_MAX_RETRIES; i++) {
		free(reply);
		assert_true((fd = harness_raw_connect(b)) >= 0);
		assert_int_equal(harness_raw_send(fd, line), 0);
		reply = harness_raw_read_line(fd);
		close(fd);
		assert_non_null(reply);
		if (strstr(reply, "\"code\":\"table_full\"") == NULL)
			break;
		usleep(FULL_RETRY_US);
	}
	free(line);
	return reply;
}

/*
 * A raw reply (freed here) holds each of the strings after it, up to a
 * NULL: the members a test expects, as the wire spells them.
 */
static void
holds(char *reply, ...)
{
	const char	*want;
	va_list		 ap;

	va_start(ap, reply);
	while ((want = va_arg(ap, const char *)) != NULL &&
	    strstr(reply, want) != NULL)
		;
	va_end(ap);
	if (want != NULL)
		fail_msg("no %s in %s", want, reply);
	free(reply);
}

/* Two raw replies' receipts are the same bytes. */
static void
assert_same_receipt(const char *reply, const char *first)
{
	char	*got = harness_receipt_bytes(reply);
	char	*want = harness_receipt_bytes(first);

	assert_string_equal(got, want);
	free(got);
	free(want);
}

static json_t *
stats_store(struct broker *b)
{
	json_t	*reply, *store;

	reply = harness_must_call(b, json_pack("{s:s,s:i}", "op", "stats",
	    "id", 1));
	harness_assert_bool(reply, "ok", 1);
	store = json_incref(json_object_get(reply, "store"));
	json_decref(reply);
	if (!json_is_object(store))
		fail_msg("stats has no store object");
	return store;
}

/* stats' effects_reused_fast. */
static json_int_t
effects_reused_fast(struct broker *b)
{
	json_t		*reply;
	json_int_t	 n;

	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	n = harness_int(reply, "effects_reused_fast");
	json_decref(reply);
	return n;
}

static void
assert_store_counts(struct broker *b, json_int_t submissions,
    json_int_t committed, json_int_t in_flight, json_int_t tombstones)
{
	json_t	*s = stats_store(b);

	assert_int_equal(harness_int(s, "submissions"), submissions);
	assert_int_equal(harness_int(s, "committed"), committed);
	assert_int_equal(harness_int(s, "in_flight"), in_flight);
	assert_int_equal(harness_int(s, "tombstones"), tombstones);
	json_decref(s);
}

/* Every row and counter of the store, as text, to compare snapshots. */
static char *
store_dump(void)
{
	char	*out;

	out = pgserver_psql(&server, "SELECT kind, scope, "
	    "client_submission_id, digest_schema, request_digest, state, "
	    "date, seq, task_id, created_at_ms, reserved_at, updated_at, "
	    "file_digest, receipt, epoch FROM idem_submission ORDER BY 1, 2, "
	    "3; SELECT * FROM idem_counter ORDER BY 1, 2, 3; SELECT * FROM "
	    "idem_legacy ORDER BY 1, 2, 3, 4");
	assert_non_null(out);
	return out;
}

/* The store as it was (before: store_dump's, freed). */
static void
assert_store_is(char *before)
{
	char	*after = store_dump();

	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* An import of root refused, the store as it was: idemctl's output. */
static char *
import_refused(const char *root)
{
	char	*before = store_dump(), *out;

	assert_int_equal(store_import(&out, root, ""), 1);
	assert_store_is(before);
	return out;
}

/* A local history: IMPORT_TASKS ids, one legacy call, compacted. */
struct local {
	struct broker	b;
	char		*created[IMPORT_TASKS];	/* the first replies */
	int		 local_pruned[IMPORT_TASKS];	/* after compaction */
	int		 compacted;	/* tombstones in the index */
	char		 task0[128];	/* imp-00's task_id */
	char		*report;	/* a report on it, the first reply */
};

static json_t *
report_request(const char *task_id)
{
	return json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "op", "write_report",
	    "task_id", task_id, "client_submission_id", "rep-1", "report",
	    "sender", "DEV", "body", "Done.\n");
}

static void
local_history(struct local *l)
{
	char	id[32], subject[64], *reply, *out, *at;
	json_t	*r;
	int	i;

	harness_fresh_root(&l->b);
	harness_must_start(&l->b, local_args, NULL);
	for (i = 0; i < IMPORT_TASKS; i++) {
		snprintf(id, sizeof id, "imp-%02d", i);
		snprintf(subject, sizeof subject, "Imported %d", i);
		l->created[i] = raw_call(&l->b, harness_write_task(id,
		    subject));
		if (strstr(l->created[i], "\"disposition\":\"created\"") ==
		    NULL)
			fail_msg("%s: %s", id, l->created[i]);
	}
	holds(raw_call(&l->b, harness_write_task(NULL, "A legacy call")),
	    "\"ok\":true", NULL);
	assert_non_null(r = json_loads(l->created[0], 0, NULL));
	snprintf(l->task0, sizeof l->task0, "%s", harness_receipt_str(r,
	    "task_id"));
	json_decref(r);
	l->report = raw_call(&l->b, report_request(l->task0));
	assert_non_null(strstr(l->report, "\"deduplicated\":false"));
	/* The index compacted, the broker running (it may). */
	assert_int_equal(cluster_idemctl(&out, "--root '%s' compact "
	    "--older-than 0", l->b.root), 0);
	assert_non_null(at = strstr(out, "compact: "));
	l->compacted = atoi(at + strlen("compact: "));
	free(out);
	/* The index holds most of them: the table only 8. */
	assert_true(l->compacted >= IMPORT_TASKS - 8);
	for (i = 0; i < IMPORT_TASKS; i++) {
		snprintf(id, sizeof id, "imp-%02d", i);
		snprintf(subject, sizeof subject, "Imported %d", i);
		reply = raw_call(&l->b, harness_write_task(id, subject));
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s: %s", id, reply);
		l->local_pruned[i] = strstr(reply, "\"receipt_pruned\":true") !=
		    NULL;
		free(reply);
	}
}

/*
 * The receipt's bytes a tombstone answers: the first receipt's without
 * its "file_digest" member (malloc'd).
 */
static char *
pruned_bytes(const char *created)
{
	char	*r = harness_receipt_bytes(created), *out;
	const char	*fd, *end;

	assert_non_null(fd = strstr(r, "\"file_digest\":\""));
	assert_non_null(end = strchr(fd + strlen("\"file_digest\":\""), '"'));
	end += 2;	/* the closing quote and the comma */
	assert_non_null(out = malloc(strlen(r) + 1));
	memcpy(out, r, (size_t)(fd - r));
	strcpy(out + (fd - r), end);
	free(r);
	return out;
}

static void
local_free(struct local *l)
{
	int	i;

	for (i = 0; i < IMPORT_TASKS; i++)
		free(l->created[i]);
	free(l->report);
}

static void
import_local_history_answers_byte_identical(void **state)
{
	static struct local	 l;
	static struct node	 a;
	char			 id[32], subject[64], *out, *before;
	char			*reply, today[9], *expected, *got, *mark, *workspace;
	json_t			*r;
	long			 next_seq;
	int			 i, pruned;

	(void)state;
	cluster_store_reset(&server);
	memset(&l, 0, sizeof l);
	local_history(&l);
	/* Refused while the local idemd holds the root: nothing written. */
	assert_int_equal(store_import(&out, l.b.root, ""), 1);
	assert_non_null(strstr(out, "in use by a local idemd"));
	free(out);
	assert_int_equal(submissions(), 0);
	assert_int_equal(harness_stop(&l.b), 0);
	/*
	 * Not imported yet: a broker on the store refuses the workspace (a
	 * retry of an id only the journal knows would be executed again).
	 */
	cluster_node_init(&a, server.uri, l.b.root, "a");
	assert_int_equal(cluster_node_start(&a, "30000", "1", "10000", NULL,
	    NULL), -1);
	assert_int_equal(harness_log_count(&a.b, "has a local history "
	    "(.idem/journal) that is not in the store"), 1);
	assert_int_equal(harness_exists(&l.b, ".idem/imported"), 0);
	assert_int_equal(submissions(), 0);

	assert_int_equal(store_import(&out, l.b.root, ""), 0);
	/*
	 * The legacy call is a record, or, past a checkpoint, only the
	 * allocator's position: the counter below passes it either way.
	 */
	assert_non_null(strstr(out, "31 submissions added, "));
	assert_non_null(strstr(out, ", 0 already"));
	free(out);
	/* The tasks and the report, its task as its scope. */
	assert_int_equal(submissions(), IMPORT_TASKS + 1);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE kind = 2 AND scope = '%s' AND "
	    "client_submission_id = 'rep-1'", l.task0), 1);
	/* The index's tombstones as tombstones, the rest with receipts. */
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE state = 10 AND receipt IS NULL AND "
	    "file_digest IS NULL"), l.compacted);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE state = 3 AND receipt IS NOT NULL"),
	    IMPORT_TASKS + 1 - l.compacted);
	/* The counter is past every number: the 30 ids and the legacy one. */
	harness_today(today);
	next_seq = cluster_sql_long(&server, "SELECT next_seq FROM "
	    "idem_counter WHERE kind = 1 AND date = %s", today);
	if (next_seq == 0)
		harness_skip("the date moved during the test");
	assert_int_equal(next_seq, IMPORT_TASKS + 2);

	/* The root is marked imported, with the workspace's id. */
	assert_non_null(mark = harness_read(&l.b, ".idem/imported"));
	assert_non_null(workspace = harness_read(&l.b, ".idem/workspace-id"));
	assert_string_equal(mark, workspace);
	free(mark);
	free(workspace);
	/* A second import changes nothing. */
	before = store_dump();
	assert_int_equal(store_import(&out, l.b.root, ""), 0);
	assert_non_null(strstr(out, "0 submissions added, 0 effects added, "
	    "0 legacy numbers added, "));
	free(out);
	assert_store_is(before);

	/*
	 * A broker on PostgreSQL answers as the local one does, byte for
	 * byte: the first receipt, or, compacted, its tombstone (a receipt
	 * the local table still held whole is a tombstone all the same).
	 */
	cluster_node_start_one_worker(&a);
	for (i = 0, pruned = 0; i < IMPORT_TASKS; i++) {
		snprintf(id, sizeof id, "imp-%02d", i);
		snprintf(subject, sizeof subject, "Imported %d", i);
		reply = raw_call(&a.b, harness_write_task(id, subject));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		if (strstr(reply, "\"receipt_pruned\":true") != NULL) {
			pruned++;
			expected = pruned_bytes(l.created[i]);
			got = harness_receipt_bytes(reply);
			assert_string_equal(got, expected);
			free(got);
			free(expected);
		} else {
			assert_false(l.local_pruned[i]);
			assert_same_receipt(reply, l.created[i]);
		}
		free(reply);
	}
	/* The report: deduplicated, the same REPORT id. */
	reply = raw_call(&a.b, report_request(l.task0));
	assert_non_null(strstr(reply, "\"deduplicated\":true"));
	assert_non_null(r = json_loads(l.report, 0, NULL));
	assert_non_null(strstr(reply, harness_str(r, "report_id")));
	json_decref(r);
	pruned += strstr(reply, "\"receipt_pruned\":true") != NULL;
	free(reply);
	assert_int_equal(pruned, l.compacted);
	/* Another request under an imported id: conflict, no file. */
	holds(raw_call(&a.b, harness_write_task("imp-03", "Other content")),
	    "\"reason\":\"digest_mismatch\"", NULL);
	/* A new id takes the next number, past the imported ones. */
	reply = raw_call(&a.b, harness_write_task("imp-new", "New"));
	assert_non_null(strstr(reply, "\"disposition\":\"created\""));
	snprintf(id, sizeof id, "TASK-%s-%03d-", today, IMPORT_TASKS + 2);
	if (strstr(reply, id) == NULL)
		fail_msg("expected %s in %s", id, reply);
	free(reply);
	assert_int_equal(harness_count_tasks(&a.b), IMPORT_TASKS + 2);
	assert_store_counts(&a.b, IMPORT_TASKS + 2, IMPORT_TASKS + 2 -
	    l.compacted, 0, l.compacted);
	cluster_node_kill(&a);
	/* The history is the store's: a local idemd refuses the root. */
	assert_int_equal(harness_start(&l.b, local_args, NULL), -1);
	assert_int_equal(harness_log_count(&l.b, "its history was imported "
	    "into a PostgreSQL store"), 1);
	local_free(&l);
	harness_finish(&l.b);
}

static void
conflicting_import_writes_nothing(void **state)
{
	static struct broker	 b;
	char			 id[32], *out;
	int			 i;

	(void)state;
	cluster_store_reset(&server);
	harness_fresh_root(&b);
	harness_must_start(&b, NULL, NULL);
	for (i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "conf-%d", i);
		holds(raw_call(&b, harness_write_task(id, "Conflict")),
		    "\"disposition\":\"created\"", NULL);
	}
	stop_and_import(&b);
	/*
	 * The store now binds conf-1 to another request, and lost conf-3
	 * and the counter: an import would add those, but conflicts.
	 */
	free(cluster_sql_value(&server, "UPDATE idem_submission SET "
	    "request_digest = repeat('0', 64) WHERE client_submission_id = "
	    "'conf-1'; DELETE FROM idem_submission WHERE "
	    "client_submission_id = 'conf-3'; DELETE FROM idem_counter"));
	out = import_refused(b.root);
	assert_non_null(strstr(out, "conflict: conf-1"));
	assert_non_null(strstr(out, "nothing was written"));
	free(out);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = 'conf-3'"), 0);
	/* Another submission on an imported number: a conflict too. */
	free(cluster_sql_value(&server, "UPDATE idem_submission SET "
	    "request_digest = (SELECT request_digest FROM idem_submission "
	    "WHERE client_submission_id = 'conf-0'), client_submission_id = "
	    "'someone-else' WHERE client_submission_id = 'conf-1'"));
	out = import_refused(b.root);
	assert_non_null(strstr(out, "is another submission's in the store: "
	    "someone-else"));
	free(out);
	harness_finish(&b);
}

static void
unfinished_history_is_refused(void **state)
{
	static struct broker	 b;
	char			*out, *line;
	json_t			*request;
	int			 fd;

	(void)state;
	cluster_store_reset(&server);
	harness_fresh_root(&b);
	harness_start_crashing(&b, "IDEM_CRASH_AT", "after_reserve_durable");
	/* The broker dies with the reservation durable: no reply. */
	assert_true((fd = harness_raw_connect(&b)) >= 0);
	assert_non_null(line = json_dumps(request = harness_write_task(
	    "half-done", "Unfinished"), JSON_COMPACT));
	json_decref(request);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	harness_wait_dead(&b);
	free(harness_raw_read_line(fd));
	close(fd);
	assert_int_equal(store_import(&out, b.root, ""), 1);
	assert_non_null(strstr(out, "unfinished: half-done"));
	assert_non_null(strstr(out, "start the local idemd once"));
	free(out);
	assert_int_equal(submissions(), 0);
	/* As told: the local idemd once (the retry finishes it), then import. */
	harness_must_start(&b, NULL, NULL);
	holds(raw_call(&b, harness_write_task("half-done", "Unfinished")),
	    "\"ok\":true", NULL);
	stop_and_import(&b);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = 'half-done' AND "
	    "state = 3"), 1);
	harness_finish(&b);
}

/* ---- effects (kind 3 rows) ------------------------------------------ */

/* Effects in a local history: past a capacity of 8, most in the index. */
#define IMPORT_EFFECTS		14
#define FX_KIND			"mail.send/v1"

static json_t *
fx_begin_request(const char *id, const char *to)
{
	return json_pack("{s:s, s:s, s:s, s:{s:s}}", "op", "effect_begin",
	    "client_submission_id", id, "effect_kind", FX_KIND, "request",
	    "to", to);
}

/* effect_complete with the fence of a proceed reply; the raw reply. */
static char *
fx_complete(struct broker *b, const char *id, const char *proceed,
    const char *outcome, const char *status)
{
	json_t	*r, *request;
	char	*reply;

	assert_non_null(r = json_loads(proceed, 0, NULL));
	request = json_pack("{s:s, s:s, s:s, s:s, s:s}", "op",
	    "effect_complete", "client_submission_id", id, "effect_kind",
	    FX_KIND, "fence", harness_str(r, "fence"), "outcome", outcome);
	if (status != NULL)
		json_object_set_new(request, "result", json_pack("{s:s}",
		    "status", status));
	json_decref(r);
	reply = raw_call(b, request);
	return reply;
}

/* begin (proceed) and complete applied: the committed reply. */
static char *
fx_commit(struct broker *b, const char *id, const char *to)
{
	char	*proceed, *reply;

	proceed = raw_call(b, fx_begin_request(id, to));
	if (strstr(proceed, "\"disposition\":\"proceed\"") == NULL)
		fail_msg("%s: %s", id, proceed);
	reply = fx_complete(b, id, proceed, "applied", to);
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("%s: %s", id, reply);
	free(proceed);
	return reply;
}

/*
 * A local root whose newest checkpoint left receipts to the index alone
 * (a table of 8, 4 KiB segments), its index put back from a copy taken
 * before more effects, then removed: the import refuses both, in
 * idemd's words, and writes nothing (idemd refuses to start on that
 * root too, the precondition); with the live index back it imports.
 */
static void
import_refuses_an_index_that_lacks_receipts(void **state)
{
	static struct broker	 l;
	static const char *const args[] = { "--capacity", LOCAL_CAPACITY,
	    "--segment-bytes", "4096", NULL };
	char			 id[32], to[64], cmd[3 * PATH_MAX], *out;
	int			 i;

	(void)state;
	cluster_store_reset(&server);
	harness_fresh_root(&l);
	harness_must_start(&l, args, NULL);
	for (i = 0; i < 30; i++) {
		snprintf(id, sizeof id, "fx-lack-%02d", i);
		snprintf(to, sizeof to, "ops-%d@example", i);
		free(fx_commit(&l, id, to));
	}
	assert_int_equal(harness_stop(&l), 0);
	snprintf(cmd, sizeof cmd, "cp -a '%s/%s' '%s.old-index'", l.root,
	    IDEM_INDEX_DIR, l.root);
	assert_int_equal(system(cmd), 0);
	harness_must_start(&l, args, NULL);
	for (i = 30; i < 60; i++) {
		snprintf(id, sizeof id, "fx-lack-%02d", i);
		snprintf(to, sizeof to, "ops-%d@example", i);
		free(fx_commit(&l, id, to));
	}
	assert_int_equal(harness_stop(&l), 0);
	snprintf(cmd, sizeof cmd, "mv '%s/%s' '%s.live-index' && "
	    "cp -a '%s.old-index' '%s/%s'", l.root, IDEM_INDEX_DIR, l.root,
	    l.root, l.root, IDEM_INDEX_DIR);
	assert_int_equal(system(cmd), 0);
	/* The precondition: idemd refuses this root. */
	assert_int_equal(harness_start(&l, args, NULL), -1);

	assert_int_equal(store_import(&out, l.root, ""), 1);
	if (strstr(out, "is older than the newest checkpoint") == NULL ||
	    strstr(out, "nothing was written") == NULL)
		fail_msg("import of an older index: %s", out);
	free(out);
	assert_int_equal(submissions(), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s/%s'", l.root, IDEM_INDEX_DIR);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(store_import(&out, l.root, ""), 1);
	if (strstr(out, "is missing") == NULL)
		fail_msg("import without its index: %s", out);
	free(out);
	assert_int_equal(submissions(), 0);

	snprintf(cmd, sizeof cmd, "mv '%s.live-index' '%s/%s' && "
	    "rm -rf '%s.old-index'", l.root, l.root, IDEM_INDEX_DIR, l.root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(store_import(&out, l.root, ""), 0);
	assert_non_null(strstr(out, "60 effects added"));
	free(out);
	harness_finish(&l);
}

/*
 * A receipt's members but its result: a compacted effect keeps
 * result_digest in place of result (the local index's tombstone).
 */
static void
assert_same_but_result(const char *reply, const char *first)
{
	json_t	*a, *b, *ra, *rb;

	assert_non_null(a = json_loads(reply, 0, NULL));
	assert_non_null(b = json_loads(first, 0, NULL));
	ra = json_deep_copy(json_object_get(a, "receipt"));
	rb = json_deep_copy(json_object_get(b, "receipt"));
	assert_non_null(ra);
	assert_non_null(rb);
	assert_true(json_is_string(json_object_get(ra, "result_digest")));
	assert_int_equal(strlen(json_string_value(json_object_get(ra,
	    "result_digest"))), 64);
	assert_null(json_object_get(ra, "result"));
	json_object_del(ra, "result_digest");
	json_object_del(rb, "result");
	assert_true(json_equal(ra, rb));
	json_decref(ra);
	json_decref(rb);
	json_decref(a);
	json_decref(b);
}

/*
 * A local history's effects imported: committed ones (whole, or
 * compacted in the local index) answer reused on a PostgreSQL broker
 * with the local broker's receipt bytes; a released one's next begin
 * is attempt 2; another request is conflict; an unfinished effect is
 * refused, named, until it is settled; a second import changes nothing;
 * stats' store counts the effect rows.
 */
static void
import_effects_answers_byte_identical(void **state)
{
	static struct broker	 l;
	static struct node	 a;
	char			 id[32], to[64], *out, *at, *reply, *open;
	char			*local[IMPORT_EFFECTS], *before, *after;
	int			 local_pruned[IMPORT_EFFECTS];
	int			 i, compacted, pruned = 0;
	json_t			*s;

	(void)state;
	cluster_store_reset(&server);
	harness_fresh_root(&l);
	harness_must_start(&l, local_args, NULL);
	for (i = 0; i < IMPORT_EFFECTS; i++) {
		snprintf(id, sizeof id, "fx-%02d", i);
		snprintf(to, sizeof to, "ops-%d@example", i);
		free(fx_commit(&l, id, to));
	}
	/* Released: not_applied, so the next begin is attempt 2. */
	reply = raw_call(&l, fx_begin_request("fx-released", "nobody"));
	free(fx_complete(&l, "fx-released", reply, "not_applied", NULL));
	free(reply);
	/* The local index compacted, then every retry's answer recorded. */
	assert_int_equal(cluster_idemctl(&out, "--root '%s' compact --older-than 0",
	    l.root), 0);
	assert_non_null(at = strstr(out, "compact: "));
	compacted = atoi(at + strlen("compact: "));
	free(out);
	assert_true(compacted >= IMPORT_EFFECTS - 8);
	for (i = 0; i < IMPORT_EFFECTS; i++) {
		snprintf(id, sizeof id, "fx-%02d", i);
		snprintf(to, sizeof to, "ops-%d@example", i);
		local[i] = raw_call(&l, fx_begin_request(id, to));
		if (strstr(local[i], "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s: %s", id, local[i]);
		local_pruned[i] = strstr(local[i], "\"receipt_pruned\":true") !=
		    NULL;
	}
	/* An unfinished effect: reserved, its owner gone. */
	open = raw_call(&l, fx_begin_request("fx-open", "later"));
	assert_non_null(strstr(open, "\"disposition\":\"proceed\""));
	assert_int_equal(harness_stop(&l), 0);
	assert_int_equal(store_import(&out, l.root, ""), 1);
	assert_non_null(strstr(out, "unfinished: effect fx-open of kind "
	    FX_KIND " (reserved, attempt 1)"));
	assert_non_null(strstr(out, "1 unfinished effect in"));
	assert_non_null(strstr(out, "nothing was written"));
	free(out);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM idem_submission"),
	    0);
	/* As told: settled on the local idemd (its owner completes it). */
	harness_must_start(&l, local_args, NULL);
	holds(fx_complete(&l, "fx-open", open, "applied", "late"),
	    "\"state\":\"committed\"", NULL);
	assert_int_equal(harness_stop(&l), 0);
	assert_int_equal(store_import(&out, l.root, ""), 0);
	assert_non_null(strstr(out, "16 effects added"));
	free(out);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM idem_submission "
	    "WHERE kind = 3 AND scope = '" FX_KIND "' AND date = 0 AND "
	    "seq > 0"), IMPORT_EFFECTS + 2);
	/* A tombstone keeps its result's digest, never the result. */
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM idem_submission "
	    "WHERE kind = 3 AND state = 10 AND receipt IS NULL AND "
	    "file_digest IS NOT NULL"), compacted);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM idem_submission "
	    "WHERE kind = 3 AND state = 4 AND client_submission_id = "
	    "'fx-released' AND epoch = 1"), 1);
	/* A second import changes nothing. */
	before = store_dump();
	assert_int_equal(store_import(&out, l.root, ""), 0);
	assert_non_null(strstr(out, "0 effects added"));
	free(out);
	after = store_dump();
	assert_string_equal(before, after);
	free(before);
	free(after);

	cluster_node_init(&a, server.uri, l.root, "a");
	cluster_node_start_one_worker(&a);
	for (i = 0; i < IMPORT_EFFECTS; i++) {
		snprintf(id, sizeof id, "fx-%02d", i);
		snprintf(to, sizeof to, "ops-%d@example", i);
		reply = raw_call(&a.b, fx_begin_request(id, to));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		if (strstr(reply, "\"receipt_pruned\":true") != NULL) {
			pruned++;
			if (local_pruned[i])
				assert_same_receipt(reply, local[i]);
			else	/* the table held it whole, the index not */
				assert_same_but_result(reply, local[i]);
		} else {
			assert_false(local_pruned[i]);
			assert_same_receipt(reply, local[i]);
		}
		free(reply);
		/* Another request under it: conflict. */
		holds(raw_call(&a.b, fx_begin_request(id, "someone-else")),
		    "\"reason\":\"digest_mismatch\"", NULL);
	}
	assert_int_equal(pruned, compacted);
	holds(raw_call(&a.b, fx_begin_request("fx-open", "later")),
	    "\"disposition\":\"reused\"", "\"result\":{\"status\":\"late\"}",
	    NULL);
	reply = raw_call(&a.b, fx_begin_request("fx-released", "nobody"));
	assert_non_null(strstr(reply, "\"disposition\":\"proceed\""));
	assert_non_null(strstr(reply, "\"attempt\":2"));
	free(fx_complete(&a.b, "fx-released", reply, "applied", "now"));
	free(reply);
	/* stats: every row is an effect, all settled. */
	s = stats_store(&a.b);
	assert_int_equal(harness_int(s, "effects"), IMPORT_EFFECTS + 2);
	json_decref(s);
	assert_store_counts(&a.b, IMPORT_EFFECTS + 2, IMPORT_EFFECTS + 2 -
	    compacted, 0, compacted);
	cluster_node_kill(&a);
	for (i = 0; i < IMPORT_EFFECTS; i++)
		free(local[i]);
	free(open);
	harness_finish(&l);
}

/*
 * idemctl compact --store tombstones committed effects: a retry on
 * another broker and on a restarted one answers reused, action_taken
 * false, receipt_pruned, result_digest in place of result (as the local
 * store's index tombstone); another digest is conflict; a complete with
 * the first fence and result is the same receipt, another result
 * already_committed; stats counts them.  Retried whole on b before the
 * compaction: the first retry reads the row and caches it, the next two
 * are answered by the fast path; after the compaction b answers that
 * one whole still, from its cache (a body cached before a compaction
 * answers on that broker until it leaves the table or the broker
 * restarts, as a creation's: doc/cluster.md, "Tombstones"), the two it
 * never cached pruned.
 */
static void
compact_effects_on_store(void **state)
{
	static struct node	 a, b;
	static struct broker	 root;
	char			 id[32], to[64], *out, *first[3], *reply;
	char			*proceed0;
	json_t			*r, *s;
	int			 i;

	(void)state;
	cluster_start_two(&server, &root, &a, &b);
	proceed0 = raw_call(&a.b, fx_begin_request("cfx-0", "x-0"));
	first[0] = fx_complete(&a.b, "cfx-0", proceed0, "applied", "x-0");
	for (i = 1; i < 3; i++) {
		snprintf(id, sizeof id, "cfx-%d", i);
		snprintf(to, sizeof to, "x-%d", i);
		first[i] = fx_commit(&a.b, id, to);
	}
	/* One in flight, not compacted. */
	holds(raw_call(&a.b, fx_begin_request("cfx-open", "y")),
	    "\"disposition\":\"proceed\"", NULL);
	for (i = 0; i < 3; i++) {
		reply = raw_call(&b.b, fx_begin_request("cfx-1", "x-1"));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		assert_null(strstr(reply, "\"receipt_pruned\""));
		free(reply);
	}
	s = stats_store(&b.b);
	assert_int_equal(harness_int(s, "effects"), 4);
	json_decref(s);
	assert_store_counts(&b.b, 4, 3, 1, 0);
	assert_int_equal(cluster_idemctl(&out, "compact --older-than 0 --store '%s' "
	    "--root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "compact: 3 receipts pruned"));
	free(out);
	assert_store_counts(&a.b, 4, 0, 1, 3);
	cluster_node_kill(&a);
	cluster_node_start_one_worker(&a);
	for (i = 0; i < 6; i++) {
		struct node *n = i < 3 ? &b : &a;

		snprintf(id, sizeof id, "cfx-%d", i % 3);
		snprintf(to, sizeof to, "x-%d", i % 3);
		reply = raw_call(&n->b, fx_begin_request(id, to));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		assert_non_null(strstr(reply, "\"action_taken\":false"));
		if (i == 1) {
			/* b's cached body: whole, the commit's receipt. */
			assert_null(strstr(reply, "\"receipt_pruned\""));
			assert_same_receipt(reply, first[1]);
			free(reply);
			holds(raw_call(&n->b, fx_begin_request(id, "other")),
			    "\"reason\":\"digest_mismatch\"", NULL);
			continue;
		}
		assert_non_null(strstr(reply, "\"receipt_pruned\":true"));
		assert_same_but_result(reply, first[i % 3]);
		free(reply);
		holds(raw_call(&n->b, fx_begin_request(id, "other")),
		    "\"reason\":\"digest_mismatch\"", NULL);
	}
	/* The first fence and result: the same (pruned) receipt. */
	reply = fx_complete(&b.b, "cfx-0", proceed0, "applied", "x-0");
	assert_non_null(strstr(reply, "\"receipt_pruned\":true"));
	assert_same_but_result(reply, first[0]);
	free(reply);
	holds(fx_complete(&b.b, "cfx-0", proceed0, "applied", "changed"),
	    "\"reason\":\"already_committed\"", NULL);
	r = harness_must_call(&b.b, json_pack("{s:s,s:i,s:s,s:s}", "op",
	    "get_submission", "id", 2, "client_submission_id", "cfx-1",
	    "effect_kind", FX_KIND));
	assert_true(json_is_true(json_object_get(json_object_get(r,
	    "submission"), "receipt_pruned")));
	assert_non_null(json_object_get(json_object_get(json_object_get(r,
	    "submission"), "receipt"), "result_digest"));
	json_decref(r);
	assert_store_counts(&b.b, 4, 0, 1, 3);
	/* diagnose lists what is unfinished: the open one, no tombstone. */
	r = harness_must_call(&b.b, json_pack("{s:s}", "op", "diagnose"));
	assert_int_equal(json_array_size(json_object_get(r, "entries")), 1);
	assert_string_equal(harness_str(json_array_get(json_object_get(r,
	    "entries"), 0), "client_submission_id"), "cfx-open");
	json_decref(r);
	assert_int_equal(cluster_idemctl(&out, "--json compact --older-than 0 --store "
	    "'%s' --root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "\"pruned\":0"));
	free(out);
	/* a, restarted, read only tombstones; b's cfx-1 fast three times. */
	assert_int_equal(effects_reused_fast(&a.b), 0);
	assert_int_equal(effects_reused_fast(&b.b), 3);
	for (i = 0; i < 3; i++)
		free(first[i]);
	free(proceed0);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	harness_finish(&root);
}

/*
 * PostgreSQL stopped during effect ops: begin, complete, resolve and
 * get_submission answer storage_unavailable (retryable), nothing
 * changes, but a begin of an effect this broker committed (cached) is
 * answered reused; once it is back the retries complete as SPEC.md
 * says, and get_submission answers again (its read thread connects
 * anew).
 */
static void
effect_ops_during_outage(void **state)
{
	static struct node	 a;
	static struct broker	 root;
	char			*proceed, *committed, *reply;
	json_t			*r;

	(void)state;
	cluster_store_reset(&server);
	harness_fresh_root(&root);
	cluster_node_init(&a, server.uri, root.root, "a");
	cluster_node_start_one_worker(&a);
	committed = fx_commit(&a.b, "ofx-done", "done");
	proceed = raw_call(&a.b, fx_begin_request("ofx-open", "open"));
	assert_non_null(strstr(proceed, "\"disposition\":\"proceed\""));
	assert_int_equal(pgserver_stop(&server, 0), 0);
	holds(raw_call(&a.b, fx_begin_request("ofx-new", "new")),
	    "\"code\":\"storage_unavailable\"", "\"retryable\":true", NULL);
	/* Committed here, cached: its retry needs no server. */
	reply = raw_call(&a.b, fx_begin_request("ofx-done", "done"));
	assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
	assert_same_receipt(reply, committed);
	free(reply);
	holds(fx_complete(&a.b, "ofx-open", proceed, "applied", "open"),
	    "\"code\":\"storage_unavailable\"", "\"retryable\":true", NULL);
	holds(raw_call(&a.b, json_pack("{s:s, s:s, s:s, s:{s:s, s:{s:s}}}",
	    "op", "effect_resolve", "client_submission_id", "ofx-open",
	    "effect_kind", FX_KIND, "evidence", "observed", "applied", "result",
	    "status", "open")), "\"code\":\"storage_unavailable\"",
	    "\"retryable\":true", NULL);
	r = harness_must_call(&a.b, json_pack("{s:s,s:i,s:s,s:s}", "op",
	    "get_submission", "id", 2, "client_submission_id", "ofx-open",
	    "effect_kind", FX_KIND));
	harness_assert_bool(r, "ok", 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    r, "error"), "code")), "storage_unavailable");
	json_decref(r);
	assert_int_equal(pgserver_restart(&server), 0);
	/* Nothing moved: the owner's complete goes through, once. */
	holds(fx_complete(&a.b, "ofx-open", proceed, "applied", "open"),
	    "\"state\":\"committed\"", "\"action_taken\":true", NULL);
	holds(raw_call(&a.b, fx_begin_request("ofx-new", "new")),
	    "\"disposition\":\"proceed\"", "\"attempt\":1", NULL);
	reply = raw_call(&a.b, fx_begin_request("ofx-done", "done"));
	assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
	assert_same_receipt(reply, committed);
	free(reply);
	/* The read thread's connection, lost with the server, is made again. */
	r = harness_must_call(&a.b, json_pack("{s:s,s:i,s:s,s:s}", "op",
	    "get_submission", "id", 3, "client_submission_id", "ofx-open",
	    "effect_kind", FX_KIND));
	harness_assert_bool(r, "found", 1);
	assert_string_equal(harness_str(json_object_get(r, "submission"),
	    "state"), "committed");
	json_decref(r);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM idem_submission "
	    "WHERE kind = 3 AND state = 3"), 2);
	free(proceed);
	free(committed);
	cluster_node_kill(&a);
	harness_finish(&root);
}

static void
compact_then_retry_on_any_broker(void **state)
{
	static struct node	 a, b;
	static struct broker	 root;
	char			 id[32], *out, *first[3], *reply;
	json_t			*want, *got, *r;
	int			 i;

	(void)state;
	cluster_start_two(&server, &root, &a, &b);
	for (i = 0; i < 3; i++) {
		snprintf(id, sizeof id, "cmp-%d", i);
		first[i] = raw_call(&a.b, harness_write_task(id, "Compact me"));
		assert_non_null(strstr(first[i], "\"disposition\":\"created\""));
	}
	/* In flight: a reservation whose owner never goes on. */
	free(cluster_sql_value(&server, "INSERT INTO idem_submission SELECT "
	    "workspace_id, kind, scope, 'in-flight', digest_schema, "
	    "request_digest, 1, date, 900, 'TASK-x', 'x', sender, recipient, "
	    "created_at_ms, reserved_at, updated_at, NULL, NULL, 1, 'gone', "
	    "'token', NULL, NULL, clock_timestamp() + interval '1 hour', "
	    "false FROM idem_submission WHERE client_submission_id = 'cmp-0'"));
	assert_store_counts(&b.b, 4, 3, 1, 0);
	assert_int_equal(cluster_idemctl(&out, "compact --older-than 0 "
	    "--store '%s' --root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "compact: 3 receipts pruned"));
	free(out);
	free(cluster_sql_value(&server, "DELETE FROM idem_submission WHERE "
	    "client_submission_id = 'in-flight'"));
	assert_store_counts(&a.b, 3, 0, 0, 3);
	/* b never cached them; a is restarted, its cache gone. */
	cluster_node_kill(&a);
	cluster_node_start_one_worker(&a);
	for (i = 0; i < 6; i++) {
		struct node *n = i < 3 ? &b : &a;

		snprintf(id, sizeof id, "cmp-%d", i % 3);
		reply = raw_call(&n->b, harness_write_task(id, "Compact me"));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		assert_non_null(strstr(reply, "\"receipt_pruned\":true"));
		/* The tombstone's facts: the first receipt but its file digest. */
		assert_non_null(r = json_loads(first[i % 3], 0, NULL));
		want = json_deep_copy(json_object_get(r, "receipt"));
		json_decref(r);
		json_object_del(want, "file_digest");
		assert_non_null(r = json_loads(reply, 0, NULL));
		got = json_object_get(r, "receipt");
		assert_true(json_equal(want, got));
		assert_null(json_object_get(got, "file_digest"));
		json_decref(want);
		json_decref(r);
		free(reply);
		/* Another request under it: still a conflict. */
		holds(raw_call(&n->b, harness_write_task(id, "Other")),
		    "\"reason\":\"digest_mismatch\"", NULL);
	}
	/* get_submission shows the tombstone as the local store does. */
	r = harness_must_call(&b.b, json_pack("{s:s,s:i,s:s}", "op",
	    "get_submission", "id", 2, "client_submission_id", "cmp-1"));
	assert_true(json_is_true(json_object_get(json_object_get(r,
	    "submission"), "receipt_pruned")));
	json_decref(r);
	/* Never a second execution. */
	assert_int_equal(harness_count_tasks(&a.b), 3);
	assert_store_counts(&b.b, 3, 0, 0, 3);
	/* A second compaction finds nothing left. */
	assert_int_equal(cluster_idemctl(&out, "--json compact --older-than 0 "
	    "--store '%s' --root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "\"pruned\":0"));
	free(out);
	/* PostgreSQL down: stats answers its own figures, store null. */
	assert_int_equal(pgserver_stop(&server, 0), 0);
	r = harness_must_call(&b.b, json_pack("{s:s,s:i}", "op", "stats",
	    "id", 3));
	harness_assert_bool(r, "ok", 1);
	assert_true(json_is_null(json_object_get(r, "store")));
	assert_non_null(json_object_get(r, "created"));
	json_decref(r);
	assert_int_equal(pgserver_restart(&server), 0);
	assert_store_counts(&b.b, 3, 0, 0, 3);
	for (i = 0; i < 3; i++)
		free(first[i]);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	harness_finish(&root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    import_local_history_answers_byte_identical, setup,
		    cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    conflicting_import_writes_nothing, setup,
		    cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(unfinished_history_is_refused,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    compact_then_retry_on_any_broker, setup,
		    cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    import_effects_answers_byte_identical, setup,
		    cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    import_refuses_an_index_that_lacks_receipts, setup,
		    cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(compact_effects_on_store,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(effect_ops_during_outage,
		    setup, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
