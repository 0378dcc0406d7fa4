/* SPDX-License-Identifier: ISC */
/*
 * pg_create.c: the PostgreSQL backend's creation (backend.h's create):
 * one submission (write_task, write_report) on the PostgreSQL store,
 * where several brokers serve one workspace (doc/cluster.md).  It
 * reports an outcome through the done function submission.c passed and
 * never replies.
 *
 * DESIGN
 *
 * The steps are doc/cluster.md's "Creation, step by step":
 *
 *   cache      the local table holds the key committed: reused
 *   read       a lock-free read of the row (a conflict on an unfinished
 *              row only once it is durable); on a request's first turn
 *              the claim's statement, which returns the row
 *   claim      the number and the row in one statement (the counter's
 *              lock held for it), committed without waiting for the
 *              WAL flush; durable with the grant
 *                                               [after_reserve_durable]
 *   temp       .<name>.md.tmp.<epoch>-<token>, written
 *   grant      the lease, fenced on (epoch, token); synchronous, so
 *              the claim before it is durable too; the temporary is
 *              fsync'd while the server flushes it
 *                                               [after_task_file_written]
 *                                       [pause: before_task_file_link]
 *   link       linkat(temp, name): EEXIST another writer, ENOENT fenced
 *                                               [after_task_file_linked]
 *   commit     fenced on (epoch, token)         [after_commit_durable]
 *
 * and, for a retry of an unfinished row whose owner's lease expired or
 * whose owner's session is gone, "Takeover": a new fence, the sweep of
 * every earlier owner's temporary (and a directory fsync) before the
 * file is looked for, then the SPEC's recovery rules.  A request that
 * loses a fence goes back to the read and answers from what the winner
 * recorded: never `created`.  A live owner is waited for by reading the
 * row again every CLUSTER_POLL_MS until --inflight-wait-ms.
 *
 * The steps of a creation run in series on one of the worker's creation
 * threads (pg_pool.c, at most --store-connections), with libpq's
 * blocking calls on that thread's own connection, whose session is the
 * owner's identity; a thread carries one creation at a time, from the
 * read to its outcome.  So a worker has that many creations side by
 * side, and their commits and fsyncs wait together: PostgreSQL's group
 * commit and the file system's journal serve them with shared flushes.
 * A run only records its outcome (cl_fail, cl_conflict, cl_answer,
 * cl_wait); the loop acts on it (cl_finish): the outcome to
 * submission.c's done, the cache, the timer of a wait for a live owner,
 * after which the next read runs on whichever thread is free (a waiting
 * request holds no fence: it waits only for another owner).  The cache lookup of a committed retry runs
 * on the loop, with no thread and no round trip.  The loop keeps a
 * connection of its own for the effects, get_submission, diagnose and
 * stats (pg_backend.c).
 *
 * Only built with configure --with-postgresql; without it idemd refuses
 * --store postgresql://... at start-up (backend.c).
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "dirsync.h"
#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "pg_backend.h"
#include "pg.h"
#include "pg_create.h"
#include "workspace_id.h"

/* How often a request that waits for a live owner reads the row again. */
#define CLUSTER_POLL_MS		20
/* Names taken by other writers one after the other before giving up. */
#define CLUSTER_MAX_RENUMBER	1000
/* ".<name>.md.tmp.<epoch>-<token>" */
#define CLUSTER_TEMP_INFIX	".tmp."

static void	cl_step(struct pending *);
static void	cl_judge(struct pending *, struct pgstore_row *, int);
static void	cl_judge_claimed(struct pending *);
static void	cl_dispatch(struct pg_create *);

static struct submission *
cl_sub(struct pending *p)
{
	return p->op;
}

/* The backend's room in the request (pg_create.h). */
static struct pg_create *
cl_of(struct submission *s)
{
	return s->backend_state;
}

static struct idemd *
cl_idemd(struct pending *p)
{
	return p->worker->d;
}

static void
cl_free(struct submission *s)
{
	struct pg_create	*c = cl_of(s);

	if (c->timer != NULL)
		event_free(c->timer);
	c->timer = NULL;
	pgstore_row_clear(&c->row);
}

/*
 * The outcomes.  On a creation thread they are only recorded: the loop
 * acts on them (cl_finish), since the outcome, the cache and the timers
 * are the loop's.
 */
