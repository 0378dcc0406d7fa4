/* SPDX-License-Identifier: ISC */
/*
 * test_cluster: three brokers on one workspace through a real PostgreSQL
 * (doc/cluster.md; tests/cluster/pgserver.c starts a private server).
 *
 * - 24 clients spread over the brokers, 300 ids each sent by 8 clients,
 *   one send in ten with other content: exactly 300 created, every
 *   reply for an id byte-identical, 300 files, no number twice, no file
 *   for a conflict;
 * - each crash point on broker A, then the retry on broker B while A's
 *   lease still runs (its session is gone): the SPEC's outcome, the
 *   number A reserved, one file;
 * - a broker paused (SIGSTOP) just before it links, its lease taken over
 *   by a retry on another broker while an FCoP mover moves the file, then
 *   resumed: it never answers created, one file across the stages.
 */
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
#include <sodium.h>

#include "idem.h"
#include "harness.h"
#include "pgserver.h"
#include "shm.h"

#ifndef HAVE_POSTGRESQL
int
main(void)
{
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
}
#else

static struct pgserver	server;

#define BROKERS		3
#define CLIENTS		24
#define IDS		300
#define SENDS_PER_ID	8

struct node {
	struct broker	b;
	char		host[16];
};

/* The schema once, a fresh database per test: tables emptied. */
static void
store_reset(void)
{
	char	*out;

	out = pgserver_psql(&server, "DELETE FROM idem_submission; "
	    "DELETE FROM idem_counter; DELETE FROM idem_legacy");
	assert_non_null(out);
	free(out);
}

static void
node_init(struct node *n, const char *root, const char *host)
{
	memset(n, 0, sizeof *n);
	snprintf(n->host, sizeof n->host, "%s", host);
	snprintf(n->b.root, sizeof n->b.root, "%s", root);
	snprintf(n->b.socket, sizeof n->b.socket, "%s/.idem/hosts/%s/idemd.sock",
	    root, host);
	snprintf(n->b.log, sizeof n->b.log, "%s.%s.log", root, host);
}

static int
node_start(struct node *n, const char *lease_ms, const char *workers,
    const char *const *env)
{
	const char *const args[] = { "--store", server.uri, "--host-id",
	    n->host, "--lease-ms", lease_ms, "--workers", workers,
	    "--inflight-wait-ms", "60000", NULL };

	return harness_start(&n->b, args, env);
}

/*
 * After its master is gone: wait for its workers (they hold the host's
 * lock until they die) and remove its segment (harness_wait_dead knows
 * only a single broker's names).
 */
static void
node_reap(struct node *n)
{
	char	path[512], name[64], *real;
	int	fd;

	snprintf(path, sizeof path, "%s/.idem/hosts/%s/idemd.lock", n->b.root,
	    n->host);
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) != -1) {
		while (flock(fd, LOCK_EX) == -1 && errno == EINTR)
			;
		close(fd);
	}
	if ((real = realpath(n->b.root, NULL)) == NULL)
		return;
	snprintf(path, sizeof path, "%s/.idem/hosts/%s", real, n->host);
	free(real);
	shm_name_for_root(path, name);
	(void)shm_unlink(name);
}

static void
node_kill(struct node *n)
{
	if (n->b.pid != 0) {
		kill(n->b.pid, SIGCONT);
		harness_kill(&n->b);
	}
	node_reap(n);
}

static void
rm_root(const char *root)
{
	char	cmd[600];

	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.*.log", root, root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
}

static void
fresh_root(char root[256])
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(root, 256, "%s/idem-cluster-XXXXXX", tmp != NULL ? tmp :
	    "/tmp");
	assert_non_null(mkdtemp(root));
}

