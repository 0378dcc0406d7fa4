/* SPDX-License-Identifier: ISC */
/*
 * pg_backend.c: the PostgreSQL backend's table of operations.  Its reads
 * are pg_read.c's, its effects pg_effect.c's; its creations (cluster.c)
 * are still called by name (issue #28, G2), and its start-up by main.c
 * (G4).
 */
#include <string.h>

#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"

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
	/* create: cluster.c (G2). */
	.effect_begin = pg_effect_begin,
	.effect_claim = pg_effect_claim,
	.effect_record = pg_effect_record,
	.release = pg_effect_release,
	.get = pg_get,
	.diagnose = pg_diagnose,
	.history = pg_history,
};
