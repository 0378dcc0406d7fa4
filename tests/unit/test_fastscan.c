/* SPDX-License-Identifier: ISC */
/*
 * test_fastscan.c: the retry fast path's scanner (libclient/fastscan.c):
 * which lines it accepts (write_task and effect_begin), exactly which
 * bytes it fingerprints, and that every doubt is refused (left to the
 * full parse), strings judged alike at every offset of the scanner's
 * words, and never a byte read past a line's end (a guard page after
 * it); which members' bytes are taken as jansson's compact dump of
 * them (fastscan_compact_member); and a member's bytes as they stand,
 * whatever their form (fastscan_member).
 */
#include <sys/mman.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "integration/filter.h"
#include "fastscan.h"

#define OP	"\"op\":\"write_task\""
#define SUB	"\"client_submission_id\":\"sub-1\""
#define TASK	"\"task\":{\"sender\":\"PM\",\"recipient\":\"DEV\"," \
	"\"subject\":\"s\",\"body\":\"a\\\"b\\\\c\\u00e9\"}"

#define BEGIN	"\"op\":\"effect_begin\""
#define FXKIND	"\"effect_kind\":\"mail.send/v1\""
#define FXREQ	"\"request\":{\"to\":[\"a\",1,null]}"

static int
scan_of(const char *line, struct fastscan *scan)
{
	return fastscan_line(line, strlen(line), scan);
}

static void
fingerprint_of(const char *line, uint8_t out[IDEM_FAST_FINGERPRINT_BYTES])
{
	struct fastscan	scan;

	assert_int_equal(scan_of(line, &scan), 1);
	memcpy(out, scan.fingerprint, IDEM_FAST_FINGERPRINT_BYTES);
}

/* The fingerprint is BLAKE2b-256 of each member's text and a newline. */
static void
fingerprint_is_the_members_text(void **state)
{
	static const char	 line[] = "{" OP ",\"id\":7," SUB "," TASK "}";
	static const char	 hashed[] = OP "\n" SUB "\n" TASK "\n";
	uint8_t			 want[IDEM_FAST_FINGERPRINT_BYTES];
	struct fastscan		 scan;

	(void)state;
	assert_int_equal(crypto_generichash(want, sizeof want,
	    (const unsigned char *)hashed, strlen(hashed), NULL, 0), 0);
	assert_int_equal(scan_of(line, &scan), 1);
	assert_memory_equal(scan.fingerprint, want, sizeof want);
	assert_int_equal(scan.key_length, 5);
	assert_memory_equal(scan.key, "sub-1", 5);
	assert_int_equal(scan.id_length, 1);
	assert_memory_equal(scan.id, "7", 1);
	assert_int_equal(scan.member_count, 4);
}

/* Not the id, not the glue; but the order and the members' own bytes. */
static void
what_moves_the_fingerprint(void **state)
{
	uint8_t	a[IDEM_FAST_FINGERPRINT_BYTES], b[IDEM_FAST_FINGERPRINT_BYTES];

	(void)state;
	fingerprint_of("{" OP "," SUB "," TASK "}", a);
	fingerprint_of("{\"id\":\"x y\"," OP "," SUB "," TASK "}", b);
	assert_memory_equal(a, b, sizeof a);
	fingerprint_of(" {\t" OP " ,\r\n" SUB ",\"id\" : -3 ," TASK " } ", b);
	assert_memory_equal(a, b, sizeof a);
	fingerprint_of("{" SUB "," OP "," TASK "}", b);	/* reordered */
	assert_memory_not_equal(a, b, sizeof a);
	fingerprint_of("{\"op\": \"write_task\"," SUB "," TASK "}", b);
	assert_memory_not_equal(a, b, sizeof a);
	fingerprint_of("{" OP "," SUB "," TASK ","
	    "\"digest_schema\":\"write-task-v1\"}", b);
	assert_memory_not_equal(a, b, sizeof a);
	fingerprint_of("{" OP ",\"client_submission_id\":\"sub-2\"," TASK "}",
	    b);
	assert_memory_not_equal(a, b, sizeof a);
}

