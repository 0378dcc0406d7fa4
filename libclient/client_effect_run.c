/* SPDX-License-Identifier: ISC */
/*
 * client_effect_run.c: idem_effect_run, one effect from begin to its
 * report over client_effect.c's calls, and the keeper that holds its
 * lease while perform runs: a thread of its own on a connection of its
 * own (a connection is not thread-safe, and perform may use the
 * caller's), which extends every third of the lease, so a perform
 * longer than its lease is not answered outcome_unknown to the next
 * caller while it still runs.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"
#include "monoclock.h"

/* ---- idem_effect_run's keeper: the lease, extended while perform runs --- */

struct client_keeper {
	pthread_t	 thread;
	pthread_mutex_t	 lock;
	pthread_cond_t	 wake;
	int		 stop;
	char		 socket_path[sizeof ((struct idem_conn *)0)->path];
	const char	*id;
	const char	*kind;
	const char	*fence;
	int64_t		 lease_ms;
};

/*
 * Every third of the lease: effect_extend.  A refusal (the lease lapsed,
 * another attempt's fence) ends it: there is nothing left to keep, and
 * the complete says what the broker decided.
 *
 * On a loaded host one late turn must not lose the lease, so the keeper
 * keeps its schedule rather than sliding it: each extension is due a
 * third after the previous one was sent (the broker extends from when
 * it takes the request), not a third after its answer came, so a slow
 * answer (a journal flush behind a busy disk) does not push the next
 * one back, and one that came later than a third is followed at once.
 * Its connection is made before the first third (not on it), and an
 * answer may take up to a lease: one slower than a third is still an
 * extension, not a failure.  A failure to reach the broker (a restart)
 * is tried again on a new connection after a tenth of the lease, not a
 * whole third: the lease may be short of time by then.
 */
static void *
client_keeper_main(void *arg)
{
	struct client_keeper	*k = arg;
	struct idem_conn	*conn;
	struct idem_effect	 out;
	struct idem_error	 err;
	struct timespec		 at;
	int64_t			 third = k->lease_ms / 3;
	int			 rc, done = 0;

	monoclock_after(&at, third);
	conn = client_connect(k->socket_path, k->lease_ms, &err);
	pthread_mutex_lock(&k->lock);
	while (!k->stop && !done) {
		while (!k->stop && pthread_cond_timedwait(&k->wake, &k->lock,
		    &at) != ETIMEDOUT)
			;
		if (k->stop)
			break;
		pthread_mutex_unlock(&k->lock);
		/* Due a third after this one is sent, whenever it answers. */
		monoclock_after(&at, third);
		if (conn == NULL)
			conn = client_connect(k->socket_path, k->lease_ms,
			    &err);
		if (conn != NULL) {
			rc = idem_effect_extend(conn, k->id, k->kind, k->fence,
			    k->lease_ms, &out, &err);
			if (rc == 0 && out.disposition != IDEM_EFFECT_EXTENDED)
				done = 1;
			else if (rc != 0) {
				idem_close(conn);
				conn = NULL;
			}
			idem_effect_clear(&out);
		}
		if (conn == NULL)
			monoclock_after(&at, k->lease_ms / 10);
		pthread_mutex_lock(&k->lock);
	}
	pthread_mutex_unlock(&k->lock);
	idem_close(conn);
	return NULL;
}

