/* SPDX-License-Identifier: ISC */
/*
 * bench_broker.c: the brokers idem-bench starts, stops and asks (idemd on
 * a fresh root, its counters, its journal's size) and what their
 * processes spend (/proc samples, --syscalls' strace).
 */
#include "bench.h"

/* ---- brokers ----------------------------------------------------------- */

void
print_log_tail(const char *path)
{
	char	buf[2048];
	ssize_t	n;
	off_t	size;
	int	fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof buf - 1)
		lseek(fd, size - (off_t)sizeof buf + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	if ((n = read(fd, buf, sizeof buf - 1)) > 0) {
		buf[n] = '\0';
		fprintf(stderr, "--- %s (tail) ---\n%s--- end ---\n", path, buf);
	}
	close(fd);
}

/*
 * User and system time of a live process (whole process, every thread):
 * start-up is CPU-bound, and this figure does not move with the load
 * the way the wall clock does.
 */
static double
process_cpu_s(pid_t pid)
{
	char		 path[64], buf[1024], *p;
	unsigned long	 utime, stime;
	ssize_t		 n;
	int		 fd;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return NAN;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return NAN;
	buf[n] = '\0';
	/* Fields 14 and 15, counted after the ")" that ends the name. */
	if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 2,
	    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
	    &stime) != 2)
		return NAN;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

#ifdef HAVE_POSTGRESQL
/*
 * A process's own CPU (utime + stime) and its reaped children's (cutime
 * + cstime), in seconds, and its parent: -1 if /proc does not say.
 */
int
process_times(pid_t pid, double *own, double *reaped, pid_t *ppid)
{
	char		 path[64], buf[1024], *p;
	unsigned long	 utime, stime;
	long		 cutime, cstime, parent;
	double		 hz = (double)sysconf(_SC_CLK_TCK);
	ssize_t		 n;
	int		 fd;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 2,
	    "%*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %ld %ld",
	    &parent, &utime, &stime, &cutime, &cstime) != 5)
		return -1;
	*own = (double)(utime + stime) / hz;
	*reaped = (double)(cutime + cstime) / hz;
	*ppid = (pid_t)parent;
	return 0;
}

/*
 * A server's CPU in seconds: the master's own and its reaped children's
 * (a PostgreSQL backend that ended is reaped by the postmaster, so its
 * time lands there), plus every live child's own (backends, WAL writer,
 * checkpointer, ...).  NAN if the master is not ours to read.  Children
 * of children are not counted (PostgreSQL's processes are all the
 * postmaster's).
 */
double
server_cpu_s(pid_t master)
{
	char		 name[300];
	struct dirent	*de;
	double		 own, reaped, total;
	pid_t		 parent;
	DIR		*d;

	if (master <= 0 || process_times(master, &own, &reaped, &parent) != 0)
		return NAN;
	total = own + reaped;
	if ((d = opendir("/proc")) == NULL)
		return NAN;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(name, sizeof name, "%s", de->d_name);
		if (process_times((pid_t)atol(name), &own, &reaped,
		    &parent) == 0 && parent == master)
			total += own;
	}
	closedir(d);
	return total;
}
#endif

/* The master and its children (the workers). */
static int
broker_pids(pid_t master, pid_t *pids, int max)
{
	char		 path[300], buf[512], *p;
	struct dirent	*de;
	DIR		*d;
	ssize_t		 n;
	long		 ppid;
	int		 fd, count = 0;

	pids[count++] = master;
	if ((d = opendir("/proc")) == NULL)
		return count;
	while ((de = readdir(d)) != NULL && count < max) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
			continue;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if ((p = strrchr(buf, ')')) != NULL &&
		    sscanf(p + 2, "%*c %ld", &ppid) == 1 && ppid == master)
			pids[count++] = (pid_t)atol(de->d_name);
	}
	closedir(d);
	return count;
}

