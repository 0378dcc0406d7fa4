/* SPDX-License-Identifier: ISC */
/*
 * pg_effect.c: the PostgreSQL backend's effect_begin, effect_claim and
 * effect_record: effect_begin, effect_complete, effect_extend and
 * effect_resolve on the PostgreSQL store, where several brokers serve
 * one workspace (doc/cluster.md, "Effects"; SPEC.md, "Effects").
 *
 * DESIGN
 *
 * An effect is one row (kind 3, its effect_kind the scope).  The lease
 * is the row's lease_expires, the fence its (epoch, owner_token): the
 * attempt is the epoch and the fence "<epoch>-<token>" (effect.c's
 * format), so a fence names one attempt of one row on every broker.
 * Each transition of effect.c's ledger is one statement, a
 * compare-and-set on what this request read:
 *
 *   (none)          --begin--> reserved        INSERT ... ON CONFLICT DO NOTHING
 *   released        --begin--> reserved(N+1)   WHERE epoch, token, state
 *   reserved, unknown --complete/resolve--> committed, released, unknown
 *                                              WHERE epoch, token, state
 *                                              (resolve: and the lease lapsed)
 *   reserved        --extend--> reserved, a later lease_expires
 *                                              WHERE epoch, token, reserved
 *                                              and the lease not lapsed
 *
 * A request whose compare-and-set changes nothing lost a race to
 * another broker: it reads the row again and judges anew, so two
 * brokers racing on one key converge exactly as two workers do on the
 * local store (one proceed; a second complete with the same fence and
 * result gets the same receipt).  Whether a lease is live is the
 * server's judgement (lease_expires against clock_timestamp()); the
 * entry carries it as an expiry on this host's clock (now + what the
 * server said was left), so effect.c's answers and judges apply
 * unchanged: nothing turns outcome_unknown into proceed but evidence.
 *
 * The answers and the judges are effect.c's (the same replies, the same
 * receipt bytes from the row's facts and the result's bytes); here is
 * only the reading and writing of the row, and each ends in one outcome
 * given to the op layer's done function (backend.h).
 *
 * The cache (pg_effect_cache.c): a begin whose key this broker's table
 * holds committed is answered from it, on the loop, with no job; a job
 * whose row is committed and whole gives it to the table before its
 * outcome goes to done.  Nothing else is cached: every other begin, and
 * every complete, extend and resolve, reads the row.
 *
 * Off the loop.  Each backend call (effect_begin, effect_claim,
 * effect_record) is one job on the worker's effect threads (pg_pool.c's
 * PG_POOL_EFFECT: up to --store-connections, each with its own
 * connection, made at the worker's first effect op): its statements
 * wait for the server there, with libpq's blocking calls, while the
 * loop goes on serving every other connection (a cached retry, another
 * effect, a creation's hand-off), and the worker has as many effect ops
 * waiting for their commits at once as it has effect threads, which the
 * server's group commit may then flush together.  A pool of their own,
 * not the creations' threads: a creation holds its thread through file
 * system waits (its fsyncs, its link) and its round's (pg_group.c), and
 * an effect op, which touches no file, must not queue behind those
 * (doc/cluster.md, "Effects").  Past the bound, effect jobs queue in
 * arrival order.  Their statements are key lookups and writes of one
 * row (pg_effects.c); the effect sessions never run a batch
 * (pg_batch.c's planner settings are the creation sessions').
 *
 * As for creations (pg_pool.c's DESIGN): the thread touches nothing of
 * the loop's.  It reads the request (e, filled by the op layer before
 * the call; the loop does not touch it while the job runs, as backend.h
 * says of the caller) and writes only e's row facts and this request's
 * room; what it decided (the outcome, ce->out) is given to done by the
 * job's done callback, on the loop.  A client that closes meanwhile
 * only clears p->conn (worker.c, conn_free): the pending stays until
 * done, which replies to no one (pending_reply), so the row's change
 * is made and nothing is sent to a closed connection.  A connection
 * runs one request at a time and takes its next line only once this
 * one is answered (conn.c), so pipelined ops are answered in order.
 * The judge of complete, extend and resolve runs on the loop between
 * two jobs (claim: FOUND, judged by effect.c, then record); a record
 * whose compare-and-set lost a race reads the row again within its job
 * and gives FOUND back to be judged anew, at most
 * CLUSTER_EFFECT_MAX_READS reads a request.  The crash points of the
 * effect path (after_effect_reserve_durable, ...) are effect.c's, in
 * the done functions on the loop, after the job's COMMIT returned:
 * the same durability points.  A SIGTERM waits for the job like any
 * running request (the worker drains), and a pool stopped while one
 * runs is left to the process's exit (pg_pool_stop).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"

/* Reads of one request's row before it gives up (each race lost is one). */
#define CLUSTER_EFFECT_MAX_READS	100

