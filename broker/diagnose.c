/* SPDX-License-Identifier: ISC */
/*
 * diagnose.c: the diagnose op.  Every unfinished submission and effect,
 * with what the workspace says of its file, and the counts per state.
 * Read-only: it never deletes, repairs or recreates anything.  The rows
 * are the backend's (d->be->diagnose, asynchronous: backend.h), given
 * one by one on the loop; their JSON is made here, once, for every
 * backend, and the reply made and sent only from the read's done.
 */
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "idemd.h"
#include "backend.h"

#define DIAGNOSE_DEFAULT_STALE_AFTER_MS	30000

static const char *const diagnose_keys[] = {
	"op", "id", "stale_after_ms", NULL
};

/*
 * What the workspace says of an unfinished submission's file, into j:
 * task_exists, request_digest_matches, file_digest_matches (SPEC.md,
 * diagnose), for every backend's rows.
 */
static void
diagnose_file_facts(struct idemd *d, const struct subtab_entry *e,
    const char *task_id, json_t *j)
{
	struct taskfile_facts	 facts;
	char			 found_path[IDEM_MAX_TASK_PATH_BYTES];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	char			*cause = NULL;
	int			 found, inspected = 0;

	found = taskfile_find(d->root_fd, task_id, found_path,
	    sizeof found_path);
	if (found == 1) {
		if (taskfile_inspect(d->root_fd, found_path, &facts,
		    &cause) == 0)
			inspected = 1;
		else {
			log_warnx("diagnose: %s", cause);
			free(cause);
		}
	}
	json_object_set_new(j, "task_exists", found < 0 ? json_null() :
	    json_boolean(found == 1));
	digest_to_hex(e->request_digest, hex);
	if (!inspected)
		json_object_set_new(j, "request_digest_matches", json_null());
	else
		json_object_set_new(j, "request_digest_matches", json_boolean(
		    facts.has_request_digest &&
		    strcmp(facts.request_digest, hex) == 0));
	if (e->state == SUBTAB_RESERVED)
		json_object_set_new(j, "file_digest_matches", json_null());
	else
		json_object_set_new(j, "file_digest_matches", json_boolean(
		    inspected && memcmp(facts.file_digest, e->file_digest,
		    IDEM_SHA256_BYTES) == 0));
}

/*
 * Facts about one unfinished submission: read-only.  A shared store's
 * row (has_owner) in the cluster's layout (doc/cluster.md): the request
 * digest, the report's task, the age after the path, who holds it.
 */
static json_t *
diagnose_entry(struct idemd *d, const struct backend_row *row, int64_t now,
    int64_t stale_after_ms)
{
	const struct subtab_entry *e = &row->entry;
	char			 task_id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	int64_t			 age = now - e->updated_at_ms;
	json_t			*j = json_object();

	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, task_id,
	    sizeof task_id);
	taskfile_format_path(e->kind, task_id, path, sizeof path);
	json_object_set_new(j, "client_submission_id", json_string(row->key));
	json_object_set_new(j, "state",
	    json_string(subtab_state_name(e->state)));
	if (!row->has_owner)
		json_object_set_new(j, "age_ms",
		    json_integer(age < 0 ? 0 : age));
	else {
		digest_to_hex(e->request_digest, hex);
		json_object_set_new(j, "request_digest", json_string(hex));
	}
	json_object_set_new(j, "task_id", json_string(task_id));
	json_object_set_new(j, "task_path", json_string(path));
	if (row->has_owner) {
		if (e->kind == SUBTAB_KIND_REPORT)
			json_object_set_new(j, "for_task_id",
			    json_string(row->scope));
		json_object_set_new(j, "age_ms",
		    json_integer(age < 0 ? 0 : age));
	}
	diagnose_file_facts(d, e, task_id, j);
	if (row->in_flight >= 0)
		json_object_set_new(j, "in_flight",
		    json_boolean(row->in_flight));
	json_object_set_new(j, "stalled", json_boolean(age > stale_after_ms));
	if (row->has_owner) {
		json_object_set_new(j, "epoch", json_integer(row->epoch));
		json_object_set_new(j, "lease_owner", json_string(row->owner));
		json_object_set_new(j, "lease_ms_left",
		    json_integer(row->lease_ms_left));
		json_object_set_new(j, "owner_alive",
		    json_boolean(row->owner_alive));
	}
	return j;
}

/*
 * One effect's diagnose entry x (NULL: skipped): an unknown outcome
 * (stored, or a lapsed lease: counted in *lapsed) to first, as an
 * operator must settle it; any other to later.
 */
static void
diagnose_effect_place(json_t *x, const struct subtab_entry *e, int64_t now,
    int64_t stale_after_ms, json_t *first, json_t *later, uint32_t *lapsed)
{
	if (x == NULL)
		return;
	/*
	 * updated_at is the last begin, transition or extension: a holder
	 * that keeps extending its lease is not stalled.
	 */
	json_object_set_new(x, "stalled", json_boolean(now - e->updated_at_ms >
	    stale_after_ms));
	if (strcmp(effect_state_name(e, now), "outcome_unknown") == 0) {
		*lapsed += e->state == SUBTAB_RESERVED;
		json_array_append_new(first, x);
	} else
		json_array_append_new(later, x);
}

