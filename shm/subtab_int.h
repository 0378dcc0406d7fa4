/* SPDX-License-Identifier: ISC */
/*
 * subtab_int.h: what shm/'s table files share and nothing outside shm/
 * sees: the rings' record header and helpers (ring.c), which the result
 * arena (arena.c) and the receipt store (receipts.c) are built on, and
 * the table lock (subtab.c) their writers take, and the mark of an
 * evictable slot (subtab_marks.c) that subtab.c's puts set too.  Not in
 * shm.h: no caller of the segment needs any of it.
 */
#ifndef SUBTAB_INT_H
#define SUBTAB_INT_H

#include "shm.h"

/* A ring record's header (ring.c's DESIGN). */
struct ring_header {
	uint64_t	pos;
	uint32_t	slot;
	uint32_t	length;
};
_Static_assert(sizeof(struct ring_header) == SHM_RING_RECORD_HEADER_BYTES,
    "a ring record's header");
#define RING_PAD_SLOT	(UINT32_MAX - 1)	/* the rest of the lap is unused */

/* ring.c */
uint64_t ring_round(uint64_t n);
void	 ring_store(uint8_t *base, uint64_t at, const void *in, size_t n);
void	 ring_load(const uint8_t *base, uint64_t at, void *out, size_t n);
uint64_t ring_place(uint64_t head, uint64_t n, uint64_t size, int *pad);
void	 ring_advance(_Atomic uint64_t *tail, uint64_t to);
int	 ring_read(const uint8_t *base, uint64_t size, _Atomic uint64_t *head,
	    _Atomic uint64_t *tail, uint64_t pos, struct ring_header *hdr,
	    void *out, size_t want);
uint64_t ring_used(_Atomic uint64_t *head, _Atomic uint64_t *tail,
	    uint64_t size);

/* subtab.c: the table lock (repairing the table if its holder died). */
int	 subtab_lock_table(struct shm_segment *);
void	 subtab_unlock_table(struct shm_segment *);

/*
 * subtab_marks.c, under the table lock: slot i, if committed, evictable
 * from now on (kept by the index or a row).
 */
void	 subtab_mark_locked(struct shm_segment *, uint32_t i);

#endif /* SUBTAB_INT_H */
