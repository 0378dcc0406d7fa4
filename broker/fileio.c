/* SPDX-License-Identifier: ISC */
/*
 * fileio.c: a worker's file-writing threads.
 *
 * DESIGN
 *
 * Writing a TASK or REPORT file durably costs an fsync of the file and
 * one of its directory: milliseconds that a worker's event loop must not
 * spend, or one slow disk would stall every connection of the worker.
 * So each worker hands its files to FILEIO_THREADS threads (pool.c, all
 * started at once, keeping the worker's signal mask).  A thread
 * writes, fsyncs and links its file (taskfile_write_linked), then joins
 * the directory's next sync round: whoever finds no round running starts
 * one covering every link made so far, the others wait for it.  As with
 * the journal's group commit, one directory fsync serves every file
 * linked before it started.  Finished jobs go back to the event loop
 * (pool.c, loopwake.c), and their callbacks run there, never in a
 * thread.
 *
 * A fresh creation is carried from its temporary to its commit
 * (FILEIO_CARRY): the loop appends the reservation and hands the job
 * over; a thread writes and fsyncs the temporary while the reservation
 * is flushed, waits for the journal's durable position to pass the
 * reservation (handoff_wait_durable: a futex the journaler moves, no
 * trip through the loop), links, and leaves the job to its directory's
 * sync rounds (the job's run returns 1: pool.c's thread no longer
 * touches it): the thread is free at once.  Whoever runs a round (the
 * first to find links uncovered and no round running) first waits, at
 * most IDEM_LINK_GATHER_US, for the threads whose reservations are
 * durable and that are about to link (fileio_gather: one journal flush
 * makes a batch durable at once), fsyncs the directory once for all of
 * them, appends every covered job's task_created and commit (the jobs'
 * commit callbacks; one kick of the journaler for the batch), waits for
 * them to be durable (one sleep for the batch) and hands the batch back
 * with one pool_post: the loop is woken once per batch, to reply.
 * Nothing is linked before its reservation is durable, nothing
 * answered before its commit is.
 *
 * The older split (FILEIO_TEMP, then FILEIO_LINK handed back by the
 * loop) serves what cannot be carried (the ring full, a render failed):
 * a temporary written while its reservation was flushed is linked by
 * the same thread if the journal is durable past the reservation by
 * then; otherwise the loop, which waits for both, hands the link back.
 *
 * A failed directory fsync fails every job whose link it may have
 * covered (their files are in place but not known durable; a retry
 * adopts them), and is not retried for them: the jobs its round covered,
 * and every job linked before it returned, whenever counted, which the
 * next round would otherwise tell durable after Linux reported the
 * writeback error once, to that fsync.  As in dirsync.c (whose DESIGN
 * says why): a thread reads its directory's count of failed rounds
 * before it links (job->dir_seen), and the round that covers the job
 * fails it if the count has moved since.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dirsync.h"
#include "log.h"
#include "idemd.h"

TAILQ_HEAD(fileio_jobs, fileio_job);

/*
 * The threads, queue and done list are pool.c's; lock guards the
 * directory rounds (and gathering) only.
 */
struct fileio {
	struct pool		*pool;
	pthread_mutex_t		 lock;
	pthread_cond_t		 round;		/* a directory round ended */
	/*
	 * Per thread, the reservation its carried job waits for, from the
	 * temporary's fsync to the link's round (fileio_gather): its end
	 * (0: none) and epoch.  Set by the thread, cleared under lock.
	 */
	_Atomic uint64_t	 pending_end[FILEIO_THREADS];
	_Atomic uint64_t	 pending_epoch[FILEIO_THREADS];
	pthread_cond_t		 linked;	/* nobody is about to link */
	unsigned		 gathering;	/* rounds waiting on linked */
	/*
	 * Directory sync rounds, per directory (dirsync.h's: changed counts
	 * links), and beside each the carried jobs linked for its next.
	 */
	struct dirsync_dir	 dirs[FILEIO_DIRS];
	struct fileio_jobs	 carried[FILEIO_DIRS];
	struct dirsync_dir	 alone;		/* every directory past dirs */
	int			 stop;
};

