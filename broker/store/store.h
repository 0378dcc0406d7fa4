/* SPDX-License-Identifier: ISC */
/*
 * store.h: the storage API, what idem keeps on disk (journal,
 * checkpoint, TASK/REPORT files), grouped by the file that owns them.
 */
#ifndef STORE_H
#define STORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "idem.h"
#include "protocol.h"
#include "shm.h"

/* ---- notice.c: what the store says that is not a failure ------------ */

enum store_notice_level {
	STORE_NOTICE_INFO,
	STORE_NOTICE_WARNING
};
typedef void (*store_notice_fn)(enum store_notice_level, const char *message);
/* idemd's log, set before anything of the store runs. */
void	store_set_notice_hook(store_notice_fn);
/* The store's own files: a note to the hook (dropped without one). */
void	store_notice(enum store_notice_level, const char *, ...)
	    __attribute__((format(printf, 2, 3)));

/* ---- names.c: the table's states and schemas by their wire names ---- */

/*
 * They keep shm's prefix (they name subtab_entry's fields) but live
 * above shm/, which knows no string of the protocol.
 */
const char *subtab_state_name(unsigned);	/* "reserved", ... */
const char *subtab_schema_name(unsigned);	/* NULL for legacy */
/* Is s a valid --host-id (IDEM_STORE_MAX_HOST_ID_BYTES)? */
int	store_host_id_valid(const char *s);

/* ---- durable.c: the one write-all loop of the store's files ---------- */

/* write(2) until done (EINTR retried); -1 on error, EIO on a zero write. */
int	durable_write_all(int fd, const void *, size_t);
/*
 * Write-back paced: the checkpoint thread's large files (a checkpoint,
 * the next segment's zeros) handed to the disk DURABLE_PACE_BYTES at a
 * time as they are written, at most one piece in flight, so that their
 * fsync finds little left and the device never holds MiBs in front of
 * the journal's small fdatasync (PostgreSQL's checkpoint_flush_after).
 * Never a durability point: sync_file_range(2) persists no metadata and
 * flushes no device cache, so each file's fsync stays where it was, in
 * the same order (doc/journal.md, "Write-back paced").
 */
#define DURABLE_PACE_BYTES	(256 * 1024)
struct durable_pace {
	int		fd;
	uint64_t	started;	/* write-back started on [0, started) */
	uint64_t	waited;		/* and done on [0, waited) */
	int		unsupported;	/* the fd refused it: pace no more */
	int		succeeded;	/* a call succeeded: all errors fail */
};
void	durable_pace_init(struct durable_pace *, int fd);
/*
 * The bytes of [0, end) are written: start the write-back of those not
 * started yet, a piece at a time, each after the one before it is on
 * the device.  0, or -1 with errno (EIO, ENOSPC, ENOMEM, or any error
 * once a call on the fd succeeded: the file's writer fails as on a
 * failed write).  ENOSYS, EINVAL, ESPIPE or EPERM at the fd's first
 * call only stops the pacing (0).
 */
int	durable_pace(struct durable_pace *, uint64_t end);
/*
 * ROOT/.idem/name holding data, made durably: a temporary, fsync'd,
 * then renamed over name (replace) or linked, which never replaces (a
 * file there first wins); the directory fsync'd.  No symlink followed.
 * 0, or -1 with *cause (malloc'd).
 */
int	durable_state_file(int root_fd, const char *name, const void *data,
	    size_t length, int replace, char **cause);

/* ---- journal.c: the on-disk journal (format in doc/journal.md) -------- */

/* A segment's header: the bytes before its first record. */
#define JOURNAL_SEGMENT_HEADER_BYTES	32
/* The largest record without an effect's result: every ENTRY record. */
#define JOURNAL_MAX_RECORD_BYTES	1024
/* The largest record of all: an EFFECT record with the largest result. */
#define JOURNAL_MAX_EFFECT_RECORD_BYTES	\
	(16 + 144 + SUBTAB_MAX_KEY_BYTES + IDEM_MAX_EFFECT_RESULT_BYTES)

enum journal_record_type {
	JOURNAL_RECORD_ENTRY = 1,	/* a snapshot of one subtab_entry */
	JOURNAL_RECORD_EFFECT = 2	/* an effect's, and its result's bytes */
};

/*
 * One record.  An ENTRY record carries a submission's facts after a
 * transition (its key_length bytes of key follow in key[]); a legacy task
 * or report is an ENTRY with key_length 0 and state COMMITTED, recorded
 * only so its number is never handed out again.
 */
struct journal_record {
	uint8_t			type;
	struct subtab_entry	entry;
	char			key[SUBTAB_MAX_KEY_BYTES];
	/*
	 * EFFECT: entry.result_length bytes of result (not owned: encode
	 * reads them, decode points into its input).
	 */
	const uint8_t		*result;
	/* Not in the journal: a replay hint's note for apply (0: none). */
	uint64_t		hint;
	/*
	 * Set by decode: the record's form (1, or 2 with a round prefix,
	 * doc/journal.md "Rounds over the zero tail") and, form 2, where
	 * its round began.  Encode ignores them (it writes form 1).
	 */
	uint8_t			form;
	uint64_t		round_start;
};

/* Form 2's round prefix before a form 1 record (doc/journal.md). */
#define JOURNAL_ROUND_PREFIX_BYTES	24
/*
 * Format 2's layout rule (doc/journal.md, "Sector padding"): a record's
 * round prefix and its inner record's header (24 + 16 bytes) never cross
 * a JOURNAL_SECTOR_BYTES boundary of the file.  A record that would start
 * at P with P % 512 + 40 > 512 starts at the next multiple of 512 instead,
 * the bytes before it zeros.
 */
#define JOURNAL_SECTOR_BYTES		512
#define JOURNAL_PAD_SPAN		(JOURNAL_ROUND_PREFIX_BYTES + 16)
/* The zero bytes the rule puts at offset at before a record (0 or < 40). */
static inline size_t
journal_round_pad(uint64_t at)
{
	uint64_t	in = at % JOURNAL_SECTOR_BYTES;

	return in + JOURNAL_PAD_SPAN > JOURNAL_SECTOR_BYTES ?
	    (size_t)(JOURNAL_SECTOR_BYTES - in) : 0;
}
/* Segment format versions: 1 form 1 records, 2 form 2 records. */
#define JOURNAL_FORMAT_PLAIN		1
#define JOURNAL_FORMAT_ROUNDS		2
/*
 * Write into out the prefix that makes the form 1 record at record (its
 * first 16 bytes are enough) a form 2 record of the round that began at
 * round_start.
 */
void	journal_round_prefix(uint8_t out[JOURNAL_ROUND_PREFIX_BYTES],
	    uint64_t round_start, const uint8_t *record);

