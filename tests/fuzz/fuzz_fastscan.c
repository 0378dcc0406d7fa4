/* SPDX-License-Identifier: ISC */
/*
 * fuzz_fastscan.c: libFuzzer target for the retry fast path's scanner
 * (libclient/fastscan.c), which reads raw request lines from any client.
 *
 * Input: one request line, as a client may send it.
 *
 * Invariants, whenever the scanner accepts a line:
 *   - it is deterministic, and everything it points at lies in the line:
 *     at most 9 members, in order, with distinct known keys; the id is
 *     the "id" member's value; the submission id is printable ASCII of 1
 *     to 200 bytes without quote or backslash, an effect_begin's kind
 *     the same of 1 to 128 bytes;
 *   - the fingerprint ignores the id and the glue between members: the
 *     line rebuilt from its members' texts (joined by commas) without
 *     the id, or with another plain id, is accepted with the same
 *     fingerprint and the same submission id;
 *   - if jansson accepts the line with the broker's flags (so the full
 *     parse would see it), it is an object with exactly the scanned
 *     members; each value's bytes, parsed alone, equal that member's
 *     value (the scanner delimits values as JSON does); the id's bytes
 *     are exactly what jansson's compact output of it would be (the fast
 *     path echoes them as the full path would); op is "write_task" (with
 *     a task) or "effect_begin" (with a request) as scanned; the
 *     submission id is the client_submission_id string, the kind the
 *     effect_kind string.
 * And for any line jansson accepts as an object: a member whose bytes
 * fastscan_compact_member takes as they stand is there, and those bytes
 * are exactly jansson's compact dump of its value (effect_complete's
 * result is stored as them instead of that dump); a member
 * fastscan_member finds is there, and its bytes, parsed alone, equal
 * its value.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fastscan.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define PARSE_FLAGS	(JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | \
	JSON_DECODE_ANY)

static void
check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_fastscan: invariant failed: %s\n", what);
		abort();
	}
}

static int
member_is(const struct fastscan_member *m, const char *key)
{
	return m->key_length == strlen(key) &&
	    memcmp(m->key, key, m->key_length) == 0;
}

/* The members' texts (key's quote to value's end) joined by commas. */
static char *
rebuild(const char *line, const struct fastscan *scan, const char *id,
    size_t *length)
{
	const struct fastscan_member	*m;
	size_t				 i, n, at = 0, size;
	char				*out;

	size = 16 + (id != NULL ? strlen(id) + 8 : 0);
	for (i = 0; i < scan->member_count; i++)
		size += (size_t)(scan->members[i].value +
		    scan->members[i].value_length - scan->members[i].key) + 2;
	if ((out = malloc(size)) == NULL)
		abort();
	out[at++] = '{';
	if (id != NULL)
		at += (size_t)sprintf(out + at, "\"id\":%s", id);
	for (i = 0; i < scan->member_count; i++) {
		m = &scan->members[i];
		if (member_is(m, "id"))
			continue;
		if (at > 1)
			out[at++] = ',';
		n = (size_t)(m->value + m->value_length - (m->key - 1));
		memcpy(out + at, m->key - 1, n);
		at += n;
	}
	out[at++] = '}';
	*length = at;
	(void)line;
	return out;
}

static void
check_rebuilt(const char *line, const struct fastscan *scan, const char *id)
{
	struct fastscan	 other;
	size_t		 length;
	char		*text = rebuild(line, scan, id, &length);

	check(fastscan_line(text, length, &other) == 1,
	    "a rebuilt line is accepted");
	check(memcmp(other.fingerprint, scan->fingerprint,
	    sizeof scan->fingerprint) == 0, "the id and glue are not "
	    "fingerprinted");
	check(other.key_length == scan->key_length &&
	    memcmp(other.key, scan->key, scan->key_length) == 0,
	    "the same submission id");
	check(other.op == scan->op && other.kind_length == scan->kind_length &&
	    (scan->kind == NULL || memcmp(other.kind, scan->kind,
	    scan->kind_length) == 0), "the same op and kind");
	check((id == NULL) == (other.id == NULL), "the rebuilt id");
	free(text);
}

