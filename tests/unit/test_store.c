/* SPDX-License-Identifier: ISC */
/*
 * test_store.c: unit tests of broker/store/store.c and verify.c, the
 * operations idemd and idemctl share: the journal's path, store_load's
 * typed failures (damage, a failed apply and a read error are told apart
 * by the store, never by the text of a cause), store_records' positions,
 * and store_verify's typed findings (the index's entries of an effect
 * and a task against their records too).  Each test runs in a fresh
 * mkdtemp root.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
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
#include "digest.h"
#include "store.h"
#include "tree.h"

#define RECORDS	5

struct fixture {
	char		root[64];
	char		dir[PATH_MAX];		/* ROOT/.idem/journal */
	uint64_t	ends[RECORDS];		/* each record's end */
};

/* TASK-20261202-00<n+1>-PM-to-DEV, committed, submission "sub-<n>". */
static void
make_record(struct journal_record *r, unsigned n)
{
	struct subtab_entry	*e = &r->entry;

	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_ENTRY;
	e->kind = SUBTAB_KIND_TASK;
	e->state = SUBTAB_COMMITTED;
	memcpy(e->sender, "PM", 2);
	e->sender_length = 2;
	memcpy(e->recipient, "DEV", 3);
	e->recipient_length = 3;
	e->date = 20261202;
	e->seq = n + 1;
	e->key_length = (uint16_t)snprintf(r->key, sizeof r->key, "sub-%u",
	    n);
}

/* A root with .idem/ and a journal of RECORDS records in segment 1. */
/* Encode r and append it to j (not synced). */
static void
append_record(struct journal *j, const struct journal_record *r)
{
	static uint8_t	 buf[JOURNAL_MAX_EFFECT_RECORD_BYTES];
	struct iovec	 iov;
	char		*cause = NULL;

	iov.iov_base = buf;
	iov.iov_len = journal_encode(r, buf, sizeof buf);
	assert_true(iov.iov_len > 0);
	if (journal_append(j, &iov, 1, &cause) != 0)
		fail_msg("append: %s", cause);
}

