/* SPDX-License-Identifier: ISC */
/*
 * test_cluster_batch: group commit at the broker on the PostgreSQL store
 * (doc/cluster.md, "Group commit at the broker"), a batch that fails
 * halfway: the server's backend of the batch's leader terminated between
 * the batch's send and its commit's result; and a mixed round (grants
 * and commits in one statement) likewise (mixed_round_fails_halfway);
 * and a round stalled in flight, which the worker's other creations
 * leave behind after a second, going alone on their own connections
 * (a_member_behind_a_stalled_round_goes_alone); and a round that waits
 * for a member on its way to the queue and carries it
 * (a_round_waits_for_a_member_on_its_way), and the members a round
 * of grants granted, on their way from its end, link under one
 * directory fsync and commit in one round
 * (a_round_of_grants_links_and_commits_together); and a member stalled
 * on its way costs one wait of a second, not one every round
 * (a_stalled_member_costs_one_wait_not_every_round), and a member on
 * its way that leaves another way lets a waiting round go at once
 * (a_member_leaving_another_way_wakes_the_round), and a member queued
 * behind a round is woken when it settles
 * (a_member_behind_a_round_is_woken_when_it_settles); and a legacy call's
 * failed directory fsync fails a creation linked before it, whose own
 * round then succeeds
 * (a_legacy_fsync_failure_fails_a_link_it_may_have_covered).
 *
 * One broker, one worker, four creation threads.  IDEM_CRASH_BATCH_OF
 * makes the worker's first grant (or commit) batch wait until four
 * creations are queued (so the test knows its members),
 * IDEM_CRASH_HOLD_AT=after_grant_batch_sent (after_commit_batch_sent)
 * holds the leader once the batch is sent (the test's open of the FIFO
 * returns then), and a trigger on the server makes a grant (a commit)
 * wait for an advisory lock the test holds, so that the batch cannot
 * commit before the test terminates the leader's backend
 * (pg_terminate_backend).  Then every member must answer
 * storage_unavailable (retryable), none created:
 *
 * - the grant: no row granted, no temporary and no file left; each id
 *   retried is created once (a takeover after the members' leases),
 *   exactly one TASK file each, a second retry reused, the same task;
 * - the commit: no row committed, each member's file linked and
 *   durable; each id retried is reused from its file (recovered, a
 *   takeover), exactly one TASK file each, and so is a second retry.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

#include <libpq-fe.h>

static struct pgserver	server;

/* The batch's members, and the worker's creation threads. */
#define MEMBERS		4
#define MEMBERS_S	"4"
/* The advisory lock the trigger's grants wait for. */
#define GATE_KEY	"7232032"
/* The members' leases: a retry takes over once they ran out. */
#define LEASE_MS	"2000"

/* A statement on the test's own session, failing the test on an error. */
static void
gate_exec(PGconn *conn, const char *sql)
{
	PGresult	*res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_TUPLES_OK &&
	    PQresultStatus(res) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
}

/*
 * n creations of ids prefix-*, all done: n TASK files, no temporary
 * left, n rows committed.
 */
static void
assert_all_committed(const char *root, const char *prefix, long n)
{
	assert_int_equal(cluster_tasks_on_disk(root, NULL), n);
	assert_int_equal(cluster_temporaries(root), 0);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id LIKE '%s-%%' AND "
	    "state = 3", prefix), n);
}

/* The step a test fails: its fault variables, its gate, its log. */
struct halfway {
	const char	*name;		/* "grant", "commit" */
	const char	*batch_of;	/* IDEM_CRASH_BATCH_OF=... */
	const char	*point;		/* the hold point */
	const char	*gated;		/* the trigger's WHEN */
};

static const struct halfway grant_halfway = { "grant",
    "IDEM_CRASH_BATCH_OF=" MEMBERS_S, "after_grant_batch_sent",
    "NEW.lease_granted AND NOT OLD.lease_granted" };
static const struct halfway commit_halfway = { "commit",
    "IDEM_CRASH_BATCH_OF=commit:" MEMBERS_S, "after_commit_batch_sent",
    "NEW.state = 3 AND OLD.state < 3" };

/*
 * The step's updates (a grant: lease_granted false to true; a commit:
 * the state to committed) wait for GATE_KEY while on; nothing else.
 */
