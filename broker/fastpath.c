/* SPDX-License-Identifier: ISC */
/*
 * fastpath.c: retries of committed write_task submissions answered
 * without jansson or the digest.
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
 * The fingerprint of the line being dispatched is kept here between
 * fastpath_answer and op_write_task (fastpath_hint_take): a worker
 * handles one line at a time, synchronously, so there is exactly one.
 */
#include <sys/uio.h>

#include <stdlib.h>
#include <string.h>

#include "fastpath.h"
#include "idemd.h"
#include "log.h"

/* What every reply starts with, and the member after it. */
#define FASTPATH_REPLY_OK	"{\"ok\":true,"
#define FASTPATH_REPLY_ID	"{\"ok\":true,\"id\":"

static struct fastpath_hint	current;

static void
hint_keep(const struct fastscan *scan)
{
	current.valid = scan->valid;
	if (!scan->valid)
		return;
	memcpy(current.fingerprint, scan->fingerprint,
	    sizeof current.fingerprint);
	current.key_length = scan->key_length;
	memcpy(current.key, scan->key, scan->key_length);
}

void
fastpath_hint_take(struct fastpath_hint *hint)
{
	*hint = current;
	current.valid = 0;
}

int
fastpath_answer(struct conn *c, const char *line, size_t length)
{
	struct idemd		*d = conn_idemd(c);
	struct shm_header	*h = d->seg.header;
	struct fastscan		 scan;
	struct subtab_entry	 e;
	struct iovec		 iov[5];
	uint8_t			 stored[SHM_RECEIPT_MAX_BYTES];
	char			 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 path[IDEM_MAX_TASK_PATH_BYTES], moved[PATH_MAX];
	size_t			 stored_length;
	uint32_t		 slot;
	int			 n = 0;

	fastscan_line(line, length, &scan);
	hint_keep(&scan);
	if (!scan.valid || atomic_load(&h->shutting_down))
		return 0;
	if (subtab_lookup(&d->seg, scan.key, scan.key_length, &e, &slot) != 1 ||
	    e.kind != SUBTAB_KIND_TASK || e.state != SUBTAB_COMMITTED ||
	    e.schema != SUBTAB_SCHEMA_WRITE_TASK_V1)
		return 0;
	/* A copy: the store may overwrite its bytes once this is sent. */
	if (receipts_get(&d->seg, slot, stored, &stored_length) != 1 ||
	    stored_length <= IDEM_FAST_FINGERPRINT_BYTES ||
	    memcmp(stored, scan.fingerprint, IDEM_FAST_FINGERPRINT_BYTES) != 0)
		return 0;
	taskfile_format_id(e.kind, e.date, e.seq, e.sender, e.sender_length,
	    e.recipient, e.recipient_length, id, sizeof id);
	taskfile_format_path(e.kind, id, path, sizeof path);
	if (current_path_find(d, id, path, moved, sizeof moved) != 0)
		return 0;	/* moved (or unreadable): the full path says */
	current.valid = 0;	/* nothing to remember */
	if (scan.id != NULL) {
		iov[n].iov_base = FASTPATH_REPLY_ID;
		iov[n++].iov_len = sizeof FASTPATH_REPLY_ID - 1;
		iov[n].iov_base = (void *)scan.id;
		iov[n++].iov_len = scan.id_length;
		iov[n].iov_base = ",";
		iov[n++].iov_len = 1;
	} else {
		iov[n].iov_base = FASTPATH_REPLY_OK;
		iov[n++].iov_len = sizeof FASTPATH_REPLY_OK - 1;
	}
	iov[n].iov_base = stored + IDEM_FAST_FINGERPRINT_BYTES;
	iov[n++].iov_len = stored_length - IDEM_FAST_FINGERPRINT_BYTES;
	iov[n].iov_base = "\n";
	iov[n++].iov_len = 1;
	atomic_fetch_add(&h->counters.reused, 1);
	atomic_fetch_add(&h->counters.reused_fast, 1);
	conn_send_iov(c, iov, n);
	return 1;
}

void
fastpath_remember(struct idemd *d, const struct fastpath_hint *hint,
    const struct submission *sub, json_t *receipt)
{
	uint8_t		 buf[SHM_RECEIPT_MAX_BYTES];
	size_t		 length, skip = sizeof FASTPATH_REPLY_OK - 1;
	json_t		*reply;
	char		*text;

	if (!hint->valid || sub->submission_id == NULL ||
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
	text = json_dumps(reply, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(reply);
	if (text == NULL)
		return;
	length = strlen(text);
	if (length > skip && strncmp(text, FASTPATH_REPLY_OK, skip) == 0 &&
	    IDEM_FAST_FINGERPRINT_BYTES + length - skip <= sizeof buf) {
		memcpy(buf, hint->fingerprint, IDEM_FAST_FINGERPRINT_BYTES);
		memcpy(buf + IDEM_FAST_FINGERPRINT_BYTES, text + skip,
		    length - skip);
		/* Stored meanwhile: this one is not needed. */
		(void)receipts_put(&d->seg, sub->slot, sub->key,
		    sub->key_length, buf,
		    IDEM_FAST_FINGERPRINT_BYTES + length - skip);
	}
	free(text);
}
