/* SPDX-License-Identifier: ISC */
/*
 * test_effects_unknown.c: the effect ledger's fences, lapses and
 * resolve against a real idemd (SPEC.md, "Effects"): a stale or forged
 * fence changes nothing; not_applied releases (also after a lapse:
 * attempt 2, the same external_key); a lapsed lease is outcome_unknown,
 * never proceed; resolve settles by evidence; a complete after resolve
 * unknown is accepted.  The verdicts are the broker's answers and the
 * key's stored state.
 */
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

static void
not_applied_releases_and_stale_fences_change_nothing(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *sub;
	char		*fence1, *fence2, *xkey;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "e-4", REQUEST, 0);
	fence1 = fence_of(reply);
	xkey = strdup(harness_str(reply, "external_key"));
	json_decref(reply);
	reply = complete(b, "e-4", fence1, "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "released");
	json_decref(reply);
	/* The next begin proceeds: attempt 2, the same external key. */
	reply = begin(b, "e-4", REQUEST, 0);
	fence2 = fence_of(reply);
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	assert_string_equal(harness_str(reply, "external_key"), xkey);
	assert_string_not_equal(fence1, fence2);
	json_decref(reply);
	/* The first fence is stale, whatever it says. */
	reply = complete(b, "e-4", fence1, "applied", RESULT);
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	reply = complete(b, "e-4", fence1, "not_applied", NULL);
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	/* ... and changed nothing. */
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", "e-4",
	    "effect_kind", KIND));
	harness_assert_bool(reply, "found", 1);
	sub = json_object_get(reply, "submission");
	assert_string_equal(harness_str(sub, "state"), "reserved");
	assert_int_equal(json_integer_value(json_object_get(sub, "attempt")),
	    2);
	json_decref(reply);
	reply = complete(b, "e-4", fence2, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(json_integer_value(json_object_get(
	    json_object_get(reply, "receipt"), "attempt")), 2);
	json_decref(reply);
	/* No reservation under a key nobody began. */
	reply = complete(b, "never-begun", fence2, "applied", RESULT);
	assert_reason(reply, "no_reservation");
	json_decref(reply);
	reply = resolve(b, "never-begun", "applied", RESULT);
	assert_reason(reply, "no_reservation");
	json_decref(reply);
	free(fence1);
	free(fence2);
	free(xkey);
	harness_finish(b);
}

/*
 * The fence is "<attempt>-<16 hex>": the attempt right and the random
 * part wrong is as stale as an old attempt, and changes nothing.
 */
static void
forged_fence_of_current_attempt_is_stale(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, forged[64];

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "f-1", REQUEST, 60000);
	fence = fence_of(reply);
	json_decref(reply);
	assert_int_equal(strncmp(fence, "1-", 2), 0);
	snprintf(forged, sizeof forged, "%s", fence);
	/* One hex digit changed: the same attempt, another random part. */
	forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == '0' ?
	    '1' : '0';
	reply = complete(b, "f-1", forged, "applied", RESULT);
	assert_reason(reply, "stale_fence");
	harness_assert_bool(reply, "action_taken", 0);
	json_decref(reply);
	reply = complete(b, "f-1", forged, "not_applied", NULL);
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	reply = complete(b, "f-1", "1-0000000000000000", "applied", RESULT);
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	/* Nothing changed: still reserved, still held, attempt 1. */
	assert_state(b, "f-1", "reserved", 1);
	reply = begin(b, "f-1", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	/* The true fence still completes. */
	reply = complete(b, "f-1", fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	assert_int_equal(json_integer_value(json_object_get(
	    json_object_get(reply, "receipt"), "attempt")), 1);
	json_decref(reply);
	free(fence);
	harness_finish(b);
}

static void
lapsed_lease_is_outcome_unknown_never_proceed(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *entries, *first;
	char		*fence;
	int		 i;

	harness_must_start(b, NULL, NULL);
	/* A task left reserved would be listed too: unknowns come first. */
	reply = begin(b, "e-5", REQUEST, SHORT_LEASE_MS);
	fence = fence_of(reply);
	json_decref(reply);
	reply = begin(b, "e-5-live", REQUEST, 60000);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	reply = begin_until_unknown(b, "e-5", REQUEST);
	assert_error(reply, "outcome_unknown", NULL);
	harness_assert_bool(json_object_get(reply, "error"), "retryable", 0);
	assert_string_equal(harness_str(json_object_get(reply, "existing"),
	    "state"), "outcome_unknown");
	json_decref(reply);
	/* Time never turns it into proceed. */
	for (i = 0; i < 5; i++) {
		reply = begin(b, "e-5", REQUEST, 0);
		assert_disposition(reply, "outcome_unknown");
		json_decref(reply);
	}
	reply = harness_must_call(b, json_pack("{s:s}", "op", "diagnose"));
	entries = json_object_get(reply, "entries");
	assert_int_equal(json_array_size(entries), 2);
	first = json_array_get(entries, 0);
	assert_string_equal(harness_str(first, "client_submission_id"), "e-5");
	assert_string_equal(harness_str(first, "state"), "outcome_unknown");
	assert_string_equal(harness_str(json_array_get(entries, 1), "state"),
	    "reserved");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
	    reply, "effect_counts"), "outcome_unknown")), 1);
	json_decref(reply);
	/* A late complete with the latest fence is accepted. */
	reply = complete(b, "e-5", fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = begin(b, "e-5", REQUEST, 0);
	assert_disposition(reply, "reused");
	json_decref(reply);
	free(fence);
	harness_finish(b);
}

