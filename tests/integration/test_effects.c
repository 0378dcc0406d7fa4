/* SPDX-License-Identifier: ISC */
/*
 * test_effects.c: the effect ledger's judgements of effect_begin and
 * effect_complete against a real idemd (SPEC.md, "Effects"): proceed,
 * complete, then reused byte for byte; conflict and another kind's key;
 * a live lease in_progress; lease bounds and the null default; applied
 * without a result; a NUL refused with nothing stored; bad requests;
 * concurrent begins (exactly one proceed).  Stale fences, lapses and
 * resolve are test_effects_unknown.c's, restarts and crashes
 * test_effects_restart.c's, libidem's effect calls
 * test_effects_libidem.c's; the helpers all share are effects_test.c.
 * The verdicts are the broker's answers and receipts, compared byte for
 * byte on the wire.
 */
#include <pthread.h>
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

#define TEST_THREADS	8

/* ---- begin and complete ------------------------------------------------ */

static void
proceed_complete_then_reused_byte_for_byte(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *first, *again, *xkey;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "e-1", REQUEST, 0);
	fence = fence_of(reply);
	assert_int_equal(json_integer_value(json_object_get(reply, "attempt")),
	    1);
	xkey = strdup(harness_str(reply, "external_key"));
	assert_int_equal(strncmp(xkey, "idem-", 5), 0);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);

	first = wire_receipt(b, complete_request("e-1", fence, "applied",
	    RESULT));
	/* Every later begin: reused, the first receipt byte for byte. */
	reply = begin(b, "e-1", REQUEST, 0);
	assert_disposition(reply, "reused");
	harness_assert_bool(reply, "action_taken", 0);
	assert_null(json_object_get(reply, "recovered"));
	assert_string_equal(harness_receipt_str(reply, "external_key"), xkey);
	assert_string_equal(harness_receipt_str(reply, "effect_kind"), KIND);
	assert_string_equal(harness_receipt_str(reply, "state"), "committed");
	json_decref(reply);
	again = wire_receipt(b, begin_request("e-1", KIND, REQUEST, 0));
	assert_string_equal(again, first);
	free(again);
	/* A retried complete (its answer lost) gets the same receipt. */
	again = wire_receipt(b, complete_request("e-1", fence, "applied",
	    RESULT));
	assert_string_equal(again, first);
	free(again);
	/* Another result or outcome contradicts it. */
	reply = complete(b, "e-1", fence, "applied", "{\"other\":1}");
	assert_reason(reply, "already_committed");
	json_decref(reply);
	reply = complete(b, "e-1", fence, "not_applied", NULL);
	assert_reason(reply, "already_committed");
	json_decref(reply);
	free(first);
	free(fence);
	free(xkey);
	harness_finish(b);
}

static void
other_request_conflicts_other_kind_is_another_key(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "e-2", REQUEST, 0);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	/* Same id, same kind, other request: conflict, nothing to do. */
	reply = begin(b, "e-2", "{\"to\":\"someone@else\"}", 0);
	assert_reason(reply, "digest_mismatch");
	harness_assert_bool(reply, "action_taken", 0);
	json_decref(reply);
	/* Member order and CRLF do not matter: the same digest. */
	reply = begin(b, "e-2",
	    "{\"subject\":\"Hi\",\"to\":\"ops@example.com\"}", 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	/* Another kind is another key. */
	reply = harness_must_call(b, begin_request("e-2", "sms.send/v1",
	    REQUEST, 0));
	assert_disposition(reply, "proceed");
	json_decref(reply);
	harness_finish(b);
}

static void
live_lease_is_in_progress_and_retryable(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "e-3", REQUEST, 60000);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	reply = begin(b, "e-3", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	assert_error(reply, "in_progress", NULL);
	harness_assert_bool(json_object_get(reply, "error"), "retryable", 1);
	json_decref(reply);
	harness_finish(b);
}

/* The bounds of lease_ms are in; null is the default (SPEC.md). */
static void
lease_bounds_and_null_default(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *r;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "l-min", REQUEST, 100);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "lease_ms")), 100);
	json_decref(reply);
	reply = begin(b, "l-max", REQUEST, 86400000);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "lease_ms")), 86400000);
	json_decref(reply);
	reply = begin(b, "l-below", REQUEST, 99);
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	reply = begin(b, "l-above", REQUEST, 86400001);
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	r = begin_request("l-null", KIND, REQUEST, 0);
	json_object_set_new(r, "lease_ms", json_null());
	reply = harness_must_call(b, r);
	assert_disposition(reply, "proceed");
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "lease_ms")), 30000);
	json_decref(reply);
	/* Neither refused begin reserved anything. */
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", "l-below",
	    "effect_kind", KIND));
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	harness_finish(b);
}

