/* SPDX-License-Identifier: ISC */
/*
 * checkpoint.c: snapshots of the submission table, so that the journal
 * stays proportional to the live table and start-up stays fast.
 *
 * DESIGN
 *
 * When the journal's current segment grows past JOURNAL_SEGMENT_BYTES,
 * the journaling thread starts a new segment S (journal_rotate) and wakes
 * the checkpoint thread, which copies the table slot by slot (a short
 * lock per chunk, never a global pause) into checkpoint-S.snap and then
 * removes the segments before S and the older checkpoints.  What the
 * table and the arena want before the segment is full is not this but
 * an index pass (checkpoint_index_pass, below): the index's puts alone.
 *
 * Once a lost index could no longer be rebuilt from the checkpoint and
 * the journal (the index holds receipts the table does not, or the last
 * checkpoint left some to the index alone), committed entries are the
 * index's and are not copied: those it has, and those it lacks, which
 * this checkpoint gives it before the file is renamed into place.
 * Copying them again would buy nothing and cost a copy of the whole
 * cache at every checkpoint.  Until then the checkpoint holds every
 * entry, so that a lost index can be rebuilt from it.
 *
 * The copy is not one instant, but it need not be: every change after
 * the rotation is also in segments >= S, each record is a whole entry,
 * and replaying them in order over the snapshot ends in the latest
 * state.  A state the copy saw that never became durable is a
 * reservation that was never acknowledged, which a retry completes.
 *
 * The records go out through one buffer of CHECKPOINT_BUFFER_BYTES,
 * written when the next record might not fit and at the end: a table of
 * effects is one write a megabyte, not one a record (a checkpoint of
 * 4,000 effects was 4,000 write calls on the checkpoint thread, beside
 * the journaling thread on a two-core machine).  What a crash leaves of
 * the temporary file does not matter: start-up removes it.  Each write's
 * write-back is started as it is made, one DURABLE_PACE_BYTES piece in
 * flight (durable_pace): the fsync at the end then finds little left,
 * and the journal's fdatasync never waits behind the whole file.  That
 * is no durability step: the fsync below stays the file's.
 *
 * The committed entries the index lacks go to it in key order (held
 * back while the table is copied, CHECKPOINT_INDEX_WINDOW at a time)
 * in LMDB transactions of about CHECKPOINT_INDEX_COMMIT_BYTES of pages
 * (counted as a 4 KiB leaf a put and the records' bytes; the branch
 * pages above not counted), each committed once every
 * state it holds is durable in the journal, its slots then marked
 * INDEXED; meta.checkpoint moves in the last one only.  One transaction
 * of the whole copy was several MiB that LMDB writes and fdatasyncs at
 * once, and a journal flush behind it waited milliseconds.  A crash
 * between two of them leaves the index ahead of its meta.checkpoint,
 * which is harmless: its puts are by key, of final entries the segments
 * still hold (doc/journal.md, "Writing: from the checkpoint").
 *
 * The file is written to a temporary name, fsync'd, renamed and its
 * directory fsync'd; only then are old segments removed.  A crash at any
 * point leaves either the old checkpoint and all its segments, or the new
 * one; start-up removes the leftovers.
 *
 * Format (little-endian): a 64-byte header (magic "IDEMCKPT", version,
 * segment S, record count, the number allocator's state per kind, and a
 * checksum of the header), then the records, each exactly a journal
 * record (journal_encode), then a 16-byte trailer (magic "IDEMCEND",
 * record count) so that a short file can never pass.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"

#define CHECKPOINT_HEADER_BYTES		64
#define CHECKPOINT_TRAILER_BYTES	16
#define CHECKPOINT_VERSION		1
#define CHECKPOINT_CHUNK_SLOTS		1024
/* The records' buffer: a chunk of plain records, and any one effect's. */
#define CHECKPOINT_BUFFER_BYTES		\
	((size_t)CHECKPOINT_CHUNK_SLOTS * JOURNAL_MAX_RECORD_BYTES)
_Static_assert(CHECKPOINT_BUFFER_BYTES >= JOURNAL_MAX_EFFECT_RECORD_BYTES,
    "an effect's record fits the checkpoint's buffer");
/*
 * The pages one index transaction may dirty, as counted, before it is
 * committed: LMDB writes and fdatasyncs a commit's pages at once, and a
 * journal flush issued meanwhile waits behind them (doc/journal.md,
 * "Writing: from the checkpoint").  Each put is counted as one page of
 * CHECKPOINT_INDEX_PAGE_BYTES (scattered keys each dirty their own
 * leaf) plus its record's bytes (a large one goes to overflow pages):
 * at most 64 puts a transaction.  The branch pages above the leaves are
 * not counted; they are fewer, shared by the fan-out.
 */
