/* SPDX-License-Identifier: ISC */
/*
 * test_index_batches.c: an index pass (what a table of 32 wants at 17
 * committed, doc/journal.md "Index passes") or a checkpoint gives the
 * index its entries in several LMDB transactions (doc/journal.md,
 * "Writing: from the checkpoint"), and a crash between two of them
 * loses nothing.  The broker is killed at between_index_commits, once
 * in the first pass and once after a first pass completed: the index
 * then holds a batch of the pass that died, ahead of its
 * meta.checkpoint (0: no checkpoint is ever written there).  And once
 * in a full segment's checkpoint, no pass run: an early batch of it
 * leaves meta.checkpoint 0 too (only the last writes the segment's).
 * After the restart every acknowledged effect answers reused with its
 * receipt byte for byte, first from the table the journal's replay
 * filled, then, once enough later effects have evicted every one of
 * them from a table of 32 slots (128 for the checkpoint), from the index: so a replay that marked
 * a slot indexed that the index lacks (evictable, then lost) fails.
 * idemctl verify is clean after each.  And the journal fails while a
 * pass of several batches is under way, after its first commit,
 * with an effect's commit in the table not yet durable: that commit is
 * lost (its complete is not acknowledged), so it must not reach the
 * index (each batch waits for the journal first), and the retry
 * commits afresh.  And a checkpoint that cannot count the index's
 * receipts (every LMDB reader slot taken) fails and is done again,
 * never writing a header that says none is the index's alone.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
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
#include <lmdb.h>

#include "integration/filter.h"
#include "harness.h"
#include "store.h"

/*
 * 32 slots, and an arena that holds every result of them: a replay that
 * overflowed either would give the index every committed slot itself
 * (replay_make_room), and the marking this test watches would not run.
 * A pass is due at 17 committed (capacity / 2 + 1): the effects of its
 * second batch on were acknowledged before it began.
 */
#define BATCHES_CAPACITY	32
static const char *const small_args[] = { "--capacity", "32",
    "--result-bytes", "4194304", NULL };
/* An index pass runs in the background: table_full is retried meanwhile. */
#define BATCHES_FULL_RETRY_MS	2
#define BATCHES_FULL_MAX_RETRIES 5000
/* A fence's text ("<attempt>-<16 hex>") with room to spare. */
#define BATCHES_FENCE_BYTES	64
/*
 * Effects of 60,000-byte results: a pass of 17 of them gives the
 * index four transactions or more of CHECKPOINT_INDEX_COMMIT_BYTES
 * (256 KiB of pages counted: five such puts).
 */
#define BATCHES_EFFECTS		64
#define BATCHES_PAD		60000
/* Effects of small results before them, one batch: a first pass. */
#define BATCHES_FIRST		(BATCHES_CAPACITY / 2 + 1)
/* Later effects, small: each earlier one leaves the slots for them. */
#define BATCHES_LATER		(3 * BATCHES_CAPACITY)
#define BATCHES_CHECKPOINT_WAIT_MS 30000
/*
 * A pass done, in its own line's words ("index pass: <n> new in the
 * index"): not its failures ("index pass: the journal failed ...",
 * "index pass: index: ..."), nor a checkpoint's line, which goes on
 * (", <n> submissions").
 */
#define PASS_DONE		" new in the index\n"

static json_t *
begin_request(int i)
{
	char	id[32];

	snprintf(id, sizeof id, "fx-%d", i);
	return json_pack("{s:s, s:s, s:s, s:{s:i, s:s}}", "op", "effect_begin",
	    "client_submission_id", id, "effect_kind", "mail.send/v1",
	    "request", "n", i, "to", "ops@example");
}

/* fx-i's complete, applied, with pad bytes of 'x' in its result. */
static json_t *
complete_request(int i, const char *fence, size_t pad)
{
	char	 id[32], *x;
	json_t	*r;

	snprintf(id, sizeof id, "fx-%d", i);
	assert_non_null(x = malloc(pad + 1));
	memset(x, 'x', pad);
	x[pad] = '\0';
	r = json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:i, s:s, s:s}}", "op",
	    "effect_complete", "client_submission_id", id, "effect_kind",
	    "mail.send/v1", "fence", fence, "outcome", "applied", "result",
	    "message_id", i, "status", "sent", "pad", x);
	free(x);
	return r;
}

/*
 * request's reply, retried while the table is full (the pass that
 * frees it may be the one that dies); NULL once the broker died.
 */
