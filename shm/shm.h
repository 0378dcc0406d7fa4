/* SPDX-License-Identifier: ISC */
/*
 * shm.h: the POSIX shared-memory segment that idemd's master and workers
 * share: the submission table, task-number allocation, the journal
 * hand-off ring, the worker registry and the counters.
 *
 * DESIGN
 *
 * One segment per root, named from a hash of the root's real path.  The
 * master creates it fresh at start-up (the journal, not the segment, is
 * the durable truth) and fills it by replaying the journal before any
 * worker exists; workers inherit the mapping through fork().
 *
 * Three robust, process-shared mutexes guard it (lock order: table, then
 * allocator; the ring lock is never held with another).  Every lock goes
 * through shm_lock(); a lock whose owner died (EOWNERDEAD) is repaired by
 * its owner module's repair function before it is marked consistent.
 * Writers publish last: they fill a slot, then make it reachable with one
 * store, so a repair has little to guess.
 *
 * No lock is ever held across I/O except alloc_lock, across directory
 * reads: the allocator's scan on a new date; the watch's refresh (every
 * watched directory read, after an overflow, a directory made or moved
 * in, a lost reader: watch.c); and, for the PostgreSQL store's claims,
 * the day's scan per kind after each refresh (seqalloc_disk_max_locked).
 * The last two are rare, but a claim that meets one waits for a whole
 * scan of the workspace.  Per-submission mutual exclusion across
 * workers is a claim stored in the slot (worker index, generation,
 * request token), not a held mutex: a claim is live while the worker's
 * generation in the registry is unchanged, so a dead worker's claims
 * lapse when the master reaps it.
 */
#ifndef IDEM_SHM_H
#define IDEM_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * The sizes the segment's layout is made of.  shm/ includes no header of
 * the protocol: these are its own, and broker/store/names.c asserts that
 * each equals the protocol.h limit it stands for.
 */
#define SHM_MAX_WORKERS			64	/* IDEM_MAX_WORKERS */
#define SHM_SHA256_BYTES		32	/* SHM_SHA256_BYTES */
#define SHM_MAX_ROLE_BYTES		16	/* IDEM_MAX_ROLE_BYTES */
#define SHM_MAX_RECIPIENT_BYTES		33	/* IDEM_MAX_RECIPIENT_BYTES */
#define SHM_MAX_EFFECT_KIND_BYTES	128	/* IDEM_MAX_EFFECT_KIND_BYTES */
#define SHM_MAX_SUBMISSION_ID_BYTES	200	/* IDEM_MAX_SUBMISSION_ID_BYTES */

#define SHM_CACHELINE_BYTES	64
#define SHM_MAGIC		0x4d48534d45444931ULL	/* "1IDEMSHM" */
#define SHM_LAYOUT_VERSION	14
/* Average key bytes reserved per slot in the key heap; see doc/architecture.md. */
#define SHM_HEAP_BYTES_PER_SLOT	56
/*
 * The result arena (effects' committed results) and the receipt store
 * (the retry fast path's replies) are rings, caches of what the index
 * and the full path also answer: sized from the capacity, bytes per
 * slot within a floor and a ceiling (--result-bytes overrides the
 * arena's).  IDEM_RESULT_ARENA_BYTES_PER_SLOT and its bounds.
 */
#define SHM_ARENA_BYTES_PER_SLOT	8
#define SHM_ARENA_MIN_BYTES		(4ULL * 1024 * 1024)
#define SHM_ARENA_MAX_BYTES		(64ULL * 1024 * 1024)
#define SHM_RECEIPT_BYTES_PER_SLOT	8
#define SHM_RECEIPT_STORE_MIN_BYTES	(64ULL * 1024)
#define SHM_RECEIPT_STORE_MAX_BYTES	(128ULL * 1024 * 1024)
/* The largest reply the receipt store keeps. */
#define SHM_RECEIPT_MAX_BYTES		4096
/* Each record of either ring starts with 16 bytes: position, slot, length. */
#define SHM_RING_RECORD_HEADER_BYTES	16
/* The largest result the ledger accepts (IDEM_MAX_EFFECT_RESULT_BYTES). */
#define SHM_MAX_RESULT_BYTES		(64 * 1024)
/*
 * The smallest result arena: one record of the largest result (a
 * multiple of 8, as the rings' records are).  A smaller one would
 * accept results it can never hold.
 */
#define SHM_ARENA_LEAST_BYTES	\
	(SHM_RING_RECORD_HEADER_BYTES + SHM_MAX_RESULT_BYTES)
/*
 * Slots at most: the key heap (SHM_HEAP_BYTES_PER_SLOT each) must stay
 * under 4 GiB, the reach of a slot's 32-bit key_offset.
 */
#define SHM_MAX_CAPACITY		(1U << 26)
#define SHM_RING_BYTES		(8 * 1024 * 1024)
/*
 * Entries of the peer table (peers.c): one per (peer pid or uid, worker)
 * with connections open; a power of two.  Past it, connections are
 * refused (retryable); at the default --max-connections it holds every
 * peer twice over.
 */
#define SHM_PEER_SLOTS		16384
/*
 * A report's key is its task_id, a newline and the submission id; an
 * effect's is its effect_kind, SUBTAB_EFFECT_SEPARATOR and the
 * submission id (the separator is in neither, so the two never meet).
 */
