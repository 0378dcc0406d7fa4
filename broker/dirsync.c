/* SPDX-License-Identifier: ISC */
/*
 * dirsync.c: a directory's fsync shared by the threads that each need
 * one begun after their change: the PostgreSQL creation's link
 * (doc/cluster.md, "Creation, step by step", 6).
 *
 * DESIGN
 *
 * What a link needs before its commit is an fsync of its directory that
 * began after the link, not one of its own: such an fsync makes every
 * name the directory held when it began durable.  So, as the journal's
 * group commit and fileio.c's directory rounds do: a caller counts its
 * change (changed, under the lock, after the change is made); whoever
 * finds its change not yet covered and no round running starts one,
 * which covers every change counted before it began; the others wait
 * for it, or for the next.  A round is never held open for more
 * callers: one alone syncs at once, so a lone creation waits no longer
 * than with its own fsync, and callers that arrive while a round runs
 * share the next.  But a round about to begin waits for the callers
 * already on their way (dirsync_coming: a creation granted, linking
 * now, with no fsync of its own before its call, though a member of a
 * round of grants may first wait for the round's leader's temporary's
 * fsync, after which the leader reads the round), so that the links of
 * one round of grants share one fsync instead of the second waiting
 * for a round of its own; an event (each one's arrival, or its going
 * another way), bounded by DIRSYNC_GATHER_MS for one stalled on its way
 * (held by a test's hold point, a page fault on a loaded host).  The
 * last to arrive wakes no one waiting on its own directory: it syncs
 * it itself (or waits for the round running), and that round's end
 * wakes them, once, after the lock is let go, not under it, where the
 * woken would only wait for it (so does dirsync_gone's).  Three
 * broadcasts stay under the lock: the arrival's wake of the waiters of
 * other directories (its caller goes on under the lock to its own
 * round: after it, they would wait that round out), a wait's giving up
 * (dirsync_give_up) and the end of a slotless fsync (dirsync_alone),
 * both rare.  A wait
 * that ran out gives up on every caller then on its way (a generation:
 * dirsync_give_up), so one stalled costs one such wait, not one every
 * round; callers marked after are waited for again.  The
 * callers on their way are counted for the whole dirsync, not per
 * directory: a creation's link and a report's, in two directories at
 * once, wait for each other at most that long.
 *
 * A failed fsync fails every caller whose change it may have covered,
 * and no later round is taken as repairing it for them: the kernel may
 * have dropped the dirty state with the error, and Linux reports a
 * writeback error once per open file description, so the next round's
 * fsync would succeed without the change being durable.  That is not
 * only the changes counted before the round began: a link made while
 * the fsync ran may have been written back, and failed, under it, and
 * its caller may count it only after the failure was noted.  So, as the
 * kernel's errseq does, each directory counts its failed rounds
 * (failures, under the lock); a caller reads the count before its
 * change (dirsync_before: one load) and, once a round begun after its
 * change has ended, fails if the count has moved since.  A failure
 * noted before the read came from an fsync that returned before the
 * change was made, and does not concern it; every later one may.  A
 * caller whose round ended good but who looks after a later round
 * failed is failed too: an error a retry repairs.  None is told its
 * change is durable when a round that may have covered it failed.
 *
 * That count is one process's: it sees only the failures of that
 * process's fsyncs.  So the fd must be that process's own open file
 * description, which the kernel's errseq is kept per: were it shared
 * with another process (as the exec'd workers once shared the master's
 * inbox and reports descriptions), that process's failed fsync could
 * take the error of this one's link, uncounted here, and this one's
 * next round would succeed.  Each worker opens its own at start-up
 * (main.c, worker_own_dir), so every error reported on it after that
 * goes to one of its own fsyncs and is counted.  An error from before
 * it was opened concerns no link of its own (none preceded it); if the
 * kernel still reports it (one nobody had seen yet), a first round
 * fails for nothing, which a retry repairs.
 *
 * A directory past the table's slots (DIRSYNC_DIRS; fileio.c's
 * FILEIO_DIRS) has no rounds: each caller fsyncs it itself.  Its fd is
 * shared all the same (the worker's inbox_fd or reports_fd, by every
 * thread of the worker), so the hole is the same: one caller's failed fsync may take
 * the writeback error of another's link, whose own later fsync then
 * succeeds.  In practice no directory lacks a slot (only the inbox and
 * the reports directory go through these tables), but the path must
 * not lie: the slotless directories' fsyncs run one at a time, and
 * their failures are counted together (alone), read before the change
 * and looked at after the caller's fsync as for a slot's.  One count
 * for all of them is conservative: a failure in one fails a caller in
 * another whose change preceded it (and one whose fd had no slot
 * taken yet when it read 0, if any slotless failure ever happened: a
 * race of a fifth directory's first change).
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dirsync.h"
#include "idemd.h"
#include "monoclock.h"

void
dirsync_init(struct dirsync *ds, int (*sync)(int))
{
	memset(ds, 0, sizeof *ds);
	pthread_mutex_init(&ds->lock, NULL);
	pthread_cond_init(&ds->round, NULL);
	ds->sync = sync;
}

static int
dirsync_sync(struct dirsync *ds, int fd)
{
	return ds->sync != NULL ? ds->sync(fd) : fsync(fd);
}

/*
 * Shared with fileio.c's rounds (dirsync.h).  fd1 is stored once, under
 * the owner's lock, and loaded without it by dirsync_seen.
 */
