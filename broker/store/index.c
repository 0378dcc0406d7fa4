/* SPDX-License-Identifier: ISC */
/*
 * index.c: the index of committed receipts, every one kept for ever, on
 * disk in LMDB (ROOT/.idem/index/).  The shared-memory table is a cache
 * in front of it: a committed entry leaves the table only once it is
 * durable here, and a lookup that misses the table reads it from here.
 *
 * DESIGN
 *
 * One LMDB environment, two databases: "receipts" (key: the table's
 * submission key; value: an 8-byte head saying full or tombstone, then
 * the entry exactly as a journal record encodes it, checksum included,
 * with an effect's result: everything a receipt is rebuilt from, byte
 * for byte) and "meta" (the format, and the checkpoint the index was
 * last written from).  Format in doc/journal.md, "The index".
 *
 * Writers: the master's checkpoint thread (checkpoints and index
 * passes: index_begin, index_put, index_commit), start-up, and
 * `idemctl compact`, the broker running or not: LMDB serialises the
 * write transactions of all processes (index_compact's one among the
 * broker's).  `idemctl verify` and `backup` only read.  LMDB's commit
 * is its fsync: what index_commit returned 0
 * for is durable, and a kill at any point before leaves the index as
 * the last commit left it (copy-on-write pages, two meta pages), never
 * torn.  Readers: every worker opens the environment itself (workers
 * are exec'd, and an LMDB handle never crosses a fork) and reads
 * through one read transaction that it resets and renews, so a lookup
 * costs no system call.
 *
 * Never here: a decision about what to evict or answer.  This file
 * stores and finds; the table and the broker decide.
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lmdb.h>

#include "store.h"

#define INDEX_HEAD_BYTES	8
#define INDEX_MAX_READERS	256
static const char index_meta_format[] = "format";
static const char index_meta_checkpoint[] = "checkpoint";

static void
put64(uint8_t *p, uint64_t v)
{
	int	i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get64(const uint8_t *p)
{
	uint64_t	v = 0;
	int		i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int
index_fail(char **cause, const char *dir, const char *what, int rc)
{
	if (cause != NULL)
		asprintf(cause, "index %s: %s: %s", dir, what,
		    mdb_strerror(rc));
	/*
	 * LMDB's own codes are not errnos: corruption is EINVAL.  A full
	 * reader table is not damage (other processes hold the slots for
	 * now): EAGAIN, which no caller takes for a broken index.
	 */
	errno = rc > 0 ? rc : rc == MDB_READERS_FULL ? EAGAIN : EINVAL;
	return -1;
}