static void
check_jansson(const char *line, size_t size, const struct fastscan *scan)
{
	const struct fastscan_member	*m;
	json_t				*whole, *value;
	char				*dumped, key[32];
	size_t				 i;

	if ((whole = json_loadb(line, size, PARSE_FLAGS, NULL)) == NULL)
		return;
	check(json_is_object(whole), "an object");
	check(json_object_size(whole) == scan->member_count,
	    "exactly the scanned members");
	for (i = 0; i < scan->member_count; i++) {
		m = &scan->members[i];
		check(m->key_length < sizeof key, "a short key");
		memcpy(key, m->key, m->key_length);
		key[m->key_length] = '\0';
		value = json_loadb(m->value, m->value_length, PARSE_FLAGS,
		    NULL);
		check(value != NULL, "a value parses alone");
		check(json_equal(value, json_object_get(whole, key)),
		    "a value is delimited as JSON does");
		json_decref(value);
	}
	if (scan->id != NULL) {
		dumped = json_dumps(json_object_get(whole, "id"),
		    JSON_COMPACT | JSON_ENCODE_ANY);
		check(dumped != NULL && strlen(dumped) == scan->id_length &&
		    memcmp(dumped, scan->id, scan->id_length) == 0,
		    "the id's bytes are jansson's output of it");
		free(dumped);
	}
	check(json_is_string(json_object_get(whole, "op")) &&
	    strcmp(json_string_value(json_object_get(whole, "op")),
	    scan->op == FASTSCAN_EFFECT_BEGIN ? "effect_begin" :
	    "write_task") == 0, "op is the one scanned");
	value = json_object_get(whole, "client_submission_id");
	check(json_is_string(value) &&
	    json_string_length(value) == scan->key_length &&
	    memcmp(json_string_value(value), scan->key, scan->key_length) == 0,
	    "the submission id is the string");
	if (scan->op == FASTSCAN_EFFECT_BEGIN) {
		value = json_object_get(whole, "effect_kind");
		check(json_is_string(value) &&
		    json_string_length(value) == scan->kind_length &&
		    memcmp(json_string_value(value), scan->kind,
		    scan->kind_length) == 0, "the kind is the string");
		check(json_object_get(whole, "request") != NULL &&
		    json_object_get(whole, "task") == NULL, "a request");
	} else
		check(json_object_get(whole, "task") != NULL &&
		    scan->kind == NULL, "a task");
	json_decref(whole);
}

static void
check_compact(const char *line, size_t size)
{
	static const char *const names[] = { "result", "request", "task",
	    "id", "op", NULL };
	const char	*value;
	char		*dumped;
	json_t		*whole, *v, *alone;
	size_t		 n;
	int		 i;

	if ((whole = json_loadb(line, size, PARSE_FLAGS, NULL)) == NULL)
		return;
	for (i = 0; json_is_object(whole) && names[i] != NULL; i++) {
		if (fastscan_member(line, size, names[i], &value, &n)) {
			check(value >= line && value + n <= line + size,
			    "a member in the line");
			v = json_object_get(whole, names[i]);
			alone = json_loadb(value, n, PARSE_FLAGS, NULL);
			check(v != NULL && json_equal(alone, v),
			    "a member's bytes parse to its value");
			json_decref(alone);
		}
		if (!fastscan_compact_member(line, size, names[i], &value, &n))
			continue;
		check(value >= line && value + n <= line + size,
		    "a compact member in the line");
		v = json_object_get(whole, names[i]);
		check(v != NULL, "a compact member is there");
		dumped = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
		    JSON_PRESERVE_ORDER);
		check(dumped != NULL && strlen(dumped) == n &&
		    memcmp(dumped, value, n) == 0,
		    "a compact member's bytes are jansson's dump of it");
		free(dumped);
	}
	json_decref(whole);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char	*line = (const char *)data, *end = line + size;
	struct fastscan	 scan, again;
	size_t		 i;
	unsigned	 k;
	int		 ok;

	check_compact(line, size);
	ok = fastscan_line(line, size, &scan);
	check(fastscan_line(line, size, &again) == ok, "deterministic");
	check(ok == scan.valid, "valid says it");
	if (!ok)
		return 0;
	check(memcmp(scan.fingerprint, again.fingerprint,
	    sizeof scan.fingerprint) == 0, "the same fingerprint");
	check(scan.member_count <= FASTSCAN_MAX_MEMBERS, "members fit");
	check(scan.key >= line && scan.key + scan.key_length <= end &&
	    scan.key_length >= 1 && scan.key_length <= 200, "the key");
	for (i = 0; i < scan.key_length; i++)
		check(scan.key[i] > 0x20 && scan.key[i] < 0x7f &&
		    scan.key[i] != '"' && scan.key[i] != '\\', "a plain key");
	check(scan.op == FASTSCAN_WRITE_TASK || (scan.op ==
	    FASTSCAN_EFFECT_BEGIN && scan.kind >= line && scan.kind +
	    scan.kind_length <= end && scan.kind_length >= 1 &&
	    scan.kind_length <= 128), "an effect's kind");
	for (i = 0; i < scan.kind_length; i++)
		check(scan.kind[i] > 0x20 && scan.kind[i] < 0x7f &&
		    scan.kind[i] != '"' && scan.kind[i] != '\\',
		    "a plain kind");
	for (i = 0; i < scan.member_count; i++) {
		check(scan.members[i].key > line &&
		    scan.members[i].value + scan.members[i].value_length <=
		    end && scan.members[i].key < scan.members[i].value,
		    "a member in the line");
		if (i > 0)
			check(scan.members[i].key > scan.members[i - 1].value,
			    "members in order");
		for (k = 0; k < i; k++)
			check(scan.members[k].key_length !=
			    scan.members[i].key_length ||
			    memcmp(scan.members[k].key, scan.members[i].key,
			    scan.members[i].key_length) != 0, "distinct keys");
		if (member_is(&scan.members[i], "id"))
			check(scan.id == scan.members[i].value &&
			    scan.id_length == scan.members[i].value_length,
			    "the id member");
	}
	check_rebuilt(line, &scan, NULL);
	check_rebuilt(line, &scan, "\"other id\"");
	check_rebuilt(line, &scan, "-42");
	check_jansson(line, size, &scan);
	return 0;
}
