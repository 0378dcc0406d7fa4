/* SPDX-License-Identifier: ISC */
/*
 * test_effect_extend.c: effect_extend against a real idemd on the local
 * store (SPEC.md, "Effects"; doc/effects.md, "Long effects"): a short
 * lease kept alive by extensions outlives itself while a concurrent
 * caller gets in_progress throughout; a holder killed mid-effect stops
 * extending and its lease lapses into outcome_unknown, never proceed;
 * every refusal (stale fence, a lapse, a commit, no reservation, a
 * release, bad requests) changes nothing; and a broker killed in the
 * middle of an extended effect keeps the last durable expiry: the
 * extension itself once it was flushed, the earlier one when the kill
 * came while the journal's fdatasync was held (the fault shim's hold
 * rule), so that the extension was answered and never written.  The
 * PostgreSQL store's are in tests/cluster/test_cluster.c.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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
#include "integration/effects_test.h"

/* journal_bytes reads at most this much of a segment. */
#define JOURNAL_BYTES_MAX	(8 * 1024 * 1024)
/* The figures: a 300 ms lease extended every 100 ms for 3 s. */
#define LEASE_MS	300
#define EXTEND_EVERY_MS	100
#define EXTEND_FOR_MS	3000
/*
 * idem_effect_run's lease: a perform three of them long, kept by the
 * keeper's extensions.  Long enough for a loaded 2-core host's
 * scheduling (the keeper, the broker's worker and this test's thread
 * each waiting their turn), which a 300 ms lease was not: what is
 * proved (a perform longer than its lease, never answered
 * outcome_unknown, the keeper's extensions counted) does not need it
 * short.
 */
#define KEEP_LEASE_MS	1000
#define KEEP_LEASES	3
/* A log line awaited (inotify, harness_wait_log). */
#define LOG_WAIT_MS	30000

/* ---- Helpers ------------------------------------------------------------- */

static void
sleep_ms(int64_t ms)
{
	struct timespec	ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* The broker's clock (wall-clock ms), for its lease_expires_at. */
static int64_t
wall_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *
extend_request(const char *id, const char *fence, int64_t lease_ms)
{
	json_t	*r;

	r = json_pack("{s:s, s:s, s:s, s:s}", "op", "effect_extend",
	    "client_submission_id", id, "effect_kind", KIND, "fence", fence);
	assert_non_null(r);
	if (lease_ms > 0)
		json_object_set_new(r, "lease_ms", json_integer(lease_ms));
	return r;
}

static const char *
disposition_of(json_t *reply)
{
	const char	*d = json_string_value(json_object_get(reply,
			    "disposition"));

	return d != NULL ? d : "";
}

/* "2026-12-05T01:02:03.456Z" -> milliseconds since the epoch. */
static int64_t
time_ms(const char *text)
{
	struct tm	 tm;
	const char	*end;
	int		 ms;

	memset(&tm, 0, sizeof tm);
	end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
	if (end == NULL || sscanf(end, ".%3dZ", &ms) != 1)
		fail_msg("not a reply time: %s", text);
	return (int64_t)timegm(&tm) * 1000 + ms;
}

/* An extension's new end: SPEC's {"ok":true,"lease_expires_at":...}. */
static int64_t
extended_until(json_t *reply)
{
	char	*text;

	if (!json_is_true(json_object_get(reply, "ok"))) {
		text = json_dumps(reply, JSON_COMPACT);
		fail_msg("extension refused: %s", text);
	}
	assert_null(json_object_get(reply, "disposition"));
	return time_ms(harness_str(reply, "lease_expires_at"));
}

/* get_submission of the effect: its "submission" (a new reference). */
static json_t *
effect_state(struct broker *b, const char *id)
{
	json_t	*reply, *s;

	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}", "op",
	    "get_submission", "client_submission_id", id, "effect_kind",
	    KIND));
	harness_assert_bool(reply, "found", 1);
	s = json_incref(json_object_get(reply, "submission"));
	json_decref(reply);
	return s;
}

static int64_t
lease_now(struct broker *b, const char *id)
{
	json_t	*s = effect_state(b, id);
	int64_t	 t = time_ms(harness_str(s, "lease_expires_at"));

	json_decref(s);
	return t;
}

static struct broker *
start(void **state)
{
	struct harness_shim	*t = *state;

	harness_must_start(&t->b, NULL, t->env);
	return &t->b;
}

