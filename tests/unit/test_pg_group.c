/* SPDX-License-Identifier: ISC */
/*
 * test_pg_group.c: the PostgreSQL store's rounds (broker/pg/pg_group.c)
 * with the store's calls stood in for by the test: a member queued
 * behind a round in flight is woken to lead the next one, and woken
 * only once the round's reader has let the group's lock go (woken
 * under it, its thread would wake only to find the lock held and sleep
 * on it again).  pthread_mutex_lock, _unlock and pthread_cond_signal
 * are wrapped (-Wl,--wrap in Makefile.am): each thread counts the locks
 * it holds, and a signal of a member's condition variable notes that
 * count.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "log.h"
#include "pg.h"
#include "pg_group.h"

/* ---- the wrapped calls ---------------------------------------------- */

static _Thread_local int	locks_held;

int	__real_pthread_mutex_lock(pthread_mutex_t *);
int	__real_pthread_mutex_unlock(pthread_mutex_t *);
int	__real_pthread_cond_signal(pthread_cond_t *);
int	__wrap_pthread_mutex_lock(pthread_mutex_t *);
int	__wrap_pthread_mutex_unlock(pthread_mutex_t *);
int	__wrap_pthread_cond_signal(pthread_cond_t *);

/* The members' threads' condition variables, and their signals. */
static pthread_cond_t	wake_a = PTHREAD_COND_INITIALIZER;
static pthread_cond_t	wake_b = PTHREAD_COND_INITIALIZER;
static _Atomic int	signals_b;
static _Atomic int	signals_under_a_lock;

int
__wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
	int	rc = __real_pthread_mutex_lock(m);

	if (rc == 0)
		locks_held++;
	return rc;
}

int
__wrap_pthread_mutex_unlock(pthread_mutex_t *m)
{
	locks_held--;
	return __real_pthread_mutex_unlock(m);
}

int
__wrap_pthread_cond_signal(pthread_cond_t *c)
{
	if (c == &wake_a || c == &wake_b) {
		if (c == &wake_b)
			atomic_fetch_add(&signals_b, 1);
		if (locks_held > 0)
			atomic_fetch_add(&signals_under_a_lock, 1);
	}
	return __real_pthread_cond_signal(c);
}

/* ---- the store, stood in for ---------------------------------------- */

/*
 * The test's own lock and condition (taken through the wrapped calls:
 * balanced, so they count for no signal of the rounds').
 */
static struct {
	pthread_mutex_t	 lock;
	pthread_cond_t	 cond;
	int		 rounds_sent;
	int		 b_waits;	/* B sleeps behind the first round */
	int		 alone;		/* lone statements (none expected) */
} fake = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER
};

static struct pg_group_member	a, b;

int
pgstore_round_send(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, char **cause)
{
	(void)st;
	(void)m;
	(void)n;
	*cause = NULL;
	__real_pthread_mutex_lock(&fake.lock);
	fake.rounds_sent++;
	pthread_cond_broadcast(&fake.cond);
	__real_pthread_mutex_unlock(&fake.lock);
	return 0;
}

/*
 * Every member committed.  The first round's results come only once B
 * sleeps behind it (its waiting flag, set under the group's lock that
 * its wait lets go: pg_group.c's group_sleep).
 */
int
pgstore_round_wait(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, enum pgstore_batch_failure *failure, char **cause)
{
	size_t	i;

	(void)st;
	(void)failure;
	*cause = NULL;
	__real_pthread_mutex_lock(&fake.lock);
	while (fake.rounds_sent == 1 && !fake.b_waits)
		pthread_cond_wait(&fake.cond, &fake.lock);
	__real_pthread_mutex_unlock(&fake.lock);
	for (i = 0; i < n; i++)
		m[i]->returned = 1;
	return 0;
}

int
pgstore_batch_send(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, char **cause)
{
	(void)st;
	(void)m;
	(void)n;
	*cause = strdup("not expected");
	return -1;
}

int
pgstore_batch_wait(struct pgstore *st, struct pgstore_batch_member *const *m,
    size_t n, enum pgstore_batch_failure *failure, char **cause)
{
	(void)st;
	(void)m;
	(void)n;
	*failure = PGSTORE_BATCH_FAILED;
	*cause = strdup("not expected");
	return -1;
}

static int
fake_alone(char **cause)
{
	__real_pthread_mutex_lock(&fake.lock);
	fake.alone++;
	__real_pthread_mutex_unlock(&fake.lock);
	*cause = NULL;
	return 1;
}

int
pgstore_grant(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, char **cause)
{
	(void)st;
	(void)key;
	(void)epoch;
	(void)token;
	return fake_alone(cause);
}

