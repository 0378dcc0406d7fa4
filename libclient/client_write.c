/* SPDX-License-Identifier: ISC */
/*
 * client_write.c: the calls that write a file (SPEC.md, "Wire
 * protocol"): write_task and write_report, their requests (only the
 * fields the caller gave, in the order libidem has always sent them)
 * and their answers, the task's receipt among them (client_receipt, for
 * get_submission too), on client.c's connection.  A receipt of another
 * key, or a success that is neither created nor reused, is the answer
 * to another request: a protocol error that closes the connection.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"

/*
 * A receipt's string members; raw is filled separately.  required: in
 * a whole receipt; pruned: in a compacted task's (SPEC.md, "History and
 * retention": its tombstone keeps the id, schema, digest, task and
 * time, never the file's digest; a legacy task, without an id, is
 * never compacted).
 */
#define CLIENT_RECEIPT(member, required, pruned) { #member,		\
	offsetof(struct idem_receipt, member),				\
	sizeof ((struct idem_receipt *)NULL)->member, required, pruned }
static const struct {
	const char	*key;
	size_t		 offset;
	size_t		 size;
	int		 required;
	int		 pruned;
} client_receipt_fields[] = {
	/* A legacy task has no submission id, schema or request digest. */
	CLIENT_RECEIPT(client_submission_id, 0, 1),
	CLIENT_RECEIPT(task_id, 1, 1),
	CLIENT_RECEIPT(task_path, 1, 1),
	CLIENT_RECEIPT(digest_schema, 0, 1),
	CLIENT_RECEIPT(request_digest, 0, 1),
	CLIENT_RECEIPT(file_digest, 1, 0),
	CLIENT_RECEIPT(state, 1, 1),
	CLIENT_RECEIPT(created_at, 1, 1),
};
#undef CLIENT_RECEIPT

static json_t *
client_list(const char *key, const char *const *items, size_t count,
    struct idem_error *err)
{
	json_t	*array, *v;
	char	 field[64];
	size_t	 i;

	if ((array = json_array()) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return NULL;
	}
	for (i = 0; i < count; i++) {
		snprintf(field, sizeof field, "task.%s[%zu]", key, i);
		if (items[i] == NULL) {
			client_error(err, IDEM_E_ARGUMENT, "%s is NULL", field);
			snprintf(err->field, sizeof err->field, "%s", field);
			break;
		}
		if ((v = client_string(items[i], field, err)) == NULL)
			break;
		if (json_array_append_new(array, v) != 0) {
			client_error(err, IDEM_E_NOMEM, "out of memory");
			break;
		}
	}
	if (i < count) {
		json_decref(array);
		return NULL;
	}
	return array;
}

