/* SPDX-License-Identifier: ISC */
/*
 * idemd.h: the broker's process structure and the worker side: the
 * options and shared handles every process has (struct idemd), the
 * worker's event loop, connections and parked requests, and the ops.
 */
#ifndef IDEMD_H
#define IDEMD_H

#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <event2/event.h>
#include <event2/bufferevent.h>
#include <jansson.h>

#include "digest.h"
#include "store.h"
#include "fastpath.h"
#include "replytext.h"

/*
 * inboxview.c: whether a task is still where idem put it, from the held
 * inbox (one fstatat) while an inotify queue shows the path unchanged.
 * A worker's, used by its loop's thread alone.
 */
enum inboxview_state {
	INBOXVIEW_OFF,		/* every check walks (zeroed: the master) */
	INBOXVIEW_STALE,	/* arm at the next check */
	INBOXVIEW_ARMED,	/* the path names the held inbox */
	INBOXVIEW_MISMATCH	/* it does not: arm once the names change */
};

struct inboxview {
	enum inboxview_state	 state;
	int			 fd;		/* its own inotify queue */
	int			 root_wd;
	int			 lifecycle_wd;
};

/*
 * Start a worker's view of the inbox below root (held at inbox_fd); armed
 * when first used, off unless both are on a local file system (fslocal.c).
 */
void	inboxview_open(struct inboxview *, int root_fd, int inbox_fd);
/*
 * 1 if recorded (an inbox path) is a regular file there, judged as the
 * root-relative walk would; 0: not known, walk (taskfile_current_path).
 */
int	inboxview_holds(struct inboxview *, int root_fd, int inbox_fd,
	    const char *recorded);
void	inboxview_close(struct inboxview *);

struct backend;

/* What every process of one broker shares: options, segment, handles. */
struct idemd {
	/* Options. */
	const char		*root;		/* as given */
	char			*root_real;	/* realpath */
	char			*socket_path;
	struct stat		 socket_stat;	/* of the file bound there */
	unsigned		 worker_count;
	uint32_t		 capacity;
	int			 inflight_wait_ms;
	int			 max_connections;
	int			 max_connections_per_pid;
	int			 max_connections_per_uid;
	int			 idle_timeout_ms;
	uint64_t		 segment_bytes;	/* rotate and checkpoint past it */
	uint64_t		 result_bytes;	/* the effects' result arena */
	unsigned		 sequence_digits; /* numbers stop at 10^N - 1 */
	unsigned		 socket_mode;
	const char		*socket_group;
	int			 ready_fd;	/* --ready-fd: "ready\n" once serving */
	const char		*log_file;	/* --log-file: reopened on SIGHUP */
	int			 log_syslog;	/* --syslog */
	int			 argc;		/* the command line, which */
	char			**argv;		/* each worker is exec'd with */
	/* argv's --root options, which a worker's command line drops. */
	unsigned char		*argv_root;
	const char		*worker_handles; /* --worker: this is one */
	pid_t			 master_pid;	/* hello names it */
	/*
	 * --store's text, postgresql://... (NULL: local), which
	 * backend_select reads; --host-id, --lease-ms, --store-connections
	 * (doc/cluster.md).  On PostgreSQL this broker's own state (lock,
	 * socket, journal, segment) is under .idem/hosts/<host-id>/.
	 * store_arg is a copy (malloc'd): the command line's has its
	 * password overwritten; a worker is sent it (master_spawn).
	 */
	char			*store_arg;
	const char		*store_file;	/* --store-file */
	const char		*host_id;
	int			 lease_ms;
	/* Per worker: its creation threads, and as many effect threads. */
	unsigned		 store_connections;
	char			*state_dir;	/* ".idem" or .idem/hosts/<id> */
	char			*lock_name;	/* relative to the root */
	char			*journal_name;
	char			*socket_name;
	char			*segment_key;	/* names the shm segment */
	const char		*segment_suffix; /* NULL, or state_dir (pg) */

	/* Handles, opened by the master before forking. */
	int			 root_fd;
	int			 inbox_fd;
	int			 reports_fd;
	int			 lock_fd;
	int			 listen_fd;
	int			 socket_activated;	/* listen_fd is systemd's */
	int			 kick_fd;	/* eventfd: wake the journaler */
	int			 watch_fd;	/* inotify on the stages; -1: none */
	/*
	 * /proc/self/mountinfo, the master's open file shared by every
	 * worker: a mount or unmount makes its poll say so (watch.c);
	 * -1: none.
	 */
	int			 mounts_fd;
	struct inboxview	 inbox_view;	/* a worker's own */
	struct shm_segment	 seg;
	struct journal		 journal;	/* master only */
	/*
	 * The journal's directory, opened once at start-up (master only):
	 * the journaler's reopen, checkpoints and prunes work in it and
	 * never resolve the path again, so a state directory swapped for a
	 * symlink while the broker runs leads nowhere.  -1: not open.
	 */
	int			 journal_dir_fd;
	/* Committed receipts out of the table (each process opens its own). */
	struct index		 index;
	int			 index_ready;
	/*
	 * The newest checkpoint's receipts only the index holds (master
	 * only; start-up reads it, each checkpoint sets it): once not 0,
	 * checkpoints leave committed entries to the index.
	 */
	uint64_t		 index_only;
	/*
	 * The index's directory, opened once without following a symlink
	 * (the master) or inherited (a worker): every process opens the
	 * index through it, so a worker started again long after start-up
	 * opens the index the master writes, not what the path names now.
	 * -1: not open.
	 */
	int			 index_dir_fd;
	/* Where submissions are kept: backend.c's choice from --store. */
	const struct backend	*be;
};