#define SUBTAB_EFFECT_SEPARATOR	'\x1f'
#define SUBTAB_MAX_KEY_BYTES	\
	(SHM_MAX_EFFECT_KIND_BYTES + 1 + SHM_MAX_SUBMISSION_ID_BYTES)

#define SUBTAB_NOT_JOURNALED	UINT64_MAX	/* slot.journal_end */

enum subtab_kind {
	SUBTAB_KIND_TASK = 1,
	SUBTAB_KIND_REPORT = 2,
	SUBTAB_KIND_EFFECT = 3		/* a side effect the caller performs */
};
/* The kinds that take numbers (the allocator's, by kind - 1). */
#define SUBTAB_KIND_COUNT 2

/*
 * Tasks and reports go reserved -> task_created -> committed.  Effects
 * go reserved (a lease, fence N) -> committed, or -> released (the
 * caller said not_applied: the next begin proceeds with attempt N+1),
 * or -> outcome_unknown (stored only when effect_resolve says unknown;
 * a reserved effect whose lease has expired is outcome_unknown too, by
 * derivation, never by a record).
 */
enum subtab_state {
	SUBTAB_EMPTY = 0,
	SUBTAB_RESERVED = 1,
	SUBTAB_TASK_CREATED = 2,
	SUBTAB_COMMITTED = 3,
	SUBTAB_RELEASED = 4,		/* effects */
	SUBTAB_OUTCOME_UNKNOWN = 5	/* effects */
};
#define SUBTAB_STATE_COUNT 6

enum subtab_schema {
	SUBTAB_SCHEMA_NONE = 0,		/* legacy: no digest */
	SUBTAB_SCHEMA_WRITE_TASK_V1 = 1,
	SUBTAB_SCHEMA_WRITE_REPORT_V1 = 2,
	SUBTAB_SCHEMA_FCOP_CREATE_TASK_V1 = 3,	/* FCoP 4.0's C7 digest */
	/* Effects; far from the others, which may grow. */
	SUBTAB_SCHEMA_GENERIC_JSON_V1 = 16
};

/* subtab_entry.effect_flags */
#define SUBTAB_EFFECT_RECOVERED	0x01	/* committed by effect_resolve */

/*
 * The durable facts about one submission: what a journal record carries.
 * An effect uses the same 144 bytes with other names for the fields a
 * TASK file needs (the anonymous unions): attempt and result_length for
 * date and seq, its lease, fence and result for the roles, and
 * file_digest holds the SHA-256 of its result once committed.
 */
struct subtab_entry {
	uint8_t		kind;		/* enum subtab_kind */
	uint8_t		state;		/* enum subtab_state */
	uint8_t		schema;		/* enum subtab_schema */
	uint8_t		sender_length;
	uint8_t		recipient_length;
	uint8_t		effect_flags;	/* effects: SUBTAB_EFFECT_* */
	uint16_t	key_length;
	union {
		struct {
			uint32_t date;	/* YYYYMMDD, UTC, of the reservation */
			uint32_t seq;	/* number within that date */
		};
		struct {
			uint32_t attempt;	/* 1, 2, ...: proceeds issued */
			uint32_t result_length;	/* bytes in the arena */
		};
	};
	uint8_t		request_digest[SHM_SHA256_BYTES];
	uint8_t		file_digest[SHM_SHA256_BYTES];	/* from task_created on */
	union {
		struct {
			char	sender[SHM_MAX_ROLE_BYTES];	/* not NUL-terminated */
			/* The whole recipient of the name, slot included (DEV.D1). */
			char	recipient[SHM_MAX_RECIPIENT_BYTES];
		};
		struct {
			uint64_t fence;		/* the latest fence's nonce */
			int64_t	 lease_expires_ms;	/* wall clock */
			/* Where the result is in the arena (memory only). */
			uint64_t result_offset;
			uint64_t effect_unused;
		};
	};
	int64_t		reserved_at_ms;
	int64_t		updated_at_ms;
	int64_t		created_at_ms;	/* the file's created_at; effects: committed_at */
	uint32_t	peer_uid;	/* audit: who reserved it (SO_PEERCRED) */
	uint32_t	peer_pid;
};

/* Who holds a submission: one request of one worker generation. */
struct subtab_claim {
	uint32_t	worker;		/* registry index + 1; 0: unclaimed */
	uint32_t	generation;
	uint32_t	token;
};

struct shm_lock {
	pthread_mutex_t	mutex;
} __attribute__((aligned(SHM_CACHELINE_BYTES)));

/* One worker's registry slot, one cache line. */
struct shm_worker {
	_Atomic uint32_t	generation;	/* bumped by the master at each (re)start */
	_Atomic int32_t		pid;		/* 0: no live worker */
	_Atomic uint64_t	requests;
	_Atomic uint32_t	connections;	/* open: given back if it dies */
	_Atomic uint32_t	carriers[2];	/* by phase (journaler.c): zeroed if it dies */
	/*
	 * Requests parked on this worker's loop for durability or ring
	 * room (pending.c): after a flush the journaler wakes only the
	 * workers whose count is not 0.  Zeroed if it dies.
	 */
	_Atomic uint32_t	loop_waiters;
	/*
	 * Its loop watches ring_durable instead of sleeping (pending.c,
	 * pending_watch): a flush does not write its wake eventfd then.
	 * Zeroed if it dies.
	 */
	_Atomic uint32_t	watching;
	char			pad[SHM_CACHELINE_BYTES - 36];
} __attribute__((aligned(SHM_CACHELINE_BYTES)));

