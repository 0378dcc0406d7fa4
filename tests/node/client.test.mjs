/* SPDX-License-Identifier: ISC */
// client.test.mjs: idemd-client (contrib/node) as a user gets it, the
// copy `npm install ./contrib/node` put into node_modules, against a real
// idemd.  Run by tests/node_client.sh under node's test runner, from a
// directory where 'idemd-client' resolves; IDEMD, IDEM_VECTORS and
// IDEM_FAULT_INJECTION come from make check.
//
// What it proves: the digests equal the shared vectors byte for byte
// and the broker agrees with them; every op of hello has its method;
// typed replies and one error class per family (code, retryable, a
// conflict's facts); pipelined calls on one connection; refusals before
// sending; reconnection after a restart; writeTaskRetry across a broker
// crash and restart gives exactly one TASK file; runEffect's proceed,
// reused, conflict, in_progress, outcome_unknown, NotApplied, a throwing
// fn and aborts; and, on a broker that serves effect_extend, a 300 ms
// lease kept alive through a 1 s effect.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { execFile } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import * as idem from 'idemd-client';
import { Broker, countFiles, tempDir } from './broker.mjs';

const {
  Client, IdemConflict, IdemError, IdemInProgress, IdemNotFound, IdemOutcomeUnknown,
  IdemRequestError, IdemTransportError, NotApplied, runEffect, writeTaskRetry,
} = idem;

const VECTORS = process.env.IDEM_VECTORS
    ?? path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'vectors');
const FAULTS = process.env.IDEM_FAULT_INJECTION === 'yes';
const TASK = { sender: 'PM', recipient: 'DEV', subject: 'Fix login' };

const tmp = tempDir('idem-node.');
let broker;
const clients = [];
let nth = 0;

function client(options = {}) {
  const c = new Client({ socket: broker.socket, timeoutMs: 60000, ...options });
  clients.push(c);
  return c;
}

/** A fresh key for each use, so the cases share one broker. */
function key(what) {
  return `node-${what}-${++nth}`;
}

before(async () => {
  broker = await new Broker(path.join(tmp, 'fcop')).start();
});

after(async () => {
  for (const c of clients)
    c.close();
  await broker.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function readVectors(name) {
  const doc = JSON.parse(fs.readFileSync(path.join(VECTORS, name), 'utf8'));
  assert.ok(doc.vectors.length > 0, `${name} holds vectors`);
  return doc;
}

// JSON.parse rounds integers past 2**53 and keeps the last of two equal
// names, so the generic-json-v1 vectors (which refuse both) are read
// with this parser: integers exact (bigint past the safe range), a
// repeated name an error.
function parseExact(text) {
  let i = 0;
  const ws = () => {
    while (' \t\r\n'.includes(text[i]) && i < text.length)
      i++;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = {};
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        const name = value();
        ws();
        assert.equal(text[i++], ':');
        if (Object.hasOwn(obj, name))
          throw new SyntaxError(`duplicate name ${name}`);
        obj[name] = value();
        ws();
        if (text[i++] === '}')
          return obj;
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value());
        ws();
        if (text[i++] === ']')
          return arr;
      }
    }
    const m = /^(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)/
        .exec(text.slice(i));
    assert.ok(m, `JSON at ${i}`);
    i += m[0].length;
    const tok = m[0];
    if (/^-?\d+$/.test(tok) && !Number.isSafeInteger(Number(tok)))
      return BigInt(tok);
    return JSON.parse(tok);
  };
  const v = value();
  ws();
  assert.equal(i, text.length);
  return v;
}

// ---- digests ----------------------------------------------------------------

test('write-task-v1: every vector, byte for byte', () => {
  for (const name of ['write-task-v1.json', 'write-task-v1-fcop.json']) {
    const doc = readVectors(name);
    assert.equal(doc.schema, idem.DIGEST_SCHEMA);
    for (const v of doc.vectors) {
      assert.deepEqual(idem.taskCanonical(v.task), Buffer.from(v.canonical, 'utf8'),
          `${name} ${v.name}: canonical bytes`);
      assert.equal(idem.taskDigest(v.task), v.request_digest, `${name} ${v.name}: digest`);
    }
  }
});

test('fcop-create-task-v1: every vector, byte for byte', () => {
  const doc = readVectors('fcop-create-task-v1.json');
  assert.equal(doc.schema, idem.FCOP_DIGEST_SCHEMA);
  for (const v of doc.vectors) {
    assert.deepEqual(idem.fcopTaskCanonical(v.task, v.operation_id, v.workspace_id),
        Buffer.from(v.canonical, 'utf8'), `${v.name}: canonical bytes`);
    assert.equal(idem.fcopTaskDigest(v.task, v.operation_id, v.workspace_id),
        v.request_digest, `${v.name}: digest`);
  }
  for (const field of ['thread_key', 'risk_level', 'depends_on'])
    assert.throws(() => idem.fcopTaskCanonical({ ...TASK, [field]: 'x' }, 'op-1', 'w'), TypeError);
});

test('the tasks of every vector file, every file of tests/vectors/ read', () => {
  const files = fs.readdirSync(VECTORS).filter((f) => f.endsWith('.json')).sort();
  assert.deepEqual(files, ['fcop-create-task-v1.json', 'generic-json-v1.json',
    'write-task-v1-fcop.json', 'write-task-v1.json'], 'a new vector file needs its test here');
});

