/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_read_loop: the reads on the PostgreSQL store
 * (get_submission, diagnose, stats' "store") run on the worker's read
 * thread, off its loop (broker/pg/pg_read.c, pg_pool.c; doc/cluster.md,
 * "Reads off the loop").  One broker with one worker (--workers 1); the first read to
 * reach its statements is held there (IDEM_CRASH_HOLD_AT=
 * before_read_statement: the thread waits on a FIFO whose open for
 * writing tells the test it is held).
 *
 * - a get_submission held: on another connection to the same worker, a
 *   cached retry of a committed write_task and a whole effect (begin,
 *   complete) are answered; the held connection's get and the effect's
 *   get pipelined behind it are answered, in order, once it is let go,
 *   each the same bytes as the same get answered later unheld (but the
 *   effect's age_ms);
 * - a diagnose held: the same worker answers the cached retry and an
 *   effect_begin meanwhile; let go, its entries are read then (the
 *   effect begun meanwhile among them, with its lease's owner) and its
 *   counts agree;
 * - stats held: the cached retry answered meanwhile; let go, its
 *   "store" member counts the workspace's rows.
 *
 * Run on the loop, as before, the held read stops the loop and the other
 * connection waits: these three fail there (no answer in 30 s).
 *
 * - a diagnose's client gone while it is held: the read ends all the
 *   same (its rows gathered and let go), nothing is answered to the
 *   closed connection, the worker (the same process) serves on and
 *   stops cleanly (in a sanitizer build, its log without a report: a
 *   leak of the rows the read gathered fails it);
 * - SIGTERM while a get is held: the worker drains (its idle connection
 *   closed) but waits for the read, answers it once it is let go, and
 *   the broker exits 0.
 *
 * These two guard the lifetime and drain handling of a read whose job
 * runs while its client goes or its worker stops; on the code before
 * they fail only because the held read blocks the loop.
 *
 * - an effect op holds the only effect thread (--store-connections 1,
 *   before_effect_statement): a get_submission and a diagnose are
 *   answered meanwhile: the reads have a thread of their own (fails
 *   with the read jobs on the effect pool).
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
/* What an answer from a loop that serves may take on a loaded machine. */
#define ANSWER_MS	30000

static char *
line_of(json_t *r)
{
	char	*line;

	assert_non_null(r);
	assert_non_null(line = json_dumps(r, JSON_COMPACT));
	json_decref(r);
	return line;
}

static char *
begin_line(const char *id)
{
	return line_of(json_pack("{s:s, s:s, s:s, s:{s:s}}", "op",
	    "effect_begin", "client_submission_id", id, "effect_kind", KIND,
	    "request", "to", "ops@example.org"));
}

static char *
complete_line(const char *id, const char *fence)
{
	return line_of(json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:b}}", "op",
	    "effect_complete", "client_submission_id", id, "effect_kind", KIND,
	    "fence", fence, "outcome", "applied", "result", "sent", 1));
}

/* get_submission of a task (kind NULL) or an effect. */
static char *
get_line(const char *id, const char *kind)
{
	if (kind == NULL)
		return line_of(json_pack("{s:s, s:s}", "op", "get_submission",
		    "client_submission_id", id));
	return line_of(json_pack("{s:s, s:s, s:s}", "op", "get_submission",
	    "client_submission_id", id, "effect_kind", kind));
}

static char *
write_task_line(const char *id, const char *subject)
{
	return line_of(harness_write_task(id, subject));
}

/* One reply's line on fd within ANSWER_MS, or the test fails. */
static char *
answer_line(int fd, const char *what)
{
	struct pollfd	 pfd = { .fd = fd, .events = POLLIN };
	char		*line;

	if (poll(&pfd, 1, ANSWER_MS) != 1)
		fail_msg("%s: no answer in %d ms while the test holds a "
		    "read (the worker waits for it)", what, ANSWER_MS);
	assert_non_null(line = harness_raw_read_line(fd));
	return line;
}

