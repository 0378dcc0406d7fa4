/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_effect_cache: on the PostgreSQL store a broker caches a
 * committed effect in its table and arena, as it caches a committed
 * creation, and answers an effect_begin retry of it without a round
 * trip (broker/pg/pg_effect_cache.c; doc/cluster.md, "Effects").  The
 * proof that no round trip is made: the server is stopped
 * (pgserver_stop) and the retry is still answered, where every request
 * that needs the server answers storage_unavailable.
 *
 * - cached_answers_are_the_servers: a commits; b, which never saw the
 *   effect, answers a retry and another digest from the row (the server
 *   path's bytes); with the server stopped, a answers the retry reused
 *   (full path: effects_reused_cached; the begin's own bytes: the fast
 *   path, effects_reused_fast) and the other digest conflict, each
 *   byte for byte b's reply; the row is as it was.
 * - second_broker_caches_on_its_first_read: a commits; with the server
 *   stopped b cannot answer (storage_unavailable: nothing cached); once
 *   it is back b's first retry reads the row (effects_reused_cached
 *   unmoved), and with it stopped again b's second retry is answered
 *   reused from its table, the same bytes.
 * - uncommitted_never_from_the_cache: a committed key answers while the
 *   server is stopped (the control: the cache works here), but a key in
 *   progress, one whose lease lapsed (outcome_unknown), a released one
 *   and, on a broker that only read it compacted, a tombstone answer
 *   storage_unavailable; get_submission and diagnose read the server
 *   (storage_unavailable, even for the cached key); the broker that
 *   cached a body before the compaction answers it whole (the
 *   creations' rule) while get_submission shows the row's tombstone.
 *
 * - a_full_table_caches_on: a broker whose table holds 16 entries
 *   commits 40 creations, 24 effects and one more creation; with the
 *   server stopped the newest creation and the newest effect are
 *   answered from its table: a cached entry is evictable (its row is the
 *   truth), so the cache holds the newest, not the first 16 it was given
 *   (subtab_apply_cached, for creations and effects alike).
 * - a_turned_arena_reads_the_row: with the least result arena, 12
 *   effects of 8 KiB results; with the server stopped the newest is
 *   answered from the table, the oldest, whose bytes the arena reused,
 *   not (storage_unavailable: it would read the row), on both paths.
 *
 * Each case fails on the code before the cache, where every effect_begin
 * reads the row: the retry with the server stopped answers
 * storage_unavailable.  a_full_table_caches_on failed also with either
 * kind's entries put unmarked: the table kept the first 16 and refused
 * the rest, whose retries then needed the server.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cluster_harness.h"

#ifndef HAVE_POSTGRESQL
int
main(void)
{
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#else

static struct pgserver	server;

#define KIND		"mail.send/v1"

/*
 * An effect_begin's line: in the order a client sends it (form 0: the
 * bytes the proceed was answered to, which the fast path knows), or
 * with its members reordered (forms 1 and 2: the same request, digest
 * and answer in other bytes, each its own to the fast path, which
 * stores a reply for the first bytes the full path answered reused and
 * answers only those).  lease_ms > 0: that lease.
 */
static char *
begin_line(const char *id, const char *to, int form, int lease_ms)
{
	char	*line;
	char	 lease[32] = "";

	if (lease_ms > 0)
		snprintf(lease, sizeof lease, ",\"lease_ms\":%d", lease_ms);
	if (form == 1)
		assert_true(asprintf(&line, "{\"request\":{\"to\":\"%s\"},"
		    "\"effect_kind\":\"%s\",\"client_submission_id\":\"%s\","
		    "\"op\":\"effect_begin\"%s}", to, KIND, id, lease) > 0);
	else if (form == 2)
		assert_true(asprintf(&line, "{\"effect_kind\":\"%s\","
		    "\"client_submission_id\":\"%s\",\"op\":\"effect_begin\","
		    "\"request\":{\"to\":\"%s\"}%s}", KIND, id, to, lease) > 0);
	else
		assert_true(asprintf(&line, "{\"op\":\"effect_begin\","
		    "\"client_submission_id\":\"%s\",\"effect_kind\":\"%s\","
		    "\"request\":{\"to\":\"%s\"}%s}", id, KIND, to, lease) > 0);
	return line;
}

/* One line (freed) on a stream of its own: the reply's raw line. */
static char *
raw_line(struct broker *b, char *line)
{
	char	*reply;
	int	 fd;

	assert_true((fd = harness_raw_connect(b)) >= 0);
	assert_int_equal(harness_raw_send(fd, line), 0);
	assert_non_null(reply = harness_raw_read_line(fd));
	close(fd);
	free(line);
	return reply;
}

static char *
begin(struct broker *b, const char *id, const char *to, int form)
{
	return raw_line(b, begin_line(id, to, form, 0));
}

/* effect_complete with the fence of a proceed reply: the raw reply. */
static char *
complete(struct broker *b, const char *id, const char *proceed,
    const char *outcome, const char *status)
{
	json_t	*r, *request;
	char	*line;

	assert_non_null(r = json_loads(proceed, 0, NULL));
	request = json_pack("{s:s, s:s, s:s, s:s, s:s}", "op",
	    "effect_complete", "client_submission_id", id, "effect_kind",
	    KIND, "fence", harness_str(r, "fence"), "outcome", outcome);
	if (status != NULL)
		json_object_set_new(request, "result", json_pack("{s:s}",
		    "status", status));
	json_decref(r);
	assert_non_null(line = json_dumps(request, JSON_COMPACT));
	json_decref(request);
	return raw_line(b, line);
}

/* The reply (freed) holds want, or the test fails showing it. */
static void
holds(char *reply, const char *want)
{
	if (strstr(reply, want) == NULL)
		fail_msg("no %s in %s", want, reply);
	free(reply);
}

/* reply's receipt is first's, byte for byte. */
static void
same_receipt(const char *reply, const char *first)
{
	char	*want = harness_receipt_bytes(first);
	char	*got = harness_receipt_bytes(reply);

	assert_string_equal(got, want);
	free(want);
	free(got);
}

/*
 * An empty store, a fresh root, broker a alone with one more option
 * (one worker, a 30 s lease).
 */
static void
start_one(struct broker *root, struct node *a, const char *option,
    const char *value)
{
	const char *const	args[] = { "--store", server.uri, "--host-id",
	    "a", "--lease-ms", "30000", "--workers", "1", option, value,
	    NULL };

	cluster_store_reset(&server);
	harness_fresh_root(root);
	cluster_node_init(a, server.uri, root->root, "a");
	assert_int_equal(cluster_node_start_args(a, args, NULL), 0);
}

/* begin (proceed, in the stored order) and complete applied. */
static char *
commit(struct broker *b, const char *id, const char *to)
{
	char	*proceed, *reply;

	proceed = begin(b, id, to, 0);
	if (strstr(proceed, "\"disposition\":\"proceed\"") == NULL)
		fail_msg("%s: %s", id, proceed);
	reply = complete(b, id, proceed, "applied", to);
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("%s: %s", id, reply);
	free(proceed);
	return reply;
}

/* The row of id as text: every column a transition would move. */
static char *
row_of(const char *id)
{
	return cluster_sql_value(&server, "SELECT concat_ws('|', state, "
	    "epoch, owner_token, request_digest, file_digest, receipt, "
	    "created_at_ms, updated_at, lease_expires) FROM idem_submission "
	    "WHERE client_submission_id = '%s'", id);
}

static void
server_stop(void)
{
	assert_int_equal(pgserver_stop(&server, 0), 0);
}

static void
server_back(void)
{
	assert_int_equal(pgserver_restart(&server), 0);
}

/* A reply that says the server could not be reached (retryable). */
static void
unavailable(char *reply)
{
	if (strstr(reply, "\"code\":\"storage_unavailable\"") == NULL ||
	    strstr(reply, "\"retryable\":true") == NULL)
		fail_msg("expected storage_unavailable, got %s", reply);
	free(reply);
}

static void
cached_answers_are_the_servers(void **state)
{
	static struct node	 a, b;
	static struct broker	 root;
	char			*committed, *server_reused, *server_conflict;
	char			*row, *reply;

	(void)state;
	cluster_start_two(&server, &root, &a, &b);
	committed = commit(&a.b, "fx-1", "ops@example.org");
	/* b never saw it: its answers are read from the row. */
	server_conflict = begin(&b.b, "fx-1", "other@example.org", 1);
	assert_non_null(strstr(server_conflict,
	    "\"reason\":\"digest_mismatch\""));
	server_reused = begin(&b.b, "fx-1", "ops@example.org", 1);
	assert_non_null(strstr(server_reused, "\"disposition\":\"reused\""));
	assert_null(strstr(server_reused, "\"receipt_pruned\""));
	assert_int_equal(harness_stat(&b.b, "effects_reused_cached"), 0);
	/* The receipt is the commit's. */
	same_receipt(server_reused, committed);
	row = row_of("fx-1");
	assert_int_equal(harness_stat(&a.b, "effects_reused_cached"), 0);
	server_stop();
	/* The full path (other bytes than the proceed's): the table. */
	reply = begin(&a.b, "fx-1", "ops@example.org", 1);
	assert_string_equal(reply, server_reused);
	free(reply);
	assert_int_equal(harness_stat(&a.b, "effects_reused_cached"), 1);
	assert_int_equal(harness_stat(&a.b, "effects_reused_fast"), 0);
	/* The begin's own bytes: the fast path, stored at the commit. */
	reply = begin(&a.b, "fx-1", "ops@example.org", 0);
	assert_string_equal(reply, server_reused);
	free(reply);
	assert_int_equal(harness_stat(&a.b, "effects_reused_fast"), 1);
	assert_int_equal(harness_stat(&a.b, "effects_reused"), 2);
	/* Another digest: the row's conflict, judged from the entry. */
	reply = begin(&a.b, "fx-1", "other@example.org", 1);
	assert_string_equal(reply, server_conflict);
	free(reply);
	/*
	 * b cached it with its read: answered from its table too (other
	 * bytes), and fast in the bytes of that read (stored with it).
	 */
	reply = begin(&b.b, "fx-1", "ops@example.org", 2);
	assert_string_equal(reply, server_reused);
	free(reply);
	assert_int_equal(harness_stat(&b.b, "effects_reused_cached"), 1);
	reply = begin(&b.b, "fx-1", "ops@example.org", 1);
	assert_string_equal(reply, server_reused);
	free(reply);
	assert_int_equal(harness_stat(&b.b, "effects_reused_fast"), 1);
	assert_int_equal(harness_stat(&b.b, "effects_reused"), 3);
	server_back();
	/* Nothing changed in the store. */
	reply = row_of("fx-1");
	assert_string_equal(reply, row);
	free(reply);
	free(row);
	free(committed);
	free(server_reused);
	free(server_conflict);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	harness_finish(&root);
}

static void
second_broker_caches_on_its_first_read(void **state)
{
	static struct node	 a, b;
	static struct broker	 root;
	char			*committed, *first, *reply;

	(void)state;
	cluster_start_two(&server, &root, &a, &b);
	committed = commit(&a.b, "fx-2", "ops@example.org");
	/* b has not read it: nothing to answer from. */
	server_stop();
	unavailable(begin(&b.b, "fx-2", "ops@example.org", 1));
	server_back();
	/* Its first retry reads the row. */
	first = begin(&b.b, "fx-2", "ops@example.org", 1);
	assert_non_null(strstr(first, "\"disposition\":\"reused\""));
	assert_int_equal(harness_stat(&b.b, "effects_reused_cached"), 0);
	assert_int_equal(harness_stat(&b.b, "effects_reused"), 1);
	/* Its second is its table's (in other bytes: the full path). */
	server_stop();
	reply = begin(&b.b, "fx-2", "ops@example.org", 2);
	assert_string_equal(reply, first);
	free(reply);
	assert_int_equal(harness_stat(&b.b, "effects_reused_cached"), 1);
	assert_int_equal(harness_stat(&b.b, "effects_reused_fast"), 0);
	assert_int_equal(harness_stat(&b.b, "effects_reused"), 2);
	server_back();
	same_receipt(first, committed);
	free(first);
	free(committed);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	harness_finish(&root);
}

/* get_submission of an effect on b (the raw reply). */
static char *
get_effect(struct broker *b, const char *id)
{
	char	*line;

	assert_true(asprintf(&line, "{\"op\":\"get_submission\","
	    "\"client_submission_id\":\"%s\",\"effect_kind\":\"%s\"}", id,
	    KIND) > 0);
	return raw_line(b, line);
}

static void
uncommitted_never_from_the_cache(void **state)
{
	static struct node	 a, b;
	static struct broker	 root;
	char			*done, *old, *proceed, *out, *reply;

	(void)state;
	cluster_start_two(&server, &root, &a, &b);
	/* Compacted: a tombstone, read by b (which never had the body). */
	old = commit(&a.b, "fx-old", "old@example.org");
	assert_int_equal(cluster_idemctl(&out, "compact --older-than 0 "
	    "--store '%s' --root '%s'", server.uri, root.root), 0);
	assert_non_null(strstr(out, "compact: 1 receipt pruned"));
	free(out);
	holds(begin(&b.b, "fx-old", "old@example.org", 1),
	    "\"receipt_pruned\":true");
	done = commit(&a.b, "fx-done", "done@example.org");
	/* In progress: a live lease. */
	holds(begin(&a.b, "fx-open", "open@example.org", 0),
	    "\"disposition\":\"proceed\"");
	holds(begin(&a.b, "fx-open", "open@example.org", 1),
	    "\"disposition\":\"in_progress\"");
	/* outcome_unknown: a lease lapsed, by the server's clock. */
	holds(raw_line(&a.b, begin_line("fx-lapsed", "lapsed@example.org", 0,
	    100)), "\"disposition\":\"proceed\"");
	if (!pgserver_await(&server, "SELECT lease_expires <= "
	    "clock_timestamp() FROM idem_submission WHERE "
	    "client_submission_id = 'fx-lapsed'", 30))
		fail_msg("the lease of fx-lapsed never lapsed");
	holds(begin(&a.b, "fx-lapsed", "lapsed@example.org", 1),
	    "\"disposition\":\"outcome_unknown\"");
	/* Released: completed not_applied. */
	proceed = begin(&a.b, "fx-released", "nobody@example.org", 0);
	holds(complete(&a.b, "fx-released", proceed, "not_applied", NULL),
	    "\"state\":\"released\"");
	free(proceed);

	server_stop();
	/* The control: a committed body a cached answers (the cache works). */
	reply = begin(&a.b, "fx-done", "done@example.org", 1);
	assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
	free(reply);
	/* Nothing unfinished is answered from the table. */
	unavailable(begin(&a.b, "fx-open", "open@example.org", 1));
	unavailable(begin(&a.b, "fx-lapsed", "lapsed@example.org", 1));
	unavailable(begin(&a.b, "fx-released", "nobody@example.org", 1));
	/* Nor a tombstone. */
	unavailable(begin(&b.b, "fx-old", "old@example.org", 1));
	/* The reads are the server's, the cached key's too. */
	unavailable(get_effect(&a.b, "fx-done"));
	unavailable(raw_line(&a.b, strdup("{\"op\":\"diagnose\"}")));
	/*
	 * A body cached before the compaction answers whole on its broker
	 * (the creations' rule), the commit's receipt.
	 */
	reply = begin(&a.b, "fx-old", "old@example.org", 1);
	assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
	assert_null(strstr(reply, "\"receipt_pruned\""));
	same_receipt(reply, old);
	free(reply);
	server_back();
	/* get_submission shows the row: the tombstone. */
	holds(get_effect(&a.b, "fx-old"), "\"receipt_pruned\":true");
	/* And nothing above moved a row: still one committed, one open. */
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE kind = 3 AND state = 3"), 1);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE kind = 3 AND state = 1"), 2);
	free(done);
	free(old);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	harness_finish(&root);
}

