/* SPDX-License-Identifier: ISC */
/*
 * write_task_check.c: reading a write_task request into a struct
 * write_task: its task checked against the contract's table of fields,
 * its digest (write-task-v1, or FCoP 4's candidate fcop-create-task-v1
 * with its workspace from ROOT/fcop.json).  write_task.c carries it out;
 * write_task_check(), the op table's check, reads a request the same way
 * and changes nothing.  Nothing here touches the segment, the journal or
 * a connection: the fuzzer links this file without the worker.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "idemd.h"

static const char *const request_keys[] = {
	"op", "id", "client_submission_id", "digest_schema", "request_digest",
	"workspace_id", "task", "meta", NULL
};
static const char *const task_keys[] = {
	"sender", "recipient", "subject", "body", "priority", "risk_level",
	"thread_key", "parent", "references", "depends_on", NULL
};
/* fcop-create-task-v1 digests these, and takes nothing else. */
static const char *const fcop_task_keys[] = {
	"sender", "recipient", "subject", "body", "priority", "parent",
	"branch_of", "references", NULL
};

void
write_task_free(void *arg)
{
	struct write_task	*wt = arg;

	digest_task_normalized_free(&wt->norm);
	digest_fcop_normalized_free(&wt->fnorm);
	free(wt->lists);
	free(wt);
}

/* sender, or with slot the recipient, which may be ROLE.SLOT (DEV.D1). */
static int
role_field(json_t *task, const char *key, const char *path, int slot,
    const char **value, struct request_error *err)
{
	size_t	length;
	int	rc;

	rc = request_string(task, key, path, 1, slot ?
	    IDEM_MAX_RECIPIENT_BYTES : IDEM_MAX_ROLE_BYTES, 0, value, &length,
	    err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s is required", path);
	if (slot ? !digest_recipient_valid(*value, length) :
	    !digest_role_code_valid(*value, length))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be an FCoP role code such as PM, DEV_01 or "
		    "LEAD-QA (upper case, at most %d characters)%s", path,
		    IDEM_MAX_ROLE_BYTES, slot ? ", or a role and a slot "
		    "such as DEV.D1" : "");
	return 0;
}

static int
enum_field(json_t *task, const char *key, const char *path,
    const char *const *allowed, const char **value, struct request_error *err)
{
	size_t	length;

	if (request_string(task, key, path, 1, 32, 1, value, &length,
	    err) < 0)
		return -1;
	if (*value != NULL && !request_one_of(*value, allowed))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be one of the values SPEC.md lists", path);
	return 0;
}

/* references or depends_on: strings 1..256 bytes, at most 256 of them. */
static int
list_field(json_t *task, const char *key, const char **out, size_t *count,
    struct request_error *err)
{
	json_t	*list = json_object_get(task, key), *item;
	char	 path[64];
	size_t	 i, length;

	*count = 0;
	snprintf(path, sizeof path, "task.%s", key);
	/* null means the default, as for every optional field. */
	if (list == NULL || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be an array of strings", path);
	if (json_array_size(list) > IDEM_MAX_LIST_ITEMS)
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s has more than %d items", path, IDEM_MAX_LIST_ITEMS);
	json_array_foreach(list, i, item) {
		if (!json_is_string(item))
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    path, "%s[%zu] must be a string", path, i);
		length = json_string_length(item);
		if (memchr(json_string_value(item), '\0', length) != NULL)
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    path, "%s[%zu] contains a NUL character", path, i);
		if (length < 1 || length > IDEM_MAX_REF_BYTES)
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    path, "%s[%zu] must be 1 to %d bytes long", path, i,
			    IDEM_MAX_REF_BYTES);
		out[i] = json_string_value(item);
	}
	*count = json_array_size(list);
	return 0;
}

/* "task" is there and an object, under either schema. */
static int
task_given(json_t *task, struct request_error *err)
{
	if (task == NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST, "task",
		    "task is required");
	if (!json_is_object(task))
		return request_error_set(err, WIRE_INVALID_REQUEST, "task",
		    "task must be an object");
	return 0;
}

/* Check every field of "task" and fill an idem_task pointing into it. */
static int
task_from_json(json_t *task, struct idem_task *t, const char **lists,
    struct request_error *err)
{
	static const char *const priorities[] = { "P0", "P1", "P2", "P3", NULL };
	static const char *const risks[] = {
		"low", "medium", "high", "irreversible", NULL
	};
	size_t	length;
	int	rc;

