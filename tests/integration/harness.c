/* SPDX-License-Identifier: ISC */
/*
 * harness.c: see harness.h.
 */
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sodium.h>

#include "harness.h"
#include "store.h"
#include "shm.h"

#define HARNESS_START_TIMEOUT_MS	20000
#define HARNESS_STOP_TIMEOUT_MS		10000
/* Brokers running at once in one test (a second one is started by hand). */
#define HARNESS_MAX_BROKERS		8

/* A skip's reason, as long as harness_skip prints it. */
#define HARNESS_SKIP_BYTES		256

/* What the watchdog kills: read from a signal handler, hence volatile. */
static volatile sig_atomic_t	harness_pids[HARNESS_MAX_BROKERS];

/* Their segments' files, "/dev/shm/idem-<16 hex>", for the watchdog. */
static char			harness_segments[HARNESS_MAX_BROKERS][80];

/* Tests skipped so far: harness_exit_status's 77. */
static int	harness_skip_count;

/*
 * At exit, the brokers a failed test left running (a test without a
 * teardown, its struct broker on the stack, stops at its first failed
 * assertion): killed, and their segments removed, so that a failure
 * leaves neither a live broker nor 86 MB in /dev/shm behind.
 */
static pid_t	harness_owner;	/* the test process, not a forked client */

static void
kill_leftovers(void)
{
	int	i;

	if (getpid() != harness_owner)
		return;
	for (i = 0; i < HARNESS_MAX_BROKERS; i++) {
		if (harness_pids[i] == 0)
			continue;
		fprintf(stderr, "harness: idemd %ld still running at exit; "
		    "killing it\n", (long)harness_pids[i]);
		kill((pid_t)harness_pids[i], SIGKILL);
		(void)waitpid((pid_t)harness_pids[i], NULL, 0);
		if (harness_segments[i][0] != '\0')
			(void)unlink(harness_segments[i]);
		harness_pids[i] = 0;
	}
}

void
harness_segment_path(const struct broker *b, char *out, size_t size)
{
	char	name[64], *real;

	if (size > 0)
		out[0] = '\0';
	if (sodium_init() < 0 || (real = realpath(b->root, NULL)) == NULL)
		return;
	shm_name_for_root(real, name);
	free(real);
	snprintf(out, size, "/dev/shm%s", name);
}

static void
note_started(const struct broker *b)
{
	static int	 registered;
	int		 i;

	if (!registered && atexit(kill_leftovers) == 0) {
		harness_owner = getpid();
		registered = 1;
	}
	for (i = 0; i < HARNESS_MAX_BROKERS; i++) {
		if (harness_pids[i] == 0) {
			harness_segment_path(b, harness_segments[i],
			    sizeof harness_segments[i]);
			harness_pids[i] = b->pid;
			return;
		}
	}
}

static void
note_gone(pid_t pid)
{
	int	i;

	for (i = 0; i < HARNESS_MAX_BROKERS; i++) {
		if (harness_pids[i] == pid)
			harness_pids[i] = 0;
	}
}

static void
watchdog_fired(int sig)
{
	static const char	msg[] = "harness: watchdog: test hung; "
	    "killing its brokers\n";
	int			i;

	(void)sig;
	for (i = 0; i < HARNESS_MAX_BROKERS; i++) {
		if (harness_pids[i] != 0)
			kill((pid_t)harness_pids[i], SIGKILL);
	}
	/*
	 * Their segments too (unlink is async-signal-safe; a mapping
	 * outlives its name): a hung test must not leave 86 MB behind.
	 */
	for (i = 0; i < HARNESS_MAX_BROKERS; i++) {
		if (harness_pids[i] != 0 && harness_segments[i][0] != '\0')
			(void)unlink(harness_segments[i]);
	}
	(void)write(2, msg, sizeof msg - 1);
	_exit(2);
}

/*
 * The watchdog catches a hang, not a slow machine: a sanitizer build
 * (IDEM_SANITIZER_FLAGS, set by make check) runs several times slower,
 * more so on a loaded host, so its bound is HARNESS_SANITIZER_SLOWDOWN
 * times longer.
 */
#define HARNESS_SANITIZER_SLOWDOWN	3

unsigned
harness_slowdown(void)
{
	const char	*sanitizers = getenv("IDEM_SANITIZER_FLAGS");

	return sanitizers != NULL && *sanitizers != '\0' ?
	    HARNESS_SANITIZER_SLOWDOWN : 1;
}

