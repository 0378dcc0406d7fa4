/* SPDX-License-Identifier: ISC */
/*
 * journal_replay.c: replaying the journal at start-up (or for a reader
 * such as idemctl verify): every segment in order, each record handed to
 * the caller, a torn tail cut off, damage reported and nothing changed.
 *
 * DESIGN
 *
 * Replay maps each segment and decodes record by record.  At the first
 * record that does not decode it looks further on for any record that
 * does: if one exists, bytes that were once durable are damaged and
 * replay stops with a cause naming the file and offset, changing nothing
 * (the operator decides, not us); if none exists and this is the last
 * segment, it is the remains of an append that never completed, so was
 * never acknowledged (acknowledgement waits for the fsync), and it is
 * cut off with a warning.  Records before the bad one have already been
 * applied when replay fails: the caller throws away what it built.
 *
 * The zero tail: the writer keeps zeros ahead of its logical end
 * (journal.c), so the last segment may end in zeros after its last
 * record.  In a format 2 segment they are its clean end: no torn tail,
 * nothing cut, left for the writer to write over (stats->zero_bytes says
 * how many).  A format 1 segment never had zeros ahead: zeros ending it
 * are a torn append's, cut with a warning exactly as before format 2.  A bad
 * record followed by zeros only is a torn tail as before (cut, zeros
 * and all); zeros followed by a valid record are corruption as before
 * (journal_record_follows finds it); a sealed segment ending in zeros
 * is corruption, since rotation cuts them before the next segment.
 *
 * Format 2 (doc/journal.md, "Rounds over the zero tail"): each record
 * names where the round that wrote it began.  A bad record at X in the
 * last segment whose following valid records all name a round begun at
 * or before X is a torn round (that round never completed its fsync,
 * else X would be whole): cut like a torn tail.  One record of a later
 * round, or one naming none, keeps it corruption.  Where a record
 * would put its prefix and inner header across a 512-byte boundary the
 * writer pads with zeros to it ("Sector padding"): replay skips zero
 * padding there and takes non-zero padding for a bad record.
 *
 * JOURNAL_REPLAY_READONLY is for readers other than the broker (idemctl
 * verify and journal dump), which may run beside a live broker: there an
 * append in flight looks exactly like a torn tail, so the tail is only
 * reported in the stats, never cut, and a stub segment is never removed.
 * Such a reader reads the last segment with pread into a buffer, not
 * mmap: the broker cuts that segment's zero tail at rotation and at a
 * clean stop, and a mapping made at the old size would raise SIGBUS on
 * the pages past the new end.  A pread that meets the new end returns
 * fewer bytes, which is only a shorter segment.
 *
 * Every function here works on what it is given: no global mutable state.
 * Callers must have called sodium_init() (idemd's main does); the
 * entry points that do I/O call it again, which is cheap and harmless.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf, memmem */
#endif

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "journal_int.h"

/* ---- replay ------------------------------------------------------------- */

struct replay {
	const char			*dir;
	int				 dir_fd;
	int				 flags;
	journal_apply_fn		 apply;
	journal_hint_fn			 hint;	/* NULL: none */
	void				*arg;
	struct journal_replay_stats	*stats;
	char				**cause;
	uint64_t			 from;	/* a checkpoint's segment, or 0 */
	uint32_t			 format;	/* this segment's version */
	int				 live_fd;	/* read-only, last: or -1 */
	uint8_t				*live_buf;	/* its bytes, malloc'd */
};

/*
 * Cut the last segment at offset: an append that was never acknowledged.
 * The fsync makes the cut durable before anything is appended after it.
 */
