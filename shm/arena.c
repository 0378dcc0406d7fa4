/* SPDX-License-Identifier: ISC */
/*
 * arena.c: the result arena, the ring (ring.c) where committed effects
 * keep their results' bytes, a cache of the index's; arena_put and
 * arena_read are the only way to them.  Space is reserved under the
 * table lock and the oldest records are overwritten only when no slot
 * needs them any more (arena_reclaimable); a read takes no lock.  No
 * I/O.
 */
#include <errno.h>

#include "shm.h"
#include "subtab_int.h"

/*
 * May the arena record hdr (at pos) be overwritten, for a put by the
 * claimer of slot self (ARENA_NO_SLOT: the scout, or a replay)?  Yes if
 * no slot names it (its owner gone, evicted, or naming another result)
 * or the slot naming it is durable in the index; no while its slot
 * holds a live claim without naming it yet (a commit on its way to the
 * journal), unless that claim is the putter's own: the one commit a
 * claimer has on its way is the put it is making now, so a record of
 * its slot that the slot does not name is an earlier occupant's (the
 * slot was evicted and reused) or an earlier put that never committed.
 * Without that, a completion whose slot had held the oldest result
 * waited on its own claim until it gave up (issue 27).
 */
static int
arena_reclaimable(struct shm_segment *seg, uint64_t pos,
    const struct ring_header *hdr, uint32_t self)
{
	struct subtab_slot	*s;
	int			 names;

	if (hdr->slot >= seg->header->slots_used)
		return 1;
	s = &seg->slots[hdr->slot];
	names = s->entry.kind == SUBTAB_KIND_EFFECT &&
	    s->entry.state == SUBTAB_COMMITTED &&
	    s->entry.result_length == hdr->length &&
	    s->entry.result_offset == pos + SHM_RING_RECORD_HEADER_BYTES;
	if (names)
		return (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED) != 0;
	return hdr->slot == self || s->claim.worker == 0 ||
	    !subtab_claim_live(seg, &s->claim);
}

/*
 * The scout walks the records half an arena ahead of the tail: a result
 * not yet in the index there asks for the index's puts (checkpoint_wanted:
 * an index pass, journaler.c), which will have made it reclaimable
 * (indexed) by the time the tail reaches it.
 *
 * It waits while a checkpoint or an index pass runs (checkpoint_running):
 * the results it would pass then were committed long before (half an
 * arena ago) and are in the work under way, but not yet marked indexed,
 * so each asked for another at once; when these were checkpoints, that
 * copied the whole table again for the few commits made meanwhile (two
 * checkpoints tens of milliseconds apart, each a copy of the table;
 * doc/effects.md, "How fast").  Once it is done the scout walks on from
 * where it stopped and asks for what it left.
 */
static void
arena_scout(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;
	uint64_t		 head = atomic_load(&h->arena_head);
	uint64_t		 size = h->arena_bytes, at;

	if (atomic_load(&h->checkpoint_running))
		return;

	if (h->arena_scout < atomic_load(&h->arena_tail))
		h->arena_scout = atomic_load(&h->arena_tail);
	while (h->arena_scout < head && head - h->arena_scout > size / 2) {
		at = h->arena_scout % size;
		if (size - at < SHM_RING_RECORD_HEADER_BYTES) {
			h->arena_scout += size - at;
			continue;
		}
		ring_load(seg->arena, at, &hdr, sizeof hdr);
		if (hdr.pos != h->arena_scout && at == 0)
			break;	/* not a record: never so, unless damaged */
		if (hdr.pos != h->arena_scout || hdr.slot == RING_PAD_SLOT) {
			h->arena_scout += size - at;
			continue;
		}
		if (!arena_reclaimable(seg, hdr.pos, &hdr, ARENA_NO_SLOT))
			atomic_store(&h->checkpoint_wanted, 1);
		h->arena_scout += ring_round(SHM_RING_RECORD_HEADER_BYTES +
		    hdr.length);
	}
}

/*
 * Make room for a record of n bytes: move the tail past every record
 * the new one will overwrite, each of which must be reclaimable.  The
 * record's position, or UINT64_MAX (ENOSPC: an index pass is asked for).
 */
static uint64_t
arena_reserve(struct shm_segment *seg, uint32_t self, uint64_t n)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;
	uint64_t		 size = h->arena_bytes;
	uint64_t		 head = atomic_load(&h->arena_head);
	uint64_t		 tail = atomic_load(&h->arena_tail);
	uint64_t		 pos, need, at;
	int			 pad;

	pos = ring_place(head, n, size, &pad);
	need = pos + n > size ? pos + n - size : 0;
	while (tail < need) {
		if (tail >= head) {
			tail = pos;	/* everything written is reclaimed */
			break;
		}
		at = tail % size;
		if (size - at < SHM_RING_RECORD_HEADER_BYTES) {
			tail += size - at;
			continue;
		}
		ring_load(seg->arena, at, &hdr, sizeof hdr);
		if (hdr.pos != tail || hdr.slot == RING_PAD_SLOT) {
			/* A pad: the rest of the lap is unused. */
			tail += size - at;
			continue;
		}
		if (!arena_reclaimable(seg, tail, &hdr, self)) {
			ring_advance(&h->arena_tail, tail);
			atomic_store(&h->checkpoint_wanted, 1);
			errno = ENOSPC;
			return UINT64_MAX;
		}
		tail += ring_round(SHM_RING_RECORD_HEADER_BYTES + hdr.length);
	}
	ring_advance(&h->arena_tail, tail);
	if (pad) {
		hdr.pos = head;
		hdr.slot = RING_PAD_SLOT;
		hdr.length = 0;
		ring_store(seg->arena, head % size, &hdr, sizeof hdr);
	}
	return pos;
}