/* A thread's context (pool.c): its slot in pending_end, pending_epoch. */
struct fileio_thread {
	struct fileio		*io;
	unsigned		 index;
};

/* Under io->lock: fd's rounds, or NULL (more directories than slots). */
static struct dirsync_dir *
fileio_dir(struct fileio *io, int fd)
{
	return dirsync_slot(io->dirs, FILEIO_DIRS, fd);
}

/* The carried jobs waiting for dir's next round. */
static struct fileio_jobs *
fileio_carried(struct fileio *io, const struct dirsync_dir *dir)
{
	return &io->carried[dir - io->dirs];
}

/*
 * Is a carried job about to link: its temporary written, its
 * reservation durable, its link not yet in a round?
 */
static int
fileio_about_to_link(struct fileio *io, struct shm_header *h)
{
	uint64_t	end, epoch;
	unsigned	i;

	for (i = 0; i < FILEIO_THREADS; i++) {
		if ((end = atomic_load(&io->pending_end[i])) == 0)
			continue;
		epoch = atomic_load(&io->pending_epoch[i]);
		if (handoff_is_durable(h, end, epoch) > 0)
			return 1;
	}
	return 0;
}

/*
 * Under io->lock, with the round claimed (dir->syncing): wait, at most
 * IDEM_LINK_GATHER_US, until no carried job is about to link.  A journal
 * flush makes a batch of reservations durable at once, and their
 * threads link within microseconds of each other: without this the
 * first link's round would start alone, and the rest would need a
 * second fsync of the directory.  Links made meanwhile join the round
 * (their threads find it claimed and leave their jobs to it).
 */
static void
fileio_gather(struct fileio *io, struct shm_header *h)
{
	struct timespec	at;
	int64_t		ns;

	if (h == NULL || !fileio_about_to_link(io, h))
		return;
	clock_gettime(CLOCK_MONOTONIC, &at);
	ns = at.tv_nsec + (int64_t)IDEM_LINK_GATHER_US * 1000;
	at.tv_sec += ns / 1000000000;
	at.tv_nsec = ns % 1000000000;
	io->gathering++;
	while (!io->stop && fileio_about_to_link(io, h))
		if (pthread_cond_timedwait(&io->linked, &io->lock, &at) ==
		    ETIMEDOUT)
			break;
	io->gathering--;
}

/*
 * Under io->lock: thread's carried job has linked, or will not; the
 * last one a gathering round waits for wakes it.
 */
static void
fileio_link_done(struct fileio *io, unsigned thread, struct shm_header *h)
{
	atomic_store(&io->pending_end[thread], 0);
	if (io->gathering > 0 && !fileio_about_to_link(io, h))
		pthread_cond_broadcast(&io->linked);
}

/*
 * Under io->lock, as job's link is counted: say so if a round of its
 * directory is syncing (the next covers it), an event tests await.
 */
static void
fileio_count_log(const struct dirsync_dir *dir, const struct fileio_job *job)
{
	if (dir->syncing)
		log_debug("%s: linked while its directory syncs: counted for "
		    "the next round", job->name);
}

/*
 * Under io->lock, returned with it held: sync rounds of dir while links
 * are not covered and nobody else syncs.  Each round takes the carried
 * jobs linked before it (its io->carried) and, once the directory is
 * durable, appends their commits (their commit callbacks) with the lock
 * released: those are owed a wait for the journal, the others (a failed
 * round, a commit not appended) go to post as they are.  A link made
 * while a round runs is covered by the next one, which this thread or
 * the syncer of the moment runs: whoever finds links uncovered and
 * nobody syncing, under the lock, starts it, so none is left behind.
 */
