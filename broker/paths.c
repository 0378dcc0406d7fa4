/* SPDX-License-Identifier: ISC */
/*
 * paths.c: where this broker's own files are, below its root: the
 * journal, the history index, the name of its shared-memory segment,
 * and the highest number a day's files already took.  The names
 * (state_dir, journal_name, segment_suffix) are the store's choice, set
 * once at start-up (the backend's configure): .idem/ for the local store,
 * .idem/hosts/<host-id>/ beside other brokers (doc/cluster.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idemd.h"

/*
 * This broker's journal directory, ROOT/journal_name: the store's
 * (store_journal_dir: .idem/journal), or .idem/hosts/<host-id>/journal
 * beside other brokers.  0, or -1 if too long.
 */
int
paths_journal_dir(const struct idemd *d, char *out, size_t out_size)
{
	if ((size_t)snprintf(out, out_size, "%s/%s", d->root_real,
	    d->journal_name) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int
paths_index_dir(const struct idemd *d, char *out, size_t out_size)
{
	if ((size_t)snprintf(out, out_size, "%s/%s/index", d->root_real,
	    d->state_dir) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/*
 * The shared-memory segment's name: per root, and per host in a cluster
 * (ROOT/segment_suffix; the local store has none).
 */
int
paths_segment_key(struct idemd *d)
{
	free(d->segment_key);
	if (d->segment_suffix == NULL)
		d->segment_key = strdup(d->root_real);
	else if (asprintf(&d->segment_key, "%s/%s", d->root_real,
	    d->segment_suffix) == -1)
		d->segment_key = NULL;
	return d->segment_key != NULL ? 0 : -1;
}

int
paths_scan_max_seq(enum subtab_kind kind, uint32_t date, uint32_t *max_seq,
    void *arg)
{
	struct idemd	*d = arg;

	return taskfile_scan_max_seq(d->root_fd, kind, date, max_seq);
}
