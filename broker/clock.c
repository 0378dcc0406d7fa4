/* SPDX-License-Identifier: ISC */
/*
 * clock.c: the monotonic clock, for deadlines and waits that a change of
 * the wall clock must not stretch or cut (shm_now_ms is the wall clock,
 * for what is stored or shown).  A deadline, now + ms, is
 * libclient/monoclock.h's monoclock_after, one definition with libidem.
 */
#include <stdint.h>
#include <time.h>

#include "idemd.h"

int64_t
clock_monotonic_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
