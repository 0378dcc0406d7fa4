/* SPDX-License-Identifier: ISC */
/*
 * local_backend.c: the local backend's table of operations, its
 * start-up (this broker's names in .idem/, the refusal of a workspace a
 * PostgreSQL store took over), and the steps its creations and effects
 * share (the journal's waits and failures, a claim's release).  Its
 * reads are local_read.c's, its creations local_create.c's, its effects
 * local_effect.c's.
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
	.flags = BACKEND_SWEEPS_TEMPORARIES | BACKEND_EFFECTS_IN_TABLE,
	.create_state_size = sizeof(struct local_create),
	.effect_state_size = sizeof(struct local_effect),
	.read_state_size = 0,	/* its reads keep nothing */
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
