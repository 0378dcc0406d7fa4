/* SPDX-License-Identifier: ISC */
/*
 * test_storage.c: storage faults against a real idemd.  The broker runs
 * with tests/faults/faultshim.c preloaded; a test makes chosen writes or
 * syncs fail by writing a rule to <root>.faults (outside the root, so
 * nothing the broker scans sees it) and clears it by emptying the file.
 *
 * Each test judges by what is authoritative: the TASK and REPORT files
 * on disk (and their temporaries), the receipts byte for byte, and what
 * a restart replays.  It shows that a failed write or sync acknowledges
 * nothing and that a later retry completes, and that while storage
 * fails the broker keeps every connection and every worker: each
 * request sent gets exactly one reply, reads are answered from the
 * table, writes are refused storage_unavailable within
 * --inflight-wait-ms.  Nothing sleeps to synchronise: requests block
 * until served, and the waits for the broker's own progress (a journal
 * reopen that fails, then succeeds) are on its log, through inotify,
 * with a deadline.
 */
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
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
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/storage_probe.h"

/* A test that takes longer than this is hung: the watchdog ends it. */
#define TEST_WATCHDOG_SECONDS	60
/* How long to wait for an event that must come (a guard, not a pause). */
#define TEST_EVENT_TIMEOUT_MS	20000
#define TEST_REPORT_BODY	"Fixed in a1b2c3.\n"

/* ---- Fixtures and helpers ------------------------------------------------ */

static int
setup(void **state)
{
	return harness_shim_setup(state, TEST_WATCHDOG_SECONDS);
}

static const char *const wait_args[] = {
	"--inflight-wait-ms", TEST_INFLIGHT_WAIT, NULL
};

static void
start(struct harness_shim *t)
{
	assert_int_equal(harness_start(&t->b, wait_args, t->env), 0);
}

static void
fault_clear(struct harness_shim *t)
{
	harness_fault_rule(t->fault_file, "");
}

static int
count_task_temporaries(const struct broker *b)
{
	return count_named(b, "_lifecycle/inbox", ".TASK-", "");
}

static int
count_report_temporaries(const struct broker *b)
{
	return count_named(b, "reports", ".REPORT-", "");
}

static json_t *
get_submission(struct broker *b, const char *id)
{
	json_t	*reply;

	reply = harness_must_call(b, json_pack("{s:s, s:s}",
	    "op", "get_submission", "client_submission_id", id));
	harness_assert_bool(reply, "ok", 1);
	return reply;
}

static json_t *
write_report(struct broker *b, const char *task_id, const char *id)
{
	return harness_must_call(b,
	    json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s}}",
	    "op", "write_report", "task_id", task_id,
	    "client_submission_id", id,
	    "report", "sender", "DEV", "status", "done",
	    "body", TEST_REPORT_BODY));
}

/* A whole file by absolute path (malloc'd, NUL-terminated). */
static char *
read_path(const char *path)
{
	FILE	*f;
	char	*data;
	long	 size;

	f = fopen(path, "re");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	size = ftell(f);
	assert_true(size >= 0);
	rewind(f);
	data = calloc(1, (size_t)size + 1);
	assert_non_null(data);
	assert_int_equal(fread(data, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	return data;
}

static int
count_in_log(const char *log, const char *needle)
{
	const char	*p = log;
	int		 n = 0;

	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	return n;
}

/* What a wait on the log waits for: the log's text, needle; 1 when done. */
typedef int (*log_check_fn)(const char *log, const char *needle);

/* Every journal failure logged has been followed by a reopen. */
static int
log_reopened(const char *log, const char *needle)
{
	return count_in_log(log, "refusing writes until the journal") ==
	    count_in_log(log, "accepting writes again");
}

/*
 * Wait until the broker's log passes check, through inotify (the log is
 * written as things happen); fails the test past the deadline.
 */
static void
wait_log_for(const struct broker *b, log_check_fn check, const char *needle)
{
	struct pollfd	 pfd;
	struct timespec	 now;
	char		 events[4096], *log;
	int64_t		 deadline, left;
	int		 fd, found;

	fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	assert_int_not_equal(fd, -1);
	assert_int_not_equal(inotify_add_watch(fd, b->log, IN_MODIFY), -1);
	clock_gettime(CLOCK_MONOTONIC, &now);
	deadline = now.tv_sec * 1000LL + now.tv_nsec / 1000000 +
	    TEST_EVENT_TIMEOUT_MS;
	for (;;) {
		/* Look after arming the watch: nothing falls in between. */
		log = read_path(b->log);
		found = check(log, needle);
		free(log);
		if (found)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = deadline - (now.tv_sec * 1000LL + now.tv_nsec / 1000000);
		if (left <= 0)
			fail_msg("the broker never logged \"%s\" (see %s)",
			    needle, b->log);
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)left) == -1 && errno != EINTR)
			fail_msg("poll: %s", strerror(errno));
		while (read(fd, events, sizeof events) > 0)
			;
	}
	close(fd);
}

/*
 * After the fault cleared: wait until the journal is reopened after
 * every failure it had (the last reopen may still be reading the
 * journal back when the refused requests were answered).
 */
static void
wait_reopened(const struct broker *b)
{
	wait_log_for(b, log_reopened, "accepting writes again");
}

/* SIGTERM stops it cleanly, and a restart replays to the same receipts. */
static void
assert_restart_replays(struct harness_shim *t, const char *const *ids,
    const char *const *subjects, char *const *receipts, int tasks)
{
	int	i;

	assert_int_equal(harness_stop(&t->b), 0);
	start(t);
	for (i = 0; ids[i] != NULL; i++)
		assert_reused_as(&t->b, ids[i], subjects[i], receipts[i]);
	assert_int_equal(harness_count_tasks(&t->b), tasks);
}

/* ---- A file system without RENAME_NOREPLACE ----------------------------- */

/*
 * renameat2 with RENAME_NOREPLACE fails as on a file system or a kernel
 * without it: the temporary is linked and unlinked instead, for this
 * call and the next ones, and nothing else changes: one TASK file per
 * submission, no temporary left, retries reused.
 */
