/*
 * journaler.c: the master's journaling thread, the only writer of the
 * journal, and its checkpoint thread.
 *
 * DESIGN
 *
 * Workers append encoded records to the hand-off ring and kick an
 * eventfd.  The thread sleeps on that eventfd; when woken it takes
 * everything appended so far, writes it with one writev, makes it durable
 * with one fdatasync, publishes the new durable position and wakes every
 * worker.  Records that arrive while it is flushing wait for the next
 * round and share its fdatasync: that is the group commit.
 *
 * A failed write or fdatasync is never retried: after a failed fsync the
 * kernel may have dropped the dirty pages, and a second fsync that
 * succeeds would prove nothing.  The thread marks the journal failed,
 * drops what it took, wakes the workers (which answer storage_unavailable
 * to everything still waiting and refuse new writes) and tells the
 * master, which reopens the state from the journal (master.c).
 *
 * When the current segment has grown past JOURNAL_SEGMENT_BYTES, the
 * thread starts a new segment between two rounds and hands its number to
 * the checkpoint thread, which snapshots the table and then removes what
 * the snapshot made redundant (checkpoint.c).  One checkpoint at a time;
 * a rotation while one runs waits for the next round.
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"

static struct journaler {
	struct idemd	*d;
	pthread_t	 thread;
	int		 running;
	_Atomic int	 stop;
	int		(*broadcast)(void *);
	void		*broadcast_arg;
	/* Where the journal was last known durable: for a reopen. */
	uint64_t	 durable_segment;
	uint64_t	 durable_size;

	/* The checkpoint thread. */
	pthread_t	 checkpointer;
	pthread_mutex_t	 lock;
	pthread_cond_t	 wake;
	uint64_t	 checkpoint_segment;	/* to do; 0: nothing */
	uint64_t	 rotate_after;		/* after a failed rotation */
	int		 checkpoint_busy;
	int		 checkpoint_stop;
} journaler;

void
journaler_kick(int kick_fd)
{
	uint64_t	one = 1;

	/* Fails only if the counter would overflow: it is then woken anyway. */
	while (write(kick_fd, &one, sizeof one) == -1 && errno == EINTR)
		;
}

static void
journaler_fail(struct idemd *d, uint64_t end, const char *what, char *cause)
{
	log_warnx("journal %s failed: %s; refusing writes until the state is "
	    "reopened from the journal", what, cause);
	free(cause);
	atomic_store(&d->seg.header->journal_failed, 1);
	handoff_taken(&d->seg, end);
	/* The master reopens the state from the journal (master.c). */
	kill(getpid(), SIGUSR1);
}

static void *
checkpoint_main(void *arg)
{
	struct idemd	*d = journaler.d;
	char		 dir[PATH_MAX], *cause = NULL;
	uint64_t	 segment;

	snprintf(dir, sizeof dir, "%s/%s", d->root_real, IDEM_JOURNAL_DIR);
	pthread_mutex_lock(&journaler.lock);
	for (;;) {
		while (journaler.checkpoint_segment == 0 &&
		    !journaler.checkpoint_stop)
			pthread_cond_wait(&journaler.wake, &journaler.lock);
		if (journaler.checkpoint_stop)
			break;
		segment = journaler.checkpoint_segment;
		journaler.checkpoint_segment = 0;
		pthread_mutex_unlock(&journaler.lock);

		if (checkpoint_write(dir, segment, &d->seg, &cause) == 0)
			checkpoint_prune(dir, segment);
		else {
			/* The segments stay: nothing is lost, only space. */
			log_warnx("%s", cause);
			free(cause);
			cause = NULL;
		}

		pthread_mutex_lock(&journaler.lock);
		journaler.checkpoint_busy = 0;
	}
	pthread_mutex_unlock(&journaler.lock);
	return NULL;
}

/* Between rounds: a new segment if this one is full, and its checkpoint. */
static void
journaler_maybe_rotate(struct idemd *d)
{
	char	*cause = NULL;
	int	 busy;

	if (d->journal.size < d->segment_bytes ||
	    d->journal.size < journaler.rotate_after)
		return;
	pthread_mutex_lock(&journaler.lock);
	busy = journaler.checkpoint_busy;
	pthread_mutex_unlock(&journaler.lock);
	if (busy)
		return;
	if (journal_rotate(&d->journal, &cause) != 0) {
		log_warnx("%s; going on with the current segment", cause);
		free(cause);
		/* Not again every round: after another eighth of a segment. */
		journaler.rotate_after = d->journal.size +
		    d->segment_bytes / 8;
		return;
	}
	journaler.rotate_after = 0;
	journaler.durable_segment = d->journal.segment;
	journaler.durable_size = d->journal.size;
	pthread_mutex_lock(&journaler.lock);
	journaler.checkpoint_busy = 1;
	journaler.checkpoint_segment = d->journal.segment;
	pthread_cond_signal(&journaler.wake);
	pthread_mutex_unlock(&journaler.lock);
}

static void *
journaler_main(void *arg)
{
	struct idemd		*d = journaler.d;
	struct shm_header	*h = d->seg.header;
	struct iovec		 iov[2];
	uint64_t		 kicks, end;
	char			*cause = NULL;
	int			 n, wake;

	for (;;) {
		if (read(d->kick_fd, &kicks, sizeof kicks) == -1 &&
		    errno != EINTR)
			fatal("journaler: reading its eventfd");
		wake = atomic_exchange(&h->wake_requested, 0);
		n = handoff_pending(&d->seg, iov, &end);
		if (n > 0 && atomic_load(&h->journal_failed)) {
			handoff_taken(&d->seg, end);
			wake = 1;
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
		if (wake)
			journaler.broadcast(journaler.broadcast_arg);
		if (n > 0 && !atomic_load(&h->journal_failed))
			journaler_maybe_rotate(d);
		if (atomic_load(&journaler.stop) && n == 0)
			break;
	}
	return NULL;
}

int
journaler_start(struct idemd *d, int (*broadcast)(void *), void *arg)
{
	int	error;

	journaler.d = d;
	journaler.durable_segment = d->journal.segment;
	journaler.durable_size = d->journal.size;
	journaler.broadcast = broadcast;
	journaler.broadcast_arg = arg;
	journaler.checkpoint_segment = 0;
	journaler.checkpoint_busy = 0;
	journaler.checkpoint_stop = 0;
	journaler.rotate_after = 0;
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
	journaler.running = 1;
	return 0;
}

/* After the workers are gone: flush what is left and join both threads. */
void
journaler_stop(void)
{
	if (!journaler.running)
		return;
	atomic_store(&journaler.stop, 1);
	journaler_kick(journaler.d->kick_fd);
	pthread_join(journaler.thread, NULL);
	/* A checkpoint under way finishes first: it is cheap to keep. */
	pthread_mutex_lock(&journaler.lock);
	journaler.checkpoint_stop = 1;
	pthread_cond_signal(&journaler.wake);
	pthread_mutex_unlock(&journaler.lock);
	pthread_join(journaler.checkpointer, NULL);
	pthread_cond_destroy(&journaler.wake);
	pthread_mutex_destroy(&journaler.lock);
	journaler.running = 0;
}

/* After journaler_stop: the last position known durable. */
void
journaler_durable(uint64_t *segment, uint64_t *size)
{
	*segment = journaler.durable_segment;
	*size = journaler.durable_size;
}
