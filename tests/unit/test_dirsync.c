/* SPDX-License-Identifier: ISC */
/*
 * test_dirsync.c: the shared directory fsync (dirsync.c) with a stand-in
 * fsync that the test holds: a lone caller syncs at once; callers that
 * come while a round runs are not released by it and share the next
 * one (two fsyncs for four links, where an fsync each made four); a
 * failed round fails every caller it covered and none it did not.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "dirsync.h"

#define FD		7
#define LATE		3	/* callers that come during the first round */

/* The stand-in fsync: held on its first call until released. */
static struct {
	pthread_mutex_t	 lock;
	pthread_cond_t	 cond;
	int		 calls;		/* begun */
	int		 finished;	/* returned */
	int		 hold_first;
	int		 entered;	/* the held call began */
	int		 released;
	int		 fail_call;	/* this call (from 1) fails with EIO */
} fake = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

static struct dirsync	ds;

static int
fake_sync(int fd)
{
	int	call, rc = 0;

	assert_int_equal(fd, FD);
	pthread_mutex_lock(&fake.lock);
	call = ++fake.calls;
	if (call == 1 && fake.hold_first) {
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
	fake.hold_first = 1;
	fake.fail_call = 0;
	pthread_mutex_unlock(&fake.lock);
	dirsync_init(&ds, fake_sync);
	return 0;
}

struct caller {
	pthread_t	 thread;
	int		 rc;
	int		 error;
	int		 finished_before;	/* fsyncs returned before its own */
};

static void *
caller_run(void *arg)
{
	struct caller	*c = arg;

	c->rc = dirsync_after(&ds, FD);
	c->error = errno;
	pthread_mutex_lock(&fake.lock);
	c->finished_before = fake.finished;
	pthread_mutex_unlock(&fake.lock);
	return NULL;
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
	fake.hold_first = 0;
	assert_int_equal(dirsync_after(&ds, FD), 0);
	assert_int_equal(fake.calls, 1);
	assert_int_equal(dirsync_after(&ds, FD), 0);
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
	memset(&first, 0, sizeof first);
	memset(late, 0, sizeof late);
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
	memset(&first, 0, sizeof first);
	memset(late, 0, sizeof late);
	fake.fail_call = 2;	/* the late callers' shared round */
	first_held_then_late(&first, late);
	assert_int_equal(first.rc, 0);
	for (i = 0; i < LATE; i++) {
		assert_int_equal(late[i].rc, -1);
		assert_int_equal(late[i].error, EIO);
	}
	/* A change after the failed round: a round of its own, good. */
	assert_int_equal(dirsync_after(&ds, FD), 0);
	assert_int_equal(fake.calls, 3);
}

static void
a_failed_first_round_fails_its_caller_only(void **state)
{
	struct caller	first, late[LATE];
	int		i;

	(void)state;
	memset(&first, 0, sizeof first);
	memset(late, 0, sizeof late);
	fake.fail_call = 1;
	first_held_then_late(&first, late);
	assert_int_equal(first.rc, -1);
	assert_int_equal(first.error, EIO);
	for (i = 0; i < LATE; i++)
		assert_int_equal(late[i].rc, 0);
	assert_int_equal(fake.calls, 2);
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
		cmocka_unit_test_setup(a_failed_first_round_fails_its_caller_only,
		    setup),
	};

	if (FILTER_APPLY(tests) == -1)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
