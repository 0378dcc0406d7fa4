/* SPDX-License-Identifier: ISC */
/*
 * prefault.c: the pages of a fresh segment's table, mapped ahead of a
 * replay.
 *
 * A replay (start-up: the checkpoint, then the journal) writes the
 * slots and their keys in order and the buckets at random, and every
 * first touch of a page of the fresh segment is a page fault.  At
 * 1,000,000 creations those faults were a quarter of start-up, most of
 * it the fault's own entry and exit, which a virtual machine makes
 * dear (doc/performance.md, "Replay").  A thread asks the kernel for the
 * same pages in strides instead (MADV_POPULATE_WRITE: the zeroed pages
 * the faults would have given, mapped without a fault per page, and on
 * the other CPU): the buckets first, then the slots and the key heap
 * side by side from their start, as the replay fills them, until the
 * replay ends.  The contents are untouched, so the replay writing the
 * same pages meanwhile is safe; a page it reaches first it faults as
 * before.  Stop is read between strides, so stopping waits for at most
 * one stride (about a millisecond).  It is only ever a saving: a kernel
 * without the advice (before Linux 5.14) or a failed stride ends the
 * thread and changes nothing.
 */
#include <sys/mman.h>

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "shm.h"

/* Large enough that a stride's system call is cheap beside its pages. */
#define PREFAULT_STRIDE_BYTES	(2u << 20)

/* Map [at, at + length) of the segment, widened to whole pages. */
static int
prefault_range(const void *at, uint64_t length, uintptr_t page)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t	start = (uintptr_t)at & ~(page - 1);

	if (length == 0)
		return 0;
	return madvise((void *)start, (uintptr_t)at - start + length,
	    MADV_POPULATE_WRITE);
#else
	(void)at;
	(void)length;
	(void)page;
	errno = ENOSYS;
	return -1;
#endif
}

/* Where the key heap's share of the first slot_index slots ends. */
static uint64_t
prefault_heap_at(const struct shm_header *h, uint64_t slot_index)
{
	return slot_index * h->heap_bytes / h->capacity;
}

static void *
prefault_run(void *arg)
{
	struct shm_prefault	*p = arg;
	const struct shm_header	*h = p->seg->header;
	uintptr_t		 page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uint64_t		 buckets, slots, heap, heap_end, at, n;

	/* Stop is read after each stride: the first is always mapped. */
	buckets = (uint64_t)h->bucket_count * sizeof *p->seg->buckets;
	for (at = 0; at < buckets; at += n) {
		n = buckets - at < PREFAULT_STRIDE_BYTES ?
		    buckets - at : PREFAULT_STRIDE_BYTES;
		if (prefault_range((char *)p->seg->buckets + at, n,
		    page) != 0) {
			p->error = errno;
			return NULL;
		}
		atomic_fetch_add(&p->bytes, n);
		if (atomic_load(&p->stop))
			return NULL;
	}
	slots = (uint64_t)h->capacity * sizeof *p->seg->slots;
	for (at = 0; at < slots && !atomic_load(&p->stop); at += n) {
		n = slots - at < PREFAULT_STRIDE_BYTES ?
		    slots - at : PREFAULT_STRIDE_BYTES;
		/*
		 * The heap's share of the same entries: keys in step.  In
		 * slots, not bytes, so that the products stay far below
		 * 2^64 at any capacity.
		 */
		heap = prefault_heap_at(h, at / sizeof *p->seg->slots);
		heap_end = prefault_heap_at(h,
		    (at + n) / sizeof *p->seg->slots);
		if (prefault_range((char *)p->seg->slots + at, n, page) != 0 ||
		    prefault_range(p->seg->heap + heap, heap_end - heap,
		    page) != 0) {
			p->error = errno;
			break;
		}
		atomic_fetch_add(&p->bytes, n + heap_end - heap);
	}
	return NULL;
}

int
shm_prefault_start(struct shm_prefault *p, struct shm_segment *seg)
{
	int	error;

	p->seg = seg;
	p->error = 0;
	p->running = 0;
	atomic_store(&p->stop, 0);
	atomic_store(&p->bytes, 0);
	if ((error = pthread_create(&p->thread, NULL, prefault_run, p)) != 0) {
		p->error = error;
		return -1;
	}
	p->running = 1;
	return 0;
}

void
shm_prefault_stop(struct shm_prefault *p)
{
	if (!p->running)
		return;
	atomic_store(&p->stop, 1);
	(void)pthread_join(p->thread, NULL);
	p->running = 0;
}
