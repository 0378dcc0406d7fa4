/* SPDX-License-Identifier: ISC */
/*
 * test_history.c: the two tiers (SPEC.md, "History and retention";
 * doc/journal.md, "The index").  With a --capacity far below the
 * history, committed entries leave the table for the index and every
 * retry still answers reused with the first receipt byte for byte (read
 * from the reply line itself); a restart with a smaller capacity than
 * the history serves it all, every worker having mapped the index
 * ahead (stats index_warm_bytes); a kill while the index is written loses
 * nothing; compaction leaves tombstones that answer reused with
 * receipt_pruned:true and never execute again; a missing index is
 * rebuilt when the journal still holds it all and refused when it held
 * receipts nothing else does, and an index older than a checkpoint that
 * left receipts to it alone (restored from an older backup) is refused
 * too; the result arena and the fast path's
 * receipt store, far smaller than what they held, reuse their space and
 * every retry still answers the same; and an id compacted whose bytes
 * those rings no longer hold (a result the arena reused, a reply the
 * store overwrote and an entry evicted) answers its tombstone byte for
 * byte, in either order; idemctl verify compares the index's effects
 * with the checkpoint's and the journal's records, full entries and
 * tombstones, and names the one an index entry planted with other facts
 * disagrees with.  Issue 27's cache tier: a creation refused for its
 * number keeps every later checkpoint whole; ids of every length up to
 * the longest key are served after the table has cycled; a complete is
 * never stopped by its own claim; a full arena refuses a complete and a
 * resolve, typed and retryable, nothing committed, and both go through
 * once the index takes writes again; the least --result-bytes.  Every
 * test counts TASK files.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <lmdb.h>
#include <sodium.h>

#include "integration/filter.h"
#include "harness.h"
#include "store.h"

#define HISTORY_TASKS		60
#define HISTORY_EFFECTS		40
#define HISTORY_CAPACITY	"8"
/* Effects in flight at once before a restart with HISTORY_CAPACITY. */
#define HISTORY_CAPACITY_PEAK	12
/* A checkpoint runs in the background: table_full is retried meanwhile. */
#define HISTORY_FULL_RETRY_MS	2
#define HISTORY_FULL_MAX_RETRIES 5000
/* A fence's text ("<attempt>-<16 hex>") with room to spare. */
#define HISTORY_FENCE_BYTES	64

static const char *const small_args[] = { "--capacity", HISTORY_CAPACITY,
    NULL };
static const char *const smaller_args[] = { "--capacity", "4", NULL };
/*
 * The same table with segments of 4 KiB: a rotation and its checkpoint
 * every few records.  A table of 8 alone no longer makes checkpoints:
 * what it wants is an index pass (doc/journal.md, "Index passes"), and
 * the segments keep every record until a full one rotates.
 */
static const char *const small_rotating_args[] = { "--capacity",
    HISTORY_CAPACITY, "--segment-bytes", "4096", NULL };

struct history {
	char	receipts[HISTORY_TASKS][1024];
	char	effects[HISTORY_EFFECTS][1024];
	int	full_retries;
};

/*
 * One request line, its reply line (malloc'd).  The receipt is the last
 * member of a reply: what follows "receipt": is its exact bytes.
 */
static char *
call_line(struct broker *b, json_t *request)
{
	char	*line, *reply;
	int	 fd;

	assert_non_null(line = json_dumps(request, JSON_COMPACT));
	json_decref(request);
	assert_true((fd = harness_raw_connect(b)) >= 0);
	assert_int_equal(harness_raw_send(fd, line), 0);
	reply = harness_raw_read_line(fd);
	close(fd);
	free(line);
	assert_non_null(reply);
	return reply;
}

/* The receipt's bytes in a raw reply, into out (the tests keep many). */
static void
receipt_bytes(const char *reply, char *out, size_t size)
{
	char	*receipt = harness_receipt_bytes(reply);

	assert_true(strlen(receipt) < size);
	strcpy(out, receipt);
	free(receipt);
}

static int
is_table_full(const char *reply)
{
	return strstr(reply, "\"code\":\"table_full\"") != NULL;
}

/* A write_task, retried while the table is full (retryable by contract). */
static char *
write_task(struct broker *b, struct history *h, const char *id,
    const char *subject)
{
	struct timespec	 ts = { 0, HISTORY_FULL_RETRY_MS * 1000000L };
	char		*reply;
	int		 tries;

	for (tries = 0;; tries++) {
		reply = call_line(b, harness_write_task(id, subject));
		if (!is_table_full(reply))
			return reply;
		assert_non_null(strstr(reply, "\"retryable\":true"));
		assert_true(tries < HISTORY_FULL_MAX_RETRIES);
		free(reply);
		h->full_retries++;
		nanosleep(&ts, NULL);
	}
}

static json_t *
begin_request(int i, int other)
{
	char	id[32];

	snprintf(id, sizeof id, "fx-%d", i);
	return json_pack("{s:s, s:s, s:s, s:{s:i, s:s}}", "op", "effect_begin",
	    "client_submission_id", id, "effect_kind", "mail.send/v1",
	    "request", "n", i, "to", other ? "someone-else" : "ops@example");
}

static char *
effect_begin(struct broker *b, struct history *h, int i, int other)
{
	struct timespec	 ts = { 0, HISTORY_FULL_RETRY_MS * 1000000L };
	char		*reply;
	int		 tries;

	for (tries = 0;; tries++) {
		reply = call_line(b, begin_request(i, other));
		if (!is_table_full(reply))
			return reply;
		assert_true(tries < HISTORY_FULL_MAX_RETRIES);
		free(reply);
		h->full_retries++;
		nanosleep(&ts, NULL);
	}
}

/*
 * fx-0 .. fx-(n-1) each answered reused with its first receipt, byte for
 * byte: the receipts at first, stride bytes apart.
 */
static void
assert_all_reused(struct broker *b, struct history *h, const char *first,
    size_t stride, int n, const char *when)
{
	char	 got[8192], *reply;
	int	 i;

	for (i = 0; i < n; i++) {
		reply = effect_begin(b, h, i, 0);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("fx-%d%s: %s", i, when, reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, first + (size_t)i * stride);
		free(reply);
	}
}

/*
 * fx-i's result: its message id and status, and with pad > 0 that many
 * bytes of 'x' under "pad" (a result large enough to wrap a small arena).
 */
static json_t *
effect_result(int i, size_t pad)
{
	json_t	*r;
	char	*x;

	if (pad == 0)
		return json_pack("{s:i, s:s}", "message_id", i, "status",
		    "sent");
	assert_non_null(x = malloc(pad + 1));
	memset(x, 'x', pad);
	x[pad] = '\0';
	r = json_pack("{s:i, s:s, s:s}", "message_id", i, "status", "sent",
	    "pad", x);
	free(x);
	return r;
}

/* An effect_complete of fx-i (result stolen; NULL: none). */
static json_t *
complete_request(int i, const char *fence, const char *outcome,
    json_t *result)
{
	char	 id[32];
	json_t	*r;

	snprintf(id, sizeof id, "fx-%d", i);
	r = json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "effect_complete",
	    "client_submission_id", id, "effect_kind", "mail.send/v1",
	    "fence", fence, "outcome", outcome);
	if (result != NULL)
		json_object_set_new(r, "result", result);
	return r;
}

/*
 * A fault rule file to clear at the first table_full of a complete
 * (NULL: none): a test that keeps every result out of the index until
 * the arena has refused one knows the refusal path ran.
 */
static const char *clear_rule_on_full;

static char *
complete_effect(struct broker *b, int i, const char *fence, size_t pad,
    int *retries)
{
	struct timespec	 ts = { 0, HISTORY_FULL_RETRY_MS * 1000000L };
	char		*reply;
	int		 tries;

	for (tries = 0;; tries++) {
		reply = call_line(b, complete_request(i, fence, "applied",
		    effect_result(i, pad)));
		if (!is_table_full(reply))
			return reply;
		if (strstr(reply, "\"retryable\":true") == NULL)
			fail_msg("complete fx-%d: %s", i, reply);
		if (clear_rule_on_full != NULL) {
			harness_fault_rule(clear_rule_on_full, "");
			clear_rule_on_full = NULL;
		}
		assert_true(tries < HISTORY_FULL_MAX_RETRIES);
		free(reply);
		(*retries)++;
		nanosleep(&ts, NULL);
	}
}

/* fx-i begun: it must proceed; its fence in fence. */
static void
proceed_effect(struct broker *b, struct history *h, int i,
    char fence[HISTORY_FENCE_BYTES])
{
	char	*reply;
	json_t	*r;

	reply = effect_begin(b, h, i, 0);
	assert_non_null(r = json_loads(reply, 0, NULL));
	if (strcmp(harness_str(r, "disposition"), "proceed") != 0)
		fail_msg("fx-%d: %s", i, reply);
	snprintf(fence, HISTORY_FENCE_BYTES, "%s", harness_str(r, "fence"));
	json_decref(r);
	free(reply);
}

/*
 * fx-i begun (it must proceed) and completed with a result of pad extra
 * bytes: its committed receipt's bytes in out, its fence in fence (if
 * not NULL).  A retryable table_full of the complete is retried and
 * counted in *retries.
 */
static void
commit_effect(struct broker *b, struct history *h, int i, size_t pad,
    char *out, size_t size, char *fence, int *retries)
{
	char	 mine[HISTORY_FENCE_BYTES], *reply;

	proceed_effect(b, h, i, mine);
	if (fence != NULL)
		memcpy(fence, mine, HISTORY_FENCE_BYTES);
	reply = complete_effect(b, i, mine, pad, retries);
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("complete fx-%d: %s", i, reply);
	receipt_bytes(reply, out, size);
	free(reply);
}

/*
 * fx-i begun (it must proceed) and completed not_applied: released, the
 * next begin proceeds with the next attempt.  The released fence in
 * fence: stale from then on.
 */
static void
release_effect(struct broker *b, struct history *h, int i,
    char fence[HISTORY_FENCE_BYTES])
{
	char	*reply;

	proceed_effect(b, h, i, fence);
	reply = call_line(b, complete_request(i, fence, "not_applied", NULL));
	if (strstr(reply, "\"state\":\"released\"") == NULL)
		fail_msg("release fx-%d: %s", i, reply);
	free(reply);
}

static void
create_history(struct broker *b, struct history *h)
{
	char		 id[32], subject[64], *reply;
	int		 i, retries = 0;

	for (i = 0; i < HISTORY_TASKS; i++) {
		snprintf(id, sizeof id, "hist-%d", i);
		snprintf(subject, sizeof subject, "history %d", i);
		reply = write_task(b, h, id, subject);
		if (strstr(reply, "\"disposition\":\"created\"") == NULL)
			fail_msg("%s: %s", id, reply);
		receipt_bytes(reply, h->receipts[i], sizeof h->receipts[i]);
		free(reply);
	}
	for (i = 0; i < HISTORY_EFFECTS; i++)
		commit_effect(b, h, i, 0, h->effects[i], sizeof h->effects[i],
		    NULL, &retries);
	/* The default arena holds them all: no complete waits here. */
	assert_int_equal(retries, 0);
}

/* Every id answers reused with its first receipt, byte for byte. */
static void
check_history_files(struct broker *b, struct history *h, int files)
{
	char	 id[32], subject[64], got[1024], *reply;
	int	 i;

	for (i = 0; i < HISTORY_TASKS; i++) {
		snprintf(id, sizeof id, "hist-%d", i);
		snprintf(subject, sizeof subject, "history %d", i);
		reply = write_task(b, h, id, subject);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s: %s", id, reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, h->receipts[i]);
		free(reply);
	}
	for (i = 0; i < HISTORY_EFFECTS; i++) {
		reply = effect_begin(b, h, i, 0);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("fx-%d: %s", i, reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, h->effects[i]);
		free(reply);
	}
	assert_int_equal(harness_count_tasks(b), files);
}

static void
check_history(struct broker *b, struct history *h)
{
	check_history_files(b, h, HISTORY_TASKS);
}

/* The broker's log (malloc'd). */
static char *
read_log(struct broker *b)
{
	FILE	*f;
	char	*data;
	long	 n;

	if ((f = fopen(b->log, "r")) == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	data = calloc(1, (size_t)n + 1);
	if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
		free(data);
		data = NULL;
	}
	fclose(f);
	return data;
}