struct dirsync_dir *
dirsync_slot(struct dirsync_dir *dirs, unsigned n, int fd)
{
	unsigned	i;
	int		fd1;

	for (i = 0; i < n; i++) {
		if ((fd1 = atomic_load(&dirs[i].fd1)) == fd + 1)
			return &dirs[i];
		if (fd1 == 0) {
			atomic_store(&dirs[i].fd1, fd + 1);
			return &dirs[i];
		}
	}
	return NULL;
}

void
dirsync_coming(struct dirsync *ds, unsigned *coming)
{
	pthread_mutex_lock(&ds->lock);
	if (!*coming) {
		if (ds->gen == 0)
			ds->gen = 1;	/* 0 is no mark */
		*coming = ds->gen;
		ds->coming++;
	}
	pthread_mutex_unlock(&ds->lock);
}

/*
 * Under ds->lock: the caller's mark cleared; 1 if it was the last one
 * waited for (a mark of a generation given up on counts no more) and
 * callers wait for it other than those on dir, the directory the caller
 * arrives at (NULL: it went another way, or has no slot): the caller
 * wakes them once it lets the lock go.  Those waiting on dir are not
 * woken: the caller syncs dir itself, or waits for the round of dir
 * running, and either round's end wakes them; woken now, each would
 * find that round begun and sleep again (a context switch, and a wait
 * for the lock, each).
 */
static int
dirsync_unmark(struct dirsync *ds, unsigned *coming,
    const struct dirsync_dir *dir)
{
	unsigned	gen;

	if (coming == NULL || !(gen = *coming))
		return 0;
	*coming = 0;
	return gen == ds->gen && --ds->coming == 0 &&
	    ds->gathering > (dir != NULL ? dir->gathering : 0);
}

/*
 * Under ds->lock: a wait for the callers on their way ran out.  No round
 * waits for them again (one stalled would cost every round a
 * DIRSYNC_GATHER_MS): the generation moves on, and only callers marked
 * from here on are waited for.
 */
static void
dirsync_give_up(struct dirsync *ds)
{
	ds->coming = 0;
	ds->tired++;
	if (++ds->gen == 0)
		ds->gen = 1;
	if (ds->gathering > 0)
		pthread_cond_broadcast(&ds->round);
}

void
dirsync_gone(struct dirsync *ds, unsigned *coming)
{
	int	error = errno, wake;

	if (!*coming)
		return;		/* set before its caller could look */
	pthread_mutex_lock(&ds->lock);
	wake = dirsync_unmark(ds, coming, NULL);
	pthread_mutex_unlock(&ds->lock);
	/* After the unlock: woken under it, they would wait for it. */
	if (wake)
		pthread_cond_broadcast(&ds->round);
	errno = error;
}

uint64_t
dirsync_seen(struct dirsync_dir *dirs, unsigned n, struct dirsync_dir *alone,
    int fd)
{
	unsigned	i;
	int		fd1;

	/*
	 * A slot not taken yet has had no round: 0, and any failure after
	 * this look (a round of a slot taken meanwhile, or of alone if
	 * another directory took the last slot) counts as one since.
	 * Acquire: the change this precedes is not made before the load.
	 */
	for (i = 0; i < n; i++) {
		if ((fd1 = atomic_load(&dirs[i].fd1)) == 0)
			return 0;
		if (fd1 == fd + 1)
			return atomic_load_explicit(&dirs[i].failures,
			    memory_order_acquire);
	}
	return atomic_load_explicit(&alone->failures, memory_order_acquire);
}

