/* SPDX-License-Identifier: ISC */
/*
 * test_write_task.c: write_task against a real idemd over its socket.
 * Each test runs its own broker on a fresh root and judges by what is
 * authoritative: the TASK files on disk and the receipts, byte for byte.
 * Nothing here sleeps to synchronise; it waits on replies, on the
 * broker's exit, on a pipe or on inotify.
 */
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"

/* A test that takes longer than this is hung: the watchdog ends it. */
/* How long to wait for an event that must come (a guard, not a pause). */
#define TEST_EVENT_TIMEOUT_MS	20000
#define TEST_CONCURRENT_CALLS	8
/* Retries of a call answered in_progress before giving up. */
#define TEST_RETRY_CALLS	100000
#define TEST_BODY		"Steps:\n1. reproduce\n2. fix\n"

/* ---- Fixtures and helpers ------------------------------------------------ */

static const char *
error_str(json_t *reply, const char *key)
{
	return harness_str(json_object_get(reply, "error"), key);
}

/* The NNN of TASK-YYYYMMDD-NNN-...; -1 if the id does not have one. */
static long
task_number(const char *task_id)
{
	char	*end;
	long	 n;

	if (strncmp(task_id, "TASK-", 5) != 0 || strlen(task_id) < 18 ||
	    task_id[13] != '-')
		return -1;
	n = strtol(task_id + 14, &end, 10);
	if (end - (task_id + 14) < 3 || *end != '-')
		return -1;
	return n;
}

static void
expect_task_id(const char *task_id, const char *date, int number)
{
	char	want[96];

	snprintf(want, sizeof want, "TASK-%s-%03d-PM-to-DEV", date, number);
	assert_string_equal(task_id, want);
}

/* Whether the front matter has a line "key: value" exactly. */
static int
has_line(const char *fm, const char *key, const char *value)
{
	char	line[512];

	snprintf(line, sizeof line, "\n%s: %s\n", key, value);
	return strstr(fm, line) != NULL;
}

static int
has_key(const char *fm, const char *key)
{
	char	line[128];

	snprintf(line, sizeof line, "\n%s:", key);
	return strstr(fm, line) != NULL;
}

/* The SHA-256 of a file's bytes in lower-case hex. */
static void
file_sha256(const struct broker *b, const char *relpath,
    char hex[crypto_hash_sha256_BYTES * 2 + 1])
{
	unsigned char	 digest[crypto_hash_sha256_BYTES];
	char		*data;

	data = harness_read(b, relpath);
	assert_non_null(data);
	crypto_hash_sha256(digest, (const unsigned char *)data, strlen(data));
	sodium_bin2hex(hex, crypto_hash_sha256_BYTES * 2 + 1, digest,
	    sizeof digest);
	free(data);
}

/* The task of harness_write_task, for the client's digest code. */
static void
harness_task(struct idem_task *t, const char *subject)
{
	memset(t, 0, sizeof *t);
	t->sender = "PM";
	t->recipient = "DEV";
	t->subject = subject;
	t->body = TEST_BODY;
}

/* Wait until fd is readable; fails the test if it never is. */
static void
wait_readable(int fd)
{
	struct pollfd	pfd = { .fd = fd, .events = POLLIN };
	int		n;

	while ((n = poll(&pfd, 1, TEST_EVENT_TIMEOUT_MS)) == -1 &&
	    errno == EINTR)
		;
	assert_int_equal(n, 1);
}

static json_t *
raw_reply(int fd)
{
	char	*line;
	json_t	*reply;

	line = harness_raw_read_line(fd);
	assert_non_null(line);
	reply = json_loads(line, 0, NULL);
	free(line);
	assert_non_null(reply);
	return reply;
}

static char *
request_text(json_t *request)
{
	char	*text;

	text = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(request);
	assert_non_null(text);
	return text;
}

/* ---- Start-up ------------------------------------------------------------ */

static void
topology_created_on_first_start(void **state)
{
	static const char *const dirs[] = {
		"_lifecycle/inbox", "_lifecycle/active", "_lifecycle/review",
		"_lifecycle/done", "_lifecycle/archive", "reports", "issues",
		"shared", ".idem/journal", NULL
	};
	struct broker	*b = *state;
	char		 path[1024];
	struct stat	 st;
	int		 i;

	assert_false(harness_exists(b, "_lifecycle"));
	harness_must_start(b, NULL, NULL);
	for (i = 0; dirs[i] != NULL; i++) {
		snprintf(path, sizeof path, "%s/%s", b->root, dirs[i]);
		if (stat(path, &st) != 0)
			fail_msg("%s is missing", dirs[i]);
		assert_true(S_ISDIR(st.st_mode));
	}
	assert_true(harness_exists(b, ".idem/idemd.sock"));
	assert_true(harness_exists(b, ".idem/idemd.lock"));
	assert_int_equal(harness_count_tasks(b), 0);
	harness_finish(b);
}

static void
hello_answers_server_and_protocol(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *schemas;
	const char	*version;
	unsigned	 x, y, z;
	char		 rest;

	harness_must_start(b, NULL, NULL);
	reply = harness_must_call(b, json_pack("{s:s, s:i}", "op", "hello",
	    "id", 5));
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(json_integer_value(json_object_get(reply, "id")), 5);
	assert_string_equal(harness_str(reply, "server"), "idemd");
	version = harness_str(reply, "version");
	assert_int_equal(sscanf(version, "%u.%u.%u%c", &x, &y, &z, &rest), 3);
	assert_true(json_is_integer(json_object_get(reply, "protocol")));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "protocol")), 1);
	/* The schemas write_task and effect_begin accept. */
	schemas = json_object_get(reply, "digest_schemas");
	assert_true(json_is_array(schemas));
	assert_int_equal(json_array_size(schemas), 3);
	assert_string_equal(json_string_value(json_array_get(schemas, 0)),
	    "write-task-v1");
	assert_string_equal(json_string_value(json_array_get(schemas, 1)),
	    "generic-json-v1");
	assert_string_equal(json_string_value(json_array_get(schemas, 2)),
	    "fcop-create-task-v1");
	json_decref(reply);
	harness_finish(b);
}

