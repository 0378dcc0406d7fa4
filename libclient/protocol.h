/*
 * protocol.h: the wire format shared by idemd and its clients, and every
 * limit and default of the contract (../shared/SPEC.md), each a named
 * constant with its unit in the name.  Nothing here allocates or does I/O.
 */
#ifndef IDEM_PROTOCOL_H
#define IDEM_PROTOCOL_H

#define IDEM_PROTOCOL_VERSION		1
#define IDEM_SCHEMA_WRITE_TASK_V1	"write-task-v1"
#define IDEM_SCHEMA_WRITE_REPORT_V1	"write-report-v1"

/* One request or response line, newline included. */
#define IDEM_MAX_LINE_BYTES		(1024 * 1024)

#define IDEM_MAX_SUBMISSION_ID_BYTES	200
#define IDEM_MAX_ROLE_BYTES		16
#define IDEM_MAX_SUBJECT_BYTES		1024
#define IDEM_MAX_BODY_BYTES		524288
#define IDEM_MAX_REF_BYTES		256	/* thread_key, parent, list items */
#define IDEM_MAX_LIST_ITEMS		256	/* references, depends_on */
#define IDEM_MAX_JSON_DEPTH		32

/* "TASK-YYYYMMDD-" + up to 10 digits + "-" + role + "-to-" + role. */
#define IDEM_MAX_TASK_ID_BYTES		80
#define IDEM_MAX_TASK_PATH_BYTES	128
#define IDEM_SHA256_BYTES		32
#define IDEM_SHA256_HEX_BYTES		64

#define IDEM_DEFAULT_ROOT		"./fcop"
#define IDEM_DEFAULT_WORKERS		2
#define IDEM_MAX_WORKERS		64
#define IDEM_DEFAULT_CAPACITY		262144
#define IDEM_DEFAULT_INFLIGHT_WAIT_MS	10000
#define IDEM_DEFAULT_MAX_CONNECTIONS	1024	/* across all workers */
#define IDEM_DEFAULT_IDLE_TIMEOUT_MS	300000	/* a silent connection is closed */
/* After a journal failure, how often the journal is reopened and verified. */
#define IDEM_JOURNAL_REOPEN_RETRY_MS	100
#define IDEM_DEFAULT_SOCKET_MODE	0600
/* Replies queued for a connection that does not read them: stop reading it. */
#define IDEM_MAX_OUTPUT_BYTES		(4 * 1024 * 1024)

/*
 * idem-mcp (contrib/mcp/): one JSON-RPC message on its stdin, newline
 * included (a task of IDEM_MAX_BODY_BYTES, JSON-escaped, fits), and the
 * tools per tools/list page (--tools-page-size overrides it).
 */
#define IDEM_MCP_MAX_LINE_BYTES		(2 * 1024 * 1024)
#define IDEM_MCP_TOOLS_PAGE_SIZE	64

/* Paths relative to the root. */
#define IDEM_STATE_DIR			".idem"
#define IDEM_SOCKET_NAME		".idem/idemd.sock"
#define IDEM_LOCK_NAME			".idem/idemd.lock"
#define IDEM_JOURNAL_DIR		".idem/journal"
#define IDEM_INBOX_DIR			"_lifecycle/inbox"
#define IDEM_REPORTS_DIR		"reports"

/* Error codes of the wire protocol, in SPEC.md's order. */
#define IDEM_ERROR_CODES(X)						\
	X(INVALID_JSON,		"invalid_json")				\
	X(INVALID_UTF8,		"invalid_utf8")				\
	X(TOO_LARGE,		"too_large")				\
	X(INVALID_REQUEST,	"invalid_request")			\
	X(UNKNOWN_OP,		"unknown_op")				\
	X(UNSUPPORTED_SCHEMA,	"unsupported_schema")			\
	X(DIGEST_DISAGREES,	"digest_disagrees")			\
	X(TASK_NOT_FOUND,	"task_not_found")			\
	X(CONFLICT,		"conflict")				\
	X(SEQUENCE_EXHAUSTED,	"sequence_exhausted")			\
	X(OUTCOME_UNKNOWN,	"outcome_unknown")			\
	X(TABLE_FULL,		"table_full")				\
	X(STORAGE_UNAVAILABLE,	"storage_unavailable")			\
	X(IN_PROGRESS,		"in_progress")				\
	X(SHUTTING_DOWN,	"shutting_down")			\
	X(INTERNAL,		"internal")

#endif
