/* SPDX-License-Identifier: ISC */
/*
 * handoff.c: the ring through which workers hand encoded journal records
 * to the master's journaling thread.  Positions are byte counts since
 * start-up and only grow: head (appended, under the ring lock), taken
 * (written to the journal file by the journaler) and durable (fsync'd).
 * A worker waits for durable >= the end of its record.
 *
 * A journal failure drops what was not durable, so durable alone cannot
 * say whether a record is: the positions of dropped records lie below
 * the positions later flushes make durable.  Hence the journal epoch: a
 * failure moves it to an odd value, the reopen (which drops everything
 * still pending) to the next even one, and a record is judged by the
 * epoch it was appended in (handoff_is_durable).  Judging errs one way
 * only: a durable record may be called lost (its request then answers
 * storage_unavailable, and a retry finds the durable state), a lost one
 * is never called durable.
 *
 * A worker's loop waits for durability parked on its event loop (the
 * journaler's broadcast wakes it); a file thread that carries a creation
 * waits in handoff_wait_durable instead, on a futex in the segment that
 * the journaler moves on after every flush, failure and reopen: one
 * wake, straight to the thread, and none for a flush nobody waits for.
 *
 * The journaler writes [taken, head) without holding the lock: workers
 * never write below head, and never past taken + ring size.  A worker
 * that dies mid-append has not moved head, so its partial bytes are
 * simply overwritten.
 */
#include <linux/futex.h>
#include <sys/syscall.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

int
handoff_repair(struct shm_segment *seg)
{
	return 0;
}

int
handoff_append(struct shm_segment *seg, const void *data, size_t length,
    uint64_t *end)
{
	struct shm_header	*h = seg->header;
	uint64_t		 head, at, first;

	if (length == 0 || length > h->ring_bytes) {
		errno = EINVAL;
		return -1;
	}
	if (shm_lock(seg, &h->ring_lock, handoff_repair, "journal ring") != 0)
		return -1;
	head = h->ring_head;
	if (head + length - atomic_load(&h->ring_taken) > h->ring_bytes) {
		shm_unlock(&h->ring_lock);
		errno = ENOSPC;
		return -1;
	}
	at = head % h->ring_bytes;
	first = h->ring_bytes - at;
	if (first >= length)
		memcpy(seg->ring + at, data, length);
	else {
		memcpy(seg->ring + at, data, first);
		memcpy(seg->ring, (const uint8_t *)data + first,
		    length - first);
	}
	h->ring_head = head + length;	/* publish */
	shm_unlock(&h->ring_lock);
	*end = head + length;
	return 0;
}

int
handoff_pending(struct shm_segment *seg, struct iovec iov[2], uint64_t *end)
{
	struct shm_header	*h = seg->header;
	uint64_t		 head, taken, at, first;

	if (shm_lock(seg, &h->ring_lock, handoff_repair, "journal ring") != 0)
		return -1;
	head = h->ring_head;
	shm_unlock(&h->ring_lock);
	taken = atomic_load(&h->ring_taken);
	*end = head;
	if (head == taken)
		return 0;
	at = taken % h->ring_bytes;
	first = h->ring_bytes - at;
	iov[0].iov_base = seg->ring + at;
	if (first >= head - taken) {
		iov[0].iov_len = head - taken;
		return 1;
	}
	iov[0].iov_len = first;
	iov[1].iov_base = seg->ring;
	iov[1].iov_len = head - taken - first;
	return 2;
}

int
handoff_has_pending(struct shm_segment *seg)
{
	uint64_t	head;

	if (handoff_head(seg, &head) != 0)
		return 1;
	return head != atomic_load(&seg->header->ring_taken);
}

void
handoff_taken(struct shm_segment *seg, uint64_t end)
{
	atomic_store(&seg->header->ring_taken, end);
}

void
handoff_durable(struct shm_segment *seg, uint64_t end)
{
	atomic_store(&seg->header->ring_durable, end);
}

uint64_t
handoff_epoch(const struct shm_header *h)
{
	return atomic_load(&h->journal_epoch);
}

