/* SPDX-License-Identifier: ISC */
/*
 * test_chaos.c: chaos under load (issue "Prove it", item 2).
 *
 * Eight client processes submit 1000 write_task calls each through
 * idem_write_task_retry: mostly new intents, 20% retries of an intent
 * the client already had answered (same content), 2% the same id with
 * other content (a real digest difference).  Meanwhile the test SIGKILLs
 * a random worker every 100 ms (if the clients finished a call since
 * the last kill: on a loaded machine a worker may need longer than that
 * to start, and killing each before it serves would only stall the
 * clients until the watchdog) and kills the whole broker three times,
 * starting it again on the same root; the clients' retries reconnect on
 * their own.  Each client writes one line per call to its own results
 * file.  Afterwards, with every client gone:
 *
 *  - every submission id names exactly one TASK file on disk, and there
 *    are as many TASK files as ids that ended created or reused;
 *  - every receipt a client was given comes back byte for byte, from
 *    get_submission and from a final retry (reused);
 *  - the only conflicts are the other-content calls, and each of them
 *    got one;
 *  - idemctl verify finds the journal and the workspace in agreement.
 *
 * The clock of the kills is a timerfd and the broker restarts are placed
 * by the clients' progress (a schedule, not a synchronisation); every
 * wait is on an event.  A watchdog fails the test instead of hanging.
 * CHAOS_SEED=N in the environment repeats a run's call mix.
 */
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "integration/filter.h"
#include "integration/harness.h"

#define CHAOS_CLIENTS			8
#define CHAOS_CALLS_PER_CLIENT		1000
#define CHAOS_SEQUENCE_DIGITS		"5"
#define CHAOS_RETRY_PERCENT		20
#define CHAOS_OTHER_PERCENT		2
#define CHAOS_WORKERS			"2"
#define CHAOS_KILL_INTERVAL_MS		100
#define CHAOS_RESTARTS			3
/* A whole-broker kill when this share of all calls is done (percent). */
static const int chaos_restart_at[CHAOS_RESTARTS] = { 20, 45, 70 };
/* Generous enough to ride out a worker kill and a broker restart. */
#define CHAOS_RETRY_DEADLINE_MS		60000
#define CHAOS_RETRY_MAX_ATTEMPTS	50
#define CHAOS_RETRY_BASE_DELAY_MS	50
#define CHAOS_RETRY_MAX_DELAY_MS	1000
/* make check must end within 3 minutes (a sanitizer build: harness_slowdown()
 * times that): fail instead of hanging. */
#define CHAOS_WATCHDOG_SECONDS		170
#define CHAOS_MAX_TICKS			(CHAOS_WATCHDOG_SECONDS * 1000 / \
					    CHAOS_KILL_INTERVAL_MS)
#define CHAOS_MAX_WORKERS		16
/* How deep TASK files are looked for below _lifecycle/ and history/. */
#define CHAOS_SCAN_DEPTH		4
/* Failures printed one by one before only their count is. */
#define CHAOS_MAX_REPORTED		20

enum chaos_kind {
	KIND_NEW,	/* a new intent: a fresh id */
	KIND_RETRY,	/* an answered intent again, same content */
	KIND_OTHER	/* an answered intent's id with other content */
};
static const char *const chaos_kind_names[] = { "new", "retry", "other" };

/* One submission id (client c, its n-th intent), from the results. */
struct chaos_id {
	char	*receipt;	/* the first receipt given (raw); NULL: none */
	char	 task_id[96];
	int	 files;		/* TASK files naming it */
	int	 lost;		/* a receipt of it did not come back as given */
};

struct chaos {
	struct broker	 b;
	char		 dir[300];	/* the results files */
	uint32_t	*progress;	/* shared: calls done, per client */
	pid_t		 clients[CHAOS_CLIENTS];	/* 0 once reaped */
	uint64_t	 seed;
	uint64_t	 rng;		/* the parent's choices */

	/* The figures. */
	int		 calls;
	int		 by_kind[3];
	unsigned long	 tries;
	unsigned	 max_tries;
	int		 worker_kills;
	int		 restarts;
	double		 down_seconds;
	int		 recovered;	/* answers that finished a creation */
	int		 new_reused;	/* new ids whose first reply was lost */
	int		 bound;		/* ids that ended created or reused */
	int		 files;		/* TASK files on disk */
	int		 duplicates;
	int		 missing;
	int		 lost;
	int		 unanswered;
	int		 conflicts_expected;
	int		 conflicts_seen;
	int		 unexpected;	/* a wrong disposition or binding */
	int		 foreign;	/* files naming no id of this test */
	int		 verify_status;	/* -1: verify could not run */
	int		 reported;

