/* SPDX-License-Identifier: ISC */
/*
 * local_read.c: the local backend's reads: get_submission's entry (the
 * table, then the index), diagnose's unfinished entries (a snapshot of
 * the table).  The segment and the index are this process's memory: a
 * read never waits, so each gives its outcome to done before it
 * returns (backend.h), the row in this file's scratch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idemd.h"
#include "backend.h"
#include "local.h"

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

/* The entry under key: 1 and *row, 0 none, -1 and *err. */
static int
local_lookup(struct idemd *d, enum subtab_kind kind, const char *key,
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

void
local_get(struct pending *p, backend_read_done_fn done)
{
	struct backend_read		*r = p->op;
	struct backend_read_outcome	 out;
	struct backend_row		 row;
	int				 rc;

	memset(&out, 0, sizeof out);
	rc = local_lookup(p->worker->d, r->kind, r->key, r->key_length, &row,
	    &out.err);
	out.result = rc < 0 ? BACKEND_READ_FAILED : rc == 0 ?
	    BACKEND_READ_NONE : BACKEND_READ_FOUND;
	out.row = rc == 1 ? &row : NULL;
	done(p, &out);
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

/* Every unfinished entry to each; the counts per state: 0, or -1. */
static int
local_walk(struct idemd *d, backend_row_fn each, void *arg,
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

void
local_diagnose(struct pending *p, backend_read_done_fn done)
{
	struct backend_read		*r = p->op;
	struct backend_read_outcome	 out;

	memset(&out, 0, sizeof out);
	out.result = local_walk(p->worker->d, r->each, r->arg, out.tasks,
	    out.effects, &out.err) != 0 ? BACKEND_READ_FAILED :
	    BACKEND_READ_FOUND;
	done(p, &out);
}
