/* SPDX-License-Identifier: ISC */
/*
 * test_crash.c: crashes in each window of a write_task, and what a retry
 * gets afterwards (SPEC.md, "States and recovery" and "Fault
 * injection").  The broker is killed by its own fault injection
 * (IDEM_CRASH_AT: all of it; IDEM_CRASH_WORKER_AT: one worker) or by the
 * test; the verdict is the retry's reply and the TASK files on disk.
 * Every wait is on an event: a reply, the end of a stream, the broker's
 * exit, its lock; never a sleep.
 */
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"

/*
 * How long the master may take to replace a worker: a guard on a clock
 * (CLOCK_MONOTONIC) against a broker that never does, not a pause.
 */
#define TEST_RESPAWN_TIMEOUT_MS	30000
/*
 * IDEM_SPAWN_DELAY_MS of the paused-master test: the master sleeps this
 * long after each fork (start-up too), and the reply must come sooner.
 */
#define TEST_SPAWN_DELAY_MS	8000
/* Tries of start_right_after_the_master_died. */
#define TEST_QUICK_RESTARTS	10
#define TEST_MAX_WORKERS	64
#define TEST_CONCURRENT_RETRIES	8
/* Start-and-stop cycles that look for a lost SIGTERM. */
#define TEST_STOP_TRIES		40
#define TEST_ID			"crash/run-1"
#define TEST_SUBJECT		"Survive the crash"

/*
 * One crash point and what SPEC.md says a retry finds after it: how many
 * TASK files the crash leaves, and the retry's outcome.
 */
struct crash_case {
	const char	*point;
	int		 files_after_crash;
	const char	*disposition;
	int		 action_taken;
	int		 recovered;
};

static const struct crash_case after_reserve_durable = {
	"after_reserve_durable", 0, "created", 1, 1
};
static const struct crash_case after_task_file_written = {
	"after_task_file_written", 0, "created", 1, 1
};
static const struct crash_case after_task_file_linked = {
	"after_task_file_linked", 1, "reused", 0, 1
};
static const struct crash_case after_task_created_durable = {
	"after_task_created_durable", 1, "reused", 0, 1
};
static const struct crash_case after_commit_durable = {
	"after_commit_durable", 1, "reused", 0, 0
};

/* ---- Fixtures and helpers ------------------------------------------------ */

/* The call the crash interrupts: its connection ends without a reply. */
static void
submit_and_lose(struct broker *b, const char *id, const char *subject)
{
	struct idem_conn	*c;
	json_t			*reply;

	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, harness_write_task(id, subject));
	if (reply != NULL) {
		fprintf(stderr, "unexpected reply: %s\n",
		    json_dumps(reply, JSON_COMPACT));
		fail_msg("the crash point did not drop the connection");
	}
	idem_close(c);
}

static void
assert_conflict(json_t *reply, const char *reason)
{
	json_t	*error = json_object_get(reply, "error");

	harness_assert_bool(reply, "ok", 0);
	harness_assert_bool(reply, "action_taken", 0);
	assert_string_equal(harness_str(reply, "disposition"), "conflict");
	assert_string_equal(harness_str(error, "code"), "conflict");
	assert_string_equal(harness_str(error, "reason"), reason);
	harness_assert_bool(error, "retryable", 0);
	assert_null(json_object_get(reply, "receipt"));
}

/* The id the first task of today gets on a fresh root. */
static void
first_task_id(char *out, size_t size, int number)
{
	char	today[9];

	harness_today(today);
	snprintf(out, size, "TASK-%s-%03d-PM-to-DEV", today, number);
}

/* Temporary files the broker left in the inbox (".TASK-*.md.tmp.*"). */
static int
count_temporaries(const struct broker *b)
{
	char		 path[400];
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	snprintf(path, sizeof path, "%s/_lifecycle/inbox", b->root);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, ".TASK-", 6) == 0 &&
		    strstr(e->d_name, ".md.tmp.") != NULL)
			n++;
	}
	closedir(d);
	return n;
}

static void
assert_file_digest(const struct broker *b, const char *relpath,
    const char *expected)
{
	unsigned char	 digest[crypto_hash_sha256_BYTES];
	char		 hex[crypto_hash_sha256_BYTES * 2 + 1], *data;

	data = harness_read(b, relpath);
	assert_non_null(data);
	crypto_hash_sha256(digest, (const unsigned char *)data, strlen(data));
	sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
	free(data);
	assert_string_equal(hex, expected);
}

