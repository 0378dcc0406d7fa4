/* SPDX-License-Identifier: ISC */
// proxy.test.mjs: `idem-mcp proxy` driven by the official MCP TypeScript
// SDK's client (Client + StdioClientTransport) against a real idemd, in
// front of real servers from the npm registry (server-filesystem,
// server-everything) and of tests/mcp/proxy_server.mjs, which counts its
// executions and crashes or hangs on request.  Run by tests/mcp/proxy.sh
// (through sdk.sh, which installs the packages into the build tree and
// sets IDEMD, IDEM_MCP and IDEM_MCP_NODE_PREFIX; make check sets IDEMCTL).
//
// What it proves (SPEC.md, "The MCP proxy"): everything but a wrapped
// call passes (initialize with the capability added, tools/list, a
// read-only tool without a key, progress, logging notifications, and the
// server's own sampling, elicitation and roots requests with their
// answers); a non-idempotent tool of a real server acts once per key and
// answers every retry the same (move_file, edit_file); conflict; a result
// larger than the ledger keeps is answered whole, then its stand-in; and
// through every window (8 concurrent calls with one key, the proxy killed
// after forwarding, the server killed mid-call, the broker restarted or
// down) the tool acts at most once per key, judged by the server's own
// count of executions.

import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import readline from 'node:readline';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

import { SdkRun } from './sdk_run.mjs';

const IDEMD = process.env.IDEMD;
const IDEMCTL = process.env.IDEMCTL;
const IDEM_MCP = process.env.IDEM_MCP;
const PREFIX = process.env.IDEM_MCP_NODE_PREFIX;
assert.ok(IDEMD && IDEM_MCP && PREFIX,
    'IDEMD, IDEM_MCP and IDEM_MCP_NODE_PREFIX must be set (run tests/mcp/proxy.sh)');

const require = createRequire(path.join(PREFIX, 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { McpError, CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema,
  LoggingMessageNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MODULES = path.join(PREFIX, 'node_modules', '@modelcontextprotocol');
const FILESYSTEM = [process.execPath,
  path.join(MODULES, 'server-filesystem', 'dist', 'index.js')];
const EVERYTHING = [process.execPath,
  path.join(MODULES, 'server-everything', 'dist', 'index.js'), 'stdio'];
const OURS = [process.execPath, path.join(HERE, 'proxy_server.mjs')];
const LEASE_MS = 1000;	// short, so that lapsed leases come quickly

const run = new SdkRun('idem-mcp-proxy.');
const { tmp, root, broker } = run;
const check = run.check.bind(run);
const files = path.join(tmp, 'files');
const sessions = [];

// ---- the proxy and its client ----------------------------------------------

// A connected SDK client on a new proxy in front of server (argv);
// log: the file where proxy_server.mjs counts executions.
async function connect(server, { args = [], capabilities = {}, log = null } = {}) {
  const transport = new StdioClientTransport({
    command: IDEM_MCP,
    args: ['proxy', '--root', root, ...args, '--', ...server],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      IDEM_MCP_NODE_PREFIX: PREFIX,
      ...(log !== null ? { PROXY_SERVER_LOG: log } : {}),
    },
    stderr: 'pipe',
  });
  // received: when a test sets it to an array, every message from the
  // proxy in the order it came, before the SDK handles it.
  const session = { stderr: '', transport, closed: false, initialized: null,
    received: null };
  // initialize's result as it came, before the SDK's schema strips what
  // it does not know (capabilities.tools.idempotency).
  let deliver = null;
  const counted = new WeakSet();
  Object.defineProperty(transport, 'onmessage', {
    set(f) { deliver = f; },
    // Bound to the handler of the moment: the SDK chains its own on
    // the one it finds, which must not call back into the newer one.
    get() {
      const to = deliver;
      return (m) => {
        if (m.result?.serverInfo !== undefined && session.initialized === null)
          session.initialized = m.result;
        // Once a message: the chained handlers pass it through here twice.
        if (session.received !== null && !counted.has(m)) {
          counted.add(m);
          session.received.push(m);
        }
        to?.(m);
      };
    },
  });
  const client = new Client({ name: 'idem-proxy-test', version: '1.0.0' }, { capabilities });
  client.onclose = () => { session.closed = true; };
  session.client = client;
  sessions.push(session);
  transport.stderr?.on('data', (chunk) => { session.stderr += chunk; });
  await client.connect(transport);
  return session;
}

async function listAll(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return new Map(tools.map((t) => [t.name, t]));
}

const call = (session, name, args, options) =>
  session.client.callTool({ name, arguments: args }, undefined, options);
const facts = (result) => result._meta?.['io.idem/proxy'];
const executions = (log) => fs.existsSync(log) ?
  fs.readFileSync(log, 'utf8').split('\n').filter((l) => l !== '').length : 0;

// Resolves once cond() holds (checked as fs.watch sees the file change).
async function until(file, cond, ms = 20000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `timed out waiting on ${file}`);
    await new Promise((resolve) => {
      const dir = path.dirname(file);
      const watcher = fs.watch(dir, () => { watcher.close(); resolve(); });
      // The change may have come before the watch: look again soon.
      setTimeout(() => { watcher.close(); resolve(); }, 50);
    });
  }
}

