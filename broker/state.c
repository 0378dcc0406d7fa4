/* SPDX-License-Identifier: ISC */
/*
 * state.c: the master's state at start-up and at exit.  The segment is
 * created and filled from the checkpoint and the journal (store_load,
 * with the table's pages mapped ahead by shm/prefault.c); the index is
 * opened, or rebuilt when it is missing or damaged; a committed entry
 * that finds no room in the table goes to the index, and a --capacity
 * too small for what is in flight is refused with the one that fits.
 * Everything a replay keeps between its callbacks is in struct replay,
 * on state_open's stack.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "idemd.h"

/*
 * One start-up's replay, the argument of every callback below.
 *
 * overflow: submissions that did not fit in the table, each once (a JSON
 * object used as a set), and their key bytes, so that a --capacity too
 * small for the journal is refused with the capacity that fits, not at
 * the first record that does not.
 *
 * The index: whether it holds every committed entry of the checkpoint
 * being loaded (covers: then one that does not fit in the table is left
 * to it), and the committed entries of the journal that do not fit,
 * given to it in one transaction (writing) committed before the broker
 * serves.
 */
struct replay {
	struct idemd	*d;
	json_t		*overflow;
	uint64_t	 overflow_bytes;
	int		 covers;
	int		 loading_checkpoint;
	int		 writing;
	uint64_t	 put;
	uint64_t	 skipped;
};

static int
replay_overflowed(struct replay *rp, const struct journal_record *r)
{
	if (rp->overflow == NULL && (rp->overflow = json_object()) == NULL)
		return -1;
	if (json_object_getn(rp->overflow, r->key, r->entry.key_length) !=
	    NULL)
		return 0;
	if (json_object_setn_new(rp->overflow, r->key, r->entry.key_length,
	    json_true()) != 0)
		return -1;
	rp->overflow_bytes += r->entry.key_length;
	return 0;
}

/*
 * A submission that overflowed has a place after all: a later record of
 * it went to the table or the index.  The journal of effects begun
 * together and completed after holds more in flight at one point than
 * at its end, and only its end must fit.
 */
static void
replay_placed(struct replay *rp, const struct journal_record *r)
{
	if (rp->overflow == NULL || json_object_getn(rp->overflow, r->key,
	    r->entry.key_length) == NULL)
		return;
	json_object_deln(rp->overflow, r->key, r->entry.key_length);
	rp->overflow_bytes -= r->entry.key_length;
}

/* A committed entry with no room in the table: the index keeps it. */
static int
replay_to_index(struct replay *rp, const struct journal_record *r)
{
	struct idemd	*d = rp->d;
	char		*cause = NULL;

	if (rp->loading_checkpoint && rp->covers) {
		rp->skipped++;
		return 0;
	}
	if (!rp->writing) {
		if (index_begin(&d->index, &cause) != 0)
			goto fail;
		rp->writing = 1;
	}
	if (index_put(&d->index, INDEX_FULL, r, &cause) != 0)
		goto fail;
	rp->put++;
	return 0;
fail:
	log_warnx("replay: %s", cause != NULL ? cause : "index");
	free(cause);
	return -1;
}

/*
 * Call one for every committed slot of the table not marked indexed,
 * with its entry, its key and a buffer of IDEM_MAX_EFFECT_RESULT_BYTES;
 * then mark indexed the slots one answered 1 for.  The count marked, or
 * -1 with *cause (NULL: out of memory).
 */