	struct chaos_id	 ids[CHAOS_CLIENTS][CHAOS_CALLS_PER_CLIENT];
};

/* ---- Small things -------------------------------------------------------- */

static double
now_seconds(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* xorshift64*: the call mix repeats for a seed (kills are timing). */
static uint64_t
chaos_random(uint64_t *state)
{
	uint64_t	x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static void
chaos_report(struct chaos *ch, const char *fmt, ...)
{
	va_list	ap;

	if (ch->reported++ >= CHAOS_MAX_REPORTED)
		return;
	fputs("chaos: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
chaos_id_text(char *out, size_t size, int client, int n)
{
	snprintf(out, size, "chaos/c%d/%04d", client, n);
}

static int
chaos_id_parse(const char *text, int *client, int *n)
{
	char	tail;

	if (sscanf(text, "chaos/c%d/%d%c", client, n, &tail) != 2)
		return -1;
	if (*client < 0 || *client >= CHAOS_CLIENTS || *n < 0 ||
	    *n >= CHAOS_CALLS_PER_CLIENT)
		return -1;
	return 0;
}

/*
 * The content of client c's n-th intent; variant > 0 is other content
 * under the same id (another subject: another digest).
 */
static void
chaos_task(struct idem_task *task, char *subject, size_t subject_size,
    char *body, size_t body_size, int client, int n, int variant)
{
	memset(task, 0, sizeof *task);
	task->sender = "PM";
	task->recipient = "DEV";
	if (variant == 0)
		snprintf(subject, subject_size, "Chaos c%d intent %d", client,
		    n);
	else
		snprintf(subject, subject_size, "Chaos c%d intent %d, "
		    "other content %d", client, n, variant);
	snprintf(body, body_size, "Created under load while workers and "
	    "the broker are killed.\nclient %d, intent %d\n", client, n);
	task->subject = subject;
	task->body = body;
	task->priority = n % 2 == 0 ? "P2" : "P1";
}

/* Tabs and newlines would break a results line. */
static void
chaos_flatten(char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\t' || *s == '\n' || *s == '\r')
			*s = ' ';
	}
}

/* ---- The clients --------------------------------------------------------- */

/*
 * One client process: CHAOS_CALLS_PER_CLIENT calls, one results line
 * each:  id TAB kind TAB disposition TAB tries TAB detail TAB receipt
 * where disposition is created, reused, conflict or failed, detail is
 * recovered=0|1, reason:existing_task_id or the error, and receipt the
 * raw receipt or "-".  Never returns.
 */
static void
client_run(struct chaos *ch, int client, pid_t parent)
{
	struct idem_retry_policy	 policy;
	struct idem_write_result	 result;
	struct idem_error		 err;
	struct idem_task		 task, same;
	enum chaos_kind			 kind;
	char				 path[400], id[64], subject[128];
	char				 body[256], subject2[128], body2[256];
	char				 digest[IDEM_DIGEST_HEX_SIZE];
	char				 digest2[IDEM_DIGEST_HEX_SIZE];
	char				 detail[320];
	const char			*disposition, *raw;
	uint64_t			 rng;
	FILE				*f;
	int				 answered[CHAOS_CALLS_PER_CLIENT];
	int				 nanswered = 0, nnew = 0, others = 0;
	int				 i, n, variant, r, rc;

	/* A test that dies (its watchdog included) takes the clients along. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != parent)
		_exit(3);
	snprintf(path, sizeof path, "%s/client-%d.results", ch->dir, client);
	if ((f = fopen(path, "we")) == NULL)
		_exit(4);
	setvbuf(f, NULL, _IOLBF, 0);
	rng = ch->seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(client + 1));
	if (rng == 0)
		rng = 1;

	memset(&policy, 0, sizeof policy);
	policy.max_attempts = CHAOS_RETRY_MAX_ATTEMPTS;
	policy.base_delay_ms = CHAOS_RETRY_BASE_DELAY_MS;
	policy.max_delay_ms = CHAOS_RETRY_MAX_DELAY_MS;
	policy.deadline_ms = CHAOS_RETRY_DEADLINE_MS;

	for (i = 0; i < CHAOS_CALLS_PER_CLIENT; i++) {
		r = (int)(chaos_random(&rng) % 100);
		variant = 0;
		if (nanswered == 0 || r >= CHAOS_OTHER_PERCENT +
		    CHAOS_RETRY_PERCENT) {
			kind = KIND_NEW;
			n = nnew++;
		} else {
			/* Only an intent that was answered has a binding. */
			n = answered[chaos_random(&rng) % (uint64_t)nanswered];
			if (r < CHAOS_OTHER_PERCENT) {
				kind = KIND_OTHER;
				variant = ++others;
			} else
				kind = KIND_RETRY;
		}
		chaos_id_text(id, sizeof id, client, n);
		chaos_task(&task, subject, sizeof subject, body, sizeof body,
		    client, n, variant);
		if (kind == KIND_OTHER) {
			/* A real digest difference, or the test is wrong. */
			chaos_task(&same, subject2, sizeof subject2, body2,
			    sizeof body2, client, n, 0);
			if (idem_task_digest(&task, digest) != 0 ||
			    idem_task_digest(&same, digest2) != 0 ||
			    strcmp(digest, digest2) == 0)
				_exit(5);
		}

		rc = idem_write_task_retry(ch->b.socket, id, &task, &policy,
		    &result, &err);
		raw = "-";
		if (rc != 0) {
			disposition = "failed";
			snprintf(detail, sizeof detail, "error %d: %s",
			    (int)err.code, err.message);
		} else if (result.disposition == IDEM_CONFLICT) {
			disposition = "conflict";
			snprintf(detail, sizeof detail, "%s:%s", err.reason,
			    result.existing_task_id);
		} else if (result.disposition == IDEM_CREATED ||
		    result.disposition == IDEM_REUSED) {
			disposition = result.disposition == IDEM_CREATED ?
			    "created" : "reused";
			snprintf(detail, sizeof detail, "recovered=%d",
			    result.recovered);
			raw = result.receipt.raw;
			if (kind == KIND_NEW)
				answered[nanswered++] = n;
		} else {
			disposition = "failed";
			snprintf(detail, sizeof detail, "no disposition");
		}
		chaos_flatten(detail);
		fprintf(f, "%s\t%s\t%s\t%u\t%s\t%s\n", id,
		    chaos_kind_names[kind], disposition, result.attempts,
		    detail, raw);
		__atomic_store_n(&ch->progress[client], (uint32_t)(i + 1),
		    __ATOMIC_RELAXED);
	}
	if (ferror(f) || fclose(f) != 0)
		_exit(6);
	_exit(0);
}

static void
clients_start(struct chaos *ch)
{
	pid_t	parent = getpid();
	int	i;

	/* Nothing buffered may be written twice. */
	fflush(stdout);
	fflush(stderr);
	for (i = 0; i < CHAOS_CLIENTS; i++) {
		ch->clients[i] = fork();
		assert_true(ch->clients[i] != -1);
		if (ch->clients[i] == 0)
			client_run(ch, i, parent);
	}
}

/* Reap the clients that exited; returns how many are still running. */
static int
clients_reap(struct chaos *ch, int options)
{
	pid_t	pid;
	int	i, status, running = 0;

	for (i = 0; i < CHAOS_CLIENTS; i++) {
		if (ch->clients[i] == 0)
			continue;
		pid = waitpid(ch->clients[i], &status, options);
		if (pid == -1 && errno == EINTR) {
			running++;
			continue;
		}
		assert_true(pid != -1);
		if (pid == 0) {
			running++;
			continue;
		}
		ch->clients[i] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("client %d ended with status %#x", i, status);
	}
	return running;
}

static uint32_t
clients_progress(struct chaos *ch)
{
	uint32_t	done = 0;
	int		i;

	for (i = 0; i < CHAOS_CLIENTS; i++)
		done += __atomic_load_n(&ch->progress[i], __ATOMIC_RELAXED);
	return done;
}

/* ---- The chaos ----------------------------------------------------------- */

static void
broker_start(struct chaos *ch)
{
	/* 8000 creations in a day: past FCoP's 999. */
	const char *const	args[] = { "--workers", CHAOS_WORKERS,
	    "--sequence-digits", CHAOS_SEQUENCE_DIGITS, NULL };

	if (harness_start(&ch->b, args, NULL) != 0)
		fail_msg("idemd did not start on %s (log %s)", ch->b.root,
		    ch->b.log);
}

static int
is_worker(struct chaos *ch, pid_t pid)
{
	pid_t	pids[CHAOS_MAX_WORKERS];
	int	i, n;

	n = harness_workers(&ch->b, pids, CHAOS_MAX_WORKERS);
	for (i = 0; i < n; i++) {
		if (pids[i] == pid)
			return 1;
	}
	return 0;
}

/*
 * SIGKILL a random worker.  The pidfd pins the process: once it is open
 * and the pid is still the master's child, the signal cannot reach a
 * process that reused the pid.
 */
static void
kill_random_worker(struct chaos *ch)
{
	pid_t	pids[CHAOS_MAX_WORKERS], pid;
	int	n, fd;

	if (ch->b.pid == 0)
		return;
	if ((n = harness_workers(&ch->b, pids, CHAOS_MAX_WORKERS)) == 0)
		return;
	pid = pids[chaos_random(&ch->rng) % (uint64_t)n];
	if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) == -1)
		return;
	if (is_worker(ch, pid) &&
	    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0)
		ch->worker_kills++;
	close(fd);
}