/* A string member of a task or a report: where the caller's struct has it. */
struct client_field {
	const char	*key;
	size_t		 offset;	/* of a const char * */
};
#define CLIENT_FIELD(type, member)					\
	{ #member, offsetof(type, member) }
static const struct client_field client_task_fields[] = {
	CLIENT_FIELD(struct idem_task, sender),
	CLIENT_FIELD(struct idem_task, recipient),
	CLIENT_FIELD(struct idem_task, subject),
	CLIENT_FIELD(struct idem_task, body),
	CLIENT_FIELD(struct idem_task, priority),
	CLIENT_FIELD(struct idem_task, risk_level),
	CLIENT_FIELD(struct idem_task, thread_key),
	CLIENT_FIELD(struct idem_task, parent),
};
static const struct client_field client_report_fields[] = {
	CLIENT_FIELD(struct idem_report, sender),
	CLIENT_FIELD(struct idem_report, recipient),
	CLIENT_FIELD(struct idem_report, status),
	CLIENT_FIELD(struct idem_report, body),
};
#undef CLIENT_FIELD

/*
 * The fields of from (a task or a report, named what in err->field) into
 * object, in the table's order: only those the caller gave.
 */
static int
client_put_fields(json_t *object, const char *what, const void *from,
    const struct client_field *fields, size_t count, struct idem_error *err)
{
	const char	*value;
	char		 field[64];
	size_t		 i;

	for (i = 0; i < count; i++) {
		value = *(const char *const *)(const void *)
		    ((const char *)from + fields[i].offset);
		if (value == NULL)
			continue;
		snprintf(field, sizeof field, "%s.%s", what, fields[i].key);
		if (client_set(object, fields[i].key, client_string(value,
		    field, err), err) != 0)
			return -1;
	}
	return 0;
}

/* The write_task request: only the fields the caller gave. */
static json_t *
client_task_request(const char *client_submission_id,
    const struct idem_task *task, struct idem_error *err)
{
	json_t	*request, *t;

	if ((task->references == NULL && task->references_count != 0) ||
	    (task->depends_on == NULL && task->depends_on_count != 0)) {
		client_error(err, IDEM_E_ARGUMENT,
		    "a list with a count has no items");
		return NULL;
	}
	if ((request = client_request_new(IDEM_OPC_WRITE_TASK, "task", &t,
	    NULL, client_submission_id, err)) == NULL)
		return NULL;
	if (client_put_fields(t, "task", task, client_task_fields,
	    nitems(client_task_fields), err) != 0 ||
	    (task->references != NULL && client_set(t, "references",
	    client_list("references", task->references,
	    task->references_count, err), err) != 0) ||
	    (task->depends_on != NULL && client_set(t, "depends_on",
	    client_list("depends_on", task->depends_on,
	    task->depends_on_count, err), err) != 0)) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/*
 * The receipt member of holder (a write_task answer, a submission):
 * a compacted task's when holder says "receipt_pruned":true.
 */
int
client_receipt(json_t *holder, struct idem_receipt *r,
    struct idem_error *err)
{
	json_t	*receipt = json_object_get(holder, "receipt");
	char	*raw;
	size_t	 i, length;
	int	 pruned;

	if (!json_is_object(receipt)) {
		client_error(err, IDEM_E_PROTOCOL, "response lacks a receipt");
		return -1;
	}
	pruned = json_is_true(json_object_get(holder, "receipt_pruned"));
	for (i = 0; i < nitems(client_receipt_fields); i++)
		if (client_copy(receipt, client_receipt_fields[i].key,
		    (char *)r + client_receipt_fields[i].offset,
		    client_receipt_fields[i].size, pruned ?
		    client_receipt_fields[i].pruned :
		    client_receipt_fields[i].required, err) != 0)
			return -1;

	/* jansson keeps members in the order read: the broker's bytes. */
	raw = json_dumps(receipt, JSON_COMPACT|JSON_PRESERVE_ORDER);
	if (raw == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		return -1;
	}
	if ((length = strlen(raw)) >= sizeof r->raw) {
		client_error(err, IDEM_E_PROTOCOL,
		    "receipt over %zu bytes", sizeof r->raw - 1);
		free(raw);
		return -1;
	}
	memcpy(r->raw, raw, length + 1);
	free(raw);
	return 0;
}

static int
client_write_result(json_t *response, const char *client_submission_id,
    struct idem_write_result *result, struct idem_error *err)
{
	json_t			*existing;
	enum client_disposition	 disposition;

	disposition = client_disposition(json_string_value(json_object_get(
	    response, "disposition")));
	if (client_bool(response, "action_taken", &result->action_taken,
	    err) != 0 ||
	    client_bool(response, "idempotent", &result->idempotent,
	    err) != 0 ||
	    client_bool(response, "recovered", &result->recovered, err) != 0)
		return -1;

	if (!json_is_true(json_object_get(response, "ok"))) {
		if (disposition != CLIENT_DISPOSITION_CONFLICT) {
			client_wire_error(response, err);
			return -1;
		}
		existing = json_object_get(response, "existing");
		if (!json_is_object(existing)) {
			client_error(err, IDEM_E_PROTOCOL,
			    "conflict without an existing binding");
			return -1;
		}
		if (client_copy(existing, "request_digest",
		    result->existing_request_digest,
		    sizeof result->existing_request_digest, 1, err) != 0 ||
		    client_copy(existing, "task_id", result->existing_task_id,
		    sizeof result->existing_task_id, 1, err) != 0)
			return -1;
		/* Any other code is the broker's own error: pass it on. */
		client_wire_error(response, err);
		if (err->code != IDEM_E_CONFLICT)
			return -1;
		result->disposition = IDEM_CONFLICT;
		return 0;
	}

	if (disposition != CLIENT_DISPOSITION_CREATED &&
	    disposition != CLIENT_DISPOSITION_REUSED) {
		client_error(err, IDEM_E_PROTOCOL,
		    "ok response without created or reused disposition");
		return -1;
	}
	if (client_receipt(response, &result->receipt, err) != 0 ||
	    client_copy(response, "current_path", result->current_path,
	    sizeof result->current_path, 0, err) != 0)
		return -1;
	/*
	 * A receipt of another key is the answer to another request (a
	 * legacy call's names none).
	 */
	if (client_submission_id != NULL &&
	    result->receipt.client_submission_id[0] != '\0' &&
	    strcmp(result->receipt.client_submission_id,
	    client_submission_id) != 0) {
		client_error(err, IDEM_E_PROTOCOL, "the receipt is of "
		    "client_submission_id %s, not %s",
		    result->receipt.client_submission_id,
		    client_submission_id);
		return -1;
	}
	result->disposition = disposition == CLIENT_DISPOSITION_CREATED ?
	    IDEM_CREATED : IDEM_REUSED;
	return 0;
}

/* One write_task request; attempts is the caller's to count. */
int
client_write_task(struct idem_conn *conn, const char *client_submission_id,
    const struct idem_task *task, struct idem_write_result *result,
    struct idem_error *err)
{
	json_t	*request, *response;
	int	 rc;

	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if ((request = client_task_request(client_submission_id, task,
	    err)) == NULL)
		return -1;
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	rc = client_write_result(response, client_submission_id, result, err);
	json_decref(response);
	if (rc != 0)
		memset(result, 0, sizeof *result);
	return client_done(conn, rc, err);
}

int
idem_write_task(struct idem_conn *conn, const char *client_submission_id,
    const struct idem_task *task, struct idem_write_result *result,
    struct idem_error *err)
{
	struct idem_error	scratch;
	int			rc;

	if (err == NULL)
		err = &scratch;
	rc = client_write_task(conn, client_submission_id, task, result, err);
	result->attempts = 1;
	return rc;
}

/* ---- write_report ------------------------------------------------------ */

/* The write_report request: only the fields the caller gave. */
static json_t *
client_report_request(const char *task_id, const char *client_submission_id,
    const struct idem_report *report, struct idem_error *err)
{
	json_t	*request, *r;

	if (task_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "task_id is required");
		snprintf(err->field, sizeof err->field, "task_id");
		return NULL;
	}
	if ((request = client_request_new(IDEM_OPC_WRITE_REPORT, "report", &r,
	    task_id, client_submission_id, err)) == NULL)
		return NULL;
	if (client_put_fields(r, "report", report, client_report_fields,
	    nitems(client_report_fields), err) != 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

static int
client_report_result(json_t *response, struct idem_report_result *result,
    struct idem_error *err)
{
	json_t	*existing;

	if (client_bool(response, "recovered", &result->recovered, err) != 0)
		return -1;
	if (!json_is_true(json_object_get(response, "ok"))) {
		client_wire_error(response, err);
		if (err->code != IDEM_E_CONFLICT)
			return -1;
		/*
		 * SPEC.md fixes no shape for a report conflict beyond its
		 * code: take the binding when the broker names it.
		 * client_copy writes err only when it fails.
		 */
		existing = json_object_get(response, "existing");
		if (json_is_object(existing) && (client_copy(existing,
		    "request_digest", result->existing_request_digest,
		    sizeof result->existing_request_digest, 0, err) != 0 ||
		    client_copy(existing, "report_id",
		    result->existing_report_id,
		    sizeof result->existing_report_id, 0, err) != 0))
			return -1;
		result->disposition = IDEM_CONFLICT;
		return 0;
	}
	if (!json_is_boolean(json_object_get(response, "deduplicated"))) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response deduplicated is not a boolean");
		return -1;
	}
	result->deduplicated = json_is_true(json_object_get(response,
	    "deduplicated"));
	if (client_copy(response, "report_id", result->report_id,
	    sizeof result->report_id, 1, err) != 0 ||
	    client_copy(response, "report_path", result->report_path,
	    sizeof result->report_path, 1, err) != 0)
		return -1;
	result->disposition = result->deduplicated ? IDEM_REUSED :
	    IDEM_CREATED;
	return 0;
}

int
idem_write_report(struct idem_conn *conn, const char *task_id,
    const char *client_submission_id, const struct idem_report *report,
    struct idem_report_result *result, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response;
	int			 rc;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if ((request = client_report_request(task_id, client_submission_id,
	    report, err)) == NULL)
		return -1;
	response = client_call_json(conn, request, err);
	json_decref(request);
	if (response == NULL)
		return -1;
	rc = client_report_result(response, result, err);
	json_decref(response);
	if (rc != 0)
		memset(result, 0, sizeof *result);
	return client_done(conn, rc, err);
}

