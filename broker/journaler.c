/* SPDX-License-Identifier: ISC */
/*
 * journaler.c: the master's journaling thread, the only writer of the
 * journal, and its checkpoint thread.
 *
 * DESIGN
 *
 * Workers append encoded records to the hand-off ring and kick an
 * eventfd.  The thread sleeps on that eventfd (after a round that wrote,
 * it first looks for the next record a moment: journaler_linger); when
 * woken it takes everything appended so far, writes it with one writev,
 * makes it durable with one fdatasync, publishes the new durable
 * position and wakes the workers whose loops have a request parked
 * (each worker's loop_waiters).  Records that arrive while it is
 * flushing wait for the next
 * round and share its fdatasync: that is the group commit.
 *
 * The gather: a round that has records to write first waits, at most
 * IDEM_JOURNAL_GATHER_US, for the carriers (fileio.c, FILEIO_CARRY) that
 * were between their reservation's durability and their commit's append
 * when it began: their commits are a directory fsync away, and would
 * otherwise cost a round of their own right after this one.  The round
 * flips carrier_phase and waits for the old phase's count to drain;
 * carriers that enter meanwhile count in the new phase and are not
 * waited for, so one round never waits for more than the bound, nor for
 * creations that were not yet linking.  With no other creation in flight
 * there is nobody to wait for: a lone carrier leaves its count before it
 * kicks the journaler for its commit.  Nothing is acknowledged earlier
 * for it: waiting only delays the writev and the fdatasync.
 *
 * A failed write or fdatasync is never retried: after a failed fsync the
 * kernel may have dropped the dirty pages, and a second fsync that
 * succeeds would prove nothing.  The thread marks the journal failed
 * (an odd journal epoch, handoff.c), drops what it took, and wakes the
 * workers, which answer storage_unavailable to everything that waited
 * on a dropped record and refuse what needs a new one, while they go
 * on answering what needs none.  Then, with the workers running, it
 * reopens the journal itself (journaler_reopen): cut back to the last
 * size known durable (nothing past it was acknowledged), open it again
 * through a new descriptor and check its header, read it back to find
 * the durable state of every slot that moved on with a dropped record,
 * and set those slots back under the table lock, in the same hold as it
 * drops what the ring still holds and ends the failed epoch.  A reopen
 * that fails (the disk still fails) is tried again every
 * IDEM_JOURNAL_REOPEN_RETRY_MS; writes are refused until one succeeds.
 *
 * When the current segment has grown past JOURNAL_SEGMENT_BYTES, the
 * thread starts a new segment between two rounds and hands its number to
 * the checkpoint thread, which snapshots the table and then removes what
 * the snapshot made redundant (checkpoint.c).  One checkpoint at a time;
 * a rotation while one runs waits for the next round.
 *
 * What the table and the arena want before the segment is full (the
 * arena's scout, a full table, capacity/2+1 committed entries not in the
 * index) is the index's puts, which make entries evictable and results
 * reusable, not a copy of the table: the checkpoint thread runs an index
 * pass (checkpoint_index_pass) instead, with no new segment, no file and
 * no prune.  The segments still hold every record until the next
 * rotation's checkpoint, so a lost index can be rebuilt from them as
 * before.  Passes and checkpoints take turns on the one thread, both
 * under checkpoint_running; a pass is asked for only when a record was
 * appended since the last one began (else it would find nothing new),
 * or a second after one failed.
 *
 * After a round that wrote records, too, it keeps zeros ahead of the
 * segment's logical end (journal_prezero, doc/journal.md "The zero
 * tail"; never while idle, so a reader sees an idle journal still): the
 * next rounds' records then overwrite blocks already allocated, and
 * their fdatasync commits no size or block map.  The zeros get no
 * fdatasync of their own: the next round's covers them, and nothing
 * relies on them.  A failure to write them is not a journal failure
 * (nothing was acknowledged by zeros): logged once, appends go on
 * extending the file, and journal_prezero tries again a second later.
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"

/* After a failed checkpoint, the next of the same segment (see below). */
#define JOURNALER_CHECKPOINT_RETRY_MS	1000

static struct journaler {
	struct idemd	*d;
	pthread_t	 thread;
	int		 running;
	_Atomic int	 stop;
	int		(*broadcast)(void *, int all);
	void		*broadcast_arg;
	/* Where the journal was last known durable: for a reopen. */
	uint64_t	 durable_segment;
	uint64_t	 durable_size;