static void
restart_broker(struct chaos *ch)
{
	double	began = now_seconds();

	harness_kill(&ch->b);
	broker_start(ch);
	ch->restarts++;
	ch->down_seconds += now_seconds() - began;
}

/*
 * The parent's loop: a worker kill on every tick of the timerfd after
 * which the clients made progress, a broker restart when their progress
 * passes the next mark, until every client has exited.
 */
static void
run_chaos(struct chaos *ch)
{
	struct itimerspec	its;
	uint64_t		expirations, total;
	ssize_t			got;
	unsigned		done, done_at_kill = 0;
	int			tfd, ticks = 0;

	total = (uint64_t)CHAOS_CLIENTS * CHAOS_CALLS_PER_CLIENT;
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	assert_true(tfd != -1);
	memset(&its, 0, sizeof its);
	its.it_interval.tv_nsec = CHAOS_KILL_INTERVAL_MS * 1000000L;
	its.it_value = its.it_interval;
	assert_int_equal(timerfd_settime(tfd, 0, &its, NULL), 0);

	while (clients_reap(ch, WNOHANG) > 0) {
		if (++ticks > CHAOS_MAX_TICKS * (int)harness_slowdown())
			fail_msg("clients still running after %d ticks "
			    "(%u of %llu calls done)", ticks,
			    clients_progress(ch), (unsigned long long)total);
		got = read(tfd, &expirations, sizeof expirations);
		if (got == -1 && errno == EINTR)
			continue;
		assert_int_equal(got, (ssize_t)sizeof expirations);
		done = clients_progress(ch);
		if (ch->restarts < CHAOS_RESTARTS && done * 100 >=
		    chaos_restart_at[ch->restarts] * total)
			restart_broker(ch);
		else if (done > done_at_kill) {
			kill_random_worker(ch);
			done_at_kill = done;
		}
	}
	close(tfd);
}

