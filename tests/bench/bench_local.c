/* SPDX-License-Identifier: ISC */
/*
 * bench_local.c: the idemd scenarios on the local store (create, reuse,
 * mixed, storm): their clients, the outcome of each reply, and the
 * broker's costs per operation.
 */
#include "bench.h"

struct storm_verdict	storm;

/* ---- idemd scenarios --------------------------------------------------- */

int
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

void
client_disconnect(struct client *cl)
{
	idem_close(cl->conn);
	cl->conn = NULL;
}

enum outcome
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

int
op_idem(struct client *cl, size_t i)
{
	return idem_request(cl, &cl->reqs[i], i);
}

int
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
int
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
int
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
int
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
void
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
int
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
void
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

void
run_idem(const char *name, int clients, size_t total_ops, size_t ids,
    int (*setup)(struct client *))
{
	run_idem_op(name, clients, total_ops, ids, setup, op_idem);
}
