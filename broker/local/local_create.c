/* SPDX-License-Identifier: ISC */
/*
 * local_create.c: the local backend's creation (backend.h's create): the
 * state machine that makes one creation idempotent on the table, the
 * journal and the files, shared by write_task (TASK files) and
 * write_report (REPORT files).  It reports an outcome through the done
 * function submission.c passed and never replies (submission.c does).
 *
 * DESIGN
 *
 * A submission goes reserved -> task_created -> committed, and each step
 * is a journal record that is durable before the next step starts:
 *
 *   acquire     look the key up and claim it (shm table, one lock)
 *   reserve     RESERVE record durable          [after_reserve_durable]
 *   file        file written, linked, directory fsync'd
 *                 [after_task_file_written] [after_task_file_linked]
 *   created     TASK_CREATED record durable     [after_task_created_durable]
 *   commit      COMMIT record durable           [after_commit_durable]
 *   reply
 *
 * (The bracketed fault-injection points fire for tasks only.)  The claim
 * makes check, reserve and create exclusive per key across all workers;
 * an identical request arriving meanwhile parks until the claim is
 * released and then finds the committed result.  A request that finds an
 * unfinished submission whose claimer is gone (a retry after a crash)
 * claims it, records its state again (so that it is durable whatever the
 * dead claimer managed) and continues by the recovery rules of SPEC.md.
 * Every step is a function that either finishes the request or parks it
 * with the next step as its continuation.
 *
 * A fresh submission (the common case) is not walked through these steps
 * by the loop: once the reservation is appended, one file thread carries
 * it through file, created and commit, waiting for the journal itself,
 * and the loop hears of it once, to reply (sub_carry).  The steps above
 * remain for what cannot be carried and for retries.
 *
 * Without a submission id (legacy), a file is written under a fresh
 * number and one record keeps the number from being handed out again.
 */
#include <sys/stat.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "idemd.h"
#include "backend.h"
#include "local.h"

static void	sub_acquire(struct pending *);
static void	sub_from_index(struct pending *);
static void	sub_reserved(struct pending *);
static void	sub_resolve_reserved(struct pending *);
static void	sub_write_file(struct pending *);
static void	sub_file_recorded(struct pending *);
static void	sub_recover_created(struct pending *);
static void	sub_committed(struct pending *);
static void	sub_legacy(struct pending *);
static void	sub_legacy_done(struct pending *);

static struct submission *
sub_of(struct pending *p)
{
	return p->op;
}

/* The local backend's room in the request (struct local_create). */
static struct local_create *
lc_of(struct pending *p)
{
	return sub_of(p)->backend_state;
}

static struct idemd *
idemd_of(struct pending *p)
{
	return p->worker->d;
}

static void
sub_release(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);

	local_release_claim(p, &lc->claimed, s->slot, &lc->claim);
}

/* The outcome: the claim released first, then the op layer's done. */
static void
sub_done(struct pending *p, struct backend_create_outcome *out)
{
	struct submission	*s = sub_of(p);

	sub_release(p);
	s->done(p, out);
}

static void
sub_done_failed(struct pending *p, const struct backend_error *err)
{
	struct backend_create_outcome	out;

	memset(&out, 0, sizeof out);
	out.result = BACKEND_CREATE_FAILED;
	out.err = *err;
	sub_done(p, &out);
}

