/* SPDX-License-Identifier: ISC */
/*
 * test_log.c: broker/log.c's escaping (issue #27, item 5).  A message
 * quotes what clients sent; whatever bytes it holds, what log_escape
 * makes of them is one line with no control character, no invalid UTF-8
 * and no bidirectional control, from which the bytes can be read back;
 * and a line written through log_info to a file is one line whatever
 * the message.  The same through a running idemd is
 * tests/integration/test_trust.c's.
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

#include "integration/filter.h"
#include "log.h"

/* Does s hold only safe text: no C0/C1 control, DEL, bidi, bad UTF-8? */
static int
safe_text(const char *s, size_t len)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i = 0, n, k;
	unsigned		 cp;

	while (i < len) {
		if (p[i] < 0x20 || p[i] == 0x7f)
			return 0;
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if (p[i] >= 0xc2 && p[i] <= 0xdf) {
			n = 2;
			cp = p[i] & 0x1f;
		} else if (p[i] >= 0xe0 && p[i] <= 0xef) {
			n = 3;
			cp = p[i] & 0x0f;
		} else if (p[i] >= 0xf0 && p[i] <= 0xf4) {
			n = 4;
			cp = p[i] & 0x07;
		} else
			return 0;
		if (i + n > len)
			return 0;
		for (k = 1; k < n; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		if (cp <= 0x9f || cp == 0x61c || cp == 0x200e ||
		    cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
		    (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff)
			return 0;
		i += n;
	}
	return 1;
}

/* The bytes an escaped text stands for (the inverse of log_escape). */
static size_t
unescape(const char *s, char *out)
{
	size_t		used = 0;
	unsigned	v;
	char		hex[7];

	while (*s != '\0') {
		if (*s != '\\') {
			out[used++] = *s++;
			continue;
		}
		s++;
		switch (*s) {
		case '\\':
			out[used++] = '\\';
			s++;
			break;
		case 'n':
			out[used++] = '\n';
			s++;
			break;
		case 'r':
			out[used++] = '\r';
			s++;
			break;
		case 't':
			out[used++] = '\t';
			s++;
			break;
		case 'x':
			memcpy(hex, s + 1, 2);
			hex[2] = '\0';
			v = (unsigned)strtoul(hex, NULL, 16);
			out[used++] = (char)v;
			s += 3;
			break;
		case 'u':
			memcpy(hex, s + 1, 4);
			hex[4] = '\0';
			v = (unsigned)strtoul(hex, NULL, 16);
			if (v < 0x800) {
				out[used++] = (char)(0xc0 | (v >> 6));
				out[used++] = (char)(0x80 | (v & 0x3f));
			} else {
				out[used++] = (char)(0xe0 | (v >> 12));
				out[used++] = (char)(0x80 | ((v >> 6) & 0x3f));
				out[used++] = (char)(0x80 | (v & 0x3f));
			}
			s += 5;
			break;
		default:
			fail_msg("a stray backslash in %s", s - 1);
		}
	}
	return used;
}

static void
check_round_trip(const char *in, size_t len)
{
	char	out[8 * 256 + 1], back[8 * 256];
	size_t	n;

	n = log_escape(out, sizeof out, in, len);
	assert_int_equal(n, strlen(out));
	assert_true(safe_text(out, n));
	assert_int_equal(unescape(out, back), len);
	assert_memory_equal(back, in, len);
}

static void
test_escapes_what_forges_a_line(void **state)
{
	static const char forged[] = "bank API\n"
	    "idemd[1]: effect pay (x): evidence applied from bank API\r"
	    "\x1b[2K\x1b]0;t\x07\\";
	char	out[512];

	log_escape(out, sizeof out, forged, sizeof forged - 1);
	assert_string_equal(out, "bank API\\n"
	    "idemd[1]: effect pay (x): evidence applied from bank API\\r"
	    "\\x1b[2K\\x1b]0;t\\x07\\\\");
	/* Every C0 control but those three as \xHH, and DEL. */
	log_escape(out, sizeof out, "\x01\x08\x0b\x0c\x1f\x7f", 6);
	assert_string_equal(out, "\\x01\\x08\\x0b\\x0c\\x1f\\x7f");
}

static void
test_utf8_kept_unless_unsafe(void **state)
{
	char	out[256];

	/* Valid text stays as it is: accents, CJK, an emoji. */
	log_escape(out, sizeof out, "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80",
	    14);
	assert_string_equal(out, "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
	/* Bidi overrides and isolates, separators, C1, BOM: \uHHHH. */
	log_escape(out, sizeof out, "\xe2\x80\xae" "a" "\xe2\x81\xa6"
	    "\xe2\x80\xa8" "\xc2\x9b" "\xef\xbb\xbf" "\xd8\x9c", 17);
	assert_string_equal(out,
	    "\\u202ea\\u2066\\u2028\\u009b\\ufeff\\u061c");
	/* Not UTF-8: a lone byte, overlong, a surrogate, cut short. */
	log_escape(out, sizeof out, "\xff\xc0\xaf\xed\xa0\x80\xe2\x80", 8);
	assert_string_equal(out,
	    "\\xff\\xc0\\xaf\\xed\\xa0\\x80\\xe2\\x80");
}

static void
test_never_cuts_an_escape(void **state)
{
	char	out[8];
	size_t	n;

	/* "ab" fits, "\x1b" (4) would need 7 bytes with the NUL: dropped. */
	n = log_escape(out, 6, "ab\x1b" "c", 4);
	assert_int_equal(n, 2);
	assert_string_equal(out, "ab");
	n = log_escape(out, 7, "ab\x1b" "c", 4);
	assert_string_equal(out, "ab\\x1b");
	/* Nor a character. */
	n = log_escape(out, 3, "a\xc3\xa9", 3);
	assert_string_equal(out, "a");
	assert_int_equal(log_escape(out, 0, "a", 1), 0);
}

/* Every single byte and pair of bytes, then random strings. */
static void
test_any_bytes_round_trip(void **state)
{
	unsigned char	buf[256];
	unsigned	a, b, i, len, seed = 27;

	for (a = 0; a < 256; a++) {
		buf[0] = (unsigned char)a;
		check_round_trip((char *)buf, 1);
		for (b = 0; b < 256; b++) {
			buf[1] = (unsigned char)b;
			check_round_trip((char *)buf, 2);
		}
	}
	for (i = 0; i < 20000; i++) {
		len = (unsigned)rand_r(&seed) % sizeof buf;
		for (a = 0; a < len; a++) {
			/* Biased towards UTF-8 lead and continuation bytes. */
			b = (unsigned)rand_r(&seed);
			buf[a] = (unsigned char)(b % 4 == 0 ? 0x80 | (b >> 8) % 64 :
			    b % 4 == 1 ? 0xc0 | (b >> 8) % 64 : b >> 8);
		}
		check_round_trip((char *)buf, len);
	}
}

/* Through log_info to a file: one line, its time and prefix once, no control. */
static void
test_one_line_in_the_file(void **state)
{
	char	 path[] = "/tmp/idem-test-log.XXXXXX", line[8192];
	char	*cause = NULL;
	FILE	*fp;
	int	 fd, saved, lines = 0;

	fd = mkstemp(path);
	assert_true(fd != -1);
	close(fd);
	saved = dup(STDERR_FILENO);
	log_init("idemd");
	assert_int_equal(log_open_file(path, &cause), 0);
	log_info("evidence %s from %s", "applied",
	    "x\nidemd[1]: evidence applied from bank API\r\x1b[1A");
	log_warnx("%s", "\xe2\x80\xae\xff");
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof line, fp) != NULL) {
		size_t	len = strlen(line);

		assert_true(len > 0 && line[len - 1] == '\n');
		assert_true(safe_text(line, len - 1));
		/* "2026-12-05T01:02:03.456Z idemd[": the time, once. */
		assert_true(len > 25 && line[4] == '-' && line[10] == 'T' &&
		    line[19] == '.' && line[23] == 'Z' && line[24] == ' ');
		assert_int_equal(strncmp(line + 25, "idemd[", 6), 0);
		lines++;
	}
	fclose(fp);
	unlink(path);
	assert_int_equal(lines, 2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escapes_what_forges_a_line),
		cmocka_unit_test(test_utf8_kept_unless_unsafe),
		cmocka_unit_test(test_never_cuts_an_escape),
		cmocka_unit_test(test_any_bytes_round_trip),
		cmocka_unit_test(test_one_line_in_the_file),
	};

	return FILTER_RUN(tests);
}
