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
 *
 * Late sightings.  A file another writer makes with a number at or past
 * next_seq only moves the counter on.  One with a number already past
 * may bear a name idem handed out and has not linked yet: its bit is set
 * in the kind's bitmap for the current date (the segment's sighted
 * region), and the link-time name check (watch.c) walks the workspace
 * only for a number whose bit is set.  Every number idem hands out is
 * past every number seen before it, so a name whose bit is clear exists
 * in no watched directory, as far as the events read so far tell.
 *
 * The day's highest number on disk (the PostgreSQL store's claims,
 * doc/cluster.md, "Claim").  There the numbers come from the database;
 * what the broker needs is only the highest number other writers used
 * on disk that day.  Kept per kind beside the allocator (disk[]): a scan
 * for the date, then every sighting of that date moves it on, for as
 * long as no refresh of the watch began (a refresh means events were
 * lost or a directory came that the scan did not see: scan again).
 */
#include <errno.h>
#include <string.h>

#include "shm.h"

/* idemd's numbers have at most six digits (--sequence-digits). */
_Static_assert(SEQALLOC_SIGHTED_BITS > 999999, "a bit for every number");

static void	seqalloc_note_disk_locked(struct shm_segment *,
		    enum subtab_kind, uint32_t, uint32_t);

int
seqalloc_repair(struct shm_segment *seg)
{
	/*
	 * The allocator's own changes are single stores.  What the watch
	 * keeps is not: a holder may have died after read(2) took events
	 * from the inotify queue and before noting them (lost for good),
	 * or between the stores of a disk[] entry or of a refresh.  So the
	 * watch is refreshed by the next reader of its queue, which
	 * re-reads every watched directory and, by moving watch_refreshes
	 * on, makes the next claim of every kind scan again.
	 */
	seg->header->watch_refreshing = 1;
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

int
seqalloc_lock(struct shm_segment *seg)
{
	return shm_lock(seg, &seg->header->alloc_lock, seqalloc_repair,
	    "allocator");
}

void
seqalloc_unlock(struct shm_segment *seg)
{
	shm_unlock(&seg->header->alloc_lock);
}

static uint8_t *
seqalloc_bitmap(struct shm_segment *seg, enum subtab_kind kind)
{
	return seg->sighted + (size_t)(kind - 1) * SEQALLOC_SIGHTED_BYTES;
}

/*
 * A number another FCoP writer used for the current date, seen after the
 * start-up scan (the watch on the directories): skip it too, or, if it
 * is already past, note the sighting.
 */
void
seqalloc_note_seen_locked(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	struct seqalloc_state	*st;
	uint8_t			*bits;

	if (kind < 1 || kind > SUBTAB_KIND_COUNT)
		return;
	seqalloc_note_disk_locked(seg, kind, date, seq);
	st = &seg->header->alloc[kind - 1];
	if (date != st->date)
		return;		/* older: walked; newer: scanned when due */
	if (seq >= st->next_seq) {
		st->next_seq = seq + 1;
		return;
	}
	if (seq >= SEQALLOC_SIGHTED_BITS)
		return;		/* never handed out */
	bits = seqalloc_bitmap(seg, kind);
	if (st->sighted_date != st->date) {
		/* Once a date: the bitmap held an older one. */
		memset(bits, 0, SEQALLOC_SIGHTED_BYTES);
		st->sighted_date = st->date;
	}
	bits[seq / 8] |= (uint8_t)(1u << (seq % 8));
}

/* A sighting for the day's highest number on disk. */
static void
seqalloc_note_disk_locked(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	struct seqalloc_disk	*dk = &seg->header->disk[kind - 1];

	if (date == dk->date && seq > dk->max_seq)
		dk->max_seq = seq;
}

int
seqalloc_disk_max_locked(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, seqalloc_scan_fn scan, void *arg, uint32_t *max_seq,
    int *scanned)
{
	struct seqalloc_disk	*dk;
	uint32_t		 found = 0;

	*scanned = 0;
	if (kind < 1 || kind > SUBTAB_KIND_COUNT) {
		errno = EINVAL;
		return -1;
	}
	dk = &seg->header->disk[kind - 1];
	if (dk->date != date || dk->refresh != seg->header->watch_refreshes) {
		/*
		 * Under the lock, so that a sighting read meanwhile cannot
		 * be overwritten by the scan's result: whatever is created
		 * from now on is either in the scan or in the queue.
		 */
		if (scan(kind, date, &found, arg) != 0)
			return -1;
		*scanned = 1;
		dk->date = date;
		dk->max_seq = found;
		dk->refresh = seg->header->watch_refreshes;
	}
	*max_seq = dk->max_seq;
	return 0;
}

void
seqalloc_note_seen(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	if (seqalloc_lock(seg) != 0)
		return;
	seqalloc_note_seen_locked(seg, kind, date, seq);
	seqalloc_unlock(seg);
}

int
seqalloc_sighted(struct shm_segment *seg, enum subtab_kind kind,
    uint32_t date, uint32_t seq)
{
	struct seqalloc_state	*st;

	if (kind < 1 || kind > SUBTAB_KIND_COUNT || seq >= SEQALLOC_SIGHTED_BITS)
		return 1;
	st = &seg->header->alloc[kind - 1];
	if (date != st->date || seq >= st->next_seq)
		return 1;	/* not a number this allocator handed out */
	if (st->sighted_date != date)
		return 0;	/* nothing seen late for this date */
	return (seqalloc_bitmap(seg, kind)[seq / 8] >> (seq % 8)) & 1;
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
