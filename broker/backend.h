/* SPDX-License-Identifier: ISC */
/*
 * backend.h: the one seam between the operations and where submissions
 * are kept (OpenSMTPD's queue_backend.c), filled by broker/local/ and
 * broker/pg/, chosen once (backend_select).  A backend reports outcomes
 * and never replies: the operations (write_task.c, write_report.c,
 * submission.c, effect.c, ops.c, diagnose.c) build every reply, the JSON
 * of a row included, from what it reports.
 *
 * Every call that takes a pending (creations, effect ops, reads) ends in
 * exactly one call of its done function, on the worker's loop thread,
 * possibly before the call returns (the local store's reads always do);
 * the caller touches p no more after the call.
 */
#ifndef BACKEND_H
#define BACKEND_H

#include <stdarg.h>
#include <stddef.h>

#include "idemd.h"

/* What a backend could not do, logged once by it; the op layer replies. */
struct backend_error {
	enum wire_error	 code;		/* STORAGE_UNAVAILABLE, INTERNAL,
					   TABLE_FULL, SEQUENCE_EXHAUSTED,
					   IN_PROGRESS */
	int		 retryable;
	char		 message[512];	/* today's texts verbatim; a reply
					   keeps 255 bytes of it (reply.c) */
};
/* printf into err; returns -1 so a backend can `return backend_fail(...)`. */
int	backend_fail(struct backend_error *, enum wire_error, int retryable,
	    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int	backend_vfail(struct backend_error *, enum wire_error, int retryable,
	    const char *fmt, va_list) __attribute__((format(printf, 4, 0)));

/* ---- creations: write_task, write_report (p->op: struct submission) -- */
enum backend_create_result {
	BACKEND_CREATED,	/* committed; this call wrote the file */
	BACKEND_REUSED,		/* committed; s->entry, s->name, s->slot */
	BACKEND_CONFLICT,	/* bound to another request: s->entry,
				   s->name */
	BACKEND_CREATE_FAILED	/* err */
};
struct backend_create_outcome {
	enum backend_create_result	 result;
	enum wire_reason		 reason;	/* CONFLICT */
	const char			*message;	/* CONFLICT: a
							   literal */
	struct backend_error		 err;		/* FAILED */
};
typedef void (*backend_create_done_fn)(struct pending *,
	    const struct backend_create_outcome *);

/* ---- effects (p->op: struct effect) ---------------------------------- */
enum backend_effect_result {
	BACKEND_EFFECT_PROCEED,	/* begin: a new attempt durable in
				   e->entry */
	BACKEND_EFFECT_REUSED,	/* begin: committed with the same digest */
	BACKEND_EFFECT_MISMATCH,/* begin: bound to another digest or
				   schema */
	BACKEND_EFFECT_IN_PROGRESS, /* begin: a live lease */
	BACKEND_EFFECT_UNKNOWN,	/* begin: a lapsed lease, or
				   outcome_unknown */
	BACKEND_EFFECT_FOUND,	/* claim, or a record that lost a race:
				   e->entry as read and durable; the op
				   layer judges it (local: the key stays
				   claimed until release or
				   effect_record) */
	BACKEND_EFFECT_NONE,	/* claim: no effect under the key */
	BACKEND_EFFECT_SETTLED,	/* record: the judge's transition is
				   durable (an extension's that does
				   not shorten the lease: recorded,
				   durable with the next flush) */
	BACKEND_EFFECT_FAILED	/* err */
};
struct backend_effect_outcome {
	enum backend_effect_result	 result;
	struct backend_error		 err;
};
/*
 * A request is one allocation: its op's state (p->op), then the
 * backend's room (create_state_size or effect_state_size bytes,
 * zeroed), at this offset from p->op for an op's state of size bytes.
 */
#define BACKEND_ROOM_OFFSET(size)					\
	(((size) + _Alignof(max_align_t) - 1) &				\
	    ~(_Alignof(max_align_t) - 1))
/* An effect's (struct effect). */
#define BACKEND_EFFECT_OP_SIZE	BACKEND_ROOM_OFFSET(sizeof(struct effect))
static inline void *
backend_effect_state(struct pending *p)
{
	return (char *)p->op + BACKEND_EFFECT_OP_SIZE;
}
typedef void (*backend_effect_done_fn)(struct pending *,
	    const struct backend_effect_outcome *);

/* ---- reads: get_submission, diagnose, stats (p->op: backend_read) --- */

/*
 * One submission or effect as a backend read it; ops.c and diagnose.c
 * make its JSON (one builder per kind, for every backend).  Valid only
 * while the function it is given to runs (it may point into the
 * backend's scratch or the request's room).
 */
struct backend_row {
	const char		*key;	/* a task's id, or "kind 0x1f id" */
	size_t			 key_length;
	const char		*scope;	/* a report's task; "" */
	struct subtab_entry	 entry;
	/*
	 * A committed effect's result bytes (entry.result_length of them);
	 * NULL: unreadable (its receipt is shown null).
	 */
	const uint8_t		*result;
	/*
	 * Local: a committed effect of the table whose bytes the arena
	 * reused and the index keeps as a tombstone (receipt_pruned).
	 */
	int			 result_pruned;
	int			 pruned;	/* a tombstone */
	int			 from_index;	/* local: committed, out of
						   the table (the index's) */
	int			 in_flight;	/* a request holds it; -1:
						   not known (left out) */
	/*
	 * A shared store's row (PostgreSQL): its lease is the server's
	 * judgement, lease_ms_left, put on this host's clock by the op
	 * layer when it builds the JSON (entry.lease_expires_ms = now +
	 * lease_ms_left); epoch, owner (and owner_alive, if not -1) are
	 * shown, and diagnose shows a task in the cluster's layout
	 * (doc/cluster.md, "Diagnostics").
	 */
	int			 has_owner;
	int64_t			 epoch;
	char			 owner[128];	/* a host id (pg.h's bound) */
	int64_t			 lease_ms_left;
	int			 owner_alive;	/* -1: not shown */
};
struct backend_history {	/* stats' "store" member */
	uint64_t	submissions, committed, in_flight, tombstones, effects;
};
/* diagnose's visitor: 0 go on (the backend ignores anything else). */
typedef int (*backend_row_fn)(const struct backend_row *, void *);

enum backend_read_result {
	BACKEND_READ_FOUND,	/* get: row; diagnose, history: read */
	BACKEND_READ_NONE,	/* get: nothing under the key */
	BACKEND_READ_FAILED	/* err (logged by the backend) */
};
struct backend_read_outcome {
	enum backend_read_result	 result;
	const struct backend_row	*row;	/* get, FOUND: valid while
						   done runs */
	uint32_t			 tasks[SUBTAB_STATE_COUNT];
	uint32_t			 effects[SUBTAB_STATE_COUNT];
	struct backend_history		 history;
	struct backend_error		 err;
};
typedef void (*backend_read_done_fn)(struct pending *,
	    const struct backend_read_outcome *);
/*
 * A read's request: the first member of its op's state (p->op), filled
 * by the op layer before the call (the request made by ops.c's
 * ops_read_pending_new); the backend's room (read_state_size bytes,
 * zeroed) is backend_state, after the op's state.
 */
struct backend_read {
	/* get: the submission (SUBTAB_KIND_TASK: key is its id) or the
	   effect (SUBTAB_KIND_EFFECT: "kind 0x1f id") under key. */
	enum subtab_kind	 kind;
	char			 key[SUBTAB_MAX_KEY_BYTES + 1];
	size_t			 key_length;
	/* diagnose: each row, on the loop, before done. */
	backend_row_fn		 each;
	void			*arg;
	void			*backend_state;
	backend_read_done_fn	 done;	/* the backend's to call, once */
};
struct backend {
	const char	*name;		/* "local", "postgresql": logs only */
	unsigned	 flags;
/* No other broker's temporaries can be live: sweep them at start. */
#define BACKEND_SWEEPS_TEMPORARIES	0x1
/*
 * One accept per wake-up (worker.c: worker_accept; every store's workers
 * spread connections, worker_yield).
 */
#define BACKEND_ONE_ACCEPT_A_WAKEUP	0x2
/*
 * A committed effect in this broker's table is answered from it while
 * the arena holds its result: the fast path may answer its retries
 * (fastpath.c).  Local: the table and the arena are the effects' own,
 * which no other broker changes; PostgreSQL: they cache committed rows
 * whole (pg_effect_cache.c), which change only into a tombstone, whose
 * cached body answers on until it leaves (doc/cluster.md, "Effects").
 */
#define BACKEND_EFFECTS_IN_TABLE	0x4
/*
 * Its claims take the day's highest number on disk from the watch
 * (watch_disk_max): the watch says at start-up whether it vouches.
 */
#define BACKEND_CLAIMS_READ_WATCH	0x8
	/* Per-request room after the op's state (BACKEND_ROOM_OFFSET). */
	size_t		 create_state_size;
	size_t		 effect_state_size;
	size_t		 read_state_size;

	/* Whether --store's text names this backend (NULL: no --store). */
	int	(*matches)(const char *arg);

	/*
	 * Start-up, master and worker alike: backend_select calls it once
	 * it chose the backend.  Its options checked, its names under the
	 * root set (state_dir, lock_name, journal_name, socket_name,
	 * segment_suffix); 0, or -1 and *cause (the text main.c dies with).
	 */
	int	(*configure)(struct idemd *, const char *arg, char **cause);
	/* Before the root's lock is taken; after it. */
	int	(*preflight)(struct idemd *, char **cause);
	int	(*locked)(struct idemd *, char **cause);
	/* The worker's loop has ended. */
	void	(*worker_stop)(struct worker *);

	/* A creation: s filled and checked by the op layer. */
	void	(*create)(struct pending *, backend_create_done_fn);

	/* effect_begin: claim and reserve, or say why not. */
	void	(*effect_begin)(struct pending *, backend_effect_done_fn);
	/* effect_complete, _extend, _resolve: the effect's state, to judge. */
	void	(*effect_claim)(struct pending *, backend_effect_done_fn);
	/*
	 * The judge's transition in e->entry (e->result for a commit); for
	 * effect_extend (e->op) the new lease_expires_ms, e->lease_ms from
	 * now, on a live lease of the same fence only (PostgreSQL judges
	 * both again by the server's clock; FOUND if they no longer hold).
	 */
	void	(*effect_record)(struct pending *, backend_effect_done_fn);
	/* A committed effect's result bytes when e is not cold (lazily:
	   local, the arena or the index; PostgreSQL, the copy it took from
	   its cache); 0, or -1 unreadable.  *pruned: a tombstone's. */
	int	(*effect_result)(struct pending *, const uint8_t **bytes,
		    int *pruned);
	/* Drop what the request holds (a table claim); idempotent.  The op
	   layer calls it before every reply. */
	void	(*release)(struct pending *);

	/*
	 * The reads (struct backend_read in p->op), each ending in one
	 * outcome given to done (FAILED: err, logged by the backend).
	 * get: the submission or effect under kind and key: FOUND and
	 * out->row, or NONE.
	 */
	void	(*get)(struct pending *, backend_read_done_fn);
	/*
	 * diagnose: every unfinished effect, then every unfinished
	 * submission, to each (on the loop); then FOUND and the counts per
	 * state of each kind.  FAILED possibly after some rows were given.
	 */
	void	(*diagnose)(struct pending *, backend_read_done_fn);
	/* stats' "store" (out->history); NULL: the member is left out
	   (local).  FAILED: the member is null. */
	void	(*history)(struct pending *, backend_read_done_fn);
};

/*
 * backend.c: d->be from --store's text (NULL: local; postgresql://...),
 * then its configure; 0, or -1 and *cause: why no backend takes the
 * text, or why the chosen one refused its options.
 */
int	backend_select(struct idemd *, const char *arg, char **cause);

#endif
