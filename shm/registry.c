/* SPDX-License-Identifier: ISC */
/*
 * registry.c: the worker registry.  One cache-line slot per worker
 * index; the generation changes whenever the worker behind the index
 * changes, which is what makes the claims of a dead worker lapse.
 */
#include "shm.h"

uint32_t
registry_start(struct shm_segment *seg, unsigned index)
{
	struct shm_worker	*w = &seg->header->workers[index];

	atomic_store(&w->pid, 0);
	return atomic_fetch_add(&w->generation, 1) + 1;
}

void
registry_exit(struct shm_segment *seg, unsigned index)
{
	struct shm_worker	*w = &seg->header->workers[index];

	/* Bump first: from here on no claim of the dead worker is live. */
	atomic_fetch_add(&w->generation, 1);
	atomic_store(&w->pid, 0);
	/* Its connections died with it. */
	atomic_fetch_sub(&seg->header->connections,
	    atomic_exchange(&w->connections, 0));
	/* And its carriers: the journaler must not wait for them. */
	atomic_store(&w->carriers[0], 0);
	atomic_store(&w->carriers[1], 0);
	/* And its parked requests: no flush needs to wake it for them. */
	atomic_store(&w->loop_waiters, 0);
	atomic_store(&w->watching, 0);
	peers_forget_worker(seg, index);
}
