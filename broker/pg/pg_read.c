/* SPDX-License-Identifier: ISC */
/*
 * pg_read.c: the PostgreSQL backend's reads, the whole workspace's:
 * get_submission's row, diagnose's unfinished rows, stats' history
 * (backend.h's get, diagnose, history).  The op layer builds the JSON
 * (ops.c, diagnose.c); a failed read is logged here, once, and answered
 * there.
 *
 * DESIGN
 *
 * Off the loop.  Each read is one job on the worker's read thread
 * (pg_pool.c's PG_POOL_READ), as pg_effect.c's effect ops are on their
 * threads: dispatched on the loop (pr_dispatch), its statements run on
 * the thread with libpq's blocking calls, and what they found is given
 * to the op layer's done on the loop (pr_run_done).  Before, they ran
 * on the loop's own connection, so while one waited for the server
 * every other client of the worker waited too (cached retries
 * included), and a paused or slow server held the whole worker.
 *
 * A pool of its own, of one thread (PG_READ_THREADS), not the effect
 * threads: diagnose and stats count the whole workspace (GROUP BY over
 * every row of it, a scan that takes seconds at millions of rows) and
 * diagnose lists every unfinished row; on the effect threads a few of
 * them at once would hold every effect thread, and an effect op, a key
 * lookup and a one-row write, would queue behind counts it has nothing
 * to do with (the reason effect ops do not run on the creations'
 * threads either).  One thread, because it replaces the loop's
 * connection: a broker holds no more connections than it did, and a
 * worker's reads go one at a time, as they did on the loop, while the
 * loop serves everything else (doc/cluster.md, "Reads off the loop").
 *
 * As for the effect ops, the thread touches nothing of the loop's: it
 * reads the request (struct backend_read, filled by the op layer before
 * the call and not touched by the loop while the job runs) and writes
 * only this request's room (struct pg_read): the outcome, get's row
 * (its receipt's bytes malloc'd), diagnose's rows (a heap of the
 * room's, malloc'd).  diagnose's rows become JSON on the loop: the job's
 * done gives each to the op layer's visitor, then the counts to done.
 * A client that closes meanwhile only clears p->conn: the job ends, its
 * done replies to no one (pending_reply) and frees what the room holds.
 * A SIGTERM waits for the job like any running request (the worker
 * drains).  The hold point before_read_statement (pg_points.c) lets a
 * test hold a read there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg.h"
#include "pg_backend.h"

_Static_assert(sizeof ((struct backend_row *)0)->owner >=
    sizeof ((struct pgstore_row *)0)->owner, "backend_row's owner holds pg's");

/* One row diagnose's statements found, kept for the loop. */
struct pg_read_row {
	struct backend_row	 row;		/* key and scope: below */
	char			*key;		/* malloc'd */
	char			*scope;		/* malloc'd */
};

static struct pg_read *
pr_state(struct pending *p)
{
	return ((struct backend_read *)p->op)->backend_state;
}

static struct backend_read *
pr_request(struct pending *p)
{
	return p->op;
}

/*
 * PostgreSQL failed for a read of op (what: its key): logged once, then
 * storage_unavailable (retryable) as the outcome; cause is freed.
 */
static void
pr_unavailable(struct pg_read *pr, const char *op, const char *what,
    char *cause)
{
	const char	*why = cause != NULL ? cause : strerror(errno);

	log_warnx("%s %s: %s", op, what, why);
	pr->out.result = BACKEND_READ_FAILED;
	backend_fail(&pr->out.err, WIRE_STORAGE_UNAVAILABLE, 1, "%s", why);
	free(cause);
}

/*
 * A row as the op layer shows it: the owner's facts with it; an effect
 * (never in flight on this broker's table: in_flight 0) with its
 * receipt's bytes, a task with the owner's liveness and no in_flight.
 */
static void
pg_row(struct backend_row *out, const char *key, size_t key_length,
    const char *scope, const struct pgstore_row *row)
{
	memset(out, 0, sizeof *out);
	out->key = key;
	out->key_length = key_length;
	out->scope = scope;
	out->entry = row->entry;
	out->pruned = row->pruned;
	out->has_owner = 1;
	out->epoch = row->epoch;
	snprintf(out->owner, sizeof out->owner, "%s", row->owner);
	out->lease_ms_left = row->lease_ms_left;
	if (row->entry.kind == SUBTAB_KIND_EFFECT) {
		out->result = (const uint8_t *)row->receipt;
		out->in_flight = 0;
		out->owner_alive = -1;
	} else {
		out->in_flight = -1;
		out->owner_alive = row->owner_alive;
	}
}

