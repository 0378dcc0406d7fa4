/* SPDX-License-Identifier: ISC */
/*
 * fastscan.c: finds, in the raw bytes of a request line, what the retry
 * fast path needs (fastpath.c) without building a JSON tree: the op
 * (write_task or effect_begin), the fingerprint of the members that
 * decide the answer, the submission id (and an effect's kind) to look
 * up and the id to echo.
 *
 * DESIGN
 *
 * The line must be one JSON object whose top-level members are all
 * known to its op (write_task.c's request_keys, effect_check.c's
 * begin_keys), each at most once, keys without escapes.  Every
 * member except "id" is fingerprinted as the exact bytes from its key's
 * opening quote to the end of its value, each followed by a newline
 * (which no request line holds, so the pieces cannot run together), in
 * the order of the line: BLAKE2b-256 (crypto_generichash) of that
 * sequence (issue #33 timed the alternatives on a 388-byte effect_begin
 * line: BLAKE2b 500 ns of the scan's 808, Poly1305 under a secret key
 * 322 ns in the same pieces, SipHash-128 164 ns in one: a few tenths of
 * a microsecond of a retry's 24, not worth an argument resting on a
 * key; kept).  A stored fingerprint was made from a line that the full
 * parse accepted and answered; a line with the same fingerprint holds
 * the same members, byte for byte and in the same order, so the full
 * parse would read the same request, and the same digest, from it.
 * What is not fingerprinted must therefore be checked here as strictly
 * as jansson would: the punctuation and whitespace between members
 * (JSON's own), and the id, which is accepted only in a form whose
 * bytes jansson would echo unchanged (null, true, false, an integer of
 * at most 18 digits, a string of printable ASCII without escapes).
 * The op's required members must be there (write_task's task,
 * effect_begin's effect_kind and request), and the submission id and
 * effect kind plain strings (printable ASCII, no escapes), so that their
 * bytes are the key the table holds.
 * "meta" and "workspace_id" are never on the fast path: meta is not
 * fingerprinted (SPEC.md keeps it out of the digest) but would need a
 * full check, and workspace_id belongs to fcop-create-task-v1, whose
 * answer depends on the workspace.  Anything else, including reordered
 * keys, fails the match and takes the full parse: the fast path can
 * only be slower to say no, never answer something the full path would
 * not.  The value skipper delimits values exactly as JSON does; whether
 * a fingerprinted value is valid JSON needs no check (it equals one
 * that was).
 *
 * fastscan_member finds a top-level member's value in a line jansson
 * accepted, as it stands (libidem's effect calls read their answers
 * with replyscan.c instead, which checks the line too).
 * fastscan_compact_member, over it, serves the broker's full path
 * (issue #33): in a line
 * jansson accepted, a top-level member's value whose bytes are already
 * jansson's compact dump of it (effect_complete's result, kept as that
 * dump) is taken as it stands instead of dumped again.  Only the forms
 * whose dump is certain to repeat them are: no whitespace, strings
 * without escapes (bytes from 0x20 up: jansson checked the UTF-8, and
 * writes it back unescaped), integers of at most 18 digits without
 * "-0", literals, and the punctuation; a real, an escape or a space
 * anywhere, and the dump decides.
 */
#include <string.h>

#include <sodium.h>

#include "fastscan.h"
#include "jsonbytes.h"

/* Deeper values fall back to the full parse (jansson allows 2048). */
#define FASTSCAN_MAX_DEPTH	64
/* An integer id echoed as sent: jansson reads up to 63 bits. */
#define FASTSCAN_MAX_ID_DIGITS	18

enum member {
	MEMBER_OP, MEMBER_ID, MEMBER_SUBMISSION_ID, MEMBER_DIGEST_SCHEMA,
	MEMBER_REQUEST_DIGEST, MEMBER_TASK, MEMBER_META, MEMBER_WORKSPACE_ID,
	MEMBER_EFFECT_KIND, MEMBER_REQUEST, MEMBER_LEASE_MS,
	MEMBER_COUNT
};
/*
 * The request members of the ops scanned (meta, workspace_id refused),
 * with their lengths: a key of another length is refused without a
 * compare (member_of runs for every key of every line).
 */
