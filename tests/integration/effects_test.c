/* SPDX-License-Identifier: ISC */
/*
 * effects_test.c: the effect ledger's calls that the test_effects*,
 * test_effect_extend and test_durable_watch programs share (effects_test.h): requests built and sent over the
 * harness, answers judged, receipts taken as they came on the wire.
 * Nothing here decides a test's verdict on its own; it fails the
 * running test on an answer it does not expect.
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

#include "integration/harness.h"
#include "integration/effects_test.h"

json_t *
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

json_t *
begin(struct broker *b, const char *id, const char *request_json,
    int64_t lease_ms)
{
	return harness_must_call(b, begin_request(id, KIND, request_json,
	    lease_ms));
}

json_t *
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

json_t *
complete(struct broker *b, const char *id, const char *fence,
    const char *outcome, const char *result_json)
{
	return harness_must_call(b, complete_request(id, fence, outcome,
	    result_json));
}

json_t *
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

json_t *
resolve(struct broker *b, const char *id, const char *observed,
    const char *result_json)
{
	return harness_must_call(b, resolve_request(id, observed, result_json));
}

void
assert_disposition(json_t *reply, const char *disposition)
{
	const char	*got = json_string_value(json_object_get(reply,
			    "disposition"));

	if (got == NULL || strcmp(got, disposition) != 0) {
		char *text = json_dumps(reply, JSON_COMPACT);

		fail_msg("expected %s, got %s", disposition, text);
	}
}

void
assert_reason(json_t *reply, const char *reason)
{
	json_t	*error = json_object_get(reply, "error");

	assert_disposition(reply, "conflict");
	assert_string_equal(harness_str(error, "code"), "conflict");
	assert_string_equal(harness_str(error, "reason"), reason);
	harness_assert_bool(reply, "ok", 0);
}

void
assert_error(json_t *reply, const char *code, const char *field)
{
	json_t	*error = json_object_get(reply, "error");

	harness_assert_bool(reply, "ok", 0);
	assert_string_equal(harness_str(error, "code"), code);
	if (field != NULL)
		assert_string_equal(harness_str(error, "field"), field);
}

/* The reply's receipt as it came on the wire (its bytes, malloc'd). */
char *
wire_receipt(struct broker *b, json_t *request)
{
	char	*line, *text, *out;
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
	out = harness_receipt_bytes(line);
	free(line);
	return out;
}

/* Poll (with the lease as the only clock) until begin says the lease lapsed. */
json_t *
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

char *
fence_of(json_t *reply)
{
	assert_disposition(reply, "proceed");
	return strdup(harness_str(reply, "fence"));
}

/* get_submission's submission for the key (the reply, to free). */
json_t *
submission(struct broker *b, const char *id, json_t **reply)
{
	*reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}",
	    "op", "get_submission", "client_submission_id", id,
	    "effect_kind", KIND));
	harness_assert_bool(*reply, "found", 1);
	return json_object_get(*reply, "submission");
}

void
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