test('generic-json-v1: every vector, byte for byte, and its refusals', () => {
  const doc = readVectors('generic-json-v1.json');
  assert.equal(doc.schema, idem.EFFECT_DIGEST_SCHEMA);
  let refused = 0;
  for (const v of doc.vectors) {
    const request = parseExact(v.request_json);
    if (v.error) {
      assert.throws(() => idem.effectCanonical(v.effect_kind, request),
          /normalization|2\*\*53/, `${v.name}: refused (${v.error})`);
      refused++;
      continue;
    }
    assert.deepEqual(idem.effectCanonical(v.effect_kind, request),
        Buffer.from(v.canonical, 'utf8'), `${v.name}: canonical bytes`);
    assert.equal(idem.effectDigest(v.effect_kind, request), v.request_digest,
        `${v.name}: digest`);
  }
  assert.ok(refused > 0, 'the vectors include refusals');
});

test('generic-json-v1: numbers as the wire carries them, refusals', () => {
  assert.equal(idem.effectCanonical('k/v1', [1.0, -0, 1e21, 1e-7, 0.000001]).toString(),
      '{"kind":"k/v1","request":[1,0,1e+21,1e-7,0.000001]}');
  // A double is a double whatever its value: JCS's form, exactly.
  assert.equal(idem.effectCanonical('k/v1', [2 ** 53 + 2, 1e20]).toString(),
      '{"kind":"k/v1","request":[9007199254740994,100000000000000000000]}');
  // A bigint is an exact integer: refused past 2**53, as the broker does.
  assert.equal(idem.effectCanonical('k/v1', 2n ** 53n).toString(),
      '{"kind":"k/v1","request":9007199254740992}');
  for (const bad of [NaN, Infinity, 2n ** 53n + 1n, -(2n ** 53n) - 1n,
    { ['a\r\nb']: 1, ['a\nb']: 2 }, '\ud800', () => 1, Symbol('s')])
    assert.throws(() => idem.effectCanonical('k/v1', bad), `${String(bad)} refused`);
  // undefined members are left out, as JSON.stringify leaves them out.
  assert.equal(idem.effectDigest('k/v1', { a: 1, b: undefined }),
      idem.effectDigest('k/v1', { a: 1 }));
});

test('the broker agrees with the digests it is sent', async () => {
  const c = client();
  for (const v of readVectors('write-task-v1.json').vectors) {
    const r = await c.writeTask(v.task, key('vec'), { requestDigest: true });
    assert.equal(r.receipt.requestDigest, v.request_digest, v.name);
  }
  for (const v of readVectors('generic-json-v1.json').vectors) {
    if (v.error)
      continue;
    const b = await c.effectBegin(key('gvec'), v.effect_kind, JSON.parse(v.request_json),
        { requestDigest: true });
    assert.equal(b.requestDigest, v.request_digest, v.name);
  }
  // fcop-create-task-v1, in the workspace each vector names (the broker
  // reads ROOT/fcop.json at each such call).
  for (const v of readVectors('fcop-create-task-v1.json').vectors) {
    fs.writeFileSync(path.join(broker.root, 'fcop.json'), JSON.stringify({
      protocol: 'fcop', protocol_version: '4.0', workspace_id: v.workspace_id,
      encoding: { name: 'fcop-filesystem', version: '4.0' }, profiles: [] }) + '\n');
    const r = await writeTaskRetry(v.task, v.operation_id, { socket: broker.socket,
      digestSchema: idem.FCOP_DIGEST_SCHEMA, workspaceId: v.workspace_id, requestDigest: true });
    assert.equal(r.disposition, 'created', v.name);
    assert.equal(r.receipt.digestSchema, 'fcop-create-task-v1', v.name);
    assert.equal(r.receipt.requestDigest, v.request_digest, v.name);
  }
  fs.rmSync(path.join(broker.root, 'fcop.json'));
  // Doubles past 2**53 reach the broker as the doubles they are.
  for (const request of [2 ** 53 + 2, [1e20, -(2 ** 60)], { big: 123456789012345680000 }]) {
    const b = await c.effectBegin(key('big'), 'n/v1', request, { requestDigest: true });
    assert.equal(b.requestDigest, idem.effectDigest('n/v1', request));
  }
  await assert.rejects(c.effectBegin(key('big'), 'n/v1', 2n ** 53n + 1n),
      (e) => e instanceof IdemRequestError && e.code === 'invalid_request');
  await assert.rejects(c.writeTask(TASK, key('bad'), { requestDigest: '0'.repeat(64) }),
      (e) => e instanceof IdemRequestError && e.code === 'digest_disagrees' && !e.retryable);
});

test('index.d.ts declares every export, and only those', async () => {
  const pkg = createRequire(import.meta.url).resolve('idemd-client/package.json');
  const dts = fs.readFileSync(path.join(path.dirname(pkg), 'index.d.ts'), 'utf8');
  const declared = new Set([...dts.matchAll(
      /^export (?:const|function|class) ([A-Za-z_]\w*)/gm)].map((m) => m[1]));
  assert.deepEqual([...declared].sort(), Object.keys(idem).sort());
});

// ---- ops --------------------------------------------------------------------

const camel = (op) => op.replace(/_([a-z])/g, (_, ch) => ch.toUpperCase());

test('hello, and a method for every op the broker serves', async () => {
  const h = await client().hello();
  assert.equal(h.server, 'idemd');
  assert.equal(h.protocol, 1);
  assert.ok(h.digestSchemas.includes('write-task-v1'));
  assert.ok(h.digestSchemas.includes('generic-json-v1'));
  assert.ok(h.ops.length >= 9);
  for (const op of h.ops)
    assert.equal(typeof Client.prototype[camel(op)], 'function', `Client#${camel(op)}`);
  // SPEC.md's op list, whether or not this broker serves it yet.
  for (const op of ['hello', 'write_task', 'write_report', 'get_submission', 'diagnose',
    'stats', 'effect_begin', 'effect_complete', 'effect_extend', 'effect_resolve'])
    assert.equal(typeof Client.prototype[camel(op)], 'function', `Client#${camel(op)}`);
  assert.equal(h.serves('write_task'), true);
  assert.equal(h.serves('no_such_op'), false);
});

