/* SPDX-License-Identifier: ISC */
/*
 * test_replyscan.c: the reply scanner (libclient/replyscan.c) against
 * jansson.  Every line here is judged by both, and the verdicts must
 * be equal (json_loadb with JSON_REJECT_DUPLICATES: invalid, an array,
 * an object), the members of an object jansson's, in order, each
 * value's bytes parsing to jansson's value: the broker's real effect
 * answers (tests/fuzz/corpus_replyscan, taken from test_effect_replies'
 * transcript), their mutations (every cut, bytes flipped, a member
 * doubled), and cases written for each check: escapes, UTF-8,
 * numbers, duplicates at any depth, depth and width past the scan's
 * own (jansson judges those), and never a byte read past a line's end.
 * The written cases also say the verdict, so removing a check fails
 * them.  What a checked line holds is read back: members, strings
 * unescaped, integers; the lists the check makes as it passes (the top
 * level, a top-level member's object) are the walk's, byte for byte;
 * a line it calls compact is jansson's compact dump of itself.
 */
#include <sys/mman.h>

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "integration/filter.h"
#include "jsonbytes.h"
#include "replyscan.h"

#define CORPUS		"tests/fuzz/corpus_replyscan"
#define CORPUS_LINES	60	/* at least */
#define LINE_BYTES	8192

#define INVALID	REPLYSCAN_INVALID
#define ARRAY	REPLYSCAN_NOT_OBJECT
#define OBJECT	REPLYSCAN_OBJECT

static enum replyscan_verdict
jansson_verdict(const char *p, size_t n)
{
	json_t			*j = json_loadb(p, n, JSON_REJECT_DUPLICATES,
				    NULL);
	enum replyscan_verdict	 v;

	v = j == NULL ? REPLYSCAN_INVALID : json_is_object(j) ?
	    REPLYSCAN_OBJECT : REPLYSCAN_NOT_OBJECT;
	json_decref(j);
	return v;
}

/* top's members are jansson's, in order, each value parsing to its. */
static void
members_are_janssons(const char *p, size_t n,
    const struct replyscan_object *top)
{
	struct replyscan_member	 m;
	const char		*key;
	json_t			*j, *value, *alone;
	size_t			 i = 0;

	assert_non_null(j = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL));
	if (!top->overflow)
		assert_int_equal(top->count, json_object_size(j));
	json_object_foreach(j, key, value) {
		assert_true(replyscan_find(top, key, &m));
		if (i < top->count && !top->members[i].key_escaped) {
			assert_int_equal(top->members[i].key_length,
			    strlen(key));
			assert_memory_equal(top->members[i].key, key,
			    strlen(key));
		}
		alone = json_loadb(m.value, m.value_length, JSON_DECODE_ANY,
		    NULL);
		assert_non_null(alone);
		assert_true(json_equal(alone, value));
		json_decref(alone);
		i++;
	}
	assert_false(replyscan_find(top, "no such member", &m));
	json_decref(j);
}

/*
 * The list the check made of top's members as it passed them is the
 * one a walk of the object's checked bytes makes (replyscan_members),
 * to the byte: the same text, members, keys and values.
 */
static void
listed_as_walked(const struct replyscan_object *top)
{
	struct replyscan_object	walked;
	size_t			i;

	assert_true(replyscan_members(top->text, top->length, &walked));
	assert_int_equal(top->text[top->length - 1], '}');
	assert_int_equal(top->count, walked.count);
	assert_int_equal(top->overflow, walked.overflow);
	for (i = 0; i < top->count; i++) {
		assert_ptr_equal(top->members[i].key, walked.members[i].key);
		assert_int_equal(top->members[i].key_length,
		    walked.members[i].key_length);
		assert_int_equal(top->members[i].key_escaped,
		    walked.members[i].key_escaped);
		assert_ptr_equal(top->members[i].value,
		    walked.members[i].value);
		assert_int_equal(top->members[i].value_length,
		    walked.members[i].value_length);
	}
}

/*
 * For each plain key of top's (the line at p, checked): the line
 * checked again with that member wanted as inner lists the same top,
 * and lists the member's object as a walk of its bytes does, or says
 * it has none when the value is not an object.
 */
static void
inner_listed_as_walked(const char *p, size_t n,
    const struct replyscan_object *top)
{
	struct replyscan_object	 again, inner, walked;
	const struct replyscan_member *m;
	char			 name[64];
	size_t			 i;

	for (i = 0; i < top->count; i++) {
		m = &top->members[i];
		if (m->key_escaped || m->key_length >= sizeof name)
			continue;
		memcpy(name, m->key, m->key_length);
		name[m->key_length] = '\0';
		assert_int_equal(replyscan_line_inner(p, n, &again, name,
		    &inner), OBJECT);
		assert_int_equal(again.count, top->count);
		assert_ptr_equal(again.members[i].value, m->value);
		if (!replyscan_members(m->value, m->value_length, &walked)) {
			assert_null(inner.text);
			assert_int_equal(inner.count, 0);
			continue;
		}
		assert_ptr_equal(inner.text, m->value);
		assert_int_equal(inner.length, m->value_length);
		listed_as_walked(&inner);
	}
	assert_int_equal(replyscan_line_inner(p, n, &again, "no such member",
	    &inner), OBJECT);
	assert_null(inner.text);
}

