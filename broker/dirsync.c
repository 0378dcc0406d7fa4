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
 * share the next.
 *
 * A failed fsync fails every caller its round covered, and no later
 * round is taken as repairing it for them (the kernel may have dropped
 * the dirty state with the error): the failed range is widened, never
 * moved, as in fileio.c.  It also fails every change counted while the
 * fsync ran, before it returned: such a link's dirty state may have
 * been written back, and have failed, under that fsync, and Linux
 * reports a writeback error once per open file description, so the
 * next round's fsync would succeed without it being durable.  A caller
 * told of a failure answers an error a retry repairs; none is told its
 * change is durable when a round that may have covered it failed.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "dirsync.h"

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

struct dirsync_dir *
dirsync_slot(struct dirsync_dir *dirs, unsigned n, int fd)
{
	unsigned	i;

	for (i = 0; i < n; i++) {
		if (dirs[i].fd1 == fd + 1)
			return &dirs[i];
		if (dirs[i].fd1 == 0) {
			dirs[i].fd1 = fd + 1;
			return &dirs[i];
		}
	}
	return NULL;
}

int
dirsync_after(struct dirsync *ds, int fd)
{
	struct dirsync_dir	*dir;
	uint64_t		 mine, target;
	int			 rc, error;

	pthread_mutex_lock(&ds->lock);
	ds->calls++;
	if ((dir = dirsync_slot(ds->dirs, DIRSYNC_DIRS, fd)) == NULL) {
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
		dir->syncing = 1;
		target = dir->changed;
		ds->rounds++;
		pthread_mutex_unlock(&ds->lock);
		rc = dirsync_sync(ds, fd);
		error = errno;
		pthread_mutex_lock(&ds->lock);
		/* Not target: every change counted before it returned. */
		if (rc == -1)
			dirsync_failed_note(&dir->failed, dir->synced,
			    dir->changed, error);
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
    uint64_t counted, int error)
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
	f->to = counted;
	f->error = error;
}

int
dirsync_failed_covers(const struct dirsync_failed *f, uint64_t n)
{
	return f->to != 0 && n >= f->from && n <= f->to ? f->error : 0;
}
