/* SPDX-License-Identifier: ISC */
/*
 * crash.c: fault injection for crash tests, built only by configure
 * --enable-fault-injection (faultenv.c refuses the variables otherwise).
 * IDEM_CRASH_AT=<point> kills the whole broker (master first, then the
 * worker itself; the other workers follow through their parent-death
 * signal) with SIGKILL the first time a worker reaches the point;
 * IDEM_CRASH_WORKER_AT=<point> kills only that worker.  "First time" is
 * per broker run, kept in the segment, so a replaced worker does not
 * crash again on the retry.
 *
 * The points observe the I/O path production runs; they never choose
 * another one (doc/architecture.md, "The fsync order of one creation").
 * A point lies where the step it names is first seen done, by whichever
 * thread sees it first: the reservation durable, by the loop or by the
 * file thread that links early; the pair task_created+commit, appended
 * and flushed together, by the journaler, which tears it back to its
 * first record (what a crash during that flush may leave) and dies.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "store.h"

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
	"during_index_write",
	"between_index_commits",
	"before_next_segment_renamed",
	"after_next_segment_renamed",
	"before_journal_kick",
};

static struct {
	struct shm_segment	*seg;
	int			 point;		/* -1: none */
	int			 whole_broker;
	const char		*in_lock;	/* IDEM_CRASH_WORKER_IN_LOCK */
	pid_t			 master;
	long			 spawn_delay_ms; /* IDEM_SPAWN_DELAY_MS */
	int			 link_early;	/* IDEM_CRASH_LINK_EARLY */
	int			 watch_die;	/* IDEM_CRASH_WATCH=die-after-read */
	long long		 durable_watch_us; /* -1: the default */
	long long		 spin_max_connections; /* -1: the default */
	long long		 journal_linger_us; /* -1: the default */
	long long		 index_window;	/* -1: the default */
} crash = {
	/* By name: a field added without its -1 default was missed once. */
	.point = -1,
	.durable_watch_us = -1,
	.spin_max_connections = -1,
	.journal_linger_us = -1,
	.index_window = -1,
};

/*
 * This process's mark in the segment's crash_fired (random, not 0): a
 * thread that finds it there knows its own process fired and is dying.
 */
static uint32_t crash_token;
/* crash_init's thread: the loop (in a worker) or the master's main. */
static pthread_t crash_main_thread;

/* crash_hold's waiters, per worker process. */
static pthread_mutex_t	crash_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	crash_hold_cond = PTHREAD_COND_INITIALIZER;
/* A held thread goes on after this long anyway, saying so. */
#define CRASH_HOLD_MAX_SECONDS	30

/*
 * IDEM_CRASH_WORKER_IN_LOCK=table|allocator|journal-ring: the first worker
 * to take that lock of the segment dies holding it, so tests can show the
 * next owner repairs it (EOWNERDEAD) and the broker keeps serving.
 */