static char *
call_until_dead(struct broker *b, json_t *request)
{
	struct timespec	 ts = { 0, BATCHES_FULL_RETRY_MS * 1000000L };
	char		*reply;
	int		 tries;

	for (tries = 0;; tries++) {
		json_incref(request);
		if ((reply = harness_raw_call_or_null(b, request)) == NULL ||
		    strstr(reply, "\"code\":\"table_full\"") == NULL)
			break;
		free(reply);
		reply = NULL;
		if (kill(b->pid, 0) != 0 ||
		    tries >= BATCHES_FULL_MAX_RETRIES)
			break;
		nanosleep(&ts, NULL);
	}
	json_decref(request);
	return reply;
}

/*
 * fx-i begun and completed with a result of pad bytes more: its
 * receipt (malloc'd), or NULL if the broker died on the way.
 */
static char *
commit_or_die(struct broker *b, int i, size_t pad)
{
	char	 fence[BATCHES_FENCE_BYTES], *reply, *receipt;
	json_t	*r;

	if ((reply = call_until_dead(b, begin_request(i))) == NULL)
		return NULL;
	assert_non_null(r = json_loads(reply, 0, NULL));
	if (strcmp(harness_str(r, "disposition"), "proceed") != 0)
		fail_msg("fx-%d: %s", i, reply);
	free(reply);
	snprintf(fence, sizeof fence, "%s", harness_str(r, "fence"));
	json_decref(r);
	if ((reply = call_until_dead(b, complete_request(i, fence,
	    pad))) == NULL)
		return NULL;
	if (strstr(reply, "\"state\":\"committed\"") == NULL)
		fail_msg("complete fx-%d: %s", i, reply);
	receipt = harness_receipt_bytes(reply);
	free(reply);
	return receipt;
}

/* Every one of fx-0 .. fx-(n-1) reused with receipts[i], byte for byte. */
static void
assert_reused(struct broker *b, char **receipts, int n, const char *when)
{
	char	*reply, *got;
	int	 i;

	for (i = 0; i < n; i++) {
		if ((reply = call_until_dead(b, begin_request(i))) == NULL)
			fail_msg("fx-%d %s: the broker died", i, when);
		if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
			fail_msg("fx-%d %s: %s", i, when, reply);
		got = harness_receipt_bytes(reply);
		if (strcmp(got, receipts[i]) != 0)
			fail_msg("fx-%d %s: receipt %s, first %s", i, when,
			    got, receipts[i]);
		free(got);
		free(reply);
	}
}

/* The journal's entries whose names start with prefix, in b's root. */
static int
journal_entries(struct broker *b, const char *prefix)
{
	char		 dir[PATH_MAX];
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_JOURNAL_DIR);
	assert_non_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* The checkpoint files in place (not temporaries) in b's journal. */
static int
checkpoints_in_place(struct broker *b)
{
	return journal_entries(b, "checkpoint-");
}

/* The journal's segments (*.jnl, not the one made ahead) in b's root. */
static int
segments_in_place(struct broker *b)
{
	char		 dir[PATH_MAX];
	DIR		*d;
	struct dirent	*e;
	size_t		 n;
	int		 count = 0;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_JOURNAL_DIR);
	assert_non_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		n = strlen(e->d_name);
		count += e->d_name[0] != '.' && n > 4 &&
		    strcmp(e->d_name + n - 4, ".jnl") == 0;
	}
	closedir(d);
	return count;
}

/* The index's stats (the broker stopped). */
static void
index_stats_of(struct broker *b, struct index_stats *st)
{
	struct index	 x;
	char		 dir[PATH_MAX];
	char		*cause = NULL;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_INDEX_DIR);
	if (index_open(&x, dir, 0, &cause) != 0)
		fail_msg("index_open: %s", cause);
	assert_int_equal(index_stats(&x, st, NULL), 0);
	index_close(&x);
}

/* idemctl verify finds nothing wrong (the broker running). */
static void
verify_clean(struct broker *b)
{
	char	out[8192];

	if (harness_idemctl(out, sizeof out, "--root '%s' verify",
	    b->root) != 0)
		fail_msg("idemctl verify: %s", out);
}

/*
 * The crash (first small effects, and a first pass waited for, if
 * first > 0), the index at the crash checked, the restart, and every
 * acknowledged effect reused byte for byte from the table and then,
 * all of them evicted, from the index.
 */