/* The bytes journal_encode needs for the record. */
size_t	journal_encoded_size(const struct journal_record *);
/* Encode into out; returns the bytes used, 0 if out_size is too small. */
size_t	journal_encode(const struct journal_record *, uint8_t *out,
	    size_t out_size);

enum journal_decode_result {
	JOURNAL_DECODE_OK,
	JOURNAL_DECODE_SHORT,	/* the record runs past the end of the input */
	JOURNAL_DECODE_BAD	/* bad magic, length, checksum or field */
};
/*
 * A form 1 record only (the ring, checkpoints, the index): a round prefix
 * is BAD.  Replay reads form 2 records itself.
 */
enum journal_decode_result journal_decode(const uint8_t *in, size_t length,
	    struct journal_record *, size_t *consumed);

struct journal {
	int		 dir_fd;
	int		 fd;		/* the segment appended to */
	char		*dir;
	uint64_t	 segment;	/* its number */
	uint64_t	 size;		/* its logical end: the records' */
	/*
	 * The file's end: zeros from size up to it, written ahead so that
	 * an append overwrites allocated blocks (doc/journal.md, "The
	 * zero tail").  A hint: only ever zeros lie past size.
	 */
	uint64_t	 zeroed;
	int64_t		 zero_retry_at;	/* zeros failed: retry (ms) */
	/*
	 * A rotation failed after its cut (its directory fsync, or the
	 * creation's): the next segment's name may be on the disk all the
	 * same, and a sealed segment ends in records only, so no zeros
	 * ahead in this one until a rotation succeeds.  Set at open too,
	 * while the directory's fsync fails (journal_open_dir): the name
	 * may be a previous handle's.
	 */
	int		 zeros_stopped;
	/*
	 * The segment's format version: 2 (JOURNAL_FORMAT_ROUNDS), each
	 * record written with a round prefix naming size at the append.
	 */
	uint32_t	 format;
	/* Where the last append began: crash.c's tear finds its records. */
	uint64_t	 round_start;
	uint8_t		*prefixes;	/* format 2: the round's, malloc'd */
	size_t		 prefixes_cap;	/* in prefixes */
	struct iovec	*wide;		/* format 2: the round's pieces */
	size_t		 wide_cap;
};

/* Open (creating dir and first segment if missing) for appending. */
int	journal_open(struct journal *, const char *dir, char **cause);
/*
 * The same, the last segment's logical end given by the replay that ran
 * just before (segment 0: read it from the segment, as journal_open does).
 */
int	journal_open_end(struct journal *, const char *dir, uint64_t segment,
	    uint64_t end, char **cause);
/*
 * The same in the directory dir_fd already holds (kept by the caller;
 * dir only names it in causes): a broker's reopen never resolves the
 * path again, so a state directory swapped for a symlink since start-up
 * is not followed.
 */
int	journal_open_at(struct journal *, int dir_fd, const char *dir,
	    char **cause);
/*
 * Append all bytes of iov.  A failed or short write truncates the
 * segment back to its previous size and returns -1 (errno set).
 */
int	journal_append(struct journal *, const struct iovec *, int iovcnt,
	    char **cause);
/* fdatasync.  A failure is never retried by the caller (see doc). */
int	journal_sync(struct journal *, char **cause);
/*
 * Keep zeros ahead of the logical end of a segment rotated past
 * segment_bytes: when less than a chunk is left, write zeros (pwrite)
 * up to two chunks ahead, never past segment_bytes.  No
 * fdatasync: the next round's covers them.  -1 (cause set) when the
 * write failed: the journal is as usable as before (nothing was
 * acknowledged by it); tries again JOURNAL_ZERO_RETRY_MS later.
 */
#define JOURNAL_ZERO_RETRY_MS	1000
int	journal_prezero(struct journal *, uint64_t segment_bytes,
	    char **cause);
/*
 * Cut the zero tail (ftruncate to the logical end, fsync): before a
 * rotation seals the segment, and at a clean stop, so a stopped broker's
 * journal holds records only.
 */
int	journal_cut_zeros(struct journal *, char **cause);
/* The zero chunk for segment_bytes (1 MiB; less for small segments). */
uint64_t journal_zero_chunk(uint64_t segment_bytes);
void	journal_close(struct journal *);
/* durable_write_all's old name, for branches still calling it (#28: G4). */
static inline int
journal_write_all(int fd, const uint8_t *p, size_t n)
{
	return durable_write_all(fd, p, n);
}
/*
 * Cut segment back to size and fsync it: after a failed write or fsync,
 * what follows the last durable size was never acknowledged and its
 * state on disk is unknown, so it must not be replayed.
 */
int	journal_cut(int dir_fd, const char *dir, uint64_t segment,
	    uint64_t size, char **cause);

typedef int (*journal_apply_fn)(const struct journal_record *, void *arg);
struct journal_replay_stats {
	uint64_t	records;
	uint64_t	bytes;
	uint64_t	truncated_bytes;	/* torn tail cut (read-only: found) */
	unsigned	segments;
	/*
	 * The torn tail, if any (torn_segment 0: none): cut at torn_offset,
	 * or, torn_stub, a segment shorter than its header removed whole
	 * (read-only: only found).  The caller warns of it: replay logs
	 * nothing.
	 */
	uint64_t	torn_segment;
	uint64_t	torn_offset;
	const char	*torn_why;		/* static string */
	int		torn_stub;
	/* While apply runs: where the record it is given starts. */
	uint64_t	at_segment;
	uint64_t	at_offset;
	/* Corruption at an offset (-1, EINVAL): it, in segment at_segment. */
	int		has_corrupt_offset;
	uint64_t	corrupt_offset;
	/*
	 * The last segment's logical end (after a cut; end_segment 0: no
	 * segment left) and the zeros after it, its clean end written
	 * ahead by the writer: not records, not a torn tail.
	 */
	uint64_t	end_segment;
	uint64_t	end_offset;
	uint64_t	zero_bytes;
};
/* Never truncate or remove anything: a torn tail is only reported in stats. */
#define JOURNAL_REPLAY_READONLY	0x1
/*
 * Replay every segment of dir in order, calling apply for each record.
 * An incomplete or invalid record with no valid record after it is a
 * torn tail: the segment is truncated there (and fsync'd), unless flags
 * has JOURNAL_REPLAY_READONLY; stats say where, for the caller's warning.  An
 * invalid record followed by a valid one is corruption: -1 with a cause
 * naming file and offset.  A missing dir is an empty journal.
 */
int	journal_replay(const char *dir, int flags, journal_apply_fn,
	    void *arg, struct journal_replay_stats *, char **cause);
/*
 * The same from segment from on (a checkpoint's): older segments are
 * ignored, and from itself must exist.
 */
