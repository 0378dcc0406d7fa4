/* SPDX-License-Identifier: ISC */
/*
 * bench_run.c: what every measurement of idem-bench shares: small helpers
 * (clocks, sorting, percentiles, the results table), the tasks the
 * scenarios send, and the client runner (run_job: K client processes
 * released together; the DESIGN in idem-bench.c).
 */
#include "bench.h"

struct result	results[BENCH_MAX_RESULTS];
size_t		result_count;

/* ---- small helpers ----------------------------------------------------- */

uint64_t
now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t
wall_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void *
xcalloc(size_t n, size_t size)
{
	void	*p;

	if ((p = calloc(n, size)) == NULL)
		err(1, "calloc");
	return p;
}

/* The child must not outlive us: a killed bench leaves no brokers. */
void
die_with_parent(int sig)
{
	if (prctl(PR_SET_PDEATHSIG, sig) == -1)
		_exit(127);
	if (getppid() == 1)
		_exit(127);
}

int
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

int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int
cmp_long(const void *a, const void *b)
{
	long	x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least q of them at or below. */
double
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

struct result *
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

/* Notes accumulate, separated by "; ". */
void
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

const struct result *
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

const char	filler[sizeof BENCH_FILLER] = BENCH_FILLER;

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

/* The same semantic fields for idemd's requests and for the SQLite peer. */
void
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

char *
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

/* ---- the client runner ------------------------------------------------- */

/* Keep the first error of each client: the rest usually repeat it. */
void
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

uint64_t
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
void
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