/*
 * One at a time: a failure is counted before the next slotless fsync
 * begins, so a caller whose fsync succeeded sees every failure of an
 * fsync that ran after its change was made (dirsync_failed_since), as a
 * slot's rounds do.
 */
int
dirsync_alone(struct dirsync_dir *alone, pthread_mutex_t *lock,
    pthread_cond_t *cond, int (*sync)(int), int fd, uint64_t seen)
{
	int	rc, error;

	while (alone->syncing)
		pthread_cond_wait(cond, lock);
	alone->syncing = 1;
	pthread_mutex_unlock(lock);
	rc = sync != NULL ? sync(fd) : fsync(fd);
	error = errno;
	pthread_mutex_lock(lock);
	if (rc == -1)
		dirsync_round_failed(alone, error);
	alone->syncing = 0;
	pthread_cond_broadcast(cond);
	return dirsync_failed_since(alone, seen);
}

void
dirsync_round_failed(struct dirsync_dir *dir, int error)
{
	dir->error = error;
	atomic_store(&dir->failures, atomic_load(&dir->failures) + 1);
}

int
dirsync_failed_since(const struct dirsync_dir *dir, uint64_t seen)
{
	return atomic_load(&dir->failures) != seen ? dir->error : 0;
}

uint64_t
dirsync_before(struct dirsync *ds, int fd)
{
	return dirsync_seen(ds->dirs, DIRSYNC_DIRS, &ds->alone, fd);
}

int
dirsync_after(struct dirsync *ds, int fd, uint64_t seen)
{
	return dirsync_after_coming(ds, fd, seen, NULL);
}

int
dirsync_after_coming(struct dirsync *ds, int fd, uint64_t seen,
    unsigned *coming)
{
	struct dirsync_dir	*dir;
	struct timespec		 until;
	uint64_t		 mine, target;
	int			 rc, error, gather = 1, wake = 0;

	pthread_mutex_lock(&ds->lock);
	ds->calls++;
	dir = dirsync_slot(ds->dirs, DIRSYNC_DIRS, fd);
	if (dirsync_unmark(ds, coming, dir))
		pthread_cond_broadcast(&ds->round);
	if (dir == NULL) {
		ds->rounds++;
		error = dirsync_alone(&ds->alone, &ds->lock, &ds->round,
		    ds->sync, fd, seen);
		pthread_mutex_unlock(&ds->lock);
		if (error == 0)
			return 0;
		errno = error;
		return -1;
	}
	mine = ++dir->changed;
	while (dir->synced < mine) {
		if (dir->syncing) {
			pthread_cond_wait(&ds->round, &ds->lock);
			continue;
		}
		if (ds->coming > 0 && gather) {
			/* Woken by the last arrival's round, or a leave. */
			if (gather == 1) {
				gather = 2;
				monoclock_after(&until,
				    DIRSYNC_GATHER_MS);
			}
			ds->gathering++;
			dir->gathering++;
			if (pthread_cond_clockwait(&ds->round, &ds->lock,
			    CLOCK_MONOTONIC, &until) == ETIMEDOUT) {
				gather = 0;
				if (ds->coming > 0)
					dirsync_give_up(ds);
			}
			ds->gathering--;
			dir->gathering--;
			continue;
		}
		dir->syncing = 1;
		target = dir->changed;
		ds->rounds++;
		pthread_mutex_unlock(&ds->lock);
		rc = dirsync_sync(ds, fd);
		error = errno;
		pthread_mutex_lock(&ds->lock);
		if (rc == -1)
			dirsync_round_failed(dir, error);
		dir->synced = target;
		dir->syncing = 0;
		wake = 1;
	}
	error = dirsync_failed_since(dir, seen);
	pthread_mutex_unlock(&ds->lock);
	/*
	 * Its round's waiters woken after the unlock, not under it, where
	 * each would wake only to wait for the lock.  A waiter looks under
	 * the lock before it sleeps, so none misses the round's end.
	 */
	if (wake)
		pthread_cond_broadcast(&ds->round);
	if (error == 0)
		return 0;
	errno = error;
	return -1;
}
