/* SPDX-License-Identifier: ISC */
/*
 * test_backup.c: idemctl backup copies a running broker's state with no
 * window where an acknowledged receipt is missing.  A broker with a tiny
 * --segment-bytes and --capacity (so that checkpoints prune segments and
 * evict into the index while the copy runs) serves a client creating
 * tasks and effects without pause; the backup is taken meanwhile,
 * restored into a fresh root (cp -a, as doc/idemctl.1 says), verified,
 * and every receipt acknowledged before the backup began is answered
 * again, reused, byte for byte.  Also: a DEST that is not empty, is a
 * symlink or holds a symlink is refused, and nothing is written through
 * it; an idem REPORT file the copy does not record is left out of it,
 * whatever its number; and DEST swapped for a symlink to the root while
 * the backup runs cuts nothing of the root's journal.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "harness.h"

#define BACKUP_FIRST	60	/* tasks and effects each, before the load */
#define BACKUP_READY	20	/* the load's acknowledgements before the copy */
#define BACKUP_KIND	"backup.test"

static const char *const backup_args[] = { "--segment-bytes", "8192",
    "--capacity", "64", NULL };

/*
 * The load runs in a forked child: a cmocka failure there would unwind
 * into the child's copy of the test runner, which would go on with the
 * next tests.  So the helpers it shares fail through here: in the child,
 * a message and _exit(3), which the parent's waitpid sees.
 */
static int	in_load_child;

static void	load_fail(const char *, ...)
		    __attribute__((format(printf, 1, 2)));

static void
load_fail(const char *fmt, ...)
{
	char	message[4096];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	if (in_load_child) {
		fprintf(stderr, "load: %s\n", message);
		_exit(3);
	}
	fail_msg("%s", message);
}

/*
 * One call as lines: the answer's text (malloc'd), or fail.  Not inlined:
 * GCC 12's -Wdangling-pointer then takes the answer for the local that
 * received it.
 */
static __attribute__((noinline)) char *
call_line(struct idem_conn *c, const char *line)
{
	struct idem_error	 err;
	char			*response = NULL;

	if (idem_call_raw(c, line, &response, &err) != 0)
		load_fail("call %s: %s", line, err.message);
	return response;
}

/* The receipt as it came on the wire: the tail from "receipt". */
static const char *
receipt_of(const char *response)
{
	const char	*at = strstr(response, "\"receipt\":");

	if (at == NULL)
		load_fail("no receipt in %s", response);
	return at;
}

/*
 * What a retry of request must answer again, byte for byte: a receipt,
 * or a report's id and path (write_report's reply has no receipt).
 */
static const char *
answer_of(const char *request, const char *response)
{
	const char	*at;

	if (strstr(request, "\"op\":\"write_report\"") == NULL)
		return receipt_of(response);
	if ((at = strstr(response, "\"report_id\":")) == NULL)
		load_fail("no report_id in %s", response);
	return at;
}

/* A retry's answer: reused, or for a report deduplicated. */
static int
answered_again(const char *request, const char *response)
{
	if (strstr(request, "\"op\":\"write_report\"") != NULL)
		return strstr(response, "\"deduplicated\":true") != NULL;
	return strstr(response, "\"disposition\":\"reused\"") != NULL;
}

/*
 * One submission acknowledged, as a line of the acknowledgements file:
 * the request that answers it again, a tab, its receipt's text.
 */
static void
note_ack(int fd, const char *retry, const char *receipt)
{
	char	*line;
	int	 n;

	n = asprintf(&line, "%s\t%s\n", retry, receipt);
	if (n <= 0)
		load_fail("asprintf: out of memory");
	/* O_APPEND: one write, one whole line. */
	if (write(fd, line, (size_t)n) != n)
		load_fail("writing an acknowledgement: %s", strerror(errno));
	free(line);
}

/* Also a report on each task create_pair makes (the held test's). */
static int	with_reports;

/* A report on task_id, client_submission_id NAME, acknowledged into fd. */
static void
create_report(struct idem_conn *c, const char *task_id, const char *name,
    int fd)
{
	char	 report[512];
	char	*r;

	snprintf(report, sizeof report, "{\"op\":\"write_report\","
	    "\"task_id\":\"%s\",\"client_submission_id\":\"%s\","
	    "\"report\":{\"sender\":\"DEV\",\"body\":\"Done %s.\\n\"}}",
	    task_id, name, name);
	for (;;) {
		r = call_line(c, report);
		if (strstr(r, "\"ok\":true") != NULL)
			break;
		if (strstr(r, "\"retryable\":true") == NULL)
			load_fail("write_report %s: %s", name, r);
		free(r);
	}
	note_ack(fd, report, answer_of(report, r));
	free(r);
}

