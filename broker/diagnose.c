/* SPDX-License-Identifier: ISC */
/*
 * diagnose.c: the diagnose op.  Every unfinished submission and effect,
 * with what the workspace says of its file, and the counts per state.
 * Read-only: it never deletes, repairs or recreates anything.  The
 * helpers that place, count and inspect an entry are shared with the
 * PostgreSQL store's diagnose (cluster.c, cluster_effect.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "idemd.h"

#define DIAGNOSE_DEFAULT_STALE_AFTER_MS	30000

static const char *const diagnose_keys[] = {
	"op", "id", "stale_after_ms", NULL
};

/*
 * What the workspace says of an unfinished submission's file, into j:
 * task_exists, request_digest_matches, file_digest_matches (SPEC.md,
 * diagnose).  Shared by the local table's and the cluster's diagnose.
 */
void
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

/* Facts about one unfinished submission: read-only. */
static json_t *
diagnose_entry(struct idemd *d, const struct subtab_row *row, int64_t now,
    int64_t stale_after_ms)
{
	const struct subtab_entry *e = &row->entry;
	char			 task_id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	int64_t			 age = now - e->updated_at_ms;
	json_t			*j = json_object();

	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, task_id,
	    sizeof task_id);
	taskfile_format_path(e->kind, task_id, path, sizeof path);
	json_object_set_new(j, "client_submission_id", json_string(row->key));
	json_object_set_new(j, "state",
	    json_string(subtab_state_name(e->state)));
	json_object_set_new(j, "age_ms", json_integer(age < 0 ? 0 : age));
	json_object_set_new(j, "task_id", json_string(task_id));
	json_object_set_new(j, "task_path", json_string(path));
	diagnose_file_facts(d, e, task_id, j);
	json_object_set_new(j, "in_flight", json_boolean(row->claimed));
	json_object_set_new(j, "stalled", json_boolean(age > stale_after_ms));
	return j;
}

/*
 * One effect's diagnose entry x (NULL: skipped): an unknown outcome
 * (stored, or a lapsed lease: counted in *lapsed) to first, as an
 * operator must settle it; any other to later.
 */
void
diagnose_effect_place(json_t *x, const struct subtab_entry *e, int64_t now,
    int64_t stale_after_ms, json_t *first, json_t *later, uint32_t *lapsed)
{
	if (x == NULL)
		return;
	json_object_set_new(x, "stalled", json_boolean(now - e->updated_at_ms >
	    stale_after_ms));
	if (strcmp(effect_state_name(e, now), "outcome_unknown") == 0) {
		*lapsed += e->state == SUBTAB_RESERVED;
		json_array_append_new(first, x);
	} else
		json_array_append_new(later, x);
}

/* effect_counts: a lapsed lease counts as outcome_unknown. */
json_t *
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

void
op_diagnose(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct subtab_row	*rows, *effects;
	size_t			 count, effect_count, i;
	uint32_t		 counts[SUBTAB_STATE_COUNT];
	uint32_t		 effect_counts[SUBTAB_STATE_COUNT];
	uint32_t		 lapsed = 0;
	json_t			*later;
	int64_t			 stale_after_ms = DIAGNOSE_DEFAULT_STALE_AFTER_MS;
	int64_t			 now = shm_now_ms();
	json_t			*v, *reply, *entries, *j;

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
	if (d->store_uri != NULL) {
		cluster_diagnose(c, id, stale_after_ms);
		return;
	}
	if (subtab_snapshot(&d->seg, SUBTAB_KIND_TASK, 1, &rows, &count,
	    counts) != 0) {
		conn_reply(c, reply_error_simple(id, WIRE_INTERNAL, 1,
		    "cannot read the submission table: %s", strerror(errno)));
		return;
	}
	if (subtab_snapshot(&d->seg, SUBTAB_KIND_EFFECT, 1, &effects,
	    &effect_count, effect_counts) != 0) {
		free(rows);
		conn_reply(c, reply_error_simple(id, WIRE_INTERNAL, 1,
		    "cannot read the submission table: %s", strerror(errno)));
		return;
	}
	/*
	 * Effects whose outcome is unknown first: they are what an operator
	 * must settle (effect_resolve); then the tasks, then the other
	 * unfinished effects (live leases, released).
	 */
	entries = json_array();
	later = json_array();
	for (i = 0; i < effect_count; i++)
		diagnose_effect_place(effect_submission_json(d,
		    effects[i].key, effects[i].entry.key_length,
		    &effects[i].entry, NULL, effects[i].claimed, now),
		    &effects[i].entry, now, stale_after_ms, entries, later,
		    &lapsed);
	for (i = 0; i < count; i++)
		json_array_append_new(entries, diagnose_entry(d, &rows[i], now,
		    stale_after_ms));
	json_array_extend(entries, later);
	json_decref(later);
	free(rows);
	free(effects);
	reply = reply_new(1, id);
	json_object_set_new(reply, "entries", entries);
	j = json_object();
	json_object_set_new(j, "reserved", json_integer(counts[SUBTAB_RESERVED]));
	json_object_set_new(j, "task_created",
	    json_integer(counts[SUBTAB_TASK_CREATED]));
	json_object_set_new(j, "committed",
	    json_integer(counts[SUBTAB_COMMITTED]));
	json_object_set_new(reply, "counts", j);
	json_object_set_new(reply, "effect_counts",
	    diagnose_effect_counts(effect_counts, lapsed));
	conn_reply(c, reply);
}
