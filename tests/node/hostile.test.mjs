/* SPDX-License-Identifier: ISC */
// hostile.test.mjs: idemd-client (contrib/node) against a broker that
// breaks the protocol on purpose: a net.Server of the test's own that
// answers each request line as the test's script says.  Run by
// tests/node_client.sh under node's test runner next to client.test.mjs
// (no idemd needed).
//
// What it proves: a line that is not JSON, not an object, without a
// boolean ok, with a raw NUL, invalid UTF-8 or \u0000 in a string; a
// success without what its op promises (a write_task neither created nor
// reused, a receipt without task_id, a proceed without fence, attempt or
// external_key, an applied complete without receipt) or about another
// key or request; a line over 1 MiB or one that never ends; a connection
// closed before, after or in the middle of an answer; no answer; two
// answers to one request; an answer a byte at a time; a retryable error
// for ever and a non-retryable one marked retryable: each ends in a
// typed error (IdemProtocolError, IdemTransportError, the wire's code)
// within the timeout, never a success, a hang or an answer given to the
// wrong call, and the connection is not used again after a protocol
// error.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as idem from 'idemd-client';

const {
  Client, IdemError, IdemProtocolError, IdemTransportError, writeTaskRetry,
} = idem;

const MAX_LINE_BYTES = 1024 * 1024;
const T = 5000;       // a timeout only a hang reaches
const SHORT = 300;    // where the timeout is the point
const TASK = { sender: 'PM', recipient: 'DEV', subject: 's' };
const HANG = Symbol('hang');
const CLOSE = Symbol('close');
const STREAM = Symbol('stream');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'idem-hostile-node.'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));
let serial = 0;

/** The answer line to req (its id echoed) with members. */
function reply(req, members) {
  return Buffer.from(JSON.stringify({ id: req.id, ...members }) + '\n');
}

/** A fake broker: script(req, n) -> Buffer | HANG | CLOSE | STREAM |
 * { cut: Buffer } (write, then close) | { trickle: Buffer, ms } |
 * { first: Buffer, after: Promise, more: Buffer } (write first, then
 * more once after settles: a line sent unasked after an answer).
 * onConnect: CLOSE (closed unread) or a Buffer sent unasked.
 * fake.accepted settles once a connection is accepted;
 * fake.refuseNow(buf) writes buf on every connection and closes it at
 * once (idemd's refusal before it reads: too_many_connections). */
async function hostile(script, onConnect = null) {
  const file = path.join(tmp, `h${serial++}.sock`);
  const fake = { path: file, requests: [], sockets: new Set(), connections: 0 };
  let accepted;
  fake.accepted = new Promise((resolve) => { accepted = resolve; });
  fake.refuseNow = (buf) => {
    for (const s of fake.sockets) {
      s.write(buf);
      s.destroy();
    }
  };
  const server = net.createServer((sock) => {
    fake.connections++;
    fake.sockets.add(sock);
    accepted();
    sock.on('error', () => {});
    sock.on('close', () => fake.sockets.delete(sock));
    if (onConnect === CLOSE) {
      sock.destroy();
      return;
    }
    if (onConnect !== null)
      sock.write(onConnect);
    let buf = '';
    let busy = false;
    sock.on('data', (chunk) => {
      buf += chunk.toString('utf8');
      let nl;
      while (!busy && (nl = buf.indexOf('\n')) !== -1) {
        const req = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        fake.requests.push(req);
        const action = script(req, fake.requests.length);
        if (action === HANG) {
          busy = true;
        } else if (action === CLOSE) {
          sock.destroy();
          return;
        } else if (action === STREAM) {
          busy = true;
          const chunkX = Buffer.alloc(65536, 'x');
          const pump = () => {
            while (!sock.destroyed && sock.write(chunkX))
              ;
            if (!sock.destroyed)
              sock.once('drain', pump);
          };
          pump();
        } else if (action.cut !== undefined) {
          sock.end(action.cut);
          return;
        } else if (action.more !== undefined) {
          sock.write(action.first);
          action.after.then(() => {
            if (!sock.destroyed)
              sock.write(action.more);
          });
        } else if (action.trickle !== undefined) {
          busy = true;
          let i = 0;
          const next = () => {
            if (sock.destroyed)
              return;
            if (i < action.trickle.length) {
              sock.write(action.trickle.subarray(i, i + 1));
              i++;
              setTimeout(next, action.ms);
            } else {
              busy = false;
            }
          };
          next();
        } else {
          sock.write(action);
        }
      }
    });
  });
  await new Promise((resolve) => server.listen(file, resolve));
  fake.close = () => {
    for (const s of fake.sockets)
      s.destroy();
    return new Promise((resolve) => server.close(resolve));
  };
  return fake;
}

