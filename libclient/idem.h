/* SPDX-License-Identifier: ISC */
/*
 * idem.h: the C client of idemd, and the write-task-v1 / write-report-v1
 * digest code that the broker itself uses.
 *
 * Threads:
 *  - A connection (struct idem_conn) is a blocking Unix-socket stream to
 *    one broker.  It is not thread-safe: use one connection per thread,
 *    or hold your own lock around every call that takes it (a reply read
 *    by the wrong thread would be taken for another request's answer).
 *  - The digest functions and idem_submission_id_new() keep no state of
 *    their own and may be called from any thread at any time.
 *  - idem_write_task_retry() opens, owns and closes its own connection,
 *    so any number of threads may run it at once.
 *  - idem_connect() with a NULL path reads $IDEM_SOCKET and $IDEM_ROOT:
 *    do not change the environment while another thread connects.
 *
 * Errors: functions return 0 on success and -1 on failure.  The digest
 * functions and idem_submission_id_new() set errno (EINVAL: a required
 * field is missing; EILSEQ: invalid UTF-8; ENOMEM).  The call functions
 * fill struct idem_error.
 */
#ifndef IDEM_H
#define IDEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IDEM_DIGEST_HEX_SIZE	65	/* 64 lower-case hex digits and a NUL */

/*
 * The semantic fields of a task.  NULL means "use the default" (body "",
 * priority "P2", risk_level "low", thread_key and parent null); sender,
 * recipient and subject are required.  Strings are UTF-8.
 */
struct idem_task {
	const char		 *sender;
	const char		 *recipient;
	const char		 *subject;
	const char		 *body;
	const char		 *priority;
	const char		 *risk_level;
	const char		 *thread_key;
	const char		 *parent;
	const char *const	 *references;
	size_t			  references_count;
	const char *const	 *depends_on;
	size_t			  depends_on_count;
};

/* A report's fields; recipient NULL means the task's sender (broker side). */
struct idem_report {
	const char	*sender;
	const char	*recipient;
	const char	*status;
	const char	*body;
};

/*
 * write-task-v1: the canonical JSON bytes (malloc'd, NUL-terminated; free
 * them) and the lower-case hex SHA-256 of them.
 */
int	idem_task_canonical(const struct idem_task *, char **canonical,
	    size_t *length);
int	idem_task_digest(const struct idem_task *,
	    char digest[IDEM_DIGEST_HEX_SIZE]);

/*
 * fcop-create-task-v1, FCoP 4.0's candidate create-task digest (its C7;
 * see doc/protocol.md, "Digest schemas"): the lookup key's workspace_id
 * and operation_id, and the task's sender, recipient, subject, body,
 * priority, parent, branch_of and references.  NULL means the default
 * (body "", priority "P2", parent and branch_of null, no references).
 * The digest normalizes as write-task-v1 does (CRLF and CR to LF, NFC),
 * and also ends the body in exactly one LF and de-duplicates and sorts
 * the references.  thread_key, risk_level and depends_on are not part
 * of it.
 */
struct idem_fcop_task {
	const char		 *workspace_id;	/* urn:uuid:..., lower case */
	const char		 *operation_id;	/* the client_submission_id */
	const char		 *sender;
	const char		 *recipient;
	const char		 *subject;
	const char		 *body;
	const char		 *priority;
	const char		 *parent;
	const char		 *branch_of;
	const char *const	 *references;
	size_t			  references_count;
};
int	idem_fcop_task_canonical(const struct idem_fcop_task *,
	    char **canonical, size_t *length);
int	idem_fcop_task_digest(const struct idem_fcop_task *,
	    char digest[IDEM_DIGEST_HEX_SIZE]);

/* write-report-v1; here recipient must be given. */
int	idem_report_canonical(const char *task_id, const struct idem_report *,
	    char **canonical, size_t *length);
int	idem_report_digest(const char *task_id, const struct idem_report *,
	    char digest[IDEM_DIGEST_HEX_SIZE]);