test('writeTask: created, reused byte for byte, legacy, conflict, refusals', async () => {
  const c = client();
  const sid = key('task');
  const before = countFiles(broker.root, 'TASK');
  const first = await c.writeTask({ ...TASK, body: 'a\r\nb' }, sid, { meta: { retry: 0 } });
  assert.equal(first.disposition, 'created');
  assert.ok(first.created && first.actionTaken && first.idempotent && !first.recovered);
  assert.match(first.receipt.taskId, /^TASK-\d{8}-\d{3}-PM-to-DEV$/);
  assert.equal(first.receipt.taskPath, `_lifecycle/inbox/${first.receipt.taskId}.md`);
  assert.equal(first.path, first.receipt.taskPath);
  assert.equal(first.receipt.requestDigest, idem.taskDigest({ ...TASK, body: 'a\nb' }));
  assert.ok(fs.existsSync(path.join(broker.root, first.receipt.taskPath)));

  const again = await c.writeTask({ ...TASK, body: 'a\nb' }, sid, { meta: { retry: 1 } });
  assert.equal(again.disposition, 'reused');
  assert.ok(again.reused && !again.actionTaken);
  assert.equal(again.receipt.raw, first.receipt.raw, 'the first receipt, byte for byte');
  assert.equal(countFiles(broker.root, 'TASK'), before + 1);

  const legacy = await c.writeTask(TASK);
  assert.equal(legacy.idempotent, false);
  assert.equal(legacy.receipt.clientSubmissionId, null);
  assert.equal(countFiles(broker.root, 'TASK'), before + 2);

  await assert.rejects(c.writeTask({ ...TASK, subject: 'Other' }, sid), (e) => {
    assert.ok(e instanceof IdemConflict && e instanceof IdemError);
    assert.equal(e.code, 'conflict');
    assert.equal(e.reason, 'digest_mismatch');
    assert.equal(e.retryable, false);
    assert.equal(e.bound.taskId, first.receipt.taskId);
    assert.equal(e.bound.requestDigest, first.receipt.requestDigest);
    assert.equal(e.bound.state, 'committed');
    return true;
  });
  await assert.rejects(c.writeTask({ sender: 'PM', recipient: 'DEV' }, key('bad')), (e) =>
    e instanceof IdemRequestError && e.code === 'invalid_request'
        && e.field === 'task.subject' && !e.retryable);
  await assert.rejects(c.writeTask({ ...TASK, priority: 'P9' }, key('bad')),
      (e) => e instanceof IdemRequestError && e.field === 'task.priority');
  assert.equal(countFiles(broker.root, 'TASK'), before + 2, 'no task from a refusal');
});

test('writeReport: written, deduplicated, conflict, task_not_found', async () => {
  const c = client();
  const task = await c.writeTask(TASK, key('rtask'));
  const sid = key('report');
  const before = countFiles(broker.root, 'REPORT');
  const r = await c.writeReport(task.receipt.taskId, { sender: 'DEV', body: 'done' }, sid);
  assert.equal(r.deduplicated, false);
  assert.match(r.reportId, /^REPORT-\d{8}-\d{3}-DEV-to-PM$/);
  assert.equal(r.reportPath, `reports/${r.reportId}.md`);
  const again = await c.writeReport(task.receipt.taskId, { sender: 'DEV', body: 'done' }, sid);
  assert.equal(again.deduplicated, true);
  assert.equal(again.reportId, r.reportId);
  await assert.rejects(c.writeReport(task.receipt.taskId, { sender: 'DEV', body: 'other' }, sid),
      (e) => e instanceof IdemConflict && e.code === 'conflict');
  await assert.rejects(c.writeReport('TASK-20000101-001-PM-to-DEV', { sender: 'DEV' }, key('r')),
      (e) => e instanceof IdemNotFound && e.code === 'task_not_found');
  assert.equal(countFiles(broker.root, 'REPORT'), before + 1);
});

test('getSubmission, diagnose, stats', async () => {
  const c = client();
  const sid = key('get');
  const w = await c.writeTask(TASK, sid);
  const got = await c.getSubmission(sid);
  assert.equal(got.found, true);
  assert.equal(got.submission.state, 'committed');
  assert.equal(got.submission.taskId, w.receipt.taskId);
  assert.equal(got.submission.receipt.raw, w.receipt.raw);
  const none = await c.getSubmission(key('none'));
  assert.equal(none.found, false);
  assert.equal(none.submission, null);

  const ekey = key('geteff');
  const out = await runEffect(c, 'get/v1', ekey, { n: 1 }, () => ({ sent: true }));
  const eff = await c.getSubmission(ekey, { effectKind: 'get/v1' });
  assert.equal(eff.submission.effectKind, 'get/v1');
  assert.deepEqual(eff.submission.receipt.result, out);
  assert.equal((await c.getSubmission(ekey)).found, false, 'not among the tasks');

  const d = await c.diagnose({ staleAfterMs: 1000 });
  assert.ok(Array.isArray(d.entries));
  assert.equal(typeof d.counts.committed, 'number');
  const s = await c.stats();
  for (const counter of ['created', 'reused', 'conflict', 'legacy_created', 'errors',
    'journal_records', 'journal_fsyncs', 'table_used', 'table_capacity', 'history_entries',
    'workers', 'worker_restarts', 'uptime_ms'])
    assert.equal(typeof s[counter], 'number', counter);
  assert.ok(s.created >= 1);
  assert.equal(s.reply.ok, true);
});

