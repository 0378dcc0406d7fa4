/* SPDX-License-Identifier: ISC */
/*
 * subtab.c: the submission table.  Fixed slots, filled in order and
 * never freed; an open-addressing index of buckets (slot index + 1, 0 for
 * empty) sized to at least twice the capacity, so probes stay short; a
 * heap holding the keys.  Everything here runs under the table lock and
 * does no I/O.  The table lock is shared (subtab_int.h) with the two
 * rings beside the table, caches read without the lock: the result
 * arena (arena.c) and the fast path's receipt store (receipts.c).
 *
 * An insert publishes last: the key and the slot are written first, then
 * the bucket that makes the slot reachable, then the counters.  So a
 * worker that dies mid-insert leaves either an unreachable slot (ignored
 * and overwritten) or a reachable one whose counters subtab_repair()
 * completes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "shm.h"
#include "subtab_int.h"

static void	compact_finish(struct shm_segment *);

static uint32_t
hash_key(struct shm_segment *seg, const char *key, size_t length)
{
	unsigned char	out[crypto_shorthash_siphash24_BYTES];
	uint32_t	h;

	crypto_shorthash_siphash24(out, (const unsigned char *)key, length,
	    seg->header->hash_key);
	memcpy(&h, out, sizeof h);
	return h;
}

/*
 * The key space a slot takes: at least the average the heap is sized
 * for, so that an evicted slot's space fits the next key (ids grow by a
 * digit now and then; an exact fit would strand the heap).
 */
static size_t
key_room(size_t length)
{
	return length > SHM_HEAP_BYTES_PER_SLOT ? length :
	    SHM_HEAP_BYTES_PER_SLOT;
}

static int
slot_has_key(struct shm_segment *seg, const struct subtab_slot *s,
    uint32_t hash, const char *key, size_t length)
{
	return s->key_hash == hash && s->entry.key_length == length &&
	    memcmp(seg->heap + s->key_offset, key, length) == 0;
}

/*
 * The bucket holding key, or the empty bucket where it would go; *slot is
 * its slot index or UINT32_MAX.
 */
static uint32_t
probe(struct shm_segment *seg, uint32_t hash, const char *key,
    size_t length, uint32_t *slot)
{
	uint32_t	mask = seg->header->bucket_count - 1;
	uint32_t	b, v;

	for (b = hash & mask;; b = (b + 1) & mask) {
		v = seg->buckets[b];
		if (v == 0) {
			*slot = UINT32_MAX;
			return b;
		}
		if (v - 1 < seg->header->slots_used &&
		    slot_has_key(seg, &seg->slots[v - 1], hash, key, length)) {
			*slot = v - 1;
			return b;
		}
	}
}

int
subtab_claim_live(struct shm_segment *seg, const struct subtab_claim *c)
{
	if (c->worker == 0 || c->worker > SHM_MAX_WORKERS)
		return 0;
	return atomic_load(&seg->header->workers[c->worker - 1].generation) ==
	    c->generation;
}

static int
claim_equal(const struct subtab_claim *a, const struct subtab_claim *b)
{
	return a->worker == b->worker && a->generation == b->generation &&
	    a->token == b->token;
}

/*
 * Tell a what the key's slot holds (under the table lock).  1 if another
 * request's live claim is on it: the caller answers SUBTAB_BUSY, and the
 * holder's release wakes the waiters.
 */
static int
found_slot(struct shm_segment *seg, uint32_t slot, struct subtab_acquire *a)
{
	struct subtab_slot	*s = &seg->slots[slot];

	a->slot = slot;
	a->found = s->entry;
	a->found_journal_end = s->journal_end;
	if (s->claim.worker != 0 && !claim_equal(&s->claim, &a->claim) &&
	    subtab_claim_live(seg, &s->claim)) {
		atomic_store(&s->waiters, 1);
		return 1;
	}
	return 0;
}

static void
count_state(struct shm_header *h, unsigned from, unsigned to)
{
	if (from != SUBTAB_EMPTY)
		h->state_counts[from]--;
	h->state_counts[to]++;
}

/*
 * An eviction died while it moved buckets: build them again from the
 * slots (every slot with a key is reachable; the victim, whose key was
 * cleared first, is not).
 */
static void
rebuild_buckets(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint32_t		 mask = h->bucket_count - 1, i, b;

	memset(seg->buckets, 0, (size_t)h->bucket_count *
	    sizeof *seg->buckets);
	h->indexed_count = 0;
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->entry.key_length == 0)
			continue;
		for (b = s->key_hash & mask; seg->buckets[b] != 0;
		    b = (b + 1) & mask)
			;
		seg->buckets[b] = i + 1;
		if (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED)
			h->indexed_count++;
	}
	h->evicting = 0;
}

