/* SPDX-License-Identifier: ISC */
/*
 * test_pgserver: the private PostgreSQL server the cluster tests run on
 * is what doc/testing.md says: fsync on, no TCP listener, not run as
 * root, stopped by its pid (and started again on the same data).
 */
#include <sys/stat.h>

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

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
	char	path[64], line[256], *p;
	FILE	*fp;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if ((fp = fopen(path, "r")) == NULL)
		return 1;
	p = fgets(line, sizeof line, fp);
	fclose(fp);
	return p != NULL && (p = strrchr(line, ')')) != NULL &&
	    (p[2] == 'Z' || p[2] == 'X');
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(server_is_private_and_durable),
		cmocka_unit_test(stopped_by_pid_and_restarted),
	};
	const char	*reason;
	int		 rc, failed;

	if ((rc = pgserver_start(&server, &reason)) == 77)
		return pgserver_skip_status(reason);
	if (rc != 0) {
		fprintf(stderr, "pgserver_start: %s\n", reason);
		pgserver_destroy(&server, 1);
		return 1;
	}
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	pgserver_destroy(&server, failed != 0);
	return failed;
}
