/* SPDX-License-Identifier: ISC */
/*
 * history.c: the committed history beyond the table, as the broker's
 * processes see it.  Each process (master, every worker) opens the index
 * (broker/store/index.c) itself; a lookup that misses the table comes
 * here.  The index only ever holds committed entries, so what is found
 * here is answered as a committed slot would be: reused, or conflict.
 *
 * A worker also warms its map of the index (history_warm_start): a
 * lookup walks a few pages of a file that may be gigabytes, and a page
 * this process has not touched costs a page fault (a disk read if it is
 * not in the page cache), which made a cold retry several times slower
 * than a hot one at 10,000,000 ids (doc/performance.md, "History").  A
 * thread of low priority reads the file ahead into the page cache in
 * large steps (readahead: sequential reads, not a 4 KiB read per fault,
 * the map being MADV_RANDOM) and maps each step's pages with
 * MADV_POPULATE_READ; the lookups go on meanwhile, faulting what it has
 * not reached.  Pages the master writes later are the same
 * file's pages: those already mapped stay mapped; new ones fault once.
 */
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "idemd.h"

/*
 * Open the index through d->index_dir_fd, opening that first (the
 * master; created unless INDEX_READONLY) below the root's descriptor
 * without following a symlink.  A worker inherits it.
 */
int
history_open(struct idemd *d, int flags, char **cause)
{
	char	dir[PATH_MAX], rel[PATH_MAX];

	if (paths_index_dir(d, dir, sizeof dir) != 0 ||
	    (size_t)snprintf(rel, sizeof rel, "%s/index", d->state_dir) >=
	    sizeof rel) {
		*cause = strdup("the index's path is too long");
		return -1;
	}
	if (d->index_dir_fd == -1) {
		if (!(flags & INDEX_READONLY) &&
		    nofollow_mkdir(d->root_fd, rel, 0700) == -1 &&
		    errno != EEXIST) {
			asprintf(cause, "index %s: %s", dir, strerror(errno));
			return -1;
		}
		if ((d->index_dir_fd = nofollow_dir(d->root_fd, rel)) == -1) {
			asprintf(cause, "index %s: %s", dir, strerror(errno));
			return -1;
		}
	}
	if (index_open_at(&d->index, d->index_dir_fd, dir, flags, cause) != 0)
		return -1;
	d->index_ready = 1;
	return 0;
}

/* The index and its directory's descriptor, if open. */
void
history_close(struct idemd *d)
{
	if (d->index_ready)
		index_close(&d->index);
	d->index_ready = 0;
	if (d->index_dir_fd != -1)
		close(d->index_dir_fd);
	d->index_dir_fd = -1;
}

int
history_find(struct idemd *d, const char *key, size_t key_length,
    struct index_entry *out, uint8_t *result)
{
	static uint8_t	 scratch[IDEM_MAX_EFFECT_RESULT_BYTES];
	char		*cause = NULL;
	int		 rc, saved;

	if (!d->index_ready)
		return 0;
	/* The event loop's thread only: scratch is its. */
	rc = index_get(&d->index, key, key_length, out,
	    result != NULL ? result : scratch, &cause);
	if (rc < 0) {
		saved = errno;
		log_warnx("%s", cause != NULL ? cause : "index: lookup failed");
		free(cause);
		errno = saved;
	}
	return rc;
}

/* The one warm-up of this process (a worker). */
static struct {
	pthread_t		 thread;
	int			 running;
	_Atomic int		 stop;
	uint8_t			*base;
	uint64_t		 bytes;
	int			 fd;		/* LMDB's, read ahead only */
	_Atomic uint64_t	*warmed;	/* the segment's counter */
	int			 error;		/* errno of the step that failed */
} warm;

static void *
history_warm_main(void *arg)
{
	uint64_t	at, n;

	(void)arg;
	/* Behind the requests: this thread only, not the process. */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
	    IDEM_INDEX_WARM_NICE);
	for (at = 0; at < warm.bytes && !atomic_load(&warm.stop); at += n) {
		n = warm.bytes - at;
		if (n > IDEM_INDEX_WARM_CHUNK_BYTES)
			n = IDEM_INDEX_WARM_CHUNK_BYTES;
		/* Only a hint: an error shows in the populate. */
		(void)readahead(warm.fd, (off64_t)at, (size_t)n);
#ifdef MADV_POPULATE_READ
		if (madvise(warm.base + at, n, MADV_POPULATE_READ) == -1) {
			warm.error = errno;
			break;
		}
#else
		warm.error = ENOSYS;
		break;
#endif
		atomic_fetch_add(warm.warmed, n);
	}
	return NULL;
}

void
history_warm_start(struct idemd *d)
{
	uint64_t	ram;
	long		pages, page;
	int		error;

	if (!d->index_ready || warm.running ||
	    index_mapped(&d->index, &warm.base, &warm.bytes, &warm.fd) != 0) {
		log_info("index: no warm-up: its map was not found");
		return;
	}
	pages = sysconf(_SC_PHYS_PAGES);
	page = sysconf(_SC_PAGESIZE);
	if (pages > 0 && page > 0) {
		ram = (uint64_t)pages * (uint64_t)page /
		    IDEM_INDEX_WARM_RAM_DIVISOR;
		if (warm.bytes > ram)
			warm.bytes = ram;
	}
	warm.warmed = &d->seg.header->counters.index_warm_bytes;
	atomic_store(&warm.stop, 0);
	warm.error = 0;
	if ((error = pthread_create(&warm.thread, NULL, history_warm_main,
	    NULL)) != 0) {
		/* Only slower: lookups fault the pages in themselves. */
		log_warnx("index: no warm-up thread: %s", strerror(error));
		return;
	}
	warm.running = 1;
}

void
history_warm_stop(void)
{
	if (!warm.running)
		return;
	atomic_store(&warm.stop, 1);
	pthread_join(warm.thread, NULL);
	warm.running = 0;
	if (warm.error != 0)
		log_info("index: warm-up stopped: %s (lookups fault the "
		    "rest in)", strerror(warm.error));
}