static int
replay_each_unindexed(struct replay *rp, int (*one)(struct replay *,
    const struct subtab_entry *, const char *key, uint8_t *buf,
    char **cause), char **cause)
{
	struct idemd		*d = rp->d;
	struct subtab_entry	*entries;
	char			(*keys)[SUBTAB_MAX_KEY_BYTES];
	uint32_t		*flags, *slots = NULL, from = 0, n, i;
	uint8_t			*buf = NULL;
	size_t			 count = 0;
	int			 rc = -1, yes;

	entries = calloc(1024, sizeof *entries);
	keys = calloc(1024, sizeof *keys);
	flags = calloc(1024, sizeof *flags);
	slots = calloc(d->seg.header->slots_used + 1, sizeof *slots);
	buf = malloc(IDEM_MAX_EFFECT_RESULT_BYTES);
	if (entries == NULL || keys == NULL || flags == NULL || slots == NULL ||
	    buf == NULL)
		goto out;
	while ((n = subtab_copy_flags(&d->seg, from, 1024, entries, keys,
	    flags)) > 0) {
		for (i = 0; i < n; i++) {
			if (entries[i].state != SUBTAB_COMMITTED ||
			    (flags[i] & SUBTAB_SLOT_INDEXED))
				continue;
			if ((yes = one(rp, &entries[i], keys[i], buf,
			    cause)) < 0)
				goto out;
			if (yes)
				slots[count++] = from + i;
		}
		from += n;
	}
	subtab_mark_indexed(&d->seg, slots, count);
	rc = (int)count;
out:
	free(entries);
	free(keys);
	free(flags);
	free(slots);
	free(buf);
	return rc;
}

/* replay_make_room's step: the entry given to the index. */
static int
replay_give(struct replay *rp, const struct subtab_entry *e,
    const char *key, uint8_t *buf, char **cause)
{
	struct idemd		*d = rp->d;
	struct journal_record	 record;

	memset(&record, 0, sizeof record);
	record.type = e->kind == SUBTAB_KIND_EFFECT ? JOURNAL_RECORD_EFFECT :
	    JOURNAL_RECORD_ENTRY;
	record.entry = *e;
	memcpy(record.key, key, e->key_length);
	/* Not indexed: the arena keeps its bytes. */
	record.result = buf;
	if (record.type == JOURNAL_RECORD_EFFECT &&
	    arena_read(&d->seg, e->result_offset, e->result_length, buf) != 0)
		return -1;
	if (index_put(&d->index, INDEX_FULL, &record, cause) != 0)
		return -1;
	rp->put++;
	return 1;
}

/*
 * No room for a submission in flight: give the index every committed
 * entry of the table it lacks (the start-up transaction, committed
 * before the broker serves), which makes them evictable.  0 if that
 * made some, 1 if there were none, -1 on error.
 */
static int
replay_make_room(struct replay *rp)
{
	struct idemd	*d = rp->d;
	char		*cause = NULL;
	int		 given = -1;

	if (!rp->writing) {
		if (index_begin(&d->index, &cause) != 0)
			goto out;
		rp->writing = 1;
	}
	given = replay_each_unindexed(rp, replay_give, &cause);
out:
	if (given < 0)
		log_warnx("replay: making room: %s", cause != NULL ? cause :
		    "out of memory");
	free(cause);
	return given < 0 ? -1 : given > 0 ? 0 : 1;
}

/*
 * Put an effect's result into the arena (no slot names it yet).  The
 * arena reuses the bytes of indexed entries only: when the oldest are of
 * committed entries not yet indexed, those are marked indexed if they
 * come from a checkpoint the index covers (they are there already), else
 * go to the index (the start-up transaction), and the arena tries again.
 */
static int
replay_arena_put(struct replay *rp, const struct journal_record *r,
    uint64_t *offset)
{
	struct idemd	*d = rp->d;

	if (arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
	    r->entry.result_length, offset) == 0)
		return 0;
	if (errno == ENOSPC && rp->loading_checkpoint &&
	    rp->covers) {
		subtab_mark_all_indexed(&d->seg);
		if (arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
		    r->entry.result_length, offset) == 0)
			return 0;
	}
	if (errno == ENOSPC && d->index_ready && replay_make_room(rp) == 0 &&
	    arena_put_unlocked(&d->seg, ARENA_NO_SLOT, r->result,
	    r->entry.result_length, offset) == 0)
		return 0;
	log_warnx("replay: the result arena (%llu bytes) has no room for a "
	    "result of %u bytes; restart with a larger --result-bytes",
	    (unsigned long long)d->seg.header->arena_bytes,
	    r->entry.result_length);
	return -1;
}

