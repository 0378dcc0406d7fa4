/* SPDX-License-Identifier: ISC */
/*
 * test_dirsync.c: the shared directory fsync (dirsync.c) with a stand-in
 * fsync that the test holds: a lone caller syncs at once; callers that
 * come while a round runs are not released by it and share the next
 * one (two fsyncs for four links, where an fsync each made four); a
 * failed round fails every caller it covered and every change made
 * before its fsync returned, counted before or after it returned, and
 * none made after; each
 * directory has its own rounds (an fsync of the reports directory never
 * covers a link in the inbox), and directories past the table's slots
 * sync alone, failed by another's failed fsync as a slot's are; a round about to begin waits for a caller on its way
 * (dirsync_coming) and covers it too, and goes without it once it goes
 * another way (dirsync_gone); the last of those to arrive wakes no one
 * before its round, which covers the callers waiting for it, and those
 * are woken once, at its end (pthread_cond_broadcast is wrapped and
 * counted: -Wl,--wrap in Makefile.am).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <time.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "dirsync.h"

#define FD		7
#define LATE		3	/* callers that come during the first round */

#define CALLS_KEPT	64
#define RETURN_MS	5000	/* a caller that must not wait: its bound */

/* The stand-in fsync: its first call on hold_fd held until released. */
static struct {
	pthread_mutex_t	 lock;
	pthread_cond_t	 cond;
	int		 calls;		/* begun */
	int		 fds[CALLS_KEPT];	/* each call's fd */
	int		 finished;	/* returned */
	int		 hold_fd;	/* 0: hold none */
	int		 entered;	/* the held call began */
	int		 released;
	int		 fail_call;	/* this call (from 1) fails with EIO */
} fake = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER
};

static struct dirsync	ds;

/* The broadcasts of ds.round so far (the test's own are not counted). */
static _Atomic int	round_broadcasts;

int	__real_pthread_cond_broadcast(pthread_cond_t *);
int	__wrap_pthread_cond_broadcast(pthread_cond_t *);

int
__wrap_pthread_cond_broadcast(pthread_cond_t *cond)
{
	if (cond == &ds.round)
		atomic_fetch_add(&round_broadcasts, 1);
	return __real_pthread_cond_broadcast(cond);
}

static int
fake_sync(int fd)
{
	int	call, rc = 0;

	pthread_mutex_lock(&fake.lock);
	call = ++fake.calls;
	if (call <= CALLS_KEPT)
		fake.fds[call - 1] = fd;
	if (fd == fake.hold_fd && !fake.entered) {
		fake.entered = 1;
		pthread_cond_broadcast(&fake.cond);
		while (!fake.released)
			pthread_cond_wait(&fake.cond, &fake.lock);
	}
	fake.finished++;
	pthread_mutex_unlock(&fake.lock);
	if (call == fake.fail_call) {
		errno = EIO;
		rc = -1;
	}
	return rc;
}

static int
setup(void **state)
{
	(void)state;
	pthread_mutex_lock(&fake.lock);
	fake.calls = fake.finished = fake.entered = fake.released = 0;
	memset(fake.fds, 0, sizeof fake.fds);
	fake.hold_fd = FD;
	fake.fail_call = 0;
	pthread_mutex_unlock(&fake.lock);
	dirsync_init(&ds, fake_sync);
	atomic_store(&round_broadcasts, 0);
	return 0;
}

/* A change of fd made at once: the count read, then dirsync_after. */
static int
after(int fd)
{
	return dirsync_after(&ds, fd, dirsync_before(&ds, fd));
}

struct caller {
	pthread_t	 thread;
	int		 fd;		/* 0: FD */
	unsigned	*coming;	/* its mark, if on its way */
	int		 rc;
	int		 error;
	int		 finished_before;	/* fsyncs returned before its own */
	int		 done;
};

static void *
caller_run(void *arg)
{
	struct caller	*c = arg;

	if (c->coming != NULL)
		c->rc = dirsync_after_coming(&ds, FD, dirsync_before(&ds, FD),
		    c->coming);
	else
		c->rc = after(c->fd != 0 ? c->fd : FD);
	c->error = errno;
	pthread_mutex_lock(&fake.lock);
	c->finished_before = fake.finished;
	c->done = 1;
	pthread_cond_broadcast(&fake.cond);
	pthread_mutex_unlock(&fake.lock);
	return NULL;
}

