/* SPDX-License-Identifier: ISC */
/*
 * pg_backend.h: the PostgreSQL backend (several brokers on one
 * workspace, doc/cluster.md), as backend.c sees it, and the calls its
 * files share.  Only backend.c and broker/pg/ include it.
 */
#ifndef PG_BACKEND_H
#define PG_BACKEND_H

#include <pthread.h>

#include "backend.h"

extern const struct backend pg_backend;

/* pg_create.c: backend.h's create (write_task, write_report). */
void	pg_create(struct pending *, backend_create_done_fn);
struct pgstore;
/*
 * pg_pool.c: a worker's store threads, three pools: its creations' and
 * its effect ops', of at most --store-connections threads each, and its
 * reads' of PG_READ_THREADS, each thread with its own connection, made
 * at its pool's first job: a worker holds up to twice
 * --store-connections connections, and one more.  run is called on a
 * thread with that thread's store (*open: whether it is open; run opens
 * it) and its own condition variable, wake, which lives as long as the
 * thread (pg_group.c signals it after letting its lock go); done,
 * later, on the loop.
 */
struct pg_job {
	struct pool_job	 pool;		/* the threads' handle (pool.c) */
	void	(*run)(struct pg_job *, struct pgstore *, int *open,
		    pthread_cond_t *wake);
	void	(*done)(struct pg_job *);
};
enum pg_pool_kind {
	PG_POOL_CREATE,		/* pg_create.c's creations */
	PG_POOL_EFFECT,		/* pg_effect.c's effect ops */
	PG_POOL_READ,		/* pg_read.c's reads */
	PG_POOL_KINDS
};
/*
 * Hand job to a thread of kind's pool (started on demand); 0, or -1
 * (not taken).
 */
int	 pg_pool_submit(struct event_base *, enum pg_pool_kind, unsigned max,
	    struct pg_job *);
/* The worker's loop has ended: the idle threads joined, connections closed. */
void	 pg_pool_stop(void);
/*
 * A store of this worker's on d's workspace (a store thread's, or the
 * loop's): 0, or -1 and *cause.
 */
int	pg_store_init(struct idemd *, struct pgstore *, char **cause);

/*
 * pg_effect.c: effect_begin, _complete, _extend and _resolve on the
 * row, each backend call one job on a store thread.  An effect's
 * request's room (backend_effect_state) is its job and what the run
 * decided (out, given to done on the loop), and the row as read, kept
 * from effect_claim to effect_record.
 */
enum pg_effect_call {
	PG_EFFECT_BEGIN,
	PG_EFFECT_CLAIM,
	PG_EFFECT_RECORD
};
struct pg_effect {
	struct pg_job	 job;		/* the pool's handle */
	struct pending	*p;
	struct idemd	*d;		/* p's, for the thread */
	struct pgstore	*st;		/* its thread's, while it runs */
	enum pg_effect_call call;
	struct backend_effect_outcome out;	/* the run's, or an internal
						   failure until it ran */
	uint8_t		 found_state;	/* the state the row was read in */
	unsigned	 cluster_reads;
};
void	pg_effect_begin(struct pending *, backend_effect_done_fn);
void	pg_effect_claim(struct pending *, backend_effect_done_fn);
void	pg_effect_record(struct pending *, backend_effect_done_fn);
void	pg_effect_release(struct pending *);
/*
 * pg_effect_cache.c: committed effects in this broker's table and arena
 * (its DESIGN), on the loop.  put: the request's committed row, whole,
 * cached (e->entry then names the arena's copy); begin: 1 and out when
 * the table answers the begin (reused or the mismatch), 0 to ask the
 * row; result: backend.h's effect_result.
 */
void	pg_effect_cache_put(struct pending *);
int	pg_effect_cache_begin(struct pending *,
	    struct backend_effect_outcome *);
int	pg_effect_result(struct pending *, const uint8_t **bytes,
	    int *pruned);

/*
 * pg_read.c: get_submission's row, diagnose's rows, stats' history
 * (backend.h's reads), each read one job on the worker's read thread
 * (PG_POOL_READ; pg_read.c's DESIGN says why a pool of its own, of one
 * thread).  A read's room (struct backend_read's backend_state) is its
 * job, what the run decided (out, given to done on the loop) and what
 * it found: get's row, diagnose's rows.
 */
#define PG_READ_THREADS	1
enum pg_read_call {
	PG_READ_GET,
	PG_READ_DIAGNOSE,
	PG_READ_HISTORY
};
struct pg_read_row;
struct pg_read {
	struct pg_job	 job;		/* the pool's handle */
	struct pending	*p;
	struct idemd	*d;		/* p's, for the thread */
	enum pg_read_call call;
	struct backend_read_outcome out;	/* the run's, or an internal
						   failure until it ran */
	struct backend_row row;		/* get, FOUND: result is receipt */
	uint8_t		*receipt;	/* get: the row's bytes, malloc'd */
	struct pg_read_row *rows;	/* diagnose's, in the order found */
	size_t		 count, size;
	int		 oom;		/* a row could not be kept */
};
void	pg_get(struct pending *, backend_read_done_fn);
void	pg_diagnose(struct pending *, backend_read_done_fn);
void	pg_history(struct pending *, backend_read_done_fn);

#ifdef IDEM_FAULT_INJECTION
/*
 * pg_points.c: a pause or hold point's name (IDEM_CRASH_PAUSE_AT,
 * IDEM_CRASH_HOLD_AT): the first creation, effect op or read of the
 * worker to reach it stops there.
 */
void	pg_pause_point(const char *point);
#else
#define pg_pause_point(point)	((void)0)
#endif

#endif
