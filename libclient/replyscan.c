/* SPDX-License-Identifier: ISC */
/*
 * replyscan.c: a reply line checked as JSON in one pass over its bytes,
 * with no tree built, and its members read from those bytes: libidem's
 * effect calls decode their answers with it (client_effect.c), where a
 * jansson tree of the whole answer (a receipt around the result) was
 * most of a retry's client time (issue #33).
 *
 * DESIGN
 *
 * replyscan_line accepts exactly the lines json_loadb(line, length,
 * JSON_REJECT_DUPLICATES) accepts: one object or array, then only
 * whitespace; strings with valid escapes (a \u high surrogate followed
 * by a low one, no lone low one, no \u0000: jansson refuses NUL without
 * JSON_ALLOW_NUL) and strict UTF-8 (no overlong form, no surrogate, none
 * past U+10FFFF); numbers in JSON's grammar and in jansson's range (an
 * integer strtoll reads without ERANGE, a real strtod does not overflow
 * to HUGE_VAL: jansson's own rule, its '.' swapped for the locale's
 * decimal point as its strconv.c does); no object with two keys equal
 * once unescaped, at any depth (up to REPLYSCAN_MAX_MEMBERS keys
 * pairwise, where a key's bit of 64 says it may repeat an earlier one:
 * key_bit; by sorting past that); and, as jansson does, one NUL byte
 * right after a number or a literal is skipped (libidem never sees
 * one: a line with a NUL is refused before, client.c).
 *
 * jansson judges only what is rare and would cost this pass its
 * bounded stack (by_jansson says so): a line nested deeper than
 * REPLYSCAN_MAX_DEPTH (each level keeps its keys on the stack; jansson
 * allows 2048 levels, and neither the broker's answers nor a usual
 * result nest past a few), a number token longer than
 * REPLYSCAN_NUMBER_BYTES (no printer of a double or an int64 writes one
 * so long: it takes digits past any precision) and an object too wide
 * to sort when memory is short.  tests/unit/test_replyscan.c and
 * tests/fuzz/fuzz_replyscan.c hold it to jansson's verdict.
 *
 * What a checked line holds is read without checking again: an
 * object's members listed (replyscan_members), a string unescaped, an
 * integer read.  Plain bytes of a string are stepped over sixteen
 * (SSE2), then eight at a time, as fastscan.c does (jsonbytes.h).
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jsonbytes.h"
#include "replyscan.h"

/* Deeper lines are jansson's to judge (it allows 2048 levels). */
#define REPLYSCAN_MAX_DEPTH	16
/* An integer of at most this many digits is in int64's range. */
#define REPLYSCAN_PLAIN_DIGITS	18
/* Longer number tokens are jansson's to judge (see DESIGN). */
#define REPLYSCAN_NUMBER_BYTES	64

/* A key as the check keeps it for the duplicate test. */
struct replyscan_key {
	const char	*text;
	size_t		 length;
	int		 escaped;
};

struct replyscan_check {
	const char		*end;
	int			 defer;	/* 1: jansson judges the whole line */
	int			 by_jansson; /* jansson judged a number */
	/*
	 * Where the top-level object's members are listed as the check
	 * passes them, so that the list costs no second walk of the line
	 * (an array's are not listed), and where those of its member
	 * inner_name are if that is an object (inner NULL: none wanted).
	 */
	struct replyscan_object	*top;
	struct replyscan_object	*inner;
	const char		*inner_name;
	size_t			 inner_name_length;
	int			 inner_next;	/* the value next checked is */
	/*
	 * 1 once the check passed what jansson's compact dump would write
	 * otherwise: whitespace, an escape, a number not a plain integer
	 * (a real, -0, 19 digits or more), a NUL after a scalar.
	 */
	int			 loose;
};

/* Whitespace stepped over: the line is not in compact form. */
static const char *
check_space(struct replyscan_check *c, const char *p)
{
	const char	*q = jsonbytes_skip_space(p, c->end);

	if (q != p)
		c->loose = 1;
	return q;
}

