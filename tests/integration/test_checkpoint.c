/* SPDX-License-Identifier: ISC */
/*
 * test_checkpoint.c: checkpoints keep the journal bounded and lose
 * nothing, also when the broker dies while writing one or right after
 * putting one in place.  The broker runs with a tiny --segment-bytes so
 * that a few dozen creations rotate segments and checkpoint the table.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "integration/filter.h"
#include "harness.h"

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
check_all(struct broker *b, char receipts[][2048], int answered)
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

static void
run_crash(const char *point)
{
	static char		 receipts[CKPT_TASKS][2048];
	struct broker		 b;
	struct journal_files	 jf;
	char			 env[64];
	int			 answered;

	snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", point);
	harness_fresh_root(&b);
	assert_int_equal(harness_start(&b, ckpt_args,
	    (const char *const []){ env, NULL }), 0);
	answered = create_all(&b, receipts);
	/* The first checkpoint comes long before CKPT_TASKS. */
	assert_true(answered < CKPT_TASKS);
	harness_wait_dead(&b);
	assert_int_equal(b.exit_status, 128 + 9);
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
	char			 env[64];
	int			 answered;

	snprintf(env, sizeof env, "IDEM_CRASH_AT=%s", point);
	harness_fresh_root(&b);
	assert_int_equal(harness_start(&b, ckpt_args,
	    (const char *const []){ env, NULL }), 0);
	answered = create_all(&b, receipts);
	assert_true(answered > 0 && answered < CKPT_TASKS);
	harness_wait_dead(&b);
	assert_int_equal(b.exit_status, 128 + 9);
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checkpoints_bound_the_journal),
		cmocka_unit_test(test_crash_during_checkpoint),
		cmocka_unit_test(test_crash_after_checkpoint_renamed),
		cmocka_unit_test(test_crash_before_next_segment_renamed),
		cmocka_unit_test(test_crash_after_next_segment_renamed),
	};

	harness_watchdog(120);
	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (FILTER_APPLY(tests) == -1)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