static void
sub_fail(struct pending *p, enum wire_error code, int retryable,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
sub_fail(struct pending *p, enum wire_error code, int retryable,
    const char *fmt, ...)
{
	struct backend_error	err;
	va_list			ap;

	va_start(ap, fmt);
	backend_vfail(&err, code, retryable, fmt, ap);
	va_end(ap);
	sub_done_failed(p, &err);
}

static void
sub_fail_storage(struct pending *p, int error, const char *what)
{
	struct request_error	err;

	request_storage_error(&err, error, what);
	sub_fail(p, err.code, err.retryable, "%s", err.message);
}

/* The table is full: reply.c's words for why. */
static void
sub_fail_table_full(struct pending *p, enum subtab_full why,
    size_t key_length)
{
	struct idemd	*d = idemd_of(p);
	json_t		*reply, *error;

	reply = reply_table_full(NULL, why, d->capacity, key_length);
	error = json_object_get(reply, "error");
	sub_fail(p, WIRE_TABLE_FULL, json_is_true(json_object_get(error,
	    "retryable")), "%s", json_string_value(json_object_get(error,
	    "message")));
	json_decref(reply);
}

/*
 * The number allocator failed.  ERANGE: the date's numbers are used up
 * (SPEC.md, "Names"); nothing was reserved or written for this call.
 */
static void
sub_fail_alloc(struct pending *p, int error)
{
	struct submission	*s = sub_of(p);

	if (error != ERANGE) {
		sub_fail_storage(p, error, "allocating a number");
		return;
	}
	sub_fail(p, WIRE_SEQUENCE_EXHAUSTED, 0,
	    "every %s number of today (UTC) is used: FCoP names carry "
	    "%u digits; nothing was written (a new number is free "
	    "tomorrow, or restart idemd with a larger --sequence-digits)",
	    s->ops->kind == SUBTAB_KIND_TASK ? "TASK" : "REPORT",
	    idemd_of(p)->sequence_digits);
}

/* Bound to another request: s->entry, s->name; the op layer answers. */
static void
sub_conflict(struct pending *p, enum wire_reason reason, const char *message)
{
	struct backend_create_outcome	out;

	memset(&out, 0, sizeof out);
	out.result = BACKEND_CONFLICT;
	out.reason = reason;
	out.message = message;
	sub_done(p, &out);
}

static void
sub_answer(struct pending *p, int created)
{
	struct backend_create_outcome	out;

	memset(&out, 0, sizeof out);
	out.result = created ? BACKEND_CREATED : BACKEND_REUSED;
	sub_done(p, &out);
}

static void
sub_record_of(struct submission *s, const struct subtab_entry *entry,
    struct journal_record *record)
{
	memset(record, 0, sizeof *record);
	record->type = JOURNAL_RECORD_ENTRY;
	record->entry = *entry;
	record->entry.key_length = (uint16_t)s->key_length;
	memcpy(record->key, s->key, s->key_length);
}

/*
 * Record s->entry: for a claimed slot, appended and set in the table in
 * one step (subtab_record); then park until durable and go on with next.
 */
static void
sub_journal(struct pending *p, pending_resume_fn next)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct journal_record	 record;

	sub_record_of(s, &s->entry, &record);
	if (lc->claimed)
		pending_journal_slot(p, &record, s->slot, &lc->claim, &s->entry,
		    next);
	else
		pending_journal(p, &record, next);
}

static void
sub_crash_point(struct submission *s, enum crash_point point)
{
	if (s->ops->crash_points)
		crash_point(point);
}

static void
sub_fail_reopening(struct pending *p)
{
	struct backend_error	err;

	local_fail_reopening(&err);
	sub_done_failed(p, &err);
}

static int
sub_journal_failed(struct pending *p)
{
	struct backend_error	err;

	if (!local_journal_failed(p, &err))
		return 0;
	sub_done_failed(p, &err);
	return 1;
}

/* backend.h's create: s's kind, peer, schema and digest are filled. */
void
local_create(struct pending *p, backend_create_done_fn done)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_entry	 known;

	s->done = done;
	/* A legacy call always writes; a retry may need nothing new. */
	if (s->submission_id == NULL &&
	    atomic_load(&d->seg.header->journal_failed)) {
		sub_fail_reopening(p);
		return;
	}
	/*
	 * Workers share the master's inotify queue: take what it holds now,
	 * so that a file another writer created before this request is
	 * known before a number is handed out (watch.c).  A submission the
	 * table already holds takes no number: a retry skips the syscall.
	 */
	if (d->watch_fd != -1 && (s->submission_id == NULL ||
	    subtab_lookup(&d->seg, s->key, s->key_length, &known, NULL) != 1))
		watch_read(d, d->watch_fd);
	s->entry.reserved_at_ms = shm_now_ms();
	s->entry.updated_at_ms = s->entry.reserved_at_ms;
	lc->claim.worker = p->worker->index + 1;
	lc->claim.generation = p->worker->generation;
	lc->claim.token = ++p->worker->next_token;
	if (s->submission_id == NULL)
		sub_legacy(p);
	else
		sub_acquire(p);
}

