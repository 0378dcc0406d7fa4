/* SPDX-License-Identifier: ISC */
/*
 * write_report.c: the write_report op.  A report is deduplicated by
 * (task_id, client_submission_id) and the write-report-v1 digest of its
 * normalized content, through the same durable state machine as tasks
 * (submission.c, the backend's create); without an id every call writes a new REPORT file.
 * The request is read and checked by write_report_check.c.
 */
#include <errno.h>
#include <string.h>

#include "idemd.h"
#include "backend.h"

static int
write_report_dir_fd(struct idemd *d)
{
	return d->reports_fd;
}

static int
write_report_render(struct submission *sub, int64_t now, char **data,
    size_t *length)
{
	struct write_report	*wr = (struct write_report *)sub;
	struct taskfile_report	 rf;
	char			 at[TASKFILE_TIME_BYTES];

	taskfile_format_time(now, at);
	rf.report_id = sub->name;
	rf.task_id = wr->task_id;
	rf.report = &wr->report;
	rf.created_at = at;
	rf.client_submission_id = sub->submission_id;
	rf.request_digest = sub->submission_id != NULL ? sub->digest_hex :
	    NULL;
	return taskfile_render_report(&rf, data, length);
}

static void
write_report_answer(struct pending *p, int created)
{
	struct submission	*sub = p->op;
	struct shm_counters	*counters = &p->worker->d->seg.header->counters;
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	json_t			*reply;

	atomic_fetch_add(created ? &counters->reports_created :
	    &counters->reports_deduplicated, 1);
	taskfile_format_path(SUBTAB_KIND_REPORT, sub->name, path, sizeof path);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "deduplicated", json_boolean(!created));
	json_object_set_new(reply, "report_id", json_string(sub->name));
	json_object_set_new(reply, "report_path", json_string(path));
	if (sub->recovered)
		json_object_set_new(reply, "recovered", json_true());
	if (sub->pruned)
		json_object_set_new(reply, "receipt_pruned", json_true());
	pending_reply(p, reply);
}

static const struct submission_ops write_report_ops = {
	.kind = SUBTAB_KIND_REPORT,
	.schema = SUBTAB_SCHEMA_WRITE_REPORT_V1,
	.crash_points = 1,
	.id_key = "report_id",
	.dir_fd = write_report_dir_fd,
	.render = write_report_render,
	.answer = write_report_answer,
};

void
op_write_report(struct conn *conn, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct write_report	*wr;
	struct pending		*p;
	struct idemd		*d = conn_idemd(conn);
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	int			 found;

	if ((p = submission_pending_new(conn, id, sizeof *wr,
	    write_report_free, &write_report_ops)) == NULL)
		return;
	wr = p->op;
	if (write_report_parse(wr, request, &err) != 0) {
		atomic_fetch_add(&d->seg.header->counters.errors, 1);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	found = taskfile_find(d->root_fd, wr->task_id, path, sizeof path);
	if (found <= 0) {
		atomic_fetch_add(&d->seg.header->counters.errors, 1);
		if (found < 0)
			request_storage_error(&err, errno, "looking for the task");
		else
			request_error_set(&err, WIRE_TASK_NOT_FOUND, "task_id",
			    "no task %s in the workspace", wr->task_id);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	wr->sub.entry.sender_length = (uint8_t)strlen(wr->report.sender);
	memcpy(wr->sub.entry.sender, wr->report.sender,
	    wr->sub.entry.sender_length);
	wr->sub.entry.recipient_length = (uint8_t)strlen(wr->report.recipient);
	memcpy(wr->sub.entry.recipient, wr->report.recipient,
	    wr->sub.entry.recipient_length);
	submission_start(p);
}
