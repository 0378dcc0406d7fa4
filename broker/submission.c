/* SPDX-License-Identifier: ISC */
/*
 * submission.c: a creation (write_task, write_report) in the operation
 * layer: the request's part of the entry filled, the backend's create
 * (backend.h) started, and its outcome counted and answered
 * (submission_done).  How a creation is made idempotent is the
 * backend's: broker/local/local_create.c (the reserved -> task_created
 * -> committed machine on the table, the journal and the files) or
 * broker/pg/pg_create.c (the row on the PostgreSQL store).
 */
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "idemd.h"
#include "backend.h"

static struct submission *
sub_of(struct pending *p)
{
	return p->op;
}

static struct idemd *
idemd_of(struct pending *p)
{
	return p->worker->d;
}

static void
sub_conflict(struct pending *p, enum wire_reason reason, const char *message)
{
	struct submission	*s = sub_of(p);
	const struct subtab_entry *e = &s->entry;
	const char		*schema = subtab_schema_name(e->schema);
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	json_t			*reply, *error, *existing;

	atomic_fetch_add(&idemd_of(p)->seg.header->counters.conflict, 1);
	reply = reply_new(0, p->id);
	json_object_set_new(reply, "disposition",
	    json_string(wire_disposition_name(DISPOSITION_CONFLICT)));
	json_object_set_new(reply, "action_taken", json_false());
	error = json_object();
	json_object_set_new(error, "code",
	    json_string(wire_error_name(WIRE_CONFLICT)));
	json_object_set_new(error, "reason",
	    json_string(wire_reason_name(reason)));
	json_object_set_new(error, "message", json_string(message));
	json_object_set_new(error, "retryable", json_false());
	json_object_set_new(reply, "error", error);
	existing = json_object();
	json_object_set_new(existing, "client_submission_id",
	    json_string(s->submission_id));
	json_object_set_new(existing, "state",
	    json_string(subtab_state_name(e->state)));
	json_object_set_new(existing, "digest_schema",
	    schema != NULL ? json_string(schema) : json_null());
	digest_to_hex(e->request_digest, hex);
	json_object_set_new(existing, "request_digest", json_string(hex));
	json_object_set_new(existing, s->ops->id_key, json_string(s->name));
	json_object_set_new(reply, "existing", existing);
	pending_reply(p, reply);
}

/* The backend's outcome, on the loop: count it and answer. */
static void
submission_done(struct pending *p, const struct backend_create_outcome *out)
{
	switch (out->result) {
	case BACKEND_CREATED:
	case BACKEND_REUSED:
		sub_of(p)->ops->answer(p, out->result == BACKEND_CREATED);
		break;
	case BACKEND_CONFLICT:
		sub_conflict(p, out->reason, out->message);
		break;
	case BACKEND_CREATE_FAILED:
		atomic_fetch_add(&idemd_of(p)->seg.header->counters.errors, 1);
		ops_reply_backend_error(p, &out->err);
		break;
	}
}

struct pending *
submission_pending_new(struct conn *conn, json_t *id, size_t op_size,
    void (*op_free)(void *), const struct submission_ops *ops)
{
	struct pending		*p;
	struct submission	*s;
	size_t			 room_offset = BACKEND_ROOM_OFFSET(op_size);

	if ((p = pending_new_op(conn, id, room_offset +
	    conn_idemd(conn)->be->create_state_size, op_free)) == NULL)
		return NULL;
	s = sub_of(p);
	s->backend_state = (char *)p->op + room_offset;
	s->ops = ops;
	return p;
}

void
submission_start(struct pending *p)
{
	struct submission	*s = sub_of(p);

	s->entry.kind = s->ops->kind;
	conn_peer(p->conn, &s->entry.peer_uid, &s->entry.peer_pid);
	if (s->submission_id == NULL)
		s->entry.schema = SUBTAB_SCHEMA_NONE;
	else {
		s->entry.schema = s->schema != 0 ? s->schema : s->ops->schema;
		memcpy(s->entry.request_digest, s->digest, IDEM_SHA256_BYTES);
	}
	idemd_of(p)->be->create(p, submission_done);
}