struct shm_counters {
	_Atomic uint64_t	created;
	_Atomic uint64_t	reused;
	_Atomic uint64_t	conflict;
	_Atomic uint64_t	legacy_created;
	_Atomic uint64_t	errors;
	_Atomic uint64_t	journal_records;
	_Atomic uint64_t	journal_fsyncs;
	_Atomic uint64_t	worker_restarts;
	_Atomic uint64_t	reports_created;
	_Atomic uint64_t	reports_deduplicated;
	/* Effects: begin's answers, and what complete and resolve did. */
	_Atomic uint64_t	effects_proceed;
	_Atomic uint64_t	effects_reused;
	_Atomic uint64_t	effects_in_progress;
	_Atomic uint64_t	effects_outcome_unknown;
	_Atomic uint64_t	effects_committed;
	_Atomic uint64_t	effects_released;
	_Atomic uint64_t	effects_resolved;
	_Atomic uint64_t	effects_stale_fence;
	_Atomic uint64_t	effects_extended;	/* leases extended */
	_Atomic uint64_t	reused_fast;	/* of reused: by the fast path */
	_Atomic uint64_t	effects_reused_fast;	/* of effects_reused */
	/* Of effects_reused: PostgreSQL's, from the table (pg_effect_cache.c). */
	_Atomic uint64_t	effects_reused_cached;
	/* The index's bytes the workers mapped ahead (history.c), all. */
	_Atomic uint64_t	index_warm_bytes;
};

struct seqalloc_state {
	uint32_t	date;		/* the latest date numbers were taken for */
	uint32_t	next_seq;	/* the next number for that date */
	uint32_t	scanned_date;	/* the disk was scanned for this date */
	uint32_t	sighted_date;	/* the date the sightings bitmap holds */
};

/*
 * The day's highest number on disk, kept for the PostgreSQL store's
 * claims (seqalloc_disk_max_locked): scanned once, then moved on by the
 * watch's sightings, as long as no refresh of the watch came between.
 */
struct seqalloc_disk {
	uint32_t	date;		/* 0: never scanned */
	uint32_t	max_seq;	/* the highest number seen for it */
	uint32_t	refresh;	/* watch_refreshes when it was scanned */
};

/* The segment header.  Everything after it is located by its offsets. */
struct shm_header {
	/* Written last by the initialiser, checked by every attacher. */
	_Atomic uint64_t	magic;
	uint32_t		layout_version;
	uint32_t		header_bytes;
	uint32_t		slot_bytes;
	uint32_t		cacheline_bytes;
	uint32_t		capacity;	/* slots */
	uint32_t		bucket_count;	/* power of two, >= 2 * capacity */
	uint64_t		heap_bytes;
	uint64_t		ring_bytes;
	uint64_t		total_bytes;
	uint64_t		buckets_offset;
	uint64_t		slots_offset;
	uint64_t		heap_offset;
	uint64_t		ring_offset;
	uint64_t		arena_bytes;	/* effects' results */
	uint64_t		arena_offset;
	uint64_t		receipts_bytes;	/* the fast path's replies */
	uint64_t		receipts_offset;
	uint64_t		peers_offset;
	uint64_t		sighted_offset;	/* seqalloc.c: late sightings */
	uint32_t		peer_slots;
	int64_t			started_at_ms;
	uint8_t			hash_key[16];	/* random: SipHash of keys */

	struct shm_lock		table_lock;
	struct shm_lock		alloc_lock;
	struct shm_lock		ring_lock;
	struct shm_lock		peer_lock;	/* peers.c; never held with another */

	/* Table (under table_lock). */
	uint32_t		slots_used;
	uint32_t		state_counts[SUBTAB_STATE_COUNT];
	uint64_t		heap_used;
	/*
	 * The result arena, a ring (arena.c): bytes ever written (head,
	 * under the table lock; atomic for the unlocked readers) and the
	 * oldest byte still intact (tail, moved on before bytes are
	 * overwritten).  arena_scout runs half an arena ahead of the tail
	 * asking for a checkpoint when it passes results not yet indexed.
	 */
	_Atomic uint64_t	arena_head;
	_Atomic uint64_t	arena_tail;
	uint64_t		arena_scout;
	/*
	 * The table is a cache of the index (index.c): a committed slot
	 * durable there (SUBTAB_SLOT_INDEXED) may be evicted for a new
	 * key.  evict_hand is the clock's; evicting is set while a bucket
	 * is removed, so that a repair rebuilds the buckets.
	 */
	uint32_t		indexed_count;
	uint32_t		free_count;	/* evicted slots not refilled */
	uint32_t		evict_hand;
	uint32_t		evicting;
	_Atomic uint64_t	evictions;	/* ever; read unlocked */
	/*
	 * Compacting the key heap (subtab.c: compact_heap) moves one key at
	 * a time through compact_key: while compact_slot (slot + 1) is set,
	 * the key of that slot is whole in compact_key and goes to
	 * compact_to, which a repair finishes.
	 */
	uint32_t		compact_slot;
	uint64_t		compact_to;
	char			compact_key[SUBTAB_MAX_KEY_BYTES];
	/* The table or arena needs the index's puts (an index pass). */
	_Atomic uint32_t	checkpoint_wanted;
	/*
	 * A checkpoint or an index pass is under way (journaler.c): the
	 * results it will index are not asked for again while it runs
	 * (arena_scout).
	 */
	_Atomic uint32_t	checkpoint_running;
	/* The receipt store, a ring like the arena's, every byte reclaimable. */
	_Atomic uint64_t	receipts_head;
	_Atomic uint64_t	receipts_tail;

