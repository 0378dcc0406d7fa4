/* SPDX-License-Identifier: ISC */
/*
 * libidem_test.c: the fixtures the test_libidem* programs share
 * (libidem_test.h): a connection that must be made and a task to write.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "integration/harness.h"
#include "integration/libidem_test.h"

#define TEST_BODY	"Steps:\n1. reproduce\n2. fix\n"

struct idem_conn *
connect_to(struct broker *b)
{
	struct idem_conn	*c;

	c = harness_connect(b);
	assert_non_null(c);
	return c;
}

void
make_task(struct idem_task *t, const char *subject)
{
	memset(t, 0, sizeof *t);
	t->sender = "PM";
	t->recipient = "DEV";
	t->subject = subject;
	t->body = TEST_BODY;
}
