/* SPDX-License-Identifier: ISC */
/*
 * test_journal.c: unit tests of broker/store/journal.c: the record codec, the
 * segment format as doc/journal.md describes it (the tests build bytes
 * from the document, not from journal.c's helpers), append and replay,
 * and the line between a torn tail (cut) and corruption (refused).  Each
 * test runs in a fresh mkdtemp directory.  Format 2 (round prefixes,
 * replay's torn-round rule) is tested in test_journal_rounds.c; the
 * helpers both use are in journal_test.c.
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

#include "integration/filter.h"
#include "store.h"
#include "tree.h"
#include "journal_test.h"


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
	uint8_t		 rec[JOURNAL_MAX_RECORD_BYTES];
	char		 path[256];
	uint64_t	 end, file;
	size_t		 len;
	int		 fd;

	end = zero_tailed_segment(f, 4, path, sizeof path);
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
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 rec[JOURNAL_MAX_RECORD_BYTES];
	char				*cause = NULL, path[256], want[64];
	uint64_t			 end, file;
	size_t				 len;
	int				 fd;

	end = zero_tailed_segment(f, 3, path, sizeof path);
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
	/*
	 * However often it runs, never past the segment (the round that
	 * crosses it appends): at least a chunk ahead until then.
	 */
	for (i = 0; i < 64; i++) {
		assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES,
		    &cause), 0);
		assert_true(j.zeroed <= ZT_SEGMENT_BYTES);
		if (j.size + chunk <= ZT_SEGMENT_BYTES)
			assert_true(j.zeroed >= j.size + chunk);
		else if (j.size < ZT_SEGMENT_BYTES)
			assert_true(j.zeroed == ZT_SEGMENT_BYTES);
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
 * A segment rotated because it is full has no zero tail to cut: zeros
 * stop at segment_bytes, the round that crosses it appends, so the file
 * ends at the logical end and the rotation truncates and fsyncs nothing
 * on the journaling thread (doc/journal.md, "The next segment made
 * ahead").  Fails where zeros run a chunk past the segment.
 */
static void
full_segment_has_no_tail_to_cut(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	char		*cause = NULL, path[256];
	unsigned	 n = 0;
	uint64_t	 end;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	while (j.size < ZT_SEGMENT_BYTES) {
		append_records(&j, n++, 1, NULL);
		assert_int_equal(journal_prezero(&j, ZT_SEGMENT_BYTES,
		    &cause), 0);
		assert_true(j.zeroed <= ZT_SEGMENT_BYTES ||
		    j.zeroed == j.size);
	}
	end = j.size;
	segment_path(f, 1, path, sizeof path);
	/* Full: the file ends at its last record, nothing to cut. */
	assert_int_equal(file_size(path), end);
	assert_int_equal(j.zeroed, end);
	assert_int_equal(journal_rotate(&j, &cause), 0);
	assert_int_equal(file_size(path), end);
	append_records(&j, n, 1, NULL);
	journal_close(&j);
	assert_replays(f->dir, 0, n + 1, 0);
}

static void
next_path(const struct fixture *f, uint64_t n, char *out, size_t size)
{
	char	name[JOURNAL_NEXT_NAME_BYTES];

	journal_next_name(n, name);
	snprintf(out, size, "%s/%s", f->dir, name);
}

/*
 * The next segment made ahead: header and zeros written and fsync'd
 * under a name replay ignores, so a crash before the rotation leaves the
 * journal as it was; the rotation renames it into place, and the first
 * round in it writes over zeros already on the disk (the file does not
 * grow).  Fails where the rotation creates the segment itself.
 */
static void
rotation_takes_the_segment_made_ahead(void **state)
{
	struct fixture			*f = *state;
	struct journal			 j, k;
	struct journal_next		 next;
	struct collected		 c = { 0 };
	struct journal_replay_stats	 stats;
	char				*cause = NULL, path[256], tmp[256];
	uint64_t			 chunk, made;

	chunk = journal_zero_chunk(ZT_SEGMENT_BYTES);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 3, NULL);
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 2,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	assert_true(next.fd != -1);
	assert_int_equal(next.number, 2);
	made = next.zeroed;
	assert_int_equal(made, 2 * chunk);
	next_path(f, 2, tmp, sizeof tmp);
	assert_int_equal(file_size(tmp), made);

	/* A crash now: the journal is segment 1, appended to as before. */
	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_int_equal(stats.records, 3);
	assert_int_equal(stats.segments, 1);
	assert_int_equal(stats.end_segment, 1);
	assert_int_equal(journal_open(&k, f->dir, &cause), 0);
	assert_int_equal(k.segment, 1);
	assert_int_equal(k.size, j.size);
	journal_close(&k);

	assert_int_equal(journal_rotate_next(&j, &next, &cause), 0);
	assert_int_equal(next.fd, -1);
	assert_int_equal(j.segment, 2);
	assert_int_equal(j.size, DOC_SEGMENT_HEADER_BYTES);
	assert_int_equal(j.zeroed, made);
	assert_int_equal(access(tmp, F_OK), -1);
	segment_path(f, 2, path, sizeof path);
	assert_int_equal(file_size(path), made);
	/* Over the zeros made ahead: the file keeps its size. */
	append_records(&j, 3, 2, NULL);
	assert_int_equal(file_size(path), made);
	journal_close(&j);

	assert_int_equal(replay(f->dir, &c, &stats, &cause), 0);
	assert_int_equal(stats.records, 5);
	assert_int_equal(stats.segments, 2);
	assert_int_equal(stats.truncated_bytes, 0);
	assert_int_equal(stats.zero_bytes, made - stats.end_offset);
	free(c.records);
}