#define NAME(s)	{ s, sizeof s - 1 }
static const struct {
	const char	*text;
	size_t		 length;
} member_names[MEMBER_COUNT] = {
	NAME("op"), NAME("id"), NAME("client_submission_id"),
	NAME("digest_schema"), NAME("request_digest"), NAME("task"),
	NAME("meta"), NAME("workspace_id"), NAME("effect_kind"),
	NAME("request"), NAME("lease_ms")
};
#undef NAME
#define BIT(m)	(1u << (m))
#define SCANNED	(BIT(MEMBER_OP) | BIT(MEMBER_ID) |			\
	BIT(MEMBER_SUBMISSION_ID) | BIT(MEMBER_DIGEST_SCHEMA) |		\
	BIT(MEMBER_REQUEST_DIGEST) | BIT(MEMBER_TASK) |			\
	BIT(MEMBER_EFFECT_KIND) | BIT(MEMBER_REQUEST) | BIT(MEMBER_LEASE_MS))
/* Each member at most once: every one scanned has a place. */
_Static_assert(FASTSCAN_MAX_MEMBERS >= 9, "every member has a place");

/* Per op: the members it knows (but meta, workspace_id) and requires. */
static const struct {
	enum fastscan_op	 op;
	const char		*text;	/* the op member's value, quoted */
	unsigned		 allowed, required;
} ops[] = {
	{ FASTSCAN_WRITE_TASK, "\"write_task\"",
	    BIT(MEMBER_OP) | BIT(MEMBER_ID) | BIT(MEMBER_SUBMISSION_ID) |
	    BIT(MEMBER_DIGEST_SCHEMA) | BIT(MEMBER_REQUEST_DIGEST) |
	    BIT(MEMBER_TASK),
	    BIT(MEMBER_OP) | BIT(MEMBER_SUBMISSION_ID) | BIT(MEMBER_TASK) },
	{ FASTSCAN_EFFECT_BEGIN, "\"effect_begin\"",
	    BIT(MEMBER_OP) | BIT(MEMBER_ID) | BIT(MEMBER_SUBMISSION_ID) |
	    BIT(MEMBER_EFFECT_KIND) | BIT(MEMBER_REQUEST) |
	    BIT(MEMBER_DIGEST_SCHEMA) | BIT(MEMBER_REQUEST_DIGEST) |
	    BIT(MEMBER_LEASE_MS),
	    BIT(MEMBER_OP) | BIT(MEMBER_SUBMISSION_ID) |
	    BIT(MEMBER_EFFECT_KIND) | BIT(MEMBER_REQUEST) },
};

static int
is_hex(char c)
{
	return jsonbytes_is_digit(c) || (c >= 'a' && c <= 'f') ||
	    (c >= 'A' && c <= 'F');
}

/*
 * p just past the opening quote; returns just past the closing one.
 * Plain bytes are stepped over sixteen, then eight at a time
 * (jsonbytes.h): a request's strings are mostly long runs of them, and
 * a byte at a time was most of the scan's time (issue #33).  Any other
 * byte is judged alone, as before.
 */
static const char *
skip_string(const char *p, const char *end, int *escaped)
{
	unsigned char	c;
	int		i;

	while (p < end) {
		p = jsonbytes_skip_plain_words(p, end);
		if (p >= end)
			break;
		c = (unsigned char)*p++;
		if (c == '"')
			return p;
		if (c < 0x20)
			return NULL;
		if (c != '\\')
			continue;
		if (escaped != NULL)
			*escaped = 1;
		if (p >= end)
			return NULL;
		c = (unsigned char)*p++;
		if (c == 'u') {
			for (i = 0; i < 4; i++, p++) {
				if (p >= end || !is_hex(*p))
					return NULL;
			}
		} else if (c == '\0' || strchr("\"\\/bfnrt", c) == NULL)
			return NULL;
	}
	return NULL;
}