/*
 * A line the check calls compact is jansson's compact dump of itself,
 * byte for byte (libidem sends a caller's JSON text so, unparsed).
 */
static void
compact_as_dumped(const char *p, size_t n, const struct replyscan_object *top)
{
	json_t	*j;
	char	*dump;

	if (!top->compact)
		return;
	assert_non_null(j = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL));
	assert_non_null(dump = json_dumps(j, JSON_COMPACT));
	if (strlen(dump) != n || memcmp(dump, p, n) != 0)
		print_error("compact, but dumped otherwise: %.*s\n",
		    (int)(n > 300 ? 300 : n), p);
	assert_int_equal(strlen(dump), n);
	assert_memory_equal(dump, p, n);
	free(dump);
	json_decref(j);
}

/*
 * The scanner's verdict on the n bytes at p, copied into a buffer of
 * their own (ASan sees any read past them), which must be jansson's.
 */
static enum replyscan_verdict
judged(const char *p, size_t n, int *by_jansson)
{
	struct replyscan_object	 top;
	enum replyscan_verdict	 v, want;
	char			*copy;

	assert_non_null(copy = malloc(n > 0 ? n : 1));
	memcpy(copy, p, n);
	v = replyscan_line(copy, n, &top);
	want = jansson_verdict(copy, n);
	if (v != want)
		print_error("scanner %d, jansson %d: %.*s\n", (int)v,
		    (int)want, (int)(n > 300 ? 300 : n), p);
	assert_int_equal(v, want);
	if (v != REPLYSCAN_INVALID)
		compact_as_dumped(copy, n, &top);
	if (v == REPLYSCAN_OBJECT) {
		members_are_janssons(copy, n, &top);
		listed_as_walked(&top);
		inner_listed_as_walked(copy, n, &top);
	}
	if (by_jansson != NULL)
		*by_jansson = v == REPLYSCAN_OBJECT && top.by_jansson;
	free(copy);
	return v;
}

static enum replyscan_verdict
judged_text(const char *text)
{
	return judged(text, strlen(text), NULL);
}

/* The corpus's lines, each malloc'd; their count. */
static size_t
corpus(char **lines, size_t max)
{
	const char	*srcdir = getenv("IDEM_SRCDIR");
	char		 path[4096];
	struct dirent	*d;
	DIR		*dir;
	FILE		*f;
	size_t		 count = 0, n;

	snprintf(path, sizeof path, "%s/" CORPUS, srcdir != NULL ? srcdir :
	    ".");
	if ((dir = opendir(path)) == NULL)
		fail_msg("%s: cannot open it (IDEM_SRCDIR?)", path);
	while ((d = readdir(dir)) != NULL && count < max) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/" CORPUS "/%s",
		    srcdir != NULL ? srcdir : ".", d->d_name);
		assert_non_null(f = fopen(path, "r"));
		assert_non_null(lines[count] = calloc(1, LINE_BYTES + 1));
		n = fread(lines[count], 1, LINE_BYTES, f);
		assert_true(n > 0 && n < LINE_BYTES);
		fclose(f);
		count++;
	}
	closedir(dir);
	return count;
}

static void
corpus_free(char **lines, size_t count)
{
	while (count > 0)
		free(lines[--count]);
}

/* Every answer the broker gave test_effect_replies: objects, scanned. */
static void
brokers_answers_judged_as_jansson(void **state)
{
	char	*lines[128];
	size_t	 count, i, alone = 0;
	int	 by_jansson;

	(void)state;
	count = corpus(lines, 128);
	assert_true(count >= CORPUS_LINES);
	for (i = 0; i < count; i++) {
		assert_int_equal(judged(lines[i], strlen(lines[i]),
		    &by_jansson), OBJECT);
		alone += !by_jansson;
	}
	/* Reals and long integers too are judged by the scan. */
	assert_int_equal(alone, count);
	corpus_free(lines, count);
}

/*
 * Each answer cut at about 400 places (each byte of one under 400),
 * bytes at about 150 places replaced by a few that matter to JSON or
 * dropped, a member doubled: both verdicts, and both kinds seen.
 */
static void
mutations_judged_as_jansson(void **state)
{
	static const char	 bytes[] = { '\0', '"', '\\', '}', ',', ' ',
	    '0', 'x', (char)0x80, (char)0xc3, (char)0xff, '\n', '{', '[' };
	char			*lines[128], *m;
	size_t			 count, i, n, k, b, step, first;
	size_t			 seen[2] = { 0, 0 };

	(void)state;
	count = corpus(lines, 128);
	for (i = 0; i < count; i++) {
		n = strlen(lines[i]);
		assert_non_null(m = malloc(2 * n + 2));
		/* About 400 cuts and 150 places a line. */
		step = n / 400 + 1;
		for (k = 0; k < n; k += step)
			seen[judged(lines[i], k, NULL) == OBJECT]++;
		for (k = 0; k < n; k += 1 + k % 5 + n / 150) {
			for (b = 0; b < sizeof bytes; b++) {
				memcpy(m, lines[i], n);
				m[k] = bytes[b];
				seen[judged(m, n, NULL) == OBJECT]++;
			}
			/* The byte dropped. */
			memcpy(m, lines[i], k);
			memcpy(m + k, lines[i] + k + 1, n - k - 1);
			seen[judged(m, n - 1, NULL) == OBJECT]++;
		}
		/* The first member doubled: a duplicate key. */
		first = strcspn(lines[i], ",");
		assert_true(first < n);
		memcpy(m, lines[i], first + 1);
		memcpy(m + first + 1, lines[i] + 1, n - 1);
		assert_int_equal(judged(m, first + n, NULL), INVALID);
		free(m);
	}
	assert_true(seen[0] > 0 && seen[1] > 0);
	corpus_free(lines, count);
}

