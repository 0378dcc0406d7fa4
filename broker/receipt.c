/* SPDX-License-Identifier: ISC */
/*
 * receipt.c: the receipt of a committed task or report, as write_task
 * answers it and get_submission shows it: rebuilt from the slot's facts
 * every time, so that a reused receipt is byte for byte the first one
 * (SPEC.md).  Beside it, current_path: where FCoP tools moved the task
 * since, which both answers add and the receipt never holds.  An
 * effect's receipt is effect.c's (effect_receipt_json).
 */
#include <limits.h>

#include "digest.h"
#include "idemd.h"

json_t *
receipt_json(const char *key, size_t key_length, const struct subtab_entry *e)
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
		    json_string(subtab_schema_name(e->schema)));
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

/*
 * Where FCoP tools moved the task since (SPEC.md: "current_path"); the
 * receipt keeps the path idem wrote.  Only answers from an earlier
 * creation look: a file this call just wrote is where it says.
 */
void
current_path_add(struct idemd *d, json_t *object, const char *id,
    const char *recorded)
{
	char	path[PATH_MAX];

	if (taskfile_current_path(d->root_fd, id, recorded, path,
	    sizeof path) == 1)
		json_object_set_new(object, "current_path", json_string(path));
}
