/* SPDX-License-Identifier: ISC */
/*
 * test_index.c: unit tests of broker/store/index.c, the on-disk index of
 * committed receipts: a committed entry (and an effect's result) comes
 * back byte for byte, a tombstone keeps the facts doc/journal.md lists
 * and drops the rest, an uncommitted transaction leaves nothing (also
 * in another process killed in the middle), a second process reads
 * what the first committed, a value that does not decode is refused,
 * and only committed entries are stored.  Each test runs in a fresh
 * mkdtemp directory.
 */
#include <sys/stat.h>
#include <sys/wait.h>

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
#include <lmdb.h>
#include <sodium.h>

#include "integration/filter.h"
#include "store.h"

struct fixture {
	char	root[64];
	char	dir[96];	/* root/index: does not exist at first */
};

static int
setup(void **state)
{
	struct fixture	*f = calloc(1, sizeof *f);

	assert_non_null(f);
	assert_true(sodium_init() >= 0);
	snprintf(f->root, sizeof f->root, "/tmp/idem-test-index-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->dir, sizeof f->dir, "%s/index", f->root);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture	*f = *state;
	char		 cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* A committed task, PM to DEV, 2026-12-02 number seq. */
static void
task_record(struct journal_record *r, const char *key, uint32_t seq)
{
	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_ENTRY;
	r->entry.kind = SUBTAB_KIND_TASK;
	r->entry.state = SUBTAB_COMMITTED;
	r->entry.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	r->entry.date = 20261202;
	r->entry.seq = seq;
	memset(r->entry.request_digest, 0x11, IDEM_SHA256_BYTES);
	memset(r->entry.file_digest, 0x22, IDEM_SHA256_BYTES);
	memcpy(r->entry.sender, "PM", 2);
	r->entry.sender_length = 2;
	memcpy(r->entry.recipient, "DEV.D1", 6);
	r->entry.recipient_length = 6;
	r->entry.reserved_at_ms = 1700000000000;
	r->entry.updated_at_ms = 1700000000100;
	r->entry.created_at_ms = 1700000000050;
	r->entry.peer_uid = 1000;
	r->entry.peer_pid = 4242;
	r->entry.key_length = (uint16_t)strlen(key);
	memcpy(r->key, key, r->entry.key_length);
}

static const char effect_result[] = "{\"id\":\"msg-1\",\"n\":[1,2,3]}";

static void
effect_record(struct journal_record *r, const char *kind, const char *id)
{
	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_EFFECT;
	r->entry.kind = SUBTAB_KIND_EFFECT;
	r->entry.state = SUBTAB_COMMITTED;
	r->entry.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	r->entry.attempt = 2;
	r->entry.result_length = sizeof effect_result - 1;
	memset(r->entry.request_digest, 0x33, IDEM_SHA256_BYTES);
	memset(r->entry.file_digest, 0x44, IDEM_SHA256_BYTES);
	r->entry.fence = 0x0102030405060708ULL;
	r->entry.lease_expires_ms = 1700000030000;
	r->entry.reserved_at_ms = 1700000000000;
	r->entry.updated_at_ms = 1700000000200;
	r->entry.created_at_ms = 1700000000200;
	r->entry.key_length = (uint16_t)snprintf(r->key, sizeof r->key,
	    "%s%c%s", kind, SUBTAB_EFFECT_SEPARATOR, id);
	r->result = (const uint8_t *)effect_result;
}

static void
open_rw(struct fixture *f, struct index *x)
{
	char	*cause = NULL;

	if (index_open(x, f->dir, 0, &cause) != 0)
		fail_msg("index_open: %s", cause);
}

static void
put_all(struct index *x, const struct journal_record *r, size_t n,
    uint64_t checkpoint)
{
	char	*cause = NULL;
	size_t	 i;

	assert_int_equal(index_begin(x, &cause), 0);
	for (i = 0; i < n; i++)
		if (index_put(x, INDEX_FULL, &r[i], &cause) != 0)
			fail_msg("index_put: %s", cause);
	if (index_commit(x, checkpoint, &cause) != 0)
		fail_msg("index_commit: %s", cause);
}

/* The entry found is the one put, every byte a receipt is built from. */
static void
test_committed_entries_come_back_byte_for_byte(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r[2];
	struct index_entry	 e;
	struct index_stats	 st;
	uint8_t			 result[IDEM_MAX_EFFECT_RESULT_BYTES];

	assert_int_equal(index_exists(f->dir), 0);
	open_rw(f, &x);
	task_record(&r[0], "run-42/step-3", 7);
	effect_record(&r[1], "mail.send/v1", "run-42/step-7");
	put_all(&x, r, 2, 5);
	assert_int_equal(index_exists(f->dir), 1);

	assert_int_equal(index_get(&x, "run-42/step-3", 13, &e, result, NULL),
	    1);
	assert_int_equal(e.form, INDEX_FULL);
	assert_memory_equal(&e.record.entry, &r[0].entry, sizeof r[0].entry);
	assert_int_equal(index_get(&x, r[1].key, r[1].entry.key_length, &e,
	    result, NULL), 1);
	assert_int_equal(e.record.type, JOURNAL_RECORD_EFFECT);
	assert_int_equal(e.record.entry.result_length,
	    sizeof effect_result - 1);
	assert_ptr_equal(e.record.result, result);
	assert_memory_equal(e.record.result, effect_result,
	    sizeof effect_result - 1);
	assert_int_equal(e.record.entry.attempt, 2);
	assert_memory_equal(e.record.entry.file_digest,
	    r[1].entry.file_digest, IDEM_SHA256_BYTES);
	assert_int_equal(e.record.entry.created_at_ms, 1700000000200);

	assert_int_equal(index_get(&x, "run-42/step-4", 13, &e, result, NULL),
	    0);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.checkpoint, 5);
	assert_true(st.bytes > 0);
	index_close(&x);
}

/* Only committed entries, with a key: anything else is refused. */
static void
test_only_committed_entries_are_stored(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r;
	struct index_entry	 e;
	struct index_stats	 st;
	uint8_t			 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	char			*cause = NULL;

	open_rw(f, &x);
	assert_int_equal(index_begin(&x, &cause), 0);
	task_record(&r, "reserved-one", 1);
	r.entry.state = SUBTAB_RESERVED;
	assert_int_equal(index_put(&x, INDEX_FULL, &r, &cause), -1);
	assert_int_equal(errno, EINVAL);
	free(cause);
	cause = NULL;
	task_record(&r, "", 1);
	assert_int_equal(index_put(&x, INDEX_FULL, &r, &cause), -1);
	free(cause);
	cause = NULL;
	assert_int_equal(index_commit(&x, 0, &cause), 0);
	assert_int_equal(index_get(&x, "reserved-one", 12, &e, result, NULL),
	    0);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	assert_int_equal(st.entries, 0);
	index_close(&x);
}

/*
 * A transaction never committed leaves the index as it was: aborted in
 * this process, or its process killed in the middle of its puts.
 */
static void
test_uncommitted_writes_leave_nothing(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r;
	struct index_entry	 e;
	struct index_stats	 st;
	uint8_t			 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	char			 key[32];
	char			*cause = NULL;
	pid_t			 pid;
	int			 status, i;

	open_rw(f, &x);
	task_record(&r, "kept", 1);
	put_all(&x, &r, 1, 3);
	assert_int_equal(index_begin(&x, &cause), 0);
	task_record(&r, "aborted", 2);
	assert_int_equal(index_put(&x, INDEX_FULL, &r, &cause), 0);
	index_abort(&x);
	index_close(&x);

	if ((pid = fork()) == 0) {
		struct index	y;

		if (index_open(&y, f->dir, 0, NULL) != 0 ||
		    index_begin(&y, NULL) != 0)
			_exit(2);
		for (i = 0; i < 5000; i++) {
			snprintf(key, sizeof key, "killed-%d", i);
			task_record(&r, key, (uint32_t)i + 10);
			if (index_put(&y, INDEX_FULL, &r, NULL) != 0)
				_exit(3);
		}
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));

	open_rw(f, &x);
	assert_int_equal(index_get(&x, "kept", 4, &e, result, NULL), 1);
	assert_int_equal(index_get(&x, "aborted", 7, &e, result, NULL), 0);
	assert_int_equal(index_get(&x, "killed-0", 8, &e, result, NULL), 0);
	assert_int_equal(index_get(&x, "killed-4999", 11, &e, result, NULL),
	    0);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.checkpoint, 3);
	/* The dead writer's lock is given back: a new write goes through. */
	task_record(&r, "after", 3);
	put_all(&x, &r, 1, 4);
	assert_int_equal(index_get(&x, "after", 5, &e, result, NULL), 1);
	index_close(&x);
}

