/* SPDX-License-Identifier: ISC */
/*
 * local_backend.c: the local backend's table of operations, its
 * start-up (this broker's names in .idem/, the refusal of a workspace a
 * PostgreSQL store took over), and its reads: get_submission's entry
 * (the table, then the index), diagnose's unfinished entries (a
 * snapshot of the table).  Its creations are local_create.c's, its
 * effects local_effect.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "local.h"
#include "workspace_id.h"

/*
 * The table, then the index (cold->form 0: found in the table).  An
 * eviction between the two looks is seen by its count: look again.
 */
static int
lookup_history(struct idemd *d, const char *key, size_t n,
    struct subtab_entry *e, struct index_entry *cold)
{
	static uint8_t	 result[IDEM_MAX_EFFECT_RESULT_BYTES];
	uint64_t	 evictions;
	int		 rc, tries;

	cold->form = 0;
	for (tries = 0; tries < 2; tries++) {
		evictions = atomic_load(&d->seg.header->evictions);
		if ((rc = subtab_lookup(&d->seg, key, n, e, NULL)) != 0)
			return rc;
		if ((rc = history_find(d, key, n, cold, result)) != 0) {
			if (rc == 1)
				*e = cold->record.entry;
			return rc;
		}
		if (atomic_load(&d->seg.header->evictions) == evictions)
			return 0;
	}
	return 0;
}

static int
local_matches(const char *arg)
{
	return arg == NULL;
}

/* This broker's own state is .idem/ (no --host-id: one broker). */
static int
local_configure(struct idemd *d, const char *arg, char **cause)
{
	if (d->host_id != NULL) {
		if (asprintf(cause,
		    "--host-id is for --store postgresql://...") == -1)
			*cause = NULL;
		return -1;
	}
	d->state_dir = strdup(IDEM_STATE_DIR);
	d->lock_name = strdup(IDEM_LOCK_NAME);
	d->journal_name = strdup(IDEM_JOURNAL_DIR);
	d->socket_name = strdup(IDEM_SOCKET_NAME);
	if (d->state_dir == NULL || d->lock_name == NULL ||
	    d->journal_name == NULL || d->socket_name == NULL)
		fatal("strdup");
	return 0;
}

/* The root is ours (locked): refuse one a PostgreSQL store took over. */
static int
local_locked(struct idemd *d, char **cause)
{
	if (workspace_imported(d->root_fd) == 0)
		return 0;
	if (asprintf(cause,
	    "%s: its history was imported into a PostgreSQL store "
	    "(%s): serve it with --store URI; a local idemd would "
	    "answer from a history the store no longer writes",
	    d->root_real, WORKSPACE_IMPORTED_NAME) == -1)
		*cause = NULL;
	return -1;
}

static int
local_get(struct idemd *d, enum subtab_kind kind, const char *key,
    size_t key_length, struct backend_row *row, struct backend_error *err)
{
	/* The event loop's thread only (as history_find's scratch). */
	static uint8_t		 bytes[IDEM_MAX_EFFECT_RESULT_BYTES];
	struct index_entry	 cold;
	struct subtab_entry	*e = &row->entry;
	int			 rc;

	memset(row, 0, sizeof *row);
	row->key = key;
	row->key_length = key_length;
	row->scope = "";
	row->in_flight = 0;
	row->owner_alive = -1;
	rc = lookup_history(d, key, key_length, e, &cold);
	if (rc < 0)
		return backend_fail(err, WIRE_INTERNAL, 1,
		    "the submission table is unusable");
	if (rc == 0 || e->kind != kind)
		return 0;
	row->pruned = cold.form == INDEX_TOMBSTONE;
	if (kind == SUBTAB_KIND_EFFECT && cold.form != 0) {
		/* From the index: committed, with the result it keeps. */
		row->from_index = 1;
		row->result = cold.record.result;
	} else if (kind == SUBTAB_KIND_EFFECT &&
	    e->state == SUBTAB_COMMITTED && e->result_length <= sizeof bytes)
		/* From the table: the arena, or the index once reused. */
		row->result = local_effect_result_bytes(d, key, key_length, e,
		    bytes, &row->result_pruned);
	if (kind == SUBTAB_KIND_TASK) {
		/* A tombstone of an earlier version kept no times. */
		if (e->reserved_at_ms == 0)
			e->reserved_at_ms = e->created_at_ms;
		if (e->updated_at_ms == 0)
			e->updated_at_ms = e->created_at_ms;
	}
	return 1;
}

