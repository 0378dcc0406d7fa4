/* SPDX-License-Identifier: ISC */
/*
 * test_journal.c: unit tests of broker/store/journal.c: the record codec, the
 * segment format as doc/journal.md describes it (the tests build bytes
 * from the document, not from journal.c's helpers), append and replay,
 * and the line between a torn tail (cut) and corruption (refused).  Each
 * test runs in a fresh mkdtemp directory.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "store.h"
#include "journal_int.h"
#include "tree.h"

/* From doc/journal.md. */
#define DOC_SEGMENT_HEADER_BYTES	32
#define DOC_RECORD_HEADER_BYTES		16
#define DOC_PAYLOAD_FIXED_BYTES		144
static const unsigned char doc_key[16] = "idem-journal-v1";

struct fixture {
	char	root[64];
	char	dir[96];	/* root/journal: does not exist at first */
};

struct collected {
	struct journal_record	*records;
	size_t			 count;
	size_t			 cap;
	size_t			 fail_at;	/* apply fails on this one (1-based) */
};

static int
setup(void **state)
{
	struct fixture	*f;

	f = calloc(1, sizeof *f);
	assert_non_null(f);
	strcpy(f->root, "/tmp/test_journal.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->dir, sizeof f->dir, "%s/journal", f->root);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture	*f = *state;

	unit_remove_tree(f->root);
	free(f);
	return 0;
}

/* A record with every field set, distinct per n. */
static void
make_record(struct journal_record *r, unsigned n)
{
	struct subtab_entry	*e = &r->entry;
	int			 len;
	size_t			 i;

	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_ENTRY;
	e->kind = n % 2 ? SUBTAB_KIND_REPORT : SUBTAB_KIND_TASK;
	e->state = 1 + n % 3;
	e->schema = n % 4;	/* none, the three schemas */
	memcpy(e->sender, "PM", 2);
	e->sender_length = 2;
	memcpy(e->recipient, "DEVELOPER-ABCDEF", 16);	/* the maximum */
	e->recipient_length = 16;
	e->date = 20261202 + n;
	e->seq = 0x01020304u + n;
	for (i = 0; i < IDEM_SHA256_BYTES; i++) {
		e->request_digest[i] = (uint8_t)(i + n);
		e->file_digest[i] = (uint8_t)(0xff - i - n);
	}
	e->reserved_at_ms = 1764676800123LL + n;
	e->updated_at_ms = -1 - (int64_t)n;	/* the sign must survive */
	e->created_at_ms = INT64_MAX - n;
	e->peer_uid = 0xfedcba98u - n;
	e->peer_pid = 0x7fffffffu - n;
	len = snprintf(r->key, sizeof r->key, "run-%u/step-%u", n, n * 7);
	e->key_length = (uint16_t)len;
}

static void
assert_record_equal(const struct journal_record *a,
    const struct journal_record *b)
{
	const struct subtab_entry	*x = &a->entry, *y = &b->entry;

	assert_int_equal(a->type, b->type);
	assert_int_equal(x->kind, y->kind);
	assert_int_equal(x->state, y->state);
	assert_int_equal(x->schema, y->schema);
	assert_int_equal(x->sender_length, y->sender_length);
	assert_int_equal(x->recipient_length, y->recipient_length);
	assert_int_equal(x->key_length, y->key_length);
	assert_int_equal(x->date, y->date);
	assert_int_equal(x->seq, y->seq);
	assert_memory_equal(x->request_digest, y->request_digest,
	    IDEM_SHA256_BYTES);
	assert_memory_equal(x->file_digest, y->file_digest, IDEM_SHA256_BYTES);
	assert_memory_equal(x->sender, y->sender, x->sender_length);
	assert_memory_equal(x->recipient, y->recipient, x->recipient_length);
	assert_true(x->reserved_at_ms == y->reserved_at_ms);
	assert_true(x->updated_at_ms == y->updated_at_ms);
	assert_true(x->created_at_ms == y->created_at_ms);
	assert_int_equal(x->peer_uid, y->peer_uid);
	assert_int_equal(x->peer_pid, y->peer_pid);
	assert_memory_equal(a->key, b->key, x->key_length);
}

static size_t
encode(unsigned n, uint8_t *out, size_t out_size)
{
	struct journal_record	r;
	size_t			len;

	make_record(&r, n);
	len = journal_encode(&r, out, out_size);
	assert_true(len > 0);
	return len;
}

static int
collect(const struct journal_record *r, void *arg)
{
	struct collected	*c = arg;

	if (c->fail_at != 0 && c->count + 1 == c->fail_at)
		return 7;
	if (c->count == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 16;
		c->records = realloc(c->records, c->cap * sizeof *c->records);
		assert_non_null(c->records);
	}
	c->records[c->count++] = *r;
	return 0;
}

/* Replay dir; the records seen go to c (reset first). */
static int
replay(const char *dir, struct collected *c,
    struct journal_replay_stats *stats, char **cause)
{
	free(c->records);
	c->records = NULL;
	c->count = c->cap = 0;
	*cause = NULL;
	return journal_replay(dir, 0, collect, c, stats, cause);
}

static void
assert_replays(const char *dir, unsigned first, size_t count,
    uint64_t truncated)
{
	struct collected		c = { 0 };
	struct journal_replay_stats	stats;
	struct journal_record		want;
	char				*cause;
	size_t				i;

	if (replay(dir, &c, &stats, &cause) != 0)
		fail_msg("replay failed: %s", cause);
	assert_null(cause);
	assert_int_equal(c.count, count);
	assert_int_equal(stats.records, count);
	assert_int_equal(stats.truncated_bytes, truncated);
	for (i = 0; i < count; i++) {
		make_record(&want, first + (unsigned)i);
		assert_record_equal(&c.records[i], &want);
	}
	free(c.records);
}

/*
 * Append records first .. first + count - 1, one write each; ends[i] is
 * the segment size after record first + i.
 */
static void
append_records(struct journal *j, unsigned first, size_t count,
    uint64_t *ends)
{
	uint8_t		buf[JOURNAL_MAX_RECORD_BYTES];
	struct iovec	iov;
	char		*cause = NULL;
	size_t		i;

	for (i = 0; i < count; i++) {
		iov.iov_base = buf;
		iov.iov_len = encode(first + (unsigned)i, buf, sizeof buf);
		if (journal_append(j, &iov, 1, &cause) != 0)
			fail_msg("append: %s", cause);
		if (ends != NULL)
			ends[i] = j->size;
	}
	if (journal_sync(j, &cause) != 0)
		fail_msg("sync: %s", cause);
}

static void
segment_path(const struct fixture *f, uint64_t n, char *out, size_t size)
{
	snprintf(out, size, "%s/%016" PRIx64 ".jnl", f->dir, n);
}

static uint8_t *
read_file(const char *path, size_t *size)
{
	struct stat	 st;
	uint8_t		*p;
	int		 fd;

	assert_true((fd = open(path, O_RDONLY)) != -1);
	assert_int_equal(fstat(fd, &st), 0);
	p = malloc((size_t)st.st_size + 1);
	assert_non_null(p);
	assert_int_equal(read(fd, p, (size_t)st.st_size), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return p;
}

static off_t
file_size(const char *path)
{
	struct stat	st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static void
flip_byte_at(const char *path, off_t offset)
{
	uint8_t	b;
	int	fd;

	assert_true((fd = open(path, O_RDWR)) != -1);
	assert_int_equal(pread(fd, &b, 1, offset), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, offset), 1);
	close(fd);
}

static void
append_bytes(const char *path, const void *p, size_t n)
{
	int	fd;

	assert_true((fd = open(path, O_WRONLY|O_APPEND|O_CREAT, 0600)) != -1);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static void
put_le(uint8_t *p, uint64_t v, int bytes)
{
	int	i;

	for (i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A segment file header built from doc/journal.md alone, version v. */
static void
doc_segment_header_v(uint64_t number, uint32_t v,
    uint8_t out[DOC_SEGMENT_HEADER_BYTES])
{
	memcpy(out, "IDEMJNL", 8);	/* and its NUL */
	put_le(out + 8, v, 4);
	put_le(out + 12, 0, 4);
	put_le(out + 16, number, 8);
	crypto_shorthash(out + 24, out, 24, doc_key);
}

/* Format 1's header (the records without round prefixes). */
static void
doc_segment_header(uint64_t number, uint8_t out[DOC_SEGMENT_HEADER_BYTES])
{
	doc_segment_header_v(number, 1, out);
}

/* ---- the record codec ----------------------------------------------------- */

static void
round_trip_keeps_every_field(void **state)
{
	struct journal_record	in, out;
	uint8_t			buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			len, consumed = 0;
	unsigned		n;

	for (n = 0; n < 12; n++) {	/* every kind, state and schema */
		make_record(&in, n);
		len = journal_encode(&in, buf, sizeof buf);
		assert_int_equal(len, DOC_RECORD_HEADER_BYTES +
		    DOC_PAYLOAD_FIXED_BYTES + in.entry.key_length);
		memset(&out, 0xaa, sizeof out);
		assert_int_equal(journal_decode(buf, len, &out, &consumed),
		    JOURNAL_DECODE_OK);
		assert_int_equal(consumed, len);
		assert_record_equal(&out, &in);
		assert_int_equal(out.entry.effect_flags, 0);
	}

	/* A key of the maximum length, and an empty one (legacy entry). */
	make_record(&in, 1);
	memset(in.key, 'k', SUBTAB_MAX_KEY_BYTES);
	in.entry.key_length = SUBTAB_MAX_KEY_BYTES;
	len = journal_encode(&in, buf, sizeof buf);
	assert_true(len > 0 && len <= JOURNAL_MAX_RECORD_BYTES);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_record_equal(&out, &in);
	in.entry.key_length = 0;
	len = journal_encode(&in, buf, sizeof buf);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_record_equal(&out, &in);
}

/*
 * An FCoP slot recipient (DEV.D1, each part up to 16 characters): the
 * role in its field, the slot after the key (doc/journal.md), and back.
 */
static void
slot_recipient_round_trips(void **state)
{
	static const char	 longest[] = "DEVELOPER-ABCDEF.SLOT-0123456789";
	struct journal_record	 in, out;
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES];
	const uint8_t		*p = buf + DOC_RECORD_HEADER_BYTES;
	size_t			 len, consumed = 0;

	make_record(&in, 0);
	in.entry.kind = SUBTAB_KIND_TASK;
	memset(in.entry.recipient, 0, sizeof in.entry.recipient);
	memcpy(in.entry.recipient, "DEV.D1", 6);
	in.entry.recipient_length = 6;
	len = journal_encode(&in, buf, sizeof buf);
	assert_int_equal(len, DOC_RECORD_HEADER_BYTES +
	    DOC_PAYLOAD_FIXED_BYTES + in.entry.key_length + 2);
	assert_int_equal(p[5], 3);			/* "DEV" */
	assert_memory_equal(p + 96, "DEV\0", 4);
	assert_memory_equal(p + DOC_PAYLOAD_FIXED_BYTES +
	    in.entry.key_length, "D1", 2);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_int_equal(consumed, len);
	assert_record_equal(&out, &in);

	/* The longest: 16 + "." + 16 (and the longest key). */
	memcpy(in.entry.recipient, longest, sizeof longest - 1);
	in.entry.recipient_length = sizeof longest - 1;
	memset(in.key, 'k', SUBTAB_MAX_KEY_BYTES);
	in.entry.key_length = SUBTAB_MAX_KEY_BYTES;
	len = journal_encode(&in, buf, sizeof buf);
	assert_true(len > 0 && len <= JOURNAL_MAX_RECORD_BYTES);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_record_equal(&out, &in);

	/* A slot of 17, an empty slot or a role of 17: not encoded. */
	memcpy(in.entry.recipient, "DEV.ABCDEFGHIJKLMNOPQ", 21);
	in.entry.recipient_length = 21;
	assert_int_equal(journal_encode(&in, buf, sizeof buf), 0);
	memcpy(in.entry.recipient, "DEV.", 4);
	in.entry.recipient_length = 4;
	assert_int_equal(journal_encode(&in, buf, sizeof buf), 0);
	memcpy(in.entry.recipient, "ABCDEFGHIJKLMNOPQ.D1", 20);
	in.entry.recipient_length = 20;
	assert_int_equal(journal_encode(&in, buf, sizeof buf), 0);
}

static void
encoding_matches_the_document(void **state)
{
	struct journal_record	r;
	uint8_t			buf[JOURNAL_MAX_RECORD_BYTES], sum[8];
	uint8_t			lp[4 + JOURNAL_MAX_RECORD_BYTES];
	const uint8_t		*p = buf + DOC_RECORD_HEADER_BYTES;
	size_t			len, plen;

	make_record(&r, 3);
	/* Junk past a role's length must not reach the file. */
	memset(r.entry.sender + 2, 'x', IDEM_MAX_ROLE_BYTES - 2);
	len = journal_encode(&r, buf, sizeof buf);
	plen = len - DOC_RECORD_HEADER_BYTES;

	assert_memory_equal(buf, "\xff" "JRC", 4);
	assert_int_equal(buf[4], plen & 0xff);
	assert_int_equal(buf[5], plen >> 8);
	assert_int_equal(buf[6], 0);
	assert_int_equal(buf[7], 0);
	memcpy(lp, buf + 4, 4);
	memcpy(lp + 4, p, plen);
	crypto_shorthash(sum, lp, 4 + plen, doc_key);
	assert_memory_equal(buf + 8, sum, 8);

	assert_int_equal(p[0], JOURNAL_RECORD_ENTRY);
	assert_int_equal(p[1], r.entry.kind);
	assert_int_equal(p[2], r.entry.state);
	assert_int_equal(p[3], r.entry.schema);
	assert_int_equal(p[4], 2);
	assert_int_equal(p[5], 16);
	assert_int_equal(p[6] | p[7] << 8, r.entry.key_length);
	/* seq 0x01020307: little-endian, least significant byte first */
	assert_memory_equal(p + 12, "\x07\x03\x02\x01", 4);
	assert_memory_equal(p + 16, r.entry.request_digest, 32);
	assert_memory_equal(p + 48, r.entry.file_digest, 32);
	assert_memory_equal(p + 80, "PM\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
	assert_memory_equal(p + 96, "DEVELOPER-ABCDEF", 16);
	/* updated_at -4: two's complement, all ones above the low byte */
	assert_memory_equal(p + 120, "\xfc\xff\xff\xff\xff\xff\xff\xff", 8);
	assert_memory_equal(p + 144, r.key, r.entry.key_length);
}

static void
decode_rejects_every_flipped_byte(void **state)
{
	static const uint8_t	 flips[] = { 0x01, 0x80, 0xff };
	struct journal_record	 out;
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			 len, i, k, consumed;
	enum journal_decode_result res;

	len = encode(5, buf, sizeof buf);
	for (i = 0; i < len; i++) {
		for (k = 0; k < sizeof flips; k++) {
			buf[i] ^= flips[k];
			res = journal_decode(buf, len, &out, &consumed);
			if (res == JOURNAL_DECODE_OK)
				fail_msg("flip 0x%02x at byte %zu decoded",
				    flips[k], i);
			assert_true(res == JOURNAL_DECODE_BAD ||
			    res == JOURNAL_DECODE_SHORT);
			buf[i] ^= flips[k];
		}
	}
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
}

static void
decode_is_short_for_every_truncation(void **state)
{
	struct journal_record	out;
	uint8_t			buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			len, i, consumed;

	len = encode(2, buf, sizeof buf);
	for (i = 0; i < len; i++) {
		if (journal_decode(buf, i, &out, &consumed) !=
		    JOURNAL_DECODE_SHORT)
			fail_msg("truncation to %zu bytes is not SHORT", i);
	}
}

/* ---- EFFECT records (doc/journal.md, "Effect records") ------------------- */

static void	reseal(uint8_t *, size_t);

static void
make_effect(struct journal_record *r, const uint8_t *result, uint32_t length)
{
	struct subtab_entry	*e = &r->entry;
	size_t			 i;

	memset(r, 0, sizeof *r);
	r->type = JOURNAL_RECORD_EFFECT;
	e->kind = SUBTAB_KIND_EFFECT;
	e->state = length > 0 ? SUBTAB_COMMITTED : SUBTAB_RESERVED;
	e->schema = SUBTAB_SCHEMA_GENERIC_JSON_V1;
	e->effect_flags = SUBTAB_EFFECT_RECOVERED;
	e->attempt = 0x01020304u;
	e->result_length = length;
	for (i = 0; i < IDEM_SHA256_BYTES; i++) {
		e->request_digest[i] = (uint8_t)i;
		e->file_digest[i] = (uint8_t)(0x80 + i);
	}
	e->fence = 0x1122334455667788ULL;
	e->lease_expires_ms = 1764676830123LL;
	e->result_offset = 0xdeadbeef;		/* memory only: not written */
	e->reserved_at_ms = 1764676800123LL;
	e->updated_at_ms = -4;
	e->created_at_ms = 1764676801000LL;
	e->peer_uid = 1000;
	e->peer_pid = 4242;
	memcpy(r->key, "mail.send/v1\x1frun-42/step-7", 25);
	e->key_length = 25;
	r->result = result;
}

static void
effect_encoding_matches_the_document(void **state)
{
	static const uint8_t	 result[] = "{\"id\":7}";
	struct journal_record	 r, out;
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES], sum[8];
	uint8_t			 lp[4 + JOURNAL_MAX_RECORD_BYTES];
	const uint8_t		*p = buf + DOC_RECORD_HEADER_BYTES;
	size_t			 len, plen, consumed;

	make_effect(&r, result, 8);
	len = journal_encode(&r, buf, sizeof buf);
	assert_int_equal(len, DOC_RECORD_HEADER_BYTES +
	    DOC_PAYLOAD_FIXED_BYTES + 25 + 8);
	assert_int_equal(journal_encoded_size(&r), len);
	plen = len - DOC_RECORD_HEADER_BYTES;
	memcpy(lp, buf + 4, 4);
	memcpy(lp + 4, p, plen);
	crypto_shorthash(sum, lp, 4 + plen, doc_key);
	assert_memory_equal(buf + 8, sum, 8);

	assert_int_equal(p[0], 2);
	assert_int_equal(p[1], 3);
	assert_int_equal(p[2], 3);
	assert_int_equal(p[3], 16);
	assert_int_equal(p[4], 1);		/* recovered */
	assert_int_equal(p[5], 0);
	assert_int_equal(p[6] | p[7] << 8, 25);
	assert_memory_equal(p + 8, "\x04\x03\x02\x01", 4);	/* attempt */
	assert_memory_equal(p + 12, "\x08\0\0\0", 4);	/* result length */
	assert_memory_equal(p + 16, r.entry.request_digest, 32);
	assert_memory_equal(p + 48, r.entry.file_digest, 32);
	assert_memory_equal(p + 80, "\x88\x77\x66\x55\x44\x33\x22\x11", 8);
	put_le(lp, 1764676830123ULL, 8);
	assert_memory_equal(p + 88, lp, 8);
	memset(lp, 0, 16);
	assert_memory_equal(p + 96, lp, 16);	/* the arena offset is not */
	put_le(lp, 1764676801000ULL, 8);
	assert_memory_equal(p + 128, lp, 8);	/* committed_at */
	assert_memory_equal(p + 144, r.key, 25);
	assert_memory_equal(p + 144 + 25, result, 8);

	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_int_equal(consumed, len);
	assert_int_equal(out.type, JOURNAL_RECORD_EFFECT);
	assert_int_equal(out.entry.attempt, r.entry.attempt);
	assert_int_equal(out.entry.result_length, 8);
	assert_int_equal(out.entry.fence, r.entry.fence);
	assert_int_equal(out.entry.lease_expires_ms, r.entry.lease_expires_ms);
	assert_int_equal(out.entry.effect_flags, SUBTAB_EFFECT_RECOVERED);
	assert_int_equal(out.entry.result_offset, 0);
	assert_int_equal(out.entry.updated_at_ms, -4);
	assert_memory_equal(out.result, result, 8);
	assert_memory_equal(out.key, r.key, 25);
}

static void
effect_record_with_the_largest_result_round_trips(void **state)
{
	struct journal_record	 r, out;
	uint8_t			*result, *buf;
	size_t			 len, consumed, i;

	result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES);
	buf = malloc(JOURNAL_MAX_EFFECT_RECORD_BYTES);
	assert_non_null(result);
	assert_non_null(buf);
	for (i = 0; i < IDEM_MAX_EFFECT_RESULT_BYTES; i++)
		result[i] = (uint8_t)('a' + i % 26);
	make_effect(&r, result, IDEM_MAX_EFFECT_RESULT_BYTES);
	memset(r.key, 'k', SUBTAB_MAX_KEY_BYTES);
	r.key[3] = '\x1f';
	r.entry.key_length = SUBTAB_MAX_KEY_BYTES;
	len = journal_encode(&r, buf, JOURNAL_MAX_EFFECT_RECORD_BYTES);
	assert_int_equal(len, JOURNAL_MAX_EFFECT_RECORD_BYTES);
	assert_int_equal(journal_encode(&r, buf, len - 1), 0);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_OK);
	assert_memory_equal(out.result, result, IDEM_MAX_EFFECT_RESULT_BYTES);
	/* Every truncation is SHORT: replay waits, never misreads. */
	for (i = 0; i < len; i += 997)
		assert_int_equal(journal_decode(buf, i, &out, &consumed),
		    JOURNAL_DECODE_SHORT);
	/* One byte more is refused by encode. */
	r.entry.result_length = IDEM_MAX_EFFECT_RESULT_BYTES + 1;
	assert_int_equal(journal_encode(&r, buf,
	    JOURNAL_MAX_EFFECT_RECORD_BYTES), 0);
	free(result);
	free(buf);
}

static void
effect_decode_checks_fields_behind_a_good_checksum(void **state)
{
	static const uint8_t	 result[] = "null";
	static const struct { size_t offset; uint8_t value; } bad[] = {
		{ 1, 1 },		/* kind: a task in an EFFECT record */
		{ 2, 2 }, { 2, 6 },	/* state: task_created, out of range */
		{ 3, 1 },		/* schema */
		{ 4, 2 },		/* unknown flag */
		{ 5, 1 },		/* zero byte */
		{ 12, 5 },		/* result length vs record length */
		{ 100, 1 },		/* padding */
	};
	struct journal_record	 r, out;
	uint8_t			 good[JOURNAL_MAX_RECORD_BYTES];
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			 len, i, consumed;

	make_effect(&r, result, 4);
	len = journal_encode(&r, good, sizeof good);
	assert_true(len > 0);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memcpy(buf, good, len);
		buf[16 + bad[i].offset] = bad[i].value;
		reseal(buf, len);
		if (journal_decode(buf, len, &out, &consumed) !=
		    JOURNAL_DECODE_BAD)
			fail_msg("effect payload byte %zu = %u accepted",
			    bad[i].offset, bad[i].value);
	}
	/* A result without its bytes is refused by encode. */
	r.result = NULL;
	assert_int_equal(journal_encode(&r, buf, sizeof buf), 0);
}

/* Re-seal a hand-edited record as doc/journal.md says. */
static void
reseal(uint8_t *rec, size_t len)
{
	uint8_t	lp[4 + JOURNAL_MAX_RECORD_BYTES];

	memcpy(lp, rec + 4, 4);
	memcpy(lp + 4, rec + 16, len - 16);
	crypto_shorthash(rec + 8, lp, 4 + len - 16, doc_key);
}

static void
decode_checks_fields_behind_a_good_checksum(void **state)
{
	static const struct {
		size_t	offset;	/* in the payload */
		uint8_t	value;
	} bad[] = {
		{ 0, 0 }, { 0, 2 },		/* type */
		{ 1, 0 }, { 1, 3 },		/* kind */
		{ 2, 0 }, { 2, 4 },		/* state */
		{ 3, 4 },			/* schema */
		{ 4, 17 }, { 5, 17 },		/* role lengths */
		{ 6, 0 },			/* key length vs record length */
		{ 4, 1 },			/* "M" of "PM" is now padding */
	};
	struct journal_record	 out;
	uint8_t			 good[JOURNAL_MAX_RECORD_BYTES];
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			 len, i, consumed;

	len = encode(1, good, sizeof good);
	memcpy(buf, good, len);
	reseal(buf, len);
	assert_memory_equal(buf, good, len);	/* reseal is the real thing */
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memcpy(buf, good, len);
		buf[16 + bad[i].offset] = bad[i].value;
		reseal(buf, len);
		if (journal_decode(buf, len, &out, &consumed) !=
		    JOURNAL_DECODE_BAD)
			fail_msg("payload byte %zu = %u accepted",
			    bad[i].offset, bad[i].value);
	}

	/* A length past the limit is BAD, not SHORT: never wait for it. */
	memcpy(buf, good, len);
	put_le(buf + 4, JOURNAL_MAX_EFFECT_RECORD_BYTES, 4);
	assert_int_equal(journal_decode(buf, len, &out, &consumed),
	    JOURNAL_DECODE_BAD);
}

