/* SPDX-License-Identifier: ISC */
/*
 * ops.c: the read-only ops get_submission and stats (diagnose is
 * diagnose.c's), and the request every read of the backend's runs in
 * (ops_read_pending_new).  They read through the backend (d->be) and
 * the workspace and change nothing; the JSON of a submission's or an
 * effect's row is built here, once, for every backend.  A backend's
 * read is asynchronous (backend.h: PostgreSQL's runs on a store
 * thread): its request is a pending, answered only from the read's done
 * function, on the loop; the local store's done runs before the call
 * returns.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "idemd.h"
#include "backend.h"
#include "stats.h"

static const char *const get_submission_keys[] = {
	"op", "id", "client_submission_id", "effect_kind", NULL
};
static const char *const stats_keys[] = { "op", "id", NULL };

/*
 * A submission's facts from a backend's row (get_submission): the same
 * members, in the same order, whichever backend read it.
 */
static json_t *
submission_json(struct idemd *d, const struct backend_row *row)
{
	const struct subtab_entry *e = &row->entry;
	char			 task_id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	json_t			*s, *receipt;

	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, task_id,
	    sizeof task_id);
	taskfile_format_path(e->kind, task_id, path, sizeof path);
	digest_to_hex(e->request_digest, hex);
	s = json_object();
	json_object_set_new(s, "client_submission_id", json_string(row->key));
	json_object_set_new(s, "state",
	    json_string(subtab_state_name(e->state)));
	json_object_set_new(s, "digest_schema",
	    json_string(subtab_schema_name(e->schema)));
	json_object_set_new(s, "request_digest", json_string(hex));
	json_object_set_new(s, "task_id", json_string(task_id));
	json_object_set_new(s, "task_path", json_string(path));
	json_object_set_new(s, "reserved_at", reply_time(e->reserved_at_ms));
	json_object_set_new(s, "updated_at", reply_time(e->updated_at_ms));
	if (e->state != SUBTAB_RESERVED)
		current_path_add(d, s, task_id, path);
	if (e->state == SUBTAB_COMMITTED) {
		receipt = receipt_json(row->key, row->key_length, e);
		if (row->pruned) {
			json_object_del(receipt, "file_digest");
			json_object_set_new(s, "receipt_pruned", json_true());
		}
		json_object_set_new(s, "receipt", receipt);
	}
	return s;
}

/*
 * An effect's facts from a backend's row (get_submission, diagnose);
 * *shown: its entry, the lease on this host's clock.  NULL: a key that
 * is not an effect's.
 */
json_t *
effect_row_json(struct idemd *d, const struct backend_row *row, int64_t now,
    struct subtab_entry *shown)
{
	const struct subtab_entry *e = shown;
	char			 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char			 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	json_t			*s, *receipt;

	*shown = row->entry;
	if (row->from_index) {
		/* From the index: committed, with the result it keeps. */
		if (effect_key_split(row->key, row->key_length, kind,
		    sizeof kind, id, sizeof id) != 0)
			return NULL;
		s = json_object();
		json_object_set_new(s, "client_submission_id",
		    json_string(id));
		json_object_set_new(s, "effect_kind", json_string(kind));
		json_object_set_new(s, "state", json_string("committed"));
		json_object_set_new(s, "digest_schema",
		    json_string(IDEM_SCHEMA_GENERIC_JSON_V1));
		digest_to_hex(e->request_digest, hex);
		json_object_set_new(s, "request_digest", json_string(hex));
		json_object_set_new(s, "attempt", json_integer(e->attempt));
		if (row->pruned)
			json_object_set_new(s, "receipt_pruned", json_true());
		receipt = effect_receipt_json_from(row->key, row->key_length,
		    e, row->result, row->pruned);
		json_object_set_new(s, "receipt", receipt != NULL ? receipt :
		    json_null());
		return s;
	}
	/* The server's judgement of the lease, on this host's clock. */
	if (row->has_owner)
		shown->lease_expires_ms = now + row->lease_ms_left;
	/* A tombstone: never the arena's bytes (an empty result, replaced). */
	s = effect_submission_json(row->key, row->key_length, e,
	    row->pruned ? (const uint8_t *)"" : row->result,
	    row->result_pruned, row->in_flight, now);
	if (s != NULL && row->pruned) {
		/* As the local store shows an index tombstone. */
		json_object_set_new(s, "receipt_pruned", json_true());
		json_object_set_new(s, "receipt", effect_receipt_json_from(
		    row->key, row->key_length, e, NULL, 1));
	}
	if (s != NULL && row->has_owner && e->state != SUBTAB_COMMITTED) {
		json_object_set_new(s, "epoch", json_integer(row->epoch));
		json_object_set_new(s, "lease_owner", json_string(row->owner));
		json_object_set_new(s, "lease_ms_left",
		    json_integer(row->lease_ms_left));
	}
	return s;
}

