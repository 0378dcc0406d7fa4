/* SPDX-License-Identifier: ISC */
/*
 * pg_effect_cache.c: the PostgreSQL backend's cache of committed
 * effects in this broker's table and result arena: an effect_begin
 * retry of a committed effect answered without a round trip, as a
 * committed creation's retry is (pg_create.c's cache; doc/cluster.md,
 * "Effects", "Cache").  It never decides a transition: every other
 * answer, and every complete, extend and resolve, is the row's
 * (pg_effect.c).
 *
 * DESIGN
 *
 * A committed effect's row never changes but into a tombstone (idemctl
 * compact), which keeps every fact of the receipt but the result: so
 * an entry taken from a committed row, whole, answers a retry with the
 * receipt the row would give, byte for byte.  The table is a cache here,
 * not the truth: the entry goes in marked as durable elsewhere, under
 * the same hold of the table lock (subtab_apply_cached: evictable at
 * once, by the clock like any indexed entry, and no pass of this
 * broker's own index is ever wanted for it), as cached creations are
 * (pg_create.c), and its result's bytes with arena_put_cached
 * (reclaimable at once: no slot owns them).  On this store no request
 * claims a slot (its claims are the rows'), so the put overwrites
 * whatever the key's slot held.  A retry is answered from the table
 * only while the arena still holds them (arena_read, never torn bytes);
 * once they are gone, or the entry is, the retry reads the row.  That
 * is the local store's rule (fastpath.c's: whole while the arena holds
 * the result) without the index behind it, whose place the row takes;
 * so the backend sets BACKEND_EFFECTS_IN_TABLE and the fast path
 * answers these retries too, on the same reasoning.
 *
 * What is cached: a row read or written committed and whole by one of
 * this broker's effect jobs (pg_effect.c's outcome, on the loop before
 * the op layer's done): its commit by this broker (effect_complete, or
 * effect_resolve with applied), a begin answered reused from the row,
 * a complete or resolve that found it committed.  The bytes are the
 * row's, checked against its result digest first (a row is anyone's to
 * UPDATE: effect.c's receipt_result says why unchecked bytes must not
 * reach a reply), so that the arena holds only bytes the digest
 * vouches for, as the local store's arena holds only a checked
 * request's.  Never a tombstone (no result), nothing reserved, released
 * or unknown: those are judged by the row every time.
 *
 * What is answered: a begin whose key the table holds committed.  The
 * same request digest: reused, from the entry and the arena's copy of
 * the bytes (effects_reused_cached).  Another digest: the mismatch
 * (conflict), judged from the entry, as the row would judge it: a key's
 * request digest never changes once bound, tombstone or not.
 *
 * Compaction by another broker: a body cached here before it keeps
 * answering whole until its entry or its bytes leave the table or the
 * arena, or the broker restarts (its segment is made anew), as cached
 * creations do (doc/cluster.md, "Tombstones").  get_submission and
 * diagnose never look here: they read the row (pg_read.c).
 *
 * On the loop only: the table and the arena are the segment's, shared
 * with the other workers, under their own lock; a lookup is one probe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"

static struct effect *
cache_effect(struct pending *p)
{
	return p->op;
}

static struct shm_segment *
cache_seg(struct pending *p)
{
	return &p->worker->d->seg;
}

/* Is the table's entry the commit of this row (its receipt's facts)? */
static int
same_commit(const struct subtab_entry *known, const struct subtab_entry *row)
{
	return known->kind == SUBTAB_KIND_EFFECT &&
	    known->state == SUBTAB_COMMITTED &&
	    known->schema == row->schema &&
	    known->attempt == row->attempt &&
	    known->created_at_ms == row->created_at_ms &&
	    known->effect_flags == row->effect_flags &&
	    known->result_length == row->result_length &&
	    memcmp(known->request_digest, row->request_digest,
	    IDEM_SHA256_BYTES) == 0 &&
	    memcmp(known->file_digest, row->file_digest,
	    IDEM_SHA256_BYTES) == 0;
}