/* A committed result another request left: durable now, answer it. */
static void
sub_done_durable(struct pending *p)
{
	if (sub_journal_failed(p))
		return;
	sub_answer(p, 0);
}

static void
sub_mismatch(struct pending *p)
{
	struct submission	*s = sub_of(p);

	if (sub_journal_failed(p))
		return;
	if (s->entry.schema != (s->schema != 0 ? s->schema : s->ops->schema))
		sub_conflict(p, REASON_SCHEMA_MISMATCH, "the submission id is "
		    "bound to another digest schema");
	else
		sub_conflict(p, REASON_DIGEST_MISMATCH, "the submission id is "
		    "bound to a request with another digest");
}

static void	sub_file_recorded(struct pending *);
static void	sub_committed(struct pending *);
static int	sub_carry(struct pending *);
static void	sub_start_temp(struct pending *);
static void	sub_temp_written(struct fileio_job *);
static void	sub_joined(struct pending *);
static void	sub_file_written(struct fileio_job *);
static int	sub_carry_commit(struct fileio_job *);
static void	sub_carried(struct fileio_job *);

/*
 * The file and its name are durable: record task_created, and with it,
 * in the same append and so under the same fdatasync, the commit.  A
 * torn append can still leave task_created alone, which a retry
 * completes (the recovery rules; the crash-state explorer tears it, and
 * so does the crash point after_task_created_durable, in the journaler).
 */
static void
sub_record_file(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct journal_record	 created, committed;

	s->entry.state = SUBTAB_TASK_CREATED;
	s->entry.updated_at_ms = shm_now_ms();
	if (!lc->claimed) {
		sub_journal(p, sub_file_recorded);
		return;
	}
	sub_record_of(s, &s->entry, &created);
	s->entry.state = SUBTAB_COMMITTED;
	sub_record_of(s, &s->entry, &committed);
	pending_journal_slot_pair(p, &created, &committed, s->slot, &lc->claim,
	    &s->entry, sub_committed);
}

/*
 * The table does not hold the key: the index may (a committed entry
 * evicted, or from before a restart).  Found: answer from it as from a
 * committed slot, reused or conflict.  Not found: acquire again, now
 * allowed to insert unless something was evicted meanwhile.
 */
static void
sub_from_index(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct index_entry	 found;

	lc->evictions = atomic_load(&d->seg.header->evictions);
	switch (history_find(d, s->key, s->key_length, &found, NULL)) {
	case 0:
		lc->index_checked = 1;
		sub_acquire(p);
		return;
	case 1:
		break;
	default:
		sub_fail_storage(p, errno, "reading the index");
		return;
	}
	s->slot = UINT32_MAX;	/* in no slot: no reply stored for it */
	s->entry = found.record.entry;
	s->pruned = found.form == INDEX_TOMBSTONE;
	submission_set_name(s);
	if (s->entry.schema != (s->schema != 0 ? s->schema : s->ops->schema) ||
	    memcmp(s->entry.request_digest, s->digest,
	    IDEM_SHA256_BYTES) != 0)
		sub_mismatch(p);
	else
		sub_answer(p, 0);
}