struct pending *
ops_read_pending_new(struct conn *c, json_t *id, size_t op_size,
    void (*op_free)(void *))
{
	struct pending		*p;
	struct backend_read	*r;
	size_t			 room_offset = BACKEND_ROOM_OFFSET(op_size);

	if ((p = pending_new_op(c, id, room_offset +
	    conn_idemd(c)->be->read_state_size, op_free)) == NULL)
		return NULL;
	r = p->op;
	r->backend_state = (char *)p->op + room_offset;
	return p;
}

void
ops_reply_backend_error(struct pending *p, const struct backend_error *err)
{
	pending_reply(p, reply_error_simple(p->id, err->code, err->retryable,
	    "%s", err->message));
}

/* get_submission's read done: the submission's or effect's facts. */
static void
get_done(struct pending *p, const struct backend_read_outcome *out)
{
	struct backend_read	*r = p->op;
	struct idemd		*d = p->worker->d;
	struct subtab_entry	 shown;
	json_t			*reply, *s = NULL;

	if (out->result == BACKEND_READ_FAILED) {
		ops_reply_backend_error(p, &out->err);
		return;
	}
	if (out->result == BACKEND_READ_FOUND)
		s = r->kind == SUBTAB_KIND_EFFECT ? effect_row_json(d,
		    out->row, shm_now_ms(), &shown) : submission_json(d,
		    out->row);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "found", json_boolean(s != NULL));
	if (s != NULL)
		json_object_set_new(reply, "submission", s);
	pending_reply(p, reply);
}

void
op_get_submission(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct backend_read	*r;
	struct pending		*p;
	const char		*key, *kind;
	size_t			 kind_length;
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
	if ((p = ops_read_pending_new(c, id, sizeof *r, free)) == NULL)
		return;
	r = p->op;
	/* write_task is the kind idem performs itself: the task's id. */
	if (kind != NULL && strcmp(kind, IDEM_EFFECT_KIND_RESERVED) != 0) {
		r->kind = SUBTAB_KIND_EFFECT;
		r->key_length = (size_t)snprintf(r->key, sizeof r->key,
		    "%.*s%c%s", (int)kind_length, kind,
		    SUBTAB_EFFECT_SEPARATOR, key);
	} else {
		r->kind = SUBTAB_KIND_TASK;
		r->key_length = (size_t)snprintf(r->key, sizeof r->key, "%s",
		    key);
	}
	d->be->get(p, get_done);
}

/*
 * A stat's value now (libclient/stats.h names them): a switch without a
 * default, so that a stat added to the table and not here is a compiler
 * warning (-Wswitch, in -Wall).
 */
/*
 * The index's figures and the table's committed entries not given to it
 * yet, read while no checkpoint publishes (index_publishing even and the
 * same before and after): between its index commit and its marks a
 * batch would be counted twice or not at all.  A publish is one LMDB
 * commit; after STATS_PUBLISH_WAITS waits the figures are taken as they
 * are.
 */
#define STATS_PUBLISH_WAITS	2000
#define STATS_PUBLISH_WAIT_NS	100000L
static void
stats_history(struct idemd *d, struct index_stats *ix, uint64_t *unindexed)
{
	struct shm_header	*h = d->seg.header;
	struct timespec		 ts = { 0, STATS_PUBLISH_WAIT_NS };
	uint32_t		 before;
	int			 waits;

	for (waits = 0;; waits++) {
		before = atomic_load(&h->index_publishing);
		if (!d->index_ready || index_stats(&d->index, ix, NULL) != 0)
			memset(ix, 0, sizeof *ix);
		*unindexed = subtab_unindexed(&d->seg);
		if (((before & 1) == 0 &&
		    atomic_load(&h->index_publishing) == before) ||
		    waits >= STATS_PUBLISH_WAITS)
			return;
		nanosleep(&ts, NULL);
	}
}