	/* The checkpoint thread. */
	pthread_t	 checkpointer;
	pthread_mutex_t	 lock;
	pthread_cond_t	 wake;
	uint64_t	 checkpoint_segment;	/* to do; 0: nothing */
	int		 index_pass;		/* one to do */
	/* Where the journal was when the last pass was asked for. */
	uint64_t	 pass_segment;
	uint64_t	 pass_size;
	uint64_t	 rotate_after;		/* after a failed rotation */
	/*
	 * A checkpoint under way is the segment's checkpoint_running
	 * (written under lock), which the arena's scout reads too.
	 */
	int		 checkpoint_stop;
	/* The last checkpoint failed, at that time (shm_now_ms()). */
	int		 checkpoint_failed;
	int64_t		 checkpoint_failed_at;
	/*
	 * A rotation's checkpoint that failed, to do again while its segment
	 * is the current one (journaler_retry_checkpoint); 0: none.
	 */
	uint64_t	 checkpoint_retry;
	/*
	 * The next segment made ahead by the checkpoint thread (fd -1:
	 * none ready), and the number the journaling thread wants made (0:
	 * none).  Only the journaling thread asks, and only once it is done
	 * with the one it took; each number has its own file, so the two
	 * never make, rename or drop the same file at once.
	 */
	struct journal_next next;
	uint64_t	 next_wanted;
	int		 next_making;	/* taken off next_wanted, not yet in next */
	/*
	 * The file system cannot rename one into place (renameat2 with
	 * RENAME_NOREPLACE: EINVAL, ENOSYS): none is made from then on,
	 * rather than 2 MiB written, synced and dropped at every rotation.
	 */
	int		 next_unsupported;
	int		 next_rename_logged;	/* a failed rename was logged */

	/* While the journal is failed. */
	int64_t		 reopen_at;	/* next try, shm_now_ms() */
	char		*reopen_cause;	/* the last failure logged */

	/* Writing zeros ahead failed, and was logged. */
	int		 zero_failing;
	/* journaler_linger's bound (IDEM_JOURNAL_LINGER_US) and its gate. */
	int64_t		 linger_us;
	uint32_t	 spin_max_connections;	/* IDEM_SPIN_MAX_CONNECTIONS */
} journaler;

void
journaler_kick(int kick_fd)
{
	uint64_t	one = 1;

	/* Fails only if the counter would overflow: it is then woken anyway. */
	while (write(kick_fd, &one, sizeof one) == -1 && errno == EINTR)
		;
}

/*
 * Kick only a journaler that sleeps or is about to (it says so first,
 * then looks at the ring: whichever of it and an appender comes second
 * sees the other).  A busy one finds the records when its round ends:
 * a write and a read of the eventfd fewer per record.  The flag is
 * cleared by the journaler when it wakes, never by an appender: one
 * killed between reading it and kicking leaves it set for the next.
 */
void
journaler_kick_idle(struct shm_header *h, int kick_fd)
{
	if (atomic_load(&h->journaler_idle) != 0)
		journaler_kick(kick_fd);
}

/*
 * After a batch of appends and carriers' leaves that did not kick
 * (fileio.c, a directory round's commits): one kick for them all, if
 * the journaler sleeps or gathers.  Each flag is read after the appends
 * and leaves, as journaler_kick_idle and journaler_carrier_leave read
 * theirs, so the journaler misses none of them.
 */
void
journaler_kick_batch(struct shm_header *h, int kick_fd)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&h->journaler_idle) != 0 ||
	    atomic_load(&h->journaler_gathering) != 0)
		journaler_kick(kick_fd);
}

/*
 * A file thread whose reservation is durable is about to link and then
 * append its commit: count it in the current phase.  The phase to leave
 * from is returned.
 */
unsigned
journaler_carrier_enter(struct shm_header *h, unsigned worker)
{
	unsigned	phase = atomic_load(&h->carrier_phase) & 1;

	atomic_fetch_add(&h->workers[worker].carriers[phase], 1);
	return phase;
}

/*
 * Its commit is in the ring (or it gave up).  Called before the kick
 * for that commit, so that a journaler woken by the kick does not wait
 * for the very carrier that woke it.  A carrier that leaves while the
 * journaler gathers wakes it to count again (both sides write, fence,
 * then read the other's flag: one of them sees the other).  kick_fd -1:
 * the caller kicks later (journaler_kick_batch).
 */
void
journaler_carrier_leave(struct shm_header *h, unsigned worker,
    unsigned phase, int kick_fd)
{
	atomic_fetch_sub(&h->workers[worker].carriers[phase], 1);
	if (kick_fd != -1 && atomic_load(&h->journaler_gathering))
		journaler_kick(kick_fd);
}

/* The carriers of one phase, every worker's. */
static uint32_t
journaler_carriers(struct shm_header *h, unsigned phase)
{
	uint32_t	n = 0, i;

	for (i = 0; i < h->worker_count && i < SHM_MAX_WORKERS; i++)
		n += atomic_load(&h->workers[i].carriers[phase]);
	return n;
}

/*
 * Before a round's writev: wait for the carriers of the phase that ends
 * here, at most IDEM_JOURNAL_GATHER_US (the top of the file).
 */