static int
replay_cut(struct replay *rp, const char *name, uint64_t offset,
    uint64_t size, const char *why)
{
	int	fd, saved_errno;

	rp->stats->torn_offset = offset;
	rp->stats->torn_why = why;
	if (rp->flags & JOURNAL_REPLAY_READONLY) {
		/* The caller reports it: a running broker may be appending. */
		rp->stats->truncated_bytes += size - offset;
		return 0;
	}
	fd = openat(rp->dir_fd, name, O_WRONLY|O_CLOEXEC|O_NOFOLLOW);
	if (fd == -1 || ftruncate(fd, (off_t)offset) == -1 || fsync(fd) == -1) {
		saved_errno = errno;
		if (fd != -1)
			close(fd);
		errno = saved_errno;
		journal_cause(rp->cause, "journal %s/%s: cutting the torn "
		    "tail at offset %" PRIu64 ": %s", rp->dir, name, offset,
		    strerror(errno));
		return -1;
	}
	close(fd);
	rp->stats->truncated_bytes += size - offset;
	return 0;
}

/*
 * The last segment is shorter than a header: its creation was cut short
 * before the header was synced, so it never held a record.  Remove it:
 * the segment before it (sealed) is the last again, or, if there is
 * none, journal_open creates segment 1 afresh.
 */
static int
replay_remove_stub(struct replay *rp, const char *name, uint64_t size)
{
	rp->stats->torn_offset = 0;
	rp->stats->torn_why = "segment shorter than its header";
	rp->stats->torn_stub = 1;
	if (rp->flags & JOURNAL_REPLAY_READONLY) {
		rp->stats->truncated_bytes += size;
		return 0;
	}
	if (unlinkat(rp->dir_fd, name, 0) == -1 || fsync(rp->dir_fd) == -1) {
		journal_cause(rp->cause, "journal %s/%s: removing the "
		    "incomplete segment: %s", rp->dir, name, strerror(errno));
		return -1;
	}
	rp->stats->truncated_bytes += size;
	return 0;
}

static int
replay_corrupt(struct replay *rp, const char *name, uint64_t offset,
    const char *why, const char *after)
{
	rp->stats->has_corrupt_offset = 1;
	rp->stats->corrupt_offset = offset;
	errno = EINVAL;
	journal_cause(rp->cause, "journal corrupt at %s/%s offset %" PRIu64
	    ": %s (%s; run `idemctl verify` and see doc/journal.md before "
	    "starting again; do not delete or edit the journal)", rp->dir,
	    name, offset, why, after);
	return -1;
}