static int
setup(void **state)
{
	struct fixture		*f;
	struct journal		 j;
	struct journal_record	 r;
	char			 path[PATH_MAX];
	char			*cause = NULL;
	unsigned		 i;

	f = calloc(1, sizeof *f);
	assert_non_null(f);
	strcpy(f->root, "/tmp/test_store.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(path, sizeof path, "%s/%s", f->root, IDEM_STATE_DIR);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(store_journal_dir(f->root, f->dir, sizeof f->dir), 0);
	if (journal_open(&j, f->dir, &cause) != 0)
		fail_msg("journal_open: %s", cause);
	for (i = 0; i < RECORDS; i++) {
		make_record(&r, i);
		append_record(&j, &r);
		f->ends[i] = j.size;
	}
	if (journal_sync(&j, &cause) != 0)
		fail_msg("sync: %s", cause);
	journal_close(&j);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture	*f = *state;

	unit_remove_tree(f->root);
	free(f);
	return 0;
}

/* Overwrite length bytes of path at offset with 'X'. */
static void
damage(const char *path, off_t offset, size_t length)
{
	char	bytes[64];
	int	fd;

	memset(bytes, 'X', sizeof bytes);
	assert_true(length <= sizeof bytes);
	assert_true((fd = open(path, O_WRONLY)) != -1);
	assert_int_equal(pwrite(fd, bytes, length, offset), (ssize_t)length);
	close(fd);
}

static void
segment_path(const struct fixture *f, char *out, size_t size)
{
	snprintf(out, size, "%s/%016" PRIx64 ".jnl", f->dir, (uint64_t)1);
}

struct seen {
	unsigned	count;
	unsigned	fail_at;	/* apply fails on this one (1-based) */
	uint64_t	offsets[RECORDS];
	int		checkpoint;
	uint64_t	segment;
};

static int
count_apply(const struct journal_record *r, void *arg)
{
	struct seen	*s = arg;

	(void)r;
	if (s->fail_at != 0 && s->count + 1 == s->fail_at) {
		errno = EINVAL;		/* what damage sets: must not fool it */
		return -1;
	}
	s->count++;
	return 0;
}

static int
where_apply(const struct journal_record *r, const struct store_where *w,
    void *arg)
{
	struct seen		*s = arg;
	struct journal_record	 want;

	make_record(&want, s->count);
	assert_int_equal(r->entry.seq, want.entry.seq);
	assert_memory_equal(r->key, want.key, want.entry.key_length);
	s->checkpoint |= w->checkpoint;
	s->segment = w->segment;
	s->offsets[s->count++] = w->offset;
	return 0;
}

/* One function builds ROOT/.idem/journal, and refuses to truncate it. */
static void
journal_dir_is_built_once(void **state)
{
	struct fixture	*f = *state;
	char		 want[PATH_MAX], small[16];

	snprintf(want, sizeof want, "%s/.idem/journal", f->root);
	assert_string_equal(f->dir, want);
	errno = 0;
	assert_int_equal(store_journal_dir(f->root, small, sizeof small), -1);
	assert_int_equal(errno, ENAMETOOLONG);
}

/* store_records: every record once, in order, with its segment and offset. */
static void
records_say_where_each_record_is(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { 0 };
	char			*cause = NULL;
	unsigned		 i;

	assert_int_equal(store_records(f->dir, where_apply, &s, &loaded,
	    &cause), 0);
	assert_null(cause);
	assert_int_equal(s.count, RECORDS);
	assert_false(s.checkpoint);
	assert_int_equal(s.segment, 1);
	assert_int_equal(loaded.failure, STORE_OK);
	assert_int_equal(loaded.checkpoint, 0);
	assert_int_equal(loaded.stats.records, RECORDS);
	for (i = 1; i < RECORDS; i++)
		assert_int_equal(s.offsets[i], f->ends[i - 1]);
}

/* A missing journal is an empty one, not a failure. */
static void
missing_journal_loads_empty(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { 0 };
	char			 dir[PATH_MAX + 8];
	char			*cause = NULL;

	snprintf(dir, sizeof dir, "%s/none", f->dir);
	assert_int_equal(store_load(dir, JOURNAL_REPLAY_READONLY, count_apply,
	    NULL, &s, NULL, &loaded, &cause), 0);
	assert_int_equal(s.count, 0);
	assert_int_equal(loaded.failure, STORE_OK);
}

/* Damage with valid records after it: STORE_JOURNAL_CORRUPT, its offset. */
static void
corrupt_journal_is_typed_with_its_offset(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { 0 };
	char			 path[PATH_MAX + 32];
	char			*cause = NULL;

	segment_path(f, path, sizeof path);
	damage(path, (off_t)f->ends[1] + 20, 8);	/* in the third record */
	assert_int_equal(store_load(f->dir, JOURNAL_REPLAY_READONLY,
	    count_apply, NULL, &s, NULL, &loaded, &cause), -1);
	assert_int_equal(loaded.failure, STORE_JOURNAL_CORRUPT);
	assert_true(loaded.has_corrupt_offset);
	assert_int_equal(loaded.corrupt_offset, f->ends[1]);
	assert_int_equal(s.count, 2);	/* the records before it */
	assert_non_null(cause);
	free(cause);
}

/* A damaged checkpoint: STORE_CHECKPOINT_CORRUPT, nothing applied. */
static void
corrupt_checkpoint_is_typed(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { 0 };
	char			 path[PATH_MAX + 64];
	char			 junk[200];
	char			*cause = NULL;
	int			 fd;

	/* A checkpoint continuing at segment 1, with no valid header. */
	snprintf(path, sizeof path, "%s/checkpoint-%016" PRIx64 ".snap",
	    f->dir, (uint64_t)1);
	memset(junk, 'X', sizeof junk);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600)) !=
	    -1);
	assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
	close(fd);
	assert_int_equal(store_load(f->dir, JOURNAL_REPLAY_READONLY,
	    count_apply, NULL, &s, NULL, &loaded, &cause), -1);
	assert_int_equal(loaded.failure, STORE_CHECKPOINT_CORRUPT);
	assert_int_equal(loaded.checkpoint, 1);
	assert_int_equal(s.count, 0);
	assert_non_null(cause);
	free(cause);
}

