/* SPDX-License-Identifier: ISC */
/*
 * idemctl_import.c: idemctl store import --root DIR --store URI, a local
 * history moved into the PostgreSQL store (doc/cluster.md, "Importing a
 * local history").
 *
 * The local history is read only through the store's API, as idemd
 * reads it at start-up: store_records (the newest checkpoint, then the
 * journal after it; the last record of a key wins) and the index of
 * committed receipts (index_foreach), which holds the keys the table let
 * go and says which receipts were compacted to tombstones.
 * What is written is pg_history.c's, in one transaction: nothing at all
 * when a single row conflicts.
 *
 * It holds DIR's lock (the local idemd's) from before it reads until it
 * has committed and marked DIR imported (.idem/imported), so no local
 * broker changes the history meanwhile; it never writes anything under
 * DIR but the workspace's id, that mark and that lock.
 */
#include <sys/file.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "store.h"
#include "workspace_id.h"
#ifdef HAVE_POSTGRESQL
#include "pg.h"
#endif
#include "idemctl_store.h"

#define IMPORT_EXIT_OK		0
#define IMPORT_EXIT_REFUSED	1
#define IMPORT_EXIT_UNREACHABLE	3

/* Unfinished submissions named in the refusal, at most. */
#define IMPORT_MAX_NAMED	20

#ifdef HAVE_POSTGRESQL

/* One key's last state, or one legacy number. */
struct imp_entry {
	struct subtab_entry	entry;
	char			key[SUBTAB_MAX_KEY_BYTES];
	int			tombstone;	/* the index's compacted form */
	size_t			order;		/* as read: the last one wins */
	/* A committed effect's result, NUL-terminated (malloc'd), or NULL. */
	char			*result;
};

struct imp {
	struct imp_entry	*v;
	size_t			 n, size;
	int			 failed;	/* out of memory */
	/* The checkpoint's allocators: past numbers no record keeps. */
	struct seqalloc_state	 alloc[SUBTAB_KIND_COUNT];
};

/* A copy of an effect record's result bytes, as text: 0, or -1. */
static int
imp_result(const struct journal_record *r, char **out)
{
	*out = NULL;
	if (r->entry.kind != SUBTAB_KIND_EFFECT || r->result == NULL)
		return 0;
	if ((*out = malloc((size_t)r->entry.result_length + 1)) == NULL)
		return -1;
	memcpy(*out, r->result, r->entry.result_length);
	(*out)[r->entry.result_length] = '\0';
	return 0;
}

static int
imp_add(struct imp *im, const struct journal_record *r, int tombstone)
{
	struct imp_entry	*grown, *x;
	const struct subtab_entry *e = &r->entry;
	char			*result;

	if (im->n == im->size) {
		im->size = im->size == 0 ? 1024 : im->size * 2;
		if ((grown = reallocarray(im->v, im->size, sizeof *grown)) ==
		    NULL) {
			im->failed = 1;
			return -1;
		}
		im->v = grown;
	}
	if (imp_result(r, &result) != 0) {
		im->failed = 1;
		return -1;
	}
	x = &im->v[im->n];
	memset(x, 0, sizeof *x);
	x->entry = *e;
	memcpy(x->key, r->key, e->key_length);
	x->tombstone = tombstone;
	x->result = result;
	x->order = im->n++;
	return 0;
}

static int
imp_record(const struct journal_record *r, const struct store_where *w,
    void *arg)
{
	(void)w;
	if (r->entry.key_length > SUBTAB_MAX_KEY_BYTES) {
		errno = EINVAL;
		return -1;
	}
	return imp_add(arg, r, 0);
}

