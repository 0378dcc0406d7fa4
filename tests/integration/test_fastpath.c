/* SPDX-License-Identifier: ISC */
/*
 * test_fastpath.c: retries answered from the stored reply (fastpath.c)
 * are byte for byte what the full parse answers, the id echoed as sent;
 * every doubt takes the full parse; after a restart the first retry
 * takes the full path and the next ones the fast one again.
 * stats' reused_fast tells which path answered.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "harness.h"

/* How long an awaited event may take on a loaded machine. */
#define TEST_EVENT_TIMEOUT_MS	20000

#define TASK_MEMBER "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\"," \
	"\"subject\":\"fast\",\"body\":\"Steps:\\n1. retry\\n\"}"

/* write_task for sub with id_text (raw JSON, NULL: no id), in key order. */
static char *
line_of(const char *sub, const char *id_text)
{
	char	*line;

	if (asprintf(&line, "{\"op\":\"write_task\",%s%s%s"
	    "\"client_submission_id\":\"%s\"," TASK_MEMBER "}",
	    id_text != NULL ? "\"id\":" : "", id_text != NULL ? id_text : "",
	    id_text != NULL ? "," : "", sub) == -1)
		fail_msg("asprintf");
	return line;
}

/* The same request with the task first: the fast path never knows it. */
static char *
reordered_line_of(const char *sub, const char *id_text)
{
	char	*line;

	if (asprintf(&line, "{" TASK_MEMBER ",\"op\":\"write_task\",%s%s%s"
	    "\"client_submission_id\":\"%s\"}",
	    id_text != NULL ? "\"id\":" : "", id_text != NULL ? id_text : "",
	    id_text != NULL ? "," : "", sub) == -1)
		fail_msg("asprintf");
	return line;
}

static void
assert_disposition(const char *text, const char *want)
{
	json_t	*reply = json_loads(text, 0, NULL);

	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), want);
	json_decref(reply);
}

/* Create sub: the creation stores the reply a retry gets. */
static void
create(struct broker *b, int fd, const char *sub)
{
	char	*line = line_of(sub, "1"), *reply;

	reply = harness_raw_exchange(fd, line);
	assert_disposition(reply, "created");
	free(reply);
	free(line);
}

/* Ids the fast path echoes itself. */
static const char *const plain_ids[] = {
	NULL, "0", "7", "-12", "123456789012345678", "-123456789012345678",
	"null", "true", "false", "\"\"", "\"x\"",
	"\"with spaces / a slash, {braces} and 'quotes'\"", "\"~!@#$%^&*()\"",
	NULL
};
#define PLAIN_ID_COUNT	13

/* Ids only the full parse may echo (jansson re-serialises them). */
static const char *const odd_ids[] = {
	"-0", "1.5", "1e3", "1234567890123456789", "\"\\u0041\"",
	"\"\\/\"", "\"caf\xc3\xa9\"", "\"tab\\there\"", NULL
};

static void
fast_reply_is_byte_identical(void **state)
{
	struct broker	*b = *state;
	char		*line, *fast, *full;
	json_int_t	 fast_before;
	int		 fd, i;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	fd = harness_raw_connect(b);
	create(b, fd, "fp-identical");
	for (i = 0; i < PLAIN_ID_COUNT; i++) {
		/* Full path first: it stores the reply if none is. */
		line = reordered_line_of("fp-identical", plain_ids[i]);
		fast_before = harness_stat(b, "reused_fast");
		full = harness_raw_exchange(fd, line);
		assert_int_equal(harness_stat(b, "reused_fast"), fast_before);
		free(line);
		line = line_of("fp-identical", plain_ids[i]);
		fast = harness_raw_exchange(fd, line);
		assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
		assert_disposition(fast, "reused");
		/* The same bytes, the id echoed exactly. */
		assert_string_equal(fast, full);
		free(line);
		free(fast);
		free(full);
	}
	/* Whitespace between members is not fingerprinted: fast too. */
	full = harness_raw_exchange(fd, " { \"op\":\"write_task\" ,\t\"id\" : 5 ,\r"
	    "\"client_submission_id\":\"fp-identical\"," TASK_MEMBER " } ");
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 2);
	line = line_of("fp-identical", "5");
	fast = harness_raw_exchange(fd, line);
	assert_string_equal(fast, full);
	free(line);
	free(fast);
	free(full);
	close(fd);
	harness_finish(b);
}

