/* SPDX-License-Identifier: ISC */
/*
 * test_pgstore: the PostgreSQL store's steps (broker/pg/store/pg_conn.c)
 * against a real server (tests/cluster/pgserver.c): idemctl store init and
 * migrate, the schema check at open, reservation (one row, one number,
 * numbers past the disk's, the day used up), the fence on grant and
 * commit, takeover only after the lease by the server's clock or once
 * the owner's session is gone, numbers never twice under concurrent
 * reservers in several processes, a lost race leaving no gap, a counter
 * behind its rows raised past them, a claim whose counter update fails
 * inserting nothing, and claims (committed without waiting for the WAL
 * flush) durable once granted across a server crash.
 */
#include <sys/wait.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "integration/filter.h"
#include "cluster_harness.h"

#ifndef HAVE_POSTGRESQL
int
main(void)
{
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#else

#include <libpq-fe.h>

#include "pg.h"
#include "store.h"

static struct pgserver	server;
static const char	workspace[] = "0b7c8a3e-54a1-4c5e-9d2f-3a1b2c3d4e5f";

static uint32_t	disk_max;

static int
scan_disk(enum subtab_kind kind, uint32_t date, uint32_t *max, void *arg)
{
	(void)kind;
	(void)date;
	(void)arg;
	*max = disk_max;
	return 0;
}

static void
open_store(struct pgstore *st, const char *host, int lease_ms)
{
	char	*cause = NULL;

	memset(st, 0, sizeof *st);
	snprintf(st->workspace, sizeof st->workspace, "%s", workspace);
	snprintf(st->host, sizeof st->host, "%s", host);
	st->lease_ms = lease_ms;
	st->max_seq = 999;
	st->scan = scan_disk;
	if (pgstore_open(st, server.uri, &cause) != 0)
		fail_msg("pgstore_open: %s", cause);
}

static void
want_entry(struct subtab_entry *e, const char *digest_seed)
{
	memset(e, 0, sizeof *e);
	e->schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	crypto_hash_sha256(e->request_digest, (const uint8_t *)digest_seed,
	    strlen(digest_seed));
	memcpy(e->sender, "PM", 2);
	e->sender_length = 2;
	memcpy(e->recipient, "DEV", 3);
	e->recipient_length = 3;
}

/* q's first line of output (malloc'd); q is not a format. */
static char *
sql(const char *q)
{
	return cluster_sql_value(&server, "%s", q);
}

static void
assert_sql(const char *q, const char *expected)
{
	char	*out = sql(q);

	if (strcmp(out, expected) != 0)
		fail_msg("%s gave \"%s\", not \"%s\"", q, out, expected);
	free(out);
}

/* Runs first: the other tests need the schema. */
static void
store_init_and_migrate(void **state)
{
	struct pgstore	 st;
	char		*out, args[1024], root[] = "/tmp/idem-ws.XXXXXX";
	char		*cause = NULL, id1[64], id2[64], want[160];

	(void)state;
	/* Before init, idemd's open is refused naming the command. */
	memset(&st, 0, sizeof st);
	assert_int_equal(pgstore_open(&st, server.uri, &cause), -1);
	assert_non_null(strstr(cause, "idemctl store init"));
	free(cause);
	pgstore_close(&st);

	assert_non_null(mkdtemp(root));
	snprintf(args, sizeof args, "store init --store '%s' --root %s",
	    server.uri, root);
	assert_int_equal(cluster_idemctl(&out, "%s", args), 0);
	snprintf(want, sizeof want, "schema: created, version %d",
	    PGSTORE_SCHEMA_VERSION);
	assert_non_null(strstr(out, want));
	assert_int_equal(sscanf(strstr(out, "workspace"), "workspace %*s %63s",
	    id1), 1);
	free(out);
	/* Again: nothing to do, the same workspace id. */
	assert_int_equal(cluster_idemctl(&out, "%s", args), 0);
	assert_non_null(strstr(out, "already current"));
	assert_int_equal(sscanf(strstr(out, "workspace"), "workspace %*s %63s",
	    id2), 1);
	assert_string_equal(id1, id2);
	assert_int_equal(strlen(id1), 36);
	free(out);
	snprintf(args, sizeof args, "store migrate --store '%s'", server.uri);
	assert_int_equal(cluster_idemctl(&out, "%s", args), 0);
	assert_non_null(strstr(out, "already current"));
	free(out);
	snprintf(want, sizeof want, "%d", PGSTORE_SCHEMA_VERSION);
	assert_sql("SELECT max(version) FROM idem_schema_version", want);
	/*
	 * From the version before the key's index (pg_schema.c's last
	 * migration): that migration alone, once.
	 */
	snprintf(want, sizeof want, "DROP INDEX idem_submission_key; "
	    "DELETE FROM idem_schema_version WHERE version = %d",
	    PGSTORE_SCHEMA_VERSION);
	free(sql(want));
	assert_int_equal(cluster_idemctl(&out, "%s", args), 0);
	snprintf(want, sizeof want, "migrated from version %d to %d",
	    PGSTORE_SCHEMA_VERSION - 1, PGSTORE_SCHEMA_VERSION);
	assert_non_null(strstr(out, want));
	free(out);
	assert_sql("SELECT count(*) FROM pg_indexes WHERE indexname = "
	    "'idem_submission_key'", "1");
	/* Usage errors. */
	assert_int_equal(cluster_idemctl(NULL, "store init"), 2);
	assert_int_equal(cluster_idemctl(NULL, "store frobnicate --store "
	    "postgresql:///x"), 2);
	/* An unreachable server: 3. */
	assert_int_equal(cluster_idemctl(NULL, "store init --store "
	    "'postgresql:///x?host=/nonexistent'"), 3);
	/* A newer schema is refused, by idemctl and by idemd's open. */
	free(sql("INSERT INTO idem_schema_version (version) VALUES (99)"));
	assert_int_equal(cluster_idemctl(&out, "%s", args), 1);
	assert_non_null(strstr(out, "newer"));
	free(out);
	assert_int_equal(pgstore_open(&st, server.uri, &cause), -1);
	assert_non_null(strstr(cause, "a newer idemd"));
	free(cause);
	pgstore_close(&st);
	free(sql("DELETE FROM idem_schema_version WHERE version = 99"));
	snprintf(args, sizeof args, "rm -rf %s", root);
	assert_int_equal(system(args), 0);
}

static void
reserve_grant_commit_fenced(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "run-1/a" };
	struct subtab_entry	 want;
	struct pgstore_row	 row, again;
	char			*cause = NULL, token[PGSTORE_TOKEN_BYTES + 1];
	uint8_t			 file_digest[32] = { 1 };

	(void)state;
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	want_entry(&want, "a");
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	assert_int_equal(row.entry.seq, 1);
	assert_int_equal(row.entry.state, SUBTAB_RESERVED);
	assert_int_equal(row.epoch, 1);
	assert_int_equal(strlen(row.token), PGSTORE_TOKEN_BYTES);
	/* The same key again: nothing changes, and no number is used. */
	assert_int_equal(pgstore_reserve(&st, &key, &want, &again, &cause), 0);
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_int_equal(again.entry.seq, 1);
	assert_int_equal(again.entry.created_at_ms, row.entry.created_at_ms);
	assert_memory_equal(again.entry.request_digest,
	    want.request_digest, 32);
	assert_string_equal(again.token, row.token);
	assert_true(again.owner_alive);
	assert_false(again.lease_granted);
	pgstore_row_clear(&again);
	/* A wrong token or epoch changes nothing. */
	pgstore_new_token(token);
	assert_int_equal(pgstore_grant(&st, &key, 1, token, &cause), 0);
	assert_int_equal(pgstore_grant(&st, &key, 2, row.token, &cause), 0);
	/* The grant in halves answers as the whole (cluster.c's way). */
	assert_int_equal(pgstore_grant_send(&st, &key, 2, row.token, &cause),
	    0);
	assert_int_equal(pgstore_grant_wait(&st, &key, 2, row.token, &cause),
	    0);
	assert_int_equal(pgstore_commit(&st, &key, 1, token, file_digest,
	    "{}", &cause), 0);
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_false(again.lease_granted);
	pgstore_row_clear(&again);
	assert_int_equal(pgstore_grant_send(&st, &key, 1, row.token, &cause),
	    0);
	assert_int_equal(pgstore_grant_wait(&st, &key, 1, row.token, &cause),
	    1);
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_true(again.lease_granted);
	pgstore_row_clear(&again);
	assert_int_equal(pgstore_grant(&st, &key, 1, row.token, &cause), 1);
	assert_int_equal(pgstore_commit(&st, &key, 1, row.token, file_digest,
	    "{\"receipt\":1}", &cause), 1);
	/* Committed: a second commit, even with the fence, changes nothing. */
	assert_int_equal(pgstore_commit(&st, &key, 1, row.token, file_digest,
	    "{\"other\":1}", &cause), 0);
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_int_equal(again.entry.state, SUBTAB_COMMITTED);
	assert_string_equal(again.receipt, "{\"receipt\":1}");
	assert_memory_equal(again.entry.file_digest, file_digest, 32);
	/* And no takeover of a committed row. */
	assert_int_equal(pgstore_takeover(&st, &key, 1, &row, &cause), 0);
	pgstore_row_clear(&again);
	pgstore_row_clear(&row);
	/* A report's key is apart from a task's with the same id. */
	key.kind = SUBTAB_KIND_REPORT;
	key.scope = "TASK-20261202-001-PM-to-DEV";
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	assert_int_equal(row.entry.seq, 1);	/* reports count apart */
	pgstore_row_clear(&row);
	pgstore_close(&st);
}