int	journal_replay_from(const char *dir, uint64_t from, int flags,
	    journal_apply_fn, void *arg, struct journal_replay_stats *,
	    char **cause);
/*
 * The same, calling hint for each record a few records before apply gets
 * it, so that the caller can start loading what apply will touch.
 */
typedef void (*journal_hint_fn)(struct journal_record *, void *arg);
int	journal_replay_hinted(const char *dir, uint64_t from, int flags,
	    journal_apply_fn, journal_hint_fn, void *arg,
	    struct journal_replay_stats *, char **cause);
/*
 * The logical end of a segment's bytes map[0..size): the end of its last
 * record, if only zeros follow it; -1 if anything else does (a torn tail
 * or damage: replay's business).
 */
int	journal_segment_end(const uint8_t *map, size_t size, size_t *end);
/* Start the next segment (after a sync): for checkpoints. */
int	journal_rotate(struct journal *, char **cause);
/*
 * The next segment made ahead (doc/journal.md, "The next segment made
 * ahead"), off the journaling thread: its header and the first zeros
 * written and fsync'd under ".next-<number>.tmp", a name that is no
 * segment's (replay, verify and backup ignore it; a checkpoint prunes
 * those of numbers before its own), so that a rotation only renames it
 * into place.  fd -1: none.
 */
#define JOURNAL_NEXT_PREFIX	".next-"	/* then 16 hex digits, ".tmp" */
#define JOURNAL_NEXT_NAME_BYTES	27
void	journal_next_name(uint64_t number, char name[JOURNAL_NEXT_NAME_BYTES]);
struct journal_next {
	int		fd;
	uint64_t	number;
	uint64_t	zeroed;		/* its size: header and zeros */
	int		rename_errno;	/* why journal_rotate_next could not
					   rename it into place (0: it could) */
};
/*
 * Make segment number ahead in the directory dir_fd (dir names it in
 * causes); any earlier file of that name is removed first.  0 with
 * next->fd -1 when the file system is nearly full (none made); -1 and
 * cause on failure (nothing left behind).
 */
int	journal_make_next(int dir_fd, const char *dir, uint64_t number,
	    uint64_t segment_bytes, struct journal_next *next, char **cause);
/*
 * Close and unlink one made ahead and not used (nothing if fd is -1).
 * Each number has its own name, so this never touches another being
 * made meanwhile.
 */
void	journal_drop_next(int dir_fd, struct journal_next *next);
/*
 * journal_rotate, switching to next when it is segment + 1: renamed into
 * place (never over an existing segment) and the directory fsync'd.
 * next is consumed either way (used, or dropped); NULL or another
 * number: the segment is created as journal_rotate does.
 */
int	journal_rotate_next(struct journal *, struct journal_next *next,
	    char **cause);

/* ---- checkpoint.c: snapshots of the table (format in doc/journal.md) -- */

/* A segment past this size is rotated and the table checkpointed. */
#define JOURNAL_DEFAULT_SEGMENT_BYTES	(64ULL * 1024 * 1024)

/*
 * Write checkpoint-<segment>.snap atomically from the table; *records:
 * the submissions it holds.  Every committed entry the index (NULL:
 * none) lacks is given to it and made durable there before the
 * checkpoint is renamed into place; *indexed: how many.  *index_only:
 * on entry the newest checkpoint's count of receipts only the index
 * holds (checkpoint_index_only; once not 0, committed entries are not
 * copied); on success this one's.
 */
struct index;
int	checkpoint_write(int dir_fd, const char *dir, uint64_t segment,
	    struct shm_segment *, struct index *, uint64_t *index_only,
	    uint64_t *records, uint64_t *indexed, char **cause);
/*
 * Give the index (not NULL) every committed entry of the table it lacks,
 * as checkpoint_write does, and mark them INDEXED: no file, no
 * rotation, meta.checkpoint unchanged.  *indexed: how many.
 */
int	checkpoint_index_pass(struct shm_segment *, struct index *,
	    uint64_t *indexed, char **cause);
/*
 * Apply the newest checkpoint of dir; *segment is where the journal
 * continues (0: no checkpoint, replay everything).  -1 if it is corrupt
 * (errno EINVAL), cannot be read (errno) or apply fails.
 */
int	checkpoint_load(const char *dir, journal_apply_fn, void *arg,
	    struct seqalloc_state alloc[SUBTAB_KIND_COUNT], uint64_t *segment,
	    uint64_t *records, char **cause);
/*
 * The newest checkpoint's segment (0: none) and the committed receipts
 * only the index held when it was written: what a lost index loses.
 */
int	checkpoint_index_only(const char *dir, uint64_t *segment,
	    uint64_t *count, char **cause);
/*
 * Whether an index last written with checkpoint index_checkpoint (its
 * meta.checkpoint) is older than the newest checkpoint, segment, which
 * left count receipts to the index alone (checkpoint_index_only): it
 * lacks those.  idemd refuses to start on it (broker/state.c), idemctl
 * verify reports it (index_stale), store import refuses it.
 */
int	checkpoint_index_stale(uint64_t segment, uint64_t count,
	    uint64_t index_checkpoint);
/* Is name a checkpoint ("checkpoint-%016llx.snap")?  Its segment in *segment. */
int	checkpoint_name_parse(const char *name, uint64_t *segment);
/*
 * Remove segments and checkpoints older than segment, and temporaries.
 * checkpoint_write and checkpoint_prune work in dir_fd, the journal's
 * directory as the broker opened it at start-up (dir names it in causes).
 */
void	checkpoint_prune(int dir_fd, uint64_t segment);

/* ---- index.c: every committed receipt, on disk (doc/journal.md) ------ */

#define INDEX_FORMAT	1
enum index_form {
	INDEX_FULL = 1,		/* the whole entry (and an effect's result) */
	INDEX_TOMBSTONE = 2	/* compacted: the facts a retry is told */
};
struct MDB_env;
struct MDB_txn;
struct index {
	struct MDB_env	*env;
	unsigned	 receipts, meta;	/* MDB_dbi */
	struct MDB_txn	*read;		/* reset between lookups */
	struct MDB_txn	*write;		/* index_begin .. index_commit */
	char		*dir;
	int		 readonly;
};
struct index_entry {
	int			form;	/* enum index_form */
	/* committed; an effect's result in the caller's buffer */
	struct journal_record	record;
};
struct index_stats {
	uint64_t	entries;
	uint64_t	bytes;		/* pages in use */
	uint64_t	checkpoint;	/* last written from (0: never) */
};
#define INDEX_READONLY	0x1
/* A data file exists at dir (1), or not (0). */
int	index_exists(const char *dir);
/*
 * Open (creating dir, the last component only, and the databases unless
 * INDEX_READONLY).  -1 with a cause; errno EINVAL: damaged or of
 * another format.
 */