#define CHECKPOINT_INDEX_COMMIT_BYTES	(256 * 1024)
#define CHECKPOINT_INDEX_PAGE_BYTES	4096
/*
 * The puts a checkpoint holds back to give the index in key order (a
 * window; a larger copy gives it several): about 3 MiB of entries and
 * keys for a window's worth.  In key order a transaction's puts fall in
 * neighbouring leaves under shared branch pages, and a leaf is dirtied
 * by one transaction, not by each of the many the table's order spread
 * its keys over: LMDB wrote 2.1 pages a put in table order and 0.6-0.8
 * in key order, a transaction of the same size (doc/journal.md,
 * "Writing: from the checkpoint").
 */
#define CHECKPOINT_INDEX_WINDOW		16384
#define CHECKPOINT_NAME_FORMAT		"checkpoint-%016" PRIx64 ".snap"

static const uint8_t checkpoint_magic[8] = { 'I','D','E','M','C','K','P','T' };
static const uint8_t checkpoint_end[8] = { 'I','D','E','M','C','E','N','D' };
static const uint8_t checkpoint_key[16] = "idem-ckpt-v1\0\0\0";

static void
put32(uint8_t *p, uint32_t v)
{
	p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24;
}

static void
put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t
get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static uint64_t
get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

int
checkpoint_name_parse(const char *name, uint64_t *segment)
{
	char	*end;

	if (strncmp(name, "checkpoint-", 11) != 0 || strlen(name) != 11 + 16 + 5 ||
	    strcmp(name + 27, ".snap") != 0)
		return 0;
	errno = 0;
	*segment = strtoull(name + 11, &end, 16);
	return errno == 0 && end == name + 27;
}

static void
header_encode(uint8_t h[CHECKPOINT_HEADER_BYTES], uint64_t segment,
    uint64_t records, uint64_t index_only,
    const struct seqalloc_state alloc[SUBTAB_KIND_COUNT])
{
	memset(h, 0, CHECKPOINT_HEADER_BYTES);
	memcpy(h, checkpoint_magic, 8);
	put32(h + 8, CHECKPOINT_VERSION);
	put64(h + 16, segment);
	put64(h + 24, records);
	put32(h + 32, alloc[0].date);
	put32(h + 36, alloc[0].next_seq);
	put32(h + 40, alloc[1].date);
	put32(h + 44, alloc[1].next_seq);
	/* Committed receipts only the index holds (0 before the index). */
	put64(h + 48, index_only);
	crypto_shorthash(h + 56, h, 56, checkpoint_key);
}

/*
 * The index's side of one checkpoint: the write transaction open, the
 * slots put in it (marked INDEXED once it is durable), its bytes.
 */
struct index_batch {
	struct index	*ix;
	uint32_t	*slots;
	size_t		 count, size;
	size_t		 bytes;		/* pages + records, counted as put */
	uint64_t	 indexed;	/* slots put by the commits made */
	uint64_t	 commits;
};

/*
 * The committed entries a checkpoint copied that the index lacks, held
 * back until the window is full or the copy done, then put in key order
 * (index_pending_flush).  Their arena bytes stay put meanwhile: the
 * arena reuses a committed entry's result only once it is INDEXED,
 * which is this thread's mark, made after the put's commit.
 */
struct index_pending_entry {
	struct subtab_entry	 entry;
	uint32_t		 slot;
	uint32_t		 encoded;	/* its record's bytes */
	size_t			 key_at;	/* in index_pending.keys */
};

struct index_pending {
	struct index_pending_entry *items;
	size_t			 count, size;
	char			*keys;
	size_t			 keys_used, keys_size;
};

/* One entry of a flush's order: its key, compared as LMDB does. */
struct index_pending_order {
	const char		*key;
	uint32_t		 length;
	uint32_t		 item;
};

static int
index_pending_hold(struct index_pending *pl, const struct subtab_entry *e,
    const char *key, uint32_t slot, size_t encoded)
{
	struct index_pending_entry	*items;
	char				*keys;
	size_t				 size;

	if (pl->count == pl->size) {
		size = pl->size == 0 ? 1024 : 2 * pl->size;
		if ((items = realloc(pl->items, size * sizeof *items)) == NULL)
			return -1;
		pl->items = items;
		pl->size = size;
	}
	if (pl->keys_size - pl->keys_used < e->key_length) {
		size = pl->keys_size == 0 ? 64 * 1024 : 2 * pl->keys_size;
		while (size - pl->keys_used < e->key_length)
			size *= 2;
		if ((keys = realloc(pl->keys, size)) == NULL)
			return -1;
		pl->keys = keys;
		pl->keys_size = size;
	}
	memcpy(pl->keys + pl->keys_used, key, e->key_length);
	pl->items[pl->count].entry = *e;
	pl->items[pl->count].slot = slot;
	pl->items[pl->count].encoded = (uint32_t)encoded;
	pl->items[pl->count].key_at = pl->keys_used;
	pl->keys_used += e->key_length;
	pl->count++;
	return 0;
}

/*
 * Hold e for the index without encoding it here (an index pass, or a
 * checkpoint that leaves committed entries to the index): its size is
 * its record's; its result is read from the arena when the index gets
 * it.
 */
