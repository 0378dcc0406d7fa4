/* SPDX-License-Identifier: ISC */
/*
 * tools.c: idem-mcp's tools, one row of tool_table each, and the one
 * path every tool call takes to idemd.
 *
 * A tool's inputSchema is the broker op's request shape without "op":
 * its arguments are checked against that schema (schema.c), which
 * refuses members it does not list, and then sent as they are, with the
 * op added, through libidem (one connection per call, so that a broker
 * restarted between two calls is simply reached again).  The broker's
 * reply, less "ok" and "id", is the structuredContent; "ok":false is a
 * tool error (isError), so a conflict reaches the model with its facts
 * and is never a protocol error.  Adding a tool is adding a row: its
 * name, description, annotations, schemas, op and a one-line summary.
 *
 * Only calls the broker makes idempotent are exposed: the write tools'
 * schemas require client_submission_id, so a legacy (id-less) call
 * cannot be made through idem-mcp.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* asprintf */
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "idem.h"
#include "mcp.h"
#include "protocol.h"

#ifndef nitems
#define nitems(a)	(sizeof (a) / sizeof (a)[0])
#endif

/*
 * JSON written as JSON in the source: the preprocessor turns the tokens
 * into one string literal (quotes escaped), which is parsed at start-up.
 */
#define MCP_JSON(...)	#__VA_ARGS__

/* Tool flags: the MCP annotations, and whether it writes. */
#define TOOL_READ_ONLY	0x01	/* readOnlyHint */
#define TOOL_WRITES	0x02	/* disposition, action_taken, idempotent */

/* ---- schemas ------------------------------------------------------------ */

/* An error's schema; reasons: what error.reason of a conflict may be. */
#define SCHEMA_ERROR_OF(reasons) MCP_JSON(				\
	{"type": "object",						\
	 "description": "Why the call failed. code is the broker's error code (SPEC.md), or invalid_arguments (the arguments do not satisfy the inputSchema) or broker_unavailable (idemd could not be reached or did not answer). retryable: the same call may succeed later, with the same client_submission_id.", \
	 "required": ["code", "message"],				\
	 "properties": {						\
	   "code": {"type": "string"},					\
	   "message": {"type": "string"},				\
	   "retryable": {"type": "boolean"},				\
	   "field": {"type": "string", "description": "invalid_request: the offending field, a dotted path"}, \
	   "reason": {"type": "string", "description":) "\"" reasons "\"" MCP_JSON(}}})
#define SCHEMA_ERROR SCHEMA_ERROR_OF(					\
	"conflict: digest_mismatch or schema_mismatch (the id is bound to other content), target_mismatch or task_missing (the file is not what was recorded).")
#define SCHEMA_EFFECT_ERROR SCHEMA_ERROR_OF(				\
	"conflict: digest_mismatch or schema_mismatch (the key is bound to another request), stale_fence (a later attempt took the effect over), no_reservation (nothing to complete) or already_committed (the receipt stands).")
#define SCHEMA_EXTEND_ERROR SCHEMA_ERROR_OF(				\
	"conflict: stale_fence (a later attempt took the effect over: stop), no_reservation (released, or never begun: no lease to extend) or already_committed (the receipt stands).")

#define SCHEMA_RECEIPT MCP_JSON(					\
	{"type": "object",						\
	 "description": "The durable receipt of the creation, byte for byte the first call's on every retry.", \
	 "required": ["client_submission_id", "task_id", "task_path",	\
	   "digest_schema", "request_digest", "file_digest", "state",	\
	   "created_at"],						\
	 "properties": {						\
	   "client_submission_id": {"type": "string"},			\
	   "task_id": {"type": "string"},				\
	   "task_path": {"type": "string", "description": "Where the TASK file was created, relative to the workspace root."}, \
	   "digest_schema": {"type": "string"},				\
	   "request_digest": {"type": "string"},			\
	   "file_digest": {"type": "string"},				\
	   "state": {"type": "string"},					\
	   "created_at": {"type": "string"}}})

/* The members every write tool's result has, and its failure members. */
#define SCHEMA_WRITE_COMMON MCP_JSON(					\
	"disposition": {"type": "string",				\
	  "enum": ["created", "reused", "conflict", "error"],		\
	  "description": "created: this call did the work. reused: an earlier call with this client_submission_id did; nothing new was written. conflict: the id is bound to other content; nothing was written. error: see error."}, \
	"action_taken": {"type": ["boolean", "null"],			\
	  "description": "Whether this call wrote anything; null when idemd stopped answering after the request was sent (then call again with the same client_submission_id to learn the outcome)."}, \
	"idempotent": {"type": "boolean"},				\
	"recovered": {"type": "boolean", "description": "This call finished a creation an earlier call began."}, \
	"existing": {"type": ["object", "null"], "description": "conflict: what the client_submission_id is bound to."}, \
	"error":) SCHEMA_ERROR

#define EFFECT_ID_DESCRIPTION						\
	"Names ONE intent, chosen once by you when you first decide to perform this effect (for example \\\"run-42/notify-ops\\\"). When you retry the same intent for any reason (an error, a timeout, a lost or unclear answer, a restart), send the EXACT SAME client_submission_id and effect_kind with the same request. NEVER invent a new client_submission_id on a retry: a new id is a new intent, and idem would let the effect be performed a second time. 1 to 200 printable ASCII characters, no spaces."

#define ID_DESCRIPTION							\
	"Names ONE intent, chosen once by you when you first decide to make this call (for example \\\"run-42/step-3\\\"). When you retry the same intent for any reason (an error, a timeout, a lost or unclear answer, a restart), send the EXACT SAME client_submission_id with the same content. NEVER invent a new client_submission_id on a retry: a new id is a new intent and writes a second file. 1 to 200 printable ASCII characters, no spaces."

