/* SPDX-License-Identifier: ISC */
/*
 * pgserver.c: a private PostgreSQL server for the cluster tests (see
 * pgserver.h).  Nothing here touches a server it did not start: the data
 * directory is a fresh mkdtemp, the socket lives in it, and stopping
 * signals the pid that directory's postmaster.pid names.  The guard
 * (guard_start) is what stops it when the test process dies first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pgserver.h"

/* How long start and stop may take on a loaded machine. */
#define PGSERVER_WAIT_SECONDS	120
/* Only a name for the socket file: nothing listens on TCP. */
#define PGSERVER_PORT		5432

static int
is_program(const char *dir, const char *name)
{
	char	path[512];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, X_OK) == 0;
}

/* IDEM_PG_BINDIR, else pg_config --bindir, else /usr/lib/postgresql/N/bin. */
static int
find_bindir(struct pgserver *s)
{
	const char	*env = getenv("IDEM_PG_BINDIR");
	FILE		*fp;
	glob_t		 g;
	size_t		 i;

	if (env != NULL && *env != '\0') {
		snprintf(s->bindir, sizeof s->bindir, "%s", env);
		return is_program(s->bindir, "initdb") &&
		    is_program(s->bindir, "pg_ctl");
	}
	if ((fp = popen("pg_config --bindir 2>/dev/null", "r")) != NULL) {
		if (fgets(s->bindir, sizeof s->bindir, fp) == NULL)
			s->bindir[0] = '\0';
		pclose(fp);
		s->bindir[strcspn(s->bindir, "\n")] = '\0';
		if (s->bindir[0] != '\0' && is_program(s->bindir, "initdb") &&
		    is_program(s->bindir, "pg_ctl"))
			return 1;
	}
	/* The highest version installed (glob sorts: 15 after 14). */
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0)
		return 0;
	for (i = g.gl_pathc; i > 0; i--) {
		snprintf(s->bindir, sizeof s->bindir, "%s", g.gl_pathv[i - 1]);
		*strrchr(s->bindir, '/') = '\0';
		if (is_program(s->bindir, "pg_ctl")) {
			globfree(&g);
			return 1;
		}
	}
	globfree(&g);
	return 0;
}

/*
 * Run argv as the server's user, output to the server's log; its exit
 * status (-1 if it could not run).
 */
static int
run_as_owner(struct pgserver *s, char *const argv[])
{
	pid_t	pid;
	int	status, fd;

	if ((pid = fork()) == -1)
		return -1;
	if (pid == 0) {
		if (geteuid() == 0 && (setgroups(0, NULL) != 0 ||
		    setgid(s->gid) != 0 || setuid(s->uid) != 0))
			_exit(126);
		/* Opened as the owner: pg_ctl -l appends to it too. */
		if ((fd = open(s->log, O_WRONLY | O_APPEND | O_CREAT, 0644))
		    != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		/* initdb refuses a cwd it cannot read; the data's parent is. */
		if (chdir(s->dir) != 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) == -1)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int
read_postmaster_pid(struct pgserver *s)
{
	char	path[256], line[64];
	FILE	*fp;

	snprintf(path, sizeof path, "%s/postmaster.pid", s->data);
	if ((fp = fopen(path, "r")) == NULL)
		return -1;
	if (fgets(line, sizeof line, fp) == NULL) {
		fclose(fp);
		return -1;
	}
	fclose(fp);
	s->pid = (pid_t)strtol(line, NULL, 10);
	return s->pid > 0 ? 0 : -1;
}

int
pgserver_wait_gone(pid_t pid, int seconds)
{
	struct pollfd	pfd;
	int		fd, n;

	if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) == -1)
		return errno == ESRCH ? 0 : -1;
	pfd.fd = fd;
	pfd.events = POLLIN;
	do
		n = poll(&pfd, 1, seconds * 1000);
	while (n == -1 && errno == EINTR);
	close(fd);
	return n == 1 ? 0 : -1;
}

char
pgserver_proc_state(pid_t pid)
{
	char	path[64], line[512], *p;
	FILE	*fp;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((fp = fopen(path, "r")) == NULL)
		return '?';
	p = fgets(line, sizeof line, fp);
	fclose(fp);
	if (p == NULL || (p = strrchr(line, ')')) == NULL)
		return '?';
	return p[2];
}

static int
remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/*
 * The guard, once the test process is gone: the postmaster that
 * postmaster.pid names, if that pid is still this data directory's
 * server (its working directory is the data directory: a pid reused by
 * another process is left alone), gets SIGQUIT (immediate shutdown),
 * SIGKILL if it is still there later; then the data directory goes.
 */
