/* SPDX-License-Identifier: ISC */
/*
 * bench_summary.c: the end of a run: the targets of issue #14 against
 * this run's references, the table, the JSON, and the progress lines.
 */
#include "bench.h"

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
void
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

void
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

void
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
void
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
