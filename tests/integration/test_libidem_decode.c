/* SPDX-License-Identifier: ISC */
/*
 * test_libidem_decode.c: libidem's effect answers decoded without a
 * tree (idem_effect_parse, libclient/replyscan.c): a broker's raw
 * answers decode as the calls decode them, every cut or corrupted
 * answer is a protocol error, and 3,000 seeded random answers decode
 * as a jansson tree reads them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"
#include "integration/libidem_test.h"
#include "protocol.h"

/* ---- effect answers decoded without a tree ------------------------------ */

#define PARSE_REQUEST	"{\"to\":\"a@b\",\"n\":[1,2.5,\"\\u00e9\"]}"
#define PARSE_RESULT	"{\"id\":\"m-1\",\"e\":1e3,\"s\":\"q\\\"\\u00e9\"}"

/* idem_effect_parse of line, which must fail as a protocol error. */
static void
parse_refused(const char *line)
{
	struct idem_effect	out;
	struct idem_error	err;

	assert_int_equal(idem_effect_parse(line, &out, &err), -1);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_int_equal(out.disposition, IDEM_EFFECT_NONE);
	assert_null(out.receipt);
	idem_effect_clear(&out);
}

/*
 * A broker's reused answer, taken raw, decodes by idem_effect_parse to
 * what idem_effect_begin gives (the same code), its receipt the bytes
 * sent and its result jansson's value; a conflict's refusal to its
 * error; and every cut of the answer, a control byte put at each of its
 * places or a member doubled is a protocol error (jansson would refuse
 * each), never an outcome or a crash.
 */