/* ---- A long effect ------------------------------------------------------- */

struct rival {
	struct broker	*b;
	_Atomic int	 stop;
	int		 in_progress, other;
	char		 other_text[512];
};

/* Another caller, begin after begin, for as long as the holder extends. */
static void *
rival_main(void *arg)
{
	struct rival		*r = arg;
	struct idem_conn	*c = harness_connect(r->b);
	json_t			*reply;
	char			*text;

	if (c == NULL) {
		r->other++;
		return NULL;
	}
	while (!r->stop) {
		reply = harness_call(c, begin_request("long-1", KIND, REQUEST,
		    LEASE_MS));
		if (reply != NULL && strcmp(disposition_of(reply),
		    "in_progress") == 0)
			r->in_progress++;
		else {
			r->other++;
			text = reply != NULL ? json_dumps(reply,
			    JSON_COMPACT) : NULL;
			snprintf(r->other_text, sizeof r->other_text, "%s",
			    text != NULL ? text : "(no reply)");
			free(text);
		}
		json_decref(reply);
		sleep_ms(10);
	}
	idem_close(c);
	return NULL;
}

static void
extended_lease_outlives_itself_and_nobody_else_proceeds(void **state)
{
	struct broker		*b = start(state);
	struct idem_conn	*c;
	struct rival		 rival;
	pthread_t		 thread;
	json_t			*reply, *s;
	char			*fence;
	unsigned		 slow = harness_slowdown();
	int64_t			 lease = LEASE_MS * slow, until, last;
	int64_t			 sent;
	int64_t			 started, left;
	int			 extensions = 0, records;
	char			*out, *at;

	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, begin_request("long-1", KIND, REQUEST, lease));
	fence = fence_of(reply);
	last = time_ms(harness_str(reply, "lease_expires_at"));
	json_decref(reply);

	memset(&rival, 0, sizeof rival);
	rival.b = b;
	assert_int_equal(pthread_create(&thread, NULL, rival_main, &rival), 0);
	/*
	 * A count of extensions, not a time window: under load fewer calls
	 * fit in a window, and the premise (the lease outlived itself ten
	 * times over) is then asserted on the elapsed time instead.
	 */
	started = harness_now_ms();
	while (extensions < EXTEND_FOR_MS / EXTEND_EVERY_MS) {
		sleep_ms(EXTEND_EVERY_MS * slow);
		sent = wall_ms();
		reply = harness_call(c, extend_request("long-1", fence, lease));
		assert_non_null(reply);
		until = extended_until(reply);
		/* now + lease_ms on the broker's clock (this host's). */
		assert_true(until >= sent + lease - 1);
		assert_true(until <= wall_ms() + lease + 1);
		assert_true(until > last);
		last = until;
		json_decref(reply);
		extensions++;
	}
	/* diagnose and get_submission show the time left. */
	s = effect_state(b, "long-1");
	assert_string_equal(harness_str(s, "state"), "reserved");
	harness_assert_bool(s, "lease_live", 1);
	left = harness_int(s, "lease_ms_left");
	assert_true(left > 0 && left <= lease);
	json_decref(s);
	/*
	 * The attempt is three seconds old; its last extension, a tenth of
	 * one: not stalled after a second, as age counts from it.
	 */
	reply = harness_must_call(b, json_pack("{s:s, s:I}", "op", "diagnose",
	    "stale_after_ms", (json_int_t)(1000 * slow)));
	s = json_array_get(json_object_get(reply, "entries"), 0);
	assert_non_null(s);
	assert_string_equal(harness_str(s, "client_submission_id"), "long-1");
	assert_true(harness_int(s, "lease_ms_left") > 0);
	assert_true(harness_int(s, "age_ms") < 1000 * (int64_t)slow);
	harness_assert_bool(s, "stalled", 0);
	json_decref(reply);

	/* The rival stops before the complete (it would be reused). */
	rival.stop = 1;
	pthread_join(thread, NULL);
	if (rival.other > 0)
		fail_msg("a rival's begin got %s", rival.other_text);
	assert_true(rival.in_progress > 0);
	/* Ten times its lease later, the effect completes. */
	reply = harness_call(c, complete_request("long-1", fence, "applied",
	    RESULT));
	assert_non_null(reply);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "committed");
	json_decref(reply);
	assert_true(harness_now_ms() - started >= 10 * lease);

	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	assert_int_equal(harness_int(reply, "effects_proceed"), 1);
	assert_int_equal(harness_int(reply, "effects_outcome_unknown"), 0);
	assert_int_equal(harness_int(reply, "effects_extended"), extensions);
	json_decref(reply);
	reply = harness_call(c, begin_request("long-1", KIND, REQUEST, lease));
	assert_disposition(reply, "reused");
	json_decref(reply);
	idem_close(c);
	free(fence);
	/*
	 * The extensions are EFFECT records of the key like any other:
	 * journal dump shows each (the begin's, one per extension, the
	 * commit's) and verify reads them clean.
	 */
	out = malloc(1 << 20);
	assert_non_null(out);
	assert_int_equal(harness_idemctl(out, 1 << 20, "--root '%s' verify",
	    b->root), 0);
	assert_int_equal(harness_idemctl(out, 1 << 20, "--root '%s' journal "
	    "dump", b->root), 0);
	for (records = 0, at = out; (at = strstr(at, "long-1")) != NULL;
	    at++)
		records++;
	assert_true(records >= extensions + 2);
	free(out);
	harness_shim_finish(*state);
}

