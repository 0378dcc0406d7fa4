/* SPDX-License-Identifier: ISC */
/*
 * test_failures.c: the failure paths of a real idemd that no other suite
 * reaches, end to end (issue 10, item 10): a full submission table
 * (table_full), a worker out of descriptors (the accept pause on
 * EMFILE), a failed fork of a worker (the master survives and retries),
 * crashes at every crash point of a write_report, and a full journal
 * hand-off ring (the journaling thread held in its fdatasync while
 * requests keep coming).
 *
 * Faults come from outside the broker's code: a small --capacity, a
 * RLIMIT_NOFILE lowered on the worker with prlimit(2), and the fault
 * shim (tests/faults/faultshim.c) preloaded, whose rule in <root>.faults
 * makes fork() fail, or the journal's sync wait, until it is cleared.
 * Each test judges by the files on disk (TASK and REPORT files) and the
 * replies, receipts byte for byte.  Nothing sleeps to synchronise:
 * requests block until served, waits for the broker's own progress are
 * on its log through inotify, with a deadline, and the ring's fill is
 * read from the broker's segment between requests.
 */
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "protocol.h"
#include "shm.h"

/* A test that takes longer than this is hung: the watchdog ends it. */
#define TEST_WATCHDOG_SECONDS	120
/* How long to wait for an event that must come (a guard, not a pause). */
#define TEST_EVENT_TIMEOUT_MS	30000
/* table_full: the table's slots. */
#define TEST_SMALL_CAPACITY	"4"
/* EMFILE: descriptors the worker is left; at most this many held. */
#define TEST_SPARE_FDS		8
#define TEST_MAX_HELD		16
#define TEST_MAX_WORKERS	16
/*
 * The full ring: its broker's root is on tmpfs (TASK files are fsync'd,
 * and tens of thousands of them on a disk take minutes), named so that
 * no idem-* glob of /dev/shm takes it for a segment.
 */
#define TEST_RING_DIR		"/dev/shm"
#define TEST_RING_ROOT		"ringtest-XXXXXX"
/* Requests sent between two looks at the ring. */
#define TEST_RING_BATCH		256
/* Descriptors for the broker: connections pile up faster than it reads. */
#define TEST_RING_NOFILE	16384

/* ---- Fixtures and helpers ------------------------------------------------ */

static int
setup(void **state)
{
	if (sodium_init() < 0)
		return -1;
	return harness_shim_setup(state, TEST_WATCHDOG_SECONDS);
}

static const char *
error_code(json_t *reply)
{
	return harness_str(json_object_get(reply, "error"), "code");
}

/* Count the files of dir (relative to the root) named prefix*.md. */
static int
count_files(const struct broker *b, const char *dir, const char *prefix,
    char *last, size_t last_size)
{
	char		 path[PATH_MAX];
	struct dirent	*e;
	DIR		*d;
	size_t		 n;
	int		 count = 0;

	snprintf(path, sizeof path, "%s/%s", b->root, dir);
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		n = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || n < 3 ||
		    strcmp(e->d_name + n - 3, ".md") != 0)
			continue;
		count++;
		if (last != NULL)
			snprintf(last, last_size, "%s/%s", dir, e->d_name);
	}
	closedir(d);
	return count;
}

/* ---- table_full ---------------------------------------------------------- */

/*
 * A table of TEST_SMALL_CAPACITY slots, every one in flight (effects
 * begun, their leases live): a new id is refused with table_full,
 * retryable (SPEC.md: in-flight work only; the committed history has no
 * ceiling), and nothing is written.  Once one of them commits, the
 * refusal has asked for a checkpoint, which gives the committed entry to
 * the index and makes it evictable: the same id is then created, and
 * the committed effect is still answered, reused with its first receipt
 * byte for byte, now from the index.
 */
