/* SPDX-License-Identifier: ISC */
/*
 * seqalloc.c: task and report numbers.  Per kind, the latest date and
 * the next number for it.  A number is handed out once: the counter only
 * grows, replay feeds it every number the journal has seen, and the
 * first allocation for a date skips whatever other FCoP writers already
 * put on disk for it (the caller's scan function; the only I/O done
 * under a lock of the segment, once per date).
 *
 * Numbers stop at alloc_max_seq (999 by default: FCoP's names carry
 * three digits).  A date whose numbers are used up answers ERANGE and
 * hands out nothing, so the caller reserves and writes nothing; the
 * counter stays past the limit, and the next date starts again at 1.
 *
 * The date never goes backwards: if the clock steps back across
 * midnight, numbers keep coming from the later date, which is never a
 * collision, only a slightly wrong date.
 */
#include <errno.h>

#include "shm.h"

int
seqalloc_repair(struct shm_segment *seg)
{
	/* Every change is a single store; nothing can be half done. */
	return 0;
}

int
seqalloc_next(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t today, seqalloc_scan_fn scan, void *arg, uint32_t *date,
    uint32_t *seq)
{
	struct seqalloc_state	*st;
	uint32_t		 on_disk = 0, max;
	int			 rc = -1;

	if (kind < 1 || kind > SUBTAB_KIND_COUNT) {
		errno = EINVAL;
		return -1;
	}
	if (shm_lock(seg, &seg->header->alloc_lock, seqalloc_repair,
	    "allocator") != 0)
		return -1;
	st = &seg->header->alloc[kind - 1];
	if (today > st->date) {
		st->date = today;
		st->next_seq = 1;
	}
	if (st->scanned_date != st->date && scan != NULL) {
		if (scan(kind, st->date, &on_disk, arg) != 0)
			goto out;
		if (on_disk >= st->next_seq)
			st->next_seq = on_disk + 1;
		st->scanned_date = st->date;
	}
	max = seg->header->alloc_max_seq != 0 ?
	    seg->header->alloc_max_seq : SEQALLOC_DEFAULT_MAX;
	if (st->next_seq > max) {
		errno = ERANGE;
		goto out;
	}
	*date = st->date;
	*seq = st->next_seq++;
	rc = 0;
out:
	shm_unlock(&seg->header->alloc_lock);
	return rc;
}

/*
 * A number another FCoP writer used for the current date, seen after the
 * start-up scan (the master watches the directories): skip it too.
 */
void
seqalloc_note_seen(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	struct seqalloc_state	*st;

	if (kind < 1 || kind > SUBTAB_KIND_COUNT)
		return;
	if (shm_lock(seg, &seg->header->alloc_lock, seqalloc_repair,
	    "allocator") != 0)
		return;
	st = &seg->header->alloc[kind - 1];
	if (date == st->date && seq >= st->next_seq)
		st->next_seq = seq + 1;
	shm_unlock(&seg->header->alloc_lock);
}

void
seqalloc_note_used(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	struct seqalloc_state	*st;

	if (kind < 1 || kind > SUBTAB_KIND_COUNT)
		return;
	st = &seg->header->alloc[kind - 1];
	if (date > st->date) {
		st->date = date;
		st->next_seq = seq + 1;
	} else if (date == st->date && seq >= st->next_seq)
		st->next_seq = seq + 1;
}