static void
fileio_rounds(struct fileio *io, struct dirsync_dir *dir,
    struct fileio_jobs *post, struct fileio_jobs *owed)
{
	struct fileio_jobs	 batch, *carried = fileio_carried(io, dir);
	struct fileio_job	*j, *kick;
	uint64_t		 target, links;
	int			 rc, error;

	while (dir->synced < dir->changed && !dir->syncing) {
		dir->syncing = 1;
		fileio_gather(io, TAILQ_EMPTY(carried) ? NULL :
		    TAILQ_FIRST(carried)->journal);
		target = dir->changed;
		TAILQ_INIT(&batch);
		TAILQ_CONCAT(&batch, carried, entry);
		links = target - dir->synced;
		pthread_mutex_unlock(&io->lock);
		/* An event tests await: a round is in its fsync. */
		log_debug("a directory round syncs %llu link%s",
		    (unsigned long long)links, log_plural(links));
		rc = fsync(dir->fd1 - 1);
		error = errno;
		pthread_mutex_lock(&io->lock);
		/* A retry repairs it: it adopts the file. */
		if (rc == -1)
			dirsync_round_failed(dir, error);
		dir->synced = target;
		dir->syncing = 0;
		pthread_cond_broadcast(&io->round);
		if (TAILQ_EMPTY(&batch))
			continue;
		/*
		 * Under the lock: this round's failure, or that of one whose
		 * fsync ran while the job linked, fails it.
		 */
		TAILQ_FOREACH(j, &batch, entry)
			j->error = dirsync_failed_since(dir, j->dir_seen);
		pthread_mutex_unlock(&io->lock);
		kick = TAILQ_FIRST(&batch);
		while ((j = TAILQ_FIRST(&batch)) != NULL) {
			TAILQ_REMOVE(&batch, j, entry);
			j->batched = 1;
			if (j->error != 0) {
				j->result = -1;
				asprintf(&j->cause, "fsync the directory of %s: "
				    "%s", j->name, strerror(j->error));
			} else if (j->commit(j) == 0) {
				j->committed = 1;
				TAILQ_INSERT_TAIL(owed, j, entry);
				continue;
			}
			fileio_carrier_done(j);
			TAILQ_INSERT_TAIL(post, j, entry);
		}
		/* One kick for the batch's records and leaves. */
		journaler_kick_batch(kick->journal, kick->kick_fd);
		pthread_mutex_lock(&io->lock);
	}
}

/*
 * io->lock not held: wait until the commits owed are durable (one sleep
 * for the batch: they were appended in order, so the first wait covers
 * most of the rest), then hand every job to the loop with one wake-up.
 */
static void
fileio_settle(struct fileio *io, struct fileio_jobs *post,
    struct fileio_jobs *owed)
{
	struct fileio_job	*j;
	struct pool_jobs	 done;

	if (TAILQ_EMPTY(post) && TAILQ_EMPTY(owed))
		return;
	TAILQ_FOREACH(j, owed, entry)
		j->commit_verdict = handoff_wait_durable(j->journal,
		    j->commit_after, j->commit_epoch);
	TAILQ_INIT(&done);
	TAILQ_FOREACH(j, post, entry)
		TAILQ_INSERT_TAIL(&done, &j->pool, entry);
	TAILQ_FOREACH(j, owed, entry)
		TAILQ_INSERT_TAIL(&done, &j->pool, entry);
	pool_post(io->pool, &done);
}

/*
 * Under io->lock: wait until a directory fsync after our link is done.
 * A thread that syncs also finishes the carried jobs its rounds covered
 * (fileio_rounds), and posts them before it returns.
 */