static void
encode_refuses_small_buffers_and_bad_fields(void **state)
{
	struct journal_record	r;
	uint8_t			buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			len;

	make_record(&r, 0);
	len = journal_encode(&r, buf, sizeof buf);
	assert_int_equal(journal_encode(&r, buf, len - 1), 0);
	assert_int_equal(journal_encode(&r, buf, len), len);

	make_record(&r, 0);
	r.entry.state = SUBTAB_EMPTY;
	assert_int_equal(journal_encode(&r, buf, sizeof buf), 0);
	make_record(&r, 0);
	r.entry.sender_length = IDEM_MAX_ROLE_BYTES + 1;
	assert_int_equal(journal_encode(&r, buf, sizeof buf), 0);
	make_record(&r, 0);
	r.entry.key_length = SUBTAB_MAX_KEY_BYTES + 1;
	assert_int_equal(journal_encode(&r, buf, sizeof buf), 0);
}

/* ---- append and replay ---------------------------------------------------- */

static void
missing_dir_is_an_empty_journal(void **state)
{
	struct fixture	*f = *state;

	assert_replays(f->dir, 0, 0, 0);
	assert_int_equal(access(f->dir, F_OK), -1);	/* not created */
}

static void
open_creates_segment_one(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 want[DOC_SEGMENT_HEADER_BYTES], *got;
	char		*cause = NULL, path[256];
	size_t		 size;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.segment, 1);
	assert_int_equal(j.size, DOC_SEGMENT_HEADER_BYTES);
	journal_close(&j);

	segment_path(f, 1, path, sizeof path);
	got = read_file(path, &size);
	/* New segments are format 2 (records with round prefixes). */
	doc_segment_header_v(1, 2, want);
	assert_int_equal(size, sizeof want);
	assert_memory_equal(got, want, sizeof want);
	free(got);
	assert_replays(f->dir, 0, 0, 0);
}

