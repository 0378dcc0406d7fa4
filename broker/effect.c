/* SPDX-License-Identifier: ISC */
/*
 * effect.c: the effect ledger: effect_begin, effect_complete and
 * effect_resolve (SPEC.md, "Effects"), for side effects the caller
 * performs itself.  It never performs anything and never lets time turn
 * an unknown outcome into a new attempt.
 *
 * DESIGN
 *
 * An effect is a slot of the submission table like a task (kind
 * SUBTAB_KIND_EFFECT, key "<effect_kind> 0x1f <client_submission_id>"),
 * recorded in the same journal and checkpoint, claimed the same way.
 * Its states:
 *
 *   (none) --begin--> reserved(attempt N, fence, lease) --complete applied--> committed
 *                        |  \--complete not_applied--> released --begin--> reserved(N+1)
 *                        \--lease expires--> outcome_unknown (derived: no record)
 *   outcome_unknown --resolve applied--> committed (recovered)
 *                   --resolve not_applied--> released
 *                   --resolve unknown--> outcome_unknown (stored)
 *
 * The lease is not the claim.  A claim is held only while a request
 * records a transition (a few milliseconds); the lease is the caller's
 * permission to perform, and lives in the entry: its expiry is wall-clock
 * milliseconds in the journal, so it survives a restart.  Once it has
 * passed without a complete, begin answers outcome_unknown, for ever,
 * until evidence (resolve, or a late complete with the latest fence)
 * settles it.
 *
 * Each transition is one EFFECT record (with the result's bytes when it
 * commits), durable before the reply:
 *
 *   begin      reserve record durable    [after_effect_reserve_durable]
 *   complete   commit or release durable [after_effect_commit_durable]
 *                                        [after_effect_release_durable]
 *   resolve    its record durable        [after_effect_resolve_durable]
 *
 * A committed result's bytes are kept in the journal record, in the
 * index once a checkpoint wrote the entry there, and in the segment's
 * result arena, a ring that caches them (shm/arena.c: arena_put /
 * arena_read; bytes it reused are read from the index); every receipt
 * is built from the entry and those bytes, so it is the same, byte for
 * byte, on every reply.
 *
 * The fence is "<attempt>-<16 hex>": the attempt and a random nonce
 * drawn for each proceed.  Only the latest one issued is accepted.
 * external_key is derived from the key and the request digest, so it is
 * the same for every attempt and after any restart.
 *
 * With --store postgresql://... the effect is a row in PostgreSQL
 * instead of a slot (cluster_effect.c reads it and records each
 * transition as a compare-and-set); the answers and the judges of
 * complete and resolve below serve both stores (effect_record picks
 * the journal or the row).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "digest.h"
#include "log.h"
#include "idemd.h"

static void	effect_begin_acquire(struct pending *);
static void	effect_claim(struct pending *);

static struct effect *
effect_of(struct pending *p)
{
	return p->op;
}

static struct idemd *
idemd_of(struct pending *p)
{
	return p->worker->d;
}

static struct shm_counters *
counters_of(struct pending *p)
{
	return &idemd_of(p)->seg.header->counters;
}

static void
fence_format(const struct subtab_entry *e, char out[IDEM_EFFECT_FENCE_SIZE])
{
	snprintf(out, IDEM_EFFECT_FENCE_SIZE, "%" PRIu32 "-%016" PRIx64,
	    e->attempt, e->fence);
}

/* ---- Replies ------------------------------------------------------------ */

/* "idem-" and 32 hex digits of SHA-256(key, NUL, request digest). */
static void
external_key(const char *key, size_t key_length,
    const uint8_t digest[IDEM_SHA256_BYTES],
    char out[IDEM_EFFECT_EXTERNAL_KEY_SIZE])
{
	uint8_t	buf[SUBTAB_MAX_KEY_BYTES + 1 + IDEM_SHA256_BYTES];
	uint8_t	sum[IDEM_SHA256_BYTES];
	char	hex[IDEM_DIGEST_HEX_SIZE];

	memcpy(buf, key, key_length);
	buf[key_length] = '\0';
	memcpy(buf + key_length + 1, digest, IDEM_SHA256_BYTES);
	digest_sha256(buf, key_length + 1 + IDEM_SHA256_BYTES, sum);
	digest_to_hex(sum, hex);
	snprintf(out, IDEM_EFFECT_EXTERNAL_KEY_SIZE, "idem-%.32s", hex);
}

/* Split an effect's key into kind and id (NUL-terminated copies). */
int
effect_key_split(const char *key, size_t key_length, char *kind,
    size_t kind_size, char *id, size_t id_size)
{
	const char	*sep = memchr(key, SUBTAB_EFFECT_SEPARATOR, key_length);

	if (sep == NULL)
		return -1;
	snprintf(kind, kind_size, "%.*s", (int)(sep - key), key);
	snprintf(id, id_size, "%.*s", (int)(key_length - (size_t)(sep - key) -
	    1), sep + 1);
	return 0;
}

int
effect_lease_live(const struct subtab_entry *e, int64_t now)
{
	return e->state == SUBTAB_RESERVED && now < e->lease_expires_ms;
}

