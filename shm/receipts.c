/* SPDX-License-Identifier: ISC */
/*
 * receipts.c: the receipt store of the retry fast path (fastpath.c), a
 * ring (ring.c) of stored replies, each named by its slot's
 * fast_receipt; a new one overwrites the oldest, every byte being
 * reclaimable (a cache).  Puts hold the table lock; gets take none.  No
 * I/O.
 */
#include <errno.h>
#include <string.h>

#include "shm.h"
#include "subtab_int.h"

/*
 * The position a slot's 32-bit name stands for: the nearest one behind
 * the head with those low bits (the name was published after the head
 * passed the record; one written 32 GiB ago is long overwritten, and
 * its header would not match).
 */
static uint64_t
receipt_position(struct shm_header *h, uint32_t name)
{
	uint64_t	head8 = atomic_load_explicit(&h->receipts_head,
	    memory_order_relaxed) / 8;

	return (head8 - (uint32_t)((uint32_t)head8 - name)) * 8;
}

static int
receipt_copy(struct shm_segment *seg, uint32_t slot, uint32_t name,
    void *out, size_t *length)
{
	struct shm_header	*h = seg->header;
	struct ring_header	 hdr;
	uint8_t			 buf[SHM_RECEIPT_MAX_BYTES];
	uint64_t		 pos = receipt_position(h, name);

	/* The header first, for the length; then all of it again. */
	if (ring_read(seg->receipts, h->receipts_bytes, &h->receipts_head,
	    &h->receipts_tail, pos, &hdr, NULL, 0) != 0 ||
	    hdr.slot != slot || hdr.length == 0 ||
	    hdr.length > SHM_RECEIPT_MAX_BYTES)
		return 0;
	*length = hdr.length;
	if (ring_read(seg->receipts, h->receipts_bytes, &h->receipts_head,
	    &h->receipts_tail, pos, &hdr, out != NULL ? out : buf,
	    *length) != 0 || hdr.slot != slot || hdr.length != *length)
		return 0;
	return 1;
}

/*
 * Whether the slot still holds the entry a reply was built from, not
 * only its key: between the caller's look and the lock the entry may
 * have been evicted, purged and its key taken by a new submission or
 * effect, committed in the same slot.  The reservation's date and
 * number (a task), the attempt and the result's length and place (an
 * effect), the commit's time and the request's digest tell them apart.
 */
static int
receipt_entry_same(const struct subtab_entry *s, const struct subtab_entry *e)
{
	if (s->kind != e->kind || s->date != e->date || s->seq != e->seq ||
	    s->created_at_ms != e->created_at_ms ||
	    memcmp(s->request_digest, e->request_digest,
	    sizeof s->request_digest) != 0)
		return 0;
	/* date and seq share their bytes with attempt and result_length. */
	return s->kind != SUBTAB_KIND_EFFECT ||
	    s->result_offset == e->result_offset;
}

/*
 * Reserve and copy under the table lock, then name the bytes in the
 * slot with one store: a reader that sees the name sees the bytes.
 */
int
receipts_put(struct shm_segment *seg, uint32_t slot, const char *key,
    size_t key_length, const struct subtab_entry *built, const void *data,
    size_t length)
{
	struct shm_header	*h = seg->header;
	struct subtab_slot	*s;
	struct ring_header	 hdr;
	uint64_t		 n, pos, size = h->receipts_bytes;
	uint32_t		 name;
	size_t			 had;
	int			 pad, rc = -1;

	n = ring_round(SHM_RING_RECORD_HEADER_BYTES + length);
	if (length == 0 || length > SHM_RECEIPT_MAX_BYTES || n > size) {
		errno = EINVAL;
		return -1;
	}
	if (subtab_lock_table(seg) != 0)
		return -1;
	if (slot >= h->slots_used)
		errno = EINVAL;
	else if ((s = &seg->slots[slot])->entry.state != SUBTAB_COMMITTED ||
	    s->entry.key_length != key_length ||
	    memcmp(seg->heap + s->key_offset, key, key_length) != 0 ||
	    !receipt_entry_same(&s->entry, built))
		errno = EINVAL;
	else if ((name = atomic_load(&s->fast_receipt)) != 0 &&
	    receipt_copy(seg, slot, name, NULL, &had))
		errno = EEXIST;
	else {
		/*
		 * A position whose name would be 0 (none) is skipped.  No
		 * pad is written at a lap's end: nothing walks this ring.
		 */
		for (pos = atomic_load(&h->receipts_head);;) {
			pos = ring_place(pos, n, size, &pad);
			if ((uint32_t)(pos / 8) != 0)
				break;
			pos += 8;
		}
		/* Every byte may go: the store is a cache. */
		ring_advance(&h->receipts_tail, pos + n > size ?
		    pos + n - size : 0);
		hdr.pos = pos;
		hdr.slot = slot;
		hdr.length = (uint32_t)length;
		ring_store(seg->receipts, pos % size, &hdr, sizeof hdr);
		ring_store(seg->receipts, pos % size +
		    SHM_RING_RECORD_HEADER_BYTES, data, length);
		atomic_store_explicit(&h->receipts_head, pos + n,
		    memory_order_relaxed);
		atomic_store_explicit(&s->fast_receipt, (uint32_t)(pos / 8),
		    memory_order_release);
		rc = 0;
	}
	subtab_unlock_table(seg);
	return rc;
}

int
receipts_get(struct shm_segment *seg, uint32_t slot, void *out,
    size_t *length)
{
	uint32_t	name;

	if (slot >= seg->header->capacity)
		return 0;
	name = atomic_load_explicit(&seg->slots[slot].fast_receipt,
	    memory_order_acquire);
	if (name == 0)
		return 0;
	return receipt_copy(seg, slot, name, out, length);
}

uint64_t
receipts_used(const struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;

	return ring_used(&h->receipts_head, &h->receipts_tail,
	    h->receipts_bytes);
}
