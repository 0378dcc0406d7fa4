/* SPDX-License-Identifier: ISC */
/*
 * test_journal_order.c: the order of the durable steps of a rotation to
 * the segment made ahead (broker/store/journal.c; doc/journal.md, "The
 * next segment made ahead").  A crash-state model of it needs an early
 * rotation (a zero tail to cut) to see them at all; this test sees them
 * directly: it defines fsync, fdatasync, ftruncate and renameat2 itself
 * (journal.c, linked into this program, calls these; each records the
 * call and the file it names, then calls libc's), and checks that
 *
 *	- the file made ahead is fsync'd before it can have a segment's name;
 *	- the old segment's zero tail is cut and the cut fsync'd before the
 *	  rename;
 *	- the directory is fsync'd after the rename, before the rotation
 *	  returns (before any record can go into the new segment);
 *	- the write-back of the file made ahead is paced (sync_file_range,
 *	  durable.c: a piece of at most DURABLE_PACE_BYTES started once the
 *	  one before it is done) and its fsync still comes after all of it:
 *	  the pacing is no durability step and moves none.
 *
 * Each is one way to lose acknowledged receipts or refuse start-up after
 * a crash, and each fails here when taken out of journal.c.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <sys/stat.h>
#include <sys/types.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
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

#include "integration/filter.h"
#include "store.h"
#include "tree.h"
#include "journal_test.h"

/* ---- the calls recorded ------------------------------------------------ */

#define ORDER_MAX	64

struct order_call {
	/* "fsync", "fdatasync", "ftruncate", "rename", "writeback", "wait" */
	char		op[16];
	char		name[PATH_MAX];	/* the file's last path component */
	uint64_t	offset, length;	/* a writeback's or a wait's range */
};

static struct {
	int			on;
	size_t			count;
	struct order_call	calls[ORDER_MAX];
	const char		*fail_fsync;	/* of this name: EIO */
} order;

/* The last path component of fd's file ("" if unknown). */
static const char *
order_fd_name(int fd, char path[PATH_MAX])
{
	char		 link[64];
	const char	*slash;
	ssize_t		 n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	if ((n = readlink(link, path, PATH_MAX - 1)) == -1)
		n = 0;
	path[n] = '\0';
	return (slash = strrchr(path, '/')) != NULL ? slash + 1 : path;
}

static void
order_record(const char *op, const char *name)
{
	struct order_call	*c;
	const char		*slash;

	if (!order.on || order.count == ORDER_MAX)
		return;
	c = &order.calls[order.count++];
	snprintf(c->op, sizeof c->op, "%s", op);
	if ((slash = strrchr(name, '/')) != NULL && slash[1] != '\0')
		name = slash + 1;
	snprintf(c->name, sizeof c->name, "%s", name);
}

static void
order_record_fd(const char *op, int fd)
{
	char	link[64], path[PATH_MAX];
	ssize_t	n;

	if (!order.on)
		return;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	if ((n = readlink(link, path, sizeof path - 1)) == -1)
		n = 0;
	path[n] = '\0';
	order_record(op, path);
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int
fsync(int fd)
{
	char	path[PATH_MAX];

	order_record_fd("fsync", fd);
	if (order.fail_fsync != NULL &&
	    strcmp(order_fd_name(fd, path), order.fail_fsync) == 0) {
		errno = EIO;
		return -1;
	}
	return REAL(fsync)(fd);
}

int
fdatasync(int fd)
{
	order_record_fd("fdatasync", fd);
	return REAL(fdatasync)(fd);
}

int
ftruncate(int fd, off_t length)
{
	order_record_fd("ftruncate", fd);
	return REAL(ftruncate)(fd, length);
}

/* durable.c's pace: "writeback" starts a range, "wait" waits for one. */
int
sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)
{
	size_t	before = order.count;

	order_record_fd(flags == SYNC_FILE_RANGE_WRITE ? "writeback" :
	    flags == SYNC_FILE_RANGE_WAIT_BEFORE ? "wait" : "sync_file_range",
	    fd);
	if (order.count > before) {
		order.calls[before].offset = (uint64_t)offset;
		order.calls[before].length = (uint64_t)nbytes;
	}
	return REAL(sync_file_range)(fd, offset, nbytes, flags);
}

