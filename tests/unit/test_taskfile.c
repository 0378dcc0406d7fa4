/* SPDX-License-Identifier: ISC */
/*
 * test_taskfile.c: unit tests of broker/store/taskfile*.c, each on a fresh
 * temporary root.
 *
 * Built without broker/store/crash.c: crash_point() below counts the points
 * reached instead of killing anything (in a build with fault injection;
 * without it taskfile.c has no crash points to count).  write() and fsync() are also
 * defined here, ahead of libc, so a test can make the next one fail with
 * ENOSPC or EIO; unarmed they pass straight to the system call.
 */
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "digest.h"
#include "store.h"
#include "tree.h"

#define TEST_DIGEST \
	"e783f03162c9d4b7a29cd5fc8fa267efd37e2e89287849df3d8a5a30f6f86763"
#define TEST_TASK_ID	"TASK-20261202-007-PM-to-DEV"
#define TEST_TIME	"2026-12-02T12:00:00.123Z"
#define TEST_TIME_MS	INT64_C(1796212800123)

/* ---- stand-ins for crash.c and for the system calls ------------------- */

static int	crash_counts[CRASH_POINT_COUNT];

/*
 * What a stepped write did, in order: its steps ('w' written, 's'
 * synced), every fsync ('f') and the crash points ('W' written, 'L'
 * linked).
 */
static char	events[64];
static size_t	event_count;

static void
event(char c)
{
	if (event_count < sizeof events - 1)
		events[event_count++] = c;
	events[event_count] = '\0';
}

#ifdef IDEM_FAULT_INJECTION
void
crash_point(enum crash_point point)
{
	crash_counts[point]++;
	if (point == CRASH_AFTER_TASK_FILE_WRITTEN)
		event('W');
	else if (point == CRASH_AFTER_TASK_FILE_LINKED)
		event('L');
}
#endif

static int	fault_write_errno;	/* the next write() fails with it */
static int	fault_fsync_nth;	/* the Nth fsync() from now fails */
static int	fault_fsync_errno;

ssize_t
write(int fd, const void *data, size_t length)
{
	if (fault_write_errno != 0) {
		errno = fault_write_errno;
		fault_write_errno = 0;
		return -1;
	}
	return syscall(SYS_write, fd, data, length);
}

int
fsync(int fd)
{
	event('f');
	if (fault_fsync_nth != 0 && --fault_fsync_nth == 0) {
		errno = fault_fsync_errno;
		return -1;
	}
	return (int)syscall(SYS_fsync, fd);
}

/* ---- fixture ---------------------------------------------------------- */

struct root {
	char	path[64];
	int	fd;
};

static int
root_setup(void **state)
{
	struct root	*root;

	if ((root = calloc(1, sizeof *root)) == NULL)
		return -1;
	strcpy(root->path, "/tmp/test_taskfile.XXXXXX");
	if (mkdtemp(root->path) == NULL)
		return -1;
	if ((root->fd = open(root->path, O_RDONLY|O_DIRECTORY)) == -1)
		return -1;
	memset(crash_counts, 0, sizeof crash_counts);
	event_count = 0;
	events[0] = '\0';
	fault_write_errno = fault_fsync_nth = fault_fsync_errno = 0;
	*state = root;
	return 0;
}

static int
root_teardown(void **state)
{
	struct root	*root = *state;

	close(root->fd);
	unit_remove_tree(root->path);
	free(root);
	return 0;
}

/* ---- helpers ---------------------------------------------------------- */

/* mkdir -p of every directory in path (relative to the root). */
static void
make_dirs(struct root *root, const char *path)
{
	char	buf[PATH_MAX];
	char	*p;

	snprintf(buf, sizeof buf, "%s", path);
	for (p = buf; (p = strchr(p, '/')) != NULL; p++) {
		*p = '\0';
		if (mkdirat(root->fd, buf, 0755) == -1)
			assert_int_equal(errno, EEXIST);
		*p = '/';
	}
	if (mkdirat(root->fd, buf, 0755) == -1)
		assert_int_equal(errno, EEXIST);
}

/* Create root/path (and its directories) holding s. */
static void
put_file(struct root *root, const char *path, const char *s, size_t length)
{
	char	dir[PATH_MAX], *slash;
	int	fd;

	snprintf(dir, sizeof dir, "%s", path);
	if ((slash = strrchr(dir, '/')) != NULL) {
		*slash = '\0';
		make_dirs(root, dir);
	}
	fd = openat(root->fd, path, O_WRONLY|O_CREAT|O_TRUNC, 0644);
	assert_true(fd != -1);
	assert_int_equal(write(fd, s, length), (ssize_t)length);
	close(fd);
}

/* Move root/from to root/to, making to's directories. */
static void
move_file(struct root *root, const char *from, const char *to)
{
	char	dir[PATH_MAX], *slash;

	snprintf(dir, sizeof dir, "%s", to);
	if ((slash = strrchr(dir, '/')) != NULL) {
		*slash = '\0';
		make_dirs(root, dir);
	}
	assert_int_equal(renameat(root->fd, from, root->fd, to), 0);
}

/* The whole of root/path, NUL-terminated (free it). */
static char *
read_file(struct root *root, const char *path, size_t *length)
{
	struct stat	 st;
	char		*buf;
	int		 fd;

	fd = openat(root->fd, path, O_RDONLY);
	assert_true(fd != -1);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc(st.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, st.st_size), st.st_size);
	buf[st.st_size] = '\0';
	close(fd);
	*length = st.st_size;
	return buf;
}

/* Entries of root/path other than . and .., and how many start with '.'. */
static int
count_entries(struct root *root, const char *path, int *hidden)
{
	DIR		*dir;
	struct dirent	*entry;
	int		 fd, n = 0;

	fd = openat(root->fd, path, O_RDONLY|O_DIRECTORY);
	assert_true(fd != -1);
	dir = fdopendir(fd);
	assert_non_null(dir);
	*hidden = 0;
	while ((entry = readdir(dir)) != NULL) {
		if (strcmp(entry->d_name, ".") == 0 ||
		    strcmp(entry->d_name, "..") == 0)
			continue;
		n++;
		if (entry->d_name[0] == '.')
			(*hidden)++;
	}
	closedir(dir);
	return n;
}