// Retry a call (the same key and arguments) while the proxy says
// in_progress (retryable), as an agent would; the last answer.
async function retryWhileInProgress(session, name, args) {
  for (let i = 0; i < 100; i++) {
    const result = await call(session, name, args);
    if (facts(result)?.disposition !== 'in_progress')
      return result;
  }
  assert.fail('still in_progress after 100 retries');
}

before(async () => {
  fs.mkdirSync(root);
  fs.mkdirSync(files);
  await broker.start();
});

after(async () => {
  for (const s of sessions)
    await s.client.close().catch(() => {});
  await broker.stop().catch(() => {});
  run.noSanitizerReports(sessions.map((s) => s.stderr), 'idem-mcp proxy');
  run.finish();
});

// ---- server-filesystem ------------------------------------------------------

check('filesystem: initialize and tools/list pass, wrapped tools gain idempotency_key', async () => {
  const s = await connect([...FILESYSTEM, files]);
  assert.equal(s.client.getServerVersion().name, 'secure-filesystem-server');
  assert.deepEqual(s.initialized.capabilities.tools.idempotency, {},
      'the proxy advertises tools.idempotency');
  assert.equal(s.initialized.capabilities.tools.listChanged, true, "the server's own");
  const tools = await listAll(s.client);
  for (const name of ['move_file', 'edit_file']) {
    const t = tools.get(name);
    assert.equal(t.annotations.idempotentHint, true, `${name}: idempotentHint`);
    assert.equal(t.inputSchema.properties.idempotency_key.type, 'string');
    assert.match(t.inputSchema.properties.idempotency_key.description, /same key/);
    assert.ok(t.inputSchema.required.includes('idempotency_key'), `${name}: key required`);
  }
  // Read-only and idempotent tools pass as the server lists them.
  for (const name of ['read_text_file', 'list_directory', 'write_file', 'create_directory'])
    assert.equal(tools.get(name).inputSchema.properties.idempotency_key, undefined, name);
  fs.writeFileSync(path.join(files, 'r.txt'), 'read me\n');
  const read = await call(s, 'read_text_file', { path: path.join(files, 'r.txt') });
  assert.equal(read.isError, undefined);
  assert.equal(read.content[0].text, 'read me\n');
});