/* A string body as a value and as a key: verdict (both the same). */
static void
string_is(const char *body, enum replyscan_verdict want)
{
	char	line[512];

	snprintf(line, sizeof line, "{\"k\":\"%s\",\"n\":1}", body);
	assert_int_equal(judged_text(line), want);
	snprintf(line, sizeof line, "[{\"%s\":[\"%s\"]}]", body, body);
	assert_int_equal(judged_text(line), want == OBJECT ? ARRAY : want);
}

static void
strings_judged_as_jansson(void **state)
{
	(void)state;
	string_is("plain", OBJECT);
	string_is("", OBJECT);
	string_is("\\\" \\\\ \\/ \\b \\f \\n \\r \\t", OBJECT);
	string_is("\\u00e9\\u20AC\\uD83D\\uDE00", OBJECT);
	string_is("\\x", INVALID);
	string_is("\\", INVALID);
	string_is("\\u12G4", INVALID);
	string_is("\\u123", INVALID);
	string_is("\\u0000", INVALID);		/* no JSON_ALLOW_NUL */
	string_is("a\\u0000b", INVALID);
	string_is("\\uD83D", INVALID);		/* a lone high surrogate */
	string_is("\\uD83Dx", INVALID);
	string_is("\\uD83D\\u0041", INVALID);	/* not a low one after */
	string_is("\\uD83D\\n", INVALID);
	string_is("\\uDE00", INVALID);		/* a lone low surrogate */
	string_is("tab\there", INVALID);	/* a control byte */
	string_is("\x1f", INVALID);
	string_is("\x7f", OBJECT);
	string_is("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", OBJECT);
	string_is("\xf4\x8f\xbf\xbf", OBJECT);	/* U+10FFFF */
	string_is("\xc0\x80", INVALID);		/* overlong */
	string_is("\xc1\xbf", INVALID);
	string_is("\xe0\x9f\xbf", INVALID);
	string_is("\xf0\x8f\xbf\xbf", INVALID);
	string_is("\xed\xa0\x80", INVALID);	/* a surrogate in UTF-8 */
	string_is("\xf4\x90\x80\x80", INVALID);	/* past U+10FFFF */
	string_is("\xf5\x80\x80\x80", INVALID);
	string_is("\x80", INVALID);		/* a lone continuation */
	string_is("\xc3", INVALID);		/* a sequence cut */
	string_is("\xe2\x82", INVALID);
	string_is("\xc3\x28", INVALID);
	string_is("\xff", INVALID);
	/* Runs longer than a word, a stop at every offset. */
	string_is("0123456789abcdef0123456789abcdef\xc3\xa9", OBJECT);
	string_is("0123456789abcdef012345\x01", INVALID);
	string_is("0123456789abcde\\q0123456789", INVALID);
}

static void
numbers_judged_as_jansson(void **state)
{
	static const struct {
		const char		*text;
		enum replyscan_verdict	 want;
	} cases[] = {
		{ "0", ARRAY }, { "-0", ARRAY }, { "12", ARRAY },
		{ "-12", ARRAY }, { "1.5", ARRAY }, { "-0.0e-0", ARRAY },
		{ "1E+2", ARRAY }, { "1e-400", ARRAY },
		{ "123456789012345678", ARRAY },
		{ "9223372036854775807", ARRAY },
		{ "-9223372036854775808", ARRAY },
		{ "9223372036854775808", INVALID },	/* past int64 */
		{ "-9223372036854775809", INVALID },
		{ "1e400", INVALID },			/* past DBL_MAX */
		{ "-1e400", INVALID },
		{ "1.7976931348623157e308", ARRAY }, { "1.8e308", INVALID },
		{ "-1.8e308", INVALID }, { "4.9e-324", ARRAY },
		{ "2e-324", ARRAY },			/* underflow to 0 */
		{ "1e-99999999999999999999", ARRAY },
		{ "0.0000000000000000000000000000000000000000000000000000000000"
		    "00000000000000001", ARRAY },	/* past 64 bytes */
		{ "1000000000000000000000000000000000000000000000000000000000"
		    "00000000000000", INVALID },	/* past int64, 72 bytes */
		{ "-1000000000000000000000", INVALID },
		{ "100000000000000000000e-10", ARRAY },
		{ "01", INVALID }, { "-01", INVALID }, { "1.", INVALID },
		{ ".5", INVALID }, { "1e", INVALID }, { "1e+", INVALID },
		{ "-", INVALID }, { "+1", INVALID }, { "0x1", INVALID },
		{ "1 2", INVALID }, { "Infinity", INVALID },
		{ "NaN", INVALID }, { "truex", INVALID }, { "nul", INVALID },
		{ "true", ARRAY }, { "false", ARRAY }, { "null", ARRAY },
	};
	char	line[160];
	size_t	i;
	int	by_jansson;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(line, sizeof line, "[%s]", cases[i].text);
		assert_int_equal(judged_text(line), cases[i].want);
		snprintf(line, sizeof line, "{\"a\":%s}", cases[i].text);
		assert_int_equal(judged(line, strlen(line), &by_jansson),
		    cases[i].want == ARRAY ? OBJECT : INVALID);
		/* Only a token past 64 bytes is jansson's to read. */
		if (strlen(cases[i].text) <= 64)
			assert_false(by_jansson);
	}
}