static void	ce_claim(struct pending *);

static struct effect *
ce_of(struct pending *p)
{
	return p->op;
}

static struct pg_effect *
ce_state(struct pending *p)
{
	return backend_effect_state(p);
}

/*
 * The outcome, for the job's done on the loop (ce_run_done): a thread
 * never calls the op layer.
 */
static void
ce_done(struct pending *p, enum backend_effect_result result)
{
	struct pg_effect	*ce = ce_state(p);

	memset(&ce->out, 0, sizeof ce->out);
	ce->out.result = result;
}

static void
ce_failed(struct pending *p, const struct backend_error *err)
{
	struct pg_effect	*ce = ce_state(p);

	memset(&ce->out, 0, sizeof ce->out);
	ce->out.result = BACKEND_EFFECT_FAILED;
	ce->out.err = *err;
}

static void
ce_key(struct effect *e, struct pgstore_key *key)
{
	key->kind = SUBTAB_KIND_EFFECT;
	key->scope = e->kind;
	key->id = e->id;
}

/* PostgreSQL failed: retryable, logged once here. */
static void
ce_fail_storage(struct pending *p, const char *what, char *cause)
{
	struct effect		*e = ce_of(p);
	struct backend_error	 err;

	log_warnx("effect %s (%s): %s: %s", e->id, e->kind, what,
	    cause != NULL ? cause : strerror(errno));
	backend_fail(&err, WIRE_STORAGE_UNAVAILABLE, 1, "%s: %s", what,
	    cause != NULL ? cause : strerror(errno));
	free(cause);
	ce_failed(p, &err);
}

/* Every read lost a race: answered in_progress (retryable). */
static int
ce_too_many_reads(struct pending *p)
{
	struct backend_error	 err;

	if (++ce_state(p)->cluster_reads <= CLUSTER_EFFECT_MAX_READS)
		return 0;
	backend_fail(&err, WIRE_IN_PROGRESS, 1,
	    "the effect kept changing under this request on other brokers");
	ce_failed(p, &err);
	return 1;
}

/* The row's facts into e, as effect.c reads them. */
static void
ce_take_row(struct pending *p, struct pgstore_row *row)
{
	struct effect	*e = ce_of(p);

	e->entry = row->entry;
	e->entry.lease_expires_ms = shm_now_ms() + row->lease_ms_left;
	ce_state(p)->found_state = row->entry.state;
	/* durable (a COMMIT that returned): never unrecorded */
	e->found_unrecorded = 0;
	free(e->cold_result);
	e->cold_result = (uint8_t *)row->receipt;
	row->receipt = NULL;
	/* A tombstone answers from its facts, as the local index's. */
	e->pruned = row->pruned;
	e->cold = e->cold_result != NULL || e->pruned;
	pgstore_row_clear(row);
}

/* Read the row: 1 taken into e, 0 none, -1 answered. */
static int
ce_read(struct pending *p, struct pgstore *st)
{
	struct effect		*e = ce_of(p);
	struct pgstore_key	 key;
	struct pgstore_row	 row;
	char			*cause = NULL;
	int			 rc;

	ce_key(e, &key);
	memset(&row, 0, sizeof row);
	if ((rc = pgstore_effect_read(st, &key, &row, &cause)) < 0) {
		ce_fail_storage(p, "reading the effect", cause);
		return -1;
	}
	if (rc == 1)
		ce_take_row(p, &row);
	return rc;
}