	/* Allocator (under alloc_lock), by kind - 1. */
	struct seqalloc_state	alloc[SUBTAB_KIND_COUNT];
	uint32_t		alloc_max_seq;	/* set before fork; 0: 999 */
	/*
	 * The inotify watch covers every directory a TASK or REPORT name
	 * can be in (watch.c; under alloc_lock): only then is a sighting
	 * bitmap trusted in place of a walk of the workspace.
	 */
	_Atomic uint32_t	watch_complete;
	/*
	 * A refresh under way, or due: its reader died, or a holder of
	 * alloc_lock died (seqalloc_repair), maybe with events it had
	 * read and not noted: the next reader of the queue refreshes.
	 */
	uint32_t		watch_refreshing;
	/*
	 * Refreshes begun (an overflow, a directory made or moved in): a
	 * number kept from a scan before one is not trusted (under
	 * alloc_lock).  watch_local: every watched directory is on a file
	 * system known to be local (fslocal.c: no NFS, CIFS, FUSE...).
	 */
	uint32_t		watch_refreshes;
	_Atomic uint32_t	watch_local;
	struct seqalloc_disk	disk[SUBTAB_KIND_COUNT];

	/* Journal hand-off (head under ring_lock; the rest atomic). */
	uint64_t		ring_head;	/* bytes ever appended */
	_Atomic uint64_t	ring_taken;	/* bytes the journaler has written out */
	_Atomic uint64_t	ring_durable;	/* bytes known durable */
	_Atomic uint32_t	journal_failed;	/* a write or fsync failed: refuse writes */
	/*
	 * Journal epochs (handoff.c): odd while the journal is failed, even
	 * while healthy; each failure and each reopen moves it on.  What was
	 * appended in a healthy epoch past ring_lost_from is lost if that
	 * epoch ended in a failure; what was appended in a failed epoch is
	 * always lost.
	 */
	_Atomic uint64_t	journal_epoch;
	_Atomic uint64_t	ring_lost_from;	/* ring_durable when the last failure came */
	_Atomic uint32_t	wake_requested;	/* a worker asks for a broadcast wake */
	/*
	 * Moved on by the journaler whenever ring_durable or the epoch
	 * moves (handoff_wake): a futex that file threads wait on, in
	 * any worker, for a record to become durable; sleepers counts
	 * them, so that a flush nobody waits for makes no system call.
	 */
	_Atomic uint32_t	durable_seq;
	_Atomic uint32_t	durable_sleepers;
	/*
	 * The journaler is about to sleep, or sleeps, on its eventfd:
	 * only then does an appender need to kick it (journaler_kick_idle;
	 * a busy one looks at the ring again before it sleeps).
	 */
	_Atomic uint32_t	journaler_idle;
	/*
	 * The journaler's gather (journaler.c): each worker's carriers[phase]
	 * counts its file threads whose reservation is durable and who have
	 * not yet appended their commit (or given up), by the carrier_phase
	 * they entered in; journaler_gathering says the journaler waits for
	 * one phase to drain, and a carrier that leaves while it does kicks.
	 * Only the workers' counts exist, no total: a worker killed between
	 * updating two counters would leave a total wrong for good.
	 */
	_Atomic uint32_t	carrier_phase;
	_Atomic uint32_t	journaler_gathering;

	_Atomic uint32_t	crash_fired;	/* IDEM_CRASH_*: the firing process's token; once per broker */
	_Atomic uint32_t	connections;	/* open, across all workers */
	_Atomic uint32_t	shutting_down;
	/*
	 * Odd while a checkpoint publishes: from before its index commit to
	 * after it marked the slots indexed.  stats reads the index's count
	 * and the table's unindexed count between two even, equal values,
	 * so that no batch is counted twice or not at all.
	 */
	_Atomic uint32_t	index_publishing;
	uint32_t		worker_count;
	struct shm_worker	workers[SHM_MAX_WORKERS];
	struct shm_counters	counters;
};

/*
 * One slot of the table: 208 bytes, packed to 8-byte alignment rather
 * than padded to whole cache lines (256), because the slots are most of
 * the segment (--capacity x 208) and a committed slot, the bulk of a
 * full table, is read far more than written: the neighbours' sharing of
 * a line costs less than 48 bytes a slot.  The slots start on a cache
 * line (slots_offset).
 */
