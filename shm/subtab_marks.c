/* SPDX-License-Identifier: ISC */
/*
 * subtab_marks.c: which of the table's committed slots are evictable.
 * A committed entry is evictable once something else keeps it: the
 * history index (the checkpoint's and the index pass's puts, start-up's
 * index that covers the checkpoint) or, on PostgreSQL, its row (the
 * receipts and effects a broker caches: subtab_apply_cached).  Until
 * then it is the table's alone and never evicted.  It owns the mark
 * (SUBTAB_SLOT_INDEXED and the header's indexed_count), its counts and
 * the checkpoint's copy of the slots with their marks; all under the
 * table lock (subtab.c's), and no I/O.
 */
#include <string.h>

#include "shm.h"
#include "subtab_int.h"

void
subtab_mark_locked(struct shm_segment *seg, uint32_t i)
{
	struct subtab_slot	*s = &seg->slots[i];

	if (s->entry.state != SUBTAB_COMMITTED ||
	    (atomic_load(&s->flags) & SUBTAB_SLOT_INDEXED))
		return;
	atomic_fetch_or(&s->flags, SUBTAB_SLOT_INDEXED);
	seg->header->indexed_count++;
}

uint32_t
subtab_copy_flags(struct shm_segment *seg, uint32_t from, uint32_t max,
    struct subtab_entry *entries, char (*keys)[SUBTAB_MAX_KEY_BYTES],
    uint32_t *flags)
{
	const struct subtab_slot	*s;
	uint32_t			 n = 0;

	if (subtab_lock_table(seg) != 0)
		return 0;
	for (; n < max && from + n < seg->header->slots_used; n++) {
		s = &seg->slots[from + n];
		entries[n] = s->entry;
		flags[n] = atomic_load(&s->flags);
		memcpy(keys[n], seg->heap + s->key_offset, s->entry.key_length);
	}
	subtab_unlock_table(seg);
	return n;
}

void
subtab_mark_indexed(struct shm_segment *seg, const uint32_t *slots,
    size_t count)
{
	size_t	i;

	if (subtab_lock_table(seg) != 0)
		return;
	for (i = 0; i < count; i++)
		subtab_mark_locked(seg, slots[i]);
	subtab_unlock_table(seg);
}

void
subtab_mark_all_indexed(struct shm_segment *seg)
{
	uint32_t	i;

	if (subtab_lock_table(seg) != 0)
		return;
	for (i = 0; i < seg->header->slots_used; i++)
		subtab_mark_locked(seg, i);
	subtab_unlock_table(seg);
}

/*
 * Under the table lock, although only a hint: the counters are plain
 * fields that every insert and checkpoint writes, and a read beside
 * those writes is a data race (ThreadSanitizer saw the journaler's read
 * meet the checkpoint's subtab_mark_indexed).  Once a journal round.
 */
uint32_t
subtab_unindexed(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	uint32_t		 committed, indexed;

	if (subtab_lock_table(seg) != 0)
		return 0;
	committed = h->state_counts[SUBTAB_COMMITTED];
	indexed = h->indexed_count;
	subtab_unlock_table(seg);
	return committed > indexed ? committed - indexed : 0;
}
