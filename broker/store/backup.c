/* SPDX-License-Identifier: ISC */
/*
 * backup.c: a consistent copy of a root's state (the journal's newest
 * checkpoint and the segments after it, the index, the small files of
 * .idem/), taken beside a running broker without its help, and a
 * manifest of the workspace's files (copied too on request).
 * doc/journal.md, "Backups", says why the copy is consistent.
 *
 * DESIGN
 *
 * The broker prunes segments while it runs (a checkpoint removes the
 * segments before it), so a copy by name could find a segment gone
 * between listing it and reading it.  An open descriptor keeps an
 * unlinked file's bytes: the copy first opens the newest checkpoint S
 * and every segment from S on (a name gone meanwhile: list again), then
 * copies the index (LMDB's own copy, a read transaction's snapshot,
 * which holds every entry checkpoint S relied on: its index commit came
 * before its rename), then lists again and opens the segments created
 * since, and only then reads every held segment to its end.  Whatever
 * was acknowledged before the backup began was durable then in the
 * checkpoint, the index or a segment from S on, and each of those is in
 * the copy.  The last segment may end in a record being written: the
 * copy's replay cuts it, as a start-up would; its zero tail is cut too
 * (the copy holds records only).
 *
 * Nothing is written below the root.  Everything made in DEST is made
 * O_EXCL (or mkdirat) and O_NOFOLLOW below descriptors opened without
 * following a symlink, each file and directory fsync'd.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "journal_int.h"

#define BACKUP_MAX_TRIES	100
#define BACKUP_COPY_BYTES	(1024 * 1024)
/* Copies of the live segment, when a round overtook the first (below). */
#define BACKUP_LAST_SEGMENT_TRIES	3

/* The journal's files the copy holds open. */
struct held {
	int		 checkpoint_fd;	/* -1: none */
	uint64_t	 checkpoint;	/* S, 0: none */
	uint64_t	 first, last;	/* segments first..last; 0: none */
	int		*fds;		/* fds[n - first] */
	size_t		 size;
};