static void
rename_unsupported(struct harness_shim *t, const char *rule)
{
	struct broker	*b = &t->b;
	json_t		*reply;
	char		*receipt;

	start(t);
	harness_fault_rule(t->fault_file, rule);
	reply = harness_submit(b, "norename/1", "Fix login");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	assert_receipt_file(b, reply);
	receipt = receipt_text(reply);
	json_decref(reply);
	reply = harness_submit(b, "norename/2", "Fix logout");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	assert_receipt_file(b, reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 2);
	assert_int_equal(count_tasks_of(b, "norename/1"), 1);
	assert_int_equal(count_tasks_of(b, "norename/2"), 1);
	assert_int_equal(count_task_temporaries(b), 0);
	assert_reused_as(b, "norename/1", "Fix login", receipt);
	free(receipt);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

static void
rename_einval_falls_back_to_link(void **state)
{
	rename_unsupported(*state, "rename _lifecycle/inbox$ EINVAL");
}

static void
rename_enosys_falls_back_to_link(void **state)
{
	rename_unsupported(*state, "rename _lifecycle/inbox$ ENOSYS");
}

/* ---- A TASK file that cannot be written --------------------------------- */

/*
 * The TASK file fails (write or fsync of its temporary): no file, no
 * temporary, the submission stays reserved; once the disk is back the
 * retry creates it under the reserved identity, and later retries reuse.
 */
static void
task_file_fault(struct harness_shim *t, const char *rule)
{
	struct broker	*b = &t->b;
	json_t		*reply, *sub;
	char		*receipt, *task_id;

	start(t);
	harness_fault_rule(t->fault_file, rule);
	reply = harness_submit(b, "disk/1", "Fix login");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 0);
	assert_int_equal(count_task_temporaries(b), 0);

	reply = get_submission(b, "disk/1");
	harness_assert_bool(reply, "found", 1);
	sub = json_object_get(reply, "submission");
	assert_string_equal(harness_str(sub, "state"), "reserved");
	assert_null(json_object_get(sub, "receipt"));
	task_id = strdup(harness_str(sub, "task_id"));
	assert_non_null(task_id);
	json_decref(reply);

	fault_clear(t);
	reply = harness_submit(b, "disk/1", "Fix login");
	harness_assert_outcome(reply, "created", 1, 1, 1);
	assert_string_equal(harness_receipt_str(reply, "task_id"), task_id);
	assert_receipt_file(b, reply);
	receipt = receipt_text(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(count_tasks_of(b, "disk/1"), 1);
	assert_int_equal(count_task_temporaries(b), 0);

	assert_reused_as(b, "disk/1", "Fix login", receipt);
	assert_int_equal(harness_count_tasks(b), 1);

	assert_restart_replays(t, (const char *const []){ "disk/1", NULL },
	    (const char *const []){ "Fix login" }, &receipt, 1);
	free(receipt);
	free(task_id);
	harness_shim_finish(t);
}

static void
task_write_enospc_leaves_reserved_and_retry_creates(void **state)
{
	task_file_fault(*state, "write _lifecycle/inbox/.TASK ENOSPC");
}

static void
task_fsync_eio_leaves_reserved_and_retry_creates(void **state)
{
	task_file_fault(*state, "sync _lifecycle/inbox/.TASK EIO");
}

static void
task_write_edquot_leaves_reserved_and_retry_creates(void **state)
{
	task_file_fault(*state, "write _lifecycle/inbox/.TASK EDQUOT");
}

static void
task_write_erofs_leaves_reserved_and_retry_creates(void **state)
{
	task_file_fault(*state, "write _lifecycle/inbox/.TASK EROFS");
}

/* Without a submission id: nothing on disk, and the next call creates. */
static void
legacy_task_write_enospc_leaves_nothing(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply;

	start(t);
	harness_fault_rule(t->fault_file,
	    "write _lifecycle/inbox/.TASK ENOSPC");
	reply = harness_submit(b, NULL, "Legacy");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 0);
	assert_int_equal(count_task_temporaries(b), 0);

	fault_clear(t);
	reply = harness_submit(b, NULL, "Legacy");
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "disposition"), "created");
	harness_assert_bool(reply, "idempotent", 0);
	assert_receipt_file(b, reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(count_task_temporaries(b), 0);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * The inbox's fsync fails after the TASK file was linked in place: the
 * file is there but was never durable, so nothing is acknowledged; the
 * retry adopts the file (reused, recovered) rather than writing another.
 */
static void
inbox_fsync_eio_retry_adopts_the_linked_file(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply, *sub;
	char			*receipt;

	start(t);
	harness_fault_rule(t->fault_file, "sync _lifecycle/inbox$ EIO");
	reply = harness_submit(b, "disk/dir", "Fix login");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(count_tasks_of(b, "disk/dir"), 1);
	assert_int_equal(count_task_temporaries(b), 0);
	reply = get_submission(b, "disk/dir");
	sub = json_object_get(reply, "submission");
	assert_string_equal(harness_str(sub, "state"), "reserved");
	json_decref(reply);

	fault_clear(t);
	reply = harness_submit(b, "disk/dir", "Fix login");
	harness_assert_outcome(reply, "reused", 0, 1, 1);
	assert_receipt_file(b, reply);
	receipt = receipt_text(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_reused_as(b, "disk/dir", "Fix login", receipt);

	assert_restart_replays(t, (const char *const []){ "disk/dir", NULL },
	    (const char *const []){ "Fix login" }, &receipt, 1);
	free(receipt);
	harness_shim_finish(t);
}

/*
 * SPEC.md: a reused reply is sent only when the TASK file and its
 * directory entry are durable.  The file a failed call linked was never
 * made durable in its directory, so a retry that adopts it must fsync
 * the directory first: while that fsync still fails, it must not
 * answer reused.
 */
static void
adopting_retry_needs_a_durable_directory_entry(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply;

	start(t);
	harness_fault_rule(t->fault_file, "sync _lifecycle/inbox$ EIO");
	reply = harness_submit(b, "disk/adopt", "Fix login");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(count_tasks_of(b, "disk/adopt"), 1);

	/* The inbox still cannot be synced. */
	reply = harness_submit(b, "disk/adopt", "Fix login");
	if (json_is_true(json_object_get(reply, "ok")))
		fail_msg("the retry adopted the linked file and answered %s "
		    "while every fsync of its directory fails",
		    json_string_value(json_object_get(reply, "disposition")));
	assert_storage_unavailable(reply);
	json_decref(reply);

	fault_clear(t);
	reply = harness_submit(b, "disk/adopt", "Fix login");
	harness_assert_outcome(reply, "reused", 0, 1, 1);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/* ---- A failing directory fsync and the links made meanwhile -------------- */

/*
 * One worker (so that every link is in one directory's rounds), debug
 * lines (the rounds' events the tests await).
 */
static const char *const rounds_args[] = {
	"--inflight-wait-ms", TEST_INFLIGHT_WAIT, "--workers", "1",
	"--log-level", "debug", NULL
};
/* fileio.c's and the fault shim's lines. */
#define LOG_ROUND_SYNCS		"a directory round syncs "
#define LOG_COUNTED_NEXT	"counted for the next round"
#define LOG_SYNC_HELD		"faultshim: a sync held"

/* A write_task on a thread of its own, its reply kept. */
struct submitter {
	pthread_t	 thread;
	struct broker	*b;
	const char	*id;
	json_t		*reply;
};

static void *
submitter_main(void *arg)
{
	struct submitter	*s = arg;

	s->reply = harness_call_once(s->b, harness_write_task(s->id,
	    "Fix login"));
	return NULL;
}

static void
submitter_start(struct submitter *s, struct broker *b, const char *id)
{
	s->b = b;
	s->id = id;
	s->reply = NULL;
	assert_int_equal(pthread_create(&s->thread, NULL, submitter_main, s),
	    0);
}

/* Its reply: storage_unavailable, or the test fails. */
static void
submitter_fails(struct submitter *s)
{
	assert_int_equal(pthread_join(s->thread, NULL), 0);
	if (s->reply == NULL)
		fail_msg("%s: no reply", s->id);
	if (json_is_true(json_object_get(s->reply, "ok")))
		fail_msg("%s answered %s: its link is not known durable (a "
		    "failed fsync of its directory ran while it linked)",
		    s->id, json_string_value(json_object_get(s->reply,
		    "disposition")));
	assert_storage_unavailable(s->reply);
	json_decref(s->reply);
	s->reply = NULL;
}

/* Each id's retry adopts its linked file: reused, one file each. */
static void
retries_adopt(struct broker *b, const char *const *ids, int n)
{
	json_t	*reply;
	int	 i;

	for (i = 0; i < n; i++) {
		reply = harness_submit(b, ids[i], "Fix login");
		harness_assert_outcome(reply, "reused", 0, 1, 1);
		json_decref(reply);
	}
	assert_int_equal(harness_count_tasks(b), n);
}

/*
 * The inbox's first round is held in its fsync, which then fails (EIO);
 * two more creations link and are counted while it runs.  The next
 * round's fsync succeeds, yet they must fail too: the failed fsync may
 * have written back their links and taken the error, which Linux
 * reports once per open file description.  Each step is an event
 * awaited in the log (the round in its fsync, the shim holding it, each
 * later link counted for the next round).  Fails if a failed round
 * fails only the links it covered (counted before it began).
 */
static void
inbox_links_counted_while_a_failed_fsync_ran_fail(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	static const char *const ids[] = { "round/a", "round/b", "round/c" };
	struct submitter	 s[3];
	int			 i;

	assert_int_equal(harness_start(b, rounds_args, t->env), 0);
	harness_fault_rule(t->fault_file, "holdfail _lifecycle/inbox$ EIO");
	submitter_start(&s[0], b, ids[0]);
	harness_wait_log(b, LOG_ROUND_SYNCS, 1, TEST_EVENT_TIMEOUT_MS);
	harness_wait_log(b, LOG_SYNC_HELD, 1, TEST_EVENT_TIMEOUT_MS);
	for (i = 1; i < 3; i++) {
		submitter_start(&s[i], b, ids[i]);
		harness_wait_log(b, LOG_COUNTED_NEXT, i, TEST_EVENT_TIMEOUT_MS);
	}
	fault_clear(t);		/* the held fsync fails; the next succeeds */
	for (i = 0; i < 3; i++)
		submitter_fails(&s[i]);
	/* The second round ran (and its fsync passed): not a second hold. */
	assert_int_equal(harness_log_count(b, LOG_ROUND_SYNCS), 2);
	assert_int_equal(harness_log_count(b, LOG_SYNC_HELD), 1);
	retries_adopt(b, ids, 3);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * The window a range noted when the fsync returned misses: a creation
 * links while the round's fsync runs, but is counted only after that
 * fsync has failed.  The first creation holds between its link and its
 * count (IDEM_CRASH_HOLD_AT=before_link_counted, crash.c: the test's
 * open of the FIFO returns once it is held); the second links, is
 * counted, and its round's fsync is held and then fails; its reply
 * proves the failure noted.  Only then is the first let go: its own
 * round's fsync succeeds, yet it must fail, as its link was made before
 * the failed fsync began.  Fails if the directory's count of failed
 * rounds is read when a link is counted rather than before it is made.
 */
static void
inbox_link_counted_after_a_failed_fsync_fails(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	static const char *const ids[] = { "round/held", "round/synced" };
	struct submitter	 s[2];
	char			 fifo[PATH_MAX + 8];
	char			 hold[PATH_MAX + 64];
	const char		*env[5];
	int			 w;

	snprintf(fifo, sizeof fifo, "%s.hold", t->fault_file);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(hold, sizeof hold, "IDEM_CRASH_HOLD_AT=before_link_counted:%s",
	    fifo);
	memcpy(env, t->env, 3 * sizeof env[0]);
	env[3] = hold;
	env[4] = NULL;
	assert_int_equal(harness_start(b, rounds_args, env), 0);
	submitter_start(&s[0], b, ids[0]);
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	/* Held after its link, before its count: its file is there. */
	assert_int_equal(count_tasks_of(b, ids[0]), 1);

	harness_fault_rule(t->fault_file, "holdfail _lifecycle/inbox$ EIO");
	submitter_start(&s[1], b, ids[1]);
	harness_wait_log(b, LOG_SYNC_HELD, 1, TEST_EVENT_TIMEOUT_MS);
	fault_clear(t);
	submitter_fails(&s[1]);		/* the failure is noted */
	assert_int_equal(harness_log_count(b, LOG_ROUND_SYNCS), 1);

	close(w);			/* counted now; its round's fsync passes */
	submitter_fails(&s[0]);
	assert_int_equal(harness_log_count(b, LOG_ROUND_SYNCS), 2);
	assert_int_equal(harness_log_count(b, LOG_SYNC_HELD), 1);
	unlink(fifo);
	retries_adopt(b, ids, 2);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/* ---- The journal fails -------------------------------------------------- */

/*
 * A submission committed before the fault, one that meets it, and one
 * after the broker reopened the journal: the first is reused byte for
 * byte, the second completes on retry with one TASK file, the third is
 * ordinary.  reopen_fails: the rule also breaks the reopen (a failing
 * fsync, a read-only file system), which the broker retries by itself
 * while it keeps serving reads and refusing writes, until the rule is
 * cleared.  The record the fault lost was never durable, so once the
 * journal is reopened the table no longer knows the submission.
 */
static void
journal_fault(struct harness_shim *t, const char *rule, int reopen_fails)
{
	struct broker	*b = &t->b;
	json_t		*reply, *stats;
	char		*receipts[3];
	pid_t		 workers[TEST_MAX_WORKERS];
	int64_t		 cleared;
	int		 i, n;

	start(t);
	reply = harness_submit(b, "jnl/early", "Before the fault");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	receipts[0] = receipt_text(reply);
	json_decref(reply);
	n = workers_now(b, workers);

	harness_fault_rule(t->fault_file, rule);
	reply = harness_submit(b, "jnl/late", "Meets the fault");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(count_tasks_of(b, "jnl/late"), 0);

	if (reopen_fails) {
		harness_wait_log(b, "reopening after the journal failure", 1,
		    TEST_EVENT_TIMEOUT_MS);
		/* Answered, not parked in a backlog; still refused. */
		reply = get_submission(b, "jnl/late");
		json_decref(reply);
		assert_reused_as(b, "jnl/early", "Before the fault",
		    receipts[0]);
		reply = harness_submit(b, "jnl/late", "Meets the fault");
		assert_storage_unavailable(reply);
		json_decref(reply);
	}
	cleared = harness_now_ms();
	fault_clear(t);
	wait_reopened(b);
	if (reopen_fails) {
		fprintf(stderr, "writes resumed %lld ms after the fault "
		    "cleared\n", (long long)(harness_now_ms() - cleared));
		if (harness_now_ms() - cleared > TEST_RESUME_MS)
			fail_msg("writes resumed only %lld ms after the fault "
			    "cleared", (long long)(harness_now_ms() - cleared));
	}
	reply = get_submission(b, "jnl/late");
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	reply = harness_submit(b, "jnl/late", "Meets the fault");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	assert_receipt_file(b, reply);
	receipts[1] = receipt_text(reply);
	json_decref(reply);
	assert_int_equal(count_tasks_of(b, "jnl/late"), 1);
	assert_int_equal(harness_count_tasks(b), 2);

	assert_reused_as(b, "jnl/early", "Before the fault", receipts[0]);
	assert_reused_as(b, "jnl/late", "Meets the fault", receipts[1]);

	reply = harness_submit(b, "jnl/after", "After the reopen");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	receipts[2] = receipt_text(reply);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 3);

	stats = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	harness_assert_bool(stats, "ok", 1);
	assert_int_equal(json_integer_value(json_object_get(stats,
	    "table_used")), 3);
	json_decref(stats);
	assert_same_workers(b, workers, n);

	assert_restart_replays(t, (const char *const []){ "jnl/early",
	    "jnl/late", "jnl/after", NULL }, (const char *const []){
	    "Before the fault", "Meets the fault", "After the reopen" },
	    receipts, 3);
	for (i = 0; i < 3; i++)
		free(receipts[i]);
	harness_shim_finish(t);
}

static void
journal_fdatasync_eio_reopens_and_retry_completes(void **state)
{
	journal_fault(*state, "sync .idem/journal EIO", 1);
}

static void
journal_write_enospc_reopens_and_retry_completes(void **state)
{
	journal_fault(*state, "write .idem/journal ENOSPC", 0);
}

static void
journal_write_erofs_reopens_and_retry_completes(void **state)
{
	journal_fault(*state, "write .idem/journal EROFS", 1);
}

/*
 * The reservation is durable, the TASK file linked and its directory
 * fsync'd, and then the append of task_created and commit fails: the
 * table had moved the submission to committed with those records, and
 * the reopen must set it back to reserved, its last durable state.  So
 * while the journal fails, neither get_submission nor a retry may call
 * it committed; once it is back, the retry adopts the file (reused,
 * recovered) and there is still one TASK file.
 */
static void
journal_commit_lost_sets_back_to_reserved(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply, *sub;
	char			*receipt;

	start(t);
	/* The first append (the reservation) passes, the rest fail. */
	harness_fault_rule(t->fault_file, "write .idem/journal/0 ENOSPC 1");
	reply = harness_submit(b, "lost/commit", "Lost commit");
	assert_storage_unavailable(reply);
	json_decref(reply);
	wait_reopened(b);
	assert_int_equal(count_tasks_of(b, "lost/commit"), 1);
	reply = get_submission(b, "lost/commit");
	harness_assert_bool(reply, "found", 1);
	sub = json_object_get(reply, "submission");
	assert_string_equal(harness_str(sub, "state"), "reserved");
	assert_null(json_object_get(sub, "receipt"));
	json_decref(reply);
	/* Still failing: the retry has to record, so it is refused. */
	reply = harness_submit(b, "lost/commit", "Lost commit");
	assert_storage_unavailable(reply);
	json_decref(reply);

	fault_clear(t);
	wait_reopened(b);
	reply = harness_submit(b, "lost/commit", "Lost commit");
	harness_assert_outcome(reply, "reused", 0, 1, 1);
	assert_receipt_file(b, reply);
	receipt = receipt_text(reply);
	json_decref(reply);
	assert_int_equal(count_tasks_of(b, "lost/commit"), 1);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_restart_replays(t, (const char *const []){ "lost/commit",
	    NULL }, (const char *const []){ "Lost commit" }, &receipt, 1);
	free(receipt);
	harness_shim_finish(t);
}

/* ---- Every fault: every connection and worker kept ---------------------- */

/*
 * One committed submission, then a fault: while it holds, the broker
 * keeps every connection and every worker (assert_served_during_fault);
 * once it clears, writes resume by themselves and a retry of each
 * refused id completes with exactly one TASK file (created, or reused
 * when the failed call had linked its file and the retry adopts it); no
 * acknowledged receipt is lost or changed, and a restart replays them.
 * reopen_fails: the rule breaks the journal and its reopen.
 */
static void
fault_keeps_serving(struct harness_shim *t, const char *rule,
    int reopen_fails)
{
	struct broker	*b = &t->b;
	pid_t		 workers[TEST_MAX_WORKERS];
	json_t		*reply;
	const char	*ids[TEST_CONNECTIONS + 2];
	char		 id[TEST_CONNECTIONS][32],
	    *receipts[TEST_CONNECTIONS + 1];
	const char	*disposition;
	int64_t		 cleared;
	int		 c, n;

	start(t);
	reply = harness_submit(b, "keep/early", "keep/early");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	receipts[0] = receipt_text(reply);
	json_decref(reply);
	n = workers_now(b, workers);

	harness_fault_rule(t->fault_file, rule);
	if (reopen_fails) {
		/* A write meets the fault; the reopen then keeps failing. */
		reply = harness_submit(b, "keep/0", "keep/0");
		assert_storage_unavailable(reply);
		json_decref(reply);
		harness_wait_log(b, "reopening after the journal failure", 1,
		    TEST_EVENT_TIMEOUT_MS);
	}
	assert_served_during_fault(b, "keep/early", "keep/early", receipts[0],
	    "keep", 1);
	/* Twice: a second round meets whatever the first left behind. */
	assert_served_during_fault(b, "keep/early", "keep/early", receipts[0],
	    "keep", 1);
	assert_int_equal(harness_count_tasks(b) - count_tasks_of(b, "keep/0") -
	    count_tasks_of(b, "keep/1") - count_tasks_of(b, "keep/2") -
	    count_tasks_of(b, "keep/3"), 1);
	assert_same_workers(b, workers, n);

	cleared = harness_now_ms();
	fault_clear(t);
	wait_reopened(b);
	if (reopen_fails) {
		if (harness_now_ms() - cleared > TEST_RESUME_MS)
			fail_msg("writes resumed only %lld ms after the fault "
			    "cleared", (long long)(harness_now_ms() - cleared));
	}
	ids[0] = "keep/early";
	for (c = 0; c < TEST_CONNECTIONS; c++) {
		snprintf(id[c], sizeof id[c], "keep/%d", c);
		ids[c + 1] = id[c];
		reply = harness_submit(b, id[c], id[c]);
		harness_assert_bool(reply, "ok", 1);
		disposition = harness_str(reply, "disposition");
		if (strcmp(disposition, "created") != 0 &&
		    strcmp(disposition, "reused") != 0)
			fail_msg("%s: %s after the fault cleared", id[c],
			    disposition);
		assert_string_equal(harness_receipt_str(reply, "state"),
		    "committed");
		assert_receipt_file(b, reply);
		receipts[c + 1] = receipt_text(reply);
		json_decref(reply);
		assert_int_equal(count_tasks_of(b, id[c]), 1);
	}
	ids[TEST_CONNECTIONS + 1] = NULL;
	assert_reused_as(b, "keep/early", "keep/early", receipts[0]);
	assert_int_equal(harness_count_tasks(b), TEST_CONNECTIONS + 1);
	assert_int_equal(count_task_temporaries(b), 0);
	assert_same_workers(b, workers, n);

	assert_restart_replays(t, ids, ids, receipts, TEST_CONNECTIONS + 1);
	for (c = 0; c < TEST_CONNECTIONS + 1; c++)
		free(receipts[c]);
	harness_shim_finish(t);
}

static void
keeps_serving_journal_write_enospc(void **state)
{
	fault_keeps_serving(*state, "write .idem/journal ENOSPC", 0);
}

static void
keeps_serving_journal_write_eio(void **state)
{
	fault_keeps_serving(*state, "write .idem/journal EIO", 0);
}

static void
keeps_serving_journal_write_erofs(void **state)
{
	fault_keeps_serving(*state, "write .idem/journal EROFS", 1);
}

static void
keeps_serving_journal_fsync_eio_persistent(void **state)
{
	fault_keeps_serving(*state, "sync .idem/journal EIO", 1);
}

static void
keeps_serving_task_write_enospc(void **state)
{
	fault_keeps_serving(*state, "write _lifecycle/inbox/.TASK ENOSPC", 0);
}

static void
keeps_serving_task_write_erofs(void **state)
{
	fault_keeps_serving(*state, "write _lifecycle/inbox/.TASK EROFS", 0);
}

static void
keeps_serving_task_fsync_eio(void **state)
{
	fault_keeps_serving(*state, "sync _lifecycle/inbox/.TASK EIO", 0);
}

static void
keeps_serving_inbox_fsync_eio(void **state)
{
	fault_keeps_serving(*state, "sync _lifecycle/inbox$ EIO", 0);
}

/* Every write, sync and truncate under the root fails with EIO. */
static void
keeps_serving_everything_eio(void **state)
{
	struct harness_shim	*t = *state;
	char			 rule[PATH_MAX + 16];

	snprintf(rule, sizeof rule, "any %s/ EIO", t->b.root);
	fault_keeps_serving(t, rule, 1);
}

/*
 * SIGTERM while the reopen keeps failing: the broker has no state open
 * then, and must still stop by itself (not crash); a restart on a
 * healthy disk keeps what was committed and completes the retry.
 */
static void
sigterm_while_reopen_fails_stops_cleanly(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply;
	char			*receipt, *log, stopped[64];
	int			 status;

	start(t);
	reply = harness_submit(b, "term/early", "Before the fault");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	receipt = receipt_text(reply);
	json_decref(reply);

	harness_fault_rule(t->fault_file, "sync .idem/journal EIO");
	reply = harness_submit(b, "term/late", "Meets the fault");
	assert_storage_unavailable(reply);
	json_decref(reply);
	harness_wait_log(b, "reopening after the journal failure", 1,
	    TEST_EVENT_TIMEOUT_MS);
	/* Its last word on an orderly exit (main.c); a crash has none. */
	snprintf(stopped, sizeof stopped, "idemd[%ld]: stopped\n",
	    (long)b->pid);
	status = harness_stop(b);
	if (status >= 128)
		fail_msg("SIGTERM during a failing reopen: idemd was killed "
		    "by signal %d (see %s)", status - 128, b->log);
	log = read_path(b->log);
	if (strstr(log, stopped) == NULL)
		fail_msg("SIGTERM during a failing reopen: idemd exited with "
		    "status %d without stopping in order (see %s)", status,
		    b->log);
	free(log);

	fault_clear(t);
	start(t);
	assert_reused_as(b, "term/early", "Before the fault", receipt);
	reply = harness_submit(b, "term/late", "Meets the fault");
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(count_tasks_of(b, "term/late"), 1);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 2);
	assert_int_equal(harness_stop(b), 0);
	free(receipt);
	harness_shim_finish(t);
}

/* ---- Checkpoints and segments -------------------------------------------- */

#define TEST_SEGMENT_BYTES	"4096"	/* the smallest idemd takes */
/* Submissions per batch: each fills more than two such segments. */
#define TEST_BATCH		20

static const char *const segment_args[] = {
	"--segment-bytes", TEST_SEGMENT_BYTES, NULL
};

/* Submit ids prefix/from .. prefix/to-1, each created; keep receipts. */
static void
submit_batch(struct broker *b, const char *prefix, int from, int to,
    char **receipts)
{
	json_t	*reply;
	char	 id[64];
	int	 i;

	for (i = from; i < to; i++) {
		snprintf(id, sizeof id, "%s/%d", prefix, i);
		reply = harness_submit(b, id, id);
		harness_assert_outcome(reply, "created", 1, 1, 0);
		receipts[i] = receipt_text(reply);
		json_decref(reply);
	}
}

/* Restart, and every receipt comes back byte for byte. */
static void
assert_batch_replays(struct harness_shim *t, const char *prefix, int count,
    char **receipts)
{
	char	id[64];
	int	i;

	assert_int_equal(harness_stop(&t->b), 0);
	assert_int_equal(harness_start(&t->b, segment_args, t->env), 0);
	for (i = 0; i < count; i++) {
		snprintf(id, sizeof id, "%s/%d", prefix, i);
		assert_reused_as(&t->b, id, id, receipts[i]);
	}
	assert_int_equal(harness_count_tasks(&t->b), count);
	assert_int_equal(count_named(&t->b, ".idem/journal", ".checkpoint-",
	    ""), 0);
}

/*
 * A checkpoint that cannot be written costs space, never a submission:
 * the segments it would have replaced stay, a restart replays them all,
 * and the next checkpoint on a healthy disk replaces them.  rule fails
 * the checkpoint's file; logged says how the failure is logged.
 */
static void
checkpoint_fault_loses_nothing(struct harness_shim *t, const char *rule,
    const char *logged)
{
	struct broker		*b = &t->b;
	char			*receipts[2 * TEST_BATCH];
	int			 i;

	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_fault_rule(t->fault_file, rule);
	submit_batch(b, "ckpt", 0, TEST_BATCH, receipts);
	harness_wait_log(b, logged, 1, TEST_EVENT_TIMEOUT_MS);
	fault_clear(t);
	assert_batch_replays(t, "ckpt", TEST_BATCH, receipts);

	submit_batch(b, "ckpt", TEST_BATCH, 2 * TEST_BATCH, receipts);
	harness_wait_log(b, "submissions\n", 1, TEST_EVENT_TIMEOUT_MS);
	assert_batch_replays(t, "ckpt", 2 * TEST_BATCH, receipts);
	for (i = 0; i < 2 * TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

static void
checkpoint_write_enospc_loses_nothing(void **state)
{
	checkpoint_fault_loses_nothing(*state,
	    "write .idem/journal/.checkpoint- ENOSPC", ".snap.tmp: write: ");
}

/*
 * The checkpoint's paced write-back (sync_file_range, durable.c) fails
 * with EIO: the checkpoint fails as on a failed write, saying which
 * call, and nothing is lost.
 */
static void
checkpoint_writeback_eio_loses_nothing(void **state)
{
	checkpoint_fault_loses_nothing(*state,
	    "writeback .idem/journal/.checkpoint- EIO",
	    ".snap.tmp: write-back: Input/output error");
}

/* Effects of PACE_RESULT bytes: a checkpoint of several pieces. */
#define PACE_RESULT	60000
#define PACE_EFFECTS	12
static const char *const pace_args[] = {
	"--segment-bytes", "524288", "--result-bytes", "33554432", NULL
};

/*
 * The checkpoint's write-back succeeds for its first piece, then fails
 * with EINVAL (the wait for that piece, SYNC_FILE_RANGE_WAIT_BEFORE):
 * past the fd's first call that is the file's error, which the wait
 * also cleared for the fsync to come, not "unsupported".  The checkpoint
 * fails saying so, and nothing is lost.  Fails if any EINVAL turns the
 * pacing off (the checkpoint then renamed, its data maybe never written).
 */
static void
checkpoint_writeback_einval_after_a_piece_fails(void **state)
{
	static char		 result[PACE_RESULT + 16];
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	struct idem_conn	*c;
	struct idem_effect	 e;
	struct idem_error	 err;
	char			 id[64];
	int			 i;

	snprintf(result, sizeof result, "\"%0*d\"", PACE_RESULT, 7);
	/* Before the start: the count is of this broker's calls. */
	harness_fault_rule(t->fault_file,
	    "writeback .idem/journal/.checkpoint- EINVAL 1");
	assert_int_equal(harness_start(b, pace_args, t->env), 0);
	assert_non_null(c = harness_connect(b));
	for (i = 0; i < PACE_EFFECTS; i++) {
		snprintf(id, sizeof id, "pace/%d", i);
		harness_effect_commit(c, "pace.test", "{\"n\":1}", id,
		    result);
	}
	harness_wait_log(b, ".snap.tmp: write-back: Invalid argument", 1,
	    TEST_EVENT_TIMEOUT_MS);
	fault_clear(t);
	idem_close(c);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(count_named(b, ".idem/journal", ".checkpoint-", ""),
	    0);
	assert_int_equal(harness_start(b, pace_args, t->env), 0);
	assert_non_null(c = harness_connect(b));
	for (i = 0; i < PACE_EFFECTS; i++) {
		snprintf(id, sizeof id, "pace/%d", i);
		memset(&e, 0, sizeof e);
		assert_int_equal(idem_effect_begin(c, id, "pace.test",
		    "{\"n\":1}", 0, &e, &err), 0);
		assert_int_equal(e.disposition, IDEM_EFFECT_REUSED);
		idem_effect_clear(&e);
	}
	idem_close(c);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * A rotation's checkpoint that fails is done again a second later while
 * its segment is still the current one, not only at the next rotation:
 * 70 effects of 60,000-byte results fill a 4 MiB segment, the
 * checkpoint of segment 2 fails (ENOSPC), and with the disk healthy
 * again small effects, a few megabytes short of the next rotation, see
 * checkpoint-2 written and segment 1 pruned.  Fails (no checkpoint
 * after RETRY_SMALL effects) when the retry waits for the next rotation.
 */
#define RETRY_BIG	70
#define RETRY_SMALL	4000
static const char *const retry_args[] = {
	"--segment-bytes", "4194304", "--result-bytes", "33554432", NULL
};

static void
failed_checkpoint_done_again_in_its_segment(void **state)
{
	static char		 result[PACE_RESULT + 16];
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	struct idem_conn	*c;
	char			 id[64];
	int			 i;

	snprintf(result, sizeof result, "\"%0*d\"", PACE_RESULT, 7);
	assert_int_equal(harness_start(b, retry_args, t->env), 0);
	harness_fault_rule(t->fault_file,
	    "write .idem/journal/.checkpoint- ENOSPC");
	assert_non_null(c = harness_connect(b));
	for (i = 0; i < RETRY_BIG; i++) {
		snprintf(id, sizeof id, "big/%d", i);
		harness_effect_commit(c, "retry.test", "{\"n\":1}", id,
		    result);
	}
	harness_wait_log(b, ".checkpoint-0000000000000002.snap.tmp: write: ",
	    1, TEST_EVENT_TIMEOUT_MS);
	fault_clear(t);
	for (i = 0; i < RETRY_SMALL &&
	    harness_log_count(b, "checkpoint checkpoint-") == 0; i++) {
		snprintf(id, sizeof id, "small/%d", i);
		harness_effect_commit(c, "retry.test", "{\"n\":1}", id,
		    "{\"ok\":1}");
	}
	if (i == RETRY_SMALL)
		fail_msg("no checkpoint after %d effects since the failure",
		    RETRY_SMALL);
	idem_close(c);
	harness_wait_log(b, "checkpoint checkpoint-0000000000000002.snap: ",
	    1, TEST_EVENT_TIMEOUT_MS);
	/* Segment 1 pruned; segment 2 still the journal's last. */
	assert_int_equal(count_named(b, ".idem/journal", "", ".jnl"), 1);
	assert_int_equal(count_named(b, ".idem/journal",
	    "0000000000000002.jnl", ""), 1);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * The write-back of the zeros of the segment made ahead fails (EIO):
 * that segment is not made (its file removed), the rotation creates its
 * own, as after any failure to make it (doc/journal.md, "The next
 * segment made ahead"); checkpoints follow and every receipt comes back.
 */
static void
segment_writeback_eio_creates_the_segment(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[TEST_BATCH];
	int			 i;

	harness_fault_rule(t->fault_file, "writeback .idem/journal/.next- EIO");
	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_wait_log(b, ".tmp: write-back of zeros: Input/output error; "
	    "the rotation will create it", 1, TEST_EVENT_TIMEOUT_MS);
	submit_batch(b, "wbk", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    TEST_EVENT_TIMEOUT_MS);
	assert_true(harness_log_count(b, "none was made ahead") >= 1);
	fault_clear(t);
	assert_batch_replays(t, "wbk", TEST_BATCH, receipts);
	for (i = 0; i < TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(count_named(b, ".idem/journal", ".next-", ""), 0);
	harness_shim_finish(t);
}

/*
 * A reservation a journal failure lost leaves its slot empty: the next
 * checkpoint leaves it out (a record it could not encode would make the
 * checkpoint unreadable, and the broker unable to start), and the id is
 * free again afterwards.
 */
static void
checkpoint_after_a_lost_reservation_loads(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply;
	char			*receipts[TEST_BATCH];
	int			 i;

	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_fault_rule(t->fault_file, "write .idem/journal/0 ENOSPC");
	reply = harness_submit(b, "lost/1", "lost/1");
	assert_storage_unavailable(reply);
	json_decref(reply);
	fault_clear(t);
	wait_reopened(b);
	submit_batch(b, "ckl", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "submissions\n", 1, TEST_EVENT_TIMEOUT_MS);
	assert_batch_replays(t, "ckl", TEST_BATCH, receipts);
	reply = get_submission(b, "lost/1");
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	reply = harness_submit(b, "lost/1", "lost/1");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	assert_int_equal(count_tasks_of(b, "lost/1"), 1);
	for (i = 0; i < TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * A new segment that cannot be created: the journal goes on in the
 * current one, and rotates once the disk is back.  Its file cannot be
 * written under either name: neither the one made ahead
 * (.next-0000000000000002.tmp, which then is not made) nor the segment's
 * own (the rotation creating it).
 */
static void
segment_create_enospc_goes_on_in_the_current_one(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[2 * TEST_BATCH];
	int			 i;

	/* Before the start: the broker makes the next segment at once. */
	harness_fault_rule(t->fault_file,
	    "write 0000000000000002. ENOSPC");
	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	submit_batch(b, "seg", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "going on with the current segment", 1,
	    TEST_EVENT_TIMEOUT_MS);
	/* No rotation went through: no checkpoint, no segment 2. */
	assert_int_equal(harness_log_count(b, "checkpoint checkpoint-"), 0);
	assert_false(harness_exists(b, ".idem/journal/0000000000000002.jnl"));
	fault_clear(t);
	submit_batch(b, "seg", TEST_BATCH, 2 * TEST_BATCH, receipts);
	/* The disk back, the journal rotates again: a checkpoint follows. */
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    TEST_EVENT_TIMEOUT_MS);
	assert_batch_replays(t, "seg", 2 * TEST_BATCH, receipts);
	for (i = 0; i < 2 * TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * The segment made ahead cannot be renamed into place for a passing
 * reason (EIO): doc/journal.md, "The next segment made ahead", says the
 * rotation drops it and creates the segment itself, and says why once.
 * Every rotation still goes through (checkpoints follow), no .next file
 * is left by a stop, and every receipt comes back after a restart.  Once
 * renames work again, rotations take the one made ahead.
 */
static void
segment_rename_eio_creates_the_segment(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[2 * TEST_BATCH];
	int			 i, created;

	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_fault_rule(t->fault_file, "rename .idem/journal$ EIO");
	submit_batch(b, "ren", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    TEST_EVENT_TIMEOUT_MS);
	created = harness_log_count(b, "none was made ahead");
	assert_true(created >= 1);
	assert_int_equal(harness_log_count(b,
	    "going on with the current segment"), 0);
	assert_int_equal(harness_log_count(b, "could not be renamed into "
	    "place (Input/output error)"), 1);
	fault_clear(t);
	/*
	 * Two rotations at least (a batch fills more than two segments),
	 * of which one at most (one asked for before the clear) created
	 * its segment.
	 */
	submit_batch(b, "ren", TEST_BATCH, 2 * TEST_BATCH, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", created + 2,
	    TEST_EVENT_TIMEOUT_MS);
	assert_true(harness_log_count(b, "none was made ahead") <=
	    created + 1);
	assert_batch_replays(t, "ren", 2 * TEST_BATCH, receipts);
	for (i = 0; i < 2 * TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(count_named(b, ".idem/journal", ".next-", ""), 0);
	harness_shim_finish(t);
}

/*
 * A file system without RENAME_NOREPLACE (EINVAL): said once, and no
 * segment is made ahead from then on (not 2 MiB written, synced and
 * dropped at every rotation), so every later rotation creates its own,
 * even once the fault is gone; every receipt comes back.
 */
static void
segment_rename_einval_stops_making_ahead(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[2 * TEST_BATCH];
	int			 i, created, checkpoints;

	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_fault_rule(t->fault_file, "rename .idem/journal$ EINVAL");
	submit_batch(b, "rnv", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "cannot be renamed into place here", 1,
	    TEST_EVENT_TIMEOUT_MS);
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    TEST_EVENT_TIMEOUT_MS);
	fault_clear(t);
	created = harness_log_count(b, "none was made ahead");
	checkpoints = harness_log_count(b, "checkpoint checkpoint-");
	submit_batch(b, "rnv", TEST_BATCH, 2 * TEST_BATCH, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", checkpoints + 2,
	    TEST_EVENT_TIMEOUT_MS);
	/* Each rotation since created its own: none was made to take. */
	assert_true(harness_log_count(b, "none was made ahead") >=
	    created + 2);
	assert_int_equal(harness_log_count(b,
	    "cannot be renamed into place here"), 1);
	assert_batch_replays(t, "rnv", 2 * TEST_BATCH, receipts);
	for (i = 0; i < 2 * TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * The directory fsync after the rename fails: the doc says the name is
 * removed again and the rotation fails as a failed creation does, the
 * journal going on in the current segment.  So no segment 2 while the
 * fault lasts, no checkpoint, every request served; with the disk back
 * the journal rotates, and every receipt comes back after a restart.
 */
static void
segment_rename_dir_fsync_eio_goes_on_in_the_current_one(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[2 * TEST_BATCH];
	int			 i;

	assert_int_equal(harness_start(b, segment_args, t->env), 0);
	harness_fault_rule(t->fault_file, "sync .idem/journal$ EIO");
	submit_batch(b, "dfs", 0, TEST_BATCH, receipts);
	harness_wait_log(b, "fsync directory: ", 1, TEST_EVENT_TIMEOUT_MS);
	assert_true(harness_log_count(b,
	    "going on with the current segment") >= 1);
	assert_int_equal(harness_log_count(b, "checkpoint checkpoint-"), 0);
	assert_false(harness_exists(b, ".idem/journal/0000000000000002.jnl"));
	fault_clear(t);
	submit_batch(b, "dfs", TEST_BATCH, 2 * TEST_BATCH, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    TEST_EVENT_TIMEOUT_MS);
	assert_batch_replays(t, "dfs", 2 * TEST_BATCH, receipts);
	for (i = 0; i < 2 * TEST_BATCH; i++)
		free(receipts[i]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/* ---- A REPORT file that cannot be written ------------------------------- */

static void
report_file_fault(struct harness_shim *t, const char *rule)
{
	struct broker		*b = &t->b;
	json_t			*reply;
	char			*task_id, *report_id, *report_path, *data;
	char			 line[128];

	start(t);
	reply = harness_submit(b, "rep/task", "Fix login");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	task_id = strdup(harness_receipt_str(reply, "task_id"));
	assert_non_null(task_id);
	json_decref(reply);

	harness_fault_rule(t->fault_file, rule);
	reply = write_report(b, task_id, "rep/1");
	assert_storage_unavailable(reply);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 0);
	assert_int_equal(count_report_temporaries(b), 0);

	fault_clear(t);
	reply = write_report(b, task_id, "rep/1");
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "deduplicated", 0);
	report_id = strdup(harness_str(reply, "report_id"));
	report_path = strdup(harness_str(reply, "report_path"));
	assert_non_null(report_id);
	assert_non_null(report_path);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 1);
	assert_int_equal(count_report_temporaries(b), 0);
	data = harness_read(b, report_path);
	assert_non_null(data);
	snprintf(line, sizeof line, "\nreport_id: \"%s\"\n", report_id);
	assert_non_null(strstr(data, line));
	free(data);

	reply = write_report(b, task_id, "rep/1");
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "deduplicated", 1);
	assert_string_equal(harness_str(reply, "report_id"), report_id);
	assert_string_equal(harness_str(reply, "report_path"), report_path);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 1);

	assert_int_equal(harness_stop(b), 0);
	start(t);
	reply = write_report(b, task_id, "rep/1");
	harness_assert_bool(reply, "deduplicated", 1);
	assert_string_equal(harness_str(reply, "report_id"), report_id);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 1);
	assert_int_equal(harness_count_tasks(b), 1);
	free(task_id);
	free(report_id);
	free(report_path);
	harness_shim_finish(t);
}

static void
report_write_enospc_then_retry_writes_one_report(void **state)
{
	report_file_fault(*state, "write reports/.REPORT ENOSPC");
}

static void
report_fsync_eio_then_retry_writes_one_report(void **state)
{
	report_file_fault(*state, "sync reports/.REPORT EIO");
}

#define T(name)	cmocka_unit_test_setup_teardown(name, setup, \
	    harness_shim_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(task_write_enospc_leaves_reserved_and_retry_creates),
		T(task_fsync_eio_leaves_reserved_and_retry_creates),
		T(rename_einval_falls_back_to_link),
		T(rename_enosys_falls_back_to_link),
		T(task_write_edquot_leaves_reserved_and_retry_creates),
		T(task_write_erofs_leaves_reserved_and_retry_creates),
		T(legacy_task_write_enospc_leaves_nothing),
		T(inbox_fsync_eio_retry_adopts_the_linked_file),
		T(adopting_retry_needs_a_durable_directory_entry),
		T(inbox_links_counted_while_a_failed_fsync_ran_fail),
		T(inbox_link_counted_after_a_failed_fsync_fails),
		T(journal_fdatasync_eio_reopens_and_retry_completes),
		T(journal_write_enospc_reopens_and_retry_completes),
		T(journal_write_erofs_reopens_and_retry_completes),
		T(journal_commit_lost_sets_back_to_reserved),
		T(keeps_serving_journal_write_enospc),
		T(keeps_serving_journal_write_eio),
		T(keeps_serving_journal_write_erofs),
		T(keeps_serving_journal_fsync_eio_persistent),
		T(keeps_serving_task_write_enospc),
		T(keeps_serving_task_write_erofs),
		T(keeps_serving_task_fsync_eio),
		T(keeps_serving_inbox_fsync_eio),
		T(keeps_serving_everything_eio),
		T(report_write_enospc_then_retry_writes_one_report),
		T(report_fsync_eio_then_retry_writes_one_report),
		T(sigterm_while_reopen_fails_stops_cleanly),
		T(checkpoint_write_enospc_loses_nothing),
		T(failed_checkpoint_done_again_in_its_segment),
		T(checkpoint_writeback_eio_loses_nothing),
		T(checkpoint_writeback_einval_after_a_piece_fails),
		T(segment_writeback_eio_creates_the_segment),
		T(segment_create_enospc_goes_on_in_the_current_one),
		T(segment_rename_eio_creates_the_segment),
		T(segment_rename_einval_stops_making_ahead),
		T(segment_rename_dir_fsync_eio_goes_on_in_the_current_one),
		T(checkpoint_after_a_lost_reservation_loads),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
