/* SPDX-License-Identifier: ISC */
/*
 * pg_group.c: group commit at the broker for the PostgreSQL store
 * (doc/cluster.md, "Group commit at the broker"): the grants of a
 * worker's creations that wait at the same time go to the server as one
 * statement (pg_batch.c), and so do their commits, so that one round
 * trip and one synchronous commit serve them all.
 *
 * DESIGN
 *
 * A batch is per worker process and per step (grant, commit), formed as
 * the claims' directory scans are shared (pg_create.c, cl_scan_shared):
 * a creation thread that reaches the step puts its member on the step's
 * queue under a mutex; if no batch of that step is in flight it becomes
 * the leader, takes every member queued (itself included) and sends one
 * statement on its own connection; if one is in flight it waits on the
 * condition variable, and when that batch's result is in, the first
 * queued member to wake leads the next one with every member queued by
 * then.  A batch is never held open waiting for members: a thread alone
 * sends at once.  The leader is a creation thread, not a thread of its
 * own: no hand-off on the common path; the followers' connections stay
 * idle meanwhile.
 *
 * A batch of one member is sent as the lone statement
 * (pgstore_grant_send and _wait, pgstore_commit), which costs the server
 * less than the array's, and answers as it always did.
 *
 * The grant is sent before the member's fsync of its temporary and
 * awaited after it (pg_group_grant_join, then _wait), as a lone grant
 * is: the leader fsyncs after sending, a follower while it waits.  The
 * commit is sent and awaited at once (pg_group_commit).
 *
 * Each member gets the answer its own statement would have got
 * (doc/cluster.md, "What a failed batch answers to each member"): its
 * row in RETURNING of a batch whose commit returned (1), or not (0:
 * fenced); a batch rolled back by a transient error (40xxx, 57014) is
 * sent once more, then, as after any other error, every member runs its
 * own lone statement on its own connection; a batch whose connection
 * was lost (the outcome unknown) fails every member (-1, retryable),
 * never grants or commits one, and the leader's connection is dropped
 * and made again by its next call.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"
#include "pg_create.h"
#include "pg_group.h"

/* A member's state. */
enum {
	GROUP_IDLE,
	GROUP_QUEUED,		/* on the queue, not sent */
	GROUP_SENT,		/* in a batch in flight */
	GROUP_DONE		/* outcome (and cause) filled */
};

/* A member's outcome. */
enum {
	GROUP_FAILED = -1,	/* cause */
	GROUP_FENCED = 0,
	GROUP_CHANGED = 1,	/* granted, committed */
	GROUP_ALONE = 2		/* the batch rolled back: its own statement */
};

struct pg_group {
	pthread_mutex_t		 lock;
	pthread_cond_t		 done;
	enum pgstore_batch	 step;
	const char		*name;
	struct pg_group_member	*head;		/* queued, in arrival order */
	struct pg_group_member	*tail;
	size_t			 queued;
	int			 in_flight;
	uint64_t		 sent;		/* batches sent */
};

static struct pg_group pg_grants = { PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_COND_INITIALIZER, PGSTORE_BATCH_GRANT, "grant", NULL, NULL, 0,
    0, 0 };
static struct pg_group pg_commits = { PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_COND_INITIALIZER, PGSTORE_BATCH_COMMIT, "commit", NULL, NULL,
    0, 0, 0 };

#ifdef IDEM_FAULT_INJECTION
/*
 * IDEM_CRASH_BATCH_OF=<n> (or commit:<n>): a worker's first grant (or
 * commit) batch is sent only once n members are queued (or after
 * CRASH_BATCH_MAX_SECONDS), so that a test knows which creations share
 * it.
 */
#define CRASH_BATCH_MAX_SECONDS	30
#define CRASH_BATCH_COMMIT	"commit:"

static size_t
group_batch_of(const struct pg_group *g)
{
	const char	*v = getenv("IDEM_CRASH_BATCH_OF");
	size_t		 n = strlen(CRASH_BATCH_COMMIT);

	if (v == NULL)
		return 0;
	if (strncmp(v, CRASH_BATCH_COMMIT, n) == 0)
		return g->step == PGSTORE_BATCH_COMMIT ? strtoul(v + n, NULL,
		    10) : 0;
	return g->step == PGSTORE_BATCH_GRANT ? strtoul(v, NULL, 10) : 0;
}

