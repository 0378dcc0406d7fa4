/* SPDX-License-Identifier: ISC */
// example.test.mjs: contrib/examples/mcp_notify.mjs, an MCP server whose
// side-effecting tool uses runEffect, driven by the official MCP SDK's
// client over stdio against a real idemd.  Run by tests/node_client.sh
// from the build-tree directory where the SDK, zod and idemd-client are
// installed and the example copied (IDEM_NODE_EXAMPLE names the copy).
//
// What it proves: one notification per idempotency_key (the outbox
// file, the downstream system, has one line per key) across sequential
// retries, concurrent calls (the others get in_progress, then the first
// result) and a restart of the MCP server; another request under a used
// key is a tool error that sends nothing.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Broker, tempDir } from './broker.mjs';

const EXAMPLE = process.env.IDEM_NODE_EXAMPLE;
assert.ok(EXAMPLE, 'IDEM_NODE_EXAMPLE names the example (run tests/node_client.sh)');

const tmp = tempDir('idem-node-example.');
const outbox = path.join(tmp, 'outbox.jsonl');
let broker;
const sessions = [];

before(async () => {
  broker = await new Broker(path.join(tmp, 'fcop')).start();
});

after(async () => {
  for (const s of sessions)
    await s.close();
  await broker.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** The example as an agent's host starts it, and the SDK's client on it. */
async function session(env = {}) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [EXAMPLE],
    env: { ...process.env, IDEM_SOCKET: broker.socket, NOTIFY_OUTBOX: outbox, ...env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'idem-example-test', version: '0.0.0' });
  await client.connect(transport);
  sessions.push(client);
  return client;
}

function sent(key) {
  if (!fs.existsSync(outbox))
    return [];
  return fs.readFileSync(outbox, 'utf8').trim().split('\n').filter(Boolean)
    .map((l) => JSON.parse(l)).filter((m) => m.text.startsWith(`[${key}]`));
}

const call = (client, key, to = 'ops', text = `[${key}] deploy finished`) =>
  client.callTool({ name: 'send_notification', arguments: { idempotency_key: key, to, text } });

test('the tool is listed with its schema', async () => {
  const { tools } = await (await session()).listTools();
  const tool = tools.find((t) => t.name === 'send_notification');
  assert.ok(tool);
  assert.deepEqual(tool.inputSchema.required.sort(), ['idempotency_key', 'text', 'to']);
  assert.equal(tool.annotations.idempotentHint, true);
});

test('retries of one key send one notification, and answer the first result', async () => {
  const c = await session();
  const first = await call(c, 'k1');
  assert.equal(first.isError, undefined);
  assert.equal(first.structuredContent.delivered, true);
  assert.match(first.structuredContent.message_id, /^idem-/);
  for (let i = 0; i < 3; i++)
    assert.deepEqual((await call(c, 'k1')).structuredContent, first.structuredContent);
  assert.equal(sent('k1').length, 1);
  assert.equal(sent('k1')[0].message_id, first.structuredContent.message_id);
  // Another key is another notification.
  await call(c, 'k2');
  assert.equal(sent('k2').length, 1);
});

test('concurrent calls of one key: one sends, the others meet its lease', async () => {
  const c = await session({ NOTIFY_DELAY_MS: '500' });
  const results = await Promise.all(Array.from({ length: 4 }, () => call(c, 'k3')));
  const ok = results.filter((r) => !r.isError);
  const busy = results.filter((r) => r.isError);
  assert.equal(ok.length, 1, 'one call performed it');
  assert.equal(busy.length, 3);
  for (const r of busy)
    assert.match(r.content[0].text, /still running; retry later with the same key/);
  assert.equal(sent('k3').length, 1);
  // The retry the message asks for gets the first result.
  assert.deepEqual((await call(c, 'k3')).structuredContent, ok[0].structuredContent);
  assert.equal(sent('k3').length, 1);
});

test('a restarted server answers from the ledger; a reused key with other text sends nothing',
    async () => {
  const before = await call(await session(), 'k4');
  const restarted = await session();
  assert.deepEqual((await call(restarted, 'k4')).structuredContent, before.structuredContent);
  const other = await call(restarted, 'k4', 'ops', '[k4] something else');
  assert.equal(other.isError, true);
  assert.match(other.content[0].text, /already used for another notification \(digest_mismatch\)/);
  assert.equal(sent('k4').length, 1);
});