static json_t *
answer(int fd, const char *what)
{
	json_t	*reply;
	char	*line = answer_line(fd, what);

	assert_non_null(reply = json_loads(line, 0, NULL));
	free(line);
	return reply;
}

static void
want(json_t *reply, const char *disposition)
{
	const char	*d = json_string_value(json_object_get(reply,
			    "disposition"));

	if (d == NULL || strcmp(d, disposition) != 0)
		fail_msg("expected %s, got %s", disposition,
		    json_dumps(reply, JSON_COMPACT));
}

/* The first read to reach its statements holds there. */
static void
held_start(struct node *a, char *root, char *fifo, size_t fifo_size,
    char *env, size_t env_size)
{
	cluster_hold_start(&server, a, "before_read_statement", NULL, root, fifo, fifo_size,
	    env, env_size);
}

/*
 * The node's log holds no sanitizer's report (a sanitizer build): its
 * worker, stopped cleanly, leaked nothing the read kept (LeakSanitizer
 * reports at the worker's exit, which the master's exit status does
 * not show).
 */
static void
assert_no_sanitizer_report(const struct node *a)
{
	if (harness_log_count(&a->b, "Sanitizer") != 0)
		fail_msg("a sanitizer's report in %s", a->b.log);
}

/* On fd: a write_task of id, created (the worker caches its receipt). */
static void
created(int fd, const char *id)
{
	json_t	*reply;

	cluster_send_line(fd, write_task_line(id, "Cached"));
	reply = answer(fd, "a first write_task");
	want(reply, "created");
	json_decref(reply);
}

/* On fd: effect id begun, and completed if complete. */
static void
effect(int fd, const char *id, int complete)
{
	json_t	*reply;
	char	*fence;

	cluster_send_line(fd, begin_line(id));
	reply = answer(fd, "an effect's begin");
	want(reply, "proceed");
	if (complete) {
		assert_non_null(fence = strdup(harness_str(reply, "fence")));
		cluster_send_line(fd, complete_line(id, fence));
		free(fence);
		json_decref(reply);
		reply = answer(fd, "an effect's complete");
		harness_assert_bool(reply, "ok", 1);
		assert_non_null(json_object_get(reply, "receipt"));
	}
	json_decref(reply);
}

/* On fd, while a read is held: the cached retry is answered reused. */
static void
cached_retry_answered(int fd, const char *id)
{
	json_t	*reply;

	cluster_send_line(fd, write_task_line(id, "Cached"));
	reply = answer(fd, "the cached write_task retry");
	want(reply, "reused");
	json_decref(reply);
}

/*
 * Two replies the same, byte for byte, but an effect's age_ms (the time
 * since its last change, which moves between the two).
 */
static void
assert_same_reply(const char *held, const char *later)
{
	json_t	*a, *b;
	char	*ta, *tb;

	assert_non_null(a = json_loads(held, JSON_DISABLE_EOF_CHECK, NULL));
	assert_non_null(b = json_loads(later, JSON_DISABLE_EOF_CHECK, NULL));
	json_object_del(json_object_get(a, "submission"), "age_ms");
	json_object_del(json_object_get(b, "submission"), "age_ms");
	ta = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
	tb = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_string_equal(ta, tb);
	free(ta);
	free(tb);
	json_decref(a);
	json_decref(b);
}

