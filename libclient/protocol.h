/* SPDX-License-Identifier: ISC */
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
#define IDEM_SCHEMA_GENERIC_JSON_V1	"generic-json-v1"	/* effects */
/* FCoP 4.0's candidate create-task digest (doc/protocol.md). */
#define IDEM_SCHEMA_FCOP_CREATE_TASK_V1	"fcop-create-task-v1"
#define IDEM_FCOP_OPERATION_KIND	"create_task"
/* operation_id: [A-Za-z0-9][A-Za-z0-9._:-]*, 1..128 characters. */
#define IDEM_MAX_OPERATION_ID_BYTES	128
/* "urn:uuid:" and a lower-case UUID. */
#define IDEM_WORKSPACE_ID_BYTES		45
/* The FCoP 4 workspace declaration that holds workspace_id. */
#define IDEM_FCOP_DECLARATION_NAME	"fcop.json"

/* One request or response line, newline included. */
#define IDEM_MAX_LINE_BYTES		(1024 * 1024)

#define IDEM_MAX_SUBMISSION_ID_BYTES	200
#define IDEM_MAX_ROLE_BYTES		16
/* A task recipient may carry an FCoP slot: ROLE "." ROLE (DEV.D1). */
#define IDEM_MAX_RECIPIENT_BYTES	(2 * IDEM_MAX_ROLE_BYTES + 1)
#define IDEM_MAX_SUBJECT_BYTES		1024
#define IDEM_MAX_BODY_BYTES		524288
#define IDEM_MAX_REF_BYTES		256	/* thread_key, parent, list items */
#define IDEM_MAX_LIST_ITEMS		256	/* references, depends_on */
#define IDEM_MAX_JSON_DEPTH		32

/* Effects (SPEC.md, "Effects"). */
#define IDEM_MAX_EFFECT_KIND_BYTES	128
#define IDEM_EFFECT_KIND_RESERVED	"write_task"	/* idem performs it */
/* The canonical (generic-json-v1) form of {"kind":..,"request":..}. */
#define IDEM_MAX_EFFECT_REQUEST_BYTES	(512 * 1024)
/* A result as stored: its compact JSON serialization. */
#define IDEM_MAX_EFFECT_RESULT_BYTES	(64 * 1024)
#define IDEM_MAX_EVIDENCE_SOURCE_BYTES	256
#define IDEM_MIN_LEASE_MS		100
#define IDEM_MAX_LEASE_MS		86400000	/* a day */
#define IDEM_DEFAULT_LEASE_MS		30000
/*
 * Integers past +-2^53 have no exact IEEE double, so JCS would print
 * another number than the one sent: generic-json-v1 refuses them.
 */
#define IDEM_MAX_SAFE_INTEGER		9007199254740992LL
/* "<attempt>-<16 hex>" */
#define IDEM_EFFECT_FENCE_SIZE		32
/* "idem-" and 32 hex digits */
#define IDEM_EFFECT_EXTERNAL_KEY_SIZE	40
/*
 * The shared-memory arena that keeps committed results, a cache of the
 * index (--result-bytes; 0, the default: bytes per --capacity slot,
 * within a floor and a ceiling).
 */
#define IDEM_RESULT_ARENA_BYTES_PER_SLOT	8
#define IDEM_MIN_RESULT_ARENA_BYTES		(4ULL * 1024 * 1024)
#define IDEM_MAX_DEFAULT_RESULT_ARENA_BYTES	(64ULL * 1024 * 1024)
/*
 * The index's map: address space, not memory or disk (the file grows
 * as it is written); the most committed history one root can hold.
 */
#ifndef IDEM_INDEX_MAP_BYTES
/*
 * A counting build under valgrind, which cannot reserve 256 GiB, sets
 * less (doc/effects.md, "Counted, not timed").
 */
#define IDEM_INDEX_MAP_BYTES		(256ULL * 1024 * 1024 * 1024)
#endif
/*
 * A worker maps the index's pages ahead of its lookups (broker/history.c):
 * this much per step, at this nice value, and at most the physical
 * memory over this divisor (a larger index keeps faulting the rest).
 */
#define IDEM_INDEX_WARM_CHUNK_BYTES	(16ULL * 1024 * 1024)
#define IDEM_INDEX_WARM_NICE		10
#define IDEM_INDEX_WARM_RAM_DIVISOR	2
/* BLAKE2b-256 of a request's fingerprinted members (crypto_generichash). */
#define IDEM_FAST_FINGERPRINT_BYTES		32

