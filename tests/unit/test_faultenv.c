/* SPDX-License-Identifier: ISC */
/*
 * test_faultenv.c: which environment variables are fault injection's
 * (broker/store/faultenv.c), and the refusal a build without fault injection
 * gives at start when one is set: it names the variable.  The refusal
 * of a real default-built idemd is tests/fault_injection.sh's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "store.h"

static void
test_crash_and_spawn_variables_found(void **state)
{
	char *const	 env[] = { "PATH=/bin", "IDEM_ROOT=/tmp/x",
	    "IDEM_SPAWN_DELAY_MS=30", NULL };
	char *const	 env2[] = { "HOME=/root", "IDEM_CRASH_WORKER_IN_LOCK=table",
	    NULL };
	char *const	 env3[] = { "IDEM_CRASH_AT=after_reserve_durable", NULL };
	char		 name[64];

	assert_non_null(faultenv_find(env, name, sizeof name));
	assert_string_equal(name, "IDEM_SPAWN_DELAY_MS");
	assert_non_null(faultenv_find(env2, name, sizeof name));
	assert_string_equal(name, "IDEM_CRASH_WORKER_IN_LOCK");
	assert_string_equal(faultenv_find(env3, name, sizeof name),
	    "IDEM_CRASH_AT=after_reserve_durable");
	assert_string_equal(name, "IDEM_CRASH_AT");
}

static void
test_other_variables_ignored(void **state)
{
	char *const	 env[] = { "IDEM_ROOT=/x", "IDEM_SOCKET=/s",
	    "IDEM_CRASH_=bare-prefix", "IDEM_SPAWN_DELAY_MSX=1",
	    "XIDEM_CRASH_AT=x", "IDEM_CRASH_AT", "IDEM_DEBUG=1", NULL };
	char		 name[64];

	assert_null(faultenv_find(env, name, sizeof name));
	assert_null(faultenv_find(NULL, name, sizeof name));
}

static void
test_refusal_names_the_variable(void **state)
{
	char *const	 env[] = { "LANG=C", "IDEM_CRASH_AT=after_commit_durable",
	    NULL };
	char *const	 clean[] = { "LANG=C", NULL };
	char		*cause = NULL;

	assert_int_equal(faultenv_refuse(clean, &cause), 0);
	assert_null(cause);
	assert_int_equal(faultenv_refuse(env, &cause), -1);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "IDEM_CRASH_AT is set"));
	assert_non_null(strstr(cause, "--enable-fault-injection"));
	free(cause);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crash_and_spawn_variables_found),
		cmocka_unit_test(test_other_variables_ignored),
		cmocka_unit_test(test_refusal_names_the_variable),
	};

	return FILTER_RUN(tests);
}