/*
 * What --worker carries after PID,INDEX,GENERATION: the numbers of the
 * handles a worker inherits, in this order (master.c writes them,
 * main.c reads them).
 */
enum worker_handle {
	WORKER_HANDLE_NOTIFY,	/* its end of the socketpair to the master */
	WORKER_HANDLE_LISTEN,
	WORKER_HANDLE_ROOT,
	WORKER_HANDLE_INBOX,
	WORKER_HANDLE_REPORTS,
	WORKER_HANDLE_KICK,
	WORKER_HANDLE_WATCH,	/* -1: no inotify */
	WORKER_HANDLE_INDEX,	/* the index's directory */
	WORKER_HANDLE_WAKE,	/* the eventfd of the master's wake-ups */
	/*
	 * The root's lock, held open (never used) until the worker exits:
	 * a broker started again after the master died must not find the
	 * root free while a worker still listens on its socket.
	 */
	WORKER_HANDLE_LOCK,
	WORKER_HANDLE_MOUNTS,	/* -1: no watch, or no /proc */
	WORKER_HANDLE_COUNT
};

/* history.c: the committed history beyond the table, in the index */
/* 1 and the entry (result into result, if not NULL), 0, -1 (logged). */
int	history_find(struct idemd *, const char *key, size_t key_length,
	    struct index_entry *, uint8_t *result);
/*
 * Open the index at ROOT/.idem/index for this process, through
 * d->index_dir_fd (history_close closes both).
 */
int	history_open(struct idemd *, int flags, char **cause);
void	history_close(struct idemd *);
/*
 * A worker's warm-up: a thread that maps the index's pages into this
 * process ahead of its lookups, so that a cold id costs no page fault;
 * history_warm_stop ends it (before index_close).
 */
void	history_warm_start(struct idemd *);
void	history_warm_stop(void);

/* state.c */
/* The segment filled from the journal, and the journal open to append. */
int	state_open(struct idemd *, char **cause);
void	state_close(struct idemd *);

/* paths.c: where this broker's own files are */
/*
 * This broker's journal directory: the store's (store_journal_dir), or
 * under .idem/hosts/<host-id>/ beside other brokers.  0, or -1 if too long.
 */
int	paths_journal_dir(const struct idemd *, char *out, size_t out_size);
/* The history index's directory: .idem/index, or under the host's. */
int	paths_index_dir(const struct idemd *, char *out, size_t out_size);
/* d->segment_key from root_real and segment_suffix; 0, or -1 (ENOMEM). */
int	paths_segment_key(struct idemd *);
/* taskfile_scan_max_seq on the root (arg: the struct idemd). */
int	paths_scan_max_seq(enum subtab_kind, uint32_t date, uint32_t *max_seq,
	    void *arg);

/* clock.c */
/*
 * Microseconds on CLOCK_MONOTONIC, for deadlines and waits that a change
 * of the wall clock must not stretch or cut (shm_now_ms is the wall
 * clock, for what is stored or shown).
 */
int64_t	clock_monotonic_us(void);
/* A deadline, now + ms on that clock: monoclock_after (monoclock.h). */

/* master.c */
int	master_run(struct idemd *);

/*
 * listener.c: the socket's path checked (nothing answers there), bound;
 * at exit removed if it is still the socket bound (socket_stat).
 */
void	listener_check(struct idemd *);
/* Socket activation: take the listening socket systemd passed, if any. */
void	listener_activated(struct idemd *);
void	listener_open(struct idemd *);
void	listener_remove(struct idemd *);

/* watch.c */
int	watch_start(struct idemd *);
void	watch_read(struct idemd *, int fd);
/*
 * 1 if the TASK or REPORT file name (a number idem handed out) is known
 * to exist in no watched directory: no file of its number was seen late;
 * 0 if not known, and the caller looks (taskfile_find).  Thread-safe.
 */
int	watch_name_new(struct idemd *, const char *name);
/*
 * The day's highest number of kind on disk for the PostgreSQL store's
 * claims (doc/cluster.md, "Claim"): the queue read after the caller
 * asked, then the number kept since a scan (*scanned 0), or scan's
 * (*scanned 1) if none was made since the watch's last refresh.  1 if
 * answered; 0 if the watch cannot vouch (none, not complete, a file
 * system whose other hosts' writers inotify does not see): the caller
 * scans; -1 if scan failed.  Thread-safe.
 */
int	watch_disk_max(struct idemd *, enum subtab_kind, uint32_t date,
	    seqalloc_scan_fn, void *arg, uint32_t *max_seq, int *scanned);

/* journaler.c: the master's journaling thread */
int	journaler_start(struct idemd *, int (*broadcast)(void *, int all),
	    void *arg);