struct subtab_slot {
	_Atomic uint32_t	state;		/* enum subtab_state; EMPTY if unused */
	uint32_t		key_hash;
	uint32_t		key_offset;	/* into the heap (< 4 GiB) */
	uint16_t		key_room;	/* heap bytes at key_offset */
	_Atomic uint8_t		flags;		/* SUBTAB_SLOT_* */
	_Atomic uint8_t		waiters;	/* someone waits for the claim */
	struct subtab_entry	entry;
	struct subtab_claim	claim;
	/*
	 * The fast path's stored reply (receipts_put): its position in the
	 * receipt store, in 8-byte units, modulo 2^32 (the reader takes the
	 * nearest position behind the store's head, and the record's own
	 * header confirms it); 0: none.  Set only on a durably committed
	 * slot, cleared whenever the slot's entry is set otherwise.  Memory
	 * only: empty after a restart.
	 */
	_Atomic uint32_t	fast_receipt;
	/*
	 * Ring position just past the record of the entry's state: the
	 * state is durable once ring_durable reaches it.  0: durable since
	 * start-up (replayed).
	 */
	uint64_t		journal_end;
};
#define SUBTAB_SLOT_BYTES	208
_Static_assert(sizeof(struct subtab_slot) == SUBTAB_SLOT_BYTES,
    "the slot is 208 bytes, no padding: see doc/architecture.md");
/* subtab_slot.flags */
#define SUBTAB_SLOT_INDEXED	0x1	/* committed, durable in the index */
#define SUBTAB_SLOT_USED	0x2	/* looked up since the clock passed */

struct shm_segment {
	struct shm_header	*header;
	size_t			 size;
	char			 name[64];	/* "/idem-<16 hex>" */
	uint32_t		*buckets;
	struct subtab_slot	*slots;
	char			*heap;
	uint8_t			*ring;
	uint8_t			*arena;
	uint8_t			*receipts;
	_Atomic uint64_t	*peers;		/* peers.c */
	uint8_t			*sighted;	/* seqalloc.c, by kind - 1 */
};

/* segment.c */
void	 shm_name_for_root(const char *root_realpath, char name[64]);
int	 shm_create(const char *root_realpath, uint32_t capacity,
	    struct shm_segment *, char **cause);
/* The same with an arena of arena_bytes (0: from the capacity). */
int	 shm_create_sized(const char *root_realpath, uint32_t capacity,
	    uint64_t arena_bytes, struct shm_segment *, char **cause);
int	 shm_attach(const char *root_realpath, struct shm_segment *,
	    char **cause);
void	 shm_detach(struct shm_segment *);
void	 shm_destroy(struct shm_segment *);	/* detach and unlink */
/* The segment's size with the default arena (stats, docs, the bench). */
size_t	 shm_bytes_for_capacity(uint32_t capacity);
/* The default sizes of the two rings for a capacity. */
uint64_t shm_arena_bytes_for_capacity(uint32_t capacity);
uint64_t shm_receipts_bytes_for_capacity(uint32_t capacity);
int64_t	 shm_now_ms(void);

/*
 * prefault.c: a thread mapping the table's pages (buckets, then slots and
 * keys in step) ahead of a replay into a fresh segment, until stopped.
 * Start and stop bracket the replay; a failure to start, or a kernel
 * without MADV_POPULATE_WRITE, only forgoes the saving (error says why).
 */
struct shm_prefault {
	struct shm_segment	*seg;
	pthread_t		 thread;
	atomic_int		 stop;
	_Atomic uint64_t	 bytes;		/* mapped so far */
	int			 error;		/* why it stopped early, or 0 */
	int			 running;
};
int	 shm_prefault_start(struct shm_prefault *, struct shm_segment *);
void	 shm_prefault_stop(struct shm_prefault *);

/* lock.c */
typedef int (*shm_repair_fn)(struct shm_segment *);
int	 shm_lock_init(struct shm_lock *);
int	 shm_lock(struct shm_segment *, struct shm_lock *, shm_repair_fn,
	    const char *what);
void	 shm_unlock(struct shm_lock *);
typedef void (*shm_lock_hook_fn)(const char *what);
void	 shm_lock_set_hook(shm_lock_hook_fn);
/*
 * Where shm/'s warnings go (a lock whose owner died, its repair, what a
 * repair removed): idemd sets its log before it creates the segment.
 * Without a hook they are dropped; the outcomes are still returned.
 */
typedef void (*shm_warn_fn)(const char *message);
void	 shm_set_warn_hook(shm_warn_fn);
void	 shm_warn(const char *, ...) __attribute__((format(printf, 1, 2)));

/* subtab.c */
enum subtab_verdict {
	SUBTAB_INSERTED,	/* new slot, claimed by the caller */
	SUBTAB_CLAIMED,		/* unfinished slot, now claimed by the caller */
	SUBTAB_DONE,		/* committed and matching: nothing to do */
	SUBTAB_MISMATCH,	/* bound to another schema or digest */
	SUBTAB_BUSY,		/* another live request holds it; waiter noted */
	SUBTAB_FULL,		/* no slot or key space left, none evictable */
	SUBTAB_NOT_HERE,	/* not in the table: look in the index, then
				   call again with index_checked */
	SUBTAB_ALLOC_FAILED	/* the number allocator failed (see errno;
				   ERANGE: the date's numbers are used up) */
};
/* Why subtab_acquire answered SUBTAB_FULL. */
enum subtab_full {
	SUBTAB_FULL_NONE = 0,
	SUBTAB_FULL_SLOTS,	/* every slot is in flight or not yet indexed */
	SUBTAB_FULL_KEYS,	/* a slot is there, but the keys in flight or
				   not yet indexed hold the key heap */
	SUBTAB_FULL_MEMORY	/* compacting the key heap found no memory */
};
typedef int (*seqalloc_scan_fn)(enum subtab_kind, uint32_t date,
	    uint32_t *max_seq, void *arg);
