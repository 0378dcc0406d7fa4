/* SPDX-License-Identifier: ISC */
/*
 * test_trust.c: a broker among neighbours it must not trust or harm.
 * hello names the broker (its ops from the op table, its pid and root);
 * a second broker never displaces one that answers on a socket, nor
 * removes a file that is not a socket; a stale socket is replaced; the
 * refusals at start-up say what is wrong and what is needed.
 */
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
#include "protocol.h"

static void
assert_log_has(const struct broker *b, const char *what)
{
	char	*log = harness_read_log(b);

	if (log == NULL || strstr(log, what) == NULL)
		fail_msg("the log of the broker on %s does not say \"%s\":\n%s",
		    b->root, what, log != NULL ? log : "(no log)");
	free(log);
}

/* A second broker on its own root, with extra arguments. */
static void
second_root(struct broker *b)
{
	harness_fresh_root(b);
}

/* The mtime of path itself (a link is not followed), in ns. */
static long long
mtime_of(const char *path)
{
	struct stat	st;

	assert_int_equal(lstat(path, &st), 0);
	return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

/* Write a file with known content; returns its mtime (ns). */
static long long
plant_file(const char *path, const char *content)
{
	int	fd;

	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) !=
	    -1);
	assert_int_equal(write(fd, content, strlen(content)),
	    (ssize_t)strlen(content));
	close(fd);
	return mtime_of(path);
}

static void
assert_file_untouched(const char *path, const char *content,
    long long mtime)
{
	struct stat	st;
	char		buf[256];
	ssize_t		n;
	int		fd;

	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(mtime_of(path), mtime);
	assert_true((fd = open(path, O_RDONLY)) != -1);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, content);
}

/* ---- hello ------------------------------------------------------------- */

/*
 * hello lists the ops, and every op it lists is served (not unknown_op),
 * so the dispatcher and hello read the same table; it names the master's
 * pid and the root's real path.
 */