void
harness_watchdog(unsigned seconds)
{
	signal(SIGALRM, watchdog_fired);
	alarm(seconds * harness_slowdown());
}

static void
die(const char *what)
{
	fprintf(stderr, "harness: %s: %s\n", what, strerror(errno));
	abort();
}

/*
 * The roots harness_fresh_root made that are not yet removed (nor kept
 * on purpose, by a failed test's teardown or IDEM_TEST_KEEP).  At the
 * test program's exit any of them still on disk was forgotten by its
 * test: the program fails naming it, so that a passing suite leaves no
 * idem-test-* behind in $TMPDIR.
 */
static struct {
	pid_t	  owner;	/* the test process, not a forked client */
	char	**paths;
	size_t	  count;
	size_t	  allocated;
} harness_roots;

static void
roots_check_at_exit(void)
{
	struct stat	st;
	size_t		i, left = 0;

	if (getpid() != harness_roots.owner ||
	    getenv("IDEM_TEST_KEEP") != NULL)
		return;
	for (i = 0; i < harness_roots.count; i++) {
		if (lstat(harness_roots.paths[i], &st) == -1)
			continue;
		/* An empty one has nothing to look at: removed. */
		fprintf(stderr, "harness: FAIL: test root %s left behind: "
		    "made by harness_fresh_root, removed by no "
		    "harness_cleanup%s\n", harness_roots.paths[i],
		    rmdir(harness_roots.paths[i]) == 0 ? " (empty; removed "
		    "now)" : "");
		left++;
	}
	if (left != 0)
		_exit(1);
}

static void
roots_made(const char *root)
{
	char	**grown;

	if (harness_roots.owner == 0) {
		harness_roots.owner = getpid();
		if (atexit(roots_check_at_exit) != 0)
			die("atexit");
	}
	if (harness_roots.count == harness_roots.allocated) {
		harness_roots.allocated = harness_roots.allocated * 2 + 8;
		grown = realloc(harness_roots.paths, harness_roots.allocated *
		    sizeof *grown);
		if (grown == NULL)
			die("realloc");
		harness_roots.paths = grown;
	}
	if ((harness_roots.paths[harness_roots.count] = strdup(root)) == NULL)
		die("strdup");
	harness_roots.count++;
}

/* Removed, or kept on purpose: not a root left behind. */
static void
roots_done(const char *root)
{
	size_t	i;

	for (i = 0; i < harness_roots.count; i++) {
		if (strcmp(harness_roots.paths[i], root) != 0)
			continue;
		free(harness_roots.paths[i]);
		harness_roots.paths[i] =
		    harness_roots.paths[--harness_roots.count];
		return;
	}
}

void
harness_fresh_root(struct broker *b)
{
	const char	*tmp = getenv("TMPDIR");

	memset(b, 0, sizeof *b);
	snprintf(b->root, sizeof b->root, "%s/idem-test-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(b->root) == NULL)
		die("mkdtemp");
	roots_made(b->root);
	snprintf(b->socket, sizeof b->socket, "%s/.idem/idemd.sock", b->root);
	snprintf(b->log, sizeof b->log, "%s.log", b->root);
}

int
harness_start(struct broker *b, const char *const *args,
    const char *const *env)
{
	const char	*idemd = getenv("IDEMD");
	const char	*argv[32];
	char		 buf[16];
	struct pollfd	 pfd;
	int		 ready[2], logfd, n = 0, i;
	pid_t		 parent;
	ssize_t		 got;

	if (idemd == NULL)
		idemd = "broker/idemd";
#ifndef IDEM_FAULT_INJECTION
	/* Such an idemd refuses these variables: the test cannot run. */
	{
		char	name[64];

		if (faultenv_find((char *const *)env, name, sizeof name)) {
			printf("SKIP: this test sets %s: it needs a build "
			    "with fault injection (configure "
			    "--enable-fault-injection)\n", name);
			exit(77);
		}
	}
#endif
	if (pipe(ready) == -1)
		die("pipe");
	argv[n++] = idemd;
	argv[n++] = "--root";
	argv[n++] = b->root;
	argv[n++] = "--ready-fd";
	argv[n++] = "3";
	for (i = 0; args != NULL && args[i] != NULL && n < 30; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	parent = getpid();
	b->pid = fork();
	if (b->pid == -1)
		die("fork");
	if (b->pid == 0) {
		/*
		 * A test killed from outside (make's timeout, ^C, kill -9)
		 * takes its broker with it: SIGTERM, so that the master
		 * stops its workers and removes its segment.  Every test
		 * starts its brokers from its main thread, whose end is
		 * the process's.
		 */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) == -1 ||
		    getppid() != parent)
			_exit(127);
		close(ready[0]);
		if (dup2(ready[1], 3) == -1)
			_exit(127);
		logfd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (logfd != -1)
			dup2(logfd, 2);
		for (i = 0; env != NULL && env[i] != NULL; i++)
			putenv((char *)env[i]);
		execv(idemd, (char *const *)argv);
		_exit(127);
	}
	note_started(b);
	close(ready[1]);
	pfd.fd = ready[0];
	pfd.events = POLLIN;
	got = 0;
	if (poll(&pfd, 1, HARNESS_START_TIMEOUT_MS) == 1)
		got = read(ready[0], buf, sizeof buf);
	close(ready[0]);
	if (got == 6 && memcmp(buf, "ready\n", 6) == 0)
		return 0;
	/* It exited (or hung): reap it so the caller sees the status. */
	kill(b->pid, SIGKILL);
	harness_wait_dead(b);
	return -1;
}