static void
effect_answers_decoded_without_a_tree(void **state)
{
	struct broker		*b = *state;
	struct idem_conn	*c;
	struct idem_effect	 begun, done, reused, parsed;
	struct idem_error	 err, perr;
	json_t			*tree, *want, *got;
	char			 line[1024], *answer, *cut, *conflict;
	size_t			 n, k;

	harness_must_start(b, NULL, NULL);
	c = connect_to(b);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    PARSE_REQUEST, 0, &begun, &err), 0);
	assert_int_equal(begun.disposition, IDEM_EFFECT_PROCEED);
	assert_int_equal(idem_effect_complete(c, "parse-1", "mail",
	    begun.fence, 1, PARSE_RESULT, &done, &err), 0);
	assert_int_equal(done.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    PARSE_REQUEST, 0, &reused, &err), 0);
	assert_int_equal(reused.disposition, IDEM_EFFECT_REUSED);

	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-1\",\"effect_kind\":\"mail\","
	    "\"request\":%s}", PARSE_REQUEST);
	assert_int_equal(idem_call_raw(c, line, &answer, &err), 0);
	assert_int_equal(idem_effect_parse(answer, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_REUSED);
	assert_int_equal(parsed.attempt, reused.attempt);
	assert_int_equal(parsed.action_taken, reused.action_taken);
	assert_string_equal(parsed.fence, reused.fence);
	assert_string_equal(parsed.external_key, reused.external_key);
	assert_string_equal(parsed.state, "committed");
	assert_string_equal(parsed.request_digest, reused.request_digest);
	assert_string_equal(parsed.committed_at, reused.committed_at);
	assert_string_equal(parsed.receipt, reused.receipt);
	assert_string_equal(parsed.receipt, done.receipt);
	assert_non_null(strstr(answer, parsed.receipt));
	assert_string_equal(parsed.result, reused.result);
	assert_non_null(tree = json_loads(answer, JSON_REJECT_DUPLICATES,
	    NULL));
	want = json_object_get(json_object_get(tree, "receipt"), "result");
	assert_non_null(got = json_loads(parsed.result, JSON_DECODE_ANY,
	    NULL));
	assert_true(json_equal(got, want));
	json_decref(got);
	json_decref(tree);

	/* A refusal: conflict, its error decoded as the call decodes it. */
	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-1\",\"effect_kind\":\"mail\","
	    "\"request\":{\"other\":1}}");
	assert_int_equal(idem_call_raw(c, line, &conflict, &err), 0);
	idem_effect_clear(&reused);
	assert_int_equal(idem_effect_begin(c, "parse-1", "mail",
	    "{\"other\":1}", 0, &reused, &err), 0);
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(conflict, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_CONFLICT);
	assert_int_equal(perr.code, IDEM_E_CONFLICT);
	assert_int_equal(perr.code, err.code);
	assert_string_equal(perr.message, err.message);
	assert_string_equal(perr.reason, err.reason);
	assert_int_equal(perr.retryable, err.retryable);
	assert_string_equal(parsed.fence, reused.fence);
	assert_string_equal(parsed.state, "committed");	/* existing's */

	/* in_progress: a retryable refusal, as its bytes say. */
	idem_effect_clear(&begun);
	assert_int_equal(idem_effect_begin(c, "parse-2", "mail",
	    PARSE_REQUEST, 0, &begun, &err), 0);
	snprintf(line, sizeof line, "{\"op\":\"effect_begin\","
	    "\"client_submission_id\":\"parse-2\",\"effect_kind\":\"mail\","
	    "\"request\":%s}", PARSE_REQUEST);
	free(conflict);
	assert_int_equal(idem_call_raw(c, line, &conflict, &err), 0);
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(conflict, &parsed, &perr), 0);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_IN_PROGRESS);
	assert_int_equal(perr.code, IDEM_E_IN_PROGRESS);
	assert_non_null(tree = json_loads(conflict, 0, NULL));
	assert_true(json_is_true(json_object_get(json_object_get(tree,
	    "error"), "retryable")));
	json_decref(tree);
	assert_int_equal(perr.retryable, 1);

	n = strlen(answer);
	assert_non_null(cut = malloc(2 * n + 16));
	for (k = 0; k < n; k++) {
		memcpy(cut, answer, k);
		cut[k] = '\0';
		parse_refused(cut);
		memcpy(cut, answer, n + 1);
		cut[k] = '\x01';
		parse_refused(cut);
	}
	snprintf(cut, 2 * n + 16, "{\"ok\":true,%s", answer + 1);
	parse_refused(cut);
	parse_refused("[{\"ok\":true}]");
	parse_refused("{\"ok\":1,\"disposition\":\"reused\"}");
	/* No response: refused as an argument, not read. */
	idem_effect_clear(&parsed);
	assert_int_equal(idem_effect_parse(NULL, &parsed, &perr), -1);
	assert_int_equal(perr.code, IDEM_E_ARGUMENT);
	assert_int_equal(parsed.disposition, IDEM_EFFECT_NONE);
	/* A disposition longer than any is refused, not cut to fit. */
	parse_refused("{\"ok\":true,\"disposition\":"
	    "\"reused_reused_reused_reused_reused\"}");
	free(cut);
	free(conflict);
	free(answer);
	idem_effect_clear(&begun);
	idem_effect_clear(&done);
	idem_effect_clear(&reused);
	idem_effect_clear(&parsed);
	idem_close(c);
	harness_finish(b);
}

/* ---- idem_effect_parse against a jansson tree, random answers ------------ */

#define RANDOM_ANSWERS		3000
#define RANDOM_ANSWERS_SEED	0x1dea34u