int	index_open(struct index *, const char *dir, int flags, char **cause);
/*
 * The same in the directory dir_fd holds (it must exist; label names it
 * in causes): a process that opened it once is not led elsewhere by a
 * directory renamed or swapped for a symlink since.
 */
int	index_open_at(struct index *, int dir_fd, const char *label, int flags,
	    char **cause);
void	index_close(struct index *);
/*
 * Look key up: 1 and the entry (an effect's result copied into result,
 * IDEM_MAX_EFFECT_RESULT_BYTES), 0 if absent, -1 on error (EINVAL: a
 * value that does not decode).
 */
int	index_get(struct index *, const char *key, size_t key_length,
	    struct index_entry *, uint8_t *result, char **cause);
/* One write transaction at a time; index_commit makes it durable. */
int	index_begin(struct index *, char **cause);
/*
 * A whole entry put under a key the index has changes nothing: a
 * committed receipt never changes, and a tombstone stays one.
 */
int	index_put(struct index *, int form, const struct journal_record *,
	    char **cause);
/* checkpoint (0: unchanged) is recorded with the same commit. */
int	index_commit(struct index *, uint64_t checkpoint, char **cause);
void	index_abort(struct index *);
/*
 * Its entries, pages and meta.checkpoint.  -1 with a cause (if cause is
 * not NULL): a read transaction could not begin (every reader slot
 * taken: MDB_READERS_FULL) or the database cannot be read.
 */
int	index_stats(struct index *, struct index_stats *, char **cause);
/*
 * Where this process maps the index, how many bytes of the map the file
 * holds now (its pages in use), and the file's descriptor (LMDB's: only
 * to read ahead): what a warm-up may touch.
 */
int	index_mapped(struct index *, uint8_t **base, uint64_t *bytes,
	    int *fd);
/* A consistent copy of the whole index (compacted) into fd, not synced. */
int	index_copy_fd(struct index *, int fd, char **cause);
/* Visit every entry in key order; visit returning non-zero stops (<0: error). */
typedef int (*index_visit_fn)(const struct index_entry *, void *arg);
int	index_foreach(struct index *, index_visit_fn, void *arg,
	    char **cause);
/* Replace every full entry committed before before_ms by its tombstone. */
int	index_compact(struct index *, int64_t before_ms, uint64_t *pruned,
	    char **cause);
/* What a tombstone keeps of a full entry. */
void	index_tombstone_of(const struct journal_record *full,
	    struct journal_record *);
int	index_decode(const void *, size_t, struct index_entry *);

/* ---- backup.c, backup_workspace.c: idemctl backup (doc/journal.md) --- */

#define STORE_BACKUP_MANIFEST	"backup-manifest"	/* in DEST/.idem/ */
#define STORE_BACKUP_INFO	"backup-info"
struct store_backup {
	/* In. */
	const char		*root;
	const char		*dest;		/* new, or an empty directory */
	int			 with_workspace;
	/* Out. */
	int64_t			 started_ms;
	unsigned		 listings;	/* of the journal directory */
	uint64_t		 checkpoint;	/* S copied, 0: none */
	uint64_t		 first_segment, last_segment;
	uint64_t		 journal_bytes;	/* checkpoint and segments */
	uint64_t		 records;	/* in the copied segments */
	uint64_t		 torn_bytes;	/* a record being written, cut */
	int			 index_copied;
	uint64_t		 index_bytes;
	struct index_stats	 index;		/* the copy's */
	unsigned		 state_files;	/* workspace-id, ... */
	unsigned		 sequence_digits;
	uint64_t		 workspace_files;	/* in the manifest */
	uint64_t		 workspace_bytes;	/* copied */
	unsigned		 after_cut;	/* TASK, REPORT files left out */
};
/*
 * A consistent copy of root's state into dest beside a running broker,
 * the workspace listed (and copied with with_workspace): 0, or -1 with
 * *cause (malloc'd; errno EEXIST: dest is not empty, ELOOP: a symlink).
 */
int	store_backup(struct store_backup *, char **cause);
/* backup_workspace.c: the manifest, the copy, backup-info. */
int	backup_workspace(struct store_backup *, int root_fd, int dest_fd,
	    int dest_state_fd, char **cause);

/* ---- taskfile.c: TASK and REPORT files in the FCoP workspace ---------- */

#define TASKFILE_TIME_BYTES	32	/* "2026-12-02T12:00:00.123Z" and NUL */

/* "TASK-20261202-007-PM-to-DEV" or "REPORT-..." */
void	taskfile_format_id(enum subtab_kind, uint32_t date, uint32_t seq,
	    const char *sender, size_t sender_length, const char *recipient,
	    size_t recipient_length, char *out, size_t out_size);
/* "_lifecycle/inbox/<id>.md" or "reports/<id>.md" */
void	taskfile_format_path(enum subtab_kind, const char *id, char *out,
	    size_t out_size);
void	taskfile_format_time(int64_t ms, char out[TASKFILE_TIME_BYTES]);
int	taskfile_parse_time(const char *, int64_t *ms);
uint32_t taskfile_date_of(int64_t ms);	/* UTC YYYYMMDD */

struct taskfile_task {
	const char		*task_id;
	const struct idem_task	*task;		/* normalized */
	const char		*created_at;
	const char		*client_submission_id;	/* NULL: legacy */
	const char		*request_digest;	/* hex; NULL: legacy */
	/*
	 * fcop-create-task-v1 (NULL: write-task-v1): its C7 fields, and no
	 * risk_level, thread_key or depends_on lines (not part of it).
	 */
	const struct idem_fcop_task *fcop;	/* normalized */
};
/* The TASK file's bytes (malloc'd), exactly as SPEC.md shows. */
int	taskfile_render_task(const struct taskfile_task *, char **out,
	    size_t *length);

struct taskfile_report {
	const char		*report_id;
	const char		*task_id;
	const struct idem_report *report;	/* normalized, recipient resolved */
	const char		*created_at;
	const char		*client_submission_id;	/* NULL: none */
	const char		*request_digest;	/* hex; NULL: none */
};
int	taskfile_render_report(const struct taskfile_report *, char **out,
	    size_t *length);

/* Create what is missing of the FCoP topology under the root. */
int	taskfile_make_topology(int root_fd, char **cause);

/*
 * Write data durably as dir/name, never replacing a file: a temporary
 * file created O_EXCL in the same directory, written, fsync'd, renamed
 * to name with RENAME_NOREPLACE (or, where the file system has no such
 * rename, link()ed and unlinked; EEXIST: -1 with errno EEXIST, nothing
 * left behind), and the directory fsync'd.  With task_crash_points, the
 * crash points after_task_file_written and after_task_file_linked fire.
 */
