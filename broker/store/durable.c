/* SPDX-License-Identifier: ISC */
/*
 * durable.c: the store's one "write all of these bytes" loop, under
 * every durable file it makes (journal segments, checkpoints, TASK and
 * REPORT files, .idem/workspace-id and sequence-digits) and the
 * PostgreSQL store's TASK files.  What makes each durable (fsync, the
 * rename, the directory's fsync) stays with its owner: the order of
 * those steps is that file's own contract.
 */
#include <errno.h>
#include <limits.h>
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
