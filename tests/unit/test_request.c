/* SPDX-License-Identifier: ISC */
/*
 * test_request.c: the worker's parse of a request line
 * (request_parse_line, broker/request_tree.c) against request_parse,
 * the whole line by jansson: the same verdict, the same refusal, and
 * the same tree, member order and number types included (their dumps
 * compared), for lines of every kind of value, escape and layout, and
 * random trees written in several layouts; for effect_complete lines
 * with a result in compact form (the tree holds null for the result)
 * the same result bytes and has_result once effect_parse has read it
 * with its line.
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
#include "replyscan.h"

#define FENCE	"\"fence\":\"1-0123456789abcdef\""
#define HEAD	"{\"op\":\"effect_complete\",\"id\":7," \
		"\"client_submission_id\":\"sub-1\",\"effect_kind\":\"mail\"," \
		FENCE ",\"outcome\":\"applied\","

/* A result of about 300 bytes, in compact form: the lean parse takes it. */
#define LONG	"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghij" \
		"klmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01234"
#define RESULT	"{\"message_id\":\"m-" LONG "\",\"body\":\"" LONG \
		"\",\"n\":[1,-3,true,false,null,{},[]]}"

/* A tree's dump: its members in order, integers apart from reals. */
static char *
dump(json_t *tree)
{
	char	*s;

	s = json_dumps(tree, JSON_COMPACT | JSON_PRESERVE_ORDER |
	    JSON_ENCODE_ANY);
	assert_non_null(s);
	return s;
}

/*
 * A line replyscan accepts whole is built by request_tree_build, with no
 * fallback to request_parse (which gives the same tree, so the fallback
 * is seen only here): non-NULL, and whole's tree (its result null if
 * the build named the result in the line).  1 if replyscan accepted it.
 */
static int
built_without_fallback(const char *line, size_t length, json_t *whole)
{
	struct replyscan_object	 top;
	json_t			*built, *expected;
	const char		*raw;
	size_t			 raw_length;
	char			*a, *b;

	if (replyscan_line(line, length, &top) != REPLYSCAN_OBJECT ||
	    top.by_jansson || top.overflow)
		return 0;
	assert_non_null(whole);
	built = request_tree_build(line, length, &raw, &raw_length);
	if (built == NULL)
		fail_msg("replyscan accepts, the tree's build fell back: %.*s",
		    (int)length, line);
	expected = json_deep_copy(whole);
	assert_non_null(expected);
	if (raw != NULL)
		json_object_set_new(expected, "result", json_null());
	a = dump(expected);
	b = dump(built);
	if (strcmp(a, b) != 0)
		fail_msg("built tree differs for %.*s:\n%s\n%s", (int)length,
		    line, a, b);
	free(a);
	free(b);
	json_decref(expected);
	json_decref(built);
	return 1;
}

/*
 * Both parses of line: the same refusal, or the same tree.  1 if
 * replyscan accepted the line (built_without_fallback).
 */
static int
same_tree(const char *line, size_t length)
{
	struct request_error	 err_whole, err_lean;
	json_t			*whole, *lean;
	const char		*raw;
	size_t			 raw_length;
	char			*a, *b;
	int			 built;

	memset(&err_whole, 0, sizeof err_whole);
	memset(&err_lean, 0, sizeof err_lean);
	whole = request_parse(line, length, &err_whole);
	lean = request_parse_line(line, length, &raw, &raw_length, &err_lean);
	if (whole == NULL || lean == NULL) {
		if (whole != NULL || lean != NULL)
			fail_msg("one parse refused, one accepted: %.*s",
			    (int)length, line);
		assert_int_equal(err_whole.code, err_lean.code);
		assert_string_equal(err_whole.message, err_lean.message);
		assert_string_equal(err_whole.field, err_lean.field);
		return built_without_fallback(line, length, whole);
	}
	assert_null(raw);
	built = built_without_fallback(line, length, whole);
	a = dump(whole);
	b = dump(lean);
	if (strcmp(a, b) != 0)
		fail_msg("trees differ for %.*s:\n%s\n%s", (int)length, line,
		    a, b);
	free(a);
	free(b);
	json_decref(whole);
	json_decref(lean);
	return built;
}

