/* SPDX-License-Identifier: ISC */
/*
 * test_effects_restart.c: the effect ledger across restarts and
 * failures of a real idemd: SIGTERM and kill -9 keep receipts and live
 * leases; a kill -9 at each effect crash point (reserve, commit,
 * release, resolve durable; a worker's after commit, and one before its
 * pass's kick of the journaler, whose records the master then flushes)
 * loses nothing acknowledged; results survive a checkpoint; a journal
 * write that fails acknowledges nothing and a retry completes.  The
 * verdicts are the answers and receipts after the restart, byte for
 * byte.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
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

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/effects_test.h"

/* ---- Restarts and crashes ---------------------------------------------------- */

static void
restart_and_kill_keep_receipts_and_leases(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *first, *again;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "k-1", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	first = wire_receipt(b, complete_request("k-1", fence, "applied",
	    RESULT));
	reply = begin(b, "k-live", REQUEST, 600000);
	assert_disposition(reply, "proceed");
	json_decref(reply);

	assert_int_equal(harness_stop(b), 0);
	harness_must_start(b, NULL, NULL);
	again = wire_receipt(b, begin_request("k-1", KIND, REQUEST, 0));
	assert_string_equal(again, first);
	free(again);
	/* The lease survives the restart: still held. */
	reply = begin(b, "k-live", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);

	harness_kill(b);
	harness_must_start(b, NULL, NULL);
	again = wire_receipt(b, begin_request("k-1", KIND, REQUEST, 0));
	assert_string_equal(again, first);
	free(again);
	reply = begin(b, "k-live", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	free(first);
	free(fence);
	harness_finish(b);
}

/* Start with IDEM_CRASH_AT at a point (skipped without fault injection). */
static void
start_crashing(struct broker *b, const char *point)
{
	harness_need_fault_injection(b);
	harness_start_crashing(b, "IDEM_CRASH_AT", point);
}

/* The request the crash interrupts: its stream ends without a reply. */
static void
call_and_lose(struct broker *b, json_t *request)
{
	struct idem_conn	*c = harness_connect(b);
	json_t			*reply;

	assert_non_null(c);
	reply = harness_call(c, request);
	if (reply != NULL)
		fail_msg("the crash point did not drop the connection: %s",
		    json_dumps(reply, JSON_COMPACT));
	idem_close(c);
	harness_wait_dead(b);
}

static void
crash_after_effect_reserve_durable(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;

	start_crashing(b, "after_effect_reserve_durable");
	call_and_lose(b, begin_request("c-1", KIND, REQUEST, SHORT_LEASE_MS));
	harness_must_start(b, NULL, NULL);
	/*
	 * The reservation is durable, its proceed never arrived: the caller
	 * cannot have performed, but idem cannot know that; it waits for the
	 * lease, then says outcome_unknown, never proceed.
	 */
	reply = begin_until_unknown(b, "c-1", REQUEST);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
	    reply, "existing"), "attempt")), 1);
	json_decref(reply);
	reply = resolve(b, "c-1", "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = begin(b, "c-1", REQUEST, 0);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	json_decref(reply);
	harness_finish(b);
}

