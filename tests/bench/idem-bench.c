/* SPDX-License-Identifier: ISC */
/*
 * idem-bench.c: how fast idemd creates and reuses tasks, measured next to
 * what this machine allows (doc/performance.md; issues "Fast as the disk
 * allows" and #14 "Close to the floor").
 *
 * It owns the brokers it starts (one fresh idemd and root per scenario
 * and client count, unless --socket names a running one) and the
 * references: the floor (the file-system work of a creation batch in
 * one plain C process), a SQLite peer doing the same bookkeeping
 * in-process, the disk limit (file + fsync + directory fsync, nothing
 * else) and the socket limit (an echo server; and one answering a
 * reused-sized reply that its clients parse with jansson); for the
 * effects scenario, a private redis-server made durable (appendfsync
 * always), the store a user would pick instead (issue #33).  For every
 * idemd scenario it reports the broker's CPU, context switches (and,
 * with --syscalls, system calls) per operation from /proc.  It never touches a broker's files while
 * that broker runs: the only broker file it writes is the journal of the
 * replay scenario, before its broker starts.  It deletes nothing until
 * the very end of the run, because on this file system a mass deletion
 * slows every later fsync for minutes and would skew what follows.
 *
 * DESIGN
 *
 * Every measured run is a job: K client processes forked by run_job(),
 * each with its own connection (or database handle, or directory), that
 * do everything untimed first (connect, build their request lines,
 * pre-create ids), write one byte on a "ready" pipe and block reading a
 * "go" pipe.  When all are ready the parent snapshots the broker's
 * counters and closes the go pipe, so every client wakes at once; no one
 * sleeps to wait.  Clients time each request with CLOCK_MONOTONIC (one
 * clock for every process) into a shared anonymous mapping, and their
 * end times too: throughput is the requests done over the time from the
 * release to the last client's end, and the latencies of all clients are
 * merged for p50, p99 and p999.  The disk limit's K writers are
 * processes too, not threads: one runner serves every job, and an fsync
 * costs the same from either.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/file.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include <dirent.h>
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#ifdef HAVE_SQLITE
#include <sqlite3.h>
#endif
#ifdef HAVE_POSTGRESQL
#include <glob.h>
#include <libpq-fe.h>

#include "pgserver.h"
#endif

#include "digest.h"
#include "store.h"

/*
 * Default sizes, chosen so that a default run (K = 1, 8, 32, every
 * scenario and reference) stays near three minutes on a 2-core machine
 * with a ~1 ms fdatasync.  --count overrides the per-scenario counts.
 */
#define BENCH_CREATE_OPS	2000	/* create, mixed, SQLite peer, disk */
#define BENCH_REUSE_OPS		20000	/* reuse, SQLite retries, echo */
#define BENCH_REUSE_IDS		256	/* committed ids that reuse retries */
/*
 * The cluster's reuse rows (and their local reference): a rule of 10%
 * wants runs of seconds, not the 0.6 s of BENCH_REUSE_OPS at K=8.
 */
#define BENCH_CLUSTER_REUSE_OPS	100000
/* Effects: runs of seconds at K=8 on both sides, Redis's GETs included. */
#define BENCH_EFFECT_OPS	10000
#define BENCH_EFFECT_REUSE_OPS	100000
#define BENCH_STORM_CLIENTS	64
#define BENCH_STORM_IDS		100
#define BENCH_REPLAY_CREATIONS	1000000
#define BENCH_SEQUENCE_DIGITS	"6"	/* idemd's largest: 999999 a day */
#define BENCH_TARGET_CLIENTS	8	/* the K the issue's targets are set at */

#define BENCH_BODY_BYTES	900	/* a ~1 KiB task once rendered */
#define BENCH_DISK_FILE_BYTES	1024
#define BENCH_ECHO_LINE_BYTES	200	/* newline included */
#define BENCH_ECHO_BUF_BYTES	4096
#define BENCH_ECHO_MAX_CONNS	1024
#define BENCH_FSYNC_PROBES	200
#define BENCH_COST_ROUNDS	20000
#define BENCH_FSYNC_PROBE_BYTES	4096
#define BENCH_WARM_STARTS	3
#define BENCH_START_TIMEOUT_MS	300000	/* a broker replaying a big journal */
#define BENCH_STOP_TIMEOUT_MS	30000
#define BENCH_JOURNAL_BUF_BYTES	(4 * 1024 * 1024)

#define BENCH_MAX_CLIENT_COUNTS	8
#define BENCH_MAX_CLIENTS	1024
#define BENCH_MAX_RESULTS	64
#define BENCH_TASK_ID_BYTES	96
#define BENCH_MIXED_NEW_PCT	70
#define BENCH_MIXED_RETRY_PCT	25	/* the remaining 5: other content */
/*
 * The floor: what a creation's journal records and TASK file weigh
 * (create's 583 journal bytes per creation, its ~1.5 KiB file).
 */
#define BENCH_FLOOR_RESERVE_BYTES	200
#define BENCH_FLOOR_COMMIT_BYTES	383
#define BENCH_FLOOR_FILE_BYTES		1536
#define BENCH_MAX_BROKER_PROCS		(IDEM_MAX_WORKERS + 1)
/* A sample of several brokers (the cluster's) holds all their pids. */
#define BENCH_MAX_SAMPLE_PROCS		(3 * BENCH_MAX_BROKER_PROCS)

enum scenario_bit {
	SC_CREATE = 1 << 0,
	SC_REUSE = 1 << 1,
	SC_MIXED = 1 << 2,
	SC_STORM = 1 << 3,
	SC_REPLAY = 1 << 4,
	SC_SQLITE = 1 << 5,	/* the references */
	SC_DISK = 1 << 6,
	SC_ECHO = 1 << 7,
	SC_FSYNC = 1 << 8,
	SC_COST = 1 << 9,
	SC_FLOOR = 1 << 10,
	SC_HISTORY = 1 << 11,	/* not in "all": it takes minutes and GBs */
	SC_CLUSTER = 1 << 12,	/* not in "all": brokers on PostgreSQL */
	SC_EFFECTS = 1 << 13	/* not in "all": beside a private Redis */
};

static const struct {
	const char	*name;
	unsigned	 bits;
} scenario_names[] = {
	{ "create", SC_CREATE },
	{ "reuse", SC_REUSE },
	{ "mixed", SC_MIXED },
	{ "storm", SC_STORM },
	{ "replay", SC_REPLAY },
	{ "sqlite", SC_SQLITE },
	{ "disk", SC_DISK },
	{ "echo", SC_ECHO },
	{ "fsync", SC_FSYNC },
	{ "cost", SC_COST },
	{ "floor", SC_FLOOR },
	{ "history", SC_HISTORY },
	{ "cluster", SC_CLUSTER },
	{ "effects", SC_EFFECTS },
	{ "all", ~0u & ~(SC_HISTORY | SC_CLUSTER | SC_EFFECTS) }
};

static struct options {
	const char	*idemd;
	const char	*dir;
	const char	*socket;	/* a running broker: start none */
	const char	*store;		/* cluster: postgresql://...; NULL: own */
	const char	*idemctl;
	const char	*workers;	/* cluster brokers' --workers */
	const char	*store_connections; /* their --store-connections */
	int		 clients_given;
	int		 clients[BENCH_MAX_CLIENT_COUNTS];
	int		 client_counts;
	size_t		 count;		/* 0: the defaults above */
	size_t		 replay_count;
	size_t		 history_count;
	unsigned	 scenarios;
	int		 keep;
	int		 json;
	int		 syscalls;	/* strace -c the brokers: counts only */
} opt;

/* One line of the final table. */
struct result {
	char		name[32];
	int		clients;
	uint64_t	ops;
	double		seconds;
	double		ops_per_s;
	double		p50_ms, p99_ms, p999_ms;
	int64_t		fsyncs, records;	/* broker deltas; -1: none */
	uint64_t	created, reused, conflict;
	uint64_t	errors;		/* error replies, failed operations */
	uint64_t	unexpected;	/* a disposition the scenario ruled out */
	int		failed;		/* did not run, or a check failed */
	int		skipped;
	/* Per operation: idemd's processes (or the floor's), NAN: none. */
	double		cpu_us;
	double		csw;		/* voluntary + involuntary */
	double		syscalls;	/* --syscalls only */
	/* PostgreSQL, per operation (cluster and pgbench rows; NAN: none). */
	double		pg_statements;
	double		pg_xacts;
	double		pg_wal_syncs;
	double		pg_wal_writes;
	double		pg_cpu_us;	/* the server's processes, /proc */
	double		pg_sends;	/* --syscalls: the brokers' sendto */
	double		pg_recvs;	/* and recvfrom */
	char		note[768];
};

static struct result	results[BENCH_MAX_RESULTS];
static size_t		result_count;

/* Replay and storm verdicts, for the summary. */
static struct {
	int	ran;
	size_t	creations;
	double	journal_bytes;
	double	bytes_per_creation;
	double	write_s;
	double	cold_s;
	double	warm_s[BENCH_WARM_STARTS];
	double	warm_median_s;
	double	warm_cpu_s;		/* the master's CPU time, median */
	long	broker_replay_ms;	/* idemd's own "replayed ... in N ms" */
	int	verified;
	char	note[768];
} replay;

static struct {
	int	ran;
	int	pass;
	char	note[768];
} storm;

/* The cluster's PostgreSQL: --store, or the private server's. */
static char	store_uri[512];
/* This run's directory; short enough that every path under it fits. */
static char	top[1024];
static char	id_prefix[64];		/* makes ids unique per run */
/* Other work on the machine skews everything: say how much there was. */
static double	load_start[3], load_end[3];

/* ---- small helpers ----------------------------------------------------- */

static uint64_t
now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t
wall_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *
xcalloc(size_t n, size_t size)
{
	void	*p;

	if ((p = calloc(n, size)) == NULL)
		err(1, "calloc");
	return p;
}

/* The child must not outlive us: a killed bench leaves no brokers. */
static void
die_with_parent(int sig)
{
	if (prctl(PR_SET_PDEATHSIG, sig) == -1)
		_exit(127);
	if (getppid() == 1)
		_exit(127);
}

