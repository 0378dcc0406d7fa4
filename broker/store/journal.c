/* SPDX-License-Identifier: ISC */
/*
 * journal.c: the on-disk journal of idemd: its segment files (listing,
 * creating), appending and syncing the current segment, rotating to the
 * next, cutting one back.  The record and segment formats
 * (doc/journal.md) are journal_format.c's, replay at start-up (with
 * cutting off a torn tail) journal_replay.c's.  It never interprets a
 * record beyond checking that its fields are in range: what a record
 * means is subtab.c's business.
 *
 * DESIGN
 *
 * The journal is a directory of segment files "%016llx.jnl", numbered
 * from 1; each starts with a checksummed file header and holds records
 * back to back.  A record is a checksummed snapshot of one subtab_entry
 * and its key, encoded field by field in little-endian, so the format
 * does not depend on the compiler's struct layout or the host's byte
 * order.
 *
 * Only the last segment is ever appended to.  A segment is sealed (fully
 * written and fsync'd) before the next one is created, so only the last
 * segment can end in a torn append; journal_rotate() keeps that promise:
 * the caller synced the old segment, rotate cuts its zero tail (and
 * fsyncs the cut), then gives the next number its file, then switches.
 * That file is made ahead by another thread (journal_make_next: header
 * and zeros fsync'd under ".next-N.tmp", a name no reader takes for a
 * segment) and only renamed into place (RENAME_NOREPLACE, fsync the
 * directory), or, without one, created (create_segment: O_EXCL, header,
 * fsync file, fsync directory).  Zeros stop at segment_bytes, so a full
 * segment has no tail to cut (doc/journal.md, "The next segment made
 * ahead").
 *
 * The zero tail: an fdatasync after an append that grows the file costs
 * about twice one after a write over blocks already allocated and
 * synced (the size and the block map are metadata to commit).  So the
 * writer keeps zeros ahead of its logical end (journal_prezero, between
 * rounds), the fd is opened without O_APPEND (on Linux pwrite on an
 * O_APPEND fd appends) and records go with pwritev at the logical end.
 * Zeros are never records: replay takes an all-zero tail of the last
 * segment for its clean end (doc/journal.md, "The zero tail").
 *
 * Over zeros already durable, a power loss may keep any subset of a
 * round's sectors, so in a format 2 segment (every new one) each record
 * goes out after a round prefix naming the logical end the round began
 * at (append_rounds): replay then tells a torn round from damage.  A
 * format 1 segment, left by an older idemd, gets no zeros ahead.
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
#include <sys/statvfs.h>
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

/*
 * writev at most this many pieces per call (under IOV_MAX, 1024).  Format
 * 2 gives a round up to three pieces a record (zero padding, its prefix,
 * its bytes); append_raw writes a round of more pieces in several calls.
 */
#define APPEND_IOV_BATCH	512

/* Zeros ahead: chunks of at most this, at least the smaller. */
#define ZERO_CHUNK_MAX		(1024 * 1024)
#define ZERO_CHUNK_MIN		512
/*
 * Zeros only where the file system keeps this much free after them: on
 * a disk nearly full they would take the last space a TASK file needs.
 */
#define ZERO_MIN_FREE_BYTES	(64ULL * 1024 * 1024)

/* Never written: the source of every zero chunk (in .bss, not the file). */
static uint8_t	journal_zeros[ZERO_CHUNK_MAX];

/*
 * Set *cause (malloc'd; NULL if even that fails) without disturbing
 * errno, so every error path can say why and still return the errno of
 * the call that failed.
 */
void
journal_cause(char **cause, const char *fmt, ...)
{
	va_list	ap;
	int	saved_errno = errno;

	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	errno = saved_errno;
}

/* ---- segment files ------------------------------------------------------ */

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The segment numbers in the directory, ascending.  Other files are
 * ignored.  *list is malloc'd (NULL when there are none).
 */
int
journal_segment_list(int dir_fd, const char *dir, uint64_t **list,
    size_t *count, char **cause)
{
	DIR		*d;
	struct dirent	*de;
	uint64_t	*v = NULL, *nv, number;
	size_t		 n = 0, cap = 0;
	int		 fd;

	*list = NULL;
	*count = 0;
	/* closedir closes the fd it was given: hand it a duplicate. */
	if ((fd = dup(dir_fd)) == -1) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	if ((d = fdopendir(fd)) == NULL) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	rewinddir(d);
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno == 0)
				break;
			goto fail;
		}
		if (!journal_segment_parse_name(de->d_name, &number))
			continue;
		if (n == cap) {
			cap = cap == 0 ? 16 : cap * 2;
			if ((nv = reallocarray(v, cap, sizeof *v)) == NULL)
				goto fail;
			v = nv;
		}
		v[n++] = number;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_u64);
	*list = v;
	*count = n;
	return 0;