static const char write_task_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id", "task"],
	 "properties": {
	   "client_submission_id": {"type": "string", "minLength": 1,
	     "maxLength": 200, "description":) "\"" ID_DESCRIPTION "\"" MCP_JSON(},
	   "task": {"type": "object",
	     "additionalProperties": false,
	     "required": ["sender", "recipient", "subject"],
	     "properties": {
	       "sender": {"type": "string", "minLength": 1, "maxLength": 16,
	         "description": "FCoP role code of the sender: upper-case letters, digits, _ and - (PM, DEV_01, LEAD-QA)."},
	       "recipient": {"type": "string", "minLength": 1,
	         "description": "FCoP role code of the recipient, optionally with a slot (DEV or DEV.D1)."},
	       "subject": {"type": "string", "minLength": 1,
	         "description": "One-line summary, at most 1024 bytes."},
	       "body": {"type": ["string", "null"],
	         "description": "Markdown body, at most 524288 bytes. Default (or null): empty."},
	       "priority": {"type": ["string", "null"],
	         "enum": ["P0", "P1", "P2", "P3", null],
	         "description": "Default (or null): P2."},
	       "risk_level": {"type": ["string", "null"],
	         "enum": ["low", "medium", "high", "irreversible", null],
	         "description": "Default (or null): low."},
	       "thread_key": {"type": ["string", "null"],
	         "description": "Groups related tasks; 1 to 256 bytes."},
	       "parent": {"type": ["string", "null"],
	         "description": "task_id of the parent task."},
	       "references": {"type": ["array", "null"], "maxItems": 256,
	         "items": {"type": "string", "minLength": 1},
	         "description": "Paths or URLs this task refers to. Default (or null): none."},
	       "depends_on": {"type": ["array", "null"], "maxItems": 256,
	         "items": {"type": "string", "minLength": 1},
	         "description": "task_ids this task depends on. Default (or null): none."}}}}});

static const char write_task_output[] = MCP_JSON(
	{"type": "object",
	 "required": ["disposition", "action_taken", "idempotent"],
	 "properties": {) SCHEMA_WRITE_COMMON MCP_JSON(,
	   "receipt":) SCHEMA_RECEIPT MCP_JSON(,
	   "current_path": {"type": "string",
	     "description": "Where the TASK file is now, when FCoP tools have moved it since its creation."}}});

static const char write_report_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["task_id", "client_submission_id", "report"],
	 "properties": {
	   "task_id": {"type": "string", "minLength": 1,
	     "description": "The task this report answers (it must exist)."},
	   "client_submission_id": {"type": "string", "minLength": 1,
	     "maxLength": 200, "description":) "\"" ID_DESCRIPTION "\"" MCP_JSON(},
	   "report": {"type": "object",
	     "additionalProperties": false,
	     "required": ["sender"],
	     "properties": {
	       "sender": {"type": "string", "minLength": 1, "maxLength": 16,
	         "description": "FCoP role code of the reporter."},
	       "recipient": {"type": "string", "minLength": 1, "maxLength": 16,
	         "description": "FCoP role code; default the task's sender."},
	       "status": {"type": "string",
	         "enum": ["done", "blocked", "in_progress", "aborted"],
	         "description": "Default done."},
	       "body": {"type": "string",
	         "description": "Markdown body, at most 524288 bytes."}}}}});

static const char write_report_output[] = MCP_JSON(
	{"type": "object",
	 "required": ["disposition", "action_taken", "idempotent"],
	 "properties": {) SCHEMA_WRITE_COMMON MCP_JSON(,
	   "deduplicated": {"type": "boolean"},
	   "report_id": {"type": "string"},
	   "report_path": {"type": "string",
	     "description": "Where the REPORT file is, relative to the workspace root."}}});

/* Effects (SPEC.md, "Effects"): the ledger for side effects the caller performs. */
#define SCHEMA_EFFECT_KEY MCP_JSON(					\
	"client_submission_id": {"type": "string", "minLength": 1,	\
	  "maxLength": 200, "description":) "\"" EFFECT_ID_DESCRIPTION "\"" MCP_JSON(}, \
	"effect_kind": {"type": "string", "minLength": 1, "maxLength": 128, \
	  "description": "What kind of effect, versioned, 1 to 128 printable ASCII characters: mail.send/v1, charge/v1. The key is effect_kind and client_submission_id together."})

#define SCHEMA_EFFECT_RECEIPT MCP_JSON(					\
	{"type": "object",						\
	 "description": "The committed receipt, byte for byte the same on every later answer.", \
	 "required": ["client_submission_id", "effect_kind", "request_digest", \
	   "external_key", "attempt", "state", "committed_at"],		\
	 "properties": {						\
	   "client_submission_id": {"type": "string"},			\
	   "effect_kind": {"type": "string"},				\
	   "digest_schema": {"type": "string"},				\
	   "request_digest": {"type": "string"},			\
	   "external_key": {"type": "string"},				\
	   "attempt": {"type": "integer"},				\
	   "result": {"description": "What effect_complete or effect_resolve reported."}, \
	   "state": {"type": "string"},					\
	   "committed_at": {"type": "string"}}})

/* Every effect tool's result: the broker's answer, whichever op. */
static const char effect_output[] = MCP_JSON(
	{"type": "object",
	 "required": ["action_taken", "idempotent"],
	 "properties": {
	   "disposition": {"type": "string",
	     "enum": ["proceed", "reused", "conflict", "in_progress",
	       "outcome_unknown", "error"],
	     "description": "effect_begin: proceed (perform it now, then effect_complete with the fence), reused (already applied: do not perform it again), conflict, in_progress (retry later with the same id), outcome_unknown (it may have happened: check, then effect_resolve). Errors: error."},
	   "action_taken": {"type": ["boolean", "null"]},
	   "idempotent": {"type": "boolean"},
	   "recovered": {"type": "boolean"},
	   "state": {"type": "string",
	     "description": "reserved, committed, released or outcome_unknown."},
	   "client_submission_id": {"type": "string"},
	   "effect_kind": {"type": "string"},
	   "attempt": {"type": "integer"},
	   "fence": {"type": "string",
	     "description": "proceed: pass it to effect_complete."},
	   "external_key": {"type": "string",
	     "description": "The same for every attempt: give it to the downstream system as its own idempotency key."},
	   "digest_schema": {"type": "string"},
	   "request_digest": {"type": "string"},
	   "lease_ms": {"type": "integer"},
	   "lease_expires_at": {"type": "string"},
	   "receipt":) SCHEMA_EFFECT_RECEIPT MCP_JSON(,
	   "existing": {"type": ["object", "null"],
	     "description": "conflict, in_progress and outcome_unknown: the effect as recorded (state, attempt, external_key)."},
	   "error":) SCHEMA_EFFECT_ERROR MCP_JSON(}});

