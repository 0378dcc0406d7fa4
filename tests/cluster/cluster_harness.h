/* SPDX-License-Identifier: ISC */
/*
 * cluster_harness.h: what the cluster tests share beyond the single
 * broker harness (tests/integration/harness.h) and the private server
 * (pgserver.h): brokers ("nodes") on one workspace root, each with its
 * own --host-id; the files they made; idemctl; the tables emptied.
 */
#ifndef IDEM_TEST_CLUSTER_HARNESS_H
#define IDEM_TEST_CLUSTER_HARNESS_H

#include <jansson.h>

#include "harness.h"
#include "pgserver.h"

/* One broker of a workspace: its socket and log under its host id. */
struct node {
	struct broker	 b;
	char		 host[16];
	const char	*uri;		/* --store */
	const char	*store_connections; /* NULL: idemd's default */
};

/* A fresh workspace root under $TMPDIR (or /tmp); fails the test. */
void	 cluster_fresh_root(char root[256]);
/* Remove a root and its nodes' logs (root.*.log). */
void	 cluster_rm_root(const char *root);
/* Empty the store's tables (the schema stays): a fresh workspace. */
void	 cluster_store_reset(struct pgserver *);

void	 cluster_node_init(struct node *, const char *uri, const char *root,
	    const char *host);
/*
 * Start it on its store with --lease-ms, --workers, --inflight-wait-ms
 * (NULL: 60000), --sequence-digits (NULL: FCoP's 3) and the node's
 * store_connections (if set), env as
 * harness_start's; it is killed by cluster_kill_live_nodes if the test
 * fails.  0 once it serves, -1 if it exited first.
 */
int	 cluster_node_start(struct node *, const char *lease_ms,
	    const char *workers, const char *inflight_wait_ms,
	    const char *digits, const char *const *env);
/*
 * Start it with exactly these arguments (after --root and --ready-fd;
 * its --store or --store-file among them), killed as the above.
 */
int	 cluster_node_start_args(struct node *, const char *const *args,
	    const char *const *env);
/*
 * Started on its store with one worker, a 30 s lease and 10 s in-flight
 * waits (the test fails if it does not start).
 */
void	 cluster_node_start_one_worker(struct node *);
/* An empty store, a fresh root, brokers "a" and "b" on both, as above. */
void	 cluster_start_two(struct pgserver *, struct broker *root,
	    struct node *a, struct node *b);
/*
 * count nodes on a fresh root (its path in root), named prefix0,
 * prefix1...: a 30 s lease, workers and digits as cluster_node_start's;
 * fails the test if one does not start.
 */
void	 cluster_start_nodes(struct node *, int count, const char *uri,
	    char root[256], const char *prefix, const char *workers,
	    const char *digits);
/* SIGCONT, SIGKILL, its workers awaited, its segment removed. */
void	 cluster_node_kill(struct node *);
/*
 * After its master is gone (killed or crashed): wait for its workers
 * (they hold the host's lock until they die) and remove its segment.
 */
void	 cluster_node_reap(struct node *);

/* cmocka fixtures: the watchdog (400 s); the nodes a failure left. */
int	 cluster_arm_watchdog(void **state);
int	 cluster_kill_live_nodes(void **state);

/* TASK-*.md files in every stage and history/ (harness_list_tasks). */
int	 cluster_tasks_on_disk(const char *root, json_t *names);
/* Temporaries (".TASK-...tmp...") in the inbox; -1 if there is none. */
int	 cluster_temporaries(const char *root);
/*
 * A request (consumed), sent again while the answer is a retryable
 * error without a disposition (in_progress, storage_unavailable), at
 * most 50 times; the last reply, or NULL if none came.
 */
json_t	*cluster_call_until_final(struct broker *, json_t *request);

/* $IDEMCTL with printf-style arguments: its exit status, its output. */
int	 cluster_idemctl(char **out, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

/*
 * SQL (printf-style) through psql on the server, failing the test if
 * psql fails: its output's first line (malloc'd); that line as a number.
 */
char	*cluster_sql_value(struct pgserver *, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
long	 cluster_sql_long(struct pgserver *, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

/*
 * A cluster test's main: libsodium, IDEM_TEST_FILTER, the server
 * started (pgserver_main_start) and its schema made (idemctl store
 * init), the count tests run, the watchdog disarmed, the server gone
 * (its directory kept if a test failed).  What main returns: 77 (or 1
 * in CI) in a build without PostgreSQL or a machine without its
 * programs, 1 if it could not start, else harness_exit_status's.
 */
/*
 * Skip the whole program (harness_skip) in a build without
 * --enable-fault-injection (make check says which in
 * $IDEM_FAULT_INJECTION), where idemd refuses IDEM_CRASH_*.
 */
void	 cluster_need_fault_injection(void);
/*
 * A fresh store and root for one node, and a hold point armed at point
 * (crash.c's crash_hold_at): hold is the IDEM_CRASH_HOLD_AT entry of the
 * node's environment, fifo (root + ".hold") what the test opens to know
 * the thread is held and closes to let it go.  Skips as
 * cluster_need_fault_injection does.
 */
void	 cluster_hold_setup(struct pgserver *, const char *point,
	    char root[256], char *fifo, size_t fifo_size, char *hold,
	    size_t hold_size);

/*
 * One worker (threads store threads of each kind; NULL: idemd's
 * default) on a fresh store and root (cluster_hold_setup), the first
 * thread to reach point held there; cluster_held_end kills the node
 * and removes its fifo and root.
 */
void	 cluster_hold_start(struct pgserver *, struct node *,
	    const char *point, const char *threads, char root[256],
	    char *fifo, size_t fifo_size, char *env, size_t env_size);
void	 cluster_held_end(struct node *, const char *root, const char *fifo);
/* Send line on fd (a raw connection) and free it. */
void	 cluster_send_line(int fd, char *line);
/* Nothing answered on fd yet. */
void	 cluster_assert_unanswered(int fd);
/* The sockets pid holds open (its listener, its connections). */
int	 cluster_sockets_of(pid_t pid);

struct CMUnitTest;
int	 cluster_main(struct pgserver *, const struct CMUnitTest *tests,
	    size_t count);

#endif
