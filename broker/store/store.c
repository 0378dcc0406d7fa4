/* SPDX-License-Identifier: ISC */
/*
 * store.c: what idemd and idemctl both do with the files, written once:
 * where the journal is, loading the state (the newest checkpoint, then
 * the journal from its segment), walking every record with where it is,
 * and naming what a record holds.
 *
 * It returns a cause and a typed failure (enum store_failure), never
 * logs and never decides by the text of a cause: the broker logs once,
 * idemctl formats.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "store.h"
#include "digest.h"

int
store_journal_dir(const char *root, char *out, size_t out_size)
{
	if ((size_t)snprintf(out, out_size, "%s/%s", root,
	    IDEM_JOURNAL_DIR) >= out_size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int
store_has_local_history(int root_fd)
{
	struct dirent	*de;
	DIR		*dir;
	int		 fd, found = 0;

	if ((fd = nofollow_dir(root_fd, IDEM_JOURNAL_DIR)) == -1)
		return errno == ENOENT ? 0 : -1;
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	while (!found && (de = readdir(dir)) != NULL)
		found = strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0;
	closedir(dir);
	return found;
}

/*
 * Between the readers and the caller's apply: a failed apply is the
 * caller's, not damage, whatever errno it left.
 */
struct store_load_call {
	journal_apply_fn	 apply;
	journal_hint_fn		 hint;
	void			*arg;
	int			 apply_failed;
};

static int
store_load_apply(const struct journal_record *r, void *arg)
{
	struct store_load_call	*c = arg;

	if (c->apply(r, c->arg) == 0)
		return 0;
	c->apply_failed = 1;
	return -1;
}

static void
store_load_hint(struct journal_record *r, void *arg)
{
	struct store_load_call	*c = arg;

	c->hint(r, c->arg);
}

static int
store_load_failed(struct store_loaded *loaded,
    const struct store_load_call *c, enum store_failure damage)
{
	int	saved_errno = errno;

	if (c->apply_failed)
		loaded->failure = STORE_APPLY_FAILED;
	else if (saved_errno == EINVAL)
		loaded->failure = damage;
	else
		loaded->failure = STORE_UNREADABLE;
	errno = saved_errno;
	return -1;
}

int
store_load(const char *dir, int flags, journal_apply_fn apply,
    journal_hint_fn hint, void *arg, struct shm_segment *seg,
    struct store_loaded *loaded, char **cause)
{
	struct store_load_call	 c = { apply, hint, arg, 0 };
	struct seqalloc_state	 alloc[SUBTAB_KIND_COUNT];
	int			 kind;

	memset(loaded, 0, sizeof *loaded);
	*cause = NULL;
	if (checkpoint_load(dir, store_load_apply, &c, alloc,
	    &loaded->checkpoint, &loaded->checkpoint_records, cause) != 0)
		return store_load_failed(loaded, &c,
		    STORE_CHECKPOINT_CORRUPT);
	if (seg != NULL) {
		for (kind = 1; kind <= SUBTAB_KIND_COUNT; kind++) {
			if (alloc[kind - 1].next_seq > 0)
				seqalloc_note_used(seg, kind,
				    alloc[kind - 1].date,
				    alloc[kind - 1].next_seq - 1);
		}
	}
	if (journal_replay_hinted(dir, loaded->checkpoint, flags,
	    store_load_apply, hint != NULL ? store_load_hint : NULL, &c,
	    &loaded->stats, cause) != 0) {
		loaded->has_corrupt_offset = loaded->stats.has_corrupt_offset;
		loaded->corrupt_offset = loaded->stats.corrupt_offset;
		return store_load_failed(loaded, &c, STORE_JOURNAL_CORRUPT);
	}
	return 0;
}

struct store_records_call {
	store_record_fn		 fn;
	void			*arg;
	struct store_loaded	*loaded;
};

static int
store_records_apply(const struct journal_record *r, void *arg)
{
	struct store_records_call	*c = arg;
	struct store_where		 where;

	where.checkpoint = c->loaded->stats.at_segment == 0;
	where.segment = where.checkpoint ? c->loaded->checkpoint :
	    c->loaded->stats.at_segment;
	where.offset = where.checkpoint ? 0 : c->loaded->stats.at_offset;
	return c->fn(r, &where, c->arg);
}

int
store_records(const char *dir, store_record_fn fn, void *arg,
    struct store_loaded *loaded, char **cause)
{
	struct store_records_call	c = { fn, arg, loaded };

	return store_load(dir, JOURNAL_REPLAY_READONLY, store_records_apply,
	    NULL, &c, NULL, loaded, cause);
}

void
store_entry_id(const struct subtab_entry *e, char *out, size_t out_size)
{
	taskfile_format_id(e->kind, e->date, e->seq, e->sender,
	    e->sender_length, e->recipient, e->recipient_length, out,
	    out_size);
}

const char *
store_key_submission_id(const struct subtab_entry *e, const char *key)
{
	const char	*nl;

	if (e->key_length == 0)
		return NULL;
	if (e->kind == SUBTAB_KIND_REPORT &&
	    (nl = memchr(key, '\n', e->key_length)) != NULL)
		return nl + 1;
	return key;
}

void
store_digest_hex(const uint8_t digest[IDEM_SHA256_BYTES],
    char hex[IDEM_DIGEST_HEX_SIZE])
{
	digest_to_hex(digest, hex);
}

json_t *
store_receipt_json(const char *key, size_t key_length,
    const struct subtab_entry *e)
{
	char	 id[IDEM_MAX_TASK_ID_BYTES + 16], path[IDEM_MAX_TASK_PATH_BYTES];
	char	 hex[IDEM_DIGEST_HEX_SIZE], at[TASKFILE_TIME_BYTES];
	json_t	*r = json_object();

	if (r == NULL)
		return NULL;
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
