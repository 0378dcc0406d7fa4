/* SPDX-License-Identifier: ISC */
/*
 * dirsync.h: a directory's fsync shared by the threads that each need
 * one begun after their change (dirsync.c).
 */
#ifndef DIRSYNC_H
#define DIRSYNC_H

#include <pthread.h>
#include <stdint.h>

#define DIRSYNC_DIRS	4	/* directories with rounds; more sync alone */

/*
 * The changes (numbered from 1, in the order counted) that failed fsyncs
 * of one directory covered: [from, to], widened, never moved (none: to
 * 0).  Shared with fileio.c's directory rounds, so that the rule is
 * written once.
 */
struct dirsync_failed {
	uint64_t	 from;
	uint64_t	 to;
	int		 error;		/* the last failure's errno */
};

/* One directory's rounds. */
struct dirsync_dir {
	int			 fd1;		/* the fd + 1; 0: unused */
	uint64_t		 changed;	/* changes announced so far */
	uint64_t		 synced;	/* covered by a finished round */
	struct dirsync_failed	 failed;
	int			 syncing;
};

struct dirsync {
	pthread_mutex_t		 lock;
	pthread_cond_t		 round;		/* a round ended */
	struct dirsync_dir	 dirs[DIRSYNC_DIRS];
	int			(*sync)(int);	/* NULL: fsync; the tests' own */
	uint64_t		 rounds;	/* fsyncs made, for the logs */
	uint64_t		 calls;		/* dirsync_after calls */
	size_t			 coming;	/* callers on their way */
	size_t			 gathering;	/* callers waiting for them */
};

/* Every directory unused, fsync's rounds: a static's initializer. */
#define DIRSYNC_INITIALIZER \
	{ PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { { 0 } }, \
	  NULL, 0, 0, 0, 0 }

/* The same for ds, with sync (the tests') instead of fsync. */
void	dirsync_init(struct dirsync *ds, int (*sync)(int));

/*
 * The caller changed directory fd (a link, an unlink) and needs it
 * durable: returns once an fsync of fd begun after the call began has
 * finished.  0, or -1 and errno (the fsync's failure, also for every
 * other caller that round covered).
 */
int	dirsync_after(struct dirsync *, int fd);
/*
 * A caller on its way to dirsync_after, its change not made yet but
 * about to be with no wait for the disk between (a link once its grant
 * returned): a round about to begin waits for it, up to
 * DIRSYNC_GATHER_MS, so that one fsync covers both.  *coming is the
 * caller's own mark: set here, cleared by its arrival
 * (dirsync_after_coming) or by dirsync_gone (it went another way);
 * both are no-ops on a clear mark.
 */
void	dirsync_coming(struct dirsync *, int *coming);
void	dirsync_gone(struct dirsync *, int *coming);
/* dirsync_after of a caller that may be on its way (*coming). */
int	dirsync_after_coming(struct dirsync *, int fd, int *coming);
/*
 * A round's fsync, begun with changes up to target counted and changes
 * up to synced covered before, failed with error: note it.
 */
void	dirsync_failed_note(struct dirsync_failed *, uint64_t synced,
	    uint64_t target, int error);
/* The errno of a failed round that covered change n; 0: none did. */
int	dirsync_failed_covers(const struct dirsync_failed *, uint64_t n);

#endif