static void
sub_acquire(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_acquire	 a;
	uint64_t		 epoch;

	if (p->timed_out) {
		sub_fail(p, WIRE_IN_PROGRESS, 1,
		    "an identical submission is still in flight after %d ms",
		    d->inflight_wait_ms);
		return;
	}
	memset(&a, 0, sizeof a);
	a.key = s->key;
	a.key_length = s->key_length;
	a.want = s->entry;
	a.claim = lc->claim;
	a.today = taskfile_date_of(shm_now_ms());
	a.scan = paths_scan_max_seq;
	a.scan_arg = d;
	a.index_checked = lc->index_checked;
	a.evictions = lc->evictions;

	/* Before the table is read: see local_after_durable. */
	epoch = handoff_epoch(d->seg.header);
	if ((epoch & 1) && local_needs_journal(d, s->key, s->key_length,
	    s->entry.schema, s->entry.request_digest)) {
		sub_fail_reopening(p);
		return;
	}
	switch (subtab_acquire(&d->seg, &a)) {
	case SUBTAB_INSERTED:
		lc->claimed = 1;
		s->slot = a.slot;
		s->entry = a.found;
		lc->fresh = 1;
		submission_set_name(s);
		if (sub_carry(p) == 0)
			return;		/* a file thread carries it */
		sub_start_temp(p);
		sub_journal(p, sub_reserved);
		/* Appended: the file thread may link once this is durable. */
		if (lc->temp_state == SUB_TEMP_WRITING &&
		    p->wait == PENDING_DURABLE) {
			lc->job.link_epoch = p->epoch;
			atomic_store(&lc->job.link_after, p->wait_end);
		}
		return;
	case SUBTAB_CLAIMED:
		/* Record the state again: the last claimer may have died
		 * before its record was durable. */
		lc->claimed = 1;
		s->slot = a.slot;
		s->entry = a.found;
		submission_set_name(s);
		sub_journal(p, a.found.state == SUBTAB_RESERVED ?
		    sub_reserved : sub_recover_created);
		return;
	case SUBTAB_DONE:
		s->slot = a.slot;	/* the fast path stores its reply there */
		s->entry = a.found;
		submission_set_name(s);
		local_after_durable(p, a.found_journal_end, epoch,
		    sub_done_durable);
		return;
	case SUBTAB_MISMATCH:
		s->entry = a.found;
		submission_set_name(s);
		local_after_durable(p, a.found_journal_end, epoch,
		    sub_mismatch);
		return;
	case SUBTAB_BUSY:
		pending_wait_claim(p, sub_acquire);
		return;
	case SUBTAB_NOT_HERE:
		sub_from_index(p);
		return;
	case SUBTAB_FULL:
		/* The journaler checkpoints, which makes room (subtab.c). */
		journaler_kick(d->kick_fd);
		sub_fail_table_full(p, a.full, a.key_length);
		return;
	case SUBTAB_ALLOC_FAILED:
		sub_fail_alloc(p, errno);
		return;
	}
}

/*
 * One carrier per creation.  The loop appends the reservation (and sets
 * the slot's state in the same step), then hands the whole rest to one
 * file thread (fileio.c, FILEIO_CARRY): the temporary, written while the
 * reservation is flushed; the wait for the reservation, on the journal's
 * durable position; the name check and the link; the shared directory
 * fsync; task_created and the commit, appended by the thread
 * (sub_carry_commit) and waited for.  The loop hears of it once, to
 * reply (sub_carried).  0: carried; -1: nothing was appended or handed
 * over, and the loop goes the step-by-step way (the ring is full, or the
 * file could not be rendered).
 */
static int
sub_carry(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct fileio_job	*job = &lc->job;
	struct journal_record	 record;
	uint8_t			 buf[JOURNAL_MAX_RECORD_BYTES];
	size_t			 length;
	uint64_t		 end, epoch;

	memset(job, 0, sizeof *job);
	lc->file_time = shm_now_ms();
	if (s->ops->render(s, lc->file_time, &job->data, &job->length) != 0)
		return -1;
	digest_sha256(job->data, job->length, s->entry.file_digest);
	sub_record_of(s, &s->entry, &record);
	/* The epoch before the append: see pending_try_append. */
	epoch = handoff_epoch(d->seg.header);
	if ((length = journal_encode(&record, buf, sizeof buf)) == 0 ||
	    atomic_load(&d->seg.header->journal_failed) ||
	    subtab_record(&d->seg, s->slot, &lc->claim, &s->entry, buf, length,
	    &end) != 0) {
		free(job->data);
		job->data = NULL;
		return -1;
	}
	atomic_fetch_add(&d->seg.header->counters.journal_records, 1);
	journaler_kick_idle(d->seg.header, d->kick_fd);

	snprintf(job->name, sizeof job->name, "%s.md", s->name);
	job->phase = FILEIO_CARRY;
	job->root_fd = d->root_fd;
	job->watch = d;			/* a number just handed out */
	job->dir_fd = s->ops->dir_fd(d);
	job->crash_points = s->ops->crash_points;
	job->journal = d->seg.header;
	job->worker_index = p->worker->index;
	job->kick_fd = d->kick_fd;
	job->link_epoch = epoch;
	atomic_store(&job->link_after, end);
	job->commit = sub_carry_commit;
	job->done = sub_carried;
	job->arg = p;
	fileio_submit(p->worker->io, job);
	return 0;
}

