/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_extend: effect_extend on the PostgreSQL store, two
 * brokers on one workspace (doc/cluster.md, "Effects"; the local
 * store's are tests/integration/test_effect_extend.c):
 *
 * - a 1 s lease extended every 100 ms for 3 s, on either broker in
 *   turn, while a rival on each broker gets in_progress throughout; then
 *   complete on the other broker;
 * - the holder (a process of its own) killed mid-effect: its lease
 *   lapses by the server's clock, the next begin on the other broker is
 *   outcome_unknown, an extension with its fence too (the row's lease
 *   unchanged), its complete accepted;
 * - stale fence, no reservation, released, committed, lapsed: refused,
 *   the row's lease_expires unchanged;
 * - a broker killed in the middle of an extended effect: the extension
 *   was committed before its reply, so the other broker and the
 *   restarted one keep it, and the holder goes on extending through
 *   either.
 */
#include <sys/wait.h>

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "idem.h"
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

#define KIND		"deploy/v1"
#define REQUEST		"{\"service\":\"api\"}"
/*
 * Ten extensions a lease: one late by most of a lease under a loaded
 * machine's scheduling (CI runs the suites side by side) must not let it
 * lapse; a 300 ms lease failed so, twice, beside other suites.
 */
#define LEASE_MS	1000
#define EXTEND_EVERY_MS	100
#define EXTEND_FOR_MS	3000
#define LAPSE_WAIT_MS	10000

static void
sleep_ms(int64_t ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static json_t *
op_request(const char *op, const char *id)
{
	json_t	*r;

	r = json_pack("{s:s, s:s, s:s}", "op", op, "client_submission_id", id,
	    "effect_kind", KIND);
	assert_non_null(r);
	return r;
}

static json_t *
begin_request(const char *id, int64_t lease_ms)
{
	json_t	*r = op_request("effect_begin", id);

	json_object_set_new(r, "request", json_loads(REQUEST, 0, NULL));
	if (lease_ms > 0)
		json_object_set_new(r, "lease_ms", json_integer(lease_ms));
	return r;
}

static json_t *
extend_request(const char *id, const char *fence, int64_t lease_ms)
{
	json_t	*r = op_request("effect_extend", id);

	json_object_set_new(r, "fence", json_string(fence));
	json_object_set_new(r, "lease_ms", json_integer(lease_ms));
	return r;
}

static json_t *
complete_request(const char *id, const char *fence, const char *outcome)
{
	json_t	*r = op_request("effect_complete", id);

	json_object_set_new(r, "fence", json_string(fence));
	json_object_set_new(r, "outcome", json_string(outcome));
	json_object_set_new(r, "result", json_pack("{s:b}", "deployed", 1));
	return r;
}

static const char *
disposition_of(json_t *reply)
{
	const char	*d = json_string_value(json_object_get(reply,
			    "disposition"));

	return d != NULL ? d : "";
}

static void
want(json_t *reply, const char *disposition, const char *reason)
{
	char	*text;

	if (strcmp(disposition_of(reply), disposition) != 0 ||
	    (reason != NULL && strcmp(harness_str(json_object_get(reply,
	    "error"), "reason"), reason) != 0)) {
		text = json_dumps(reply, JSON_COMPACT);
		fail_msg("expected %s %s, got %s", disposition,
		    reason != NULL ? reason : "", text);
	}
	json_decref(reply);
}

/* An extension's answer: SPEC's {"ok":true,"lease_expires_at":...}. */
static void
extended(json_t *reply)
{
	char	*text;

	if (reply == NULL || !json_is_true(json_object_get(reply, "ok")) ||
	    json_object_get(reply, "lease_expires_at") == NULL) {
		text = reply != NULL ? json_dumps(reply, JSON_COMPACT) : NULL;
		fail_msg("extension refused: %s", text != NULL ? text :
		    "(no reply)");
	}
	json_decref(reply);
}

static char *
proceed_fence(json_t *reply)
{
	char	*fence;

	if (strcmp(disposition_of(reply), "proceed") != 0)
		want(reply, "proceed", NULL);
	fence = strdup(harness_str(reply, "fence"));
	json_decref(reply);
	return fence;
}

/* The row's lease_expires, ms since the epoch (the server's). */
static long
row_lease(const char *id)
{
	return cluster_sql_long(&server, "SELECT (extract(epoch from "
	    "lease_expires) * 1000)::bigint FROM idem_submission WHERE "
	    "kind = 3 AND client_submission_id = '%s'", id);
}

/* begin on n until the lease lapsed: in_progress before, never proceed. */
static void
until_lapsed(struct node *n, const char *id)
{
	json_t	*reply;
	int	 waited;

	for (waited = 0; waited < LAPSE_WAIT_MS; waited += 10) {
		reply = harness_must_call(&n->b, begin_request(id, 0));
		if (strcmp(disposition_of(reply), "outcome_unknown") == 0) {
			json_decref(reply);
			return;
		}
		want(reply, "in_progress", NULL);
		/* Nothing but the server's clock ends a lease: poll it. */
		sleep_ms(10);
	}
	fail_msg("%s: the lease did not lapse", id);
}

static void
two_nodes(struct node *a, struct node *b, char root[256])
{
	cluster_store_reset(&server);
	cluster_fresh_root(root);
	cluster_node_init(a, server.uri, root, "a");
	cluster_node_init(b, server.uri, root, "b");
	assert_int_equal(cluster_node_start(a, "30000", "2", NULL, NULL,
	    NULL), 0);
	assert_int_equal(cluster_node_start(b, "30000", "2", NULL, NULL,
	    NULL), 0);
}

/* ---- a long effect ------------------------------------------------------- */

struct rival {
	struct node	*n;
	atomic_int	*stop;
	int		 in_progress, other;
	char		 text[512];
};

static void *
rival_main(void *arg)
{
	struct rival		*r = arg;
	struct idem_conn	*c = harness_connect(&r->n->b);
	json_t			*reply;
	char			*text;

	if (c == NULL) {
		r->other++;
		return NULL;
	}
	while (!atomic_load(r->stop)) {
		reply = harness_call(c, begin_request("long-1", LEASE_MS));
		if (reply != NULL && strcmp(disposition_of(reply),
		    "in_progress") == 0)
			r->in_progress++;
		else {
			r->other++;
			text = reply != NULL ? json_dumps(reply,
			    JSON_COMPACT) : NULL;
			snprintf(r->text, sizeof r->text, "%s", text != NULL ?
			    text : "(no reply)");
			free(text);
		}
		json_decref(reply);
		sleep_ms(10);
	}
	idem_close(c);
	return NULL;
}

static void
extended_across_brokers_nobody_else_proceeds(void **state)
{
	static struct node	 a, b;
	struct node		*on[2] = { &a, &b };
	struct rival		 rivals[2];
	pthread_t		 threads[2];
	atomic_int		 stop = 0;
	char			 root[256], *fence;
	json_t			*reply, *entry;
	int64_t			 started, lease;
	int			 i, n = 0;

	(void)state;
	lease = LEASE_MS * (int64_t)harness_slowdown();
	two_nodes(&a, &b, root);
	fence = proceed_fence(harness_must_call(&a.b, begin_request("long-1",
	    lease)));
	for (i = 0; i < 2; i++) {
		memset(&rivals[i], 0, sizeof rivals[i]);
		rivals[i].n = on[i];
		rivals[i].stop = &stop;
		assert_int_equal(pthread_create(&threads[i], NULL, rival_main,
		    &rivals[i]), 0);
	}
	started = harness_now_ms();
	while (harness_now_ms() - started < EXTEND_FOR_MS *
	    (int64_t)harness_slowdown()) {
		sleep_ms(EXTEND_EVERY_MS * harness_slowdown());
		/* Either broker extends: the lease is the row's. */
		extended(harness_call_once(&on[n++ % 2]->b,
		    extend_request("long-1", fence, lease)));
	}
	/* diagnose on either shows the time left, not stalled. */
	reply = harness_must_call(&b.b, json_pack("{s:s, s:I}", "op",
	    "diagnose", "stale_after_ms", (json_int_t)(1000 *
	    harness_slowdown())));
	entry = json_array_get(json_object_get(reply, "entries"), 0);
	assert_non_null(entry);
	assert_string_equal(harness_str(entry, "client_submission_id"),
	    "long-1");
	assert_true(harness_int(entry, "lease_ms_left") > 0);
	assert_true(harness_int(entry, "lease_ms_left") <= lease);
	harness_assert_bool(entry, "stalled", 0);
	json_decref(reply);
	atomic_store(&stop, 1);
	for (i = 0; i < 2; i++) {
		pthread_join(threads[i], NULL);
		if (rivals[i].other > 0)
			fail_msg("a rival's begin got %s", rivals[i].text);
		assert_true(rivals[i].in_progress > 0);
	}
	reply = harness_must_call(&b.b, complete_request("long-1", fence,
	    "applied"));
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "committed");
	json_decref(reply);
	want(harness_must_call(&a.b, begin_request("long-1", 0)), "reused",
	    NULL);
	assert_int_equal(cluster_sql_long(&server, "SELECT epoch FROM "
	    "idem_submission WHERE kind = 3 AND client_submission_id = "
	    "'long-1'"), 1);
	free(fence);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	cluster_rm_root(root);
}

/* ---- the holder killed --------------------------------------------------- */

/* Begin on n, hand the fence to fd, extend every EXTEND_EVERY_MS. */
static void
holder_main(struct node *n, int fd, int64_t lease)
{
	struct idem_conn	*c = harness_connect(&n->b);
	json_t			*reply, *r;
	const char		*fence;

	if (c == NULL || (reply = harness_call(c, begin_request("held-1",
	    lease))) == NULL || strcmp(disposition_of(reply), "proceed") != 0)
		_exit(1);
	fence = json_string_value(json_object_get(reply, "fence"));
	if (write(fd, fence, strlen(fence) + 1) != (ssize_t)strlen(fence) + 1)
		_exit(1);
	for (;;) {
		sleep_ms(EXTEND_EVERY_MS * harness_slowdown());
		r = harness_call(c, extend_request("held-1", fence, lease));
		if (r == NULL || !json_is_true(json_object_get(r, "ok")))
			_exit(2);
		json_decref(r);
	}
}

static void
holder_killed_lapses_on_the_other_broker(void **state)
{
	static struct node	 a, b;
	char			 root[256], fence[64];
	json_t			*reply;
	int			 fds[2], status;
	int64_t			 lease, started;
	long			 until;
	ssize_t			 got;
	pid_t			 pid;

	(void)state;
	lease = LEASE_MS * (int64_t)harness_slowdown();
	two_nodes(&a, &b, root);
	assert_int_equal(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		close(fds[0]);
		holder_main(&a, fds[1], lease);
	}
	assert_true(pid > 0);
	close(fds[1]);
	got = read(fds[0], fence, sizeof fence);
	close(fds[0]);
	assert_true(got > 0 && fence[got - 1] == '\0');
	started = harness_now_ms();
	while (harness_now_ms() - started < 3 * lease) {
		want(harness_must_call(&b.b, begin_request("held-1", 0)),
		    "in_progress", NULL);
		sleep_ms(20);
	}
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	until_lapsed(&b, "held-1");
	until = row_lease("held-1");
	want(harness_must_call(&a.b, begin_request("held-1", 0)),
	    "outcome_unknown", NULL);
	/* Not extended, on either broker: the row's lease stays. */
	want(harness_must_call(&b.b, extend_request("held-1", fence, lease)),
	    "outcome_unknown", NULL);
	want(harness_must_call(&a.b, extend_request("held-1", fence, 600000)),
	    "outcome_unknown", NULL);
	assert_int_equal(row_lease("held-1"), until);
	/* The holder's complete with its fence is accepted. */
	reply = harness_must_call(&b.b, complete_request("held-1", fence,
	    "applied"));
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "committed");
	json_decref(reply);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	cluster_rm_root(root);
}

