/* SPDX-License-Identifier: ISC */
/*
 * history.c: the committed history beyond the table, as the broker's
 * processes see it.  Each process (master, every worker) opens the index
 * (broker/store/index.c) itself; a lookup that misses the table comes
 * here.  The index only ever holds committed entries, so what is found
 * here is answered as a committed slot would be: reused, or conflict.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"

int
history_open(struct idemd *d, int flags, char **cause)
{
	char	dir[PATH_MAX];

	if (idemd_index_dir(d, dir, sizeof dir) != 0) {
		*cause = strdup("the index's path is too long");
		return -1;
	}
	if (index_open(&d->index, dir, flags, cause) != 0)
		return -1;
	d->index_ready = 1;
	return 0;
}

int
history_find(struct idemd *d, const char *key, size_t key_length,
    struct index_entry *out, uint8_t *result)
{
	static uint8_t	 scratch[IDEM_MAX_EFFECT_RESULT_BYTES];
	char		*cause = NULL;
	int		 rc, saved;

	if (!d->index_ready)
		return 0;
	/* The event loop's thread only: scratch is its. */
	rc = index_get(&d->index, key, key_length, out,
	    result != NULL ? result : scratch, &cause);
	if (rc < 0) {
		saved = errno;
		log_warnx("%s", cause != NULL ? cause : "index: lookup failed");
		free(cause);
		errno = saved;
	}
	return rc;
}