int
renameat2(int olddirfd, const char *oldpath, int newdirfd,
    const char *newpath, unsigned int flags)
{
	order_record("rename", newpath);
	return REAL(renameat2)(olddirfd, oldpath, newdirfd, newpath, flags);
}

/* The index of the first call op on name at or after from; -1: none. */
static int
order_find(const char *op, const char *name, int from)
{
	size_t	i;

	for (i = from < 0 ? 0 : (size_t)from; i < order.count; i++) {
		if (strcmp(order.calls[i].op, op) == 0 &&
		    strcmp(order.calls[i].name, name) == 0)
			return (int)i;
	}
	return -1;
}

static void
order_print(void)
{
	size_t	i;

	for (i = 0; i < order.count; i++)
		print_message("  %zu: %s %s\n", i, order.calls[i].op,
		    order.calls[i].name);
}

/* ---- the tests ------------------------------------------------------- */

/*
 * The journal in f opened, three records in segment 1 and zeros ahead of
 * them: a rotation now is an early one, with a zero tail to cut.
 */
static void
open_with_zero_tail(struct fixture *f, struct journal *j)
{
	char	*cause = NULL;

	assert_int_equal(journal_open(j, f->dir, &cause), 0);
	append_records(j, 0, 3, NULL);
	assert_int_equal(journal_prezero(j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_true(j->zeroed > j->size);
}

/*
 * An early rotation (a checkpoint asked for while the segment still has
 * its zero tail): made ahead (fsync'd), then the cut of segment 1 and its
 * fsync, then the rename of .next-2 into place, then the directory's
 * fsync, then the switch.
 */
static void
early_rotation_syncs_in_order(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	struct journal_next next;
	char		*cause = NULL, tmp[JOURNAL_NEXT_NAME_BYTES];
	char		 dir_name[PATH_MAX], seg1[32], seg2[32];
	const char	*slash;
	int		 made, cut, cut_sync, renamed, dir_sync;

	journal_next_name(2, tmp);
	snprintf(seg1, sizeof seg1, "%016x.jnl", 1);
	snprintf(seg2, sizeof seg2, "%016x.jnl", 2);
	slash = strrchr(f->dir, '/');
	snprintf(dir_name, sizeof dir_name, "%s", slash + 1);

	open_with_zero_tail(f, &j);

	order.on = 1;
	order.count = 0;
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	assert_true(next.fd != -1);
	assert_int_equal(journal_rotate_next(&j, &next, &cause), 0);
	order.on = 0;
	assert_int_equal(j.segment, 2);

	order_print();
	made = order_find("fsync", tmp, 0);
	cut = order_find("ftruncate", seg1, 0);
	cut_sync = order_find("fsync", seg1, cut);
	renamed = order_find("rename", seg2, 0);
	dir_sync = order_find("fsync", dir_name, renamed);
	/* The file made ahead is durable before it can be a segment. */
	assert_true(made != -1);
	assert_true(renamed != -1);
	assert_true(made < renamed);
	/* The cut, and its fsync, before segment 2 can exist. */
	assert_true(cut != -1);
	assert_true(cut_sync != -1);
	assert_true(cut_sync < renamed);
	/* The rename durable before the rotation returns. */
	assert_true(dir_sync != -1);
	assert_true(dir_sync > renamed);
	journal_close(&j);
}

/*
 * The same without one made ahead (none could be made): the old path,
 * create_segment, keeps its order too: the cut before the new file, the
 * new file's fsync, the directory's.
 */
static void
rotation_without_one_made_ahead_syncs_in_order(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	char		*cause = NULL;
	char		 dir_name[PATH_MAX], seg1[32], seg2[32];
	const char	*slash;
	int		 cut_sync, created, dir_sync;

	snprintf(seg1, sizeof seg1, "%016x.jnl", 1);
	snprintf(seg2, sizeof seg2, "%016x.jnl", 2);
	slash = strrchr(f->dir, '/');
	snprintf(dir_name, sizeof dir_name, "%s", slash + 1);

	open_with_zero_tail(f, &j);

	order.on = 1;
	order.count = 0;
	assert_int_equal(journal_rotate_next(&j, NULL, &cause), 0);
	order.on = 0;
	order_print();
	cut_sync = order_find("fsync", seg1, order_find("ftruncate", seg1, 0));
	created = order_find("fsync", seg2, 0);
	dir_sync = order_find("fsync", dir_name, created);
	assert_true(cut_sync != -1);
	assert_true(created != -1);
	assert_true(cut_sync < created);
	assert_true(dir_sync != -1);
	journal_close(&j);
}

/*
 * The directory fsync after the rename fails: the rotation fails, the
 * name is removed again, and the journal goes on in segment 1.  But that
 * removal is no more durable than the rename was, so a crash may leave
 * segment 2 (header and zeros) after segment 1: segment 1 must then end
 * in records, i.e. get no zeros ahead until a rotation succeeds.  The
 * state is built by hand (segment 2 made ahead again and renamed), and
 * replay reads every record, segment 2 its clean empty end.  Fails when
 * segment 1 gets zeros ahead again (replay: zeros in a sealed segment).
 */
static void
failed_rotation_keeps_no_zeros_ahead(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct journal_next		 next;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, tmp[JOURNAL_NEXT_NAME_BYTES];
	char				 path[256], from[512], to[512];
	const char			*slash;

	slash = strrchr(f->dir, '/');
	journal_next_name(2, tmp);
	open_with_zero_tail(f, &j);
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);

	order.fail_fsync = slash + 1;
	assert_int_equal(journal_rotate_next(&j, &next, &cause), -1);
	order.fail_fsync = NULL;
	assert_non_null(strstr(cause, "fsync directory"));
	free(cause);
	cause = NULL;
	assert_int_equal(j.segment, 1);
	segment_path(f, 2, path, sizeof path);
	assert_int_equal(access(path, F_OK), -1);

	/* Rounds go on in segment 1, with no zeros ahead. */
	append_records(&j, 3, 2, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_int_equal(j.zeroed, j.size);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(file_size(path), j.size);

	/* The crash: the rename persisted, the removal did not. */
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	close(next.fd);
	snprintf(from, sizeof from, "%s/%s", f->dir, tmp);
	segment_path(f, 2, to, sizeof to);
	assert_int_equal(rename(from, to), 0);
	journal_close(&j);
	if (replay(f->dir, &c, &stats, &cause) != 0)
		fail_msg("replay: %s", cause);
	assert_int_equal(stats.records, 5);
	assert_int_equal(stats.segments, 2);
	assert_int_equal(stats.end_segment, 2);
	free(c.records);

	/* And a rotation that succeeds zeroes ahead again. */
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.segment, 2);
	append_records(&j, 5, 1, NULL);
	assert_int_equal(journal_rotate_next(&j, NULL, &cause), 0);
	append_records(&j, 6, 1, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_true(j.zeroed > j.size);
	journal_close(&j);
}

/*
 * The same failure, then the journal reopened (journaler_reopen after a
 * failed write, or a restart): the flag is gone with the old handle, so
 * the open itself fsyncs the directory, which makes the name's removal
 * durable, before any zeros.  While that fsync fails too, the reopened
 * segment gets no zeros ahead; once it succeeds, it does.  Fails when
 * the open does not fsync the directory, or zeroes ahead regardless.
 */
static void
reopen_zeroes_ahead_only_after_a_directory_fsync(void **state)
{
	struct fixture		*f = *state;
	struct journal		 j;
	struct journal_next	 next;
	char			*cause = NULL;
	const char		*dir_name = strrchr(f->dir, '/') + 1;

	open_with_zero_tail(f, &j);
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	order.fail_fsync = dir_name;
	assert_int_equal(journal_rotate_next(&j, &next, &cause), -1);
	free(cause);
	cause = NULL;
	journal_close(&j);

	/* Reopened while the directory's fsync still fails: no zeros. */
	if (journal_open(&j, f->dir, &cause) != 0)
		fail_msg("open: %s", cause);
	order.fail_fsync = NULL;
	assert_int_equal(j.segment, 1);
	append_records(&j, 3, 1, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_int_equal(j.zeroed, j.size);
	journal_close(&j);

	/* Reopened with the directory synced at the open: zeros again. */
	order.on = 1;
	order.count = 0;
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	order.on = 0;
	order_print();
	assert_true(order_find("fsync", dir_name, 0) != -1);
	append_records(&j, 4, 1, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_true(j.zeroed > j.size);
	journal_close(&j);
}

/*
 * The next segment made ahead, 1 MiB of zeros (a 4 MiB segment): their
 * write-back is started a piece at a time from the file's start to its
 * end, no piece longer than DURABLE_PACE_BYTES, each after a wait for
 * the one before it (one in flight), and the file's fsync, its
 * durability step, comes after the last.  Fails without the pacing (no
 * write-back at all), with a piece started before the previous one is
 * waited for, or with the fsync moved before the write-back.
 */
static void
made_ahead_zeros_written_back_paced_before_their_fsync(void **state)
{
	struct fixture		*f = *state;
	struct journal		 j;
	struct journal_next	 next;
	struct order_call	*c, *prev = NULL;
	char			*cause = NULL, tmp[JOURNAL_NEXT_NAME_BYTES];
	uint64_t		 started = 0;
	size_t			 i;
	int			 synced, pieces = 0;

	journal_next_name(2, tmp);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	order.on = 1;
	order.count = 0;
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    4 * 1024 * 1024, &next, &cause), 0);
	order.on = 0;
	order_print();
	assert_true(next.fd != -1);
	assert_int_equal(next.zeroed, 1024 * 1024);
	synced = order_find("fsync", tmp, 0);
	assert_true(synced != -1);
	for (i = 0; i < order.count; i++) {
		c = &order.calls[i];
		if (strcmp(c->name, tmp) != 0 || (strcmp(c->op, "writeback") !=
		    0 && strcmp(c->op, "wait") != 0))
			continue;
		assert_true((int)i < synced);
		if (strcmp(c->op, "wait") == 0) {
			/* The piece before, whole, before the next one. */
			assert_non_null(prev);
			assert_int_equal(c->offset, prev->offset);
			assert_int_equal(c->length, prev->length);
			assert_true(i + 1 < order.count);
			assert_string_equal(order.calls[i + 1].op,
			    "writeback");
			continue;
		}
		assert_int_equal(c->offset, started);
		assert_true(c->length > 0 && c->length <= DURABLE_PACE_BYTES);
		if (prev != NULL)
			assert_string_equal(order.calls[i - 1].op, "wait");
		started += c->length;
		prev = c;
		pieces++;
	}
	assert_int_equal(started, next.zeroed);
	assert_true(pieces >= 4);
	journal_drop_next(j.dir_fd, &next);
	journal_close(&j);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(early_rotation_syncs_in_order,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    rotation_without_one_made_ahead_syncs_in_order, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    failed_rotation_keeps_no_zeros_ahead, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    reopen_zeroes_ahead_only_after_a_directory_fsync, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    made_ahead_zeros_written_back_paced_before_their_fsync,
		    setup, teardown),
	};

	return FILTER_RUN(tests);
}