/*
 * Grants and commits in batches (pg_batch.c): each member's row changes
 * under its own fence, and only a member whose row changed comes back;
 * ids, scopes and receipts with the array syntax's own characters are
 * stored byte for byte; a session that lost the batch's statement says
 * so (the members then go alone) and prepares it again next time.
 */
static void
batches_fence_each_member(void **state)
{
	static const char *const ids[] = { "batch-1", "batch \"2\", {x}",
	    "batch\\3", "batch-4" };
	static const char *const receipts[] = { "{\"a\":\"q\\\"uote\"}",
	    "{\"b\":\"back\\\\slash, {brace}\"}", "{\"c\":\"\xc3\xa9\"}",
	    "{\"d\":4}" };
	struct pgstore		 st;
	struct pgstore_key	 keys[4];
	struct pgstore_batch_member m[5], *mp[5];
	struct pgstore_row	 rows[4], again;
	struct subtab_entry	 want;
	enum pgstore_batch_failure failure;
	uint8_t			 digest[32] = { 7 };
	char			*cause = NULL, stale[PGSTORE_TOKEN_BYTES + 1];
	PGresult		*res;
	int			 i;

	(void)state;
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	want_entry(&want, "batch");
	for (i = 0; i < 4; i++) {
		keys[i].kind = i == 3 ? SUBTAB_KIND_REPORT : SUBTAB_KIND_TASK;
		keys[i].scope = i == 3 ? "TASK-1 \"x\"" : "";
		keys[i].id = ids[i];
		assert_int_equal(pgstore_reserve(&st, &keys[i], &want, &rows[i],
		    &cause), 1);
	}
	/* Member 2 with a stale token; member 4 is member 0 stale, twice. */
	pgstore_new_token(stale);
	for (i = 0; i < 5; i++) {
		memset(&m[i], 0, sizeof m[i]);
		m[i].op = PGSTORE_OP_GRANT;
		m[i].key = &keys[i % 4];
		m[i].epoch = rows[i % 4].epoch;
		m[i].token = i == 2 || i == 4 ? stale : rows[i % 4].token;
		m[i].file_digest = digest;
		m[i].receipt = receipts[i % 4];
		mp[i] = &m[i];
	}
	assert_int_equal(pgstore_batch_send(&st, mp, 5, &cause), 0);
	assert_int_equal(pgstore_batch_wait(&st, mp, 5, &failure, &cause), 0);
	for (i = 0; i < 5; i++) {
		assert_int_equal(m[i].returned, i != 2 && i != 4);
		assert_int_equal(pgstore_read(&st, &keys[i % 4], &again,
		    &cause), 1);
		assert_int_equal(again.lease_granted, i % 4 != 2);
		pgstore_row_clear(&again);
	}
	/* The commits: the stale members change nothing. */
	for (i = 0; i < 5; i++)
		m[i].op = PGSTORE_OP_COMMIT;
	assert_int_equal(pgstore_batch_send(&st, mp, 5, &cause), 0);
	assert_int_equal(pgstore_batch_wait(&st, mp, 5, &failure, &cause), 0);
	for (i = 0; i < 4; i++) {
		assert_int_equal(m[i].returned, i != 2);
		assert_int_equal(pgstore_read(&st, &keys[i], &again, &cause),
		    1);
		if (i == 2)
			assert_int_equal(again.entry.state, SUBTAB_RESERVED);
		else {
			assert_int_equal(again.entry.state, SUBTAB_COMMITTED);
			assert_string_equal(again.receipt, receipts[i]);
			assert_memory_equal(again.entry.file_digest, digest, 32);
		}
		pgstore_row_clear(&again);
	}
	assert_int_equal(m[4].returned, 0);
	/* Committed rows are not committed twice. */
	assert_int_equal(pgstore_batch_send(&st, mp, 2, &cause), 0);
	assert_int_equal(pgstore_batch_wait(&st, mp, 2, &failure, &cause), 0);
	assert_int_equal(m[0].returned + m[1].returned, 0);
	/* The statement lost by the session: a failure, then prepared again. */
	res = PQexec((PGconn *)pgstore_conn(&st, &cause), "DEALLOCATE ALL");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	m[2].token = rows[2].token;
	m[2].op = PGSTORE_OP_GRANT;
	assert_int_equal(pgstore_batch_send(&st, &mp[2], 1, &cause), 0);
	assert_int_equal(pgstore_batch_wait(&st, &mp[2], 1, &failure, &cause),
	    -1);
	assert_int_equal(failure, PGSTORE_BATCH_FAILED);
	free(cause);
	cause = NULL;
	assert_int_equal(pgstore_batch_send(&st, &mp[2], 1, &cause), 0);
	assert_int_equal(pgstore_batch_wait(&st, &mp[2], 1, &failure, &cause),
	    0);
	assert_int_equal(m[2].returned, 1);
	for (i = 0; i < 4; i++)
		pgstore_row_clear(&rows[i]);
	pgstore_close(&st);
}

