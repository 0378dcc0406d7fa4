/* SPDX-License-Identifier: ISC */
/*
 * pg_group.c: group commit at the broker for the PostgreSQL store
 * (doc/cluster.md, "Group commit at the broker"): the claims a worker's
 * creation threads have waiting go to the server in one round
 * (pg_batch.c: one libpq pipeline, one round trip), and so do its
 * grants and commits, together: one statement, one transaction and so
 * one WAL flush for all of them.
 *
 * DESIGN
 *
 * A worker has two queues, each with its rounds: the claims' and the
 * grants' and commits'.  (One round for all three was measured first:
 * fewer round trips, but a claim waited behind a round's WAL flush it
 * does not need, and the rate fell to 0.62-0.68x; doc/cluster.md.)  A
 * creation thread that reaches a step puts its member on its queue
 * under the queue's mutex; if no round of that queue is in flight it
 * becomes the leader, takes every member queued (itself included) and
 * sends the round on its own connection; if one is in flight it waits
 * on its own condition variable.  A round is not held open for members
 * that may come: a thread alone sends at once; but a round of grants
 * and commits waits for those of its worker already on their way
 * (below).  The round's results are read,
 * once the leader's send is done, by the first of its members free to
 * (the leader, or a member woken while the leader fsyncs its
 * temporary: a grant is sent before the member's fsync and awaited
 * after it), on the leader's connection, which no one else uses until
 * the round is settled; then the first queued member to wake leads the
 * next round with every member queued by then.
 *
 * Each thread is woken alone, when there is something for it to do: a
 * round's members when their outcome is set (group_settle), then the
 * first queued member waiting, to lead the next round; once a round is
 * sent by a leader that does not read it, one of its members waiting,
 * to read it; a member waiting for those on their way when the last of
 * them leaves by another way.  A member not yet waiting (a grant's, its
 * temporary being fsync'd) finds the same state when it comes to wait.
 * Before, one condition variable a queue (the claims', the grants' and
 * commits') woke every thread waiting on it for each of these (a
 * round's members, the queue's, the readers'), most of them only to
 * sleep again on the same lock.  The wake-ups are signalled once the
 * group's lock is let go (group_unlock), on each creation thread's own
 * condition variable, which outlives its creations: signalled under
 * the lock, a thread woke only to find it held and sleep on it again.
 *
 * A claim member's statement runs on the leader's session, but the
 * row records the member's own session as its owner (pg_claim.c: the
 * pid and start passed by value), which the member keeps open: the
 * leader's session is nobody's identity.
 *
 * Each member gets the answer its own statement would have got
 * (doc/cluster.md, "What a failed batch answers to each member"): a
 * grant or commit member its row in RETURNING of a batch whose commit
 * returned (1), or not (0: fenced); a batch rolled back by a transient
 * error (40xxx, 57014) is sent once more, then, as after any other
 * error, every member runs its own lone statement on its own
 * connection; a round whose connection was lost (the outcome unknown)
 * fails every grant and commit member (-1, retryable), never grants or
 * commits one, and the leader's connection is dropped and made again
 * by its next call.  A claim member judges its own two results
 * (pgstore_claim_end); one whose results did not come (the outcome
 * unknown) fails, and drops its own connection, so that a row its claim
 * may have made has an owner whose session is gone: a retry takes it
 * over at once.  A round of which nothing was sent (the leader's
 * connection found broken before its pipeline) fails no one: every
 * member, claims too, goes alone on its own connection.
 *
 * A round of grants and commits waits for the members on their way
 * (pg_group_coming): creations of the worker that will join its queue
 * with no WAL flush before (claiming, in a round of claims or not,
 * then writing their temporary; granted and linking, their directory
 * fsync'd), so that
 * a round carries them too instead of leaving them to queue behind it
 * for a round trip and a WAL flush of their own.  It waits for an
 * event (each one's arrival, or its leaving by another way), never a
 * timer; it is sent when none is left on its way, by the last to
 * arrive, or after GROUP_ALONE_MS at most (one on its way stalled: a
 * hung directory fsync).  A wait that ran out gives up on every member
 * then on its way (a generation, group_gathers): no later round waits
 * for them, so one stalled costs its worker one GROUP_ALONE_MS, not one
 * every round, while members marked after are waited for as before.
 * A member alone in its worker sends at once, as before.
 *
 * A member queued behind a round in flight for GROUP_ALONE_MS leaves
 * the queue and goes alone on its own connection: nothing of it was
 * sent, so that is what it would have done without rounds.  A round
 * stalled on the server (a lock, a slow flush) or on its leader's
 * connection then holds back its own members only, not every claim,
 * grant and commit of its worker.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "monoclock.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"
#include "pg_create.h"
#include "pg_group.h"

/*
 * How long a queued member waits behind a round in flight before it
 * goes alone, and the longest a round waits for the members on their
 * way: far above a round's time (milliseconds), so that only a stalled
 * round (or member) sends the others on their own.
 */
