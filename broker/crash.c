/*
 * crash.c: fault injection for crash tests.  IDEM_CRASH_AT=<point> kills
 * the whole broker (master first, then the worker itself; the other
 * workers follow through their parent-death signal) with SIGKILL the
 * first time a worker reaches the point; IDEM_CRASH_WORKER_AT=<point>
 * kills only that worker.  "First time" is per broker run, kept in the
 * segment, so a replaced worker does not crash again on the retry.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "idemd.h"
#include "log.h"

static const char *const crash_point_names[CRASH_POINT_COUNT] = {
	"after_reserve_durable",
	"after_task_file_written",
	"after_task_file_linked",
	"after_task_created_durable",
	"after_commit_durable",
	"during_checkpoint",
	"after_checkpoint_renamed",
	"after_effect_reserve_durable",
	"after_effect_commit_durable",
	"after_effect_release_durable",
	"after_effect_resolve_durable",
};

static struct {
	struct shm_segment	*seg;
	int			 point;		/* -1: none */
	int			 whole_broker;
	const char		*in_lock;	/* IDEM_CRASH_WORKER_IN_LOCK */
	pid_t			 master;
	long			 spawn_delay_ms; /* IDEM_SPAWN_DELAY_MS */
} crash = { NULL, -1, 0, NULL, 0, 0 };

/*
 * IDEM_CRASH_WORKER_IN_LOCK=table|allocator|journal-ring: the first worker
 * to take that lock of the segment dies holding it, so tests can show the
 * next owner repairs it (EOWNERDEAD) and the broker keeps serving.
 */
static void
crash_in_lock(const char *what)
{
	char	name[32];
	size_t	i;

	/* The lock names have spaces ("journal ring"); the env has dashes. */
	for (i = 0; what[i] != '\0' && i < sizeof name - 1; i++)
		name[i] = what[i] == ' ' ? '-' : what[i];
	name[i] = '\0';
	if (strcmp(name, crash.in_lock) != 0)
		return;
	if (atomic_exchange(&crash.seg->header->crash_fired, 1) != 0)
		return;
	fprintf(stderr, "idemd[%ld]: dying holding the %s lock: SIGKILL\n",
	    (long)getpid(), what);
	raise(SIGKILL);
}

/* In a new worker: arm the lock crash, if asked for (never in the master). */
void
crash_worker_started(void)
{
	if (crash.in_lock != NULL)
		shm_lock_set_hook(crash_in_lock);
}

static int
crash_lookup(const char *name)
{
	int	i;

	for (i = 0; i < CRASH_POINT_COUNT; i++) {
		if (strcmp(name, crash_point_names[i]) == 0)
			return i;
	}
	return -1;
}

int
crash_init(struct shm_segment *seg, pid_t master, char **cause)
{
	const char	*whole = getenv("IDEM_CRASH_AT");
	const char	*worker = getenv("IDEM_CRASH_WORKER_AT");
	const char	*name = whole != NULL ? whole : worker;
	const char	*in_lock = getenv("IDEM_CRASH_WORKER_IN_LOCK");
	const char	*delay;
	char		*end;
	int		 in_master = getpid() == master;	/* logs once */

	crash.seg = seg;
	crash.point = -1;
	crash.in_lock = NULL;
	crash.master = master;
	if ((delay = getenv("IDEM_SPAWN_DELAY_MS")) != NULL &&
	    *delay != '\0') {
		errno = 0;
		crash.spawn_delay_ms = strtol(delay, &end, 10);
		if (errno != 0 || *end != '\0' || crash.spawn_delay_ms < 0 ||
		    crash.spawn_delay_ms > 60000) {
			asprintf(cause, "IDEM_SPAWN_DELAY_MS must be a number "
			    "of milliseconds from 0 to 60000");
			return -1;
		}
		if (in_master)
			log_info("fault injection: the master pauses %ld ms "
			    "after forking a worker", crash.spawn_delay_ms);
	}
	if (in_lock != NULL && *in_lock != '\0') {
		if (strcmp(in_lock, "table") != 0 &&
		    strcmp(in_lock, "allocator") != 0 &&
		    strcmp(in_lock, "journal-ring") != 0) {
			asprintf(cause, "IDEM_CRASH_WORKER_IN_LOCK must be "
			    "table, allocator or journal-ring");
			return -1;
		}
		crash.in_lock = in_lock;
		if (in_master)
			log_info("fault injection: a worker dies holding "
			    "the %s lock", in_lock);
	}
	if (name == NULL || *name == '\0')
		return 0;
	if (whole != NULL && worker != NULL) {
		asprintf(cause, "set IDEM_CRASH_AT or IDEM_CRASH_WORKER_AT, "
		    "not both");
		return -1;
	}
	if ((crash.point = crash_lookup(name)) == -1) {
		asprintf(cause, "unknown crash point \"%s\"", name);
		return -1;
	}
	crash.whole_broker = whole != NULL;
	if (in_master)
		log_info("fault injection: %s at %s", crash.whole_broker ?
		    "the broker dies" : "a worker dies", name);
	return 0;
}

/*
 * IDEM_SPAWN_DELAY_MS=<n>: the master pauses n ms right after forking a
 * worker, as a loaded machine may deschedule it there, so a test can
 * show that the new worker is served meanwhile (master.c).
 */
void
crash_spawn_delay(void)
{
	struct timespec	ts;

	if (crash.spawn_delay_ms <= 0)
		return;
	ts.tv_sec = crash.spawn_delay_ms / 1000;
	ts.tv_nsec = (crash.spawn_delay_ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

int
crash_configured(void)
{
	return crash.point != -1;
}

int
crash_armed(enum crash_point point)
{
	return crash.point == (int)point && crash.seg != NULL &&
	    atomic_load(&crash.seg->header->crash_fired) == 0;
}

void
crash_point(enum crash_point point)
{
	if (crash.point != (int)point || crash.seg == NULL)
		return;
	if (atomic_exchange(&crash.seg->header->crash_fired, 1) != 0)
		return;
	fprintf(stderr, "idemd[%ld]: crash point %s reached: SIGKILL\n",
	    (long)getpid(), crash_point_names[point]);
	/* In the master, dying is enough: workers follow (PDEATHSIG). */
	if (crash.whole_broker && getpid() != crash.master)
		kill(getppid(), SIGKILL);
	raise(SIGKILL);
}