fail:
	journal_cause(cause, "journal %s: listing segments: %s", dir,
	    strerror(errno));
	closedir(d);
	free(v);
	return -1;
}

/*
 * After a failed step on the new segment file name (what): close and
 * unlink it, set the cause; -1 with errno kept.
 */
static int
segment_file_fail(int dir_fd, const char *dir, const char *name, int fd,
    const char *what, char **cause)
{
	int	saved_errno = errno;

	close(fd);
	unlinkat(dir_fd, name, 0);
	errno = saved_errno;
	journal_cause(cause, "journal %s/%s: %s: %s", dir, name, what,
	    strerror(errno));
	return -1;
}

/*
 * Create name in dir_fd holding segment number's header, O_EXCL (never
 * reuse a name): the fd, open for writing (not O_APPEND: records go with
 * pwritev at the logical end), or -1 (cause set) with nothing left
 * behind.  Not yet durable: create_segment and journal_make_next sync it
 * as each needs.
 */
static int
segment_file_create(int dir_fd, const char *dir, const char *name,
    uint64_t number, char **cause)
{
	uint8_t	header[SEGMENT_HEADER_BYTES];
	int	fd;

	fd = openat(dir_fd, name,
	    O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC|O_NOFOLLOW, 0600);
	if (fd == -1) {
		journal_cause(cause, "journal %s/%s: create: %s", dir, name,
		    strerror(errno));
		return -1;
	}
	journal_segment_header_encode(number, header);
	if (durable_write_all(fd, header, sizeof header) == -1)
		return segment_file_fail(dir_fd, dir, name, fd, "write header",
		    cause);
	return fd;
}

/*
 * Create segment number, durably: O_EXCL, header, fsync the file, fsync
 * the directory.  On failure nothing is left behind (best effort: on a
 * failing disk the unlink may fail too, and replay then finds a short or
 * bad last segment).  Returns the fd.  journal_open uses it for segment
 * 1; journal_rotate for the next when none was made ahead.
 */
static int
create_segment(int dir_fd, const char *dir, uint64_t number, char **cause)
{
	char	name[SEGMENT_NAME_BYTES];
	int	fd;

	journal_segment_name(number, name);
	if ((fd = segment_file_create(dir_fd, dir, name, number, cause)) == -1)
		return -1;
	if (fsync(fd) == -1)
		return segment_file_fail(dir_fd, dir, name, fd, "fsync", cause);
	if (fsync(dir_fd) == -1)
		return segment_file_fail(dir_fd, dir, name, fd,
		    "fsync directory", cause);
	return fd;
}

/* ---- appending ---------------------------------------------------------- */

/* fsync the directory holding path, so a new entry in it is durable. */
static int
sync_parent(const char *path)
{
	char	*copy;
	int	 fd, rv, saved_errno;

	if ((copy = strdup(path)) == NULL)
		return -1;
	fd = open(dirname(copy), O_RDONLY|O_DIRECTORY|O_CLOEXEC);
	saved_errno = errno;
	free(copy);
	if (fd == -1) {
		errno = saved_errno;
		return -1;
	}
	rv = fsync(fd);
	saved_errno = errno;
	close(fd);
	errno = saved_errno;
	return rv;
}

/* Start j in dir with no directory yet: what both opens share. */
static int
journal_init(struct journal *j, const char *dir, char **cause)
{
	memset(j, 0, sizeof *j);
	j->fd = j->dir_fd = -1;
	if (sodium_init() < 0) {
		errno = EIO;
		journal_cause(cause, "journal %s: libsodium failed to "
		    "initialise", dir);
		return -1;
	}
	if ((j->dir = strdup(dir)) == NULL) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The logical end of the open segment fd (size bytes), read from it: for
 * a caller that has no replay's word for it.  What replay left must be
 * records then only zeros.
 */
static int
journal_read_end(struct journal *j, const char *name, uint64_t size,
    uint64_t *end, char **cause)
{
	void	*map;
	size_t	 at;
	int	 rv;

	if (size > SIZE_MAX) {
		errno = EFBIG;
		journal_cause(cause, "journal %s/%s: too large to map", j->dir,
		    name);
		return -1;
	}
	map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, j->fd, 0);
	if (map == MAP_FAILED) {
		journal_cause(cause, "journal %s/%s: mmap: %s", j->dir, name,
		    strerror(errno));
		return -1;
	}
	rv = journal_segment_end(map, (size_t)size, &at);
	munmap(map, (size_t)size);
	if (rv != 0) {
		errno = EINVAL;
		journal_cause(cause, "journal %s/%s: its records are not "
		    "followed by zeros only (replay it first)", j->dir, name);
		return -1;
	}
	*end = at;
	return 0;
}

