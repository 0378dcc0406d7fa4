/* SPDX-License-Identifier: ISC */
/*
 * workspace_id.c: ROOT/.idem/workspace-id, the UUID that names a
 * workspace in the PostgreSQL store (doc/cluster.md), so that brokers
 * that mount the workspace at different paths agree on it.  Created
 * once, durably, never replaced: the first writer wins and everyone else
 * reads its id.  No symlink is followed.
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
	char	id[WORKSPACE_ID_BYTES + 2], temp[64];
	int	rc, fd, dir_fd;

	*cause = NULL;
	if ((rc = read_id(root_fd, out, cause)) != 0 || !create)
		return rc;
	if ((dir_fd = nofollow_dir(root_fd, IDEM_STATE_DIR)) == -1) {
		asprintf(cause, "%s: %s", IDEM_STATE_DIR, strerror(errno));
		return -1;
	}
	new_uuid(id);
	id[WORKSPACE_ID_BYTES] = '\n';
	snprintf(temp, sizeof temp, ".workspace-id.tmp.%ld", (long)getpid());
	(void)unlinkat(dir_fd, temp, 0);
	if ((fd = openat(dir_fd, temp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0644)) == -1 ||
	    journal_write_all(fd, (const uint8_t *)id,
	    WORKSPACE_ID_BYTES + 1) != 0 ||
	    fsync(fd) != 0) {
		asprintf(cause, "writing %s: %s", WORKSPACE_ID_NAME,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		(void)unlinkat(dir_fd, temp, 0);
		close(dir_fd);
		return -1;
	}
	close(fd);
	/* link never replaces: another broker's id, written first, wins. */
	rc = linkat(dir_fd, temp, dir_fd, "workspace-id", 0);
	if (rc != 0 && errno != EEXIST) {
		asprintf(cause, "linking %s: %s", WORKSPACE_ID_NAME,
		    strerror(errno));
		(void)unlinkat(dir_fd, temp, 0);
		close(dir_fd);
		return -1;
	}
	(void)unlinkat(dir_fd, temp, 0);
	if (fsync(dir_fd) != 0) {
		asprintf(cause, "fsync %s: %s", IDEM_STATE_DIR,
		    strerror(errno));
		close(dir_fd);
		return -1;
	}
	close(dir_fd);
	return read_id(root_fd, out, cause) == 1 ? 1 : -1;
}
