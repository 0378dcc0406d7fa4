/* SPDX-License-Identifier: ISC */
/*
 * test_chaos_effects.c: the effect ledger under chaos (issue 13, item 3).
 *
 * Six client processes each run 120 effects through effect_begin and
 * effect_complete.  "Performing" an effect creates a marker file named
 * after its id and attempt (O_EXCL, fsync'd): the side effect the test
 * can count.  One effect in eight is abandoned right after its marker is
 * written, as if its caller died between the side effect and
 * effect_complete; for half of the effects the client, on
 * outcome_unknown, probes the markers and resolves with what it finds,
 * for the other half it leaves the outcome unknown.  Another one in eight
 * is abandoned right after its proceed, before acting.  Those, and half
 * of the effects abandoned after acting, are taken up again once the
 * client has done its others, as a caller restarted would: their lease
 * lapses into outcome_unknown, the probe finds the marker (resolve
 * `applied`) or none (resolve `not_applied`, then the next attempt).
 * Each resolve's answer must be one SPEC.md allows for its evidence
 * (committed with that marker as result, or released with the attempt,
 * or no answer / a retryable error), and the next begin must find the
 * effect in that state: `reused` with the resolve's receipt, or
 * `proceed` with the next attempt and the same external_key.  Meanwhile
 * the test
 * SIGKILLs a random worker every 100 ms and kills the whole broker
 * twice, starting it again on the same root; the clients reconnect and
 * retry (with the same fence for a complete whose answer was lost).
 *
 * Afterwards, with every client gone and every lease lapsed:
 *  - no effect was performed twice under one id (at most one marker);
 *  - every marker belongs to an effect that is committed (its receipt
 *    names that marker) or outcome_unknown, never released or unknown
 *    to the broker;
 *  - every committed effect has its marker, and every receipt a client
 *    was given comes back byte for byte from a final begin (reused);
 *  - a final begin of an unknown effect answers outcome_unknown, never
 *    proceed;
 *  - every resolve answer was one the contract allows, and the effect
 *    was in the state it named;
 *  - the chaos happened: worker kills, both restarts, outcome_unknown
 *    seen by clients and left at the end, resolves that committed and
 *    resolves that released, and committed effects.
 * The kills are paced by a timerfd, the restarts by the clients'
 * progress; the only other wait is for the leases to lapse, which is
 * time itself.  CHAOS_SEED=N repeats a run's choices.
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

#include "integration/filter.h"
#include "integration/harness.h"

#define EC_CLIENTS		6
#define EC_EFFECTS		120	/* per client */
#define EC_ABANDON_ONE_IN	8
/* How a caller abandons an effect it was told to proceed with. */
#define EC_ABANDON_AFTER	1	/* dies after acting (the marker) */
#define EC_ABANDON_BEFORE	2	/* dies before acting */
#define EC_KIND			"chaos.marker/v1"
#define EC_LEASE_MS		300
#define EC_KILL_INTERVAL_MS	100
#define EC_RESTARTS		2
static const int ec_restart_at[EC_RESTARTS] = { 30, 65 };	/* percent */
#define EC_MAX_WORKERS		16
/* A client gives an effect up after this long without an answer. */
#define EC_EFFECT_DEADLINE_MS	30000
#define EC_WATCHDOG_SECONDS	170
#define EC_MAX_TICKS		(EC_WATCHDOG_SECONDS * 1000 / \
				    EC_KILL_INTERVAL_MS)

/* What the clients saw, counted in memory shared with the test. */
enum ec_tally {
	EC_T_UNKNOWN_SEEN,	/* a begin answered outcome_unknown */
	EC_T_RESOLVE_APPLIED,	/* a resolve committed (its answer came) */
	EC_T_RESOLVE_RELEASED,	/* a resolve released */
	EC_T_RESOLVE_UNANSWERED, /* no answer, or a retryable error */
	EC_T_BAD,		/* an answer the contract does not allow */
	EC_TALLIES
};