static void
append_then_replay_gives_the_same_records_in_order(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 buf[200 * JOURNAL_MAX_RECORD_BYTES];
	struct iovec			 iov[2];
	char				*cause = NULL, path[256];
	size_t				 used = 0, half;
	unsigned			 n;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 50, NULL);

	/* 150 more in one append of two pieces, split mid-record. */
	for (n = 50; n < 200; n++)
		used += encode(n, buf + used, sizeof buf - used);
	half = used / 2 + 7;
	iov[0].iov_base = buf;
	iov[0].iov_len = half;
	iov[1].iov_base = buf + half;
	iov[1].iov_len = used - half;
	assert_int_equal(journal_append(&j, iov, 2, &cause), 0);
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);

	assert_replays(f->dir, 0, 200, 0);
	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_int_equal(stats.segments, 1);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(stats.bytes + DOC_SEGMENT_HEADER_BYTES,
	    file_size(path));
	free(c.records);
}

static void
open_appends_after_existing_records(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	char		*cause = NULL, path[256];
	uint64_t	 ends[3];

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, ends);
	journal_close(&j);

	assert_replays(f->dir, 0, 3, 0);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.segment, 1);
	assert_int_equal(j.size, ends[2]);
	append_records(&j, 3, 2, NULL);
	journal_close(&j);

	segment_path(f, 1, path, sizeof path);
	assert_int_equal(file_size(path), j.size);
	assert_replays(f->dir, 0, 5, 0);
}

/*
 * A tail a crash may leave behind segment 1's last good record, cut by
 * replay with a warning: the records before it replay, the cut bytes are
 * counted, the file ends at the last good record, a second replay cuts
 * nothing, and the journal appends from there.
 */
enum tail_damage {
	TAIL_TRUNCATE,		/* the file cut to ends[at] + bytes */
	TAIL_JUNK,		/* bytes of a pattern appended */
	TAIL_ZEROS,		/* zeros appended, as a file system may leave */
	TAIL_HEADER,		/* the first bytes of the next record */
};

static const struct tail_case {
	const char		*name;
	unsigned		 records;	/* written before the damage */
	enum tail_damage	 damage;
	unsigned		 at;		/* TAIL_TRUNCATE: a record */
	int			 bytes;
	unsigned		 kept;		/* records that still replay */
} tail_cases[] = {
	{ "record 10 loses its last 30 bytes", 10, TAIL_TRUNCATE, 9, -30, 9 },
	{ "5 bytes of record 3's header", 3, TAIL_TRUNCATE, 1, 5, 2 },
	{ "700 bytes of junk", 10, TAIL_JUNK, 0, 700, 10 },
	{ "a record's magic and header, no payload", 10, TAIL_HEADER, 0, 64,
	    10 },
};