static void
wait_root_lock(struct broker *b)
{
	char	path[400];
	int	fd;

	/* Workers die with the master but hold the lock until they do. */
	snprintf(path, sizeof path, "%s/.idem/idemd.lock", b->root);
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) == -1)
		return;
	while (flock(fd, LOCK_EX) == -1 && errno == EINTR)
		;
	close(fd);
}

/*
 * A broker killed with SIGKILL leaves its shared-memory segment behind
 * (the next broker on the same root would replace it, but test roots are
 * never reused): remove it once every process of the broker is gone.
 */
static void
remove_segment(const struct broker *b)
{
	char	 name[64], *real;

	if (sodium_init() < 0 || (real = realpath(b->root, NULL)) == NULL)
		return;
	shm_name_for_root(real, name);
	free(real);
	(void)shm_unlink(name);
}

void
harness_wait_dead(struct broker *b)
{
	int	status;

	if (b->pid == 0)
		return;
	while (waitpid(b->pid, &status, 0) == -1) {
		if (errno != EINTR)
			die("waitpid");
	}
	b->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) :
	    128 + WTERMSIG(status);
	note_gone(b->pid);
	b->pid = 0;
	wait_root_lock(b);
	remove_segment(b);
}

int
harness_stop(struct broker *b)
{
	struct pollfd	pfd;
	int		fd, n;

	if (b->pid == 0)
		return -1;
	/* A pidfd says when it exits, so a broker deaf to SIGTERM fails. */
	fd = (int)syscall(SYS_pidfd_open, b->pid, 0);
	kill(b->pid, SIGTERM);
	if (fd != -1) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		while ((n = poll(&pfd, 1, HARNESS_STOP_TIMEOUT_MS)) == -1 &&
		    errno == EINTR)
			;
		close(fd);
		if (n == 0) {
			fprintf(stderr, "harness: idemd %ld still running "
			    "%d ms after SIGTERM; killing it\n", (long)b->pid,
			    HARNESS_STOP_TIMEOUT_MS);
			harness_kill(b);
			return -1;
		}
	}
	harness_wait_dead(b);
	return b->exit_status;
}

void
harness_kill(struct broker *b)
{
	if (b->pid == 0)
		return;
	kill(b->pid, SIGKILL);
	harness_wait_dead(b);
}

/*
 * SIGKILL to the master and its exit awaited, not its workers' (nor the
 * root's lock): what a supervisor restarting it at once sees.  The next
 * start replaces the segment.
 */
void
harness_kill_master_only(struct broker *b)
{
	int	status;

	if (b->pid == 0)
		return;
	kill(b->pid, SIGKILL);
	while (waitpid(b->pid, &status, 0) == -1) {
		if (errno != EINTR)
			die("waitpid");
	}
	b->exit_status = 128 + SIGKILL;
	note_gone(b->pid);
	b->pid = 0;
}