static int
index_pending_hold_entry(struct index_pending *pl,
    const struct subtab_entry *e, const char *key, uint32_t slot)
{
	struct journal_record	record;

	memset(&record, 0, sizeof record);
	record.type = e->kind == SUBTAB_KIND_EFFECT ? JOURNAL_RECORD_EFFECT :
	    JOURNAL_RECORD_ENTRY;
	record.entry = *e;
	return index_pending_hold(pl, e, key, slot,
	    journal_encoded_size(&record));
}

/* LMDB's default order: the bytes, then the shorter first. */
static int
index_order_cmp(const void *a, const void *b)
{
	const struct index_pending_order *x = a, *y = b;
	int	c;

	c = memcmp(x->key, y->key, x->length < y->length ? x->length :
	    y->length);
	if (c != 0)
		return c;
	return (x->length > y->length) - (x->length < y->length);
}

/* Remember a slot the index is given, to mark it once that is durable. */
static int
note_slot(struct index_batch *b, uint32_t slot)
{
	uint32_t	*grown;

	if (b->count == b->size) {
		b->size = b->size == 0 ? 1024 : 2 * b->size;
		if ((grown = realloc(b->slots, b->size * sizeof *b->slots)) ==
		    NULL)
			return -1;
		b->slots = grown;
	}
	b->slots[b->count++] = slot;
	return 0;
}

/*
 * 1: every record appended by now is durable, so every state copied so
 * far is.  Also 1 across one journal failure since epoch when all of
 * them lay before what it lost (head <= ring_lost_from:
 * handoff_is_durable): the failure took only later records.  Else 0:
 * the failure (or more than one) came before some of them, and what
 * was copied may have been lost with it.
 */
static int
copied_durable(struct shm_segment *seg, uint64_t epoch)
{
	uint64_t	head;

	return handoff_head(seg, &head) == 0 &&
	    handoff_wait_durable(seg->header, head, epoch) == 1;
}

/*
 * Commit the open transaction (with meta.checkpoint = segment when
 * segment is not 0: the last one) and mark its slots INDEXED; the
 * caller has seen every state put durable (copied_durable).  stats
 * counts the batch once: see index_publishing.
 */
static int
index_batch_commit(struct index_batch *b, struct shm_segment *seg,
    uint64_t segment, char **cause)
{
	/*
	 * A crash here: commits made, meta.checkpoint the older one.  Or a
	 * hold (IDEM_CRASH_HOLD_AT=between_index_commits:FIFO): a test
	 * makes the journal fail while the copy goes on.
	 */
	if (b->commits > 0) {
		crash_point(CRASH_BETWEEN_INDEX_COMMITS);
		crash_hold_at("between_index_commits");
	}
	atomic_fetch_add(&seg->header->index_publishing, 1);
	if (index_commit(b->ix, segment, cause) != 0) {
		atomic_fetch_add(&seg->header->index_publishing, 1);
		return -1;
	}
	subtab_mark_indexed(seg, b->slots, b->count);
	atomic_fetch_add(&seg->header->index_publishing, 1);
	b->indexed += b->count;
	b->count = 0;
	b->bytes = 0;
	b->commits++;
	return 0;
}

/*
 * Give the index what pl holds, in key order, committing each time the
 * transaction has about CHECKPOINT_INDEX_COMMIT_BYTES (its states made
 * durable first); the last transaction stays open.  0; -2 if the
 * journal failed meanwhile; -1 on any other error (*cause, or errno).
 */
static int
index_pending_flush(struct index_pending *pl, struct index_batch *b,
    struct shm_segment *seg, uint64_t epoch, uint8_t *result, char **cause)
{
	struct index_pending_order	*order;
	struct index_pending_entry	*p;
	struct journal_record		 record;
	size_t				 i;

	if (pl->count == 0)
		return 0;
	if ((order = calloc(pl->count, sizeof *order)) == NULL) {
		asprintf(cause, "checkpoint: out of memory");
		return -1;
	}
	for (i = 0; i < pl->count; i++) {
		order[i].key = pl->keys + pl->items[i].key_at;
		order[i].length = pl->items[i].entry.key_length;
		order[i].item = (uint32_t)i;
	}
	qsort(order, pl->count, sizeof *order, index_order_cmp);
	for (i = 0; i < pl->count; i++) {
		p = &pl->items[order[i].item];
		memset(&record, 0, sizeof record);
		record.type = p->entry.kind == SUBTAB_KIND_EFFECT ?
		    JOURNAL_RECORD_EFFECT : JOURNAL_RECORD_ENTRY;
		record.entry = p->entry;
		memcpy(record.key, order[i].key, order[i].length);
		if (record.type == JOURNAL_RECORD_EFFECT) {
			record.result = result;
			if (p->entry.result_length > 0 && arena_read(seg,
			    p->entry.result_offset, p->entry.result_length,
			    result) != 0) {
				asprintf(cause, "checkpoint: the result of slot "
				    "%u left the arena before the index had it",
				    p->slot);
				goto fail;
			}
		}
		if (index_put(b->ix, INDEX_FULL, &record, cause) != 0 ||
		    note_slot(b, p->slot) != 0)
			goto fail;
		if (b->count == 1)
			crash_point(CRASH_DURING_INDEX_WRITE);
		b->bytes += CHECKPOINT_INDEX_PAGE_BYTES + p->encoded;
		/*
		 * The transaction is full: committed now, not with the rest
		 * at the end, so that LMDB writes and syncs about
		 * CHECKPOINT_INDEX_COMMIT_BYTES of pages (a leaf a put and
		 * the record's bytes; not the branch pages above) and a
		 * journal flush queued behind it waits for that, not the
		 * whole copy (doc/journal.md, "Writing: from the
		 * checkpoint").  Its states must be durable first, as at
		 * the end.
		 */
		if (b->bytes >= CHECKPOINT_INDEX_COMMIT_BYTES) {
			if (!copied_durable(seg, epoch)) {
				free(order);
				return -2;
			}
			if (index_batch_commit(b, seg, 0, cause) != 0 ||
			    index_begin(b->ix, cause) != 0)
				goto fail;
		}
	}
	free(order);
	pl->count = 0;
	pl->keys_used = 0;
	return 0;
fail:
	free(order);
	return -1;
}