/*
 * The counts of the last checkpoint the log names: receipts it gave the
 * index, records it wrote.  0 if none ran.
 */
static int
last_checkpoint(struct broker *b, unsigned long long *indexed,
    unsigned long long *written)
{
	char		*log, *p, *last = NULL;

	assert_non_null(log = read_log(b));
	for (p = log; (p = strstr(p, "checkpoint checkpoint-")) != NULL; p++)
		last = p;
	if (last == NULL) {
		free(log);
		return 0;
	}
	assert_int_equal(sscanf(strchr(last, ':'), ": %llu new in the index, "
	    "%llu submissions", indexed, written), 2);
	free(log);
	return 1;
}

/*
 * A table of 8 for 100 committed ids: most answers come from the index
 * (cold hits), byte for byte, and a second digest under a cold id is
 * still a conflict.  Segments of 4 KiB, so that checkpoints run too.
 */
static void
test_small_capacity_evicts_and_answers_cold(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	unsigned long long indexed, written;
	char		*reply;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, small_rotating_args, NULL), 0);
	create_history(b, &h);
	assert_true(harness_stat(b, "table_entries") <= 8);
	assert_true(harness_stat(b, "table_evictions") > 0);
	check_history(b, &h);
	assert_int_equal(harness_stat(b, "history_entries"),
	    HISTORY_TASKS + HISTORY_EFFECTS);
	assert_true(harness_stat(b, "index_entries") >= HISTORY_TASKS +
	    HISTORY_EFFECTS - 8);
	assert_true(harness_stat(b, "index_bytes") > 0);
	/*
	 * The index outgrew the table: a checkpoint copies only what the
	 * index lacks (the receipts it gives it, and at most the one
	 * submission this client had in flight), not the whole table.
	 */
	assert_true(last_checkpoint(b, &indexed, &written));
	if (written > indexed + 1)
		fail_msg("the last checkpoint wrote %llu records for %llu "
		    "new in the index", written, indexed);
	/* A cold id under another request: conflict, nothing created. */
	reply = write_task(b, &h, "hist-0", "another subject");
	assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
	free(reply);
	reply = effect_begin(b, &h, 0, 1);
	assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
	free(reply);
	/* A cold get_submission finds it committed with its receipt. */
	reply = call_line(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", "hist-1"));
	assert_non_null(strstr(reply, "\"found\":true"));
	assert_non_null(strstr(reply, h.receipts[1]));
	free(reply);
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS);
	print_message("table_full retried %d times while checkpoints ran\n",
	    h.full_retries);
	harness_finish(b);
}

/*
 * Every worker maps the index ahead of its lookups (history.c): wait
 * until the workers together report the index's bytes once each.
 * Polled: the warm-up thread signals nothing else.
 */
#define HISTORY_WARM_POLL_MS	5
#define HISTORY_WARM_MAX_POLLS	2000

static void
await_index_warm(struct broker *b)
{
	struct timespec	ts = { 0, HISTORY_WARM_POLL_MS * 1000000L };
	long long	want, got = 0;
	int		polls;

	want = harness_stat(b, "workers") * harness_stat(b, "index_bytes");
	assert_true(want > 0);
	for (polls = 0; polls < HISTORY_WARM_MAX_POLLS; polls++) {
		if ((got = harness_stat(b, "index_warm_bytes")) >= want)
			break;
		nanosleep(&ts, NULL);
	}
	if (got != want)
		fail_msg("index_warm_bytes %lld, not workers x index_bytes "
		    "%lld", got, want);
}

/*
 * The history outgrows a restart's --capacity: it serves it all, and
 * the workers warm their maps of the index first.
 */
static void
test_restart_with_smaller_capacity(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	char		*reply;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	create_history(b, &h);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(harness_start(b, smaller_args, NULL), 0);
	assert_true(harness_stat(b, "table_entries") <= 4);
	await_index_warm(b);
	check_history(b, &h);
	/* And new ids still get made. */
	reply = write_task(b, &h, "after-restart", "new");
	assert_non_null(strstr(reply, "\"disposition\":\"created\""));
	free(reply);
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS + 1);
	harness_kill(b);
	/* Killed, not stopped: the journal after the checkpoint replays. */
	assert_int_equal(harness_start(b, smaller_args, NULL), 0);
	check_history_files(b, &h, HISTORY_TASKS + 1);
	harness_finish(b);
}

/*
 * Effects begun together and completed after, then a restart with a
 * capacity smaller than were ever in flight at once but not smaller
 * than are in flight at the end (none): the journal replays, and every
 * effect answers reused with its receipt.  Found by the model (seed
 * 573113680): the replay counted the first records that did not fit and
 * refused the start though their commits came later in the journal.
 */
static void
test_restart_below_the_journals_peak(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	static const char *const wide_args[] = { "--capacity", "64", NULL };
	char		 fences[HISTORY_CAPACITY_PEAK][HISTORY_FENCE_BYTES];
	char		*reply;
	int		 i, retries = 0;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, wide_args, NULL), 0);
	for (i = 0; i < HISTORY_CAPACITY_PEAK; i++)
		proceed_effect(b, &h, i, fences[i]);
	for (i = 0; i < HISTORY_CAPACITY_PEAK; i++) {
		reply = complete_effect(b, i, fences[i], 0, &retries);
		if (strstr(reply, "\"state\":\"committed\"") == NULL)
			fail_msg("complete fx-%d: %s", i, reply);
		receipt_bytes(reply, h.effects[i], sizeof h.effects[i]);
		free(reply);
	}
	/* 64 slots: no checkpoint ran, the journal keeps every record. */
	assert_int_equal(harness_stat(b, "index_entries"), 0);
	assert_int_equal(harness_stop(b), 0);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	assert_all_reused(b, &h, h.effects[0], sizeof h.effects[0],
	    HISTORY_CAPACITY_PEAK, " after the restart");
	harness_finish(b);
}

/*
 * The broker dies in the middle of giving committed entries to the
 * index (IDEM_CRASH_AT=during_index_write, the checkpoint thread's):
 * the index is as its last commit left it, the checkpoint was never put
 * in place, the segments are all there, and every acknowledged receipt
 * comes back byte for byte.
 */
static void
test_kill_during_index_write(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	static const char *const env[] = {
	    "IDEM_CRASH_AT=during_index_write", NULL };
	char		 id[32], subject[64], got[1024], *reply;
	int		 i, answered = 0;

#ifndef IDEM_FAULT_INJECTION
	harness_skip("built without --enable-fault-injection: no crash "
	    "points");
	return;
#endif
	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, small_args, env), 0);
	for (i = 0; i < HISTORY_TASKS; i++) {
		snprintf(id, sizeof id, "hist-%d", i);
		snprintf(subject, sizeof subject, "history %d", i);
		if ((reply = harness_raw_call_or_null(b, harness_write_task(id,
		    subject))) == NULL)
			break;	/* the broker died under this request */
		if (is_table_full(reply)) {
			/* The checkpoint that frees room is the one that dies. */
			free(reply);
			i--;
			if (kill(b->pid, 0) != 0)
				break;
			continue;
		}
		if (strstr(reply, "\"disposition\":\"created\"") == NULL) {
			free(reply);
			break;
		}
		receipt_bytes(reply, h.receipts[i], sizeof h.receipts[i]);
		answered = i + 1;
		free(reply);
	}
	harness_wait_dead(b);
	/*
	 * A checkpoint is due once capacity / 2 + 1 (5) are committed; the
	 * 5th's reply races the checkpoint that dies (its commit is in the
	 * table before it is durable and answered), so 4 at least.
	 */
	assert_true(answered >= 4);
	assert_true(answered < HISTORY_TASKS);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	for (i = 0; i < HISTORY_TASKS; i++) {
		snprintf(id, sizeof id, "hist-%d", i);
		snprintf(subject, sizeof subject, "history %d", i);
		reply = write_task(b, &h, id, subject);
		if (i < answered) {
			if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
				fail_msg("%s: %s", id, reply);
			receipt_bytes(reply, got, sizeof got);
			assert_string_equal(got, h.receipts[i]);
		} else
			assert_non_null(strstr(reply, "\"ok\":true"));
		free(reply);
	}
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS);
	harness_finish(b);
}

/* idemctl verify finds nothing wrong (the broker running). */
static void
verify_clean(struct broker *b)
{
	char	out[8192];

	if (harness_idemctl(out, sizeof out, "--root '%s' verify", b->root) != 0)
		fail_msg("idemctl verify: %s", out);
}

/* get_submission's reserved_at of a task id (malloc'd). */
static char *
reserved_at_of(struct broker *b, const char *id)
{
	json_t	*r;
	char	*reply, *at;

	reply = call_line(b, json_pack("{s:s, s:s}", "op", "get_submission",
	    "client_submission_id", id));
	assert_non_null(r = json_loads(reply, 0, NULL));
	assert_non_null(at = strdup(harness_str(json_object_get(r,
	    "submission"), "reserved_at")));
	json_decref(r);
	free(reply);
	return at;
}

/*
 * Retry every id of the history: each answers reused (no second TASK
 * file, no proceed) with the first receipt, whole or as its tombstone's
 * facts (receipt_pruned:true, no file digest, no result).  Which ones
 * were pruned goes into pruned (HISTORY_TASKS tasks, then the effects);
 * how many, returned.
 */
static int
retry_compacted(struct broker *b, struct history *h, char *pruned)
{
	char		 id[32], subject[64], *reply;
	json_t		*r, *first, *receipt;
	int		 i, n = 0;

	for (i = 0; i < HISTORY_TASKS; i++) {
		snprintf(id, sizeof id, "hist-%d", i);
		snprintf(subject, sizeof subject, "history %d", i);
		reply = write_task(b, h, id, subject);
		assert_non_null(r = json_loads(reply, 0, NULL));
		assert_string_equal(harness_str(r, "disposition"), "reused");
		harness_assert_bool(r, "action_taken", 0);
		assert_non_null(first = json_loads(h->receipts[i], 0, NULL));
		receipt = json_object_get(r, "receipt");
		assert_string_equal(json_string_value(json_object_get(receipt,
		    "task_id")), json_string_value(json_object_get(first,
		    "task_id")));
		assert_string_equal(json_string_value(json_object_get(receipt,
		    "request_digest")), json_string_value(json_object_get(first,
		    "request_digest")));
		assert_string_equal(json_string_value(json_object_get(receipt,
		    "created_at")), json_string_value(json_object_get(first,
		    "created_at")));
		pruned[i] = json_is_true(json_object_get(r, "receipt_pruned"));
		if (pruned[i])
			assert_null(json_object_get(receipt, "file_digest"));
		else
			assert_non_null(strstr(reply, h->receipts[i]));
		n += pruned[i];
		json_decref(first);
		json_decref(r);
		free(reply);
	}
	for (i = 0; i < HISTORY_EFFECTS; i++) {
		reply = effect_begin(b, h, i, 0);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("fx-%d after compact: %s", i, reply);
		pruned[HISTORY_TASKS + i] = strstr(reply,
		    "\"receipt_pruned\":true") != NULL;
		if (pruned[HISTORY_TASKS + i]) {
			assert_non_null(strstr(reply, "\"result_digest\":"));
			assert_null(strstr(reply, "\"result\":"));
		}
		n += pruned[HISTORY_TASKS + i];
		free(reply);
	}
	return n;
}

/*
 * libidem's begin of a pruned effect fx-i: reused, the tombstone's
 * receipt byte for byte as the raw answer holds it (result_digest in
 * the result's place), and no result (NULL, not an error).
 */
static void
libidem_reuses_tombstone(struct broker *b, struct history *h, int i)
{
	struct idem_conn	*c;
	struct idem_effect	 out;
	struct idem_error	 err;
	char			 id[32], request[64], *reply, *r;

	reply = effect_begin(b, h, i, 0);
	assert_non_null(r = strstr(reply, "\"receipt\":"));
	r += strlen("\"receipt\":");
	reply[strlen(reply) - 1] = '\0';	/* the answer's own brace */
	snprintf(id, sizeof id, "fx-%d", i);
	snprintf(request, sizeof request, "{\"n\":%d,\"to\":\"ops@example\"}",
	    i);
	assert_non_null(c = harness_connect(b));
	if (idem_effect_begin(c, id, "mail.send/v1", request, 0, &out,
	    &err) != 0)
		fail_msg("libidem begin %s: %s", id, err.message);
	assert_int_equal(out.disposition, IDEM_EFFECT_REUSED);
	assert_null(out.result);
	assert_non_null(strstr(out.receipt, "\"result_digest\":"));
	assert_string_equal(out.receipt, r);
	idem_effect_clear(&out);
	idem_close(c);
	free(reply);
}

