/* SPDX-License-Identifier: ISC */
/*
 * segment.c: the segment fixture of the shared-memory unit tests
 * (test_subtab, test_rings, test_peers): one segment per test, named
 * after its suite and pid so that suites run side by side, removed by
 * the teardown.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "segment.h"

int
unit_segment_setup(void **state, const char *suite, uint32_t capacity,
    uint64_t arena_bytes)
{
	struct segment_fixture	*f = calloc(1, sizeof *f);
	char			*cause = NULL;

	assert_non_null(f);
	assert_true(sodium_init() >= 0);
	snprintf(f->root, sizeof f->root, "/idem-test-%s-%ld", suite,
	    (long)getpid());
	if (shm_create_sized(f->root, capacity, arena_bytes, &f->seg,
	    &cause) != 0)
		fail_msg("shm_create_sized: %s", cause);
	*state = f;
	return 0;
}

int
unit_segment_teardown(void **state)
{
	struct segment_fixture	*f = *state;

	shm_destroy(&f->seg);
	free(f);
	return 0;
}
