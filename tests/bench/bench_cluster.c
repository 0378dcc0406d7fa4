/* SPDX-License-Identifier: ISC */
/*
 * bench_cluster.c: several brokers on PostgreSQL (issue #16): the private
 * server or --store, pgbench's reference, idemd --store on one workspace
 * with n brokers, and PostgreSQL's own counters per creation.
 */
#include "bench.h"

char	store_uri[512];

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
void
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
void
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