/*
 * The bytes of v that may stop a run of a string's plain bytes, marked
 * by their top bits (0: none): what ends one (a quote, a backslash,
 * below 0x20), and from 0x80 up, whose UTF-8 is checked byte by byte.
 * The first marked one does (jsonbytes_first_marked).
 */
static uint64_t
word_stops(uint64_t v)
{
	return (jsonbytes_word_has(v, '"') | jsonbytes_word_has(v, '\\') |
	    jsonbytes_word_below(v, 0x20) | v) & JSONBYTES_HIGHS;
}

static int
hex4(const char *p, const char *end, unsigned *out)
{
	unsigned	u = 0;
	int		i;
	char		c;

	if (end - p < 4)
		return -1;
	for (i = 0; i < 4; i++) {
		c = p[i];
		u <<= 4;
		if (jsonbytes_is_digit(c))
			u |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			u |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			u |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = u;
	return 0;
}

/* p at a byte from 0x80 up: past its UTF-8 sequence, or NULL (jansson's). */
static const char *
check_utf8(const char *p, const char *end)
{
	unsigned char	c = (unsigned char)*p;
	uint32_t	value;
	size_t		n, i;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		value = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		value = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		value = c & 0x07;
	} else
		return NULL;
	if ((size_t)(end - p) < n)
		return NULL;
	for (i = 1; i < n; i++) {
		c = (unsigned char)p[i];
		if (c < 0x80 || c > 0xbf)
			return NULL;
		value = (value << 6) | (c & 0x3f);
	}
	if (value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff) ||
	    (n == 3 && value < 0x800) || (n == 4 && value < 0x10000))
		return NULL;
	return p + n;
}

/* p in a string, past its opening quote: past the closing one, or NULL. */
static const char *
check_string_rest(const char *p, const char *end, int *escaped)
{
	uint64_t	v, stops;
	unsigned	u, low;
	unsigned char	c;

	for (;;) {
		p = jsonbytes_skip_run16(p, end, 1);
		/*
		 * Sixteen bytes or more left: p is at the byte that stopped
		 * the run (most strings are short: their quote), which the
		 * words would only find again.
		 */
		while (end - p >= 8 && (JSONBYTES_RUN16 == 0 ||
		    end - p < 16)) {
			memcpy(&v, p, sizeof v);
			/* Straight to the byte that stops the run. */
			if ((stops = word_stops(v)) != 0) {
				p += jsonbytes_first_marked(stops);
				break;
			}
			p += 8;
		}
		if (p >= end)
			return NULL;
		c = (unsigned char)*p;
		if (c >= 0x80) {
			if ((p = check_utf8(p, end)) == NULL)
				return NULL;
			continue;
		}
		p++;
		if (c == '"')
			return p;
		if (c < 0x20)
			return NULL;
		if (c != '\\')
			continue;
		*escaped = 1;
		if (p >= end)
			return NULL;
		c = (unsigned char)*p++;
		if (c != 'u') {
			if (c == '\0' || strchr("\"\\/bfnrt", c) == NULL)
				return NULL;
			continue;
		}
		if (hex4(p, end, &u) != 0)
			return NULL;
		p += 4;
		/* NUL: refused without JSON_ALLOW_NUL, in keys always. */
		if (u == 0 || (u >= 0xdc00 && u <= 0xdfff))
			return NULL;
		if (u >= 0xd800 && u <= 0xdbff) {
			if (end - p < 6 || p[0] != '\\' || p[1] != 'u' ||
			    hex4(p + 2, end, &low) != 0 || low < 0xdc00 ||
			    low > 0xdfff)
				return NULL;
			p += 6;
		}
	}
}

/*
 * A number token [start, start + n) in JSON's grammar: past (after) if
 * jansson's lexer takes its value, NULL if it refuses it.  Its rule
 * (jansson 2.14, load.c lex_scan_number and strconv.c jsonp_strtod):
 * an integer (no '.', 'e' or 'E') is read by strtoll and refused on
 * ERANGE; a real is read by strtod, its '.' first swapped for the
 * locale's decimal point, and refused only when it overflows (+-HUGE_VAL
 * with ERANGE; an underflow to 0 or a denormal is taken).
 */