static void
kill_between_commits(struct broker *b, int first)
{
	static const char *const env[] = {
	    "IDEM_CRASH_AT=between_index_commits", NULL };
	char			*receipts[BATCHES_EFFECTS], *later;
	struct index_stats	 st;
	int			 i, answered = 0;

#ifndef IDEM_FAULT_INJECTION
	harness_skip("built without --enable-fault-injection: no crash "
	    "points");
	return;
#endif
	assert_int_equal(harness_start(b, small_args, env), 0);
	for (i = 0; i < first; i++)
		assert_non_null(receipts[i] = commit_or_die(b, i, 0));
	if (first > 0) {
		/* Small records: the first pass is one batch. */
		harness_wait_log(b, PASS_DONE, 1,
		    BATCHES_CHECKPOINT_WAIT_MS);
		answered = first;
	}
	for (i = first; i < BATCHES_EFFECTS; i++) {
		if ((receipts[i] = commit_or_die(b, i, BATCHES_PAD)) == NULL)
			break;
		answered = i + 1;
	}
	/* All answered: the broker never reached the point. */
	assert_true(answered < BATCHES_EFFECTS);
	harness_wait_dead(b);
	/*
	 * A pass is due at 17 committed; the 17th's reply races the pass
	 * that dies, so 16 large ones answered at least.
	 */
	assert_true(answered >= first + BATCHES_CAPACITY / 2);
	/*
	 * Between the commits: a batch in, the meta not moved, no file.
	 * Acknowledged effects the index lacks (the next batch's): replay
	 * must leave them unindexed, or they are evicted and lost.
	 */
	index_stats_of(b, &st);
	assert_true(st.entries < (uint64_t)answered);
	assert_true(st.entries >= (uint64_t)first + 1);
	assert_int_equal(st.checkpoint, 0);
	assert_int_equal(checkpoints_in_place(b), 0);
	assert_int_equal(harness_start(b, small_args, NULL), 0);
	assert_reused(b, receipts, answered, "after the restart");
	/* Three times the slots: every earlier one leaves the table. */
	for (i = BATCHES_EFFECTS; i < BATCHES_EFFECTS + BATCHES_LATER; i++) {
		assert_non_null(later = commit_or_die(b, i, 0));
		free(later);
	}
	assert_reused(b, receipts, answered, "evicted, from the index");
	verify_clean(b);
	for (i = 0; i < answered; i++)
		free(receipts[i]);
	harness_finish(b);
}

/* The first pass dies between its commits. */
static void
test_kill_between_index_commits(void **state)
{
	kill_between_commits(*state, 0);
}

/* The second one does: the first's entries in the index already. */
static void
test_kill_between_index_commits_after_one(void **state)
{
	kill_between_commits(*state, BATCHES_FIRST);
}

/*
 * A rotation's checkpoint, no index pass, dies between its commits:
 * 128 slots (a pass would be wanted at 65 committed) and an arena of
 * 16 MiB (its scout never wants one) while ROTATE_SEGMENT_BYTES fill
 * with effects of 60,000-byte results, about 17 of them: the first
 * rotation's checkpoint gives the index four transactions or more.  At
 * the crash the journal holds both segments and the checkpoint's
 * temporary (so a checkpoint died, not a pass, and none logged), the
 * index a batch with meta.checkpoint still 0 (an early batch that
 * wrote the segment's number fails here), and no checkpoint is in
 * place.  After the restart every acknowledged effect answers reused
 * with its first receipt, from the table and then, evicted by three
 * times the slots of later effects, from the index; idemctl verify is
 * clean.
 */
#define ROTATE_CAPACITY		128
#define ROTATE_SEGMENT_BYTES	"1048576"
/* Enough to fill the segment twice: the first rotation dies. */
#define ROTATE_EFFECTS		40

static void
test_kill_between_checkpoint_commits(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--capacity", "128",
	    "--result-bytes", "16777216", "--segment-bytes",
	    ROTATE_SEGMENT_BYTES, NULL };
	static const char *const env[] = {
	    "IDEM_CRASH_AT=between_index_commits", NULL };
	char			*receipts[ROTATE_EFFECTS], *later;
	struct index_stats	 st;
	int			 i, answered = 0;

#ifndef IDEM_FAULT_INJECTION
	harness_skip("built without --enable-fault-injection: no crash "
	    "points");
	return;
