/* SPDX-License-Identifier: ISC */
/*
 * test_secrets.c: the PostgreSQL store's password is a secret (issue
 * #27, item 6; SPEC.md, "Several brokers on one workspace").  On a
 * private server whose role idem_pw must give its password (scram-sha-
 * 256 on the socket, so a broker that serves proves it was given it),
 * the password appears in no process's command line (the master's and
 * every worker's, a respawned one's too) nor their environment, no log
 * line (stderr and --log-file, at debug), no reply (hello, stats,
 * diagnose, the ops themselves), no output of idemctl (a good URI, a
 * wrong password, compact).  --store-file is refused with a mode that
 * lets others read it or another owner, naming the path and the mode,
 * and serves otherwise; libpq's PGPASSFILE and PGSERVICE work with a
 * URI without a password.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
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
#include <jansson.h>

#ifdef HAVE_POSTGRESQL
#include <libpq-fe.h>
#endif

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

/* Distinctive, and needing no percent-encoding in a URI. */
#define PASSWORD	"Pw27-s3cr3t-XqZ9"
#define WRONG		"Wr0ng-pa55-KjH4"
#define ROLE		"idem_pw"
/* A worker forked but not yet exec'd, on a loaded machine: how long. */
#define EXEC_WAIT_MS	30000

/* postgresql://idem_pw[:password]@/postgres?host=...&port=... */
static char	uri_pw[640], uri_nopw[640], uri_query[640], uri_wrong[640];
static char	uri_malformed[640];	/* a bad %-escape: libpq quotes it */

/* Does the file at path (or /proc's) hold the password? -1: unreadable. */
static int
file_has(const char *path, const char *needle)
{
	char	buf[65536];
	ssize_t	n;
	size_t	used = 0, i, len = strlen(needle);
	int	fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	while (used < sizeof buf &&
	    (n = read(fd, buf + used, sizeof buf - used)) > 0)
		used += (size_t)n;
	close(fd);
	/* memmem: /proc's cmdline and environ are NUL-separated. */
	for (i = 0; i + len <= used; i++)
		if (memcmp(buf + i, needle, len) == 0)
			return 1;
	return 0;
}

static void
assert_file_clean(const char *path)
{
	int	rc = file_has(path, PASSWORD);

	if (rc == -1)
		fail_msg("cannot read %s: %s", path, strerror(errno));
	if (rc == 1)
		fail_msg("%s holds the store's password", path);
}

/*
 * Wait until a worker has exec'd (its command line says --worker), else
 * fail saying what the process was meanwhile: its stat line (state,
 * parent) and its command line.
 */
static void
wait_exec(pid_t pid)
{
	char	 path[64], stat[512] = "", cmdline[512];
	int64_t	 until = harness_now_ms() + EXEC_WAIT_MS;
	ssize_t	 n;
	size_t	 i;
	int	 fd;

	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
	while (file_has(path, "--worker") != 1) {
		if (harness_now_ms() < until) {
			usleep(10000);
			continue;
		}
		n = -1;
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) != -1) {
			n = read(fd, cmdline, sizeof cmdline - 1);
			close(fd);
		}
		cmdline[n > 0 ? n : 0] = '\0';
		for (i = 0; n > 0 && i < (size_t)n; i++)
			if (cmdline[i] == '\0')
				cmdline[i] = ' ';
		snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) != -1) {
			if ((n = read(fd, stat, sizeof stat - 1)) > 0)
				stat[n] = '\0';
			close(fd);
		}
		fail_msg("worker %ld has not exec'd in %d ms: stat '%s', "
		    "command line '%s'", (long)pid, EXEC_WAIT_MS, stat,
		    cmdline);
	}
}

/* The master's and every worker's command line and environment. */
static int
assert_processes_clean(struct node *n)
{
	pid_t	pids[16];
	char	path[64];
	int	count, i;

	assert_true(n->b.pid > 0);
	snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)n->b.pid);
	assert_file_clean(path);
	/* It is ours: the proof that we read what ps reads. */
	assert_int_equal(file_has(path, "--host-id"), 1);
	snprintf(path, sizeof path, "/proc/%ld/environ", (long)n->b.pid);
	assert_file_clean(path);
	count = harness_workers(&n->b, pids, 16);
	for (i = 0; i < count; i++) {
		/* Forked but not yet exec'd, it shows the master's. */
		wait_exec(pids[i]);
		snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pids[i]);
		assert_file_clean(path);
		snprintf(path, sizeof path, "/proc/%ld/environ", (long)pids[i]);
		assert_file_clean(path);
	}
	return count;
}

static void
assert_text_clean(const char *what, const char *text)
{
	if (text != NULL && strstr(text, PASSWORD) != NULL)
		fail_msg("%s holds the store's password: %s", what, text);
}