/*
 * In the carrying thread: the file and its name are durable; append
 * task_created and the commit together (as sub_record_file does) and
 * say where they end.  -1: not appended, the loop records them.  The
 * loop does not touch the submission while a thread carries it.
 */
static int
sub_carry_commit(struct fileio_job *job)
{
	struct pending		*p = job->arg;
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct subtab_entry	 entry = s->entry;
	struct journal_record	 created, committed;
	uint8_t			 buf[2 * JOURNAL_MAX_RECORD_BYTES];
	size_t			 n, m = 0;

	entry.created_at_ms = lc->file_time;
	entry.updated_at_ms = shm_now_ms();
	entry.state = SUBTAB_TASK_CREATED;
	sub_record_of(s, &entry, &created);
	entry.state = SUBTAB_COMMITTED;
	sub_record_of(s, &entry, &committed);
	if ((n = journal_encode(&created, buf, sizeof buf)) != 0)
		m = journal_encode(&committed, buf + n, sizeof buf - n);
	job->commit_epoch = handoff_epoch(d->seg.header);
	if (m == 0 || subtab_record(&d->seg, s->slot, &lc->claim, &entry, buf,
	    n + m, &job->commit_after) != 0)
		return -1;
	atomic_fetch_add(&d->seg.header->counters.journal_records, 2);
	/* Uncounted first: the journaler this kick wakes must not wait for
	 * us. */
	fileio_carrier_done(job);
	if (!job->batched)
		journaler_kick_idle(d->seg.header, d->kick_fd);
	s->entry = entry;
	s->wrote_file = 1;
	return 0;
}

/* In the loop: the carrying thread is done, one way or another. */
static void
sub_carried(struct fileio_job *job)
{
	struct pending		*p = job->arg;
	struct submission	*s = sub_of(p);

	if (job->phase == FILEIO_CARRY) {
		/* Stopped before the link: the reservation or the temporary. */
		free(job->data);
		job->data = NULL;
		if (job->reserve_verdict < 0) {
			free(job->cause);
			job->cause = NULL;
			p->journal_failed = 1;
			sub_journal_failed(p);
			return;
		}
		log_warnx("%s %s: %s", s->ops->id_key, s->name,
		    job->cause != NULL ? job->cause : strerror(job->error));
		free(job->cause);
		job->cause = NULL;
		sub_fail_storage(p, job->error, "writing the file");
		return;
	}
	if (!job->committed) {
		/* The link failed (EEXIST: a new number), or the loop records. */
		sub_file_written(job);
		return;
	}
	free(job->data);
	job->data = NULL;
	p->journal_failed = job->commit_verdict < 0;
	sub_committed(p);
}

/*
 * A fresh submission's file does not wait for its reservation: the
 * temporary is written and fsync'd while the reservation is flushed
 * (the contract is that the TASK file, the linked name, never exists
 * before its reservation is durable; an unlinked temporary is nothing,
 * and start-up sweeps it).  The link waits for both; whichever finishes
 * last goes on (sub_joined).  Without this, a creation would wait for
 * one more sync in a row.
 */