/* ---- The verdict: the results files -------------------------------------- */

static void
note_lost(struct chaos *ch, struct chaos_id *cid)
{
	if (!cid->lost)
		ch->lost++;
	cid->lost = 1;
}

static void
check_line(struct chaos *ch, char *line)
{
	struct chaos_id	*cid;
	json_error_t	 jerr;
	json_t		*receipt;
	char		*field[6], *p, *reason;
	const char	*task_id;
	enum chaos_kind	 kind;
	unsigned	 tries;
	int		 i, client, n;

	line[strcspn(line, "\n")] = '\0';
	p = line;
	for (i = 0; i < 6; i++) {
		field[i] = p;
		if (i < 5) {
			if ((p = strchr(p, '\t')) == NULL)
				fail_msg("bad results line: %s", line);
			*p++ = '\0';
		}
	}
	if (chaos_id_parse(field[0], &client, &n) != 0)
		fail_msg("bad id in results: %s", field[0]);
	for (kind = KIND_NEW; kind <= KIND_OTHER; kind++) {
		if (strcmp(field[1], chaos_kind_names[kind]) == 0)
			break;
	}
	if (kind > KIND_OTHER)
		fail_msg("bad kind in results: %s", field[1]);
	tries = (unsigned)strtoul(field[3], NULL, 10);
	cid = &ch->ids[client][n];

	ch->calls++;
	ch->by_kind[kind]++;
	ch->tries += tries;
	if (tries > ch->max_tries)
		ch->max_tries = tries;
	if (kind == KIND_OTHER)
		ch->conflicts_expected++;

	if (strcmp(field[2], "failed") == 0) {
		ch->unanswered++;
		chaos_report(ch, "%s (%s): no outcome after %u tries: %s",
		    field[0], field[1], tries, field[4]);
		return;
	}
	if (strcmp(field[2], "conflict") == 0) {
		if (kind != KIND_OTHER) {
			ch->unexpected++;
			chaos_report(ch, "%s (%s): conflict %s on the same "
			    "content", field[0], field[1], field[4]);
			return;
		}
		ch->conflicts_seen++;
		reason = field[4];
		if ((p = strchr(reason, ':')) != NULL)
			*p++ = '\0';
		if (strcmp(reason, "digest_mismatch") != 0 || p == NULL ||
		    cid->receipt == NULL || strcmp(p, cid->task_id) != 0) {
			ch->unexpected++;
			chaos_report(ch, "%s: conflict %s names %s, the "
			    "receipt %s", field[0], reason, p != NULL ? p : "-",
			    cid->task_id);
		}
		return;
	}
	if (strcmp(field[2], "created") != 0 &&
	    strcmp(field[2], "reused") != 0)
		fail_msg("bad disposition in results: %s", field[2]);

	/* Other content accepted, or a second creation, is a broken binding. */
	if (kind == KIND_OTHER ||
	    (kind == KIND_RETRY && strcmp(field[2], "created") == 0) ||
	    (kind == KIND_NEW && strcmp(field[2], "reused") == 0 &&
	    tries == 1)) {
		ch->unexpected++;
		chaos_report(ch, "%s (%s): %s after %u tries", field[0],
		    field[1], field[2], tries);
	}
	if (strcmp(field[4], "recovered=1") == 0)
		ch->recovered++;
	if (kind == KIND_NEW && strcmp(field[2], "reused") == 0)
		ch->new_reused++;
	if (cid->receipt == NULL) {
		if (kind != KIND_NEW)
			fail_msg("%s: a %s before its first call", field[0],
			    field[1]);
		if ((cid->receipt = strdup(field[5])) == NULL)
			fail_msg("out of memory");
		receipt = json_loads(field[5], 0, &jerr);
		task_id = json_string_value(json_object_get(receipt,
		    "task_id"));
		if (task_id == NULL)
			fail_msg("%s: receipt without task_id: %s", field[0],
			    field[5]);
		snprintf(cid->task_id, sizeof cid->task_id, "%s", task_id);
		json_decref(receipt);
		ch->bound++;
	} else if (strcmp(cid->receipt, field[5]) != 0) {
		note_lost(ch, cid);
		chaos_report(ch, "%s (%s): receipt changed:\n  first %s\n"
		    "  now   %s", field[0], field[1], cid->receipt, field[5]);
	}
}

