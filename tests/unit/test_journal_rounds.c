/* SPDX-License-Identifier: ISC */
/*
 * test_journal_rounds.c: journal format 2 (doc/journal.md, "Rounds over
 * the zero tail"): segments of form 2 records built from the document,
 * replay's torn-round rule (which hole is a round that never synced, cut,
 * and which is damage, refused), down to a lost sector ending inside a
 * record's round prefix; the writer's prefixes and sector padding, and
 * replay's reading of it; format 1 segments beside
 * format 2; form 2 records refused where only form 1 is written
 * (checkpoints, the index).  Moved out of test_journal.c.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
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
#include "journal_int.h"
#include "tree.h"
#include "journal_test.h"

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

/* Record n of the round that began at round_start, at the end. */
static void
rounds_add(struct rounds *rs, unsigned n, uint64_t round_start)
{
	rs->end += journal_round_pad(rs->end);	/* as the writer pads */
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

/* ---- a lost sector ending inside a round prefix ------------------------ */

#define PREFIX_BYTES	24
static const unsigned char ckpt_key[16] = "idem-ckpt-v1";

/* A format 2 segment 1 in one buffer: records at[i], len[i] bytes. */
struct torn {
	uint8_t	 file[16384];
	size_t	 end;
	size_t	 at[16];
	size_t	 len[16];
	unsigned n;
};

static int
count_apply(const struct journal_record *r, void *arg)
{
	(void)r;
	(*(size_t *)arg)++;
	return 0;
}

/* The journal directory, made once (the fixture's does not exist). */
static void
make_dir(const struct fixture *f)
{
	if (mkdir(f->dir, 0700) != 0 && errno != EEXIST)
		fail_msg("mkdir %s: %s", f->dir, strerror(errno));
}

/* A committed task record numbered n, its key klen (1..329) bytes. */
static size_t
encode_committed(unsigned n, unsigned klen, uint8_t *out, size_t size)
{
	struct journal_record	r;
	size_t			len;
	unsigned		i;

	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_ENTRY;
	r.entry.kind = SUBTAB_KIND_TASK;
	r.entry.state = SUBTAB_COMMITTED;
	r.entry.date = 20261205;
	r.entry.seq = n + 1;
	r.entry.key_length = (uint16_t)klen;
	for (i = 0; i < klen; i++)
		r.key[i] = (char)('a' + (n + i) % 26);
	len = journal_encode(&r, out, size);
	assert_true(len > 0);
	return len;
}

/* The same record in form 2 at p, of the round that began at start. */
static size_t
encode_sized(unsigned n, unsigned klen, uint64_t round_start, uint8_t *p,
    size_t size)
{
	uint8_t	check[20];
	size_t	len;

	len = encode_committed(n, klen, p + PREFIX_BYTES, size - PREFIX_BYTES);
	memcpy(p, "\xff" "JRD", 4);
	put_le(p + 4, 0, 4);
	put_le(p + 8, round_start, 8);
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + PREFIX_BYTES + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	return PREFIX_BYTES + len;
}

static void
torn_header(struct torn *rs)
{
	memset(rs, 0, sizeof *rs);
	memcpy(rs->file, "IDEMJNL", 8);
	put_le(rs->file + 8, 2, 4);
	put_le(rs->file + 16, 1, 8);
	crypto_shorthash(rs->file + 24, rs->file, 24, doc_key);
	rs->end = 32;
}

/* Record n (its key 10 + n bytes) of the round begun at round_start. */
static void
torn_add(struct torn *rs, uint64_t round_start)
{
	rs->end += journal_round_pad(rs->end);	/* as the writer pads */
	rs->at[rs->n] = rs->end;
	rs->len[rs->n] = encode_sized(rs->n, 10 + rs->n, round_start,
	    rs->file + rs->end, sizeof rs->file - rs->end);
	rs->end += rs->len[rs->n++];
}

/*
 * Records 0-1 a synced round from 32; the round at *r1 writes records
 * 2-7 (its start's two low bytes not zero, so a lost round start never
 * reads as the old one) and never completes its fdatasync.
 */
static void
torn_round(struct torn *rs, size_t *r1)
{
	unsigned	i;

	torn_header(rs);
	torn_add(rs, 32);
	torn_add(rs, 32);
	*r1 = rs->end;
	assert_true((*r1 & 0xff) != 0 && (*r1 >> 8 & 0xff) != 0);
	for (i = 0; i < 6; i++)
		torn_add(rs, *r1);
}

/*
 * Replay segment 1 as rs holds it (size bytes, the zeros ahead included),
 * read-only: 0 and the torn offset, or -1 and the cause naming x.  The
 * file is left as it was either way.
 */
static int
replay_rounds(const struct fixture *f, const struct torn *rs, size_t size,
    struct journal_replay_stats *stats, char **cause)
{
	char	path[256];
	size_t	applied = 0;
	int	fd, rc;

	make_dir(f);
	snprintf(path, sizeof path, "%s/%016x.jnl", f->dir, 1);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) !=
	    -1);
	assert_int_equal(write(fd, rs->file, size), (ssize_t)size);
	close(fd);
	memset(stats, 0, sizeof *stats);
	*cause = NULL;
	rc = journal_replay(f->dir, JOURNAL_REPLAY_READONLY, count_apply,
	    &applied, stats, cause);
	if (rc == 0)
		assert_int_equal(applied, stats->records);
	assert_int_equal(unlink(path), 0);
	return rc;
}

