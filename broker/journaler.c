/*
 * journaler.c: the master's journaling thread, the only writer of the
 * journal file.
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
 * drops what it took, and wakes the workers, which answer
 * storage_unavailable to everything still waiting and refuse new writes.
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
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
	log_warnx("journal %s failed: %s; refusing writes until idemd "
	    "restarts and replays the journal", what, cause);
	free(cause);
	atomic_store(&d->seg.header->journal_failed, 1);
	handoff_taken(&d->seg, end);
	/* The master reopens the state from the journal (master.c). */
	kill(getpid(), SIGUSR1);
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
	atomic_store(&journaler.stop, 0);
	if ((error = pthread_create(&journaler.thread, NULL, journaler_main,
	    NULL)) != 0) {
		errno = error;
		return -1;
	}
	journaler.running = 1;
	return 0;
}

/* After the workers are gone: flush what is left and join. */
void
journaler_stop(void)
{
	if (!journaler.running)
		return;
	atomic_store(&journaler.stop, 1);
	journaler_kick(journaler.d->kick_fd);
	pthread_join(journaler.thread, NULL);
	journaler.running = 0;
}

/* After journaler_stop: the last position known durable. */
void
journaler_durable(uint64_t *segment, uint64_t *size)
{
	*segment = journaler.durable_segment;
	*size = journaler.durable_size;
}