/*
 * The holder is a process of its own that extends until it is killed:
 * it writes its fence to fd, then extends every EXTEND_EVERY_MS.
 */
static void
holder_main(struct broker *b, int fd, int64_t lease)
{
	struct idem_conn	*c = harness_connect(b);
	json_t			*reply, *r;
	const char		*fence;

	if (c == NULL || (reply = harness_call(c, begin_request("held-1",
	    KIND, REQUEST, lease))) == NULL ||
	    strcmp(disposition_of(reply), "proceed") != 0)
		_exit(1);
	fence = json_string_value(json_object_get(reply, "fence"));
	if (write(fd, fence, strlen(fence) + 1) != (ssize_t)strlen(fence) + 1)
		_exit(1);
	for (;;) {
		sleep_ms(EXTEND_EVERY_MS * harness_slowdown());
		r = harness_call(c, extend_request("held-1", fence, lease));
		if (r == NULL || !json_is_true(json_object_get(r, "ok")))
			_exit(2);
		json_decref(r);
	}
}

static void
holder_killed_mid_effect_lapses_to_outcome_unknown(void **state)
{
	struct broker	*b = start(state);
	json_t		*reply, *s;
	char		 fence[64];
	int		 fds[2], status, alive;
	unsigned	 slow = harness_slowdown();
	int64_t		 lease = LEASE_MS * slow, started, killed_at;
	int64_t		 until;
	ssize_t		 n;
	pid_t		 pid;

	assert_int_equal(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		close(fds[0]);
		holder_main(b, fds[1], lease);
	}
	assert_true(pid > 0);
	close(fds[1]);
	n = read(fds[0], fence, sizeof fence);
	close(fds[0]);
	assert_true(n > 0 && fence[n - 1] == '\0');

	/* Three leases long the holder keeps it: in_progress throughout. */
	started = harness_now_ms();
	while (harness_now_ms() - started < 3 * lease) {
		reply = begin(b, "held-1", REQUEST, 0);
		assert_disposition(reply, "in_progress");
		json_decref(reply);
		sleep_ms(20);
	}
	alive = waitpid(pid, &status, WNOHANG) == 0;
	assert_true(alive);
	/* Killed mid-effect: nobody extends any more. */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	killed_at = wall_ms();
	until = lease_now(b, "held-1");
	reply = begin_until_unknown(b, "held-1", REQUEST);
	/* It lapsed at the last extension's end, not before. */
	assert_true(wall_ms() >= until);
	assert_true(until <= killed_at + lease + 1);
	json_decref(reply);
	/* For ever: time never turns it into proceed. */
	reply = begin(b, "held-1", REQUEST, 0);
	assert_disposition(reply, "outcome_unknown");
	json_decref(reply);

	/* The dead holder's fence: not extended, but its complete counts. */
	reply = harness_must_call(b, extend_request("held-1", fence, lease));
	assert_disposition(reply, "outcome_unknown");
	assert_error(reply, "outcome_unknown", NULL);
	harness_assert_bool(json_object_get(reply, "error"), "retryable", 0);
	assert_string_equal(harness_str(json_object_get(reply, "existing"),
	    "state"), "outcome_unknown");
	json_decref(reply);
	s = effect_state(b, "held-1");
	assert_int_equal(time_ms(harness_str(s, "lease_expires_at")), until);
	harness_assert_bool(s, "lease_live", 0);
	assert_int_equal(harness_int(s, "lease_ms_left"), 0);
	json_decref(s);
	reply = complete(b, "held-1", fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	assert_string_equal(harness_str(reply, "state"), "committed");
	json_decref(reply);
	harness_shim_finish(*state);
}

/* ---- Refusals ------------------------------------------------------------ */

static void
extend_refusals_change_nothing(void **state)
{
	struct broker	*b = start(state);
	json_t		*reply, *r, *s;
	char		*f1, *f2, forged[64];
	int64_t		 before, sent, until;

	/* No reservation under the key. */
	reply = harness_must_call(b, extend_request("none",
	    "1-0123456789abcdef", 1000));
	assert_reason(reply, "no_reservation");
	json_decref(reply);

	reply = begin(b, "r-1", REQUEST, 60000);
	f1 = fence_of(reply);
	json_decref(reply);
	before = lease_now(b, "r-1");
	/* The current attempt with another random part: stale. */
	snprintf(forged, sizeof forged, "%.*s%s", (int)(strchr(f1, '-') - f1),
	    f1, strcmp(strchr(f1, '-'), "-0000000000000000") == 0 ?
	    "-0000000000000001" : "-0000000000000000");
	reply = harness_must_call(b, extend_request("r-1", forged, 600000));
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	assert_int_equal(lease_now(b, "r-1"), before);

	/* null is the default lease, 30 s; a shorter one is allowed. */
	r = extend_request("r-1", f1, 0);
	json_object_set_new(r, "lease_ms", json_null());
	sent = wall_ms();
	reply = harness_must_call(b, r);
	until = extended_until(reply);
	assert_true(until >= sent + 30000 - 1 &&
	    until <= wall_ms() + 30000 + 1);
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f1, 100));
	until = extended_until(reply);
	json_decref(reply);
	assert_int_equal(lease_now(b, "r-1"), until);
	/* The extension granted the lease now: updated_at is its time. */
	s = effect_state(b, "r-1");
	assert_int_equal(time_ms(harness_str(s, "updated_at")), until - 100);
	assert_true(time_ms(harness_str(s, "updated_at")) >=
	    time_ms(harness_str(s, "reserved_at")));
	json_decref(s);

	/* Bad requests: refused before anything is read. */
	reply = harness_must_call(b, extend_request("r-1", f1, 99));
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f1, 86400001));
	assert_error(reply, "invalid_request", "lease_ms");
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s}", "op",
	    "effect_extend", "client_submission_id", "r-1", "effect_kind",
	    KIND));
	assert_error(reply, "invalid_request", "fence");
	json_decref(reply);
	r = extend_request("r-1", f1, 1000);
	json_object_set_new(r, "request", json_object());
	reply = harness_must_call(b, r);
	assert_error(reply, "invalid_request", NULL);
	json_decref(reply);
	reply = harness_must_call(b, json_pack("{s:s, s:s, s:s, s:s}", "op",
	    "effect_extend", "client_submission_id", "r-1", "effect_kind",
	    "write_task", "fence", f1));
	assert_error(reply, "invalid_request", "effect_kind");
	json_decref(reply);

	/* After the lapse: outcome_unknown, not extended. */
	json_decref(begin_until_unknown(b, "r-1", REQUEST));
	reply = harness_must_call(b, extend_request("r-1", f1, 600000));
	assert_disposition(reply, "outcome_unknown");
	json_decref(reply);
	assert_int_equal(lease_now(b, "r-1"), until);

	/* Released: nothing to extend; a new attempt makes f1 stale. */
	reply = complete(b, "r-1", f1, "not_applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f1, 1000));
	assert_reason(reply, "no_reservation");
	json_decref(reply);
	reply = begin(b, "r-1", REQUEST, 60000);
	f2 = fence_of(reply);
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f1, 600000));
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f2, 600000));
	(void)extended_until(reply);
	json_decref(reply);

	/* Committed: already_committed (a stale fence is still stale). */
	reply = complete(b, "r-1", f2, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f2, 1000));
	assert_reason(reply, "already_committed");
	json_decref(reply);
	reply = harness_must_call(b, extend_request("r-1", f1, 1000));
	assert_reason(reply, "stale_fence");
	json_decref(reply);
	reply = begin(b, "r-1", REQUEST, 0);
	assert_disposition(reply, "reused");
	json_decref(reply);
	free(f1);
	free(f2);
	harness_shim_finish(*state);
}