test("one error class per family, for exactly SPEC.md's error codes", () => {
  // The codes as SPEC.md lists them ("Error codes: `invalid_json`, ...").
  const spec = fs.readFileSync(path.join(VECTORS, 'SPEC.md'), 'utf8');
  const para = /^Error codes: ([^]*?)\. No string/m.exec(spec);
  assert.ok(para, "SPEC.md's list of error codes");
  // Besides the codes it names the members `field` and `reason` and
  // too_many_connections' reasons.
  const codes = [...para[1].matchAll(/`([a-z0-9_]+)`/g)].map((m) => m[1])
    .filter((c) => !['field', 'reason'].includes(c) && !c.startsWith('max_connections'));
  assert.deepEqual(Object.keys(idem.ERROR_CLASSES).sort(), [...new Set(codes)].sort());
  const family = {
    IdemRequestError: ['invalid_json', 'invalid_utf8', 'too_large', 'invalid_request',
      'unknown_op', 'unsupported_schema', 'digest_disagrees'],
    IdemNotFound: ['task_not_found'],
    IdemConflict: ['conflict'],
    IdemInProgress: ['in_progress'],
    IdemOutcomeUnknown: ['outcome_unknown'],
    IdemUnavailable: ['storage_unavailable', 'shutting_down', 'too_many_connections'],
    IdemExhausted: ['table_full', 'sequence_exhausted'],
    IdemInternal: ['internal'],
  };
  for (const [cls, members] of Object.entries(family)) {
    for (const code of members) {
      const retryable = ['in_progress', 'storage_unavailable', 'shutting_down',
        'too_many_connections'].includes(code);
      const e = idem.errorFromReply({ ok: false, error: { code, message: 'm', retryable,
        reason: code === 'too_many_connections' ? 'max_connections_per_pid' : undefined } });
      assert.ok(e instanceof idem[cls] && e instanceof IdemError, `${code}: ${cls}`);
      assert.equal(e.code, code);
      assert.equal(e.retryable, retryable);
      assert.equal(e.name, cls);
    }
  }
  assert.equal(idem.errorFromReply({ ok: false, error: { code: 'too_many_connections',
    reason: 'max_connections' } }).reason, 'max_connections');
  // A code of a later broker: still an IdemError with its code.
  const later = idem.errorFromReply({ ok: false, error: { code: 'new_code', retryable: true } });
  assert.equal(later.constructor, IdemError);
  assert.equal(later.retryable, true);
});

// ---- the connection ---------------------------------------------------------

test('pipelined calls on one connection come back each to its caller', async () => {
  const c = client();
  const n = 40;
  const sids = Array.from({ length: n }, () => key('pipe'));
  const results = await Promise.all(sids.map((sid, i) =>
    c.writeTask({ ...TASK, subject: `pipe ${i}` }, sid)));
  results.forEach((r, i) => {
    assert.equal(r.receipt.clientSubmissionId, sids[i]);
    assert.equal(r.disposition, 'created');
  });
  assert.equal(new Set(results.map((r) => r.receipt.taskId)).size, n);
  // Mixed ops, answered in order, each id echoed.
  const replies = await c.pipeline([{ op: 'hello' }, { op: 'stats' }, { op: 'nope' },
    { op: 'get_submission', client_submission_id: sids[0] }]);
  assert.equal(replies[0].server, 'idemd');
  assert.equal(typeof replies[1].created, 'number');
  assert.equal(replies[2].ok, false);
  assert.equal(replies[2].error.code, 'unknown_op');
  assert.equal(replies[3].submission.client_submission_id, sids[0]);
  assert.ok(replies[3].raw.startsWith('{'));
  const ids = replies.map((r) => r.id);
  assert.equal(new Set(ids).size, 4);
  // An error reply did not break the connection.
  assert.equal((await c.hello()).server, 'idemd');
});

test('refusals before sending: too large, not Unicode, not JSON', async () => {
  const c = client();
  const before = (await c.stats()).errors;
  await assert.rejects(c.writeTask({ ...TASK, body: 'x'.repeat(idem.MAX_LINE_BYTES) }, key('big')),
      (e) => e instanceof IdemRequestError && e.code === 'too_large');
  await assert.rejects(c.writeTask({ ...TASK, subject: 'a\ud800' }, key('sur')),
      (e) => e instanceof IdemRequestError && e.code === 'invalid_utf8');
  await assert.rejects(c.effectBegin(key('nan'), 'n/v1', { x: NaN }),
      (e) => e instanceof IdemRequestError && e.code === 'invalid_request');
  assert.equal((await c.stats()).errors, before, 'nothing reached the broker');
});

test('a request idemd cannot read: its error without an id is the answer', async () => {
  // An integer past 64 bits (a bigint is written as its digits): idemd
  // cannot read the request, so its invalid_json comes without an id
  // (broker/request.c).  After an answer on the connection it is still
  // this call's answer, not a stray line, and the connection stays open.
  const c = client();
  await c.hello();
  await assert.rejects(c.writeTask(TASK, key('bigint'), { meta: { n: 10n ** 30n } }),
      (e) => e instanceof IdemRequestError && e.code === 'invalid_json'
        && !Object.hasOwn(e.reply, 'id'));
  assert.equal(c.connected, true, 'the connection was dropped');
  assert.equal((await c.hello()).server, 'idemd');
});

