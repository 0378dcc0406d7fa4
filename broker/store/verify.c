/* SPDX-License-Identifier: ISC */
/*
 * verify.c: do the journal and the FCoP workspace agree?  Offline and
 * read-only (idemctl verify): the journal is replayed with
 * JOURNAL_REPLAY_READONLY and nothing is written, moved or deleted, so
 * it is safe beside a running broker and after a crash.
 *
 * The index of committed receipts is compared with the checkpoint and
 * the journal for every kind: a task's or report's number and digest,
 * an effect's receipt (its digest, attempt, result and committed_at);
 * effects have no file, so that is all there is to check of them.  And
 * the index must hold every receipt of the checkpoint it names, and be
 * no older than the newest checkpoint once that one left receipts to
 * the index alone (idemd refuses such an index at start-up).
 *
 * Each finding goes to the caller as a struct store_problem, a check
 * (enum store_check) and its facts; the words are the caller's.  Only
 * the cause of a file that cannot be read, or of a damaged journal, is
 * text, and it is shown, never parsed.
 */
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "digest.h"
#include "store.h"

/*
 * How deep verify looks for TASK files below _lifecycle/ and history/:
 * _lifecycle/history/<date>/<task_id>/<task_id>.md is four directories.
 */
#define VERIFY_WALK_MAX_DEPTH	4

/* What one store_verify holds while it runs. */
struct verify {
	struct store_verify	*v;
	int			 root_fd;
	struct store_vrecord	*records;
	size_t			 count, cap;
	json_t			*by_key;	/* key: index */
	json_t			*by_id;		/* TASK-...: index */
	json_t			*seen_files;	/* task_id: path */
	struct store_vrecord	*effects;	/* an effect key's last */
	size_t			 effects_count, effects_cap;
	json_t			*by_effect;	/* key: index */
};

/* One finding to the caller, counted by severity. */
static void
verify_note(struct verify *vf, struct store_problem *p)
{
	struct store_verify	*v = vf->v;

	switch (p->severity) {
	case STORE_SEVERITY_WARNING:
		v->warnings++;
		break;
	case STORE_SEVERITY_UNREADABLE:
		v->unreadable++;
		break;
	case STORE_SEVERITY_NONE:
		v->foreign++;
		break;
	default:
		v->errors++;
		break;
	}
	v->note(p, v->arg);
}

static void
verify_problem(struct store_problem *p, enum store_check check,
    enum store_severity severity, const struct store_vrecord *record,
    const char *path)
{
	memset(p, 0, sizeof *p);
	p->check = check;
	p->severity = severity;
	p->record = record;
	p->path = path;
}

/* A new record at the end of *records: its index, or -1 (no memory). */
static int
verify_append(struct store_vrecord **records, size_t *count, size_t *cap,
    size_t *index)
{
	struct store_vrecord	*grown;
	size_t			 more = *cap == 0 ? 256 : *cap * 2;

	if (*count == *cap) {
		if ((grown = reallocarray(*records, more,
		    sizeof *grown)) == NULL)
			return -1;
		*records = grown;
		*cap = more;
	}
	*index = (*count)++;
	return 0;
}

/* Where the record being replayed is: the checkpoint, or a segment. */
static void
verify_locate(struct verify *vf, struct store_vrecord *vr)
{
	const struct store_loaded	*loaded = &vf->v->loaded;

	vr->checkpoint = loaded->stats.at_segment == 0;
	vr->segment = vr->checkpoint ? loaded->checkpoint :
	    loaded->stats.at_segment;
	vr->offset = loaded->stats.at_offset;
}

/*
 * An effect's record: only the last one of its key is kept, for the
 * index to be compared with.
 */
static int
verify_apply_effect(const struct journal_record *r, struct verify *vf)
{
	struct store_vrecord	*vr;
	json_t			*at;
	size_t			 index;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];

	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	if ((at = json_object_get(vf->by_effect, key)) != NULL)
		index = (size_t)json_integer_value(at);
	else if (verify_append(&vf->effects, &vf->effects_count,
	    &vf->effects_cap, &index) != 0 ||
	    json_object_set_new(vf->by_effect, key,
	    json_integer((json_int_t)index)) == -1)
		return -1;
	vr = &vf->effects[index];
	memset(vr, 0, sizeof *vr);
	vr->entry = r->entry;
	memcpy(vr->key, key, sizeof key);
	verify_locate(vf, vr);
	return 0;
}

