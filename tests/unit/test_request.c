/* SPDX-License-Identifier: ISC */
/*
 * test_request.c: the worker's parse of a request line
 * (request_parse_line, broker/request.c) against request_parse, the
 * whole line by jansson: for effect_complete lines with a result in
 * compact form (the lean parse: the tree holds null for the result)
 * and in every other form, valid or not, the same verdict, the same
 * refusal, the same tree but for the result, and the same result bytes
 * and has_result once effect_parse has read it with its line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "idemd.h"

#define FENCE	"\"fence\":\"1-0123456789abcdef\""
#define HEAD	"{\"op\":\"effect_complete\",\"id\":7," \
		"\"client_submission_id\":\"sub-1\",\"effect_kind\":\"mail\"," \
		FENCE ",\"outcome\":\"applied\","

/* A result of about 300 bytes, in compact form: the lean parse takes it. */
#define LONG	"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghij" \
		"klmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01234"
#define RESULT	"{\"message_id\":\"m-" LONG "\",\"body\":\"" LONG \
		"\",\"n\":[1,-3,true,false,null,{},[]]}"

/*
 * The effect_parse of a complete over tree, with its line as the worker
 * gives it: rc, and the stored result bytes (malloc'd) and has_result.
 */
static int
complete_read(json_t *tree, const char *line, const char *line_result,
    size_t line_result_length, char **result, int *has_result,
    struct request_error *err)
{
	struct effect	*e;
	int		 rc;

	e = calloc(1, sizeof *e);
	assert_non_null(e);
	e->line = line;
	e->line_length = strlen(line);
	e->line_result = line_result;
	e->line_result_length = line_result_length;
	rc = effect_parse(EFFECT_COMPLETE, tree, e, err);
	*result = rc == 0 && e->result != NULL ? strdup(e->result) : NULL;
	*has_result = e->has_result;
	effect_free(e);
	return rc;
}

/*
 * line through both parses: the same verdict and refusal; for a tree,
 * the same members but result, and the same result after effect_parse.
 * Returns 1 if the lean parse was taken (it named the result in the line
 * and left null in the tree).
 */
static int
same_as_whole(const char *line)
{
	struct request_error	 err_whole, err_lean;
	json_t			*whole, *lean, *w, *l;
	const char		*raw;
	size_t			 raw_length;
	char			*r_whole, *r_lean;
	int			 has_whole, has_lean, rc_whole, rc_lean, lean_taken;

	memset(&err_whole, 0, sizeof err_whole);
	memset(&err_lean, 0, sizeof err_lean);
	whole = request_parse(line, strlen(line), &err_whole);
	lean = request_parse_line(line, strlen(line), &raw, &raw_length,
	    &err_lean);
	if (whole == NULL) {
		if (lean != NULL)
			fail_msg("lean parse accepted what jansson refused: %s",
			    line);
		assert_int_equal(err_whole.code, err_lean.code);
		assert_string_equal(err_whole.message, err_lean.message);
		assert_string_equal(err_whole.field, err_lean.field);
		return 0;
	}
	if (lean == NULL)
		fail_msg("lean parse refused what jansson accepted: %s", line);
	w = json_deep_copy(whole);
	l = json_deep_copy(lean);
	/* Taken: the result named in the line, null in the tree. */
	lean_taken = raw != NULL;
	if (lean_taken)
		assert_true(json_is_null(json_object_get(lean, "result")));
	json_object_del(w, "result");
	json_object_del(l, "result");
	if (!json_equal(w, l))
		fail_msg("the trees differ beyond result: %s", line);
	json_decref(w);
	json_decref(l);
	rc_whole = complete_read(whole, line, NULL, 0, &r_whole, &has_whole,
	    &err_whole);
	rc_lean = complete_read(lean, line, raw, raw_length, &r_lean,
	    &has_lean, &err_lean);
	assert_int_equal(rc_whole, rc_lean);
	assert_int_equal(has_whole, has_lean);
	if (rc_whole != 0) {
		assert_string_equal(err_whole.message, err_lean.message);
	} else {
		assert_non_null(r_whole);
		assert_non_null(r_lean);
		assert_string_equal(r_whole, r_lean);
	}
	free(r_whole);
	free(r_lean);
	json_decref(whole);
	json_decref(lean);
	return lean_taken;
}

/* The common line, its result as jansson dumps it: the lean parse. */
static void
test_compact_result_is_not_parsed(void **state)
{
	(void)state;
	assert_true(same_as_whole(HEAD "\"result\":" RESULT "}"));
	assert_true(same_as_whole(HEAD "\"result\":\"" LONG LONG "\"}"));
	/* space around the value is not the value's */
	assert_true(same_as_whole(HEAD "\"result\": " RESULT " }"));
	/* refused by the checks, not the parse: the same refusal */
	assert_true(same_as_whole(HEAD "\"result\":" RESULT ",\"extra\":1}"));
	assert_true(same_as_whole("{\"op\":\"effect_complete\","
	    "\"client_submission_id\":\"s\",\"effect_kind\":\"k\"," FENCE
	    ",\"outcome\":\"maybe\",\"result\":" RESULT "}"));
	/* result first, meta after it, spaces between members */
	assert_true(same_as_whole("{\"result\":" RESULT " , \"op\" : "
	    "\"effect_complete\",\"client_submission_id\":\"s\","
	    "\"effect_kind\":\"k\"," FENCE ",\"outcome\":\"applied\","
	    "\"meta\":{\"a\":1}}  "));
}

/* Every other form: parsed whole, the same answers either way. */
static void
test_other_lines_parsed_whole(void **state)
{
	static const char *const lines[] = {
		/* result not in compact form */
		HEAD "\"result\":{\"a\" :\"" LONG LONG "\"}}",
		HEAD "\"result\":\"" LONG "\\u0041" LONG "\"}",
		HEAD "\"result\":[1.0,\"" LONG LONG "\"]}",
		/* escapes in op or in a key */
		"{\"op\":\"effect\\u005fcomplete\",\"id\":1,"
		    "\"client_submission_id\":\"s\",\"effect_kind\":\"k\","
		    FENCE ",\"outcome\":\"applied\",\"result\":" RESULT "}",
		"{\"op\":\"effect_complete\",\"\\u0072esult\":" RESULT ","
		    "\"client_submission_id\":\"s\",\"effect_kind\":\"k\","
		    FENCE ",\"outcome\":\"applied\"}",
		/* refusals: bad JSON in the result, around it, after it */
		HEAD "\"result\":{\"a\":\"" LONG LONG "\",}}",
		HEAD "\"result\":{\"a\":\"" LONG LONG "\",\"a\":1}}",
		HEAD "\"result\":\"" LONG LONG "\xff\"}",
		HEAD "\"result\":" RESULT "} x",
		HEAD "\"result\":" RESULT ",\"result\":1}",
		HEAD "\"result\":" RESULT,
		"[" HEAD "\"result\":" RESULT "}]",
		/* a NUL: jansson lets it through, the checks judge it */
		HEAD "\"result\":\"" LONG LONG "\\u0000\"}",
		/* no result; another op with a result member */
		HEAD "\"meta\":\"" LONG LONG "\"}",
		"{\"op\":\"effect_begin\",\"client_submission_id\":\"s\","
		    "\"effect_kind\":\"k\",\"request\":1,\"result\":" RESULT
		    "}",
	};
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		if (same_as_whole(lines[i]))
			fail_msg("lean parse taken for %s", lines[i]);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compact_result_is_not_parsed),
		cmocka_unit_test(test_other_lines_parsed_whole),
	};

	if (FILTER_APPLY(tests) == -1)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
