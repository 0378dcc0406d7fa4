/* SPDX-License-Identifier: ISC */
/*
 * bench.h: what idem-bench's files share (tests/bench/, the map in
 * doc/architecture.md): the sizes, the options, the results table and
 * the verdicts the summary reads, the client runner's types, and the
 * functions one file calls in another, each declared under the file that
 * owns it.  idem-bench.c says what the bench measures and how.
 */
#ifndef BENCH_H
#define BENCH_H

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
#define BENCH_TARGET_CLIENTS	8	/* the K the targets are set at */

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
/* The history scenario's default size (bench_replay.c). */
#define BENCH_HISTORY_IDS		1000000

struct options {
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
};

/* Parsed from the command line by main (idem-bench.c). */
extern struct options	opt;

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

/* Every result of the run, in order (bench_run.c, result_new). */
extern struct result	results[BENCH_MAX_RESULTS];
extern size_t		result_count;

/* Replay and storm verdicts, for the summary. */
struct replay_verdict {
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
};

struct storm_verdict {
	int	ran;
	int	pass;
	char	note[768];
};


extern struct replay_verdict	replay;		/* bench_replay.c's */
extern struct storm_verdict	storm;		/* bench_local.c's */

/* The history scenario's figures, for the summary (bench_replay.c's). */
struct history_figures {
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
};

extern struct history_figures	hist;

/* The cluster's PostgreSQL: --store, or the private server's. */
extern char	store_uri[512];
/* This run's directory; short enough that every path under it fits. */
extern char	top[1024];
extern char	id_prefix[64];		/* makes ids unique per run */
/* Other work on the machine skews everything: say how much there was. */
extern double	load_start[3], load_end[3];

/* Words for the bodies of the tasks and of effects (bench_run.c's). */
#define BENCH_FILLER	"The quick brown fox jumps over the lazy " \
    "dog; pack my box with five dozen liquor jugs.\n"
extern const char	filler[sizeof BENCH_FILLER];

struct bench_task {
	struct idem_task	task;
	char			subject[128];
	char			body[BENCH_BODY_BYTES + 1];
};

struct broker {
	pid_t	pid;		/* 0: not ours (--socket) */
	double	ready_cpu_s;	/* the master's CPU time when it was ready */
	char	root[PATH_MAX];
	char	socket[PATH_MAX];
	char	log[PATH_MAX];
	char	lock[PATH_MAX];	/* held by its processes until they exit */
};

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

struct broker_stats {
	int64_t	fsyncs;
	int64_t	records;
	int64_t	created;
	int64_t	errors;
	int64_t	table_used;
	int64_t	reused;
	int64_t	reused_fast;	/* 0 from a broker without the fast path */
};

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

struct idem_scenario {
	char	tag[96];	/* id prefix of this scenario and K */
	size_t	ids;		/* reuse, storm: distinct ids */
};

enum outcome {
	OUTCOME_CREATED,
	OUTCOME_REUSED,
	OUTCOME_CONFLICT,
	OUTCOME_ERROR
};

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

/* ---- bench_run.c: helpers, tasks, the client runner ---------------- */