const char *
effect_state_name(const struct subtab_entry *e, int64_t now)
{
	if (e->state == SUBTAB_RESERVED && !effect_lease_live(e, now))
		return "outcome_unknown";
	return subtab_state_name(e->state);
}

/*
 * The committed result of e (a table entry) into buf: from the arena,
 * or, once the arena has reused their space, from the index (the arena
 * gives up only bytes of an entry durable there).  NULL if neither
 * holds them; *pruned when the index keeps only a tombstone (compact).
 */
static const uint8_t *
effect_result_bytes(struct idemd *d, const char *key, size_t key_length,
    const struct subtab_entry *e, uint8_t *buf, int *pruned)
{
	struct index_entry		 found;
	const struct subtab_entry	*x = &found.record.entry;

	*pruned = 0;
	if (arena_read(&d->seg, e->result_offset, e->result_length, buf) == 0)
		return buf;
	if (history_find(d, key, key_length, &found, buf) != 1 ||
	    x->kind != SUBTAB_KIND_EFFECT || x->state != SUBTAB_COMMITTED ||
	    memcmp(x->request_digest, e->request_digest,
	    IDEM_SHA256_BYTES) != 0 || memcmp(x->file_digest, e->file_digest,
	    IDEM_SHA256_BYTES) != 0)
		return NULL;
	if (found.form == INDEX_TOMBSTONE) {
		*pruned = 1;
		return buf;
	}
	if (x->result_length != e->result_length ||
	    (e->result_length > 0 && found.record.result != buf))
		return NULL;
	return buf;
}

json_t *
effect_receipt_json(struct idemd *d, const char *key, size_t key_length,
    const struct subtab_entry *e, int *pruned)
{
	/* The event loop's thread only (as history_find's scratch). */
	static uint8_t	 buf[IDEM_MAX_EFFECT_RESULT_BYTES];
	const uint8_t	*bytes;

	if (e->result_length > sizeof buf)
		return NULL;
	bytes = effect_result_bytes(d, key, key_length, e, buf, pruned);
	if (bytes == NULL)
		return NULL;
	return effect_receipt_json_from(key, key_length, e, bytes, *pruned);
}

/*
 * The receipt from an entry and its result's bytes, wherever they are
 * (the arena, or the index).  A tombstone (pruned) has no result: its
 * digest stands in its place.
 */