static const char *
skip_number(const char *p, const char *end)
{
	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (p >= end || *p < '1' || *p > '9' ||
	    (p = jsonbytes_skip_digits(p, end)) == NULL)
		return NULL;
	if (p < end && *p == '.' &&
	    (p = jsonbytes_skip_digits(p + 1, end)) == NULL)
		return NULL;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if ((p = jsonbytes_skip_digits(p, end)) == NULL)
			return NULL;
	}
	return p;
}

static const char *
skip_literal(const char *p, const char *end, const char *word)
{
	size_t	n = strlen(word);

	if ((size_t)(end - p) < n || memcmp(p, word, n) != 0)
		return NULL;
	return p + n;
}

static const char *
skip_value(const char *p, const char *end, int depth)
{
	char	close;
	int	object;

	if (p >= end)
		return NULL;
	switch (*p) {
	case '"':
		return skip_string(p + 1, end, NULL);
	case 't':
		return skip_literal(p, end, "true");
	case 'f':
		return skip_literal(p, end, "false");
	case 'n':
		return skip_literal(p, end, "null");
	case '{':
	case '[':
		break;
	default:
		return skip_number(p, end);
	}
	if (depth >= FASTSCAN_MAX_DEPTH)
		return NULL;
	object = *p == '{';
	close = object ? '}' : ']';
	p = jsonbytes_skip_space(p + 1, end);
	if (p < end && *p == close)
		return p + 1;
	for (;;) {
		if (object) {
			if (p >= end || *p != '"' ||
			    (p = skip_string(p + 1, end, NULL)) == NULL)
				return NULL;
			p = jsonbytes_skip_space(p, end);
			if (p >= end || *p != ':')
				return NULL;
			p = jsonbytes_skip_space(p + 1, end);
		}
		if ((p = skip_value(p, end, depth + 1)) == NULL)
			return NULL;
		p = jsonbytes_skip_space(p, end);
		if (p < end && *p == ',') {
			p = jsonbytes_skip_space(p + 1, end);
			continue;
		}
		if (p < end && *p == close)
			return p + 1;
		return NULL;
	}
}

/* An id whose bytes jansson's compact output would repeat exactly. */
static int
plain_id(const char *v, size_t n)
{
	size_t	i, digits;

	if ((n == 4 && memcmp(v, "null", 4) == 0) ||
	    (n == 4 && memcmp(v, "true", 4) == 0) ||
	    (n == 5 && memcmp(v, "false", 5) == 0))
		return 1;
	if (v[0] == '"')
		return n >= 2 && v[n - 1] == '"' &&
		    jsonbytes_printable_plain(v + 1, n - 2, 0x20);
	i = v[0] == '-';
	digits = n - i;
	if (digits == 0 || digits > FASTSCAN_MAX_ID_DIGITS)
		return 0;
	/* "-0" reads as 0 and would be echoed as 0. */
	if (v[i] == '0' && (digits > 1 || i == 1))
		return 0;
	for (; i < n; i++) {
		if (!jsonbytes_is_digit(v[i]))
			return 0;
	}
	return 1;
}

/*
 * The submission id or effect kind as the table keys it: a string of
 * 1..max printable bytes without escapes.
 */
static int
plain_key_part(const char *v, size_t n, size_t max)
{
	return n >= 3 && n - 2 <= max && v[0] == '"' &&
	    jsonbytes_printable_plain(v + 1, n - 2, 0x21);
}

/*
 * The fingerprinted pieces gathered before they are hashed: one
 * BLAKE2b update for a line's members instead of two a member (a call
 * each, which copies into its own block buffer anyway: issue #33).
 * The hash of the sequence is the same however it is cut.
 */
struct fingerprint_pieces {
	crypto_generichash_state	 state;
	size_t				 fill;
	unsigned char			 buf[1024];
};

