/* SPDX-License-Identifier: ISC */
/*
 * test_checkpoint.c: checkpoints keep the journal bounded and lose
 * nothing, also when the broker dies while writing one or right after
 * putting one in place.  The broker runs with a tiny --segment-bytes so
 * that a few dozen creations rotate segments and checkpoint the table.
 * A checkpoint that ends, written or failed, clears the segment's
 * checkpoint_running, so that the next one can be asked for.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "harness.h"
#include "shm.h"

#define CKPT_TASKS	120

static const char *const ckpt_args[] = { "--segment-bytes", "4096", NULL };

struct journal_files {
	int	segments;
	int	checkpoints;
	int	temporaries;
	int	made_ahead;	/* .next-N.tmp: a segment made ahead */
};

static void
count_journal(const struct broker *b, struct journal_files *jf)
{
	char		 path[400];
	DIR		*d;
	struct dirent	*e;
	size_t		 n;

	memset(jf, 0, sizeof *jf);
	snprintf(path, sizeof path, "%s/.idem/journal", b->root);
	assert_non_null(d = opendir(path));
	while ((e = readdir(d)) != NULL) {
		n = strlen(e->d_name);
		if (n > 4 && strcmp(e->d_name + n - 4, ".jnl") == 0)
			jf->segments++;
		else if (strncmp(e->d_name, "checkpoint-", 11) == 0)
			jf->checkpoints++;
		else if (strncmp(e->d_name, ".next-", 6) == 0)
			jf->made_ahead++;
		else if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 &&
		    strcmp(e->d_name, "..") != 0)
			jf->temporaries++;
	}
	closedir(d);
}

static void
task_for(int i, char *id, size_t id_size, struct idem_task *task,
    char *subject, size_t subject_size)
{
	snprintf(id, id_size, "ckpt-%d", i);
	snprintf(subject, subject_size, "checkpointed task %d", i);
	memset(task, 0, sizeof *task);
	task->sender = "PM";
	task->recipient = "DEV";
	task->subject = subject;
}

/*
 * Create until the broker dies or CKPT_TASKS are done; keep every receipt
 * the broker gave.  Returns how many were answered.
 */
static int
create_all(struct broker *b, char receipts[][2048])
{
	struct idem_conn	*conn;
	struct idem_task	 task;
	struct idem_write_result result;
	struct idem_error	 err;
	char			 id[32], subject[64];
	int			 i;

	assert_non_null(conn = harness_connect(b));
	for (i = 0; i < CKPT_TASKS; i++) {
		task_for(i, id, sizeof id, &task, subject, sizeof subject);
		if (idem_write_task(conn, id, &task, &result, &err) != 0)
			break;
		assert_int_equal(result.disposition, IDEM_CREATED);
		snprintf(receipts[i], 2048, "%s", result.receipt.raw);
	}
	idem_close(conn);
	return i;
}

/* Every answered submission comes back byte for byte; the rest complete. */
static void
check_receipts(struct broker *b, char receipts[][2048], int answered)
{
	struct idem_conn	*conn;
	struct idem_task	 task;
	struct idem_write_result result;
	struct idem_error	 err;
	char			 id[32], subject[64];
	int			 i;

	assert_non_null(conn = harness_connect(b));
	for (i = 0; i < CKPT_TASKS; i++) {
		task_for(i, id, sizeof id, &task, subject, sizeof subject);
		assert_int_equal(idem_write_task(conn, id, &task, &result,
		    &err), 0);
		if (i < answered) {
			assert_int_equal(result.disposition, IDEM_REUSED);
			assert_string_equal(result.receipt.raw, receipts[i]);
		} else
			assert_true(result.disposition == IDEM_CREATED ||
			    result.disposition == IDEM_REUSED);
	}
	idem_close(conn);
}

/* check_receipts, and no other task in the workspace. */
static void
check_all(struct broker *b, char receipts[][2048], int answered)
{
	check_receipts(b, receipts, answered);
	assert_int_equal(harness_count_tasks(b), CKPT_TASKS);
}