/*
 * libidem's write_task and get_submission of a compacted task hist-i:
 * the tombstone's receipt (receipt_pruned:true, no file_digest) is an
 * answer, not a protocol error: reused with the first receipt's task
 * and digest, file_digest "" and the receipt's bytes as sent; the
 * connection stays usable for the next call.
 */
static void
libidem_task_tombstone(struct broker *b, struct history *h, int i)
{
	struct idem_conn	*c;
	struct idem_task	 task;
	struct idem_write_result result;
	struct idem_submission	 sub;
	struct idem_error	 err;
	json_t			*first;
	char			 id[32], subject[64], *reply, *receipt;
	int			 found;

	snprintf(id, sizeof id, "hist-%d", i);
	snprintf(subject, sizeof subject, "history %d", i);
	reply = write_task(b, h, id, subject);
	assert_non_null(strstr(reply, "\"receipt_pruned\":true"));
	receipt = harness_receipt_bytes(reply);
	assert_non_null(first = json_loads(h->receipts[i], 0, NULL));
	memset(&task, 0, sizeof task);
	task.sender = "PM";
	task.recipient = "DEV";
	task.subject = subject;
	task.body = "Steps:\n1. reproduce\n2. fix\n";
	assert_non_null(c = harness_connect(b));
	if (idem_write_task(c, id, &task, &result, &err) != 0)
		fail_msg("libidem write_task %s: %s", id, err.message);
	assert_int_equal(result.disposition, IDEM_REUSED);
	assert_string_equal(result.receipt.client_submission_id, id);
	assert_string_equal(result.receipt.task_id, harness_str(first,
	    "task_id"));
	assert_string_equal(result.receipt.request_digest, harness_str(first,
	    "request_digest"));
	assert_string_equal(result.receipt.file_digest, "");
	assert_string_equal(result.receipt.raw, receipt);
	if (idem_get_submission(c, id, &found, &sub, &err) != 0)
		fail_msg("libidem get_submission %s: %s", id, err.message);
	assert_int_equal(found, 1);
	assert_int_equal(sub.has_receipt, 1);
	assert_string_equal(sub.receipt.task_id, harness_str(first,
	    "task_id"));
	assert_string_equal(sub.receipt.created_at, harness_str(first,
	    "created_at"));
	assert_string_equal(sub.receipt.file_digest, "");
	idem_close(c);
	json_decref(first);
	free(receipt);
	free(reply);
}

/*
 * idemctl compact --older-than 0 turns every receipt of the index into
 * its tombstone: a retry answers reused with receipt_pruned:true and the
 * first receipt's facts (no second TASK file, no proceed); another
 * request is still a conflict; get_submission still says when it was
 * reserved; verify still finds every file.  Killed and restarted with a
 * smaller table (the journal replayed, whole entries given to the index
 * again), every tombstone stays one.
 */
#define HISTORY_NEW_AFTER_COMPACT	20

static void
test_compact_leaves_tombstones(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	char		 before[HISTORY_TASKS + HISTORY_EFFECTS];
	char		 after[HISTORY_TASKS + HISTORY_EFFECTS];
	char		 id[32], *reply, *reserved, *reserved_pruned;
	int		 i, pruned, tasks_pruned = 0;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	create_history(b, &h);
	reserved = reserved_at_of(b, "hist-0");
	assert_true(harness_compact_now(b) >= HISTORY_TASKS + HISTORY_EFFECTS -
	    8);
	pruned = retry_compacted(b, &h, before);
	/* All but what the table (8) still holds whole. */
	assert_true(pruned >= HISTORY_TASKS + HISTORY_EFFECTS - 8);
	for (i = 0; i < HISTORY_TASKS; i++)
		tasks_pruned += before[i];
	assert_true(tasks_pruned > 0 && tasks_pruned < pruned);
	for (i = 0; i < HISTORY_EFFECTS && !before[HISTORY_TASKS + i]; i++)
		;
	assert_true(i < HISTORY_EFFECTS);
	libidem_reuses_tombstone(b, &h, i);
	for (i = 0; i < HISTORY_TASKS && !before[i]; i++)
		;
	assert_true(i < HISTORY_TASKS);
	libidem_task_tombstone(b, &h, i);
	/* hist-0, the oldest, left the table: its tombstone keeps the time. */
	assert_true(before[0]);
	reserved_pruned = reserved_at_of(b, "hist-0");
	assert_string_equal(reserved_pruned, reserved);
	free(reserved);
	free(reserved_pruned);
	reply = write_task(b, &h, "hist-0", "another subject");
	assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
	free(reply);
	reply = effect_begin(b, &h, 1, 1);
	assert_non_null(strstr(reply, "\"reason\":\"digest_mismatch\""));
	free(reply);
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS);
	assert_int_equal(harness_stat(b, "history_entries"),
	    HISTORY_TASKS + HISTORY_EFFECTS);
	verify_clean(b);

	harness_kill(b);
	assert_int_equal(harness_start(b, smaller_args, NULL), 0);
	/* New ids overflow the table: checkpoints give it to the index. */
	for (i = 0; i < HISTORY_NEW_AFTER_COMPACT; i++) {
		snprintf(id, sizeof id, "after-%d", i);
		reply = write_task(b, &h, id, "after the compaction");
		assert_non_null(strstr(reply, "\"disposition\":\"created\""));
		free(reply);
	}
	assert_true(retry_compacted(b, &h, after) >= pruned);
	for (i = 0; i < HISTORY_TASKS + HISTORY_EFFECTS; i++)
		if (before[i] && !after[i])
			fail_msg("id %d came back whole after the restart", i);
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS +
	    HISTORY_NEW_AFTER_COMPACT);
	verify_clean(b);
	harness_finish(b);
}

/*
 * idemctl verify --json: its exit status, its output parsed (a new ref).
 * Its stderr is in the text too: a line without a brace, before it.
 */
static int
verify_json(struct broker *b, json_t **out)
{
	static char	 text[65536];
	const char	*start;
	int		 status;

	status = harness_idemctl(text, sizeof text, "--root '%s' verify --json",
	    b->root);
	if ((start = strchr(text, '{')) == NULL ||
	    (*out = json_loads(start, 0, NULL)) == NULL)
		fail_msg("idemctl verify --json (%d): %s", status, text);
	return status;
}

static json_int_t
verify_index_count(json_t *v, const char *name)
{
	json_t	*n = json_object_get(json_object_get(v, "index"), name);

	if (!json_is_integer(n))
		fail_msg("verify --json: no index.%s", name);
	return json_integer_value(n);
}

/* fx-i's key in the table, the journal and the index. */
static size_t
effect_key(int i, char *key, size_t size)
{
	return (size_t)snprintf(key, size, "mail.send/v1%cfx-%d",
	    SUBTAB_EFFECT_SEPARATOR, i);
}

/*
 * Collects the keys of the effects a record leaves committed: true if
 * that record is the checkpoint's.
 */
static int
committed_effect(const struct journal_record *r,
    const struct store_where *where, void *arg)
{
	json_t	*keys = arg;
	char	 key[SUBTAB_MAX_KEY_BYTES + 1];

	if (r->entry.kind != SUBTAB_KIND_EFFECT)
		return 0;
	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	if (r->entry.state == SUBTAB_COMMITTED)
		return json_object_set_new(keys, key,
		    json_boolean(where->checkpoint));
	json_object_del(keys, key);
	return 0;
}

/* The index of b's root, opened for writing (the broker stopped). */
static void
open_index(struct broker *b, struct index *x)
{
	char	 dir[PATH_MAX];
	char	*cause = NULL;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_INDEX_DIR);
	if (index_open(x, dir, 0, &cause) != 0)
		fail_msg("index_open: %s", cause);
}

/* key's entry in the index (its result in result): 1, or 0 if absent. */
static int
indexed_entry(struct broker *b, const char *key, struct index_entry *e,
    uint8_t *result)
{
	struct index	 x;
	char		*cause = NULL;
	int		 rc;

	open_index(b, &x);
	if ((rc = index_get(&x, key, strlen(key), e, result, &cause)) == -1)
		fail_msg("index_get: %s", cause);
	index_close(&x);
	return rc;
}

/* The checkpoint the index was last written with. */
static uint64_t
index_checkpoint(struct broker *b)
{
	struct index		x;
	struct index_stats	st;

	open_index(b, &x);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	index_close(&x);
	return st.checkpoint;
}

/* Remove key from the index (the store never does: damage). */
static void
drop_entry(struct broker *b, const char *key)
{
	struct index	 x;
	MDB_txn		*txn;
	MDB_val		 k;

	open_index(b, &x);
	assert_int_equal(mdb_txn_begin(x.env, NULL, 0, &txn), 0);
	k.mv_data = (void *)key;
	k.mv_size = strlen(key);
	assert_int_equal(mdb_del(txn, x.receipts, &k, NULL), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	index_close(&x);
}

/*
 * Replace key's entry in the index by e, encoded as the store writes
 * one (the store itself never replaces an entry: it is deleted first).
 */
static void
plant_entry(struct broker *b, const struct index_entry *e)
{
	struct index	 x;
	MDB_val		 k;
	char		*cause = NULL;
	int		 rc;

	open_index(b, &x);
	k.mv_data = (void *)e->record.key;
	k.mv_size = e->record.entry.key_length;
	if (index_begin(&x, &cause) != 0 ||
	    ((rc = mdb_del(x.write, x.receipts, &k, NULL)) != 0 &&
	    rc != MDB_NOTFOUND) ||
	    index_put(&x, e->form, &e->record, &cause) != 0 ||
	    index_commit(&x, 0, &cause) != 0)
		fail_msg("planting an index entry: %s", cause);
	index_close(&x);
}

/* verify --json found exactly one problem, check, about fx-i: it. */
static json_t *
one_effect_problem(json_t *v, int i, const char *check)
{
	json_t	*problems = json_object_get(v, "problems"), *p;
	char	 id[32];

	snprintf(id, sizeof id, "fx-%d", i);
	if (json_array_size(problems) != 1)
		fail_msg("verify found %zu problems, not 1",
		    json_array_size(problems));
	p = json_array_get(problems, 0);
	assert_string_equal(harness_str(p, "check"), check);
	assert_string_equal(harness_str(p, "severity"), "error");
	assert_string_equal(harness_str(p, "kind"), "effect");
	assert_string_equal(harness_str(p, "effect_kind"), "mail.send/v1");
	assert_string_equal(harness_str(p, "client_submission_id"), id);
	assert_string_equal(harness_str(p, "state"), "committed");
	assert_non_null(strstr(harness_str(p, "message"), id));
	assert_false(json_is_true(json_object_get(v, "ok")));
	return p;
}

/*
 * verify --json found exactly one problem: index_disagrees of fx-i,
 * whose index entry (of form) differs in the one fact named.
 */
static void
assert_one_disagreement(json_t *v, int i, const char *form,
    const char *fact)
{
	json_t	*p, *differs;

	p = one_effect_problem(v, i, "index_disagrees");
	assert_string_equal(harness_str(json_object_get(p, "indexed"),
	    "form"), form);
	differs = json_object_get(p, "differs");
	assert_int_equal(json_array_size(differs), 1);
	assert_string_equal(json_string_value(json_array_get(differs, 0)),
	    fact);
	/* In words too. */
	assert_non_null(strstr(harness_str(p, "message"), fact));
}

/*
 * Which effects of b's store the index holds (*indexed), and which the
 * checkpoint's and the journal's records leave committed too (*shared);
 * *target: the first of those the checkpoint holds (-1: none), and
 * *from_checkpoint how many it holds.
 */
static void
effects_held(struct broker *b, int *indexed, int *shared, int *target,
    int *from_checkpoint)
{
	static uint8_t		 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	struct store_loaded	 loaded;
	struct index_entry	 e;
	json_t			*recorded, *from;
	char			 dir[PATH_MAX];
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	char			*cause = NULL;
	int			 i;

	*indexed = *shared = *from_checkpoint = 0;
	*target = -1;
	assert_non_null(recorded = json_object());
	assert_int_equal(store_journal_dir(b->root, dir, sizeof dir), 0);
	memset(&loaded, 0, sizeof loaded);
	if (store_records(dir, committed_effect, recorded, &loaded,
	    &cause) != 0)
		fail_msg("store_records: %s", cause);
	for (i = 0; i < HISTORY_EFFECTS; i++) {
		effect_key(i, key, sizeof key);
		if ((from = json_object_get(recorded, key)) != NULL &&
		    json_is_true(from))
			(*from_checkpoint)++;
		if (indexed_entry(b, key, &e, result) != 1)
			continue;
		assert_int_equal(e.form, INDEX_FULL);
		(*indexed)++;
		if (from == NULL)
			continue;
		(*shared)++;
		if (*target == -1 && json_is_true(from))
			*target = i;
	}
	assert_true(index_checkpoint(b) >= loaded.checkpoint);
	json_decref(recorded);
}

/*
 * A table of 8 outgrows the index at once: from then on checkpoints
 * (segments of 4 KiB) leave committed entries to the index
 * (checkpoint.c), so most effects are the index's alone and the newest
 * checkpoint holds none committed; idemctl verify is clean and counts
 * them as only the index's.
 */
static void
test_verify_effects_only_in_the_index(void **state)
{
	struct broker		*b = *state;
	static struct history	 h;
	json_t			*v;
	int			 indexed, shared, target, from_checkpoint;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, small_rotating_args, NULL), 0);
	create_history(b, &h);
	verify_clean(b);
	assert_int_equal(harness_stop(b), 0);

	effects_held(b, &indexed, &shared, &target, &from_checkpoint);
	assert_true(indexed > shared);
	assert_int_equal(from_checkpoint, 0);
	assert_int_equal(verify_json(b, &v), 0);
	assert_true(json_is_true(json_object_get(v, "ok")));
	assert_int_equal(json_array_size(json_object_get(v, "problems")), 0);
	assert_int_equal(verify_index_count(v, "effects_compared"), shared);
	assert_int_equal(verify_index_count(v, "effects_only"),
	    indexed - shared);
	json_decref(v);

	/* A broker starts on it, every receipt the same. */
	assert_int_equal(harness_start(b, small_rotating_args, NULL), 0);
	check_history(b, &h);
	verify_clean(b);
	harness_finish(b);
}

