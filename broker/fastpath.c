/* SPDX-License-Identifier: ISC */
/*
 * fastpath.c: retries of committed write_task submissions and
 * effect_begin retries of committed effects answered without jansson or
 * the digest.
 *
 * DESIGN
 *
 * When a write-task-v1 submission is answered after its commit is
 * durable (created, or reused by the full path), the reply a retry
 * would get is serialised once, without its "id" and "current_path",
 * and kept with the fingerprint of the request's raw bytes (fastscan.c)
 * in the segment's receipt store; the table slot names it
 * (receipts_put).  A later line is scanned before it is parsed: if its
 * submission id is in the table, committed, names a stored reply and
 * the fingerprints are equal, the reply is sent with one writev, the
 * line's id spliced in as it was sent.  The equal fingerprint means the
 * same fingerprinted bytes, hence the same request and digest, and a
 * committed durable entry never changes: the full path would answer
 * "reused" with the same receipt.  Two things it would add are checked
 * here the same way: "current_path" (current_path_find: the fast
 * path answers only when the file is where the receipt says or nowhere,
 * the cases without it), and the refusal while shutting down.  Any other
 * case (no entry, not committed, nothing stored, another fingerprint)
 * goes on to the full parse, which stores the reply if none is: after a
 * restart the store is empty (memory only) and the first retry of each
 * submission takes the full path, the next ones the fast one.  The
 * store is a ring (shm/receipts.c): new replies overwrite the oldest,
 * whose retries take the full path once again and store theirs anew.
 * The reply is copied out of it (and the copy checked) before it is
 * sent.
 *
 * An effect_begin retry of a committed effect is answered the same way
 * (issue #33).  Its full answer (effect.c, effect_answer_receipt) is
 * "reused" with the receipt built from the table's entry and the
 * result's bytes: from the arena while it holds them, else from the
 * index, whose entry compaction turns into a tombstone (then
 * "receipt_pruned" and the result's digest in place of the result).
 * So the reply is stored only when the full path answered it whole from
 * a table entry (not a tombstone, not an entry found in the index), or
 * at the commit itself, for the begin line this worker answered proceed
 * to with the attempt and fence that commit names (fastpath_effect_
 * proceeded and _begun, fastpath_begun.c: the first retry after a
 * commit is fast too; the receipt is the commit's, the same bytes), and
 * answered fast only while the arena still holds the result (read, as
 * the full path reads it first): then the full path would build the same
 * receipt from the same bytes.  Once the arena reused them the full path
 * decides (whole from the index, or the tombstone).  The entry itself
 * never changes while committed in its slot (a slot given to another key
 * forgets its stored reply; the fingerprint covers the kind and id); on
 * PostgreSQL a key cached again is put anew, its result at another
 * offset, which also forgets the stored reply (subtab_apply_slot), and
 * receipts_put compares the whole entry, offset included.
 * Replies above the store's 4 KiB (results near their 64 KiB limit) are
 * not stored: those retries keep the full path.
 *
 * Which stores: those whose full path answers a committed effect in the
 * table from its entry while the arena holds its result
 * (BACKEND_EFFECTS_IN_TABLE), the local one and the PostgreSQL one.  On
 * PostgreSQL the row is the truth and the table a cache of committed
 * rows, whole (broker/pg/pg_effect_cache.c): an effect_begin whose key
 * the table holds committed is answered from the entry and the arena's
 * bytes, without a round trip, the same receipt the row gives.  Another
 * broker may compact the row into a tombstone at any moment; the
 * cached body answers on, on both paths, until it leaves the table or
 * the arena, as a cached creation does (doc/cluster.md, "Tombstones"):
 * so the reasoning above holds there too, and the fast path answers what
 * the full path would.  (Until 7 Dec 2026 nothing of an effect was
 * cached on PostgreSQL, and the fast path never answered one there.)
 *
 * The fingerprint of the line being dispatched is kept in the worker's
 * struct fastpath (fastpath.h) between fastpath_answer and op_write_task
 * or op_effect_begin (fastpath_hint_take): a worker handles one line at
 * a time, synchronously, so there is exactly one.  The proceeds' cache
 * (fastpath_begun.c) is the worker's too; nothing here is a file-scope
 * variable.
 */
