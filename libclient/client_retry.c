/* SPDX-License-Identifier: ISC */
/*
 * client_retry.c: fresh submission ids, and idem_write_task_retry: one
 * write_task retried on its own connection, with full-jitter backoff,
 * within a deadline, only on what can change by itself.  No global
 * state, so many threads may call it at once.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "idem.h"
#include "protocol.h"
#include "client_int.h"

#define CLIENT_SUBMISSION_ID_RANDOM_BYTES	16

_Static_assert(sodium_base64_ENCODED_LEN(CLIENT_SUBMISSION_ID_RANDOM_BYTES,
    sodium_base64_VARIANT_URLSAFE_NO_PADDING) == IDEM_SUBMISSION_ID_SIZE,
    "IDEM_SUBMISSION_ID_SIZE does not fit the random bytes");
_Static_assert(IDEM_SUBMISSION_ID_SIZE - 1 <= IDEM_MAX_SUBMISSION_ID_BYTES,
    "generated submission ids are too long for the wire");

/* ---- Submission ids and the retry helper -------------------------------- */

int
idem_submission_id_new(char out[IDEM_SUBMISSION_ID_SIZE])
{
	unsigned char	bytes[CLIENT_SUBMISSION_ID_RANDOM_BYTES];

	/* Thread-safe, and a no-op after the first success. */
	if (sodium_init() < 0) {
		errno = EAGAIN;
		return -1;
	}
	randombytes_buf(bytes, sizeof bytes);
	sodium_bin2base64(out, IDEM_SUBMISSION_ID_SIZE, bytes, sizeof bytes,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	return 0;
}

/*
 * Only what can change on its own is worth another try: the broker
 * coming back, a submission in flight finishing, storage recovering.
 * The three codes are retryable by SPEC.md whatever the flag says;
 * internal is retryable only when the broker says so, and so is
 * table_full (in-flight work past --capacity: it drains, and a
 * checkpoint makes committed entries evictable, and the result
 * arena's space reusable; a result larger than the arena is not
 * retryable).
 */
static int
client_retry_worth(const struct idem_error *err)
{
	switch (err->code) {
	case IDEM_E_TRANSPORT:
	case IDEM_E_IN_PROGRESS:
	case IDEM_E_STORAGE_UNAVAILABLE:
	case IDEM_E_SHUTTING_DOWN:
	case IDEM_E_TOO_MANY_CONNECTIONS:
		return 1;
	case IDEM_E_INTERNAL:
	case IDEM_E_TABLE_FULL:
		return err->retryable;
	default:
		return 0;
	}
}

/* Full jitter: uniform in [0, min(max, base * 2^(attempt - 1))]. */
static int64_t
client_backoff_ms(const struct idem_retry_policy *p, unsigned attempt)
{
	uint64_t	cap = p->base_delay_ms;
	unsigned	i;

	for (i = 1; i < attempt && cap < p->max_delay_ms; i++)
		cap *= 2;
	if (cap > p->max_delay_ms)
		cap = p->max_delay_ms;
	if (cap >= UINT32_MAX)
		cap = UINT32_MAX - 1;
	return randombytes_uniform((uint32_t)cap + 1);
}

static void
client_sleep_ms(int64_t ms)
{
	struct timespec	ts, rest;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	while (nanosleep(&ts, &rest) == -1 && errno == EINTR)
		ts = rest;
}

int
idem_write_task_retry(const char *socket_path,
    const char *client_submission_id, const struct idem_task *task,
    const struct idem_retry_policy *policy, struct idem_write_result *result,
    struct idem_error *err)
{
	struct idem_retry_policy	 p;
	struct idem_error		 scratch;
	struct idem_conn		*conn = NULL;
	int64_t				 deadline, left, delay;
	unsigned			 attempts = 0;
	int				 rc = -1;

	if (err == NULL)
		err = &scratch;
	memset(err, 0, sizeof *err);
	memset(result, 0, sizeof *result);
	if (client_submission_id == NULL) {
		client_error(err, IDEM_E_ARGUMENT, "a retried write needs a "
		    "client_submission_id: a legacy call is not idempotent");
		snprintf(err->field, sizeof err->field, "client_submission_id");
		return -1;
	}
	memset(&p, 0, sizeof p);
	if (policy != NULL)
		p = *policy;
	if (p.max_attempts == 0)
		p.max_attempts = IDEM_RETRY_MAX_ATTEMPTS;
	if (p.base_delay_ms == 0)
		p.base_delay_ms = IDEM_RETRY_BASE_DELAY_MS;
	if (p.max_delay_ms == 0)
		p.max_delay_ms = IDEM_RETRY_MAX_DELAY_MS;
	if (p.deadline_ms == 0)
		p.deadline_ms = IDEM_RETRY_DEADLINE_MS;
	if (sodium_init() < 0) {
		client_error(err, IDEM_E_NOMEM, "libsodium did not initialise");
		return -1;
	}
	deadline = client_now_ms() + p.deadline_ms;

	for (;;) {
		attempts++;
		left = deadline - client_now_ms();
		if (left < 1)
			left = 1;
		if (conn == NULL)
			conn = client_connect(socket_path, left, err);
		else if (client_timeout(conn->fd, left, err) != 0) {
			idem_close(conn);
			conn = NULL;
		} else
			conn->timeout_ms = left;
		if (conn != NULL && (rc = client_write_task(conn,
		    client_submission_id, task, result, err)) == 0)
			break;
		if (!client_retry_worth(err))
			break;
		/*
		 * A lost stream is closed already; a broker that is shutting
		 * down will not serve this stream again, its successor will
		 * listen on a new one; a refused connection was closed by
		 * the broker after its one line.
		 */
		if (conn != NULL && (conn->fd == -1 ||
		    err->code == IDEM_E_SHUTTING_DOWN ||
		    err->code == IDEM_E_TOO_MANY_CONNECTIONS)) {
			idem_close(conn);
			conn = NULL;
		}
		if (attempts >= p.max_attempts)
			break;
		delay = client_backoff_ms(&p, attempts);
		/* A try needs time to run: none is left after this sleep. */
		if (delay >= deadline - client_now_ms())
			break;
		client_sleep_ms(delay);
	}
	idem_close(conn);
	result->attempts = attempts;
	return rc;
}