void	journaler_stop(void);
void	journaler_kick(int kick_fd);
void	journaler_kick_idle(struct shm_header *, int kick_fd);
void	journaler_kick_batch(struct shm_header *, int kick_fd);
unsigned journaler_carrier_enter(struct shm_header *, unsigned worker);
void	journaler_carrier_leave(struct shm_header *, unsigned worker,
	    unsigned phase, int kick_fd);

/* loopwake.c: a worker's threads waking its event loop (an eventfd) */
struct loopwake {
	int		 fd;		/* -1: not open */
	struct event	*ev;
	void		(*fired)(void *);	/* in the loop, per wake-up */
	void		*arg;
};
/* 0, or -1 (errno) with nothing left open. */
int	loopwake_open(struct loopwake *, struct event_base *,
	    void (*fired)(void *), void *arg);
/* From any thread, after queueing what fired is to take. */
void	loopwake_post(struct loopwake *);
void	loopwake_close(struct loopwake *);

/*
 * pool.c: a worker's thread pool (fileio.c's file threads, pg_pool.c's
 * creation threads).  run is called on a thread with that thread's
 * context: 0, the job is done and goes back to the loop; 1, it was given
 * away, and its holder hands it back with pool_post.  done is called on
 * the loop.
 */
struct pool;
struct pool_job {
	TAILQ_ENTRY(pool_job)	 entry;
	int			(*run)(struct pool_job *, void *ctx);
	void			(*done)(struct pool_job *);
};
TAILQ_HEAD(pool_jobs, pool_job);
struct pool_config {
	unsigned	 min;		/* lifo_idle: started by pool_start */
	unsigned	 max;		/* at most; then jobs queue */
	/*
	 * 1: a job goes to the thread idle last, threads start on demand
	 * (past min).  0: threads wait on one queue, all max start at once.
	 */
	int		 lifo_idle;
	int		 block_signals;	/* a thread blocks every signal */
	size_t		 ctx_size;	/* per thread, zeroed */
	void		(*ctx_init)(void *ctx, unsigned index, void *arg);
	void		(*ctx_fini)(void *ctx);	/* its thread joined */
	void		*arg;		/* ctx_init's */
};
enum pool_stop {
	POOL_DRAIN,		/* finish every job queued, join, free */
	POOL_ABANDON_IF_BUSY	/* lifo_idle: the same, or nothing if a
				   thread has a job */
};
/* NULL (errno) with nothing left running. */
struct pool	*pool_start(struct event_base *, const struct pool_config *);
/* From the loop; 0, or -1 (errno): no thread runs and none could start. */
int		 pool_submit(struct pool *, struct pool_job *);
/* From any thread: jobs given away are done (one wake-up); jobs emptied. */
void		 pool_post(struct pool *, struct pool_jobs *);
unsigned	 pool_in_flight(struct pool *);
/* From the loop; done callbacks do not run. */
void		 pool_stop(struct pool *, enum pool_stop);

/* fileio.c: a worker's file-writing threads */
#define FILEIO_THREADS	16	/* a carried creation holds one throughout */
#define FILEIO_DIRS	4	/* directories with shared sync rounds */
enum fileio_phase {
	FILEIO_WHOLE,		/* write, link, share a directory sync */
	FILEIO_TEMP,		/* only write and fsync the temporary */
	FILEIO_LINK,		/* link that temporary, share a directory sync */
	FILEIO_CARRY		/* one creation, its temporary to its commit */
};
struct fileio_job {
	enum fileio_phase	 phase;
	char			 temp[NAME_MAX + 1];	/* FILEIO_TEMP's result */
	int			 root_fd;	/* -1: no workspace-wide check */
	/* Judge the name from the watch first (a number just handed out). */
	struct idemd		*watch;
	int			 dir_fd;
	char			 name[IDEM_MAX_TASK_ID_BYTES + 20];
	char			*data;
	size_t			 length;
	int			 crash_points;
	/*
	 * FILEIO_TEMP goes on to FILEIO_LINK in its thread when, its
	 * temporary written, journal says ring_durable has reached
	 * link_after (the reservation's end, stored by the loop after the
	 * append; 0: not known yet) in link_epoch, the journal epoch it was
	 * appended in (stored before link_after): a record a journal
	 * failure dropped is never durable (handoff_is_durable).  journal
	 * NULL: never.
	 */
	struct shm_header	*journal;
	uint64_t		 link_epoch;
	_Atomic uint64_t	 link_after;
	int			 linked_early;	/* out: it did */
	/*
	 * FILEIO_CARRY (fileio.c): the temporary is written, the thread
	 * waits for the reservation (link_after, link_epoch) to be durable,
	 * links, shares the directory sync, calls commit to append the
	 * commit's records (commit_after, commit_epoch; -1: the loop
	 * records them) and waits for those too.  Out: reserve_verdict and
	 * commit_verdict are handoff_wait_durable's; phase is FILEIO_LINK
	 * once the link was tried (result says how it went).
	 */
	int			(*commit)(struct fileio_job *);
	uint64_t		 commit_after;
	uint64_t		 commit_epoch;
	int			 reserve_verdict;
	/*
	 * Counted among the carriers the journaler gathers for
	 * (journaler_carrier_enter) from the reservation's durability to
	 * the commit's append; worker and kick_fd say where to uncount.
	 */
	int			 carrier;
	unsigned		 carrier_phase;
	unsigned		 worker_index;
	int			 kick_fd;
	int			 committed;	/* commit appended its records */
	/* Committed by a directory round: its kicks are the round's. */
	int			 batched;
	/*
	 * Its directory's count of failed rounds read before its link
	 * (fileio.c's rounds: moved by the time its round ends, it fails).
	 */
	uint64_t		 dir_seen;
	int			 commit_verdict;
#ifdef IDEM_FAULT_INJECTION
	int			 crash_released; /* crash_hold's flag */
#endif
	int			 result;	/* 0, or -1 with error and cause */
	int			 error;
	char			*cause;
	void			(*done)(struct fileio_job *);	/* in the loop */
	void			*arg;
	TAILQ_ENTRY(fileio_job)	 entry;		/* fileio.c's rounds */
	struct pool_job		 pool;		/* the threads' handle */
};
struct fileio	*fileio_start(struct event_base *);
void		 fileio_carrier_done(struct fileio_job *);
void		 fileio_submit(struct fileio *, struct fileio_job *);
unsigned	 fileio_in_flight(struct fileio *);
void		 fileio_stop(struct fileio *);