static const char effect_begin_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id", "effect_kind", "request"],
	 "properties": {) SCHEMA_EFFECT_KEY MCP_JSON(,
	   "request": {"description": "What the effect will do (any JSON): the same intent must send the same request."},
	   "lease_ms": {"type": "integer", "minimum": 100,
	     "maximum": 86400000,
	     "description": "How long you may take to perform the effect and call effect_complete; default 30000."}}});

static const char effect_complete_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id", "effect_kind", "fence",
	   "outcome"],
	 "properties": {) SCHEMA_EFFECT_KEY MCP_JSON(,
	   "fence": {"type": "string", "minLength": 1,
	     "description": "The fence effect_begin answered with proceed."},
	   "outcome": {"type": "string", "enum": ["applied", "not_applied"]},
	   "result": {"description": "What the effect produced (any JSON), kept in the receipt when applied."}}});

static const char effect_extend_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id", "effect_kind", "fence"],
	 "properties": {) SCHEMA_EFFECT_KEY MCP_JSON(,
	   "fence": {"type": "string", "minLength": 1,
	     "description": "The fence effect_begin answered with proceed."},
	   "lease_ms": {"type": "integer", "minimum": 100,
	     "maximum": 86400000,
	     "description": "The lease ends this long from now (the broker's clock), however long it had left; default 30000."}}});

/* effect_extend's result: the lease's new end, or why not. */
static const char effect_extend_output[] = MCP_JSON(
	{"type": "object",
	 "required": ["action_taken", "idempotent"],
	 "properties": {
	   "lease_expires_at": {"type": "string",
	     "description": "When the lease now ends: extend again well before then while the effect is still running, or call effect_complete."},
	   "disposition": {"type": "string",
	     "enum": ["conflict", "outcome_unknown", "error"],
	     "description": "Only when it was not extended: conflict (stale_fence: another attempt holds the effect now, stop; no_reservation: it was released; already_committed: it is done), outcome_unknown (the lease had already lapsed: finish, then call effect_complete with the same fence, which is still accepted), error."},
	   "action_taken": {"type": ["boolean", "null"]},
	   "idempotent": {"type": "boolean"},
	   "existing": {"type": ["object", "null"]},
	   "error":) SCHEMA_EXTEND_ERROR MCP_JSON(}});

static const char effect_resolve_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id", "effect_kind", "evidence"],
	 "properties": {) SCHEMA_EFFECT_KEY MCP_JSON(,
	   "evidence": {"type": "object",
	     "additionalProperties": false,
	     "required": ["observed"],
	     "properties": {
	       "observed": {"type": "string",
	         "enum": ["applied", "not_applied", "unknown"],
	         "description": "What you found when you checked the downstream system (by external_key)."},
	       "result": {"description": "applied: what the effect produced (any JSON)."},
	       "source": {"type": "string", "maxLength": 256,
	         "description": "Who or what observed it."}}}}});

static const char get_submission_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "required": ["client_submission_id"],
	 "properties": {
	   "client_submission_id": {"type": "string", "minLength": 1,
	     "maxLength": 200,
	     "description": "The client_submission_id to look up: the one a write_task call was made with or, with effect_kind, an effect_begin call."},
	   "effect_kind": {"type": "string", "minLength": 1,
	     "maxLength": 128,
	     "description": "Look up the effect of this kind under the client_submission_id, instead of a task."}}});

static const char get_submission_output[] = MCP_JSON(
	{"type": "object",
	 "properties": {
	   "found": {"type": "boolean"},
	   "submission": {"type": "object",
	     "required": ["client_submission_id", "state"],
	     "properties": {
	       "client_submission_id": {"type": "string"},
	       "effect_kind": {"type": "string",
	         "description": "Only for an effect: its kind."},
	       "state": {"type": "string",
	         "description": "A task: reserved, task_created or committed. An effect: reserved, outcome_unknown, released or committed."},
	       "attempt": {"type": "integer",
	         "description": "Only for an effect: its latest attempt."},
	       "external_key": {"type": "string",
	         "description": "Only for an effect: the key the downstream system knows it by."},
	       "digest_schema": {"type": "string"},
	       "request_digest": {"type": "string"},
	       "task_id": {"type": "string"},
	       "task_path": {"type": "string"},
	       "current_path": {"type": "string"},
	       "reserved_at": {"type": "string"},
	       "updated_at": {"type": "string"},
	       "receipt": {"anyOf": [) SCHEMA_RECEIPT MCP_JSON(,
	         ) SCHEMA_EFFECT_RECEIPT MCP_JSON(]}}},
	   "error":) SCHEMA_ERROR MCP_JSON(}});

static const char diagnose_input[] = MCP_JSON(
	{"type": "object",
	 "additionalProperties": false,
	 "properties": {
	   "stale_after_ms": {"type": "integer", "minimum": 0,
	     "description": "Age past which an entry is marked stalled; default 30000."}}});

static const char diagnose_output[] = MCP_JSON(
	{"type": "object",
	 "properties": {
	   "entries": {"type": "array",
	     "items": {"type": "object",
	       "required": ["client_submission_id", "state"],
	       "properties": {
	         "client_submission_id": {"type": "string"},
	         "effect_kind": {"type": "string",
	           "description": "Only for an effect: its kind. The entries without it are task submissions."},
	         "state": {"type": "string"},
	         "age_ms": {"type": "integer"},
	         "task_id": {"type": "string"},
	         "task_path": {"type": "string"},
	         "task_exists": {"type": ["boolean", "null"]},
	         "request_digest_matches": {"type": ["boolean", "null"]},
	         "file_digest_matches": {"type": ["boolean", "null"]},
	         "in_flight": {"type": ["boolean", "null"]},
	         "stalled": {"type": "boolean"}}}},
	   "counts": {"type": "object",
	     "description": "Task submissions by state.",
	     "properties": {
	       "reserved": {"type": "integer"},
	       "task_created": {"type": "integer"},
	       "committed": {"type": "integer"}}},
	   "effect_counts": {"type": "object",
	     "description": "Effects by state; outcome_unknown counts a lapsed lease too.",
	     "properties": {
	       "reserved": {"type": "integer"},
	       "outcome_unknown": {"type": "integer"},
	       "released": {"type": "integer"},
	       "committed": {"type": "integer"}}},
	   "error":) SCHEMA_ERROR MCP_JSON(}});