static int
replay_apply(const struct journal_record *r, void *arg)
{
	struct replay		*rp = arg;
	struct idemd		*d = rp->d;
	struct subtab_entry	 effect;
	const struct subtab_entry *e = &r->entry;
	uint32_t		 slot;

	if (r->type == JOURNAL_RECORD_EFFECT) {
		/* Its result goes to the arena; the slot names it there. */
		effect = r->entry;
		effect.result_offset = 0;
		if (effect.result_length > 0 &&
		    replay_arena_put(rp, r, &effect.result_offset) != 0)
			return -1;
		e = &effect;
	} else
		seqalloc_note_used(&d->seg, r->entry.kind, r->entry.date,
		    r->entry.seq);
	if (r->entry.key_length == 0)
		return 0;	/* legacy: only its number matters */
	if (subtab_apply_slot(&d->seg, r->key, r->entry.key_length,
	    r->hint != 0 ? (uint32_t)r->hint : subtab_prefetch(&d->seg, r->key,
	    r->entry.key_length), e, &slot) != 0) {
		/* A committed entry with no room: the index's (its result
		 * left in the arena, named by no slot, reusable). */
		if (errno == ENOSPC && d->index_ready &&
		    r->entry.state == SUBTAB_COMMITTED) {
			if (replay_to_index(rp, r) != 0)
				return -1;
			replay_placed(rp, r);
			return 0;
		}
		/* In flight: room is made by giving the index the rest. */
		if (errno == ENOSPC && d->index_ready &&
		    replay_make_room(rp) == 0 &&
		    subtab_apply_slot(&d->seg, r->key, r->entry.key_length,
		    subtab_prefetch(&d->seg, r->key, r->entry.key_length), e,
		    &slot) == 0)
			goto applied;
		if (errno == ENOSPC && replay_overflowed(rp, r) == 0)
			return 0;	/* counted; refused after the replay */
		log_warn("replay: submission table (capacity %u)",
		    d->capacity);
		return -1;
	}
applied:
	replay_placed(rp, r);
	if (r->type == JOURNAL_RECORD_EFFECT && effect.result_length > 0)
		arena_own(&d->seg, effect.result_offset, slot);
	return 0;
}

/* The journal needs more than --capacity: say how much is needed. */
static int
replay_check_capacity(struct replay *rp, char **cause)
{
	struct idemd		*d = rp->d;
	struct shm_header	*h = d->seg.header;
	uint64_t		 keys, bytes, needed, by_heap;

	if (rp->overflow == NULL || json_object_size(rp->overflow) == 0)
		return 0;
	keys = h->slots_used + json_object_size(rp->overflow);
	bytes = h->heap_used + rp->overflow_bytes;
	needed = keys;
	/* Key space is SHM_HEAP_BYTES_PER_SLOT a slot, plus one key. */
	if (bytes > SUBTAB_MAX_KEY_BYTES) {
		by_heap = (bytes - SUBTAB_MAX_KEY_BYTES +
		    SHM_HEAP_BYTES_PER_SLOT - 1) / SHM_HEAP_BYTES_PER_SLOT;
		if (by_heap > needed)
			needed = by_heap;
	}
	asprintf(cause, "the journal holds %llu submissions in flight or "
	    "not yet committed, more than --capacity %u holds: restart with "
	    "--capacity %llu or more (the journal keeps every one of them)",
	    (unsigned long long)keys, d->capacity,
	    (unsigned long long)needed);
	return -1;
}

/*
 * The checkpoint is loaded (store_load goes on with the journal): if the
 * index covers it, its committed entries in the table are evictable.
 */