	memset(t, 0, sizeof *t);
	if (task_given(task, err) != 0)
		return -1;
	if (request_known_keys(task, "task", task_keys, err) != 0)
		return -1;
	if (role_field(task, "sender", "task.sender", 0, &t->sender,
	    err) != 0 ||
	    role_field(task, "recipient", "task.recipient", 1, &t->recipient,
	    err) != 0)
		return -1;
	rc = request_string(task, "subject", "task.subject", 1,
	    IDEM_MAX_SUBJECT_BYTES, 0, &t->subject, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "task.subject", "task.subject is required");
	if (request_string(task, "body", "task.body", 0, IDEM_MAX_BODY_BYTES,
	    1, &t->body, &length, err) < 0 ||
	    enum_field(task, "priority", "task.priority", priorities,
	    &t->priority, err) != 0 ||
	    enum_field(task, "risk_level", "task.risk_level", risks,
	    &t->risk_level, err) != 0 ||
	    request_string(task, "thread_key", "task.thread_key", 1,
	    IDEM_MAX_REF_BYTES, 1, &t->thread_key, &length, err) < 0 ||
	    request_string(task, "parent", "task.parent", 1,
	    IDEM_MAX_REF_BYTES, 1, &t->parent, &length, err) < 0)
		return -1;
	if (list_field(task, "references", lists, &t->references_count,
	    err) != 0 ||
	    list_field(task, "depends_on", lists + IDEM_MAX_LIST_ITEMS,
	    &t->depends_on_count, err) != 0)
		return -1;
	t->references = lists;
	t->depends_on = lists + IDEM_MAX_LIST_ITEMS;
	return 0;
}

/* parent or branch_of under fcop-create-task-v1: a TASK id, or null. */
static int
fcop_task_ref(json_t *task, const char *key, const char *path,
    const char **value, struct request_error *err)
{
	size_t	length;

	if (request_string(task, key, path, 1, IDEM_MAX_REF_BYTES, 1, value,
	    &length, err) < 0)
		return -1;
	if (*value != NULL && !digest_fcop_task_ref_valid(*value, length))
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s must be a task id (TASK-, then letters, digits, "
		    "\".\", \"_\" or \"-\") under %s", path,
		    IDEM_SCHEMA_FCOP_CREATE_TASK_V1);
	return 0;
}

/*
 * The workspace's id for fcop-create-task-v1: its FCoP 4 declaration,
 * ROOT/fcop.json (root_fd -1: no workspace, as for request_check_line;
 * then the request's, or a placeholder).  A request may name it too, and
 * must then name the same one (FCoP 4's WORKSPACE_ID_MISMATCH).
 */
static int
fcop_workspace(json_t *request, int root_fd, char *out,
    struct request_error *err)
{
	const char	*given, *cause;
	size_t		 length;
	int		 rc;

	if (request_string(request, "workspace_id", "workspace_id", 1, 64, 0,
	    &given, &length, err) < 0)
		return -1;
	if (given != NULL && !digest_fcop_workspace_id_valid(given, length))
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "workspace_id",
		    "workspace_id must be urn:uuid: and a lower-case UUID");
	if (root_fd == -1) {
		snprintf(out, IDEM_WORKSPACE_ID_BYTES + 1, "%s", given != NULL ?
		    given : "urn:uuid:00000000-0000-0000-0000-000000000000");
		return 0;
	}
	rc = taskfile_workspace_id(root_fd, out, &cause);
	if (rc < 0) {
		request_error_set(err, WIRE_STORAGE_UNAVAILABLE, NULL,
		    "reading %s: %s", IDEM_FCOP_DECLARATION_NAME,
		    strerror(errno));
		err->retryable = 1;
		return -1;
	}
	if (rc == 0)
		return request_error_set(err, WIRE_UNSUPPORTED_SCHEMA,
		    "digest_schema", "%s needs the workspace's FCoP 4 "
		    "declaration: %s", IDEM_SCHEMA_FCOP_CREATE_TASK_V1, cause);
	if (given != NULL && strcmp(given, out) != 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "workspace_id",
		    "workspace_id %s is not this workspace's (%s, from %s)",
		    given, out, IDEM_FCOP_DECLARATION_NAME);
	return 0;
}

/*
 * A task under fcop-create-task-v1 (FCoP 4.0's C7): its fields checked,
 * normalized and digested into sub->digest; norm.task is set to view the
 * same strings, for the TASK file.
 */