int	taskfile_write_durable(int dir_fd, const char *name, const void *data,
	    size_t length, int task_crash_points, char **cause);
/* The same without the directory fsync (the caller shares one). */
int	taskfile_write_linked(int dir_fd, const char *name, const void *data,
	    size_t length, int task_crash_points, char **cause);
/*
 * Its two halves: a temporary file beside name, written and fsync'd (its
 * name in temp; nothing is left on failure), and its link to name (the
 * crash points fire here; the temporary is gone afterwards, whatever
 * happened).
 */
int	taskfile_write_temp(int dir_fd, const char *name, const void *data,
	    size_t length, char temp[NAME_MAX + 1], char **cause);
int	taskfile_link_temp(int dir_fd, const char *temp, const char *name,
	    int task_crash_points, char **cause);
/* -1 (errno set) if the temporary is still there: the caller says so. */
int	taskfile_drop_temp(int dir_fd, const char *temp);

/*
 * All of the above is one form with the caller's steps between its
 * operations: the temporary created and written; written(); fsync'd
 * and closed; synced(); [after_task_file_written]; linked to name;
 * [after_task_file_linked].  The PostgreSQL store asks for and awaits
 * its lease's grant in the steps (broker/cluster.c, cl_put_file), and
 * fires its own crash points there, since its order differs: the
 * directory fsync is the caller's in every case.
 */
enum taskfile_op {		/* taskfile's own operations, for texts */
	TASKFILE_OP_CREATE,	/* the temporary's open */
	TASKFILE_OP_WRITE,
	TASKFILE_OP_FSYNC,
	TASKFILE_OP_CLOSE,	/* a deferred write error (NFS) */
	TASKFILE_OP_RENAME,
	TASKFILE_OP_LINK
};
#define TASKFILE_CRASH_WRITTEN	0x1	/* after_task_file_written */
#define TASKFILE_CRASH_LINKED	0x2	/* after_task_file_linked */
struct taskfile_steps {
	/* The temporary's name, created O_EXCL (NULL: taskfile's own). */
	const char	*temp;
	/* After the write, before the fsync; 0 or -1 (*cause set). */
	int		(*written)(void *arg, char **cause);
	/*
	 * After the fsync and the close, before the link, called even when
	 * they failed (sync_error: its errno, else 0), since what written()
	 * began may have to be finished; 0 go on (a sync_error then fails
	 * with taskfile's cause), 1 fenced, -1 failed (*cause set).
	 */
	int		(*synced)(void *arg, int sync_error, char **cause);
	/*
	 * The cause of an operation of taskfile's own that failed (errno
	 * set), in the caller's words; NULL: taskfile's.  A cause of the
	 * caller's gets no "temporary left" added.
	 */
	void		(*failed)(void *arg, enum taskfile_op, const char *temp,
			    const char *name, char **cause);
	void		*arg;
	int		 crash_points;	/* TASKFILE_CRASH_WRITTEN | _LINKED */
	/*
	 * linkat, never renameat2: a takeover's removal of the temporary
	 * then fences the link (ENOENT: TASKFILE_FENCED).
	 */
	int		 plain_link;
};
enum taskfile_put {
	TASKFILE_LINKED,	/* in place (the directory not fsync'd) */
	TASKFILE_FENCED,	/* synced() said so, or plain_link's ENOENT */
	TASKFILE_TAKEN,		/* EEXIST: the name is another file's; *cause */
	TASKFILE_FAILED		/* errno, *cause */
};
/*
 * Whatever the outcome but LINKED, the temporary is gone; but one that
 * was there before (steps->temp's create fails, EEXIST) is not ours and
 * stays.
 */
enum taskfile_put taskfile_write_stepped(int dir_fd, const char *name,
	    const void *data, size_t length, const struct taskfile_steps *,
	    char **cause);

/*
 * Where is <id>.md now?  inbox first, then every directory under
 * _lifecycle/, then history/<date>/<id>/ (under the root and under
 * _lifecycle/).  1 and the path relative to root, 0 if nowhere, -1 on error.
 */
int	taskfile_find(int root_fd, const char *id, char *relpath,
	    size_t relpath_size);
/*
 * The path of <id>.md now, if FCoP tools moved it away from recorded
 * (its path in the receipt): 1 and the path, 0 if it is still there or
 * nowhere, -1 on error.  One stat when it did not move.
 */
int	taskfile_current_path(int root_fd, const char *id,
	    const char *recorded, char *relpath, size_t relpath_size);

/* A kind's name prefix: "TASK" or "REPORT". */
const char *taskfile_kind_prefix(enum subtab_kind);
/* "TASK-YYYYMMDD-NNN-..." or "REPORT-...": 1 and its kind, date, number. */
int	taskfile_parse_name(const char *name, enum subtab_kind *,
	    uint32_t *date, uint32_t *seq);

/* fsync the file at relpath, then its directory. */
int	taskfile_sync_path(int root_fd, const char *relpath);

/* Remove temporaries a crash left in dir; start-up only. */
int	taskfile_sweep_temporaries(int dir_fd, unsigned *removed);

/* What idem needs from a TASK or REPORT file found on disk. */
struct taskfile_facts {
	uint8_t		file_digest[IDEM_SHA256_BYTES];
	int		has_front_matter;	/* parsed as idem writes it */
	char		client_submission_id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	int		has_client_submission_id;
	char		request_digest[IDEM_SHA256_HEX_BYTES + 1];
	int		has_request_digest;
	char		created_at[TASKFILE_TIME_BYTES];
	int64_t		created_at_ms;
	int		has_created_at;
	/* TASKFILE_FM_*: what FCoP's reader requires, found valid. */
	unsigned	fcop_fields;
	int		fm_delimited;	/* "---" lines open and close it */
};
#define TASKFILE_FM_PROTOCOL	0x1	/* protocol: "fcop" */
#define TASKFILE_FM_VERSION	0x2	/* version: 1 */
#define TASKFILE_FM_SENDER	0x4	/* a role code */
#define TASKFILE_FM_RECIPIENT	0x8	/* a role code (no slot) */
#define TASKFILE_FM_ALL	0xf
int	taskfile_inspect(int root_fd, const char *relpath,
	    struct taskfile_facts *, char **cause);
/* 1 if the inspected file names this submission id and request digest. */
int	taskfile_facts_belong(const struct taskfile_facts *,
	    const char *client_submission_id, const char *request_digest_hex);

/*
 * The workspace_id of the FCoP 4 declaration ROOT/fcop.json (a regular
 * file, not followed through a symlink): 1 and the id, 0 if there is no
 * declaration or it holds no valid workspace_id (*cause says which), -1
 * on an I/O error.
 */
