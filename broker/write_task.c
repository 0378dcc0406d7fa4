/* SPDX-License-Identifier: ISC */
/*
 * write_task.c: the write_task op: a request read and checked by
 * write_task_check.c, its TASK file and its success reply.  The creation
 * itself is submission.c's (through the backend's create), the receipt
 * receipt.c's.
 */
#include <string.h>

#include "fastpath.h"
#include "idemd.h"
#include "backend.h"

static int
write_task_dir_fd(struct idemd *d)
{
	return d->inbox_fd;
}

static int
write_task_render(struct submission *sub, int64_t now, char **data,
    size_t *length)
{
	struct write_task	*wt = (struct write_task *)sub;
	struct taskfile_task	 tf;
	char			 at[TASKFILE_TIME_BYTES];

	taskfile_format_time(now, at);
	tf.task_id = sub->name;
	tf.task = &wt->norm.task;
	tf.created_at = at;
	tf.client_submission_id = sub->submission_id;
	tf.request_digest = sub->submission_id != NULL ? sub->digest_hex :
	    NULL;
	tf.fcop = wt->fcop ? &wt->fnorm.task : NULL;
	return taskfile_render_task(&tf, data, length);
}

static void
write_task_answer(struct pending *p, int created)
{
	struct submission	*sub = p->op;
	struct shm_counters	*counters = &p->worker->d->seg.header->counters;
	json_t			*reply, *receipt;

	if (sub->submission_id == NULL)
		atomic_fetch_add(&counters->legacy_created, 1);
	else
		atomic_fetch_add(created ? &counters->created :
		    &counters->reused, 1);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "disposition", json_string(
	    wire_disposition_name(created ? DISPOSITION_CREATED :
	    DISPOSITION_REUSED)));
	json_object_set_new(reply, "action_taken", json_boolean(created));
	json_object_set_new(reply, "idempotent",
	    json_boolean(sub->submission_id != NULL));
	if (sub->recovered)
		json_object_set_new(reply, "recovered", json_true());
	receipt = receipt_json(sub->key, sub->key_length, &sub->entry);
	if (sub->pruned) {
		/* Compacted: the tombstone's facts, no file digest kept. */
		json_object_del(receipt, "file_digest");
		json_object_set_new(reply, "receipt_pruned", json_true());
	}
	if (!created || sub->recovered)
		current_path_add(p->worker->d, reply, sub->name,
		    json_string_value(json_object_get(receipt, "task_path")));
	if (!((struct write_task *)sub)->fcop)
		fastpath_remember(p->worker->d, &((struct write_task *)sub)->fast,
		    sub, receipt);
	json_object_set_new(reply, "receipt", receipt);
	pending_reply(p, reply);
}

static const struct submission_ops write_task_ops = {
	.kind = SUBTAB_KIND_TASK,
	.schema = SUBTAB_SCHEMA_WRITE_TASK_V1,
	.crash_points = 1,
	.id_key = "task_id",
	.dir_fd = write_task_dir_fd,
	.render = write_task_render,
	.answer = write_task_answer,
};

void
op_write_task(struct conn *conn, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct write_task	*wt;
	struct pending		*p;
	const struct idem_task	*t;

	if ((p = submission_pending_new(conn, id, sizeof *wt, write_task_free,
	    &write_task_ops)) == NULL)
		return;
	wt = p->op;
	fastpath_hint_take(&p->worker->fast, &wt->fast);
	if (write_task_parse(wt, request, p->worker->d->root_fd, &err) != 0) {
		atomic_fetch_add(&p->worker->d->seg.header->counters.errors, 1);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	t = &wt->norm.task;
	wt->sub.entry.sender_length = (uint8_t)strlen(t->sender);
	memcpy(wt->sub.entry.sender, t->sender, wt->sub.entry.sender_length);
	wt->sub.entry.recipient_length = (uint8_t)strlen(t->recipient);
	memcpy(wt->sub.entry.recipient, t->recipient,
	    wt->sub.entry.recipient_length);
	submission_start(p);
}
