/* SPDX-License-Identifier: ISC */
/*
 * subtab.c: the submission table.  Fixed slots, filled in order and
 * never freed; an open-addressing index of buckets (slot index + 1, 0 for
 * empty) sized to at least twice the capacity, so probes stay short; a
 * heap holding the keys; and the result arena, where committed effects
 * keep their results' bytes (arena_put, arena_get: the only way to
 * them).  Everything here runs under the table lock and does no I/O.
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

static int
lock_table(struct shm_segment *seg)
{
	return shm_lock(seg, &seg->header->table_lock, subtab_repair, "table");
}

static void
unlock_table(struct shm_segment *seg)
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
 * A slot to reuse for a key of length bytes: a free one (evicted, its
 * new key never written), else a committed slot durable in the index,
 * by the clock's second chance (a slot looked up since the hand last
 * passed is skipped once).  Never a slot in flight, claimed or waited
 * for.  UINT32_MAX if there is none.
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
		flags = atomic_load(&s->flags);
		if (!(flags & SUBTAB_SLOT_INDEXED) ||
		    s->entry.state != SUBTAB_COMMITTED)
			continue;
		if (flags & SUBTAB_SLOT_USED) {
			atomic_fetch_and(&s->flags, ~(uint32_t)SUBTAB_SLOT_USED);
			continue;
		}
		return i;
	}
	return UINT32_MAX;
}

/*
 * A slot and key space for a new key: the next unused slot, or a free or
 * evicted one (left free: insert fills it).  UINT32_MAX if none.
 */
static uint32_t
take_slot(struct shm_segment *seg, size_t length)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint32_t		 victim;

	if (h->slots_used < h->capacity &&
	    h->heap_used + key_room(length) <= h->heap_bytes)
		return h->slots_used;
	if (h->indexed_count == 0 && h->free_count == 0)
		return UINT32_MAX;
	if ((victim = find_victim(seg, length)) == UINT32_MAX)
		return UINT32_MAX;
	s = &seg->slots[victim];
	if (s->entry.key_length == 0)
		return victim;
	h->evicting = 1;
	unlink_bucket(seg, victim);
	s->entry.key_length = 0;
	h->state_counts[SUBTAB_COMMITTED]--;
	h->indexed_count--;
	h->free_count++;
	s->journal_end = 0;
	atomic_store(&s->state, SUBTAB_EMPTY);
	atomic_store(&s->flags, 0);
	h->evicting = 0;
	atomic_fetch_add(&h->evictions, 1);
	return victim;
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
		s->key_offset = h->heap_used;
		s->key_room = (uint16_t)key_room(length);
		h->heap_used += s->key_room;
	}
	if (!fresh)
		h->free_count--;
	memcpy(seg->heap + s->key_offset, key, length);
	s->key_hash = hash;
	s->entry = *entry;
	atomic_store(&s->fast_receipt, 0);
	s->entry.key_length = (uint16_t)length;
	if (claim != NULL)
		s->claim = *claim;
	else
		memset(&s->claim, 0, sizeof s->claim);
	atomic_store(&s->waiters, 0);
	atomic_store(&s->flags, 0);
	/* A reservation is not in the journal until its claimer records it. */
	s->journal_end = claim != NULL ? SUBTAB_NOT_JOURNALED : 0;
	atomic_store(&s->state, entry->state);
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
	enum subtab_verdict	 verdict;
	uint32_t		 hash, bucket, slot, index;

	hash = hash_key(seg, a->key, a->key_length);
	if (lock_table(seg) != 0)
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
		if ((index = take_slot(seg, a->key_length)) == UINT32_MAX) {
			atomic_store(&seg->header->checkpoint_wanted, 1);
			verdict = SUBTAB_FULL;
			goto out;
		}
		/* An eviction may have moved the empty bucket found. */
		if (index != seg->header->slots_used)
			bucket = probe(seg, hash, a->key, a->key_length, &slot);
		entry = a->want;
		entry.state = SUBTAB_RESERVED;
		/*
		 * An effect takes no number: attempt and fence are the op's.
		 * A failure leaves an evicted slot free, for the next key.
		 */
		if (entry.kind != SUBTAB_KIND_EFFECT &&
		    seqalloc_next(seg, entry.kind, a->today, a->scan,
		    a->scan_arg, &entry.date, &entry.seq) != 0) {
			verdict = SUBTAB_ALLOC_FAILED;
			goto out;
		}
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
	unlock_table(seg);
	return verdict;
}