static int
open_dir(struct root *root, const char *path)
{
	int	fd;

	make_dirs(root, path);
	fd = openat(root->fd, path, O_RDONLY|O_DIRECTORY);
	assert_true(fd != -1);
	return fd;
}

/* The task of SPEC.md's example. */
static const char *const spec_references[] = { "doc/a.md" };
static const char *const spec_depends_on[] = { "TASK-20261202-002-PM-to-DEV" };
static const struct idem_task spec_task = {
	.sender = "PM",
	.recipient = "DEV",
	.subject = "Fix login",
	.body = "Steps:\n1. reproduce\n2. fix\n",
	.priority = "P1",
	.risk_level = "medium",
	.thread_key = "login",
	.parent = "TASK-20261202-003-PM-to-DEV",
	.references = spec_references,
	.references_count = 1,
	.depends_on = spec_depends_on,
	.depends_on_count = 1
};

static const char spec_file[] =
    "---\n"
    "protocol: \"fcop\"\n"
    "version: 1\n"
    "type: \"TASK\"\n"
    "task_id: \"TASK-20261202-007-PM-to-DEV\"\n"
    "sender: \"PM\"\n"
    "recipient: \"DEV\"\n"
    "subject: \"Fix login\"\n"
    "priority: \"P1\"\n"
    "risk_level: \"medium\"\n"
    "thread_key: \"login\"\n"
    "parent: \"TASK-20261202-003-PM-to-DEV\"\n"
    "references: [\"doc/a.md\"]\n"
    "depends_on: [\"TASK-20261202-002-PM-to-DEV\"]\n"
    "created_at: \"2026-12-02T12:00:00.123Z\"\n"
    "client_submission_id: \"run-42/step-3\"\n"
    "digest_schema: \"write-task-v1\"\n"
    "request_digest: \"" TEST_DIGEST "\"\n"
    "transitions: [{\"at\":\"2026-12-02T12:00:00.123Z\",\"from\":null,"
    "\"to\":\"inbox\",\"by\":\"PM\",\"tool\":\"write_task\"}]\n"
    "---\n"
    "Steps:\n1. reproduce\n2. fix\n";

static void
render_spec_task(const char *submission_id, char **out, size_t *length)
{
	struct taskfile_task	tf = {
		.task_id = TEST_TASK_ID,
		.task = &spec_task,
		.created_at = TEST_TIME,
		.client_submission_id = submission_id,
		.request_digest = submission_id != NULL ? TEST_DIGEST : NULL
	};

	assert_int_equal(taskfile_render_task(&tf, out, length), 0);
}

/* The JSON value of the front-matter line "key: ..." in file. */
static json_t *
front_matter_value(const char *file, const char *key)
{
	char		 start[64];
	const char	*line, *end;
	json_error_t	 error;

	snprintf(start, sizeof start, "\n%s: ", key);
	line = strstr(file, start);
	assert_non_null(line);
	line += strlen(start);
	end = strchr(line, '\n');
	assert_non_null(end);
	return json_loadb(line, end - line, JSON_DECODE_ANY, &error);
}

/* ---- rendering -------------------------------------------------------- */

static void
test_render_task_is_the_spec_example(void **state)
{
	char	*out;
	size_t	 length;

	(void)state;
	render_spec_task("run-42/step-3", &out, &length);
	assert_int_equal(length, strlen(out));
	assert_string_equal(out, spec_file);
	free(out);
}

static void
test_render_task_legacy_has_null_id_and_no_digest(void **state)
{
	static const char *const refs[] = { "doc/a.md", "doc/b.md" };
	struct idem_task	 task = spec_task;
	struct taskfile_task	 tf = {
		.task_id = TEST_TASK_ID,
		.task = &task,
		.created_at = TEST_TIME
	};
	char			*out;
	size_t			 length;

	(void)state;
	task.thread_key = NULL;
	task.parent = NULL;
	task.references = refs;
	task.references_count = 2;
	task.depends_on = NULL;
	task.depends_on_count = 0;
	assert_int_equal(taskfile_render_task(&tf, &out, &length), 0);
	assert_non_null(strstr(out, "\nclient_submission_id: null\n"
	    "transitions: [{"));
	assert_null(strstr(out, "digest_schema"));
	assert_null(strstr(out, "request_digest"));
	assert_non_null(strstr(out, "\nthread_key: null\nparent: null\n"
	    "references: [\"doc/a.md\",\"doc/b.md\"]\ndepends_on: []\n"));
	free(out);
}

static void
test_render_task_escapes_subject_on_one_line(void **state)
{
	/* U+2028, DEL, quotes, a newline, a backslash and U+0085. */
	static const char	 subject[] =
	    "a\xe2\x80\xa8" "b\x7f\"q\"\nz\\ \xc2\x85";
	struct idem_task	 task = spec_task;
	struct taskfile_task	 tf = {
		.task_id = TEST_TASK_ID,
		.task = &task,
		.created_at = TEST_TIME
	};
	char			*out, *fm_end;
	size_t			 length;
	json_t			*value;

	(void)state;
	task.subject = subject;
	assert_int_equal(taskfile_render_task(&tf, &out, &length), 0);

	/* No raw character that YAML would fold or refuse is left. */
	fm_end = strstr(out + 4, "\n---\n");
	assert_non_null(fm_end);
	*fm_end = '\0';
	assert_null(strchr(out, 0x7f));
	assert_null(strstr(out, "\xe2\x80\xa8"));
	assert_null(strstr(out, "\xc2\x85"));

	value = front_matter_value(out, "subject");
	assert_non_null(value);
	assert_true(json_is_string(value));
	assert_int_equal(json_string_length(value), strlen(subject));
	assert_memory_equal(json_string_value(value), subject, strlen(subject));
	json_decref(value);
	free(out);
}

static void
test_render_task_refuses_missing_fields(void **state)
{
	struct idem_task	 task = spec_task;
	struct taskfile_task	 tf = {
		.task_id = TEST_TASK_ID,
		.task = &task,
		.created_at = TEST_TIME,
		.client_submission_id = "x"	/* without its digest */
	};
	char			*out = NULL;
	size_t			 length;

	(void)state;
	assert_int_equal(taskfile_render_task(&tf, &out, &length), -1);
	assert_int_equal(errno, EINVAL);
	tf.client_submission_id = NULL;
	task.subject = NULL;
	assert_int_equal(taskfile_render_task(&tf, &out, &length), -1);
	assert_int_equal(errno, EINVAL);
	assert_null(out);
}