static void
cl_fail(struct pending *p, enum wire_error code, int retryable,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
cl_fail(struct pending *p, enum wire_error code, int retryable,
    const char *fmt, ...)
{
	struct pg_create	*c = cl_of(cl_sub(p));
	va_list			 ap;

	c->out = CL_OUT_FAIL;
	va_start(ap, fmt);
	backend_vfail(&c->err, code, retryable, fmt, ap);
	va_end(ap);
}

/* PostgreSQL or the files failed: retryable, logged once here. */
static void
cl_fail_storage(struct pending *p, const char *what, char *cause)
{
	struct submission	*s = cl_sub(p);

	log_warnx("submission %s: %s: %s", s->submission_id != NULL ?
	    s->submission_id : "(legacy)", what, cause != NULL ? cause :
	    strerror(errno));
	cl_fail(p, WIRE_STORAGE_UNAVAILABLE, 1,
	    "%s: %s", what, cause != NULL ? cause : strerror(errno));
	free(cause);
}

static void
cl_fail_exhausted(struct pending *p)
{
	struct submission	*s = cl_sub(p);

	cl_fail(p, WIRE_SEQUENCE_EXHAUSTED, 0,
	    "every %s number of today (UTC) is used: FCoP names carry %u "
	    "digits; nothing was written", s->ops->kind == SUBTAB_KIND_TASK ?
	    "TASK" : "REPORT", cl_idemd(p)->sequence_digits);
}

static void
cl_conflict(struct pending *p, enum wire_reason reason,
    const char *message)
{
	struct pg_create	*c = cl_of(cl_sub(p));

	c->out = CL_OUT_CONFLICT;
	c->reason = reason;
	c->message = message;
}

static void
cl_answer(struct pending *p, int created)
{
	struct pg_create	*c = cl_of(cl_sub(p));

	c->out = CL_OUT_ANSWER;
	c->created = created;
}

/*
 * Committed receipts never change: keep it for retries on this broker.
 * The slot it landed in is the one the answer's fast-path reply is
 * stored under (fastpath_remember), so that later retries on this
 * broker are answered before the parse, as with the local store; not
 * cached, the slot is none (UINT32_MAX: the receipt store refuses it).
 * The entry is marked as durable elsewhere (its row) as it is put
 * (subtab_apply_cached), so that the clock may evict it like an indexed
 * one: unmarked, a full table kept the first --capacity receipts it was
 * given and cached no later one.
 */
static void
cl_cache(struct pending *p)
{
	struct submission	*s = cl_sub(p);

	s->slot = UINT32_MAX;
	if (s->key_length == 0)
		return;
	if (subtab_apply_cached(&cl_idemd(p)->seg, s->key, s->key_length,
	    &s->entry, &s->slot) != 0) {
		log_debug("submission %s: not cached: %s", s->submission_id,
		    strerror(errno));
	}
}

/* Read again after CLUSTER_POLL_MS (a live owner), on a thread. */
static void
cl_timer_fired(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	cl_dispatch(arg);
}

/* On the loop: act on what the run decided. */
static void
cl_finish(struct pg_create *c)
{
	struct pending		*p = c->p;
	struct submission	*s = cl_sub(p);
	struct timeval		 tv = { 0, CLUSTER_POLL_MS * 1000 };
	backend_create_done_fn	 done = s->done;
	struct backend_create_outcome out;

	if (c->out == CL_OUT_WAIT) {
		if (c->timer != NULL || (c->timer = evtimer_new(
		    p->worker->base, cl_timer_fired, c)) != NULL) {
			evtimer_add(c->timer, &tv);
			return;
		}
		cl_fail(p, WIRE_INTERNAL, 1,
		    "out of memory");
	}
	if (c->out == CL_OUT_NONE)	/* never: every run decides */
		cl_fail(p, WIRE_INTERNAL, 1,
		    "a creation ended without an answer");
	memset(&out, 0, sizeof out);
	switch (c->out) {
	case CL_OUT_FAIL:
		out.result = BACKEND_CREATE_FAILED;
		out.err = c->err;
		cl_free(s);
		done(p, &out);
		break;
	case CL_OUT_CONFLICT:
		out.result = BACKEND_CONFLICT;
		out.reason = c->reason;
		out.message = c->message;
		cl_free(s);
		done(p, &out);
		break;
	case CL_OUT_ANSWER:
		s->entry.state = SUBTAB_COMMITTED;
		/* A tombstone is not cached: its file digest is not kept. */
		s->slot = UINT32_MAX;
		if (!s->pruned)
			cl_cache(p);
		out.result = c->created ? BACKEND_CREATED : BACKEND_REUSED;
		cl_free(s);
		done(p, &out);
		break;
	case CL_OUT_NONE:
	case CL_OUT_WAIT:
		break;
	}
}

static void
cl_crash_point(struct submission *s, enum crash_point point)
{
	if (s->ops->crash_points) {
		crash_point(point);
		pg_pause_point(crash_point_name(point));
	}
}

/*
 * The day's highest number on disk for a reservation, so that numbers
 * other FCoP writers used are skipped (doc/cluster.md, "Claim").  What
 * a reservation needs is every name made before it asked.
 *
 * From the watch (watch_disk_max), where it vouches for every name: it
 * reads the inotify queue after the reservation asked, under the lock
 * every reader notes what it read in, and answers with the number kept
 * since the day's scan; the scan is made once per kind and day, and
 * again after a refresh of the watch (an overflow, a directory made or
 * moved in).  A claim reads a number, not the workspace.
 *
 * Otherwise (no inotify, a watch not complete, a file system not known
 * to be local: fslocal.c) a scan, shared by the worker's creation threads as a group
 * commit shares a flush.  What a reservation needs is a scan begun after
 * it asked, not one of its own: such a scan sees every file made before
 * the reservation asked, as its own would.  So whoever asks while no
 * scan runs makes one, and every reservation that asked before it began
 * takes its result; one that asks while a scan runs waits for the next.
 * A scan reads every stage (O(files)); shared, a worker makes one per
 * scan's time, not one per creation.
 */
static struct {
	pthread_mutex_t		 lock;
	pthread_cond_t		 done;
	uint64_t		 begun;		/* scans begun */
	int			 running;
	/* The last scan that ended: */
	uint64_t		 number;	/* 0: none */
	enum subtab_kind	 kind;
	uint32_t		 date;
	uint32_t		 max_seq;
	int			 error;		/* its errno; 0: it worked */
} cl_scans = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0,
    0, SUBTAB_KIND_TASK, 0, 0, 0 };