/* An apply that fails (even leaving errno EINVAL) is not damage. */
static void
apply_failure_is_not_damage(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { .fail_at = 3 };
	char			*cause = NULL;

	assert_int_equal(store_load(f->dir, JOURNAL_REPLAY_READONLY,
	    count_apply, NULL, &s, NULL, &loaded, &cause), -1);
	assert_int_equal(loaded.failure, STORE_APPLY_FAILED);
	assert_int_equal(s.count, 2);
	free(cause);
}

/* A journal directory that is a file cannot be read: not damage. */
static void
unreadable_journal_is_not_damage(void **state)
{
	struct fixture		*f = *state;
	struct store_loaded	 loaded;
	struct seen		 s = { 0 };
	char			 file[PATH_MAX + 8];
	char			*cause = NULL;
	int			 fd;

	snprintf(file, sizeof file, "%s/file", f->root);
	assert_true((fd = open(file, O_WRONLY | O_CREAT, 0600)) != -1);
	close(fd);
	assert_int_equal(store_load(file, JOURNAL_REPLAY_READONLY,
	    count_apply, NULL, &s, NULL, &loaded, &cause), -1);
	assert_int_equal(loaded.failure, STORE_UNREADABLE);
	free(cause);
}

struct findings {
	unsigned	count[STORE_CHECK_INDEX_BUSY + 1];
	char		missing[RECORDS][IDEM_MAX_TASK_ID_BYTES + 16];	/* an id */
	char		foreign[PATH_MAX];
	char		disagrees[SUBTAB_MAX_KEY_BYTES + 1];	/* the last */
	unsigned	differs;
};

static void
note(const struct store_problem *p, void *arg)
{
	struct findings	*fs = arg;

	assert_true(p->check <= STORE_CHECK_INDEX_BUSY);
	if (p->check == STORE_CHECK_INDEX_DISAGREES) {
		assert_non_null(p->record);
		assert_non_null(p->indexed);
		assert_string_equal(p->key, p->record->key);
		snprintf(fs->disagrees, sizeof fs->disagrees, "%s", p->key);
		fs->differs = p->differs;
	}
	if (p->check == STORE_CHECK_MISSING) {
		assert_non_null(p->record);
		assert_int_equal(p->severity, STORE_SEVERITY_ERROR);
		assert_true(fs->count[p->check] < RECORDS);
		snprintf(fs->missing[fs->count[p->check]],
		    sizeof fs->missing[0], "%s",
		    p->record->id);
	}
	if (p->check == STORE_CHECK_FOREIGN) {
		assert_int_equal(p->severity, STORE_SEVERITY_NONE);
		snprintf(fs->foreign, sizeof fs->foreign, "%s", p->path);
	}
	fs->count[p->check]++;
}

/*
 * store_verify: each task the journal holds and the workspace lacks is
 * one STORE_CHECK_MISSING naming the record; a TASK file no record names
 * is STORE_CHECK_FOREIGN, not a problem; the counts agree.
 */
