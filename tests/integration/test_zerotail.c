/* SPDX-License-Identifier: ISC */
/*
 * test_zerotail.c: the journal's zero tail against a real idemd
 * (doc/journal.md, "The zero tail"; issue 33).  The live segment holds
 * zeros ahead of its last record; idemctl verify beside the broker, a
 * restart after a SIGKILL and verify after a clean stop (which cuts the
 * zeros) all read it clean, every receipt kept.  With the fault shim
 * (tests/faults/faultshim.c) failing every pwrite of the journal, the
 * zeros' call and not the records' (pwritev), clients see nothing: no
 * storage_unavailable, every receipt durable across a SIGKILL, one
 * warning in the log; once the fault clears the zeros come back.
 *
 * The logical end of a segment is read here from doc/journal.md's
 * record layout (magic, length, checksum, payload), not from idemd.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"

#define TEST_WATCHDOG_SECONDS	90
/* How long to wait for an event that must come (a guard, not a pause). */
#define TEST_EVENT_TIMEOUT_MS	20000
#define TEST_SUBMISSIONS	6
/* verify_beside_a_busy_broker: the child's submissions, the verifies. */
#define TEST_BUSY_SUBMISSIONS	600
#define TEST_BUSY_VERIFIES	20
/* Between two rounds while the broker's zero retry interval runs. */
#define TEST_ROUND_PACE_MS	100
/* doc/journal.md: segment header, record header, the record magic. */
#define DOC_SEGMENT_HEADER_BYTES	32
#define DOC_RECORD_HEADER_BYTES		16
static const uint8_t doc_record_magic[4] = { 0xff, 'J', 'R', 'C' };
/* Format 2: a round prefix, its magic (the round start, a check follow). */
#define DOC_ROUND_PREFIX_BYTES		24
static const uint8_t doc_round_magic[4] = { 0xff, 'J', 'R', 'D' };

static int
setup(void **state)
{
	if (sodium_init() < 0)
		return -1;
	return harness_shim_setup(state, TEST_WATCHDOG_SECONDS);
}