int
subtab_repair(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint32_t		 i, slot;

	compact_finish(seg);
	if (h->evicting)
		rebuild_buckets(seg);

	/* An insert that reached its bucket but not its counters. */
	if (h->slots_used < h->capacity) {
		s = &seg->slots[h->slots_used];
		if (atomic_load(&s->state) != SUBTAB_EMPTY &&
		    s->key_offset + s->entry.key_length <= h->heap_bytes) {
			h->slots_used++;	/* let probe() see it */
			probe(seg, s->key_hash, seg->heap + s->key_offset,
			    s->entry.key_length, &slot);
			if (slot == h->slots_used - 1) {
				/* insert() set key_room with the key. */
				if (s->key_room < key_room(s->entry.key_length))
					s->key_room = (uint16_t)key_room(
					    s->entry.key_length);
				h->heap_used = s->key_offset + s->key_room;
			}
			else {
				h->slots_used--;
				memset(s, 0, sizeof *s);
			}
		}
	}
	memset(h->state_counts, 0, sizeof h->state_counts);
	h->indexed_count = 0;
	h->free_count = 0;
	for (i = 0; i < h->slots_used; i++) {
		unsigned state = atomic_load(&seg->slots[i].state);

		if (state >= SUBTAB_STATE_COUNT)
			return -1;
		h->state_counts[state]++;
		if (seg->slots[i].entry.key_length == 0)
			h->free_count++;
		else if (atomic_load(&seg->slots[i].flags) &
		    SUBTAB_SLOT_INDEXED)
			h->indexed_count++;
	}
	return 0;
}

/* The table lock; arena.c and receipts.c take it too (subtab_int.h). */
int
subtab_lock_table(struct shm_segment *seg)
{
	return shm_lock(seg, &seg->header->table_lock, subtab_repair, "table");
}

void
subtab_unlock_table(struct shm_segment *seg)
{
	shm_unlock(&seg->header->table_lock);
}

/*
 * Remove the bucket of slot (its key still in place), shifting the
 * entries after it back so that no probe chain is broken (linear
 * probing's deletion: no tombstones to age the table).
 */
static void
unlink_bucket(struct shm_segment *seg, uint32_t slot)
{
	struct subtab_slot	*s = &seg->slots[slot];
	uint32_t		 mask = seg->header->bucket_count - 1;
	uint32_t		 b, j, home, v;

	for (b = s->key_hash & mask; seg->buckets[b] != slot + 1;
	    b = (b + 1) & mask)
		;
	for (j = b;;) {
		j = (j + 1) & mask;
		if ((v = seg->buckets[j]) == 0)
			break;
		home = seg->slots[v - 1].key_hash & mask;
		/* The entry at j stays if its home lies in (b, j]. */
		if (b <= j ? home > b && home <= j : home > b || home <= j)
			continue;
		seg->buckets[b] = v;
		b = j;
	}
	seg->buckets[b] = 0;
}

/*
 * May slot s be evicted: committed, durable in the index, and neither
 * claimed nor waited for (a free slot, key_length 0, is not "evicted").
 */
static int
evictable(const struct subtab_slot *s)
{
	return s->entry.key_length != 0 && s->claim.worker == 0 &&
	    atomic_load(&s->waiters) == 0 &&
	    s->entry.state == SUBTAB_COMMITTED &&
	    (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED) != 0;
}

/*
 * A slot to reuse for a key of length bytes, in its own key room or
 * with room left in the heap: a free one (evicted, its new key never
 * written), else a committed slot durable in the index, by the clock's
 * second chance (a slot looked up since the hand last passed is skipped
 * once).  Never a slot in flight, claimed or waited for.  UINT32_MAX if
 * there is none.  Only the hand and the looked-up bits move: choosing
 * is not evicting.
 */
static uint32_t
find_victim(struct shm_segment *seg, size_t length)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint64_t		 steps;
	uint32_t		 i, flags;

	if (h->slots_used == 0)
		return UINT32_MAX;
	for (steps = 0; steps < 2ULL * h->slots_used; steps++) {
		i = h->evict_hand++ % h->slots_used;
		s = &seg->slots[i];
		if (s->claim.worker != 0 || atomic_load(&s->waiters) != 0 ||
		    (s->key_room < length &&
		    h->heap_used + key_room(length) > h->heap_bytes))
			continue;
		if (s->entry.key_length == 0)
			return i;	/* free */
		if (!evictable(s))
			continue;
		flags = atomic_load(&s->flags);
		if (flags & SUBTAB_SLOT_USED) {
			atomic_fetch_and(&s->flags, (uint8_t)~SUBTAB_SLOT_USED);
			continue;
		}
		return i;
	}
	return UINT32_MAX;
}

/*
 * Drop slot i's key and entry, leaving the slot free for the next key.
 * The whole entry is cleared, not only the key: a free slot must read
 * as empty to everything that walks the slots (a checkpoint copies
 * every slot's entry).
 */