static void
pieces_flush(struct fingerprint_pieces *fp)
{
	if (fp->fill > 0)
		crypto_generichash_update(&fp->state, fp->buf, fp->fill);
	fp->fill = 0;
}

/* A member's text [p, p + n) and its newline. */
static void
pieces_add(struct fingerprint_pieces *fp, const char *p, size_t n)
{
	if (fp->fill + n + 1 > sizeof fp->buf) {
		pieces_flush(fp);
		if (n + 1 > sizeof fp->buf) {
			crypto_generichash_update(&fp->state,
			    (const unsigned char *)p, n);
			crypto_generichash_update(&fp->state,
			    (const unsigned char *)"\n", 1);
			return;
		}
	}
	memcpy(fp->buf + fp->fill, p, n);
	fp->buf[fp->fill + n] = '\n';
	fp->fill += n + 1;
}

static int
member_of(const char *key, size_t n)
{
	int	m;

	for (m = 0; m < MEMBER_COUNT; m++) {
		if (member_names[m].length == n &&
		    memcmp(member_names[m].text, key, n) == 0)
			return m;
	}
	return -1;
}

int
fastscan_line(const char *line, size_t length, struct fastscan *scan)
{
	struct fingerprint_pieces	 pieces;
	const char			*p, *end = line + length, *key, *v;
	const char			*ve;
	const char			*op = NULL;
	size_t				 op_length = 0, o;
	unsigned			 seen = 0;
	int				 m, escaped;

	memset(scan, 0, sizeof *scan);
	p = jsonbytes_skip_space(line, end);
	if (p >= end || *p != '{')
		return 0;
	p = jsonbytes_skip_space(p + 1, end);
	if (crypto_generichash_init(&pieces.state, NULL, 0,
	    sizeof scan->fingerprint) != 0)
		return 0;
	pieces.fill = 0;
	for (;;) {
		if (p >= end || *p != '"')
			return 0;
		key = p;
		escaped = 0;
		if ((p = skip_string(p + 1, end, &escaped)) == NULL || escaped)
			return 0;
		if ((m = member_of(key + 1, (size_t)(p - key - 2))) < 0 ||
		    (seen & BIT(m)) || !(SCANNED & BIT(m)))
			return 0;
		seen |= BIT(m);
		p = jsonbytes_skip_space(p, end);
		if (p >= end || *p != ':')
			return 0;
		v = jsonbytes_skip_space(p + 1, end);
		if ((ve = skip_value(v, end, 0)) == NULL)
			return 0;
		scan->members[scan->member_count].key = key + 1;
		scan->members[scan->member_count].key_length =
		    member_names[m].length;
		scan->members[scan->member_count].value = v;
		scan->members[scan->member_count++].value_length =
		    (size_t)(ve - v);
		if (m == MEMBER_ID) {
			if (!plain_id(v, (size_t)(ve - v)))
				return 0;
			scan->id = v;
			scan->id_length = (size_t)(ve - v);
		} else {
			if (m == MEMBER_OP) {
				op = v;
				op_length = (size_t)(ve - v);
			}
			if (m == MEMBER_SUBMISSION_ID) {
				if (!plain_key_part(v, (size_t)(ve - v),
				    IDEM_MAX_SUBMISSION_ID_BYTES))
					return 0;
				scan->key = v + 1;
				scan->key_length = (size_t)(ve - v) - 2;
			}
			if (m == MEMBER_EFFECT_KIND) {
				if (!plain_key_part(v, (size_t)(ve - v),
				    IDEM_MAX_EFFECT_KIND_BYTES))
					return 0;
				scan->kind = v + 1;
				scan->kind_length = (size_t)(ve - v) - 2;
			}
			pieces_add(&pieces, key, (size_t)(ve - key));
		}
		p = jsonbytes_skip_space(ve, end);
		if (p < end && *p == ',') {
			p = jsonbytes_skip_space(p + 1, end);
			continue;
		}
		if (p < end && *p == '}')
			break;
		return 0;
	}
	if (jsonbytes_skip_space(p + 1, end) != end || op == NULL)
		return 0;
	for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
		if (op_length == strlen(ops[o].text) &&
		    memcmp(op, ops[o].text, op_length) == 0)
			break;
	}
	if (o == sizeof ops / sizeof ops[0] || (seen & ~ops[o].allowed) ||
	    (seen & ops[o].required) != ops[o].required)
		return 0;
	scan->op = ops[o].op;
	pieces_flush(&pieces);
	if (crypto_generichash_final(&pieces.state, scan->fingerprint,
	    sizeof scan->fingerprint) != 0)
		return 0;
	scan->valid = 1;
	return 1;
}

