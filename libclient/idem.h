/*
 * idem.h: the C client of idemd, and the write-task-v1 / write-report-v1
 * digest code that the broker itself uses.
 *
 * A connection (struct idem_conn) is a blocking Unix-socket stream to one
 * broker.  It is not thread-safe: use one connection per thread, or guard
 * it yourself.  The digest functions are pure and thread-safe.
 *
 * Errors: functions return 0 on success and -1 on failure.  The digest
 * functions set errno (EINVAL: a required field is missing; EILSEQ:
 * invalid UTF-8; ENOMEM).  The call functions fill struct idem_error.
 */
#ifndef IDEM_H
#define IDEM_H

#include <stddef.h>

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

/* write-report-v1; here recipient must be given. */
int	idem_report_canonical(const char *task_id, const struct idem_report *,
	    char **canonical, size_t *length);
int	idem_report_digest(const char *task_id, const struct idem_report *,
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
	IDEM_E_TABLE_FULL,
	IDEM_E_STORAGE_UNAVAILABLE,
	IDEM_E_IN_PROGRESS,
	IDEM_E_SHUTTING_DOWN,
	IDEM_E_INTERNAL,
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
};

struct idem_conn;

/* socket_path NULL: $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else ./fcop/.idem/idemd.sock. */
struct idem_conn	*idem_connect(const char *socket_path, struct idem_error *);
void			 idem_close(struct idem_conn *);

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

#ifdef __cplusplus
}
#endif
#endif