/* ---- the table ---------------------------------------------------------- */

struct tool {
	const char	*name;
	const char	*title;
	const char	*description;
	unsigned	 flags;
	const char	*input;		/* JSON Schema text */
	const char	*output;
	enum idem_op_code op;		/* the broker op it sends */
	/* One line for the model on success (malloc'd). */
	char		*(*summary)(json_t *structured);
	/* Parsed at start-up. */
	json_t		*input_schema;
	json_t		*output_schema;
};

static char	*summary_write_task(json_t *);
static char	*summary_write_report(json_t *);
static char	*summary_get_submission(json_t *);
static char	*summary_diagnose(json_t *);
static char	*summary_effect(json_t *);
static char	*summary_effect_extend(json_t *);

static struct tool tool_table[] = {
	{ "write_task", "Create an FCoP task exactly once",
	  "Create an FCoP task (a TASK-*.md file in the workspace's "
	  "_lifecycle/inbox/) exactly once per client_submission_id, "
	  "through the idem broker. client_submission_id is required. "
	  "Choose it once for the intent; if this call fails, times out or "
	  "its answer is unclear, call write_task again with the EXACT SAME "
	  "client_submission_id and the same task, never with a new one: "
	  "the retry answers disposition \"reused\" with the first call's "
	  "receipt and creates nothing, while a new id would create a "
	  "second task. The same id with a different task is a conflict "
	  "(an error result with the existing binding) and writes nothing; "
	  "use a new client_submission_id only for a genuinely new task.",
	  TOOL_WRITES, write_task_input, write_task_output, IDEM_OPC_WRITE_TASK,
	  summary_write_task, NULL, NULL },
	{ "write_report", "Write an FCoP report exactly once",
	  "Write an FCoP report (a REPORT-*.md file in reports/) on an "
	  "existing task, exactly once per task_id and "
	  "client_submission_id. client_submission_id is required. If this "
	  "call fails, times out or its answer is unclear, call "
	  "write_report again with the EXACT SAME client_submission_id, "
	  "task_id and report, never with a new one: the retry "
	  "answers disposition \"reused\" with the first report_id and "
	  "writes nothing, while a new id would write a second report. The "
	  "same id with other content is a conflict and writes nothing.",
	  TOOL_WRITES, write_report_input, write_report_output,
	  IDEM_OPC_WRITE_REPORT, summary_write_report, NULL, NULL },
	{ "get_submission", "Look up a submission or an effect",
	  "Read what the idem broker recorded for a client_submission_id: "
	  "its state (reserved, task_created, committed), its task_id and "
	  "path, and the receipt once committed. Read-only. Use it to learn "
	  "whether an earlier write_task took effect; to finish one that "
	  "did not, call write_task again with the same "
	  "client_submission_id and task. With effect_kind, the effect "
	  "under that key instead: its state (reserved, outcome_unknown, "
	  "released, committed), attempt, external_key, and its receipt "
	  "once committed.",
	  TOOL_READ_ONLY, get_submission_input, get_submission_output,
	  IDEM_OPC_GET_SUBMISSION, summary_get_submission, NULL, NULL },
	{ "diagnose", "List unfinished submissions and effects",
	  "List the task submissions the idem broker holds in an "
	  "intermediate state (reserved or task_created: a creation that "
	  "was interrupted and not retried yet), whether each one's TASK "
	  "file exists and matches, and the unfinished effects (those with "
	  "an effect_kind: outcome_unknown first, then live leases and "
	  "released ones), with how many of each are in each state. "
	  "Read-only: it never repairs, deletes or recreates anything.",
	  TOOL_READ_ONLY, diagnose_input, diagnose_output, IDEM_OPC_DIAGNOSE,
	  summary_diagnose, NULL, NULL },
	{ "effect_begin", "Ask before performing a side effect",
	  "Ask idem before performing a side effect it cannot perform "
	  "itself (send a mail, call an API), keyed by effect_kind and "
	  "client_submission_id; idem performs nothing. Perform the effect "
	  "only when disposition is \"proceed\" (give external_key to the "
	  "downstream system as its idempotency key if it takes one), then "
	  "call effect_complete with the fence. \"reused\": it was already "
	  "applied (see receipt); do not perform it again. \"in_progress\": "
	  "another caller holds the lease; retry later. "
	  "\"outcome_unknown\": an earlier attempt may have happened: check "
	  "the downstream system, then call effect_resolve. When you retry "
	  "the same intent, send the EXACT SAME client_submission_id, "
	  "effect_kind and request, never with a new one.",
	  TOOL_WRITES, effect_begin_input, effect_output, IDEM_OPC_EFFECT_BEGIN,
	  summary_effect, NULL, NULL },
	{ "effect_complete", "Report a side effect's outcome",
	  "Report what the effect that effect_begin let you perform did: "
	  "outcome \"applied\" (with its result) commits the receipt; "
	  "\"not_applied\" releases it, so the next effect_begin proceeds "
	  "with the next attempt. Send the fence effect_begin gave. If this "
	  "call's answer is lost, call it again with the EXACT SAME "
	  "client_submission_id, effect_kind, fence and outcome: the same "
	  "answer comes back.",
	  TOOL_WRITES, effect_complete_input, effect_output,
	  IDEM_OPC_EFFECT_COMPLETE, summary_effect, NULL, NULL },
	{ "effect_extend", "Keep a long side effect's lease",
	  "While a side effect that effect_begin let you perform is still "
	  "running (a deployment, a long API call), call this before its "
	  "lease ends (lease_expires_at), for example every third of "
	  "lease_ms, with the EXACT SAME client_submission_id, effect_kind "
	  "and fence, never with a new one: the lease then ends lease_ms "
	  "from now, and other callers keep getting in_progress. If its "
	  "answer is lost, call it again: that is safe. \"outcome_unknown\": "
	  "the lease had already lapsed and was not extended; finish the "
	  "effect and call effect_complete with the same fence (still "
	  "accepted). A conflict stale_fence means another attempt holds "
	  "the effect now: stop. When the effect is done, call "
	  "effect_complete.",
	  TOOL_WRITES, effect_extend_input, effect_extend_output,
	  IDEM_OPC_EFFECT_EXTEND, summary_effect_extend, NULL, NULL },
	{ "effect_resolve", "Settle an effect whose outcome is unknown",
	  "Settle an effect that effect_begin answered outcome_unknown, with "
	  "what you observed in the downstream system: \"applied\" commits "
	  "(later effect_begin answers reused), \"not_applied\" releases it "
	  "(the next effect_begin proceeds), \"unknown\" leaves it listed by "
	  "diagnose. Use the EXACT SAME client_submission_id and effect_kind "
	  "as the effect.",
	  TOOL_WRITES, effect_resolve_input, effect_output,
	  IDEM_OPC_EFFECT_RESOLVE, summary_effect, NULL, NULL },
};

