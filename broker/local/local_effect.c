/* SPDX-License-Identifier: ISC */
/*
 * local_effect.c: the local backend's effect_begin, effect_claim,
 * effect_record and release: an effect's slot of the submission table
 * (acquired or claimed), its journal records, its result in the arena,
 * and the index once a checkpoint moved it there.  An extension's
 * record (effect_extend) is the reservation's EFFECT record with the
 * new expiry, set in the slot and appended in one step like any other,
 * but settled once it is in the ring: the next group commit makes it
 * durable, and nothing waits for that (SPEC.md, "Effects"); one that
 * ends the lease earlier than it ended is settled once durable.  Each call
 * ends in one outcome given to the op layer's done function
 * (backend.h); effect.c judges and answers (its DESIGN describes the
 * ledger).
 *
 * A found state may rest on a record not durable yet, or lost with a
 * failed journal: the outcome waits for it (local_after_durable), and
 * one lost with the journal is delivered as storage_unavailable
 * (le_done), except in_progress, which never waited (as before).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "local.h"

static void	effect_begin_acquire(struct pending *);
static void	effect_claim(struct pending *);

static struct effect *
effect_of(struct pending *p)
{
	return p->op;
}

static struct local_effect *
le_of(struct pending *p)
{
	return backend_effect_state(p);
}

static struct idemd *
idemd_of(struct pending *p)
{
	return p->worker->d;
}

/*
 * The outcome to the op layer.  A wait that ended in a journal failure
 * is storage_unavailable, never an answer; in_progress never waited.
 */
static void
le_done(struct pending *p, enum backend_effect_result result)
{
	struct backend_effect_outcome	 out;

	memset(&out, 0, sizeof out);
	out.result = result;
	if (result != BACKEND_EFFECT_IN_PROGRESS &&
	    result != BACKEND_EFFECT_FAILED &&
	    local_journal_failed(p, &out.err))
		out.result = BACKEND_EFFECT_FAILED;
	effect_of(p)->done(p, &out);
}

static void
le_fail(struct pending *p, const struct backend_error *err)
{
	struct backend_effect_outcome	 out;

	memset(&out, 0, sizeof out);
	out.result = BACKEND_EFFECT_FAILED;
	out.err = *err;
	effect_of(p)->done(p, &out);
}

/* FAILED with code and the message (the texts effect.c replied). */
static void __attribute__((format(printf, 4, 5)))
le_failed(struct pending *p, enum wire_error code, int retryable,
    const char *fmt, ...)
{
	struct backend_error	 err;
	va_list			 ap;

	va_start(ap, fmt);
	backend_vfail(&err, code, retryable, fmt, ap);
	va_end(ap);
	le_fail(p, &err);
}

static void
le_fail_reopening(struct pending *p)
{
	struct backend_error	 err;

	local_fail_reopening(&err);
	le_fail(p, &err);
}

static void
le_proceed(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_PROCEED);
}

static void
le_unknown(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_UNKNOWN);
}

static void
le_reused(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_REUSED);
}

static void
le_mismatch(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_MISMATCH);
}

static void
le_found(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_FOUND);
}

static void
le_settled(struct pending *p)
{
	le_done(p, BACKEND_EFFECT_SETTLED);
}

/* ---- A committed result --------------------------------------------------- */

/*
 * The committed result of e (a table entry) into buf: from the arena,
 * or, once the arena has reused their space, from the index (the arena
 * gives up only bytes of an entry durable there).  NULL if neither
 * holds them; *pruned when the index keeps only a tombstone (compact).
 */