static void
loop_serves_while_a_get_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	char			*held_task, *held_effect, *later;
	int			 held, other, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	created(other, "cached-1");
	effect(other, "done-1", 1);
	/* A get of the task, and of the effect pipelined: the first holds. */
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, get_line("cached-1", NULL));
	cluster_send_line(held, get_line("done-1", KIND));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	/* Meanwhile, the same worker: the cached retry, a whole effect. */
	cached_retry_answered(other, "cached-1");
	effect(other, "free-1", 1);
	cluster_assert_unanswered(held);
	/* Let go: its answer, then the pipelined one's, in that order. */
	close(w);
	held_task = answer_line(held, "the held get_submission");
	held_effect = answer_line(held, "the get pipelined behind it");
	/* The right answers: the bytes of the same gets, unheld. */
	cluster_send_line(other, get_line("cached-1", NULL));
	later = answer_line(other, "the task's get, unheld");
	assert_string_equal(held_task, later);
	assert_non_null(strstr(held_task, "\"found\":true"));
	assert_non_null(strstr(held_task, "\"state\":\"committed\""));
	free(later);
	cluster_send_line(other, get_line("done-1", KIND));
	later = answer_line(other, "the effect's get, unheld");
	assert_same_reply(held_effect, later);
	assert_non_null(strstr(held_effect, "\"found\":true"));
	assert_non_null(strstr(held_effect, "\"receipt\":{"));
	free(later);
	free(held_task);
	free(held_effect);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

/* The entry of entries whose client_submission_id is id, or NULL. */
static json_t *
entry_of(json_t *entries, const char *id)
{
	json_t	*x;
	size_t	 i;

	json_array_foreach(entries, i, x) {
		if (strcmp(harness_str(x, "client_submission_id"), id) == 0)
			return x;
	}
	return NULL;
}

static void
loop_serves_while_a_diagnose_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	json_t			*reply, *entries, *x, *counts;
	int			 held, other, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	created(other, "cached-1");
	effect(other, "open-1", 0);
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, strdup("{\"op\":\"diagnose\",\"id\":7}"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	cached_retry_answered(other, "cached-1");
	/* An effect begun while the diagnose waits: read once let go. */
	effect(other, "open-2", 0);
	cluster_assert_unanswered(held);
	close(w);
	reply = answer(held, "the held diagnose");
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(harness_int(reply, "id"), 7);
	entries = json_object_get(reply, "entries");
	assert_int_equal(json_array_size(entries), 2);
	assert_non_null(x = entry_of(entries, "open-1"));
	assert_non_null(x = entry_of(entries, "open-2"));
	assert_string_equal(harness_str(x, "state"), "reserved");
	assert_string_equal(harness_str(x, "lease_owner"), "a");
	assert_int_equal(harness_int(x, "epoch"), 1);
	assert_non_null(counts = json_object_get(reply, "effect_counts"));
	assert_int_equal(harness_int(counts, "reserved"), 2);
	assert_non_null(counts = json_object_get(reply, "counts"));
	assert_int_equal(harness_int(counts, "committed"), 1);
	json_decref(reply);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

static void
loop_serves_while_stats_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	json_t			*reply, *store;
	int			 held, other, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	created(other, "cached-1");
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, strdup("{\"op\":\"stats\"}"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	cached_retry_answered(other, "cached-1");
	effect(other, "free-1", 1);
	cluster_assert_unanswered(held);
	close(w);
	reply = answer(held, "the held stats");
	harness_assert_bool(reply, "ok", 1);
	/* Read once let go: the effect committed meanwhile is counted. */
	assert_non_null(store = json_object_get(reply, "store"));
	assert_int_equal(harness_int(store, "submissions"), 2);
	assert_int_equal(harness_int(store, "committed"), 2);
	assert_int_equal(harness_int(store, "effects"), 1);
	assert_int_equal(harness_int(reply, "workers"), 1);
	json_decref(reply);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

/*
 * A diagnose's client is gone before it is let go, and the worker has
 * freed its connection (the worker's sockets, one fewer: a read held
 * before its statements opened no connection to the server, and the
 * other connection is idle, so nothing else moves them).  Let go, the
 * read gathers its rows (two unfinished effects) and replies to no one;
 * the worker serves on, the same process, and stops cleanly.
 */
static void
client_gone_while_its_read_is_held(void **state)
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
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	effect(other, "open-1", 0);
	effect(other, "open-2", 0);
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, strdup("{\"op\":\"diagnose\"}"));
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
	/*
	 * The read ran to its end, to no one: the next read (one read
	 * thread, in order) is answered only after it, with the same rows.
	 */
	cluster_send_line(other, strdup("{\"op\":\"diagnose\"}"));
	reply = answer(other, "a diagnose after the gone client's");
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(json_array_size(json_object_get(reply, "entries")),
	    2);
	json_decref(reply);
	cluster_send_line(other, get_line("open-1", KIND));
	reply = answer(other, "a get after the gone client's");
	harness_assert_bool(reply, "found", 1);
	json_decref(reply);
	close(other);
	assert_int_equal(harness_workers(&a.b, after, 2), 1);
	assert_int_equal(after[0], before[0]);
	assert_int_equal(harness_stop(&a.b), 0);
	assert_no_sanitizer_report(&a);
	cluster_held_end(&a, root, fifo);
}