/* Start a caller on fd; 1 if it returned within RETURN_MS, else 0. */
static int
returns_alone(struct caller *c, int fd)
{
	struct timespec	deadline;
	int		done;

	memset(c, 0, sizeof *c);
	c->fd = fd;
	assert_int_equal(pthread_create(&c->thread, NULL, caller_run, c), 0);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += RETURN_MS / 1000;
	pthread_mutex_lock(&fake.lock);
	while (!c->done && pthread_cond_timedwait(&fake.cond, &fake.lock,
	    &deadline) == 0)
		;
	done = c->done;
	pthread_mutex_unlock(&fake.lock);
	return done;
}

/* Hold fd's first round: a caller on it, in its fsync until released. */
static void
hold_round(struct caller *c, int fd)
{
	memset(c, 0, sizeof *c);
	c->fd = fd;
	fake.hold_fd = fd;
	assert_int_equal(pthread_create(&c->thread, NULL, caller_run, c), 0);
	pthread_mutex_lock(&fake.lock);
	while (!fake.entered)
		pthread_cond_wait(&fake.cond, &fake.lock);
	pthread_mutex_unlock(&fake.lock);
}

static void
release_round(void)
{
	pthread_mutex_lock(&fake.lock);
	fake.released = 1;
	pthread_cond_broadcast(&fake.cond);
	pthread_mutex_unlock(&fake.lock);
}

/* How many changes the directory has counted. */
static uint64_t
changed(void)
{
	uint64_t	n;

	pthread_mutex_lock(&ds.lock);
	n = ds.dirs[0].changed;
	pthread_mutex_unlock(&ds.lock);
	return n;
}

/*
 * One caller's round held in its fsync; LATE more callers come (their
 * changes counted: they are waiting) before it is released.
 */
static void
first_held_then_late(struct caller *first, struct caller late[LATE])
{
	int	i;

	memset(first, 0, sizeof *first);
	memset(late, 0, LATE * sizeof late[0]);
	assert_int_equal(pthread_create(&first->thread, NULL, caller_run,
	    first), 0);
	pthread_mutex_lock(&fake.lock);
	while (!fake.entered)
		pthread_cond_wait(&fake.cond, &fake.lock);
	pthread_mutex_unlock(&fake.lock);
	for (i = 0; i < LATE; i++)
		assert_int_equal(pthread_create(&late[i].thread, NULL,
		    caller_run, &late[i]), 0);
	/* Each counts its change under the lock, then waits for a round. */
	while (changed() < 1 + LATE)
		sched_yield();
	pthread_mutex_lock(&fake.lock);
	fake.released = 1;
	pthread_cond_broadcast(&fake.cond);
	pthread_mutex_unlock(&fake.lock);
	assert_int_equal(pthread_join(first->thread, NULL), 0);
	for (i = 0; i < LATE; i++)
		assert_int_equal(pthread_join(late[i].thread, NULL), 0);
}

static void
a_lone_caller_syncs_at_once(void **state)
{
	(void)state;
	fake.hold_fd = 0;
	assert_int_equal(after(FD), 0);
	assert_int_equal(fake.calls, 1);
	assert_int_equal(after(FD), 0);
	assert_int_equal(fake.calls, 2);
	assert_int_equal(ds.rounds, 2);
	assert_int_equal(ds.calls, 2);
}

static void
late_callers_share_the_next_round(void **state)
{
	struct caller	first, late[LATE];
	int		i;

	(void)state;
	first_held_then_late(&first, late);
	assert_int_equal(first.rc, 0);
	/* Two fsyncs for four changes: the late ones' shared. */
	assert_int_equal(fake.calls, 2);
	assert_int_equal(ds.rounds, 2);
	assert_int_equal(ds.calls, 1 + LATE);
	for (i = 0; i < LATE; i++) {
		assert_int_equal(late[i].rc, 0);
		/*
		 * Not released by the round that began before their
		 * change: only once the second fsync returned.
		 */
		assert_int_equal(late[i].finished_before, 2);
	}
}