static void
test_render_report_layout(void **state)
{
	static const char	 expected[] =
	    "---\n"
	    "protocol: \"fcop\"\n"
	    "version: 1\n"
	    "type: \"REPORT\"\n"
	    "report_id: \"REPORT-20261202-001-DEV-to-PM\"\n"
	    "task_id: \"TASK-20261202-007-PM-to-DEV\"\n"
	    "sender: \"DEV\"\n"
	    "recipient: \"PM\"\n"
	    "status: \"done\"\n"
	    "references: [\"TASK-20261202-007-PM-to-DEV\"]\n"
	    "created_at: \"2026-12-02T12:00:00.123Z\"\n"
	    "client_submission_id: \"r-1\"\n"
	    "digest_schema: \"write-report-v1\"\n"
	    "request_digest: \"" TEST_DIGEST "\"\n"
	    "transitions: [{\"at\":\"2026-12-02T12:00:00.123Z\",\"from\":null,"
	    "\"to\":\"reports\",\"by\":\"DEV\",\"tool\":\"write_report\"}]\n"
	    "---\n"
	    "Fixed.\n";
	struct idem_report	 report = {
		.sender = "DEV",
		.recipient = "PM",
		.status = "done",
		.body = "Fixed.\n"
	};
	struct taskfile_report	 rf = {
		.report_id = "REPORT-20261202-001-DEV-to-PM",
		.task_id = TEST_TASK_ID,
		.report = &report,
		.created_at = TEST_TIME,
		.client_submission_id = "r-1",
		.request_digest = TEST_DIGEST
	};
	char			*out;
	size_t			 length;

	(void)state;
	assert_int_equal(taskfile_render_report(&rf, &out, &length), 0);
	assert_string_equal(out, expected);
	free(out);

	rf.client_submission_id = NULL;
	rf.request_digest = NULL;
	assert_int_equal(taskfile_render_report(&rf, &out, &length), 0);
	assert_non_null(strstr(out, "\nclient_submission_id: null\n"
	    "transitions: [{"));
	assert_null(strstr(out, "digest_schema"));
	free(out);
}

/* ---- names and times -------------------------------------------------- */

static void
test_format_id_and_path(void **state)
{
	char	id[IDEM_MAX_TASK_ID_BYTES + 1], path[IDEM_MAX_TASK_PATH_BYTES];

	(void)state;
	taskfile_format_id(SUBTAB_KIND_TASK, 20261202, 7, "PMX", 2, "DEV", 3,
	    id, sizeof id);
	assert_string_equal(id, TEST_TASK_ID);
	taskfile_format_path(SUBTAB_KIND_TASK, id, path, sizeof path);
	assert_string_equal(path, "_lifecycle/inbox/" TEST_TASK_ID ".md");

	taskfile_format_id(SUBTAB_KIND_TASK, 20261202, 1000, "LEAD-QA", 7,
	    "DEV_01", 6, id, sizeof id);
	assert_string_equal(id, "TASK-20261202-1000-LEAD-QA-to-DEV_01");

	taskfile_format_id(SUBTAB_KIND_REPORT, 20260105, 1, "DEV", 3, "PM", 2,
	    id, sizeof id);
	assert_string_equal(id, "REPORT-20260105-001-DEV-to-PM");
	taskfile_format_path(SUBTAB_KIND_REPORT, id, path, sizeof path);
	assert_string_equal(path, "reports/REPORT-20260105-001-DEV-to-PM.md");
}

static void
test_time_round_trip(void **state)
{
	static const int64_t	 times[] = {
		0, 1, 999, 1000, TEST_TIME_MS, INT64_C(1709251199999),
		-1, INT64_C(-62167219200000), INT64_C(253402300799999)
	};
	char			 s[TASKFILE_TIME_BYTES];
	int64_t			 ms, parsed;
	size_t			 i;

	(void)state;
	taskfile_format_time(TEST_TIME_MS, s);
	assert_string_equal(s, TEST_TIME);
	taskfile_format_time(0, s);
	assert_string_equal(s, "1970-01-01T00:00:00.000Z");
	taskfile_format_time(-1, s);
	assert_string_equal(s, "1969-12-31T23:59:59.999Z");
	taskfile_format_time(INT64_C(1709251199999), s);
	assert_string_equal(s, "2024-02-29T23:59:59.999Z");

	for (i = 0; i < sizeof times / sizeof times[0]; i++) {
		taskfile_format_time(times[i], s);
		assert_int_equal(taskfile_parse_time(s, &ms), 0);
		assert_int_equal(ms, times[i]);
	}

	taskfile_format_time(INT64_C(-62167219200000), s);
	assert_string_equal(s, "0000-01-01T00:00:00.000Z");
	/* clamped at both ends of the four-digit years */
	taskfile_format_time(INT64_MIN, s);
	assert_string_equal(s, "0000-01-01T00:00:00.000Z");
	taskfile_format_time(INT64_MAX, s);
	assert_string_equal(s, "9999-12-31T23:59:59.999Z");
	/* every field's digits, over the years: each parses back */
	for (ms = INT64_C(-62167219200000); ms < INT64_C(253402300799999);
	    ms += INT64_C(9876543210987)) {
		taskfile_format_time(ms + ms % 1000, s);
		assert_int_equal(strlen(s), 24);
		assert_int_equal(taskfile_parse_time(s, &parsed), 0);
		assert_int_equal(parsed, ms + ms % 1000);
	}

	assert_int_equal(taskfile_date_of(TEST_TIME_MS), 20261202);
	assert_int_equal(taskfile_date_of(0), 19700101);
	assert_int_equal(taskfile_date_of(-1), 19691231);
	assert_int_equal(taskfile_date_of(INT64_C(1709251199999)), 20240229);
	assert_int_equal(taskfile_date_of(INT64_C(1709251200000)), 20240301);
}