static void
assert_cut(const struct fixture *f, const struct torn *rs, size_t x,
    unsigned kept, const char *what, size_t k)
{
	struct journal_replay_stats	 stats;
	char				*cause;

	if (replay_rounds(f, rs, rs->end + 4096, &stats, &cause) != 0)
		fail_msg("%s, boundary at prefix byte %zu: refused: %s", what,
		    k, cause != NULL ? cause : "(none)");
	assert_int_equal(stats.records, kept);
	assert_int_equal(stats.torn_segment, 1);
	assert_int_equal(stats.torn_offset, x);
}

static void
assert_refused(const struct fixture *f, const struct torn *rs, size_t x,
    const char *what, size_t k)
{
	struct journal_replay_stats	 stats;
	char				*cause, want[64];

	if (replay_rounds(f, rs, rs->end + 4096, &stats, &cause) != -1)
		fail_msg("%s, boundary at prefix byte %zu: not refused", what,
		    k);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof want, "offset %zu:", x);
	if (cause == NULL || strstr(cause, want) == NULL)
		fail_msg("%s, byte %zu: the cause does not name %s: %s", what,
		    k, want, cause != NULL ? cause : "(none)");
	free(cause);
}

/*
 * The review's state, at every place of the boundary: the torn round's
 * bytes lost (zeros) from lost_from up to byte k of record m's prefix,
 * kept from there on.  Record m in the middle of the round (a record of
 * the round with a whole prefix after it): whatever k, m lies inside
 * [R, that record's end), which the round wrote, so the hole is cut
 * (without the rule every k but 0 was refused).  The hole at the round's
 * start, and strictly inside it (in record 3, after record 2 whole).
 */
static void
boundary_in_a_middle_prefix_is_cut(void **state)
{
	struct fixture	*f = *state;
	struct torn	 rs;
	size_t		 r1, k, from;
	int		 inside;

	for (inside = 0; inside < 2; inside++) {
		for (k = 0; k <= PREFIX_BYTES; k++) {
			torn_round(&rs, &r1);
			from = inside ? rs.at[3] + 30 : r1;
			memset(rs.file + from, 0, rs.at[5] + k - from);
			assert_cut(f, &rs, inside ? rs.at[3] : r1,
			    inside ? 3 : 2, inside ? "inside the round" :
			    "the round's start", k);
		}
	}
}

/*
 * The same boundary in the last record's prefix: nothing of the round
 * after it says which round wrote it.  Bytes 0..7 lost (magic, reserved:
 * constants) leave its round start and check whole: the check verifies
 * the start, so the hole is cut.  A boundary at byte 9 to 24 loses some
 * of the round start or the check: the record names no round it can
 * prove, and could be a later round's if the hole were damage: refused.
 * The writer's sector padding keeps a prefix and its inner header in one
 * sector (writer_never_splits_a_prefix), so no power loss leaves these
 * states any more: they are damage now, and stay refused.
 */