static void
fileio_sync_dir(struct fileio *io, struct fileio_job *job)
{
	struct dirsync_dir	*dir = fileio_dir(io, job->dir_fd);
	struct fileio_jobs	 post, owed;
	uint64_t		 mine;
	int			 error;

	if (dir == NULL) {
		/* More directories than rounds: sync alone (dirsync.c). */
		if ((error = dirsync_alone(&io->alone, &io->lock, &io->round,
		    NULL, job->dir_fd, job->dir_seen)) != 0) {
			job->result = -1;
			job->error = error;
		}
		return;
	}
	TAILQ_INIT(&post);
	TAILQ_INIT(&owed);
	fileio_count_log(dir, job);
	mine = ++dir->changed;
	while (dir->synced < mine) {
		if (dir->syncing)
			pthread_cond_wait(&io->round, &io->lock);
		else
			fileio_rounds(io, dir, &post, &owed);
	}
	if ((error = dirsync_failed_since(dir, job->dir_seen)) != 0) {
		job->result = -1;
		job->error = error;
		asprintf(&job->cause, "fsync the directory of %s: %s",
		    job->name, strerror(job->error));
	}
	if (!TAILQ_EMPTY(&post) || !TAILQ_EMPTY(&owed)) {
		pthread_mutex_unlock(&io->lock);
		fileio_settle(io, &post, &owed);
		pthread_mutex_lock(&io->lock);
	}
}

/*
 * A carried job whose file is linked joins its directory's rounds and
 * is theirs from here: 1, the round that covers it commits it and posts
 * it, and its thread is free at once, whether it syncs or not (no wait
 * for a round another thread runs, nor for the commit).  0: a directory
 * without rounds; the job was synced alone and is the caller's again.
 */
static int
fileio_carry_sync(struct fileio *io, unsigned thread, struct fileio_job *job)
{
	struct dirsync_dir	*dir;
	struct fileio_jobs	 post, owed;

	pthread_mutex_lock(&io->lock);
	fileio_link_done(io, thread, job->journal);
	if ((dir = fileio_dir(io, job->dir_fd)) == NULL) {
		fileio_sync_dir(io, job);
		pthread_mutex_unlock(&io->lock);
		return 0;
	}
	TAILQ_INIT(&post);
	TAILQ_INIT(&owed);
	fileio_count_log(dir, job);
	dir->changed++;
	TAILQ_INSERT_TAIL(fileio_carried(io, dir), job, entry);
	fileio_rounds(io, dir, &post, &owed);
	pthread_mutex_unlock(&io->lock);
	fileio_settle(io, &post, &owed);
	return 1;
}

/*
 * Is the reservation of a FILEIO_TEMP job durable already?  Then the
 * thread links at once instead of handing the temporary back to the
 * loop and waiting to be handed the link: two wake-ups fewer, and the
 * link starts as soon as it may.
 */
static int
fileio_reservation_durable(const struct fileio_job *job)
{
	uint64_t	after = atomic_load(&job->link_after);

	return job->journal != NULL && after != 0 &&
	    handoff_is_durable(job->journal, after, job->link_epoch) > 0;
}

/*
 * The name must be new to the whole workspace, not only to the directory
 * it is linked in: an FCoP tool may have moved another writer's file of
 * that name to another stage.  A name found anywhere is EEXIST.  For a
 * number just handed out the watch usually knows without a look
 * (watch_name_new); linkat's EEXIST stays the final word in the
 * directory itself.
 */
