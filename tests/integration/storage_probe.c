/* SPDX-License-Identifier: ISC */
/*
 * storage_probe.c: the helpers the storage-fault tests share
 * (storage_probe.h).  Every check fails the running cmocka test.
 */
#include <sys/types.h>

#include <dirent.h>
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

#include "integration/storage_probe.h"

enum probe_op {
	PROBE_HELLO,
	PROBE_STATS,
	PROBE_GET,
	PROBE_DIAGNOSE,
	PROBE_REUSED,
	PROBE_WRITE,
	PROBE_HELLO_AGAIN,
	PROBE_COUNT
};

static const char *
error_code(json_t *reply)
{
	json_t	*error = json_object_get(reply, "error");

	return json_is_object(error) ? json_string_value(json_object_get(error,
	    "code")) : NULL;
}

void
assert_storage_unavailable(json_t *reply)
{
	harness_assert_bool(reply, "ok", 0);
	harness_assert_bool(reply, "action_taken", 0);
	assert_string_equal(error_code(reply), "storage_unavailable");
	harness_assert_bool(json_object_get(reply, "error"), "retryable", 1);
	assert_null(json_object_get(reply, "receipt"));
}

/* Entries of dir (relative to the root) named prefix...suffix. */
int
count_named(const struct broker *b, const char *dir, const char *prefix,
    const char *suffix)
{
	char		 path[1024];
	DIR		*d;
	struct dirent	*e;
	size_t		 length, suffix_length = strlen(suffix);
	int		 n = 0;

	snprintf(path, sizeof path, "%s/%s", b->root, dir);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		length = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
		    length >= suffix_length &&
		    strcmp(e->d_name + length - suffix_length, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* TASK files in the inbox whose front matter names submission id. */
int
count_tasks_of(const struct broker *b, const char *id)
{
	char		 path[1024], rel[1024], line[300];
	DIR		*d;
	struct dirent	*e;
	char		*data;
	int		 n = 0;

	snprintf(line, sizeof line, "\nclient_submission_id: \"%s\"\n", id);
	snprintf(path, sizeof path, "%s/_lifecycle/inbox", b->root);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "TASK-", 5) != 0)
			continue;
		snprintf(rel, sizeof rel, "_lifecycle/inbox/%s", e->d_name);
		data = harness_read(b, rel);
		assert_non_null(data);
		if (strstr(data, line) != NULL)
			n++;
		free(data);
	}
	closedir(d);
	return n;
}

/* The receipt's file is in place and its bytes are the ones recorded. */
void
assert_receipt_file(const struct broker *b, json_t *reply)
{
	unsigned char	 digest[crypto_hash_sha256_BYTES];
	char		 hex[crypto_hash_sha256_BYTES * 2 + 1];
	char		*data;

	data = harness_read(b, harness_receipt_str(reply, "task_path"));
	assert_non_null(data);
	crypto_hash_sha256(digest, (const unsigned char *)data, strlen(data));
	sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
	free(data);
	assert_string_equal(hex, harness_receipt_str(reply, "file_digest"));
}

char *
receipt_text(json_t *reply)
{
	char	*text = harness_receipt_text(reply);

	assert_non_null(text);
	return text;
}

/* A retry must answer reused with exactly this receipt. */
void
assert_reused_as(struct broker *b, const char *id, const char *subject,
    const char *receipt)
{
	json_t	*reply;
	char	*text;

	reply = harness_submit(b, id, subject);
	harness_assert_outcome(reply, "reused", 0, 1, 0);
	text = receipt_text(reply);
	assert_string_equal(text, receipt);
	free(text);
	json_decref(reply);
}

static int
pid_compare(const void *a, const void *b)
{
	pid_t	x = *(const pid_t *)a, y = *(const pid_t *)b;

	return x < y ? -1 : x > y;
}

/* The worker pids, sorted; at least one. */
int
workers_now(struct broker *b, pid_t pids[TEST_MAX_WORKERS])
{
	int	n = harness_workers(b, pids, TEST_MAX_WORKERS);

	if (n < 1)
		fail_msg("no worker of %ld found in /proc", (long)b->pid);
	qsort(pids, (size_t)n, sizeof *pids, pid_compare);
	return n;
}

/* No worker was restarted: the same pids, and stats counts none. */
void
assert_same_workers(struct broker *b, const pid_t *before, int n)
{
	pid_t	now[TEST_MAX_WORKERS];
	json_t	*stats;
	int	i;

	if (workers_now(b, now) != n)
		fail_msg("%d workers before the fault, %d now", n,
		    workers_now(b, now));
	for (i = 0; i < n; i++) {
		if (now[i] != before[i])
			fail_msg("worker pid %ld is gone, %ld is new: a worker "
			    "was restarted", (long)before[i], (long)now[i]);
	}
	stats = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(stats,
	    "worker_restarts")), 0);
	json_decref(stats);
}