static const char *
check_range(struct replyscan_check *c, const char *start, size_t n,
    const char *after)
{
	char		 copy[REPLYSCAN_NUMBER_BYTES + 1], *dot;
	const char	*point;
	double		 real;
	json_t		*j;

	if (n > REPLYSCAN_NUMBER_BYTES) {
		c->by_jansson = 1;
		if ((j = json_loadb(start, n, JSON_DECODE_ANY, NULL)) == NULL)
			return NULL;
		json_decref(j);
		return after;
	}
	memcpy(copy, start, n);
	copy[n] = '\0';
	if (memchr(copy, '.', n) == NULL && memchr(copy, 'e', n) == NULL &&
	    memchr(copy, 'E', n) == NULL) {
		errno = 0;
		(void)strtoll(copy, NULL, 10);
		return errno == ERANGE ? NULL : after;
	}
	point = localeconv()->decimal_point;
	if (*point != '.' && (dot = strchr(copy, '.')) != NULL)
		*dot = *point;
	errno = 0;
	real = strtod(copy, NULL);
	if ((real == HUGE_VAL || real == -HUGE_VAL) && errno == ERANGE)
		return NULL;
	return after;
}

/* A number in JSON's grammar, and in jansson's range. */
static const char *
check_number(struct replyscan_check *c, const char *p, const char *end)
{
	const char	*start = p, *digits;
	int		 plain = 1;

	if (p < end && *p == '-')
		p++;
	digits = p;
	if (p < end && *p == '0')
		p++;
	else if (p >= end || *p < '1' || *p > '9' ||
	    (p = jsonbytes_skip_digits(p, end)) == NULL)
		return NULL;
	if (p - digits > REPLYSCAN_PLAIN_DIGITS)
		plain = 0;
	/* jansson writes the integer -0 as 0. */
	if (start != digits && *digits == '0')
		c->loose = 1;
	if (p < end && *p == '.') {
		plain = 0;
		if ((p = jsonbytes_skip_digits(p + 1, end)) == NULL)
			return NULL;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		plain = 0;
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if ((p = jsonbytes_skip_digits(p, end)) == NULL)
			return NULL;
	}
	if (plain)
		return p;
	c->loose = 1;
	return check_range(c, start, (size_t)(p - start), p);
}

static const char *
check_literal(const char *p, const char *end, const char *word, size_t n)
{
	if ((size_t)(end - p) < n || memcmp(p, word, n) != 0)
		return NULL;
	return p + n;
}

/*
 * *p just past a checked escape's backslash: the bytes it stands for
 * into utf8 (their count), *p past it.
 */
static size_t
unescape_one(const char **p, const char *end, char *utf8)
{
	unsigned	u, low;
	char		one = *(*p)++;

	switch (one) {
	case 'b': utf8[0] = '\b'; return 1;
	case 'f': utf8[0] = '\f'; return 1;
	case 'n': utf8[0] = '\n'; return 1;
	case 'r': utf8[0] = '\r'; return 1;
	case 't': utf8[0] = '\t'; return 1;
	case 'u': break;
	default: utf8[0] = one; return 1;	/* " \ / */
	}
	(void)hex4(*p, end, &u);
	*p += 4;
	if (u >= 0xd800 && u <= 0xdbff) {
		(void)hex4(*p + 2, end, &low);
		*p += 6;
		u = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00);
	}
	if (u < 0x80) {
		utf8[0] = (char)u;
		return 1;
	}
	if (u < 0x800) {
		utf8[0] = (char)(0xc0 | (u >> 6));
		utf8[1] = (char)(0x80 | (u & 0x3f));
		return 2;
	}
	if (u < 0x10000) {
		utf8[0] = (char)(0xe0 | (u >> 12));
		utf8[1] = (char)(0x80 | ((u >> 6) & 0x3f));
		utf8[2] = (char)(0x80 | (u & 0x3f));
		return 3;
	}
	utf8[0] = (char)(0xf0 | (u >> 18));
	utf8[1] = (char)(0x80 | ((u >> 12) & 0x3f));
	utf8[2] = (char)(0x80 | ((u >> 6) & 0x3f));
	utf8[3] = (char)(0x80 | (u & 0x3f));
	return 4;
}

