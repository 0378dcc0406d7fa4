/*
 * handoff.c: the ring through which workers hand encoded journal records
 * to the master's journaling thread.  Positions are byte counts since
 * start-up and only grow: head (appended, under the ring lock), taken
 * (written to the journal file by the journaler) and durable (fsync'd).
 * A worker waits for durable >= the end of its record.
 *
 * The journaler writes [taken, head) without holding the lock: workers
 * never write below head, and never past taken + ring size.  A worker
 * that dies mid-append has not moved head, so its partial bytes are
 * simply overwritten.
 */
#include <errno.h>
#include <string.h>

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
