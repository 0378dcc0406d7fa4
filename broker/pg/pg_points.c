/* SPDX-License-Identifier: ISC */
/*
 * pg_points.c: the pause and hold points of the PostgreSQL creation,
 * effect and read paths (fault-injection builds only): where a test
 * stops a worker (IDEM_CRASH_PAUSE_AT) or holds one creation, effect op
 * or read on its store thread (IDEM_CRASH_HOLD_AT, crash.c's
 * crash_hold_at, which fileio.c's file threads share) to act on the
 * server, or on the worker's loop, meanwhile.  Its own file so that
 * pg_create.c, pg_group.c, pg_effect.c and pg_read.c reach it without
 * calling each other.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_backend.h"
#include "store.h"

#ifdef IDEM_FAULT_INJECTION
/*
 * IDEM_CRASH_PAUSE_AT=before_task_file_link, before_effect_statement,
 * before_read_statement, or a crash point's name
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

	crash_hold_at(point);
	if (at == NULL || strcmp(at, point) != 0 ||
	    atomic_exchange(&paused, 1))
		return;
	fprintf(stderr, "idemd[%ld]: pause point %s reached: SIGSTOP\n",
	    (long)getpid(), point);
	raise(SIGSTOP);
}
#endif
