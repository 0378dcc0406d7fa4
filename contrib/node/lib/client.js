// SPDX-License-Identifier: ISC
// client.js: one connection to idemd and its ops (SPEC.md, "Wire
// protocol"): newline-delimited JSON over a Unix stream socket, one
// request line and one response line of at most 1 MiB with the newline,
// responses in request order, so requests are pipelined: every call
// writes its line at once, and a FIFO of pending calls takes the answers
// as they come.
//
// A lost connection (the broker restarted, a timeout) fails every call
// pending on it with IdemTransportError (their outcome is unknown) and
// the next call connects afresh: no answer of the old connection can be
// taken for a reply on the new one.

import net from 'node:net';
import path from 'node:path';
import {
  IdemError, IdemProtocolError, IdemRequestError, IdemTransportError, errorFromReply,
} from './errors.js';
import {
  DIGEST_SCHEMA, FCOP_DIGEST_SCHEMA, effectDigest, fcopTaskDigest, taskDigest,
} from './digest.js';
import {
  parseDiagnosis, parseEffectBegin, parseExtended, parseHello, parseLookup,
  parseReportResult, parseSettled, parseStats, parseWriteResult,
} from './replies.js';

/** A request or response line, newline included. */
export const MAX_LINE_BYTES = 1024 * 1024;
export const DEFAULT_ROOT = './fcop';
export const SOCKET_NAME = '.idem/idemd.sock';

const LONE_SURROGATE = /\p{Cs}/u;
// The connection a reply came on (not enumerable): a reply without what
// its op promises drops it.
const CONNECTION = Symbol('idem connection');

/** Whether a decoded JSON value holds U+0000 in a string or a name. */
function holdsNul(value) {
  const stack = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') {
      if (v.includes('\0'))
        return true;
    } else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        if (k.includes('\0'))
          return true;
        stack.push(x);
      }
    }
  }
  return false;
}
const NEWLINE = 0x0a;

// The codes of the errors idemd sends without an id on a connection it
// has read from: it could not read the request, so it has no id to echo
// (broker/request.c: not JSON, e.g. an integer past 64 bits; not UTF-8;
// not an object, a NUL in a member name or an id that is no scalar;
// broker/worker.c: a line over the limit).  too_many_connections, the
// other error without an id, comes only before the broker reads
// anything: never after an answer.
const UNREAD_CODES = new Set(['invalid_json', 'invalid_utf8', 'invalid_request', 'too_large']);

/** $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else
 * ./fcop/.idem/idemd.sock (empty variables count as unset), as the
 * Python and C clients choose. */
export function defaultSocketPath(env = process.env) {
  if (env.IDEM_SOCKET)
    return env.IDEM_SOCKET;
  return path.join(env.IDEM_ROOT || DEFAULT_ROOT, SOCKET_NAME);
}

const MAX_SAFE = 2 ** 53;

function refuse(code, where, what) {
  return new IdemRequestError(code, `${where || 'the request'} ${what}`,
      { field: where || null });
}

/** The request's JSON text, as JSON.stringify writes it (toJSON, members
 * that are undefined or functions left out, such elements null) except
 * where that would change or lose the value on the wire, which it
 * refuses instead, as the broker would: NaN and infinities (stringify
 * writes null), a lone surrogate (no UTF-8 form), a cycle.  A number
 * past 2**53 whose plain form is all digits is written in exponent form,
 * so that the broker reads the double it is (an integer literal past
 * 2**53 it refuses); a bigint is written as its digits (the broker
 * refuses it past 2**53). */
function encodeJson(v, where, seen) {
  if (v === null)
    return 'null';
  switch (typeof v) {
  case 'boolean':
    return String(v);
  case 'number': {
    if (!Number.isFinite(v))
      throw refuse('invalid_request', where, `is ${v}: JSON has no such number`);
    const text = String(v);
    return Math.abs(v) > MAX_SAFE && !text.includes('e') ? v.toExponential() : text;
  }
  case 'bigint':
    return String(v);
  case 'string':
    if (LONE_SURROGATE.test(v))
      throw refuse('invalid_utf8', where, 'holds a lone surrogate: it is not valid Unicode');
    return JSON.stringify(v);
  case 'object':
    break;
  default:
    return undefined;
  }
  if (typeof v.toJSON === 'function')
    return encodeJson(v.toJSON(), where, seen);
  if (seen.has(v))
    throw refuse('invalid_request', where, 'is cyclic');
  seen.add(v);
  let text;
  if (Array.isArray(v)) {
    text = '[' + Array.from(v, (x, i) =>
      encodeJson(x, `${where}${where ? '.' : ''}${i}`, seen) ?? 'null').join(',') + ']';
  } else {
    const parts = [];
    for (const [k, x] of Object.entries(v)) {
      const member = `${where}${where ? '.' : ''}${k}`;
      const value = encodeJson(x, member, seen);
      if (value === undefined)
        continue;
      parts.push(encodeJson(k, `${member} (its name)`, seen) + ':' + value);
    }
    text = '{' + parts.join(',') + '}';
  }
  seen.delete(v);
  return text;
}