static void
damage_tail(const struct tail_case *t, const char *path,
    const uint64_t *ends)
{
	uint8_t	bytes[4096], rec[JOURNAL_MAX_RECORD_BYTES];
	size_t	i, n = (size_t)t->bytes;

	switch (t->damage) {
	case TAIL_TRUNCATE:
		assert_int_equal(truncate(path, (off_t)ends[t->at] + t->bytes),
		    0);
		return;
	case TAIL_JUNK:
		assert_true(n <= sizeof bytes);
		for (i = 0; i < n; i++)
			bytes[i] = (uint8_t)(i * 37 + 11);
		append_bytes(path, bytes, n);
		return;
	case TAIL_ZEROS:
		assert_true(n <= sizeof bytes);
		memset(bytes, 0, n);
		append_bytes(path, bytes, n);
		return;
	case TAIL_HEADER:
		encode(t->records, rec, sizeof rec);
		append_bytes(path, rec, n);
		return;
	}
	fail_msg("%s: unknown damage", t->name);
}

static void
torn_and_garbage_tails_are_cut_once(void **state)
{
	struct fixture		*f = *state;
	const struct tail_case	*t;
	struct journal		 j;
	char			*cause = NULL, path[256];
	uint64_t		 ends[16], good;
	size_t			 i;

	for (i = 0; i < sizeof tail_cases / sizeof tail_cases[0]; i++) {
		t = &tail_cases[i];
		fprintf(stderr, "tail: %s\n", t->name);
		assert_true(t->records <= 16 && t->kept > 0);
		unit_remove_tree(f->dir);
		assert_int_equal(journal_open(&j, f->dir, &cause), 0);
		append_records(&j, 0, t->records, ends);
		journal_close(&j);
		segment_path(f, 1, path, sizeof path);
		damage_tail(t, path, ends);

		good = ends[t->kept - 1];
		assert_replays(f->dir, 0, t->kept,
		    (uint64_t)file_size(path) - good);
		assert_int_equal(file_size(path), good);
		assert_replays(f->dir, 0, t->kept, 0);

		/* And the journal carries on from there. */
		assert_int_equal(journal_open(&j, f->dir, &cause), 0);
		assert_int_equal(j.size, good);
		append_records(&j, t->kept, 1, NULL);
		journal_close(&j);
		assert_replays(f->dir, 0, t->kept + 1, 0);
	}
}

/* Segment number by hand, holding records first .. first + count - 1. */
static void
make_segment(const struct fixture *f, uint64_t number, unsigned first,
    unsigned count)
{
	uint8_t		header[DOC_SEGMENT_HEADER_BYTES];
	uint8_t		rec[JOURNAL_MAX_RECORD_BYTES];
	char		path[256];
	size_t		len;
	unsigned	n;
	int		fd;

	segment_path(f, number, path, sizeof path);
	assert_true((fd = open(path, O_WRONLY|O_CREAT|O_EXCL, 0600)) != -1);
	doc_segment_header(number, header);
	assert_int_equal(write(fd, header, sizeof header), sizeof header);
	for (n = first; n < first + count; n++) {
		len = encode(n, rec, sizeof rec);
		assert_int_equal(write(fd, rec, len), (ssize_t)len);
	}
	close(fd);
}

static void
segments_replay_in_numeric_order(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 5, NULL);
	journal_close(&j);

	/* Segment 2 by hand, as doc/journal.md describes it. */
	make_segment(f, 2, 5, 4);

	/* Files that are not segments are none of replay's business. */
	snprintf(path, sizeof path, "%s/notes.txt", f->dir);
	append_bytes(path, "hello", 5);
	snprintf(path, sizeof path, "%s/00000000000000AB.jnl", f->dir);
	append_bytes(path, "upper case hex is not a segment", 31);
	snprintf(path, sizeof path, "%s/0000000000000000.jnl", f->dir);
	append_bytes(path, "segment numbers start at 1", 26);

	assert_replays(f->dir, 0, 9, 0);
	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_int_equal(stats.segments, 2);
	free(c.records);

	/* The journal appends to the highest segment. */
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.segment, 2);
	append_records(&j, 9, 1, NULL);
	journal_close(&j);
	assert_replays(f->dir, 0, 10, 0);
}

/*
 * Damage before valid records, which no crash leaves: replay refuses
 * (EINVAL) with a cause saying where and what to run, applies nothing
 * past it, and leaves every byte of segment 1 as it was.
 */
enum corruption {
	CORRUPT_FLIP,		/* one byte of a record flipped */
	CORRUPT_HOLE,		/* a record zeroed, valid ones after it */
	CORRUPT_EARLIER_TAIL,	/* a torn tail, then a later segment */
	CORRUPT_MISSING,	/* segment 2 missing between 1 and 3 */
	CORRUPT_HEADER,		/* a segment header's number flipped */
};

static const struct corrupt_case {
	const char		*name;
	unsigned		 records;	/* in segment 1 */
	enum corruption		 damage;
	int			 offset_of;	/* named offset: ends[i]; -1: 0;
						 * -2: none */
	int			 names_path;	/* the cause names segment 1 */
	const char		*says;		/* in the cause, or NULL */
	int			 applies_none;	/* refused before any apply */
	int			 open_refuses;	/* journal_open refuses too */
} corrupt_cases[] = {
	{ "a flipped byte in record 3", 10, CORRUPT_FLIP, 1, 1,
	    "idemctl verify", 0, 0 },
	{ "record 2 zeroed, 3 and 4 intact", 4, CORRUPT_HOLE, -2, 0,
	    "valid records follow", 0, 0 },
	{ "a torn tail in segment 1 of 2", 5, CORRUPT_EARLIER_TAIL, 3, 1,
	    NULL, 0, 0 },
	{ "segment 2 of 3 missing", 2, CORRUPT_MISSING, -2, 0,
	    "0000000000000002.jnl is missing", 1, 0 },
	{ "segment 1's number flipped", 2, CORRUPT_HEADER, -1, 0, NULL, 0,
	    1 },
};

static void
corrupt(const struct fixture *f, const struct corrupt_case *k,
    const char *path, const uint64_t *ends)
{
	uint8_t	zeros[100] = { 0 };
	int	fd;

	switch (k->damage) {
	case CORRUPT_FLIP:
		/* Record 3 starts where record 2 ends. */
		flip_byte_at(path, (off_t)ends[1] + 40);
		return;
	case CORRUPT_HOLE:
		assert_true((fd = open(path, O_WRONLY)) != -1);
		assert_int_equal(pwrite(fd, zeros, sizeof zeros,
		    (off_t)ends[0]), (ssize_t)sizeof zeros);
		close(fd);
		return;
	case CORRUPT_EARLIER_TAIL:
		assert_int_equal(truncate(path, (off_t)ends[4] - 10), 0);
		make_segment(f, 2, 5, 3);
		return;
	case CORRUPT_MISSING:
		make_segment(f, 3, 2, 2);	/* and no segment 2 */
		return;
	case CORRUPT_HEADER:
		flip_byte_at(path, 17);		/* the segment number */
		return;
	}
	fail_msg("%s: unknown damage", k->name);
}

static void
corruption_is_refused_and_left_alone(void **state)
{
	struct fixture			*f = *state;
	const struct corrupt_case	*k;
	struct journal			 j;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				*before, *after;
	char				*cause = NULL, path[256], want[64];
	uint64_t			 ends[16];
	size_t				 i, size_before, size_after;

	for (i = 0; i < sizeof corrupt_cases / sizeof corrupt_cases[0]; i++) {
		k = &corrupt_cases[i];
		fprintf(stderr, "corruption: %s\n", k->name);
		assert_true(k->records <= 16);
		unit_remove_tree(f->dir);
		assert_int_equal(journal_open(&j, f->dir, &cause), 0);
		append_records(&j, 0, k->records, ends);
		journal_close(&j);
		segment_path(f, 1, path, sizeof path);
		corrupt(f, k, path, ends);
		before = read_file(path, &size_before);

		errno = 0;
		assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
		assert_int_equal(errno, EINVAL);
		assert_non_null(cause);
		if (k->offset_of >= -1) {
			snprintf(want, sizeof want, "offset %" PRIu64 ":",
			    k->offset_of == -1 ? 0 : ends[k->offset_of]);
			if (strstr(cause, want) == NULL)
				fail_msg("%s: the cause does not name %s: %s",
				    k->name, want, cause);
		}
		if (k->names_path && strstr(cause, path) == NULL)
			fail_msg("%s: the cause does not name %s: %s",
			    k->name, path, cause);
		if (k->says != NULL && strstr(cause, k->says) == NULL)
			fail_msg("%s: the cause does not say %s: %s",
			    k->name, k->says, cause);
		assert_int_equal(stats.truncated_bytes, 0);
		if (k->applies_none)
			assert_int_equal(c.count, 0);
		free(cause);
		cause = NULL;
		free(c.records);
		c.records = NULL;

		/* Not a byte of it changed. */
		after = read_file(path, &size_after);
		assert_int_equal(size_after, size_before);
		assert_memory_equal(after, before, size_before);
		free(before);
		free(after);
		if (k->open_refuses) {
			assert_int_equal(journal_open(&j, f->dir, &cause), -1);
			assert_non_null(cause);
			free(cause);
			cause = NULL;
		}
	}
}

static void
short_last_segment_is_removed(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 header[DOC_SEGMENT_HEADER_BYTES];
	char		*cause = NULL, path[256];

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	journal_close(&j);

	/* Segment 2's creation stopped 12 bytes into its header. */
	doc_segment_header(2, header);
	segment_path(f, 2, path, sizeof path);
	append_bytes(path, header, 12);

	assert_replays(f->dir, 0, 3, 12);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.segment, 1);
	journal_close(&j);

	/* Segment 1 itself, empty: journal_open starts afresh. */
	unit_remove_tree(f->dir);
	assert_int_equal(mkdir(f->dir, 0700), 0);
	segment_path(f, 1, path, sizeof path);
	append_bytes(path, "", 0);
	assert_replays(f->dir, 0, 0, 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.size, DOC_SEGMENT_HEADER_BYTES);
	journal_close(&j);
}