static void
test_hello_names_ops_pid_root(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *ops, *op;
	char		*real;
	size_t		 i;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	reply = harness_call_once(b, json_pack("{s:s}", "op", "hello"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	assert_true(json_is_integer(json_object_get(reply, "pid")));
	assert_int_equal(json_integer_value(json_object_get(reply, "pid")),
	    b->pid);
	assert_non_null(real = realpath(b->root, NULL));
	assert_string_equal(harness_str(reply, "root"), real);
	free(real);
	ops = json_object_get(reply, "ops");
	assert_true(json_is_array(ops));
	assert_true(json_array_size(ops) >= 6);
	assert_string_equal(json_string_value(json_array_get(ops, 0)),
	    "hello");
	json_array_foreach(ops, i, op) {
		json_t	*r;

		assert_true(json_is_string(op));
		r = harness_call_once(b, json_pack("{s:s}", "op",
		    json_string_value(op)));
		assert_non_null(r);
		if (json_is_false(json_object_get(r, "ok")))
			assert_string_not_equal(harness_str(json_object_get(r,
			    "error"), "code"), "unknown_op");
		json_decref(r);
	}
	json_decref(reply);
	/* And an op it does not list is unknown. */
	reply = harness_call_once(b, json_pack("{s:s}", "op", "nope"));
	assert_non_null(reply);
	assert_string_equal(harness_str(json_object_get(reply, "error"),
	    "code"), "unknown_op");
	json_decref(reply);
	harness_finish(b);
}

/* ---- the socket -------------------------------------------------------- */

/*
 * Broker A serves root A; broker B on root B is pointed at A's socket.
 * B refuses to start, naming the path and A's pid; A keeps serving (a
 * retry of an id A committed is reused, from A), and B created no task.
 */
static void
test_second_broker_never_takes_a_live_socket(void **state)
{
	struct broker	*a = *state, b;
	char		 pid[64];
	json_t		*reply;
	char		*first;

	assert_int_equal(harness_start(a, NULL, NULL), 0);
	reply = harness_call_once(a, harness_write_task("trust-1", "mine"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	first = harness_receipt_text(reply);
	json_decref(reply);

	second_root(&b);
	assert_int_equal(harness_start(&b, (const char *const []){ "--socket",
	    a->socket, NULL }, NULL), -1);
	assert_int_not_equal(b.exit_status, 0);
	assert_log_has(&b, a->socket);
	snprintf(pid, sizeof pid, "pid %ld", (long)a->pid);
	assert_log_has(&b, pid);

	reply = harness_call_once(a, harness_write_task("trust-1", "mine"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	{
		char	*again = harness_receipt_text(reply);

		assert_string_equal(again, first);
		free(again);
	}
	json_decref(reply);
	free(first);
	/* The reply came from A: hello there still names A. */
	reply = harness_call_once(a, json_pack("{s:s}", "op", "hello"));
	assert_int_equal(json_integer_value(json_object_get(reply, "pid")),
	    a->pid);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(a), 1);
	assert_int_equal(harness_count_tasks(&b), 0);
	harness_cleanup(&b);
	harness_finish(a);
}

/* A listening socket that accepts (in its backlog) and never answers. */
static int
mute_listener(const char *path)
{
	struct sockaddr_un	sun;
	int			fd;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	assert_true(strlen(path) < sizeof sun.sun_path);
	memcpy(sun.sun_path, path, strlen(path));
	assert_true((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) !=
	    -1);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
	return fd;
}

/*
 * Another program listening there (it never answers hello): refused,
 * its socket still in place.  A socket nobody listens on (a dead
 * broker's): replaced, and the broker serves on it.
 */
static void
test_socket_of_another_program_and_stale_socket(void **state)
{
	struct broker	*b = *state;
	char		 path[400];
	struct stat	 st;
	int		 fd;

	snprintf(path, sizeof path, "%s.other.sock", b->root);
	fd = mute_listener(path);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(harness_start(b, (const char *const []){ "--socket",
	    path, NULL }, NULL), -1);
	assert_int_not_equal(b->exit_status, 0);
	assert_log_has(b, path);
	assert_log_has(b, "another program");
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	close(fd);

	/* Closed: the file stays, nobody answers (ECONNREFUSED). */
	assert_int_equal(lstat(path, &st), 0);
	assert_true(strlen(path) < sizeof b->socket);
	memcpy(b->socket, path, strlen(path) + 1);
	assert_int_equal(harness_start(b, (const char *const []){ "--socket",
	    path, NULL }, NULL), 0);
	{
		json_t	*reply = harness_call_once(b, json_pack("{s:s}", "op",
		    "hello"));

		assert_non_null(reply);
		assert_int_equal(json_integer_value(json_object_get(reply,
		    "pid")), b->pid);
		json_decref(reply);
	}
	harness_finish(b);
	unlink(path);
}

/*
 * A regular file, or a symlink to a live broker's socket, at the socket
 * path: refused, and the file (or link) is left exactly as it was.
 */
static void
test_socket_path_not_a_socket_is_left_alone(void **state)
{
	struct broker	*a = *state, b;
	char		 file[400], link[400], target[400];
	long long	 mtime;
	ssize_t		 n;

	snprintf(file, sizeof file, "%s.not-a-socket", a->root);
	mtime = plant_file(file, "precious\n");
	second_root(&b);
	assert_int_equal(harness_start(&b, (const char *const []){ "--socket",
	    file, NULL }, NULL), -1);
	assert_int_not_equal(b.exit_status, 0);
	assert_log_has(&b, file);
	assert_log_has(&b, "not a socket");
	assert_file_untouched(file, "precious\n", mtime);
	unlink(file);

	assert_int_equal(harness_start(a, NULL, NULL), 0);
	snprintf(link, sizeof link, "%s.link.sock", a->root);
	assert_int_equal(symlink(a->socket, link), 0);
	assert_int_equal(harness_start(&b, (const char *const []){ "--socket",
	    link, NULL }, NULL), -1);
	assert_log_has(&b, link);
	n = readlink(link, target, sizeof target - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, a->socket);
	{
		json_t	*reply = harness_call_once(a, json_pack("{s:s}", "op",
		    "hello"));

		assert_non_null(reply);
		assert_int_equal(json_integer_value(json_object_get(reply,
		    "pid")), a->pid);
		json_decref(reply);
	}
	unlink(link);
	harness_cleanup(&b);
	harness_finish(a);
}

/* ---- connections per peer --------------------------------------------- */

#define TRUST_HOLDER_CONNECTIONS	3000	/* over --max-connections too */

/*
 * Open n connections and say hello on each: how many were served, and
 * how many were refused with reason (each retryable); any other answer
 * fails.  The served ones stay open in fds.
 */
static void
open_and_classify(struct broker *b, int *fds, int n, const char *reason,
    int *served, int *refused)
{
	json_t	*reply, *error;
	char	*line;
	int	 i;

	*served = *refused = 0;
	for (i = 0; i < n; i++)
		assert_true((fds[i] = harness_raw_connect(b)) != -1);
	for (i = 0; i < n; i++) {
		/* A refused one is closed already; its line still comes. */
		(void)harness_raw_send(fds[i], "{\"op\":\"hello\"}");
		if ((line = harness_raw_read_line(fds[i])) == NULL)
			fail_msg("connection %d of %d: no line at all", i, n);
		assert_non_null(reply = json_loads(line, 0, NULL));
		free(line);
		if (json_is_true(json_object_get(reply, "ok"))) {
			assert_string_equal(harness_str(reply, "server"),
			    "idemd");
			(*served)++;
		} else {
			error = json_object_get(reply, "error");
			assert_string_equal(harness_str(error, "code"),
			    "too_many_connections");
			assert_string_equal(harness_str(error, "reason"),
			    reason);
			harness_assert_bool(error, "retryable", 1);
			close(fds[i]);
			fds[i] = -1;
			(*refused)++;
		}
		json_decref(reply);
	}
}

static void
close_all(int *fds, int n)
{
	int	i;

	for (i = 0; i < n; i++) {
		if (fds[i] != -1)
			close(fds[i]);
		fds[i] = -1;
	}
}

static int
run_idemctl_status(const struct broker *b)
{
	const char	*idemctl = getenv("IDEMCTL");
	char		 cmd[1024];
	int		 status;

	if (idemctl == NULL)
		idemctl = "contrib/idemctl";
	snprintf(cmd, sizeof cmd, "'%s' --root '%s' status >/dev/null",
	    idemctl, b->root);
	status = system(cmd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * One process opens thousands of idle connections (more than
 * --max-connections, left at its default): it is served 64 of them (the
 * per-pid default, across both workers), every other one is refused
 * with a retryable reason, and meanwhile another process's hello and
 * idemctl status are served at once.
 */
static void
test_one_process_cannot_lock_out_others(void **state)
{
	struct broker	*b = *state;
	int		 report[2], go[2], counts[2], served, refused, *fds;
	pid_t		 holder;
	json_t		*reply;
	char		 c;

	harness_raise_nofile(TRUST_HOLDER_CONNECTIONS + 200);
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	assert_int_equal(pipe(report), 0);
	assert_int_equal(pipe(go), 0);
	holder = fork();
	assert_true(holder != -1);
	if (holder == 0) {
		close(report[0]);
		close(go[1]);
		fds = calloc(TRUST_HOLDER_CONNECTIONS, sizeof *fds);
		if (fds == NULL)
			_exit(1);
		open_and_classify(b, fds, TRUST_HOLDER_CONNECTIONS,
		    "max_connections_per_pid", &served, &refused);
		counts[0] = served;
		counts[1] = refused;
		if (write(report[1], counts, sizeof counts) != sizeof counts)
			_exit(1);
		/* Hold them until the other process is done. */
		(void)read(go[0], &c, 1);
		close_all(fds, TRUST_HOLDER_CONNECTIONS);
		_exit(0);
	}
	close(report[1]);
	close(go[0]);
	assert_int_equal(read(report[0], counts, sizeof counts),
	    sizeof counts);
	assert_int_equal(counts[0], IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID);
	assert_int_equal(counts[1], TRUST_HOLDER_CONNECTIONS -
	    IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID);

	/* The holder still holds its 64: another process is served. */
	reply = harness_call_once(b, json_pack("{s:s}", "op", "hello"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	assert_int_equal(run_idemctl_status(b), 0);

	assert_int_equal(write(go[1], "x", 1), 1);
	assert_int_equal(waitpid(holder, &served, 0), holder);
	assert_true(WIFEXITED(served) && WEXITSTATUS(served) == 0);
	close(report[0]);
	close(go[1]);
	harness_finish(b);
}

/*
 * --max-connections-per-uid counts every process of the user together:
 * with 10, a child holding 6 leaves this process 4; once the child is
 * gone, its 6 are given back.  One worker, so that a hello answered on a
 * connection kept open proves the closes before it were counted out
 * (as connection_cap_refuses_one_too_many in test_protocol.c).
 */
static void
test_per_uid_limit_counts_all_processes(void **state)
{
	struct broker	*b = *state;
	int		 report[2], go[2], fds[10], served, refused, status, i;
	pid_t		 child;
	json_t		*reply;
	char		*line, c;

	assert_int_equal(harness_start(b, (const char *const []){
	    "--workers", "1", "--max-connections-per-uid", "10", NULL }, NULL),
	    0);
	assert_int_equal(pipe(report), 0);
	assert_int_equal(pipe(go), 0);
	child = fork();
	assert_true(child != -1);
	if (child == 0) {
		close(report[0]);
		close(go[1]);
		open_and_classify(b, fds, 6, "max_connections_per_uid", &served,
		    &refused);
		if (write(report[1], &served, sizeof served) != sizeof served)
			_exit(1);
		(void)read(go[0], &c, 1);
		close_all(fds, 6);
		_exit(0);
	}
	close(report[1]);
	close(go[0]);
	assert_int_equal(read(report[0], &served, sizeof served),
	    sizeof served);
	assert_int_equal(served, 6);
	open_and_classify(b, fds, 6, "max_connections_per_uid", &served,
	    &refused);
	assert_int_equal(served, 4);
	assert_int_equal(refused, 2);
	/* Keep one served connection (the first), close the rest. */
	for (i = 1; i < 6; i++) {
		if (fds[i] != -1)
			close(fds[i]);
	}
	assert_true(fds[0] != -1);

	/* The child lets go and exits: its 6 are given back. */
	assert_int_equal(write(go[1], "x", 1), 1);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(report[0]);
	close(go[1]);
	assert_int_equal(harness_raw_send(fds[0], "{\"op\":\"hello\"}"), 0);
	assert_non_null(line = harness_raw_read_line(fds[0]));
	assert_non_null(reply = json_loads(line, 0, NULL));
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(line);

	/* One held: nine more are served, a tenth is refused. */
	open_and_classify(b, fds + 1, 9, "max_connections_per_uid", &served,
	    &refused);
	assert_int_equal(served, 9);
	assert_int_equal(refused, 0);
	{
		int	extra;

		open_and_classify(b, &extra, 1, "max_connections_per_uid",
		    &served, &refused);
		assert_int_equal(refused, 1);
	}
	close_all(fds, 10);
	harness_finish(b);
}

/*
 * A worker that dies holding connections gives back its share of each
 * peer's count (the master forgets a dead worker's peers): with one
 * worker and a per-pid limit of 8, kill it while this process holds 8,
 * and the replacement serves 8 again, and refuses a ninth.
 */
static void
test_dead_worker_gives_back_peer_counts(void **state)
{
	struct broker	*b = *state;
	int		 fds[9], served, refused, i;
	pid_t		 workers[4];
	char		 buf[64];

	assert_int_equal(harness_start(b, (const char *const []){
	    "--workers", "1", "--max-connections-per-pid", "8", NULL }, NULL),
	    0);
	open_and_classify(b, fds, 9, "max_connections_per_pid", &served,
	    &refused);
	assert_int_equal(served, 8);
	assert_int_equal(refused, 1);
	assert_int_equal(harness_workers(b, workers, 4), 1);
	assert_int_equal(kill(workers[0], SIGKILL), 0);
	/* Its connections end with it: wait for each end of stream. */
	for (i = 0; i < 9; i++) {
		if (fds[i] == -1)
			continue;
		while (read(fds[i], buf, sizeof buf) > 0)
			;
	}
	close_all(fds, 9);
	/* The replacement accepts from the backlog, after the master reaped. */
	open_and_classify(b, fds, 9, "max_connections_per_pid", &served,
	    &refused);
	assert_int_equal(served, 8);
	assert_int_equal(refused, 1);
	close_all(fds, 9);
	harness_finish(b);
}

/* ---- clear refusals ---------------------------------------------------- */

/*
 * Ten submissions, restarted with --capacity 4 (issue #15: the table is a
 * cache, not the history): idemd starts, and every id is still answered
 * `reused` with its first receipt's task_id, from the table or the index;
 * no second file is written.
 */
static void
test_smaller_capacity_keeps_every_receipt(void **state)
{
	struct broker	*b = *state;
	char		 id[32];
	char		*first[10];
	json_t		*reply;
	int		 i;

	assert_int_equal(harness_start(b, (const char *const []){
	    "--capacity", "16", NULL }, NULL), 0);
	for (i = 0; i < 10; i++) {
		snprintf(id, sizeof id, "cap-%d", i);
		reply = harness_call_once(b, harness_write_task(id, id));
		assert_non_null(reply);
		assert_string_equal(harness_str(reply, "disposition"),
		    "created");
		first[i] = strdup(harness_receipt_str(reply, "task_id"));
		assert_non_null(first[i]);
		json_decref(reply);
	}
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(harness_start(b, (const char *const []){
	    "--capacity", "4", NULL }, NULL), 0);
	for (i = 0; i < 10; i++) {
		snprintf(id, sizeof id, "cap-%d", i);
		reply = harness_call_once(b, harness_write_task(id, id));
		assert_non_null(reply);
		assert_string_equal(harness_str(reply, "disposition"),
		    "reused");
		assert_string_equal(harness_receipt_str(reply, "task_id"),
		    first[i]);
		json_decref(reply);
		free(first[i]);
	}
	assert_int_equal(harness_count_tasks(b), 10);
	harness_finish(b);
}

/* A process's argv[0] (its command line up to the first NUL). */
static void
read_argv0(pid_t pid, char *buf, size_t size)
{
	char	path[64];
	ssize_t	got;
	int	fd;

	buf[0] = '\0';
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	if ((fd = open(path, O_RDONLY)) == -1)
		return;
	got = read(fd, buf, size - 1);
	close(fd);
	buf[got > 0 ? got : 0] = '\0';
}

#define TRUST_EXEC_CALLS	2000

/*
 * Each worker says what it is in ps: "idemd: worker N", not "exe".  A
 * worker shows in /proc at its fork, before its exec (whose command
 * line this is): calls make round trips through the live workers until
 * both have one, up to a bound (as workers_are_exec_d in test_crash.c).
 */
static void
test_workers_are_named_in_ps(void **state)
{
	struct broker	*b = *state;
	pid_t		 workers[4];
	char		 buf[512], want[32];
	int		 n, i, calls, seen[2] = { 0, 0 }, index, named;
	json_t		*reply;

	assert_int_equal(harness_start(b, (const char *const []){
	    "--workers", "2", NULL }, NULL), 0);
	n = harness_workers(b, workers, 4);
	assert_int_equal(n, 2);
	for (calls = 0; calls < TRUST_EXEC_CALLS; calls++) {
		for (i = 0, named = 0; i < n; i++) {
			read_argv0(workers[i], buf, sizeof buf);
			named += strncmp(buf, "idemd: worker ", 14) == 0;
		}
		if (named == n)
			break;
		reply = harness_call_once(b, json_pack("{s:s}", "op",
		    "hello"));
		assert_non_null(reply);
		json_decref(reply);
	}
	for (i = 0; i < n; i++) {
		read_argv0(workers[i], buf, sizeof buf);
		if (sscanf(buf, "idemd: worker %d", &index) != 1)
			fail_msg("worker %ld is named \"%s\" after %d calls",
			    (long)workers[i], buf, calls);
		assert_true(index == 0 || index == 1);
		snprintf(want, sizeof want, "idemd: worker %d", index);
		assert_string_equal(buf, want);
		seen[index]++;
	}
	assert_int_equal(seen[0], 1);
	assert_int_equal(seen[1], 1);
	harness_finish(b);
}

/* ---- symlinks ------------------------------------------------------------ */

/* Something outside the root a symlink points at, and its state. */
struct outside {
	char		file[512];	/* a file with known content */
	char		dir[400];	/* a directory holding that file */
	long long	file_mtime;
	long long	dir_mtime;
};

static void
outside_make(const struct broker *b, struct outside *o)
{
	snprintf(o->dir, sizeof o->dir, "%s.outside", b->root);
	assert_int_equal(mkdir(o->dir, 0755), 0);
	snprintf(o->file, sizeof o->file, "%s/victim", o->dir);
	o->file_mtime = plant_file(o->file, "do not touch\n");
	o->dir_mtime = mtime_of(o->dir);
}

/* Untouched: the file's bytes and mtime, the directory's entries. */
static void
outside_check(const struct outside *o)
{
	DIR		*d;
	struct dirent	*e;
	int		 entries = 0;

	assert_file_untouched(o->file, "do not touch\n", o->file_mtime);
	assert_int_equal(mtime_of(o->dir), o->dir_mtime);
	assert_non_null(d = opendir(o->dir));
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			entries++;
	}
	closedir(d);
	assert_int_equal(entries, 1);
}

static void
outside_remove(struct outside *o)
{
	unlink(o->file);
	rmdir(o->dir);
}

/* mkdir -p of relpath's parent under the root, then a symlink there. */
static void
plant_link(const struct broker *b, const char *relpath, const char *target)
{
	char	path[1024], *p;

	snprintf(path, sizeof path, "%s/%s", b->root, relpath);
	for (p = path + strlen(b->root) + 1; (p = strchr(p, '/')) != NULL;
	    p++) {
		*p = '\0';
		assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
		*p = '/';
	}
	assert_int_equal(symlink(target, path), 0);
}

/*
 * A symlink at each name idemd opens at start-up (the lock, .idem, the
 * journal directory, a journal segment, a checkpoint, the inbox, reports,
 * _lifecycle), pointing out of the root: idemd refuses to start, names
 * the path, and what the link points at is untouched.
 */
static void
test_symlinks_refused_at_start(void **state)
{
	static const struct {
		const char	*name;
		int		 to_dir;	/* the link points at the dir */
		const char	*said;		/* the log names this */
	} cases[] = {
		{ ".idem/idemd.lock", 0, ".idem/idemd.lock" },
		{ ".idem", 1, ".idem" },
		{ ".idem/journal", 1, ".idem/journal" },
		{ ".idem/journal/0000000000000001.jnl", 0,
		    "0000000000000001.jnl" },
		{ ".idem/journal/checkpoint-0000000000000002.snap", 0,
		    "checkpoint-0000000000000002.snap" },
		{ "_lifecycle/inbox", 1, "_lifecycle/inbox" },
		{ "_lifecycle", 1, "_lifecycle" },
		{ "reports", 1, "reports" },
	};
	struct broker	*b = *state;
	struct outside	 o;
	size_t		 i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* The first case on the fixture's root, each next on its own. */
		if (i > 0) {
			harness_cleanup(b);
			harness_fresh_root(b);
		}
		outside_make(b, &o);
		plant_link(b, cases[i].name, cases[i].to_dir ? o.dir : o.file);
		if (harness_start(b, NULL, NULL) == 0)
			fail_msg("idemd started with a symlink at %s",
			    cases[i].name);
		assert_int_not_equal(b->exit_status, 0);
		assert_log_has(b, cases[i].said);
		outside_check(&o);
		outside_remove(&o);
	}
	harness_finish(b);
}

/*
 * While serving: a symlink at the name the next TASK (and REPORT) would
 * get is never written through (that number is skipped as used); a
 * stage directory that is a symlink out of the root is not searched (a
 * task only there is not found; numbers there do not count); a history
 * directory likewise.
 */
static void
test_symlinks_in_the_workspace_skipped(void **state)
{
	struct broker	*b = *state;
	struct outside	 o;
	char		 today[9], name[256], planted[256], path[512];
	char		 stage[400], lock[400];
	json_t		*reply;

	harness_today(today);
	outside_make(b, &o);
	/* A stage outside the root, with a task numbered 050 in it. */
	snprintf(stage, sizeof stage, "%s.stage", b->root);
	assert_int_equal(mkdir(stage, 0755), 0);
	snprintf(path, sizeof path, "%s/TASK-%s-050-PM-to-DEV.md", stage,
	    today);
	(void)plant_file(path, "---\nprotocol: \"fcop\"\n---\n");

	snprintf(planted, sizeof planted, "_lifecycle/inbox/TASK-%s-001-PM-"
	    "to-DEV.md", today);
	plant_link(b, planted, o.file);
	snprintf(name, sizeof name, "reports/REPORT-%s-001-DEV-to-PM.md",
	    today);
	plant_link(b, name, o.file);
	/* Stages FCoP tools fill and issues/, shared/: left as they are. */
	plant_link(b, "_lifecycle/done", stage);
	plant_link(b, "_lifecycle/elsewhere", stage);
	plant_link(b, "history", stage);
	plant_link(b, "shared", o.dir);
	/* A hard link at the lock: locked, never written. */
	snprintf(lock, sizeof lock, "%s/.idem", b->root);
	assert_int_equal(mkdir(lock, 0755), 0);
	snprintf(lock, sizeof lock, "%s/.idem/idemd.lock", b->root);
	assert_int_equal(link(o.file, lock), 0);
	assert_int_equal(harness_start(b, NULL, NULL), 0);

	reply = harness_call_once(b, harness_write_task("link-1", "linked"));
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	snprintf(name, sizeof name, "TASK-%s-002-PM-to-DEV", today);
	assert_string_equal(harness_receipt_str(reply, "task_id"), name);
	json_decref(reply);

	reply = harness_call_once(b, json_pack("{s:s, s:s, s:s, s:{s:s}}",
	    "op", "write_report", "task_id", name, "client_submission_id",
	    "link-r1", "report", "sender", "DEV"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	snprintf(name, sizeof name, "REPORT-%s-002-DEV-to-PM", today);
	assert_string_equal(harness_str(reply, "report_id"), name);
	json_decref(reply);

	/*
	 * The planted TASK name is not a task, nor is the one outside
	 * (behind a symlinked stage or history): reporting on either fails.
	 */
	snprintf(name, sizeof name, "TASK-%s-001-PM-to-DEV", today);
	reply = harness_call_once(b, json_pack("{s:s, s:s, s:{s:s}}",
	    "op", "write_report", "task_id", name, "report", "sender", "DEV"));
	assert_non_null(reply);
	assert_string_equal(harness_str(json_object_get(reply, "error"),
	    "code"), "task_not_found");
	json_decref(reply);
	snprintf(name, sizeof name, "TASK-%s-050-PM-to-DEV", today);
	reply = harness_call_once(b, json_pack("{s:s, s:s, s:{s:s}}",
	    "op", "write_report", "task_id", name, "report", "sender", "DEV"));
	assert_non_null(reply);
	assert_string_equal(harness_str(json_object_get(reply, "error"),
	    "code"), "task_not_found");
	json_decref(reply);
	outside_check(&o);
	harness_finish(b);
	outside_remove(&o);
	unlink(path);
	rmdir(stage);
}

/*
 * A second broker on a live broker's root opens the lock file but never
 * truncates it before holding the lock: the holder's pid stays in it.
 */
static void
test_lock_not_truncated_by_a_loser(void **state)
{
	struct broker	*a = *state, b;
	const char	*idemd = getenv("IDEMD");
	char		 want[32], cmd[1024], *text;
	int		 status;

	assert_int_equal(harness_start(a, NULL, NULL), 0);
	/* Not through the harness: it would wait for the root's lock. */
	memset(&b, 0, sizeof b);
	snprintf(b.root, sizeof b.root, "%s", a->root);
	snprintf(b.log, sizeof b.log, "%s.second.log", a->root);
	snprintf(cmd, sizeof cmd, "'%s' --root '%s' 2>'%s'",
	    idemd != NULL ? idemd : "broker/idemd", a->root, b.log);
	status = system(cmd);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	snprintf(want, sizeof want, "pid %ld", (long)a->pid);
	assert_log_has(&b, want);
	snprintf(want, sizeof want, "%ld\n", (long)a->pid);
	assert_non_null(text = harness_read(a, ".idem/idemd.lock"));
	assert_string_equal(text, want);
	free(text);
	unlink(b.log);
	harness_finish(a);
}

/*
 * A symlink planted, while the broker runs, at the name of the next
 * checkpoint's temporary file: the checkpoint fails (logged), the link's
 * target is untouched, nothing is lost (a restart reuses every receipt).
 */
static void
test_symlink_at_checkpoint_temporary(void **state)
{
	struct broker	*b = *state;
	struct outside	 o;
	char		 id[32];
	json_t		*reply;
	int		 i;

	outside_make(b, &o);
	assert_int_equal(harness_start(b, (const char *const []){
	    "--segment-bytes", "4096", NULL }, NULL), 0);
	plant_link(b, ".idem/journal/.checkpoint-0000000000000002.snap.tmp",
	    o.file);
	/* 4096 bytes of journal is a dozen creations: 40 rotate it. */
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "ckpt-link-%d", i);
		reply = harness_call_once(b, harness_write_task(id, id));
		assert_non_null(reply);
		assert_string_equal(harness_str(reply, "disposition"),
		    "created");
		json_decref(reply);
	}
	harness_wait_log(b, ".checkpoint-0000000000000002.snap.tmp", 1, 10000);
	outside_check(&o);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "ckpt-link-%d", i);
		reply = harness_call_once(b, harness_write_task(id, id));
		assert_non_null(reply);
		assert_string_equal(harness_str(reply, "disposition"),
		    "reused");
		json_decref(reply);
	}
	assert_int_equal(harness_count_tasks(b), 40);
	outside_check(&o);
	harness_finish(b);
	outside_remove(&o);
}

/* Entries of dir other than "." and "..". */
static int
entries_of(const char *dir)
{
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	assert_non_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Create ids prefix-from .. prefix-(to - 1): every one "created". */
static void
create_range(struct broker *b, const char *prefix, int from, int to)
{
	char	 id[32];
	json_t	*reply;
	int	 i;

	for (i = from; i < to; i++) {
		snprintf(id, sizeof id, "%s-%d", prefix, i);
		reply = harness_call_once(b, harness_write_task(id, id));
		assert_non_null(reply);
		assert_string_equal(harness_str(reply, "disposition"),
		    "created");
		json_decref(reply);
	}
}

/*
 * .idem/ swapped for a symlink while the broker runs (moved aside, and a
 * link to a directory outside the root planted at its name, with a
 * journal/, an index/ and an idemd.sock of its own): the journaler's
 * checkpoints, prunes and rotations go on in the directory the broker
 * opened at start-up; a worker killed then is replaced by one that opens
 * the index the master writes (through the master's descriptor, not the
 * path: by the path it found nothing and died at each start, or opened
 * the planted one) and answers a retry and a new id; nothing is written
 * into or removed from the outside, and at exit the socket file found
 * there is not taken for the broker's.
 */
static void
test_state_dir_swapped_while_running(void **state)
{
	struct broker	*b = *state;
	struct outside	 o;
	char		 journal[416], sock[416], index[416];	/* o.dir's */
	char		 idem[272], moved[272], real_journal[288];	/* root's */
	char		*task_id;
	json_t		*reply;
	pid_t		 workers[4];
	int		 checkpoints;

	outside_make(b, &o);
	snprintf(journal, sizeof journal, "%s/journal", o.dir);
	assert_int_equal(mkdir(journal, 0755), 0);
	snprintf(index, sizeof index, "%s/index", o.dir);
	assert_int_equal(mkdir(index, 0755), 0);
	snprintf(sock, sizeof sock, "%s/idemd.sock", o.dir);
	assert_int_equal(rename(o.file, sock), 0);
	snprintf(o.file, sizeof o.file, "%s", sock);

	assert_int_equal(harness_start(b, (const char *const []){
	    "--segment-bytes", "4096", "--workers", "1", NULL }, NULL), 0);
	create_range(b, "swap", 0, 10);
	reply = harness_must_call(b, harness_write_task("swap-0", "swap-0"));
	task_id = strdup(harness_receipt_str(reply, "task_id"));
	assert_non_null(task_id);
	json_decref(reply);
	checkpoints = harness_log_count(b, "checkpoint checkpoint-");

	snprintf(idem, sizeof idem, "%s/.idem", b->root);
	snprintf(moved, sizeof moved, "%s/.idem-moved", b->root);
	assert_int_equal(rename(idem, moved), 0);
	assert_int_equal(symlink(o.dir, idem), 0);
	snprintf(b->socket, sizeof b->socket, "%s/idemd.sock", moved);
	/* 4096 bytes of journal is a dozen creations: 40 rotate it. */
	create_range(b, "swap", 10, 50);
	harness_wait_log(b, "checkpoint checkpoint-", checkpoints + 2, 10000);

	/* The replacement accepts from the backlog once it has started. */
	assert_int_equal(harness_workers(b, workers, 4), 1);
	assert_int_equal(kill(workers[0], SIGKILL), 0);
	reply = harness_must_call(b, harness_write_task("swap-0", "swap-0"));
	harness_assert_outcome(reply, "reused", 0, 1, 0);
	assert_string_equal(harness_receipt_str(reply, "task_id"), task_id);
	json_decref(reply);
	free(task_id);
	create_range(b, "swap", 50, 51);	/* looked up in the index first */
	assert_int_equal(harness_stop(b), 0);

	/* Nothing outside; the checkpoints are in the real journal. */
	assert_int_equal(entries_of(journal), 0);
	assert_int_equal(entries_of(index), 0);
	/* journal/, index/, idemd.sock */
	assert_int_equal(entries_of(o.dir), 3);
	assert_file_untouched(o.file, "do not touch\n", o.file_mtime);
	snprintf(real_journal, sizeof real_journal, "%s/journal", moved);
	assert_true(entries_of(real_journal) >= 2);	/* a checkpoint, a segment */
	assert_int_equal(harness_log_count(b, "no longer the socket"), 1);

	/* Put back, every receipt is there. */
	assert_int_equal(unlink(idem), 0);
	assert_int_equal(rename(moved, idem), 0);
	snprintf(b->socket, sizeof b->socket, "%s/idemd.sock", idem);
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	assert_int_equal(harness_count_tasks(b), 51);
	harness_finish(b);
	unlink(o.file);
	rmdir(journal);
	rmdir(index);
	rmdir(o.dir);
}

/* ---- the log ----------------------------------------------------------- */

/*
 * What a hostile client puts in every string a log line may quote: a
 * whole forged line after a newline, a carriage return and terminal
 * escapes, other C0 controls and DEL, a bidi override, a C1 control.
 */
#define EVIL	"x\nidemd[1]: effect pay (y): evidence applied from " \
	"bank API\r\x1b[2K\x1b]0;t\x07\x01\x08\x0b\x1f\x7f" \
	"\xe2\x80\xae\xe2\x81\xa6\xc2\x9b\xe2\x80\xa8"

/* A line of the log: text a terminal shows as it is, one line. */
static int
log_line_safe(const unsigned char *p, size_t len)
{
	size_t		i = 0, n, k;
	unsigned	cp;

	while (i < len) {
		if (p[i] < 0x20 || p[i] == 0x7f)
			return 0;
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		n = p[i] >= 0xf0 && p[i] <= 0xf4 ? 4 : p[i] >= 0xe0 &&
		    p[i] <= 0xef ? 3 : p[i] >= 0xc2 && p[i] <= 0xdf ? 2 : 0;
		if (n == 0 || i + n > len)
			return 0;
		cp = p[i] & (0x7f >> n);
		for (k = 1; k < n; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
		    cp <= 0x9f || (cp >= 0x2028 && cp <= 0x202e) ||
		    (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e ||
		    cp == 0x200f || cp == 0x61c)
			return 0;
		i += n;
	}
	return 1;
}

/*
 * A request as the bytes a client sends (libidem would refuse some of
 * these strings before they left): the reply, or NULL if the broker
 * closed the connection instead.
 */
static json_t *
raw_call(struct broker *b, json_t *request)
{
	json_t	*reply;
	char	*text, *line;
	int	 fd;

	assert_non_null(request);
	assert_non_null(text = json_dumps(request, JSON_COMPACT));
	json_decref(request);
	assert_true((fd = harness_raw_connect(b)) != -1);
	assert_int_equal(harness_raw_send(fd, text), 0);
	line = harness_raw_read_line(fd);
	close(fd);
	free(text);
	reply = line != NULL ? json_loads(line, 0, NULL) : NULL;
	free(line);
	return reply;
}

static void
send_raw_lines(struct broker *b, const char *const *lines)
{
	char	*reply;
	int	 fd;

	for (; *lines != NULL; lines++) {
		assert_true((fd = harness_raw_connect(b)) != -1);
		assert_int_equal(harness_raw_send(fd, *lines), 0);
		reply = harness_raw_read_line(fd);	/* answered or closed */
		free(reply);
		close(fd);
	}
}

/*
 * Issue #27, item 5: a client wrote a whole "evidence applied" line of
 * its own into the log through evidence.source.  Every string a client
 * sends (ids, effect kinds, the task's and report's members, evidence,
 * unknown ops, lines that are not UTF-8) goes to a broker logging
 * at debug; afterwards every line of its log is one event with the
 * broker's prefix and no control character, invalid UTF-8 or bidi
 * control, and the evidence is logged on exactly one line, escaped.
 */
static void
test_client_text_cannot_forge_log_lines(void **state)
{
	struct broker	*b = *state;
	const char	*args[] = { "--log-level", "debug", NULL };
	const char	*raw[] = {
		"{\"op\":\"write_task\",\"client_submission_id\":\"a\xff\x1b"
		    "\",\"task\":{}}",
		"{\"op\":\"hel\xc0\xafo\x1b[31m\"}",
		"\xfe\xff\x1b]0;title\x07{",
		"{\"op\":\"effect_begin\",\"client_submission_id\":"
		    "\"\\u001b[1Aid\\r\",\"effect_kind\":\"pay\\n\","
		    "\"request\":{}}",
		NULL
	};
	json_t		*reply, *evidence;
	char		*log, *line, *next;
	int		 lines = 0, evidence_lines = 0;

	assert_int_equal(harness_start(b, args, NULL), 0);
	/* A task and a report whose every string is hostile. */
	json_decref(raw_call(b, harness_write_task(EVIL, EVIL)));
	json_decref(raw_call(b, json_pack("{s:s, s:s, "
	    "s:{s:s, s:s, s:s, s:s}}", "op", "write_task",
	    "client_submission_id", "evil-task", "task", "sender", EVIL,
	    "recipient", EVIL, "subject", EVIL, "body", EVIL)));
	json_decref(raw_call(b, json_pack("{s:s, s:s, s:s, "
	    "s:{s:s, s:s}}", "op", "write_report", "task_id", EVIL,
	    "client_submission_id", EVIL, "report", "sender", EVIL,
	    "body", EVIL)));
	/* An effect: its id and kind hostile, then a sane one's evidence. */
	json_decref(raw_call(b, json_pack("{s:s, s:s, s:s, s:{}}",
	    "op", "effect_begin", "client_submission_id", EVIL,
	    "effect_kind", EVIL, "request")));
	reply = raw_call(b, json_pack("{s:s, s:s, s:s, s:{}}",
	    "op", "effect_begin", "client_submission_id", "pay-1",
	    "effect_kind", "pay", "request"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	evidence = json_pack("{s:s, s:s, s:s}", "observed", "applied",
	    "source", EVIL, "result", EVIL);
	json_decref(raw_call(b, json_pack("{s:s, s:s, s:s, s:o}",
	    "op", "effect_resolve", "client_submission_id", "pay-1",
	    "effect_kind", "pay", "evidence", evidence)));
	json_decref(raw_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", EVIL,
	    "effect_kind", EVIL)));
	json_decref(raw_call(b, json_pack("{s:s}", "op", EVIL)));
	json_decref(raw_call(b, json_pack("{s:s, s:s}", "op",
	    "diagnose", EVIL, EVIL)));
	send_raw_lines(b, raw);
	/* The evidence is logged (escaped), and the broker stops. */
	/* Refused (the lease is live), and logged as refused. */
	harness_wait_log(b, "refused evidence applied (another caller holds "
	    "a live lease) from x", 1, 10000);
	assert_int_equal(harness_stop(b), 0);

	assert_non_null(log = harness_read_log(b));
	for (line = log; *line != '\0'; line = next) {
		next = strchr(line, '\n');
		assert_non_null(next);		/* every line ends */
		*next++ = '\0';
		lines++;
		if (!log_line_safe((unsigned char *)line, strlen(line)))
			fail_msg("an unsafe log line (line %d): %s", lines,
			    line);
		/* Its time ("2026-12-05T01:02:03.456Z "), then the broker. */
		if (strlen(line) < 25 || line[10] != 'T' || line[23] != 'Z' ||
		    strncmp(line + 25, "idemd[", 6) != 0 ||
		    strncmp(line + 25, "idemd[1]", 8) == 0)
			fail_msg("a line not the broker's: %s", line);
		if (strstr(line, "): refused evidence ") != NULL)
			evidence_lines++;
	}
	assert_true(lines > 3);
	assert_int_equal(evidence_lines, 1);
	free(log);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_names_ops_pid_root,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_second_broker_never_takes_a_live_socket,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_socket_of_another_program_and_stale_socket,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_socket_path_not_a_socket_is_left_alone,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_one_process_cannot_lock_out_others,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_per_uid_limit_counts_all_processes,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_dead_worker_gives_back_peer_counts,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_smaller_capacity_keeps_every_receipt,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(test_workers_are_named_in_ps,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(test_symlinks_refused_at_start,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_lock_not_truncated_by_a_loser,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_symlink_at_checkpoint_temporary,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_symlinks_in_the_workspace_skipped,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_state_dir_swapped_while_running,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_client_text_cannot_forge_log_lines,
		    harness_setup, harness_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return harness_exit_status(FILTER_RUN(tests));
}
