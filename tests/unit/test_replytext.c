/* SPDX-License-Identifier: ISC */
/*
 * test_replytext.c: broker/replytext.c writes exactly what jansson's
 * compact, order-preserving dump writes: every string of one byte and
 * of each pair of bytes 0x01..0x7f (the escapes and their neighbours),
 * UTF-8 of one to four bytes, NUL inside a string, integers at their
 * ends, and every kind of scalar an id may be; and a text that grows
 * past its first buffer keeps every byte, a copy of its own bytes too
 * while the buffer moves.
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
#include "replytext.h"

/* The text of value by replytext_value equals jansson's dump of it. */
static void
assert_same(json_t *value)
{
	struct replytext	 t;
	char			*want;

	assert_non_null(value);
	want = json_dumps(value, JSON_COMPACT | JSON_PRESERVE_ORDER |
	    JSON_ENCODE_ANY);
	assert_non_null(want);
	replytext_init(&t);
	replytext_value(&t, value);
	assert_false(t.failed);
	if (t.length != strlen(want) || memcmp(t.buf, want, t.length) != 0)
		fail_msg("replytext %.*s, jansson %s", (int)t.length, t.buf,
		    want);
	replytext_free(&t);
	free(want);
	json_decref(value);
}

static void
test_strings_of_every_byte(void **state)
{
	char	s[2], wide[40];
	int	a, b, i;

	(void)state;
	for (a = 1; a < 0x80; a++) {
		s[0] = (char)a;
		assert_same(json_stringn(s, 1));
		for (b = 1; b < 0x80; b++) {
			s[1] = (char)b;
			assert_same(json_stringn(s, 2));
		}
	}
	assert_same(json_string(""));
	assert_same(json_stringn("a\0b", 3));
	/*
	 * Longer strings, judged eight bytes at a time: every byte value
	 * 0x01..0x7f, and a two-byte UTF-8 character, at each place of
	 * plain strings of 1 to 40 bytes.
	 */
	for (b = 1; b <= 40; b++) {
		memset(wide, 'x', sizeof wide);
		assert_same(json_stringn(wide, (size_t)b));
		for (i = 0; i < b; i++) {
			for (a = 1; a < 0x80; a++) {
				memset(wide, 'x', sizeof wide);
				wide[i] = (char)a;
				assert_same(json_stringn(wide, (size_t)b));
			}
			if (i + 1 < b) {
				memset(wide, 'x', sizeof wide);
				memcpy(wide + i, "\xc3\xa9", 2);
				assert_same(json_stringn(wide, (size_t)b));
			}
		}
	}
	assert_same(json_string("caf\xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80"));
	assert_same(json_string("q\"uote back\\slash /slash"));
}

static void
test_scalars(void **state)
{
	(void)state;
	assert_same(json_integer(0));
	assert_same(json_integer(-1));
	assert_same(json_integer(INT64_MAX));
	assert_same(json_integer(INT64_MIN));
	assert_same(json_integer(1234567890123LL));
	assert_same(json_real(0.1));
	assert_same(json_real(-1e300));
	assert_same(json_true());
	assert_same(json_false());
	assert_same(json_null());
}

static void
test_grows_whole(void **state)
{
	struct replytext	t;
	char			want[100000];
	size_t			i;

	(void)state;
	for (i = 0; i < sizeof want; i++)
		want[i] = (char)('a' + i % 26);
	replytext_init(&t);
	replytext_lit(&t, "{");
	replytext_raw(&t, want, sizeof want);
	replytext_int(&t, -42);
	assert_false(t.failed);
	assert_int_equal(t.length, 1 + sizeof want + 3);
	assert_memory_equal(t.buf + 1, want, sizeof want);
	assert_memory_equal(t.buf + 1 + sizeof want, "-42", 3);
	/* A copy of its own bytes that makes it grow (the buffer moves). */
	replytext_copy(&t, 1, sizeof want);
	assert_false(t.failed);
	assert_int_equal(t.length, 1 + 2 * sizeof want + 3);
	assert_memory_equal(t.buf + 4 + sizeof want, want, sizeof want);
	replytext_copy(&t, t.length, 1);
	assert_true(t.failed);
	replytext_free(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strings_of_every_byte),
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_grows_whole),
	};

	return FILTER_RUN(tests);
}