/* A request's reply, which must not hold the password; returned. */
static json_t *
call_clean(struct node *n, json_t *request)
{
	json_t	*reply;
	char	*text;

	reply = cluster_call_until_final(&n->b, request);
	assert_non_null(reply);
	text = json_dumps(reply, JSON_COMPACT);
	assert_text_clean("a reply", text);
	free(text);
	return reply;
}

/* A task written through the node: its workers reach the store. */
static void
assert_serves(struct node *n, const char *id)
{
	json_t	*reply;

	reply = call_clean(n, harness_write_task(id, "Secret"));
	if (json_string_value(json_object_get(reply, "disposition")) == NULL) {
		char *text = json_dumps(reply, JSON_COMPACT);

		fail_msg("%s: %s (see %s)", id, text, n->b.log);
	}
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
}

/* libpq itself with a URI: 1 connected, 0 refused for want of one. */
static int
libpq_connects(const char *uri)
{
	PGconn	*c = PQconnectdb(uri);
	int	 ok = PQstatus(c) == CONNECTION_OK;

	PQfinish(c);
	return ok;
}

/* Has each of the count workers in before been replaced? */
static int
all_new(struct node *n, const pid_t *before, int count)
{
	pid_t	now[16];
	int	got, i, j;

	if ((got = harness_workers(&n->b, now, 16)) != count)
		return 0;
	for (i = 0; i < got; i++)
		for (j = 0; j < count; j++)
			if (now[i] == before[j])
				return 0;
	return 1;
}

static void
write_secret_file(const char *path, const char *text, mode_t mode)
{
	int	fd;

	unlink(path);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600)) !=
	    -1);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/*
 * Once: the role with a password, and pg_hba.conf asking it for that
 * password on the socket (ahead of initdb's trust lines); reloaded, and
 * awaited until a connection without the password is refused.
 */
static void
need_password_role(void)
{
	static int	 done;
	char		 path[256], *old, *out;
	FILE		*fp;
	long		 size;
	int		 i;

	snprintf(uri_pw, sizeof uri_pw, "postgresql://%s:%s@/postgres?"
	    "host=%s&port=%d", ROLE, PASSWORD, server.dir, server.port);
	snprintf(uri_wrong, sizeof uri_wrong, "postgresql://%s:%s@/postgres?"
	    "host=%s&port=%d", ROLE, WRONG, server.dir, server.port);
	snprintf(uri_malformed, sizeof uri_malformed, "postgresql://%s:%s%%zz@"
	    "/postgres?host=%s&port=%d", ROLE, PASSWORD, server.dir,
	    server.port);
	snprintf(uri_nopw, sizeof uri_nopw, "postgresql://%s@/postgres?"
	    "host=%s&port=%d", ROLE, server.dir, server.port);
	snprintf(uri_query, sizeof uri_query, "postgresql:///postgres?"
	    "host=%s&port=%d&user=%s&password=%s", server.dir, server.port,
	    ROLE, PASSWORD);
	/* Nothing of ours may supply it unasked. */
	unsetenv("PGPASSWORD");
	unsetenv("PGSERVICE");
	setenv("PGPASSFILE", "/nonexistent/pgpass", 1);
	if (done)
		return;
	out = pgserver_psql(&server, "CREATE ROLE " ROLE " LOGIN SUPERUSER "
	    "PASSWORD '" PASSWORD "'");
	assert_non_null(out);
	free(out);
	snprintf(path, sizeof path, "%s/pg_hba.conf", server.data);
	assert_non_null(fp = fopen(path, "r"));
	fseek(fp, 0, SEEK_END);
	size = ftell(fp);
	rewind(fp);
	assert_non_null(old = calloc(1, (size_t)size + 1));
	assert_int_equal(fread(old, 1, (size_t)size, fp), (size_t)size);
	fclose(fp);
	/* "w" keeps the file's owner (the server's user). */
	assert_non_null(fp = fopen(path, "w"));
	fprintf(fp, "local all " ROLE " scram-sha-256\n%s", old);
	assert_int_equal(fclose(fp), 0);
	free(old);
	out = pgserver_psql(&server, "SELECT pg_reload_conf()");
	assert_non_null(out);
	free(out);
	for (i = 0; i < 250 && libpq_connects(uri_nopw); i++)
		usleep(20000);
	assert_false(libpq_connects(uri_nopw));
	assert_true(libpq_connects(uri_pw));
	done = 1;
}

/*
 * --store with the password in the URI: nowhere to be read but where
 * it was given, which is overwritten.  Without the password the broker
 * cannot start: the server does ask for it.
 */