static void
crash_after_effect_commit_durable(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *first, *again;

	start_crashing(b, "after_effect_commit_durable");
	reply = begin(b, "c-2", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	call_and_lose(b, complete_request("c-2", fence, "applied", RESULT));
	harness_must_start(b, NULL, NULL);
	/* The commit is durable: reused, and the complete's retry agrees. */
	first = wire_receipt(b, begin_request("c-2", KIND, REQUEST, 0));
	again = wire_receipt(b, complete_request("c-2", fence, "applied",
	    RESULT));
	assert_string_equal(again, first);
	assert_non_null(strstr(first, "\"message_id\":\"<1@example.com>\""));
	free(first);
	free(again);
	free(fence);
	harness_finish(b);
}

static void
crash_after_effect_release_durable(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence;

	start_crashing(b, "after_effect_release_durable");
	reply = begin(b, "c-3", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	call_and_lose(b, complete_request("c-3", fence, "not_applied", NULL));
	harness_must_start(b, NULL, NULL);
	/* The retry of the release agrees; the next begin proceeds. */
	reply = complete(b, "c-3", fence, "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "released");
	json_decref(reply);
	reply = begin(b, "c-3", REQUEST, 0);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	json_decref(reply);
	free(fence);
	harness_finish(b);
}

static void
crash_after_effect_resolve_durable(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;

	start_crashing(b, "after_effect_resolve_durable");
	reply = begin(b, "c-4", REQUEST, SHORT_LEASE_MS);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	json_decref(begin_until_unknown(b, "c-4", REQUEST));
	call_and_lose(b, resolve_request("c-4", "applied", RESULT));
	harness_must_start(b, NULL, NULL);
	reply = begin(b, "c-4", REQUEST, 0);
	assert_disposition(reply, "reused");
	harness_assert_bool(reply, "recovered", 1);
	json_decref(reply);
	harness_finish(b);
}

/* One worker dies after the commit is durable; the master replaces it. */
static void
worker_crash_after_effect_commit_durable(void **state)
{
	struct broker		*b = *state;
	const char *const	 env[] = {
		"IDEM_CRASH_WORKER_AT=after_effect_commit_durable", NULL
	};
	struct idem_conn	*c;
	json_t			*reply;
	char			*fence, *first;

	harness_need_fault_injection(b);
	assert_int_equal(harness_start(b, NULL, env), 0);
	reply = begin(b, "w-1", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, complete_request("w-1", fence, "applied",
	    RESULT));
	assert_null(reply);		/* its worker died before answering */
	idem_close(c);
	/* The broker goes on: the retry gets the committed receipt. */
	first = wire_receipt(b, complete_request("w-1", fence, "applied",
	    RESULT));
	assert_non_null(strstr(first, "\"attempt\":1"));
	reply = begin(b, "w-1", REQUEST, 0);
	assert_disposition(reply, "reused");
	json_decref(reply);
	free(first);
	free(fence);
	harness_finish(b);
}

/*
 * A worker dies after its pass appended a record and before it kicked
 * the journaler (the model found it: a lease extension answered, then
 * kill -9): the master kicks the journaler for it, so a retry that waits
 * for that record gets an answer.  Without the master's kick the record
 * stays in the ring of an idle journaler and the retry waits for ever.
 */
static void
worker_crash_before_journal_kick(void **state)
{
	struct broker		*b = *state;
	const char *const	 env[] = {
		"IDEM_CRASH_WORKER_AT=before_journal_kick", NULL
	};
	char			*reply;

	harness_need_fault_injection(b);
	assert_int_equal(harness_start(b, NULL, env), 0);
	/* Its worker appends the reservation and dies before the kick. */
	assert_null(harness_raw_call_or_null(b, begin_request("k-1", KIND,
	    REQUEST, 0)));
	harness_wait_log(b, "killed by signal 9", 1, 10000);
	/*
	 * A resolve judges the reservation only once its record is durable
	 * (a begin's retry answers in_progress without waiting): it is
	 * flushed, and the lease, live, is the answer.  Never flushed, no
	 * answer would come: the watchdog, shortened, fails the test.
	 */
	harness_watchdog(20);
	reply = harness_raw_call_or_null(b, resolve_request("k-1",
	    "not_applied", NULL));
	assert_non_null(reply);
	assert_non_null(strstr(reply, "\"in_progress\""));
	free(reply);
	harness_finish(b);
}

static int
count_checkpoints(const struct broker *b)
{
	char		 path[512];
	DIR		*d;
	struct dirent	*de;
	int		 n = 0;

	snprintf(path, sizeof path, "%s/.idem/journal", b->root);
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((de = readdir(d)) != NULL)
		if (strncmp(de->d_name, "checkpoint-", 11) == 0)
			n++;
	closedir(d);
	return n;
}

static void
checkpoint_carries_results(void **state)
{
	struct broker		*b = *state;
	const char *const	 args[] = { "--segment-bytes", "4096", NULL };
	json_t			*reply;
	char			 id[32], *fence, *receipts[40], *again;
	int			 i;

	assert_int_equal(harness_start(b, args, NULL), 0);
	/* Each commit journals its result: a few fill 4 KiB segments. */
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "ck-%d", i);
		reply = begin(b, id, REQUEST, 0);
		fence = fence_of(reply);
		json_decref(reply);
		receipts[i] = wire_receipt(b, complete_request(id, fence,
		    "applied", RESULT));
		free(fence);
	}
	harness_kill(b);
	assert_true(count_checkpoints(b) >= 1);
	assert_int_equal(harness_start(b, args, NULL), 0);
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "ck-%d", i);
		again = wire_receipt(b, begin_request(id, KIND, REQUEST, 0));
		assert_string_equal(again, receipts[i]);
		free(again);
		free(receipts[i]);
	}
	harness_finish(b);
}

