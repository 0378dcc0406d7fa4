// SPDX-License-Identifier: ISC
// errors.js: the errors of the idem client, one class per family of the
// wire's error codes (SPEC.md, "Wire protocol"), so that a caller can
// catch by class or read err.code; err.retryable says whether a retry
// with the SAME client_submission_id may succeed.

/** Every failure: a code the broker answered, or the client's own
 * ("transport", "protocol", "closed"). */
export class IdemError extends Error {
  constructor(code, message, { field = null, retryable = false, reply = null,
    cause } = {}) {
    super(`${code}: ${message}${field ? ` (field ${field})` : ''}`,
        cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.detail = message;
    this.field = field;
    this.retryable = Boolean(retryable);
    this.reply = reply;
    // The facts an error reply carries about the key ("existing"), or null.
    const existing = reply && typeof reply.existing === 'object' ? reply.existing : null;
    this.existing = existing;
    this.disposition = reply && typeof reply.disposition === 'string' ? reply.disposition : null;
  }
}

/** Connecting, sending or receiving failed, or the answer did not come
 * in time: the outcome of the request is unknown.  Retry it with the
 * same client_submission_id (writeTaskRetry does). */
export class IdemTransportError extends IdemError {
  constructor(message, cause) {
    super('transport', message, { retryable: true, cause });
  }
}

/** The broker's answer broke the protocol (not JSON, over 1 MiB, the
 * answer to another request); the connection was closed. */
export class IdemProtocolError extends IdemError {
  constructor(message, reply = null) {
    super('protocol', message, { retryable: false, reply });
  }
}

/** The request itself is wrong and will be refused again: invalid_json,
 * invalid_utf8, too_large, invalid_request (field: the dotted path),
 * unknown_op, unsupported_schema, digest_disagrees.  Nothing changed. */
export class IdemRequestError extends IdemError {}

/** task_not_found: write_report's task does not exist. */
export class IdemNotFound extends IdemError {}

/** conflict: the key is bound to another request (or a recovery fact
 * contradicts it, or an effect's fence is stale); nothing was done.
 * reason: digest_mismatch, schema_mismatch, target_mismatch,
 * task_missing, stale_fence, no_reservation, already_committed;
 * existing: what the key is bound to (null when nothing is). */
export class IdemConflict extends IdemError {
  constructor(code, message, opts) {
    super(code, message, opts);
    const error = opts?.reply?.error;
    this.reason = error && typeof error.reason === 'string' ? error.reason : null;
    const ex = this.existing;
    /** The binding the key already has, in camelCase (or null). */
    this.bound = ex === null ? null : {
      clientSubmissionId: str(ex.client_submission_id),
      effectKind: str(ex.effect_kind),
      state: str(ex.state),
      digestSchema: str(ex.digest_schema),
      requestDigest: str(ex.request_digest),
      taskId: str(ex.task_id),
      attempt: int(ex.attempt),
      externalKey: str(ex.external_key),
    };
  }
}

/** in_progress (retryable): an identical write_task still in flight past
 * --inflight-wait-ms, or another caller's live lease on an effect
 * (attempt, externalKey, leaseExpiresAt: that lease's). */
export class IdemInProgress extends IdemError {
  constructor(code, message, opts) {
    super(code, message, opts);
    this.attempt = int(this.existing?.attempt);
    this.externalKey = str(this.existing?.external_key);
    this.leaseExpiresAt = str(this.existing?.lease_expires_at);
  }
}

/** outcome_unknown (not retryable): a lease lapsed without
 * effect_complete, so the effect may or may not have happened.  No time
 * turns it into proceed: settle it with effectResolve (evidence from the
 * downstream system, asked by externalKey). */
export class IdemOutcomeUnknown extends IdemError {
  constructor(code, message, opts) {
    super(code, message, opts);
    this.attempt = int(this.existing?.attempt);
    this.externalKey = str(this.existing?.external_key);
  }
}

/** The broker cannot serve it now; retryable with the same id:
 * storage_unavailable, shutting_down, too_many_connections (reason:
 * max_connections, max_connections_per_pid, max_connections_per_uid). */
export class IdemUnavailable extends IdemError {
  constructor(code, message, opts) {
    super(code, message, opts);
    const error = opts?.reply?.error;
    this.reason = error && typeof error.reason === 'string' ? error.reason : null;
  }
}

/** A limit was reached: table_full (in-flight work), sequence_exhausted
 * (the day's TASK numbers; not retryable that day). */
export class IdemExhausted extends IdemError {}

/** internal: the broker's own failure (retryable when it says so). */
export class IdemInternal extends IdemError {}

/** runEffect's fn threw this: it KNOWS the effect did not happen, so the
 * reservation is released (effect_complete not_applied) and the error
 * goes on to the caller.  Any other error from fn reports nothing. */
export class NotApplied extends Error {
  constructor(message = 'the effect was not applied', options) {
    super(message, options);
    this.name = 'NotApplied';
  }
}

/** The class of each wire error code (one table: SPEC.md's list). */
export const ERROR_CLASSES = Object.freeze({
  invalid_json: IdemRequestError,
  invalid_utf8: IdemRequestError,
  too_large: IdemRequestError,
  invalid_request: IdemRequestError,
  unknown_op: IdemRequestError,
  unsupported_schema: IdemRequestError,
  digest_disagrees: IdemRequestError,
  task_not_found: IdemNotFound,
  conflict: IdemConflict,
  sequence_exhausted: IdemExhausted,
  outcome_unknown: IdemOutcomeUnknown,
  table_full: IdemExhausted,
  storage_unavailable: IdemUnavailable,
  in_progress: IdemInProgress,
  shutting_down: IdemUnavailable,
  too_many_connections: IdemUnavailable,
  internal: IdemInternal,
});

function str(v) {
  return typeof v === 'string' ? v : null;
}

function int(v) {
  return Number.isInteger(v) ? v : null;
}

/** The error for a reply whose "ok" is false. */
export function errorFromReply(reply) {
  const error = reply.error;
  let code = error && typeof error.code === 'string' ? error.code : null;
  if (reply.disposition === 'conflict')
    code = 'conflict';
  if (code === null)
    return new IdemProtocolError('an error reply without an error code', reply);
  const Cls = Object.hasOwn(ERROR_CLASSES, code) ? ERROR_CLASSES[code] : IdemError;
  return new Cls(code, typeof error?.message === 'string' ? error.message : code, {
    field: typeof error?.field === 'string' ? error.field : null,
    retryable: error?.retryable === true,
    reply,
  });
}