static void
structure_judged_as_jansson(void **state)
{
	static const struct {
		const char		*text;
		enum replyscan_verdict	 want;
	} cases[] = {
		{ "{}", OBJECT }, { " \t\r\n{ } \n", OBJECT },
		{ "[]", ARRAY }, { "[1,[2,{}],{\"a\":[]}]", ARRAY },
		{ "", INVALID }, { " ", INVALID }, { "1", INVALID },
		/* A scalar at the top: jansson without JSON_DECODE_ANY. */
		{ "\"s\"", INVALID }, { "null", INVALID },
		{ "{", INVALID }, { "{\"a\"", INVALID }, { "{\"a\":", INVALID },
		{ "{\"a\":1", INVALID }, { "{\"a\":1,}", INVALID },
		{ "[1,]", INVALID }, { "[,1]", INVALID }, { "{,}", INVALID },
		{ "{\"a\" 1}", INVALID }, { "{\"a\":1 \"b\":2}", INVALID },
		{ "{a:1}", INVALID }, { "{'a':1}", INVALID },
		{ "{\"a\":1}}", INVALID }, { "{\"a\":1} x", INVALID },
		{ "{\"a\":1}{}", INVALID }, { "{1:2}", INVALID },
		{ "[1}", INVALID }, { "{\"a\":1]", INVALID },
		{ "\xef\xbb\xbf{}", INVALID },	/* a byte-order mark */
		/* Duplicates, compared unescaped, at any depth. */
		{ "{\"a\":1,\"a\":2}", INVALID },
		{ "{\"a\":1,\"b\":2,\"a\":3}", INVALID },
		{ "{\"a\":{\"b\":1,\"b\":2}}", INVALID },
		{ "[{\"x\":1},{\"x\":1,\"x\":1}]", INVALID },
		{ "{\"a\":1,\"\\u0061\":2}", INVALID },
		{ "{\"\\u0061\":1,\"a\":2}", INVALID },
		{ "{\"k\\u00e9\":1,\"k\xc3\xa9\":2}", INVALID },
		{ "{\"\\n\":1,\"\\u000a\":2}", INVALID },
		{ "{\"a\":1,\"ab\":2,\"b\":3,\"\\u0062a\":4}", OBJECT },
		{ "{\"a\":{\"a\":{\"a\":1}}}", OBJECT },
	};
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		assert_int_equal(judged_text(cases[i].text), cases[i].want);
}

/* jansson skips one NUL after a number or a literal, and no other. */
static void
nul_after_a_scalar_as_jansson(void **state)
{
	static const struct {
		const char		*text;
		size_t			 length;
		enum replyscan_verdict	 want;
	} cases[] = {
#define NUL_CASE(text, want)	{ text, sizeof text - 1, want }
		NUL_CASE("[1\0]", ARRAY),
		NUL_CASE("[-0.5e3\0,true\0]", ARRAY),
		NUL_CASE("{\"a\":null\0,\"b\":2}", OBJECT),
		NUL_CASE("[1\0\0]", INVALID), NUL_CASE("[1 \0]", INVALID),
		NUL_CASE("[\"s\"\0]", INVALID), NUL_CASE("[[]\0]", INVALID),
		NUL_CASE("[\0]", INVALID), NUL_CASE("{\"a\":1}\0", INVALID),
		NUL_CASE("[1\0", INVALID),
#undef NUL_CASE
	};
	struct replyscan_object	 top;
	struct replyscan_member	 m;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		assert_int_equal(judged(cases[i].text, cases[i].length, NULL),
		    cases[i].want);
	/* The NUL is no part of the value, and the next member is found. */
	assert_int_equal(replyscan_line(cases[2].text, cases[2].length, &top),
	    OBJECT);
	assert_int_equal(top.count, 2);
	assert_true(replyscan_find(&top, "a", &m));
	assert_int_equal(m.value_length, 4);
}

/* depth arrays around {"a":1}, and objects of width members. */
static char *
nested(int depth, size_t width, int duplicate)
{
	char	*s, *p;
	size_t	 i;
	int	 d;

	assert_non_null(s = malloc((size_t)depth * 2 + width * 16 + 64));
	p = s;
	for (d = 0; d < depth; d++)
		*p++ = '[';
	*p++ = '{';
	for (i = 0; i < width; i++)
		p += sprintf(p, "%s\"m%zu\":%zu", i > 0 ? "," : "",
		    duplicate && i == width - 1 ? (size_t)0 : i, i);
	*p++ = '}';
	for (d = 0; d < depth; d++)
		*p++ = ']';
	*p = '\0';
	return s;
}