struct ec {
	struct broker	 b;
	char		 markers[300];
	char		 results[300];
	uint32_t	*progress;	/* shared with the clients */
	uint32_t	*tally;		/* [client][EC_TALLIES], shared too */
	pid_t		 clients[EC_CLIENTS];
	uint64_t	 seed, rng;
	int		 worker_kills, restarts;
};

static uint64_t
ec_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
ec_pause_ms(long ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int64_t
ec_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- A client -------------------------------------------------------------- */

/* One request on a fresh connection; NULL if the broker did not answer. */
static json_t *
ec_call(struct ec *ec, json_t *request)
{
	struct idem_conn	*c = idem_connect(ec->b.socket, NULL);
	json_t			*reply;

	if (c == NULL) {
		json_decref(request);
		return NULL;
	}
	reply = harness_call(c, request);
	idem_close(c);
	return reply;
}

static const char *
ec_str(json_t *o, const char *key)
{
	const char	*s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "";
}

/* Markers of id in the markers directory: how many, and the last name. */
static int
ec_markers(const char *dir, const char *id, char *name, size_t size)
{
	DIR		*d;
	struct dirent	*de;
	size_t		 n = strlen(id);
	int		 count = 0;

	if ((d = opendir(dir)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, id, n) == 0 && de->d_name[n] == '.') {
			count++;
			if (name != NULL)
				snprintf(name, size, "%s", de->d_name);
		}
	}
	closedir(d);
	return count;
}