int
checkpoint_write(int dir_fd, const char *dir, uint64_t segment,
    struct shm_segment *seg, struct index *ix, uint64_t *index_only_io,
    uint64_t *written, uint64_t *indexed, char **cause)
{
	struct subtab_entry	*entries = NULL;
	uint32_t		*flags = NULL;
	struct index_batch	 batch;
	struct index_stats	 istats;
	uint64_t		 committed = 0, index_only = 0;
	char			(*keys)[SUBTAB_MAX_KEY_BYTES] = NULL;
	struct journal_record	 record;
	struct durable_pace	 pace;
	struct seqalloc_state	 alloc[SUBTAB_KIND_COUNT];
	uint8_t			 header[CHECKPOINT_HEADER_BYTES];
	uint8_t			 trailer[CHECKPOINT_TRAILER_BYTES];
	uint8_t			*buf = NULL, *result = NULL;
	size_t			 used = 0, need, n_encoded, window;
	char			 name[64], temp[80], *why;
	uint64_t		 records = 0, epoch, offset;
	uint32_t		 from = 0, n, i;
	int			 fd = -1, rc = -1;
	struct index_pending	 pending;
	int			 index_owns = 0, flushed;

	snprintf(name, sizeof name, CHECKPOINT_NAME_FORMAT, segment);
	snprintf(temp, sizeof temp, ".%s.tmp", name);
	memset(&batch, 0, sizeof batch);
	memset(&pending, 0, sizeof pending);
	window = crash_index_window(CHECKPOINT_INDEX_WINDOW);
	batch.ix = ix;
	entries = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *entries);
	keys = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *keys);
	flags = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *flags);
	buf = malloc(CHECKPOINT_BUFFER_BYTES);
	result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES);
	if (entries == NULL || keys == NULL || flags == NULL || buf == NULL ||
	    result == NULL) {
		asprintf(cause, "checkpoint: out of memory");
		goto out;
	}
	/*
	 * In the directory the broker holds, never found by its path again:
	 * no symlink planted since start-up is followed, and none at the
	 * temporary's name either (ELOOP fails the checkpoint).
	 */
	if ((fd = openat(dir_fd, temp, O_WRONLY | O_CREAT | O_TRUNC |
	    O_CLOEXEC | O_NOFOLLOW, 0600)) == -1) {
		asprintf(cause, "checkpoint %s/%s: %s", dir, temp,
		    strerror(errno));
		goto out;
	}
	/* The journal's epoch the copy's states are judged durable in. */
	epoch = handoff_epoch(seg->header);
	/* The allocator first: it is at least every number in the copy. */
	memcpy(alloc, seg->header->alloc, sizeof alloc);
	header_encode(header, segment, 0, 0, alloc);
	if (durable_write_all(fd, header, sizeof header) != 0)
		goto write_failed;
	durable_pace_init(&pace, fd);
	offset = sizeof header;
	/*
	 * Once the index holds more receipts than the table has entries, or
	 * the last checkpoint left some to the index alone (an effect's
	 * result the arena overwrote: every run of effects longer than the
	 * arena), some are in no other file already and a lost index cannot
	 * be rebuilt (start-up says so).  From then on committed entries are
	 * the index's and none is copied: not those an earlier checkpoint
	 * indexed, nor those this one gives it, which are durable there
	 * before this file is renamed into place.  The copy would otherwise
	 * write the whole cache at every rotation (about 200 bytes a slot,
	 * several times the journal's own bytes with a full table; half the
	 * copy's records, and a sixth of idemd's CPU an effect, in a run of
	 * effects: doc/effects.md, "The checkpoints' share").  Before then
	 * the checkpoint keeps everything, so that the index can be rebuilt
	 * from it.  An index that cannot be counted (every LMDB reader slot
	 * taken) fails the checkpoint: guessed, the copy could keep what
	 * the index owns, or the header below could say that nothing is the
	 * index's alone (stats_failed).
	 */
	if (ix != NULL) {
		if (index_stats(ix, &istats, cause) != 0)
			goto stats_failed;
		if (istats.entries > seg->header->slots_used ||
		    *index_only_io > 0)
			index_owns = 1;
	}
	/*
	 * The committed states the index lacks go to it in transactions of
	 * about CHECKPOINT_INDEX_COMMIT_BYTES each (index_batch_commit).
	 */
	if (ix != NULL && index_begin(ix, cause) != 0)
		goto out;
	while ((n = subtab_copy_flags(seg, from, CHECKPOINT_CHUNK_SLOTS,
	    entries, keys, flags)) > 0) {
		for (i = 0; i < n; i++) {
			/* A slot whose state was lost with the journal. */
			if (entries[i].state == SUBTAB_EMPTY)
				continue;
			if (index_owns &&
			    entries[i].state == SUBTAB_COMMITTED) {
				if (!(flags[i] & SUBTAB_SLOT_INDEXED) &&
				    index_pending_hold_entry(&pending,
				    &entries[i], keys[i], from + i) != 0)
					goto index_failed;
				entries[i].state = SUBTAB_EMPTY;
				continue;
			}
			memset(&record, 0, sizeof record);
			record.type = entries[i].kind == SUBTAB_KIND_EFFECT ?
			    JOURNAL_RECORD_EFFECT : JOURNAL_RECORD_ENTRY;
			record.entry = entries[i];
			memcpy(record.key, keys[i], entries[i].key_length);
			if (entries[i].kind == SUBTAB_KIND_EFFECT) {
				record.result = result;
				if (entries[i].result_length > 0 &&
				    arena_read(seg, entries[i].result_offset,
				    entries[i].result_length, result) != 0) {
					/*
					 * The arena reused the bytes of an
					 * indexed entry: like an evicted one,
					 * it is the index's alone now.
					 */
					if (entries[i].state ==
					    SUBTAB_COMMITTED && (flags[i] &
					    SUBTAB_SLOT_INDEXED)) {
						entries[i].state = SUBTAB_EMPTY;
						continue;
					}
					errno = EINVAL;
					goto write_failed;
				}
			}
			if (entries[i].state == SUBTAB_COMMITTED)
				committed++;
			/*
			 * An effect's record carries its result, copied from
			 * the arena: bytes a slot names never change (once
			 * reused, the copy says so and was not taken).  The
			 * buffer is written out when this record might not
			 * fit what is left of it.
			 */
			need = entries[i].kind == SUBTAB_KIND_EFFECT ?
			    JOURNAL_MAX_EFFECT_RECORD_BYTES :
			    JOURNAL_MAX_RECORD_BYTES;
			if (CHECKPOINT_BUFFER_BYTES - used < need) {
				if (durable_write_all(fd, buf, used) != 0)
					goto write_failed;
				offset += used;
				used = 0;
				if (durable_pace(&pace, offset) != 0)
					goto writeback_failed;
			}
			/*
			 * A record that does not encode fails the checkpoint,
			 * whatever its kind: it is counted in records below,
			 * and a file with fewer records than its trailer says
			 * would not load.
			 */
			if ((n_encoded = journal_encode(&record, buf + used,
			    need)) == 0) {
				asprintf(cause, "checkpoint %s: the record of "
				    "slot %u does not encode", name, from + i);
				goto out;
			}
			used += n_encoded;
			/* For the index, in key order (index_pending). */
			if (ix != NULL &&
			    entries[i].state == SUBTAB_COMMITTED &&
			    !(flags[i] & SUBTAB_SLOT_INDEXED) &&
			    index_pending_hold(&pending, &entries[i], keys[i],
			    from + i, n_encoded) != 0)
				goto index_failed;
		}
		if (pending.count >= window &&
		    (flushed = index_pending_flush(&pending, &batch, seg,
		    epoch, result, cause)) != 0)
			goto flush_failed;
		for (i = 0; i < n; i++)
			records += entries[i].state != SUBTAB_EMPTY;
		from += n;
		/*
		 * Half copied; when committed slots are the index's, half
		 * read.  The file then holds its header and the buffers
		 * filled so far (a write a megabyte; a table smaller than
		 * one buffer: the header alone), what was copied since the
		 * last write only in memory; start-up removes the temporary
		 * file whatever it holds.
		 */
		if (records >= seg->header->slots_used / 2 || (index_owns &&
		    from >= seg->header->slots_used / 2))
			crash_point(CRASH_DURING_CHECKPOINT);
	}
	if (durable_write_all(fd, buf, used) != 0)
		goto write_failed;
	offset += used;
	if (durable_pace(&pace, offset) != 0)
		goto writeback_failed;
	/*
	 * Every state copied is durable before the index or this file keeps
	 * it.  The copy ran beside the journaling thread, and a commit still
	 * on its way could yet be lost to a crash or a failed write: the
	 * index, which keeps a receipt for ever, would then serve it instead
	 * of the retry's commit, acknowledged with another time.  The
	 * journaling thread flushes what was appended; a failure meanwhile
	 * fails this checkpoint (the segments stay), and the next one copies
	 * the states settled since.
	 */
	if (ix != NULL && (flushed = index_pending_flush(&pending, &batch,
	    seg, epoch, result, cause)) != 0)
		goto flush_failed;
	if (!copied_durable(seg, epoch))
		goto journal_failed;
	/*
	 * The index first: once this checkpoint is in place, the segments
	 * before it go, and with them the journal's copy of what the index
	 * was given.  A crash before this last commit leaves the index
	 * with the batches committed so far (ahead of its meta.checkpoint,
	 * harmless: puts by key of final entries) and this checkpoint
	 * unfinished: the segments hold everything.
	 */
	if (ix != NULL) {
		if (index_batch_commit(&batch, seg, segment, cause) != 0)
			goto out;
		/*
		 * The header's count of receipts only the index holds: a
		 * count of 0 would let start-up rebuild a lost index from
		 * this file, which holds no committed entry once the index
		 * owns them.  Not known, no file: the index is ahead of its
		 * checkpoint, as after a crash here, and the retry
		 * (journaler.c) counts again.
		 */
		if (index_stats(ix, &istats, cause) != 0)
			goto stats_failed;
		if (istats.entries > committed)
			index_only = istats.entries - committed;
	}
	memcpy(trailer, checkpoint_end, 8);
	put64(trailer + 8, records);
	header_encode(header, segment, records, index_only, alloc);
	if (durable_write_all(fd, trailer, sizeof trailer) != 0 ||
	    pwrite(fd, header, sizeof header, 0) != (ssize_t)sizeof header ||
	    fsync(fd) != 0)
		goto write_failed;
	close(fd);
	fd = -1;
	if (renameat(dir_fd, temp, dir_fd, name) != 0 || fsync(dir_fd) != 0) {
		asprintf(cause, "checkpoint %s/%s: rename and sync: %s", dir,
		    name, strerror(errno));
		goto out;
	}
	crash_point(CRASH_AFTER_CHECKPOINT_RENAMED);
	*written = records;
	*indexed = batch.indexed;
	*index_only_io = index_only;
	rc = 0;
	goto out;