check('filesystem: move_file twice with one key moves once, answers twice the same; other arguments conflict', async () => {
  const s = await connect([...FILESYSTEM, files]);
  await listAll(s.client);
  const a = path.join(files, 'a.txt');
  const b = path.join(files, 'b.txt');
  fs.writeFileSync(a, 'A\n');
  const args = { source: a, destination: b, idempotency_key: 'move-a-to-b/1' };
  const first = await call(s, 'move_file', args);
  assert.ok(!first.isError, JSON.stringify(first));
  assert.ok(fs.existsSync(b) && !fs.existsSync(a));
  // Put a new file where the first came from: a second execution would
  // move it over b.
  fs.writeFileSync(a, 'second\n');
  const again = await call(s, 'move_file', args);
  assert.deepEqual(again, first);
  assert.equal(fs.readFileSync(b, 'utf8'), 'A\n');
  assert.equal(fs.readFileSync(a, 'utf8'), 'second\n');
  // The same key with other arguments: a tool error, nothing moved.
  const other = await call(s, 'move_file', { ...args, destination: path.join(files, 'c.txt') });
  assert.equal(other.isError, true);
  assert.equal(facts(other).disposition, 'conflict');
  assert.match(other.content[0].text, /other arguments.*new key/s);
  assert.ok(!fs.existsSync(path.join(files, 'c.txt')));
});

check('filesystem: edit_file twice with one key edits once; a new key edits again', async () => {
  const s = await connect([...FILESYSTEM, files]);
  await listAll(s.client);
  const f = path.join(files, 'e.txt');
  fs.writeFileSync(f, 'count: X\n');
  const args = { path: f, edits: [{ oldText: 'X', newText: 'XX' }], idempotency_key: 'double-x/1' };
  const first = await call(s, 'edit_file', args);
  assert.ok(!first.isError, JSON.stringify(first));
  const again = await call(s, 'edit_file', args);
  assert.deepEqual(again, first);
  assert.equal(fs.readFileSync(f, 'utf8'), 'count: XX\n');
  await call(s, 'edit_file', { ...args, idempotency_key: 'double-x/2' });
  assert.equal(fs.readFileSync(f, 'utf8'), 'count: XXX\n');
});

check('filesystem: a large read through a wrapped tool is answered whole, then its stand-in', async () => {
  const s = await connect([...FILESYSTEM, files], { args: ['--wrap', 'read_text_file'] });
  const tools = await listAll(s.client);
  assert.ok(tools.get('read_text_file').inputSchema.required.includes('idempotency_key'));
  const big = path.join(files, 'big.txt');
  const text = 'line of a large file\n'.repeat(10000);	// 210 KB
  fs.writeFileSync(big, text);
  const args = { path: big, idempotency_key: 'read-big/1' };
  const first = await call(s, 'read_text_file', args);
  assert.ok(!first.isError);
  assert.equal(first.content[0].text, text, 'the first answer is the whole result');
  const again = await call(s, 'read_text_file', args);
  const f = facts(again);
  assert.equal(f.disposition, 'reused_result_not_kept');
  assert.equal(f.retryable, false);
  // read_text_file has an outputSchema: without its structured content
  // the stand-in must be a tool error (MCP), saying it was applied.
  assert.equal(again.isError, true);
  assert.match(again.content[0].text, /already applied.*not performed again/s);
  assert.match(again.content[0].text, /sha256 [0-9a-f]{64}/);
  assert.ok(again.content[0].text.includes('line of a large file\nline of a large file'),
      'the start of its text');
});

// ---- server-everything ------------------------------------------------------