uint64_t now_ns(void);			/* CLOCK_MONOTONIC, in ns */
int64_t	wall_ms(void);			/* CLOCK_REALTIME, in ms */
void	*xcalloc(size_t n, size_t size);	/* calloc, or exit */
/* In a child: killed by sig when the bench dies (no broker outlives it). */
void	die_with_parent(int sig);
/* All of length bytes to a socket (no SIGPIPE): 0, or -1. */
int	write_all(int fd, const void *p, size_t length);
/* qsort's comparisons of uint64_t, long and double. */
int	cmp_u64(const void *a, const void *b);
int	cmp_long(const void *a, const void *b);
int	cmp_double(const void *a, const void *b);
/* Nearest rank: the smallest sample with at least q of them at or below. */
double	percentile_ms(const uint64_t *sorted, size_t n, double q);
/* A new row of the results table (exits when it is full). */
struct result *result_new(const char *name, int clients);
/* Notes accumulate, separated by "; ". */
void	result_note(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The row of name at K that ran (not skipped), or NULL. */
const struct result *find_result(const char *name, int clients);
/* The same semantic fields for idemd's requests and for the SQLite peer. */
void	bench_task(struct bench_task *bt, const char *csid, int variant);
/* A write_task request line for csid (variant 1: other content). */
char	*task_line(const char *csid, int variant, json_int_t id);
/* Keep the first error of each client: the rest usually repeat it. */
void	client_error(struct client *cl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The client's own reproducible random numbers (xorshift64*). */
uint64_t client_random(struct client *cl);
/* Run job with its clients released together; fill r's figures. */
void	run_job(const struct job *job, struct result *r);

/* ---- bench_broker.c: the brokers, what their processes spend -------- */

/* The last 2 KiB of a log (a broker's, Redis's) on stderr. */
void	print_log_tail(const char *path);
#ifdef HAVE_POSTGRESQL
/* A process's own CPU, its reaped children's, and its parent: /proc. */
int	process_times(pid_t pid, double *own, double *reaped, pid_t *ppid);
/* A server's CPU in seconds (the postmaster and its children), or NAN. */
double	server_cpu_s(pid_t master);
#endif
/* CPU, context switches, run and wait time of master and its workers. */
void	proc_sample(pid_t master, struct proc_sample *s);
/* --syscalls: strace -c attached to the sampled processes; its pid, -1. */
pid_t	strace_attach(const struct proc_sample *s, const char *out);
/* strace detached: its total of calls (-1: none), sendto and recvfrom. */
double	strace_total_pg(pid_t pid, const char *out, double *sends,
	    double *recvs);
/* strace detached: its total of calls (-1: none). */
double	strace_total(pid_t pid, const char *out);
/* Start idemd on root (host: as --host-id host, on store_uri), ready. */
int	broker_start_as(struct broker *b, const char *root, uint32_t capacity,
	    double *startup_s, const char *host);
/* Start idemd on root on the local store. */
int	broker_start(struct broker *b, const char *root, uint32_t capacity,
	    double *startup_s);
/* SIGTERM and wait for the exit: -1 if it did not exit cleanly. */
int	broker_stop(struct broker *b);
/* One request to the broker at socket: its answer if ok, else NULL. */
json_t	*broker_call(const char *socket, const char *request);
/* The broker's stats counters: 0, or -1. */
int	broker_stats(const char *socket, struct broker_stats *s);
/* Is the submission committed?  Read-only. */
int	broker_committed(const char *socket, const char *csid);
/* Bytes of journal records under root, from a read-only replay. */
double	journal_bytes(const char *root);

/* ---- bench_local.c: the idemd scenarios ----------------------------- */

/* The client's connection to its job's broker (of several: by index). */
int	client_connect(struct client *cl);
void	client_disconnect(struct client *cl);
/* What a reply says: created, reused, conflict or an error (in why). */
enum outcome classify(const char *answer, char *task_id,
	    size_t task_id_size, char *why, size_t why_size);
/* One request of the client's lines, its reply checked. */
int	op_idem(struct client *cl, size_t i);
/* Each scenario's client set-up: its request lines, made untimed. */
int	setup_create(struct client *cl);
int	setup_reuse(struct client *cl);
int	setup_mixed(struct client *cl);
int	setup_storm(struct client *cl);
/* What the broker's processes spent per operation of the timed part. */
void	broker_costs(struct stats_snapshot *ss, struct result *r);
/* Count TASK files (and anything else) in root's inbox. */
int	count_inbox(const char *root, size_t *tasks, size_t *others);
/* One idemd scenario at K clients on a fresh broker: its row. */
void	run_idem_op(const char *name, int clients, size_t total_ops,
	    size_t ids, int (*setup)(struct client *),
	    int (*op)(struct client *, size_t));
/* run_idem_op with op_idem. */
void	run_idem(const char *name, int clients, size_t total_ops, size_t ids,
	    int (*setup)(struct client *));

/* ---- bench_refs.c: the references ----------------------------------- */

void	run_disk(int clients, size_t total_ops);	/* the disk limit */
void	run_floor(int clients, size_t total_ops);	/* the floor */
/* The socket limit: an echo server (json: a reused-sized reply). */
void	run_echo(int clients, size_t total_ops, int json);
/* The SQLite peer: create at K, then retries of those ids. */
void	run_sqlite(int clients, size_t create_ops, size_t retry_ops);
/* One 4 KiB append + fdatasync, next to each K's create run. */
void	run_fsync_probe(int clients);
/* The CPU cost of one retry's fixed steps, one at a time. */
void	run_cost(void);

/* ---- bench_replay.c: replay and history ----------------------------- */

void	run_replay(size_t n);		/* n creations' journal, restarts */
void	run_history(size_t n, int clients);	/* a history of n ids */

/* ---- bench_cluster.c: several brokers on PostgreSQL ----------------- */

/* At each K, interleaved: pgbench, the local store, 1 and 3 brokers. */
void	run_cluster_figures(size_t create_ops, size_t reuse_ops,
	    size_t reuse_ids);

/* ---- bench_effects.c: effects against Redis ------------------------- */

/* At one K: Redis's effects and GETs beside idemd's effects and retries. */
void	run_effects(int clients, size_t effect_ops, size_t reuse_ops,
	    size_t ids);

/* ---- bench_summary.c: the end of a run ------------------------------ */

/* The figures of issue #14, each against its reference of this run. */
void	compute_targets(void);
void	print_table(void);			/* the results table */
void	print_json(void);			/* the same, --json */
/* One line per finished run on stderr, so a long run shows its progress. */
void	report_progress(void);

#endif