/*
 * A worker's round (pg_batch.c): a claim sent on another session (the
 * leader's) records its member's own session as the row's owner, not
 * the leader's; the round's grant and commit change their rows under
 * their fences; a second round's claim of a key with a row returns the
 * row, and its lone commit is the lone statement's.
 */
static void
rounds_claim_for_their_own_session(void **state)
{
	struct pgstore		 a, b;
	struct pgstore_key	 keys[3] = { { SUBTAB_KIND_TASK, "", "round-1" },
	    { SUBTAB_KIND_TASK, "", "round-2" },
	    { SUBTAB_KIND_TASK, "", "round-3" } };
	struct pgstore_batch_member m[3], *mp[3];
	struct pgstore_claim	 c;
	struct pgstore_row	 rows[3], again;
	struct subtab_entry	 want;
	enum pgstore_batch_failure failure;
	uint8_t			 digest[32] = { 5 };
	char			*cause = NULL, q[512], pid[16];
	int			 i;

	(void)state;
	disk_max = 0;
	open_store(&a, "alpha", 30000);
	open_store(&b, "alpha", 30000);
	want_entry(&want, "round");
	for (i = 1; i < 3; i++)
		assert_int_equal(pgstore_reserve(&a, &keys[i], &want, &rows[i],
		    &cause), 1);
	assert_int_equal(pgstore_grant(&a, &keys[2], rows[2].epoch,
	    rows[2].token, &cause), 1);
	/* b's claim, a's grant and commit, sent on a's session. */
	assert_int_equal(pgstore_claim_begin(&b, &c, &keys[0], &want, &rows[0],
	    &cause), 0);
	memset(m, 0, sizeof m);
	m[0].op = PGSTORE_OP_CLAIM;
	m[0].key = &keys[0];
	m[0].claim = &c;
	for (i = 1; i < 3; i++) {
		m[i].op = i == 1 ? PGSTORE_OP_GRANT : PGSTORE_OP_COMMIT;
		m[i].key = &keys[i];
		m[i].epoch = rows[i].epoch;
		m[i].token = rows[i].token;
		m[i].file_digest = digest;
		m[i].receipt = "{\"round\":3}";
	}
	for (i = 0; i < 3; i++)
		mp[i] = &m[i];
	assert_int_equal(pgstore_round_send(&a, mp, 3, &cause), 0);
	assert_int_equal(pgstore_round_wait(&a, mp, 3, &failure, &cause), 0);
	assert_non_null(c.res);
	assert_int_equal(pgstore_claim_end(&b, &c, &cause), 1);
	assert_int_equal(m[1].returned, 1);
	assert_int_equal(m[2].returned, 1);
	snprintf(pid, sizeof pid, "%d",
	    PQbackendPID((PGconn *)pgstore_conn(&b, &cause)));
	assert_int_not_equal(PQbackendPID((PGconn *)pgstore_conn(&a, &cause)),
	    PQbackendPID((PGconn *)pgstore_conn(&b, &cause)));
	snprintf(q, sizeof q, "SELECT s.owner_pid FROM idem_submission s JOIN "
	    "pg_stat_activity p ON p.pid = s.owner_pid AND p.backend_start = "
	    "s.owner_started WHERE s.client_submission_id = 'round-1'");
	assert_sql(q, pid);
	assert_int_equal(pgstore_read(&a, &keys[1], &again, &cause), 1);
	assert_int_equal(again.lease_granted, 1);
	pgstore_row_clear(&again);
	assert_int_equal(pgstore_read(&a, &keys[2], &again, &cause), 1);
	assert_int_equal(again.entry.state, SUBTAB_COMMITTED);
	assert_string_equal(again.receipt, "{\"round\":3}");
	pgstore_row_clear(&again);
	/* A claim that finds a row, and a lone commit, in one round. */
	assert_int_equal(pgstore_claim_begin(&b, &c, &keys[1], &want, &again,
	    &cause), 0);
	m[0].key = &keys[1];
	m[1].op = PGSTORE_OP_COMMIT;
	assert_int_equal(pgstore_round_send(&a, mp, 2, &cause), 0);
	assert_int_equal(pgstore_round_wait(&a, mp, 2, &failure, &cause), 0);
	assert_int_equal(pgstore_claim_end(&b, &c, &cause), 0);
	assert_int_equal(again.entry.state, SUBTAB_RESERVED);
	assert_string_equal(again.token, rows[1].token);
	pgstore_row_clear(&again);
	assert_int_equal(m[1].returned, 1);
	assert_int_equal(pgstore_read(&b, &keys[1], &again, &cause), 1);
	assert_int_equal(again.entry.state, SUBTAB_COMMITTED);
	pgstore_row_clear(&again);
	for (i = 0; i < 3; i++)
		pgstore_row_clear(&rows[i]);
	pgstore_close(&a);
	pgstore_close(&b);
}

/*
 * A round sent by a leader whose session ended unnoticed, before the
 * round prepared its claim's statements: nothing of it went, and the
 * send says so (-2, not -1), so that its claim members go alone on
 * their own sessions instead of failing (and dropping their own good
 * connections) with the leader's (the review of #32's rounds, F2).
 */
static void
a_round_not_sent_fails_no_claim(void **state)
{
	struct pgstore		 a, b;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "unsent-1" };
	struct pgstore_batch_member m, *mp = &m;
	struct pgstore_claim	 c;
	struct pgstore_row	 row;
	struct subtab_entry	 want;
	char			*cause = NULL, q[256], *out;
	int			 pid;

	(void)state;
	disk_max = 0;
	open_store(&a, "alpha", 30000);
	open_store(&b, "alpha", 30000);
	want_entry(&want, "unsent");
	/* a's session, which has prepared no claim, ended behind its back. */
	pid = PQbackendPID((PGconn *)pgstore_conn(&a, &cause));
	assert_true(pid > 0);
	snprintf(q, sizeof q, "SELECT pg_terminate_backend(%d)", pid);
	assert_sql(q, "t");
	snprintf(q, sizeof q, "SELECT count(*) FROM pg_stat_activity WHERE "
	    "pid = %d", pid);
	for (out = sql(q); strcmp(out, "0") != 0; out = sql(q))
		free(out);
	free(out);
	assert_int_equal(pgstore_claim_begin(&b, &c, &key, &want, &row,
	    &cause), 0);
	memset(&m, 0, sizeof m);
	m.op = PGSTORE_OP_CLAIM;
	m.key = &key;
	m.claim = &c;
	assert_int_equal(pgstore_round_send(&a, &mp, 1, &cause), -2);
	assert_non_null(cause);
	free(cause);
	cause = NULL;
	/* Alone, on b's own session, the claim is made and b's own. */
	assert_int_equal(pgstore_claim_next(&b, &c, &cause), 1);
	assert_int_equal(row.entry.state, SUBTAB_RESERVED);
	snprintf(q, sizeof q, "SELECT s.owner_pid = %d FROM idem_submission s "
	    "WHERE s.client_submission_id = 'unsent-1'",
	    PQbackendPID((PGconn *)pgstore_conn(&b, &cause)));
	assert_sql(q, "t");
	pgstore_row_clear(&row);
	pgstore_close(&a);
	pgstore_close(&b);
}