check('everything: progress, logging, sampling, elicitation and roots pass through', async () => {
  let samplings = 0;
  let elicitations = 0;
  let rootsAsked = 0;
  const s = await connect(EVERYTHING, {
    args: ['--wrap', 'trigger-long-running-operation'],
    capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
  });
  s.client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    samplings++;
    assert.match(req.params.messages[0].content.text, /say hi/);
    return { role: 'assistant', content: { type: 'text', text: 'hi from the client' },
      model: 'test-model', stopReason: 'endTurn' };
  });
  s.client.setRequestHandler(ElicitRequestSchema, async () => {
    elicitations++;
    return { action: 'accept', content: { name: 'Ada', check: true, email: 'ada@example.org',
      integer: 3, number: 1.5, untitledSingleSelectEnum: 'Option 1' } };
  });
  s.client.setRequestHandler(ListRootsRequestSchema, async () => {
    rootsAsked++;
    return { roots: [{ uri: 'file:///tmp/idem-root', name: 'idem root' }] };
  });
  const logged = [];
  s.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logged.push(n); });
  const tools = await listAll(s.client);

  // Progress through a wrapped call: the progressToken went downstream
  // with the external_key beside it, and the notifications came back,
  // in order and before the answer.  Judged on the messages as they
  // arrived: the SDK hands a notification to its handler a microtask
  // after it reads it but settles an answer at once, so when the last
  // notification and the answer arrive in one read (a loaded machine)
  // its onprogress never sees that notification, whatever the proxy did.
  const received = [];
  s.received = received;
  const op = await call(s, 'trigger-long-running-operation',
      { duration: 0.3, steps: 3, idempotency_key: 'long-op/1' },
      { onprogress: () => {} });
  s.received = null;
  assert.match(op.content[0].text, /Long running operation completed/);
  const answer = received.findIndex((m) => m.id !== undefined &&
      /Long running operation completed/.test(m.result?.content?.[0]?.text));
  assert.ok(answer >= 0, 'the answer was among the messages received');
  const token = received[answer].id;
  const progress = received.slice(0, answer)
      .filter((m) => m.method === 'notifications/progress' && m.params.progressToken === token)
      .map((m) => m.params.progress);
  assert.deepEqual(progress, [1, 2, 3]);
  assert.ok(!received.slice(answer + 1).some((m) => m.method === 'notifications/progress'),
      'no progress after the answer');

  // Sampling inside a wrapped call: asked once; the retry is the same
  // answer and asks nothing.
  const sampling = tools.get('trigger-sampling-request');
  assert.ok(sampling.inputSchema.required.includes('idempotency_key'));
  const sargs = { prompt: 'say hi', maxTokens: 10, idempotency_key: 'sample/1' };
  const first = await call(s, 'trigger-sampling-request', sargs);
  assert.match(first.content[0].text, /hi from the client/);
  assert.equal(samplings, 1);
  assert.deepEqual(await call(s, 'trigger-sampling-request', sargs), first);
  assert.equal(samplings, 1, 'the retry did not sample again');

  // Elicitation likewise.
  const e = await call(s, 'trigger-elicitation-request', { idempotency_key: 'elicit/1' });
  assert.match(JSON.stringify(e.content), /Ada/);
  assert.equal(elicitations, 1);
  await call(s, 'trigger-elicitation-request', { idempotency_key: 'elicit/1' });
  assert.equal(elicitations, 1);

  // Roots: the server's roots/list request and its answer.
  const rootsTool = tools.get('get-roots-list');
  const key = rootsTool.inputSchema.required?.includes('idempotency_key') ?
    { idempotency_key: 'roots/1' } : {};
  const roots = await call(s, 'get-roots-list', key);
  assert.match(JSON.stringify(roots.content), /idem-root/);
  assert.ok(rootsAsked >= 1);

  // Logging notifications, server to client.
  await s.client.setLoggingLevel('debug');
  const toggle = tools.get('toggle-simulated-logging');
  const tkey = toggle.inputSchema.required?.includes('idempotency_key') ?
    { idempotency_key: 'logging-on/1' } : {};
  await call(s, 'toggle-simulated-logging', tkey);
  const deadline = Date.now() + 20000;
  while (logged.length === 0 && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(logged.length > 0, 'a logging notification came through');
});

// ---- our server: the windows ---------------------------------------------------

let logs = 0;
const newLog = () => path.join(tmp, `executions-${++logs}`);

