/* SPDX-License-Identifier: ISC */
/*
 * test_service.c: idemd's manners as a service (idemd(8), SIGNALS and
 * LOGGING).  SIGHUP to the master or to a worker is logged and reopens
 * the log, and nothing exits: the broker serves on with the same worker
 * processes.  With --log-file, a log moved away (as logrotate does) is
 * followed, after SIGHUP, by a new file at the path, for the master and
 * the workers.  --log-level drops what is below it; on a stderr that is
 * the journal (JOURNAL_STREAM), each line carries its "<N>" priority;
 * anywhere else (a file, a terminal) its time, RFC 3339 in UTC with
 * milliseconds.  --log-level debug logs each refused request once, with
 * its code, op and peer, never its content.  A count of one is said in
 * the singular; a worker's command line names the root once.
 * Every wait is on an event: the broker's ready pipe, a reply, the log
 * growing (inotify), never a sleep.
 */
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
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

/* How long a log line may take to appear before the test fails. */
#define TEST_LOG_WAIT_MS	20000
#define TEST_WORKERS		2

/* The first line of path with a and (if not NULL) b in it (malloc'd). */
static char *
find_line(const char *path, const char *a, const char *b)
{
	FILE	*f;
	char	 line[2048], *found = NULL;

	if ((f = fopen(path, "r")) == NULL)
		return NULL;
	while (found == NULL && fgets(line, sizeof line, f) != NULL) {
		if (strstr(line, a) != NULL &&
		    (b == NULL || strstr(line, b) != NULL))
			found = strdup(line);
	}
	fclose(f);
	return found;
}

/*
 * Wait until path has a line with a (and b): look, then wait for its
 * directory to change (inotify: a write, a new file), look again.
 * Returns the line (malloc'd); fails the test after TEST_LOG_WAIT_MS.
 */
static char *
wait_line(const char *path, const char *a, const char *b)
{
	char		 dir[1024], *line;
	struct pollfd	 pfd;
	int64_t		 deadline = harness_now_ms() + TEST_LOG_WAIT_MS, left;
	char		 events[4096];

	snprintf(dir, sizeof dir, "%s", path);
	pfd.fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	assert_true(pfd.fd != -1);
	pfd.events = POLLIN;
	assert_true(inotify_add_watch(pfd.fd, dirname(dir), IN_MODIFY |
	    IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) != -1);
	while ((line = find_line(path, a, b)) == NULL) {
		if ((left = deadline - harness_now_ms()) <= 0)
			break;
		if (poll(&pfd, 1, (int)left) > 0)
			while (read(pfd.fd, events, sizeof events) > 0)
				;
	}
	close(pfd.fd);
	if (line == NULL)
		fail_msg("no line with \"%s\"%s%s%s in %s after %d ms", a,
		    b != NULL ? " and \"" : "", b != NULL ? b : "",
		    b != NULL ? "\"" : "", path, TEST_LOG_WAIT_MS);
	return line;
}

static void
assert_no_line(const char *path, const char *a)
{
	char	*line = find_line(path, a, NULL);

	if (line != NULL)
		fail_msg("unexpected line in %s: %s", path, line);
}

/*
 * line starts with "2026-12-05T01:02:03.456Z " (RFC 3339, UTC, ms), a
 * time within a few minutes of now (so UTC, not local time, unless the
 * test runs in UTC anyway).
 */
static void
assert_stamped(const char *line)
{
	static const char	 shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";
	struct tm		 tm;
	time_t			 t;
	size_t			 i;

	for (i = 0; i < sizeof shape - 1; i++) {
		if (shape[i] == 'd' ? !(line[i] >= '0' && line[i] <= '9') :
		    line[i] != shape[i])
			fail_msg("no RFC 3339 UTC time with ms at the start "
			    "of: %s", line);
	}
	memset(&tm, 0, sizeof tm);
	assert_non_null(strptime(line, "%Y-%m-%dT%H:%M:%S", &tm));
	t = timegm(&tm);
	if (t < time(NULL) - 600 || t > time(NULL) + 600)
		fail_msg("the time is not now in UTC: %s", line);
}

/* Every line of path is stamped; there is one at least. */
static void
assert_all_stamped(const char *path)
{
	FILE	*f;
	char	 line[2048];
	int	 n = 0;

	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f) != NULL) {
		assert_stamped(line);
		n++;
	}
	fclose(f);
	assert_true(n > 0);
}