#include <sys/uio.h>

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fastpath.h"
#include "idemd.h"
#include "log.h"

/* What every reply starts with, and the member after it. */
#define FASTPATH_REPLY_OK	"{\"ok\":true,"
#define FASTPATH_REPLY_ID	"{\"ok\":true,\"id\":"

static void
hint_keep(struct fastpath *fp, const struct fastscan *scan)
{
	struct fastpath_hint	*current = &fp->current;

	current->valid = scan->valid;
	if (!scan->valid)
		return;
	current->op = scan->op;
	memcpy(current->fingerprint, scan->fingerprint,
	    sizeof current->fingerprint);
	if (scan->op != FASTSCAN_EFFECT_BEGIN) {
		current->key_length = scan->key_length;
		memcpy(current->key, scan->key, scan->key_length);
		return;
	}
	/* effect_check.c's effect_key: "<kind> 0x1f <id>" (both bounded). */
	memcpy(current->key, scan->kind, scan->kind_length);
	current->key[scan->kind_length] = SUBTAB_EFFECT_SEPARATOR;
	memcpy(current->key + scan->kind_length + 1, scan->key,
	    scan->key_length);
	current->key_length = scan->kind_length + 1 + scan->key_length;
}

/* The stored reply, the line's id spliced in as it was sent. */
static void
send_stored(struct conn *c, const struct fastscan *scan,
    const uint8_t *stored, size_t stored_length)
{
	struct iovec	 iov[5];
	int		 n = 0;

	if (scan->id != NULL) {
		iov[n].iov_base = FASTPATH_REPLY_ID;
		iov[n++].iov_len = sizeof FASTPATH_REPLY_ID - 1;
		iov[n].iov_base = (void *)scan->id;
		iov[n++].iov_len = scan->id_length;
		iov[n].iov_base = ",";
		iov[n++].iov_len = 1;
	} else {
		iov[n].iov_base = FASTPATH_REPLY_OK;
		iov[n++].iov_len = sizeof FASTPATH_REPLY_OK - 1;
	}
	iov[n].iov_base = (void *)(stored + IDEM_FAST_FINGERPRINT_BYTES);
	iov[n++].iov_len = stored_length - IDEM_FAST_FINGERPRINT_BYTES;
	iov[n].iov_base = "\n";
	iov[n++].iov_len = 1;
	conn_send_iov(c, iov, n);
}

/* A copy of slot's stored reply if it was stored for scan's bytes. */
static int
stored_for(struct idemd *d, uint32_t slot, const struct fastscan *scan,
    uint8_t stored[SHM_RECEIPT_MAX_BYTES], size_t *stored_length)
{
	/* A copy: the store may overwrite its bytes once this is sent. */
	return receipts_get(&d->seg, slot, stored, stored_length) == 1 &&
	    *stored_length > IDEM_FAST_FINGERPRINT_BYTES &&
	    memcmp(stored, scan->fingerprint, IDEM_FAST_FINGERPRINT_BYTES) == 0;
}

/*
 * An effect_begin retry: its effect committed in the table, a reply
 * stored for these bytes, and the result still in the arena (DESIGN).
 */