/*
 * j->dir_fd is open: append to its last segment, or create the first.
 * end_segment, end: the last segment's logical end from a replay, or 0.
 */
static int
journal_open_dir(struct journal *j, uint64_t end_segment, uint64_t end,
    char **cause)
{
	const char	*dir = j->dir;
	uint64_t	*list = NULL;
	size_t		 count;
	uint8_t		 header[SEGMENT_HEADER_BYTES];
	char		 name[SEGMENT_NAME_BYTES];
	const char	*invalid;
	struct stat	 st;
	ssize_t		 n;
	int		 saved_errno;

	if (journal_segment_list(j->dir_fd, dir, &list, &count, cause) == -1)
		goto fail;
	if (count == 0) {
		j->segment = 1;
		if ((j->fd = create_segment(j->dir_fd, dir, 1, cause)) == -1)
			goto fail;
		j->size = j->zeroed = SEGMENT_HEADER_BYTES;
		j->format = journal_new_format();
		return 0;
	}

	/*
	 * Append to the highest segment.  Replay has already run and cut
	 * any torn tail, so its last good record is followed by zeros only
	 * (the zero tail) or nothing: its logical end is replay's, or read
	 * from it here, never st_size.
	 */
	j->segment = list[count - 1];
	free(list);
	list = NULL;
	journal_segment_name(j->segment, name);
	j->fd = openat(j->dir_fd, name, O_RDWR|O_CLOEXEC|O_NOFOLLOW);
	if (j->fd == -1 || fstat(j->fd, &st) == -1) {
		journal_cause(cause, "journal %s/%s: %s", dir, name,
		    strerror(errno));
		goto fail;
	}
	if ((n = pread(j->fd, header, sizeof header, 0)) == -1) {
		journal_cause(cause, "journal %s/%s: read header: %s", dir,
		    name, strerror(errno));
		goto fail;
	}
	if ((size_t)n < sizeof header)
		invalid = "shorter than a segment header (replay removes it)";
	else
		invalid = journal_segment_header_invalid(header, j->segment);
	if (invalid != NULL) {
		errno = EINVAL;
		journal_cause(cause, "journal %s/%s: %s", dir, name, invalid);
		goto fail;
	}
	/* Records go in the form of the segment's version, whatever new
	 * segments get. */
	j->format = journal_segment_version(header);
	/*
	 * What replay accepted is what start-up built on: make it durable,
	 * in case a previous broker died between its write and its fsync.
	 */
	if (fdatasync(j->fd) == -1) {
		journal_cause(cause, "journal %s/%s: fdatasync: %s", dir, name,
		    strerror(errno));
		goto fail;
	}
	/*
	 * The directory too.  A rotation that failed after its rename (a
	 * previous broker's, or this one's before a reopen) removed the next
	 * segment's name again with no fsync of its own: until the removal
	 * is durable, a crash may bring that segment back and seal this
	 * one, and a sealed segment ends in records only.  So no zeros
	 * ahead (zeros_stopped) until a directory fsync has succeeded, here
	 * or at the next rotation; its failure is no reason to refuse the
	 * journal.
	 */
	j->zeros_stopped = fsync(j->dir_fd) == -1;
	j->zeroed = (uint64_t)st.st_size;
	if (end_segment == j->segment && end >= SEGMENT_HEADER_BYTES &&
	    end <= j->zeroed)
		j->size = end;
	else if (journal_read_end(j, name, j->zeroed, &j->size, cause) != 0)
		goto fail;
	return 0;

fail:
	saved_errno = errno;
	free(list);
	journal_close(j);
	errno = saved_errno;
	return -1;
}

int
journal_open(struct journal *j, const char *dir, char **cause)
{
	return journal_open_end(j, dir, 0, 0, cause);
}