static uint64_t
stat_value(struct idemd *d, enum idem_stat s, const struct index_stats *ix,
    uint64_t unindexed, unsigned workers)
{
	struct shm_header	*h = d->seg.header;
	struct shm_counters	*k = &h->counters;

	switch (s) {
	case IDEM_STAT_created:
		return atomic_load(&k->created);
	case IDEM_STAT_reused:
		return atomic_load(&k->reused);
	case IDEM_STAT_reused_fast:
		return atomic_load(&k->reused_fast);
	case IDEM_STAT_index_warm_bytes:
		return atomic_load(&k->index_warm_bytes);
	case IDEM_STAT_conflict:
		return atomic_load(&k->conflict);
	case IDEM_STAT_legacy_created:
		return atomic_load(&k->legacy_created);
	case IDEM_STAT_reports_created:
		return atomic_load(&k->reports_created);
	case IDEM_STAT_reports_deduplicated:
		return atomic_load(&k->reports_deduplicated);
	case IDEM_STAT_effects_proceed:
		return atomic_load(&k->effects_proceed);
	case IDEM_STAT_effects_reused:
		return atomic_load(&k->effects_reused);
	case IDEM_STAT_effects_reused_fast:
		return atomic_load(&k->effects_reused_fast);
	case IDEM_STAT_effects_reused_cached:
		return atomic_load(&k->effects_reused_cached);
	case IDEM_STAT_effects_in_progress:
		return atomic_load(&k->effects_in_progress);
	case IDEM_STAT_effects_outcome_unknown:
		return atomic_load(&k->effects_outcome_unknown);
	case IDEM_STAT_effects_committed:
		return atomic_load(&k->effects_committed);
	case IDEM_STAT_effects_released:
		return atomic_load(&k->effects_released);
	case IDEM_STAT_effects_resolved:
		return atomic_load(&k->effects_resolved);
	case IDEM_STAT_effects_stale_fence:
		return atomic_load(&k->effects_stale_fence);
	case IDEM_STAT_effects_extended:
		return atomic_load(&k->effects_extended);
	case IDEM_STAT_result_arena_used:
		return arena_used(&d->seg);
	case IDEM_STAT_result_arena_bytes:
		return h->arena_bytes;
	case IDEM_STAT_fast_receipts_used:
		return receipts_used(&d->seg);
	case IDEM_STAT_fast_receipts_bytes:
		return h->receipts_bytes;
	case IDEM_STAT_errors:
		return atomic_load(&k->errors);
	case IDEM_STAT_journal_records:
		return atomic_load(&k->journal_records);
	case IDEM_STAT_journal_fsyncs:
		return atomic_load(&k->journal_fsyncs);
	case IDEM_STAT_table_used:
	case IDEM_STAT_table_entries:
		return h->slots_used - h->free_count;
	case IDEM_STAT_table_capacity:
		return h->capacity;
	/*
	 * Two tiers: the table is a cache of the index.  history_entries
	 * counts every committed receipt kept (tombstones too): the
	 * index's, and the table's not given to it yet.
	 */
	case IDEM_STAT_history_entries:
		return ix->entries + unindexed;
	case IDEM_STAT_index_entries:
		return ix->entries;
	case IDEM_STAT_index_bytes:
		return ix->bytes;
	case IDEM_STAT_table_evictions:
		return atomic_load(&h->evictions);
	case IDEM_STAT_workers:
		return workers;
	case IDEM_STAT_worker_restarts:
		return atomic_load(&k->worker_restarts);
	case IDEM_STAT_uptime_ms:
		return (uint64_t)(shm_now_ms() - h->started_at_ms);
	case IDEM_STAT_COUNT:
		break;
	}
	return 0;
}

/*
 * stats' reply: this broker's figures, now, and the store's history
 * (history: NULL, the member left out; history_failed: null).
 */
static json_t *
stats_reply(struct idemd *d, json_t *id,
    const struct backend_history *history, int history_failed)
{
	struct shm_header	*h = d->seg.header;
	struct index_stats	 ix;
	uint64_t		 unindexed;
	json_t			*reply, *j;
	unsigned		 i, workers = 0;

	for (i = 0; i < h->worker_count; i++) {
		if (atomic_load(&h->workers[i].pid) != 0)
			workers++;
	}
	stats_history(d, &ix, &unindexed);
	reply = reply_new(1, id);
	for (i = 0; i < IDEM_STAT_COUNT; i++)
		json_object_set_new(reply, idem_stat_table[i].name,
		    json_integer((json_int_t)stat_value(d, (enum idem_stat)i,
		    &ix, unindexed, workers)));
	/*
	 * --store postgresql: the workspace's history, every broker's.
	 * stats answers without it: its own figures need no server.
	 */
	if (history_failed)
		json_object_set_new(reply, IDEM_STORE_STATS_MEMBER,
		    json_null());
	else if (history != NULL) {
		j = json_object();
#define STORE_STAT(name, help)	json_object_set_new(j, #name,		\
	json_integer((json_int_t)history->name));
		IDEM_STORE_STATS(STORE_STAT)
#undef STORE_STAT
		json_object_set_new(reply, IDEM_STORE_STATS_MEMBER, j);
	}
	return reply;
}

/* The store's history read (or not): the whole reply, figures now. */
static void
stats_done(struct pending *p, const struct backend_read_outcome *out)
{
	pending_reply(p, stats_reply(p->worker->d, p->id, &out->history,
	    out->result == BACKEND_READ_FAILED));
}

void
op_stats(struct conn *c, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct idemd		*d = conn_idemd(c);
	struct pending		*p;

	if (request_known_keys(request, "", stats_keys, &err) != 0) {
		reply_invalid(c, id, &err);
		return;
	}
	/* Nothing to read (local): answered at once, no request kept. */
	if (d->be->history == NULL) {
		conn_reply(c, stats_reply(d, id, NULL, 0));
		return;
	}
	if ((p = ops_read_pending_new(c, id, sizeof(struct backend_read),
	    free)) == NULL)
		return;
	d->be->history(p, stats_done);
}