const helloOk = (req) => reply(req, { ok: true, server: 'idemd', version: '1.0', protocol: 1 });
const receipt = (sid, over = {}) => ({
  client_submission_id: sid, task_id: 'TASK-20261206-001-PM-to-DEV',
  task_path: '_lifecycle/inbox/TASK-20261206-001-PM-to-DEV.md',
  digest_schema: 'write-task-v1', request_digest: '0'.repeat(64),
  file_digest: '1'.repeat(64), state: 'committed', created_at: '2026-12-06T00:00:00.000Z',
  ...over,
});
const created = (req, over = {}) => reply(req, {
  ok: true, disposition: 'created', action_taken: true, idempotent: true,
  receipt: receipt(req.client_submission_id), ...over,
});
const proceed = (req, over = {}) => reply(req, {
  ok: true, disposition: 'proceed', idempotent: true,
  client_submission_id: req.client_submission_id, effect_kind: req.effect_kind,
  attempt: 1, fence: '1-00', external_key: 'idem-' + '0'.repeat(32), ...over,
});
const effectReceipt = (req, over = {}) => ({
  client_submission_id: req.client_submission_id, effect_kind: req.effect_kind,
  attempt: 1, result: null, state: 'committed',
  committed_at: '2026-12-06T00:00:00.000Z', ...over,
});
const failure = (req, code, retryable, over = {}) => reply(req, {
  ok: false, action_taken: false, error: { code, message: code, retryable }, ...over,
});
const always = (a) => (req) => (typeof a === 'function' ? a(req) : a);
const hello = (c) => c.hello();

/** call(client) on a fresh connection to a fake answering script
 * rejects with Cls, and the connection is not used again. */
async function refused(script, call = hello, Cls = IdemProtocolError, timeoutMs = T) {
  const fake = await hostile(script);
  const c = new Client({ socket: fake.path, timeoutMs });
  try {
    await assert.rejects(call(c), (e) => {
      assert.ok(e instanceof Cls, `${e?.name}: ${e?.message}, not ${Cls.name}`);
      return true;
    });
    assert.equal(c.connected, false, 'the connection is still open');
    return fake;
  } finally {
    c.close();
    await fake.close();
  }
}

test('1. a line that is not JSON', async () => {
  await refused(always(Buffer.from('hello there\n')));
  await refused(always(Buffer.from('{"ok":true,\n')));
});

test('2. not an object, no boolean ok', async () => {
  for (const line of ['[1,2]', '"ok"', 'null', '{}', '{"id":1,"ok":"true"}', '{"id":1,"ok":1}'])
    await refused(always(Buffer.from(line + '\n')));
});

test('2. a write_task success without what it promises', async () => {
  const write = (c) => c.writeTask(TASK, 'w-1');
  for (const over of [{ receipt: null }, { disposition: null }, { disposition: 'conflict' },
    { disposition: 'proceed' }, { receipt: receipt('w-1', { task_id: null }) },
    { receipt: receipt('w-1', { task_id: 7 }) }, { receipt: receipt('w-1', { state: null }) },
    { receipt: 'TASK-1' }])
    await refused((req) => created(req, over), write);
});

test('2. a proceed without its members', async () => {
  const begin = (c) => c.effectBegin('e-1', 'mail', {});
  for (const over of [{ fence: null }, { attempt: null }, { attempt: '1' }, { attempt: 0 },
    { external_key: null }, { fence: true }, { disposition: 'created' },
    { disposition: 'reused' }])
    await refused((req) => proceed(req, over), begin);
});

test('2. an applied complete or resolve without a receipt', async () => {
  await refused((req) => reply(req, { ok: true, action_taken: true, state: 'committed' }),
      (c) => c.effectComplete('e-1', 'mail', '1-00', 'applied', { r: 1 }));
  await refused((req) => reply(req, { ok: true, action_taken: true, state: 'committed' }),
      (c) => c.effectResolve('e-1', 'mail', 'applied', { result: 1 }));
});

