/* SPDX-License-Identifier: ISC */
/*
 * pg_group.h: group commit at the broker for the PostgreSQL store
 * (pg_group.c): a creation's claim, grant and commit as a member of its
 * worker's round.  Only broker/pg/ includes it.
 */
#ifndef PG_GROUP_H
#define PG_GROUP_H

#include <pthread.h>

#include "dirsync.h"
#include "pg.h"

struct pg_group_member {
	struct pgstore_batch_member	 m;
	struct pgstore_claim		 claim;		/* a claim's turn */
	struct pg_group_member		*next;		/* the queue's */
	int				 state;		/* pg_group.c's */
	int				 outcome;	/* pg_group.c's */
	unsigned			 coming;	/* pg_group_coming */
	/*
	 * Its thread's own condition variable, and whether the thread waits
	 * on it (under the group's lock): a round wakes only the members it
	 * concerns, not every thread of the worker, and after letting its
	 * lock go (pg_group.c).
	 */
	pthread_cond_t			*wake;
	int				 waiting;
	/*
	 * The directory fsyncs its link will share (NULL: none), and its
	 * mark there (dirsync_coming): a round of grants marks each member
	 * it granted, on its way to the link, before it wakes them.
	 */
	struct dirsync			*dirsync;
	unsigned			 linking;
	char				*cause;
};

/*
 * A member made ready for its creation thread's use (pg_create.c's
 * cl_run), with the thread's own condition variable, wake: made once
 * a thread and destroyed only once every thread of the pool is joined
 * (pg_pool.c, pool.c's pool_stop), as a round run by another thread
 * may signal it after its member went on.
 */
void	pg_group_member_init(struct pg_group_member *, pthread_cond_t *wake);

/*
 * me is on its way to the grants' and commits' queue with no WAL flush
 * in between: claiming (pg_group_claim marks it, and unmarks it unless
 * it claimed), its temporary to write; or granted, its link and the
 * directory's fsync to make.  A round of grants and commits about to go
 * waits for it (pg_group.c: "the members on their way").  _gone: it is
 * not, or no longer (its own join says so by itself); safe to call at
 * any time, errno kept.
 */
void	pg_group_coming(struct pg_group_member *);
void	pg_group_gone(struct pg_group_member *);

/*
 * The claim (pgstore_claim's answers: 1 claimed, row filled; 0 the key
 * has a row, in row; -1 with *cause, errno ERANGE for numbers used up),
 * its first turn sent in the worker's round, on whichever session leads
 * it, its row owned by st's session all the same.
 */
int	pg_group_claim(struct pg_group_member *, struct pgstore *st,
	    const struct pgstore_key *, const struct subtab_entry *want,
	    struct pgstore_row *, char **cause);
/*
 * The grant in two halves around the member's fsync of its temporary:
 * _join once its temporary exists (it may send a round on st, its own
 * connection), then, always, _wait: 1 granted, 0 fenced (nothing
 * changed), -1 with *cause (storage: not granted, or not known to be).
 * Nothing else may use st between the two.
 */
void	pg_group_grant_join(struct pg_group_member *, struct pgstore *st,
	    const struct pgstore_key *, int64_t epoch, const char *token);
int	pg_group_grant_wait(struct pg_group_member *, struct pgstore *st,
	    char **cause);
/* The commit, as a member of a round: 1, 0 fenced, -1 with *cause. */
int	pg_group_commit(struct pg_group_member *, struct pgstore *st,
	    const struct pgstore_key *, int64_t epoch, const char *token,
	    const uint8_t *file_digest, const char *receipt, char **cause);
/* The worker's rounds and their members, logged once at its end. */
void	pg_group_report(void);

#endif
