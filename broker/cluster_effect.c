/* SPDX-License-Identifier: ISC */
/*
 * cluster_effect.c: effect_begin, effect_complete and effect_resolve on
 * the PostgreSQL store, where several brokers serve one workspace
 * (doc/cluster.md, "Effects"; SPEC.md, "Effects").
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
 * only the reading and writing of the row.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "pg.h"

/* Reads of one request's row before it gives up (each race lost is one). */
#define CLUSTER_EFFECT_MAX_READS	100

static void	ce_claim(struct pending *);

static struct effect *
ce_of(struct pending *p)
{
	return p->op;
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
	struct effect	*e = ce_of(p);

	log_warnx("effect %s (%s): %s: %s", e->id, e->kind, what,
	    cause != NULL ? cause : strerror(errno));
	effect_fail(p, reply_error_simple(p->id, WIRE_STORAGE_UNAVAILABLE, 1,
	    "%s: %s", what, cause != NULL ? cause : strerror(errno)));
	free(cause);
}

/* Every read lost a race: answered in_progress (retryable). */
static int
ce_too_many_reads(struct pending *p)
{
	if (++ce_of(p)->cluster_reads <= CLUSTER_EFFECT_MAX_READS)
		return 0;
	effect_fail(p, reply_error_simple(p->id, WIRE_IN_PROGRESS, 1,
	    "the effect kept changing under this request on other brokers"));
	return 1;
}

/* The row's facts into e, as effect.c reads them. */
static void
ce_take_row(struct effect *e, struct pgstore_row *row)
{
	e->entry = row->entry;
	e->entry.lease_expires_ms = shm_now_ms() + row->lease_ms_left;
	e->found_state = row->entry.state;
	e->found_end = 0;	/* durable: a COMMIT that returned */
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
		ce_take_row(e, &row);
	return rc;
}