static void
apply_failure_stops_replay(void **state)
{
	struct fixture		*f = *state;
	struct journal		 j;
	struct collected	 c = { 0 };
	char			*cause = NULL;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 6, NULL);
	journal_close(&j);

	c.fail_at = 4;
	cause = NULL;
	assert_int_equal(journal_replay(f->dir, 0, collect, &c, NULL, &cause),
	    -1);
	assert_int_equal(c.count, 3);
	assert_non_null(strstr(cause, "applying the record failed"));
	free(cause);
	free(c.records);
}

/* Replay with a hint: what the hint saw, and what apply saw. */
struct hinted {
	size_t	hints;		/* hint calls so far */
	size_t	applied;	/* apply calls so far */
	size_t	most_ahead;	/* hints - applied, at most */
	size_t	fail_at;	/* apply fails on this one (1-based) */
};

static void
hinted_hint(struct journal_record *r, void *arg)
{
	struct hinted	*h = arg;

	assert_int_equal(r->hint, 0);	/* decode leaves none */
	r->hint = ++h->hints;
	if (h->hints - h->applied > h->most_ahead)
		h->most_ahead = h->hints - h->applied;
}

static int
hinted_apply(const struct journal_record *r, void *arg)
{
	struct hinted		*h = arg;
	struct journal_record	 want;

	if (h->fail_at != 0 && h->applied + 1 == h->fail_at)
		return 7;
	/* Each record reaches apply once, in order, with its own note. */
	h->applied++;
	assert_int_equal(r->hint, h->applied);
	make_record(&want, (unsigned)h->applied - 1);
	assert_record_equal(r, &want);
	return 0;
}

/*
 * journal_replay_hinted: every record is hinted before it is applied,
 * no further than a few records ahead, and the note the hint leaves in
 * the record reaches apply with that record; a torn tail is still cut
 * after the records before it are applied, and an apply that fails
 * still stops the replay there.
 */
static void
hinted_replay_hints_each_record_before_apply(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct journal_replay_stats	 stats;
	struct hinted			 h = { 0 };
	char				*cause = NULL, path[256];
	uint64_t			 ends[30];

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 30, ends);
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(truncate(path, (off_t)ends[29] - 7), 0);

	assert_int_equal(journal_replay_hinted(f->dir, 0, 0, hinted_apply,
	    hinted_hint, &h, &stats, &cause), 0);
	assert_int_equal(h.applied, 29);
	assert_int_equal(h.hints, 29);
	assert_int_equal(stats.records, 29);
	assert_int_equal(stats.truncated_bytes, ends[29] - 7 - ends[28]);
	assert_true(h.most_ahead > 1);
	assert_true(h.most_ahead <= 8);
	assert_int_equal(file_size(path), ends[28]);

	memset(&h, 0, sizeof h);
	h.fail_at = 12;
	assert_int_equal(journal_replay_hinted(f->dir, 0, 0, hinted_apply,
	    hinted_hint, &h, NULL, &cause), -1);
	assert_int_equal(h.applied, 11);
	assert_non_null(strstr(cause, "applying the record failed"));
	free(cause);
}

/* ---- append failures ------------------------------------------------------ */

/*
 * A real short write: the file size limit lets part of the append out,
 * then refuses the rest with EFBIG.  The segment must be cut back.
 */
static void
short_write_is_truncated_back(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	struct rlimit	 saved, limit;
	uint8_t		 buf[4 * JOURNAL_MAX_RECORD_BYTES];
	struct iovec	 iov;
	char		*cause = NULL, path[256];
	uint64_t	 size;
	size_t		 used = 0;
	unsigned	 n;
	int		 rv, saved_errno;
	void		(*old)(int);

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	size = j.size;

	for (n = 3; n < 7; n++)
		used += encode(n, buf + used, sizeof buf - used);
	iov.iov_base = buf;
	iov.iov_len = used;

	old = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
	limit = saved;
	limit.rlim_cur = size + used / 2;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &limit), 0);
	rv = journal_append(&j, &iov, 1, &cause);
	saved_errno = errno;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
	signal(SIGXFSZ, old);

	assert_int_equal(rv, -1);
	assert_int_equal(saved_errno, EFBIG);
	assert_non_null(cause);
	free(cause);
	cause = NULL;
	assert_int_equal(j.size, size);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(file_size(path), size);

	/* The truncate worked, so the journal goes on. */
	assert_int_equal(journal_append(&j, &iov, 1, &cause), 0);
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);
	assert_replays(f->dir, 0, 7, 0);
}

/* ---- the zero tail (doc/journal.md, "The zero tail") ---------------- */

/* A segment size whose zero chunk is small: the tests stay small too. */
#define ZT_SEGMENT_BYTES	(64 * 1024)

/* Replay read-write and read-only; both must see count records, clean. */
static void
assert_zero_tail_clean(const struct fixture *f, size_t count, uint64_t end,
    uint64_t file)
{
	struct collected		c = { 0 };
	struct journal_replay_stats	stats;
	char				*cause = NULL;
	int				flags;

	for (flags = JOURNAL_REPLAY_READONLY; flags >= 0; flags -= 1) {
		memset(&stats, 0xaa, sizeof stats);
		assert_int_equal(journal_replay(f->dir, flags, collect, &c,
		    &stats, &cause), 0);
		assert_null(cause);
		assert_int_equal(stats.records, count);
		assert_int_equal(c.count, count);
		/* Only the records count: the zeros are neither. */
		assert_int_equal(stats.bytes, end - DOC_SEGMENT_HEADER_BYTES);
		assert_int_equal(stats.truncated_bytes, 0);
		assert_int_equal(stats.torn_segment, 0);
		assert_int_equal(stats.end_segment, 1);
		assert_int_equal(stats.end_offset, end);
		assert_int_equal(stats.zero_bytes, file - end);
		free(c.records);
		memset(&c, 0, sizeof c);
	}
}

static void
zero_tail_is_the_clean_end(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	char		*cause = NULL, path[256];
	uint64_t	 end, file;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 5, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	segment_path(f, 1, path, sizeof path);
	file = (uint64_t)file_size(path);
	/* Zeros ahead: the file is longer than its records. */
	assert_true(file >= end + journal_zero_chunk(ZT_SEGMENT_BYTES));
	assert_int_equal(j.zeroed, file);
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);

	/* Clean, twice: nothing was cut (the zeros are the writer's). */
	assert_zero_tail_clean(f, 5, end, file);
	assert_int_equal(file_size(path), file);

	/* The writer finds the logical end, not st_size, and goes on. */
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.size, end);
	assert_int_equal(j.zeroed, file);
	append_records(&j, 5, 2, NULL);
	/* Over the zeros: the file did not grow. */
	assert_int_equal(file_size(path), file);
	end = j.size;
	journal_close(&j);
	assert_zero_tail_clean(f, 7, end, file);

	/* The same from replay's word for it. */
	assert_int_equal(journal_open_end(&j, f->dir, 1, end, &cause), 0);
	assert_int_equal(j.size, end);
	journal_close(&j);
}

static void
torn_record_over_zeros_is_cut(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 rec[JOURNAL_MAX_RECORD_BYTES];
	char		*cause = NULL, path[256];
	uint64_t	 end, file;
	size_t		 len;
	int		 fd;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 4, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);
	file = (uint64_t)file_size(path);

	/* Half of the next record written over the zeros, then a crash. */
	len = encode(4, rec, sizeof rec);
	assert_true((fd = open(path, O_WRONLY)) != -1);
	assert_int_equal(pwrite(fd, rec, len / 2, (off_t)end),
	    (ssize_t)(len / 2));
	close(fd);

	assert_replays(f->dir, 0, 4, file - end);
	assert_int_equal(file_size(path), end);
	assert_replays(f->dir, 0, 4, 0);
}

static void
zeros_then_a_record_are_corruption(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 rec[JOURNAL_MAX_RECORD_BYTES];
	char				*cause = NULL, path[256], want[64];
	uint64_t			 end, file;
	size_t				 len;
	int				 fd;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);
	file = (uint64_t)file_size(path);

	/* A whole record past a hole of zeros: once-durable bytes lost. */
	len = encode(3, rec, sizeof rec);
	assert_true(end + 1024 + len <= file);
	assert_true((fd = open(path, O_WRONLY)) != -1);
	assert_int_equal(pwrite(fd, rec, len, (off_t)(end + 1024)),
	    (ssize_t)len);
	close(fd);

	errno = 0;
	assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof want, "offset %" PRIu64 ":", end);
	if (cause == NULL || strstr(cause, want) == NULL)
		fail_msg("the cause does not name %s: %s", want,
		    cause != NULL ? cause : "(none)");
	free(cause);
	cause = NULL;
	free(c.records);
	memset(&c, 0, sizeof c);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(file_size(path), file);

	/*
	 * Read-only (a reader beside a live broker), it looks again in case
	 * a round was going over the zeros: damage stays damage.
	 */
	errno = 0;
	assert_int_equal(journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
	    collect, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	assert_non_null(cause);
	assert_non_null(strstr(cause, want));
	free(cause);
	free(c.records);
}

static void
sealed_segment_with_zero_tail_is_corruption(void **state)
{
	struct fixture			*f = *state;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 zeros[4096];
	char				*cause = NULL, path[256];

	assert_int_equal(mkdir(f->dir, 0700), 0);
	make_segment(f, 1, 0, 3);
	segment_path(f, 1, path, sizeof path);
	memset(zeros, 0, sizeof zeros);
	append_bytes(path, zeros, sizeof zeros);
	make_segment(f, 2, 3, 2);

	errno = 0;
	assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	if (cause == NULL || strstr(cause, "later segments follow") == NULL)
		fail_msg("not refused as a sealed segment: %s",
		    cause != NULL ? cause : "(none)");
	free(cause);
	free(c.records);
}