#define GROUP_ALONE_MS		1000
/* The threads a group may have to wake at once: at most one a thread. */
#define GROUP_WAKE_MAX		PGSTORE_MAX_CONNECTIONS

/* A member's state. */
enum {
	GROUP_IDLE,
	GROUP_QUEUED,		/* on the queue, not sent */
	GROUP_SENT,		/* in the round in flight */
	GROUP_DONE		/* outcome (and cause) filled */
};

/* A member's outcome. */
enum {
	GROUP_FAILED = -1,	/* cause */
	GROUP_FENCED = 0,
	GROUP_CHANGED = 1,	/* granted, committed; a claim's results in */
	GROUP_ALONE = 2		/* rolled back, or not sent: its own statement */
};

struct pg_group {
	pthread_mutex_t		 lock;
	struct pg_group_member	*head;		/* queued, in arrival order */
	struct pg_group_member	*tail;
	size_t			 queued;
	int			 in_flight;	/* a round sending, not settled */
	int			 sent;		/* its send done: it may be read */
	int			 reading;	/* its results being read */
	struct pgstore		*round_st;	/* the leader's store */
	struct pg_group_member	*round[PGSTORE_MAX_CONNECTIONS];
	size_t			 round_size;
	uint64_t		 grants_sent;	/* rounds with a grant */
	uint64_t		 commits_sent;	/* rounds with a commit */
	/* For the worker's last log line (pg_group_report). */
	uint64_t		 rounds;
	uint64_t		 members[3];	/* by op */
	uint64_t		 flushes;	/* rounds with a grant or commit */
	uint64_t		 alone;		/* gone alone, tired of waiting */
	/*
	 * The members on their way (the grants' and commits' only) that a
	 * round waits for: those marked in generation gen.  A wait that
	 * ran out gives up on them all (group_gathers): gen moves on, and
	 * no round waits for them again, while members marked after still
	 * count.  A mark is the generation it was made in.
	 */
	size_t			 coming;
	unsigned		 gen;
	size_t			 gathering;	/* queued members waiting */
	int			 gather_began;	/* gather_until is set */
	struct timespec		 gather_until;
	uint64_t		 gathered;	/* rounds that waited */
	uint64_t		 gather_tired;	/* ... past GROUP_ALONE_MS */
	/*
	 * The threads to wake once the lock is let go (group_unlock): a
	 * thread woken under it would find it held and sleep again on it.
	 * Each a creation thread's own condition variable, which outlives
	 * the creations it carries, so it may be signalled after the lock
	 * is let go, whatever its member did meanwhile.
	 */
	pthread_cond_t		*to_wake[GROUP_WAKE_MAX];
	size_t			 to_wake_count;
#ifdef IDEM_FAULT_INJECTION
	/*
	 * The tests' hold of the first round (IDEM_CRASH_BATCH_OF,
	 * group_may_take): until when (0: not begun), and whether its log
	 * lines, each once, were written.
	 */
	time_t			 hold_until;
	int			 said_holding;	/* "holding n commits" said */
	int			 said_gathering; /* "the first round waiting" */
	int			 said_behind;	/* "the first member waiting" */
#endif
};

/* The claims' rounds, and the grants' and commits'. */
static struct pg_group pg_claims = { .lock = PTHREAD_MUTEX_INITIALIZER,
    .gen = 1 };
static struct pg_group pg_steps = { .lock = PTHREAD_MUTEX_INITIALIZER,
    .gen = 1 };

/*
 * Under the lock: the threads group_wake chose run again now, before
 * the caller sleeps (a rare path: a give-up, a held round) or when the
 * list is full.
 */
static void
group_wake_now(struct pg_group *g)
{
	size_t	i;

	for (i = 0; i < g->to_wake_count; i++)
		pthread_cond_signal(g->to_wake[i]);
	g->to_wake_count = 0;
}

/*
 * The lock let go, then the threads group_wake chose woken: woken
 * under it, each would wake only to find it held, and sleep on it
 * again (a context switch and a wake-up more, each).  Their condition
 * variables are their threads' (pg_group_member_init), so a signal
 * that comes after a member's thread went on (its deadline passed, it
 * found its outcome) at worst wakes it once from a later wait, which
 * every wait of this file looks again after.
 */
static void
group_unlock(struct pg_group *g)
{
	pthread_cond_t	*wake[GROUP_WAKE_MAX];
	size_t		 i, n = g->to_wake_count;

	memcpy(wake, g->to_wake, n * sizeof *wake);
	g->to_wake_count = 0;
	pthread_mutex_unlock(&g->lock);
	for (i = 0; i < n; i++)
		pthread_cond_signal(wake[i]);
}

