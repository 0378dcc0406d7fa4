/* SPDX-License-Identifier: ISC */
/*
 * test_pgserver: the private PostgreSQL server the cluster tests run on
 * is what doc/testing.md says: fsync on, no TCP listener, not run as
 * root, stopped by its pid (and started again on the same data), and
 * stopped by its guard when the test process is killed without stopping
 * it (a watchdog, an abort, SIGKILL).
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "pgserver.h"

static struct pgserver	server;

static void
assert_setting(const char *name, const char *expected)
{
	char	sql[128], *out;

	snprintf(sql, sizeof sql, "SHOW %s", name);
	out = pgserver_psql(&server, sql);
	assert_non_null(out);
	out[strcspn(out, "\n")] = '\0';
	if (strcmp(out, expected) != 0)
		fail_msg("%s is \"%s\", not \"%s\"", name, out, expected);
	free(out);
}

static void
server_is_private_and_durable(void **state)
{
	char		path[256];
	struct stat	st;

	(void)state;
	assert_setting("fsync", "on");
	assert_setting("synchronous_commit", "on");
	assert_setting("listen_addresses", "");
	assert_setting("unix_socket_directories", server.dir);
	/* The postmaster is not root (initdb and postgres refuse it). */
	snprintf(path, sizeof path, "/proc/%d", (int)server.pid);
	assert_int_equal(stat(path, &st), 0);
	assert_int_not_equal(st.st_uid, 0);
}

/* Gone, or a zombie nobody reaped (it is not our child). */
static int
exited(pid_t pid)
{
	char	state = pgserver_proc_state(pid);

	return state == '?' || state == 'Z' || state == 'X';
}

static void
stopped_by_pid_and_restarted(void **state)
{
	pid_t	old = server.pid;
	char	*out;

	(void)state;
	assert_non_null(out = pgserver_psql(&server,
	    "CREATE TABLE t (x int); INSERT INTO t VALUES (42)"));
	free(out);
	assert_int_equal(pgserver_stop(&server, 1), 0);
	/* The pid it signalled is gone, and nothing answers. */
	assert_true(exited(old));
	assert_null(pgserver_psql(&server, "SELECT 1"));
	assert_int_equal(pgserver_restart(&server), 0);
	assert_int_not_equal(server.pid, 0);
	/* A committed row survives an immediate shutdown (fsync=on). */
	assert_non_null(out = pgserver_psql(&server, "SELECT x FROM t"));
	assert_string_equal(out, "42\n");
	free(out);
}

/*
 * A test process that starts a server and is SIGKILLed (as a watchdog
 * or make would) leaves no server behind: its guard stops the
 * postmaster and removes the data directory.
 */
static void
killed_test_leaves_no_server(void **state)
{
	struct pgserver	 other;
	struct pollfd	 pfd;
	struct stat	 st;
	int		 fds[2], status;
	pid_t		 test;
	size_t		 got = 0;
	ssize_t		 n;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	assert_int_not_equal(test = fork(), -1);
	if (test == 0) {
		const char	*reason;

		close(fds[0]);
		if (pgserver_start(&other, &reason) != 0)
			_exit(1);
		/* What the parent needs, then wait to be killed. */
		if (write(fds[1], &other, sizeof other) != sizeof other)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	while (got < sizeof other) {
		/* initdb and the start, on a loaded machine. */
		assert_int_equal(poll(&pfd, 1, 240 * 1000), 1);
		n = read(fds[0], (char *)&other + got, sizeof other - got);
		if (n == -1 && errno == EINTR)
			continue;
		assert_true(n > 0);
		got += (size_t)n;
	}
	close(fds[0]);
	assert_true(other.pid > 0);
	assert_false(exited(other.pid));
	assert_int_equal(stat(other.data, &st), 0);
	/* The test dies without a word: no destroy, no atexit. */
	assert_int_equal(kill(test, SIGKILL), 0);
	assert_int_equal(waitpid(test, &status, 0), test);
	assert_true(WIFSIGNALED(status));
	/* Its postmaster goes, and its data directory with it. */
	assert_int_equal(pgserver_wait_gone(other.pid, 120), 0);
	assert_true(exited(other.pid));
	assert_int_equal(pgserver_wait_gone(other.guard, 120), 0);
	assert_int_equal(stat(other.data, &st), -1);
	assert_int_equal(errno, ENOENT);
	/* What is left is the log, to be read; remove it. */
	assert_int_equal(unlink(other.log), 0);
	assert_int_equal(rmdir(other.dir), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(server_is_private_and_durable),
		cmocka_unit_test(stopped_by_pid_and_restarted),
		cmocka_unit_test(killed_test_leaves_no_server),
	};
	int	rc, failed;

	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (FILTER_APPLY(tests) == -1)
		return 1;
	if ((rc = pgserver_main_start(&server)) != 0)
		return rc;
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	pgserver_destroy(&server, failed != 0);
	return failed;
}