test('transport errors, reconnection after a restart, close, abort', async () => {
  const missing = new Client({ socket: path.join(tmp, 'no.sock') });
  await assert.rejects(missing.hello(), (e) =>
    e instanceof IdemTransportError && e.code === 'transport' && e.retryable);

  const c = client();
  const sid = key('restart');
  const first = await c.writeTask(TASK, sid);
  assert.equal(c.connected, true);
  await broker.stop();
  await assert.rejects(c.hello(), (e) => e instanceof IdemTransportError);
  await broker.start();
  const again = await c.writeTask(TASK, sid);
  assert.equal(again.disposition, 'reused');
  assert.equal(again.receipt.raw, first.receipt.raw, 'the receipt survives the restart');

  const ac = new AbortController();
  ac.abort();
  await assert.rejects(c.hello({ signal: ac.signal }), { name: 'AbortError' });
  assert.equal((await c.hello()).server, 'idemd', 'the connection is still good');

  c.close();
  assert.equal(c.closed, true);
  await assert.rejects(c.hello(), (e) => e instanceof IdemError && e.code === 'closed');
});

/** A stand-in broker on its own socket that answers each request line
 * with answer(request, socket) (a string to write, or nothing). */
async function fakeBroker(answer) {
  const sock = path.join(tmp, `fake-${++nth}.sock`);
  const server = net.createServer((conn) => {
    let buf = '';
    conn.on('data', (chunk) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        const req = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        const out = answer(req, conn);
        if (typeof out === 'string')
          conn.write(out);
      }
    });
    conn.on('error', () => {});
  });
  await new Promise((resolve) => server.listen(sock, resolve));
  return { sock, close: () => new Promise((resolve) => server.close(resolve)) };
}

test('answers that break the protocol, lost connections, timeouts', async () => {
  const ok = (req) => JSON.stringify({ ok: true, id: req.id, server: 'fake' }) + '\n';
  const cases = [
    ['not JSON', () => 'not json\n', /not JSON/],
    ['not an object with ok', () => '[1]\n', /boolean ok/],
    ['another request\'s answer', (req) => JSON.stringify({ ok: true, id: req.id + 100 })
        + '\n', /answers request/],
    ['a line over 1 MiB', () => '"' + 'x'.repeat(idem.MAX_LINE_BYTES), /over 1048576 bytes/],
    ['not UTF-8', () => Buffer.from([0x7b, 0xff, 0x7d, 0x0a]).toString('latin1'), /not JSON/],
  ];
  for (const [what, answer, message] of cases) {
    const fake = await fakeBroker((req, conn) => {
      if (what === 'not UTF-8') {
        conn.write(Buffer.from([0x7b, 0xff, 0x7d, 0x0a]));
        return undefined;
      }
      return answer(req);
    });
    const c = new Client({ socket: fake.sock });
    await assert.rejects(c.hello(), (e) => {
      assert.ok(e instanceof idem.IdemProtocolError, `${what}: ${e}`);
      assert.equal(e.code, 'protocol');
      assert.equal(e.retryable, false);
      assert.match(e.message, message);
      return true;
    });
    assert.equal(c.connected, false, `${what}: the connection is dropped`);
    c.close();
    await fake.close();
  }

  // A connection lost with calls pending fails them all (outcome
  // unknown); the next call connects afresh.
  let conns = 0;
  const fake = await fakeBroker((req, conn) => {
    if (req.op === 'stats' && conns++ === 0) {
      conn.destroy();
      return undefined;
    }
    return req.op === 'hang' ? undefined : ok(req);
  });
  const c = new Client({ socket: fake.sock });
  const pending = [c.call({ op: 'hang' }), c.call({ op: 'hang' }), c.call({ op: 'stats' })];
  for (const p of pending)
    await assert.rejects(p, (e) => e instanceof IdemTransportError && e.retryable);
  assert.equal((await c.hello()).server, 'fake', 'reconnected');
  c.close();

  // timeoutMs: no answer in time is a transport error, the connection dropped.
  const slow = new Client({ socket: fake.sock, timeoutMs: 100 });
  await assert.rejects(slow.call({ op: 'hang' }), (e) =>
    e instanceof IdemTransportError && /no answer in 100 ms/.test(e.message));
  assert.equal(slow.connected, false);
  assert.equal((await slow.hello()).server, 'fake');
  slow.close();
  await fake.close();
});

test('runEffect against a broker without effect_extend: it stops extending, and completes',
    async () => {
  const ops = [];
  const fake = await fakeBroker((req) => {
    ops.push(req.op);
    const reply = {
      effect_begin: { ok: true, disposition: 'proceed', attempt: 1, fence: '1-f',
        external_key: 'idem-k', lease_ms: 300 },
      effect_extend: { ok: false, error: { code: 'unknown_op', message: 'unknown op',
        field: 'op', retryable: false } },
      effect_complete: { ok: true, state: 'committed', receipt: { state: 'committed',
        result: req.result } },
    }[req.op];
    return JSON.stringify({ ...reply, id: req.id }) + '\n';
  });
  const c = new Client({ socket: fake.sock });
  const result = await runEffect(c, 'k/v1', 'old', 1, () => sleep(400).then(() => 'done'),
      { leaseMs: 300 });
  assert.equal(result, 'done');
  assert.deepEqual(ops, ['effect_begin', 'effect_extend', 'effect_complete'],
      'one extension tried, then none');
  c.close();
  await fake.close();
});

// ---- writeTaskRetry -----------------------------------------------------------