/* ---- Created, reused, conflict ------------------------------------------- */

static void
created_then_reused_with_identical_receipt(void **state)
{
	struct broker	*b = *state;
	struct idem_task t;
	json_t		*first, *second, *request;
	char		*r1, *r2, *fm, hex[65], digest[IDEM_DIGEST_HEX_SIZE];
	char		 value[128], today[9], expected[2048], *data;
	const char	*task_id, *task_path, *at;

	harness_today(today);
	harness_must_start(b, NULL, NULL);
	request = harness_write_task("run-42/step-3", "Fix login");
	json_object_set_new(request, "id", json_integer(7));
	first = harness_must_call(b, request);
	harness_assert_outcome(first, "created", 1, 1, 0);
	assert_int_equal(json_integer_value(json_object_get(first, "id")), 7);
	/* meta is invocation-time data: never digested. */
	request = harness_write_task("run-42/step-3", "Fix login");
	json_object_set_new(request, "id", json_string("retry"));
	json_object_set_new(request, "meta", json_pack("{s:s, s:i}",
	    "trace_id", "t-1", "retry", 2));
	second = harness_must_call(b, request);
	harness_assert_outcome(second, "reused", 0, 1, 0);
	assert_string_equal(harness_str(second, "id"), "retry");
	r1 = harness_receipt_text(first);
	r2 = harness_receipt_text(second);
	assert_non_null(r1);
	assert_non_null(r2);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);

	task_id = harness_receipt_str(first, "task_id");
	harness_skip_if_date_moved(today, task_id);
	expect_task_id(task_id, today, 1);
	task_path = harness_receipt_str(first, "task_path");
	snprintf(value, sizeof value, "_lifecycle/inbox/%s.md", task_id);
	assert_string_equal(task_path, value);
	assert_string_equal(harness_receipt_str(first, "client_submission_id"),
	    "run-42/step-3");
	assert_string_equal(harness_receipt_str(first, "digest_schema"),
	    "write-task-v1");
	harness_task(&t, "Fix login");
	assert_int_equal(idem_task_digest(&t, digest), 0);
	assert_string_equal(harness_receipt_str(first, "request_digest"),
	    digest);

	/* The receipt's file_digest is the file's bytes as written. */
	file_sha256(b, task_path, hex);
	assert_string_equal(harness_receipt_str(first, "file_digest"), hex);

	fm = harness_front_matter(b, task_path);
	snprintf(value, sizeof value, "\"%s\"", task_id);
	assert_true(has_line(fm, "task_id", value));
	assert_true(has_line(fm, "client_submission_id", "\"run-42/step-3\""));
	assert_true(has_line(fm, "digest_schema", "\"write-task-v1\""));
	snprintf(value, sizeof value, "\"%s\"", digest);
	assert_true(has_line(fm, "request_digest", value));
	snprintf(value, sizeof value, "\"%s\"", harness_receipt_str(first,
	    "created_at"));
	assert_true(has_line(fm, "created_at", value));
	assert_true(has_line(fm, "type", "\"TASK\""));
	free(fm);

	/* The whole file, laid out as SPEC.md's "TASK file" shows. */
	data = harness_read(b, task_path);
	assert_non_null(data);
	at = harness_receipt_str(first, "created_at");
	snprintf(expected, sizeof expected,
	    "---\n"
	    "protocol: \"fcop\"\n"
	    "version: 1\n"
	    "type: \"TASK\"\n"
	    "task_id: \"%s\"\n"
	    "sender: \"PM\"\n"
	    "recipient: \"DEV\"\n"
	    "subject: \"Fix login\"\n"
	    "priority: \"P2\"\n"
	    "risk_level: \"low\"\n"
	    "thread_key: null\n"
	    "parent: null\n"
	    "references: []\n"
	    "depends_on: []\n"
	    "created_at: \"%s\"\n"
	    "client_submission_id: \"run-42/step-3\"\n"
	    "digest_schema: \"write-task-v1\"\n"
	    "request_digest: \"%s\"\n"
	    "transitions: [{\"at\":\"%s\",\"from\":null,\"to\":\"inbox\","
	    "\"by\":\"PM\",\"tool\":\"write_task\"}]\n"
	    "---\n"
	    TEST_BODY, task_id, at, digest, at);
	assert_string_equal(data, expected);
	free(data);

	free(r1);
	free(r2);
	json_decref(first);
	json_decref(second);
	harness_finish(b);
}

/*
 * A2: the reply is lost (the client hangs up before reading it).  The
 * broker finishes the detached request, so the retry finds it.  inotify
 * on the inbox tells when the first request holds its reservation (its
 * temporary file appears only after the reservation is durable), so the
 * retry cannot overtake it.
 */