/* [p, end) is a JSON value jansson's compact dump writes as it stands. */
static int
compact_as_dumped(const char *p, const char *end)
{
	const char	*q;

	while (p < end) {
		switch (*p) {
		case '"':
			/*
			 * A string without escapes: plain bytes eight at a
			 * time, as skip_string steps them (a complete's
			 * result is mostly strings); the byte that ends a
			 * run judged alone.
			 */
			for (p++;; p++) {
				p = jsonbytes_skip_plain_words(p, end);
				if (p >= end)
					return 0;
				if (*p == '"')
					break;
				if (*p == '\\' || (unsigned char)*p < 0x20)
					return 0;
			}
			p++;
			continue;
		case '{': case '}': case '[': case ']': case ',': case ':':
			p++;
			continue;
		case 't':
			p = skip_literal(p, end, "true");
			break;
		case 'f':
			p = skip_literal(p, end, "false");
			break;
		case 'n':
			p = skip_literal(p, end, "null");
			break;
		default:
			/* An integer: no fraction, exponent, "-0" or 19 digits. */
			q = *p == '-' ? p + 1 : p;
			if (q >= end || !jsonbytes_is_digit(*q) ||
			    (*q == '0' && q != p))
				return 0;
			if ((p = jsonbytes_skip_digits(q, end)) == NULL ||
			    p - q > FASTSCAN_MAX_ID_DIGITS ||
			    (*q == '0' && p - q > 1))
				return 0;
			continue;
		}
		if (p == NULL)
			return 0;
	}
	return 1;
}

int
fastscan_member(const char *line, size_t length, const char *name,
    const char **value, size_t *value_length)
{
	const char	*p, *end = line + length, *key, *ke, *v, *ve;
	size_t		 n = strlen(name);
	int		 escaped;

	p = jsonbytes_skip_space(line, end);
	if (p >= end || *p != '{')
		return 0;
	p = jsonbytes_skip_space(p + 1, end);
	while (p < end && *p == '"') {
		key = p + 1;
		escaped = 0;
		if ((ke = skip_string(key, end, &escaped)) == NULL)
			return 0;
		p = jsonbytes_skip_space(ke, end);
		if (p >= end || *p != ':')
			return 0;
		v = jsonbytes_skip_space(p + 1, end);
		if ((ve = skip_value(v, end, 0)) == NULL)
			return 0;
		/* jansson refused duplicates: an unescaped match is the one. */
		if (!escaped && (size_t)(ke - 1 - key) == n &&
		    memcmp(key, name, n) == 0) {
			*value = v;
			*value_length = (size_t)(ve - v);
			return 1;
		}
		p = jsonbytes_skip_space(ve, end);
		if (p >= end || *p != ',')
			return 0;
		p = jsonbytes_skip_space(p + 1, end);
	}
	return 0;
}

int
fastscan_compact_member(const char *line, size_t length, const char *name,
    const char **value, size_t *value_length)
{
	const char	*v;
	size_t		 n;

	if (!fastscan_member(line, length, name, &v, &n) ||
	    !compact_as_dumped(v, v + n))
		return 0;
	*value = v;
	*value_length = n;
	return 1;
}
