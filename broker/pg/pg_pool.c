/* SPDX-License-Identifier: ISC */
/*
 * pg_pool.c: a worker's store threads on the PostgreSQL store
 * (--store postgresql://..., doc/cluster.md, "Where the code is"): three
 * pools, one for its creations (pg_create.c), one for its effect ops
 * (pg_effect.c), one for its reads (pg_read.c).
 *
 * DESIGN
 *
 * A creation on the store is a handful of steps in series, each a wait:
 * two synchronous PostgreSQL commits and three file-system fsyncs
 * (pg_create.c).  Run one at a time on the worker's loop, they leave the
 * server idle between them and share nothing: PostgreSQL's group commit
 * and the file system's journal can only merge the flushes of creations
 * that wait at the same time.  So a worker runs its creations on up to
 * --store-connections threads, each with its own PostgreSQL connection
 * (whose session is the owner's identity of the rows it claims), each
 * carrying one creation at a time through pg_create.c's steps with
 * libpq's blocking calls.  The loop never waits for them: it hands a
 * job over and goes on serving; a thread that finishes a job (an answer
 * to give, or a wait for a live owner to arm) puts it on the done list
 * and wakes the loop, which runs the job's done callback.
 *
 * The effect ops have a pool of their own, alike and with the same
 * bound (PG_POOL_EFFECT): a creation holds its thread through its
 * fsyncs and its link and through its round's waits (pg_group.c), so
 * with every creation thread held (a stalled file system, a stalled
 * round) an effect op queued behind them would wait for the file
 * system it never touches.  Apart, neither kind waits for the other's
 * threads; a worker has up to --store-connections connections of each
 * kind.
 *
 * The reads (get_submission, diagnose, stats) have a pool of their own
 * too, of one thread (PG_POOL_READ, PG_READ_THREADS): pg_read.c's
 * DESIGN says why.  Its connection is the one the loop kept for them
 * before they left it, so a worker holds what it held.
 *
 * The threads are pool.c's: made on demand, none at start (a worker
 * opens no connection of a kind until its first job of that kind: one
 * that creates nothing has no creation thread); a job goes to the
 * thread of its pool that went idle last, so the connections in use
 * stay those of the busiest moment; past the bound jobs queue in
 * arrival order.  A thread blocks every signal: the loop's libevent
 * handles SIGTERM and SIGHUP; the crash and pause points' SIGKILL and
 * SIGSTOP cannot be blocked and act on the whole process, as before.  A thread's context is its
 * connection, opened by its first job's run and closed when the pool
 * stops; a pool stopped while one of its jobs runs is left to the
 * process's exit (POOL_ABANDON_IF_BUSY).
 *
 * A thread only ever runs a job's run callback and touches nothing of
 * the loop's (connections, events, the pending's reply): what it
 * decides is recorded in the job and acted on by done, on the loop.
 */
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"

/*
 * A thread's context: its own connection, opened by a job, and its own
 * condition variable, made with the thread.  A round run by another
 * thread may signal it after its creation went on (even after this
 * thread left, when the pool drains), so it is destroyed only once
 * every thread of the pool is joined: pool_stop joins them all before
 * it lets any context go.
 */
struct pg_thread {
	struct pgstore		 store;
	int			 store_open;
	pthread_cond_t		 wake;
};

/* This worker's (one per process and kind, made at its first job). */
static struct pool	*pg_pools[PG_POOL_KINDS];
static const char *const pg_pool_names[PG_POOL_KINDS] = {
	[PG_POOL_CREATE] = "creation",
	[PG_POOL_EFFECT] = "effect",
	[PG_POOL_READ] = "read"
};

static struct pg_job *
pg_job_of(struct pool_job *pj)
{
	return (struct pg_job *)((char *)pj -
	    offsetof(struct pg_job, pool));
}

static int
pg_pool_run(struct pool_job *pj, void *ctx)
{
	struct pg_thread	*t = ctx;
	struct pg_job	*job = pg_job_of(pj);

	job->run(job, &t->store, &t->store_open, &t->wake);
	return 0;
}

static void
pg_thread_init(void *ctx, unsigned index, void *arg)
{
	struct pg_thread	*t = ctx;

	(void)index;
	(void)arg;
	/* Its clock is the deadlines' (pg_group.c's group_sleep). */
	pthread_cond_init(&t->wake, NULL);
}

static void
pg_pool_done(struct pool_job *pj)
{
	struct pg_job	*job = pg_job_of(pj);

	job->done(job);
}

static void
pg_thread_fini(void *ctx)
{
	struct pg_thread	*t = ctx;

	if (t->store_open)
		pgstore_close(&t->store);
	pthread_cond_destroy(&t->wake);
}

int
pg_pool_submit(struct event_base *base, enum pg_pool_kind kind,
    unsigned max, struct pg_job *job)
{
	struct pool_config	 config;

	if (pg_pools[kind] == NULL) {
		memset(&config, 0, sizeof config);
		config.max = max < 1 ? 1 : max > PGSTORE_MAX_CONNECTIONS ?
		    PGSTORE_MAX_CONNECTIONS : max;
		config.lifo_idle = 1;
		config.block_signals = 1;
		config.ctx_size = sizeof (struct pg_thread);
		config.ctx_init = pg_thread_init;
		config.ctx_fini = pg_thread_fini;
		if ((pg_pools[kind] = pool_start(base, &config)) == NULL) {
			log_warn("starting the %s threads",
			    pg_pool_names[kind]);
			return -1;
		}
	}
	job->pool.run = pg_pool_run;
	job->pool.done = pg_pool_done;
	if (pool_submit(pg_pools[kind], &job->pool) != 0) {
		log_warn("starting a %s thread", pg_pool_names[kind]);
		return -1;
	}
	return 0;
}

void
pg_pool_stop(void)
{
	int	kind;

	for (kind = 0; kind < PG_POOL_KINDS; kind++) {
		pool_stop(pg_pools[kind], POOL_ABANDON_IF_BUSY);
		pg_pools[kind] = NULL;
	}
}