/*
 * Each "<prefix>-<i>" sent once more after its retry answered: reused,
 * the same task (task_id[i], freed here), still one TASK file each, and
 * every row committed.
 */
static void
retried_again(struct node *a, const char *root, const char *prefix,
    const char *title, char *task_id[MEMBERS])
{
	json_t	*reply;
	char	 id[32];
	int	 i;

	for (i = 0; i < MEMBERS; i++) {
		snprintf(id, sizeof id, "%s-%d", prefix, i);
		reply = harness_must_call(&a->b, harness_write_task(id, title));
		harness_assert_outcome(reply, "reused", 0, 1, 0);
		assert_string_equal(harness_receipt_str(reply, "task_id"),
		    task_id[i]);
		json_decref(reply);
		free(task_id[i]);
	}
	assert_int_equal(cluster_tasks_on_disk(root, NULL), MEMBERS);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id LIKE '%s-%%' AND "
	    "state = 3", prefix), MEMBERS);
}

static void
gate_step(const struct halfway *h, int on)
{
	char	 q[1024], *out;

	snprintf(q, sizeof q, on ?
	    "CREATE OR REPLACE FUNCTION test_gate() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$ BEGIN PERFORM "
	    "pg_advisory_xact_lock_shared(" GATE_KEY "); RETURN NEW; END $$; "
	    "DROP TRIGGER IF EXISTS test_gate ON idem_submission; "
	    "CREATE TRIGGER test_gate BEFORE UPDATE ON idem_submission "
	    "FOR EACH ROW WHEN (%s) EXECUTE FUNCTION test_gate()" :
	    "DROP TRIGGER IF EXISTS test_gate ON idem_submission%.0s",
	    h->gated);
	out = pgserver_psql(&server, q);
	assert_non_null(out);
	free(out);
}

/* The batch's statement waiting at the gate: its backend's pid. */
#define AT_THE_GATE \
	"FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND " \
	"wait_event = 'advisory' AND left(query, 9) = 'WITH b AS'"

static void
batch_fails_halfway(const struct halfway *h)
{
	static struct node	 a;
	char		 root[256], fifo[300], hold[400], id[32], want[64];
	char		*task_id[MEMBERS], *out;
	const char *const env[] = { h->batch_of, hold, NULL };
	int		 commit = strcmp(h->name, "commit") == 0;
	struct pollfd	 pfd;
	json_t		*request, *reply;
	PGconn		*gate;
	char		*line;
	int		 fds[MEMBERS], w, i;

	cluster_hold_setup(&server, h->point, root, fifo,
	    sizeof fifo, hold, sizeof hold);

	/* The gate shut: the test's session holds the lock the step waits for. */
	gate_step(h, 1);
	gate = PQconnectdb(server.uri);
	assert_int_equal(PQstatus(gate), CONNECTION_OK);
	gate_exec(gate, "SELECT pg_advisory_lock(" GATE_KEY ")");

	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = MEMBERS_S;
	assert_int_equal(cluster_node_start(&a, LEASE_MS, "1", "30000", NULL,
	    env), 0);
	for (i = 0; i < MEMBERS; i++) {
		assert_true((fds[i] = harness_raw_connect(&a.b)) >= 0);
		snprintf(id, sizeof id, "halfway-%d", i);
		request = harness_write_task(id, "A batch that fails halfway");
		line = json_dumps(request, JSON_COMPACT);
		json_decref(request);
		assert_int_equal(harness_raw_send(fds[i], line), 0);
		free(line);
	}
	/* The batch of four is sent; its leader holds before its result. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	snprintf(want, sizeof want, "the first %s batch: " MEMBERS_S
	    " members", h->name);
	assert_int_equal(harness_log_count(&a.b, want), 1);
	/* Its statement waits at the gate: not committed, cannot be. */
	if (!pgserver_await(&server, "SELECT count(*) = 1 " AT_THE_GATE, 30))
		fail_msg("the batch's statement never reached the gate");
	out = cluster_sql_value(&server, "SELECT bool_and("
	    "pg_terminate_backend(pid)) " AT_THE_GATE);
	assert_string_equal(out, "t");
	free(out);
	/* Let the leader read what came back: its session's end. */
	close(w);

	for (i = 0; i < MEMBERS; i++) {
		pfd.fd = fds[i];
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 30000) != 1)
			fail_msg("member %d has no answer", i);
		assert_non_null(line = harness_raw_read_line(fds[i]));
		assert_non_null(reply = json_loads(line, 0, NULL));
		free(line);
		/* Not created, not in progress: storage_unavailable. */
		harness_assert_error(reply, "storage_unavailable", 1);
		json_decref(reply);
		close(fds[i]);
	}
	snprintf(want, sizeof want, "a %s batch of " MEMBERS_S ": ", h->name);
	harness_wait_log(&a.b, want, 1, 10000);
	assert_true(harness_log_count(&a.b, "its outcome is unknown, every "
	    "member fails") >= 1);
	/*
	 * Nothing committed.  The grant: nothing granted, no file, every
	 * member's temporary removed.  The commit: each file linked.
	 */
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id LIKE 'halfway-%%' "
	    "AND state = 1 AND lease_granted = %s", commit ? "true" :
	    "false"), MEMBERS);
	assert_int_equal(cluster_tasks_on_disk(root, NULL), commit ? MEMBERS :
	    0);
	assert_int_equal(cluster_temporaries(root), 0);

	/* The gate open; each id retried: a takeover, once. */
	gate_exec(gate, "SELECT pg_advisory_unlock(" GATE_KEY ")");
	PQfinish(gate);
	gate_step(h, 0);
	for (i = 0; i < MEMBERS; i++) {
		snprintf(id, sizeof id, "halfway-%d", i);
		reply = cluster_call_until_final(&a.b,
		    harness_write_task(id, "A batch that fails halfway"));
		assert_non_null(reply);
		if (commit)
			harness_assert_outcome(reply, "reused", 0, 1, 1);
		else
			harness_assert_outcome(reply, "created", 1, 1, 1);
		task_id[i] = strdup(harness_receipt_str(reply, "task_id"));
		json_decref(reply);
	}
	assert_int_equal(cluster_tasks_on_disk(root, NULL), MEMBERS);
	assert_int_equal(cluster_temporaries(root), 0);
	retried_again(&a, root, "halfway", "A batch that fails halfway", task_id);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