/* effect_counts: a lapsed lease counts as outcome_unknown. */
static json_t *
diagnose_effect_counts(const uint32_t counts[SUBTAB_STATE_COUNT],
    uint32_t lapsed)
{
	json_t	*j = json_object();

	/*
	 * On the PostgreSQL store the counts and the lapsed leases are two
	 * reads: a lease settled between them is not counted twice.
	 */
	if (lapsed > counts[SUBTAB_RESERVED])
		lapsed = counts[SUBTAB_RESERVED];
	json_object_set_new(j, "reserved",
	    json_integer(counts[SUBTAB_RESERVED] - lapsed));
	json_object_set_new(j, "outcome_unknown",
	    json_integer(counts[SUBTAB_OUTCOME_UNKNOWN] + lapsed));
	json_object_set_new(j, "released",
	    json_integer(counts[SUBTAB_RELEASED]));
	json_object_set_new(j, "committed",
	    json_integer(counts[SUBTAB_COMMITTED]));
	return j;
}

/*
 * Effects whose outcome is unknown first: they are what an operator
 * must settle (effect_resolve); then the tasks, then the other
 * unfinished effects (live leases, released).  The backend gives the
 * effects first.
 */
struct diagnose_walk {
	struct idemd	*d;
	json_t		*entries, *later;
	int64_t		 now, stale_after_ms;
	uint32_t	 lapsed;
};
/* The request's state (p->op): the read's, then the walk. */
struct diagnose_read {
	struct backend_read	 read;		/* first: p->op */
	struct diagnose_walk	 dw;
};

/*
 * The time the rows are judged at: taken when the first of them (or
 * the read's end) comes back, not when the request came in, so that a
 * read that waited for a store thread does not show ages and leases
 * from before it was made.
 */
static int64_t
diagnose_now(struct diagnose_walk *dw)
{
	if (dw->now == 0)
		dw->now = shm_now_ms();
	return dw->now;
}

static int
diagnose_row(const struct backend_row *row, void *arg)
{
	struct diagnose_walk	*dw = arg;
	struct subtab_entry	 shown;
	int64_t			 now = diagnose_now(dw);
	json_t			*x;

	if (row->entry.kind == SUBTAB_KIND_EFFECT) {
		x = effect_row_json(dw->d, row, now, &shown);
		diagnose_effect_place(x, &shown, now, dw->stale_after_ms,
		    dw->entries, dw->later, &dw->lapsed);
	} else
		json_array_append_new(dw->entries, diagnose_entry(dw->d, row,
		    now, dw->stale_after_ms));
	return 0;
}

/* The arrays a read that never gave them to a reply leaves. */
static void
diagnose_read_free(void *arg)
{
	struct diagnose_read	*dr = arg;

	if (dr == NULL)
		return;
	json_decref(dr->dw.entries);
	json_decref(dr->dw.later);
	free(dr);
}

/* The read's outcome, on the loop: the reply. */
static void
diagnose_done(struct pending *p, const struct backend_read_outcome *out)
{
	struct diagnose_read	*dr = p->op;
	struct diagnose_walk	*dw = &dr->dw;
	json_t			*reply, *j, *entries;

	if (out->result == BACKEND_READ_FAILED) {
		ops_reply_backend_error(p, &out->err);
		return;
	}
	entries = dw->entries;
	dw->entries = NULL;
	json_array_extend(entries, dw->later);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "entries", entries);
	j = json_object();
	json_object_set_new(j, "reserved",
	    json_integer(out->tasks[SUBTAB_RESERVED]));
	json_object_set_new(j, "task_created",
	    json_integer(out->tasks[SUBTAB_TASK_CREATED]));
	json_object_set_new(j, "committed",
	    json_integer(out->tasks[SUBTAB_COMMITTED]));
	json_object_set_new(reply, "counts", j);
	json_object_set_new(reply, "effect_counts",
	    diagnose_effect_counts(out->effects, dw->lapsed));
	pending_reply(p, reply);
}

void
op_diagnose(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct diagnose_read	*dr;
	struct pending		*p;
	int64_t			 stale_after_ms = DIAGNOSE_DEFAULT_STALE_AFTER_MS;
	json_t			*v;

	if (request_known_keys(request, "", diagnose_keys, &err) != 0) {
		reply_invalid(c, id, &err);
		return;
	}
	v = json_object_get(request, "stale_after_ms");
	if (v != NULL) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			request_error_set(&err, WIRE_INVALID_REQUEST,
			    "stale_after_ms", "stale_after_ms must be a "
			    "non-negative integer");
			reply_invalid(c, id, &err);
			return;
		}
		stale_after_ms = json_integer_value(v);
	}
	if ((p = ops_read_pending_new(c, id, sizeof *dr,
	    diagnose_read_free)) == NULL)
		return;
	dr = p->op;
	dr->dw.d = d;
	dr->dw.entries = json_array();
	dr->dw.later = json_array();
	dr->dw.stale_after_ms = stale_after_ms;
	dr->read.each = diagnose_row;
	dr->read.arg = &dr->dw;
	d->be->diagnose(p, diagnose_done);
}
