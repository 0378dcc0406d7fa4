// SPDX-License-Identifier: ISC
// digest.js: submission ids and SPEC.md's two digest schemes, computed
// as the broker computes them, so that a caller may send request_digest
// for the broker to check, or know a key's digest without asking:
//
//   write-task-v1    a task's ten fields, defaults applied, strings
//                    normalized (CRLF/CR -> LF, then NFC), keys in byte
//                    order, JCS strings, SHA-256
//   generic-json-v1  {"kind": effect_kind, "request": request}, every
//                    string and member name normalized alike, JCS
//                    (members by UTF-16 code units, ECMAScript numbers)
//
// and the third that hello lists, fcop-create-task-v1 (FCoP 4.0's
// candidate, doc/protocol.md "Digest schemas").  The vectors in
// tests/vectors/*.json are the judges
// (tests/node/client.test.mjs checks these functions byte for byte).

import { createHash, randomBytes } from 'node:crypto';

export const DIGEST_SCHEMA = 'write-task-v1';
export const EFFECT_DIGEST_SCHEMA = 'generic-json-v1';

// generic-json-v1 refuses integers a double cannot hold exactly.
const MAX_SAFE_BIG = 2n ** 53n;

const TASK_REQUIRED = ['sender', 'recipient', 'subject'];
const TASK_DEFAULTS = {
  body: '', priority: 'P2', risk_level: 'low', thread_key: null,
  parent: null, references: [], depends_on: [],
};
const TASK_LISTS = new Set(['references', 'depends_on']);
const TASK_FIELDS = new Set([...TASK_REQUIRED, ...Object.keys(TASK_DEFAULTS)]);
const ESCAPES = {
  '"': '\\"', '\\': '\\\\', '\b': '\\b', '\t': '\\t', '\n': '\\n',
  '\f': '\\f', '\r': '\\r',
};
// With the u flag a paired surrogate is one code point: only a lone one
// matches, and a lone surrogate has no UTF-8 form.
const LONE_SURROGATE = /\p{Cs}/u;

/** A fresh random client_submission_id (URL-safe base64 of 128 bits)
 * after prefix.  Make it once per business intent and keep it for every
 * retry of that intent. */
export function submissionIdNew(prefix = '') {
  return prefix + randomBytes(16).toString('base64url');
}

/** CRLF and lone CR become LF, then NFC (not NFKC); no trimming. */
export function normalizeString(s) {
  if (LONE_SURROGATE.test(s))
    throw new TypeError('a string holds a lone surrogate: it is not valid Unicode');
  return s.replace(/\r\n?/g, '\n').normalize('NFC');
}

/** RFC 8785 (JCS) string: escape '"', '\\' and U+0000..U+001F only. */
function jsonString(s) {
  let out = '"';
  for (const ch of s) {
    const esc = ESCAPES[ch];
    if (esc !== undefined)
      out += esc;
    else if (ch < ' ')
      out += '\\u' + ch.charCodeAt(0).toString(16).padStart(4, '0');
    else
      out += ch;
  }
  return out + '"';
}

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** The write-task-v1 canonical bytes of task (a Buffer of UTF-8):
 * defaults applied (null or undefined for an optional field is its
 * default), strings normalized, the ten fields in byte order, no
 * whitespace.  Throws TypeError for a task the broker would refuse for
 * its shape: a missing required field, an unknown field, a wrong type,
 * a string that is not valid Unicode. */
