// SPDX-License-Identifier: ISC
// replies.js: the broker's replies as typed objects (index.d.ts names
// their shapes), each keeping the decoded wire object as .reply.
//
// SPEC.md promises that a reused receipt is byte for byte the first
// call's.  JSON.parse forgets spacing, member order and number spelling,
// so receipts keep .raw: the receipt's exact text as the broker sent it,
// sliced out of the response line (rawMember) rather than re-serialised.

import { IdemProtocolError } from './errors.js';

const WS = new Set([' ', '\t', '\r', '\n']);

function skipWs(text, i) {
  while (i < text.length && WS.has(text[i]))
    i++;
  return i;
}

function skipString(text, i) {
  // text[i] is the opening quote.
  for (i++; i < text.length; i++) {
    if (text[i] === '\\')
      i++;
    else if (text[i] === '"')
      return i + 1;
  }
  return -1;
}

/** The index just past the JSON value that starts at text[i]. */
function skipValue(text, i) {
  const c = text[i];
  if (c === '"')
    return skipString(text, i);
  if (c === '{' || c === '[') {
    let depth = 0;
    while (i < text.length) {
      const d = text[i];
      if (d === '"') {
        i = skipString(text, i);
        if (i < 0)
          return -1;
        continue;
      }
      if (d === '{' || d === '[')
        depth++;
      else if (d === '}' || d === ']') {
        depth--;
        if (depth === 0)
          return i + 1;
      }
      i++;
    }
    return -1;
  }
  while (i < text.length && !WS.has(text[i]) && !',}]'.includes(text[i]))
    i++;
  return i;
}

/** [begin, end) of member key's value in the object at text[start], or
 * null.  The last member of that name wins, as for JSON.parse. */
function memberSpan(text, start, key) {
  let i = skipWs(text, start);
  if (text[i] !== '{')
    return null;
  let found = null;
  i = skipWs(text, i + 1);
  while (i < text.length && text[i] !== '}') {
    const nameEnd = skipString(text, i);
    if (nameEnd < 0)
      return null;
    const name = JSON.parse(text.slice(i, nameEnd));
    i = skipWs(text, nameEnd);
    if (text[i] !== ':')
      return null;
    const begin = skipWs(text, i + 1);
    const end = skipValue(text, begin);
    if (end < 0)
      return null;
    if (name === key)
      found = [begin, end];
    i = skipWs(text, end);
    if (text[i] === ',')
      i = skipWs(text, i + 1);
  }
  return found;
}

/** The exact text the broker sent for the member at path of the JSON
 * object text (e.g. rawMember(line, 'submission', 'receipt')), or null. */
export function rawMember(text, ...path) {
  let begin = 0;
  let end = text.length;
  for (const key of path) {
    const span = memberSpan(text, begin, key);
    if (span === null)
      return null;
    [begin, end] = span;
  }
  return text.slice(begin, end);
}

function str(v) {
  return typeof v === 'string' ? v : null;
}

function int(v) {
  return Number.isInteger(v) ? v : null;
}

function reqStr(data, key, what) {
  const v = data[key];
  if (typeof v !== 'string')
    throw new IdemProtocolError(`${what} without a string ${key}`, data);
  return v;
}

/** A key the answer names must be the request's (an answer about
 * another key is an answer to another request); required: it must
 * name it. */
function same(what, sent, answered, reply, required = false) {
  if ((answered === undefined || answered === null) && !required)
    return;
  if (answered !== sent) {
    throw new IdemProtocolError(
        `the answer's ${what} is ${JSON.stringify(answered)}, the request's ${JSON.stringify(sent)}`,
        reply);
  }
}

/** An effect answer's (or its receipt's) key against the request's. */
function sameEffect(data, request, reply) {
  if (object(data) === null || request == null)
    return;
  same('client_submission_id', request.client_submission_id, data.client_submission_id, reply);
  same('effect_kind', request.effect_kind, data.effect_kind, reply);
}

function object(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : null;
}

/** A write_task receipt. */
export function parseReceipt(data, raw) {
  return {
    clientSubmissionId: str(data.client_submission_id),
    taskId: reqStr(data, 'task_id', 'a receipt'),
    taskPath: reqStr(data, 'task_path', 'a receipt'),
    digestSchema: str(data.digest_schema),
    requestDigest: str(data.request_digest),
    fileDigest: str(data.file_digest),
    state: reqStr(data, 'state', 'a receipt'),
    createdAt: str(data.created_at),
    raw,
    data,
  };
}

/** An effect's receipt (effect_complete applied, reused, resolve). */
export function parseEffectReceipt(data, raw) {
  return {
    clientSubmissionId: str(data.client_submission_id),
    effectKind: str(data.effect_kind),
    digestSchema: str(data.digest_schema),
    requestDigest: str(data.request_digest),
    externalKey: str(data.external_key),
    attempt: int(data.attempt),
    result: Object.hasOwn(data, 'result') ? data.result : null,
    state: reqStr(data, 'state', 'an effect receipt'),
    committedAt: str(data.committed_at),
    raw,
    data,
  };
}

function receiptAt(reply, line, parse, ...path) {
  let obj = reply;
  for (const key of path)
    obj = object(obj)?.[key];
  if (object(obj) === null)
    return null;
  const raw = rawMember(line, ...path);
  if (raw === null)
    throw new IdemProtocolError(`a reply whose ${path.join('.')} cannot be read back`, reply);
  return parse(obj, raw);
}