#endif
	assert_int_equal(harness_start(b, args, env), 0);
	for (i = 0; i < ROTATE_EFFECTS; i++) {
		if ((receipts[i] = commit_or_die(b, i, BATCHES_PAD)) == NULL)
			break;
		answered = i + 1;
	}
	/* All answered: the broker never reached the point. */
	assert_true(answered < ROTATE_EFFECTS);
	harness_wait_dead(b);
	assert_true(answered < ROTATE_CAPACITY / 2);
	/* No pass, not even a failed one: the rotation's checkpoint died. */
	assert_int_equal(harness_log_count(b, "index pass: "), 0);
	assert_int_equal(segments_in_place(b), 2);
	assert_int_equal(journal_entries(b, ".checkpoint-"), 1);
	/* A batch in, the meta not moved, no file in place. */
	index_stats_of(b, &st);
	assert_true(st.entries >= 1);
	assert_true(st.entries < (uint64_t)answered);
	assert_int_equal(st.checkpoint, 0);
	assert_int_equal(checkpoints_in_place(b), 0);
	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_reused(b, receipts, answered, "after the restart");
	for (i = ROTATE_EFFECTS; i < ROTATE_EFFECTS + 3 * ROTATE_CAPACITY;
	    i++) {
		assert_non_null(later = commit_or_die(b, i, 0));
		free(later);
	}
	assert_reused(b, receipts, answered, "evicted, from the index");
	verify_clean(b);
	for (i = 0; i < answered; i++)
		free(receipts[i]);
	harness_finish(b);
}

/*
 * The journal fails after an index pass's first commit.  A table
 * of 2048 slots: the index pass asked for at 1,025 committed reads the
 * first 1,024 slots (one chunk: 17 batches of 64 puts), and the effect
 * begun next, in slot 1,024, in the chunk after, followed by 80 more
 * committed.  The index pass is held after its first commit
 * (IDEM_CRASH_HOLD_AT=between_index_commits), those 80 are committed;
 * the journal's fdatasync is then held (faultshim holdfail), and that
 * effect's complete put in the table while it is; the index pass goes
 * on.  The next batch waits for the journal (copied_durable), and so
 * never puts the commit; without that wait the index pass reaches the
 * effect's chunk and commits it to the index.  That is looked for, for
 * up to FAIL_LOOK_MS, before the held fdatasync fails: an absence has
 * no event to await.  Then the complete is not acknowledged, the
 * index pass fails, the index does not hold the effect, its retried
 * complete (the same fence) commits, and idemctl verify is clean.
 */
#define FAIL_CAPACITY	2048
#define FAIL_FIRST	(FAIL_CAPACITY / 2)
/*
 * An id no other effect here has, whose key sorts before fx-1025 ..
 * fx-1105 ("fx-10" < "fx-11"): the first put of its chunk in the
 * index's key order, so that its batch is committed before the copy's
 * end, where the last batch waits for the journal in any case.
 */
#define FAIL_EFFECT	10000
/* More than one batch's puts (at most 64). */
#define FAIL_AFTER	80
#define FAIL_LOOK_MS	2000
#define FAIL_EVENT_MS	30000

static int
shim_setup(void **state)
{
	return harness_shim_setup(state, 300);
}

/* Does the index (opened to read, the broker running) hold fx-i? */
static int
index_holds(struct broker *b, int i)
{
	struct index		 x;
	struct index_entry	 e;
	char			 dir[PATH_MAX], key[64];
	char			*cause = NULL;
	uint8_t			*result;
	size_t			 n;
	int			 rc;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_INDEX_DIR);
	if (index_open(&x, dir, INDEX_READONLY, &cause) != 0)
		fail_msg("index_open: %s", cause);
	/* The index's key: the effect's kind, the separator, its id. */
	n = (size_t)snprintf(key, sizeof key, "mail.send/v1%cfx-%d",
	    SUBTAB_EFFECT_SEPARATOR, i);
	assert_non_null(result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES));
	rc = index_get(&x, key, n, &e, result, &cause);
	if (rc == -1)
		fail_msg("index_get: %s", cause);
	free(result);
	index_close(&x);
	return rc;
}