static void
a_failed_round_fails_those_it_covered(void **state)
{
	struct caller	first, late[LATE];
	int		i;

	(void)state;
	fake.fail_call = 2;	/* the late callers' shared round */
	first_held_then_late(&first, late);
	assert_int_equal(first.rc, 0);
	for (i = 0; i < LATE; i++) {
		assert_int_equal(late[i].rc, -1);
		assert_int_equal(late[i].error, EIO);
	}
	/* A change after the failed round: a round of its own, good. */
	assert_int_equal(after(FD), 0);
	assert_int_equal(fake.calls, 3);
}

/*
 * The first round fails while LATE more changes were counted (after it
 * began, before it returned): they fail too, though the next round's
 * fsync succeeds.  Linux reports a writeback error once per open file
 * description: the failed fsync may have consumed one of their links'
 * errors, and the next would tell them durable.  A change counted after
 * the failure is its own round's, and good.  Fails if a failed round
 * fails only the changes counted before it began.
 */
static void
a_failed_round_fails_changes_counted_while_it_ran(void **state)
{
	struct caller	first, late[LATE];
	int		i;

	(void)state;
	fake.fail_call = 1;
	first_held_then_late(&first, late);
	assert_int_equal(first.rc, -1);
	assert_int_equal(first.error, EIO);
	for (i = 0; i < LATE; i++) {
		assert_int_equal(late[i].rc, -1);
		assert_int_equal(late[i].error, EIO);
	}
	assert_int_equal(fake.calls, 2);
	assert_int_equal(after(FD), 0);
	assert_int_equal(fake.calls, 3);
}

/*
 * A change made (dirsync_before read) while a round's fsync is held, but
 * counted (dirsync_after) only once that fsync has failed and the
 * failure is noted: it fails, though its own round's fsync succeeds.
 * The failed fsync may have taken its link's writeback error, and the
 * next one would not report it.  A change whose count is read after the
 * failure was noted is made after that fsync returned: good.  Fails if
 * a failed round fails only the changes counted before it returned (or
 * before it began).
 */
static void
a_change_made_during_a_failed_fsync_fails_counted_after(void **state)
{
	struct caller	held;
	uint64_t	seen;

	(void)state;
	fake.fail_call = 1;
	hold_round(&held, FD);
	seen = dirsync_before(&ds, FD);		/* the link, in the fsync */
	release_round();
	assert_int_equal(pthread_join(held.thread, NULL), 0);
	assert_int_equal(held.rc, -1);
	assert_int_equal(held.error, EIO);
	assert_int_equal(changed(), 1);		/* ours not counted yet */
	errno = 0;
	assert_int_equal(dirsync_after(&ds, FD, seen), -1);
	assert_int_equal(errno, EIO);
	assert_int_equal(fake.calls, 2);	/* its own round, good */
	assert_int_equal(after(FD), 0);
	assert_int_equal(fake.calls, 3);
}

/*
 * While the inbox's round is in its fsync, a link in the reports
 * directory neither waits for it nor is covered by it: its own fsync,
 * of its own directory, at once.  Fails if rounds are shared across
 * directories (the reports' commit would come before its link were
 * durable, or wait behind another directory's disk).
 */
static void
directories_have_their_own_rounds(void **state)
{
	struct caller	held, other;
	int		alone;

	(void)state;
	hold_round(&held, FD);
	alone = returns_alone(&other, FD + 1);
	release_round();
	assert_int_equal(pthread_join(held.thread, NULL), 0);
	assert_int_equal(pthread_join(other.thread, NULL), 0);
	assert_true(alone);
	assert_int_equal(other.rc, 0);
	assert_int_equal(held.rc, 0);
	assert_int_equal(fake.calls, 2);
	assert_int_equal(fake.fds[0], FD);
	assert_int_equal(fake.fds[1], FD + 1);
}

/*
 * Every slot taken (DIRSYNC_DIRS directories with rounds), one more
 * directory syncs alone, with no slot of another's: while its fsync is
 * held, a link in a directory with a slot still gets its own round at
 * once.  Fails if the extra directory borrows a slot.
 */