/* worker.c: the loop and its connections */
struct worker;
struct conn;
struct pending;

struct worker {
	struct idemd		*d;
	unsigned		 index;
	uint32_t		 generation;
	uint32_t		 next_token;
	int			 notify_fd;	/* the store's URI; EOF: master gone */
	int			 wake_fd;	/* master's wake-ups (eventfd) */
	int			 wake_reads;	/* no edge-triggered events: read it */
	struct event_base	*base;
	struct event		*listen_ev;
	struct event		*notify_ev;
	struct event		*wake_ev;
	struct event		*local_wake_ev;
	struct event		*term_ev;
	struct event		*hup_ev;	/* SIGHUP: reopen the log */
	struct event		*accept_pause_ev;
	struct timeval		 idle_timeout;	/* --idle-timeout-ms */
	int64_t			 yield_since_ms; /* worker_yield (monotonic ms): 0 none */
	int64_t			 yield_last_ms;
	/*
	 * A yield ran out (the siblings' connections, summed, then): no
	 * more until they move.  -1: none ran out.
	 */
	int64_t			 yield_stalled_at;
	TAILQ_HEAD(, conn)	 conns;
	unsigned		 conn_count;
	TAILQ_HEAD(, pending)	 parked;
	unsigned		 running;	/* requests not yet answered */
	/* Records appended, the journaler not kicked for them yet. */
	unsigned		 unkicked;
	int64_t			 watch_us;	/* pending_watch's bound */
	/* Its gate: the connections open across the broker, at most. */
	uint32_t		 spin_max_connections;
	struct fileio		*io;
	int			 draining;
	/* fastpath.c's: the line's fingerprint, the proceeds' cache. */
	struct fastpath		 fast;
	/*
	 * effect.c's replies written as text: one buffer, for a worker
	 * writes one reply at a time and sends it (or copies it into the
	 * output buffer) before the next line runs.
	 */
	struct replytext	 effect_text;
	/* The local store's fences' random parts (local_effect.c). */
	uint64_t		 fence_pool[64];
	size_t			 fence_left;
	/*
	 * Take a connection's waiting lines (worker.c's conn_process):
	 * conn_answer's way back to the loop after a reply (conn.c).
	 */
	void			(*dispatch)(struct conn *);
};

int	 worker_main(struct idemd *, unsigned index, uint32_t generation,
	    int notify_fd, int wake_fd);
/* Wake the other parked requests of every worker (a claim was released). */
void	 worker_wake_all(struct worker *);
/*
 * conn.c: what a request does with its connection.  A draining worker
 * exits once nothing is connected or running.
 */
void	 worker_maybe_exit(struct worker *);
void	 conn_peer(const struct conn *, uint32_t *uid, uint32_t *pid);
/* Send a reply now (the request did not wait). */
void	 conn_reply(struct conn *, json_t *);
/* Count an op's refused request (counters.errors), then conn_reply it. */
struct request_error;
void	 reply_invalid(struct conn *, json_t *id, struct request_error *);
struct iovec;
void	 conn_send_iov(struct conn *, const struct iovec *, int count);
struct idemd *conn_idemd(struct conn *);
/*
 * The raw line of the request an op handler runs for, while it runs
 * (from conn_dispatch); NULL anywhere else.
 */
const char *conn_line(struct conn *, size_t *length);
/* The dispatched line's result left out of its tree; NULL: none. */
const char *conn_line_result(struct conn *, size_t *length);
struct worker *conn_worker(struct conn *);
/* pending.c's side: the request p runs; its reply, and the next lines. */
void	 conn_start(struct conn *, struct pending *);
void	 conn_answer(struct conn *, json_t *reply);
/* The same with an ok:true reply already written (without its newline). */
void	 conn_answer_text(struct conn *, const char *, size_t);

/* pending.c: parked requests and the journal hand-off */
typedef void (*pending_resume_fn)(struct pending *);