/*
 * Past the scan's depth jansson judges; wide objects' duplicates are
 * found by sorting, long escaped keys compared unescaped: the same
 * verdicts.
 */
static void
deep_and_wide_judged_as_jansson(void **state)
{
	static const struct {
		int			 depth;
		size_t			 width;
		int			 duplicate;
		enum replyscan_verdict	 want;
	} cases[] = {
		{ 14, 1, 0, ARRAY }, { 15, 1, 0, ARRAY }, { 16, 1, 0, ARRAY },
		{ 2046, 1, 0, ARRAY }, { 2047, 1, 0, INVALID },
		{ 0, 32, 0, OBJECT }, { 0, 32, 1, INVALID },
		{ 0, 33, 0, OBJECT }, { 0, 40, 1, INVALID },
		{ 3, 100, 0, ARRAY }, { 3, 100, 1, INVALID },
	};
	struct replyscan_object	 top;
	struct replyscan_member	 m;
	size_t			 i, n;
	char			*s;
	int			 by_jansson;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		s = nested(cases[i].depth, cases[i].width,
		    cases[i].duplicate);
		assert_int_equal(judged_text(s), cases[i].want);
		free(s);
	}
	/* Wide objects (and a duplicate among 1,000 keys) by the scan. */
	for (i = 33; i <= 1000; i += 967) {
		s = nested(0, i, 0);
		assert_int_equal(judged(s, strlen(s), &by_jansson), OBJECT);
		assert_false(by_jansson);
		free(s);
		s = nested(0, i, 1);
		assert_int_equal(judged_text(s), INVALID);
		free(s);
	}
	/* An escaped key past the first 32 equal to a plain one, or not. */
	for (i = 0; i < 2; i++) {
		s = nested(0, 40, 0);
		n = strlen(s) - 1;
		snprintf(s + n, 64, ",\"\\u006d%s\":0}", i ? "3" : "40");
		assert_int_equal(judged_text(s), i ? INVALID : OBJECT);
		free(s);
	}
	/* A wide object's members past the list are found by a walk. */
	s = nested(0, 40, 0);
	assert_int_equal(replyscan_line(s, strlen(s), &top), OBJECT);
	assert_true(top.overflow && !top.by_jansson);
	assert_int_equal(top.count, REPLYSCAN_MAX_MEMBERS);
	assert_true(replyscan_find(&top, "m39", &m));
	assert_int_equal(m.value_length, 2);
	assert_memory_equal(m.value, "39", 2);
	free(s);
	/* Long escaped keys, compared unescaped by the scan. */
	assert_non_null(s = malloc(2048));
	snprintf(s, 2048, "{\"%0300d\\u0061\":1,\"%0300da\":2}", 0, 0);
	assert_int_equal(judged_text(s), INVALID);
	snprintf(s, 2048, "{\"%0300d\\u0061\":1,\"%0300db\":2}", 0, 0);
	assert_int_equal(judged(s, strlen(s), &by_jansson), OBJECT);
	assert_false(by_jansson);
	free(s);
}