static void
reply_lost_retry_is_reused(void **state)
{
	struct broker	*b = *state;
	char		 path[400], events[4096], *line, *r1, *r2;
	json_t		*retry, *again;
	int		 fd, in;

	harness_must_start(b, NULL, NULL);
	snprintf(path, sizeof path, "%s/_lifecycle/inbox", b->root);
	in = inotify_init1(IN_CLOEXEC);
	assert_true(in != -1);
	assert_true(inotify_add_watch(in, path, IN_CREATE) != -1);

	fd = harness_raw_connect(b);
	assert_true(fd != -1);
	line = request_text(harness_write_task("lost-reply-1", "Lost reply"));
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	close(fd);

	wait_readable(in);
	assert_true(read(in, events, sizeof events) > 0);
	close(in);

	retry = harness_submit(b, "lost-reply-1", "Lost reply");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	assert_int_equal(task_number(harness_receipt_str(retry, "task_id")), 1);
	assert_int_equal(harness_count_tasks(b), 1);
	again = harness_submit(b, "lost-reply-1", "Lost reply");
	harness_assert_outcome(again, "reused", 0, 1, 0);
	r1 = harness_receipt_text(retry);
	r2 = harness_receipt_text(again);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);
	free(r1);
	free(r2);
	json_decref(retry);
	json_decref(again);
	harness_finish(b);
}

struct racer {
	struct idem_conn	*conn;
	pthread_barrier_t	*barrier;
	json_t			*reply;
};

static void *
racer_run(void *arg)
{
	struct racer	*r = arg;

	/* Connected already: the barrier releases only the requests. */
	pthread_barrier_wait(r->barrier);
	r->reply = harness_call(r->conn, harness_write_task("race-1",
	    "Concurrent"));
	return NULL;
}

/* A4: identical calls at once, each on its own connection. */
static void
concurrent_identical_calls_create_once(void **state)
{
	struct broker		*b = *state;
	struct racer		 r[TEST_CONCURRENT_CALLS];
	pthread_t		 threads[TEST_CONCURRENT_CALLS];
	pthread_barrier_t	 barrier;
	char			*first = NULL, *text;
	const char		*disposition;
	int			 i, created = 0, reused = 0;

	harness_must_start(b, NULL, NULL);
	pthread_barrier_init(&barrier, NULL, TEST_CONCURRENT_CALLS);
	for (i = 0; i < TEST_CONCURRENT_CALLS; i++) {
		r[i].conn = harness_connect(b);
		assert_non_null(r[i].conn);
		r[i].barrier = &barrier;
		r[i].reply = NULL;
	}
	for (i = 0; i < TEST_CONCURRENT_CALLS; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, racer_run,
		    &r[i]), 0);
	for (i = 0; i < TEST_CONCURRENT_CALLS; i++)
		pthread_join(threads[i], NULL);
	pthread_barrier_destroy(&barrier);

	for (i = 0; i < TEST_CONCURRENT_CALLS; i++) {
		assert_non_null(r[i].reply);
		disposition = harness_str(r[i].reply, "disposition");
		if (strcmp(disposition, "created") == 0) {
			harness_assert_outcome(r[i].reply, "created", 1, 1, 0);
			created++;
		} else {
			harness_assert_outcome(r[i].reply, "reused", 0, 1, 0);
			reused++;
		}
		text = harness_receipt_text(r[i].reply);
		if (first == NULL)
			first = text;
		else {
			assert_string_equal(text, first);
			free(text);
		}
		json_decref(r[i].reply);
		idem_close(r[i].conn);
	}
	assert_int_equal(created, 1);
	assert_int_equal(reused, TEST_CONCURRENT_CALLS - 1);
	assert_int_equal(harness_count_tasks(b), 1);
	free(first);
	harness_finish(b);
}

/*
 * write-task-v1 digests the normalized task with its defaults: a retry
 * that spells the defaults out, ends lines with CRLF or writes "é"
 * decomposed is the same request, and the file holds the normal form.
 */
static void
normalized_variants_are_reused(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *request, *reply;
	char		*r1, *r2, *data;

	harness_must_start(b, NULL, NULL);
	first = harness_must_call(b,
	    json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:s}}",
	    "op", "write_task", "client_submission_id", "norm-1",
	    "task", "sender", "PM", "recipient", "DEV",
	    "subject", "Caf\xc3\xa9 menu", "body", "one\ntwo\n"));
	harness_assert_outcome(first, "created", 1, 1, 0);
	r1 = harness_receipt_text(first);

	request = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, "
	    "s:s, s:n, s:n, s:[], s:[]}}",
	    "op", "write_task", "client_submission_id", "norm-1",
	    "digest_schema", "write-task-v1",
	    "task", "sender", "PM", "recipient", "DEV",
	    "subject", "Cafe\xcc\x81 menu", "body", "one\r\ntwo\r",
	    "priority", "P2", "risk_level", "low", "thread_key", "parent",
	    "references", "depends_on");
	assert_non_null(request);
	reply = harness_must_call(b, request);
	harness_assert_outcome(reply, "reused", 0, 1, 0);
	r2 = harness_receipt_text(reply);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);

	data = harness_read(b, harness_receipt_str(first, "task_path"));
	assert_non_null(data);
	assert_non_null(strstr(data, "\nsubject: \"Caf\xc3\xa9 menu\"\n"));
	assert_non_null(strstr(data, "\n---\none\ntwo\n"));
	assert_null(strchr(data, '\r'));
	free(data);
	free(r1);
	free(r2);
	json_decref(first);
	json_decref(reply);
	harness_finish(b);
}