static void
proc_sample_task(const char *dir, struct proc_sample *s)
{
	char			 path[PATH_MAX + 400], line[256];
	unsigned long long	 a, b;
	FILE			*f;

	snprintf(path, sizeof path, "%s/status", dir);
	if ((f = fopen(path, "re")) != NULL) {
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line, "voluntary_ctxt_switches: %llu",
			    &a) == 1)
				s->voluntary += a;
			else if (sscanf(line, "nonvoluntary_ctxt_switches: "
			    "%llu", &a) == 1)
				s->involuntary += a;
		}
		fclose(f);
	}
	snprintf(path, sizeof path, "%s/schedstat", dir);
	if ((f = fopen(path, "re")) != NULL) {
		if (fscanf(f, "%llu %llu", &a, &b) == 2) {
			s->run_ns += a;
			s->wait_ns += b;
		}
		fclose(f);
	}
	s->tasks++;
}

void
proc_sample(pid_t master, struct proc_sample *s)
{
	char		 dir[64], task[400];
	struct dirent	*de;
	double		 cpu;
	DIR		*d;
	int		 i;

	memset(s, 0, sizeof *s);
	if (master <= 0)
		return;
	s->procs = broker_pids(master, s->pids, BENCH_MAX_BROKER_PROCS);
	for (i = 0; i < s->procs; i++) {
		if (!isnan(cpu = process_cpu_s(s->pids[i])))
			s->cpu_s += cpu;
		snprintf(dir, sizeof dir, "/proc/%ld/task", (long)s->pids[i]);
		if ((d = opendir(dir)) == NULL)
			continue;
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(task, sizeof task, "%s/%s", dir, de->d_name);
			proc_sample_task(task, s);
		}
		closedir(d);
	}
	s->ok = s->tasks > 0;
}

static int	strace_err_fd = -1;

/* Does every thread of the sample's processes have a tracer? */
static int
all_traced(const struct proc_sample *s)
{
	char		 dir[64], path[400], line[256];
	struct dirent	*de;
	DIR		*d;
	FILE		*f;
	long		 tracer;
	int		 i, traced = 1;

	for (i = 0; i < s->procs && traced; i++) {
		snprintf(dir, sizeof dir, "/proc/%ld/task", (long)s->pids[i]);
		if ((d = opendir(dir)) == NULL)
			return 0;
		while (traced && (de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof path, "%s/%s/status", dir,
			    de->d_name);
			if ((f = fopen(path, "re")) == NULL)
				continue;
			tracer = -1;
			while (fgets(line, sizeof line, f) != NULL &&
			    sscanf(line, "TracerPid: %ld", &tracer) != 1)
				;
			fclose(f);
			traced = tracer > 0;
		}
		closedir(d);
	}
	return traced;
}

/*
 * strace says nothing once it has attached every thread of a process:
 * look at /proc until each has a tracer (every millisecond, for at most
 * five seconds).  Untimed: before the release.
 */
static int
traced_wait(const struct proc_sample *s)
{
	struct timespec	ms = { 0, 1000000 };
	int		i;

	for (i = 0; i < 5000; i++) {
		if (all_traced(s))
			return 1;
		nanosleep(&ms, NULL);
	}
	return 0;
}

/*
 * --syscalls: strace -c -f attached to every idemd process (all their
 * threads) for the timed part.  It slows the broker down many times, so
 * the run's rates and latencies mean nothing then: only the counts.
 * Returns strace's pid once every thread is attached, or -1.
 */