static void
rotation_cuts_the_zero_tail(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];
	uint64_t			 end, chunk;
	int				 i;

	chunk = journal_zero_chunk(ZT_SEGMENT_BYTES);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	/* However often it runs, never past the segment and one chunk. */
	for (i = 0; i < 64; i++) {
		assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES,
		    &cause), 0);
		assert_true(j.zeroed <= ZT_SEGMENT_BYTES + chunk);
		if (j.size < ZT_SEGMENT_BYTES)
			assert_true(j.zeroed >= j.size + chunk);
		j.size += chunk / 2;	/* as if records had gone over */
	}
	j.size -= 64 * (chunk / 2);
	end = j.size;
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_int_equal(journal_sync(&j, &cause), 0);
	assert_int_equal(journal_rotate(&j, &cause), 0);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(file_size(path), end);
	append_records(&j, 3, 2, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	journal_close(&j);

	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_int_equal(stats.records, 5);
	assert_int_equal(stats.segments, 2);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(stats.end_segment, 2);
	assert_true(stats.zero_bytes > 0);
	free(c.records);
}

/*
 * Zeros that cannot be written (the file size limit, as a full disk):
 * not a journal failure.  The handle appends as before and replay reads
 * whatever zeros did land as the clean end.
 */
static void
failed_zero_write_is_not_a_failure(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	struct rlimit	 saved, limit;
	char		*cause = NULL, path[256];
	uint64_t	 end;
	int		 rv, saved_errno;
	void		(*old)(int);

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	end = j.size;

	old = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
	limit = saved;
	limit.rlim_cur = end + 300;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &limit), 0);
	rv = journal_prezero(&j, ZT_SEGMENT_BYTES, &cause);
	saved_errno = errno;
	/* Rate-limited: a second call at once does not try. */
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, NULL), 0);
	/* A record still fits under the limit: appends go on. */
	append_records(&j, 3, 1, NULL);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
	signal(SIGXFSZ, old);

	assert_int_equal(rv, -1);
	assert_int_equal(saved_errno, EFBIG);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "writing zeros ahead"));
	free(cause);
	cause = NULL;
	assert_true(j.zero_retry_at != 0);
	end = j.size;
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);
	assert_zero_tail_clean(f, 4, end, (uint64_t)file_size(path));
}

/*
 * The segment's fd swapped for a read-only one: the write fails, and so
 * does the truncate, so the handle refuses everything after.
 */
static void
failed_write_and_truncate_poison_the_handle(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 buf[JOURNAL_MAX_RECORD_BYTES];
	struct iovec	 iov;
	char		*cause = NULL, path[256];
	uint64_t	 size;
	int		 ro;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 2, NULL);
	size = j.size;
	segment_path(f, 1, path, sizeof path);
	assert_true((ro = open(path, O_RDONLY)) != -1);
	assert_int_equal(dup2(ro, j.fd), j.fd);
	close(ro);

	iov.iov_base = buf;
	iov.iov_len = encode(2, buf, sizeof buf);
	assert_int_equal(journal_append(&j, &iov, 1, &cause), -1);
	assert_int_equal(errno, EBADF);
	assert_non_null(strstr(cause, "truncating back"));
	free(cause);
	cause = NULL;
	assert_int_equal(j.size, size);
	assert_int_equal(file_size(path), size);

	assert_int_equal(journal_append(&j, &iov, 1, &cause), -1);
	assert_int_equal(errno, EIO);
	free(cause);
	cause = NULL;
	assert_int_equal(journal_sync(&j, &cause), -1);
	assert_int_equal(errno, EIO);
	free(cause);
	journal_close(&j);
	assert_replays(f->dir, 0, 2, 0);
}

/* fdatasync on a pipe fails (EINVAL): a failed sync is never retried. */
static void
failed_sync_poisons_the_handle(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 buf[JOURNAL_MAX_RECORD_BYTES];
	struct iovec	 iov;
	char		*cause = NULL;
	int		 p[2];

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(dup2(p[1], j.fd), j.fd);
	close(p[0]);
	close(p[1]);

	assert_int_equal(journal_sync(&j, &cause), -1);
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(cause, "fdatasync"));
	free(cause);
	cause = NULL;

	iov.iov_base = buf;
	iov.iov_len = encode(0, buf, sizeof buf);
	assert_int_equal(journal_append(&j, &iov, 1, &cause), -1);
	assert_int_equal(errno, EIO);
	free(cause);
	cause = NULL;
	assert_int_equal(journal_sync(&j, &cause), -1);
	free(cause);
	journal_close(&j);
}

/* ---- format 2: rounds (doc/journal.md, "Rounds over the zero tail") -- */

/*
 * A format 2 segment built from the document: a version 2 header, then
 * records of form 2 (a 24-byte prefix naming the round's start, then a
 * form 1 record) written at given offsets.  The file is one buffer.
 */
struct rounds {
	uint8_t	 file[16384];
	size_t	 end;			/* the records' end */
	size_t	 at[8];			/* where record i begins */
	size_t	 len[8];		/* its bytes, prefix included */
};

static void
rounds_header(struct rounds *rs)
{
	memset(rs, 0, sizeof *rs);
	memcpy(rs->file, "IDEMJNL", 8);
	put_le(rs->file + 8, 2, 4);		/* format version 2 */
	put_le(rs->file + 16, 1, 8);		/* segment 1 */
	crypto_shorthash(rs->file + 24, rs->file, 24, doc_key);
	rs->end = DOC_SEGMENT_HEADER_BYTES;
}

/* Record n in form 2, of the round that began at round_start. */
static size_t
encode_form2(unsigned n, uint64_t round_start, uint8_t *p, size_t size)
{
	uint8_t	check[20];
	size_t	len;

	assert_true(size > 24);
	len = encode(n, p + 24, size - 24);
	memcpy(p, "\xff" "JRD", 4);
	put_le(p + 4, 0, 4);
	put_le(p + 8, round_start, 8);
	/* The check: prefix bytes 4..15, then the inner record's checksum. */
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + 24 + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	return 24 + len;
}

/* Record n of the round that began at round_start, at the end. */
static void
rounds_add(struct rounds *rs, unsigned n, uint64_t round_start)
{
	rs->at[n] = rs->end;
	rs->len[n] = encode_form2(n, round_start, rs->file + rs->end,
	    sizeof rs->file - rs->end);
	rs->end += rs->len[n];
}

static void
rounds_write(const struct fixture *f, const struct rounds *rs, size_t size)
{
	char	path[256];

	assert_int_equal(mkdir(f->dir, 0700), 0);
	segment_path(f, 1, path, sizeof path);
	append_bytes(path, rs->file, size);
}

/*
 * Two rounds synced (records 0-1 from 32, record 2 from their end), the
 * zeros ahead, then a third round (records 3-5) of which the disk kept
 * the later records but not the first sector: the round never completed
 * its fdatasync, so nothing of it was acknowledged.  Replay cuts at the
 * hole, keeps 0-2 (read-only: reports it, cuts nothing).  With format 1
 * this state was corruption and idemd refused to start.
 */
static void
torn_round_over_zeros_is_cut(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];
	size_t				 r2, r3, size, half;

	rounds_header(&rs);
	rounds_add(&rs, 0, 32);
	rounds_add(&rs, 1, 32);
	r2 = rs.end;
	rounds_add(&rs, 2, r2);
	r3 = rs.end;
	rounds_add(&rs, 3, r3);
	rounds_add(&rs, 4, r3);
	rounds_add(&rs, 5, r3);
	size = rs.end + 4096;			/* the zeros ahead */
	assert_true(size <= sizeof rs.file);

	/* Whole, it replays whole: form 2 records, the zeros the end. */
	rounds_write(f, &rs, size);
	assert_replays(f->dir, 0, 6, 0);
	segment_path(f, 1, path, sizeof path);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(f->dir), 0);

	/* The round's first record half there, the rest zeros: its sector. */
	half = rs.len[3] / 2;
	memset(rs.file + r3 + half, 0, rs.len[3] - half);
	rounds_write(f, &rs, size);

	memset(&stats, 0, sizeof stats);
	assert_int_equal(journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
	    collect, &c, &stats, &cause), 0);
	assert_null(cause);
	assert_int_equal(c.count, 3);
	assert_int_equal(stats.torn_segment, 1);
	assert_int_equal(stats.torn_offset, r3);
	assert_int_equal(file_size(path), size);
	free(c.records);
	memset(&c, 0, sizeof c);

	assert_replays(f->dir, 0, 3, size - r3);
	assert_int_equal(file_size(path), r3);
	assert_replays(f->dir, 0, 3, 0);
}

/*
 * The same hole, but a record of a later round follows it (its round
 * began past the hole, so the hole was synced once): corruption, as
 * before, nothing changed.  So is a record after the hole that names no
 * round (form 1 in a format 2 segment).
 */
static void
hole_then_a_later_round_is_corruption(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256], want[64];
	size_t				 r2, r3, size;
	int				 pass;

	for (pass = 0; pass < 2; pass++) {
		rounds_header(&rs);
		rounds_add(&rs, 0, 32);
		rounds_add(&rs, 1, 32);
		r2 = rs.end;
		rounds_add(&rs, 2, r2);
		rounds_add(&rs, 3, r2);
		r3 = rs.end;
		if (pass == 0)
			rounds_add(&rs, 4, r3);	/* a later round */
		else
			rs.end += encode(4, rs.file + rs.end,
			    sizeof rs.file - rs.end);	/* no round */
		size = rs.end + 4096;
		/* Record 2, the second round's first, lost: zeros. */
		memset(rs.file + r2, 0, rs.len[2]);
		rounds_write(f, &rs, size);
		segment_path(f, 1, path, sizeof path);

		errno = 0;
		assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
		assert_int_equal(errno, EINVAL);
		snprintf(want, sizeof want, "offset %zu:", r2);
		if (cause == NULL || strstr(cause, want) == NULL)
			fail_msg("the cause does not name %s: %s", want,
			    cause != NULL ? cause : "(none)");
		free(cause);
		cause = NULL;
		assert_int_equal(file_size(path), size);
		free(c.records);
		memset(&c, 0, sizeof c);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(rmdir(f->dir), 0);
	}
}

