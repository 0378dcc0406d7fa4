/* SPDX-License-Identifier: ISC */
/*
 * fuzz_journal.c: libFuzzer target for the journal's decoder and replay
 * (broker/store/journal.c, format in doc/journal.md).
 *
 * Input: byte 0 is a mode, byte 1 a parameter, the rest the bytes.
 *   bit 0  put a valid segment header (for its number) in front, so that
 *          the bytes are read as records;
 *   bit 1  recompute the SipHash of every record found in the bytes (at
 *          each magic whose length is in range), so that the fuzzer gets
 *          past the checksum to the field checks;
 *   bit 2  split the bytes into two segments, 1 and 2, at the fraction
 *          param/256 of their length (both with headers under bit 0);
 *   bit 3  replay with JOURNAL_REPLAY_READONLY;
 *   bit 4  add a stub last segment of param % 32 bytes;
 *   bit 5  after a good replay, start up as the broker does (replay,
 *          journal_open), append one record, and replay again;
 *   bit 6  replay from segment 2, as after a checkpoint
 *          (journal_replay_from), leaving segment 1 alone;
 *   bit 7  with bit 5, journal_rotate before the append.
 *
 * The files go into one temporary directory per process, emptied before
 * each run.  Invariants:
 *   - journal_replay returns 0, or -1 with a non-empty cause; it never
 *     crashes or loops;
 *   - apply is called stats.records times, each record re-encodes to the
 *     very bytes it was decoded from, and stats.bytes adds them up;
 *   - after a successful replay the segments left hold exactly their
 *     headers and the replayed records (the torn tail was cut, stubs
 *     removed) and truncated_bytes is what went; a read-only replay
 *     changes no file;
 *   - a second replay after a successful one replays the same records
 *     and truncates nothing;
 *   - the broker's start-up order (replay, open, append, sync) works on
 *     whatever replay accepted, and the appended record replays, also
 *     into a rotated segment;
 *   - segments before a checkpoint's are never read or changed, and a
 *     failed replay changes nothing;
 *   - journal_decode on the bytes: OK is form 1 and re-encodes to the
 *     input, every truncation of an OK record is SHORT, SHORT and BAD
 *     are what doc/journal.md says and leave the caller's record
 *     untouched; bytes that begin with a round prefix are BAD to it
 *     (form 1 only), and replay's decoder (journal_record_decode) reads
 *     them as form 2, re-encoding to the bytes after the prefix.
 *
 * The same input also builds a version 2 segment (fuzz_rounds; doc/
 * journal.md, "Rounds over the zero tail"): byte 0 the number of
 * records, byte 1 the damage (bits 0-1: zeros, the input's bytes, one
 * bit flipped, none; bit 2: a segment 2 follows, so 1 is sealed and has
 * no zero tail; bit 3: read-only), bytes 2 and 3 where the damage starts
 * and how long it is (and how many zeros ahead), then one byte a record:
 * bit 0 starts a new round before it, the rest its key's length.  Each
 * record is form 2, its prefix naming its round's start as the writer
 * does, after the writer's sector padding where the rule asks for it
 * (doc/journal.md, "Sector padding"); the rest of the input is what "the
 * input's bytes" damage writes.  Bit 4 of byte 1: the damage is a power
 * loss instead, each 512-byte sector of the last round lost (what it
 * held before: synced bytes before the round, zeros after) as the bits
 * of byte 2 say.  Invariants, besides the ones above that apply:
 *   - undamaged, it replays whole, the zeros its clean end;
 *   - every record replay applies starts right after the one before, or
 *     in format 2 after the zero padding the rule asks for there, never
 *     with its prefix and header across 512 bytes; bytes counts the
 *     padding;
 *   - replay never skips a record: the records applied from segment 1
 *     are its first C, every one that ends before the damage among them;
 *   - the round rule's safety: when replay cuts segment 1 at X, no
 *     record after X that the damage left whole names a round that
 *     began after X (that round began once X was synced: cutting it
 *     would drop acknowledged records), and a sealed segment is never
 *     cut;
 *   - its liveness, the rule exactly: zeros or a flipped bit inside the
 *     last round of the last segment are a torn round, cut at the first
 *     record they touch, unless they changed a record's round start or
 *     check (bytes 8..23 of its prefix) but not its inner record and no
 *     record after it keeps its start and check whole: then replay
 *     refuses, changing nothing.  A prefix whose bytes 0..7 alone
 *     changed is recovered (its check verifies its start), and a record
 *     whose start was lost counts as the round of a later record that
 *     names one (doc/journal.md).  Non-zero padding is a change to the
 *     record after it;
 *   - a torn round (bit 4: any subset of its sectors lost, over zeros)
 *     is always cut at the first record it changed (or ends in zeros
 *     there), never refused: the padding leaves no record bare.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "journal_int.h"

int	LLVMFuzzerInitialize(int *, char ***);
int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define FUZZ_CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "fuzz_journal: invariant failed at %s:%d: " \
		    "%s\n", __FILE__, __LINE__, #cond);			\
		abort();						\
	}								\
} while (0)

/* doc/journal.md */
#define HEADER_BYTES		32
#define RECORD_HEADER_BYTES	16
#define PAYLOAD_MIN		144
/* An EFFECT record carries its result after the key. */
#define PAYLOAD_MAX		(144 + SUBTAB_MAX_KEY_BYTES + \
	IDEM_MAX_EFFECT_RESULT_BYTES)