static void
table_full_only_for_work_in_flight(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	const char *const	 small[] = { "--capacity", TEST_SMALL_CAPACITY,
				    NULL };
	char			 id[64], fence[64], *first, *again;
	json_t			*reply, *error, *request;
	int			 capacity = atoi(TEST_SMALL_CAPACITY), i;

	assert_int_equal(harness_start(b, small, NULL), 0);
	for (i = 0; i < capacity; i++) {
		snprintf(id, sizeof id, "full/%d", i);
		reply = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:{s:i}, s:i}",
		    "op", "effect_begin", "client_submission_id", id,
		    "effect_kind", "mail.send/v1", "request", "n", i,
		    "lease_ms", 86400000));
		assert_string_equal(harness_str(reply, "disposition"),
		    "proceed");
		if (i == 0)
			snprintf(fence, sizeof fence, "%s",
			    harness_str(reply, "fence"));
		json_decref(reply);
	}

	reply = harness_submit(b, "full/new", "One too many");
	harness_assert_bool(reply, "ok", 0);
	harness_assert_bool(reply, "action_taken", 0);
	assert_string_equal(error_code(reply), "table_full");
	error = json_object_get(reply, "error");
	harness_assert_bool(error, "retryable", 1);
	assert_null(json_object_get(reply, "receipt"));
	json_decref(reply);
	/* A report with an id needs a slot too (its task need not exist:
	 * the refusal comes first or task_not_found does; neither writes). */
	request = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}",
	    "op", "write_report", "task_id", "TASK-20261202-001-PM-to-DEV",
	    "client_submission_id", "r-full",
	    "report", "sender", "DEV", "body", "Done.\n");
	reply = harness_must_call(b, request);
	harness_assert_bool(reply, "ok", 0);
	json_decref(reply);
	assert_int_equal(count_files(b, "reports", "REPORT-", NULL, 0), 0);
	assert_int_equal(harness_count_tasks(b), 0);
	reply = harness_must_call(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", "full/new"));
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);

	/* One commits: a checkpoint (asked for by the refusal) frees it. */
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:s}}",
	    "op", "effect_complete", "client_submission_id", "full/0",
	    "effect_kind", "mail.send/v1", "fence", fence, "outcome",
	    "applied", "result", "id", "m-0"));
	assert_string_equal(harness_str(reply, "state"), "committed");
	first = harness_receipt_text(reply);
	json_decref(reply);
	reply = harness_must_call(b, harness_write_task("full/new", "One too many"));
	if (json_is_false(json_object_get(reply, "ok"))) {
		assert_string_equal(error_code(reply), "table_full");
		json_decref(reply);
		harness_wait_log(b, ": 1 new in the index", 1,
		    TEST_EVENT_TIMEOUT_MS);
		reply = harness_must_call(b, harness_write_task("full/new",
		    "One too many"));
	}
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:{s:i}}",
	    "op", "effect_begin", "client_submission_id", "full/0",
	    "effect_kind", "mail.send/v1", "request", "n", 0));
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	again = harness_receipt_text(reply);
	assert_string_equal(again, first);
	free(again);
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "table_entries")), capacity);
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "history_entries")), 2);
	json_decref(reply);
	free(first);
	harness_shim_finish(t);
}

/* ---- The accept pause on EMFILE ------------------------------------------ */

/*
 * The RLIMIT_NOFILE that leaves pid exactly spare descriptors: a new
 * descriptor takes the lowest free number, which must be under the limit.
 */
static rlim_t
limit_leaving(pid_t pid, int spare)
{
	char		 path[64];
	struct dirent	*e;
	DIR		*d;
	unsigned char	 used[4096];
	long		 fd;
	rlim_t		 limit;

	memset(used, 0, sizeof used);
	snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
	if ((d = opendir(path)) == NULL)
		fail_msg("%s: %s", path, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		fd = strtol(e->d_name, NULL, 10);
		if (e->d_name[0] != '.' && fd >= 0 && fd < (long)sizeof used)
			used[fd] = 1;
	}
	closedir(d);
	for (limit = 0; spare > 0 && limit < sizeof used; limit++) {
		if (!used[limit])
			spare--;
	}
	return limit;
}

/* hello on fd, the reply awaited: fails the test unless it is ok. */
static void
raw_hello(int fd)
{
	json_t	*reply;
	char	*line;

	assert_int_equal(harness_raw_send(fd, "{\"op\":\"hello\"}"), 0);
	line = harness_raw_read_line(fd);
	assert_non_null(line);
	reply = json_loads(line, 0, NULL);
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(line);
}

static const struct shm_header *map_header(const struct broker *);

/*
 * The only worker runs out of descriptors (its RLIMIT_NOFILE lowered
 * with prlimit to leave it TEST_SPARE_FDS more): it serves the
 * connections it could accept and pauses accepting, logged, instead of
 * spinning or dying.  While the connections are held every retry of the
 * accept fails again (logged each second) and a newer connection waits
 * unanswered; once they close, the same worker serves it, and writes.
 */