/*
 * generic-json-v1, the digest of effects: the canonical bytes of
 * {"kind":effect_kind,"request":<request_json parsed>} and their
 * lower-case hex SHA-256.  errno: EINVAL (request_json is not JSON, has
 * a duplicate member name or a NUL in a string), EEXIST (two member
 * names equal after normalization), EDOM (an integer past +-2^53),
 * EILSEQ, ELOOP (nested deeper than 32), ENOMEM.
 */
int	idem_effect_canonical(const char *effect_kind, const char *request_json,
	    char **canonical, size_t *length);
int	idem_effect_digest(const char *effect_kind, const char *request_json,
	    char digest[IDEM_DIGEST_HEX_SIZE]);

/* ---- Calls ------------------------------------------------------------ */

enum idem_error_code {
	IDEM_E_NONE = 0,
	/* Wire error codes (SPEC.md). */
	IDEM_E_INVALID_JSON,
	IDEM_E_INVALID_UTF8,
	IDEM_E_TOO_LARGE,
	IDEM_E_INVALID_REQUEST,
	IDEM_E_UNKNOWN_OP,
	IDEM_E_UNSUPPORTED_SCHEMA,
	IDEM_E_DIGEST_DISAGREES,
	IDEM_E_TASK_NOT_FOUND,
	IDEM_E_CONFLICT,
	IDEM_E_SEQUENCE_EXHAUSTED,	/* the day's task numbers are used up */
	IDEM_E_OUTCOME_UNKNOWN,		/* an effect's lease lapsed: settle it */
	IDEM_E_TABLE_FULL,
	IDEM_E_STORAGE_UNAVAILABLE,
	IDEM_E_IN_PROGRESS,
	IDEM_E_SHUTTING_DOWN,
	IDEM_E_INTERNAL,
	/*
	 * A connection refused past a limit (error.reason names it):
	 * retryable.  Last of the wire's codes, so that the values above
	 * stay those of earlier releases.
	 */
	IDEM_E_TOO_MANY_CONNECTIONS,
	/* Client side. */
	IDEM_E_TRANSPORT,	/* connect, send or receive failed: retry */
	IDEM_E_PROTOCOL,	/* the broker's answer did not parse */
	IDEM_E_ARGUMENT,	/* the caller's arguments are unusable */
	IDEM_E_NOMEM
};

struct idem_error {
	enum idem_error_code	code;
	int			retryable;
	char			message[256];
	char			field[64];	/* invalid_request: dotted path */
	char			reason[32];	/* conflict: digest_mismatch, ... */
};

enum idem_disposition {
	IDEM_DISPOSITION_NONE = 0,	/* the call failed before an outcome */
	IDEM_CREATED,
	IDEM_REUSED,
	IDEM_CONFLICT
};

struct idem_receipt {
	char	client_submission_id[201];	/* "" for a legacy task */
	char	task_id[96];
	char	task_path[160];
	char	digest_schema[32];
	char	request_digest[IDEM_DIGEST_HEX_SIZE];
	char	file_digest[IDEM_DIGEST_HEX_SIZE];
	char	state[16];
	char	created_at[32];
	/* The receipt object exactly as the broker sent it (NUL-terminated). */
	char	raw[2048];
};

struct idem_write_result {
	enum idem_disposition	disposition;
	int			action_taken;
	int			idempotent;
	int			recovered;
	struct idem_receipt	receipt;	/* created and reused */
	/* conflict: the existing binding */
	char			existing_request_digest[IDEM_DIGEST_HEX_SIZE];
	char			existing_task_id[96];
	/*
	 * Tries made, each a connect if needed and one request: 1 for
	 * idem_write_task, 1 or more for idem_write_task_retry.
	 */
	unsigned		attempts;
	/*
	 * Created or reused: where the task is now if FCoP tools moved it
	 * (the receipt keeps the path idem wrote); "" if it did not move.
	 */
	char			current_path[256];
};

struct idem_conn;