pid_t
strace_attach(const struct proc_sample *s, const char *out)
{
	const char	*argv[8 + 2 * BENCH_MAX_SAMPLE_PROCS];
	char		 pidtext[BENCH_MAX_SAMPLE_PROCS][16], buf[4096];
	char		*line, *nl;
	size_t		 used = 0;
	ssize_t		 n;
	pid_t		 pid;
	int		 pipefd[2], i, argc = 0, attached = 0;

	strace_err_fd = -1;

	argv[argc++] = "strace";
	argv[argc++] = "-c";
	argv[argc++] = "-U";
	argv[argc++] = "calls";
	argv[argc++] = "-f";
	argv[argc++] = "-o";
	argv[argc++] = out;
	for (i = 0; i < s->procs; i++) {
		snprintf(pidtext[i], sizeof pidtext[i], "%ld",
		    (long)s->pids[i]);
		argv[argc++] = "-p";
		argv[argc++] = pidtext[i];
	}
	argv[argc] = NULL;
	if (pipe2(pipefd, O_CLOEXEC) == -1)
		return -1;
	fflush(NULL);
	if ((pid = fork()) == -1)
		return -1;
	if (pid == 0) {
		dup2(pipefd[1], STDERR_FILENO);
		execvp("strace", (char *const *)argv);
		_exit(127);
	}
	close(pipefd[1]);
	/*
	 * "strace: Process N attached": at least one line per process (not
	 * always one per thread), then every thread shows a tracer.
	 */
	while (attached < s->procs &&
	    (n = read(pipefd[0], buf + used, sizeof buf - 1 - used)) > 0) {
		used += (size_t)n;
		buf[used] = '\0';
		for (line = buf; (nl = strchr(line, '\n')) != NULL;
		    line = nl + 1) {
			if (strstr(line, " attached") != NULL)
				attached++;
		}
		used = strlen(line);
		memmove(buf, line, used + 1);
	}
	/* Kept open: strace's later messages must not meet a closed pipe. */
	strace_err_fd = pipefd[0];
	if (attached >= s->procs)
		attached = traced_wait(s) ? s->procs : 0;
	if (attached < s->procs) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(strace_err_fd);
		return -1;
	}
	return pid;
}

/*
 * Detach strace and read its total; -1 if there is none.  sends and
 * recvs (NULL: not wanted) get the sendto and recvfrom counts: idemd
 * speaks to its clients with read, write and sendmsg, so these are
 * libpq's send() and recv() on the PostgreSQL sockets (and the
 * listener's one recv a connection).
 */
double
strace_total_pg(pid_t pid, const char *out, double *sends, double *recvs)
{
	char	line[256], name[64];
	double	total = -1;
	long	calls;
	FILE	*f;

	if (sends != NULL)
		*sends = 0;
	if (recvs != NULL)
		*recvs = 0;

	kill(pid, SIGINT);
	while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
		;
	close(strace_err_fd);
	if ((f = fopen(out, "re")) == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, " %ld %63s", &calls, name) != 2)
			continue;
		if (strcmp(name, "total") == 0)
			total = (double)calls;
		else if (sends != NULL && strcmp(name, "sendto") == 0)
			*sends = (double)calls;
		else if (recvs != NULL && strcmp(name, "recvfrom") == 0)
			*recvs = (double)calls;
	}
	fclose(f);
	return total;
}

double
strace_total(pid_t pid, const char *out)
{
	return strace_total_pg(pid, out, NULL, NULL);
}

/*
 * Start idemd on root and wait for its --ready-fd line: a blocking read,
 * never a sleep.  *startup_s is exec to ready (the replay scenario's
 * figure).  capacity 0 keeps the broker's default.
 */