int
journal_open_end(struct journal *j, const char *dir, uint64_t end_segment,
    uint64_t end, char **cause)
{
	int	saved_errno;

	if (journal_init(j, dir, cause) != 0)
		return -1;
	/* Only the last component: the state directory is the caller's. */
	if (mkdir(dir, 0700) == 0) {
		/* A new directory's own entry must be durable too. */
		if (sync_parent(dir) == -1) {
			journal_cause(cause, "journal %s: fsync parent "
			    "directory: %s", dir, strerror(errno));
			goto fail;
		}
	} else if (errno != EEXIST) {
		journal_cause(cause, "journal %s: mkdir: %s", dir,
		    strerror(errno));
		goto fail;
	}
	if ((j->dir_fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW)) ==
	    -1) {
		journal_cause(cause, "journal %s: %s", dir, strerror(errno));
		goto fail;
	}
	return journal_open_dir(j, end_segment, end, cause);
fail:
	saved_errno = errno;
	journal_close(j);
	errno = saved_errno;
	return -1;
}

int
journal_open_at(struct journal *j, int dir_fd, const char *dir,
    char **cause)
{
	int	saved_errno;

	if (journal_init(j, dir, cause) != 0)
		return -1;
	if ((j->dir_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0)) == -1) {
		saved_errno = errno;
		journal_cause(cause, "journal %s: %s", dir,
		    strerror(saved_errno));
		journal_close(j);
		errno = saved_errno;
		return -1;
	}
	return journal_open_dir(j, 0, 0, cause);
}


/*
 * After a failure that leaves the end of the file unknown (a truncate
 * that failed) or its durability unknown (a failed fsync), the handle
 * refuses everything until the journal is reopened: the next append must
 * not land after bytes of unknown state, and a later fsync that succeeds
 * would say nothing about the writes the failed one lost.
 */
static void
journal_poison(struct journal *j)
{
	if (j->fd != -1)
		close(j->fd);
	j->fd = -1;
}

static int
journal_unusable(struct journal *j, char **cause)
{
	errno = EIO;
	journal_cause(cause, "journal %s: unusable after an earlier write or "
	    "fsync failure; reopen it from the journal", j->dir);
	return -1;
}

static int
append_raw(struct journal *j, const struct iovec *iov, int iovcnt,
    char **cause)
{
	struct iovec	 batch[APPEND_IOV_BATCH];
	const uint8_t	*base;
	size_t		 total = 0, done = 0, offset, skip;
	ssize_t		 w;
	int		 i, k, n, saved_errno;

	if (j->fd == -1)
		return journal_unusable(j, cause);
	for (i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SIZE_MAX - total) {
			errno = EINVAL;
			journal_cause(cause, "journal %s: append too large",
			    j->dir);
			return -1;
		}
		total += iov[i].iov_len;
	}

	/* Piece i is written up to offset; a short write resumes there. */
	i = 0;
	offset = 0;
	while (done < total) {
		while (offset == iov[i].iov_len) {
			i++;
			offset = 0;
		}
		for (k = i, n = 0; k < iovcnt && n < APPEND_IOV_BATCH; k++) {
			base = iov[k].iov_base;
			skip = k == i ? offset : 0;
			if (iov[k].iov_len == skip)
				continue;
			batch[n].iov_base = (void *)(base + skip);
			batch[n].iov_len = iov[k].iov_len - skip;
			n++;
		}
		w = pwritev(j->fd, batch, n, (off_t)(j->size + done));
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			goto fail;
		}
		done += (size_t)w;
		while (w > 0) {
			if ((size_t)w < iov[i].iov_len - offset) {
				offset += (size_t)w;
				w = 0;
			} else {
				w -= (ssize_t)(iov[i].iov_len - offset);
				i++;
				offset = 0;
			}
		}
	}
	j->size += total;
	if (j->zeroed < j->size)
		j->zeroed = j->size;
	return 0;

fail:
	/* Garbage or zeros past size: cut both, the zeros come again. */
	saved_errno = errno;
	j->zeroed = j->size;
	if (ftruncate(j->fd, (off_t)j->size) == -1) {
		journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
		    ": write: %s; truncating back to %" PRIu64 " bytes also "
		    "failed: %s", j->dir, j->segment, strerror(saved_errno),
		    j->size, strerror(errno));
		journal_poison(j);
	} else {
		journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
		    ": write at offset %" PRIu64 ": %s", j->dir, j->segment,
		    j->size, strerror(saved_errno));
	}
	errno = saved_errno;
	return -1;
}

/* Copy n bytes of the stream iov from piece *i, offset *off on. */
static void
stream_read(const struct iovec *iov, int *i, size_t *off, uint8_t *out,
    size_t n)
{
	size_t	take;

	while (n > 0) {
		while (*off == iov[*i].iov_len) {
			(*i)++;
			*off = 0;
		}
		take = iov[*i].iov_len - *off;
		if (take > n)
			take = n;
		memcpy(out, (const uint8_t *)iov[*i].iov_base + *off, take);
		out += take;
		*off += take;
		n -= take;
	}
}