/* The bytes between a checked string's quotes, unescaped (snprintf's way). */
static size_t
unescape(const char *p, size_t n, char *out, size_t size)
{
	const char	*end = p + n, *bs;
	size_t		 length = 0, run, i, k;
	char		 utf8[4];

	while (p < end) {
		if ((bs = memchr(p, '\\', (size_t)(end - p))) == NULL)
			bs = end;
		run = (size_t)(bs - p);
		if (length < size) {
			k = size - 1 - length < run ? size - 1 - length : run;
			memcpy(out + length, p, k);
		}
		length += run;
		if ((p = bs) >= end)
			break;
		p++;
		k = unescape_one(&p, end, utf8);
		for (i = 0; i < k; i++, length++) {
			if (length + 1 < size)
				out[length] = utf8[i];
		}
	}
	if (size > 0)
		out[length < size ? length : size - 1] = '\0';
	return length;
}

/* The checked string bytes [p, p + n) unescaped are name's n bytes. */
static int
unescaped_is(const char *p, size_t n, const char *name, size_t name_length)
{
	const char	*end = p + n, *bs;
	size_t		 at = 0, run, k;
	char		 utf8[4];

	while (p < end) {
		if ((bs = memchr(p, '\\', (size_t)(end - p))) == NULL)
			bs = end;
		run = (size_t)(bs - p);
		if (run > name_length - at || memcmp(name + at, p, run) != 0)
			return 0;
		at += run;
		if ((p = bs) >= end)
			break;
		p++;
		k = unescape_one(&p, end, utf8);
		if (k > name_length - at || memcmp(name + at, utf8, k) != 0)
			return 0;
		at += k;
	}
	return at == name_length;
}

/* A checked string's bytes read one at a time, unescaped. */
struct replyscan_unescaping {
	const char	*p, *end;
	char		 utf8[4];
	size_t		 at, count;	/* utf8[at..count): still to give */
};

/* The next unescaped byte (0-255), or -1 past the end. */
static int
next_unescaped(struct replyscan_unescaping *u)
{
	if (u->at < u->count)
		return (unsigned char)u->utf8[u->at++];
	if (u->p >= u->end)
		return -1;
	if (*u->p != '\\')
		return (unsigned char)*u->p++;
	u->p++;
	u->count = unescape_one(&u->p, u->end, u->utf8);
	u->at = 1;
	return (unsigned char)u->utf8[0];
}

/* Two keys of a checked object ordered by their unescaped bytes. */
static int
key_order(const struct replyscan_key *a, const struct replyscan_key *b)
{
	struct replyscan_unescaping	ua, ub;
	size_t				n;
	int				x, y, d;

	if (!a->escaped && !b->escaped) {
		n = a->length < b->length ? a->length : b->length;
		if ((d = memcmp(a->text, b->text, n)) != 0)
			return d;
		return (a->length > b->length) - (a->length < b->length);
	}
	memset(&ua, 0, sizeof ua);
	memset(&ub, 0, sizeof ub);
	ua.p = a->text;
	ua.end = a->text + a->length;
	ub.p = b->text;
	ub.end = b->text + b->length;
	do {
		x = next_unescaped(&ua);
		y = next_unescaped(&ub);
	} while (x == y && x >= 0);
	return (x > y) - (x < y);
}

/* Two keys equal once unescaped (the common plain pair by length first). */
static int
same_key(const struct replyscan_key *a, const struct replyscan_key *b)
{
	if (!a->escaped && !b->escaped)
		return a->length == b->length &&
		    memcmp(a->text, b->text, a->length) == 0;
	return key_order(a, b) == 0;
}