/* Replay's decoder, of either form (journal_decode is form 1 only). */
static enum journal_decode_result
decode2(const uint8_t *in, size_t length, struct journal_record *r,
    size_t *used)
{
	const char	*why;

	return journal_record_decode(in, length, r, used, &why);
}

/*
 * Rewrite the round prefix of a form 2 record at p: its reserved field
 * and round start, with a check made over them, so that only the field
 * under test is wrong (the check is right for what it covers).
 */
static void
reprefix(uint8_t *p, uint32_t reserved, uint64_t round_start)
{
	uint8_t	check[20];

	put_le(p + 4, reserved, 4);
	put_le(p + 8, round_start, 8);
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + 24 + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
}

/* Replay of a segment 1 built as rs, size bytes: refused, naming x. */
static void
rounds_assert_refused(const struct fixture *f, const struct rounds *rs,
    size_t size, size_t x)
{
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256], want[64];

	rounds_write(f, rs, size);
	segment_path(f, 1, path, sizeof path);
	errno = 0;
	assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof want, "offset %zu:", x);
	if (cause == NULL || strstr(cause, want) == NULL)
		fail_msg("the cause does not name %s: %s", want,
		    cause != NULL ? cause : "(none)");
	free(cause);
	free(c.records);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(file_size(path), size);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(f->dir), 0);
}

/*
 * A format 1 segment ending in zeros: no writer put zeros ahead there (an
 * older idemd wrote it, and this one appends to it without), so they are
 * a torn append's, with the verdict the journal gave before format 2: a
 * torn tail, cut with its reason, counted in truncated_bytes, no zero
 * tail.  Fewer zeros than a record header are "runs past the end".  The
 * same zeros after a format 2 segment's records are its clean end.
 */
static void
format_one_zero_tail_is_a_torn_tail(void **state)
{
	struct fixture			*f = *state;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	struct rounds			 rs;
	uint8_t				 zeros[4096];
	char				*cause = NULL, path[256];
	static const size_t		 sizes[] = { sizeof zeros, 10 };
	static const char *const	 whys[] = { "bad record magic",
	    "record runs past the end of the file" };
	uint64_t			 end;
	size_t				 i;

	memset(zeros, 0, sizeof zeros);
	segment_path(f, 1, path, sizeof path);
	for (i = 0; i < 2; i++) {
		assert_int_equal(mkdir(f->dir, 0700), 0);
		make_segment(f, 1, 0, 3);		/* format 1 */
		end = (uint64_t)file_size(path);
		append_bytes(path, zeros, sizes[i]);

		/* Read-only: reported, the file left as it is. */
		memset(&stats, 0xaa, sizeof stats);
		assert_int_equal(journal_replay(f->dir,
		    JOURNAL_REPLAY_READONLY, collect, &c, &stats, &cause), 0);
		assert_null(cause);
		assert_int_equal(c.count, 3);
		assert_int_equal(stats.torn_segment, 1);
		assert_int_equal(stats.torn_offset, end);
		assert_string_equal(stats.torn_why, whys[i]);
		assert_int_equal(stats.truncated_bytes, sizes[i]);
		assert_int_equal(stats.zero_bytes, 0);
		assert_int_equal(file_size(path), end + sizes[i]);
		free(c.records);
		memset(&c, 0, sizeof c);

		/* Read-write: cut at the last record's end, once. */
		assert_replays(f->dir, 0, 3, sizes[i]);
		assert_int_equal(file_size(path), end);
		assert_replays(f->dir, 0, 3, 0);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(rmdir(f->dir), 0);
	}

	/* Format 2, the same zeros: the clean end, nothing cut. */
	rounds_header(&rs);
	rounds_add(&rs, 0, 32);
	rounds_add(&rs, 1, 32);
	rounds_write(f, &rs, rs.end + sizeof zeros);
	memset(&stats, 0xaa, sizeof stats);
	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_null(cause);
	assert_int_equal(c.count, 2);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(stats.torn_segment, 0);
	assert_int_equal(stats.zero_bytes, sizeof zeros);
	assert_int_equal(file_size(path), rs.end + sizeof zeros);
	free(c.records);
}

/*
 * The torn-round cut is for the last segment only: a sealed segment was
 * synced whole before the next was begun, so a hole in it followed by
 * valid records of the hole's own round is damage, refused.
 */
static void
torn_round_shape_in_a_sealed_segment_is_corruption(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256], want[64];
	size_t				 r3;

	rounds_header(&rs);
	rounds_add(&rs, 0, 32);
	rounds_add(&rs, 1, 32);
	r3 = rs.end;
	rounds_add(&rs, 2, r3);
	rounds_add(&rs, 3, r3);
	rounds_add(&rs, 4, r3);
	memset(rs.file + r3, 0, 60);		/* the round's first sector */
	rounds_write(f, &rs, rs.end);		/* sealed: no zeros */
	make_segment(f, 2, 5, 2);
	segment_path(f, 1, path, sizeof path);

	errno = 0;
	assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof want, "0000000000000001.jnl offset %zu:", r3);
	if (cause == NULL || strstr(cause, want) == NULL)
		fail_msg("the cause does not name %s: %s", want,
		    cause != NULL ? cause : "(none)");
	free(cause);
	free(c.records);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(file_size(path), rs.end);
}

/*
 * A round prefix is whole or the record is BAD: any byte of it changed
 * (magic, reserved field, round start, check) fails the decode; a
 * reserved field that is not zero fails it even under a check made
 * over it.  In replay, a record after a hole whose prefix was damaged
 * carries no round, so the hole stays corruption: a later round's record
 * whose round start reads as before the hole (damaged, or with reserved
 * bits under a good check) is not taken for the hole's own round.
 */
static void
damaged_round_prefix_carries_no_round(void **state)
{
	struct fixture			*f = *state;
	struct journal_record		 r;
	struct rounds			 rs;
	uint8_t				 rec[JOURNAL_MAX_RECORD_BYTES + 24];
	size_t				 len, used, i, r2, r3;
	int				 pass, bit;

	len = encode_form2(7, 4096, rec, sizeof rec);
	assert_int_equal(decode2(rec, len, &r, &used),
	    JOURNAL_DECODE_OK);
	assert_int_equal(r.form, 2);
	assert_int_equal(r.round_start, 4096);
	assert_int_equal(used, len);
	for (i = 0; i < 24; i++) {
		for (bit = 0; bit < 8; bit++) {
			rec[i] ^= (uint8_t)(1 << bit);
			if (decode2(rec, len, &r, &used) ==
			    JOURNAL_DECODE_OK)
				fail_msg("prefix byte %zu bit %d flipped "
				    "decodes", i, bit);
			rec[i] ^= (uint8_t)(1 << bit);
		}
	}
	reprefix(rec, 1, 4096);			/* reserved, good check */
	assert_int_equal(decode2(rec, len, &r, &used),
	    JOURNAL_DECODE_BAD);
	reprefix(rec, 0, 4096);
	assert_int_equal(decode2(rec, len, &r, &used),
	    JOURNAL_DECODE_OK);

	for (pass = 0; pass < 2; pass++) {
		rounds_header(&rs);
		rounds_add(&rs, 0, 32);
		r2 = rs.end;
		rounds_add(&rs, 1, r2);
		rounds_add(&rs, 2, r2);
		r3 = rs.end;
		rounds_add(&rs, 3, r3);		/* a later round */
		memset(rs.file + r2, 0, 60);	/* a synced round's sector */
		if (pass == 0)			/* round start damaged */
			put_le(rs.file + rs.at[3] + 8, r2, 8);
		else				/* reserved, good check */
			reprefix(rs.file + rs.at[3], 0x100, r2);
		rounds_assert_refused(f, &rs, rs.end + 4096, r2);
	}
}

/*
 * A hole strictly inside the last round (records of the round before it
 * and after it, all naming the round's start): the round never completed
 * its fsync, so replay cuts at the hole, not at the round's start, and
 * keeps the round's records before it (they are cut nowhere else: a torn
 * tail keeps what decodes).  The same hole followed by a record of a
 * later round (it began past the hole, so the hole was synced) is
 * corruption.
 */
static void
hole_inside_a_round(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];
	size_t				 r2, size;

	rounds_header(&rs);
	rounds_add(&rs, 0, 32);
	r2 = rs.end;
	rounds_add(&rs, 1, r2);
	rounds_add(&rs, 2, r2);
	rounds_add(&rs, 3, r2);
	rounds_add(&rs, 4, r2);
	size = rs.end + 4096;
	memset(rs.file + rs.at[2], 0, 60);	/* inside the round */
	rounds_write(f, &rs, size);
	segment_path(f, 1, path, sizeof path);

	memset(&stats, 0, sizeof stats);
	assert_int_equal(journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
	    collect, &c, &stats, &cause), 0);
	assert_null(cause);
	assert_int_equal(c.count, 2);
	assert_int_equal(stats.torn_offset, rs.at[2]);
	assert_int_equal(stats.truncated_bytes, size - rs.at[2]);
	free(c.records);
	assert_replays(f->dir, 0, 2, size - rs.at[2]);
	assert_int_equal(file_size(path), rs.at[2]);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(f->dir), 0);

	/* Records 1-2 one round, the hole in 2, then a later round's 3. */
	rounds_header(&rs);
	rounds_add(&rs, 0, 32);
	r2 = rs.end;
	rounds_add(&rs, 1, r2);
	rounds_add(&rs, 2, r2);
	rounds_add(&rs, 3, rs.end);
	memset(rs.file + rs.at[2], 0, 60);
	rounds_assert_refused(f, &rs, rs.end + 4096, rs.at[2]);
}

/*
 * The writer in a format 2 segment: each record of a round goes out after
 * a prefix naming the logical end the round started from, a record split
 * between the ring's two pieces included; the file reads as the
 * document says and replays whole.
 */