/*
 * A batch's statement finds its members through the key's index however
 * small the table was when its session made the generic plan: a table
 * never analyzed (a temporary one: the autovacuum never analyzes it)
 * with two rows while seven batches run, then 20,000 rows; the session's
 * cached plans of both batches use the index, with no scan of the table
 * and no hash join (before, they hashed every row for each batch).
 */
static void
batch_plans_use_the_key_index(void **state)
{
	/* Each statement around the workspace's id. */
	static const char *const explain[][2] = {
		{ "EXPLAIN (COSTS OFF) EXECUTE idem_step_batch('",
		    "', '{1}', '{\"\"}', '{plan-1}', '{1}', '{t}', '{1}', "
		    "'{NULL}', '{NULL}', 1000)" },
		{ "EXPLAIN (COSTS OFF) EXECUTE idem_step_batch('",
		    "', '{1,1}', '{\"\",\"\"}', '{plan-1,plan-2}', '{1,1}', "
		    "'{t,t}', '{2,1}', '{d,NULL}', '{r,NULL}', 1000)" },
	};
	struct pgstore		 st;
	struct pgstore_key	 keys[2] = { { SUBTAB_KIND_TASK, "", "plan-1" },
	    { SUBTAB_KIND_TASK, "", "plan-2" } };
	struct pgstore_batch_member m[2], *mp[2];
	struct pgstore_row	 rows[2];
	struct subtab_entry	 want;
	enum pgstore_batch_failure failure;
	uint8_t			 digest[32] = { 9 };
	char			*cause = NULL, plan[4096], q[512];
	PGconn			*conn;
	PGresult		*res;
	size_t			 i, n;
	int			 r, step;

	(void)state;
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	conn = (PGconn *)pgstore_conn(&st, &cause);
	res = PQexec(conn, "CREATE TEMPORARY TABLE idem_submission (LIKE "
	    "public.idem_submission INCLUDING ALL)");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	want_entry(&want, "plan");
	for (i = 0; i < 2; i++) {
		assert_int_equal(pgstore_reserve(&st, &keys[i], &want, &rows[i],
		    &cause), 1);
		memset(&m[i], 0, sizeof m[i]);
		m[i].op = PGSTORE_OP_GRANT;
		m[i].key = &keys[i];
		m[i].epoch = rows[i].epoch;
		m[i].token = "stale";
		m[i].file_digest = digest;
		m[i].receipt = "{}";
		mp[i] = &m[i];
	}
	for (r = 0; r < 7; r++)
		for (step = 0; step < 3; step++) {
			/* Grants, commits, then one of each. */
			m[0].op = step == 0 ? PGSTORE_OP_GRANT :
			    PGSTORE_OP_COMMIT;
			m[1].op = step == 1 ? PGSTORE_OP_COMMIT :
			    PGSTORE_OP_GRANT;
			assert_int_equal(pgstore_batch_send(&st, mp, 2, &cause),
			    0);
			assert_int_equal(pgstore_batch_wait(&st, mp, 2,
			    &failure, &cause), 0);
		}
	res = PQexec(conn, "INSERT INTO idem_submission "
	    "(workspace_id, kind, scope, client_submission_id, digest_schema, "
	    "request_digest, state, date, seq, task_id, task_path, sender, "
	    "recipient, created_at_ms, reserved_at, updated_at, epoch, "
	    "owner_host, owner_token, lease_expires) SELECT '" "00000000-0000-"
	    "4000-8000-000000000002', 1, '', 'id-' || i, 1, '', 1, 20261205, "
	    "i, 'TASK-' || i, 'p', 'PM', 'DEV', 0, now(), now(), 1, 'h', 't', "
	    "now() FROM generate_series(1, 20000) i");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	for (step = 0; step < 2; step++) {
		snprintf(q, sizeof q, "%s%s%s", explain[step][0], workspace,
		    explain[step][1]);
		res = PQexec(conn, q);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			fail_msg("%s: %s", q, PQerrorMessage(conn));
		plan[0] = '\0';
		for (n = 0; n < (size_t)PQntuples(res); n++) {
			strncat(plan, PQgetvalue(res, (int)n, 0),
			    sizeof plan - strlen(plan) - 2);
			strcat(plan, "\n");
		}
		PQclear(res);
		if (strstr(plan, "_expr_idx on idem_submission") ==
		    NULL || strstr(plan, "Seq Scan on idem_submission") != NULL ||
		    strstr(plan, "Hash") != NULL)
			fail_msg("the %s batch's plan:\n%s", step == 0 ? "grant" :
			    "mixed", plan);
	}
	for (i = 0; i < 2; i++)
		pgstore_row_clear(&rows[i]);
	pgstore_close(&st);
}

/*
 * A creation's statements are prepared once per session (pg_conn.c).  A
 * session that lost them (DEALLOCATE ALL, as a pooler handing out
 * another server session may) prepares them again: every step still
 * works, and does what it did.
 */
static void
prepared_statements_lost_are_prepared_again(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "prep-1" };
	struct subtab_entry	 want;
	struct pgstore_row	 row, again;
	char			*cause = NULL;
	uint8_t			 file_digest[32] = { 2 };
	PGresult		*res;

	(void)state;
	free(sql("DELETE FROM idem_submission; DELETE FROM idem_counter"));
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	want_entry(&want, "p");
	/* Every step once: each statement prepared in this session. */
	assert_int_equal(pgstore_read(&st, &key, &row, &cause), 0);
	assert_int_equal(pgstore_claim(&st, &key, &want, &row, &cause), 1);
	assert_int_equal(pgstore_grant(&st, &key, 1, row.token, &cause), 1);
	/* Gone from the session: each is prepared again where it is used. */
	res = PQexec((PGconn *)pgstore_conn(&st, &cause), "DEALLOCATE ALL");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_int_equal(again.entry.seq, row.entry.seq);
	pgstore_row_clear(&again);
	/* The grant in halves: the wait finds it lost, and grants in full. */
	assert_int_equal(pgstore_grant_send(&st, &key, 1, row.token, &cause),
	    0);
	assert_int_equal(pgstore_grant_wait(&st, &key, 1, row.token, &cause),
	    1);
	res = PQexec((PGconn *)pgstore_conn(&st, &cause), "DEALLOCATE ALL");
	PQclear(res);
	assert_int_equal(pgstore_grant(&st, &key, 1, row.token, &cause), 1);
	assert_int_equal(pgstore_commit(&st, &key, 1, row.token, file_digest,
	    "{\"prep\":1}", &cause), 1);
	/* The claim of the same key returns its row, changes nothing. */
	assert_int_equal(pgstore_claim(&st, &key, &want, &again, &cause), 0);
	assert_int_equal(again.entry.state, SUBTAB_COMMITTED);
	assert_string_equal(again.receipt, "{\"prep\":1}");
	pgstore_row_clear(&again);
	res = PQexec((PGconn *)pgstore_conn(&st, &cause), "DEALLOCATE ALL");
	PQclear(res);
	key.id = "prep-2";
	assert_int_equal(pgstore_claim(&st, &key, &want, &again, &cause), 1);
	assert_int_equal(again.entry.seq, row.entry.seq + 1);
	pgstore_row_clear(&again);
	pgstore_row_clear(&row);
	pgstore_close(&st);
}

