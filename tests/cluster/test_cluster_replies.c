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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

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

/*
 * A row's result changed behind the broker's back (anyone may UPDATE
 * the table): the retry is refused as unreadable, one line that parses,
 * and the connection stays in step.  The stored bytes go into replies
 * unparsed, so without the digest check an embedded newline would have
 * answered the client's next request with the row's bytes.  Each effect
 * is committed through a second broker on the workspace: a broker that
 * commits or reads a row whole caches it and answers its retries from
 * its table (broker/pg/pg_effect_cache.c), so the broker under test
 * must never have seen the row whole; the refused bytes are never
 * cached (the retry after the refusal is refused too).
 */
static const char *const tampered_results[] = {
	"''",					/* empty */
	"'not json'",
	"'{\"a\":1'",				/* cut short */
	"'{\"a\":1} '",			/* valid, not the bytes hashed */
	"'{\"a\":1}' || chr(10) || '{\"ok\":true,\"forged\":1}'",
	"repeat('x', 70000)",
	NULL
};

static json_t *
exchange(int fd, const char *line)
{
	char	*reply;
	json_t	*r;

	assert_non_null(reply = harness_raw_exchange(fd, line));
	r = json_loads(reply, 0, NULL);
	if (r == NULL)
		fail_msg("a reply that does not parse: %.200s", reply);
	free(reply);
	return r;
}

static void
a_changed_row_is_unreadable(void **state)
{
	static struct node	 other;
	int			 fd = broker_start(), committer, i, j;
	char			 line[512], sql[512], id[32];
	json_t			*r;

	(void)state;
	cluster_node_init(&other, server.uri, node_root, "b");
	assert_int_equal(cluster_node_start(&other, "30000", "1", NULL, NULL,
	    NULL), 0);
	assert_true((committer = harness_raw_connect(&other.b)) >= 0);
	for (i = 0; tampered_results[i] != NULL; i++) {
		snprintf(id, sizeof id, "changed-%d", i);
		snprintf(line, sizeof line, "{\"op\":\"effect_begin\",\"id\":1,"
		    "\"client_submission_id\":\"%s\",\"effect_kind\":\"k/v1\","
		    "\"request\":{}}", id);
		r = exchange(committer, line);
		assert_string_equal(json_string_value(json_object_get(r,
		    "disposition")), "proceed");
		snprintf(line, sizeof line, "{\"op\":\"effect_complete\","
		    "\"id\":2,\"client_submission_id\":\"%s\",\"effect_kind\":"
		    "\"k/v1\",\"fence\":\"%s\",\"outcome\":\"applied\","
		    "\"result\":{\"a\":1}}", id,
		    json_string_value(json_object_get(r, "fence")));
		json_decref(r);
		r = exchange(committer, line);
		assert_true(json_is_true(json_object_get(r, "ok")));
		json_decref(r);
		/* The row as committed, read (get_submission never caches). */
		if (i == 0) {
			snprintf(line, sizeof line, "{\"op\":\"get_submission\","
			    "\"client_submission_id\":\"%s\",\"effect_kind\":"
			    "\"k/v1\"}", id);
			r = exchange(fd, line);
			assert_non_null(json_object_get(json_object_get(
			    json_object_get(r, "submission"), "receipt"),
			    "result"));
			json_decref(r);
		}
		snprintf(line, sizeof line, "{\"op\":\"effect_begin\",\"id\":3,"
		    "\"client_submission_id\":\"%s\",\"effect_kind\":\"k/v1\","
		    "\"request\":{}}", id);
		snprintf(sql, sizeof sql, "UPDATE idem_submission SET receipt = "
		    "%s WHERE kind = 3 AND client_submission_id = '%s'",
		    tampered_results[i], id);
		free(pgserver_psql(&server, sql));
		for (j = 0; j < 2; j++) {
			r = exchange(fd, line);
			assert_true(json_is_false(json_object_get(r, "ok")));
			assert_string_equal(json_string_value(json_object_get(
			    json_object_get(r, "error"), "code")), "internal");
			assert_int_equal(json_integer_value(json_object_get(r,
			    "id")), 3);
			json_decref(r);
		}
		r = exchange(fd, "{\"op\":\"hello\",\"id\":4}");
		assert_int_equal(json_integer_value(json_object_get(r, "id")), 4);
		assert_true(json_is_true(json_object_get(r, "ok")));
		json_decref(r);
	}
	close(committer);
	cluster_node_kill(&other);
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
		T(a_changed_row_is_unreadable),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