static void
boundary_in_the_last_prefix(void **state)
{
	struct fixture	*f = *state;
	struct torn	 rs;
	size_t		 r1, k, last;

	for (k = 0; k <= PREFIX_BYTES; k++) {
		torn_round(&rs, &r1);
		last = rs.n - 1;
		memset(rs.file + r1, 0, rs.at[last] + k - r1);
		if (k <= 8)
			assert_cut(f, &rs, r1, 2, "last record", k);
		else
			assert_refused(f, &rs, r1, "last record", k);
	}
	/* The last record's first 8 bytes lost but the hole before it. */
	torn_round(&rs, &r1);
	last = rs.n - 1;
	memset(rs.file + rs.at[last], 0, 8);
	assert_cut(f, &rs, rs.at[last], last, "only its magic lost", 8);
}

/*
 * A bare record (its prefix's round start lost) counts as a round's only
 * when a later record names a round begun at or before the hole: a
 * record of a later round after it (the hole was synced once) is
 * corruption, whether its prefix is whole or only its round start and
 * check are (pass 0).  A recovered start is taken both ways: one past the
 * hole is corruption even when a record naming a start before the hole
 * follows it (pass 1, a layout made for the rule: a rule that took the
 * recovered record for bare would let that one vouch for it and cut).
 * So is a bare record followed by nothing but a later round's (pass 2).
 */
static void
bare_record_then_a_later_round_is_corruption(void **state)
{
	struct fixture	*f = *state;
	struct torn	 rs;
	size_t		 r1, x, later, k;
	int		 pass;

	for (pass = 0; pass < 3; pass++) {
		for (k = 0; k <= 8; k++) {
			torn_header(&rs);
			torn_add(&rs, 32);
			r1 = rs.end;
			torn_add(&rs, r1);
			torn_add(&rs, r1);
			if (pass != 2)
				torn_add(&rs, r1);
			later = rs.end;
			torn_add(&rs, later);		/* a later round */
			torn_add(&rs, pass == 1 ? r1 : later);
			/* Record 1 to byte 20 of record 2's prefix lost. */
			x = rs.at[1];
			memset(rs.file + x, 0, rs.at[2] + 20 - x);
			/* The later round's first record: bytes 0..k-1 lost. */
			memset(rs.file + rs.at[pass == 2 ? 3 : 4], 0, k);
			assert_refused(f, &rs, x, pass == 0 ? "a later round "
			    "after a bare one" : pass == 1 ? "a recovered "
			    "later start before a witness" : "a bare one, then "
			    "a later round only", k);
		}
	}
}

/*
 * The rule at the byte: a recovered round start is the start the check
 * was made over; the reserved field must have been 0 (a prefix with
 * reserved bits under a good check is not recovered).
 */
static void
recovered_start_needs_the_reserved_field_zero(void **state)
{
	struct fixture	*f = *state;
	struct torn	 rs;
	uint8_t		 check[20];
	uint8_t		*p;
	size_t		 r1, last;

	torn_round(&rs, &r1);
	last = rs.n - 1;
	p = rs.file + rs.at[last];
	put_le(p + 4, 0x100, 4);
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + PREFIX_BYTES + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	memset(rs.file + r1, 0, rs.at[last] + 4 - r1);	/* magic lost */
	assert_refused(f, &rs, r1, "reserved bits", 4);
}