/** The request_digest of a write_task under its schema (requestDigest:
 * true), or a TypeError when the client cannot compute it. */
export function writeTaskDigest(task, clientSubmissionId, digestSchema, workspaceId) {
  switch (digestSchema ?? DIGEST_SCHEMA) {
  case DIGEST_SCHEMA:
    return taskDigest(task);
  case FCOP_DIGEST_SCHEMA:
    if (workspaceId == null || clientSubmissionId == null) {
      throw new TypeError(`requestDigest: true under ${FCOP_DIGEST_SCHEMA} needs `
          + 'workspaceId and a clientSubmissionId');
    }
    return fcopTaskDigest(task, clientSubmissionId, workspaceId);
  default:
    throw new TypeError(`requestDigest: true: no digest of ${digestSchema} here`);
  }
}

/** One connection: the socket, the calls waiting for their answers in
 * request order, and the bytes of a partial response line. */
class Connection {
  constructor(sock) {
    this.sock = sock;
    this.pending = [];
    this.buf = Buffer.alloc(0);
    this.scanned = 0;
    this.lost = null;
    // An answer was taken: from then on an error without an id is a
    // line nobody asked for (only a connection's first answer, a
    // refusal sent before the broker reads, comes without one).
    this.answered = false;
  }
}

export class Client {
  #conn = null;
  #connecting = null;
  #closed = false;
  #nextId = 1;

  /** new Client({ socket, timeoutMs }): socket defaults to
   * defaultSocketPath(); timeoutMs (none by default) bounds the connect
   * and each answer; past it the connection is dropped and the call
   * fails with IdemTransportError.  A write_task may wait for an
   * identical call in flight (idemd --inflight-wait-ms, 10 s by
   * default): keep timeoutMs above it.  Connects on first use. */
  constructor({ socket, timeoutMs = null } = {}) {
    this.socket = socket ?? defaultSocketPath();
    this.timeoutMs = timeoutMs;
  }