test('3. a raw NUL, invalid UTF-8, \\u0000 in a string', async () => {
  await refused(always(Buffer.from('{"id":1,"ok":true,"server":"id\0emd","version":"1","protocol":1}\n')));
  await refused(always(Buffer.concat([Buffer.from('{"id":1,"ok":true,"server":"id'),
    Buffer.from([0xff]), Buffer.from('emd","version":"1","protocol":1}\n')])));
  await refused(always(Buffer.from('{"id":1,"ok":true,"server":"id\\u0000emd","version":"1","protocol":1}\n')));
  await refused((req) => created(req, { receipt: receipt('n-1', { task_id: 'TASK-1\u0000-evil' }) }),
      (c) => c.writeTask(TASK, 'n-1'));
});

test('4. a line over the limit, a line that never ends', async () => {
  await refused(always(Buffer.from('{"id":1,"ok":true,"pad":"' + 'x'.repeat(MAX_LINE_BYTES) + '"}\n')));
  const start = Date.now();
  await refused(always(STREAM));
  assert.ok(Date.now() - start < T);
});

test('5. closed mid-line, after reading, before reading', async () => {
  await refused(always({ cut: Buffer.from('{"id":1,"ok":tr') }), hello, IdemTransportError);
  await refused(always(CLOSE), hello, IdemTransportError);
  const fake = await hostile(always(helloOk), CLOSE);
  const c = new Client({ socket: fake.path, timeoutMs: T });
  await assert.rejects(c.hello(), IdemTransportError);
  assert.equal(c.connected, false);
  c.close();
  await fake.close();
});

test('6. no answer: the timeout fires, typed, and the connection is dropped', async () => {
  const start = Date.now();
  await refused(always(HANG), hello, IdemTransportError, SHORT);
  assert.ok(Date.now() - start < T);
});

test('7. two answers to one request: the second answers no later call', async () => {
  const fake = await hostile((req, n) => (n === 1
    ? Buffer.concat([created(req), created(req)]) : created(req)));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    const first = await c.writeTask(TASK, 'two-a');
    assert.equal(first.receipt.clientSubmissionId, 'two-a');
    // The line nobody asked for drops the connection as it comes (or,
    // should it come later, fails the call it would answer): never the
    // first call's receipt as the second's.
    const second = await c.writeTask(TASK, 'two-b').then((r) => r, (e) => e);
    if (second instanceof Error)
      assert.ok(second instanceof IdemProtocolError, String(second));
    else
      assert.equal(second.receipt.clientSubmissionId, 'two-b');
    assert.equal(fake.connections, 2, 'the connection was used again');
  } finally {
    c.close();
    await fake.close();
  }
});

test('a compacted task\'s receipt (receipt_pruned, no file_digest) is an answer', async () => {
  const pruned = receipt('p-1');
  delete pruned.file_digest;
  const fake = await hostile((req) => created(req, {
    disposition: 'reused', action_taken: false, receipt_pruned: true, receipt: pruned,
  }));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    const r = await c.writeTask(TASK, 'p-1');
    assert.equal(r.disposition, 'reused');
    assert.equal(r.receipt.fileDigest, null);
    assert.equal(r.receipt.taskId, pruned.task_id);
  } finally {
    c.close();
    await fake.close();
  }
});

test('7. an answer without the request\'s id is no success', async () => {
  await refused(always(Buffer.from('{"ok":true,"server":"idemd","version":"1","protocol":1}\n')));
});

const REFUSAL = Buffer.from('{"ok":false,"action_taken":false,"error":{"code":'
    + '"too_many_connections","reason":"max_connections","message":"too many",'
    + '"retryable":true}}\n');

test('7. the broker\'s refusal without an id as the first answer is the error', async () => {
  // too_many_connections: idemd's one line without an id (SPEC.md),
  // then it closes.  Read after the request was sent, it is the call's
  // answer: the retryable error, not a protocol one.
  const fake = await hostile(always({ cut: REFUSAL }));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    const e = await c.hello().then(() => null, (x) => x);
    assert.ok(e instanceof IdemError && !(e instanceof IdemProtocolError), String(e));
    assert.equal(e.code, 'too_many_connections', e.message);
    assert.equal(e.retryable, true);
  } finally {
    c.close();
    await fake.close();
  }
});