int
broker_start_as(struct broker *b, const char *root, uint32_t capacity,
    double *startup_s, const char *host)
{
	const char	*argv[16];
	struct pollfd	 pfd;
	char		 cap[32], buf[16];
	uint64_t	 t0;
	ssize_t		 got = 0;
	int		 ready[2], fd, n = 0;

	memset(b, 0, sizeof *b);
	snprintf(b->root, sizeof b->root, "%s", root);
	if (host == NULL) {
		snprintf(b->log, sizeof b->log, "%s.log", root);
		snprintf(b->socket, sizeof b->socket, "%s/%s", root,
		    IDEM_SOCKET_NAME);
		snprintf(b->lock, sizeof b->lock, "%s/%s", root,
		    IDEM_LOCK_NAME);
	} else {
		/* A cluster broker's own names (doc/cluster.md). */
		snprintf(b->log, sizeof b->log, "%s.%s.log", root, host);
		snprintf(b->socket, sizeof b->socket,
		    "%s/.idem/hosts/%s/idemd.sock", root, host);
		snprintf(b->lock, sizeof b->lock,
		    "%s/.idem/hosts/%s/idemd.lock", root, host);
	}
	if (pipe2(ready, O_CLOEXEC) == -1)
		err(1, "pipe");
	argv[n++] = opt.idemd;
	argv[n++] = "--root";
	argv[n++] = root;
	argv[n++] = "--ready-fd";
	argv[n++] = "3";
	/* Scenarios create far more than FCoP's 999 tasks a day. */
	argv[n++] = "--sequence-digits";
	argv[n++] = BENCH_SEQUENCE_DIGITS;
	if (capacity != 0) {
		snprintf(cap, sizeof cap, "%" PRIu32, capacity);
		argv[n++] = "--capacity";
		argv[n++] = cap;
	}
	if (host != NULL) {
		argv[n++] = "--store";
		argv[n++] = store_uri;
		argv[n++] = "--host-id";
		argv[n++] = host;
		if (opt.workers != NULL) {
			argv[n++] = "--workers";
			argv[n++] = opt.workers;
		}
		if (opt.store_connections != NULL) {
			argv[n++] = "--store-connections";
			argv[n++] = opt.store_connections;
		}
	}
	argv[n] = NULL;

	fflush(NULL);
	t0 = now_ns();
	if ((b->pid = fork()) == -1)
		err(1, "fork");
	if (b->pid == 0) {
		die_with_parent(SIGTERM);
		if ((fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND |
		    O_CLOEXEC, 0644)) != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) != -1)
			dup2(fd, 0);
		/* dup2 onto itself keeps O_CLOEXEC: clear it explicitly. */
		if (dup2(ready[1], 3) == -1 || fcntl(3, F_SETFD, 0) == -1)
			_exit(127);
		execv(opt.idemd, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", opt.idemd, strerror(errno));
		_exit(127);
	}
	close(ready[1]);
	pfd.fd = ready[0];
	pfd.events = POLLIN;
	if (poll(&pfd, 1, BENCH_START_TIMEOUT_MS) == 1)
		got = read(ready[0], buf, sizeof buf);
	if (startup_s != NULL)
		*startup_s = (double)(now_ns() - t0) / 1e9;
	close(ready[0]);
	if (got == 6 && memcmp(buf, "ready\n", 6) == 0) {
		b->ready_cpu_s = process_cpu_s(b->pid);
		return 0;
	}
	warnx("idemd on %s did not become ready", root);
	kill(b->pid, SIGKILL);
	waitpid(b->pid, NULL, 0);
	b->pid = 0;
	print_log_tail(b->log);
	return -1;
}

int
broker_start(struct broker *b, const char *root, uint32_t capacity,
    double *startup_s)
{
	return broker_start_as(b, root, capacity, startup_s, NULL);
}

/*
 * SIGTERM and wait for the exit, at most BENCH_STOP_TIMEOUT_MS (a pidfd
 * to poll, not a sleep).  -1 if it exited abnormally or had to be killed:
 * a broker that does not drain is a finding, not noise.
 */
