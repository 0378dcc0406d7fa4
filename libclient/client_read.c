/* SPDX-License-Identifier: ISC */
/*
 * client_read.c: the read-only calls of idem.h: get_submission,
 * diagnose and stats, their answers parsed into the caller's structs.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"

/* ---- get_submission, diagnose, stats ------------------------------------ */

/* A boolean that may be null; absent is an error unless optional. */
static int
client_tribool(json_t *object, const char *key, enum idem_tribool *out,
    int required, struct idem_error *err)
{
	json_t	*v = json_object_get(object, key);

	if ((v == NULL && !required) || json_is_null(v))
		*out = IDEM_TRIBOOL_NULL;
	else if (json_is_boolean(v))
		*out = json_is_true(v) ? IDEM_TRIBOOL_TRUE : IDEM_TRIBOOL_FALSE;
	else {
		client_error(err, IDEM_E_PROTOCOL,
		    "response %s is not a boolean or null", key);
		return -1;
	}
	return 0;
}

/* The state's name as sent, and what this library makes of it. */
static int
client_state(json_t *object, char *name, size_t size, enum idem_state *state,
    struct idem_error *err)
{
	static const struct {
		const char	*name;
		enum idem_state	 state;
	} states[] = {
		{ "reserved", IDEM_STATE_RESERVED },
		{ "task_created", IDEM_STATE_TASK_CREATED },
		{ "committed", IDEM_STATE_COMMITTED },
	};
	size_t	i;

	if (client_copy(object, "state", name, size, 1, err) != 0)
		return -1;
	*state = IDEM_STATE_UNKNOWN;
	for (i = 0; i < nitems(states); i++)
		if (strcmp(name, states[i].name) == 0)
			*state = states[i].state;
	return 0;
}

static int
client_submission(json_t *s, struct idem_submission *sub,
    struct idem_error *err)
{
	if (!json_is_object(s)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "found without a submission object");
		return -1;
	}
	if (client_copy(s, "client_submission_id", sub->client_submission_id,
	    sizeof sub->client_submission_id, 1, err) != 0 ||
	    client_state(s, sub->state_name, sizeof sub->state_name,
	    &sub->state, err) != 0 ||
	    client_copy(s, "digest_schema", sub->digest_schema,
	    sizeof sub->digest_schema, 1, err) != 0 ||
	    client_copy(s, "request_digest", sub->request_digest,
	    sizeof sub->request_digest, 1, err) != 0 ||
	    client_copy(s, "task_id", sub->task_id, sizeof sub->task_id, 1,
	    err) != 0 ||
	    client_copy(s, "task_path", sub->task_path, sizeof sub->task_path,
	    1, err) != 0 ||
	    client_copy(s, "reserved_at", sub->reserved_at,
	    sizeof sub->reserved_at, 1, err) != 0 ||
	    client_copy(s, "updated_at", sub->updated_at,
	    sizeof sub->updated_at, 1, err) != 0 ||
	    client_copy(s, "current_path", sub->current_path,
	    sizeof sub->current_path, 0, err) != 0)
		return -1;
	if (json_object_get(s, "receipt") != NULL) {
		if (client_receipt(s, &sub->receipt, err) != 0)
			return -1;
		sub->has_receipt = 1;
	}
	return 0;
}

int
idem_get_submission(struct idem_conn *conn, const char *client_submission_id,
    int *found, struct idem_submission *sub, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response, *f;
	int			 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(sub, 0, sizeof *sub);
	*found = 0;
	if (client_submission_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT,
		    "client_submission_id is required");
		return -1;
	}
	if ((request = client_request_new(IDEM_OPC_GET_SUBMISSION, NULL, NULL,
	    NULL, client_submission_id, err)) == NULL)
		return -1;
	if ((response = client_call_ok(conn, request, err)) == NULL)
		return -1;
	f = json_object_get(response, "found");
	if (!json_is_boolean(f))
		client_error(err, IDEM_E_PROTOCOL,
		    "response found is not a boolean");
	else if (json_is_false(f))
		rc = 0;
	else if (client_submission(json_object_get(response, "submission"),
	    sub, err) == 0) {
		/* Another key's record is the answer to another request. */
		if (strcmp(sub->client_submission_id,
		    client_submission_id) != 0)
			client_error(err, IDEM_E_PROTOCOL, "the record is of "
			    "client_submission_id %s, not %s",
			    sub->client_submission_id, client_submission_id);
		else {
			*found = 1;
			rc = 0;
		}
	}
	json_decref(response);
	if (rc != 0)
		memset(sub, 0, sizeof *sub);
	return client_done(conn, rc, err);
}

static int
client_diagnose_entry(json_t *j, struct idem_diagnose_entry *e,
    struct idem_error *err)
{
	json_t	*stalled;

