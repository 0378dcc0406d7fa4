/* SPDX-License-Identifier: ISC */
/*
 * pg_read.c: the PostgreSQL backend's reads, the whole workspace's:
 * get_submission's row, diagnose's unfinished rows, stats' history
 * (out of cluster.c and cluster_effect.c).  Each read blocks the loop,
 * as it always has, on the loop's own connection (pg_loop_store).  The
 * op layer builds the JSON (ops.c, diagnose.c); a failed read is logged
 * here, once, and answered there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg.h"
#include "pg_backend.h"

_Static_assert(sizeof ((struct backend_row *)0)->owner >=
    sizeof ((struct pgstore_row *)0)->owner, "backend_row's owner holds pg's");

/*
 * PostgreSQL failed for a read of op (what: its key): logged once, then
 * storage_unavailable (retryable); cause is freed.
 */
static int
pg_unavailable(struct backend_error *err, const char *op, const char *what,
    char *cause)
{
	const char	*why = cause != NULL ? cause : strerror(errno);

	log_warnx("%s %s: %s", op, what, why);
	backend_fail(err, WIRE_STORAGE_UNAVAILABLE, 1, "%s", why);
	free(cause);
	return -1;
}

/*
 * A row as the op layer shows it: the owner's facts with it; an effect
 * (never in flight on this broker's table: in_flight 0) with its
 * receipt's bytes, a task with the owner's liveness and no in_flight.
 */
static void
pg_row(struct backend_row *out, const char *key, size_t key_length,
    const char *scope, const struct pgstore_row *row)
{
	memset(out, 0, sizeof *out);
	out->key = key;
	out->key_length = key_length;
	out->scope = scope;
	out->entry = row->entry;
	out->pruned = row->pruned;
	out->has_owner = 1;
	out->epoch = row->epoch;
	snprintf(out->owner, sizeof out->owner, "%s", row->owner);
	out->lease_ms_left = row->lease_ms_left;
	if (row->entry.kind == SUBTAB_KIND_EFFECT) {
		out->result = (const uint8_t *)row->receipt;
		out->in_flight = 0;
		out->owner_alive = -1;
	} else {
		out->in_flight = -1;
		out->owner_alive = row->owner_alive;
	}
}

int
pg_get(struct idemd *d, enum subtab_kind kind, const char *key,
    size_t key_length, struct backend_row *out, struct backend_error *err)
{
	/* out->result points into it: kept until the next read. */
	static struct pgstore_row row;
	struct pgstore		*st;
	struct pgstore_key	 k;
	char			 ekind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char			 sid[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char			*cause = NULL;
	int			 rc = -1;

	pgstore_row_clear(&row);
	if (kind == SUBTAB_KIND_TASK) {
		k.kind = SUBTAB_KIND_TASK;
		k.scope = "";
		k.id = key;
		if ((st = pg_loop_store(d, &cause)) == NULL ||
		    (rc = pgstore_read(st, &k, &row, &cause)) < 0)
			return pg_unavailable(err, "get_submission", key,
			    cause);
	} else {
		sid[0] = ekind[0] = '\0';
		if (effect_key_split(key, key_length, ekind, sizeof ekind, sid,
		    sizeof sid) == 0 && (st = pg_loop_store(d, &cause)) !=
		    NULL) {
			k.kind = SUBTAB_KIND_EFFECT;
			k.scope = ekind;
			k.id = sid;
			rc = pgstore_effect_read(st, &k, &row, &cause);
		}
		if (rc < 0)
			return pg_unavailable(err, "get_submission", sid,
			    cause);
	}
	if (rc == 0)
		return 0;
	pg_row(out, key, key_length, "", &row);
	return 1;
}

struct pg_walk {
	backend_row_fn	 each;
	void		*arg;
};

static int
pg_diagnose_effect(const char *scope, const char *id,
    const struct pgstore_row *found, void *arg)
{
	struct pg_walk		*walk = arg;
	struct backend_row	 row;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 n;

	n = (size_t)snprintf(key, sizeof key, "%s%c%s", scope,
	    SUBTAB_EFFECT_SEPARATOR, id);
	if (n >= sizeof key)
		return 0;	/* a row idem did not write */
	pg_row(&row, key, n, "", found);
	row.result = NULL;	/* not committed: no result */
	walk->each(&row, walk->arg);
	return 0;
}

/* One unfinished row, SPEC's facts and who holds it (doc/cluster.md). */
static int
pg_diagnose_task(const char *scope, const char *id,
    const struct pgstore_row *found, void *arg)
{
	struct pg_walk		*walk = arg;
	struct backend_row	 row;

	pg_row(&row, id, strlen(id), scope, found);
	walk->each(&row, walk->arg);
	return 0;
}

int
pg_diagnose(struct idemd *d, backend_row_fn each, void *arg,
    uint32_t counts[SUBTAB_STATE_COUNT],
    uint32_t effect_counts[SUBTAB_STATE_COUNT], struct backend_error *err)
{
	struct pg_walk	 walk = { each, arg };
	struct pgstore	*st;
	char		*cause = NULL;

	if ((st = pg_loop_store(d, &cause)) == NULL ||
	    pgstore_effects_unfinished(st, pg_diagnose_effect, &walk,
	    &cause) != 0 ||
	    pgstore_counts(st, SUBTAB_KIND_EFFECT, effect_counts,
	    &cause) != 0 ||
	    pgstore_unfinished(st, pg_diagnose_task, &walk, &cause) != 0 ||
	    pgstore_counts(st, SUBTAB_KIND_TASK, counts, &cause) != 0)
		return pg_unavailable(err, "diagnose", "", cause);
	return 0;
}

/* ---- stats: the workspace's history in PostgreSQL ------------------- */

int
pg_history(struct idemd *d, struct backend_history *out)
{
	struct pgstore_history	 h;
	struct pgstore		*st;
	char			*cause = NULL;

	if ((st = pg_loop_store(d, &cause)) == NULL ||
	    pgstore_history_counts(st, &h, &cause) != 0) {
		log_warnx("stats: the store's counts: %s", cause != NULL ?
		    cause : strerror(errno));
		free(cause);
		return -1;
	}
	out->submissions = h.submissions;
	out->committed = h.committed;
	out->in_flight = h.in_flight;
	out->tombstones = h.tombstones;
	out->effects = h.effects;
	return 0;
}