/* Values of every kind, escapes, layouts: the same tree as jansson's. */
static void
test_trees_as_jansson_builds_them(void **state)
{
	static const char *const lines[] = {
		"{}",
		" {\"op\" : \"write_task\" , \"id\":1}\t",
		"{\"op\":\"x\",\"id\":-0,\"a\":0,\"b\":-9223372036854775808,"
		    "\"c\":9223372036854775807,\"d\":1.5,\"e\":-2e10,"
		    "\"f\":1E+2,\"g\":0.0,\"h\":true,\"i\":false,\"j\":null}",
		"{\"a\":[],\"b\":[1,[2,[3]],{\"x\":\"y\"}],\"c\":{},"
		    "\"d\":{\"e\":{\"f\":{\"g\":[null]}}}}",
		"{\"s\":\"\",\"t\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
		    "\"u\":\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\\b\\f\\r\"}",
		"{\"k\\u0065y\":1,\"\\n\":2,\"\xc3\xa9\":3,\"\":4}",
		"{\"long\":\"" "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789"
		    "0123456789012345678901234567890123456789\\u0041\"}",
		/* refused: duplicates, bad escapes, bad UTF-8, trailing bytes */
		"{\"a\":1,\"a\":2}",
		"{\"a\":{\"b\":1,\"b\":1}}",
		"{\"a\":\"\\x\"}",
		"{\"a\":\"\\ud800\"}",
		"{\"a\":\"\xff\"}",
		"{\"a\":1} 2",
		"{\"a\":01}",
		"{\"a\":99999999999999999999}",
		"[1]",
		"\"s\"",
		"",
		/* let through by JSON_ALLOW_NUL, judged by the checks */
		"{\"a\":\"x\\u0000y\"}",
		/* nested past 16: replyscan asks jansson, so parsed whole */
		"{\"a\":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}",
	};
	char	wide[2048];
	size_t	i, n, built = 0;

	(void)state;
	for (i = 0; i < sizeof lines / sizeof lines[0]; i++)
		built += (size_t)same_tree(lines[i], strlen(lines[i]));
	/* the seven accepted lines above, escaped strings and keys among them */
	assert_int_equal(built, 7);
	/* more members than replyscan lists, at the top and inside */
	n = (size_t)snprintf(wide, sizeof wide, "{\"in\":{");
	for (i = 0; i < 40; i++)
		n += (size_t)snprintf(wide + n, sizeof wide - n,
		    "%s\"m%zu\":%zu", i > 0 ? "," : "", i, i);
	n += (size_t)snprintf(wide + n, sizeof wide - n, "}");
	for (i = 0; i < 40; i++)
		n += (size_t)snprintf(wide + n, sizeof wide - n,
		    ",\"t%zu\":\"v\"", i);
	n += (size_t)snprintf(wide + n, sizeof wide - n, "}");
	same_tree(wide, n);
}

/* A random value of depth at most depth, from a fixed sequence. */
static json_t *
random_value(unsigned *seed, int depth)
{
	static const char *const strings[] = {
		"", "a", "caf\xc3\xa9", "\n\t\"\\/", "\x01\x1f", "\xe2\x80\xa8",
		"\xf0\x9f\x98\x80", "key", "0123456789abcdef0123456789abcdef",
	};
	json_t		*v;
	unsigned	 r = (*seed = *seed * 1103515245u + 12345u) >> 16;
	int		 i, n;
	char		 key[32];

	switch (depth > 0 ? r % 8 : r % 5) {
	case 0:
		return json_integer((json_int_t)r * (r & 1 ? -7919 : 104729));
	case 1:
		return json_real((double)r / 64.0 + 0.5);
	case 2:
		return json_string(strings[r % (sizeof strings /
		    sizeof strings[0])]);
	case 3:
		return r & 2 ? json_true() : json_false();
	case 4:
		return json_null();
	case 5:
		v = json_array();
		for (i = 0, n = (int)(r % 4); i < n; i++)
			json_array_append_new(v, random_value(seed, depth - 1));
		return v;
	default:
		v = json_object();
		for (i = 0, n = (int)(r % 6); i < n; i++) {
			snprintf(key, sizeof key, "%s%d", strings[(r + i) %
			    (sizeof strings / sizeof strings[0])], i);
			json_object_set_new(v, key, random_value(seed,
			    depth - 1));
		}
		return v;
	}
}