/*
 * The links' directory fsyncs, shared by the worker's creation threads:
 * a link's commit needs an fsync of its directory begun after the link,
 * not one of its own (dirsync.c; doc/cluster.md, "Creation, step by
 * step", 6).
 */
static struct dirsync cl_dirsync = DIRSYNC_INITIALIZER;

/* For the worker's last log line (pg_create_report). */
static _Atomic uint64_t	cl_disk_scans;	/* of the workspace, either way */
static _Atomic uint64_t	cl_disk_watched; /* answered by the watch alone */

/* One scan of the workspace, counted (IDEM_DEBUG: logged, with why). */
static int
cl_scan_disk(enum subtab_kind kind, uint32_t date, uint32_t *max_seq,
    void *arg, const char *why)
{
	log_debug("disk scan for %s numbers of %" PRIu32 ": %s",
	    taskfile_kind_prefix(kind), date, why);
	atomic_fetch_add(&cl_disk_scans, 1);
	return paths_scan_max_seq(kind, date, max_seq, arg);
}

/* watch_disk_max's scan: the first of the day since the last refresh. */
static int
cl_scan_watched(enum subtab_kind kind, uint32_t date, uint32_t *max_seq,
    void *arg)
{
	return cl_scan_disk(kind, date, max_seq, arg, "the first since the "
	    "watch's last refresh");
}

static int
cl_scan_shared(enum subtab_kind kind, uint32_t date, uint32_t *max_seq,
    void *arg)
{
	uint64_t	want, mine;
	uint32_t	found;
	int		error, scanned;

	switch (watch_disk_max(arg, kind, date, cl_scan_watched, arg, max_seq,
	    &scanned)) {
	case 1:
		if (!scanned)
			atomic_fetch_add(&cl_disk_watched, 1);
		return 0;
	case -1:
		return -1;
	}
	pthread_mutex_lock(&cl_scans.lock);
	want = cl_scans.begun + 1;	/* begun from now on */
	for (;;) {
		if (cl_scans.number >= want && cl_scans.kind == kind &&
		    cl_scans.date == date) {
			*max_seq = cl_scans.max_seq;
			error = cl_scans.error;
			pthread_mutex_unlock(&cl_scans.lock);
			errno = error;
			return error != 0 ? -1 : 0;
		}
		if (cl_scans.running) {
			pthread_cond_wait(&cl_scans.done, &cl_scans.lock);
			continue;
		}
		cl_scans.running = 1;
		mine = ++cl_scans.begun;
		pthread_mutex_unlock(&cl_scans.lock);
		found = 0;
		error = 0;
		if (cl_scan_disk(kind, date, &found, arg, "the watch cannot "
		    "vouch for every name") != 0)
			error = errno != 0 ? errno : EIO;
		pthread_mutex_lock(&cl_scans.lock);
		cl_scans.running = 0;
		cl_scans.number = mine;
		cl_scans.kind = kind;
		cl_scans.date = date;
		cl_scans.max_seq = found;
		cl_scans.error = error;
		pthread_cond_broadcast(&cl_scans.done);
	}
}

void
pg_create_report(void)
{
	log_info("disk scans for numbers in use: %llu; %llu claims read the "
	    "watch's number without one",
	    (unsigned long long)atomic_load(&cl_disk_scans),
	    (unsigned long long)atomic_load(&cl_disk_watched));
	pthread_mutex_lock(&cl_dirsync.lock);
	log_info("directory fsyncs after links: %llu for %llu links; %llu "
	    "waits for links on their way ran out (%d ms)",
	    (unsigned long long)cl_dirsync.rounds,
	    (unsigned long long)cl_dirsync.calls,
	    (unsigned long long)cl_dirsync.tired, DIRSYNC_GATHER_MS);
	pthread_mutex_unlock(&cl_dirsync.lock);
}

/* A store of this worker's on d's workspace: 0, or -1 and *cause. */
int
pg_store_init(struct idemd *d, struct pgstore *st, char **cause)
{
	memset(st, 0, sizeof *st);
	if (workspace_id_get(d->root_fd, 0, st->workspace, cause) != 1) {
		if (*cause == NULL)
			*cause = strdup("the workspace has no "
			    WORKSPACE_ID_NAME);
		return -1;
	}
	snprintf(st->host, sizeof st->host, "%s", d->host_id);
	st->lease_ms = d->lease_ms;
	st->max_seq = (uint32_t)d->seg.header->alloc_max_seq;
	st->scan = cl_scan_shared;
	st->scan_arg = d;
	if (pgstore_open(st, d->store_arg, cause) != 0) {
		pgstore_close(st);
		return -1;
	}
	return 0;
}