/*
 * Under the lock: me waits on its thread's condition variable until
 * woken, or until deadline (CLOCK_MONOTONIC) if not NULL; ETIMEDOUT if
 * that passed.  Those it was to wake first run now: no unlock of its
 * own would come before its sleep.
 */
static int
group_sleep(struct pg_group *g, struct pg_group_member *me,
    const struct timespec *deadline)
{
	int	rc;

	group_wake_now(g);
	me->waiting = 1;
	if (deadline != NULL)
		rc = pthread_cond_clockwait(me->wake, &g->lock,
		    CLOCK_MONOTONIC, deadline);
	else
		rc = pthread_cond_wait(me->wake, &g->lock);
	me->waiting = 0;
	return rc;
}

/* Under the lock: x runs again once the lock is let go, if it waits. */
static void
group_wake(struct pg_group *g, struct pg_group_member *x)
{
	size_t	i;

	if (!x->waiting)
		return;
	for (i = 0; i < g->to_wake_count; i++)
		if (g->to_wake[i] == x->wake)
			return;
	if (g->to_wake_count == GROUP_WAKE_MAX)
		group_wake_now(g);
	g->to_wake[g->to_wake_count++] = x->wake;
}

/*
 * Under the lock: the first queued member that waits runs again, to
 * lead the next round (or wait for the members on their way); the
 * others stay asleep, since it takes them all.  None waiting: the first
 * to come to wait finds the queue without a round and leads.
 */
static void
group_wake_next(struct pg_group *g)
{
	struct pg_group_member	*x;

	for (x = g->head; x != NULL; x = x->next)
		if (x->waiting) {
			group_wake(g, x);
			return;
		}
}

/*
 * Under the lock, the round in flight sent and its leader not reading
 * it: one of its members that waits runs again and reads it.  None
 * waiting: the first to come to wait reads it.
 */
static void
group_wake_reader(struct pg_group *g, struct pg_group_member *me)
{
	size_t	i;

	for (i = 0; i < g->round_size; i++)
		if (g->round[i] != me && g->round[i]->waiting) {
			group_wake(g, g->round[i]);
			return;
		}
}

/* Under the lock: every member queued or in the round runs again. */
static void
group_wake_all(struct pg_group *g)
{
	struct pg_group_member	*x;
	size_t			 i;

	for (x = g->head; x != NULL; x = x->next)
		group_wake(g, x);
	for (i = 0; i < g->round_size; i++)
		group_wake(g, g->round[i]);
}

/* The grants and commits of a round, as its log lines name them. */
static const char *
group_batch_name(struct pgstore_batch_member *const *u, size_t nu)
{
	size_t	i, grants = 0;

	for (i = 0; i < nu; i++)
		grants += u[i]->op == PGSTORE_OP_GRANT;
	return grants == nu ? "grant" : grants == 0 ? "commit" :
	    "grant and commit";
}

/* A member's op, as its log lines name it. */
static const char *
group_op_name(enum pgstore_round_op op)
{
	return op == PGSTORE_OP_CLAIM ? "claim" : op == PGSTORE_OP_GRANT ?
	    "grant" : "commit";
}

#ifdef IDEM_FAULT_INJECTION

/*
 * IDEM_CRASH_BATCH_OF=<n> (or commit:<n>): a worker's first round with
 * a grant (or a commit) carries its grants (commits) only once n of
 * them are queued (or after CRASH_BATCH_MAX_SECONDS), so that a test
 * knows which creations share it; the other step goes on meanwhile.
 * round:<n>: commits are held until n/2 of them are queued (logged),
 * then no round of grants and commits goes until n of them are queued:
 * a mixed round of grants and commits (test_cluster_batch).  Claims
 * are never held.
 */
#define CRASH_BATCH_MAX_SECONDS	30
#define CRASH_BATCH_COMMIT	"commit:"
#define CRASH_BATCH_ROUND	"round:"