/* The store of the thread the job runs on. */
static struct pgstore *
ce_store(struct pending *p)
{
	return ce_state(p)->st;
}

/* effect_begin: read, then answer, or reserve with a compare-and-set. */
static void
ce_begin(struct pending *p)
{
	struct effect		*e = ce_of(p);
	struct pgstore		*st;
	struct pgstore_key	 key;
	struct pgstore_row	 row;
	char			*cause = NULL;
	int			 rc;

	st = ce_store(p);
	ce_key(e, &key);
	do {
		if (ce_too_many_reads(p) || (rc = ce_read(p, st)) < 0)
			return;
		memset(&row, 0, sizeof row);
		if (rc == 0)
			rc = pgstore_effect_reserve(st, &key, e->digest,
			    e->lease_ms, &row, &cause);
		else if (e->entry.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1 ||
		    memcmp(e->entry.request_digest, e->digest,
		    IDEM_SHA256_BYTES) != 0) {
			ce_done(p, BACKEND_EFFECT_MISMATCH);
			return;
		} else {
			switch (e->entry.state) {
			case SUBTAB_COMMITTED:
				ce_done(p, BACKEND_EFFECT_REUSED);
				return;
			case SUBTAB_RESERVED:
				if (effect_lease_live(&e->entry, shm_now_ms()))
					ce_done(p, BACKEND_EFFECT_IN_PROGRESS);
				else
					ce_done(p, BACKEND_EFFECT_UNKNOWN);
				return;
			case SUBTAB_RELEASED:
				break;
			default:	/* OUTCOME_UNKNOWN: evidence only */
				ce_done(p, BACKEND_EFFECT_UNKNOWN);
				return;
			}
			snprintf(row.token, sizeof row.token, "%016" PRIx64,
			    e->entry.fence);
			rc = pgstore_effect_rebegin(st, &key, e->entry.attempt,
			    row.token, e->lease_ms, &row, &cause);
		}
		if (rc < 0) {
			ce_fail_storage(p, "reserving the effect", cause);
			return;
		}
	} while (rc == 0);	/* another broker moved the row: read again */
	ce_take_row(p, &row);
	ce_done(p, BACKEND_EFFECT_PROCEED);
}

/* effect_complete and effect_resolve: read, for effect.c's judge. */
static void
ce_claim(struct pending *p)
{
	struct pgstore	*st;
	int		 rc;

	st = ce_store(p);
	if (ce_too_many_reads(p) || (rc = ce_read(p, st)) < 0)
		return;
	ce_done(p, rc == 0 ? BACKEND_EFFECT_NONE : BACKEND_EFFECT_FOUND);
}

/* The judge's transition as a compare-and-set. */
static void
ce_record(struct pending *p)
{
	struct effect			*e = ce_of(p);
	struct pgstore			*st;
	struct pgstore_key		 key;
	struct pgstore_row		 row;
	struct pgstore_effect_change	 c;
	char				 token[PGSTORE_TOKEN_BYTES + 1];
	char				*cause = NULL;
	int				 rc, committed;

	st = ce_store(p);
	committed = e->entry.state == SUBTAB_COMMITTED;
	snprintf(token, sizeof token, "%016" PRIx64, e->entry.fence);
	ce_key(e, &key);
	memset(&row, 0, sizeof row);
	if (e->op == EFFECT_EXTEND)
		/* Judged again by the server's clock in the WHERE. */
		rc = pgstore_effect_extend(st, &key, e->entry.attempt, token,
		    e->lease_ms, &row, &cause);
	else {
		memset(&c, 0, sizeof c);
		c.epoch = e->entry.attempt;
		c.token = token;
		c.from_state = ce_state(p)->found_state;
		c.to_state = e->entry.state;
		c.result = committed ? e->result : NULL;
		c.result_digest = committed ? e->entry.file_digest : NULL;
		c.recovered = (e->entry.effect_flags &
		    SUBTAB_EFFECT_RECOVERED) != 0;
		/* Evidence never overrides a live lease (effect.c's judge). */
		c.lapsed_only = e->op == EFFECT_RESOLVE;
		rc = pgstore_effect_settle(st, &key, &c, &row, &cause);
	}
	if (rc < 0) {
		ce_fail_storage(p, "recording the effect's outcome", cause);
		return;
	}
	if (rc == 0) {
		/*
		 * Another broker moved the row first (or, for an extension,
		 * the lease lapsed by the server's clock): judge what it left.
		 */
		ce_claim(p);
		return;
	}
	ce_take_row(p, &row);
	ce_done(p, BACKEND_EFFECT_SETTLED);
}

