/* SPDX-License-Identifier: ISC */
// mcp_proxy.mjs: what `idem-mcp proxy` adds to a tool call's latency
// (doc/mcp-proxy.md, "Cost").  It runs tests/mcp/proxy_server.mjs once
// directly and once behind the proxy (with a fresh idemd), speaks raw
// JSON-RPC lines to each (no SDK on the measuring side, so nothing but
// the two processes differs), and times, per call, from the write of the
// request to the read of its answer:
//   pass-through  `peek` (readOnlyHint: passed unchanged)
//   wrapped       `act` with a new idempotency_key per call (effect_begin,
//                 forward, effect_complete), against `act` called directly
// with K calls in flight at once (K=1, K=8).  Prints p50 and p99 of each
// and the difference to the direct server.
//
//   IDEMD=build/broker/idemd IDEM_MCP=build/contrib/mcp/idem-mcp \
//   IDEM_MCP_NODE_PREFIX=build/tests/mcp node tests/bench/mcp_proxy.mjs [COUNT]
//
// (IDEM_MCP_NODE_PREFIX: where tests/mcp/sdk.sh installed the SDK.)  The
// broker's workspace is made under $IDEM_BENCH_DIR (default: the temporary
// directory): on a tmpfs (/dev/shm) its fdatasyncs cost nothing and what
// is left is the proxy's own work.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const IDEMD = process.env.IDEMD;
const IDEM_MCP = process.env.IDEM_MCP;
const PREFIX = process.env.IDEM_MCP_NODE_PREFIX && path.resolve(process.env.IDEM_MCP_NODE_PREFIX);
if (!IDEMD || !IDEM_MCP || !PREFIX) {
  console.error('set IDEMD, IDEM_MCP and IDEM_MCP_NODE_PREFIX (see the top of this file)');
  process.exit(2);
}
const COUNT = Number(process.argv[2] ?? 2000);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER = [process.execPath, path.join(HERE, '..', 'mcp', 'proxy_server.mjs')];
const BENCH_DIR = process.env.IDEM_BENCH_DIR ?? os.tmpdir();
const tmp = fs.mkdtempSync(path.join(BENCH_DIR, 'idem-mcp-bench.'));
const root = path.join(tmp, 'root');
fs.mkdirSync(root);
const env = { ...process.env, IDEM_MCP_NODE_PREFIX: PREFIX, PROXY_SERVER_LOG: '/dev/null' };

async function startBroker() {
  const child = spawn(IDEMD, ['--root', root, '--workers', '2', '--ready-fd', '3'],
      { stdio: ['ignore', 'ignore', 'inherit', 'pipe'] });
  await new Promise((resolve, reject) => {
    child.stdio[3].on('data', (d) => { if (String(d).includes('ready')) resolve(); });
    child.on('exit', (code) => reject(new Error(`idemd exited ${code}`)));
  });
  child.removeAllListeners('exit');
  return child;
}

// A JSON-RPC peer over a child's stdio: request() resolves with the answer.
function peer(argv) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'], env });
  const waiting = new Map();
  let next = 0;
  child.on('exit', (code, signal) => {
    if (waiting.size > 0) {
      console.error(`${argv.join(' ')} exited (${code ?? signal}) with calls unanswered`);
      process.exit(1);
    }
  });
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line);
    const w = waiting.get(msg.id);
    if (w !== undefined) {
      waiting.delete(msg.id);
      w(msg);
    }
  });
  return {
    child,
    request(method, params) {
      const id = ++next;
      return new Promise((resolve) => {
        waiting.set(id, resolve);
        child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
      });
    },
    notify(method) {
      child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method }) + '\n');
    },
  };
}

async function open(argv) {
  const p = peer(argv);
  await p.request('initialize', { protocolVersion: '2025-06-18', capabilities: {},
    clientInfo: { name: 'bench', version: '1' } });
  p.notify('notifications/initialized');
  await p.request('tools/list', {});
  return p;
}

const ns = () => process.hrtime.bigint();
let keys = 0;

// COUNT calls, k in flight; the latency of each in microseconds.
async function run(p, k, params) {
  const times = [];
  let issued = 0;
  async function lane() {
    while (issued < COUNT) {
      issued++;
      const t0 = ns();
      const answer = await p.request('tools/call', params());
      times.push(Number(ns() - t0) / 1000);
      if (answer.error !== undefined || answer.result?.isError)
        throw new Error('call failed: ' + JSON.stringify(answer));
    }
  }
  // Warm up (JIT, connections) before measuring.
  for (let i = 0; i < 50; i++)
    await p.request('tools/call', params());
  await Promise.all(Array.from({ length: k }, lane));
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(times.length * 0.5)], p99: times[Math.floor(times.length * 0.99)] };
}

const broker = await startBroker();
const direct = await open(SERVER);
const proxied = await open([IDEM_MCP, 'proxy', '--root', root, '--', ...SERVER]);
const peek = () => ({ name: 'peek', arguments: {} });
const act = () => ({ name: 'act', arguments: { label: 'bench' } });
const actKeyed = () => ({ name: 'act', arguments: { label: 'bench', idempotency_key: `bench/${++keys}` } });

const rows = [];
for (const k of [1, 8]) {
  const d = await run(direct, k, peek);
  const p = await run(proxied, k, peek);
  rows.push(['pass-through (peek)', k, d, p]);
  const da = await run(direct, k, act);
  const pa = await run(proxied, k, actKeyed);
  rows.push(['wrapped (act, new key)', k, da, pa]);
}
const f = (us) => (us / 1000).toFixed(3).padStart(8);
console.log(`${COUNT} calls per row; milliseconds; ${os.cpus().length} CPUs; ${BENCH_DIR} holds the broker's journal`);
console.log('call                      K   direct p50  p99    proxy p50  p99     added p50  p99');
for (const [name, k, d, p] of rows)
  console.log(`${name.padEnd(24)} ${String(k).padStart(2)}  ${f(d.p50)} ${f(d.p99)}  ${f(p.p50)} ${f(p.p99)}  ${f(p.p50 - d.p50)} ${f(p.p99 - d.p99)}`);

direct.child.stdin.end();
proxied.child.stdin.end();
await Promise.all([direct.child, proxied.child].map((c) => new Promise((r) => c.on('exit', r))));
broker.kill('SIGTERM');
await new Promise((r) => broker.on('exit', r));
fs.rmSync(tmp, { recursive: true, force: true });