static void
check_results(struct chaos *ch)
{
	char	 path[400], *line = NULL;
	size_t	 size = 0;
	FILE	*f;
	int	 client;

	for (client = 0; client < CHAOS_CLIENTS; client++) {
		snprintf(path, sizeof path, "%s/client-%d.results", ch->dir,
		    client);
		if ((f = fopen(path, "re")) == NULL)
			fail_msg("%s: %s", path, strerror(errno));
		while (getline(&line, &size, f) != -1)
			check_line(ch, line);
		fclose(f);
	}
	free(line);
	assert_int_equal(ch->calls, CHAOS_CLIENTS * CHAOS_CALLS_PER_CLIENT);
}

/* Every receipt given, from get_submission and from one more retry. */
static void
check_receipts_served(struct chaos *ch)
{
	struct idem_submission	 sub;
	struct idem_write_result result;
	struct idem_error	 err;
	struct idem_conn	*conn;
	struct idem_task	 task;
	struct chaos_id		*cid;
	char			 id[64], subject[128], body[256];
	int			 client, n, found;

	conn = harness_connect(&ch->b);
	assert_non_null(conn);
	for (client = 0; client < CHAOS_CLIENTS; client++) {
		for (n = 0; n < CHAOS_CALLS_PER_CLIENT; n++) {
			cid = &ch->ids[client][n];
			if (cid->receipt == NULL)
				continue;
			chaos_id_text(id, sizeof id, client, n);
			if (idem_get_submission(conn, id, &found, &sub,
			    &err) != 0)
				fail_msg("get_submission %s: %s", id,
				    err.message);
			if (!found || !sub.has_receipt ||
			    strcmp(sub.receipt.raw, cid->receipt) != 0) {
				note_lost(ch, cid);
				chaos_report(ch, "%s: get_submission found %d "
				    "state %s receipt %s, given %s", id, found,
				    sub.state_name, sub.has_receipt ?
				    sub.receipt.raw : "-", cid->receipt);
			}
			chaos_task(&task, subject, sizeof subject, body,
			    sizeof body, client, n, 0);
			if (idem_write_task(conn, id, &task, &result,
			    &err) != 0)
				fail_msg("final retry %s: %s", id,
				    err.message);
			if (result.disposition != IDEM_REUSED ||
			    strcmp(result.receipt.raw, cid->receipt) != 0) {
				note_lost(ch, cid);
				chaos_report(ch, "%s: final retry %d receipt "
				    "%s, given %s", id, (int)result.disposition,
				    result.receipt.raw, cid->receipt);
			}
		}
	}
	idem_close(conn);
}