static int
fileio_write(struct fileio *io, struct fileio_job *job)
{
	char	id[sizeof job->name], path[IDEM_MAX_TASK_PATH_BYTES];
	size_t	n = strlen(job->name);
	int	found;

	if (job->phase == FILEIO_TEMP) {
		if (taskfile_write_temp(job->dir_fd, job->name, job->data,
		    job->length, job->temp, &job->cause) != 0)
			return -1;
		if (job->crash_points)
			crash_hold(&job->crash_released);
		if (!fileio_reservation_durable(job))
			return 0;
		/* This thread is the first to see the reservation durable. */
		if (job->crash_points)
			crash_point(CRASH_AFTER_RESERVE_DURABLE);
		log_debug("%s: its reservation is durable: linked by the "
		    "file thread that wrote it", job->name);
		job->phase = FILEIO_LINK;
		job->linked_early = 1;
	}
	if (job->root_fd != -1 && n > 3 && (job->watch == NULL ||
	    !watch_name_new(job->watch, job->name))) {
		memcpy(id, job->name, n - 3);		/* without ".md" */
		id[n - 3] = '\0';
		if ((found = taskfile_find(job->root_fd, id, path,
		    sizeof path)) != 0) {
			if (found > 0)
				errno = EEXIST;
			asprintf(&job->cause, "%s: %s", job->name, found > 0 ?
			    path : strerror(errno));
			if (job->phase == FILEIO_LINK &&
			    taskfile_drop_temp(job->dir_fd, job->temp) != 0)
				log_warn("cannot remove temporary file %s",
				    job->temp);
			return -1;
		}
	}
	/* Before the link: a failed round from here on may be this job's. */
	job->dir_seen = dirsync_seen(io->dirs, FILEIO_DIRS, &io->alone,
	    job->dir_fd);
	if (job->phase == FILEIO_LINK)
		return taskfile_link_temp(job->dir_fd, job->temp, job->name,
		    job->crash_points, &job->cause);
	return taskfile_write_linked(job->dir_fd, job->name, job->data,
	    job->length, job->crash_points, &job->cause);
}

/*
 * A carrier's commit is appended, or it gives up: the journaler no longer
 * waits for it (journaler.c, the gather).  Once; commit calls it before
 * it kicks the journaler.
 */
void
fileio_carrier_done(struct fileio_job *job)
{
	if (!job->carrier)
		return;
	job->carrier = 0;
	journaler_carrier_leave(job->journal, job->worker_index,
	    job->carrier_phase, job->batched ? -1 : job->kick_fd);
}

/* The carried job of thread will not link. */
static void
fileio_unpend(struct fileio *io, unsigned thread, struct fileio_job *job)
{
	pthread_mutex_lock(&io->lock);
	fileio_link_done(io, thread, job->journal);
	pthread_mutex_unlock(&io->lock);
}

/*
 * FILEIO_CARRY: see the top of the file; io->lock not held.  1: the job
 * went on to its directory's rounds, which post it; 0: the caller does.
 */
static int
fileio_carry(struct fileio *io, unsigned thread, struct fileio_job *job)
{
	job->result = taskfile_write_temp(job->dir_fd, job->name, job->data,
	    job->length, job->temp, &job->cause);
	job->error = job->result == 0 ? 0 : errno;
	if (job->result == 0) {
		/* A round about to start may wait for our link. */
		atomic_store(&io->pending_epoch[thread], job->link_epoch);
		atomic_store(&io->pending_end[thread],
		    atomic_load(&job->link_after));
	}
	/* Even a failed temporary waits: its reply says "reserved". */
	job->reserve_verdict = handoff_wait_durable(job->journal,
	    atomic_load(&job->link_after), job->link_epoch);
	if (job->result != 0)
		return 0;
	if (job->reserve_verdict < 0) {
		fileio_unpend(io, thread, job);
		taskfile_drop_temp(job->dir_fd, job->temp);
		return 0;
	}
	if (job->crash_points)
		crash_point(CRASH_AFTER_RESERVE_DURABLE);
	log_debug("%s: its reservation is durable: linked by the file thread "
	    "that wrote it", job->name);
	/* From here to the commit's append the journaler may wait for us. */
	job->carrier_phase = journaler_carrier_enter(job->journal,
	    job->worker_index);
	job->carrier = 1;
	job->phase = FILEIO_LINK;
	job->result = fileio_write(io, job);
	job->error = job->result == 0 ? 0 : errno;
	if (job->result == 0)
		crash_hold_at("before_link_counted");
	if (job->result == 0 && fileio_carry_sync(io, thread, job))
		return 1;
	if (job->result != 0)
		fileio_unpend(io, thread, job);
	if (job->result != 0 || job->commit(job) != 0) {
		fileio_carrier_done(job);
		return 0;
	}
	fileio_carrier_done(job);	/* commit did, before its kick */
	job->committed = 1;
	job->commit_verdict = handoff_wait_durable(job->journal,
	    job->commit_after, job->commit_epoch);
	return 0;
}

