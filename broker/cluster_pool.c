/* SPDX-License-Identifier: ISC */
/*
 * cluster_pool.c: a worker's creation threads on the PostgreSQL store
 * (--store postgresql://..., doc/cluster.md, "Where the code is").
 *
 * DESIGN
 *
 * A creation on the store is a handful of steps in series, each a wait:
 * two synchronous PostgreSQL commits and three file-system fsyncs
 * (cluster.c).  Run one at a time on the worker's loop, they leave the
 * server idle between them and share nothing: PostgreSQL's group commit
 * and the file system's journal can only merge the flushes of creations
 * that wait at the same time.  So a worker runs its creations on up to
 * --store-connections threads, each with its own PostgreSQL connection
 * (whose session is the owner's identity of the rows it claims), each
 * carrying one creation at a time through cluster.c's steps with
 * libpq's blocking calls.  The loop never waits for them: it hands a
 * job over and goes on serving; a thread that finishes a job (an answer
 * to give, or a wait for a live owner to arm) puts it on the done list
 * and wakes the loop (loopwake.c), which runs the job's done callback.
 *
 * Threads and their connections are made on demand: a job goes to the
 * thread that went idle last (so the connections in use stay those of
 * the busiest moment), a new thread is started only when none is idle
 * and fewer than the bound run, and past the bound jobs queue in
 * arrival order.  A thread blocks every signal: the loop's libevent
 * handles SIGTERM and SIGHUP; the crash and pause points' SIGKILL and
 * SIGSTOP cannot be blocked and act on the whole process, as before.
 *
 * A thread only ever runs a job's run callback and touches nothing of
 * the loop's (connections, events, the pending's reply): what it
 * decides is recorded in the job and acted on by done, on the loop.
 */
#include <sys/queue.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "idemd.h"
#include "pg.h"

struct cluster_thread {
	struct cluster_pool	*pool;
	pthread_t		 thread;
	pthread_cond_t		 wake;
	struct cluster_job	*job;		/* NULL: idle */
	struct pgstore		 store;		/* its own, opened by a job */
	int			 store_open;
};

TAILQ_HEAD(cluster_jobs, cluster_job);

struct cluster_pool {
	pthread_mutex_t		 lock;
	struct cluster_thread	 threads[PGSTORE_MAX_CONNECTIONS];
	unsigned		 count;		/* started */
	unsigned		 max;		/* --store-connections */
	unsigned		 idle[PGSTORE_MAX_CONNECTIONS];	/* a stack */
	unsigned		 idle_count;
	unsigned		 busy;
	struct cluster_jobs	 queue;		/* waiting for a thread */
	struct cluster_jobs	 done;		/* for the loop */
	struct loopwake		 wake;
	int			 stop;
};

/* This worker's (one per process, made at its first job). */
static struct cluster_pool	*cl_pool;

static void *
cluster_thread_main(void *arg)
{
	struct cluster_thread	*t = arg;
	struct cluster_pool	*pool = t->pool;
	struct cluster_job	*job;

	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (t->job == NULL && !pool->stop)
			pthread_cond_wait(&t->wake, &pool->lock);
		if (t->job == NULL)
			break;
		job = t->job;
		pthread_mutex_unlock(&pool->lock);
		job->run(job, &t->store, &t->store_open);
		pthread_mutex_lock(&pool->lock);
		/* Not touched again: the loop may free it once it is done. */
		TAILQ_INSERT_TAIL(&pool->done, job, entry);
		if ((t->job = TAILQ_FIRST(&pool->queue)) != NULL)
			TAILQ_REMOVE(&pool->queue, t->job, entry);
		else {
			pool->busy--;
			pool->idle[pool->idle_count++] = (unsigned)(t -
			    pool->threads);
		}
		loopwake_post(&pool->wake);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

/* The loop: every finished job's done, in the order they finished. */
static void
cluster_pool_finished(void *arg)
{
	struct cluster_pool	*pool = arg;
	struct cluster_jobs	 done;
	struct cluster_job	*job;

	TAILQ_INIT(&done);
	pthread_mutex_lock(&pool->lock);
	TAILQ_CONCAT(&done, &pool->done, entry);
	pthread_mutex_unlock(&pool->lock);
	while ((job = TAILQ_FIRST(&done)) != NULL) {
		TAILQ_REMOVE(&done, job, entry);
		job->done(job);
	}
}

static struct cluster_pool *
cluster_pool_new(struct event_base *base, unsigned max)
{
	struct cluster_pool	*pool;

	if ((pool = calloc(1, sizeof *pool)) == NULL)
		return NULL;
	pool->max = max < 1 ? 1 : max > PGSTORE_MAX_CONNECTIONS ?
	    PGSTORE_MAX_CONNECTIONS : max;
	pool->wake.fd = -1;
	TAILQ_INIT(&pool->queue);
	TAILQ_INIT(&pool->done);
	pthread_mutex_init(&pool->lock, NULL);
	if (loopwake_open(&pool->wake, base, cluster_pool_finished, pool) ==
	    0)
		return pool;
	log_warn("starting the creation threads");
	pthread_mutex_destroy(&pool->lock);
	free(pool);
	return NULL;
}

/* Under the lock: a new thread carrying job; 0, or -1 (errno). */
static int
cluster_thread_start(struct cluster_pool *pool, struct cluster_job *job)
{
	struct cluster_thread	*t = &pool->threads[pool->count];
	sigset_t		 all, old;
	int			 rc;

	memset(t, 0, sizeof *t);
	t->pool = pool;
	t->job = job;
	pthread_cond_init(&t->wake, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t->thread, NULL, cluster_thread_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&t->wake);
		errno = rc;
		return -1;
	}
	pool->count++;
	pool->busy++;
	return 0;
}

int
cluster_pool_submit(struct event_base *base, unsigned max,
    struct cluster_job *job)
{
	struct cluster_pool	*pool;
	struct cluster_thread	*t;
	int			 rc = 0;

	if (cl_pool == NULL && (cl_pool = cluster_pool_new(base, max)) ==
	    NULL)
		return -1;
	pool = cl_pool;
	pthread_mutex_lock(&pool->lock);
	if (pool->idle_count > 0) {
		t = &pool->threads[pool->idle[--pool->idle_count]];
		t->job = job;
		pool->busy++;
		pthread_cond_signal(&t->wake);
	} else if (pool->count < pool->max &&
	    cluster_thread_start(pool, job) == 0)
		;
	else if (pool->count > 0)
		TAILQ_INSERT_TAIL(&pool->queue, job, entry);
	else {
		log_warn("starting a creation thread");
		rc = -1;
	}
	pthread_mutex_unlock(&pool->lock);
	return rc;
}

void
cluster_pool_stop(void)
{
	struct cluster_pool	*pool = cl_pool;
	unsigned		 i;

	if (pool == NULL)
		return;
	pthread_mutex_lock(&pool->lock);
	if (pool->busy > 0) {
		/*
		 * The loop ended with creations running (the master is
		 * gone): the process exits, and their threads with it.
		 */
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	pool->stop = 1;
	for (i = 0; i < pool->count; i++)
		pthread_cond_signal(&pool->threads[i].wake);
	pthread_mutex_unlock(&pool->lock);
	for (i = 0; i < pool->count; i++) {
		pthread_join(pool->threads[i].thread, NULL);
		pthread_cond_destroy(&pool->threads[i].wake);
		if (pool->threads[i].store_open)
			pgstore_close(&pool->threads[i].store);
	}
	loopwake_close(&pool->wake);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
	cl_pool = NULL;
}