check('ours: the key is stripped, the external_key is in _meta; SEP-3182 idempotencyKey too', async () => {
  const log = newLog();
  const s = await connect(OURS, { log });
  const tools = await listAll(s.client);
  assert.ok(tools.get('act').inputSchema.required.includes('idempotency_key'));
  assert.equal(tools.get('peek').inputSchema.properties.idempotency_key, undefined);
  const r = await call(s, 'act', { label: 'seen', idempotency_key: 'seen/1' });
  const seen = JSON.parse(r.content[0].text);
  assert.deepEqual(seen.arguments, { label: 'seen' });
  assert.match(seen.meta['io.idem/external_key'], /^.{8,}$/);
  // The key as params.idempotencyKey: the same protection.
  const { CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');
  const viaParam = () => s.client.request({ method: 'tools/call',
    params: { name: 'act', arguments: { label: 'param' }, idempotencyKey: 'param/1' } },
  CallToolResultSchema);
  const p1 = await viaParam();
  assert.deepEqual(await viaParam(), p1);
  assert.equal(executions(log), 2);
  // Both given: params.idempotencyKey is the key (SPEC.md), the argument
  // is stripped all the same.
  const both = await s.client.request({ method: 'tools/call',
    params: { name: 'act', arguments: { label: 'param', idempotency_key: 'other/1' },
      idempotencyKey: 'param/1' } }, CallToolResultSchema);
  assert.deepEqual(both, p1);
  assert.equal(executions(log), 2);
  // No key: a tool error, nothing run.
  const none = await call(s, 'act', { label: 'nokey' });
  assert.equal(none.isError, true);
  assert.equal(facts(none).disposition, 'invalid_key');
  assert.equal(executions(log), 2);
});

check('ours: a call before any tools/list is still wrapped (the proxy lists itself); arguments idem cannot key', async () => {
  const log = newLog();
  const s = await connect(OURS, { log });
  const none = await call(s, 'act', { label: 'unlisted' });
  assert.equal(facts(none).disposition, 'invalid_key', 'wrapped without a listing');
  const args = { label: 'unlisted', idempotency_key: 'unlisted/1' };
  const first = await call(s, 'act', args);
  assert.deepEqual(await call(s, 'act', args), first);
  assert.equal((await call(s, 'peek', {})).content[0].text, '1');
  // An integer past 2^53 has no exact digest: refused, not run.
  const huge = await call(s, 'act', { label: 'huge', n: 2 ** 60, idempotency_key: 'huge/1' });
  assert.equal(facts(huge).disposition, 'refused_by_broker');
  assert.equal(facts(huge).retryable, false);
  assert.equal(executions(log), 1);
});

check('raw lines: a colliding id keeps its own; reused answers are the same bytes; unkeyable arguments refused, not run', async () => {
  const log = newLog();
  const child = spawn(IDEM_MCP, ['proxy', '--root', root, '--', ...OURS], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', IDEM_MCP_NODE_PREFIX: PREFIX,
      PROXY_SERVER_LOG: log },
  });
  const waiting = new Map();
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const id = JSON.stringify(JSON.parse(line).id);
    waiting.get(id)?.(line);
    waiting.delete(id);
  });
  // Send a line as is; resolves with the answer's line, as it came.
  const send = (id, line) => new Promise((resolve) => {
    waiting.set(JSON.stringify(id), resolve);
    child.stdin.write(line + '\n');
  });
  const expect = (id) => new Promise((resolve) => waiting.set(JSON.stringify(id), resolve));
  await send(1, '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}');
  child.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
  await send(2, '{"jsonrpc":"2.0","id":2,"method":"tools/list"}');
  // An id in the proxy's own form, escapes, a 1.5e0: the first answer...
  const first = await send('io.idem/proxy/1', '{"jsonrpc":"2.0","id":"io.idem/proxy/1","method":"tools/call","params":{"name":"act","arguments":{"label":"\\u00e9\\u2028\\"\\\\ \\ud83d\\ude00","ms":1.5e0,"idempotency_key":"bytes/1"}}}');
  assert.equal(JSON.parse(first).id, 'io.idem/proxy/1');
  // ... and the retry's, members in another order, are the same bytes.
  const again = await send(3, '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"act","arguments":{"idempotency_key":"bytes/1","ms":1.5,"label":"\\u00e9\\u2028\\"\\\\ \\ud83d\\ude00"}}}');
  const result = (line) => line.slice(line.indexOf('"result":'));
  assert.equal(result(again), result(first));
  // Past 64 bits (jansson cannot read it exactly) and NUL: refused here.
  const big = JSON.parse(await send(4, '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"act","arguments":{"label":"big","n":123456789012345678901234567890,"idempotency_key":"big/1"}}}'));
  assert.equal(big.id, 4);
  assert.equal(big.result._meta['io.idem/proxy'].disposition, 'refused_by_broker');
  const nul = JSON.parse(await send(5, '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"act","arguments":{"label":"a\\u0000b","idempotency_key":"nul/1"}}}'));
  assert.equal(nul.result._meta['io.idem/proxy'].disposition, 'refused_by_broker');
  assert.equal(executions(log), 1);
  // A batch (2025-03-26) is taken apart: its wrapped calls are keyed.
  const answers = [6, 7, 8].map(expect);
  child.stdin.write('[{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"act","arguments":{"label":"batched","idempotency_key":"batch/1"}}},' +
      '{"jsonrpc":"2.0","id":7,"method":"ping"},' +
      '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"act","arguments":{"label":"batched","idempotency_key":"batch/1"}}}]\n');
  const [a6, a7, a8] = (await Promise.all(answers)).map((l) => JSON.parse(l));
  assert.deepEqual(a7.result, {});
  assert.deepEqual(a6.result, a8.result);
  assert.equal(JSON.parse(a6.result.content[0].text).arguments.idempotency_key, undefined);
  assert.equal(executions(log), 2);
  const exited = once(child, 'exit');
  child.stdin.end();
  const [code] = await exited;
  assert.equal(code, 0, 'the proxy exits 0 at the end of its input');
});