int	taskfile_workspace_id(int root_fd,
	    char out[IDEM_WORKSPACE_ID_BYTES + 1], const char **cause);

/*
 * Would FCoP's reference library parse this TASK or REPORT file?  NULL
 * if so, else why not: the name against FCoP's grammar (numbers of
 * exactly three digits, or 3..digits with --sequence-digits), and front
 * matter in idem's shape against what FCoP's reader requires.  Front
 * matter in another writer's YAML is not judged (no YAML reader here).
 */
const char *taskfile_fcop_problem(const char *name, unsigned digits,
	    const struct taskfile_facts *);
/* Highest NNN of <TASK|REPORT>-<date>-NNN-* anywhere a file may be; 0 if none. */
int	taskfile_scan_max_seq(int root_fd, enum subtab_kind, uint32_t date,
	    uint32_t *max_seq);
/*
 * The most digits a number of any TASK or REPORT name has, anywhere a
 * file may be (0 if none), and one such name in name (truncated to
 * name_size).  0, or -1 with errno.
 */
int	taskfile_scan_widest(int root_fd, unsigned *digits, char *name,
	    size_t name_size);

/* ---- seqdigits.c: the --sequence-digits the workspace ran with ------- */

/*
 * ROOT/.idem/sequence-digits: 1 and *digits, 0 if none was recorded, -1
 * with *cause (malloc'd) if it cannot be read or is not idem's.
 */
int	seqdigits_read(int root_fd, unsigned *digits, char **cause);
/* Record digits durably, replacing what was there.  0, or -1 with *cause. */
int	seqdigits_record(int root_fd, unsigned digits, char **cause);

/* ---- store.c: what idemd and idemctl both do with the files ----------- */

/* ROOT/.idem/journal in out; -1 with ENAMETOOLONG if it does not fit. */
int	store_journal_dir(const char *root, char *out, size_t out_size);
/*
 * Has a local idemd kept a history on this root (anything in
 * ROOT/.idem/journal, which every broker makes but only the local store
 * writes)?  1 or 0; -1 with errno.
 */
int	store_has_local_history(int root_fd);

/* Why store_load (or store_verify) could not read the state. */
enum store_failure {
	STORE_OK = 0,
	STORE_UNREADABLE,		/* I/O error or out of memory: errno */
	STORE_APPLY_FAILED,		/* the caller's apply returned -1 */
	STORE_CHECKPOINT_CORRUPT,	/* damage, not a read error */
	STORE_JOURNAL_CORRUPT		/* damage, not a read error */
};

/* What store_load read, and what stopped it. */
struct store_loaded {
	uint64_t			checkpoint;	/* its segment; 0: none */
	uint64_t			checkpoint_records;
	/* The journal from the checkpoint's segment on. */
	struct journal_replay_stats	stats;
	enum store_failure		failure;
	/* STORE_JOURNAL_CORRUPT: the offset, if the damage has one. */
	int				has_corrupt_offset;
	uint64_t			corrupt_offset;
};

/*
 * What a broker rebuilds its table from at start-up: the newest
 * checkpoint of dir (a snapshot of the table, without legacy records),
 * then the journal segments from the one it names, each record given to
 * apply (hint, if not NULL, sees records a few ahead).  With seg, its
 * number allocators learn the checkpoint's state before the replay.
 * flags: JOURNAL_REPLAY_READONLY (nothing cut, a torn tail only
 * reported).  While apply sees the checkpoint's records,
 * loaded->stats.at_segment is 0.  -1 with loaded->failure and a cause.
 */
int	store_load(const char *dir, int flags, journal_apply_fn,
	    journal_hint_fn, void *arg, struct shm_segment *seg,
	    struct store_loaded *, char **cause);

/* Where a record is: a journal segment and offset, or the checkpoint. */
struct store_where {
	int		checkpoint;	/* from the checkpoint of segment */
	uint64_t	segment;
	uint64_t	offset;		/* journal only */
};
typedef int (*store_record_fn)(const struct journal_record *,
	    const struct store_where *, void *arg);
/* Every record store_load would apply, read-only, and where it is. */
int	store_records(const char *dir, store_record_fn, void *arg,
	    struct store_loaded *, char **cause);

/* TASK-... or REPORT-... of an entry (effects have none). */
void	store_entry_id(const struct subtab_entry *, char *out,
	    size_t out_size);
/*
 * The client_submission_id in a record's key (a task's key is its id; a
 * report's is its task_id, a newline and the id); NULL for a legacy
 * entry (no key).  It runs to the end of the key_length bytes.
 */
const char *store_key_submission_id(const struct subtab_entry *,
	    const char *key);
/*
 * The receipt of a committed task or report (SPEC.md), rebuilt from its
 * facts: the bytes every broker answers (broker/receipt.c) and the ones
 * idemctl store import records.  NULL when out of memory.
 */
struct json_t;
struct json_t *store_receipt_json(const char *key, size_t key_length,
	    const struct subtab_entry *);
/* A digest as 64 lower-case hex digits and a NUL. */
void	store_digest_hex(const uint8_t digest[IDEM_SHA256_BYTES],
	    char hex[IDEM_DIGEST_HEX_SIZE]);

/* ---- verify.c: do the journal and the workspace agree? (offline) ----- */

/* What a finding is about; the names of doc/idemctl.1 in comments. */
enum store_check {
	STORE_CHECK_NO_JOURNAL,		/* no_journal: idemd never ran here */
	STORE_CHECK_JOURNAL_CORRUPT,	/* journal_corrupt (or checkpoint) */
	STORE_CHECK_TORN_TAIL,		/* torn_tail: cut at start-up */
	STORE_CHECK_NUMBER_REUSED,	/* number_reused */
	STORE_CHECK_INTERMEDIATE,	/* intermediate: reserved/task_created */
	STORE_CHECK_FIND_FAILED,	/* unreadable: looking for a file */
	STORE_CHECK_FILE_UNREADABLE,	/* unreadable: a file */
	STORE_CHECK_DIR_UNREADABLE,	/* unreadable: opening a directory */
	STORE_CHECK_DIR_READ_FAILED,	/* unreadable: reading a directory */
	STORE_CHECK_MISSING,		/* missing: the file is nowhere */
	STORE_CHECK_FILE_DIGEST,	/* file_digest: changed after idem */
	STORE_CHECK_RECORD_IDENTITY,	/* identity: file names another id */
	STORE_CHECK_FILE_IDENTITY,	/* identity: the name, no id */
	STORE_CHECK_NOT_FCOP,		/* not_fcop: FCoP cannot parse it */
	STORE_CHECK_DUPLICATE,		/* duplicate: two files, one name */
	STORE_CHECK_UNKNOWN_SUBMISSION,	/* unknown_submission */
	STORE_CHECK_TASK_ID_MISMATCH,	/* task_id_mismatch */
	STORE_CHECK_FOREIGN,		/* not a problem: another writer's */
	/* The index of committed receipts (index.c). */
	STORE_CHECK_INDEX_MISSING,	/* index_missing: receipts only there */
	STORE_CHECK_INDEX_CORRUPT,	/* index_corrupt: cause */
	STORE_CHECK_INDEX_DISAGREES,	/* index_disagrees: another binding */
	STORE_CHECK_INDEX_LACKS,	/* index_lacks: checkpoint's receipt */
	STORE_CHECK_INDEX_STALE,	/* index_stale: older than checkpoint */
	STORE_CHECK_INDEX_BUSY		/* index_busy: every reader slot taken */
};

