/* SPDX-License-Identifier: ISC */
/*
 * ops.c: the read-only ops get_submission and stats (diagnose is
 * diagnose.c's).  They read the table and the workspace and change
 * nothing.
 */
#include <string.h>

#include "digest.h"
#include "idemd.h"

static const char *const get_submission_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", NULL
};
static const char *const stats_keys[] = { "op", "id", NULL };

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

/* get_submission with an effect_kind: the effect under that key. */
static void
get_effect(struct conn *c, json_t *id, const char *kind, size_t kind_length,
    const char *submission_id)
{
	struct idemd		*d = conn_idemd(c);
	struct subtab_entry	 e;
	struct index_entry	 cold;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	size_t			 n;
	json_t			*reply, *s = NULL, *receipt;
	int			 rc;

	n = (size_t)snprintf(key, sizeof key, "%.*s%c%s", (int)kind_length,
	    kind, SUBTAB_EFFECT_SEPARATOR, submission_id);
	if (d->store_uri != NULL) {
		cluster_get_effect(c, id, key, n);
		return;
	}
	rc = lookup_history(d, key, n, &e, &cold);
	if (rc < 0) {
		conn_reply(c, reply_error_simple(id, WIRE_INTERNAL, 1,
		    "the submission table is unusable"));
		return;
	}
	if (rc == 1 && e.kind == SUBTAB_KIND_EFFECT && cold.form != 0) {
		/* From the index: committed, with the result it keeps. */
		s = json_object();
		json_object_set_new(s, "client_submission_id",
		    json_string(submission_id));
		json_object_set_new(s, "effect_kind", json_stringn(kind,
		    kind_length));
		json_object_set_new(s, "state", json_string("committed"));
		json_object_set_new(s, "digest_schema",
		    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
		digest_to_hex(e.request_digest, hex);
		json_object_set_new(s, "request_digest", json_string(hex));
		json_object_set_new(s, "attempt", json_integer(e.attempt));
		if (cold.form == INDEX_TOMBSTONE)
			json_object_set_new(s, "receipt_pruned", json_true());
		receipt = effect_receipt_json_from(key, n, &e,
		    cold.record.result, cold.form == INDEX_TOMBSTONE);
		json_object_set_new(s, "receipt", receipt != NULL ? receipt :
		    json_null());
	} else if (rc == 1 && e.kind == SUBTAB_KIND_EFFECT)
		s = effect_submission_json(d, key, n, &e, NULL, 0,
		    shm_now_ms());
	reply = reply_new(1, id);
	json_object_set_new(reply, "found", json_boolean(s != NULL));
	if (s != NULL)
		json_object_set_new(reply, "submission", s);
	conn_reply(c, reply);
}

void
op_get_submission(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct subtab_entry	 e;
	struct index_entry	 cold;
	const char		*key, *kind;
	size_t			 kind_length;
	char			 task_id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	json_t			*reply, *s, *receipt;
	int			 rc;

	if (request_known_keys(request, "", get_submission_keys, &err) != 0 ||
	    (rc = request_submission_id(request, &key, &err)) < 0) {
		reply_invalid(c, id, &err);
		return;
	}
	if (rc == 0) {
		request_error_set(&err, WIRE_INVALID_REQUEST,
		    "client_submission_id", "client_submission_id is required");
		reply_invalid(c, id, &err);
		return;
	}
	if (request_string(request, "effect_kind", "effect_kind", 1,
	    IDEM_MAX_EFFECT_KIND_BYTES, 1, &kind, &kind_length, &err) < 0 ||
	    (kind != NULL && effect_kind_valid(kind, kind_length, &err) != 0)) {
		reply_invalid(c, id, &err);
		return;
	}
	/* write_task is the kind idem performs itself: the task's id. */
	if (kind != NULL && strcmp(kind, IDEM_EFFECT_KIND_RESERVED) != 0) {
		get_effect(c, id, kind, kind_length, key);
		return;
	}
	if (d->store_uri != NULL) {
		cluster_get_submission(c, id, key);
		return;
	}
	rc = lookup_history(d, key, strlen(key), &e, &cold);
	if (rc < 0 || (rc == 1 && e.kind != SUBTAB_KIND_TASK))
		rc = rc < 0 ? -1 : 0;
	if (rc < 0) {
		conn_reply(c, reply_error_simple(id, WIRE_INTERNAL, 1,
		    "the submission table is unusable"));
		return;
	}
	reply = reply_new(1, id);
	json_object_set_new(reply, "found", json_boolean(rc == 1));
	if (rc == 1) {
		taskfile_format_id(e.kind, e.date, e.seq, e.sender,
		    e.sender_length, e.recipient, e.recipient_length, task_id,
		    sizeof task_id);
		taskfile_format_path(e.kind, task_id, path, sizeof path);
		digest_to_hex(e.request_digest, hex);
		s = json_object();
		json_object_set_new(s, "client_submission_id",
		    json_string(key));
		json_object_set_new(s, "state",
		    json_string(subtab_state_name(e.state)));
		json_object_set_new(s, "digest_schema",
		    json_string(subtab_schema_name(e.schema)));
		json_object_set_new(s, "request_digest", json_string(hex));
		json_object_set_new(s, "task_id", json_string(task_id));
		json_object_set_new(s, "task_path", json_string(path));
		/* A tombstone of an earlier version kept no times. */
		json_object_set_new(s, "reserved_at", reply_time(
		    e.reserved_at_ms != 0 ? e.reserved_at_ms : e.created_at_ms));
		json_object_set_new(s, "updated_at", reply_time(
		    e.updated_at_ms != 0 ? e.updated_at_ms : e.created_at_ms));
		if (e.state != SUBTAB_RESERVED)
			current_path_add(d, s, task_id, path);
		if (e.state == SUBTAB_COMMITTED) {
			receipt = receipt_json(key, strlen(key), &e);
			if (cold.form == INDEX_TOMBSTONE) {
				json_object_del(receipt, "file_digest");
				json_object_set_new(s, "receipt_pruned",
				    json_true());
			}
			json_object_set_new(s, "receipt", receipt);
		}
		json_object_set_new(reply, "submission", s);
	}
	conn_reply(c, reply);
}

void
op_stats(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct shm_header	*h = d->seg.header;
	struct shm_counters	*k = &h->counters;
	struct index_stats	 ix;
	json_t			*reply;
	unsigned		 i, workers = 0;

	if (request_known_keys(request, "", stats_keys, &err) != 0) {
		reply_invalid(c, id, &err);
		return;
	}
	for (i = 0; i < h->worker_count; i++) {
		if (atomic_load(&h->workers[i].pid) != 0)
			workers++;
	}
	reply = reply_new(1, id);
#define STAT(name, value) json_object_set_new(reply, name, \
	json_integer((json_int_t)(value)))
	STAT("created", atomic_load(&k->created));
	STAT("reused", atomic_load(&k->reused));
	STAT("reused_fast", atomic_load(&k->reused_fast));
	STAT("index_warm_bytes", atomic_load(&k->index_warm_bytes));
	STAT("conflict", atomic_load(&k->conflict));
	STAT("legacy_created", atomic_load(&k->legacy_created));
	STAT("reports_created", atomic_load(&k->reports_created));
	STAT("reports_deduplicated", atomic_load(&k->reports_deduplicated));
	STAT("effects_proceed", atomic_load(&k->effects_proceed));
	STAT("effects_reused", atomic_load(&k->effects_reused));
	STAT("effects_in_progress", atomic_load(&k->effects_in_progress));
	STAT("effects_outcome_unknown",
	    atomic_load(&k->effects_outcome_unknown));
	STAT("effects_committed", atomic_load(&k->effects_committed));
	STAT("effects_released", atomic_load(&k->effects_released));
	STAT("effects_resolved", atomic_load(&k->effects_resolved));
	STAT("effects_stale_fence", atomic_load(&k->effects_stale_fence));
	STAT("result_arena_used", arena_used(&d->seg));
	STAT("result_arena_bytes", h->arena_bytes);
	STAT("fast_receipts_used", receipts_used(&d->seg));
	STAT("fast_receipts_bytes", h->receipts_bytes);
	STAT("errors", atomic_load(&k->errors));
	STAT("journal_records", atomic_load(&k->journal_records));
	STAT("journal_fsyncs", atomic_load(&k->journal_fsyncs));
	/*
	 * Two tiers: the table is a cache of the index.  history_entries
	 * counts every committed receipt kept (tombstones too): the
	 * index's, and the table's not given to it yet.
	 */
	if (!d->index_ready || index_stats(&d->index, &ix) != 0)
		memset(&ix, 0, sizeof ix);
	STAT("table_used", h->slots_used - h->free_count);
	STAT("table_entries", h->slots_used - h->free_count);
	STAT("table_capacity", h->capacity);
	STAT("history_entries", ix.entries + subtab_unindexed(&d->seg));
	STAT("index_entries", ix.entries);
	STAT("index_bytes", ix.bytes);
	STAT("table_evictions", atomic_load(&h->evictions));
	STAT("workers", workers);
	STAT("worker_restarts", atomic_load(&k->worker_restarts));
	STAT("uptime_ms", shm_now_ms() - h->started_at_ms);
#undef STAT
	/* --store postgresql: the workspace's history, every broker's. */
	if (d->store_uri != NULL)
		cluster_stats(c, reply);
	conn_reply(c, reply);
}