/* By kind and key, then as read; legacy numbers by their number. */
static int
imp_compare(const void *a_, const void *b_)
{
	const struct imp_entry	*a = a_, *b = b_;
	int			 c;

	if (a->entry.kind != b->entry.kind)
		return a->entry.kind < b->entry.kind ? -1 : 1;
	if (a->entry.key_length != b->entry.key_length)
		return a->entry.key_length < b->entry.key_length ? -1 : 1;
	if ((c = memcmp(a->key, b->key, a->entry.key_length)) != 0)
		return c;
	if (a->entry.key_length == 0) {
		if (a->entry.date != b->entry.date)
			return a->entry.date < b->entry.date ? -1 : 1;
		if (a->entry.seq != b->entry.seq)
			return a->entry.seq < b->entry.seq ? -1 : 1;
	}
	if (a->order != b->order)
		return a->order < b->order ? -1 : 1;
	return 0;
}

/* Sorted, the last record of each key (and each legacy number) kept. */
static void
imp_last_only(struct imp *im)
{
	size_t	i, out = 0;

	qsort(im->v, im->n, sizeof *im->v, imp_compare);
	for (i = 0; i < im->n; i++) {
		const struct imp_entry *a = &im->v[i], *b = &im->v[i + 1];

		if (i + 1 < im->n && a->entry.kind == b->entry.kind &&
		    a->entry.key_length == b->entry.key_length &&
		    memcmp(a->key, b->key, a->entry.key_length) == 0 &&
		    (a->entry.key_length != 0 || (a->entry.date ==
		    b->entry.date && a->entry.seq == b->entry.seq))) {
			free(im->v[i].result);	/* a record superseded */
			continue;
		}
		im->v[out++] = *a;
	}
	im->n = out;
}

struct imp_index {
	struct imp	*im;
	size_t		 known;		/* the table's entries, sorted */
};