int
index_exists(const char *dir)
{
	char		path[PATH_MAX];
	struct stat	st;

	snprintf(path, sizeof path, "%s/data.mdb", dir);
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/*
 * Open the environment at path (a directory), named label in causes:
 * what index_open and index_open_at share once the directory is known
 * (they zeroed x, so that a refusal before this leaves it closed too).
 */
static int
index_env_open(struct index *x, const char *path, const char *label,
    int flags, char **cause)
{
	MDB_txn		*txn = NULL;
	MDB_val		 k, v;
	uint8_t		 format[8];
	unsigned	 envflags = MDB_NOTLS | MDB_NORDAHEAD;
	int		 rc;

	if ((x->dir = strdup(label)) == NULL)
		return index_fail(cause, label, "strdup", ENOMEM);
	x->readonly = (flags & INDEX_READONLY) != 0;
	if ((rc = mdb_env_create(&x->env)) != 0 ||
	    (rc = mdb_env_set_maxdbs(x->env, 2)) != 0 ||
	    (rc = mdb_env_set_maxreaders(x->env, INDEX_MAX_READERS)) != 0 ||
	    (rc = mdb_env_set_mapsize(x->env, IDEM_INDEX_MAP_BYTES)) != 0)
		goto lmdb;
	if (x->readonly)
		envflags |= MDB_RDONLY;
	if ((rc = mdb_env_open(x->env, path, envflags, 0600)) != 0)
		goto lmdb;
	if ((rc = mdb_txn_begin(x->env, NULL, x->readonly ? MDB_RDONLY : 0,
	    &txn)) != 0)
		goto lmdb;
	if ((rc = mdb_dbi_open(txn, "receipts", x->readonly ? 0 : MDB_CREATE,
	    &x->receipts)) != 0 ||
	    (rc = mdb_dbi_open(txn, "meta", x->readonly ? 0 : MDB_CREATE,
	    &x->meta)) != 0)
		goto lmdb;
	k.mv_data = (void *)index_meta_format;
	k.mv_size = sizeof index_meta_format - 1;
	rc = mdb_get(txn, x->meta, &k, &v);
	if (rc == MDB_NOTFOUND && !x->readonly) {
		put64(format, INDEX_FORMAT);
		v.mv_data = format;
		v.mv_size = sizeof format;
		if ((rc = mdb_put(txn, x->meta, &k, &v, 0)) != 0)
			goto lmdb;
	} else if (rc != 0)
		goto lmdb;
	else if (v.mv_size != 8 || get64(v.mv_data) != INDEX_FORMAT) {
		rc = MDB_INCOMPATIBLE;
		goto lmdb;
	}
	/* Committed, even read-only: an aborted one closes the handles. */
	if ((rc = mdb_txn_commit(txn)) != 0) {
		txn = NULL;
		goto lmdb;
	}
	return 0;
lmdb:
	if (txn != NULL)
		mdb_txn_abort(txn);
	index_fail(cause, label, "open", rc);
	rc = errno;
	index_close(x);
	errno = rc;
	return -1;
}

static int
index_open_refused(char **cause, const char *label)
{
	int	error = errno;

	if (cause != NULL)
		asprintf(cause, "index %s: %s", label, strerror(error));
	errno = error;
	return -1;
}

int
index_open(struct index *x, const char *dir, int flags, char **cause)
{
	struct stat	st;

	memset(x, 0, sizeof *x);
	if (lstat(dir, &st) == -1) {
		if (errno != ENOENT || (flags & INDEX_READONLY))
			return index_open_refused(cause, dir);
		/* The last component only, as the journal's. */
		if (mkdir(dir, 0700) == -1 && errno != EEXIST)
			return index_open_refused(cause, dir);
	} else if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return index_open_refused(cause, dir);
	}
	return index_env_open(x, dir, dir, flags, cause);
}

/*
 * LMDB opens its files by path only; /proc/self/fd/N names the
 * directory the descriptor holds, wherever it is now, and resolves no
 * symlink planted at its old path.
 */
int
index_open_at(struct index *x, int dir_fd, const char *label, int flags,
    char **cause)
{
	char		path[32];
	struct stat	st;

	memset(x, 0, sizeof *x);
	if (fstat(dir_fd, &st) == -1)
		return index_open_refused(cause, label);
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return index_open_refused(cause, label);
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", dir_fd);
	return index_env_open(x, path, label, flags, cause);
}

void
index_close(struct index *x)
{
	if (x->write != NULL)
		mdb_txn_abort(x->write);
	if (x->read != NULL)
		mdb_txn_abort(x->read);
	if (x->env != NULL)
		mdb_env_close(x->env);
	free(x->dir);
	memset(x, 0, sizeof *x);
}

/* The value: head (form, zeros), then the record as the journal has it. */
static int
index_encode(int form, const struct journal_record *r, uint8_t *out,
    size_t out_size, size_t *length)
{
	size_t	n;

	if (out_size < INDEX_HEAD_BYTES)
		return -1;
	memset(out, 0, INDEX_HEAD_BYTES);
	out[0] = (uint8_t)form;
	n = journal_encode(r, out + INDEX_HEAD_BYTES,
	    out_size - INDEX_HEAD_BYTES);
	if (n == 0)
		return -1;
	*length = INDEX_HEAD_BYTES + n;
	return 0;
}

int
index_decode(const void *data, size_t length, struct index_entry *out)
{
	const uint8_t	*p = data;
	size_t		 consumed, i;

	if (length < INDEX_HEAD_BYTES ||
	    (p[0] != INDEX_FULL && p[0] != INDEX_TOMBSTONE))
		return -1;
	for (i = 1; i < INDEX_HEAD_BYTES; i++)
		if (p[i] != 0)
			return -1;
	if (journal_decode(p + INDEX_HEAD_BYTES, length - INDEX_HEAD_BYTES,
	    &out->record, &consumed) != JOURNAL_DECODE_OK ||
	    consumed != length - INDEX_HEAD_BYTES ||
	    out->record.entry.state != SUBTAB_COMMITTED)
		return -1;
	out->form = p[0];
	return 0;
}

