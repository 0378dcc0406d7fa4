/* SPDX-License-Identifier: ISC */
/*
 * workspace_id.c: ROOT/.idem/workspace-id, the UUID that names a
 * workspace in the PostgreSQL store (doc/cluster.md), so that brokers
 * that mount the workspace at different paths agree on it.  Created
 * once, durably, never replaced: the first writer wins and everyone else
 * reads its id.  No symlink is followed.
 *
 * ROOT/.idem/imported says that the local history (.idem/journal) was
 * moved into the PostgreSQL store: a local idemd refuses to serve such a
 * workspace (it would answer from a history the cluster no longer
 * writes), and a broker on the store refuses a workspace with a local
 * history that has no such mark (a retry of an id only that history
 * knows would be executed a second time).  Made the same way, once.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"
#include "workspace_id.h"

/* A version 4 UUID, lower case. */
static void
new_uuid(char out[WORKSPACE_ID_BYTES + 1])
{
	uint8_t	b[16];

	randombytes_buf(b, sizeof b);
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, WORKSPACE_ID_BYTES + 1, "%02x%02x%02x%02x-%02x%02x-"
	    "%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
	    b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
	    b[13], b[14], b[15]);
}

int
workspace_id_valid(const char *s)
{
	size_t	i;

	if (strlen(s) != WORKSPACE_ID_BYTES)
		return 0;
	for (i = 0; i < WORKSPACE_ID_BYTES; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return 0;
		} else if (strchr("0123456789abcdef", s[i]) == NULL || s[i] ==
		    '\0')
			return 0;
	}
	return 1;
}

static int
read_id(int root_fd, char out[WORKSPACE_ID_BYTES + 1], char **cause)
{
	char	buf[WORKSPACE_ID_BYTES + 2];
	ssize_t	n;
	int	fd;

	if ((fd = nofollow_openat(root_fd, WORKSPACE_ID_NAME, O_RDONLY, 0)) ==
	    -1)
		return errno == ENOENT ? 0 : (asprintf(cause, "%s: %s",
		    WORKSPACE_ID_NAME, strerror(errno)), -1);
	n = read(fd, buf, sizeof buf);
	close(fd);
	if (n != WORKSPACE_ID_BYTES + 1 || buf[WORKSPACE_ID_BYTES] != '\n') {
		asprintf(cause, "%s is not one UUID and a newline: not "
		    "idem's; move it away if no broker ever used it",
		    WORKSPACE_ID_NAME);
		errno = EINVAL;
		return -1;
	}
	buf[WORKSPACE_ID_BYTES] = '\0';
	if (!workspace_id_valid(buf)) {
		asprintf(cause, "%s does not hold a lower-case UUID",
		    WORKSPACE_ID_NAME);
		errno = EINVAL;
		return -1;
	}
	memcpy(out, buf, WORKSPACE_ID_BYTES + 1);
	return 1;
}

int
workspace_id_get(int root_fd, int create, char out[WORKSPACE_ID_BYTES + 1],
    char **cause)
{
	char	id[WORKSPACE_ID_BYTES + 1];
	int	rc;

	*cause = NULL;
	if ((rc = read_id(root_fd, out, cause)) != 0 || !create)
		return rc;
	new_uuid(id);
	id[WORKSPACE_ID_BYTES] = '\n';
	if (durable_state_file(root_fd, "workspace-id", id, sizeof id, 0,
	    cause) != 0)
		return -1;
	/* Another broker's id, written first, wins: read what is there. */
	return read_id(root_fd, out, cause) == 1 ? 1 : -1;
}

int
workspace_imported(int root_fd)
{
	struct stat	sb;

	if (nofollow_lstat(root_fd, WORKSPACE_IMPORTED_NAME, &sb) == 0)
		return S_ISREG(sb.st_mode) ? 1 : (errno = EINVAL, -1);
	return errno == ENOENT ? 0 : -1;
}

int
workspace_mark_imported(int root_fd,
    const char workspace[WORKSPACE_ID_BYTES + 1], char **cause)
{
	char	line[WORKSPACE_ID_BYTES + 1];

	*cause = NULL;
	memcpy(line, workspace, WORKSPACE_ID_BYTES);
	line[WORKSPACE_ID_BYTES] = '\n';
	return durable_state_file(root_fd, "imported", line, sizeof line, 0,
	    cause);
}