/* "TASK-YYYYMMDD-" + up to 10 digits + "-" + role + "-to-" + recipient. */
#define IDEM_MAX_TASK_ID_BYTES		80
#define IDEM_MAX_TASK_PATH_BYTES	128
#define IDEM_SHA256_BYTES		32
#define IDEM_SHA256_HEX_BYTES		64

#define IDEM_DEFAULT_ROOT		"./fcop"
#define IDEM_DEFAULT_WORKERS		2
#define IDEM_MAX_WORKERS		64
#define IDEM_DEFAULT_CAPACITY		262144
/* --capacity at most (the key heap of the segment stays under 4 GiB). */
#define IDEM_MAX_CAPACITY		(1U << 26)
#define IDEM_DEFAULT_INFLIGHT_WAIT_MS	10000
/*
 * Digits of a task or report number: FCoP's names have exactly three
 * (999 a day); --sequence-digits lets them grow, for workspaces no FCoP 3
 * tool reads.
 */
#define IDEM_DEFAULT_SEQUENCE_DIGITS	3
#define IDEM_MIN_SEQUENCE_DIGITS	3
#define IDEM_MAX_SEQUENCE_DIGITS	6
#define IDEM_DEFAULT_MAX_CONNECTIONS	1024	/* across all workers */
/* One peer process's share of them; a uid's is a quarter of the total. */
#define IDEM_DEFAULT_MAX_CONNECTIONS_PER_PID	64
#define IDEM_DEFAULT_MAX_CONNECTIONS_PER_UID_DIVISOR	4
#define IDEM_DEFAULT_IDLE_TIMEOUT_MS	300000	/* a silent connection is closed */
/* After a journal failure, how often the journal is reopened and verified. */
#define IDEM_JOURNAL_REOPEN_RETRY_MS	100
/*
 * The longest a journal round waits, before its writev, for the creations
 * that were between their link and their commit's append when it began
 * (journaler.c, the gather): their commits then share its fdatasync.
 */
#define IDEM_JOURNAL_GATHER_US		2000
/*
 * The longest a worker's loop with requests parked for durability, and
 * nothing else to do, watches the durable position before it sleeps
 * (pending.c, pending_watch): about a round's pwritev and fdatasync.
 */
#define IDEM_WORKER_WATCH_US		250
/*
 * ... and, its requests answered, how long it watches for the next one
 * (a lone client's comes within this), before it sleeps.
 */
#define IDEM_WORKER_LINGER_US		150
/*
 * After a round that wrote records, how long the journaling thread looks
 * for the next record before it sleeps on its eventfd (journaler.c).
 */
#define IDEM_JOURNAL_LINGER_US		150
/*
 * The watch and the linger above are for a lone client: with more than
 * this many connections open across the broker (the segment's
 * connections) neither runs.  With more clients their requests overlap
 * and keep the vCPUs awake, and the journal's batching does the rest;
 * the spins would only take CPU from them (doc/effects.md, "Where a
 * lone client's write goes").
 */
#define IDEM_SPIN_MAX_CONNECTIONS	1
/*
 * How long a directory sync round waits, at most, for the links of the
 * creations whose reservations are durable and that are about to link
 * (fileio.c, fileio_gather): they then share its fsync.
 */
#define IDEM_LINK_GATHER_US		1000
/* How often the master drains an idle broker's inotify queue (watch.c). */
#define IDEM_WATCH_DRAIN_MS		1000
#define IDEM_DEFAULT_SOCKET_MODE	0600
/* How long a starting idemd waits for whatever holds its socket path. */
#define IDEM_SOCKET_PROBE_TIMEOUT_MS	2000
/* Replies queued for a connection that does not read them: stop reading it. */
#define IDEM_MAX_OUTPUT_BYTES		(4 * 1024 * 1024)
/*
 * Several brokers on one workspace (idemd --store postgresql://...,
 * doc/cluster.md).  --host-id: 1..64 bytes of [A-Za-z0-9._-].
 */
#define IDEM_STORE_MAX_HOST_ID_BYTES	64
/* --lease-ms: default and bounds. */
#define IDEM_STORE_DEFAULT_LEASE_MS	30000
#define IDEM_STORE_MIN_LEASE_MS		100
#define IDEM_STORE_MAX_LEASE_MS		86400000
/*
 * --store-connections: a worker's creation threads, each with its own
 * connection, so its creations in flight (a worker has one connection
 * more, its loop's).  A server's max_connections (100 by default) must
 * hold brokers x --workers x (this + 1).
 */