static void
grant_batch_fails_halfway(void **state)
{
	(void)state;
	batch_fails_halfway(&grant_halfway);
}

static void
commit_batch_fails_halfway(void **state)
{
	(void)state;
	batch_fails_halfway(&commit_halfway);
}

/* One reply on fd, within 30 s. */
static json_t *
read_reply(int fd)
{
	struct pollfd	 pfd = { .fd = fd, .events = POLLIN };
	json_t		*reply;
	char		*line;

	if (poll(&pfd, 1, 30000) != 1)
		fail_msg("no answer");
	assert_non_null(line = harness_raw_read_line(fd));
	assert_non_null(reply = json_loads(line, 0, NULL));
	free(line);
	return reply;
}

/* Send a write_task of id "mixed-<i>" on a new connection: its fd. */
static int
send_mixed(struct node *a, int i)
{
	char	id[32];

	snprintf(id, sizeof id, "mixed-%d", i);
	return harness_raw_send_task(&a->b, id, "A round that fails halfway");
}

/*
 * A mixed round (doc/cluster.md, "Group commit at the broker") failing
 * halfway: two creations' commits and two others' grants in one
 * statement (IDEM_CRASH_BATCH_OF=round:4 holds the first two commits
 * until two grants join them), its leader held after the send, the
 * statement kept at the gate by the grants' rows, and its backend
 * terminated there.  The outcome is unknown: all four answer
 * storage_unavailable, none created; the commits' files are linked,
 * the grants' temporaries removed.  Retried: the two commits reused from
 * their files, the two grants created once (takeovers), one TASK file
 * each, every row committed once.
 */
