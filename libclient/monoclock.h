/* SPDX-License-Identifier: ISC */
/*
 * monoclock.h: a deadline on CLOCK_MONOTONIC, now + ms, for waits that a
 * change of the wall clock must not stretch or cut (a condition
 * variable set to that clock, sem_clockwait).  One definition for the
 * broker (clock.c's callers) and libidem (the lease keeper).  idem-mcp's
 * proxy keeps its own: its layer (tests/layers.sh) sees only idem.h and
 * protocol.h, and this is no part of the public API.
 */
#ifndef IDEM_MONOCLOCK_H
#define IDEM_MONOCLOCK_H

#include <stdint.h>
#include <time.h>

/* *t = now + ms on CLOCK_MONOTONIC (ms >= 0). */
static inline void
monoclock_after(struct timespec *t, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

#endif