static struct pgstore *
ce_store(struct pending *p)
{
	struct pgstore	*st;
	char		*cause = NULL;

	if ((st = cluster_store(p->worker->d, &cause)) == NULL)
		ce_fail_storage(p, "opening the PostgreSQL store", cause);
	return st;
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

	if ((st = ce_store(p)) == NULL)
		return;
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
			effect_mismatch(p);
			return;
		} else {
			switch (e->entry.state) {
			case SUBTAB_COMMITTED:
				effect_reused(p);
				return;
			case SUBTAB_RESERVED:
				if (effect_lease_live(&e->entry, shm_now_ms()))
					effect_in_progress(p);
				else
					effect_outcome_unknown(p);
				return;
			case SUBTAB_RELEASED:
				break;
			default:	/* OUTCOME_UNKNOWN: evidence only */
				effect_outcome_unknown(p);
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
	ce_take_row(e, &row);
	effect_proceed(p);
}

/* effect_complete and effect_resolve: read, then effect.c's judge. */
static void
ce_claim(struct pending *p)
{
	struct pgstore	*st;
	int		 rc;

	if ((st = ce_store(p)) == NULL || ce_too_many_reads(p) ||
	    (rc = ce_read(p, st)) < 0)
		return;
	if (rc == 0) {
		effect_refuse(p, DISPOSITION_CONFLICT, WIRE_CONFLICT,
		    REASON_NO_RESERVATION, 0, "no effect was begun under this "
		    "key", 0);
		return;
	}
	effect_judge(p);
}

void
cluster_effect_record(struct pending *p)
{
	struct effect			*e = ce_of(p);
	struct pgstore			*st;
	struct pgstore_key		 key;
	struct pgstore_row		 row;
	struct pgstore_effect_change	 c;
	char				 token[PGSTORE_TOKEN_BYTES + 1];
	char				*cause = NULL;
	int				 rc, committed;

	if ((st = ce_store(p)) == NULL)
		return;
	committed = e->entry.state == SUBTAB_COMMITTED;
	snprintf(token, sizeof token, "%016" PRIx64, e->entry.fence);
	memset(&c, 0, sizeof c);
	c.epoch = e->entry.attempt;
	c.token = token;
	c.from_state = e->found_state;
	c.to_state = e->entry.state;
	c.result = committed ? e->result : NULL;
	c.result_digest = committed ? e->entry.file_digest : NULL;
	c.recovered = (e->entry.effect_flags & SUBTAB_EFFECT_RECOVERED) != 0;
	/* Evidence never overrides a live lease (effect_resolve_judge). */
	c.lapsed_only = e->op == EFFECT_RESOLVE;
	ce_key(e, &key);
	memset(&row, 0, sizeof row);
	rc = pgstore_effect_settle(st, &key, &c, &row, &cause);
	if (rc < 0) {
		ce_fail_storage(p, "recording the effect's outcome", cause);
		return;
	}
	if (rc == 0) {
		/* Another broker moved the row first: judge what it left. */
		ce_claim(p);
		return;
	}
	ce_take_row(e, &row);
	effect_settled(p);
}

void
cluster_effect_start(struct pending *p)
{
	if (ce_of(p)->op == EFFECT_BEGIN)
		ce_begin(p);
	else
		ce_claim(p);
}

/* ---- get_submission and diagnose ------------------------------------ */

/* A row's facts for effect_submission_json: the lease on this clock. */
static json_t *
ce_row_json(struct idemd *d, const char *key, size_t key_length,
    struct pgstore_row *row, int64_t now)
{
	json_t	*j;

	row->entry.lease_expires_ms = now + row->lease_ms_left;
	/* A tombstone: never the arena's bytes (an empty result, replaced). */
	j = effect_submission_json(d, key, key_length, &row->entry,
	    row->pruned ? (const uint8_t *)"" : (const uint8_t *)row->receipt,
	    0, now);
	if (j != NULL && row->pruned) {
		/* As the local store shows an index tombstone. */
		json_object_set_new(j, "receipt_pruned", json_true());
		json_object_set_new(j, "receipt", effect_receipt_json_from(key,
		    key_length, &row->entry, NULL, 1));
	}
	if (j != NULL && row->entry.state != SUBTAB_COMMITTED) {
		json_object_set_new(j, "epoch", json_integer(row->epoch));
		json_object_set_new(j, "lease_owner", json_string(row->owner));
		json_object_set_new(j, "lease_ms_left",
		    json_integer(row->lease_ms_left));
	}
	return j;
}

void
cluster_get_effect(struct conn *c, json_t *id, const char *key,
    size_t key_length)
{
	struct idemd		*d = conn_idemd(c);
	struct pgstore		*st;
	struct pgstore_key	 k;
	struct pgstore_row	 row;
	char			 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char			 sid[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char			*cause = NULL;
	json_t			*reply, *s = NULL;
	int			 rc = -1;

	memset(&row, 0, sizeof row);
	sid[0] = kind[0] = '\0';
	if (effect_key_split(key, key_length, kind, sizeof kind, sid,
	    sizeof sid) == 0 && (st = cluster_store(d, &cause)) != NULL) {
		k.kind = SUBTAB_KIND_EFFECT;
		k.scope = kind;
		k.id = sid;
		rc = pgstore_effect_read(st, &k, &row, &cause);
	}
	if (rc < 0) {
		cluster_reply_unavailable(c, id, "get_submission", sid, cause);
		return;
	}
	if (rc == 1)
		s = ce_row_json(d, key, key_length, &row, shm_now_ms());
	pgstore_row_clear(&row);
	reply = reply_new(1, id);
	json_object_set_new(reply, "found", json_boolean(s != NULL));
	if (s != NULL)
		json_object_set_new(reply, "submission", s);
	conn_reply(c, reply);
}

struct ce_diagnose {
	struct idemd	*d;
	json_t		*first, *later;
	int64_t		 now, stale_after_ms;
	uint32_t	 lapsed;
};

static int
ce_diagnose_row(const char *scope, const char *id,
    const struct pgstore_row *found, void *arg)
{
	struct ce_diagnose	*dg = arg;
	struct pgstore_row	 row = *found;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 n;
	json_t			*j;

	n = (size_t)snprintf(key, sizeof key, "%s%c%s", scope,
	    SUBTAB_EFFECT_SEPARATOR, id);
	if (n >= sizeof key)
		return 0;	/* a row idem did not write */
	row.receipt = NULL;	/* not committed: no result */
	j = ce_row_json(dg->d, key, n, &row, dg->now);
	diagnose_effect_place(j, &row.entry, dg->now, dg->stale_after_ms,
	    dg->first, dg->later, &dg->lapsed);
	return 0;
}

int
cluster_effects_diagnose(struct idemd *d, json_t *first, json_t *later,
    json_t **effect_counts, int64_t now, int64_t stale_after_ms, char **cause)
{
	struct ce_diagnose	 dg;
	struct pgstore		*st;
	uint32_t		 counts[SUBTAB_STATE_COUNT];

	if ((st = cluster_store(d, cause)) == NULL)
		return -1;
	memset(&dg, 0, sizeof dg);
	dg.d = d;
	dg.first = first;
	dg.later = later;
	dg.now = now;
	dg.stale_after_ms = stale_after_ms;
	if (pgstore_effects_unfinished(st, ce_diagnose_row, &dg, cause) != 0 ||
	    pgstore_counts(st, SUBTAB_KIND_EFFECT, counts, cause) != 0)
		return -1;
	*effect_counts = diagnose_effect_counts(counts, dg.lapsed);
	return 0;
}