static void
guard_stop_server(const char *data)
{
	char		path[256], line[64];
	struct stat	cwd, dir;
	FILE		*fp;
	pid_t		pid = 0;

	snprintf(path, sizeof path, "%s/postmaster.pid", data);
	if ((fp = fopen(path, "r")) != NULL) {
		if (fgets(line, sizeof line, fp) != NULL)
			pid = (pid_t)strtol(line, NULL, 10);
		fclose(fp);
	}
	snprintf(path, sizeof path, "/proc/%ld/cwd", (long)pid);
	if (pid > 0 && stat(path, &cwd) == 0 && stat(data, &dir) == 0 &&
	    cwd.st_dev == dir.st_dev && cwd.st_ino == dir.st_ino) {
		fprintf(stderr, "pgserver: guard: the test is gone; stopping "
		    "postmaster %ld\n", (long)pid);
		if (kill(pid, SIGQUIT) == 0 &&
		    pgserver_wait_gone(pid, PGSERVER_WAIT_SECONDS) != 0) {
			kill(pid, SIGKILL);
			(void)pgserver_wait_gone(pid, PGSERVER_WAIT_SECONDS);
		}
	}
	nftw(data, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * A process that outlives the test to stop its server: it reads a pipe
 * whose only write end the test holds (close-on-exec: brokers, pg_ctl
 * and psql do not inherit it), so the end of the test process, however
 * it comes (SIGKILL included), is an EOF here.  pgserver_destroy writes
 * one byte first: then the guard leaves quietly.  Its own session keeps
 * it out of the signals a terminal or make sends the test's group.
 */
static int
guard_start(struct pgserver *s)
{
	int	fds[2];
	char	c;
	ssize_t	n;

	if (pipe2(fds, O_CLOEXEC) == -1)
		return -1;
	if ((s->guard = fork()) == -1) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (s->guard == 0) {
		/* Nothing of the test's but the pipe's read end and stderr. */
		if (dup2(fds[0], 3) == -1)
			_exit(1);
		closefrom(4);
		(void)setsid();
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		signal(SIGALRM, SIG_DFL);
		(void)prctl(PR_SET_NAME, "pgserver-guard");
		while ((n = read(3, &c, 1)) == -1 && errno == EINTR)
			;
		if (n != 1)
			guard_stop_server(s->data);
		_exit(0);
	}
	close(fds[0]);
	s->guard_fd = fds[1];
	return 0;
}

/* Tell the guard all is well and reap it. */
static void
guard_dismiss(struct pgserver *s)
{
	if (s->guard <= 0)
		return;
	(void)write(s->guard_fd, "d", 1);
	close(s->guard_fd);
	while (waitpid(s->guard, NULL, 0) == -1 && errno == EINTR)
		;
	s->guard = 0;
}

int
pgserver_restart(struct pgserver *s)
{
	char	pg_ctl[320], timeout[16];

	snprintf(pg_ctl, sizeof pg_ctl, "%s/pg_ctl", s->bindir);
	snprintf(timeout, sizeof timeout, "%d", PGSERVER_WAIT_SECONDS);
	{
		char *const argv[] = { pg_ctl, "-D", s->data, "-l", s->log,
		    "-w", "-t", timeout, "start", NULL };

		if (run_as_owner(s, argv) != 0)
			return -1;
	}
	return read_postmaster_pid(s);
}

int
pgserver_start(struct pgserver *s, const char **reason)
{
	const char	*tmp = getenv("TMPDIR");
	char		 initdb[320], conf[256];
	struct passwd	*pw;
	FILE		*fp;

	memset(s, 0, sizeof *s);
	if (!find_bindir(s)) {
		*reason = "PostgreSQL's server programs (initdb, pg_ctl) are "
		    "not installed (Debian: apt-get install postgresql-15)";
		return 77;
	}
	/* The socket's path must fit sun_path: a short TMPDIR or /tmp. */
	if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 60)
		tmp = "/tmp";
	snprintf(s->dir, sizeof s->dir, "%s/idem-pg.XXXXXX", tmp);
	if (mkdtemp(s->dir) == NULL) {
		*reason = "mkdtemp failed";
		return -1;
	}
	snprintf(s->data, sizeof s->data, "%s/data", s->dir);
	snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
	/* Before anything can start a server in it. */
	if (guard_start(s) != 0) {
		*reason = "cannot start the server's guard process";
		return -1;
	}
	s->uid = geteuid();
	s->gid = getegid();
	/* initdb refuses root: the server runs as nobody, in its own dir. */
	if (s->uid == 0) {
		if ((pw = getpwnam("nobody")) == NULL) {
			*reason = "running as root and there is no user nobody "
			    "to run PostgreSQL as";
			return -1;
		}
		s->uid = pw->pw_uid;
		s->gid = pw->pw_gid;
		if (chown(s->dir, s->uid, s->gid) != 0) {
			*reason = "chown of the server's directory failed";
			return -1;
		}
	}
	snprintf(initdb, sizeof initdb, "%s/initdb", s->bindir);
	{
		/*
		 * --no-sync only spares initdb's own final sync of a
		 * throw-away directory; the server below runs with fsync=on.
		 */
		char *const argv[] = { initdb, "-D", s->data, "-U", "idem",
		    "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync",
		    NULL };

		if (run_as_owner(s, argv) != 0) {
			*reason = "initdb failed (see the server log)";
			fprintf(stderr, "pgserver: initdb failed, log %s\n",
			    s->log);
			return -1;
		}
	}
	snprintf(conf, sizeof conf, "%s/postgresql.conf", s->data);
	if ((fp = fopen(conf, "a")) == NULL) {
		*reason = "cannot append to postgresql.conf";
		return -1;
	}
	fprintf(fp, "\n# idem's tests (tests/cluster/pgserver.c)\n"
	    "listen_addresses = ''\n"
	    "unix_socket_directories = '%s'\n"
	    "port = %d\n"
	    "fsync = on\n"
	    "synchronous_commit = on\n"
	    "full_page_writes = on\n"
	    "max_connections = 200\n"
	    "shared_buffers = 32MB\n", s->dir, PGSERVER_PORT);
	if (fclose(fp) != 0) {
		*reason = "cannot write postgresql.conf";
		return -1;
	}
	s->port = PGSERVER_PORT;
	snprintf(s->uri, sizeof s->uri,
	    "postgresql:///postgres?host=%s&port=%d&user=idem", s->dir,
	    s->port);
	if (pgserver_restart(s) != 0) {
		*reason = "pg_ctl start failed (see the server log)";
		fprintf(stderr, "pgserver: start failed, log %s\n", s->log);
		return -1;
	}
	return 0;
}

int
pgserver_stop(struct pgserver *s, int immediate)
{
	pid_t	pid = s->pid;

	if (pid <= 0)
		return 0;
	/* SIGQUIT: immediate shutdown, recovery at the next start (a crash). */
	if (kill(pid, immediate ? SIGQUIT : SIGINT) != 0 && errno != ESRCH)
		return -1;
	if (pgserver_wait_gone(pid, PGSERVER_WAIT_SECONDS) != 0)
		return -1;
	s->pid = 0;
	return 0;
}

void
pgserver_destroy(struct pgserver *s, int keep)
{
	if (s->dir[0] == '\0')
		return;
	pgserver_stop(s, 0);
	guard_dismiss(s);
	if (keep)
		fprintf(stderr, "pgserver: kept %s\n", s->dir);
	else
		nftw(s->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	s->dir[0] = '\0';
}

char *
pgserver_psql(struct pgserver *s, const char *sql)
{
	char	*cmd, *out = NULL, buf[4096];
	size_t	 length = 0, n;
	FILE	*fp;
	const char *p;
	size_t	 size;

	/* sql in single quotes for the shell: ' becomes '\''. */
	size = strlen(s->bindir) + strlen(s->uri) + 4 * strlen(sql) + 64;
	if ((cmd = malloc(size)) == NULL)
		return NULL;
	n = (size_t)snprintf(cmd, size, "'%s/psql' -XAtq -d '%s' -c '",
	    s->bindir, s->uri);
	for (p = sql; *p != '\0'; p++) {
		if (*p == '\'') {
			memcpy(cmd + n, "'\\''", 4);
			n += 4;
		} else
			cmd[n++] = *p;
	}
	memcpy(cmd + n, "' 2>&1", 7);
	fp = popen(cmd, "r");
	free(cmd);
	if (fp == NULL)
		return NULL;
	while ((n = fread(buf, 1, sizeof buf, fp)) > 0) {
		char *grown = realloc(out, length + n + 1);

		if (grown == NULL) {
			free(out);
			pclose(fp);
			return NULL;
		}
		out = grown;
		memcpy(out + length, buf, n);
		length += n;
	}
	if (pclose(fp) != 0) {
		fprintf(stderr, "pgserver: psql failed: %.*s\n", (int)length,
		    out != NULL ? out : "");
		free(out);
		return NULL;
	}
	if (out == NULL && (out = malloc(1)) == NULL)
		return NULL;
	out[length] = '\0';
	return out;
}

int
pgserver_skip_status(const char *reason)
{
	const char	*ci = getenv("CI");

	if (ci != NULL && strcmp(ci, "true") == 0) {
		printf("FAIL: %s (CI must run the PostgreSQL tests)\n", reason);
		return 1;
	}
	printf("SKIP: %s\n", reason);
	return 77;
}

int
pgserver_main_start(struct pgserver *s)
{
	const char	*reason;
	int		 rc;

	if ((rc = pgserver_start(s, &reason)) == 77)
		return pgserver_skip_status(reason);
	if (rc != 0) {
		fprintf(stderr, "pgserver_start: %s\n", reason);
		pgserver_destroy(s, 1);
		return 1;
	}
	return 0;
}

int
pgserver_await(struct pgserver *s, const char *sql, int seconds)
{
	struct timespec	 pace = { 0, 20 * 1000 * 1000 }, now;
	char		*out;
	time_t		 deadline;
	int		 ok;

	clock_gettime(CLOCK_MONOTONIC, &now);
	deadline = now.tv_sec + seconds;
	for (;;) {
		if ((out = pgserver_psql(s, sql)) == NULL)
			return 0;
		ok = strncmp(out, "t", 1) == 0;
		free(out);
		if (ok)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec >= deadline)
			return 0;
		nanosleep(&pace, NULL);
	}
}