check('ours: 8 concurrent calls with one key execute once and answer the same; 100 keys at once each once', async () => {
  const log = newLog();
  const s = await connect(OURS, { log });
  await listAll(s.client);
  const args = { label: 'eight', mode: 'slow', ms: 300, idempotency_key: 'eight/1' };
  const results = await Promise.all(Array.from({ length: 8 }, () => call(s, 'act', args)));
  assert.equal(executions(log), 1);
  for (const r of results)
    assert.deepEqual(r, results[0]);
  // Meanwhile pass-through kept moving: peek answers at once.
  assert.equal((await call(s, 'peek', {})).content[0].text, '1');
  // More calls at once than the broker lets one process connect (64):
  // each holds a connection only while it talks to the broker.
  const many = await Promise.all(Array.from({ length: 100 }, (_, i) =>
    call(s, 'act', { label: `many-${i}`, mode: 'slow', ms: 300, idempotency_key: `many/${i}` })));
  for (const r of many)
    assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(executions(log), 101);
});

check('ours: a JSON-RPC error releases the key (passed through); isError is kept', async () => {
  const log = newLog();
  const s = await connect(OURS, { log });
  await listAll(s.client);
  const refuse = { label: 'no', mode: 'refuse', idempotency_key: 'refuse/1' };
  await assert.rejects(call(s, 'act', refuse), (e) => e instanceof McpError && /refused no/.test(e.message));
  await assert.rejects(call(s, 'act', refuse), McpError);
  assert.equal(fs.readFileSync(log + '.refused', 'utf8'), 'no\nno\n',
      'not_applied: the retry reached the server again');
  const fail = { label: 'failing', mode: 'fail', idempotency_key: 'fail/1' };
  const f1 = await call(s, 'act', fail);
  assert.equal(f1.isError, true);
  assert.deepEqual(await call(s, 'act', fail), f1);
  assert.equal(executions(log), 1, 'a tool error ran: committed, not run again');
});