/* Cuts of an answer placed against a PROT_NONE page: no read past. */
static void
lines_end_at_guard_page(void **state)
{
	struct replyscan_object	 top;
	char			*lines[128], *page;
	size_t			 count, n, k, i;
	long			 pagesize = sysconf(_SC_PAGESIZE);

	(void)state;
	count = corpus(lines, 128);
	page = mmap(NULL, 2 * LINE_BYTES + (size_t)pagesize,
	    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(page != MAP_FAILED);
	assert_int_equal(mprotect(page + 2 * LINE_BYTES, (size_t)pagesize,
	    PROT_NONE), 0);
	/* Every corpus line, each cut at every length. */
	for (i = 0; i < count; i++) {
		n = strlen(lines[i]);
		assert_true(n <= 2 * LINE_BYTES);
		for (k = 0; k <= n; k++) {
			memcpy(page + 2 * LINE_BYTES - k, lines[i], k);
			assert_int_equal(replyscan_line(page + 2 * LINE_BYTES -
			    k, k, &top), jansson_verdict(lines[i], k));
		}
	}
	munmap(page, 2 * LINE_BYTES + (size_t)pagesize);
	corpus_free(lines, count);
}

/*
 * replyscan_line_inner lists only the top-level member named, only
 * when it is an object (not one nested deeper, nor one in an array),
 * compares its key unescaped, lists nothing for a line it refuses nor
 * without a name, and lists it by a walk when jansson judged the line.
 */
static void
inner_only_the_top_levels_object(void **state)
{
	static const struct {
		const char	*line;
		size_t		 count;	/* inner's members; 0: none listed */
	} cases[] = {
		{ "{\"a\":{\"receipt\":{\"x\":1}}}", 0 },
		{ "{\"receipt\":[{\"y\":2}],\"z\":{\"w\":3}}", 0 },
		{ "{\"receipt\":\"s\"}", 0 },
		{ "{\"receipt\":null}", 0 },
		{ "[{\"receipt\":{\"x\":1}}]", 0 },
		{ "{\"receipt\":{}}", 0 },
		{ "{\"r\\u0065ceipt\":{\"x\":1,\"y\":{\"z\":2}}}", 2 },
		{ "{\"a\":[{}],\"receipt\":{\"x\":{\"receipt\":1}},"
		    "\"b\":{\"c\":2}}", 1 },
		{ "{\"receipt\":{\"x\":{\"receipt\":{\"p\":1,\"q\":2}}}}", 1 },
		{ "{\"receipt\":{\"receipt\":{\"p\":1,\"q\":2},\"x\":1}}", 2 },
	};
	struct replyscan_object	 top, inner;
	struct replyscan_member	 m;
	char			*s, *p;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		replyscan_line_inner(cases[i].line, strlen(cases[i].line), &top,
		    "receipt", &inner);
		assert_int_equal(inner.count, cases[i].count);
		if (cases[i].count > 0) {
			assert_non_null(inner.text);
			assert_int_equal(inner.text[0], '{');
			assert_true(replyscan_find(&inner, "x", &m));
		}
	}
	/* The empty object is listed: there, with no members. */
	assert_int_equal(replyscan_line_inner(cases[5].line,
	    strlen(cases[5].line), &top, "receipt", &inner), OBJECT);
	assert_non_null(inner.text);
	assert_int_equal(inner.length, 2);
	/* A refused line lists nothing, in either object. */
	s = "{\"receipt\":{\"x\":1},\"q\":tru}";
	assert_int_equal(replyscan_line_inner(s, strlen(s), &top, "receipt",
	    &inner), INVALID);
	assert_null(inner.text);
	assert_int_equal(inner.count + top.count, 0);
	/* No name: inner is cleared, not left as the last call listed it. */
	assert_int_equal(replyscan_line_inner(cases[6].line,
	    strlen(cases[6].line), &top, "receipt", &inner), OBJECT);
	assert_int_equal(inner.count, 2);
	assert_int_equal(replyscan_line_inner(cases[6].line,
	    strlen(cases[6].line), &top, NULL, &inner), OBJECT);
	assert_null(inner.text);
	assert_int_equal(inner.count, 0);
	/*
	 * Deeper than the scan's own before the receipt: jansson judges,
	 * and a walk lists both.
	 */
	assert_non_null(s = malloc(256));
	p = s + sprintf(s, "{\"d\":");
	for (i = 0; i < 20; i++)
		*p++ = '[';
	for (i = 0; i < 20; i++)
		*p++ = ']';
	strcpy(p, ",\"receipt\":{\"x\":1,\"y\":2}}");
	assert_int_equal(replyscan_line_inner(s, strlen(s), &top, "receipt",
	    &inner), OBJECT);
	assert_true(top.by_jansson);
	assert_int_equal(top.count, 2);
	assert_int_equal(inner.count, 2);
	assert_true(replyscan_find(&inner, "y", &m));
	free(s);
}

/*
 * jsonbytes_first_marked finds the byte that stops a string's run in a
 * word, at each place in it, also where the byte after it is one the
 * word tests mark wrongly (the borrow of a match: '#' after '"', ']'
 * after a backslash, 0x20 after 0x1f is not; 0x01 after 0x00 is).
 * jsonbytes_skip_plain_words, fastscan's step, stops at the same byte
 * of the same word; a byte above 0x7f does not end its run (fastscan
 * takes it as it stands), so it steps over the whole word.
 */
static void
first_stop_found_in_word(void **state)
{
	static const char	 stops[][2] = {
		{ '"', '#' }, { '\\', ']' }, { '\x1f', '\x20' },
		{ '\x00', '\x01' }, { '\x80', 'a' }, { '\xc3', '\xa9' },
	};
	uint64_t		 v, mask;
	char			 word[8];
	size_t			 i, k;
	int			 ends_run;

	(void)state;
	for (i = 0; i < sizeof stops / sizeof stops[0]; i++) {
		for (k = 0; k < 8; k++) {
			memset(word, 'a', sizeof word);
			word[k] = stops[i][0];
			if (k + 1 < sizeof word)
				word[k + 1] = stops[i][1];
			memcpy(&v, word, sizeof v);
			mask = (jsonbytes_word_has(v, '"') |
			    jsonbytes_word_has(v, '\\') |
			    jsonbytes_word_below(v, 0x20) | v) &
			    JSONBYTES_HIGHS;
			assert_true(mask != 0);
			ends_run = (unsigned char)stops[i][0] < 0x80;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			assert_int_equal(jsonbytes_first_marked(mask), k);
			assert_ptr_equal(jsonbytes_skip_plain_words(word, word +
			    sizeof word), word + (ends_run ? k : sizeof word));
#else
			assert_int_equal(jsonbytes_first_marked(mask), 0);
			assert_ptr_equal(jsonbytes_skip_plain_words(word, word +
			    sizeof word), ends_run ? word : word + sizeof word);
#endif
		}
	}
}

/* Whether byte b ends a string's run (high: or is from 0x80 up). */
static int
stops_run(unsigned char b, int high)
{
	return b == '"' || b == '\\' || b < 0x20 || (high && b >= 0x80);
}