static void
test_time_parse_is_strict(void **state)
{
	static const char *const bad[] = {
		"2026-12-02T12:00:00Z",
		"2026-13-02T12:00:00.000Z",
		"2026-00-02T12:00:00.000Z",
		"2026-02-29T12:00:00.000Z",
		"2026-04-31T12:00:00.000Z",
		"2026-12-00T12:00:00.000Z",
		"2026-12-02T24:00:00.000Z",
		"2026-12-02T12:60:00.000Z",
		"2026-12-02T12:00:60.000Z",
		"2026-12-02T12:00:00.123z",
		"2026-12-02t12:00:00.123Z",
		"2026-12-02 12:00:00.123Z",
		"2026-12-02T12:00:00.1234Z",
		"2026-12-02T12:00:00.123Z ",
		"2026-12-02T12:00:00.123+00:00",
		" 2026-12-02T12:00:00.123Z",
		"+026-12-02T12:00:00.123Z",
		"2026-1-02T12:00:00.123Z",
		""
	};
	int64_t			 ms = 42;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		if (taskfile_parse_time(bad[i], &ms) != -1)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(errno, EINVAL);
	}
	assert_int_equal(ms, 42);
	assert_int_equal(taskfile_parse_time("2024-02-29T00:00:00.000Z", &ms),
	    0);
}

/* ---- durable writes --------------------------------------------------- */

static void
test_write_durable_creates_exact_bytes_and_no_temp(void **state)
{
	struct root	*root = *state;
	char		*cause = NULL, *back;
	size_t		 length;
	int		 dir_fd, hidden;

	dir_fd = open_dir(root, "_lifecycle/inbox");
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", spec_file,
	    sizeof spec_file - 1, 0, &cause), 0);
	assert_null(cause);
	back = read_file(root, "_lifecycle/inbox/a.md", &length);
	assert_int_equal(length, sizeof spec_file - 1);
	assert_memory_equal(back, spec_file, length);
	free(back);
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 1);
	assert_int_equal(hidden, 0);

	/* An empty file is a file too. */
	assert_int_equal(taskfile_write_durable(dir_fd, "empty.md", "", 0, 0,
	    &cause), 0);
	back = read_file(root, "_lifecycle/inbox/empty.md", &length);
	assert_int_equal(length, 0);
	free(back);
	close(dir_fd);
}

static void
test_write_durable_never_replaces(void **state)
{
	struct root	*root = *state;
	char		*cause = NULL, *back;
	size_t		 length;
	int		 dir_fd, hidden;

	dir_fd = open_dir(root, "_lifecycle/inbox");
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "first", 5, 0,
	    &cause), 0);
	errno = 0;
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "second", 6, 0,
	    &cause), -1);
	assert_int_equal(errno, EEXIST);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "a.md"));
	free(cause);

	back = read_file(root, "_lifecycle/inbox/a.md", &length);
	assert_int_equal(length, 5);
	/* A name that is not one directory entry is refused up front. */
	errno = 0;
	assert_int_equal(taskfile_write_durable(dir_fd, "../a.md", "x", 1, 0,
	    &cause), -1);
	assert_int_equal(errno, EINVAL);
	free(cause);
	assert_memory_equal(back, "first", 5);
	free(back);
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 1);
	assert_int_equal(hidden, 0);
	close(dir_fd);
}

#ifdef IDEM_FAULT_INJECTION
static void
test_write_durable_crash_points(void **state)
{
	struct root	*root = *state;
	char		*cause = NULL;
	int		 dir_fd;

	dir_fd = open_dir(root, "_lifecycle/inbox");
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "x", 1, 0,
	    &cause), 0);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 0);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 0);

	assert_int_equal(taskfile_write_durable(dir_fd, "b.md", "x", 1, 1,
	    &cause), 0);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 1);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 1);

	/* A name already taken stops before the linked point. */
	assert_int_equal(taskfile_write_durable(dir_fd, "b.md", "y", 1, 1,
	    &cause), -1);
	free(cause);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 2);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 1);
	assert_int_equal(crash_counts[CRASH_AFTER_RESERVE_DURABLE], 0);
	close(dir_fd);
}
#endif

static void
test_write_durable_storage_faults_leave_nothing(void **state)
{
	struct root	*root = *state;
	char		*cause = NULL;
	int		 dir_fd, hidden;

	dir_fd = open_dir(root, "_lifecycle/inbox");

	/* Disk full while writing. */
	fault_write_errno = ENOSPC;
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "x", 1, 1,
	    &cause), -1);
	assert_int_equal(errno, ENOSPC);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "a.md"));
	free(cause);
	cause = NULL;
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 0);

	/* I/O error on the file's fsync: never linked. */
	fault_fsync_nth = 1;
	fault_fsync_errno = EIO;
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "x", 1, 1,
	    &cause), -1);
	assert_int_equal(errno, EIO);
	assert_non_null(cause);
	free(cause);
	cause = NULL;
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 0);
#ifdef IDEM_FAULT_INJECTION
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 0);
#endif

	/*
	 * I/O error on the directory's fsync: the file is in place, no temp
	 * is left, and the caller hears EIO (a retry adopts the file).
	 */
	fault_fsync_nth = 2;
	fault_fsync_errno = EIO;
	assert_int_equal(taskfile_write_durable(dir_fd, "a.md", "x", 1, 1,
	    &cause), -1);
	assert_int_equal(errno, EIO);
	free(cause);
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 1);
	assert_int_equal(hidden, 0);
#ifdef IDEM_FAULT_INJECTION
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 1);
#endif
	close(dir_fd);
}

/* ---- stepped writes (the PostgreSQL store's form) ---------------------- */

#define STEP_DIR	"_lifecycle/inbox"
#define STEP_TEMP	".a.md.tmp.7-token"
#define STEP_BYTES	"the bytes"

struct step_test {
	struct root	*root;
	int		 written_rc;	/* what the steps answer */
	int		 synced_rc;
	int		 sweep;		/* synced removes the temporary first,
					   as a takeover's sweep does */
	int		 sync_error;	/* what synced was told */
	int		 failed_op;	/* what failed was told; -1 none */
	int		 taken;		/* another writer's a.md is there */
};