static int
verify_apply(const struct journal_record *r, void *arg)
{
	struct verify		*vf = arg;
	struct store_loaded	*loaded = &vf->v->loaded;
	struct store_vrecord	*vr;
	struct store_problem	 p;
	json_t			*at;
	size_t			 index;
	int			 overwrite = 0;
	char			 id[sizeof vr->id], key[sizeof vr->key];

	/* Effects have no file in the workspace: only the index. */
	if (r->entry.kind == SUBTAB_KIND_EFFECT)
		return verify_apply_effect(r, vf);
	/* A key of the largest size fills r->key: no NUL after it. */
	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	store_entry_id(&r->entry, id, sizeof id);
	if (r->entry.key_length > 0 &&
	    (at = json_object_get(vf->by_key, key)) != NULL) {
		index = (size_t)json_integer_value(at);
		overwrite = 1;
	} else if (verify_append(&vf->records, &vf->count, &vf->cap,
	    &index) != 0)
		return -1;
	vr = &vf->records[index];
	/* A submission moved to a fresh number no longer owns the old one. */
	if (overwrite && strcmp(vr->id, id) != 0 &&
	    (at = json_object_get(vf->by_id, vr->id)) != NULL &&
	    (size_t)json_integer_value(at) == index)
		json_object_del(vf->by_id, vr->id);

	/* Numbers are never handed out twice (SPEC.md, "Names"). */
	if ((at = json_object_get(vf->by_id, id)) != NULL &&
	    (size_t)json_integer_value(at) != index) {
		verify_problem(&p, STORE_CHECK_NUMBER_REUSED,
		    STORE_SEVERITY_ERROR, NULL, NULL);
		p.id = id;
		p.other_key = vf->records[json_integer_value(at)].key;
		p.key = key;
		p.segment = loaded->stats.at_segment;
		p.offset = loaded->stats.at_offset;
		p.has_offset = 1;
		verify_note(vf, &p);
	}

	vr->entry = r->entry;
	vr->pruned = 0;		/* the journal holds no tombstones */
	vr->from_index = 0;
	vr->indexed = 0;
	memcpy(vr->key, key, sizeof key);
	memcpy(vr->id, id, sizeof vr->id);
	verify_locate(vf, vr);
	if ((r->entry.key_length > 0 && !overwrite &&
	    json_object_set_new(vf->by_key, key,
	    json_integer((json_int_t)index)) == -1) ||
	    json_object_set_new(vf->by_id, id,
	    json_integer((json_int_t)index)) == -1)
		return -1;
	return 0;
}

/* How a task's or report's index entry differs from its record's. */
static unsigned
verify_task_differs(const struct subtab_entry *j,
    const struct subtab_entry *x)
{
	unsigned	differs = 0;

	if (j->state != SUBTAB_COMMITTED)
		differs |= STORE_FACT_STATE;
	if (j->schema != x->schema)
		differs |= STORE_FACT_SCHEMA;
	if (j->date != x->date || j->seq != x->seq)
		differs |= STORE_FACT_NUMBER;
	if (memcmp(j->request_digest, x->request_digest,
	    IDEM_SHA256_BYTES) != 0)
		differs |= STORE_FACT_REQUEST_DIGEST;
	return differs;
}

/*
 * How an effect's index entry differs from its record's: the facts of
 * its receipt (SPEC.md, "Effects"), which a retry is answered with from
 * either.  A tombstone keeps all of them but the result, whose digest
 * stands for it; a full entry's result must be the bytes of that digest
 * (the record's result has it: effect_complete computed it from them).
 * The lease, the fence and the audit times are not a receipt's.
 */