export function taskCanonical(task) {
  if (!isPlainObject(task))
    throw new TypeError('task must be an object');
  for (const key of Object.keys(task)) {
    if (!TASK_FIELDS.has(key))
      throw new TypeError(`task has no field ${JSON.stringify(key)}`);
  }
  const fields = {};
  for (const key of TASK_FIELDS) {
    const v = task[key];
    if (v === null || v === undefined) {
      if (TASK_REQUIRED.includes(key))
        throw new TypeError(`task.${key} is required`);
      fields[key] = TASK_DEFAULTS[key];
    } else if (TASK_LISTS.has(key)) {
      if (!Array.isArray(v) || !v.every((x) => typeof x === 'string'))
        throw new TypeError(`task.${key} must be an array of strings`);
      fields[key] = v.map(normalizeString);
    } else if (typeof v === 'string') {
      fields[key] = normalizeString(v);
    } else {
      throw new TypeError(`task.${key} must be a string`);
    }
  }
  // The keys are ASCII: UTF-16 order is byte order.
  const keys = Object.keys(fields).sort();
  const parts = keys.map((k) => {
    const v = fields[k];
    let text;
    if (v === null)
      text = 'null';
    else if (typeof v === 'string')
      text = jsonString(v);
    else
      text = '[' + v.map(jsonString).join(',') + ']';
    return jsonString(k) + ':' + text;
  });
  return Buffer.from('{' + parts.join(',') + '}', 'utf8');
}

/** write-task-v1: the lower-case hex SHA-256 of taskCanonical(task), the
 * request_digest the broker computes for the same task. */
export function taskDigest(task) {
  return createHash('sha256').update(taskCanonical(task)).digest('hex');
}

// ---- fcop-create-task-v1 (doc/protocol.md, "Digest schemas") --------------

export const FCOP_DIGEST_SCHEMA = 'fcop-create-task-v1';
const FCOP_DEFAULTS = {
  body: '', priority: 'P2', parent: null, branch_of: null, references: [],
};
const FCOP_FIELDS = new Set([...TASK_REQUIRED, ...Object.keys(FCOP_DEFAULTS)]);

function jsonValue(v) {
  if (v === null)
    return 'null';
  if (typeof v === 'string')
    return jsonString(v);
  return '[' + v.map(jsonString).join(',') + ']';
}

/** The fcop-create-task-v1 canonical bytes (FCoP 4.0's candidate create
 * digest, as idem decides it: doc/protocol.md) of task under
 * operationId (the client_submission_id) in the workspace workspaceId
 * (its fcop.json's "urn:uuid:..."): defaults applied, strings
 * normalized, the body ending in exactly one LF, references
 * de-duplicated and sorted by code point, twelve members in byte order.
 * Throws TypeError for a task the broker refuses for its shape
 * (thread_key, risk_level and depends_on are not part of it). */
export function fcopTaskCanonical(task, operationId, workspaceId) {
  if (!isPlainObject(task))
    throw new TypeError('task must be an object');
  for (const key of Object.keys(task)) {
    if (!FCOP_FIELDS.has(key))
      throw new TypeError(`task has no field ${JSON.stringify(key)} under ${FCOP_DIGEST_SCHEMA}`);
  }
  if (typeof operationId !== 'string' || typeof workspaceId !== 'string')
    throw new TypeError('operationId and workspaceId must be strings');
  const fields = {
    contract: FCOP_DIGEST_SCHEMA,
    operation_id: normalizeString(operationId),
    operation_kind: 'create_task',
    workspace_id: normalizeString(workspaceId),
  };
  for (const key of FCOP_FIELDS) {
    const v = task[key];
    if (v === null || v === undefined) {
      if (TASK_REQUIRED.includes(key))
        throw new TypeError(`task.${key} is required`);
      fields[key] = FCOP_DEFAULTS[key];
    } else if (key === 'references') {
      if (!Array.isArray(v) || !v.every((x) => typeof x === 'string'))
        throw new TypeError('task.references must be an array of strings');
      // Code point order is the byte order of UTF-8 (not UTF-16's).
      fields[key] = [...new Set(v.map(normalizeString))]
        .sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
    } else if (typeof v === 'string') {
      fields[key] = normalizeString(v);
    } else {
      throw new TypeError(`task.${key} must be a string`);
    }
  }
  if (typeof fields.body === 'string')
    fields.body = fields.body.replace(/\n+$/, '') + '\n';
  const keys = Object.keys(fields).sort();
  return Buffer.from('{' + keys.map((k) => jsonString(k) + ':' + jsonValue(fields[k]))
    .join(',') + '}', 'utf8');
}

