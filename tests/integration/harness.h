/* SPDX-License-Identifier: ISC */
/*
 * harness.h: running a real idemd for integration tests.  Each broker
 * gets a fresh temporary root; start-up is awaited through --ready-fd
 * (no sleeping), and a restart after a kill waits on the root's lock.
 */
#ifndef IDEM_TEST_HARNESS_H
#define IDEM_TEST_HARNESS_H

#include <sys/types.h>

#include <limits.h>
#include <stdint.h>

#include <jansson.h>

#include "idem.h"

struct broker {
	pid_t	pid;		/* the master; 0 when not running */
	char	root[256];
	char	socket[320];
	char	log[320];
	int	exit_status;	/* of the last stop, wait or kill */
};

/*
 * A fresh root under $TMPDIR (or /tmp).  Every root made must be removed
 * by harness_cleanup (or harness_finish) or kept by a failed test's
 * harness_teardown: one still there at exit fails the test program.
 */
void	 harness_fresh_root(struct broker *);
/*
 * Start idemd on b->root with extra arguments (NULL-terminated, may be
 * NULL) and environment entries "NAME=value" (NULL-terminated, may be
 * NULL).  Returns 0 once it is serving, -1 if it exited first.
 */
int	 harness_start(struct broker *, const char *const *args,
	    const char *const *env);
/*
 * SIGTERM and wait: returns the exit status, or -1 (after a SIGKILL)
 * if it is still running 10 s later.
 */
int	 harness_stop(struct broker *);
/* SIGKILL the master, wait for it and for its workers (the root lock). */
void	 harness_kill(struct broker *);
/* SIGKILL to the master, its exit awaited, not its workers'. */
void	 harness_kill_master_only(struct broker *);
/* Wait for a broker that is dying on its own (IDEM_CRASH_AT). */
void	 harness_wait_dead(struct broker *);
/* /dev/shm/idem-...: the shared segment of the broker on b->root. */
void	 harness_segment_path(const struct broker *, char *out, size_t size);
/* The worker pids (children of the master); returns how many. */
int	 harness_workers(struct broker *, pid_t *pids, int max);

struct idem_conn *harness_connect(struct broker *);
/*
 * One effect through libidem on c: begun (it must proceed) and
 * completed applied with result (it must commit).
 */
void	 harness_effect_commit(struct idem_conn *c, const char *kind,
	    const char *request, const char *id, const char *result);
/* Send a JSON request (consumed), return the parsed reply (or NULL). */
json_t	*harness_call(struct idem_conn *, json_t *request);
/* One request on a connection of its own (consumed); NULL if no reply. */
json_t	*harness_call_once(struct broker *, json_t *request);
/* Send a raw line, return the parsed reply (or NULL). */
json_t	*harness_call_line(struct idem_conn *, const char *line);

/* TASK-*.md files anywhere under _lifecycle/ (and history trees). */
int	 harness_count_tasks(const struct broker *);
/* The same, their names (TASK-....md) appended to names if not NULL. */
int	 harness_list_tasks(const struct broker *, json_t *names);
/* Read a whole file relative to the root (malloc'd, NUL-terminated). */
char	*harness_read(const struct broker *, const char *relpath);
/* Remove the root (call at the end of a passing test). */
void	 harness_cleanup(struct broker *);
/*
 * Skip the case (cmocka's skip, the suite's others run) in a build
 * without --enable-fault-injection, where idemd refuses IDEM_CRASH_*.
 */
void	 harness_need_fault_injection(struct broker *);

/*
 * If the test is still running after this many seconds (0: disarm),
 * SIGKILL every broker the harness started and exit: a hung broker
 * fails the test instead of hanging make check.
 */
void	 harness_watchdog(unsigned seconds);
/* How many times slower this build runs (3 with sanitizers, else 1). */
unsigned harness_slowdown(void);
/* Today's UTC date, YYYYMMDD, the date idemd puts in task ids. */
void	 harness_today(char out[9]);
/* Create a file relative to the root with its directories (0 or -1). */
int	 harness_write(const struct broker *, const char *relpath,
	    const char *data);
/*
 * A bare stream to the broker, close-on-exec, for what idem_conn will
 * not do (leaving a reply unread, watching for the end of the stream).
 */
int	 harness_raw_connect(const struct broker *);
/* Send one line (the newline is added); 0 or -1. */
int	 harness_raw_send(int fd, const char *line);
/* Read one line (malloc'd, without its newline); NULL at end of stream. */
char	*harness_raw_read_line(int fd);
/* A raw line sent and its reply's line read back (malloc'd). */
char	*harness_raw_exchange(int, const char *);
/*
 * request (its reference taken) sent on a new raw stream, its reply's
 * line read back (malloc'd); NULL if the stream ends first (the broker
 * died).
 */
char	*harness_raw_call_or_null(const struct broker *, json_t *request);
/* harness_write_task(id, subject) sent on a new raw stream: its fd. */
int	 harness_raw_send_task(const struct broker *, const char *id,
	    const char *subject);
/* One stats counter of the broker's, by name. */
json_int_t harness_stat(struct broker *, const char *);
/*
 * idemctl (IDEMCTL, else contrib/idemctl) with ARGS... (a shell command's
 * words, printf-style): its exit status (-1: killed), its output and
 * errors into out.
 */
int	 harness_idemctl(char *out, size_t size, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));
/*
 * idemctl compact --older-than 0 on the broker's root (everything
 * committed so far): the receipts it compacted; fails the test if it
 * failed or said otherwise.
 */