static void
numbers_skip_the_disk_and_run_out(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "numbers", NULL };
	struct subtab_entry	 want;
	struct pgstore_row	 row;
	char			*cause = NULL, id[32], q[256];
	uint32_t		 date, seq;
	int64_t			 now;

	(void)state;
	free(sql("DELETE FROM idem_counter; DELETE FROM idem_submission; "
	    "DELETE FROM idem_legacy"));
	open_store(&st, "alpha", 30000);
	want_entry(&want, "n");
	disk_max = 996;		/* another FCoP writer used up to 996 */
	key.id = "n1";
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	assert_int_equal(row.entry.seq, 997);
	pgstore_row_clear(&row);
	assert_int_equal(pgstore_legacy_number(&st, SUBTAB_KIND_TASK, &date,
	    &seq, &now, &cause), 0);
	assert_int_equal(seq, 998);
	key.id = "n2";
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	assert_int_equal(row.entry.seq, 999);
	pgstore_row_clear(&row);
	/* 999 used: ERANGE, and nothing was reserved. */
	key.id = "n3";
	errno = 0;
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), -1);
	assert_int_equal(errno, ERANGE);
	assert_int_equal(pgstore_read(&st, &key, &row, &cause), 0);
	snprintf(q, sizeof q, "SELECT count(*) FROM idem_submission WHERE "
	    "client_submission_id = 'n3'");
	assert_sql(q, "0");
	/* With four digits the counter goes on. */
	st.max_seq = 9999;
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	assert_true(row.entry.seq >= 1000);
	snprintf(id, sizeof id, "%u", row.entry.seq);
	pgstore_row_clear(&row);
	pgstore_close(&st);
}

static void
takeover_only_after_the_lease_or_the_session(void **state)
{
	struct pgstore		 a, b;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "take-1" };
	struct subtab_entry	 want;
	struct pgstore_row	 owned, taken, row;
	char			*cause = NULL;
	uint8_t			 digest[32] = { 7 };

	(void)state;
	free(sql("DELETE FROM idem_counter"));
	disk_max = 0;
	open_store(&a, "alpha", 1500);
	open_store(&b, "beta", 1500);
	want_entry(&want, "t");
	if (pgstore_reserve(&a, &key, &want, &owned, &cause) != 1)
		fail_msg("reserve: %s", cause != NULL ? cause :
		    strerror(errno));
	if (pgstore_grant(&a, &key, 1, owned.token, &cause) != 1)
		fail_msg("grant: %s", cause != NULL ? cause : "fenced");
	/* Alive, lease running: no takeover. */
	assert_int_equal(pgstore_takeover(&b, &key, 1, &taken, &cause), 0);
	/* Expired by the server's clock: allowed, once. */
	assert_true(pgserver_await(&server, "SELECT lease_expires < "
	    "clock_timestamp() FROM idem_submission WHERE "
	    "client_submission_id = 'take-1'", 20));
	assert_int_equal(pgstore_takeover(&b, &key, 1, &taken, &cause), 1);
	assert_int_equal(taken.epoch, 2);
	assert_string_equal(taken.owner, "beta");
	assert_string_not_equal(taken.token, owned.token);
	assert_int_equal(taken.entry.seq, owned.entry.seq);
	assert_int_equal(taken.entry.created_at_ms, owned.entry.created_at_ms);
	/* The same epoch again: someone moved it. */
	assert_int_equal(pgstore_takeover(&a, &key, 1, &row, &cause), 0);
	/* The stale owner's grant and commit change nothing. */
	assert_int_equal(pgstore_grant(&a, &key, 1, owned.token, &cause), 0);
	assert_int_equal(pgstore_commit(&a, &key, 1, owned.token, digest,
	    "{\"stale\":1}", &cause), 0);
	assert_int_equal(pgstore_read(&a, &key, &row, &cause), 1);
	assert_int_equal(row.entry.state, SUBTAB_RESERVED);
	assert_int_equal(row.epoch, 2);
	assert_true(row.owner_alive);
	pgstore_row_clear(&row);
	/* The new owner's lease runs: a takes nothing back. */
	assert_int_equal(pgstore_takeover(&a, &key, 2, &row, &cause), 0);
	/* b's session goes: a may take over at once (lease still running). */
	pgstore_close(&b);
	assert_true(pgserver_await(&server, "SELECT NOT EXISTS (SELECT 1 "
	    "FROM pg_stat_activity a, idem_submission s WHERE "
	    "s.client_submission_id = 'take-1' AND a.pid = s.owner_pid)", 20));
	assert_int_equal(pgstore_takeover(&a, &key, 2, &row, &cause), 1);
	assert_int_equal(row.epoch, 3);
	assert_int_equal(pgstore_grant(&a, &key, 3, row.token, &cause), 1);
	assert_int_equal(pgstore_commit(&a, &key, 3, row.token, digest,
	    "{\"won\":1}", &cause), 1);
	pgstore_row_clear(&row);
	pgstore_row_clear(&owned);
	pgstore_row_clear(&taken);
	pgstore_close(&a);
}

#define RACERS		6
#define RACE_KEYS	60