static void
forget(struct shm_segment *seg, uint32_t i)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s = &seg->slots[i];

	h->evicting = 1;
	unlink_bucket(seg, i);
	s->entry.key_length = 0;
	if (s->entry.state != SUBTAB_EMPTY)
		h->state_counts[s->entry.state]--;
	if (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED)
		h->indexed_count--;
	s->entry.state = SUBTAB_EMPTY;
	h->free_count++;
	s->journal_end = 0;
	atomic_store(&s->fast_receipt, 0);
	atomic_store(&s->state, SUBTAB_EMPTY);
	atomic_store(&s->flags, 0);
	h->evicting = 0;
}

/* Evict slot i (evictable: the index answers for it from now on). */
static void
evict(struct shm_segment *seg, uint32_t i)
{
	forget(seg, i);
	atomic_fetch_add(&seg->header->evictions, 1);
}

/*
 * The key heap.  A slot keeps the key room it was first given (at
 * least SHM_HEAP_BYTES_PER_SLOT, the heap's average) and an evicted
 * slot's room serves the next key that fits in it; the heap grows only
 * at its end.  So once the heap is used up, a key longer than every
 * evictable slot's room (a 180-byte id where 56-byte rooms are all
 * there is) found no room for good, though evicting could free plenty.
 *
 * Rooms of the maximal key (SUBTAB_MAX_KEY_BYTES) for every slot would
 * cost six times the heap for keys that are mostly short, and break the
 * 32-bit offsets at the largest --capacity.  Instead, when no single
 * victim has the room, the keys gather it: evict committed, indexed
 * slots by the clock until the keys left and the new one fit in the
 * heap, then compact the heap (slide every key down, in offset order, to
 * the room its length needs), so the room is at the heap's end.  That
 * is rare (each compaction gives back all the room lost to moves) and
 * it costs a sort of the slots under the table lock; in return every
 * key up to the maximum is served whenever enough committed entries
 * are evictable, and refused only when the keys in flight or not yet
 * indexed hold the heap.
 *
 * A compaction moves one key at a time through the header's scratch
 * key, so a holder that dies mid-move leaves a move the repair finishes
 * (every other key is whole where its slot says).
 */
struct slot_plan {
	uint32_t	 index;		/* the slot, or UINT32_MAX: gather */
	uint64_t	*order;		/* gather: room for the sort */
};

/* Bytes of heap the keys of the slots that may not be evicted need. */
static uint64_t
kept_key_bytes(struct shm_segment *seg, int *slot_free)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint64_t		 bytes = 0;
	uint32_t		 i;

	*slot_free = h->slots_used < h->capacity;
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->entry.key_length == 0) {
			if (s->claim.worker == 0 &&
			    atomic_load(&s->waiters) == 0)
				*slot_free = 1;
		} else if (evictable(s))
			*slot_free = 1;
		else
			bytes += key_room(s->entry.key_length);
	}
	return bytes;
}

/*
 * Choose a slot and key room for a key of length bytes, changing
 * nothing anyone can see: the caller may still refuse (no number left),
 * and only take_slot evicts.  0, or -1 with *why.
 */
static int
plan_slot(struct shm_segment *seg, size_t length, struct slot_plan *plan,
    enum subtab_full *why)
{
	struct shm_header	*h = seg->header;
	int			 slot_free;

	plan->order = NULL;
	if (h->slots_used < h->capacity &&
	    h->heap_used + key_room(length) <= h->heap_bytes) {
		plan->index = h->slots_used;
		return 0;
	}
	*why = SUBTAB_FULL_SLOTS;
	if (h->indexed_count == 0 && h->free_count == 0 &&
	    h->slots_used == h->capacity)
		return -1;
	if ((plan->index = find_victim(seg, length)) != UINT32_MAX)
		return 0;
	if (kept_key_bytes(seg, &slot_free) + key_room(length) >
	    h->heap_bytes) {
		if (slot_free)
			*why = SUBTAB_FULL_KEYS;
		return -1;
	}
	if (!slot_free)
		return -1;
	if ((plan->order = calloc(h->slots_used + 1,
	    sizeof *plan->order)) == NULL) {
		*why = SUBTAB_FULL_MEMORY;
		return -1;
	}
	return 0;
}

static void
plan_drop(struct slot_plan *plan)
{
	free(plan->order);
	plan->order = NULL;
}