  /** Close the connection; later calls throw IdemError "closed".  Calls
   * still waiting fail with IdemTransportError. */
  close() {
    this.#closed = true;
    if (this.#conn !== null)
      this.#lose(this.#conn, new IdemTransportError('the client was closed'));
  }

  get closed() {
    return this.#closed;
  }

  /** Whether a connection is open now (it opens on first use). */
  get connected() {
    return this.#conn !== null;
  }

  /** Connect now rather than on first use; rejects with
   * IdemTransportError when the broker cannot be reached. */
  async connect() {
    await this.#connect();
  }

  #lose(conn, error) {
    if (conn.lost !== null)
      return;
    conn.lost = error;
    if (this.#conn === conn)
      this.#conn = null;
    conn.sock.destroy();
    for (const entry of conn.pending.splice(0))
      entry.fail(error);
  }

  #connect() {
    if (this.#closed)
      return Promise.reject(new IdemError('closed', 'the client is closed'));
    if (this.#conn !== null)
      return Promise.resolve(this.#conn);
    if (this.#connecting !== null)
      return this.#connecting;
    this.#connecting = new Promise((resolve, reject) => {
      const sock = net.createConnection({ path: this.socket });
      let timer = null;
      const fail = (error) => {
        clearTimeout(timer);
        sock.destroy();
        reject(error);
      };
      sock.once('error', (e) => fail(new IdemTransportError(
          `connect ${this.socket}: ${e.code ?? e.message}`, e)));
      if (this.timeoutMs !== null) {
        timer = setTimeout(() => fail(new IdemTransportError(
            `connect ${this.socket}: no connection in ${this.timeoutMs} ms`)), this.timeoutMs);
      }
      sock.once('connect', () => {
        clearTimeout(timer);
        sock.removeAllListeners('error');
        if (this.#closed) {
          sock.destroy();
          reject(new IdemError('closed', 'the client is closed'));
          return;
        }
        const conn = new Connection(sock);
        sock.on('data', (chunk) => this.#received(conn, chunk));
        sock.on('error', (e) => this.#lose(conn, new IdemTransportError(
            `receive: ${e.code ?? e.message}`, e)));
        sock.on('close', () => this.#lose(conn, new IdemTransportError(
            'receive: the broker closed the connection')));
        sock.unref();
        this.#conn = conn;
        resolve(conn);
      });
    }).finally(() => {
      this.#connecting = null;
    });
    return this.#connecting;
  }

  #received(conn, chunk) {
    conn.buf = conn.buf.length === 0 ? chunk : Buffer.concat([conn.buf, chunk]);
    for (;;) {
      const nl = conn.buf.indexOf(NEWLINE, conn.scanned);
      if (nl === -1) {
        conn.scanned = conn.buf.length;
        if (conn.buf.length >= MAX_LINE_BYTES)
          this.#lose(conn, new IdemProtocolError(`a response line over ${MAX_LINE_BYTES} bytes`));
        return;
      }
      if (nl + 1 > MAX_LINE_BYTES) {
        this.#lose(conn, new IdemProtocolError(`a response line over ${MAX_LINE_BYTES} bytes`));
        return;
      }
      const bytes = conn.buf.subarray(0, nl);
      conn.buf = conn.buf.subarray(nl + 1);
      conn.scanned = 0;
      this.#answer(conn, bytes);
      if (conn.lost !== null)
        return;
    }
  }

  #answer(conn, bytes) {
    let line;
    let reply;
    try {
      line = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      reply = JSON.parse(line);
    } catch (e) {
      this.#lose(conn, new IdemProtocolError(`the response is not JSON: ${e.message}`));
      return;
    }
    if (reply === null || typeof reply !== 'object' || typeof reply.ok !== 'boolean') {
      this.#lose(conn, new IdemProtocolError('the response is not an object with a boolean ok'));
      return;
    }
    const entry = conn.pending.shift();
    if (entry === undefined) {
      this.#lose(conn, new IdemProtocolError('a response to no request', reply));
      return;
    }
    // A success must echo the request's id (every request here carries
    // one): without it, it could be the answer to an earlier request.
    // An error may come without one as the connection's first answer
    // (the broker refuses a connection, too_many_connections, before it
    // reads the request) or when the broker could not read the request
    // (UNREAD_CODES: invalid_json for an integer past 64 bits).  Any
    // other error without one after an answer is a stray refusal.
    let broken = null;
    const answered = conn.answered;
    conn.answered = true;
    if (Object.hasOwn(reply, 'id') ? reply.id !== entry.id
      : reply.ok === true || (answered && !UNREAD_CODES.has(reply.error?.code))) {
      broken = Object.hasOwn(reply, 'id')
        ? `the response answers request ${JSON.stringify(reply.id)}, not ${entry.id}`
        : reply.ok === true
          ? `a success without the request's id ${entry.id}`
          : `an error without the request's id ${entry.id} on a connection that has answered before`;
    } else if (line.includes('\\u0000') && holdsNul(reply)) {
      // SPEC.md allows no U+0000 in a request; the broker sends none,
      // and a C caller could not see past one.
      broken = 'the response holds U+0000 in a string';
    }
    if (broken !== null) {
      const error = new IdemProtocolError(broken, reply);
      entry.fail(error);
      this.#lose(conn, error);
      return;
    }
    Object.defineProperty(reply, 'raw', { value: line, enumerable: false });
    Object.defineProperty(reply, CONNECTION, { value: conn, enumerable: false });
    entry.done(reply);
    if (conn.pending.length === 0)
      conn.sock.unref();
    // The broker closes the connection after too_large: so do we.
    if (reply.ok === false && reply.error?.code === 'too_large')
      this.#lose(conn, new IdemTransportError('the broker closed the connection after too_large'));
  }

  #encode(request) {
    if (request === null || typeof request !== 'object' || typeof request.op !== 'string')
      throw new IdemRequestError('invalid_request', 'a request is an object with an op',
          { field: 'op' });
    if (!Object.hasOwn(request, 'id'))
      request = { ...request, id: this.#nextId++ };
    let line;
    try {
      line = encodeJson(request, '', new Set()) + '\n';
    } catch (e) {
      if (e instanceof IdemError)
        throw e;
      throw new IdemRequestError('invalid_request', `the request is not JSON: ${e.message}`);
    }
    const bytes = Buffer.byteLength(line, 'utf8');
    if (bytes > MAX_LINE_BYTES) {
      throw new IdemRequestError('too_large',
          `the request is ${bytes} bytes; a line is at most ${MAX_LINE_BYTES}, newline included`);
    }
    return { id: request.id, line };
  }

  /** Send one request (an object with "op"; an "id" is added unless it
   * has one) and resolve to the decoded reply whatever its "ok" (its
   * response line is reply.raw, not enumerable).  Rejects only with
   * IdemTransportError, IdemProtocolError, IdemRequestError (a request
   * refused before sending: too_large, invalid_utf8, invalid_request),
   * IdemError "closed", or signal.reason when options.signal aborts
   * (the request may still take effect at the broker; its answer is
   * then read and dropped). */
  async call(request, { signal } = {}) {
    signal?.throwIfAborted();
    const { id, line } = this.#encode(request);
    const conn = this.#conn ?? await this.#connect();
    signal?.throwIfAborted();
    if (conn.lost !== null)
      throw conn.lost;
    return new Promise((resolve, reject) => {
      let timer = null;
      const onAbort = () => {
        entry.settled = true;
        clearTimeout(timer);
        reject(signal.reason);
      };
      const entry = {
        id,
        settled: false,
        done(reply) {
          if (entry.settled)
            return;
          entry.settled = true;
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          resolve(reply);
        },
        fail(error) {
          if (entry.settled)
            return;
          entry.settled = true;
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
      };
      conn.pending.push(entry);
      conn.sock.ref();
      conn.sock.write(line);
      if (this.timeoutMs !== null) {
        timer = setTimeout(() => this.#lose(conn, new IdemTransportError(
            `no answer in ${this.timeoutMs} ms`)), this.timeoutMs);
      }
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Send every request at once, then resolve to their replies in order
   * (each as call() gives it). */
  pipeline(requests, options = {}) {
    return Promise.all(requests.map((r) => this.call(r, options)));
  }

  async #ok(request, parse, options) {
    const reply = await this.call(request, options);
    if (reply.ok !== true)
      throw errorFromReply(reply);
    try {
      return parse(reply, reply.raw, request);
    } catch (e) {
      // An answer without what its op promises: nothing more this
      // broker says on the connection is trusted.
      if (e instanceof IdemProtocolError)
        this.#lose(reply[CONNECTION], e);
      throw e;
    }
  }

  /** Who is there: server, version, protocol, digestSchemas, ops. */
  hello(options = {}) {
    return this.#ok({ op: 'hello' }, parseHello, options);
  }

  /** Create a task (SPEC.md, write_task).  task: sender, recipient,
   * subject and the optional fields; without clientSubmissionId the call
   * is legacy (a new task each time, idempotent false).
   * options.requestDigest: a digest for the broker to check (true:
   * taskDigest(task)); options.meta: free-form, never digested.  Resolves
   * to a WriteResult (created or reused); rejects with IdemConflict on a
   * conflict.  options.digestSchema: "write-task-v1" (the broker's
   * default) or "fcop-create-task-v1" (doc/protocol.md; its
   * requestDigest: true needs options.workspaceId, also sent for the
   * broker to check against the workspace's fcop.json). */
  writeTask(task, clientSubmissionId,
      { requestDigest, meta, digestSchema, workspaceId, signal } = {}) {
    const request = { op: 'write_task' };
    if (clientSubmissionId != null)
      request.client_submission_id = clientSubmissionId;
    if (digestSchema != null)
      request.digest_schema = digestSchema;
    if (workspaceId != null)
      request.workspace_id = workspaceId;
    if (requestDigest === true)
      requestDigest = writeTaskDigest(task, clientSubmissionId, digestSchema, workspaceId);
    if (requestDigest != null)
      request.request_digest = requestDigest;
    request.task = task;
    if (meta != null)
      request.meta = meta;
    return this.#ok(request, parseWriteResult, { signal });
  }

  /** Write a REPORT for taskId.  report: sender, and optionally
   * recipient, status, body.  Resolves to a ReportResult (deduplicated,
   * reportId, reportPath); rejects with IdemConflict (the id is bound to
   * other content), IdemNotFound (task_not_found). */
  writeReport(taskId, report, clientSubmissionId, { meta, signal } = {}) {
    const request = { op: 'write_report', task_id: taskId };
    if (clientSubmissionId != null)
      request.client_submission_id = clientSubmissionId;
    request.report = report;
    if (meta != null)
      request.meta = meta;
    return this.#ok(request, parseReportResult, { signal });
  }

  /** The record of an id (options.effectKind: among that kind's
   * effects): found, submission (state, receipt once committed).
   * Read-only. */
  getSubmission(clientSubmissionId, { effectKind, signal } = {}) {
    const request = { op: 'get_submission', client_submission_id: clientSubmissionId };
    if (effectKind != null)
      request.effect_kind = effectKind;
    return this.#ok(request, parseLookup, { signal });
  }

  /** The unfinished submissions and effects: entries, counts,
   * effectCounts.  Never changes anything. */
  diagnose({ staleAfterMs, signal } = {}) {
    const request = { op: 'diagnose' };
    if (staleAfterMs != null)
      request.stale_after_ms = staleAfterMs;
    return this.#ok(request, parseDiagnosis, { signal });
  }

  /** The broker's counters (every number of the reply). */
  stats({ signal } = {}) {
    return this.#ok({ op: 'stats' }, parseStats, { signal });
  }

  /** Ask before performing an effect.  Resolves to an EffectBegin whose
   * disposition is proceed (perform it now: attempt, fence, externalKey)
   * or reused (done already: receipt).  Rejects with IdemConflict (the
   * key is bound to another request), IdemInProgress (another caller's
   * live lease; retryable), IdemOutcomeUnknown (a lease lapsed: settle
   * it with effectResolve).  options.leaseMs: 100..86400000 (the
   * broker's default 30000); options.requestDigest: true computes
   * effectDigest for the broker to check. */
  effectBegin(clientSubmissionId, effectKind, request,
      { leaseMs, requestDigest, signal } = {}) {
    const req = {
      op: 'effect_begin', client_submission_id: clientSubmissionId,
      effect_kind: effectKind, request: request === undefined ? null : request,
    };
    if (requestDigest === true)
      requestDigest = effectDigest(effectKind, request ?? null);
    if (requestDigest != null)
      req.request_digest = requestDigest;
    if (leaseMs != null)
      req.lease_ms = leaseMs;
    return this.#ok(req, parseEffectBegin, { signal });
  }

  /** Report a proceeded effect: outcome "applied" commits result (JSON;
   * absent: null) in the receipt; "not_applied" releases the key (the
   * next begin proceeds, attempt + 1, same externalKey).  Rejects with
   * IdemConflict (stale_fence, no_reservation, already_committed). */
  effectComplete(clientSubmissionId, effectKind, fence, outcome = 'applied', result,
      { signal } = {}) {
    const req = {
      op: 'effect_complete', client_submission_id: clientSubmissionId,
      effect_kind: effectKind, fence, outcome,
    };
    if (outcome === 'applied')
      req.result = result === undefined ? null : result;
    else if (result !== undefined)
      req.result = result;
    return this.#ok(req, parseSettled, { signal });
  }

  /** Move the live lease's end to leaseMs from now (broker clock).
   * Rejects with IdemOutcomeUnknown when it already lapsed (not
   * extended; the holder's effectComplete is still accepted), and
   * IdemConflict (stale_fence, no_reservation, already_committed). */
  effectExtend(clientSubmissionId, effectKind, fence, leaseMs, { signal } = {}) {
    const req = {
      op: 'effect_extend', client_submission_id: clientSubmissionId,
      effect_kind: effectKind, fence, lease_ms: leaseMs,
    };
    return this.#ok(req, parseExtended, { signal });
  }

  /** Settle an outcome_unknown effect with evidence: observed "applied"
   * commits options.result (later begins: reused, recovered),
   * "not_applied" releases, "unknown" leaves it for diagnose.  Rejects
   * with IdemConflict (already_committed) when the evidence contradicts
   * a committed receipt. */
  effectResolve(clientSubmissionId, effectKind, observed, { result, source, signal } = {}) {
    const evidence = { observed };
    if (result !== undefined)
      evidence.result = result;
    if (source != null)
      evidence.source = source;
    return this.#ok({
      op: 'effect_resolve', client_submission_id: clientSubmissionId,
      effect_kind: effectKind, evidence,
    }, parseSettled, { signal });
  }
}