static unsigned
verify_effect_differs(const struct subtab_entry *j,
    const struct index_entry *e)
{
	const struct subtab_entry	*x = &e->record.entry;
	uint8_t				 digest[IDEM_SHA256_BYTES];
	unsigned			 differs = 0;

	/* A record in flight: the rest is not a receipt yet. */
	if (j->state != SUBTAB_COMMITTED)
		return STORE_FACT_STATE;
	if (j->schema != x->schema)
		differs |= STORE_FACT_SCHEMA;
	if (memcmp(j->request_digest, x->request_digest,
	    IDEM_SHA256_BYTES) != 0)
		differs |= STORE_FACT_REQUEST_DIGEST;
	if (j->attempt != x->attempt)
		differs |= STORE_FACT_ATTEMPT;
	if (memcmp(j->file_digest, x->file_digest, IDEM_SHA256_BYTES) != 0)
		differs |= STORE_FACT_RESULT_DIGEST;
	if (j->created_at_ms != x->created_at_ms)
		differs |= STORE_FACT_COMMITTED_AT;
	if ((j->effect_flags ^ x->effect_flags) & SUBTAB_EFFECT_RECOVERED)
		differs |= STORE_FACT_RECOVERED;
	if (e->form == INDEX_FULL) {
		if (x->result_length != j->result_length)
			differs |= STORE_FACT_RESULT;
		else {
			digest_sha256(x->result_length > 0 ? e->record.result :
			    (const uint8_t *)"", x->result_length, digest);
			if (memcmp(digest, j->file_digest,
			    IDEM_SHA256_BYTES) != 0)
				differs |= STORE_FACT_RESULT;
		}
	}
	return differs;
}

/* index_disagrees, if the facts differs names differ (0: none). */
static void
verify_disagrees(struct verify *vf, const struct store_vrecord *vr,
    const struct index_entry *e, unsigned differs)
{
	struct store_problem	p;

	if (differs == 0)
		return;
	verify_problem(&p, STORE_CHECK_INDEX_DISAGREES, STORE_SEVERITY_ERROR,
	    vr, NULL);
	p.key = vr->key;
	p.indexed = e;
	p.differs = differs;
	verify_note(vf, &p);
}

/*
 * An effect of the index: the checkpoint's or the journal's last record
 * of its key, where they still hold one, must be the same receipt.  One
 * only the index holds (a checkpoint left it there and pruned the
 * segments of its records) has nothing else to agree with.
 */
static int
verify_index_effect(struct verify *vf, const struct index_entry *e)
{
	const struct journal_record	*r = &e->record;
	struct store_vrecord		*vr;
	char				 key[SUBTAB_MAX_KEY_BYTES + 1];
	json_t				*at;

	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	if ((at = json_object_get(vf->by_effect, key)) == NULL) {
		vf->v->index_effects_only++;
		return 0;
	}
	vf->v->index_effects++;
	vr = &vf->effects[json_integer_value(at)];
	vr->indexed = 1;
	verify_disagrees(vf, vr, e, verify_effect_differs(&vr->entry, e));
	return 0;
}

/*
 * Index to journal: an entry the checkpoint or the journal also holds
 * must be the same committed submission there; one only the index holds
 * (evicted, its segments pruned) joins the records, so that its file is
 * checked against the workspace like the others.  Effects: above.
 */
static int
verify_index_visit(const struct index_entry *e, void *arg)
{
	struct verify			*vf = arg;
	struct store_loaded		*loaded = &vf->v->loaded;
	const struct journal_record	*r = &e->record;
	struct store_vrecord		*vr;
	char				 key[SUBTAB_MAX_KEY_BYTES + 1];
	json_t				*at;

	vf->v->index_entries++;
	if (r->entry.kind == SUBTAB_KIND_EFFECT)
		return verify_index_effect(vf, e);
	memcpy(key, r->key, r->entry.key_length);
	key[r->entry.key_length] = '\0';
	if ((at = json_object_get(vf->by_key, key)) != NULL) {
		vr = &vf->records[json_integer_value(at)];
		vr->indexed = 1;
		verify_disagrees(vf, vr, e, verify_task_differs(&vr->entry,
		    &r->entry));
		return 0;
	}
	loaded->stats.at_segment = 0;
	loaded->stats.at_offset = 0;
	if (verify_apply(r, vf) != 0)
		return -1;
	if ((at = json_object_get(vf->by_key, key)) == NULL)
		return -1;
	vr = &vf->records[json_integer_value(at)];
	vr->from_index = 1;
	vr->checkpoint = 0;
	vr->segment = 0;
	vr->pruned = e->form == INDEX_TOMBSTONE;
	vf->v->index_only++;
	return 0;
}