static void
test_journal_fails_between_index_commits(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	static const char *const args[] = { "--capacity", "2048",
	    "--result-bytes", "4194304", NULL };
	char			 fifo[PATH_MAX + 8], hold[PATH_MAX + 64];
	char			 fence[BATCHES_FENCE_BYTES], *line, *reply;
	char			*receipt;
	const char		*env[6];
	json_t			*r;
	int64_t			 until;
	int			 i, w, fd, leaked = 0;

#ifndef IDEM_FAULT_INJECTION
	harness_skip("built without --enable-fault-injection: no hold "
	    "points");
	return;
#endif
	snprintf(fifo, sizeof fifo, "%s.hold", t->fault_file);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(hold, sizeof hold,
	    "IDEM_CRASH_HOLD_AT=between_index_commits:%s", fifo);
	memcpy(env, t->env, 3 * sizeof env[0]);
	env[3] = hold;
	/*
	 * The index given each chunk's puts once the chunk is copied, so
	 * that the hold falls between the two chunks' copies (by default
	 * the puts wait for the whole copy, and the effect's chunk would be
	 * copied before its complete: no wait would be tested).
	 */
	env[4] = "IDEM_CRASH_INDEX_WINDOW=1";
	env[5] = NULL;
	assert_int_equal(harness_start(b, args, env), 0);
	for (i = 0; i < FAIL_FIRST; i++)
		free(commit_or_die(b, i, 0));
	/* The effect whose commit the journal loses: slot FAIL_FIRST. */
	assert_non_null(reply = call_until_dead(b, begin_request(FAIL_EFFECT)));
	assert_non_null(r = json_loads(reply, 0, NULL));
	if (strcmp(harness_str(r, "disposition"), "proceed") != 0)
		fail_msg("fx-%d: %s", FAIL_EFFECT, reply);
	snprintf(fence, sizeof fence, "%s", harness_str(r, "fence"));
	json_decref(r);
	free(reply);
	/* The 1,025th commit: the index pass, held after its first commit. */
	free(commit_or_die(b, FAIL_FIRST, 0));
	assert_true((w = open(fifo, O_WRONLY | O_CLOEXEC)) >= 0);
	assert_false(index_holds(b, FAIL_EFFECT));
	/*
	 * Slots after it, committed (durable) while the pass is held:
	 * its batch fills, and is committed before the copy's end (the
	 * last batch waits for the journal in any case).
	 */
	for (i = FAIL_FIRST + 1; i <= FAIL_FIRST + FAIL_AFTER; i++)
		free(commit_or_die(b, i, 0));

	harness_fault_rule(t->fault_file, "holdfail .jnl EIO");
	r = complete_request(FAIL_EFFECT, fence, 0);
	assert_non_null(line = json_dumps(r, JSON_COMPACT));
	json_decref(r);
	assert_true((fd = harness_raw_connect(b)) >= 0);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	harness_wait_log(b, "faultshim: a sync held", 1, FAIL_EVENT_MS);
	close(w);			/* the pass goes on */
	for (until = harness_now_ms() + FAIL_LOOK_MS;
	    !leaked && harness_now_ms() < until;)
		leaked = index_holds(b, FAIL_EFFECT);
	harness_fault_rule(t->fault_file, "");	/* the held sync fails */
	assert_non_null(reply = harness_raw_read_line(fd));
	close(fd);
	if (strstr(reply, "\"state\":\"committed\"") != NULL)
		fail_msg("a commit the journal lost acknowledged: %s", reply);
	free(reply);
	if (leaked)
		fail_msg("fx-%d's lost commit reached the index", FAIL_EFFECT);
	harness_wait_log(b, "index pass: the journal failed while the table "
	    "was read", 1, FAIL_EVENT_MS);
	assert_false(index_holds(b, FAIL_EFFECT));
	/* The retry (the journal reopened) commits afresh. */
	for (until = harness_now_ms() + FAIL_EVENT_MS;;) {
		reply = call_until_dead(b, complete_request(FAIL_EFFECT, fence,
		    0));
		assert_non_null(reply);
		if (strstr(reply, "\"state\":\"committed\"") != NULL)
			break;
		if (strstr(reply, "\"retryable\":true") == NULL ||
		    harness_now_ms() > until)
			fail_msg("retried complete fx-%d: %s", FAIL_EFFECT,
			    reply);
		free(reply);
	}
	receipt = harness_receipt_bytes(reply);
	free(reply);
	assert_non_null(reply = call_until_dead(b, begin_request(FAIL_EFFECT)));
	if (strstr(reply, "\"disposition\":\"reused\"") == NULL)
		fail_msg("fx-%d after its retry: %s", FAIL_EFFECT, reply);
	line = harness_receipt_bytes(reply);
	assert_string_equal(line, receipt);
	free(line);
	free(reply);
	free(receipt);
	verify_clean(b);
	unlink(fifo);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * What the arena's scout wants is an index pass, not a checkpoint: with
 * the least arena (PASS_ARENA, one maximal result's record) and the
 * default capacity, PASS_EFFECTS effects with results of about 4 KiB
 * (three laps of the arena: each commits only once the arena reused
 * earlier results, which it does only for entries the index has) make
 * index passes and no rotation: one segment, no checkpoint file, the
 * index's meta.checkpoint 0.  Every effect answers reused with its
 * first receipt, and again after a kill -9 and a restart, whose replay
 * of the one segment puts more results through the arena than it
 * holds.  Before index passes each want was an early rotation with its
 * checkpoint file.
 */
#define PASS_ARENA	"65552"
#define PASS_EFFECTS	40
#define PASS_PAD	4000

/* PASS_EFFECTS effects through b, their receipts kept. */
static void
pass_effects(struct broker *b, char **receipts)
{
	int	i;

	for (i = 0; i < PASS_EFFECTS; i++)
		assert_non_null(receipts[i] = commit_or_die(b, i, PASS_PAD));
}

static void
test_arena_wants_an_index_pass(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--result-bytes", PASS_ARENA,
	    NULL };
	char			*receipts[PASS_EFFECTS];
	struct index_stats	 st;
	int			 i;

	assert_int_equal(harness_start(b, args, NULL), 0);
	pass_effects(b, receipts);
	assert_true(harness_log_count(b, PASS_DONE) >= 1);
	assert_int_equal(harness_log_count(b, "checkpoint checkpoint-"), 0);
	assert_reused(b, receipts, PASS_EFFECTS, "after the passes");
	harness_kill(b);
	assert_int_equal(segments_in_place(b), 1);
	assert_int_equal(checkpoints_in_place(b), 0);
	index_stats_of(b, &st);
	assert_true(st.entries >= 1);
	assert_int_equal(st.checkpoint, 0);
	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_reused(b, receipts, PASS_EFFECTS, "after kill -9");
	assert_int_equal(segments_in_place(b), 1);
	assert_int_equal(checkpoints_in_place(b), 0);
	verify_clean(b);
	for (i = 0; i < PASS_EFFECTS; i++)
		free(receipts[i]);
	harness_finish(b);
}

/*
 * A full segment still rotates and checkpoints: the same run with
 * --segment-bytes 4096 writes checkpoint files (and prunes the
 * segments before them), every effect reused with its first receipt,
 * also after a kill -9.
 */
static void
test_full_segment_checkpoints(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--result-bytes", PASS_ARENA,
	    "--segment-bytes", "4096", NULL };
	char			*receipts[PASS_EFFECTS];
	int			 i;

	assert_int_equal(harness_start(b, args, NULL), 0);
	pass_effects(b, receipts);
	harness_wait_log(b, "checkpoint checkpoint-", 1,
	    BATCHES_CHECKPOINT_WAIT_MS);
	assert_reused(b, receipts, PASS_EFFECTS, "after the checkpoints");
	harness_kill(b);
	assert_true(checkpoints_in_place(b) >= 1);
	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_reused(b, receipts, PASS_EFFECTS, "after kill -9");
	verify_clean(b);
	for (i = 0; i < PASS_EFFECTS; i++)
		free(receipts[i]);
	harness_finish(b);
}