/* Under the lock: the step's first batch waits for its members. */
static void
group_hold_first(struct pg_group *g)
{
	struct timespec	 deadline;
	size_t		 want = group_batch_of(g);

	if (g->sent != 0 || want == 0)
		return;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += CRASH_BATCH_MAX_SECONDS;
	while (g->queued < want && pthread_cond_timedwait(&g->done, &g->lock,
	    &deadline) == 0)
		;
	fprintf(stderr, "idemd[%ld]: the first %s batch: %zu members\n",
	    (long)getpid(), g->name, g->queued);
}
#else
#define group_batch_of(g)	0
#define group_hold_first(g)	((void)0)
#endif

/* Under the lock: me at the queue's end. */
static void
group_enqueue(struct pg_group *g, struct pg_group_member *me)
{
	me->state = GROUP_QUEUED;
	me->next = NULL;
	me->batch_size = 0;
	if (g->tail != NULL)
		g->tail->next = me;
	else
		g->head = me;
	g->tail = me;
	g->queued++;
	if (group_batch_of(g) > 0)
		pthread_cond_broadcast(&g->done);
}

/*
 * Under the lock: every member of the leader's batch has its outcome
 * (a copy of cause for each failed one); the next batch may go.
 */
static void
group_settle(struct pg_group *g, struct pg_group_member *leader,
    int failed, const char *cause)
{
	struct pg_group_member	*x;
	size_t			 i;

	for (i = 0; i < leader->batch_size; i++) {
		x = leader->batch[i];
		if (failed == 0)
			x->outcome = x->m.returned ? GROUP_CHANGED :
			    GROUP_FENCED;
		else
			x->outcome = failed;
		if (failed == GROUP_FAILED)
			x->cause = strdup(cause != NULL ? cause :
			    "PostgreSQL: a batch failed");
		x->state = GROUP_DONE;
	}
	leader->batch_size = 0;
	g->in_flight = 0;
	pthread_cond_broadcast(&g->done);
}

/* The batch's members as the store takes them. */
static void
group_members(struct pg_group_member *leader,
    struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS])
{
	size_t	i;

	for (i = 0; i < leader->batch_size; i++)
		m[i] = &leader->batch[i]->m;
}

/*
 * Under the lock, me queued and no batch in flight: me leads, with
 * every member queued, and sends on st (the lock let go meanwhile).  A
 * send that failed committed nothing: every member goes alone.
 */
static void
group_send(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st)
{
	struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS];
	struct pg_group_member	*x;
	char			*cause = NULL;
	int			 rc;

	g->in_flight = 1;		/* before the hold: one leader */
	group_hold_first(g);
	me->batch_size = 0;
	while ((x = g->head) != NULL &&
	    me->batch_size < PGSTORE_MAX_CONNECTIONS) {
		g->head = x->next;
		x->state = GROUP_SENT;
		me->batch[me->batch_size++] = x;
		g->queued--;
	}
	if (g->head == NULL)
		g->tail = NULL;
	g->sent++;
	pthread_mutex_unlock(&g->lock);
	if (me->batch_size == 1) {
		/*
		 * Alone: the lone statement, cheaper for the server than the
		 * array's (its plan's sort, lock and materialized rows); the
		 * commit's is sent and awaited by group_read.
		 */
		rc = 0;
		if (g->step == PGSTORE_BATCH_GRANT) {
			rc = pgstore_grant_send(st, me->m.key, me->m.epoch,
			    me->m.token, &cause);
			if (rc == 0)
				pg_pause_point("after_grant_batch_sent");
		}
		pthread_mutex_lock(&g->lock);
		if (rc != 0)
			group_settle(g, me, GROUP_FAILED, cause);
		free(cause);
		return;
	}
	group_members(me, m);
	rc = pgstore_batch_send(st, g->step, m, me->batch_size, &cause);
	if (rc != 0)
		log_warnx("a %s batch of %zu: %s: each goes alone", g->name,
		    me->batch_size, cause != NULL ? cause : "out of memory");
	else
		pg_pause_point(g->step == PGSTORE_BATCH_GRANT ?
		    "after_grant_batch_sent" : "after_commit_batch_sent");
	free(cause);
	pthread_mutex_lock(&g->lock);
	if (rc != 0)
		group_settle(g, me, GROUP_ALONE, NULL);
}

/* group_read of a batch of one: the lone statement's answer. */
static void
group_read_lone(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st)
{
	char	*cause = NULL;
	int	 rc;

	pthread_mutex_unlock(&g->lock);
	if (g->step == PGSTORE_BATCH_GRANT)
		rc = pgstore_grant_wait(st, me->m.key, me->m.epoch,
		    me->m.token, &cause);
	else
		rc = pgstore_commit(st, me->m.key, me->m.epoch, me->m.token,
		    me->m.file_digest, me->m.receipt, &cause);
	me->m.returned = rc == 1;
	pthread_mutex_lock(&g->lock);
	group_settle(g, me, rc < 0 ? GROUP_FAILED : 0, cause);
	free(cause);
}