/* Under the lock: may the round take members of op yet? */
static int
group_may_take(struct pg_group *g, enum pgstore_round_op op)
{
	const char		*v = getenv("IDEM_CRASH_BATCH_OF");
	struct pg_group_member	*x;
	enum pgstore_round_op	 held = PGSTORE_OP_GRANT;
	size_t			 want, have, ops[3] = { 0, 0, 0 };
	int			 round = 0;

	if (v == NULL || op == PGSTORE_OP_CLAIM)
		return 1;
	if (strncmp(v, CRASH_BATCH_COMMIT, strlen(CRASH_BATCH_COMMIT)) == 0) {
		held = PGSTORE_OP_COMMIT;
		v += strlen(CRASH_BATCH_COMMIT);
	} else if (strncmp(v, CRASH_BATCH_ROUND,
	    strlen(CRASH_BATCH_ROUND)) == 0) {
		held = PGSTORE_OP_COMMIT;
		round = 1;
		v += strlen(CRASH_BATCH_ROUND);
	}
	want = strtoul(v, NULL, 10);
	for (x = g->head; x != NULL; x = x->next)
		ops[x->m.op]++;
	if (want == 0 || (held == PGSTORE_OP_GRANT ? g->grants_sent :
	    g->commits_sent) != 0)
		return 1;
	if (round) {
		/* Grants go, commits gather, until n/2 commits wait. */
		if (g->hold_until == 0)
			g->hold_until = time(NULL) + CRASH_BATCH_MAX_SECONDS;
		if (ops[PGSTORE_OP_COMMIT] < want / 2)
			return op == PGSTORE_OP_GRANT ||
			    time(NULL) >= g->hold_until;
		if (!g->said_holding) {
			g->said_holding = 1;
			fprintf(stderr, "idemd[%ld]: the first mixed round: "
			    "holding %zu commits\n", (long)getpid(),
			    ops[PGSTORE_OP_COMMIT]);
		}
		have = g->queued;
	} else {
		if (op != held)
			return 1;
		have = ops[held];
	}
	if (g->hold_until == 0)
		g->hold_until = time(NULL) + CRASH_BATCH_MAX_SECONDS;
	if (have < want && time(NULL) < g->hold_until)
		return 0;
	if (round && op != PGSTORE_OP_COMMIT)
		return 1;		/* said once, for the commit */
	if (round)
		fprintf(stderr, "idemd[%ld]: the first mixed round: %zu grants, "
		    "%zu commits\n", (long)getpid(), ops[PGSTORE_OP_GRANT],
		    ops[PGSTORE_OP_COMMIT]);
	else
		fprintf(stderr, "idemd[%ld]: the first %s batch: %zu members\n",
		    (long)getpid(), group_op_name(op), have);
	return 1;
}

/* Under the lock: wait a little for members held back. */
static void
group_hold_wait(struct pg_group *g, struct pg_group_member *me)
{
	struct timespec	 deadline;

	monoclock_after(&deadline, 1000);
	(void)group_sleep(g, me, &deadline);
}

/*
 * IDEM_CRASH_BEHIND_MS=<ms>: how long a member queued behind a round in
 * flight waits before it goes alone, instead of GROUP_ALONE_MS, so that
 * a test telling the round's wake-up from that bound does not race one
 * second on a loaded machine (test_cluster_batch).
 */
static int64_t
group_behind_ms(void)
{
	const char	*v = getenv("IDEM_CRASH_BEHIND_MS");
	long		 ms;

	if (v == NULL || (ms = strtol(v, NULL, 10)) <= 0)
		return GROUP_ALONE_MS;
	return ms;
}
#else
#define group_may_take(g, op)	1
#define group_hold_wait(g, me)	(void)group_sleep((g), (me), NULL)
#define group_behind_ms()	GROUP_ALONE_MS
#endif

/* A member's wait behind a round in flight (group_wait_behind). */
struct group_behind {
	int		 waiting;
	uint64_t	 round;		/* g->rounds when it began */
	struct timespec	 deadline;
};

/*
 * Under the lock, a member queued and no round in flight: whether the
 * next round waits for members on their way (g->coming), until
 * GROUP_ALONE_MS after the first member found one (a bound for one
 * stalled on its way, not what the round waits for).
 */
static int
group_gathers(struct pg_group *g)
{
	struct timespec	now;

	if (g->coming == 0)
		return 0;
	if (!g->gather_began) {
		g->gather_began = 1;
		monoclock_after(&g->gather_until, GROUP_ALONE_MS);
		g->gathered++;
#ifdef IDEM_FAULT_INJECTION
		/* An event for tests/cluster/test_cluster_batch. */
		if (!g->said_gathering) {
			g->said_gathering = 1;
			fprintf(stderr, "idemd[%ld]: the first round waiting "
			    "for members on their way: %zu\n", (long)getpid(),
			    g->coming);
		}
#endif
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec > g->gather_until.tv_sec || (now.tv_sec ==
	    g->gather_until.tv_sec && now.tv_nsec >= g->gather_until.tv_nsec)) {
		/*
		 * Given up on every one on its way now: no later round waits
		 * for them (one stalled would cost each a GROUP_ALONE_MS),
		 * only for those marked from here on.
		 */
		g->gather_began = 0;
		g->gather_tired++;
		g->coming = 0;
		if (++g->gen == 0)
			g->gen = 1;
		if (g->gathering > 0)
			group_wake_all(g);	/* rare: no need to choose */
		return 0;
	}
	return 1;
}