/* socket_path NULL: $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else ./fcop/.idem/idemd.sock. */
struct idem_conn	*idem_connect(const char *socket_path, struct idem_error *);
void			 idem_close(struct idem_conn *);
/*
 * Bound every later call on conn: its send, and the wait for its whole
 * answer (an answer that trickles in a byte at a time does not restart
 * it), by timeout_ms (0: wait for ever, idem_connect's default).  Past
 * it the call fails with IDEM_E_TRANSPORT and the connection is closed:
 * the late answer could otherwise be taken for the next call's.
 */
int	idem_set_timeout(struct idem_conn *, int64_t timeout_ms,
	    struct idem_error *);

/* Send one raw request line (no newline) and read one response line (malloc'd). */
int	idem_call_raw(struct idem_conn *, const char *request, char **response,
	    struct idem_error *);

struct idem_hello {
	char	server[32];
	char	version[32];
	int	protocol;
};
int	idem_hello(struct idem_conn *, struct idem_hello *, struct idem_error *);

/*
 * Create a task.  client_submission_id NULL makes a legacy call (a new
 * task every time, no idempotency).  Returns 0 when the broker answered
 * created, reused or conflict (see result->disposition; a conflict also
 * fills err with code IDEM_E_CONFLICT and its reason), -1 otherwise.
 */
int	idem_write_task(struct idem_conn *, const char *client_submission_id,
	    const struct idem_task *, struct idem_write_result *,
	    struct idem_error *);

/*
 * Write a report on task_id.  client_submission_id NULL writes a new
 * REPORT every time.  Returns 0 when the broker answered (disposition
 * IDEM_CREATED with deduplicated 0, IDEM_REUSED with deduplicated 1 and
 * the first call's report_id and report_path, or IDEM_CONFLICT: the id
 * is bound to other content for this task, err filled as for a task
 * conflict), -1 otherwise (task_not_found among others).
 */
struct idem_report_result {
	enum idem_disposition	disposition;
	int			deduplicated;
	int			recovered;
	char			report_id[96];
	char			report_path[160];
	/* conflict: the existing binding */
	char			existing_request_digest[IDEM_DIGEST_HEX_SIZE];
	char			existing_report_id[96];
};
int	idem_write_report(struct idem_conn *, const char *task_id,
	    const char *client_submission_id, const struct idem_report *,
	    struct idem_report_result *, struct idem_error *);

/* A submission's state; UNKNOWN is a name this library does not know. */
enum idem_state {
	IDEM_STATE_UNKNOWN = 0,
	IDEM_STATE_RESERVED,
	IDEM_STATE_TASK_CREATED,
	IDEM_STATE_COMMITTED
};

/* A JSON boolean that may also be null. */
enum idem_tribool {
	IDEM_TRIBOOL_NULL = -1,
	IDEM_TRIBOOL_FALSE = 0,
	IDEM_TRIBOOL_TRUE = 1
};

/* get_submission: read-only, changes nothing on the broker. */
struct idem_submission {
	char			client_submission_id[201];
	enum idem_state		state;
	char			state_name[16];		/* as sent */
	char			digest_schema[32];
	char			request_digest[IDEM_DIGEST_HEX_SIZE];
	char			task_id[96];
	char			task_path[160];
	char			reserved_at[32];
	char			updated_at[32];
	int			has_receipt;	/* once committed */
	struct idem_receipt	receipt;
	char			current_path[256];	/* "" if not moved */
};
/* *found is 0 (submission zeroed) or 1; both return 0. */
int	idem_get_submission(struct idem_conn *,
	    const char *client_submission_id, int *found,
	    struct idem_submission *, struct idem_error *);

/*
 * diagnose: the submissions in an intermediate state (reserved or
 * task_created) and the count of each state.  Read-only: it never
 * deletes, repairs or recreates anything.
 */