/*
 * While the journal is failed an extension needs a record it cannot
 * have: storage_unavailable (retryable), nothing recorded, the lease
 * running on; once the broker reopened its state, the same extension
 * goes through.
 */
static void
extend_while_the_journal_fails(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = start(state);
	json_t			*reply = NULL, *error;
	char			*fence;
	int64_t			 before;
	int			 tries;

	reply = begin(b, "j-1", REQUEST, 60000);
	fence = fence_of(reply);
	json_decref(reply);
	before = lease_now(b, "j-1");
	harness_fault_rule(t->fault_file, "write .idem/journal ENOSPC");
	/* A record that fails the journal, then the extension meets it. */
	json_decref(harness_call_once(b, begin_request("j-2", KIND, REQUEST,
	    0)));
	reply = harness_call_once(b, extend_request("j-1", fence, 600000));
	/*
	 * Refused, or dropped by a worker draining for the reopen; or, when
	 * the reopen was quicker than this request, extended (the reply
	 * waits for no flush): its record then fails the journal in turn,
	 * and that reopen sets the lease back to its durable expiry, as a
	 * crash would (SPEC.md: the last durable expiry counts).
	 */
	if (reply != NULL && json_is_true(json_object_get(reply, "ok"))) {
		harness_wait_log(b, "journal write failed", 2,
		    LOG_WAIT_MS);
		harness_wait_log(b, "journal reopened and verified", 2,
		    LOG_WAIT_MS);
	} else if (reply != NULL) {
		error = json_object_get(reply, "error");
		assert_string_equal(harness_str(error, "code"),
		    "storage_unavailable");
		harness_assert_bool(error, "retryable", 1);
	}
	json_decref(reply);
	harness_fault_rule(t->fault_file, "");
	assert_int_equal(lease_now(b, "j-1"), before);
	for (tries = 0; tries < 1000; tries++) {
		reply = harness_call_once(b, extend_request("j-1", fence,
		    600000));
		if (reply != NULL && json_is_true(json_object_get(reply, "ok")))
			break;
		json_decref(reply);
		reply = NULL;
		sleep_ms(5);
	}
	if (reply == NULL)
		fail_msg("the extension failed across the reopen");
	assert_true(extended_until(reply) > before);
	json_decref(reply);
	free(fence);
	harness_shim_finish(*state);
}