/* Under the lock: me on its way (a no-op if it is already). */
static void
group_mark(struct pg_group *g, struct pg_group_member *me)
{
	if (!me->coming) {
		me->coming = g->gen;
		g->coming++;
	}
}

/*
 * Under the lock: me no longer on its way; 1 if it was the last one a
 * round waits for (a mark of a generation given up on counts no more).
 */
static int
group_unmark(struct pg_group *g, struct pg_group_member *me)
{
	unsigned	gen = me->coming;

	if (!gen)
		return 0;
	me->coming = 0;
	if (gen != g->gen)
		return 0;
	return --g->coming == 0;
}

/* Under the lock: me at the queue's end (and no longer on its way). */
static void
group_enqueue(struct pg_group *g, struct pg_group_member *me)
{
	if (g == &pg_steps && me->coming) {
		/*
		 * Arrived.  If it was the last on its way, it sends the round
		 * itself (no round in flight) or queues behind the one in
		 * flight: nobody needs waking.
		 */
		(void)group_unmark(g, me);
	}
	me->state = GROUP_QUEUED;
	me->next = NULL;
	me->cause = NULL;
	if (g->tail != NULL)
		g->tail->next = me;
	else
		g->head = me;
	g->tail = me;
	g->queued++;
#ifdef IDEM_FAULT_INJECTION
	/*
	 * A leader held back for members sees it; without a hold, nobody
	 * waits for a member's arrival, and the waiters are not woken (a
	 * context switch each: the bench runs this build).
	 */
	if (getenv("IDEM_CRASH_BATCH_OF") != NULL)
		group_wake_all(g);
#endif
}

/* Under the lock: me, queued and not sent, off the queue. */
static void
group_dequeue(struct pg_group *g, struct pg_group_member *me)
{
	struct pg_group_member	**p, *prev = NULL;

	for (p = &g->head; *p != NULL; prev = *p, p = &(*p)->next) {
		if (*p != me)
			continue;
		*p = me->next;
		if (g->tail == me)
			g->tail = prev;
		me->next = NULL;
		g->queued--;
		return;
	}
}

/*
 * Under the lock, me queued behind a round in flight: wait for it to be
 * settled, until the deadline, GROUP_ALONE_MS (IDEM_CRASH_BEHIND_MS in
 * tests) after me began to wait behind this round (a later round starts
 * the count again: w->round).
 * 1: the deadline passed with me still queued, and me is off the queue,
 * to go alone on st.  Never while the round in flight is on st itself
 * (a leader held back by fault injection waits behind its own round):
 * that connection is in a pipeline another member may be reading.
 */
static int
group_wait_behind(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st, struct group_behind *w)
{
	if (g->round_st == st) {
		(void)group_sleep(g, me, NULL);
		return 0;
	}
	if (!w->waiting || w->round != g->rounds) {
		w->waiting = 1;
		w->round = g->rounds;
		monoclock_after(&w->deadline, group_behind_ms());
#ifdef IDEM_FAULT_INJECTION
		/* An event for tests/cluster/test_cluster_batch. */
		if (!g->said_behind) {
			g->said_behind = 1;
			fprintf(stderr, "idemd[%ld]: the first member waiting "
			    "behind a round in flight: a %s\n", (long)getpid(),
			    group_op_name(me->m.op));
		}
#endif
	}
	if (group_sleep(g, me, &w->deadline) != ETIMEDOUT ||
	    me->state != GROUP_QUEUED ||
	    !g->in_flight || w->round != g->rounds)
		return 0;
	group_dequeue(g, me);
	g->alone++;
	return 1;
}

/*
 * Under the lock: every member of the round has its outcome (set by the
 * reader, a copy of cause for each failed one without its own) and is
 * woken; the next round may go, and the first queued member waiting is
 * woken to lead it.
 */
static void
group_settle(struct pg_group *g, const char *cause)
{
	struct pg_group_member	*x;
	size_t			 i;

	for (i = 0; i < g->round_size; i++) {
		x = g->round[i];
		if (x->outcome == GROUP_FAILED && x->cause == NULL)
			x->cause = strdup(cause != NULL ? cause :
			    "PostgreSQL: a round failed");
		if (x->m.op == PGSTORE_OP_GRANT &&
		    x->outcome == GROUP_CHANGED) {
			/*
			 * Granted: on its way to its link and its commit from
			 * now, not from when its thread runs again (the
			 * member that read the round would otherwise find it
			 * on its way to neither and go without it).
			 */
			group_mark(g, x);
			if (x->dirsync != NULL)
				dirsync_coming(x->dirsync, &x->linking);
		}
		x->state = GROUP_DONE;
		group_wake(g, x);
	}
	g->round_size = 0;
	g->round_st = NULL;
	g->in_flight = 0;
	g->sent = 0;
	g->reading = 0;
	group_wake_next(g);
}

