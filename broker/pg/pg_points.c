/* SPDX-License-Identifier: ISC */
/*
 * pg_points.c: the pause and hold points of the PostgreSQL creation
 * path (fault-injection builds only): where a test stops a worker
 * (IDEM_CRASH_PAUSE_AT) or holds one creation (IDEM_CRASH_HOLD_AT) to
 * act on the server meanwhile.  Its own file so that pg_create.c and
 * pg_group.c both reach it without calling each other.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "pg_create.h"

#ifdef IDEM_FAULT_INJECTION
/*
 * IDEM_CRASH_HOLD_AT=<point>:<fifo>: the first creation of a worker
 * process to reach the point holds there, alone, while the worker's
 * other creations and its loop go on: its thread opens the FIFO for
 * reading, so that a test's open for writing returns once it is held
 * (an event, not a guess), and reads it to its end, so that the test's
 * close lets it go on.
 */
static void
hold_point(const char *point)
{
	static _Atomic int	 held;
	const char		*at = getenv("IDEM_CRASH_HOLD_AT");
	size_t			 n = strlen(point);
	char			 buf[64];
	ssize_t			 r;
	int			 fd;

	if (at == NULL || strncmp(at, point, n) != 0 || at[n] != ':' ||
	    atomic_exchange(&held, 1))
		return;
	fprintf(stderr, "idemd[%ld]: hold point %s reached: waiting for "
	    "%s\n", (long)getpid(), point, at + n + 1);
	if ((fd = open(at + n + 1, O_RDONLY | O_CLOEXEC)) == -1) {
		log_warn("hold point %s: %s", point, at + n + 1);
		return;
	}
	do
		r = read(fd, buf, sizeof buf);
	while (r > 0 || (r == -1 && errno == EINTR));
	close(fd);
}

/*
 * IDEM_CRASH_PAUSE_AT=before_task_file_link, or a crash point's name
 * (after_reserve_durable, after_task_file_written, after_task_file_linked,
 * after_commit_durable): the first request of a worker process to reach
 * that point stops the worker (SIGSTOP: the whole process, its loop and
 * every creation thread), as a scheduler or a VM pause may; its
 * PostgreSQL sessions stay open, so only its lease's expiry lets
 * another broker take over.  The test resumes it with SIGCONT.
 */
void
pg_pause_point(const char *point)
{
	static _Atomic int	 paused;
	const char		*at = getenv("IDEM_CRASH_PAUSE_AT");

	hold_point(point);
	if (at == NULL || strcmp(at, point) != 0 ||
	    atomic_exchange(&paused, 1))
		return;
	fprintf(stderr, "idemd[%ld]: pause point %s reached: SIGSTOP\n",
	    (long)getpid(), point);
	raise(SIGSTOP);
}
#endif