#define IDEM_STORE_DEFAULT_CONNECTIONS	4
#define IDEM_STORE_MAX_CONNECTIONS	32

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
/* The index of committed receipts (LMDB; doc/journal.md, "The index"). */
#define IDEM_INDEX_DIR			".idem/index"
#define IDEM_INBOX_DIR			"_lifecycle/inbox"
#define IDEM_REPORTS_DIR		"reports"

/*
 * The ops of the wire protocol, in SPEC.md's order (hello's "ops" lists
 * them so): X(symbol, name).  The broker's table (IDEM_OPS, idemd.h) has
 * a row for each; libidem, idemctl and idem-mcp name an op by
 * idem_op_names[IDEM_OPC_symbol], never by a literal of their own.
 */
#define IDEM_OP_NAMES(X)						\
	X(HELLO,		"hello")				\
	X(WRITE_TASK,		"write_task")				\
	X(WRITE_REPORT,		"write_report")				\
	X(GET_SUBMISSION,	"get_submission")			\
	X(DIAGNOSE,		"diagnose")				\
	X(STATS,		"stats")				\
	X(EFFECT_BEGIN,		"effect_begin")				\
	X(EFFECT_COMPLETE,	"effect_complete")			\
	X(EFFECT_EXTEND,	"effect_extend")			\
	X(EFFECT_RESOLVE,	"effect_resolve")

enum idem_op_code {
#define IDEM_OPC_ENUM(sym, name)	IDEM_OPC_##sym,
	IDEM_OP_NAMES(IDEM_OPC_ENUM)
#undef IDEM_OPC_ENUM
	IDEM_OPC_COUNT
};

/*
 * A header static: each program that includes this has its own copy
 * (libidem exports none of it), and gcc's -Wunused-const-variable does
 * not report one a file leaves unused.
 */
static const char *const idem_op_names[IDEM_OPC_COUNT] = {
#define IDEM_OPC_NAME(sym, name)	[IDEM_OPC_##sym] = name,
	IDEM_OP_NAMES(IDEM_OPC_NAME)
#undef IDEM_OPC_NAME
};

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
	X(TOO_MANY_CONNECTIONS,	"too_many_connections")			\
	X(INTERNAL,		"internal")

/*
 * write_report's status: FCoP's own set (FCoP 3.2.5's report statuses).
 * Only requests are checked against it: journals and REPORT files that
 * hold an earlier release's statuses (partial, failed) replay unchanged.
 */
#define IDEM_REPORT_STATUSES(X)						\
	X(DONE,			"done")					\
	X(BLOCKED,		"blocked")				\
	X(IN_PROGRESS,		"in_progress")				\
	X(ABORTED,		"aborted")

/* A reply's "disposition": write_task's, then effect_begin's others. */
#define IDEM_DISPOSITIONS(X)						\
	X(CREATED,		"created")				\
	X(REUSED,		"reused")				\
	X(CONFLICT,		"conflict")				\
	X(PROCEED,		"proceed")				\
	X(IN_PROGRESS,		"in_progress")				\
	X(OUTCOME_UNKNOWN,	"outcome_unknown")

/* error.reason of a conflict, in SPEC.md's order ("Conflict reasons"). */
#define IDEM_CONFLICT_REASONS(X)					\
	X(DIGEST_MISMATCH,	"digest_mismatch")			\
	X(SCHEMA_MISMATCH,	"schema_mismatch")			\
	X(TARGET_MISMATCH,	"target_mismatch")			\
	X(TASK_MISSING,		"task_missing")				\
	X(STALE_FENCE,		"stale_fence")				\
	X(NO_RESERVATION,	"no_reservation")			\
	X(ALREADY_COMMITTED,	"already_committed")

/*
 * error.reason of too_many_connections, the refusal of a connection:
 * the option whose limit was reached (doc/protocol.md).
 */
#define IDEM_LIMIT_REASONS(X)						\
	X(MAX_CONNECTIONS,	"max_connections")			\
	X(MAX_CONNECTIONS_PER_PID, "max_connections_per_pid")		\
	X(MAX_CONNECTIONS_PER_UID, "max_connections_per_uid")

#endif