/*
 * A committed receipt of a checkpoint the index was written with must
 * be in the index: checkpoint_write gives the index every committed
 * entry it lacks before the checkpoint is put in place, and start-up
 * leaves such an entry to the index when the table has no room for it
 * (doc/journal.md, "Start-up and recovery"), so one missing there is a
 * receipt lost as soon as the table lets it go.
 */
static void
verify_index_lacks(struct verify *vf, struct store_vrecord *records,
    size_t count)
{
	struct store_vrecord	*vr;
	struct store_problem	 p;
	size_t			 i;

	for (i = 0; i < count; i++) {
		vr = &records[i];
		if (!vr->checkpoint || vr->indexed ||
		    vr->entry.state != SUBTAB_COMMITTED ||
		    vr->entry.key_length == 0)
			continue;
		verify_problem(&p, STORE_CHECK_INDEX_LACKS,
		    STORE_SEVERITY_ERROR, vr, NULL);
		p.key = vr->key;
		verify_note(vf, &p);
	}
}

/*
 * An index older than the newest checkpoint, which left receipts to the
 * index alone (an index restored from an older backup): it lacks what
 * the checkpoints since gave it and then left out of their files, and
 * idemd refuses to start on it (broker/state.c, open_index).
 */
static void
verify_index_stale(struct verify *vf, const char *dir, uint64_t segment,
    uint64_t only, const struct index_stats *st)
{
	struct store_problem	 p;

	verify_problem(&p, STORE_CHECK_INDEX_STALE, STORE_SEVERITY_ERROR,
	    NULL, dir);
	p.segment = segment;
	p.receipts = only;
	p.index_checkpoint = st->checkpoint;
	verify_note(vf, &p);
}

/*
 * The index could not be read: index_busy when other processes hold
 * every reader slot (index.c's EAGAIN: not damage, verify again once
 * they let go), else index_corrupt; cause is freed.
 */
static void
verify_index_unread(struct verify *vf, const char *dir, char *cause)
{
	struct store_problem	 p;

	verify_problem(&p, errno == EAGAIN ? STORE_CHECK_INDEX_BUSY :
	    STORE_CHECK_INDEX_CORRUPT, STORE_SEVERITY_ERROR, NULL, dir);
	p.cause = cause;
	verify_note(vf, &p);
	free(cause);
}

/* The index of committed receipts, against the checkpoint and journal. */
static void
verify_index(struct verify *vf, const char *journal)
{
	struct store_problem	 p;
	struct index_stats	 st;
	struct index		 x;
	char			 dir[PATH_MAX];
	char			*cause = NULL;
	uint64_t		 segment, only;

	snprintf(dir, sizeof dir, "%s/%s", vf->v->root, IDEM_INDEX_DIR);
	/*
	 * The checkpoint's header before the index's meta: a broker
	 * running beside us sets meta.checkpoint before it puts a new
	 * checkpoint in place, so read in this order a healthy index is
	 * never older.  Unreadable here (the journal was read whole, so a
	 * checkpoint pruned since): nothing to compare with.
	 */
	if (checkpoint_index_only(journal, &segment, &only, &cause) != 0) {
		free(cause);
		cause = NULL;
		segment = only = 0;
	}
	if (!index_exists(dir)) {
		if (only > 0) {
			verify_problem(&p, STORE_CHECK_INDEX_MISSING,
			    STORE_SEVERITY_ERROR, NULL, dir);
			vf->v->index_lost = only;
			verify_note(vf, &p);
		}
		return;
	}
	if (index_open(&x, dir, INDEX_READONLY, &cause) != 0) {
		verify_index_unread(vf, dir, cause);
		return;
	}
	if (index_foreach(&x, verify_index_visit, vf, &cause) != 0 ||
	    index_stats(&x, &st, &cause) != 0) {
		verify_index_unread(vf, dir, cause);
	} else if (checkpoint_index_stale(segment, only, st.checkpoint)) {
		verify_index_stale(vf, dir, segment, only, &st);
	} else if (vf->v->loaded.checkpoint != 0 &&
	    st.checkpoint >= vf->v->loaded.checkpoint) {
		/*
		 * The checkpoint was read first, and was put in place only
		 * once the index held its receipts; the index only gains
		 * keys (compact keeps each as a tombstone).
		 */
		verify_index_lacks(vf, vf->records, vf->count);
		verify_index_lacks(vf, vf->effects, vf->effects_count);
	}
	index_close(&x);
}