/* 0 and the keeper running, or -1 (perform runs without one). */
static int
client_keeper_start(struct client_keeper *k, const struct idem_conn *conn,
    const char *id, const char *kind, const char *fence, int64_t lease_ms)
{
	pthread_condattr_t	attr;
	sigset_t		all, old;
	int			error;

	memset(k, 0, sizeof *k);
	memcpy(k->socket_path, conn->path, sizeof k->socket_path);
	k->id = id;
	k->kind = kind;
	k->fence = fence;
	k->lease_ms = lease_ms > 0 ? lease_ms : IDEM_DEFAULT_LEASE_MS;
	if (pthread_condattr_init(&attr) != 0)
		return -1;
	if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&k->wake, &attr) != 0) {
		pthread_condattr_destroy(&attr);
		return -1;
	}
	pthread_condattr_destroy(&attr);
	if (pthread_mutex_init(&k->lock, NULL) != 0) {
		pthread_cond_destroy(&k->wake);
		return -1;
	}
	/*
	 * The caller's signals are the caller's threads' to take: the
	 * keeper blocks them all (it inherits this mask).
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	error = pthread_create(&k->thread, NULL, client_keeper_main, k);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (error != 0) {
		pthread_mutex_destroy(&k->lock);
		pthread_cond_destroy(&k->wake);
		return -1;
	}
	return 0;
}

static void
client_keeper_stop(struct client_keeper *k)
{
	pthread_mutex_lock(&k->lock);
	k->stop = 1;
	pthread_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->lock);
	pthread_join(k->thread, NULL);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->wake);
}

int
idem_effect_run(struct idem_conn *conn, const char *client_submission_id,
    const char *effect_kind, const char *request_json, int64_t lease_ms,
    idem_effect_perform_fn perform, idem_effect_probe_fn probe, void *arg,
    struct idem_effect *out, struct idem_error *err)
{
	struct idem_error		 scratch;
	struct idem_effect		 begun;
	struct client_keeper		 keeper;
	enum idem_effect_observed	 seen;
	char				*result, *source, fence[sizeof begun.fence];
	int				 rounds, rc, kept;

	if (err == NULL)
		err = &scratch;
	memset(out, 0, sizeof *out);
	if (perform == NULL) {
		memset(err, 0, sizeof *err);
		client_error(err, IDEM_E_ARGUMENT, "perform is required");
		return -1;
	}
	/* A second round only after evidence said "not applied". */
	for (rounds = 0; rounds < 2; rounds++) {
		idem_effect_clear(out);
		if (idem_effect_begin(conn, client_submission_id, effect_kind,
		    request_json, lease_ms, out, err) != 0)
			return -1;
		switch (out->disposition) {
		case IDEM_EFFECT_REUSED:
			return 0;
		case IDEM_EFFECT_PROCEED:
			result = NULL;
			snprintf(fence, sizeof fence, "%s", out->fence);
			/* Without a keeper, perform has its lease as it is. */
			kept = client_keeper_start(&keeper, conn,
			    client_submission_id, effect_kind, fence,
			    lease_ms) == 0;
			seen = perform(out, &result, arg);
			if (kept)
				client_keeper_stop(&keeper);
			if (seen == IDEM_OBSERVED_UNKNOWN) {
				free(result);
				client_error(err, IDEM_E_OUTCOME_UNKNOWN,
				    "perform could not tell whether the effect "
				    "happened; it is settled by evidence "
				    "(effect_resolve) once its lease lapses");
				return -1;
			}
			begun = *out;
			begun.receipt = begun.result = NULL;
			idem_effect_clear(out);
			rc = idem_effect_complete(conn, client_submission_id,
			    effect_kind, fence, seen == IDEM_OBSERVED_APPLIED,
			    result, out, err);
			free(result);
			if (rc != 0) {
				/* Where it stopped: performed, not reported. */
				idem_effect_clear(out);
				*out = begun;
				return -1;
			}
			return out->disposition == IDEM_EFFECT_COMMITTED ||
			    out->disposition == IDEM_EFFECT_RELEASED ? 0 : -1;
		case IDEM_EFFECT_OUTCOME_UNKNOWN:
			if (probe == NULL)
				return -1;
			result = source = NULL;
			seen = probe(out, &result, &source, arg);
			if (seen == IDEM_OBSERVED_UNKNOWN) {
				free(result);
				free(source);
				return -1;	/* err: outcome_unknown */
			}
			idem_effect_clear(out);
			rc = idem_effect_resolve(conn, client_submission_id,
			    effect_kind, seen, result, source, out, err);
			free(result);
			free(source);
			if (rc != 0)
				return -1;
			if (out->disposition == IDEM_EFFECT_COMMITTED)
				return 0;
			if (out->disposition != IDEM_EFFECT_RELEASED)
				return -1;
			continue;	/* not applied: perform it now */
		default:		/* conflict, in_progress */
			return -1;
		}
	}
	return -1;
}