unsigned long long harness_compact_now(const struct broker *);

/* A write_task request for submission id (NULL: legacy) and subject. */
json_t	*harness_write_task(const char *id, const char *subject);
/* Test assertions on replies (they fail the cmocka test, naming the key). */
const char *harness_str(json_t *object, const char *key);
const char *harness_receipt_str(json_t *reply, const char *key);
json_int_t harness_int(json_t *object, const char *key);
void	 harness_assert_bool(json_t *object, const char *key, int expected);

/* The receipt of a reply, serialized compactly in order (malloc'd). */
char	*harness_receipt_text(json_t *reply);
/*
 * The receipt's bytes as they came in a raw reply line (malloc'd): what
 * follows "receipt": up to the reply's own closing brace, the receipt
 * being a reply's last member.  Fails the test when there is none.
 */
char	*harness_receipt_bytes(const char *reply);

/*
 * cmocka fixtures: *state is a struct broker with a fresh root and the
 * watchdog armed for HARNESS_TEST_SECONDS.  A test that passes ends with
 * harness_finish (SIGKILL, not SIGTERM: the tests about stopping cleanly
 * say so themselves; the root is removed); one that fails keeps its root
 * and log, and teardown says where.
 */
#define HARNESS_TEST_SECONDS	90
int	 harness_setup(void **state);
int	 harness_teardown(void **state);
void	 harness_finish(struct broker *);

/*
 * A test that cannot run here (a limit, the date moving under it): print
 * "SKIP: reason" inside the case (run-tests.sh lists each skipped case
 * with it) and skip (cmocka's skip(), which reports the test as passed
 * in the binary's exit status).  main() returns
 * harness_exit_status(cmocka_run_group_tests(...)): the failures if any,
 * else 77 (automake's SKIP) if a test was skipped, so a program that
 * skipped a test never counts as a PASS either.  Every other skip site
 * prints its "SKIP: reason" line before skip() too.
 */
void	 harness_skip(const char *fmt, ...)
	    __attribute__((format(printf, 1, 2)));
int	 harness_exit_status(int failed);

/* ---- Helpers the tests share --------------------------------------------- */

/* harness_start, failing the test if idemd exits before it is serving. */
void	 harness_must_start(struct broker *, const char *const *args,
	    const char *const *env);
/*
 * harness_must_start with one crash variable, name=point (IDEM_CRASH_AT,
 * IDEM_CRASH_WORKER_AT, ...): the broker dies when it reaches it.
 */
void	 harness_start_crashing(struct broker *, const char *name,
	    const char *point);
/* harness_call_once, failing the test if no reply comes. */
json_t	*harness_must_call(struct broker *, json_t *request);
/* A write_task (harness_write_task) on a connection of its own. */
json_t	*harness_submit(struct broker *, const char *id, const char *subject);
/* Whether a path relative to the root exists (links followed). */
int	 harness_exists(const struct broker *, const char *relpath);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t	 harness_now_ms(void);
/*
 * REPORT-*.md files in reports/ (temporaries start with a dot); fails
 * the test if there is no reports/.
 */
int	 harness_count_reports(const struct broker *);
/*
 * The front matter of a TASK or REPORT file relative to the root,
 * without its "---" lines (malloc'd); fails the test if there is none.
 */
char	*harness_front_matter(const struct broker *, const char *relpath);

/* The broker's whole log (malloc'd); NULL if there is none yet. */
char	*harness_read_log(const struct broker *);
/* How many times the log holds needle. */
int	 harness_log_count(const struct broker *, const char *needle);
/*
 * Wait until the log holds needle count times: inotify on the log, no
 * sleeping; fails the test after timeout_ms.
 */
void	 harness_wait_log(const struct broker *, const char *needle,
	    int count, int timeout_ms);

/*
 * A successful write_task reply: ok, the disposition, action_taken,
 * idempotent, "recovered" true or absent, the receipt committed.
 */
void	 harness_assert_outcome(json_t *reply, const char *disposition,
	    int action_taken, int idempotent, int recovered);
/* An error reply: not ok, no action taken, the code and retryable. */
void	 harness_assert_error(json_t *reply, const char *code,
	    int retryable);
/* Skip the test if task_id ("TASK-YYYYMMDD-...") is not of today. */
void	 harness_skip_if_date_moved(const char *today, const char *task_id);
/* Raise RLIMIT_NOFILE to n (skip if the hard limit is lower). */
void	 harness_raise_nofile(unsigned long n);

/*
 * cmocka fixtures of a broker run with the fault shim
 * (tests/faults/faultshim.c, $IDEM_FAULTSHIM) preloaded: *state is a
 * struct harness_shim; env is what harness_start needs.  A test makes
 * writes or syncs fail by writing a rule to fault_file (<root>.faults,
 * outside the root) with harness_fault_rule, and ends with
 * harness_shim_finish.
 */
struct harness_shim {
	struct broker	 b;		/* first: the harness's */
	char		 fault_file[PATH_MAX];
	char		 env_preload[PATH_MAX + 16];
	char		 env_fault[PATH_MAX + 32];
	char		 env_asan[512];
	const char	*env[4];
};
/* A suite's setup calls it with its own watchdog (cmocka passes none). */
int	 harness_shim_setup(void **state, unsigned watchdog_seconds);
int	 harness_shim_teardown(void **state);
void	 harness_shim_finish(struct harness_shim *);
/* Replace the rule file at once (a rename): the shim never reads half. */
void	 harness_fault_rule(const char *rule_file, const char *rule);

#endif