static void
accept_pauses_on_emfile_then_serves(void **state)
{
	static const char	 pausing[] = "accept; pausing for a second";
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	const char *const	 args[] = { "--workers", "1", NULL };
	pid_t			 workers[TEST_MAX_WORKERS], after[TEST_MAX_WORKERS];
	struct rlimit		 rl;
	struct pollfd		 pfd;
	int			 held[TEST_MAX_HELD], late, i, n, pauses;
	const struct shm_header	*h;
	int64_t			 deadline;
	json_t			*reply;
	char			*line;

	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_int_equal(harness_workers(b, workers, TEST_MAX_WORKERS), 1);
	/* A write first: the worker's lazily opened descriptors are open. */
	reply = harness_submit(b, "emfile/0", "Before the limit");
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);

	assert_int_equal(prlimit(workers[0], RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = limit_leaving(workers[0], TEST_SPARE_FDS);
	assert_int_equal(prlimit(workers[0], RLIMIT_NOFILE, &rl, NULL), 0);

	/*
	 * Connections until the worker is out: the accept that takes the
	 * last descriptor is followed in the same loop by one that fails,
	 * logged before the hello read is answered.
	 */
	for (n = 0; n < TEST_MAX_HELD &&
	    harness_log_count(b, pausing) == 0; n++) {
		held[n] = harness_raw_connect(b);
		assert_true(held[n] != -1);
		raw_hello(held[n]);
	}
	if (harness_log_count(b, pausing) == 0)
		fail_msg("%d connections held, and the worker never ran out "
		    "of descriptors", n);
	assert_true(n >= TEST_SPARE_FDS);

	late = harness_raw_connect(b);
	assert_true(late != -1);
	assert_int_equal(harness_raw_send(late, "{\"op\":\"hello\"}"), 0);
	/* Two more failed accepts: at least one came after late was queued. */
	pauses = harness_log_count(b, pausing);
	harness_wait_log(b, pausing, pauses + 2, TEST_EVENT_TIMEOUT_MS);
	pfd.fd = late;
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	assert_int_equal(kill(workers[0], 0), 0);

	for (i = 0; i < n; i++)
		close(held[i]);
	line = harness_raw_read_line(late);
	assert_non_null(line);
	reply = json_loads(line, 0, NULL);
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(line);
	close(late);

	/*
	 * The worker gives the descriptors back as it reads each EOF, in
	 * whatever order its loop takes them: a write needs a few of them,
	 * so it is sent once the worker has closed every connection.
	 */
	h = map_header(b);
	deadline = harness_now_ms() + TEST_EVENT_TIMEOUT_MS;
	while (atomic_load(&h->connections) != 0) {
		if (harness_now_ms() > deadline)
			fail_msg("%u connections still open %d ms after the "
			    "clients closed them", atomic_load(&h->connections),
			    TEST_EVENT_TIMEOUT_MS);
		(void)poll(NULL, 0, 1);
	}

	/* The same worker, serving writes again. */
	reply = harness_submit(b, "emfile/1", "After the pause");
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	assert_int_equal(harness_workers(b, after, TEST_MAX_WORKERS), 1);
	assert_int_equal(after[0], workers[0]);
	assert_int_equal(harness_count_tasks(b), 2);
	harness_shim_finish(t);
}

/* ---- A failed fork of a worker ------------------------------------------- */

/*
 * The only worker is killed while fork() fails (the shim): the master
 * logs the failure, stays up and retries; once fork works again a
 * replacement serves the request that waited in the backlog meanwhile.
 */
static void
master_survives_failed_fork(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	const char *const	 args[] = { "--workers", "1", NULL };
	pid_t			 workers[TEST_MAX_WORKERS], after[TEST_MAX_WORKERS];
	json_t			*reply;
	int			 fd;
	char			*line;

	assert_int_equal(harness_start(b, args, t->env), 0);
	assert_int_equal(harness_workers(b, workers, TEST_MAX_WORKERS), 1);
	harness_fault_rule(t->fault_file, "fork EAGAIN\n");
	assert_int_equal(kill(workers[0], SIGKILL), 0);
	harness_wait_log(b,
	    "fork of worker 0: Resource temporarily unavailable", 1,
	    TEST_EVENT_TIMEOUT_MS);
	/* The master is alive, and no worker runs. */
	assert_int_equal(kill(b->pid, 0), 0);
	assert_int_equal(harness_workers(b, after, TEST_MAX_WORKERS), 0);
	/* A request waits in the backlog... */
	fd = harness_raw_connect(b);
	assert_true(fd != -1);
	assert_int_equal(harness_raw_send(fd, "{\"op\":\"hello\"}"), 0);
	/* ...and is served by the worker the retry forks. */
	harness_fault_rule(t->fault_file, "");
	line = harness_raw_read_line(fd);
	assert_non_null(line);
	reply = json_loads(line, 0, NULL);
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(line);
	close(fd);

	reply = harness_submit(b, "fork/1", "After a failed fork");
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	assert_int_equal(harness_workers(b, after, TEST_MAX_WORKERS), 1);
	assert_true(after[0] != workers[0]);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/* ---- Crash points in write_report ---------------------------------------- */

static void
report_crash(struct harness_shim *t, const char *variable,
    const char *point)
{
	struct broker		*b = &t->b;
	struct idem_conn	*c;
	char			 entry[128], task_id[96], path[PATH_MAX];
	char			 report_id[96], report_path[PATH_MAX];
	const char *const	 env[] = { entry, NULL };
	json_t			*reply, *request;
	int			 before;

#ifndef IDEM_FAULT_INJECTION
	harness_skip("%s=%s needs a build with fault injection (configure "
	    "--enable-fault-injection)", variable, point);
#endif
	/* The task, written before the crash point is armed. */
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	reply = harness_submit(b, "report-crash/task", "To report");
	assert_string_equal(harness_str(reply, "disposition"), "created");
	snprintf(task_id, sizeof task_id, "%s",
	    harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	assert_int_equal(harness_stop(b), 0);

	snprintf(entry, sizeof entry, "%s=%s", variable, point);
	assert_int_equal(harness_start(b, NULL, env), 0);
	request = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}",
	    "op", "write_report", "task_id", task_id,
	    "client_submission_id", "r-1",
	    "report", "sender", "DEV", "body", "Fixed in a1b2c3.\n");
	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, json_incref(request));
	if (reply != NULL)
		fail_msg("%s=%s: the crash point did not drop the connection: "
		    "%s", variable, point, json_dumps(reply, JSON_COMPACT));
	idem_close(c);
	if (strcmp(variable, "IDEM_CRASH_AT") == 0) {
		harness_wait_dead(b);
		assert_int_equal(harness_start(b, NULL, NULL), 0);
	}
	before = count_files(b, "reports", "REPORT-", path, sizeof path);
	assert_true(before <= 1);

	/*
	 * The retry: one REPORT, deduplicated exactly when it was there;
	 * recovered when it finished the interrupted creation (SPEC.md).
	 */
	reply = harness_must_call(b, json_incref(request));
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "deduplicated", before == 1);
	if (strcmp(point, "after_commit_durable") != 0)
		harness_assert_bool(reply, "recovered", 1);
	else
		assert_null(json_object_get(reply, "recovered"));
	snprintf(report_id, sizeof report_id, "%s",
	    harness_str(reply, "report_id"));
	snprintf(report_path, sizeof report_path, "%s",
	    harness_str(reply, "report_path"));
	json_decref(reply);
	assert_int_equal(count_files(b, "reports", "REPORT-", path,
	    sizeof path), 1);
	assert_string_equal(report_path, path);
	if (before == 1)
		assert_non_null(strstr(path, report_id));

	/* And again: the first answer, still one file. */
	reply = harness_must_call(b, request);
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "deduplicated", 1);
	assert_string_equal(harness_str(reply, "report_id"), report_id);
	assert_string_equal(harness_str(reply, "report_path"), report_path);
	json_decref(reply);
	assert_int_equal(harness_count_reports(b), 1);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_shim_finish(t);
}