/* The file's front matter agrees with the receipt (adopted or written). */
static void
assert_front_matter(const struct broker *b, const char *relpath,
    json_t *reply)
{
	char	*data, *end, line[256];

	data = harness_read(b, relpath);
	assert_non_null(data);
	end = strstr(data, "\n---\n");
	assert_non_null(end);
	end[1] = '\0';
	snprintf(line, sizeof line, "\ntask_id: \"%s\"\n",
	    harness_receipt_str(reply, "task_id"));
	assert_non_null(strstr(data, line));
	snprintf(line, sizeof line, "\ncreated_at: \"%s\"\n",
	    harness_receipt_str(reply, "created_at"));
	assert_non_null(strstr(data, line));
	snprintf(line, sizeof line, "\nclient_submission_id: \"%s\"\n",
	    harness_receipt_str(reply, "client_submission_id"));
	assert_non_null(strstr(data, line));
	snprintf(line, sizeof line, "\nrequest_digest: \"%s\"\n",
	    harness_receipt_str(reply, "request_digest"));
	assert_non_null(strstr(data, line));
	free(data);
}

static void
move_file(const struct broker *b, const char *from, const char *to)
{
	char	src[1024], dst[1024];

	/* harness_write makes the directories; rename replaces its file. */
	assert_int_equal(harness_write(b, to, ""), 0);
	snprintf(src, sizeof src, "%s/%s", b->root, from);
	snprintf(dst, sizeof dst, "%s/%s", b->root, to);
	assert_int_equal(rename(src, dst), 0);
}

/* Whether the broker's master is still running (not exited, not reaped). */
static int
broker_running(struct broker *b)
{
	int	status;

	return b->pid != 0 && waitpid(b->pid, &status, WNOHANG) == 0;
}

/*
 * The retry after a crash: its outcome, one TASK file named for the
 * task_id it returns (number 001), and a second retry that answers
 * reused with the same receipt.  Returns the first retry's reply.
 */
static json_t *
retry_and_check(struct broker *b, const struct crash_case *cc)
{
	json_t	*retry, *again;
	char	 want[96], path[256], *r1, *r2;

	retry = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(retry, cc->disposition, cc->action_taken, 1,
	    cc->recovered);
	first_task_id(want, sizeof want, 1);
	harness_skip_if_date_moved(want + 5, harness_receipt_str(retry,
	    "task_id"));
	assert_string_equal(harness_receipt_str(retry, "task_id"), want);
	snprintf(path, sizeof path, "_lifecycle/inbox/%s.md", want);
	assert_string_equal(harness_receipt_str(retry, "task_path"), path);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_true(harness_exists(b, path));
	assert_file_digest(b, path, harness_receipt_str(retry, "file_digest"));
	assert_front_matter(b, path, retry);

	again = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(again, "reused", 0, 1, 0);
	r1 = harness_receipt_text(retry);
	r2 = harness_receipt_text(again);
	assert_non_null(r1);
	assert_non_null(r2);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);
	free(r1);
	free(r2);
	json_decref(again);
	return retry;
}

/* ---- The whole broker dies ----------------------------------------------- */

static void
broker_crash(struct broker *b, const struct crash_case *cc)
{
	json_t	*retry;

	harness_start_crashing(b, "IDEM_CRASH_AT", cc->point);
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	assert_int_equal(b->exit_status, 128 + SIGKILL);
	assert_int_equal(harness_count_tasks(b), cc->files_after_crash);
	/* Written, not linked: the bytes are in a temporary file. */
	if (cc == &after_task_file_written)
		assert_int_equal(count_temporaries(b), 1);

	harness_must_start(b, NULL, NULL);
	/*
	 * The tear cut the journal at its task_created record's end, where
	 * the file says it ends (its padding and round prefix counted), not
	 * inside the next record: start-up finds no torn tail.
	 */
	if (cc == &after_task_created_durable)
		assert_int_equal(harness_log_count(b, "torn tail"), 0);
	retry = retry_and_check(b, cc);
	/* Start-up swept what the crash left (idemd(8)). */
	assert_int_equal(count_temporaries(b), 0);
	json_decref(retry);
	harness_finish(b);
}

static void
broker_crash_after_reserve_durable(void **state)
{
	broker_crash(*state, &after_reserve_durable);
}

static void
broker_crash_after_task_file_written(void **state)
{
	broker_crash(*state, &after_task_file_written);
}

static void
broker_crash_after_task_file_linked(void **state)
{
	broker_crash(*state, &after_task_file_linked);
}

static void
broker_crash_after_task_created_durable(void **state)
{
	broker_crash(*state, &after_task_created_durable);
}

static void
broker_crash_after_commit_durable(void **state)
{
	broker_crash(*state, &after_commit_durable);
}

/* ---- The early link ------------------------------------------------------ */

/*
 * The file thread that wrote the temporary finds the reservation durable
 * and links the file itself (broker/fileio.c): production's path whenever
 * the journal's flush ends before the temporary's fsync.
 * IDEM_CRASH_LINK_EARLY holds that thread until the loop has seen the
 * reservation durable, so the test is sure to take that path; the debug
 * log says it did.
 */
static void
start_early_link(struct broker *b, const char *point)
{
	static char		 crash[96];
	const char *const	 env[] = { "IDEM_CRASH_LINK_EARLY=1",
	    "IDEM_DEBUG=1", point != NULL ? crash : NULL, NULL };

	snprintf(crash, sizeof crash, "IDEM_CRASH_AT=%s",
	    point != NULL ? point : "");
	assert_int_equal(harness_start(b, NULL, env), 0);
}