json_t *
effect_receipt_json_from(const char *key, size_t key_length,
    const struct subtab_entry *e, const uint8_t *bytes, int pruned)
{
	char		 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char		 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	char		 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	json_t		*r, *result = NULL;

	if (effect_key_split(key, key_length, kind, sizeof kind, id,
	    sizeof id) != 0)
		return NULL;
	if (!pruned && (result = json_loadb((const char *)bytes,
	    e->result_length, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL)) == NULL)
		return NULL;
	r = json_object();
	json_object_set_new(r, "client_submission_id", json_string(id));
	json_object_set_new(r, "effect_kind", json_string(kind));
	json_object_set_new(r, "digest_schema",
	    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
	digest_to_hex(e->request_digest, hex);
	json_object_set_new(r, "request_digest", json_string(hex));
	external_key(key, key_length, e->request_digest, xkey);
	json_object_set_new(r, "external_key", json_string(xkey));
	json_object_set_new(r, "attempt", json_integer(e->attempt));
	if (pruned) {
		digest_to_hex(e->file_digest, hex);
		json_object_set_new(r, "result_digest", json_string(hex));
	} else
		json_object_set_new(r, "result", result);
	json_object_set_new(r, "state", json_string("committed"));
	json_object_set_new(r, "committed_at", reply_time(e->created_at_ms));
	return r;
}

/* The facts of an effect, for conflicts and outcome_unknown. */
static json_t *
existing_json(struct effect *e)
{
	const struct subtab_entry *x = &e->entry;
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	char			 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	json_t			*j = json_object();

	json_object_set_new(j, "client_submission_id", json_string(e->id));
	json_object_set_new(j, "effect_kind", json_string(e->kind));
	json_object_set_new(j, "state",
	    json_string(effect_state_name(x, shm_now_ms())));
	json_object_set_new(j, "digest_schema",
	    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
	digest_to_hex(x->request_digest, hex);
	json_object_set_new(j, "request_digest", json_string(hex));
	json_object_set_new(j, "attempt", json_integer(x->attempt));
	external_key(e->key, e->key_length, x->request_digest, xkey);
	json_object_set_new(j, "external_key", json_string(xkey));
	if (x->state == SUBTAB_RESERVED)
		json_object_set_new(j, "lease_expires_at",
		    reply_time(x->lease_expires_ms));
	return j;
}

static void
effect_release(struct pending *p)
{
	struct effect	*e = effect_of(p);

	if (!e->claimed)
		return;
	e->claimed = 0;
	if (subtab_release(&idemd_of(p)->seg, e->slot, &e->claim))
		worker_wake_all(p->worker);
}

void
effect_fail(struct pending *p, json_t *reply)
{
	effect_release(p);
	atomic_fetch_add(&counters_of(p)->errors, 1);
	pending_reply(p, reply);
}

static int
effect_journal_failed(struct pending *p)
{
	if (!p->journal_failed)
		return 0;
	effect_fail(p, reply_error_simple(p->id, WIRE_STORAGE_UNAVAILABLE, 1,
	    "the journal could not be made durable"));
	return 1;
}

/* A refusal with a disposition: conflict, in_progress, outcome_unknown. */
void
effect_refuse(struct pending *p, enum wire_disposition disposition,
    enum wire_error code, enum wire_reason reason, int retryable,
    const char *message, int existing)
{
	struct effect	*e = effect_of(p);
	json_t		*reply, *error;

	effect_release(p);
	if (code == WIRE_CONFLICT)
		atomic_fetch_add(&counters_of(p)->conflict, 1);
	if (reason == REASON_STALE_FENCE)
		atomic_fetch_add(&counters_of(p)->effects_stale_fence, 1);
	reply = reply_new(0, p->id);
	json_object_set_new(reply, "disposition",
	    json_string(wire_disposition_name(disposition)));
	json_object_set_new(reply, "action_taken", json_false());
	error = json_object();
	json_object_set_new(error, "code", json_string(wire_error_name(code)));
	if (reason != REASON_NONE)
		json_object_set_new(error, "reason",
		    json_string(wire_reason_name(reason)));
	json_object_set_new(error, "message", json_string(message));
	json_object_set_new(error, "retryable", json_boolean(retryable));
	json_object_set_new(reply, "error", error);
	json_object_set_new(reply, "existing", existing ? existing_json(e) :
	    json_null());
	pending_reply(p, reply);
}

static void
effect_conflict(struct pending *p, enum wire_reason reason,
    const char *message)
{
	effect_refuse(p, DISPOSITION_CONFLICT, WIRE_CONFLICT, reason, 0,
	    message, 1);
}

/* ok:true with the committed receipt. */
static void
effect_answer_receipt(struct pending *p, enum wire_disposition disposition,
    int action_taken)
{
	struct effect	*e = effect_of(p);
	json_t		*reply, *receipt;

	effect_release(p);
	receipt = e->cold ? effect_receipt_json_from(e->key, e->key_length,
	    &e->entry, e->cold_result, e->pruned) :
	    effect_receipt_json(idemd_of(p), e->key, e->key_length,
	    &e->entry, &e->pruned);
	if (receipt == NULL) {
		log_warnx("effect %s: its committed result is unreadable",
		    e->id);
		atomic_fetch_add(&counters_of(p)->errors, 1);
		pending_reply(p, reply_error_simple(p->id, WIRE_INTERNAL, 0,
		    "the committed result of this effect is unreadable"));
		return;
	}
	reply = reply_new(1, p->id);
	if (disposition != DISPOSITION_NONE)
		json_object_set_new(reply, "disposition",
		    json_string(wire_disposition_name(disposition)));
	json_object_set_new(reply, "action_taken", json_boolean(action_taken));
	json_object_set_new(reply, "idempotent", json_true());
	if (e->entry.effect_flags & SUBTAB_EFFECT_RECOVERED)
		json_object_set_new(reply, "recovered", json_true());
	if (e->pruned)
		json_object_set_new(reply, "receipt_pruned", json_true());
	json_object_set_new(reply, "state", json_string("committed"));
	json_object_set_new(reply, "receipt", receipt);
	pending_reply(p, reply);
}

/* ok:true for a transition that left no receipt: released, unknown. */
static void
effect_answer_state(struct pending *p, int action_taken)
{
	struct effect	*e = effect_of(p);
	char		 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	json_t		*reply;

	effect_release(p);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "action_taken", json_boolean(action_taken));
	json_object_set_new(reply, "state",
	    json_string(effect_state_name(&e->entry, shm_now_ms())));
	json_object_set_new(reply, "attempt", json_integer(e->entry.attempt));
	external_key(e->key, e->key_length, e->entry.request_digest, xkey);
	json_object_set_new(reply, "external_key", json_string(xkey));
	pending_reply(p, reply);
}

/* ---- Journaling ------------------------------------------------------------ */

/*
 * Record e->entry (claimed slot: appended and set in the table in one
 * step), with the result's bytes when it is committed; park until
 * durable and go on with next.
 */
static void
effect_journal(struct pending *p, pending_resume_fn next)
{
	struct effect		*e = effect_of(p);
	struct journal_record	 record;

	memset(&record, 0, sizeof record);
	record.type = JOURNAL_RECORD_EFFECT;
	record.entry = e->entry;
	record.entry.key_length = (uint16_t)e->key_length;
	memcpy(record.key, e->key, e->key_length);
	/* Only a commit has a result: the request's own bytes. */
	if (e->entry.result_length > 0 && e->has_result &&
	    e->result_length == e->entry.result_length)
		record.result = (const uint8_t *)e->result;
	else if (e->entry.result_length > 0 && (e->cold_result != NULL ||
	    (e->cold_result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES)) != NULL) &&
	    arena_read(&idemd_of(p)->seg, e->entry.result_offset,
	    e->entry.result_length, e->cold_result) == 0)
		record.result = e->cold_result;
	e->journaled = 1;
	pending_journal_slot(p, &record, e->slot, &e->claim, &e->entry, next);
}