/* Ids whose bytes jansson would echo as they are. */
static void
plain_ids_accepted(void **state)
{
	static const char *const ids[] = {
		"null", "true", "false", "0", "-1", "123456789012345678",
		"\"\"", "\" !#$%&'()*+,-./:;<=>?@[]^_`{|}~\"", NULL
	};
	struct fastscan	 scan;
	char		 line[512];
	int		 i;

	(void)state;
	for (i = 0; ids[i] != NULL; i++) {
		snprintf(line, sizeof line, "{" OP ",\"id\":%s," SUB "," TASK
		    "}", ids[i]);
		assert_int_equal(scan_of(line, &scan), 1);
		assert_int_equal(scan.id_length, strlen(ids[i]));
		assert_memory_equal(scan.id, ids[i], scan.id_length);
	}
}

/* Everything the scanner cannot be sure of: 0, the full parse decides. */
static void
doubts_refused(void **state)
{
	static const char *const lines[] = {
		"",
		"[]",
		"{}",
		"{" OP "," SUB "," TASK "}x",
		"{" OP "," SUB "," TASK,
		"{" OP "," SUB "," TASK ",}",
		"{" OP "," SUB "}",					/* no task */
		"{" SUB "," TASK "}",					/* no op */
		"{\"op\":\"stats\"," SUB "," TASK "}",
		"{\"op\":\"write_tas\\u006b\"," SUB "," TASK "}",
		"{" OP "," TASK "}",					/* legacy */
		"{" OP ",\"client_submission_id\":null," TASK "}",
		"{" OP ",\"client_submission_id\":\"a\\u0041\"," TASK "}",
		"{" OP ",\"client_submission_id\":\"a b\"," TASK "}",
		"{" OP ",\"client_submission_id\":\"\"," TASK "}",
		"{" OP ",\"client_submission_id\":7," TASK "}",
		"{" OP "," SUB "," TASK ",\"meta\":{}}",
		"{" OP "," SUB "," TASK ",\"workspace_id\":\"w\"}",
		"{" OP "," SUB "," TASK ",\"extra\":1}",
		"{" OP "," SUB "," TASK ",\"t\\u0061sk\":1}",
		"{" OP "," SUB "," TASK "," TASK "}",			/* duplicate */
		"{" OP "," SUB "," TASK ",\"id\":1,\"id\":1}",
		"{" OP "," SUB "," TASK ",\"id\":-0}",
		"{" OP "," SUB "," TASK ",\"id\":01}",
		"{" OP "," SUB "," TASK ",\"id\":1.0}",
		"{" OP "," SUB "," TASK ",\"id\":1e2}",
		"{" OP "," SUB "," TASK ",\"id\":1234567890123456789}",
		"{" OP "," SUB "," TASK ",\"id\":\"\\u0041\"}",
		"{" OP "," SUB "," TASK ",\"id\":\"caf\xc3\xa9\"}",
		"{" OP "," SUB "," TASK ",\"id\":\"\x7f\"}",
		"{" OP "," SUB "," TASK ",\"id\":{}}",
		"{" OP "," SUB "," TASK ",\"id\":[1]}",
		"{" OP "," SUB "," TASK ",\"id\":tru}",
		"{" OP "," SUB ",\"task\":{\"a\":\"\x01\"}}",		/* control */
		"{" OP "," SUB ",\"task\":{\"a\":\"\\x\"}}",		/* escape */
		"{" OP "," SUB ",\"task\":{\"a\":\"\\u00g0\"}}",
		"{" OP "," SUB ",\"task\":{\"a\" \"b\"}}",
		"{" OP "," SUB ",\"task\":{\"a\":1,}}",
		"{" OP "," SUB ",\"task\":[1 2]}",
		"{" OP "," SUB ",\"task\":-}",
		"{" OP "," SUB ",\"task\":1.}",
		"{" OP "," SUB ",\"task\":1e}",
		"{" OP "," SUB ",\"task\":\"unterminated}",
		"\xef\xbb\xbf{" OP "," SUB "," TASK "}",		/* BOM */
		NULL
	};
	struct fastscan	scan;
	int		i;

	(void)state;
	for (i = 0; lines[i] != NULL; i++) {
		if (scan_of(lines[i], &scan) != 0)
			fail_msg("accepted: %s", lines[i]);
		assert_int_equal(scan.valid, 0);
	}
}

/* Deep values: the scanner's own limit, then the full parse. */
static void
depth_limited(void **state)
{
	char	line[1024];
	size_t	n;
	int	depth;

	(void)state;
	for (depth = 60; depth <= 70; depth += 10) {
		n = (size_t)snprintf(line, sizeof line, "{" OP "," SUB
		    ",\"task\":");
		memset(line + n, '[', (size_t)depth);
		memset(line + n + depth, ']', (size_t)depth);
		strcpy(line + n + 2 * depth, "}");
		assert_int_equal(fastscan_line(line, strlen(line),
		    &(struct fastscan){ 0 }), depth <= 64);
	}
}