/*
 * A table that holds everything, an arena of the least size and
 * segments of 4 KiB: the arena overwrites results the index has (an
 * index pass gave it them), so a checkpoint leaves them
 * to the index alone (its header counts them), and from the next one
 * on committed entries are the index's: the newest checkpoint holds no
 * committed effect, and a broker started again answers every one
 * reused with its first receipt.
 */
#define WRAP_PAD		4000
static const char *const wrap_args[] = { "--result-bytes", "65552",
    "--segment-bytes", "4096", NULL };

static void
test_checkpoint_leaves_effects_to_the_index(void **state)
{
	struct broker		*b = *state;
	static struct history	 h;
	static char		 effects[HISTORY_EFFECTS][8192];
	char			 dir[PATH_MAX], *cause = NULL;
	uint64_t		 segment, index_only;
	int			 i, retries = 0;
	int			 indexed, shared, target, from_checkpoint;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, wrap_args, NULL), 0);
	for (i = 0; i < HISTORY_EFFECTS; i++)
		commit_effect(b, &h, i, WRAP_PAD, effects[i],
		    sizeof effects[i], NULL, &retries);
	assert_int_equal(harness_stop(b), 0);

	assert_int_equal(store_journal_dir(b->root, dir, sizeof dir), 0);
	if (checkpoint_index_only(dir, &segment, &index_only, &cause) != 0)
		fail_msg("checkpoint_index_only: %s", cause);
	assert_true(segment > 0);
	assert_true(index_only > 0);
	effects_held(b, &indexed, &shared, &target, &from_checkpoint);
	assert_true(indexed > 0);
	assert_int_equal(from_checkpoint, 0);

	assert_int_equal(harness_start(b, wrap_args, NULL), 0);
	assert_all_reused(b, &h, effects[0], sizeof effects[0], HISTORY_EFFECTS,
	    "");
	verify_clean(b);
	harness_finish(b);
}

/* Segments of 4 KiB: a checkpoint at every rotation. */
static const char *const rotating_args[] = { "--segment-bytes", "4096",
    NULL };

/*
 * idemctl verify compares the index's effects with the checkpoint's and
 * the journal's last record of their keys.  With segments of 4 KiB and
 * a table that holds everything, every rotation's checkpoint copies
 * every entry (a lost index could still be rebuilt from it), so the
 * effects the index holds are the checkpoint's too: verify is clean,
 * clean once compacted (a tombstone agrees on the facts it keeps), and
 * an entry planted with another result digest, or a tombstone with
 * another attempt, is index_disagrees naming exactly that effect; one
 * the checkpoint holds committed and the index, written with that
 * checkpoint, lacks is index_lacks.
 */
static void
test_verify_compares_effects(void **state)
{
	struct broker		*b = *state;
	static struct history	 h;
	static uint8_t		 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	struct index_entry	 saved, e;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	json_t			*v;
	int			 indexed, shared, target, from_checkpoint;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, rotating_args, NULL), 0);
	create_history(b, &h);
	verify_clean(b);
	assert_int_equal(harness_stop(b), 0);

	effects_held(b, &indexed, &shared, &target, &from_checkpoint);
	assert_true(indexed > 0);
	assert_int_equal(shared, indexed);
	assert_true(target >= 0);
	assert_int_equal(verify_json(b, &v), 0);
	assert_true(json_is_true(json_object_get(v, "ok")));
	assert_int_equal(json_array_size(json_object_get(v, "problems")), 0);
	assert_int_equal(verify_index_count(v, "effects_compared"), shared);
	assert_int_equal(verify_index_count(v, "effects_only"),
	    indexed - shared);
	json_decref(v);

	/* Another result digest in fx-target's full entry. */
	effect_key(target, key, sizeof key);
	assert_int_equal(indexed_entry(b, key, &saved, result), 1);
	e = saved;
	e.record.entry.file_digest[0] ^= 0xff;
	plant_entry(b, &e);
	assert_int_equal(verify_json(b, &v), 1);
	assert_one_disagreement(v, target, "full", "result_digest");
	json_decref(v);
	/* Gone from the index, which the checkpoint was written with. */
	drop_entry(b, key);
	assert_int_equal(verify_json(b, &v), 1);
	assert_string_equal(harness_str(one_effect_problem(v, target,
	    "index_lacks"), "source"), "checkpoint");
	assert_int_equal(verify_index_count(v, "effects_compared"),
	    shared - 1);
	json_decref(v);
	/* Put back: clean again. */
	plant_entry(b, &saved);
	assert_int_equal(verify_json(b, &v), 0);
	assert_int_equal(json_array_size(json_object_get(v, "problems")), 0);
	json_decref(v);

	/* Compacted: tombstones agree with the full records they were. */
	assert_true(harness_compact_now(b) >= (unsigned long long)indexed);
	assert_int_equal(indexed_entry(b, key, &e, result), 1);
	assert_int_equal(e.form, INDEX_TOMBSTONE);
	assert_int_equal(verify_json(b, &v), 0);
	assert_int_equal(json_array_size(json_object_get(v, "problems")), 0);
	assert_int_equal(verify_index_count(v, "effects_compared"), shared);
	json_decref(v);
	/* A tombstone with another attempt disagrees too. */
	e.record.entry.attempt++;
	plant_entry(b, &e);
	assert_int_equal(verify_json(b, &v), 1);
	assert_one_disagreement(v, target, "tombstone", "attempt");
	json_decref(v);

	/* Put back: a broker starts on it, and verify beside it is clean. */
	e.record.entry.attempt--;
	plant_entry(b, &e);
	assert_int_equal(harness_start(b, rotating_args, NULL), 0);
	assert_int_equal(harness_count_tasks(b), HISTORY_TASKS);
	verify_clean(b);
	harness_finish(b);
}