static void
directories_past_the_slots_sync_alone(void **state)
{
	struct caller	held, other;
	int		i, alone;

	(void)state;
	fake.hold_fd = 0;
	for (i = 0; i < DIRSYNC_DIRS; i++)
		assert_int_equal(after(FD + i), 0);
	assert_int_equal(fake.calls, DIRSYNC_DIRS);
	hold_round(&held, FD + DIRSYNC_DIRS);
	alone = returns_alone(&other, FD);
	release_round();
	assert_int_equal(pthread_join(held.thread, NULL), 0);
	assert_int_equal(pthread_join(other.thread, NULL), 0);
	assert_true(alone);
	assert_int_equal(held.rc, 0);
	assert_int_equal(other.rc, 0);
	assert_int_equal(fake.calls, DIRSYNC_DIRS + 2);
	assert_int_equal(fake.fds[DIRSYNC_DIRS], FD + DIRSYNC_DIRS);
	assert_int_equal(fake.fds[DIRSYNC_DIRS + 1], FD);
}

/*
 * Past the slots, the same hole as a_change_made_during_..._counted_after:
 * a change made while another caller's fsync of that directory is held,
 * synced once that fsync has failed, fails, though its own fsync
 * succeeds (the failed one, on the same fd, may have taken its link's
 * writeback error); a change made after the failure is good.  Fails if
 * a directory without a slot reports only its own fsync's result.
 */
static void
past_the_slots_a_change_made_during_a_failed_fsync_fails(void **state)
{
	struct caller	held;
	uint64_t	seen;
	int		i, extra = FD + DIRSYNC_DIRS;

	(void)state;
	fake.hold_fd = 0;
	for (i = 0; i < DIRSYNC_DIRS; i++)
		assert_int_equal(after(FD + i), 0);
	fake.fail_call = DIRSYNC_DIRS + 1;
	hold_round(&held, extra);
	seen = dirsync_before(&ds, extra);	/* the link, in the fsync */
	release_round();
	assert_int_equal(pthread_join(held.thread, NULL), 0);
	assert_int_equal(held.rc, -1);
	assert_int_equal(held.error, EIO);
	errno = 0;
	assert_int_equal(dirsync_after(&ds, extra, seen), -1);
	assert_int_equal(errno, EIO);
	assert_int_equal(fake.calls, DIRSYNC_DIRS + 2);	/* its own, good */
	assert_int_equal(after(extra), 0);
	assert_int_equal(fake.calls, DIRSYNC_DIRS + 3);
}

/* Milliseconds since *t0 (CLOCK_MONOTONIC). */
static long
elapsed_ms(const struct timespec *t0)
{
	struct timespec	now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec -
	    t0->tv_nsec) / 1000000;
}

/*
 * Until a caller waits for others on their way (within RETURN_MS: one
 * that began its round instead fails the test, not hangs it).
 */
static void
await_gathering(void)
{
	struct timespec	start;
	size_t		n;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pthread_mutex_lock(&ds.lock);
		n = ds.gathering;
		pthread_mutex_unlock(&ds.lock);
		if (n > 0)
			return;
		if (elapsed_ms(&start) > RETURN_MS)
			fail_msg("no round waits for the caller on its way "
			    "(%d fsyncs begun)", fake.calls);
		sched_yield();
	}
}

/*
 * A caller on its way (its link not made yet): another's round does not
 * begin until it arrives, and then one fsync covers both, where a round
 * begun at once made two.
 */