static uint64_t
next_random(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

#define SECTOR		512
#define TRIAL_ROUNDS	40
#define MAX_SECTORS	8

/*
 * Every state a power loss can leave of a round over the zeros: rounds of
 * random records (keys of 1..329 bytes, laid out with the writer's sector
 * padding) from a random synced end, each of their 512-byte sectors kept
 * or lost (its bytes before the round, zeros after R).  Replay
 * (read-write, the file rewritten each time) cuts at the first record
 * the loss changed and never refuses: the state that was refused (a
 * record kept without its round start or check) never arises, which is
 * asserted too.  Prints the figure (doc/journal.md, "Which torn rounds
 * are still refused": none).
 */
static void
refusals_are_rare(void **state)
{
	struct fixture			*f = *state;
	static uint8_t			 now[16384], old[16384], disk[16384];
	struct journal_replay_stats	 stats;
	size_t				 at[64], len[64], r, end, size, x, k;
	size_t				 first_s, nsec, n, i, applied, pad;
	uint64_t			 seed = 0x9e3779b97f4a7c15ULL, mask;
	unsigned long			 states = 0, ltk = 0, refused = 0;
	char				 path[256], *cause;
	int				 fd, rc, lost_seen, ltk_state, bare;
	unsigned			 t;

	make_dir(f);
	snprintf(path, sizeof path, "%s/%016x.jnl", f->dir, 1);
	for (t = 0; t < TRIAL_ROUNDS; t++) {
		/* Synced: records from 32 to r; the round: r to end. */
		memset(now, 0, sizeof now);
		memcpy(now, "IDEMJNL", 8);
		put_le(now + 8, 2, 4);
		put_le(now + 16, 1, 8);
		crypto_shorthash(now + 24, now, 24, doc_key);
		end = 32;
		n = next_random(&seed) % 4;
		for (i = 0; i < n; i++) {
			end += journal_round_pad(end);
			end += encode_sized((unsigned)i, 1 +
			    (unsigned)(next_random(&seed) % 329), 32,
			    now + end, sizeof now - end);
		}
		r = end;
		for (n = 0; ; n++) {
			/* The writer's sector padding before the record. */
			pad = journal_round_pad(end);
			end += pad;
			at[n] = end;
			len[n] = encode_sized(100 + (unsigned)n, 1 +
			    (unsigned)(next_random(&seed) % 329), r,
			    now + end, sizeof now - end);
			if ((end + len[n] + SECTOR - 1) / SECTOR - r / SECTOR >
			    MAX_SECTORS) {
				end -= pad;
				break;
			}
			end += len[n];
		}
		/* The one that did not fit. */
		memset(now + end, 0, len[n] + pad);
		size = (end / SECTOR + 2) * SECTOR;	/* the zeros ahead */
		memcpy(old, now, size);
		memset(old + r, 0, size - r);
		first_s = r / SECTOR;
		nsec = (end + SECTOR - 1) / SECTOR - first_s;
		for (mask = 0; mask < (1ULL << nsec) - 1; mask++) {
			/* mask: the kept sectors; all kept is no loss. */
			memcpy(disk, now, size);
			lost_seen = ltk_state = 0;
			for (k = 0; k < nsec; k++) {
				if (mask >> k & 1) {
					ltk_state |= lost_seen;
					continue;
				}
				lost_seen = 1;
				memcpy(disk + (first_s + k) * SECTOR,
				    old + (first_s + k) * SECTOR, SECTOR);
			}
			/* X: the first record the loss changed. */
			for (i = 0; i < n; i++)
				if (memcmp(disk + at[i], now + at[i],
				    len[i]) != 0)
					break;
			assert_true(i < n);
			/* Replay's X: the end of the record before it. */
			x = i == 0 ? r : at[i - 1] + len[i - 1];
			/*
			 * The state the layout rule rules out: a record whose
			 * inner record survived whole without its round
			 * start or check (its prefix and header share a
			 * sector, and sectors persist whole).
			 */
			bare = 0;
			for (; i < n; i++) {
				if (memcmp(disk + at[i] + PREFIX_BYTES,
				    now + at[i] + PREFIX_BYTES,
				    len[i] - PREFIX_BYTES) != 0)
					continue;
				bare |= memcmp(disk + at[i] + 8, now + at[i] + 8,
				    PREFIX_BYTES - 8) != 0;
			}
			if (bare)
				fail_msg("round %u, kept sectors %#llx: a "
				    "record kept without its prefix", t,
				    (unsigned long long)mask);
			assert_true((fd = open(path, O_WRONLY | O_CREAT |
			    O_TRUNC, 0600)) != -1);
			assert_int_equal(write(fd, disk, size),
			    (ssize_t)size);
			close(fd);
			applied = 0;
			cause = NULL;
			rc = journal_replay(f->dir, 0, count_apply, &applied, &stats,
			    &cause);
			states++;
			ltk += ltk_state;
			if (rc != 0) {
				fail_msg("round %u, kept sectors %#llx: "
				    "refused: %s", t,
				    (unsigned long long)mask, cause);
				refused++;
				free(cause);
				continue;
			}
			/* Cut at X (or zeros from X: the clean end there). */
			assert_int_equal(stats.end_offset, x);
			assert_int_equal(stats.records, applied);
		}
	}
	assert_int_equal(unlink(path), 0);
	/* Every refusal is lost-then-kept: only those leave a record. */
	print_message("torn rounds: %lu states, %lu lost-then-kept, %lu "
	    "refused (%.2f%% of lost-then-kept)\n", states, ltk, refused,
	    ltk != 0 ? 100.0 * (double)refused / (double)ltk : 0.0);
	/* Sector padding: no torn round is refused (was 3-6%). */
	assert_int_equal(refused, 0);
	assert_true(ltk > 0);
}

/*
 * The rule's edges, as doc/journal.md writes it (P % 512 + 40 > 512: pad
 * to the boundary).  Writer, replay and the tests' builders all ask
 * journal_round_pad, so only fixed numbers pin the rule itself: a record
 * may start 472 bytes into a sector (its 40 bytes end on the boundary),
 * not 473.
 */
static void
pad_rule_at_its_edges(void **state)
{
	static const struct {
		uint64_t	at;
		size_t		pad;
	} edge[] = {
		{ 0, 0 }, { 32, 0 }, { 471, 0 }, { 472, 0 }, { 473, 39 },
		{ 500, 12 }, { 511, 1 }, { 512, 0 }, { 512 + 472, 0 },
		{ 512 + 473, 39 }, { 1023, 1 }, { 1024, 0 },
		{ (1ULL << 32) + 473, 39 }
	};
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof edge / sizeof edge[0]; i++) {
		if (journal_round_pad(edge[i].at) != edge[i].pad)
			fail_msg("pad at %llu: %zu, not %zu",
			    (unsigned long long)edge[i].at,
			    journal_round_pad(edge[i].at), edge[i].pad);
	}
}

