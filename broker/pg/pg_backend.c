/* SPDX-License-Identifier: ISC */
/*
 * pg_backend.c: the PostgreSQL backend's table of operations, the
 * loop's own connection to the store (cluster_store) and the check of
 * the store at start-up (cluster_check).  Its reads are pg_read.c's,
 * its creations pg_create.c's, its effects pg_effect.c's; its start-up
 * is still main.c's (issue #28, G4).
 */
#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"
#include "workspace_id.h"

/* This worker's loop's connection (effects, reads, diagnose, stats). */
static struct pgstore	cl_store;
static int		cl_open;

/* The loop's store, opened at its first use. */
static int
cl_store_open(struct idemd *d, char **cause)
{
	if (cl_open)
		return 0;
	if (pg_store_init(d, &cl_store, cause) != 0)
		return -1;
	cl_open = 1;
	return 0;
}

struct pgstore *
cluster_store(struct idemd *d, char **cause)
{
	*cause = NULL;
	return cl_store_open(d, cause) == 0 ? &cl_store : NULL;
}

int
cluster_check(struct idemd *d, char **cause)
{
	struct pgstore	st;
	char		path[PATH_MAX];
	int		rc;

	*cause = NULL;
	if (nofollow_mkdir(d->root_fd, IDEM_STATE_DIR, 0755) != 0 &&
	    errno != EEXIST)
		goto fail;
	snprintf(path, sizeof path, "%s/hosts", IDEM_STATE_DIR);
	if (nofollow_mkdir(d->root_fd, path, 0755) != 0 && errno != EEXIST)
		goto fail;
	if (nofollow_mkdir(d->root_fd, d->state_dir, 0755) != 0 &&
	    errno != EEXIST)
		goto fail;
	/*
	 * A workspace a local idemd served keeps its history in its journal
	 * until idemctl store import moves it: served from the store before
	 * that, a retry of an id only the journal knows would be executed
	 * again (doc/cluster.md, "Importing a local history").
	 */
	if (store_has_local_history(d->root_fd) != 0 &&
	    workspace_imported(d->root_fd) != 1) {
		asprintf(cause, "%s has a local history (%s) that is not in "
		    "the store: stop its local idemd and run idemctl store "
		    "import --root %s --store URI first", d->root_real,
		    IDEM_JOURNAL_DIR, d->root_real);
		return -1;
	}
	memset(&st, 0, sizeof st);
	if (workspace_id_get(d->root_fd, 1, st.workspace, cause) != 1)
		return -1;
	rc = pgstore_open(&st, d->store_uri, cause);
	pgstore_close(&st);
	if (rc == 0)
		log_info("cluster: workspace %s, host %s, lease %d ms",
		    st.workspace, d->host_id, d->lease_ms);
	return rc;
fail:
	asprintf(cause, "%s/%s: %s", d->root_real, d->state_dir,
	    strerror(errno));
	return -1;
}


static int
pg_matches(const char *arg)
{
	return arg != NULL && (strncmp(arg, "postgresql://", 13) == 0 ||
	    strncmp(arg, "postgres://", 11) == 0);
}

const struct backend pg_backend = {
	.name = "postgresql",
	.flags = BACKEND_SPREADS_CONNECTIONS,
	.effect_state_size = sizeof(struct pg_effect),
	.matches = pg_matches,
	/* configure, preflight (cluster_check): main.c (G4). */
	/* worker_stop (cluster_pool_stop): worker.c (G4). */
	.create = pg_create,
	.effect_begin = pg_effect_begin,
	.effect_claim = pg_effect_claim,
	.effect_record = pg_effect_record,
	.release = pg_effect_release,
	.get = pg_get,
	.diagnose = pg_diagnose,
	.history = pg_history,
};
