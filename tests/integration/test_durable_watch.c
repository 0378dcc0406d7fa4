/* SPDX-License-Identifier: ISC */
/*
 * test_durable_watch.c: a worker's loop that watches the durable
 * position instead of sleeping (pending.c, pending_watch) still serves
 * its other clients while it watches, answers its own request once the
 * record is durable without the journaler's wake-up, and, once its watch
 * has ended, is woken by the flush as before.  One worker, so that every
 * connection is the watching loop's; the journal's fdatasync held by the
 * fault shim (hold), so that the journaling thread stalls for as long as
 * the test likes; the watch's bound set by IDEM_CRASH_DURABLE_WATCH_US.
 * The watch is for a lone client (IDEM_SPIN_MAX_CONNECTIONS): the cases
 * with two clients raise that bound (IDEM_CRASH_SPIN_MAX_CONNECTIONS),
 * and one keeps it, to see the loop sleep instead.  The journaling
 * thread's own look for the next record after a round (journaler.c,
 * journaler_linger) is for a lone client too: its bound set by
 * IDEM_CRASH_JOURNAL_LINGER_US, it is seen to look with one client and
 * to sleep with two.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/effects_test.h"

/* A log line awaited (inotify, harness_wait_log). */
#define LOG_WAIT_MS	30000
#define LOG_SYNC_HELD	"faultshim: a sync held"

static const char *const one_worker[] = { "--workers", "1", NULL };