static int
by_offset(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Finish a move of compact_heap that a dead holder left half done. */
static void
compact_finish(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;

	if (h->compact_slot == 0 || h->compact_slot > h->slots_used) {
		h->compact_slot = 0;
		return;
	}
	s = &seg->slots[h->compact_slot - 1];
	memcpy(seg->heap + h->compact_to, h->compact_key,
	    s->entry.key_length);
	s->key_offset = (uint32_t)h->compact_to;
	s->key_room = (uint16_t)key_room(s->entry.key_length);
	h->compact_slot = 0;
}

/*
 * Slide every key down to the room its length needs, in offset order,
 * so that all the room left is at the heap's end.  Free slots give up
 * their rooms first: none of them may be reused in place afterwards.
 */
static void
compact_heap(struct shm_segment *seg, uint64_t *order)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint64_t		 at = 0;
	uint32_t		 i, n = 0;
	size_t			 room;

	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->entry.key_length == 0) {
			s->key_offset = 0;
			s->key_room = 0;
		} else
			order[n++] = (uint64_t)s->key_offset << 32 | i;
	}
	qsort(order, n, sizeof *order, by_offset);
	for (i = 0; i < n; i++) {
		s = &seg->slots[(uint32_t)order[i]];
		room = key_room(s->entry.key_length);
		if (s->key_offset != at) {
			/* at <= key_offset: rooms only shrink, in order. */
			memcpy(h->compact_key, seg->heap + s->key_offset,
			    s->entry.key_length);
			h->compact_to = at;
			h->compact_slot = (uint32_t)order[i] + 1;
			memmove(seg->heap + at, h->compact_key,
			    s->entry.key_length);
			s->key_offset = (uint32_t)at;
			s->key_room = (uint16_t)room;
			h->compact_slot = 0;
		} else
			s->key_room = (uint16_t)room;
		at += room;
	}
	h->heap_used = at;
}

/*
 * Gather room for a key of length bytes (plan_slot found it possible):
 * a slot first (a fresh one, a free one, or an evicted one), then
 * evictions by the clock, regardless of the second chance, until the
 * keys left and this one fit; then compact.
 */
static uint32_t
gather(struct shm_segment *seg, size_t length, uint64_t *order)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint64_t		 need = key_room(length), live = 0;
	uint32_t		 i, steps, target = UINT32_MAX;

	if (h->slots_used < h->capacity)
		target = h->slots_used;
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->entry.key_length != 0)
			live += key_room(s->entry.key_length);
		else if (target == UINT32_MAX && s->claim.worker == 0 &&
		    atomic_load(&s->waiters) == 0)
			target = i;
	}
	for (steps = 0; steps < h->slots_used &&
	    (target == UINT32_MAX || live + need > h->heap_bytes); steps++) {
		i = h->evict_hand++ % h->slots_used;
		s = &seg->slots[i];
		if (!evictable(s))
			continue;
		live -= key_room(s->entry.key_length);
		evict(seg, i);
		if (target == UINT32_MAX)
			target = i;
	}
	compact_heap(seg, order);
	return target;
}

/*
 * Take the slot and key room plan_slot chose: the next unused slot, or
 * a free or evicted one (left free: insert fills it).  Under the same
 * hold of the table lock as the plan, so it cannot fail.
 */
static uint32_t
take_slot(struct shm_segment *seg, size_t length, struct slot_plan *plan)
{
	uint32_t	index = plan->index;

	if (index == UINT32_MAX)
		index = gather(seg, length, plan->order);
	else if (index != seg->header->slots_used &&
	    seg->slots[index].entry.key_length != 0)
		evict(seg, index);
	plan_drop(plan);
	return index;
}

/* Fill slot index, which take_slot gave, for key with entry. */
static uint32_t
insert(struct shm_segment *seg, uint32_t index, uint32_t bucket,
    uint32_t hash, const char *key, size_t length,
    const struct subtab_entry *entry, const struct subtab_claim *claim)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s = &seg->slots[index];
	int			 fresh = index == h->slots_used;

	if (fresh || s->key_room < length) {
		s->key_offset = (uint32_t)h->heap_used;
		s->key_room = (uint16_t)key_room(length);
		h->heap_used += s->key_room;
	}
	if (!fresh)
		h->free_count--;
	memcpy(seg->heap + s->key_offset, key, length);
	s->key_hash = hash;
	s->entry = *entry;
	/*
	 * Relaxed: a lookup reaches this slot only through the bucket below,
	 * read under the table lock, whose release publishes all of it.  The
	 * one reader without the lock, receipts_get on a slot number kept
	 * from an earlier lookup, sees an old name or 0 either way, and the
	 * receipt's slot and fingerprint are checked.  A sequentially
	 * consistent store is a full barrier on x86: each one waited for the
	 * slot's earlier stores to leave the store buffer, and a replay,
	 * which fills fresh slots one after the other, spent most of its
	 * time there.
	 */
	atomic_store_explicit(&s->fast_receipt, 0, memory_order_relaxed);
	s->entry.key_length = (uint16_t)length;
	if (claim != NULL)
		s->claim = *claim;
	else
		memset(&s->claim, 0, sizeof s->claim);
	atomic_store_explicit(&s->waiters, 0, memory_order_relaxed);
	atomic_store_explicit(&s->flags, 0, memory_order_relaxed);
	/* A reservation is not in the journal until its claimer records it. */
	s->journal_end = claim != NULL ? SUBTAB_NOT_JOURNALED : 0;
	atomic_store_explicit(&s->state, entry->state, memory_order_relaxed);
	/*
	 * Every store above before the bucket's, even for a holder that
	 * dies here: the repair (subtab_repair) reads what it left, with
	 * no unlock between them.  A compiler barrier on x86, no fence.
	 */
	atomic_thread_fence(memory_order_release);
	seg->buckets[bucket] = index + 1;	/* publish */
	if (fresh)
		h->slots_used++;
	count_state(h, SUBTAB_EMPTY, entry->state);
	return index;
}