enum subtab_verdict
subtab_claim_key(struct shm_segment *seg, struct subtab_acquire *a)
{
	struct subtab_slot	*s;
	enum subtab_verdict	 verdict;
	uint32_t		 hash, slot;

	hash = hash_key(seg, a->key, a->key_length);
	if (lock_table(seg) != 0)
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
	unlock_table(seg);
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

	if (lock_table(seg) != 0)
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
	unlock_table(seg);
	return rc;
}

int
subtab_release(struct shm_segment *seg, uint32_t slot,
    const struct subtab_claim *claim)
{
	struct subtab_slot	*s = &seg->slots[slot];
	int			 wake = 0;

	if (lock_table(seg) != 0)
		return 1;	/* waking for nothing is harmless */
	if (claim_equal(&s->claim, claim)) {
		memset(&s->claim, 0, sizeof s->claim);
		wake = atomic_exchange(&s->waiters, 0) != 0;
	}
	unlock_table(seg);
	return wake;
}

int
subtab_lookup(struct shm_segment *seg, const char *key, size_t length,
    struct subtab_entry *entry, uint32_t *slot_out)
{
	uint32_t	hash, slot;

	hash = hash_key(seg, key, length);
	if (lock_table(seg) != 0)
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
	unlock_table(seg);
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
	struct subtab_slot	*s;
	uint32_t		 bucket, slot, index;
	uint16_t		 key_length;

	if (length == 0 || length > SUBTAB_MAX_KEY_BYTES ||
	    !subtab_state_valid(entry->kind, entry->state)) {
		errno = EINVAL;
		return -1;
	}
	if (lock_table(seg) != 0)
		return -1;
	bucket = probe(seg, hash, key, length, &slot);
	if (slot == UINT32_MAX) {
		if ((index = take_slot(seg, length)) == UINT32_MAX) {
			unlock_table(seg);
			errno = ENOSPC;
			return -1;
		}
		if (index != seg->header->slots_used)
			bucket = probe(seg, hash, key, length, &slot);
		insert(seg, index, bucket, hash, key, length, entry, NULL);
	} else {
		s = &seg->slots[slot];
		key_length = s->entry.key_length;
		count_state(seg->header, s->entry.state, entry->state);
		s->entry = *entry;
		atomic_store(&s->fast_receipt, 0);
		s->entry.key_length = key_length;
		atomic_store(&s->state, entry->state);
	}
	unlock_table(seg);
	return 0;
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
	if (lock_table(seg) != 0)
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
				unlock_table(seg);
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
	unlock_table(seg);
	*rows_out = rows;
	*count_out = count;
	return 0;
}

uint32_t
subtab_copy_flags(struct shm_segment *seg, uint32_t from, uint32_t max,
    struct subtab_entry *entries, char (*keys)[SUBTAB_MAX_KEY_BYTES],
    uint32_t *flags)
{
	const struct subtab_slot	*s;
	uint32_t			 n = 0;

	if (lock_table(seg) != 0)
		return 0;
	for (; n < max && from + n < seg->header->slots_used; n++) {
		s = &seg->slots[from + n];
		entries[n] = s->entry;
		flags[n] = atomic_load(&s->flags);
		memcpy(keys[n], seg->heap + s->key_offset, s->entry.key_length);
	}
	unlock_table(seg);
	return n;
}

void
subtab_mark_indexed(struct shm_segment *seg, const uint32_t *slots,
    size_t count)
{
	struct subtab_slot	*s;
	size_t			 i;

	if (lock_table(seg) != 0)
		return;
	for (i = 0; i < count; i++) {
		s = &seg->slots[slots[i]];
		/* Unindexed committed slots are never evicted: still ours. */
		if (s->entry.state != SUBTAB_COMMITTED ||
		    (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED))
			continue;
		atomic_fetch_or(&s->flags, SUBTAB_SLOT_INDEXED);
		seg->header->indexed_count++;
	}
	unlock_table(seg);
}

void
subtab_mark_all_indexed(struct shm_segment *seg)
{
	uint32_t	i;

	if (lock_table(seg) != 0)
		return;
	for (i = 0; i < seg->header->slots_used; i++) {
		if (seg->slots[i].entry.state != SUBTAB_COMMITTED ||
		    (atomic_load(&seg->slots[i].flags) & SUBTAB_SLOT_INDEXED))
			continue;
		atomic_fetch_or(&seg->slots[i].flags, SUBTAB_SLOT_INDEXED);
		seg->header->indexed_count++;
	}
	unlock_table(seg);
}