static void
replay_checkpoint_done(struct replay *rp)
{
	if (!rp->loading_checkpoint)
		return;
	rp->loading_checkpoint = 0;
	if (rp->covers)
		subtab_mark_all_indexed(&rp->d->seg);
}

/*
 * A few records ahead of replay_apply: fetch the record's bucket, and
 * keep the key's hash in the record so that apply does not hash again.
 */
static void
replay_hint(struct journal_record *r, void *arg)
{
	struct replay	*rp = arg;

	/* The first hint comes after the checkpoint's last record. */
	replay_checkpoint_done(rp);

	if (r->entry.key_length > 0 &&
	    r->entry.key_length <= SUBTAB_MAX_KEY_BYTES)
		r->hint = (uint64_t)1 << 32 | subtab_prefetch(&rp->d->seg,
		    r->key, r->entry.key_length);
}

/*
 * Open the index, or rebuild it when it is missing or damaged: the
 * checkpoint and the journal hold every committed entry unless some
 * lived only in the index (the checkpoint says how many).  Then the
 * index cannot be rebuilt, nor be older than that checkpoint, and
 * start-up stops rather than forget them: a retry of a forgotten id
 * would execute again.
 */
static int
open_index(struct replay *rp, const char *journal_dir, char **cause)
{
	struct idemd		*d = rp->d;
	struct index_stats	 st;
	struct stat		 jst;
	char			 idir[PATH_MAX], aside[PATH_MAX + 32];
	char			 first[PATH_MAX + 32];
	char			*why = NULL;
	uint64_t		 segment, index_only;
	int			 existed, damaged = 0;

	if (paths_index_dir(d, idir, sizeof idir) != 0) {
		*cause = strdup("the index's path is too long");
		return -1;
	}
	if (checkpoint_index_only(journal_dir, &segment, &index_only,
	    cause) != 0)
		return -1;
	d->index_only = index_only;
	existed = index_exists(idir);
	if (existed && (history_open(d, 0, &why) != 0 ||
	    index_stats(&d->index, &st, &why) != 0)) {
		/*
		 * index.c: EINVAL is damage or another format; EAGAIN (every
		 * reader slot taken by other processes) is not, and a healthy
		 * index moved aside could not be rebuilt if a checkpoint left
		 * receipts to it alone: refused, left where it is.
		 */
		if (errno != EAGAIN && (d->index_ready || errno == EINVAL)) {
			damaged = 1;
		} else {
			if (d->index_ready)
				history_close(d);
			*cause = why;
			return -1;
		}
		history_close(d);
		snprintf(aside, sizeof aside, "%s.damaged-%lld", idir,
		    (long long)shm_now_ms());
		if (rename(idir, aside) != 0) {
			asprintf(cause, "index %s is damaged (%s) and cannot "
			    "be moved aside: %s", idir, why != NULL ? why :
			    "unreadable", strerror(errno));
			free(why);
			return -1;
		}
		log_warnx("index %s is damaged (%s): moved to %s", idir,
		    why != NULL ? why : "unreadable", aside);
		free(why);
		why = NULL;
		existed = 0;
	}
	if (!existed && index_only > 0) {
		asprintf(cause, "the index %s is %s, and %llu committed "
		    "receipts were kept only there (the checkpoint and the "
		    "journal no longer hold them): restore it from a backup "
		    "taken with or after checkpoint-%016llx.snap (idemctl "
		    "backup copies them together). "
		    "idemd will not start without them, since a retry of one "
		    "of those ids would execute again", idir,
		    damaged ? "damaged" : "missing",
		    (unsigned long long)index_only,
		    (unsigned long long)segment);
		return -1;
	}
	/* A root with a journal had an index: say it is being rebuilt. */
	snprintf(first, sizeof first, "%s/%016llx.jnl", journal_dir, 1ULL);
	if (!existed && (segment != 0 || stat(first, &jst) == 0))
		log_warnx("index %s is %s: rebuilding it from the checkpoint "
		    "and the journal, which hold every committed receipt",
		    idir, damaged ? "damaged" : "missing");
	if (!d->index_ready && history_open(d, 0, cause) != 0)
		return -1;
	if (index_stats(&d->index, &st, &why) != 0) {
		asprintf(cause, "index %s: unreadable after open: %s", idir,
		    why != NULL ? why : strerror(errno));
		free(why);
		return -1;
	}
	/*
	 * An index older than the newest checkpoint, which left receipts
	 * to the index alone (checkpoint_index_stale): started on, the
	 * receipts it lacks would be forgotten, and their retries execute
	 * again.
	 */
	if (existed && checkpoint_index_stale(segment, index_only,
	    st.checkpoint)) {
		asprintf(cause, "the index %s is older than the newest "
		    "checkpoint, checkpoint-%016llx.snap (it was last "
		    "written with checkpoint %016llx), which left %llu "
		    "committed receipts to the index alone: it lacks those "
		    "given to it since.  Restore an index taken with or "
		    "after that checkpoint (idemctl backup copies them "
		    "together), or the whole backup this index came from.  "
		    "idemd will not start on it, since a retry of a receipt "
		    "it lacks would execute again", idir,
		    (unsigned long long)segment,
		    (unsigned long long)st.checkpoint,
		    (unsigned long long)index_only);
		return -1;
	}
	rp->covers = segment != 0 && st.checkpoint >= segment;
	return 0;
}