/* A NUL byte is data, not the end (the line is a length). */
static void
nul_bytes_are_bytes(void **state)
{
	static const char	line[] = "{" OP "," SUB "," TASK "}\0junk";
	struct fastscan		scan;

	(void)state;
	assert_int_equal(fastscan_line(line, sizeof line - 1, &scan), 0);
	assert_int_equal(fastscan_line(line, strlen(line), &scan), 1);
}

/* effect_begin: its kind and id found, every member fingerprinted. */
static void
effect_begin_scanned(void **state)
{
	static const char	 line[] = "{" BEGIN ",\"id\":\"x\"," SUB ","
	    FXKIND "," FXREQ ",\"digest_schema\":\"generic-json-v1\","
	    "\"request_digest\":\"00\",\"lease_ms\":30000}";
	static const char	 hashed[] = BEGIN "\n" SUB "\n" FXKIND "\n"
	    FXREQ "\n\"digest_schema\":\"generic-json-v1\"\n"
	    "\"request_digest\":\"00\"\n\"lease_ms\":30000\n";
	uint8_t			 want[IDEM_FAST_FINGERPRINT_BYTES];
	uint8_t			 a[IDEM_FAST_FINGERPRINT_BYTES];
	struct fastscan		 scan;
	char			 kind[512];

	(void)state;
	assert_int_equal(crypto_generichash(want, sizeof want,
	    (const unsigned char *)hashed, strlen(hashed), NULL, 0), 0);
	assert_int_equal(scan_of(line, &scan), 1);
	assert_int_equal(scan.op, FASTSCAN_EFFECT_BEGIN);
	assert_memory_equal(scan.fingerprint, want, sizeof want);
	assert_int_equal(scan.member_count, 8);
	assert_int_equal(scan.key_length, 5);
	assert_memory_equal(scan.key, "sub-1", 5);
	assert_int_equal(scan.kind_length, 12);
	assert_memory_equal(scan.kind, "mail.send/v1", 12);
	assert_int_equal(scan.id_length, 3);
	/* The least: op, id, kind, request; kinds up to 128 bytes. */
	fingerprint_of("{" BEGIN "," SUB "," FXKIND "," FXREQ "}", a);
	assert_memory_not_equal(a, want, sizeof a);
	snprintf(kind, sizeof kind, "{" BEGIN ",\"effect_kind\":\"%0128d\","
	    SUB "," FXREQ "}", 0);
	assert_int_equal(scan_of(kind, &scan), 1);
	assert_int_equal(scan.kind_length, 128);
	snprintf(kind, sizeof kind, "{" BEGIN ",\"effect_kind\":\"%0129d\","
	    SUB "," FXREQ "}", 0);
	assert_int_equal(scan_of(kind, &scan), 0);
	/* write_task's kind of line has no kind. */
	assert_int_equal(scan_of("{" OP "," SUB "," TASK "}", &scan), 1);
	assert_int_equal(scan.op, FASTSCAN_WRITE_TASK);
	assert_null(scan.kind);
}

/* effect_begin's doubts, and members of one op in the other's line. */
static void
effect_begin_doubts_refused(void **state)
{
	static const char *const lines[] = {
		"{" BEGIN "," SUB "," FXKIND "}",		/* no request */
		"{" BEGIN "," SUB "," FXREQ "}",		/* no kind */
		"{" BEGIN "," FXKIND "," FXREQ "}",		/* no id */
		"{" BEGIN "," SUB "," FXKIND "," FXREQ ",\"meta\":{}}",
		"{" BEGIN "," SUB "," FXKIND "," FXREQ "," TASK "}",
		"{" BEGIN "," SUB "," FXKIND "," FXREQ ",\"fence\":\"1-0\"}",
		"{" BEGIN "," SUB ",\"effect_kind\":\"a\\u0041\"," FXREQ "}",
		"{" BEGIN "," SUB ",\"effect_kind\":\"a b\"," FXREQ "}",
		"{" BEGIN "," SUB ",\"effect_kind\":\"\"," FXREQ "}",
		"{" BEGIN "," SUB ",\"effect_kind\":1," FXREQ "}",
		"{" BEGIN "," SUB "," FXKIND "," FXKIND "," FXREQ "}",
		"{" OP "," SUB "," TASK "," FXKIND "}",
		"{" OP "," SUB "," TASK "," FXREQ "}",
		"{" OP "," SUB "," TASK ",\"lease_ms\":100}",
		"{\"op\":\"effect_complete\"," SUB "," FXKIND "," FXREQ "}",
		NULL
	};
	struct fastscan	scan;
	int		i;

	(void)state;
	for (i = 0; lines[i] != NULL; i++) {
		if (scan_of(lines[i], &scan) != 0)
			fail_msg("accepted: %s", lines[i]);
		assert_int_equal(scan.valid, 0);
	}
}