test('writeTaskRetry across a broker restart creates one task', async () => {
  const sid = key('retry');
  const task = { ...TASK, subject: 'once, across a restart' };
  const before = countFiles(broker.root, 'TASK');
  const retries = [];
  let twice;
  const failedTwice = new Promise((resolve) => {
    twice = resolve;
  });
  const onRetry = (attempt, e) => {
    retries.push(e.code);
    if (retries.length === 2)
      twice();
  };
  await broker.stop();
  // The broker is down when the call starts: it retries until one is up.
  const call = writeTaskRetry(task, sid, {
    socket: broker.socket, attempts: 200, baseDelayMs: 20, maxDelayMs: 100, onRetry,
  });
  await failedTwice;
  await broker.start();
  const r = await call;
  assert.equal(r.disposition, 'created');
  assert.ok(retries.every((code) => code === 'transport'), retries.join());
  // A second call under the same id: the same task.
  const again = await writeTaskRetry(task, sid, { socket: broker.socket });
  assert.equal(again.disposition, 'reused');
  assert.equal(again.receipt.raw, r.receipt.raw);
  assert.equal(countFiles(broker.root, 'TASK'), before + 1);
  await assert.rejects(writeTaskRetry({ ...task, subject: 'else' }, sid,
      { socket: broker.socket }), IdemConflict);
  assert.throws(() => writeTaskRetry(task, ''), TypeError);
  // Its report twin: one REPORT however often it is sent.
  const reports = countFiles(broker.root, 'REPORT');
  const rep = await idem.writeReportRetry(r.receipt.taskId, { sender: 'DEV' }, `${sid}/r`,
      { socket: broker.socket });
  const rep2 = await idem.writeReportRetry(r.receipt.taskId, { sender: 'DEV' }, `${sid}/r`,
      { socket: broker.socket });
  assert.ok(!rep.deduplicated && rep2.deduplicated && rep2.reportId === rep.reportId);
  assert.equal(countFiles(broker.root, 'REPORT'), reports + 1);
  // Out of attempts: the last error (the outcome unknown, the id kept).
  const nowhere = path.join(tmp, 'nowhere.sock');
  const seen = [];
  await assert.rejects(writeTaskRetry(task, sid, { socket: nowhere, attempts: 3,
    baseDelayMs: 1, onRetry: (n) => seen.push(n) }), IdemTransportError);
  assert.deepEqual(seen, [1, 2]);
});

test('writeTaskRetry: the broker killed mid-creation, restarted, one task',
    { skip: !FAULTS && 'idemd built without --enable-fault-injection' }, async () => {
  for (const point of ['after_reserve_durable', 'after_task_file_linked',
    'after_commit_durable']) {
    const sid = key(`crash-${point}`);
    const task = { ...TASK, subject: `crash at ${point}` };
    const before = countFiles(broker.root, 'TASK');
    await broker.stop();
    await broker.start({ IDEM_CRASH_AT: point });
    const codes = [];
    const call = writeTaskRetry(task, sid, {
      socket: broker.socket, attempts: 400, baseDelayMs: 20, maxDelayMs: 100,
      onRetry: (attempt, e) => codes.push(e.code),
    });
    // The broker kills itself at the point; the retries meet a new one.
    await broker.dead();
    await broker.start();
    const r = await call;
    assert.ok(codes.length >= 1 && codes.every((c) => c === 'transport'),
        `${point}: retried after the crash (${codes.join()})`);
    assert.equal(countFiles(broker.root, 'TASK'), before + 1, `${point}: one task`);
    const got = await client().getSubmission(sid);
    assert.equal(got.submission.state, 'committed');
    assert.equal(got.submission.taskId, r.receipt.taskId);
    if (point === 'after_commit_durable')
      assert.equal(r.disposition, 'reused', `${point}: the committed receipt`);
    else
      assert.ok(r.recovered, `${point}: finished the interrupted creation`);
  }
});

// ---- runEffect ----------------------------------------------------------------

/** Resolves once the key's lease has lapsed on the broker's clock (its
 * diagnose entry says lease_live false). */
async function lapsed(c, kind, sid) {
  for (;;) {
    const d = await c.diagnose();
    const e = d.entries.find((x) => x.client_submission_id === sid && x.effect_kind === kind);
    if (e && e.lease_live === false)
      return e;
    await sleep(20);
  }
}

test('runEffect: proceed runs fn once; reused returns the stored result', async () => {
  const c = client();
  const sid = key('eff');
  const calls = [];
  const fn = async (externalKey, ctx) => {
    calls.push({ externalKey, attempt: ctx.attempt });
    return { sent: externalKey, n: calls.length };
  };
  const first = await runEffect(c, 'mail.send/v1', sid, { to: 'a@example.com' }, fn);
  assert.equal(calls.length, 1);
  assert.match(calls[0].externalKey, /^idem-/);
  assert.equal(calls[0].attempt, 1);
  assert.deepEqual(first, { sent: calls[0].externalKey, n: 1 });
  const second = await runEffect(client(), 'mail.send/v1', sid, { to: 'a@example.com' }, fn);
  assert.deepEqual(second, first, 'the stored result');
  assert.equal(calls.length, 1, 'fn ran once');
  // An absent result commits null.
  assert.equal(await runEffect(c, 'void/v1', key('void'), null, () => undefined), null);
});

test('runEffect: conflict and in_progress are typed errors; fn never runs', async () => {
  const c = client();
  const sid = key('effc');
  await runEffect(c, 'k/v1', sid, { a: 1 }, () => 1);
  let ran = 0;
  await assert.rejects(runEffect(c, 'k/v1', sid, { a: 2 }, () => ran++), (e) =>
    e instanceof IdemConflict && e.reason === 'digest_mismatch' && !e.retryable
        && e.bound.effectKind === 'k/v1');
  const held = key('held');
  const b = await c.effectBegin(held, 'k/v1', {}, { leaseMs: 60000 });
  await assert.rejects(runEffect(client(), 'k/v1', held, {}, () => ran++), (e) =>
    e instanceof IdemInProgress && e.retryable && e.externalKey === b.externalKey);
  assert.equal(ran, 0);
  await c.effectComplete(held, 'k/v1', b.fence, 'not_applied');
});