static void
sub_start_temp(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct fileio_job	*job = &lc->job;

	memset(job, 0, sizeof *job);
	lc->file_time = shm_now_ms();
	if (s->ops->render(s, lc->file_time, &job->data, &job->length) != 0)
		return;		/* sub_reserved writes it the slow way */
	snprintf(job->name, sizeof job->name, "%s.md", s->name);
	job->phase = FILEIO_TEMP;
	/* For the link, in the thread or from sub_joined. */
	job->root_fd = idemd_of(p)->root_fd;
	job->watch = idemd_of(p);	/* a number just handed out */
	job->crash_points = s->ops->crash_points;
	job->journal = idemd_of(p)->seg.header;
	job->dir_fd = s->ops->dir_fd(idemd_of(p));
	job->done = sub_temp_written;
	job->arg = p;
	digest_sha256(job->data, job->length, s->entry.file_digest);
	lc->temp_state = SUB_TEMP_WRITING;
	lc->reserve_done = 0;
	fileio_submit(p->worker->io, job);
}

static void
sub_temp_written(struct fileio_job *job)
{
	struct pending		*p = job->arg;
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);

	if (job->linked_early) {
		/* Its reservation is durable: only the loop's wait may lag. */
		lc->temp_state = SUB_TEMP_LINKED;
		if (lc->reserve_done)
			sub_joined(p);
		return;
	}
	free(job->data);
	job->data = NULL;
	if (job->result != 0) {
		log_warnx("%s %s: %s", s->ops->id_key, s->name,
		    job->cause != NULL ? job->cause : strerror(job->error));
		free(job->cause);
		job->cause = NULL;
		lc->temp_state = SUB_TEMP_FAILED;
		lc->temp_error = job->error;
	} else
		lc->temp_state = SUB_TEMP_READY;
	if (lc->reserve_done)
		sub_joined(p);
}

/* The reservation's wait and the temporary are both over. */
static void
sub_joined(struct pending *p)
{
	struct local_create	*lc = lc_of(p);
	struct fileio_job	*job = &lc->job;

	if (p->journal_failed) {
		if (lc->temp_state == SUB_TEMP_READY &&
		    taskfile_drop_temp(job->dir_fd, job->temp) != 0)
			log_warn("cannot remove temporary file %s", job->temp);
		if (lc->temp_state == SUB_TEMP_LINKED) {
			/* In place, its reservation durable: a retry adopts it. */
			free(job->data);
			job->data = NULL;
			free(job->cause);
			job->cause = NULL;
		}
		lc->temp_state = SUB_TEMP_NONE;
		sub_journal_failed(p);
		return;
	}
	if (lc->temp_state == SUB_TEMP_FAILED) {
		lc->temp_state = SUB_TEMP_NONE;
		sub_fail_storage(p, lc->temp_error, "writing the file");
		return;
	}
	if (lc->temp_state == SUB_TEMP_LINKED) {
		lc->temp_state = SUB_TEMP_NONE;
		sub_file_written(job);
		return;
	}
	lc->temp_state = SUB_TEMP_NONE;
	job->phase = FILEIO_LINK;
	job->done = sub_file_written;
	fileio_submit(p->worker->io, job);
}

/* RESERVE is durable (or its wait failed). */
static void
sub_reserved(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);

	if (lc->temp_state != SUB_TEMP_NONE) {
		if (!p->journal_failed)
			sub_crash_point(s, CRASH_AFTER_RESERVE_DURABLE);
		lc->reserve_done = 1;
		/* IDEM_CRASH_LINK_EARLY: its file thread may link now. */
		crash_release(&lc->job.crash_released);
		if (lc->temp_state != SUB_TEMP_WRITING)
			sub_joined(p);
		return;		/* sub_temp_written goes on */
	}
	if (sub_journal_failed(p))
		return;
	sub_crash_point(s, CRASH_AFTER_RESERVE_DURABLE);
	if (lc->fresh)
		sub_write_file(p);
	else
		sub_resolve_reserved(p);
}