#define REPORT_BROKER_CRASH(point)					\
static void								\
report_broker_crash_##point(void **state)				\
{									\
	report_crash(*state, "IDEM_CRASH_AT", #point);			\
}
#define REPORT_WORKER_CRASH(point)					\
static void								\
report_worker_crash_##point(void **state)				\
{									\
	report_crash(*state, "IDEM_CRASH_WORKER_AT", #point);		\
}
REPORT_BROKER_CRASH(after_reserve_durable)
REPORT_BROKER_CRASH(after_task_file_written)
REPORT_BROKER_CRASH(after_task_file_linked)
REPORT_BROKER_CRASH(after_task_created_durable)
REPORT_BROKER_CRASH(after_commit_durable)
REPORT_WORKER_CRASH(after_reserve_durable)
REPORT_WORKER_CRASH(after_task_file_written)
REPORT_WORKER_CRASH(after_task_file_linked)
/* A worker crash cannot tear task_created from its commit: idemd refuses. */
REPORT_WORKER_CRASH(after_commit_durable)

/* ---- A full journal hand-off ring ----------------------------------------- */

/* The broker's segment, mapped read-only: the ring's positions. */
static const struct shm_header *
map_header(const struct broker *b)
{
	char	 name[64], *real;
	void	*p;
	int	 fd;

	real = realpath(b->root, NULL);
	assert_non_null(real);
	shm_name_for_root(real, name);
	free(real);
	fd = shm_open(name, O_RDONLY, 0);
	if (fd == -1)
		fail_msg("shm_open %s: %s", name, strerror(errno));
	p = mmap(NULL, sizeof(struct shm_header), PROT_READ, MAP_SHARED, fd,
	    0);
	close(fd);
	assert_true(p != MAP_FAILED);
	return p;
}

static uint64_t
ring_used(const struct shm_header *h)
{
	return __atomic_load_n(&h->ring_head, __ATOMIC_ACQUIRE) -
	    atomic_load(&h->ring_taken);
}

/* 200 bytes, the longest id there is: the longest records. */
static void
ring_id(char *out, size_t size, int n)
{
	snprintf(out, size, "ring/%0195d", n);
}

/* Send a write_task and close at once: the worker completes it anyway. */
static void
send_and_close(const struct broker *b, int n)
{
	char	 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1], *line;
	json_t	*request;
	int	 fd;

	ring_id(id, sizeof id, n);
	request = harness_write_task(id, "Through a full ring");
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	fd = harness_raw_connect(b);
	assert_true(fd != -1);
	assert_int_equal(harness_raw_send(fd, line), 0);
	close(fd);
	free(line);
}

/*
 * The journaling thread is held in its fdatasync (the shim) while
 * requests keep coming: their records fill the 8 MiB hand-off ring, and
 * the workers must wait for room (not fail, not drop a request, not
 * spin) while still answering what needs no record.  Once the sync
 * returns, every request completes: one TASK file per id, each id's
 * retry reused.  The ring's fill is read from the segment itself.  Six
 * digits for task numbers: three allow 999 tasks a day.
 */
static void
full_ring_waits_then_completes(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	const char *const	 args[] = { "--workers", "1",
				    "--max-connections", "1000000",
				    "--max-connections-per-pid", "1000000",
				    "--inflight-wait-ms", "120000",
				    "--sequence-digits", "6", NULL };
	const struct shm_header	*h;
	struct idem_conn	*c;
	struct rlimit		 rl, saved;
	struct stat		 st;
	char			 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	json_t			*reply;
	uint64_t		 record, durable, most = 0;
	int64_t			 deadline;
	int			 sent = 0, cap, i, reused = 0;

	if (stat(TEST_RING_DIR, &st) == -1 || !S_ISDIR(st.st_mode) ||
	    access(TEST_RING_DIR, W_OK) == -1)
		harness_skip("no writable %s for the ring test's root",
		    TEST_RING_DIR);
	/* The root on tmpfs instead of the fixture's. */
	harness_cleanup(b);
	snprintf(b->root, sizeof b->root, "%s/%s", TEST_RING_DIR,
	    TEST_RING_ROOT);
	assert_non_null(mkdtemp(b->root));
	snprintf(b->socket, sizeof b->socket, "%s/.idem/idemd.sock", b->root);
	snprintf(b->log, sizeof b->log, "%s.log", b->root);
	snprintf(t->fault_file, sizeof t->fault_file, "%s.faults", b->root);
	snprintf(t->env_fault, sizeof t->env_fault, "IDEM_FAULT_FILE=%s",
	    t->fault_file);
	/* The broker inherits this; here it bounds our own connections. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	rl = saved;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < TEST_RING_NOFILE)
		harness_skip("RLIMIT_NOFILE hard limit %llu is under %d",
		    (unsigned long long)rl.rlim_max, TEST_RING_NOFILE);
	rl.rlim_cur = TEST_RING_NOFILE;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	i = harness_start(b, args, t->env);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	assert_int_equal(i, 0);
	h = map_header(b);

	/* One request through: the size of a record (three of them). */
	ring_id(id, sizeof id, 0);
	reply = harness_submit(b, id, "Through a full ring");
	assert_string_equal(harness_str(reply, "disposition"), "created");
	json_decref(reply);
	record = __atomic_load_n(&h->ring_head, __ATOMIC_ACQUIRE) / 3;
	assert_true(record > 0);
	/* Twice what fills the ring: a bound, never reached when it works. */
	cap = (int)(2 * h->ring_bytes / record);

	harness_fault_rule(t->fault_file, "hold .jnl\n");
	durable = atomic_load(&h->ring_durable);
	deadline = harness_now_ms() + TEST_EVENT_TIMEOUT_MS;
	while (h->ring_bytes - ring_used(h) >= record) {
		if (atomic_load(&h->ring_durable) != durable)
			fail_msg("the journal's sync was not held");
		if (harness_now_ms() > deadline)
			fail_msg("%d requests sent in %d ms, %llu of %llu ring "
			    "bytes used", sent, TEST_EVENT_TIMEOUT_MS,
			    (unsigned long long)ring_used(h),
			    (unsigned long long)h->ring_bytes);
		/*
		 * Another batch once the worker has appended the records of
		 * all but the last one (each request appends one, then
		 * waits); otherwise a round trip lets it read on.
		 */
		if (sent < cap && ring_used(h) + TEST_RING_BATCH * record >=
		    (uint64_t)sent * record) {
			for (i = 0; i < TEST_RING_BATCH; i++)
				send_and_close(b, 1 + sent++);
			continue;
		}
		reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
		json_decref(reply);
		if (sent >= cap && h->ring_bytes - ring_used(h) >= record)
			fail_msg("%d requests sent, %llu of %llu ring bytes "
			    "used", sent, (unsigned long long)ring_used(h),
			    (unsigned long long)h->ring_bytes);
	}
	most = ring_used(h);
	/* The ring is full, nothing durable since the hold... */
	assert_true(h->ring_bytes - most < record);
	assert_true(atomic_load(&h->ring_durable) == durable);
	/* ...and what needs no record is still answered. */
	reply = harness_must_call(b, json_pack("{s:s}", "op", "hello"));
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	ring_id(id, sizeof id, 0);
	reply = harness_submit(b, id, "Through a full ring");
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	json_decref(reply);

	/* More requests were sent than the ring holds: some wait for room. */
	assert_true((uint64_t)sent * record > h->ring_bytes);

	/* The sync returns: every request completes, each one once. */
	harness_fault_rule(t->fault_file, "");
	c = harness_connect(b);
	assert_non_null(c);
	for (i = 1; i <= sent; i++) {
		ring_id(id, sizeof id, i);
		reply = harness_call(c, harness_write_task(id,
		    "Through a full ring"));
		assert_non_null(reply);
		if (strcmp(harness_str(reply, "disposition"), "reused") != 0)
			fail_msg("request %d of %d: %s", i, sent,
			    json_dumps(reply, JSON_COMPACT));
		json_decref(reply);
		reused++;
	}
	idem_close(c);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "created")), sent + 1);
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "errors")), 0);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), sent + 1);
	printf("ring: %d requests of %llu-byte records, %llu of %llu ring "
	    "bytes in use at the fullest, %d retries reused\n", sent,
	    (unsigned long long)record, (unsigned long long)most,
	    (unsigned long long)h->ring_bytes, reused);
	munmap((void *)h, sizeof(struct shm_header));
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, setup, \
	    harness_shim_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(table_full_only_for_work_in_flight),
		T(accept_pauses_on_emfile_then_serves),
		T(master_survives_failed_fork),
		T(full_ring_waits_then_completes),
		T(report_broker_crash_after_reserve_durable),
		T(report_broker_crash_after_task_file_written),
		T(report_broker_crash_after_task_file_linked),
		T(report_broker_crash_after_task_created_durable),
		T(report_broker_crash_after_commit_durable),
		T(report_worker_crash_after_reserve_durable),
		T(report_worker_crash_after_task_file_written),
		T(report_worker_crash_after_task_file_linked),
		T(report_worker_crash_after_commit_durable),
	};
	return harness_exit_status(FILTER_RUN(tests));
}
