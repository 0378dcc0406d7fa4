/* SPDX-License-Identifier: ISC */
/*
 * test_effect_replies.c: every reply the effect ops give, on the local
 * store, for every disposition and state, the compaction's tombstone
 * too: jansson's bytes in SPEC.md's order, one receipt everywhere
 * (effect_replies.c says what is checked; IDEM_REPLY_TRANSCRIPT=FILE
 * keeps the replies to compare two builds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "effect_replies.h"
#include "harness.h"

/* A broker (args) on the local store; a raw connection to it. */
static int
broker_start(struct broker *b, const char *const *args)
{
	int	fd;

	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_true((fd = harness_raw_connect(b)) >= 0);
	return fd;
}

static void
every_answer_is_janssons(void **state)
{
	int	fd = broker_start(*state, NULL);

	effect_replies_answers(fd);
	close(fd);
	harness_finish(*state);
}

static void
every_lapse_is_janssons(void **state)
{
	int	fd = broker_start(*state, NULL);

	effect_replies_lapses(fd);
	close(fd);
	harness_finish(*state);
}

static void
tombstone_is_janssons(void **state)
{
	int	fd = broker_start(*state, effect_replies_compact_args);

	effect_replies_tombstone(*state, fd);
	close(fd);
	harness_finish(*state);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(every_answer_is_janssons),
		T(every_lapse_is_janssons),
		T(tombstone_is_janssons),
	};

	return harness_exit_status(FILTER_RUN(tests));
}
