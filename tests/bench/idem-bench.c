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
 * This file owns the options and main (which scenarios run, in what
 * order); the rest is in files by responsibility, sharing bench.h:
 * bench_run.c (helpers, tasks, the client runner), bench_broker.c (the
 * brokers and what their processes spend), bench_local.c (the idemd
 * scenarios), bench_refs.c (the references), bench_replay.c (replay and
 * history), bench_cluster.c (several brokers on PostgreSQL),
 * bench_effects.c (effects against Redis), bench_summary.c (the
 * targets, the table, the JSON).
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
#include "bench.h"

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

struct options	opt;
char		top[1024];
char		id_prefix[64];
double		load_start[3], load_end[3];

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
		/* At the K the figures are set at, unless one K given. */
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
