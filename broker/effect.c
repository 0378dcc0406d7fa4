/* SPDX-License-Identifier: ISC */
/*
 * effect.c: the effect ledger: effect_begin, effect_complete,
 * effect_extend and effect_resolve (SPEC.md, "Effects"), for side
 * effects the caller performs itself.  It never performs anything and
 * never lets time turn an unknown outcome into a new attempt.
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
 * is written from the entry and those bytes by one builder
 * (effect_receipt_text), so it is the same, byte for byte, on every
 * reply and view.  Every ok:true reply here is written as text into the
 * worker's buffer (replytext.c), the bytes jansson's dump of the same
 * tree would be; the refusals are trees, which conn.c logs.
 *
 * effect_extend moves a live lease's expiry to now + lease_ms, for an
 * effect that outlives its lease (a deployment, a payment batch): judged
 * like a complete (the latest fence, then the state; a lease that lapsed
 * is outcome_unknown, not extended), recorded as the same EFFECT record
 * with the new expiry, and answered once the record is in the journal's
 * ring, not once it is durable (SPEC.md allows it: after a crash the
 * last durable expiry, an earlier one, counts, which can only make an
 * outcome unknown sooner).  No crash point: nothing waits on it.
 * Except an extension that moves the end earlier (a lease_ms shorter
 * than the time left): lost in a crash, it would leave the later end it
 * replaced, and the outcome would be unknown later than the holder was
 * told, which SPEC.md's "only sooner" rules out.  Its record is durable
 * before its answer, as a complete's is; with that, every expiry
 * answered before its record is durable is no earlier than the one
 * before it, so whichever record a crash leaves last ends no later
 * than the last answer said.
 *
 * The fence is "<attempt>-<16 hex>": the attempt and a random nonce
 * drawn for each proceed.  Only the latest one issued is accepted.
 * external_key is derived from the key and the request digest, so it is
 * the same for every attempt and after any restart.
 *
 * Where the effect is kept is the backend's (backend.h): the local one
 * (broker/local/local_effect.c) acquires or claims the slot, waits for
 * the records to be durable and keeps the arena; with --store
 * postgresql://... the effect is a row (broker/pg/pg_effect.c reads it
 * and records each transition as a compare-and-set), and a committed
 * one is cached in the table and the arena (pg_effect_cache.c), which
 * answer its begin retries without a round trip.  Each gives its
 * outcome to effect_begun, effect_claimed or effect_recorded; the
 * answers and the judges of complete and resolve below serve both.
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
#include "backend.h"
#include "replytext.h"
#include "jsonbytes.h"

static void	effect_recorded(struct pending *,
		    const struct backend_effect_outcome *);

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

/* "<attempt>-<16 hex>", written by hand: one a proceed. */
_Static_assert(IDEM_EFFECT_FENCE_SIZE >= 10 + 1 + 16 + 1,
    "a fence's room holds a 32-bit attempt, -, 16 hex digits");
static void
fence_format(const struct subtab_entry *e, char out[IDEM_EFFECT_FENCE_SIZE])
{
	static const char	 hex[] = "0123456789abcdef";
	char			 digits[10], *start;
	size_t			 n, i;

	start = jsonbytes_decimal(digits + sizeof digits, e->attempt);
	n = (size_t)(digits + sizeof digits - start);
	memcpy(out, start, n);
	out[n++] = '-';
	for (i = 0; i < 16; i++)
		out[n + i] = hex[(e->fence >> (60 - 4 * i)) & 0xf];
	out[n + 16] = '\0';
}

/* ---- Replies ------------------------------------------------------------ */

/* "idem-" and 32 hex digits of SHA-256(key, NUL, request digest). */
_Static_assert(IDEM_EFFECT_EXTERNAL_KEY_SIZE >= 5 + 32 + 1,
    "an external key's room holds idem- and 32 hex digits");
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
	memcpy(out, "idem-", 5);
	memcpy(out + 5, hex, 32);
	out[5 + 32] = '\0';
}