stats_failed:
	why = *cause;
	*cause = NULL;
	asprintf(cause, "checkpoint %s: not written: the index's receipts "
	    "could not be counted, and its header must say how many only "
	    "the index holds (%s)", name, why != NULL ? why :
	    strerror(errno));
	free(why);
	goto out;
flush_failed:
	if (flushed == -1)
		goto index_failed;
journal_failed:
	asprintf(cause, "checkpoint %s: the journal failed while the "
	    "table was copied", name);
	goto out;

index_failed:
	if (*cause == NULL)
		asprintf(cause, "checkpoint %s: index: %s", name,
		    strerror(errno));
	goto out;
writeback_failed:
	asprintf(cause, "checkpoint %s/%s: write-back: %s", dir, temp,
	    strerror(errno));
	goto out;
write_failed:
	asprintf(cause, "checkpoint %s/%s: write: %s", dir, temp,
	    strerror(errno));
out:
	if (ix != NULL)
		index_abort(ix);	/* nothing if committed */
	if (fd != -1) {
		close(fd);
		unlinkat(dir_fd, temp, 0);
	}
	free(flags);
	free(pending.items);
	free(pending.keys);
	free(batch.slots);
	free(entries);
	free(keys);
	free(buf);
	free(result);
	return rc;
}

/*
 * The index pass: what the arena's scout, a full table or the
 * capacity/2+1 rule want is the index's puts (INDEXED slots, which the
 * table may evict and the arena overwrite), not a copy of the table, a
 * new segment or a prune.  The segments keep every record until a
 * rotation's checkpoint prunes them, so an entry indexed here is in the
 * index and the journal both, and the newest checkpoint (if any) still
 * covers everything the journal does not: meta.checkpoint is left as it
 * is, the index ahead of it (harmless, as between a checkpoint's
 * commits: puts by key of final entries the segments hold).  The same
 * order, batches and durability rule as a checkpoint's
 * (index_pending_flush, index_batch_commit, copied_durable), so the
 * same crash points fire here too: during_index_write at each batch's
 * first put, between_index_commits before every commit after the first.
 */