static void
journaler_gather(struct idemd *d)
{
	struct shm_header	*h = d->seg.header;
	struct pollfd		 pfd;
	struct timespec		 ts;
	uint64_t		 kicks;
	int64_t			 start, left;
	unsigned		 phase;

	phase = atomic_fetch_add(&h->carrier_phase, 1) & 1;
	if (journaler_carriers(h, phase) == 0)
		return;
	start = clock_monotonic_us();
	atomic_store(&h->journaler_gathering, 1);
	atomic_thread_fence(memory_order_seq_cst);
	while (journaler_carriers(h, phase) != 0 &&
	    !atomic_load(&journaler.stop)) {
		left = start + IDEM_JOURNAL_GATHER_US - clock_monotonic_us();
		if (left <= 0)
			break;
		ts.tv_sec = left / 1000000;
		ts.tv_nsec = (left % 1000000) * 1000;
		pfd.fd = d->kick_fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (ppoll(&pfd, 1, &ts, NULL) == -1) {
			if (errno != EINTR)
				fatal("journaler: polling its eventfd");
			continue;
		}
		if ((pfd.revents & POLLIN) && read(d->kick_fd, &kicks,
		    sizeof kicks) == -1 && errno != EINTR && errno != EAGAIN)
			fatal("journaler: reading its eventfd");
	}
	atomic_store(&h->journaler_gathering, 0);
}

static void
journaler_fail(struct idemd *d, uint64_t end, const char *what, char *cause)
{
	log_warnx("journal %s failed: %s; refusing writes until the journal "
	    "is reopened and verified", what, cause);
	free(cause);
	handoff_failed(&d->seg);
	handoff_taken(&d->seg, end);
	/* The first try at once: a full disk may well take a truncate. */
	journaler.reopen_at = shm_now_ms();
}

/* The unsettled slots, ordered by key, and what replay found of them. */
struct reopen_lookup {
	struct subtab_unsettled	**rows;
	size_t			  count;
};

static int
reopen_compare(const void *a, const void *b)
{
	const struct subtab_unsettled	*x = *(struct subtab_unsettled *const *)a;
	const struct subtab_unsettled	*y = *(struct subtab_unsettled *const *)b;

	if (x->key_length != y->key_length)
		return x->key_length < y->key_length ? -1 : 1;
	return memcmp(x->key, y->key, x->key_length);
}

static int
reopen_find(const void *key, const void *member)
{
	const struct journal_record	*r = key;
	const struct subtab_unsettled	*y =
	    *(struct subtab_unsettled *const *)member;

	if (r->entry.key_length != y->key_length)
		return r->entry.key_length < y->key_length ? -1 : 1;
	return memcmp(r->key, y->key, y->key_length);
}

/* Replay, read-only: the last durable record of each unsettled key. */
static int
reopen_apply(const struct journal_record *r, void *arg)
{
	struct reopen_lookup		 *l = arg;
	struct subtab_unsettled		**found;

	if (r->entry.key_length == 0)
		return 0;
	found = bsearch(r, l->rows, l->count, sizeof *l->rows, reopen_find);
	if (found != NULL) {
		(*found)->durable = 1;
		(*found)->entry = r->entry;
	}
	return 0;
}

/* The durable states of rows[0..count), from the checkpoint and journal. */
static int
reopen_lookup(const char *dir, struct subtab_unsettled *rows, size_t count,
    char **cause)
{
	struct store_loaded		 loaded;
	struct reopen_lookup		 l;
	size_t				 i;
	int				 rc;

	if ((l.rows = calloc(count, sizeof *l.rows)) == NULL) {
		asprintf(cause, "reopening the journal: out of memory");
		return -1;
	}
	for (i = 0; i < count; i++)
		l.rows[i] = &rows[i];
	l.count = count;
	qsort(l.rows, count, sizeof *l.rows, reopen_compare);
	rc = store_load(dir, JOURNAL_REPLAY_READONLY, reopen_apply, NULL, &l,
	    NULL, &loaded, cause);
	if (rc == 0 && loaded.stats.truncated_bytes != 0) {
		errno = EIO;
		asprintf(cause, "journal %s: %llu bytes past its durable end "
		    "after the cut", dir,
		    (unsigned long long)loaded.stats.truncated_bytes);
		rc = -1;
	}
	free(l.rows);
	return rc;
}

/*
 * After a failure, with the workers serving: cut the journal back to
 * the last size known durable, open it again and check it, then set
 * every slot that moved on with a lost record back to its durable state
 * (subtab_settle).  0 when writes may resume.
 */