/* The side effect: markers/<id>.<attempt>, never twice. */
static int
ec_perform(struct ec *ec, const char *id, json_int_t attempt, char *name,
    size_t size)
{
	char	path[600];
	int	fd;

	snprintf(name, size, "%s.%lld", id, (long long)attempt);
	snprintf(path, sizeof path, "%s/%s", ec->markers, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd == -1)
		return -1;
	if (write(fd, id, strlen(id)) < 0 || fsync(fd) != 0) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static json_t *
ec_request(const char *op, const char *id)
{
	return json_pack("{s:s,s:s,s:s}", "op", op, "client_submission_id", id,
	    "effect_kind", EC_KIND);
}

static void
ec_count(struct ec *ec, int client, enum ec_tally t)
{
	__atomic_add_fetch(&ec->tally[client * EC_TALLIES + t], 1,
	    __ATOMIC_RELAXED);
}

/* An answer the contract does not allow: counted, and said (stderr: a
 * client _exits without flushing stdio buffers). */
static void __attribute__((format(printf, 4, 5)))
ec_bad(struct ec *ec, int client, const char *id, const char *fmt, ...)
{
	va_list	ap;

	ec_count(ec, client, EC_T_BAD);
	fprintf(stderr, "# %s: ", id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * A resolve's answer, judged by its evidence (marker: applied with that
 * marker as result; NULL: not_applied).  Allowed: no answer or a
 * retryable error (nothing known); for applied, committed with a receipt
 * whose result is that marker; for not_applied, released with its
 * attempt and external_key.  Returns what the next begin must then show:
 * the attempt that was released (the next proceed is one more), -1 for
 * committed (*receipt: the receipt the next reused must give), 0 when
 * nothing is known.
 */
static json_int_t
ec_judge_resolve(struct ec *ec, int client, const char *id, json_t *reply,
    const char *marker, char **receipt, char *key, size_t keysize)
{
	json_t		*error = json_object_get(reply, "error");
	json_t		*result;
	const char	*state = ec_str(reply, "state");
	json_int_t	 attempt;

	if (reply == NULL || json_is_true(json_object_get(error,
	    "retryable"))) {
		ec_count(ec, client, EC_T_RESOLVE_UNANSWERED);
		return 0;
	}
	if (!json_is_true(json_object_get(reply, "ok"))) {
		ec_bad(ec, client, id, "resolve %s answered %s", marker !=
		    NULL ? "applied" : "not_applied", json_dumps(reply,
		    JSON_COMPACT));
		return 0;
	}
	if (marker != NULL) {
		result = json_object_get(json_object_get(reply, "receipt"),
		    "result");
		if (strcmp(state, "committed") != 0 ||
		    strcmp(ec_str(result, "marker"), marker) != 0) {
			ec_bad(ec, client, id, "resolve applied (%s) answered "
			    "%s", marker, json_dumps(reply, JSON_COMPACT));
			return 0;
		}
		ec_count(ec, client, EC_T_RESOLVE_APPLIED);
		*receipt = json_dumps(json_object_get(reply, "receipt"),
		    JSON_COMPACT | JSON_PRESERVE_ORDER);
		return -1;
	}
	attempt = json_integer_value(json_object_get(reply, "attempt"));
	if (strcmp(state, "released") != 0 || attempt < 1 ||
	    ec_str(reply, "external_key")[0] == '\0') {
		ec_bad(ec, client, id, "resolve not_applied answered %s",
		    json_dumps(reply, JSON_COMPACT));
		return 0;
	}
	ec_count(ec, client, EC_T_RESOLVE_RELEASED);
	snprintf(key, keysize, "%s", ec_str(reply, "external_key"));
	return attempt;
}

/* The begin after a resolve that answered: the state it named. */
static void
ec_judge_after_resolve(struct ec *ec, int client, const char *id,
    json_t *reply, json_int_t expect_attempt, const char *receipt,
    const char *key)
{
	const char	*disposition = ec_str(reply, "disposition");
	char		*raw;

	if (expect_attempt == -1) {
		raw = json_dumps(json_object_get(reply, "receipt"),
		    JSON_COMPACT | JSON_PRESERVE_ORDER);
		if (strcmp(disposition, "reused") != 0 || raw == NULL ||
		    receipt == NULL || strcmp(raw, receipt) != 0)
			ec_bad(ec, client, id, "resolved applied (receipt %s), "
			    "then begin answered %s", receipt, json_dumps(
			    reply, JSON_COMPACT));
		free(raw);
		return;
	}
	if (strcmp(disposition, "proceed") != 0 ||
	    json_integer_value(json_object_get(reply, "attempt")) !=
	    expect_attempt + 1 ||
	    strcmp(ec_str(reply, "external_key"), key) != 0)
		ec_bad(ec, client, id, "released attempt %lld (key %s), then "
		    "begin answered %s", (long long)expect_attempt, key,
		    json_dumps(reply, JSON_COMPACT));
}

/*
 * One effect to its end: committed (the receipt), unknown, abandoned or
 * failed.  Writes one line: id, outcome, raw receipt; none for an
 * abandoned effect that will be taken up again (later).  Returns the
 * outcome.
 */
static const char *
ec_effect(struct ec *ec, FILE *f, const char *id, int client, int n,
    int abandon, int probe, int later)
{
	json_t		*reply, *request, *receipt;
	const char	*disposition, *outcome = "failed";
	char		 marker[300], fence[64], result[400], *raw = NULL;
	int64_t		 deadline = ec_now_ms() + EC_EFFECT_DEADLINE_MS;
	json_int_t	 attempt, expect_attempt = 0;
	char		*expect_receipt = NULL, expect_key[200];
	int		 found;

	while (ec_now_ms() < deadline) {
		request = ec_request("effect_begin", id);
		json_object_set_new(request, "request", json_pack("{s:i,s:i}",
		    "client", client, "n", n));
		json_object_set_new(request, "lease_ms",
		    json_integer(EC_LEASE_MS));
		if ((reply = ec_call(ec, request)) == NULL) {
			/*
			 * Unanswered after a release: it may have reserved
			 * the next attempt (its record durable, the worker
			 * killed before the reply), so the next answer may be
			 * in_progress or outcome_unknown.  (After a commit
			 * the next is still reused.)
			 */
			if (expect_attempt > 0)
				expect_attempt = 0;
			ec_pause_ms(20);
			continue;
		}
		disposition = ec_str(reply, "disposition");
		/* The first begin answered after a resolve that was. */
		if (expect_attempt != 0 && disposition[0] != '\0') {
			ec_judge_after_resolve(ec, client, id, reply,
			    expect_attempt, expect_receipt, expect_key);
			expect_attempt = 0;
		}
		if (strcmp(disposition, "outcome_unknown") == 0)
			ec_count(ec, client, EC_T_UNKNOWN_SEEN);
		if (strcmp(disposition, "reused") == 0) {
			raw = json_dumps(json_object_get(reply, "receipt"),
			    JSON_COMPACT | JSON_PRESERVE_ORDER);
			outcome = "committed";
			json_decref(reply);
			break;
		}
		if (strcmp(disposition, "proceed") == 0) {
			snprintf(fence, sizeof fence, "%s", ec_str(reply,
			    "fence"));
			attempt = json_integer_value(json_object_get(reply,
			    "attempt"));
			json_decref(reply);
			if (abandon == EC_ABANDON_BEFORE) {
				outcome = "abandoned";	/* never acted */
				break;
			}
			if (ec_perform(ec, id, attempt, marker,
			    sizeof marker) != 0) {
				outcome = "double";	/* the marker existed */
				break;
			}
			if (abandon) {
				outcome = "abandoned";
				break;
			}
			snprintf(result, sizeof result, "{\"marker\":\"%s\"}",
			    marker);
			/* Report it, again with the same fence if lost. */
			while (ec_now_ms() < deadline) {
				request = ec_request("effect_complete", id);
				json_object_set_new(request, "fence",
				    json_string(fence));
				json_object_set_new(request, "outcome",
				    json_string("applied"));
				json_object_set_new(request, "result",
				    json_loads(result, 0, NULL));
				if ((reply = ec_call(ec, request)) == NULL) {
					ec_pause_ms(20);
					continue;
				}
				if (json_is_true(json_object_get(reply, "ok"))) {
					raw = json_dumps(json_object_get(reply,
					    "receipt"), JSON_COMPACT |
					    JSON_PRESERVE_ORDER);
					outcome = "committed";
				} else if (json_is_true(json_object_get(
				    json_object_get(reply, "error"),
				    "retryable"))) {
					json_decref(reply);
					ec_pause_ms(20);
					continue;
				}
				json_decref(reply);
				break;
			}
			break;
		}
		if (strcmp(disposition, "outcome_unknown") == 0) {
			json_decref(reply);
			if (!probe) {
				outcome = "unknown";
				break;
			}
			/* The probe: the markers are the downstream system. */
			found = ec_markers(ec->markers, id, marker,
			    sizeof marker);
			request = ec_request("effect_resolve", id);
			if (found > 0)
				json_object_set_new(request, "evidence",
				    json_pack("{s:s,s:{s:s},s:s}", "observed",
				    "applied", "result", "marker", marker,
				    "source", "marker scan"));
			else
				json_object_set_new(request, "evidence",
				    json_pack("{s:s,s:s}", "observed",
				    "not_applied", "source", "marker scan"));
			reply = ec_call(ec, request);
			free(expect_receipt);
			expect_receipt = NULL;
			expect_attempt = ec_judge_resolve(ec, client, id, reply,
			    found > 0 ? marker : NULL, &expect_receipt,
			    expect_key, sizeof expect_key);
			json_decref(reply);
			continue;	/* begin again: reused or proceed */
		}
		/* in_progress, storage_unavailable, shutting_down, ... */
		json_decref(reply);
		ec_pause_ms(20);
	}
	free(expect_receipt);
	receipt = NULL;
	if (!(later && strcmp(outcome, "abandoned") == 0))
		fprintf(f, "%s\t%s\t%s\n", id, outcome, raw != NULL ? raw :
		    "-");
	free(raw);
	json_decref(receipt);
	return outcome;
}

static void
ec_client(struct ec *ec, int client, pid_t parent)
{
	char		 path[400], id[64];
	uint64_t	 rng;
	FILE		*f;
	int		 i, j, abandon, probe, revisit[EC_EFFECTS], nrevisit = 0;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != parent)
		_exit(3);
	snprintf(path, sizeof path, "%s/client-%d", ec->results, client);
	if ((f = fopen(path, "we")) == NULL)
		_exit(4);
	setvbuf(f, NULL, _IOLBF, 0);
	rng = ec->seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(client + 1));
	if (rng == 0)
		rng = 1;
	for (i = 0; i < EC_EFFECTS; i++) {
		abandon = ec_random(&rng) % EC_ABANDON_ONE_IN == 0 ?
		    EC_ABANDON_AFTER : 0;
		probe = ec_random(&rng) % 2 == 0;
		if (ec_random(&rng) % EC_ABANDON_ONE_IN == 0) {
			abandon = EC_ABANDON_BEFORE;
			probe = 1;
		}
		snprintf(id, sizeof id, "ec-%d-%d", client, i);
		/*
		 * Half of those abandoned after acting, and all of those
		 * abandoned before: taken up again at the end.
		 */
		if (strcmp(ec_effect(ec, f, id, client, i, abandon, probe,
		    abandon && probe), "abandoned") == 0 && probe)
			revisit[nrevisit++] = i;
		__atomic_store_n(&ec->progress[client], (uint32_t)(i + 1),
		    __ATOMIC_RELAXED);
	}
	/* Taken up again: outcome_unknown, the probe, resolve applied. */
	for (j = 0; j < nrevisit; j++) {
		snprintf(id, sizeof id, "ec-%d-%d", client, revisit[j]);
		ec_effect(ec, f, id, client, revisit[j], 0, 1, 0);
	}
	if (ferror(f) || fclose(f) != 0)
		_exit(6);
	_exit(0);
}