/* The tombstone of a committed entry: what compaction keeps. */
void
index_tombstone_of(const struct journal_record *full,
    struct journal_record *t)
{
	*t = *full;
	/* The times stay: get_submission still says when (PostgreSQL too). */
	t->entry.peer_uid = 0;
	t->entry.peer_pid = 0;
	if (t->entry.kind == SUBTAB_KIND_EFFECT) {
		/* The result's digest stays in file_digest. */
		t->entry.result_length = 0;
		t->entry.fence = 0;
		t->entry.lease_expires_ms = 0;
		t->result = NULL;
	} else
		memset(t->entry.file_digest, 0, sizeof t->entry.file_digest);
}

int
index_get(struct index *x, const char *key, size_t key_length,
    struct index_entry *out, uint8_t *result, char **cause)
{
	MDB_val	k, v;
	int	rc;

	if (key_length == 0 || key_length > SUBTAB_MAX_KEY_BYTES) {
		errno = EINVAL;
		return -1;
	}
	if (x->read == NULL)
		rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &x->read);
	else
		rc = mdb_txn_renew(x->read);
	if (rc != 0) {
		x->read = NULL;
		return index_fail(cause, x->dir, "read", rc);
	}
	k.mv_data = (void *)key;
	k.mv_size = key_length;
	rc = mdb_get(x->read, x->receipts, &k, &v);
	if (rc == MDB_NOTFOUND) {
		mdb_txn_reset(x->read);
		return 0;
	}
	if (rc != 0) {
		mdb_txn_reset(x->read);
		return index_fail(cause, x->dir, "get", rc);
	}
	if (index_decode(v.mv_data, v.mv_size, out) != 0 ||
	    out->record.entry.key_length != key_length ||
	    memcmp(out->record.key, key, key_length) != 0) {
		mdb_txn_reset(x->read);
		if (cause != NULL)
			asprintf(cause, "index %s: the value of a key is "
			    "corrupt; run idemctl verify", x->dir);
		errno = EINVAL;
		return -1;
	}
	/* The result points into the map: copy it before the reset. */
	if (out->record.result != NULL && out->record.entry.result_length > 0) {
		memcpy(result, out->record.result,
		    out->record.entry.result_length);
		out->record.result = result;
	}
	mdb_txn_reset(x->read);
	return 1;
}

int
index_begin(struct index *x, char **cause)
{
	int	dead, rc;

	if (x->readonly || x->write != NULL) {
		errno = EINVAL;
		return -1;
	}
	/* Readers killed with a transaction open pin old pages: free them. */
	mdb_reader_check(x->env, &dead);
	if ((rc = mdb_txn_begin(x->env, NULL, 0, &x->write)) != 0) {
		x->write = NULL;
		return index_fail(cause, x->dir, "begin", rc);
	}
	return 0;
}

int
index_put(struct index *x, int form, const struct journal_record *r,
    char **cause)
{
	static uint8_t	 buf[INDEX_HEAD_BYTES + JOURNAL_MAX_EFFECT_RECORD_BYTES];
	MDB_val		 k, v;
	size_t		 length;
	int		 rc;

	/* One writer at a time (LMDB's own rule): buf is that writer's. */
	if (x->write == NULL || r->entry.state != SUBTAB_COMMITTED ||
	    r->entry.key_length == 0 ||
	    index_encode(form, r, buf, sizeof buf, &length) != 0) {
		if (cause != NULL)
			asprintf(cause, "index %s: not a committed entry "
			    "it can store", x->dir);
		errno = EINVAL;
		return -1;
	}
	k.mv_data = (void *)r->key;
	k.mv_size = r->entry.key_length;
	v.mv_data = buf;
	v.mv_size = length;
	/*
	 * A committed receipt never changes, so a key already here keeps
	 * what it has: the same receipt, or its tombstone, which a replay
	 * or a checkpoint holding the whole entry must not undo.
	 */
	rc = mdb_put(x->write, x->receipts, &k, &v,
	    form == INDEX_FULL ? MDB_NOOVERWRITE : 0);
	if (rc == MDB_KEYEXIST)
		return 0;
	if (rc != 0)
		return index_fail(cause, x->dir, "put", rc);
	return 0;
}