static void
test_checkpoints_bound_the_journal(void **state)
{
	static char		 receipts[CKPT_TASKS][2048];
	struct broker		 b;
	struct journal_files	 jf;

	harness_fresh_root(&b);
	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	assert_int_equal(create_all(&b, receipts), CKPT_TASKS);
	assert_int_equal(harness_stop(&b), 0);
	/*
	 * Every rotation took the segment made ahead (doc/journal.md, "The
	 * next segment made ahead"), rotations close together too: none
	 * was created on the journaling thread.
	 */
	assert_true(harness_log_count(&b, "checkpoint checkpoint-") >= 3);
	assert_int_equal(harness_log_count(&b, "none was made ahead"), 0);
	/* Old segments are gone: one checkpoint and at most two segments. */
	count_journal(&b, &jf);
	assert_int_equal(jf.checkpoints, 1);
	assert_true(jf.segments >= 1 && jf.segments <= 2);
	assert_int_equal(jf.temporaries, 0);
	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	check_all(&b, receipts, CKPT_TASKS);
	harness_cleanup(&b);
}

/*
 * A broker on a fresh root killed at crash point, with tasks created
 * until it died: how many were answered (receipts), more than none and
 * fewer than all (the first checkpoint comes long before CKPT_TASKS).
 */
static int
crash_at(struct broker *b, const char *point,
    char receipts[CKPT_TASKS][2048])
{
	char	env[64];
	int	answered;

	snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", point);
	harness_fresh_root(b);
	assert_int_equal(harness_start(b, ckpt_args,
	    (const char *const []){ env, NULL }), 0);
	answered = create_all(b, receipts);
	assert_true(answered > 0 && answered < CKPT_TASKS);
	harness_wait_dead(b);
	assert_int_equal(b->exit_status, 128 + 9);
	return answered;
}

static void
run_crash(const char *point)
{
	static char		 receipts[CKPT_TASKS][2048];
	struct broker		 b;
	struct journal_files	 jf;
	int			 answered;

	answered = crash_at(&b, point, receipts);
	count_journal(&b, &jf);
	if (strcmp(point, "during_checkpoint") == 0)
		assert_int_equal(jf.temporaries, 1);
	else
		assert_int_equal(jf.checkpoints, 1);

	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	check_all(&b, receipts, answered);
	assert_int_equal(harness_stop(&b), 0);
	/* Start-up removed what the crash left. */
	count_journal(&b, &jf);
	assert_int_equal(jf.temporaries, 0);
	harness_cleanup(&b);
}

/*
 * A crash at a rotation to the segment made ahead (doc/journal.md, "The
 * next segment made ahead"): before its rename the journal is segment 1
 * with the file made ahead beside it, which start-up ignores; after it,
 * segment 2 holds no record yet.  Either way the restart answers every
 * receipt acknowledged before, and a clean stop leaves no file made
 * ahead.
 */
static void
run_crash_next(const char *point, int renamed)
{
	static char		 receipts[CKPT_TASKS][2048];
	struct broker		 b;
	struct journal_files	 jf;
	int			 answered;

	answered = crash_at(&b, point, receipts);
	count_journal(&b, &jf);
	assert_int_equal(jf.checkpoints, 0);
	assert_int_equal(jf.segments, renamed ? 2 : 1);
	assert_int_equal(jf.made_ahead, renamed ? 0 : 1);

	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	check_all(&b, receipts, answered);
	assert_int_equal(harness_stop(&b), 0);
	count_journal(&b, &jf);
	assert_int_equal(jf.made_ahead, 0);
	assert_int_equal(jf.temporaries, 0);
	harness_cleanup(&b);
}

static void
test_crash_before_next_segment_renamed(void **state)
{
	run_crash_next("before_next_segment_renamed", 0);
}

static void
test_crash_after_next_segment_renamed(void **state)
{
	run_crash_next("after_next_segment_renamed", 1);
}

