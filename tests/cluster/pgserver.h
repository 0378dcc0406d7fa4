/* SPDX-License-Identifier: ISC */
/*
 * pgserver.h: a private PostgreSQL server for the cluster tests
 * (doc/cluster.md).  initdb and pg_ctl run as an unprivileged user in a
 * fresh temporary directory; the server listens on a Unix socket in that
 * directory only (no TCP), with fsync=on, and is stopped by its
 * postmaster's pid.  Where PostgreSQL's programs are absent the caller
 * skips (77) with the reason, except in CI (CI=true), where that fails.
 *
 * A guard process watches the test: when the test process is gone
 * without pgserver_destroy (its watchdog fired, an abort, a SIGKILL),
 * the guard stops the postmaster (immediate shutdown) and removes the
 * data directory, keeping the server's log.
 */
#ifndef IDEM_TEST_PGSERVER_H
#define IDEM_TEST_PGSERVER_H

#include <sys/types.h>

struct pgserver {
	char	dir[128];	/* the data directory's parent; its socket */
	char	data[160];	/* dir/data */
	char	bindir[256];	/* where initdb, pg_ctl and postgres are */
	char	uri[512];	/* postgresql://... for idemd and libpq */
	char	log[192];	/* the server's log */
	uid_t	uid;		/* it runs as (nobody when we are root) */
	gid_t	gid;
	pid_t	pid;		/* the postmaster; 0 when stopped */
	int	port;		/* names the socket; nothing listens on TCP */
	pid_t	guard;		/* the guard process; 0 when none */
	int	guard_fd;	/* its pipe's write end: EOF wakes it */
};

/*
 * initdb a fresh cluster and start it.  0 once it accepts connections;
 * 77 with *reason (static) when PostgreSQL's programs are not installed
 * here (the caller skips; in CI it must fail instead); -1 with *reason on
 * any other failure.
 */
int	pgserver_start(struct pgserver *, const char **reason);
/* Start it again on the same data after pgserver_stop: 0 or -1. */
int	pgserver_restart(struct pgserver *);
/*
 * Stop it by the postmaster's pid (SIGINT: fast shutdown; SIGKILL with
 * immediate=1, a crash) and wait for that pid to be gone.  0 or -1.
 */
int	pgserver_stop(struct pgserver *, int immediate);
/* Stop it if it runs and remove its directory (keep: leave it). */
void	pgserver_destroy(struct pgserver *, int keep);
/* Run SQL through psql as the test's user; its output (malloc'd) or NULL. */
char	*pgserver_psql(struct pgserver *, const char *sql);

/*
 * What a test does when pgserver_start returns 77: in CI (CI=true),
 * print the reason as a failure and return 1; elsewhere print
 * "SKIP: <reason>" and return 77.
 */
int	pgserver_skip_status(const char *reason);
/*
 * A test's main starts its server with this: 0 once it runs; otherwise
 * the reason is printed and the result is what main returns (77 or 1 as
 * pgserver_skip_status says, or 1 with the directory kept).
 */
int	pgserver_main_start(struct pgserver *);
/*
 * Poll (every 20 ms) until sql's output starts with "t", at most
 * seconds: 1 once it does, 0 past the deadline or if psql fails.  For a
 * state only PostgreSQL knows (a lease expired by the server's clock).
 */
int	pgserver_await(struct pgserver *, const char *sql, int seconds);

/* A process's state letter in /proc (R, S, T, Z...); '?' if it is gone. */
char	pgserver_proc_state(pid_t);
/*
 * Wait for a process, not necessarily a child, to be gone (a pidfd), at
 * most seconds: 0 once it is, -1 past the deadline.
 */
int	pgserver_wait_gone(pid_t, int seconds);

#endif
