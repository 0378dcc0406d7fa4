/* SPDX-License-Identifier: ISC */
/*
 * bench_replay.c: the replay scenario (a journal of many creations
 * written, then idemd's cold and warm starts) and the history scenario
 * (the table as a cache of the index, issue 15).
 */
#include "bench.h"

struct replay_verdict	replay;

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

void
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

struct history_figures hist;

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

void
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