/* The highest segment number in dir (0: none). */
static unsigned long long
last_segment(const char *dir)
{
	DIR			*d;
	struct dirent		*e;
	unsigned long long	 n, last = 0;
	char			*end;

	assert_non_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		n = strtoull(e->d_name, &end, 16);
		if (end == e->d_name + 16 && strcmp(end, ".jnl") == 0 &&
		    n > last)
			last = n;
	}
	closedir(d);
	return last;
}

static void
plant_stale(const char *dir, unsigned long long n)
{
	char	path[512];
	FILE	*f;

	snprintf(path, sizeof path, "%s/.next-%016llx.tmp", dir, n);
	assert_non_null(f = fopen(path, "w"));
	assert_int_equal(fputs("stale: no segment header\n", f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/*
 * .next-K.tmp files a crash left (doc/journal.md, "The next segment made
 * ahead"), with K before, equal to and after the last segment's number
 * L (L+1: the one a crash left half made; L+2: one further), holding no
 * segment's bytes.  verify, journal dump and backup take no notice of
 * them (the backup holds none), start-up is unharmed, and the next
 * rotation takes a segment made ahead afresh (none created on the
 * journaling thread, none of the stale bytes renamed into place: the
 * restart after it answers every receipt); the making of a number
 * replaces the stale file of that number, and a checkpoint removes
 * those of numbers up to its own, so after two rotations a clean stop
 * leaves none.  Fails without the checkpoint's
 * cleanup of old .next files.
 */
static void
test_stale_made_ahead_files(void **state)
{
	static char		 receipts[CKPT_TASKS][2048];
	static char		 out[65536];
	struct broker		 b;
	struct journal_files	 jf;
	char			 dir[400], dest[512], id[64], path[600];
	unsigned long long	 last;
	json_t			*reply;
	int			 i, checkpoints;

	harness_fresh_root(&b);
	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	assert_int_equal(create_all(&b, receipts), CKPT_TASKS);
	assert_int_equal(harness_stop(&b), 0);
	snprintf(dir, sizeof dir, "%s/.idem/journal", b.root);
	last = last_segment(dir);
	assert_true(last >= 2);
	plant_stale(dir, last - 1);
	plant_stale(dir, last);
	plant_stale(dir, last + 1);
	plant_stale(dir, last + 2);

	if (harness_idemctl(out, sizeof out, "--root '%s' verify", b.root) != 0)
		fail_msg("idemctl verify: %s", out);
	/* Its output is long: only whether it reads the journal whole. */
	if (harness_idemctl(out, sizeof out,
	    "--root '%s' journal dump >/dev/null", b.root) != 0)
		fail_msg("idemctl journal dump failed");
	snprintf(dest, sizeof dest, "%s.backup", b.root);
	if (harness_idemctl(out, sizeof out, "--root '%s' backup '%s' "
	    "--with-workspace", b.root, dest) != 0)
		fail_msg("idemctl backup: %s", out);
	snprintf(path, sizeof path, "%s/.idem/journal/.next-%016llx.tmp",
	    dest, last);
	assert_int_equal(access(path, F_OK), -1);
	if (harness_idemctl(out, sizeof out, "--root '%s' verify", dest) != 0)
		fail_msg("idemctl verify of the backup: %s", out);
	snprintf(path, sizeof path, "rm -rf '%s'", dest);
	assert_int_equal(system(path), 0);

	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	check_all(&b, receipts, CKPT_TASKS);
	/*
	 * New tasks until two rotations and their checkpoints: to L+1, to
	 * L+2 (its stale file replaced by the making), each checkpoint's
	 * prune done before a stop (the making after it may not be).
	 */
	checkpoints = harness_log_count(&b, "checkpoint checkpoint-");
	for (i = 0; harness_log_count(&b, "checkpoint checkpoint-") <
	    checkpoints + 2; i++) {
		assert_true(i < 400);
		snprintf(id, sizeof id, "stale/%d", i);
		reply = harness_submit(&b, id, "after the stale files");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
	}
	assert_int_equal(harness_log_count(&b, "none was made ahead"), 0);
	assert_int_equal(harness_stop(&b), 0);
	count_journal(&b, &jf);
	assert_int_equal(jf.made_ahead, 0);
	assert_int_equal(jf.temporaries, 0);
	assert_int_equal(harness_start(&b, ckpt_args, NULL), 0);
	check_receipts(&b, receipts, CKPT_TASKS);
	harness_cleanup(&b);
}

static void
test_crash_during_checkpoint(void **state)
{
	run_crash("during_checkpoint");
}

static void
test_crash_after_checkpoint_renamed(void **state)
{
	run_crash("after_checkpoint_renamed");
}

/* What a checkpoint logs when written, and when the index failed it. */
#define CKPT_WRITTEN		"checkpoint checkpoint-"
#define CKPT_INDEX_FAILED	"commit: Input/output error"
/* The rule that fails the index's writes, so a checkpoint's too. */
#define CKPT_INDEX_WRITES_FAIL	"write .idem/index EIO"
/* Tasks a checkpoint must come within (one per ~15 at 4096 bytes). */
#define CKPT_RUN_MAX_TASKS	1000
/* checkpoint_running is a flag in the segment: polled, within a bound. */
#define CKPT_RUNNING_POLL_MS	5
#define CKPT_RUNNING_WAIT_MS	10000

/*
 * Create tasks (run-N, from *next on) until the log holds needle once
 * more than before, then no more: the journal is idle from there on.
 */
static void
create_until_logged(struct broker *b, int *next, const char *needle)
{
	struct idem_conn	*conn;
	struct idem_task	 task;
	struct idem_write_result result;
	struct idem_error	 err;
	char			 id[32], subject[64];
	int			 before = harness_log_count(b, needle), n;

	assert_non_null(conn = harness_connect(b));
	for (n = 0; harness_log_count(b, needle) == before; n++) {
		if (n == CKPT_RUN_MAX_TASKS)
			fail_msg("%d tasks and no \"%s\" logged", n, needle);
		snprintf(id, sizeof id, "run-%d", (*next)++);
		snprintf(subject, sizeof subject, "checkpoint run %d", *next);
		memset(&task, 0, sizeof task);
		task.sender = "PM";
		task.recipient = "DEV";
		task.subject = subject;
		if (idem_write_task(conn, id, &task, &result, &err) != 0)
			fail_msg("%s: %s", id, err.message);
		assert_int_equal(result.disposition, IDEM_CREATED);
	}
	idem_close(conn);
}

/*
 * The segment's checkpoint_running is 0 again within the bound, no
 * request sent meanwhile: the checkpoint that was logged has ended and
 * said so (a later rotation's would have ended too).
 */
static void
await_not_running(const struct shm_segment *seg, const char *after)
{
	struct timespec	 ts = { 0, CKPT_RUNNING_POLL_MS * 1000000L };
	int64_t		 start = harness_now_ms();

	while (atomic_load(&seg->header->checkpoint_running)) {
		if (harness_now_ms() - start > CKPT_RUNNING_WAIT_MS)
			fail_msg("checkpoint_running still set %d ms after a "
			    "checkpoint %s", CKPT_RUNNING_WAIT_MS, after);
		nanosleep(&ts, NULL);
	}
}

/*
 * The checkpoint thread clears checkpoint_running when a checkpoint
 * ends, written and failed alike: it is what the arena's scout and the
 * journaler's rotation wait on (test_rings'
 * test_arena_scout_waits_for_running_checkpoint: the scout asks for
 * none while it is set), so a flag left set asks for no checkpoint
 * again.  A checkpoint is written, then one fails (the index's writes
 * fail), then, the index writable again, the next is written.  Fails if
 * the clearing is removed (the first wait times out).
 */
static void
test_checkpoint_end_clears_running(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	struct shm_segment	 seg;
	char			 root[PATH_MAX], *cause = NULL;
	int			 next = 0;

	assert_int_equal(harness_start(b, ckpt_args, t->env), 0);
	assert_non_null(realpath(b->root, root));
	memset(&seg, 0, sizeof seg);
	if (shm_attach(root, &seg, &cause) != 0)
		fail_msg("shm_attach: %s", cause);
	assert_int_equal(atomic_load(&seg.header->checkpoint_running), 0);

	create_until_logged(b, &next, CKPT_WRITTEN);
	await_not_running(&seg, "was written");

	harness_fault_rule(t->fault_file, CKPT_INDEX_WRITES_FAIL);
	create_until_logged(b, &next, CKPT_INDEX_FAILED);
	await_not_running(&seg, "failed");

	harness_fault_rule(t->fault_file, "");
	create_until_logged(b, &next, CKPT_WRITTEN);
	await_not_running(&seg, "was written after a failed one");
	shm_detach(&seg);
	harness_shim_finish(t);
}

/*
 * A checkpoint writes its records through one buffer of a megabyte
 * (checkpoint.c's CHECKPOINT_BUFFER_BYTES), written out when the next
 * record might not fit it and once at the end.  The first checkpoint of
 * 4 MiB segments of effects with 20,000-byte results holds about 210 of
 * them, some 4.2 MiB of records: header, five buffers, trailer and the
 * header again are eight writes.  The checkpoint's file is let through
 * CKPT_BUFFER_WRITES (one to spare) and fails the next: a write per
 * effect record (about 210) fails the checkpoint, and a buffer never
 * written out when full is overrun by three megabytes (idemd dies).
 * Fails with either.
 */
#define CKPT_EFFECT_RESULT	20000
#define CKPT_EFFECTS_MAX	1000
/* At least three buffers' worth; at most six buffers (~48 a buffer). */
#define CKPT_EFFECTS_LEAST	150
#define CKPT_EFFECTS_MOST	290
#define CKPT_BUFFER_WRITES	"9"
/* What a written checkpoint logs, and a checkpoint whose write failed. */
#define CKPT_SUCCESS		"new in the index, "
#define CKPT_WRITE_FAILED	".snap.tmp: write: "
#define CKPT_EFFECT_KIND	"ckpt.test"
#define CKPT_EFFECT_REQUEST	"{\"n\":1}"
/* The open effect's lease: live across the restart. */
#define CKPT_OPEN_LEASE_MS	86400000

static const char *const ckpt_effect_args[] = {
	"--segment-bytes", "4194304", "--result-bytes", "33554432", NULL
};

/* The submissions the log's one written checkpoint says it holds. */
static unsigned long
checkpoint_submissions(const struct broker *b)
{
	char		*log, *at;
	unsigned long	 n;

	assert_non_null(log = harness_read_log(b));
	assert_non_null(at = strstr(log, CKPT_SUCCESS));
	n = strtoul(at + strlen(CKPT_SUCCESS), NULL, 10);
	free(log);
	return n;
}

/*
 * Besides the committed effects, one is begun first and left open: its
 * reservation and fence are in segment 1 and then in the checkpoint
 * alone (the index takes committed states only, and segment 1 is gone
 * after it), so the restart answering it in_progress, and committing it
 * with the fence given before, is the checkpoint loaded.
 */
static void
test_checkpoint_spans_several_buffers(void **state)
{
	static char		 result[CKPT_EFFECT_RESULT + 16];
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	struct idem_conn	*c;
	struct idem_effect	 open, e;
	struct idem_error	 err;
	char			 id[64], path[400];
	unsigned long		 n;
	int			 i, written = 0, failed = 0;

	snprintf(result, sizeof result, "\"%0*d\"", CKPT_EFFECT_RESULT, 7);
	/* Before the start: every checkpoint of this broker is counted. */
	harness_fault_rule(t->fault_file, "write .idem/journal/.checkpoint- "
	    "EIO " CKPT_BUFFER_WRITES);
	assert_int_equal(harness_start(b, ckpt_effect_args, t->env), 0);
	assert_non_null(c = harness_connect(b));
	memset(&open, 0, sizeof open);
	assert_int_equal(idem_effect_begin(c, "ckpt-open", CKPT_EFFECT_KIND,
	    CKPT_EFFECT_REQUEST, CKPT_OPEN_LEASE_MS, &open, &err), 0);
	assert_int_equal(open.disposition, IDEM_EFFECT_PROCEED);
	for (i = 0; written == 0 && failed == 0; i++) {
		if (i == CKPT_EFFECTS_MAX)
			fail_msg("%d effects and no checkpoint", i);
		snprintf(id, sizeof id, "ckpt-effect/%d", i);
		harness_effect_commit(c, CKPT_EFFECT_KIND, CKPT_EFFECT_REQUEST,
		    id, result);
		written = harness_log_count(b, CKPT_SUCCESS);
		failed = harness_log_count(b, CKPT_WRITE_FAILED);
	}
	idem_close(c);
	assert_int_equal(failed, 0);
	assert_int_equal(written, 1);
	n = checkpoint_submissions(b);
	if (n < CKPT_EFFECTS_LEAST || n > CKPT_EFFECTS_MOST)
		fail_msg("the checkpoint holds %lu submissions, not %d to %d",
		    n, CKPT_EFFECTS_LEAST, CKPT_EFFECTS_MOST);

	harness_fault_rule(t->fault_file, "");
	assert_int_equal(harness_stop(b), 0);
	snprintf(path, sizeof path, "%s/.idem/journal/0000000000000001.jnl",
	    b->root);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(harness_start(b, ckpt_effect_args, t->env), 0);
	assert_non_null(c = harness_connect(b));
	memset(&e, 0, sizeof e);
	assert_int_equal(idem_effect_begin(c, "ckpt-open", CKPT_EFFECT_KIND,
	    CKPT_EFFECT_REQUEST, 0, &e, &err), 0);
	assert_int_equal(e.disposition, IDEM_EFFECT_IN_PROGRESS);
	idem_effect_clear(&e);
	memset(&e, 0, sizeof e);
	assert_int_equal(idem_effect_complete(c, "ckpt-open", CKPT_EFFECT_KIND,
	    open.fence, 1, result, &e, &err), 0);
	assert_int_equal(e.disposition, IDEM_EFFECT_COMMITTED);
	idem_effect_clear(&e);
	idem_effect_clear(&open);
	/* A committed one, in the checkpoint's last buffer. */
	snprintf(id, sizeof id, "ckpt-effect/%lu", n - 2);
	memset(&e, 0, sizeof e);
	assert_int_equal(idem_effect_begin(c, id, CKPT_EFFECT_KIND,
	    CKPT_EFFECT_REQUEST, 0, &e, &err), 0);
	assert_int_equal(e.disposition, IDEM_EFFECT_REUSED);
	assert_string_equal(e.result, result);
	idem_effect_clear(&e);
	idem_close(c);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

static int
shim_setup(void **state)
{
	return harness_shim_setup(state, HARNESS_TEST_SECONDS);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checkpoints_bound_the_journal),
		cmocka_unit_test(test_crash_during_checkpoint),
		cmocka_unit_test(test_crash_after_checkpoint_renamed),
		cmocka_unit_test(test_crash_before_next_segment_renamed),
		cmocka_unit_test(test_crash_after_next_segment_renamed),
		cmocka_unit_test(test_stale_made_ahead_files),
		cmocka_unit_test_setup_teardown(
		    test_checkpoint_end_clears_running, shim_setup,
		    harness_shim_teardown),
		cmocka_unit_test_setup_teardown(
		    test_checkpoint_spans_several_buffers, shim_setup,
		    harness_shim_teardown),
	};

	harness_watchdog(120);
	return FILTER_RUN(tests);
}