int
handoff_is_durable(const struct shm_header *h, uint64_t end, uint64_t epoch)
{
	uint64_t	now, failure, durable, lost_from;

	if (end == 0)
		return 1;		/* replayed at start-up */
	for (;;) {
		now = atomic_load(&h->journal_epoch);
		if (now == epoch && (now & 1) == 0) {
			durable = atomic_load(&h->ring_durable);
			/* A failure and a reopen in between: judge again. */
			if (atomic_load(&h->journal_epoch) != now)
				continue;
			return durable >= end ? 1 : 0;
		}
		/*
		 * The failure that concerns it: the one under way when it
		 * was appended or read, else the one that ended its epoch.
		 * It is durable only if it was before that failure came
		 * (anything appended in a failed epoch lies past).  Older
		 * than the last failure: not known any more, so lost.
		 */
		failure = epoch | 1;
		if (now - failure > 1)
			return -1;
		lost_from = atomic_load(&h->ring_lost_from);
		if (atomic_load(&h->journal_epoch) != now)
			continue;
		return end <= lost_from ? 1 : -1;
	}
}

void
handoff_failed(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;

	if ((atomic_load(&h->journal_epoch) & 1) == 0) {
		/* The epoch first: a reader that sees the old lost_from
		 * with the new epoch judges lost what may be durable. */
		atomic_fetch_add(&h->journal_epoch, 1);
		atomic_store(&h->ring_lost_from, atomic_load(&h->ring_durable));
	}
	atomic_store(&h->journal_failed, 1);
}

int
handoff_head(struct shm_segment *seg, uint64_t *head)
{
	struct shm_header	*h = seg->header;

	if (shm_lock(seg, &h->ring_lock, handoff_repair, "journal ring") != 0)
		return -1;
	*head = h->ring_head;
	shm_unlock(&h->ring_lock);
	return 0;
}

int
handoff_reopened(struct shm_segment *seg)
{
	struct shm_header	*h = seg->header;
	uint64_t		 head;

	if (shm_lock(seg, &h->ring_lock, handoff_repair, "journal ring") != 0)
		return -1;
	head = h->ring_head;
	shm_unlock(&h->ring_lock);
	/* Appended in the failed epoch: never written. */
	atomic_store(&h->ring_taken, head);
	atomic_fetch_add(&h->journal_epoch, 1);
	atomic_store(&h->journal_failed, 0);
	return 0;
}

/*
 * Which sleepers a flush wakes: a sleeper waits with the bit of its
 * record's end (one of 32, by HANDOFF_WAKE_GRAIN bytes of the ring), and
 * the journaler wakes the bits of the bytes it made durable, so a flush
 * wakes only those it may concern (all of them when its bytes span every
 * bit, or when the epoch moved).  A wake is never lost: a sleeper counts
 * itself and reads the sequence before it judges, and the kernel sleeps
 * only while the sequence is the one read; the journaler moves the
 * sequence after it publishes and then reads the count.  The timeout is
 * a second guard, not the mechanism.
 */
#define HANDOFF_WAKE_GRAIN	256

static uint32_t
handoff_wake_bit(uint64_t end)
{
	return 1u << ((end / HANDOFF_WAKE_GRAIN) % 32);
}

int
handoff_wait_durable(struct shm_header *h, uint64_t end, uint64_t epoch)
{
	struct timespec	 timeout = { 1, 0 };
	uint32_t	 seq;
	int		 durable;

	for (;;) {
		atomic_fetch_add(&h->durable_sleepers, 1);
		seq = atomic_load(&h->durable_seq);
		if ((durable = handoff_is_durable(h, end, epoch)) == 0) {
			struct timespec	 at;

			/* FUTEX_WAIT_BITSET's timeout is absolute. */
			clock_gettime(CLOCK_MONOTONIC, &at);
			at.tv_sec += timeout.tv_sec;
			(void)syscall(SYS_futex, &h->durable_seq,
			    FUTEX_WAIT_BITSET, seq, &at, NULL,
			    handoff_wake_bit(end));
		}
		atomic_fetch_sub(&h->durable_sleepers, 1);
		if (durable != 0)
			return durable;
	}
}

void
handoff_wake(struct shm_segment *seg, uint64_t from, uint64_t to)
{
	struct shm_header	*h = seg->header;
	uint32_t		 bits = 0;
	uint64_t		 grain;

	atomic_fetch_add(&h->durable_seq, 1);
	if (atomic_load(&h->durable_sleepers) == 0)
		return;
	if (to <= from || to / HANDOFF_WAKE_GRAIN - from / HANDOFF_WAKE_GRAIN
	    >= 32)
		bits = FUTEX_BITSET_MATCH_ANY;
	else {
		for (grain = from / HANDOFF_WAKE_GRAIN;
		    grain <= to / HANDOFF_WAKE_GRAIN; grain++)
			bits |= 1u << (grain % 32);
	}
	(void)syscall(SYS_futex, &h->durable_seq, FUTEX_WAKE_BITSET, INT_MAX,
	    NULL, NULL, bits);
}
