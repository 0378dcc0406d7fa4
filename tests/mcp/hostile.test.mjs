/* SPDX-License-Identifier: ISC */
// hostile.test.mjs: `idem-mcp proxy` against a hostile downstream
// (tests/mcp/hostile_server.mjs: two answers to one call, answers nobody
// asked for, result and error together, no result at all, lines that
// are not JSON (one nesting the call's id, one a batch), a NUL byte, a
// line of many MiB, lines at and over the line limit (one with its id
// last, one whose LF comes after its CR), half a line and death, U+0000
// in a result's string (and an escaped backslash before u0000, which is
// none) or in an answer's key, a result over 64 KiB with a character
// across its stand-in's cut, a result that looks like a stand-in,
// a lone surrogate's escape in a result, integers past 64 bits in a
// result, a request of its own while a call
// runs, a tool that turns read-only, a read-only tool called with a
// fresh key, a tool it never lists) and a hostile or vanishing client
// (a cancellation the server ignores, the end of its input while a call
// runs, one key twice in one write, a null id, arguments that are not an
// object, U+0000 in an object key or in the key, a lone surrogate's
// escape, 1e400, deep nesting, invalid UTF-8, garbage, a blank line, an
// id of the proxy's form in a line passed as its bytes), against a real
// idemd.
// Doc: doc/mcp-proxy.md, "A hostile server, a careless client".  Run by
// tests/mcp/hostile.sh (through sdk.sh, which sets IDEMD, IDEM_MCP and
// IDEM_MCP_NODE_PREFIX; make check sets IDEMCTL).
//
// The client here writes raw lines (an SDK client would hide the bytes).
// Each test judges by the server's own count of executions and by the
// ledger's state (idemctl effects show), never by an exit status alone.
// What proxy.test.mjs proves (a server that crashes or hangs, the proxy
// killed, the broker down, a cancellation the server honours) is not
// repeated.

import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { SdkRun } from './sdk_run.mjs';

const IDEM_MCP = process.env.IDEM_MCP;
const IDEMCTL = process.env.IDEMCTL;
assert.ok(process.env.IDEMD && IDEM_MCP && IDEMCTL,
    'IDEMD, IDEM_MCP and IDEMCTL must be set (make check TESTS=tests/mcp/hostile.sh)');

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER = [process.execPath, path.join(HERE, 'hostile_server.mjs')];
const KIND = 'mcp/hostile/act';
const LEASE_MS = 1000;	// short, so that lapsed leases come quickly
const ANSWER_MS = 20000;	// an answer later than this is a hang

const run = new SdkRun('idem-mcp-hostile.');
const { tmp, root, broker } = run;
const check = run.check.bind(run);
const proxies = [];

// ---- a raw client ------------------------------------------------------------