/* ---- start-up ----------------------------------------------------------- */

static const char *
tools_str(json_t *object, const char *key)
{
	const char	*s = json_string_value(json_object_get(object, key));

	/* "": every text says what it has, never a placeholder. */
	return s != NULL ? s : "";
}

static json_t *
tools_load(const struct tool *t, const char *which, const char *text)
{
	json_error_t	 jerr;
	json_t		*schema;
	char		 why[256];

	if ((schema = json_loads(text, JSON_REJECT_DUPLICATES, &jerr)) ==
	    NULL) {
		fprintf(stderr, "idem-mcp: %s %s schema: %s at column %d\n",
		    t->name, which, jerr.text, jerr.column);
		return NULL;
	}
	/* MCP: both schemas describe an object. */
	if (mcp_schema_check(schema, why, sizeof why) != 0 ||
	    strcmp(tools_str(schema, "type"), "object") != 0) {
		fprintf(stderr, "idem-mcp: %s %s schema: %s\n", t->name, which,
		    mcp_schema_check(schema, why, sizeof why) != 0 ? why :
		    "not of type object");
		json_decref(schema);
		return NULL;
	}
	return schema;
}

int
mcp_tools_init(void)
{
	struct tool	*t;
	size_t		 i;

	for (i = 0; i < nitems(tool_table); i++) {
		t = &tool_table[i];
		if ((t->input_schema = tools_load(t, "input",
		    t->input)) == NULL ||
		    (t->output_schema = tools_load(t, "output",
		    t->output)) == NULL) {
			mcp_tools_free();
			return -1;
		}
	}
	return 0;
}

void
mcp_tools_free(void)
{
	size_t	i;

	for (i = 0; i < nitems(tool_table); i++) {
		json_decref(tool_table[i].input_schema);
		json_decref(tool_table[i].output_schema);
		tool_table[i].input_schema = NULL;
		tool_table[i].output_schema = NULL;
	}
}

size_t
mcp_tools_count(void)
{
	return nitems(tool_table);
}

json_t *
mcp_tools_describe(size_t i)
{
	const struct tool	*t = &tool_table[i];
	int			 ro = (t->flags & TOOL_READ_ONLY) != 0;

	return json_pack("{s:s, s:s, s:s, s:O, s:O, s:{s:s, s:b, s:b, s:b, "
	    "s:b}}",
	    "name", t->name, "title", t->title, "description", t->description,
	    "inputSchema", t->input_schema, "outputSchema", t->output_schema,
	    "annotations", "title", t->title, "readOnlyHint", ro,
	    /* A write adds a file; it never changes or removes one. */
	    "destructiveHint", 0,
	    /* Every exposed call is idempotent: that is idem's guarantee. */
	    "idempotentHint", 1,
	    /* Only the local workspace, through the local broker. */
	    "openWorldHint", 0);
}

/* ---- results ------------------------------------------------------------ */

