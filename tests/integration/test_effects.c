/* SPDX-License-Identifier: ISC */
/*
 * test_effects.c: the effect ledger against a real idemd (SPEC.md,
 * "Effects"): every disposition of effect_begin, complete and resolve,
 * stale fences, lease lapse to outcome_unknown (never to proceed),
 * restart and kill -9 between each durable step (the effect crash
 * points), concurrent begins (exactly one proceed), checkpoints, and
 * libidem's idem_effect_run with a side effect that leaves a marker.
 * The verdicts are the broker's answers and receipts, compared byte for
 * byte on the wire.
 */
#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
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
#include <dirent.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "integration/harness.h"

#define KIND		"mail.send/v1"
#define REQUEST		"{\"to\":\"ops@example.com\",\"subject\":\"Hi\"}"
#define RESULT		"{\"message_id\":\"<1@example.com>\",\"n\":[1,2.5]}"
#define TEST_THREADS	8
/* A lease that lapses fast, and a bound on waiting for it to. */
#define SHORT_LEASE_MS	100
#define LAPSE_WAIT_MS	5000

/* ---- Helpers ------------------------------------------------------------- */

static json_t *
begin_request(const char *id, const char *kind, const char *request_json,
    int64_t lease_ms)
{
	json_t	*r;

	r = json_pack("{s:s, s:s, s:s, s:o}", "op", "effect_begin",
	    "client_submission_id", id, "effect_kind", kind, "request",
	    json_loads(request_json, JSON_DECODE_ANY, NULL));
	assert_non_null(r);
	if (lease_ms > 0)
		json_object_set_new(r, "lease_ms", json_integer(lease_ms));
	return r;
}

static json_t *
begin(struct broker *b, const char *id, const char *request_json,
    int64_t lease_ms)
{
	return harness_must_call(b, begin_request(id, KIND, request_json,
	    lease_ms));
}

static json_t *
complete_request(const char *id, const char *fence, const char *outcome,
    const char *result_json)
{
	json_t	*r;

	r = json_pack("{s:s, s:s, s:s, s:s, s:s}", "op", "effect_complete",
	    "client_submission_id", id, "effect_kind", KIND, "fence", fence,
	    "outcome", outcome);
	assert_non_null(r);
	if (result_json != NULL)
		json_object_set_new(r, "result", json_loads(result_json,
		    JSON_DECODE_ANY, NULL));
	return r;
}

static json_t *
complete(struct broker *b, const char *id, const char *fence,
    const char *outcome, const char *result_json)
{
	return harness_must_call(b, complete_request(id, fence, outcome,
	    result_json));
}

static json_t *
resolve_request(const char *id, const char *observed, const char *result_json)
{
	json_t	*r, *evidence;

	evidence = json_pack("{s:s, s:s}", "observed", observed, "source",
	    "test probe");
	if (result_json != NULL)
		json_object_set_new(evidence, "result", json_loads(result_json,
		    JSON_DECODE_ANY, NULL));
	r = json_pack("{s:s, s:s, s:s, s:o}", "op", "effect_resolve",
	    "client_submission_id", id, "effect_kind", KIND, "evidence",
	    evidence);
	assert_non_null(r);
	return r;
}

static json_t *
resolve(struct broker *b, const char *id, const char *observed,
    const char *result_json)
{
	return harness_must_call(b, resolve_request(id, observed, result_json));
}

static void
assert_disposition(json_t *reply, const char *disposition)
{
	const char	*got = json_string_value(json_object_get(reply,
			    "disposition"));

	if (got == NULL || strcmp(got, disposition) != 0) {
		char *text = json_dumps(reply, JSON_COMPACT);

		fail_msg("expected %s, got %s", disposition, text);
	}
}

static void
assert_reason(json_t *reply, const char *reason)
{
	json_t	*error = json_object_get(reply, "error");

	assert_disposition(reply, "conflict");
	assert_string_equal(harness_str(error, "code"), "conflict");
	assert_string_equal(harness_str(error, "reason"), reason);
	harness_assert_bool(reply, "ok", 0);
}

static void
assert_error(json_t *reply, const char *code, const char *field)
{
	json_t	*error = json_object_get(reply, "error");

	harness_assert_bool(reply, "ok", 0);
	assert_string_equal(harness_str(error, "code"), code);
	if (field != NULL)
		assert_string_equal(harness_str(error, "field"), field);
}