static int
fcop_parse(struct write_task *wt, json_t *request, int root_fd,
    struct request_error *err)
{
	static const char *const priorities[] = { "P0", "P1", "P2", "P3", NULL };
	struct submission	*sub = &wt->sub;
	struct idem_fcop_task	 t;
	json_t			*task = json_object_get(request, "task");
	char			 workspace[IDEM_WORKSPACE_ID_BYTES + 1];
	char			*canonical;
	size_t			 length, count;
	static const char *const excluded[] = { "thread_key", "risk_level",
				    "depends_on" };
	char			 path[32];
	size_t			 i;

	memset(&t, 0, sizeof t);
	if (sub->submission_id == NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "client_submission_id", "%s needs client_submission_id "
		    "(it is the operation_id): no legacy calls",
		    IDEM_SCHEMA_FCOP_CREATE_TASK_V1);
	if (!digest_fcop_operation_id_valid(sub->submission_id,
	    sub->key_length))
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "client_submission_id", "under %s client_submission_id is "
		    "the operation_id: 1 to %d characters of letters, digits, "
		    "\".\", \"_\", \":\" and \"-\", starting with a letter or "
		    "digit", IDEM_SCHEMA_FCOP_CREATE_TASK_V1,
		    IDEM_MAX_OPERATION_ID_BYTES);
	if (task_given(task, err) != 0)
		return -1;
	/* Fields FCoP 4 leaves out of the digest are refused, not ignored. */
	for (i = 0; i < sizeof excluded / sizeof excluded[0]; i++) {
		if (json_object_get(task, excluded[i]) == NULL)
			continue;
		snprintf(path, sizeof path, "task.%s", excluded[i]);
		return request_error_set(err, WIRE_INVALID_REQUEST, path,
		    "%s is not part of %s (it would escape the digest)", path,
		    IDEM_SCHEMA_FCOP_CREATE_TASK_V1);
	}
	if (request_known_keys(task, "task", fcop_task_keys, err) != 0 ||
	    role_field(task, "sender", "task.sender", 0, &t.sender,
	    err) != 0 ||
	    role_field(task, "recipient", "task.recipient", 1, &t.recipient,
	    err) != 0)
		return -1;
	if (request_string(task, "subject", "task.subject", 1,
	    IDEM_MAX_SUBJECT_BYTES, 0, &t.subject, &length, err) < 0)
		return -1;
	if (t.subject == NULL)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "task.subject", "task.subject is required");
	if (request_string(task, "body", "task.body", 0, IDEM_MAX_BODY_BYTES,
	    1, &t.body, &length, err) < 0 ||
	    enum_field(task, "priority", "task.priority", priorities,
	    &t.priority, err) != 0 ||
	    fcop_task_ref(task, "parent", "task.parent", &t.parent, err) != 0 ||
	    fcop_task_ref(task, "branch_of", "task.branch_of", &t.branch_of,
	    err) != 0 ||
	    list_field(task, "references", wt->lists, &count, err) != 0)
		return -1;
	t.references = wt->lists;
	t.references_count = count;
	if (fcop_workspace(request, root_fd, workspace, err) != 0)
		return -1;
	t.workspace_id = workspace;
	t.operation_id = sub->submission_id;

	if (digest_fcop_normalize(&t, &wt->fnorm) != 0) {
		if (errno == EILSEQ)
			return request_error_set(err, WIRE_INVALID_UTF8, "task",
			    "task holds invalid UTF-8");
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "normalizing the task: %s", strerror(errno));
	}
	if (digest_fcop_canonical_normalized(&wt->fnorm.task, &canonical,
	    &length) != 0)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "canonical form: %s", strerror(errno));
	digest_sha256(canonical, length, sub->digest);
	free(canonical);

	/* The TASK file's view of the same strings. */
	memset(&wt->norm.task, 0, sizeof wt->norm.task);
	wt->norm.task.sender = wt->fnorm.task.sender;
	wt->norm.task.recipient = wt->fnorm.task.recipient;
	wt->norm.task.subject = wt->fnorm.task.subject;
	wt->norm.task.body = wt->fnorm.task.body;
	wt->norm.task.priority = wt->fnorm.task.priority;
	wt->norm.task.parent = wt->fnorm.task.parent;
	wt->norm.task.references = wt->fnorm.task.references;
	wt->norm.task.references_count = wt->fnorm.task.references_count;
	wt->fcop = 1;
	sub->schema = SUBTAB_SCHEMA_FCOP_CREATE_TASK_V1;
	return 0;
}