/*
 * A rotation's checkpoint that cannot count the index's receipts (every
 * LMDB reader slot taken) fails, is done again, and never writes a
 * header that says no receipt is the index's alone.  One worker (its
 * read transaction made by its first lookup, then reset and renewed:
 * its slot stays), a table of 16 and 4 MiB segments filled by effects
 * of 60,000-byte results: the first rotation's checkpoint finds the
 * index holding more than the table and counts the receipts only the
 * index holds (offset 48).  The test then takes every free reader slot
 * and fills the next segment: that checkpoint fails saying why, and
 * the newest checkpoint is still the one with a count; small effects
 * (a second later, a few megabytes short of the next rotation) see it
 * fail again in the same segment.  The slots given back, the same
 * checkpoint is written, with a count, and after a kill every large
 * effect answers reused with its first receipt.  Fails with the count
 * guessed as before (a failed count taken for 0): the checkpoint
 * written while the slots were taken said 0, and a lost index would
 * have been "rebuilt" without the receipts it alone held.
 */
/* At most: two rotations take about 140. */
#define READERS_BIG		300
/* At most: a second's worth of small effects, twice. */
#define READERS_SMALL		20000
#define READERS_SMALL_ID	100000	/* the small effects' first id */
#define READERS_MAX_TXNS	1024
#define CHECKPOINT_WRITTEN	" new in the index, "
/* "checkpoint-<16 hex>.snap" */
#define CHECKPOINT_NAME_BYTES	32
#define CHECKPOINT_UNCOUNTED	\
	": not written: the index's receipts could not be counted"

/*
 * Every reader slot of b's index that no process holds, taken by read
 * transactions of this process (MDB_NOTLS: many in one thread): how
 * many, into txns.
 */
