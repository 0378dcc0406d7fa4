/* SPDX-License-Identifier: ISC */
/*
 * jsonbytes.h: the bytes of JSON's grammar that libidem's two scanners
 * read without a tree, fastscan.c (a request line, for the broker's
 * retry fast path) and replyscan.c (an answer, for libidem's effect
 * calls): whitespace, digits (read, and written by the broker's replies
 * and libidem's lines), and the eight-byte tests that let a
 * string's plain bytes be stepped over a word at a time.  One
 * definition, so the two cannot come to disagree about what JSON's
 * whitespace or a string's run is.
 */
#ifndef IDEM_JSONBYTES_H
#define IDEM_JSONBYTES_H

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define JSONBYTES_ONES	0x0101010101010101ULL
#define JSONBYTES_HIGHS	0x8080808080808080ULL

/* JSON's whitespace: space, tab, CR, LF (RFC 8259, section 2). */
static inline int
jsonbytes_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static inline int
jsonbytes_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * u's decimal digits, as JSON (and jansson) write a number, written
 * backwards so that they end at end: where they start (at most 20
 * bytes before end).  One writer for the broker's replies and fences
 * and libidem's request lines.
 */
static inline char *
jsonbytes_decimal(char *end, uint64_t u)
{
	do
		*--end = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	return end;
}

/*
 * Past JSON's whitespace at p.  Every whitespace byte is at most 0x20,
 * so a byte above it (what compact JSON has at each of these places)
 * ends the step after one compare instead of four.
 */
static inline const char *
jsonbytes_skip_space(const char *p, const char *end)
{
	while (p < end && (unsigned char)*p <= ' ' && jsonbytes_is_space(*p))
		p++;
	return p;
}

/* One digit or more: just past the last, or NULL if none is at p. */
static inline const char *
jsonbytes_skip_digits(const char *p, const char *end)
{
	if (p >= end || !jsonbytes_is_digit(*p))
		return NULL;
	while (p < end && jsonbytes_is_digit(*p))
		p++;
	return p;
}

/*
 * The classic word tests, each exact about whether some byte of v
 * matches (not which): x has a zero byte iff (x - 0x01..01) & ~x &
 * 0x80..80 is not zero, and a byte below n (n <= 0x80) iff
 * (x - n * 0x01..01) & ~x & 0x80..80 is not.  Bytes from 0x80 up
 * (UTF-8) have their top bit set and match neither.  Each returns its
 * mask before the top bits are taken, so that tests can be or'ed.
 */
static inline uint64_t
jsonbytes_word_has(uint64_t v, unsigned char byte)
{
	uint64_t	x = v ^ (JSONBYTES_ONES * byte);

	return (x - JSONBYTES_ONES) & ~x;
}

static inline uint64_t
jsonbytes_word_below(uint64_t v, unsigned char n)
{
	return (v - JSONBYTES_ONES * n) & ~v;
}

/* Whether a quote or a backslash is among the eight bytes of v. */
static inline int
jsonbytes_word_quote_or_escape(uint64_t v)
{
	return (jsonbytes_word_has(v, '"') | jsonbytes_word_has(v, '\\')) &
	    JSONBYTES_HIGHS ? 1 : 0;
}

/*
 * The bytes of v that may end a run of a string's plain bytes (a quote,
 * a backslash or a control byte, below 0x20), marked by their top bits:
 * 0 if none does; the first marked one does (jsonbytes_first_marked).
 */
static inline uint64_t
jsonbytes_word_ends_run(uint64_t v)
{
	return (jsonbytes_word_has(v, '"') | jsonbytes_word_has(v, '\\') |
	    jsonbytes_word_below(v, 0x20)) & JSONBYTES_HIGHS;
}

/*
 * Where in v (0-7, in memory order) the first byte marked in mask is:
 * mask is one of the tests above, or several or'ed, and'ed with
 * JSONBYTES_HIGHS.  A test is inexact only through a borrow, which runs
 * from a matching byte to the more significant ones, on a little-endian
 * machine the bytes after it: so its first marked byte does match.  On
 * a big-endian one the borrow runs to the bytes before it, and this is
 * 0: the caller judges the word from its first byte on.
 */