/* A checked key equal, once unescaped, to name's n bytes. */
static int
key_named(const struct replyscan_key *key, const char *name, size_t n)
{
	if (!key->escaped)
		return key->length == n && memcmp(key->text, name, n) == 0;
	return unescaped_is(key->text, key->length, name, n);
}

static int
key_sort_order(const void *a, const void *b)
{
	return key_order(a, b);
}

/* Whether two of a wide object's count keys are equal: sorted, then
 * neighbours compared (pairwise would be count squared). */
static int
keys_repeat(struct replyscan_key *keys, size_t count)
{
	size_t	i;

	qsort(keys, count, sizeof keys[0], key_sort_order);
	for (i = 1; i < count; i++) {
		if (same_key(&keys[i - 1], &keys[i]))
			return 1;
	}
	return 0;
}

/*
 * One bit of 64 for a plain key, from its length and its first byte
 * (its closing quote when it is empty: a checked key's bytes are
 * followed by one): two equal plain keys have the same bit, so a key
 * whose bit no earlier plain key of its object set equals none of
 * them, and the pairwise compare is skipped.
 */
static inline uint64_t
key_bit(const struct replyscan_key *key)
{
	return 1ULL << ((key->length * 11 + (unsigned char)key->text[0]) &
	    63);
}

/*
 * p just past the opening quote: past the closing one, or NULL.  A
 * string is done here, inline, without check_string_rest's call,
 * whenever the SSE2 steps' first stop is its closing quote with at
 * least sixteen bytes of the line left from it, whatever its length:
 * most of an answer's strings (keys, ids, times; issue #33: a call's
 * entry and exit were a tenth of the check).  One with an escape, a
 * control byte or a byte from 0x80 up, or ending nearer the line's
 * end, goes on to check_string_rest from the first stop.
 */
static inline const char *
check_string(const char *p, const char *end, int *escaped)
{
	const char	*q = jsonbytes_skip_run16(p, end, 1);

	if (JSONBYTES_RUN16 && end - q >= 16 && *q == '"')
		return q + 1;
	return check_string_rest(q, end, escaped);
}

static const char *check_value(struct replyscan_check *, const char *, int);

/*
 * A wide object's keys past the first REPLYSCAN_MAX_MEMBERS: all of
 * them on the heap, for keys_repeat at its close.  0, or -1 when memory
 * is short (then jansson judges: c->defer).
 */
static int
keep_key(struct replyscan_check *c, struct replyscan_key **wide,
    size_t *room, const struct replyscan_key *first, size_t count,
    const struct replyscan_key *key)
{
	struct replyscan_key	*grown;
	size_t			 size = *room ? *room * 2 : count * 4;

	if (*wide == NULL || count == *room) {
		if ((grown = realloc(*wide, size * sizeof grown[0])) == NULL) {
			c->defer = 1;
			return -1;
		}
		if (*wide == NULL)
			memcpy(grown, first, count * sizeof grown[0]);
		*wide = grown;
		*room = size;
	}
	(*wide)[count] = *key;
	return 0;
}

/*
 * The member just checked into its object's list, as next_member would
 * list it: its value's bytes without the NUL check_value skips after a
 * scalar (no value ends in a NUL byte).
 */
static void
list_member(struct replyscan_object *list, const struct replyscan_key *key,
    const char *value, const char *after)
{
	struct replyscan_member	*m;

	if (list->count == REPLYSCAN_MAX_MEMBERS) {
		list->overflow = 1;
		return;
	}
	if (after[-1] == '\0')
		after--;
	m = &list->members[list->count++];
	m->key = key->text;
	m->key_length = key->length;
	m->key_escaped = key->escaped;
	m->value = value;
	m->value_length = (size_t)(after - value);
}