/* ---- files ---------------------------------------------------------- */

static int
cl_dir(struct pending *p)
{
	return cl_sub(p)->ops->dir_fd(cl_idemd(p));
}

static void
cl_temp_name(struct submission *s, const struct pgstore_row *row,
    char out[NAME_MAX + 1])
{
	snprintf(out, NAME_MAX + 1, ".%s.md" CLUSTER_TEMP_INFIX "%lld-%s",
	    s->name, (long long)row->epoch, row->token);
}

/*
 * Every temporary of this name but keep (NULL: all), removed, and the
 * directory fsync'd: after it, no earlier owner can link (doc/cluster.md,
 * "Fencing").  0 or -1.
 */
static int
cl_sweep(struct pending *p, const char *keep)
{
	struct submission	*s = cl_sub(p);
	char			 prefix[NAME_MAX + 1];
	struct dirent		*de;
	DIR			*dir;
	size_t			 n;
	int			 fd, rc = 0;

	n = (size_t)snprintf(prefix, sizeof prefix, ".%s.md" CLUSTER_TEMP_INFIX,
	    s->name);
	/*
	 * Its own open file description: a dup would share the directory's
	 * offset with another creation thread's sweep, and either could
	 * miss a name.
	 */
	if ((fd = openat(cl_dir(p), ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		return -1;
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		return -1;
	}
	rewinddir(dir);
	while ((de = readdir(dir)) != NULL) {
		if (strncmp(de->d_name, prefix, n) != 0 ||
		    (keep != NULL && strcmp(de->d_name, keep) == 0))
			continue;
		if (unlinkat(dirfd(dir), de->d_name, 0) != 0 &&
		    errno != ENOENT) {
			rc = -1;
			break;
		}
		log_info("submission %s: removed %s, an earlier owner's "
		    "temporary", s->submission_id, de->d_name);
	}
	if (rc == 0 && fsync(dirfd(dir)) != 0)
		rc = -1;
	closedir(dir);
	return rc;
}

enum cl_link {
	CL_LINKED,		/* in place, directory fsync'd */
	CL_FENCED,		/* a takeover: read again */
	CL_TAKEN,		/* EEXIST: the name is another file's */
	CL_FAILED		/* storage: errno, *cause */
};

/* cl_put_file's steps (taskfile_write_stepped). */
struct cl_put {
	struct pending	*p;
	char		 temp[NAME_MAX + 1];
};

/*
 * After the temporary's write, before its fsync: the grant asked.  The
 * grant's WAL flush and the temporary's fsync wait for the disk at the
 * same time, not one after the other.
 */
static int
cl_put_written(void *arg, char **cause)
{
	struct cl_put		*put = arg;
	struct pg_create	*c = cl_of(cl_sub(put->p));

	*cause = NULL;
	pg_group_grant_join(&c->member, c->st, &c->key, c->row.epoch,
	    c->row.token);
	return 0;
}

/*
 * After the fsync (a failed one too: the grant joined is awaited), before
 * the link: the grant's answer, the batch's (pg_group.c).  0 granted,
 * 1 fenced, -1 failed.
 */
static int
cl_put_synced(void *arg, int synced, char **cause)
{
	struct cl_put		*put = arg;
	struct submission	*s = cl_sub(put->p);
	struct pg_create	*c = cl_of(s);
	int			 rc;

	rc = pg_group_grant_wait(&c->member, c->st, cause);
	if (synced == 0)
		cl_crash_point(s, CRASH_AFTER_TASK_FILE_WRITTEN);
	if (rc != 1 || synced != 0) {
		if (rc == 1) {
			/* Granted, and no file will follow: a storage fault. */
			asprintf(cause, "fsync of %s: %s", put->temp,
			    strerror(synced));
			errno = synced;
			return -1;
		}
		return rc == 0 ? 1 : -1;
	}
	pg_pause_point("before_task_file_link");
	/*
	 * Its link next, then the directory's fsync, then its commit: on
	 * its way to both (the other members of its round of grants too).
	 */
	dirsync_coming(&cl_dirsync, &c->member.linking);
	pg_group_coming(&c->member);
	return 0;
}

/*
 * The causes of taskfile_write_stepped's own failures: the temporary's
 * create and write, and the link.  (Its fsync's are cl_put_synced's.)
 */
static void
cl_put_failed(void *arg, enum taskfile_op op, const char *temp,
    const char *name, char **cause)
{
	if (op == TASKFILE_OP_LINK)
		asprintf(cause, "linking %s: %s", name, strerror(errno));
	else
		asprintf(cause, "writing %s: %s", temp, strerror(errno));
}

/*
 * The owner's file: temporary, grant (the temporary's fsync meanwhile),
 * link, directory fsync.  The temporary exists before the grant is
 * asked, so a takeover that follows the grant finds it and removes it;
 * its bytes are durable before the link, its name needs no fsync of its
 * own: a temporary a crash loses is one a takeover would have removed
 * (doc/cluster.md, "Creation, step by step", 4-5).  The link is a plain
 * linkat: ENOENT is that takeover's removal, EEXIST another writer's
 * file.  The crash points are ours (cl_crash_point also pauses), not
 * taskfile's.
 */
static enum cl_link
cl_put_file(struct pending *p, char **cause)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	struct cl_put		 put = { .p = p };
	struct taskfile_steps	 steps = {
		.temp = put.temp,
		.written = cl_put_written,
		.synced = cl_put_synced,
		.failed = cl_put_failed,
		.arg = &put,
		.plain_link = 1
	};
	char			 name[NAME_MAX + 1];
	char			*data = NULL;
	size_t			 length;
	uint64_t		 seen;
	enum taskfile_put	 rc;
	int			 dir = cl_dir(p);

	*cause = NULL;
	if (s->ops->render(s, s->entry.created_at_ms, &data, &length) != 0) {
		asprintf(cause, "rendering %s: %s", s->name, strerror(errno));
		return CL_FAILED;
	}
	digest_sha256(data, length, s->entry.file_digest);
	cl_temp_name(s, &c->row, put.temp);
	snprintf(name, sizeof name, "%s.md", s->name);
	/* Before the link: a failed fsync of dir from here on may be ours. */
	seen = dirsync_before(&cl_dirsync, dir);
	rc = taskfile_write_stepped(dir, name, data, length, &steps, cause);
	free(data);
	if (rc != TASKFILE_LINKED)
		dirsync_gone(&cl_dirsync, &c->member.linking);
	switch (rc) {
	case TASKFILE_LINKED:
		break;
	case TASKFILE_FENCED:
		return CL_FENCED;
	case TASKFILE_TAKEN:
		free(*cause);
		*cause = NULL;
		return CL_TAKEN;
	case TASKFILE_FAILED:
		return CL_FAILED;
	}
	cl_crash_point(s, CRASH_AFTER_TASK_FILE_LINKED);
	if (dirsync_after_coming(&cl_dirsync, dir, seen,
	    &c->member.linking) != 0) {
		asprintf(cause, "fsync of %s's directory: %s", name,
		    strerror(errno));
		return CL_FAILED;
	}
	s->wrote_file = 1;
	return CL_LINKED;
}

/* ---- the steps ------------------------------------------------------ */

/* A live owner: read again after CLUSTER_POLL_MS (cl_finish), or give up. */
static void
cl_wait(struct pending *p)
{
	struct pg_create	*c = cl_of(cl_sub(p));

	if (shm_now_ms() >= c->deadline_ms) {
		cl_fail(p, WIRE_IN_PROGRESS, 1,
		    "an identical submission is still in flight on another "
		    "broker after %d ms", cl_idemd(p)->inflight_wait_ms);
		return;
	}
	c->out = CL_OUT_WAIT;
}

/* The row's state as a receipt's bytes, and the commit under the fence. */
static void
cl_commit(struct pending *p)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	json_t			*receipt;
	char			*text, *cause = NULL;
	int			 rc;

	s->entry.state = SUBTAB_COMMITTED;
	receipt = receipt_json(s->key, s->key_length, &s->entry);
	text = receipt != NULL ? json_dumps(receipt, JSON_COMPACT) : NULL;
	json_decref(receipt);
	if (text == NULL) {
		cl_fail(p, WIRE_INTERNAL, 1,
		    "out of memory");
		return;
	}
	rc = pg_group_commit(&c->member, c->st, &c->key, c->row.epoch,
	    c->row.token, s->entry.file_digest, text, &cause);
	free(text);
	if (rc < 0) {
		cl_fail_storage(p, "committing", cause);
		return;
	}
	if (rc == 0) {
		/* Fenced: whatever happens, this call never says created. */
		c->owner = 0;
		s->wrote_file = 0;
		cl_step(p);
		return;
	}
	cl_crash_point(s, CRASH_AFTER_COMMIT_DURABLE);
	cl_answer(p, s->wrote_file);
}