/* Overwrite the index's first pages (both LMDB meta pages) with 0xff. */
static void
damage_index(struct broker *b)
{
	char	path[600], junk[16384];
	int	fd;

	snprintf(path, sizeof path, "%s/.idem/index/data.mdb", b->root);
	memset(junk, 0xff, sizeof junk);
	assert_true((fd = open(path, O_WRONLY)) >= 0);
	assert_int_equal(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

/* Whether start-up moved a damaged index aside (.idem/index.damaged-*). */
static int
index_set_aside(struct broker *b)
{
	char		 dir[600];
	DIR		*d;
	struct dirent	*de;
	int		 found = 0;

	snprintf(dir, sizeof dir, "%s/.idem", b->root);
	assert_non_null(d = opendir(dir));
	while ((de = readdir(d)) != NULL)
		if (strncmp(de->d_name, "index.damaged-", 14) == 0)
			found = 1;
	closedir(d);
	return found;
}

/*
 * A missing or damaged index: rebuilt with a warning (a damaged one
 * moved aside first) when the checkpoint and the journal still hold
 * every committed receipt (also after index passes let a table of 8
 * evict them: the segments keep them until a rotation); refused, naming
 * the count, when receipts were only in it (checkpoints of full
 * segments pruned the rest).
 */
static void
test_missing_index(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	char		 cmd[600], id[32], *log, *reply;
	int		 i;

	memset(&h, 0, sizeof h);
	/* Nothing evicted: the table holds everything. */
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	create_history(b, &h);
	assert_int_equal(harness_stop(b), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s/.idem/index'", b->root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	assert_non_null(log = read_log(b));
	assert_non_null(strstr(log, "rebuilding it from the checkpoint"));
	free(log);
	check_history(b, &h);
	harness_kill(b);

	/* Damaged (its meta pages overwritten): moved aside and rebuilt. */
	damage_index(b);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	assert_non_null(log = read_log(b));
	if (strstr(log, "is damaged") == NULL ||
	    strstr(log, "rebuilding it from the checkpoint") == NULL)
		fail_msg("no warning of the damaged index in: %s", log);
	free(log);
	assert_true(index_set_aside(b));
	check_history(b, &h);
	harness_kill(b);

	/*
	 * More ids through a table of 8: index passes give evicted
	 * receipts to the index, but no segment is full, so none is
	 * pruned and no checkpoint written: the journal still holds every
	 * receipt, and start-up without the index rebuilds it, every
	 * receipt the same.
	 */
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "more-%d", i);
		reply = write_task(b, &h, id, "more");
		assert_non_null(strstr(reply, "\"disposition\":\"created\""));
		free(reply);
	}
	check_history_files(b, &h, HISTORY_TASKS + 40);
	assert_true(harness_stat(b, "table_evictions") > 0);
	assert_int_equal(harness_stop(b), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s/.idem/index'", b->root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	assert_non_null(log = read_log(b));
	assert_non_null(strstr(log, "rebuilding it from the checkpoint"));
	free(log);
	check_history_files(b, &h, HISTORY_TASKS + 40);
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "more-%d", i);
		reply = write_task(b, &h, id, "more");
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s after the rebuild: %s", id, reply);
		free(reply);
	}
	harness_kill(b);

	/*
	 * More ids with segments of 4 KiB: full segments rotate, and their
	 * checkpoints prune the segments that held the evicted receipts.
	 * Then those live only in the index, and start-up without it
	 * refuses.
	 */
	assert_int_equal(harness_start(b, small_rotating_args, NULL), 0);
	for (i = 40; i < 80; i++) {
		snprintf(id, sizeof id, "more-%d", i);
		reply = write_task(b, &h, id, "more");
		assert_non_null(strstr(reply, "\"disposition\":\"created\""));
		free(reply);
	}
	check_history_files(b, &h, HISTORY_TASKS + 80);
	assert_int_equal(harness_stop(b), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s/.idem/index'", b->root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(harness_start(b, small_rotating_args, NULL), -1);
	assert_non_null(log = read_log(b));
	if (strstr(log, "committed receipts were kept only there") == NULL)
		fail_msg("no refusal naming the lost receipts in: %s", log);
	free(log);
	/* Nothing was touched: putting the index back serves it all. */
	harness_finish(b);
}

/*
 * An index restored from a backup taken before the newest checkpoint,
 * which left receipts to the index alone, is refused (the reviewer's
 * case): a table of 16, segments of 8 KiB and the least arena, so that
 * checkpoints soon leave committed entries to the index and count
 * them (offset 48); 40 effects, an idemctl backup, 80 effects more and
 * checkpoints since, a kill; the live index moved aside and the
 * backup's put in its place.  Start-up stops naming the checkpoint and
 * says what to restore, and idemctl verify fails with index_stale
 * naming it (it reported the store clean before), the journal's files
 * unchanged; with the live index back every one of the 120 effects
 * answers reused with its first receipt, and verify is clean.
 * Without the refusal the stale index was taken, and most of the 80
 * later effects answered proceed: a second execution.
 */
#define STALE_FIRST	40
#define STALE_EFFECTS	120
static const char *const stale_args[] = { "--capacity", "16",
    "--segment-bytes", "8192", "--result-bytes", "65552", NULL };

/* The checkpoint an index (a directory) was last written with. */
static uint64_t
index_checkpoint_at(const char *dir)
{
	struct index		 x;
	struct index_stats	 st;
	char			*cause = NULL;

	if (index_open(&x, dir, INDEX_READONLY, &cause) != 0)
		fail_msg("index_open %s: %s", dir, cause);
	assert_int_equal(index_stats(&x, &st, NULL), 0);
	index_close(&x);
	return st.checkpoint;
}

/* The journal's files, each named with its SHA-256 (malloc'd). */
static char *
journal_files(struct broker *b)
{
	char	 cmd[800], *out;
	FILE	*p;
	size_t	 n;

	snprintf(cmd, sizeof cmd, "cd '%s/%s' && ls -a && sha256sum -- *",
	    b->root, IDEM_JOURNAL_DIR);
	assert_non_null(out = calloc(1, 65536));
	assert_non_null(p = popen(cmd, "r"));
	n = fread(out, 1, 65535, p);
	assert_int_equal(pclose(p), 0);
	assert_true(n > 0 && n < 65535);
	return out;
}

/*
 * idemctl verify on b's root (idemd stopped, the stale index in place)
 * says what idemd refused: it exits 1 with exactly one problem,
 * index_stale, naming the index, the newest checkpoint (segment) and
 * its count of receipts only the index held (index_only).
 */
static void
assert_verify_index_stale(struct broker *b, uint64_t segment,
    uint64_t index_only, uint64_t backed_up)
{
	json_t	*v, *p, *problems;
	char	 name[64], path[PATH_MAX];

	assert_int_equal(verify_json(b, &v), 1);
	assert_false(json_is_true(json_object_get(v, "ok")));
	problems = json_object_get(v, "problems");
	if (json_array_size(problems) != 1)
		fail_msg("verify found %zu problems, not 1: %s",
		    json_array_size(problems), json_dumps(problems, 0));
	p = json_array_get(problems, 0);
	assert_string_equal(harness_str(p, "check"), "index_stale");
	assert_string_equal(harness_str(p, "severity"), "error");
	snprintf(path, sizeof path, "%s/%s", b->root, IDEM_INDEX_DIR);
	assert_string_equal(harness_str(p, "path"), path);
	assert_int_equal(json_integer_value(json_object_get(p,
	    "checkpoint")), segment);
	assert_int_equal(json_integer_value(json_object_get(p, "receipts")),
	    index_only);
	assert_int_equal(json_integer_value(json_object_get(p,
	    "index_checkpoint")), backed_up);
	snprintf(name, sizeof name, "checkpoint-%016llx.snap",
	    (unsigned long long)segment);
	if (strstr(harness_str(p, "message"), name) == NULL ||
	    strstr(harness_str(p, "message"),
	    "idemctl backup copies them together") == NULL)
		fail_msg("index_stale does not name %s and what to restore: "
		    "%s", name, harness_str(p, "message"));
	json_decref(v);
}

static void
test_index_older_than_checkpoint(void **state)
{
	struct broker		*b = *state;
	static struct history	 h;
	static char		 effects[STALE_EFFECTS][8192];
	char			 dir[PATH_MAX], dest[PATH_MAX];
	char			 live[PATH_MAX], cmd[3 * PATH_MAX];
	char			 out[8192];
	char			*cause = NULL, *log, *before, *after;
	uint64_t		 segment, index_only, backed_up;
	int			 i, retries = 0;

	memset(&h, 0, sizeof h);
	snprintf(dest, sizeof dest, "%s.backup", b->root);
	snprintf(live, sizeof live, "%s.index", b->root);
	assert_int_equal(harness_start(b, stale_args, NULL), 0);
	for (i = 0; i < STALE_FIRST; i++)
		commit_effect(b, &h, i, WRAP_PAD, effects[i],
		    sizeof effects[i], NULL, &retries);
	if (harness_idemctl(out, sizeof out, "--root '%s' backup '%s'",
	    b->root, dest) != 0)
		fail_msg("idemctl backup: %s", out);
	for (i = STALE_FIRST; i < STALE_EFFECTS; i++)
		commit_effect(b, &h, i, WRAP_PAD, effects[i],
		    sizeof effects[i], NULL, &retries);
	harness_kill(b);

	/* The case: receipts only in the index, the backup's older. */
	assert_int_equal(store_journal_dir(b->root, dir, sizeof dir), 0);
	if (checkpoint_index_only(dir, &segment, &index_only, &cause) != 0)
		fail_msg("checkpoint_index_only: %s", cause);
	assert_true(index_only > 0);
	snprintf(out, sizeof out, "%s/%s", dest, IDEM_INDEX_DIR);
	backed_up = index_checkpoint_at(out);
	if (backed_up >= segment)
		fail_msg("no checkpoint since the backup's index (%llu), the "
		    "newest %llu", (unsigned long long)backed_up,
		    (unsigned long long)segment);

	/* The live index aside, the backup's in its place. */
	snprintf(cmd, sizeof cmd, "mv '%s/%s' '%s' && cp -a '%s/%s' '%s/%s'",
	    b->root, IDEM_INDEX_DIR, live, dest, IDEM_INDEX_DIR, b->root,
	    IDEM_INDEX_DIR);
	assert_int_equal(system(cmd), 0);
	before = journal_files(b);
	assert_int_equal(harness_start(b, stale_args, NULL), -1);
	assert_non_null(log = read_log(b));
	snprintf(out, sizeof out, "is older than the newest checkpoint, "
	    "checkpoint-%016llx.snap", (unsigned long long)segment);
	if (strstr(log, out) == NULL ||
	    strstr(log, "idemctl backup copies them together") == NULL)
		fail_msg("no refusal naming checkpoint %llu in: %s",
		    (unsigned long long)segment, log);
	free(log);
	/* What the restore steps end with says so too (read-only). */
	assert_verify_index_stale(b, segment, index_only, backed_up);
	after = journal_files(b);
	assert_string_equal(after, before);
	free(before);
	free(after);

	/* The live index back: every receipt the same, none proceeds. */
	snprintf(cmd, sizeof cmd, "rm -rf '%s/%s' && mv '%s' '%s/%s' && "
	    "rm -rf '%s'", b->root, IDEM_INDEX_DIR, live, b->root,
	    IDEM_INDEX_DIR, dest);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(harness_start(b, stale_args, NULL), 0);
	assert_all_reused(b, &h, effects[0], sizeof effects[0], STALE_EFFECTS,
	    "");
	verify_clean(b);
	harness_finish(b);
}

/*
 * The two stores of the segment are caches (shm/arena.c, receipts.c):
 * with a result arena of four maximal results (262208 bytes), far less
 * than the results committed, every effect still commits (a complete
 * the arena refuses while its results wait for the index is
 * table_full, retryable, and succeeds again: the index's writes fail
 * until the first such refusal, so it surely happens) and answers
 * reused with its first receipt, from the arena or the index, and
 * again after a kill and a start with a quarter of the arena, the
 * least there is (the start-up puts more results through it than it
 * holds);
 * with a receipt store of 64 KiB, far less than the replies stored, a
 * retry whose stored reply was overwritten takes the full path, answers
 * the same, and the next one is fast again.
 */
#define STORES_COUNT		200
#define STORES_ARENA_BYTES	262208	/* 4 x 65552 */
#define STORES_RESULT_BYTES	"262208"
#define STORES_LEAST_BYTES	65552	/* one record of 64 KiB */
/* Results of about 4 KiB: 200 of them are three laps of the arena. */
#define STORES_PAD		4000
#define STORES_RECEIPT_BYTES	8192

static const char *const stores_args[] = { "--capacity", "512",
    "--result-bytes", STORES_RESULT_BYTES, NULL };
/* A quarter: what the checkpoint and journal hold overflows it. */
static const char *const stores_smaller_args[] = { "--capacity", "512",
    "--result-bytes", "65552", NULL };

/* The fault shim's fixture: the index's writes can be made to fail. */
static int
shim_setup(void **state)
{
	return harness_shim_setup(state, HARNESS_TEST_SECONDS);
}

/* The rule that keeps every result out of the index: its writes fail. */
#define INDEX_WRITES_FAIL	"write .idem/index EIO"
/* What a checkpoint that met it logs. */
#define INDEX_COMMIT_FAILED	"commit: Input/output error"

static void
test_small_stores_reclaim(void **state)
{
	struct harness_shim *t = *state;
	struct broker	*b = &t->b;
	static struct history h;
	static char	 effects[STORES_COUNT][STORES_RECEIPT_BYTES];
	static char	 tasks[STORES_COUNT][1024];
	char		 id[32], subject[64], got[STORES_RECEIPT_BYTES], *reply;
	json_int_t	 fast;
	int		 i, restarts, retries = 0;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, stores_args, t->env), 0);
	assert_int_equal(harness_stat(b, "result_arena_bytes"), STORES_ARENA_BYTES);
	assert_int_equal(harness_stat(b, "fast_receipts_bytes"), 65536);
	/* Nothing reaches the index until the arena has refused a result. */
	harness_fault_rule(t->fault_file, INDEX_WRITES_FAIL);
	clear_rule_on_full = t->fault_file;
	for (i = 0; i < STORES_COUNT; i++)
		commit_effect(b, &h, i, STORES_PAD, effects[i],
		    sizeof effects[i], NULL, &retries);
	/* The refusal path ran (and cleared the rule). */
	assert_null(clear_rule_on_full);
	assert_true(retries > 0);
	assert_int_equal(harness_stat(b, "effects_committed"), STORES_COUNT);
	assert_true(harness_stat(b, "result_arena_used") <= STORES_ARENA_BYTES);
	for (restarts = 0; restarts < 2; restarts++) {
		for (i = 0; i < STORES_COUNT; i++) {
			reply = effect_begin(b, &h, i, 0);
			if (strstr(reply, "\"disposition\":\"reused\"") ==
			    NULL)
				fail_msg("fx-%d: %s", i, reply);
			receipt_bytes(reply, got, sizeof got);
			assert_string_equal(got, effects[i]);
			free(reply);
		}
		if (restarts > 0)
			break;
		/*
		 * Killed, and started with a quarter of the arena: the
		 * checkpoint and the journal hold more results than it.
		 */
		harness_kill(b);
		assert_int_equal(harness_start(b, stores_smaller_args, t->env),
		    0);
		assert_int_equal(harness_stat(b, "result_arena_bytes"),
		    STORES_LEAST_BYTES);
	}

	for (i = 0; i < STORES_COUNT; i++) {
		snprintf(id, sizeof id, "st-%d", i);
		snprintf(subject, sizeof subject, "stores %d", i);
		reply = write_task(b, &h, id, subject);
		if (strstr(reply, "\"disposition\":\"created\"") == NULL)
			fail_msg("%s: %s", id, reply);
		receipt_bytes(reply, tasks[i], sizeof tasks[i]);
		free(reply);
	}
	assert_true(harness_stat(b, "fast_receipts_used") <= 65536);
	/* st-0's stored reply was overwritten: the full path, then fast. */
	for (i = 0; i < 3; i++) {
		fast = harness_stat(b, "reused_fast");
		reply = write_task(b, &h, "st-0", "stores 0");
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("st-0: %s", reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, tasks[0]);
		free(reply);
		assert_int_equal(harness_stat(b, "reused_fast"), fast + (i > 0));
	}
	/* Every one answers the same, fast or not. */
	for (i = 0; i < STORES_COUNT; i++) {
		snprintf(id, sizeof id, "st-%d", i);
		snprintf(subject, sizeof subject, "stores %d", i);
		reply = write_task(b, &h, id, subject);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("%s: %s", id, reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, tasks[i]);
		free(reply);
	}
	assert_int_equal(harness_count_tasks(b), STORES_COUNT);
	print_message("complete retried %d times while the arena waited for "
	    "the index\n", retries);
	harness_shim_finish(t);
}