/* 1 if root/STEP_DIR/name exists. */
static int
step_exists(struct root *root, const char *name)
{
	char		path[PATH_MAX];
	struct stat	st;

	snprintf(path, sizeof path, "%s/%s", STEP_DIR, name);
	return fstatat(root->fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static int
step_written(void *arg, char **cause)
{
	struct step_test	*t = arg;
	char			*back;
	size_t			 length;

	event('w');
	/* The temporary holds every byte; the name does not exist yet. */
	back = read_file(t->root, STEP_DIR "/" STEP_TEMP, &length);
	assert_int_equal(length, sizeof STEP_BYTES - 1);
	assert_memory_equal(back, STEP_BYTES, length);
	free(back);
	assert_int_equal(step_exists(t->root, "a.md"), t->taken);
	if (t->written_rc != 0) {
		*cause = strdup("the step's own cause");
		errno = ECONNRESET;
	}
	return t->written_rc;
}

static int
step_synced(void *arg, int sync_error, char **cause)
{
	struct step_test	*t = arg;

	event('s');
	t->sync_error = sync_error;
	assert_true(step_exists(t->root, STEP_TEMP));
	assert_int_equal(step_exists(t->root, "a.md"), t->taken);
	if (t->sweep)
		assert_int_equal(unlinkat(t->root->fd, STEP_DIR "/" STEP_TEMP,
		    0), 0);
	if (t->synced_rc < 0) {
		*cause = strdup("the grant failed");
		errno = EPROTO;
	}
	return t->synced_rc;
}

static void
step_failed(void *arg, enum taskfile_op op, const char *temp,
    const char *name, char **cause)
{
	struct step_test	*t = arg;

	t->failed_op = (int)op;
	if (asprintf(cause, "caller's words: %s %s %d", temp, name,
	    errno) == -1)
		*cause = NULL;
}

static void
step_init(struct step_test *t, struct taskfile_steps *steps,
    struct root *root, int plain_link)
{
	memset(t, 0, sizeof *t);
	t->root = root;
	t->sync_error = -1;
	t->failed_op = -1;
	memset(steps, 0, sizeof *steps);
	steps->temp = STEP_TEMP;
	steps->written = step_written;
	steps->synced = step_synced;
	steps->failed = step_failed;
	steps->arg = t;
	steps->crash_points = TASKFILE_CRASH_WRITTEN | TASKFILE_CRASH_LINKED;
	steps->plain_link = plain_link;
}

static enum taskfile_put
step_write(struct root *root, const struct taskfile_steps *steps,
    char **cause)
{
	enum taskfile_put	 put;
	int			 dir_fd = open_dir(root, STEP_DIR);

	*cause = NULL;
	put = taskfile_write_stepped(dir_fd, "a.md", STEP_BYTES,
	    sizeof STEP_BYTES - 1, steps, cause);
	close(dir_fd);
	return put;
}

/*
 * The order the PostgreSQL store's fencing rests on: written (the grant
 * sent) before the temporary's fsync, synced (the grant awaited) after
 * it, then the crash points around the link; the caller's temporary name.
 */
static void
test_write_stepped_steps_in_order(void **state)
{
	struct root		*root = *state;
	struct step_test	 t;
	struct taskfile_steps	 steps;
	char			*cause, *back;
	size_t			 length;
	int			 hidden, plain;

	for (plain = 0; plain <= 1; plain++) {
		step_init(&t, &steps, root, plain);
		event_count = 0;
		assert_int_equal(step_write(root, &steps, &cause),
		    TASKFILE_LINKED);
		assert_null(cause);
		assert_int_equal(t.sync_error, 0);
		assert_int_equal(t.failed_op, -1);
#ifdef IDEM_FAULT_INJECTION
		assert_string_equal(events, "wfsWL");
#else
		assert_string_equal(events, "wfs");
#endif
		back = read_file(root, STEP_DIR "/a.md", &length);
		assert_int_equal(length, sizeof STEP_BYTES - 1);
		assert_memory_equal(back, STEP_BYTES, length);
		free(back);
		/* The temporary is gone; the directory is the caller's. */
		assert_int_equal(count_entries(root, STEP_DIR, &hidden), 1);
		assert_int_equal(hidden, 0);
		assert_int_equal(unlinkat(root->fd, STEP_DIR "/a.md", 0), 0);
	}
}

/* Fenced, by the synced step or by a takeover's removal: nothing left. */
static void
test_write_stepped_fenced_removes_the_temporary(void **state)
{
	struct root		*root = *state;
	struct step_test	 t;
	struct taskfile_steps	 steps;
	char			*cause;
	int			 hidden;

	/* synced says fenced: the temporary is removed, never linked. */
	step_init(&t, &steps, root, 1);
	t.synced_rc = 1;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FENCED);
	assert_null(cause);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);
#ifdef IDEM_FAULT_INJECTION
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 0);
#endif

	/* A takeover removed it before the link: linkat's ENOENT. */
	step_init(&t, &steps, root, 1);
	t.sweep = 1;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FENCED);
	assert_null(cause);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);
#ifdef IDEM_FAULT_INJECTION
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 0);
#endif

	/* Without plain_link that ENOENT is a failure, not a fence. */
	step_init(&t, &steps, root, 0);
	t.sweep = 1;
	errno = 0;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_int_equal(errno, ENOENT);
	assert_non_null(cause);
	free(cause);
	/* (A file system without RENAME_NOREPLACE links instead.) */
	assert_true(t.failed_op == TASKFILE_OP_RENAME ||
	    t.failed_op == TASKFILE_OP_LINK);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);

	/* synced failed: its cause, and the temporary removed. */
	step_init(&t, &steps, root, 1);
	t.synced_rc = -1;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_string_equal(cause, "the grant failed");
	free(cause);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);
}