static void
crash_in_lock(const char *what)
{
	char		name[32];
	size_t		i;
	uint32_t	fired = 0;

	/* The lock names have spaces ("journal ring"); the env has dashes. */
	for (i = 0; what[i] != '\0' && i < sizeof name - 1; i++)
		name[i] = what[i] == ' ' ? '-' : what[i];
	name[i] = '\0';
	if (strcmp(name, crash.in_lock) != 0)
		return;
	if (!atomic_compare_exchange_strong(&crash.seg->header->crash_fired,
	    &fired, crash_token))
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

/*
 * IDEM_CRASH_WATCH=die-after-read: the first worker whose read(2) of the
 * inotify queue returned a TASK or REPORT name (names) dies before
 * noting it, holding the allocator's lock, once per broker run: the
 * next owner of the lock must not trust what the watch kept.
 */
void
crash_watch_read(int names)
{
	uint32_t	fired = 0;

	if (!crash.watch_die || !names || crash.seg == NULL ||
	    getpid() == crash.master)
		return;
	if (!atomic_compare_exchange_strong(&crash.seg->header->crash_fired,
	    &fired, crash_token))
		return;
	fprintf(stderr, "idemd[%ld]: dying after reading the watch's queue, "
	    "before noting it: SIGKILL\n", (long)getpid());
	raise(SIGKILL);
}

int64_t
crash_durable_watch_us(int64_t default_us)
{
	return crash.durable_watch_us >= 0 ? crash.durable_watch_us :
	    default_us;
}

int64_t
crash_journal_linger_us(int64_t default_us)
{
	return crash.journal_linger_us >= 0 ? crash.journal_linger_us :
	    default_us;
}

size_t
crash_index_window(size_t default_count)
{
	return crash.index_window >= 0 ? (size_t)crash.index_window :
	    default_count;
}

uint32_t
crash_spin_max_connections(uint32_t default_count)
{
	return crash.spin_max_connections >= 0 ?
	    (uint32_t)crash.spin_max_connections : default_count;
}

/* A misspelt variable would silently test nothing: refuse it. */
static int
crash_check_names(char **cause)
{
	static const char *const known[] = { "IDEM_CRASH_AT",
	    "IDEM_CRASH_WORKER_AT", "IDEM_CRASH_WORKER_IN_LOCK",
	    "IDEM_CRASH_LINK_EARLY", "IDEM_SPAWN_DELAY_MS",
	    "IDEM_CRASH_PAUSE_AT",				/* pg_create.c */
	    "IDEM_CRASH_HOLD_AT",			/* pg_create.c, fileio.c */
	    "IDEM_CRASH_BATCH_OF", "IDEM_CRASH_BEHIND_MS",	/* pg_group.c */
	    "IDEM_CRASH_WATCH",					/* watch.c */
	    "IDEM_CRASH_DURABLE_WATCH_US",			/* worker.c */
	    "IDEM_CRASH_JOURNAL_LINGER_US",			/* journaler.c */
	    "IDEM_CRASH_INDEX_WINDOW",				/* checkpoint.c */
	    /* worker.c, journaler.c */
	    "IDEM_CRASH_SPIN_MAX_CONNECTIONS" };
	char	*const *e;
	char	*one[2] = { NULL, NULL }, name[64];
	size_t	 i;

	for (e = environ; *e != NULL; e++) {
		one[0] = *e;
		if (faultenv_find(one, name, sizeof name) == NULL)
			continue;
		for (i = 0; i < sizeof known / sizeof known[0]; i++) {
			if (strcmp(name, known[i]) == 0)
				break;
		}
		if (i == sizeof known / sizeof known[0]) {
			asprintf(cause, "unknown fault-injection variable %s",
			    name);
			return -1;
		}
	}
	return 0;
}

const char *
crash_point_name(enum crash_point point)
{
	return (int)point >= 0 && point < CRASH_POINT_COUNT ?
	    crash_point_names[point] : "unknown";
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

/*
 * The number in the environment variable name, from 0 to max: 1 and
 * *value, 0 (*value untouched) if it is unset or empty, -1 and *cause
 * ("name must be a number of what") if it is anything else.
 */
static int
crash_env_number(const char *name, long long max, const char *what,
    long long *value, char **cause)
{
	const char	*text = getenv(name);
	char		*end;
	long long	 v;

	if (text == NULL || *text == '\0')
		return 0;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno != 0 || *end != '\0' || v < 0 || v > max) {
		asprintf(cause, "%s must be a number of %s", name, what);
		return -1;
	}
	*value = v;
	return 1;
}

int
crash_init(struct shm_segment *seg, pid_t master, char **cause)
{
	const char	*whole = getenv("IDEM_CRASH_AT");
	const char	*worker = getenv("IDEM_CRASH_WORKER_AT");
	const char	*name = whole != NULL ? whole : worker;
	const char	*in_lock = getenv("IDEM_CRASH_WORKER_IN_LOCK");
	const char	*early = getenv("IDEM_CRASH_LINK_EARLY");
	const char	*watch = getenv("IDEM_CRASH_WATCH");
	long long	 value;
	int		 set;
	int		 in_master = getpid() == master;	/* logs once */

	crash.seg = seg;
	crash.point = -1;
	crash_token = randombytes_random() | 1;
	crash_main_thread = pthread_self();
	crash.in_lock = NULL;
	crash.master = master;
	if (crash_check_names(cause) != 0)
		return -1;
	if ((set = crash_env_number("IDEM_SPAWN_DELAY_MS", 60000,
	    "milliseconds from 0 to 60000", &value, cause)) == -1)
		return -1;
	if (set) {
		crash.spawn_delay_ms = (long)value;
		if (in_master)
			store_notice(STORE_NOTICE_INFO, "fault injection: "
			    "the master pauses %ld ms after forking a worker",
			    crash.spawn_delay_ms);
	}
	crash.durable_watch_us = -1;
	if ((set = crash_env_number("IDEM_CRASH_DURABLE_WATCH_US", LLONG_MAX,
	    "microseconds", &crash.durable_watch_us, cause)) == -1)
		return -1;
	if (set && in_master)
		store_notice(STORE_NOTICE_INFO, "fault injection: a worker's "
		    "loop watches for durability %lld us at most",
		    crash.durable_watch_us);
	crash.journal_linger_us = -1;
	if ((set = crash_env_number("IDEM_CRASH_JOURNAL_LINGER_US", LLONG_MAX,
	    "microseconds", &crash.journal_linger_us, cause)) == -1)
		return -1;
	if (set && in_master)
		store_notice(STORE_NOTICE_INFO, "fault injection: the "
		    "journaling thread looks for the next record %lld us at "
		    "most", crash.journal_linger_us);
	crash.index_window = -1;
	if ((set = crash_env_number("IDEM_CRASH_INDEX_WINDOW", UINT32_MAX,
	    "puts", &crash.index_window, cause)) == -1)
		return -1;
	if (set && in_master)
		store_notice(STORE_NOTICE_INFO, "fault injection: a "
		    "checkpoint gives the index %lld puts at a time in key "
		    "order", crash.index_window);
	crash.spin_max_connections = -1;
	if ((set = crash_env_number("IDEM_CRASH_SPIN_MAX_CONNECTIONS",
	    UINT32_MAX, "connections", &crash.spin_max_connections,
	    cause)) == -1)
		return -1;
	if (set && in_master)
		store_notice(STORE_NOTICE_INFO, "fault injection: the watch "
		    "and the linger run with at most %lld connections open",
		    crash.spin_max_connections);
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
			store_notice(STORE_NOTICE_INFO, "fault injection: "
			    "a worker dies holding the %s lock", in_lock);
	}
	if (early != NULL && *early != '\0') {
		if (strcmp(early, "1") != 0) {
			asprintf(cause, "IDEM_CRASH_LINK_EARLY must be 1");
			return -1;
		}
		crash.link_early = 1;
		if (in_master)
			store_notice(STORE_NOTICE_INFO, "fault injection: "
			    "file threads wait for the reservation to link "
			    "early");
	}
	if (watch != NULL && *watch != '\0') {
		/* off and remote are read where they act (watch.c). */
		if (strcmp(watch, "die-after-read") == 0)
			crash.watch_die = 1;
		else if (strcmp(watch, "off") != 0 &&
		    strcmp(watch, "remote") != 0 &&
		    (strncmp(watch, "remote:", 7) != 0 || watch[7] == '\0')) {
			asprintf(cause, "IDEM_CRASH_WATCH must be off, remote, "
			    "remote:DIR or die-after-read");
			return -1;
		}
		if (in_master)
			store_notice(STORE_NOTICE_INFO, "fault injection: %s%s",
			    strcmp(watch, "off") == 0 ? "no inotify watch" :
			    crash.watch_die ? "a worker dies after reading "
			    "the watch's queue, before noting it" :
			    watch[6] == ':' ? "the file system counts as "
			    "remote for the watched directory " :
			    "the watch's file systems count as remote",
			    watch[6] == ':' ? watch + 7 : "");
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
	if (crash.point == CRASH_AFTER_TASK_CREATED_DURABLE &&
	    !crash.whole_broker) {
		asprintf(cause, "after_task_created_durable tears the append "
		    "of task_created and commit, which only a crash of the "
		    "whole broker can: use IDEM_CRASH_AT");
		return -1;
	}
	if (in_master)
		store_notice(STORE_NOTICE_INFO, "fault injection: %s at %s",
		    crash.whole_broker ? "the broker dies" : "a worker dies",
		    name);
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

static void
crash_fire(enum crash_point point, const char *how)
{
	fprintf(stderr, "idemd[%ld]: crash point %s reached%s: SIGKILL\n",
	    (long)getpid(), crash_point_names[point], how);
	/* In the master, dying is enough: workers follow (PDEATHSIG). */
	if (crash.whole_broker && getpid() != crash.master)
		kill(getppid(), SIGKILL);
	raise(SIGKILL);
}

/*
 * Fire once per broker run.  Two threads may reach the point at once
 * (the loop and a file thread both see the reservation durable): the
 * one that loses must not go on to the next step while the process is
 * being killed, or the crash would leave a state past the point.
 */
static void
crash_stop_short(void)
{
	if (crash.seg == NULL ||
	    atomic_load(&crash.seg->header->crash_fired) != crash_token)
		return;
	for (;;)
		pause();	/* SIGKILL is on its way */
}

static int
crash_claim(enum crash_point point)
{
	uint32_t	fired = 0;

	if (crash.point != (int)point || crash.seg == NULL)
		return 0;
	if (atomic_compare_exchange_strong(&crash.seg->header->crash_fired,
	    &fired, crash_token))
		return 1;
	crash_stop_short();	/* fired here: by another thread */
	return 0;		/* fired by a process before this one */
}

void
crash_point(enum crash_point point)
{
	crash_stop_short();
	if (crash_claim(point))
		crash_fire(point, getpid() != crash.master &&
		    !pthread_equal(pthread_self(), crash_main_thread) ?
		    " in a file thread" : "");
}

void
crash_journal_flushed(struct journal *j, const struct iovec *iov, int n)
{
	struct journal_record	 prev, cur;
	uint8_t			*buf;
	size_t			 total = 0, at = 0, used;
	uint64_t		 pos, prev_end = 0;
	int			 i, have_prev = 0, found = 0;
	char			*cause = NULL, how[160];

	if (crash.point != CRASH_AFTER_TASK_CREATED_DURABLE ||
	    crash.seg == NULL ||
	    atomic_load(&crash.seg->header->crash_fired) != 0)
		return;
	for (i = 0; i < n; i++)
		total += iov[i].iov_len;
	if ((buf = malloc(total)) == NULL)
		return;
	for (i = 0; i < n; i++) {
		memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	/*
	 * The ring's records are form 1; on disk, in format 2, each went
	 * after its padding and round prefix: pos follows the file.
	 */
	pos = j->round_start;
	for (at = 0; at < total; at += used) {
		if (journal_decode(buf + at, total - at, &cur, &used) !=
		    JOURNAL_DECODE_OK)
			break;
		if (j->format == JOURNAL_FORMAT_ROUNDS)
			pos += journal_round_pad(pos) +
			    JOURNAL_ROUND_PREFIX_BYTES;
		pos += used;
		if (have_prev && prev.entry.state == SUBTAB_TASK_CREATED &&
		    cur.entry.state == SUBTAB_COMMITTED &&
		    prev.entry.kind == cur.entry.kind &&
		    prev.entry.key_length == cur.entry.key_length &&
		    memcmp(prev.key, cur.key, cur.entry.key_length) == 0) {
			found = 1;
			break;
		}
		prev = cur;
		prev_end = pos;
		have_prev = 1;
	}
	free(buf);
	if (!found || !crash_claim(CRASH_AFTER_TASK_CREATED_DURABLE))
		return;
	/* What a crash during that fdatasync may leave: the first record. */
	if (journal_cut(j->dir_fd, j->dir, j->segment, prev_end,
	    &cause) != 0) {
		/* Die anyway: the test then finds the commit, and fails. */
		store_notice(STORE_NOTICE_WARNING, "fault injection: cannot "
		    "tear the journal: %s", cause);
		free(cause);
	}
	snprintf(how, sizeof how, " (the journal torn back to its "
	    "task_created record: segment %llu cut at %llu)",
	    (unsigned long long)j->segment,
	    (unsigned long long)prev_end);
	crash_fire(CRASH_AFTER_TASK_CREATED_DURABLE, how);
}

void
crash_hold(int *released)
{
	struct timespec	deadline;
	int		rc = 0;

	if (!crash.link_early)
		return;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += CRASH_HOLD_MAX_SECONDS;
	pthread_mutex_lock(&crash_hold_lock);
	while (!*released && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&crash_hold_cond, &crash_hold_lock,
		    &deadline);
	pthread_mutex_unlock(&crash_hold_lock);
	if (rc == ETIMEDOUT)
		store_notice(STORE_NOTICE_WARNING, "fault injection: a file "
		    "thread held %d s for a reservation; going on",
		    CRASH_HOLD_MAX_SECONDS);
}

/*
 * IDEM_CRASH_HOLD_AT=<point>:<fifo>: the first thread of a worker
 * process to reach the point (a PostgreSQL creation's, effect op's or
 * read's, pg_points.c, before_effect_statement and
 * before_read_statement among them; a file thread's
 * between its link and its count in the directory's rounds, fileio.c)
 * holds there, alone, while the worker's other threads and its loop go
 * on: it opens the FIFO for reading, so that a test's open for writing
 * returns once it is held (an event, not a guess), and reads it to its
 * end, so that the test's close lets it go on.
 */
void
crash_hold_at(const char *point)
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
		store_notice(STORE_NOTICE_WARNING, "hold point %s: %s: %s",
		    point, at + n + 1, strerror(errno));
		return;
	}
	do
		r = read(fd, buf, sizeof buf);
	while (r > 0 || (r == -1 && errno == EINTR));
	close(fd);
}

void
crash_release(int *released)
{
	if (!crash.link_early)
		return;
	pthread_mutex_lock(&crash_hold_lock);
	*released = 1;
	pthread_cond_broadcast(&crash_hold_cond);
	pthread_mutex_unlock(&crash_hold_lock);
}