test('runEffect: a lapsed lease is outcome_unknown until resolved', async () => {
  const c = client();
  const sid = key('unk');
  const b = await c.effectBegin(sid, 'pay/v1', { cents: 5 }, { leaseMs: 100 });
  assert.ok(b.proceed);
  await lapsed(c, 'pay/v1', sid);
  let ran = 0;
  await assert.rejects(runEffect(c, 'pay/v1', sid, { cents: 5 }, () => ran++), (e) => {
    assert.ok(e instanceof IdemOutcomeUnknown);
    assert.equal(e.code, 'outcome_unknown');
    assert.equal(e.retryable, false);
    assert.equal(e.externalKey, b.externalKey);
    assert.equal(e.attempt, 1);
    return true;
  });
  assert.equal(ran, 0);
  const settled = await c.effectResolve(sid, 'pay/v1', 'applied',
      { result: { paid: true }, source: 'the bank' });
  assert.deepEqual(settled.receipt.result, { paid: true });
  assert.deepEqual(await runEffect(c, 'pay/v1', sid, { cents: 5 }, () => ran++), { paid: true });
  assert.equal(ran, 0);
  const again = await c.effectBegin(sid, 'pay/v1', { cents: 5 });
  assert.ok(again.reused && again.recovered, 'reused, settled by evidence');

  // Evidence "unknown" keeps it unknown; "not_applied" releases it.
  const sid2 = key('unk2');
  const b2 = await c.effectBegin(sid2, 'pay/v1', { cents: 6 }, { leaseMs: 100 });
  await lapsed(c, 'pay/v1', sid2);
  await c.effectResolve(sid2, 'pay/v1', 'unknown', { source: 'nobody knows' });
  await assert.rejects(c.effectBegin(sid2, 'pay/v1', { cents: 6 }), IdemOutcomeUnknown);
  const released = await c.effectResolve(sid2, 'pay/v1', 'not_applied');
  assert.equal(released.receipt, null);
  assert.equal(await runEffect(c, 'pay/v1', sid2, { cents: 6 }, (k, ctx) => {
    assert.equal(k, b2.externalKey, 'the same external key');
    return ctx.attempt;
  }), 2);
  await assert.rejects(c.effectResolve(sid, 'pay/v1', 'applied', { result: { paid: 2 } }),
      (e) => e instanceof IdemConflict && e.reason === 'already_committed');
});

test('runEffect: NotApplied releases; a throwing fn reports nothing', async () => {
  const c = client();
  const sid = key('na');
  const keys = [];
  await assert.rejects(runEffect(c, 'k/v1', sid, 1, (k) => {
    keys.push(k);
    throw new NotApplied('the downstream refused it');
  }), NotApplied);
  const r = await runEffect(c, 'k/v1', sid, 1, (k, ctx) => {
    keys.push(k);
    return ctx.attempt;
  });
  assert.equal(r, 2, 'attempt 2 after the release');
  assert.equal(keys[0], keys[1], 'the same externalKey on every attempt');

  const sid2 = key('throw');
  await assert.rejects(runEffect(c, 'k/v1', sid2, 1, () => {
    throw new Error('broke after sending?');
  }, { leaseMs: 100 }), /broke after sending/);
  const got = await c.getSubmission(sid2, { effectKind: 'k/v1' });
  assert.equal(got.submission.state, 'reserved', 'nothing reported');
  await lapsed(c, 'k/v1', sid2);
  await assert.rejects(runEffect(c, 'k/v1', sid2, 1, () => 1), IdemOutcomeUnknown);
});

test('runEffect: an AbortSignal aborts the call', async () => {
  const c = client();
  const pre = new AbortController();
  pre.abort();
  const sid = key('abort');
  let ran = 0;
  await assert.rejects(runEffect(c, 'k/v1', sid, 1, () => ran++, { signal: pre.signal }),
      { name: 'AbortError' });
  assert.equal((await c.getSubmission(sid, { effectKind: 'k/v1' })).found, false,
      'aborted before the begin: nothing asked');

  // Aborted while the begin is on its way: its lease is released, so
  // the next call proceeds (attempt 2) rather than waiting for a lapse.
  const mid = new AbortController();
  const sid1 = key('abort1');
  const during = runEffect(c, 'k/v1', sid1, 1, () => ran++, { signal: mid.signal });
  mid.abort();
  await assert.rejects(during, { name: 'AbortError' });
  assert.equal(ran, 0);
  assert.equal(await runEffect(c, 'k/v1', sid1, 1, (k, ctx) => ctx.attempt), 2);

  // Aborted while fn runs: rejects at once; fn saw the signal; nothing
  // is reported, so the key lapses into outcome_unknown.
  const ac = new AbortController();
  const sid2 = key('abort2');
  let sawAbort = null;
  const call = runEffect(c, 'k/v1', sid2, 1, (k, ctx) => new Promise((resolve) => {
    ran++;
    ctx.signal.addEventListener('abort', () => {
      sawAbort = true;
      resolve('finished anyway');
    });
    setImmediate(() => ac.abort());
  }), { signal: ac.signal, leaseMs: 150 });
  await assert.rejects(call, { name: 'AbortError' });
  assert.equal(ran, 1);
  assert.equal(sawAbort, true);
  await lapsed(c, 'k/v1', sid2);
  await assert.rejects(runEffect(c, 'k/v1', sid2, 1, () => ran++), IdemOutcomeUnknown);
  assert.equal(ran, 1);
});

