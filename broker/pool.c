/* SPDX-License-Identifier: ISC */
/*
 * pool.c: a worker's thread pool: threads, a queue, a done list and a
 * wake-up of the loop.  Its users are the file threads (fileio.c) and
 * the store threads of the PostgreSQL store (pg_pool.c: a pool for a
 * worker's creations, another for its effect ops); what a job does is
 * theirs.
 *
 * DESIGN
 *
 * The loop hands a job over (pool_submit) and goes on serving.  Two
 * ways to pick its thread, one per user:
 *
 * lifo_idle (the PostgreSQL pools): a job goes to the thread that went
 * idle last, so that the threads in use (and what they hold, a
 * PostgreSQL connection) stay those of the busiest moment; min threads
 * start at once, another only when none is idle and fewer than max run;
 * past the bound jobs queue in arrival order.
 *
 * Otherwise (fileio.c): all max threads start at once (a carried
 * creation holds one throughout, and none may be missing when they are
 * needed) and wait on one condition for one queue; pool_submit queues
 * the job and wakes one of them.  The threads are alike and a job does
 * not care which runs it, so any thread may take it, the first to come
 * by.
 *
 * Either way a thread that finishes a job takes the next queued one
 * without sleeping.
 *
 * A thread runs the job's run callback with its own context (ctx_size
 * bytes that stay with the thread: a PostgreSQL pool's connection,
 * fileio's thread index) and touches nothing of the loop's.  A run that
 * returns 0 is done: the thread puts the job on the done list and wakes
 * the loop (loopwake.c).  A run that returns 1 has given the job away
 * (fileio's directory rounds): the thread no longer touches it, and
 * whoever has it hands it back later with pool_post, a batch at once
 * with one wake-up.  The loop takes the whole done list under one hold
 * of the lock, counting the jobs out of pool_in_flight in that same
 * hold, and runs each job's done callback, on the loop, never in a
 * thread.  pool_submit signals the thread after its unlock, so that the
 * woken thread does not block on the lock it was signalled under.
 *
 * block_signals: a thread is started with every signal blocked (the
 * PostgreSQL pools: the loop's libevent handles SIGTERM and SIGHUP; the
 * crash and pause points' SIGKILL and SIGSTOP cannot be blocked and act
 * on the whole process).  Without it a thread keeps the mask of the
 * thread that started it (fileio.c's, as it always had).
 *
 * pool_stop(POOL_DRAIN) lets the threads finish every job queued, joins
 * them and frees everything; done callbacks do not run.
 * POOL_ABANDON_IF_BUSY does the same when no job runs, and otherwise
 * returns at once, leaving the pool (and its threads) to the process's
 * exit: the PostgreSQL pools' loop ended because the master is gone,
 * and a creation's or an effect op's thread may be waiting on a
 * statement.
 *
 * Why two ways and not one: the LIFO stack alone served fileio too, but
 * measured slower on a loaded machine (idem-bench create K=8, lower
 * than main in 11 of 13 interleaved pairs, the shared queue in 5 of 13;
 * the same CPU and context switches per creation).  Our reading: the job is bound to one sleeping thread,
 * which must be scheduled on a busy machine, where one queue lets the
 * first thread to come by take it.  So
 * each keeps the dispatch it had; what they share is the rest: the
 * threads and their contexts, the queue, the done list taken by the
 * loop in one hold of the lock, the wake-up, the stop.
 */
#include <sys/queue.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "idemd.h"

struct pool_thread {
	struct pool		*pool;
	pthread_t		 thread;
	pthread_cond_t		 wake;
	struct pool_job		*job;		/* NULL: idle */
	unsigned		 index;
	void			*ctx;		/* config ctx_size bytes */
};

struct pool {
	struct pool_config	 config;
	pthread_mutex_t		 lock;
	struct pool_thread	*threads;	/* config.max */
	unsigned		 count;		/* started */
	unsigned		*idle;		/* a stack of thread indexes */
	unsigned		 idle_count;
	unsigned		 busy;
	unsigned		 in_flight;	/* submitted, not yet taken back */
	struct pool_jobs	 queue;		/* waiting for a thread */
	pthread_cond_t		 work;		/* shared queue: a job, or stop */
	struct pool_jobs	 done;		/* for the loop */
	struct loopwake		 wake;
	int			 stop;
	char			*ctx;		/* every thread's context */
};