// A proxy in front of hostile_server.mjs, spoken to in raw lines.
class Raw {
  // log: the server's count of executions (a new file, unless given: a
  // second proxy in front of the same server's history).
  constructor({ args = [], log = null, env = {} } = {}) {
    this.log = log ?? path.join(tmp, `executions-${proxies.length + 1}`);
    this.child = spawn(IDEM_MCP, ['proxy', '--root', root, '--lease-ms', String(LEASE_MS),
      ...args, '--', ...SERVER], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOSTILE_LOG: this.log, ...env },
    });
    this.stderr = '';
    this.child.stderr.on('data', (chunk) => { this.stderr += chunk; });
    this.exited = once(this.child, 'exit');
    this.lines = [];		// every line from the proxy, as bytes
    this.messages = [];		// those that are JSON, parsed
    this.waiting = new Map();	// id (JSON) -> resolve
    this.watchers = [];
    this.nextId = 1;
    // A line's pieces until its newline (joined once: lines of MiBs).
    let pieces = [];
    this.child.stdout.on('data', (chunk) => {
      let nl;
      while ((nl = chunk.indexOf(10)) !== -1) {
        pieces.push(chunk.subarray(0, nl));
        this.line(Buffer.concat(pieces));
        pieces = [];
        chunk = chunk.subarray(nl + 1);
      }
      if (chunk.length > 0)
        pieces.push(chunk);
    });
    proxies.push(this);
  }

  line(bytes) {
    this.lines.push(bytes);
    let msg;
    try {
      msg = JSON.parse(bytes.toString('utf8'));
    } catch {
      return;
    }
    this.messages.push(msg);
    if (msg.method === undefined && msg.id !== undefined) {
      const key = JSON.stringify(msg.id);
      const resolve = this.waiting.get(key);
      this.waiting.delete(key);
      resolve?.(msg);
    }
    this.watchers = this.watchers.filter((w) => !w(msg));
  }

  write(text) {
    this.child.stdin.write(text + '\n');
  }

  // A request; resolves with its answer (the whole message).
  request(method, params, id = this.nextId++) {
    const answer = this.expect(id);
    this.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    return answer;
  }

  // Resolves with the answer to id; a hang is a failure, not a stall.
  expect(id, ms = ANSWER_MS) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(
          `no answer to ${JSON.stringify(id)} within ${ms} ms`)), ms);
      this.waiting.set(JSON.stringify(id), (msg) => { clearTimeout(timer); resolve(msg); });
    });
  }

  // Resolves with the first message from now on for which cond holds.
  until(cond) {
    return new Promise((resolve) => this.watchers.push((m) => cond(m) && (resolve(m), true)));
  }

  // A new proxy, initialized, its tools listed.
  static async started(options) {
    const p = new Raw(options);
    p.tools = await p.start();
    return p;
  }

  async start() {
    await this.request('initialize', { protocolVersion: '2025-06-18', capabilities: {},
      clientInfo: { name: 'hostile-test', version: '1' } });
    this.write('{"jsonrpc":"2.0","method":"notifications/initialized"}');
    return (await this.request('tools/list', {})).result.tools;
  }

  // Resolves once the proxy's stderr matches re (it comes on its own pipe).
  async said(re, ms = ANSWER_MS) {
    const deadline = Date.now() + ms;
    while (!re.test(this.stderr)) {
      assert.ok(Date.now() < deadline, `the proxy never said ${re}: ${this.stderr}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, 100);
        this.child.stderr.once('data', () => { clearTimeout(timer); resolve(); });
      });
    }
  }

  act(args, id) {
    return this.request('tools/call', { name: 'act', arguments: args }, id);
  }

  // The server's record of its last execution: label, mode, key.
  lastExecution() {
    return JSON.parse(fs.readFileSync(this.log, 'utf8').trim().split('\n').pop());
  }

  executions() {
    return fs.existsSync(this.log) ?
      fs.readFileSync(this.log, 'utf8').split('\n').filter((l) => l !== '').length : 0;
  }

  // Stop: the end of its input, then its exit (code, signal).
  async stop() {
    this.child.stdin.end();
    return this.exited;
  }
}

// The effect as the broker keeps it (idemctl effects show --json), or
// null if it has none; .state is reserved, outcome_unknown, committed...
function ledger(key, kind = KIND) {
  let out;
  try {
    out = execFileSync(IDEMCTL, ['--root', root, '--json', 'effects', 'show', kind, key],
        { encoding: 'utf8' });
  } catch (e) {
    if (e.status !== 1 || !e.stdout)
      throw e;
    out = e.stdout;
  }
  const shown = JSON.parse(out);
  return shown.found ? shown.submission : null;
}

const facts = (msg) => msg.result?._meta?.['io.idem/proxy'];

// Resolves once cond() holds, looking again as fs.watch sees dir change.
async function until(dir, cond, ms = 20000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `timed out waiting on ${dir}`);
    await new Promise((resolve) => {
      const watcher = fs.watch(dir, () => { watcher.close(); resolve(); });
      setTimeout(() => { watcher.close(); resolve(); }, 50);
    });
  }
}

// Retry while the proxy says in_progress, as an agent would.
async function retryWhileInProgress(p, args) {
  for (let i = 0; i < 100; i++) {
    const r = await p.act(args);
    if (facts(r)?.disposition !== 'in_progress')
      return r;
  }
  assert.fail('still in_progress after 100 retries');
}

// The call may have acted and is never run again: a retry through p,
// once the lease lapses, is outcome_unknown, and the server (its count
// in ran's log) ran it once.
async function lapsesToUnknown(p, args, ran = p) {
  const r = await retryWhileInProgress(p, args);
  assert.equal(facts(r)?.disposition, 'outcome_unknown', JSON.stringify(r));
  assert.equal(ran.executions(), 1, 'never run a second time');
}

// A tool error of the proxy's: the server's answer could not be taken.
function invalidAnswer(r) {
  assert.equal(r.result?.isError, true, JSON.stringify(r));
  assert.equal(facts(r).disposition, 'server_invalid_answer');
}

before(async () => {
  fs.mkdirSync(root);
  await broker.start();
});

after(async () => {
  for (const p of proxies)
    if (p.child.exitCode === null && p.child.signalCode === null)
      p.child.kill('SIGKILL');
  await broker.stop().catch(() => {});
  run.noSanitizerReports(proxies.map((p) => p.stderr), 'idem-mcp proxy');
  run.finish();
});

// ---- the downstream's answers -------------------------------------------------

check('server: a call answered twice, and answers nobody asked for: the first answer is the one recorded', async () => {
  const p = await Raw.started();
  const first = await p.act({ label: 'twice', mode: 'twice', idempotency_key: 'twice/1' });
  assert.equal(JSON.parse(first.result.content[0].text).execution, 1);
  // The second answer went nowhere: the client got one answer.
  await p.request('ping', {});
  assert.equal(p.messages.filter((m) => JSON.stringify(m.id) === JSON.stringify(first.id)).length, 1);
  const again = await p.act({ label: 'twice', mode: 'twice', idempotency_key: 'twice/1' });
  assert.deepEqual(again.result, first.result, 'the retry gets the first answer');
  assert.equal(ledger('twice/1').state, 'committed');
  // Stray answers: one in the proxy's own id form is dropped, a client's
  // id is passed on (not the proxy's to judge); the call is answered.
  const stray = await p.act({ label: 'stray', mode: 'stray', idempotency_key: 'stray/1' });
  assert.equal(JSON.parse(stray.result.content[0].text).execution, 2);
  assert.ok(p.messages.some((m) => m.id === 424242));
  assert.ok(!p.messages.some((m) => m.id === 'io.idem/proxy/999999'));
  assert.ok(!p.lines.some((l) => l.includes('io.idem/proxy/')),
      'nor one that is not JSON: no line of the proxy\'s own ids reaches the client');
  assert.equal(ledger('stray/1').state, 'committed');
  assert.equal(p.executions(), 2);
});

check('server: result and error together: recorded as ran (the result), never run again', async () => {
  const p = await Raw.started();
  const args = { label: 'both', mode: 'both', idempotency_key: 'both/1' };
  const first = await p.act(args);
  assert.equal(JSON.parse(first.result.content[0].text).execution, 1);
  assert.equal(first.error, undefined);
  assert.equal(ledger('both/1').state, 'committed');
  assert.deepEqual((await p.act(args)).result, first.result);
  assert.equal(p.executions(), 1);
});

check('server: a result that is not an object is recorded and answered as it came', async () => {
  const p = await Raw.started();
  for (const [i, value] of [42, 'text', [1, 2], null].entries()) {
    const args = { label: 'scalar', mode: 'scalar', value, idempotency_key: `scalar/${i}` };
    const first = await p.act(args);
    assert.deepEqual(first.result, value);
    assert.equal(ledger(`scalar/${i}`).state, 'committed', JSON.stringify(value));
    assert.deepEqual((await p.act(args)).result, value, 'reused as first answered');
  }
  assert.equal(p.executions(), 4);
});

// The result's JSON text in the proxy's answer to id, as the bytes came
// (the proxy writes {"jsonrpc":"2.0","id":ID,"result":TEXT}).
function resultText(p, id) {
  const head = `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":`;
  const line = p.lines.find((l) => l.subarray(0, head.length).toString() === head);
  assert.ok(line, `no answer to ${id}`);
  return line.subarray(head.length, line.length - 1);
}

// The result an effect's receipt holds (committed: applied).
const stored = (e) => e?.receipt?.result;

// A call whose result holds U+0000 (which no ledger request may carry):
// answered as it came, committed applied with a stand-in, its retry told
// it was applied and why its result cannot be shown; run once.
async function notStorable(p, args) {
  const first = await p.act(args);
  assert.equal(first.result?.isError, undefined, JSON.stringify(first));
  const text = resultText(p, first.id);
  const e = ledger(args.idempotency_key);
  assert.equal(e?.state, 'committed', JSON.stringify(e));
  const standin = stored(e);
  assert.equal(standin?.result_not_storable, 'U+0000', JSON.stringify(e));
  assert.equal(standin.bytes, text.length);
  assert.equal(standin.sha256, crypto.createHash('sha256').update(text).digest('hex'));
  const again = await p.act(args);
  const f = facts(again);
  assert.equal(f?.disposition, 'reused_result_not_kept', JSON.stringify(again));
  assert.equal(again.result.isError, false, 'applied: not an error');
  assert.match(again.result.content[0].text, /already applied.*not performed again/s);
  assert.match(again.result.content[0].text, /U\+0000/);
  assert.ok(again.result.content[0].text.includes(standin.sha256));
  assert.equal(p.executions(), 1, 'never run a second time');
  return { first, standin, again };
}

check('server: a result with U+0000 in a string: answered as it came, committed applied with a stand-in, a retry told so; never run again', async () => {
  const p = await Raw.started();
  const { first, standin, again } = await notStorable(p,
      { label: 'escnul', mode: 'escnul', idempotency_key: 'escnul/1' });
  assert.equal(first.result.content[0].text, 'a\u0000b' + '\u00e9'.repeat(600),
      'the client gets the answer');
  // 1 KiB at most, U+0000 written U+FFFD (3 bytes), cut between
  // characters: 5 bytes and 509 of the 2-byte e-acutes.
  assert.equal(standin.text_start, 'a\ufffdb' + '\u00e9'.repeat(509));
  assert.ok(again.result.content[0].text.includes('(U+0000 shown as U+FFFD): a\ufffdb'));
});

check('server: an answer with U+0000 in an object key: server_invalid_answer, left unsettled, never run again; a notification with one passes as it came', async () => {
  const p = await Raw.started();
  const args = { label: 'keynul', mode: 'keynul', idempotency_key: 'keynul/1' };
  const note = p.until((m) => m.method === 'notifications/message');
  // jansson's parser refuses U+0000 in a key: what the answer holds
  // cannot be read exactly, nor recorded.
  invalidAnswer(await p.act(args));
  assert.deepEqual((await note).params.data, { 'n\u0000ote': 'keynul' });
  assert.ok(p.lines.some((l) => l.includes('"n\\u0000ote"')), 'the notification\'s own bytes');
  assert.ok(!p.lines.some((l) => l.includes('k\\u0000ey')), 'the answer is not the client\'s');
  assert.equal(ledger('keynul/1').state, 'reserved', 'left to lapse, not released');
  await lapsesToUnknown(p, args);
});

check('server: a result with a lone surrogate\'s escape (jansson cannot read it exactly): server_invalid_answer, left to lapse unsettled, never run again (the known limit)', async () => {
  const p = await Raw.started();
  const args = { label: 'surrogate', mode: 'surrogate', idempotency_key: 'surrogate/1' };
  invalidAnswer(await p.act(args));
  await p.said(/server: an answer that jansson reads only loosely \(\d+ bytes\) to "io\.idem\/proxy\/\d+": taken for that request/);
  assert.equal(ledger('surrogate/1').state, 'reserved', 'left to lapse, not released');
  await lapsesToUnknown(p, args);
});

check('server: a result over 64 KiB with a two-byte character across the 1 KiB cut (and with U+0000): its stand-in committed, a retry told so; never run again', async () => {
  const p = await Raw.started();
  for (const nul of [false, true]) {
    const args = { label: 'bigcut', mode: 'bigcut', nul, idempotency_key: `bigcut/${nul}` };
    // 1023 bytes: "a"s, or "a", U+FFFD (3 bytes) and 1019 "a"s.
    const start = nul ? 'a\ufffd' + 'a'.repeat(1019) : 'a'.repeat(1023);
    const first = await p.act(args);
    assert.equal(first.result.content[0].text,
        (nul ? 'a\u0000' + 'a'.repeat(1019) : 'a'.repeat(1023)) + '\u00e9'.repeat(40000));
    const e = ledger(`bigcut/${nul}`);
    assert.equal(e?.state, 'committed', JSON.stringify(e));
    // The e-acute across byte 1024 is left out, not cut in two.
    assert.equal(stored(e).result_too_large, true);
    assert.equal(stored(e).text_start, start);
    const again = await p.act(args);
    assert.equal(facts(again)?.disposition, 'reused_result_not_kept', JSON.stringify(again));
    assert.match(again.result.content[0].text, /larger than idem's ledger keeps/);
    assert.ok(again.result.content[0].text.endsWith(
        (nul ? ' (U+0000 shown as U+FFFD): ' : ': ') + start), again.result.content[0].text);
  }
  assert.equal(p.executions(), 2);
});

check('server: a result with a stand-in\'s marker among its members is a result: stored and answered as it came', async () => {
  const p = await Raw.started();
  for (const marker of ['large', 'nul']) {
    const args = { label: 'mimic', mode: 'mimic', marker, idempotency_key: `mimic/${marker}` };
    const first = await p.act(args);
    assert.equal(first.result.text_start, 'mimic');
    assert.deepEqual(stored(ledger(`mimic/${marker}`)), first.result, 'stored verbatim');
    assert.deepEqual((await p.act(args)).result, first.result, 'reused as first answered');
  }
  assert.equal(p.executions(), 2);
});

check('server: a result with an escaped backslash before u0000 (no U+0000) is recorded as it came', async () => {
  const p = await Raw.started();
  const args = { label: 'escbs', mode: 'escbs', idempotency_key: 'escbs/1' };
  const first = await p.act(args);
  assert.equal(first.result.content[0].text, '\\u0000 is not NUL');
  const e = ledger('escbs/1');
  assert.equal(e?.state, 'committed', JSON.stringify(e));
  assert.deepEqual(stored(e), first.result, 'stored verbatim');
  assert.deepEqual((await p.act(args)).result, first.result, 'reused as first answered');
  assert.equal(p.executions(), 1);
});

check('server: an integer past 64 bits in a result is kept as a double; never run again', async () => {
  const p = await Raw.started();
  // Read as a double (as a JavaScript client reads it): the same number
  // answered first and on the retry.
  const big = { label: 'bigint', mode: 'bigint', idempotency_key: 'bigint/1' };
  const b1 = await p.act(big);
  assert.equal(b1.result.n, 1.2345678901234568e29);
  assert.deepEqual((await p.act(big)).result, b1.result);
  assert.equal(ledger('bigint/1').state, 'committed');
  assert.equal(p.executions(), 1);
});

check('server: an answer with neither result nor error: a tool error, and the key is not released to run again', async () => {
  const p = await Raw.started();
  const args = { label: 'neither', mode: 'neither', idempotency_key: 'neither/1' };
  const first = await p.act(args);
  invalidAnswer(first);
  assert.notEqual(ledger('neither/1').state, 'released');
  await lapsesToUnknown(p, args);
});

check('server: a line that is not JSON passes; the call it precedes is answered and recorded', async () => {
  const p = await Raw.started();
  const r = await p.act({ label: 'notjson', mode: 'notjson', idempotency_key: 'notjson/1' });
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1);
  assert.ok(p.lines.some((l) => l.toString() === 'this line is not JSON'));
  assert.equal(ledger('notjson/1').state, 'committed');
});

check('server: an answer that is not JSON (a raw NUL byte): a tool error, not passed on, never run again', async () => {
  const p = await Raw.started();
  const args = { label: 'nul', mode: 'nul', idempotency_key: 'nul/1' };
  const first = await p.act(args);
  invalidAnswer(first);
  assert.ok(!p.lines.some((l) => l.includes(0)), 'the unreadable answer is not the client\'s');
  assert.equal(ledger('nul/1').state, 'reserved', 'left to lapse, not released');
  await lapsesToUnknown(p, args);
});

check('server: an answer that is not JSON in a batch of one: a tool error, not passed on, never run again', async () => {
  const p = await Raw.started();
  const args = { label: 'nulbatch', mode: 'nulbatch', idempotency_key: 'nulbatch/1' };
  invalidAnswer(await p.act(args));
  assert.ok(!p.lines.some((l) => l.includes(0)), 'the unreadable answer is not the client\'s');
  assert.equal(ledger('nulbatch/1').state, 'reserved', 'left to lapse, not released');
});

check('server: a line that is not JSON with the call\'s id nested in it is not its answer: passed on, the call answered', async () => {
  const p = await Raw.started();
  const r = await p.act({ label: 'nested', mode: 'nested', idempotency_key: 'nested/1' });
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1, JSON.stringify(r));
  assert.ok(p.lines.some((l) => l.includes('"data":{"note"')), 'the notification reached the client');
  assert.equal(ledger('nested/1').state, 'committed');
});

check('server: a passed-through call (a tool it never lists, no key) answered with neither result nor error, or not in JSON: a JSON-RPC error', async () => {
  const p = await Raw.started();
  for (const mode of ['neither', 'nul']) {
    const r = await p.request('tools/call', { name: 'hidden', arguments: { label: 'relayed', mode } });
    assert.equal(r.error?.code, -32603, JSON.stringify(r));
    assert.match(r.error.message, /neither a result nor an error/);
  }
  assert.equal(p.executions(), 2, 'unkeyed: the server\'s own business');
});

check('server: an answer of 8 MiB on one line: answered whole, then its stand-in', async () => {
  const p = await Raw.started();
  const args = { label: 'huge', mode: 'huge', mib: 8, idempotency_key: 'huge/1' };
  const first = await p.act(args);
  assert.equal(first.result.content[0].text, 'x'.repeat(8 << 20));
  const again = await p.act(args);
  assert.equal(facts(again).disposition, 'reused_result_not_kept');
  assert.doesNotMatch(again.result.content[0].text, /U\+FFFD/, 'no U+0000 to speak of');
  assert.equal(ledger('huge/1').state, 'committed');
  assert.equal(p.executions(), 1);
});

// The proxy's resident memory, MiB; null under AddressSanitizer (its
// quarantine keeps what was freed).
function residentMiB(p) {
  if (fs.readFileSync(`/proc/${p.child.pid}/exe`).includes('__asan_init'))
    return null;
  const kb = fs.readFileSync(`/proc/${p.child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1];
  return Number(kb) / 1024;
}

check('server: a line of 64 MiB passes whole, and the proxy gives its room back', async () => {
  const p = await Raw.started();
  const shout = p.until((m) => m.method === 'notifications/message');
  const r = await p.act({ label: 'shout', mode: 'shout', mib: 64, idempotency_key: 'shout/1' });
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1);
  assert.equal((await shout).params.data.length, 64 << 20, 'the notification, whole');
  const resident = residentMiB(p);
  // It held the line while it read it; kept, that is 64 MiB and more.
  if (resident !== null)
    assert.ok(resident < 40, `${resident.toFixed(1)} MiB resident after the line`);
  assert.equal(ledger('shout/1').state, 'committed');
});

// IDEM_MCP_PROXY_MAX_LINE_BYTES (a build with fault injection only)
// lowers the 256 MiB limit: the arithmetic is the same, and two lines of
// 256 MiB cost seconds.  make check sets IDEM_FAULT_INJECTION.
const SMALL_LIMIT = 1 << 20;
const smallLimit = { env: { IDEM_MCP_PROXY_MAX_LINE_BYTES: String(SMALL_LIMIT) } };
const noKnob = process.env.IDEM_FAULT_INJECTION === 'yes' ? false :
  'needs a build with fault injection (configure --enable-fault-injection) for IDEM_MCP_PROXY_MAX_LINE_BYTES';

// The proxy's exit status and stderr with env, its server never started.
// A proxy that starts instead is killed after ANSWER_MS: a failure, not a hang.
async function refusedAtStart(env) {
  const p = new Raw({ env });
  const timer = setTimeout(() => p.child.kill(), ANSWER_MS);
  const [code] = await p.exited;
  clearTimeout(timer);
  return [code, p.stderr];
}

check('start: IDEM_MCP_PROXY_MAX_LINE_BYTES that is not a whole number of bytes from 4096 to 256 MiB is refused, not misread', async () => {
  if (noKnob) {
    // A build without fault injection refuses the knob whatever it says.
    const [code, said] = await refusedAtStart({ IDEM_MCP_PROXY_MAX_LINE_BYTES: String(SMALL_LIMIT) });
    assert.equal(code, 2);
    assert.match(said, /IDEM_MCP_PROXY_MAX_LINE_BYTES is set, but this idem-mcp has no fault injection/);
    return;
  }
  for (const value of ['1M', '1048576x', '', '100', '4095', String(2 ** 28 + 1), '99999999999999999999']) {
    const [code, said] = await refusedAtStart({ IDEM_MCP_PROXY_MAX_LINE_BYTES: value });
    assert.equal(code, 2, `${JSON.stringify(value)}: ${said}`);
    assert.match(said, /IDEM_MCP_PROXY_MAX_LINE_BYTES=.*: not a number of bytes from 4096 to 268435456/);
  }
});

check('server: an answer over the line limit: dropped, and the call a tool error, never run again', async () => {
  const p = await Raw.started(smallLimit);
  // Over by more than a read's 64 KiB: dropped before its newline.
  const args = { label: 'long', mode: 'line', bytes: SMALL_LIMIT + 100000, idempotency_key: 'long/1' };
  invalidAnswer(await p.act(args));
  await p.said(new RegExp(`server: a line over ${SMALL_LIMIT} bytes dropped`));
  assert.ok(!p.lines.some((l) => l.includes('io.idem/proxy/')), 'nothing of it reached the client');
  assert.equal(ledger('long/1').state, 'reserved', 'left to lapse, not released');
  await lapsesToUnknown(p, args);
}, noKnob);

check('server: an answer over the line limit whose id comes last (the SDK\'s order): the call a tool error all the same', async () => {
  const p = await Raw.started(smallLimit);
  // Over by more than a read: its id long after the first bytes seen.
  const args = { label: 'idlast', mode: 'idlast', bytes: SMALL_LIMIT + 300000, idempotency_key: 'idlast/1' };
  invalidAnswer(await p.act(args));
  await p.said(/server: an answer over the line limit \(\d+ bytes\) to "io\.idem\/proxy\/\d+": taken for that request/);
  assert.ok(!p.lines.some((l) => l.includes('io.idem/proxy/')), 'nothing of it reached the client');
  assert.equal(ledger('idlast/1').state, 'reserved', 'left to lapse, not released');
  assert.equal(p.executions(), 1);
}, noKnob);

check('server: the line limit is exact: a line of the limit passes, one byte more is dropped', async () => {
  const p = await Raw.started(smallLimit);
  const at = await p.act({ label: 'at', mode: 'line', bytes: SMALL_LIMIT, idempotency_key: 'at/1' });
  assert.equal(at.result.isError, undefined, 'the server\'s answer, whole');
  assert.match(at.result.content[0].text, /^x+$/);
  assert.ok(at.result.content[0].text.length > SMALL_LIMIT - 200);
  assert.equal(ledger('at/1').state, 'committed');
  // One byte more, within a read of the limit: dropped all the same.
  invalidAnswer(await p.act({ label: 'over', mode: 'line', bytes: SMALL_LIMIT + 1, idempotency_key: 'over/1' }));
  await p.said(new RegExp(`server: a line over ${SMALL_LIMIT} bytes dropped`));
  assert.equal(ledger('over/1').state, 'reserved');
  assert.equal(p.executions(), 2);
  // The limit and a CR, its LF in a later read: the line of the limit.
  const cr = await p.act({ label: 'cr', mode: 'crline', bytes: SMALL_LIMIT, idempotency_key: 'cr/1' });
  assert.equal(cr.result.isError, undefined, JSON.stringify(cr).slice(0, 300));
  assert.equal(ledger('cr/1').state, 'committed');
}, noKnob);

check('server: half an answer, then it exits: a tool error, the half not passed on, the proxy exits, never run again', async () => {
  const p = await Raw.started();
  const args = { label: 'cut', mode: 'cut', idempotency_key: 'cut/1' };
  const first = await p.act(args);
  invalidAnswer(first);
  assert.ok(!p.lines.some((l) => l.toString().includes('io.idem/proxy/')),
      'no line of the proxy\'s own requests reaches the client');
  const [code] = await p.exited;
  assert.equal(code, 1, 'the proxy exits after its server');
  await p.said(/closed its output and exited with status 3/);
  const q = await Raw.started({ log: p.log });
  await lapsesToUnknown(q, args, p);
});

check('server: its own request while a call runs, answered after the call ended, reaches it', async () => {
  const p = await Raw.started();
  const asked = p.until((m) => m.method === 'sampling/createMessage');
  const r = await p.act({ label: 'sample', mode: 'sample', idempotency_key: 'sample/1' });
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1);
  const request = await asked;
  assert.equal(request.id, 'hostile-sample-1', 'the server\'s id, unchanged');
  assert.equal(ledger('sample/1').state, 'committed');
  // The call is over; now the client answers the server's request.
  p.write(JSON.stringify({ jsonrpc: '2.0', id: request.id,
    result: { role: 'assistant', content: { type: 'text', text: 'late' }, model: 'm' } }));
  const sampled = p.log + '.sampled';
  await until(tmp, () => fs.existsSync(sampled) && fs.readFileSync(sampled, 'utf8').endsWith('\n'));
  assert.equal(JSON.parse(fs.readFileSync(sampled, 'utf8')).result.content.text, 'late');
  assert.equal(p.executions(), 1);
});

check('client: a cancelled call the server answers anyway is recorded, not answered; the retry is reused', async () => {
  // 2 s: the cancellation must reach the server before it answers, even
  // on a busy machine; a lease longer than that, as a cancelled call is
  // waited for one lease more.  Written raw: no answer is awaited for it.
  const p = await Raw.started({ args: ['--lease-ms', '5000'] });
  const args = { label: 'late', mode: 'late', ms: 2000, idempotency_key: 'late/1' };
  p.write(JSON.stringify({ jsonrpc: '2.0', id: 'late-call', method: 'tools/call',
    params: { name: 'act', arguments: args } }));
  await until(tmp, () => p.executions() === 1);
  p.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled',
    params: { requestId: 'late-call', reason: 'changed my mind' } }));
  await until(tmp, () => ledger('late/1').state === 'committed');
  assert.match(fs.readFileSync(p.log + '.cancelled', 'utf8'), /^"io\.idem\/proxy\/\d+"\n$/);
  const r = await p.act(args);
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1, 'reused: the first answer');
  assert.ok(!p.messages.some((m) => m.id === 'late-call'), 'a cancelled request is not answered');
  assert.equal(p.executions(), 1);
});

check('client: the end of its input while a call runs: the answer is waited for and recorded; a new proxy\'s retry is reused', async () => {
  const p = await Raw.started();
  const args = { label: 'eof', mode: 'late', ms: 500, idempotency_key: 'eof/1' };
  p.act(args).catch(() => {});
  await until(tmp, () => p.executions() === 1);
  const [code] = await p.stop();
  assert.equal(code, 0);
  assert.equal(ledger('eof/1').state, 'committed', 'recorded before the proxy exited');
  const q = await Raw.started({ log: p.log });
  const r = await q.act(args);
  assert.equal(JSON.parse(r.result.content[0].text).execution, 1);
  assert.equal(p.executions(), 1);
});

check('client: the end of its input while the server never answers: the proxy exits within a lease and more, the key lapses', async () => {
  const p = await Raw.started();
  const args = { label: 'eof-hang', mode: 'hang', idempotency_key: 'eof-hang/1' };
  p.act(args).catch(() => {});
  await until(tmp, () => p.executions() === 1);
  const t0 = Date.now();
  await p.stop();
  // A lease for the call, then the server's stdin closed (it exits).
  assert.ok(Date.now() - t0 < LEASE_MS + 5000, `exited after ${Date.now() - t0} ms`);
  const q = await Raw.started({ log: p.log });
  await lapsesToUnknown(q, args, p);
});

check('client: one key twice in one write, and one request id twice: one execution, every call answered', async () => {
  const p = await Raw.started();
  const call = (id) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call',
    params: { name: 'act', arguments: { label: 'piped', mode: 'late', ms: 200,
      idempotency_key: 'piped/1' } } });
  const answers = [p.expect(11), p.expect(12)];
  p.write(call(11) + '\n' + call(12));
  const [a, b] = await Promise.all(answers);
  assert.deepEqual(a.result, b.result);
  assert.equal(p.executions(), 1);
  // The same request id twice (a client's bug): both answered, once run.
  let seen = 0;
  const both = p.until((m) => m.id === 13 && ++seen === 2);
  p.write(call(13) + '\n' + call(13));
  await both;
  assert.equal(p.executions(), 1);
  assert.equal(ledger('piped/1').state, 'committed');
});

check('client: a call of a wrapped tool with a null id, or none: refused, never sent on unkeyed', async () => {
  const p = await Raw.started();
  const call = (id) => JSON.stringify({ jsonrpc: '2.0', ...(id !== undefined ? { id } : {}),
    method: 'tools/call', params: { name: 'act', arguments: { label: 'null', idempotency_key: 'null/1' } } });
  const refused = p.expect(null);
  p.write(call(null));
  const r = await refused;
  assert.equal(r.error?.code, -32600, JSON.stringify(r));
  p.write(call(undefined));
  // Lines are handled in order: once this is answered, the two were seen.
  await p.request('ping', {});
  assert.equal(p.executions(), 0);
  assert.equal(ledger('null/1'), null);
  await p.said(/tools\/call of act without an id: not sent on/);
  // A key the ledger holds, through a proxy whose listing says the tool
  // is read-only (PROXY_LOOKUP): a null id cannot be looked up on its own
  // thread either, so refused, never run a second time.
  const args = { label: 'nullro', idempotency_key: 'nullro/1' };
  assert.equal(JSON.parse((await p.act(args)).result.content[0].text).execution, 1);
  const q = await Raw.started({ log: p.log, env: { HOSTILE_ACT_READONLY: '1' } });
  const lookup = (id) => JSON.stringify({ jsonrpc: '2.0', ...(id !== undefined ? { id } : {}),
    method: 'tools/call', params: { name: 'act', arguments: args } });
  const again = q.expect(null);
  q.write(lookup(null));
  assert.equal((await again).error?.code, -32600);
  q.write(lookup(undefined));
  await q.request('ping', {});
  assert.equal(p.executions(), 1, 'nullro/1 ran once');
  assert.equal(ledger('nullro/1').state, 'committed');
});

check('client: arguments that are not an object are the request as they stand; none at all is {}', async () => {
  const p = await Raw.started();
  const call = (args) => p.request('tools/call', { name: 'act', idempotencyKey: 'odd-args/1',
    ...(args !== undefined ? { arguments: args } : {}) });
  const first = await call('abc');
  assert.equal(JSON.parse(first.result.content[0].text).execution, 1);
  assert.deepEqual((await call('abc')).result, first.result, 'the same: reused');
  for (const other of [['xyz'], 'xyz', undefined]) {
    const r = await call(other);
    assert.equal(facts(r)?.disposition, 'conflict', JSON.stringify(other));
  }
  // No arguments and {} are one request (MCP: arguments are optional).
  const none = await p.request('tools/call', { name: 'act', idempotencyKey: 'no-args/1' });
  assert.deepEqual((await p.request('tools/call', { name: 'act', arguments: {},
    idempotencyKey: 'no-args/1' })).result, none.result);
  assert.equal(p.executions(), 2);
  // Ended by its input, so that LeakSanitizer (run-tests.sh) looks.
  assert.equal((await p.stop())[0], 0);
});

check('client: a call with U+0000 in an object key: refused (Invalid params), never sent on or recorded; other such messages pass as they came', async () => {
  const p = await Raw.started();
  // jansson's parser refuses U+0000 in a key: the call cannot be keyed
  // as sent, and must not pass to the server as if unwrapped.
  for (let i = 0; i < 2; i++) {
    const r = await p.act({ 'la\u0000bel': 'x', idempotency_key: 'argnul/1' });
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
    assert.match(r.error.message, /U\+0000 in an object key/);
  }
  // In _meta, and in a batch (its other request held back, answered).
  const meta = await p.request('tools/call', { name: 'act', _meta: { 'm\u0000': 1 },
    arguments: { label: 'x', idempotency_key: 'argnul/2' } });
  assert.equal(meta.error?.code, -32602, JSON.stringify(meta));
  const batch = [p.expect(31), p.expect(32)];
  p.write(JSON.stringify([{ jsonrpc: '2.0', id: 31, method: 'tools/call',
    params: { name: 'act', arguments: { 'k\u0000': 1, idempotency_key: 'argnul/3' } } },
  { jsonrpc: '2.0', id: 32, method: 'ping' }]));
  const [b1, b2] = await Promise.all(batch);
  assert.match(b1.error?.message, /U\+0000 in an object key/, JSON.stringify(b1));
  assert.match(b2.error?.message, /send this message on its own/, JSON.stringify(b2));
  assert.equal(p.executions(), 0, 'never run');
  for (const key of ['argnul/1', 'argnul/2', 'argnul/3'])
    assert.equal(ledger(key), null);
  // Not a call: passes as it came (the server answers it).
  const ping = await p.request('ping', { 'p\u0000': 1 });
  assert.deepEqual(ping.result, {}, JSON.stringify(ping));
});

// The messages the proxy itself answered with an error (not the server).
const proxyErrors = (p) => p.messages.filter((m) => /^idem-mcp proxy/.test(m.error?.message ?? ''));

// The lines the server could not parse, or blank ones, as it read them.
function odd(p) {
  const file = p.log + '.odd';
  return fs.existsSync(file) ?
    fs.readFileSync(file, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)) : [];
}

check('client: valid JSON jansson cannot read (a lone surrogate\'s escape, 1e400, deep nesting) or invalid UTF-8, not a wrapped call: passes as it came (a sampling answer reaches the server, a ping is answered)', async () => {
  const p = await Raw.started();
  const asked = p.until((m) => m.method === 'sampling/createMessage');
  await p.act({ label: 'lone', mode: 'sample', idempotency_key: 'lone/1' });
  const request = await asked;
  // Text sliced in an emoji: JSON.stringify writes the half as \ud83d.
  const line = JSON.stringify({ jsonrpc: '2.0', id: request.id,
    result: { role: 'assistant', content: { type: 'text', text: 'late\ud83d' }, model: 'm' } });
  assert.ok(line.includes('late\\ud83d'), line);
  p.write(line);
  const sampled = p.log + '.sampled';
  await until(tmp, () => fs.existsSync(sampled) && fs.readFileSync(sampled, 'utf8').endsWith('\n'));
  assert.equal(JSON.parse(fs.readFileSync(sampled, 'utf8')).result.content.text, 'late\ud83d',
      'the server got the answer, its lone surrogate too');
  // Requests that are not calls: the server reads and answers each.
  const pings = [
    '{"jsonrpc":"2.0","id":61,"method":"ping","params":{"s":"\\ud83d"}}',
    '{"jsonrpc":"2.0","id":62,"method":"ping","params":{"s":"\\udc00\\ud83dx"}}',
    '{"jsonrpc":"2.0","id":63,"method":"ping","params":{"x":1e400}}',
    '{"jsonrpc":"2.0","id":64,"method":"ping","params":{"x":' + '['.repeat(3000) + ']'.repeat(3000) + '}}',
  ];
  for (const [i, text] of pings.entries()) {
    const answer = p.expect(61 + i);
    p.write(text);
    assert.deepEqual((await answer).result, {}, text.slice(0, 80));
  }
  const answer = p.expect(65);
  p.child.stdin.write(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":65,"method":"ping","params":{"s":"'),
    Buffer.from([0xff, 0xc3]), Buffer.from('"}}\n')]));
  assert.deepEqual((await answer).result, {}, 'invalid UTF-8');
  assert.deepEqual(proxyErrors(p), []);
  assert.equal(p.executions(), 1);
});

check('client: a wrapped call jansson reads only loosely (a lone surrogate, invalid UTF-8) is refused (-32602); one nothing reads (1e400, garbage) is a Parse error under its id; never sent on', async () => {
  const p = await Raw.started();
  for (let i = 0; i < 2; i++) {
    const r = await p.act({ label: 'x\ud83d', idempotency_key: 'lone/2' });
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
    assert.match(r.error.message, /cannot read it exactly/);
  }
  // A lenient server (Node decodes invalid UTF-8 as U+FFFD) would run
  // it unkeyed, again on every retry.
  const head = '{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"act","arguments":{"label":"';
  const tail = '","idempotency_key":"badutf/1"}}}\n';
  for (let i = 0; i < 2; i++) {
    const answer = p.expect(77);
    p.child.stdin.write(Buffer.concat([Buffer.from(head), Buffer.from([0xff, 0xc3]), Buffer.from(tail)]));
    const r = await answer;
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
  }
  // Node reads 1e400 as Infinity: it would run unkeyed.  Its method
  // escaped is still a tools/call.
  for (const [id, method] of [[78, 'tools/call'], [79, 'tools\\/call']]) {
    const answer = p.expect(id);
    p.write(`{"jsonrpc":"2.0","id":${id},"method":"${method}","params":{"name":"act","arguments":{"label":"x","n":1e400,"idempotency_key":"inf/1"}}}`);
    const r = await answer;
    assert.equal(r.error?.code, -32700, JSON.stringify(r));
    assert.match(r.error.message, /^idem-mcp proxy: a tools\/call that the proxy cannot read/);
  }
  // No id to be read: answered under a null id.
  const garbage = p.expect(null);
  p.write('{"jsonrpc":"2.0","method":"tools/call" this is not JSON');
  assert.match((await garbage).error?.message, /^idem-mcp proxy/);
  await p.request('ping', {});
  assert.equal(p.executions(), 0, 'never run');
  assert.deepEqual(odd(p), [], 'none reached the server');
  for (const key of ['lone/2', 'badutf/1', 'inf/1'])
    assert.equal(ledger(key), null);
  await p.said(/client: a tools\/call that cannot be read \(\d+ bytes\): answered Parse error, not sent on/);
});

check('client: a line nothing reads that shows no tools/call (an answer, garbage, a blank line) passes as it came: the server answers its own parse error, the proxy none', async () => {
  const p = await Raw.started();
  // An answer (no method): its id is no request of the client's.
  p.write('{"jsonrpc":"2.0","id":81,"result":{"x":1e400}}');
  const parseError = p.expect(null);
  p.write('{"jsonrpc":"2.0","id":82,"method":"ping" garbage');
  assert.equal((await parseError).error?.message, 'hostile: Parse error', 'the server\'s own');
  p.write('   ');
  p.child.stdin.write('\r\r\n');
  await p.request('ping', {});
  assert.deepEqual(proxyErrors(p), []);
  assert.ok(!p.messages.some((m) => m.id === 81 || m.id === 82));
  assert.deepEqual(odd(p), ['{"jsonrpc":"2.0","id":82,"method":"ping" garbage', '   ', '\r']);
});

check('client: a request with an id of the proxy\'s form that can pass only as its bytes (read loosely, or past 64 bits) is refused (-32600), never sent on', async () => {
  const p = await Raw.started();
  // Passed, its answer would be taken for that of the proxy's own request.
  const lines = [
    '{"jsonrpc":"2.0","id":"io.idem/proxy/1","method":"ping","params":{"s":"\\ud83d"}}',
    '{"jsonrpc":"2.0","id":"io.idem/proxy/2","method":"ping","params":{"n":123456789012345678901234567890}}',
  ];
  for (const [i, text] of lines.entries()) {
    const answer = p.expect(`io.idem/proxy/${i + 1}`);
    p.write(text);
    const r = await answer;
    assert.equal(r.error?.code, -32600, JSON.stringify(r));
    assert.match(r.error.message, /the proxy's own/);
  }
  const batch = [p.expect('io.idem/proxy/3'), p.expect(43)];
  p.write('[{"jsonrpc":"2.0","id":"io.idem/proxy/3","method":"ping","params":{"s":"\\ud83d"}},' +
      '{"jsonrpc":"2.0","id":43,"method":"ping"}]');
  const [b1, b2] = await Promise.all(batch);
  assert.equal(b1.error?.code, -32600, JSON.stringify(b1));
  assert.match(b2.error?.message, /send this message on its own/, JSON.stringify(b2));
  // Read exactly, such an id is sent under one of the proxy's own.
  assert.deepEqual((await p.request('ping', {}, 'io.idem/proxy/4')).result, {});
  await p.said(/refused, not sent on/);
});

check('client: a batch with a wrapped call and an integer past 64 bits is not sent: the call refused as on its own, never run', async () => {
  const p = await Raw.started();
  const batch = [p.expect(44), p.expect(45)];
  p.write('[{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"act","arguments":' +
      '{"label":"big","n":123456789012345678901234567890,"idempotency_key":"bigbatch/1"}}},' +
      '{"jsonrpc":"2.0","id":45,"method":"ping"}]');
  const [b1, b2] = await Promise.all(batch);
  assert.equal(facts(b1)?.disposition, 'refused_by_broker', JSON.stringify(b1));
  assert.match(b2.error?.message, /send this message on its own/, JSON.stringify(b2));
  assert.equal(p.executions(), 0, 'never run');
  assert.equal(ledger('bigbatch/1'), null);
});

check('client: a key with U+0000 in it is not a key idem takes: refused, never cut short at the U+0000 (two keys are never one)', async () => {
  const p = await Raw.started();
  for (const key of ['nk\u0000A', 'nk\u0000B']) {
    const r = await p.act({ label: 'nk', idempotency_key: key });
    assert.equal(facts(r)?.disposition, 'invalid_key', JSON.stringify(r));
    const q = await p.request('tools/call', { name: 'act', idempotencyKey: key,
      arguments: { label: 'nk' } });
    assert.equal(facts(q)?.disposition, 'invalid_key', JSON.stringify(q));
  }
  assert.equal(p.executions(), 0, 'never run');
  assert.equal(ledger('nk'), null, 'nothing kept under the key cut short');
});

check('server: a wrapped tool that turns read-only: a retry with its key is still answered from the ledger, here and through a new proxy; a fresh key passes unkeyed', async () => {
  const p = await Raw.started();
  const args = { label: 'flip', idempotency_key: 'flip/1' };
  const first = await p.act(args);
  assert.equal(JSON.parse(first.result.content[0].text).execution, 1);
  await p.request('tools/call', { name: 'configure', arguments: { readOnly: true } });
  const listed = (await p.request('tools/list', {})).result.tools.find((t) => t.name === 'act');
  assert.equal(listed.annotations.readOnlyHint, true, 'the server says so now');
  const again = await p.act(args);
  assert.deepEqual(again.result, first.result, 'the first answer');
  assert.equal(p.executions(), 1);
  // Without a key it is the read-only tool the server lists: it passes.
  await p.act({ label: 'flip' });
  assert.equal(p.executions(), 2);
  // A key the ledger does not hold: passed unchanged (the server sees
  // the key), run each time, and no ledger entry (SPEC: a passed tool).
  for (const n of [3, 4]) {
    const fresh = await p.act({ label: 'flip', idempotency_key: 'flip/2' });
    assert.equal(JSON.parse(fresh.result.content[0].text).execution, n);
    assert.equal(p.lastExecution().key, 'flip/2', 'the key reached the server');
  }
  assert.equal(ledger('flip/2'), null, 'a read with a fresh key is not recorded');
  // A read-only tool from the start, with a key: passed, nothing kept.
  await p.request('tools/call', { name: 'peek', arguments: { idempotency_key: 'peek/1' } });
  await p.request('tools/call', { name: 'peek', idempotencyKey: 'peek/2', arguments: {} });
  assert.equal(ledger('peek/1', 'mcp/hostile/peek'), null);
  assert.equal(ledger('peek/2', 'mcp/hostile/peek'), null);
  // A new proxy, whose first listing says read-only: still the ledger's.
  const q = await Raw.started({ log: p.log, env: { HOSTILE_ACT_READONLY: '1' } });
  assert.equal(q.tools.find((t) => t.name === 'act').annotations?.readOnlyHint, true);
  assert.deepEqual((await q.act(args)).result, first.result, 'the first answer');
  assert.equal(p.executions(), 4, 'flip/1 ran once');
  assert.equal(ledger('flip/1').state, 'committed');
});

check('server: a tool it never lists, called with a key: keyed, run once; a key that is not a string is none', async () => {
  const p = await Raw.started();
  const call = () => p.request('tools/call', { name: 'hidden',
    arguments: { label: 'hidden', idempotency_key: 'hidden/1' } });
  const first = await call();
  assert.equal(JSON.parse(first.result.content[0].text).execution, 1);
  assert.deepEqual((await call()).result, first.result);
  assert.equal(p.executions(), 1);
  assert.equal(ledger('hidden/1', 'mcp/hostile/hidden').state, 'committed');
  // A key that is not a string is no key: the call passes, run each time.
  for (const params of [{ arguments: { label: 'hidden', idempotency_key: null } },
    { arguments: { label: 'hidden' }, idempotencyKey: 7 }]) {
    const r = await p.request('tools/call', { name: 'hidden', ...params });
    assert.equal(r.result?.isError, undefined, JSON.stringify(r));
  }
  assert.equal(p.executions(), 3);
});