/* ---- Tombstones of receipts the rings no longer hold ---------------------- */

#define PRUNED_RECEIPT_BYTES	4096
/*
 * With --capacity 64 (both tests below) the first checkpoint comes once
 * 64 / 2 + 1 entries are committed and not in the index
 * (journaler_maybe_rotate), and gives the index every one of them.
 */
#define PRUNED_FIRST_CHECKPOINT	33

/*
 * What a retry of a compacted effect answers: the receipt with its
 * result's bytes replaced by their SHA-256 (all the tombstone keeps of
 * them), every other byte the first receipt's.
 */
static void
pruned_effect_receipt(const char *whole, char *out, size_t size)
{
	unsigned char	 digest[crypto_hash_sha256_BYTES];
	char		 hex[crypto_hash_sha256_BYTES * 2 + 1];
	const char	*at = strstr(whole, "\"result\":");
	const char	*end = strstr(whole, ",\"state\":\"committed\"");
	const char	*bytes;

	if (at == NULL || end == NULL || end < at)
		fail_msg("no result in the receipt %s", whole);
	bytes = at + strlen("\"result\":");
	crypto_hash_sha256(digest, (const unsigned char *)bytes,
	    (unsigned long long)(end - bytes));
	sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
	assert_true((size_t)snprintf(out, size, "%.*s\"result_digest\":\"%s\"%s",
	    (int)(at - whole), whole, hex, end) < size);
}

/* A compacted task's: the receipt without its file digest. */
static void
pruned_task_receipt(const char *whole, char *out, size_t size)
{
	static const char	 member[] = ",\"file_digest\":\"";
	const char		*at = strstr(whole, member);
	size_t			 skip = strlen(member) + 64 + 1;

	if (at == NULL || strlen(at) < skip || at[skip - 1] != '"')
		fail_msg("no file_digest in the receipt %s", whole);
	assert_true((size_t)snprintf(out, size, "%.*s%s", (int)(at - whole),
	    whole, at + skip) < size);
}

/*
 * A retry's reply: ok, nothing done, the disposition (NULL: none, as a
 * complete's), and the receipt either the first one byte for byte, or
 * with receipt_pruned:true exactly pruned.  1 if pruned.
 */
static int
reused_whole_or_pruned(const char *what, const char *reply,
    const char *disposition, const char *whole, const char *pruned)
{
	char	 got[PRUNED_RECEIPT_BYTES];
	json_t	*r, *flag;
	int	 is_pruned;

	if ((r = json_loads(reply, 0, NULL)) == NULL ||
	    !json_is_true(json_object_get(r, "ok")))
		fail_msg("%s: %s", what, reply);
	if (disposition != NULL)
		assert_string_equal(harness_str(r, "disposition"), disposition);
	else
		assert_null(json_object_get(r, "disposition"));
	harness_assert_bool(r, "action_taken", 0);
	flag = json_object_get(r, "receipt_pruned");
	assert_true(flag == NULL || json_is_true(flag));
	is_pruned = flag != NULL;
	receipt_bytes(reply, got, sizeof got);
	if (strcmp(got, is_pruned ? pruned : whole) != 0)
		fail_msg("%s: the %s receipt %s, not %s", what, is_pruned ?
		    "pruned" : "whole", got, is_pruned ? pruned : whole);
	json_decref(r);
	return is_pruned;
}

/* A conflict with that reason, naming the first request's digest. */
static void
assert_conflict(const char *what, const char *reply, const char *reason,
    const char *whole)
{
	json_t	*r, *first, *existing;

	if ((r = json_loads(reply, 0, NULL)) == NULL ||
	    json_is_true(json_object_get(r, "ok")))
		fail_msg("%s: %s", what, reply);
	harness_assert_bool(r, "action_taken", 0);
	if (strcmp(harness_str(json_object_get(r, "error"), "reason"),
	    reason) != 0)
		fail_msg("%s: not %s: %s", what, reason, reply);
	existing = json_object_get(r, "existing");
	if (json_is_object(existing)) {
		assert_non_null(first = json_loads(whole, 0, NULL));
		assert_string_equal(harness_str(existing, "request_digest"),
		    harness_str(first, "request_digest"));
		json_decref(first);
	}
	json_decref(r);
}

/*
 * An effect's slot stays in the table (64 slots for 56 ids: nothing is
 * evicted) while its result's bytes leave a result arena of 65552 bytes
 * (the least)
 * and its index entry becomes a tombstone, in both orders:
 *
 * - fx-0..32, compacted first (the first checkpoint, at 33 committed,
 *   gave them to the index): their answers stay whole while the arena
 *   holds the bytes, and are pruned once results of 24000 bytes
 *   (fx-50..55) have wrapped the arena past them;
 * - fx-40..49, committed after that compaction: whole from the index
 *   once the arena dropped them, pruned once compacted in turn.
 *
 * A pruned answer is the receipt with the result's SHA-256 in place of
 * the result, byte for byte (begin, complete with the same fence and
 * result, get_submission); another digest, or another result, is a
 * conflict; nothing proceeds again, and after a restart (the ids now
 * partly only in the index) every answer is the same bytes again.
 */
#define ARENA_EARLY		40	/* fx-0..39: before the compaction */
#define ARENA_LATE		10	/* fx-40..49: after it */
#define ARENA_BIG		6	/* fx-50..55: wrap the arena */
#define ARENA_BIG_PAD		24000
#define ARENA_BIG_RECEIPT_BYTES	32768

static const char *const arena_args[] = { "--capacity", "64",
    "--result-bytes", "65552", NULL };

static void
test_pruned_results_left_the_arena(void **state)
{
	struct harness_shim *t = *state;
	struct broker	*b = &t->b;
	static struct history h;
	static char	 whole[ARENA_EARLY + ARENA_LATE][PRUNED_RECEIPT_BYTES];
	static char	 pruned[ARENA_EARLY + ARENA_LATE][PRUNED_RECEIPT_BYTES];
	static char	 fences[ARENA_EARLY + ARENA_LATE][HISTORY_FENCE_BYTES];
	char		 big[ARENA_BIG_RECEIPT_BYTES], what[64], *reply;
	json_t		*r, *s;
	char		*text;
	int		 i, retries = 0, was_pruned;
	const int	 all = ARENA_EARLY + ARENA_LATE;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, arena_args, t->env), 0);
	assert_int_equal(harness_stat(b, "result_arena_bytes"), 65552);
	for (i = 0; i < ARENA_EARLY; i++) {
		commit_effect(b, &h, i, 0, whole[i], sizeof whole[i],
		    fences[i], &retries);
		pruned_effect_receipt(whole[i], pruned[i], sizeof pruned[i]);
	}
	/* The first checkpoint: 33 committed and not in the index. */
	harness_wait_log(b, " new in the index", 1, 30000 *
	    (int)harness_slowdown());
	assert_true(harness_compact_now(b) >=
	    PRUNED_FIRST_CHECKPOINT);
	/* Compacted, but the table and the arena hold them: whole. */
	for (i = 0; i < ARENA_EARLY; i++) {
		snprintf(what, sizeof what, "fx-%d, compacted", i);
		reply = effect_begin(b, &h, i, 0);
		assert_int_equal(reused_whole_or_pruned(what, reply, "reused",
		    whole[i], pruned[i]), 0);
		free(reply);
	}

	for (i = ARENA_EARLY; i < all; i++) {
		commit_effect(b, &h, i, 0, whole[i], sizeof whole[i],
		    fences[i], &retries);
		pruned_effect_receipt(whole[i], pruned[i], sizeof pruned[i]);
	}
	/*
	 * Records of 24064 bytes: the smaller ones above end at 2720, the
	 * third big one starts the arena's second lap and takes its tail
	 * past them all (the last three are margin).
	 */
	/*
	 * fx-40..49 reach the index only once the arena has refused a
	 * result for them: the refusal path surely runs.
	 */
	harness_fault_rule(t->fault_file, INDEX_WRITES_FAIL);
	clear_rule_on_full = t->fault_file;
	for (i = all; i < all + ARENA_BIG; i++)
		commit_effect(b, &h, i, ARENA_BIG_PAD, big, sizeof big, NULL,
		    &retries);
	assert_null(clear_rule_on_full);
	assert_true(retries > 0);
	for (i = 0; i < all; i++) {
		snprintf(what, sizeof what, "fx-%d, its bytes reused", i);
		reply = effect_begin(b, &h, i, 0);
		was_pruned = reused_whole_or_pruned(what, reply, "reused",
		    whole[i], pruned[i]);
		free(reply);
		/* Compacted before: pruned; committed after: whole. */
		if (i < PRUNED_FIRST_CHECKPOINT)
			assert_int_equal(was_pruned, 1);
		else if (i >= ARENA_EARLY)
			assert_int_equal(was_pruned, 0);
	}
	/* The same fence and result: the same pruned receipt. */
	reply = call_line(b, complete_request(0, fences[0], "applied",
	    effect_result(0, 0)));
	assert_int_equal(reused_whole_or_pruned("complete fx-0", reply, NULL,
	    whole[0], pruned[0]), 1);
	free(reply);
	reply = call_line(b, complete_request(0, fences[0], "applied",
	    effect_result(1, 0)));
	assert_conflict("complete fx-0, another result", reply,
	    "already_committed", whole[0]);
	free(reply);
	reply = effect_begin(b, &h, 0, 1);
	assert_conflict("fx-0, another request", reply, "digest_mismatch",
	    whole[0]);
	free(reply);
	reply = call_line(b, json_pack("{s:s, s:s, s:s}", "op",
	    "get_submission", "client_submission_id", "fx-0", "effect_kind",
	    "mail.send/v1"));
	assert_non_null(r = json_loads(reply, 0, NULL));
	s = json_object_get(r, "submission");
	assert_true(json_is_true(json_object_get(s, "receipt_pruned")));
	assert_non_null(text = json_dumps(json_object_get(s, "receipt"),
	    JSON_COMPACT | JSON_PRESERVE_ORDER));
	assert_string_equal(text, pruned[0]);
	free(text);
	json_decref(r);
	free(reply);

	/* Reused first, compacted now: every one is pruned. */
	assert_true(harness_compact_now(b) >= ARENA_LATE);
	for (i = 0; i < all; i++) {
		snprintf(what, sizeof what, "fx-%d, compacted again", i);
		reply = effect_begin(b, &h, i, 0);
		assert_int_equal(reused_whole_or_pruned(what, reply, "reused",
		    whole[i], pruned[i]), 1);
		free(reply);
	}
	assert_int_equal(harness_stat(b, "table_evictions"), 0);
	assert_int_equal(harness_stat(b, "effects_proceed"), all + ARENA_BIG);
	assert_int_equal(harness_stat(b, "effects_committed"), all + ARENA_BIG);

	/*
	 * Killed and started again: the ids the checkpoint left to the
	 * index are cold, the others back in the table, each answering
	 * whole (a body the checkpoint or journal kept) or pruned, the
	 * same bytes either way, and none proceeds.
	 */
	harness_kill(b);
	assert_int_equal(harness_start(b, arena_args, t->env), 0);
	for (i = 0; i < all; i++) {
		snprintf(what, sizeof what, "fx-%d, restarted", i);
		reply = effect_begin(b, &h, i, 0);
		(void)reused_whole_or_pruned(what, reply, "reused", whole[i],
		    pruned[i]);
		free(reply);
	}
	assert_int_equal(harness_stat(b, "effects_proceed"), 0);
	assert_int_equal(harness_stat(b, "effects_committed"), 0);
	verify_clean(b);
	print_message("complete retried %d times while the arena waited for "
	    "the index\n", retries);
	harness_shim_finish(t);
}

/*
 * Ids that left the table (64 slots for 220 ids) after compact turned
 * their index entries into tombstones, tasks whose fast path replies
 * the receipt store (64 KiB, less than 200 replies of ~450 bytes)
 * overwrote among them: each retry answers reused with receipt_pruned:true and exactly
 * the first receipt without its file digest (tasks) or with the
 * result's SHA-256 in place of the result (effects), never through the
 * fast path and never a second TASK file; the ids still in the table
 * answer whole, through the full path and then the fast one.  Another
 * request is a conflict.  An effect's complete retried with its fence
 * and result answers the same pruned receipt (the tombstone keeps the
 * attempt, not the fence's random part), with another result
 * already_committed, and with the fence of an attempt it released
 * stale_fence.
 */