/* xorshift32: the same answers every run (the seed is printed). */
static uint32_t
random_next(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* A random JSON value of jansson's: reals, integers, odd strings, wide
 * and nested objects, arrays. */
static json_t *
random_value(uint32_t *x, int depth)
{
	static const char *const strings[] = {
		"", "a", "q\"uote", "back\\slash", "\xc3\xa9t\xc3\xa9",
		"\xf0\x9f\x98\x80", "tab\there", "line\nfeed", "\x01",
		"slash/", "m3",
	};
	json_t	*v;
	size_t	 i, n;
	char	 key[32];

	switch (random_next(x) % (depth > 3 ? 5 : 7)) {
	case 0:
		return json_integer((json_int_t)random_next(x) *
		    (random_next(x) % 2 ? 1 : -1) * (json_int_t)1000003);
	case 1:
		return json_real((double)(int32_t)random_next(x) /
		    (double)(1 + random_next(x) % 100000) *
		    (random_next(x) % 3 == 0 ? 1e300 : 1e-7));
	case 2:
		return json_string(strings[random_next(x) %
		    (sizeof strings / sizeof strings[0])]);
	case 3:
		return random_next(x) % 2 ? json_true() : json_null();
	case 4:
		return json_real(0.5 * (random_next(x) % 64));
	case 5:
		v = json_object();
		n = random_next(x) % 3 == 0 ? 33 + random_next(x) % 40 :
		    random_next(x) % 6;
		for (i = 0; i < n; i++) {
			snprintf(key, sizeof key, "%s%zu", strings[
			    random_next(x) % (sizeof strings /
			    sizeof strings[0])], i);
			json_object_set_new(v, key, random_value(x, depth + 1));
		}
		return v;
	default:
		v = json_array();
		n = random_next(x) % 6;
		for (i = 0; i < n; i++)
			json_array_append_new(v, random_value(x, depth + 1));
		return v;
	}
}

/* A reused answer around a random result, compact or with spaces. */
static char *
random_answer(uint32_t *x)
{
	json_t	*answer, *receipt;
	char	*line, key[40];

	snprintf(key, sizeof key, "idem-%08x", (unsigned)random_next(x));
	receipt = json_pack("{s:s, s:s, s:s, s:I, s:o, s:s}",
	    "client_submission_id", "rand\"om\xc3\xa9", "effect_kind", "mail",
	    "external_key", key, "attempt", (json_int_t)(1 +
	    random_next(x) % 1000), "result", random_value(x, 0), "state",
	    "committed");
	answer = json_pack("{s:b, s:s, s:b, s:s, s:o}", "ok", 1,
	    "disposition", "reused", "action_taken", 0, "state", "committed",
	    "receipt", receipt);
	assert_non_null(answer);
	line = json_dumps(answer, (random_next(x) % 2 ? JSON_COMPACT : 0) |
	    (random_next(x) % 2 ? JSON_SORT_KEYS : 0));
	json_decref(answer);
	assert_non_null(line);
	return line;
}

/* A JSON text against a tree value: the same once parsed (both absent). */
static void
same_json(const char *text, json_t *want)
{
	json_t	*got;

	if (want == NULL) {
		assert_null(text);
		return;
	}
	assert_non_null(text);
	assert_non_null(got = json_loads(text, JSON_DECODE_ANY, NULL));
	assert_true(json_equal(got, want));
	json_decref(got);
}

/*
 * idem_effect_parse against a jansson tree of the same answers: 3,000
 * random reused answers (results of reals, long integers, escaped and
 * non-ASCII strings, objects past 32 members, nesting), each whole and
 * with one byte replaced.  jansson refuses a line: a protocol error;
 * the line decodes: its disposition, attempt, external key, receipt
 * and result are the tree's.  Seeded, about a second.
 */
static void
effect_parse_agrees_with_a_tree(void **state)
{
	static const char	 bytes[] = "\"\\{}[],:0e.-x \x01\x80\xc3\xff";
	struct idem_effect	 out;
	struct idem_error	 err;
	uint32_t		 x = RANDOM_ANSWERS_SEED;
	json_t			*tree, *receipt;
	const char		*text;
	json_int_t		 attempt;
	size_t			 i, n;
	char			*line;
	int			 rc, mutated;

	(void)state;
	print_message("seed %#x, %d answers\n", RANDOM_ANSWERS_SEED,
	    RANDOM_ANSWERS);
	for (i = 0; i < RANDOM_ANSWERS; i++) {
		line = random_answer(&x);
		n = strlen(line);
		if ((mutated = (int)(random_next(&x) % 2)))
			line[random_next(&x) % n] = bytes[random_next(&x) %
			    (sizeof bytes - 1)];
		tree = json_loadb(line, strlen(line), JSON_REJECT_DUPLICATES,
		    NULL);
		rc = idem_effect_parse(line, &out, &err);
		if (tree == NULL) {
			if (rc != -1 || err.code != IDEM_E_PROTOCOL)
				fail_msg("answer %zu refused by jansson, "
				    "taken: %s", i, line);
		} else if (rc == 0) {
			assert_true(json_is_object(tree));
			/* A disposition as sent, else ok's and state's. */
			text = json_string_value(json_object_get(tree,
			    "disposition"));
			assert_string_equal(text != NULL ? text : "committed",
			    text != NULL ? "reused" : out.state);
			assert_int_equal(out.disposition, text != NULL ?
			    IDEM_EFFECT_REUSED : IDEM_EFFECT_COMMITTED);
			receipt = json_object_get(tree, "receipt");
			/* libidem keeps only a positive attempt. */
			attempt = json_integer_value(json_object_get(receipt,
			    "attempt"));
			assert_int_equal(out.attempt, attempt > 0 ? attempt :
			    0);
			text = json_string_value(json_object_get(receipt,
			    "external_key"));
			assert_string_equal(out.external_key, text != NULL ?
			    text : "");
			same_json(out.receipt, receipt);
			same_json(out.result, json_object_get(receipt,
			    "result"));
		} else if (!mutated)
			fail_msg("answer %zu refused: %s: %s", i, err.message,
			    line);
		json_decref(tree);
		idem_effect_clear(&out);
		free(line);
	}
}

/* ---- error codes ------------------------------------------------------- */

#define NEWER_CODE	"too_many_connections_per_tenant"

/* idem_effect_parse of a refusal without a disposition, code as given. */
static void
parse_error_code(const char *code, struct idem_error *err)
{
	struct idem_effect	out;
	char			line[256];

	snprintf(line, sizeof line, "{\"ok\":false,\"action_taken\":false,"
	    "\"error\":{\"code\":\"%s\",\"message\":\"m\","
	    "\"retryable\":true}}", code);
	assert_int_equal(idem_effect_parse(line, &out, err), -1);
	assert_int_equal(out.disposition, IDEM_EFFECT_NONE);
	idem_effect_clear(&out);
}

/*
 * Every error code of protocol.h, the longest too, decodes from an
 * effect answer to its own code (fails if libidem's buffer for the
 * code is shorter than the longest); a newer, longer code that begins
 * with a known one is unknown, a protocol error with its name in the
 * message (fails if the buffer is exactly the longest known code's
 * size: the cut name would be taken for too_many_connections).
 */
static void
effect_error_codes_decoded(void **state)
{
	static const struct {
		enum idem_error_code	 code;
		const char		*name;
	} codes[] = {
#define CODE(code, name)	{ IDEM_E_##code, name },
		IDEM_ERROR_CODES(CODE)
#undef CODE
	};
	struct idem_error	err;
	size_t			i;

	(void)state;
	for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		parse_error_code(codes[i].name, &err);
		if (err.code != codes[i].code)
			fail_msg("%s decoded as code %d (%s)", codes[i].name,
			    (int)err.code, err.message);
		assert_string_equal(err.message, "m");
		assert_int_equal(err.retryable, 1);
	}
	parse_error_code(NEWER_CODE, &err);
	assert_int_equal(err.code, IDEM_E_PROTOCOL);
	assert_int_equal(strncmp(err.message, "too_many_connections_",
	    strlen("too_many_connections_")), 0);
	assert_int_equal(err.retryable, 1);
}

#define T(name)	cmocka_unit_test_setup_teardown(name, harness_setup, \
	    harness_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(effect_answers_decoded_without_a_tree),
		cmocka_unit_test(effect_parse_agrees_with_a_tree),
		cmocka_unit_test(effect_error_codes_decoded),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