static void
a_round_waits_for_a_caller_on_its_way(void **state)
{
	struct caller	first;
	unsigned	coming = 0;

	(void)state;
	fake.hold_fd = 0;
	dirsync_coming(&ds, &coming);
	assert_int_equal(coming, 1);
	memset(&first, 0, sizeof first);
	assert_int_equal(pthread_create(&first.thread, NULL, caller_run,
	    &first), 0);
	/* It counted its change and waits, in the same hold of the lock. */
	await_gathering();
	assert_int_equal(changed(), 1);
	pthread_mutex_lock(&fake.lock);
	assert_int_equal(fake.calls, 0);
	assert_int_equal(first.done, 0);
	pthread_mutex_unlock(&fake.lock);
	/* It arrives: one round for both. */
	assert_int_equal(dirsync_after_coming(&ds, FD, dirsync_before(&ds, FD),
	    &coming), 0);
	assert_int_equal(coming, 0);
	assert_int_equal(pthread_join(first.thread, NULL), 0);
	assert_int_equal(first.rc, 0);
	assert_int_equal(fake.calls, 1);
	assert_int_equal(ds.coming, 0);
}

/* One on its way that goes another way is not waited for any longer. */
static void
a_caller_gone_another_way_is_not_waited_for(void **state)
{
	struct caller	first;
	struct timespec	t0;
	unsigned	coming = 0;

	(void)state;
	fake.hold_fd = 0;
	dirsync_coming(&ds, &coming);
	memset(&first, 0, sizeof first);
	assert_int_equal(pthread_create(&first.thread, NULL, caller_run,
	    &first), 0);
	await_gathering();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dirsync_gone(&ds, &coming);
	assert_int_equal(coming, 0);
	assert_int_equal(pthread_join(first.thread, NULL), 0);
	/* Woken by the leave, not by the bound running out. */
	if (elapsed_ms(&t0) >= DIRSYNC_GATHER_MS / 2)
		fail_msg("the waiting caller returned %ld ms after the leave",
		    elapsed_ms(&t0));
	assert_int_equal(ds.tired, 0);
	assert_int_equal(first.rc, 0);
	assert_int_equal(fake.calls, 1);
	/* Gone twice is nothing. */
	dirsync_gone(&ds, &coming);
	assert_int_equal(ds.coming, 0);
}

/*
 * One stalled on its way costs one wait of DIRSYNC_GATHER_MS, not one
 * every round: once a wait ran out, later rounds go at once while it is
 * still on its way, yet wait for a caller marked after the give-up.
 */
static void
a_stalled_caller_costs_one_wait_not_every_round(void **state)
{
	struct caller	waiter;
	struct timespec	t0;
	unsigned	stalled = 0, later = 0;
	int		i;

	(void)state;
	fake.hold_fd = 0;
	dirsync_coming(&ds, &stalled);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(after(FD), 0);
	if (elapsed_ms(&t0) < DIRSYNC_GATHER_MS - 50)
		fail_msg("the first round waited %ld ms, not the bound",
		    elapsed_ms(&t0));
	assert_int_equal(ds.tired, 1);
	/* The stalled one still on its way: the next rounds go at once. */
	for (i = 0; i < 3; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		assert_int_equal(after(FD), 0);
		if (elapsed_ms(&t0) >= DIRSYNC_GATHER_MS / 2)
			fail_msg("round %d waited %ld ms for the stalled caller",
			    i + 2, elapsed_ms(&t0));
	}
	assert_int_equal(ds.tired, 1);
	assert_int_equal(fake.calls, 4);
	/* One marked after the give-up is waited for, and shares the round. */
	dirsync_coming(&ds, &later);
	memset(&waiter, 0, sizeof waiter);
	assert_int_equal(pthread_create(&waiter.thread, NULL, caller_run,
	    &waiter), 0);
	await_gathering();
	assert_int_equal(dirsync_after_coming(&ds, FD, dirsync_before(&ds, FD),
	    &later), 0);
	assert_int_equal(pthread_join(waiter.thread, NULL), 0);
	assert_int_equal(waiter.rc, 0);
	assert_int_equal(fake.calls, 5);
	assert_int_equal(ds.tired, 1);
	/* The stalled one arrives at last: it counts for nobody any more. */
	assert_int_equal(dirsync_after_coming(&ds, FD, dirsync_before(&ds, FD),
	    &stalled), 0);
	assert_int_equal(stalled, 0);
	assert_int_equal(ds.coming, 0);
}

/*
 * The last caller on its way arrives while another waits for it: it
 * wakes no one before its own round (woken then, the waiting caller
 * would find that round begun and sleep again), and that round covers
 * both, its end waking the waiting caller once.
 */