static int
effect_answer(struct conn *c, struct idemd *d, struct fastpath *fp,
    const struct fastscan *scan)
{
	struct shm_header	*h = d->seg.header;
	struct subtab_entry	 e;
	uint8_t			 stored[SHM_RECEIPT_MAX_BYTES];
	size_t			 stored_length;
	uint32_t		 slot;

	if (!(d->be->flags & BACKEND_EFFECTS_IN_TABLE) ||
	    subtab_lookup(&d->seg, fp->current.key, fp->current.key_length,
	    &e, &slot) != 1 || e.kind != SUBTAB_KIND_EFFECT ||
	    e.state != SUBTAB_COMMITTED ||
	    e.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1 ||
	    !stored_for(d, slot, scan, stored, &stored_length))
		return 0;
	/*
	 * The full path reads the arena first: while it holds them, whole.
	 * Whether it holds them is all this needs, not a copy (the reply
	 * is the stored one): arena_holds.
	 */
	if (e.result_length == 0 || e.result_length > SHM_RECEIPT_MAX_BYTES ||
	    arena_holds(&d->seg, e.result_offset, e.result_length) != 0)
		return 0;
	fp->current.valid = 0;	/* nothing to remember */
	atomic_fetch_add(&h->counters.effects_reused, 1);
	atomic_fetch_add(&h->counters.effects_reused_fast, 1);
	send_stored(c, scan, stored, stored_length);
	return 1;
}

void
fastpath_hint_take(struct fastpath *fp, struct fastpath_hint *hint)
{
	*hint = fp->current;
	fp->current.valid = 0;
}

int
fastpath_answer(struct conn *c, const char *line, size_t length)
{
	struct idemd		*d = conn_idemd(c);
	struct fastpath		*fp = &conn_worker(c)->fast;
	struct shm_header	*h = d->seg.header;
	struct fastscan		 scan;
	struct subtab_entry	 e;
	uint8_t			 stored[SHM_RECEIPT_MAX_BYTES];
	char			 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES], moved[PATH_MAX];
	size_t			 stored_length;
	uint32_t		 slot;

	fastscan_line(line, length, &scan);
	hint_keep(fp, &scan);
	if (!scan.valid || atomic_load(&h->shutting_down))
		return 0;
	if (scan.op == FASTSCAN_EFFECT_BEGIN)
		return effect_answer(c, d, fp, &scan);
	if (subtab_lookup(&d->seg, scan.key, scan.key_length, &e, &slot) != 1 ||
	    e.kind != SUBTAB_KIND_TASK || e.state != SUBTAB_COMMITTED ||
	    e.schema != SUBTAB_SCHEMA_WRITE_TASK_V1 ||
	    !stored_for(d, slot, &scan, stored, &stored_length))
		return 0;
	taskfile_format_id(e.kind, e.date, e.seq, e.sender, e.sender_length,
	    e.recipient, e.recipient_length, id, sizeof id);
	taskfile_format_path(e.kind, id, path, sizeof path);
	if (current_path_find(d, id, path, moved, sizeof moved) != 0)
		return 0;	/* moved (or unreadable): the full path says */
	fp->current.valid = 0;	/* nothing to remember */
	atomic_fetch_add(&h->counters.reused, 1);
	atomic_fetch_add(&h->counters.reused_fast, 1);
	send_stored(c, &scan, stored, stored_length);
	return 1;
}

/*
 * text (a reply after its {"ok":true,) behind the fingerprint, stored in
 * slot if it still holds entry, the one the reply was built from.
 */
static void
store_text(struct idemd *d, const struct fastpath_hint *hint, uint32_t slot,
    const struct subtab_entry *entry, const char *text, size_t length)
{
	uint8_t		 buf[SHM_RECEIPT_MAX_BYTES];

	if (length == 0 || IDEM_FAST_FINGERPRINT_BYTES + length > sizeof buf)
		return;
	memcpy(buf, hint->fingerprint, IDEM_FAST_FINGERPRINT_BYTES);
	memcpy(buf + IDEM_FAST_FINGERPRINT_BYTES, text, length);
	/*
	 * Stored meanwhile (not needed), or the slot was given to another
	 * entry since the caller's look (not its reply).
	 */
	(void)receipts_put(&d->seg, slot, hint->key, hint->key_length, entry,
	    buf, IDEM_FAST_FINGERPRINT_BYTES + length);
}

