/* SPDX-License-Identifier: ISC */
/* segment.h: the shared-memory unit tests' segment fixture (segment.c). */
#ifndef UNIT_SEGMENT_H
#define UNIT_SEGMENT_H

#include <stdint.h>

#include "shm.h"

/* A segment of its own for one test, named after the suite and the pid. */
struct segment_fixture {
	struct shm_segment	seg;
	char			root[64];
};

/*
 * Create it (arena_bytes 0: the default arena) into *state; a failure
 * fails the test.  For cmocka's setup, wrapped by each suite.
 */
int	unit_segment_setup(void **state, const char *suite, uint32_t capacity,
	    uint64_t arena_bytes);
/* Destroy it: a cmocka teardown as it is. */
int	unit_segment_teardown(void **state);

#endif