/* Each racer reserves shared keys and its own: one row, one number each. */
static void
numbers_never_twice_across_processes(void **state)
{
	pid_t	pids[RACERS];
	int	i, status;
	char	expected[32];

	(void)state;
	free(sql("DELETE FROM idem_counter; DELETE FROM idem_submission; "
	    "DELETE FROM idem_legacy"));
	disk_max = 0;
	for (i = 0; i < RACERS; i++) {
		if ((pids[i] = fork()) == 0) {
			struct pgstore		st;
			struct pgstore_key	key = { SUBTAB_KIND_TASK, "",
			    NULL };
			struct subtab_entry	want;
			struct pgstore_row	row;
			char			id[32], host[16], *cause = NULL;
			int			k, rc, won = 0;

			snprintf(host, sizeof host, "racer-%d", i);
			open_store(&st, host, 30000);
			want_entry(&want, "race");
			for (k = 0; k < RACE_KEYS; k++) {
				snprintf(id, sizeof id, "shared-%d", k);
				key.id = id;
				rc = pgstore_reserve(&st, &key, &want, &row,
				    &cause);
				if (rc < 0)
					_exit(2);
				won += rc;
				pgstore_row_clear(&row);
				snprintf(id, sizeof id, "own-%d-%d", i, k);
				if (pgstore_reserve(&st, &key, &want, &row,
				    &cause) != 1)
					_exit(3);
				pgstore_row_clear(&row);
			}
			pgstore_close(&st);
			_exit(0);
		}
		assert_true(pids[i] > 0);
	}
	for (i = 0; i < RACERS; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	snprintf(expected, sizeof expected, "%d", RACE_KEYS * (RACERS + 1));
	assert_sql("SELECT count(*) FROM idem_submission", expected);
	assert_sql("SELECT count(DISTINCT seq) FROM idem_submission", expected);
	/*
	 * A reservation that lost a shared key's race rolled back whole,
	 * its counter's raise with it (the claim is one statement): no
	 * number is left unused.  (While the number was a statement of its
	 * own, a loser left a gap, at most one per loser and key.)
	 */
	assert_sql("SELECT max(seq) FROM idem_submission", expected);
}

/*
 * The claim (pgstore_claim) commits without waiting for the WAL flush,
 * and only inside its own transaction: the session's next commit (the
 * grant) is synchronous again and makes the claim durable with it.
 * Racers claim and grant keys in several processes while the server is
 * killed (SIGKILL of the postmaster: a crash, whatever the WAL writer had
 * not flushed is lost), then again after its restart: every key whose
 * grant returned is there with the number the racer saw, its name's
 * number agrees, no number is in two rows, and the counter is past them.
 */
#define CRASH_RACERS	4
#define CRASH_KEYS	120	/* both phases under open_store's max_seq */

static void
crash_racer(int i, const char *phase, const char *log_path)
{
	struct pgstore		st;
	struct pgstore_key	key = { SUBTAB_KIND_TASK, "", NULL };
	struct subtab_entry	want;
	struct pgstore_row	row;
	PGresult		*res;
	FILE			*log;
	char			 id[64], host[sizeof "crasher-" + 11], *cause = NULL;
	int			 k, rc;

	snprintf(host, sizeof host, "crasher-%d", i);
	if ((log = fopen(log_path, "a")) == NULL)
		_exit(2);
	open_store(&st, host, 30000);
	want_entry(&want, "crash");
	for (k = 0; k < CRASH_KEYS; k++) {
		snprintf(id, sizeof id, "%s-%d-%d", phase, i, k);
		key.id = id;
		rc = pgstore_claim(&st, &key, &want, &row, &cause);
		if (rc < 0) {
			fprintf(stderr, "racer %d, %s: %s\n", i, id, cause);
			break;		/* the server is gone */
		}
		if (rc != 1)
			_exit(3);
		/* The claim's setting stays in its transaction. */
		res = PQexec((PGconn *)pgstore_conn(&st, &cause),
		    "SHOW synchronous_commit");
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			break;
		if (strcmp(PQgetvalue(res, 0, 0), "on") != 0)
			_exit(4);
		PQclear(res);
		rc = pgstore_grant(&st, &key, row.epoch, row.token, &cause);
		if (rc < 0) {
			fprintf(stderr, "racer %d, %s: %s\n", i, id, cause);
			break;
		}
		if (rc != 1)
			_exit(5);
		/* Acknowledged: the grant's commit returned. */
		fprintf(log, "%s %u\n", id, row.entry.seq);
		fflush(log);
		pgstore_row_clear(&row);
	}
	fclose(log);
	_exit(0);
}

static void
crash_racers(const char *phase, const char *log_path, int crash)
{
	pid_t	pids[CRASH_RACERS];
	int	i, status;
	long	have;

	for (i = 0; i < CRASH_RACERS; i++) {
		if ((pids[i] = fork()) == 0)
			crash_racer(i, phase, log_path);
		assert_true(pids[i] > 0);
	}
	if (crash) {
		/* Mid-run: some keys granted, the racers still going. */
		do {
			have = cluster_sql_long(&server, "SELECT count(*) FROM "
			    "idem_submission WHERE client_submission_id LIKE "
			    "'%s-%%'", phase);
		} while (have < 40);
		assert_int_equal(pgserver_stop(&server, 1), 0);
	}
	for (i = 0; i < CRASH_RACERS; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	if (crash)
		assert_int_equal(pgserver_restart(&server), 0);
}

static void
claims_durable_by_the_grant_across_a_crash(void **state)
{
	struct pgstore		 a, b;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "unfinished-1" };
	struct subtab_entry	 want;
	struct pgstore_row	 claimed, seen;
	char	 log_path[] = "/tmp/idem-claims.XXXXXX", line[128];
	char	 id[64], *cause = NULL;
	unsigned seq, acknowledged = 0, before;
	FILE	*log;
	int	 fd;

	(void)state;
	free(sql("DELETE FROM idem_counter; DELETE FROM idem_submission; "
	    "DELETE FROM idem_legacy"));
	disk_max = 0;
	assert_true((fd = mkstemp(log_path)) != -1);
	close(fd);
	/*
	 * Another store's claim, read by this one as a conflict is judged:
	 * after pgstore_read_durable, the crash below cannot take it.
	 */
	open_store(&a, "claimer", 30000);
	open_store(&b, "judge", 30000);
	want_entry(&want, "unfinished");
	assert_int_equal(pgstore_claim(&a, &key, &want, &claimed, &cause), 1);
	assert_int_equal(pgstore_read_durable(&b, &key, &seen, &cause), 1);
	assert_string_equal(seen.token, claimed.token);
	assert_int_equal(seen.entry.seq, claimed.entry.seq);
	assert_int_equal(seen.entry.state, SUBTAB_RESERVED);
	assert_false(seen.lease_granted);
	pgstore_row_clear(&seen);
	pgstore_close(&a);
	pgstore_close(&b);
	crash_racers("before", log_path, 1);
	assert_non_null(log = fopen(log_path, "r"));
	while (fgets(line, sizeof line, log) != NULL)
		acknowledged++;
	fclose(log);
	before = acknowledged;
	/* The crash came mid-run: not every key was granted. */
	assert_true(before > 0);
	assert_true(before < CRASH_RACERS * CRASH_KEYS);
	crash_racers("after", log_path, 0);
	assert_non_null(log = fopen(log_path, "r"));
	acknowledged = 0;
	while (fgets(line, sizeof line, log) != NULL) {
		assert_int_equal(sscanf(line, "%63s %u", id, &seq), 2);
		/* Each acknowledged claim survived, with its number. */
		if (cluster_sql_long(&server, "SELECT seq FROM idem_submission "
		    "WHERE client_submission_id = '%s' AND lease_granted",
		    id) != (long)seq)
			fail_msg("%s: granted with number %u before the crash, "
			    "not in the table so after it", id, seq);
		acknowledged++;
	}
	fclose(log);
	unlink(log_path);
	assert_int_equal(acknowledged, before + CRASH_RACERS * CRASH_KEYS);
	assert_int_equal(cluster_sql_long(&server, "SELECT seq FROM "
	    "idem_submission WHERE client_submission_id = 'unfinished-1' AND "
	    "owner_token = '%s'", claimed.token), claimed.entry.seq);
	pgstore_row_clear(&claimed);
	/* No number twice, the name agrees, the counter is past them all. */
	assert_sql("SELECT count(*) = count(DISTINCT seq) FROM idem_submission",
	    "t");
	assert_sql("SELECT bool_and(task_id = 'TASK-' || date || '-' || "
	    "lpad(seq::text, 3, '0') || '-PM-to-DEV' AND task_path = "
	    "'_lifecycle/inbox/' || task_id || '.md') FROM idem_submission",
	    "t");
	assert_sql("SELECT (SELECT max(next_seq) FROM idem_counter) > "
	    "(SELECT max(seq) FROM idem_submission)", "t");
}

/*
 * The claim is one statement, one transaction: when taking the number
 * fails, no row is inserted, not even with a number an earlier claim
 * took (here one whose row is gone, so free for an insert: until the
 * claim was one statement, the insert ran on its own and had to tell
 * its turn's number apart).  The claim fails; once the counter works
 * again the key is reserved with a number of its own.
 */
static void
failed_number_inserts_nothing(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 a = { SUBTAB_KIND_TASK, "", "nonce-a" };
	struct pgstore_key	 b = { SUBTAB_KIND_TASK, "", "nonce-b" };
	struct subtab_entry	 want;
	struct pgstore_row	 row;
	char			*cause = NULL;
	uint32_t		 seq_a;

	(void)state;
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	want_entry(&want, "nonce");
	assert_int_equal(pgstore_reserve(&st, &a, &want, &row, &cause), 1);
	seq_a = row.entry.seq;
	pgstore_row_clear(&row);
	/* Its number is free again. */
	free(sql("DELETE FROM idem_submission WHERE client_submission_id = "
	    "'nonce-a'"));
	free(sql("CREATE FUNCTION idem_test_refuse() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused by the "
	    "test'; END$$; CREATE TRIGGER idem_test_refuse BEFORE INSERT OR "
	    "UPDATE ON idem_counter FOR EACH ROW EXECUTE FUNCTION "
	    "idem_test_refuse()"));
	assert_int_equal(pgstore_reserve(&st, &b, &want, &row, &cause), -1);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "refused by the test"));
	free(cause);
	cause = NULL;
	assert_sql("SELECT count(*) FROM idem_submission WHERE "
	    "client_submission_id = 'nonce-b'", "0");
	free(sql("DROP TRIGGER idem_test_refuse ON idem_counter; "
	    "DROP FUNCTION idem_test_refuse()"));
	assert_int_equal(pgstore_reserve(&st, &b, &want, &row, &cause), 1);
	assert_true(row.entry.seq > seq_a);
	pgstore_row_clear(&row);
	pgstore_close(&st);
}

