/* SPDX-License-Identifier: ISC */
/*
 * test_pghistory: the history on the PostgreSQL store (doc/cluster.md,
 * "History"), with real brokers and a private server
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
 * - a history with an unfinished submission is refused, naming it; one
 *   with effect receipts only with --without-effects;
 * - idemctl compact --store: a retry on a second broker and on the first
 *   after a restart answers reused, receipt_pruned and the tombstone's
 *   facts, another digest still conflict, never a second file; stats'
 *   "store" counts the workspace's rows from any broker, and is null
 *   while PostgreSQL is down.
 */
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include <sodium.h>

#include "idem.h"
#include "harness.h"
#include "pgserver.h"
#include "shm.h"

#ifndef HAVE_POSTGRESQL
int
main(void)
{
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#else

static struct pgserver	server;

/* Enough ids past a capacity of 8 that most live only in the index. */
#define IMPORT_TASKS		30
#define LOCAL_CAPACITY		"8"
/* table_full while a checkpoint makes room: the client's retry. */
#define FULL_RETRY_US		2000
#define FULL_MAX_RETRIES	5000

static const char *const local_args[] = { "--capacity", LOCAL_CAPACITY,
    NULL };

struct node {
	struct broker	b;
	char		host[16];
	int		live;
};

static struct node	*live_nodes[4];

static void
node_init(struct node *n, const char *root, const char *host)
{
	memset(n, 0, sizeof *n);
	snprintf(n->host, sizeof n->host, "%s", host);
	snprintf(n->b.root, sizeof n->b.root, "%s", root);
	snprintf(n->b.socket, sizeof n->b.socket, "%s/.idem/hosts/%s/idemd.sock",
	    root, host);
	snprintf(n->b.log, sizeof n->b.log, "%s.%s.log", root, host);
}

static void
node_start(struct node *n)
{
	const char *const args[] = { "--store", server.uri, "--host-id",
	    n->host, "--workers", "1", NULL };
	size_t	i;

	for (i = 0; i < sizeof live_nodes / sizeof live_nodes[0]; i++)
		if (live_nodes[i] == NULL || live_nodes[i] == n) {
			live_nodes[i] = n;
			break;
		}
	assert_int_equal(harness_start(&n->b, args, NULL), 0);
}

/* Killed, its workers gone (the host's lock), its segment removed. */
static void
node_kill(struct node *n)
{
	char	path[512], name[64], *real;
	size_t	i;
	int	fd;

	if (n->b.pid != 0)
		harness_kill(&n->b);
	snprintf(path, sizeof path, "%s/.idem/hosts/%s/idemd.lock", n->b.root,
	    n->host);
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) != -1) {
		while (flock(fd, LOCK_EX) == -1 && errno == EINTR)
			;
		close(fd);
	}
	if ((real = realpath(n->b.root, NULL)) != NULL) {
		snprintf(path, sizeof path, "%s/.idem/hosts/%s", real,
		    n->host);
		free(real);
		shm_name_for_root(path, name);
		(void)shm_unlink(name);
	}
	for (i = 0; i < sizeof live_nodes / sizeof live_nodes[0]; i++)
		if (live_nodes[i] == n)
			live_nodes[i] = NULL;
}

static int
setup(void **state)
{
	(void)state;
	harness_watchdog(300);
	return 0;
}

static int
teardown(void **state)
{
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof live_nodes / sizeof live_nodes[0]; i++)
		if (live_nodes[i] != NULL)
			node_kill(live_nodes[i]);
	return 0;
}

static void
store_reset(void)
{
	char	*out;

	out = pgserver_psql(&server, "DELETE FROM idem_submission; "
	    "DELETE FROM idem_counter; DELETE FROM idem_legacy");
	assert_non_null(out);
	free(out);
}

/* psql's output of sql (malloc'd), failing the test if psql fails. */
static char *
psql(const char *fmt, ...)
{
	char	sql[2048], *out;
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof sql, fmt, ap);
	va_end(ap);
	assert_non_null(out = pgserver_psql(&server, sql));
	return out;
}

static long
psql_count(const char *fmt, ...)
{
	char	sql[2048], *out;
	long	n;
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof sql, fmt, ap);
	va_end(ap);
	assert_non_null(out = pgserver_psql(&server, sql));
	n = strtol(out, NULL, 10);
	free(out);
	return n;
}