static void
same_id_other_content_conflicts(void **state)
{
	struct broker	*b = *state;
	json_t		*first, *other, *existing, *error;

	harness_must_start(b, NULL, NULL);
	first = harness_submit(b, "conflict-1", "Original subject");
	harness_assert_outcome(first, "created", 1, 1, 0);
	other = harness_submit(b, "conflict-1", "Another subject");
	harness_assert_error(other, "conflict", 0);
	assert_string_equal(harness_str(other, "disposition"), "conflict");
	error = json_object_get(other, "error");
	assert_string_equal(harness_str(error, "reason"), "digest_mismatch");
	assert_null(json_object_get(other, "receipt"));
	existing = json_object_get(other, "existing");
	assert_non_null(existing);
	assert_string_equal(harness_str(existing, "client_submission_id"),
	    "conflict-1");
	assert_string_equal(harness_str(existing, "state"), "committed");
	assert_string_equal(harness_str(existing, "digest_schema"),
	    "write-task-v1");
	assert_string_equal(harness_str(existing, "request_digest"),
	    harness_receipt_str(first, "request_digest"));
	assert_string_equal(harness_str(existing, "task_id"),
	    harness_receipt_str(first, "task_id"));
	assert_int_equal(harness_count_tasks(b), 1);
	json_decref(first);
	json_decref(other);
	harness_finish(b);
}

static void
request_digest_checked(void **state)
{
	struct broker	*b = *state;
	struct idem_task t;
	char		 digest[IDEM_DIGEST_HEX_SIZE];
	char		 wrong[IDEM_DIGEST_HEX_SIZE];
	json_t		*request, *reply;

	harness_task(&t, "Digest given");
	assert_int_equal(idem_task_digest(&t, digest), 0);
	memcpy(wrong, digest, sizeof wrong);
	wrong[10] = wrong[10] == '0' ? '1' : '0';
	harness_must_start(b, NULL, NULL);

	request = harness_write_task("digest-1", "Digest given");
	json_object_set_new(request, "request_digest", json_string(wrong));
	reply = harness_must_call(b, request);
	harness_assert_error(reply, "digest_disagrees", 0);
	assert_null(json_object_get(reply, "receipt"));
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 0);

	/* The wrong call bound nothing: the right one is the first. */
	request = harness_write_task("digest-1", "Digest given");
	json_object_set_new(request, "request_digest", json_string(digest));
	reply = harness_must_call(b, request);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	assert_string_equal(harness_receipt_str(reply, "request_digest"),
	    digest);
	assert_int_equal(task_number(harness_receipt_str(reply, "task_id")), 1);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

static void
legacy_calls_create_each_time(void **state)
{
	struct broker	*b = *state;
	json_t		*reply[3];
	char		*fm;
	int		 i;

	harness_must_start(b, NULL, NULL);
	for (i = 0; i < 3; i++) {
		reply[i] = harness_submit(b, NULL, "Legacy");
		harness_assert_outcome(reply[i], "created", 1, 0, 0);
		assert_true(json_is_null(json_object_get(json_object_get(
		    reply[i], "receipt"), "client_submission_id")));
		assert_null(json_object_get(json_object_get(reply[i],
		    "receipt"), "request_digest"));
		assert_int_equal(task_number(harness_receipt_str(reply[i],
		    "task_id")), i + 1);
		fm = harness_front_matter(b, harness_receipt_str(reply[i],
		    "task_path"));
		assert_true(has_line(fm, "client_submission_id", "null"));
		assert_false(has_key(fm, "digest_schema"));
		assert_false(has_key(fm, "request_digest"));
		free(fm);
	}
	assert_string_not_equal(harness_receipt_str(reply[0], "task_id"),
	    harness_receipt_str(reply[1], "task_id"));
	assert_string_not_equal(harness_receipt_str(reply[1], "task_id"),
	    harness_receipt_str(reply[2], "task_id"));
	assert_int_equal(harness_count_tasks(b), 3);
	for (i = 0; i < 3; i++)
		json_decref(reply[i]);
	harness_finish(b);
}

/* ---- Restarts ------------------------------------------------------------ */

static void
reuse_after_restart(struct broker *b, int hard)
{
	json_t	*first, *retry;
	char	*r1, *r2;

	harness_must_start(b, NULL, NULL);
	first = harness_submit(b, "restart-1", "Survives restarts");
	harness_assert_outcome(first, "created", 1, 1, 0);
	if (hard)
		harness_kill(b);
	else
		assert_int_equal(harness_stop(b), 0);
	harness_must_start(b, NULL, NULL);
	retry = harness_submit(b, "restart-1", "Survives restarts");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	r1 = harness_receipt_text(first);
	r2 = harness_receipt_text(retry);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);
	free(r1);
	free(r2);
	json_decref(first);
	json_decref(retry);
	harness_finish(b);
}

static void
reuse_after_sigterm_restart(void **state)
{
	reuse_after_restart(*state, 0);
}

static void
reuse_after_kill9_restart(void **state)
{
	reuse_after_restart(*state, 1);
}

#define NUMBERS_HARD	0x1	/* kill -9, not SIGTERM */
#define NUMBERS_LEGACY	0x2	/* legacy calls mixed in */
#define NUMBERS_GONE	0x4	/* the files left the workspace meanwhile */