/* TASK-*.md files under _lifecycle/ and history trees, and their names. */
static int
count_files(const char *dir, int depth, json_t *names)
{
	DIR		*d;
	struct dirent	*de;
	char		 path[PATH_MAX];
	struct stat	 st;
	int		 n = 0;

	if ((d = opendir(dir)) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth > 0)
			n += count_files(path, depth - 1, names);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(de->d_name, "TASK-", 5) == 0) {
			n++;
			if (names != NULL)
				json_array_append_new(names,
				    json_string(de->d_name));
		}
	}
	closedir(d);
	return n;
}

static int
tasks_on_disk(const char *root, json_t *names)
{
	char	path[PATH_MAX];

	snprintf(path, sizeof path, "%s/_lifecycle", root);
	return count_files(path, 4, names);
}

/* Temporaries (".TASK-...tmp...") left in the inbox. */
static int
temporaries(const char *root)
{
	char		 path[PATH_MAX];
	DIR		*d;
	struct dirent	*de;
	int		 n = 0;

	snprintf(path, sizeof path, "%s/_lifecycle/inbox", root);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
		n += strstr(de->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

/* A request that retries while the answer is retryable (in_progress...). */
static json_t *
call_until_final(struct broker *b, json_t *request)
{
	json_t	*reply = NULL, *error;
	int	 i;

	for (i = 0; i < 50; i++) {
		json_decref(reply);
		reply = harness_call_once(b, json_deep_copy(request));
		if (reply == NULL)
			break;
		error = json_object_get(reply, "error");
		if (!json_is_true(json_object_get(reply, "ok")) &&
		    json_is_true(json_object_get(error, "retryable")) &&
		    json_object_get(reply, "disposition") == NULL)
			continue;
		break;
	}
	json_decref(request);
	return reply;
}

/* ---- convergence ---------------------------------------------------- */

struct converge {
	struct node	*nodes;
	/* Per id and sender j: the disposition and, if ok, the receipt. */
	char		*receipt[IDS][SENDS_PER_ID];
	char		 disposition[IDS][SENDS_PER_ID][16];
	int		 other[IDS][SENDS_PER_ID];
	char		 request_digest[IDS][SENDS_PER_ID][65];
	int		 failures;
};

struct client {
	struct converge	*cv;
	int		 index;
};

static void *
client_run(void *arg)
{
	struct client		*cl = arg;
	struct converge		*cv = cl->cv;
	struct broker		*b = &cv->nodes[cl->index % BROKERS].b;
	struct idem_conn	*c;
	int			 j = cl->index / BROKERS, k, try;
	char			 id[32], subject[64];
	json_t			*request, *reply, *receipt, *error;

	if ((c = harness_connect(b)) == NULL) {
		cv->failures++;
		return NULL;
	}
	for (k = 0; k < IDS; k++) {
		/* Client (block j, broker i) sends k iff (k + j) % 3 == i. */
		if ((k + j) % BROKERS != cl->index % BROKERS)
			continue;
		cv->other[k][j] = (k * SENDS_PER_ID + j) % 10 == 0;
		snprintf(id, sizeof id, "conv-%03d", k);
		snprintf(subject, sizeof subject, "%s %d", cv->other[k][j] ?
		    "Other content" : "Converge", k);
		for (try = 0; try < 100; try++) {
			request = harness_write_task(id, subject);
			reply = harness_call(c, request);
			if (reply == NULL)
				break;
			error = json_object_get(reply, "error");
			if (json_is_true(json_object_get(reply, "ok")) ||
			    json_object_get(reply, "disposition") != NULL ||
			    !json_is_true(json_object_get(error, "retryable")))
				break;
			json_decref(reply);
		}
		if (reply == NULL) {
			cv->failures++;
			continue;
		}
		snprintf(cv->disposition[k][j], sizeof cv->disposition[k][j],
		    "%s", json_is_string(json_object_get(reply,
		    "disposition")) ? json_string_value(json_object_get(reply,
		    "disposition")) : "error");
		receipt = json_object_get(reply, "receipt");
		if (receipt != NULL)
			cv->receipt[k][j] = json_dumps(receipt, JSON_COMPACT);
		else if (strcmp(cv->disposition[k][j], "conflict") != 0)
			fprintf(stderr, "conv-%03d: %s\n", k,
			    json_dumps(reply, JSON_COMPACT));
		json_decref(reply);
	}
	idem_close(c);
	return NULL;
}

static void
three_brokers_converge(void **state)
{
	static struct converge	 cv;
	struct node		 nodes[BROKERS];
	struct client		 clients[CLIENTS];
	pthread_t		 threads[CLIENTS];
	char			 root[256], host[8], *winner;
	json_t			*names, *seen, *r;
	int			 i, k, j, created, files;
	size_t			 x;

	(void)state;
	store_reset();
	fresh_root(root);
	for (i = 0; i < BROKERS; i++) {
		snprintf(host, sizeof host, "h%d", i);
		node_init(&nodes[i], root, host);
		assert_int_equal(node_start(&nodes[i], "30000", "2", NULL), 0);
	}
	memset(&cv, 0, sizeof cv);
	cv.nodes = nodes;
	for (i = 0; i < CLIENTS; i++) {
		clients[i].cv = &cv;
		clients[i].index = i;
		assert_int_equal(pthread_create(&threads[i], NULL, client_run,
		    &clients[i]), 0);
	}
	for (i = 0; i < CLIENTS; i++)
		pthread_join(threads[i], NULL);
	assert_int_equal(cv.failures, 0);
	created = 0;
	for (k = 0; k < IDS; k++) {
		winner = NULL;
		for (j = 0; j < SENDS_PER_ID; j++) {
			if (cv.disposition[k][j][0] == '\0')
				fail_msg("conv-%03d sender %d got no answer",
				    k, j);
			if (strcmp(cv.disposition[k][j], "created") == 0)
				created++;
			if (cv.receipt[k][j] == NULL) {
				if (strcmp(cv.disposition[k][j], "conflict") !=
				    0)
					fail_msg("conv-%03d: %s", k,
					    cv.disposition[k][j]);
				continue;
			}
			if (winner == NULL)
				winner = cv.receipt[k][j];
			else if (strcmp(winner, cv.receipt[k][j]) != 0)
				fail_msg("conv-%03d: two receipts:\n%s\n%s", k,
				    winner, cv.receipt[k][j]);
		}
		assert_non_null(winner);
		/* A conflict came from the other content, never the same. */
		for (j = 0; j < SENDS_PER_ID; j++) {
			if (strcmp(cv.disposition[k][j], "conflict") != 0)
				continue;
			for (i = 0; i < SENDS_PER_ID; i++)
				if (cv.receipt[k][i] != NULL &&
				    cv.other[k][i] == cv.other[k][j])
					fail_msg("conv-%03d: a conflict for "
					    "the winner's content", k);
		}
	}
	assert_int_equal(created, IDS);
	/* 300 files, 300 distinct numbers, the receipts' names. */
	names = json_array();
	files = tasks_on_disk(root, names);
	assert_int_equal(files, IDS);
	seen = json_object();
	json_array_foreach(names, x, r) {
		char	num[16];

		/* TASK-YYYYMMDD-NNN-...: the number is its third field. */
		snprintf(num, sizeof num, "%.12s", json_string_value(r) + 5);
		assert_null(json_object_get(seen, num));
		json_object_set_new(seen, num, json_true());
	}
	json_decref(seen);
	json_decref(names);
	assert_int_equal(temporaries(root), 0);
	for (k = 0; k < IDS; k++)
		for (j = 0; j < SENDS_PER_ID; j++)
			free(cv.receipt[k][j]);
	for (i = 0; i < BROKERS; i++)
		node_kill(&nodes[i]);
	rm_root(root);
}

/* ---- a crash on A, the retry on B ----------------------------------- */

static void
crash_on_one_broker_retry_on_another(void **state)
{
	static const struct {
		const char	*point;
		const char	*disposition;
		int		 recovered;
	} cases[] = {
		{ "after_reserve_durable", "created", 1 },
		{ "after_task_file_written", "created", 1 },
		{ "after_task_file_linked", "reused", 1 },
		{ "after_commit_durable", "reused", 0 },
	};
	struct node	 a, b;
	char		 root[256], env[64], id[64], q[256], *out;
	size_t		 i;
	json_t		*reply;

	(void)state;
	if (getenv("IDEM_FAULT_INJECTION") != NULL &&
	    strcmp(getenv("IDEM_FAULT_INJECTION"), "yes") != 0)
		harness_skip("needs a build with --enable-fault-injection");
	store_reset();
	fresh_root(root);
	node_init(&b, root, "b");
	/* A long lease: B may take over only because A's session is gone. */
	assert_int_equal(node_start(&b, "60000", "1", NULL), 0);
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *const crash_env[] = { env, NULL };

		snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", cases[i].point);
		snprintf(id, sizeof id, "crash-%s", cases[i].point);
		node_init(&a, root, "a");
		assert_int_equal(node_start(&a, "60000", "1", crash_env), 0);
		reply = harness_call_once(&a.b, harness_write_task(id,
		    "Crash me"));
		assert_null(reply);	/* A died before answering */
		harness_wait_dead(&a.b);
		node_reap(&a);
		/* The number A reserved. */
		snprintf(q, sizeof q, "SELECT task_id FROM idem_submission "
		    "WHERE client_submission_id = '%s'", id);
		assert_non_null(out = pgserver_psql(&server, q));
		out[strcspn(out, "\n")] = '\0';
		assert_true(strncmp(out, "TASK-", 5) == 0);
		reply = call_until_final(&b.b, harness_write_task(id,
		    "Crash me"));
		assert_non_null(reply);
		if (strcmp(harness_str(reply, "disposition"),
		    cases[i].disposition) != 0)
			fail_msg("%s: %s", cases[i].point,
			    json_dumps(reply, JSON_COMPACT));
		if (cases[i].recovered)
			harness_assert_bool(reply, "recovered", 1);
		else
			assert_null(json_object_get(reply, "recovered"));
		assert_string_equal(harness_receipt_str(reply, "task_id"), out);
		free(out);
		json_decref(reply);
		assert_int_equal(tasks_on_disk(root, NULL), (int)i + 1);
		assert_int_equal(temporaries(root), 0);
		/* And again on B: reused, the same receipt. */
		reply = harness_call_once(&b.b, harness_write_task(id,
		    "Crash me"));
		assert_string_equal(harness_str(reply, "disposition"),
		    "reused");
		json_decref(reply);
	}
	node_kill(&b);
	rm_root(root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(three_brokers_converge),
		cmocka_unit_test(crash_on_one_broker_retry_on_another),
	};
	const char	*reason;
	char		 cmd[1024];
	int		 rc, failed;

	if (sodium_init() < 0)
		return 1;
	/* IDEM_TEST_FILTER=pattern runs the matching tests only. */
	if (getenv("IDEM_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("IDEM_TEST_FILTER"));
	if ((rc = pgserver_start(&server, &reason)) == 77)
		return pgserver_skip_status(reason);
	if (rc != 0) {
		fprintf(stderr, "pgserver_start: %s\n", reason);
		pgserver_destroy(&server, 1);
		return 1;
	}
	snprintf(cmd, sizeof cmd, "'%s' store init --store '%s' >/dev/null",
	    getenv("IDEMCTL"), server.uri);
	if (system(cmd) != 0) {
		fprintf(stderr, "idemctl store init failed\n");
		pgserver_destroy(&server, 1);
		return 1;
	}
	harness_watchdog(600);
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	harness_watchdog(0);
	pgserver_destroy(&server, failed != 0);
	return harness_exit_status(failed);
}
#endif