/* The owner writes its file (fresh, or a takeover that found none). */
static void
cl_write(struct pending *p)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	char			*cause = NULL;
	int			 rc;

	for (;;) {
		switch (cl_put_file(p, &cause)) {
		case CL_LINKED:
			cl_commit(p);
			return;
		case CL_FENCED:
			c->owner = 0;
			cl_step(p);
			return;
		case CL_FAILED:
			cl_fail_storage(p, "writing the file", cause);
			return;
		case CL_TAKEN:
			/*
			 * Not on its way to a commit any more: its renumbering
			 * (a statement and a flush) holds no round meanwhile.
			 */
			pg_group_gone(&c->member);
			break;
		}
		if (!c->fresh) {
			/* A file appeared since the takeover looked. */
			cl_step(p);
			return;
		}
		/*
		 * Another FCoP writer took the name of a first call before
		 * anything was promised: a fresh number under the same fence.
		 */
		if (++c->renumbered > CLUSTER_MAX_RENUMBER) {
			cl_fail(p, WIRE_INTERNAL, 1,
			    "every number tried was taken by another writer");
			return;
		}
		rc = pgstore_renumber(c->st, &c->key, c->row.epoch,
		    c->row.token, &c->row, &cause);
		if (rc < 0 && errno == ERANGE) {
			cl_fail_exhausted(p);
			return;
		}
		if (rc < 0) {
			cl_fail_storage(p, "taking a new number", cause);
			return;
		}
		if (rc == 0) {
			c->owner = 0;
			cl_step(p);
			return;
		}
		log_warnx("%s was taken by another writer; submission %s "
		    "moves to number %u", s->name, s->submission_id,
		    c->row.entry.seq);
		s->entry.date = c->row.entry.date;
		s->entry.seq = c->row.entry.seq;
		submission_set_name(s);
	}
}