enum subtab_verdict
subtab_acquire(struct shm_segment *seg, struct subtab_acquire *a)
{
	struct subtab_slot	*s;
	struct subtab_entry	 entry;
	struct slot_plan	 plan;
	enum subtab_verdict	 verdict;
	uint64_t		 evictions;
	uint32_t		 hash, bucket, slot, index;

	a->full = SUBTAB_FULL_NONE;
	hash = hash_key(seg, a->key, a->key_length);
	if (subtab_lock_table(seg) != 0)
		return SUBTAB_ALLOC_FAILED;
	bucket = probe(seg, hash, a->key, a->key_length, &slot);
	if (slot == UINT32_MAX) {
		/* Evicted meanwhile, it may be in the index now. */
		if (!a->index_checked ||
		    atomic_load(&seg->header->evictions) != a->evictions) {
			verdict = SUBTAB_NOT_HERE;
			goto out;
		}
		/* Room first: a refusal takes no number. */
		if (plan_slot(seg, a->key_length, &plan, &a->full) != 0) {
			atomic_store(&seg->header->checkpoint_wanted, 1);
			verdict = SUBTAB_FULL;
			goto out;
		}
		entry = a->want;
		entry.state = SUBTAB_RESERVED;
		/*
		 * An effect takes no number: attempt and fence are the op's.
		 * The number before the slot is taken: a refusal (the date's
		 * numbers used up, the allocator's lock unusable) evicts
		 * nothing and leaves the table as it was.
		 */
		if (entry.kind != SUBTAB_KIND_EFFECT &&
		    seqalloc_next(seg, entry.kind, a->today, a->scan,
		    a->scan_arg, &entry.date, &entry.seq) != 0) {
			plan_drop(&plan);
			verdict = SUBTAB_ALLOC_FAILED;
			goto out;
		}
		/*
		 * An eviction may have moved the empty bucket found: a
		 * gather evicts even when the slot is a fresh one.
		 */
		evictions = atomic_load(&seg->header->evictions);
		index = take_slot(seg, a->key_length, &plan);
		if (atomic_load(&seg->header->evictions) != evictions)
			bucket = probe(seg, hash, a->key, a->key_length, &slot);
		a->slot = insert(seg, index, bucket, hash, a->key,
		    a->key_length, &entry, &a->claim);
		a->found = seg->slots[a->slot].entry;
		verdict = SUBTAB_INSERTED;
		goto out;
	}

	s = &seg->slots[slot];
	/*
	 * Wait before judging: an in-flight reservation is not durable yet,
	 * so not even a conflict may be answered from it.
	 */
	if (found_slot(seg, slot, a))
		verdict = SUBTAB_BUSY;
	else if (s->entry.state == SUBTAB_EMPTY) {
		/* Its reservation was lost with the journal (subtab_settle):
		 * the key is free again, and this slot is its place. */
		entry = a->want;
		entry.state = SUBTAB_RESERVED;
		entry.key_length = s->entry.key_length;
		if (entry.kind != SUBTAB_KIND_EFFECT &&
		    seqalloc_next(seg, entry.kind, a->today, a->scan,
		    a->scan_arg, &entry.date, &entry.seq) != 0) {
			verdict = SUBTAB_ALLOC_FAILED;
			goto out;
		}
		s->entry = entry;
		s->claim = a->claim;
		s->journal_end = SUBTAB_NOT_JOURNALED;
		atomic_store(&s->state, SUBTAB_RESERVED);
		count_state(seg->header, SUBTAB_EMPTY, SUBTAB_RESERVED);
		a->found = s->entry;
		verdict = SUBTAB_INSERTED;
	} else if (s->entry.schema != a->want.schema ||
	    memcmp(s->entry.request_digest, a->want.request_digest,
	    SHM_SHA256_BYTES) != 0) {
		memset(&s->claim, 0, sizeof s->claim);
		verdict = SUBTAB_MISMATCH;
	} else if (s->entry.state == SUBTAB_COMMITTED) {
		memset(&s->claim, 0, sizeof s->claim);
		verdict = SUBTAB_DONE;
	} else {
		s->claim = a->claim;
		verdict = SUBTAB_CLAIMED;
	}
out:
	subtab_unlock_table(seg);
	return verdict;
}