int
index_commit(struct index *x, uint64_t checkpoint, char **cause)
{
	MDB_val		 k, v;
	uint8_t		 number[8];
	int		 rc;

	if (x->write == NULL) {
		errno = EINVAL;
		return -1;
	}
	if (checkpoint != 0) {
		put64(number, checkpoint);
		k.mv_data = (void *)index_meta_checkpoint;
		k.mv_size = sizeof index_meta_checkpoint - 1;
		v.mv_data = number;
		v.mv_size = sizeof number;
		if ((rc = mdb_put(x->write, x->meta, &k, &v, 0)) != 0) {
			index_abort(x);
			return index_fail(cause, x->dir, "put", rc);
		}
	}
	rc = mdb_txn_commit(x->write);
	x->write = NULL;
	if (rc != 0)
		return index_fail(cause, x->dir, "commit", rc);
	return 0;
}

void
index_abort(struct index *x)
{
	if (x->write != NULL)
		mdb_txn_abort(x->write);
	x->write = NULL;
}

int
index_stats(struct index *x, struct index_stats *s, char **cause)
{
	MDB_txn		*txn;
	MDB_stat	 st;
	MDB_envinfo	 info;
	MDB_val		 k, v;
	int		 rc, dead = 0;

	memset(s, 0, sizeof *s);
	/*
	 * A full reader table may hold the slots of processes killed with
	 * a transaction open: freed, then one more try.
	 */
	if ((rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &txn)) ==
	    MDB_READERS_FULL && mdb_reader_check(x->env, &dead) == 0 &&
	    dead > 0)
		rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &txn);
	if (rc != 0)
		return index_fail(cause, x->dir, "stat", rc);
	if ((rc = mdb_stat(txn, x->receipts, &st)) != 0) {
		mdb_txn_abort(txn);
		return index_fail(cause, x->dir, "stat", rc);
	}
	s->entries = st.ms_entries;
	k.mv_data = (void *)index_meta_checkpoint;
	k.mv_size = sizeof index_meta_checkpoint - 1;
	if (mdb_get(txn, x->meta, &k, &v) == 0 && v.mv_size == 8)
		s->checkpoint = get64(v.mv_data);
	mdb_txn_abort(txn);
	if (mdb_env_info(x->env, &info) == 0 && mdb_env_stat(x->env, &st) == 0)
		s->bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
	return 0;
}

int
index_copy_fd(struct index *x, int fd, char **cause)
{
	int	rc;

	/* A read transaction's snapshot, free pages left out. */
	if ((rc = mdb_env_copyfd2(x->env, fd, MDB_CP_COMPACT)) != 0)
		return index_fail(cause, x->dir, "copy", rc);
	return 0;
}

/*
 * LMDB does not name its map's address (me_mapaddr is only a fixed
 * map's): the kernel's list of this process's mappings does, the one of
 * the data file (device, inode) at offset 0.
 */
int
index_mapped(struct index *x, uint8_t **base, uint64_t *bytes, int *fd)
{
	MDB_envinfo		 info;
	MDB_stat		 st;
	struct stat		 sb;
	unsigned long long	 start, end, offset, inode;
	unsigned		 major, minor;
	char			 line[PATH_MAX + 128];
	FILE			*maps;
	int			 rc;

	*base = NULL;
	if ((rc = mdb_env_info(x->env, &info)) != 0 ||
	    (rc = mdb_env_stat(x->env, &st)) != 0 ||
	    (rc = mdb_env_get_fd(x->env, fd)) != 0)
		return index_fail(NULL, x->dir, "info", rc);
	*bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
	if (fstat(*fd, &sb) == -1 || (maps = fopen("/proc/self/maps",
	    "re")) == NULL)
		return -1;
	while (*base == NULL && fgets(line, sizeof line, maps) != NULL) {
		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu", &start, &end,
		    &offset, &major, &minor, &inode) == 6 &&
		    inode == (unsigned long long)sb.st_ino &&
		    major == major(sb.st_dev) && minor == minor(sb.st_dev) &&
		    offset == 0 && end - start >= *bytes)
			*base = (uint8_t *)(uintptr_t)start;
	}
	fclose(maps);
	if (*base == NULL) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