static int
journaler_reopen(struct idemd *d, char **cause)
{
	struct subtab_unsettled	*rows = NULL;
	char			 dir[PATH_MAX];
	uint64_t		 lost_from;
	size_t			 count = 0, settled = 0;
	int			 busy, tries, rc;

	/* A checkpoint being written may prune what the replay reads. */
	pthread_mutex_lock(&journaler.lock);
	busy = atomic_load(&d->seg.header->checkpoint_running);
	pthread_mutex_unlock(&journaler.lock);
	if (busy) {
		asprintf(cause, "a checkpoint is being written; waiting");
		return -1;
	}
	/* It fit at start-up (state_open): root_real is the same. */
	(void)paths_journal_dir(d, dir, sizeof dir);
	journal_close(&d->journal);
	if (journal_cut(d->journal_dir_fd, dir, journaler.durable_segment,
	    journaler.durable_size, cause) != 0 ||
	    journal_open_at(&d->journal, d->journal_dir_fd, dir, cause) != 0)
		return -1;
	if (d->journal.segment != journaler.durable_segment ||
	    d->journal.size != journaler.durable_size) {
		asprintf(cause, "journal %s: reopened at segment %llu, %llu "
		    "bytes, not at the durable end (segment %llu, %llu bytes)",
		    dir, (unsigned long long)d->journal.segment,
		    (unsigned long long)d->journal.size,
		    (unsigned long long)journaler.durable_segment,
		    (unsigned long long)journaler.durable_size);
		journal_close(&d->journal);
		return -1;
	}
	lost_from = atomic_load(&d->seg.header->ring_lost_from);
	/* Slots can only join the set meanwhile; a few rounds settle it. */
	for (tries = 0, rc = 1; rc == 1 && tries < 8; tries++) {
		if (subtab_unsettled(&d->seg, lost_from, &rows, &count) != 0) {
			asprintf(cause, "reopening the journal: the table is "
			    "unusable");
			return -1;
		}
		if (count > 0 && reopen_lookup(dir, rows, count, cause) != 0) {
			free(rows);
			return -1;
		}
		rc = subtab_settle(&d->seg, lost_from, rows, count);
		settled = count;
		free(rows);
		rows = NULL;
	}
	if (rc != 0) {
		asprintf(cause, "reopening the journal: %s", rc < 0 ?
		    "the table is unusable" : "the table kept changing");
		return -1;
	}
	log_info("journal reopened and verified at segment %llu, %llu bytes; "
	    "%zu submission%s set back to %s durable state; accepting "
	    "writes again", (unsigned long long)d->journal.segment,
	    (unsigned long long)d->journal.size, settled, log_plural(settled),
	    settled == 1 ? "its" : "their");
	return 0;
}

/* One try; a failure is logged when its cause changes, not every time. */
static int
journaler_try_reopen(struct idemd *d)
{
	char	*cause = NULL;

	if (journaler_reopen(d, &cause) == 0) {
		free(journaler.reopen_cause);
		journaler.reopen_cause = NULL;
		return 0;
	}
	if (cause == NULL)
		cause = strdup("out of memory");
	if (journaler.reopen_cause == NULL || cause == NULL ||
	    strcmp(journaler.reopen_cause, cause) != 0)
		log_warnx("reopening after the journal failure: %s; trying "
		    "again every %d ms", cause != NULL ? cause : "?",
		    IDEM_JOURNAL_REOPEN_RETRY_MS);
	free(journaler.reopen_cause);
	journaler.reopen_cause = cause;
	journaler.reopen_at = shm_now_ms() + IDEM_JOURNAL_REOPEN_RETRY_MS;
	return -1;
}

/*
 * Sleep on the eventfd; with a timeout while a reopen is due.  Without
 * one, a read of the (blocking) eventfd is the sleep: one system call
 * a round instead of a poll and a read.
 */
static void
journaler_wait(int kick_fd, int64_t timeout_ms)
{
	struct pollfd	pfd;
	uint64_t	kicks;

	if (timeout_ms < 0) {
		if (read(kick_fd, &kicks, sizeof kicks) == -1 &&
		    errno != EINTR)
			fatal("journaler: reading its eventfd");
		return;
	}
	pfd.fd = kick_fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms) ==
	    -1) {
		if (errno != EINTR)
			fatal("journaler: polling its eventfd");
		return;
	}
	if ((pfd.revents & POLLIN) && read(kick_fd, &kicks, sizeof kicks) ==
	    -1 && errno != EINTR && errno != EAGAIN)
		fatal("journaler: reading its eventfd");
}

/*
 * The checkpoint thread, journaler.lock held (dropped meanwhile): make
 * the segment the journaling thread wants next, so that its rotation
 * finds it created, zeroed and synced (doc/journal.md, "The next
 * segment made ahead").  A failure is not the journal's: the rotation
 * creates the segment itself, as without one made ahead.
 */
static void
checkpoint_make_next(struct idemd *d, const char *dir)
{
	struct journal_next	 old, made;
	uint64_t		 number;
	char			*cause = NULL;

	number = journaler.next_wanted;
	journaler.next_wanted = 0;
	journaler.next_making = 1;
	old = journaler.next;
	journaler.next.fd = -1;
	if (old.fd != -1 && old.number == number)
		made = old;
	else {
		pthread_mutex_unlock(&journaler.lock);
		journal_drop_next(d->journal_dir_fd, &old);
		if (journal_make_next(d->journal_dir_fd, dir, number,
		    d->segment_bytes, &made, &cause) != 0) {
			log_warnx("%s; the rotation will create it",
			    cause != NULL ? cause :
			    "journal: making the next segment ahead failed");
			free(cause);
		}
		pthread_mutex_lock(&journaler.lock);
	}
	journaler.next = made;
	journaler.next_making = 0;
	/*
	 * Said once the rotation no longer waits for it (next_making
	 * cleared, under the lock it reads it under): a rotation due from
	 * now on takes it at once.  One due while it was made waits for
	 * the next round (unless a checkpoint is wanted, below), so the
	 * crash-state explorer sends its rotating request only after this.
	 */
	if (made.fd != -1)
		log_debug("journal: segment %016llx made ahead",
		    (unsigned long long)number);
	else
		log_debug("journal: segment %016llx not made ahead: its "
		    "rotation creates it", (unsigned long long)number);
	/*
	 * A rotation waited for this one (journaler_maybe_rotate); an index
	 * pass wanted by a full table or arena is asked for now, as after a
	 * checkpoint: its refusals write no record, so there may be no
	 * round to look after.
	 */
	if (atomic_load(&d->seg.header->checkpoint_wanted))
		journaler_kick(d->kick_fd);
}