/* The table's entry of probe's key (its first known entries), or NULL. */
static struct imp_entry *
imp_find(struct imp_index *ix, struct imp_entry *probe)
{
	size_t			 lo = 0, hi = ix->known, mid;
	struct imp_entry	*m;
	int			 c;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		m = &ix->im->v[mid];
		/* Any record of the key: compare without the order. */
		probe->order = m->order;
		if ((c = imp_compare(probe, m)) == 0)
			return m;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* An entry of the index: the table's key in the index's form, or new. */
static int
imp_index_entry(const struct index_entry *ie, void *arg)
{
	struct imp_index	*ix = arg;
	struct imp_entry	 probe, *m;

	memset(&probe, 0, sizeof probe);
	probe.entry = ie->record.entry;
	memcpy(probe.key, ie->record.key, ie->record.entry.key_length);
	if ((m = imp_find(ix, &probe)) != NULL) {
		/*
		 * The same committed facts (a committed entry never
		 * changes); the index's form wins: compaction dropped the
		 * body even if the table still held it.
		 */
		if (m->entry.state == SUBTAB_COMMITTED) {
			char	*result;

			if (imp_result(&ie->record, &result) != 0) {
				ix->im->failed = 1;
				return -1;
			}
			m->entry = ie->record.entry;
			m->tombstone = ie->form == INDEX_TOMBSTONE;
			free(m->result);
			m->result = result;
		}
		return 0;
	}
	return imp_add(ix->im, &ie->record, ie->form == INDEX_TOMBSTONE) == 0 ?
	    0 : -1;
}

/*
 * The row's key in the store: a report's scope is its task, an effect's
 * its effect_kind (both before the key's separator).
 */
static void
imp_key(const struct imp_entry *x, char scope[SUBTAB_MAX_KEY_BYTES + 1],
    char id[SUBTAB_MAX_KEY_BYTES + 1], struct pgstore_key *k)
{
	const char	*nl;
	size_t		 n = x->entry.key_length;

	scope[0] = '\0';
	snprintf(id, SUBTAB_MAX_KEY_BYTES + 1, "%.*s", (int)n, x->key);
	if ((x->entry.kind == SUBTAB_KIND_REPORT ||
	    x->entry.kind == SUBTAB_KIND_EFFECT) && (nl = memchr(x->key,
	    x->entry.kind == SUBTAB_KIND_EFFECT ? SUBTAB_EFFECT_SEPARATOR :
	    '\n', n)) != NULL) {
		snprintf(scope, SUBTAB_MAX_KEY_BYTES + 1, "%.*s",
		    (int)(nl - x->key), x->key);
		snprintf(id, SUBTAB_MAX_KEY_BYTES + 1, "%.*s",
		    (int)(n - (size_t)(nl - x->key) - 1), nl + 1);
	}
	k->kind = (enum subtab_kind)x->entry.kind;
	k->scope = scope;
	k->id = id;
}

/* DIR's lock, held: the fd, or -1 (said). */
static int
imp_lock(int root_fd, const char *root)
{
	char	buf[32];
	ssize_t	n;
	int	fd;

	if ((fd = nofollow_openat(root_fd, IDEM_LOCK_NAME, O_RDWR | O_CREAT,
	    0644)) == -1) {
		fprintf(stderr, "idemctl store import: %s/%s: %s\n", root,
		    IDEM_LOCK_NAME, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
		n = pread(fd, buf, sizeof buf - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		fprintf(stderr, "idemctl store import: %s is in use by a local "
		    "idemd (pid %s): stop it first, then import; nothing was "
		    "written\n", root, buf[0] != '\0' ? buf : "unknown");
		close(fd);
		return -1;
	}
	return fd;
}

static int
imp_ignore(const struct journal_record *r, void *arg)
{
	(void)r;
	(void)arg;
	return 0;
}

/*
 * The index is missing, or older than the newest checkpoint, which left
 * receipts to it alone: what it lacks would never reach the store, and
 * their retries would execute again there.  idemd refuses to start on
 * such a root; so does the import, in idemd's words.
 */
static int
imp_index_lacks(const char *dir, uint64_t segment, uint64_t only, int older)
{
	fprintf(stderr, "idemctl store import: the index %s is %s, and "
	    "checkpoint-%016llx.snap left %llu committed receipts to the "
	    "index alone: restore an index taken with or after that "
	    "checkpoint (idemctl backup copies them together), or the whole "
	    "backup, and import again; nothing was written\n", dir, older ?
	    "older than the newest checkpoint" : "missing",
	    (unsigned long long)segment, (unsigned long long)only);
	return IMPORT_EXIT_REFUSED;
}

/* The local history: every key's last state, read-only; 0 or an exit. */
static int
imp_read(const char *root, struct imp *im)
{
	struct imp_index	 ix;
	struct store_loaded	 loaded;
	struct index_stats	 st;
	struct index		 x;
	char			 dir[PATH_MAX], *cause = NULL;
	uint64_t		 segment, only;
	int			 rc;

	memset(&loaded, 0, sizeof loaded);
	if (store_journal_dir(root, dir, sizeof dir) != 0 ||
	    store_records(dir, imp_record, im, &loaded, &cause) != 0) {
		fprintf(stderr, "idemctl store import: the local history of "
		    "%s: %s%s\n", root, im->failed ? "out of memory" : cause !=
		    NULL ? cause : strerror(errno), loaded.failure ==
		    STORE_JOURNAL_CORRUPT || loaded.failure ==
		    STORE_CHECKPOINT_CORRUPT ? " (idemctl verify says more)" :
		    "");
		free(cause);
		return IMPORT_EXIT_REFUSED;
	}
	if (loaded.stats.torn_segment != 0) {
		/* An append that never completed was never acknowledged. */
		fprintf(stderr, "idemctl store import: warning: the journal "
		    "ends in a torn append (segment %llu, offset %llu): not "
		    "imported, it was never acknowledged\n",
		    (unsigned long long)loaded.stats.torn_segment,
		    (unsigned long long)loaded.stats.torn_offset);
	}
	/*
	 * The checkpoint keeps no record of a call without an id, only the
	 * allocator's position past it: the counters must pass it too.
	 */
	{
		uint64_t	loaded_segment, records;

		if (checkpoint_load(dir, imp_ignore, NULL, im->alloc,
		    &loaded_segment, &records, &cause) != 0) {
			fprintf(stderr, "idemctl store import: the checkpoint "
			    "of %s: %s\n", dir, cause != NULL ? cause :
			    strerror(errno));
			free(cause);
			return IMPORT_EXIT_REFUSED;
		}
	}
	imp_last_only(im);
	if (checkpoint_index_only(dir, &segment, &only, &cause) != 0) {
		fprintf(stderr, "idemctl store import: the checkpoint of %s: "
		    "%s\n", dir, cause != NULL ? cause : strerror(errno));
		free(cause);
		return IMPORT_EXIT_REFUSED;
	}
	snprintf(dir, sizeof dir, "%s/%s", root, IDEM_INDEX_DIR);
	if (!index_exists(dir))
		return only > 0 ? imp_index_lacks(dir, segment, only, 0) :
		    IMPORT_EXIT_OK;
	if (index_open(&x, dir, INDEX_READONLY, &cause) != 0 ||
	    index_stats(&x, &st, &cause) != 0) {
		fprintf(stderr, "idemctl store import: the index %s: %s\n",
		    dir, cause != NULL ? cause : strerror(errno));
		free(cause);
		index_close(&x);
		return IMPORT_EXIT_REFUSED;
	}
	if (checkpoint_index_stale(segment, only, st.checkpoint)) {
		index_close(&x);
		return imp_index_lacks(dir, segment, only, 1);
	}
	ix.im = im;
	ix.known = im->n;
	rc = index_foreach(&x, imp_index_entry, &ix, &cause);
	index_close(&x);
	if (rc != 0) {
		fprintf(stderr, "idemctl store import: the index %s: %s\n",
		    dir, im->failed ? "out of memory" : cause != NULL ? cause :
		    strerror(errno));
		free(cause);
		return IMPORT_EXIT_REFUSED;
	}
	return IMPORT_EXIT_OK;
}

/*
 * Unfinished submissions and effects: what the import cannot move.
 * 0, or the exit status (said).
 */
static int
imp_refusals(const char *root, const struct imp *im)
{
	struct pgstore_key	 k;
	char			 id[IDEM_MAX_TASK_ID_BYTES + 16];
	char			 scope[SUBTAB_MAX_KEY_BYTES + 1];
	char			 sid[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 i, unfinished = 0, effects = 0;

	for (i = 0; i < im->n; i++) {
		const struct imp_entry *x = &im->v[i];

		if (x->entry.key_length == 0 ||
		    x->entry.state == SUBTAB_COMMITTED)
			continue;
		if (x->entry.kind == SUBTAB_KIND_EFFECT) {
			/* released: the next begin's; imported as it is. */
			if (x->entry.state == SUBTAB_RELEASED)
				continue;
			if (effects++ < IMPORT_MAX_NAMED) {
				imp_key(x, scope, sid, &k);
				fprintf(stderr, "idemctl store import: "
				    "unfinished: effect %s of kind %s (%s, "
				    "attempt %u)\n", sid, scope,
				    x->entry.state == SUBTAB_RESERVED ?
				    "reserved" : "outcome_unknown",
				    (unsigned)x->entry.attempt);
			}
			continue;
		}
		if (unfinished++ < IMPORT_MAX_NAMED) {
			store_entry_id(&x->entry, id, sizeof id);
			fprintf(stderr, "idemctl store import: unfinished: "
			    "%.*s (%s, %s)\n", (int)x->entry.key_length, x->key,
			    id, subtab_state_name(x->entry.state));
		}
	}
	if (unfinished > 0)
		fprintf(stderr, "idemctl store import: %zu unfinished "
		    "submission%s in %s: start the local idemd once on it "
		    "(its recovery finishes them), stop it, then import "
		    "again; nothing was written\n", unfinished,
		    unfinished == 1 ? "" : "s", root);
	/* No recovery settles an effect: only its owner or evidence. */
	if (effects > 0)
		fprintf(stderr, "idemctl store import: %zu unfinished "
		    "effect%s in %s: settle each on the local idemd "
		    "(effect_complete by its owner, or effect_resolve with "
		    "evidence once its lease lapsed), stop it, then import "
		    "again; nothing was written\n", effects,
		    effects == 1 ? "" : "s", root);
	return unfinished > 0 || effects > 0 ? IMPORT_EXIT_REFUSED : 0;
}

/* Every entry into the store, one transaction; the exit status. */
static int
imp_write(const char *uri, const char *workspace, const struct imp *im)
{
	struct pgstore			 st;
	struct pgstore_key		 k;
	enum pgstore_import_result	 r;
	char				 scope[SUBTAB_MAX_KEY_BYTES + 1];
	char				 id[SUBTAB_MAX_KEY_BYTES + 1];
	char				*cause = NULL, *receipt;
	size_t				 i, added = 0, present = 0;
	size_t				 conflicts = 0, legacy = 0, effects = 0;
	json_t				*j;
	int				 rc;

	memset(&st, 0, sizeof st);
	snprintf(st.workspace, sizeof st.workspace, "%s", workspace);
	if (pgstore_open(&st, uri, &cause) != 0 ||
	    pgstore_import_begin(&st, &cause) != 0)
		goto unreachable;
	for (i = 0; i < im->n; i++) {
		const struct imp_entry *x = &im->v[i];

		if (x->entry.kind == SUBTAB_KIND_EFFECT) {
			/* committed (whole or a tombstone) or released */
			imp_key(x, scope, id, &k);
			if (x->entry.state == SUBTAB_COMMITTED && !x->tombstone &&
			    (x->result == NULL ||
			    strlen(x->result) != x->entry.result_length)) {
				errno = EPROTO;
				if (asprintf(&cause, "effect %s of kind %s: its "
				    "committed result is missing or not text in "
				    "the local history", id, scope) == -1)
					cause = NULL;
				goto rollback;
			}
			rc = pgstore_import_effect(&st, &k, &x->entry,
			    x->result, x->tombstone, &r, &cause);
			effects += rc == 0 && r == PGSTORE_IMPORT_ADDED;
		} else if (x->entry.key_length == 0) {
			rc = pgstore_import_legacy(&st,
			    (enum subtab_kind)x->entry.kind, x->entry.date,
			    x->entry.seq, &r, &cause);
			legacy += rc == 0 && r == PGSTORE_IMPORT_ADDED;
		} else {
			imp_key(x, scope, id, &k);
			receipt = NULL;
			if (!x->tombstone) {
				/* The bytes every broker answers with. */
				j = store_receipt_json(x->key,
				    x->entry.key_length, &x->entry);
				receipt = j != NULL ? json_dumps(j,
				    JSON_COMPACT) : NULL;
				json_decref(j);
				if (receipt == NULL) {
					cause = strdup("out of memory");
					goto rollback;
				}
			}
			rc = pgstore_import_row(&st, &k, &x->entry, receipt, &r,
			    &cause);
			free(receipt);
			added += rc == 0 && r == PGSTORE_IMPORT_ADDED;
		}
		if (rc != 0)
			goto rollback;
		present += r == PGSTORE_IMPORT_PRESENT;
		if (r == PGSTORE_IMPORT_CONFLICT) {
			conflicts++;
			if (x->entry.key_length > 0)
				fprintf(stderr, "idemctl store import: conflict: "
				    "%.*s: %s\n", (int)x->entry.key_length,
				    x->key, cause != NULL ? cause : "");
			else
				fprintf(stderr, "idemctl store import: conflict: "
				    "%s\n", cause != NULL ? cause : "");
			free(cause);
			cause = NULL;
		}
	}
	/* The local allocators' positions (a kind's index is kind - 1). */
	for (i = 0; i < SUBTAB_KIND_COUNT && conflicts == 0; i++)
		if (im->alloc[i].date != 0 && im->alloc[i].next_seq > 1 &&
		    pgstore_import_counter(&st, (enum subtab_kind)(i + 1),
		    im->alloc[i].date, im->alloc[i].next_seq, &cause) != 0)
			goto rollback;
	if (conflicts > 0) {
		pgstore_import_finish(&st, 0, &cause);
		pgstore_close(&st);
		fprintf(stderr, "idemctl store import: %zu conflict%s with the "
		    "store's rows: nothing was written\n", conflicts,
		    conflicts == 1 ? "" : "s");
		return IMPORT_EXIT_REFUSED;
	}
	if (pgstore_import_finish(&st, 1, &cause) != 0)
		goto unreachable;
	pgstore_close(&st);
	printf("import: workspace %s: %zu submission%s added, %zu effect%s "
	    "added, %zu legacy number%s added, %zu already in the store\n",
	    workspace, added, added == 1 ? "" : "s", effects, effects == 1 ?
	    "" : "s", legacy, legacy == 1 ? "" : "s", present);
	return IMPORT_EXIT_OK;
rollback:
	{
		char	*ignored = NULL;
		int	 saved = errno;	/* libpq's calls may change it */

		pgstore_import_finish(&st, 0, &ignored);
		free(ignored);
		errno = saved;
	}
unreachable:
	rc = errno == EPROTO ? IMPORT_EXIT_REFUSED : IMPORT_EXIT_UNREACHABLE;
	fprintf(stderr, "idemctl store import: %s; nothing was written\n",
	    cause != NULL ? cause : strerror(errno));
	free(cause);
	pgstore_close(&st);
	return rc;
}

int
idemctl_store_import(const char *uri, const char *root)
{
	struct imp	 im;
	struct stat	 sb;
	char		 workspace[WORKSPACE_ID_BYTES + 1], *cause = NULL;
	size_t		 i;
	int		 root_fd, lock_fd = -1, status;

	memset(&im, 0, sizeof im);
	if (sodium_init() < 0)
		return IMPORT_EXIT_UNREACHABLE;
	if ((root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1) {
		fprintf(stderr, "idemctl store import: %s: %s\n", root,
		    strerror(errno));
		return IMPORT_EXIT_UNREACHABLE;
	}
	if (nofollow_lstat(root_fd, IDEM_JOURNAL_DIR, &sb) != 0 ||
	    !S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "idemctl store import: %s/%s: no local history "
		    "(a workspace a local idemd served has one)\n", root,
		    IDEM_JOURNAL_DIR);
		close(root_fd);
		return IMPORT_EXIT_REFUSED;
	}
	if ((lock_fd = imp_lock(root_fd, root)) == -1) {
		close(root_fd);
		return IMPORT_EXIT_REFUSED;
	}
	if ((status = imp_read(root, &im)) != 0 ||
	    (status = imp_refusals(root, &im)) != 0)
		goto out;
	if (workspace_id_get(root_fd, 1, workspace, &cause) != 1) {
		fprintf(stderr, "idemctl store import: %s: %s\n", root,
		    cause != NULL ? cause : strerror(errno));
		free(cause);
		status = IMPORT_EXIT_REFUSED;
		goto out;
	}
	status = imp_write(uri, workspace, &im);
	/*
	 * The history is the store's now: the mark makes a local idemd
	 * refuse DIR, and lets brokers on the store serve it.  Made under
	 * DIR's lock, after the commit; a second import writes it if this
	 * one could not (the rows are there, so it changes nothing else).
	 */
	if (status == IMPORT_EXIT_OK &&
	    workspace_mark_imported(root_fd, workspace, &cause) != 0) {
		fprintf(stderr, "idemctl store import: imported, but %s; brokers "
		    "on the store refuse %s until it is marked: run the import "
		    "again\n", cause, root);
		free(cause);
		status = IMPORT_EXIT_REFUSED;
	}
out:
	for (i = 0; i < im.n; i++)
		free(im.v[i].result);
	free(im.v);
	close(lock_fd);
	close(root_fd);
	return status;
}

#else

int
idemctl_store_import(const char *uri, const char *root)
{
	(void)uri;
	(void)root;
	return IMPORT_EXIT_REFUSED;
}

#endif