/*
 * The layout rule (doc/journal.md, "Sector padding"): the writer never
 * lets a record's prefix and its inner header (40 bytes) cross a 512-byte
 * boundary of the file.  Rounds of 1..3 records with keys of 1..329
 * bytes put record starts at many offsets in a sector; the file is
 * walked from the document (zeros: padding, only where the rule asks for
 * it, up to the boundary) and replays whole; journal_open finds its end
 * through the padding and appends after it.
 */
static void
writer_never_splits_a_prefix(void **state)
{
	struct fixture	*f = *state;
	struct journal	 j;
	uint8_t		 ring[3 * JOURNAL_MAX_RECORD_BYTES], *file, seen[SECTOR];
	struct iovec	 iov;
	char		*cause = NULL, path[256];
	uint64_t	 seed = 0x2545f4914f6cdd1dULL;
	size_t		 size, at, len, used, k, records = 0, pads = 0;
	size_t		 offsets = 0;
	unsigned	 round, n, per;

	memset(seen, 0, sizeof seen);
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.format, 2);
	for (round = 0; round < 400; round++) {
		per = 1 + (unsigned)(next_random(&seed) % 3);
		used = 0;
		for (n = 0; n < per; n++)
			used += encode_committed(records + n, 1 +
			    (unsigned)(next_random(&seed) % 329), ring + used,
			    sizeof ring - used);
		iov.iov_base = ring;
		iov.iov_len = used;
		assert_int_equal(journal_append(&j, &iov, 1, &cause), 0);
		records += per;
	}
	assert_int_equal(journal_sync(&j, &cause), 0);
	size = j.size;
	journal_close(&j);

	segment_path(f, 1, path, sizeof path);
	file = read_file(path, &k);
	assert_true(k >= size);
	at = DOC_SEGMENT_HEADER_BYTES;
	for (n = 0; at < size; n++) {
		if (file[at] == 0) {
			/* Padding: only where the record would cross. */
			assert_true(at % SECTOR + 40 > SECTOR);
			for (k = at; k % SECTOR != 0 || k == at; k++)
				assert_int_equal(file[k], 0);
			at = k;
			pads++;
		}
		assert_true(at % SECTOR + 40 <= SECTOR);
		if (!seen[at % SECTOR]++)
			offsets++;
		assert_memory_equal(file + at, "\xff" "JRD", 4);
		assert_memory_equal(file + at + 24, "\xff" "JRC", 4);
		len = (size_t)file[at + 28] | (size_t)file[at + 29] << 8;
		at += 24 + 16 + len;
	}
	assert_int_equal(at, size);
	assert_int_equal(n, records);
	free(file);
	/* The rule was exercised, from many places in a sector. */
	assert_true(pads > 20);
	assert_true(offsets > 100);
	used = 0;
	if (journal_replay(f->dir, 0, count_apply, &used, NULL, &cause) != 0)
		fail_msg("replay: %s", cause);
	assert_int_equal(used, records);
	/* journal_open finds the same end through the padding, goes on. */
	assert_int_equal(journal_open(&j, f->dir, &cause), 0);
	assert_int_equal(j.size, size);
	iov.iov_base = ring;
	iov.iov_len = encode_committed(records, 300, ring, sizeof ring);
	assert_int_equal(journal_append(&j, &iov, 1, &cause), 0);
	assert_int_equal(journal_sync(&j, &cause), 0);
	journal_close(&j);
	used = 0;
	if (journal_replay(f->dir, 0, count_apply, &used, NULL, &cause) != 0)
		fail_msg("replay after a reopen: %s", cause);
	assert_int_equal(used, records + 1);
}