const char *
effect_state_name(const struct subtab_entry *e, int64_t now)
{
	if (e->state == SUBTAB_RESERVED && !effect_lease_live(e, now))
		return "outcome_unknown";
	return subtab_state_name(e->state);
}

/*
 * Every effect reply written as text is written into the worker's
 * buffer (struct worker's effect_text, replytext.c), the same bytes as
 * jansson's compact, order-preserving dump of the tree of the same
 * members; this starts one: {"ok":true, and the request's id if any.
 */
static struct replytext *
effect_text_start(struct pending *p)
{
	struct replytext	*t = &p->worker->effect_text;

	t->length = 0;
	t->failed = 0;
	replytext_lit(t, "{\"ok\":true,");
	if (p->id != NULL) {
		replytext_lit(t, "\"id\":");
		replytext_value(t, p->id);
		replytext_lit(t, ",");
	}
	return t;
}

static void
text_member_string(struct replytext *t, const char *name, const char *value)
{
	replytext_lit(t, name);
	replytext_string(t, value, strlen(value));
}

static void
text_member_time(struct replytext *t, const char *name, int64_t ms)
{
	char	at[TASKFILE_TIME_BYTES];

	taskfile_format_time(ms, at);
	text_member_string(t, name, at);
}

/*
 * The receipt of a committed effect: the one builder of its members and
 * their order (SPEC.md), for every answer that carries it (committed,
 * reused, resolved, pruned, on either store) and, parsed, for the views
 * (effect_receipt_json_from).  result: its compact JSON as stored
 * (result_field wrote jansson's dump of it, which jansson's dump of its
 * parse writes again, so it is spliced as it is: the same bytes the
 * tree of the parsed result dumped); NULL: a tombstone's, the result's
 * digest in its place.  known_xkey: the effect's external key when
 * the caller has it (the proceed of this attempt computed it), else
 * NULL and it is computed here.  0, or -1: not an effect's key.
 */
static int
effect_receipt_text(struct replytext *t, const char *key, size_t key_length,
    const struct subtab_entry *x, const uint8_t *result,
    const char *known_xkey)
{
	char		 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char		 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	char		 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];

	if (effect_key_split(key, key_length, kind, sizeof kind, id,
	    sizeof id) != 0)
		return -1;
	text_member_string(t, "{\"client_submission_id\":", id);
	text_member_string(t, ",\"effect_kind\":", kind);
	text_member_string(t, ",\"digest_schema\":",
	    IDEM_SCHEMA_GENERIC_JSON_V1);
	digest_to_hex(x->request_digest, hex);
	text_member_string(t, ",\"request_digest\":", hex);
	if (known_xkey == NULL) {
		external_key(key, key_length, x->request_digest, xkey);
		known_xkey = xkey;
	}
	text_member_string(t, ",\"external_key\":", known_xkey);
	replytext_lit(t, ",\"attempt\":");
	replytext_int(t, x->attempt);
	if (result == NULL) {
		digest_to_hex(x->file_digest, hex);
		text_member_string(t, ",\"result_digest\":", hex);
	} else {
		replytext_lit(t, ",\"result\":");
		replytext_raw(t, result, x->result_length);
	}
	replytext_lit(t, ",\"state\":\"committed\"");
	text_member_time(t, ",\"committed_at\":", x->created_at_ms);
	replytext_lit(t, "}");
	return 0;
}

/*
 * The receipt as a tree, for the views that embed it in an object of
 * their own (get_submission, diagnose): effect_receipt_text's bytes
 * parsed, so that there is one builder of its members.  A result that
 * does not parse (unreadable bytes) gives NULL, as before.
 */