/* The round's members as the store takes them. */
static void
group_members(struct pg_group *g,
    struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS])
{
	size_t	i;

	for (i = 0; i < g->round_size; i++)
		m[i] = &g->round[i]->m;
}

/*
 * Under the lock, me queued and no round in flight: me leads, with every
 * member queued (that fault injection does not hold back), and sends on
 * st (the lock let go meanwhile).  A send that failed committed none of
 * its grants and commits: they go alone; its claims' outcome is not
 * known: they fail.  0: nothing to send yet (held back).  reads: me
 * reads the round next if it is in it (group_wait), so the members
 * waiting are not woken to find it read (a wake-up and a context switch
 * each, for nothing); a grant's leader (pg_group_grant_join) goes to
 * fsync its temporary instead, and wakes one member of the round that
 * waits (group_wake_reader), which reads it.
 */
static int
group_send(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st, int reads)
{
	struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS];
	struct pg_group_member	*x, *rest = NULL, *rest_tail = NULL;
	char			*cause = NULL;
	size_t			 i, n, grants = 0, commits = 0;
	int			 take[3], rc;

	/* Before the queue changes: whether each op may go yet. */
	for (i = 0; i < 3; i++)
		take[i] = group_may_take(g, (enum pgstore_round_op)i);
	g->round_size = 0;
	while ((x = g->head) != NULL) {
		g->head = x->next;
		x->next = NULL;
		if (g->round_size == PGSTORE_MAX_CONNECTIONS ||
		    !take[x->m.op]) {
			/* Stays queued, in its order. */
			if (rest_tail != NULL)
				rest_tail->next = x;
			else
				rest = x;
			rest_tail = x;
			continue;
		}
		x->state = GROUP_SENT;
		x->outcome = GROUP_FAILED;
		g->round[g->round_size++] = x;
		g->queued--;
		grants += x->m.op == PGSTORE_OP_GRANT;
		commits += x->m.op == PGSTORE_OP_COMMIT;
		g->members[x->m.op]++;
	}
	g->head = rest;
	g->tail = rest_tail;
	if (g->round_size == 0)
		return 0;
	g->gather_began = 0;
	g->in_flight = 1;
	g->round_st = st;
	g->grants_sent += grants != 0;
	g->commits_sent += commits != 0;
	g->rounds++;
	g->flushes += grants + commits != 0;
	group_members(g, m);
	n = g->round_size;
	group_unlock(g);
	rc = pgstore_round_send(st, m, n, &cause);
	if (rc != 0)
		log_warnx("a round of %zu: %s: its grants and commits go alone, "
		    "its claims %s", n, cause != NULL ? cause : "out of memory",
		    rc == -2 ? "too (nothing was sent)" : "fail");
	else {
		if (grants > 0)
			pg_pause_point("after_grant_batch_sent");
		if (commits > 0)
			pg_pause_point("after_commit_batch_sent");
	}
	pthread_mutex_lock(&g->lock);
	if (rc != 0) {
		for (i = 0; i < g->round_size; i++)
			g->round[i]->outcome = g->round[i]->m.op ==
			    PGSTORE_OP_CLAIM && rc != -2 ? GROUP_FAILED :
			    GROUP_ALONE;
		group_settle(g, cause);
	} else {
		/* Only now may a member read it: the send is done. */
		g->sent = 1;
		if (!reads || me->state != GROUP_SENT)
			group_wake_reader(g, me);
	}
	free(cause);
	return 1;
}

/*
 * Under the lock, a round in flight that nobody reads: me (one of its
 * members) reads it on its leader's connection (the lock let go
 * meanwhile), once more after a transient error, and settles every
 * member's outcome.
 */