/* ---- The verdict: the files on disk -------------------------------------- */

/* A front matter line "key: <JSON string>"; NULL if absent or not one. */
static char *
front_matter_string(const char *line, const char *key)
{
	json_error_t	 jerr;
	json_t		*v;
	size_t		 length = strlen(key);
	char		*s;

	if (strncmp(line, key, length) != 0 || strncmp(line + length, ": ",
	    2) != 0)
		return NULL;
	if ((v = json_loads(line + length + 2, JSON_DECODE_ANY, &jerr)) ==
	    NULL)
		return NULL;
	s = json_is_string(v) ? strdup(json_string_value(v)) : NULL;
	json_decref(v);
	return s;
}

static void
scan_task_file(struct chaos *ch, const char *path, const char *name)
{
	struct chaos_id	*cid;
	char		*line = NULL, *csid = NULL, *task_id = NULL, *s;
	size_t		 size = 0;
	ssize_t		 got;
	FILE		*f;
	int		 fences = 0, client, n;

	ch->files++;
	if ((f = fopen(path, "re")) == NULL)
		fail_msg("%s: %s", path, strerror(errno));
	while (fences < 2 && (got = getline(&line, &size, f)) != -1) {
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, "---") == 0)
			fences++;
		else if ((s = front_matter_string(line,
		    "client_submission_id")) != NULL) {
			free(csid);
			csid = s;
		} else if ((s = front_matter_string(line, "task_id")) !=
		    NULL) {
			free(task_id);
			task_id = s;
		}
	}
	free(line);
	fclose(f);

	if (csid == NULL || chaos_id_parse(csid, &client, &n) != 0) {
		ch->foreign++;
		chaos_report(ch, "%s: names no submission of this test", path);
		goto out;
	}
	cid = &ch->ids[client][n];
	cid->files++;
	if (cid->receipt == NULL) {
		/* A creation no client was told about. */
		ch->foreign++;
		chaos_report(ch, "%s: %s was never answered", path, csid);
	} else if (task_id == NULL || strcmp(task_id, cid->task_id) != 0 ||
	    strncmp(name, cid->task_id, strlen(cid->task_id)) != 0 ||
	    strcmp(name + strlen(cid->task_id), ".md") != 0) {
		ch->unexpected++;
		chaos_report(ch, "%s: task_id %s, the receipt of %s says %s",
		    path, task_id != NULL ? task_id : "-", csid,
		    cid->task_id);
	}
out:
	free(csid);
	free(task_id);
}