/* ---- refusals ------------------------------------------------------------ */

static void
refusals_leave_the_row(void **state)
{
	static struct node	 a, b;
	char			 root[256], *f1, *f2, forged[64];
	long			 before;

	(void)state;
	two_nodes(&a, &b, root);
	want(harness_must_call(&a.b, extend_request("none",
	    "1-0123456789abcdef", 1000)), "conflict", "no_reservation");
	f1 = proceed_fence(harness_must_call(&a.b, begin_request("r-1",
	    60000)));
	before = row_lease("r-1");
	snprintf(forged, sizeof forged, "1-%s", strcmp(f1 + 2,
	    "0000000000000000") == 0 ? "0000000000000001" :
	    "0000000000000000");
	want(harness_must_call(&b.b, extend_request("r-1", forged, 600000)),
	    "conflict", "stale_fence");
	assert_int_equal(row_lease("r-1"), before);
	/* A short extension on B, then the lapse: outcome_unknown. */
	extended(harness_must_call(&b.b, extend_request("r-1", f1, 100)));
	assert_true(row_lease("r-1") < before);
	until_lapsed(&a, "r-1");
	before = row_lease("r-1");
	want(harness_must_call(&a.b, extend_request("r-1", f1, 600000)),
	    "outcome_unknown", NULL);
	assert_int_equal(row_lease("r-1"), before);
	/* Released: no reservation; the next attempt makes f1 stale. */
	json_decref(harness_must_call(&b.b, complete_request("r-1", f1,
	    "not_applied")));
	want(harness_must_call(&a.b, extend_request("r-1", f1, 1000)),
	    "conflict", "no_reservation");
	f2 = proceed_fence(harness_must_call(&b.b, begin_request("r-1",
	    60000)));
	want(harness_must_call(&a.b, extend_request("r-1", f1, 600000)),
	    "conflict", "stale_fence");
	extended(harness_must_call(&a.b, extend_request("r-1", f2, 600000)));
	/* Committed. */
	json_decref(harness_must_call(&a.b, complete_request("r-1", f2,
	    "applied")));
	want(harness_must_call(&b.b, extend_request("r-1", f2, 1000)),
	    "conflict", "already_committed");
	free(f1);
	free(f2);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	cluster_rm_root(root);
}