static void
group_read(struct pg_group *g)
{
	struct pgstore_batch_member *m[PGSTORE_MAX_CONNECTIONS];
	struct pgstore_batch_member *u[PGSTORE_MAX_CONNECTIONS];
	enum pgstore_batch_failure failure = PGSTORE_BATCH_FAILED;
	struct pg_group_member	*r[PGSTORE_MAX_CONNECTIONS], *x;
	struct pgstore		*st = g->round_st;
	char			*cause = NULL;
	size_t			 i, n = g->round_size, nu = 0;
	int			 rc, steps;

	g->reading = 1;
	group_members(g, m);
	memcpy(r, g->round, n * sizeof *r);
	group_unlock(g);
	for (i = 0; i < n; i++)
		if (m[i]->op != PGSTORE_OP_CLAIM)
			u[nu++] = m[i];
	rc = pgstore_round_wait(st, m, n, &failure, &cause);
	if (rc != 0 && failure == PGSTORE_BATCH_TRANSIENT && nu > 1) {
		log_info("a %s batch of %zu: %s: sent again",
		    group_batch_name(u, nu), nu, cause);
		free(cause);
		cause = NULL;
		rc = pgstore_batch_send(st, u, nu, &cause);
		if (rc == 0)
			rc = pgstore_batch_wait(st, u, nu, &failure, &cause);
		else
			failure = PGSTORE_BATCH_FAILED;	/* nothing sent */
	}
	if (rc != 0 && failure == PGSTORE_BATCH_TRANSIENT)
		failure = PGSTORE_BATCH_FAILED;
	steps = rc == 0 ? 0 : failure == PGSTORE_BATCH_LOST ? GROUP_FAILED :
	    GROUP_ALONE;
	if (rc != 0 && nu == 0)
		log_warnx("a round of %zu claims: %s: their outcome is unknown, "
		    "every member fails", n, cause != NULL ? cause :
		    "out of memory");
	else if (rc != 0)
		log_warnx("a %s batch of %zu%s%.0zu%s: %s: %s",
		    group_batch_name(u, nu), nu, n > nu ? " (and " : "",
		    n - nu, n > nu ? " claims)" : "", cause != NULL ? cause :
		    "out of memory", steps == GROUP_FAILED ? "its outcome is "
		    "unknown, every member fails" : "each goes alone");
	for (i = 0; i < n; i++) {
		x = r[i];
		if (x->m.op == PGSTORE_OP_CLAIM)
			x->outcome = x->claim.res != NULL ? GROUP_CHANGED :
			    GROUP_FAILED;
		else if (rc == 0)
			x->outcome = x->m.returned ? GROUP_CHANGED :
			    GROUP_FENCED;
		else
			x->outcome = steps;
	}
	pthread_mutex_lock(&g->lock);
	group_settle(g, cause);
	free(cause);
}

/*
 * Under the lock: me's outcome, leading or reading a round in turn, or
 * GROUP_ALONE if it waited behind a round in flight too long.
 */
static int
group_wait(struct pg_group *g, struct pg_group_member *me,
    struct pgstore *st, char **cause)
{
	struct group_behind	 behind = { 0, 0, { 0, 0 } };
	struct timespec		 until;
	int			 alone = 0;

	for (;;) {
		if (me->state == GROUP_DONE)
			break;
		if (me->state == GROUP_SENT && g->sent && !g->reading)
			group_read(g);
		else if (me->state == GROUP_QUEUED && !g->in_flight) {
			if (group_gathers(g)) {
				/*
				 * Woken when the round that takes it (the last
				 * arrival's) is settled, or by the last leave.
				 * A copy of the bound: the wait reads it
				 * outside the lock, where another thread may
				 * begin the next gathering's.
				 */
				until = g->gather_until;
				g->gathering++;
				(void)group_sleep(g, me, &until);
				g->gathering--;
			} else if (group_send(g, me, st, 1) == 0)
				group_hold_wait(g, me);
		} else if (me->state == GROUP_QUEUED) {
			if ((alone = group_wait_behind(g, me, st, &behind)))
				break;
		} else
			(void)group_sleep(g, me, NULL);
	}
	me->state = GROUP_IDLE;
	group_unlock(g);
	if (alone) {
		log_info("a %s waited %lld ms behind a round in flight: it "
		    "goes alone on its own connection", group_op_name(me->m.op),
		    (long long)group_behind_ms());
		return GROUP_ALONE;
	}
	*cause = me->cause;
	me->cause = NULL;
	if (me->outcome == GROUP_FAILED && *cause == NULL)
		*cause = strdup("out of memory");
	return me->outcome;
}

/* me as a member of op, not queued. */
static void
group_member_set(struct pg_group_member *me, enum pgstore_round_op op,
    const struct pgstore_key *key, int64_t epoch, const char *token)
{
	memset(&me->m, 0, sizeof me->m);
	me->m.op = op;
	me->m.key = key;
	me->m.epoch = epoch;
	me->m.token = token;
	me->cause = NULL;
}

/* The claim's end after its round: pg_group_claim's answers. */
static int
group_claim_end(struct pg_group_member *me, struct pgstore *st, int rc,
    char **cause)
{
	if (rc == GROUP_FAILED) {
		/*
		 * Its outcome unknown: a row it may have made is owned by
		 * this session, which ends, so a retry may take it over at
		 * once (doc/cluster.md, "Whose session owns a claimed row").
		 */
		pgstore_claim_clear(&me->claim);
		pgstore_drop(st);
		errno = EIO;	/* not an ERANGE left from before */
		return -1;
	}
	free(*cause);
	*cause = NULL;
	/* Nothing of the round was sent: the claim on its own session. */
	if (rc == GROUP_ALONE)
		return pgstore_claim_next(st, &me->claim, cause);
	rc = pgstore_claim_end(st, &me->claim, cause);
	if (rc == 2)
		rc = pgstore_claim_next(st, &me->claim, cause);
	return rc;
}