int
checkpoint_index_pass(struct shm_segment *seg, struct index *ix,
    uint64_t *indexed, char **cause)
{
	struct subtab_entry	*entries = NULL;
	uint32_t		*flags = NULL;
	struct index_batch	 batch;
	struct index_pending	 pending;
	char			(*keys)[SUBTAB_MAX_KEY_BYTES] = NULL;
	uint8_t			*result = NULL;
	uint64_t		 epoch;
	size_t			 window;
	uint32_t		 from = 0, n, i;
	int			 rc = -1, flushed;

	*indexed = 0;
	memset(&batch, 0, sizeof batch);
	memset(&pending, 0, sizeof pending);
	window = crash_index_window(CHECKPOINT_INDEX_WINDOW);
	batch.ix = ix;
	entries = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *entries);
	keys = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *keys);
	flags = calloc(CHECKPOINT_CHUNK_SLOTS, sizeof *flags);
	result = malloc(IDEM_MAX_EFFECT_RESULT_BYTES);
	if (entries == NULL || keys == NULL || flags == NULL ||
	    result == NULL) {
		asprintf(cause, "index pass: out of memory");
		goto out;
	}
	/* The journal's epoch the states put are judged durable in. */
	epoch = handoff_epoch(seg->header);
	if (index_begin(ix, cause) != 0)
		goto out;
	while ((n = subtab_copy_flags(seg, from, CHECKPOINT_CHUNK_SLOTS,
	    entries, keys, flags)) > 0) {
		for (i = 0; i < n; i++) {
			if (entries[i].state != SUBTAB_COMMITTED ||
			    (flags[i] & SUBTAB_SLOT_INDEXED))
				continue;
			if (index_pending_hold_entry(&pending, &entries[i],
			    keys[i], from + i) != 0) {
				asprintf(cause, "index pass: out of memory");
				goto out;
			}
		}
		if (pending.count >= window &&
		    (flushed = index_pending_flush(&pending, &batch, seg,
		    epoch, result, cause)) != 0)
			goto flush_failed;
		from += n;
	}
	if ((flushed = index_pending_flush(&pending, &batch, seg, epoch,
	    result, cause)) != 0)
		goto flush_failed;
	if (!copied_durable(seg, epoch)) {
		flushed = -2;
		goto flush_failed;
	}
	/* The last transaction; meta.checkpoint unchanged (0). */
	if (index_batch_commit(&batch, seg, 0, cause) != 0)
		goto out;
	*indexed = batch.indexed;
	rc = 0;
	goto out;