struct subtab_acquire {
	/* in */
	const char		*key;
	size_t			 key_length;
	struct subtab_entry	 want;		/* kind, schema, digest, roles, peer */
	struct subtab_claim	 claim;
	uint32_t		 today;		/* YYYYMMDD for a new number */
	seqalloc_scan_fn	 scan;
	void			*scan_arg;
	/*
	 * The index said the key is not there, when evictions (read
	 * before the index) was the table's count: if it still is, the
	 * key was evicted by nobody since, and a miss inserts.
	 */
	int			 index_checked;
	uint64_t		 evictions;
	/* out */
	uint32_t		 slot;
	struct subtab_entry	 found;		/* the slot's entry after the call */
	uint64_t		 found_journal_end;
	enum subtab_full	 full;		/* why SUBTAB_FULL */
};
int	 subtab_repair(struct shm_segment *);
enum subtab_verdict subtab_acquire(struct shm_segment *,
	    struct subtab_acquire *);
/*
 * Append a claimed slot's new state to the journal ring and set it in the
 * slot, as one step under the table lock: the table never lags behind
 * the journal, which is what lets a checkpoint copy it while workers
 * run.  -1 with errno ENOSPC when the ring is full, EPERM without the
 * claim.
 */
int	 subtab_record(struct shm_segment *, uint32_t slot,
	    const struct subtab_claim *, const struct subtab_entry *,
	    const void *record, size_t length, uint64_t *end);
/* Drop a claim; returns 1 if waiters need a wake. */
int	 subtab_release(struct shm_segment *, uint32_t slot,
	    const struct subtab_claim *);
int	 subtab_lookup(struct shm_segment *, const char *key, size_t key_length,
	    struct subtab_entry *, uint32_t *slot);
/*
 * Effects' complete and resolve: claim the slot of key whatever its
 * digest.  SUBTAB_CLAIMED (found, found_journal_end and slot filled),
 * SUBTAB_BUSY (a live claim of another request; waiter noted), or
 * SUBTAB_FULL meaning "no such key" (nothing is inserted).
 */
enum subtab_verdict subtab_claim_key(struct shm_segment *,
	    struct subtab_acquire *);

/*
 * The result arena: effects' committed results, a ring whose bytes are a
 * cache of the index's (a committed slot's result is in its journal
 * record and, once SUBTAB_SLOT_INDEXED, in the index).  put places
 * length bytes for slot, claimed by the caller, who names them in the
 * slot's entry (result_offset) when it records the commit; the oldest
 * bytes are overwritten only if no slot names them or the slot naming
 * them is indexed.  -1 with ENOSPC when the oldest bytes are a result
 * not yet indexed (or of a commit in flight): a checkpoint is asked
 * for, retry later; EINVAL when length can never fit.  The space is
 * reserved (and the oldest reclaimed) under the table lock and the bytes
 * copied outside it.  read copies the bytes at offset into out: -1 if
 * they are no longer there (read them from the index), never torn ones.
 */
int	 arena_put(struct shm_segment *, uint32_t slot, const void *,
	    size_t length, uint64_t *offset);
int	 arena_read(struct shm_segment *, uint64_t offset, size_t length,
	    void *out);
/*
 * 0 if arena_read would find the length bytes at offset now, without
 * copying them (the retry fast path only asks whether they are there).
 */
int	 arena_holds(struct shm_segment *, uint64_t offset, size_t length);
/*
 * The bytes of a result the table only caches (an entry whose truth is
 * kept elsewhere, marked indexed at once: pg_effect_cache.c): owned by
 * no slot, so reclaimable at once, and, since no claim keeps the tail
 * off them meanwhile, copied under the table lock.  A reader that finds
 * them gone asks the store that keeps them.
 */
int	 arena_put_cached(struct shm_segment *, const void *, size_t length,
	    uint64_t *offset);
/* Replay, single-threaded: no lock; arena_own names the owner after. */
#define ARENA_NO_SLOT	UINT32_MAX
int	 arena_put_unlocked(struct shm_segment *, uint32_t slot, const void *,
	    size_t length, uint64_t *offset);
void	 arena_own(struct shm_segment *, uint64_t offset, uint32_t slot);
/* Bytes the arena holds now (head - tail). */
uint64_t arena_used(const struct shm_segment *);
/*
 * The receipt store of the retry fast path (fastpath.c): a ring of
 * stored replies, new ones overwriting the oldest.  put copies bytes
 * for a committed slot holding key and the entry built (the one the
 * reply was made from) and names them in it (EINVAL if it holds
 * another key or another entry under it: evicted meanwhile), unless
 * the slot names some still there (-1 with EEXIST); get copies the
 * bytes a slot names into out (SHM_RECEIPT_MAX_BYTES) and returns 1, or
 * 0 if it names none or they were overwritten: never a torn copy (the
 * reader checks, after the copy, that the store's tail has not passed
 * them: a seqlock).
 */