/*
 * The found state may rest on a record not durable yet (its claimer
 * died before the flush), or lost with a failed journal: wait, and
 * answer storage_unavailable rather than from a lost state.
 */
static void
effect_after_durable(struct pending *p, pending_resume_fn next)
{
	struct effect		*e = effect_of(p);
	struct shm_header	*h = idemd_of(p)->seg.header;
	int			 durable;

	durable = e->found_end == SUBTAB_NOT_JOURNALED ? 1 :
	    handoff_is_durable(h, e->found_end, e->found_epoch);
	if (durable == 0) {
		pending_wait_durable(p, e->found_end, e->found_epoch, next);
		return;
	}
	p->journal_failed = durable < 0;
	next(p);
}

/* Is the journal failed (an odd epoch: writes wait for its reopen)? */
static int
effect_journal_down(struct pending *p)
{
	return (handoff_epoch(idemd_of(p)->seg.header) & 1) != 0;
}

static void
effect_fail_reopening(struct pending *p)
{
	effect_fail(p, reply_error_simple(p->id, WIRE_STORAGE_UNAVAILABLE, 1,
	    "the journal failed; writes resume when the broker has reopened "
	    "and verified it"));
}

/*
 * While the journal is failed only a begin that needs no new record goes
 * on: a committed effect (reused) or another request (conflict).  Any
 * other would insert or claim a slot whose record would be dropped.
 */
static int
effect_begin_needs_journal(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct subtab_entry	 known;
	struct index_entry	 old;

	if (subtab_lookup(&idemd_of(p)->seg, e->key, e->key_length, &known,
	    NULL) != 1) {
		/* Only in the index: committed, answered without a record. */
		if (history_find(idemd_of(p), e->key, e->key_length, &old,
		    NULL) != 1)
			return 1;
		known = old.record.entry;
	}
	if (known.schema != e->entry.schema || memcmp(known.request_digest,
	    e->entry.request_digest, IDEM_SHA256_BYTES) != 0)
		return 0;
	return known.state != SUBTAB_COMMITTED;
}

/* ---- effect_begin ------------------------------------------------------------ */

/* A new attempt: the next number, a fresh fence, a lease from now. */
static void
effect_new_attempt(struct effect *e, uint32_t attempt)
{
	int64_t	now = shm_now_ms();

	e->entry.state = SUBTAB_RESERVED;
	e->entry.attempt = attempt;
	randombytes_buf(&e->entry.fence, sizeof e->entry.fence);
	e->entry.lease_expires_ms = now + e->lease_ms;
	e->entry.updated_at_ms = now;
}

void
effect_proceed(struct pending *p)
{
	struct effect	*e = effect_of(p);
	char		 fence[IDEM_EFFECT_FENCE_SIZE];
	char		 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	json_t		*reply;

	if (effect_journal_failed(p))
		return;
	crash_point(CRASH_AFTER_EFFECT_RESERVE_DURABLE);
	effect_release(p);
	atomic_fetch_add(&counters_of(p)->effects_proceed, 1);
	fence_format(&e->entry, fence);
	external_key(e->key, e->key_length, e->entry.request_digest, xkey);
	digest_to_hex(e->entry.request_digest, hex);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "disposition", json_string(
	    wire_disposition_name(DISPOSITION_PROCEED)));
	json_object_set_new(reply, "idempotent", json_true());
	json_object_set_new(reply, "client_submission_id", json_string(e->id));
	json_object_set_new(reply, "effect_kind", json_string(e->kind));
	json_object_set_new(reply, "attempt", json_integer(e->entry.attempt));
	json_object_set_new(reply, "fence", json_string(fence));
	json_object_set_new(reply, "external_key", json_string(xkey));
	json_object_set_new(reply, "digest_schema",
	    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
	json_object_set_new(reply, "request_digest", json_string(hex));
	json_object_set_new(reply, "lease_ms", json_integer(e->lease_ms));
	json_object_set_new(reply, "lease_expires_at",
	    reply_time(e->entry.lease_expires_ms));
	pending_reply(p, reply);
}

void
effect_outcome_unknown(struct pending *p)
{
	if (effect_journal_failed(p))
		return;
	atomic_fetch_add(&counters_of(p)->effects_outcome_unknown, 1);
	effect_refuse(p, DISPOSITION_OUTCOME_UNKNOWN, WIRE_OUTCOME_UNKNOWN,
	    REASON_NONE, 0, "a lease lapsed without effect_complete: the "
	    "effect may or may not have happened; settle it with "
	    "effect_resolve", 1);
}

void
effect_reused(struct pending *p)
{
	if (effect_journal_failed(p))
		return;
	atomic_fetch_add(&counters_of(p)->effects_reused, 1);
	effect_answer_receipt(p, DISPOSITION_REUSED, 0);
}

void
effect_mismatch(struct pending *p)
{
	struct effect	*e = effect_of(p);

	if (effect_journal_failed(p))
		return;
	if (e->entry.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1)
		effect_conflict(p, REASON_SCHEMA_MISMATCH, "the key is bound "
		    "to another digest schema");
	else
		effect_conflict(p, REASON_DIGEST_MISMATCH, "the key is bound "
		    "to a request with another digest; nothing to perform");
}