#define EVICT_EFFECTS		20	/* fx-0..19, slots 0..19 */
#define EVICT_EARLY_TASKS	40	/* pt-0..39, before the compaction */
#define EVICT_TASKS		200

static const char *const evict_args[] = { "--capacity", "64", NULL };

static void
test_pruned_after_eviction(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	static char	 tasks[EVICT_TASKS][PRUNED_RECEIPT_BYTES];
	static char	 tasks_pruned[EVICT_TASKS][PRUNED_RECEIPT_BYTES];
	static char	 fx[EVICT_EFFECTS][PRUNED_RECEIPT_BYTES];
	static char	 fx_pruned[EVICT_EFFECTS][PRUNED_RECEIPT_BYTES];
	static char	 fences[EVICT_EFFECTS][HISTORY_FENCE_BYTES];
	static char	 released[EVICT_EFFECTS][HISTORY_FENCE_BYTES];
	char		 id[32], subject[64], what[64], *reply;
	json_int_t	 fast, table;
	int		 i, j, retries = 0, pruned = 0, first_pruned;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, evict_args, NULL), 0);
	assert_int_equal(harness_stat(b, "fast_receipts_bytes"), 65536);
	for (i = 0; i < EVICT_EFFECTS; i++) {
		release_effect(b, &h, i, released[i]);
		commit_effect(b, &h, i, 0, fx[i], sizeof fx[i], fences[i],
		    &retries);
		pruned_effect_receipt(fx[i], fx_pruned[i], sizeof fx_pruned[i]);
	}
	for (i = 0; i < EVICT_TASKS; i++) {
		if (i == EVICT_EARLY_TASKS) {
			/*
			 * The first checkpoint (33 committed) gave fx-0..19
			 * to the index: compacted while every id is in the
			 * table, the tasks answer whole, from their stored
			 * replies.
			 */
			harness_wait_log(b, " new in the index", 1, 30000 *
			    (int)harness_slowdown());
			assert_true(harness_compact_now(b) >=
			    PRUNED_FIRST_CHECKPOINT);
			assert_int_equal(harness_stat(b, "table_evictions"), 0);
			fast = harness_stat(b, "reused_fast");
			for (j = 0; j < EVICT_EARLY_TASKS; j++) {
				snprintf(id, sizeof id, "pt-%d", j);
				snprintf(subject, sizeof subject, "pruned %d",
				    j);
				reply = write_task(b, &h, id, subject);
				assert_int_equal(reused_whole_or_pruned(id,
				    reply, "reused", tasks[j],
				    tasks_pruned[j]), 0);
				free(reply);
			}
			assert_int_equal(harness_stat(b, "reused_fast"),
			    fast + EVICT_EARLY_TASKS);
		}
		snprintf(id, sizeof id, "pt-%d", i);
		snprintf(subject, sizeof subject, "pruned %d", i);
		reply = write_task(b, &h, id, subject);
		if (strstr(reply, "\"disposition\":\"created\"") == NULL)
			fail_msg("%s: %s", id, reply);
		receipt_bytes(reply, tasks[i], sizeof tasks[i]);
		pruned_task_receipt(tasks[i], tasks_pruned[i],
		    sizeof tasks_pruned[i]);
		free(reply);
	}
	/* 156 evicted at least, every one indexed first: now tombstones. */
	assert_true(harness_stat(b, "table_evictions") >=
	    EVICT_EFFECTS + EVICT_TASKS - 64);
	assert_true(harness_compact_now(b) > 0);
	table = harness_stat(b, "table_entries");

	for (i = 0; i < EVICT_TASKS; i++) {
		snprintf(id, sizeof id, "pt-%d", i);
		snprintf(subject, sizeof subject, "pruned %d", i);
		fast = harness_stat(b, "reused_fast");
		reply = write_task(b, &h, id, subject);
		first_pruned = reused_whole_or_pruned(id, reply, "reused",
		    tasks[i], tasks_pruned[i]);
		free(reply);
		/* Again: pruned never fast, whole fast from now on. */
		reply = write_task(b, &h, id, subject);
		assert_int_equal(reused_whole_or_pruned(id, reply, "reused",
		    tasks[i], tasks_pruned[i]), first_pruned);
		free(reply);
		if (first_pruned)
			assert_int_equal(harness_stat(b, "reused_fast"), fast);
		else
			assert_true(harness_stat(b, "reused_fast") >= fast + 1);
		pruned += first_pruned;
	}
	reply = write_task(b, &h, "pt-0", "another subject");
	assert_conflict("pt-0, another request", reply, "digest_mismatch",
	    tasks[0]);
	free(reply);

	for (i = 0; i < EVICT_EFFECTS; i++) {
		snprintf(what, sizeof what, "fx-%d", i);
		/* The hand passed slots 0..19 three times: all evicted. */
		reply = effect_begin(b, &h, i, 0);
		assert_int_equal(reused_whole_or_pruned(what, reply, "reused",
		    fx[i], fx_pruned[i]), 1);
		free(reply);
		reply = call_line(b, complete_request(i, fences[i], "applied",
		    effect_result(i, 0)));
		assert_int_equal(reused_whole_or_pruned(what, reply, NULL,
		    fx[i], fx_pruned[i]), 1);
		free(reply);
		reply = call_line(b, complete_request(i, fences[i], "applied",
		    effect_result(i + 1, 0)));
		assert_conflict(what, reply, "already_committed", fx[i]);
		free(reply);
		reply = call_line(b, complete_request(i, released[i], "applied",
		    effect_result(i, 0)));
		assert_conflict(what, reply, "stale_fence", fx[i]);
		free(reply);
		reply = effect_begin(b, &h, i, 1);
		assert_conflict(what, reply, "digest_mismatch", fx[i]);
		free(reply);
		pruned++;
	}
	/* Every id the table does not hold, and only those. */
	assert_int_equal(pruned, EVICT_EFFECTS + EVICT_TASKS - table);
	assert_int_equal(harness_stat(b, "table_entries"), table);
	assert_int_equal(harness_count_tasks(b), EVICT_TASKS);
	assert_int_equal(harness_stat(b, "effects_proceed"), 2 * EVICT_EFFECTS);
	assert_int_equal(harness_stat(b, "effects_committed"), EVICT_EFFECTS);
	verify_clean(b);
	harness_finish(b);
}

/* ---- Issue 27: the cache tier under every sequence -------------------- */

/*
 * Polls: how long a retry loop below waits between tries, and how many
 * tries it makes (about 20 s: a checkpoint, even a retried one, comes
 * within a second or two; what the issue saw lasted for ever).
 */
#define CACHE_POLL_MS		5
#define CACHE_MAX_POLLS		4000

/* req sent until its answer is not a retryable table_full; that answer. */
static char *
call_until_not_full(struct broker *b, json_t *req, int *refusals)
{
	struct timespec	 ts = { 0, CACHE_POLL_MS * 1000000L };
	char		*reply;
	int		 tries;

	for (tries = 0;; tries++) {
		json_incref(req);
		reply = call_line(b, req);
		if (!is_table_full(reply))
			break;
		if (strstr(reply, "\"retryable\":true") == NULL)
			fail_msg("not retryable: %s", reply);
		if (tries >= CACHE_MAX_POLLS)
			fail_msg("still table_full after %d tries: %s", tries,
			    reply);
		free(reply);
		if (refusals != NULL)
			(*refusals)++;
		nanosleep(&ts, NULL);
	}
	json_decref(req);
	return reply;
}

/* An effect request of kind and id (begin; other ops fill in after). */
static json_t *
keyed_request(const char *op, const char *kind, const char *id)
{
	return json_pack("{s:s, s:s, s:s}", "op", op, "client_submission_id",
	    id, "effect_kind", kind);
}

/* A begin of kind/id that must proceed; its fence in fence. */
static void
keyed_proceed(struct broker *b, const char *kind, const char *id,
    json_int_t lease_ms, char fence[HISTORY_FENCE_BYTES])
{
	json_t	*req = keyed_request("effect_begin", kind, id), *r;
	char	*reply;

	json_object_set_new(req, "request", json_pack("{s:s}", "id", id));
	if (lease_ms != 0)
		json_object_set_new(req, "lease_ms", json_integer(lease_ms));
	reply = call_until_not_full(b, req, NULL);
	assert_non_null(r = json_loads(reply, 0, NULL));
	if (strcmp(harness_str(r, "disposition"), "proceed") != 0)
		fail_msg("begin %s: %s", id, reply);
	snprintf(fence, HISTORY_FENCE_BYTES, "%s", harness_str(r, "fence"));
	json_decref(r);
	free(reply);
}

/* The disposition of a begin of kind/id (the same request as above). */
static char *
keyed_begin(struct broker *b, const char *kind, const char *id)
{
	json_t	*req = keyed_request("effect_begin", kind, id);

	json_object_set_new(req, "request", json_pack("{s:s}", "id", id));
	return call_line(b, req);
}

/* A complete (applied, result of exactly bytes bytes) of kind/id. */
static json_t *
keyed_complete(const char *kind, const char *id, const char *fence,
    int i, size_t bytes)
{
	json_t	*req = keyed_request("effect_complete", kind, id);
	size_t	 fixed = 40 + (size_t)snprintf(NULL, 0, "%d", i);

	assert_true(bytes > fixed);
	json_object_set_new(req, "fence", json_string(fence));
	json_object_set_new(req, "outcome", json_string("applied"));
	json_object_set_new(req, "result", effect_result(i, bytes - fixed));
	return req;
}

/* The state a get_submission of kind/id finds ("none" if not found). */
static char *
keyed_state(struct broker *b, const char *kind, const char *id)
{
	static char	 state[32];
	json_t		*r, *sub;
	char		*reply;

	reply = call_line(b, keyed_request("get_submission", kind, id));
	assert_non_null(r = json_loads(reply, 0, NULL));
	sub = json_object_get(r, "submission");
	snprintf(state, sizeof state, "%s", json_is_true(json_object_get(r,
	    "found")) && sub != NULL ? harness_str(sub, "state") : "none");
	json_decref(r);
	free(reply);
	return state;
}

/*
 * Issue 27, item 1: with --capacity 64 full of committed, indexed
 * effects and the day's task numbers used up (a foreign file holds
 * 999), a write_task is sequence_exhausted, and the slot found for it
 * is not evicted: the checkpoints after it still store every committed
 * entry (before, each failed on a slot left committed with no key, the
 * journal was no longer pruned, and commits were table_full for good).
 */
#define EXHAUSTED_EFFECTS	200

static const char *const exhausted_args[] = { "--capacity", "64", NULL };

static void
test_exhausted_creation_keeps_checkpoints(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	char		 today[9], rel[256], receipt[1024], *reply;
	int		 i, retries = 0;

	memset(&h, 0, sizeof h);
	harness_today(today);
	snprintf(rel, sizeof rel, "_lifecycle/inbox/TASK-%s-999-X-to-Y.md",
	    today);
	assert_int_equal(harness_write(b, rel, "---\nprotocol: fcop\n"
	    "version: 1\nsender: X\nrecipient: Y\npriority: P2\n---\n"
	    "written by another FCoP tool\n"), 0);
	assert_int_equal(harness_start(b, exhausted_args, NULL), 0);
	for (i = 0; i < EXHAUSTED_EFFECTS; i++)
		commit_effect(b, &h, i, 0, receipt, sizeof receipt, NULL,
		    &retries);
	reply = call_line(b, harness_write_task("exhausted-1", "one too many"));
	if (strstr(reply, "\"code\":\"sequence_exhausted\"") == NULL) {
		harness_skip_if_date_moved(today, "TASK-00000000");
		fail_msg("not sequence_exhausted: %s", reply);
	}
	free(reply);
	/* As many again: evictions, hence checkpoints, all along. */
	for (i = EXHAUSTED_EFFECTS; i < 2 * EXHAUSTED_EFFECTS; i++)
		commit_effect(b, &h, i, 0, receipt, sizeof receipt, NULL,
		    &retries);
	assert_true(harness_stat(b, "table_evictions") >= 2 * EXHAUSTED_EFFECTS -
	    64);
	assert_int_equal(harness_log_count(b, "not a committed entry"), 0);
	/* The first effects answer from the index, unchanged. */
	for (i = 0; i < 3; i++) {
		reply = effect_begin(b, &h, i, 0);
		assert_non_null(strstr(reply, "\"disposition\":\"reused\""));
		free(reply);
	}
	assert_int_equal(harness_count_tasks(b), 1);
	harness_finish(b);
}