/*
 * SPEC.md: a complete with the latest fence after its lease lapsed is
 * accepted (no other caller was let in): not_applied releases it like a
 * live one, and the next begin proceeds, attempt 2, the same key.
 */
static void
not_applied_after_lapse_releases(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *xkey;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "n-1", REQUEST, SHORT_LEASE_MS);
	fence = fence_of(reply);
	xkey = strdup(harness_str(reply, "external_key"));
	json_decref(reply);
	json_decref(begin_until_unknown(b, "n-1", REQUEST));
	reply = complete(b, "n-1", fence, "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "released");
	json_decref(reply);
	assert_state(b, "n-1", "released", 1);
	reply = begin(b, "n-1", REQUEST, 0);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	assert_string_equal(harness_str(reply, "external_key"), xkey);
	json_decref(reply);
	/* The first fence is now stale. */
	reply = complete(b, "n-1", fence, "applied", RESULT);
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	free(fence);
	free(xkey);
	harness_finish(b);
}

static void
resolve_settles_by_evidence(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *entries;
	char		*xkey;
	const char	*ids[] = { "r-applied", "r-not", "r-unknown" };
	int		 i;

	harness_must_start(b, NULL, NULL);
	for (i = 0; i < 3; i++) {
		reply = begin(b, ids[i], REQUEST, SHORT_LEASE_MS);
		assert_disposition(reply, "proceed");
		json_decref(reply);
	}
	/* Resolving a live lease waits for it (in_progress). */
	reply = begin(b, "r-live", REQUEST, 60000);
	json_decref(reply);
	reply = resolve(b, "r-live", "applied", RESULT);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	for (i = 0; i < 3; i++)
		json_decref(begin_until_unknown(b, ids[i], REQUEST));

	/* applied: committed, recovered, later begins reuse it. */
	reply = resolve(b, "r-applied", "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	harness_assert_bool(reply, "recovered", 1);
	assert_string_equal(harness_str(reply, "state"), "committed");
	json_decref(reply);
	reply = begin(b, "r-applied", REQUEST, 0);
	assert_disposition(reply, "reused");
	harness_assert_bool(reply, "recovered", 1);
	json_decref(reply);
	/* Evidence against a committed receipt: already_committed. */
	reply = resolve(b, "r-applied", "not_applied", NULL);
	assert_reason(reply, "already_committed");
	json_decref(reply);
	reply = resolve(b, "r-applied", "applied", "{\"other\":true}");
	assert_reason(reply, "already_committed");
	json_decref(reply);

	/* not_applied: released, the next begin proceeds, same key. */
	reply = resolve(b, "r-not", "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "released");
	xkey = strdup(harness_str(reply, "external_key"));
	json_decref(reply);
	reply = begin(b, "r-not", REQUEST, 0);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	assert_string_equal(harness_str(reply, "external_key"), xkey);
	json_decref(reply);

	/* unknown: stays outcome_unknown, listed first by diagnose. */
	reply = resolve(b, "r-unknown", "unknown", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "outcome_unknown");
	json_decref(reply);
	reply = begin(b, "r-unknown", REQUEST, 0);
	assert_disposition(reply, "outcome_unknown");
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "diagnose"));
	entries = json_object_get(reply, "entries");
	assert_true(json_array_size(entries) >= 3);
	assert_string_equal(harness_str(json_array_get(entries, 0),
	    "client_submission_id"), "r-unknown");
	json_decref(reply);
	free(xkey);
	harness_finish(b);
}

/*
 * A lease that lapsed and was resolved unknown: the holder's late
 * complete still carries the latest fence (a resolve issues none and
 * lets no other caller in), so SPEC.md's rule accepts it: applied
 * commits with its result; the later begins reuse that receipt.
 */
static void
complete_after_resolve_unknown_is_accepted(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *fence2, *first, *again;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "u-1", REQUEST, SHORT_LEASE_MS);
	fence = fence_of(reply);
	json_decref(reply);
	reply = begin(b, "u-2", REQUEST, SHORT_LEASE_MS);
	fence2 = fence_of(reply);
	json_decref(reply);
	json_decref(begin_until_unknown(b, "u-1", REQUEST));
	reply = resolve(b, "u-1", "unknown", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "outcome_unknown");
	json_decref(reply);
	assert_state(b, "u-1", "outcome_unknown", 1);
	first = wire_receipt(b, complete_request("u-1", fence, "applied",
	    RESULT));
	assert_non_null(strstr(first, "\"state\":\"committed\""));
	again = wire_receipt(b, begin_request("u-1", KIND, REQUEST, 0));
	assert_string_equal(again, first);
	free(again);
	assert_state(b, "u-1", "committed", 1);
	free(first);
	free(fence);

	/* not_applied after resolve unknown releases it the same way. */
	json_decref(begin_until_unknown(b, "u-2", REQUEST));
	reply = resolve(b, "u-2", "unknown", NULL);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = complete(b, "u-2", fence2, "not_applied", NULL);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "released");
	json_decref(reply);
	reply = begin(b, "u-2", REQUEST, 0);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    2);
	json_decref(reply);
	free(fence2);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	harness_teardown)
		T(not_applied_releases_and_stale_fences_change_nothing),
		T(lapsed_lease_is_outcome_unknown_never_proceed),
		T(resolve_settles_by_evidence),
		T(forged_fence_of_current_attempt_is_stale),
		T(not_applied_after_lapse_releases),
		T(complete_after_resolve_unknown_is_accepted),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