/*
 * Random trees written compact, indented, with every non-ASCII
 * character escaped and with keys sorted: the same tree both ways.
 */
static void
test_random_trees_as_jansson_builds_them(void **state)
{
	static const size_t	 flags[] = {
		JSON_COMPACT | JSON_PRESERVE_ORDER,
		JSON_INDENT(0) | JSON_PRESERVE_ORDER,
		JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER,
		JSON_COMPACT | JSON_SORT_KEYS,
	};
	unsigned	 seed = 33;
	json_t		*tree;
	char		*line;
	size_t		 i, f;

	(void)state;
	for (i = 0; i < 2000; i++) {
		tree = json_object();
		json_object_set_new(tree, "op", json_string("effect_begin"));
		json_object_set_new(tree, "request", random_value(&seed, 4));
		json_object_set_new(tree, "x", random_value(&seed, 3));
		for (f = 0; f < sizeof flags / sizeof flags[0]; f++) {
			line = json_dumps(tree, flags[f]);
			assert_non_null(line);
			same_tree(line, strlen(line));
			free(line);
		}
		json_decref(tree);
	}
}

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
	(void)built_without_fallback(line, strlen(line), whole);
	w = json_deep_copy(whole);
	l = json_deep_copy(lean);
	assert_non_null(w);
	assert_non_null(l);
	/* Taken: the result named in the line, null in the tree. */
	lean_taken = raw != NULL;
	if (lean_taken)
		assert_true(json_is_null(json_object_get(lean, "result")));
	json_object_set_new(w, "result", json_null());
	json_object_set_new(l, "result", json_null());
	r_whole = dump(w);
	r_lean = dump(l);
	if (strcmp(r_whole, r_lean) != 0)
		fail_msg("the trees differ beyond result: %s", line);
	free(r_whole);
	free(r_lean);
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

/*
 * request_envelope looks for a NUL in the tree only when the line holds
 * the bytes \u0000 (its backslashes found by memchr): over every prefix
 * of lines whose trees hold a NUL, it refuses exactly when memmem finds
 * those bytes in the prefix, at its very end and after other escapes.
 */
static void
test_envelope_nul_escape_found_as_memmem_finds_it(void **state)
{
	static const char *const lines[] = {
		"{\"op\":\"x\",\"a\":\"\\u0000\"}",
		"{\"op\":\"x\",\"a\":\"\\\\u0000\\u0000\"}",
		"{\"op\":\"x\",\"a\":\"\\\\\\\"\\u001f\\u0000\\\\\"}",
		"{\"op\":\"x\",\"a\":[\"\\u00000\\\\\",{\"b\":\"\\u0000\"}]}",
		"{\"op\":\"x\",\"a\":\"\\u0000\\u0000\\u0000\"}",
	};
	struct request_error	 err;
	json_t			*tree, *id;
	const char		*op;
	size_t			 i, length, refused = 0, tried = 0;
	int			 rc;

	(void)state;
	for (i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		tree = json_loads(lines[i], JSON_ALLOW_NUL, NULL);
		if (tree == NULL)
			fail_msg("line %zu does not parse", i);
		for (length = 0; length <= strlen(lines[i]); length++) {
			memset(&err, 0, sizeof err);
			rc = request_envelope(tree, lines[i], length, &id, &op,
			    &err);
			assert_int_equal(rc != 0, memmem(lines[i], length,
			    "\\u0000", 6) != NULL);
			refused += rc != 0;
			tried++;
		}
		json_decref(tree);
	}
	/* Both answers came up. */
	assert_true(refused > 0);
	assert_true(refused < tried);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trees_as_jansson_builds_them),
		cmocka_unit_test(test_random_trees_as_jansson_builds_them),
		cmocka_unit_test(test_compact_result_is_not_parsed),
		cmocka_unit_test(test_other_lines_parsed_whole),
		cmocka_unit_test(test_envelope_nul_escape_found_as_memmem_finds_it),
	};

	return FILTER_RUN(tests);
}