/*
 * Format 2 (doc/journal.md, "Rounds over the zero tail"): each record of
 * the round, whole in iov (a ring's two pieces may split one), goes out
 * after a round prefix naming j->size, the synced end the round starts
 * from (before any padding).  Where the prefix and the inner header would
 * cross a sector boundary, zeros up to it go first (journal_round_pad,
 * "Sector padding"): a sector kept whole then holds a record's whole
 * prefix whenever it holds its inner header.  The records are not copied:
 * the pieces point into iov, the padding into journal_zeros.
 */
static int
append_rounds(struct journal *j, const struct iovec *iov, int iovcnt,
    char **cause)
{
	uint8_t		 head[16];
	size_t		 total = 0, at = 0, off = 0, length, left, take;
	size_t		 records = 0, pieces = 0, r, so, pad;
	uint64_t	 pos;
	int		 i = 0, k, si;
	void		*p;

	for (k = 0; k < iovcnt; k++)
		total += iov[k].iov_len;
	/* Count the records (their lengths checked against the bytes). */
	while (at < total) {
		if (total - at < sizeof head)
			goto malformed;
		stream_read(iov, &i, &off, head, sizeof head);
		length = sizeof head + ((size_t)head[4] | (size_t)head[5] << 8 |
		    (size_t)head[6] << 16 | (size_t)head[7] << 24);
		if (length > total - at)
			goto malformed;
		/* Skip the payload. */
		for (left = length - sizeof head; left > 0; left -= take) {
			while (off == iov[i].iov_len) {
				i++;
				off = 0;
			}
			take = iov[i].iov_len - off;
			if (take > left)
				take = left;
			off += take;
		}
		at += length;
		records++;
	}
	if (records > j->prefixes_cap) {
		if ((p = reallocarray(j->prefixes, records,
		    JOURNAL_ROUND_PREFIX_BYTES)) == NULL)
			goto nomem;
		j->prefixes = p;
		j->prefixes_cap = records;
	}
	if (records * 3 + (size_t)iovcnt > j->wide_cap) {
		if ((p = reallocarray(j->wide, records * 3 + (size_t)iovcnt,
		    sizeof *j->wide)) == NULL)
			goto nomem;
		j->wide = p;
		j->wide_cap = records * 3 + (size_t)iovcnt;
	}
	/*
	 * Each record: zeros if the rule asks for them, its prefix, then its
	 * bytes in one piece, or two where the ring's end splits it
	 * (records * 3 + iovcnt at most).  append_raw adds every piece,
	 * padding too, to j->size.
	 */
	i = 0;
	off = 0;
	pos = j->size;
	for (r = 0; r < records; r++) {
		if ((pad = journal_round_pad(pos)) != 0) {
			j->wide[pieces].iov_base = journal_zeros;
			j->wide[pieces++].iov_len = pad;
			pos += pad;
		}
		si = i;
		so = off;
		stream_read(iov, &si, &so, head, sizeof head);
		journal_round_prefix(j->prefixes + r * JOURNAL_ROUND_PREFIX_BYTES,
		    j->size, head);
		j->wide[pieces].iov_base = j->prefixes +
		    r * JOURNAL_ROUND_PREFIX_BYTES;
		j->wide[pieces++].iov_len = JOURNAL_ROUND_PREFIX_BYTES;
		length = sizeof head + ((size_t)head[4] | (size_t)head[5] << 8 |
		    (size_t)head[6] << 16 | (size_t)head[7] << 24);
		pos += JOURNAL_ROUND_PREFIX_BYTES + length;
		for (left = length; left > 0; left -= take) {
			while (off == iov[i].iov_len) {
				i++;
				off = 0;
			}
			take = iov[i].iov_len - off;
			if (take > left)
				take = left;
			j->wide[pieces].iov_base = (uint8_t *)iov[i].iov_base +
			    off;
			j->wide[pieces++].iov_len = take;
			off += take;
		}
	}
	return append_raw(j, j->wide, (int)pieces, cause);

malformed:
	errno = EINVAL;
	journal_cause(cause, "journal %s: append: not whole records", j->dir);
	return -1;
nomem:
	journal_cause(cause, "journal %s: append: %s", j->dir,
	    strerror(errno));
	return -1;
}

