/* SPDX-License-Identifier: ISC */
/*
 * ring.c: the records of the segment's two rings, the result arena
 * (arena.c) and the receipt store (receipts.c): where a record goes,
 * copying it in and out, moving the tail, a reader's check.  It takes
 * no lock (the rings' writers hold the table lock; readers none) and
 * knows neither ring's policy.
 */
#include <string.h>

#include "shm.h"
#include "subtab_int.h"

/*
 * Both are rings of records (a 16-byte header: the record's position,
 * its slot, its length; then the bytes, padded to 8), at positions
 * counted in bytes ever written (64 bits: never wrapping), a record
 * never straddling the ring's end.  Writers hold the table lock.
 * Readers hold no lock: they copy a record, then check that the ring's
 * tail (the oldest intact byte) has not passed it, a seqlock whose
 * writer moves the tail on before it overwrites anything:
 *
 *   writer: tail = new (relaxed); fence(release); the bytes (relaxed)
 *   reader: the bytes (relaxed); fence(acquire); tail (relaxed) <= pos
 *
 * If the reader saw any byte of the new record, the fences make it see
 * the new tail too, and it drops the copy.  The bytes are copied as
 * relaxed atomic 8-byte words (plain moves), so a race is no undefined
 * behaviour.  A writer that dies under the lock leaves at most a record
 * past the head, which the next writer overwrites: nothing to repair.
 */

uint64_t
ring_round(uint64_t n)
{
	return (n + 7) / 8 * 8;
}

void
ring_store(uint8_t *base, uint64_t at, const void *in, size_t n)
{
	_Atomic uint64_t	*w = (_Atomic uint64_t *)(void *)(base + at);
	const uint8_t		*p = in;
	uint64_t		 v;
	size_t			 i;

	/*
	 * Whole words with a constant-size copy (one move each), then the
	 * last part: a copy of n - i bytes in every turn of the loop was
	 * a branchy copy per word, most of a fast-path retry's time in
	 * here (issue #33).
	 */
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&v, p + i, 8);
		atomic_store_explicit(&w[i / 8], v, memory_order_relaxed);
	}
	if (i < n) {
		v = 0;
		memcpy(&v, p + i, n - i);
		atomic_store_explicit(&w[i / 8], v, memory_order_relaxed);
	}
}

void
ring_load(const uint8_t *base, uint64_t at, void *out, size_t n)
{
	_Atomic uint64_t	*w = (_Atomic uint64_t *)(void *)(uintptr_t)
	    (base + at);
	uint8_t			*p = out;
	uint64_t		 a, b, c, d, last;
	size_t			 i;

	/*
	 * As ring_store: whole words, then the last part.  Four words a
	 * turn, each a load and a store: a word a turn was seven
	 * instructions (the loop's and a spill of the word, whose address
	 * the last part's copy takes), a fast-path retry's stored reply
	 * of 900 bytes 800 of them (issue #33).
	 */
	for (i = 0; i + 32 <= n; i += 32) {
		a = atomic_load_explicit(&w[i / 8], memory_order_relaxed);
		b = atomic_load_explicit(&w[i / 8 + 1], memory_order_relaxed);
		c = atomic_load_explicit(&w[i / 8 + 2], memory_order_relaxed);
		d = atomic_load_explicit(&w[i / 8 + 3], memory_order_relaxed);
		memcpy(p + i, &a, 8);
		memcpy(p + i + 8, &b, 8);
		memcpy(p + i + 16, &c, 8);
		memcpy(p + i + 24, &d, 8);
	}
	for (; i + 8 <= n; i += 8) {
		a = atomic_load_explicit(&w[i / 8], memory_order_relaxed);
		memcpy(p + i, &a, 8);
	}
	if (i < n) {
		last = atomic_load_explicit(&w[i / 8], memory_order_relaxed);
		memcpy(p + i, &last, n - i);
	}
}

/*
 * Where a record of n bytes (header included) goes after head in a ring
 * of size bytes: at head, or at the next lap's start if it would cross
 * the end.  *pad: a pad header is to be written at head.
 */
uint64_t
ring_place(uint64_t head, uint64_t n, uint64_t size, int *pad)
{
	uint64_t	at = head % size;

	*pad = 0;
	if (at + n <= size)
		return head;
	*pad = size - at >= SHM_RING_RECORD_HEADER_BYTES;
	return head + (size - at);
}

/* Move the tail on to at least to (the writer, before any overwrite). */
void
ring_advance(_Atomic uint64_t *tail, uint64_t to)
{
	if (to > atomic_load_explicit(tail, memory_order_relaxed))
		atomic_store_explicit(tail, to, memory_order_relaxed);
	/*
	 * Even when the tail had passed already (moved by an earlier
	 * writer): the fence that orders this writer's bytes after it is
	 * its own, so the seqlock holds by C11's rules, not only by the
	 * table lock's hand-over.
	 */
	atomic_thread_fence(memory_order_release);
}

/*
 * Copy the record at pos (its header and want bytes of its body) and
 * check it: 0 if it was intact all along and its header says pos.
 */
int
ring_read(const uint8_t *base, uint64_t size, _Atomic uint64_t *head,
    _Atomic uint64_t *tail, uint64_t pos, struct ring_header *hdr,
    void *out, size_t want)
{
	uint64_t	at = pos % size;

	if (pos < atomic_load_explicit(tail, memory_order_acquire) ||
	    pos + SHM_RING_RECORD_HEADER_BYTES + want >
	    atomic_load_explicit(head, memory_order_acquire) ||
	    at + SHM_RING_RECORD_HEADER_BYTES + want > size)
		return -1;
	ring_load(base, at, hdr, sizeof *hdr);
	if (want > 0)
		ring_load(base, at + SHM_RING_RECORD_HEADER_BYTES, out, want);
	atomic_thread_fence(memory_order_acquire);
	if (pos < atomic_load_explicit(tail, memory_order_relaxed))
		return -1;
	return hdr->pos == pos ? 0 : -1;
}

/* Bytes a ring holds between its tail and its head (for stats). */
uint64_t
ring_used(_Atomic uint64_t *head, _Atomic uint64_t *tail, uint64_t size)
{
	uint64_t	t = atomic_load(tail), h = atomic_load(head);

	/* The tail passes the head only for a moment, at a lap's end. */
	if (t >= h)
		return 0;
	return h - t < size ? h - t : size;
}
