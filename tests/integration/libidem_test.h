/* SPDX-License-Identifier: ISC */
/*
 * libidem_test.h: what the test_libidem* programs share
 * (libidem_test.c): a connection to the harness's broker that must be
 * made, and a task with the fixed sender, recipient and body.  Included
 * after cmocka.h and integration/harness.h.
 */
#ifndef IDEM_TEST_LIBIDEM_TEST_H
#define IDEM_TEST_LIBIDEM_TEST_H

/* A connection to b (libidem's idem_connect); fails the test if none. */
struct idem_conn *connect_to(struct broker *b);
/* t: PM to DEV, this subject, a fixed body; the rest zero (defaults). */
void	make_task(struct idem_task *t, const char *subject);

#endif