int
journal_append(struct journal *j, const struct iovec *iov, int iovcnt,
    char **cause)
{
	j->round_start = j->size;
	if (j->fd != -1 && j->format == JOURNAL_FORMAT_ROUNDS)
		return append_rounds(j, iov, iovcnt, cause);
	return append_raw(j, iov, iovcnt, cause);
}

int
journal_sync(struct journal *j, char **cause)
{
	if (j->fd == -1)
		return journal_unusable(j, cause);
	if (fdatasync(j->fd) == 0)
		return 0;
	journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
	    ": fdatasync: %s", j->dir, j->segment, strerror(errno));
	journal_poison(j);
	return -1;
}

uint64_t
journal_zero_chunk(uint64_t segment_bytes)
{
	uint64_t	chunk = segment_bytes / 8;

	if (chunk > ZERO_CHUNK_MAX)
		chunk = ZERO_CHUNK_MAX;
	chunk -= chunk % ZERO_CHUNK_MIN;
	return chunk < ZERO_CHUNK_MIN ? ZERO_CHUNK_MIN : chunk;
}

/*
 * Zeros written at [from, to) of fd with pwrite, in pieces of at most
 * piece bytes (no more than journal_zeros holds): 0, or -1 with errno
 * and *failed_at the offset of the write that failed, or -2 with errno
 * if the write-back pace gives (not NULL: the checkpoint thread's, never
 * the journaling thread's) failed after the write at *failed_at.
 */
static int
write_zeros(int fd, uint64_t from, uint64_t to, size_t piece,
    struct durable_pace *pace, uint64_t *failed_at)
{
	uint64_t	at;
	size_t		n;
	ssize_t		w;

	for (at = from; at < to; at += (uint64_t)w) {
		n = to - at > piece ? piece : (size_t)(to - at);
		w = pwrite(fd, journal_zeros, n, (off_t)at);
		if (w == -1 && errno == EINTR) {
			w = 0;
			continue;
		}
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			*failed_at = at;
			return -1;
		}
		if (pace != NULL && durable_pace(pace, at + (uint64_t)w) != 0) {
			*failed_at = at;
			return -2;
		}
	}
	return 0;
}

static int64_t
journal_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
journal_prezero(struct journal *j, uint64_t segment_bytes, char **cause)
{
	uint64_t	chunk, limit, want, at, before;
	struct statvfs	vfs;
	struct stat	st;
	int		saved_errno;

	/*
	 * Only where records carry their round (format 2): in a format 1
	 * segment (left by an older idemd) a round lost in part over the
	 * zeros could not be told from damage (doc/journal.md, "Rounds
	 * over the zero tail"), so it is appended to, growing, until the
	 * next segment.
	 */
	if (j->fd == -1 || segment_bytes == 0 ||
	    j->format != JOURNAL_FORMAT_ROUNDS || j->zeros_stopped)
		return 0;
	chunk = journal_zero_chunk(segment_bytes);
	/*
	 * Never past segment_bytes: the round that crosses it appends
	 * (growing the file), and the rotation after it finds no zero tail
	 * to cut, so a full segment is sealed without a truncate and an
	 * fsync on the journaling thread (doc/journal.md, "The next
	 * segment made ahead").
	 */
	limit = segment_bytes;
	/* Less than a chunk ahead: up to the chunk boundary after next. */
	if (j->zeroed >= j->size + chunk || j->zeroed >= limit)
		return 0;
	if (j->zero_retry_at != 0 && journal_now_ms() < j->zero_retry_at)
		return 0;
	want = (j->size / chunk + 2) * chunk;
	if (want > limit)
		want = limit;
	/* Little space left: append as without zeros; look again later. */
	if (fstatvfs(j->fd, &vfs) == 0 && (uint64_t)vfs.f_bavail *
	    vfs.f_frsize < ZERO_MIN_FREE_BYTES + (want - j->zeroed)) {
		j->zero_retry_at = journal_now_ms() + JOURNAL_ZERO_RETRY_MS;
		return 0;
	}
	before = j->zeroed;
	if (write_zeros(j->fd, j->zeroed, want, (size_t)chunk, NULL, &at) != 0)
		goto fail;
	j->zeroed = want;
	j->zero_retry_at = 0;
	return 0;

fail:
	/*
	 * Nothing was acknowledged by zeros and only zeros can lie past
	 * size, so the journal goes on as if none were written: what this
	 * call wrote is cut again (space on a full disk), and if even that
	 * fails the file's end is what it says now (size at least).
	 */
	saved_errno = errno;
	j->zero_retry_at = journal_now_ms() + JOURNAL_ZERO_RETRY_MS;
	if (ftruncate(j->fd, (off_t)before) == 0)
		j->zeroed = before;
	else if (fstat(j->fd, &st) == 0 && (uint64_t)st.st_size >= j->size)
		j->zeroed = (uint64_t)st.st_size;
	journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
	    ": writing zeros ahead at offset %" PRIu64 ": %s; appending "
	    "without them, trying again in %d ms", j->dir, j->segment, at,
	    strerror(saved_errno), JOURNAL_ZERO_RETRY_MS);
	errno = saved_errno;
	return -1;
}