static int
fail(char **cause, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
fail(char **cause, const char *fmt, ...)
{
	va_list	ap;
	int	saved_errno = errno;

	free(*cause);
	*cause = NULL;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	errno = saved_errno;
	return -1;
}

static void
held_close(struct held *h)
{
	uint64_t	n;

	if (h->checkpoint_fd != -1)
		close(h->checkpoint_fd);
	for (n = h->first; h->fds != NULL && n != 0 && n <= h->last; n++)
		if (h->fds[n - h->first] != -1)
			close(h->fds[n - h->first]);
	free(h->fds);
	memset(h, 0, sizeof *h);
	h->checkpoint_fd = -1;
}

/*
 * The journal directory's newest checkpoint and the lowest and highest
 * segment from it on (every one between listed too: *gap otherwise).
 */
static int
list_journal(int jfd, uint64_t *checkpoint, uint64_t *low, uint64_t *high,
    int *gap)
{
	DIR		*d;
	struct dirent	*e;
	uint64_t	 n, *seen = NULL, count = 0, i, size = 0;
	int		 fd;

	*checkpoint = *low = *high = 0;
	*gap = 0;
	if ((fd = openat(jfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return -1;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		if (checkpoint_name_parse(e->d_name, &n)) {
			if (n > *checkpoint)
				*checkpoint = n;
		} else if (journal_segment_parse_name(e->d_name, &n)) {
			if (count == size) {
				uint64_t *p;

				size = size == 0 ? 64 : size * 2;
				if ((p = reallocarray(seen, size,
				    sizeof *p)) == NULL) {
					free(seen);
					closedir(d);
					errno = ENOMEM;
					return -1;
				}
				seen = p;
			}
			seen[count++] = n;
		}
	}
	closedir(d);
	for (i = 0; i < count; i++) {
		if (seen[i] < *checkpoint)
			continue;	/* an interrupted prune's leftover */
		if (*low == 0 || seen[i] < *low)
			*low = seen[i];
		if (seen[i] > *high)
			*high = seen[i];
	}
	if (*high != 0) {
		uint64_t	 want = *high - *low + 1, have = 0;

		for (i = 0; i < count; i++)
			if (seen[i] >= *low && seen[i] <= *high)
				have++;
		*gap = have != want || (*checkpoint != 0 &&
		    *low != *checkpoint);
	}
	free(seen);
	return 0;
}

/* Open segment n into h (grown to hold it): 0, -1 (ENOENT: pruned). */
static int
hold_segment(int jfd, struct held *h, uint64_t n)
{
	char	name[32];
	int	fd;

	if (n - h->first >= h->size) {
		size_t	 size = h->size == 0 ? 16 : h->size * 2;
		int	*p;

		while (n - h->first >= size)
			size *= 2;
		if ((p = reallocarray(h->fds, size, sizeof *p)) == NULL)
			return -1;
		h->fds = p;
		h->size = size;
	}
	snprintf(name, sizeof name, "%016llx.jnl", (unsigned long long)n);
	if ((fd = openat(jfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) == -1)
		return -1;
	h->fds[n - h->first] = fd;
	h->last = n;
	return 0;
}

/*
 * The first hold: the newest checkpoint and the segments from it, all
 * open at once.  A name gone between the listing and its open was
 * pruned by a newer checkpoint: list again.
 */
static int
hold_journal(int jfd, struct held *h, unsigned *tries, char **cause)
{
	uint64_t	 checkpoint = 0, low, high, n;
	char		 name[40];
	int		 gap = 0;

	for (; *tries < BACKUP_MAX_TRIES; (*tries)++) {
		held_close(h);
		if (list_journal(jfd, &checkpoint, &low, &high, &gap) != 0)
			return fail(cause, "listing the journal: %s",
			    strerror(errno));
		if (gap)
			continue;	/* a prune in the middle of it */
		if (high == 0) {
			if (checkpoint != 0)
				continue;
			return fail(cause, "the journal has no segment");
		}
		if (checkpoint != 0) {
			snprintf(name, sizeof name, "checkpoint-%016llx.snap",
			    (unsigned long long)checkpoint);
			if ((h->checkpoint_fd = openat(jfd, name, O_RDONLY |
			    O_NOFOLLOW | O_CLOEXEC)) == -1) {
				if (errno == ENOENT)
					continue;
				return fail(cause, "opening %s: %s", name,
				    strerror(errno));
			}
			h->checkpoint = checkpoint;
		}
		h->first = low;
		for (n = low; n <= high; n++)
			if (hold_segment(jfd, h, n) != 0)
				break;
		if (n > high)
			return 0;
		if (errno != ENOENT)
			return fail(cause, "opening segment %llu: %s",
			    (unsigned long long)n, strerror(errno));
	}
	if (gap) {
		/* Not a prune in passing: the same hole every time. */
		errno = EINVAL;
		if (checkpoint == 0)
			return fail(cause, "the journal's segments are not "
			    "consecutive: damaged (idemctl verify names it)");
		return fail(cause, "the journal's segments are not consecutive "
		    "from checkpoint %llu's: damaged (idemctl verify names it)",
		    (unsigned long long)checkpoint);
	}
	errno = EAGAIN;
	return fail(cause, "the journal changed under %u listings in a row",
	    *tries);
}

/*
 * After the index's copy: the segments created since the first hold.
 * One missing means a checkpoint pruned past the held ones: 1, begin
 * again (the index copy too).
 */
static int
hold_newer(int jfd, struct held *h, char **cause)
{
	uint64_t	checkpoint, low, high, n;
	int		gap;

	for (;;) {
		if (list_journal(jfd, &checkpoint, &low, &high, &gap) != 0)
			return fail(cause, "listing the journal: %s",
			    strerror(errno));
		if (high <= h->last)
			return 0;
		for (n = h->last + 1; n <= high; n++) {
			if (hold_segment(jfd, h, n) == 0)
				continue;
			if (errno == ENOENT)
				return 1;
			return fail(cause, "opening segment %llu: %s",
			    (unsigned long long)n, strerror(errno));
		}
	}
}

/* fd's bytes from its start to its end now into a new file of dir. */
static int
copy_fd(int from, int dir_fd, const char *name, mode_t mode,
    uint64_t *bytes, char **cause)
{
	static char	 buf[BACKUP_COPY_BYTES];
	off_t		 at = 0;
	ssize_t		 n;
	int		 to;

	if ((to = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, mode)) == -1)
		return fail(cause, "creating %s: %s", name, strerror(errno));
	for (;;) {
		n = pread(from, buf, sizeof buf, at);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			fail(cause, "reading for %s: %s", name,
			    strerror(errno));
			goto bad;
		}
		if (n == 0)
			break;
		if (durable_write_all(to, buf, (size_t)n) != 0) {
			fail(cause, "writing %s: %s", name, strerror(errno));
			goto bad;
		}
		at += n;
	}
	if (fsync(to) != 0) {
		fail(cause, "fsync %s: %s", name, strerror(errno));
		goto bad;
	}
	close(to);
	if (bytes != NULL)
		*bytes += (uint64_t)at;
	return 0;
bad:
	close(to);
	return -1;
}

static int
apply_nothing(const struct journal_record *r, void *arg)
{
	(void)r;
	(void)arg;
	return 0;
}

#ifdef IDEM_FAULT_INJECTION
/*
 * Tests only (configure --enable-fault-injection): the variable names a
 * FIFO; wait once, until the test writes to it (the test's open for
 * writing returns once this waits).  IDEM_BACKUP_HOLD waits once every
 * file is held and before any byte of the journal is read, so that the
 * test can make the broker prune the held segments meanwhile;
 * IDEM_BACKUP_COPIED waits once the journal's files are copied, before
 * the copy is replayed, so that the test can change the live segment
 * as a round in flight would (tests/integration/test_backup).
 */
static void
backup_hold(const char *var)
{
	const char	*fifo = getenv(var);
	char		 c;
	int		 fd;

	if (fifo == NULL || (fd = open(fifo, O_RDONLY | O_CLOEXEC)) == -1)
		return;
	while (read(fd, &c, 1) == -1 && errno == EINTR)
		;
	close(fd);
}
#endif

/* Every held file into DEST/.idem/journal, then its torn tail cut. */
static int
copy_journal(struct store_backup *b, struct held *h, int dest_state_fd,
    char **cause)
{
	struct journal_replay_stats	 stats;
	char				 name[40], dir[PATH_MAX];
	uint64_t			 n, last_bytes = 0;
	int				 jfd, rc = -1, tries = 0;

	if (mkdirat(dest_state_fd, "journal", 0700) != 0 ||
	    (jfd = openat(dest_state_fd, "journal", O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1)
		return fail(cause, "creating %s/.idem/journal: %s", b->dest,
		    strerror(errno));
	if (h->checkpoint != 0) {
		snprintf(name, sizeof name, "checkpoint-%016llx.snap",
		    (unsigned long long)h->checkpoint);
		if (copy_fd(h->checkpoint_fd, jfd, name, 0600,
		    &b->journal_bytes, cause) != 0)
			goto out;
	}
	for (n = h->first; n <= h->last; n++) {
		snprintf(name, sizeof name, "%016llx.jnl",
		    (unsigned long long)n);
		if (n == h->last)
			last_bytes = b->journal_bytes;
		if (copy_fd(h->fds[n - h->first], jfd, name, 0600,
		    &b->journal_bytes, cause) != 0)
			goto out;
	}
#ifdef IDEM_FAULT_INJECTION
	backup_hold("IDEM_BACKUP_COPIED");
#endif
again:
	if (fsync(jfd) != 0) {
		fail(cause, "fsync %s/.idem/journal: %s", b->dest,
		    strerror(errno));
		goto out;
	}
	/*
	 * The last segment may end in a record the broker was writing:
	 * cut it as a start-up would, so that the copy verifies clean.
	 * Through the descriptor, not DEST's name: the replay truncates,
	 * and DEST swapped for a symlink to a live root meanwhile would
	 * have it cut that root's journal.  /proc/self/fd/N names the
	 * directory jfd opened (as in index_open_at); the "/." makes it a
	 * component on the way, which the replay's O_NOFOLLOW open of its
	 * last one would refuse to be.
	 */
	snprintf(dir, sizeof dir, "/proc/self/fd/%d/.", jfd);
	memset(&stats, 0, sizeof stats);
	if (journal_replay_from(dir, h->first, 0, apply_nothing, NULL,
	    &stats, cause) != 0) {
		/*
		 * The broker's round may have gone over the live segment's
		 * zero tail while it was copied, overtaking the read: the
		 * copy then holds zeros, then whole records, which its
		 * replay calls corruption.  Copy that segment again (damage
		 * on the disk stays, a round in flight does not).
		 */
		if (errno != EINVAL || !stats.has_corrupt_offset ||
		    stats.at_segment != h->last || h->last == 0 ||
		    tries++ >= BACKUP_LAST_SEGMENT_TRIES)
			goto out;
		free(*cause);
		*cause = NULL;
		snprintf(name, sizeof name, "%016llx.jnl",
		    (unsigned long long)h->last);
		b->journal_bytes = last_bytes;
		if (unlinkat(jfd, name, 0) != 0) {
			fail(cause, "removing the copy of %s: %s", name,
			    strerror(errno));
			goto out;
		}
		if (copy_fd(h->fds[h->last - h->first], jfd, name, 0600,
		    &b->journal_bytes, cause) != 0)
			goto out;
		goto again;
	}
	/*
	 * The live segment's zero tail (doc/journal.md) is not records:
	 * the copy keeps its records only, and counts only them.
	 */
	if (stats.zero_bytes > 0) {
		if (journal_cut(jfd, dir, stats.end_segment, stats.end_offset,
		    cause) != 0)
			goto out;
		b->journal_bytes -= stats.zero_bytes;
	}
	b->records = stats.records;
	b->torn_bytes = stats.truncated_bytes;
	rc = 0;
out:
	close(jfd);
	return rc;
}

/* LMDB's own copy (compacted) of the root's index, if it has one. */
static int
copy_index(struct store_backup *b, int state_fd, int dest_state_fd,
    char **cause)
{
	struct index	 x;
	struct stat	 st;
	int		 ifd, dfd, fd, rc = -1;

	if ((ifd = nofollow_dir(state_fd, "index")) == -1) {
		if (errno == ENOENT)
			return 0;
		return fail(cause, "%s/%s: %s", b->root, IDEM_INDEX_DIR,
		    strerror(errno));
	}
	if (fstatat(ifd, "data.mdb", &st, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(st.st_mode)) {
		close(ifd);
		return 0;
	}
	memset(&x, 0, sizeof x);
	if (index_open_at(&x, ifd, IDEM_INDEX_DIR, INDEX_READONLY,
	    cause) != 0) {
		close(ifd);
		return -1;
	}
	if (mkdirat(dest_state_fd, "index", 0700) != 0 ||
	    (dfd = openat(dest_state_fd, "index", O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1) {
		fail(cause, "creating %s/%s: %s", b->dest, IDEM_INDEX_DIR,
		    strerror(errno));
		goto out;
	}
	if ((fd = openat(dfd, "data.mdb", O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0600)) == -1) {
		fail(cause, "creating %s/%s/data.mdb: %s", b->dest,
		    IDEM_INDEX_DIR, strerror(errno));
		close(dfd);
		goto out;
	}
	if (index_copy_fd(&x, fd, cause) == 0 && fsync(fd) == 0 &&
	    fstat(fd, &st) == 0) {
		b->index_bytes = (uint64_t)st.st_size;
		b->index_copied = 1;
		rc = 0;
	} else if (*cause == NULL)
		fail(cause, "%s/%s/data.mdb: %s", b->dest, IDEM_INDEX_DIR,
		    strerror(errno));
	close(fd);
	index_close(&x);
	/* The copy opened and counted: it is an index this idem reads. */
	if (rc == 0) {
		memset(&x, 0, sizeof x);
		if (index_open_at(&x, dfd, "the copy's index", INDEX_READONLY,
		    cause) != 0 || index_stats(&x, &b->index, cause) != 0) {
			if (*cause == NULL)
				fail(cause, "the copy's index: %s",
				    strerror(errno));
			rc = -1;
		}
		index_close(&x);
		/* LMDB's reader table is made anew by whoever opens it. */
		(void)unlinkat(dfd, "lock.mdb", 0);
		if (rc == 0 && fsync(dfd) != 0)
			rc = fail(cause, "fsync %s/%s: %s", b->dest,
			    IDEM_INDEX_DIR, strerror(errno));
	}
	close(dfd);
	close(ifd);
	return rc;
out:
	index_close(&x);
	close(ifd);
	return rc;
}

/*
 * The small files of .idem/ (workspace-id, imported, sequence-digits,
 * whatever a later idemd adds): not the lock, the socket, a temporary,
 * nor an earlier backup's own notes.
 */
static int
copy_state_files(struct store_backup *b, int state_fd, int dest_state_fd,
    char **cause)
{
	DIR		*d;
	struct dirent	*e;
	struct stat	 st;
	int		 fd, from;

	if ((fd = openat(state_fd, ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd != -1)
			close(fd);
		return fail(cause, "reading %s/%s: %s", b->root,
		    IDEM_STATE_DIR, strerror(errno));
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, "idemd.lock") ==
		    0 || strcmp(e->d_name, "idemd.sock") == 0 ||
		    strncmp(e->d_name, "backup-", 7) == 0)
			continue;
		if (fstatat(state_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) !=
		    0 || !S_ISREG(st.st_mode))
			continue;	/* journal/, index/, hosts/, ... */
		if ((from = openat(state_fd, e->d_name, O_RDONLY |
		    O_NOFOLLOW | O_CLOEXEC)) == -1)
			continue;	/* gone meanwhile */
		if (copy_fd(from, dest_state_fd, e->d_name, st.st_mode & 0777,
		    NULL, cause) != 0) {
			close(from);
			closedir(d);
			return -1;
		}
		close(from);
		b->state_files++;
	}
	closedir(d);
	return 0;
}

/*
 * DEST: made (0700), or an empty directory; never a symlink.  Its
 * .idem/ is made here too, so that a name planted in DEST meanwhile
 * makes the backup fail (EEXIST) rather than lead it elsewhere.
 */
static int
open_dest(struct store_backup *b, int *dest_fd, int *dest_state_fd,
    char **cause)
{
	DIR		*d;
	struct dirent	*e;
	char		 parent[PATH_MAX], *slash;
	int		 fd, pfd, made = 0, empty = 1;

	if ((fd = open(b->dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) == -1 && errno == ENOENT) {
		if (mkdir(b->dest, 0700) != 0)
			return fail(cause, "creating %s: %s", b->dest,
			    strerror(errno));
		made = 1;
		fd = open(b->dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
	}
	if (fd == -1) {
		if (errno == ELOOP || errno == ENOTDIR) {
			struct stat	st;

			if (lstat(b->dest, &st) == 0 && S_ISLNK(st.st_mode))
				errno = ELOOP;
			return fail(cause, "%s %s", b->dest, errno == ELOOP ?
			    "is a symlink (not followed): give the directory "
			    "itself" : "is not a directory");
		}
		return fail(cause, "%s: %s", b->dest, strerror(errno));
	}
	if (!made) {
		int	dup_fd = dup(fd);

		if (dup_fd == -1 || (d = fdopendir(dup_fd)) == NULL) {
			if (dup_fd != -1)
				close(dup_fd);
			close(fd);
			return fail(cause, "reading %s: %s", b->dest,
			    strerror(errno));
		}
		while (empty && (e = readdir(d)) != NULL)
			empty = strcmp(e->d_name, ".") == 0 ||
			    strcmp(e->d_name, "..") == 0;
		closedir(d);
		if (!empty) {
			close(fd);
			errno = EEXIST;
			return fail(cause, "%s exists and is not empty: give a "
			    "new or empty directory", b->dest);
		}
	} else {
		/* DEST's own name durable in its parent. */
		snprintf(parent, sizeof parent, "%s", b->dest);
		while ((slash = strrchr(parent, '/')) != NULL &&
		    slash[1] == '\0' && slash != parent)
			*slash = '\0';
		if ((slash = strrchr(parent, '/')) == NULL)
			snprintf(parent, sizeof parent, ".");
		else if (slash == parent)
			parent[1] = '\0';
		else
			*slash = '\0';
		if ((pfd = open(parent, O_RDONLY | O_DIRECTORY |
		    O_CLOEXEC)) != -1) {
			fsync(pfd);
			close(pfd);
		}
	}
	if (mkdirat(fd, IDEM_STATE_DIR, 0700) != 0 ||
	    (*dest_state_fd = openat(fd, IDEM_STATE_DIR, O_RDONLY |
	    O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) == -1) {
		fail(cause, "creating %s/%s: %s", b->dest, IDEM_STATE_DIR,
		    strerror(errno));
		close(fd);
		return -1;
	}
	*dest_fd = fd;
	return 0;
}

int
store_backup(struct store_backup *b, char **cause)
{
	struct held	 h;
	int		 root_fd = -1, state_fd = -1, jfd = -1;
	int		 dest_fd = -1, dest_state_fd = -1, rc = -1, again;

	*cause = NULL;
	memset(&h, 0, sizeof h);
	h.checkpoint_fd = -1;
	if (sodium_init() < 0)
		return fail(cause, "libsodium failed to initialise");
	if ((root_fd = open(b->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1)
		return fail(cause, "root %s: %s", b->root, strerror(errno));
	if ((state_fd = nofollow_dir(root_fd, IDEM_STATE_DIR)) == -1) {
		fail(cause, "%s/%s: %s", b->root, IDEM_STATE_DIR, errno ==
		    ELOOP ? "a symlink (not followed)" : strerror(errno));
		goto out;
	}
	if ((jfd = nofollow_dir(root_fd, IDEM_JOURNAL_DIR)) == -1) {
		fail(cause, errno == ENOENT ? "%s has no local journal (%s): "
		    "nothing to back up (a workspace on the PostgreSQL store "
		    "is backed up with pg_dump)" : "%s/%s: %s", b->root,
		    IDEM_JOURNAL_DIR, strerror(errno));
		goto out;
	}
	free(*cause);
	*cause = NULL;
	if (seqdigits_read(root_fd, &b->sequence_digits, cause) != 1)
		b->sequence_digits = IDEM_DEFAULT_SEQUENCE_DIGITS;
	free(*cause);
	*cause = NULL;
	b->started_ms = (int64_t)time(NULL) * 1000;
	{
		struct timespec	ts;

		if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
			b->started_ms = (int64_t)ts.tv_sec * 1000 +
			    ts.tv_nsec / 1000000;
	}
	if (open_dest(b, &dest_fd, &dest_state_fd, cause) != 0)
		goto out;
	/*
	 * The held journal, then the index, then the segments created
	 * meanwhile: a checkpoint that pruned past the held segments
	 * since means beginning again (rare: one per --segment-bytes).
	 */
	do {
		if (hold_journal(jfd, &h, &b->listings, cause) != 0)
			goto out;
		if (b->index_copied) {
			/* An earlier round's copy: made again, later. */
			if (unlinkat(dest_state_fd, "index/data.mdb", 0) != 0 ||
			    unlinkat(dest_state_fd, "index", AT_REMOVEDIR) !=
			    0) {
				fail(cause, "removing %s/%s: %s", b->dest,
				    IDEM_INDEX_DIR, strerror(errno));
				goto out;
			}
			b->index_copied = 0;
		}
		if (copy_index(b, state_fd, dest_state_fd, cause) != 0)
			goto out;
		if ((again = hold_newer(jfd, &h, cause)) == -1)
			goto out;
		b->listings++;
	} while (again && b->listings < BACKUP_MAX_TRIES);
	if (again) {
		fail(cause, "the journal changed under %u listings in a row",
		    b->listings);
		goto out;
	}
	b->checkpoint = h.checkpoint;
	b->first_segment = h.first;
	b->last_segment = h.last;
#ifdef IDEM_FAULT_INJECTION
	backup_hold("IDEM_BACKUP_HOLD");
#endif
	if (copy_journal(b, &h, dest_state_fd, cause) != 0 ||
	    copy_state_files(b, state_fd, dest_state_fd, cause) != 0)
		goto out;
	if (fsync(dest_state_fd) != 0 || fsync(dest_fd) != 0) {
		fail(cause, "fsync %s: %s", b->dest, strerror(errno));
		goto out;
	}
	if (backup_workspace(b, root_fd, dest_fd, dest_state_fd, cause) != 0)
		goto out;
	rc = 0;
out:
	held_close(&h);
	if (jfd != -1)
		close(jfd);
	if (state_fd != -1)
		close(state_fd);
	if (root_fd != -1)
		close(root_fd);
	if (dest_state_fd != -1)
		close(dest_state_fd);
	if (dest_fd != -1)
		close(dest_fd);
	return rc;
}