test('runEffect: a 300 ms lease lives through a 1 s effect (effect_extend)', async (t) => {
  const c = client();
  assert.ok((await c.hello()).serves('effect_extend'), 'hello lists effect_extend');
  const other = client();
  // One run: fn takes 1 s under a 300 ms lease while another caller asks
  // to begin the same key every 100 ms.
  const run = async (sid) => {
    const seen = { codes: [], proceeds: 0, ran: 0, result: null, error: null };
    try {
      seen.result = await runEffect(c, 'deploy/v1', sid, { app: 'x' }, async (externalKey) => {
        seen.ran++;
        const end = Date.now() + 1000;
        while (Date.now() < end) {
          try {
            await other.effectBegin(sid, 'deploy/v1', { app: 'x' });
            seen.proceeds++;
          } catch (e) {
            seen.codes.push(e.code);
          }
          await sleep(100);
        }
        return { deployed: externalKey };
      }, { leaseMs: 300 });
    } catch (e) {
      seen.error = e;
    }
    return seen;
  };
  // Without extensions the lease lapses after 300 ms in every run.  With
  // them it lapses only if the broker stalls past the lease (an fsync
  // of a machine under load can), so a lapse is allowed a second and a
  // third run; never a second proceed, in any run.
  let good = null;
  for (let i = 1; i <= 3 && good === null; i++) {
    const sid = key('long');
    const seen = await run(sid);
    assert.equal(seen.ran, 1, 'fn ran once');
    assert.equal(seen.proceeds, 0, 'no second proceed for the concurrent caller');
    assert.ok(seen.codes.length >= 5, seen.codes.join());
    if (seen.codes.every((code) => code === 'in_progress')) {
      assert.equal(seen.error, null);
      good = { sid, seen };
    } else {
      assert.deepEqual([...new Set(seen.codes)].sort(),
          ['in_progress', 'outcome_unknown'].slice(seen.codes[0] === 'in_progress' ? 0 : 1),
          `run ${i}: only in_progress, then outcome_unknown after a stall: ${seen.codes}`);
      t.diagnostic(`run ${i}: the lease lapsed (a stall?): ${seen.codes.join(' ')}`);
    }
  }
  assert.ok(good, 'a run where the extended lease never lapsed');
  assert.match(good.seen.result.deployed, /^idem-/);
  const again = await other.effectBegin(good.sid, 'deploy/v1', { app: 'x' });
  assert.equal(again.disposition, 'reused');
  assert.deepEqual(again.receipt.result, good.seen.result);
});

test('effectExtend: stale fence, after a lapse, after a commit', async () => {
  const c = client();
  const sid = key('ext');
  const b = await c.effectBegin(sid, 'k/v1', 1, { leaseMs: 5000 });
  const ext = await c.effectExtend(sid, 'k/v1', b.fence, 60000);
  assert.equal(typeof ext.leaseExpiresAt, 'string');
  await c.effectComplete(sid, 'k/v1', b.fence, 'not_applied');
  const b2 = await c.effectBegin(sid, 'k/v1', 1, { leaseMs: 100 });
  assert.equal(b2.attempt, 2);
  await assert.rejects(c.effectExtend(sid, 'k/v1', b.fence, 1000),
      (e) => e instanceof IdemConflict && e.reason === 'stale_fence');
  await lapsed(c, 'k/v1', sid);
  await assert.rejects(c.effectExtend(sid, 'k/v1', b2.fence, 1000), IdemOutcomeUnknown);
  // The holder still completes after the lapse (SPEC.md).
  const done = await c.effectComplete(sid, 'k/v1', b2.fence, 'applied', { ok: 1 });
  assert.deepEqual(done.receipt.result, { ok: 1 });
  await assert.rejects(c.effectExtend(sid, 'k/v1', b2.fence, 1000),
      (e) => e instanceof IdemConflict && e.reason === 'already_committed');
  await assert.rejects(c.effectExtend(key('none'), 'k/v1', b2.fence, 1000),
      (e) => e instanceof IdemConflict && e.reason === 'no_reservation');
});

// ---- doc/node.md's complete example ---------------------------------------------

test("doc/node.md's example, run twice: one task, one deployment, one report",
    { skip: !process.env.IDEM_NODE_DOC && 'IDEM_NODE_DOC does not name doc/node.md' },
    async () => {
  const doc = fs.readFileSync(process.env.IDEM_NODE_DOC, 'utf8');
  const m = /```js\n(\/\/ deploy\.mjs[^]*?)```/.exec(doc);
  assert.ok(m, "doc/node.md holds the deploy.mjs block");
  // Beside this file, where 'idemd-client' resolves as it does for a user.
  const script = new URL('./deploy.mjs', import.meta.url).pathname;
  fs.writeFileSync(script, m[1]);
  const log = path.join(tmp, 'deployments.log');
  const env = { ...process.env, IDEM_SOCKET: broker.socket, JOB_ID: key('doc'),
    DEPLOY_LOG: log };
  const run = () => new Promise((resolve, reject) => {
    execFile(process.execPath, [script], { env }, (error, stdout, stderr) =>
      (error ? reject(new Error(`${error.message}${stderr}`)) : resolve(stdout)));
  });
  const tasks = countFiles(broker.root, 'TASK');
  const reports = countFiles(broker.root, 'REPORT');
  const first = await run();
  const second = await run();
  assert.match(first, /^created TASK-/m);
  assert.match(first, /reported$/m);
  assert.match(second, /^reused TASK-/m);
  assert.match(second, /reported before$/m);
  assert.equal(first.split('\n')[1].split(' ')[1], second.split('\n')[1].split(' ')[1],
      'the same deployment');
  assert.equal(fs.readFileSync(log, 'utf8').trim().split('\n').length, 1, 'one deployment');
  assert.equal(countFiles(broker.root, 'TASK'), tasks + 1);
  assert.equal(countFiles(broker.root, 'REPORT'), reports + 1);
});