/*
 * jsonbytes_skip_run16 and jsonbytes_skip_plain_words against the byte
 * at a time: every byte value (the one that may stop the run) at every
 * offset of every length up to 40, the other bytes one of a few
 * fillers (plain, from 0x80 up, next to a stop's value), at every
 * alignment of the start.  A step of sixteen stops where the byte at a
 * time does, or fewer than sixteen bytes before the end; of eight
 * after it, fewer than eight.
 */
static void
runs_stepped_as_byte_at_a_time(void **state)
{
	static const unsigned char	 fillers[] = {
		'a', '#', ']', 0x20, 0x7f, 0x80, 0xc3, 0xff,
	};
	char				 buf[64];
	const char			*p, *q;
	size_t				 n, k, f, align, first, whole;
	unsigned			 b;
	int				 high;

	(void)state;
	for (f = 0; f < sizeof fillers; f++)
	for (align = 0; align < 16; align++)
	for (n = 0; n <= 40; n++)
	for (k = 0; k <= n; k++)
	for (b = 0; b < 256; b++) {
		p = buf + align;
		memset(buf, fillers[f], sizeof buf);
		if (k < n)
			buf[align + k] = (char)b;
		for (high = 0; high <= 1; high++) {
			for (first = 0; first < n &&
			    !stops_run((unsigned char)p[first], high); first++)
				;
			whole = n / 16 * 16;
#if defined(__SSE2__)
			q = jsonbytes_skip_run16(p, p + n, high);
			if (q != p + (first < whole ? first : whole))
				fail_msg("run16 filler %zu align %zu n %zu "
				    "k %zu byte %u high %d: %td", f, align, n,
				    k, b, high, q - p);
#endif
			if (high)
				continue;
			q = jsonbytes_skip_plain_words(p, p + n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			if (first >= whole && n - whole >= 8)
				whole += 8;
			if (q != p + (first < whole ? first : whole))
#else
			if (q > p + first || (q < p + first && p + n - q >= 8))
#endif
				fail_msg("words filler %zu align %zu n %zu "
				    "k %zu byte %u: %td", f, align, n, k, b,
				    q - p);
		}
	}
}

/*
 * jsonbytes_printable_plain (fastscan's ids and keys) against the byte
 * at a time: one byte of every value at every offset of every length
 * up to 24, among printable ones, from both lowest bytes.
 */
static void
printable_plain_as_byte_at_a_time(void **state)
{
	static const unsigned char	 lowests[] = { 0x20, 0x21 };
	char				 buf[32];
	size_t				 n, k, l, i;
	unsigned			 b;
	int				 want;

	(void)state;
	for (l = 0; l < sizeof lowests; l++)
	for (n = 0; n <= 24; n++)
	for (k = 0; k <= n; k++)
	for (b = 0; b < 256; b++) {
		memset(buf, '~', sizeof buf);
		buf[0] = '!';
		if (k < n)
			buf[k] = (char)b;
		want = 1;
		for (i = 0; i < n; i++) {
			if ((unsigned char)buf[i] < lowests[l] ||
			    (unsigned char)buf[i] > 0x7e || buf[i] == '"' ||
			    buf[i] == '\\')
				want = 0;
		}
		if (jsonbytes_printable_plain(buf, n, lowests[l]) != want)
			fail_msg("lowest %#x n %zu k %zu byte %u: not %d",
			    lowests[l], n, k, b, want);
	}
}

/*
 * The compact verdict: set for a line in jansson's compact form (the
 * judged lines hold it to jansson's dump), cleared by anything that
 * form would write otherwise, and for what jansson judged.
 */
static void
compact_only_as_jansson_writes(void **state)
{
	static const struct {
		const char	*text;
		size_t		 length;
		int		 compact;
	} cases[] = {
#define COMPACT_CASE(text, compact)	{ text, sizeof text - 1, compact }
		COMPACT_CASE("{}", 1), COMPACT_CASE("[]", 1),
		COMPACT_CASE("{\"a\":1,\"b\":[true,false,null,-7,0]}", 1),
		COMPACT_CASE("{\"s\":\"x y/z\xc3\xa9\x7f\"}", 1),
		COMPACT_CASE("[123456789012345678]", 1),
		COMPACT_CASE("[1234567890123456789]", 0),
		COMPACT_CASE("{\"a\": 1}", 0), COMPACT_CASE(" {}", 0),
		COMPACT_CASE("{} ", 0), COMPACT_CASE("{\"a\":1 }", 0),
		COMPACT_CASE("[1 ,2]", 0), COMPACT_CASE("[1,\t2]", 0),
		COMPACT_CASE("{\"a\" :1}", 0), COMPACT_CASE("{ \"a\":1}", 0),
		COMPACT_CASE("{\"e\":\"\\u00e9\"}", 0),
		COMPACT_CASE("{\"\\u0065\":1}", 0),
		COMPACT_CASE("[\"a\\/b\"]", 0), COMPACT_CASE("[1.5]", 0),
		COMPACT_CASE("[1e2]", 0), COMPACT_CASE("[-0]", 0),
		COMPACT_CASE("[0]", 1), COMPACT_CASE("[1\0]", 0),
#undef COMPACT_CASE
	};
	struct replyscan_object	 top;
	char			*s, *p;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_not_equal(replyscan_line(cases[i].text,
		    cases[i].length, &top), INVALID);
		if (top.compact != cases[i].compact)
			print_error("compact %d: %s\n", top.compact,
			    cases[i].text);
		assert_int_equal(top.compact, cases[i].compact);
		judged(cases[i].text, cases[i].length, NULL);
	}
	/* A refused line is not compact; nor one jansson judged (deep). */
	assert_int_equal(replyscan_line("[1,]", 4, &top), INVALID);
	assert_false(top.compact);
	assert_non_null(s = malloc(64));
	for (p = s, i = 0; i < 20; i++)
		*p++ = '[';
	for (i = 0; i < 20; i++)
		*p++ = ']';
	assert_int_equal(replyscan_line(s, 40, &top), ARRAY);
	assert_false(top.compact);
	free(s);
}