/*
 * An absent result is null (SPEC.md): applied without a result on an
 * effect committed with another result is already_committed, by
 * complete and by resolve; on one committed with null, the same.
 */
static void
applied_without_result_is_null(void **state)
{
	struct broker	*b = *state;
	json_t		*reply;
	char		*fence, *first, *again;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "a-1", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	reply = complete(b, "a-1", fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = complete(b, "a-1", fence, "applied", NULL);
	assert_reason(reply, "already_committed");
	json_decref(reply);
	reply = complete(b, "a-1", fence, "applied", "null");
	assert_reason(reply, "already_committed");
	json_decref(reply);
	reply = resolve(b, "a-1", "applied", NULL);
	assert_reason(reply, "already_committed");
	json_decref(reply);
	free(fence);

	/* Committed without a result: null, and an absent result agrees. */
	reply = begin(b, "a-2", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	first = wire_receipt(b, complete_request("a-2", fence, "applied",
	    NULL));
	assert_non_null(strstr(first, "\"result\":null"));
	again = wire_receipt(b, complete_request("a-2", fence, "applied",
	    "null"));
	assert_string_equal(again, first);
	free(again);
	again = wire_receipt(b, resolve_request("a-2", "applied", NULL));
	assert_string_equal(again, first);
	free(again);
	reply = complete(b, "a-2", fence, "applied", "{}");
	assert_reason(reply, "already_committed");
	json_decref(reply);
	free(first);
	free(fence);
	harness_finish(b);
}

/*
 * No string in a request may hold a NUL (SPEC.md): a result with one is
 * refused (invalid_request, the field its path) and nothing is stored;
 * every answer for the key stays readable.
 */
static void
nul_in_result_is_refused_and_nothing_stored(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *r;
	char		*fence, *first;

	harness_must_start(b, NULL, NULL);
	reply = begin(b, "z-1", REQUEST, 0);
	fence = fence_of(reply);
	json_decref(reply);
	r = complete_request("z-1", fence, "applied", NULL);
	json_object_set_new(r, "result", json_stringn("a\0b", 3));
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "result");
	harness_assert_bool(reply, "action_taken", 0);
	json_decref(reply);
	r = complete_request("z-1", fence, "applied", NULL);
	json_object_set_new(r, "result", json_pack("{s:[s#]}", "ids",
	    "x\0", (size_t)2));
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "result.ids");
	json_decref(reply);
	/* Nothing was stored: still reserved, nothing committed. */
	assert_state(b, "z-1", "reserved", 1);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "effects_committed")), 0);
	json_decref(reply);

	/* Evidence with a NUL, in its result or its source: the same. */
	r = resolve_request("z-1", "applied", NULL);
	json_object_set_new(json_object_get(r, "evidence"), "result",
	    json_stringn("\0", 1));
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "evidence.result");
	json_decref(reply);
	r = resolve_request("z-1", "unknown", NULL);
	json_object_set_new(json_object_get(r, "evidence"), "source",
	    json_stringn("probe\0", 6));
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "evidence.source");
	json_decref(reply);
	/* A begin with a NUL in its meta reserves nothing. */
	r = begin_request("z-2", KIND, REQUEST, 0);
	json_object_set_new(r, "meta", json_pack("{s:s#}", "trace", "t\0",
	    (size_t)2));
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "meta.trace");
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", "z-2",
	    "effect_kind", KIND));
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	assert_state(b, "z-1", "reserved", 1);

	/* The clean complete commits; the receipt reads back as sent. */
	first = wire_receipt(b, complete_request("z-1", fence, "applied",
	    RESULT));
	assert_non_null(strstr(first, "\"result\":" RESULT));
	free(first);
	free(fence);
	harness_finish(b);
}

