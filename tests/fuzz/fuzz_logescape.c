/* SPDX-License-Identifier: ISC */
/*
 * fuzz_logescape.c: libFuzzer target for broker/log.c's log_escape,
 * through which every log message passes (issue #27: a client's text
 * must not forge or rewrite a log line).
 *
 * Input: any bytes, as a message quoting a client may hold them; the
 * first byte also picks the output buffer's size (1 to 256 bytes
 * beyond a fixed minimum, so that truncation is exercised).
 *
 * Invariants:
 *   - the output is NUL-terminated at the length returned, within the
 *     buffer;
 *   - it holds no C0 control, DEL, C1 control, line or paragraph
 *     separator, bidi control or BOM, and is valid UTF-8;
 *   - every backslash starts one of the escapes \\ \n \r \t \xHH \uHHHH;
 *   - read back, it is the input (when the buffer held it all) or a
 *     prefix of it (never half an escape or a character).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void
check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_logescape: invariant failed: %s\n", what);
		abort();
	}
}

static int
hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* A code point that must be escaped although it is valid UTF-8? */
static int
unsafe(unsigned cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x61c ||
	    cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char	*out, *back;
	size_t		 room, n, i, used = 0, k, len;
	unsigned	 cp;
	int		 h;

	if (size == 0)
		return 0;
	room = 16 + data[0];
	data++;
	size--;
	out = malloc(room);
	back = malloc(size + 1);
	check(out != NULL && back != NULL, "out of memory");
	n = log_escape((char *)out, room, (const char *)data, size);
	check(n < room && out[n] == '\0' && strlen((char *)out) == n,
	    "NUL-terminated at the length returned");
	for (i = 0; i < n; i += len) {
		if (out[i] == '\\') {
			len = 2;
			check(i + 1 < n, "a lone backslash at the end");
			switch (out[i + 1]) {
			case '\\':
				back[used++] = '\\';
				break;
			case 'n':
				back[used++] = '\n';
				break;
			case 'r':
				back[used++] = '\r';
				break;
			case 't':
				back[used++] = '\t';
				break;
			case 'x':
				len = 4;
				check(i + 3 < n && (h = hex(out[i + 2])) != -1 &&
				    hex(out[i + 3]) != -1, "\\xHH");
				back[used++] = (unsigned char)(h * 16 +
				    hex(out[i + 3]));
				break;
			case 'u':
				len = 6;
				cp = 0;
				for (k = 2; k < 6; k++) {
					check(i + k < n && hex(out[i + k]) !=
					    -1, "\\uHHHH");
					cp = cp * 16 + (unsigned)hex(out[i + k]);
				}
				check(unsafe(cp) && cp >= 0x80, "\\u of a safe "
				    "code point");
				if (cp < 0x800) {
					back[used++] = (unsigned char)(0xc0 |
					    (cp >> 6));
				} else {
					back[used++] = (unsigned char)(0xe0 |
					    (cp >> 12));
					back[used++] = (unsigned char)(0x80 |
					    ((cp >> 6) & 0x3f));
				}
				back[used++] = (unsigned char)(0x80 |
				    (cp & 0x3f));
				break;
			default:
				check(0, "an unknown escape");
			}
			continue;
		}
		/* Raw: printable ASCII or a safe, valid UTF-8 character. */
		if (out[i] < 0x80) {
			check(!unsafe(out[i]), "a raw control byte");
			len = 1;
		} else {
			len = out[i] >= 0xf0 && out[i] <= 0xf4 ? 4 :
			    out[i] >= 0xe0 && out[i] <= 0xef ? 3 :
			    out[i] >= 0xc2 && out[i] <= 0xdf ? 2 : 0;
			check(len != 0 && i + len <= n, "invalid UTF-8 lead");
			cp = out[i] & (0x7f >> len);
			for (k = 1; k < len; k++) {
				check((out[i + k] & 0xc0) == 0x80,
				    "invalid UTF-8 continuation");
				cp = (cp << 6) | (out[i + k] & 0x3f);
			}
			check(!(len == 3 && cp < 0x800) &&
			    !(len == 4 && cp < 0x10000) && cp <= 0x10ffff &&
			    !(cp >= 0xd800 && cp <= 0xdfff), "overlong, "
			    "surrogate or past U+10FFFF");
			check(!unsafe(cp), "a raw unsafe code point");
		}
		memcpy(back + used, out + i, len);
		used += len;
	}
	check(used <= size && memcmp(back, data, used) == 0,
	    "read back, a prefix of the input");
	/* Whole when the buffer had room for the worst case. */
	if (room > 4 * size)
		check(used == size, "read back, the whole input");
	free(out);
	free(back);
	return 0;
}