static void *
checkpoint_main(void *arg)
{
	struct idemd	*d = journaler.d;
	char		 dir[PATH_MAX], *cause = NULL;
	uint64_t	 segment, records, indexed;
	int		 failed, pass;

	/* It fit at start-up (state_open): root_real is the same. */
	(void)paths_journal_dir(d, dir, sizeof dir);
	pthread_mutex_lock(&journaler.lock);
	for (;;) {
		while (journaler.checkpoint_segment == 0 &&
		    !journaler.index_pass && journaler.next_wanted == 0 &&
		    !journaler.checkpoint_stop)
			pthread_cond_wait(&journaler.wake, &journaler.lock);
		if (journaler.checkpoint_stop)
			break;
		/* A pass first: a full table or arena waits for it. */
		if (journaler.checkpoint_segment == 0 &&
		    !journaler.index_pass) {
			checkpoint_make_next(d, dir);
			continue;
		}
		segment = journaler.checkpoint_segment;
		pass = segment == 0;
		journaler.checkpoint_segment = 0;
		journaler.index_pass = 0;
		pthread_mutex_unlock(&journaler.lock);

		if (pass) {
			failed = checkpoint_index_pass(&d->seg, &d->index,
			    &indexed, &cause) != 0;
			if (!failed)
				log_info("index pass: %llu new in the index",
				    (unsigned long long)indexed);
			else {
				/* Entries stay unindexed; a second later. */
				log_warnx("%s", cause);
				free(cause);
				cause = NULL;
			}
		} else if (checkpoint_write(d->journal_dir_fd, dir, segment,
		    &d->seg, d->index_ready ? &d->index : NULL,
		    &d->index_only, &records, &indexed, &cause) == 0) {
			log_info("checkpoint checkpoint-%016llx.snap: %llu "
			    "new in the index, %llu submission%s",
			    (unsigned long long)segment,
			    (unsigned long long)indexed,
			    (unsigned long long)records, log_plural(records));
			checkpoint_prune(d->journal_dir_fd, segment);
			failed = 0;
		} else {
			/* The segments stay: nothing is lost, only space. */
			log_warnx("%s", cause);
			free(cause);
			cause = NULL;
			failed = 1;
		}

		pthread_mutex_lock(&journaler.lock);
		atomic_store(&d->seg.header->checkpoint_running, 0);
		journaler.checkpoint_failed = failed;
		if (failed)
			journaler.checkpoint_failed_at = shm_now_ms();
		if (!pass)
			journaler.checkpoint_retry = failed ? segment : 0;
		/*
		 * A worker that found the table full while this one ran
		 * asked for another: the journaler looks again now, not at
		 * the next record (there may be none until it does).
		 */
		if (atomic_load(&d->seg.header->checkpoint_wanted))
			journaler_kick(d->kick_fd);
	}
	pthread_mutex_unlock(&journaler.lock);
	return NULL;
}

/*
 * A segment made ahead that journal_rotate_next could not rename into
 * place (error, 0 if none failed): the rotation created its segment
 * instead.  Said once, with why; a file system without RENAME_NOREPLACE
 * gets none made ahead from then on.
 */
static void
journaler_rename_failed(int error)
{
	if (error == 0)
		return;
	if (error == EINVAL || error == ENOSYS) {
		journaler.next_unsupported = 1;
		log_notice("journal: the segment made ahead cannot be renamed "
		    "into place here (renameat2 RENAME_NOREPLACE: %s): "
		    "segments are created at their rotation from now on",
		    strerror(error));
		return;
	}
	if (!journaler.next_rename_logged)
		log_warnx("journal: the segment made ahead could not be "
		    "renamed into place (%s): the rotation created its "
		    "segment", strerror(error));
	journaler.next_rename_logged = 1;
}

/*
 * Between rounds, the table or the arena wanting the index's puts and
 * the segment not full: an index pass, unless one (or a checkpoint) is
 * under way (the checkpoint thread kicks this thread when it ends), or
 * nothing was appended since the last one was asked for and it did not
 * fail: a full table's refusals write no record, and a pass over the
 * same table would find nothing new.  After a failure (the index
 * refused a write) one again a second later, for the same reason:
 * waiting for a record could wait for ever.
 */
static void
journaler_want_index_pass(struct idemd *d)
{
	int	moved, again;

	pthread_mutex_lock(&journaler.lock);
	if (atomic_load(&d->seg.header->checkpoint_running)) {
		pthread_mutex_unlock(&journaler.lock);
		return;
	}
	moved = d->journal.segment != journaler.pass_segment ||
	    d->journal.size != journaler.pass_size;
	again = journaler.checkpoint_failed && shm_now_ms() -
	    journaler.checkpoint_failed_at >= JOURNALER_CHECKPOINT_RETRY_MS;
	if (moved || again) {
		atomic_store(&d->seg.header->checkpoint_wanted, 0);
		atomic_store(&d->seg.header->checkpoint_running, 1);
		journaler.index_pass = 1;
		journaler.pass_segment = d->journal.segment;
		journaler.pass_size = d->journal.size;
		pthread_cond_signal(&journaler.wake);
	}
	pthread_mutex_unlock(&journaler.lock);
}