/* How many lines of path have a in them. */
static int
count_lines(const char *path, const char *a)
{
	FILE	*f;
	char	 line[2048];
	int	 n = 0;

	if ((f = fopen(path, "r")) == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL)
		n += strstr(line, a) != NULL;
	fclose(f);
	return n;
}

static int
compare_pids(const void *a, const void *b)
{
	pid_t	x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

static int
sorted_workers(struct broker *b, pid_t pids[TEST_WORKERS])
{
	int	n = harness_workers(b, pids, TEST_WORKERS);

	qsort(pids, (size_t)n, sizeof *pids, compare_pids);
	return n;
}

/* The broker answers a write (a new TASK file) and hello. */
static void
assert_serving(struct broker *b, const char *id)
{
	json_t	*reply, *hello;

	reply = harness_call_once(b, harness_write_task(id, "After SIGHUP"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	hello = json_pack("{s:s}", "op", "hello");
	reply = harness_call_once(b, hello);
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
}

static int
master_running(struct broker *b)
{
	int	status;

	return waitpid(b->pid, &status, WNOHANG) == 0;
}

static void
start_workers(struct broker *b, const char *const *more, const char *const *env)
{
	const char	*args[8] = { "--workers", "2" };
	int		 n = 2, i;

	for (i = 0; more != NULL && more[i] != NULL && n < 7; i++)
		args[n++] = more[i];
	args[n] = NULL;
	assert_int_equal(harness_start(b, args, env), 0);
}

/* ---- SIGHUP ---------------------------------------------------------------- */

static void
sighup_to_master_keeps_serving(void **state)
{
	struct broker	*b = *state;
	pid_t		 before[TEST_WORKERS], after[TEST_WORKERS];
	char		*line;
	unsigned	 i;
	char		 want[32];

	start_workers(b, NULL, NULL);
	assert_int_equal(sorted_workers(b, before), TEST_WORKERS);
	assert_serving(b, "hup/1");

	assert_int_equal(kill(b->pid, SIGHUP), 0);
	line = wait_line(b->log, "SIGHUP: reopening the log", NULL);
	free(line);
	/* The master passes it on: every worker says so, none exits. */
	for (i = 0; i < TEST_WORKERS; i++) {
		snprintf(want, sizeof want, "worker %u: SIGHUP", i);
		free(wait_line(b->log, want, "log reopened"));
	}
	assert_serving(b, "hup/2");
	assert_true(master_running(b));
	assert_int_equal(sorted_workers(b, after), TEST_WORKERS);
	assert_memory_equal(before, after, sizeof before);
	assert_no_line(b->log, "exited with status");
	assert_no_line(b->log, "killed by signal");
	assert_int_equal(harness_count_tasks(b), 2);
	/* And it still stops cleanly. */
	assert_int_equal(harness_stop(b), 0);
	harness_finish(b);
}

static void
sighup_to_worker_keeps_serving(void **state)
{
	struct broker	*b = *state;
	pid_t		 before[TEST_WORKERS], after[TEST_WORKERS];
	char		 who[48];

	start_workers(b, NULL, NULL);
	assert_int_equal(sorted_workers(b, before), TEST_WORKERS);

	assert_int_equal(kill(before[0], SIGHUP), 0);
	snprintf(who, sizeof who, "idemd[%ld]: worker ", (long)before[0]);
	free(wait_line(b->log, who, "SIGHUP: log reopened"));
	assert_serving(b, "hup/worker");
	assert_true(master_running(b));
	assert_int_equal(sorted_workers(b, after), TEST_WORKERS);
	assert_memory_equal(before, after, sizeof before);
	assert_no_line(b->log, "killed by signal");
	assert_int_equal(harness_stop(b), 0);
	harness_finish(b);
}

/* logrotate: the file is moved away, SIGHUP, new lines at the path. */
static void
sighup_reopens_log_file(void **state)
{
	struct broker	*b = *state;
	char		 path[400], moved[420], want[32];
	const char	*args[] = { "--log-file", path, NULL };
	struct stat	 st;
	unsigned	 i;

	snprintf(path, sizeof path, "%s.file.log", b->root);
	snprintf(moved, sizeof moved, "%s.1", path);
	start_workers(b, args, NULL);
	free(wait_line(path, "serving", NULL));
	/* stderr was the harness's log; --log-file took it over. */
	assert_no_line(b->log, "serving");

	assert_int_equal(rename(path, moved), 0);
	assert_int_equal(kill(b->pid, SIGHUP), 0);
	free(wait_line(path, "SIGHUP: log reopened at", path));
	for (i = 0; i < TEST_WORKERS; i++) {
		snprintf(want, sizeof want, "worker %u: SIGHUP", i);
		free(wait_line(path, want, "log reopened"));
	}
	/* The moved file got the line before the reopen, and no later one. */
	free(wait_line(moved, "SIGHUP: reopening the log", NULL));
	assert_no_line(moved, "log reopened");
	assert_int_equal(stat(path, &st), 0);
	assert_serving(b, "hup/file");
	assert_int_equal(harness_stop(b), 0);
	free(wait_line(path, "stopped", NULL));
	/* Lines in a log file carry their time, the workers' too. */
	assert_all_stamped(path);
	assert_all_stamped(moved);
	unlink(path);
	unlink(moved);
	harness_finish(b);
}

/* ---- Levels and priorities ------------------------------------------------- */

static void
log_level_warning_drops_notices(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--log-level", "warning", NULL };
	pid_t		 pids[TEST_WORKERS];

	start_workers(b, args, NULL);
	assert_int_equal(sorted_workers(b, pids), TEST_WORKERS);
	/* A warning passes: the master reports the worker's death. */
	assert_int_equal(kill(pids[0], SIGKILL), 0);
	free(wait_line(b->log, "warning: worker", "killed by signal 9"));
	/* Logged before it was ready, had they passed: the notice, the info. */
	assert_no_line(b->log, "serving");
	assert_no_line(b->log, "state:");
	harness_finish(b);
}

static void
log_level_debug_adds_debug(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--log-level", "debug", NULL };

	start_workers(b, args, NULL);
	free(wait_line(b->log, "debug: worker 0 started", NULL));
	free(wait_line(b->log, "serving", NULL));
	harness_finish(b);
}

static void
log_level_unknown_refused(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--log-level", "loud", NULL };

	assert_int_equal(harness_start(b, args, NULL), -1);
	assert_int_equal(b->exit_status, 1);
	free(wait_line(b->log, "--log-level must be error, warning, notice, "
	    "info or debug", NULL));
	harness_finish(b);
}

/* Every line of path starts with "<N>" (N a syslog priority). */
static void
assert_all_prefixed(const char *path)
{
	FILE	*f;
	char	 line[2048];
	int	 n = 0;

	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f) != NULL) {
		if (!(line[0] == '<' && line[1] >= '0' && line[1] <= '7' &&
		    line[2] == '>'))
			fail_msg("no priority prefix: %s", line);
		n++;
	}
	fclose(f);
	assert_true(n > 0);
}

static void
journal_stderr_gets_priorities(void **state)
{
	struct broker	*b = *state;
	char		 stream[64], *line;
	const char	*env[] = { stream, NULL };
	pid_t		 pids[TEST_WORKERS];
	struct stat	 st;
	int		 fd;

	/* As systemd does: JOURNAL_STREAM names stderr's device and inode. */
	fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	assert_true(fd != -1);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	snprintf(stream, sizeof stream, "JOURNAL_STREAM=%llu:%llu",
	    (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	start_workers(b, NULL, env);
	line = wait_line(b->log, "serving", NULL);
	assert_true(strncmp(line, "<5>idemd[", 9) == 0);
	free(line);
	line = wait_line(b->log, "state:", NULL);
	assert_true(strncmp(line, "<6>idemd[", 9) == 0);
	free(line);
	assert_int_equal(sorted_workers(b, pids), TEST_WORKERS);
	assert_int_equal(kill(pids[0], SIGKILL), 0);
	line = wait_line(b->log, "killed by signal 9", NULL);
	assert_true(strncmp(line, "<4>idemd[", 9) == 0);
	free(line);
	assert_int_equal(harness_stop(b), 0);
	line = wait_line(b->log, "stopped", NULL);
	assert_true(strncmp(line, "<5>idemd[", 9) == 0);
	free(line);
	assert_all_prefixed(b->log);
	harness_finish(b);
}

static void
other_stderr_gets_no_priorities(void **state)
{
	struct broker	*b = *state;
	const char	*env[] = { "JOURNAL_STREAM=1:2", NULL };
	char		*line;

	start_workers(b, NULL, env);
	line = wait_line(b->log, "serving", NULL);
	/* Not the journal: the time, then the program, no priority. */
	assert_stamped(line);
	assert_true(strncmp(line + strlen("2026-12-05T01:02:03.456Z "),
	    "idemd[", 6) == 0);
	free(line);
	assert_int_equal(harness_stop(b), 0);
	free(wait_line(b->log, "stopped", NULL));
	assert_all_stamped(b->log);
	harness_finish(b);
}

/* ---- What the lines say ------------------------------------------------------ */

/*
 * --log-level debug: a refused request is logged once, with its code,
 * its op and its peer (this process), and nothing of what it carried.
 */
static void
log_level_debug_logs_refusals(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--log-level", "debug", NULL };
	char		 want[96], *line;
	json_t		*reply;

	start_workers(b, args, NULL);
	reply = harness_call_once(b, json_pack("{s:s,s:s,s:{s:s,s:s,s:s}}",
	    "op", "write_task", "client_submission_id", "refused-1", "task",
	    "sender", "not a role", "recipient", "DEV", "body",
	    "a body the log must never show"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 0);
	json_decref(reply);
	/* Written before the reply was sent: no wait needed, but allowed. */
	line = wait_line(b->log, "refused a request, op write_task: "
	    "invalid_request, field task.sender", NULL);
	snprintf(want, sizeof want, "from pid %ld uid %lu", (long)getpid(),
	    (unsigned long)getuid());
	if (strstr(line, want) == NULL)
		fail_msg("the refusal does not name its peer (%s): %s", want,
		    line);
	free(line);
	assert_int_equal(count_lines(b->log, "refused a request"), 1);
	assert_no_line(b->log, "a body the log must never show");
	assert_no_line(b->log, "not a role");

	reply = harness_call_once(b, json_pack("{s:s}", "op", "frobnicate"));
	assert_non_null(reply);
	json_decref(reply);
	/* An op the broker does not know is not quoted: a client chose it. */
	free(wait_line(b->log, "refused a request: unknown_op", want));
	assert_no_line(b->log, "frobnicate");
	/* An answered request is not logged as refused. */
	assert_serving(b, "refused-2");
	assert_int_equal(count_lines(b->log, "refused a request"), 2);
	harness_finish(b);
}

/* A connection refused as one too many: logged once, with its peer. */
static void
log_level_debug_logs_refused_connections(void **state)
{
	struct broker		*b = *state;
	const char		*args[] = { "--log-level", "debug",
				    "--max-connections-per-pid", "1", NULL };
	struct idem_conn	*held, *extra;
	char			 want[96];
	json_t			*reply;

	start_workers(b, args, NULL);
	assert_non_null(held = harness_connect(b));
	reply = harness_call(held, json_pack("{s:s}", "op", "hello"));
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	/* The second is refused at its accept: its reply says so. */
	assert_non_null(extra = harness_connect(b));
	reply = harness_call(extra, json_pack("{s:s}", "op", "hello"));
	if (reply != NULL) {
		harness_assert_bool(reply, "ok", 0);
		json_decref(reply);
	}
	idem_close(extra);
	snprintf(want, sizeof want, "from pid %ld uid %lu", (long)getpid(),
	    (unsigned long)getuid());
	free(wait_line(b->log, "refused a connection: too_many_connections "
	    "max_connections_per_pid", want));
	assert_int_equal(count_lines(b->log, "refused a connection"), 1);
	/* The refusal is the connection's, not a request's. */
	assert_int_equal(count_lines(b->log, "refused a request"), 0);
	idem_close(held);
	harness_finish(b);
}

/*
 * One worker is "1 worker"; its command line (ps) names --root once,
 * the root the master resolved.
 */
static void
one_worker_said_once(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--workers", "1", NULL };
	char		 path[64], cmdline[8192], *line;
	pid_t		 pid;
	size_t		 n, i;
	int		 roots = 0;
	FILE		*f;

	assert_int_equal(harness_start(b, args, NULL), 0);
	line = wait_line(b->log, "serving", NULL);
	if (strstr(line, " with 1 worker\n") == NULL)
		fail_msg("not \"with 1 worker\": %s", line);
	free(line);
	assert_no_line(b->log, " 1 workers");
	assert_int_equal(harness_workers(b, &pid, 1), 1);
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	assert_non_null(f = fopen(path, "r"));
	n = fread(cmdline, 1, sizeof cmdline - 1, f);
	fclose(f);
	assert_true(n > 0);
	cmdline[n] = '\0';
	for (i = 0; i < n; i += strlen(cmdline + i) + 1) {
		if (strcmp(cmdline + i, "--root") == 0 ||
		    strncmp(cmdline + i, "--root=", 7) == 0)
			roots++;
	}
	assert_int_equal(roots, 1);
	harness_finish(b);
}

/*
 * --syslog: the lines leave stderr (what syslog(3) does with them is the
 * system's: no syslog daemon is assumed here).  With --log-file: refused.
 */
static void
syslog_leaves_stderr(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--syslog", NULL };
	const char	*both[] = { "--syslog", "--log-file", "x.log", NULL };

	start_workers(b, args, NULL);
	/* "serving" is logged before the ready line the harness waited for. */
	assert_no_line(b->log, "serving");
	assert_no_line(b->log, "state:");
	assert_serving(b, "syslog/1");
	assert_int_equal(harness_stop(b), 0);
	assert_no_line(b->log, "stopped");

	assert_int_equal(harness_start(b, both, NULL), -1);
	free(wait_line(b->log, "--log-file and --syslog: choose one", NULL));
	harness_finish(b);
}

/* ---- A test killed from outside -------------------------------------------- */

/*
 * A test process SIGKILLed while its broker runs (make's timeout, ^C, a
 * watchdog of CI) leaves no broker and no segment behind: the harness
 * starts idemd with SIGTERM as its parent-death signal, and the master
 * stops its workers and removes its segment.  The master's end is
 * awaited on a pidfd (it is not this process's child), never by polling.
 */
/* Wait for a process that is not this one's child to end: its pidfd. */
static void
wait_gone(int pidfd)
{
	struct pollfd	pfd;

	pfd.fd = pidfd;
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, (int)(TEST_LOG_WAIT_MS *
	    harness_slowdown())), 1);
	close(pidfd);
}

static void
killed_test_leaves_no_broker(void **state)
{
	struct broker	*b = *state;
	char		 segment[PATH_MAX];
	struct stat	 st;
	pid_t		 test, pids[1 + TEST_WORKERS];
	int		 fds[2], status, pidfds[1 + TEST_WORKERS], i;

	assert_int_equal(pipe(fds), 0);
	assert_int_not_equal(test = fork(), -1);
	if (test == 0) {
		close(fds[0]);
		memset(pids, 0, sizeof pids);
		start_workers(b, NULL, NULL);
		pids[0] = b->pid;
		if (harness_workers(b, pids + 1, TEST_WORKERS) !=
		    TEST_WORKERS ||
		    write(fds[1], pids, sizeof pids) != sizeof pids)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], pids, sizeof pids), sizeof pids);
	close(fds[0]);
	for (i = 0; i < 1 + TEST_WORKERS; i++) {
		assert_true(pids[i] > 0);
		pidfds[i] = (int)syscall(SYS_pidfd_open, pids[i], 0);
		assert_true(pidfds[i] >= 0);
	}
	harness_segment_path(b, segment, sizeof segment);
	assert_int_equal(stat(segment, &st), 0);

	/* The test dies without a word: no atexit, no teardown. */
	assert_int_equal(kill(test, SIGKILL), 0);
	assert_int_equal(waitpid(test, &status, 0), test);
	assert_true(WIFSIGNALED(status));

	/* The master and its workers go, as on SIGTERM. */
	for (i = 0; i < 1 + TEST_WORKERS; i++)
		wait_gone(pidfds[i]);
	free(wait_line(b->log, "stopped", NULL));
	/* Its segment with them. */
	assert_int_equal(stat(segment, &st), -1);
	assert_int_equal(errno, ENOENT);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(sighup_to_master_keeps_serving),
		T(sighup_to_worker_keeps_serving),
		T(sighup_reopens_log_file),
		T(log_level_warning_drops_notices),
		T(log_level_debug_adds_debug),
		T(log_level_unknown_refused),
		T(journal_stderr_gets_priorities),
		T(other_stderr_gets_no_priorities),
		T(log_level_debug_logs_refusals),
		T(log_level_debug_logs_refused_connections),
		T(one_worker_said_once),
		T(syslog_leaves_stderr),
		T(killed_test_leaves_no_broker),
	};

	return FILTER_RUN(tests);
}