static void
early_link_creates(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;

	start_early_link(b, NULL);
	reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	assert_true(harness_log_count(b,
	    "linked by the file thread that wrote it") > 0);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(count_temporaries(b), 0);
	harness_finish(b);
}

static void
early_link_crash(struct broker *b, const struct crash_case *cc)
{
	json_t	*retry;
	char	 fired[128];

	start_early_link(b, cc->point);
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	assert_int_equal(b->exit_status, 128 + SIGKILL);
	assert_true(harness_log_count(b,
	    "linked by the file thread that wrote it") > 0);
	snprintf(fired, sizeof fired, "crash point %s reached in a file "
	    "thread", cc->point);
	assert_true(harness_log_count(b, fired) > 0);
	assert_int_equal(harness_count_tasks(b), cc->files_after_crash);
	if (cc == &after_task_file_written)
		assert_int_equal(count_temporaries(b), 1);

	harness_must_start(b, NULL, NULL);
	retry = retry_and_check(b, cc);
	assert_int_equal(count_temporaries(b), 0);
	json_decref(retry);
	harness_finish(b);
}

static void
early_link_crash_after_task_file_written(void **state)
{
	early_link_crash(*state, &after_task_file_written);
}

static void
early_link_crash_after_task_file_linked(void **state)
{
	early_link_crash(*state, &after_task_file_linked);
}

/* ---- One worker dies; the broker keeps serving --------------------------- */

static void
worker_crash(struct broker *b, const struct crash_case *cc)
{
	json_t	*retry, *fresh;
	char	 want[96];

	harness_start_crashing(b, "IDEM_CRASH_WORKER_AT", cc->point);
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	assert_true(broker_running(b));
	assert_int_equal(harness_count_tasks(b), cc->files_after_crash);

	/* No restart: the retry's worker takes over the dead one's claim. */
	retry = retry_and_check(b, cc);
	json_decref(retry);
	assert_true(broker_running(b));

	fresh = harness_submit(b, "crash/fresh", "After the worker died");
	harness_assert_outcome(fresh, "created", 1, 1, 0);
	first_task_id(want, sizeof want, 2);
	assert_string_equal(harness_receipt_str(fresh, "task_id"), want);
	json_decref(fresh);
	assert_int_equal(harness_count_tasks(b), 2);
	harness_finish(b);
}

static void
worker_crash_after_reserve_durable(void **state)
{
	worker_crash(*state, &after_reserve_durable);
}

static void
worker_crash_after_task_file_written(void **state)
{
	worker_crash(*state, &after_task_file_written);
}

static void
worker_crash_after_task_file_linked(void **state)
{
	worker_crash(*state, &after_task_file_linked);
}

static void
worker_crash_after_commit_durable(void **state)
{
	worker_crash(*state, &after_commit_durable);
}

static int
has_pid(const pid_t *pids, int n, pid_t pid)
{
	int	i;

	for (i = 0; i < n; i++) {
		if (pids[i] == pid)
			return 1;
	}
	return 0;
}

static int	worker_is_exec(pid_t, pid_t);

/*
 * Wait until the master has replaced worker gone: n workers, none of
 * them gone (with exec, every one exec'd as idemd --worker).  No event
 * says when a worker exists, so between two looks at /proc the wait is
 * a round trip through a live worker on c, an answer awaited (with c
 * NULL, the looks follow each other: for a test that acts right after
 * the fork).  0, or -1 past TEST_RESPAWN_TIMEOUT_MS on the clock.
 */
static int
await_replacement(struct broker *b, struct idem_conn *c, int n, pid_t gone,
    int exec)
{
	pid_t	 now[TEST_MAX_WORKERS];
	int64_t	 deadline = harness_now_ms() + TEST_RESPAWN_TIMEOUT_MS;
	json_t	*reply;
	int	 m, j, done;

	for (;;) {
		m = harness_workers(b, now, TEST_MAX_WORKERS);
		done = m == n && !has_pid(now, m, gone);
		for (j = 0; j < m && done && exec; j++)
			done = worker_is_exec(b->pid, now[j]);
		if (done)
			return 0;
		if (harness_now_ms() > deadline)
			return -1;
		if (c == NULL)
			continue;
		reply = harness_call(c, json_pack("{s:s}", "op", "hello"));
		assert_non_null(reply);
		harness_assert_bool(reply, "ok", 1);
		json_decref(reply);
	}
}

/*
 * A worker killed from outside while the broker is idle: the others keep
 * serving, and the master brings the count back.  No event says when the
 * replacement exists, so the test keeps making calls (each one a round
 * trip through a live worker) until it does, up to a clock deadline.
 */