/* replay_mark_held's step: does the index hold the entry committed? */
static int
replay_held(struct replay *rp, const struct subtab_entry *e, const char *key,
    uint8_t *buf, char **cause)
{
	struct index_entry	found;
	int			got;

	if ((got = index_get(&rp->d->index, key, e->key_length, &found, buf,
	    cause)) < 0)
		return -1;
	return got == 1 && found.record.entry.state == SUBTAB_COMMITTED;
}

/*
 * After the replay: committed slots the journal's tail gave the table
 * that the index holds already are marked indexed.  A checkpoint gives
 * the index every committed entry of the table it lacks, also those
 * committed after the journal position the checkpoint covers; their
 * records are replayed again at the next start, and without this each
 * would count twice in stats' history_entries (the index's, and the
 * table's "not yet indexed") and wait for a checkpoint to be evictable.
 * Only the unindexed committed slots are looked up, and only when the
 * index holds anything.  0, or -1 on an index error (logged).
 */
static int
replay_mark_held(struct replay *rp)
{
	struct index_stats	 st;
	char			*cause = NULL;
	int			 marked;

	if (index_stats(&rp->d->index, &st, NULL) != 0 || st.entries == 0 ||
	    subtab_unindexed(&rp->d->seg) == 0)
		return 0;
	if ((marked = replay_each_unindexed(rp, replay_held, &cause)) < 0)
		log_warnx("replay: the index's receipts: %s", cause != NULL ?
		    cause : "out of memory");
	free(cause);
	return marked < 0 ? -1 : 0;
}

/* What replay cut or removed (the store reports it; idemd says it). */
static void
replay_warn_torn(const char *dir, const struct journal_replay_stats *st)
{
	if (st->torn_segment == 0)
		return;
	if (st->torn_stub)
		log_warnx("journal %s/%016llx.jnl: segment of %llu bytes was "
		    "shorter than its header (its creation was interrupted): "
		    "removed", dir, (unsigned long long)st->torn_segment,
		    (unsigned long long)st->truncated_bytes);
	else
		log_warnx("journal %s/%016llx.jnl: torn tail at offset %llu "
		    "(%s): cut %llu bytes of an append that never completed",
		    dir, (unsigned long long)st->torn_segment,
		    (unsigned long long)st->torn_offset, st->torn_why,
		    (unsigned long long)st->truncated_bytes);
}

