/* SPDX-License-Identifier: ISC */
/*
 * dirsync.h: a directory's fsync shared by the threads that each need
 * one begun after their change (dirsync.c); the table of directories
 * with rounds and their count of failed rounds, which fileio.c's
 * rounds use too.
 */
#ifndef DIRSYNC_H
#define DIRSYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define DIRSYNC_DIRS	4	/* directories with rounds; more sync alone */
/*
 * The longest a round waits for callers on their way: far above a
 * link's time (tens of microseconds), so that only a stalled one is
 * given up on.
 */
#define DIRSYNC_GATHER_MS	1000

/*
 * One directory's rounds: dirsync.c's, and fileio.c's (whose changes
 * are links).  A table of them starts zeroed: every slot unused.  fd1
 * is set once, under the owner's lock, and read without it
 * (dirsync_seen); failures is written under the lock, read without it.
 */
struct dirsync_dir {
	_Atomic int		 fd1;		/* the fd + 1; 0: unused */
	uint64_t		 changed;	/* changes counted so far */
	uint64_t		 synced;	/* covered by a finished round */
	_Atomic uint64_t	 failures;	/* failed rounds so far */
	int			 error;		/* the last failure's errno */
	int			 syncing;
	size_t			 gathering;	/* its callers waiting for those
						   on their way (dirsync.c) */
};

struct dirsync {
	pthread_mutex_t		 lock;
	pthread_cond_t		 round;		/* a round ended */
	struct dirsync_dir	 dirs[DIRSYNC_DIRS];
	struct dirsync_dir	 alone;		/* every directory past dirs */
	int			(*sync)(int);	/* NULL: fsync; the tests' own */
	uint64_t		 rounds;	/* fsyncs made, for the logs */
	uint64_t		 calls;		/* dirsync_after calls */
	/*
	 * The callers on their way that a round waits for: those marked in
	 * generation gen (a mark is its generation; 0 none).  A wait that
	 * ran out moves gen on (tired counts those).
	 */
	size_t			 coming;
	unsigned		 gen;
	size_t			 gathering;	/* callers waiting for them */
	uint64_t		 tired;		/* waits that ran out */
};

/* Every directory unused, fsync's rounds: a static's initializer. */
#define DIRSYNC_INITIALIZER \
	{ PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { { 0 } }, \
	  { 0 }, NULL, 0, 0, 0, 1, 0, 0 }

/* The same for ds, with sync (the tests') instead of fsync. */
void	dirsync_init(struct dirsync *ds, int (*sync)(int));

/*
 * Before the caller changes directory fd (a link, an unlink): what it
 * gives dirsync_after.  One load (and a look at the table's fds).
 */
uint64_t dirsync_before(struct dirsync *, int fd);
/*
 * The caller changed directory fd after dirsync_before answered seen,
 * and needs it durable: returns once an fsync of fd begun after the call
 * began has finished.  0, or -1 and errno: a round of fd failed since
 * seen was read (dirsync_failed_since), the one covering the change or
 * one that may have taken its writeback error.
 */
int	dirsync_after(struct dirsync *, int fd, uint64_t seen);
/*
 * A caller on its way to dirsync_after, its change not made yet but
 * about to be with no fsync of its own between (a link once its grant
 * returned; the grant may have waited for its round's leader's
 * temporary's fsync): a round about to begin waits for it, up to
 * DIRSYNC_GATHER_MS once (a wait that ran out gives up on every caller
 * then marked), so that one fsync covers both.  *coming is the
 * caller's own mark: set here, cleared by its arrival
 * (dirsync_after_coming) or by dirsync_gone (it went another way);
 * both are no-ops on a clear mark.
 */
void	dirsync_coming(struct dirsync *, unsigned *coming);
void	dirsync_gone(struct dirsync *, unsigned *coming);
/* dirsync_after of a caller that may be on its way (*coming). */
int	dirsync_after_coming(struct dirsync *, int fd, uint64_t seen,
	    unsigned *coming);
/*
 * Under the lock of the table's owner: fd's slot among the n of dirs,
 * the first unused one taken for it if it has none; NULL: every slot
 * is another directory's (the caller syncs alone).
 */
struct dirsync_dir *dirsync_slot(struct dirsync_dir *dirs, unsigned n,
	    int fd);
/*
 * Without the lock, before a change of fd: the failed rounds of fd's
 * slot so far (0 if it has none yet: none has failed); those of alone
 * if every slot is another directory's.
 */
uint64_t dirsync_seen(struct dirsync_dir *dirs, unsigned n,
	    struct dirsync_dir *alone, int fd);
/*
 * Under lock, for a directory without a slot: its own fsync (sync, or
 * fsync if NULL), after any other such fsync under alone has ended and
 * its failure is counted there; cond is broadcast when it ends.  The
 * errno of its failure or of one counted in alone since seen, or 0.
 */
int	dirsync_alone(struct dirsync_dir *alone, pthread_mutex_t *lock,
	    pthread_cond_t *cond, int (*sync)(int), int fd, uint64_t seen);
/* Under the lock: a round of dir failed with error. */
void	dirsync_round_failed(struct dirsync_dir *, int error);
/*
 * Under the lock, once the round covering a change has ended: the errno
 * of a round of dir that failed since seen was read before the change,
 * or 0 (none did: the change is durable).
 */
int	dirsync_failed_since(const struct dirsync_dir *, uint64_t seen);

#endif
