/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_replies.c: every reply the effect ops give, on the
 * PostgreSQL store (a broker on a private server, a fresh workspace per
 * case): the checks of tests/integration/effect_replies.c, every
 * disposition and state but the local index's tombstone, with the
 * receipts of retries and views read from the rows.
 * IDEM_REPLY_TRANSCRIPT=FILE keeps the replies to compare two builds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster_harness.h"
#include "effect_replies.h"

static struct pgserver	server;
static struct node	node;
static char		node_root[256];

/* A broker on the store, a fresh workspace; a raw connection to it. */
static int
broker_start(void)
{
	int	fd;

	cluster_store_reset(&server);
	cluster_fresh_root(node_root);
	cluster_node_init(&node, server.uri, node_root, "a");
	assert_int_equal(cluster_node_start(&node, "30000", "2", NULL, NULL,
	    NULL), 0);
	assert_true((fd = harness_raw_connect(&node.b)) >= 0);
	return fd;
}

static void
broker_finish(int fd)
{
	close(fd);
	cluster_node_kill(&node);
	cluster_rm_root(node_root);
}

static void
every_answer_is_janssons(void **state)
{
	int	fd = broker_start();

	(void)state;
	effect_replies_answers(fd);
	broker_finish(fd);
}

static void
every_lapse_is_janssons(void **state)
{
	int	fd = broker_start();

	(void)state;
	effect_replies_lapses(fd);
	broker_finish(fd);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, cluster_arm_watchdog, \
	cluster_kill_live_nodes)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(every_answer_is_janssons),
		T(every_lapse_is_janssons),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