static int
write_all(int fd, const void *p, size_t length)
{
	const char	*c = p;
	ssize_t		 n;

	while (length > 0) {
		n = send(fd, c, length, MSG_NOSIGNAL);
		if (n == -1 && errno == ENOTSOCK)
			n = write(fd, c, length);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		c += n;
		length -= (size_t)n;
	}
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int
cmp_long(const void *a, const void *b)
{
	long	x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

static int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least q of them at or below. */
static double
percentile_ms(const uint64_t *sorted, size_t n, double q)
{
	double	x = q * (double)n;
	size_t	rank = (size_t)x;

	if (n == 0)
		return NAN;
	if ((double)rank < x)
		rank++;
	if (rank == 0)
		rank = 1;
	return (double)sorted[rank - 1] / 1e6;
}

static struct result *
result_new(const char *name, int clients)
{
	struct result	*r;

	if (result_count == BENCH_MAX_RESULTS)
		errx(1, "too many results");
	r = &results[result_count++];
	memset(r, 0, sizeof *r);
	snprintf(r->name, sizeof r->name, "%s", name);
	r->clients = clients;
	r->fsyncs = r->records = -1;
	r->p50_ms = r->p99_ms = r->p999_ms = r->ops_per_s = NAN;
	r->cpu_us = r->csw = r->syscalls = NAN;
	r->pg_statements = r->pg_xacts = r->pg_wal_syncs = r->pg_wal_writes =
	    NAN;
	r->pg_cpu_us = r->pg_sends = r->pg_recvs = NAN;
	return r;
}

static void
result_note(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Notes accumulate, separated by "; ". */
static void
result_note(struct result *r, const char *fmt, ...)
{
	va_list	ap;
	size_t	used = strlen(r->note);

	if (used > 0 && used + 2 < sizeof r->note) {
		memcpy(r->note + used, "; ", 3);
		used += 2;
	}
	if (used >= sizeof r->note - 1)
		return;
	va_start(ap, fmt);
	vsnprintf(r->note + used, sizeof r->note - used, fmt, ap);
	va_end(ap);
}

static const struct result *
find_result(const char *name, int clients)
{
	size_t	i;

	for (i = 0; i < result_count; i++) {
		if (strcmp(results[i].name, name) == 0 &&
		    results[i].clients == clients && !results[i].skipped)
			return &results[i];
	}
	return NULL;
}

/* ---- tasks ------------------------------------------------------------- */

static const char	filler[] = "The quick brown fox jumps over the lazy "
    "dog; pack my box with five dozen liquor jugs.\n";

/*
 * A body of exactly BENCH_BODY_BYTES naming its id, so every task has
 * its own digest; variant 1 is the "same id, other content" of mixed.
 */
static void
make_body(char out[BENCH_BODY_BYTES + 1], const char *csid, int variant)
{
	size_t	n, k;
	int	w;

	w = snprintf(out, BENCH_BODY_BYTES + 1, "Benchmark task %s%s.\n\n",
	    csid, variant ? " (other content)" : "");
	n = w < 0 ? 0 : (size_t)w;
	if (n > BENCH_BODY_BYTES)
		n = BENCH_BODY_BYTES;
	while (n < BENCH_BODY_BYTES) {
		k = sizeof filler - 1;
		if (k > BENCH_BODY_BYTES - n)
			k = BENCH_BODY_BYTES - n;
		memcpy(out + n, filler, k);
		n += k;
	}
	out[BENCH_BODY_BYTES - 1] = '\n';
	out[BENCH_BODY_BYTES] = '\0';
}

struct bench_task {
	struct idem_task	task;
	char			subject[128];
	char			body[BENCH_BODY_BYTES + 1];
};

/* The same semantic fields for idemd's requests and for the SQLite peer. */
static void
bench_task(struct bench_task *bt, const char *csid, int variant)
{
	memset(bt, 0, sizeof *bt);
	snprintf(bt->subject, sizeof bt->subject, "Benchmark task %s", csid);
	make_body(bt->body, csid, variant);
	bt->task.sender = "PM";
	bt->task.recipient = "DEV";
	bt->task.subject = bt->subject;
	bt->task.body = bt->body;
	bt->task.priority = "P2";
	bt->task.thread_key = "bench";
}

static char *
task_line(const char *csid, int variant, json_int_t id)
{
	struct bench_task	 bt;
	json_t			*req;
	char			*line;

	bench_task(&bt, csid, variant);
	req = json_pack("{s:s, s:I, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}}",
	    "op", "write_task", "id", id, "client_submission_id", csid,
	    "task", "sender", bt.task.sender, "recipient", bt.task.recipient,
	    "subject", bt.task.subject, "body", bt.task.body, "priority",
	    bt.task.priority, "thread_key", bt.task.thread_key);
	if (req == NULL || (line = json_dumps(req, JSON_COMPACT)) == NULL)
		errx(1, "building a request: out of memory");
	json_decref(req);
	return line;
}

/* ---- brokers ----------------------------------------------------------- */

struct broker {
	pid_t	pid;		/* 0: not ours (--socket) */
	double	ready_cpu_s;	/* the master's CPU time when it was ready */
	char	root[PATH_MAX];
	char	socket[PATH_MAX];
	char	log[PATH_MAX];
	char	lock[PATH_MAX];	/* held by its processes until they exit */
};

static void
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
static int
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
static double
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

/*
 * What idemd's processes (the master and every worker) have spent: CPU
 * from each process's /proc/<pid>/stat (its threads, dead ones
 * included), context switches from every thread's
 * /proc/<pid>/task/<tid>/status, run and wait time from its schedstat.
 * A thread that ends between two samples takes its switches with it;
 * idemd's threads live as long as their process.  /proc counts no
 * system calls: --syscalls attaches strace for those.
 */
struct proc_sample {
	int		ok;
	int		procs;
	int		tasks;
	pid_t		pids[BENCH_MAX_SAMPLE_PROCS];
	double		cpu_s;
	uint64_t	voluntary;
	uint64_t	involuntary;
	uint64_t	run_ns;
	uint64_t	wait_ns;
};

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

static void
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
static pid_t
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
static double
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

static double
strace_total(pid_t pid, const char *out)
{
	return strace_total_pg(pid, out, NULL, NULL);
}

/*
 * Start idemd on root and wait for its --ready-fd line: a blocking read,
 * never a sleep.  *startup_s is exec to ready (the replay scenario's
 * figure).  capacity 0 keeps the broker's default.
 */
static int
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

static int
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
static int
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

struct broker_stats {
	int64_t	fsyncs;
	int64_t	records;
	int64_t	created;
	int64_t	errors;
	int64_t	table_used;
	int64_t	reused;
	int64_t	reused_fast;	/* 0 from a broker without the fast path */
};

static json_t *
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

static int
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
static int
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
static double
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

/* ---- the client runner ------------------------------------------------- */

/* What a client reports, in memory shared with the parent. */
struct client_report {
	uint64_t	end_ns;
	uint64_t	done;
	uint64_t	errors;
	uint64_t	unexpected;
	uint64_t	created;
	uint64_t	reused;
	uint64_t	conflict;
	uint64_t	setup_failed;
	uint64_t	cpu_ns;		/* the timed loop's CPU (getrusage) */
	char		first_error[256];
};

enum expect {
	EXPECT_CREATED,
	EXPECT_REUSED,
	EXPECT_CONFLICT,
	EXPECT_CREATED_OR_REUSED
};

struct request {
	const char	*line;
	enum expect	 expect;
	unsigned	 id_index;	/* storm: which of the ids */
};

struct client;

struct job {
	int		  clients;
	size_t		  ops;		/* per client */
	uint64_t	  seed;
	int		(*setup)(struct client *);
	int		(*op)(struct client *, size_t);
	void		(*cleanup)(struct client *);
	void		(*at_release)(void *);	/* parent, before the release */
	void		 *at_release_arg;
	const char	 *socket;	/* idemd or the echo server */
	/* Several brokers: client i uses sockets[i % nsockets]. */
	const char *const *sockets;
	int		  nsockets;
	const void	 *arg;		/* scenario data, read-only */
	char		 *storm_ids;	/* shared: clients x ids task ids */
};

/* A client's private state, in its own process. */
struct client {
	const struct job	*job;
	int			 index;
	struct client_report	*report;
	uint64_t		 rng;
	struct idem_conn	*conn;
	struct request		*reqs;
	int			 dir_fd;
	int			 redis_fd;	/* effects: Redis's socket */
	char			*buf;
#ifdef HAVE_SQLITE
	sqlite3			*db;
	sqlite3_stmt		*begin;
	sqlite3_stmt		*lookup;
	sqlite3_stmt		*maxseq;
	sqlite3_stmt		*insert;
	sqlite3_stmt		*commit;
	sqlite3_stmt		*rollback;
#endif
};

static void
client_error(struct client *cl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keep the first error of each client: the rest usually repeat it. */
static void
client_error(struct client *cl, const char *fmt, ...)
{
	va_list	ap;

	if (cl->report->first_error[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(cl->report->first_error, sizeof cl->report->first_error,
	    fmt, ap);
	va_end(ap);
}

static uint64_t
client_random(struct client *cl)
{
	/* xorshift64*: reproducible per client, no shared state. */
	cl->rng ^= cl->rng >> 12;
	cl->rng ^= cl->rng << 25;
	cl->rng ^= cl->rng >> 27;
	return cl->rng * 0x2545f4914f6cdd1dull;
}

/* User and system time of a getrusage, in ns. */
static uint64_t
rusage_ns(const struct rusage *ru)
{
	return ((uint64_t)ru->ru_utime.tv_sec + (uint64_t)ru->ru_stime.tv_sec) *
	    1000000000u + ((uint64_t)ru->ru_utime.tv_usec +
	    (uint64_t)ru->ru_stime.tv_usec) * 1000u;
}

static void __attribute__((noreturn))
client_main(const struct job *job, int index, struct client_report *report,
    uint64_t *latencies, uint64_t *starts, int ready_fd, int go_fd)
{
	struct client	cl;
	struct rusage	ru0, ru1;
	uint64_t	t;
	size_t		i;
	char		go;
	int		rc = 0;

	die_with_parent(SIGKILL);
	memset(&cl, 0, sizeof cl);
	cl.job = job;
	cl.index = index;
	cl.report = report;
	cl.dir_fd = -1;
	cl.redis_fd = -1;
	cl.rng = (job->seed + (uint64_t)index + 1) * 0x9e3779b97f4a7c15ull;
	if (cl.rng == 0)
		cl.rng = 1;
	if (job->setup != NULL && job->setup(&cl) != 0) {
		report->setup_failed = 1;
		rc = -1;
	}
	if (write(ready_fd, rc == 0 ? "r" : "f", 1) != 1)
		_exit(1);
	close(ready_fd);
	/* The parent closes the pipe: every client wakes at once. */
	while (read(go_fd, &go, 1) == -1 && errno == EINTR)
		;
	close(go_fd);
	getrusage(RUSAGE_SELF, &ru0);
	for (i = 0; rc == 0 && i < job->ops; i++) {
		t = now_ns();
		rc = job->op(&cl, i);
		latencies[i] = now_ns() - t;
		starts[i] = t;
		report->done = i + 1;
	}
	report->end_ns = now_ns();
	getrusage(RUSAGE_SELF, &ru1);
	report->cpu_ns = rusage_ns(&ru1) - rusage_ns(&ru0);
	if (job->cleanup != NULL)
		job->cleanup(&cl);
	/* Lines and buffers go with the process. */
	_exit(rc == 0 ? 0 : 1);
}

/*
 * With IDEM_BENCH_LATENCIES=DIR, every operation of the row into
 * DIR/<row>-k<K>.lat, a line each: its start in ms after the release,
 * its latency in us, its client; the first line the release's wall
 * time in ms, to line the operations up with idemd's log (what makes a
 * tail: checkpoints, rotations).  For diagnosis; nothing reads it.
 */
static void
latencies_dump(const struct job *job, const struct result *r,
    const struct client_report *reports, const uint64_t *latencies,
    const uint64_t *starts, uint64_t release, int64_t release_wall)
{
	const char	*dir = getenv("IDEM_BENCH_LATENCIES");
	char		 path[PATH_MAX];
	FILE		*f;
	size_t		 c, i, k;

	if (dir == NULL || *dir == '\0')
		return;
	snprintf(path, sizeof path, "%s/%s-k%d.lat", dir, r->name,
	    job->clients);
	if ((f = fopen(path, "w")) == NULL) {
		warn("%s", path);
		return;
	}
	fprintf(f, "# release %" PRId64 " ms since the epoch, %" PRIu64
	    " ns CLOCK_MONOTONIC\n", release_wall, release);
	for (c = 0; c < (size_t)job->clients; c++) {
		for (i = 0; i < reports[c].done; i++) {
			k = c * job->ops + i;
			fprintf(f, "%.3f %.1f %zu\n", starts[k] > release ?
			    (double)(starts[k] - release) / 1e6 : 0.0,
			    (double)latencies[k] / 1e3, c);
		}
	}
	if (fclose(f) != 0)
		warn("%s", path);
}

/*
 * Run job with its clients released together; fill r's timing, latency
 * and outcome fields.
 */
static void
run_job(const struct job *job, struct result *r)
{
	struct client_report	*reports;
	uint64_t		*latencies, *starts, *all, end = 0, release;
	uint64_t		 cpu_ns = 0;
	int64_t			 release_wall;
	size_t			 bytes, n = 0, c;
	pid_t			*pids;
	char			 buf[64], *first_error = NULL;
	ssize_t			 got;
	void			*map;
	int			 ready[2], go[2], status, ready_count = 0;
	int			 failed = 0;

	bytes = (size_t)job->clients * sizeof *reports +
	    2 * (size_t)job->clients * job->ops * sizeof *latencies;
	map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED |
	    MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		err(1, "mmap %zu bytes", bytes);
	reports = map;
	latencies = (uint64_t *)(reports + job->clients);
	starts = latencies + (size_t)job->clients * job->ops;
	pids = xcalloc((size_t)job->clients, sizeof *pids);
	if (pipe2(ready, O_CLOEXEC) == -1 || pipe2(go, O_CLOEXEC) == -1)
		err(1, "pipe");

	fflush(NULL);
	for (c = 0; c < (size_t)job->clients; c++) {
		if ((pids[c] = fork()) == -1)
			err(1, "fork");
		if (pids[c] == 0) {
			close(ready[0]);
			close(go[1]);
			client_main(job, (int)c, &reports[c],
			    latencies + c * job->ops, starts + c * job->ops,
			    ready[1], go[0]);
		}
	}
	close(ready[1]);
	close(go[0]);
	while (ready_count < job->clients) {
		got = read(ready[0], buf, sizeof buf);
		if (got == -1 && errno == EINTR)
			continue;
		if (got <= 0)
			break;	/* a client died before it was ready */
		ready_count += (int)got;
	}
	close(ready[0]);
	if (job->at_release != NULL)
		job->at_release(job->at_release_arg);
	release = now_ns();
	release_wall = wall_ms();
	close(go[1]);
	for (c = 0; c < (size_t)job->clients; c++) {
		while (waitpid(pids[c], &status, 0) == -1) {
			if (errno != EINTR)
				err(1, "waitpid");
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	free(pids);

	latencies_dump(job, r, reports, latencies, starts, release,
	    release_wall);
	all = xcalloc((size_t)job->clients * job->ops + 1, sizeof *all);
	for (c = 0; c < (size_t)job->clients; c++) {
		struct client_report	*cr = &reports[c];

		memcpy(all + n, latencies + c * job->ops,
		    cr->done * sizeof *all);
		n += cr->done;
		if (cr->done > 0 && cr->end_ns > end)
			end = cr->end_ns;
		r->errors += cr->errors;
		r->unexpected += cr->unexpected;
		r->created += cr->created;
		r->reused += cr->reused;
		r->conflict += cr->conflict;
		cpu_ns += cr->cpu_ns;
		if (cr->setup_failed)
			failed++;
		if (first_error == NULL && cr->first_error[0] != '\0')
			first_error = cr->first_error;
	}
	qsort(all, n, sizeof *all, cmp_u64);
	r->ops = n;
	r->seconds = end > release ? (double)(end - release) / 1e9 : NAN;
	r->ops_per_s = (double)n / r->seconds;
	r->p50_ms = percentile_ms(all, n, 0.50);
	r->p99_ms = percentile_ms(all, n, 0.99);
	r->p999_ms = percentile_ms(all, n, 0.999);
	/*
	 * The clients' own CPU: on this machine they share the CPUs with
	 * the server, so a client that costs more slows the server's rate
	 * as much as the server's own work does.
	 */
	if (n > 0)
		result_note(r, "clients per op: %.1f us CPU", (double)cpu_ns /
		    1e3 / (double)n);
	if (failed > 0) {
		r->failed = 1;
		result_note(r, "%d of %d clients failed", failed,
		    job->clients);
	}
	if (first_error != NULL)
		result_note(r, "first error: %s", first_error);
	free(all);
	munmap(map, bytes);
}

/* ---- idemd scenarios --------------------------------------------------- */

struct idem_scenario {
	char	tag[96];	/* id prefix of this scenario and K */
	size_t	ids;		/* reuse, storm: distinct ids */
};

static int
client_connect(struct client *cl)
{
	struct idem_error	 e;
	const char		*socket = cl->job->nsockets > 0 ?
				    cl->job->sockets[cl->index %
				    cl->job->nsockets] : cl->job->socket;

	if ((cl->conn = idem_connect(socket, &e)) == NULL) {
		client_error(cl, "connect %s: %s", socket, e.message);
		return -1;
	}
	return 0;
}

static void
client_disconnect(struct client *cl)
{
	idem_close(cl->conn);
	cl->conn = NULL;
}

enum outcome {
	OUTCOME_CREATED,
	OUTCOME_REUSED,
	OUTCOME_CONFLICT,
	OUTCOME_ERROR
};

static enum outcome
classify(const char *answer, char *task_id, size_t task_id_size, char *why,
    size_t why_size)
{
	json_error_t	 jerr;
	json_t		*j, *error;
	const char	*disposition, *code, *message, *id;
	enum outcome	 o = OUTCOME_ERROR;

	task_id[0] = why[0] = '\0';
	if ((j = json_loads(answer, 0, &jerr)) == NULL) {
		snprintf(why, why_size, "reply does not parse: %.100s",
		    jerr.text);
		return OUTCOME_ERROR;
	}
	disposition = json_string_value(json_object_get(j, "disposition"));
	if (json_is_true(json_object_get(j, "ok")) && disposition != NULL) {
		if (strcmp(disposition, "created") == 0)
			o = OUTCOME_CREATED;
		else if (strcmp(disposition, "reused") == 0)
			o = OUTCOME_REUSED;
		id = json_string_value(json_object_get(json_object_get(j,
		    "receipt"), "task_id"));
		if (id != NULL)
			snprintf(task_id, task_id_size, "%s", id);
	} else if (!json_is_true(json_object_get(j, "ok"))) {
		error = json_object_get(j, "error");
		code = json_string_value(json_object_get(error, "code"));
		message = json_string_value(json_object_get(error, "message"));
		if (code != NULL && strcmp(code, "conflict") == 0)
			o = OUTCOME_CONFLICT;
		else
			snprintf(why, why_size, "%s: %s", code != NULL ? code :
			    "no code", message != NULL ? message : "");
	}
	if (o == OUTCOME_ERROR && why[0] == '\0')
		snprintf(why, why_size, "reply without a known disposition: "
		    "%.120s", answer);
	json_decref(j);
	return o;
}

static int
expected(enum expect e, enum outcome o)
{
	switch (e) {
	case EXPECT_CREATED:
		return o == OUTCOME_CREATED;
	case EXPECT_REUSED:
		return o == OUTCOME_REUSED;
	case EXPECT_CONFLICT:
		return o == OUTCOME_CONFLICT;
	case EXPECT_CREATED_OR_REUSED:
		return o == OUTCOME_CREATED || o == OUTCOME_REUSED;
	}
	return 0;
}

static const char *
outcome_name(enum outcome o)
{
	switch (o) {
	case OUTCOME_CREATED:
		return "created";
	case OUTCOME_REUSED:
		return "reused";
	case OUTCOME_CONFLICT:
		return "conflict";
	case OUTCOME_ERROR:
		break;
	}
	return "error";
}

/*
 * One request, counted.  -1 only when the connection is gone: an error
 * reply is a counted outcome, not a reason to stop.
 */
static int
idem_request(struct client *cl, const struct request *rq, size_t i)
{
	struct idem_error	 e;
	enum outcome		 o;
	char			*answer, task_id[BENCH_TASK_ID_BYTES], why[160];

	if (idem_call_raw(cl->conn, rq->line, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "request %zu: %s", i, e.message);
		return -1;
	}
	o = classify(answer, task_id, sizeof task_id, why, sizeof why);
	free(answer);
	switch (o) {
	case OUTCOME_CREATED:
		cl->report->created++;
		break;
	case OUTCOME_REUSED:
		cl->report->reused++;
		break;
	case OUTCOME_CONFLICT:
		cl->report->conflict++;
		break;
	case OUTCOME_ERROR:
		cl->report->errors++;
		client_error(cl, "request %zu: %s", i, why);
		return 0;
	}
	if (!expected(rq->expect, o)) {
		cl->report->unexpected++;
		client_error(cl, "request %zu: unexpected %s", i,
		    outcome_name(o));
	}
	if (cl->job->storm_ids != NULL && task_id[0] != '\0') {
		const struct idem_scenario	*s = cl->job->arg;

		snprintf(cl->job->storm_ids + ((size_t)cl->index * s->ids +
		    rq->id_index) * BENCH_TASK_ID_BYTES, BENCH_TASK_ID_BYTES,
		    "%s", task_id);
	}
	return 0;
}

static int
op_idem(struct client *cl, size_t i)
{
	return idem_request(cl, &cl->reqs[i], i);
}

static int
setup_create(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	char				 csid[160];
	size_t				 i;

	if (client_connect(cl) != 0)
		return -1;
	cl->reqs = xcalloc(cl->job->ops, sizeof *cl->reqs);
	for (i = 0; i < cl->job->ops; i++) {
		snprintf(csid, sizeof csid, "%s-c%d-%zu", s->tag, cl->index, i);
		cl->reqs[i].line = task_line(csid, 0, (json_int_t)i);
		cl->reqs[i].expect = EXPECT_CREATED;
	}
	return 0;
}

/*
 * Every client builds the lines of all ids, creates its share of them
 * (untimed, before the barrier), and then retries ids of every client:
 * all are committed by the time the barrier opens.
 */
static int
setup_reuse(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	struct request			 first;
	char				 csid[160], **lines;
	size_t				 g, i, start;

	if (client_connect(cl) != 0)
		return -1;
	lines = xcalloc(s->ids, sizeof *lines);
	for (g = 0; g < s->ids; g++) {
		snprintf(csid, sizeof csid, "%s-%zu", s->tag, g);
		lines[g] = task_line(csid, 0, (json_int_t)g);
	}
	for (g = (size_t)cl->index; g < s->ids; g += (size_t)cl->job->clients) {
		first.line = lines[g];
		first.expect = EXPECT_CREATED;
		if (idem_request(cl, &first, g) != 0)
			return -1;
	}
	if (cl->report->errors > 0 || cl->report->unexpected > 0)
		return -1;
	cl->report->created = 0;
	cl->reqs = xcalloc(cl->job->ops, sizeof *cl->reqs);
	start = (size_t)cl->index * (s->ids / (size_t)cl->job->clients);
	for (i = 0; i < cl->job->ops; i++) {
		cl->reqs[i].line = lines[(start + i) % s->ids];
		cl->reqs[i].expect = EXPECT_REUSED;
	}
	return 0;
}

/*
 * 70% new ids, 25% retries of this client's earlier ids (reused), 5%
 * an earlier id with other content (conflict).  Only this client's own
 * ids are retried: its own earlier reply proves them committed.
 */
static int
setup_mixed(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	size_t				*earlier, nearlier = 0, i, pick;
	char				 csid[160];
	unsigned			 roll;

	if (client_connect(cl) != 0)
		return -1;
	cl->reqs = xcalloc(cl->job->ops, sizeof *cl->reqs);
	earlier = xcalloc(cl->job->ops, sizeof *earlier);
	for (i = 0; i < cl->job->ops; i++) {
		roll = (unsigned)(client_random(cl) % 100);
		if (roll < BENCH_MIXED_NEW_PCT || nearlier == 0) {
			snprintf(csid, sizeof csid, "%s-c%d-%zu", s->tag,
			    cl->index, i);
			cl->reqs[i].line = task_line(csid, 0, (json_int_t)i);
			cl->reqs[i].expect = EXPECT_CREATED;
			earlier[nearlier++] = i;
			continue;
		}
		pick = earlier[client_random(cl) % nearlier];
		snprintf(csid, sizeof csid, "%s-c%d-%zu", s->tag, cl->index,
		    pick);
		if (roll < BENCH_MIXED_NEW_PCT + BENCH_MIXED_RETRY_PCT) {
			cl->reqs[i].line = task_line(csid, 0, (json_int_t)i);
			cl->reqs[i].expect = EXPECT_REUSED;
		} else {
			cl->reqs[i].line = task_line(csid, 1, (json_int_t)i);
			cl->reqs[i].expect = EXPECT_CONFLICT;
		}
	}
	free(earlier);
	return 0;
}

/* Every client sends every id once, in its own shuffled order. */
static int
setup_storm(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	struct request			 t;
	char				 csid[160];
	size_t				 i, j;

	if (client_connect(cl) != 0)
		return -1;
	cl->reqs = xcalloc(s->ids, sizeof *cl->reqs);
	for (i = 0; i < s->ids; i++) {
		snprintf(csid, sizeof csid, "%s-%zu", s->tag, i);
		cl->reqs[i].line = task_line(csid, 0, (json_int_t)i);
		cl->reqs[i].expect = EXPECT_CREATED_OR_REUSED;
		cl->reqs[i].id_index = (unsigned)i;
	}
	for (i = s->ids - 1; i > 0; i--) {
		j = (size_t)(client_random(cl) % (i + 1));
		t = cl->reqs[i];
		cl->reqs[i] = cl->reqs[j];
		cl->reqs[j] = t;
	}
	return 0;
}

struct stats_snapshot {
	const char		*socket;
	struct broker_stats	 before;
	int			 ok;
	pid_t			 master;	/* 0: not ours, no /proc */
	const char		*who;		/* NULL: "broker" */
	struct proc_sample	 proc;
	pid_t			 strace;	/* --syscalls; -1: none */
	char			 strace_out[PATH_MAX + 16];
};

static void
snapshot_stats(void *arg)
{
	struct stats_snapshot	*ss = arg;

	ss->ok = broker_stats(ss->socket, &ss->before) == 0;
	ss->strace = -1;
	if (ss->master <= 0)
		return;
	proc_sample(ss->master, &ss->proc);
	if (opt.syscalls && ss->proc.ok)
		ss->strace = strace_attach(&ss->proc, ss->strace_out);
}

/* What the broker's processes spent per operation of the timed part. */
static void
broker_costs(struct stats_snapshot *ss, struct result *r)
{
	struct proc_sample	 after;
	double			 calls = -1;

	if (ss->master <= 0 || !ss->proc.ok || r->ops == 0)
		return;
	proc_sample(ss->master, &after);
	if (ss->strace > 0)
		calls = strace_total(ss->strace, ss->strace_out);
	if (!after.ok)
		return;
	r->cpu_us = (after.cpu_s - ss->proc.cpu_s) * 1e6 / (double)r->ops;
	r->csw = (double)(after.voluntary + after.involuntary -
	    ss->proc.voluntary - ss->proc.involuntary) / (double)r->ops;
	if (calls >= 0)
		r->syscalls = calls / (double)r->ops;
	result_note(r, "%s per op: %.0f us CPU, %.1f context switches "
	    "(%.1f involuntary), %.0f us run-queue wait", ss->who != NULL ?
	    ss->who : "broker", r->cpu_us, r->csw,
	    (double)(after.involuntary - ss->proc.involuntary) /
	    (double)r->ops, (double)(after.wait_ns - ss->proc.wait_ns) /
	    1e3 / (double)r->ops);
	if (calls >= 0)
		result_note(r, "%.1f system calls (strace: rates and switches void)",
		    r->syscalls);
	else if (opt.syscalls)
		result_note(r, "strace failed: no system call count");
}

/* Count TASK files (and anything else) in root's inbox. */
static int
count_inbox(const char *root, size_t *tasks, size_t *others)
{
	char		 path[PATH_MAX + 64];
	struct dirent	*de;
	size_t		 length;
	DIR		*d;

	*tasks = *others = 0;
	snprintf(path, sizeof path, "%s/%s", root, IDEM_INBOX_DIR);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		length = strlen(de->d_name);
		if (strncmp(de->d_name, "TASK-", 5) == 0 && length > 3 &&
		    strcmp(de->d_name + length - 3, ".md") == 0)
			(*tasks)++;
		else
			(*others)++;
	}
	closedir(d);
	return 0;
}

static void
storm_verdict(struct result *r, const struct broker *b,
    const struct idem_scenario *s, const char *ids, int clients)
{
	const char	*first, *other;
	size_t		 g, c, split = 0, missing = 0, tasks, others;
	int		 pass = !r->failed && r->errors == 0 &&
			    r->unexpected == 0 && r->created == s->ids;

	for (g = 0; g < s->ids; g++) {
		first = ids + g * BENCH_TASK_ID_BYTES;
		for (c = 0; c < (size_t)clients; c++) {
			other = ids + (c * s->ids + g) * BENCH_TASK_ID_BYTES;
			if (other[0] == '\0')
				missing++;
			else if (strcmp(first, other) != 0)
				split++;
		}
	}
	if (split > 0 || missing > 0)
		pass = 0;
	result_note(r, "%" PRIu64 " created, %" PRIu64 " reused, %" PRIu64
	    " error replies", r->created, r->reused, r->errors);
	if (split > 0 || missing > 0)
		result_note(r, "%zu replies named another task id than the "
		    "first client's, %zu had none", split, missing);
	if (b->pid == 0) {
		result_note(r, "files not counted (--socket)");
	} else if (count_inbox(b->root, &tasks, &others) == -1) {
		result_note(r, "inbox unreadable: %s", strerror(errno));
		pass = 0;
	} else {
		result_note(r, "inbox: %zu TASK files, %zu other entries",
		    tasks, others);
		if (tasks != s->ids || others != 0)
			pass = 0;
	}
	storm.ran = 1;
	storm.pass = pass;
	snprintf(storm.note, sizeof storm.note, "%s", r->note);
	if (!pass)
		r->failed = 1;
	/* The verdict first, where a reader looks. */
	memmove(r->note + 6, r->note, sizeof r->note - 6);
	memcpy(r->note, pass ? "PASS: " : "FAIL: ", 6);
	r->note[sizeof r->note - 1] = '\0';
}

/*
 * One idemd scenario at K clients, on a fresh broker and root (or the
 * --socket broker): the counters' delta over the timed part only.
 */
static void
run_idem_op(const char *name, int clients, size_t total_ops, size_t ids,
    int (*setup)(struct client *), int (*op)(struct client *, size_t))
{
	struct stats_snapshot	 ss;
	struct broker_stats	 after;
	struct idem_scenario	 s;
	struct broker		 b;
	struct result		*r = result_new(name, clients);
	struct job		 job;
	char			 root[PATH_MAX];
	size_t			 ids_bytes = 0;
	double			 jbytes;

	memset(&b, 0, sizeof b);
	if (opt.socket != NULL) {
		snprintf(b.socket, sizeof b.socket, "%s", opt.socket);
	} else {
		snprintf(root, sizeof root, "%s/%s-k%d", top, name, clients);
		/* A scenario run twice (the cluster's interleaving): afresh. */
		if (access(root, F_OK) == 0)
			snprintf(root, sizeof root, "%s/%s-k%d.%zu", top, name,
			    clients, result_count);
		if (broker_start(&b, root, 0, NULL) != 0) {
			r->failed = 1;
			result_note(r, "idemd did not start (log %s.log)", root);
			return;
		}
	}
	memset(&s, 0, sizeof s);
	snprintf(s.tag, sizeof s.tag, "%s-%s-k%d", id_prefix, name, clients);
	s.ids = ids;
	memset(&ss, 0, sizeof ss);
	ss.socket = b.socket;
	ss.master = b.pid;
	snprintf(ss.strace_out, sizeof ss.strace_out, "%s/%s-k%d.strace", top,
	    name, clients);

	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = strcmp(name, "storm") == 0 ? ids :
	    (total_ops / (size_t)clients > 0 ? total_ops / (size_t)clients : 1);
	job.seed = (uint64_t)clients * 1000003u + (uint64_t)name[0];
	job.setup = setup;
	job.op = op;
	job.cleanup = client_disconnect;
	job.at_release = snapshot_stats;
	job.at_release_arg = &ss;
	job.socket = b.socket;
	job.arg = &s;
	if (strcmp(name, "storm") == 0) {
		ids_bytes = (size_t)clients * ids * BENCH_TASK_ID_BYTES;
		job.storm_ids = mmap(NULL, ids_bytes, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (job.storm_ids == MAP_FAILED)
			err(1, "mmap");
	}
	run_job(&job, r);
	broker_costs(&ss, r);

	if (ss.ok && broker_stats(b.socket, &after) == 0) {
		r->fsyncs = after.fsyncs - ss.before.fsyncs;
		r->records = after.records - ss.before.records;
		if (after.reused > ss.before.reused)
			result_note(r, "%.0f%% of reused by the fast path",
			    100.0 * (double)(after.reused_fast -
			    ss.before.reused_fast) / (double)(after.reused -
			    ss.before.reused));
		if (after.errors != ss.before.errors)
			result_note(r, "broker counted %" PRId64 " errors",
			    after.errors - ss.before.errors);
	} else {
		result_note(r, "stats op unavailable");
	}
	if (strcmp(name, "create") == 0 && r->created > 0 && b.pid != 0) {
		jbytes = journal_bytes(b.root);
		if (r->records >= 0)
			result_note(r, "per creation: %.2f records, %.2f "
			    "journal fsyncs, %.0f journal bytes; %.1f records "
			    "a journal fsync",
			    (double)r->records / (double)r->created,
			    (double)r->fsyncs / (double)r->created,
			    jbytes / (double)r->created,
			    r->fsyncs > 0 ? (double)r->records /
			    (double)r->fsyncs : 0.0);
	}
	if (strcmp(name, "mixed") == 0)
		result_note(r, "%" PRIu64 " created, %" PRIu64 " reused, %"
		    PRIu64 " conflict", r->created, r->reused, r->conflict);
	if (strcmp(name, "effect") == 0 && r->created > 0 && r->records >= 0)
		result_note(r, "per effect: %.2f journal records, %.2f journal "
		    "fsyncs", (double)r->records / (double)r->created,
		    (double)r->fsyncs / (double)r->created);
	if (r->unexpected > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " unexpected dispositions",
		    r->unexpected);
	}
	if (r->errors > 0 && strcmp(name, "storm") != 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " error replies", r->errors);
	}
	if (job.storm_ids != NULL) {
		storm_verdict(r, &b, &s, job.storm_ids, clients);
		munmap(job.storm_ids, ids_bytes);
	}
	if (broker_stop(&b) != 0) {
		r->failed = 1;
		result_note(r, "idemd did not stop cleanly on SIGTERM");
	}
}

static void
run_idem(const char *name, int clients, size_t total_ops, size_t ids,
    int (*setup)(struct client *))
{
	run_idem_op(name, clients, total_ops, ids, setup, op_idem);
}

/* ---- reference: the disk limit ---------------------------------------- */

struct disk_arg {
	char	dir[PATH_MAX];
};

static int
setup_disk(struct client *cl)
{
	const struct disk_arg	*a = cl->job->arg;

	if ((cl->dir_fd = open(a->dir, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1) {
		client_error(cl, "%s: %s", a->dir, strerror(errno));
		return -1;
	}
	cl->buf = xcalloc(1, BENCH_DISK_FILE_BYTES);
	memset(cl->buf, 'd', BENCH_DISK_FILE_BYTES);
	return 0;
}

/* A new 1 KiB file made durable, and its name: nothing else. */
static int
op_disk(struct client *cl, size_t i)
{
	char	name[64];
	int	fd;

	snprintf(name, sizeof name, "f-%d-%zu", cl->index, i);
	fd = openat(cl->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    0644);
	if (fd == -1 || write_all(fd, cl->buf, BENCH_DISK_FILE_BYTES) == -1 ||
	    fsync(fd) == -1 || close(fd) == -1 || fsync(cl->dir_fd) == -1) {
		cl->report->errors++;
		client_error(cl, "%s: %s", name, strerror(errno));
		return -1;
	}
	cl->report->created++;
	return 0;
}

static void
run_disk(int clients, size_t total_ops)
{
	struct disk_arg	 a;
	struct result	*r = result_new("disk-limit", clients);
	struct job	 job;

	snprintf(a.dir, sizeof a.dir, "%s/disk-k%d", top, clients);
	if (mkdir(a.dir, 0755) == -1)
		err(1, "mkdir %s", a.dir);
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.setup = setup_disk;
	job.op = op_disk;
	job.arg = &a;
	run_job(&job, r);
}

/* ---- reference: the floor ---------------------------------------------- */

/*
 * The file-system work the contract needs and nothing else, in one
 * process: per batch of K creations, the reservations' append and
 * fdatasync overlapped with K temporary files written and fsync'd by K
 * threads, then K links (and the temporary names removed, as idemd
 * does), one directory fsync, and the commits' append and fdatasync.
 * No socket, no table, no JSON.  Every creation of a batch takes the
 * batch's time; the CPU is the process's own (getrusage: all threads).
 */
struct floor_run {
	int			 k;
	int			 dir_fd;
	int			 journal_fd;
	int			 stop;
	uint64_t		 batch;
	pthread_barrier_t	 start, done;
	char			 file[BENCH_FLOOR_FILE_BYTES];
	int			*failed;	/* per thread */
	char			*records;	/* k commit records' bytes */
};

struct floor_thread {
	struct floor_run	*run;
	int			 index;
};

static void *
floor_writer(void *arg)
{
	struct floor_thread	*t = arg;
	struct floor_run	*run = t->run;
	char			 name[64];
	int			 fd;

	for (;;) {
		pthread_barrier_wait(&run->start);
		if (run->stop)
			return NULL;
		snprintf(name, sizeof name, "tmp-%d", t->index);
		fd = openat(run->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL |
		    O_CLOEXEC, 0644);
		if (fd == -1 || write_all(fd, run->file, sizeof run->file) ==
		    -1 || fsync(fd) == -1 || close(fd) == -1)
			run->failed[t->index] = errno != 0 ? errno : EIO;
		pthread_barrier_wait(&run->done);
	}
}

/* One append of k records and its fdatasync, as the journaler does. */
static int
floor_append(struct floor_run *run, size_t bytes)
{
	return write_all(run->journal_fd, run->records, (size_t)run->k *
	    bytes) == 0 && fdatasync(run->journal_fd) == 0 ? 0 : -1;
}

static void
run_floor(int clients, size_t total_ops)
{
	struct result		*r = result_new("floor", clients);
	struct floor_run	 run;
	struct floor_thread	*threads;
	struct rusage		 ru0, ru1;
	pthread_t		*tids;
	uint64_t		*lat, t0, t, release;
	size_t			 batches, b, n = 0;
	char			 dir[PATH_MAX], from[64], to[64];
	int			 i, failed = 0;

	memset(&run, 0, sizeof run);
	run.k = clients;
	batches = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	snprintf(dir, sizeof dir, "%s/floor-k%d", top, clients);
	if (mkdir(dir, 0755) == -1)
		err(1, "mkdir %s", dir);
	if ((run.dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1 || (run.journal_fd = openat(run.dir_fd, "journal", O_WRONLY |
	    O_CREAT | O_APPEND | O_CLOEXEC, 0644)) == -1)
		err(1, "%s", dir);
	memset(run.file, 'f', sizeof run.file);
	run.records = xcalloc((size_t)clients, BENCH_FLOOR_COMMIT_BYTES);
	memset(run.records, 'j', (size_t)clients * BENCH_FLOOR_COMMIT_BYTES);
	run.failed = xcalloc((size_t)clients, sizeof *run.failed);
	lat = xcalloc(batches * (size_t)clients, sizeof *lat);
	threads = xcalloc((size_t)clients, sizeof *threads);
	tids = xcalloc((size_t)clients, sizeof *tids);
	if (pthread_barrier_init(&run.start, NULL, (unsigned)clients + 1) ||
	    pthread_barrier_init(&run.done, NULL, (unsigned)clients + 1))
		errx(1, "pthread_barrier_init");
	for (i = 0; i < clients; i++) {
		threads[i].run = &run;
		threads[i].index = i;
		if (pthread_create(&tids[i], NULL, floor_writer,
		    &threads[i]) != 0)
			errx(1, "pthread_create");
	}
	getrusage(RUSAGE_SELF, &ru0);
	release = now_ns();
	for (b = 0; b < batches && !failed; b++) {
		t0 = now_ns();
		pthread_barrier_wait(&run.start);
		if (floor_append(&run, BENCH_FLOOR_RESERVE_BYTES) != 0)
			failed = errno;
		pthread_barrier_wait(&run.done);
		for (i = 0; i < clients; i++) {
			if (run.failed[i] != 0)
				failed = run.failed[i];
			snprintf(from, sizeof from, "tmp-%d", i);
			snprintf(to, sizeof to, "TASK-%zu-%d.md", b, i);
			if (linkat(run.dir_fd, from, run.dir_fd, to, 0) == -1 ||
			    unlinkat(run.dir_fd, from, 0) == -1)
				failed = errno;
		}
		if (fsync(run.dir_fd) == -1 ||
		    floor_append(&run, BENCH_FLOOR_COMMIT_BYTES) != 0)
			failed = errno;
		t = now_ns() - t0;
		for (i = 0; i < clients; i++)
			lat[n++] = t;
	}
	t = now_ns();
	getrusage(RUSAGE_SELF, &ru1);
	run.stop = 1;
	pthread_barrier_wait(&run.start);
	for (i = 0; i < clients; i++)
		pthread_join(tids[i], NULL);
	pthread_barrier_destroy(&run.start);
	pthread_barrier_destroy(&run.done);
	close(run.journal_fd);
	close(run.dir_fd);

	qsort(lat, n, sizeof *lat, cmp_u64);
	r->ops = n;
	r->created = n;
	r->seconds = (double)(t - release) / 1e9;
	r->ops_per_s = (double)n / r->seconds;
	r->p50_ms = percentile_ms(lat, n, 0.50);
	r->p99_ms = percentile_ms(lat, n, 0.99);
	r->p999_ms = percentile_ms(lat, n, 0.999);
	if (n > 0) {
		r->cpu_us = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec +
		    ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e6 +
		    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec +
		    ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / (double)n;
		r->csw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw + ru1.ru_nivcsw -
		    ru0.ru_nivcsw) / (double)n;
		result_note(r, "per creation: %.0f us CPU, %.1f context "
		    "switches; %zu batches of %d", r->cpu_us, r->csw, b,
		    clients);
	}
	if (failed) {
		r->failed = 1;
		result_note(r, "failed: %s", strerror(failed));
	}
	free(lat);
	free(threads);
	free(tids);
	free(run.failed);
	free(run.records);
}

/* ---- reference: the socket limit -------------------------------------- */

struct echo_conn {
	int	fd;
	size_t	length;
	char	buf[BENCH_ECHO_BUF_BYTES];
};

/*
 * socket-echo-json: the server answers every line with this reply (a
 * reused reply's shape and size) instead of the line itself.
 */
static char	*echo_reply;
static size_t	 echo_reply_length;

/* Echo every complete line back; 0, or -1 when the connection is done. */
static int
echo_read(struct echo_conn *ec)
{
	ssize_t	 n;
	char	*nl;
	size_t	 upto;

	n = read(ec->fd, ec->buf + ec->length, sizeof ec->buf - ec->length);
	if (n == -1 && errno == EINTR)
		return 0;
	if (n <= 0)
		return -1;
	ec->length += (size_t)n;
	if ((nl = memrchr(ec->buf, '\n', ec->length)) == NULL)
		return ec->length == sizeof ec->buf ? -1 : 0;
	upto = (size_t)(nl - ec->buf) + 1;
	if (echo_reply != NULL) {
		for (nl = ec->buf; (nl = memchr(nl, '\n', (size_t)(ec->buf +
		    upto - nl))) != NULL; nl++) {
			if (write_all(ec->fd, echo_reply, echo_reply_length) ==
			    -1)
				return -1;
		}
	} else if (write_all(ec->fd, ec->buf, upto) == -1)
		return -1;
	ec->length -= upto;
	memmove(ec->buf, ec->buf + upto, ec->length);
	return 0;
}

/* A poll() loop that does nothing but echo lines: the socket limit. */
static void __attribute__((noreturn))
echo_serve(int listen_fd)
{
	struct echo_conn	*conns;
	struct pollfd		*pfd;
	int			 count = 0, c, fd;

	die_with_parent(SIGKILL);
	conns = xcalloc(BENCH_ECHO_MAX_CONNS, sizeof *conns);
	pfd = xcalloc(BENCH_ECHO_MAX_CONNS + 1, sizeof *pfd);
	for (;;) {
		pfd[0].fd = listen_fd;
		pfd[0].events = POLLIN;
		for (c = 0; c < count; c++) {
			pfd[c + 1].fd = conns[c].fd;
			pfd[c + 1].events = POLLIN;
		}
		if (poll(pfd, (nfds_t)count + 1, -1) == -1) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		/* Backwards: a closed one is replaced by one already seen. */
		for (c = count - 1; c >= 0; c--) {
			if (pfd[c + 1].revents == 0)
				continue;
			if (echo_read(&conns[c]) == -1) {
				close(conns[c].fd);
				conns[c] = conns[--count];
			}
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* Non-blocking listener: the other echo process may win. */
		while ((fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC)) !=
		    -1) {
			if (count == BENCH_ECHO_MAX_CONNS) {
				close(fd);
				continue;
			}
			conns[count].fd = fd;
			conns[count].length = 0;
			count++;
		}
	}
}

static int
setup_echo(struct client *cl)
{
	if (client_connect(cl) != 0)
		return -1;
	cl->buf = xcalloc(1, BENCH_ECHO_LINE_BYTES);
	memset(cl->buf, 'e', BENCH_ECHO_LINE_BYTES - 1);
	return 0;
}

/*
 * socket-echo-json's client: a request line of reuse's size, and the
 * reply parsed with jansson and checked, as reuse's clients do.
 */
static int
setup_echo_json(struct client *cl)
{
	char	csid[160];

	if (client_connect(cl) != 0)
		return -1;
	snprintf(csid, sizeof csid, "%s-echo-json-0", id_prefix);
	cl->buf = task_line(csid, 0, 0);
	return 0;
}

static int
op_echo_json(struct client *cl, size_t i)
{
	struct idem_error	 e;
	char			*answer, task_id[BENCH_TASK_ID_BYTES], why[160];

	if (idem_call_raw(cl->conn, cl->buf, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "echo %zu: %s", i, e.message);
		return -1;
	}
	if (classify(answer, task_id, sizeof task_id, why, sizeof why) !=
	    OUTCOME_REUSED)
		cl->report->unexpected++;
	free(answer);
	return 0;
}

/* The same client path as idemd's requests: idem_call_raw. */
static int
op_echo(struct client *cl, size_t i)
{
	struct idem_error	 e;
	char			*answer;

	if (idem_call_raw(cl->conn, cl->buf, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "echo %zu: %s", i, e.message);
		return -1;
	}
	if (strlen(answer) != BENCH_ECHO_LINE_BYTES - 1)
		cl->report->unexpected++;
	free(answer);
	return 0;
}

/*
 * As many echo processes as idemd has workers, sharing one listening
 * socket as idemd's workers do, so the two are compared like for like.
 */
static void
run_echo(int clients, size_t total_ops, int json)
{
	struct sockaddr_un	 sun;
	struct result		*r = result_new(json ? "socket-echo-json" :
				    "socket-echo", clients);
	struct job		 job;
	pid_t			 pids[IDEM_DEFAULT_WORKERS];
	char			 path[PATH_MAX];
	int			 fd, i, status;

	snprintf(path, sizeof path, "%s/echo%s-k%d.sock", top, json ? "j" : "",
	    clients);
	free(echo_reply);
	echo_reply = NULL;
	/* A reused reply as idemd sends it, of the same size. */
	if (json && asprintf(&echo_reply, "{\"ok\":true,\"id\":0,"
	    "\"disposition\":\"reused\",\"action_taken\":false,"
	    "\"idempotent\":true,\"receipt\":{\"client_submission_id\":"
	    "\"%s-echo-json-0\",\"task_id\":\"TASK-20261203-000001-PM-to-DEV\","
	    "\"task_path\":\"_lifecycle/inbox/TASK-20261203-000001-PM-to-DEV.md\","
	    "\"digest_schema\":\"write-task-v1\",\"request_digest\":\"%064d\","
	    "\"file_digest\":\"%064d\",\"state\":\"committed\","
	    "\"created_at\":\"2026-12-03T09:00:00.000Z\"}}\n", id_prefix, 0, 0)
	    == -1)
		err(1, "asprintf");
	echo_reply_length = echo_reply != NULL ? strlen(echo_reply) : 0;
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		r->failed = 1;
		result_note(r, "socket path %s too long", path);
		return;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1 || bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1 ||
	    listen(fd, 1024) == -1)
		err(1, "echo socket %s", path);
	fflush(NULL);
	for (i = 0; i < IDEM_DEFAULT_WORKERS; i++) {
		if ((pids[i] = fork()) == -1)
			err(1, "fork");
		if (pids[i] == 0)
			echo_serve(fd);
	}
	close(fd);

	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.setup = json ? setup_echo_json : setup_echo;
	job.op = json ? op_echo_json : op_echo;
	job.cleanup = client_disconnect;
	job.socket = path;
	run_job(&job, r);
	if (r->unexpected > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " wrong echoes", r->unexpected);
	}
	for (i = 0; i < IDEM_DEFAULT_WORKERS; i++) {
		kill(pids[i], SIGTERM);
		waitpid(pids[i], &status, 0);
	}
}

/* ---- reference: the SQLite peer --------------------------------------- */

#ifdef HAVE_SQLITE
struct sqlite_arg {
	char		dir[PATH_MAX];
	char		db[PATH_MAX + 16];
	char		inbox[PATH_MAX + 16];
	char		tag[96];
	uint32_t	date;
	size_t		created;	/* ids the create pass made: tag-0.. */
};

static int
sql_fail(struct client *cl, const char *what)
{
	cl->report->errors++;
	client_error(cl, "sqlite %s: %s", what, sqlite3_errmsg(cl->db));
	return -1;
}

static int
sql_prepare(struct client *cl, const char *sql, sqlite3_stmt **stmt)
{
	if (sqlite3_prepare_v2(cl->db, sql, -1, stmt, NULL) != SQLITE_OK)
		return sql_fail(cl, sql);
	return 0;
}

/* Run a statement without results (BEGIN, COMMIT, ROLLBACK). */
static int
sql_run(sqlite3_stmt *stmt)
{
	int	rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int
setup_sqlite(struct client *cl)
{
	const struct sqlite_arg	*a = cl->job->arg;
	char			*msg = NULL;

	if (sqlite3_open_v2(a->db, &cl->db, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK)
		return sql_fail(cl, "open");
	/* Waiting for the write lock is part of what the peer costs. */
	sqlite3_busy_timeout(cl->db, 60000);
	if (sqlite3_exec(cl->db, "PRAGMA synchronous=FULL", NULL, NULL,
	    &msg) != SQLITE_OK) {
		sqlite3_free(msg);
		return sql_fail(cl, "PRAGMA synchronous=FULL");
	}
	if (sql_prepare(cl, "BEGIN IMMEDIATE", &cl->begin) != 0 ||
	    sql_prepare(cl, "SELECT digest, task_id FROM submission WHERE "
	    "id = ?1", &cl->lookup) != 0 ||
	    sql_prepare(cl, "SELECT ifnull(max(rowid), 0) FROM submission",
	    &cl->maxseq) != 0 ||
	    sql_prepare(cl, "INSERT INTO submission (id, digest, task_id, "
	    "file_digest) VALUES (?1, ?2, ?3, ?4)", &cl->insert) != 0 ||
	    sql_prepare(cl, "COMMIT", &cl->commit) != 0 ||
	    sql_prepare(cl, "ROLLBACK", &cl->rollback) != 0)
		return -1;
	if ((cl->dir_fd = open(a->inbox, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1) {
		client_error(cl, "%s: %s", a->inbox, strerror(errno));
		return -1;
	}
	return 0;
}

static void
cleanup_sqlite(struct client *cl)
{
	sqlite3_finalize(cl->begin);
	sqlite3_finalize(cl->lookup);
	sqlite3_finalize(cl->maxseq);
	sqlite3_finalize(cl->insert);
	sqlite3_finalize(cl->commit);
	sqlite3_finalize(cl->rollback);
	sqlite3_close(cl->db);
}

/*
 * The peer's creation: the same digest, number, TASK file and file
 * digest as idemd, with SQLite as the table and its write lock as the
 * per-id exclusion.  The file is written while the lock is held, as it
 * must be for the lookup to mean anything.
 */
static int
op_sqlite_create(struct client *cl, size_t i)
{
	const struct sqlite_arg	*a = cl->job->arg;
	struct taskfile_task	 tf;
	struct bench_task	 bt;
	unsigned char		 sum[crypto_hash_sha256_BYTES];
	char			 csid[160], digest[IDEM_DIGEST_HEX_SIZE];
	char			 task_id[BENCH_TASK_ID_BYTES], name[128];
	char			 created_at[TASKFILE_TIME_BYTES];
	char			 file_hex[IDEM_DIGEST_HEX_SIZE];
	char			*bytes = NULL, *cause = NULL;
	size_t			 length;
	int64_t			 seq;
	int			 rc;

	snprintf(csid, sizeof csid, "%s-%zu", a->tag,
	    (size_t)cl->index * cl->job->ops + i);
	bench_task(&bt, csid, 0);
	if (idem_task_digest(&bt.task, digest) != 0) {
		cl->report->errors++;
		client_error(cl, "digest: %s", strerror(errno));
		return -1;
	}
	if (sql_run(cl->begin) != 0)
		return sql_fail(cl, "BEGIN IMMEDIATE");
	sqlite3_bind_text(cl->lookup, 1, csid, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->lookup);
	sqlite3_reset(cl->lookup);
	if (rc == SQLITE_ROW) {
		cl->report->unexpected++;
		sql_run(cl->rollback);
		return 0;
	}
	if (rc != SQLITE_DONE || sqlite3_step(cl->maxseq) != SQLITE_ROW) {
		sqlite3_reset(cl->maxseq);
		sql_fail(cl, "lookup");
		goto fail;
	}
	seq = sqlite3_column_int64(cl->maxseq, 0) + 1;
	sqlite3_reset(cl->maxseq);

	taskfile_format_id(SUBTAB_KIND_TASK, a->date, (uint32_t)seq, "PM", 2,
	    "DEV", 3, task_id, sizeof task_id);
	taskfile_format_time(wall_ms(), created_at);
	memset(&tf, 0, sizeof tf);
	tf.task_id = task_id;
	tf.task = &bt.task;
	tf.created_at = created_at;
	tf.client_submission_id = csid;
	tf.request_digest = digest;
	if (taskfile_render_task(&tf, &bytes, &length) != 0) {
		cl->report->errors++;
		client_error(cl, "render: %s", strerror(errno));
		goto fail;
	}
	crypto_hash_sha256(sum, (const unsigned char *)bytes, length);
	sodium_bin2hex(file_hex, sizeof file_hex, sum, sizeof sum);
	snprintf(name, sizeof name, "%s.md", task_id);
	if (taskfile_write_durable(cl->dir_fd, name, bytes, length, 0,
	    &cause) != 0) {
		cl->report->errors++;
		client_error(cl, "%s", cause != NULL ? cause : "write");
		free(cause);
		goto fail;
	}
	free(bytes);
	bytes = NULL;
	sqlite3_bind_text(cl->insert, 1, csid, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 2, digest, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 3, task_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(cl->insert, 4, file_hex, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->insert);
	sqlite3_reset(cl->insert);
	if (rc != SQLITE_DONE) {
		sql_fail(cl, "INSERT");
		goto fail;
	}
	if (sql_run(cl->commit) != 0) {
		sql_fail(cl, "COMMIT");
		goto fail;
	}
	cl->report->created++;
	return 0;

fail:
	free(bytes);
	sql_run(cl->rollback);
	return -1;
}

/* The peer's retry: the digest, one lookup, compare, return. */
static int
op_sqlite_retry(struct client *cl, size_t i)
{
	const struct sqlite_arg	*a = cl->job->arg;
	struct bench_task	 bt;
	const unsigned char	*stored;
	char			 csid[160], digest[IDEM_DIGEST_HEX_SIZE];
	size_t			 g;
	int			 rc;

	g = ((size_t)cl->index * (a->created / (size_t)cl->job->clients) +
	    i) % a->created;
	snprintf(csid, sizeof csid, "%s-%zu", a->tag, g);
	bench_task(&bt, csid, 0);
	if (idem_task_digest(&bt.task, digest) != 0) {
		cl->report->errors++;
		client_error(cl, "digest: %s", strerror(errno));
		return -1;
	}
	sqlite3_bind_text(cl->lookup, 1, csid, -1, SQLITE_STATIC);
	rc = sqlite3_step(cl->lookup);
	stored = rc == SQLITE_ROW ? sqlite3_column_text(cl->lookup, 0) : NULL;
	if (stored != NULL && strcmp((const char *)stored, digest) == 0)
		cl->report->reused++;
	else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		cl->report->unexpected++;
	else {
		sqlite3_reset(cl->lookup);
		return sql_fail(cl, "lookup");
	}
	sqlite3_reset(cl->lookup);
	return 0;
}

static int
sqlite_make(struct sqlite_arg *a)
{
	sqlite3	*db;
	char	*msg = NULL;
	int	 rc;

	if (mkdir(a->dir, 0755) == -1 || mkdir(a->inbox, 0755) == -1) {
		warn("mkdir %s", a->dir);
		return -1;
	}
	if (sqlite3_open(a->db, &db) != SQLITE_OK) {
		warnx("sqlite %s: %s", a->db, sqlite3_errmsg(db));
		sqlite3_close(db);
		return -1;
	}
	rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE "
	    "submission (id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
	    "task_id TEXT NOT NULL, file_digest TEXT NOT NULL)", NULL, NULL,
	    &msg);
	if (rc != SQLITE_OK)
		warnx("sqlite %s: %s", a->db, msg);
	sqlite3_free(msg);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}
#endif

/* Create at K, then retries of those ids at the same K. */
static void
run_sqlite(int clients, size_t create_ops, size_t retry_ops)
{
	struct result		*rc = result_new("sqlite-create", clients);
	struct result		*rr = result_new("sqlite-retry", clients);
#ifdef HAVE_SQLITE
	struct sqlite_arg	 a;
	struct job		 job;

	memset(&a, 0, sizeof a);
	snprintf(a.dir, sizeof a.dir, "%s/sqlite-k%d", top, clients);
	snprintf(a.db, sizeof a.db, "%s/peer.db", a.dir);
	snprintf(a.inbox, sizeof a.inbox, "%s/inbox", a.dir);
	snprintf(a.tag, sizeof a.tag, "%s-sqlite-k%d", id_prefix, clients);
	a.date = taskfile_date_of(wall_ms());
	if (sqlite_make(&a) != 0) {
		rc->failed = rr->failed = 1;
		result_note(rc, "could not create %s", a.db);
		return;
	}
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = create_ops / (size_t)clients > 0 ? create_ops /
	    (size_t)clients : 1;
	job.setup = setup_sqlite;
	job.op = op_sqlite_create;
	job.cleanup = cleanup_sqlite;
	job.arg = &a;
	run_job(&job, rc);
	if (rc->unexpected > 0 || rc->errors > 0)
		rc->failed = 1;
	a.created = (size_t)clients * job.ops;

	job.ops = retry_ops / (size_t)clients > 0 ? retry_ops /
	    (size_t)clients : 1;
	job.op = op_sqlite_retry;
	run_job(&job, rr);
	if (rr->unexpected > 0 || rr->errors > 0) {
		rr->failed = 1;
		result_note(rr, "%" PRIu64 " retries found no matching row",
		    rr->unexpected);
	}
#else
	(void)create_ops;
	(void)retry_ops;
	rc->skipped = rr->skipped = 1;
	result_note(rc, "skipped: built without libsqlite3");
	result_note(rr, "skipped: built without libsqlite3");
#endif
}

/* ---- reference: one 4 KiB append + fdatasync --------------------------- */

/*
 * Taken next to each client count's create run, so the p99 target
 * compares latencies of the same minutes: the disk's latency drifts a
 * lot with what else the machine does.
 */
static void
run_fsync_probe(int clients)
{
	struct result	*r = result_new("fdatasync-4k", clients);
	uint64_t	 lat[BENCH_FSYNC_PROBES], t, start;
	char		 path[PATH_MAX], buf[BENCH_FSYNC_PROBE_BYTES];
	size_t		 i;
	int		 fd;

	snprintf(path, sizeof path, "%s/fsync-probe-k%d", top, clients);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
	    0644);
	if (fd == -1)
		err(1, "%s", path);
	memset(buf, 'f', sizeof buf);
	start = now_ns();
	for (i = 0; i < BENCH_FSYNC_PROBES; i++) {
		t = now_ns();
		if (write_all(fd, buf, sizeof buf) == -1 || fdatasync(fd) == -1)
			err(1, "%s", path);
		lat[i] = now_ns() - t;
	}
	r->seconds = (double)(now_ns() - start) / 1e9;
	close(fd);
	qsort(lat, BENCH_FSYNC_PROBES, sizeof lat[0], cmp_u64);
	r->ops = BENCH_FSYNC_PROBES;
	r->ops_per_s = (double)r->ops / r->seconds;
	r->p50_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.5);
	r->p99_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.99);
	r->p999_ms = percentile_ms(lat, BENCH_FSYNC_PROBES, 0.999);
	result_note(r, "one 4 KiB append + fdatasync at a time, taken before "
	    "create at this K");
}

/* ---- the CPU cost of one retry's fixed steps ----------------------------- */

enum cost_step {
	COST_PARSE,		/* the broker parses the request line */
	COST_DIGEST,		/* normalize, canonical form, SHA-256 */
	COST_SHA256,		/* SHA-256 alone, of the request line's size */
	COST_REPLY,		/* the broker serializes the reply */
	COST_CLIENT,		/* the client parses the reply */
	COST_STEPS
};

static const char *const cost_names[COST_STEPS] = {
	"cost-parse", "cost-digest", "cost-sha256", "cost-reply",
	"cost-client"
};

/*
 * What a reuse round trip must compute whatever its design: the work a
 * retry does besides moving bytes, with the libraries idem is built on,
 * timed in this process one step at a time on the reuse scenario's own
 * request line.  Its sum over two CPUs bounds any broker's retry rate,
 * which is what the reuse targets are measured against.
 */
static void
run_cost(void)
{
	struct bench_task	 bt;
	struct result		*r;
	char			 hex[IDEM_DIGEST_HEX_SIZE], csid[96];
	char			*line, *reply_text;
	unsigned char		 sum[crypto_hash_sha256_BYTES];
	json_t			*reply, *parsed;
	uint64_t		 start;
	double			 us[COST_STEPS], total = 0;
	size_t			 length, i;
	int			 step;

	snprintf(csid, sizeof csid, "%s-cost-000001", id_prefix);
	bench_task(&bt, csid, 0);
	line = task_line(csid, 0, 1);
	length = strlen(line);
	reply = json_pack("{s:b, s:I, s:s, s:b, s:b, s:{s:s, s:s, s:s, s:s, "
	    "s:s, s:s, s:s, s:s}}", "ok", 1, "id", (json_int_t)1,
	    "disposition", "reused", "action_taken", 0, "idempotent", 1,
	    "receipt", "client_submission_id", csid, "task_id",
	    "TASK-20261202-007-PM-to-DEV", "task_path",
	    "_lifecycle/inbox/TASK-20261202-007-PM-to-DEV.md",
	    "digest_schema", "write-task-v1", "request_digest",
	    "8d2c0a8e3a4c6f1b0c1d2e3f405162738495a6b7c8d9eaf0b1c2d3e4f5a6b7c8",
	    "file_digest",
	    "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
	    "state", "committed", "created_at", "2026-12-02T12:00:00.123Z");
	if (reply == NULL || (reply_text = json_dumps(reply,
	    JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		errx(1, "building a reply: out of memory");
	for (step = 0; step < COST_STEPS; step++) {
		start = now_ns();
		for (i = 0; i < BENCH_COST_ROUNDS; i++) {
			switch (step) {
			case COST_PARSE:
				parsed = json_loadb(line, length,
				    JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
				    JSON_DECODE_ANY, NULL);
				if (parsed == NULL)
					errx(1, "cost: the request line "
					    "does not parse");
				json_decref(parsed);
				break;
			case COST_DIGEST:
				if (idem_task_digest(&bt.task, hex) != 0)
					err(1, "cost: idem_task_digest");
				break;
			case COST_SHA256:
				crypto_hash_sha256(sum,
				    (const unsigned char *)line, length);
				break;
			case COST_REPLY:
				free(json_dumps(reply,
				    JSON_COMPACT | JSON_PRESERVE_ORDER));
				break;
			case COST_CLIENT:
				json_decref(json_loads(reply_text, 0, NULL));
				break;
			}
		}
		r = result_new(cost_names[step], 1);
		r->ops = BENCH_COST_ROUNDS;
		r->seconds = (double)(now_ns() - start) / 1e9;
		r->ops_per_s = (double)r->ops / r->seconds;
		us[step] = r->seconds / (double)r->ops * 1e6;
		if (step != COST_SHA256)
			total += us[step];
		result_note(r, "%.2f us each (%zu-byte request, %zu-byte "
		    "reply)", us[step], length, strlen(reply_text));
	}
	/* The ceiling: every CPU doing nothing but these steps. */
	r = result_new("cost-retry", 1);
	r->ops_per_s = 1e6 / total * (double)sysconf(_SC_NPROCESSORS_ONLN);
	result_note(r, "parse + digest + reply + client parse: %.1f us a "
	    "retry; ops/s is the most %ld CPUs could do with no system call "
	    "at all", total, sysconf(_SC_NPROCESSORS_ONLN));
	free(reply_text);
	json_decref(reply);
	free(line);
}

/* ---- replay ------------------------------------------------------------ */

static int
journal_flush(struct journal *j, uint8_t *buf, size_t *used)
{
	struct iovec	 iov;
	char		*cause = NULL;

	if (*used == 0)
		return 0;
	iov.iov_base = buf;
	iov.iov_len = *used;
	if (journal_append(j, &iov, 1, &cause) != 0) {
		warnx("%s", cause != NULL ? cause : "journal append");
		free(cause);
		return -1;
	}
	*used = 0;
	return 0;
}

/*
 * Write what idemd's journal holds after n committed creations: per
 * creation the three snapshots a creation journals (reserved,
 * task_created, committed), encoded by the broker's own encoder.
 */
static int
replay_write_journal(const char *dir, size_t n)
{
	struct journal_record	 rec;
	struct subtab_entry	*e = &rec.entry;
	struct journal		 j;
	uint8_t			*buf;
	size_t			 used = 0, g, k, w;
	int64_t			 at = wall_ms();
	char			*cause = NULL;
	int			 state, rv = -1;

	if (journal_open(&j, dir, &cause) != 0) {
		warnx("%s", cause != NULL ? cause : "journal_open");
		free(cause);
		return -1;
	}
	buf = xcalloc(1, BENCH_JOURNAL_BUF_BYTES);
	memset(&rec, 0, sizeof rec);
	rec.type = JOURNAL_RECORD_ENTRY;
	e->kind = SUBTAB_KIND_TASK;
	e->schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	e->sender_length = 2;
	memcpy(e->sender, "PM", 2);
	e->recipient_length = 3;
	memcpy(e->recipient, "DEV", 3);
	e->date = taskfile_date_of(at);
	e->peer_uid = (uint32_t)getuid();
	e->peer_pid = (uint32_t)getpid();
	for (g = 0; g < n; g++) {
		e->key_length = (uint16_t)snprintf(rec.key, sizeof rec.key,
		    "replay-%07zu", g);
		e->seq = (uint32_t)g + 1;
		/* Distinct digests: the content is never looked at. */
		for (k = 0; k < IDEM_SHA256_BYTES; k++)
			e->request_digest[k] = (uint8_t)(g * 31 + k);
		e->reserved_at_ms = e->updated_at_ms = e->created_at_ms = at;
		for (state = SUBTAB_RESERVED; state <= SUBTAB_COMMITTED;
		    state++) {
			e->state = (uint8_t)state;
			for (k = 0; k < IDEM_SHA256_BYTES; k++)
				e->file_digest[k] = state == SUBTAB_RESERVED ?
				    0 : (uint8_t)(g * 17 + k);
			if (BENCH_JOURNAL_BUF_BYTES - used <
			    JOURNAL_MAX_RECORD_BYTES &&
			    journal_flush(&j, buf, &used) != 0)
				goto out;
			w = journal_encode(&rec, buf + used,
			    BENCH_JOURNAL_BUF_BYTES - used);
			if (w == 0) {
				warn("journal_encode");
				goto out;
			}
			used += w;
		}
	}
	if (journal_flush(&j, buf, &used) != 0)
		goto out;
	if (journal_sync(&j, &cause) != 0) {
		warnx("%s", cause != NULL ? cause : "journal_sync");
		free(cause);
		goto out;
	}
	rv = 0;
out:
	journal_close(&j);
	free(buf);
	return rv;
}

/*
 * The broker's own figures: the "... records (...) ... in N ms" line
 * each start-up logs, in order.  Returns how many were found.
 */
static int
log_replay_ms(const char *log, long *ms, int max)
{
	char	 line[512];
	char	*p, *in;
	int	 n = 0;
	FILE	*f;

	if ((f = fopen(log, "re")) == NULL)
		return 0;
	while (n < max && fgets(line, sizeof line, f) != NULL) {
		if ((p = strstr(line, " records (")) == NULL)
			continue;
		for (in = NULL; (p = strstr(p, " in ")) != NULL; p += 4)
			in = p;
		if (in != NULL)
			ms[n++] = strtol(in + 4, NULL, 10);
	}
	fclose(f);
	return n;
}

/* Evict the journal from the page cache: a start-up after a reboot. */
static void
replay_drop_cache(const char *dir)
{
	char	path[PATH_MAX + 64];
	int	fd;

	snprintf(path, sizeof path, "%s/0000000000000001.jnl", dir);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static void
run_replay(size_t n)
{
	struct broker_stats	 st;
	struct broker		 b;
	struct result		*r = result_new("replay", 1);
	char			 root[PATH_MAX], dir[PATH_MAX + 32];
	char			 path[PATH_MAX + 32], first[64], last[64];
	double			 sorted[BENCH_WARM_STARTS];
	double			 cpu[BENCH_WARM_STARTS];
	long			 logged[BENCH_WARM_STARTS + 1];
	uint64_t		 t0;
	uint32_t		 capacity;
	int			 i;

	replay.ran = 1;
	replay.creations = n;
	r->fsyncs = r->records = -1;
	snprintf(root, sizeof root, "%s/replay", top);
	snprintf(path, sizeof path, "%s/%s", root, IDEM_STATE_DIR);
	snprintf(dir, sizeof dir, "%s/%s", root, IDEM_JOURNAL_DIR);
	if (mkdir(root, 0755) == -1 || mkdir(path, 0700) == -1)
		err(1, "mkdir %s", path);
	fprintf(stderr, "replay: writing a journal of %zu committed "
	    "creations...\n", n);
	t0 = now_ns();
	if (replay_write_journal(dir, n) != 0) {
		r->failed = 1;
		result_note(r, "could not write the journal");
		return;
	}
	replay.write_s = (double)(now_ns() - t0) / 1e9;
	replay.journal_bytes = journal_bytes(root);
	replay.bytes_per_creation = replay.journal_bytes / (double)n;

	/* Room for every id and the broker's own slack. */
	capacity = (uint32_t)(n + n / 4 + 1024);
	snprintf(first, sizeof first, "replay-%07zu", (size_t)0);
	snprintf(last, sizeof last, "replay-%07zu", n - 1);
	replay_drop_cache(dir);
	if (broker_start(&b, root, capacity, &replay.cold_s) != 0) {
		r->failed = 1;
		result_note(r, "idemd did not start on the journal (log %s)",
		    b.log);
		return;
	}
	replay.verified = broker_stats(b.socket, &st) == 0 &&
	    st.table_used == (int64_t)n && broker_committed(b.socket, first) &&
	    broker_committed(b.socket, last);
	if (broker_stop(&b) != 0) {
		r->failed = 1;
		result_note(r, "idemd did not stop cleanly on SIGTERM");
	}
	for (i = 0; i < BENCH_WARM_STARTS; i++) {
		if (broker_start(&b, root, capacity, &replay.warm_s[i]) != 0) {
			r->failed = 1;
			result_note(r, "idemd did not restart");
			return;
		}
		cpu[i] = b.ready_cpu_s;
		if (broker_stop(&b) != 0) {
			r->failed = 1;
			result_note(r, "idemd did not stop cleanly on SIGTERM");
		}
		sorted[i] = replay.warm_s[i];
	}
	qsort(sorted, BENCH_WARM_STARTS, sizeof sorted[0], cmp_double);
	replay.warm_median_s = sorted[BENCH_WARM_STARTS / 2];
	qsort(cpu, BENCH_WARM_STARTS, sizeof cpu[0], cmp_double);
	replay.warm_cpu_s = cpu[BENCH_WARM_STARTS / 2];
	/* The log holds the cold start first, then the warm ones. */
	replay.broker_replay_ms = -1;
	if (log_replay_ms(b.log, logged, BENCH_WARM_STARTS + 1) ==
	    BENCH_WARM_STARTS + 1) {
		qsort(logged + 1, BENCH_WARM_STARTS, sizeof logged[0], cmp_long);
		replay.broker_replay_ms = logged[1 + BENCH_WARM_STARTS / 2];
	}

	r->ops = n;
	r->seconds = replay.warm_median_s;
	result_note(r, "exec to ready %.3f s warm (median of %d; %.2f s of "
	    "CPU), %.3f s with the journal out of the page cache; idemd's "
	    "own replay %ld ms (warm median); %.0f journal bytes per "
	    "creation", replay.warm_median_s, BENCH_WARM_STARTS,
	    replay.warm_cpu_s, replay.cold_s, replay.broker_replay_ms,
	    replay.bytes_per_creation);
	if (!replay.verified) {
		r->failed = 1;
		result_note(r, "NOT VERIFIED: the table does not hold every "
		    "committed id");
	}
	snprintf(replay.note, sizeof replay.note, "%s", r->note);
}

/* ---- history: the table as a cache of the index (issue 15) ------------- */

/*
 * A history of n committed effects is written straight into a fresh
 * root's index with index.c (the code the checkpoint uses: n requests
 * through the protocol would take hours here), then a broker with
 * --capacity n / BENCH_HISTORY_CAPACITY_DIVISOR starts on it and is
 * measured: start-up, its shared memory, creations with the table empty
 * and then full of committed entries (each then evicts one), retries of
 * cold ids (only in the index) against retries of hot ones (in the
 * table), and the disk per committed entry.
 *
 * The table's cost is judged on pairs: a second broker on a second root
 * with the same bulk index, started before the fill so that its map is
 * warm, keeps its table nearly empty, and after the fill the two are
 * measured in turns (full, empty; empty, full; full, empty).  Both then
 * meet the same disk, which the fill of about 1 GB leaves busy for
 * minutes: the first empty part, before the fill, is reported too but
 * compares two states of the disk as well as two of the table.
 */
#define BENCH_HISTORY_IDS		1000000
#define BENCH_HISTORY_CAPACITY_DIVISOR	10
#define BENCH_HISTORY_KIND		"bench.history/v1"
#define BENCH_HISTORY_TXN_PUTS		100000
#define BENCH_HISTORY_OPS		20000	/* per measured job, all clients */
#define BENCH_HISTORY_HOT_IDS		256
#define BENCH_HISTORY_FULL_TRIES	100000
#define BENCH_HISTORY_FULL_WAIT_US	200
#define BENCH_HISTORY_PAIRS		3	/* full/empty turns after the fill */

struct history_scenario {
	char	tag[96];	/* id prefix of the organic effects */
	size_t	ids;		/* cold: the bulk history's size */
	size_t	hot;		/* hot: ids tag-h-0 .. tag-h-(hot-1) */
	int	mode;		/* 0 create, 1 cold retry, 2 hot retry */
	size_t	base;		/* create: first index for this job */
};

static struct {
	int	ran;
	size_t	ids;
	uint32_t capacity;
	double	bulk_s;
	double	start_s;
	double	shm_mb;
	double	shm_resident_mb;	/* its pages in memory, at the end */
	double	index_bytes_per_id;
	double	disk_bytes_per_id;
	double	create_empty, create_full, cold_rate, hot_rate;
	double	paired_full, paired_empty;	/* the turns after the fill */
	double	cold_p99_ms, hot_p99_ms;
	int	verified;
} hist;

static void
history_key(char *out, size_t size, size_t i, size_t *length)
{
	*length = (size_t)snprintf(out, size, "%s%ch-%zu", BENCH_HISTORY_KIND,
	    SUBTAB_EFFECT_SEPARATOR, i);
}

/* generic-json-v1 of {"kind":KIND,"request":{"i":i}}, as idemd takes it. */
static void
history_digest(size_t i, uint8_t out[IDEM_SHA256_BYTES])
{
	char	canonical[128];
	int	n;

	n = snprintf(canonical, sizeof canonical,
	    "{\"kind\":\"%s\",\"request\":{\"i\":%zu}}", BENCH_HISTORY_KIND, i);
	digest_sha256(canonical, (size_t)n, out);
}

static int
history_bulk(const char *root, size_t n)
{
	struct index		 x;
	struct journal_record	 r;
	char			 dir[PATH_MAX + 32], *cause = NULL;
	static const char	 result[] = "{}";
	json_t			*req;
	char			*canonical;
	size_t			 i, length;
	uint8_t			 check[IDEM_SHA256_BYTES];
	int64_t			 now = wall_ms();

	/* The shortcut digest must be the broker's. */
	req = json_pack("{s:i}", "i", 7);
	if (digest_generic_canonical(BENCH_HISTORY_KIND, req, &canonical,
	    &length, NULL) != 0)
		errx(1, "digest_generic_canonical");
	digest_sha256(canonical, length, check);
	history_digest(7, r.entry.request_digest);
	if (memcmp(check, r.entry.request_digest, sizeof check) != 0)
		errx(1, "history: the bench's digest is not generic-json-v1");
	free(canonical);
	json_decref(req);

	snprintf(dir, sizeof dir, "%s/%s", root, IDEM_INDEX_DIR);
	if (index_open(&x, dir, 0, &cause) != 0) {
		warnx("%s", cause);
		return -1;
	}
	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_EFFECT;
	r.entry.kind = SUBTAB_KIND_EFFECT;
	r.entry.state = SUBTAB_COMMITTED;
	r.entry.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	r.entry.attempt = 1;
	r.entry.result_length = sizeof result - 1;
	digest_sha256(result, sizeof result - 1, r.entry.file_digest);
	r.result = (const uint8_t *)result;
	for (i = 0; i < n; i++) {
		if (i % BENCH_HISTORY_TXN_PUTS == 0 &&
		    ((i > 0 && index_commit(&x, 0, &cause) != 0) ||
		    index_begin(&x, &cause) != 0))
			goto fail;
		history_key(r.key, sizeof r.key, i, &length);
		r.entry.key_length = (uint16_t)length;
		history_digest(i, r.entry.request_digest);
		r.entry.reserved_at_ms = r.entry.updated_at_ms =
		    r.entry.created_at_ms = now;
		if (index_put(&x, INDEX_FULL, &r, &cause) != 0)
			goto fail;
	}
	if (index_commit(&x, 0, &cause) != 0)
		goto fail;
	index_close(&x);
	return 0;
fail:
	warnx("history: %s", cause != NULL ? cause : "index");
	index_close(&x);
	return -1;
}

static int
history_setup(struct client *cl)
{
	return client_connect(cl);
}

static void
history_cleanup(struct client *cl)
{
	client_disconnect(cl);
}

/* One effect_begin; its reply parsed (NULL on a transport failure). */
static json_t *
history_call(struct client *cl, json_t *request)
{
	struct idem_error	 e;
	char			*line, *answer;
	json_t			*j;
	int			 rc;

	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	if (line == NULL)
		return NULL;
	rc = idem_call_raw(cl->conn, line, &answer, &e);
	free(line);
	if (rc != 0) {
		client_error(cl, "%s", e.message);
		return NULL;
	}
	j = json_loads(answer, 0, NULL);
	free(answer);
	return j;
}

static int
history_op(struct client *cl, size_t n)
{
	const struct history_scenario	*s = cl->job->arg;
	json_t				*j, *c;
	const char			*d, *code;
	char				 id[192];
	size_t				 i;
	int				 tries;

	switch (s->mode) {
	case 0:
		snprintf(id, sizeof id, "%s-%d-%zu", s->tag, cl->index,
		    s->base + n);
		i = 0;
		break;
	case 1:
		i = client_random(cl) % s->ids;
		snprintf(id, sizeof id, "h-%zu", i);
		break;
	default:
		snprintf(id, sizeof id, "%s-%zu", s->tag,
		    (size_t)(client_random(cl) % s->hot));
		i = 0;
		break;
	}
	for (tries = 0;; tries++) {
		j = history_call(cl, json_pack("{s:s, s:s, s:s, s:{s:I}}",
		    "op", "effect_begin", "client_submission_id", id,
		    "effect_kind", BENCH_HISTORY_KIND, "request", "i",
		    (json_int_t)i));
		if (j == NULL)
			return -1;
		code = json_string_value(json_object_get(json_object_get(j,
		    "error"), "code"));
		/*
		 * Retryable by contract: the table waits for a checkpoint
		 * to make its committed entries evictable.  Retried as a
		 * client would, counted in the latency.
		 */
		if (code == NULL || strcmp(code, "table_full") != 0 ||
		    tries >= BENCH_HISTORY_FULL_TRIES)
			break;
		json_decref(j);
		usleep(BENCH_HISTORY_FULL_WAIT_US);
	}
	d = json_string_value(json_object_get(j, "disposition"));
	if (s->mode == 0) {
		if (d == NULL || strcmp(d, "proceed") != 0) {
			cl->report->errors++;
			client_error(cl, "begin %s: %s", id, d != NULL ? d :
			    json_string_value(json_object_get(json_object_get(j,
			    "error"), "code")));
			json_decref(j);
			return 0;
		}
		c = history_call(cl, json_pack("{s:s, s:s, s:s, s:s, s:s, "
		    "s:{}}", "op", "effect_complete", "client_submission_id",
		    id, "effect_kind", BENCH_HISTORY_KIND, "fence",
		    json_string_value(json_object_get(j, "fence")), "outcome",
		    "applied", "result"));
		json_decref(j);
		if (c == NULL)
			return -1;
		if (!json_is_true(json_object_get(c, "ok")))
			cl->report->errors++;
		else
			cl->report->created++;
		json_decref(c);
		return 0;
	}
	if (d != NULL && strcmp(d, "reused") == 0)
		cl->report->reused++;
	else {
		cl->report->unexpected++;
		client_error(cl, "retry %s: %s", id, d != NULL ? d : "error");
	}
	json_decref(j);
	return 0;
}

static void
history_job(struct result *r, const char *socket, struct history_scenario *s,
    int clients, size_t ops)
{
	struct job	job;

	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = ops / (size_t)clients;
	job.seed = (uint64_t)wall_ms();
	job.setup = history_setup;
	job.op = history_op;
	job.cleanup = history_cleanup;
	job.socket = socket;
	job.arg = s;
	run_job(&job, r);
}

static double
dir_bytes(const char *path)
{
	char		 p[PATH_MAX + 300];
	struct dirent	*de;
	struct stat	 st;
	double		 total = 0;
	DIR		*d;

	if ((d = opendir(path)) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		snprintf(p, sizeof p, "%s/%s", path, de->d_name);
		if (lstat(p, &st) == 0 && S_ISREG(st.st_mode))
			total += (double)st.st_blocks * 512;
	}
	closedir(d);
	return total;
}

static int64_t
history_stat(const char *socket, const char *name)
{
	json_t	*j;
	int64_t	 v;

	if ((j = broker_call(socket, "{\"op\":\"stats\"}")) == NULL)
		return -1;
	v = json_integer_value(json_object_get(j, name));
	json_decref(j);
	return v;
}

/* A root of n committed effects in its index, written in *seconds (if set). */
static int
history_root(const char *root, size_t n, double *seconds)
{
	char		path[PATH_MAX + 64];
	uint64_t	t0;

	snprintf(path, sizeof path, "%s/%s", root, IDEM_STATE_DIR);
	if (mkdir(root, 0755) == -1 || mkdir(path, 0700) == -1)
		err(1, "mkdir %s", path);
	fprintf(stderr, "history: writing %zu committed effects into the "
	    "index of %s...\n", n, root);
	t0 = now_ns();
	if (history_bulk(root, n) != 0)
		return -1;
	if (seconds != NULL)
		*seconds = (double)(now_ns() - t0) / 1e9;
	return 0;
}

/*
 * One turn of creations on broker b (its scenario s, whose ids go on from
 * where its last job stopped), as a row of its own; its ops and seconds
 * are added to *ops and *seconds.
 */
static void
history_turn(const char *name, const char *socket, struct history_scenario *s,
    size_t *made, int clients, uint64_t *ops, double *seconds)
{
	struct result	*r = result_new(name, clients);
	int64_t		 indexed, errors;

	indexed = history_stat(socket, "index_entries");
	errors = history_stat(socket, "errors");
	s->mode = 0;
	s->base = *made / (size_t)clients;
	history_job(r, socket, s, clients, BENCH_HISTORY_OPS / 2);
	*made += BENCH_HISTORY_OPS / 2;
	*ops += r->ops;
	*seconds += r->seconds;
	/* A checkpoint in the turn gives the index its new receipts. */
	result_note(r, "index +%lld, error replies +%lld (table_full, "
	    "retried)", (long long)(history_stat(socket, "index_entries") -
	    indexed), (long long)(history_stat(socket, "errors") - errors));
}

static void
run_history(size_t n, int clients)
{
	struct broker		 b, e;
	struct history_scenario	 s, se;
	struct result		*bulk = result_new("history-start", 1);
	struct result		*empty = result_new("history-create-empty",
				    clients);
	struct result		*full = result_new("history-create-full",
				    clients);
	struct result		*cold = result_new("history-cold-retry",
				    clients);
	struct result		*hot = result_new("history-hot-retry", clients);
	struct result		*paired;
	struct result		 fill;
	char			 root[PATH_MAX], path[PATH_MAX + 64];
	char			 root_e[PATH_MAX], turn[32], turn_e[32];
	char			 real[PATH_MAX], name[64], shm[PATH_MAX + 64];
	struct stat		 st;
	size_t			 made, made_e;
	int64_t			 entries;
	uint64_t		 full_ops = 0, empty_ops = 0;
	double			 full_s = 0, empty_s = 0;
	int			 i;

	hist.ran = 1;
	hist.ids = n;
	hist.capacity = (uint32_t)(n / BENCH_HISTORY_CAPACITY_DIVISOR);
	if (hist.capacity < 1024)
		hist.capacity = 1024;
	snprintf(root, sizeof root, "%s/history", top);
	snprintf(root_e, sizeof root_e, "%s/history-empty", top);
	if (history_root(root, n, &hist.bulk_s) != 0 ||
	    history_root(root_e, n, NULL) != 0) {
		bulk->failed = 1;
		result_note(bulk, "could not write the index");
		return;
	}
	if (broker_start(&b, root, hist.capacity, &hist.start_s) != 0) {
		bulk->failed = 1;
		result_note(bulk, "idemd did not start (log %s)", b.log);
		return;
	}
	/* The pairs' empty broker: its map warms during the fill. */
	if (broker_start(&e, root_e, hist.capacity, NULL) != 0) {
		bulk->failed = 1;
		result_note(bulk, "the second idemd did not start (log %s)",
		    e.log);
		broker_stop(&b);
		return;
	}
	if (realpath(root, real) != NULL) {
		shm_name_for_root(real, name);
		snprintf(shm, sizeof shm, "/dev/shm%s", name);
		if (stat(shm, &st) == 0)
			hist.shm_mb = (double)st.st_size / 1048576.0;
	} else
		shm[0] = '\0';
	entries = history_stat(b.socket, "history_entries");
	hist.verified = entries == (int64_t)n;
	bulk->ops = n;
	bulk->seconds = hist.start_s;
	result_note(bulk, "%zu ids in the index written in %.1f s; idemd "
	    "--capacity %u: exec to ready %.3f s, shared memory %.0f MB, "
	    "history_entries %lld", n, hist.bulk_s, hist.capacity,
	    hist.start_s, hist.shm_mb, (long long)entries);

	memset(&s, 0, sizeof s);
	snprintf(s.tag, sizeof s.tag, "%s-o", id_prefix);
	s.ids = n;
	s.hot = BENCH_HISTORY_HOT_IDS;
	/* Creations with the table empty. */
	s.mode = 0;
	history_job(empty, b.socket, &s, clients, BENCH_HISTORY_OPS);
	made = BENCH_HISTORY_OPS;
	hist.create_empty = empty->ops_per_s;
	/* Fill the table with committed entries (untimed), then measure. */
	fprintf(stderr, "history: filling the table (%u)...\n",
	    hist.capacity);
	while (made < (size_t)hist.capacity + BENCH_HISTORY_OPS) {
		memset(&fill, 0, sizeof fill);
		s.base = made / (size_t)clients;
		history_job(&fill, b.socket, &s, clients, BENCH_HISTORY_OPS);
		made += BENCH_HISTORY_OPS;
	}
	s.base = made / (size_t)clients;
	history_job(full, b.socket, &s, clients, BENCH_HISTORY_OPS);
	made += BENCH_HISTORY_OPS;
	hist.create_full = full->ops_per_s;
	result_note(full, "table_entries %lld of %u, %lld evictions; "
	    "%.2fx the empty part before the fill",
	    (long long)history_stat(b.socket, "table_entries"),
	    hist.capacity, (long long)history_stat(b.socket,
	    "table_evictions"), hist.create_full / hist.create_empty);
	/* The pairs: full and empty in turns, on the same disk. */
	memset(&se, 0, sizeof se);
	snprintf(se.tag, sizeof se.tag, "%s-o", id_prefix);
	se.ids = n;
	made_e = 0;
	for (i = 0; i < BENCH_HISTORY_PAIRS; i++) {
		snprintf(turn, sizeof turn, "history-pair%d-full", i);
		snprintf(turn_e, sizeof turn_e, "history-pair%d-empty", i);
		if (i % 2 == 1)
			history_turn(turn_e, e.socket, &se, &made_e, clients,
			    &empty_ops, &empty_s);
		history_turn(turn, b.socket, &s, &made, clients, &full_ops,
		    &full_s);
		if (i % 2 == 0)
			history_turn(turn_e, e.socket, &se, &made_e, clients,
			    &empty_ops, &empty_s);
	}
	hist.paired_full = full_s > 0 ? (double)full_ops / full_s : NAN;
	hist.paired_empty = empty_s > 0 ? (double)empty_ops / empty_s : NAN;
	/* The row is the full broker's turns; the note compares. */
	paired = result_new("history-create-full-paired", clients);
	paired->ops = full_ops;
	paired->seconds = full_s;
	paired->ops_per_s = hist.paired_full;
	result_note(paired, "%d turns each: table full %.0f/s, the other "
	    "broker's nearly empty table (%lld entries) %.0f/s: full / "
	    "empty %.2fx", BENCH_HISTORY_PAIRS, hist.paired_full,
	    (long long)history_stat(e.socket, "table_entries"),
	    hist.paired_empty, hist.paired_full / hist.paired_empty);
	if (broker_stop(&e) != 0)
		bulk->failed = 1;
	/* Hot ids, made now so that they are in the table: one client
	 * (index 0) makes "<prefix>-hot-0-<i>", which mode 2 retries. */
	memset(&fill, 0, sizeof fill);
	snprintf(s.tag, sizeof s.tag, "%s-hot", id_prefix);
	s.mode = 0;
	s.base = 0;
	history_job(&fill, b.socket, &s, 1, BENCH_HISTORY_HOT_IDS);
	snprintf(s.tag, sizeof s.tag, "%s-hot-0", id_prefix);
	s.mode = 1;
	history_job(cold, b.socket, &s, clients, BENCH_HISTORY_OPS);
	hist.cold_rate = cold->ops_per_s;
	hist.cold_p99_ms = cold->p99_ms;
	s.mode = 2;
	history_job(hot, b.socket, &s, clients, BENCH_HISTORY_OPS);
	hist.hot_rate = hot->ops_per_s;
	hist.hot_p99_ms = hot->p99_ms;
	result_note(cold, "%.2fx the hot rate", hist.cold_rate /
	    hist.hot_rate);
	/* The segment is sparse: what the run made it take from memory. */
	if (shm[0] != '\0' && stat(shm, &st) == 0)
		hist.shm_resident_mb = (double)st.st_blocks * 512 / 1048576.0;
	result_note(hot, "shared memory resident after the run %.0f MB; "
	    "index bytes warmed by the workers %lld", hist.shm_resident_mb,
	    (long long)history_stat(b.socket, "index_warm_bytes"));
	if (broker_stop(&b) != 0)
		bulk->failed = 1;
	snprintf(path, sizeof path, "%s/%s", root, IDEM_INDEX_DIR);
	hist.index_bytes_per_id = dir_bytes(path) / (double)(n + made +
	    BENCH_HISTORY_HOT_IDS);
	snprintf(path, sizeof path, "%s/%s", root, IDEM_JOURNAL_DIR);
	hist.disk_bytes_per_id = hist.index_bytes_per_id + dir_bytes(path) /
	    (double)(n + made + BENCH_HISTORY_HOT_IDS);
	result_note(bulk, "disk %.0f bytes per committed id (index %.0f; "
	    "journal and checkpoint the rest)", hist.disk_bytes_per_id,
	    hist.index_bytes_per_id);
	if (!hist.verified) {
		bulk->failed = 1;
		result_note(bulk, "NOT VERIFIED: history_entries is not %zu",
		    n);
	}
}

/* ---- several brokers on PostgreSQL (issue #16) --------------------------- */

/*
 * The cluster figures: idemd --store URI with 1 and 3 brokers on one
 * workspace, beside pgbench running one plain INSERT ... ON CONFLICT per
 * transaction on the same server with the same client count (and the
 * creation's statements alone, PGREF_PROTOCOL), and the local store's
 * create and reuse, interleaved in one run.  PostgreSQL's own counters
 * say what a creation costs there: statements (pg_stat_statements: one
 * per libpq call idemd makes; pipelined ones share a wait), transactions
 * (pg_stat_database) and WAL writes and fsyncs (pg_stat_wal).
 */
static void	report_progress(void);

#ifdef HAVE_POSTGRESQL
#define BENCH_PG_BROKERS_MAX	3
#define BENCH_PG_QUIET_MS	10000	/* sessions ending after a run */
#define BENCH_PG_SETTLE_MS	250	/* WAL counters unchanged this long */
#define BENCH_PG_SETTLE_TRIES	20
#define BENCH_PG_REF_TABLE	"idem_bench_ref"
#define BENCH_PG_PROTO_TABLE	"idem_bench_protocol"
/* Starts the bench's own SQL: pg_stat_statements keeps it, we skip it. */
#define BENCH_PG_MINE		"/* idem-bench */ "

static PGconn		*pg_conn;	/* the bench's own: counters only */
static int		 pg_statements;	/* pg_stat_statements is there */
static int		 pg_private_started;
static struct pgserver	 pg_private;	/* without --store: our own server */
static char		 pg_bindir[256];
static pid_t		 pg_master;	/* the postmaster, if /proc shows it */

struct pg_counters {
	int	ok;
	double	commits;
	double	rollbacks;
	double	wal_syncs;
	double	wal_writes;
};

static double
pg_value(PGresult *res, int column)
{
	return PQgetisnull(res, 0, column) ? NAN :
	    strtod(PQgetvalue(res, 0, column), NULL);
}

/*
 * The server's counters now.  The bench's own few transactions are in
 * the commits (a handful per scenario, against thousands of creations).
 */
static void
pg_counters(struct pg_counters *c)
{
	PGresult	*res;

	memset(c, 0, sizeof *c);
	res = PQexec(pg_conn, BENCH_PG_MINE "SELECT d.xact_commit, d.xact_rollback, "
	    "w.wal_sync, w.wal_write FROM pg_stat_database d, pg_stat_wal w "
	    "WHERE d.datname = current_database()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		warnx("reading pg_stat_database, pg_stat_wal: %s",
		    PQerrorMessage(pg_conn));
		PQclear(res);
		return;
	}
	c->commits = pg_value(res, 0);
	c->rollbacks = pg_value(res, 1);
	c->wal_syncs = pg_value(res, 2);
	c->wal_writes = pg_value(res, 3);
	PQclear(res);
	c->ok = 1;
}

static int
pg_ok(const char *sql)
{
	PGresult	*res = PQexec(pg_conn, sql);
	int		 ok = PQresultStatus(res) == PGRES_COMMAND_OK ||
			    PQresultStatus(res) == PGRES_TUPLES_OK;

	if (!ok)
		warnx("%s: %s", sql, PQerrorMessage(pg_conn));
	PQclear(res);
	return ok;
}

/*
 * pg_stat_statements per statement since the mark: the statements
 * (each one libpq call idemd made; two pipelined share one wait) per
 * operation, in total and by statement (its first words), into r's
 * note.  The bench's
 * own queries start with BENCH_PG_MINE and are left out.
 */
static void
pg_statements_mark(void)
{
	if (pg_statements &&
	    pg_ok(BENCH_PG_MINE "DROP TABLE IF EXISTS idem_bench_mark"))
		pg_ok(BENCH_PG_MINE "CREATE TEMP TABLE idem_bench_mark AS "
		    "SELECT userid, dbid, queryid, calls, total_exec_time "
		    "FROM pg_stat_statements");
}

static void
pg_statements_since(struct result *r, double n, const char *what)
{
	PGresult	*res;
	char		 parts[600];
	double		 total = 0, calls, ms, total_ms = 0;
	size_t		 used = 0;
	int		 i;

	if (!pg_statements || n <= 0)
		return;
	res = PQexec(pg_conn, BENCH_PG_MINE "SELECT left(regexp_replace(s.query, '\\s+', "
	    "' ', 'g'), 36), s.calls - coalesce(m.calls, 0), "
	    "s.total_exec_time - coalesce(m.total_exec_time, 0) FROM "
	    "pg_stat_statements s LEFT JOIN idem_bench_mark m USING "
	    "(userid, dbid, queryid) WHERE s.dbid = (SELECT oid FROM "
	    "pg_database WHERE datname = current_database()) AND s.query NOT "
	    "LIKE '" BENCH_PG_MINE "%' AND s.calls > coalesce(m.calls, 0) ORDER BY 2 "
	    "DESC, 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		warnx("reading pg_stat_statements: %s",
		    PQerrorMessage(pg_conn));
		PQclear(res);
		return;
	}
	parts[0] = '\0';
	for (i = 0; i < PQntuples(res); i++) {
		calls = strtod(PQgetvalue(res, i, 1), NULL);
		ms = strtod(PQgetvalue(res, i, 2), NULL);
		total += calls;
		total_ms += ms;
		/* The server's time executing it, per call (no commit wait). */
		if (used < sizeof parts)
			used += (size_t)snprintf(parts + used, sizeof parts -
			    used, "%s%.2f %s (%.3f ms)", i > 0 ? ", " : "",
			    calls / n, PQgetvalue(res, i, 0),
			    calls > 0 ? ms / calls : 0.0);
	}
	PQclear(res);
	r->pg_statements = total / n;
	result_note(r, "%.2f statements (libpq calls) per %s, %.3f ms of "
	    "execution on the server: %s", r->pg_statements, what,
	    total_ms / n, parts);
}

static int
pg_sessions(void)
{
	PGresult	*res;
	int		 n = -1;

	res = PQexec(pg_conn, BENCH_PG_MINE "SELECT count(*) FROM pg_stat_activity WHERE "
	    "backend_type = 'client backend' AND datname = current_database() "
	    "AND pid <> pg_backend_pid()");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		n = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
}

static void
sleep_ms(long ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/*
 * Wait until the sessions of the last run are gone and the WAL counters
 * stand still.  A session publishes its counters when it ends (and at
 * most once a second while busy); the server offers no event to wait
 * for, so this polls, bounded.  baseline: sessions not ours (an external
 * server's other clients).
 */
static int	pg_baseline_sessions;

static void
pg_quiet(struct pg_counters *c)
{
	struct pg_counters	last;
	uint64_t		t0 = now_ns();
	int			i;

	while (pg_sessions() > pg_baseline_sessions &&
	    now_ns() - t0 < (uint64_t)BENCH_PG_QUIET_MS * 1000000u)
		sleep_ms(20);
	pg_counters(&last);
	for (i = 0; i < BENCH_PG_SETTLE_TRIES; i++) {
		sleep_ms(BENCH_PG_SETTLE_MS);
		pg_counters(c);
		if (c->wal_syncs == last.wal_syncs &&
		    c->wal_writes == last.wal_writes)
			return;
		last = *c;
	}
}

static void
pg_notice_quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* IDEM_PG_BINDIR, else the newest /usr/lib/postgresql/N/bin with pgbench. */
static int
pg_find_bindir(void)
{
	const char	*env = getenv("IDEM_PG_BINDIR");
	glob_t		 g;
	size_t		 i;
	char		 path[PATH_MAX];

	if (pg_private_started) {
		snprintf(pg_bindir, sizeof pg_bindir, "%s", pg_private.bindir);
	} else if (env != NULL && *env != '\0') {
		snprintf(pg_bindir, sizeof pg_bindir, "%s", env);
	} else if (glob("/usr/lib/postgresql/*/bin/pgbench", 0, NULL,
	    &g) == 0) {
		for (i = g.gl_pathc; i > 0; i--) {
			snprintf(pg_bindir, sizeof pg_bindir, "%s",
			    g.gl_pathv[i - 1]);
			*strrchr(pg_bindir, '/') = '\0';
			break;
		}
		globfree(&g);
	}
	snprintf(path, sizeof path, "%s/pgbench", pg_bindir);
	return pg_bindir[0] != '\0' && access(path, X_OK) == 0;
}

/*
 * The private server (tests/cluster/pgserver.c: initdb, Unix socket
 * only, fsync=on, synchronous_commit=on) restarted once with
 * pg_stat_statements loaded, so that statements can be counted.
 */
static const char *
pg_private_start(void)
{
	const char	*reason;
	char		 conf[256];
	FILE		*fp;

	if (pgserver_start(&pg_private, &reason) != 0)
		return reason;
	pg_private_started = 1;
	snprintf(conf, sizeof conf, "%s/postgresql.conf", pg_private.data);
	if (pgserver_stop(&pg_private, 0) != 0 ||
	    (fp = fopen(conf, "a")) == NULL)
		return "cannot restart the private server";
	fprintf(fp, "# idem-bench: count the statements idemd sends\n"
	    "shared_preload_libraries = 'pg_stat_statements'\n"
	    "pg_stat_statements.track = top\n"
	    "pg_stat_statements.track_utility = on\n");
	if (fclose(fp) != 0 || pgserver_restart(&pg_private) != 0)
		return "the private server did not restart with "
		    "pg_stat_statements (see its log)";
	snprintf(store_uri, sizeof store_uri, "%s", pg_private.uri);
	return NULL;
}

/*
 * The postmaster: the private server's, else the parent of the bench's
 * own backend when that server runs on this machine (its /proc visible
 * to us).  0: the server's CPU is not measured.
 */
static void
pg_find_master(void)
{
	PGresult	*res;
	double		 own, reaped;
	pid_t		 backend, parent;

	pg_master = 0;
	if (pg_private_started) {
		pg_master = pg_private.pid;
		return;
	}
	res = PQexec(pg_conn, BENCH_PG_MINE "SELECT pg_backend_pid()");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
		backend = (pid_t)atol(PQgetvalue(res, 0, 0));
		if (process_times(backend, &own, &reaped, &parent) == 0)
			pg_master = parent;
	}
	PQclear(res);
	if (pg_master == 0)
		fprintf(stderr, "idem-bench: the server's processes are not "
		    "visible here: its CPU is not measured\n");
}

/* The server's CPU per operation between two server_cpu_s() samples. */
static void
pg_cpu_per_op(struct result *r, double a, double b, double n,
    const char *what)
{
	if (isnan(a) || isnan(b) || n <= 0)
		return;
	r->pg_cpu_us = (b - a) * 1e6 / n;
	result_note(r, "server CPU per %s: %.0f us (its processes' utime + "
	    "stime, /proc)", what, r->pg_cpu_us);
}

/* The server, the schema, the reference's table: NULL, or why not. */
static const char *
pg_setup(void)
{
	const char	*why;
	char		 cmd[PATH_MAX * 2];
	PGresult	*res;

	if (opt.store != NULL) {
		snprintf(store_uri, sizeof store_uri, "%s", opt.store);
	} else if ((why = pg_private_start()) != NULL) {
		return why;
	}
	if (!pg_find_bindir())
		return "pgbench not found (IDEM_PG_BINDIR, or Debian: "
		    "apt-get install postgresql-15)";
	if ((pg_conn = PQconnectdb(store_uri)) == NULL ||
	    PQstatus(pg_conn) != CONNECTION_OK)
		return "cannot connect to the server";
	/* "does not exist, skipping" and the like: not for the table. */
	PQsetNoticeProcessor(pg_conn, pg_notice_quiet, NULL);
	if (opt.store == NULL)
		pg_ok(BENCH_PG_MINE "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
	res = PQexec(pg_conn, BENCH_PG_MINE "SELECT 1 FROM pg_stat_statements LIMIT 1");
	pg_statements = PQresultStatus(res) == PGRES_TUPLES_OK;
	PQclear(res);
	if (!pg_statements)
		fprintf(stderr, "idem-bench: pg_stat_statements is not loaded "
		    "on the server: statements per creation not counted\n");
	if (!pg_ok(BENCH_PG_MINE "CREATE TABLE IF NOT EXISTS " BENCH_PG_REF_TABLE " (k text "
	    "PRIMARY KEY, body text NOT NULL)") ||
	    !pg_ok(BENCH_PG_MINE "CREATE TABLE IF NOT EXISTS "
	    BENCH_PG_PROTO_TABLE " (k text PRIMARY KEY, body text NOT NULL, "
	    "state smallint NOT NULL, granted boolean NOT NULL)"))
		return "cannot create the references' tables";
	pg_baseline_sessions = pg_sessions();
	pg_find_master();
	snprintf(cmd, sizeof cmd, "'%s' store init --store '%s' >/dev/null",
	    opt.idemctl, store_uri);
	if (system(cmd) != 0)
		return "idemctl store init failed";
	return NULL;
}

static void
pg_teardown(void)
{
	if (pg_conn != NULL) {
		/* An external server keeps idem's rows, not our table. */
		if (opt.store != NULL)
			pg_ok(BENCH_PG_MINE "DROP TABLE IF EXISTS "
			    BENCH_PG_REF_TABLE ", " BENCH_PG_PROTO_TABLE);
		PQfinish(pg_conn);
		pg_conn = NULL;
	}
	if (pg_private_started)
		pgserver_destroy(&pg_private, opt.keep);
	pg_private_started = 0;
}

static void
pg_per_op(struct result *r, const struct pg_counters *a,
    const struct pg_counters *b, double n, const char *what)
{
	if (!a->ok || !b->ok || n <= 0)
		return;
	r->pg_xacts = (b->commits + b->rollbacks - a->commits -
	    a->rollbacks) / n;
	r->pg_wal_syncs = (b->wal_syncs - a->wal_syncs) / n;
	r->pg_wal_writes = (b->wal_writes - a->wal_writes) / n;
	result_note(r, "PostgreSQL per %s: %.2f transactions, %.2f WAL "
	    "fsyncs, %.2f WAL writes", what, r->pg_xacts, r->pg_wal_syncs,
	    r->pg_wal_writes);
}

/* ---- the reference: pgbench, one INSERT ... ON CONFLICT a transaction */

/* p50/p99/p999 from pgbench's per-transaction logs (-l). */
static size_t
pgref_latencies(const char *prefix, struct result *r)
{
	char		 pattern[PATH_MAX + 8], line[256];
	uint64_t	*all = NULL;
	size_t		 n = 0, size = 0, i;
	long long	 client, tx, us;
	glob_t		 g;
	FILE		*f;

	snprintf(pattern, sizeof pattern, "%s.*", prefix);
	if (glob(pattern, 0, NULL, &g) != 0)
		return 0;
	for (i = 0; i < g.gl_pathc; i++) {
		if ((f = fopen(g.gl_pathv[i], "re")) == NULL)
			continue;
		/* client_id transaction_no time script_no epoch epoch_us */
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line, "%lld %lld %lld", &client, &tx,
			    &us) != 3)
				continue;
			if (n == size) {
				size = size == 0 ? 4096 : size * 2;
				if ((all = realloc(all, size *
				    sizeof *all)) == NULL)
					err(1, "realloc");
			}
			all[n++] = (uint64_t)us * 1000u;
		}
		fclose(f);
	}
	globfree(&g);
	qsort(all, n, sizeof *all, cmp_u64);
	r->p50_ms = percentile_ms(all, n, 0.50);
	r->p99_ms = percentile_ms(all, n, 0.99);
	r->p999_ms = percentile_ms(all, n, 0.999);
	free(all);
	return n;
}

/*
 * pgbench's transaction scripts, one per reference, each with a fresh
 * random key per transaction: an insert, as a reservation is.
 *
 * PGREF_INSERT is the reference the issue names: one plain INSERT ...
 * ON CONFLICT.  PGREF_PROTOCOL is the PostgreSQL part of a creation as
 * doc/cluster.md prescribes it, and nothing else (no counter, no file):
 * the claim (the row inserted and committed without waiting for the WAL
 * flush), then the grant and the commit (two fenced updates of that row,
 * each committed synchronously), three round trips as a creation's.
 * The create rule applied to it is a bound: a broker that follows the
 * protocol, one creation at a time per session, waits at least for
 * this, files aside.
 */
enum pgref {
	PGREF_INSERT,
	PGREF_PROTOCOL
};

static void
pgref_script(FILE *f, enum pgref kind)
{
	fprintf(f, "\\set r random(1, 9000000000000000000)\n");
	if (kind == PGREF_INSERT) {
		fprintf(f, "INSERT INTO " BENCH_PG_REF_TABLE " (k, body) "
		    "VALUES ('%s-' || :client_id || '-' || :r, repeat('x', "
		    "%d)) ON CONFLICT (k) DO NOTHING;\n", id_prefix,
		    BENCH_BODY_BYTES);
		return;
	}
	fprintf(f, "INSERT INTO " BENCH_PG_PROTO_TABLE " (k, body, state, "
	    "granted) SELECT '%s-' || :client_id || '-' || :r, repeat('x', "
	    "%d), 1, false FROM (SELECT set_config('synchronous_commit', "
	    "'off', true)) async ON CONFLICT (k) DO NOTHING;\n",
	    id_prefix, BENCH_BODY_BYTES);
	fprintf(f, "UPDATE " BENCH_PG_PROTO_TABLE " SET granted = true "
	    "WHERE k = '%s-' || :client_id || '-' || :r AND state = 1;\n",
	    id_prefix);
	fprintf(f, "UPDATE " BENCH_PG_PROTO_TABLE " SET state = 3, body = "
	    "repeat('y', %d) WHERE k = '%s-' || :client_id || '-' || :r AND "
	    "granted;\n", BENCH_BODY_BYTES, id_prefix);
}

static void
run_pgref(const char *name, enum pgref kind, int clients, size_t total_ops)
{
	struct result		*r = result_new(name, clients);
	struct pg_counters	 before, after;
	char			 script[PATH_MAX], prefix[PATH_MAX];
	char			 out[PATH_MAX + 16];
	char			 program[PATH_MAX], cs[16], ts[32], logp[PATH_MAX + 16];
	char			 line[512];
	const char		*argv[16];
	size_t			 per = total_ops / (size_t)clients;
	pid_t			 pid;
	FILE			*f;
	double			 cpu0, cpu1;
	int			 status, fd, n = 0;

	if (per == 0)
		per = 1;
	snprintf(script, sizeof script, "%s/%s.sql", top, name);
	if ((f = fopen(script, "we")) == NULL)
		err(1, "%s", script);
	pgref_script(f, kind);
	if (fclose(f) != 0)
		err(1, "%s", script);
	snprintf(prefix, sizeof prefix, "%s/%s-k%d.%zu", top, name, clients,
	    result_count);
	/* Not prefix.*: that is the logs' pattern. */
	snprintf(out, sizeof out, "%s-pgbench.out", prefix);
	snprintf(program, sizeof program, "%s/pgbench", pg_bindir);
	snprintf(cs, sizeof cs, "%d", clients);
	snprintf(ts, sizeof ts, "%zu", per);
	snprintf(logp, sizeof logp, "--log-prefix=%s", prefix);
	argv[n++] = program;
	argv[n++] = "-n";		/* no pgbench tables to vacuum */
	argv[n++] = "-f";
	argv[n++] = script;
	argv[n++] = "-c";
	argv[n++] = cs;
	argv[n++] = "-j";		/* a thread per client, as our processes */
	argv[n++] = cs;
	argv[n++] = "-t";
	argv[n++] = ts;
	argv[n++] = "-l";
	argv[n++] = logp;
	argv[n++] = store_uri;
	argv[n] = NULL;

	pg_quiet(&before);
	pg_statements_mark();
	cpu0 = server_cpu_s(pg_master);
	fflush(NULL);
	if ((pid = fork()) == -1)
		err(1, "fork");
	if (pid == 0) {
		die_with_parent(SIGTERM);
		if ((fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		    0644)) != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(program, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) == -1) {
		if (errno != EINTR)
			err(1, "waitpid");
	}
	cpu1 = server_cpu_s(pg_master);
	pg_quiet(&after);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		r->failed = 1;
		result_note(r, "pgbench failed (see %s)", out);
		print_log_tail(out);
		return;
	}
	if ((f = fopen(out, "re")) != NULL) {
		while (fgets(line, sizeof line, f) != NULL) {
			double	v;

			if (sscanf(line, "tps = %lf (without initial "
			    "connection time)", &v) == 1)
				r->ops_per_s = v;
		}
		fclose(f);
	}
	r->ops = pgref_latencies(prefix, r);
	r->created = r->ops;
	if (r->ops > 0 && !isnan(r->ops_per_s))
		r->seconds = (double)r->ops / r->ops_per_s;
	if (r->ops != per * (size_t)clients) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " transactions logged, %zu sent",
		    r->ops, per * (size_t)clients);
	}
	if (kind == PGREF_INSERT)
		result_note(r, "pgbench -c %d -j %d: INSERT ... ON CONFLICT DO "
		    "NOTHING, %d-byte text", clients, clients,
		    BENCH_BODY_BYTES);
	else
		result_note(r, "pgbench -c %d -j %d: a creation's claim "
		    "(committed without waiting for the flush), grant and "
		    "commit (each waiting for it), no file", clients, clients);
	pg_statements_since(r, (double)r->ops, "transaction");
	pg_per_op(r, &before, &after, (double)r->ops, "transaction");
	/* pgbench's connections' start and end included. */
	pg_cpu_per_op(r, cpu0, cpu1, (double)r->ops, "transaction");
}

/* ---- idemd --store URI, one workspace, n brokers ------------------------ */

struct cluster_release {
	struct broker			*b;
	int				 n;
	const struct idem_scenario	*warm;	/* reuse: retry each id once */
	struct pg_counters		 pg;
	struct broker_stats		 stats;
	int				 stats_ok;
	size_t				 warm_failed;
	struct proc_sample		 proc;		/* every broker's */
	double				 server_cpu_s;
	pid_t				 strace;	/* --syscalls; -1 */
	char				 strace_out[PATH_MAX + 16];
};

/* One sample of all the brokers' processes together. */
static void
cluster_sample(const struct broker *b, int n, struct proc_sample *s)
{
	struct proc_sample	one;
	int			i, j;

	memset(s, 0, sizeof *s);
	for (i = 0; i < n; i++) {
		proc_sample(b[i].pid, &one);
		if (!one.ok)
			return;
		for (j = 0; j < one.procs && s->procs < BENCH_MAX_SAMPLE_PROCS;
		    j++)
			s->pids[s->procs++] = one.pids[j];
		s->tasks += one.tasks;
		s->cpu_s += one.cpu_s;
		s->voluntary += one.voluntary;
		s->involuntary += one.involuntary;
		s->run_ns += one.run_ns;
		s->wait_ns += one.wait_ns;
	}
	s->ok = n > 0;
}

/*
 * After the timed part: the brokers' CPU and switches, the server's CPU
 * and (--syscalls) the brokers' sendto and recvfrom, per operation.
 * libpq sends each flush of its output with one send(), and
 * PQpipelineSync flushes: a statement is one sendto, a pipeline of two
 * is two sendto but one wait for the server (its round trips are the
 * statements less the pipelined ones; doc/performance.md).
 */
static void
cluster_costs(struct cluster_release *cr, struct result *r, const char *what)
{
	struct proc_sample	after;
	double			calls = -1, sends, recvs, n = (double)r->ops;

	pg_cpu_per_op(r, cr->server_cpu_s, server_cpu_s(pg_master), n, what);
	if (cr->strace > 0)
		calls = strace_total_pg(cr->strace, cr->strace_out, &sends,
		    &recvs);
	if (!cr->proc.ok || r->ops == 0)
		return;
	cluster_sample(cr->b, cr->n, &after);
	if (after.ok) {
		r->cpu_us = (after.cpu_s - cr->proc.cpu_s) * 1e6 / n;
		r->csw = (double)(after.voluntary + after.involuntary -
		    cr->proc.voluntary - cr->proc.involuntary) / n;
		result_note(r, "brokers per %s: %.0f us CPU, %.1f context "
		    "switches", what, r->cpu_us, r->csw);
	}
	if (calls >= 0) {
		r->syscalls = calls / n;
		r->pg_sends = sends / n;
		r->pg_recvs = recvs / n;
		result_note(r, "strace (rates void): %.1f system calls, %.2f "
		    "sendto (libpq's sends to PostgreSQL), %.2f recvfrom per %s",
		    r->syscalls, r->pg_sends, r->pg_recvs, what);
	} else if (opt.syscalls) {
		result_note(r, "strace failed: no system call count");
	}
}

static int
cluster_start(struct broker *b, int n, const char *root)
{
	char	host[16];
	int	i;

	for (i = 0; i < n; i++) {
		snprintf(host, sizeof host, "h%d", i);
		if (broker_start_as(&b[i], root, 0, NULL, host) != 0) {
			while (--i >= 0)
				broker_stop(&b[i]);
			return -1;
		}
	}
	return 0;
}

static int
cluster_stop(struct broker *b, int n)
{
	int	i, rv = 0;

	for (i = 0; i < n; i++)
		if (broker_stop(&b[i]) != 0)
			rv = -1;
	return rv;
}

/* The brokers' stats summed; -1 if one did not answer. */
static int
cluster_sum(const struct cluster_release *cr, struct broker_stats *sum)
{
	struct broker_stats	st;
	int			i;

	memset(sum, 0, sizeof *sum);
	for (i = 0; i < cr->n; i++) {
		if (broker_stats(cr->b[i].socket, &st) != 0)
			return -1;
		sum->created += st.created;
		sum->errors += st.errors;
		sum->reused += st.reused;
		sum->reused_fast += st.reused_fast;
	}
	return 0;
}

/*
 * Before the release: for reuse, each broker answers every id once
 * (untimed; it caches the receipt), so that the timed part measures
 * retries from the cache; then the counters.
 */
static void
cluster_at_release(void *arg)
{
	struct cluster_release	*cr = arg;
	struct idem_error	 e;
	struct idem_conn	*c;
	char			 csid[160], *line, *answer, id[BENCH_TASK_ID_BYTES];
	char			 why[160];
	size_t			 g;
	int			 i;

	for (i = 0; cr->warm != NULL && i < cr->n; i++) {
		if ((c = idem_connect(cr->b[i].socket, &e)) == NULL) {
			cr->warm_failed += cr->warm->ids;
			continue;
		}
		for (g = 0; g < cr->warm->ids; g++) {
			snprintf(csid, sizeof csid, "%s-%zu", cr->warm->tag, g);
			line = task_line(csid, 0, (json_int_t)g);
			if (idem_call_raw(c, line, &answer, &e) != 0) {
				cr->warm_failed++;
			} else {
				if (classify(answer, id, sizeof id, why,
				    sizeof why) != OUTCOME_REUSED)
					cr->warm_failed++;
				free(answer);
			}
			free(line);
		}
		idem_close(c);
	}
	cr->stats_ok = cluster_sum(cr, &cr->stats) == 0;
	pg_counters(&cr->pg);
	pg_statements_mark();
	cr->strace = -1;
	cluster_sample(cr->b, cr->n, &cr->proc);
	if (opt.syscalls && cr->proc.ok)
		cr->strace = strace_attach(&cr->proc, cr->strace_out);
	cr->server_cpu_s = server_cpu_s(pg_master);
}

static void
run_cluster(const char *name, int clients, int brokers, size_t total_ops,
    size_t ids, int (*setup)(struct client *))
{
	struct broker		 b[BENCH_PG_BROKERS_MAX];
	struct cluster_release	 cr;
	struct pg_counters	 before, after;
	struct idem_scenario	 s;
	struct result		*r;
	struct job		 job;
	const char		*sockets[BENCH_PG_BROKERS_MAX];
	struct broker_stats	 st;
	char			 rname[32], root[PATH_MAX];
	size_t			 tasks, others;
	int			 st_ok;
	int			 i, creating = strcmp(name, "create") == 0;

	snprintf(rname, sizeof rname, "pg-%s-b%d", name, brokers);
	r = result_new(rname, clients);
	snprintf(root, sizeof root, "%s/pg-%s-b%d-k%d", top, name, brokers,
	    clients);
	/* Only creations read the counters that lag: retries need no wait. */
	if (creating)
		pg_quiet(&before);
	memset(b, 0, sizeof b);
	if (cluster_start(b, brokers, root) != 0) {
		r->failed = 1;
		result_note(r, "idemd --store did not start (logs %s.h*.log)",
		    root);
		return;
	}
	for (i = 0; i < brokers; i++)
		sockets[i] = b[i].socket;
	memset(&s, 0, sizeof s);
	snprintf(s.tag, sizeof s.tag, "%.40s-%.24s-k%d", id_prefix, rname,
	    clients);
	s.ids = ids;
	memset(&cr, 0, sizeof cr);
	cr.b = b;
	cr.n = brokers;
	cr.warm = creating ? NULL : &s;

	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ?
	    total_ops / (size_t)clients : 1;
	job.seed = (uint64_t)clients * 1000003u + (uint64_t)brokers;
	job.setup = setup;
	job.op = op_idem;
	job.cleanup = client_disconnect;
	job.at_release = cluster_at_release;
	job.at_release_arg = &cr;
	job.sockets = sockets;
	job.nsockets = brokers;
	job.arg = &s;
	cr.strace = -1;
	snprintf(cr.strace_out, sizeof cr.strace_out, "%s.strace", root);
	run_job(&job, r);
	cluster_costs(&cr, r, creating ? "creation" : "retry");
	pg_statements_since(r, (double)r->ops, creating ? "creation" :
	    "retry");
	st_ok = cluster_sum(&cr, &st) == 0 && cr.stats_ok;
	if (cluster_stop(b, brokers) != 0) {
		r->failed = 1;
		result_note(r, "a broker did not stop cleanly on SIGTERM");
	}
	if (creating)
		pg_quiet(&after);

	result_note(r, "%d broker%s on one workspace (%s workers each, %s "
	    "store connections a worker), clients spread over them", brokers,
	    brokers > 1 ? "s" : "", opt.workers != NULL ? opt.workers :
	    "default", opt.store_connections != NULL ? opt.store_connections :
	    "default");
	if (cr.warm_failed > 0) {
		r->failed = 1;
		result_note(r, "%zu cache-warming retries did not answer "
		    "reused", cr.warm_failed);
	}
	if (!st_ok) {
		r->failed = 1;
		result_note(r, "a broker's stats op did not answer");
	} else {
		if (st.errors != cr.stats.errors)
			result_note(r, "brokers counted %" PRId64 " errors",
			    st.errors - cr.stats.errors);
		if (creating && st.created - cr.stats.created !=
		    (int64_t)r->created) {
			r->failed = 1;
			result_note(r, "brokers counted %" PRId64 " creations, "
			    "clients %" PRIu64, st.created - cr.stats.created,
			    r->created);
		}
		if (st.reused > cr.stats.reused)
			result_note(r, "%.0f%% of reused by the fast path",
			    100.0 * (double)(st.reused_fast -
			    cr.stats.reused_fast) / (double)(st.reused -
			    cr.stats.reused));
	}

	if (creating) {
		/* Over the brokers' whole lives: start-up included. */
		pg_per_op(r, &before, &after, (double)r->created, "creation");
		if (count_inbox(root, &tasks, &others) == -1) {
			r->failed = 1;
			result_note(r, "inbox unreadable: %s", strerror(errno));
		} else if (tasks != r->created || others != 0) {
			r->failed = 1;
			result_note(r, "inbox: %zu TASK files, %zu other "
			    "entries for %" PRIu64 " created", tasks, others,
			    r->created);
		}
	}
	if (r->unexpected > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " unexpected dispositions",
		    r->unexpected);
	}
	if (r->errors > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " error replies", r->errors);
	}
}

/*
 * At each K, interleaved so that the machine's load falls on all alike:
 * the references (pgbench's INSERT and the creation's statements alone,
 * a bound), the local store's create (another bound), create on 1 and
 * 3 brokers, the references again in reverse order; the
 * local store's reuse, reuse on 1 and 3 brokers, the local store again.
 */
static void
run_cluster_figures(size_t create_ops, size_t reuse_ops, size_t reuse_ids)
{
	const char	*why;
	int		 i, k;
	int		 counts[BENCH_MAX_CLIENT_COUNTS], ncounts = 0;

	if ((why = pg_setup()) != NULL) {
		struct result	*r = result_new("pg-cluster", 0);

		r->failed = 1;
		result_note(r, "not run: %s", why);
		pg_teardown();
		return;
	}
	fprintf(stderr, "idem-bench: PostgreSQL at %s, pgbench in %s\n",
	    store_uri, pg_bindir);
	if (opt.clients_given) {
		for (i = 0; i < opt.client_counts; i++)
			counts[ncounts++] = opt.clients[i];
	} else {
		counts[ncounts++] = BENCH_TARGET_CLIENTS;
	}
	for (i = 0; i < ncounts; i++) {
		k = counts[i];
		run_pgref("pgbench-insert", PGREF_INSERT, k, create_ops);
		run_pgref("pgbench-protocol", PGREF_PROTOCOL, k, create_ops);
		run_idem("local-create", k, create_ops, 0, setup_create);
		run_cluster("create", k, 1, create_ops, 0, setup_create);
		run_cluster("create", k, 3, create_ops, 0, setup_create);
		run_pgref("pgbench-protocol", PGREF_PROTOCOL, k, create_ops);
		run_pgref("pgbench-insert", PGREF_INSERT, k, create_ops);
		report_progress();
		run_idem("local-reuse", k, reuse_ops, reuse_ids, setup_reuse);
		run_cluster("reuse", k, 1, reuse_ops, reuse_ids, setup_reuse);
		run_cluster("reuse", k, 3, reuse_ops, reuse_ids, setup_reuse);
		run_idem("local-reuse", k, reuse_ops, reuse_ids, setup_reuse);
		report_progress();
	}
	pg_teardown();
}
#else
static void
run_cluster_figures(size_t create_ops, size_t reuse_ops, size_t reuse_ids)
{
	struct result	*r = result_new("pg-cluster", 0);

	(void)create_ops;
	(void)reuse_ops;
	(void)reuse_ids;
	r->failed = 1;
	result_note(r, "not run: idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#endif

/* ---- effects, against Redis (issue #33) -------------------------------- */

/*
 * An effect is effect_begin + effect_complete, two durable writes; the
 * store a user would pick instead is Redis made durable (appendonly,
 * appendfsync always: each write's fdatasync before the reply, shared
 * by the writes of one event-loop turn) driven the way AWS Powertools'
 * idempotency utility drives it: SET key request NX PX lease to
 * reserve, SET key result XX to commit, GET to find a committed one.
 * Both sides get the same jobs (K processes, one connection each), the
 * same keys (the kind and the client's submission id), the same
 * request and result bytes, and clients that build their requests at
 * run time and check every reply.  Redis is spoken to in RESP directly
 * over its Unix socket; a GET's value is parsed with jansson, as
 * idemd's replies are.
 */
#define BENCH_EFFECT_KIND		"bench.effect/v1"
#define BENCH_EFFECT_REQUEST_BYTES	256	/* the request's JSON text */
#define BENCH_EFFECT_RESULT_BYTES	512	/* the result's JSON text */
#define BENCH_EFFECT_LEASE_MS		"30000"
#define BENCH_EFFECT_LINE_BYTES		4096
#define BENCH_REDIS_BUF_BYTES		4096
#define BENCH_REDIS_START_MS		30000

struct redis {
	pid_t	pid;
	char	dir[PATH_MAX];
	char	socket[PATH_MAX + 16];
	char	log[PATH_MAX + 16];
};

/* $IDEM_REDIS_SERVER, else redis-server on $PATH; NULL: none. */
static const char *
redis_server_path(void)
{
	static char	 path[PATH_MAX];
	const char	*env = getenv("IDEM_REDIS_SERVER"), *p, *end;
	size_t		 n;

	if (env != NULL && *env != '\0')
		return access(env, X_OK) == 0 ? env : NULL;
	if ((p = getenv("PATH")) == NULL || *p == '\0')
		p = "/usr/local/bin:/usr/bin:/bin";
	for (; *p != '\0'; p = *end == ':' ? end + 1 : end) {
		if ((end = strchr(p, ':')) == NULL)
			end = p + strlen(p);
		n = (size_t)(end - p);
		if (n == 0 || (int)n > (int)sizeof path - 16)
			continue;
		snprintf(path, sizeof path, "%.*s/redis-server", (int)n, p);
		if (access(path, X_OK) == 0)
			return path;
	}
	return NULL;
}

/*
 * A private redis-server in dir: no TCP port, a Unix socket, AOF with
 * an fdatasync before every reply, no RDB snapshot and no AOF rewrite
 * (neither forks during a run).  Ready when it says READY=1 on a
 * notify socket of ours (--supervised systemd), not after a sleep.
 * NULL, or why not.
 */
static const char *
redis_start(struct redis *rs, const char *server, const char *dir)
{
	struct sockaddr_un	 sun;
	struct pollfd		 pfd;
	char			 notify[PATH_MAX + 16], msg[512];
	const char		*argv[40];
	int64_t			 deadline;
	ssize_t			 got;
	int			 fd, nfd, n = 0, ready = 0;

	memset(rs, 0, sizeof *rs);
	snprintf(rs->dir, sizeof rs->dir, "%s", dir);
	snprintf(rs->socket, sizeof rs->socket, "%s/redis.sock", dir);
	snprintf(rs->log, sizeof rs->log, "%s/redis.log", dir);
	snprintf(notify, sizeof notify, "%s/notify.sock", dir);
	if (mkdir(dir, 0700) == -1 && errno != EEXIST)
		return "cannot make the server's directory";
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(notify) >= sizeof sun.sun_path)
		return "the bench's directory is too long for a socket";
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", notify);
	if ((nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1 ||
	    bind(nfd, (struct sockaddr *)&sun, sizeof sun) == -1)
		err(1, "notify socket %s", notify);
	argv[n++] = server;
	argv[n++] = "--port";
	argv[n++] = "0";
	argv[n++] = "--unixsocket";
	argv[n++] = rs->socket;
	argv[n++] = "--unixsocketperm";
	argv[n++] = "700";
	argv[n++] = "--dir";
	argv[n++] = dir;
	argv[n++] = "--appendonly";
	argv[n++] = "yes";
	argv[n++] = "--appendfsync";
	argv[n++] = "always";
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--auto-aof-rewrite-percentage";
	argv[n++] = "0";
	argv[n++] = "--daemonize";
	argv[n++] = "no";
	argv[n++] = "--supervised";
	argv[n++] = "systemd";
	argv[n] = NULL;

	fflush(NULL);
	if ((rs->pid = fork()) == -1)
		err(1, "fork");
	if (rs->pid == 0) {
		die_with_parent(SIGTERM);
		if ((fd = open(rs->log, O_WRONLY | O_CREAT | O_APPEND |
		    O_CLOEXEC, 0644)) != -1) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) != -1)
			dup2(fd, 0);
		setenv("NOTIFY_SOCKET", notify, 1);
		execv(server, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", server, strerror(errno));
		_exit(127);
	}
	deadline = wall_ms() + BENCH_REDIS_START_MS;
	pfd.fd = nfd;
	pfd.events = POLLIN;
	while (!ready && wall_ms() < deadline &&
	    poll(&pfd, 1, (int)(deadline - wall_ms())) == 1) {
		if ((got = recv(nfd, msg, sizeof msg - 1, 0)) <= 0)
			break;
		msg[got] = '\0';
		ready = strstr(msg, "READY=1") != NULL;
	}
	close(nfd);
	if (ready)
		return NULL;
	kill(rs->pid, SIGKILL);
	waitpid(rs->pid, NULL, 0);
	rs->pid = 0;
	print_log_tail(rs->log);
	return "redis-server did not become ready (see its log)";
}

/* SIGTERM (Redis fsyncs its AOF and exits), waited for by a pidfd. */
static int
redis_stop(struct redis *rs)
{
	struct pollfd	pfd;
	int		status, rv = 0;

	if (rs->pid == 0)
		return 0;
	pfd.fd = (int)syscall(SYS_pidfd_open, rs->pid, 0);
	pfd.events = POLLIN;
	kill(rs->pid, SIGTERM);
	if (pfd.fd != -1) {
		if (poll(&pfd, 1, BENCH_STOP_TIMEOUT_MS) == 0) {
			kill(rs->pid, SIGKILL);
			rv = -1;
		}
		close(pfd.fd);
	}
	while (waitpid(rs->pid, &status, 0) == -1) {
		if (errno != EINTR)
			err(1, "waitpid");
	}
	if (rv == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		rv = -1;
	if (rv != 0)
		print_log_tail(rs->log);
	rs->pid = 0;
	return rv;
}

/* JSON text of exactly size bytes: {"id":"<csid>","data":"<filler>"}. */
static void
effect_json(char *out, size_t size, const char *csid)
{
	size_t	n, k;
	int	w;

	w = snprintf(out, size + 1, "{\"id\":\"%s\",\"data\":\"", csid);
	n = w < 0 ? 0 : (size_t)w;
	if (n + 2 > size)
		errx(1, "effect_json: %zu bytes cannot hold id %s", size, csid);
	while (n < size - 2) {
		k = sizeof filler - 2;	/* without its newline */
		if (k > size - 2 - n)
			k = size - 2 - n;
		memcpy(out + n, filler, k);
		n += k;
	}
	memcpy(out + n, "\"}", 3);
}

static void
effect_csid(struct client *cl, size_t g, char *out, size_t size)
{
	const struct idem_scenario	*s = cl->job->arg;

	if (s->ids > 0)	/* reuse: every client's ids */
		snprintf(out, size, "%s-%zu", s->tag, g);
	else
		snprintf(out, size, "%s-c%d-%zu", s->tag, cl->index, g);
}

/*
 * One call and its answer decoded by libidem (idem_effect_parse, as
 * idem_effect_begin and the others decode theirs); -1 (counted) when the
 * connection is gone.
 */
static int
effect_call(struct client *cl, const char *line, size_t i,
    struct idem_effect *out)
{
	struct idem_error	 e;
	char			*answer;

	if (idem_call_raw(cl->conn, line, &answer, &e) != 0) {
		cl->report->errors++;
		client_error(cl, "effect %zu: %s", i, e.message);
		return -1;
	}
	if (idem_effect_parse(answer, out, &e) != 0 &&
	    out->disposition == IDEM_EFFECT_NONE)
		client_error(cl, "effect %zu: %s: %.100s", i, e.message,
		    answer);
	free(answer);
	return 0;
}

/* The begin of csid (its request built here, as a caller would). */
static int
effect_begin(struct client *cl, const char *csid, size_t i,
    struct idem_effect *out)
{
	char	req[BENCH_EFFECT_REQUEST_BYTES + 1];

	effect_json(req, sizeof req - 1, csid);
	snprintf(cl->buf, BENCH_EFFECT_LINE_BYTES, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\""
	    BENCH_EFFECT_KIND "\",\"request\":%s,\"lease_ms\":"
	    BENCH_EFFECT_LEASE_MS "}", csid, req);
	return effect_call(cl, cl->buf, i, out);
}

/*
 * A whole effect: begin (proceed expected), complete with the fence and
 * the result (committed expected).  -1 only when the connection is gone.
 */
static int
effect_run(struct client *cl, const char *csid, size_t i)
{
	char			result[BENCH_EFFECT_RESULT_BYTES + 1];
	struct idem_effect	out;
	int			ok;

	if (effect_begin(cl, csid, i, &out) != 0)
		return -1;
	if (out.disposition != IDEM_EFFECT_PROCEED) {
		cl->report->unexpected++;
		client_error(cl, "effect %zu: begin answered disposition %d",
		    i, (int)out.disposition);
		idem_effect_clear(&out);
		return 0;
	}
	effect_json(result, sizeof result - 1, csid);
	snprintf(cl->buf, BENCH_EFFECT_LINE_BYTES, "{\"op\":\"effect_complete\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\""
	    BENCH_EFFECT_KIND "\",\"fence\":\"%s\",\"outcome\":\"applied\","
	    "\"result\":%s}", csid, out.fence, result);
	idem_effect_clear(&out);
	if (effect_call(cl, cl->buf, i, &out) != 0)
		return -1;
	ok = out.disposition == IDEM_EFFECT_COMMITTED && out.receipt != NULL;
	idem_effect_clear(&out);
	if (!ok) {
		cl->report->unexpected++;
		client_error(cl, "effect %zu: complete not committed", i);
		return 0;
	}
	cl->report->created++;
	return 0;
}

static int
op_effect(struct client *cl, size_t i)
{
	char	csid[160];

	effect_csid(cl, i, csid, sizeof csid);
	return effect_run(cl, csid, i);
}

static int
setup_effect(struct client *cl)
{
	cl->buf = xcalloc(1, BENCH_EFFECT_LINE_BYTES);
	return client_connect(cl);
}

/* This client's share of the ids committed before the barrier. */
static int
setup_effect_reuse(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	char				 csid[160];
	size_t				 g;

	if (setup_effect(cl) != 0)
		return -1;
	for (g = (size_t)cl->index; g < s->ids; g += (size_t)cl->job->clients) {
		effect_csid(cl, g, csid, sizeof csid);
		if (effect_run(cl, csid, g) != 0)
			return -1;
	}
	if (cl->report->errors > 0 || cl->report->unexpected > 0)
		return -1;
	cl->report->created = 0;
	return 0;
}

/*
 * A retry of a committed effect: begin answers reused, and its result,
 * as libidem gives it, is parsed as a caller would (op_redis_get parses
 * the value GET returns).
 */
static int
op_effect_reuse(struct client *cl, size_t i)
{
	const struct idem_scenario	*s = cl->job->arg;
	struct idem_effect		 out;
	char				 csid[160];
	size_t				 g;
	json_t				*j = NULL;

	g = ((size_t)cl->index * (s->ids / (size_t)cl->job->clients) + i) %
	    s->ids;
	effect_csid(cl, g, csid, sizeof csid);
	if (effect_begin(cl, csid, i, &out) != 0)
		return -1;
	if (out.disposition == IDEM_EFFECT_REUSED && out.result != NULL &&
	    (j = json_loads(out.result, 0, NULL)) != NULL)
		cl->report->reused++;
	else {
		cl->report->unexpected++;
		client_error(cl, "retry %zu: begin answered disposition %d",
		    i, (int)out.disposition);
	}
	json_decref(j);
	idem_effect_clear(&out);
	return 0;
}

/* Redis: connect to its Unix socket. */
static int
setup_redis(struct client *cl)
{
	struct sockaddr_un	sun;

	cl->buf = xcalloc(1, BENCH_EFFECT_LINE_BYTES + BENCH_REDIS_BUF_BYTES);
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", cl->job->socket);
	if ((cl->redis_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
	    0)) == -1 || connect(cl->redis_fd, (struct sockaddr *)&sun,
	    sizeof sun) == -1) {
		client_error(cl, "connect %s: %s", cl->job->socket,
		    strerror(errno));
		return -1;
	}
	return 0;
}

static void
cleanup_redis(struct client *cl)
{
	if (cl->redis_fd != -1)
		close(cl->redis_fd);
	cl->redis_fd = -1;
}

/*
 * Send a command of argc bulk strings; read one reply.  *value is a
 * status or error line (its first byte kept: '+', '-', ':') or a bulk
 * string's bytes, NUL-terminated, in cl->buf; NULL for a nil.  -1
 * (counted) when the connection failed.  The reply is awaited in
 * poll(2), then read, as libidem awaits idemd's (client.c,
 * client_wait_readable): a sleeper in read(2) is woken for nothing when
 * the server reads the command, and that wake-up would be charged to
 * Redis and not to idemd.
 */
static int
redis_call(struct client *cl, size_t i, int argc, const char *const *argv,
    char **value, size_t *length)
{
	struct pollfd	 pfd;
	char		*cmd = cl->buf, *in = cl->buf + BENCH_EFFECT_LINE_BYTES;
	char		*crlf;
	size_t		 n = 0, have = 0, need, a, len;
	ssize_t		 got = -1;
	long		 bulk;

	n += (size_t)snprintf(cmd + n, BENCH_EFFECT_LINE_BYTES - n, "*%d\r\n",
	    argc);
	for (a = 0; a < (size_t)argc; a++) {
		len = strlen(argv[a]);
		if (n + len + 32 > BENCH_EFFECT_LINE_BYTES)
			errx(1, "redis_call: command too long");
		n += (size_t)snprintf(cmd + n, BENCH_EFFECT_LINE_BYTES - n,
		    "$%zu\r\n", len);
		memcpy(cmd + n, argv[a], len);
		memcpy(cmd + n + len, "\r\n", 2);
		n += len + 2;
	}
	if (write_all(cl->redis_fd, cmd, n) == -1)
		goto fail;
	for (;;) {
		pfd.fd = cl->redis_fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, -1) == -1) {
			if (errno == EINTR)
				continue;
			goto fail;
		}
		got = read(cl->redis_fd, in + have, BENCH_REDIS_BUF_BYTES - 1 -
		    have);
		if (got == -1 && errno == EINTR)
			continue;
		if (got <= 0)
			goto fail;
		have += (size_t)got;
		if ((crlf = memmem(in, have, "\r\n", 2)) == NULL)
			continue;
		if (in[0] != '$') {
			*crlf = '\0';
			*value = in;
			*length = (size_t)(crlf - in);
			return 0;
		}
		if ((bulk = strtol(in + 1, NULL, 10)) < 0) {
			*value = NULL;
			*length = 0;
			return 0;
		}
		need = (size_t)(crlf - in) + 2 + (size_t)bulk + 2;
		if (need >= BENCH_REDIS_BUF_BYTES)
			errx(1, "redis_call: a reply of %ld bytes", bulk);
		if (have < need)
			continue;
		*value = crlf + 2;
		*length = (size_t)bulk;
		(*value)[bulk] = '\0';
		return 0;
	}
fail:
	cl->report->errors++;
	client_error(cl, "redis %zu: %s", i, got == 0 ? "connection closed" :
	    strerror(errno));
	return -1;
}

/* One reply expected to be +OK. */
static int
redis_ok(struct client *cl, size_t i, int argc, const char *const *argv)
{
	char	*v;
	size_t	 n;

	if (redis_call(cl, i, argc, argv, &v, &n) != 0)
		return -1;
	if (v == NULL || strcmp(v, "+OK") != 0) {
		cl->report->unexpected++;
		client_error(cl, "redis %zu: %s answered %s", i, argv[0],
		    v != NULL ? v : "nil");
		return 1;
	}
	return 0;
}

/* An effect the Powertools way: SET NX PX to reserve, SET XX to commit. */
static int
redis_effect(struct client *cl, const char *csid, size_t i)
{
	char		 key[200], req[BENCH_EFFECT_REQUEST_BYTES + 1];
	char		 result[BENCH_EFFECT_RESULT_BYTES + 1];
	const char	*reserve[] = { "SET", key, req, "NX", "PX",
			    BENCH_EFFECT_LEASE_MS };
	const char	*commit[] = { "SET", key, result, "XX" };
	int		 rc;

	snprintf(key, sizeof key, BENCH_EFFECT_KIND ":%s", csid);
	effect_json(req, sizeof req - 1, csid);
	if ((rc = redis_ok(cl, i, 6, reserve)) != 0)
		return rc < 0 ? -1 : 0;
	effect_json(result, sizeof result - 1, csid);
	if ((rc = redis_ok(cl, i, 4, commit)) != 0)
		return rc < 0 ? -1 : 0;
	cl->report->created++;
	return 0;
}

static int
op_redis_effect(struct client *cl, size_t i)
{
	char	csid[160];

	effect_csid(cl, i, csid, sizeof csid);
	return redis_effect(cl, csid, i);
}

static int
setup_redis_get(struct client *cl)
{
	const struct idem_scenario	*s = cl->job->arg;
	char				 csid[160];
	size_t				 g;

	if (setup_redis(cl) != 0)
		return -1;
	for (g = (size_t)cl->index; g < s->ids; g += (size_t)cl->job->clients) {
		effect_csid(cl, g, csid, sizeof csid);
		if (redis_effect(cl, csid, g) != 0)
			return -1;
	}
	if (cl->report->errors > 0 || cl->report->unexpected > 0)
		return -1;
	cl->report->created = 0;
	return 0;
}

/* The committed result found by GET and parsed, as a caller would. */
static int
op_redis_get(struct client *cl, size_t i)
{
	const struct idem_scenario	*s = cl->job->arg;
	json_error_t			 jerr;
	const char			*get[] = { "GET", NULL };
	char				 key[200], csid[160], *v;
	size_t				 g, n;
	json_t				*j;

	g = ((size_t)cl->index * (s->ids / (size_t)cl->job->clients) + i) %
	    s->ids;
	effect_csid(cl, g, csid, sizeof csid);
	snprintf(key, sizeof key, BENCH_EFFECT_KIND ":%s", csid);
	get[1] = key;
	if (redis_call(cl, i, 2, get, &v, &n) != 0)
		return -1;
	if (v == NULL || n != BENCH_EFFECT_RESULT_BYTES ||
	    (j = json_loadb(v, n, 0, &jerr)) == NULL) {
		cl->report->unexpected++;
		client_error(cl, "GET %zu: not the committed result", i);
		return 0;
	}
	json_decref(j);
	cl->report->reused++;
	return 0;
}

/* Redis's processes at the release (and strace, with --syscalls). */
static void
redis_snapshot(void *arg)
{
	struct stats_snapshot	*ss = arg;

	ss->strace = -1;
	proc_sample(ss->master, &ss->proc);
	if (opt.syscalls && ss->proc.ok)
		ss->strace = strace_attach(&ss->proc, ss->strace_out);
}

static void
run_redis(const char *name, int clients, size_t total_ops, size_t ids,
    const struct redis *rs, int (*setup)(struct client *),
    int (*op)(struct client *, size_t))
{
	struct stats_snapshot	 ss;
	struct idem_scenario	 s;
	struct result		*r = result_new(name, clients);
	struct job		 job;

	memset(&s, 0, sizeof s);
	snprintf(s.tag, sizeof s.tag, "%s-%s-k%d", id_prefix, name, clients);
	s.ids = ids;
	memset(&ss, 0, sizeof ss);
	ss.master = rs->pid;
	ss.who = "redis-server";
	snprintf(ss.strace_out, sizeof ss.strace_out, "%s/%s-k%d.strace", top,
	    name, clients);
	memset(&job, 0, sizeof job);
	job.clients = clients;
	job.ops = total_ops / (size_t)clients > 0 ? total_ops /
	    (size_t)clients : 1;
	job.seed = (uint64_t)clients * 1000003u + (uint64_t)name[0];
	job.setup = setup;
	job.op = op;
	job.cleanup = cleanup_redis;
	job.at_release = redis_snapshot;
	job.at_release_arg = &ss;
	job.socket = rs->socket;
	job.arg = &s;
	run_job(&job, r);
	broker_costs(&ss, r);
	if (r->unexpected > 0 || r->errors > 0) {
		r->failed = 1;
		result_note(r, "%" PRIu64 " unexpected replies, %" PRIu64
		    " errors", r->unexpected, r->errors);
	}
}

/*
 * At one K: Redis's effects, idemd's, Redis's GETs of committed ones,
 * idemd's retries of committed ones; one fresh Redis and (run_idem_op)
 * one fresh idemd each.  Without redis-server the scenario is not run,
 * said once in a failed row (as the cluster's is without PostgreSQL).
 */
static void
run_effects(int clients, size_t effect_ops, size_t reuse_ops, size_t ids)
{
	static int	 missing;
	struct redis	 rs;
	struct result	*r;
	const char	*server, *why;
	char		 dir[PATH_MAX];

	if (missing)
		return;
	if ((server = redis_server_path()) == NULL) {
		missing = 1;
		r = result_new("effects", 0);
		r->failed = 1;
		result_note(r, "not run: redis-server not found (Debian: "
		    "apt-get install redis-server; or IDEM_REDIS_SERVER)");
		return;
	}
	snprintf(dir, sizeof dir, "%s/redis-k%d", top, clients);
	if ((why = redis_start(&rs, server, dir)) != NULL) {
		r = result_new("redis-effect", clients);
		r->failed = 1;
		result_note(r, "not run: %s", why);
		return;
	}
	run_redis("redis-effect", clients, effect_ops, 0, &rs, setup_redis,
	    op_redis_effect);
	run_idem_op("effect", clients, effect_ops, 0, setup_effect, op_effect);
	run_redis("redis-get", clients, reuse_ops, ids, &rs, setup_redis_get,
	    op_redis_get);
	run_idem_op("effect-reuse", clients, reuse_ops, ids,
	    setup_effect_reuse, op_effect_reuse);
	if (redis_stop(&rs) != 0) {
		r = result_new("redis-effect", clients);
		r->failed = 1;
		result_note(r, "redis-server did not stop cleanly (log %s)",
		    rs.log);
	}
}

/* ---- the summary ------------------------------------------------------- */

struct target {
	char		what[96];
	char		rule[24];
	double		value;		/* NAN: not measured */
	double		limit;
	int		at_least;	/* value >= limit, else value <= limit */
	int		strict;
	const char	*unit;
	const char	*why_missing;
	int		 bound;		/* a reference under a target's rule */
};

static struct target	targets[48];
static size_t		target_count;

static void
target_add(const char *what, double value, const char *unit, int at_least,
    int strict, double limit, const char *why_missing)
{
	struct target	*t = &targets[target_count++];

	memset(t, 0, sizeof *t);
	snprintf(t->what, sizeof t->what, "%s", what);
	snprintf(t->rule, sizeof t->rule, "%s %g%s", at_least ? ">=" :
	    strict ? "<" : "<=", limit, unit);
	t->value = value;
	t->limit = limit;
	t->at_least = at_least;
	t->strict = strict;
	t->unit = unit;
	t->why_missing = why_missing;
}

/*
 * A target's rule applied to a reference alone: where the reference
 * does not meet it, no broker can on this machine.
 */
static void
target_add_bound(const char *what, double value, const char *unit,
    int at_least, double limit, const char *why_missing)
{
	target_add(what, value, unit, at_least, 0, limit, why_missing);
	targets[target_count - 1].bound = 1;
}

static const char *
target_verdict(const struct target *t)
{
	if (isnan(t->value))
		return "n/a";
	if (t->at_least)
		return t->value >= t->limit ? "MET" : "NOT MET";
	if (t->strict)
		return t->value < t->limit ? "MET" : "NOT MET";
	return t->value <= t->limit ? "MET" : "NOT MET";
}

static double
ratio(const struct result *a, const struct result *b)
{
	if (a == NULL || b == NULL || isnan(a->ops_per_s) ||
	    isnan(b->ops_per_s) || b->ops_per_s == 0)
		return NAN;
	return a->ops_per_s / b->ops_per_s;
}

static double
difference(const struct result *a, const struct result *b)
{
	if (a == NULL || b == NULL || isnan(a->cpu_us) || isnan(b->cpu_us))
		return NAN;
	return a->cpu_us - b->cpu_us;
}

/* The mean ops/s of every row named name at K (rows run twice). */
static double
mean_ops(const char *name, int clients)
{
	double	sum = 0;
	size_t	i, n = 0;

	for (i = 0; i < result_count; i++) {
		if (strcmp(results[i].name, name) != 0 ||
		    results[i].clients != clients || results[i].failed ||
		    isnan(results[i].ops_per_s))
			continue;
		sum += results[i].ops_per_s;
		n++;
	}
	return n > 0 ? sum / (double)n : NAN;
}

static double
mean_ratio(const char *a, const char *b, int clients)
{
	double	x = mean_ops(a, clients), y = mean_ops(b, clients);

	return isnan(x) || isnan(y) || y == 0 ? NAN : x / y;
}

static double
fsyncs_per_creation(const struct result *r)
{
	if (r == NULL || r->fsyncs < 0 || r->created == 0)
		return NAN;
	return (double)r->fsyncs / (double)r->created;
}

/*
 * Issue #33's, each against Redis (fsync always) in the same run: the
 * effect rate at every K run, the p99 and the retries at K=8.
 */
static void
compute_effect_targets(void)
{
	const struct result	*e, *re;
	char			 what[96];
	int			 i, k;

	for (i = 0; i < opt.client_counts; i++) {
		k = opt.clients[i];
		if ((e = find_result("effect", k)) == NULL)
			continue;
		re = find_result("redis-effect", k);
		snprintf(what, sizeof what, "effects: effects/s / Redis, K=%d",
		    k);
		target_add(what, ratio(e, re), "x", 1, 0, 1.0,
		    "redis-effect not run");
	}
	e = find_result("effect", BENCH_TARGET_CLIENTS);
	re = find_result("redis-effect", BENCH_TARGET_CLIENTS);
	if (e == NULL && re == NULL)
		return;
	target_add("effects: p99 / Redis's p99, K=8", e != NULL && re != NULL ?
	    e->p99_ms / re->p99_ms : NAN, "x", 0, 0, 1.5,
	    "effect or redis-effect at K=8 not run");
	target_add("effects: reuse / Redis GET, K=8",
	    ratio(find_result("effect-reuse", BENCH_TARGET_CLIENTS),
	    find_result("redis-get", BENCH_TARGET_CLIENTS)), "x", 1, 0, 1.0,
	    "effect-reuse or redis-get at K=8 not run");
}

/* The figures of issue #14, each against its reference of this run. */
static void
compute_targets(void)
{
	/* Issue #16's: the mean ratio of run to ref at K=8, at least so. */
	static const struct {
		const char	*what, *run, *ref;
		double		 at_least;
		const char	*why_missing;
	} pg[] = {
		{ "PG create, 1 broker / pgbench INSERT, K=8", "pg-create-b1",
		    "pgbench-insert", 0.5,
		    "pg-create-b1 or pgbench-insert at K=8 not run" },
		{ "PG create, 3 brokers (workspace) / pgbench, K=8",
		    "pg-create-b3", "pgbench-insert", 0.5,
		    "pg-create-b3 or pgbench-insert at K=8 not run" },
		{ "PG reuse, 1 broker / local store reuse, K=8", "pg-reuse-b1",
		    "local-reuse", 0.9,
		    "pg-reuse-b1 or local-reuse at K=8 not run" },
		{ "PG reuse, 3 brokers / local store reuse, K=8", "pg-reuse-b3",
		    "local-reuse", 0.9,
		    "pg-reuse-b3 or local-reuse at K=8 not run" },
	};
	const struct result	*create, *reuse, *disk, *echo, *floor8;
	const struct result	*create32;
	const int		 k = BENCH_TARGET_CLIENTS;
	size_t			 i;

	create = find_result("create", k);
	create32 = find_result("create", 32);
	reuse = find_result("reuse", k);
	disk = find_result("disk-limit", k);
	echo = find_result("socket-echo-json", k);
	floor8 = find_result("floor", k);
	target_count = 0;
	target_add("broker CPU - floor CPU per creation, K=8",
	    difference(create, floor8), " us", 0, 0, 100.0,
	    "create or floor at K=8 not run");
	target_add("create K=8 / floor K=8", ratio(create, floor8), "x", 1, 0,
	    0.6, "create or floor at K=8 not run");
	target_add("reuse K=8 / socket echo (jansson) K=8", ratio(reuse, echo),
	    "x", 1, 0, 0.6, "reuse or echo at K=8 not run");
	target_add("create p99 K=8 / disk limit p99 K=8",
	    create != NULL && disk != NULL ? create->p99_ms / disk->p99_ms :
	    NAN, "x", 0, 0, 2.0, "create or disk at K=8 not run");
	target_add("journal fsyncs per creation, K=8",
	    fsyncs_per_creation(create), "", 0, 0, 0.6, "create K=8 not run");
	target_add("journal fsyncs per creation, K=32",
	    fsyncs_per_creation(create32), "", 0, 0, 0.3,
	    "create K=32 not run");
	target_add("broker context switches per creation, K=8",
	    create != NULL ? create->csw : NAN, "", 0, 0, 6.0,
	    "create K=8 not run");
	target_add("broker system calls per creation, K=8",
	    create != NULL ? create->syscalls : NAN, "", 0, 0, 25.0,
	    "needs --syscalls");
	target_add("replay 1,000,000 creations: exec to ready (warm)",
	    replay.ran && replay.verified && replay.creations ==
	    BENCH_REPLAY_CREATIONS ? replay.warm_median_s : NAN, " s", 0, 1,
	    1.5, !replay.ran ? "replay not run" : !replay.verified ?
	    "replay not verified" : "--replay-count is not 1,000,000");
	target_add("journal bytes per committed creation", replay.ran ?
	    replay.bytes_per_creation : NAN, " B", 0, 1, 1024.0,
	    "replay not run");
	/* The floor does no coordination at all: what the disk asks. */
	target_add_bound("floor: context switches per creation, K=8",
	    floor8 != NULL ? floor8->csw : NAN, "", 0, 6.0,
	    "floor at K=8 not run");
	/* Issue #15: the history scenario's figures, from one run. */
	if (hist.ran) {
		target_add("history: start-up with the history (exec to ready)",
		    hist.start_s, " s", 0, 1, 2.0, "");
		target_add("history: shared memory (the segment)",
		    hist.shm_mb * 1048576.0 / 1e6, " MB", 0, 1, 300.0,
		    "segment not found");
		target_add("history: cold retry p99, K=8", hist.cold_p99_ms,
		    " ms", 0, 1, 2.0, "");
		target_add("history: cold retry / hot retry rate",
		    hist.cold_rate / hist.hot_rate, "x", 1, 0, 0.5, "");
		target_add("history: create, table full / empty (in turns)",
		    hist.paired_full / hist.paired_empty, "x", 1, 0, 0.9, "");
		target_add("history: disk per committed id",
		    hist.disk_bytes_per_id, " B", 0, 1, 600.0, "");
	}
	compute_effect_targets();
	if (find_result("pg-create-b1", k) == NULL &&
	    find_result("pg-reuse-b1", k) == NULL)
		return;
	/* Issue #16: several brokers on PostgreSQL, against this run's refs. */
	for (i = 0; i < sizeof pg / sizeof pg[0]; i++)
		target_add(pg[i].what, mean_ratio(pg[i].run, pg[i].ref, k),
		    "x", 1, 0, pg[i].at_least, pg[i].why_missing);
	/*
	 * The local store, with no PostgreSQL at all, under the create
	 * rule: a creation writes and fsyncs a file and its directory,
	 * pgbench only inserts a row.
	 */
	target_add_bound("local store create / pgbench INSERT, K=8",
	    mean_ratio("local-create", "pgbench-insert", k), "x", 1, 0.5,
	    "local-create or pgbench-insert at K=8 not run");
	/*
	 * The protocol's statements alone, with no file, under the same
	 * rule: what a creation waits for in PostgreSQL, measured by
	 * pgbench itself.
	 */
	target_add_bound("a creation's statements, no file / pgbench, K=8",
	    mean_ratio("pgbench-protocol", "pgbench-insert", k),
	    "x", 1, 0.5, "pgbench-protocol or pgbench-insert at K=8 not run");
}

static void
print_ms(double v)
{
	if (isnan(v))
		printf(" %9s", "-");
	else
		printf(" %9.3f", v);
}

/*
 * The local store's rate in the same run that a PostgreSQL row is set
 * beside: pg-create-* and the pgbench rows against local-create,
 * pg-reuse-* against local-reuse (the mean of that reference's rows).
 */
static double
pg_local_ratio(const struct result *r)
{
	double	local;

	if (strncmp(r->name, "pg-reuse-", 9) == 0)
		local = mean_ops("local-reuse", r->clients);
	else if (strncmp(r->name, "pg-create-", 10) == 0 ||
	    strncmp(r->name, "pgbench-", 8) == 0)
		local = mean_ops("local-create", r->clients);
	else
		return NAN;
	return isnan(local) || local == 0 || isnan(r->ops_per_s) ? NAN :
	    r->ops_per_s / local;
}

static void
print_cell(double v, int decimals)
{
	if (isnan(v))
		printf(" %8s", "-");
	else
		printf(" %8.*f", decimals, v);
}

/* The server's side beside the broker's, one line per PostgreSQL row. */
static void
print_pg_table(void)
{
	const struct result	*r;
	size_t			 i;
	int			 header = 0;

	for (i = 0; i < result_count; i++) {
		r = &results[i];
		if (r->skipped || (isnan(r->pg_xacts) &&
		    isnan(r->pg_statements) && isnan(r->pg_cpu_us)))
			continue;
		if (!header) {
			printf("\nPostgreSQL per operation (statements: "
			    "pg_stat_statements; sendto: the brokers' libpq "
			    "sends, --syscalls only; xacts: pg_stat_database; "
			    "WAL: pg_stat_wal; CPU: /proc utime+stime, "
			    "server's processes and brokers'):\n");
			printf("%-16s %4s %10s %8s %8s %8s %8s %8s %8s %8s "
			    "%8s\n", "scenario", "K", "ops/s", "x local",
			    "stmts", "sendto", "xacts", "wal_sync",
			    "wal_writ", "srv us", "brk us");
			header = 1;
		}
		printf("%-16s %4d", r->name, r->clients);
		if (isnan(r->ops_per_s))
			printf(" %10s", "-");
		else
			printf(" %10.1f", r->ops_per_s);
		if (isnan(pg_local_ratio(r)))
			printf(" %8s", "-");
		else
			printf(" %7.3fx", pg_local_ratio(r));
		print_cell(r->pg_statements, 2);
		print_cell(r->pg_sends, 2);
		print_cell(r->pg_xacts, 2);
		print_cell(r->pg_wal_syncs, 3);
		print_cell(r->pg_wal_writes, 3);
		print_cell(r->pg_cpu_us, 0);
		print_cell(r->cpu_us, 0);
		printf("%s\n", r->failed ? "  [FAILED]" : "");
	}
}

static void
print_table(void)
{
	const struct result	*r;
	const struct target	*t;
	size_t			 i;

	printf("\n%-16s %4s %8s %10s %9s %9s %9s %10s  %s\n", "scenario", "K",
	    "ops", "ops/s", "p50 ms", "p99 ms", "p999 ms", "fsyncs/rec",
	    "notes");
	for (i = 0; i < result_count; i++) {
		r = &results[i];
		if (r->skipped) {
			printf("%-16s %4d %s\n", r->name, r->clients, r->note);
			continue;
		}
		printf("%-16s %4d %8" PRIu64, r->name, r->clients, r->ops);
		if (isnan(r->ops_per_s))
			printf(" %10s", "-");
		else
			printf(" %10.1f", r->ops_per_s);
		print_ms(r->p50_ms);
		print_ms(r->p99_ms);
		print_ms(r->p999_ms);
		if (r->records > 0)
			printf(" %10.3f", (double)r->fsyncs /
			    (double)r->records);
		else if (r->records == 0)
			printf(" %6" PRId64 "/0   ", r->fsyncs);
		else
			printf(" %10s", "-");
		printf("  %s%s\n", r->failed ? "[FAILED] " : "", r->note);
	}
	print_pg_table();
	printf("\nload average (1 min): %.2f at the start, %.2f at the end "
	    "(%ld cpus)\n", load_start[0], load_end[0],
	    sysconf(_SC_NPROCESSORS_ONLN));
	if (storm.ran)
		printf("storm (64 clients x 100 ids): %s\n", storm.pass ?
		    "PASS" : "FAIL");
	printf("\ntargets (issue #14, \"Close to the floor\"):\n");
	for (i = 0; i < target_count; i++) {
		t = &targets[i];
		if (strncmp(t->what, "PG ", 3) == 0 && (i == 0 ||
		    strncmp(targets[i - 1].what, "PG ", 3) != 0))
			printf("\ntargets (issue #16, several brokers on "
			    "PostgreSQL):\n");
		if (strncmp(t->what, "effects: ", 9) == 0 && (i == 0 ||
		    strncmp(targets[i - 1].what, "effects: ", 9) != 0))
			printf("\ntargets (issue #33, effects against Redis "
			    "with appendfsync always):\n");
		if (strncmp(t->what, "history: ", 9) == 0 && (i == 0 ||
		    strncmp(targets[i - 1].what, "history: ", 9) != 0))
			printf("\ntargets (issue #15, history without a "
			    "ceiling, at %zu ids and --capacity %u):\n",
			    hist.ids, hist.capacity);
		if (t->bound && (i == 0 || !targets[i - 1].bound))
			printf("\nthe same rules on the references alone "
			    "(where NOT MET, out of reach for any broker on "
			    "this machine):\n");
		if (isnan(t->value))
			printf("  %-50s %12s  %-9s %s (%s)\n", t->what, "-",
			    t->rule, target_verdict(t), t->why_missing);
		else
			printf("  %-50s %11.3f%s  %-9s %s\n", t->what,
			    t->value, strcmp(t->unit, "x") == 0 ? "x" : " ",
			    t->rule, target_verdict(t));
	}
}

static json_t *
json_number(double v)
{
	return isnan(v) ? json_null() : json_real(v);
}

static void
print_json(void)
{
	const struct result	*r;
	const struct target	*t;
	struct utsname		 u;
	json_t			*doc, *list, *o;
	size_t			 i;

	doc = json_object();
	uname(&u);
	json_object_set_new(doc, "kernel", json_string(u.release));
	json_object_set_new(doc, "cpus", json_integer(sysconf(
	    _SC_NPROCESSORS_ONLN)));
	json_object_set_new(doc, "dir", json_string(top));
	json_object_set_new(doc, "load_start", json_number(load_start[0]));
	json_object_set_new(doc, "load_end", json_number(load_end[0]));
	list = json_array();
	for (i = 0; i < result_count; i++) {
		r = &results[i];
		o = json_pack("{s:s, s:i, s:b, s:b, s:s}", "scenario", r->name,
		    "clients", r->clients, "failed", r->failed, "skipped",
		    r->skipped, "note", r->note);
		json_object_set_new(o, "ops", json_integer((json_int_t)r->ops));
		json_object_set_new(o, "seconds", json_number(r->seconds));
		json_object_set_new(o, "ops_per_s", json_number(r->ops_per_s));
		json_object_set_new(o, "p50_ms", json_number(r->p50_ms));
		json_object_set_new(o, "p99_ms", json_number(r->p99_ms));
		json_object_set_new(o, "p999_ms", json_number(r->p999_ms));
		json_object_set_new(o, "cpu_us_per_op", json_number(r->cpu_us));
		json_object_set_new(o, "context_switches_per_op",
		    json_number(r->csw));
		json_object_set_new(o, "syscalls_per_op",
		    json_number(r->syscalls));
		json_object_set_new(o, "pg_statements_per_op",
		    json_number(r->pg_statements));
		json_object_set_new(o, "pg_transactions_per_op",
		    json_number(r->pg_xacts));
		json_object_set_new(o, "pg_wal_fsyncs_per_op",
		    json_number(r->pg_wal_syncs));
		json_object_set_new(o, "pg_wal_writes_per_op",
		    json_number(r->pg_wal_writes));
		json_object_set_new(o, "pg_server_cpu_us_per_op",
		    json_number(r->pg_cpu_us));
		json_object_set_new(o, "pg_sendto_per_op",
		    json_number(r->pg_sends));
		json_object_set_new(o, "pg_recvfrom_per_op",
		    json_number(r->pg_recvs));
		json_object_set_new(o, "ratio_to_local",
		    json_number(pg_local_ratio(r)));
		json_object_set_new(o, "journal_fsyncs", r->fsyncs >= 0 ?
		    json_integer(r->fsyncs) : json_null());
		json_object_set_new(o, "journal_records", r->records >= 0 ?
		    json_integer(r->records) : json_null());
		json_object_set_new(o, "created", json_integer((json_int_t)
		    r->created));
		json_object_set_new(o, "reused", json_integer((json_int_t)
		    r->reused));
		json_object_set_new(o, "conflict", json_integer((json_int_t)
		    r->conflict));
		json_object_set_new(o, "errors", json_integer((json_int_t)
		    r->errors));
		json_object_set_new(o, "unexpected", json_integer((json_int_t)
		    r->unexpected));
		json_array_append_new(list, o);
	}
	json_object_set_new(doc, "results", list);
	if (storm.ran)
		json_object_set_new(doc, "storm", json_pack("{s:b, s:s}",
		    "pass", storm.pass, "note", storm.note));
	if (replay.ran) {
		o = json_pack("{s:I, s:f, s:f, s:f, s:b, s:I}",
		    "creations", (json_int_t)replay.creations, "journal_bytes",
		    replay.journal_bytes, "bytes_per_creation",
		    replay.bytes_per_creation, "journal_write_s",
		    replay.write_s, "verified", replay.verified,
		    "broker_replay_ms", (json_int_t)replay.broker_replay_ms);
		json_object_set_new(o, "cold_s", json_number(replay.cold_s));
		json_object_set_new(o, "warm_median_s",
		    json_number(replay.warm_median_s));
		json_object_set_new(o, "warm_cpu_s",
		    json_number(replay.warm_cpu_s));
		json_object_set(doc, "replay", o);
		json_decref(o);
	}
	list = json_array();
	for (i = 0; i < target_count; i++) {
		t = &targets[i];
		json_array_append_new(list, json_pack("{s:s, s:o, s:s, s:s, "
		    "s:b}", "target", t->what, "value", json_number(t->value),
		    "rule", t->rule, "verdict", target_verdict(t), "bound",
		    t->bound));
	}
	json_object_set_new(doc, "targets", list);
	json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
	putchar('\n');
	json_decref(doc);
}

/* One line per finished run on stderr, so a long run shows its progress. */
static void
report_progress(void)
{
	static size_t		 reported;
	const struct result	*r;

	for (; reported < result_count; reported++) {
		r = &results[reported];
		if (r->skipped || isnan(r->ops_per_s))
			fprintf(stderr, "%s K=%d: %s\n", r->name, r->clients,
			    r->note);
		else
			fprintf(stderr, "%s K=%d: %" PRIu64 " ops in %.2f s: "
			    "%.1f ops/s, p50 %.3f p99 %.3f p999 %.3f ms%s%s\n",
			    r->name, r->clients, r->ops, r->seconds,
			    r->ops_per_s, r->p50_ms, r->p99_ms, r->p999_ms,
			    r->note[0] != '\0' ? "; " : "", r->note);
	}
}

/* ---- options and main --------------------------------------------------- */

static void __attribute__((noreturn))
usage(int status)
{
	fprintf(status == 0 ? stdout : stderr,
"usage: idem-bench [--idemd PATH] [--dir DIR] [--socket PATH] [--store URI]\n"
"                  [--clients K[,K...]] [--count N] [--scenario LIST]\n"
"                  [--replay-count N] [--history-count N] [--keep] [--json]\n"
"                  [--syscalls] [--workers N] [--store-connections N]\n"
"  --idemd PATH      broker to start (default $IDEMD, else ../../broker/idemd\n"
"                    from this program's directory)\n"
"  --dir DIR         where the run's directory goes (default $TMPDIR, /tmp)\n"
"  --socket PATH     use a running broker instead of starting fresh ones\n"
"  --store URI       the cluster scenario on this PostgreSQL (postgresql://...;\n"
"                    alone, it runs that scenario only); without it the\n"
"                    cluster scenario starts a private server\n"
"  --idemctl PATH    for idemctl store init (default $IDEMCTL, else\n"
"                    ../contrib/idemctl from idemd's directory)\n"
"  --workers N       the cluster brokers' --workers (default idemd's)\n"
"  --store-connections N  the cluster brokers' --store-connections\n"
"                    (default idemd's)\n"
"  --clients LIST    client counts (default 1,8,32); storm always uses 64\n"
"  --count N         requests per scenario and reference (defaults: %d for\n"
"                    create, mixed, SQLite creates, disk; %d for reuse,\n"
"                    SQLite retries, echo; %d for the cluster's reuse;\n"
"                    %d effects and %d retries for effects)\n"
"  --scenario LIST   create,reuse,mixed,storm,replay and the references\n"
"                    floor,sqlite,disk,echo,fsync,cost, history, cluster (1\n"
"                    and 3 brokers on PostgreSQL beside pgbench; K=8 unless\n"
"                    --clients), effects (beside a private redis-server);\n"
"                    exactly the ones named; \"all\" is all but history,\n"
"                    cluster and effects; default: all but history\n"
"  --replay-count N  committed creations in the replay journal (%d)\n"
"  --history-count N committed ids in the history scenario's index (%d;\n"
"                    --capacity is a tenth of it)\n"
"  --keep            leave the run's directory (else removed at the end)\n"
"  --json            print the results as JSON instead of a table\n"
"  --syscalls        count the brokers' system calls with strace -c -f over\n"
"                    each timed part (slows them: the rates mean nothing)\n",
	    BENCH_CREATE_OPS, BENCH_REUSE_OPS, BENCH_CLUSTER_REUSE_OPS,
	    BENCH_EFFECT_OPS, BENCH_EFFECT_REUSE_OPS,
	    BENCH_REPLAY_CREATIONS,
	    BENCH_HISTORY_IDS);
	exit(status);
}

static size_t
size_option(const char *name, const char *s, size_t min, size_t max)
{
	unsigned long long	v;
	char			*end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		errx(2, "--%s: %s is not a number from %zu to %zu", name, s,
		    min, max);
	return (size_t)v;
}

static void
parse_clients(const char *s)
{
	char	*copy, *p, *tok;

	if ((copy = strdup(s)) == NULL)
		err(1, "strdup");
	opt.client_counts = 0;
	for (p = copy; (tok = strsep(&p, ",")) != NULL;) {
		if (opt.client_counts == BENCH_MAX_CLIENT_COUNTS)
			errx(2, "--clients: at most %d counts",
			    BENCH_MAX_CLIENT_COUNTS);
		opt.clients[opt.client_counts++] = (int)size_option("clients",
		    tok, 1, BENCH_MAX_CLIENTS);
	}
	free(copy);
}

static void
parse_scenarios(const char *s)
{
	char	*copy, *p, *tok;
	size_t	 i;

	if ((copy = strdup(s)) == NULL)
		err(1, "strdup");
	opt.scenarios = 0;
	for (p = copy; (tok = strsep(&p, ",")) != NULL;) {
		for (i = 0; i < sizeof scenario_names /
		    sizeof scenario_names[0]; i++) {
			if (strcmp(tok, scenario_names[i].name) == 0)
				break;
		}
		if (i == sizeof scenario_names / sizeof scenario_names[0])
			errx(2, "--scenario: unknown \"%s\"", tok);
		opt.scenarios |= scenario_names[i].bits;
	}
	free(copy);
}

/*
 * $IDEMD, else broker/idemd of the build tree this program is in.  Under
 * libtool's wrapper the binary runs from tests/bench/.libs/: skip that.
 */
static const char *
default_idemd(const char *argv0)
{
	static char	 path[PATH_MAX + 32];
	char		 self[PATH_MAX], *dir, *resolved;
	const char	*env = getenv("IDEMD");
	ssize_t		 n;

	if (env != NULL && *env != '\0')
		return env;
	if (strchr(argv0, '/') != NULL && realpath(argv0, self) != NULL) {
		/* found from argv[0] */
	} else if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) >
	    0) {
		self[n] = '\0';
	} else {
		return "broker/idemd";
	}
	dir = dirname(self);
	if (strcmp(basename(dir), ".libs") == 0)
		dir = dirname(dir);
	snprintf(path, sizeof path, "%s/../../broker/idemd", dir);
	if ((resolved = realpath(path, NULL)) != NULL) {
		snprintf(path, sizeof path, "%s", resolved);
		free(resolved);
	}
	return path;
}