/* The last segment's bytes (malloc'd) and their count. */
static uint8_t *
read_segment(const struct broker *b, size_t *size)
{
	char		 path[512];
	struct stat	 st;
	uint8_t		*p;
	int		 fd;

	snprintf(path, sizeof path, "%s/.idem/journal/0000000000000001.jnl",
	    b->root);
	assert_true((fd = open(path, O_RDONLY | O_CLOEXEC)) != -1);
	assert_int_equal(fstat(fd, &st), 0);
	assert_non_null(p = malloc((size_t)st.st_size + 1));
	assert_int_equal(read(fd, p, (size_t)st.st_size), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return p;
}

/* Its records' end; *zeros: whether only zeros follow it. */
static size_t
logical_end(const uint8_t *p, size_t size, int *zeros)
{
	size_t		at = DOC_SEGMENT_HEADER_BYTES, i, inner, next, start;
	uint32_t	length;

	for (;;) {
		start = at;
		/*
		 * Format 2's sector padding: a prefix and inner header (40
		 * bytes) never cross a 512-byte boundary; zeros up to it.
		 */
		if (p[8] == 2 && at % 512 + 40 > 512) {
			next = (at / 512 + 1) * 512;
			for (i = at; i < next && i < size && p[i] == 0; i++)
				;
			if (i < next)
				break;
			at = next;
		}
		/* Format 2: a round prefix before each record. */
		inner = at + DOC_ROUND_PREFIX_BYTES <= size && memcmp(p + at,
		    doc_round_magic, sizeof doc_round_magic) == 0 ?
		    at + DOC_ROUND_PREFIX_BYTES : at;
		if (inner + DOC_RECORD_HEADER_BYTES > size ||
		    memcmp(p + inner, doc_record_magic,
		    sizeof doc_record_magic) != 0) {
			at = start;	/* the padding is the zero tail's */
			break;
		}
		length = (uint32_t)p[inner + 4] | (uint32_t)p[inner + 5] << 8 |
		    (uint32_t)p[inner + 6] << 16 | (uint32_t)p[inner + 7] << 24;
		at = inner + DOC_RECORD_HEADER_BYTES + length;
	}
	assert_true(at <= size);
	*zeros = 1;
	for (i = at; i < size; i++)
		if (p[i] != 0)
			*zeros = 0;
	return at;
}

/* The segment's size and logical end; only zeros between them. */
static void
segment_ends(const struct broker *b, size_t *size, size_t *end)
{
	uint8_t	*p;
	int	 zeros;

	p = read_segment(b, size);
	*end = logical_end(p, *size, &zeros);
	free(p);
	assert_true(zeros);
}

/* idemctl verify --json on the root: its exit status; the journal's part. */
static int
verify(const struct broker *b, json_t **journal)
{
	char		 cmd[1024], out[1 << 16];
	json_t		*j;
	json_error_t	 error;
	FILE		*p;
	size_t		 n;
	int		 status;

	snprintf(cmd, sizeof cmd, "'%s' --root '%s' verify --json 2>/dev/null",
	    getenv("IDEMCTL") != NULL ? getenv("IDEMCTL") : "contrib/idemctl",
	    b->root);
	assert_non_null(p = popen(cmd, "r"));
	n = fread(out, 1, sizeof out - 1, p);
	out[n] = '\0';
	status = pclose(p);
	if ((j = json_loads(out, 0, &error)) == NULL)
		fail_msg("idemctl verify --json: not JSON: %s", out);
	*journal = json_incref(json_object_get(j, "journal"));
	json_decref(j);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void
assert_verify_clean(const struct broker *b, size_t end)
{
	json_t	*journal;
	int	 status;

	status = verify(b, &journal);
	assert_non_null(journal);
	if (status != 0)
		fail_msg("idemctl verify: exit %d: %s", status,
		    json_dumps(journal, 0));
	assert_true(json_is_null(json_object_get(journal, "torn_tail")));
	assert_true(json_is_true(json_object_get(journal, "intact")));
	/* Its records, not the file: the zeros are neither. */
	assert_int_equal(json_integer_value(json_object_get(journal, "bytes")),
	    end - DOC_SEGMENT_HEADER_BYTES);
	json_decref(journal);
}

/* Submit TEST_SUBMISSIONS ids (prefix/i); each created; receipts kept. */
static void
submit_all(struct broker *b, const char *prefix, char **receipts)
{
	char	 id[64];
	json_t	*reply;
	int	 i;

	for (i = 0; i < TEST_SUBMISSIONS; i++) {
		snprintf(id, sizeof id, "%s/%d", prefix, i);
		reply = harness_submit(b, id, "zero tail");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		receipts[i] = harness_receipt_text(reply);
		json_decref(reply);
	}
}

/* Each id again: reused, its receipt byte for byte. */
static void
assert_all_reused(struct broker *b, const char *prefix, char **receipts)
{
	char	 id[64], *again;
	json_t	*reply;
	int	 i;

	for (i = 0; i < TEST_SUBMISSIONS; i++) {
		snprintf(id, sizeof id, "%s/%d", prefix, i);
		reply = harness_submit(b, id, "zero tail");
		harness_assert_outcome(reply, "reused", 0, 1, 0);
		again = harness_receipt_text(reply);
		assert_string_equal(again, receipts[i]);
		free(again);
		json_decref(reply);
	}
}

static void
free_all(char **receipts)
{
	int	i;

	for (i = 0; i < TEST_SUBMISSIONS; i++)
		free(receipts[i]);
}

/*
 * Zeros ahead of the live segment's last record; verify beside the
 * broker, a restart after SIGKILL (the zeros still there) and verify
 * after a clean stop (the zeros cut) read it clean.
 */
static void
live_segment_has_zeros_ahead(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[TEST_SUBMISSIONS];
	size_t			 size, end;

	assert_int_equal(harness_start(b, NULL, t->env), 0);
	/*
	 * The zeros come after a round; each submission is two rounds and
	 * waits for the last, so those of the first are there by the last.
	 */
	submit_all(b, "zt", receipts);
	segment_ends(b, &size, &end);
	print_message("live segment: %zu bytes, records end at %zu\n", size,
	    end);
	assert_true(size > end);
	assert_verify_clean(b, end);

	/* A crash keeps the zeros; the restart reads them as the end. */
	harness_kill(b);
	segment_ends(b, &size, &end);
	assert_true(size > end);
	assert_int_equal(harness_start(b, NULL, t->env), 0);
	assert_int_equal(harness_log_count(b, "torn tail"), 0);
	assert_all_reused(b, "zt", receipts);

	/* A clean stop cuts them: the stopped journal holds records only. */
	assert_int_equal(harness_stop(b), 0);
	segment_ends(b, &size, &end);
	assert_int_equal(size, end);
	assert_verify_clean(b, end);
	free_all(receipts);
	harness_shim_finish(t);
}

/*
 * Every pwrite of the journal (the zeros, not the records) fails: the
 * clients see nothing, the log says so once, the receipts are durable;
 * once the fault clears, the zeros come back.
 */
static void
failing_zero_write_changes_nothing(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[TEST_SUBMISSIONS], id[64];
	json_t			*reply;
	struct timespec		 pace;
	int64_t			 deadline;
	size_t			 size, end;
	int			 i;

	harness_fault_rule(t->fault_file, "pwrite .idem/journal/0 ENOSPC");
	assert_int_equal(harness_start(b, NULL, t->env), 0);
	submit_all(b, "fz", receipts);
	segment_ends(b, &size, &end);
	assert_int_equal(size, end);
	assert_int_equal(harness_log_count(b, "writing zeros ahead at"), 1);
	assert_int_equal(harness_log_count(b, "refusing writes"), 0);
	assert_verify_clean(b, end);

	/*
	 * Cleared: the broker tries again once its retry interval (1 s,
	 * JOURNAL_ZERO_RETRY_MS) has passed, after a round.  A round a
	 * TEST_ROUND_PACE_MS, not as fast as it goes: each is a TASK
	 * number, and a day has 999.
	 */
	harness_fault_rule(t->fault_file, "");
	deadline = harness_now_ms() + TEST_EVENT_TIMEOUT_MS;
	pace.tv_sec = 0;
	pace.tv_nsec = TEST_ROUND_PACE_MS * 1000000L;
	for (i = 0; harness_log_count(b, "writing zeros ahead again") == 0;
	    i++) {
		if (harness_now_ms() > deadline)
			fail_msg("no zeros written %d ms after the fault "
			    "cleared", TEST_EVENT_TIMEOUT_MS);
		if (i > 0)
			nanosleep(&pace, NULL);
		snprintf(id, sizeof id, "fz-after/%d", i);
		reply = harness_submit(b, id, "zero tail");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
	}
	/* One more round: the zeros are written after the one that logs. */
	reply = harness_submit(b, "fz-last", "zero tail");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	segment_ends(b, &size, &end);
	assert_true(size > end);

	/* Durable, those written without zeros too: a crash loses none. */
	harness_kill(b);
	assert_int_equal(harness_start(b, NULL, t->env), 0);
	assert_all_reused(b, "fz", receipts);
	assert_int_equal(harness_stop(b), 0);
	free_all(receipts);
	harness_shim_finish(t);
}

/*
 * The last round of the segment in p: its start (the round prefix's
 * round start), its records and the end of its last record, which is
 * whole (its checksum, doc/journal.md, verifies): 0 if there is none.
 */
static int
last_round(const uint8_t *p, size_t size, uint64_t *start, size_t *count,
    size_t *end)
{
	static const unsigned char	key[16] = "idem-journal-v1";
	uint8_t				sum[8], *buf;
	uint64_t			r;
	size_t				at, inner, length, i, next;

	*start = 0;
	*count = 0;
	for (at = DOC_SEGMENT_HEADER_BYTES;;) {
		/* Sector padding (logical_end): zeros to the boundary. */
		next = at;
		if (at % 512 + 40 > 512) {
			next = (at / 512 + 1) * 512;
			for (i = at; i < next && i < size && p[i] == 0; i++)
				;
			if (i < next)
				break;
		}
		if (next + DOC_ROUND_PREFIX_BYTES + DOC_RECORD_HEADER_BYTES >
		    size || memcmp(p + next, doc_round_magic, 4) != 0)
			break;
		at = next;
		r = 0;
		for (i = 0; i < 8; i++)
			r |= (uint64_t)p[at + 8 + i] << (8 * i);
		if (r != *start) {
			*start = r;
			*count = 0;
		}
		inner = at + DOC_ROUND_PREFIX_BYTES;
		length = (size_t)p[inner + 4] | (size_t)p[inner + 5] << 8 |
		    (size_t)p[inner + 6] << 16;
		if (inner + DOC_RECORD_HEADER_BYTES + length > size)
			return 0;
		/* The checksum covers the length field and the payload. */
		assert_non_null(buf = malloc(4 + length));
		memcpy(buf, p + inner + 4, 4);
		memcpy(buf + 4, p + inner + DOC_RECORD_HEADER_BYTES, length);
		crypto_shorthash(sum, buf, 4 + length, key);
		free(buf);
		if (memcmp(sum, p + inner + 8, sizeof sum) != 0)
			return 0;
		(*count)++;
		at = inner + DOC_RECORD_HEADER_BYTES + length;
	}
	*end = at;
	return *count > 0;
}

/*
 * The review's state (doc/journal.md, "Rounds over the zero tail"): a
 * round written over the zero tail and never synced, of which a power
 * loss kept the later record and not the first bytes.  Made for real:
 * the fault shim lets tr-last's first round (its reservation) be synced
 * and holds the fdatasync of its second (task_created and committed,
 * two records), so that round is on the page cache, never acknowledged
 * (the client gets no reply), when the broker is SIGKILLed; then the
 * round's first 60 bytes are reset to zeros.  The restart cuts exactly
 * that round (one warning, at its start, the bytes from there to the
 * file's end), keeps every acknowledged receipt byte for byte, and
 * tr-last, reserved with its TASK file linked, is adopted at start-up
 * (its retry reused, recovered).
 * With records that name no round this state was corruption and idemd
 * refused to start.
 */
static void
torn_last_round_restarts_clean(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			*receipts[TEST_SUBMISSIONS], path[512];
	char			 needle[128], *line;
	json_t			*reply;
	uint8_t			*p, zeros[60];
	uint64_t		 start = 0;
	size_t			 size, e0, count = 0, end = 0;
	int64_t			 deadline;
	struct timespec		 pace = { 0, 1000000L };
	int			 fd, raw;

	assert_int_equal(harness_start(b, NULL, t->env), 0);
	submit_all(b, "tr", receipts);
	/* Every record below e0 was acknowledged. */
	segment_ends(b, &size, &e0);

	harness_fault_rule(t->fault_file, "hold 0000000000000001.jnl 1");
	raw = harness_raw_send_task(b, "tr-last", "zero tail");
	/* Until its second round is written whole (its sync then held). */
	deadline = harness_now_ms() + TEST_EVENT_TIMEOUT_MS;
	for (;;) {
		p = read_segment(b, &size);
		if (last_round(p, size, &start, &count, &end) && start > e0 &&
		    count >= 2) {
			free(p);
			break;
		}
		free(p);
		assert_true(harness_now_ms() < deadline);
		nanosleep(&pace, NULL);
	}
	harness_kill(b);
	/* Never acknowledged: the connection ends without a reply. */
	line = harness_raw_read_line(raw);
	assert_null(line);
	close(raw);
	harness_fault_rule(t->fault_file, "");
	print_message("acknowledged end %zu, unsynced round at %" PRIu64
	    ", %zu records to %zu, file %zu\n", e0, start, count, end, size);
	assert_true(start > e0);
	assert_true(size > end);		/* the zeros ahead are there */

	/* Its first 60 bytes never reached the disk; its later record did. */
	snprintf(path, sizeof path, "%s/.idem/journal/0000000000000001.jnl",
	    b->root);
	memset(zeros, 0, sizeof zeros);
	assert_true((fd = open(path, O_WRONLY | O_CLOEXEC)) != -1);
	assert_int_equal(pwrite(fd, zeros, sizeof zeros, (off_t)start),
	    (ssize_t)sizeof zeros);
	close(fd);

	assert_int_equal(harness_start(b, NULL, t->env), 0);
	assert_int_equal(harness_log_count(b, "corrupt"), 0);
	assert_int_equal(harness_log_count(b, "torn tail"), 1);
	/* Cut at the round's start, to the end: the round and the zeros. */
	snprintf(needle, sizeof needle, "torn tail at offset %" PRIu64 " (",
	    start);
	assert_int_equal(harness_log_count(b, needle), 1);
	snprintf(needle, sizeof needle, "cut %" PRIu64 " bytes ",
	    (uint64_t)size - start);
	assert_int_equal(harness_log_count(b, needle), 1);
	/* Nothing acknowledged was cut. */
	assert_all_reused(b, "tr", receipts);
	/*
	 * Its reservation survived and its TASK file was linked: start-up
	 * adopted it, so the retry is reused, recovered (SPEC.md).
	 */
	reply = harness_submit(b, "tr-last", "zero tail");
	harness_assert_outcome(reply, "reused", 0, 1, 1);
	json_decref(reply);
	assert_int_equal(harness_stop(b), 0);
	free_all(receipts);
	harness_shim_finish(t);
}

/*
 * idemctl verify beside a broker writing rounds over its zero tail (a
 * child process submits without pause): every verify reads the journal
 * whole, never corrupt.  A read the round overtook (zeros, then the
 * round's later records) is looked at again (doc/journal.md, "Readers
 * beside a live broker"); a round cut short as it reads is a torn tail,
 * which a reader only reports.
 */
static void
verify_beside_a_busy_broker(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*journal, *reply;
	struct pollfd		 pfd;
	char			 id[64];
	pid_t			 child;
	int			 go[2], i, n, status, torn = 0;

	assert_int_equal(harness_start(b, NULL, t->env), 0);
	assert_int_equal(pipe(go), 0);
	if ((child = fork()) == 0) {
		close(go[1]);
		/* Until the parent closes its end (a day has 999 TASKs). */
		pfd.fd = go[0];
		pfd.events = POLLIN;
		for (n = 0; n < TEST_BUSY_SUBMISSIONS; n++) {
			if (poll(&pfd, 1, 0) != 0)
				break;
			snprintf(id, sizeof id, "busy/%d", n);
			reply = harness_submit(b, id, "zero tail");
			json_decref(reply);
		}
		_exit(0);
	}
	assert_true(child > 0);
	close(go[0]);
	for (i = 0; i < TEST_BUSY_VERIFIES; i++) {
		status = verify(b, &journal);
		assert_non_null(journal);
		if (!json_is_null(json_object_get(journal, "corrupt")))
			fail_msg("idemctl verify beside a busy broker (exit "
			    "%d): %s", status, json_dumps(journal, 0));
		if (!json_is_null(json_object_get(journal, "torn_tail")))
			torn++;
		json_decref(journal);
	}
	close(go[1]);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("%d verifies beside a busy broker, none corrupt, %d "
	    "saw a round in flight as a torn tail\n", TEST_BUSY_VERIFIES,
	    torn);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * Tasks created (ids prefix/0, prefix/1, ...) until the broker has logged
 * what: rotations and checkpoints come between rounds, so only requests
 * bring them (400 at most).
 */
static void
create_until_logged(struct broker *b, const char *prefix, const char *what)
{
	char	 id[64];
	json_t	*reply;
	int	 i;

	for (i = 0; harness_log_count(b, what) == 0; i++) {
		assert_true(i < 400);
		snprintf(id, sizeof id, "%s/%d", prefix, i);
		reply = harness_submit(b, id, "made ahead");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
	}
}

/*
 * A rotation waits for its segment being made ahead (doc/journal.md,
 * "The next segment made ahead"): with 4 KiB segments and the fsync of
 * segment 3's file held by the shim, segment 2 fills while requests go
 * on being served, no segment 3 appears, and once the hold ends the
 * rotation renames the one made ahead: the broker never logs that it
 * created a segment itself.  Fails without the wait (the rotation then
 * creates segment 3 while the other is still being made).
 */
static void
rotation_waits_for_the_segment_made_ahead(void **state)
{
	static const char *const args[] = { "--segment-bytes", "4096", NULL };
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	char			 id[64], path[512];
	json_t			*reply;
	int			 i;

	harness_fault_rule(t->fault_file, "hold .next-0000000000000003.tmp");
	assert_int_equal(harness_start(b, args, t->env), 0);
	/* Until the rotation to segment 2 and its checkpoint are done. */
	create_until_logged(b, "rw",
	    "checkpoint checkpoint-0000000000000002");
	/* Segment 2 past 4096 bytes (about 14 tasks fill one): served. */
	for (i = 0; i < 40; i++) {
		snprintf(id, sizeof id, "rw/more/%d", i);
		reply = harness_submit(b, id, "made ahead");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
	}
	snprintf(path, sizeof path, "%s/.idem/journal/0000000000000003.jnl",
	    b->root);
	assert_int_equal(access(path, F_OK), -1);
	harness_fault_rule(t->fault_file, "");
	/* Rotations come between rounds: requests until it is done. */
	create_until_logged(b, "rw/after",
	    "checkpoint checkpoint-0000000000000003");
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(harness_log_count(b, "none was made ahead"), 0);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

/*
 * An urgent index pass (the table full: its refusal asks for one and
 * writes no record) waits for the segment being made ahead: both run on
 * the checkpoint thread, the pass right after the making (doc/journal.md,
 * "Index passes").  With --capacity 4 and the fsync of
 * .next-0000000000000002.tmp held, four tasks fill the table (the third
 * asks for the pass), a fifth is refused (table_full), no pass is
 * logged while the hold lasts, and once it ends the pass follows with
 * no request sent, no rotation and no checkpoint; the fifth is then
 * created.  Fails when the pass asked for meanwhile is lost (the table
 * stays full).  The pass is queued before the making ends, so this does
 * not show the journaling thread's wake at the end of the making
 * (checkpoint_make_next): it passes without it.
 */
static void
urgent_pass_after_the_segment_made_ahead(void **state)
{
	static const char *const args[] = { "--capacity", "4", NULL };
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	json_t			*reply, *error;
	char			 id[64];
	int			 i;

	harness_fault_rule(t->fault_file, "hold .next-0000000000000002.tmp");
	assert_int_equal(harness_start(b, args, t->env), 0);
	for (i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "urgent/%d", i);
		reply = harness_submit(b, id, "urgent");
		harness_assert_outcome(reply, "created", 1, 1, 0);
		json_decref(reply);
	}
	reply = harness_submit(b, "urgent/4", "urgent");
	harness_assert_bool(reply, "ok", 0);
	error = json_object_get(reply, "error");
	assert_non_null(error);
	assert_string_equal(json_string_value(json_object_get(error, "code")),
	    "table_full");
	json_decref(reply);
	/* Held: no pass yet. */
	assert_int_equal(harness_log_count(b, "index pass: "), 0);
	harness_fault_rule(t->fault_file, "");
	/* Done ("index pass: <n> new in the index"), not failed. */
	harness_wait_log(b, " new in the index\n", 1, TEST_EVENT_TIMEOUT_MS);
	assert_int_equal(harness_log_count(b, "checkpoint checkpoint-"), 0);
	assert_int_equal(harness_log_count(b, "none was made ahead"), 0);
	reply = harness_submit(b, "urgent/4", "urgent");
	harness_assert_outcome(reply, "created", 1, 1, 0);
	json_decref(reply);
	assert_int_equal(harness_stop(b), 0);
	harness_shim_finish(t);
}

int
main(void)
{
#define T(name)	cmocka_unit_test_setup_teardown(name, setup, \
	    harness_shim_teardown)
	const struct CMUnitTest tests[] = {
		T(live_segment_has_zeros_ahead),
		T(failing_zero_write_changes_nothing),
		T(verify_beside_a_busy_broker),
		T(torn_last_round_restarts_clean),
		T(rotation_waits_for_the_segment_made_ahead),
		T(urgent_pass_after_the_segment_made_ahead),
	};
#undef T
	return harness_exit_status(FILTER_RUN(tests));
}