struct idem_diagnose_entry {
	char			client_submission_id[201];
	enum idem_state		state;
	char			state_name[16];		/* as sent */
	int64_t			age_ms;
	char			task_id[96];
	char			task_path[160];
	/* NULL if the broker could not look (an I/O error). */
	enum idem_tribool	task_exists;
	/* The file's request digest against the reservation's; NULL: no file. */
	enum idem_tribool	request_digest_matches;
	/* NULL before task_created. */
	enum idem_tribool	file_digest_matches;
	/* A live request holds it (not in SPEC.md; NULL if not sent). */
	enum idem_tribool	in_flight;
	int			stalled;	/* age over stale_after_ms */
};
struct idem_diagnosis {
	struct idem_diagnose_entry	*entries;	/* free: idem_diagnosis_free */
	size_t				 count;
	int64_t				 reserved;	/* counts by state */
	int64_t				 task_created;
	int64_t				 committed;
};
/* stale_after_ms -1: the broker's default (30000). */
int	idem_diagnose(struct idem_conn *, int64_t stale_after_ms,
	    struct idem_diagnosis *, struct idem_error *);
void	idem_diagnosis_free(struct idem_diagnosis *);

/*
 * stats: the broker's counters.  Those SPEC.md lists are required; a
 * counter this library does not know is ignored; the report counters
 * are this broker's extension and -1 when absent.
 */
struct idem_stats {
	int64_t	created;
	int64_t	reused;
	int64_t	conflict;
	int64_t	legacy_created;
	int64_t	errors;
	int64_t	journal_records;
	int64_t	journal_fsyncs;
	int64_t	table_used;
	int64_t	table_capacity;
	int64_t	workers;
	int64_t	worker_restarts;
	int64_t	uptime_ms;
	int64_t	reports_created;
	int64_t	reports_deduplicated;
};
int	idem_stats(struct idem_conn *, struct idem_stats *,
	    struct idem_error *);

/* ---- Effects: side effects the caller performs (SPEC.md, "Effects") ---- */

/*
 * What the broker answered about an effect.  begin answers PROCEED,
 * REUSED, CONFLICT, IN_PROGRESS or OUTCOME_UNKNOWN; complete and resolve
 * answer COMMITTED, RELEASED, OUTCOME_UNKNOWN (resolve: evidence
 * unknown, kept for diagnose) or CONFLICT; extend answers EXTENDED,
 * OUTCOME_UNKNOWN (the lease had lapsed) or CONFLICT.
 */
enum idem_effect_disposition {
	IDEM_EFFECT_NONE = 0,		/* the call failed before an answer */
	IDEM_EFFECT_PROCEED,		/* perform now, then complete */
	IDEM_EFFECT_REUSED,		/* already applied: receipt is the first */
	IDEM_EFFECT_CONFLICT,		/* err.reason says why; nothing to do */
	IDEM_EFFECT_IN_PROGRESS,	/* another caller holds a live lease */
	IDEM_EFFECT_OUTCOME_UNKNOWN,	/* a lease lapsed: settle by evidence */
	IDEM_EFFECT_COMMITTED,		/* complete or resolve: applied */
	IDEM_EFFECT_RELEASED,		/* not applied: the next begin
					   proceeds */
	IDEM_EFFECT_EXTENDED		/* extend: the lease ends later */
};

enum idem_effect_observed {
	IDEM_OBSERVED_APPLIED,
	IDEM_OBSERVED_NOT_APPLIED,
	IDEM_OBSERVED_UNKNOWN
};

#define IDEM_EFFECT_FENCE_SIZE		32
#define IDEM_EFFECT_EXTERNAL_KEY_SIZE	40

struct idem_effect {
	enum idem_effect_disposition	 disposition;
	int				 action_taken;
	int				 recovered;	/* committed by a resolve */
	unsigned			 attempt;
	char				 fence[IDEM_EFFECT_FENCE_SIZE];
	/* Pass it downstream as that system's own idempotency key. */
	char				 external_key[IDEM_EFFECT_EXTERNAL_KEY_SIZE];
	char				 state[32];	/* as sent, when sent */
	char				 request_digest[IDEM_DIGEST_HEX_SIZE];
	char				 lease_expires_at[32];
	char				 committed_at[32];
	/* Committed: malloc'd, free with idem_effect_clear. */
	char				*receipt;	/* the receipt as sent */
	/* The result: the broker's bytes as sent; NULL, pruned receipt. */
	char				*result;
};
void	idem_effect_clear(struct idem_effect *);
/*
 * The answer line of an effect_begin, effect_complete or effect_resolve
 * sent with idem_call_raw, decoded as those calls decode it (the same
 * code, the same checks); returns as they do.  A NULL response (or out)
 * is refused: -1, err code IDEM_E_ARGUMENT.
 */