/* A reader in another process (a worker) sees each commit at once. */
static void
test_other_process_reads_commits(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r;
	int			 to_child[2], to_parent[2];
	char			 c;
	pid_t			 pid;
	int			 status;

	open_rw(f, &x);
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(to_parent), 0);
	if ((pid = fork()) == 0) {
		struct index		y;
		struct index_entry	e;
		uint8_t			result[IDEM_MAX_EFFECT_RESULT_BYTES];
		int			before, after;

		/* Its own handle (an LMDB handle never crosses a fork). */
		if (index_open(&y, f->dir, INDEX_READONLY, NULL) != 0)
			_exit(2);
		before = index_get(&y, "late", 4, &e, result, NULL);
		if (write(to_parent[1], "r", 1) != 1 ||
		    read(to_child[0], &c, 1) != 1)
			_exit(3);
		after = index_get(&y, "late", 4, &e, result, NULL);
		index_close(&y);
		_exit(before == 0 && after == 1 && e.record.entry.seq == 9 ?
		    0 : 1);
	}
	assert_true(pid > 0);
	assert_int_equal(read(to_parent[0], &c, 1), 1);
	task_record(&r, "late", 9);
	put_all(&x, &r, 1, 0);
	assert_int_equal(write(to_child[1], "go", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	index_close(&x);
}

/*
 * Compaction: entries committed before the cut become tombstones that
 * keep id, kind, schema, digest, task_id (date, number, roles) or the
 * result's digest, and committed_at; the rest is dropped.  Later ones
 * stay whole.
 */
static void
test_compact_keeps_tombstones(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r[3];
	struct index_entry	 e;
	struct index_stats	 st;
	uint8_t			 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	uint64_t		 pruned;
	static const uint8_t	 zero_digest[IDEM_SHA256_BYTES];
	char			*cause = NULL;

	open_rw(f, &x);
	task_record(&r[0], "old-task", 7);
	effect_record(&r[1], "mail.send/v1", "old-effect");
	task_record(&r[2], "new-task", 8);
	r[2].entry.created_at_ms = 1800000000000;
	put_all(&x, r, 3, 0);
	if (index_compact(&x, 1750000000000, &pruned, &cause) != 0)
		fail_msg("index_compact: %s", cause);
	assert_int_equal(pruned, 2);

	assert_int_equal(index_get(&x, "old-task", 8, &e, result, NULL), 1);
	assert_int_equal(e.form, INDEX_TOMBSTONE);
	assert_int_equal(e.record.entry.kind, SUBTAB_KIND_TASK);
	assert_int_equal(e.record.entry.schema, SUBTAB_SCHEMA_WRITE_TASK_V1);
	assert_memory_equal(e.record.entry.request_digest,
	    r[0].entry.request_digest, IDEM_SHA256_BYTES);
	assert_int_equal(e.record.entry.date, 20261202);
	assert_int_equal(e.record.entry.seq, 7);
	assert_int_equal(e.record.entry.recipient_length, 6);
	assert_memory_equal(e.record.entry.recipient, "DEV.D1", 6);
	assert_int_equal(e.record.entry.created_at_ms, 1700000000050);
	/* When it was reserved and last changed stay (get_submission). */
	assert_int_equal(e.record.entry.reserved_at_ms, 1700000000000);
	assert_int_equal(e.record.entry.updated_at_ms, 1700000000100);
	assert_int_equal(e.record.entry.peer_pid, 0);
	assert_memory_equal(e.record.entry.file_digest, zero_digest,
	    IDEM_SHA256_BYTES);

	assert_int_equal(index_get(&x, r[1].key, r[1].entry.key_length, &e,
	    result, NULL), 1);
	assert_int_equal(e.form, INDEX_TOMBSTONE);
	assert_int_equal(e.record.entry.result_length, 0);
	assert_memory_equal(e.record.entry.file_digest,
	    r[1].entry.file_digest, IDEM_SHA256_BYTES);
	assert_int_equal(e.record.entry.attempt, 2);
	assert_int_equal(e.record.entry.created_at_ms, 1700000000200);

	assert_int_equal(index_get(&x, "new-task", 8, &e, result, NULL), 1);
	assert_int_equal(e.form, INDEX_FULL);
	assert_memory_equal(&e.record.entry, &r[2].entry, sizeof r[2].entry);
	/*
	 * The whole entries put again (a replay, a checkpoint that still
	 * held them) leave the tombstones as they are.
	 */
	put_all(&x, r, 3, 0);
	assert_int_equal(index_get(&x, "old-task", 8, &e, result, NULL), 1);
	assert_int_equal(e.form, INDEX_TOMBSTONE);
	assert_int_equal(index_get(&x, r[1].key, r[1].entry.key_length, &e,
	    result, NULL), 1);
	assert_int_equal(e.form, INDEX_TOMBSTONE);
	assert_int_equal(e.record.entry.result_length, 0);
	/* Compacting again prunes nothing more; nothing is ever deleted. */
	assert_int_equal(index_compact(&x, 1750000000000, &pruned, &cause), 0);
	assert_int_equal(pruned, 0);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	assert_int_equal(st.entries, 3);
	index_close(&x);
}

/* A value that does not decode (damage) is refused, never answered. */
static void
test_damaged_value_is_refused(void **state)
{
	struct fixture		*f = *state;
	struct index		 x;
	struct journal_record	 r;
	struct index_entry	 e;
	uint8_t			 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	MDB_txn			*txn;
	MDB_val			 k, v;
	uint8_t			 bad[200];
	char			*cause = NULL;

	open_rw(f, &x);
	task_record(&r, "damaged", 1);
	put_all(&x, &r, 1, 0);
	/* Flip one byte of the stored record through LMDB itself. */
	assert_int_equal(mdb_txn_begin(x.env, NULL, 0, &txn), 0);
	k.mv_data = "damaged";
	k.mv_size = 7;
	assert_int_equal(mdb_get(txn, x.receipts, &k, &v), 0);
	assert_true(v.mv_size <= sizeof bad);
	memcpy(bad, v.mv_data, v.mv_size);
	bad[v.mv_size - 3] ^= 0x40;
	v.mv_data = bad;
	assert_int_equal(mdb_put(txn, x.receipts, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	assert_int_equal(index_get(&x, "damaged", 7, &e, result, &cause), -1);
	assert_int_equal(errno, EINVAL);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "idemctl verify"));
	free(cause);
	index_close(&x);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_committed_entries_come_back_byte_for_byte, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_only_committed_entries_are_stored, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_uncommitted_writes_leave_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_other_process_reads_commits, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_compact_keeps_tombstones, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_damaged_value_is_refused, setup, teardown),
	};

	return FILTER_RUN(tests);
}