/*
 * A rotation's checkpoint that failed (the journal failed while it
 * copied, the index refused a write or could not be counted): again at
 * the first round a second or more after, while its segment is still
 * the current one.  Only rounds that append records (or want an index
 * pass) look, so an idle broker retries at its next records
 * (doc/journal.md, "A failed checkpoint").  Not at the next rotation:
 * until one succeeds, the segments before it stay, a whole segment's
 * worth or more, and start-up replays them all.
 */
static void
journaler_retry_checkpoint(struct idemd *d)
{
	pthread_mutex_lock(&journaler.lock);
	if (journaler.checkpoint_retry != 0 &&
	    journaler.checkpoint_retry == d->journal.segment &&
	    !atomic_load(&d->seg.header->checkpoint_running) &&
	    shm_now_ms() - journaler.checkpoint_failed_at >=
	    JOURNALER_CHECKPOINT_RETRY_MS) {
		journaler.checkpoint_retry = 0;
		atomic_store(&d->seg.header->checkpoint_running, 1);
		journaler.checkpoint_segment = d->journal.segment;
		pthread_cond_signal(&journaler.wake);
	}
	pthread_mutex_unlock(&journaler.lock);
}

/*
 * Between rounds: a new segment if this one is full, and its checkpoint;
 * else an index pass if the table or the arena wants one.
 */
static void
journaler_maybe_rotate(struct idemd *d)
{
	struct journal_next	 next;
	char			*cause = NULL;
	uint64_t		 next_number;
	int			 busy, wanted, made_ahead, rc;

	/*
	 * The table is a cache of the index: committed entries become
	 * evictable only once the index has them, so a table half full of
	 * them (or one that refused a key, or a result arena full of
	 * results not in the index) wants an index pass before the segment
	 * is full; a full segment's checkpoint gives the index the same.
	 */
	wanted = d->index_ready &&
	    (atomic_load(&d->seg.header->checkpoint_wanted) ||
	    subtab_unindexed(&d->seg) >= d->capacity / 2 + 1);
	journaler_retry_checkpoint(d);
	if (d->journal.size < d->segment_bytes ||
	    d->journal.size < journaler.rotate_after) {
		if (wanted)
			journaler_want_index_pass(d);
		return;
	}
	pthread_mutex_lock(&journaler.lock);
	/*
	 * A rotation waits for the checkpoint before it and for the segment
	 * being made ahead (as long as the device takes to write its zeros,
	 * 2 MiB at the default size, one paced 256 KiB piece after another,
	 * and one fsync: the rounds go on meanwhile), so that
	 * two rotations close together (the bench's) both find theirs; one
	 * that could not be made (a nearly full disk) leaves none wanted,
	 * and the rotation creates the segment itself.  (What a full table
	 * or arena wants is an index pass, not a rotation: above.)
	 */
	busy = atomic_load(&d->seg.header->checkpoint_running) ||
	    journaler.next_wanted != 0 || journaler.next_making;
	/* The segment made ahead, if it is ready: this thread's now. */
	next = journaler.next;
	if (!busy)
		journaler.next.fd = -1;
	pthread_mutex_unlock(&journaler.lock);
	if (busy)
		return;
	made_ahead = next.fd != -1 && next.number == d->journal.segment + 1;
	next.rename_errno = 0;
	if (made_ahead)
		crash_point(CRASH_BEFORE_NEXT_SEGMENT_RENAMED);
	rc = journal_rotate_next(&d->journal, &next, &cause);
	journaler_rename_failed(next.rename_errno);
	/* The segment after the live one, to make ahead (0: none). */
	next_number = journaler.next_unsupported ? 0 :
	    d->journal.segment + 1;
	if (rc != 0) {
		log_warnx("%s; going on with the current segment", cause);
		free(cause);
		/* Not again every round: after another eighth of a segment. */
		journaler.rotate_after = d->journal.size +
		    d->segment_bytes / 8;
		pthread_mutex_lock(&journaler.lock);
		journaler.next_wanted = next_number;
		pthread_cond_signal(&journaler.wake);
		pthread_mutex_unlock(&journaler.lock);
		return;
	}
	/* zeroed past the header: it was the one made ahead. */
	if (made_ahead && d->journal.zeroed > JOURNAL_SEGMENT_HEADER_BYTES)
		crash_point(CRASH_AFTER_NEXT_SEGMENT_RENAMED);
	else
		log_info("journal: segment %016llx created at its rotation "
		    "(none was made ahead)",
		    (unsigned long long)d->journal.segment);
	journaler.rotate_after = 0;
	atomic_store(&d->seg.header->checkpoint_wanted, 0);
	journaler.durable_segment = d->journal.segment;
	journaler.durable_size = d->journal.size;
	pthread_mutex_lock(&journaler.lock);
	atomic_store(&d->seg.header->checkpoint_running, 1);
	journaler.checkpoint_segment = d->journal.segment;
	/* After its checkpoint, the segment after it. */
	journaler.next_wanted = next_number;
	pthread_cond_signal(&journaler.wake);
	pthread_mutex_unlock(&journaler.lock);
}