/* A takeover: sweep, look, and the SPEC's recovery rules. */
static void
cl_recover(struct pending *p)
{
	struct submission	*s = cl_sub(p);
	struct idemd		*d = cl_idemd(p);
	struct taskfile_facts	 facts;
	char			 path[IDEM_MAX_TASK_PATH_BYTES], *cause = NULL;
	int			 found;

	s->recovered = 1;
	if (cl_sweep(p, NULL) != 0) {
		cl_fail_storage(p, "removing earlier owners' temporaries",
		    NULL);
		return;
	}
	found = taskfile_find(d->root_fd, s->name, path, sizeof path);
	if (found < 0) {
		cl_fail_storage(p, "looking for the file", NULL);
		return;
	}
	if (found == 0) {
		if (s->entry.state == SUBTAB_TASK_CREATED) {
			log_warnx("submission %s: %s was created but is nowhere "
			    "in the workspace", s->submission_id, s->name);
			cl_conflict(p, REASON_TASK_MISSING, "the submission's file "
			    "was created but is gone");
			return;
		}
		cl_write(p);
		return;
	}
	if (taskfile_inspect(d->root_fd, path, &facts, &cause) != 0) {
		cl_fail_storage(p, "reading the file", cause);
		return;
	}
	if (!taskfile_facts_belong(&facts, s->submission_id, s->digest_hex)) {
		log_warnx("submission %s: %s is not the file it reserved",
		    s->submission_id, path);
		cl_conflict(p, REASON_TARGET_MISMATCH, "the reserved path holds "
		    "a file of another submission or writer");
		return;
	}
	/* An earlier owner linked it, maybe without the directory fsync. */
	if (taskfile_sync_path(d->root_fd, path) != 0) {
		cl_fail_storage(p, "syncing the adopted file", NULL);
		return;
	}
	memcpy(s->entry.file_digest, facts.file_digest, IDEM_SHA256_BYTES);
	s->wrote_file = 0;
	cl_commit(p);
}

/* The facts of a row this request does not own, for its answers. */
static void
cl_take_row(struct submission *s, const struct pgstore_row *row)
{
	s->entry.state = row->entry.state;
	s->entry.schema = row->entry.schema;
	memcpy(s->entry.request_digest, row->entry.request_digest,
	    IDEM_SHA256_BYTES);
	memcpy(s->entry.file_digest, row->entry.file_digest,
	    IDEM_SHA256_BYTES);
	s->entry.date = row->entry.date;
	s->entry.seq = row->entry.seq;
	s->entry.created_at_ms = row->entry.created_at_ms;
	s->entry.reserved_at_ms = row->entry.reserved_at_ms;
	s->entry.updated_at_ms = row->entry.updated_at_ms;
	memcpy(s->entry.sender, row->entry.sender, sizeof s->entry.sender);
	s->entry.sender_length = row->entry.sender_length;
	memcpy(s->entry.recipient, row->entry.recipient,
	    sizeof s->entry.recipient);
	s->entry.recipient_length = row->entry.recipient_length;
	submission_set_name(s);
}

/*
 * Claim: a number and the row (one statement, committed without
 * waiting for the WAL flush, sent in the worker's round: pg_group.c;
 * the grant's commit makes it durable before anything is linked or
 * answered), then the owner's file.  0: the
 * key has a row, left in c->row for the caller to judge; otherwise the
 * request went on (1) or its outcome is recorded (-1).
 */
static int
cl_claim(struct pending *p)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	char			*cause = NULL;
	int			 rc;

	/* A later turn's row (a lost fence's) is replaced, not leaked. */
	pgstore_row_clear(&c->row);
	rc = pg_group_claim(&c->member, c->st, &c->key, &s->entry, &c->row,
	    &cause);
	if (rc < 0 && errno == ERANGE) {
		cl_fail_exhausted(p);
		return -1;
	}
	if (rc < 0) {
		cl_fail_storage(p, "reserving", cause);
		return -1;
	}
	if (rc == 0)
		return 0;
	c->owner = 1;
	c->fresh = 1;
	cl_take_row(s, &c->row);
	cl_crash_point(s, CRASH_AFTER_RESERVE_DURABLE);
	cl_write(p);
	return 1;
}

