/* SPDX-License-Identifier: ISC */
/*
 * loopwake.c: how a worker's threads wake its event loop.
 *
 * The file threads (fileio.c) and the creation threads of the
 * PostgreSQL store (pg_pool.c) finish jobs off the loop and hand
 * them back to it: they queue the job under their own lock, then post
 * here.  An eventfd counts the posts, so many posts before the loop
 * runs cost it one wake-up; the loop reads the counter once and runs
 * the owner's callback, which takes every queued job.  The eventfd is
 * non-blocking: a counter that would overflow (EAGAIN) is readable
 * anyway, so a post that fails that way is not lost.
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <unistd.h>

#include "idemd.h"

static void
loopwake_fired(evutil_socket_t fd, short what, void *arg)
{
	struct loopwake	*w = arg;
	uint64_t	 count;

	(void)what;
	(void)read(fd, &count, sizeof count);
	w->fired(w->arg);
}

int
loopwake_open(struct loopwake *w, struct event_base *base,
    void (*fired)(void *), void *arg)
{
	w->fired = fired;
	w->arg = arg;
	w->ev = NULL;
	if ((w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1)
		return -1;
	w->ev = event_new(base, w->fd, EV_READ | EV_PERSIST, loopwake_fired,
	    w);
	if (w->ev == NULL || event_add(w->ev, NULL) != 0) {
		loopwake_close(w);
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

void
loopwake_post(struct loopwake *w)
{
	uint64_t	one = 1;

	while (write(w->fd, &one, sizeof one) == -1 && errno == EINTR)
		;
}

void
loopwake_close(struct loopwake *w)
{
	if (w->ev != NULL)
		event_free(w->ev);
	w->ev = NULL;
	if (w->fd != -1)
		close(w->fd);
	w->fd = -1;
}