/* EEXIST at the link is the name taken, whichever link: not replaced. */
static void
test_write_stepped_eexist_is_taken(void **state)
{
	struct root		*root = *state;
	struct step_test	 t;
	struct taskfile_steps	 steps;
	char			*cause, *back;
	size_t			 length;
	int			 hidden, plain;

	put_file(root, STEP_DIR "/a.md", "another writer's", 16);
	for (plain = 0; plain <= 1; plain++) {
		step_init(&t, &steps, root, plain);
		t.taken = 1;
		errno = 0;
		assert_int_equal(step_write(root, &steps, &cause),
		    TASKFILE_TAKEN);
		assert_int_equal(errno, EEXIST);
		/* The cause is the caller's text (it frees it). */
		assert_non_null(cause);
		assert_non_null(strstr(cause, "caller's words"));
		free(cause);
		if (plain)
			assert_int_equal(t.failed_op, TASKFILE_OP_LINK);
		else
			assert_true(t.failed_op == TASKFILE_OP_RENAME ||
			    t.failed_op == TASKFILE_OP_LINK);
		back = read_file(root, STEP_DIR "/a.md", &length);
		assert_int_equal(length, 16);
		assert_memory_equal(back, "another writer's", 16);
		free(back);
		assert_int_equal(count_entries(root, STEP_DIR, &hidden), 1);
		assert_int_equal(hidden, 0);
	}
#ifdef IDEM_FAULT_INJECTION
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_WRITTEN], 2);
	assert_int_equal(crash_counts[CRASH_AFTER_TASK_FILE_LINKED], 0);
#endif
}

/*
 * Failures before the link: the step's cause or the caller's words,
 * the temporary removed, and one that was there already left alone.
 */
static void
test_write_stepped_failures(void **state)
{
	struct root		*root = *state;
	struct step_test	 t;
	struct taskfile_steps	 steps;
	char			*cause;
	int			 hidden;

	/* written fails: synced is never called, nothing is fsync'd. */
	step_init(&t, &steps, root, 1);
	t.written_rc = -1;
	event_count = 0;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_int_equal(errno, ECONNRESET);
	assert_string_equal(cause, "the step's own cause");
	free(cause);
	assert_string_equal(events, "w");
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);

	/* The write fails: the caller's words for it. */
	step_init(&t, &steps, root, 1);
	fault_write_errno = ENOSPC;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_int_equal(errno, ENOSPC);
	assert_int_equal(t.failed_op, TASKFILE_OP_WRITE);
	assert_non_null(cause);
	assert_non_null(strstr(cause, STEP_TEMP));
	free(cause);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);

	/* The fsync fails: synced hears it, and saying "go on" fails. */
	step_init(&t, &steps, root, 1);
	fault_fsync_nth = 1;
	fault_fsync_errno = EIO;
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_int_equal(errno, EIO);
	assert_int_equal(t.sync_error, EIO);
	assert_int_equal(t.failed_op, TASKFILE_OP_FSYNC);
	free(cause);
	assert_int_equal(count_entries(root, STEP_DIR, &hidden), 0);

	/* A temporary of that name is there already: not ours, kept. */
	put_file(root, STEP_DIR "/" STEP_TEMP, "x", 1);
	step_init(&t, &steps, root, 1);
	assert_int_equal(step_write(root, &steps, &cause), TASKFILE_FAILED);
	assert_int_equal(errno, EEXIST);
	assert_int_equal(t.failed_op, TASKFILE_OP_CREATE);
	free(cause);
	assert_true(step_exists(root, STEP_TEMP));
	assert_false(step_exists(root, "a.md"));
}

/* ---- finding ---------------------------------------------------------- */

static void
test_find_follows_fcop_moves(void **state)
{
	struct root	*root = *state;
	char		 relpath[IDEM_MAX_TASK_PATH_BYTES];
	const char	*id = TEST_TASK_ID;

	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    0);

	put_file(root, "_lifecycle/inbox/" TEST_TASK_ID ".md", "x", 1);
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    1);
	assert_string_equal(relpath, "_lifecycle/inbox/" TEST_TASK_ID ".md");

	move_file(root, "_lifecycle/inbox/" TEST_TASK_ID ".md",
	    "_lifecycle/done/" TEST_TASK_ID ".md");
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    1);
	assert_string_equal(relpath, "_lifecycle/done/" TEST_TASK_ID ".md");

	/* A stage FCoP may add later. */
	move_file(root, "_lifecycle/done/" TEST_TASK_ID ".md",
	    "_lifecycle/blocked/" TEST_TASK_ID ".md");
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    1);
	assert_string_equal(relpath, "_lifecycle/blocked/" TEST_TASK_ID ".md");

	move_file(root, "_lifecycle/blocked/" TEST_TASK_ID ".md",
	    "history/2026-12-02/" TEST_TASK_ID "/" TEST_TASK_ID ".md");
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    1);
	assert_string_equal(relpath,
	    "history/2026-12-02/" TEST_TASK_ID "/" TEST_TASK_ID ".md");

	move_file(root,
	    "history/2026-12-02/" TEST_TASK_ID "/" TEST_TASK_ID ".md",
	    "_lifecycle/history/2026-12-03/" TEST_TASK_ID "/" TEST_TASK_ID
	    ".md");
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    1);
	assert_string_equal(relpath, "_lifecycle/history/2026-12-03/"
	    TEST_TASK_ID "/" TEST_TASK_ID ".md");

	assert_int_equal(unlinkat(root->fd, relpath, 0), 0);
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    0);

	/* Another task's file is not this one. */
	put_file(root, "_lifecycle/inbox/TASK-20261202-008-PM-to-DEV.md", "x",
	    1);
	assert_int_equal(taskfile_find(root->fd, id, relpath, sizeof relpath),
	    0);
}

