/* SPDX-License-Identifier: ISC */
/*
 * clock.c: the monotonic clock, for deadlines and waits that a change of
 * the wall clock must not stretch or cut (shm_now_ms is the wall clock,
 * for what is stored or shown).
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

void
clock_monotonic_after(struct timespec *t, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}