/* Members, strings and integers read from a checked line's bytes. */
static void
members_read_from_bytes(void **state)
{
	static const char	 line[] = " { \"ok\" : true , \"s\":"
	    "\"a\\\"b\\u00e9\\uD83D\\uDE00\\n\",\"i\":-42,\"big\":"
	    "9223372036854775807,\"r\":1.5,\"o\":{\"k\\u0065y\":[1,{}]},"
	    "\"plain\":\"xyz\"}";
	struct replyscan_object	 top, inner;
	struct replyscan_member	 m;
	int64_t			 i;
	char			 out[32];

	(void)state;
	assert_int_equal(replyscan_line(line, strlen(line), &top), OBJECT);
	assert_int_equal(top.count, 7);
	assert_true(replyscan_find(&top, "ok", &m));
	assert_int_equal(m.value_length, 4);
	assert_true(replyscan_find(&top, "s", &m));
	assert_int_equal(replyscan_string(m.value, m.value_length, out,
	    sizeof out), 10);
	assert_string_equal(out, "a\"b\xc3\xa9\xf0\x9f\x98\x80\n");
	/* Cut as snprintf cuts, the whole length said. */
	assert_int_equal(replyscan_string(m.value, m.value_length, out, 4),
	    10);
	assert_string_equal(out, "a\"b");
	assert_true(replyscan_find(&top, "plain", &m));
	assert_int_equal(replyscan_string(m.value, m.value_length, out, 3),
	    3);
	assert_string_equal(out, "xy");
	assert_true(replyscan_find(&top, "i", &m));
	assert_int_equal(replyscan_string(m.value, m.value_length, out,
	    sizeof out), -1);
	assert_int_equal(replyscan_integer(m.value, m.value_length, &i), 0);
	assert_int_equal(i, -42);
	assert_true(replyscan_find(&top, "big", &m));
	assert_int_equal(replyscan_integer(m.value, m.value_length, &i), 0);
	assert_true(i == INT64_MAX);
	assert_true(replyscan_find(&top, "r", &m));
	assert_int_equal(replyscan_integer(m.value, m.value_length, &i), -1);
	assert_true(replyscan_find(&top, "o", &m));
	assert_true(replyscan_members(m.value, m.value_length, &inner));
	assert_true(replyscan_find(&inner, "key", &m));	/* unescaped */
	assert_int_equal(m.value_length, 6);
	assert_memory_equal(m.value, "[1,{}]", 6);
	assert_false(replyscan_members(m.value, m.value_length, &inner));
}

/* jsonbytes_decimal (replies, fences, lease_ms): digits end where asked. */
static void
decimal_written_backwards(void **state)
{
	static const struct {
		uint64_t	 v;
		const char	*text;
	} cases[] = {
		{ 0, "0" }, { 7, "7" }, { 10, "10" }, { 4294967295u, "4294967295" },
		{ UINT64_MAX, "18446744073709551615" },
	};
	char	buf[32], *start;
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(buf, 'x', sizeof buf);
		start = jsonbytes_decimal(buf + sizeof buf, cases[i].v);
		assert_int_equal(buf + sizeof buf - start,
		    strlen(cases[i].text));
		assert_memory_equal(start, cases[i].text,
		    strlen(cases[i].text));
		/* Nothing before its first digit written. */
		if (start > buf)
			assert_int_equal(start[-1], 'x');
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(brokers_answers_judged_as_jansson),
		cmocka_unit_test(mutations_judged_as_jansson),
		cmocka_unit_test(strings_judged_as_jansson),
		cmocka_unit_test(numbers_judged_as_jansson),
		cmocka_unit_test(structure_judged_as_jansson),
		cmocka_unit_test(nul_after_a_scalar_as_jansson),
		cmocka_unit_test(deep_and_wide_judged_as_jansson),
		cmocka_unit_test(lines_end_at_guard_page),
		cmocka_unit_test(members_read_from_bytes),
		cmocka_unit_test(inner_only_the_top_levels_object),
		cmocka_unit_test(compact_only_as_jansson_writes),
		cmocka_unit_test(first_stop_found_in_word),
		cmocka_unit_test(runs_stepped_as_byte_at_a_time),
		cmocka_unit_test(printable_plain_as_byte_at_a_time),
		cmocka_unit_test(decimal_written_backwards),
	};

	return FILTER_RUN(tests);
}