/* p at '{' or '[': past its close, or NULL. */
static const char *
check_members(struct replyscan_check *c, const char *p, int depth,
    struct replyscan_key **wide)
{
	struct replyscan_key	 keys[REPLYSCAN_MAX_MEMBERS], key;
	struct replyscan_object	*list = NULL;
	const char		*end = c->end, *value;
	size_t			 count = 0, room = 0, i;
	uint64_t		 seen = 0, bit;
	int			 object = *p == '{', escaped_keys = 0;
	char			 close = object ? '}' : ']';

	/*
	 * The top-level object is listed, and inner if this is its value:
	 * every container's loop says, before each value it checks,
	 * whether that value is top's member inner_name.
	 */
	if (object && depth == 0)
		list = c->top;
	else if (object && c->inner_next)
		list = c->inner;
	if (list != NULL)
		list->text = p;

	p = check_space(c, p + 1);
	if (p < end && *p == close) {
		if (list != NULL)
			list->length = (size_t)(p + 1 - list->text);
		return p + 1;
	}
	for (;;) {
		if (object) {
			if (p >= end || *p != '"')
				return NULL;
			key.text = p + 1;
			key.escaped = 0;
			if ((p = check_string(p + 1, end, &key.escaped)) ==
			    NULL)
				return NULL;
			c->loose |= key.escaped;
			key.length = (size_t)(p - 1 - key.text);
			if (count < REPLYSCAN_MAX_MEMBERS) {
				/*
				 * An escaped key may equal a plain one: with
				 * one in the object, every pair is compared.
				 */
				bit = key_bit(&key);
				escaped_keys |= key.escaped;
				if (escaped_keys || (seen & bit) != 0) {
					for (i = 0; i < count; i++) {
						if (same_key(&keys[i], &key))
							return NULL;
					}
				}
				seen |= bit;
				keys[count] = key;
			} else if (keep_key(c, wide, &room, keys, count,
			    &key) != 0)
				return NULL;
			count++;
			p = check_space(c, p);
			if (p >= end || *p != ':')
				return NULL;
			p = check_space(c, p + 1);
		}
		value = p;
		c->inner_next = list == c->top && list != NULL &&
		    c->inner != NULL && key_named(&key, c->inner_name,
		    c->inner_name_length);
		if ((p = check_value(c, p, depth + 1)) == NULL)
			return NULL;
		if (list != NULL && !list->overflow)
			list_member(list, &key, value, p);
		p = check_space(c, p);
		if (p < end && *p == ',') {
			p = check_space(c, p + 1);
			continue;
		}
		if (p >= end || *p != close)
			return NULL;
		if (*wide != NULL && keys_repeat(*wide, count))
			return NULL;
		if (list != NULL)
			list->length = (size_t)(p + 1 - list->text);
		return p + 1;
	}
}

/* p at '{' or '['. */
static const char *
check_container(struct replyscan_check *c, const char *p, int depth)
{
	struct replyscan_key	*wide = NULL;
	const char		*q;

	if (depth >= REPLYSCAN_MAX_DEPTH) {
		c->defer = 1;
		return NULL;
	}
	q = check_members(c, p, depth, &wide);
	free(wide);
	return q;
}

static const char *
check_value(struct replyscan_check *c, const char *p, int depth)
{
	const char	*end = c->end;
	int		 escaped = 0;

	if (p >= end)
		return NULL;
	switch (*p) {
	case '"':
		p = check_string(p + 1, end, &escaped);
		c->loose |= escaped;
		return p;
	case '{':
	case '[':
		return check_container(c, p, depth);
	case 't':
		p = check_literal(p, end, "true", 4);
		break;
	case 'f':
		p = check_literal(p, end, "false", 5);
		break;
	case 'n':
		p = check_literal(p, end, "null", 4);
		break;
	default:
		p = check_number(c, p, end);
		break;
	}
	/*
	 * jansson's lexer puts back the byte after a number or a literal,
	 * and a NUL put back reads as an empty buffer: it skips one.
	 */
	if (p != NULL && p < end && *p == '\0') {
		c->loose = 1;
		p++;
	}
	return p;
}