uint32_t
subtab_unindexed(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	uint32_t		 committed = h->state_counts[SUBTAB_COMMITTED];

	return committed > h->indexed_count ? committed - h->indexed_count :
	    0;
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

	if (lock_table(seg) != 0)
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
				unlock_table(seg);
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
	unlock_table(seg);
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

	if (lock_table(seg) != 0)
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
		atomic_store(&s->state, s->entry.state);
		s->journal_end = 0;
	}
	/* In the same hold: nothing appended meanwhile is written. */
	if (handoff_reopened(seg) != 0)
		rc = -1;
out:
	unlock_table(seg);
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

/* ---- The result arena ---------------------------------------------------- */

int
arena_put_unlocked(struct shm_segment *seg, const void *data, size_t length,
    uint64_t *offset)
{
	struct shm_header	*h = seg->header;

	if (length > h->arena_bytes - h->arena_used) {
		errno = ENOSPC;
		return -1;
	}
	*offset = h->arena_used;
	memcpy(seg->arena + *offset, data, length);
	h->arena_used += length;
	return 0;
}

/*
 * Reserve under the table lock, copy outside it: a writer that dies
 * between the two leaves bytes nobody points at, never a torn result
 * that a slot names (a slot names it only after the copy).
 */
int
arena_put(struct shm_segment *seg, const void *data, size_t length,
    uint64_t *offset)
{
	struct shm_header	*h = seg->header;

	if (lock_table(seg) != 0)
		return -1;
	if (length > h->arena_bytes - h->arena_used) {
		unlock_table(seg);
		errno = ENOSPC;
		return -1;
	}
	*offset = h->arena_used;
	h->arena_used += length;
	unlock_table(seg);
	memcpy(seg->arena + *offset, data, length);
	return 0;
}

const uint8_t *
arena_get(struct shm_segment *seg, uint64_t offset, size_t length)
{
	struct shm_header	*h = seg->header;

	if (offset > h->arena_bytes || length > h->arena_bytes - offset)
		return NULL;
	return seg->arena + offset;
}

/* ---- The receipt store of the fast path -------------------------------- */

#define RECEIPT_LENGTH_BITS	16
_Static_assert(SHM_RECEIPT_MAX_BYTES < (1 << RECEIPT_LENGTH_BITS),
    "a stored reply's length fits its bits");

/*
 * Reserve and copy under the table lock, then name the bytes in the
 * slot with one store: a reader that sees the name sees the bytes.
 */
int
receipts_put(struct shm_segment *seg, uint32_t slot, const void *data,
    size_t length)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	uint64_t		 offset;
	int			 rc = -1;

	if (length == 0 || length > SHM_RECEIPT_MAX_BYTES) {
		errno = EINVAL;
		return -1;
	}
	if (lock_table(seg) != 0)
		return -1;
	if (slot >= h->slots_used)
		errno = EINVAL;
	else if ((s = &seg->slots[slot])->entry.state != SUBTAB_COMMITTED)
		errno = EINVAL;
	else if (atomic_load(&s->fast_receipt) != 0)
		errno = EEXIST;
	else if (length > h->receipts_bytes - h->receipts_used)
		errno = ENOSPC;
	else {
		offset = h->receipts_used;
		memcpy(seg->receipts + offset, data, length);
		h->receipts_used += length;
		atomic_store_explicit(&s->fast_receipt,
		    offset << RECEIPT_LENGTH_BITS | length,
		    memory_order_release);
		rc = 0;
	}
	unlock_table(seg);
	return rc;
}

const uint8_t *
receipts_get(struct shm_segment *seg, uint32_t slot, size_t *length)
{
	struct shm_header	*h = seg->header;
	uint64_t		 v, offset;

	if (slot >= h->capacity)
		return NULL;
	v = atomic_load_explicit(&seg->slots[slot].fast_receipt,
	    memory_order_acquire);
	if (v == 0)
		return NULL;
	offset = v >> RECEIPT_LENGTH_BITS;
	*length = v & ((1u << RECEIPT_LENGTH_BITS) - 1);
	if (offset > h->receipts_bytes || *length > h->receipts_bytes - offset)
		return NULL;
	return seg->receipts + offset;
}