/*
 * Journal to workspace: every task or report the journal says was
 * created is somewhere in the workspace, and, where idem put it and FCoP
 * tools have not moved it yet, byte for byte what idem wrote.
 */
static void
verify_records(struct verify *vf)
{
	struct store_verify	*v = vf->v;
	struct taskfile_facts	 facts;
	struct store_vrecord	*vr;
	struct store_problem	 p;
	char			 found[PATH_MAX];
	char			 where[IDEM_MAX_TASK_PATH_BYTES + 16];
	char			*cause;
	const char		*csid;
	size_t			 i;
	int			 rc;

	for (i = 0; i < vf->count; i++) {
		vr = &vf->records[i];
		csid = store_key_submission_id(&vr->entry, vr->key);
		if (vr->entry.kind == SUBTAB_KIND_REPORT)
			v->reports++;
		else if (csid == NULL)
			v->legacy++;
		else
			v->submissions++;
		if (vr->entry.state == SUBTAB_RESERVED ||
		    vr->entry.state == SUBTAB_TASK_CREATED) {
			v->intermediate++;
			verify_problem(&p, STORE_CHECK_INTERMEDIATE,
			    STORE_SEVERITY_WARNING, vr, NULL);
			verify_note(vf, &p);
			if (vr->entry.state == SUBTAB_RESERVED)
				continue;
		}

		rc = taskfile_find(vf->root_fd, vr->id, found, sizeof found);
		if (rc == -1) {
			verify_problem(&p, STORE_CHECK_FIND_FAILED,
			    STORE_SEVERITY_UNREADABLE, vr, NULL);
			p.error = errno;
			verify_note(vf, &p);
			continue;
		}
		if (rc == 0) {
			verify_problem(&p, STORE_CHECK_MISSING,
			    STORE_SEVERITY_ERROR, vr, NULL);
			verify_note(vf, &p);
			continue;
		}
		v->present++;
		taskfile_format_path(vr->entry.kind, vr->id, where,
		    sizeof where);
		if (strcmp(found, where) != 0) {
			/* FCoP tools may rewrite what they move: no digest. */
			v->moved++;
			continue;
		}
		if (taskfile_inspect(vf->root_fd, found, &facts,
		    &cause) == -1) {
			verify_problem(&p, STORE_CHECK_FILE_UNREADABLE,
			    STORE_SEVERITY_UNREADABLE, vr, found);
			p.error = errno;
			p.cause = cause;
			verify_note(vf, &p);
			free(cause);
			continue;
		}
		if (vr->pruned)
			continue;	/* compacted: only that it exists */
		if (memcmp(facts.file_digest, vr->entry.file_digest,
		    IDEM_SHA256_BYTES) != 0) {
			verify_problem(&p, STORE_CHECK_FILE_DIGEST,
			    STORE_SEVERITY_ERROR, vr, found);
			memcpy(p.found_digest, facts.file_digest,
			    IDEM_SHA256_BYTES);
			memcpy(p.recorded_digest, vr->entry.file_digest,
			    IDEM_SHA256_BYTES);
			verify_note(vf, &p);
		} else if (csid != NULL && facts.has_client_submission_id &&
		    strcmp(facts.client_submission_id, csid) != 0) {
			verify_problem(&p, STORE_CHECK_RECORD_IDENTITY,
			    STORE_SEVERITY_ERROR, vr, found);
			p.client_submission_id = facts.client_submission_id;
			verify_note(vf, &p);
		}
	}
}

/*
 * Would FCoP's reference library parse this TASK or REPORT file (its
 * name and its front matter)?  A file it cannot parse is invisible to
 * every FCoP tool: an error, whoever wrote it.
 */