/*
 * Issue 27, item 2: once 200 short ids have cycled through 64 slots,
 * ids of 150, 180 and 200 bytes, and the longest key there is (an
 * effect_kind of 128 bytes and an id of 200), are served (they gather
 * the key room of several evicted entries), completed, and answer
 * reused with their receipts; the short ids go on being served.
 * Before, the 180-byte id was table_full until a restart.
 */
#define LONG_KEY_SHORT_IDS	200

static void
test_long_ids_after_cycling(void **state)
{
	struct broker	*b = *state;
	static struct history h;
	static const size_t id_lengths[] = { 150, 180, 200, 200 };
	char		 kinds[4][129], ids[4][201], fence[HISTORY_FENCE_BYTES];
	char		 receipts[4][1024], got[1024], receipt[1024], *reply;
	int		 i, retries = 0;

	memset(&h, 0, sizeof h);
	assert_int_equal(harness_start(b, exhausted_args, NULL), 0);
	for (i = 0; i < LONG_KEY_SHORT_IDS; i++)
		commit_effect(b, &h, i, 0, receipt, sizeof receipt, NULL,
		    &retries);
	for (i = 0; i < 4; i++) {
		if (i < 3)
			snprintf(kinds[i], sizeof kinds[i], "mail.send/v1");
		else {
			memset(kinds[i], 'k', 128);
			kinds[i][128] = '\0';
		}
		memset(ids[i], 'a' + i, id_lengths[i]);
		ids[i][id_lengths[i]] = '\0';
		keyed_proceed(b, kinds[i], ids[i], 0, fence);
		reply = call_until_not_full(b, keyed_complete(kinds[i], ids[i],
		    fence, i, 100), NULL);
		if (strstr(reply, "\"state\":\"committed\"") == NULL)
			fail_msg("complete of a %zu-byte id: %s",
			    id_lengths[i], reply);
		receipt_bytes(reply, receipts[i], sizeof receipts[i]);
		free(reply);
		/* Short ids still served in between. */
		commit_effect(b, &h, LONG_KEY_SHORT_IDS + i, 0, receipt,
		    sizeof receipt, NULL, &retries);
	}
	for (i = 0; i < 4; i++) {
		reply = keyed_begin(b, kinds[i], ids[i]);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("a %zu-byte id again: %s", id_lengths[i],
			    reply);
		receipt_bytes(reply, got, sizeof got);
		assert_string_equal(got, receipts[i]);
		free(reply);
	}
	assert_int_equal(harness_log_count(b, "not a committed entry"), 0);
	assert_int_equal(harness_count_tasks(b), 0);
	harness_finish(b);
}

/*
 * Issue 27, item 3: with four slots and an arena of four maximal
 * results, each new effect evicts the oldest one and takes its slot,
 * whose result is then the arena's oldest: the new effect's complete,
 * claiming that slot, reclaims those bytes.  Before, it was table_full
 * on its own claim until it gave up (20-60 s in the issue; here, for
 * ever: no other commit comes).
 */
#define OWN_CLAIM_EFFECTS	12

static const char *const own_claim_args[] = { "--capacity", "4",
    "--result-bytes", "262208", NULL };

static void
test_completion_not_blocked_by_own_claim(void **state)
{
	struct broker	*b = *state;
	char		 id[32], fence[HISTORY_FENCE_BYTES], *reply;
	int		 i, refusals = 0;

	assert_int_equal(harness_start(b, own_claim_args, NULL), 0);
	for (i = 0; i < OWN_CLAIM_EFFECTS; i++) {
		snprintf(id, sizeof id, "own-%d", i);
		keyed_proceed(b, "mail.send/v1", id, 0, fence);
		reply = call_until_not_full(b, keyed_complete("mail.send/v1",
		    id, fence, i, 65536), &refusals);
		if (strstr(reply, "\"state\":\"committed\"") == NULL)
			fail_msg("complete %s: %s", id, reply);
		free(reply);
	}
	assert_int_equal(harness_stat(b, "effects_committed"), OWN_CLAIM_EFFECTS);
	assert_true(harness_stat(b, "table_evictions") >= OWN_CLAIM_EFFECTS - 4);
	assert_int_equal(harness_count_tasks(b), 0);
	print_message("complete retried %d times while the arena waited for "
	    "the index\n", refusals);
	harness_finish(b);
}

/*
 * Issue 27, items 5 and 7: with the least arena there is (one maximal
 * result) and the index's writes failing, so that nothing committed
 * can leave the arena:
 * - a result one byte over the largest the ledger takes is refused,
 *   typed (invalid_request), nothing committed, and the key completes
 *   with a maximal result afterwards;
 * - a complete of another effect is table_full, retryable, nothing
 *   committed (still reserved);
 * - a resolve applied of an effect whose lease lapsed is table_full,
 *   retryable, nothing committed (still outcome_unknown);
 * then, the index writable again, both go through on a retry (a
 * checkpoint is retried though no record came after the failed one),
 * and every receipt answers the same again.
 */
static const char *const least_args[] = { "--capacity", "64",
    "--result-bytes", "65552", NULL };

static void
test_arena_full_refuses_and_recovers(void **state)
{
	struct harness_shim *t = *state;
	struct broker	*b = &t->b;
	struct timespec	 ts = { 0, CACHE_POLL_MS * 1000000L };
	static char	 first[70000], second[70000], third[70000];
	static char	 got[70000];
	char		 fence0[HISTORY_FENCE_BYTES], fence1[HISTORY_FENCE_BYTES];
	char		 fence2[HISTORY_FENCE_BYTES], *reply;
	json_t		*req, *evidence;
	int		 polls, failed, refusals = 0;

	assert_int_equal(harness_start(b, least_args, t->env), 0);
	assert_int_equal(harness_stat(b, "result_arena_bytes"), 65552);
	harness_fault_rule(t->fault_file, INDEX_WRITES_FAIL);

	keyed_proceed(b, "mail.send/v1", "big", 0, fence0);
	reply = call_line(b, keyed_complete("mail.send/v1", "big", fence0, 0,
	    65537));
	assert_non_null(strstr(reply, "\"code\":\"invalid_request\""));
	free(reply);
	assert_string_equal(keyed_state(b, "mail.send/v1", "big"), "reserved");
	reply = call_line(b, keyed_complete("mail.send/v1", "big", fence0, 0,
	    65536));
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("a maximal result into the least arena: %s", reply);
	receipt_bytes(reply, first, sizeof first);
	free(reply);

	/* The arena holds only that result, which cannot be indexed. */
	keyed_proceed(b, "mail.send/v1", "next", 0, fence1);
	reply = call_line(b, keyed_complete("mail.send/v1", "next", fence1, 1,
	    42));
	if (!is_table_full(reply) ||
	    strstr(reply, "\"retryable\":true") == NULL)
		fail_msg("a complete into a full arena: %s", reply);
	free(reply);
	assert_string_equal(keyed_state(b, "mail.send/v1", "next"),
	    "reserved");

	keyed_proceed(b, "mail.send/v1", "lapsed", 100, fence2);
	for (polls = 0; strcmp(keyed_state(b, "mail.send/v1", "lapsed"),
	    "outcome_unknown") != 0; polls++) {
		assert_true(polls < CACHE_MAX_POLLS);
		nanosleep(&ts, NULL);
	}
	req = keyed_request("effect_resolve", "mail.send/v1", "lapsed");
	evidence = json_pack("{s:s, s:s}", "observed", "applied", "source",
	    "test probe");
	json_object_set_new(evidence, "result", effect_result(2, 100));
	json_object_set_new(req, "evidence", evidence);
	json_incref(req);
	reply = call_line(b, req);
	if (!is_table_full(reply) ||
	    strstr(reply, "\"retryable\":true") == NULL)
		fail_msg("a resolve applied into a full arena: %s", reply);
	free(reply);
	assert_string_equal(keyed_state(b, "mail.send/v1", "lapsed"),
	    "outcome_unknown");
	assert_int_equal(harness_stat(b, "effects_committed"), 1);
	/*
	 * Refused again until a checkpoint asked for since has failed: then
	 * the last checkpoint failed and no record came after it (refusals
	 * append none), which is where a checkpoint used to be asked for
	 * in vain until some other request wrote a record.
	 */
	failed = harness_log_count(b, INDEX_COMMIT_FAILED);
	for (polls = 0; harness_log_count(b, INDEX_COMMIT_FAILED) <= failed;
	    polls++) {
		assert_true(polls < CACHE_MAX_POLLS);
		json_incref(req);
		reply = call_line(b, req);
		assert_true(is_table_full(reply));
		free(reply);
		nanosleep(&ts, NULL);
	}

	/* The index writable again: both go through on a retry. */
	harness_fault_rule(t->fault_file, "");
	reply = call_until_not_full(b, keyed_complete("mail.send/v1", "next",
	    fence1, 1, 42), &refusals);
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("complete next: %s", reply);
	receipt_bytes(reply, second, sizeof second);
	free(reply);
	reply = call_until_not_full(b, req, &refusals);
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("resolve lapsed: %s", reply);
	receipt_bytes(reply, third, sizeof third);
	free(reply);

	reply = keyed_begin(b, "mail.send/v1", "big");
	receipt_bytes(reply, got, sizeof got);
	assert_string_equal(got, first);
	free(reply);
	reply = keyed_begin(b, "mail.send/v1", "next");
	receipt_bytes(reply, got, sizeof got);
	assert_string_equal(got, second);
	free(reply);
	reply = keyed_begin(b, "mail.send/v1", "lapsed");
	receipt_bytes(reply, got, sizeof got);
	assert_string_equal(got, third);
	free(reply);
	assert_int_equal(harness_count_tasks(b), 0);
	print_message("retried %d times until a checkpoint indexed the "
	    "arena's result\n", refusals);
	harness_shim_finish(t);
}

/*
 * Issue 27, item 7: --result-bytes less than one maximal result (and
 * its record's header) is refused at start-up, naming the least; the
 * least itself is taken.
 */
static void
test_result_bytes_least(void **state)
{
	struct broker	*b = *state;
	static const char *const small[] = { "--result-bytes", "65551", NULL };
	static const char *const tiny[] = { "--result-bytes", "64", NULL };

	assert_int_equal(harness_start(b, tiny, NULL), -1);
	assert_int_equal(b->exit_status, 1);
	assert_int_equal(harness_start(b, small, NULL), -1);
	assert_int_equal(b->exit_status, 1);
	assert_true(harness_log_count(b, "--result-bytes must be 0 (the "
	    "default) or at least 65552") >= 1);
	assert_int_equal(harness_start(b, least_args, NULL), 0);
	assert_int_equal(harness_stat(b, "result_arena_bytes"), 65552);
	assert_int_equal(harness_count_tasks(b), 0);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_small_capacity_evicts_and_answers_cold, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_restart_with_smaller_capacity, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_restart_below_the_journals_peak, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(test_kill_during_index_write,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(test_compact_leaves_tombstones,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_verify_effects_only_in_the_index, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_checkpoint_leaves_effects_to_the_index, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(test_verify_compares_effects,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(test_missing_index,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_index_older_than_checkpoint, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(test_small_stores_reclaim,
		    shim_setup, harness_shim_teardown),
		cmocka_unit_test_setup_teardown(
		    test_pruned_results_left_the_arena, shim_setup,
		    harness_shim_teardown),
		cmocka_unit_test_setup_teardown(test_pruned_after_eviction,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_exhausted_creation_keeps_checkpoints, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(test_long_ids_after_cycling,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_completion_not_blocked_by_own_claim, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_arena_full_refuses_and_recovers, shim_setup,
		    harness_shim_teardown),
		cmocka_unit_test_setup_teardown(test_result_bytes_least,
		    harness_setup, harness_teardown),
	};

	/* pruned_effect_receipt's SHA-256. */
	if (sodium_init() < 0)
		return harness_exit_status(1);
	return harness_exit_status(FILTER_RUN(tests));
}