/*
 * One made ahead for another number (the rotation created the segment
 * itself meanwhile) is dropped, never renamed; and a segment that exists
 * is never replaced by one made ahead (RENAME_NOREPLACE).
 */
static void
segment_made_ahead_never_misplaced(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	struct journal_next next;
	char		*cause = NULL, path[256], tmp[256];
	off_t		 size;

	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	append_records(&j, 0, 2, NULL);
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 3,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	assert_int_equal(journal_rotate_next(&j, &next, &cause), 0);
	assert_int_equal(j.segment, 2);
	assert_int_equal(j.zeroed, DOC_SEGMENT_HEADER_BYTES);
	next_path(f, 3, tmp, sizeof tmp);
	assert_int_equal(access(tmp, F_OK), -1);
	segment_path(f, 3, path, sizeof path);
	assert_int_equal(access(path, F_OK), -1);
	append_records(&j, 2, 1, NULL);

	/* Segment 3 there already (by hand): neither replaced nor reused. */
	assert_int_equal(journal_make_next(j.dir_fd, f->dir, 3,
	    ZT_SEGMENT_BYTES, &next, &cause), 0);
	make_segment(f, 3, 7, 1);
	size = file_size(path);
	assert_int_equal(journal_rotate_next(&j, &next, &cause), -1);
	assert_int_equal(errno, EEXIST);
	free(cause);
	assert_int_equal(next.fd, -1);
	assert_int_equal(access(tmp, F_OK), -1);
	assert_int_equal(file_size(path), size);
	assert_int_equal(j.segment, 2);
	journal_close(&j);
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
	struct live_step		 ls = { 0 };
	struct journal_replay_stats	 stats;
	uint8_t				 first[JOURNAL_MAX_RECORD_BYTES];
	uint8_t				 second[JOURNAL_MAX_RECORD_BYTES];
	char				*cause = NULL, path[256];
	uint64_t			 end;
	size_t				 len1, len2;
	int				 fd;

	end = zero_tailed_segment(f, 3, path, sizeof path);

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
		T(full_segment_has_no_tail_to_cut),
		T(rotation_takes_the_segment_made_ahead),
		T(segment_made_ahead_never_misplaced),
		T(failed_zero_write_is_not_a_failure),
		T(readonly_replay_survives_a_cut_zero_tail),
		T(readonly_replay_looks_again_at_a_live_round),
#undef T
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