static void
verify_reports_typed_findings(void **state)
{
	struct fixture		*f = *state;
	struct store_verify	 v;
	struct findings		 fs;
	char			 path[PATH_MAX + 64];
	char			*cause = NULL;
	int			 fd;

	snprintf(path, sizeof path, "%s/_lifecycle", f->root);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/_lifecycle/inbox", f->root);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/_lifecycle/inbox/"
	    "TASK-20261202-900-OPS-to-DEV.md", f->root);
	assert_true((fd = open(path, O_WRONLY | O_CREAT, 0600)) != -1);
	assert_int_equal(write(fd, "x\n", 2), 2);
	close(fd);

	memset(&fs, 0, sizeof fs);
	memset(&v, 0, sizeof v);
	v.root = f->root;
	v.sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	v.note = note;
	v.arg = &fs;
	assert_int_equal(store_verify(&v, &cause), 0);
	assert_null(cause);
	assert_int_equal(v.failure, STORE_VERIFY_OK);
	assert_true(v.journal_complete);
	assert_int_equal(fs.count[STORE_CHECK_MISSING], RECORDS);
	assert_string_equal(fs.missing[0], "TASK-20261202-001-PM-to-DEV");
	assert_string_equal(fs.missing[RECORDS - 1],
	    "TASK-20261202-005-PM-to-DEV");
	assert_int_equal(fs.count[STORE_CHECK_FOREIGN], 1);
	assert_string_equal(fs.foreign,
	    "_lifecycle/inbox/TASK-20261202-900-OPS-to-DEV.md");
	assert_int_equal(v.foreign, 1);
	assert_int_equal(v.submissions, RECORDS);
	assert_int_equal(v.files, 1);
	assert_true(v.errors >= RECORDS);
	assert_int_equal(v.loaded.stats.records, RECORDS);
	store_verify_free(&v);
}

/* A damaged journal is a finding (journal_corrupt), not a failure to run. */
static void
verify_reports_corruption_as_a_finding(void **state)
{
	struct fixture		*f = *state;
	struct store_verify	 v;
	struct findings		 fs;
	char			 path[PATH_MAX + 32];
	char			*cause = NULL;

	segment_path(f, path, sizeof path);
	damage(path, (off_t)f->ends[0] + 20, 8);
	memset(&fs, 0, sizeof fs);
	memset(&v, 0, sizeof v);
	v.root = f->root;
	v.sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	v.note = note;
	v.arg = &fs;
	assert_int_equal(store_verify(&v, &cause), 0);
	assert_int_equal(fs.count[STORE_CHECK_JOURNAL_CORRUPT], 1);
	assert_false(v.journal_complete);
	assert_non_null(v.corrupt);
	assert_true(v.loaded.has_corrupt_offset);
	assert_int_equal(v.loaded.corrupt_offset, f->ends[0]);
	/* The record before the damage is still checked, not the files. */
	assert_int_equal(fs.count[STORE_CHECK_MISSING], 1);
	assert_int_equal(v.files, 0);
	store_verify_free(&v);
}

/* f's root verified: its findings in fs, its counts in v. */
static void
verify_root(struct fixture *f, struct store_verify *v, struct findings *fs)
{
	char	*cause = NULL;

	memset(fs, 0, sizeof *fs);
	memset(v, 0, sizeof *v);
	v->root = f->root;
	v->sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	v->note = note;
	v->arg = fs;
	assert_int_equal(store_verify(v, &cause), 0);
	assert_null(cause);
	assert_true(v->journal_complete);
	store_verify_free(v);
}

/* f's index holds r (of form) alone among what this test put there. */
static void
index_holds(struct fixture *f, int form, const struct journal_record *r)
{
	struct index	 x;
	MDB_val		 k;
	char		 dir[PATH_MAX];
	char		*cause = NULL;
	int		 rc;

	/* The store never replaces an entry: one already here goes first. */
	snprintf(dir, sizeof dir, "%s/%s", f->root, IDEM_INDEX_DIR);
	k.mv_data = (void *)r->key;
	k.mv_size = r->entry.key_length;
	if (index_open(&x, dir, 0, &cause) != 0 ||
	    index_begin(&x, &cause) != 0 ||
	    ((rc = mdb_del(x.write, x.receipts, &k, NULL)) != 0 &&
	    rc != MDB_NOTFOUND) ||
	    index_put(&x, form, r, &cause) != 0 ||
	    index_commit(&x, 0, &cause) != 0)
		fail_msg("index: %s", cause);
	index_close(&x);
}

/*
 * store_verify compares the index's entry of an effect with the
 * journal's record of its key, on its receipt's facts: the same entry
 * agrees, and so does its tombstone; other result bytes under the same
 * digest are STORE_FACT_RESULT, a tombstone's other committed_at and
 * recovered flag those two facts; an effect only the index holds is
 * counted, not a finding.  A task's entry with another number is
 * STORE_FACT_NUMBER.
 */