/*
 * A lost race, made certain: two processes claim one key while the
 * day's counter is locked, so both read no row and take the counter in
 * turn.  The loser's insert hits the key's row; its statement rolls back
 * with the counter's raise, and its next turn finds the winner's row.
 * One row, and no number skipped.
 */
static void
a_lost_race_leaves_no_gap(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 first = { SUBTAB_KIND_TASK, "", "race-first" };
	struct subtab_entry	 want;
	struct pgstore_row	 row;
	char			*cause = NULL, expect[32];
	PGconn			*lock;
	PGresult		*r;
	pid_t			 pids[2];
	int			 i, status, got[2];
	uint32_t		 seq0;

	(void)state;
	disk_max = 0;
	open_store(&st, "racer", 30000);
	want_entry(&want, "race");
	assert_int_equal(pgstore_reserve(&st, &first, &want, &row, &cause), 1);
	seq0 = row.entry.seq;
	pgstore_row_clear(&row);
	pgstore_close(&st);
	lock = PQconnectdb(server.uri);
	assert_int_equal(PQstatus(lock), CONNECTION_OK);
	PQclear(PQexec(lock, "BEGIN"));
	r = PQexec(lock, "SELECT 1 FROM idem_counter FOR UPDATE");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	for (i = 0; i < 2; i++) {
		assert_true((pids[i] = fork()) >= 0);
		if (pids[i] == 0) {
			struct pgstore		cst;
			struct pgstore_key	k = { SUBTAB_KIND_TASK, "",
			    "race-one" };
			struct pgstore_row	crow;
			char			host[16], *c = NULL;

			snprintf(host, sizeof host, "racer-%d", i);
			open_store(&cst, host, 30000);
			_exit(pgstore_reserve(&cst, &k, &want, &crow, &c) + 10);
		}
	}
	if (!pgserver_await(&server, "SELECT count(*) = 2 FROM "
	    "pg_stat_activity WHERE wait_event_type = 'Lock'", 30))
		fail_msg("the two claims never waited for the counter");
	PQclear(PQexec(lock, "COMMIT"));
	PQfinish(lock);
	for (i = 0; i < 2; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		got[i] = WEXITSTATUS(status);
	}
	/* One created it (1), the other found its row (0). */
	assert_int_equal(got[0] + got[1], 21);
	assert_int_equal(got[0] * got[1], 110);
	snprintf(expect, sizeof expect, "%u", seq0 + 1);
	assert_sql("SELECT seq FROM idem_submission WHERE "
	    "client_submission_id = 'race-one'", expect);
	snprintf(expect, sizeof expect, "%u", seq0 + 2);
	assert_sql("SELECT next_seq FROM idem_counter WHERE date = (SELECT "
	    "date FROM idem_submission WHERE client_submission_id = "
	    "'race-one')", expect);
}

/*
 * A counter behind its day's rows (a row restored or written by hand:
 * idem takes every number from the counter): the claim that hits the
 * row's number raises the counter past the rows and takes the next.
 * Before, the whole statement rolled back with the counter, and every
 * later claim of the day failed on the same number.
 */
static void
a_counter_behind_its_rows_is_raised(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 a = { SUBTAB_KIND_TASK, "", "behind-a" };
	struct pgstore_key	 b = { SUBTAB_KIND_TASK, "", "behind-b" };
	struct subtab_entry	 want;
	struct pgstore_row	 row;
	char			*cause = NULL, expect[32];
	uint32_t		 seq_a;

	(void)state;
	disk_max = 0;
	open_store(&st, "behind", 30000);
	want_entry(&want, "behind");
	assert_int_equal(pgstore_reserve(&st, &a, &want, &row, &cause), 1);
	seq_a = row.entry.seq;
	pgstore_row_clear(&row);
	/* Rows on the counter's next two numbers that it does not know. */
	free(sql("INSERT INTO idem_submission SELECT workspace_id, kind, "
	    "scope, client_submission_id || '-' || n, digest_schema, "
	    "request_digest, state, date, seq + n, task_id || '-' || n, "
	    "task_path || '-' || n, sender, recipient, created_at_ms, "
	    "reserved_at, updated_at, file_digest, receipt, epoch, "
	    "owner_host, owner_token, owner_pid, owner_started, "
	    "lease_expires, lease_granted FROM idem_submission, "
	    "generate_series(1, 2) n WHERE client_submission_id = "
	    "'behind-a'"));
	assert_int_equal(pgstore_reserve(&st, &b, &want, &row, &cause), 1);
	assert_null(cause);
	assert_int_equal(row.entry.seq, seq_a + 3);
	pgstore_row_clear(&row);
	snprintf(expect, sizeof expect, "%u", seq_a + 4);
	assert_sql("SELECT next_seq FROM idem_counter WHERE date = (SELECT "
	    "date FROM idem_submission WHERE client_submission_id = "
	    "'behind-b')", expect);
	pgstore_close(&st);
}

/*
 * A fenced update's commit that fails is never taken for "changed".  In
 * the extended protocol PostgreSQL sends the update's CommandComplete
 * ("UPDATE 1") before the implicit transaction commits at the sync; a
 * commit refused there (here a deferred constraint trigger; in the crash
 * test above, an immediate shutdown during the WAL flush) comes as a
 * later result.  The grant, read in halves, and the commit both answer
 * -1, and the row is as it was.
 */