/* ---- libidem ------------------------------------------------------------- */

struct slow_side {
	struct broker	*b;
	int64_t		 run_ms;
	json_int_t	 extended;	/* effects_extended to wait for */
	int		 performed, rivals_in_progress, rivals_other;
};

static json_int_t
effects_extended(struct broker *b)
{
	json_t		*reply;
	json_int_t	 n;

	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	n = harness_int(reply, "effects_extended");
	json_decref(reply);
	return n;
}

/*
 * A perform at least KEEP_LEASES leases long that ends once the keeper has
 * extended the lease s->extended times in all (an event, not a count
 * hoped for in a window: under load the keeper's turns come later);
 * the others' begins meanwhile.  LAPSE_WAIT_MS bounds the wait, and
 * the caller's assertion then fails.
 */
static enum idem_effect_observed
slow_perform(const struct idem_effect *begun, char **result, void *arg)
{
	struct slow_side	*s = arg;
	int64_t			 started = harness_now_ms(), elapsed;
	json_t			*reply;

	s->performed++;
	assert_int_equal(begun->disposition, IDEM_EFFECT_PROCEED);
	for (;;) {
		reply = begin(s->b, "lib-run", REQUEST, 0);
		if (strcmp(disposition_of(reply), "in_progress") == 0)
			s->rivals_in_progress++;
		else
			s->rivals_other++;
		json_decref(reply);
		elapsed = harness_now_ms() - started;
		if (elapsed >= s->run_ms + LAPSE_WAIT_MS ||
		    (elapsed >= s->run_ms &&
		    effects_extended(s->b) >= s->extended))
			break;
		sleep_ms(20);
	}
	*result = strdup(RESULT);
	return IDEM_OBSERVED_APPLIED;
}