/* reply's dump, stored as store_text stores it. */
static void
store_reply(struct idemd *d, const struct fastpath_hint *hint, uint32_t slot,
    const struct subtab_entry *entry, json_t *reply)
{
	size_t		 length, skip = sizeof FASTPATH_REPLY_OK - 1;
	char		*text;

	if ((text = json_dumps(reply, JSON_COMPACT | JSON_PRESERVE_ORDER)) ==
	    NULL)
		return;
	length = strlen(text);
	if (length > skip && strncmp(text, FASTPATH_REPLY_OK, skip) == 0)
		store_text(d, hint, slot, entry, text + skip, length - skip);
	free(text);
}

void
fastpath_remember(struct idemd *d, const struct fastpath_hint *hint,
    const struct submission *sub, json_t *receipt)
{
	uint8_t		 buf[SHM_RECEIPT_MAX_BYTES];
	size_t		 length;
	json_t		*reply;

	if (!hint->valid || hint->op != FASTSCAN_WRITE_TASK ||
	    sub->submission_id == NULL ||
	    sub->entry.schema != SUBTAB_SCHEMA_WRITE_TASK_V1 ||
	    sub->entry.state != SUBTAB_COMMITTED ||
	    hint->key_length != sub->key_length ||
	    memcmp(hint->key, sub->key, sub->key_length) != 0 ||
	    receipts_get(&d->seg, sub->slot, buf, &length) == 1)
		return;
	/* write_task_answer's reused reply, without id and current_path. */
	if ((reply = json_object()) == NULL)
		return;
	json_object_set_new(reply, "ok", json_true());
	json_object_set_new(reply, "disposition", json_string("reused"));
	json_object_set_new(reply, "action_taken", json_false());
	json_object_set_new(reply, "idempotent", json_true());
	json_object_set(reply, "receipt", receipt);
	store_reply(d, hint, sub->slot, &sub->entry, reply);
	json_decref(reply);
}

/*
 * The slot of key if it holds entry committed, and names no stored
 * reply: a cheap look, unlocked; receipts_put checks again under the
 * lock.  UINT32_MAX: none.
 */
static uint32_t
effect_slot(struct idemd *d, const struct fastpath_hint *hint,
    const char *key, size_t key_length, const struct subtab_entry *entry)
{
	struct subtab_entry	 x;
	uint8_t			 buf[SHM_RECEIPT_MAX_BYTES];
	size_t			 length;
	uint32_t		 slot;

	if (!hint->valid || hint->op != FASTSCAN_EFFECT_BEGIN ||
	    !(d->be->flags & BACKEND_EFFECTS_IN_TABLE) ||
	    hint->key_length != key_length ||
	    memcmp(hint->key, key, key_length) != 0)
		return UINT32_MAX;
	if (subtab_lookup(&d->seg, key, key_length, &x, &slot) != 1 ||
	    x.kind != SUBTAB_KIND_EFFECT || x.state != SUBTAB_COMMITTED ||
	    x.schema != SUBTAB_SCHEMA_GENERIC_JSON_V1 ||
	    x.attempt != entry->attempt ||
	    x.created_at_ms != entry->created_at_ms ||
	    x.effect_flags != entry->effect_flags ||
	    x.result_length != entry->result_length ||
	    x.result_offset != entry->result_offset ||
	    memcmp(x.request_digest, entry->request_digest,
	    IDEM_SHA256_BYTES) != 0 ||
	    memcmp(x.file_digest, entry->file_digest, IDEM_SHA256_BYTES) != 0 ||
	    receipts_get(&d->seg, slot, buf, &length) == 1)
		return UINT32_MAX;
	return slot;
}

void
fastpath_remember_effect_text(struct idemd *d,
    const struct fastpath_hint *hint, const char *key, size_t key_length,
    const struct subtab_entry *entry, const char *text, size_t length)
{
	uint32_t	slot;

	if ((slot = effect_slot(d, hint, key, key_length, entry)) !=
	    UINT32_MAX)
		store_text(d, hint, slot, entry, text, length);
}
