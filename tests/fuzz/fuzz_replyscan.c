/* SPDX-License-Identifier: ISC */
/*
 * fuzz_replyscan.c: libFuzzer target for the reply scanner
 * (libclient/replyscan.c), with which libidem checks and reads the
 * broker's effect answers instead of parsing them with jansson.
 *
 * Input: one reply line, as a broker (or anything on its socket) may
 * send it.
 *
 * Invariants:
 *   - the verdict is jansson's: json_loadb(JSON_REJECT_DUPLICATES)
 *     refuses the line, or reads an array, or an object, exactly when
 *     replyscan_line says so;
 *   - for an object, the members listed (and found past the list) are
 *     jansson's, by unescaped name, each value's bytes parsing alone to
 *     jansson's value; a string member read by replyscan_string is
 *     jansson's string, byte for byte, its whole length said and its
 *     cut NUL-terminated; an integer member read by replyscan_integer is
 *     jansson's integer, and only integers are read as one;
 *   - a member that is an object is listed by replyscan_members with
 *     jansson's member count.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "replyscan.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void
check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_replyscan: invariant failed: %s\n", what);
		abort();
	}
}

static void
check_member(const struct replyscan_member *m, json_t *value)
{
	struct replyscan_object	 inner;
	json_t			*alone;
	int64_t			 i;
	char			 cut[8];
	char			*whole;
	long			 n;

	alone = json_loadb(m->value, m->value_length, JSON_DECODE_ANY, NULL);
	check(alone != NULL && json_equal(alone, value),
	    "a member's bytes parse to its value");
	json_decref(alone);
	n = replyscan_string(m->value, m->value_length, cut, sizeof cut);
	check((n >= 0) == json_is_string(value), "strings read as strings");
	if (n >= 0) {
		check((size_t)n == json_string_length(value),
		    "a string's whole length");
		check(strlen(cut) == ((size_t)n < sizeof cut ? (size_t)n :
		    sizeof cut - 1) && memcmp(cut, json_string_value(value),
		    strlen(cut)) == 0, "a string's cut");
		whole = malloc((size_t)n + 1);
		check(whole != NULL, "malloc");
		check(replyscan_string(m->value, m->value_length, whole,
		    (size_t)n + 1) == n && memcmp(whole,
		    json_string_value(value), (size_t)n) == 0,
		    "a string's bytes");
		free(whole);
	}
	check((replyscan_integer(m->value, m->value_length, &i) == 0) ==
	    json_is_integer(value), "integers read as integers");
	if (json_is_integer(value))
		check(i == json_integer_value(value), "an integer's value");
	check(replyscan_members(m->value, m->value_length, &inner) ==
	    json_is_object(value), "objects listed as objects");
	if (json_is_object(value) && !inner.overflow)
		check(inner.count == json_object_size(value),
		    "an inner object's members");
}

/*
 * The line checked again with m's object (named key) wanted as inner:
 * the check's list of it is the walk's, member by member.
 */
static void
check_inner(const uint8_t *data, size_t size, const char *key,
    const struct replyscan_member *m)
{
	struct replyscan_object	 again, inner, walked;
	size_t			 i;

	check(replyscan_line_inner((const char *)data, size, &again, key,
	    &inner) == REPLYSCAN_OBJECT, "the verdict again");
	check(replyscan_members(m->value, m->value_length, &walked) &&
	    inner.text == m->value && inner.length == m->value_length &&
	    inner.count == walked.count && inner.overflow == walked.overflow,
	    "an inner object listed by the check");
	for (i = 0; i < inner.count; i++)
		check(inner.members[i].key == walked.members[i].key &&
		    inner.members[i].value == walked.members[i].value &&
		    inner.members[i].value_length ==
		    walked.members[i].value_length,
		    "an inner object's members as walked");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct replyscan_object	 top;
	struct replyscan_member	 m;
	enum replyscan_verdict	 v, want;
	const char		*key;
	json_t			*j, *value;
	char			*dump;

	j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	want = j == NULL ? REPLYSCAN_INVALID : json_is_object(j) ?
	    REPLYSCAN_OBJECT : REPLYSCAN_NOT_OBJECT;
	v = replyscan_line((const char *)data, size, &top);
	check(v == want, "the verdict is jansson's");
	if (v != REPLYSCAN_INVALID && top.compact) {
		dump = json_dumps(j, JSON_COMPACT);
		check(dump != NULL && strlen(dump) == size &&
		    memcmp(dump, data, size) == 0,
		    "a compact line is jansson's compact dump");
		free(dump);
	}
	if (v == REPLYSCAN_OBJECT) {
		if (!top.overflow)
			check(top.count == json_object_size(j),
			    "the members listed");
		json_object_foreach(j, key, value) {
			check(replyscan_find(&top, key, &m),
			    "every member found");
			check_member(&m, value);
			if (json_is_object(value))
				check_inner(data, size, key, &m);
		}
	}
	json_decref(j);
	return 0;
}