/* idemctl ARGS; its exit status, its stdout and stderr in out. */
static int
idemctl(char **out, const char *fmt, ...)
{
	char	args[1024], cmd[1536], buf[16384];
	FILE	*fp;
	size_t	 n;
	int	 status;
	va_list	 ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", getenv("IDEMCTL"), args);
	assert_non_null(fp = popen(cmd, "r"));
	n = fread(buf, 1, sizeof buf - 1, fp);
	buf[n] = '\0';
	status = pclose(fp);
	fprintf(stderr, "idemctl %s:\n%s", args, buf);
	*out = strdup(buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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

/* The receipt's bytes in a raw write_task reply (its last member). */
static const char *
receipt_bytes(const char *reply)
{
	const char	*r = strstr(reply, "\"receipt\":{");

	if (r == NULL)
		fail_msg("no receipt in %s", reply);
	return r;
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
	return psql("SELECT kind, scope, client_submission_id, "
	    "digest_schema, request_digest, state, date, seq, task_id, "
	    "created_at_ms, reserved_at, updated_at, file_digest, receipt, "
	    "epoch FROM idem_submission ORDER BY 1, 2, 3; SELECT * FROM "
	    "idem_counter ORDER BY 1, 2, 3; SELECT * FROM idem_legacy "
	    "ORDER BY 1, 2, 3, 4");
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
	reply = raw_call(&l->b, harness_write_task(NULL, "A legacy call"));
	assert_non_null(strstr(reply, "\"ok\":true"));
	free(reply);
	assert_non_null(r = json_loads(l->created[0], 0, NULL));
	snprintf(l->task0, sizeof l->task0, "%s", harness_receipt_str(r,
	    "task_id"));
	json_decref(r);
	l->report = raw_call(&l->b, report_request(l->task0));
	assert_non_null(strstr(l->report, "\"deduplicated\":false"));
	/* The index compacted, the broker running (it may). */
	assert_int_equal(idemctl(&out, "--root '%s' compact --older-than 0",
	    l->b.root), 0);
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
	const char	*r = receipt_bytes(created), *fd, *end;
	char		*out;

	assert_non_null(fd = strstr(r, "\"file_digest\":\""));
	assert_non_null(end = strchr(fd + strlen("\"file_digest\":\""), '"'));
	end += 2;	/* the closing quote and the comma */
	assert_non_null(out = malloc(strlen(r) + 1));
	memcpy(out, r, (size_t)(fd - r));
	strcpy(out + (fd - r), end);
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
	char			 id[32], subject[64], *out, *before, *after;
	char			*reply, today[9], *expected;
	json_t			*r;
	long			 next_seq;
	int			 i, pruned;

	(void)state;
	store_reset();
	memset(&l, 0, sizeof l);
	local_history(&l);
	/* Refused while the local idemd holds the root: nothing written. */
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, l.b.root), 1);
	assert_non_null(strstr(out, "in use by a local idemd"));
	free(out);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission"),
	    0);
	assert_int_equal(harness_stop(&l.b), 0);

	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, l.b.root), 0);
	/*
	 * The legacy call is a record, or, past a checkpoint, only the
	 * allocator's position: the counter below passes it either way.
	 */
	assert_non_null(strstr(out, "31 submissions added, "));
	assert_non_null(strstr(out, ", 0 already"));
	free(out);
	/* The tasks and the report, its task as its scope. */
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission"),
	    IMPORT_TASKS + 1);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE kind = 2 AND scope = '%s' AND client_submission_id = "
	    "'rep-1'", l.task0), 1);
	/* The index's tombstones as tombstones, the rest with receipts. */
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE state = 10 AND receipt IS NULL AND file_digest IS NULL"),
	    l.compacted);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE state = 3 AND receipt IS NOT NULL"),
	    IMPORT_TASKS + 1 - l.compacted);
	/* The counter is past every number: the 30 ids and the legacy one. */
	harness_today(today);
	next_seq = psql_count("SELECT next_seq FROM idem_counter WHERE "
	    "kind = 1 AND date = %s", today);
	if (next_seq == 0)
		harness_skip("the date moved during the test");
	assert_int_equal(next_seq, IMPORT_TASKS + 2);

	/* A second import changes nothing. */
	before = store_dump();
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, l.b.root), 0);
	assert_non_null(strstr(out, "0 submissions added, 0 legacy numbers "
	    "added, "));
	free(out);
	after = store_dump();
	assert_string_equal(before, after);
	free(before);
	free(after);

	/*
	 * A broker on PostgreSQL answers as the local one does, byte for
	 * byte: the first receipt, or, compacted, its tombstone (a receipt
	 * the local table still held whole is a tombstone all the same).
	 */
	node_init(&a, l.b.root, "a");
	node_start(&a);
	for (i = 0, pruned = 0; i < IMPORT_TASKS; i++) {
		snprintf(id, sizeof id, "imp-%02d", i);
		snprintf(subject, sizeof subject, "Imported %d", i);
		reply = raw_call(&a.b, harness_write_task(id, subject));
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		if (strstr(reply, "\"receipt_pruned\":true") != NULL) {
			pruned++;
			expected = pruned_bytes(l.created[i]);
			assert_string_equal(receipt_bytes(reply), expected);
			free(expected);
		} else {
			assert_false(l.local_pruned[i]);
			assert_string_equal(receipt_bytes(reply),
			    receipt_bytes(l.created[i]));
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
	reply = raw_call(&a.b, harness_write_task("imp-03", "Other content"));
	assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
	free(reply);
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
	node_kill(&a);
	local_free(&l);
	harness_finish(&l.b);
}

static void
conflicting_import_writes_nothing(void **state)
{
	static struct broker	 b;
	char			 id[32], *out, *before, *after, *reply;
	int			 i;

	(void)state;
	store_reset();
	harness_fresh_root(&b);
	harness_must_start(&b, NULL, NULL);
	for (i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "conf-%d", i);
		reply = raw_call(&b, harness_write_task(id, "Conflict"));
		assert_non_null(strstr(reply, "\"disposition\":\"created\""));
		free(reply);
	}
	assert_int_equal(harness_stop(&b), 0);
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 0);
	free(out);
	/*
	 * The store now binds conf-1 to another request, and lost conf-3
	 * and the counter: an import would add those, but conflicts.
	 */
	free(psql("UPDATE idem_submission SET request_digest = repeat('0', "
	    "64) WHERE client_submission_id = 'conf-1'; DELETE FROM "
	    "idem_submission WHERE client_submission_id = 'conf-3'; DELETE "
	    "FROM idem_counter"));
	before = store_dump();
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 1);
	assert_non_null(strstr(out, "conflict: conf-1"));
	assert_non_null(strstr(out, "nothing was written"));
	free(out);
	after = store_dump();
	assert_string_equal(before, after);
	free(before);
	free(after);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE client_submission_id = 'conf-3'"), 0);
	/* Another submission on an imported number: a conflict too. */
	free(psql("UPDATE idem_submission SET request_digest = (SELECT "
	    "request_digest FROM idem_submission WHERE client_submission_id "
	    "= 'conf-0'), client_submission_id = 'someone-else' WHERE "
	    "client_submission_id = 'conf-1'"));
	before = store_dump();
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 1);
	assert_non_null(strstr(out, "is another submission's in the store: "
	    "someone-else"));
	free(out);
	after = store_dump();
	assert_string_equal(before, after);
	free(before);
	free(after);
	harness_finish(&b);
}