static void
libidem_extend_and_run_keep_the_lease(void **state)
{
	struct broker		*b = start(state);
	struct idem_conn	*c;
	struct idem_effect	 out;
	struct idem_error	 err;
	struct slow_side	 side;
	char			 fence[IDEM_EFFECT_FENCE_SIZE];
	json_t			*reply;
	int64_t			 lease;

	lease = LEASE_MS * (int64_t)harness_slowdown();
	c = harness_connect(b);
	assert_non_null(c);
	/* idem_effect_extend: EXTENDED, then each refusal as an answer. */
	assert_int_equal(idem_effect_begin(c, "lib-1", KIND, REQUEST, lease,
	    &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_PROCEED);
	snprintf(fence, sizeof fence, "%s", out.fence);
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_extend(c, "lib-1", KIND, fence, 600000,
	    &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_EXTENDED);
	assert_true(time_ms(out.lease_expires_at) > wall_ms() + 500000);
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_extend(c, "lib-1", KIND,
	    "1-0000000000000000", 1000, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_CONFLICT);
	assert_string_equal(err.reason, "stale_fence");
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_extend(c, "lib-none", KIND, fence, 1000,
	    &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_CONFLICT);
	assert_string_equal(err.reason, "no_reservation");
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_extend(c, "lib-1", KIND, fence, 99, &out,
	    &err), -1);
	assert_int_equal(out.disposition, IDEM_EFFECT_NONE);
	idem_effect_clear(&out);
	assert_int_equal(idem_effect_extend(c, "lib-1", KIND, fence, 100,
	    &out, &err), 0);
	idem_effect_clear(&out);
	json_decref(begin_until_unknown(b, "lib-1", REQUEST));
	assert_int_equal(idem_effect_extend(c, "lib-1", KIND, fence, 1000,
	    &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_OUTCOME_UNKNOWN);
	assert_int_equal(err.code, IDEM_E_OUTCOME_UNKNOWN);
	idem_effect_clear(&out);

	/* idem_effect_run: a perform KEEP_LEASES leases long, kept. */
	lease = KEEP_LEASE_MS * (int64_t)harness_slowdown();
	memset(&side, 0, sizeof side);
	side.b = b;
	side.run_ms = KEEP_LEASES * lease;
	/* lib-1's two, and the keeper's: three a lease, two awaited. */
	side.extended = 2 + 2 * KEEP_LEASES;
	assert_int_equal(idem_effect_run(c, "lib-run", KIND, REQUEST, lease,
	    slow_perform, NULL, &side, &out, &err), 0);
	assert_int_equal(out.disposition, IDEM_EFFECT_COMMITTED);
	assert_int_equal(out.attempt, 1);
	assert_string_equal(out.result, RESULT);
	idem_effect_clear(&out);
	assert_int_equal(side.performed, 1);
	assert_int_equal(side.rivals_other, 0);
	assert_true(side.rivals_in_progress > 0);
	reply = harness_must_call(b, json_pack("{s:s}", "op", "stats"));
	/* lib-1's lapse only; lib-run's keeper extended it. */
	assert_int_equal(harness_int(reply, "effects_outcome_unknown"), 1);
	assert_true(harness_int(reply, "effects_extended") >= side.extended);
	json_decref(reply);
	idem_close(c);
	harness_shim_finish(*state);
}

/* ---- Restarts ------------------------------------------------------------ */

/*
 * The bytes of the journal's records: they grow when a round writes.
 * Not the files' sizes: a round writes over the zeros the broker keeps
 * ahead (doc/journal.md, "The zero tail"), so a segment's size moves
 * when zeros are written, not when records are.  Each record, from
 * offset 32: magic ff 'JRC', a little-endian payload length, an 8-byte
 * checksum, the payload; in a format 2 segment after a 24-byte round
 * prefix, magic ff 'JRD' (doc/journal.md, "Rounds over the zero tail"),
 * after zeros up to a 512-byte boundary where the rule asks ("Sector
 * padding").
 */
static off_t
journal_bytes(const struct broker *b)
{
	static const uint8_t	 magic[4] = { 0xff, 'J', 'R', 'C' };
	static const uint8_t	 round[4] = { 0xff, 'J', 'R', 'D' };
	char			 dir[PATH_MAX], path[PATH_MAX + 256];
	struct dirent		*de;
	uint8_t			*p;
	size_t			 n, at, i, s;
	off_t			 total = 0;
	FILE			*f;
	DIR			*d;

	snprintf(dir, sizeof dir, "%s/.idem/journal", b->root);
	assert_non_null(d = opendir(dir));
	assert_non_null(p = malloc(JOURNAL_BYTES_MAX));
	while ((de = readdir(d)) != NULL) {
		if (strstr(de->d_name, ".jnl") == NULL)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if ((f = fopen(path, "rb")) == NULL)
			continue;
		n = fread(p, 1, JOURNAL_BYTES_MAX, f);
		fclose(f);
		for (at = 32;;) {
			/*
			 * Format 2's sector padding: a prefix and inner
			 * header (40 bytes) never cross a 512-byte boundary,
			 * zeros up to it instead.
			 */
			s = at;
			if (p[8] == 2 && at % 512 + 40 > 512 &&
			    (at / 512 + 1) * 512 <= n)
				s = (at / 512 + 1) * 512;
			i = s + 24 <= n && memcmp(p + s, round, 4) == 0 ?
			    s + 24 : s;
			if (i + 16 > n || memcmp(p + i, magic, 4) != 0)
				break;
			at = i + 16 + ((size_t)p[i + 4] | (size_t)p[i + 5] <<
			    8 | (size_t)p[i + 6] << 16 | (size_t)p[i + 7] <<
			    24);
		}
		total += (off_t)(at < n ? at : n);
	}
	free(p);
	closedir(d);
	return total;
}

static void
restart_keeps_the_last_durable_expiry(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = start(state);
	json_t			*reply, *held;
	char			*fence, *line;
	int64_t			 first, extended, seen;
	off_t			 size;
	int			 fd, waited;

	/* A flushed extension survives a kill -9. */
	reply = begin(b, "x-1", REQUEST, 2000);
	fence = fence_of(reply);
	json_decref(reply);
	reply = harness_must_call(b, extend_request("x-1", fence, 600000));
	extended = extended_until(reply);
	json_decref(reply);
	/* A durable record after it in the journal: the extension's too. */
	reply = begin(b, "x-flush", REQUEST, 0);
	assert_disposition(reply, "proceed");
	json_decref(reply);
	harness_kill(b);
	harness_must_start(b, NULL, t->env);
	assert_int_equal(lease_now(b, "x-1"), extended);
	reply = begin(b, "x-1", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	/* A SIGTERM flushes what the ring holds: the last one counts. */
	reply = harness_must_call(b, extend_request("x-1", fence, 500000));
	extended = extended_until(reply);
	json_decref(reply);
	assert_int_equal(harness_stop(b), 0);
	harness_must_start(b, NULL, t->env);
	assert_int_equal(lease_now(b, "x-1"), extended);
	free(fence);

	/*
	 * An extension answered while the journal's fdatasync is held: the
	 * round that writes it never comes, and a kill -9 loses it.  The
	 * earlier expiry, the durable one, counts: outcome_unknown sooner,
	 * never proceed.
	 */
	reply = begin(b, "x-2", REQUEST, 1500 * (int64_t)harness_slowdown());
	fence = fence_of(reply);
	first = time_ms(harness_str(reply, "lease_expires_at"));
	json_decref(reply);
	size = journal_bytes(b);
	harness_fault_rule(t->fault_file, "hold .idem/journal/");
	/* Another begin's round: written, then held in its fdatasync. */
	fd = harness_raw_connect(b);
	assert_true(fd >= 0);
	held = begin_request("x-hold", KIND, REQUEST, 0);
	line = json_dumps(held, JSON_COMPACT);
	json_decref(held);
	assert_int_equal(harness_raw_send(fd, line), 0);
	free(line);
	for (waited = 0; journal_bytes(b) == size; waited++) {
		if (waited > 10000)
			fail_msg("the held round wrote nothing in 10 s");
		sleep_ms(1);
	}
	/* Answered though nothing can be made durable now. */
	reply = harness_must_call(b, extend_request("x-2", fence, 600000));
	extended = extended_until(reply);
	json_decref(reply);
	assert_true(extended > first);
	assert_int_equal(lease_now(b, "x-2"), extended);
	reply = begin(b, "x-2", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	harness_kill(b);
	close(fd);
	harness_fault_rule(t->fault_file, "");
	harness_must_start(b, NULL, t->env);
	seen = lease_now(b, "x-2");
	assert_int_equal(seen, first);
	reply = begin_until_unknown(b, "x-2", REQUEST);
	assert_true(wall_ms() >= first);
	json_decref(reply);
	/* The holder, alive, may still complete with its fence. */
	reply = complete(b, "x-2", fence, "applied", RESULT);
	harness_assert_bool(reply, "ok", 1);
	json_decref(reply);
	free(fence);
	harness_shim_finish(*state);
}

/*
 * An extension that ends the lease earlier than it ended (a lease_ms
 * shorter than the time left) is durable before its answer.  The model
 * found it (tests/model/regressions.py,
 * shortened_lease_survives_no_crash): a 30 s lease cut to 100 ms was
 * answered, idemd was killed before the round that writes it, and the
 * restarted broker held the lease 30 s more, so that the outcome was
 * unknown later than the holder was told; SPEC.md: "the last durable
 * expiry counts, which can only make an outcome unknown sooner".  Here
 * the broker dies (IDEM_CRASH_AT=before_journal_kick) in the pass that
 * appends the extension's record, after it wrote the answers it had,
 * before it kicks the journaler (which lingers for no record): an
 * extension answered before it is durable is answered and lost, one
 * that waits is neither.
 */
static void
shortened_lease_is_durable_before_its_answer(void **state)
{
	struct harness_shim	*t = *state;
	struct broker		*b = &t->b;
	const char		*env[8];
	struct idem_conn	*c;
	json_t			*reply;
	char			*fence, *text;
	int64_t			 first, told;
	size_t			 n;

	harness_need_fault_injection(b);
	start(state);
	reply = begin(b, "x-cut", REQUEST, 600000);
	fence = fence_of(reply);
	first = time_ms(harness_str(reply, "lease_expires_at"));
	json_decref(reply);
	assert_int_equal(harness_stop(b), 0);
	for (n = 0; t->env[n] != NULL; n++)
		env[n] = t->env[n];
	env[n++] = "IDEM_CRASH_AT=before_journal_kick";
	env[n++] = "IDEM_CRASH_JOURNAL_LINGER_US=0";
	env[n] = NULL;
	harness_must_start(b, NULL, env);
	c = harness_connect(b);
	assert_non_null(c);
	reply = harness_call(c, extend_request("x-cut", fence,
	    SHORT_LEASE_MS));
	idem_close(c);
	harness_wait_dead(b);
	harness_must_start(b, NULL, t->env);
	if (reply != NULL) {
		told = extended_until(reply);
		text = json_dumps(reply, JSON_COMPACT);
		fail_msg("a shortening extension was answered before its "
		    "record was durable (%s): after the crash the lease ends "
		    "%lld ms after the answer said", text,
		    (long long)(lease_now(b, "x-cut") - told));
	}
	/* Never answered: the durable end, the begin's, holds. */
	assert_int_equal(lease_now(b, "x-cut"), first);
	reply = begin(b, "x-cut", REQUEST, 0);
	assert_disposition(reply, "in_progress");
	json_decref(reply);
	/* Without a crash the same extension is answered, and holds. */
	reply = harness_must_call(b, extend_request("x-cut", fence,
	    SHORT_LEASE_MS));
	told = extended_until(reply);
	json_decref(reply);
	assert_true(told < first);
	harness_kill(b);
	harness_must_start(b, NULL, t->env);
	assert_int_equal(lease_now(b, "x-cut"), told);
	reply = begin_until_unknown(b, "x-cut", REQUEST);
	assert_true(wall_ms() >= told);
	json_decref(reply);
	free(fence);
	harness_shim_finish(*state);
}

static int
setup(void **state)
{
	return harness_shim_setup(state, HARNESS_TEST_SECONDS);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name)	cmocka_unit_test_setup_teardown(name, setup, \
	harness_shim_teardown)
		T(extended_lease_outlives_itself_and_nobody_else_proceeds),
		T(holder_killed_mid_effect_lapses_to_outcome_unknown),
		T(extend_refusals_change_nothing),
		T(extend_while_the_journal_fails),
		T(restart_keeps_the_last_durable_expiry),
		T(shortened_lease_is_durable_before_its_answer),
		T(libidem_extend_and_run_keep_the_lease),
#undef T
	};

	return harness_exit_status(FILTER_RUN(tests));
}
