/* SPDX-License-Identifier: ISC */
/*
 * test_libidem_retry.c: libidem's retry helper, idem_write_task_retry,
 * against a real idemd: across a broker and a worker killed in the
 * middle of its request (one TASK, reused, recovered), a non-retryable
 * error returned at once, no broker at all, and a broker that never
 * answers (the reply's wait ends at the deadline).  Nothing here sleeps
 * to synchronise; it waits on a thread or on the broker's exit.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/libidem_test.h"

/* The retry helper may wait this long for a broker to come back. */
#define TEST_RETRY_DEADLINE_MS	30000

struct retry_call {
	const char		*socket;
	const char		*id;
	struct idem_task	 task;
	struct idem_retry_policy policy;
	struct idem_write_result result;
	struct idem_error	 err;
	int			 rc;
};

static void *
retry_thread(void *arg)
{
	struct retry_call	*rc = arg;

	rc->rc = idem_write_task_retry(rc->socket, rc->id, &rc->task,
	    &rc->policy, &rc->result, &rc->err);
	return NULL;
}

static void
retry_call_init(struct retry_call *rc, struct broker *b, const char *id)
{
	memset(rc, 0, sizeof *rc);
	rc->socket = b->socket;
	rc->id = id;
	make_task(&rc->task, "Fix login");
	rc->policy.max_attempts = 1000;
	rc->policy.base_delay_ms = 10;
	rc->policy.max_delay_ms = 200;
	rc->policy.deadline_ms = TEST_RETRY_DEADLINE_MS;
}

/*
 * The broker dies with the TASK file in place but nothing committed; the
 * helper reconnects to the restarted broker with the same id, which
 * adopts the file: one TASK, reused, recovered.
 */