static void
numbers_after_restart(struct broker *b, int how)
{
	static const char *const ids[] = { "num-1", "num-2", "num-3" };
	char		 path[1024];
	json_t		*reply;
	int		 i, legacy;

	harness_must_start(b, NULL, NULL);
	for (i = 0; i < 3; i++) {
		/* Last, so that only its own record can keep its number. */
		legacy = (how & NUMBERS_LEGACY) && i == 2;
		reply = harness_submit(b, legacy ? NULL : ids[i], "Numbered");
		harness_assert_outcome(reply, "created", 1, !legacy, 0);
		assert_int_equal(task_number(harness_receipt_str(reply,
		    "task_id")), i + 1);
		if (how & NUMBERS_GONE) {
			/* An FCoP tool archived it out of the workspace. */
			snprintf(path, sizeof path, "%s/%s", b->root,
			    harness_receipt_str(reply, "task_path"));
			assert_int_equal(unlink(path), 0);
		}
		json_decref(reply);
	}
	if (how & NUMBERS_HARD)
		harness_kill(b);
	else
		assert_int_equal(harness_stop(b), 0);
	harness_must_start(b, NULL, NULL);

	reply = harness_submit(b, (how & NUMBERS_LEGACY) ? NULL : "num-4",
	    "Numbered");
	harness_assert_outcome(reply, "created", 1, !(how & NUMBERS_LEGACY), 0);
	assert_int_equal(task_number(harness_receipt_str(reply, "task_id")), 4);
	json_decref(reply);
	if (how & NUMBERS_LEGACY) {
		reply = harness_submit(b, "num-5", "Numbered");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		assert_int_equal(task_number(harness_receipt_str(reply,
		    "task_id")), 5);
		json_decref(reply);
	}
	assert_int_equal(harness_count_tasks(b), (how & NUMBERS_GONE) ?
	    ((how & NUMBERS_LEGACY) ? 2 : 1) :
	    ((how & NUMBERS_LEGACY) ? 5 : 4));
	harness_finish(b);
}

static void
numbers_not_reused_after_sigterm(void **state)
{
	numbers_after_restart(*state, 0);
}

static void
numbers_not_reused_after_kill9(void **state)
{
	numbers_after_restart(*state, NUMBERS_HARD);
}

static void
numbers_not_reused_after_sigterm_with_legacy(void **state)
{
	numbers_after_restart(*state, NUMBERS_LEGACY);
}

static void
numbers_not_reused_after_kill9_with_legacy(void **state)
{
	numbers_after_restart(*state, NUMBERS_HARD | NUMBERS_LEGACY);
}

/* The journal, not only the disk, remembers the numbers. */
static void
numbers_not_reused_after_files_left(void **state)
{
	numbers_after_restart(*state, NUMBERS_HARD | NUMBERS_LEGACY |
	    NUMBERS_GONE);
}

/*
 * Before the first start another FCoP writer used number `taken` today,
 * at relpath ("%s" stands for the task id, once or twice).
 */
static void
numbers_used_on_disk_skipped(struct broker *b, const char *where, int taken)
{
	char	 today[9], relpath[512], id[64];
	json_t	*reply;

	harness_today(today);
	snprintf(id, sizeof id, "TASK-%s-%03d-PM-to-DEV", today, taken);
	if (strcmp(where, "done") == 0)
		snprintf(relpath, sizeof relpath, "_lifecycle/done/%s.md", id);
	else
		snprintf(relpath, sizeof relpath, "history/2026-12-02/%s/%s.md",
		    id, id);
	assert_int_equal(harness_write(b, relpath, "---\nprotocol: \"fcop\"\n"
	    "---\nwritten by another FCoP tool\n"), 0);
	harness_must_start(b, NULL, NULL);
	reply = harness_submit(b, "after-foreign", "After a foreign task");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	harness_skip_if_date_moved(today, harness_receipt_str(reply,
	    "task_id"));
	expect_task_id(harness_receipt_str(reply, "task_id"), today, taken + 1);
	json_decref(reply);
	reply = harness_submit(b, NULL, "Legacy after a foreign task");
	harness_assert_outcome(reply, "created", 1, 0, 0);
	assert_int_equal(task_number(harness_receipt_str(reply, "task_id")),
	    taken + 2);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 3);
	harness_finish(b);
}

static void
numbers_used_in_done_skipped(void **state)
{
	numbers_used_on_disk_skipped(*state, "done", 41);
}

static void
numbers_used_in_history_skipped(void **state)
{
	numbers_used_on_disk_skipped(*state, "history", 57);
}

/*
 * After idemd has started handing out today's numbers, another FCoP
 * writer creates the next one (here already moved on to active/ by an
 * agent, or with other roles in the inbox).  SPEC.md: numbers other
 * writers used on disk for that date are skipped, and a task_id names
 * one task: idemd must not hand out that number.
 */
static void
number_used_after_start(struct broker *b, const char *stage,
    const char *roles, const char *const *env)
{
	char	 today[9], rel[256];
	json_t	*reply;

	harness_today(today);
	harness_must_start(b, NULL, env);
	reply = harness_submit(b, "later-1", "First");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	harness_skip_if_date_moved(today, harness_receipt_str(reply,
	    "task_id"));
	expect_task_id(harness_receipt_str(reply, "task_id"), today, 1);
	json_decref(reply);

	snprintf(rel, sizeof rel, "_lifecycle/%s/TASK-%s-002-%s.md",
	    stage, today, roles);
	assert_int_equal(harness_write(b, rel, "---\nprotocol: \"fcop\"\n"
	    "---\nwritten by another FCoP tool\n"), 0);

	reply = harness_submit(b, "later-2", "Second");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	harness_skip_if_date_moved(today, harness_receipt_str(reply,
	    "task_id"));
	if (task_number(harness_receipt_str(reply, "task_id")) == 2)
		fail_msg("%s reuses the number of %s",
		    harness_receipt_str(reply, "task_id"), rel);
	expect_task_id(harness_receipt_str(reply, "task_id"), today, 3);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 3);
	harness_finish(b);
}

static void
same_name_taken_in_active_after_start(void **state)
{
	number_used_after_start(*state, "active", "PM-to-DEV", NULL);
}

static void
number_used_in_inbox_after_start(void **state)
{
	number_used_after_start(*state, "inbox", "OPS-to-QA", NULL);
}