int	idem_effect_parse(const char *response, struct idem_effect *,
	    struct idem_error *);

/*
 * effect_begin.  request_json is any JSON text (what the effect will do,
 * digested with generic-json-v1); lease_ms 0 means the broker's default
 * (30000).  Returns 0 when the broker answered one of begin's
 * dispositions (for CONFLICT, IN_PROGRESS and OUTCOME_UNKNOWN err is
 * filled too), -1 otherwise.  Free out with idem_effect_clear.
 */
int	idem_effect_begin(struct idem_conn *, const char *client_submission_id,
	    const char *effect_kind, const char *request_json, int64_t lease_ms,
	    struct idem_effect *out, struct idem_error *);
/*
 * effect_complete with the fence begin gave: applied (result_json, any
 * JSON text; NULL is null) commits, or not applied releases.  0 with
 * COMMITTED, RELEASED or CONFLICT (err.reason stale_fence,
 * no_reservation, already_committed), -1 otherwise.  A complete whose
 * answer was lost may be sent again with the same fence and result.
 */
int	idem_effect_complete(struct idem_conn *,
	    const char *client_submission_id, const char *effect_kind,
	    const char *fence, int applied, const char *result_json,
	    struct idem_effect *out, struct idem_error *);
/*
 * effect_extend with the fence begin gave: the live lease ends lease_ms
 * from now on the broker's clock (0: its default, 30000), for an effect
 * that runs longer than its lease; call it every third of the lease or
 * so while the effect runs.  0 with EXTENDED (out->lease_expires_at the
 * new end), OUTCOME_UNKNOWN (the lease had lapsed: not extended; the
 * complete with this fence is still accepted) or CONFLICT (err.reason
 * stale_fence: another attempt holds it, stop; no_reservation;
 * already_committed), -1 otherwise (no answer: retrying is safe).  The
 * broker answers before the new expiry is durable: after its crash the
 * previous expiry may count, so the effect may be outcome_unknown to
 * other callers sooner, never proceed.
 */
int	idem_effect_extend(struct idem_conn *,
	    const char *client_submission_id, const char *effect_kind,
	    const char *fence, int64_t lease_ms, struct idem_effect *out,
	    struct idem_error *);
/*
 * effect_resolve: settle an outcome_unknown with evidence (source: who
 * or what observed it; may be NULL).  0 with COMMITTED (recovered),
 * RELEASED, OUTCOME_UNKNOWN or CONFLICT (already_committed,
 * no_reservation), -1 otherwise (in_progress: the lease is still live).
 */
int	idem_effect_resolve(struct idem_conn *,
	    const char *client_submission_id, const char *effect_kind,
	    enum idem_effect_observed, const char *result_json,
	    const char *source, struct idem_effect *out, struct idem_error *);

/*
 * The caller's side effect, called on PROCEED with begun->attempt,
 * ->fence and ->external_key.  Return what happened: APPLIED with
 * *result_json (malloc'd JSON text, or NULL for null; the library frees
 * it), NOT_APPLIED (nothing happened: released, a later run performs
 * again), or UNKNOWN (it cannot tell, e.g. a timeout: nothing is
 * reported, and once the lease lapses the effect is outcome_unknown).
 */
typedef enum idem_effect_observed (*idem_effect_perform_fn)(
	    const struct idem_effect *begun, char **result_json, void *arg);
/*
 * Asked on OUTCOME_UNKNOWN: look at the downstream system (by
 * unknown->external_key) and say what happened, with the result if
 * applied and *source (malloc'd or NULL) naming the evidence.
 */
typedef enum idem_effect_observed (*idem_effect_probe_fn)(
	    const struct idem_effect *unknown, char **result_json,
	    char **source, void *arg);