/*
 * Under the lock, me the leader of a batch in flight: its result (the
 * lock let go meanwhile), once more after a transient error, and every
 * member's outcome.
 */
static void
group_read(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st)
{
	struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS];
	enum pgstore_batch_failure failure = PGSTORE_BATCH_FAILED;
	char			*cause = NULL;
	int			 rc, outcome = 0;

	pthread_mutex_unlock(&g->lock);
	group_members(me, m);
	rc = pgstore_batch_wait(st, g->step, m, me->batch_size, &failure,
	    &cause);
	if (rc != 0 && failure == PGSTORE_BATCH_TRANSIENT) {
		log_info("a %s batch of %zu: %s: sent again", g->name,
		    me->batch_size, cause);
		free(cause);
		cause = NULL;
		rc = pgstore_batch_send(st, g->step, m, me->batch_size, &cause);
		if (rc == 0)
			rc = pgstore_batch_wait(st, g->step, m, me->batch_size,
			    &failure, &cause);
		else
			failure = PGSTORE_BATCH_FAILED;	/* nothing sent */
		if (rc != 0 && failure == PGSTORE_BATCH_TRANSIENT)
			failure = PGSTORE_BATCH_FAILED;
	}
	if (rc != 0) {
		outcome = failure == PGSTORE_BATCH_LOST ? GROUP_FAILED :
		    GROUP_ALONE;
		log_warnx("a %s batch of %zu: %s: %s", g->name,
		    me->batch_size, cause != NULL ? cause : "out of memory",
		    outcome == GROUP_FAILED ? "its outcome is unknown, every "
		    "member fails" : "each goes alone");
	}
	pthread_mutex_lock(&g->lock);
	group_settle(g, me, outcome, cause);
	free(cause);
}

/* Under the lock: me's outcome, leading a batch when its turn comes. */
static int
group_wait(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st, char **cause)
{
	for (;;) {
		if (me->state == GROUP_DONE)
			break;
		if (me->batch_size == 1)
			group_read_lone(g, me, st);
		else if (me->batch_size > 0)
			group_read(g, me, st);
		else if (me->state == GROUP_QUEUED && !g->in_flight)
			group_send(g, me, st);
		else
			pthread_cond_wait(&g->done, &g->lock);
	}
	me->state = GROUP_IDLE;
	pthread_mutex_unlock(&g->lock);
	*cause = me->cause;
	me->cause = NULL;
	if (me->outcome == GROUP_FAILED && *cause == NULL)
		*cause = strdup("out of memory");
	return me->outcome;
}

void
pg_group_grant_join(struct pg_group_member *me, struct pgstore *st,
    const struct pgstore_key *key, int64_t epoch, const char *token)
{
	struct pg_group	*g = &pg_grants;

	memset(&me->m, 0, sizeof me->m);
	me->m.key = key;
	me->m.epoch = epoch;
	me->m.token = token;
	me->cause = NULL;
	pthread_mutex_lock(&g->lock);
	group_enqueue(g, me);
	if (!g->in_flight)
		group_send(g, me, st);
	pthread_mutex_unlock(&g->lock);
}

int
pg_group_grant_wait(struct pg_group_member *me, struct pgstore *st,
    char **cause)
{
	struct pg_group	*g = &pg_grants;
	int		 rc;

	*cause = NULL;
	pthread_mutex_lock(&g->lock);
	rc = group_wait(g, me, st, cause);
	if (rc == GROUP_ALONE)
		rc = pgstore_grant(st, me->m.key, me->m.epoch, me->m.token,
		    cause);
	return rc;
}

int
pg_group_commit(struct pg_group_member *me, struct pgstore *st,
    const struct pgstore_key *key, int64_t epoch, const char *token,
    const uint8_t *file_digest, const char *receipt, char **cause)
{
	struct pg_group	*g = &pg_commits;
	int		 rc;

	*cause = NULL;
	memset(&me->m, 0, sizeof me->m);
	me->m.key = key;
	me->m.epoch = epoch;
	me->m.token = token;
	me->m.file_digest = file_digest;
	me->m.receipt = receipt;
	me->cause = NULL;
	pthread_mutex_lock(&g->lock);
	group_enqueue(g, me);
	rc = group_wait(g, me, st, cause);
	if (rc == GROUP_ALONE)
		rc = pgstore_commit(st, key, epoch, token, file_digest, receipt,
		    cause);
	return rc;
}
