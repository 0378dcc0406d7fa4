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
 * now, with no wait for the disk before its call), so that the links of
 * one round of grants share one fsync instead of the second waiting
 * for a round of its own; an event (each one's arrival, or its going
 * another way), bounded by DIRSYNC_GATHER_MS for one stalled on its way
 * (held by a test's hold point, a page fault on a loaded host).  The
 * callers on their way are counted for the whole dirsync, not per
 * directory: a creation's link and a report's, in two directories at
 * once, wait for each other at most that long.
 *
 * A failed fsync fails every caller its round covered, and no later
 * round is taken as repairing it for them (the kernel may have dropped
 * the dirty state with the error): the failed range is widened, never
 * moved, as in fileio.c.  A caller told of a failure answers an error a
 * retry repairs; none is told its change is durable when a round that
 * covered it failed.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dirsync.h"

/*
 * The longest a round waits for callers on their way: far above a
 * link's time (tens of microseconds), so that only a stalled one is
 * given up on.
 */
#define DIRSYNC_GATHER_MS	1000

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

/* Under ds->lock: fd's rounds, or NULL (every slot another's). */
static struct dirsync_dir *
dirsync_dir(struct dirsync *ds, int fd)
{
	unsigned	i;

	for (i = 0; i < DIRSYNC_DIRS; i++) {
		if (ds->dirs[i].fd1 == fd + 1)
			return &ds->dirs[i];
		if (ds->dirs[i].fd1 == 0) {
			ds->dirs[i].fd1 = fd + 1;
			return &ds->dirs[i];
		}
	}
	return NULL;
}

void
dirsync_coming(struct dirsync *ds, int *coming)
{
	pthread_mutex_lock(&ds->lock);
	if (!*coming) {
		*coming = 1;
		ds->coming++;
	}
	pthread_mutex_unlock(&ds->lock);
}

/* Under ds->lock: the caller's mark cleared, a waiter woken if last. */
static void
dirsync_unmark(struct dirsync *ds, int *coming)
{
	if (coming == NULL || !*coming)
		return;
	*coming = 0;
	if (--ds->coming == 0 && ds->gathering > 0)
		pthread_cond_broadcast(&ds->round);
}

void
dirsync_gone(struct dirsync *ds, int *coming)
{
	int	error = errno;

	if (!*coming)
		return;		/* set before its caller could look */
	pthread_mutex_lock(&ds->lock);
	dirsync_unmark(ds, coming);
	pthread_mutex_unlock(&ds->lock);
	errno = error;
}

int
dirsync_after(struct dirsync *ds, int fd)
{
	return dirsync_after_coming(ds, fd, NULL);
}

int
dirsync_after_coming(struct dirsync *ds, int fd, int *coming)
{
	struct dirsync_dir	*dir;
	struct timespec		 until;
	uint64_t		 mine, target;
	int			 rc, error, gather = 1;

	pthread_mutex_lock(&ds->lock);
	dirsync_unmark(ds, coming);
	ds->calls++;
	if ((dir = dirsync_dir(ds, fd)) == NULL) {
		ds->rounds++;
		pthread_mutex_unlock(&ds->lock);
		return dirsync_sync(ds, fd);
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
				clock_gettime(CLOCK_REALTIME, &until);
				until.tv_sec += DIRSYNC_GATHER_MS / 1000;
				until.tv_nsec += (DIRSYNC_GATHER_MS % 1000) *
				    1000000L;
				if (until.tv_nsec >= 1000000000L) {
					until.tv_sec++;
					until.tv_nsec -= 1000000000L;
				}
			}
			ds->gathering++;
			if (pthread_cond_timedwait(&ds->round, &ds->lock,
			    &until) == ETIMEDOUT)
				gather = 0;
			ds->gathering--;
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
			dirsync_failed_note(&dir->failed, dir->synced, target,
			    error);
		dir->synced = target;
		dir->syncing = 0;
		pthread_cond_broadcast(&ds->round);
	}
	error = dirsync_failed_covers(&dir->failed, mine);
	pthread_mutex_unlock(&ds->lock);
	if (error == 0)
		return 0;
	errno = error;
	return -1;
}

void
dirsync_failed_note(struct dirsync_failed *f, uint64_t synced,
    uint64_t target, int error)
{
	/*
	 * Widened, never moved: a waiter of an earlier failed round may
	 * not have looked yet, and a range moved past it would tell it its
	 * change is durable.  Changes a later good round covered between
	 * two failures may be told of a failure: an error a retry repairs,
	 * never a false success.
	 */
	if (f->to == 0)
		f->from = synced + 1;
	f->to = target;
	f->error = error;
}

int
dirsync_failed_covers(const struct dirsync_failed *f, uint64_t n)
{
	return f->to != 0 && n >= f->from && n <= f->to ? f->error : 0;
}