static void
odd_ids_take_the_full_parse(void **state)
{
	struct broker	*b = *state;
	char		*line, *text;
	json_t		*reply, *sent;
	json_int_t	 fast_before;
	int		 fd, i;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	fd = harness_raw_connect(b);
	create(b, fd, "fp-odd");
	/* Stored by the creation: a plain retry is fast. */
	line = line_of("fp-odd", "3");
	fast_before = harness_stat(b, "reused_fast");
	free(harness_raw_exchange(fd, line));
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
	free(line);
	for (i = 0; odd_ids[i] != NULL; i++) {
		line = line_of("fp-odd", odd_ids[i]);
		fast_before = harness_stat(b, "reused_fast");
		text = harness_raw_exchange(fd, line);
		assert_int_equal(harness_stat(b, "reused_fast"), fast_before);
		reply = json_loads(text, 0, NULL);
		sent = json_loads(odd_ids[i], JSON_DECODE_ANY, NULL);
		assert_non_null(reply);
		assert_non_null(sent);
		assert_string_equal(harness_str(reply, "disposition"), "reused");
		assert_true(json_equal(json_object_get(reply, "id"), sent));
		json_decref(sent);
		json_decref(reply);
		free(text);
		free(line);
	}
	close(fd);
	harness_finish(b);
}

/* Lines that look like a stored retry but are not: all in full. */
static void
doubts_take_the_full_parse(void **state)
{
	static const struct {
		const char	*line;
		const char	*disposition;	/* NULL: an error, code */
		const char	*code;
	} cases[] = {
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"meta\":{\"trace\":\"a\"}}", "reused", NULL },
		{ "{\"op\": \"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER "}", "reused", NULL },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"extra\":1}", NULL, "invalid_request" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"id\":1,\"id\":2}", NULL, "invalid_json" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER "}x", NULL, "invalid_json" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"meta\":[]}", NULL, "invalid_request" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
		  "\"subject\":\"other\",\"body\":\"b\"}}", NULL, "conflict" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"id\":{}}", NULL, "invalid_request" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"digest_schema\":\"write-task-v1\"}",
		  "reused", NULL },
		/*
		 * A NUL anywhere is refused (SPEC.md), never answered as the
		 * stored retry: in the id (which is not fingerprinted, and
		 * an escape sends it to the full parse), in meta (never
		 * fast), in the task (no stored fingerprint holds one).
		 */
		{ "{\"op\":\"write_task\",\"id\":\"x\\u0000\","
		  "\"client_submission_id\":\"fp-doubt\"," TASK_MEMBER "}", NULL,
		  "invalid_request" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  TASK_MEMBER ",\"meta\":{\"trace\":\"\\u0000\"}}", NULL,
		  "invalid_request" },
		{ "{\"op\":\"write_task\",\"client_submission_id\":\"fp-doubt\","
		  "\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\","
		  "\"subject\":\"fast\",\"body\":\"Steps:\\n1. retry\\n\\u0000\"}}",
		  NULL, "invalid_request" },
	};
	struct broker	*b = *state;
	char		*text;
	json_t		*reply;
	json_int_t	 fast_before;
	size_t		 i;
	int		 fd;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	fd = harness_raw_connect(b);
	create(b, fd, "fp-doubt");
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fast_before = harness_stat(b, "reused_fast");
		text = harness_raw_exchange(fd, cases[i].line);
		assert_int_equal(harness_stat(b, "reused_fast"), fast_before);
		reply = json_loads(text, 0, NULL);
		assert_non_null(reply);
		if (cases[i].disposition != NULL)
			assert_string_equal(harness_str(reply, "disposition"),
			    cases[i].disposition);
		else
			assert_string_equal(harness_str(json_object_get(reply,
			    "error"), "code"), cases[i].code);
		json_decref(reply);
		free(text);
	}
	/* Still one TASK file. */
	assert_int_equal(harness_count_tasks(b), 1);
	close(fd);
	harness_finish(b);
}

/* A task moved by FCoP tools: current_path, from the full path. */
static void
moved_task_takes_the_full_parse(void **state)
{
	struct broker	*b = *state;
	char		*line, *text, from[1024], to[1024];
	json_t		*reply;
	json_int_t	 fast_before;
	int		 fd;

	assert_int_equal(harness_start(b, NULL, NULL), 0);
	fd = harness_raw_connect(b);
	line = line_of("fp-moved", "1");
	text = harness_raw_exchange(fd, line);
	reply = json_loads(text, 0, NULL);
	assert_non_null(reply);
	snprintf(from, sizeof from, "%s/%s", b->root,
	    harness_receipt_str(reply, "task_path"));
	snprintf(to, sizeof to, "%s/_lifecycle/done/%s.md", b->root,
	    harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	free(text);
	assert_int_equal(rename(from, to), 0);
	fast_before = harness_stat(b, "reused_fast");
	text = harness_raw_exchange(fd, line);
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before);
	reply = json_loads(text, 0, NULL);
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	assert_non_null(strstr(harness_str(reply, "current_path"),
	    "_lifecycle/done/"));
	json_decref(reply);
	free(text);
	/* Back where the receipt says: fast again. */
	assert_int_equal(rename(to, from), 0);
	free(harness_raw_exchange(fd, line));
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
	free(line);
	close(fd);
	harness_finish(b);
}

