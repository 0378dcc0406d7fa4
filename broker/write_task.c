/*
 * write_task.c: the write_task op, the heart of idem.
 *
 * DESIGN
 *
 * A submission goes reserved -> task_created -> committed, and each step
 * is a journal record that is durable before the next step starts:
 *
 *   acquire     look the id up and claim it (shm table, one lock)
 *   reserve     RESERVE record durable          [after_reserve_durable]
 *   file        TASK file written, linked, directory fsync'd
 *                 [after_task_file_written] [after_task_file_linked]
 *   created     TASK_CREATED record durable     [after_task_created_durable]
 *   commit      COMMIT record durable           [after_commit_durable]
 *   reply
 *
 * The claim makes check, reserve and create exclusive per submission
 * across all workers; an identical request arriving meanwhile parks until
 * the claim is released and then finds the committed receipt.  A request
 * that finds an unfinished submission whose claimer is gone (a retry
 * after a crash) claims it, records its state again (so it is durable
 * whatever the dead claimer managed) and continues by the recovery rules
 * of SPEC.md.  Every step is a function that either finishes the request
 * or parks it with the next step as its continuation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "worker.h"

struct write_task {
	struct worker			*worker;
	const char			*key;		/* NULL: legacy */
	size_t				 key_length;
	char				 key_copy[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	struct digest_task_normalized	 norm;
	uint8_t				 digest[IDEM_SHA256_BYTES];
	char				 digest_hex[IDEM_DIGEST_HEX_SIZE];
	struct subtab_claim		 claim;
	int				 claimed;
	uint32_t			 slot;
	struct subtab_entry		 entry;
	int				 fresh;		/* this call reserved */
	int				 recovered;
	int				 wrote_file;
	char				 task_id[IDEM_MAX_TASK_ID_BYTES + 16];
	const char			**lists;	/* references, depends_on */
};

static void	wt_acquire(struct pending *);
static void	wt_reserved(struct pending *);
static void	wt_resolve_reserved(struct pending *);
static void	wt_write_file(struct pending *);
static void	wt_task_created(struct pending *);
static void	wt_recover_task_created(struct pending *);
static void	wt_committed(struct pending *);
static void	wt_legacy(struct pending *);
static void	wt_legacy_done(struct pending *);

static const char *const request_keys[] = {
	"op", "id", "client_submission_id", "digest_schema", "request_digest",
	"task", "meta", NULL
};
static const char *const task_keys[] = {
	"sender", "recipient", "subject", "body", "priority", "risk_level",
	"thread_key", "parent", "references", "depends_on", NULL
};

static void
write_task_free(void *arg)
{
	struct write_task	*wt = arg;

	digest_task_normalized_free(&wt->norm);
	free(wt->lists);
	free(wt);
}

static int
one_of(const char *value, const char *const *allowed)
{
	for (; *allowed != NULL; allowed++) {
		if (strcmp(value, *allowed) == 0)
			return 1;
	}
	return 0;
}

static int
role_field(json_t *task, const char *key, const char *path,
    const char **value, struct request_error *err)
{
	size_t	length;
	int	rc;

	rc = request_string(task, key, path, 1, IDEM_MAX_ROLE_BYTES, 0, value,
	    &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, "invalid_request", path,
		    "%s is required", path);
	if (!digest_role_code_valid(*value, length))
		return request_error_set(err, "invalid_request", path,
		    "%s must be an FCoP role code such as PM, DEV_01 or "
		    "LEAD-QA (upper case, at most %d characters)", path,
		    IDEM_MAX_ROLE_BYTES);
	return 0;
}