/* Read, then answer, wait, reserve or take over. */
static void
cl_step(struct pending *p)
{
	struct pg_create	*c = cl_of(cl_sub(p));
	struct pgstore_row	 row;
	char			*cause = NULL;
	int			 rc;

	memset(&row, 0, sizeof row);
	if (!c->started) {
		/*
		 * The first turn claims at once: the claim's statement
		 * returns the key's row if it has one, judged below as a
		 * read's, so a new id costs no separate read.  Later turns
		 * (after a wait, a lost fence) expect a row, and read it.
		 */
		c->started = 1;
		if (cl_claim(p) == 0)
			cl_judge_claimed(p);
		return;
	}
	rc = pgstore_read(c->st, &c->key, &row, &cause);
	if (rc < 0) {
		cl_fail_storage(p, "reading the submission", cause);
		return;
	}
	cl_judge(p, &row, rc);
}

/*
 * cl_claim found the key's row (reserved elsewhere, maybe a moment ago):
 * judge the row its number statement returned, as a read's.
 */
static void
cl_judge_claimed(struct pending *p)
{
	struct pg_create	*c = cl_of(cl_sub(p));
	struct pgstore_row	 row = c->row;

	memset(&c->row, 0, sizeof c->row);
	cl_judge(p, &row, 1);
}

/* What a read or a claim found (rc 1: row; 0: no row), and what follows. */
static void
cl_judge(struct pending *p, struct pgstore_row *found, int rc)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	struct pgstore_row	 row = *found;
	uint8_t			 schema;
	char			*cause = NULL;

	schema = s->schema != 0 ? s->schema : s->ops->schema;
	if (rc == 1 && row.entry.state != SUBTAB_COMMITTED &&
	    (row.entry.schema != schema || memcmp(row.entry.request_digest,
	    s->digest, IDEM_SHA256_BYTES) != 0)) {
		/*
		 * Another broker's claim may not be durable yet (it commits
		 * without waiting for the WAL flush): a conflict is answered
		 * only on a row that would survive a server crash.
		 */
		pgstore_row_clear(&row);
		rc = pgstore_read_durable(c->st, &c->key, &row, &cause);
		if (rc < 0) {
			cl_fail_storage(p, "reading the submission", cause);
			return;
		}
	}
	if (rc == 1) {
		cl_take_row(s, &row);
		if (row.entry.schema != schema || memcmp(row.entry.request_digest,
		    s->digest, IDEM_SHA256_BYTES) != 0) {
			pgstore_row_clear(&row);
			if (s->entry.schema != schema)
				cl_conflict(p, REASON_SCHEMA_MISMATCH, "the "
				    "submission id is bound to another digest "
				    "schema");
			else
				cl_conflict(p, REASON_DIGEST_MISMATCH, "the "
				    "submission id is bound to a request with "
				    "another digest");
			return;
		}
		if (row.entry.state == SUBTAB_COMMITTED) {
			/* Compacted: reused from the tombstone's facts. */
			s->pruned = row.pruned;
			pgstore_row_clear(&row);
			cl_answer(p, 0);
			return;
		}
		/* Unfinished: a live owner is waited for. */
		if (row.owner_alive && row.lease_ms_left > 0 &&
		    !(c->owner && row.epoch == c->row.epoch)) {
			pgstore_row_clear(&row);
			cl_wait(p);
			return;
		}
		rc = pgstore_takeover(c->st, &c->key, row.epoch, &c->row,
		    &cause);
		pgstore_row_clear(&row);
		if (rc < 0) {
			cl_fail_storage(p, "taking over", cause);
			return;
		}
		if (rc == 0) {
			cl_wait(p);	/* someone else moved it: read again */
			return;
		}
		c->owner = 1;
		c->fresh = 0;
		log_info("submission %s: taken over at epoch %lld",
		    s->submission_id, (long long)c->row.epoch);
		cl_take_row(s, &c->row);
		cl_recover(p);
		return;
	}
	/* Nobody has it (any more: a claim a server crash lost). */
	if (cl_claim(p) == 0)
		cl_judge_claimed(p);
}

/*
 * A legacy file written, linked and its directory fsync'd as the other
 * creations' links are: through the worker's dirsync, not an fsync of
 * its own.  Its own would fail uncounted (a creation linked meanwhile,
 * whose writeback error that fsync may have taken, would then be told
 * durable by the next round), and could succeed after another thread's
 * failed round took its link's error.  0, or -1 with errno and *cause.
 */
static int
cl_legacy_write(struct pending *p, const char *name, const char *data,
    size_t length, char **cause)
{
	uint64_t	seen;
	int		dir = cl_dir(p);

	/* Before the link: a failed fsync of dir from here on may be ours. */
	seen = dirsync_before(&cl_dirsync, dir);
	if (taskfile_write_linked(dir, name, data, length, 0, cause) != 0)
		return -1;
	if (dirsync_after(&cl_dirsync, dir, seen) != 0) {
		asprintf(cause, "fsync of %s's directory: %s", name,
		    strerror(errno));
		return -1;
	}
	return 0;
}