/* ---- The chaos ---------------------------------------------------------------- */

static void
ec_broker_start(struct ec *ec)
{
	const char *const	args[] = { "--workers", "2", NULL };

	if (harness_start(&ec->b, args, NULL) != 0)
		fail_msg("idemd did not start on %s (log %s)", ec->b.root,
		    ec->b.log);
}

static int
ec_reap(struct ec *ec)
{
	pid_t	pid;
	int	i, status, running = 0;

	for (i = 0; i < EC_CLIENTS; i++) {
		if (ec->clients[i] == 0)
			continue;
		pid = waitpid(ec->clients[i], &status, WNOHANG);
		if (pid == 0 || (pid == -1 && errno == EINTR)) {
			running++;
			continue;
		}
		assert_true(pid != -1);
		ec->clients[i] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("client %d ended with status %#x", i, status);
	}
	return running;
}

static void
ec_kill_worker(struct ec *ec)
{
	pid_t	pids[EC_MAX_WORKERS], pid, again[EC_MAX_WORKERS];
	int	n, m, i, fd;

	if ((n = harness_workers(&ec->b, pids, EC_MAX_WORKERS)) == 0)
		return;
	pid = pids[ec_random(&ec->rng) % (uint64_t)n];
	/* The pidfd pins the process: a reused pid is never signalled. */
	if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) == -1)
		return;
	m = harness_workers(&ec->b, again, EC_MAX_WORKERS);
	for (i = 0; i < m; i++)
		if (again[i] == pid &&
		    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0) {
			ec->worker_kills++;
			break;
		}
	close(fd);
}