static void
mixed_round_fails_halfway(void **state)
{
	static struct node	 a;
	char		 root[256], fifo[300], hold[400], id[32];
	char		*task_id[MEMBERS], *out;
	const char *const env[] = { "IDEM_CRASH_BATCH_OF=round:" MEMBERS_S,
	    hold, NULL };
	json_t		*reply;
	PGconn		*gate;
	int		 fds[MEMBERS], w, i;

	(void)state;
	cluster_hold_setup(&server, commit_halfway.point, root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = MEMBERS_S;
	assert_int_equal(cluster_node_start(&a, LEASE_MS, "1", "30000", NULL,
	    env), 0);
	/* Two creations granted, linked, their commits held. */
	for (i = 0; i < 2; i++)
		fds[i] = send_mixed(&a, i);
	harness_wait_log(&a.b, "the first mixed round: holding 2 commits", 1,
	    30000);
	/* The gate shut for the grants of the two that follow. */
	gate_step(&grant_halfway, 1);
	gate = PQconnectdb(server.uri);
	assert_int_equal(PQstatus(gate), CONNECTION_OK);
	gate_exec(gate, "SELECT pg_advisory_lock(" GATE_KEY ")");
	for (i = 2; i < MEMBERS; i++)
		fds[i] = send_mixed(&a, i);
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	assert_int_equal(harness_log_count(&a.b, "the first mixed round: 2 "
	    "grants, 2 commits"), 1);
	if (!pgserver_await(&server, "SELECT count(*) = 1 " AT_THE_GATE, 30))
		fail_msg("the round's statement never reached the gate");
	out = cluster_sql_value(&server, "SELECT bool_and("
	    "pg_terminate_backend(pid)) " AT_THE_GATE);
	assert_string_equal(out, "t");
	free(out);
	close(w);

	for (i = 0; i < MEMBERS; i++) {
		reply = read_reply(fds[i]);
		harness_assert_error(reply, "storage_unavailable", 1);
		json_decref(reply);
		close(fds[i]);
	}
	harness_wait_log(&a.b, "a grant and commit batch of " MEMBERS_S ": ",
	    1, 10000);
	assert_true(harness_log_count(&a.b, "its outcome is unknown, every "
	    "member fails") >= 1);
	assert_int_equal(cluster_tasks_on_disk(root, NULL), 2);
	assert_int_equal(cluster_temporaries(root), 0);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id IN ('mixed-0', "
	    "'mixed-1') AND state = 1 AND lease_granted"), 2);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id IN ('mixed-2', "
	    "'mixed-3') AND state = 1 AND NOT lease_granted"), 2);

	gate_exec(gate, "SELECT pg_advisory_unlock(" GATE_KEY ")");
	PQfinish(gate);
	gate_step(&grant_halfway, 0);
	for (i = 0; i < MEMBERS; i++) {
		snprintf(id, sizeof id, "mixed-%d", i);
		reply = cluster_call_until_final(&a.b,
		    harness_write_task(id, "A round that fails halfway"));
		assert_non_null(reply);
		if (i < 2)
			harness_assert_outcome(reply, "reused", 0, 1, 1);
		else
			harness_assert_outcome(reply, "created", 1, 1, 1);
		task_id[i] = strdup(harness_receipt_str(reply, "task_id"));
		json_decref(reply);
	}
	retried_again(&a, root, "mixed", "A round that fails halfway", task_id);
	assert_int_equal(cluster_temporaries(root), 0);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/*
 * A round stalled in flight holds back only its own members (pg_group.c,
 * GROUP_ALONE_MS): the first creation's grant round is held after its
 * send (IDEM_CRASH_HOLD_AT=after_grant_batch_sent), so that nobody may
 * read it and the worker's steps queue stays behind it.  A second
 * creation on the worker's other thread claims (the claims' queue is
 * free), then queues its grant behind the held round, waits a second
 * and goes alone on its own connection, and so does its commit: it is
 * created while the first still has no answer, and the log says twice
 * that a member went alone.  Let go, the first is created too: two
 * files, no temporary, both rows committed once; retried, both reused
 * with their task ids.
 */