enum pending_wait {
	PENDING_RUNNING,	/* not parked */
	PENDING_DURABLE,	/* for wait_end, appended in epoch, durable */
	PENDING_RING,		/* for room in the hand-off ring */
	PENDING_CLAIM		/* for another request to release a submission */
};

/* One request that waits for something: parked on its worker. */
struct pending {
	struct worker		*worker;
	struct conn		*conn;		/* NULL once the peer is gone */
	json_t			*id;		/* echoed in the reply */
	enum pending_wait	 wait;
	uint64_t		 wait_end;
	uint64_t		 epoch;		/* the journal epoch wait_end is of */
	int			 journal_failed;/* the wait ended in a journal failure */
	int			 timed_out;	/* PENDING_CLAIM past its deadline */
	pending_resume_fn	 resume;
	struct event		*deadline;
	uint8_t			 record[JOURNAL_MAX_RECORD_BYTES];
	uint8_t			*record_big;	/* an effect's record with its result */
	const uint8_t		*record_data;	/* record or record_big */
	size_t			 record_length;
	unsigned		 record_count;	/* records in record[] */
	/* The slot whose new state the record carries (NULL claim: none). */
	uint32_t		 record_slot;
	const struct subtab_claim *record_claim;
	const struct subtab_entry *record_entry;
	/* Resumed once appended, not durable (pending_journal_slot_nowait). */
	int			 record_nowait;
	void			*op;		/* the op's own state */
	void			(*op_free)(void *);
	TAILQ_ENTRY(pending)	 entry;
};

struct pending *pending_new(struct conn *, json_t *id);
struct pending *pending_new_op(struct conn *, json_t *id, size_t op_size,
	    void (*op_free)(void *));
void	 pending_free(struct pending *);
/* Journal a record and park until it is durable, then call resume. */
void	 pending_journal(struct pending *, const struct journal_record *,
	    pending_resume_fn);
/* The same for a claimed slot's new state (subtab_record). */
void	 pending_journal_slot(struct pending *, const struct journal_record *,
	    uint32_t slot, const struct subtab_claim *,
	    const struct subtab_entry *, pending_resume_fn);
/*
 * The same, resumed as soon as the record is in the ring (after a wait
 * for room, if the ring is full), not once it is durable: for a record
 * whose loss in a crash is harmless (an effect's lease extension, SPEC.md
 * "Effects").  The journaler is kicked, so it is flushed with the next
 * group commit; journal_failed only if it could not be appended.
 */
void	 pending_journal_slot_nowait(struct pending *,
	    const struct journal_record *, uint32_t slot,
	    const struct subtab_claim *, const struct subtab_entry *,
	    pending_resume_fn);
/* Two records in one append, so one flush covers both; entry is the last. */
void	 pending_journal_slot_pair(struct pending *,
	    const struct journal_record *, const struct journal_record *,
	    uint32_t slot, const struct subtab_claim *,
	    const struct subtab_entry *, pending_resume_fn);
/*
 * Park until the record ending at end, appended in journal epoch epoch
 * (read before the slot that holds end was), is durable, then call
 * resume; journal_failed says it never will be.
 */
void	 pending_wait_durable(struct pending *, uint64_t end, uint64_t epoch,
	    pending_resume_fn);
/* Park until a claim may have been released (or the deadline passes). */
void	 pending_wait_claim(struct pending *, pending_resume_fn);
/* Reply on the pending's connection (if still there) and free it. */
void	 pending_reply(struct pending *, json_t *);
/* The same with an ok:true reply written as text (replytext.c). */
void	 pending_reply_text(struct pending *, const char *, size_t);
/* Resume every parked request of the worker whose wait is over. */
void	 pending_run_parked(struct worker *);
/* After a pass of the loop: kick the journaler for the records it appended. */
void	 pending_kick(struct worker *);
/* Before the loop sleeps: watch ring_durable a moment (a lone client). */
void	 pending_watch(struct worker *);
/* Free the parked requests of a worker whose loop has ended. */
void	 pending_free_parked(struct worker *);

