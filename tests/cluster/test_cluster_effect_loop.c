/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_effect_loop: the effect ops on the PostgreSQL store run
 * on the worker's effect threads, off its loop and apart from its
 * creation threads (broker/pg/pg_effect.c, pg_pool.c; doc/cluster.md,
 * "Effects").  One broker with one worker (--workers 1); a thread held
 * at a hold point (IDEM_CRASH_HOLD_AT: the thread waits on a FIFO whose
 * open for writing tells the test it is held).  The first three cases
 * hold an effect op before its statements (before_effect_statement,
 * four threads of each kind):
 *
 * - the loop serves meanwhile: on another connection to the same
 *   worker, a cached retry of a committed write_task and a whole other
 *   effect (begin, complete) are answered; the held connection's two
 *   pipelined begins are answered, in order, once it is let go
 *   (proceed, then in_progress).  Run on the loop, as before, the hold
 *   stops the loop and the other connection waits: the case fails
 *   there;
 * - the held op's client gone before it is let go: the op ends all the
 *   same (the row reserved), nothing is answered to the closed
 *   connection, the worker (the same process) serves on;
 * - SIGTERM while it is held: the worker drains (its idle connection
 *   closed) but waits for the op, answers it once it is let go and the
 *   broker exits 0, as with a creation on its thread.
 *
 * These two guard the lifetime and drain handling of an op whose job
 * runs while its connection goes or the worker stops (pg_effect.c's
 * done on the loop, pending_reply to no one): on the code before they
 * fail only because the held op blocks the loop, so they do not tell
 * the two designs apart; a done that skips its work when the client is
 * gone (p->conn == NULL) fails the second case.
 *
 * - a creation holds the only creation thread (--store-connections 1,
 *   before_task_file_link): an effect_begin is answered proceed
 *   meanwhile, and the creation, let go, is created.  With the effect
 *   ops on the creations' threads the begin queues behind it: the case
 *   fails there.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cluster_harness.h"

#ifndef HAVE_POSTGRESQL
int
main(void)
{
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#else

static struct pgserver	server;

#define KIND		"mail.send/v1"
/* idem_submission.state */
#define ROW_RESERVED	1
#define ROW_COMMITTED	3
#define THREADS		"4"
/* What an answer from a loop that serves may take on a loaded machine. */
#define ANSWER_MS	30000

static char *
begin_line(const char *id)
{
	json_t	*r;
	char	*line;

	r = json_pack("{s:s, s:s, s:s, s:{s:s}}", "op", "effect_begin",
	    "client_submission_id", id, "effect_kind", KIND, "request", "to",
	    "ops@example.org");
	assert_non_null(r);
	assert_non_null(line = json_dumps(r, JSON_COMPACT));
	json_decref(r);
	return line;
}

static char *
complete_line(const char *id, const char *fence)
{
	json_t	*r;
	char	*line;

	r = json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:b}}", "op",
	    "effect_complete", "client_submission_id", id, "effect_kind", KIND,
	    "fence", fence, "outcome", "applied", "result", "sent", 1);
	assert_non_null(r);
	assert_non_null(line = json_dumps(r, JSON_COMPACT));
	json_decref(r);
	return line;
}

/* A write_task's line (freed by send_line). */
static char *
write_task_line(const char *id, const char *subject)
{
	json_t	*request = harness_write_task(id, subject);
	char	*line = json_dumps(request, JSON_COMPACT);

	json_decref(request);
	return line;
}

/* One reply on fd within ANSWER_MS, or the test fails saying what. */
static json_t *
answer(int fd, const char *what)
{
	struct pollfd	 pfd = { .fd = fd, .events = POLLIN };
	json_t		*reply;
	char		*line;

	if (poll(&pfd, 1, ANSWER_MS) != 1)
		fail_msg("%s: no answer in %d ms while the test holds a "
		    "thread (the worker waits for it)", what, ANSWER_MS);
	assert_non_null(line = harness_raw_read_line(fd));
	assert_non_null(reply = json_loads(line, 0, NULL));
	free(line);
	return reply;
}