static void
ec_run(struct ec *ec)
{
	struct itimerspec	its;
	uint64_t		expirations, done, total;
	pid_t			parent = getpid();
	int			tfd, ticks = 0, i;

	fflush(stdout);
	fflush(stderr);
	for (i = 0; i < EC_CLIENTS; i++) {
		ec->clients[i] = fork();
		assert_true(ec->clients[i] != -1);
		if (ec->clients[i] == 0)
			ec_client(ec, i, parent);
	}
	total = (uint64_t)EC_CLIENTS * EC_EFFECTS;
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	assert_true(tfd != -1);
	memset(&its, 0, sizeof its);
	its.it_interval.tv_nsec = EC_KILL_INTERVAL_MS * 1000000L;
	its.it_value = its.it_interval;
	assert_int_equal(timerfd_settime(tfd, 0, &its, NULL), 0);
	while (ec_reap(ec) > 0) {
		if (++ticks > EC_MAX_TICKS)
			fail_msg("clients still running after %d ticks", ticks);
		if (read(tfd, &expirations, sizeof expirations) !=
		    (ssize_t)sizeof expirations)
			continue;
		for (done = 0, i = 0; i < EC_CLIENTS; i++)
			done += __atomic_load_n(&ec->progress[i],
			    __ATOMIC_RELAXED);
		if (ec->restarts < EC_RESTARTS &&
		    done * 100 >= (uint64_t)ec_restart_at[ec->restarts] * total) {
			harness_kill(&ec->b);
			ec_broker_start(ec);
			ec->restarts++;
		} else
			ec_kill_worker(ec);
	}
	close(tfd);
}