void
effect_in_progress(struct pending *p)
{
	atomic_fetch_add(&counters_of(p)->effects_in_progress, 1);
	effect_refuse(p, DISPOSITION_IN_PROGRESS, WIRE_IN_PROGRESS, REASON_NONE,
	    1, "another caller holds a live lease on this effect", 1);
}

/*
 * Reserve attempt (claimed slot): record it, and proceed once durable.
 * With the journal failed nothing new is recorded: the slot stays as it
 * was (a fresh one unjournaled, which the next begin takes over).
 */
static void
effect_reserve(struct pending *p, uint32_t attempt)
{
	if (effect_journal_down(p)) {
		effect_fail_reopening(p);
		return;
	}
	effect_new_attempt(effect_of(p), attempt);
	effect_journal(p, effect_proceed);
}

/*
 * The start of every look at the table for this effect (begin, complete,
 * resolve): -1 after the in_progress answer once the wait for another
 * request on the key ran out, else 0 with a filled for the key and claim.
 */
static int
effect_acquire_start(struct pending *p, struct subtab_acquire *a)
{
	struct effect	*e = effect_of(p);
	struct idemd	*d = idemd_of(p);

	if (p->timed_out) {
		effect_fail(p, reply_error_simple(p->id, WIRE_IN_PROGRESS, 1,
		    "another request on this effect is still in flight after "
		    "%d ms", d->inflight_wait_ms));
		return -1;
	}
	memset(a, 0, sizeof *a);
	a->key = e->key;
	a->key_length = e->key_length;
	a->claim = e->claim;
	/* Before the table is read: see effect_after_durable. */
	e->found_epoch = handoff_epoch(d->seg.header);
	return 0;
}

/*
 * The table does not hold the key: look in the index.  0: not there
 * (acquire again, now allowed to insert), 1: committed, in e->entry
 * and e->cold_result; -1: answered (the index failed).
 */
static int
effect_from_index(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct idemd		*d = idemd_of(p);
	struct index_entry	 found;

	e->evictions = atomic_load(&d->seg.header->evictions);
	if (e->cold_result == NULL &&
	    (e->cold_result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES)) == NULL) {
		effect_fail(p, reply_error_simple(p->id, WIRE_INTERNAL, 1,
		    "out of memory"));
		return -1;
	}
	switch (history_find(d, e->key, e->key_length, &found,
	    e->cold_result)) {
	case 0:
		e->index_checked = 1;
		return 0;
	case 1:
		e->cold = 1;
		e->pruned = found.form == INDEX_TOMBSTONE;
		e->entry = found.record.entry;
		e->found_end = 0;	/* durable */
		return 1;
	default:
		effect_fail(p, reply_error_simple(p->id, WIRE_STORAGE_UNAVAILABLE,
		    1, "the index of committed receipts could not be read"));
		return -1;
	}
}

static void
effect_begin_acquire(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_acquire	 a;

	if (effect_acquire_start(p, &a) != 0)
		return;
	a.want = e->entry;
	a.index_checked = e->index_checked;
	a.evictions = e->evictions;
	if ((e->found_epoch & 1) && effect_begin_needs_journal(p)) {
		effect_fail_reopening(p);
		return;
	}
	switch (subtab_acquire(&d->seg, &a)) {
	case SUBTAB_INSERTED:
		e->claimed = 1;
		e->slot = a.slot;
		e->entry = a.found;
		effect_reserve(p, 1);
		return;
	case SUBTAB_CLAIMED:
		e->claimed = 1;
		e->slot = a.slot;
		e->entry = a.found;
		e->found_end = a.found_journal_end;
		switch (e->entry.state) {
		case SUBTAB_RESERVED:
			if (a.found_journal_end == SUBTAB_NOT_JOURNALED) {
				/*
				 * Never durable, so never answered: take it
				 * (a fresh slot has no attempt yet).
				 */
				effect_reserve(p, e->entry.attempt > 0 ?
				    e->entry.attempt : 1);
			} else if (effect_lease_live(&e->entry, shm_now_ms()))
				effect_in_progress(p);
			else {
				effect_release(p);
				effect_after_durable(p, effect_outcome_unknown);
			}
			return;
		case SUBTAB_RELEASED:
			effect_reserve(p, e->entry.attempt + 1);
			return;
		default:	/* OUTCOME_UNKNOWN */
			effect_release(p);
			effect_after_durable(p, effect_outcome_unknown);
			return;
		}
	case SUBTAB_DONE:
		e->entry = a.found;
		e->found_end = a.found_journal_end;
		effect_after_durable(p, effect_reused);
		return;
	case SUBTAB_MISMATCH:
		e->entry = a.found;
		e->found_end = a.found_journal_end;
		effect_after_durable(p, effect_mismatch);
		return;
	case SUBTAB_BUSY:
		pending_wait_claim(p, effect_begin_acquire);
		return;
	case SUBTAB_NOT_HERE:
		switch (effect_from_index(p)) {
		case 0:
			effect_begin_acquire(p);
			return;
		case 1:
			if (e->entry.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1 ||
			    memcmp(e->entry.request_digest, e->digest,
			    IDEM_SHA256_BYTES) != 0)
				effect_mismatch(p);
			else
				effect_reused(p);
			return;
		}
		return;
	case SUBTAB_FULL:
		journaler_kick(d->kick_fd);
		effect_fail(p, reply_table_full(p->id, a.full, d->capacity,
		    a.key_length));
		return;
	case SUBTAB_ALLOC_FAILED:
		effect_fail(p, reply_error_simple(p->id, WIRE_INTERNAL, 1,
		    "the submission table is unusable"));
		return;
	}
}