/* ---- a broker killed mid-effect ------------------------------------------ */

static void
broker_killed_mid_extended_effect(void **state)
{
	static struct node	 a, b;
	char			 root[256], *fence;
	long			 extended_to;

	(void)state;
	two_nodes(&a, &b, root);
	fence = proceed_fence(harness_must_call(&a.b, begin_request("k-1",
	    2000)));
	extended(harness_must_call(&a.b, extend_request("k-1", fence,
	    600000)));
	extended_to = row_lease("k-1");
	/* Committed before the reply: a kill -9 of A loses nothing. */
	cluster_node_kill(&a);
	assert_int_equal(row_lease("k-1"), extended_to);
	want(harness_must_call(&b.b, begin_request("k-1", 0)), "in_progress",
	    NULL);
	/* The holder goes on through B, then through A restarted. */
	extended(harness_must_call(&b.b, extend_request("k-1", fence,
	    600000)));
	assert_int_equal(cluster_node_start(&a, "30000", "2", NULL, NULL,
	    NULL), 0);
	want(harness_must_call(&a.b, begin_request("k-1", 0)), "in_progress",
	    NULL);
	extended(harness_must_call(&a.b, extend_request("k-1", fence,
	    600000)));
	json_decref(harness_must_call(&a.b, complete_request("k-1", fence,
	    "applied")));
	want(harness_must_call(&b.b, begin_request("k-1", 0)), "reused",
	    NULL);
	free(fence);
	cluster_node_kill(&a);
	cluster_node_kill(&b);
	cluster_rm_root(root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    extended_across_brokers_nobody_else_proceeds,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    holder_killed_lapses_on_the_other_broker,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(refusals_leave_the_row,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    broker_killed_mid_extended_effect,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