enum subtab_verdict
subtab_claim_key(struct shm_segment *seg, struct subtab_acquire *a)
{
	struct subtab_slot	*s;
	enum subtab_verdict	 verdict;
	uint32_t		 hash, slot;

	hash = hash_key(seg, a->key, a->key_length);
	if (subtab_lock_table(seg) != 0)
		return SUBTAB_ALLOC_FAILED;
	probe(seg, hash, a->key, a->key_length, &slot);
	/* A slot whose state was lost with the journal holds nothing. */
	if (slot == UINT32_MAX ||
	    seg->slots[slot].entry.state == SUBTAB_EMPTY) {
		verdict = SUBTAB_FULL;
		goto out;
	}
	s = &seg->slots[slot];
	if (found_slot(seg, slot, a))
		verdict = SUBTAB_BUSY;
	else {
		s->claim = a->claim;
		verdict = SUBTAB_CLAIMED;
	}
out:
	subtab_unlock_table(seg);
	return verdict;
}

int
subtab_record(struct shm_segment *seg, uint32_t slot,
    const struct subtab_claim *claim, const struct subtab_entry *entry,
    const void *record, size_t length, uint64_t *end)
{
	struct subtab_slot	*s = &seg->slots[slot];
	uint16_t		 key_length;
	int			 rc = -1;

	if (subtab_lock_table(seg) != 0)
		return -1;
	if (!claim_equal(&s->claim, claim))
		errno = EPERM;
	else if (handoff_append(seg, record, length, end) == 0) {
		key_length = s->entry.key_length;
		count_state(seg->header, s->entry.state, entry->state);
		s->entry = *entry;
		atomic_store(&s->fast_receipt, 0);
		s->entry.key_length = key_length;
		atomic_store(&s->state, entry->state);
		s->journal_end = *end;
		rc = 0;
	}
	subtab_unlock_table(seg);
	return rc;
}

int
subtab_release(struct shm_segment *seg, uint32_t slot,
    const struct subtab_claim *claim)
{
	struct subtab_slot	*s = &seg->slots[slot];
	int			 wake = 0;

	if (subtab_lock_table(seg) != 0)
		return 1;	/* waking for nothing is harmless */
	if (claim_equal(&s->claim, claim)) {
		memset(&s->claim, 0, sizeof s->claim);
		wake = atomic_exchange(&s->waiters, 0) != 0;
		/*
		 * A reservation its claimer never appended: the request was
		 * refused after the insert (the journal failed, the ring
		 * stayed full).  Nothing durable names it, so it is forgotten
		 * and its slot freed, rather than held, unevictable, until
		 * the same key comes again (a task's number stays used).
		 */
		if (s->journal_end == SUBTAB_NOT_JOURNALED &&
		    s->entry.key_length != 0)
			forget(seg, slot);
	}
	subtab_unlock_table(seg);
	return wake;
}

int
subtab_lookup(struct shm_segment *seg, const char *key, size_t length,
    struct subtab_entry *entry, uint32_t *slot_out)
{
	uint32_t	hash, slot;

	hash = hash_key(seg, key, length);
	if (subtab_lock_table(seg) != 0)
		return -1;
	probe(seg, hash, key, length, &slot);
	/* A slot whose state was lost with the journal holds nothing. */
	if (slot != UINT32_MAX &&
	    seg->slots[slot].entry.state == SUBTAB_EMPTY)
		slot = UINT32_MAX;
	if (slot != UINT32_MAX) {
		*entry = seg->slots[slot].entry;
		if (!(atomic_load(&seg->slots[slot].flags) & SUBTAB_SLOT_USED))
			atomic_fetch_or(&seg->slots[slot].flags,
			    SUBTAB_SLOT_USED);
		if (slot_out != NULL)
			*slot_out = slot;
	}
	subtab_unlock_table(seg);
	return slot != UINT32_MAX;
}

/*
 * Replay applies millions of records to a table far larger than the
 * cache, each a random bucket: fetching the bucket of a record a few
 * records ahead overlaps those misses instead of taking them in turn.
 */
uint32_t
subtab_prefetch(struct shm_segment *seg, const char *key, size_t length)
{
	uint32_t	mask = seg->header->bucket_count - 1;
	uint32_t	hash = hash_key(seg, key, length);

	__builtin_prefetch(&seg->buckets[hash & mask]);
	return hash;
}

int
subtab_apply(struct shm_segment *seg, const char *key, size_t length,
    const struct subtab_entry *entry)
{
	return subtab_apply_hashed(seg, key, length,
	    hash_key(seg, key, length), entry);
}