static void
retry_survives_broker_killed_mid_request(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc, again;
	pthread_t		 thread;
	const char		*env[] = {
		"IDEM_CRASH_AT=after_task_file_linked", NULL
	};

	harness_must_start(b, NULL, env);
	retry_call_init(&rc, b, "retry-1");
	assert_int_equal(pthread_create(&thread, NULL, retry_thread, &rc), 0);
	harness_wait_dead(b);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_must_start(b, NULL, NULL);
	assert_int_equal(pthread_join(thread, NULL), 0);

	if (rc.rc != 0)
		fail_msg("retry: %s (after %u tries)", rc.err.message,
		    rc.result.attempts);
	assert_int_equal(rc.result.disposition, IDEM_REUSED);
	assert_int_equal(rc.result.recovered, 1);
	assert_int_equal(rc.result.action_taken, 0);
	assert_true(rc.result.attempts >= 2);
	assert_string_equal(rc.result.receipt.client_submission_id, "retry-1");
	assert_int_equal(harness_count_tasks(b), 1);

	/* Once committed, every later call gets the same receipt. */
	retry_call_init(&again, b, "retry-1");
	assert_int_equal(idem_write_task_retry(b->socket, "retry-1",
	    &again.task, NULL, &again.result, &again.err), 0);
	assert_int_equal(again.result.disposition, IDEM_REUSED);
	assert_int_equal(again.result.recovered, 0);
	assert_int_equal(again.result.attempts, 1);
	assert_string_equal(again.result.receipt.raw, rc.result.receipt.raw);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* Only the worker dies; the master replaces it and the broker serves on. */
static void
retry_survives_worker_killed_mid_request(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	const char		*env[] = {
		"IDEM_CRASH_WORKER_AT=after_task_file_linked", NULL
	};

	harness_must_start(b, NULL, env);
	retry_call_init(&rc, b, "retry-2");
	rc.rc = idem_write_task_retry(rc.socket, rc.id, &rc.task, &rc.policy,
	    &rc.result, &rc.err);
	if (rc.rc != 0)
		fail_msg("retry: %s (after %u tries)", rc.err.message,
		    rc.result.attempts);
	assert_int_equal(rc.result.disposition, IDEM_REUSED);
	assert_int_equal(rc.result.recovered, 1);
	assert_true(rc.result.attempts >= 2);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

static void
retry_returns_non_retryable_at_once(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;

	harness_must_start(b, NULL, NULL);
	retry_call_init(&rc, b, "retry-3");
	rc.task.sender = "pm";		/* not an FCoP role code */
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_INVALID_REQUEST);
	assert_string_equal(rc.err.field, "task.sender");
	assert_int_equal(rc.err.retryable, 0);
	assert_int_equal(rc.result.attempts, 1);
	assert_int_equal(rc.result.disposition, IDEM_DISPOSITION_NONE);

	/* A conflict is an outcome, returned at once too. */
	rc.task.sender = "PM";
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), 0);
	assert_int_equal(rc.result.disposition, IDEM_CREATED);
	assert_int_equal(rc.result.attempts, 1);
	rc.task.subject = "Fix logout";
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), 0);
	assert_int_equal(rc.result.disposition, IDEM_CONFLICT);
	assert_int_equal(rc.err.code, IDEM_E_CONFLICT);
	assert_string_equal(rc.err.reason, "digest_mismatch");
	assert_int_equal(rc.result.attempts, 1);

	/* A legacy call is never retried: refused before any try. */
	assert_int_equal(idem_write_task_retry(rc.socket, NULL, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_ARGUMENT);
	assert_int_equal(rc.result.attempts, 0);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* No broker at all: the attempts cap and the deadline both end it. */
static void
retry_gives_up_without_broker(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	int64_t			 began;

	retry_call_init(&rc, b, "retry-4");
	rc.policy.max_attempts = 3;
	rc.policy.base_delay_ms = 1;
	rc.policy.max_delay_ms = 2;
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_int_equal(rc.err.retryable, 1);
	assert_int_equal(rc.result.attempts, 3);

	retry_call_init(&rc, b, "retry-4");
	rc.policy.max_delay_ms = 20;
	rc.policy.deadline_ms = 300;
	began = harness_now_ms();
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_true(rc.result.attempts > 1);
	assert_true(rc.result.attempts < rc.policy.max_attempts);
	/* Never sleeps past the deadline (the bound is generous). */
	assert_true(harness_now_ms() - began < 300 + 2000);
	harness_finish(b);
}

/*
 * A broker that takes the request and never answers (a stand-in that
 * does not even accept: the connection waits in its backlog): the wait
 * for the reply ends at the retry helper's deadline, not never.  The
 * reply is awaited in poll(2) (client.c, client_wait_readable), so the
 * deadline must bound the poll as it bounded the read.
 */
static void
retry_deadline_bounds_the_reply_wait(void **state)
{
	struct broker		*b = *state;
	struct retry_call	 rc;
	struct sockaddr_un	 sa;
	int64_t			 began, took;
	int			 fd;

	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true((size_t)snprintf(sa.sun_path, sizeof sa.sun_path,
	    "%s/silent.sock", b->root) < sizeof sa.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd != -1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, 4), 0);
	retry_call_init(&rc, b, "retry-5");
	rc.socket = sa.sun_path;
	rc.policy.max_attempts = 1;
	rc.policy.deadline_ms = 300;
	began = harness_now_ms();
	assert_int_equal(idem_write_task_retry(rc.socket, rc.id, &rc.task,
	    &rc.policy, &rc.result, &rc.err), -1);
	took = harness_now_ms() - began;
	assert_int_equal(rc.err.code, IDEM_E_TRANSPORT);
	assert_non_null(strstr(rc.err.message, "no reply before the deadline"));
	assert_int_equal(rc.result.attempts, 1);
	assert_true(took >= 250);
	assert_true(took < 300 + 2000);
	close(fd);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(retry_survives_broker_killed_mid_request),
		T(retry_survives_worker_killed_mid_request),
		T(retry_returns_non_retryable_at_once),
		T(retry_deadline_bounds_the_reply_wait),
		T(retry_gives_up_without_broker),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