/*
 * Replay and the padding: a zero run before a boundary is skipped (the
 * record after it replays); a non-zero byte in it is a bad record at the
 * end of the record before, corruption since a record of a later round
 * follows (damage: a torn round never leaves non-zero padding).
 */
static void
sector_padding_zero_is_skipped_else_refused(void **state)
{
	struct fixture			*f = *state;
	struct rounds			 rs;
	struct journal_replay_stats	 stats;
	size_t				 applied, pad_at = 0, prev = 0;
	char				*cause, want[64], path[256];
	unsigned			 n;
	int				 pass;

	for (pass = 0; pass < 2; pass++) {
		/* Records until one needed padding. */
		rounds_header(&rs);
		for (n = 0; n < 8; n++) {
			prev = rs.end;
			rounds_add(&rs, n, DOC_SEGMENT_HEADER_BYTES);
			if (rs.at[n] != prev)
				break;
		}
		assert_true(n < 7);
		pad_at = prev;
		/* A later round after it: damage, not a torn round. */
		rounds_add(&rs, n + 1, rs.end);
		assert_true(rs.at[n] % SECTOR == 0);
		assert_true(rs.at[n] - pad_at < 40);
		if (pass == 1)
			rs.file[rs.at[n] - 1] = 0x01;
		rounds_write(f, &rs, rs.end);
		applied = 0;
		cause = NULL;
		memset(&stats, 0, sizeof stats);
		if (pass == 0) {
			if (journal_replay(f->dir, JOURNAL_REPLAY_READONLY,
			    count_apply, &applied, &stats, &cause) != 0)
				fail_msg("zero padding refused: %s", cause);
			assert_int_equal(applied, n + 2);
			assert_int_equal(stats.end_offset, rs.end);
			assert_int_equal(stats.torn_segment, 0);
		} else {
			assert_int_equal(journal_replay(f->dir,
			    JOURNAL_REPLAY_READONLY, count_apply, &applied,
			    &stats, &cause), -1);
			assert_int_equal(errno, EINVAL);
			snprintf(want, sizeof want, "offset %zu:", pad_at);
			if (cause == NULL || strstr(cause, want) == NULL ||
			    strstr(cause, "padding") == NULL)
				fail_msg("the cause does not name %s and the "
				    "padding: %s", want,
				    cause != NULL ? cause : "(none)");
			free(cause);
		}
		segment_path(f, 1, path, sizeof path);
		assert_int_equal(unlink(path), 0);
		assert_int_equal(rmdir(f->dir), 0);
	}
}