/* Everything a write_task request says, checked; 0 or -1 with err. */
int
write_task_parse(struct write_task *wt, json_t *request, int root_fd,
    struct request_error *err)
{
	struct submission	*sub = &wt->sub;
	struct idem_task	 task;
	const char		*schema, *given, *id;
	size_t			 length;
	uint8_t			 given_digest[IDEM_SHA256_BYTES];
	char			*canonical;
	size_t			 canonical_length;
	json_t			*meta;
	int			 fcop;

	if (request_known_keys(request, "", request_keys, err) != 0)
		return -1;
	if (request_submission_id(request, &id, err) < 0)
		return -1;
	if (id != NULL) {
		sub->key_length = strlen(id);
		memcpy(sub->key, id, sub->key_length + 1);
		sub->submission_id = sub->key;
	}
	if (request_string(request, "digest_schema", "digest_schema", 1, 64, 0,
	    &schema, &length, err) < 0)
		return -1;
	fcop = schema != NULL &&
	    strcmp(schema, IDEM_SCHEMA_FCOP_CREATE_TASK_V1) == 0;
	if (schema != NULL && !fcop &&
	    strcmp(schema, IDEM_SCHEMA_WRITE_TASK_V1) != 0)
		return request_error_set(err, WIRE_UNSUPPORTED_SCHEMA,
		    "digest_schema", "digest_schema \"%.64s\" is not supported "
		    "(supported: %s, %s)", schema, IDEM_SCHEMA_WRITE_TASK_V1,
		    IDEM_SCHEMA_FCOP_CREATE_TASK_V1);
	if (request_string(request, "request_digest", "request_digest", 64, 64,
	    0, &given, &length, err) < 0)
		return -1;
	if (given != NULL && digest_from_hex(given, given_digest) != 0)
		return request_error_set(err, WIRE_INVALID_REQUEST,
		    "request_digest", "request_digest must be 64 lower-case "
		    "hex digits");
	meta = json_object_get(request, "meta");
	if (meta != NULL && !json_is_object(meta))
		return request_error_set(err, WIRE_INVALID_REQUEST, "meta",
		    "meta must be an object");

	wt->lists = calloc(2 * IDEM_MAX_LIST_ITEMS, sizeof *wt->lists);
	if (wt->lists == NULL)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "out of memory");
	if (fcop) {
		if (fcop_parse(wt, request, root_fd, err) != 0)
			return -1;
	} else {
		if (json_object_get(request, "workspace_id") != NULL)
			return request_error_set(err, WIRE_INVALID_REQUEST,
			    "workspace_id", "workspace_id belongs to %s only",
			    IDEM_SCHEMA_FCOP_CREATE_TASK_V1);
		if (task_from_json(json_object_get(request, "task"), &task,
		    wt->lists, err) != 0)
			return -1;
		if (digest_task_normalize(&task, &wt->norm) != 0) {
			if (errno == EILSEQ)
				return request_error_set(err, WIRE_INVALID_UTF8,
				    "task", "task holds invalid UTF-8");
			return request_error_set(err, WIRE_INTERNAL, NULL,
			    "normalizing the task: %s", strerror(errno));
		}
		if (digest_task_canonical_normalized(&wt->norm.task,
		    &canonical, &canonical_length) != 0)
			return request_error_set(err, WIRE_INTERNAL, NULL,
			    "canonical form: %s", strerror(errno));
		digest_sha256(canonical, canonical_length, sub->digest);
		free(canonical);
	}
	digest_to_hex(sub->digest, sub->digest_hex);
	if (given != NULL && memcmp(given_digest, sub->digest,
	    IDEM_SHA256_BYTES) != 0)
		return request_error_set(err, WIRE_DIGEST_DISAGREES,
		    "request_digest", "request_digest %s is not the broker's "
		    "digest of the task, %s", given, sub->digest_hex);
	return 0;
}

/* Check a write_task request as op_write_task would; changes nothing. */
int
write_task_check(json_t *request, struct request_error *err)
{
	struct write_task	*wt;
	int			 rc;

	if ((wt = calloc(1, sizeof *wt)) == NULL)
		return request_error_set(err, WIRE_INTERNAL, NULL,
		    "out of memory");
	rc = write_task_parse(wt, request, -1, err);
	write_task_free(wt);
	return rc;
}