static void
local_row(struct backend_row *row, const struct subtab_row *r)
{
	memset(row, 0, sizeof *row);
	row->key = r->key;
	row->key_length = r->entry.key_length;
	row->scope = "";
	row->entry = r->entry;
	row->in_flight = r->claimed;
	row->owner_alive = -1;
}

static int
local_diagnose(struct idemd *d, backend_row_fn each, void *arg,
    uint32_t counts[SUBTAB_STATE_COUNT],
    uint32_t effect_counts[SUBTAB_STATE_COUNT], struct backend_error *err)
{
	struct subtab_row	*rows, *effects;
	struct backend_row	 row;
	size_t			 count, effect_count, i;

	if (subtab_snapshot(&d->seg, SUBTAB_KIND_TASK, 1, &rows, &count,
	    counts) != 0)
		return backend_fail(err, WIRE_INTERNAL, 1,
		    "cannot read the submission table: %s", strerror(errno));
	if (subtab_snapshot(&d->seg, SUBTAB_KIND_EFFECT, 1, &effects,
	    &effect_count, effect_counts) != 0) {
		free(rows);
		return backend_fail(err, WIRE_INTERNAL, 1,
		    "cannot read the submission table: %s", strerror(errno));
	}
	for (i = 0; i < effect_count; i++) {
		local_row(&row, &effects[i]);
		each(&row, arg);
	}
	for (i = 0; i < count; i++) {
		local_row(&row, &rows[i]);
		each(&row, arg);
	}
	free(rows);
	free(effects);
	return 0;
}

int
local_needs_journal(struct idemd *d, const char *key, size_t key_length,
    uint8_t schema, const uint8_t digest[IDEM_SHA256_BYTES])
{
	struct subtab_entry	 known;
	struct index_entry	 old;

	if (subtab_lookup(&d->seg, key, key_length, &known, NULL) != 1) {
		/* Only in the index: committed, answered without a record. */
		if (history_find(d, key, key_length, &old, NULL) != 1)
			return 1;
		known = old.record.entry;
	}
	if (known.schema != schema || memcmp(known.request_digest, digest,
	    IDEM_SHA256_BYTES) != 0)
		return 0;
	return known.state != SUBTAB_COMMITTED;
}

void
local_release_claim(struct pending *p, int *claimed, uint32_t slot,
    const struct subtab_claim *claim)
{
	if (!*claimed)
		return;
	*claimed = 0;
	if (subtab_release(&p->worker->d->seg, slot, claim))
		worker_wake_all(p->worker);
}

void
local_after_durable(struct pending *p, uint64_t end, uint64_t epoch,
    pending_resume_fn next)
{
	struct shm_header	*h = p->worker->d->seg.header;
	int			 durable;

	durable = end == SUBTAB_NOT_JOURNALED ? 1 :
	    handoff_is_durable(h, end, epoch);
	if (durable == 0) {
		pending_wait_durable(p, end, epoch, next);
		return;
	}
	/* Lost with the journal: storage_unavailable, never an answer. */
	p->journal_failed = durable < 0;
	next(p);
}

int
local_fail_reopening(struct backend_error *err)
{
	return backend_fail(err, WIRE_STORAGE_UNAVAILABLE, 1,
	    "the journal failed; writes resume when the broker has reopened "
	    "and verified it");
}

int
local_journal_failed(struct pending *p, struct backend_error *err)
{
	if (!p->journal_failed)
		return 0;
	backend_fail(err, WIRE_STORAGE_UNAVAILABLE, 1,
	    "the journal could not be made durable");
	return 1;
}

const struct backend local_backend = {
	.name = "local",
	.flags = BACKEND_SWEEPS_TEMPORARIES,
	.create_state_size = sizeof(struct local_create),
	.effect_state_size = sizeof(struct local_effect),
	.matches = local_matches,
	.configure = local_configure,
	.locked = local_locked,
	.create = local_create,
	.effect_begin = local_effect_begin,
	.effect_claim = local_effect_claim,
	.effect_record = local_effect_record,
	.effect_result = local_effect_result,
	.release = local_effect_release,
	.get = local_get,
	.diagnose = local_diagnose,
	.history = NULL,	/* stats has no "store" member */
};