int	 receipts_put(struct shm_segment *, uint32_t slot, const char *key,
	    size_t key_length, const struct subtab_entry *built, const void *,
	    size_t length);
int	 receipts_get(struct shm_segment *, uint32_t slot, void *out,
	    size_t *length);
/* Bytes the store holds now. */
uint64_t receipts_used(const struct shm_segment *);
/*
 * Start loading the bucket of key into the cache (replay's hint); returns
 * the key's hash, for subtab_apply_hashed.
 */
uint32_t subtab_prefetch(struct shm_segment *, const char *key,
	    size_t key_length);
/* Start-up replay, single-threaded: insert or overwrite by key. */
int	 subtab_apply(struct shm_segment *, const char *key, size_t key_length,
	    const struct subtab_entry *);
/* The same with the hash subtab_prefetch gave for that key. */
int	 subtab_apply_hashed(struct shm_segment *, const char *key,
	    size_t key_length, uint32_t hash, const struct subtab_entry *);
/* The same, saying which slot holds the key now. */
int	 subtab_apply_slot(struct shm_segment *, const char *key,
	    size_t key_length, uint32_t hash, const struct subtab_entry *,
	    uint32_t *slot);
/*
 * A committed entry cached from a store that keeps it (PostgreSQL's
 * rows: pg_create.c, pg_effect_cache.c): put as subtab_apply_slot puts
 * one and, under the same hold of the lock, marked as subtab_mark_indexed
 * marks one, evictable at once: no other process sees it committed and
 * unmarked.  (A worker that dies between the two, inside the hold,
 * leaves the repair an unmarked entry: never evicted until a restart,
 * its retries still answered, from the table.)
 */
int	 subtab_apply_cached(struct shm_segment *, const char *key,
	    size_t key_length, const struct subtab_entry *, uint32_t *slot);
/*
 * The checkpoint made these slots' committed states durable in the
 * index: they may be evicted from now on.  Slots no longer committed
 * are skipped.
 */
void	 subtab_mark_indexed(struct shm_segment *, const uint32_t *slots,
	    size_t count);
/* Start-up: every committed slot is in the index (it covers the checkpoint). */
void	 subtab_mark_all_indexed(struct shm_segment *);
/* Committed slots not yet in the index (0 if the lock failed). */
uint32_t subtab_unindexed(struct shm_segment *);
/* A copy of one slot, for diagnostics. */
struct subtab_row {
	struct subtab_entry	entry;
	int			claimed;	/* by a live request */
	char			key[SUBTAB_MAX_KEY_BYTES + 1];
};
/*
 * Copy the slots of one kind (only the unfinished ones if asked; malloc'd
 * rows, free them) and count that kind's slots by state.
 */
int	 subtab_snapshot(struct shm_segment *, enum subtab_kind,
	    int unfinished_only, struct subtab_row **, size_t *count,
	    uint32_t state_counts[SUBTAB_STATE_COUNT]);
/*
 * Copy up to max slots from index from (entries, keys not NUL-terminated,
 * and each slot's SUBTAB_SLOT_* flags); returns how many.  The lock is
 * held for one call only, so a long export does not stall the workers.
 */
uint32_t subtab_copy_flags(struct shm_segment *, uint32_t from, uint32_t max,
	    struct subtab_entry *, char (*keys)[SUBTAB_MAX_KEY_BYTES],
	    uint32_t *flags);
/* A slot whose state rests on a journal record that was lost. */
struct subtab_unsettled {
	uint32_t		slot;
	uint16_t		key_length;
	char			key[SUBTAB_MAX_KEY_BYTES];
	int			durable;	/* entry: its last durable state */
	struct subtab_entry	entry;
};
int	 subtab_unsettled(struct shm_segment *, uint64_t lost_from,
	    struct subtab_unsettled **, size_t *);
/*
 * Under one hold of the table lock: set each row's slot to its durable
 * state (or to EMPTY, free for its key again, if it has none), then drop
 * whatever the ring holds and end the failed epoch (handoff_reopened).
 * 1: a slot to settle has no row (look again), -1 on error.
 */
int	 subtab_settle(struct shm_segment *, uint64_t lost_from,
	    const struct subtab_unsettled *, size_t);
/* Copy the key of a slot (NUL-terminated); returns its length. */
size_t	 subtab_key(struct shm_segment *, uint32_t slot, char *out,
	    size_t out_size);
int	 subtab_claim_live(struct shm_segment *, const struct subtab_claim *);
/* Is the state one of kind's?  (Decode and apply check records.) */
int	 subtab_state_valid(unsigned kind, unsigned state);

/* seqalloc.c: task and report numbers, never handed out twice. */
#define SEQALLOC_DEFAULT_MAX	999	/* FCoP's three digits */
int	 seqalloc_repair(struct shm_segment *);
/*
 * -1 with errno ERANGE when the date's numbers past alloc_max_seq would
 * be needed: nothing is taken, and the next date starts afresh.
 */