static void *
pool_thread_main(void *arg)
{
	struct pool_thread	*t = arg;
	struct pool		*pool = t->pool;
	struct pool_job		*job;
	int			 kept;

	pthread_mutex_lock(&pool->lock);
	for (;;) {
		if (pool->config.lifo_idle) {
			while (t->job == NULL && !pool->stop)
				pthread_cond_wait(&t->wake, &pool->lock);
			job = t->job;
		} else {
			while (!pool->stop && TAILQ_EMPTY(&pool->queue))
				pthread_cond_wait(&pool->work, &pool->lock);
			if ((job = TAILQ_FIRST(&pool->queue)) != NULL)
				TAILQ_REMOVE(&pool->queue, job, entry);
		}
		if (job == NULL)
			break;	/* stopping, and nothing left */
		pthread_mutex_unlock(&pool->lock);
		kept = job->run(job, t->ctx);
		pthread_mutex_lock(&pool->lock);
		/*
		 * Not touched again: the loop may free it once it is done,
		 * and a kept job is its holder's, who posts it.
		 */
		if (!kept)
			TAILQ_INSERT_TAIL(&pool->done, job, entry);
		if (!pool->config.lifo_idle)
			;
		else if ((t->job = TAILQ_FIRST(&pool->queue)) != NULL)
			TAILQ_REMOVE(&pool->queue, t->job, entry);
		else {
			pool->busy--;
			pool->idle[pool->idle_count++] = t->index;
		}
		if (!kept)
			loopwake_post(&pool->wake);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

/* In the loop: every finished job's done, in the order they finished. */
static void
pool_finished(void *arg)
{
	struct pool		*pool = arg;
	struct pool_jobs	 done;
	struct pool_job		*job;

	/* All at once: one hold of the lock the threads contend for. */
	TAILQ_INIT(&done);
	pthread_mutex_lock(&pool->lock);
	TAILQ_CONCAT(&done, &pool->done, entry);
	TAILQ_FOREACH(job, &done, entry)
		pool->in_flight--;
	pthread_mutex_unlock(&pool->lock);
	while ((job = TAILQ_FIRST(&done)) != NULL) {
		TAILQ_REMOVE(&done, job, entry);
		job->done(job);
	}
}

/*
 * Under the lock: a new thread, carrying job, or idle (job NULL); 0, or
 * -1 (errno).
 */
static int
pool_thread_start(struct pool *pool, struct pool_job *job)
{
	struct pool_thread	*t = &pool->threads[pool->count];
	sigset_t		 all, old;
	int			 rc;

	memset(t, 0, sizeof *t);
	t->pool = pool;
	t->job = job;
	t->index = pool->count;
	t->ctx = pool->ctx + (size_t)t->index * pool->config.ctx_size;
	if (pool->config.ctx_init != NULL)
		pool->config.ctx_init(t->ctx, t->index, pool->config.arg);
	pthread_cond_init(&t->wake, NULL);
	if (pool->config.block_signals) {
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
	}
	rc = pthread_create(&t->thread, NULL, pool_thread_main, t);
	if (pool->config.block_signals)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		/* The next start inits this slot again: undo ctx_init's. */
		pthread_cond_destroy(&t->wake);
		if (pool->config.ctx_fini != NULL)
			pool->config.ctx_fini(t->ctx);
		errno = rc;
		return -1;
	}
	pool->count++;
	if (job != NULL)
		pool->busy++;
	else if (pool->config.lifo_idle)
		pool->idle[pool->idle_count++] = t->index;
	return 0;
}

struct pool *
pool_start(struct event_base *base, const struct pool_config *config)
{
	struct pool	*pool;
	size_t		 max = config->max;
	int		 error;

	if ((pool = calloc(1, sizeof *pool)) == NULL)
		return NULL;
	pool->config = *config;
	pool->wake.fd = -1;
	TAILQ_INIT(&pool->queue);
	TAILQ_INIT(&pool->done);
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->work, NULL);
	pool->threads = calloc(max, sizeof *pool->threads);
	pool->idle = calloc(max, sizeof *pool->idle);
	pool->ctx = calloc(max, config->ctx_size > 0 ? config->ctx_size : 1);
	if (pool->threads == NULL || pool->idle == NULL || pool->ctx == NULL)
		goto fail;
	if (loopwake_open(&pool->wake, base, pool_finished, pool) != 0)
		goto fail;
	pthread_mutex_lock(&pool->lock);
	while (pool->count < (config->lifo_idle ? config->min : max)) {
		if (pool_thread_start(pool, NULL) != 0) {
			pthread_mutex_unlock(&pool->lock);
			goto fail;
		}
	}
	pthread_mutex_unlock(&pool->lock);
	return pool;
fail:
	error = errno;
	pool_stop(pool, POOL_DRAIN);
	errno = error;
	return NULL;
}