static void
password_in_no_command_line_log_or_reply(void **state)
{
	static struct node	 a;
	char			 root[256], logfile[300], *out;
	const char		*args[] = { "--store", uri_pw, "--host-id",
	    "a", "--workers", "2", "--log-level", "debug", "--log-file",
	    logfile, NULL };
	const char		*nopw[] = { "--store", uri_nopw, "--host-id",
	    "a", NULL };
	const char		*malformed[] = { "--store", uri_malformed,
	    "--host-id", "a", NULL };
	pid_t			 before[16];
	json_t			*reply;
	int			 count, i;

	(void)state;
	need_password_role();
	cluster_store_reset(&server);
	cluster_fresh_root(root);
	snprintf(logfile, sizeof logfile, "%s.file.log", root);
	cluster_node_init(&a, uri_pw, root, "a");
	assert_int_equal(cluster_node_start_args(&a, nopw, NULL), -1);
	assert_int_equal(cluster_node_start_args(&a, malformed, NULL), -1);
	assert_int_equal(file_has(a.b.log, "percent-encoded"), 1);
	assert_file_clean(a.b.log);
	assert_int_equal(cluster_node_start_args(&a, args, NULL), 0);
	assert_int_equal(assert_processes_clean(&a), 2);
	assert_serves(&a, "pw-1");
	/* Every reply that describes the broker or the store. */
	json_decref(call_clean(&a, json_pack("{s:s}", "op", "hello")));
	reply = call_clean(&a, json_pack("{s:s}", "op", "stats"));
	assert_true(json_is_object(json_object_get(reply, "store")));
	json_decref(reply);
	json_decref(call_clean(&a, json_pack("{s:s}", "op", "diagnose")));
	json_decref(call_clean(&a, json_pack("{s:s, s:s}", "op",
	    "get_submission", "client_submission_id", "pw-1")));
	/* Respawned workers are sent the URI again, by the same way. */
	count = harness_workers(&a.b, before, 16);
	assert_int_equal(count, 2);
	for (i = 0; i < count; i++)
		kill(before[i], SIGKILL);
	for (i = 0; i < 1000 && !all_new(&a, before, count); i++)
		usleep(10000);
	assert_true(all_new(&a, before, count));
	assert_int_equal(assert_processes_clean(&a), 2);
	for (i = 0; i < 4; i++) {
		char	id[16];

		snprintf(id, sizeof id, "pw-r%d", i);
		assert_serves(&a, id);
	}
	/* idemctl: a good URI (either form), a wrong password, compact. */
	assert_int_equal(cluster_idemctl(&out, "store verify --store '%s' "
	    "--root '%s'", uri_pw, root), 0);
	assert_text_clean("idemctl store verify", out);
	free(out);
	assert_int_equal(cluster_idemctl(&out, "verify --store '%s' "
	    "--root '%s'", uri_query, root), 0);
	assert_text_clean("idemctl verify", out);
	free(out);
	assert_int_equal(cluster_idemctl(&out, "compact --older-than 3650 "
	    "--store '%s' --root '%s'", uri_pw, root), 0);
	assert_text_clean("idemctl compact", out);
	free(out);
	assert_int_equal(cluster_idemctl(&out, "store verify --store '%s' "
	    "--root '%s'", uri_wrong, root), 3);
	if (strstr(out, WRONG) != NULL)
		fail_msg("idemctl printed the password: %s", out);
	free(out);
	/* libpq quotes a malformed password in its message: scrubbed. */
	assert_int_equal(cluster_idemctl(&out, "store verify --store '%s' "
	    "--root '%s'", uri_malformed, root), 3);
	assert_non_null(strstr(out, "percent-encoded"));
	assert_text_clean("idemctl on a malformed password", out);
	free(out);
	/* Stopped, its logs (stderr before --log-file took over, and it). */
	assert_int_equal(harness_stop(&a.b), 0);
	assert_file_clean(a.b.log);
	assert_file_clean(logfile);
	assert_true(file_has(logfile, "serving") == 1);
	unlink(logfile);
	cluster_rm_root(root);
}

