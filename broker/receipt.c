/* SPDX-License-Identifier: ISC */
/*
 * receipt.c: the receipt of a committed task or report, as write_task
 * answers it and get_submission shows it: rebuilt from the slot's facts
 * every time, so that a reused receipt is byte for byte the first one
 * (SPEC.md).  Beside it, current_path: where FCoP tools moved the task
 * since, which both answers add and the receipt never holds.  An
 * effect's receipt is effect.c's (effect_receipt_text, one builder for
 * every reply and view); its key's halves (effect_key_split) and its
 * lease (effect_lease_live) are here, for the op layer and the backends
 * alike.  And a submission's name (its id), which both backends'
 * creations set.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "idemd.h"

json_t *
receipt_json(const char *key, size_t key_length, const struct subtab_entry *e)
{
	/* The store's: idemctl store import writes the same bytes. */
	return store_receipt_json(key, key_length, e);
}

/*
 * Where FCoP tools moved the task since (SPEC.md: "current_path"); the
 * receipt keeps the path idem wrote.  Only answers from an earlier
 * creation look: a file this call just wrote is where it says.
 * The worker's loop only: the view is not shared with its threads.
 */
int
current_path_find(struct idemd *d, const char *id, const char *recorded,
    char *path, size_t path_size)
{
	/* Where it almost always is: one fstatat in the held inbox. */
	if (inboxview_holds(&d->inbox_view, d->root_fd, d->inbox_fd,
	    recorded) == 1)
		return 0;
	return taskfile_current_path(d->root_fd, id, recorded, path,
	    path_size);
}

void
current_path_add(struct idemd *d, json_t *object, const char *id,
    const char *recorded)
{
	char	path[PATH_MAX];

	if (current_path_find(d, id, recorded, path, sizeof path) == 1)
		json_object_set_new(object, "current_path", json_string(path));
}

/* Split an effect's key into kind and id (NUL-terminated copies). */
int
effect_key_split(const char *key, size_t key_length, char *kind,
    size_t kind_size, char *id, size_t id_size)
{
	const char	*sep = memchr(key, SUBTAB_EFFECT_SEPARATOR, key_length);
	size_t		 n;

	if (sep == NULL || kind_size == 0 || id_size == 0)
		return -1;
	/* Each cut to its room, as snprintf's "%.*s" cut them. */
	n = (size_t)(sep - key) < kind_size - 1 ? (size_t)(sep - key) :
	    kind_size - 1;
	memcpy(kind, key, n);
	kind[n] = '\0';
	n = key_length - (size_t)(sep - key) - 1;
	if (n > id_size - 1)
		n = id_size - 1;
	memcpy(id, sep + 1, n);
	id[n] = '\0';
	return 0;
}

int
effect_lease_live(const struct subtab_entry *e, int64_t now)
{
	return e->state == SUBTAB_RESERVED && now < e->lease_expires_ms;
}

/* s->name: the id (file name without .md) of s->entry's number. */
void
submission_set_name(struct submission *s)
{
	const struct subtab_entry *e = &s->entry;

	taskfile_format_id(s->ops->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, s->name,
	    sizeof s->name);
}