static void
idle_worker_killed(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	pid_t			 before[TEST_MAX_WORKERS];
	json_t			*reply;
	int			 n;

	harness_must_start(b, NULL, NULL);
	n = harness_workers(b, before, TEST_MAX_WORKERS);
	assert_true(n >= 1);
	assert_int_equal(kill(before[0], SIGKILL), 0);

	reply = harness_submit(b, "idle-kill/1", "After a worker was killed");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);

	c = harness_connect(b);
	assert_non_null(c);
	if (await_replacement(b, c, n, before[0], 0) != 0)
		fail_msg("no replacement of worker %ld within %d ms",
		    (long)before[0], TEST_RESPAWN_TIMEOUT_MS);
	idem_close(c);

	reply = harness_submit(b, "idle-kill/2", "With the new worker");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 2);
	harness_finish(b);
}

/*
 * Is worker idemd exec'd anew by master with --worker (master.c)?  A
 * child only forked from the master, which has threads once serving,
 * could inherit a lock another thread held at the fork.
 */
static int
worker_is_exec(pid_t master, pid_t worker)
{
	char		 path[64], cmdline[4096], prefix[32];
	struct stat	 master_exe, worker_exe;
	const char	*arg;
	FILE		*f;
	size_t		 n;

	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)worker);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	n = fread(cmdline, 1, sizeof cmdline - 1, f);
	fclose(f);
	cmdline[n] = '\0';
	arg = cmdline + strlen(cmdline) + 1;	/* argv[1] */
	if (arg >= cmdline + n || strcmp(arg, "--worker") != 0)
		return 0;
	arg += strlen(arg) + 1;			/* argv[2]: handles */
	snprintf(prefix, sizeof prefix, "%ld,", (long)master);
	if (arg >= cmdline + n || strncmp(arg, prefix, strlen(prefix)) != 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%ld/exe", (long)master);
	assert_int_equal(stat(path, &master_exe), 0);
	snprintf(path, sizeof path, "/proc/%ld/exe", (long)worker);
	assert_int_equal(stat(path, &worker_exe), 0);
	return master_exe.st_dev == worker_exe.st_dev &&
	    master_exe.st_ino == worker_exe.st_ino;
}

/*
 * Every worker, the first ones and a replacement, is the broker's own
 * binary exec'd with --worker.  A new worker shows in /proc at its fork,
 * before its exec: the test makes calls (round trips through the live
 * workers) until the command line changes, up to a clock deadline.
 */
static void
workers_are_exec_d(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	pid_t			 before[TEST_MAX_WORKERS];
	int			 n;

	harness_must_start(b, NULL, NULL);
	n = harness_workers(b, before, TEST_MAX_WORKERS);
	assert_true(n >= 1);
	assert_int_equal(kill(before[0], SIGKILL), 0);
	/* Connected after the kill: a live worker accepts it. */
	c = harness_connect(b);
	assert_non_null(c);
	if (await_replacement(b, c, n, before[0], 1) != 0)
		fail_msg("after %d ms, not every worker is an exec'd idemd "
		    "with the replacement of pid %ld", TEST_RESPAWN_TIMEOUT_MS,
		    (long)before[0]);
	idem_close(c);
	harness_finish(b);
}

/* Whether process pid has the file st open (by /proc/PID/fd). */
static int
holds_open(pid_t pid, const struct stat *st)
{
	struct stat	 fd_st;
	struct dirent	*e;
	char		 path[PATH_MAX];
	DIR		*dir;
	int		 found = 0;

	snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
	if ((dir = opendir(path)) == NULL)
		return 0;
	while (!found && (e = readdir(dir)) != NULL) {
		snprintf(path, sizeof path, "/proc/%ld/fd/%s", (long)pid,
		    e->d_name);
		found = e->d_name[0] != '.' && stat(path, &fd_st) == 0 &&
		    fd_st.st_dev == st->st_dev && fd_st.st_ino == st->st_ino;
	}
	closedir(dir);
	return found;
}

/*
 * And a broker started the moment its predecessor's master was killed,
 * without waiting for that one's workers, waits for them itself (they
 * die with the master) instead of refusing the root "in use": a
 * supervisor restarting a crashed broker at once gets a broker.
 */
static void
start_right_after_the_master_died(void **state)
{
	struct broker	*b = *state;
	int		 i;

	for (i = 0; i < TEST_QUICK_RESTARTS; i++) {
		harness_must_start(b, NULL, NULL);
		harness_kill_master_only(b);	/* its workers live on */
		if (harness_start(b, NULL, NULL) != 0)
			fail_msg("try %d: idemd did not start right after its "
			    "predecessor's master was killed (see the log)", i);
		assert_int_equal(harness_stop(b), 0);
	}
	harness_finish(b);
}

/* Whether pid, exec'd, named itself "idemd worker N" within the deadline. */
static int
await_worker_named(pid_t pid)
{
	const struct timespec	 pause = { 0, 5 * 1000000 };
	int64_t			 deadline;
	char			 path[64], comm[32];
	FILE			*f;
	int			 named;

	snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
	deadline = harness_now_ms() + TEST_RESPAWN_TIMEOUT_MS;
	do {
		named = 0;
		if ((f = fopen(path, "r")) != NULL) {
			named = fgets(comm, sizeof comm, f) != NULL &&
			    strncmp(comm, "idemd worker", 12) == 0;
			fclose(f);
		}
		if (named)
			return 1;
		nanosleep(&pause, NULL);
	} while (harness_now_ms() < deadline);
	return 0;
}