/*
 * The same where the watch cannot vouch (IDEM_CRASH_WATCH=remote, the
 * stand-in for NFS: the foreign file's event is not heard, as another
 * host's is not): the name check walks and finds the name in active/
 * (fails if it trusts the watch's sightings there, watch_name_new).
 */
static void
same_name_taken_in_active_unheard(void **state)
{
	static const char *const	env[] = { "IDEM_CRASH_WATCH=remote",
	    NULL };

	harness_need_fault_injection(*state);
	number_used_after_start(*state, "active", "PM-to-DEV", env);
}

/*
 * FCoP tools moved the tasks (to done/, and into history/); after a
 * kill -9 the committed receipts are replayed and the retries reuse
 * them without writing anything into the inbox.
 */
static void
moved_tasks_still_found_after_restart(void **state)
{
	struct broker	*b = *state;
	json_t		*a, *h, *retry;
	char		 from[1024], to[1024], rel[512], *ra, *rh, *rr;

	harness_must_start(b, NULL, NULL);
	a = harness_submit(b, "move-done", "Moved to done");
	h = harness_submit(b, "move-history", "Moved to history");
	harness_assert_outcome(a, "created", 1, 1, 0);
	harness_assert_outcome(h, "created", 1, 1, 0);
	harness_kill(b);

	snprintf(from, sizeof from, "%s/%s", b->root, harness_receipt_str(a,
	    "task_path"));
	snprintf(to, sizeof to, "%s/_lifecycle/done/%s.md", b->root,
	    harness_receipt_str(a, "task_id"));
	assert_int_equal(rename(from, to), 0);
	snprintf(rel, sizeof rel, "history/2026-12-02/%s/%s.md",
	    harness_receipt_str(h, "task_id"), harness_receipt_str(h,
	        "task_id"));
	assert_int_equal(harness_write(b, rel, ""), 0);
	snprintf(from, sizeof from, "%s/%s", b->root, harness_receipt_str(h,
	    "task_path"));
	snprintf(to, sizeof to, "%s/%s", b->root, rel);
	assert_int_equal(rename(from, to), 0);

	harness_must_start(b, NULL, NULL);
	ra = harness_receipt_text(a);
	rh = harness_receipt_text(h);
	retry = harness_submit(b, "move-done", "Moved to done");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	rr = harness_receipt_text(retry);
	assert_string_equal(rr, ra);
	free(rr);
	json_decref(retry);
	retry = harness_submit(b, "move-history", "Moved to history");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	rr = harness_receipt_text(retry);
	assert_string_equal(rr, rh);
	free(rr);
	json_decref(retry);

	assert_int_equal(harness_count_tasks(b), 2);
	assert_false(harness_exists(b, harness_receipt_str(a, "task_path")));
	assert_false(harness_exists(b, harness_receipt_str(h, "task_path")));
	/* And a new task does not take a moved task's number. */
	retry = harness_submit(b, "after-move", "After the moves");
	assert_int_equal(task_number(harness_receipt_str(retry, "task_id")), 3);
	json_decref(retry);
	free(ra);
	free(rh);
	json_decref(a);
	json_decref(h);
	harness_finish(b);
}

/* ---- One broker per root ------------------------------------------------- */

static void
second_broker_on_root_refused(void **state)
{
	struct broker	*b = *state;
	const char	*idemd = getenv("IDEMD");
	char		 output[8192], pid[32];
	size_t		 length = 0;
	ssize_t		 n;
	pid_t		 second;
	int		 err[2], status;
	json_t		*reply;

	if (idemd == NULL)
		idemd = "broker/idemd";
	harness_must_start(b, NULL, NULL);
	assert_int_equal(pipe2(err, O_CLOEXEC), 0);
	second = fork();
	assert_true(second != -1);
	if (second == 0) {
		dup2(err[1], 2);
		execl(idemd, idemd, "--root", b->root, (char *)NULL);
		_exit(127);
	}
	close(err[1]);
	/* Its stderr closes when it exits: read to the end, then reap. */
	while (length < sizeof output - 1 && (n = read(err[0],
	    output + length, sizeof output - 1 - length)) != 0) {
		if (n == -1 && errno == EINTR)
			continue;
		assert_true(n > 0);
		length += (size_t)n;
	}
	output[length] = '\0';
	close(err[0]);
	while (waitpid(second, &status, 0) == -1)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(status));
	assert_int_not_equal(WEXITSTATUS(status), 0);
	assert_int_not_equal(WEXITSTATUS(status), 127);
	snprintf(pid, sizeof pid, "%ld", (long)b->pid);
	if (strstr(output, pid) == NULL)
		fail_msg("the second broker's message does not name pid %s: "
		    "%s", pid, output);

	/* The first broker is untouched and still serving. */
	reply = harness_must_call(b, json_pack("{s:s}", "op", "hello"));
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = harness_submit(b, "still-serving", "Still serving");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	harness_finish(b);
}

/* ---- Waiting for a call in flight ---------------------------------------- */

/*
 * Two identical calls while the master (and with it the journaling
 * thread) is stopped: whichever claims the submission first cannot get
 * its reservation durable, so the other one must find it in flight.
 * With --inflight-wait-ms 0 that one answers in_progress at once.
 * Returns the index (0 or 1) of the call still in flight; fds[other]
 * has been answered in_progress.
 */