const uint8_t *
local_effect_result_bytes(struct idemd *d, const char *key, size_t key_length,
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

/* The receipt's bytes of p's committed entry (the loop's thread only). */
int
local_effect_result(struct pending *p, const uint8_t **bytes, int *pruned)
{
	/* The event loop's thread only (as history_find's scratch). */
	static uint8_t	 buf[IDEM_MAX_EFFECT_RESULT_BYTES];
	struct effect	*e = effect_of(p);

	if (e->entry.result_length > sizeof buf)
		return -1;
	*bytes = local_effect_result_bytes(idemd_of(p), e->key,
	    e->key_length, &e->entry, buf, pruned);
	return *bytes != NULL ? 0 : -1;
}

/* ---- The slot ---------------------------------------------------------------- */

void
local_effect_release(struct pending *p)
{
	struct local_effect	*le = le_of(p);

	local_release_claim(p, &le->claimed, le->slot, &le->claim);
}

/*
 * Record e->entry (claimed slot: appended and set in the table in one
 * step), with the result's bytes when it is committed; park until
 * durable (nowait: until appended) and go on with next.
 */
static void
effect_journal(struct pending *p, int nowait, pending_resume_fn next)
{
	struct effect		*e = effect_of(p);
	struct local_effect	*le = le_of(p);
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
	le->journaled = 1;
	if (nowait)
		pending_journal_slot_nowait(p, &record, le->slot, &le->claim,
		    &e->entry, next);
	else
		pending_journal_slot(p, &record, le->slot, &le->claim,
		    &e->entry, next);
}

/* Is the journal failed (an odd epoch: writes wait for its reopen)? */
static int
effect_journal_down(struct pending *p)
{
	return (handoff_epoch(idemd_of(p)->seg.header) & 1) != 0;
}

/*
 * A fence's random part, from the worker's pool (struct worker's
 * fence_pool), drawn from the kernel 64 at a time: a getrandom(2) per
 * begin was one system call in sixteen of an effect's.  The loop's
 * thread only (as every begin); a worker is a process of its own,
 * exec'd (master.c), so no two share a pool.  A part handed out is
 * wiped from the pool.
 */
static uint64_t
effect_fence_random(struct worker *w)
{
	uint64_t	v;

	if (w->fence_left == 0) {
		randombytes_buf(w->fence_pool, sizeof w->fence_pool);
		w->fence_left = sizeof w->fence_pool / sizeof w->fence_pool[0];
	}
	v = w->fence_pool[--w->fence_left];
	w->fence_pool[w->fence_left] = 0;
	return v;
}

/* A new attempt: the next number, a fresh fence, a lease from now. */
static void
effect_new_attempt(struct pending *p, uint32_t attempt)
{
	struct effect	*e = effect_of(p);
	int64_t		 now = shm_now_ms();

	e->entry.state = SUBTAB_RESERVED;
	e->entry.attempt = attempt;
	e->entry.fence = effect_fence_random(p->worker);
	e->entry.lease_expires_ms = now + e->lease_ms;
	e->entry.updated_at_ms = now;
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
		le_fail_reopening(p);
		return;
	}
	effect_new_attempt(p, attempt);
	effect_journal(p, 0, le_proceed);
}

/*
 * The start of every look at the table for this effect (begin, complete,
 * resolve): -1 after the in_progress answer once the wait for another
 * request on the key ran out, else 0 with a filled for the key and claim.
 */
static int
effect_acquire_start(struct pending *p, struct subtab_acquire *a)
{
	struct effect		*e = effect_of(p);
	struct local_effect	*le = le_of(p);
	struct idemd	*d = idemd_of(p);

	if (p->timed_out) {
		le_failed(p, WIRE_IN_PROGRESS, 1,
		    "another request on this effect is still in flight after "
		    "%d ms", d->inflight_wait_ms);
		return -1;
	}
	memset(a, 0, sizeof *a);
	a->key = e->key;
	a->key_length = e->key_length;
	a->claim = le->claim;
	/* Before the table is read: see local_after_durable. */
	le->found_epoch = handoff_epoch(d->seg.header);
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
	struct local_effect	*le = le_of(p);
	struct idemd		*d = idemd_of(p);
	struct index_entry	 found;

	le->evictions = atomic_load(&d->seg.header->evictions);
	if (e->cold_result == NULL &&
	    (e->cold_result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES)) == NULL) {
		le_failed(p, WIRE_INTERNAL, 1, "out of memory");
		return -1;
	}
	switch (history_find(d, e->key, e->key_length, &found,
	    e->cold_result)) {
	case 0:
		le->index_checked = 1;
		return 0;
	case 1:
		e->cold = 1;
		e->pruned = found.form == INDEX_TOMBSTONE;
		e->entry = found.record.entry;
		le->found_end = 0;	/* durable */
		e->found_unrecorded = 0;
		return 1;
	default:
		le_failed(p, WIRE_STORAGE_UNAVAILABLE,
		    1, "the index of committed receipts could not be read");
		return -1;
	}
}