static inline unsigned
jsonbytes_first_marked(uint64_t mask)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (unsigned)__builtin_ctzll(mask) / 8;
#else
	(void)mask;
	return 0;
#endif
}

/*
 * Whether the n bytes at p are all printable ASCII from lowest (0x20 or
 * 0x21) to 0x7e, none a quote or a backslash: a string's bytes that
 * JSON and jansson's compact dump keep as they stand.  A word at a
 * time: the tests are exact about whether some byte matches, all this
 * asks (fastscan's ids and keys, issue #33).
 */
static inline int
jsonbytes_printable_plain(const char *p, size_t n, unsigned char lowest)
{
	const char	*end = p + n;
	uint64_t	 v;
	unsigned char	 c;

	for (; end - p >= 8; p += 8) {
		memcpy(&v, p, sizeof v);
		if ((jsonbytes_word_has(v, '"') | jsonbytes_word_has(v, '\\') |
		    jsonbytes_word_has(v, 0x7f) |
		    jsonbytes_word_below(v, lowest) | v) & JSONBYTES_HIGHS)
			return 0;
	}
	for (; p < end; p++) {
		c = (unsigned char)*p;
		if (c < lowest || c > 0x7e || c == '"' || c == '\\')
			return 0;
	}
	return 1;
}

#if defined(__SSE2__)
#define JSONBYTES_RUN16	1	/* jsonbytes_skip_run16 steps */
#else
#define JSONBYTES_RUN16	0	/* it returns p as given */
#endif

/*
 * Where x86-64's SSE2 (always there) is, sixteen bytes a step before
 * the words: a compare a byte class, exact for each byte (no borrow),
 * and the first marked byte found from the mask.  A 512-byte result
 * is 32 steps of about eight instructions instead of 64 of about
 * fourteen (issue #33: a retry's scans on both sides, counted).
 * jsonbytes_skip_run16 returns p at the first byte of the sixteen that
 * ends a run (high: a byte from 0x80 up stops it too), or fewer than
 * sixteen bytes before end; without SSE2, p as given.
 */
static inline const char *
jsonbytes_skip_run16(const char *p, const char *end, int high)
{
#if defined(__SSE2__)
	const __m128i	quote = _mm_set1_epi8('"');
	const __m128i	backslash = _mm_set1_epi8('\\');
	const __m128i	space = _mm_set1_epi8(0x20);
	const __m128i	control = _mm_set1_epi8(0x1f);
	__m128i		v, stops;
	int		mask;

	while (end - p >= 16) {
		v = _mm_loadu_si128((const __m128i *)(const void *)p);
		stops = _mm_or_si128(_mm_cmpeq_epi8(v, quote),
		    _mm_cmpeq_epi8(v, backslash));
		/*
		 * Signed, a byte below 0x20 or from 0x80 up is below 0x20;
		 * unsigned, one is below 0x20 iff its minimum with 0x1f is
		 * itself.
		 */
		if (high)
			stops = _mm_or_si128(stops, _mm_cmplt_epi8(v, space));
		else
			stops = _mm_or_si128(stops, _mm_cmpeq_epi8(
			    _mm_min_epu8(v, control), v));
		if ((mask = _mm_movemask_epi8(stops)) != 0)
			return p + __builtin_ctz((unsigned)mask);
		p += 16;
	}
#else
	(void)end;
	(void)high;
#endif
	return p;
}

/*
 * p stepped over a string's plain bytes sixteen, then eight at a time:
 * at the byte that ends the run (before it on a big-endian machine), or
 * fewer than eight bytes before end.  The caller judges the bytes left
 * one at a time.
 */
static inline const char *
jsonbytes_skip_plain_words(const char *p, const char *end)
{
	uint64_t	v, ends;

	p = jsonbytes_skip_run16(p, end, 0);
	while (end - p >= 8) {
		memcpy(&v, p, sizeof v);
		if ((ends = jsonbytes_word_ends_run(v)) != 0)
			return p + jsonbytes_first_marked(ends);
		p += 8;
	}
	return p;
}

#endif /* IDEM_JSONBYTES_H */