static int
arena_place(struct shm_segment *seg, uint32_t slot, size_t length,
    uint64_t *pos)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;
	uint64_t		 n = ring_round(SHM_RING_RECORD_HEADER_BYTES +
	    length);

	if (length == 0 || n > h->arena_bytes) {
		errno = EINVAL;
		return -1;
	}
	if ((*pos = arena_reserve(seg, slot, n)) == UINT64_MAX)
		return -1;
	hdr.pos = *pos;
	hdr.slot = slot;
	hdr.length = (uint32_t)length;
	ring_store(seg->arena, *pos % h->arena_bytes, &hdr, sizeof hdr);
	atomic_store_explicit(&h->arena_head, *pos + n, memory_order_release);
	arena_scout(seg);
	return 0;
}

int
arena_put_unlocked(struct shm_segment *seg, uint32_t slot, const void *data,
    size_t length, uint64_t *offset)
{
	uint64_t	pos;

	if (arena_place(seg, slot, length, &pos) != 0)
		return -1;
	ring_store(seg->arena, (pos + SHM_RING_RECORD_HEADER_BYTES) %
	    seg->header->arena_bytes, data, length);
	*offset = pos + SHM_RING_RECORD_HEADER_BYTES;
	return 0;
}

void
arena_own(struct shm_segment *seg, uint64_t offset, uint32_t slot)
{
	struct ring_header	hdr;
	uint64_t		at;

	if (offset < SHM_RING_RECORD_HEADER_BYTES)
		return;
	at = (offset - SHM_RING_RECORD_HEADER_BYTES) % seg->header->arena_bytes;
	ring_load(seg->arena, at, &hdr, sizeof hdr);
	if (hdr.pos != offset - SHM_RING_RECORD_HEADER_BYTES)
		return;
	hdr.slot = slot;
	ring_store(seg->arena, at, &hdr, sizeof hdr);
}

/*
 * Reserve under the table lock, copy outside it: a writer that dies
 * between the two leaves bytes nobody points at, never a torn result
 * that a slot names (a slot names it only after the copy).  The tail
 * does not pass them meanwhile: their slot is claimed by the writer.
 */
int
arena_put(struct shm_segment *seg, uint32_t slot, const void *data,
    size_t length, uint64_t *offset)
{
	uint64_t	pos;
	int		rc;

	if (subtab_lock_table(seg) != 0)
		return -1;
	rc = arena_place(seg, slot, length, &pos);
	subtab_unlock_table(seg);
	if (rc != 0)
		return -1;
	ring_store(seg->arena, (pos + SHM_RING_RECORD_HEADER_BYTES) %
	    seg->header->arena_bytes, data, length);
	*offset = pos + SHM_RING_RECORD_HEADER_BYTES;
	return 0;
}

/*
 * A cached result (shm.h): its record owned by no slot (ARENA_NO_SLOT,
 * reclaimable at once: the slot that names it is evictable too), so the
 * tail may pass it as soon as the lock is let go, and a copy made after
 * that could land on the next record's bytes: it is made under the lock.
 */
int
arena_put_cached(struct shm_segment *seg, const void *data, size_t length,
    uint64_t *offset)
{
	int	rc;

	if (subtab_lock_table(seg) != 0)
		return -1;
	rc = arena_put_unlocked(seg, ARENA_NO_SLOT, data, length, offset);
	subtab_unlock_table(seg);
	return rc;
}

int
arena_read(struct shm_segment *seg, uint64_t offset, size_t length,
    void *out)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;

	if (length == 0)
		return 0;
	if (offset < SHM_RING_RECORD_HEADER_BYTES ||
	    ring_read(seg->arena, h->arena_bytes, &h->arena_head,
	    &h->arena_tail, offset - SHM_RING_RECORD_HEADER_BYTES, &hdr, out,
	    length) != 0 || hdr.length != length)
		return -1;
	return 0;
}

/*
 * arena_read's answer without its copy: the record's header read and
 * checked as ring_read checks it (the tail not past it afterwards), and
 * its bytes within the head and the lap.  A tail not past the header's
 * position is not past the bytes behind it: the tail only moves on.
 */
int
arena_holds(struct shm_segment *seg, uint64_t offset, size_t length)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;
	uint64_t		 pos;

	if (length == 0)
		return 0;
	if (offset < SHM_RING_RECORD_HEADER_BYTES)
		return -1;
	pos = offset - SHM_RING_RECORD_HEADER_BYTES;
	if (offset + length > atomic_load_explicit(&h->arena_head,
	    memory_order_acquire) ||
	    pos % h->arena_bytes + SHM_RING_RECORD_HEADER_BYTES + length >
	    h->arena_bytes ||
	    ring_read(seg->arena, h->arena_bytes, &h->arena_head,
	    &h->arena_tail, pos, &hdr, NULL, 0) != 0 || hdr.length != length)
		return -1;
	return 0;
}

uint64_t
arena_used(const struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;

	return ring_used(&h->arena_head, &h->arena_tail, h->arena_bytes);
}