/*
 * Every worker holds the root's lock open until it exits (idemd(8),
 * SIGKILL): a broker started right after its master died must wait
 * for a worker still on its way out, not find the root free while that
 * worker listens on the socket (the model saw the next start refused:
 * "socket ... in use", the old worker accepting and not answering).
 */
static void
workers_hold_the_lock(void **state)
{
	struct broker	*b = *state;
	struct stat	 lock;
	pid_t		 workers[TEST_MAX_WORKERS];
	char		 path[PATH_MAX];
	int		 i, n;

	harness_must_start(b, NULL, NULL);
	snprintf(path, sizeof path, "%s/.idem/idemd.lock", b->root);
	assert_int_equal(stat(path, &lock), 0);
	n = harness_workers(b, workers, TEST_MAX_WORKERS);
	assert_true(n >= 1);
	for (i = 0; i < n; i++) {
		/* After its exec (its name set), not the fork's copy. */
		if (!await_worker_named(workers[i]))
			fail_msg("worker pid %ld has not named itself",
			    (long)workers[i]);
		if (!holds_open(workers[i], &lock))
			fail_msg("worker pid %ld does not hold %s open",
			    (long)workers[i], path);
	}
	harness_finish(b);
}

/*
 * Where /proc shows it (the master is our child: no ptrace restriction),
 * the master's main thread is still in its pause: in nanosleep.
 */
static void
master_still_asleep(pid_t master)
{
	char	 path[64];
	FILE	*f;
	long	 call;

	snprintf(path, sizeof path, "/proc/%ld/task/%ld/syscall",
	    (long)master, (long)master);
	if ((f = fopen(path, "r")) == NULL)
		return;
	if (fscanf(f, "%ld", &call) != 1)
		call = -1;
	fclose(f);
	if (call == -1)
		return;
#ifdef SYS_nanosleep
	if (call == SYS_nanosleep)
		return;
#endif
	if (call != SYS_clock_nanosleep)
		fail_msg("the master is in system call %ld, not in its pause",
		    call);
}

/*
 * A replacement worker can be serving, and parked until a journal flush,
 * before the master runs again after forking it: a loaded machine may
 * deschedule the master right there, and IDEM_SPAWN_DELAY_MS holds it
 * there on purpose.  The journaling thread must still wake the new
 * worker, so the creation completes while the master sleeps; a master
 * that published the worker's wake-up socket only after the fork left
 * it parked for ever.  And stats counts it: a worker registers itself
 * before it serves, not only when the master runs again.
 */