void
journal_close(struct journal *j)
{
	if (j->fd != -1)
		close(j->fd);
	if (j->dir_fd != -1)
		close(j->dir_fd);
	free(j->dir);
	free(j->prefixes);
	free(j->wide);
	j->fd = j->dir_fd = -1;
	j->dir = NULL;
	j->prefixes = NULL;
	j->wide = NULL;
	j->prefixes_cap = j->wide_cap = 0;
}

int
journal_cut(int dir_fd, const char *dir, uint64_t segment, uint64_t size,
    char **cause)
{
	char	name[SEGMENT_NAME_BYTES];
	int	fd, saved_errno;

	journal_segment_name(segment, name);
	if ((fd = openat(dir_fd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)) ==
	    -1) {
		journal_cause(cause, "journal %s/%s: %s", dir, name,
		    strerror(errno));
		return -1;
	}
	if (ftruncate(fd, (off_t)size) == -1 || fsync(fd) == -1) {
		saved_errno = errno;
		close(fd);
		errno = saved_errno;
		journal_cause(cause, "journal %s/%s: cutting back to %llu "
		    "bytes: %s", dir, name, (unsigned long long)size,
		    strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

int
journal_cut_zeros(struct journal *j, char **cause)
{
	struct stat	st;

	if (j->fd == -1)
		return journal_unusable(j, cause);
	/* zeroed is a hint; a sealed segment's end must be sure. */
	if (j->zeroed == j->size && fstat(j->fd, &st) == 0 &&
	    (uint64_t)st.st_size == j->size)
		return 0;
	if (ftruncate(j->fd, (off_t)j->size) == -1 || fsync(j->fd) == -1) {
		/* Whatever is left past size is zeros, or nothing. */
		journal_cause(cause, "journal %s/%016" PRIx64 SEGMENT_SUFFIX
		    ": cutting its zero tail at %" PRIu64 ": %s", j->dir,
		    j->segment, j->size, strerror(errno));
		return -1;
	}
	j->zeroed = j->size;
	return 0;
}

/* ---- the next segment made ahead --------------------------------------- */

void
journal_next_name(uint64_t number, char name[JOURNAL_NEXT_NAME_BYTES])
{
	snprintf(name, JOURNAL_NEXT_NAME_BYTES, JOURNAL_NEXT_PREFIX "%016"
	    PRIx64 ".tmp", number);
}

int
journal_make_next(int dir_fd, const char *dir, uint64_t number,
    uint64_t segment_bytes, struct journal_next *next, char **cause)
{
	char			tmp[JOURNAL_NEXT_NAME_BYTES];
	uint64_t		chunk, want, at;
	struct statvfs		vfs;
	struct durable_pace	pace;
	int			fd, rc;

	next->fd = -1;
	next->number = next->zeroed = 0;
	journal_next_name(number, tmp);
	/* One a crash left: made again, its state unknown. */
	if (unlinkat(dir_fd, tmp, 0) == -1 && errno != ENOENT) {
		journal_cause(cause, "journal %s/%s: unlink: %s", dir,
		    tmp, strerror(errno));
		return -1;
	}
	/* The zeros journal_prezero would write first in a new segment. */
	chunk = journal_zero_chunk(segment_bytes);
	want = (SEGMENT_HEADER_BYTES / chunk + 2) * chunk;
	if (want > segment_bytes)
		want = segment_bytes;
	if (want < SEGMENT_HEADER_BYTES)
		want = SEGMENT_HEADER_BYTES;
	/* Nearly full: none made, rotation creates the segment itself. */
	if (fstatvfs(dir_fd, &vfs) == 0 && (uint64_t)vfs.f_bavail *
	    vfs.f_frsize < ZERO_MIN_FREE_BYTES + want)
		return 0;
	if ((fd = segment_file_create(dir_fd, dir, tmp, number, cause)) == -1)
		return -1;
	/* Their write-back paced, beside the journal's flushes. */
	durable_pace_init(&pace, fd);
	if ((rc = write_zeros(fd, SEGMENT_HEADER_BYTES, want,
	    sizeof journal_zeros, &pace, &at)) != 0)
		return segment_file_fail(dir_fd, dir, tmp, fd, rc == -2 ?
		    "write-back of zeros" : "write zeros", cause);
	/*
	 * Header, zeros and their blocks durable before the name can be
	 * the segment's: a rename that persists finds them on the disk.
	 * The temporary name itself needs no directory fsync.  This fsync
	 * is that step, paced write-back or not (sync_file_range persists
	 * no metadata and flushes no device cache).
	 */
	if (fsync(fd) == -1)
		return segment_file_fail(dir_fd, dir, tmp, fd, "fsync", cause);
	next->fd = fd;
	next->number = number;
	next->zeroed = want;
	return 0;
}

void
journal_drop_next(int dir_fd, struct journal_next *next)
{
	char	tmp[JOURNAL_NEXT_NAME_BYTES];

	if (next->fd == -1)
		return;
	close(next->fd);
	/* No directory fsync: a name replay ignores. */
	journal_next_name(next->number, tmp);
	unlinkat(dir_fd, tmp, 0);
	next->fd = -1;
	next->number = next->zeroed = 0;
}

/*
 * Give the segment made ahead its name: RENAME_NOREPLACE (a segment is
 * never overwritten, as create_segment's O_EXCL), then the directory
 * fsync'd.  Returns its fd, -1 when it was not used (next dropped: the
 * caller creates the segment), -2 after the rename when the directory
 * fsync failed (the name removed again; cause set).
 */
static int
rotate_to_next(struct journal *j, struct journal_next *next, char **cause)
{
	char	name[SEGMENT_NAME_BYTES], tmp[JOURNAL_NEXT_NAME_BYTES];
	int	fd;

	if (next == NULL || next->fd == -1)
		return -1;
	if (next->number != j->segment + 1) {
		journal_drop_next(j->dir_fd, next);
		return -1;
	}
	journal_segment_name(next->number, name);
	journal_next_name(next->number, tmp);
	if (renameat2(j->dir_fd, tmp, j->dir_fd, name,
	    RENAME_NOREPLACE) == -1) {
		next->rename_errno = errno;	/* the caller says why */
		journal_drop_next(j->dir_fd, next);
		return -1;
	}
	fd = next->fd;
	next->fd = -1;
	if (fsync(j->dir_fd) == -1) {
		journal_cause(cause, "journal %s/%s: fsync directory: %s",
		    j->dir, name, strerror(errno));
		close(fd);
		unlinkat(j->dir_fd, name, 0);
		return -2;
	}
	return fd;
}

int
journal_rotate(struct journal *j, char **cause)
{
	return journal_rotate_next(j, NULL, cause);
}

int
journal_rotate_next(struct journal *j, struct journal_next *next,
    char **cause)
{
	uint64_t	zeroed = SEGMENT_HEADER_BYTES;
	int		fd;

	if (j->fd == -1) {
		if (next != NULL)
			journal_drop_next(j->dir_fd, next);
		return journal_unusable(j, cause);
	}
	/*
	 * The caller synced the current segment: it is complete.  A sealed
	 * segment keeps the format without zeros (replay calls a zero tail
	 * in one corruption), so its zero tail is cut, and the cut made
	 * durable, before the next segment can exist.  A segment rotated
	 * because it is full has none (journal_prezero stops at
	 * segment_bytes): the cut is then only an fstat.
	 */
	if (journal_cut_zeros(j, cause) != 0) {
		if (next != NULL)
			journal_drop_next(j->dir_fd, next);
		return -1;
	}
	if (next != NULL)
		zeroed = next->zeroed;
	/*
	 * Cut: from here a failure may leave the next segment's name on the
	 * disk (its removal is no more durable than its creation), so this
	 * one keeps no zeros ahead while it stays the live one, until a
	 * rotation succeeds.
	 */
	j->zeros_stopped = 1;
	if ((fd = rotate_to_next(j, next, cause)) == -2)
		return -1;
	if (fd == -1) {
		zeroed = SEGMENT_HEADER_BYTES;
		if ((fd = create_segment(j->dir_fd, j->dir, j->segment + 1,
		    cause)) == -1)
			return -1;
	}
	j->zeros_stopped = 0;
	close(j->fd);
	j->fd = fd;
	j->segment++;
	j->size = SEGMENT_HEADER_BYTES;
	j->zeroed = zeroed;
	j->format = journal_new_format();
	j->zero_retry_at = 0;
	return 0;
}