/* A retry of sub, reused: its current_path, or NULL (malloc'd). */
static char *
retry_current_path(int fd, const char *line)
{
	char	*text, *path = NULL;
	json_t	*reply;

	text = harness_raw_exchange(fd, line);
	reply = json_loads(text, 0, NULL);
	assert_non_null(reply);
	assert_string_equal(harness_str(reply, "disposition"), "reused");
	if (json_object_get(reply, "current_path") != NULL)
		path = strdup(harness_str(reply, "current_path"));
	json_decref(reply);
	free(text);
	return path;
}

/*
 * A worker answers "is the task still in the inbox" from the inbox it
 * holds (inboxview.c) only while _lifecycle/inbox names that directory:
 * the inbox moved aside and replaced, then replaced by a symlink to
 * where it went, the retry says where the walk finds the task; put
 * back, the retry is fast and without current_path again.
 */
static void
replaced_inbox_is_seen(void **state)
{
	static const char *const args[] = { "--log-level", "debug", NULL };
	struct broker	*b = *state;
	char		*line, *text, *moved, inbox[1024], parked[1024];
	char		 want[1024];
	json_t		*reply;
	json_int_t	 fast_before;
	int		 fd;

	assert_int_equal(harness_start(b, args, NULL), 0);
	snprintf(inbox, sizeof inbox, "%s/_lifecycle/inbox", b->root);
	snprintf(parked, sizeof parked, "%s/_lifecycle/parked", b->root);
	fd = harness_raw_connect(b);
	line = line_of("fp-inbox-swapped", "1");
	text = harness_raw_exchange(fd, line);
	reply = json_loads(text, 0, NULL);
	assert_non_null(reply);
	snprintf(want, sizeof want, "_lifecycle/parked/%s.md",
	    harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	free(text);
	assert_null(retry_current_path(fd, line));
	harness_wait_log(b, "retries look for their task in the held inbox",
	    1, TEST_EVENT_TIMEOUT_MS);
	fast_before = harness_stat(b, "reused_fast");
	assert_null(retry_current_path(fd, line));
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
	/*
	 * Files made and moved in the inbox do not disarm it (the log line
	 * is written before the reply, so it would be there by now).
	 */
	create(b, fd, "fp-inbox-other");
	assert_null(retry_current_path(fd, line));
	assert_int_equal(harness_log_count(b, "the inbox is compared again"),
	    0);

	/* Moved aside, a new empty inbox in its place. */
	assert_int_equal(rename(inbox, parked), 0);
	assert_int_equal(mkdir(inbox, 0755), 0);
	moved = retry_current_path(fd, line);
	assert_non_null(moved);
	assert_string_equal(moved, want);
	free(moved);
	moved = retry_current_path(fd, line);
	assert_non_null(moved);
	assert_string_equal(moved, want);
	free(moved);
	harness_wait_log(b, "is not the inbox held since start-up", 1,
	    TEST_EVENT_TIMEOUT_MS);

	/* A symlink to it: not followed, by the view or the walk. */
	assert_int_equal(rmdir(inbox), 0);
	assert_int_equal(symlink("parked", inbox), 0);
	moved = retry_current_path(fd, line);
	assert_non_null(moved);
	assert_string_equal(moved, want);
	free(moved);

	/* Put back: the view is armed again, the retry fast. */
	assert_int_equal(unlink(inbox), 0);
	assert_int_equal(rename(parked, inbox), 0);
	fast_before = harness_stat(b, "reused_fast");
	assert_null(retry_current_path(fd, line));
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
	harness_wait_log(b, "retries look for their task in the held inbox",
	    2, TEST_EVENT_TIMEOUT_MS);
	assert_int_equal(harness_count_tasks(b), 2);
	free(line);
	close(fd);
	harness_finish(b);
}

/*
 * Where the inbox's file system is not known to be local (fslocal.c; the
 * stand-in IDEM_CRASH_WATCH=remote:_lifecycle/inbox counts it remote
 * after its real statfs), another host may replace it unseen: the view
 * stays off, every retry walks (still fast: reused_fast counts it), and
 * a task moved away is found where it went.  Fails if the view trusts a
 * file system it has no list entry against (inboxview.c's deny-list).
 */
static void
inbox_off_local_fs_not_trusted(void **state)
{
	static const char *const args[] = { "--log-level", "debug", NULL };
	static const char *const env[] = {
	    "IDEM_CRASH_WATCH=remote:" "_lifecycle/inbox", NULL };
	struct broker	*b = *state;
	char		*line, *text, *moved, from[1024], want[1024];
	/* The root, a slash and want: no truncation possible. */
	char		 to[sizeof b->root + 1 + sizeof want];
	json_t		*reply;
	json_int_t	 fast_before;
	int		 fd;

	harness_need_fault_injection(b);
	assert_int_equal(harness_start(b, args, env), 0);
	fd = harness_raw_connect(b);
	line = line_of("fp-inbox-remote", "1");
	text = harness_raw_exchange(fd, line);
	reply = json_loads(text, 0, NULL);
	assert_non_null(reply);
	snprintf(from, sizeof from, "%s/%s", b->root,
	    harness_receipt_str(reply, "task_path"));
	snprintf(want, sizeof want, "_lifecycle/active/%s.md",
	    harness_receipt_str(reply, "task_id"));
	json_decref(reply);
	free(text);
	assert_null(retry_current_path(fd, line));
	fast_before = harness_stat(b, "reused_fast");
	assert_null(retry_current_path(fd, line));
	assert_int_equal(harness_stat(b, "reused_fast"), fast_before + 1);
	/* Written before the reply, were the view armed. */
	assert_int_equal(harness_log_count(b,
	    "retries look for their task in the held inbox"), 0);

	snprintf(to, sizeof to, "%s/_lifecycle/active", b->root);
	assert_true(mkdir(to, 0755) == 0 || errno == EEXIST);
	snprintf(to, sizeof to, "%s/%s", b->root, want);
	assert_int_equal(rename(from, to), 0);
	moved = retry_current_path(fd, line);
	assert_non_null(moved);
	assert_string_equal(moved, want);
	free(moved);
	assert_int_equal(harness_log_count(b,
	    "retries look for their task in the held inbox"), 0);
	/* Every worker said why, at start-up. */
	harness_wait_log(b, "_lifecycle/inbox's file system (", 1,
	    TEST_EVENT_TIMEOUT_MS);
	free(line);
	close(fd);
	harness_finish(b);
}

/*
 * The store is memory only: after a restart (SIGTERM, or SIGKILL with
 * what replay finds) the first retry takes the full path and answers the
 * same bytes; it stores the reply and the next retry is fast again.
 */
static void
restart_checks(struct broker *b, int kill9, const char *const *args)
{
	char	*line, *before, *after;
	int	 fd;

	assert_int_equal(harness_start(b, args, NULL), 0);
	fd = harness_raw_connect(b);
	line = line_of(kill9 ? "fp-kill9" : "fp-restart", "\"r\"");
	free(harness_raw_exchange(fd, line));
	before = harness_raw_exchange(fd, line);
	assert_int_equal(harness_stat(b, "reused_fast"), 1);
	close(fd);
	if (kill9)
		harness_kill(b);
	else
		assert_int_equal(harness_stop(b), 0);
	assert_int_equal(harness_start(b, args, NULL), 0);
	fd = harness_raw_connect(b);
	after = harness_raw_exchange(fd, line);
	assert_int_equal(harness_stat(b, "reused_fast"), 0);
	assert_string_equal(after, before);
	free(after);
	after = harness_raw_exchange(fd, line);
	assert_int_equal(harness_stat(b, "reused_fast"), 1);
	assert_string_equal(after, before);
	assert_int_equal(harness_count_tasks(b), 1);
	free(after);
	free(before);
	free(line);
	close(fd);
	harness_finish(b);
}

static void
fast_again_after_sigterm_restart(void **state)
{
	restart_checks(*state, 0, NULL);
}

static void
fast_again_after_kill9_restart(void **state)
{
	restart_checks(*state, 1, NULL);
}

/* A checkpoint on every segment: replay starts from it. */
static void
fast_again_after_checkpoint_restart(void **state)
{
	static const char *const args[] = { "--segment-bytes", "4096", NULL };

	restart_checks(*state, 0, args);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(fast_reply_is_byte_identical),
		T(odd_ids_take_the_full_parse),
		T(doubts_take_the_full_parse),
		T(moved_task_takes_the_full_parse),
		T(replaced_inbox_is_seen),
		T(inbox_off_local_fs_not_trusted),
		T(fast_again_after_sigterm_restart),
		T(fast_again_after_kill9_restart),
		T(fast_again_after_checkpoint_restart),
	};

	return harness_exit_status(FILTER_RUN(tests));
}
