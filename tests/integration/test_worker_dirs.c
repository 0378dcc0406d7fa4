/* SPDX-License-Identifier: ISC */
/*
 * test_worker_dirs.c: each worker links into and fsyncs the inbox and
 * the reports directory through an open file description of its own,
 * not the master's, which every exec'd worker used to inherit and share.
 * Linux reports a directory's writeback error once per open file
 * description (errseq), and each worker counts its failed directory
 * fsyncs for itself (broker/dirsync.c, DESIGN): with one description
 * shared, one worker's failed fsync could take the error for another
 * worker's link, whose own later fsync succeeded, and that link was
 * committed although it may be lost (main.c, worker_own_dir).
 *
 * Whether two descriptors are one open file description is kcmp's
 * KCMP_FILE; the workers' descriptors of a directory are found by
 * reading /proc/PID/fd.  kcmp needs ptrace read access to both
 * processes (the same uid, and Yama's ptrace_scope or a kernel without
 * CONFIG_KCMP may refuse it): the test is skipped, saying why, if so.
 * Waits are on events (the ready pipe, the log), never a sleep.
 */
#include <sys/syscall.h>
#include <sys/types.h>

#include <linux/kcmp.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "protocol.h"

#define TEST_WORKERS		2
#define TEST_LOG_WAIT_MS	20000

/* The descriptor pid holds on the directory at path, or -1. */
static int
fd_of(pid_t pid, const char *path)
{
	char		 dir[64], target[PATH_MAX];
	struct dirent	*de;
	DIR		*d;
	ssize_t		 n;
	int		 found = -1;

	snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
	if ((d = opendir(dir)) == NULL)
		return -1;
	while (found == -1 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if ((n = readlinkat(dirfd(d), de->d_name, target,
		    sizeof target - 1)) == -1)
			continue;
		target[n] = '\0';
		if (strcmp(target, path) == 0)
			found = atoi(de->d_name);
	}
	closedir(d);
	return found;
}

/* 0: one open file description; 1: two; -1 with errno: kcmp refused. */
static int
same_description(pid_t a, int fd_a, pid_t b, int fd_b)
{
	long	rc;

	rc = syscall(SYS_kcmp, (long)a, (long)b, (long)KCMP_FILE,
	    (unsigned long)fd_a, (unsigned long)fd_b);
	if (rc == -1)
		return -1;
	return rc == 0 ? 0 : 1;
}

/*
 * The descriptors of relpath held by the two workers, and the master's,
 * are three open file descriptions.
 */
static void
assert_own_descriptions(struct broker *b, const pid_t workers[TEST_WORKERS],
    const char *relpath)
{
	char	*root, path[PATH_MAX];
	int	 fd[TEST_WORKERS], master_fd, i, rc;

	assert_non_null(root = realpath(b->root, NULL));
	snprintf(path, sizeof path, "%s/%s", root, relpath);
	free(root);
	master_fd = fd_of(b->pid, path);
	assert_true(master_fd >= 0);
	for (i = 0; i < TEST_WORKERS; i++) {
		fd[i] = fd_of(workers[i], path);
		if (fd[i] == -1)
			fail_msg("worker %ld holds no descriptor of %s",
			    (long)workers[i], path);
	}
	/* kcmp of the master's with itself: is kcmp allowed here at all? */
	if (same_description(b->pid, master_fd, b->pid, master_fd) != 0) {
		if (errno == EPERM || errno == EACCES || errno == ENOSYS)
			harness_skip("kcmp(KCMP_FILE) refused (%s): cannot "
			    "compare the workers' descriptions", strerror(errno));
		fail_msg("kcmp of a descriptor with itself: %s",
		    strerror(errno));
	}
	rc = same_description(workers[0], fd[0], workers[1], fd[1]);
	assert_int_not_equal(rc, -1);
	if (rc == 0)
		fail_msg("workers %ld and %ld share one open file description "
		    "of %s", (long)workers[0], (long)workers[1], relpath);
	for (i = 0; i < TEST_WORKERS; i++) {
		rc = same_description(b->pid, master_fd, workers[i], fd[i]);
		assert_int_not_equal(rc, -1);
		if (rc == 0)
			fail_msg("worker %ld shares the master's open file "
			    "description of %s", (long)workers[i], relpath);
	}
}

static void
each_worker_has_its_own_directory_descriptions(void **state)
{
	struct broker	*b = *state;
	pid_t		 workers[TEST_WORKERS];
	json_t		*reply;

	assert_int_equal(harness_start(b, (const char *const []){
	    "--workers", "2", "--log-level", "debug", NULL }, NULL), 0);
	/* Each worker's "serving" (debug): past its start-up's opens. */
	harness_wait_log(b, ") serving", TEST_WORKERS, TEST_LOG_WAIT_MS);
	assert_int_equal(harness_workers(b, workers, TEST_WORKERS),
	    TEST_WORKERS);
	assert_own_descriptions(b, workers, IDEM_INBOX_DIR);
	assert_own_descriptions(b, workers, IDEM_REPORTS_DIR);
	/* And the broker links through them. */
	reply = harness_must_call(b, harness_write_task("dirs/1", "dirs"));
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(harness_stop(b), 0);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(each_worker_has_its_own_directory_descriptions),
	};

	return FILTER_RUN(tests);
}