static int
take_reader_slots(struct broker *b, MDB_env **env, MDB_txn **txns)
{
	char	dir[PATH_MAX];
	int	taken, rc;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_INDEX_DIR);
	assert_int_equal(mdb_env_create(env), 0);
	assert_int_equal(mdb_env_set_maxdbs(*env, 2), 0);
	assert_int_equal(mdb_env_open(*env, dir, MDB_RDONLY | MDB_NOTLS,
	    0600), 0);
	for (taken = 0; taken < READERS_MAX_TXNS; taken++) {
		rc = mdb_txn_begin(*env, NULL, MDB_RDONLY, &txns[taken]);
		if (rc == MDB_READERS_FULL)
			break;
		assert_int_equal(rc, 0);
	}
	assert_true(taken > 0 && taken < READERS_MAX_TXNS);
	return taken;
}

static void
give_reader_slots_back(MDB_env *env, MDB_txn **txns, int taken)
{
	int	i;

	for (i = 0; i < taken; i++)
		mdb_txn_abort(txns[i]);
	mdb_env_close(env);
}

/* The newest checkpoint's segment, and its count of index-only receipts. */
static uint64_t
newest_index_only(struct broker *b, uint64_t *segment)
{
	char		 dir[PATH_MAX];
	char		*cause = NULL;
	uint64_t	 count;

	snprintf(dir, sizeof dir, "%s/%s", b->root, IDEM_JOURNAL_DIR);
	if (checkpoint_index_only(dir, segment, &count, &cause) != 0)
		fail_msg("checkpoint_index_only: %s", cause);
	return count;
}

/*
 * The checkpoint the n-th (from 1) log line holding needle names
 * ("checkpoint checkpoint-<16 hex>.snap: ..."), into name.
 */
static void
logged_checkpoint(struct broker *b, const char *needle, int n, char *name,
    size_t size)
{
	char	*log, *at, *from;
	int	 i;

	assert_non_null(log = harness_read_log(b));
	for (i = 0, at = log; i < n; i++, at++)
		if ((at = strstr(at, needle)) == NULL)
			fail_msg("no %d-th \"%s\" in the log", n, needle);
	at--;
	while (at > log && at[-1] != '\n')
		at--;
	if ((from = strstr(at, "checkpoint-")) == NULL ||
	    strlen(from) < CHECKPOINT_NAME_BYTES)
		fail_msg("no checkpoint named in %.200s", at);
	assert_true(size > CHECKPOINT_NAME_BYTES);
	memcpy(name, from, CHECKPOINT_NAME_BYTES);
	name[CHECKPOINT_NAME_BYTES] = '\0';
	free(log);
}

static void
test_uncounted_index_fails_the_checkpoint(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--workers", "1", "--capacity",
	    "16", "--segment-bytes", "4194304", "--result-bytes", "33554432",
	    NULL };
	static MDB_txn		*txns[READERS_MAX_TXNS];
	char			*receipts[READERS_BIG], *small;
	char			 failed[40], again[40];
	char			 done[40];
	uint64_t		 segment, count, first;
	MDB_env			*env;
	int			 i, big = 0, taken, written;

	assert_int_equal(harness_start(b, args, NULL), 0);
	/* A checkpoint that counts receipts only the index holds. */
	while (big < READERS_BIG && (harness_log_count(b,
	    CHECKPOINT_WRITTEN) == 0 || newest_index_only(b, &segment) == 0)) {
		assert_non_null(receipts[big] = commit_or_die(b, big,
		    BATCHES_PAD));
		big++;
	}
	assert_true(big < READERS_BIG);
	first = segment;
	written = harness_log_count(b, CHECKPOINT_WRITTEN);

	/* Every reader slot the broker's processes do not hold. */
	taken = take_reader_slots(b, &env, txns);

	/* The next rotation: its checkpoint cannot count, and fails. */
	while (big < READERS_BIG &&
	    harness_log_count(b, CHECKPOINT_UNCOUNTED) == 0 &&
	    harness_log_count(b, CHECKPOINT_WRITTEN) == written) {
		assert_non_null(receipts[big] = commit_or_die(b, big,
		    BATCHES_PAD));
		big++;
	}
	count = newest_index_only(b, &segment);
	if (harness_log_count(b, CHECKPOINT_WRITTEN) != written)
		fail_msg("a checkpoint was written while the index could not "
		    "be counted: checkpoint-%016llx.snap, %llu receipts only "
		    "in the index", (unsigned long long)segment,
		    (unsigned long long)count);
	assert_int_equal(harness_log_count(b, CHECKPOINT_UNCOUNTED), 1);
	assert_int_equal(segment, first);
	assert_true(count > 0);
	logged_checkpoint(b, CHECKPOINT_UNCOUNTED, 1, failed, sizeof failed);
	assert_true(strcmp(failed, "checkpoint-0000000000000000.snap") > 0);

	/* Done again a second later, in its segment: fails again. */
	for (i = 0; i < READERS_SMALL &&
	    harness_log_count(b, CHECKPOINT_UNCOUNTED) < 2; i++) {
		assert_non_null(small = commit_or_die(b, READERS_SMALL_ID + i,
		    0));
		free(small);
	}
	assert_int_equal(harness_log_count(b, CHECKPOINT_UNCOUNTED), 2);
	logged_checkpoint(b, CHECKPOINT_UNCOUNTED, 2, again, sizeof again);
	assert_string_equal(again, failed);
	assert_int_equal(harness_log_count(b, CHECKPOINT_WRITTEN), written);
	count = newest_index_only(b, &segment);
	assert_int_equal(segment, first);
	assert_true(count > 0);

	/* The slots given back: the same checkpoint, with its count. */
	give_reader_slots_back(env, txns, taken);
	for (; i < 2 * READERS_SMALL &&
	    harness_log_count(b, CHECKPOINT_WRITTEN) == written; i++) {
		assert_non_null(small = commit_or_die(b, READERS_SMALL_ID + i,
		    0));
		free(small);
	}
	assert_int_equal(harness_log_count(b, CHECKPOINT_WRITTEN),
	    written + 1);
	logged_checkpoint(b, CHECKPOINT_WRITTEN, written + 1, done,
	    sizeof done);
	assert_string_equal(done, failed);
	count = newest_index_only(b, &segment);
	assert_true(segment > first);
	assert_true(count > 0);

	harness_kill(b);
	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_reused(b, receipts, big, "after kill -9");
	verify_clean(b);
	for (i = 0; i < big; i++)
		free(receipts[i]);
	harness_finish(b);
}

