/* SPDX-License-Identifier: ISC */
/*
 * seqdigits.c: ROOT/.idem/sequence-digits, the --sequence-digits the
 * workspace's broker last ran with (SPEC.md, "Names"), so that idemctl
 * verify judges names by it unasked, and a restart with fewer digits
 * than the files already written is refused instead of handing out
 * numbers that FCoP readers order before the wider ones.  One line, the
 * number and a newline; replaced durably (temporary, fsync, rename,
 * directory fsync), never through a symlink.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

#define SEQDIGITS_NAME	"sequence-digits"

int
seqdigits_read(int root_fd, unsigned *digits, char **cause)
{
	char	buf[8];
	ssize_t	n;
	int	fd;

	*cause = NULL;
	*digits = 0;
	if ((fd = nofollow_openat(root_fd, IDEM_STATE_DIR "/" SEQDIGITS_NAME,
	    O_RDONLY, 0)) == -1) {
		if (errno == ENOENT)
			return 0;
		asprintf(cause, "%s/%s: %s", IDEM_STATE_DIR, SEQDIGITS_NAME,
		    strerror(errno));
		return -1;
	}
	n = read(fd, buf, sizeof buf);
	close(fd);
	if (n != 2 || buf[1] != '\n' || buf[0] < '0' + IDEM_MIN_SEQUENCE_DIGITS
	    || buf[0] > '0' + IDEM_MAX_SEQUENCE_DIGITS) {
		asprintf(cause, "%s/%s does not hold one number of %d to %d "
		    "and a newline: not idem's; remove it if no broker ever "
		    "wrote it", IDEM_STATE_DIR, SEQDIGITS_NAME,
		    IDEM_MIN_SEQUENCE_DIGITS, IDEM_MAX_SEQUENCE_DIGITS);
		errno = EINVAL;
		return -1;
	}
	*digits = (unsigned)(buf[0] - '0');
	return 1;
}

int
seqdigits_record(int root_fd, unsigned digits, char **cause)
{
	char		 line[2] = { (char)('0' + digits), '\n' };
	char		 temp[64];
	const char	*what = NULL;
	int		 fd = -1, dir_fd;

	*cause = NULL;
	if ((dir_fd = nofollow_dir(root_fd, IDEM_STATE_DIR)) == -1) {
		asprintf(cause, "%s: %s", IDEM_STATE_DIR, strerror(errno));
		return -1;
	}
	snprintf(temp, sizeof temp, "." SEQDIGITS_NAME ".tmp.%ld",
	    (long)getpid());
	(void)unlinkat(dir_fd, temp, 0);
	if ((fd = openat(dir_fd, temp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0644)) == -1)
		what = "creating";
	else if (durable_write_all(fd, line, sizeof line) != 0 ||
	    fsync(fd) != 0)
		what = "writing";
	else if (renameat(dir_fd, temp, dir_fd, SEQDIGITS_NAME) != 0)
		what = "renaming";
	if (fd != -1)
		close(fd);
	if (what != NULL) {
		asprintf(cause, "%s %s/%s: %s", what, IDEM_STATE_DIR,
		    SEQDIGITS_NAME, strerror(errno));
		(void)unlinkat(dir_fd, temp, 0);
		close(dir_fd);
		return -1;
	}
	if (fsync(dir_fd) != 0) {
		asprintf(cause, "fsync %s: %s", IDEM_STATE_DIR,
		    strerror(errno));
		close(dir_fd);
		return -1;
	}
	close(dir_fd);
	return 0;
}