static void
want(json_t *reply, const char *disposition)
{
	const char	*d = json_string_value(json_object_get(reply,
			    "disposition"));
	char		*text;

	if (d == NULL || strcmp(d, disposition) != 0) {
		text = json_dumps(reply, JSON_COMPACT);
		fail_msg("expected %s, got %s", disposition, text);
	}
}

/* The first effect op to reach its statements holds there. */
static void
held_start(struct node *a, char *root, char *fifo, size_t fifo_size,
    char *env, size_t env_size)
{
	cluster_hold_start(&server, a, "before_effect_statement", THREADS, root, fifo,
	    fifo_size, env, env_size);
}

/* The rows of id in the store (0 or 1) in state, or in any if < 0. */
static long
rows_of(const char *id, int state)
{
	if (state < 0)
		return cluster_sql_long(&server, "SELECT count(*) FROM "
		    "idem_submission WHERE client_submission_id = '%s'", id);
	return cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = '%s' AND state = %d",
	    id, state);
}

static void
loop_serves_while_an_effect_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	json_t			*reply;
	char			*fence;
	int			 held, other, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	/* A committed write_task, which the worker caches. */
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(other, write_task_line("cached-1", "Cached"));
	reply = answer(other, "the first write_task");
	want(reply, "created");
	json_decref(reply);
	/* Two begins of one key pipelined on one connection: the first holds. */
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, begin_line("held-1"));
	cluster_send_line(held, begin_line("held-1"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	/* Meanwhile, the same worker: the cached retry, a whole effect. */
	cluster_send_line(other, write_task_line("cached-1", "Cached"));
	reply = answer(other, "the cached write_task retry");
	want(reply, "reused");
	json_decref(reply);
	cluster_send_line(other, begin_line("free-1"));
	reply = answer(other, "another effect's begin");
	want(reply, "proceed");
	assert_non_null(fence = strdup(harness_str(reply, "fence")));
	json_decref(reply);
	cluster_send_line(other, complete_line("free-1", fence));
	free(fence);
	reply = answer(other, "another effect's complete");
	harness_assert_bool(reply, "ok", 1);
	assert_non_null(json_object_get(reply, "receipt"));
	json_decref(reply);
	assert_int_equal(rows_of("free-1", ROW_COMMITTED), 1);
	/* The held op: unanswered, nothing of it in the store yet. */
	cluster_assert_unanswered(held);
	assert_int_equal(rows_of("held-1", -1), 0);
	/* Let go: its answer, then the pipelined one's, in that order. */
	close(w);
	reply = answer(held, "the held begin");
	want(reply, "proceed");
	assert_int_equal(harness_int(reply, "attempt"), 1);
	json_decref(reply);
	reply = answer(held, "the begin pipelined behind it");
	want(reply, "in_progress");
	json_decref(reply);
	assert_int_equal(rows_of("held-1", ROW_RESERVED), 1);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

/*
 * The held op's client is gone before it is let go, and the worker has
 * freed its connection (the worker's sockets, one fewer: an effect op
 * held before its statements has opened no connection of its own to
 * the server, so nothing else moves them).
 */
static void
client_gone_while_its_effect_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	pid_t			 before[2], after[2];
	json_t			*reply;
	int64_t			 deadline;
	int			 held, other, w, open_before;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	assert_int_equal(harness_workers(&a.b, before, 2), 1);
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, begin_line("gone-1"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	open_before = cluster_sockets_of(before[0]);
	close(held);
	deadline = harness_now_ms() + ANSWER_MS;
	while (cluster_sockets_of(before[0]) != open_before - 1) {
		if (harness_now_ms() > deadline)
			fail_msg("the worker never freed the closed "
			    "connection");
		assert_int_equal(usleep(5000), 0);
	}
	close(w);
	/* The op ran to its end: the row reserved, the worker the same. */
	if (!pgserver_await(&server, "SELECT count(*) = 1 FROM "
	    "idem_submission WHERE client_submission_id = 'gone-1' AND "
	    "state = 1", 30))
		fail_msg("the held begin of a closed connection never reserved");
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(other, begin_line("gone-1"));
	reply = answer(other, "a begin after the gone client's");
	want(reply, "in_progress");
	json_decref(reply);
	close(other);
	assert_int_equal(harness_workers(&a.b, after, 2), 1);
	assert_int_equal(after[0], before[0]);
	assert_int_equal(harness_stop(&a.b), 0);
	cluster_held_end(&a, root, fifo);
}

/*
 * SIGTERM while an effect op is held on its thread: the worker drains
 * (an idle connection of its is closed: the end of its stream says so)
 * and waits for the op, as for a creation; let go, the op is answered
 * and the broker exits 0.
 */
static void
sigterm_while_an_effect_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	struct pollfd		 pfd;
	json_t			*reply;
	char			*line;
	int			 held, idle, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	/* Idle once its hello is answered: the worker has it. */
	assert_true((idle = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(idle, strdup("{\"op\":\"hello\"}"));
	json_decref(answer(idle, "hello"));
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, begin_line("term-1"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	assert_int_equal(kill(a.b.pid, SIGTERM), 0);
	pfd.fd = idle;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, ANSWER_MS) != 1)
		fail_msg("the worker did not drain on SIGTERM");
	line = harness_raw_read_line(idle);
	assert_null(line);
	close(idle);
	cluster_assert_unanswered(held);
	close(w);
	reply = answer(held, "the held begin after SIGTERM");
	want(reply, "proceed");
	json_decref(reply);
	close(held);
	harness_wait_dead(&a.b);
	assert_int_equal(a.b.exit_status, 0);
	assert_int_equal(rows_of("term-1", ROW_RESERVED), 1);
	cluster_held_end(&a, root, fifo);
}

/*
 * A creation holds the worker's only creation thread (--store-connections
 * 1, held at before_task_file_link: its temporary written, its lease
 * granted, its thread waiting on the FIFO, as a creation waits for a
 * stalled file system): an effect_begin on another connection is
 * answered proceed meanwhile, on the effect threads, and the row is
 * reserved; let go, the creation is created, one file, no temporary.
 * With the effect ops on the creations' threads, the begin queues
 * behind the held creation and is not answered: the case fails there.
 */
static void
effect_answered_while_a_creation_holds_its_thread(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	json_t			*request, *reply;
	char			*line;
	int			 held, other, w;

	(void)state;
	cluster_hold_start(&server, &a, "before_task_file_link", "1", root, fifo, sizeof fifo,
	    env, sizeof env);
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	request = harness_write_task("held-1", "Hold me");
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	cluster_send_line(held, line);
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(other, begin_line("beside-1"));
	reply = answer(other, "an effect_begin while a creation holds the "
	    "only creation thread");
	want(reply, "proceed");
	assert_int_equal(harness_int(reply, "attempt"), 1);
	json_decref(reply);
	assert_int_equal(rows_of("beside-1", ROW_RESERVED), 1);
	/* The creation is still held: unanswered, its temporary on disk. */
	cluster_assert_unanswered(held);
	assert_int_equal(rows_of("held-1", ROW_RESERVED), 1);
	assert_int_equal(cluster_temporaries(root), 1);
	close(w);
	reply = answer(held, "the held creation, let go");
	want(reply, "created");
	json_decref(reply);
	assert_int_equal(rows_of("held-1", ROW_COMMITTED), 1);
	assert_int_equal(cluster_tasks_on_disk(root, NULL), 1);
	assert_int_equal(cluster_temporaries(root), 0);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    loop_serves_while_an_effect_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    client_gone_while_its_effect_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    sigterm_while_an_effect_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    effect_answered_while_a_creation_holds_its_thread,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