/* Create task NAME and effect NAME, each acknowledged into fd. */
static int
create_pair(struct idem_conn *c, const char *name, int fd)
{
	char	 task[512], begin[512], complete[512], fence[64];
	char	 task_id[128];
	char	*r;
	const char *at;

	snprintf(task, sizeof task, "{\"op\":\"write_task\","
	    "\"client_submission_id\":\"%s\",\"task\":{\"sender\":\"PM\","
	    "\"recipient\":\"DEV\",\"subject\":\"backed up %s\","
	    "\"body\":\"Steps:\\n1. copy\\n\"}}", name, name);
	if ((r = call_line(c, task)) == NULL)
		return -1;
	if (strstr(r, "\"disposition\":\"created\"") == NULL) {
		/* table_full while a checkpoint runs: try again later. */
		int retry = strstr(r, "\"retryable\":true") != NULL;

		if (!retry)
			load_fail("write_task %s: %s", name, r);
		free(r);
		return 1;
	}
	note_ack(fd, task, receipt_of(r));
	if ((at = strstr(r, "\"task_id\":\"")) == NULL)
		load_fail("write_task %s: no task_id in %s", name, r);
	at += 11;
	snprintf(task_id, sizeof task_id, "%.*s", (int)strcspn(at, "\""), at);
	free(r);
	if (with_reports)
		create_report(c, task_id, name, fd);

	snprintf(begin, sizeof begin, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"" BACKUP_KIND
	    "\",\"request\":{\"name\":\"%s\"}}", name, name);
	r = call_line(c, begin);
	if ((at = strstr(r, "\"fence\":\"")) == NULL)
		load_fail("effect_begin %s: %s", name, r);
	at += 9;
	snprintf(fence, sizeof fence, "%.*s", (int)strcspn(at, "\""), at);
	free(r);
	snprintf(complete, sizeof complete, "{\"op\":\"effect_complete\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"" BACKUP_KIND
	    "\",\"fence\":\"%s\",\"outcome\":\"applied\","
	    "\"result\":{\"sent\":\"%s\"}}", name, fence, name);
	for (;;) {
		r = call_line(c, complete);
		if (strstr(r, "\"receipt\":") != NULL)
			break;
		if (strstr(r, "\"retryable\":true") == NULL)
			load_fail("effect_complete %s: %s", name, r);
		free(r);	/* table_full: the arena waits for the index */
	}
	note_ack(fd, begin, receipt_of(r));
	free(r);
	return 0;
}

/*
 * The load: creations without pause until stop_fd is readable; a byte
 * on ready_fd after BACKUP_READY of them.  A child process: _exit.
 */
static void
load(struct broker *b, int ack_fd, int ready_fd, int stop_fd)
{
	struct pollfd		 p = { .fd = stop_fd, .events = POLLIN };
	struct idem_conn	*c;
	char			 name[64];
	int			 i, made = 0;

	if ((c = harness_connect(b)) == NULL)
		_exit(2);
	for (i = 0; poll(&p, 1, 0) == 0; i++) {
		snprintf(name, sizeof name, "bk-load-%d", i);
		if (create_pair(c, name, ack_fd) != 0)
			continue;
		if (++made == BACKUP_READY && write(ready_fd, "r", 1) != 1)
			_exit(2);
	}
	idem_close(c);
	_exit(made >= BACKUP_READY ? 0 : 3);
}

static char *
read_file(const char *path, size_t limit)
{
	char	*data;
	FILE	*f;
	size_t	 n;

	assert_non_null(f = fopen(path, "r"));
	assert_non_null(data = malloc(limit + 1));
	n = fread(data, 1, limit, f);
	fclose(f);
	data[n] = '\0';
	return data;
}