/* A retry of a reservation: the file may or may not be there. */
static void
sub_resolve_reserved(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct idemd		*d = idemd_of(p);
	struct taskfile_facts	 facts;
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	char			*cause = NULL;
	int			 found;

	s->recovered = 1;
	found = taskfile_find(d->root_fd, s->name, path, sizeof path);
	if (found < 0) {
		sub_fail_storage(p, errno, "looking for the file");
		return;
	}
	if (found == 0) {
		sub_write_file(p);
		return;
	}
	if (taskfile_inspect(d->root_fd, path, &facts, &cause) != 0) {
		log_warnx("%s", cause);
		free(cause);
		sub_fail_storage(p, errno, "reading the file");
		return;
	}
	if (!taskfile_facts_belong(&facts, s->submission_id, s->digest_hex)) {
		log_warnx("submission %s: %s is not the file it reserved",
		    s->submission_id, path);
		sub_conflict(p, REASON_TARGET_MISMATCH, "the reserved path "
		    "holds a file of another submission or writer");
		return;
	}
	/*
	 * Adopt the file the interrupted call put in place.  It may have died
	 * before the directory fsync (after_task_file_linked): make the file
	 * and its name durable before anything is recorded or answered.
	 */
	if (taskfile_sync_path(d->root_fd, path) != 0) {
		sub_fail_storage(p, errno, "syncing the adopted file");
		return;
	}
	memcpy(s->entry.file_digest, facts.file_digest, IDEM_SHA256_BYTES);
	s->entry.created_at_ms = facts.has_created_at ? facts.created_at_ms :
	    shm_now_ms();
	sub_record_file(p);
}

/*
 * Render the file for s->name and hand it to the worker's file threads;
 * done runs in the loop when it is written, linked and its directory
 * fsync'd (or failed: EEXIST means another file has the name).
 */
static void
sub_put_file(struct pending *p, void (*done)(struct fileio_job *))
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct fileio_job	*job = &lc->job;

	lc->file_time = shm_now_ms();
	memset(job, 0, sizeof *job);
	if (s->ops->render(s, lc->file_time, &job->data, &job->length) != 0) {
		sub_fail(p, WIRE_INTERNAL, 1,
		    "rendering %s: %s", s->name, strerror(errno));
		return;
	}
	snprintf(job->name, sizeof job->name, "%s.md", s->name);
	job->root_fd = idemd_of(p)->root_fd;
	/* A number just handed out; a retry's looks the slow way. */
	if (lc->fresh || s->submission_id == NULL)
		job->watch = idemd_of(p);
	job->dir_fd = s->ops->dir_fd(idemd_of(p));
	job->crash_points = s->ops->crash_points;
	job->done = done;
	job->arg = p;
	digest_sha256(job->data, job->length, s->entry.file_digest);
	fileio_submit(p->worker->io, job);
}

/* Free what the job held; 0 if the file is in place, else -1 (errno). */
static int
sub_file_result(struct pending *p, struct fileio_job *job)
{
	struct submission	*s = sub_of(p);

	free(job->data);
	job->data = NULL;
	if (job->result == 0)
		return 0;
	if (job->error != EEXIST)
		log_warnx("%s %s: %s", s->ops->id_key, s->name,
		    job->cause != NULL ? job->cause : strerror(job->error));
	free(job->cause);
	job->cause = NULL;
	errno = job->error;
	return -1;
}

static void	sub_file_written(struct fileio_job *);

static void
sub_write_file(struct pending *p)
{
	sub_put_file(p, sub_file_written);
}

static void
sub_file_written(struct fileio_job *job)
{
	struct pending		*p = job->arg;
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);
	struct stat		 st;

	if (sub_file_result(p, job) != 0) {
		if (errno != EEXIST) {
			sub_fail_storage(p, errno, "writing the file");
			return;
		}
		if (!lc->fresh) {
			/*
			 * Someone put something there since we looked.  A
			 * file is judged by its content; anything else at
			 * the name (a symlink, never followed; a directory)
			 * is not this submission's file, and looking again
			 * would find nothing and try again for ever.
			 */
			if (nofollow_lstat(s->ops->dir_fd(d), job->name, &st) ==
			    0 && !S_ISREG(st.st_mode)) {
				log_warnx("submission %s: %s is not a regular "
				    "file (a symlink?); left alone",
				    s->submission_id, job->name);
				sub_conflict(p, REASON_TARGET_MISMATCH,
				    "the reserved path holds something that "
				    "is not a file of this submission");
				return;
			}
			sub_resolve_reserved(p);
			return;
		}
		/*
		 * Another FCoP writer took the name while this first call
		 * was in flight; nothing was promised yet, so move to a
		 * fresh number and reserve it durably before writing.  With
		 * no number left today the reservation stays durable under
		 * the name the other writer took, and a retry answers
		 * conflict target_mismatch (doc/protocol.md).
		 */
		if (seqalloc_next(&d->seg, s->ops->kind,
		    taskfile_date_of(shm_now_ms()), paths_scan_max_seq, d,
		    &s->entry.date, &s->entry.seq) != 0) {
			sub_fail_alloc(p, errno);
			return;
		}
		log_warnx("%s was taken by another writer; submission %s "
		    "moves to number %u", s->name, s->submission_id,
		    s->entry.seq);
		submission_set_name(s);
		sub_journal(p, sub_reserved);
		return;
	}
	s->wrote_file = 1;
	s->entry.created_at_ms = lc->file_time;
	sub_record_file(p);
}

