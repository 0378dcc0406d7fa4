/* SPDX-License-Identifier: ISC */
/*
 * test_journal_rounds.c: replay's torn-round rule when a lost sector and
 * a kept one meet inside a record's round prefix (doc/journal.md, "Rounds
 * over the zero tail"), and form 2 records refused where only form 1 is
 * written (checkpoints, the index).  The bytes are built from the
 * document; the older round cases are in test_journal.c.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/types.h>

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

#include "store.h"
#include "tree.h"

#define PREFIX_BYTES	24
static const unsigned char doc_key[16] = "idem-journal-v1";
static const unsigned char ckpt_key[16] = "idem-ckpt-v1";

struct fixture {
	char	root[64];
	char	dir[96];	/* root/journal */
};

/* A format 2 segment 1 in one buffer: records at[i], len[i] bytes. */
struct rounds {
	uint8_t	 file[16384];
	size_t	 end;
	size_t	 at[16];
	size_t	 len[16];
	unsigned n;
};

static int
setup(void **state)
{
	struct fixture	*f;

	f = calloc(1, sizeof *f);
	assert_non_null(f);
	strcpy(f->root, "/tmp/test_journal_rounds.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->dir, sizeof f->dir, "%s/journal", f->root);
	assert_int_equal(mkdir(f->dir, 0700), 0);
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

static void
put_le(uint8_t *p, uint64_t v, int bytes)
{
	int	i;

	for (i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int
count(const struct journal_record *r, void *arg)
{
	(void)r;
	(*(size_t *)arg)++;
	return 0;
}

/* A committed task record, distinct per n; its key n bytes longer. */
static size_t
encode(unsigned n, uint8_t *out, size_t size)
{
	struct journal_record	r;
	size_t			len;

	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_ENTRY;
	r.entry.kind = SUBTAB_KIND_TASK;
	r.entry.state = SUBTAB_COMMITTED;
	r.entry.schema = 1;
	memcpy(r.entry.sender, "PM", 2);
	r.entry.sender_length = 2;
	memcpy(r.entry.recipient, "DEV", 3);
	r.entry.recipient_length = 3;
	r.entry.date = 20261205;
	r.entry.seq = n + 1;
	r.entry.request_digest[0] = (uint8_t)n;
	r.entry.key_length = (uint16_t)snprintf(r.key, sizeof r.key,
	    "run-%u/%.*s", n, (int)n, "abcdefghijklmnopqrstuvwxyz");
	len = journal_encode(&r, out, size);
	assert_true(len > 0);
	return len;
}

/* Record n in form 2 at p, of the round that began at round_start. */
static size_t
encode_form2(unsigned n, uint64_t round_start, uint8_t *p, size_t size)
{
	uint8_t	check[20];
	size_t	len;

	len = encode(n, p + PREFIX_BYTES, size - PREFIX_BYTES);
	memcpy(p, "\xff" "JRD", 4);
	put_le(p + 4, 0, 4);
	put_le(p + 8, round_start, 8);
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + PREFIX_BYTES + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	return PREFIX_BYTES + len;
}

static void
rounds_header(struct rounds *rs)
{
	memset(rs, 0, sizeof *rs);
	memcpy(rs->file, "IDEMJNL", 8);
	put_le(rs->file + 8, 2, 4);
	put_le(rs->file + 16, 1, 8);
	crypto_shorthash(rs->file + 24, rs->file, 24, doc_key);
	rs->end = 32;
}

static void
rounds_add(struct rounds *rs, uint64_t round_start)
{
	rs->at[rs->n] = rs->end;
	rs->len[rs->n] = encode_form2(rs->n, round_start, rs->file + rs->end,
	    sizeof rs->file - rs->end);
	rs->end += rs->len[rs->n++];
}

/*
 * Records 0-1 a synced round from 32; the round at *r1 writes records
 * 2-7 (its start's two low bytes not zero, so a lost round start never
 * reads as the old one) and never completes its fdatasync.
 */
static void
torn_round(struct rounds *rs, size_t *r1)
{
	unsigned	i;

	rounds_header(rs);
	rounds_add(rs, 32);
	rounds_add(rs, 32);
	*r1 = rs->end;
	assert_true((*r1 & 0xff) != 0 && (*r1 >> 8 & 0xff) != 0);
	for (i = 0; i < 6; i++)
		rounds_add(rs, *r1);
}

/*
 * Replay segment 1 as rs holds it (size bytes, the zeros ahead included),
 * read-only: 0 and the torn offset, or -1 and the cause naming x.  The
 * file is left as it was either way.
 */
static int
replay_rounds(const struct fixture *f, const struct rounds *rs, size_t size,
    struct journal_replay_stats *stats, char **cause)
{
	char	path[256];
	size_t	applied = 0;
	int	fd, rc;

	snprintf(path, sizeof path, "%s/%016x.jnl", f->dir, 1);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) !=
	    -1);
	assert_int_equal(write(fd, rs->file, size), (ssize_t)size);
	close(fd);
	memset(stats, 0, sizeof *stats);
	*cause = NULL;
	rc = journal_replay(f->dir, JOURNAL_REPLAY_READONLY, count,
	    &applied, stats, cause);
	if (rc == 0)
		assert_int_equal(applied, stats->records);
	assert_int_equal(unlink(path), 0);
	return rc;
}

static void
assert_cut(const struct fixture *f, const struct rounds *rs, size_t x,
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
assert_refused(const struct fixture *f, const struct rounds *rs, size_t x,
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
	struct rounds	 rs;
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
 * prove, and could be a later round's if the hole were damage: refused,
 * as doc/journal.md says.
 */
static void
boundary_in_the_last_prefix(void **state)
{
	struct fixture	*f = *state;
	struct rounds	 rs;
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
 * check are (a recovered start is taken both ways).  So is a bare record
 * followed by nothing but a later round's.
 */
static void
bare_record_then_a_later_round_is_corruption(void **state)
{
	struct fixture	*f = *state;
	struct rounds	 rs;
	size_t		 r1, x, later, k;

	for (k = 0; k <= 8; k++) {
		rounds_header(&rs);
		rounds_add(&rs, 32);
		r1 = rs.end;
		rounds_add(&rs, r1);
		rounds_add(&rs, r1);
		rounds_add(&rs, r1);
		later = rs.end;
		rounds_add(&rs, later);		/* a later round */
		rounds_add(&rs, later);
		/* Record 1 to byte 20 of record 2's prefix lost: 2 bare. */
		x = rs.at[1];
		memset(rs.file + x, 0, rs.at[2] + 20 - x);
		/* The later round's first record: its magic lost up to k. */
		memset(rs.file + rs.at[4], 0, k);
		assert_refused(f, &rs, x, "a later round after a bare one", k);
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
	struct rounds	 rs;
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

/* A record of key length klen (1..329), numbered n, at p in form 2. */
static size_t
encode_sized(unsigned n, unsigned klen, uint64_t round_start, uint8_t *p,
    size_t size)
{
	struct journal_record	r;
	uint8_t			check[20];
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
	len = journal_encode(&r, p + PREFIX_BYTES, size - PREFIX_BYTES);
	assert_true(len > 0);
	memcpy(p, "\xff" "JRD", 4);
	put_le(p + 4, 0, 4);
	put_le(p + 8, round_start, 8);
	memcpy(check, p + 4, 12);
	memcpy(check + 12, p + PREFIX_BYTES + 8, 8);
	crypto_shorthash(p + 16, check, sizeof check, doc_key);
	return PREFIX_BYTES + len;
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
 * random records (keys of 1..329 bytes) from a random synced end, each of
 * their 512-byte sectors kept or lost (its bytes before the round, zeros
 * after R).  Replay (read-write, the file rewritten each time) cuts at
 * the first record the loss changed, or refuses, and refuses only in the
 * documented state: a record whose round start or check was lost, its
 * inner record whole, with no record after it whose start and check are
 * whole.  Prints how many lost-then-kept states are refused (doc/
 * journal.md, "Which torn rounds are still refused").
 */
static void
refusals_are_rare(void **state)
{
	struct fixture			*f = *state;
	static uint8_t			 now[16384], old[16384], disk[16384];
	struct journal_replay_stats	 stats;
	size_t				 at[64], len[64], r, end, size, x, k;
	size_t				 first_s, nsec, n, i, applied;
	uint64_t			 seed = 0x9e3779b97f4a7c15ULL, mask;
	unsigned long			 states = 0, ltk = 0, refused = 0;
	char				 path[256], *cause;
	int				 fd, rc, lost_seen, ltk_state, bare;
	unsigned			 t;

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
		for (i = 0; i < n; i++)
			end += encode_sized((unsigned)i, 1 +
			    (unsigned)(next_random(&seed) % 329), 32,
			    now + end, sizeof now - end);
		r = end;
		for (n = 0; ; n++) {
			at[n] = end;
			len[n] = encode_sized(100 + (unsigned)n, 1 +
			    (unsigned)(next_random(&seed) % 329), r,
			    now + end, sizeof now - end);
			if ((end + len[n] + SECTOR - 1) / SECTOR - r / SECTOR >
			    MAX_SECTORS)
				break;
			end += len[n];
		}
		memset(now + end, 0, len[n]);	/* the one that did not fit */
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
			x = at[i];
			/* The documented refusal: a bare last survivor. */
			bare = 0;
			for (; i < n; i++) {
				if (memcmp(disk + at[i] + PREFIX_BYTES,
				    now + at[i] + PREFIX_BYTES,
				    len[i] - PREFIX_BYTES) != 0)
					continue;
				bare = memcmp(disk + at[i] + 8, now + at[i] + 8,
				    PREFIX_BYTES - 8) != 0;
			}
			assert_true((fd = open(path, O_WRONLY | O_CREAT |
			    O_TRUNC, 0600)) != -1);
			assert_int_equal(write(fd, disk, size),
			    (ssize_t)size);
			close(fd);
			applied = 0;
			cause = NULL;
			rc = journal_replay(f->dir, 0, count, &applied, &stats,
			    &cause);
			states++;
			ltk += ltk_state;
			if (rc != 0) {
				if (!bare)
					fail_msg("round %u, kept sectors %#llx: "
					    "refused: %s", t,
					    (unsigned long long)mask, cause);
				refused++;
				free(cause);
				continue;
			}
			if (bare)
				fail_msg("round %u, kept sectors %#llx: cut, "
				    "not refused", t, (unsigned long long)mask);
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
	assert_true(refused * 100 < ltk * 6);
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

	len = encode_form2(1, 4096, buf, sizeof buf);
	assert_int_equal(journal_decode(buf, len, &r, &used),
	    JOURNAL_DECODE_BAD);
	assert_int_equal(journal_decode(buf + PREFIX_BYTES,
	    len - PREFIX_BYTES, &r, &used), JOURNAL_DECODE_OK);
	assert_int_equal(r.form, JOURNAL_FORMAT_PLAIN);

	for (form = 1; form <= 2; form++) {
		/* The index's value: 8 bytes (form, zeros), the record. */
		memset(buf, 0, 8);
		buf[0] = INDEX_FULL;
		len = form == 1 ? encode(1, buf + 8, sizeof buf - 8) :
		    encode_form2(1, 4096, buf + 8, sizeof buf - 8);
		assert_int_equal(index_decode(buf, 8 + len, &ie),
		    form == 1 ? 0 : -1);

		/* A checkpoint of that one record (doc/journal.md). */
		memset(buf, 0, 64);
		memcpy(buf, "IDEMCKPT", 8);
		put_le(buf + 8, 1, 4);
		put_le(buf + 16, 2, 8);		/* the journal goes on at 2 */
		put_le(buf + 24, 1, 8);		/* one record */
		crypto_shorthash(buf + 56, buf, 56, ckpt_key);
		len = form == 1 ? encode(1, buf + 64, sizeof buf - 64) :
		    encode_form2(1, 4096, buf + 64, sizeof buf - 64);
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
			if (checkpoint_load(f->dir, count, &applied, alloc,
			    &segment, &records, &cause) != 0)
				fail_msg("form 1 checkpoint: %s", cause);
			assert_int_equal(records, 1);
			assert_int_equal(applied, 1);
		} else {
			assert_int_equal(checkpoint_load(f->dir, count, &applied,
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
		cmocka_unit_test_setup_teardown(
		    boundary_in_a_middle_prefix_is_cut, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    boundary_in_the_last_prefix, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    bare_record_then_a_later_round_is_corruption, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    recovered_start_needs_the_reserved_field_zero, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    form_two_refused_outside_the_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(refusals_are_rare, setup,
		    teardown),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