static void
verify_fcop(struct verify *vf, const char *path, const char *file,
    const struct taskfile_facts *facts)
{
	struct store_problem	 p;
	const char		*why;

	if ((why = taskfile_fcop_problem(file, vf->v->sequence_digits,
	    facts)) == NULL)
		return;
	vf->v->not_fcop++;
	verify_problem(&p, STORE_CHECK_NOT_FCOP, STORE_SEVERITY_ERROR, NULL,
	    path);
	p.reason = why;
	verify_note(vf, &p);
}

/* The file at path cannot be inspected: say so, with its cause. */
static void
verify_unreadable_file(struct verify *vf, const char *path, char *cause)
{
	struct store_problem	 p;

	verify_problem(&p, STORE_CHECK_FILE_UNREADABLE,
	    STORE_SEVERITY_UNREADABLE, NULL, path);
	p.error = errno;
	p.cause = cause;
	verify_note(vf, &p);
	free(cause);
}

/*
 * A REPORT file under reports/: FCoP's rules, and with v->report_keys
 * whether the state records an idem REPORT's number for the submission
 * it names.
 */
static void
verify_report_file(struct verify *vf, const char *path, const char *file)
{
	struct taskfile_facts	 facts;
	struct store_problem	 p;
	struct store_vrecord	*vr;
	json_t			*at;
	const char		*csid;
	char			 report_id[NAME_MAX + 1];
	char			*cause;
	int			 known = 0;

	vf->v->reports_checked++;
	if (taskfile_inspect(vf->root_fd, path, &facts, &cause) == -1) {
		verify_unreadable_file(vf, path, cause);
		return;
	}
	verify_fcop(vf, path, file, &facts);
	if (!vf->v->report_keys || !facts.has_client_submission_id)
		return;
	/*
	 * A report's key is "<task_id>\n<id>" and its file does not say
	 * the task_id: so by its number, which the state records with the
	 * key (numbers are never handed out twice).
	 */
	snprintf(report_id, sizeof report_id, "%.*s", (int)(strlen(file) - 3),
	    file);	/* ".md" */
	if ((at = json_object_get(vf->by_id, report_id)) != NULL) {
		vr = &vf->records[json_integer_value(at)];
		csid = store_key_submission_id(&vr->entry, vr->key);
		known = vr->entry.kind == SUBTAB_KIND_REPORT && csid != NULL &&
		    strcmp(csid, facts.client_submission_id) == 0;
	}
	if (!known) {
		verify_problem(&p, STORE_CHECK_UNKNOWN_SUBMISSION,
		    STORE_SEVERITY_ERROR, NULL, path);
		p.id = report_id;
		p.client_submission_id = facts.client_submission_id;
		verify_note(vf, &p);
	}
}

/* One TASK file found on disk: is it idem's, and does the journal agree? */
static void
verify_file(struct verify *vf, const char *path, const char *file)
{
	struct store_verify	*v = vf->v;
	struct taskfile_facts	 facts;
	struct store_vrecord	*vr;
	struct store_problem	 p;
	json_t			*at;
	char			 task_id[NAME_MAX + 1];
	char			*cause;
	size_t			 length;

	length = strlen(file) - 3;	/* ".md" */
	memcpy(task_id, file, length);
	task_id[length] = '\0';
	v->files++;
	if ((at = json_object_get(vf->seen_files, task_id)) != NULL) {
		verify_problem(&p, STORE_CHECK_DUPLICATE,
		    STORE_SEVERITY_WARNING, NULL, path);
		p.id = task_id;
		p.other_path = json_string_value(at);
		verify_note(vf, &p);
		return;
	}
	json_object_set_new(vf->seen_files, task_id, json_string(path));
	if (taskfile_inspect(vf->root_fd, path, &facts, &cause) == -1) {
		verify_unreadable_file(vf, path, cause);
		return;
	}
	verify_fcop(vf, path, file, &facts);
	if (facts.has_client_submission_id) {
		at = json_object_get(vf->by_key, facts.client_submission_id);
		if (at == NULL) {
			verify_problem(&p, STORE_CHECK_UNKNOWN_SUBMISSION,
			    STORE_SEVERITY_ERROR, NULL, path);
			p.id = task_id;
			p.client_submission_id = facts.client_submission_id;
			verify_note(vf, &p);
			return;
		}
		vr = &vf->records[json_integer_value(at)];
		if (strcmp(vr->id, task_id) != 0) {
			verify_problem(&p, STORE_CHECK_TASK_ID_MISMATCH,
			    STORE_SEVERITY_ERROR, vr, path);
			p.client_submission_id = facts.client_submission_id;
			verify_note(vf, &p);
			return;
		}
		v->files_idem++;
		return;
	}
	/* No submission id: idem's legacy task, or another FCoP writer's. */
	if ((at = json_object_get(vf->by_id, task_id)) != NULL) {
		vr = &vf->records[json_integer_value(at)];
		if (vr->entry.key_length == 0 || !facts.has_front_matter) {
			v->files_legacy += vr->entry.key_length == 0;
			v->files_idem += vr->entry.key_length != 0;
			return;
		}
		/* A reservation: another writer took the name first. */
		verify_problem(&p, STORE_CHECK_FILE_IDENTITY,
		    vr->entry.state == SUBTAB_RESERVED ?
		    STORE_SEVERITY_WARNING : STORE_SEVERITY_ERROR, vr, path);
		verify_note(vf, &p);
		return;
	}
	verify_problem(&p, STORE_CHECK_FOREIGN, STORE_SEVERITY_NONE, NULL,
	    path);
	verify_note(vf, &p);
}