json_t *
effect_receipt_json_from(const char *key, size_t key_length,
    const struct subtab_entry *e, const uint8_t *bytes, int pruned)
{
	struct replytext	 t;
	json_t			*receipt = NULL;

	if (!pruned && bytes == NULL)
		return NULL;	/* unreadable, not a tombstone */
	replytext_init(&t);
	if (effect_receipt_text(&t, key, key_length, e, pruned ? NULL :
	    bytes, NULL) == 0 && !t.failed)
		receipt = json_loadb(t.buf, t.length, JSON_ALLOW_NUL, NULL);
	replytext_free(&t);
	return receipt;
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
effect_fail(struct pending *p, json_t *reply)
{
	idemd_of(p)->be->release(p);
	atomic_fetch_add(&counters_of(p)->errors, 1);
	pending_reply(p, reply);
}

/* A refusal with a disposition: conflict, in_progress, outcome_unknown. */
static void
effect_refuse(struct pending *p, enum wire_disposition disposition,
    enum wire_error code, enum wire_reason reason, int retryable,
    const char *message, int existing)
{
	struct effect	*e = effect_of(p);
	json_t		*reply, *error;

	idemd_of(p)->be->release(p);
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

/*
 * The members of a receipt's reply after "ok" and "id", up to
 * "receipt": (its value next): what a stored reply holds before the
 * receipt, too.
 */
static void
receipt_head_text(struct replytext *t, const struct effect *e,
    enum wire_disposition disposition, int action_taken)
{
	if (disposition != DISPOSITION_NONE) {
		text_member_string(t, "\"disposition\":",
		    wire_disposition_name(disposition));
		replytext_lit(t, ",");
	}
	replytext_lit(t, action_taken ? "\"action_taken\":true," :
	    "\"action_taken\":false,");
	replytext_lit(t, "\"idempotent\":true,");
	if (e->entry.effect_flags & SUBTAB_EFFECT_RECOVERED)
		replytext_lit(t, "\"recovered\":true,");
	if (e->pruned)
		replytext_lit(t, "\"receipt_pruned\":true,");
	replytext_lit(t, "\"state\":\"committed\",\"receipt\":");
}

/*
 * The committed result's bytes for p's receipt: the request's own when
 * it committed them (e->result, the bytes the store holds), else where
 * the store keeps them: the row or the index (cold), the arena.  0 (a
 * tombstone: e->pruned, *bytes not used), or -1: unreadable.
 *
 * The bytes go into the reply as they are, unparsed, so bytes idem did
 * not write must not get there: a row of the PostgreSQL store is
 * anyone's to UPDATE, and a result with a newline in it would split the
 * reply and answer the client's next request.  Bytes read cold (the row,
 * the index) are checked against the result's digest, which is what
 * `idemctl verify` checks too; one hash, on the path that already made
 * a round trip or a disk read.  The arena's are the segment's own,
 * written from a checked request (or, on PostgreSQL, from a row checked
 * the same way before it was cached: pg_effect_cache.c) and read under
 * its seqlock.
 */
static int
receipt_result(struct pending *p, int action_taken, const uint8_t **bytes)
{
	struct effect		*e = effect_of(p);
	const struct backend	*be = idemd_of(p)->be;
	uint8_t			 digest[IDEM_SHA256_BYTES];

	if (action_taken && !e->pruned && e->result != NULL &&
	    e->entry.result_length == e->result_length) {
		*bytes = (const uint8_t *)e->result;
		return 0;
	}
	if (e->cold)
		*bytes = e->cold_result;
	else if (be->effect_result == NULL ||
	    be->effect_result(p, bytes, &e->pruned) != 0)
		return -1;
	if (e->pruned)
		return 0;
	/* No result is stored as null: an empty one is damage. */
	if (*bytes == NULL || e->entry.result_length == 0)
		return -1;
	if (e->cold) {
		digest_sha256(*bytes, e->entry.result_length, digest);
		if (memcmp(digest, e->entry.file_digest, sizeof digest) != 0)
			return -1;
	}
	return 0;
}

/* A text reply the worker could not write (no memory): retryable. */
static void
effect_no_memory(struct pending *p, const char *what)
{
	log_warnx("effect %s: no memory for its %s", effect_of(p)->id, what);
	atomic_fetch_add(&counters_of(p)->errors, 1);
	pending_reply(p, reply_error_simple(p->id, WIRE_INTERNAL, 1,
	    "out of memory"));
}

/* t's reply sent, or, if writing it ran out of memory, that said. */
static void
effect_send_text(struct pending *p, struct replytext *t, const char *what)
{
	if (t->failed)
		effect_no_memory(p, what);
	else
		pending_reply_text(p, t->buf, t->length);
}

static void
effect_unreadable(struct pending *p)
{
	log_warnx("effect %s: its committed result is unreadable",
	    effect_of(p)->id);
	atomic_fetch_add(&counters_of(p)->errors, 1);
	pending_reply(p, reply_error_simple(p->id, WIRE_INTERNAL, 0,
	    "the committed result of this effect is unreadable"));
}

/*
 * The hint of the line whose retries get this reply from now on, if
 * it is to be stored (fastpath.c's DESIGN): the commit of an attempt
 * this worker answered proceed to (begun: its begin line's, taken
 * before the receipt was written), or a reuse answered whole from the
 * table's entry (this begin line's).  0: none.
 *
 * The begun entry (hint and external key) is taken from the worker's
 * cache even when nothing is then stored: a receipt of 4 KiB or more,
 * a receipt that proves unreadable, or text that runs out of memory.
 * Nothing is lost: an attempt commits once, so no later commit could
 * have matched that entry; a later complete of it is answered without
 * action_taken, which never looks in the cache, and its retries take
 * the full path.
 */
static int
receipt_stored_for(struct pending *p, int begun,
    enum wire_disposition disposition, size_t receipt_length,
    struct fastpath_hint *hint)
{
	struct effect	*e = effect_of(p);

	/* Only a receipt the store can hold (its 4 KiB, more than enough). */
	if (e->pruned || e->cold || receipt_length >= SHM_RECEIPT_MAX_BYTES)
		return 0;
	if (begun)
		return 1;
	if (disposition != DISPOSITION_REUSED || !e->fast.valid)
		return 0;
	*hint = e->fast;
	return 1;
}

/*
 * ok:true with the committed receipt (committed, reused, resolved,
 * pruned), written as text; and, if a retry's reply is to be stored for
 * the fast path, that reply too (the receipt's bytes copied after its
 * head: the same receipt).
 */
static void
effect_answer_receipt(struct pending *p, enum wire_disposition disposition,
    int action_taken)
{
	struct effect		*e = effect_of(p);
	struct replytext	*t;
	struct fastpath_hint	 hint;
	char			 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	const uint8_t		*bytes = NULL;
	size_t			 receipt_at, reply_end;
	int			 begun = 0;

	idemd_of(p)->be->release(p);
	/* First: reading the bytes may find a tombstone (e->pruned). */
	if (receipt_result(p, action_taken, &bytes) != 0) {
		effect_unreadable(p);
		return;
	}
	/*
	 * The commit of an attempt this worker answered proceed to: that
	 * line's hint, and the external key the proceed computed.
	 */
	if (action_taken && !e->pruned && !e->cold)
		begun = fastpath_effect_begun(&p->worker->fast, e->key,
		    e->key_length, &e->entry, &hint, xkey);
	t = effect_text_start(p);
	receipt_head_text(t, e, disposition, action_taken);
	receipt_at = t->length;
	if (effect_receipt_text(t, e->key, e->key_length, &e->entry,
	    e->pruned ? NULL : bytes, begun ? xkey : NULL) != 0) {
		effect_unreadable(p);
		return;
	}
	replytext_lit(t, "}");
	reply_end = t->length;
	if (t->failed) {
		effect_no_memory(p, "receipt");
		return;
	}
	if (receipt_stored_for(p, begun, disposition,
	    reply_end - receipt_at, &hint)) {
		/* After {"ok":true, as fastpath.c stores them. */
		receipt_head_text(t, e, DISPOSITION_REUSED, 0);
		replytext_copy(t, receipt_at, reply_end - receipt_at);
		if (!t->failed)
			fastpath_remember_effect_text(idemd_of(p), &hint,
			    e->key, e->key_length, &e->entry,
			    t->buf + reply_end, t->length - reply_end);
	}
	pending_reply_text(p, t->buf, reply_end);
}

/* ok:true for a transition that left no receipt: released, unknown. */
static void
effect_answer_state(struct pending *p, int action_taken)
{
	struct effect		*e = effect_of(p);
	char			 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	struct replytext	*t;

	idemd_of(p)->be->release(p);
	external_key(e->key, e->key_length, e->entry.request_digest, xkey);
	t = effect_text_start(p);
	replytext_lit(t, action_taken ? "\"action_taken\":true," :
	    "\"action_taken\":false,");
	text_member_string(t, "\"state\":",
	    effect_state_name(&e->entry, shm_now_ms()));
	replytext_lit(t, ",\"attempt\":");
	replytext_int(t, e->entry.attempt);
	text_member_string(t, ",\"external_key\":", xkey);
	replytext_lit(t, "}");
	effect_send_text(p, t, "answer");
}

/* ---- effect_begin ------------------------------------------------------------ */

static void
effect_proceed(struct pending *p)
{
	struct effect	*e = effect_of(p);
	char		 fence[IDEM_EFFECT_FENCE_SIZE];
	char		 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	char		 hex[IDEM_DIGEST_HEX_SIZE];
	struct replytext *t;

	crash_point(CRASH_AFTER_EFFECT_RESERVE_DURABLE);
	idemd_of(p)->be->release(p);
	atomic_fetch_add(&counters_of(p)->effects_proceed, 1);
	fence_format(&e->entry, fence);
	external_key(e->key, e->key_length, e->entry.request_digest, xkey);
	digest_to_hex(e->entry.request_digest, hex);
	/* A later commit of this attempt stores its retries' reply. */
	fastpath_effect_proceeded(&p->worker->fast, &e->fast, e->key,
	    e->key_length, &e->entry, xkey);
	t = effect_text_start(p);
	text_member_string(t, "\"disposition\":",
	    wire_disposition_name(DISPOSITION_PROCEED));
	replytext_lit(t, ",\"idempotent\":true");
	text_member_string(t, ",\"client_submission_id\":", e->id);
	text_member_string(t, ",\"effect_kind\":", e->kind);
	replytext_lit(t, ",\"attempt\":");
	replytext_int(t, e->entry.attempt);
	text_member_string(t, ",\"fence\":", fence);
	text_member_string(t, ",\"external_key\":", xkey);
	text_member_string(t, ",\"digest_schema\":",
	    IDEM_SCHEMA_GENERIC_JSON_V1);
	text_member_string(t, ",\"request_digest\":", hex);
	replytext_lit(t, ",\"lease_ms\":");
	replytext_int(t, e->lease_ms);
	text_member_time(t, ",\"lease_expires_at\":",
	    e->entry.lease_expires_ms);
	replytext_lit(t, "}");
	effect_send_text(p, t, "proceed");
}

static void
effect_outcome_unknown(struct pending *p)
{
	atomic_fetch_add(&counters_of(p)->effects_outcome_unknown, 1);
	effect_refuse(p, DISPOSITION_OUTCOME_UNKNOWN, WIRE_OUTCOME_UNKNOWN,
	    REASON_NONE, 0, "a lease lapsed without effect_complete: the "
	    "effect may or may not have happened; settle it with "
	    "effect_resolve", 1);
}

static void
effect_reused(struct pending *p)
{
	atomic_fetch_add(&counters_of(p)->effects_reused, 1);
	effect_answer_receipt(p, DISPOSITION_REUSED, 0);
}

static void
effect_mismatch(struct pending *p)
{
	struct effect	*e = effect_of(p);

	if (e->entry.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1)
		effect_conflict(p, REASON_SCHEMA_MISMATCH, "the key is bound "
		    "to another digest schema");
	else
		effect_conflict(p, REASON_DIGEST_MISMATCH, "the key is bound "
		    "to a request with another digest; nothing to perform");
}

static void
effect_in_progress(struct pending *p)
{
	atomic_fetch_add(&counters_of(p)->effects_in_progress, 1);
	effect_refuse(p, DISPOSITION_IN_PROGRESS, WIRE_IN_PROGRESS, REASON_NONE,
	    1, "another caller holds a live lease on this effect", 1);
}

/* ---- effect_complete and effect_resolve ------------------------------------ */

static int
result_matches(struct pending *p)
{
	struct effect	*e = effect_of(p);
	const struct backend *be = idemd_of(p)->be;
	const uint8_t	*bytes;
	int		 pruned;
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
	else if (be->effect_result == NULL ||
	    be->effect_result(p, &bytes, &pruned) != 0 || pruned)
		bytes = NULL;
	if (bytes != NULL)
		return memcmp(bytes, e->result, e->result_length) == 0;
	/* Unreadable, or a tombstone: the digest of the same bytes is equal. */
	digest_sha256(e->result, e->result_length, digest);
	return memcmp(digest, e->entry.file_digest, sizeof digest) == 0;
}

/* effect_extend's answer: the lease's new end (SPEC.md's reply). */
static void
effect_extended(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct replytext	*t;

	idemd_of(p)->be->release(p);
	atomic_fetch_add(&counters_of(p)->effects_extended, 1);
	t = effect_text_start(p);
	text_member_time(t, "\"lease_expires_at\":",
	    e->entry.lease_expires_ms);
	replytext_lit(t, "}");
	effect_send_text(p, t, "extension");
}

static void
effect_settled(struct pending *p)
{
	struct effect	*e = effect_of(p);

	if (e->op == EFFECT_EXTEND) {
		effect_extended(p);
		return;
	}
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
 * (the backend's effect_record); effect_settled answers once it is
 * durable (effect_recorded).
 */
static void
effect_record(struct pending *p)
{
	idemd_of(p)->be->effect_record(p, effect_recorded);
}

/*
 * Commit with e->result: the record (the local backend puts the bytes
 * into the arena first; PostgreSQL keeps them in the row).
 */
static void
effect_commit(struct pending *p, int recovered)
{
	struct effect	*e = effect_of(p);
	int64_t		 now = shm_now_ms();

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

/* A holder's op (complete, extend) with a fence not the latest: 1, answered. */
static int
effect_stale_fence(struct pending *p)
{
	if (fence_latest(effect_of(p)))
		return 0;
	effect_conflict(p, REASON_STALE_FENCE, "this fence is not the latest "
	    "one issued for the effect; nothing changed");
	return 1;
}

/* complete: the slot is claimed and its state durable. */
static void
effect_complete_judge(struct pending *p)
{
	struct effect		*e = effect_of(p);
	const struct subtab_entry *x = &e->entry;

	if (effect_stale_fence(p))
		return;
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

/*
 * extend: the slot is claimed and its state durable (on the local store
 * a previous extension's record may still be on its way: the claim
 * waited for it).  The order is complete's: a stale fence first, then
 * what the state allows.
 */
static void
effect_extend_judge(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct subtab_entry	*x = &e->entry;
	int64_t			 now = shm_now_ms();

	if (effect_stale_fence(p))
		return;
	switch (x->state) {
	case SUBTAB_COMMITTED:
		effect_conflict(p, REASON_ALREADY_COMMITTED, "the effect is "
		    "committed; there is no lease to extend");
		return;
	case SUBTAB_RELEASED:
		effect_conflict(p, REASON_NO_RESERVATION, "the reservation was "
		    "released; there is no lease to extend");
		return;
	case SUBTAB_RESERVED:
		if (effect_lease_live(x, now))
			break;
		/* FALLTHROUGH */
	default:	/* a lapsed lease, outcome_unknown */
		effect_refuse(p, DISPOSITION_OUTCOME_UNKNOWN,
		    WIRE_OUTCOME_UNKNOWN, REASON_NONE, 0, "the lease lapsed "
		    "before this extension: not extended, and another caller "
		    "may have been told the outcome is unknown; complete with "
		    "this fence (accepted) or settle it with effect_resolve",
		    1);
		return;
	}
	/*
	 * The attempt and the fence stay: the record is the reservation's
	 * with a new lease, granted now (updated_at, from which diagnose's
	 * age and stalled count: an extension is a sign of life).  One
	 * that ends the lease earlier than it ended waits to be durable.
	 */
	e->lease_shortened = now + e->lease_ms < x->lease_expires_ms;
	x->lease_expires_ms = now + e->lease_ms;
	x->updated_at_ms = now;
	effect_record(p);
}

/*
 * An operator's evidence with its source, logged once with what became
 * of it: taken, or refused and why (the source, a client's text, last).
 */
static void
effect_log_evidence(struct effect *e, const char *refused)
{
	if (e->source[0] == '\0')
		return;
	log_info("effect %s (%s): %s evidence %s%s%s%s from %s", e->id,
	    e->kind, refused != NULL ? "refused" : "took",
	    e->outcome == OUTCOME_APPLIED ? "applied" :
	    e->outcome == OUTCOME_NOT_APPLIED ? "not_applied" : "unknown",
	    refused != NULL ? " (" : "", refused != NULL ? refused : "",
	    refused != NULL ? ")" : "", e->source);
}

/* resolve: the slot is claimed and its state durable. */
static void
effect_resolve_judge(struct pending *p)
{
	struct effect		*e = effect_of(p);
	const struct subtab_entry *x = &e->entry;

	if (x->state == SUBTAB_COMMITTED) {
		if (e->outcome == OUTCOME_APPLIED && result_matches(p)) {
			effect_log_evidence(e, NULL);
			effect_answer_receipt(p, DISPOSITION_NONE, 0);
		} else {
			effect_log_evidence(e, "it contradicts the committed "
			    "receipt");
			effect_conflict(p, REASON_ALREADY_COMMITTED,
			    "the evidence contradicts the committed receipt");
		}
		return;
	}
	if (!e->found_unrecorded &&
	    effect_lease_live(x, shm_now_ms())) {
		effect_log_evidence(e, "another caller holds a live lease");
		effect_in_progress(p);
		return;
	}
	effect_log_evidence(e, NULL);
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

static void
effect_judge(struct pending *p)
{
	switch (effect_of(p)->op) {
	case EFFECT_COMPLETE:
		effect_complete_judge(p);
		return;
	case EFFECT_EXTEND:
		effect_extend_judge(p);
		return;
	default:
		effect_resolve_judge(p);
		return;
	}
}

/* ---- The backend's outcomes ------------------------------------------------ */

/* What the backend could not do (logged by it), as effect.c replied it. */
static void
effect_failed(struct pending *p, const struct backend_error *err)
{
	struct effect	*e = effect_of(p);
	struct idemd	*d = idemd_of(p);

	if (e->table_full)
		effect_fail(p, reply_table_full(p->id, e->full, d->capacity,
		    e->key_length));
	else
		effect_fail(p, reply_error_simple(p->id, err->code,
		    err->retryable, "%s", err->message));
}

static void
effect_no_reservation(struct pending *p)
{
	effect_refuse(p, DISPOSITION_CONFLICT, WIRE_CONFLICT,
	    REASON_NO_RESERVATION, 0, "no effect was begun under this key", 0);
}

/* effect_begin's outcome: its answer. */
static void
effect_begun(struct pending *p, const struct backend_effect_outcome *out)
{
	switch (out->result) {
	case BACKEND_EFFECT_PROCEED:
		effect_proceed(p);
		return;
	case BACKEND_EFFECT_REUSED:
		effect_reused(p);
		return;
	case BACKEND_EFFECT_MISMATCH:
		effect_mismatch(p);
		return;
	case BACKEND_EFFECT_IN_PROGRESS:
		effect_in_progress(p);
		return;
	case BACKEND_EFFECT_UNKNOWN:
		effect_outcome_unknown(p);
		return;
	default:	/* FAILED */
		effect_failed(p, &out->err);
		return;
	}
}

/*
 * effect_complete's and effect_resolve's read (FOUND: claimed on the
 * local store until an answer releases it or effect_record), or a
 * record's: judged, or answered.
 */
static void
effect_claimed(struct pending *p, const struct backend_effect_outcome *out)
{
	switch (out->result) {
	case BACKEND_EFFECT_FOUND:
		effect_judge(p);
		return;
	case BACKEND_EFFECT_NONE:
		effect_no_reservation(p);
		return;
	case BACKEND_EFFECT_SETTLED:
		effect_settled(p);
		return;
	default:	/* FAILED */
		effect_failed(p, &out->err);
		return;
	}
}

/* A record's outcome; FOUND: another broker moved the row first. */
static void
effect_recorded(struct pending *p, const struct backend_effect_outcome *out)
{
	effect_claimed(p, out);
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
	int			 rc;

	if ((p = pending_new_op(conn, id, BACKEND_EFFECT_OP_SIZE +
	    conn_idemd(conn)->be->effect_state_size, effect_free)) == NULL)
		return;
	e = p->op;
	e->op = op;
	if (op == EFFECT_BEGIN)
		fastpath_hint_take(&p->worker->fast, &e->fast);
	if (op == EFFECT_COMPLETE) {
		e->line = conn_line(conn, &e->line_length);
		e->line_result = conn_line_result(conn,
		    &e->line_result_length);
	}
	d = idemd_of(p);
	rc = effect_parse(op, request, e, &err);
	/* freed once the handler returns */
	e->line = NULL;
	e->line_result = NULL;
	if (rc != 0) {
		atomic_fetch_add(&d->seg.header->counters.errors, 1);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	e->entry.kind = SUBTAB_KIND_EFFECT;
	e->entry.schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	memcpy(e->entry.request_digest, e->digest, IDEM_SHA256_BYTES);
	/* A new slot's facts (PostgreSQL's row replaces them all). */
	e->entry.reserved_at_ms = shm_now_ms();
	e->entry.updated_at_ms = e->entry.reserved_at_ms;
	conn_peer(conn, &e->entry.peer_uid, &e->entry.peer_pid);
	if (op == EFFECT_BEGIN)
		d->be->effect_begin(p, effect_begun);
	else
		d->be->effect_claim(p, effect_claimed);
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

void
op_effect_extend(struct conn *conn, json_t *request, json_t *id)
{
	effect_start(conn, request, id, EFFECT_EXTEND);
}

/* ---- Read-only views: get_submission and diagnose ------------------------ */

json_t *
effect_submission_json(const char *key, size_t key_length,
    const struct subtab_entry *x, const uint8_t *result, int result_pruned,
    int in_flight, int64_t now)
{
	char	 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char	 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char	 hex[IDEM_DIGEST_HEX_SIZE];
	char	 xkey[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	json_t	*j, *receipt;
	int64_t	 age = now - x->updated_at_ms;

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
		/* The lease was granted at the last record (updated_at). */
		json_object_set_new(j, "lease_expires_at",
		    reply_time(x->lease_expires_ms));
		json_object_set_new(j, "lease_age_ms",
		    json_integer(age < 0 ? 0 : age));
		json_object_set_new(j, "lease_live",
		    json_boolean(effect_lease_live(x, now)));
		/* The time left, which effect_extend moves (0: lapsed). */
		json_object_set_new(j, "lease_ms_left", json_integer(
		    effect_lease_live(x, now) ? x->lease_expires_ms - now : 0));
	}
	json_object_set_new(j, "in_flight", json_boolean(in_flight));
	if (x->state == SUBTAB_COMMITTED) {
		if (x->effect_flags & SUBTAB_EFFECT_RECOVERED)
			json_object_set_new(j, "recovered", json_true());
		receipt = result != NULL ? effect_receipt_json_from(key,
		    key_length, x, result, result_pruned) : NULL;
		if (result != NULL && result_pruned)
			json_object_set_new(j, "receipt_pruned", json_true());
		json_object_set_new(j, "receipt", receipt != NULL ? receipt :
		    json_null());
	}
	return j;
}