/*
 * SIGTERM while a get is held on the read thread: the worker drains (an
 * idle connection of its is closed: the end of its stream says so) and
 * waits for the read; let go, it is answered and the broker exits 0.
 */
static void
sigterm_while_a_read_is_held(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	struct pollfd		 pfd;
	json_t			*reply;
	char			*line;
	int			 held, idle, w;

	(void)state;
	held_start(&a, root, fifo, sizeof fifo, env, sizeof env);
	/* Idle once its write_task is answered: the worker has it. */
	assert_true((idle = harness_raw_connect(&a.b)) >= 0);
	created(idle, "term-1");
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, get_line("term-1", NULL));
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
	reply = answer(held, "the held get after SIGTERM");
	harness_assert_bool(reply, "found", 1);
	assert_string_equal(harness_str(json_object_get(reply, "submission"),
	    "state"), "committed");
	json_decref(reply);
	close(held);
	harness_wait_dead(&a.b);
	assert_int_equal(a.b.exit_status, 0);
	assert_no_sanitizer_report(&a);
	cluster_held_end(&a, root, fifo);
}

/*
 * An effect op holds the worker's only effect thread
 * (--store-connections 1, before_effect_statement): a get_submission
 * and a diagnose on another connection are answered meanwhile, on the
 * read thread, and the effect, let go, proceeds.  With the reads on the
 * effect threads they queue behind it: the case fails there.
 */
static void
read_answered_while_an_effect_holds_its_thread(void **state)
{
	static struct node	 a;
	char			 root[256], fifo[300], env[400];
	json_t			*reply;
	int			 held, other, w;

	(void)state;
	cluster_hold_start(&server, &a, "before_effect_statement", "1", root, fifo,
	    sizeof fifo, env, sizeof env);
	assert_true((other = harness_raw_connect(&a.b)) >= 0);
	created(other, "task-1");
	assert_true((held = harness_raw_connect(&a.b)) >= 0);
	cluster_send_line(held, begin_line("held-1"));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	cluster_send_line(other, get_line("task-1", NULL));
	reply = answer(other, "a get_submission while an effect op holds "
	    "the only effect thread");
	harness_assert_bool(reply, "found", 1);
	json_decref(reply);
	cluster_send_line(other, strdup("{\"op\":\"diagnose\"}"));
	reply = answer(other, "a diagnose while an effect op holds the only "
	    "effect thread");
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(json_array_size(json_object_get(reply, "entries")),
	    0);
	json_decref(reply);
	cluster_assert_unanswered(held);
	close(w);
	reply = answer(held, "the held begin, let go");
	want(reply, "proceed");
	json_decref(reply);
	close(held);
	close(other);
	cluster_held_end(&a, root, fifo);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    loop_serves_while_a_get_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    loop_serves_while_a_diagnose_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    loop_serves_while_stats_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    client_gone_while_its_read_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    sigterm_while_a_read_is_held,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    read_answered_while_an_effect_holds_its_thread,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
