/* SPDX-License-Identifier: ISC */
/*
 * durable.c: the store's one "write all of these bytes" loop, under
 * every durable file it makes (journal segments, checkpoints, TASK and
 * REPORT files, .idem/workspace-id and sequence-digits) and the
 * PostgreSQL store's TASK files; and the one way of making a small file
 * of the state directory (.idem/) durably.  What makes the others
 * durable (fsync, the rename, the directory's fsync) stays with their
 * owners: the order of those steps is that file's own contract.
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