/*
 * The members are hashed as they are gathered (fastscan.c,
 * pieces_add): however long a member is beside the gathering buffer's
 * 1 KiB (shorter, filling it exactly, longer than it, after another
 * that nearly filled it), the fingerprint is still BLAKE2b of each
 * member's text and a newline.
 */
static void
fingerprint_of_long_members(void **state)
{
	static const size_t	 lengths[] = {
		1, 900, 990, 1000, 1001, 1010, 1023, 1024, 1025, 2047, 2048,
		5000,
	};
	char			*line, *hashed, *a, *b;
	uint8_t			 want[IDEM_FAST_FINGERPRINT_BYTES];
	struct fastscan		 scan;
	size_t			 i, j, size = 16384;

	(void)state;
	line = malloc(size);
	hashed = malloc(size);
	a = malloc(size);
	b = malloc(size);
	assert_non_null(line);
	assert_non_null(hashed);
	assert_non_null(a);
	assert_non_null(b);
	for (i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
		for (j = 0; j < sizeof lengths / sizeof lengths[0]; j++) {
			memset(a, 'a', lengths[i]);
			a[lengths[i]] = '\0';
			memset(b, 'b', lengths[j]);
			b[lengths[j]] = '\0';
			snprintf(line, size, "{" BEGIN "," SUB ",\"request\":"
			    "{\"s\":\"%s\"}," FXKIND ",\"digest_schema\":"
			    "\"%s\"}", a, b);
			snprintf(hashed, size, BEGIN "\n" SUB "\n\"request\":"
			    "{\"s\":\"%s\"}\n" FXKIND "\n\"digest_schema\":"
			    "\"%s\"\n", a, b);
			assert_int_equal(crypto_generichash(want, sizeof want,
			    (const unsigned char *)hashed, strlen(hashed),
			    NULL, 0), 0);
			assert_int_equal(scan_of(line, &scan), 1);
			assert_memory_equal(scan.fingerprint, want,
			    sizeof want);
		}
	}
	free(line);
	free(hashed);
	free(a);
	free(b);
}

/*
 * Strings are stepped over eight bytes at a time (fastscan.c,
 * jsonbytes_word_ends_run): a quote, a backslash or a control byte at
 * any offset of any word is seen all the same, and a byte from 0x80 up
 * or a DEL is not taken for one.  Each case at offsets 0 to 40 of a string.
 */
static void
strings_judged_at_every_offset(void **state)
{
	static const struct {
		const char	*x;
		int		 accepted;
	} cases[] = {
		{ "\x01", 0 }, { "\x1f", 0 }, { "\t", 0 }, { "\"", 0 },
		{ "\\z", 0 }, { "\\\"", 1 }, { "\\\\", 1 },
		{ "\\u00e9", 1 }, { "\\q", 0 }, { " ", 1 }, { "\x7f", 1 },
		{ "\xc3\xa9", 1 }, { "\xff", 1 }, { "~", 1 },
	};
	struct fastscan	 scan;
	uint8_t		 want[IDEM_FAST_FINGERPRINT_BYTES];
	char		 value[128], line[512], hashed[512];
	size_t		 c, k;
	int		 n;

	(void)state;
	for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		for (k = 0; k <= 40; k++) {
			n = snprintf(value, sizeof value, "\"request\":{\"s\":"
			    "\"%.*s%s%s\"}", (int)k,
			    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			    cases[c].x, "bbbbbbbbbbbbbbbbbbbb");
			assert_true(n > 0 && (size_t)n < sizeof value);
			snprintf(line, sizeof line, "{" BEGIN "," SUB ","
			    FXKIND ",%s}", value);
			if (scan_of(line, &scan) != cases[c].accepted)
				fail_msg("case %zu at %zu: %s", c, k, line);
			if (!cases[c].accepted)
				continue;
			/* And its end found where it is: the same bytes. */
			snprintf(hashed, sizeof hashed, BEGIN "\n" SUB "\n"
			    FXKIND "\n%s\n", value);
			assert_int_equal(crypto_generichash(want, sizeof want,
			    (const unsigned char *)hashed, strlen(hashed),
			    NULL, 0), 0);
			assert_memory_equal(scan.fingerprint, want,
			    sizeof want);
		}
	}
	/* An escape anywhere in a member's name: never that member. */
	for (k = 0; k < strlen("client_submission_id"); k++) {
		snprintf(line, sizeof line, "{" BEGIN ",\"%.*s\\u%04x%s\":"
		    "\"sub-1\"," FXKIND "," FXREQ "}", (int)k,
		    "client_submission_id", "client_submission_id"[k],
		    "client_submission_id" + k + 1);
		if (scan_of(line, &scan) != 0)
			fail_msg("accepted: %s", line);
	}
}