/*
 * A committed row of this request, whole (e->entry and its bytes in
 * e->cold_result, as pg_effect.c took them), into the table and the
 * arena.  On success e->entry names the arena's copy and e is no longer
 * cold: its bytes are the table's, checked, kept in e->cold_result for
 * pg_effect_result (no second hash when the receipt is written).
 */
void
pg_effect_cache_put(struct pending *p)
{
	struct effect		*e = cache_effect(p);
	struct shm_segment	*seg = cache_seg(p);
	struct subtab_entry	 entry, known;
	uint8_t			 digest[IDEM_SHA256_BYTES];
	uint32_t		 slot;

	if (e->entry.kind != SUBTAB_KIND_EFFECT ||
	    e->entry.state != SUBTAB_COMMITTED || e->pruned || !e->cold ||
	    e->cold_result == NULL || e->entry.result_length == 0 ||
	    e->entry.result_length > IDEM_MAX_EFFECT_RESULT_BYTES)
		return;
	digest_sha256(e->cold_result, e->entry.result_length, digest);
	if (memcmp(digest, e->entry.file_digest, sizeof digest) != 0)
		return;		/* effect.c answers it unreadable */
	entry = e->entry;
	/* Already here (another worker's, or an earlier op's): kept. */
	if (subtab_lookup(seg, e->key, e->key_length, &known, NULL) == 1 &&
	    same_commit(&known, &entry) &&
	    arena_holds(seg, known.result_offset, known.result_length) == 0) {
		e->entry.result_offset = known.result_offset;
		e->cold = 0;
		return;
	}
	if (arena_put_cached(seg, e->cold_result, entry.result_length,
	    &entry.result_offset) != 0) {
		log_debug("effect %s (%s): not cached: the arena: %s", e->id,
		    e->kind, strerror(errno));
		return;
	}
	if (subtab_apply_cached(seg, e->key, e->key_length, &entry,
	    &slot) != 0) {
		log_debug("effect %s (%s): not cached: the table: %s", e->id,
		    e->kind, strerror(errno));
		return;
	}
	e->entry.result_offset = entry.result_offset;
	e->cold = 0;
}

/*
 * effect_begin from the table (DESIGN): 1 with out filled (REUSED, e's
 * entry and bytes the table's; MISMATCH, its entry), or 0: not cached
 * whole, ask the row.
 */
int
pg_effect_cache_begin(struct pending *p, struct backend_effect_outcome *out)
{
	struct effect		*e = cache_effect(p);
	struct shm_segment	*seg = cache_seg(p);
	struct subtab_entry	 known;
	uint8_t			*bytes;

	if (subtab_lookup(seg, e->key, e->key_length, &known, NULL) != 1 ||
	    known.kind != SUBTAB_KIND_EFFECT ||
	    known.state != SUBTAB_COMMITTED)
		return 0;
	memset(out, 0, sizeof *out);
	if (known.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1 ||
	    memcmp(known.request_digest, e->digest, IDEM_SHA256_BYTES) != 0) {
		e->entry = known;
		out->result = BACKEND_EFFECT_MISMATCH;
		return 1;
	}
	if (known.result_length == 0 ||
	    known.result_length > IDEM_MAX_EFFECT_RESULT_BYTES ||
	    (bytes = malloc(known.result_length)) == NULL)
		return 0;
	if (arena_read(seg, known.result_offset, known.result_length,
	    bytes) != 0) {
		free(bytes);	/* reused meanwhile: the row has them */
		return 0;
	}
	free(e->cold_result);
	e->cold_result = bytes;
	e->entry = known;
	e->cold = 0;
	e->pruned = 0;
	e->found_unrecorded = 0;
	atomic_fetch_add(&seg->header->counters.effects_reused_cached, 1);
	out->result = BACKEND_EFFECT_REUSED;
	return 1;
}

/*
 * backend.h's effect_result: the bytes of an entry this backend took
 * from the table or put there (e not cold), copied then; a row's bytes
 * (cold) are effect.c's to read.
 */
int
pg_effect_result(struct pending *p, const uint8_t **bytes, int *pruned)
{
	struct effect	*e = cache_effect(p);

	*pruned = 0;
	*bytes = e->cold_result;
	return *bytes != NULL ? 0 : -1;
}