static void
a_failed_commit_is_not_a_grant(void **state)
{
	struct pgstore		 st;
	struct pgstore_key	 key = { SUBTAB_KIND_TASK, "", "refused-1" };
	struct subtab_entry	 want;
	struct pgstore_row	 row, again;
	char			*cause = NULL;
	uint8_t			 file_digest[32] = { 2 };

	(void)state;
	disk_max = 0;
	open_store(&st, "alpha", 30000);
	want_entry(&want, "refused");
	assert_int_equal(pgstore_reserve(&st, &key, &want, &row, &cause), 1);
	free(sql("CREATE FUNCTION idem_test_refuse_commit() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused at commit "
	    "by the test'; END$$; CREATE CONSTRAINT TRIGGER "
	    "idem_test_refuse_commit AFTER UPDATE ON idem_submission "
	    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
	    "idem_test_refuse_commit()"));
	assert_int_equal(pgstore_grant_send(&st, &key, 1, row.token, &cause),
	    0);
	assert_int_equal(pgstore_grant_wait(&st, &key, 1, row.token, &cause),
	    -1);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "refused at commit by the test"));
	free(cause);
	cause = NULL;
	assert_int_equal(pgstore_commit(&st, &key, 1, row.token, file_digest,
	    "{}", &cause), -1);
	assert_non_null(strstr(cause, "refused at commit by the test"));
	free(cause);
	cause = NULL;
	assert_int_equal(pgstore_read(&st, &key, &again, &cause), 1);
	assert_false(again.lease_granted);
	assert_int_equal(again.entry.state, SUBTAB_RESERVED);
	pgstore_row_clear(&again);
	free(sql("DROP TRIGGER idem_test_refuse_commit ON idem_submission; "
	    "DROP FUNCTION idem_test_refuse_commit()"));
	/* The session is usable again, and the grant goes through. */
	assert_int_equal(pgstore_grant(&st, &key, 1, row.token, &cause), 1);
	pgstore_row_clear(&row);
	pgstore_close(&st);
}

/*
 * Every lookup of a key is served by the key's index (schema version 3,
 * PGSTORE_KEY_WHERE), with no statistics (a table the autovacuum has not
 * yet analysed: each row's lookup read the whole workspace before) and
 * with them, in the plan a prepared statement makes for each call and in
 * the generic one, with a fenced update's "state < 3" (which the
 * unfinished rows' partial index answers too, dead entries included).
 */
static void
key_lookups_use_the_key_index(void **state)
{
	static const char *const cases[] = {
		"",
		"SET plan_cache_mode = force_generic_plan; ",
		"ANALYZE idem_test_plan; ",
		"ANALYZE idem_test_plan; SET plan_cache_mode = "
		    "force_generic_plan; ",
	};
	char	 q[4096], *out;
	size_t	 i;

	(void)state;
	free(sql("DROP TABLE IF EXISTS idem_test_plan; CREATE TABLE "
	    "idem_test_plan (LIKE idem_submission INCLUDING ALL) WITH "
	    "(autovacuum_enabled = false); INSERT INTO idem_test_plan SELECT "
	    "'00000000-0000-4000-8000-000000000001', 1, '', 'id-' || i, 1, "
	    "'', CASE WHEN i % 100 = 0 THEN 1 ELSE 3 END, 20261204, i, "
	    "'TASK-' || i, 'p', 'PM', 'DEV', 0, now(), now(), NULL, NULL, 1, "
	    "'h', 't', NULL, NULL, now(), false FROM generate_series(1, "
	    "20000) i"));
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(q, sizeof q, "%sPREPARE q(uuid, smallint, text, "
		    "text) AS SELECT 1 FROM idem_test_plan WHERE "
		    PGSTORE_KEY_WHERE " AND epoch = 1 AND state < 3; EXPLAIN "
		    "(COSTS OFF) EXECUTE q('00000000-0000-4000-8000-"
		    "000000000001', 1, '', 'id-300')", cases[i]);
		out = sql(q);
		if (strstr(out, "_expr_idx on idem_test_plan") == NULL)
			fail_msg("%s: %s", cases[i][0] != '\0' ? cases[i] :
			    "no statistics", out);
		free(out);
	}
	free(sql("DROP TABLE idem_test_plan"));
}

/* conn's value of keyword in PQconninfo ("" if none). */
static void
assert_conninfo(PGconn *conn, const char *keyword, const char *expected)
{
	PQconninfoOption	*o, *all = PQconninfo(conn);

	assert_non_null(all);
	for (o = all; o->keyword != NULL; o++)
		if (strcmp(o->keyword, keyword) == 0)
			break;
	if (o->keyword == NULL || o->val == NULL ||
	    strcmp(o->val, expected) != 0)
		fail_msg("%s is \"%s\", not \"%s\"", keyword,
		    o->keyword != NULL && o->val != NULL ? o->val : "", expected);
	PQconninfoFree(all);
}

/*
 * A half-open TCP connection ends (doc/cluster.md, "Connections"): every
 * store connection asks for keepalives and a TCP user timeout, which a
 * URI's own values override.
 */
static void
connections_keep_alive(void **state)
{
	struct pg_conn	*conn;
	char		*cause = NULL, uri[1200];

	(void)state;
	conn = pgstore_connect(server.uri, &cause);
	if (conn == NULL)
		fail_msg("pgstore_connect: %s", cause);
	assert_conninfo((PGconn *)conn, "keepalives", "1");
	assert_conninfo((PGconn *)conn, "keepalives_idle",
	    PGSTORE_KEEPALIVES_IDLE_S);
	assert_conninfo((PGconn *)conn, "keepalives_interval",
	    PGSTORE_KEEPALIVES_INTERVAL_S);
	assert_conninfo((PGconn *)conn, "keepalives_count",
	    PGSTORE_KEEPALIVES_COUNT);
	assert_conninfo((PGconn *)conn, "tcp_user_timeout",
	    PGSTORE_TCP_USER_TIMEOUT_MS);
	assert_conninfo((PGconn *)conn, "connect_timeout",
	    PGSTORE_CONNECT_TIMEOUT_S);
	pgstore_disconnect(conn);
	snprintf(uri, sizeof uri, "%s&keepalives_idle=7&tcp_user_timeout=900",
	    server.uri);
	if ((conn = pgstore_connect(uri, &cause)) == NULL)
		fail_msg("pgstore_connect: %s", cause);
	assert_conninfo((PGconn *)conn, "keepalives_idle", "7");
	assert_conninfo((PGconn *)conn, "tcp_user_timeout", "900");
	assert_conninfo((PGconn *)conn, "keepalives", "1");
	pgstore_disconnect(conn);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(store_init_and_migrate),
		cmocka_unit_test(reserve_grant_commit_fenced),
		cmocka_unit_test(batches_fence_each_member),
		cmocka_unit_test(batch_plans_use_the_key_index),
		cmocka_unit_test(rounds_claim_for_their_own_session),
		cmocka_unit_test(a_round_not_sent_fails_no_claim),
		cmocka_unit_test(a_failed_commit_is_not_a_grant),
		cmocka_unit_test(key_lookups_use_the_key_index),
		cmocka_unit_test(connections_keep_alive),
		cmocka_unit_test(prepared_statements_lost_are_prepared_again),
		cmocka_unit_test(numbers_skip_the_disk_and_run_out),
		cmocka_unit_test(takeover_only_after_the_lease_or_the_session),
		cmocka_unit_test(numbers_never_twice_across_processes),
		cmocka_unit_test(failed_number_inserts_nothing),
		cmocka_unit_test(a_lost_race_leaves_no_gap),
		cmocka_unit_test(a_counter_behind_its_rows_is_raised),
		cmocka_unit_test(claims_durable_by_the_grant_across_a_crash),
	};
	int	rc, failed;

	if (sodium_init() < 0)
		return 1;
	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (FILTER_APPLY(tests) == -1)
		return 1;
	if ((rc = pgserver_main_start(&server)) != 0)
		return rc;
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	pgserver_destroy(&server, failed != 0);
	return failed;
}
#endif
