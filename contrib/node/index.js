// SPDX-License-Identifier: ISC
// idemd-client: the Node.js client of idemd, the broker that makes the
// side effects of agent processes idempotent: FCoP task creation
// (writeTask, writeReport) and any tool call (effects: runEffect).  No
// runtime dependencies; Node 18+; types in index.d.ts.  The wire protocol
// and the digest schemes are SPEC.md's (in the idem source tree).
//
//   lib/client.js   Client: one connection, every op, pipelined
//   lib/replies.js  the typed replies (receipts keep their raw text)
//   lib/errors.js   the error classes, one per family of codes
//   lib/digest.js   write-task-v1, generic-json-v1, fcop-create-task-v1, ids
//   lib/retry.js    writeTaskRetry, writeReportRetry
//   lib/effects.js  runEffect (begin, extend while fn runs, complete)

export {
  Client, defaultSocketPath, DEFAULT_ROOT, SOCKET_NAME, MAX_LINE_BYTES,
} from './lib/client.js';
export {
  IdemError, IdemTransportError, IdemProtocolError, IdemRequestError, IdemNotFound,
  IdemConflict, IdemInProgress, IdemOutcomeUnknown, IdemUnavailable, IdemExhausted,
  IdemInternal, NotApplied, ERROR_CLASSES, errorFromReply,
} from './lib/errors.js';
export {
  DIGEST_SCHEMA, EFFECT_DIGEST_SCHEMA, FCOP_DIGEST_SCHEMA, submissionIdNew, normalizeString,
  taskCanonical, taskDigest, effectCanonical, effectDigest, fcopTaskCanonical, fcopTaskDigest,
} from './lib/digest.js';
export {
  writeTaskRetry, writeReportRetry, RETRYABLE_CODES, RETRYABLE_WHEN_MARKED,
} from './lib/retry.js';
export { runEffect, DEFAULT_LEASE_MS } from './lib/effects.js';
export { rawMember } from './lib/replies.js';

/** The version of idem this client ships with (configure.ac's AC_INIT;
 * tests/node_client.sh checks that it and package.json's agree). */
export const VERSION = '0.1.0';