/*
 * index_disagrees: the facts in which the index's entry and the
 * journal's (or the checkpoint's) last record of one key differ, as
 * bits.  A tombstone is compared on the facts it keeps only.
 */
#define STORE_FACT_STATE	0x001	/* the journal's: not committed */
#define STORE_FACT_SCHEMA	0x002
#define STORE_FACT_NUMBER	0x004	/* tasks, reports: date, seq */
#define STORE_FACT_REQUEST_DIGEST 0x008
#define STORE_FACT_ATTEMPT	0x010	/* effects from here on */
#define STORE_FACT_RESULT_DIGEST 0x020
#define STORE_FACT_RESULT	0x040	/* its length, or its bytes */
#define STORE_FACT_COMMITTED_AT	0x080
#define STORE_FACT_RECOVERED	0x100
enum store_severity {
	STORE_SEVERITY_ERROR,
	STORE_SEVERITY_WARNING,
	STORE_SEVERITY_UNREADABLE,	/* could not look: not a verdict */
	STORE_SEVERITY_NONE		/* STORE_CHECK_FOREIGN */
};

/* The last record of one key (or one legacy record), as verify holds it. */
struct store_vrecord {
	struct subtab_entry	entry;
	char			key[SUBTAB_MAX_KEY_BYTES + 1];
	char			id[IDEM_MAX_TASK_ID_BYTES + 16];
	uint64_t		segment;	/* checkpoint: its segment */
	uint64_t		offset;
	int			checkpoint;	/* from the checkpoint */
	int			from_index;	/* only the index holds it */
	int			pruned;		/* a tombstone: no file digest */
	int			indexed;	/* the index holds its key */
};
struct index_entry;

/* One finding: which check, and the facts (NULL or 0 where none). */
struct store_problem {
	enum store_check		 check;
	enum store_severity		 severity;
	const struct store_vrecord	*record;	/* the journal's */
	/* The file found; no_journal, torn_tail: the journal's directory. */
	const char			*path;
	const char			*id;		/* TASK-... */
	const char			*other_path;	/* duplicate: the first */
	const char			*other_key;	/* number_reused */
	const char			*key;		/* number_reused: new */
	const char			*client_submission_id;	/* the file's */
	const char			*reason;	/* not_fcop: why */
	const char			*cause;		/* unreadable, corrupt */
	int				 error;		/* errno, or 0 */
	uint64_t			 segment;	/* number_reused, corrupt */
	uint64_t			 offset;
	int				 has_offset;
	uint8_t				 found_digest[IDEM_SHA256_BYTES];
	uint8_t				 recorded_digest[IDEM_SHA256_BYTES];
	/* index_disagrees: the index's entry, and STORE_FACT_* bits. */
	const struct index_entry	*indexed;
	unsigned			 differs;
	/*
	 * index_stale: segment is the newest checkpoint's, receipts its
	 * count of those it left to the index alone, index_checkpoint the
	 * index's meta.checkpoint (0: never written with one).
	 */
	uint64_t			 receipts;
	uint64_t			 index_checkpoint;
};
typedef void (*store_problem_fn)(const struct store_problem *, void *arg);

/* Why verify could not run at all (store_verify returned -1). */
enum store_verify_failure {
	STORE_VERIFY_OK = 0,
	STORE_VERIFY_ROOT_UNREADABLE,	/* errno */
	STORE_VERIFY_NOT_WORKSPACE,	/* no .idem/ directory: see state */
	STORE_VERIFY_JOURNAL_UNREADABLE, /* not damage: cause */
	STORE_VERIFY_NO_MEMORY
};
enum store_state_dir {
	STORE_STATE_DIR_MISSING,
	STORE_STATE_DIR_SYMLINK,
	STORE_STATE_DIR_NOT_DIR
};

struct store_verify {
	/* In. */
	const char		*root;
	unsigned		 sequence_digits;	/* idemd's */
	store_problem_fn	 note;		/* each finding, in order */
	void			*arg;
	/*
	 * Also an idem REPORT file (one naming its client_submission_id)
	 * whose number the state does not record for that submission is
	 * unknown_submission: for a backup's copy, where such a file was
	 * written after the cut (backup_workspace.c).  idemctl verify
	 * leaves it 0.
	 */
	int			 report_keys;
	/* Out. */
	enum store_verify_failure failure;
	enum store_state_dir	 state_dir;	/* STORE_VERIFY_NOT_WORKSPACE */
	int			 error;		/* errno of the failure */
	struct store_loaded	 loaded;
	int			 journal_complete;	/* files checked */
	char			*corrupt;	/* the damage's cause, or NULL */
	unsigned		 errors, warnings, unreadable, foreign;
	unsigned		 submissions, legacy, reports;
	unsigned		 intermediate, present, moved;
	unsigned		 files, files_idem, files_legacy;
	unsigned		 reports_checked, not_fcop;
	uint64_t		 index_entries;	/* every kind */
	uint64_t		 index_only;	/* tasks, reports only there */
	uint64_t		 index_lost;	/* index_missing: how many */
	/* Effects: no file, only the index to agree with. */
	unsigned		 effects;	/* committed (not index-only) */
	uint64_t		 index_effects;	/* compared with a record */
	uint64_t		 index_effects_only;	/* records pruned */
};
/*
 * Offline and read-only, beside a running broker or after a crash: the
 * journal intact, every task or report it records created present (with
 * its digest while idem's path), every TASK file naming a submission the
 * journal's, every TASK and REPORT file one FCoP parses, every receipt
 * of the index (effects' too) the one the checkpoint or the journal
 * records for its key where they hold it.  Findings go to
 * v->note.  0 when it ran (findings or not), -1 with v->failure (and
 * *cause for the journal).  store_verify_free releases v->corrupt.
 */
int	store_verify(struct store_verify *v, char **cause);
void	store_verify_free(struct store_verify *v);

/* ---- nofollow.c: paths below a directory, no symlink followed ------- */