/* Between rounds: zeros ahead of the logical end (top of the file). */
static void
journaler_prezero(struct idemd *d)
{
	char	*cause = NULL;

	if (journal_prezero(&d->journal, d->segment_bytes, &cause) == 0) {
		/* zero_retry_at 0: not waiting to try again, so one passed. */
		if (journaler.zero_failing && d->journal.zero_retry_at == 0) {
			log_info("journal: writing zeros ahead again");
			journaler.zero_failing = 0;
		}
		return;
	}
	if (!journaler.zero_failing)
		log_warnx("%s", cause != NULL ? cause : "journal: writing "
		    "zeros ahead failed (out of memory)");
	else
		log_debug("%s", cause != NULL ? cause : "out of memory");
	journaler.zero_failing = 1;
	free(cause);
}

/*
 * After a round that wrote records, look for the next record for at
 * most IDEM_JOURNAL_LINGER_US before sleeping on the eventfd, giving the
 * CPU to any other runnable thread between looks.  A lone client's next
 * record comes within it, and a thread asleep on a vCPU that halted
 * takes about 20 us to run again once kicked (doc/effects.md, "Where a
 * lone client's write goes"); a worker watching for the flush keeps the
 * other vCPU awake, so the two together take every wake-up of a halted
 * vCPU off a lone client's path.  journaler_idle stays 0 meanwhile:
 * appenders do not kick, and the look finds their records.  Tried alone
 * (the same section, its "Also tried and dropped") it gained nothing: the
 * worker's wake-up after the flush was still one of a halted vCPU.
 * Only for a lone client, as the watch (pending.c): with more than
 * IDEM_SPIN_MAX_CONNECTIONS connections open the thread sleeps at once.
 */
static void
journaler_linger(struct idemd *d)
{
	struct shm_header	*h = d->seg.header;
	int64_t			 start = clock_monotonic_us();

	/* Nor when something else wants a round: a stop, a checkpoint. */
	while (atomic_load(&h->connections) <= journaler.spin_max_connections &&
	    !handoff_has_pending(&d->seg) && !atomic_load(&journaler.stop) &&
	    !atomic_load(&h->checkpoint_wanted) &&
	    !atomic_load(&h->wake_requested) &&
	    clock_monotonic_us() - start < journaler.linger_us)
		sched_yield();
}

static void *
journaler_main(void *arg)
{
	struct idemd		*d = journaler.d;
	struct shm_header	*h = d->seg.header;
	struct iovec		 iov[2];
	uint64_t		 end, durable_before, epoch_before;
	int64_t			 timeout;
	char			*cause = NULL;
	int			 n = 0, wake, asked, failed, dropped;

	for (;;) {
		failed = atomic_load(&h->journal_failed);
		/* After a round that wrote: the next record, a moment. */
		if (n > 0 && !failed)
			journaler_linger(d);
		timeout = failed ? journaler.reopen_at - shm_now_ms() : -1;
		atomic_store(&h->journaler_idle, 1);
		atomic_thread_fence(memory_order_seq_cst);
		/*
		 * Unless appended to while the last round ran, or asked to
		 * stop: its kick may have been read with another (here or
		 * in the gather), and a wait would never end.
		 */
		if (!atomic_load(&journaler.stop) &&
		    (failed || !handoff_has_pending(&d->seg)))
			journaler_wait(d->kick_fd, failed && timeout < 0 ? 0 :
			    timeout);
		atomic_store(&h->journaler_idle, 0);
		if (!failed && handoff_has_pending(&d->seg))
			journaler_gather(d);
		wake = asked = atomic_exchange(&h->wake_requested, 0);
		dropped = 0;
		durable_before = atomic_load(&h->ring_durable);
		epoch_before = handoff_epoch(h);
		n = handoff_pending(&d->seg, iov, &end);
		if (n > 0 && failed) {
			/* Never written: their waiters get storage_unavailable. */
			handoff_taken(&d->seg, end);
			wake = dropped = 1;
		} else if (n > 0) {
			wake = 1;
			if (journal_append(&d->journal, iov, n, &cause) != 0)
				journaler_fail(d, end, "write", cause);
			else {
				handoff_taken(&d->seg, end);
				if (journal_sync(&d->journal, &cause) != 0)
					journaler_fail(d, end, "fsync", cause);
				else {
					crash_journal_flushed(&d->journal,
					    iov, n);
					atomic_fetch_add(
					    &h->counters.journal_fsyncs, 1);
					journaler.durable_segment =
					    d->journal.segment;
					journaler.durable_size =
					    d->journal.size;
					handoff_durable(&d->seg, end);
				}
			}
			cause = NULL;
		}
		/* Waiters on dropped records hear it before a reopen reads
		 * the journal back. */
		if (wake) {
			/* File threads carrying a creation; all if the epoch
			 * moved (from == to). */
			handoff_wake(&d->seg, durable_before,
			    handoff_epoch(h) == epoch_before ?
			    atomic_load(&h->ring_durable) : durable_before);
			/*
			 * The loops: all if asked, if the epoch moved or if
			 * records were dropped (neither ring_durable nor the
			 * epoch moves: a watching loop would not see it, and
			 * its requests would wait out the watch's bound for
			 * storage_unavailable), else only those where a
			 * request is parked (each worker's loop_waiters, read
			 * after ring_durable moved: a count not seen is of a
			 * request that judges durability after this flush
			 * published).
			 */
			journaler.broadcast(journaler.broadcast_arg, asked ||
			    dropped || handoff_epoch(h) != epoch_before);
		}
		if (atomic_load(&h->journal_failed) &&
		    !atomic_load(&journaler.stop) &&
		    shm_now_ms() >= journaler.reopen_at &&
		    journaler_try_reopen(d) == 0) {
			handoff_wake(&d->seg, 0, 0);
			journaler.broadcast(journaler.broadcast_arg, 1);
		}
		if ((n > 0 || atomic_load(&h->checkpoint_wanted)) &&
		    !atomic_load(&h->journal_failed))
			journaler_maybe_rotate(d);
		if (atomic_load(&journaler.stop) && n == 0)
			break;
		/* After a round that wrote; an idle journal is left alone. */
		if (n > 0 && !atomic_load(&h->journal_failed))
			journaler_prezero(d);
	}
	return NULL;
}