/* --store-file: the mode and the owner checked; then it serves. */
static void
store_file_checked_and_served(void **state)
{
	static struct node	 a;
	char			 root[256], file[300], text[700], *out;
	const char		*args[] = { "--store-file", file, "--host-id",
	    "a", "--workers", "2", NULL };
	const char		*both[] = { "--store-file", file, "--store",
	    uri_pw, "--host-id", "a", NULL };

	(void)state;
	need_password_role();
	cluster_store_reset(&server);
	cluster_fresh_root(root);
	snprintf(file, sizeof file, "%s.store", root);
	cluster_node_init(&a, uri_pw, root, "a");
	snprintf(text, sizeof text, "%s\n", uri_pw);

	/* Group-readable: refused, naming the path, the mode, the fix. */
	write_secret_file(file, text, 0640);
	assert_int_equal(cluster_node_start_args(&a, args, NULL), -1);
	assert_int_equal(file_has(a.b.log, file), 1);
	assert_int_equal(file_has(a.b.log, "mode 0640"), 1);
	assert_int_equal(file_has(a.b.log, "chmod 600"), 1);
	assert_int_equal(cluster_idemctl(&out, "store verify --store-file "
	    "'%s' --root '%s'", file, root), 2);
	assert_non_null(strstr(out, "mode 0640"));
	free(out);
	/* Another user's (not root's): refused. */
	assert_int_equal(chmod(file, 0600), 0);
	if (geteuid() == 0) {
		assert_int_equal(chown(file, 65534, 65534), 0);
		assert_int_equal(cluster_node_start_args(&a, args, NULL), -1);
		assert_int_equal(file_has(a.b.log, "owned by uid 65534"), 1);
		assert_int_equal(chown(file, 0, 0), 0);
	}
	/* Both ways at once: refused. */
	assert_int_equal(cluster_node_start_args(&a, both, NULL), -1);
	assert_int_equal(file_has(a.b.log, "choose one"), 1);

	/* 0600, ours: it serves, and the password is nowhere. */
	assert_int_equal(cluster_node_start_args(&a, args, NULL), 0);
	assert_int_equal(assert_processes_clean(&a), 2);
	assert_serves(&a, "file-1");
	assert_serves(&a, "file-2");
	json_decref(call_clean(&a, json_pack("{s:s}", "op", "stats")));
	assert_int_equal(cluster_idemctl(&out, "store verify --store-file "
	    "'%s' --root '%s'", file, root), 0);
	assert_text_clean("idemctl store verify --store-file", out);
	free(out);
	assert_int_equal(cluster_idemctl(&out, "compact --older-than 3650 "
	    "--store-file '%s' --root '%s'", file, root), 0);
	assert_text_clean("idemctl compact --store-file", out);
	free(out);
	assert_int_equal(harness_stop(&a.b), 0);
	assert_file_clean(a.b.log);
	unlink(file);
	cluster_rm_root(root);
}

/*
 * libpq's own ways: a URI without a password and PGPASSFILE; a bare
 * postgresql:// and PGSERVICE (the service file holding the rest).
 * The workers inherit the environment and find the password there.
 */
static void
pgpassfile_and_pgservice(void **state)
{
	static struct node	 a;
	char			 root[256], pass[300], svc[300], text[900];
	char			 env_pass[320], env_svcfile[320];
	const char		*args[] = { "--store", uri_nopw, "--host-id",
	    "a", "--workers", "2", NULL };
	const char		*bare[] = { "--store", "postgresql://",
	    "--host-id", "a", "--workers", "2", NULL };
	const char		*env[] = { env_pass, NULL };
	const char		*env_svc[] = { env_svcfile,
	    "PGSERVICE=idemtest", NULL };

	(void)state;
	need_password_role();
	cluster_store_reset(&server);
	cluster_fresh_root(root);
	cluster_node_init(&a, uri_nopw, root, "a");

	snprintf(pass, sizeof pass, "%s.pgpass", root);
	snprintf(text, sizeof text, "*:*:*:%s:%s\n", ROLE, PASSWORD);
	write_secret_file(pass, text, 0600);
	snprintf(env_pass, sizeof env_pass, "PGPASSFILE=%s", pass);
	assert_int_equal(cluster_node_start_args(&a, args, env), 0);
	assert_int_equal(assert_processes_clean(&a), 2);
	assert_serves(&a, "pgpass-1");
	assert_serves(&a, "pgpass-2");
	assert_int_equal(harness_stop(&a.b), 0);
	assert_file_clean(a.b.log);

	snprintf(svc, sizeof svc, "%s.service", root);
	snprintf(text, sizeof text, "[idemtest]\nhost=%s\nport=%d\n"
	    "dbname=postgres\nuser=%s\npassword=%s\n", server.dir,
	    server.port, ROLE, PASSWORD);
	write_secret_file(svc, text, 0600);
	snprintf(env_svcfile, sizeof env_svcfile, "PGSERVICEFILE=%s", svc);
	assert_int_equal(cluster_node_start_args(&a, bare, env_svc), 0);
	assert_int_equal(assert_processes_clean(&a), 2);
	assert_serves(&a, "service-1");
	assert_int_equal(harness_stop(&a.b), 0);
	assert_file_clean(a.b.log);
	unlink(pass);
	unlink(svc);
	cluster_rm_root(root);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    password_in_no_command_line_log_or_reply,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(store_file_checked_and_served,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
		cmocka_unit_test_setup_teardown(pgpassfile_and_pgservice,
		    cluster_arm_watchdog, cluster_kill_live_nodes),
	};

	return cluster_main(&server, tests, sizeof tests / sizeof tests[0]);
}
#endif