int
pg_group_claim(struct pg_group_member *me, struct pgstore *st,
    const struct pgstore_key *key, const struct subtab_entry *want,
    struct pgstore_row *row, char **cause)
{
	struct pg_group	*g = &pg_claims;
	int		 rc;

	*cause = NULL;
	if (pgstore_claim_begin(st, &me->claim, key, want, row, cause) != 0)
		return -1;
	group_member_set(me, PGSTORE_OP_CLAIM, key, 0, NULL);
	me->m.claim = &me->claim;
	/*
	 * A claim needs no WAL flush: claiming, it is on its way to the
	 * grants' queue, unless its claim ends otherwise.  Its temporary's
	 * write and fsync are on the way (the disk, but no WAL flush).
	 */
	pg_group_coming(me);
	pthread_mutex_lock(&g->lock);
	group_enqueue(g, me);
	rc = group_wait(g, me, st, cause);
	rc = group_claim_end(me, st, rc, cause);
	if (rc != 1)
		pg_group_gone(me);	/* no grant of its own follows */
	return rc;
}

void
pg_group_grant_join(struct pg_group_member *me, struct pgstore *st,
    const struct pgstore_key *key, int64_t epoch, const char *token)
{
	struct pg_group	*g = &pg_steps;

	group_member_set(me, PGSTORE_OP_GRANT, key, epoch, token);
	pthread_mutex_lock(&g->lock);
	group_enqueue(g, me);
	/* Gathering: the last on its way sends it, or me after its fsync. */
	if (!g->in_flight && !group_gathers(g))
		(void)group_send(g, me, st, 0);
	group_unlock(g);
}

int
pg_group_grant_wait(struct pg_group_member *me, struct pgstore *st,
    char **cause)
{
	struct pg_group	*g = &pg_steps;
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
	struct pg_group	*g = &pg_steps;
	int		 rc;

	*cause = NULL;
	group_member_set(me, PGSTORE_OP_COMMIT, key, epoch, token);
	me->m.file_digest = file_digest;
	me->m.receipt = receipt;
	pthread_mutex_lock(&g->lock);
	group_enqueue(g, me);
	rc = group_wait(g, me, st, cause);
	if (rc == GROUP_ALONE)
		rc = pgstore_commit(st, key, epoch, token, file_digest, receipt,
		    cause);
	return rc;
}

void
pg_group_member_init(struct pg_group_member *me, pthread_cond_t *wake)
{
	me->wake = wake;
	me->waiting = 0;
}

void
pg_group_coming(struct pg_group_member *me)
{
	struct pg_group	*g = &pg_steps;

	pthread_mutex_lock(&g->lock);
	group_mark(g, me);
	group_unlock(g);
}

void
pg_group_gone(struct pg_group_member *me)
{
	struct pg_group	*g = &pg_steps;
	int		 error = errno;

	/*
	 * Its own thread sets and clears me->coming, or the reader of a
	 * round it is in, under the lock, before it is told the outcome.
	 */
	if (!me->coming)
		return;
	pthread_mutex_lock(&g->lock);
	/* The last one on its way left: a member waiting for it sends. */
	if (group_unmark(g, me) && g->gathering > 0)
		group_wake_next(g);
	group_unlock(g);
	errno = error;		/* a failed claim's ERANGE, say */
}

/* One group's counts, logged. */
static void
group_report(struct pg_group *g, const char *what)
{
	pthread_mutex_lock(&g->lock);
	if (g->rounds > 0)
		log_info("store rounds of %s: %llu, with %llu claims, %llu "
		    "grants, %llu commits; %llu with grants or commits (a WAL "
		    "flush each); %llu members went alone", what,
		    (unsigned long long)g->rounds,
		    (unsigned long long)g->members[PGSTORE_OP_CLAIM],
		    (unsigned long long)g->members[PGSTORE_OP_GRANT],
		    (unsigned long long)g->members[PGSTORE_OP_COMMIT],
		    (unsigned long long)g->flushes,
		    (unsigned long long)g->alone);
	if (g->gathered > 0)
		log_info("store rounds of %s that waited for members on their "
		    "way: %llu (%llu of them until %d ms had passed)", what,
		    (unsigned long long)g->gathered,
		    (unsigned long long)g->gather_tired, GROUP_ALONE_MS);
	group_unlock(g);
}

void
pg_group_report(void)
{
	group_report(&pg_claims, "claims");
	group_report(&pg_steps, "grants and commits");
}