static void
replacement_served_while_master_paused(void **state)
{
	struct broker		*b = *state;
	const char *const	 args[] = { "--workers", "1", NULL };
	static char		 delay[64];
	const char *const	 env[] = { delay, NULL };
	pid_t			 workers[TEST_MAX_WORKERS];
	json_t			*reply;
	int64_t			 killed, answered;

	snprintf(delay, sizeof delay, "IDEM_SPAWN_DELAY_MS=%d",
	    TEST_SPAWN_DELAY_MS);
	assert_int_equal(harness_start(b, args, env), 0);
	assert_int_equal(harness_workers(b, workers, TEST_MAX_WORKERS), 1);
	/*
	 * The master forks the replacement after it reaps the killed
	 * worker, so its pause ends TEST_SPAWN_DELAY_MS after this at the
	 * earliest: a reply before then came while it slept.
	 */
	killed = harness_now_ms();
	assert_int_equal(kill(workers[0], SIGKILL), 0);
	/* Waits in the backlog for the replacement: no other worker. */
	reply = harness_submit(b, "paused/1", "While the master sleeps");
	answered = harness_now_ms();
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	if (answered - killed >= TEST_SPAWN_DELAY_MS)
		fail_msg("the reply came %lld ms after the kill, not while the "
		    "master slept (%d ms after the fork)",
		    (long long)(answered - killed), TEST_SPAWN_DELAY_MS);
	/*
	 * The worker that answered is counted although the master has
	 * not run since the fork: it registers itself (a stats that said
	 * 0 here made the model see "workers: 1" on a loaded machine).
	 */
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(harness_int(reply, "workers"), 1);
	json_decref(reply);
	master_still_asleep(b->pid);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* --worker is idemd's own: given by hand, it is refused and does nothing. */
static void
worker_option_refused(void **state)
{
	struct broker	*b = *state;
	const char	*idemd = getenv("IDEMD");
	char		 root[300];
	int		 status;
	pid_t		 pid;

	assert_non_null(idemd);
	snprintf(root, sizeof root, "%s/not-made", b->root);
	pid = fork();
	assert_true(pid != -1);
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		execl(idemd, idemd, "--root", root, "--worker", "1,2,3", NULL);
		_exit(99);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_int_equal(access(root, F_OK), -1);
	assert_int_equal(errno, ENOENT);
	harness_finish(b);
}

/* ---- Stopping while a worker starts -------------------------------------- */

/*
 * SIGTERM soon after a worker was forked (right after start-up, right
 * after a replacement) must still stop the broker.  The window is a few
 * milliseconds wide and nothing outside the broker can hold it open, so
 * this tries it many times; a broker that loses the signal fails at the
 * first hang (harness_stop gives up after 10 s).
 */
static void
sigterm_soon_after_start_stops(void **state)
{
	struct broker	*b = *state;
	int		 i;

	for (i = 0; i < TEST_STOP_TRIES; i++) {
		harness_must_start(b, NULL, NULL);
		if (harness_stop(b) != 0)
			fail_msg("try %d: SIGTERM right after start-up did not "
			    "stop idemd cleanly (exit %d)", i, b->exit_status);
	}
	harness_finish(b);
}

static void
sigterm_soon_after_respawn_stops(void **state)
{
	struct broker	*b = *state;
	pid_t		 before[TEST_MAX_WORKERS];
	int		 i, n;

	for (i = 0; i < TEST_STOP_TRIES / 2; i++) {
		harness_must_start(b, NULL, NULL);
		n = harness_workers(b, before, TEST_MAX_WORKERS);
		assert_true(n >= 1);
		assert_int_equal(kill(before[0], SIGKILL), 0);
		/* Watch /proc for the replacement; then stop at once. */
		if (await_replacement(b, NULL, n, before[0], 0) != 0)
			fail_msg("try %d: no replacement of worker %ld within "
			    "%d ms", i, (long)before[0],
			    TEST_RESPAWN_TIMEOUT_MS);
		if (harness_stop(b) != 0)
			fail_msg("try %d: SIGTERM right after a worker was "
			    "replaced did not stop idemd cleanly (exit %d)", i,
			    b->exit_status);
	}
	harness_finish(b);
}

/* ---- Recovery facts that contradict the retry ---------------------------- */

/* The reservation is durable; a retry with other content conflicts. */
static void
conflict_after_crash(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *existing;
	char		 want[96];

	harness_start_crashing(b, "IDEM_CRASH_AT", "after_reserve_durable");
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	harness_must_start(b, NULL, NULL);

	reply = harness_submit(b, TEST_ID, "Other content");
	assert_conflict(reply, "digest_mismatch");
	existing = json_object_get(reply, "existing");
	assert_non_null(existing);
	assert_string_equal(harness_str(existing, "client_submission_id"),
	    TEST_ID);
	assert_string_equal(harness_str(existing, "state"), "reserved");
	first_task_id(want, sizeof want, 1);
	assert_string_equal(harness_str(existing, "task_id"), want);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 0);

	/* The conflict changed nothing: the true retry still completes. */
	reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(reply, "created", 1, 1, 1);
	assert_string_equal(harness_receipt_str(reply, "task_id"), want);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/* Another writer put a file at the reserved path while the broker was down. */
static void
target_mismatch_after_crash(void **state)
{
	struct broker	*b = *state;
	static const char foreign[] = "---\nprotocol: \"fcop\"\nversion: 1\n"
	    "type: \"TASK\"\nsender: \"OPS\"\nrecipient: \"DEV\"\n---\n"
	    "written by another FCoP tool\n";
	json_t		*reply;
	char		 id[96], rel[256], *data;
	int		 i;

	harness_start_crashing(b, "IDEM_CRASH_AT", "after_reserve_durable");
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	assert_int_equal(harness_count_tasks(b), 0);
	first_task_id(id, sizeof id, 1);
	snprintf(rel, sizeof rel, "_lifecycle/inbox/%s.md", id);
	assert_int_equal(harness_write(b, rel, foreign), 0);
	harness_must_start(b, NULL, NULL);

	for (i = 0; i < 2; i++) {
		reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
		assert_conflict(reply, "target_mismatch");
		assert_string_equal(harness_str(json_object_get(reply,
		    "existing"), "task_id"), id);
		json_decref(reply);
		data = harness_read(b, rel);
		assert_non_null(data);
		assert_string_equal(data, foreign);
		free(data);
		assert_int_equal(harness_count_tasks(b), 1);
	}
	harness_finish(b);
}

/* The task was created, then its file deleted before the retry. */
static void
task_missing_after_crash(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		 id[96], path[1024];
	int		 i;

	harness_start_crashing(b, "IDEM_CRASH_AT",
	    "after_task_created_durable");
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	assert_int_equal(harness_count_tasks(b), 1);
	first_task_id(id, sizeof id, 1);
	snprintf(path, sizeof path, "%s/_lifecycle/inbox/%s.md", b->root, id);
	assert_int_equal(unlink(path), 0);
	harness_must_start(b, NULL, NULL);

	for (i = 0; i < 2; i++) {
		reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
		assert_conflict(reply, "task_missing");
		assert_string_equal(harness_str(json_object_get(reply,
		    "existing"), "task_id"), id);
		json_decref(reply);
		assert_int_equal(harness_count_tasks(b), 0);
	}
	harness_finish(b);
}

/* ---- Moved while the broker was down ------------------------------------- */

/*
 * An FCoP tool moved the file of an interrupted creation: "the task
 * exists" anywhere under _lifecycle/ or history/, so the retry adopts
 * (reserved) or commits (task_created) it and writes nothing new.
 */
static void
moved_after_crash(struct broker *b, const struct crash_case *cc,
    int to_history)
{
	json_t	*reply;
	char	 id[96], from[256], to[256];

	harness_start_crashing(b, "IDEM_CRASH_AT", cc->point);
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	first_task_id(id, sizeof id, 1);
	snprintf(from, sizeof from, "_lifecycle/inbox/%s.md", id);
	if (to_history)
		snprintf(to, sizeof to, "history/2026-12-02/%s/%s.md", id, id);
	else
		snprintf(to, sizeof to, "_lifecycle/done/%s.md", id);
	assert_true(harness_exists(b, from));
	move_file(b, from, to);
	harness_must_start(b, NULL, NULL);

	reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(reply, "reused", 0, 1, 1);
	assert_string_equal(harness_receipt_str(reply, "task_id"), id);
	assert_file_digest(b, to, harness_receipt_str(reply, "file_digest"));
	assert_front_matter(b, to, reply);
	json_decref(reply);
	assert_false(harness_exists(b, from));
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

static void
linked_then_moved_to_done(void **state)
{
	moved_after_crash(*state, &after_task_file_linked, 0);
}

static void
linked_then_moved_to_history(void **state)
{
	moved_after_crash(*state, &after_task_file_linked, 1);
}

static void
created_then_moved_to_done(void **state)
{
	moved_after_crash(*state, &after_task_created_durable,
	    0);
}

static void
created_then_moved_to_history(void **state)
{
	moved_after_crash(*state, &after_task_created_durable,
	    1);
}

/* ---- Concurrent retries after a crash ------------------------------------ */

struct racer {
	struct idem_conn	*conn;
	pthread_barrier_t	*barrier;
	json_t			*reply;
};

static void *
racer_run(void *arg)
{
	struct racer	*r = arg;

	/* Connected already: the barrier releases only the requests. */
	pthread_barrier_wait(r->barrier);
	r->reply = harness_call(r->conn, harness_write_task(TEST_ID,
	    TEST_SUBJECT));
	return NULL;
}

/*
 * Many clients retry the interrupted submission at once: exactly one of
 * them finishes the recovery (its disposition by the crash point, with
 * "recovered"), all the others get reused, and all hold one receipt.
 */
static void
concurrent_retries_after_crash(struct broker *b, const struct crash_case *cc)
{
	struct racer		 r[TEST_CONCURRENT_RETRIES];
	pthread_t		 threads[TEST_CONCURRENT_RETRIES];
	pthread_barrier_t	 barrier;
	char			*first = NULL, *text;
	int			 i, recovered = 0;

	harness_start_crashing(b, "IDEM_CRASH_AT", cc->point);
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	harness_must_start(b, NULL, NULL);

	pthread_barrier_init(&barrier, NULL, TEST_CONCURRENT_RETRIES);
	for (i = 0; i < TEST_CONCURRENT_RETRIES; i++) {
		r[i].conn = harness_connect(b);
		assert_non_null(r[i].conn);
		r[i].barrier = &barrier;
		r[i].reply = NULL;
	}
	for (i = 0; i < TEST_CONCURRENT_RETRIES; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, racer_run,
		    &r[i]), 0);
	for (i = 0; i < TEST_CONCURRENT_RETRIES; i++)
		pthread_join(threads[i], NULL);
	pthread_barrier_destroy(&barrier);

	for (i = 0; i < TEST_CONCURRENT_RETRIES; i++) {
		assert_non_null(r[i].reply);
		if (json_object_get(r[i].reply, "recovered") != NULL) {
			harness_assert_outcome(r[i].reply, cc->disposition,
			    cc->action_taken, 1, 1);
			recovered++;
		} else
			harness_assert_outcome(r[i].reply, "reused", 0, 1, 0);
		text = harness_receipt_text(r[i].reply);
		if (first == NULL)
			first = text;
		else {
			assert_string_equal(text, first);
			free(text);
		}
		json_decref(r[i].reply);
		idem_close(r[i].conn);
	}
	assert_int_equal(recovered, 1);
	assert_int_equal(harness_count_tasks(b), 1);
	free(first);
	harness_finish(b);
}

static void
concurrent_retries_after_reserve_durable(void **state)
{
	concurrent_retries_after_crash(*state, &after_reserve_durable);
}

static void
concurrent_retries_after_task_file_linked(void **state)
{
	concurrent_retries_after_crash(*state, &after_task_file_linked);
}

static void
concurrent_retries_after_task_created_durable(void **state)
{
	concurrent_retries_after_crash(*state, &after_task_created_durable);
}

/* ---- Numbers across a crash ---------------------------------------------- */

/*
 * A reservation interrupted before its file exists keeps its number: a
 * new submission after the restart gets the next one, and the retry
 * still gets the reserved one.
 */
static void
reserved_number_kept_across_crash(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		 want[96];

	harness_start_crashing(b, "IDEM_CRASH_AT", "after_reserve_durable");
	submit_and_lose(b, TEST_ID, TEST_SUBJECT);
	harness_wait_dead(b);
	harness_must_start(b, NULL, NULL);

	reply = harness_submit(b, "crash/other", "Another submission");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	first_task_id(want, sizeof want, 2);
	harness_skip_if_date_moved(want + 5, harness_receipt_str(reply,
	    "task_id"));
	assert_string_equal(harness_receipt_str(reply, "task_id"), want);
	json_decref(reply);

	reply = harness_submit(b, NULL, "A legacy task");
	first_task_id(want, sizeof want, 3);
	assert_string_equal(harness_receipt_str(reply, "task_id"), want);
	json_decref(reply);

	reply = harness_submit(b, TEST_ID, TEST_SUBJECT);
	harness_assert_outcome(reply, "created", 1, 1, 1);
	first_task_id(want, sizeof want, 1);
	assert_string_equal(harness_receipt_str(reply, "task_id"), want);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 3);
	harness_finish(b);
}