static char *
probe_line(enum probe_op op, int c, const char *committed_id,
    const char *committed_subject, const char *prefix)
{
	json_t	*request = NULL;
	char	 id[64], *line;

	switch (op) {
	case PROBE_HELLO:
	case PROBE_HELLO_AGAIN:
		request = json_pack("{s:s}", "op", "hello");
		break;
	case PROBE_STATS:
		request = json_pack("{s:s}", "op", "stats");
		break;
	case PROBE_GET:
		request = json_pack("{s:s, s:s}", "op", "get_submission",
		    "client_submission_id", committed_id);
		break;
	case PROBE_DIAGNOSE:
		request = json_pack("{s:s}", "op", "diagnose");
		break;
	case PROBE_REUSED:
		request = harness_write_task(committed_id, committed_subject);
		break;
	case PROBE_WRITE:
		snprintf(id, sizeof id, "%s/%d", prefix, c);
		request = harness_write_task(id, id);
		break;
	case PROBE_COUNT:
		break;
	}
	assert_non_null(request);
	json_object_set_new(request, "id", json_integer(c * 100 + op));
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	assert_non_null(line);
	return line;
}

/*
 * While a storage fault holds: TEST_CONNECTIONS connections each send,
 * all at once and before reading anything, hello, stats, get_submission
 * and a retry of a committed id, diagnose, a write of a new id
 * (prefix/<connection>) and hello again.  Each request gets exactly one
 * reply, in order (the ids say so), and a reset or a close is a
 * failure; afterwards each connection still answers.  What needs no new
 * durable write is answered from the table; the new write is refused
 * storage_unavailable, retryable (writes_fail), all within
 * --inflight-wait-ms.
 */
void
assert_served_during_fault(struct broker *b, const char *committed_id,
    const char *committed_subject, const char *receipt, const char *prefix,
    int writes_fail)
{
	int		 fds[TEST_CONNECTIONS], c, op;
	int64_t		 started, took;
	json_t		*reply, *sub;
	char		*line, *text;

	for (c = 0; c < TEST_CONNECTIONS; c++) {
		fds[c] = harness_raw_connect(b);
		assert_int_not_equal(fds[c], -1);
	}
	started = harness_now_ms();
	for (c = 0; c < TEST_CONNECTIONS; c++) {
		for (op = 0; op < PROBE_COUNT; op++) {
			line = probe_line(op, c, committed_id,
			    committed_subject, prefix);
			assert_int_equal(harness_raw_send(fds[c], line), 0);
			free(line);
		}
	}
	for (c = 0; c < TEST_CONNECTIONS; c++) {
		for (op = 0; op < PROBE_COUNT; op++) {
			if ((line = harness_raw_read_line(fds[c])) == NULL)
				fail_msg("connection %d: no reply to request "
				    "%d (closed or reset) during the fault",
				    c, op);
			reply = json_loads(line, 0, NULL);
			free(line);
			assert_non_null(reply);
			assert_int_equal(json_integer_value(json_object_get(
			    reply, "id")), c * 100 + op);
			switch (op) {
			case PROBE_HELLO:
			case PROBE_HELLO_AGAIN:
				harness_assert_bool(reply, "ok", 1);
				assert_string_equal(harness_str(reply,
				    "server"), "idemd");
				break;
			case PROBE_STATS:
			case PROBE_DIAGNOSE:
				harness_assert_bool(reply, "ok", 1);
				break;
			case PROBE_GET:
				harness_assert_bool(reply, "ok", 1);
				harness_assert_bool(reply, "found", 1);
				sub = json_object_get(reply, "submission");
				assert_string_equal(harness_str(sub, "state"),
				    "committed");
				break;
			case PROBE_REUSED:
				harness_assert_outcome(reply, "reused", 0, 1,
				    0);
				text = receipt_text(reply);
				assert_string_equal(text, receipt);
				free(text);
				break;
			case PROBE_WRITE:
				if (writes_fail)
					assert_storage_unavailable(reply);
				else
					harness_assert_bool(reply, "ok", 1);
				break;
			}
			json_decref(reply);
		}
	}
	took = harness_now_ms() - started;
	if (took > TEST_INFLIGHT_WAIT_MS)
		fail_msg("the replies took %lld ms, past --inflight-wait-ms "
		    "(%d)", (long long)took, TEST_INFLIGHT_WAIT_MS);
	/* Nothing more came, and the connection is still served. */
	for (c = 0; c < TEST_CONNECTIONS; c++) {
		assert_int_equal(harness_raw_send(fds[c],
		    "{\"op\":\"hello\",\"id\":999}"), 0);
		line = harness_raw_read_line(fds[c]);
		assert_non_null(line);
		reply = json_loads(line, 0, NULL);
		free(line);
		assert_non_null(reply);
		assert_int_equal(json_integer_value(json_object_get(reply,
		    "id")), 999);
		json_decref(reply);
		close(fds[c]);
	}
}