/* No submission id: a new file under a fresh number every time. */
static void
cl_legacy(struct pending *p)
{
	struct submission	*s = cl_sub(p);
	struct pg_create	*c = cl_of(s);
	char			 name[NAME_MAX + 1], *data, *cause = NULL;
	size_t			 length;
	int64_t			 now;
	unsigned		 tries;

	for (tries = 0; tries < CLUSTER_MAX_RENUMBER; tries++) {
		if (pgstore_legacy_number(c->st, s->ops->kind,
		    &s->entry.date, &s->entry.seq, &now, &cause) != 0) {
			if (errno == ERANGE)
				cl_fail_exhausted(p);
			else
				cl_fail_storage(p, "taking a number", cause);
			return;
		}
		submission_set_name(s);
		s->entry.created_at_ms = now;
		if (s->ops->render(s, now, &data, &length) != 0) {
			cl_fail(p, WIRE_INTERNAL, 1,
			    "rendering %s: %s", s->name, strerror(errno));
			return;
		}
		digest_sha256(data, length, s->entry.file_digest);
		snprintf(name, sizeof name, "%s.md", s->name);
		if (cl_legacy_write(p, name, data, length, &cause) == 0) {
			free(data);
			s->wrote_file = 1;
			cl_answer(p, 1);
			return;
		}
		free(data);
		if (errno != EEXIST) {
			cl_fail_storage(p, "writing the file", cause);
			return;
		}
		free(cause);
		cause = NULL;
	}
	cl_fail(p, WIRE_INTERNAL, 1,
	    "every number tried was taken by another writer");
}

/* On a creation thread: its store, then the steps until an outcome. */
static void
cl_run(struct pg_job *job, struct pgstore *st, int *open,
    pthread_cond_t *wake)
{
	struct pg_create	*c = (struct pg_create *)job;
	struct pending		*p = c->p;
	char			*cause = NULL;

	c->st = NULL;
	if (!*open) {
		if (pg_store_init(cl_idemd(p), st, &cause) != 0) {
			cl_fail_storage(p, "opening the PostgreSQL store",
			    cause);
			return;
		}
		*open = 1;
	}
	c->st = st;
	c->member.dirsync = &cl_dirsync;
	pg_group_member_init(&c->member, wake);
	if (cl_sub(p)->submission_id == NULL)
		cl_legacy(p);
	else
		cl_step(p);
	/* Whatever way it went: no round waits for it any more. */
	pg_group_gone(&c->member);
	dirsync_gone(&cl_dirsync, &c->member.linking);
	c->st = NULL;
}

static void
cl_run_done(struct pg_job *job)
{
	cl_finish((struct pg_create *)job);
}

/* Hand the creation to a creation thread (pg_pool.c). */
static void
cl_dispatch(struct pg_create *c)
{
	struct pending	*p = c->p;

	c->out = CL_OUT_NONE;
	c->job.run = cl_run;
	c->job.done = cl_run_done;
	if (pg_pool_submit(p->worker->base, PG_POOL_CREATE,
	    cl_idemd(p)->store_connections, &c->job) != 0) {
		cl_fail(p, WIRE_INTERNAL, 1,
		    "no creation thread could be started");
		cl_finish(c);
	}
}

/* backend.h's create: s's kind, peer, schema and digest are filled. */
void
pg_create(struct pending *p, backend_create_done_fn done)
{
	struct submission	*s = cl_sub(p);
	struct idemd		*d = cl_idemd(p);
	struct pg_create	*c;
	struct subtab_entry	 known;
	char			*nl;

	s->done = done;
	c = cl_of(s);
	c->p = p;
	if (s->submission_id == NULL) {
		cl_dispatch(c);
		return;
	}
	/* The cache: a committed receipt on this broker needs no round trip. */
	if (subtab_lookup(&d->seg, s->key, s->key_length, &known, NULL) == 1 &&
	    known.state == SUBTAB_COMMITTED) {
		uint8_t	want = s->entry.schema;

		s->entry = known;
		submission_set_name(s);
		if (known.schema != want || memcmp(known.request_digest,
		    s->digest, IDEM_SHA256_BYTES) != 0)
			cl_conflict(p, known.schema != want ?
			    REASON_SCHEMA_MISMATCH : REASON_DIGEST_MISMATCH, "the "
			    "submission id is bound to another request");
		else
			cl_answer(p, 0);
		cl_finish(c);
		return;
	}
	/* A report's key is "<task_id>\n<id>": the task is the row's scope. */
	c->key.kind = s->ops->kind;
	c->key.id = s->submission_id;
	if (s->ops->kind == SUBTAB_KIND_REPORT &&
	    (nl = memchr(s->key, '\n', s->key_length)) != NULL)
		snprintf(c->scope, sizeof c->scope, "%.*s",
		    (int)(nl - s->key), s->key);
	c->key.scope = c->scope;
	c->deadline_ms = shm_now_ms() + d->inflight_wait_ms;
	cl_dispatch(c);
}