flush_failed:
	if (flushed == -2)
		asprintf(cause, "index pass: the journal failed while the "
		    "table was read");
	else if (*cause == NULL)
		asprintf(cause, "index pass: index: %s", strerror(errno));
out:
	index_abort(ix);	/* nothing if committed */
	free(flags);
	free(pending.items);
	free(pending.keys);
	free(batch.slots);
	free(entries);
	free(keys);
	free(result);
	return rc;
}

/* opendir, refusing a symlink at dir (ELOOP or ENOTDIR). */
static DIR *
checkpoint_opendir(const char *dir)
{
	DIR	*d;
	int	 fd, saved_errno;

	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
	    O_NOFOLLOW)) == -1)
		return NULL;
	if ((d = fdopendir(fd)) == NULL) {
		saved_errno = errno;
		close(fd);
		errno = saved_errno;
	}
	return d;
}

/*
 * The newest checkpoint of dir, if any: its segment number in *segment
 * (0: none).  Leftover temporaries are ignored.
 */
static int
newest_checkpoint(const char *dir, uint64_t *segment)
{
	DIR		*d;
	struct dirent	*e;
	uint64_t	 n;

	*segment = 0;
	if ((d = checkpoint_opendir(dir)) == NULL)
		return errno == ENOENT ? 0 : -1;
	while ((e = readdir(d)) != NULL) {
		if (checkpoint_name_parse(e->d_name, &n) && n > *segment)
			*segment = n;
	}
	closedir(d);
	return 0;
}

int
checkpoint_load(const char *dir, journal_apply_fn apply, void *arg,
    struct seqalloc_state alloc[SUBTAB_KIND_COUNT], uint64_t *segment,
    uint64_t *records_out, char **cause)
{
	struct journal_record	 record;
	struct stat		 st;
	uint8_t			*data = NULL;
	uint8_t			 sum[8];
	char			 path[PATH_MAX];
	uint64_t		 records, i, offset;
	size_t			 consumed;
	int			 fd = -1, rc = -1, saved_errno;

	*records_out = 0;
	memset(alloc, 0, SUBTAB_KIND_COUNT * sizeof *alloc);
	if (newest_checkpoint(dir, segment) != 0) {
		asprintf(cause, "checkpoint: reading %s: %s", dir,
		    strerror(errno));
		return -1;
	}
	if (*segment == 0)
		return 0;
	snprintf(path, sizeof path, "%s/" CHECKPOINT_NAME_FORMAT, dir,
	    *segment);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1 ||
	    fstat(fd, &st) == -1) {
		asprintf(cause, "checkpoint %s: %s", path, strerror(errno));
		goto out;
	}
	if ((size_t)st.st_size < CHECKPOINT_HEADER_BYTES +
	    CHECKPOINT_TRAILER_BYTES)
		goto corrupt;
	data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (data == MAP_FAILED) {
		data = NULL;
		asprintf(cause, "checkpoint %s: mmap: %s", path,
		    strerror(errno));
		goto out;
	}
	crypto_shorthash(sum, data, 56, checkpoint_key);
	if (memcmp(data, checkpoint_magic, 8) != 0 ||
	    get32(data + 8) != CHECKPOINT_VERSION ||
	    get64(data + 16) != *segment || memcmp(sum, data + 56, 8) != 0)
		goto corrupt;
	records = get64(data + 24);
	alloc[0].date = get32(data + 32);
	alloc[0].next_seq = get32(data + 36);
	alloc[1].date = get32(data + 40);
	alloc[1].next_seq = get32(data + 44);
	offset = CHECKPOINT_HEADER_BYTES;
	for (i = 0; i < records; i++) {
		if (journal_decode(data + offset, (size_t)st.st_size -
		    CHECKPOINT_TRAILER_BYTES - offset, &record, &consumed) !=
		    JOURNAL_DECODE_OK)
			goto corrupt;
		if (apply(&record, arg) != 0) {
			asprintf(cause, "checkpoint %s: applying record %"
			    PRIu64 " failed", path, i);
			goto out;
		}
		offset += consumed;
	}
	if (offset + CHECKPOINT_TRAILER_BYTES != (uint64_t)st.st_size ||
	    memcmp(data + offset, checkpoint_end, 8) != 0 ||
	    get64(data + offset + 8) != records)
		goto corrupt;
	*records_out = records;
	rc = 0;
	goto out;