/*
 * A reservation interrupted by a crash, and a symlink planted since at
 * its reserved name, pointing out of the root: the retry never writes
 * through it nor spins on it (idemd follows no symlink); it answers
 * conflict target_mismatch, twice alike, and the target's bytes and
 * mtime are unchanged (see also test_trust.c).
 */
static void
symlink_at_reserved_name(void **state)
{
	struct broker	*b = *state;
	char		 outside[400], link[512], task_id[64], buf[64];
	struct stat	 before, after;
	json_t		*reply;
	ssize_t		 n;
	int		 fd, i;

	snprintf(outside, sizeof outside, "%s.victim", b->root);
	assert_true((fd = open(outside, O_WRONLY | O_CREAT | O_EXCL, 0644)) !=
	    -1);
	assert_int_equal(write(fd, "do not touch\n", 13), 13);
	close(fd);
	assert_int_equal(stat(outside, &before), 0);

	harness_start_crashing(b, "IDEM_CRASH_AT", "after_reserve_durable");
	submit_and_lose(b, "res-link", "Reserved, then a symlink");
	harness_wait_dead(b);
	first_task_id(task_id, sizeof task_id, 1);
	snprintf(link, sizeof link, "%s/_lifecycle/inbox/%s.md", b->root,
	    task_id);
	assert_int_equal(symlink(outside, link), 0);
	harness_must_start(b, NULL, NULL);
	for (i = 0; i < 2; i++) {
		reply = harness_submit(b, "res-link",
		    "Reserved, then a symlink");
		assert_conflict(reply, "target_mismatch");
		json_decref(reply);
	}
	assert_int_equal(harness_count_tasks(b), 0);
	assert_int_equal(stat(outside, &after), 0);
	assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
	assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
	assert_true((fd = open(outside, O_RDONLY)) != -1);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	assert_int_equal(n, 13);
	buf[n] = '\0';
	assert_string_equal(buf, "do not touch\n");
	unlink(outside);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(broker_crash_after_reserve_durable),
		T(broker_crash_after_task_file_written),
		T(broker_crash_after_task_file_linked),
		T(broker_crash_after_task_created_durable),
		T(broker_crash_after_commit_durable),
		T(worker_crash_after_reserve_durable),
		T(worker_crash_after_task_file_written),
		T(worker_crash_after_task_file_linked),
		T(worker_crash_after_commit_durable),
		T(early_link_creates),
		T(early_link_crash_after_task_file_written),
		T(early_link_crash_after_task_file_linked),
		T(idle_worker_killed),
		T(conflict_after_crash),
		T(target_mismatch_after_crash),
		T(symlink_at_reserved_name),
		T(task_missing_after_crash),
		T(linked_then_moved_to_done),
		T(linked_then_moved_to_history),
		T(created_then_moved_to_done),
		T(created_then_moved_to_history),
		T(concurrent_retries_after_reserve_durable),
		T(concurrent_retries_after_task_file_linked),
		T(concurrent_retries_after_task_created_durable),
		T(reserved_number_kept_across_crash),
		T(sigterm_soon_after_start_stops),
		T(sigterm_soon_after_respawn_stops),
		T(workers_are_exec_d),
		T(workers_hold_the_lock),
		T(start_right_after_the_master_died),
		T(replacement_served_while_master_paused),
		T(worker_option_refused),
	};

	if (sodium_init() < 0)
		return 1;
	return harness_exit_status(FILTER_RUN(tests));
}