static void
unfinished_history_is_refused(void **state)
{
	static struct broker	 b;
	char			*out, *reply, *line;
	json_t			*request;
	int			 fd;

	(void)state;
	store_reset();
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
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 1);
	assert_non_null(strstr(out, "unfinished: half-done"));
	assert_non_null(strstr(out, "start the local idemd once"));
	free(out);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission"),
	    0);
	/* As told: the local idemd once (the retry finishes it), then import. */
	harness_must_start(&b, NULL, NULL);
	reply = raw_call(&b, harness_write_task("half-done", "Unfinished"));
	assert_non_null(strstr(reply, "\"ok\":true"));
	free(reply);
	assert_int_equal(harness_stop(&b), 0);
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 0);
	free(out);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE client_submission_id = 'half-done' AND state = 3"), 1);
	harness_finish(&b);
}

/* Effects cannot move yet: refused, unless the operator leaves them. */
static void
effects_are_left_only_when_asked(void **state)
{
	static struct broker	 b;
	char			*out, *reply, fence[64];
	json_t			*r;

	(void)state;
	store_reset();
	harness_fresh_root(&b);
	harness_must_start(&b, NULL, NULL);
	reply = raw_call(&b, harness_write_task("fx-task", "With effects"));
	assert_non_null(strstr(reply, "\"disposition\":\"created\""));
	free(reply);
	reply = raw_call(&b, json_pack("{s:s, s:s, s:s, s:{s:s}}", "op",
	    "effect_begin", "client_submission_id", "fx-1", "effect_kind",
	    "mail.send/v1", "request", "to", "ops@example"));
	assert_non_null(r = json_loads(reply, 0, NULL));
	assert_string_equal(harness_str(r, "disposition"), "proceed");
	snprintf(fence, sizeof fence, "%s", harness_str(r, "fence"));
	json_decref(r);
	free(reply);
	reply = raw_call(&b, json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:s}}",
	    "op", "effect_complete", "client_submission_id", "fx-1",
	    "effect_kind", "mail.send/v1", "fence", fence, "outcome",
	    "applied", "result", "status", "sent"));
	assert_non_null(strstr(reply, "\"state\":\"committed\""));
	free(reply);
	assert_int_equal(harness_stop(&b), 0);
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s'",
	    server.uri, b.root), 1);
	assert_non_null(strstr(out, "1 effect receipt, which"));
	assert_non_null(strstr(out, "nothing was written"));
	free(out);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission"),
	    0);
	assert_int_equal(idemctl(&out, "store import --store '%s' --root '%s' "
	    "--without-effects", server.uri, b.root), 0);
	assert_non_null(strstr(out, "1 submission added"));
	assert_non_null(strstr(out, "1 effect receipt not imported"));
	free(out);
	assert_int_equal(psql_count("SELECT count(*) FROM idem_submission "
	    "WHERE client_submission_id = 'fx-task' AND state = 3"), 1);
	harness_finish(&b);
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
	store_reset();
	harness_fresh_root(&root);
	node_init(&a, root.root, "a");
	node_init(&b, root.root, "b");
	node_start(&a);
	node_start(&b);
	for (i = 0; i < 3; i++) {
		snprintf(id, sizeof id, "cmp-%d", i);
		first[i] = raw_call(&a.b, harness_write_task(id, "Compact me"));
		assert_non_null(strstr(first[i], "\"disposition\":\"created\""));
	}
	/* In flight: a reservation whose owner never goes on. */
	free(psql("INSERT INTO idem_submission SELECT workspace_id, kind, "
	    "scope, 'in-flight', digest_schema, request_digest, 1, date, "
	    "900, 'TASK-x', 'x', sender, recipient, created_at_ms, "
	    "reserved_at, updated_at, NULL, NULL, 1, 'gone', 'token', NULL, "
	    "NULL, clock_timestamp() + interval '1 hour', false FROM "
	    "idem_submission WHERE client_submission_id = 'cmp-0'"));
	assert_store_counts(&b.b, 4, 3, 1, 0);
	assert_int_equal(idemctl(&out, "compact --older-than 0 --store '%s' "
	    "--root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "compact: 3 receipts pruned"));
	free(out);
	free(psql("DELETE FROM idem_submission WHERE client_submission_id = "
	    "'in-flight'"));
	assert_store_counts(&a.b, 3, 0, 0, 3);
	/* b never cached them; a is restarted, its cache gone. */
	node_kill(&a);
	node_start(&a);
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
		reply = raw_call(&n->b, harness_write_task(id, "Other"));
		assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
		free(reply);
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
	assert_int_equal(idemctl(&out, "--json compact --older-than 0 --store "
	    "'%s' --root '%s'", server.uri, root.root), 0);
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
	node_kill(&a);
	node_kill(&b);
	harness_finish(&root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    import_local_history_answers_byte_identical, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    conflicting_import_writes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(unfinished_history_is_refused,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    effects_are_left_only_when_asked, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    compact_then_retry_on_any_broker, setup, teardown),
	};
	const char	*reason;
	char		 cmd[1024];
	int		 rc, failed;

	if (sodium_init() < 0)
		return 1;
	if (getenv("IDEM_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("IDEM_TEST_FILTER"));
	if ((rc = pgserver_start(&server, &reason)) == 77)
		return pgserver_skip_status(reason);
	if (rc != 0) {
		fprintf(stderr, "pgserver_start: %s\n", reason);
		pgserver_destroy(&server, 1);
		return 1;
	}
	snprintf(cmd, sizeof cmd, "'%s' store init --store '%s' >/dev/null",
	    getenv("IDEMCTL"), server.uri);
	if (system(cmd) != 0) {
		fprintf(stderr, "idemctl store init failed\n");
		pgserver_destroy(&server, 1);
		return 1;
	}
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	harness_watchdog(0);
	pgserver_destroy(&server, failed != 0);
	return harness_exit_status(failed);
}
#endif