static int
two_calls_one_in_flight(struct broker *b, const char *id, int fds[2])
{
	struct pollfd	 pfd[2];
	json_t		*reply;
	char		*line;
	int		 i, n, in_flight, status;

	/* The master is our child: waitpid says when all of it has stopped. */
	assert_int_equal(kill(b->pid, SIGSTOP), 0);
	while (waitpid(b->pid, &status, WUNTRACED) == -1)
		assert_int_equal(errno, EINTR);
	assert_true(WIFSTOPPED(status));
	for (i = 0; i < 2; i++) {
		fds[i] = harness_raw_connect(b);
		assert_true(fds[i] != -1);
		line = request_text(harness_write_task(id, "In flight"));
		assert_int_equal(harness_raw_send(fds[i], line), 0);
		free(line);
		pfd[i].fd = fds[i];
		pfd[i].events = POLLIN;
	}
	while ((n = poll(pfd, 2, TEST_EVENT_TIMEOUT_MS)) == -1 &&
	    errno == EINTR)
		;
	assert_int_equal(n, 1);
	in_flight = (pfd[0].revents & POLLIN) ? 1 : 0;
	reply = raw_reply(fds[1 - in_flight]);
	harness_assert_error(reply, "in_progress", 1);
	json_decref(reply);
	/* The other is still parked: nothing can become durable now. */
	pfd[0].fd = fds[in_flight];
	assert_int_equal(poll(pfd, 1, 0), 0);
	return in_flight;
}

static void
inflight_wait_zero_answers_in_progress(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--inflight-wait-ms", "0", NULL };
	json_t			*reply, *retry;
	char			*r1, *r2;
	int			 fds[2], in_flight;

	harness_must_start(b, args, NULL);
	in_flight = two_calls_one_in_flight(b, "inflight-1", fds);
	assert_int_equal(harness_count_tasks(b), 0);
	assert_int_equal(kill(b->pid, SIGCONT), 0);
	reply = raw_reply(fds[in_flight]);
	harness_assert_outcome(reply, "created", 1, 1, 0);

	/* in_progress is retryable: the same connection retries. */
	r1 = request_text(harness_write_task("inflight-1", "In flight"));
	assert_int_equal(harness_raw_send(fds[1 - in_flight], r1), 0);
	free(r1);
	retry = raw_reply(fds[1 - in_flight]);
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	r1 = harness_receipt_text(reply);
	r2 = harness_receipt_text(retry);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);
	close(fds[0]);
	close(fds[1]);
	free(r1);
	free(r2);
	json_decref(reply);
	json_decref(retry);
	harness_finish(b);
}

/*
 * A2 made certain: the client hangs up while its call is in flight (its
 * reservation held up in the stopped journaler).  The broker finishes
 * the detached call, so a retry reuses it; until it is finished the
 * retry may hear in_progress (--inflight-wait-ms 0), and retries.
 */
static void
hangup_in_flight_then_retry_reused(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--inflight-wait-ms", "0", NULL };
	json_t			*reply = NULL;
	int			 fds[2], in_flight, i;

	harness_must_start(b, args, NULL);
	in_flight = two_calls_one_in_flight(b, "hangup-1", fds);
	close(fds[in_flight]);
	close(fds[1 - in_flight]);
	assert_int_equal(kill(b->pid, SIGCONT), 0);

	for (i = 0; i < TEST_RETRY_CALLS; i++) {
		reply = harness_submit(b, "hangup-1", "In flight");
		if (!json_is_false(json_object_get(reply, "ok")) ||
		    strcmp(error_str(reply, "code"), "in_progress") != 0)
			break;
		json_decref(reply);
	}
	assert_true(i < TEST_RETRY_CALLS);
	harness_assert_outcome(reply, "reused", 0, 1, 0);
	assert_int_equal(task_number(harness_receipt_str(reply, "task_id")), 1);
	json_decref(reply);
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/*
 * SIGTERM while a call is in flight: idemd(8) says the broker finishes
 * the requests that run, then exits 0 and removes its socket.  The call
 * is answered created, and after a restart its retry is reused.
 */
static void
sigterm_in_flight_finishes_the_call(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--inflight-wait-ms", "0", NULL };
	json_t			*reply, *retry;
	char			*r1, *r2;
	int			 fds[2], in_flight;

	harness_must_start(b, args, NULL);
	in_flight = two_calls_one_in_flight(b, "term-1", fds);
	close(fds[1 - in_flight]);
	/* Both signals wait for the stopped master; SIGTERM comes first. */
	assert_int_equal(kill(b->pid, SIGTERM), 0);
	assert_int_equal(kill(b->pid, SIGCONT), 0);
	reply = raw_reply(fds[in_flight]);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	close(fds[in_flight]);
	assert_int_equal(harness_stop(b), 0);
	assert_false(harness_exists(b, ".idem/idemd.sock"));
	assert_int_equal(harness_count_tasks(b), 1);

	harness_must_start(b, NULL, NULL);
	retry = harness_submit(b, "term-1", "In flight");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	r1 = harness_receipt_text(reply);
	r2 = harness_receipt_text(retry);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 1);
	free(r1);
	free(r2);
	json_decref(reply);
	json_decref(retry);
	harness_finish(b);
}

/*
 * Another FCoP writer takes the preallocated name while the first call
 * is in flight (its reservation held up in the stopped journaler), in
 * dir (nested: in a task directory there, as in history/): the call moves to
 * a fresh number and leaves the other file alone.  In the inbox the
 * link's EEXIST catches it; anywhere else the check before the link,
 * which the watch serves: the file appears after the number was handed
 * out and before the link, in a directory watched from the start, or in
 * one made meanwhile (a new stage, a new history date).
 */