/*
 * Checkpoints and the index hold form 1 records: journal_decode reads
 * form 1 only, so a form 2 record there is refused (doc/journal.md).
 */
static void
form_two_refused_outside_the_journal(void **state)
{
	struct fixture		*f = *state;
	struct journal_record	 r;
	struct index_entry	 ie;
	struct seqalloc_state	 alloc[SUBTAB_KIND_COUNT];
	uint8_t			 buf[8 + 2 * JOURNAL_MAX_RECORD_BYTES];
	char			 path[256], *cause = NULL;
	uint64_t		 segment, records;
	size_t			 len, used, applied = 0;
	int			 form, fd;

	make_dir(f);
	len = encode_sized(1, 10, 4096, buf, sizeof buf);
	assert_int_equal(journal_decode(buf, len, &r, &used),
	    JOURNAL_DECODE_BAD);
	assert_int_equal(journal_decode(buf + PREFIX_BYTES,
	    len - PREFIX_BYTES, &r, &used), JOURNAL_DECODE_OK);
	assert_int_equal(r.form, JOURNAL_FORMAT_PLAIN);

	for (form = 1; form <= 2; form++) {
		/* The index's value: 8 bytes (form, zeros), the record. */
		memset(buf, 0, 8);
		buf[0] = INDEX_FULL;
		len = form == 1 ? encode_committed(1, 10, buf + 8,
		    sizeof buf - 8) : encode_sized(1, 10, 4096, buf + 8,
		    sizeof buf - 8);
		assert_int_equal(index_decode(buf, 8 + len, &ie),
		    form == 1 ? 0 : -1);

		/* A checkpoint of that one record (doc/journal.md). */
		memset(buf, 0, 64);
		memcpy(buf, "IDEMCKPT", 8);
		put_le(buf + 8, 1, 4);
		put_le(buf + 16, 2, 8);		/* the journal goes on at 2 */
		put_le(buf + 24, 1, 8);		/* one record */
		crypto_shorthash(buf + 56, buf, 56, ckpt_key);
		len = form == 1 ? encode_committed(1, 10, buf + 64,
		    sizeof buf - 64) : encode_sized(1, 10, 4096, buf + 64,
		    sizeof buf - 64);
		memcpy(buf + 64 + len, "IDEMCEND", 8);
		put_le(buf + 72 + len, 1, 8);
		snprintf(path, sizeof path, "%s/checkpoint-%016x.snap",
		    f->dir, 2);
		assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC,
		    0600)) != -1);
		assert_int_equal(write(fd, buf, 80 + len),
		    (ssize_t)(80 + len));
		close(fd);
		errno = 0;
		if (form == 1) {
			if (checkpoint_load(f->dir, count_apply, &applied, alloc,
			    &segment, &records, &cause) != 0)
				fail_msg("form 1 checkpoint: %s", cause);
			assert_int_equal(records, 1);
			assert_int_equal(applied, 1);
		} else {
			assert_int_equal(checkpoint_load(f->dir, count_apply, &applied,
			    alloc, &segment, &records, &cause), -1);
			assert_int_equal(errno, EINVAL);
			free(cause);
			cause = NULL;
		}
		assert_int_equal(unlink(path), 0);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(torn_round_over_zeros_is_cut),
		T(hole_then_a_later_round_is_corruption),
		T(format_one_zero_tail_is_a_torn_tail),
		T(torn_round_shape_in_a_sealed_segment_is_corruption),
		T(damaged_round_prefix_carries_no_round),
		T(hole_inside_a_round),
		T(writer_prefixes_each_record_with_its_round),
		T(format_one_segment_is_appended_as_before),
		T(form_two_record_in_a_format_one_segment_is_refused),
		T(boundary_in_a_middle_prefix_is_cut),
		T(boundary_in_the_last_prefix),
		T(bare_record_then_a_later_round_is_corruption),
		T(recovered_start_needs_the_reserved_field_zero),
		T(form_two_refused_outside_the_journal),
		T(refusals_are_rare),
		T(pad_rule_at_its_edges),
		T(writer_never_splits_a_prefix),
		T(sector_padding_zero_is_skipped_else_refused),
#undef T
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