/* Entries of root/.idem whose names start with "index.damaged-". */
static int
indexes_moved_aside(struct broker *b)
{
	char		 dir[PATH_MAX];
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	snprintf(dir, sizeof dir, "%s/.idem", b->root);
	assert_non_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "index.damaged-", 14) == 0)
			n++;
	closedir(d);
	return n;
}

/*
 * Start-up while other processes hold every reader slot of the index:
 * not damage.  The broker refuses to start, saying why, and leaves the
 * index where it is (and idemctl verify says index_busy, not corrupt); with the slots given back it starts on it and
 * every receipt is there.  Before, a failed count of a healthy index
 * was taken for damage and the index moved aside (then rebuilt from
 * the journal, or, had a checkpoint left receipts to the index alone,
 * refused as missing).
 */
static void
test_full_reader_table_at_start_up(void **state)
{
	struct broker		*b = *state;
	static const char *const args[] = { "--workers", "1", NULL };
	static MDB_txn		*txns[READERS_MAX_TXNS];
	char			*receipts[4], *log, out[4096];
	MDB_env			*env;
	int			 i, taken;

	assert_int_equal(harness_start(b, args, NULL), 0);
	for (i = 0; i < 4; i++)
		assert_non_null(receipts[i] = commit_or_die(b, i, 0));
	assert_int_equal(harness_stop(b), 0);

	taken = take_reader_slots(b, &env, txns);

	assert_int_equal(harness_start(b, args, NULL), -1);
	assert_non_null(log = harness_read_log(b));
	if (strstr(log, "MDB_READERS_FULL") == NULL)
		fail_msg("the refusal does not say why: %s", log);
	free(log);
	assert_int_equal(indexes_moved_aside(b), 0);
	/* verify says so too: busy, not corrupt. */
	if (harness_idemctl(out, sizeof out, "--root '%s' verify --json",
	    b->root) != 1 || strstr(out, "\"index_busy\"") == NULL ||
	    strstr(out, "index_corrupt") != NULL)
		fail_msg("verify with every reader slot taken: %s", out);

	give_reader_slots_back(env, txns, taken);
	assert_int_equal(harness_start(b, args, NULL), 0);
	assert_reused(b, receipts, 4, "after the slots came back");
	assert_int_equal(indexes_moved_aside(b), 0);
	for (i = 0; i < 4; i++)
		free(receipts[i]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kill_between_index_commits,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_kill_between_index_commits_after_one, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_kill_between_checkpoint_commits, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_journal_fails_between_index_commits, shim_setup,
		    harness_shim_teardown),
		cmocka_unit_test_setup_teardown(test_arena_wants_an_index_pass,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(test_full_segment_checkpoints,
		    harness_setup, harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_uncounted_index_fails_the_checkpoint, harness_setup,
		    harness_teardown),
		cmocka_unit_test_setup_teardown(
		    test_full_reader_table_at_start_up, harness_setup,
		    harness_teardown),
	};

	return harness_exit_status(FILTER_RUN(tests));
}