static void
name_taken_while_in_flight(struct broker *b, const char *dir, int nested)
{
	static const char *const args[] = { "--inflight-wait-ms", "0", NULL };
	static const char	 foreign[] = "---\nprotocol: \"fcop\"\n"
	    "type: \"TASK\"\n---\nanother writer's task\n";
	json_t			*reply, *retry;
	char			 today[9], id[64], rel[256], *r1, *r2, *data;
	int			 fds[2], in_flight;

	harness_today(today);
	harness_must_start(b, args, NULL);
	/* The PostgreSQL claims' lines about the watch: not on this store. */
	assert_int_equal(harness_log_count(b, "the watch sees every name"), 0);
	assert_int_equal(harness_log_count(b, "every claim scans"), 0);
	in_flight = two_calls_one_in_flight(b, "taken-1", fds);
	/* The claimer reserved 001 (a fresh root) before the other looked. */
	snprintf(id, sizeof id, "TASK-%s-001-PM-to-DEV", today);
	if (nested)
		snprintf(rel, sizeof rel, "%s/%s/%s.md", dir, id, id);
	else
		snprintf(rel, sizeof rel, "%s/%s.md", dir, id);
	assert_int_equal(harness_write(b, rel, foreign), 0);
	assert_int_equal(kill(b->pid, SIGCONT), 0);
	reply = raw_reply(fds[in_flight]);
	harness_assert_outcome(reply, "created", 1, 1, 0);
	harness_skip_if_date_moved(today, harness_receipt_str(reply,
	    "task_id"));
	expect_task_id(harness_receipt_str(reply, "task_id"), today, 2);
	data = harness_read(b, rel);
	assert_non_null(data);
	assert_string_equal(data, foreign);
	free(data);
	assert_int_equal(harness_count_tasks(b), 2);
	close(fds[0]);
	close(fds[1]);

	/* The move is durable: a retry after kill -9 finds number 002. */
	harness_kill(b);
	harness_must_start(b, NULL, NULL);
	retry = harness_submit(b, "taken-1", "In flight");
	harness_assert_outcome(retry, "reused", 0, 1, 0);
	r1 = harness_receipt_text(reply);
	r2 = harness_receipt_text(retry);
	assert_string_equal(r1, r2);
	assert_int_equal(harness_count_tasks(b), 2);
	free(r1);
	free(r2);
	json_decref(reply);
	json_decref(retry);
	harness_finish(b);
}

static void
preallocated_name_taken_moves_on(void **state)
{
	name_taken_while_in_flight(*state, "_lifecycle/inbox", 0);
}

static void
preallocated_name_taken_in_active_moves_on(void **state)
{
	name_taken_while_in_flight(*state, "_lifecycle/active", 0);
}

static void
preallocated_name_taken_in_new_stage_moves_on(void **state)
{
	name_taken_while_in_flight(*state, "_lifecycle/blocked", 0);
}

static void
preallocated_name_taken_in_history_moves_on(void **state)
{
	name_taken_while_in_flight(*state, "history/2026-12-03", 1);
}

/* ---- Bad input ----------------------------------------------------------- */

static void
bad_json_keeps_connection(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	json_t			*reply;

	harness_must_start(b, NULL, NULL);
	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call_line(c, "this is {not json");
	assert_non_null(reply);
	harness_assert_error(reply, "invalid_json", 0);
	json_decref(reply);
	reply = harness_call(c, json_pack("{s:s}", "op", "hello"));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "server"), "idemd");
	json_decref(reply);
	idem_close(c);
	assert_int_equal(harness_count_tasks(b), 0);
	harness_finish(b);
}

static void
unknown_op_echoes_id(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	json_t			*reply;

	harness_must_start(b, NULL, NULL);
	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call_line(c,
	    "{\"op\":\"frobnicate\",\"id\":\"req-9\"}");
	assert_non_null(reply);
	harness_assert_error(reply, "unknown_op", 0);
	assert_string_equal(harness_str(reply, "id"), "req-9");
	json_decref(reply);
	reply = harness_call_line(c, "{\"id\":42,\"op\":\"frobnicate\"}");
	assert_non_null(reply);
	harness_assert_error(reply, "unknown_op", 0);
	assert_int_equal(json_integer_value(json_object_get(reply, "id")), 42);
	json_decref(reply);
	idem_close(c);
	harness_finish(b);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(topology_created_on_first_start),
		T(hello_answers_server_and_protocol),
		T(created_then_reused_with_identical_receipt),
		T(reply_lost_retry_is_reused),
		T(concurrent_identical_calls_create_once),
		T(normalized_variants_are_reused),
		T(same_id_other_content_conflicts),
		T(request_digest_checked),
		T(legacy_calls_create_each_time),
		T(reuse_after_sigterm_restart),
		T(reuse_after_kill9_restart),
		T(numbers_not_reused_after_sigterm),
		T(numbers_not_reused_after_kill9),
		T(numbers_not_reused_after_sigterm_with_legacy),
		T(numbers_not_reused_after_kill9_with_legacy),
		T(numbers_not_reused_after_files_left),
		T(numbers_used_in_done_skipped),
		T(numbers_used_in_history_skipped),
		T(same_name_taken_in_active_after_start),
		T(number_used_in_inbox_after_start),
		T(same_name_taken_in_active_unheard),
		T(moved_tasks_still_found_after_restart),
		T(second_broker_on_root_refused),
		T(inflight_wait_zero_answers_in_progress),
		T(hangup_in_flight_then_retry_reused),
		T(sigterm_in_flight_finishes_the_call),
		T(preallocated_name_taken_moves_on),
		T(preallocated_name_taken_in_active_moves_on),
		T(preallocated_name_taken_in_new_stage_moves_on),
		T(preallocated_name_taken_in_history_moves_on),
		T(bad_json_keeps_connection),
		T(unknown_op_echoes_id),
	};

	if (sodium_init() < 0)
		return 1;
	return harness_exit_status(FILTER_RUN(tests));
}