/*
 * Begin; on PROCEED call perform and complete with what it says; while
 * perform runs, a thread of the library's own extends the lease every
 * third of lease_ms (effect_extend, on a connection of its own to the
 * same socket; it stops when perform returns or the broker refuses), so
 * perform may take longer than the lease; on
 * OUTCOME_UNKNOWN call probe (if not NULL) and resolve with its
 * evidence (and, if it says not applied, begin and perform once more).
 * Returns 0 when the effect is settled: out->disposition REUSED or
 * COMMITTED (out->receipt, out->result) or RELEASED (perform said not
 * applied).  Returns -1 otherwise, out->disposition saying where it
 * stopped: CONFLICT, IN_PROGRESS (retry later), OUTCOME_UNKNOWN (no
 * probe, or the probe could not tell; err code IDEM_E_OUTCOME_UNKNOWN),
 * PROCEED (perform said UNKNOWN, or the complete failed: err says which;
 * never perform again under this id before the outcome is settled).
 */
int	idem_effect_run(struct idem_conn *, const char *client_submission_id,
	    const char *effect_kind, const char *request_json, int64_t lease_ms,
	    idem_effect_perform_fn perform, idem_effect_probe_fn probe,
	    void *arg, struct idem_effect *out, struct idem_error *);

/* ---- Submission ids and retrying --------------------------------------- */

/*
 * A fresh client_submission_id: 16 bytes from libsodium's CSPRNG in
 * base64url without padding (22 characters of A-Z a-z 0-9 - _), so it
 * is valid on the wire as is.  Make one per business intent and keep it
 * with the intent: a retry must send the same id, never a new one.
 * Returns -1 (errno EAGAIN) only if libsodium cannot be initialised.
 */
#define IDEM_SUBMISSION_ID_SIZE	23	/* 22 characters and a NUL */
int	idem_submission_id_new(char out[IDEM_SUBMISSION_ID_SIZE]);

/*
 * idem_write_task_retry: connect to socket_path (as idem_connect), write
 * the task, and retry until there is an outcome:
 *  - a transport failure (connect, send or receive; the broker died or
 *    restarted) is retried on a new connection;
 *  - in_progress, storage_unavailable, shutting_down,
 *    too_many_connections, and internal and table_full errors marked
 *    retryable are retried;
 *  - every other error is returned at once (invalid_request, conflict,
 *    a result larger than the result arena, ...): sending it again
 *    cannot change the
 *    answer.
 * Every try sends the same client_submission_id (required: a legacy
 * call cannot be retried safely) and the same task, so however many
 * tries reach the broker, at most one task is created.  Between tries
 * it sleeps a random time in [0, min(max_delay_ms, base_delay_ms *
 * 2^(try-1))] ("full jitter", so that clients a broker restart failed
 * together do not come back together), never past the deadline; the
 * deadline also bounds the wait for each reply.
 *
 * Returns 0 with result->disposition created, reused (result->recovered
 * set when the broker finished a creation that an earlier try or
 * process began) or conflict (err filled as by idem_write_task).
 * Returns -1 with the last error otherwise; if that error is retryable
 * (attempts or time ran out) the outcome is unknown, and calling again
 * later with the same id is safe.  result->attempts counts the tries
 * in both cases.
 */
struct idem_retry_policy {
	unsigned	max_attempts;	/* 0: IDEM_RETRY_MAX_ATTEMPTS */
	unsigned	base_delay_ms;	/* 0: IDEM_RETRY_BASE_DELAY_MS */
	unsigned	max_delay_ms;	/* 0: IDEM_RETRY_MAX_DELAY_MS */
	unsigned	deadline_ms;	/* overall; 0: IDEM_RETRY_DEADLINE_MS */
};
#define IDEM_RETRY_MAX_ATTEMPTS		10
#define IDEM_RETRY_BASE_DELAY_MS	100
#define IDEM_RETRY_MAX_DELAY_MS		5000
#define IDEM_RETRY_DEADLINE_MS		60000

int	idem_write_task_retry(const char *socket_path,
	    const char *client_submission_id, const struct idem_task *,
	    const struct idem_retry_policy *, struct idem_write_result *,
	    struct idem_error *);

#ifdef __cplusplus
}
#endif
#endif