static void
effect_begin_acquire(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct local_effect	*le = le_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_acquire	 a;
	enum subtab_verdict	 acquired;

	if (effect_acquire_start(p, &a) != 0)
		return;
	a.want = e->entry;
	a.index_checked = le->index_checked;
	a.evictions = le->evictions;
	if ((le->found_epoch & 1) && local_needs_journal(d, e->key,
	    e->key_length, e->entry.schema, e->entry.request_digest)) {
		le_fail_reopening(p);
		return;
	}
	switch ((acquired = subtab_acquire(&d->seg, &a))) {
	case SUBTAB_INSERTED:
		le->claimed = 1;
		le->slot = a.slot;
		e->entry = a.found;
		effect_reserve(p, 1);
		return;
	case SUBTAB_CLAIMED:
		le->claimed = 1;
		le->slot = a.slot;
		e->entry = a.found;
		le->found_end = a.found_journal_end;
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
				le_done(p, BACKEND_EFFECT_IN_PROGRESS);
			else {
				local_effect_release(p);
				local_after_durable(p, le->found_end,
				    le->found_epoch, le_unknown);
			}
			return;
		case SUBTAB_RELEASED:
			effect_reserve(p, e->entry.attempt + 1);
			return;
		default:	/* OUTCOME_UNKNOWN */
			local_effect_release(p);
			local_after_durable(p, le->found_end, le->found_epoch,
			    le_unknown);
			return;
		}
	case SUBTAB_DONE:	/* committed with this digest */
	case SUBTAB_MISMATCH:	/* bound to another */
		e->entry = a.found;
		le->found_end = a.found_journal_end;
		local_after_durable(p, le->found_end, le->found_epoch,
		    acquired == SUBTAB_DONE ? le_reused : le_mismatch);
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
				le_done(p, BACKEND_EFFECT_MISMATCH);
			else
				le_done(p, BACKEND_EFFECT_REUSED);
			return;
		}
		return;
	case SUBTAB_FULL:
		journaler_kick(d->kick_fd);
		/* effect.c replies reply_table_full's text with e->full. */
		e->table_full = 1;
		e->full = a.full;
		le_failed(p, WIRE_TABLE_FULL, 1, "the submission table is full");
		return;
	case SUBTAB_ALLOC_FAILED:
		le_failed(p, WIRE_INTERNAL, 1,
		    "the submission table is unusable");
		return;
	}
}

/* complete and resolve: claim the key whatever its digest, to judge. */
static void
effect_claim(struct pending *p)
{
	struct effect		*e = effect_of(p);
	struct local_effect	*le = le_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_acquire	 a;

	if (effect_acquire_start(p, &a) != 0)
		return;
	switch (subtab_claim_key(&d->seg, &a)) {
	case SUBTAB_CLAIMED:
		le->claimed = 1;
		le->slot = a.slot;
		e->entry = a.found;
		le->found_end = a.found_journal_end;
		e->found_unrecorded = a.found_journal_end ==
		    SUBTAB_NOT_JOURNALED;
		if (e->entry.kind != SUBTAB_KIND_EFFECT) {
			le_failed(p, WIRE_INTERNAL, 0,
			    "the key names no effect");
			return;
		}
		local_after_durable(p, le->found_end, le->found_epoch,
		    le_found);
		return;
	case SUBTAB_BUSY:
		pending_wait_claim(p, effect_claim);
		return;
	case SUBTAB_FULL:	/* no such key in the table */
		switch (effect_from_index(p)) {
		case 0:
			le_done(p, BACKEND_EFFECT_NONE);
			return;
		case 1:
			/* Committed: the judges answer without a record. */
			le_done(p, BACKEND_EFFECT_FOUND);
			return;
		}
		return;
	default:
		le_failed(p, WIRE_INTERNAL, 1,
		    "the submission table is unusable");
		return;
	}
}

/* The claim every look at the table for this request holds. */
static void
le_claim_init(struct pending *p)
{
	struct local_effect	*le = le_of(p);

	le->claim.worker = p->worker->index + 1;
	le->claim.generation = p->worker->generation;
	le->claim.token = ++p->worker->next_token;
}

void
local_effect_begin(struct pending *p, backend_effect_done_fn done)
{
	effect_of(p)->done = done;
	le_claim_init(p);
	effect_begin_acquire(p);
}

void
local_effect_claim(struct pending *p, backend_effect_done_fn done)
{
	effect_of(p)->done = done;
	if (effect_journal_down(p)) {
		/* A begin of a committed effect needs no write: it goes on. */
		le_fail_reopening(p);
		return;
	}
	le_claim_init(p);
	effect_claim(p);
}

/*
 * The judge's transition (claimed slot): a commit's result into the
 * arena, then the record; settled once durable.
 */
void
local_effect_record(struct pending *p, backend_effect_done_fn done)
{
	struct effect		*e = effect_of(p);
	struct local_effect	*le = le_of(p);

	e->done = done;
	if (e->entry.state == SUBTAB_COMMITTED && arena_put(&idemd_of(p)->seg,
	    le->slot, e->result, e->result_length,
	    &e->entry.result_offset) != 0) {
		if (errno == ENOSPC) {
			/* The arena asked for a checkpoint: it makes room. */
			journaler_kick(idemd_of(p)->kick_fd);
			le_failed(p, WIRE_TABLE_FULL, 1, "the result arena holds "
			    "only results not yet in the index or commits in "
			    "flight; retry in a moment (the checkpoint that "
			    "indexes them is under way), or restart idemd "
			    "with a larger --result-bytes");
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
		le_failed(p, WIRE_TABLE_FULL, 0,
		    "the result arena is too small for this result; restart "
		    "idemd with a larger --result-bytes, then complete again "
		    "with the same fence");
		return;
	}
	/*
	 * An extension: in the ring is enough (see the top of this file),
	 * unless it shortens the lease: then durable, as effect.c says.
	 */
	effect_journal(p, e->op == EFFECT_EXTEND && !e->lease_shortened,
	    le_settled);
}