static void
scan_dir(struct chaos *ch, const char *dir, int depth)
{
	struct dirent	*e;
	struct stat	 st;
	DIR		*d;
	char		 path[1024];
	size_t		 length;

	if ((d = opendir(dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		/* Temporary files (".TASK-...tmp...") start with a dot. */
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (lstat(path, &st) == -1)
			fail_msg("%s: %s", path, strerror(errno));
		length = strlen(e->d_name);
		if (S_ISDIR(st.st_mode) && depth > 0)
			scan_dir(ch, path, depth - 1);
		else if (S_ISREG(st.st_mode) &&
		    strncmp(e->d_name, "TASK-", 5) == 0 && length > 3 &&
		    strcmp(e->d_name + length - 3, ".md") == 0)
			scan_task_file(ch, path, e->d_name);
	}
	closedir(d);
}

static void
check_disk(struct chaos *ch)
{
	char	path[400];
	int	client, n;

	snprintf(path, sizeof path, "%s/_lifecycle", ch->b.root);
	scan_dir(ch, path, CHAOS_SCAN_DEPTH);
	snprintf(path, sizeof path, "%s/history", ch->b.root);
	scan_dir(ch, path, CHAOS_SCAN_DEPTH);
	for (client = 0; client < CHAOS_CLIENTS; client++) {
		for (n = 0; n < CHAOS_CALLS_PER_CLIENT; n++) {
			if (ch->ids[client][n].files > 1) {
				ch->duplicates += ch->ids[client][n].files - 1;
				chaos_report(ch, "chaos/c%d/%04d: %d TASK "
				    "files", client, n,
				    ch->ids[client][n].files);
			}
			if (ch->ids[client][n].receipt != NULL &&
			    ch->ids[client][n].files == 0) {
				ch->missing++;
				chaos_report(ch, "chaos/c%d/%04d: no TASK file "
				    "(receipt %s)", client, n,
				    ch->ids[client][n].receipt);
			}
		}
	}
}

/* Run idemctl; returns its exit status (-1 if it did not run). */
static int
run_idemctl(const char *const *args, int quiet)
{
	const char			*idemctl = getenv("IDEMCTL");
	const char			*argv[8];
	posix_spawn_file_actions_t	 actions;
	extern char			**environ;
	pid_t				 pid;
	int				 n = 0, i, status;

	if (idemctl == NULL)
		idemctl = "contrib/idemctl";
	argv[n++] = idemctl;
	for (i = 0; args[i] != NULL && n < 7; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	posix_spawn_file_actions_init(&actions);
	if (quiet) {
		posix_spawn_file_actions_addopen(&actions, 1, "/dev/null",
		    O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&actions, 2, "/dev/null",
		    O_WRONLY, 0);
	}
	fflush(stdout);
	fflush(stderr);
	if (posix_spawn(&pid, idemctl, &actions, NULL, (char *const *)argv,
	    environ) != 0) {
		posix_spawn_file_actions_destroy(&actions);
		return -1;
	}
	posix_spawn_file_actions_destroy(&actions);
	while (waitpid(pid, &status, 0) == -1) {
		if (errno != EINTR)
			return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 +
	    WTERMSIG(status);
}

/* idemctl verify must run and find the workspace clean. */
static void
check_verify(struct chaos *ch)
{
	const char *const	verify[] = { "verify", "--root", ch->b.root,
				    "--sequence-digits", CHAOS_SEQUENCE_DIGITS,
				    NULL };

	ch->verify_status = run_idemctl(verify, 0);
}

/* ---- The test ------------------------------------------------------------ */

static int
setup(void **state)
{
	struct chaos	*ch;
	const char	*tmp = getenv("TMPDIR"), *seed;

	if ((ch = calloc(1, sizeof *ch)) == NULL)
		return -1;
	harness_fresh_root(&ch->b);
	snprintf(ch->dir, sizeof ch->dir, "%s/idem-chaos-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(ch->dir) == NULL)
		return -1;
	ch->progress = mmap(NULL, CHAOS_CLIENTS * sizeof *ch->progress,
	    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ch->progress == MAP_FAILED)
		return -1;
	if ((seed = getenv("CHAOS_SEED")) != NULL)
		ch->seed = strtoull(seed, NULL, 0);
	else
		randombytes_buf(&ch->seed, sizeof ch->seed);
	ch->rng = ch->seed != 0 ? ch->seed : 1;
	harness_watchdog(CHAOS_WATCHDOG_SECONDS);
	*state = ch;
	return 0;
}

static int
teardown(void **state)
{
	struct chaos	*ch = *state;
	char		 cmd[700];
	int		 i, n, status;

	harness_watchdog(0);
	for (i = 0; i < CHAOS_CLIENTS; i++) {
		if (ch->clients[i] == 0)
			continue;
		kill(ch->clients[i], SIGKILL);
		while (waitpid(ch->clients[i], &status, 0) == -1 &&
		    errno == EINTR)
			;
	}
	harness_kill(&ch->b);
	/* A failed test leaves its root, log and results to be looked at. */
	if (ch->b.root[0] != '\0')
		fprintf(stderr, "kept %s, %s and %s\n", ch->b.root, ch->b.log,
		    ch->dir);
	else if (getenv("IDEM_TEST_KEEP") == NULL) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", ch->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", ch->dir);
	}
	for (i = 0; i < CHAOS_CLIENTS; i++) {
		for (n = 0; n < CHAOS_CALLS_PER_CLIENT; n++)
			free(ch->ids[i][n].receipt);
	}
	munmap(ch->progress, CHAOS_CLIENTS * sizeof *ch->progress);
	free(ch);
	return 0;
}

static void
print_figures(struct chaos *ch, double load_seconds, double wall_seconds)
{
	printf("chaos: seed %#llx, %d clients x %d calls, broker --workers "
	    "%s\n", (unsigned long long)ch->seed, CHAOS_CLIENTS,
	    CHAOS_CALLS_PER_CLIENT, CHAOS_WORKERS);
	printf("chaos: calls %d (new %d, retries %d, other content %d), "
	    "tries %lu (at most %u for one call)\n", ch->calls,
	    ch->by_kind[KIND_NEW], ch->by_kind[KIND_RETRY],
	    ch->by_kind[KIND_OTHER], ch->tries, ch->max_tries);
	printf("chaos: worker kills %d, broker restarts %d (%.2f s "
	    "down in all); answers that recovered a creation %d, new ids "
	    "answered reused %d\n", ch->worker_kills, ch->restarts,
	    ch->down_seconds, ch->recovered, ch->new_reused);
	printf("chaos: ids answered %d, TASK files %d, duplicates %d, "
	    "missing %d, lost %d, unanswered %d\n", ch->bound, ch->files,
	    ch->duplicates, ch->missing, ch->lost, ch->unanswered);
	printf("chaos: conflicts expected %d, seen %d; unexpected outcomes "
	    "%d, foreign files %d\n", ch->conflicts_expected,
	    ch->conflicts_seen, ch->unexpected, ch->foreign);
	if (ch->verify_status == -1)
		printf("chaos: idemctl verify: could not run\n");
	else
		printf("chaos: idemctl verify: exit %d\n", ch->verify_status);
	printf("chaos: wall time %.1f s (under load %.1f s)\n", wall_seconds,
	    load_seconds);
	fflush(stdout);
}

static void
chaos_under_load(void **state)
{
	struct chaos	*ch = *state;
	double		 began, load;

	began = now_seconds();
	broker_start(ch);
	clients_start(ch);
	run_chaos(ch);
	load = now_seconds() - began;

	check_results(ch);
	check_receipts_served(ch);
	assert_int_equal(harness_stop(&ch->b), 0);
	check_disk(ch);
	check_verify(ch);
	print_figures(ch, load, now_seconds() - began);

	assert_int_equal(ch->restarts, CHAOS_RESTARTS);
	assert_true(ch->worker_kills > 0);
	assert_int_equal(ch->duplicates, 0);
	assert_int_equal(ch->missing, 0);
	assert_int_equal(ch->lost, 0);
	assert_int_equal(ch->unanswered, 0);
	assert_int_equal(ch->unexpected, 0);
	assert_int_equal(ch->foreign, 0);
	assert_int_equal(ch->conflicts_seen, ch->conflicts_expected);
	assert_int_equal(ch->files, ch->bound);
	if (ch->verify_status != 0)
		fail_msg("idemctl verify %s", ch->verify_status == -1 ?
		    "could not run (IDEMCTL)" : "found the workspace damaged");

	harness_cleanup(&ch->b);
	ch->b.root[0] = '\0';
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(chaos_under_load, setup,
		    teardown),
	};

	if (sodium_init() < 0)
		return 1;
	return FILTER_RUN(tests);
}