/* Every TASK-*.md and REPORT-*.md below path, to depth directories down. */
static void
verify_walk(struct verify *vf, const char *path, int depth)
{
	struct store_problem	 p;
	struct dirent		*de;
	struct stat		 st;
	DIR			*d;
	size_t			 length;
	char			 child[PATH_MAX];
	int			 fd;

	if ((fd = openat(vf->root_fd, path, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC | O_NOFOLLOW)) == -1) {
		if (errno != ENOENT) {
			verify_problem(&p, STORE_CHECK_DIR_UNREADABLE,
			    STORE_SEVERITY_UNREADABLE, NULL, path);
			p.error = errno;
			verify_note(vf, &p);
		}
		return;
	}
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0) {
				verify_problem(&p, STORE_CHECK_DIR_READ_FAILED,
				    STORE_SEVERITY_UNREADABLE, NULL, path);
				p.error = errno;
				verify_note(vf, &p);
			}
			break;
		}
		/* Dot files: ., .., and idem's temporaries. */
		if (de->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(child, sizeof child, "%s/%s", path,
		    de->d_name) >= sizeof child)
			continue;
		if (fstatat(vf->root_fd, child, &st, AT_SYMLINK_NOFOLLOW) == -1)
			continue;
		length = strlen(de->d_name);
		if (S_ISDIR(st.st_mode) && depth > 0)
			verify_walk(vf, child, depth - 1);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(de->d_name, "TASK-", 5) == 0 && length > 8 &&
		    strcmp(de->d_name + length - 3, ".md") == 0)
			verify_file(vf, child, de->d_name);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(de->d_name, "REPORT-", 7) == 0 && length > 10 &&
		    strcmp(de->d_name + length - 3, ".md") == 0)
			verify_report_file(vf, child, de->d_name);
	}
	closedir(d);
}

/* The journal, read-only, and what reading it found. */
static int
verify_journal(struct verify *vf, const char *dir, char **cause)
{
	struct store_verify	*v = vf->v;
	struct store_loaded	*loaded = &v->loaded;
	struct store_problem	 p;
	struct stat		 st;

	if (stat(dir, &st) == -1 && errno == ENOENT) {
		verify_problem(&p, STORE_CHECK_NO_JOURNAL,
		    STORE_SEVERITY_WARNING, NULL, dir);
		verify_note(vf, &p);
	}
	if (store_load(dir, JOURNAL_REPLAY_READONLY, verify_apply, NULL, vf,
	    NULL, loaded, cause) != 0) {
		if (loaded->failure != STORE_CHECKPOINT_CORRUPT &&
		    loaded->failure != STORE_JOURNAL_CORRUPT) {
			/* Not damage: we could not read it (or ran out). */
			v->failure = STORE_VERIFY_JOURNAL_UNREADABLE;
			v->error = errno;
			return -1;
		}
		v->journal_complete = 0;
		v->corrupt = *cause;
		*cause = NULL;
		verify_problem(&p, STORE_CHECK_JOURNAL_CORRUPT,
		    STORE_SEVERITY_ERROR, NULL, NULL);
		p.cause = v->corrupt;
		p.segment = loaded->stats.at_segment;
		p.offset = loaded->corrupt_offset;
		p.has_offset = loaded->has_corrupt_offset;
		verify_note(vf, &p);
	} else if (loaded->stats.torn_segment != 0) {
		verify_problem(&p, STORE_CHECK_TORN_TAIL,
		    STORE_SEVERITY_WARNING, NULL, dir);
		p.segment = loaded->stats.torn_segment;
		p.offset = loaded->stats.torn_offset;
		p.has_offset = 1;
		verify_note(vf, &p);
	}
	return 0;
}