/* p just past a checked string's opening quote: past its closing one. */
static const char *
skip_checked_string(const char *p, const char *end)
{
	uint64_t	v;

	for (;;) {
		while (end - p >= 8) {
			memcpy(&v, p, sizeof v);
			if (jsonbytes_word_quote_or_escape(v))
				break;
			p += 8;
		}
		if (p >= end)
			return end;
		if (*p == '"')
			return p + 1;
		p += *p == '\\' ? 2 : 1;
	}
}

/* Past a checked value. */
static const char *
skip_checked(const char *p, const char *end)
{
	int	depth = 0;
	char	c;

	if (*p == '"')
		return skip_checked_string(p + 1, end);
	if (*p != '{' && *p != '[') {
		while (p < end && *p != ',' && *p != '}' && *p != ']' &&
		    *p != '\0' && !jsonbytes_is_space(*p))
			p++;
		return p;
	}
	while (p < end) {
		c = *p++;
		if (c == '"')
			p = skip_checked_string(p, end);
		else if (c == '{' || c == '[')
			depth++;
		else if ((c == '}' || c == ']') && --depth == 0)
			break;
	}
	return p;
}

/* *p in a checked object, at a member or its '}': 1 and m, or 0. */
static int
next_member(const char **p, const char *end, struct replyscan_member *m)
{
	const char	*q = jsonbytes_skip_space(*p, end);

	if (q < end && *q == ',')
		q = jsonbytes_skip_space(q + 1, end);
	if (q >= end || *q != '"')
		return 0;
	m->key = q + 1;
	q = skip_checked_string(q + 1, end);
	m->key_length = (size_t)(q - 1 - m->key);
	m->key_escaped = memchr(m->key, '\\', m->key_length) != NULL;
	q = jsonbytes_skip_space(q, end);
	q = jsonbytes_skip_space(q + 1, end);	/* the colon */
	m->value = q;
	q = skip_checked(q, end);
	m->value_length = (size_t)(q - m->value);
	if (q < end && *q == '\0')	/* check_value's skipped NUL */
		q++;
	*p = q;
	return 1;
}

enum replyscan_verdict
replyscan_line(const char *line, size_t length, struct replyscan_object *top)
{
	return replyscan_line_inner(line, length, top, NULL, NULL);
}

/* An object's lists emptied: what a failed check listed is no one's. */
static void
list_clear(struct replyscan_object *list)
{
	list->text = NULL;
	list->length = list->count = 0;
	list->overflow = list->by_jansson = list->compact = 0;
}

enum replyscan_verdict
replyscan_line_inner(const char *line, size_t length,
    struct replyscan_object *top, const char *name,
    struct replyscan_object *inner)
{
	struct replyscan_check	 c;
	struct replyscan_member	 m;
	const char		*end = line + length, *p, *q;
	json_t			*j;
	enum replyscan_verdict	 verdict;

	list_clear(top);
	memset(&c, 0, sizeof c);
	c.end = end;
	c.top = top;
	/* Nothing listed in inner unless this pass lists it, name or not. */
	if (inner != NULL)
		list_clear(inner);
	if (inner != NULL && name != NULL) {
		c.inner = inner;
		c.inner_name = name;
		c.inner_name_length = strlen(name);
	}
	p = check_space(&c, line);
	if (p >= end || (*p != '{' && *p != '['))
		goto invalid;
	if ((q = check_container(&c, p, 0)) != NULL) {
		if (check_space(&c, q) != end)
			goto invalid;
		verdict = *p == '{' ? REPLYSCAN_OBJECT : REPLYSCAN_NOT_OBJECT;
	} else if (!c.defer)
		goto invalid;
	else {
		j = json_loadb(line, length, JSON_REJECT_DUPLICATES, NULL);
		if (j == NULL)
			goto invalid;
		verdict = json_is_object(j) ? REPLYSCAN_OBJECT :
		    REPLYSCAN_NOT_OBJECT;
		json_decref(j);
		c.by_jansson = 1;
		/* The check stopped part way: list the members by a walk. */
		if (verdict == REPLYSCAN_OBJECT) {
			replyscan_members(p, (size_t)(skip_checked(p, end) -
			    p), top);
			if (c.inner != NULL && (!replyscan_find(top, name,
			    &m) || !replyscan_members(m.value,
			    m.value_length, inner)))
				list_clear(inner);
		}
	}
	if (verdict != REPLYSCAN_OBJECT) {
		list_clear(top);
		if (c.inner != NULL)
			list_clear(inner);
	}
	top->by_jansson = c.by_jansson;
	top->compact = !c.loose && !c.by_jansson;
	return verdict;

invalid:
	list_clear(top);
	if (c.inner != NULL)
		list_clear(inner);
	return REPLYSCAN_INVALID;
}