corrupt:
	asprintf(cause, "checkpoint %s is corrupt (at or after byte %" PRIu64
	    "); it was written atomically, so this is damage: restore it "
	    "from a backup, or move it away to start from the journal "
	    "segments that remain", path, (uint64_t)CHECKPOINT_HEADER_BYTES);
	errno = EINVAL;		/* damage, as the header says: after asprintf */
out:
	saved_errno = errno;
	if (fd != -1)
		close(fd);
	if (data != NULL)
		munmap(data, (size_t)st.st_size);
	errno = saved_errno;
	return rc;
}

/*
 * Remove what a checkpoint at segment made redundant: older segments and
 * checkpoints, and temporaries a crash left.  Best effort: a leftover is
 * harmless, replay ignores it.
 */
void
checkpoint_prune(int dir_fd, uint64_t segment)
{
	DIR		*d;
	struct dirent	*e;
	uint64_t	 n;
	char		*end;
	int		 fd, removed = 0;

	/* A descriptor of its own for readdir: the same directory, "." */
	if ((fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1)
		return;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		int	old = 0;

		if (checkpoint_name_parse(e->d_name, &n))
			old = n < segment;
		else if (strlen(e->d_name) == 20 &&
		    strcmp(e->d_name + 16, ".jnl") == 0) {
			n = strtoull(e->d_name, &end, 16);
			old = end == e->d_name + 16 && n < segment;
		} else if (strncmp(e->d_name, ".checkpoint-", 12) == 0)
			old = 1;
		else if (strlen(e->d_name) == JOURNAL_NEXT_NAME_BYTES - 1 &&
		    strncmp(e->d_name, JOURNAL_NEXT_PREFIX,
		    strlen(JOURNAL_NEXT_PREFIX)) == 0) {
			/* A segment made ahead for a number now passed. */
			n = strtoull(e->d_name + strlen(JOURNAL_NEXT_PREFIX),
			    &end, 16);
			old = strcmp(end, ".tmp") == 0 && n <= segment;
		}
		if (old && unlinkat(dir_fd, e->d_name, 0) == 0)
			removed++;
	}
	if (removed > 0)
		fsync(dir_fd);
	closedir(d);
}

/*
 * On a store idemd left this never holds: a checkpoint's last index
 * commit sets meta.checkpoint to its segment before the file is renamed
 * into place, index passes and idemctl compact leave it as it is, and a
 * rebuilt index (meta.checkpoint 0) is made only when the checkpoint's
 * count is 0.  It holds for an index restored alone from a backup taken
 * before that checkpoint (or copied aside before it), which lacks what
 * the checkpoints since gave it and then left out of their files.
 */
int
checkpoint_index_stale(uint64_t segment, uint64_t count,
    uint64_t index_checkpoint)
{
	return count > 0 && index_checkpoint < segment;
}

int
checkpoint_index_only(const char *dir, uint64_t *segment_out,
    uint64_t *count, char **cause)
{
	uint8_t		h[CHECKPOINT_HEADER_BYTES], sum[8];
	char		path[PATH_MAX];
	uint64_t	segment;
	int		fd;

	*count = 0;
	*segment_out = 0;
	if (newest_checkpoint(dir, &segment) != 0) {
		asprintf(cause, "checkpoint: reading %s: %s", dir,
		    strerror(errno));
		return -1;
	}
	if (segment == 0)
		return 0;
	snprintf(path, sizeof path, "%s/" CHECKPOINT_NAME_FORMAT, dir,
	    segment);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1) {
		asprintf(cause, "checkpoint %s: %s", path, strerror(errno));
		return -1;
	}
	if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
		close(fd);
		asprintf(cause, "checkpoint %s: short header", path);
		errno = EINVAL;
		return -1;
	}
	close(fd);
	crypto_shorthash(sum, h, 56, checkpoint_key);
	if (memcmp(h, checkpoint_magic, 8) != 0 || memcmp(sum, h + 56, 8) != 0) {
		asprintf(cause, "checkpoint %s is corrupt", path);
		errno = EINVAL;
		return -1;
	}
	*count = get64(h + 48);
	*segment_out = segment;
	return 0;
}