int
index_foreach(struct index *x, index_visit_fn visit, void *arg,
    char **cause)
{
	MDB_txn			*txn;
	MDB_cursor		*c;
	MDB_val			 k, v;
	struct index_entry	 e;
	uint64_t		 n = 0;
	int			 rc, stop = 0;

	if ((rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &txn)) != 0)
		return index_fail(cause, x->dir, "read", rc);
	if ((rc = mdb_cursor_open(txn, x->receipts, &c)) != 0) {
		mdb_txn_abort(txn);
		return index_fail(cause, x->dir, "cursor", rc);
	}
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !stop;
	    rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
		if (index_decode(v.mv_data, v.mv_size, &e) != 0 ||
		    e.record.entry.key_length != k.mv_size ||
		    memcmp(e.record.key, k.mv_data, k.mv_size) != 0) {
			if (cause != NULL)
				asprintf(cause, "index %s: entry %" PRIu64
				    " is corrupt", x->dir, n);
			mdb_cursor_close(c);
			mdb_txn_abort(txn);
			errno = EINVAL;
			return -1;
		}
		stop = visit(&e, arg);
	}
	mdb_cursor_close(c);
	mdb_txn_abort(txn);
	if (stop < 0) {
		if (cause != NULL)
			asprintf(cause, "index %s: stopped at entry %" PRIu64,
			    x->dir, n);
		return -1;
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		return index_fail(cause, x->dir, "read", rc);
	return 0;
}

/* One change of a compaction: a key and its tombstone's value. */
struct index_change {
	uint16_t	key_length;
	char		key[SUBTAB_MAX_KEY_BYTES];
	size_t		length;
	uint8_t		value[INDEX_HEAD_BYTES + JOURNAL_MAX_RECORD_BYTES];
};
#define INDEX_COMPACT_BATCH	1024

int
index_compact(struct index *x, int64_t before_ms, uint64_t *pruned,
    char **cause)
{
	MDB_cursor		*c = NULL;
	MDB_val			 k, v;
	struct index_entry	 e;
	struct journal_record	 t;
	struct index_change	*batch;
	char			 last[SUBTAB_MAX_KEY_BYTES];
	size_t			 n, i, last_length = 0;
	int			 rc = 0, op, done = 0;

	*pruned = 0;
	if ((batch = calloc(INDEX_COMPACT_BATCH, sizeof *batch)) == NULL)
		return index_fail(cause, x->dir, "compact", ENOMEM);
	if (index_begin(x, cause) != 0) {
		free(batch);
		return -1;
	}
	/*
	 * Collect a batch with a cursor, then put it with the cursor
	 * closed: values change size, and a cursor is not moved through
	 * pages that change under it.
	 */
	while (!done) {
		if ((rc = mdb_cursor_open(x->write, x->receipts, &c)) != 0)
			break;
		if (last_length == 0)
			op = MDB_FIRST;
		else {
			k.mv_data = last;
			k.mv_size = last_length;
			op = MDB_SET_RANGE;
		}
		for (n = 0, rc = mdb_cursor_get(c, &k, &v, op);
		    rc == 0 && n < INDEX_COMPACT_BATCH;
		    rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
			/* SET_RANGE lands on the last key of the batch before. */
			if (last_length != 0 && k.mv_size == last_length &&
			    memcmp(k.mv_data, last, last_length) == 0)
				continue;
			if (index_decode(v.mv_data, v.mv_size, &e) != 0) {
				rc = MDB_CORRUPTED;
				break;
			}
			memcpy(last, k.mv_data, k.mv_size);
			last_length = k.mv_size;
			/* committed_at: created_at_ms, for every kind. */
			if (e.form != INDEX_FULL ||
			    e.record.entry.created_at_ms >= before_ms)
				continue;
			index_tombstone_of(&e.record, &t);
			batch[n].key_length = (uint16_t)k.mv_size;
			memcpy(batch[n].key, k.mv_data, k.mv_size);
			if (index_encode(INDEX_TOMBSTONE, &t, batch[n].value,
			    sizeof batch[n].value, &batch[n].length) != 0) {
				rc = MDB_BAD_VALSIZE;
				break;
			}
			n++;
		}
		mdb_cursor_close(c);
		if (rc == MDB_NOTFOUND) {
			done = 1;
			rc = 0;
		} else if (rc != 0)
			break;
		for (i = 0; i < n; i++) {
			k.mv_data = batch[i].key;
			k.mv_size = batch[i].key_length;
			v.mv_data = batch[i].value;
			v.mv_size = batch[i].length;
			if ((rc = mdb_put(x->write, x->receipts, &k, &v, 0)) != 0)
				break;
			(*pruned)++;
		}
		if (rc != 0)
			break;
	}
	free(batch);
	if (rc != 0) {
		index_abort(x);
		*pruned = 0;
		return index_fail(cause, x->dir, "compact", rc);
	}
	return index_commit(x, 0, cause);
}