static int
replay_all_zero(const uint8_t *p, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

/*
 * Format 2's sector padding at offset (doc/journal.md, "Sector padding"):
 * the zeros a writer puts before a record so that its round prefix and
 * inner header never cross a 512-byte boundary.  OK with *pad its length
 * (0 where none is due, and always in a format 1 segment), NOT_ZERO when
 * a byte of it is not zero (a bad record here), ENDS when the file ends
 * inside it or at offset (zeros up to the end: a zero tail).  One rule
 * for both readers, so that they cannot disagree on where records are.
 */
enum replay_pad {
	REPLAY_PAD_OK,
	REPLAY_PAD_NOT_ZERO,
	REPLAY_PAD_ENDS
};

static enum replay_pad
replay_padding(const uint8_t *map, size_t size, size_t offset, int rounds,
    size_t *pad)
{
	size_t	due = rounds ? journal_round_pad(offset) : 0;
	size_t	room = size - offset;

	if (!replay_all_zero(map + offset, due < room ? due : room))
		return REPLAY_PAD_NOT_ZERO;
	if (due >= room)
		return REPLAY_PAD_ENDS;
	*pad = due;
	return REPLAY_PAD_OK;
}

int
journal_segment_end(const uint8_t *map, size_t size, size_t *end)
{
	struct journal_record	 r;
	const char		*why;
	size_t			 offset = SEGMENT_HEADER_BYTES, used, pad;
	int			 rounds;

	if (size < SEGMENT_HEADER_BYTES)
		return -1;
	rounds = journal_segment_version(map) == JOURNAL_FORMAT_ROUNDS;
	for (;;) {
		if (replay_padding(map, size, offset, rounds, &pad) !=
		    REPLAY_PAD_OK)
			break;	/* the check below tells zeros from damage */
		if (journal_record_decode(map + offset + pad,
		    size - offset - pad, &r, &used, &why) != JOURNAL_DECODE_OK)
			break;
		offset += pad + used;
	}
	if (!replay_all_zero(map + offset, size - offset))
		return -1;
	*end = offset;
	return 0;
}

/*
 * Read-only, the last segment: its bytes as they are now, by pread into a
 * fresh buffer (rp->live_buf, the old one freed).  The size is what the
 * reads returned, so a cut made meanwhile only shortens it; what a read
 * may see half written is looked at again by replay_records.
 */
static int
replay_live_load(struct replay *rp, const char *name, size_t *size)
{
	struct stat	 st;
	uint8_t		*buf;
	size_t		 want, got = 0;
	ssize_t		 n;

	if (fstat(rp->live_fd, &st) == -1)
		goto fail;
	if ((uint64_t)st.st_size > SIZE_MAX) {
		errno = EFBIG;
		goto fail;
	}
	want = (size_t)st.st_size;
	if ((buf = malloc(want > 0 ? want : 1)) == NULL)
		goto fail;
	while (got < want) {
		n = pread(rp->live_fd, buf + got, want - got, (off_t)got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			free(buf);
			goto fail;
		}
		if (n == 0)
			break;		/* cut meanwhile: a shorter segment */
		got += (size_t)n;
	}
	free(rp->live_buf);
	rp->live_buf = buf;
	*size = got;
	return 0;

fail:
	journal_cause(rp->cause, "journal %s/%s: reading: %s", rp->dir, name,
	    strerror(errno));
	return -1;
}

/* Read-only: looks again at what may be a live round, and how often. */
#define REPLAY_LIVE_TRIES	20
#define REPLAY_LIVE_PAUSE_NS	1000000L

/*
 * Records decoded ahead of the one applied, when the caller gives a
 * hint: the hint can start loading what apply will touch (a table
 * bucket, in idemd) while the records before it are applied.
 */
#define REPLAY_AHEAD	8

/* Replay the records of one mapped segment; see the DESIGN comment. */
static int
replay_records(struct replay *rp, const char *name, const uint8_t *map,
    size_t *sizep, int last, size_t *end, size_t *cut_at,
    const char **cut_why)
{
	size_t			 size = *sizep;
	struct journal_record	 ring[REPLAY_AHEAD];
	size_t			 at[REPLAY_AHEAD], length[REPLAY_AHEAD];
	size_t			 lead[REPLAY_AHEAD];	/* its padding */
	const char		*why = NULL;
	char			 after[192];
	size_t			 offset, decoded, next, bad, head = 0, count = 0;
	size_t			 pad = 0;
	enum replay_pad		 padding;
	size_t			 ahead = rp->hint != NULL ? REPLAY_AHEAD : 1;
	size_t			 i;
	int			 applied, more = 1, tries = 0;
	struct timespec		 pause = { 0, REPLAY_LIVE_PAUSE_NS };

	*cut_at = size;
	offset = decoded = SEGMENT_HEADER_BYTES;
again:
	for (;;) {
		/* Decode up to ahead records past the next to apply. */
		while (more && count < ahead && decoded < size) {
			/*
			 * Format 2's sector padding (doc/journal.md): zeros,
			 * then the record at the boundary.  Non-zero bytes
			 * there are a bad record at decoded; zeros to the end
			 * of the file are its zero tail.
			 */
			padding = replay_padding(map, size, decoded,
			    rp->format == JOURNAL_FORMAT_ROUNDS, &pad);
			if (padding != REPLAY_PAD_OK) {
				why = padding == REPLAY_PAD_NOT_ZERO ?
				    "sector padding is not zero" :
				    "the file ends in sector padding";
				more = 0;
				break;
			}
			decoded += pad;
			i = (head + count) % ahead;
			if (journal_record_decode(map + decoded, size - decoded,
			    &ring[i], &length[i], &why) != JOURNAL_DECODE_OK) {
				more = 0;
				break;
			}
			/* Each format version has its one record form. */
			if (ring[i].form != rp->format) {
				why = rp->format == JOURNAL_FORMAT_ROUNDS ?
				    "a record without a round prefix in a "
				    "format 2 segment" : "a record with a round "
				    "prefix in a format 1 segment";
				more = 0;
				break;
			}
			at[i] = decoded;
			lead[i] = pad;
			if (rp->hint != NULL)
				rp->hint(&ring[i], rp->arg);
			decoded += length[i];
			count++;
		}
		if (count == 0)
			break;
		rp->stats->at_offset = at[head];
		if ((applied = rp->apply(&ring[head], rp->arg)) != 0) {
			errno = ECANCELED;
			journal_cause(rp->cause, "journal replay stopped at "
			    "%s/%s offset %zu: applying the record failed "
			    "(%d)", rp->dir, name, at[head], applied);
			return -1;
		}
		rp->stats->records++;
		/* The padding counts: bytes is the segment's, header aside. */
		rp->stats->bytes += lead[head] + length[head];
		offset = at[head] + length[head];
		head = (head + 1) % ahead;
		count--;
	}
	*end = offset;
	if (offset == size)
		return 0;
	/*
	 * The last segment's zero tail: its clean end (the DESIGN above).
	 * Only in format 2: a format 1 segment never had zeros written
	 * ahead (an older idemd wrote it, and this one appends to it as
	 * before), so zeros there are a torn append's, cut as they were.
	 */
	if (last && rp->format == JOURNAL_FORMAT_ROUNDS &&
	    replay_all_zero(map + offset, size - offset)) {
		rp->stats->zero_bytes = size - offset;
		return 0;
	}

	/* A record at offset does not decode: torn tail or corruption? */
	if (journal_record_follows(map, size, offset + 1, &next)) {
		/*
		 * Read-only, beside a live broker: its round may be going
		 * over the zero tail while we read it, and a read that the
		 * write overtook shows zeros, then whole records.  Look again
		 * a few times (the mapping shows the file's pages as they are
		 * now): a round in flight completes, damage stays.
		 */
		if (rp->live_fd != -1 && tries++ < REPLAY_LIVE_TRIES) {
			nanosleep(&pause, NULL);
			/* Nothing decoded is held: the ring is empty. */
			if (replay_live_load(rp, name, sizep) == -1)
				return -1;
			map = rp->live_buf;
			/* Cut back below what we read (a failed round's). */
			if (*sizep < offset)
				*sizep = offset;
			size = *sizep;
			*cut_at = size;
			decoded = offset;
			more = 1;
			goto again;
		}
		/*
		 * Format 2: a torn round if every record after offset is of
		 * a round that began at or before it (doc/journal.md,
		 * "Rounds over the zero tail").
		 */
		if (last && rp->format == JOURNAL_FORMAT_ROUNDS) {
			switch (journal_round_after(map, size, offset, &next,
			    &bad)) {
			case 1:
				*cut_at = offset;
				*cut_why = why;
				return 0;
			case -1:
				snprintf(after, sizeof after, "valid records "
				    "follow, the first at offset %zu; the one "
				    "at %zu is of a later round or names none",
				    next, bad);
				return replay_corrupt(rp, name, offset, why,
				    after);
			default:
				break;
			}
		}
		snprintf(after, sizeof after, "valid records follow, the "
		    "first at offset %zu", next);
		return replay_corrupt(rp, name, offset, why, after);
	}
	if (!last) {
		return replay_corrupt(rp, name, offset, why, "later segments "
		    "follow, so this one was sealed complete");
	}
	*cut_at = offset;
	*cut_why = why;
	return 0;
}

/* The live buffer and its descriptor, if any, are done with. */
static void
replay_live_end(struct replay *rp)
{
	if (rp->live_fd != -1)
		close(rp->live_fd);
	rp->live_fd = -1;
	free(rp->live_buf);
	rp->live_buf = NULL;
}

/* A segment's bytes are done with, mapped or read. */
static void
replay_unmap(struct replay *rp, void *map, size_t size)
{
	if (rp->live_fd != -1)
		replay_live_end(rp);
	else
		munmap(map, size);
}

static int
replay_segment(struct replay *rp, uint64_t number, int last)
{
	char		 name[SEGMENT_NAME_BYTES];
	struct stat	 st;
	void		*map;
	const char	*why = NULL;
	size_t		 size, cut_at = 0, end = 0;
	int		 fd, rv, saved_errno;

	journal_segment_name(number, name);
	rp->stats->at_segment = number;
	/* A stub removed leaves no end known: the writer reads its own. */
	rp->stats->end_segment = 0;
	rp->stats->end_offset = 0;
	fd = openat(rp->dir_fd, name, O_RDONLY|O_CLOEXEC|O_NOFOLLOW);
	if (fd == -1 || fstat(fd, &st) == -1) {
		journal_cause(rp->cause, "journal %s/%s: %s", rp->dir, name,
		    strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		journal_cause(rp->cause, "journal %s/%s: not a regular file",
		    rp->dir, name);
		goto fail;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		errno = EFBIG;
		journal_cause(rp->cause, "journal %s/%s: too large to map",
		    rp->dir, name);
		goto fail;
	}
	size = (size_t)st.st_size;

	if (size < SEGMENT_HEADER_BYTES) {
		close(fd);
		/* A checkpoint continues here: its header was made durable. */
		if (number == rp->from)
			return replay_corrupt(rp, name, 0, "segment shorter than "
			    "its header", "a checkpoint continues in it, so its "
			    "header was durable");
		if (last) {
			rp->stats->torn_segment = number;
			return replay_remove_stub(rp, name, size);
		}
		return replay_corrupt(rp, name, 0, "segment shorter than its "
		    "header", "later segments follow, so it was sealed "
		    "complete");
	}

	if ((rp->flags & JOURNAL_REPLAY_READONLY) && last) {
		/* A live broker may cut it: read it (the DESIGN above). */
		rp->live_fd = fd;
		if (replay_live_load(rp, name, &size) == -1) {
			saved_errno = errno;
			replay_live_end(rp);	/* closes fd */
			errno = saved_errno;
			return -1;
		}
		map = rp->live_buf;
		if (size < SEGMENT_HEADER_BYTES) {
			/* Cut meanwhile: only a stub is that short. */
			replay_live_end(rp);
			rp->stats->torn_segment = number;
			return replay_remove_stub(rp, name, size);
		}
	} else {
		/* One mapping per segment: no system call per record. */
		map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			journal_cause(rp->cause, "journal %s/%s: mmap: %s",
			    rp->dir, name, strerror(errno));
			goto fail;
		}
		close(fd);
		fd = -1;
		madvise(map, size, MADV_SEQUENTIAL);
	}

	if ((why = journal_segment_header_invalid(map, number)) != NULL &&
	    last && size == SEGMENT_HEADER_BYTES && number != rp->from) {
		/*
		 * Nothing but a header that never reached the disk whole (a
		 * file system may keep the size and lose the data): no
		 * record can follow an unsynced header, so this is a
		 * creation cut short, like a shorter stub.
		 */
		replay_unmap(rp, map, size);
		rp->stats->torn_segment = number;
		return replay_remove_stub(rp, name, size);
	} else if (why != NULL) {
		rv = replay_corrupt(rp, name, 0, why, "a segment header is "
		    "synced before any record is written after it");
	} else {
		rp->stats->segments++;
		rp->format = journal_segment_version(map);
		rv = replay_records(rp, name, map, &size, last, &end, &cut_at,
		    &why);
	}
	saved_errno = errno;
	replay_unmap(rp, map, size);
	errno = saved_errno;
	if (rv == -1)
		return -1;
	if (last) {
		rp->stats->end_segment = number;
		rp->stats->end_offset = cut_at < size ? cut_at : end;
	}
	if (cut_at < size) {
		rp->stats->torn_segment = number;
		return replay_cut(rp, name, cut_at, size, why);
	}
	return 0;

fail:
	saved_errno = errno;
	if (fd != -1)
		close(fd);
	errno = saved_errno;
	return -1;
}

int
journal_replay(const char *dir, int flags, journal_apply_fn apply,
    void *arg, struct journal_replay_stats *stats, char **cause)
{
	return journal_replay_from(dir, 0, flags, apply, arg, stats, cause);
}

int
journal_replay_from(const char *dir, uint64_t from, int flags,
    journal_apply_fn apply, void *arg, struct journal_replay_stats *stats,
    char **cause)
{
	return journal_replay_hinted(dir, from, flags, apply, NULL, arg,
	    stats, cause);
}

int
journal_replay_hinted(const char *dir, uint64_t from, int flags,
    journal_apply_fn apply, journal_hint_fn hint, void *arg,
    struct journal_replay_stats *stats, char **cause)
{
	size_t				 first;
	struct journal_replay_stats	 scratch;
	struct replay			 rp;
	uint64_t			*list = NULL;
	size_t				 count, i;
	int				 dir_fd, rv = -1, saved_errno;

	if (stats == NULL)
		stats = &scratch;
	memset(stats, 0, sizeof *stats);
	*cause = NULL;
	if (sodium_init() < 0) {
		errno = EIO;
		journal_cause(cause, "journal %s: libsodium failed to "
		    "initialise", dir);
		return -1;
	}

	if ((dir_fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW)) ==
	    -1) {
		if (errno == ENOENT)
			return 0;	/* never written: an empty journal */
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	if (journal_segment_list(dir_fd, dir, &list, &count, cause) == -1)
		goto out;

	/*
	 * Segments before a checkpoint's are what an interrupted prune left:
	 * the checkpoint holds their records.  The checkpoint's own segment
	 * was made durable before the checkpoint was written, so it must be
	 * there.
	 */
	for (first = 0; first < count && list[first] < from; first++)
		;
	if (from > 0 && (first == count || list[first] != from)) {
		errno = EINVAL;
		journal_cause(cause, "journal corrupt in %s: segment %016"
		    PRIx64 SEGMENT_SUFFIX ", where the checkpoint continues, "
		    "is missing (see doc/journal.md)", dir, from);
		goto out;
	}
	if (first > 0) {
		memmove(list, list + first, (count - first) * sizeof *list);
		count -= first;
	}

	/* Segments go away oldest first, so a gap means records were lost. */
	for (i = 1; i < count; i++) {
		if (list[i] != list[i - 1] + 1) {
			errno = EINVAL;
			journal_cause(cause, "journal corrupt in %s: segment "
			    "%016" PRIx64 SEGMENT_SUFFIX " is missing between "
			    "%016" PRIx64 " and %016" PRIx64 " (run `idemctl "
			    "verify` and see doc/journal.md)", dir,
			    list[i - 1] + 1, list[i - 1], list[i]);
			goto out;
		}
	}

	rp.dir = dir;
	rp.dir_fd = dir_fd;
	rp.flags = flags;
	rp.apply = apply;
	rp.hint = hint;
	rp.arg = arg;
	rp.stats = stats;
	rp.cause = cause;
	rp.from = from;
	rp.live_fd = -1;
	rp.live_buf = NULL;
	for (i = 0; i < count; i++) {
		if (replay_segment(&rp, list[i], i == count - 1) == -1)
			goto out;
	}
	rv = 0;

out:
	saved_errno = errno;
	free(list);
	close(dir_fd);
	errno = saved_errno;
	return rv;
}