/* TASK_CREATED is durable. */
static void
sub_file_recorded(struct pending *p)
{
	struct submission	*s = sub_of(p);

	if (sub_journal_failed(p))
		return;
	sub_crash_point(s, CRASH_AFTER_TASK_CREATED_DURABLE);
	s->entry.state = SUBTAB_COMMITTED;
	s->entry.updated_at_ms = shm_now_ms();
	sub_journal(p, sub_committed);
}

/* A retry of task_created, its state recorded again: is the file there? */
static void
sub_recover_created(struct pending *p)
{
	struct submission	*s = sub_of(p);
	char			 path[IDEM_MAX_TASK_PATH_BYTES];
	int			 found;

	if (sub_journal_failed(p))
		return;
	s->recovered = 1;
	found = taskfile_find(idemd_of(p)->root_fd, s->name, path,
	    sizeof path);
	if (found < 0) {
		sub_fail_storage(p, errno, "looking for the file");
		return;
	}
	if (found == 0) {
		log_warnx("submission %s: %s was created but is nowhere in "
		    "the workspace", s->submission_id, s->name);
		sub_conflict(p, REASON_TASK_MISSING, "the submission's file "
		    "was created but is gone");
		return;
	}
	s->entry.state = SUBTAB_COMMITTED;
	s->entry.updated_at_ms = shm_now_ms();
	sub_journal(p, sub_committed);
}

/* COMMIT is durable. */
static void
sub_committed(struct pending *p)
{
	struct submission	*s = sub_of(p);

	if (sub_journal_failed(p))
		return;
	sub_crash_point(s, CRASH_AFTER_COMMIT_DURABLE);
	sub_answer(p, s->wrote_file);
}

/* Legacy: no submission id, a new file every time. */
static void	sub_legacy_written(struct fileio_job *);

static void
sub_legacy(struct pending *p)
{
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);
	struct idemd		*d = idemd_of(p);

	if (++lc->attempts > 1000) {
		sub_fail(p, WIRE_INTERNAL, 1,
		    "every number tried was taken by another writer");
		return;
	}
	if (seqalloc_next(&d->seg, s->ops->kind, taskfile_date_of(shm_now_ms()),
	    paths_scan_max_seq, d, &s->entry.date, &s->entry.seq) != 0) {
		sub_fail_alloc(p, errno);
		return;
	}
	submission_set_name(s);
	sub_put_file(p, sub_legacy_written);
}

static void
sub_legacy_written(struct fileio_job *job)
{
	struct pending		*p = job->arg;
	struct submission	*s = sub_of(p);
	struct local_create	*lc = lc_of(p);

	if (sub_file_result(p, job) != 0) {
		if (errno == EEXIST)
			sub_legacy(p);		/* the next number */
		else
			sub_fail_storage(p, errno, "writing the file");
		return;
	}
	s->wrote_file = 1;
	s->entry.created_at_ms = lc->file_time;
	s->entry.state = SUBTAB_COMMITTED;
	s->entry.updated_at_ms = shm_now_ms();
	/* Recorded so that the number is never handed out again. */
	sub_journal(p, sub_legacy_done);
}

static void
sub_legacy_done(struct pending *p)
{
	if (sub_journal_failed(p))
		return;
	sub_answer(p, 1);
}