int
pool_submit(struct pool *pool, struct pool_job *job)
{
	struct pool_thread	*t = NULL;
	int			 rc = 0;

	pthread_mutex_lock(&pool->lock);
	if (!pool->config.lifo_idle)
		TAILQ_INSERT_TAIL(&pool->queue, job, entry);
	else if (pool->idle_count > 0) {
		t = &pool->threads[pool->idle[--pool->idle_count]];
		t->job = job;
		pool->busy++;
	} else if (pool->count < pool->config.max &&
	    pool_thread_start(pool, job) == 0)
		;
	else if (pool->count > 0)
		TAILQ_INSERT_TAIL(&pool->queue, job, entry);
	else
		rc = -1;	/* errno: pool_thread_start's */
	if (rc == 0)
		pool->in_flight++;
	pthread_mutex_unlock(&pool->lock);
	/* After the unlock: the thread it wakes does not block on it. */
	if (t != NULL)
		pthread_cond_signal(&t->wake);
	else if (!pool->config.lifo_idle)
		pthread_cond_signal(&pool->work);
	return rc;
}

void
pool_post(struct pool *pool, struct pool_jobs *jobs)
{
	if (TAILQ_EMPTY(jobs))
		return;
	pthread_mutex_lock(&pool->lock);
	TAILQ_CONCAT(&pool->done, jobs, entry);
	pthread_mutex_unlock(&pool->lock);
	loopwake_post(&pool->wake);
}

unsigned
pool_in_flight(struct pool *pool)
{
	unsigned	n;

	pthread_mutex_lock(&pool->lock);
	n = pool->in_flight;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

void
pool_stop(struct pool *pool, enum pool_stop how)
{
	unsigned	i;

	if (pool == NULL)
		return;
	pthread_mutex_lock(&pool->lock);
	if (how == POOL_ABANDON_IF_BUSY && pool->busy > 0) {
		/*
		 * The loop ended with jobs running (the master is gone):
		 * the process exits, and the threads with it.
		 */
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	pool->stop = 1;
	pthread_cond_broadcast(&pool->work);
	for (i = 0; i < pool->count; i++)
		pthread_cond_signal(&pool->threads[i].wake);
	pthread_mutex_unlock(&pool->lock);
	/*
	 * Every thread joined before any context is let go: a job still
	 * running on one thread may signal another's condition variable
	 * (pg_group.c's rounds, on pg_pool.c's per-thread wake), even after
	 * that other thread finished its jobs and left (POOL_DRAIN).
	 */
	for (i = 0; i < pool->count; i++)
		pthread_join(pool->threads[i].thread, NULL);
	for (i = 0; i < pool->count; i++) {
		pthread_cond_destroy(&pool->threads[i].wake);
		if (pool->config.ctx_fini != NULL)
			pool->config.ctx_fini(pool->threads[i].ctx);
	}
	loopwake_close(&pool->wake);
	pthread_cond_destroy(&pool->work);
	pthread_mutex_destroy(&pool->lock);
	free(pool->ctx);
	free(pool->idle);
	free(pool->threads);
	free(pool);
}