/* $IDEMCTL, else contrib/idemctl beside the broker's directory. */
static const char *
default_idemctl(const char *idemd)
{
	static char	 path[PATH_MAX + 32];
	char		*copy, *resolved;
	const char	*env = getenv("IDEMCTL");

	if (env != NULL && *env != '\0')
		return env;
	if ((copy = strdup(idemd)) == NULL)
		err(1, "strdup");
	snprintf(path, sizeof path, "%s/../contrib/idemctl", dirname(copy));
	free(copy);
	if ((resolved = realpath(path, NULL)) != NULL) {
		snprintf(path, sizeof path, "%s", resolved);
		free(resolved);
	}
	return path;
}

static int
remove_entry(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
	if (remove(path) == -1)
		warn("remove %s", path);
	return 0;
}

static const char *
fs_name(const char *path)
{
	struct statfs	sf;

	if (statfs(path, &sf) == -1)
		return "unknown";
	switch ((unsigned long)sf.f_type) {
	case 0xef53:
		return "ext4";
	case 0x58465342:
		return "xfs";
	case 0x9123683e:
		return "btrfs";
	case 0x01021994:
		return "tmpfs";
	case 0x794c7630:
		return "overlayfs";
	}
	return "other";
}

int
main(int argc, char **argv)
{
	static const struct option	 options[] = {
		{ "idemd", required_argument, NULL, 'i' },
		{ "dir", required_argument, NULL, 'd' },
		{ "socket", required_argument, NULL, 's' },
		{ "store", required_argument, NULL, 'P' },
		{ "idemctl", required_argument, NULL, 'C' },
		{ "workers", required_argument, NULL, 'W' },
		{ "store-connections", required_argument, NULL, 'c' },
		{ "clients", required_argument, NULL, 'k' },
		{ "count", required_argument, NULL, 'n' },
		{ "scenario", required_argument, NULL, 'S' },
		{ "replay-count", required_argument, NULL, 'R' },
		{ "history-count", required_argument, NULL, 'H' },
		{ "keep", no_argument, NULL, 'K' },
		{ "json", no_argument, NULL, 'j' },
		{ "syscalls", no_argument, NULL, 'y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct utsname	 u;
	size_t		 create_ops, reuse_ops, reuse_ids;
	int		 ch, i, k, failed = 0, scenarios_given = 0;
	unsigned	 sc;

	opt.clients[0] = 1;
	opt.clients[1] = 8;
	opt.clients[2] = 32;
	opt.client_counts = 3;
	opt.scenarios = ~0u & ~SC_HISTORY;
	opt.replay_count = BENCH_REPLAY_CREATIONS;
	opt.history_count = BENCH_HISTORY_IDS;
	opt.dir = getenv("TMPDIR") != NULL && *getenv("TMPDIR") != '\0' ?
	    getenv("TMPDIR") : "/tmp";
	while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (ch) {
		case 'i':
			opt.idemd = optarg;
			break;
		case 'd':
			opt.dir = optarg;
			break;
		case 's':
			opt.socket = optarg;
			break;
		case 'k':
			parse_clients(optarg);
			opt.clients_given = 1;
			break;
		case 'P':
			opt.store = optarg;
			break;
		case 'C':
			opt.idemctl = optarg;
			break;
		case 'W':
			(void)size_option("workers", optarg, 1, IDEM_MAX_WORKERS);
			opt.workers = optarg;
			break;
		case 'c':
			(void)size_option("store-connections", optarg, 1, 32);
			opt.store_connections = optarg;
			break;
		case 'n':
			opt.count = size_option("count", optarg, 1, 100000000);
			break;
		case 'S':
			parse_scenarios(optarg);
			scenarios_given = 1;
			break;
		case 'R':
			opt.replay_count = size_option("replay-count", optarg,
			    1, 50000000);
			break;
		case 'H':
			opt.history_count = size_option("history-count",
			    optarg, 1000, 100000000);
			break;
		case 'K':
			opt.keep = 1;
			break;
		case 'j':
			opt.json = 1;
			break;
		case 'y':
			opt.syscalls = 1;
			break;
		case 'h':
			usage(0);
		default:
			usage(2);
		}
	}
	if (optind != argc)
		usage(2);
	if (opt.idemd == NULL)
		opt.idemd = default_idemd(argv[0]);
	if (opt.idemctl == NULL)
		opt.idemctl = default_idemctl(opt.idemd);
	/* --store alone: the cluster figures only. */
	if (opt.store != NULL && !scenarios_given)
		opt.scenarios = SC_CLUSTER;
	if (opt.store != NULL && strncmp(opt.store, "postgresql://", 13) != 0 &&
	    strncmp(opt.store, "postgres://", 11) != 0)
		errx(2, "--store: %s is not a postgresql:// URI", opt.store);
	if (sodium_init() < 0)
		errx(1, "libsodium failed to initialise");
	signal(SIGPIPE, SIG_IGN);

	create_ops = opt.count != 0 ? opt.count : BENCH_CREATE_OPS;
	reuse_ops = opt.count != 0 ? opt.count : BENCH_REUSE_OPS;
	reuse_ids = reuse_ops < BENCH_REUSE_IDS ? reuse_ops : BENCH_REUSE_IDS;
	/* A --scenario list runs exactly what it names, references too. */
	sc = opt.scenarios;

	if ((opt.socket == NULL || (sc & (SC_REPLAY | SC_HISTORY))) &&
	    access(opt.idemd, X_OK) == -1)
		err(1, "%s (use --idemd PATH or IDEMD)", opt.idemd);
	if (snprintf(top, sizeof top, "%s/idem-bench-XXXXXX",
	    opt.dir) >= (int)sizeof top)
		errx(2, "--dir %s: too long", opt.dir);
	if (mkdtemp(top) == NULL)
		err(1, "mkdtemp %s", top);
	snprintf(id_prefix, sizeof id_prefix, "b%lld-%ld",
	    (long long)(wall_ms() / 1000), (long)getpid());
	uname(&u);
	if (getloadavg(load_start, 3) == -1)
		load_start[0] = NAN;
	fprintf(stderr, "idem-bench: %ld cpus, Linux %s, %s on %s, load "
	    "average %.2f, idemd %s%s\n", sysconf(_SC_NPROCESSORS_ONLN),
	    u.release, top, fs_name(top), load_start[0], opt.socket != NULL ?
	    "at " : "", opt.socket != NULL ? opt.socket : opt.idemd);

	if (sc & SC_COST) {
		run_cost();
		report_progress();
	}
	for (i = 0; i < opt.client_counts; i++) {
		k = opt.clients[i];
		if (sc & SC_FSYNC)
			run_fsync_probe(k);
		if (sc & SC_FLOOR)
			run_floor(k, create_ops);
		if (sc & SC_CREATE)
			run_idem("create", k, create_ops, 0, setup_create);
		if (sc & SC_DISK)
			run_disk(k, create_ops);
		if (sc & SC_SQLITE)
			run_sqlite(k, create_ops, reuse_ops);
		if (sc & SC_REUSE)
			run_idem("reuse", k, reuse_ops, reuse_ids, setup_reuse);
		if (sc & SC_ECHO) {
			run_echo(k, reuse_ops, 0);
			run_echo(k, reuse_ops, 1);
		}
		if (sc & SC_MIXED)
			run_idem("mixed", k, create_ops, 0, setup_mixed);
		if (sc & SC_EFFECTS)
			run_effects(k, opt.count != 0 ? opt.count :
			    BENCH_EFFECT_OPS, opt.count != 0 ? opt.count :
			    BENCH_EFFECT_REUSE_OPS, reuse_ids);
		report_progress();
	}
	if (sc & SC_STORM) {
		run_idem("storm", BENCH_STORM_CLIENTS, 0, BENCH_STORM_IDS,
		    setup_storm);
		report_progress();
	}
	if (sc & SC_REPLAY) {
		run_replay(opt.replay_count);
		report_progress();
	}
	if (sc & SC_CLUSTER) {
		run_cluster_figures(create_ops, opt.count != 0 ? opt.count :
		    BENCH_CLUSTER_REUSE_OPS, reuse_ids);
		report_progress();
	}
	if (sc & SC_HISTORY) {
		/* At the K the issue's figures are set at, unless one K given. */
		run_history(opt.history_count, opt.client_counts == 1 ?
		    opt.clients[0] : BENCH_TARGET_CLIENTS);
		report_progress();
	}
	if (getloadavg(load_end, 3) == -1)
		load_end[0] = NAN;

	compute_targets();
	if (opt.json)
		print_json();
	else
		print_table();
	fflush(stdout);

	for (failed = 0, i = 0; (size_t)i < result_count; i++)
		failed |= results[i].failed;
	/* Only now: a mass deletion slows this file system for minutes. */
	if (opt.keep)
		fprintf(stderr, "kept %s\n", top);
	else if (nftw(top, remove_entry, 32, FTW_DEPTH | FTW_PHYS) == -1)
		warn("removing %s", top);
	return failed ? 1 : 0;
}