	if (!json_is_object(j)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "a diagnose entry is not an object");
		return -1;
	}
	stalled = json_object_get(j, "stalled");
	if (!json_is_boolean(stalled)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response stalled is not a boolean");
		return -1;
	}
	e->stalled = json_is_true(stalled);
	if (client_copy(j, "client_submission_id", e->client_submission_id,
	    sizeof e->client_submission_id, 1, err) != 0 ||
	    client_state(j, e->state_name, sizeof e->state_name, &e->state,
	    err) != 0 ||
	    client_int(j, "age_ms", &e->age_ms, 1, err) != 0 ||
	    client_copy(j, "task_id", e->task_id, sizeof e->task_id, 1,
	    err) != 0 ||
	    client_copy(j, "task_path", e->task_path, sizeof e->task_path, 1,
	    err) != 0 ||
	    client_tribool(j, "task_exists", &e->task_exists, 1, err) != 0 ||
	    client_tribool(j, "request_digest_matches",
	    &e->request_digest_matches, 1, err) != 0 ||
	    client_tribool(j, "file_digest_matches", &e->file_digest_matches,
	    1, err) != 0 ||
	    client_tribool(j, "in_flight", &e->in_flight, 0, err) != 0)
		return -1;
	return 0;
}

int
idem_diagnose(struct idem_conn *conn, int64_t stale_after_ms,
    struct idem_diagnosis *diagnosis, struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*request, *response, *entries, *counts;
	size_t			 i;
	int			 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(diagnosis, 0, sizeof *diagnosis);
	if (stale_after_ms < -1) {
		client_error(err, IDEM_E_ARGUMENT,
		    "stale_after_ms must be -1 or at least 0");
		return -1;
	}
	request = stale_after_ms == -1 ? json_pack("{ss}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE]) : json_pack("{sssI}", "op",
	    idem_op_names[IDEM_OPC_DIAGNOSE], "stale_after_ms",
	    (json_int_t)stale_after_ms);
	if ((response = client_call_ok(conn, request, err)) == NULL)
		return -1;
	entries = json_object_get(response, "entries");
	counts = json_object_get(response, "counts");
	if (!json_is_array(entries) || !json_is_object(counts)) {
		client_error(err, IDEM_E_PROTOCOL,
		    "response lacks the entries array or the counts object");
		goto done;
	}
	if (client_int(counts, "reserved", &diagnosis->reserved, 1,
	    err) != 0 ||
	    client_int(counts, "task_created", &diagnosis->task_created, 1,
	    err) != 0 ||
	    client_int(counts, "committed", &diagnosis->committed, 1,
	    err) != 0)
		goto done;
	if (json_array_size(entries) > 0 &&
	    (diagnosis->entries = calloc(json_array_size(entries),
	    sizeof *diagnosis->entries)) == NULL) {
		client_error(err, IDEM_E_NOMEM, "out of memory");
		goto done;
	}
	for (i = 0; i < json_array_size(entries); i++)
		if (client_diagnose_entry(json_array_get(entries, i),
		    &diagnosis->entries[i], err) != 0)
			goto done;
	diagnosis->count = i;
	rc = 0;

done:
	json_decref(response);
	if (rc != 0)
		idem_diagnosis_free(diagnosis);
	return client_done(conn, rc, err);
}

void
idem_diagnosis_free(struct idem_diagnosis *diagnosis)
{
	if (diagnosis == NULL)
		return;
	free(diagnosis->entries);
	memset(diagnosis, 0, sizeof *diagnosis);
}

#define CLIENT_STAT(member, required) { #member,			\
	offsetof(struct idem_stats, member), required }
static const struct {
	const char	*key;
	size_t		 offset;
	int		 required;	/* SPEC.md lists it */
} client_stats_fields[] = {
	CLIENT_STAT(created, 1),
	CLIENT_STAT(reused, 1),
	CLIENT_STAT(conflict, 1),
	CLIENT_STAT(legacy_created, 1),
	CLIENT_STAT(errors, 1),
	CLIENT_STAT(journal_records, 1),
	CLIENT_STAT(journal_fsyncs, 1),
	CLIENT_STAT(table_used, 1),
	CLIENT_STAT(table_capacity, 1),
	CLIENT_STAT(workers, 1),
	CLIENT_STAT(worker_restarts, 1),
	CLIENT_STAT(uptime_ms, 1),
	CLIENT_STAT(reports_created, 0),
	CLIENT_STAT(reports_deduplicated, 0),
};
#undef CLIENT_STAT

int
idem_stats(struct idem_conn *conn, struct idem_stats *stats,
    struct idem_error *err)
{
	struct idem_error	 scratch;
	json_t			*response;
	int64_t			*counter;
	size_t			 i;
	int			 rc = 0;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(stats, 0, sizeof *stats);
	if ((response = client_call_ok(conn, json_pack("{ss}", "op",
	    idem_op_names[IDEM_OPC_STATS]), err)) == NULL)
		return -1;
	for (i = 0; i < nitems(client_stats_fields) && rc == 0; i++) {
		counter = (int64_t *)((char *)stats +
		    client_stats_fields[i].offset);
		*counter = -1;
		rc = client_int(response, client_stats_fields[i].key, counter,
		    client_stats_fields[i].required, err);
	}
	json_decref(response);
	if (rc != 0)
		memset(stats, 0, sizeof *stats);
	return client_done(conn, rc, err);
}