static void
test_find_reports_and_bad_ids(void **state)
{
	struct root	*root = *state;
	char		 relpath[IDEM_MAX_TASK_PATH_BYTES];

	put_file(root, "reports/REPORT-20261202-001-DEV-to-PM.md", "x", 1);
	assert_int_equal(taskfile_find(root->fd,
	    "REPORT-20261202-001-DEV-to-PM", relpath, sizeof relpath), 1);
	assert_string_equal(relpath, "reports/REPORT-20261202-001-DEV-to-PM.md");

	errno = 0;
	assert_int_equal(taskfile_find(root->fd, "../x", relpath,
	    sizeof relpath), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(taskfile_find(root->fd, "", relpath, sizeof relpath),
	    -1);

	/* A path that does not fit is an error, not a truncated answer. */
	errno = 0;
	assert_int_equal(taskfile_find(root->fd,
	    "REPORT-20261202-001-DEV-to-PM", relpath, 10), -1);
	assert_int_equal(errno, ENAMETOOLONG);
}

/* ---- inspecting ------------------------------------------------------- */

static void
assert_digest_of(struct root *root, const char *path,
    const struct taskfile_facts *facts)
{
	uint8_t	 want[IDEM_SHA256_BYTES];
	char	*bytes;
	size_t	 length;

	bytes = read_file(root, path, &length);
	digest_sha256(bytes, length, want);
	assert_memory_equal(facts->file_digest, want, sizeof want);
	free(bytes);
}

static void
test_inspect_rendered_task(void **state)
{
	struct root		*root = *state;
	struct taskfile_facts	 facts;
	char			*cause = NULL;

	put_file(root, "_lifecycle/inbox/a.md", spec_file,
	    sizeof spec_file - 1);
	assert_int_equal(taskfile_inspect(root->fd, "_lifecycle/inbox/a.md",
	    &facts, &cause), 0);
	assert_null(cause);
	assert_digest_of(root, "_lifecycle/inbox/a.md", &facts);
	assert_int_equal(facts.has_front_matter, 1);
	assert_int_equal(facts.has_client_submission_id, 1);
	assert_string_equal(facts.client_submission_id, "run-42/step-3");
	assert_int_equal(facts.has_request_digest, 1);
	assert_string_equal(facts.request_digest, TEST_DIGEST);
	assert_int_equal(facts.has_created_at, 1);
	assert_string_equal(facts.created_at, TEST_TIME);
	assert_int_equal(facts.created_at_ms, TEST_TIME_MS);
}

static void
test_inspect_legacy_task(void **state)
{
	struct root		*root = *state;
	struct taskfile_facts	 facts;
	char			*out, *cause = NULL;
	size_t			 length;

	render_spec_task(NULL, &out, &length);
	put_file(root, "_lifecycle/done/b.md", out, length);
	free(out);
	assert_int_equal(taskfile_inspect(root->fd, "_lifecycle/done/b.md",
	    &facts, &cause), 0);
	assert_digest_of(root, "_lifecycle/done/b.md", &facts);
	assert_int_equal(facts.has_front_matter, 1);
	assert_int_equal(facts.has_client_submission_id, 0);
	assert_int_equal(facts.has_request_digest, 0);
	assert_int_equal(facts.has_created_at, 1);
	assert_int_equal(facts.created_at_ms, TEST_TIME_MS);
}

static void
test_inspect_foreign_files(void **state)
{
	static const char *const foreign[] = {
		/* FCoP's own writer: block YAML. */
		"---\nprotocol: fcop\nversion: 1\nsender: PM\nrecipient: DEV\n"
		"client_submission_id: run-42/step-3\n---\nbody\n",
		/* Our keys, but a line that is not JSON. */
		"---\nclient_submission_id: \"run-42/step-3\"\n"
		"request_digest: \"" TEST_DIGEST "\"\n"
		"references:\n  - a\n---\n",
		/* Never closed. */
		"---\nclient_submission_id: \"run-42/step-3\"\n",
		/* A key given twice. */
		"---\nclient_submission_id: \"run-42/step-3\"\n"
		"client_submission_id: \"other\"\n---\n",
		/* CRLF. */
		"---\r\nclient_submission_id: \"run-42/step-3\"\r\n---\r\n",
		/* No front matter at all. */
		"# just a body\n",
		""
	};
	static const char	 odd[] =
	    "---\nclient_submission_id: 42\nrequest_digest: \"ABC\"\n"
	    "created_at: \"2026-12-02T12:00:00Z\"\n---\n";
	struct root		*root = *state;
	struct taskfile_facts	 facts;
	char			*cause = NULL;
	size_t			 i;

	for (i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
		put_file(root, "_lifecycle/inbox/f.md", foreign[i],
		    strlen(foreign[i]));
		assert_int_equal(taskfile_inspect(root->fd,
		    "_lifecycle/inbox/f.md", &facts, &cause), 0);
		assert_digest_of(root, "_lifecycle/inbox/f.md", &facts);
		if (facts.has_front_matter)
			fail_msg("foreign file %zu taken for ours", i);
		assert_int_equal(facts.has_client_submission_id, 0);
		assert_int_equal(facts.has_request_digest, 0);
		assert_int_equal(facts.has_created_at, 0);
	}

	/* Our shape with values idem would never write: no facts from them. */
	put_file(root, "_lifecycle/inbox/g.md", odd, strlen(odd));
	assert_int_equal(taskfile_inspect(root->fd, "_lifecycle/inbox/g.md",
	    &facts, &cause), 0);
	assert_int_equal(facts.has_front_matter, 1);
	assert_int_equal(facts.has_client_submission_id, 0);
	assert_int_equal(facts.has_request_digest, 0);
	assert_int_equal(facts.has_created_at, 0);
}

static void
test_inspect_large_file_digest_covers_it_all(void **state)
{
	struct root		*root = *state;
	struct taskfile_facts	 facts;
	char			*big, *cause = NULL;
	size_t			 size = 5 * 1024 * 1024 + 17;

	big = malloc(size);
	assert_non_null(big);
	memset(big, 'x', size);
	memcpy(big, spec_file, sizeof spec_file - 1);
	put_file(root, "_lifecycle/inbox/big.md", big, size);
	free(big);
	assert_int_equal(taskfile_inspect(root->fd, "_lifecycle/inbox/big.md",
	    &facts, &cause), 0);
	assert_digest_of(root, "_lifecycle/inbox/big.md", &facts);
	assert_int_equal(facts.has_front_matter, 1);
	assert_string_equal(facts.client_submission_id, "run-42/step-3");
}

static void
test_inspect_missing_file(void **state)
{
	struct root		*root = *state;
	struct taskfile_facts	 facts;
	char			*cause = NULL;

	errno = 0;
	assert_int_equal(taskfile_inspect(root->fd, "_lifecycle/inbox/no.md",
	    &facts, &cause), -1);
	assert_int_equal(errno, ENOENT);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "_lifecycle/inbox/no.md"));
	free(cause);
}

/* ---- numbers in use --------------------------------------------------- */

