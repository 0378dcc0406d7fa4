/* SPDX-License-Identifier: ISC */
/*
 * replytext.c: replies written straight as text, for the replies every
 * effect gets (effect.c: effect_begin's proceed, effect_complete's
 * commit), where building a jansson tree and dumping it was a tenth of
 * the broker's CPU per effect (issue #33).  The bytes are exactly those
 * of json_dumps(tree, JSON_COMPACT | JSON_PRESERVE_ORDER) for the tree
 * of the same members in the same order: strings escaped as jansson
 * escapes them ('"', '\\', and controls: \b \f \n \r \t, else \u00XX in
 * upper case; '/' and non-ASCII as they are), integers in decimal.  A
 * string with a control or a non-ASCII byte, and any value that is not
 * an integer or a string, is dumped by jansson itself: what this file
 * writes by hand is only what is certain to be the same.
 * tests/unit/test_replytext.c compares every byte with jansson's.
 */
#include <stdlib.h>
#include <string.h>

#include "jsonbytes.h"
#include "replytext.h"

#define REPLYTEXT_FIRST_SIZE	2048
#define REPLYTEXT_DUMP_FLAGS	(JSON_COMPACT | JSON_PRESERVE_ORDER | \
				    JSON_ENCODE_ANY)

void
replytext_init(struct replytext *t)
{
	memset(t, 0, sizeof *t);
}

void
replytext_free(struct replytext *t)
{
	free(t->buf);
	memset(t, 0, sizeof *t);
}

/* Room for n more bytes; 0, or -1 (failed set). */
static int
reserve(struct replytext *t, size_t n)
{
	size_t	 size;
	char	*buf;

	if (t->failed)
		return -1;
	if (t->size - t->length >= n)
		return 0;
	size = t->size != 0 ? t->size : REPLYTEXT_FIRST_SIZE;
	while (size - t->length < n) {
		if (size > SIZE_MAX / 2) {
			t->failed = 1;
			return -1;
		}
		size *= 2;
	}
	if ((buf = realloc(t->buf, size)) == NULL) {
		t->failed = 1;
		return -1;
	}
	t->buf = buf;
	t->size = size;
	return 0;
}

void
replytext_raw(struct replytext *t, const void *bytes, size_t n)
{
	if (reserve(t, n) != 0)
		return;
	memcpy(t->buf + t->length, bytes, n);
	t->length += n;
}

void
replytext_lit(struct replytext *t, const char *s)
{
	replytext_raw(t, s, strlen(s));
}

void
replytext_copy(struct replytext *t, size_t offset, size_t n)
{
	/* Room first: growing may move the buffer the bytes are in. */
	if (offset + n > t->length || reserve(t, n) != 0) {
		t->failed = 1;
		return;
	}
	memcpy(t->buf + t->length, t->buf + offset, n);
	t->length += n;
}

/* jansson's dump of value, appended. */
static void
dump(struct replytext *t, json_t *value)
{
	size_t	n;

	if ((n = json_dumpb(value, NULL, 0, REPLYTEXT_DUMP_FLAGS)) == 0 ||
	    reserve(t, n) != 0) {
		t->failed = 1;
		return;
	}
	if (json_dumpb(value, t->buf + t->length, n, REPLYTEXT_DUMP_FLAGS) !=
	    n) {
		t->failed = 1;
		return;
	}
	t->length += n;
}

void
replytext_string(struct replytext *t, const char *s, size_t n)
{
	json_t	*value;
	size_t	 i, escapes = 0;
	char	*out;

	/* Most strings (digests, fences, times, ids) need nothing done. */
	if (jsonbytes_printable_plain(s, n, 0x20)) {
		if (reserve(t, n + 2) != 0)
			return;
		t->buf[t->length] = '"';
		memcpy(t->buf + t->length + 1, s, n);
		t->buf[t->length + 1 + n] = '"';
		t->length += n + 2;
		return;
	}
	for (i = 0; i < n; i++) {
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) {
			/* Controls, DEL and UTF-8: jansson's own rules. */
			if ((value = json_stringn_nocheck(s, n)) == NULL) {
				t->failed = 1;
				return;
			}
			dump(t, value);
			json_decref(value);
			return;
		}
		if (s[i] == '"' || s[i] == '\\')
			escapes++;
	}
	if (reserve(t, n + escapes + 2) != 0)
		return;
	out = t->buf + t->length;
	*out++ = '"';
	if (escapes == 0) {
		memcpy(out, s, n);
		out += n;
	} else {
		for (i = 0; i < n; i++) {
			if (s[i] == '"' || s[i] == '\\')
				*out++ = '\\';
			*out++ = s[i];
		}
	}
	*out++ = '"';
	t->length = (size_t)(out - t->buf);
}

void
replytext_int(struct replytext *t, int64_t v)
{
	char		 digits[24], *p;
	uint64_t	 u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	p = jsonbytes_decimal(digits + sizeof digits, u);
	if (v < 0)
		*--p = '-';
	replytext_raw(t, p, (size_t)(digits + sizeof digits - p));
}

void
replytext_value(struct replytext *t, json_t *value)
{
	if (json_is_integer(value))
		replytext_int(t, json_integer_value(value));
	else if (json_is_string(value))
		replytext_string(t, json_string_value(value),
		    json_string_length(value));
	else
		dump(t, value);
}