static void
test_backup_under_load_restores_every_receipt(void **state)
{
	struct broker		 a, r;
	struct idem_conn	*c;
	struct stat		 st;
	char			 acks[400], dest[400], name[64], out[16384];
	char			*text, *line, *tab, *next, *answer;
	off_t			 before;
	pid_t			 child;
	int			 ack_fd, ready[2], stop[2], i, status;
	int			 checked = 0, from_load = 0;
	char			 byte;

	(void)state;
	harness_fresh_root(&a);
	harness_must_start(&a, backup_args, NULL);
	snprintf(acks, sizeof acks, "%s.acks", a.root);
	snprintf(dest, sizeof dest, "%s.backup", a.root);
	assert_true((ack_fd = open(acks, O_WRONLY | O_CREAT | O_TRUNC |
	    O_APPEND | O_CLOEXEC, 0600)) != -1);

	assert_non_null(c = harness_connect(&a));
	for (i = 0; i < BACKUP_FIRST; i++) {
		snprintf(name, sizeof name, "bk-first-%d", i);
		while (create_pair(c, name, ack_fd) != 0)
			;
	}
	idem_close(c);

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(stop), 0);
	if ((child = fork()) == 0) {
		in_load_child = 1;
		close(ready[0]);
		close(stop[1]);
		load(&a, ack_fd, ready[1], stop[0]);
	}
	assert_true(child > 0);
	close(ready[1]);
	close(stop[0]);
	assert_int_equal(read(ready[0], &byte, 1), 1);

	/* What was acknowledged before the backup began. */
	assert_int_equal(fstat(ack_fd, &st), 0);
	before = st.st_size;
	status = harness_idemctl(out, sizeof out, "--root '%s' backup "
	    "--with-workspace '%s'", a.root, dest);
	if (status != 0)
		fail_msg("idemctl backup (exit %d): %s", status, out);
	assert_non_null(strstr(out, "backup of"));
	print_message("%s", out);
	/* The load went on while the copy ran. */
	assert_int_equal(fstat(ack_fd, &st), 0);
	print_message("acknowledged during the backup: %lld bytes of lines\n",
	    (long long)(st.st_size - before));
	assert_int_equal(write(stop[1], "s", 1), 1);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(ack_fd);
	assert_int_equal(harness_stop(&a), 0);

	/* The copy says what it took, and holds no lock nor socket. */
	snprintf(out, sizeof out, "%s/.idem/backup-info", dest);
	text = read_file(out, 1 << 20);
	assert_non_null(strstr(text, "\ncomplete: yes\n"));
	free(text);
	snprintf(out, sizeof out, "%s/.idem/backup-manifest", dest);
	assert_int_equal(stat(out, &st), 0);
	assert_true(st.st_size > 0);
	snprintf(out, sizeof out, "%s/.idem/idemd.lock", dest);
	assert_int_equal(stat(out, &st), -1);
	snprintf(out, sizeof out, "%s/.idem/index/data.mdb", dest);
	assert_int_equal(stat(out, &st), 0);

	/* Restored by copying it back into a fresh root, then verified. */
	harness_fresh_root(&r);
	snprintf(out, sizeof out, "cp -a '%s/.' '%s/'", dest, r.root);
	assert_int_equal(system(out), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' verify", r.root);
	if (status != 0)
		fail_msg("idemctl verify of the restored root (exit %d): %s",
		    status, out);
	/* The manifest checks the restored workspace, file by file. */
	snprintf(out, sizeof out, "cd '%s' && sha256sum --quiet -c "
	    ".idem/backup-manifest", r.root);
	assert_int_equal(system(out), 0);
	harness_must_start(&r, backup_args, NULL);

	/* Every receipt acknowledged before the backup: reused, same bytes. */
	text = read_file(acks, (size_t)before);
	assert_non_null(c = harness_connect(&r));
	for (line = text; *line != '\0'; line = next) {
		assert_non_null(next = strchr(line, '\n'));
		*next++ = '\0';
		assert_non_null(tab = strchr(line, '\t'));
		*tab = '\0';
		answer = call_line(c, line);
		if (strstr(answer, "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s answered %s after the restore", line,
			    answer);
		if (strcmp(receipt_of(answer), tab + 1) != 0)
			fail_msg("%s: receipt %s after the restore, %s before",
			    line, receipt_of(answer), tab + 1);
		free(answer);
		checked++;
		from_load += strstr(line, "bk-load-") != NULL;
	}
	idem_close(c);
	free(text);
	assert_int_equal(checked - from_load, 2 * BACKUP_FIRST);
	assert_true(from_load >= 2 * BACKUP_READY);
	print_message("backup: %d receipts answered byte for byte after the "
	    "restore, %d of them from the load\n", checked, from_load);
	harness_finish(&r);
	unlink(acks);
	snprintf(out, sizeof out, "rm -rf '%s'", dest);
	assert_int_equal(system(out), 0);
	harness_cleanup(&a);
}

/* The newest checkpoint's segment in ROOT's journal, else the lowest segment. */
static unsigned long long
root_first(const char *root)
{
	struct dirent		*e;
	unsigned long long	 n, checkpoint = 0, lowest = 0;
	char			 path[400];
	DIR			*d;

	snprintf(path, sizeof path, "%s/.idem/journal", root);
	assert_non_null(d = opendir(path));
	while ((e = readdir(d)) != NULL) {
		if (sscanf(e->d_name, "checkpoint-%16llx.snap", &n) == 1 &&
		    n > checkpoint)
			checkpoint = n;
		else if (strlen(e->d_name) == 20 &&
		    sscanf(e->d_name, "%16llx.jnl", &n) == 1 &&
		    (lowest == 0 || n < lowest))
			lowest = n;
	}
	closedir(d);
	return checkpoint != 0 ? checkpoint : lowest;
}

static unsigned long long
held_first(const struct broker *b)
{
	return root_first(b->root);
}

static int
segment_exists(const char *root, unsigned long long n)
{
	char	path[PATH_MAX];

	snprintf(path, sizeof path, "%s/.idem/journal/%016llx.jnl", root, n);
	return access(path, F_OK) == 0;
}

/*
 * Start idemctl backup of root into dest (with the workspace if asked),
 * env (NAME=VALUE) added, its output to out: the child's pid.  The test
 * then holds it at the fault point the variable names.
 */
static pid_t
spawn_backup(const char *root, const char *dest, int with_workspace,
    char *env, const char *out)
{
	char	*argv[8];
	pid_t	 child;
	int	 argc = 0, fd;

	argv[argc++] = getenv("IDEMCTL") != NULL ? getenv("IDEMCTL") :
	    "contrib/idemctl";
	argv[argc++] = "--root";
	argv[argc++] = (char *)root;
	argv[argc++] = "backup";
	if (with_workspace)
		argv[argc++] = "--with-workspace";
	argv[argc++] = (char *)dest;
	argv[argc] = NULL;
	if ((child = fork()) == 0) {
		fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		putenv(env);
		execv(argv[0], argv);
		_exit(127);
	}
	assert_true(child > 0);
	return child;
}

/*
 * The journal's files are held open before they are read: a backup held
 * (IDEM_BACKUP_HOLD) while the broker, under load, rotates and prunes
 * the held segments away still copies them, and the restored root
 * answers every earlier receipt.  Copying by name would find them gone.
 */
static void
test_backup_holds_pruned_segments(void **state)
{
	struct broker		 a, r;
	struct idem_conn	*c;
	struct stat		 st;
	char			 acks[400], dest[400], fifo[400], out[16384];
	char			 name[64], env[450], *text, *line, *tab, *next;
	char			*answer;
	unsigned long long	 first;
	off_t			 before;
	pid_t			 child;
	int			 ack_fd, fd, i, status, checked = 0, made;
	int			 reports;

	(void)state;
#ifndef IDEM_FAULT_INJECTION
	harness_skip("IDEM_BACKUP_HOLD needs configure --enable-fault-injection");
#endif
	with_reports = 1;
	harness_fresh_root(&a);
	harness_must_start(&a, backup_args, NULL);
	snprintf(acks, sizeof acks, "%s.acks", a.root);
	snprintf(dest, sizeof dest, "%s.backup", a.root);
	snprintf(fifo, sizeof fifo, "%s.hold", a.root);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_true((ack_fd = open(acks, O_WRONLY | O_CREAT | O_TRUNC |
	    O_APPEND | O_CLOEXEC, 0600)) != -1);
	assert_non_null(c = harness_connect(&a));
	for (i = 0; i < BACKUP_FIRST; i++) {
		snprintf(name, sizeof name, "bk-held-%d", i);
		while (create_pair(c, name, ack_fd) != 0)
			;
	}
	assert_int_equal(fstat(ack_fd, &st), 0);
	before = st.st_size;
	first = held_first(&a);
	assert_true(first > 0);

	snprintf(env, sizeof env, "IDEM_BACKUP_HOLD=%s", fifo);
	snprintf(out, sizeof out, "%s.out", dest);
	child = spawn_backup(a.root, dest, 1, env, out);
	/* Open for writing returns once the backup waits, its files held. */
	assert_true((fd = open(fifo, O_WRONLY | O_CLOEXEC)) != -1);
	/*
	 * Again: a checkpoint the load started may have ended since, before
	 * the backup listed the files (it runs beside the rounds).  Now, at
	 * or after the backup's first; the copy's own is checked below.
	 */
	first = held_first(&a);
	/* Load until a checkpoint has pruned the first held segment. */
	for (made = 0; segment_exists(a.root, first); made++) {
		if (made > 5000)
			fail_msg("segment %llu never pruned", first);
		snprintf(name, sizeof name, "bk-during-%d", made);
		(void)create_pair(c, name, ack_fd);
	}
	/* And more, into segments the backup does not hold: after its cut. */
	for (i = 0; i < 10; i++) {
		snprintf(name, sizeof name, "bk-after-%d", i);
		(void)create_pair(c, name, ack_fd);
	}
	idem_close(c);
	assert_int_equal(write(fd, "go", 2), 2);
	close(fd);
	assert_int_equal(waitpid(child, &status, 0), child);
	snprintf(out, sizeof out, "%s.out", dest);
	text = read_file(out, 8192);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("idemctl backup (status %d): %s", status, text);
	free(text);
	unlink(out);
	close(ack_fd);
	assert_int_equal(harness_stop(&a), 0);
	with_reports = 0;
	/* The copy holds the segment the root no longer has. */
	first = root_first(dest);
	assert_true(first > 0);
	assert_false(segment_exists(a.root, first));
	assert_true(segment_exists(dest, first));
	print_message("backup: segment %llu pruned while held (%d pairs "
	    "made meanwhile), copied all the same\n", first, made);

	harness_fresh_root(&r);
	snprintf(out, sizeof out, "cp -a '%s/.' '%s/'", dest, r.root);
	assert_int_equal(system(out), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' verify", r.root);
	if (status != 0)
		fail_msg("idemctl verify of the restored root (exit %d): %s",
		    status, out);
	snprintf(out, sizeof out, "cd '%s' && sha256sum --quiet -c "
	    ".idem/backup-manifest", r.root);
	assert_int_equal(system(out), 0);
	harness_must_start(&r, backup_args, NULL);
	text = read_file(acks, (size_t)before);
	assert_non_null(c = harness_connect(&r));
	for (line = text; *line != '\0'; line = next) {
		assert_non_null(next = strchr(line, '\n'));
		*next++ = '\0';
		assert_non_null(tab = strchr(line, '\t'));
		*tab = '\0';
		answer = call_line(c, line);
		if (!answered_again(line, answer) ||
		    strcmp(answer_of(line, answer), tab + 1) != 0)
			fail_msg("%s answered %s after the restore, %s before",
			    line, answer, tab + 1);
		free(answer);
		checked++;
	}
	free(text);
	assert_int_equal(checked, 3 * BACKUP_FIRST);
	/*
	 * The reports acknowledged while the backup was held, again: each
	 * is in the copy or made anew (or its task, made after the cut
	 * too, is not found), never twice: a REPORT file left in the copy
	 * past the cut would be one more file than answers.
	 */
	text = read_file(acks, 1 << 22);
	for (line = text, reports = 0; *line != '\0'; line = next) {
		assert_non_null(next = strchr(line, '\n'));
		*next++ = '\0';
		assert_non_null(tab = strchr(line, '\t'));
		*tab = '\0';
		if (strstr(line, "\"op\":\"write_report\"") == NULL)
			continue;
		if (line - text < before) {
			reports++;
			continue;
		}
		answer = call_line(c, line);
		if (strstr(answer, "\"ok\":true") != NULL)
			reports++;
		else if (strstr(answer, "\"task_not_found\"") == NULL)
			fail_msg("%s answered %s after the restore", line,
			    answer);
		free(answer);
	}
	free(text);
	idem_close(c);
	assert_int_equal(harness_count_reports(&r), reports);
	print_message("backup: %d reports, one file each after the restore\n",
	    reports);
	harness_finish(&r);
	unlink(acks);
	unlink(fifo);
	snprintf(out, sizeof out, "rm -rf '%s'", dest);
	assert_int_equal(system(out), 0);
	harness_cleanup(&a);
}

/* Nothing below path but what mkdir made: 1 if it is still empty. */
static int
dir_empty(const char *path)
{
	char	cmd[600];

	snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", path);
	return system(cmd) == 0;
}

static void
test_backup_refuses_a_dest_in_use(void **state)
{
	struct broker	 a;
	char		 dest[400], outside[400], path[900], out[4096];
	int		 status;

	(void)state;
	harness_fresh_root(&a);
	harness_must_start(&a, NULL, NULL);
	json_decref(harness_submit(&a, "bk-refuse-1", "one task"));
	snprintf(dest, sizeof dest, "%s.dest", a.root);
	snprintf(outside, sizeof outside, "%s.outside", a.root);
	assert_int_equal(mkdir(dest, 0700), 0);
	assert_int_equal(mkdir(outside, 0700), 0);

	/* Not empty: a file. */
	snprintf(path, sizeof path, "%s/keep", dest);
	{
		FILE *f = fopen(path, "w");

		assert_non_null(f);
		fputs("mine\n", f);
		fclose(f);
	}
	status = harness_idemctl(out, sizeof out, "--root '%s' backup '%s'",
	    a.root, dest);
	assert_int_equal(status, 2);
	assert_non_null(strstr(out, "not empty"));
	snprintf(path, sizeof path, "%s/.idem", dest);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof path, "%s/keep", dest);
	assert_int_equal(unlink(path), 0);

	/* A planted symlink in DEST: refused, its target untouched. */
	snprintf(path, sizeof path, "%s/.idem", dest);
	assert_int_equal(symlink(outside, path), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' backup '%s'",
	    a.root, dest);
	assert_int_equal(status, 2);
	assert_non_null(strstr(out, "not empty"));
	assert_true(dir_empty(outside));
	assert_int_equal(unlink(path), 0);

	/* DEST itself a symlink: not followed. */
	snprintf(path, sizeof path, "%s.link", a.root);
	assert_int_equal(symlink(outside, path), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' backup '%s'",
	    a.root, path);
	assert_int_equal(status, 2);
	assert_non_null(strstr(out, "symlink"));
	assert_true(dir_empty(outside));
	unlink(path);

	/* The empty directory, at last: taken. */
	status = harness_idemctl(out, sizeof out, "--root '%s' backup "
	    "--with-workspace '%s'", a.root, dest);
	if (status != 0)
		fail_msg("idemctl backup into an empty DEST (%d): %s", status,
		    out);
	status = harness_idemctl(out, sizeof out, "--root '%s' verify", dest);
	if (status != 0)
		fail_msg("idemctl verify of the backup (%d): %s", status, out);

	/* DEST below the root: taken, and never copied into itself. */
	status = harness_idemctl(out, sizeof out, "--root '%s' backup "
	    "--with-workspace '%s/shared/bk'", a.root, a.root);
	if (status != 0)
		fail_msg("idemctl backup into the root's shared/ (%d): %s",
		    status, out);
	snprintf(path, sizeof path, "%s/shared/bk/shared/bk", a.root);
	assert_int_equal(access(path, F_OK), -1);
	status = harness_idemctl(out, sizeof out,
	    "--root '%s/shared/bk' verify", a.root);
	if (status != 0)
		fail_msg("idemctl verify of shared/bk (%d): %s", status, out);

	/* A hole in the journal's segments: damage, named, nothing taken. */
	assert_int_equal(harness_stop(&a), 0);
	assert_int_equal(harness_write(&a, ".idem/journal/00000000000000ff.jnl",
	    ""), 0);
	snprintf(path, sizeof path, "rm -rf '%s'", dest);
	assert_int_equal(system(path), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' backup '%s'",
	    a.root, dest);
	assert_int_equal(status, 1);
	assert_non_null(strstr(out, "not consecutive"));
	snprintf(path, sizeof path, "%s/.idem/backup-info", dest);
	assert_int_equal(access(path, F_OK), -1);
	harness_cleanup(&a);
	snprintf(path, sizeof path, "rm -rf '%s' '%s'", dest, outside);
	assert_int_equal(system(path), 0);
}

/*
 * An idem REPORT file whose submission the copy does not know is left
 * out of the copy even when its number is below the cut: numbers reach
 * the journal out of order (one worker's reservation of N+1 durable
 * before another's of N), so the cut goes by what the copy records,
 * not by number.  Made here by hand: a report of the broker's, its
 * client_submission_id changed to a task's, under an earlier day's
 * number.
 */
static void
test_backup_leaves_out_a_report_the_copy_does_not_know(void **state)
{
	struct broker		 a;
	struct idem_conn	*c;
	char			 acks[400], dest[400], cmd[1600], out[4096];
	int			 ack_fd, status;

	(void)state;
	harness_fresh_root(&a);
	harness_must_start(&a, NULL, NULL);
	snprintf(acks, sizeof acks, "%s.acks", a.root);
	snprintf(dest, sizeof dest, "%s.dest", a.root);
	assert_true((ack_fd = open(acks, O_WRONLY | O_CREAT | O_TRUNC |
	    O_APPEND | O_CLOEXEC, 0600)) != -1);
	assert_non_null(c = harness_connect(&a));
	with_reports = 1;
	assert_int_equal(create_pair(c, "bk-known-report", ack_fd), 0);
	with_reports = 0;
	/* Its key a task's: the file's number, not its key, is unknown. */
	assert_int_equal(create_pair(c, "bk-unknown-report", ack_fd), 0);
	idem_close(c);
	close(ack_fd);
	unlink(acks);
	assert_int_equal(harness_stop(&a), 0);
	snprintf(cmd, sizeof cmd, "cd '%s/reports' && f=$(ls REPORT-*.md) && "
	    "sed 's/bk-known-report/bk-unknown-report/' \"$f\" >"
	    "\"$(echo \"$f\" | sed 's/^REPORT-[0-9]*-/REPORT-20200101-/')\"",
	    a.root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(harness_count_reports(&a), 2);

	status = harness_idemctl(out, sizeof out, "--root '%s' backup "
	    "--with-workspace '%s'", a.root, dest);
	if (status != 0)
		fail_msg("idemctl backup (%d): %s", status, out);
	/* Left out and said so; the known report kept. */
	snprintf(cmd, sizeof cmd, "test -z \"$(ls '%s/reports' | grep "
	    "'^REPORT-20200101-')\"", dest);
	if (system(cmd) != 0)
		fail_msg("the unknown report stayed in the copy");
	snprintf(cmd, sizeof cmd, "ls '%s/reports' | grep -q '^REPORT-'",
	    dest);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof cmd, "grep -q '^after_cut: 1$' "
	    "'%s/.idem/backup-info'", dest);
	assert_int_equal(system(cmd), 0);
	status = harness_idemctl(out, sizeof out, "--root '%s' verify", dest);
	if (status != 0)
		fail_msg("idemctl verify of the backup (%d): %s", status, out);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dest);
	assert_int_equal(system(cmd), 0);
	harness_cleanup(&a);
}