/* ---- effect_complete and effect_resolve ------------------------------------ */

static int
result_matches(struct pending *p)
{
	struct effect	*e = effect_of(p);
	const uint8_t	*bytes;

	uint8_t		 digest[IDEM_SHA256_BYTES];

	/*
	 * An absent result is null (SPEC.md): result_field serialized it
	 * so, and it matches only a receipt committed with null.
	 */
	if (e->pruned) {
		/* Only the digest is kept: the same bytes digest the same. */
		digest_sha256(e->result, e->result_length, digest);
		return memcmp(digest, e->entry.file_digest, sizeof digest) == 0;
	}
	if (e->entry.result_length != e->result_length)
		return 0;
	if (e->cold)
		bytes = e->cold_result;
	else if (e->cold_result == NULL &&
	    (e->cold_result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES)) == NULL)
		bytes = NULL;
	else if (arena_read(&idemd_of(p)->seg, e->entry.result_offset,
	    e->entry.result_length, e->cold_result) == 0)
		bytes = e->cold_result;
	else
		bytes = NULL;
	if (bytes != NULL)
		return memcmp(bytes, e->result, e->result_length) == 0;
	/* No longer in the arena: the digest of the same bytes is equal. */
	digest_sha256(e->result, e->result_length, digest);
	return memcmp(digest, e->entry.file_digest, sizeof digest) == 0;
}

void
effect_settled(struct pending *p)
{
	struct effect	*e = effect_of(p);

	if (effect_journal_failed(p))
		return;
	if (e->op == EFFECT_RESOLVE) {
		crash_point(CRASH_AFTER_EFFECT_RESOLVE_DURABLE);
		atomic_fetch_add(&counters_of(p)->effects_resolved, 1);
	} else if (e->entry.state == SUBTAB_COMMITTED)
		crash_point(CRASH_AFTER_EFFECT_COMMIT_DURABLE);
	else
		crash_point(CRASH_AFTER_EFFECT_RELEASE_DURABLE);
	if (e->entry.state == SUBTAB_COMMITTED) {
		atomic_fetch_add(&counters_of(p)->effects_committed, 1);
		effect_answer_receipt(p, DISPOSITION_NONE, 1);
		return;
	}
	if (e->entry.state == SUBTAB_RELEASED)
		atomic_fetch_add(&counters_of(p)->effects_released, 1);
	effect_answer_state(p, 1);
}

/*
 * Record the transition the judge set in e->entry: a journal record on
 * the local store, a compare-and-set of the row on the PostgreSQL store
 * (cluster_effect.c); effect_settled answers once it is durable.
 */
static void
effect_record(struct pending *p)
{
	if (idemd_of(p)->store_uri != NULL)
		cluster_effect_record(p);
	else
		effect_journal(p, effect_settled);
}

/* Commit with e->result: into the arena, then the record. */
static void
effect_commit(struct pending *p, int recovered)
{
	struct effect	*e = effect_of(p);
	int64_t		 now = shm_now_ms();

	/* The PostgreSQL store keeps the bytes in the row, not the arena. */
	if (idemd_of(p)->store_uri == NULL && arena_put(&idemd_of(p)->seg,
	    e->slot, e->result, e->result_length,
	    &e->entry.result_offset) != 0) {
		if (errno == ENOSPC) {
			/* The arena asked for a checkpoint: it makes room. */
			journaler_kick(idemd_of(p)->kick_fd);
			effect_fail(p, reply_error_simple(p->id,
			    WIRE_TABLE_FULL, 1, "the result arena holds only "
			    "results not yet in the index or commits in "
			    "flight; retry in a moment (the checkpoint that "
			    "indexes them is under way), or restart idemd "
			    "with a larger --result-bytes"));
			return;
		}
		/*
		 * Never, since the arena holds at least one result of the
		 * largest size (--result-bytes' least); kept for an arena
		 * made smaller than that some other way.
		 */
		log_warnx("effect %s: a result of %zu bytes does not fit the "
		    "result arena; restart idemd with a larger --result-bytes",
		    e->id, e->result_length);
		effect_fail(p, reply_error_simple(p->id, WIRE_TABLE_FULL, 0,
		    "the result arena is too small for this result; restart "
		    "idemd with a larger --result-bytes, then complete again "
		    "with the same fence"));
		return;
	}
	e->entry.result_length = (uint32_t)e->result_length;
	/* Evidence about a reservation that was never proceeded. */
	if (e->entry.attempt == 0)
		e->entry.attempt = 1;
	digest_sha256(e->result, e->result_length, e->entry.file_digest);
	e->entry.state = SUBTAB_COMMITTED;
	e->entry.created_at_ms = now;
	e->entry.updated_at_ms = now;
	if (recovered)
		e->entry.effect_flags |= SUBTAB_EFFECT_RECOVERED;
	effect_record(p);
}