/* The reply's receipt as it came on the wire (the tail of the line). */
static char *
wire_receipt(struct broker *b, json_t *request)
{
	char	*line, *text, *at, *out;
	int	 fd;

	text = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	fd = harness_raw_connect(b);
	assert_true(fd >= 0);
	assert_int_equal(harness_raw_send(fd, text), 0);
	line = harness_raw_read_line(fd);
	close(fd);
	free(text);
	assert_non_null(line);
	at = strstr(line, "\"receipt\":");
	if (at == NULL)
		fail_msg("no receipt in %s", line);
	out = strdup(at);
	free(line);
	return out;
}

/* Poll (with the lease as the only clock) until begin says the lease lapsed. */
static json_t *
begin_until_unknown(struct broker *b, const char *id, const char *request)
{
	struct timespec	 pause = { 0, 20 * 1000 * 1000 };
	json_t		*reply;
	int		 waited;

	for (waited = 0; waited < LAPSE_WAIT_MS; waited += 20) {
		reply = begin(b, id, request, 0);
		if (strcmp(json_string_value(json_object_get(reply,
		    "disposition")), "outcome_unknown") == 0)
			return reply;
		assert_disposition(reply, "in_progress");
		json_decref(reply);
		/* The lease is time itself: nothing else to wait on. */
		nanosleep(&pause, NULL);
	}
	fail_msg("the lease did not lapse in %d ms", LAPSE_WAIT_MS);
	return NULL;
}

static char *
fence_of(json_t *reply)
{
	assert_disposition(reply, "proceed");
	return strdup(harness_str(reply, "fence"));
}

/* ---- Dispositions --------------------------------------------------------- */

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

/* ---- Edges ------------------------------------------------------------------ */

/* get_submission's submission for the key (the reply, to free). */
static json_t *
submission(struct broker *b, const char *id, json_t **reply)
{
	*reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", id,
	    "effect_kind", KIND));
	harness_assert_bool(*reply, "found", 1);
	return json_object_get(*reply, "submission");
}

