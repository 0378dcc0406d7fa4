/* SPDX-License-Identifier: ISC */
/*
 * request_tree.c: the worker's parse of a request line
 * (request_parse_line): the tree jansson's json_loadb would build,
 * built from the line's bytes once replyscan has checked them.
 *
 * WHY
 *
 * jansson's parse of the two lines of an effect was the largest part of
 * idemd's instructions an effect (callgrind: 165,000 of 362,000;
 * doc/effects.md, "Counted, not timed"): its lexer takes a byte at a
 * time through its stream, checks UTF-8 and copies each string twice.
 * replyscan_line (libclient/replyscan.c) accepts exactly what json_loadb
 * with JSON_REJECT_DUPLICATES accepts (fuzz_replyscan checks it against
 * jansson) and lists an object's members as they stand, so a line it
 * accepts is built here member by member: a string without escapes is
 * copied once (jansson's _nocheck calls: the bytes are checked UTF-8
 * already), an escaped one unescaped by replyscan_string, an integer
 * read by replyscan_integer; the rarer values (arrays, reals, an object
 * of more members than replyscan lists) by json_loadb of their own
 * bytes, which gives jansson's own tree of them.  request_parse's flags
 * (JSON_ALLOW_NUL, JSON_DECODE_ANY) only accept more than replyscan, so
 * a line replyscan accepts gets the same tree either way.  Anything
 * replyscan does not accept, or judges with jansson's help (deeper than
 * 16 levels, a number past 64 bytes), is parsed whole by request_parse,
 * so that every refusal is worded from the line as sent.
 *
 * An effect_complete's result is most of its line (up to 64 KiB), and
 * when the line holds it as jansson's compact dump, no one reads its
 * tree: result_field copies those bytes from the line.  So its tree is
 * not built: the member is null, and *result names the bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "fastscan.h"
#include "idemd.h"
#include "replyscan.h"

/* Strings up to this many bytes are unescaped on the stack. */
#define TREE_STACK_STRING	256

static json_t	*tree_of(const char *, size_t);

/* json_loadb's tree of one checked value, with request_parse's flags. */
static json_t *
tree_by_jansson(const char *value, size_t length)
{
	return json_loadb(value, length, JSON_REJECT_DUPLICATES |
	    JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL);
}

/*
 * A checked string or key (its quotes included) unescaped: the bytes
 * and their length in *out (stack, or malloc'd into *heap); -1: no
 * memory.
 */
static int
tree_unescape(const char *quoted, size_t length, char stack[TREE_STACK_STRING],
    char **heap, const char **out, size_t *out_length)
{
	long	n;

	*heap = NULL;
	if (memchr(quoted + 1, '\\', length - 2) == NULL) {
		*out = quoted + 1;
		*out_length = length - 2;
		return 0;
	}
	/* Unescaped, a string is never longer than its escaped form. */
	if (length - 2 >= TREE_STACK_STRING &&
	    (*heap = malloc(length - 1)) == NULL)
		return -1;
	n = replyscan_string(quoted, length, *heap != NULL ? *heap : stack,
	    *heap != NULL ? length - 1 : TREE_STACK_STRING);
	if (n < 0) {
		free(*heap);
		return -1;
	}
	*out = *heap != NULL ? *heap : stack;
	*out_length = (size_t)n;
	return 0;
}

static json_t *
tree_string(const char *value, size_t length)
{
	char		 stack[TREE_STACK_STRING], *heap;
	const char	*s;
	size_t		 n;
	json_t		*j;

	if (tree_unescape(value, length, stack, &heap, &s, &n) != 0)
		return NULL;
	j = json_stringn_nocheck(s, n);
	free(heap);
	return j;
}

/*
 * A checked object's members added to obj, in the line's order (as
 * json_loadb adds them); skip: a member left null (NULL: none).
 */
static int
tree_members(json_t *obj, const struct replyscan_object *o,
    const struct replyscan_member *skip)
{
	char		 stack[TREE_STACK_STRING], *heap;
	const char	*key;
	size_t		 i, key_length;
	json_t		*v;
	int		 rc;

	for (i = 0; i < o->count; i++) {
		const struct replyscan_member	*m = &o->members[i];

		if (skip != NULL && m->value == skip->value)
			v = json_null();
		else if ((v = tree_of(m->value, m->value_length)) == NULL)
			return -1;
		if (tree_unescape(m->key - 1, m->key_length + 2, stack, &heap,
		    &key, &key_length) != 0) {
			json_decref(v);
			return -1;
		}
		rc = json_object_setn_new_nocheck(obj, key, key_length, v);
		free(heap);
		if (rc != 0)
			return -1;
	}
	return 0;
}

static json_t *
tree_object(const char *value, size_t length)
{
	struct replyscan_object	 o;
	json_t			*obj;

	if (!replyscan_members(value, length, &o))
		return NULL;
	if (o.overflow)
		return tree_by_jansson(value, length);
	if ((obj = json_object()) == NULL)
		return NULL;
	if (tree_members(obj, &o, NULL) != 0) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

/* The tree of one value of a line replyscan checked; NULL: no memory. */
static json_t *
tree_of(const char *value, size_t length)
{
	int64_t	i;

	switch (value[0]) {
	case '{':
		return tree_object(value, length);
	case '"':
		return tree_string(value, length);
	case 't':
		return json_true();
	case 'f':
		return json_false();
	case 'n':
		return json_null();
	case '[':
		return tree_by_jansson(value, length);
	}
	/* A number: an integer as json_loadb reads it, else a real. */
	if (replyscan_integer(value, length, &i) == 0)
		return json_integer(i);
	return tree_by_jansson(value, length);
}

/*
 * The member of top that is an effect_complete's result in compact
 * form (fastscan_compact_member: result_field takes it from the line):
 * 1 and *result; else 0.
 */
static int
compact_result(const char *line, size_t length,
    const struct replyscan_object *top, struct replyscan_member *result)
{
	static const char	 op_complete[] = "\"effect_complete\"";
	struct replyscan_member	 op;
	const char		*raw;
	size_t			 raw_length;

	if (!replyscan_find(top, "op", &op) ||
	    op.value_length != sizeof op_complete - 1 ||
	    memcmp(op.value, op_complete, op.value_length) != 0 ||
	    !replyscan_find(top, "result", result) || result->key_escaped)
		return 0;
	/* The same member as result_field will copy, and in that form. */
	return fastscan_compact_member(line, length, "result", &raw,
	    &raw_length) && raw == result->value &&
	    raw_length == result->value_length;
}

json_t *
request_tree_build(const char *line, size_t length, const char **result,
    size_t *result_length)
{
	struct replyscan_object	 top;
	struct replyscan_member	 compact;
	json_t			*request;
	int			 skip;

	*result = NULL;
	*result_length = 0;
	if (replyscan_line(line, length, &top) != REPLYSCAN_OBJECT ||
	    top.by_jansson || top.overflow)
		return NULL;
	skip = compact_result(line, length, &top, &compact);
	if ((request = json_object()) == NULL ||
	    tree_members(request, &top, skip ? &compact : NULL) != 0) {
		json_decref(request);
		return NULL;
	}
	if (skip) {
		*result = compact.value;
		*result_length = compact.value_length;
	}
	return request;
}

json_t *
request_parse_line(const char *line, size_t length, const char **result,
    size_t *result_length, struct request_error *err)
{
	json_t	*request;

	if ((request = request_tree_build(line, length, result,
	    result_length)) != NULL)
		return request;
	return request_parse(line, length, err);
}