static void
a_full_table_caches_on(void **state)
{
	static struct node	 a;
	static struct broker	 root;
	char			 id[32], to[64], *last = NULL, *reply;
	json_t			*r;
	int			 i;

	(void)state;
	start_one(&root, &a, "--capacity", "16");
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "task-%d", i);
		r = harness_must_call(&a.b, harness_write_task(id,
		    "Fill the table"));
		assert_string_equal(harness_str(r, "disposition"), "created");
		json_decref(r);
	}
	for (i = 0; i < 24; i++) {
		snprintf(id, sizeof id, "fx-full-%d", i);
		snprintf(to, sizeof to, "n%d@example.org", i);
		free(last);
		last = commit(&a.b, id, to);
	}
	r = harness_must_call(&a.b, harness_write_task("task-40",
	    "Fill the table"));
	assert_string_equal(harness_str(r, "disposition"), "created");
	json_decref(r);
	server_stop();
	/* The newest of each, from the table. */
	r = harness_must_call(&a.b, harness_write_task("task-40",
	    "Fill the table"));
	if (strcmp(harness_str(r, "disposition"), "reused") != 0)
		fail_msg("task-40 with the server stopped: %s",
		    json_dumps(r, JSON_COMPACT));
	json_decref(r);
	reply = begin(&a.b, "fx-full-23", "n23@example.org", 1);
	if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
		fail_msg("fx-full-23 with the server stopped: %s", reply);
	same_receipt(reply, last);
	free(reply);
	/* The first creation left the table: its retry needs the row. */
	r = harness_must_call(&a.b, harness_write_task("task-0",
	    "Fill the table"));
	reply = json_dumps(r, JSON_COMPACT);
	json_decref(r);
	unavailable(reply);
	server_back();
	free(last);
	cluster_node_kill(&a);
	harness_finish(&root);
}