static struct fileio_job *
fileio_job_of(struct pool_job *pj)
{
	return (struct fileio_job *)((char *)pj -
	    offsetof(struct fileio_job, pool));
}

/* On a thread (pool.c): 1, a carried job its directory's round posts. */
static int
fileio_run(struct pool_job *pj, void *ctx)
{
	struct fileio_thread	*t = ctx;
	struct fileio		*io = t->io;
	struct fileio_job	*job = fileio_job_of(pj);

	if (job->phase == FILEIO_CARRY)
		return fileio_carry(io, t->index, job);
	job->result = fileio_write(io, job);
	job->error = job->result == 0 ? 0 : errno;
	if (job->result == 0 && job->phase != FILEIO_TEMP) {
		crash_hold_at("before_link_counted");
		pthread_mutex_lock(&io->lock);
		fileio_sync_dir(io, job);
		pthread_mutex_unlock(&io->lock);
	}
	return 0;
}

/* In the event loop: a finished job's callback. */
static void
fileio_finished(struct pool_job *pj)
{
	struct fileio_job	*job = fileio_job_of(pj);

	errno = job->error;
	job->done(job);
}

static void
fileio_thread_init(void *ctx, unsigned index, void *arg)
{
	struct fileio_thread	*t = ctx;

	t->io = arg;
	t->index = index;
}

struct fileio *
fileio_start(struct event_base *base)
{
	struct fileio		*io;
	struct pool_config	 config;
	pthread_condattr_t	 attr;
	unsigned		 i;

	if ((io = calloc(1, sizeof *io)) == NULL)
		return NULL;
	/* calloc: every directory slot unused (dirsync_slot). */
	for (i = 0; i < FILEIO_DIRS; i++)
		TAILQ_INIT(&io->carried[i]);
	pthread_mutex_init(&io->lock, NULL);
	pthread_cond_init(&io->round, NULL);
	/* Its wait is bounded on the monotonic clock (fileio_gather). */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&io->linked, &attr);
	pthread_condattr_destroy(&attr);
	/* All at once, with the worker's signal mask: see the top. */
	memset(&config, 0, sizeof config);
	config.min = config.max = FILEIO_THREADS;
	config.ctx_size = sizeof (struct fileio_thread);
	config.ctx_init = fileio_thread_init;
	config.arg = io;
	if ((io->pool = pool_start(base, &config)) == NULL) {
		log_warn("starting the file threads");
		fileio_stop(io);
		return NULL;
	}
	return io;
}

void
fileio_submit(struct fileio *io, struct fileio_job *job)
{
	job->cause = NULL;
	job->pool.run = fileio_run;
	job->pool.done = fileio_finished;
	/* Every thread runs from the start: the job is taken or queued. */
	pool_submit(io->pool, &job->pool);
}

unsigned
fileio_in_flight(struct fileio *io)
{
	return pool_in_flight(io->pool);
}

/* Finish the queue, join the threads, free.  Callbacks do not run. */
void
fileio_stop(struct fileio *io)
{
	if (io == NULL)
		return;
	pthread_mutex_lock(&io->lock);
	io->stop = 1;
	pthread_mutex_unlock(&io->lock);
	pool_stop(io->pool, POOL_DRAIN);
	pthread_cond_destroy(&io->linked);
	pthread_cond_destroy(&io->round);
	pthread_mutex_destroy(&io->lock);
	free(io);
}