/* ---- Storage faults ------------------------------------------------------------ */

/*
 * The broker with tests/faults/faultshim.c preloaded (as test_storage.c
 * runs it); the rule file is outside the root.  make check builds the
 * shim and names it in $IDEM_FAULTSHIM; run by hand from the build
 * directory, the harness's default path finds it.  A shim that is not
 * there fails the test: a skip would hide the journal fault untried.
 */
static void
start_with_faults(struct broker *b, char *rule_file, size_t size)
{
	static char		 preload[PATH_MAX + 16], fault[PATH_MAX + 32];
	static char		 asan[512];
	const char		*shim = getenv("IDEM_FAULTSHIM"), *old;
	const char *const	 env[] = { preload, fault, asan, NULL };
	char			 real[PATH_MAX];

	if (shim == NULL)
		shim = "tests/faults/.libs/libfaultshim.so";
	if (realpath(shim, real) == NULL)
		fail_msg("fault shim %s: %s (make check builds it; or set "
		    "IDEM_FAULTSHIM)", shim, strerror(errno));
	snprintf(rule_file, size, "%s.faults", b->root);
	snprintf(preload, sizeof preload, "LD_PRELOAD=%s", real);
	snprintf(fault, sizeof fault, "IDEM_FAULT_FILE=%s", rule_file);
	/* A sanitizer build must accept the shim ahead of its runtime. */
	old = getenv("ASAN_OPTIONS");
	snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
	    old != NULL ? old : "", old != NULL && *old != '\0' ? ":" : "");
	assert_int_equal(harness_start(b, NULL, env), 0);
}

static int
is_storage_unavailable(json_t *reply)
{
	const char	*code = json_string_value(json_object_get(
			    json_object_get(reply, "error"), "code"));

	return code != NULL && strcmp(code, "storage_unavailable") == 0;
}

/* Until the broker has reopened its state after the journal failure. */
static json_t *
call_across_reopen(struct broker *b, json_t *request)
{
	json_t	*reply = NULL;
	int	 tries;

	for (tries = 0; tries < 1000; tries++) {
		reply = harness_call_once(b, json_incref(request));
		if (reply != NULL && !is_storage_unavailable(reply))
			break;
		json_decref(reply);
		reply = NULL;
	}
	json_decref(request);
	if (reply == NULL)
		fail_msg("still storage_unavailable across the reopen");
	return reply;
}

static void
journal_fault_acknowledges_nothing_and_retry_completes(void **state)
{
	struct broker	*b = *state;
	char		 rules[PATH_MAX + 16], *fence, *receipt, *again;
	json_t		*reply;

	start_with_faults(b, rules, sizeof rules);
	reply = begin(b, "s-1", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);

	/* A begin and a complete meet a failing journal: nothing is acked. */
	harness_fault_rule(rules, "write .idem/journal ENOSPC");
	reply = begin(b, "s-2", REQUEST, 0);
	assert_true(is_storage_unavailable(reply));
	json_decref(reply);
	/* Refused, or dropped by a worker draining for the reopen. */
	reply = harness_call_once(b, complete_request("s-1", fence, "applied",
	    RESULT));
	assert_true(reply == NULL || is_storage_unavailable(reply));
	json_decref(reply);
	harness_fault_rule(rules, "");

	/* After the reopen: s-2 was never reserved, s-1 never committed. */
	reply = call_across_reopen(b, begin_request("s-2", KIND, REQUEST, 0));
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    1);
	json_decref(reply);
	reply = call_across_reopen(b, begin_request("s-1", KIND, REQUEST, 0));
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	/* The same complete again commits, durably. */
	receipt = wire_receipt(b, complete_request("s-1", fence, "applied",
	    RESULT));
	harness_kill(b);
	assert_int_equal(harness_start(b, NULL, NULL), 0);
	again = wire_receipt(b, begin_request("s-1", KIND, REQUEST, 0));
	assert_string_equal(again, receipt);
	free(again);
	free(receipt);
	free(fence);
	unlink(rules);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	harness_teardown)
		T(restart_and_kill_keep_receipts_and_leases),
		T(crash_after_effect_reserve_durable),
		T(crash_after_effect_commit_durable),
		T(crash_after_effect_release_durable),
		T(crash_after_effect_resolve_durable),
		T(worker_crash_after_effect_commit_durable),
		T(worker_crash_before_journal_kick),
		T(checkpoint_carries_results),
		T(journal_fault_acknowledges_nothing_and_retry_completes),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