static void
bad_requests_are_refused_and_change_nothing(void **state)
{
	struct broker	*b = *state;
	json_t		*reply, *r;
	char		*big;

	harness_must_start(b, NULL, NULL);
	reply = harness_must_call(b, begin_request("x", "write_task", REQUEST,
	    0));
	assert_error(reply, "invalid_request", "effect_kind");
	json_decref(reply);
	reply = harness_must_call(b, begin_request("x", "has space", REQUEST,
	    0));
	assert_error(reply, "invalid_request", "effect_kind");
	json_decref(reply);
	reply = begin(b, "x", REQUEST, 99);
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	reply = begin(b, "x", REQUEST, 86400001);
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	reply = begin(b, "x", "{\"cafe\\u0301\":1,\"caf\\u00e9\":2}", 0);
	assert_error(reply, "invalid_request", "request");
	json_decref(reply);
	reply = begin(b, "x", "[9007199254740993]", 0);
	assert_error(reply, "invalid_request", "request");
	json_decref(reply);
	r = json_pack("{s:s, s:s, s:s}", "op", "effect_begin",
	    "client_submission_id", "x", "effect_kind", KIND);
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "request");
	json_decref(reply);
	r = json_pack("{s:s, s:s, s:o}", "op", "effect_begin",
	    "effect_kind", KIND, "request", json_null());
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", "client_submission_id");
	json_decref(reply);
	r = begin_request("x", KIND, REQUEST, 0);
	json_object_set_new(r, "request_digest", json_string(
	    "0000000000000000000000000000000000000000000000000000000000000000"));
	reply = harness_must_call(b, r);
	assert_error(reply, "digest_disagrees", "request_digest");
	json_decref(reply);
	reply = complete(b, "x", "not-a-fence", "applied", NULL);
	assert_error(reply, "invalid_request", "fence");
	json_decref(reply);
	/* A result over the limit. */
	big = malloc(70 * 1024 + 3);
	assert_non_null(big);
	memset(big, 'a', 70 * 1024 + 2);
	big[0] = '"';
	big[70 * 1024 + 1] = '"';
	big[70 * 1024 + 2] = '\0';
	reply = complete(b, "x", "1-0000000000000000", "applied", big);
	assert_error(reply, "invalid_request", "result");
	json_decref(reply);
	free(big);
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", "x",
	    "effect_kind", "has space"));
	assert_error(reply, "invalid_request", "effect_kind");
	json_decref(reply);
	/* Nothing of it is in the table. */
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", "x",
	    "effect_kind", KIND));
	harness_assert_bool(reply, "found", 0);
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "table_used")), 0);
	json_decref(reply);
	harness_finish(b);
}

/* ---- Concurrency ------------------------------------------------------------ */

struct racer {
	struct broker	*b;
	pthread_barrier_t *barrier;
	char		 disposition[32];
};

static void *
race(void *arg)
{
	struct racer		*r = arg;
	struct idem_conn	*c = harness_connect(r->b);
	json_t			*reply;

	pthread_barrier_wait(r->barrier);
	if (c == NULL)
		return NULL;
	reply = harness_call(c, begin_request("race", KIND, REQUEST, 60000));
	if (reply != NULL)
		snprintf(r->disposition, sizeof r->disposition, "%s",
		    json_string_value(json_object_get(reply, "disposition")));
	json_decref(reply);
	idem_close(c);
	return NULL;
}

static void
concurrent_begins_exactly_one_proceeds(void **state)
{
	struct broker		*b = *state;
	struct racer		 racers[TEST_THREADS];
	pthread_t		 threads[TEST_THREADS];
	pthread_barrier_t	 barrier;
	const char *const	 args[] = { "--workers", "4", NULL };
	int			 i, proceed = 0, in_progress = 0;

	assert_int_equal(harness_start(b, args, NULL), 0);
	pthread_barrier_init(&barrier, NULL, TEST_THREADS);
	for (i = 0; i < TEST_THREADS; i++) {
		racers[i].b = b;
		racers[i].barrier = &barrier;
		racers[i].disposition[0] = '\0';
		assert_int_equal(pthread_create(&threads[i], NULL, race,
		    &racers[i]), 0);
	}
	for (i = 0; i < TEST_THREADS; i++) {
		pthread_join(threads[i], NULL);
		if (strcmp(racers[i].disposition, "proceed") == 0)
			proceed++;
		else if (strcmp(racers[i].disposition, "in_progress") == 0)
			in_progress++;
	}
	pthread_barrier_destroy(&barrier);
	assert_int_equal(proceed, 1);
	assert_int_equal(in_progress, TEST_THREADS - 1);
	harness_finish(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	harness_teardown)
		T(proceed_complete_then_reused_byte_for_byte),
		T(other_request_conflicts_other_kind_is_another_key),
		T(live_lease_is_in_progress_and_retryable),
		T(lease_bounds_and_null_default),
		T(applied_without_result_is_null),
		T(nul_in_result_is_refused_and_nothing_stored),
		T(bad_requests_are_refused_and_change_nothing),
		T(concurrent_begins_exactly_one_proceeds),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
