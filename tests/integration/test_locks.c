/* SPDX-License-Identifier: ISC */
/*
 * test_locks.c: a worker killed while it holds each lock of the shared
 * segment (table, allocator, journal ring), with other clients busy.  The
 * next owner of the lock repairs it (EOWNERDEAD), the master replaces the
 * worker, and every submission still ends with exactly one TASK file and
 * a receipt that later retries get back unchanged.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "harness.h"

#define LOCKS_CLIENTS		4
#define LOCKS_PER_CLIENT	25
#define LOCKS_ATTEMPTS		50

struct client {
	struct broker	*broker;
	int		 index;
	int		 failures;	/* calls that never got an answer */
	int		 transport_errors;
	char		 task_ids[LOCKS_PER_CLIENT][96];
};

/* write_task until answered, reconnecting after a lost connection. */
static int
submit(struct client *c, struct idem_conn **conn, const char *id,
    const struct idem_task *task, struct idem_write_result *result)
{
	struct idem_error	err;
	int			attempt;

	for (attempt = 0; attempt < LOCKS_ATTEMPTS; attempt++) {
		if (*conn == NULL && (*conn = harness_connect(c->broker)) == NULL)
			continue;
		if (idem_write_task(*conn, id, task, result, &err) == 0)
			return 0;
		if (err.code != IDEM_E_TRANSPORT && !err.retryable)
			return -1;
		c->transport_errors++;
		idem_close(*conn);
		*conn = NULL;
	}
	return -1;
}

static void *
client_main(void *arg)
{
	struct client		*c = arg;
	struct idem_conn	*conn = NULL;
	struct idem_task	 task = { .sender = "PM", .recipient = "DEV" };
	struct idem_write_result result;
	char			 id[64], subject[64];
	int			 i;

	for (i = 0; i < LOCKS_PER_CLIENT; i++) {
		snprintf(id, sizeof id, "lock-%d-%d", c->index, i);
		snprintf(subject, sizeof subject, "task %d of client %d", i,
		    c->index);
		task.subject = subject;
		if (submit(c, &conn, id, &task, &result) != 0 ||
		    result.disposition == IDEM_CONFLICT) {
			c->failures++;
			continue;
		}
		snprintf(c->task_ids[i], sizeof c->task_ids[i], "%s",
		    result.receipt.task_id);
	}
	if (conn != NULL)
		idem_close(conn);
	return NULL;
}

static void
run_lock_death(const char *lock)
{
	struct broker		 b;
	struct client		 clients[LOCKS_CLIENTS];
	pthread_t		 threads[LOCKS_CLIENTS];
	struct idem_conn	*conn;
	struct idem_task	 task = { .sender = "PM", .recipient = "DEV" };
	struct idem_write_result result;
	struct idem_error	 err;
	char			 env[64], id[64], subject[64], *log;
	json_t			*stats;
	int			 i, j;

	snprintf(env, sizeof env, "IDEM_CRASH_WORKER_IN_LOCK=%s", lock);
	harness_fresh_root(&b);
	assert_int_equal(harness_start(&b, NULL,
	    (const char *const []){ env, NULL }), 0);

	memset(clients, 0, sizeof clients);
	for (i = 0; i < LOCKS_CLIENTS; i++) {
		clients[i].broker = &b;
		clients[i].index = i;
		assert_int_equal(pthread_create(&threads[i], NULL, client_main,
		    &clients[i]), 0);
	}
	for (i = 0; i < LOCKS_CLIENTS; i++)
		pthread_join(threads[i], NULL);
	for (i = 0; i < LOCKS_CLIENTS; i++)
		assert_int_equal(clients[i].failures, 0);

	/* One TASK per submission: none lost, none doubled. */
	assert_int_equal(harness_count_tasks(&b),
	    LOCKS_CLIENTS * LOCKS_PER_CLIENT);

	/* Every retry now gets the receipt the client was given. */
	assert_non_null(conn = harness_connect(&b));
	for (i = 0; i < LOCKS_CLIENTS; i++) {
		for (j = 0; j < LOCKS_PER_CLIENT; j++) {
			snprintf(id, sizeof id, "lock-%d-%d", i, j);
			snprintf(subject, sizeof subject,
			    "task %d of client %d", j, i);
			task.subject = subject;
			assert_int_equal(idem_write_task(conn, id, &task,
			    &result, &err), 0);
			assert_int_equal(result.disposition, IDEM_REUSED);
			assert_string_equal(result.receipt.task_id,
			    clients[i].task_ids[j]);
		}
	}

	/* The worker did die holding the lock, and was replaced. */
	stats = harness_call(conn, json_pack("{s:s}", "op", "stats"));
	assert_non_null(stats);
	assert_true(json_integer_value(json_object_get(stats,
	    "worker_restarts")) >= 1);
	assert_int_equal(json_integer_value(json_object_get(stats, "workers")),
	    2);
	json_decref(stats);
	idem_close(conn);
	assert_int_equal(harness_stop(&b), 0);
	log = harness_read_log(&b);
	assert_non_null(log);
	assert_non_null(strstr(log, "dying holding the"));
	assert_non_null(strstr(log, "its owner died holding it; repairing"));
	free(log);
	harness_cleanup(&b);
}

static void
test_worker_dies_holding_table_lock(void **state)
{
	run_lock_death("table");
}

static void
test_worker_dies_holding_allocator_lock(void **state)
{
	run_lock_death("allocator");
}

static void
test_worker_dies_holding_journal_ring_lock(void **state)
{
	run_lock_death("journal-ring");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worker_dies_holding_table_lock),
		cmocka_unit_test(test_worker_dies_holding_allocator_lock),
		cmocka_unit_test(test_worker_dies_holding_journal_ring_lock),
	};

	harness_watchdog(120);
	return FILTER_RUN(tests);
}