static char *
tools_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
tools_printf(const char *fmt, ...)
{
	va_list	 ap;
	char	*s;
	int	 n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

static char *
summary_write_task(json_t *sc)
{
	json_t		*receipt = json_object_get(sc, "receipt");
	const char	*path;

	path = json_string_value(json_object_get(sc, "current_path"));
	if (path == NULL)
		path = tools_str(receipt, "task_path");
	if (strcmp(tools_str(sc, "disposition"), "reused") == 0)
		return tools_printf("reused: task %s (%s) was already created "
		    "under this client_submission_id; nothing new was written.",
		    tools_str(receipt, "task_id"), path);
	return tools_printf("created: task %s (%s).",
	    tools_str(receipt, "task_id"), path);
}

static char *
summary_write_report(json_t *sc)
{
	if (strcmp(tools_str(sc, "disposition"), "reused") == 0)
		return tools_printf("reused: report %s (%s) was already "
		    "written under this client_submission_id; nothing new was "
		    "written.", tools_str(sc, "report_id"),
		    tools_str(sc, "report_path"));
	return tools_printf("created: report %s (%s).",
	    tools_str(sc, "report_id"), tools_str(sc, "report_path"));
}

static char *
summary_get_submission(json_t *sc)
{
	json_t		*sub = json_object_get(sc, "submission");
	const char	*path;

	if (!json_is_true(json_object_get(sc, "found")))
		return tools_printf("Not found: idem has recorded nothing under "
		    "this client_submission_id (with this effect_kind, if one "
		    "was given).");
	if (json_object_get(sub, "effect_kind") != NULL)
		return tools_printf("Effect %s, client_submission_id %s: state "
		    "%s, attempt %" JSON_INTEGER_FORMAT "%s%s%s.",
		    tools_str(sub, "effect_kind"),
		    tools_str(sub, "client_submission_id"),
		    tools_str(sub, "state"),
		    json_integer_value(json_object_get(sub, "attempt")),
		    json_object_get(sub, "external_key") != NULL ?
		    ", external_key " : "", tools_str(sub, "external_key"),
		    json_object_get(sub, "receipt") != NULL ?
		    "; its receipt is in the result" : "");
	path = json_string_value(json_object_get(sub, "current_path"));
	if (path == NULL)
		path = tools_str(sub, "task_path");
	return tools_printf("Submission %s: state %s, task %s (%s)%s.",
	    tools_str(sub, "client_submission_id"), tools_str(sub, "state"),
	    tools_str(sub, "task_id"), path,
	    json_object_get(sub, "receipt") != NULL ?
	    "; its receipt is in the result" : "");
}

static char *
summary_diagnose(json_t *sc)
{
	json_t		*counts = json_object_get(sc, "counts");
	json_t		*effect_counts = json_object_get(sc, "effect_counts");
	json_t		*entries = json_object_get(sc, "entries"), *entry;
	size_t		 i, tasks = 0, effects = 0;
	char		*line, *more;

	/* The entries with an effect_kind are effects, not tasks. */
	json_array_foreach(entries, i, entry) {
		if (json_object_get(entry, "effect_kind") != NULL)
			effects++;
		else
			tasks++;
	}
	line = tools_printf("%zu task submission%s in an intermediate state "
	    "(reserved %" JSON_INTEGER_FORMAT ", task_created %"
	    JSON_INTEGER_FORMAT "); %" JSON_INTEGER_FORMAT " committed.",
	    tasks, tasks == 1 ? "" : "s",
	    json_integer_value(json_object_get(counts, "reserved")),
	    json_integer_value(json_object_get(counts, "task_created")),
	    json_integer_value(json_object_get(counts, "committed")));
	if (line == NULL || !json_is_object(effect_counts))
		return line;
	more = tools_printf("%s %zu unfinished effect%s (outcome_unknown %"
	    JSON_INTEGER_FORMAT ", with a live lease %" JSON_INTEGER_FORMAT
	    ", released %" JSON_INTEGER_FORMAT "); %" JSON_INTEGER_FORMAT
	    " committed.%s", line, effects, effects == 1 ? "" : "s",
	    json_integer_value(json_object_get(effect_counts,
	    "outcome_unknown")),
	    json_integer_value(json_object_get(effect_counts, "reserved")),
	    json_integer_value(json_object_get(effect_counts, "released")),
	    json_integer_value(json_object_get(effect_counts, "committed")),
	    json_integer_value(json_object_get(effect_counts,
	    "outcome_unknown")) > 0 ? " An outcome_unknown effect may or "
	    "may not have happened: check the downstream system by its "
	    "external_key, then call effect_resolve with what you "
	    "observed." : "");
	free(line);
	return more;
}

static char *
summary_effect(json_t *sc)
{
	const char	*d = json_string_value(json_object_get(sc,
			    "disposition"));

	if (d != NULL && strcmp(d, "proceed") == 0)
		return tools_printf("proceed: perform the effect now (attempt "
		    "%" JSON_INTEGER_FORMAT ", external_key %s), then call "
		    "effect_complete with fence %s.",
		    json_integer_value(json_object_get(sc, "attempt")),
		    tools_str(sc, "external_key"), tools_str(sc, "fence"));
	if (d != NULL && strcmp(d, "reused") == 0)
		return tools_printf("reused: this effect was already applied "
		    "(attempt %" JSON_INTEGER_FORMAT "); do not perform it "
		    "again.", json_integer_value(json_object_get(
		    json_object_get(sc, "receipt"), "attempt")));
	return tools_printf("%s: the effect is now %s.",
	    json_is_true(json_object_get(sc, "action_taken")) ? "recorded" :
	    "unchanged", tools_str(sc, "state"));
}

static char *
summary_effect_extend(json_t *sc)
{
	return tools_printf("extended: the lease now ends at %s; extend "
	    "again before then while the effect runs, then call "
	    "effect_complete.", tools_str(sc, "lease_expires_at"));
}

/*
 * What an effect's "existing" says, as " (state S, attempt N, external_key
 * K)": only what it has; "" without any.
 */
static void
existing_effect_facts(json_t *existing, char *buf, size_t size)
{
	json_t		*attempt = json_object_get(existing, "attempt");
	const char	*state, *xkey;
	size_t		 n = 0;

	state = json_string_value(json_object_get(existing, "state"));
	xkey = json_string_value(json_object_get(existing, "external_key"));
	buf[0] = '\0';
	if (state != NULL)
		n += (size_t)snprintf(buf + n, size - n, ", state %s", state);
	if (json_is_integer(attempt) && n < size)
		n += (size_t)snprintf(buf + n, size - n, ", attempt %"
		    JSON_INTEGER_FORMAT, json_integer_value(attempt));
	if (xkey != NULL && n < size)
		n += (size_t)snprintf(buf + n, size - n, ", external_key %s",
		    xkey);
	if (n > 0 && n + 2 < size) {
		/* ", state S" -> " (state S)" */
		buf[0] = ' ';
		buf[1] = '(';
		buf[n] = ')';
		buf[n + 1] = '\0';
	}
}

/* A conflict of an effect tool: what it means for this reason. */
static char *
summary_effect_conflict(const struct tool *t, const char *reason,
    json_t *existing, const char *message)
{
	char		 facts[160];

	existing_effect_facts(existing, facts, sizeof facts);
	if (strcmp(reason, "digest_mismatch") == 0 ||
	    strcmp(reason, "schema_mismatch") == 0)
		return tools_printf("conflict (%s): this client_submission_id "
		    "and effect_kind are already bound to another request%s; "
		    "nothing was recorded, and this request "
		    "must not be performed under them. To retry the first "
		    "intent, send exactly its request; a new intent needs a "
		    "new client_submission_id.", reason, facts);
	if (strcmp(reason, "stale_fence") == 0 &&
	    t->op == IDEM_OPC_EFFECT_EXTEND)
		return tools_printf("conflict (stale_fence): this fence is not "
		    "the effect's latest: your lease lapsed and a later "
		    "effect_begin took the effect over%s; the lease was not "
		    "extended. Stop performing the effect if you still can, "
		    "and do not extend or complete with this fence again. If "
		    "you performed it, the downstream system knows it by its "
		    "external_key, which every attempt shares.", facts);
	if (strcmp(reason, "no_reservation") == 0 &&
	    t->op == IDEM_OPC_EFFECT_EXTEND && json_is_object(existing))
		return tools_printf("conflict (no_reservation): the effect was "
		    "released (not applied), so this fence has no lease to "
		    "extend; nothing was recorded. Call effect_begin again "
		    "before performing the effect.");
	if (strcmp(reason, "already_committed") == 0 &&
	    t->op == IDEM_OPC_EFFECT_EXTEND)
		return tools_printf("conflict (already_committed): the effect "
		    "is already committed%s, so there is no lease to extend; "
		    "nothing was changed and its receipt stands. Do not "
		    "perform it again; get_submission with effect_kind shows "
		    "the receipt.", facts);
	if (strcmp(reason, "stale_fence") == 0)
		return tools_printf("conflict (stale_fence): this fence is not "
		    "the effect's latest: your lease lapsed and a later "
		    "effect_begin took the effect over%s; your outcome was not "
		    "recorded. Do not call effect_complete with this fence "
		    "again. If you performed the effect, the downstream system "
		    "knows it by its external_key, which every attempt "
		    "shares; get_submission with effect_kind shows the "
		    "effect's state.", facts);
	if (strcmp(reason, "no_reservation") == 0 && !json_is_object(existing))
		return tools_printf("conflict (no_reservation): no effect was "
		    "begun under this client_submission_id and effect_kind; "
		    "nothing was recorded. Check both (a typo makes another "
		    "key); effect_begin comes first.");
	if (strcmp(reason, "no_reservation") == 0)
		return tools_printf("conflict (no_reservation): the effect was "
		    "released (not applied), so this fence has no reservation "
		    "to complete; nothing was recorded. Call effect_begin again "
		    "before performing the effect.");
	if (strcmp(reason, "already_committed") == 0)
		return tools_printf("conflict (already_committed): the effect "
		    "is already committed%s%s; nothing was changed and its "
		    "receipt stands. Do not perform it again; get_submission "
		    "with effect_kind shows the receipt.", facts,
		    t->op == IDEM_OPC_EFFECT_RESOLVE ? ", and your evidence "
		    "contradicts its receipt" : " with another outcome or "
		    "result");
	return tools_printf("conflict (%s): %s; nothing was recorded.", reason,
	    message);
}

/* A conflict of write_task or write_report. */
static char *
summary_write_conflict(const struct tool *t, const char *reason,
    json_t *existing, const char *message)
{
	int		 report = t->op == IDEM_OPC_WRITE_REPORT;
	const char	*what = report ? "report" : "task";
	const char	*id = json_string_value(json_object_get(existing,
			    report ? "report_id" : "task_id"));

	if (strcmp(reason, "digest_mismatch") == 0 ||
	    strcmp(reason, "schema_mismatch") == 0)
		return tools_printf("conflict (%s): this client_submission_id "
		    "is already bound to another %s%s%s%s; nothing was "
		    "written. To retry the first intent, resend exactly its "
		    "%s; a new %s needs a new client_submission_id.", reason,
		    what, id != NULL ? " (" : "", id != NULL ? id : "",
		    id != NULL ? ")" : "", what, what);
	if (strcmp(reason, "target_mismatch") == 0)
		return tools_printf("conflict (target_mismatch): the path "
		    "reserved for this submission's %s%s%s holds a file that "
		    "is not it; nothing was overwritten. Retrying will not "
		    "help: an operator must look at that file (idemctl "
		    "diagnose).", what, id != NULL ? " " : "",
		    id != NULL ? id : "");
	if (strcmp(reason, "task_missing") == 0)
		return tools_printf("conflict (task_missing): the %s%s%s was "
		    "created for this client_submission_id, but no file of it "
		    "is left in the workspace; nothing was recreated. Retrying "
		    "will not help: an operator must look (idemctl verify).",
		    what, id != NULL ? " " : "", id != NULL ? id : "");
	return tools_printf("conflict (%s): %s; nothing was written.", reason,
	    message);
}

/* The one line for a failed call: what happened and what to do next. */
static char *
summary_error(const struct tool *t, json_t *sc)
{
	json_t		*error = json_object_get(sc, "error");
	json_t		*existing = json_object_get(sc, "existing");
	const char	*code = tools_str(error, "code");
	const char	*message = tools_str(error, "message");
	const char	*field;
	int		 writes = (t->flags & TOOL_WRITES) != 0;
	int		 effect = t->op == IDEM_OPC_EFFECT_BEGIN ||
			    t->op == IDEM_OPC_EFFECT_COMPLETE ||
			    t->op == IDEM_OPC_EFFECT_EXTEND ||
			    t->op == IDEM_OPC_EFFECT_RESOLVE;
	char		 facts[160];

	if (strcmp(code, "conflict") == 0)
		return effect ? summary_effect_conflict(t,
		    tools_str(error, "reason"), existing, message) :
		    summary_write_conflict(t, tools_str(error, "reason"),
		    existing, message);
	if (t->op == IDEM_OPC_EFFECT_EXTEND &&
	    strcmp(code, "outcome_unknown") == 0)
		return tools_printf("outcome_unknown: the lease had already "
		    "lapsed, so it was not extended, and other callers may "
		    "have been told the outcome is unknown. If you are still "
		    "performing the effect, finish it and call effect_complete "
		    "with the same fence: it is still accepted. If you "
		    "stopped, check the downstream system by the effect's "
		    "external_key "
		    "and call effect_resolve with what you observed.");
	if (effect && strcmp(code, "outcome_unknown") == 0) {
		existing_effect_facts(existing, facts, sizeof facts);
		return tools_printf("outcome_unknown: an earlier attempt of "
		    "this effect%s may or may not have been performed, and "
		    "its lease lapsed. Do not perform it again blindly: check "
		    "the downstream system by the effect's external_key, then "
		    "call effect_resolve with what you observed.", facts);
	}
	if (effect && strcmp(code, "in_progress") == 0)
		return tools_printf("in_progress: another caller holds this "
		    "effect's lease%s%s; do not perform it now. Call %s again "
		    "later with the same arguments.",
		    json_is_string(json_object_get(existing,
		    "lease_expires_at")) ? " until " : "",
		    tools_str(existing, "lease_expires_at"), t->name);
	if (json_is_true(json_object_get(error, "retryable")))
		return tools_printf("%s failed (%s: %s). %s", t->name, code,
		    message, !writes ? "Retrying later is safe." : effect ?
		    "Retrying is safe: call it again with the same arguments, "
		    "never a new client_submission_id." :
		    "Retrying is safe: call it again with the same "
		    "client_submission_id and the same content, never a new "
		    "id.");
	field = json_string_value(json_object_get(error, "field"));
	return tools_printf("%s failed (%s: %s%s%s); not retryable as is.",
	    t->name, code, message, field != NULL ? ", field " : "",
	    field != NULL ? field : "");
}

/*
 * The CallToolResult: structuredContent, a short text, and the
 * structuredContent serialized as a second text block (what the MCP
 * specification asks for clients that do not read structuredContent).
 */
static json_t *
tools_result(const struct tool *t, json_t *sc, int is_error)
{
	char	*line, *dump;
	json_t	*result;

	line = is_error ? summary_error(t, sc) : t->summary(sc);
	dump = json_dumps(sc, JSON_COMPACT);
	result = json_pack("{s:[{s:s, s:s}, {s:s, s:s}], s:O, s:b}",
	    "content", "type", "text", "text", line != NULL ? line : t->name,
	    "type", "text", "text", dump != NULL ? dump : "{}",
	    "structuredContent", sc, "isError", is_error);
	free(line);
	free(dump);
	json_decref(sc);
	return result;
}

/*
 * A failure on this side of the socket.  action_taken: json_false() when
 * nothing reached the broker, json_null() when the outcome is unknown.
 */
static json_t *
tools_failure(const struct tool *t, const char *code, int retryable,
    json_t *action_taken, const char *message)
{
	json_t	*sc;

	sc = json_pack("{s:{s:s, s:s, s:b}}", "error", "code", code,
	    "message", message, "retryable", retryable);
	if (t->flags & TOOL_WRITES) {
		json_object_set_new(sc, "disposition", json_string("error"));
		json_object_set_new(sc, "idempotent", json_true());
		json_object_set_new(sc, "action_taken", action_taken);
	} else
		json_decref(action_taken);
	return tools_result(t, sc, 1);
}

/* The broker's reply -> the result. */
static json_t *
tools_reply(const struct tool *t, json_t *reply)
{
	json_t	*sc, *dedup;
	int	 ok = json_is_true(json_object_get(reply, "ok"));

	sc = json_deep_copy(reply);
	json_object_del(sc, "ok");
	json_object_del(sc, "id");
	if (t->flags & TOOL_WRITES) {
		/*
		 * The broker's error replies carry no disposition, and
		 * write_report answers "deduplicated" instead of one.
		 */
		dedup = json_object_get(sc, "deduplicated");
		if (json_object_get(sc, "disposition") == NULL && !ok)
			json_object_set_new(sc, "disposition",
			    json_string("error"));
		else if (json_object_get(sc, "disposition") == NULL &&
		    json_is_boolean(dedup))
			json_object_set_new(sc, "disposition", json_string(
			    json_is_true(dedup) ? "reused" : "created"));
		if (json_object_get(sc, "action_taken") == NULL)
			json_object_set_new(sc, "action_taken",
			    json_boolean(ok && !json_is_true(dedup)));
		if (json_object_get(sc, "idempotent") == NULL)
			json_object_set_new(sc, "idempotent", json_true());
	}
	return tools_result(t, sc, !ok);
}

static json_t *
tools_send(const struct mcp_config *cfg, const struct tool *t, json_t *args)
{
	struct idem_error	 ierr;
	struct idem_conn	*conn;
	json_error_t		 jerr;
	json_t			*request, *reply, *result;
	char			*line, *answer, message[512];

	request = json_deep_copy(args);
	json_object_set_new(request, "op", json_string(idem_op_names[t->op]));
	line = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	if (line == NULL)
		return tools_failure(t, "internal", 0, json_false(),
		    "out of memory");

	if ((conn = idem_connect(cfg->socket_path, &ierr)) == NULL) {
		free(line);
		snprintf(message, sizeof message, "idemd is not reachable "
		    "(%s); nothing was sent", ierr.message);
		fprintf(stderr, "idem-mcp: %s: %s\n", t->name, message);
		return tools_failure(t, "broker_unavailable", 1,
		    json_false(), message);
	}
	if (idem_call_raw(conn, line, &answer, &ierr) != 0) {
		idem_close(conn);
		free(line);
		if (ierr.code == IDEM_E_ARGUMENT)
			return tools_failure(t, "too_large", 0, json_false(),
			    ierr.message);
		snprintf(message, sizeof message, "no answer from idemd (%s); "
		    "the outcome is unknown", ierr.message);
		fprintf(stderr, "idem-mcp: %s: %s\n", t->name, message);
		return tools_failure(t, "broker_unavailable", 1, json_null(),
		    message);
	}
	idem_close(conn);
	free(line);
	reply = json_loads(answer, 0, &jerr);
	free(answer);
	if (!json_is_object(reply)) {
		json_decref(reply);
		fprintf(stderr, "idem-mcp: %s: idemd's answer did not parse\n",
		    t->name);
		return tools_failure(t, "internal", 1, json_null(),
		    "idemd's answer did not parse; the outcome is unknown");
	}
	result = tools_reply(t, reply);
	json_decref(reply);
	return result;
}

json_t *
mcp_tools_call(const struct mcp_config *cfg, const char *name,
    json_t *arguments, int args_protocol_error, struct mcp_error *err)
{
	const struct tool	*t = NULL;
	json_t			*empty = NULL, *result;
	char			 why[512];
	size_t			 i;

	for (i = 0; i < nitems(tool_table) && t == NULL; i++)
		if (strcmp(tool_table[i].name, name) == 0)
			t = &tool_table[i];
	if (t == NULL) {
		mcp_error_set(err, MCP_INVALID_PARAMS, "Unknown tool: %s",
		    name);
		return NULL;
	}
	if (arguments == NULL)
		arguments = empty = json_object();
	if (mcp_schema_validate(t->input_schema, arguments, why,
	    sizeof why) != 0) {
		json_decref(empty);
		if (args_protocol_error) {
			mcp_error_set(err, MCP_INVALID_PARAMS,
			    "Invalid arguments for tool %s: %s", name, why);
			return NULL;
		}
		return tools_failure(t, "invalid_arguments", 0, json_false(),
		    why);
	}
	result = tools_send(cfg, t, arguments);
	json_decref(empty);
	return result;
}