int
pgstore_commit(struct pgstore *st, const struct pgstore_key *key,
    int64_t epoch, const char *token, const uint8_t *file_digest,
    const char *receipt, char **cause)
{
	(void)st;
	(void)key;
	(void)epoch;
	(void)token;
	(void)file_digest;
	(void)receipt;
	return fake_alone(cause);
}

int
pgstore_claim_begin(struct pgstore *st, struct pgstore_claim *claim,
    const struct pgstore_key *key, const struct subtab_entry *want,
    struct pgstore_row *row, char **cause)
{
	(void)st;
	(void)claim;
	(void)key;
	(void)want;
	(void)row;
	*cause = strdup("not expected");
	return -1;
}

int
pgstore_claim_end(struct pgstore *st, struct pgstore_claim *claim,
    char **cause)
{
	(void)st;
	(void)claim;
	*cause = strdup("not expected");
	return -1;
}

int
pgstore_claim_next(struct pgstore *st, struct pgstore_claim *claim,
    char **cause)
{
	return pgstore_claim_end(st, claim, cause);
}

void
pgstore_claim_clear(struct pgstore_claim *claim)
{
	(void)claim;
}

void
pgstore_drop(struct pgstore *st)
{
	(void)st;
}

#ifdef IDEM_FAULT_INJECTION
void	pg_pause_point(const char *);

void
pg_pause_point(const char *point)
{
	(void)point;
}
#endif

void
log_warnx(const char *fmt, ...)
{
	(void)fmt;
}

void
log_info(const char *fmt, ...)
{
	(void)fmt;
}

/* ---- the members ---------------------------------------------------- */

struct committer {
	pthread_t			 thread;
	struct pg_group_member		*me;
	pthread_cond_t			*wake;
	struct pgstore			 st;
	struct pgstore_key		 key;
	int				 rc;
};

static void *
committer_run(void *arg)
{
	static const uint8_t	 digest[32];
	struct committer	*c = arg;
	char			*cause = NULL;

	pg_group_member_init(c->me, c->wake);
	c->rc = pg_group_commit(c->me, &c->st, &c->key, 1, "token", digest,
	    "{}", &cause);
	free(cause);
	return NULL;
}

/*
 * Wrapped too: B's first wait is behind A's round (its deadline's), and
 * the stand-in round's results wait for it.
 */
int	__real_pthread_cond_clockwait(pthread_cond_t *, pthread_mutex_t *,
	    clockid_t, const struct timespec *);
int	__wrap_pthread_cond_clockwait(pthread_cond_t *, pthread_mutex_t *,
	    clockid_t, const struct timespec *);

int
__wrap_pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m,
    clockid_t clock, const struct timespec *deadline)
{
	if (c == &wake_b) {
		__real_pthread_mutex_lock(&fake.lock);
		fake.b_waits = 1;
		pthread_cond_broadcast(&fake.cond);
		__real_pthread_mutex_unlock(&fake.lock);
	}
	return __real_pthread_cond_clockwait(c, m, clock, deadline);
}

/*
 * A leads a round and reads it; B, queued behind it, sleeps until the
 * round is settled, then leads the next.  B is woken once, and after
 * the reader let the group's lock go.
 */
static void
a_member_is_woken_after_the_lock_is_let_go(void **state)
{
	struct committer	ca = { .me = &a, .wake = &wake_a };
	struct committer	cb = { .me = &b, .wake = &wake_b };

	(void)state;
	ca.key.kind = cb.key.kind = SUBTAB_KIND_TASK;
	ca.key.scope = cb.key.scope = "";
	ca.key.id = "a";
	cb.key.id = "b";
	assert_int_equal(pthread_create(&ca.thread, NULL, committer_run, &ca),
	    0);
	/* B queues once A's round is sent. */
	__real_pthread_mutex_lock(&fake.lock);
	while (fake.rounds_sent < 1)
		pthread_cond_wait(&fake.cond, &fake.lock);
	__real_pthread_mutex_unlock(&fake.lock);
	assert_int_equal(pthread_create(&cb.thread, NULL, committer_run, &cb),
	    0);
	assert_int_equal(pthread_join(ca.thread, NULL), 0);
	assert_int_equal(pthread_join(cb.thread, NULL), 0);
	assert_int_equal(ca.rc, 1);
	assert_int_equal(cb.rc, 1);
	/* Two rounds, B leading the second; nobody went alone. */
	assert_int_equal(fake.rounds_sent, 2);
	assert_int_equal(fake.alone, 0);
	assert_int_equal(atomic_load(&signals_b), 1);
	if (atomic_load(&signals_under_a_lock) != 0)
		fail_msg("%d members woken under a lock",
		    atomic_load(&signals_under_a_lock));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_member_is_woken_after_the_lock_is_let_go),
	};

	return FILTER_RUN(tests);
}