static void
verify_compares_an_effect_with_the_index(void **state)
{
	static const char	 result[] = "{\"message_id\":7}";
	static const char	 other[] = "{\"message_id\":8}";
	struct fixture		*f = *state;
	struct store_verify	 v;
	struct findings		 fs;
	struct journal		 j;
	struct journal_record	 r, x, task;
	char			*cause = NULL;

	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_EFFECT;
	r.entry.kind = SUBTAB_KIND_EFFECT;
	r.entry.state = SUBTAB_COMMITTED;
	r.entry.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	r.entry.attempt = 1;
	r.entry.result_length = sizeof result - 1;
	r.entry.key_length = (uint16_t)snprintf(r.key, sizeof r.key,
	    "mail.send/v1%cfx-1", SUBTAB_EFFECT_SEPARATOR);
	memset(r.entry.request_digest, 0xab, IDEM_SHA256_BYTES);
	digest_sha256(result, sizeof result - 1, r.entry.file_digest);
	r.entry.created_at_ms = 1764000000000LL;
	r.result = (const uint8_t *)result;
	if (journal_open(&j, f->dir, &cause) != 0)
		fail_msg("journal_open: %s", cause);
	append_record(&j, &r);
	if (journal_sync(&j, &cause) != 0)
		fail_msg("sync: %s", cause);
	journal_close(&j);

	/* The same entry: it agrees. */
	index_holds(f, INDEX_FULL, &r);
	verify_root(f, &v, &fs);
	assert_int_equal(fs.count[STORE_CHECK_INDEX_DISAGREES], 0);
	assert_int_equal(v.effects, 1);
	assert_int_equal(v.index_entries, 1);
	assert_int_equal(v.index_effects, 1);
	assert_int_equal(v.index_effects_only, 0);

	/* Other bytes under the recorded digest. */
	x = r;
	x.result = (const uint8_t *)other;
	index_holds(f, INDEX_FULL, &x);
	verify_root(f, &v, &fs);
	assert_int_equal(fs.count[STORE_CHECK_INDEX_DISAGREES], 1);
	assert_string_equal(fs.disagrees, r.key);
	assert_int_equal(fs.differs, STORE_FACT_RESULT);

	/* Compacted: the tombstone agrees; with other kept facts, not. */
	index_tombstone_of(&r, &x);
	index_holds(f, INDEX_TOMBSTONE, &x);
	verify_root(f, &v, &fs);
	assert_int_equal(fs.count[STORE_CHECK_INDEX_DISAGREES], 0);
	x.entry.created_at_ms++;
	x.entry.effect_flags |= SUBTAB_EFFECT_RECOVERED;
	index_holds(f, INDEX_TOMBSTONE, &x);
	verify_root(f, &v, &fs);
	assert_int_equal(fs.count[STORE_CHECK_INDEX_DISAGREES], 1);
	assert_int_equal(fs.differs, STORE_FACT_COMMITTED_AT |
	    STORE_FACT_RECOVERED);
	index_tombstone_of(&r, &x);
	index_holds(f, INDEX_TOMBSTONE, &x);

	/* An effect the journal does not hold: counted, nothing to agree. */
	x = r;
	x.entry.key_length = (uint16_t)snprintf(x.key, sizeof x.key,
	    "mail.send/v1%cfx-2", SUBTAB_EFFECT_SEPARATOR);
	index_holds(f, INDEX_FULL, &x);
	/* A task of the journal under another number. */
	make_record(&task, 2);
	task.entry.seq++;
	index_holds(f, INDEX_FULL, &task);
	verify_root(f, &v, &fs);
	assert_int_equal(v.index_effects, 1);
	assert_int_equal(v.index_effects_only, 1);
	assert_int_equal(fs.count[STORE_CHECK_INDEX_DISAGREES], 1);
	assert_string_equal(fs.disagrees, "sub-2");
	assert_int_equal(fs.differs, STORE_FACT_NUMBER);
	/* No checkpoint: nothing the index must hold. */
	assert_int_equal(fs.count[STORE_CHECK_INDEX_LACKS], 0);
}