/*
 * DEST swapped for a symlink to a live root while the backup runs
 * (held after DEST is opened, before the journal is copied): the torn
 * tail the copy's replay cuts is cut in the directory the backup
 * opened, never through the name, so the live root's journal keeps its
 * bytes and the copy lands in the original DEST.
 */
static void
test_backup_dest_swapped_for_a_symlink(void **state)
{
	struct broker	 a;
	struct stat	 st;
	char		 dest[400], moved[450], fifo[400], seg[900];
	char		 name[256], copy[900], out[1400], env[450];
	char		*text;
	pid_t		 child;
	off_t		 live;
	int		 fd, status;
	FILE		*p;

	(void)state;
#ifndef IDEM_FAULT_INJECTION
	harness_skip("IDEM_BACKUP_HOLD needs configure --enable-fault-injection");
#endif
	harness_fresh_root(&a);
	harness_must_start(&a, NULL, NULL);
	json_decref(harness_submit(&a, "bk-swap-1", "one task"));
	assert_int_equal(harness_stop(&a), 0);
	/* A torn tail on the live root's last segment: the replay cuts it. */
	snprintf(out, sizeof out, "ls '%s/.idem/journal' | grep 'jnl$' | "
	    "tail -n 1", a.root);
	assert_non_null(p = popen(out, "r"));
	assert_non_null(fgets(name, sizeof name, p));
	pclose(p);
	name[strcspn(name, "\n")] = '\0';
	snprintf(seg, sizeof seg, "%s/.idem/journal/%s", a.root, name);
	assert_non_null(p = fopen(seg, "a"));
	fputs("torn", p);
	fclose(p);
	assert_int_equal(stat(seg, &st), 0);
	live = st.st_size;

	snprintf(dest, sizeof dest, "%s.dest", a.root);
	snprintf(moved, sizeof moved, "%s.moved", dest);
	snprintf(fifo, sizeof fifo, "%s.hold", a.root);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(env, sizeof env, "IDEM_BACKUP_HOLD=%s", fifo);
	snprintf(out, sizeof out, "%s.out", a.root);
	child = spawn_backup(a.root, dest, 1, env, out);
	/* Open for writing returns once the backup waits, DEST open. */
	assert_true((fd = open(fifo, O_WRONLY | O_CLOEXEC)) != -1);
	assert_int_equal(rename(dest, moved), 0);
	assert_int_equal(symlink(a.root, dest), 0);
	assert_int_equal(write(fd, "go", 2), 2);
	close(fd);
	assert_int_equal(waitpid(child, &status, 0), child);
	text = read_file(out, 8192);
	print_message("backup with DEST swapped (status %d): %s", status,
	    text);
	unlink(out);

	/* The live journal untouched, nothing of the backup's in the root. */
	assert_int_equal(stat(seg, &st), 0);
	if (st.st_size != live)
		fail_msg("the live segment %s was cut from %lld to %lld bytes "
		    "through the swapped DEST", seg, (long long)live,
		    (long long)st.st_size);
	snprintf(out, sizeof out, "%s/.idem/backup-info", a.root);
	assert_int_equal(access(out, F_OK), -1);
	/* Succeeded: the copy is whole in the original DEST, its tail cut. */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		snprintf(copy, sizeof copy, "%s/.idem/journal/%s", moved,
		    name);
		assert_int_equal(stat(copy, &st), 0);
		assert_int_equal(st.st_size, live - 4);
		snprintf(out, sizeof out, "%s/.idem/backup-info", moved);
		assert_int_equal(access(out, F_OK), 0);
	}
	free(text);
	unlink(dest);
	unlink(fifo);
	snprintf(out, sizeof out, "rm -rf '%s'", moved);
	assert_int_equal(system(out), 0);
	harness_cleanup(&a);
}