int
state_open(struct idemd *d, char **cause)
{
	struct replay		 rp = { .d = d };
	struct store_loaded	 loaded;
	struct shm_prefault	 prefault;
	char			 dir[PATH_MAX];
	int64_t			 started = shm_now_ms();
	int			 digit, loaded_rv;

	if (paths_journal_dir(d, dir, sizeof dir) != 0) {
		asprintf(cause, "%s: the journal's path is too long",
		    d->root_real);
		return -1;
	}
	if (shm_create_sized(d->segment_key, d->capacity, d->result_bytes,
	    &d->seg, cause) != 0)
		return -1;
	d->seg.header->worker_count = d->worker_count;
	for (digit = 0, d->seg.header->alloc_max_seq = 1;
	    digit < (int)d->sequence_digits; digit++)
		d->seg.header->alloc_max_seq *= 10;
	d->seg.header->alloc_max_seq -= 1;	/* 999 for three digits */
	if (open_index(&rp, dir, cause) != 0)
		goto fail;
	rp.loading_checkpoint = 1;
	/* The table's pages mapped on the other CPU while the replay runs. */
	if (shm_prefault_start(&prefault, &d->seg) != 0)
		log_debug("state: the table is not mapped ahead: %s",
		    strerror(prefault.error));
	loaded_rv = store_load(dir, 0, replay_apply, replay_hint, &rp, &d->seg,
	    &loaded, cause);
	shm_prefault_stop(&prefault);
	if (prefault.error != 0 && prefault.error != ENOSYS)
		log_debug("state: mapping the table ahead stopped: %s",
		    strerror(prefault.error));
	if (loaded_rv != 0)
		goto fail;
	replay_checkpoint_done(&rp);
	replay_warn_torn(dir, &loaded.stats);
	if (replay_check_capacity(&rp, cause) != 0)
		goto fail;
	if (rp.writing) {
		rp.writing = 0;
		if (index_commit(&d->index, 0, cause) != 0)
			goto fail;
	}
	if (replay_mark_held(&rp) != 0) {
		asprintf(cause, "the index could not be read after the replay");
		goto fail;
	}
	if (rp.put + rp.skipped > 0)
		log_info("state: %llu committed submission%s left to the "
		    "index (%llu given to it now): the table (--capacity %u) "
		    "holds the rest", (unsigned long long)(rp.put + rp.skipped),
		    log_plural(rp.put + rp.skipped),
		    (unsigned long long)rp.put, d->capacity);
	/* Replay's logical end, not st_size: the zero tail is not records. */
	if (journal_open_end(&d->journal, dir, loaded.stats.end_segment,
	    loaded.stats.end_offset, cause) != 0)
		goto fail;
	if ((d->journal_dir_fd = fcntl(d->journal.dir_fd, F_DUPFD_CLOEXEC,
	    0)) == -1) {
		asprintf(cause, "journal %s: %s", dir, strerror(errno));
		journal_close(&d->journal);
		goto fail;
	}
	checkpoint_prune(d->journal_dir_fd, loaded.checkpoint);
	log_info("state: %llu submission%s from the checkpoint, then %llu "
	    "record%s (%llu bytes, %u segment%s), in %lld ms (%llu MiB of "
	    "the table mapped ahead)",
	    (unsigned long long)loaded.checkpoint_records,
	    log_plural(loaded.checkpoint_records),
	    (unsigned long long)loaded.stats.records,
	    log_plural(loaded.stats.records),
	    (unsigned long long)loaded.stats.bytes, loaded.stats.segments,
	    log_plural(loaded.stats.segments),
	    (long long)(shm_now_ms() - started),
	    (unsigned long long)(atomic_load(&prefault.bytes) >> 20));
	return 0;
fail:
	json_decref(rp.overflow);
	history_close(d);
	shm_destroy(&d->seg);
	return -1;
}

void
state_close(struct idemd *d)
{
	history_close(d);
	journal_close(&d->journal);
	if (d->journal_dir_fd != -1) {
		close(d->journal_dir_fd);
		d->journal_dir_fd = -1;
	}
	shm_destroy(&d->seg);
}
