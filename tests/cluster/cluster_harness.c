/* SPDX-License-Identifier: ISC */
/*
 * cluster_harness.c: brokers on one workspace for the cluster tests, and
 * what those tests count (see cluster_harness.h).  Starting, calling and
 * killing one broker is tests/integration/harness.c's; this adds what a
 * second broker on the same root needs (its host's names) and what a
 * cluster test looks at (files across stages, temporaries, idemctl).
 */
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "integration/filter.h"
#include "cluster_harness.h"
#include "shm.h"

/* Every node started and not yet killed: killed at the end, whatever. */
#define CLUSTER_MAX_NODES	8
static struct node	*live_nodes[CLUSTER_MAX_NODES];

/* A cluster test's watchdog: slower than one broker's (several, a server). */
#define CLUSTER_TEST_SECONDS	400

void
cluster_fresh_root(char root[256])
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(root, 256, "%s/idem-cluster-XXXXXX", tmp != NULL ? tmp :
	    "/tmp");
	assert_non_null(mkdtemp(root));
}

void
cluster_rm_root(const char *root)
{
	char	cmd[600];

	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.*.log", root, root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
}

void
cluster_store_reset(struct pgserver *server)
{
	char	*out;

	out = pgserver_psql(server, "DELETE FROM idem_submission; "
	    "DELETE FROM idem_counter; DELETE FROM idem_legacy");
	assert_non_null(out);
	free(out);
}

void
cluster_node_init(struct node *n, const char *uri, const char *root,
    const char *host)
{
	memset(n, 0, sizeof *n);
	n->uri = uri;
	snprintf(n->host, sizeof n->host, "%s", host);
	snprintf(n->b.root, sizeof n->b.root, "%s", root);
	snprintf(n->b.socket, sizeof n->b.socket,
	    "%s/.idem/hosts/%s/idemd.sock", root, host);
	snprintf(n->b.log, sizeof n->b.log, "%s.%s.log", root, host);
}

int
cluster_node_start_args(struct node *n, const char *const *args,
    const char *const *env)
{
	int	i;

	for (i = 0; i < CLUSTER_MAX_NODES; i++) {
		if (live_nodes[i] == NULL || live_nodes[i] == n) {
			live_nodes[i] = n;
			break;
		}
	}
	return harness_start(&n->b, args, env);
}

int
cluster_node_start(struct node *n, const char *lease_ms, const char *workers,
    const char *inflight_wait_ms, const char *digits, const char *const *env)
{
	const char *const args[] = { "--store", n->uri, "--host-id",
	    n->host, "--lease-ms", lease_ms, "--workers", workers,
	    "--inflight-wait-ms", inflight_wait_ms != NULL ?
	    inflight_wait_ms : "60000", "--sequence-digits",
	    digits != NULL ? digits : "3", n->store_connections != NULL ?
	    "--store-connections" : NULL, n->store_connections, NULL };
	int	i;

	for (i = 0; i < CLUSTER_MAX_NODES; i++) {
		if (live_nodes[i] == NULL || live_nodes[i] == n) {
			live_nodes[i] = n;
			break;
		}
	}
	return harness_start(&n->b, args, env);
}

void
cluster_node_start_one_worker(struct node *n)
{
	assert_int_equal(cluster_node_start(n, "30000", "1", "10000", NULL,
	    NULL), 0);
}

void
cluster_start_two(struct pgserver *server, struct broker *root,
    struct node *a, struct node *b)
{
	cluster_store_reset(server);
	harness_fresh_root(root);
	cluster_node_init(a, server->uri, root->root, "a");
	cluster_node_init(b, server->uri, root->root, "b");
	cluster_node_start_one_worker(a);
	cluster_node_start_one_worker(b);
}

void
cluster_start_nodes(struct node *nodes, int count, const char *uri,
    char root[256], const char *prefix, const char *workers,
    const char *digits)
{
	char	host[16];
	int	i;

	cluster_fresh_root(root);
	for (i = 0; i < count; i++) {
		snprintf(host, sizeof host, "%s%d", prefix, i);
		cluster_node_init(&nodes[i], uri, root, host);
		assert_int_equal(cluster_node_start(&nodes[i], "30000",
		    workers, NULL, digits, NULL), 0);
	}
}

/* harness_wait_dead knows only a single broker's lock and segment. */
void
cluster_node_reap(struct node *n)
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

void
cluster_node_kill(struct node *n)
{
	int	i;

	if (n->b.pid != 0) {
		/* Its master or a worker may be stopped (a pause point). */
		kill(n->b.pid, SIGCONT);
		harness_kill(&n->b);
	}
	cluster_node_reap(n);
	for (i = 0; i < CLUSTER_MAX_NODES; i++)
		if (live_nodes[i] == n)
			live_nodes[i] = NULL;
}

int
cluster_arm_watchdog(void **state)
{
	(void)state;
	harness_watchdog(CLUSTER_TEST_SECONDS);
	return 0;
}

int
cluster_kill_live_nodes(void **state)
{
	int	i;

	(void)state;
	for (i = 0; i < CLUSTER_MAX_NODES; i++)
		if (live_nodes[i] != NULL)
			cluster_node_kill(live_nodes[i]);
	return 0;
}