int
replyscan_members(const char *value, size_t length,
    struct replyscan_object *obj)
{
	const char		*p = value + 1, *end = value + length;
	struct replyscan_member	 m;

	obj->count = 0;
	obj->overflow = obj->by_jansson = obj->compact = 0;
	if (length < 2 || *value != '{')
		return 0;
	obj->text = value;
	obj->length = length;
	while (next_member(&p, end, &m)) {
		if (obj->count == REPLYSCAN_MAX_MEMBERS) {
			obj->overflow = 1;
			break;
		}
		obj->members[obj->count++] = m;
	}
	return 1;
}

static int
key_is(const struct replyscan_member *m, const char *name, size_t n)
{
	if (!m->key_escaped)
		return m->key_length == n && memcmp(m->key, name, n) == 0;
	return unescaped_is(m->key, m->key_length, name, n);
}

int
replyscan_find(const struct replyscan_object *obj, const char *name,
    struct replyscan_member *found)
{
	const struct replyscan_member	*m = obj->members;
	const char			*p, *end;
	size_t				 n = strlen(name), i;

	for (i = 0; i < obj->count; i++, m++) {
		/* Most keys differ in length: refused without a call. */
		if (m->key_length != n && !m->key_escaped)
			continue;
		if (key_is(m, name, n)) {
			*found = *m;
			return 1;
		}
	}
	if (!obj->overflow)
		return 0;
	/* Past the list: walk the rest of the text. */
	p = obj->text + 1;
	end = obj->text + obj->length;
	for (i = 0; next_member(&p, end, found); i++) {
		if (i >= obj->count && key_is(found, name, n))
			return 1;
	}
	return 0;
}

long
replyscan_string(const char *value, size_t length, char *out, size_t size)
{
	size_t	n, k;

	if (length < 2 || value[0] != '"')
		return -1;
	n = length - 2;
	if (memchr(value + 1, '\\', n) != NULL)
		return (long)unescape(value + 1, n, out, size);
	if (size > 0) {
		k = n < size - 1 ? n : size - 1;
		memcpy(out, value + 1, k);
		out[k] = '\0';
	}
	return (long)n;
}

int
replyscan_integer(const char *value, size_t length, int64_t *out)
{
	char		digits[24];
	size_t		i;
	uint64_t	n = 0;	/* wraps past 19 digits, then unused */

	if (length == 0 || length >= sizeof digits)
		return -1;
	for (i = 0; i < length; i++) {
		if (jsonbytes_is_digit(value[i]))
			n = n * 10 + (uint64_t)(value[i] - '0');
		else if (i != 0 || value[i] != '-')
			return -1;
	}
	/* A sign is only ever first: a lone "-" is the one without a digit. */
	if (!jsonbytes_is_digit(value[length - 1]))
		return -1;
	/*
	 * Up to 18 bytes (18 digits, or 17 and a sign): in range, read as
	 * they were checked.
	 */
	if (length <= REPLYSCAN_PLAIN_DIGITS) {
		*out = value[0] == '-' ? -(int64_t)n : (int64_t)n;
		return 0;
	}
	memcpy(digits, value, length);
	digits[length] = '\0';
	*out = strtoll(digits, NULL, 10);
	return 0;
}
