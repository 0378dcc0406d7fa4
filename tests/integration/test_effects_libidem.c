/* SPDX-License-Identifier: ISC */
/*
 * test_effects_libidem.c: libidem's effect calls against a real idemd:
 * idem_effect_run with a side effect that counts (performed once, an
 * unknown outcome probed), and libidem's receipt and result as the
 * broker sent them, byte-equal to a raw retry's answer.
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
		T(libidem_run_performs_once_and_probes_unknowns),
		T(libidem_receipt_and_result_as_sent),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