static void
effect_set_state(struct pending *p, enum subtab_state state)
{
	struct effect	*e = effect_of(p);

	e->entry.state = state;
	e->entry.updated_at_ms = shm_now_ms();
	if (e->entry.attempt == 0)
		e->entry.attempt = 1;
	effect_record(p);
}

/*
 * Is the complete's fence the latest one issued?  A tombstone of the
 * index (compact) keeps the attempt but not the fence's random part
 * (index_tombstone_of zeroes it): there the attempt decides, so that a
 * complete retried with the committed attempt's fence is judged by its
 * result's digest (result_matches) as it was before the compaction, and
 * one of an earlier attempt is still stale.  (PostgreSQL's tombstones
 * keep the whole fence.)
 */
static int
fence_latest(const struct effect *e)
{
	const struct subtab_entry *x = &e->entry;

	if (e->fence_attempt != x->attempt)
		return 0;
	if (e->pruned && x->fence == 0)
		return 1;
	return e->fence_nonce == x->fence;
}

/* complete: the slot is claimed and its state durable. */
static void
effect_complete_judge(struct pending *p)
{
	struct effect		*e = effect_of(p);
	const struct subtab_entry *x = &e->entry;

	if (effect_journal_failed(p))
		return;
	if (!fence_latest(e)) {
		effect_conflict(p, REASON_STALE_FENCE, "this fence is not the "
		    "latest one issued for the effect; nothing changed");
		return;
	}
	switch (x->state) {
	case SUBTAB_COMMITTED:
		/* A retry of the complete that committed: same answer. */
		if (e->outcome == OUTCOME_APPLIED && result_matches(p))
			effect_answer_receipt(p, DISPOSITION_NONE, 0);
		else
			effect_conflict(p, REASON_ALREADY_COMMITTED,
			    "the effect is committed with another outcome or "
			    "result");
		return;
	case SUBTAB_RELEASED:
		if (e->outcome == OUTCOME_NOT_APPLIED)
			effect_answer_state(p, 0);
		else
			effect_conflict(p, REASON_NO_RESERVATION,
			    "the reservation was released; begin again");
		return;
	default:	/* reserved (live or lapsed), outcome_unknown */
		if (e->outcome == OUTCOME_APPLIED)
			effect_commit(p, 0);
		else
			effect_set_state(p, SUBTAB_RELEASED);
		return;
	}
}

/* resolve: the slot is claimed and its state durable. */
static void
effect_resolve_judge(struct pending *p)
{
	struct effect		*e = effect_of(p);
	const struct subtab_entry *x = &e->entry;

	if (effect_journal_failed(p))
		return;
	if (e->source[0] != '\0')
		log_info("effect %s (%s): evidence %s from %s", e->id, e->kind,
		    e->outcome == OUTCOME_APPLIED ? "applied" :
		    e->outcome == OUTCOME_NOT_APPLIED ? "not_applied" :
		    "unknown", e->source);
	if (x->state == SUBTAB_COMMITTED) {
		if (e->outcome == OUTCOME_APPLIED && result_matches(p))
			effect_answer_receipt(p, DISPOSITION_NONE, 0);
		else
			effect_conflict(p, REASON_ALREADY_COMMITTED,
			    "the evidence contradicts the committed receipt");
		return;
	}
	if (e->found_end != SUBTAB_NOT_JOURNALED &&
	    effect_lease_live(x, shm_now_ms())) {
		effect_in_progress(p);
		return;
	}
	switch (e->outcome) {
	case OUTCOME_APPLIED:
		effect_commit(p, 1);
		return;
	case OUTCOME_NOT_APPLIED:
		if (x->state == SUBTAB_RELEASED)
			effect_answer_state(p, 0);
		else
			effect_set_state(p, SUBTAB_RELEASED);
		return;
	case OUTCOME_UNKNOWN:
		if (x->state == SUBTAB_OUTCOME_UNKNOWN)
			effect_answer_state(p, 0);
		else
			effect_set_state(p, SUBTAB_OUTCOME_UNKNOWN);
		return;
	}
}

void
effect_judge(struct pending *p)
{
	if (effect_of(p)->op == EFFECT_COMPLETE)
		effect_complete_judge(p);
	else
		effect_resolve_judge(p);
}

/* complete and resolve: claim the key whatever its digest. */
static void
effect_claim(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_acquire	 a;

	if (effect_acquire_start(p, &a) != 0)
		return;
	switch (subtab_claim_key(&d->seg, &a)) {
	case SUBTAB_CLAIMED:
		e->claimed = 1;
		e->slot = a.slot;
		e->entry = a.found;
		e->found_end = a.found_journal_end;
		if (e->entry.kind != SUBTAB_KIND_EFFECT) {
			effect_fail(p, reply_error_simple(p->id, WIRE_INTERNAL,
			    0, "the key names no effect"));
			return;
		}
		effect_after_durable(p, effect_judge);
		return;
	case SUBTAB_BUSY:
		pending_wait_claim(p, effect_claim);
		return;
	case SUBTAB_FULL:	/* no such key in the table */
		switch (effect_from_index(p)) {
		case 0:
			effect_refuse(p, DISPOSITION_CONFLICT, WIRE_CONFLICT,
			    REASON_NO_RESERVATION, 0, "no effect was begun "
			    "under this key", 0);
			return;
		case 1:
			/* Committed: the judges answer without a record. */
			effect_judge(p);
			return;
		}
		return;
	default:
		effect_fail(p, reply_error_simple(p->id, WIRE_INTERNAL, 1,
		    "the submission table is unusable"));
		return;
	}
}