static int
enum_field(json_t *task, const char *key, const char *path,
    const char *const *allowed, const char **value, struct request_error *err)
{
	size_t	length;

	if (request_string(task, key, path, 1, 32, 0, value, &length,
	    err) < 0)
		return -1;
	if (*value != NULL && !one_of(*value, allowed))
		return request_error_set(err, "invalid_request", path,
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
	if (list == NULL)
		return 0;
	if (!json_is_array(list))
		return request_error_set(err, "invalid_request", path,
		    "%s must be an array of strings", path);
	if (json_array_size(list) > IDEM_MAX_LIST_ITEMS)
		return request_error_set(err, "invalid_request", path,
		    "%s has more than %d items", path, IDEM_MAX_LIST_ITEMS);
	json_array_foreach(list, i, item) {
		if (!json_is_string(item))
			return request_error_set(err, "invalid_request", path,
			    "%s[%zu] must be a string", path, i);
		length = json_string_length(item);
		if (memchr(json_string_value(item), '\0', length) != NULL)
			return request_error_set(err, "invalid_request", path,
			    "%s[%zu] contains a NUL character", path, i);
		if (length < 1 || length > IDEM_MAX_REF_BYTES)
			return request_error_set(err, "invalid_request", path,
			    "%s[%zu] must be 1 to %d bytes long", path, i,
			    IDEM_MAX_REF_BYTES);
		out[i] = json_string_value(item);
	}
	*count = json_array_size(list);
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
	if (task == NULL)
		return request_error_set(err, "invalid_request", "task",
		    "task is required");
	if (!json_is_object(task))
		return request_error_set(err, "invalid_request", "task",
		    "task must be an object");
	if (request_known_keys(task, "task", task_keys, err) != 0)
		return -1;
	if (role_field(task, "sender", "task.sender", &t->sender, err) != 0 ||
	    role_field(task, "recipient", "task.recipient", &t->recipient,
	    err) != 0)
		return -1;
	rc = request_string(task, "subject", "task.subject", 1,
	    IDEM_MAX_SUBJECT_BYTES, 0, &t->subject, &length, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return request_error_set(err, "invalid_request",
		    "task.subject", "task.subject is required");
	if (request_string(task, "body", "task.body", 0, IDEM_MAX_BODY_BYTES,
	    0, &t->body, &length, err) < 0 ||
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

/* Everything a write_task request says, checked; 0 or -1 with err. */
static int
write_task_parse(struct write_task *wt, json_t *request,
    struct request_error *err)
{
	struct idem_task	 task;
	const char		*schema, *given;
	size_t			 length;
	uint8_t			 given_digest[IDEM_SHA256_BYTES];
	char			*canonical;
	size_t			 canonical_length;
	json_t			*meta;

	if (request_known_keys(request, "", request_keys, err) != 0)
		return -1;
	if (request_submission_id(request, &wt->key, err) < 0)
		return -1;
	if (wt->key != NULL) {
		wt->key_length = strlen(wt->key);
		memcpy(wt->key_copy, wt->key, wt->key_length + 1);
		wt->key = wt->key_copy;
	}
	if (request_string(request, "digest_schema", "digest_schema", 1, 64, 0,
	    &schema, &length, err) < 0)
		return -1;
	if (schema != NULL && strcmp(schema, IDEM_SCHEMA_WRITE_TASK_V1) != 0)
		return request_error_set(err, "unsupported_schema",
		    "digest_schema", "digest_schema \"%.64s\" is not supported "
		    "(supported: %s)", schema, IDEM_SCHEMA_WRITE_TASK_V1);
	if (request_string(request, "request_digest", "request_digest", 64, 64,
	    0, &given, &length, err) < 0)
		return -1;
	if (given != NULL && digest_from_hex(given, given_digest) != 0)
		return request_error_set(err, "invalid_request",
		    "request_digest", "request_digest must be 64 lower-case "
		    "hex digits");
	meta = json_object_get(request, "meta");
	if (meta != NULL && !json_is_object(meta))
		return request_error_set(err, "invalid_request", "meta",
		    "meta must be an object");

	wt->lists = calloc(2 * IDEM_MAX_LIST_ITEMS, sizeof *wt->lists);
	if (wt->lists == NULL)
		return request_error_set(err, "internal", NULL, "out of memory");
	if (task_from_json(json_object_get(request, "task"), &task, wt->lists,
	    err) != 0)
		return -1;
	if (digest_task_normalize(&task, &wt->norm) != 0) {
		if (errno == EILSEQ)
			return request_error_set(err, "invalid_utf8", "task",
			    "task holds invalid UTF-8");
		return request_error_set(err, "internal", NULL,
		    "normalizing the task: %s", strerror(errno));
	}
	if (digest_task_canonical_normalized(&wt->norm.task, &canonical,
	    &canonical_length) != 0)
		return request_error_set(err, "internal", NULL,
		    "canonical form: %s", strerror(errno));
	digest_sha256(canonical, canonical_length, wt->digest);
	free(canonical);
	digest_to_hex(wt->digest, wt->digest_hex);
	if (given != NULL && memcmp(given_digest, wt->digest,
	    IDEM_SHA256_BYTES) != 0)
		return request_error_set(err, "digest_disagrees",
		    "request_digest", "request_digest %s is not the broker's "
		    "digest of the task, %s", given, wt->digest_hex);
	return 0;
}

/* ---- Replies ------------------------------------------------------------ */

json_t *
receipt_json(struct shm_segment *seg, const char *key, size_t key_length,
    const struct subtab_entry *e)
{
	char	 id[IDEM_MAX_TASK_ID_BYTES + 16], path[IDEM_MAX_TASK_PATH_BYTES];
	char	 hex[IDEM_DIGEST_HEX_SIZE], at[TASKFILE_TIME_BYTES];
	json_t	*r = json_object();

	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, id, sizeof id);
	taskfile_format_path(e->kind, id, path, sizeof path);
	json_object_set_new(r, "client_submission_id", key_length == 0 ?
	    json_null() : json_stringn(key, key_length));
	json_object_set_new(r, "task_id", json_string(id));
	json_object_set_new(r, "task_path", json_string(path));
	if (e->schema != SUBTAB_SCHEMA_NONE) {
		json_object_set_new(r, "digest_schema",
		    json_string(IDEM_SCHEMA_WRITE_TASK_V1));
		digest_to_hex(e->request_digest, hex);
		json_object_set_new(r, "request_digest", json_string(hex));
	}
	digest_to_hex(e->file_digest, hex);
	json_object_set_new(r, "file_digest", json_string(hex));
	json_object_set_new(r, "state", json_string("committed"));
	taskfile_format_time(e->created_at_ms, at);
	json_object_set_new(r, "created_at", json_string(at));
	return r;
}

static const char *
state_name(unsigned state)
{
	switch (state) {
	case SUBTAB_RESERVED:
		return "reserved";
	case SUBTAB_TASK_CREATED:
		return "task_created";
	case SUBTAB_COMMITTED:
		return "committed";
	}
	return "empty";
}

static void
wt_release(struct pending *p)
{
	struct write_task	*wt = p->op;

	if (!wt->claimed)
		return;
	wt->claimed = 0;
	if (subtab_release(&p->worker->d->seg, wt->slot, &wt->claim))
		worker_wake_all(p->worker);
}

static void
wt_fail(struct pending *p, json_t *reply)
{
	wt_release(p);
	atomic_fetch_add(&p->worker->d->seg.header->counters.errors, 1);
	pending_reply(p, reply);
}

static void
wt_fail_storage(struct pending *p, int error, const char *what)
{
	struct request_error	err;

	request_storage_error(&err, error, what);
	wt_fail(p, reply_error(&err, p->id));
}

static void
wt_conflict(struct pending *p, const char *reason, const char *message)
{
	struct write_task	*wt = p->op;
	const struct subtab_entry *e = &wt->entry;
	char			 hex[IDEM_DIGEST_HEX_SIZE];
	json_t			*reply, *error, *existing;

	wt_release(p);
	atomic_fetch_add(&p->worker->d->seg.header->counters.conflict, 1);
	reply = reply_new(0, p->id);
	json_object_set_new(reply, "disposition", json_string("conflict"));
	json_object_set_new(reply, "action_taken", json_false());
	error = json_object();
	json_object_set_new(error, "code", json_string("conflict"));
	json_object_set_new(error, "reason", json_string(reason));
	json_object_set_new(error, "message", json_string(message));
	json_object_set_new(error, "retryable", json_false());
	json_object_set_new(reply, "error", error);
	existing = json_object();
	json_object_set_new(existing, "client_submission_id",
	    json_stringn(wt->key, wt->key_length));
	json_object_set_new(existing, "state", json_string(state_name(e->state)));
	json_object_set_new(existing, "digest_schema", json_string(
	    e->schema == SUBTAB_SCHEMA_WRITE_TASK_V1 ?
	    IDEM_SCHEMA_WRITE_TASK_V1 : IDEM_SCHEMA_WRITE_REPORT_V1));
	digest_to_hex(e->request_digest, hex);
	json_object_set_new(existing, "request_digest", json_string(hex));
	json_object_set_new(existing, "task_id", json_string(wt->task_id));
	json_object_set_new(reply, "existing", existing);
	pending_reply(p, reply);
}

static void
wt_answer(struct pending *p, int created)
{
	struct write_task	*wt = p->op;
	struct shm_counters	*counters = &p->worker->d->seg.header->counters;
	json_t			*reply;

	wt_release(p);
	if (wt->key == NULL)
		atomic_fetch_add(&counters->legacy_created, 1);
	else
		atomic_fetch_add(created ? &counters->created :
		    &counters->reused, 1);
	reply = reply_new(1, p->id);
	json_object_set_new(reply, "disposition",
	    json_string(created ? "created" : "reused"));
	json_object_set_new(reply, "action_taken", json_boolean(created));
	json_object_set_new(reply, "idempotent", json_boolean(wt->key != NULL));
	if (wt->recovered)
		json_object_set_new(reply, "recovered", json_true());
	json_object_set_new(reply, "receipt", receipt_json(&p->worker->d->seg,
	    wt->key, wt->key_length, &wt->entry));
	pending_reply(p, reply);
}

static void
wt_journal(struct pending *p, pending_resume_fn next)
{
	struct write_task	*wt = p->op;
	struct journal_record	 record;

	memset(&record, 0, sizeof record);
	record.type = JOURNAL_RECORD_ENTRY;
	record.entry = wt->entry;
	record.entry.key_length = (uint16_t)wt->key_length;
	if (wt->key_length > 0)
		memcpy(record.key, wt->key, wt->key_length);
	pending_journal(p, &record, next);
}

static void
wt_set_task_id(struct write_task *wt)
{
	const struct subtab_entry *e = &wt->entry;

	taskfile_format_id(SUBTAB_KIND_TASK, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, wt->task_id,
	    sizeof wt->task_id);
	if (e->seq == 1000)
		log_warnx("task numbers for %08u passed 999; FCoP readers "
		    "parse three digits only", e->date);
}

/* ---- Steps ---------------------------------------------------------------- */

void
op_write_task(struct conn *conn, json_t *request, json_t *id)
{
	struct request_error	 err;
	struct write_task	*wt;
	struct pending		*p;

	p = pending_new(conn, id);
	wt = calloc(1, sizeof *wt);
	if (p == NULL || wt == NULL) {
		free(wt);
		if (p != NULL)
			pending_reply(p, reply_error_simple(id, "internal", 1,
			    "out of memory"));
		return;
	}
	p->op = wt;
	p->op_free = write_task_free;
	wt->worker = p->worker;
	if (write_task_parse(wt, request, &err) != 0) {
		atomic_fetch_add(&p->worker->d->seg.header->counters.errors, 1);
		pending_reply(p, reply_error(&err, p->id));
		return;
	}
	if (atomic_load(&p->worker->d->seg.header->journal_failed)) {
		wt_fail(p, reply_error_simple(p->id, "storage_unavailable", 1,
		    "the journal failed; writes resume when the broker has "
		    "reopened its state"));
		return;
	}
	wt->claim.worker = p->worker->index + 1;
	wt->claim.generation = p->worker->generation;
	wt->claim.token = ++p->worker->next_token;
	if (wt->key == NULL)
		wt_legacy(p);
	else
		wt_acquire(p);
}

static void
wt_want(struct pending *p, struct subtab_entry *e)
{
	struct write_task	*wt = p->op;
	const struct idem_task	*t = &wt->norm.task;
	int64_t			 now = shm_now_ms();

	memset(e, 0, sizeof *e);
	e->kind = SUBTAB_KIND_TASK;
	e->schema = wt->key != NULL ? SUBTAB_SCHEMA_WRITE_TASK_V1 :
	    SUBTAB_SCHEMA_NONE;
	memcpy(e->request_digest, wt->digest, IDEM_SHA256_BYTES);
	e->sender_length = (uint8_t)strlen(t->sender);
	memcpy(e->sender, t->sender, e->sender_length);
	e->recipient_length = (uint8_t)strlen(t->recipient);
	memcpy(e->recipient, t->recipient, e->recipient_length);
	e->reserved_at_ms = now;
	e->updated_at_ms = now;
	conn_peer(p->conn, &e->peer_uid, &e->peer_pid);
}

static void
wt_acquire(struct pending *p)
{
	struct write_task	*wt = p->op;
	struct idemd		*d = p->worker->d;
	struct subtab_acquire	 a;

	if (p->timed_out) {
		wt_fail(p, reply_error_simple(p->id, "in_progress", 1,
		    "an identical submission is still in flight after %d ms",
		    d->inflight_wait_ms));
		return;
	}
	memset(&a, 0, sizeof a);
	a.key = wt->key;
	a.key_length = wt->key_length;
	wt_want(p, &a.want);
	a.claim = wt->claim;
	a.today = taskfile_date_of(a.want.reserved_at_ms);
	a.scan = idemd_scan_max_seq;
	a.scan_arg = d;

	switch (subtab_acquire(&d->seg, &a)) {
	case SUBTAB_INSERTED:
		wt->claimed = 1;
		wt->slot = a.slot;
		wt->entry = a.found;
		wt->fresh = 1;
		wt_set_task_id(wt);
		wt_journal(p, wt_reserved);
		return;
	case SUBTAB_CLAIMED:
		/* Record the state again: the last claimer may have died
		 * before its record was durable. */
		wt->claimed = 1;
		wt->slot = a.slot;
		wt->entry = a.found;
		wt_set_task_id(wt);
		wt_journal(p, a.found.state == SUBTAB_RESERVED ?
		    wt_reserved : wt_recover_task_created);
		return;
	case SUBTAB_DONE:
		wt->entry = a.found;
		wt_set_task_id(wt);
		wt_answer(p, 0);
		return;
	case SUBTAB_MISMATCH:
		wt->entry = a.found;
		wt_set_task_id(wt);
		if (a.found.schema != SUBTAB_SCHEMA_WRITE_TASK_V1)
			wt_conflict(p, "schema_mismatch", "the submission id "
			    "is bound to another digest schema");
		else
			wt_conflict(p, "digest_mismatch", "the submission id "
			    "is bound to a request with another digest");
		return;
	case SUBTAB_BUSY:
		pending_wait_claim(p, wt_acquire);
		return;
	case SUBTAB_FULL:
		wt_fail(p, reply_error_simple(p->id, "table_full", 0,
		    "the submission table is full (capacity %u); restart "
		    "idemd with a larger --capacity", d->capacity));
		return;
	case SUBTAB_ALLOC_FAILED:
		wt_fail_storage(p, errno, "allocating a task number");
		return;
	}
}

static int
wt_journal_failed(struct pending *p)
{
	if (!p->journal_failed)
		return 0;
	wt_fail(p, reply_error_simple(p->id, "storage_unavailable", 1,
	    "the journal could not be made durable"));
	return 1;
}

/* RESERVE is durable. */
static void
wt_reserved(struct pending *p)
{
	struct write_task	*wt = p->op;

	if (wt_journal_failed(p))
		return;
	crash_point(CRASH_AFTER_RESERVE_DURABLE);
	if (wt->fresh)
		wt_write_file(p);
	else
		wt_resolve_reserved(p);
}

/* A retry of a reservation: the file may or may not be there. */
static void
wt_resolve_reserved(struct pending *p)
{
	struct write_task	*wt = p->op;
	struct idemd		*d = p->worker->d;
	struct taskfile_facts	 facts;
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	char			*cause = NULL;
	int			 found;

	wt->recovered = 1;
	found = taskfile_find(d->root_fd, wt->task_id, path, sizeof path);
	if (found < 0) {
		wt_fail_storage(p, errno, "looking for the task file");
		return;
	}
	if (found == 0) {
		wt_write_file(p);
		return;
	}
	if (taskfile_inspect(d->root_fd, path, &facts, &cause) != 0) {
		log_warnx("%s", cause);
		free(cause);
		wt_fail_storage(p, errno, "reading the task file");
		return;
	}
	if (!facts.has_client_submission_id || !facts.has_request_digest ||
	    strcmp(facts.client_submission_id, wt->key) != 0 ||
	    strcmp(facts.request_digest, wt->digest_hex) != 0) {
		log_warnx("submission %s: %s is not the file it reserved",
		    wt->key, path);
		wt_conflict(p, "target_mismatch", "the reserved task path "
		    "holds a file of another submission or writer");
		return;
	}
	/* Adopt the file the interrupted call put in place. */
	memcpy(wt->entry.file_digest, facts.file_digest, IDEM_SHA256_BYTES);
	wt->entry.created_at_ms = facts.has_created_at ? facts.created_at_ms :
	    shm_now_ms();
	wt->entry.state = SUBTAB_TASK_CREATED;
	wt->entry.updated_at_ms = shm_now_ms();
	wt_journal(p, wt_task_created);
}

static int
wt_render(struct write_task *wt, int64_t now, char **data, size_t *length)
{
	struct taskfile_task	tf;
	char			at[TASKFILE_TIME_BYTES];

	taskfile_format_time(now, at);
	tf.task_id = wt->task_id;
	tf.task = &wt->norm.task;
	tf.created_at = at;
	tf.client_submission_id = wt->key;
	tf.request_digest = wt->key != NULL ? wt->digest_hex : NULL;
	return taskfile_render_task(&tf, data, length);
}

static void
wt_write_file(struct pending *p)
{
	struct write_task	*wt = p->op;
	struct idemd		*d = p->worker->d;
	char			 name[IDEM_MAX_TASK_ID_BYTES + 20];
	char			*data, *cause = NULL;
	size_t			 length;
	int64_t			 now = shm_now_ms();
	int			 rc, error;

	if (wt_render(wt, now, &data, &length) != 0) {
		wt_fail(p, reply_error_simple(p->id, "internal", 1,
		    "rendering the task file: %s", strerror(errno)));
		return;
	}
	snprintf(name, sizeof name, "%s.md", wt->task_id);
	rc = taskfile_write_durable(d->inbox_fd, name, data, length, 1,
	    &cause);
	error = errno;
	if (rc == 0)
		digest_sha256(data, length, wt->entry.file_digest);
	free(data);
	if (rc != 0 && error == EEXIST) {
		free(cause);
		if (!wt->fresh) {
			/* Someone put a file there since we looked. */
			wt_resolve_reserved(p);
			return;
		}
		/*
		 * Another FCoP writer took the name while this first call
		 * was in flight; nothing was promised yet, so move to a
		 * fresh number and reserve it durably before writing.
		 */
		if (seqalloc_next(&d->seg, SUBTAB_KIND_TASK,
		    taskfile_date_of(now), idemd_scan_max_seq, d,
		    &wt->entry.date, &wt->entry.seq) != 0) {
			wt_fail_storage(p, errno, "allocating a task number");
			return;
		}
		log_warnx("%s was taken by another writer; submission %s "
		    "moves to number %u", name, wt->key, wt->entry.seq);
		wt_set_task_id(wt);
		if (subtab_update(&d->seg, wt->slot, &wt->claim,
		    &wt->entry) != 0) {
			wt_fail(p, reply_error_simple(p->id, "internal", 1,
			    "lost the claim on the submission"));
			return;
		}
		wt_journal(p, wt_reserved);
		return;
	}
	if (rc != 0) {
		log_warnx("submission %s: %s", wt->key, cause);
		free(cause);
		wt_fail_storage(p, error, "writing the task file");
		return;
	}
	wt->wrote_file = 1;
	wt->entry.created_at_ms = now;
	wt->entry.state = SUBTAB_TASK_CREATED;
	wt->entry.updated_at_ms = shm_now_ms();
	wt_journal(p, wt_task_created);
}

/* TASK_CREATED is durable. */
static void
wt_task_created(struct pending *p)
{
	struct write_task	*wt = p->op;

	if (wt_journal_failed(p))
		return;
	if (subtab_update(&p->worker->d->seg, wt->slot, &wt->claim,
	    &wt->entry) != 0) {
		wt_fail(p, reply_error_simple(p->id, "internal", 1,
		    "lost the claim on the submission"));
		return;
	}
	crash_point(CRASH_AFTER_TASK_CREATED_DURABLE);
	wt->entry.state = SUBTAB_COMMITTED;
	wt->entry.updated_at_ms = shm_now_ms();
	wt_journal(p, wt_committed);
}

/* A retry of task_created, its state recorded again: is the task there? */
static void
wt_recover_task_created(struct pending *p)
{
	struct write_task	*wt = p->op;
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	int			 found;

	if (wt_journal_failed(p))
		return;
	wt->recovered = 1;
	found = taskfile_find(p->worker->d->root_fd, wt->task_id, path,
	    sizeof path);
	if (found < 0) {
		wt_fail_storage(p, errno, "looking for the task file");
		return;
	}
	if (found == 0) {
		log_warnx("submission %s: %s was created but is nowhere in "
		    "the workspace", wt->key, wt->task_id);
		wt_conflict(p, "task_missing", "the submission's task was "
		    "created but its file is gone");
		return;
	}
	wt->entry.state = SUBTAB_COMMITTED;
	wt->entry.updated_at_ms = shm_now_ms();
	wt_journal(p, wt_committed);
}

/* COMMIT is durable. */
static void
wt_committed(struct pending *p)
{
	struct write_task	*wt = p->op;

	if (wt_journal_failed(p))
		return;
	if (subtab_update(&p->worker->d->seg, wt->slot, &wt->claim,
	    &wt->entry) != 0) {
		wt_fail(p, reply_error_simple(p->id, "internal", 1,
		    "lost the claim on the submission"));
		return;
	}
	crash_point(CRASH_AFTER_COMMIT_DURABLE);
	wt_answer(p, wt->wrote_file);
}

/* ---- Legacy: no submission id, a new task every time -------------------- */

static void
wt_legacy(struct pending *p)
{
	struct write_task	*wt = p->op;
	struct idemd		*d = p->worker->d;
	char			 name[IDEM_MAX_TASK_ID_BYTES + 20];
	char			*data, *cause = NULL;
	size_t			 length;
	int64_t			 now;
	int			 rc, error, attempt;

	wt_want(p, &wt->entry);
	for (attempt = 0; attempt < 1000; attempt++) {
		now = shm_now_ms();
		if (seqalloc_next(&d->seg, SUBTAB_KIND_TASK,
		    taskfile_date_of(now), idemd_scan_max_seq, d,
		    &wt->entry.date, &wt->entry.seq) != 0) {
			wt_fail_storage(p, errno, "allocating a task number");
			return;
		}
		wt_set_task_id(wt);
		if (wt_render(wt, now, &data, &length) != 0) {
			wt_fail(p, reply_error_simple(p->id, "internal", 1,
			    "rendering the task file: %s", strerror(errno)));
			return;
		}
		snprintf(name, sizeof name, "%s.md", wt->task_id);
		rc = taskfile_write_durable(d->inbox_fd, name, data, length, 0,
		    &cause);
		error = errno;
		if (rc == 0)
			digest_sha256(data, length, wt->entry.file_digest);
		free(data);
		if (rc == 0)
			break;
		if (error != EEXIST) {
			log_warnx("legacy task: %s", cause);
			free(cause);
			wt_fail_storage(p, error, "writing the task file");
			return;
		}
		free(cause);
		cause = NULL;
	}
	if (attempt == 1000) {
		wt_fail(p, reply_error_simple(p->id, "internal", 1,
		    "every task number tried was taken by another writer"));
		return;
	}
	wt->wrote_file = 1;
	wt->entry.created_at_ms = now;
	wt->entry.state = SUBTAB_COMMITTED;
	wt->entry.updated_at_ms = now;
	/* Recorded so the number is never handed out again. */
	wt_journal(p, wt_legacy_done);
}

static void
wt_legacy_done(struct pending *p)
{
	if (wt_journal_failed(p))
		return;
	wt_answer(p, 1);
}