static void
assert_state(struct broker *b, const char *id, const char *state_name,
    int attempt)
{
	json_t	*reply, *sub;

	sub = submission(b, id, &reply);
	assert_string_equal(harness_str(sub, "state"), state_name);
	assert_int_equal(json_integer_value(json_object_get(sub, "attempt")),
	    attempt);
	json_decref(reply);
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

/* ---- libidem ------------------------------------------------------------------ */

struct side {
	int	performed;
	int	probed;
	enum idem_effect_observed probe_says;
};

static enum idem_effect_observed
perform(const struct idem_effect *begun, char **result, void *arg)
{
	struct side	*s = arg;

	s->performed++;
	assert_int_equal(begun->disposition, IDEM_EFFECT_PROCEED);
	assert_true(begun->fence[0] != '\0');
	assert_int_equal(strncmp(begun->external_key, "idem-", 5), 0);
	*result = strdup("{\"sent\":true}");
	return IDEM_OBSERVED_APPLIED;
}

static enum idem_effect_observed
probe(const struct idem_effect *unknown, char **result, char **source,
    void *arg)
{
	struct side	*s = arg;

	s->probed++;
	assert_int_equal(unknown->disposition, IDEM_EFFECT_OUTCOME_UNKNOWN);
	assert_true(unknown->external_key[0] != '\0');
	if (s->probe_says == IDEM_OBSERVED_APPLIED)
		*result = strdup("{\"found\":\"downstream\"}");
	*source = strdup("unit probe");
	return s->probe_says;
}

static void
libidem_run_performs_once_and_probes_unknowns(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_effect	 out, first;
	struct idem_error	 err;
	struct side		 side = { 0, 0, IDEM_OBSERVED_APPLIED };
	json_t			*reply;
	char			*receipt;

	harness_must_start(b, NULL, NULL);
	c = harness_connect(b);
	assert_non_null(c);
	assert_int_equal(idem_effect_run(c, "run-1", KIND, REQUEST, 0, perform,
	    probe, &side, &first, &err), 0);
	assert_int_equal(first.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(side.performed, 1);
	assert_string_equal(first.result, "{\"sent\":true}");
	receipt = strdup(first.receipt);
	/* Again: reused, not performed, the same receipt. */
	assert_int_equal(idem_effect_run(c, "run-1", KIND, REQUEST, 0, perform,
	    probe, &side, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_REUSED);
	assert_int_equal(side.performed, 1);
	assert_string_equal(out.receipt, receipt);
	idem_effect_clear(&out);
	idem_effect_clear(&first);
	free(receipt);

	/* A begin whose caller vanished: the run probes, then resolves. */
	assert_int_equal(idem_effect_begin(c, "run-2", KIND, REQUEST,
	    SHORT_LEASE_MS, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_PROCEED);
	idem_effect_clear(&out);
	json_decref(begin_until_unknown(b, "run-2", REQUEST));
	/* Without a probe: the state, never a perform. */
	assert_int_equal(idem_effect_run(c, "run-2", KIND, REQUEST, 0, perform,
	    NULL, &side, &out, &err), -1);
	assert_int_equal(out.disposition, IDEM_EFFECT_OUTCOME_UNKNOWN);
	assert_int_equal(err.code, IDEM_E_OUTCOME_UNKNOWN);
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_run(c, "run-2", KIND, REQUEST, 0, perform,
	    probe, &side, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(out.recovered, 1);
	assert_int_equal(side.probed, 1);
	assert_int_equal(side.performed, 1);
	assert_string_equal(out.result, "{\"found\":\"downstream\"}");
	idem_effect_clear(&out);

	/* A probe that finds nothing: released, then performed once. */
	side.probe_says = IDEM_OBSERVED_NOT_APPLIED;
	assert_int_equal(idem_effect_begin(c, "run-3", KIND, REQUEST,
	    SHORT_LEASE_MS, &out, &err), 0);
	idem_effect_clear(&out);
	json_decref(begin_until_unknown(b, "run-3", REQUEST));
	assert_int_equal(idem_effect_run(c, "run-3", KIND, REQUEST, 0, perform,
	    probe, &side, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(out.attempt, 2);
	assert_int_equal(side.performed, 2);
	idem_effect_clear(&out);

	/* Conflict: another request under the same id. */
	assert_int_equal(idem_effect_run(c, "run-1", KIND, "{\"other\":1}", 0,
	    perform, probe, &side, &out, &err), -1);
	assert_int_equal(out.disposition, IDEM_EFFECT_CONFLICT);
	assert_int_equal(err.code, IDEM_E_CONFLICT);
	assert_string_equal(err.reason, "digest_mismatch");
	assert_int_equal(side.performed, 2);
	idem_effect_clear(&out);
	idem_close(c);

	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(json_integer_value(json_object_get(reply,
	    "effects_proceed")), 4);
	json_decref(reply);
	harness_finish(b);
}

/*
 * The receipt member of a raw answer line (its value runs to the line's
 * closing brace: the broker writes it last) and, in it, the result's
 * bytes (up to the receipt's state, which follows it).
 */
static void
raw_receipt_and_result(const char *line, char **receipt, char **result)
{
	const char	*r, *v, *at, *last = NULL;
	size_t		 n = strlen(line);

	assert_non_null(r = strstr(line, "\"receipt\":"));
	r += strlen("\"receipt\":");
	assert_true(n >= 2 && line[n - 1] == '}' && line[n - 2] == '}');
	assert_non_null(*receipt = strndup(r, (size_t)(line + n - 1 - r)));
	assert_non_null(v = strstr(*receipt, "\"result\":"));
	v += strlen("\"result\":");
	for (at = v; (at = strstr(at, ",\"state\":\"committed\"")) != NULL;
	    at++)
		last = at;
	assert_non_null(last);
	assert_non_null(*result = strndup(v, (size_t)(last - v)));
}

/*
 * libidem's receipt and result are the bytes the broker sent (compact):
 * byte-equal to the receipt of the raw answer to a retry (idem_call_raw)
 * and the result in it, for results with non-ASCII, escapes (kept as
 * jansson writes them, \u001F, \", \\, \n), a caller's own spacing,
 * reals and member order; each also as the literal compact text.  A
 * result holding U+0000 (SPEC.md: no string in a request may) is refused
 * before anything is sent: no receipt, no result, and the same effect
 * then commits.
 */
static void
libidem_receipt_and_result_as_sent(void **state)
{
	static const struct {
		const char	*sent;		/* the caller's result_json */
		const char	*compact;	/* what the broker keeps */
	} results[] = {
		{ "{\"text\":\"caf\xc3\xa9 \xe2\x98\x83 \xf0\x9d\x84\x9e\"}",
		  "{\"text\":\"caf\xc3\xa9 \xe2\x98\x83 \xf0\x9d\x84\x9e\"}" },
		{ "{\"q\":\"say \\\"hi\\\" \\\\ \\/ \\n\\t\\u001f\\u00e9\"}",
		  "{\"q\":\"say \\\"hi\\\" \\\\ / \\n\\t\\u001F\xc3\xa9\"}" },
		{ "{ \"z\" : [ 1 , 2.5 , -0 , 1e2 ] , \"a\" : null }",
		  "{\"z\":[1,2.5,0,100.0],\"a\":null}" },
		{ "\"line\\nbreak \\u2028\"",
		  "\"line\\nbreak \xe2\x80\xa8\"" },
	};
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_effect	 out, again;
	struct idem_error	 err;
	char			 id[32], line[512], *answer, *receipt, *result;
	size_t			 i;

	harness_must_start(b, NULL, NULL);
	c = harness_connect(b);
	assert_non_null(c);
	for (i = 0; i < sizeof results / sizeof results[0]; i++) {
		snprintf(id, sizeof id, "as-%zu", i);
		assert_int_equal(idem_effect_begin(c, id, KIND, REQUEST, 0,
		    &out, &err), 0);
		assert_int_equal(out.disposition, IDEM_EFFECT_PROCEED);
		assert_null(out.receipt);
		assert_int_equal(idem_effect_complete(c, id, KIND, out.fence, 1,
		    results[i].sent, &again, &err), 0);
		idem_effect_clear(&out);
		assert_int_equal(again.disposition, IDEM_EFFECT_COMMITTED);
		assert_string_equal(again.result, results[i].compact);

		/* The retry's raw answer: the same receipt, byte for byte. */
		snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
		    "\"client_submission_id\":\"%s\",\"effect_kind\":\"%s\","
		    "\"request\":%s}", id, KIND, REQUEST);
		assert_int_equal(idem_call_raw(c, line, &answer, &err), 0);
		assert_non_null(strstr(answer, "\"disposition\":\"reused\""));
		raw_receipt_and_result(answer, &receipt, &result);
		assert_string_equal(again.receipt, receipt);
		assert_string_equal(result, results[i].compact);
		assert_int_equal(idem_effect_begin(c, id, KIND, REQUEST, 0,
		    &out, &err), 0);
		assert_int_equal(out.disposition, IDEM_EFFECT_REUSED);
		assert_string_equal(out.receipt, receipt);
		assert_string_equal(out.result, result);
		idem_effect_clear(&out);
		idem_effect_clear(&again);
		free(receipt);
		free(result);
		free(answer);
	}

	/* U+0000 in a result: refused here, nothing stored, no receipt. */
	assert_int_equal(idem_effect_begin(c, "as-nul", KIND, REQUEST, 0,
	    &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_PROCEED);
	assert_int_equal(idem_effect_complete(c, "as-nul", KIND, out.fence, 1,
	    "{\"a\":\"x\\u0000y\"}", &again, &err), -1);
	assert_int_equal(err.code, IDEM_E_ARGUMENT);
	assert_string_equal(err.field, "result");
	assert_int_equal(again.disposition, IDEM_EFFECT_NONE);
	assert_null(again.receipt);
	assert_null(again.result);
	assert_state(b, "as-nul", "reserved", 1);
	assert_int_equal(idem_effect_complete(c, "as-nul", KIND, out.fence, 1,
	    "{\"a\":\"xy\"}", &again, &err), 0);
	assert_int_equal(again.disposition, IDEM_EFFECT_COMMITTED);
	assert_string_equal(again.result, "{\"a\":\"xy\"}");
	idem_effect_clear(&again);
	idem_effect_clear(&out);
	idem_close(c);
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
		T(not_applied_releases_and_stale_fences_change_nothing),
		T(lapsed_lease_is_outcome_unknown_never_proceed),
		T(resolve_settles_by_evidence),
		T(forged_fence_of_current_attempt_is_stale),
		T(not_applied_after_lapse_releases),
		T(complete_after_resolve_unknown_is_accepted),
		T(lease_bounds_and_null_default),
		T(applied_without_result_is_null),
		T(nul_in_result_is_refused_and_nothing_stored),
		T(bad_requests_are_refused_and_change_nothing),
		T(concurrent_begins_exactly_one_proceeds),
		T(restart_and_kill_keep_receipts_and_leases),
		T(crash_after_effect_reserve_durable),
		T(crash_after_effect_commit_durable),
		T(crash_after_effect_release_durable),
		T(crash_after_effect_resolve_durable),
		T(worker_crash_after_effect_commit_durable),
		T(checkpoint_carries_results),
		T(journal_fault_acknowledges_nothing_and_retry_completes),
		T(libidem_run_performs_once_and_probes_unknowns),
		T(libidem_receipt_and_result_as_sent),
#undef T
	};

	/* IDEM_TEST_FILTER=word or glob runs the matching tests only. */
	if (FILTER_APPLY(tests) == -1)
		return 1;
	return harness_exit_status(cmocka_run_group_tests(tests, NULL,
	    NULL));
}