static void
test_scan_max_seq_everywhere_a_task_may_be(void **state)
{
	struct root	*root = *state;
	uint32_t	 max = 99;

	/* Nothing there at all: 0, and missing directories are fine. */
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_TASK,
	    20261202, &max), 0);
	assert_int_equal(max, 0);

	put_file(root, "_lifecycle/inbox/TASK-20261202-003-PM-to-DEV.md", "", 0);
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_TASK,
	    20261202, &max), 0);
	assert_int_equal(max, 3);

	put_file(root, "_lifecycle/done/TASK-20261202-017-PM-to-DEV.md", "", 0);
	make_dirs(root, "history/2026-12-02/TASK-20261202-020-PM-to-DEV");
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_TASK,
	    20261202, &max), 0);
	assert_int_equal(max, 20);

	/* Another FCoP writer's file, with a slot on the recipient. */
	put_file(root, "_lifecycle/active/TASK-20261202-042-X-to-Y.BE.md", "",
	    0);
	/* Not for this date, not a number, not a task, not the shape. */
	put_file(root, "_lifecycle/inbox/TASK-20261203-100-PM-to-DEV.md", "",
	    0);
	put_file(root, "_lifecycle/inbox/TASK-20261202-abc-PM-to-DEV.md", "",
	    0);
	put_file(root, "_lifecycle/inbox/REPORT-20261202-500-PM-to-DEV.md", "",
	    0);
	put_file(root, "_lifecycle/inbox/TASK-20261202-600.md", "", 0);
	put_file(root, "_lifecycle/inbox/TASK-2026120-700-PM-to-DEV.md", "", 0);
	put_file(root, "_lifecycle/inbox/TASK-20261202-99999999999-A-to-B.md",
	    "", 0);
	put_file(root, "shared/TASK-20261202-800-PM-to-DEV.md", "", 0);
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_TASK,
	    20261202, &max), 0);
	assert_int_equal(max, 42);

	make_dirs(root, "_lifecycle/history/2026-12-02/"
	    "TASK-20261202-1001-PM-to-DEV");
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_TASK,
	    20261202, &max), 0);
	assert_int_equal(max, 1001);
}

static void
test_scan_max_seq_reports(void **state)
{
	struct root	*root = *state;
	uint32_t	 max = 99;

	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_REPORT,
	    20261202, &max), 0);
	assert_int_equal(max, 0);
	put_file(root, "reports/REPORT-20261202-004-DEV-to-PM.md", "", 0);
	put_file(root, "reports/REPORT-20261202-002-DEV-to-PM.md", "", 0);
	put_file(root, "_lifecycle/inbox/TASK-20261202-009-PM-to-DEV.md", "", 0);
	assert_int_equal(taskfile_scan_max_seq(root->fd, SUBTAB_KIND_REPORT,
	    20261202, &max), 0);
	assert_int_equal(max, 4);
}

/* ---- topology --------------------------------------------------------- */

static void
test_make_topology_creates_all_and_is_idempotent(void **state)
{
	static const char *const dirs[] = {
		"_lifecycle/inbox", "_lifecycle/active", "_lifecycle/review",
		"_lifecycle/done", "_lifecycle/archive", "reports", "issues",
		"shared", ".idem", ".idem/journal"
	};
	struct root	*root = *state;
	struct stat	 st;
	char		*cause = NULL;
	size_t		 i;
	int		 hidden;

	assert_int_equal(taskfile_make_topology(root->fd, &cause), 0);
	assert_null(cause);
	for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		assert_int_equal(fstatat(root->fd, dirs[i], &st, 0), 0);
		assert_true(S_ISDIR(st.st_mode));
	}
	put_file(root, "_lifecycle/inbox/keep.md", "k", 1);
	assert_int_equal(taskfile_make_topology(root->fd, &cause), 0);
	assert_int_equal(count_entries(root, "_lifecycle/inbox", &hidden), 1);
	assert_int_equal(count_entries(root, ".", &hidden), 5);
}

static void
test_make_topology_partial_and_in_the_way(void **state)
{
	struct root	*root = *state;
	struct stat	 st;
	char		*cause = NULL;

	/* Half an FCoP workspace: the rest is added. */
	make_dirs(root, "_lifecycle/inbox");
	make_dirs(root, "reports");
	assert_int_equal(taskfile_make_topology(root->fd, &cause), 0);
	assert_int_equal(fstatat(root->fd, "_lifecycle/archive", &st, 0), 0);
	assert_int_equal(fstatat(root->fd, ".idem/journal", &st, 0), 0);

	/* A file where a directory must be. */
	put_file(root, "issues2", "", 0);
	assert_int_equal(unlinkat(root->fd, "issues", AT_REMOVEDIR), 0);
	assert_int_equal(renameat(root->fd, "issues2", root->fd, "issues"), 0);
	errno = 0;
	assert_int_equal(taskfile_make_topology(root->fd, &cause), -1);
	assert_int_equal(errno, ENOTDIR);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "issues"));
	free(cause);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, root_setup, root_teardown)
		T(test_render_task_is_the_spec_example),
		T(test_render_task_legacy_has_null_id_and_no_digest),
		T(test_render_task_escapes_subject_on_one_line),
		T(test_render_task_refuses_missing_fields),
		T(test_render_report_layout),
		T(test_format_id_and_path),
		T(test_time_round_trip),
		T(test_time_parse_is_strict),
		T(test_write_durable_creates_exact_bytes_and_no_temp),
		T(test_write_durable_never_replaces),
#ifdef IDEM_FAULT_INJECTION
		T(test_write_durable_crash_points),
#endif
		T(test_write_durable_storage_faults_leave_nothing),
		T(test_write_stepped_steps_in_order),
		T(test_write_stepped_fenced_removes_the_temporary),
		T(test_write_stepped_eexist_is_taken),
		T(test_write_stepped_failures),
		T(test_find_follows_fcop_moves),
		T(test_find_reports_and_bad_ids),
		T(test_inspect_rendered_task),
		T(test_inspect_legacy_task),
		T(test_inspect_foreign_files),
		T(test_inspect_large_file_digest_covers_it_all),
		T(test_inspect_missing_file),
		T(test_scan_max_seq_everywhere_a_task_may_be),
		T(test_scan_max_seq_reports),
		T(test_make_topology_creates_all_and_is_idempotent),
		T(test_make_topology_partial_and_in_the_way),
#undef T
	};

	return FILTER_RUN(tests);
}
