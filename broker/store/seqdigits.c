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
	char	line[2] = { (char)('0' + digits), '\n' };

	return durable_state_file(root_fd, SEQDIGITS_NAME, line, sizeof line,
	    1, cause);
}