int
cluster_tasks_on_disk(const char *root, json_t *names)
{
	struct broker	b;

	memset(&b, 0, sizeof b);
	snprintf(b.root, sizeof b.root, "%s", root);
	return harness_list_tasks(&b, names);
}

int
cluster_temporaries(const char *root)
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

json_t *
cluster_call_until_final(struct broker *b, json_t *request)
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

int
cluster_idemctl(char **out, const char *fmt, ...)
{
	char	cmd[2048], args[1536], buf[16384];
	va_list	ap;
	FILE	*fp;
	size_t	 n;
	int	 status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", getenv("IDEMCTL"), args);
	assert_non_null(fp = popen(cmd, "r"));
	n = fread(buf, 1, sizeof buf - 1, fp);
	buf[n] = '\0';
	status = pclose(fp);
	fprintf(stderr, "idemctl %s:\n%s", args, buf);
	if (out != NULL)
		*out = strdup(buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* psql's output of the SQL (malloc'd), failing the test if psql fails. */
static char *
cluster_vpsql(struct pgserver *server, const char *fmt, va_list ap)
{
	char	sql[2048], *out;

	vsnprintf(sql, sizeof sql, fmt, ap);
	assert_non_null(out = pgserver_psql(server, sql));
	return out;
}

char *
cluster_sql_value(struct pgserver *server, const char *fmt, ...)
{
	char	*out;
	va_list	 ap;

	va_start(ap, fmt);
	out = cluster_vpsql(server, fmt, ap);
	va_end(ap);
	out[strcspn(out, "\n")] = '\0';
	return out;
}

long
cluster_sql_long(struct pgserver *server, const char *fmt, ...)
{
	char	*out;
	long	 n;
	va_list	 ap;

	va_start(ap, fmt);
	out = cluster_vpsql(server, fmt, ap);
	va_end(ap);
	n = strtol(out, NULL, 10);
	free(out);
	return n;
}

void
cluster_need_fault_injection(void)
{
	const char	*built = getenv("IDEM_FAULT_INJECTION");

	if (built != NULL && strcmp(built, "yes") != 0)
		harness_skip("needs a build with --enable-fault-injection");
}

void
cluster_hold_setup(struct pgserver *server, const char *point,
    char root[256], char *fifo, size_t fifo_size, char *hold,
    size_t hold_size)
{
	cluster_need_fault_injection();
	cluster_store_reset(server);
	cluster_fresh_root(root);
	snprintf(fifo, fifo_size, "%s.hold", root);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(hold, hold_size, "IDEM_CRASH_HOLD_AT=%s:%s", point, fifo);
}

void
cluster_hold_start(struct pgserver *server, struct node *a,
    const char *point, const char *threads, char root[256], char *fifo,
    size_t fifo_size, char *env, size_t env_size)
{
	const char *const	 hold_env[] = { env, NULL };

	cluster_hold_setup(server, point, root, fifo, fifo_size, env,
	    env_size);
	cluster_node_init(a, server->uri, root, "a");
	a->store_connections = threads;
	assert_int_equal(cluster_node_start(a, "60000", "1", NULL, NULL,
	    hold_env), 0);
}

void
cluster_held_end(struct node *a, const char *root, const char *fifo)
{
	cluster_node_kill(a);
	unlink(fifo);
	cluster_rm_root(root);
}

void
cluster_send_line(int fd, char *line)
{
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
}

void
cluster_assert_unanswered(int fd)
{
	struct pollfd	 pfd = { .fd = fd, .events = POLLIN };

	assert_int_equal(poll(&pfd, 1, 0), 0);
}

int
cluster_sockets_of(pid_t pid)
{
	char		 path[320], target[64];
	struct dirent	*de;
	DIR		*dir;
	ssize_t		 n;
	int		 count = 0;

	snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
	assert_non_null(dir = opendir(path));
	while ((de = readdir(dir)) != NULL) {
		snprintf(path, sizeof path, "/proc/%ld/fd/%s", (long)pid,
		    de->d_name);
		if ((n = readlink(path, target, sizeof target - 1)) <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, "socket:", 7) == 0)
			count++;
	}
	closedir(dir);
	return count;
}

int
cluster_main(struct pgserver *server, const struct CMUnitTest *tests,
    size_t count)
{
#ifndef HAVE_POSTGRESQL
	(void)server;
	(void)tests;
	(void)count;
	return pgserver_skip_status("idem was built without PostgreSQL "
	    "(configure --with-postgresql; Debian: libpq-dev)");
#else
	char	cmd[1024];
	int	rc, failed;

	if (sodium_init() < 0)
		return 1;
	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (filter_apply("cluster test", tests, count) == -1)
		return 1;
	if ((rc = pgserver_main_start(server)) != 0)
		return rc;
	snprintf(cmd, sizeof cmd, "'%s' store init --store '%s' >/dev/null",
	    getenv("IDEMCTL"), server->uri);
	if (system(cmd) != 0) {
		fprintf(stderr, "idemctl store init failed\n");
		pgserver_destroy(server, 1);
		return 1;
	}
	/* What cmocka_run_group_tests expands to, for an array's pointer. */
	failed = _cmocka_run_group_tests("tests", tests, count, NULL, NULL);
	harness_watchdog(0);
	pgserver_destroy(server, failed != 0);
	return harness_exit_status(failed);
#endif
}