int
broker_stop(struct broker *b)
{
	struct pollfd	pfd;
	int		status, fd, rv = 0;

	if (b->pid == 0)
		return 0;
	pfd.fd = (int)syscall(SYS_pidfd_open, b->pid, 0);
	pfd.events = POLLIN;
	kill(b->pid, SIGTERM);
	if (pfd.fd != -1) {
		if (poll(&pfd, 1, BENCH_STOP_TIMEOUT_MS) == 0) {
			warnx("idemd on %s did not exit within %d ms of "
			    "SIGTERM: killing it", b->root,
			    BENCH_STOP_TIMEOUT_MS);
			print_log_tail(b->log);
			kill(b->pid, SIGKILL);
			rv = -1;
		}
		close(pfd.fd);
	}
	while (waitpid(b->pid, &status, 0) == -1) {
		if (errno != EINTR)
			err(1, "waitpid");
	}
	if (rv == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
		warnx("idemd on %s exited abnormally (status 0x%x)", b->root,
		    status);
		print_log_tail(b->log);
		rv = -1;
	}
	b->pid = 0;
	/*
	 * Workers die with the master but hold the root's lock until they
	 * do: wait for it, so a restart on the same root does not race.
	 */
	if ((fd = open(b->lock, O_RDWR | O_CLOEXEC)) != -1) {
		while (flock(fd, LOCK_EX) == -1 && errno == EINTR)
			;
		close(fd);
	}
	return rv;
}

json_t *
broker_call(const char *socket, const char *request)
{
	struct idem_conn	*c;
	struct idem_error	 e;
	json_error_t		 jerr;
	json_t			*j;
	char			*answer;
	int			 rc;

	if ((c = idem_connect(socket, &e)) == NULL)
		return NULL;
	rc = idem_call_raw(c, request, &answer, &e);
	idem_close(c);
	if (rc != 0)
		return NULL;
	j = json_loads(answer, 0, &jerr);
	free(answer);
	if (j != NULL && !json_is_true(json_object_get(j, "ok"))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

int
broker_stats(const char *socket, struct broker_stats *s)
{
	json_t	*j;

	memset(s, 0, sizeof *s);
	if ((j = broker_call(socket, "{\"op\":\"stats\"}")) == NULL)
		return -1;
	s->fsyncs = json_integer_value(json_object_get(j, "journal_fsyncs"));
	s->records = json_integer_value(json_object_get(j,
	    "journal_records"));
	s->created = json_integer_value(json_object_get(j, "created"));
	s->errors = json_integer_value(json_object_get(j, "errors"));
	s->table_used = json_integer_value(json_object_get(j, "table_used"));
	s->reused = json_integer_value(json_object_get(j, "reused"));
	s->reused_fast = json_integer_value(json_object_get(j, "reused_fast"));
	json_decref(j);
	return 0;
}

/* Is the submission committed?  Read-only. */
int
broker_committed(const char *socket, const char *csid)
{
	json_t	*j, *sub;
	char	*request;
	int	 yes;

	if ((j = json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", csid)) == NULL ||
	    (request = json_dumps(j, JSON_COMPACT)) == NULL)
		errx(1, "out of memory");
	json_decref(j);
	j = broker_call(socket, request);
	free(request);
	if (j == NULL)
		return 0;
	sub = json_object_get(j, "submission");
	yes = json_is_true(json_object_get(j, "found")) &&
	    json_string_value(json_object_get(sub, "state")) != NULL &&
	    strcmp(json_string_value(json_object_get(sub, "state")),
	    "committed") == 0;
	json_decref(j);
	return yes;
}

static int
journal_bytes_apply(const struct journal_record *r, void *arg)
{
	(void)r;
	(void)arg;
	return 0;
}

/*
 * Bytes of journal records under root (segment headers not counted; in
 * format 2 each record's round prefix and sector padding counted with
 * it), from a read-only replay: not st_size, which counts the last segment's
 * zero tail (doc/journal.md, "The zero tail").
 */
double
journal_bytes(const char *root)
{
	struct journal_replay_stats	 stats;
	char				 path[PATH_MAX + 64], *cause = NULL;

	snprintf(path, sizeof path, "%s/%s", root, IDEM_JOURNAL_DIR);
	if (journal_replay(path, JOURNAL_REPLAY_READONLY, journal_bytes_apply,
	    NULL, &stats, &cause) != 0) {
		free(cause);
		return NAN;
	}
	return (double)stats.bytes;
}