static void
writer_prefixes_each_record_with_its_round(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 ring[3 * JOURNAL_MAX_RECORD_BYTES], *file, check[20];
	uint8_t		 sum[8];
	struct iovec	 iov[2];
	char		*cause = NULL, path[256];
	uint64_t	 start, want;
	size_t		 used = 0, size, at, len, k;
	unsigned	 n;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.format, 2);
	append_records(&j, 0, 2, NULL);		/* two rounds of one */
	start = j.size;
	/* One round of three records, the second split by the ring's end. */
	for (n = 2; n < 5; n++)
		used += encode(n, ring + used, sizeof ring - used);
	iov[0].iov_base = ring;
	iov[0].iov_len = (size_t)(used / 2);
	iov[1].iov_base = ring + used / 2;
	iov[1].iov_len = used - used / 2;
	assert_int_equal(journal_append(&j, iov, 2, &cause), 0);
	assert_int_equal(j.size, start + used + 3 * 24);
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);

	segment_path(f, 1, path, sizeof path);
	file = read_file(path, &size);
	at = DOC_SEGMENT_HEADER_BYTES;
	for (k = 0; k < 5; k++) {
		assert_true(at + 40 <= size);
		assert_memory_equal(file + at, "\xff" "JRD", 4);
		want = k == 0 ? DOC_SEGMENT_HEADER_BYTES : k == 1 ?
		    DOC_SEGMENT_HEADER_BYTES + 24 + encode(0, ring, sizeof ring) :
		    start;
		for (n = 0; n < 8; n++)
			assert_int_equal(file[at + 8 + n],
			    (uint8_t)(want >> (8 * n)));
		memcpy(check, file + at + 4, 12);
		memcpy(check + 12, file + at + 24 + 8, 8);
		crypto_shorthash(sum, check, sizeof check, doc_key);
		assert_memory_equal(sum, file + at + 16, 8);
		assert_memory_equal(file + at + 24, "\xff" "JRC", 4);
		len = (size_t)file[at + 28] | (size_t)file[at + 29] << 8;
		at += 24 + 16 + len;
	}
	assert_int_equal(at, size);
	free(file);
	assert_replays(f->dir, 0, 5, 0);
}

/*
 * A format 1 segment (an older idemd's, upgraded): appended to as
 * before, records of form 1, no zeros ahead (a torn round over zeros
 * could not be told from damage there); the next segment is format 2.
 */
static void
format_one_segment_is_appended_as_before(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		*file;
	char		*cause = NULL, path[256];
	size_t		 size, before;

	assert_int_equal(mkdir(f->dir, 0700), 0);
	make_segment(f, 1, 0, 2);
	segment_path(f, 1, path, sizeof path);
	before = (size_t)file_size(path);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.format, 1);
	append_records(&j, 2, 2, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	assert_int_equal(j.zeroed, j.size);
	assert_int_equal((uint64_t)file_size(path), j.size);
	file = read_file(path, &size);
	assert_memory_equal(file + before, "\xff" "JRC", 4);
	free(file);
	assert_int_equal(journal_rotate(&j, &cause), 0);
	assert_int_equal(j.format, 2);
	append_records(&j, 4, 1, NULL);
	journal_close(&j);
	assert_replays(f->dir, 0, 5, 0);
}

/*
 * Format 1 segments stay form 1: a form 2 record there is not theirs.
 * Its inner record is whole, so it reads as a valid record after a bad
 * one: refused as corruption, nothing cut.
 */
static void
form_two_record_in_a_format_one_segment_is_refused(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];
	uint64_t			 end;

	assert_int_equal(mkdir(f->dir, 0700), 0);
	make_segment(f, 1, 0, 2);	/* format 1, by hand */
	segment_path(f, 1, path, sizeof path);
	end = (uint64_t)file_size(path);
	rounds_header(&rs);
	rounds_add(&rs, 2, end);
	segment_path(f, 1, path, sizeof path);
	append_bytes(path, rs.file + DOC_SEGMENT_HEADER_BYTES, rs.len[2]);
	errno = 0;
	assert_int_equal(replay(f->dir, &c, &stats, &cause), -1);
	assert_int_equal(errno, EINVAL);
	assert_non_null(cause);
	assert_non_null(strstr(cause, "round prefix in a format 1 segment"));
	free(cause);
	free(c.records);
	assert_int_equal(file_size(path), end + rs.len[2]);
}

/*
 * A read-only replay beside a live broker, done to order: apply runs
 * between replay's reads, and does to the segment what the broker does
 * meanwhile (doc/journal.md, "Readers beside a live broker").
 */
struct live_step {
	struct collected	 c;
	size_t			 at;	/* after this many records applied */
	const char		*path;
	off_t			 cut;	/* >= 0: truncate the segment here */
	const uint8_t		*rec;	/* else: write rec (len) at offset */
	size_t			 len;
	off_t			 offset;
};

static int
live_apply(const struct journal_record *r, void *arg)
{
	struct live_step	*ls = arg;
	int			 fd;

	assert_int_equal(collect(r, &ls->c), 0);
	if (ls->c.count != ls->at)
		return 0;
	assert_true((fd = open(ls->path, O_WRONLY)) != -1);
	if (ls->cut >= 0)
		assert_int_equal(ftruncate(fd, ls->cut), 0);
	else
		assert_int_equal(pwrite(fd, ls->rec, ls->len, ls->offset),
		    (ssize_t)ls->len);
	close(fd);
	return 0;
}

/*
 * The broker cuts the zero tail (rotation, a clean stop) while a reader
 * is part way through the segment: the reader must not touch pages past
 * the new end (a mapping made at the old size raised SIGBUS there).
 */
static void
readonly_replay_survives_a_cut_zero_tail(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct live_step		 ls = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256];
	uint64_t			 end;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 4, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);
	/* Zeros over whole pages past the page of the end. */
	assert_true((uint64_t)file_size(path) >= (end | 4095) + 1 + 4096);

	ls.at = 1;
	ls.path = path;
	ls.cut = (off_t)end;
	assert_int_equal(journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
	    live_apply, &ls, &stats, &cause), 0);
	assert_null(cause);
	assert_int_equal(ls.c.count, 4);
	assert_int_equal(stats.records, 4);
	assert_int_equal(stats.end_offset, end);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(file_size(path), end);
	free(ls.c.records);
}

/*
 * A round going over the zero tail as the reader reads: it saw zeros
 * where the round begins and the round's later record whole.  Looking
 * again finds the round complete: clean, every record (not corruption).
 */
static void
readonly_replay_looks_again_at_a_live_round(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j;
	struct live_step		 ls = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 first[JOURNAL_MAX_RECORD_BYTES];
	uint8_t				 second[JOURNAL_MAX_RECORD_BYTES];
	char				*cause = NULL, path[256];
	uint64_t			 end;
	size_t				 len1, len2;
	int				 fd;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES, &cause), 0);
	end = j.size;
	journal_close(&j);
	segment_path(f, 1, path, sizeof path);

	/* The round's second record landed, its first not yet. */
	len1 = encode_form2(3, end, first, sizeof first);
	len2 = encode_form2(4, end, second, sizeof second);
	assert_true((fd = open(path, O_WRONLY)) != -1);
	assert_int_equal(pwrite(fd, second, len2, (off_t)(end + len1)),
	    (ssize_t)len2);
	close(fd);

	/* It lands once the reader has read past the records before it. */
	ls.at = 3;
	ls.path = path;
	ls.cut = -1;
	ls.rec = first;
	ls.len = len1;
	ls.offset = (off_t)end;
	assert_int_equal(journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
	    live_apply, &ls, &stats, &cause), 0);
	assert_null(cause);
	assert_int_equal(ls.c.count, 5);
	assert_int_equal(stats.records, 5);
	assert_int_equal(stats.end_offset, end + len1 + len2);
	assert_int_equal(stats.has_corrupt_offset, 0);
	free(ls.c.records);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(round_trip_keeps_every_field),
		T(slot_recipient_round_trips),
		T(encoding_matches_the_document),
		T(decode_rejects_every_flipped_byte),
		T(decode_is_short_for_every_truncation),
		T(decode_checks_fields_behind_a_good_checksum),
		T(encode_refuses_small_buffers_and_bad_fields),
		T(effect_encoding_matches_the_document),
		T(effect_record_with_the_largest_result_round_trips),
		T(effect_decode_checks_fields_behind_a_good_checksum),
		T(missing_dir_is_an_empty_journal),
		T(open_creates_segment_one),
		T(append_then_replay_gives_the_same_records_in_order),
		T(open_appends_after_existing_records),
		T(torn_and_garbage_tails_are_cut_once),
		T(segments_replay_in_numeric_order),
		T(corruption_is_refused_and_left_alone),
		T(short_last_segment_is_removed),
		T(apply_failure_stops_replay),
		T(hinted_replay_hints_each_record_before_apply),
		T(short_write_is_truncated_back),
		T(failed_write_and_truncate_poison_the_handle),
		T(failed_sync_poisons_the_handle),
		T(zero_tail_is_the_clean_end),
		T(torn_record_over_zeros_is_cut),
		T(zeros_then_a_record_are_corruption),
		T(sealed_segment_with_zero_tail_is_corruption),
		T(rotation_cuts_the_zero_tail),
		T(failed_zero_write_is_not_a_failure),
		T(readonly_replay_survives_a_cut_zero_tail),
		T(readonly_replay_looks_again_at_a_live_round),
		T(torn_round_over_zeros_is_cut),
		T(writer_prefixes_each_record_with_its_round),
		T(format_one_segment_is_appended_as_before),
		T(hole_then_a_later_round_is_corruption),
		T(form_two_record_in_a_format_one_segment_is_refused),
		T(format_one_zero_tail_is_a_torn_tail),
		T(torn_round_shape_in_a_sealed_segment_is_corruption),
		T(damaged_round_prefix_carries_no_round),
		T(hole_inside_a_round),
#undef T
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