int
subtab_apply_hashed(struct shm_segment *seg, const char *key, size_t length,
    uint32_t hash, const struct subtab_entry *entry)
{
	return subtab_apply_slot(seg, key, length, hash, entry, NULL);
}

/* mark: the entry, put, is marked indexed under the same hold. */
static int
apply_slot(struct shm_segment *seg, const char *key, size_t length,
    uint32_t hash, const struct subtab_entry *entry, uint32_t *slot_out,
    int mark)
{
	struct subtab_slot	*s;
	struct slot_plan	 plan;
	enum subtab_full	 why;
	uint64_t		 evictions;
	uint32_t		 bucket, slot, index;
	uint16_t		 key_length;

	if (length == 0 || length > SUBTAB_MAX_KEY_BYTES ||
	    !subtab_state_valid(entry->kind, entry->state)) {
		errno = EINVAL;
		return -1;
	}
	if (subtab_lock_table(seg) != 0)
		return -1;
	bucket = probe(seg, hash, key, length, &slot);
	if (slot == UINT32_MAX) {
		if (plan_slot(seg, length, &plan, &why) != 0) {
			subtab_unlock_table(seg);
			errno = why == SUBTAB_FULL_MEMORY ? ENOMEM : ENOSPC;
			return -1;
		}
		evictions = atomic_load(&seg->header->evictions);
		index = take_slot(seg, length, &plan);
		if (atomic_load(&seg->header->evictions) != evictions)
			bucket = probe(seg, hash, key, length, &slot);
		slot = insert(seg, index, bucket, hash, key, length, entry,
		    NULL);
	} else {
		s = &seg->slots[slot];
		key_length = s->entry.key_length;
		count_state(seg->header, s->entry.state, entry->state);
		s->entry = *entry;
		atomic_store(&s->fast_receipt, 0);
		s->entry.key_length = key_length;
		atomic_store(&s->state, entry->state);
	}
	if (mark)
		subtab_mark_locked(seg, slot);
	if (slot_out != NULL)
		*slot_out = slot;
	subtab_unlock_table(seg);
	return 0;
}

int
subtab_apply_slot(struct shm_segment *seg, const char *key, size_t length,
    uint32_t hash, const struct subtab_entry *entry, uint32_t *slot_out)
{
	return apply_slot(seg, key, length, hash, entry, slot_out, 0);
}

int
subtab_apply_cached(struct shm_segment *seg, const char *key, size_t length,
    const struct subtab_entry *entry, uint32_t *slot_out)
{
	return apply_slot(seg, key, length, hash_key(seg, key, length), entry,
	    slot_out, 1);
}

size_t
subtab_key(struct shm_segment *seg, uint32_t slot, char *out,
    size_t out_size)
{
	const struct subtab_slot	*s = &seg->slots[slot];
	size_t				 n = s->entry.key_length;

	if (out_size == 0)
		return n;
	if (n >= out_size)
		n = out_size - 1;
	memcpy(out, seg->heap + s->key_offset, n);
	out[n] = '\0';
	return s->entry.key_length;
}

int
subtab_snapshot(struct shm_segment *seg, enum subtab_kind kind,
    int unfinished_only, struct subtab_row **rows_out, size_t *count_out,
    uint32_t state_counts[SUBTAB_STATE_COUNT])
{
	struct shm_header	*h = seg->header;
	struct subtab_row	*rows = NULL, *grown;
	size_t			 count = 0, size = 0;
	uint32_t		 i;
	const struct subtab_slot *s;

	memset(state_counts, 0, SUBTAB_STATE_COUNT * sizeof *state_counts);
	if (subtab_lock_table(seg) != 0)
		return -1;
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->entry.kind != kind || s->entry.state == SUBTAB_EMPTY)
			continue;
		if (s->entry.state < SUBTAB_STATE_COUNT)
			state_counts[s->entry.state]++;
		if (unfinished_only && s->entry.state == SUBTAB_COMMITTED)
			continue;
		if (count == size) {
			size = size == 0 ? 16 : 2 * size;
			grown = realloc(rows, size * sizeof *rows);
			if (grown == NULL) {
				subtab_unlock_table(seg);
				free(rows);
				return -1;
			}
			rows = grown;
		}
		rows[count].entry = s->entry;
		rows[count].claimed = s->claim.worker != 0 &&
		    subtab_claim_live(seg, &s->claim);
		memcpy(rows[count].key, seg->heap + s->key_offset,
		    s->entry.key_length);
		rows[count].key[s->entry.key_length] = '\0';
		count++;
	}
	subtab_unlock_table(seg);
	*rows_out = rows;
	*count_out = count;
	return 0;
}

/*
 * After a journal failure: the slots whose state rests on a record that
 * was lost (appended past lost_from, the durable position when the
 * failure came), in slot order.  A slot inserted and not yet appended
 * (SUBTAB_NOT_JOURNALED) is its claimer's, who appends it later.
 */