static void
a_turned_arena_reads_the_row(void **state)
{
	static struct node	 a;
	static struct broker	 root;
	char			 id[32], *big, *first = NULL, *last = NULL;
	char			*proceed, *reply;
	int			 i;

	(void)state;
	start_one(&root, &a, "--result-bytes", "65552");
	assert_non_null(big = malloc(8193));
	memset(big, 'r', 8192);
	big[8192] = '\0';
	for (i = 0; i < 12; i++) {
		snprintf(id, sizeof id, "fx-arena-%d", i);
		proceed = begin(&a.b, id, "arena@example.org", 0);
		holds(strdup(proceed), "\"disposition\":\"proceed\"");
		reply = complete(&a.b, id, proceed, "applied", big);
		free(proceed);
		holds(strdup(reply), "\"state\":\"committed\"");
		if (i == 0)
			first = reply;
		else {
			free(last);
			last = reply;
		}
	}
	server_stop();
	/* The newest: its bytes still in the arena, from the table. */
	reply = begin(&a.b, "fx-arena-11", "arena@example.org", 1);
	if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
		fail_msg("fx-arena-11 with the server stopped: %s", reply);
	same_receipt(reply, last);
	free(reply);
	/* The oldest: its entry is there, its bytes are not: the row. */
	unavailable(begin(&a.b, "fx-arena-0", "arena@example.org", 1));
	unavailable(begin(&a.b, "fx-arena-0", "arena@example.org", 0));
	server_back();
	/* Read again from the row, whole. */
	reply = begin(&a.b, "fx-arena-0", "arena@example.org", 1);
	same_receipt(reply, first);
	free(reply);
	free(first);
	free(last);
	free(big);
	cluster_node_kill(&a);
	harness_finish(&root);
}

/* The watchdog, and the server running (a failed case may stop it). */
static int
setup(void **state)
{
	cluster_arm_watchdog(state);
	if (server.pid == 0 && pgserver_restart(&server) != 0)
		return -1;
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(cached_answers_are_the_servers,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    second_broker_caches_on_its_first_read,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    uncommitted_never_from_the_cache,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(a_full_table_caches_on,
		    setup, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(a_turned_arena_reads_the_row,
		    setup, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