/* A directory without .idem/ is not a workspace: typed, nothing noted. */
static void
verify_refuses_a_non_workspace(void **state)
{
	struct fixture		*f = *state;
	struct store_verify	 v;
	struct findings		 fs;
	char			 path[PATH_MAX + 8];
	char			*cause = NULL;

	snprintf(path, sizeof path, "%s/elsewhere", f->root);
	assert_int_equal(mkdir(path, 0700), 0);
	memset(&fs, 0, sizeof fs);
	memset(&v, 0, sizeof v);
	v.root = path;
	v.note = note;
	v.arg = &fs;
	assert_int_equal(store_verify(&v, &cause), -1);
	assert_int_equal(v.failure, STORE_VERIFY_NOT_WORKSPACE);
	assert_int_equal(v.state_dir, STORE_STATE_DIR_MISSING);
	assert_int_equal(fs.count[STORE_CHECK_MISSING], 0);
	store_verify_free(&v);
}

/*
 * nofollow_parent opens the directories on the way with one openat2
 * where the kernel has it: the same answers as the walk, component by
 * component (a symlink anywhere ELOOP, a file on the way ENOTDIR, ".."
 * refused, the last component never followed).
 */
static void
nofollow_refuses_symlinks_on_the_way(void **state)
{
	static const struct {
		const char	*path;
		int		 error;
	} refused[] = {
		{ "link/b/f", ELOOP },		/* a symlink to a dir */
		{ "a/lb/f", ELOOP },		/* a relative one, deeper */
		{ "abs/b/f", ELOOP },		/* an absolute one */
		{ "plain/f", ENOTDIR },		/* a file on the way */
		{ "a/../a/b/f", EINVAL },	/* ".." */
		{ "a/missing/f", ENOENT },
	};
	struct fixture	*f = *state;
	struct stat	 st;
	char		 path[PATH_MAX], last[NAME_MAX + 1];
	size_t		 i;
	int		 root, fd;

	root = open(f->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(root >= 0);
	assert_int_equal(mkdirat(root, "a", 0700), 0);
	assert_int_equal(mkdirat(root, "a/b", 0700), 0);
	fd = openat(root, "a/b/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	fd = openat(root, "plain", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(symlinkat("a", root, "link"), 0);
	assert_int_equal(symlinkat("b", root, "a/lb"), 0);
	snprintf(path, sizeof path, "%s/a", f->root);
	assert_int_equal(symlinkat(path, root, "abs"), 0);

	assert_int_equal(nofollow_lstat(root, "a/b/f", &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(nofollow_lstat(root, "/a//b/f", &st), 0);
	assert_int_equal(nofollow_lstat(root, "./a/b/f", &st), 0);
	fd = nofollow_parent(root, "a/b/f", last);
	assert_true(fd >= 0);
	assert_string_equal(last, "f");
	assert_int_equal(fstatat(fd, last, &st, AT_SYMLINK_NOFOLLOW), 0);
	close(fd);

	for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		errno = 0;
		assert_int_equal(nofollow_lstat(root, refused[i].path, &st),
		    -1);
		assert_int_equal(errno, refused[i].error);
	}
	/* The last component is looked at, not followed. */
	assert_int_equal(nofollow_lstat(root, "a/lb", &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	close(root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(journal_dir_is_built_once),
		T(records_say_where_each_record_is),
		T(missing_journal_loads_empty),
		T(corrupt_journal_is_typed_with_its_offset),
		T(corrupt_checkpoint_is_typed),
		T(apply_failure_is_not_damage),
		T(unreadable_journal_is_not_damage),
		T(verify_reports_typed_findings),
		T(verify_reports_corruption_as_a_finding),
		T(verify_refuses_a_non_workspace),
		T(verify_compares_an_effect_with_the_index),
		T(nofollow_refuses_symlinks_on_the_way),
#undef T
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
