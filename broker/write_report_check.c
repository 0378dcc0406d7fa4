/* SPDX-License-Identifier: ISC */
/*
 * write_report_check.c: reading a write_report request into a struct
 * write_report: the task it reports on, the report's fields, their
 * normalization and the write-report-v1 digest.  write_report.c carries
 * it out; write_report_check(), the op table's check, reads a request
 * the same way and changes nothing.  Nothing here touches the segment,
 * the journal, a file or a connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "idemd.h"

static const char *const report_request_keys[] = {
	"op", "id", "task_id", "client_submission_id", "report", "meta", NULL
};
static const char *const report_keys[] = {
	"sender", "recipient", "status", "body", NULL
};
static const char *const report_statuses[] = {
#define REPORT_STATUS(code, name)	name,
	IDEM_REPORT_STATUSES(REPORT_STATUS)
#undef REPORT_STATUS
	NULL
};

void
write_report_free(void *arg)
{
	struct write_report	*wr = arg;

	free(wr->body);
	free(wr);
}

/*
 * TASK-YYYYMMDD-NNN-SENDER-to-RECIPIENT (the recipient may carry an FCoP
 * slot, DEV.D1), strictly: the id names a file
 * we look for, so nothing but that shape may pass.  The sender is copied
 * out: it is the default recipient of a report.
 */
static int
task_id_valid(const char *id, size_t length, char sender[IDEM_MAX_ROLE_BYTES + 1])
{
	const char	*p = id, *end = id + length, *to, *digits;

	if (length > IDEM_MAX_TASK_ID_BYTES || strncmp(p, "TASK-", 5) != 0)
		return 0;
	p += 5;
	for (digits = p; p < end && *p >= '0' && *p <= '9'; p++)
		;
	if (p - digits != 8 || p == end || *p++ != '-')
		return 0;
	for (digits = p; p < end && *p >= '0' && *p <= '9'; p++)
		;
	if (p - digits < 3 || p == end || *p++ != '-')
		return 0;
	/* Role codes are upper case: the first "-to-" is the separator. */
	if ((to = strstr(p, "-to-")) == NULL || to >= end)
		return 0;
	if (!digest_role_code_valid(p, (size_t)(to - p)) ||
	    !digest_recipient_valid(to + 4, (size_t)(end - to - 4)))
		return 0;
	memcpy(sender, p, (size_t)(to - p));
	sender[to - p] = '\0';
	return 1;
}

static int
report_role(json_t *report, const char *key, const char *path,
    const char **value, struct request_error *err)
{
	size_t	length;
	int	rc;

	rc = request_string(report, key, path, 1, IDEM_MAX_ROLE_BYTES, 0,
	    value, &length, err);
	if (rc < 0)
		return -1;
	if (rc > 0 && !digest_role_code_valid(*value, length))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be an FCoP role code such as PM or DEV_01", path);
	return rc;
}

int
write_report_parse(struct write_report *wr, json_t *request,
    struct request_error *err)
{
	struct submission	*sub = &wr->sub;
	const char		*task_id, *id, *body, *status, *sender;
	const char		*recipient;
	char			 task_sender[IDEM_MAX_ROLE_BYTES + 1];
	size_t			 length, body_length;
	json_t			*report, *meta;
	char			*canonical;
	int			 rc;

	if (request_known_keys(request, "", report_request_keys, err) != 0)
		return -1;
	rc = request_string(request, "task_id", "task_id", 1,
	    IDEM_MAX_TASK_ID_BYTES, 0, &task_id, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST, "task_id",
		    "task_id is required");
	if (!task_id_valid(task_id, length, task_sender))
		return request_error_set(err, WIRE_INVALID_REQUEST, "task_id",
		    "task_id must name a task, TASK-YYYYMMDD-NNN-SENDER-to-"
		    "RECIPIENT");
	memcpy(wr->task_id, task_id, length + 1);
	if (request_submission_id(request, &id, err) < 0)
		return -1;
	meta = json_object_get(request, "meta");
	if (meta != NULL && !json_is_object(meta))
		return request_error_set(err, WIRE_INVALID_REQUEST, "meta",
		    "meta must be an object");
	report = json_object_get(request, "report");
	if (report == NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST, "report",
		    "report is required");
	if (!json_is_object(report))
		return request_error_set(err, WIRE_INVALID_REQUEST, "report",
		    "report must be an object");
	if (request_known_keys(report, "report", report_keys, err) != 0)
		return -1;
	rc = report_role(report, "sender", "report.sender", &sender, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "report.sender", "report.sender is required");
	if (report_role(report, "recipient", "report.recipient", &recipient,
	    err) < 0)
		return -1;
	snprintf(wr->sender, sizeof wr->sender, "%s", sender);
	snprintf(wr->recipient, sizeof wr->recipient, "%s",
	    recipient != NULL ? recipient : task_sender);
	wr->report.sender = wr->sender;
	wr->report.recipient = wr->recipient;
	if (request_string(report, "status", "report.status", 1, 16, 0,
	    &status, &length, err) < 0)
		return -1;
	if (status == NULL)
		status = "done";
	else if (!request_one_of(status, report_statuses))
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "report.status", "report.status must be done, blocked, "
		    "in_progress or aborted");
	snprintf(wr->status, sizeof wr->status, "%s", status);
	wr->report.status = wr->status;
	if (request_string(report, "body", "report.body", 0,
	    IDEM_MAX_BODY_BYTES, 0, &body, &body_length, err) < 0)
		return -1;
	wr->body = digest_normalize_string(body != NULL ? body : "",
	    body != NULL ? body_length : 0, &body_length);
	if (wr->body == NULL)
		return request_error_set(err, errno == EILSEQ ?
		    WIRE_INVALID_UTF8 : WIRE_INTERNAL, "report.body",
		    "report.body could not be normalized");
	wr->report.body = wr->body;
	if (idem_report_canonical(wr->task_id, &wr->report, &canonical,
	    &length) != 0)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "canonical form: %s", strerror(errno));
	digest_sha256(canonical, length, sub->digest);
	free(canonical);
	digest_to_hex(sub->digest, sub->digest_hex);

	/* The dedup key: the task, then the submission id. */
	if (id != NULL) {
		length = strlen(wr->task_id);
		memcpy(sub->key, wr->task_id, length);
		sub->key[length] = '\n';
		memcpy(sub->key + length + 1, id, strlen(id) + 1);
		sub->key_length = length + 1 + strlen(id);
		sub->submission_id = sub->key + length + 1;
	}
	return 0;
}

/* Check a write_report request as op_write_report would; changes nothing. */
int
write_report_check(json_t *request, struct request_error *err)
{
	struct write_report	*wr;
	int			 rc;

	if ((wr = calloc(1, sizeof *wr)) == NULL)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "out of memory");
	rc = write_report_parse(wr, request, err);
	write_report_free(wr);
	return rc;
}