/*
 * A line at the very end of its buffer, a page no read may touch right
 * after it: the scanner's eight-byte steps (skip_string) load a word
 * only while eight bytes of the line remain, so no line makes it read a
 * byte past its end.  Strings of every length up to 24 ending 0 to 8
 * bytes before the end (the line cut inside the request object under 2,
 * whole from 2 on), and lines cut inside a string; any over-read faults
 * on the guard page, with or without ASan.  Each line is judged as the
 * same bytes are in an ordinary buffer.
 */
static void
lines_end_at_guard_page(void **state)
{
	static const char	 prefix[] = "{" BEGIN "," SUB "," FXKIND
	    ",\"request\":{\"s\":\"";
	struct fastscan		 scan, want;
	char			 line[256], *page, *at, *copy;
	const char		*v;
	size_t			 len, vlen, k, l;
	long			 pagesize = sysconf(_SC_PAGESIZE);
	int			 cut, rc;

	(void)state;
	assert_true(pagesize > 0 && (size_t)pagesize > sizeof line);
	page = mmap(NULL, 2 * (size_t)pagesize, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(page != MAP_FAILED);
	assert_int_equal(mprotect(page + pagesize, (size_t)pagesize,
	    PROT_NONE), 0);
	for (cut = 0; cut < 2; cut++) {
		for (l = 0; l <= 24; l++) {
			for (k = 0; k <= 8; k++) {
				if (cut && k > 0)
					break;
				len = (size_t)snprintf(line, sizeof line,
				    "%s%.*s", prefix, (int)l,
				    "aaaaaaaaaaaaaaaaaaaaaaaaa");
				if (!cut) {
					/* The string's quote, then k bytes. */
					line[len++] = '"';
					if (k >= 1)
						memset(line + len, ' ', k);
					if (k >= 1)
						line[len + k - 1] = '}';
					if (k >= 2)
						line[len] = '}';
					len += k;
				}
				at = page + pagesize - len;
				memcpy(at, line, len);
				rc = fastscan_line(at, len, &scan);
				assert_non_null(copy = malloc(len));
				memcpy(copy, line, len);
				assert_int_equal(fastscan_line(copy, len,
				    &want), rc);
				free(copy);
				if (!cut && k >= 2) {
					if (rc != 1)
						fail_msg("refused: %.*s",
						    (int)len, line);
					assert_memory_equal(scan.fingerprint,
					    want.fingerprint,
					    sizeof want.fingerprint);
					assert_int_equal(fastscan_member(at,
					    len, "request", &v, &vlen), 1);
					assert_ptr_equal(v + vlen,
					    at + len - k + 1);
				} else
					assert_int_equal(rc, 0);
			}
		}
	}
	assert_int_equal(munmap(page, 2 * (size_t)pagesize), 0);
}

/* name's value in line as scan takes it, equal to want (1), or 0. */
static int
scanned_as(int (*scan)(const char *, size_t, const char *, const char **,
    size_t *), const char *line, const char *name, const char *want)
{
	const char	*v;
	size_t		 n;

	if (!scan(line, strlen(line), name, &v, &n))
		return 0;
	assert_non_null(want);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(v, want, n);
	return 1;
}

/* name's value in line as it stands (1), or 0: dumped instead. */
static int
compact_of(const char *line, const char *name, const char *want)
{
	return scanned_as(fastscan_compact_member, line, name, want);
}

static void
compact_members(void **state)
{
	(void)state;
	assert_true(compact_of("{\"result\":{\"a\":[1,-2,true,false,null,"
	    "\"x/y\xc3\xa9\"]}}", "result", "{\"a\":[1,-2,true,false,null,"
	    "\"x/y\xc3\xa9\"]}"));
	/* Found after other members, whitespace around it kept out. */
	assert_true(compact_of(" { \"op\" : \"effect_complete\" , \"result\" :"
	    " [0,\"\"] , \"id\":1 } ", "result", "[0,\"\"]"));
	assert_true(compact_of("{\"result\":123456789012345678}", "result",
	    "123456789012345678"));
	assert_true(compact_of("{\"result\":{}}", "result", "{}"));
	/* Forms jansson would write otherwise: the dump decides. */
	assert_false(compact_of("{\"result\":[1, 2]}", "result", NULL));
	assert_false(compact_of("{\"result\":{\"a\" :1}}", "result", NULL));
	assert_false(compact_of("{\"result\":1.0}", "result", NULL));
	assert_false(compact_of("{\"result\":1e3}", "result", NULL));
	assert_false(compact_of("{\"result\":-0}", "result", NULL));
	assert_false(compact_of("{\"result\":[-0]}", "result", NULL));
	assert_false(compact_of("{\"result\":1234567890123456789}", "result",
	    NULL));
	assert_false(compact_of("{\"result\":\"a\\u0041\"}", "result", NULL));
	assert_false(compact_of("{\"result\":\"\\/\"}", "result", NULL));
	/* Not there, or only under an escaped name. */
	assert_false(compact_of("{\"outcome\":\"applied\"}", "result", NULL));
	assert_false(compact_of("{\"res\\u0075lt\":1}", "result", NULL));
	assert_false(compact_of("{\"results\":1}", "result", NULL));
	assert_false(compact_of("[\"result\",1]", "result", NULL));
}

/* name's value in line as it stands, whatever its form (1), or 0. */
static int
member_of(const char *line, const char *name, const char *want)
{
	return scanned_as(fastscan_member, line, name, want);
}

/*
 * fastscan_member: the value's bytes as they stand, escapes, reals and
 * inner spaces too; never a nested member's, never under an escaped
 * name.
 */
static void
members_as_they_stand(void **state)
{
	(void)state;
	assert_true(member_of("{\"ok\":true,\"receipt\":{\"result\":"
	    "{\"q\":\"\\\"\\u001F\\n\xc3\xa9\"},\"state\":\"committed\"}}",
	    "receipt", "{\"result\":{\"q\":\"\\\"\\u001F\\n\xc3\xa9\"},"
	    "\"state\":\"committed\"}"));
	assert_true(member_of("{\"result\":{\"q\":\"\\\"\\u001F\\n\xc3\xa9\"},"
	    "\"state\":\"committed\"}", "result",
	    "{\"q\":\"\\\"\\u001F\\n\xc3\xa9\"}"));
	assert_true(member_of("{ \"a\" : [1, 2.5e3] , \"result\" : 1.0 }",
	    "result", "1.0"));
	assert_true(member_of("{\"result\":[1, 2]}", "result", "[1, 2]"));
	assert_true(member_of("{\"result\":null}", "result", "null"));
	/* Only at the top level, only under its own unescaped name. */
	assert_false(member_of("{\"receipt\":{\"result\":1}}", "result",
	    NULL));
	assert_false(member_of("{\"res\\u0075lt\":1}", "result", NULL));
	assert_false(member_of("{\"ok\":true}", "result", NULL));
	assert_false(member_of("\"result\"", "result", NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fingerprint_is_the_members_text),
		cmocka_unit_test(what_moves_the_fingerprint),
		cmocka_unit_test(fingerprint_of_long_members),
		cmocka_unit_test(plain_ids_accepted),
		cmocka_unit_test(doubts_refused),
		cmocka_unit_test(depth_limited),
		cmocka_unit_test(nul_bytes_are_bytes),
		cmocka_unit_test(effect_begin_scanned),
		cmocka_unit_test(effect_begin_doubts_refused),
		cmocka_unit_test(strings_judged_at_every_offset),
		cmocka_unit_test(lines_end_at_guard_page),
		cmocka_unit_test(compact_members),
		cmocka_unit_test(members_as_they_stand),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