/* ---- The ops --------------------------------------------------------------- */

static void
effect_start(struct conn *conn, json_t *request, json_t *id,
    enum effect_op op)
{
	struct request_error	 err;
	struct effect		*e;
	struct pending		*p;
	struct idemd		*d;

	if ((p = pending_new_op(conn, id, sizeof *e, effect_free)) == NULL)
		return;
	e = p->op;
	e->op = op;
	d = idemd_of(p);
	if (effect_parse(op, request, e, &err) != 0) {
		atomic_fetch_add(&d->seg.header->counters.errors, 1);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	e->entry.kind = SUBTAB_KIND_EFFECT;
	e->entry.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	memcpy(e->entry.request_digest, e->digest, IDEM_SHA256_BYTES);
	if (d->store_uri != NULL) {
		/* Several brokers: the row in PostgreSQL (cluster_effect.c). */
		cluster_effect_start(p);
		return;
	}
	if (op != EFFECT_BEGIN && effect_journal_down(p)) {
		/* A begin of a committed effect needs no write: it goes on. */
		effect_fail_reopening(p);
		return;
	}
	e->entry.reserved_at_ms = shm_now_ms();
	e->entry.updated_at_ms = e->entry.reserved_at_ms;
	conn_peer(conn, &e->entry.peer_uid, &e->entry.peer_pid);
	e->claim.worker = p->worker->index + 1;
	e->claim.generation = p->worker->generation;
	e->claim.token = ++p->worker->next_token;
	if (op == EFFECT_BEGIN)
		effect_begin_acquire(p);
	else
		effect_claim(p);
}

void
op_effect_begin(struct conn *conn, json_t *request, json_t *id)
{
	effect_start(conn, request, id, EFFECT_BEGIN);
}

void
op_effect_complete(struct conn *conn, json_t *request, json_t *id)
{
	effect_start(conn, request, id, EFFECT_COMPLETE);
}

void
op_effect_resolve(struct conn *conn, json_t *request, json_t *id)
{
	effect_start(conn, request, id, EFFECT_RESOLVE);
}

/* ---- Read-only views: get_submission and diagnose ------------------------ */

json_t *
effect_submission_json(struct idemd *d, const char *key,
    size_t key_length, const struct subtab_entry *x, const uint8_t *result,
    int in_flight, int64_t now)
{
	char	 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char	 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char	 hex[IDEM_DIGEST_HEX_SIZE];
	char	 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	json_t	*j, *receipt;
	int64_t	 age = now - x->updated_at_ms;
	int	 pruned;

	if (effect_key_split(key, key_length, kind, sizeof kind, id,
	    sizeof id) != 0)
		return NULL;
	j = json_object();
	json_object_set_new(j, "client_submission_id", json_string(id));
	json_object_set_new(j, "effect_kind", json_string(kind));
	json_object_set_new(j, "state", json_string(effect_state_name(x,
	    now)));
	json_object_set_new(j, "digest_schema",
	    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
	digest_to_hex(x->request_digest, hex);
	json_object_set_new(j, "request_digest", json_string(hex));
	json_object_set_new(j, "attempt", json_integer(x->attempt));
	external_key(key, key_length, x->request_digest, xkey);
	json_object_set_new(j, "external_key", json_string(xkey));
	json_object_set_new(j, "reserved_at", reply_time(x->reserved_at_ms));
	json_object_set_new(j, "updated_at", reply_time(x->updated_at_ms));
	json_object_set_new(j, "age_ms", json_integer(age < 0 ? 0 : age));
	if (x->state == SUBTAB_RESERVED) {
		/* The lease started at the attempt's record (updated_at). */
		json_object_set_new(j, "lease_expires_at",
		    reply_time(x->lease_expires_ms));
		json_object_set_new(j, "lease_age_ms",
		    json_integer(age < 0 ? 0 : age));
		json_object_set_new(j, "lease_live",
		    json_boolean(effect_lease_live(x, now)));
	}
	json_object_set_new(j, "in_flight", json_boolean(in_flight));
	if (x->state == SUBTAB_COMMITTED) {
		if (x->effect_flags & SUBTAB_EFFECT_RECOVERED)
			json_object_set_new(j, "recovered", json_true());
		pruned = 0;
		receipt = result != NULL ? effect_receipt_json_from(key,
		    key_length, x, result, 0) : effect_receipt_json(d, key,
		    key_length, x, &pruned);
		if (pruned)
			json_object_set_new(j, "receipt_pruned", json_true());
		json_object_set_new(j, "receipt", receipt != NULL ? receipt :
		    json_null());
	}
	return j;
}