static void
a_member_behind_a_stalled_round_goes_alone(void **state)
{
	static struct node	 a;
	const char	*title = "A round that stalls";
	char		 root[256], fifo[300], hold[400];
	char		*task_id[2];
	const char *const env[] = { hold, NULL };
	struct pollfd	 pfd;
	json_t		*reply;
	int		 fds[2], w, i;

	(void)state;
	cluster_hold_setup(&server, grant_halfway.point, root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	fds[0] = harness_raw_send_task(&a.b, "stall-0", title);
	/* Its grant's round is sent and held: the steps queue is blocked. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	fds[1] = harness_raw_send_task(&a.b, "stall-1", title);
	reply = read_reply(fds[1]);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	task_id[1] = strdup(harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	assert_int_equal(harness_log_count(&a.b, "a grant waited 1000 ms "
	    "behind a round in flight: it goes alone"), 1);
	assert_int_equal(harness_log_count(&a.b, "a commit waited 1000 ms "
	    "behind a round in flight: it goes alone"), 1);
	/* The held one has no answer yet, its row granted by no one. */
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = 'stall-0' AND "
	    "state = 1"), 1);
	close(w);
	reply = read_reply(fds[0]);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	task_id[0] = strdup(harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	assert_string_not_equal(task_id[0], task_id[1]);
	for (i = 0; i < 2; i++)
		close(fds[i]);
	assert_all_committed(root, "stall", 2);
	for (i = 0; i < 2; i++) {
		char	id[32];

		snprintf(id, sizeof id, "stall-%d", i);
		reply = harness_must_call(&a.b, harness_write_task(id, title));
		harness_assert_outcome(reply, "reused", 0, 1, 0);
		assert_string_equal(harness_receipt_str(reply, "task_id"),
		    task_id[i]);
		json_decref(reply);
		free(task_id[i]);
	}
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/*
 * A round of grants and commits waits for the worker's members on their
 * way to the queue (pg_group.c, pg_group_coming): the first creation,
 * granted and linked, is held before its directory's fsync
 * (IDEM_CRASH_HOLD_AT=after_task_file_linked): on its way to its
 * commit.  A second creation on the worker's other thread claims,
 * writes its temporary and queues its grant: no round is in flight, yet
 * it is not sent, since the first is on its way (the log says so, an
 * event), and its row stays ungranted.  Let go, the first's commit
 * arrives and carries the second's grant in one round: three rounds of
 * grants and commits for the two creations (the first's grant, the
 * mixed round, the second's commit), where a round sent at once is
 * four; one file each, both committed once.
 */
static void
a_round_waits_for_a_member_on_its_way(void **state)
{
	static struct node	 a;
	const char	*title = "A member on its way";
	char		 root[256], fifo[300], hold[400];
	const char *const env[] = { hold, NULL };
	struct pollfd	 pfd;
	json_t		*reply;
	int		 fds[2], w, i;

	(void)state;
	cluster_hold_setup(&server, "after_task_file_linked", root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	fds[0] = harness_raw_send_task(&a.b, "way-0", title);
	/* Granted and linked, held before its directory's fsync. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	fds[1] = harness_raw_send_task(&a.b, "way-1", title);
	harness_wait_log(&a.b, "the first round waiting for members on their "
	    "way: 1", 1, 30000);
	/* Its grant queued, not sent: no answer, its row not granted. */
	pfd.fd = fds[1];
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = 'way-1' AND "
	    "state = 1 AND NOT lease_granted"), 1);
	close(w);
	for (i = 0; i < 2; i++) {
		reply = read_reply(fds[i]);
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
		close(fds[i]);
	}
	assert_all_committed(root, "way", 2);
	/* The worker's last lines (once it is gone) count its rounds. */
	assert_int_equal(harness_stop(&a.b), 0);
	cluster_node_reap(&a);
	assert_int_equal(harness_log_count(&a.b, "store rounds of grants and "
	    "commits: 3, with 0 claims, 2 grants, 2 commits"), 1);
	assert_int_equal(harness_log_count(&a.b, "store rounds of grants and "
	    "commits that waited for members on their way: 1 (0 of them"), 1);
	assert_int_equal(harness_log_count(&a.b, "; 0 waits for links on "
	    "their way ran out"), 1);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/*
 * Two creations granted in one round (IDEM_CRASH_BATCH_OF=2: the
 * worker's first grant round waits for both) are on their way to their
 * links and commits from the moment that round ends, not from when each
 * thread runs again: the one that read the round and links first waits
 * for the other's link, so one directory fsync covers both links, and
 * its commit waits for the other's, so one round carries both commits.
 * Two rounds of grants and commits and one directory fsync for the two
 * creations, where members marked only once they run again link and
 * commit apart as often as not.
 */
static void
a_round_of_grants_links_and_commits_together(void **state)
{
	static struct node	 a;
	const char	*title = "Granted together";
	const char *const env[] = { "IDEM_CRASH_BATCH_OF=2", NULL };
	char		 root[256];
	json_t		*reply;
	int		 fds[2], i;

	(void)state;
	cluster_need_fault_injection();
	cluster_store_reset(&server);
	cluster_fresh_root(root);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	fds[0] = harness_raw_send_task(&a.b, "together-0", title);
	fds[1] = harness_raw_send_task(&a.b, "together-1", title);
	for (i = 0; i < 2; i++) {
		reply = read_reply(fds[i]);
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
		close(fds[i]);
	}
	assert_int_equal(harness_log_count(&a.b, "the first grant batch: 2 "
	    "members"), 1);
	assert_int_equal(cluster_tasks_on_disk(root, NULL), 2);
	assert_int_equal(cluster_temporaries(root), 0);
	assert_int_equal(harness_stop(&a.b), 0);
	cluster_node_reap(&a);
	assert_int_equal(harness_log_count(&a.b, "store rounds of grants and "
	    "commits: 2, with 0 claims, 2 grants, 2 commits"), 1);
	assert_int_equal(harness_log_count(&a.b, "directory fsyncs after "
	    "links: 1 for 2 links; 0 waits for links on their way ran out"), 1);
	/* No mark leaked: no round's wait ran out, if one waited. */
	assert_int_equal(harness_log_count(&a.b, "(0 of them until 1000 ms "
	    "had passed)"), harness_log_count(&a.b, "that waited for "
	    "members on their way"));
	cluster_node_kill(&a);
	cluster_rm_root(root);
}

#define STALLED_AFTER	4	/* creations sent while one is held */

/*
 * A member stalled on its way (IDEM_CRASH_HOLD_AT=after_task_file_linked:
 * granted and linked, held before its directory's fsync, on its way to
 * that fsync and to its commit) is given up on once a wait for it ran
 * out (GROUP_ALONE_MS, DIRSYNC_GATHER_MS), not waited for again by every
 * later round: of the creations sent one after another meanwhile, the
 * first waits for the bounds (its grant's round, its link's fsync), all
 * the others finish in far less than a second each, where each round
 * starting a new wait made every one of them take two.  Let go, the
 * held one is created too; the worker's last lines count one wait run
 * out of each kind.
 */
static void
a_stalled_member_costs_one_wait_not_every_round(void **state)
{
	static struct node	 a;
	const char	*title = "Behind a stalled one";
	char		 root[256], fifo[300], hold[400], id[32];
	const char *const env[] = { hold, NULL };
	int64_t		 t0;
	json_t		*reply;
	long		 ms[STALLED_AFTER];
	int		 held, fd, w, i;

	(void)state;
	cluster_hold_setup(&server, "after_task_file_linked", root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	held = harness_raw_send_task(&a.b, "stalled-0", title);
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	for (i = 0; i < STALLED_AFTER; i++) {
		snprintf(id, sizeof id, "stalled-%d", i + 1);
		t0 = harness_now_ms();
		fd = harness_raw_send_task(&a.b, id, title);
		reply = read_reply(fd);
		ms[i] = harness_now_ms() - t0;
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
		close(fd);
	}
	/* The first waited for the bounds; no later one did. */
	if (ms[0] < 900)
		fail_msg("the first creation behind the stalled one took %ld "
		    "ms: no wait for it ran out", ms[0]);
	for (i = 1; i < STALLED_AFTER; i++)
		if (ms[i] >= 500)
			fail_msg("creation %d behind the stalled one took %ld "
			    "ms: a round waited for it again", i + 1, ms[i]);
	close(w);
	reply = read_reply(held);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	close(held);
	assert_all_committed(root, "stalled", STALLED_AFTER + 1);
	assert_int_equal(harness_stop(&a.b), 0);
	cluster_node_reap(&a);
	assert_int_equal(harness_log_count(&a.b, "(1 of them until 1000 ms "
	    "had passed)"), 1);
	assert_int_equal(harness_log_count(&a.b, "; 1 waits for links on "
	    "their way ran out"), 1);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/* A claim waiting for a table lock: its backend's. */
#define CLAIM_AT_THE_LOCK \
	"FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND " \
	"left(query, 15) = 'WITH clock AS ('"

/*
 * A member on its way that leaves another way (pg_group_gone: a claim
 * that finds its key's row) wakes the round waiting for it, which goes
 * at once rather than when its wait runs out.  The first creation is
 * held once claimed (IDEM_CRASH_HOLD_AT=after_reserve_durable); the
 * test's session locks the submissions table, and a second creation of
 * the same id claims (on its way to the grants' queue) and waits at the
 * lock.  The first, let go, queues its grant, which waits for the
 * second (the log says so); the lock given up, the second's claim finds
 * the first's row and leaves: the round goes at once, well before its
 * wait's bound (without the leave's wake-up it waits out its second;
 * without the leave at all, the worker's last line counts 1 wait run
 * out).
 */
static void
a_member_leaving_another_way_wakes_the_round(void **state)
{
	static struct node	 a;
	const char	*title = "One leaves another way";
	char		 root[256], fifo[300], hold[400];
	const char *const env[] = { hold, NULL };
	PGconn		*locker;
	int64_t		 t0;
	json_t		*reply;
	long		 ms;
	int		 first, second, w;

	(void)state;
	cluster_hold_setup(&server, "after_reserve_durable", root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	first = harness_raw_send_task(&a.b, "leaves-0", title);
	/* Claimed, held before its temporary. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	locker = PQconnectdb(server.uri);
	assert_int_equal(PQstatus(locker), CONNECTION_OK);
	gate_exec(locker, "BEGIN");
	gate_exec(locker, "LOCK TABLE idem_submission IN EXCLUSIVE MODE");
	second = harness_raw_send_task(&a.b, "leaves-0", title);
	if (!pgserver_await(&server, "SELECT count(*) = 1 " CLAIM_AT_THE_LOCK,
	    30))
		fail_msg("the second creation's claim never reached the lock");
	close(w);
	harness_wait_log(&a.b, "the first round waiting for members on their "
	    "way: 1", 1, 30000);
	t0 = harness_now_ms();
	gate_exec(locker, "COMMIT");
	PQfinish(locker);
	reply = read_reply(first);
	/*
	 * Its round went once the second left, not when its wait ran out
	 * (a second after it began: the log's line, a few ms before).
	 */
	if ((ms = harness_now_ms() - t0) >= 500)
		fail_msg("the first creation answered %ld ms after the second "
		    "left: its round was not woken by the leave", ms);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	close(first);
	reply = read_reply(second);
	assert_non_null(reply);
	json_decref(reply);
	close(second);
	assert_int_equal(cluster_tasks_on_disk(root, NULL), 1);
	assert_int_equal(harness_stop(&a.b), 0);
	cluster_node_reap(&a);
	/* Woken by the leave: the wait did not run out. */
	assert_int_equal(harness_log_count(&a.b, "store rounds of grants and "
	    "commits that waited for members on their way: "), 1);
	assert_int_equal(harness_log_count(&a.b, "(0 of them until 1000 ms "
	    "had passed)"), 1);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/*
 * A member queued behind a round in flight is woken when that round is
 * settled, and leads the next one (pg_group.c, group_settle: each
 * thread is woken alone, the first queued member waiting among them),
 * rather than when its wait's bound passes.  The first creation's
 * commit round is held after its send
 * (IDEM_CRASH_HOLD_AT=after_commit_batch_sent); a second creation on
 * the worker's other thread claims (the claims' queue is free) and
 * queues its grant behind the held round (the log says so, an event).
 * Let go, the first's round is read and settled, and nothing else comes
 * to the queue (the first is done): only that wake-up sends the
 * second's grant.  Without it the second waits out its bound behind a
 * round no longer in flight, lengthened to 20 s here
 * (IDEM_CRASH_BEHIND_MS) so that a loaded machine's delay cannot pass
 * for it: the test allows 10 s, and the second then goes alone.
 */
static void
a_member_behind_a_round_is_woken_when_it_settles(void **state)
{
	static struct node	 a;
	const char	*title = "Woken when it settles";
	char		 root[256], fifo[300], hold[400];
	const char *const env[] = { hold, "IDEM_CRASH_BEHIND_MS=20000",
	    NULL };
	int64_t		 t0;
	json_t		*reply;
	long		 ms;
	int		 first, second, w;

	(void)state;
	cluster_hold_setup(&server, commit_halfway.point, root, fifo,
	    sizeof fifo, hold, sizeof hold);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	first = harness_raw_send_task(&a.b, "woken-0", title);
	/* Its commit's round is sent and held: the steps queue is behind. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	second = harness_raw_send_task(&a.b, "woken-1", title);
	harness_wait_log(&a.b, "the first member waiting behind a round in "
	    "flight: a grant", 1, 30000);
	t0 = harness_now_ms();
	close(w);
	reply = read_reply(first);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	close(first);
	reply = read_reply(second);
	if ((ms = harness_now_ms() - t0) >= 10000)
		fail_msg("the second creation answered %ld ms after the round "
		    "it waited behind was let go: it was not woken when that "
		    "round settled", ms);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	close(second);
	assert_int_equal(harness_log_count(&a.b, "behind a round in flight: "
	    "it goes alone"), 0);
	assert_all_committed(root, "woken", 2);
	cluster_node_kill(&a);
	unlink(fifo);
	cluster_rm_root(root);
}

/*
 * A legacy creation's directory fsync is one of the worker's counted
 * rounds (pg_create.c, cl_legacy_write; dirsync.c, DESIGN): a creation
 * with an id, granted and linked, is held before its directory's fsync
 * (IDEM_CRASH_HOLD_AT=after_task_file_linked); a legacy call on the
 * worker's other thread links, and its directory fsync fails (the fault
 * shim: EIO), answering storage_unavailable.  That fsync may have taken
 * the writeback error of the held link (Linux reports it once per open
 * file description), so the held creation, let go with fsyncs good
 * again, must not be told created: storage_unavailable, retryable, and
 * its retry completes it.  With the legacy call's own uncounted fsync,
 * the held creation's round succeeded and it answered created.
 */
static void
a_legacy_fsync_failure_fails_a_link_it_may_have_covered(void **state)
{
	static struct node	 a;
	char		 root[256], fifo[300], hold[400], shim[PATH_MAX];
	char		 rules[300], preload[PATH_MAX + 16], fault[320];
	const char	*path = getenv("IDEM_FAULTSHIM");
	const char *const env[] = { hold, preload, fault,
	    "ASAN_OPTIONS=verify_asan_link_order=0", NULL };
	json_t		*reply;
	int		 fd, w;

	(void)state;
	if (realpath(path != NULL ? path :
	    "tests/faults/.libs/libfaultshim.so", shim) == NULL)
		fail_msg("the fault shim: %s", strerror(errno));
	cluster_hold_setup(&server, "after_task_file_linked", root, fifo,
	    sizeof fifo, hold, sizeof hold);
	snprintf(rules, sizeof rules, "%s.faults", root);
	harness_fault_rule(rules, "");
	snprintf(preload, sizeof preload, "LD_PRELOAD=%s", shim);
	snprintf(fault, sizeof fault, "IDEM_FAULT_FILE=%s", rules);
	cluster_node_init(&a, server.uri, root, "a");
	a.store_connections = "2";
	assert_int_equal(cluster_node_start(&a, "30000", "1", "30000", NULL,
	    env), 0);
	fd = harness_raw_send_task(&a.b, "covered-0", "Covered");
	/* Granted and linked, held before its directory's fsync. */
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	harness_fault_rule(rules, "sync _lifecycle/inbox$ EIO");
	reply = harness_call_once(&a.b, harness_write_task(NULL, "Legacy"));
	harness_assert_error(reply, "storage_unavailable", 1);
	json_decref(reply);
	harness_fault_rule(rules, "");
	close(w);
	reply = read_reply(fd);
	harness_assert_error(reply, "storage_unavailable", 1);
	json_decref(reply);
	close(fd);
	reply = harness_must_call(&a.b, harness_write_task("covered-0",
	    "Covered"));
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	assert_int_equal(cluster_sql_long(&server, "SELECT count(*) FROM "
	    "idem_submission WHERE client_submission_id = 'covered-0' AND "
	    "state = 3"), 1);
	cluster_node_kill(&a);
	unlink(fifo);
	unlink(rules);
	cluster_rm_root(root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(grant_batch_fails_halfway,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(commit_batch_fails_halfway,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(mixed_round_fails_halfway,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_member_behind_a_stalled_round_goes_alone,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_round_waits_for_a_member_on_its_way,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_round_of_grants_links_and_commits_together,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_stalled_member_costs_one_wait_not_every_round,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_member_leaving_another_way_wakes_the_round,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_member_behind_a_round_is_woken_when_it_settles,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(
		    a_legacy_fsync_failure_fails_a_link_it_may_have_covered,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