check('ours: the proxy killed after forwarding: the retry is outcome_unknown, never a second execution', async () => {
  const log = newLog();
  const args = { label: 'hang', mode: 'hang', idempotency_key: 'hang/1' };
  const s1 = await connect(OURS, { log, args: ['--lease-ms', String(LEASE_MS)] });
  await listAll(s1.client);
  const pending = call(s1, 'act', args).catch(() => null);
  await until(log, () => executions(log) === 1);
  process.kill(s1.transport.pid, 'SIGKILL');
  await pending;
  const s2 = await connect(OURS, { log, args: ['--lease-ms', String(LEASE_MS)] });
  await listAll(s2.client);
  const r = await retryWhileInProgress(s2, 'act', { ...args, mode: 'hang' });
  assert.equal(r.isError, true);
  assert.equal(facts(r).disposition, 'outcome_unknown');
  assert.match(r.content[0].text, /may have acted.*idemctl resolve 'mcp\/idem-test-server\/act' 'hang\/1'/s);
  assert.equal(executions(log), 1);
  // Settled by an operator: the retry answers what they recorded.
  if (IDEMCTL) {
    const result = { content: [{ type: 'text', text: 'settled by hand' }] };
    execFileSync(IDEMCTL, ['--root', root, 'resolve', '--result', JSON.stringify(result),
      'mcp/idem-test-server/act', 'hang/1', 'applied']);
    assert.deepEqual(await call(s2, 'act', args), result);
    assert.equal(executions(log), 1);
  }
});

check('ours: a wrapped call in flight holds nothing up; cancelled, it is sent on under the proxy\'s id and never runs twice', async () => {
  const log = newLog();
  const s = await connect(OURS, { log, args: ['--lease-ms', String(LEASE_MS)] });
  await listAll(s.client);
  const args = { label: 'cancel', mode: 'slow', ms: 3000, idempotency_key: 'cancel/1' };
  const abort = new AbortController();
  const pending = call(s, 'act', args, { signal: abort.signal });
  await until(log, () => executions(log) === 1);
  // While it runs, nothing waits behind it: a pass-through call and
  // another wrapped one are answered.
  assert.equal((await call(s, 'peek', {})).content[0].text, '1');
  const other = await call(s, 'act', { label: 'meanwhile', idempotency_key: 'meanwhile/1' });
  assert.equal(JSON.parse(other.content[0].text).execution, 2);
  abort.abort('changed my mind');
  await assert.rejects(pending);
  const cancelled = () => fs.existsSync(log + '.cancelled') ?
    fs.readFileSync(log + '.cancelled', 'utf8') : '';
  await until(log, () => cancelled().endsWith('\n'));
  assert.match(cancelled(), /^"io\.idem\/proxy\/\d+"\n$/,
      'the server heard it under the id the call went downstream with');
  // The server heard the cancellation (the SDK's server then answers
  // nothing): the call is left to lapse, never performed again.
  const r = await retryWhileInProgress(s, 'act', args);
  assert.equal(facts(r).disposition, 'outcome_unknown');
  assert.equal(executions(log), 2);
});

check('ours: a call longer than its lease keeps it alive (effect_extend): another caller waits, never outcome_unknown', async () => {
  const log = newLog();
  // A lease long enough for a loaded 2-core host's scheduling (600 ms
  // lapsed there: the proxy's tick, its extension and the broker's
  // worker each waiting their turn); the call outlasts the wait below
  // by more than a lease.
  const lease = 1000;
  const args = { label: 'long', mode: 'slow', ms: 4000, idempotency_key: 'long/1' };
  const a = await connect(OURS, { log, args: ['--lease-ms', String(lease)] });
  const b = await connect(OURS, { log, args: ['--lease-ms', String(lease)] });
  await listAll(a.client);
  await listAll(b.client);
  const first = call(a, 'act', args);
  await until(log, () => executions(log) === 1);
  // Time itself is what is tested: two and a half leases pass, which
  // without an extension would have lapsed into outcome_unknown.
  await new Promise((resolve) => setTimeout(resolve, 2.5 * lease));
  const meanwhile = await call(b, 'act', args);
  assert.equal(facts(meanwhile).disposition, 'in_progress', JSON.stringify(meanwhile));
  assert.equal(facts(meanwhile).retryable, true);
  const r = await first;
  assert.ok(!r.isError, JSON.stringify(r));
  assert.deepEqual(await call(b, 'act', args), r, 'the retry gets the first answer');
  assert.equal(executions(log), 1);
});