export function parseHello(reply) {
  const ops = Array.isArray(reply.ops) ? reply.ops : null;
  return {
    server: reqStr(reply, 'server', 'a hello reply'),
    version: str(reply.version),
    protocol: int(reply.protocol),
    digestSchemas: Array.isArray(reply.digest_schemas) ? reply.digest_schemas : [],
    ops,
    pid: int(reply.pid),
    root: str(reply.root),
    serves: (op) => ops !== null && ops.includes(op),
    reply,
  };
}

export function parseWriteResult(reply, line, request) {
  const disposition = reqStr(reply, 'disposition', 'a write_task reply');
  if (disposition !== 'created' && disposition !== 'reused')
    throw new IdemProtocolError(`write_task answered ok with disposition ${disposition}`, reply);
  const receipt = receiptAt(reply, line, parseReceipt, 'receipt');
  if (receipt === null)
    throw new IdemProtocolError('a write_task reply without a receipt', reply);
  // A legacy call's receipt names no id.
  if (request?.client_submission_id != null) {
    same("receipt's client_submission_id", request.client_submission_id,
        receipt.data.client_submission_id, reply);
  }
  const currentPath = str(reply.current_path);
  return {
    disposition,
    created: disposition === 'created',
    reused: disposition === 'reused',
    actionTaken: reply.action_taken === true,
    idempotent: reply.idempotent === true,
    recovered: reply.recovered === true,
    receipt,
    currentPath,
    path: currentPath ?? receipt.taskPath,
    reply,
  };
}

export function parseReportResult(reply) {
  return {
    deduplicated: reply.deduplicated === true,
    reportId: reqStr(reply, 'report_id', 'a write_report reply'),
    reportPath: reqStr(reply, 'report_path', 'a write_report reply'),
    reply,
  };
}

export function parseLookup(reply, line, request) {
  const sub = object(reply.submission);
  let submission = null;
  if (reply.found === true && sub !== null) {
    if (request != null)
      same('client_submission_id', request.client_submission_id, sub.client_submission_id, reply, true);
    const isEffect = typeof sub.effect_kind === 'string';
    submission = {
      clientSubmissionId: str(sub.client_submission_id),
      effectKind: str(sub.effect_kind),
      state: reqStr(sub, 'state', 'a submission'),
      digestSchema: str(sub.digest_schema),
      requestDigest: str(sub.request_digest),
      taskId: str(sub.task_id),
      taskPath: str(sub.task_path),
      currentPath: str(sub.current_path),
      attempt: int(sub.attempt),
      externalKey: str(sub.external_key),
      reservedAt: str(sub.reserved_at),
      updatedAt: str(sub.updated_at),
      receipt: receiptAt(reply, line, isEffect ? parseEffectReceipt : parseReceipt,
          'submission', 'receipt'),
      data: sub,
    };
  }
  return { found: reply.found === true, submission, reply };
}

export function parseDiagnosis(reply) {
  return {
    entries: Array.isArray(reply.entries) ? reply.entries : [],
    counts: object(reply.counts) ?? {},
    effectCounts: object(reply.effect_counts),
    reply,
  };
}

export function parseStats(reply) {
  const counters = {};
  for (const [k, v] of Object.entries(reply)) {
    if (typeof v === 'number')
      counters[k] = v;
  }
  return Object.defineProperty(counters, 'reply', { value: reply, enumerable: false });
}

export function parseEffectBegin(reply, line, request) {
  sameEffect(reply, request, reply);
  sameEffect(reply.receipt, request, reply);
  const disposition = reqStr(reply, 'disposition', 'an effect_begin reply');
  const fence = typeof reply.fence === 'string' || Number.isInteger(reply.fence)
    ? reply.fence : null;
  const begin = {
    disposition,
    proceed: disposition === 'proceed',
    reused: disposition === 'reused',
    attempt: int(reply.attempt),
    fence,
    externalKey: str(reply.external_key),
    leaseMs: int(reply.lease_ms),
    leaseExpiresAt: str(reply.lease_expires_at),
    requestDigest: str(reply.request_digest),
    recovered: reply.recovered === true,
    receipt: receiptAt(reply, line, parseEffectReceipt, 'receipt'),
    reply,
  };
  if (begin.proceed && (fence === null || begin.externalKey === null))
    throw new IdemProtocolError('proceed without fence or external_key', reply);
  if (begin.proceed && !(begin.attempt >= 1))
    throw new IdemProtocolError('proceed without an attempt (an integer from 1)', reply);
  if (begin.reused && begin.receipt === null)
    throw new IdemProtocolError('reused without a receipt', reply);
  if (!begin.proceed && !begin.reused)
    throw new IdemProtocolError(`effect_begin answered ok with disposition ${disposition}`,
        reply);
  return begin;
}

export function parseSettled(reply, line, request) {
  sameEffect(reply, request, reply);
  sameEffect(reply.receipt, request, reply);
  const settled = {
    state: str(reply.state),
    receipt: receiptAt(reply, line, parseEffectReceipt, 'receipt'),
    reply,
  };
  // effect_complete or effect_resolve "applied" commits: its answer is
  // the receipt.
  const applied = request?.outcome === 'applied' || request?.evidence?.observed === 'applied';
  if (applied && settled.receipt === null)
    throw new IdemProtocolError('an effect applied without a receipt', reply);
  return settled;
}

export function parseExtended(reply) {
  return {
    leaseExpiresAt: str(reply.lease_expires_at),
    reply,
  };
}