/* The path of root's last journal segment, into out. */
static void
last_segment(const char *root, char *out, size_t size)
{
	char	 cmd[600], name[256];
	FILE	*p;

	snprintf(cmd, sizeof cmd, "ls '%s/.idem/journal' | grep 'jnl$' | "
	    "tail -n 1", root);
	assert_non_null(p = popen(cmd, "r"));
	assert_non_null(fgets(name, sizeof name, p));
	pclose(p);
	name[strcspn(name, "\n")] = '\0';
	snprintf(out, size, "%s/.idem/journal/%s", root, name);
}

/*
 * A round of the broker going over the live segment's zero tail while
 * the backup copies it: the copy may hold zeros where a record is, then
 * later records whole, which the copy's replay calls corruption.  The
 * backup copies that segment again (doc/journal.md, "Readers beside a
 * live broker") and succeeds with every record.  Made to order on a
 * stopped root: the last 16 bytes of the first run's last record are
 * zeroed (the second run's round follows, naming a later round start,
 * so it is corruption in either format), and the backup, held once its
 * copy is made (IDEM_BACKUP_COPIED), finds them back when it copies
 * again.  Fails if the backup does not copy again.
 */
static void
test_backup_copies_a_live_round_again(void **state)
{
	struct broker	 a;
	struct stat	 st;
	char		 seg[900], dest[400], fifo[400], env[450], out[1400];
	char		 copy[1400], *text;
	uint8_t		 block[16], zeros[16];
	off_t		 s1, s2;
	pid_t		 child;
	int		 fd, hold, status;

	(void)state;
#ifndef IDEM_FAULT_INJECTION
	harness_skip("IDEM_BACKUP_COPIED needs configure "
	    "--enable-fault-injection");
#endif
	harness_fresh_root(&a);
	harness_must_start(&a, NULL, NULL);
	json_decref(harness_submit(&a, "bk-round-1", "one task"));
	assert_int_equal(harness_stop(&a), 0);
	/* A clean stop cuts the zero tail: the size is the records' end. */
	last_segment(a.root, seg, sizeof seg);
	assert_int_equal(stat(seg, &st), 0);
	s1 = st.st_size;
	harness_must_start(&a, NULL, NULL);
	json_decref(harness_submit(&a, "bk-round-2", "another task"));
	assert_int_equal(harness_stop(&a), 0);
	last_segment(a.root, copy, sizeof copy);
	assert_string_equal(copy, seg);
	assert_int_equal(stat(seg, &st), 0);
	s2 = st.st_size;
	assert_true(s2 > s1 && s1 > 64);

	/* Not yet there as the backup reads: zeros, records after. */
	memset(zeros, 0, sizeof zeros);
	assert_true((fd = open(seg, O_RDWR | O_CLOEXEC)) != -1);
	assert_int_equal(pread(fd, block, sizeof block, s1 - 16), 16);
	assert_int_equal(pwrite(fd, zeros, sizeof zeros, s1 - 16), 16);

	snprintf(dest, sizeof dest, "%s.dest", a.root);
	snprintf(fifo, sizeof fifo, "%s.copied", a.root);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(env, sizeof env, "IDEM_BACKUP_COPIED=%s", fifo);
	snprintf(out, sizeof out, "%s.out", a.root);
	child = spawn_backup(a.root, dest, 0, env, out);
	/* Open for writing returns once the backup's copy is made. */
	assert_true((hold = open(fifo, O_WRONLY | O_CLOEXEC)) != -1);
	/* The bytes land. */
	assert_int_equal(pwrite(fd, block, sizeof block, s1 - 16), 16);
	assert_int_equal(write(hold, "go", 2), 2);
	close(hold);
	close(fd);
	assert_int_equal(waitpid(child, &status, 0), child);
	text = read_file(out, 8192);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("idemctl backup over a round in flight (status %d): "
		    "%s", status, text);
	free(text);
	unlink(out);
	/* The copy holds every record: the copy made again, nothing cut. */
	snprintf(copy, sizeof copy, "%s/.idem/journal/%s", dest,
	    strrchr(seg, '/') + 1);
	assert_int_equal(stat(copy, &st), 0);
	assert_int_equal(st.st_size, s2);
	unlink(fifo);
	snprintf(out, sizeof out, "rm -rf '%s'", dest);
	assert_int_equal(system(out), 0);
	harness_cleanup(&a);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backup_under_load_restores_every_receipt),
		cmocka_unit_test(test_backup_holds_pruned_segments),
		cmocka_unit_test(test_backup_refuses_a_dest_in_use),
		cmocka_unit_test(
		    test_backup_leaves_out_a_report_the_copy_does_not_know),
		cmocka_unit_test(test_backup_dest_swapped_for_a_symlink),
		cmocka_unit_test(test_backup_copies_a_live_round_again),
	};

	harness_watchdog(240);
	return harness_exit_status(FILTER_RUN(tests));
}
