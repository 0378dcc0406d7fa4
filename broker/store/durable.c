/* SPDX-License-Identifier: ISC */
/*
 * durable.c: the store's one "write all of these bytes" loop, under
 * every durable file it makes (journal segments, checkpoints, TASK and
 * REPORT files, .idem/workspace-id and sequence-digits) and the
 * PostgreSQL store's TASK files; and the one way of making a small file
 * of the state directory (.idem/) durably.  What makes the others
 * durable (fsync, the rename, the directory's fsync) stays with their
 * owners: the order of those steps is that file's own contract.  The
 * write-back of the checkpoint thread's large files is paced here too
 * (durable_pace): a hint to the kernel, never one of those steps.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

/* Write all of data, across short writes and signals. */
int
durable_write_all(int fd, const void *data, size_t length)
{
	const char	*p = data;
	ssize_t		 n;

	while (length > 0) {
		n = write(fd, p, length > SSIZE_MAX ? SSIZE_MAX : length);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0) {
			/* A regular file never does this; do not spin. */
			errno = EIO;
			return -1;
		}
		p += n;
		length -= (size_t)n;
	}
	return 0;
}

void
durable_pace_init(struct durable_pace *pace, int fd)
{
	pace->fd = fd;
	pace->started = pace->waited = 0;
	pace->unsupported = 0;
	pace->succeeded = 0;
}

/*
 * sync_file_range(2) with SYNC_FILE_RANGE_WRITE starts the write-back of
 * a range and returns; with SYNC_FILE_RANGE_WAIT_BEFORE alone it waits
 * for the write-back already started on it.  Neither writes metadata nor
 * flushes the device's cache: what makes the file durable is its fsync,
 * which its writer still calls, in the same place.  Pacing only moves
 * the data's write-out earlier and spreads it, one piece in flight: the
 * journal's fdatasync then waits behind at most DURABLE_PACE_BYTES of
 * this file instead of the MiBs a lone fsync at the end hands the
 * device at once.
 */
int
durable_pace(struct durable_pace *pace, uint64_t end)
{
	uint64_t	piece;

	while (!pace->unsupported && pace->started < end) {
		if (pace->waited < pace->started &&
		    sync_file_range(pace->fd, (off_t)pace->waited,
		    (off_t)(pace->started - pace->waited),
		    SYNC_FILE_RANGE_WAIT_BEFORE) == -1)
			return -1;	/* never "unsupported": below */
		pace->waited = pace->started;
		piece = end - pace->started;
		if (piece > DURABLE_PACE_BYTES)
			piece = DURABLE_PACE_BYTES;
		if (sync_file_range(pace->fd, (off_t)pace->started,
		    (off_t)piece, SYNC_FILE_RANGE_WRITE) == -1)
			goto failed;
		pace->succeeded = 1;
		pace->started += piece;
	}
	return 0;

failed:
	/*
	 * A kernel or file system without it (or a seccomp filter that
	 * refuses it) says so at the fd's first call: nothing is lost but
	 * the pacing, and the file's fsync writes all as before.  Only
	 * then.  Once a call on the fd succeeded, any error may be the
	 * file's: a wait (SYNC_FILE_RANGE_WAIT_BEFORE, above) returns the
	 * file's pending write-back error and clears it for this fd
	 * (file_check_and_advance_wb_err), so the later fsync would return
	 * 0 and the checkpoint be renamed and old segments pruned with its
	 * data never on the disk; FUSE or NFS report such errors as EPERM
	 * or EINVAL too.  So those fail the file's writer as an I/O error
	 * does.
	 */
	if (!pace->succeeded && (errno == ENOSYS || errno == EINVAL ||
	    errno == ESPIPE || errno == EPERM)) {
		pace->unsupported = 1;
		return 0;
	}
	return -1;
}

int
durable_state_file(int root_fd, const char *name, const void *data,
    size_t length, int replace, char **cause)
{
	char	temp[64];
	int	rc, fd, dir_fd;

	*cause = NULL;
	if ((dir_fd = nofollow_dir(root_fd, IDEM_STATE_DIR)) == -1) {
		asprintf(cause, "%s: %s", IDEM_STATE_DIR, strerror(errno));
		return -1;
	}
	snprintf(temp, sizeof temp, ".%s.tmp.%ld", name, (long)getpid());
	(void)unlinkat(dir_fd, temp, 0);
	if ((fd = openat(dir_fd, temp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0644)) == -1 ||
	    durable_write_all(fd, data, length) != 0 || fsync(fd) != 0) {
		asprintf(cause, "writing %s/%s: %s", IDEM_STATE_DIR, name,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		(void)unlinkat(dir_fd, temp, 0);
		close(dir_fd);
		return -1;
	}
	close(fd);
	/* link never replaces: a file there first wins. */
	rc = replace ? renameat(dir_fd, temp, dir_fd, name) :
	    linkat(dir_fd, temp, dir_fd, name, 0);
	if (rc != 0 && (replace || errno != EEXIST)) {
		asprintf(cause, "%s %s/%s: %s", replace ? "renaming" :
		    "linking", IDEM_STATE_DIR, name, strerror(errno));
		(void)unlinkat(dir_fd, temp, 0);
		close(dir_fd);
		return -1;
	}
	if (!replace)
		(void)unlinkat(dir_fd, temp, 0);
	if (fsync(dir_fd) != 0) {
		asprintf(cause, "fsync %s: %s", IDEM_STATE_DIR,
		    strerror(errno));
		close(dir_fd);
		return -1;
	}
	close(dir_fd);
	return 0;
}