int
store_verify(struct store_verify *v, char **cause)
{
	static const char *const walk[] = { "_lifecycle", "history",
	    IDEM_REPORTS_DIR };
	struct verify	 vf;
	struct stat	 st;
	char		 dir[PATH_MAX];
	size_t		 i;
	int		 rc = -1;

	*cause = NULL;
	v->failure = STORE_VERIFY_OK;
	v->journal_complete = 1;
	v->corrupt = NULL;
	memset(&v->loaded, 0, sizeof v->loaded);
	v->errors = v->warnings = v->unreadable = v->foreign = 0;
	v->submissions = v->legacy = v->reports = 0;
	v->intermediate = v->present = v->moved = 0;
	v->files = v->files_idem = v->files_legacy = 0;
	v->reports_checked = v->not_fcop = 0;
	v->index_entries = v->index_only = v->index_lost = 0;
	v->effects = 0;
	v->index_effects = v->index_effects_only = 0;
	memset(&vf, 0, sizeof vf);
	vf.v = v;
	if (store_journal_dir(v->root, dir, sizeof dir) != 0 ||
	    (vf.root_fd = open(v->root, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1) {
		v->failure = STORE_VERIFY_ROOT_UNREADABLE;
		v->error = errno;
		return -1;
	}
	/*
	 * Without .idem/ (a real directory) this is not a root idemd ever
	 * served: "clean" would be a claim about nothing (a mistyped root).
	 */
	memset(&st, 0, sizeof st);
	if (fstatat(vf.root_fd, IDEM_STATE_DIR, &st, AT_SYMLINK_NOFOLLOW) ==
	    -1 || !S_ISDIR(st.st_mode)) {
		v->failure = STORE_VERIFY_NOT_WORKSPACE;
		v->state_dir = S_ISLNK(st.st_mode) ? STORE_STATE_DIR_SYMLINK :
		    !S_ISDIR(st.st_mode) && st.st_mode != 0 ?
		    STORE_STATE_DIR_NOT_DIR : STORE_STATE_DIR_MISSING;
		close(vf.root_fd);
		return -1;
	}
	vf.by_key = json_object();
	vf.by_id = json_object();
	vf.seen_files = json_object();
	vf.by_effect = json_object();
	if (vf.by_key == NULL || vf.by_id == NULL || vf.seen_files == NULL ||
	    vf.by_effect == NULL) {
		v->failure = STORE_VERIFY_NO_MEMORY;
		v->error = ENOMEM;
		goto out;
	}
	if (verify_journal(&vf, dir, cause) != 0)
		goto out;
	for (i = 0; i < vf.effects_count; i++)
		v->effects += vf.effects[i].entry.state == SUBTAB_COMMITTED;
	if (v->journal_complete)
		verify_index(&vf, dir);
	verify_records(&vf);
	if (v->journal_complete) {
		for (i = 0; i < sizeof walk / sizeof walk[0]; i++)
			verify_walk(&vf, walk[i], VERIFY_WALK_MAX_DEPTH);
	}
	rc = 0;
out:
	free(vf.records);
	free(vf.effects);
	json_decref(vf.by_effect);
	json_decref(vf.by_key);
	json_decref(vf.by_id);
	json_decref(vf.seen_files);
	close(vf.root_fd);
	return rc;
}

void
store_verify_free(struct store_verify *v)
{
	free(v->corrupt);
	v->corrupt = NULL;
}