#define MAX_SEGMENTS		4

static const uint8_t	record_magic[4] = { 0xff, 'J', 'R', 'C' };
static const uint8_t	checksum_key[16] = "idem-journal-v1";

static char	base_dir[PATH_MAX];
static char	journal_dir[PATH_MAX];

/* What one run wrote, and what apply saw. */
struct run {
	uint8_t			*seg[MAX_SEGMENTS + 1];	/* by number */
	size_t			 seg_size[MAX_SEGMENTS + 1];
	unsigned		 nseg;
	struct journal_replay_stats *stats;
	uint64_t		 records;
	uint64_t		 bytes;
	uint64_t		 end_seg, end_at;	/* the last record's */
	unsigned char		 trace[crypto_generichash_BYTES];
	crypto_generichash_state hash;		/* of the records, in order */
	unsigned		 replays;	/* every other one is hinted */
	uint64_t		 hints;
};

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static void
put_u64(uint8_t *p, uint64_t v)
{
	int	i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A valid segment header, from doc/journal.md. */
static void
header_encode(uint64_t number, uint8_t out[HEADER_BYTES])
{
	memset(out, 0, HEADER_BYTES);
	memcpy(out, "IDEMJNL", 8);
	out[8] = 1;
	put_u64(out + 16, number);
	crypto_shorthash(out + 24, out, 24, checksum_key);
}

/* Give every record-looking piece a right checksum. */
static void
fix_checksums(uint8_t *p, size_t size, size_t from)
{
	static uint8_t	 buf[4 + PAYLOAD_MAX];
	const uint8_t	*m;
	uint32_t	 length;

	while (from + RECORD_HEADER_BYTES <= size) {
		m = memmem(p + from, size - from, record_magic,
		    sizeof record_magic);
		if (m == NULL)
			return;
		from = (size_t)(m - p);
		if (from + RECORD_HEADER_BYTES > size)
			return;
		length = get_u32(p + from + 4);
		if (length < PAYLOAD_MIN || length > PAYLOAD_MAX ||
		    size - from - RECORD_HEADER_BYTES < length) {
			from++;
			continue;
		}
		memcpy(buf, p + from + 4, 4);
		memcpy(buf + 4, p + from + RECORD_HEADER_BYTES, length);
		crypto_shorthash(p + from + 8, buf, 4 + length, checksum_key);
		from += RECORD_HEADER_BYTES + length;
	}
}

static void
segment_path(unsigned number, char *out, size_t size)
{
	snprintf(out, size, "%s/%016x.jnl", journal_dir, number);
}

static void
empty_dir(void)
{
	DIR		*d;
	struct dirent	*e;

	if ((d = opendir(journal_dir)) == NULL) {
		FUZZ_CHECK(errno == ENOENT);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		FUZZ_CHECK(unlinkat(dirfd(d), e->d_name, 0) == 0);
	}
	closedir(d);
}

static void
cleanup(void)
{
	empty_dir();
	rmdir(journal_dir);
	rmdir(base_dir);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char	*tmp = getenv("TMPDIR");

	FUZZ_CHECK(sodium_init() >= 0);
	snprintf(base_dir, sizeof base_dir, "%s/idem-fuzz-journal.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	FUZZ_CHECK(mkdtemp(base_dir) != NULL);
	snprintf(journal_dir, sizeof journal_dir, "%s/journal", base_dir);
	FUZZ_CHECK(mkdir(journal_dir, 0700) == 0);
	atexit(cleanup);
	return 0;
}

static void
write_file(const char *path, const uint8_t *data, size_t size)
{
	int	fd;

	fd = open(path, O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600);
	FUZZ_CHECK(fd != -1);
	FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
	close(fd);
}

/* The file's bytes (malloc'd), or NULL if it is gone. */
static uint8_t *
read_file(const char *path, size_t *size)
{
	struct stat	 st;
	uint8_t		*data;
	int		 fd;

	if ((fd = open(path, O_RDONLY|O_CLOEXEC)) == -1) {
		FUZZ_CHECK(errno == ENOENT);
		return NULL;
	}
	FUZZ_CHECK(fstat(fd, &st) == 0);
	*size = (size_t)st.st_size;
	FUZZ_CHECK((data = malloc(*size + 1)) != NULL);
	FUZZ_CHECK(pread(fd, data, *size, 0) == (ssize_t)*size);
	close(fd);
	return data;
}

static int
apply(const struct journal_record *r, void *arg)
{
	struct run	*run = arg;
	static uint8_t	 out[JOURNAL_MAX_EFFECT_RECORD_BYTES];
	size_t		 n, pad, k;
	uint64_t	 s = run->stats->at_segment, at = run->stats->at_offset;

	/* A hinted record carries its own note: the hints ran in order. */
	FUZZ_CHECK(r->hint == 0 || r->hint == run->records + 1);
	/*
	 * The record re-encodes to the bytes it came from; a form 2 record
	 * (a segment journal_rotate made, format 2) after its 24-byte round
	 * prefix (doc/journal.md, "Rounds over the zero tail").
	 */
	n = journal_encode(r, out, sizeof out);
	FUZZ_CHECK(n >= RECORD_HEADER_BYTES + PAYLOAD_MIN);
	FUZZ_CHECK(s >= 1 && s <= run->nseg);
	/*
	 * Right after the record before, or (format 2) after the zeros of
	 * the sector padding the rule asks for there (doc/journal.md,
	 * "Sector padding"); stats.bytes counts them.
	 */
	if (s != run->end_seg) {
		run->end_seg = s;
		run->end_at = HEADER_BYTES;
	}
	pad = r->form == JOURNAL_FORMAT_ROUNDS ?
	    journal_round_pad(run->end_at) : 0;
	FUZZ_CHECK(at == run->end_at + pad);
	for (k = 0; k < pad; k++)
		FUZZ_CHECK(run->seg[s][run->end_at + k] == 0);
	FUZZ_CHECK(r->form != JOURNAL_FORMAT_ROUNDS ||
	    at % JOURNAL_SECTOR_BYTES + JOURNAL_PAD_SPAN <=
	    JOURNAL_SECTOR_BYTES);
	run->bytes += pad;
	FUZZ_CHECK(r->form == JOURNAL_FORMAT_PLAIN ||
	    r->form == JOURNAL_FORMAT_ROUNDS);
	if (r->form == JOURNAL_FORMAT_ROUNDS) {
		FUZZ_CHECK(memcmp(run->seg[s] + at, "\xff" "JRD", 4) == 0);
		at += JOURNAL_ROUND_PREFIX_BYTES;
	}
	FUZZ_CHECK(at >= HEADER_BYTES && at + n <= run->seg_size[s]);
	FUZZ_CHECK(memcmp(out, run->seg[s] + at, n) == 0);
	crypto_generichash_update(&run->hash, out, n);
	run->records++;
	run->bytes += n + (r->form == JOURNAL_FORMAT_ROUNDS ?
	    JOURNAL_ROUND_PREFIX_BYTES : 0);
	run->end_at = at + n;
	return 0;
}

/* idemd's start-up hints each record a few records before applying it. */
static void
hint(struct journal_record *r, void *arg)
{
	struct run	*run = arg;

	FUZZ_CHECK(r->hint == 0);
	r->hint = ++run->hints;
}

static int
replay(struct run *run, unsigned from, int flags,
    struct journal_replay_stats *stats)
{
	char	*cause = (char *)1;
	int	 rv;

	memset(stats, 0x5a, sizeof *stats);
	run->stats = stats;
	run->records = run->bytes = 0;
	run->end_seg = 0;
	crypto_generichash_init(&run->hash, NULL, 0, sizeof run->trace);
	run->hints = 0;
	if (++run->replays % 2 == 0)
		rv = journal_replay_hinted(journal_dir, from, flags, apply,
		    hint, run, stats, &cause);
	else if (from == 0)
		rv = journal_replay(journal_dir, flags, apply, run, stats,
		    &cause);
	else
		rv = journal_replay_from(journal_dir, from, flags, apply, run,
		    stats, &cause);
	crypto_generichash_final(&run->hash, run->trace, sizeof run->trace);
	FUZZ_CHECK(rv == 0 || rv == -1);
	if (rv == -1) {
		FUZZ_CHECK(cause != NULL && cause[0] != '\0');
		free(cause);
		return -1;
	}
	FUZZ_CHECK(cause == NULL);
	FUZZ_CHECK(stats->records == run->records);
	FUZZ_CHECK(stats->bytes == run->bytes);
	return 0;
}

/* Reload the files as they are now into run (for the next replay). */
static void
reload(struct run *run)
{
	char		path[PATH_MAX];
	unsigned	i;

	for (i = 1; i <= run->nseg; i++) {
		free(run->seg[i]);
		segment_path(i, path, sizeof path);
		run->seg[i] = read_file(path, &run->seg_size[i]);
		if (run->seg[i] == NULL)
			run->seg_size[i] = 0;
	}
}

/* One record the broker could write. */
static size_t
sample_record(uint8_t *out, size_t size)
{
	struct journal_record	r;

	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_ENTRY;
	r.entry.kind = SUBTAB_KIND_TASK;
	r.entry.state = SUBTAB_RESERVED;
	r.entry.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	r.entry.sender_length = 2;
	memcpy(r.entry.sender, "PM", 2);
	r.entry.recipient_length = 3;
	memcpy(r.entry.recipient, "DEV", 3);
	r.entry.date = 20261202;
	r.entry.seq = 7;
	r.entry.key_length = 13;
	memcpy(r.key, "run-42/step-3", 13);
	return journal_encode(&r, out, size);
}

/* Segments before from are a checkpoint's: never read, never changed. */
static void
check_untouched(const struct run *run, unsigned below)
{
	char		 path[PATH_MAX];
	uint8_t		*now;
	size_t		 n;
	unsigned	 i;

	for (i = 1; i < below && i <= run->nseg; i++) {
		segment_path(i, path, sizeof path);
		FUZZ_CHECK((now = read_file(path, &n)) != NULL);
		FUZZ_CHECK(n == run->seg_size[i] &&
		    memcmp(now, run->seg[i], n) == 0);
		free(now);
	}
}

/* Open as start-up does, append a record (after a rotation), sync. */
static void
append_one(struct run *run, int rotate)
{
	struct journal	 j;
	struct iovec	 iov;
	uint8_t		 record[JOURNAL_MAX_RECORD_BYTES];
	char		*cause = NULL;

	if (journal_open(&j, journal_dir, &cause) != 0) {
		fprintf(stderr, "fuzz_journal: journal_open after a good "
		    "replay: %s\n", cause != NULL ? cause : "(no cause)");
		FUZZ_CHECK(!"journal_open refuses what replay accepted");
	}
	FUZZ_CHECK(j.segment >= 1 && j.segment <= run->nseg);
	if (rotate) {
		FUZZ_CHECK(journal_sync(&j, &cause) == 0);
		FUZZ_CHECK(journal_rotate(&j, &cause) == 0);
		if (run->nseg < MAX_SEGMENTS)
			run->nseg++;
		FUZZ_CHECK(j.segment <= run->nseg);
	}
	iov.iov_base = record;
	iov.iov_len = sample_record(record, sizeof record);
	FUZZ_CHECK(iov.iov_len != 0);
	FUZZ_CHECK(journal_append(&j, &iov, 1, &cause) == 0);
	FUZZ_CHECK(journal_sync(&j, &cause) == 0);
	journal_close(&j);
}

static void
fuzz_replay(const uint8_t *data, size_t size)
{
	struct journal_replay_stats	 st1, st2;
	struct run			 run;
	char				 path[PATH_MAX];
	uint8_t				 mode, param, *now;
	unsigned char			 trace[sizeof run.trace];
	size_t				 pieces[3], split, n, hdr;
	size_t				 total_before = 0, total_after = 0;
	unsigned			 i, alive = 0, from;
	uint64_t			 records;
	int				 flags;

	if (size < 2)
		return;
	mode = data[0];
	param = data[1];
	hdr = (mode & 1) ? HEADER_BYTES : 0;
	flags = (mode & 8) ? JOURNAL_REPLAY_READONLY : 0;
	from = (mode & 64) ? 2 : 0;
	data += 2;
	size -= 2;

	memset(&run, 0, sizeof run);
	run.nseg = (mode & 4) ? 2 : 1;
	if (mode & 4) {
		split = size * param / 256;
		pieces[1] = split;
		pieces[2] = size - split;
	} else
		pieces[1] = size;
	for (i = 1; i <= run.nseg; i++) {
		run.seg_size[i] = hdr + pieces[i];
		FUZZ_CHECK((run.seg[i] = malloc(run.seg_size[i] + 1)) != NULL);
		if (hdr != 0)
			header_encode(i, run.seg[i]);
		memcpy(run.seg[i] + hdr, data, pieces[i]);
		data += pieces[i];
		if (mode & 2)
			fix_checksums(run.seg[i], run.seg_size[i], hdr);
	}
	if (mode & 16) {
		i = ++run.nseg;
		run.seg_size[i] = param % HEADER_BYTES;
		FUZZ_CHECK((run.seg[i] = malloc(HEADER_BYTES)) != NULL);
		header_encode(i, run.seg[i]);
	}

	empty_dir();
	for (i = 1; i <= run.nseg; i++) {
		segment_path(i, path, sizeof path);
		write_file(path, run.seg[i], run.seg_size[i]);
		if (i >= from)
			total_before += run.seg_size[i];
	}

	if (replay(&run, from, flags, &st1) != 0) {
		/* Corruption (or no segment from): nothing is modified. */
		check_untouched(&run, run.nseg + 1);
		goto out;
	}
	FUZZ_CHECK(from <= run.nseg);
	FUZZ_CHECK(st1.segments <= run.nseg);
	check_untouched(&run, from);

	/* What is left on disk: whole segments, or cut ones. */
	for (i = from > 0 ? from : 1; i <= run.nseg; i++) {
		segment_path(i, path, sizeof path);
		if ((now = read_file(path, &n)) == NULL)
			continue;
		alive++;
		total_after += n;
		FUZZ_CHECK(n <= run.seg_size[i] &&
		    memcmp(now, run.seg[i], n) == 0);
		if (flags & JOURNAL_REPLAY_READONLY)
			FUZZ_CHECK(n == run.seg_size[i]);
		free(now);
	}
	if (flags & JOURNAL_REPLAY_READONLY) {
		FUZZ_CHECK(st1.truncated_bytes <= total_before);
	} else {
		FUZZ_CHECK(alive == st1.segments);
		/* The last segment's zero tail is its clean end, left. */
		FUZZ_CHECK(total_after == HEADER_BYTES * st1.segments +
		    st1.bytes + st1.zero_bytes);
		FUZZ_CHECK(total_before - total_after == st1.truncated_bytes);
	}

	/* Again: the same records, nothing (more) to cut. */
	records = st1.records;
	memcpy(trace, run.trace, sizeof trace);
	reload(&run);
	if (replay(&run, from, flags, &st2) != 0)
		FUZZ_CHECK(!"a second replay fails after a good one");
	FUZZ_CHECK(st2.records == records);
	FUZZ_CHECK(memcmp(run.trace, trace, sizeof trace) == 0);
	FUZZ_CHECK(st2.truncated_bytes == ((flags & JOURNAL_REPLAY_READONLY) ?
	    st1.truncated_bytes : 0));
	if ((flags & JOURNAL_REPLAY_READONLY) || !(mode & 32))
		goto out;

	/* Start-up (replay, open), then appends, after a rotation with bit 7. */
	append_one(&run, (mode & 128) != 0);
	reload(&run);
	FUZZ_CHECK(replay(&run, from, 0, &st2) == 0);
	FUZZ_CHECK(st2.records == records + 1);
	FUZZ_CHECK(st2.truncated_bytes == 0);

out:
	for (i = 1; i <= MAX_SEGMENTS; i++)
		free(run.seg[i]);
}

/* ---- format 2: rounds ------------------------------------------------ */

#define ROUNDS_MAX_RECORDS	12
#define ROUND_PREFIX_BYTES	24

struct rounds_run {
	uint8_t		*seg;
	size_t		 size;
	size_t		 at[ROUNDS_MAX_RECORDS], len[ROUNDS_MAX_RECORDS];
	size_t		 pre[ROUNDS_MAX_RECORDS];	/* before its padding */
	uint64_t	 start[ROUNDS_MAX_RECORDS];	/* its round's */
	unsigned	 n;
	unsigned	 applied;	/* from segment 1 */
	unsigned	 others;	/* from segment 2 */
	struct journal_replay_stats *stats;
};

static int
rounds_apply(const struct journal_record *r, void *arg)
{
	struct rounds_run	*rr = arg;

	FUZZ_CHECK(r->form == JOURNAL_FORMAT_ROUNDS);
	if (rr->stats->at_segment == 2) {
		rr->others++;
		return 0;
	}
	FUZZ_CHECK(rr->stats->at_segment == 1);
	/* Never a record skipped: the next applied is the next built. */
	FUZZ_CHECK(rr->applied < rr->n);
	FUZZ_CHECK(rr->stats->at_offset == rr->at[rr->applied]);
	FUZZ_CHECK(r->round_start == rr->start[rr->applied]);
	rr->applied++;
	return 0;
}

/* A form 2 record of key length klen, its round begun at start. */
static size_t
rounds_record(uint8_t *out, size_t size, unsigned n, unsigned klen,
    uint64_t start)
{
	struct journal_record	r;
	uint8_t			check[20];
	size_t			len;
	unsigned		i;

	memset(&r, 0, sizeof r);
	r.type = JOURNAL_RECORD_ENTRY;
	r.entry.kind = SUBTAB_KIND_TASK;
	r.entry.state = SUBTAB_COMMITTED;
	r.entry.schema = SUBTAB_SCHEMA_WRITE_TASK_V1;
	r.entry.date = 20261205;
	r.entry.seq = n + 1;
	r.entry.key_length = (uint16_t)klen;
	for (i = 0; i < klen; i++)
		r.key[i] = (char)('a' + (n + i) % 26);
	len = journal_encode(&r, out + ROUND_PREFIX_BYTES,
	    size - ROUND_PREFIX_BYTES);
	FUZZ_CHECK(len > 0);
	/* The prefix, from doc/journal.md: magic, 0, R, check. */
	memcpy(out, "\xff" "JRD", 4);
	memset(out + 4, 0, 4);
	put_u64(out + 8, start);
	memcpy(check, out + 4, 12);
	memcpy(check + 12, out + ROUND_PREFIX_BYTES + 8, 8);
	crypto_shorthash(out + 16, check, sizeof check, checksum_key);
	return ROUND_PREFIX_BYTES + len;
}

/* Did the damage change bytes [a, a + n) of the segment? */
static int
changed(const uint8_t *seg, const uint8_t *orig, size_t a, size_t n)
{
	return memcmp(seg + a, orig + a, n) != 0;
}

static void
fuzz_rounds(const uint8_t *data, size_t size)
{
	static uint8_t			 seg[HEADER_BYTES + ROUNDS_MAX_RECORDS *
					    (ROUND_PREFIX_BYTES + 16 +
					    PAYLOAD_MIN + 64 + JOURNAL_PAD_SPAN) +
					    4096];
	static uint8_t			 orig[sizeof seg];
	uint8_t				 two[HEADER_BYTES + 512], *now;
	struct journal_replay_stats	 stats;
	struct rounds_run		 rr;
	char				 path[PATH_MAX], *cause = NULL;
	size_t				 end, zeros, x, l, i, k, two_size = 0;
	size_t				 n_now, first;
	uint64_t			 start = HEADER_BYTES, last_start;
	unsigned			 kind, sealed, flags, must, refuse, lose;
	int				 rv;

	if (size < 5)
		return;
	memset(&rr, 0, sizeof rr);
	rr.n = 1 + data[0] % ROUNDS_MAX_RECORDS;
	kind = data[1] & 3;
	/* Bit 4: a power loss, the last round's sectors lost as data[2]. */
	lose = (data[1] & 16) != 0;
	sealed = !lose && (data[1] & 4) != 0;
	flags = (data[1] & 8) ? JOURNAL_REPLAY_READONLY : 0;
	memset(seg, 0, sizeof seg);
	memcpy(seg, "IDEMJNL", 8);
	seg[8] = 2;				/* version 2 */
	put_u64(seg + 16, 1);
	crypto_shorthash(seg + 24, seg, 24, checksum_key);
	end = HEADER_BYTES;
	for (i = 0; i < rr.n; i++) {
		k = 4 + i < size ? data[4 + i] : 0;
		if (i > 0 && (k & 1))
			start = end;		/* a new round */
		/* The writer's sector padding (doc/journal.md). */
		rr.pre[i] = end;
		end += journal_round_pad(end);
		rr.at[i] = end;
		rr.start[i] = start;
		rr.len[i] = rounds_record(seg + end, sizeof seg - end,
		    (unsigned)i, 1 + (unsigned)(k >> 1) % 64, start);
		end += rr.len[i];
	}
	last_start = start;
	zeros = sealed ? 0 : (size_t)(data[3] >> 4) * 256;
	rr.size = end + zeros;
	FUZZ_CHECK(rr.size <= sizeof seg);

	memcpy(orig, seg, rr.size);
	/* The damage: [x, x + l) within the records. */
	x = HEADER_BYTES + (end - HEADER_BYTES) * data[2] / 256;
	l = kind == 2 ? 1 : 1 + data[3] % 64;
	if (x + l > end)
		l = end - x;
	if (lose) {
		/*
		 * A power loss during the last round, over the zeros: each
		 * of its 512-byte sectors kept or lost as data[2]'s bits
		 * say (a lost one holds what it held before the round:
		 * the synced bytes before last_start, zeros after).
		 */
		for (i = 0; i < 8; i++) {
			k = (last_start / 512 + i) * 512;
			if (!(data[2] >> i & 1) || k >= rr.size)
				continue;
			if (k < last_start)
				k = last_start;
			l = (last_start / 512 + i + 1) * 512;
			if (l > rr.size)
				l = rr.size;
			memset(seg + k, 0, l - k);
		}
		x = last_start;
		l = 1;			/* set to 0 below if nothing changed */
	} else if (kind == 0)
		memset(seg + x, 0, l);
	else if (kind == 1) {
		data += 4 + rr.n;
		size = size > 4 + rr.n ? size - 4 - rr.n : 0;
		for (i = 0; i < l; i++)
			seg[x + i] = size > 0 ? data[i % size] : 0x5a;
	} else if (kind == 2)
		seg[x] ^= (uint8_t)(1 << (data[3] % 8));
	else
		l = 0;

	empty_dir();
	segment_path(1, path, sizeof path);
	write_file(path, seg, rr.size);
	if (sealed) {
		memset(two, 0, sizeof two);
		memcpy(two, "IDEMJNL", 8);
		two[8] = 2;
		put_u64(two + 16, 2);
		crypto_shorthash(two + 24, two, 24, checksum_key);
		two_size = HEADER_BYTES + rounds_record(two + HEADER_BYTES,
		    sizeof two - HEADER_BYTES, 99, 5, HEADER_BYTES);
		segment_path(2, path, sizeof path);
		write_file(path, two, two_size);
	}

	memset(&stats, 0x5a, sizeof stats);
	rr.stats = &stats;
	rv = journal_replay(journal_dir, (int)flags, rounds_apply, &rr, &stats,
	    &cause);
	FUZZ_CHECK(rv == 0 || rv == -1);
	free(cause);
	segment_path(1, path, sizeof path);
	FUZZ_CHECK((now = read_file(path, &n_now)) != NULL);
	FUZZ_CHECK(n_now <= rr.size && memcmp(now, seg, n_now) == 0);
	free(now);
	if (rv == -1 || (flags & JOURNAL_REPLAY_READONLY))
		FUZZ_CHECK(n_now == rr.size);	/* nothing changed */

	/*
	 * The first record the damage changed (zeros over zeros do not),
	 * its padding included: non-zero padding is a bad record there.
	 */
	for (first = 0; first < rr.n; first++)
		if (changed(seg, orig, rr.pre[first], rr.at[first] +
		    rr.len[first] - rr.pre[first]))
			break;
	if (first == rr.n)
		l = 0;
	/*
	 * Liveness, the rule exactly: zeros or a flipped bit inside the
	 * last round are a torn round, cut at the first record they
	 * changed, unless a record whose round start or check they changed
	 * (its inner record whole: "bare") has no record after it whose
	 * start and check are whole; then they are refused.
	 */
	must = l == 0 || lose;
	refuse = 0;
	if (l != 0 && !lose && !sealed && kind != 1 && x >= last_start) {
		must = 1;
		for (i = first; i < rr.n; i++) {
			if (changed(seg, orig, rr.at[i] + ROUND_PREFIX_BYTES,
			    rr.len[i] - ROUND_PREFIX_BYTES))
				continue;	/* no record there */
			/* Bytes 0..7 are constants: their loss is recovered. */
			if (changed(seg, orig, rr.at[i] + 8,
			    ROUND_PREFIX_BYTES - 8))
				refuse = 1;	/* bare */
			else
				refuse = 0;	/* its round covers those before */
		}
		if (refuse)
			must = 0;
	}
	if (refuse) {
		FUZZ_CHECK(rv == -1);
		FUZZ_CHECK(n_now == rr.size);
	}
	/*
	 * A torn round (any subset of its sectors lost, over zeros) is
	 * always cut, never refused: the padding keeps a prefix and its
	 * inner header in one sector, so no record survives bare.
	 */
	if (lose && rv != 0) {
		fprintf(stderr, "fuzz_journal: a torn round (sectors lost "
		    "%#x) was refused\n", data[2]);
		FUZZ_CHECK(!"a torn round refused");
	}
	if (must) {
		FUZZ_CHECK(rv == 0);
		FUZZ_CHECK(rr.applied == (l == 0 ? rr.n : first));
		if (l == 0)
			FUZZ_CHECK(stats.truncated_bytes == 0 &&
			    stats.zero_bytes == (sealed ? 0 : zeros));
		else if (stats.torn_segment == 0)
			/* Lost sectors left only zeros: the clean end. */
			FUZZ_CHECK(lose && stats.end_offset == rr.pre[first] &&
			    stats.zero_bytes == rr.size - rr.pre[first]);
		else
			FUZZ_CHECK(stats.torn_offset == rr.pre[first] &&
			    stats.truncated_bytes == rr.size - rr.pre[first]);
	}
	if (rv == -1)
		return;

	/* Every record before the first changed one was applied. */
	FUZZ_CHECK(rr.applied >= first);
	if (sealed) {
		/* A sealed segment is never cut; segment 2 replays. */
		FUZZ_CHECK(stats.torn_segment != 1);
		FUZZ_CHECK(rr.applied == rr.n && rr.others == 1);
		return;
	}
	if (rr.applied == rr.n)
		return;
	/* Zeros from the last record applied on: nothing after it. */
	if (stats.torn_segment == 0) {
		FUZZ_CHECK(stats.end_offset == rr.pre[rr.applied]);
		for (i = rr.pre[rr.applied]; i < rr.size; i++)
			FUZZ_CHECK(seg[i] == 0);
		return;
	}
	/* Cut at X: no whole record after it of a round begun after X. */
	FUZZ_CHECK(stats.torn_segment == 1);
	FUZZ_CHECK(stats.torn_offset == rr.pre[rr.applied]);
	for (i = rr.applied; i < rr.n; i++)
		if (!changed(seg, orig, rr.at[i], rr.len[i]))
			FUZZ_CHECK(rr.start[i] <= stats.torn_offset);
}

/*
 * Replay's decoder on bytes that begin with a round prefix: OK is form 2
 * and re-encodes to the bytes after the prefix; journal_decode (form 1
 * only: checkpoints, the index) refuses them.
 */
static void
decode_form2_at(const uint8_t *p, size_t length)
{
	struct journal_record	 r;
	static uint8_t		 out[JOURNAL_MAX_EFFECT_RECORD_BYTES];
	const char		*why;
	size_t			 consumed, n;

	if (journal_record_decode(p, length, &r, &consumed, &why) !=
	    JOURNAL_DECODE_OK)
		return;
	FUZZ_CHECK(r.form == JOURNAL_FORMAT_ROUNDS &&
	    consumed > JOURNAL_ROUND_PREFIX_BYTES && consumed <= length);
	n = journal_encode(&r, out, sizeof out);
	FUZZ_CHECK(n + JOURNAL_ROUND_PREFIX_BYTES == consumed &&
	    memcmp(out, p + JOURNAL_ROUND_PREFIX_BYTES, n) == 0);
	FUZZ_CHECK(journal_decode(p, length, &r, &n) == JOURNAL_DECODE_BAD);
}

/* journal_decode on bytes at offset at, against doc/journal.md. */
static void
decode_at(const uint8_t *buf, size_t size, size_t at)
{
	struct journal_record		 r, untouched;
	enum journal_decode_result	 res;
	static uint8_t			 out[JOURNAL_MAX_EFFECT_RECORD_BYTES];
	size_t				 length = size - at, consumed, n, k;
	uint32_t			 l;

	memset(&r, 0xa5, sizeof r);
	untouched = r;
	consumed = SIZE_MAX;
	if (length >= 4 && memcmp(buf + at, "\xff" "JRD", 4) == 0)
		decode_form2_at(buf + at, length);
	res = journal_decode(buf + at, length, &r, &consumed);
	FUZZ_CHECK(res == JOURNAL_DECODE_OK || res == JOURNAL_DECODE_SHORT ||
	    res == JOURNAL_DECODE_BAD);
	if (length < RECORD_HEADER_BYTES)
		FUZZ_CHECK(res == JOURNAL_DECODE_SHORT);
	else if (memcmp(buf + at, record_magic, sizeof record_magic) != 0)
		FUZZ_CHECK(res == JOURNAL_DECODE_BAD);
	else {
		l = get_u32(buf + at + 4);
		if (l < PAYLOAD_MIN || l > PAYLOAD_MAX)
			FUZZ_CHECK(res == JOURNAL_DECODE_BAD);
		else if (length < RECORD_HEADER_BYTES + l)
			FUZZ_CHECK(res == JOURNAL_DECODE_SHORT);
		else if (res == JOURNAL_DECODE_OK)
			FUZZ_CHECK(consumed == RECORD_HEADER_BYTES + l);
	}
	if (res != JOURNAL_DECODE_OK) {
		/* The caller's record is left as it was. */
		FUZZ_CHECK(memcmp(&r, &untouched, sizeof r) == 0);
		FUZZ_CHECK(consumed == SIZE_MAX);
		return;
	}
	FUZZ_CHECK(consumed <= length);
	FUZZ_CHECK(r.entry.key_length <= SUBTAB_MAX_KEY_BYTES);
	FUZZ_CHECK(r.form == JOURNAL_FORMAT_PLAIN);
	n = journal_encode(&r, out, sizeof out);
	FUZZ_CHECK(n == consumed && memcmp(out, buf + at, n) == 0);
	/* Every truncation of a valid record is SHORT. */
	for (k = 0; k < consumed; k++)
		FUZZ_CHECK(journal_decode(buf + at, k, &r, &n) ==
		    JOURNAL_DECODE_SHORT);
}

/* journal_decode at offset 0 and at the first magics after it. */
static void
fuzz_decode(const uint8_t *data, size_t size)
{
	const uint8_t	*m;
	uint8_t		*buf;
	size_t		 at;
	unsigned	 tries;

	if (size < 1)
		return;
	FUZZ_CHECK((buf = malloc(size)) != NULL);
	memcpy(buf, data + 1, size - 1);
	size--;
	if (data[0] & 2)
		fix_checksums(buf, size, 0);
	decode_at(buf, size, 0);
	for (at = 1, tries = 0; at < size && tries < 16; at++, tries++) {
		m = memmem(buf + at, size - at, record_magic,
		    sizeof record_magic);
		if (m == NULL)
			break;
		at = (size_t)(m - buf);
		decode_at(buf, size, at);
	}
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_decode(data, size);
	fuzz_replay(data, size);
	fuzz_rounds(data, size);
	return 0;
}