/* reply.c: the wire's names, and the replies */
/* The wire's error codes, from IDEM_ERROR_CODES: WIRE_INVALID_REQUEST... */
enum wire_error {
#define WIRE_ERROR_ENUM(sym, name)	WIRE_##sym,
	IDEM_ERROR_CODES(WIRE_ERROR_ENUM)
#undef WIRE_ERROR_ENUM
	WIRE_ERROR_COUNT
};
/* error.reason, from IDEM_CONFLICT_REASONS and IDEM_LIMIT_REASONS. */
enum wire_reason {
	REASON_NONE,		/* no "reason" member */
#define WIRE_REASON_ENUM(sym, name)	REASON_##sym,
	IDEM_CONFLICT_REASONS(WIRE_REASON_ENUM)
	IDEM_LIMIT_REASONS(WIRE_REASON_ENUM)
#undef WIRE_REASON_ENUM
	REASON_COUNT
};
/* A reply's "disposition", from IDEM_DISPOSITIONS. */
enum wire_disposition {
	DISPOSITION_NONE,	/* no "disposition" member */
#define WIRE_DISPOSITION_ENUM(sym, name)	DISPOSITION_##sym,
	IDEM_DISPOSITIONS(WIRE_DISPOSITION_ENUM)
#undef WIRE_DISPOSITION_ENUM
	DISPOSITION_COUNT
};
/* The name each of the three stands for on the wire. */
const char *wire_error_name(enum wire_error);
const char *wire_reason_name(enum wire_reason);
const char *wire_disposition_name(enum wire_disposition);
struct request_error;
/* {"ok":ok,"id":id} (id left out when NULL), to be filled by the caller. */
json_t	*reply_new(int ok, json_t *id);
json_t	*reply_error(const struct request_error *, json_t *id);
json_t	*reply_error_simple(json_t *id, enum wire_error, int retryable,
	    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/*
 * table_full (retryable) for a new key of key_length bytes that found no
 * slot or key room, saying which (subtab_acquire's full): the table's
 * slots, or its key heap, held by submissions in flight or not yet in
 * the index (a checkpoint is asked for), or no memory to compact.
 */
json_t	*reply_table_full(json_t *id, enum subtab_full, uint32_t capacity,
	    size_t key_length);
/* A time in a reply: the task files' UTC format, as a JSON string. */
json_t	*reply_time(int64_t ms);

/* request.c: parsing and validation */
struct request_error {
	enum wire_error	 code;
	char		 message[256];
	char		 field[64];
	int		 retryable;
};
int	 request_error_set(struct request_error *, enum wire_error,
	    const char *field, const char *fmt, ...)
	    __attribute__((format(printf, 4, 5)));
/*
 * The id (a scalar, or NULL) and op (a string without NUL) of a request,
 * parsed from line.
 */
int	 request_envelope(json_t *request, const char *line, size_t length,
	    json_t **id, const char **op, struct request_error *);
/* Parse one line: -1 with err for invalid_json / invalid_utf8 / not an object. */
json_t	*request_parse(const char *line, size_t length,
	    struct request_error *);
/*
 * The worker's parse (request_tree.c): it returns request_parse's tree,
 * built from the bytes replyscan checked instead of by jansson's lexer.
 * If the line is an effect_complete whose result is already in compact
 * form, the tree's result is null and *result, *result_length name
 * those bytes in line (else *result is NULL).
 */
json_t	*request_parse_line(const char *line, size_t length,
	    const char **result, size_t *result_length,
	    struct request_error *);
/*
 * request_parse_line's own build, without the fallback: NULL where it
 * would parse the line whole (replyscan refuses it or asks jansson) or
 * runs out of memory (test_request: never for a line replyscan accepts).
 */
json_t	*request_tree_build(const char *line, size_t length,
	    const char **result, size_t *result_length);
/* A string field: 0 absent, 1 present (value, length), -1 err set. */
int	 request_string(json_t *object, const char *key, const char *path,
	    size_t min, size_t max, int nullable, const char **value,
	    size_t *length, struct request_error *);
/* Is value one of the NULL-terminated allowed list? */
int	 request_one_of(const char *value, const char *const *allowed);
/* Reject keys of object not in the NULL-terminated allowed list. */
int	 request_known_keys(json_t *object, const char *path,
	    const char *const *allowed, struct request_error *);
int	 request_submission_id(json_t *request, const char **id,
	    struct request_error *);
void	 request_storage_error(struct request_error *, int error,
	    const char *what);
int	 request_check_line(const char *line, size_t length,
	    struct request_error *);

/*
 * submission.c: a creation, through the backend's create (backend.h);
 * what the backend keeps while it works (the local one's claim and
 * file, the PostgreSQL one's row) is in its room, s->backend_state.
 */
struct submission;
struct backend_create_outcome;
struct submission_ops {
	enum subtab_kind	 kind;
	uint8_t			 schema;	/* enum subtab_schema */
	int			 crash_points;	/* IDEM_CRASH_* fire (tasks) */
	const char		*id_key;	/* "task_id" or "report_id" */
	int			(*dir_fd)(struct idemd *);
	/* The file's bytes for s->name at time now (malloc'd). */
	int			(*render)(struct submission *, int64_t now,
				    char **data, size_t *length);
	/* The success reply; created: this call wrote the file. */
	void			(*answer)(struct pending *, int created);
};
struct submission {
	const struct submission_ops *ops;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 key_length;	/* 0: legacy */
	const char		*submission_id;	/* inside key; NULL: legacy */
	uint8_t			 schema;	/* enum subtab_schema; 0: the op's */
	uint8_t			 digest[IDEM_SHA256_BYTES];
	char			 digest_hex[IDEM_DIGEST_HEX_SIZE];
	struct subtab_entry	 entry;		/* the op fills the roles */
	uint32_t		 slot;		/* the fast path's */
	int			 recovered;
	int			 wrote_file;
	char			 name[IDEM_MAX_TASK_ID_BYTES + 16];
	int			 pruned;	/* answered from a tombstone */
	/*
	 * The backend's room (create_state_size bytes, zeroed) in the
	 * request's allocation, after the op's state (backend.h).
	 */
	void			*backend_state;
	/* The op layer's done function, which the backend's create calls. */
	void			(*done)(struct pending *,
				    const struct backend_create_outcome *);
};
/*
 * A request whose op state (op_size bytes, zeroed; a struct submission
 * first) has the backend's room after it, s->backend_state, and its
 * ops set: NULL if it could not be allocated (answered already).
 */
struct pending *submission_pending_new(struct conn *, json_t *id,
	    size_t op_size, void (*op_free)(void *),
	    const struct submission_ops *);
/* p->op is a struct submission (first member of the op's state). */
void	 submission_start(struct pending *);

/* write_task_check.c: a write_task request, read and checked */
struct write_task {
	struct submission		 sub;		/* first: p->op */
	struct digest_task_normalized	 norm;
	/* fcop-create-task-v1: its normalized task, and norm.task's view. */
	int				 fcop;
	struct digest_fcop_normalized	 fnorm;
	const char			**lists;	/* references, depends_on */
	struct fastpath_hint		 fast;	/* the line's fingerprint */
};
/* Read request into wt (zeroed; root_fd -1: no FCoP workspace check). */
int	 write_task_parse(struct write_task *, json_t *request, int root_fd,
	    struct request_error *);
void	 write_task_free(void *);	/* a struct write_task */
int	 write_task_check(json_t *request, struct request_error *);

/* write_task.c */
void	 op_write_task(struct conn *, json_t *request, json_t *id);

/* receipt.c: a committed task's or report's receipt */
json_t	*receipt_json(const char *key, size_t key_length,
	    const struct subtab_entry *);
/*
 * Where the task recorded at recorded is now: 1 and its path if it was
 * moved, 0 if it is there or nowhere, -1 on error (taskfile_current_path).
 */
int	 current_path_find(struct idemd *, const char *id,
	    const char *recorded, char *path, size_t path_size);
/* Add "current_path" to object if the task moved from recorded. */
void	 current_path_add(struct idemd *, json_t *object, const char *id,
	    const char *recorded);
/* s->name from s->entry's kind, date, number and roles (both backends). */
void	 submission_set_name(struct submission *);

/* write_report_check.c: a write_report request, read and checked */
struct write_report {
	struct submission	 sub;		/* first: p->op */
	char			 task_id[IDEM_MAX_TASK_ID_BYTES + 1];
	struct idem_report	 report;	/* normalized */
	/* Owned copies: the request is freed while the report is written. */
	char			*body;		/* normalized */
	char			 sender[IDEM_MAX_ROLE_BYTES + 1];
	char			 recipient[IDEM_MAX_ROLE_BYTES + 1];
	char			 status[16];
};
int	 write_report_parse(struct write_report *, json_t *request,
	    struct request_error *);
void	 write_report_free(void *);	/* a struct write_report */
int	 write_report_check(json_t *request, struct request_error *);

/* write_report.c */
void	 op_write_report(struct conn *, json_t *request, json_t *id);

/* effect_check.c: an effect op's request, read and checked */
struct backend_effect_outcome;
enum effect_op {
	EFFECT_BEGIN,
	EFFECT_COMPLETE,
	EFFECT_RESOLVE,
	EFFECT_EXTEND
};

enum effect_outcome {
	OUTCOME_APPLIED,
	OUTCOME_NOT_APPLIED,
	OUTCOME_UNKNOWN
};

struct effect {
	enum effect_op		 op;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 key_length;
	char			 kind[IDEM_MAX_EFFECT_KIND_BYTES + 1];
	char			 id[IDEM_MAX_SUBMISSION_ID_BYTES + 1];
	uint8_t			 digest[IDEM_SHA256_BYTES];
	int64_t			 lease_ms;	/* begin and extend */
	/*
	 * extend: the new end is earlier than the one it replaces, so its
	 * record is durable before the answer (effect.c's DESIGN).
	 */
	int			 lease_shortened;
	/* complete, resolve and extend (fence) */
	enum effect_outcome	 outcome;
	uint32_t		 fence_attempt;
	uint64_t		 fence_nonce;
	int			 has_result;
	char			*result;	/* compact JSON; malloc'd */
	size_t			 result_length;
	/*
	 * complete: its raw line while effect_parse reads it (NULL: not
	 * known), whose result may be kept as it stands (result_field).
	 */
	const char		*line;
	size_t			 line_length;
	/* complete: the result request_parse_line left out of the tree. */
	const char		*line_result;
	size_t			 line_result_length;
	char			 source[IDEM_MAX_EVIDENCE_SOURCE_BYTES + 1];
	/* the effect as the backend found it (its own state: backend.h) */
	struct subtab_entry	 entry;
	/* The found state was never journaled (nobody was answered it). */
	int			 found_unrecorded;
	/* Found in the index or a row, not the table: its result here. */
	int			 cold;
	int			 pruned;	/* a tombstone: no result */
	uint8_t			*cold_result;	/* malloc'd */
	/* The backend's outcome goes to done (backend.h's done function). */
	void			(*done)(struct pending *,
				    const struct backend_effect_outcome *);
	/* The local table was full (e->full why): reply_table_full's text. */
	int			 table_full;
	enum subtab_full	 full;
	struct fastpath_hint	 fast;	/* begin: the line's fingerprint */
};
/* Read request into e (zeroed by the caller): 0, or -1 with err. */
int	 effect_parse(enum effect_op, json_t *request, struct effect *,
	    struct request_error *);
void	 effect_free(void *);	/* a struct effect */
int	 effect_begin_check(json_t *request, struct request_error *);
int	 effect_complete_check(json_t *request, struct request_error *);
int	 effect_resolve_check(json_t *request, struct request_error *);
int	 effect_extend_check(json_t *request, struct request_error *);
/* effect_kind's characters (0 or -1 with err). */
int	 effect_kind_valid(const char *kind, size_t length,
	    struct request_error *);

/* effect.c: the effect ledger */
void	 op_effect_begin(struct conn *, json_t *request, json_t *id);
void	 op_effect_complete(struct conn *, json_t *request, json_t *id);
void	 op_effect_resolve(struct conn *, json_t *request, json_t *id);
void	 op_effect_extend(struct conn *, json_t *request, json_t *id);
/* receipt.c: an effect's key into kind and id (NUL-terminated copies). */
int	 effect_key_split(const char *key, size_t key_length, char *kind,
	    size_t kind_size, char *id, size_t id_size);
/* receipt.c: a reserved effect whose lease has not expired at now. */
int	 effect_lease_live(const struct subtab_entry *, int64_t now);
/* The wire state: a reserved effect past its lease is outcome_unknown. */
const char *effect_state_name(const struct subtab_entry *, int64_t now);
/*
 * A committed effect's receipt, the same bytes every time (NULL:
 * unreadable), from its result's bytes wherever they are (the arena,
 * the index, the row); pruned: a tombstone's (no result).
 */
json_t	*effect_receipt_json_from(const char *key, size_t key_length,
	    const struct subtab_entry *, const uint8_t *bytes, int pruned);

/*
 * An effect's facts for get_submission and diagnose (receipt once
 * committed, from result's bytes; NULL: unreadable, shown null;
 * result_pruned: a tombstone's receipt, receipt_pruned).
 */
json_t	*effect_submission_json(const char *key, size_t key_length,
	    const struct subtab_entry *, const uint8_t *result,
	    int result_pruned, int in_flight, int64_t now);
/* optable.c: every op served, one row each */
typedef void (*op_handler_fn)(struct conn *, json_t *request, json_t *id);
typedef int (*op_check_fn)(json_t *request, struct request_error *);
#define OP_WHILE_DRAINING	0x1	/* still served after SIGTERM */
/*
 * Every op served, one row each: X(symbol, handler, check, flags), check
 * NULL for none.  The symbol is the op's in IDEM_OP_NAMES (protocol.h),
 * which holds its name and SPEC.md's order (hello shows this order), so
 * the rows may come in any order and none may be missing (optable.c
 * asserts it).  The worker's table (optable.c) and the stateless checks
 * (request.c, which the fuzzer links without any handler) are both made
 * from this list, so an op is added here and to IDEM_OP_NAMES only.
 */
#define IDEM_OPS(X)							\
	X(HELLO, op_hello, NULL, OP_WHILE_DRAINING)			\
	X(WRITE_TASK, op_write_task, write_task_check, 0)		\
	X(WRITE_REPORT, op_write_report, write_report_check, 0)		\
	X(GET_SUBMISSION, op_get_submission, NULL, 0)			\
	X(DIAGNOSE, op_diagnose, NULL, 0)				\
	X(STATS, op_stats, NULL, 0)					\
	X(EFFECT_BEGIN, op_effect_begin, effect_begin_check, 0)		\
	X(EFFECT_COMPLETE, op_effect_complete, effect_complete_check, 0) \
	X(EFFECT_RESOLVE, op_effect_resolve, effect_resolve_check, 0)	\
	X(EFFECT_EXTEND, op_effect_extend, effect_extend_check, 0)
/* Row IDEM_OPC_x of the table serves op idem_op_names[IDEM_OPC_x]. */
struct op_entry {
	op_handler_fn	 handler;	/* answers, now or once parked */
	op_check_fn	 check;		/* stateless validation; NULL: none */
	int		 flags;
};
/* The row of op name; NULL: unknown_op. */
const struct op_entry *optable_find(const char *name);
/* A JSON array of every op's name, in the table's order. */
json_t	*optable_names(void);

/* ops.c: get_submission, stats */
void	 op_get_submission(struct conn *, json_t *request, json_t *id);
void	 op_stats(struct conn *, json_t *request, json_t *id);
/*
 * A read's request (backend.h): op_size bytes of op state, a struct
 * backend_read first, zeroed (op_free frees the op state), and the
 * backend's room after it; NULL if it could not be allocated (answered
 * already).
 */
struct pending *ops_read_pending_new(struct conn *, json_t *id,
	    size_t op_size, void (*op_free)(void *));
/* A backend's failure as p's answer, its code and words (not counted). */
struct backend_error;
void	 ops_reply_backend_error(struct pending *,
	    const struct backend_error *);
struct backend_row;
/*
 * An effect's facts from a backend's row (get_submission, diagnose);
 * *shown: the entry as shown (the lease on this host's clock).
 */
json_t	*effect_row_json(struct idemd *, const struct backend_row *,
	    int64_t now, struct subtab_entry *shown);

/* diagnose.c */
void	 op_diagnose(struct conn *, json_t *request, json_t *id);

#endif