int	 seqalloc_next(struct shm_segment *, enum subtab_kind, uint32_t today,
	    seqalloc_scan_fn, void *arg, uint32_t *date, uint32_t *seq);
/* Replay: a number seen in the journal is used. */
void	 seqalloc_note_used(struct shm_segment *, enum subtab_kind,
	    uint32_t date, uint32_t seq);
/* Serving: a number another writer used on disk (takes the lock). */
void	 seqalloc_note_seen(struct shm_segment *, enum subtab_kind,
	    uint32_t date, uint32_t seq);
/*
 * Late sightings: one bit per number of the allocator's current date, set
 * when a file of a number already past (one idem may have handed out) is
 * seen; so a name idem is about to link is known new to every directory
 * the watch covers unless its bit is set.  Numbers up to
 * 10^IDEM_MAX_SEQUENCE_DIGITS - 1.
 */
#define SEQALLOC_SIGHTED_BITS	1000000
#define SEQALLOC_SIGHTED_BYTES	(SEQALLOC_SIGHTED_BITS / 8)
int	 seqalloc_lock(struct shm_segment *);
void	 seqalloc_unlock(struct shm_segment *);
/* seqalloc_note_seen with alloc_lock held. */
void	 seqalloc_note_seen_locked(struct shm_segment *, enum subtab_kind,
	    uint32_t date, uint32_t seq);
/*
 * alloc_lock held: 0 if no file of number seq of date was seen since the
 * number was past, 1 if one was, or if that is not known (another date).
 */
int	 seqalloc_sighted(struct shm_segment *, enum subtab_kind,
	    uint32_t date, uint32_t seq);
/*
 * alloc_lock held, the watch's queue just read and the watch complete
 * and local: the highest number on disk for date, from the watch's
 * sightings since a scan, or from scan (*scanned set) if no scan of
 * date was made since the last refresh of the watch.  0 or scan's -1.
 */
int	 seqalloc_disk_max_locked(struct shm_segment *, enum subtab_kind,
	    uint32_t date, seqalloc_scan_fn, void *arg, uint32_t *max_seq,
	    int *scanned);

/* handoff.c: the ring of encoded journal records, workers to journaler. */
int	 handoff_repair(struct shm_segment *);
/* Append one encoded record; -1 with errno ENOSPC when the ring is full. */
int	 handoff_append(struct shm_segment *, const void *, size_t,
	    uint64_t *end);
/* Journaler: the bytes appended but not yet taken, as up to two pieces. */
int	 handoff_pending(struct shm_segment *, struct iovec iov[2],
	    uint64_t *end);
/* Is anything appended and not yet taken? */
int	 handoff_has_pending(struct shm_segment *);
void	 handoff_taken(struct shm_segment *, uint64_t end);
void	 handoff_durable(struct shm_segment *, uint64_t end);
uint64_t handoff_epoch(const struct shm_header *);
/* 1: the record ending at end, appended at epoch, is durable; 0: not
 * yet; -1: never (a journal failure dropped it). */
int	 handoff_is_durable(const struct shm_header *, uint64_t end,
	    uint64_t epoch);
/*
 * Block until handoff_is_durable says 1 or -1 for the record, and return
 * that (a futex on durable_seq; any thread of any process).
 */
int	 handoff_wait_durable(struct shm_header *, uint64_t end,
	    uint64_t epoch);
/*
 * The journaler, after ring_durable moved from from to to (or the epoch
 * moved: from == to), wakes those whose records may be concerned.
 */
void	 handoff_wake(struct shm_segment *, uint64_t from, uint64_t to);
/* Every byte appended so far (the ring's head, under its lock); 0 or -1. */
int	 handoff_head(struct shm_segment *, uint64_t *head);
/* The journaling thread: the journal failed (enter an odd epoch). */
void	 handoff_failed(struct shm_segment *);
/* Under the table lock, after a reopen: drop what is pending, heal. */
int	 handoff_reopened(struct shm_segment *);

/* peers.c: connections per peer pid and uid, across all workers. */
enum peers_verdict {
	PEERS_ADMITTED,
	PEERS_PID_LIMIT,	/* the process has max_per_pid open */
	PEERS_UID_LIMIT,	/* the user has max_per_uid open */
	PEERS_FULL,		/* no entry left in the table */
	PEERS_UNCOUNTED		/* the lock is unusable: admitted, not counted */
};
int	 peers_repair(struct shm_segment *);
/* Count one more connection of pid and uid on worker, if both are under. */
enum peers_verdict peers_admit(struct shm_segment *, unsigned worker,
	    uint32_t pid, uint32_t uid, uint32_t max_per_pid,
	    uint32_t max_per_uid);
/* One connection admitted by peers_admit closed. */
void	 peers_release(struct shm_segment *, unsigned worker, uint32_t pid,
	    uint32_t uid);
/* The master, for a dead worker: its connections died with it. */
void	 peers_forget_worker(struct shm_segment *, unsigned worker);
/* Open connections of a pid (by_uid 0) or uid, all workers together. */
uint32_t peers_count(struct shm_segment *, int by_uid, uint32_t id);

/* registry.c: worker slots. */
/* Before fork: a new generation for the index; returns it. */
uint32_t registry_start(struct shm_segment *, unsigned index);
void	 registry_exit(struct shm_segment *, unsigned index);

#endif