/** fcop-create-task-v1: the lower-case hex SHA-256 of fcopTaskCanonical. */
export function fcopTaskDigest(task, operationId, workspaceId) {
  return createHash('sha256').update(fcopTaskCanonical(task, operationId, workspaceId))
    .digest('hex');
}

/** A number as JCS writes it: ECMAScript's Number::toString (String()
 * is exactly that).  Every finite double has its form: a double is not
 * an integer literal, whatever its value (the client sends one past
 * 2**53 in exponent form, which the broker reads as this very double). */
function jcsNumber(v) {
  if (!Number.isFinite(v))
    throw new RangeError('generic-json-v1 has no NaN or infinity');
  return String(v);
}

function jcs(v, out, seen) {
  if (v === null) {
    out.push('null');
  } else if (v === true || v === false) {
    out.push(String(v));
  } else if (typeof v === 'number') {
    out.push(jcsNumber(v));
  } else if (typeof v === 'bigint') {
    // A bigint is an integer held exactly (as a parser that keeps
    // integer literals exact gives them): past 2**53 it is refused, as
    // the broker refuses such a literal.
    if (v > MAX_SAFE_BIG || v < -MAX_SAFE_BIG)
      throw new RangeError(`generic-json-v1: the integer ${v} is past 2**53`);
    out.push(String(v));
  } else if (typeof v === 'string') {
    out.push(jsonString(normalizeString(v)));
  } else if (Array.isArray(v)) {
    if (seen.has(v))
      throw new TypeError('generic-json-v1: a cyclic value');
    seen.add(v);
    out.push('[');
    v.forEach((x, i) => {
      if (i)
        out.push(',');
      // JSON.stringify writes holes and undefined in arrays as null.
      jcs(x === undefined || typeof x === 'function' ? null : x, out, seen);
    });
    out.push(']');
    seen.delete(v);
  } else if (typeof v === 'object') {
    if (seen.has(v))
      throw new TypeError('generic-json-v1: a cyclic value');
    if (typeof v.toJSON === 'function')
      return jcs(v.toJSON(), out, seen);
    seen.add(v);
    const members = new Map();
    for (const [name, x] of Object.entries(v)) {
      // JSON.stringify leaves these out of objects: so does the digest.
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol')
        continue;
      const key = normalizeString(name);
      if (members.has(key))
        throw new TypeError('generic-json-v1: two member names are equal after '
            + `normalization: ${JSON.stringify(key)}`);
      members.set(key, x);
    }
    // The default sort compares UTF-16 code units, as JCS orders names.
    const keys = [...members.keys()].sort();
    out.push('{');
    keys.forEach((key, i) => {
      if (i)
        out.push(',');
      out.push(jsonString(key), ':');
      jcs(members.get(key), out, seen);
    });
    out.push('}');
    seen.delete(v);
  } else {
    throw new TypeError(`generic-json-v1: a ${typeof v} is not a JSON value`);
  }
}

/** The generic-json-v1 canonical bytes (a Buffer of UTF-8) of
 * {"kind": effectKind, "request": request}.  Throws TypeError for names
 * equal after normalization, a lone surrogate or a non-JSON value, and
 * RangeError for non-finite numbers and bigints past 2**53: what the
 * broker answers invalid_request. */
export function effectCanonical(effectKind, request) {
  if (typeof effectKind !== 'string')
    throw new TypeError('effectKind must be a string');
  // {"kind":..,"request":..}: the two names are in order already.
  const out = ['{"kind":', jsonString(normalizeString(effectKind)), ',"request":'];
  jcs(request === undefined ? null : request, out, new Set());
  out.push('}');
  return Buffer.from(out.join(''), 'utf8');
}

/** generic-json-v1: the lower-case hex SHA-256 of effectCanonical, the
 * request_digest the broker computes for the same effect. */
export function effectDigest(effectKind, request) {
  return createHash('sha256').update(effectCanonical(effectKind, request)).digest('hex');
}