int
harness_workers(struct broker *b, pid_t *pids, int max)
{
	char	 path[64];
	FILE	*f;
	long	 pid;
	int	 n = 0;

	snprintf(path, sizeof path, "/proc/%ld/task/%ld/children",
	    (long)b->pid, (long)b->pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	while (n < max && fscanf(f, "%ld", &pid) == 1)
		pids[n++] = (pid_t)pid;
	fclose(f);
	return n;
}

struct idem_conn *
harness_connect(struct broker *b)
{
	struct idem_error	 err;
	struct idem_conn	*c;

	if ((c = idem_connect(b->socket, &err)) == NULL)
		fprintf(stderr, "harness: connect %s: %s\n", b->socket,
		    err.message);
	return c;
}

void
harness_effect_commit(struct idem_conn *c, const char *kind,
    const char *request, const char *id, const char *result)
{
	struct idem_effect	e, done;
	struct idem_error	err;

	memset(&e, 0, sizeof e);
	memset(&done, 0, sizeof done);
	assert_int_equal(idem_effect_begin(c, id, kind, request, 0, &e, &err),
	    0);
	assert_int_equal(e.disposition, IDEM_EFFECT_PROCEED);
	assert_int_equal(idem_effect_complete(c, id, kind, e.fence, 1, result,
	    &done, &err), 0);
	assert_int_equal(done.disposition, IDEM_EFFECT_COMMITTED);
	idem_effect_clear(&e);
	idem_effect_clear(&done);
}

json_t *
harness_call_line(struct idem_conn *c, const char *line)
{
	struct idem_error	 err;
	json_error_t		 jerr;
	json_t			*reply;
	char			*response = NULL;

	if (idem_call_raw(c, line, &response, &err) != 0)
		return NULL;
	reply = json_loads(response, 0, &jerr);
	free(response);
	return reply;
}

json_t *
harness_call(struct idem_conn *c, json_t *request)
{
	char	*line;
	json_t	*reply;

	line = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(request);
	if (line == NULL)
		return NULL;
	reply = harness_call_line(c, line);
	free(line);
	return reply;
}

static int
count_in(const char *dir, int depth, json_t *names)
{
	DIR		*d;
	struct dirent	*e;
	struct stat	 st;
	char		 path[1024];
	unsigned char	 type;
	int		 n = 0;

	if ((d = opendir(dir)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		type = e->d_type;
		/* Some file systems leave the type to stat. */
		if (type == DT_UNKNOWN && lstat(path, &st) == 0)
			type = S_ISDIR(st.st_mode) ? DT_DIR :
			    S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
		if (type == DT_DIR && depth > 0)
			n += count_in(path, depth - 1, names);
		else if (type == DT_REG &&
		    strncmp(e->d_name, "TASK-", 5) == 0 &&
		    strlen(e->d_name) > 3 &&
		    strcmp(e->d_name + strlen(e->d_name) - 3, ".md") == 0) {
			n++;
			if (names != NULL)
				json_array_append_new(names,
				    json_string(e->d_name));
		}
	}
	closedir(d);
	return n;
}

int
harness_count_tasks(const struct broker *b)
{
	return harness_list_tasks(b, NULL);
}

int
harness_list_tasks(const struct broker *b, json_t *names)
{
	char	path[400];
	int	n;

	snprintf(path, sizeof path, "%s/_lifecycle", b->root);
	n = count_in(path, 3, names);
	snprintf(path, sizeof path, "%s/history", b->root);
	return n + count_in(path, 3, names);
}

char *
harness_read(const struct broker *b, const char *relpath)
{
	char	 path[1024], *data;
	FILE	*f;
	long	 size;

	snprintf(path, sizeof path, "%s/%s", b->root, relpath);
	if ((f = fopen(path, "rbe")) == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	data = malloc((size_t)size + 1);
	if (data != NULL && fread(data, 1, (size_t)size, f) != (size_t)size) {
		free(data);
		data = NULL;
	}
	if (data != NULL)
		data[size] = '\0';
	fclose(f);
	return data;
}

void
harness_need_fault_injection(struct broker *b)
{
#ifndef IDEM_FAULT_INJECTION
	printf("SKIP: needs configure --enable-fault-injection\n");
	harness_cleanup(b);
	b->root[0] = '\0';
	skip();
#else
	(void)b;
#endif
}

void
harness_cleanup(struct broker *b)
{
	char	cmd[1200];

	if (b->pid != 0)
		harness_stop(b);
	if (getenv("IDEM_TEST_KEEP") != NULL)
		return;
	/* root.HOST.log: a cluster test's nodes on this root (test_pghistory). */
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'.*.log", b->root,
	    b->log, b->root);
	if (system(cmd) != 0)
		fprintf(stderr, "harness: could not remove %s\n", b->root);
	else
		roots_done(b->root);
}

json_t *
harness_write_task(const char *id, const char *subject)
{
	json_t	*request;

	request = json_pack("{s:s, s:{s:s, s:s, s:s, s:s}}",
	    "op", "write_task",
	    "task", "sender", "PM", "recipient", "DEV", "subject", subject,
	    "body", "Steps:\n1. reproduce\n2. fix\n");
	if (id != NULL)
		json_object_set_new(request, "client_submission_id",
		    json_string(id));
	return request;
}

char *
harness_receipt_bytes(const char *reply)
{
	const char	*at = strstr(reply, "\"receipt\":");
	char		*out;
	size_t		 n;

	if (at == NULL)
		fail_msg("no receipt in %s", reply);
	at += strlen("\"receipt\":");
	n = strlen(at);
	if (n < 2 || at[0] != '{' || at[n - 1] != '}')
		fail_msg("the receipt is not the reply's last member: %s",
		    reply);
	if ((out = strndup(at, n - 1)) == NULL)
		fail_msg("strndup: out of memory");
	return out;
}

char *
harness_receipt_text(json_t *reply)
{
	json_t	*receipt = json_object_get(reply, "receipt");

	if (receipt == NULL)
		return NULL;
	return json_dumps(receipt, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

void
harness_today(char out[9])
{
	time_t		now = time(NULL);
	struct tm	tm;

	gmtime_r(&now, &tm);
	strftime(out, 9, "%Y%m%d", &tm);
}

int
harness_write(const struct broker *b, const char *relpath, const char *data)
{
	char	 path[1024], *p;
	size_t	 length = strlen(data);
	int	 fd;

	snprintf(path, sizeof path, "%s/%s", b->root, relpath);
	for (p = path + strlen(b->root) + 1; (p = strchr(p, '/')) != NULL;
	    p++) {
		*p = '\0';
		if (mkdir(path, 0755) == -1 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd == -1)
		return -1;
	if (write(fd, data, length) != (ssize_t)length) {
		close(fd);
		return -1;
	}
	return close(fd);
}

int
harness_raw_connect(const struct broker *b)
{
	struct sockaddr_un	sun;
	int			fd;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(b->socket) >= sizeof sun.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, b->socket, strlen(b->socket));
	/* Close-on-exec: a broker started later must not keep it open. */
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		close(fd);
		return -1;
	}
	return fd;
}

int
harness_raw_send(int fd, const char *line)
{
	size_t	length = strlen(line), done = 0;
	ssize_t	n;

	while (done <= length) {
		if (done == length)
			n = send(fd, "\n", 1, MSG_NOSIGNAL);
		else
			n = send(fd, line + done, length - done, MSG_NOSIGNAL);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

char *
harness_raw_read_line(int fd)
{
	char	*line = NULL, *grown;
	size_t	 length = 0, size = 0;
	ssize_t	 n;
	char	 c;

	/* A byte at a time: nothing past the line is taken from the stream. */
	for (;;) {
		n = read(fd, &c, 1);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(line);
			return NULL;
		}
		if (length + 1 >= size) {
			size = size == 0 ? 256 : size * 2;
			if ((grown = realloc(line, size)) == NULL) {
				free(line);
				return NULL;
			}
			line = grown;
		}
		if (c == '\n')
			break;
		line[length++] = c;
	}
	line[length] = '\0';
	return line;
}

int
harness_setup(void **state)
{
	struct broker	*b;

	if ((b = calloc(1, sizeof *b)) == NULL)
		return -1;
	harness_fresh_root(b);
	harness_watchdog(HARNESS_TEST_SECONDS);
	*state = b;
	return 0;
}

int
harness_teardown(void **state)
{
	struct broker	*b = *state;

	harness_watchdog(0);
	/* A failed test leaves its root (and log) behind to be looked at. */
	if (b->root[0] != '\0') {
		fprintf(stderr, "kept %s and %s\n", b->root, b->log);
		roots_done(b->root);
	}
	if (b->pid != 0) {
		/* It may have failed with the master stopped (SIGSTOP). */
		kill(b->pid, SIGCONT);
		harness_kill(b);
	}
	free(b);
	return 0;
}

void
harness_finish(struct broker *b)
{
	harness_kill(b);
	harness_cleanup(b);
	b->root[0] = '\0';
}

json_t *
harness_call_once(struct broker *b, json_t *request)
{
	struct idem_conn	*c;
	json_t			*reply;

	if ((c = harness_connect(b)) == NULL) {
		json_decref(request);
		return NULL;
	}
	reply = harness_call(c, request);
	idem_close(c);
	return reply;
}

/* One stats counter of the broker's, by name (the test fails without it). */
json_int_t
harness_stat(struct broker *b, const char *name)
{
	json_t		*reply;
	json_int_t	 v;

	reply = harness_call_once(b, json_pack("{s:s}", "op", "stats"));
	assert_non_null(reply);
	if (!json_is_integer(json_object_get(reply, name)))
		fail_msg("stats has no %s", name);
	v = json_integer_value(json_object_get(reply, name));
	json_decref(reply);
	return v;
}

/* A raw line sent on fd and the reply's line read back (malloc'd). */
char *
harness_raw_exchange(int fd, const char *line)
{
	char	*reply;

	assert_int_equal(harness_raw_send(fd, line), 0);
	reply = harness_raw_read_line(fd);
	assert_non_null(reply);
	return reply;
}

char *
harness_raw_call_or_null(const struct broker *b, json_t *request)
{
	char	*line, *reply = NULL;
	int	 fd;

	assert_non_null(line = json_dumps(request, JSON_COMPACT));
	json_decref(request);
	if ((fd = harness_raw_connect(b)) >= 0) {
		if (harness_raw_send(fd, line) == 0)
			reply = harness_raw_read_line(fd);
		close(fd);
	}
	free(line);
	return reply;
}

int
harness_raw_send_task(const struct broker *b, const char *id,
    const char *subject)
{
	json_t	*request;
	char	*line;
	int	 fd;

	assert_true((fd = harness_raw_connect(b)) >= 0);
	request = harness_write_task(id, subject);
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	assert_non_null(line);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	return fd;
}

int
harness_idemctl(char *out, size_t size, const char *fmt, ...)
{
	char	 cmd[4096];
	va_list	 ap;
	FILE	*p;
	size_t	 n;
	int	 status;

	n = (size_t)snprintf(cmd, sizeof cmd, "'%s' ",
	    getenv("IDEMCTL") != NULL ? getenv("IDEMCTL") : "contrib/idemctl");
	va_start(ap, fmt);
	n += (size_t)vsnprintf(cmd + n, sizeof cmd - n, fmt, ap);
	va_end(ap);
	snprintf(cmd + n, sizeof cmd - n, " 2>&1");
	assert_non_null(p = popen(cmd, "r"));
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

unsigned long long
harness_compact_now(const struct broker *b)
{
	char			 out[8192];
	unsigned long long	 compacted;

	if (harness_idemctl(out, sizeof out, "--root '%s' compact "
	    "--older-than 0", b->root) != 0 || sscanf(out,
	    "compact: %llu receipt", &compacted) != 1)
		fail_msg("idemctl compact: %s", out);
	return compacted;
}

const char *
harness_str(json_t *object, const char *key)
{
	json_t	*v = json_object_get(object, key);

	if (!json_is_string(v))
		fail_msg("\"%s\" is not a string in %s", key,
		    object != NULL ? json_dumps(object, JSON_COMPACT) : "null");
	return json_string_value(v);
}

json_int_t
harness_int(json_t *object, const char *key)
{
	json_t	*v = json_object_get(object, key);

	if (!json_is_integer(v))
		fail_msg("\"%s\" is not an integer in %s", key,
		    object != NULL ? json_dumps(object, JSON_COMPACT) : "null");
	return json_integer_value(v);
}

const char *
harness_receipt_str(json_t *reply, const char *key)
{
	return harness_str(json_object_get(reply, "receipt"), key);
}

void
harness_assert_bool(json_t *object, const char *key, int expected)
{
	json_t	*v = json_object_get(object, key);

	if (!json_is_boolean(v) || json_is_true(v) != expected)
		fail_msg("\"%s\" is not %s in %s", key, expected ? "true" :
		    "false", object != NULL ?
		    json_dumps(object, JSON_COMPACT) : "null");
}

void
harness_skip(const char *fmt, ...)
{
	char	reason[HARNESS_SKIP_BYTES];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof reason, fmt, ap);
	va_end(ap);
	/*
	 * On cmocka's stream, between its "[ RUN      ] name" and "[  SKIPPED
	 * ] name": run-tests.sh (count-cases.sh) gives it as the case's
	 * reason.
	 */
	printf("SKIP: %s\n", reason);
	fflush(stdout);
	harness_skip_count++;
	skip();
}

int
harness_exit_status(int failed)
{
	if (failed != 0 || harness_skip_count == 0)
		return failed;
	return 77;
}

/* ---- Helpers the tests share --------------------------------------------- */

void
harness_must_start(struct broker *b, const char *const *args,
    const char *const *env)
{
	assert_int_equal(harness_start(b, args, env), 0);
}

void
harness_start_crashing(struct broker *b, const char *name, const char *point)
{
	static char		 entry[128];
	const char *const	 env[] = { entry, NULL };

	snprintf(entry, sizeof entry, "%s=%s", name, point);
	harness_must_start(b, NULL, env);
}

json_t *
harness_must_call(struct broker *b, json_t *request)
{
	json_t	*reply = harness_call_once(b, request);

	assert_non_null(reply);
	return reply;
}

json_t *
harness_submit(struct broker *b, const char *id, const char *subject)
{
	return harness_must_call(b, harness_write_task(id, subject));
}

int
harness_exists(const struct broker *b, const char *relpath)
{
	char		path[1024];
	struct stat	st;

	snprintf(path, sizeof path, "%s/%s", b->root, relpath);
	return stat(path, &st) == 0;
}

int64_t
harness_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
harness_count_reports(const struct broker *b)
{
	char		 path[400];
	DIR		*d;
	struct dirent	*e;
	size_t		 n;
	int		 count = 0;

	snprintf(path, sizeof path, "%s/reports", b->root);
	/* idemd makes it at start: missing, the count would be a lie. */
	if ((d = opendir(path)) == NULL)
		fail_msg("%s: %s", path, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		n = strlen(e->d_name);
		if (strncmp(e->d_name, "REPORT-", 7) == 0 && n > 3 &&
		    strcmp(e->d_name + n - 3, ".md") == 0)
			count++;
	}
	closedir(d);
	return count;
}

char *
harness_front_matter(const struct broker *b, const char *relpath)
{
	char	*data, *end, *fm;

	data = harness_read(b, relpath);
	if (data == NULL)
		fail_msg("cannot read %s", relpath);
	assert_memory_equal(data, "---\n", 4);
	end = strstr(data + 3, "\n---\n");
	assert_non_null(end);
	fm = strndup(data + 3, (size_t)(end - (data + 3)) + 1);
	free(data);
	assert_non_null(fm);
	return fm;
}

char *
harness_read_log(const struct broker *b)
{
	FILE	*f;
	char	*data = NULL;
	size_t	 size = 0;

	if ((f = fopen(b->log, "re")) == NULL)
		return NULL;
	if (getdelim(&data, &size, '\0', f) == -1) {
		free(data);
		data = NULL;
	}
	fclose(f);
	return data;
}

int
harness_log_count(const struct broker *b, const char *needle)
{
	char	*log = harness_read_log(b), *at;
	int	 n = 0;

	for (at = log; at != NULL && (at = strstr(at, needle)) != NULL; at++)
		n++;
	free(log);
	return n;
}

void
harness_wait_log(const struct broker *b, const char *needle, int count,
    int timeout_ms)
{
	struct pollfd	 pfd;
	char		 events[4096];
	int64_t		 deadline = harness_now_ms() + timeout_ms, left;
	int		 fd;

	fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	assert_int_not_equal(fd, -1);
	assert_int_not_equal(inotify_add_watch(fd, b->log, IN_MODIFY), -1);
	for (;;) {
		/* Look after arming the watch: nothing falls in between. */
		if (harness_log_count(b, needle) >= count)
			break;
		if ((left = deadline - harness_now_ms()) <= 0)
			fail_msg("the broker did not log \"%s\" %d times "
			    "(see %s)", needle, count, b->log);
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)left) == -1 && errno != EINTR)
			fail_msg("poll: %s", strerror(errno));
		while (read(fd, events, sizeof events) > 0)
			;
	}
	close(fd);
}

void
harness_assert_outcome(json_t *reply, const char *disposition,
    int action_taken, int idempotent, int recovered)
{
	json_t	*rec = json_object_get(reply, "recovered"), *d;

	d = json_object_get(reply, "disposition");
	if (!json_is_true(json_object_get(reply, "ok")) ||
	    !json_is_string(d) || strcmp(json_string_value(d),
	    disposition) != 0)
		fail_msg("wanted %s, got %s", disposition,
		    json_dumps(reply, JSON_COMPACT));
	harness_assert_bool(reply, "action_taken", action_taken);
	harness_assert_bool(reply, "idempotent", idempotent);
	if (recovered)
		assert_true(json_is_true(rec));
	else
		assert_null(rec);
	assert_string_equal(harness_receipt_str(reply, "state"), "committed");
}

void
harness_assert_error(json_t *reply, const char *code, int retryable)
{
	json_t	*error = json_object_get(reply, "error");

	harness_assert_bool(reply, "ok", 0);
	harness_assert_bool(reply, "action_taken", 0);
	if (strcmp(harness_str(error, "code"), code) != 0)
		fail_msg("wanted %s, got %s", code,
		    json_dumps(reply, JSON_COMPACT));
	harness_assert_bool(error, "retryable", retryable);
}

void
harness_skip_if_date_moved(const char *today, const char *task_id)
{
	const char	*dash = strchr(task_id, '-');

	if (dash == NULL || strncmp(dash + 1, today, 8) != 0)
		harness_skip("the UTC date changed during the test");
}

void
harness_raise_nofile(unsigned long n)
{
	struct rlimit	rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur >= n)
		return;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
		harness_skip("RLIMIT_NOFILE hard limit %llu is under %lu",
		    (unsigned long long)rl.rlim_max, n);
	rl.rlim_cur = n;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* ---- The fault shim's fixtures ------------------------------------------- */

#define HARNESS_SHIM_DEFAULT	"tests/faults/.libs/libfaultshim.so"

int
harness_shim_setup(void **state, unsigned watchdog_seconds)
{
	struct harness_shim	*t;
	const char		*shim = getenv("IDEM_FAULTSHIM"), *asan;
	char			 real[PATH_MAX];

	if (shim == NULL)
		shim = HARNESS_SHIM_DEFAULT;
	if (realpath(shim, real) == NULL) {
		fprintf(stderr, "fault shim %s: %s (build it with make check, "
		    "or set IDEM_FAULTSHIM)\n", shim, strerror(errno));
		return -1;
	}
	if ((t = calloc(1, sizeof *t)) == NULL)
		return -1;
	harness_fresh_root(&t->b);
	harness_watchdog(watchdog_seconds);
	snprintf(t->fault_file, sizeof t->fault_file, "%s.faults", t->b.root);
	snprintf(t->env_preload, sizeof t->env_preload, "LD_PRELOAD=%s",
	    real);
	snprintf(t->env_fault, sizeof t->env_fault, "IDEM_FAULT_FILE=%s",
	    t->fault_file);
	/*
	 * A sanitizer build of idemd refuses to start with a library
	 * preloaded ahead of its runtime; the shim has to be.  Other
	 * builds ignore the variable.
	 */
	asan = getenv("ASAN_OPTIONS");
	snprintf(t->env_asan, sizeof t->env_asan,
	    "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
	    asan != NULL ? asan : "", asan != NULL && *asan != '\0' ? ":" : "");
	t->env[0] = t->env_preload;
	t->env[1] = t->env_fault;
	t->env[2] = t->env_asan;
	t->env[3] = NULL;
	*state = t;
	return 0;
}

int
harness_shim_teardown(void **state)
{
	struct harness_shim	*t = *state;

	harness_watchdog(0);
	/* A failed test leaves its root, log and rule to be looked at. */
	if (t->b.root[0] != '\0')
		fprintf(stderr, "kept %s, %s and %s\n", t->b.root, t->b.log,
		    t->fault_file);
	if (t->b.pid != 0)
		harness_kill(&t->b);
	free(t);
	return 0;
}

void
harness_shim_finish(struct harness_shim *t)
{
	harness_finish(&t->b);
	if (getenv("IDEM_TEST_KEEP") == NULL)
		unlink(t->fault_file);
}

void
harness_fault_rule(const char *rule_file, const char *rule)
{
	char	temp[PATH_MAX + 8];
	size_t	length = strlen(rule);
	int	fd;

	snprintf(temp, sizeof temp, "%s.new", rule_file);
	fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_int_not_equal(fd, -1);
	assert_int_equal(write(fd, rule, length), (ssize_t)length);
	assert_int_equal(close(fd), 0);
	assert_int_equal(rename(temp, rule_file), 0);
}