int
subtab_unsettled(struct shm_segment *seg, uint64_t lost_from,
    struct subtab_unsettled **rows_out, size_t *count_out)
{
	struct shm_header	*h = seg->header;
	struct subtab_unsettled	*rows = NULL, *grown;
	const struct subtab_slot *s;
	size_t			 count = 0, size = 0;
	uint32_t		 i;

	if (subtab_lock_table(seg) != 0)
		return -1;
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->journal_end <= lost_from ||
		    s->journal_end == SUBTAB_NOT_JOURNALED)
			continue;
		if (count == size) {
			size = size == 0 ? 16 : 2 * size;
			grown = realloc(rows, size * sizeof *rows);
			if (grown == NULL) {
				subtab_unlock_table(seg);
				free(rows);
				return -1;
			}
			rows = grown;
		}
		memset(&rows[count], 0, sizeof rows[count]);
		rows[count].slot = i;
		rows[count].key_length = s->entry.key_length;
		memcpy(rows[count].key, seg->heap + s->key_offset,
		    s->entry.key_length);
		count++;
	}
	subtab_unlock_table(seg);
	*rows_out = rows;
	*count_out = count;
	return 0;
}

static int
row_by_slot(const void *key, const void *member)
{
	uint32_t				 slot = *(const uint32_t *)key;
	const struct subtab_unsettled	*row = member;

	return slot < row->slot ? -1 : slot > row->slot;
}

int
subtab_settle(struct shm_segment *seg, uint64_t lost_from,
    const struct subtab_unsettled *rows, size_t count)
{
	struct shm_header		*h = seg->header;
	const struct subtab_unsettled	*row;
	struct subtab_slot		*s;
	uint64_t			 result_offset;
	uint16_t			 key_length;
	uint32_t			 i;
	int				 rc = 0;

	if (subtab_lock_table(seg) != 0)
		return -1;
	/* Every slot to settle must have its durable state looked up. */
	for (i = 0; i < h->slots_used; i++) {
		s = &seg->slots[i];
		if (s->journal_end > lost_from &&
		    s->journal_end != SUBTAB_NOT_JOURNALED &&
		    bsearch(&i, rows, count, sizeof *rows, row_by_slot) ==
		    NULL) {
			rc = 1;
			goto out;
		}
	}
	for (row = rows; row < rows + count; row++) {
		s = &seg->slots[row->slot];
		key_length = s->entry.key_length;
		if (row->durable) {
			count_state(h, s->entry.state, row->entry.state);
			/*
			 * A record gives no arena offset: an effect settled
			 * back to a committed state (which never moves on, so
			 * only its own commit could have been lost) keeps the
			 * offset of the same result's bytes.
			 */
			result_offset = s->entry.kind == SUBTAB_KIND_EFFECT &&
			    row->entry.result_length == s->entry.result_length &&
			    memcmp(row->entry.file_digest, s->entry.file_digest,
			    SHM_SHA256_BYTES) == 0 ? s->entry.result_offset : 0;
			s->entry = row->entry;
			atomic_store(&s->fast_receipt, 0);
			s->entry.key_length = key_length;
			if (s->entry.kind == SUBTAB_KIND_EFFECT)
				s->entry.result_offset = result_offset;
		} else {
			/* Never durable: as if it had never been made. */
			atomic_store(&s->fast_receipt, 0);
			if (s->entry.state != SUBTAB_EMPTY)
				h->state_counts[s->entry.state]--;
			s->entry.state = SUBTAB_EMPTY;
		}
		/*
		 * Only a durable commit is given to the index (a checkpoint
		 * waits for its copy to be durable), so a settled slot is not
		 * an indexed one; if it were, the flag would let the slot be
		 * evicted and the index serve a commit that was lost.
		 */
		if (s->entry.state != SUBTAB_COMMITTED &&
		    (atomic_fetch_and(&s->flags, ~SUBTAB_SLOT_INDEXED) &
		    SUBTAB_SLOT_INDEXED))
			h->indexed_count--;
		atomic_store(&s->state, s->entry.state);
		s->journal_end = 0;
	}
	/* In the same hold: nothing appended meanwhile is written. */
	if (handoff_reopened(seg) != 0)
		rc = -1;
out:
	subtab_unlock_table(seg);
	return rc;
}

int
subtab_state_valid(unsigned kind, unsigned state)
{
	switch (kind) {
	case SUBTAB_KIND_TASK:
	case SUBTAB_KIND_REPORT:
		return state >= SUBTAB_RESERVED && state <= SUBTAB_COMMITTED;
	case SUBTAB_KIND_EFFECT:
		return state == SUBTAB_RESERVED || state == SUBTAB_COMMITTED ||
		    state == SUBTAB_RELEASED || state == SUBTAB_OUTCOME_UNKNOWN;
	}
	return 0;
}