check('ours: the server killed mid-call: a tool error, the proxy exits; the retry never runs it again', async () => {
  const log = newLog();
  const args = { label: 'crash', mode: 'crash', idempotency_key: 'crash/1' };
  const s1 = await connect(OURS, { log, args: ['--lease-ms', String(LEASE_MS)] });
  await listAll(s1.client);
  const r1 = await call(s1, 'act', args);
  assert.equal(r1.isError, true);
  assert.equal(facts(r1).disposition, 'server_exited');
  assert.match(r1.content[0].text, /may have acted/);
  // The proxy says so and exits.
  const deadline = Date.now() + 10000;
  while (!s1.closed && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 20));
  assert.ok(s1.closed, 'the proxy exited after its server');
  assert.match(s1.stderr, /server .* closed its output/);
  const s2 = await connect(OURS, { log, args: ['--lease-ms', String(LEASE_MS)] });
  await listAll(s2.client);
  const r2 = await retryWhileInProgress(s2, 'act', args);
  assert.equal(facts(r2).disposition, 'outcome_unknown');
  assert.equal(executions(log), 1);
});

check('ours: the broker restarted between two calls, and down: once per key', async () => {
  const log = newLog();
  const s = await connect(OURS, { log });
  await listAll(s.client);
  const args = { label: 'restart', idempotency_key: 'restart/1' };
  const first = await call(s, 'act', args);
  await broker.stop();
  await broker.start();
  assert.deepEqual(await call(s, 'act', args), first, 'reused after the restart');
  assert.equal(executions(log), 1);
  // Down: a retryable tool error, the server not called.
  await broker.stop();
  const down = await call(s, 'act', { label: 'down', idempotency_key: 'down/1' });
  assert.equal(down.isError, true);
  assert.equal(facts(down).disposition, 'broker_unavailable');
  assert.equal(facts(down).retryable, true);
  assert.equal(executions(log), 1);
  await broker.start();
  const up = await call(s, 'act', { label: 'down', idempotency_key: 'down/1' });
  assert.ok(!up.isError);
  assert.deepEqual(await call(s, 'act', { label: 'down', idempotency_key: 'down/1' }), up);
  assert.equal(executions(log), 2);
});

check('ours: the broker down when the server answers: the complete is sent again until it is back', async () => {
  const log = newLog();
  const s = await connect(OURS, { log, args: ['--lease-ms', '20000'] });
  await listAll(s.client);
  const args = { label: 'late', mode: 'slow', ms: 300, idempotency_key: 'late/1' };
  const pending = call(s, 'act', args);
  await until(log, () => executions(log) === 1);
  await broker.stop();
  // The server answers now; the answer waits for its record.
  const deadline = Date.now() + 20000;
  while (!/late\/1: complete: .*sent again/.test(s.stderr) && Date.now() < deadline)
    await new Promise((resolve) => {
      s.transport.stderr.once('data', resolve);
      setTimeout(resolve, 1000);
    });
  assert.match(s.stderr, /complete: .*sent again until the broker answers/);
  await broker.start();
  const r = await pending;
  assert.ok(!r.isError, JSON.stringify(r));
  assert.equal(JSON.parse(r.content[0].text).execution, 1);
  assert.deepEqual(await call(s, 'act', args), r, 'recorded: the retry is reused');
  assert.equal(executions(log), 1);
});

check('ours: --scope gives the keys a namespace of their own', async () => {
  const log = newLog();
  const args = { label: 'scoped', idempotency_key: 'scoped/1' };
  const a = await connect(OURS, { log, args: ['--scope', 'agent-a'] });
  const b = await connect(OURS, { log, args: ['--scope', 'agent-b'] });
  await listAll(a.client);
  await listAll(b.client);
  await call(a, 'act', args);
  await call(a, 'act', args);
  await call(b, 'act', args);
  assert.equal(executions(log), 2, 'one per scope');
  const other = await call(b, 'act', { ...args, label: 'other' });
  assert.match(facts(other).effect_kind, /^agent-b\/mcp\/idem-test-server\/act$/);
});