static struct pg_effect *
ce_of_job(struct pg_job *job)
{
	return (struct pg_effect *)(void *)((char *)job -
	    offsetof(struct pg_effect, job));
}

/* On a store thread: its store, then the call's statements. */
static void
ce_run(struct pg_job *job, struct pgstore *st, int *open,
    pthread_cond_t *wake)
{
	struct pg_effect	*ce = ce_of_job(job);
	struct pending		*p = ce->p;
	char			*cause = NULL;

	(void)wake;	/* no round of pg_group.c's: nothing waits for it */
	/* Before the call's first statement (fault injection only). */
	pg_pause_point("before_effect_statement");
	if (!*open) {
		if (pg_store_init(ce->d, st, &cause) != 0) {
			ce_fail_storage(p, "opening the PostgreSQL store",
			    cause);
			return;
		}
		*open = 1;
	}
	ce->st = st;
	switch (ce->call) {
	case PG_EFFECT_BEGIN:
		ce_begin(p);
		break;
	case PG_EFFECT_CLAIM:
		ce_claim(p);
		break;
	case PG_EFFECT_RECORD:
		ce_record(p);
		break;
	}
	ce->st = NULL;
}

/* On the loop: what the run decided, to the op layer's done. */
static void
ce_run_done(struct pg_job *job)
{
	struct pg_effect		*ce = ce_of_job(job);
	struct pending			*p = ce->p;
	struct backend_effect_outcome	 out = ce->out;	/* done may free p */

	/* A row found or left committed, whole: cached for the retries. */
	if (out.result == BACKEND_EFFECT_REUSED ||
	    out.result == BACKEND_EFFECT_FOUND ||
	    out.result == BACKEND_EFFECT_SETTLED)
		pg_effect_cache_put(p);
	ce_of(p)->done(p, &out);
}

/*
 * One backend call as one job on a store thread (pg_pool.c).  Its
 * outcome starts as an internal failure, which every run replaces.
 */
static void
ce_dispatch(struct pending *p, enum pg_effect_call call,
    backend_effect_done_fn done)
{
	struct pg_effect	*ce = ce_state(p);
	struct backend_error	 err;

	ce_of(p)->done = done;
	ce->p = p;
	ce->d = p->worker->d;
	ce->call = call;
	ce->job.run = ce_run;
	ce->job.done = ce_run_done;
	backend_fail(&err, WIRE_INTERNAL, 1,
	    "an effect's statements ended without an outcome");
	ce_failed(p, &err);
	if (pg_pool_submit(p->worker->base, PG_POOL_EFFECT,
	    ce->d->store_connections, &ce->job) != 0) {
		/* Logged by pg_pool_submit; done on the loop, at once. */
		backend_fail(&err, WIRE_INTERNAL, 1,
		    "no effect thread could be started");
		ce_failed(p, &err);
		ce_run_done(&ce->job);
	}
}

/* A retry of an effect this broker holds committed needs no round trip. */
void
pg_effect_begin(struct pending *p, backend_effect_done_fn done)
{
	struct backend_effect_outcome	 out;

	if (pg_effect_cache_begin(p, &out)) {
		ce_of(p)->done = done;
		done(p, &out);
		return;
	}
	ce_dispatch(p, PG_EFFECT_BEGIN, done);
}

void
pg_effect_claim(struct pending *p, backend_effect_done_fn done)
{
	ce_dispatch(p, PG_EFFECT_CLAIM, done);
}

void
pg_effect_record(struct pending *p, backend_effect_done_fn done)
{
	ce_dispatch(p, PG_EFFECT_RECORD, done);
}

/* Nothing is held between the statements. */
void
pg_effect_release(struct pending *p)
{
	(void)p;
}