test('7. the broker\'s refusal closed before the request is sent: a transport error', async () => {
  // The refusal sent and the broker's end closed in the same turn as
  // the request is sent: the send fails (EPIPE) and node drops the
  // socket before its loop reads the refusal waiting on it, which
  // nothing public reaches (the client uses no node internals).  The
  // call fails as a retryable transport error, nothing was sent, and
  // the connection is gone (the next call connects afresh).
  const fake = await hostile(always(CLOSE));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    await c.connect();
    await fake.accepted;
    fake.refuseNow(REFUSAL);
    const e = await c.hello().then(() => null, (x) => x);
    assert.ok(e instanceof IdemTransportError, String(e));
    assert.equal(e.retryable, true);
    assert.equal(fake.requests.length, 0);
    assert.equal(c.connected, false);
  } finally {
    c.close();
    await fake.close();
  }
});

test('7. an error without an id after an answer is no answer', async () => {
  // A refusal without an id sent after the first answer was read (two
  // writes, the second once the client has the first): on a connection
  // that has answered, never the next call's error.
  let read;
  const after = new Promise((resolve) => { read = resolve; });
  const stray = Buffer.from('{"ok":false,"action_taken":false,"error":{"code":'
      + '"shutting_down","message":"m","retryable":true}}\n');
  const fake = await hostile((req, n) => (n === 1
    ? { first: helloOk(req), after, more: stray } : HANG));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    await c.hello();
    read();
    const e = await c.hello().then(() => null, (x) => x);
    assert.ok(e instanceof IdemProtocolError, String(e));
    assert.equal(c.connected, false, 'the connection is still open');
  } finally {
    c.close();
    await fake.close();
  }
});

test('8. an answer a byte at a time: within the timeout, past it', async () => {
  const fake = await hostile((req) => ({ trickle: helloOk(req), ms: 1 }));
  const c = new Client({ socket: fake.path, timeoutMs: T });
  try {
    assert.equal((await c.hello()).server, 'idemd');
  } finally {
    c.close();
    await fake.close();
  }
  await refused((req) => ({ trickle: helloOk(req), ms: 100 }), hello, IdemTransportError, SHORT);
});

async function retry(script, attempts = 4) {
  const fake = await hostile(script);
  try {
    const e = await writeTaskRetry(TASK, 'r-1', {
      socket: fake.path, attempts, baseDelayMs: 1, timeoutMs: T,
    }).then(() => null, (x) => x);
    assert.ok(e instanceof IdemError, `writeTaskRetry gave ${e}`);
    return { e, count: fake.requests.length };
  } finally {
    await fake.close();
  }
}

test('9. a retryable error for ever: the retries stop at their bound', async () => {
  for (const code of ['in_progress', 'table_full', 'storage_unavailable', 'shutting_down',
    'too_many_connections']) {
    const { e, count } = await retry((req) => failure(req, code, true));
    assert.equal(e.code, code);
    assert.equal(count, 4, code);
  }
});

test('9. a non-retryable error marked retryable is not retried', async () => {
  for (const code of ['conflict', 'invalid_request', 'outcome_unknown', 'digest_disagrees',
    'sequence_exhausted']) {
    const over = code === 'conflict' ? { disposition: 'conflict' } : {};
    const { e, count } = await retry((req) => failure(req, code, true, over));
    assert.equal(e.code, code);
    assert.equal(count, 1, code);
  }
  const { e, count } = await retry(always(Buffer.from('nonsense\n')));
  assert.ok(e instanceof IdemProtocolError);
  assert.equal(count, 1);
});

test('10. an answer to another request or about another key', async () => {
  await refused((req) => helloOk({ id: req.id + 1 }));
  await refused((req) => helloOk({ id: String(req.id) }));
  await refused((req) => created(req, { receipt: receipt('other') }),
      (c) => c.writeTask(TASK, 'mine'));
  const begin = (c) => c.effectBegin('e-1', 'mail', {});
  await refused((req) => proceed(req, { client_submission_id: 'e-2' }), begin);
  await refused((req) => proceed(req, { effect_kind: 'sms' }), begin);
  await refused((req) => reply(req, {
    ok: true, disposition: 'reused', action_taken: false,
    receipt: effectReceipt(req, { client_submission_id: 'e-2' }),
  }), begin);
  await refused((req) => reply(req, {
    ok: true, action_taken: true, state: 'committed',
    receipt: effectReceipt(req, { effect_kind: 'sms' }),
  }), (c) => c.effectComplete('e-1', 'mail', '1-00', 'applied', null));
  await refused((req) => reply(req, {
    ok: true, found: true,
    submission: { client_submission_id: 'other', state: 'committed' },
  }), (c) => c.getSubmission('mine'));
});
