/* SPDX-License-Identifier: ISC */
/*
 * pg_backend.c: the PostgreSQL backend's table of operations, its
 * start-up (--host-id and this broker's names in .idem/hosts/<host-id>/,
 * the check of the store before the root's lock) and the end of a
 * worker's store threads.  Its reads are pg_read.c's, its creations
 * pg_create.c's, its effects pg_effect.c's, each on store threads of
 * their own (pg_pool.c): the loop has no connection to the store.  Its
 * cache of committed effects is pg_effect_cache.c's, on the loop.
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
#include "pg_create.h"
#include "pg_group.h"
#include "storeuri.h"
#include "workspace_id.h"

/*
 * --host-id, unique among the brokers of the workspace, and this
 * broker's own state in .idem/hosts/<host-id>/ (doc/cluster.md).
 */
static int
pg_configure(struct idemd *d, const char *arg, char **cause)
{
	if (d->host_id == NULL) {
		if (asprintf(cause,
		    "--store postgresql://... needs --host-id NAME, unique "
		    "among the brokers of the workspace") == -1)
			*cause = NULL;
		return -1;
	}
	if (!store_host_id_valid(d->host_id)) {
		if (asprintf(cause,
		    "--host-id: 1 to %d characters of A-Z a-z 0-9 . _ -",
		    IDEM_STORE_MAX_HOST_ID_BYTES) == -1)
			*cause = NULL;
		return -1;
	}
	if (asprintf(&d->state_dir, "%s/hosts/%s", IDEM_STATE_DIR,
	    d->host_id) == -1 ||
	    asprintf(&d->lock_name, "%s/idemd.lock", d->state_dir) == -1 ||
	    asprintf(&d->journal_name, "%s/journal", d->state_dir) == -1 ||
	    asprintf(&d->socket_name, "%s/idemd.sock", d->state_dir) == -1)
		fatal("asprintf");
	d->segment_suffix = d->state_dir;	/* a segment per host */
	return 0;
}

/* The store, its schema and the workspace's id, before the root's lock. */
static int
pg_preflight(struct idemd *d, char **cause)
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
	rc = pgstore_open(&st, d->store_arg, cause);
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
	return arg != NULL && storeuri_is_postgresql(arg);
}

/* The worker's loop has ended: its store threads too. */
static void
pg_worker_stop(struct worker *w)
{
	pg_pool_stop();
	pg_group_report();
	pg_create_report();
}

const struct backend pg_backend = {
	.name = "postgresql",
	.flags = BACKEND_ONE_ACCEPT_A_WAKEUP | BACKEND_CLAIMS_READ_WATCH |
	    BACKEND_EFFECTS_IN_TABLE,
	.create_state_size = sizeof(struct pg_create),
	.effect_state_size = sizeof(struct pg_effect),
	.read_state_size = sizeof(struct pg_read),
	.matches = pg_matches,
	.configure = pg_configure,
	.preflight = pg_preflight,
	.worker_stop = pg_worker_stop,
	.create = pg_create,
	.effect_begin = pg_effect_begin,
	.effect_claim = pg_effect_claim,
	.effect_record = pg_effect_record,
	.effect_result = pg_effect_result,
	.release = pg_effect_release,
	.get = pg_get,
	.diagnose = pg_diagnose,
	.history = pg_history,
};
