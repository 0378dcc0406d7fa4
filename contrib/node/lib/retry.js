// SPDX-License-Identifier: ISC
// retry.js: retrying a submission under the id the caller chose, as
// the Python (idem.write_task_retry) and C (idem_write_task_retry)
// helpers do.  They take the client_submission_id and never make one: a
// retry under a new id would be a new intent, and could create twice.

import { setTimeout as sleep } from 'node:timers/promises';
import { Client, writeTaskDigest } from './client.js';
import { IdemConflict, IdemError, IdemTransportError } from './errors.js';

/** The codes a retry with the same id may get past whatever the
 * broker's "retryable" says (besides "transport"). */
export const RETRYABLE_CODES = Object.freeze(['in_progress', 'storage_unavailable',
  'shutting_down', 'too_many_connections']);
/** The codes retried only when the broker marks them retryable.  Every
 * other code never is (outcome_unknown, conflict, invalid_request ...):
 * a broker marking one retryable is not believed, as libidem and the
 * Python client do not believe it. */
export const RETRYABLE_WHEN_MARKED = Object.freeze(['internal', 'table_full']);

function worthRetrying(e) {
  return e instanceof IdemTransportError || RETRYABLE_CODES.includes(e.code)
    || (RETRYABLE_WHEN_MARKED.includes(e.code) && e.retryable);
}

function checkId(id, what) {
  if (typeof id !== 'string' || id.length === 0) {
    throw new TypeError(`${what} needs a clientSubmissionId: a call without one is not `
        + 'idempotent, and a retry must never make one up');
  }
  return id;
}

async function retrying(call, {
  socket, attempts = 8, baseDelayMs = 50, maxDelayMs = 5000, deadlineMs = null,
  timeoutMs = null, onRetry = null, signal,
} = {}) {
  if (!(attempts >= 1))
    throw new RangeError('attempts must be at least 1');
  const end = deadlineMs === null ? null : Date.now() + deadlineMs;
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    let t = timeoutMs;
    if (end !== null) {
      const left = Math.max(end - Date.now(), 1);
      t = t === null ? left : Math.min(t, left);
    }
    // A fresh connection each attempt: a broker restarted between two
    // attempts is met on its new socket.
    const client = new Client({ socket, timeoutMs: t });
    try {
      return await call(client, signal);
    } catch (e) {
      if (e instanceof IdemConflict || !(e instanceof IdemError))
        throw e;
      if (!worthRetrying(e))
        throw e;
      if (attempt >= attempts)
        throw e;
      // Full jitter: uniform in [0, min(max, base * 2^(n-1))).
      const delay = Math.random() * Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
      if (end !== null && Date.now() + delay >= end)
        throw e;
      onRetry?.(attempt, e, delay);
      await sleep(delay, undefined, { signal });
    } finally {
      client.close();
    }
  }
}

/** Create a task, surviving broker restarts and lost answers.  Each
 * attempt connects afresh and sends write_task with the SAME
 * clientSubmissionId and task, so however many attempts reach the broker
 * at most one task is created.  A transport failure or a retryable error
 * is retried after a full-jitter backoff (random in [0, min(maxDelayMs,
 * baseDelayMs * 2^(n-1))) ms after the n-th failure), at most attempts
 * attempts (8), never sleeping past deadlineMs from the call.
 *
 * Resolves to the final WriteResult: created or reused (recovered when
 * it finished a creation an earlier attempt or process interrupted).
 * Rejects with IdemConflict at once, any other IdemError at once when it
 * is not retryable, and the last error when attempts or time run out
 * (the outcome is then unknown: calling again with the same id is safe).
 * options: socket, attempts, baseDelayMs, maxDelayMs, deadlineMs,
 * timeoutMs (each attempt's), requestDigest (true: computed), meta,
 * digestSchema, workspaceId (as writeTask takes them),
 * onRetry(attempt, error, delayMs), signal. */
export function writeTaskRetry(task, clientSubmissionId, options = {}) {
  const sid = checkId(clientSubmissionId, 'writeTaskRetry');
  let { requestDigest } = options;
  const { meta, digestSchema, workspaceId } = options;
  if (requestDigest === true)
    requestDigest = writeTaskDigest(task, sid, digestSchema, workspaceId);
  return retrying((c, signal) => c.writeTask(task, sid,
      { requestDigest, meta, digestSchema, workspaceId, signal }), options);
}

/** writeReport with writeTaskRetry's retries: one REPORT however many
 * attempts reach the broker (deduplicated by task, id and content). */
export function writeReportRetry(taskId, report, clientSubmissionId, options = {}) {
  const sid = checkId(clientSubmissionId, 'writeReportRetry');
  const { meta } = options;
  return retrying((c, signal) => c.writeReport(taskId, report, sid, { meta, signal }),
      options);
}