/* get, on the thread: the row under the request's key, into the room. */
static void
pr_get(struct pending *p, struct pgstore *st)
{
	struct backend_read	*r = pr_request(p);
	struct pg_read		*pr = pr_state(p);
	struct pgstore_row	 row;
	struct pgstore_key	 k;
	char			 ekind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char			 sid[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char			*cause = NULL;
	int			 rc = -1;

	memset(&row, 0, sizeof row);
	if (r->kind == SUBTAB_KIND_TASK) {
		k.kind = SUBTAB_KIND_TASK;
		k.scope = "";
		k.id = r->key;
		if ((rc = pgstore_read(st, &k, &row, &cause)) < 0) {
			pr_unavailable(pr, "get_submission", r->key, cause);
			return;
		}
	} else {
		sid[0] = ekind[0] = '\0';
		if (effect_key_split(r->key, r->key_length, ekind,
		    sizeof ekind, sid, sizeof sid) == 0) {
			k.kind = SUBTAB_KIND_EFFECT;
			k.scope = ekind;
			k.id = sid;
			rc = pgstore_effect_read(st, &k, &row, &cause);
		}
		if (rc < 0) {
			pr_unavailable(pr, "get_submission", sid, cause);
			return;
		}
	}
	if (rc == 0) {
		pr->out.result = BACKEND_READ_NONE;
		return;
	}
	pg_row(&pr->row, r->key, r->key_length, "", &row);
	/* Its receipt's bytes are the room's now (row.result points there). */
	pr->receipt = (uint8_t *)row.receipt;
	row.receipt = NULL;
	pgstore_row_clear(&row);
	pr->out.result = BACKEND_READ_FOUND;
}

/* One more row kept in the room; 0, or -1 out of memory (pr->oom). */
static int
pr_keep(struct pg_read *pr, const char *key, size_t key_length,
    const char *scope, const struct pgstore_row *found)
{
	struct pg_read_row	*rows, *kept;
	size_t			 size;

	if (pr->count == pr->size) {
		size = pr->size == 0 ? 16 : pr->size * 2;
		if ((rows = reallocarray(pr->rows, size, sizeof *rows)) ==
		    NULL) {
			pr->oom = 1;
			return -1;
		}
		pr->rows = rows;
		pr->size = size;
	}
	kept = &pr->rows[pr->count];
	memset(kept, 0, sizeof *kept);
	if ((kept->key = strndup(key, key_length)) == NULL ||
	    (kept->scope = strdup(scope)) == NULL) {
		free(kept->key);
		pr->oom = 1;
		return -1;
	}
	pr->count++;
	pg_row(&kept->row, kept->key, key_length, kept->scope, found);
	/* Not committed: no result (and found's receipt is not kept). */
	kept->row.result = NULL;
	return 0;
}

static int
pr_diagnose_effect(const char *scope, const char *id,
    const struct pgstore_row *found, void *arg)
{
	char	key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t	n;

	n = (size_t)snprintf(key, sizeof key, "%s%c%s", scope,
	    SUBTAB_EFFECT_SEPARATOR, id);
	if (n >= sizeof key)
		return 0;	/* a row idem did not write */
	return pr_keep(arg, key, n, "", found) != 0;
}

/* One unfinished row, SPEC's facts and who holds it (doc/cluster.md). */
static int
pr_diagnose_task(const char *scope, const char *id,
    const struct pgstore_row *found, void *arg)
{
	return pr_keep(arg, id, strlen(id), scope, found) != 0;
}

/* diagnose, on the thread: the rows and the counts, into the room. */
static void
pr_diagnose(struct pending *p, struct pgstore *st)
{
	struct pg_read	*pr = pr_state(p);
	char		*cause = NULL;

	if (pgstore_effects_unfinished(st, pr_diagnose_effect, pr,
	    &cause) != 0 ||
	    pgstore_counts(st, SUBTAB_KIND_EFFECT, pr->out.effects,
	    &cause) != 0 ||
	    pgstore_unfinished(st, pr_diagnose_task, pr, &cause) != 0 ||
	    pgstore_counts(st, SUBTAB_KIND_TASK, pr->out.tasks, &cause) != 0) {
		if (pr->oom) {
			free(cause);
			log_warnx("diagnose: out of memory for its rows");
			pr->out.result = BACKEND_READ_FAILED;
			backend_fail(&pr->out.err, WIRE_INTERNAL, 1,
			    "out of memory");
			return;
		}
		pr_unavailable(pr, "diagnose", "", cause);
		return;
	}
	pr->out.result = BACKEND_READ_FOUND;
}

/* ---- stats: the workspace's history in PostgreSQL ------------------- */

static void
pr_history(struct pending *p, struct pgstore *st)
{
	struct pg_read		*pr = pr_state(p);
	struct pgstore_history	 h;
	char			*cause = NULL;

	if (pgstore_history_counts(st, &h, &cause) != 0) {
		log_warnx("stats: the store's counts: %s", cause != NULL ?
		    cause : strerror(errno));
		free(cause);
		pr->out.result = BACKEND_READ_FAILED;
		return;
	}
	pr->out.history.submissions = h.submissions;
	pr->out.history.committed = h.committed;
	pr->out.history.in_flight = h.in_flight;
	pr->out.history.tombstones = h.tombstones;
	pr->out.history.effects = h.effects;
	pr->out.result = BACKEND_READ_FOUND;
}

/* ---- the job ---------------------------------------------------------- */

static struct pg_read *
pr_of_job(struct pg_job *job)
{
	return (struct pg_read *)(void *)((char *)job -
	    offsetof(struct pg_read, job));
}

/* On the read thread: its store, then the read's statements. */
static void
pr_run(struct pg_job *job, struct pgstore *st, int *open,
    pthread_cond_t *wake)
{
	struct pg_read	*pr = pr_of_job(job);
	struct pending	*p = pr->p;
	char		*cause = NULL;

	(void)wake;	/* no round of pg_group.c's: nothing waits for it */
	/* Before the read's first statement (fault injection only). */
	pg_pause_point("before_read_statement");
	if (!*open) {
		if (pg_store_init(pr->d, st, &cause) != 0) {
			/* Logged and answered as a failed read of it. */
			if (pr->call == PG_READ_HISTORY) {
				log_warnx("stats: the store's counts: %s",
				    cause != NULL ? cause : strerror(errno));
				free(cause);
				pr->out.result = BACKEND_READ_FAILED;
			} else
				pr_unavailable(pr, pr->call == PG_READ_GET ?
				    "get_submission" : "diagnose",
				    pr->call == PG_READ_GET ?
				    pr_request(p)->key : "", cause);
			return;
		}
		*open = 1;
	}
	switch (pr->call) {
	case PG_READ_GET:
		pr_get(p, st);
		break;
	case PG_READ_DIAGNOSE:
		pr_diagnose(p, st);
		break;
	case PG_READ_HISTORY:
		pr_history(p, st);
		break;
	}
}

/* diagnose's rows, let go. */
static void
pr_rows_free(struct pg_read *pr)
{
	size_t	i;

	for (i = 0; i < pr->count; i++) {
		free(pr->rows[i].key);
		free(pr->rows[i].scope);
	}
	free(pr->rows);
	pr->rows = NULL;
	pr->count = pr->size = 0;
}

/*
 * On the loop: diagnose's rows to the op layer's visitor, then the
 * outcome to its done; what the room holds is freed whether or not
 * anyone is still connected.
 */
static void
pr_run_done(struct pg_job *job)
{
	struct pg_read			*pr = pr_of_job(job);
	struct pending			*p = pr->p;
	struct backend_read		*r = pr_request(p);
	struct backend_read_outcome	 out;
	struct backend_row		 row;
	uint8_t				*receipt;
	size_t				 i;

	if (pr->call == PG_READ_DIAGNOSE &&
	    pr->out.result == BACKEND_READ_FOUND)
		for (i = 0; i < pr->count; i++)
			r->each(&pr->rows[i].row, r->arg);
	pr_rows_free(pr);
	/* done may free p, and the room with it. */
	out = pr->out;
	row = pr->row;
	receipt = pr->receipt;
	pr->receipt = NULL;
	out.row = out.result == BACKEND_READ_FOUND && pr->call ==
	    PG_READ_GET ? &row : NULL;
	r->done(p, &out);
	free(receipt);
}

/*
 * One read as one job on the read thread (pg_pool.c).  Its outcome
 * starts as an internal failure, which every run replaces.
 */
static void
pr_dispatch(struct pending *p, enum pg_read_call call,
    backend_read_done_fn done)
{
	struct pg_read	*pr = pr_state(p);

	pr_request(p)->done = done;
	pr->p = p;
	pr->d = p->worker->d;
	pr->call = call;
	pr->job.run = pr_run;
	pr->job.done = pr_run_done;
	pr->out.result = BACKEND_READ_FAILED;
	backend_fail(&pr->out.err, WIRE_INTERNAL, 1,
	    "a read's statements ended without an outcome");
	if (pg_pool_submit(p->worker->base, PG_POOL_READ, PG_READ_THREADS,
	    &pr->job) != 0) {
		/* Logged by pg_pool_submit; done on the loop, at once. */
		backend_fail(&pr->out.err, WIRE_INTERNAL, 1,
		    "no read thread could be started");
		pr_run_done(&pr->job);
	}
}

void
pg_get(struct pending *p, backend_read_done_fn done)
{
	pr_dispatch(p, PG_READ_GET, done);
}

void
pg_diagnose(struct pending *p, backend_read_done_fn done)
{
	pr_dispatch(p, PG_READ_DIAGNOSE, done);
}

void
pg_history(struct pending *p, backend_read_done_fn done)
{
	pr_dispatch(p, PG_READ_HISTORY, done);
}