struct stat;
/*
 * The directory holding relpath's last component, opened from at_fd one
 * component at a time with O_NOFOLLOW; that component in last.  -1 with
 * ELOOP if a directory on the way is a symlink, EINVAL for "..".
 */
int	nofollow_parent(int at_fd, const char *relpath, char last[NAME_MAX + 1]);
/* openat of relpath with O_NOFOLLOW|O_CLOEXEC added; ELOOP: a symlink. */
int	nofollow_openat(int at_fd, const char *relpath, int flags, mode_t);
/* A directory ("." is at_fd itself), O_DIRECTORY|O_NOFOLLOW. */
int	nofollow_dir(int at_fd, const char *relpath);
/* lstat: the last component itself, never what it points at. */
int	nofollow_lstat(int at_fd, const char *relpath, struct stat *);
int	nofollow_mkdir(int at_fd, const char *relpath, mode_t);

/* ---- faultenv.c: the variables of fault injection, in any build ------- */

/*
 * The first IDEM_CRASH_* or IDEM_SPAWN_DELAY_MS entry of env ("NAME=..."),
 * its name copied to name; NULL if there is none.
 */
const char *faultenv_find(char *const *env, char *name, size_t name_size);
/* A build without fault injection: -1 and a cause naming the variable. */
int	faultenv_refuse(char *const *env, char **cause);

/* ---- crash.c: fault injection (configure --enable-fault-injection) ---- */

enum crash_point {
	CRASH_AFTER_RESERVE_DURABLE,
	CRASH_AFTER_TASK_FILE_WRITTEN,
	CRASH_AFTER_TASK_FILE_LINKED,
	/* A torn append: the journaler's (IDEM_CRASH_AT only). */
	CRASH_AFTER_TASK_CREATED_DURABLE,
	CRASH_AFTER_COMMIT_DURABLE,
	/* The master's: the whole broker dies (IDEM_CRASH_AT only). */
	CRASH_DURING_CHECKPOINT,	/* half the records written, unsynced */
	CRASH_AFTER_CHECKPOINT_RENAMED,	/* in place, old segments still there */
	/* Effects (broker/effect.c): each record durable, before the reply. */
	CRASH_AFTER_EFFECT_RESERVE_DURABLE,	/* a proceed's reservation */
	CRASH_AFTER_EFFECT_COMMIT_DURABLE,	/* complete applied */
	CRASH_AFTER_EFFECT_RELEASE_DURABLE,	/* complete not_applied */
	CRASH_AFTER_EFFECT_RESOLVE_DURABLE,	/* resolve, any evidence */
	/* The master's: committed entries given to the index, uncommitted. */
	CRASH_DURING_INDEX_WRITE,
	/* The master's: a batch of them durable, the next not committed. */
	CRASH_BETWEEN_INDEX_COMMITS,
	/*
	 * The master's, at a rotation to the segment made ahead: before
	 * the cut and the rename (the old segment live, the new one under
	 * its temporary name), and after both (no record in it yet).
	 */
	CRASH_BEFORE_NEXT_SEGMENT_RENAMED,
	CRASH_AFTER_NEXT_SEGMENT_RENAMED,
	/*
	 * A worker's (IDEM_CRASH_WORKER_AT): its pass appended records and
	 * is about to kick the journaler for them (pending.c, pending_kick),
	 * its replies already written: a lease extension answered before
	 * its record is durable is in the ring, and nobody kicked for it.
	 */
	CRASH_BEFORE_JOURNAL_KICK,
	CRASH_POINT_COUNT
};
#ifdef IDEM_FAULT_INJECTION
/* In the master and in each worker (which logs nothing). */
int	crash_init(struct shm_segment *, pid_t master, char **cause);
void	crash_point(enum crash_point);
/* The point's name, as IDEM_CRASH_AT and IDEM_CRASH_PAUSE_AT spell it. */
const char *crash_point_name(enum crash_point);
/* IDEM_SPAWN_DELAY_MS: in the master, right after forking a worker. */
void	crash_spawn_delay(void);
void	crash_worker_started(void);
/*
 * The journaler flushed iov (n pieces), which ends the journal: with
 * after_task_created_durable armed, a task_created record followed by
 * its commit is torn back to the first and the broker dies.
 */
void	crash_journal_flushed(struct journal *, const struct iovec *, int n);
/*
 * IDEM_CRASH_LINK_EARLY: a file thread, its temporary written, waits
 * (crash_hold) until the loop has seen the reservation durable
 * (crash_release), so that it links early itself.
 */
void	crash_hold(int *released);
void	crash_release(int *released);
/* IDEM_CRASH_WATCH=die-after-read: after a read of the watch's queue. */
void	crash_watch_read(int names);
/*
 * IDEM_CRASH_HOLD_AT=<point>:<fifo>: the first thread of the process to
 * reach point holds there until a test lets it go (crash.c).
 */
void	crash_hold_at(const char *point);
/*
 * IDEM_CRASH_DURABLE_WATCH_US: how long a worker's loop watches for
 * durability (pending.c, pending_watch) instead of its default.
 */
int64_t	crash_durable_watch_us(int64_t default_us);
/*
 * IDEM_CRASH_JOURNAL_LINGER_US: how long the journaling thread looks for
 * the next record after a round (journaler.c, journaler_linger) instead
 * of its default.
 */
int64_t	crash_journal_linger_us(int64_t default_us);
/*
 * IDEM_CRASH_SPIN_MAX_CONNECTIONS: how many connections may be open for
 * the watch and the journaler's linger to run, instead of
 * IDEM_SPIN_MAX_CONNECTIONS (a test's two clients, watched).
 */
uint32_t crash_spin_max_connections(uint32_t default_count);
/*
 * IDEM_CRASH_INDEX_WINDOW: how many puts a checkpoint holds back to give
 * the index in key order (checkpoint.c) instead of its default; 1 gives
 * them after each chunk of the copy, as before key order.
 */
size_t	crash_index_window(size_t default_count);
#else
/* Without fault injection every crash point compiles to nothing. */
#define crash_init(seg, master, cause)	((void)(seg), (void)(cause), 0)
#define crash_point(point)		((void)0)
#define crash_spawn_delay()		((void)0)
#define crash_worker_started()		((void)0)
#define crash_journal_flushed(j, iov, n) ((void)0)
#define crash_hold(released)		((void)0)
#define crash_release(released)		((void)0)
#define crash_watch_read(names)		((void)0)
#define crash_hold_at(point)		((void)0)
#define crash_durable_watch_us(us)	(us)
#define crash_journal_linger_us(us)	(us)
#define crash_spin_max_connections(n)	(n)
#define crash_index_window(n)		(n)
#endif

#endif