/* ---- The verdict ---------------------------------------------------------------- */

static void
chaos_effects_markers_match_receipts(void **state)
{
	struct ec	*ec;
	char		 path[400], line[4096], marker[300], *tab, *tab2;
	char		 want[400], *again;
	json_t		*reply, *sub, *request;
	FILE		*f;
	const char	*seed = getenv("CHAOS_SEED");
	char		 st[32];
	int		 c, i, markers, failures = 0, committed = 0;
	int		 unknown = 0, abandoned = 0, lines = 0;
	unsigned	 tally[EC_TALLIES] = { 0 };

	(void)state;
	harness_watchdog(EC_WATCHDOG_SECONDS + 20);
	ec = calloc(1, sizeof *ec);
	assert_non_null(ec);
	ec->progress = mmap(NULL, EC_CLIENTS * sizeof *ec->progress,
	    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(ec->progress != MAP_FAILED);
	ec->tally = mmap(NULL, EC_CLIENTS * EC_TALLIES * sizeof *ec->tally,
	    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(ec->tally != MAP_FAILED);
	harness_fresh_root(&ec->b);
	snprintf(ec->markers, sizeof ec->markers, "%s/markers", ec->b.root);
	snprintf(ec->results, sizeof ec->results, "%s/results", ec->b.root);
	assert_int_equal(mkdir(ec->markers, 0755), 0);
	assert_int_equal(mkdir(ec->results, 0755), 0);
	ec->seed = seed != NULL ? strtoull(seed, NULL, 10) :
	    (uint64_t)time(NULL) ^ (uint64_t)getpid();
	ec->rng = ec->seed | 1;
	printf("# CHAOS_SEED=%llu\n", (unsigned long long)ec->seed);

	ec_broker_start(ec);
	ec_run(ec);
	/* Let every lease lapse: an abandoned effect is unknown after it. */
	ec_pause_ms(EC_LEASE_MS * 2);

	for (c = 0; c < EC_CLIENTS; c++) {
		snprintf(path, sizeof path, "%s/client-%d", ec->results, c);
		f = fopen(path, "r");
		assert_non_null(f);
		while (fgets(line, sizeof line, f) != NULL) {
			lines++;
			line[strcspn(line, "\n")] = '\0';
			tab = strchr(line, '\t');
			assert_non_null(tab);
			*tab++ = '\0';
			tab2 = strchr(tab, '\t');
			assert_non_null(tab2);
			*tab2++ = '\0';
			markers = ec_markers(ec->markers, line, marker,
			    sizeof marker);
			if (markers > 1) {
				printf("# %s performed %d times\n", line,
				    markers);
				failures++;
			}
			if (strcmp(tab, "double") == 0 ||
			    strcmp(tab, "failed") == 0) {
				printf("# %s: %s\n", line, tab);
				failures++;
			}
			if (strcmp(tab, "abandoned") == 0)
				abandoned++;
			request = json_pack("{s:s,s:s,s:s}", "op",
			    "get_submission", "client_submission_id", line,
			    "effect_kind", EC_KIND);
			reply = harness_call_once(&ec->b, request);
			assert_non_null(reply);
			sub = json_object_get(reply, "submission");
			/* Kept past the reply: the final begin judges by it. */
			snprintf(st, sizeof st, "%s", ec_str(sub, "state"));
			if (strcmp(st, "committed") == 0) {
				committed++;
				snprintf(want, sizeof want,
				    "\"marker\":\"%s\"", marker);
				again = json_dumps(json_object_get(sub,
				    "receipt"), JSON_COMPACT |
				    JSON_PRESERVE_ORDER);
				if (markers != 1 || again == NULL ||
				    strstr(again, want) == NULL) {
					printf("# %s committed, %d markers, "
					    "receipt %s\n", line, markers,
					    again != NULL ? again : "-");
					failures++;
				}
				if (strcmp(tab2, "-") != 0 && (again == NULL ||
				    strcmp(again, tab2) != 0)) {
					printf("# %s: receipt changed\n", line);
					failures++;
				}
				free(again);
			} else if (strcmp(st, "outcome_unknown") == 0) {
				unknown++;
			} else {
				/* released, reserved, absent: no marker. */
				if (markers != 0) {
					printf("# %s is %s with a marker\n",
					    line, st[0] != '\0' ? st :
					    "unknown to the broker");
					failures++;
				}
			}
			json_decref(reply);
			/* Time never turns an unknown into a proceed. */
			request = json_pack("{s:s,s:s,s:s,s:{s:i,s:i}}", "op",
			    "effect_begin", "client_submission_id", line,
			    "effect_kind", EC_KIND, "request", "client", c,
			    "n", atoi(strrchr(line, '-') + 1));
			reply = harness_call_once(&ec->b, request);
			assert_non_null(reply);
			if (strcmp(st, "outcome_unknown") == 0 &&
			    strcmp(ec_str(reply, "disposition"),
			    "outcome_unknown") != 0) {
				printf("# %s: unknown, then %s\n", line,
				    ec_str(reply, "disposition"));
				failures++;
			}
			if (strcmp(st, "committed") == 0 &&
			    strcmp(ec_str(reply, "disposition"), "reused") !=
			    0) {
				printf("# %s: committed, then %s\n", line,
				    ec_str(reply, "disposition"));
				failures++;
			}
			json_decref(reply);
		}
		fclose(f);
	}
	for (c = 0; c < EC_CLIENTS; c++)
		for (i = 0; i < EC_TALLIES; i++)
			tally[i] += ec->tally[c * EC_TALLIES + i];
	printf("# %d effects: %d committed, %d outcome_unknown (%d "
	    "abandoned by their caller); %d worker kills, %d broker "
	    "restarts\n", lines, committed, unknown, abandoned,
	    ec->worker_kills, ec->restarts);
	printf("# clients saw outcome_unknown %u times; resolves: %u "
	    "committed, %u released, %u unanswered (or retryable), %u "
	    "answers the contract does not allow\n",
	    tally[EC_T_UNKNOWN_SEEN], tally[EC_T_RESOLVE_APPLIED],
	    tally[EC_T_RESOLVE_RELEASED], tally[EC_T_RESOLVE_UNANSWERED],
	    tally[EC_T_BAD]);
	assert_int_equal(lines, EC_CLIENTS * EC_EFFECTS);
	assert_int_equal(failures, 0);
	assert_int_equal(tally[EC_T_BAD], 0);
	/*
	 * The chaos must have happened, and every end been reached: a test
	 * where no worker died, no outcome was unknown or no resolve
	 * committed or released proved nothing about them.
	 */
	assert_int_equal(ec->restarts, EC_RESTARTS);
	assert_true(ec->worker_kills > 0);
	assert_true(committed > 0);
	assert_true(unknown > 0);
	assert_true(tally[EC_T_UNKNOWN_SEEN] > 0);
	assert_true(tally[EC_T_RESOLVE_APPLIED] > 0);
	assert_true(tally[EC_T_RESOLVE_RELEASED] > 0);
	harness_watchdog(0);
	harness_finish(&ec->b);
	munmap(ec->tally, EC_CLIENTS * EC_TALLIES * sizeof *ec->tally);
	munmap(ec->progress, EC_CLIENTS * sizeof *ec->progress);
	free(ec);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(chaos_effects_markers_match_receipts),
	};

	return FILTER_RUN(tests);
}