int
journaler_start(struct idemd *d, int (*broadcast)(void *, int all),
    void *arg)
{
	int	error;

	journaler.d = d;
	journaler.durable_segment = d->journal.segment;
	journaler.durable_size = d->journal.size;
	journaler.broadcast = broadcast;
	journaler.broadcast_arg = arg;
	journaler.checkpoint_segment = 0;
	journaler.index_pass = 0;
	journaler.pass_segment = 0;
	journaler.pass_size = 0;
	atomic_store(&d->seg.header->checkpoint_running, 0);
	journaler.checkpoint_stop = 0;
	journaler.checkpoint_failed = 0;
	journaler.checkpoint_retry = 0;
	journaler.rotate_after = 0;
	journaler.next.fd = -1;
	journaler.next_wanted = d->journal.segment + 1;
	journaler.next_making = 0;
	journaler.reopen_at = 0;
	journaler.reopen_cause = NULL;
	journaler.zero_failing = 0;
	journaler.linger_us = crash_journal_linger_us(IDEM_JOURNAL_LINGER_US);
	journaler.spin_max_connections =
	    crash_spin_max_connections(IDEM_SPIN_MAX_CONNECTIONS);
	atomic_store(&journaler.stop, 0);
	pthread_mutex_init(&journaler.lock, NULL);
	pthread_cond_init(&journaler.wake, NULL);
	if ((error = pthread_create(&journaler.checkpointer, NULL,
	    checkpoint_main, NULL)) != 0) {
		errno = error;
		return -1;
	}
	if ((error = pthread_create(&journaler.thread, NULL, journaler_main,
	    NULL)) != 0) {
		errno = error;
		return -1;
	}
	/*
	 * Their names in top -H and /proc (15 bytes at most, so never
	 * refused), beside the workers' "idemd worker N".
	 */
	(void)pthread_setname_np(journaler.checkpointer, "idemd checkpnt");
	(void)pthread_setname_np(journaler.thread, "idemd journal");
	journaler.running = 1;
	return 0;
}

/* After the workers are gone: flush what is left and join both threads. */
void
journaler_stop(void)
{
	char	*cause = NULL;

	if (!journaler.running)
		return;
	atomic_store(&journaler.stop, 1);
	journaler_kick(journaler.d->kick_fd);
	pthread_join(journaler.thread, NULL);
	/*
	 * A clean stop leaves records only: the next start writes its zeros
	 * again.  Not cut (a failure, or a journal failed): the zero tail
	 * is the last segment's clean end all the same.
	 */
	if (!atomic_load(&journaler.d->seg.header->journal_failed) &&
	    journaler.d->journal.fd != -1) {
		if (journal_cut_zeros(&journaler.d->journal, &cause) != 0) {
			log_warnx("%s; the next start reads it as the clean "
			    "end", cause != NULL ? cause : "journal: cutting "
			    "its zero tail failed");
			free(cause);
		}
	}
	/* A checkpoint under way finishes first: it is cheap to keep. */
	pthread_mutex_lock(&journaler.lock);
	journaler.checkpoint_stop = 1;
	pthread_cond_signal(&journaler.wake);
	pthread_mutex_unlock(&journaler.lock);
	pthread_join(journaler.checkpointer, NULL);
	/* A stopped broker's journal directory holds no file made ahead. */
	journal_drop_next(journaler.d->journal_dir_fd, &journaler.next);
	pthread_cond_destroy(&journaler.wake);
	pthread_mutex_destroy(&journaler.lock);
	free(journaler.reopen_cause);
	journaler.reopen_cause = NULL;
	journaler.running = 0;
}