/* An effect begun and committed, for a retry that needs no journal. */
static void
commit_effect(struct broker *b, const char *id)
{
	json_t	*reply;
	char	*fence;

	reply = begin(b, id, REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	reply = complete(b, id, fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(fence);
}

/*
 * A begin sent on a connection of its own whose record is written and
 * then held in its fdatasync: its request parked on the loop.
 */
static int
send_held_begin(struct harness_shim *t, const char *id)
{
	json_t	*request = begin_request(id, KIND, REQUEST, 0);
	char	*line = json_dumps(request, JSON_COMPACT);
	int	 fd;

	json_decref(request);
	assert_non_null(line);
	harness_fault_rule(t->fault_file, "hold .jnl");
	fd = harness_raw_connect(&t->b);
	assert_true(fd >= 0);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	harness_wait_log(&t->b, LOG_SYNC_HELD, 1, LOG_WAIT_MS);
	return fd;
}

static void
assert_line_disposition(int fd, const char *disposition)
{
	char	*line = harness_raw_read_line(fd);
	json_t	*reply;

	assert_non_null(line);
	reply = json_loads(line, 0, NULL);
	assert_non_null(reply);
	assert_disposition(reply, disposition);
	json_decref(reply);
	free(line);
}

/* The sockets a process holds (its listening socket, its connections). */
static int
sockets_of(pid_t pid)
{
	char		 dir[64], path[PATH_MAX], target[128];
	struct dirent	*e;
	DIR		*d;
	ssize_t		 n;
	int		 count = 0;

	snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		n = readlink(path, target, sizeof target - 1);
		if (n > 0 && strncmp(target, "socket:", 7) == 0)
			count++;
	}
	closedir(d);
	return count;
}

static void
sleep_ms(int64_t ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/*
 * The state of a thread ('R' running or ready to, 'S' asleep: for a
 * worker's first thread, its loop, in epoll_wait).
 */
static char
thread_state(pid_t pid, pid_t tid)
{
	char	 path[64], text[512], *end;
	FILE	*f;
	size_t	 n;

	snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", (long)pid,
	    (long)tid);
	f = fopen(path, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	/* pid (comm) state ...: the name may hold anything, but not last. */
	end = strrchr(text, ')');
	assert_non_null(end);
	assert_true(end[1] == ' ' && end[2] != '\0');
	return end[2];
}

/* The master's journaling thread: the one named "idemd journal". */
static pid_t
journal_thread(pid_t master)
{
	char		 dir[64], path[PATH_MAX], comm[32];
	struct dirent	*e;
	DIR		*d;
	FILE		*f;
	pid_t		 found = 0;

	snprintf(dir, sizeof dir, "/proc/%ld/task", (long)master);
	assert_non_null(d = opendir(dir));
	while (found == 0 && (e = readdir(d)) != NULL) {
		snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fgets(comm, sizeof comm, f) != NULL &&
		    strcmp(comm, "idemd journal\n") == 0)
			found = (pid_t)atol(e->d_name);
		fclose(f);
	}
	closedir(d);
	if (found == 0)
		fail_msg("no thread of master %ld is named idemd journal",
		    (long)master);
	return found;
}

/*
 * A thread that spins runs or yields ('R') all the while: sampled over
 * about 200 ms, it never sleeps ('S'), as it would without its spin.
 * what names it in the failure.
 */
static void
assert_thread_spins(pid_t pid, pid_t tid, const char *what)
{
	int	i;
	char	state;

	for (i = 0; i < 200; i++) {
		if ((state = thread_state(pid, tid)) != 'R')
			fail_msg("%s is '%c', not spinning", what, state);
		sleep_ms(1);
	}
}

/* A watching loop: its worker's first thread spins. */
static void
assert_loop_watches(pid_t pid)
{
	assert_thread_spins(pid, pid, "the worker's loop");
}

/* Within 10 s the thread sleeps ('S'), else the test fails naming it. */
static void
wait_thread_sleeps(pid_t pid, pid_t tid, const char *what)
{
	int	waited;

	for (waited = 0; thread_state(pid, tid) != 'S'; waited++) {
		if (waited > 10000)
			fail_msg("%s did not sleep in 10 s with two "
			    "connections open", what);
		sleep_ms(1);
	}
}

/*
 * One worker, its watch's bound, how many connections may be open for
 * it to watch, and the journaling thread's look after a round (NULL:
 * the default, IDEM_SPIN_MAX_CONNECTIONS; IDEM_JOURNAL_LINGER_US).
 */
static void
start(struct harness_shim *t, const char *watch_us, const char *spin_max,
    const char *linger_us)
{
	static char	 entry[64], gate[64], linger[64];
	const char	*env[7] = { t->env[0], t->env[1], t->env[2], entry };
	int		 n = 4;

	harness_need_fault_injection(&t->b);
	snprintf(entry, sizeof entry, "IDEM_CRASH_DURABLE_WATCH_US=%s",
	    watch_us);
	if (spin_max != NULL) {
		snprintf(gate, sizeof gate,
		    "IDEM_CRASH_SPIN_MAX_CONNECTIONS=%s", spin_max);
		env[n++] = gate;
	}
	if (linger_us != NULL) {
		snprintf(linger, sizeof linger,
		    "IDEM_CRASH_JOURNAL_LINGER_US=%s", linger_us);
		env[n++] = linger;
	}
	env[n] = NULL;
	harness_must_start(&t->b, one_worker, env);
}

/*
 * The watch outlasts the test (10 min): the loop watches all the while
 * the journal's fdatasync is held ('R' throughout: fails if the watch
 * does not run, the loop asleep in epoll_wait), and answers another
 * client's retry of a committed effect meanwhile (fails if the watch
 * does not run the loop's ready events: the retry would wait out the
 * 10 min, the watchdog first); let go, the held begin is answered by the watch
 * itself, no wake-up written for it (fails if the watch misses the
 * durable position moving, or if the flush neither wakes a watching
 * loop nor is seen by it: the begin would wait out the 10 min too).
 */
static void
watching_loop_serves_its_other_clients(void **state)
{
	struct harness_shim	*t = *state;
	json_t			*reply;
	pid_t			 worker;
	int			 fd;

	/* The held begin's connection and the retry's: two clients. */
	start(t, "600000000", "2", NULL);
	assert_int_equal(harness_workers(&t->b, &worker, 1), 1);
	commit_effect(&t->b, "w-done");
	fd = send_held_begin(t, "w-held");
	assert_loop_watches(worker);
	/* Held: nothing durable can be answered now.  A retry needs nothing. */
	reply = begin(&t->b, "w-done", REQUEST, 0);
	assert_disposition(reply, "reused");
	json_decref(reply);
	harness_fault_rule(t->fault_file, "");
	assert_line_disposition(fd, "proceed");
	close(fd);
	harness_shim_finish(t);
}

/*
 * A watch of 1 us ends long before the held fdatasync returns: the loop
 * sleeps, and the flush must wake it (fails if the loop's watching flag
 * outlives its watch: the journaler would skip the wake-up and the begin
 * would never be answered, the watchdog failing the test).  Then every
 * request answered as usual.
 */
static void
watch_that_ends_leaves_the_wake_up_to_the_flush(void **state)
{
	struct harness_shim	*t = *state;
	json_t			*reply;
	int			 fd;

	start(t, "1", NULL, NULL);
	fd = send_held_begin(t, "w-held");
	harness_fault_rule(t->fault_file, "");
	assert_line_disposition(fd, "proceed");
	close(fd);
	commit_effect(&t->b, "w-after");
	reply = begin(&t->b, "w-after", REQUEST, 0);
	assert_disposition(reply, "reused");
	json_decref(reply);
	harness_shim_finish(t);
}

/*
 * SIGTERM while the loop watches ('R' throughout: fails if it does not)
 * for a request whose client has gone:
 * when the record is durable the watch resumes it, the worker's last
 * request, and the loop must end there (worker_maybe_exit's loopbreak,
 * outside the loop: fails, the broker deaf to the SIGTERM, if the
 * next event_base_loop runs and clears the flag).
 */
static void
stop_ended_by_the_watch_ends_the_loop(void **state)
{
	struct harness_shim	*t = *state;
	pid_t			 worker;
	int			 fd, before, waited;

	start(t, "600000000", NULL, NULL);
	assert_int_equal(harness_workers(&t->b, &worker, 1), 1);
	fd = send_held_begin(t, "w-held");
	assert_loop_watches(worker);
	before = sockets_of(worker);
	close(fd);
	/* The loop has seen its peer go: the request runs on, unanswered. */
	for (waited = 0; sockets_of(worker) == before; waited++) {
		if (waited > 10000)
			fail_msg("worker %ld kept its connection 10 s after "
			    "the peer closed it", (long)worker);
		sleep_ms(1);
	}
	kill(t->b.pid, SIGTERM);
	harness_wait_log(&t->b, "signal 15: draining", 1, LOG_WAIT_MS);
	harness_fault_rule(t->fault_file, "");
	assert_int_equal(harness_stop(&t->b), 0);
	harness_shim_finish(t);
}

/*
 * The gate: with two connections open (an idle one, the held begin's)
 * and the default bound, the loop does not watch, though its watch
 * could last 10 min: it sleeps in epoll_wait ('S') while the journal's
 * fdatasync is held (fails without the gate: a watching loop runs or
 * yields, 'R', all the while, and the wait below gives up after 10 s),
 * and the flush's wake-up answers the begin.
 */
static void
two_clients_do_not_watch(void **state)
{
	struct harness_shim	*t = *state;
	pid_t			 worker;
	int			 idle, fd;

	start(t, "600000000", NULL, NULL);
	assert_int_equal(harness_workers(&t->b, &worker, 1), 1);
	/* Accepted first (the listen queue is in order): open before. */
	idle = harness_raw_connect(&t->b);
	assert_true(idle >= 0);
	fd = send_held_begin(t, "w-held");
	wait_thread_sleeps(worker, worker, "the worker's loop");
	harness_fault_rule(t->fault_file, "");
	assert_line_disposition(fd, "proceed");
	close(fd);
	close(idle);
	harness_shim_finish(t);
}

/*
 * The journaling thread's look for the next record, 10 min here: after
 * a lone client's begin it runs or yields ('R') over about 200 ms
 * instead of sleeping on its eventfd (fails with journaler_linger
 * returning at once, or with its bound not taken), and the client's
 * next begin is found and made durable meanwhile (fails if the look
 * misses an appended record: the begin would wait out the 10 min).
 */
static void
lone_client_journal_looks_for_the_next_record(void **state)
{
	struct harness_shim	*t = *state;
	json_t			*reply;
	pid_t			 journal;

	start(t, "0", NULL, "600000000");
	journal = journal_thread(t->b.pid);
	reply = begin(&t->b, "j-1", REQUEST, 0);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	assert_thread_spins(t->b.pid, journal, "the journaling thread");
	reply = begin(&t->b, "j-2", REQUEST, 0);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	harness_shim_finish(t);
}

/*
 * The gate on the journaling thread's side: with two connections open
 * (an idle one, the begin's) and the default bound, the thread does not
 * look for the next record, though its look could last 10 min: it
 * sleeps on its eventfd ('S') after the begin's round (fails without
 * the gate, or with IDEM_CRASH_SPIN_MAX_CONNECTIONS=2: the thread stays
 * 'R' and the wait below gives up after 10 s).
 */
static void
two_clients_journal_sleeps(void **state)
{
	struct harness_shim	*t = *state;
	json_t			*request;
	pid_t			 journal;
	char			*line;
	int			 idle, fd;

	start(t, "0", NULL, "600000000");
	journal = journal_thread(t->b.pid);
	idle = harness_raw_connect(&t->b);
	assert_true(idle >= 0);
	/*
	 * The begin's connection stays open until the thread is seen
	 * asleep: closed as soon as answered, it could be gone before the
	 * thread looks at the count after the round, which would then see a
	 * lone client and look for 10 min (2 runs in 6 failed so, main's
	 * idemd as well as this one).
	 */
	request = begin_request("j-1", KIND, REQUEST, 0);
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	assert_non_null(line);
	fd = harness_raw_connect(&t->b);
	assert_true(fd >= 0);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	assert_line_disposition(fd, "proceed");
	wait_thread_sleeps(t->b.pid, journal, "the journaling thread");
	close(fd);
	close(idle);
	harness_shim_finish(t);
}

static int
setup(void **state)
{
	return harness_shim_setup(state, HARNESS_TEST_SECONDS);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name)	cmocka_unit_test_setup_teardown(name, setup, \
	harness_shim_teardown)
		T(watching_loop_serves_its_other_clients),
		T(watch_that_ends_leaves_the_wake_up_to_the_flush),
		T(stop_ended_by_the_watch_ends_the_loop),
		T(two_clients_do_not_watch),
		T(lone_client_journal_looks_for_the_next_record),
		T(two_clients_journal_sleeps),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