static void
the_last_arrival_wakes_no_one_before_its_round(void **state)
{
	struct caller	first, last;
	unsigned	coming = 0;

	(void)state;
	fake.hold_fd = FD;
	dirsync_coming(&ds, &coming);
	memset(&first, 0, sizeof first);
	assert_int_equal(pthread_create(&first.thread, NULL, caller_run,
	    &first), 0);
	await_gathering();
	memset(&last, 0, sizeof last);
	last.coming = &coming;
	assert_int_equal(pthread_create(&last.thread, NULL, caller_run,
	    &last), 0);
	/* Its round is in its fsync: it covers both changes. */
	pthread_mutex_lock(&fake.lock);
	while (!fake.entered)
		pthread_cond_wait(&fake.cond, &fake.lock);
	pthread_mutex_unlock(&fake.lock);
	assert_int_equal(changed(), 2);
	if (atomic_load(&round_broadcasts) != 0)
		fail_msg("the last arrival woke the waiting caller before "
		    "its round (%d broadcasts)", atomic_load(&round_broadcasts));
	release_round();
	assert_int_equal(pthread_join(last.thread, NULL), 0);
	assert_int_equal(pthread_join(first.thread, NULL), 0);
	assert_int_equal(last.rc, 0);
	assert_int_equal(first.rc, 0);
	assert_int_equal(coming, 0);
	assert_int_equal(fake.calls, 1);
	assert_int_equal(ds.tired, 0);
	/* The round's end, the one wake-up the waiting caller needed. */
	assert_int_equal(atomic_load(&round_broadcasts), 1);
}

/*
 * The last caller on its way arrives while another waits for it on the
 * same directory, and its round's fsync fails: the waiting caller, whose
 * change that round covered, is told so (EIO), not a success, as is the
 * last arrival.
 */
static void
the_last_arrivals_failed_round_fails_the_waiting_caller(void **state)
{
	struct caller	first;
	unsigned	coming = 0;
	int		rc;

	(void)state;
	fake.hold_fd = 0;
	fake.fail_call = 1;
	dirsync_coming(&ds, &coming);
	memset(&first, 0, sizeof first);
	assert_int_equal(pthread_create(&first.thread, NULL, caller_run,
	    &first), 0);
	await_gathering();
	assert_int_equal(changed(), 1);
	rc = dirsync_after_coming(&ds, FD, dirsync_before(&ds, FD), &coming);
	assert_int_equal(rc, -1);
	assert_int_equal(errno, EIO);
	assert_int_equal(pthread_join(first.thread, NULL), 0);
	assert_int_equal(fake.calls, 1);
	assert_int_equal(first.rc, -1);
	assert_int_equal(first.error, EIO);
	assert_int_equal(ds.tired, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(a_lone_caller_syncs_at_once, setup),
		cmocka_unit_test_setup(late_callers_share_the_next_round,
		    setup),
		cmocka_unit_test_setup(a_failed_round_fails_those_it_covered,
		    setup),
		cmocka_unit_test_setup(
		    a_failed_round_fails_changes_counted_while_it_ran, setup),
		cmocka_unit_test_setup(
		    a_change_made_during_a_failed_fsync_fails_counted_after, setup),
		cmocka_unit_test_setup(directories_have_their_own_rounds,
		    setup),
		cmocka_unit_test_setup(directories_past_the_slots_sync_alone,
		    setup),
		cmocka_unit_test_setup(
		    past_the_slots_a_change_made_during_a_failed_fsync_fails,
		    setup),
		cmocka_unit_test_setup(a_round_waits_for_a_caller_on_its_way,
		    setup),
		cmocka_unit_test_setup(
		    a_caller_gone_another_way_is_not_waited_for, setup),
		cmocka_unit_test_setup(
		    a_stalled_caller_costs_one_wait_not_every_round, setup),
		cmocka_unit_test_setup(
		    the_last_arrival_wakes_no_one_before_its_round, setup),
		cmocka_unit_test_setup(
		    the_last_arrivals_failed_round_fails_the_waiting_caller,
		    setup),
	};

	return FILTER_RUN(tests);
}
