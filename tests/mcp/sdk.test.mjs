/* SPDX-License-Identifier: ISC */
// sdk.test.mjs: idem-mcp driven by a client nobody here wrote, the
// official MCP TypeScript SDK's (Client + StdioClientTransport), against a
// real idemd on a fresh workspace.  Run by tests/mcp/sdk.sh, which
// installs the SDK into the build tree and sets IDEMD, IDEM_MCP and
// IDEM_MCP_NODE_PREFIX (the directory holding node_modules).
//
// What it proves: the SDK connects and negotiates; tools/list pages
// through a cursor; every inputSchema and outputSchema is a valid JSON
// Schema (2020-12, Ajv in strict mode) of type object; every result's
// structuredContent validates against its tool's outputSchema (the SDK
// checks it too: callTool throws otherwise); create, retry (same receipt,
// reused), conflict (isError, the facts), a broker down (isError,
// retryable) and restarted between a call and its retry (same task_id),
// bad arguments.  It judges by the TASK and REPORT files on disk.

import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

import { countFiles } from '../node/broker.mjs';
import { SdkRun } from './sdk_run.mjs';

const IDEMD = process.env.IDEMD;
const IDEM_MCP = process.env.IDEM_MCP;
const PREFIX = process.env.IDEM_MCP_NODE_PREFIX;
assert.ok(IDEMD && IDEM_MCP && PREFIX,
    'IDEMD, IDEM_MCP and IDEM_MCP_NODE_PREFIX must be set (run tests/mcp/sdk.sh)');

// The SDK and Ajv as installed in the build tree, not next to this file.
const require = createRequire(path.join(PREFIX, 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { LATEST_PROTOCOL_VERSION, McpError } = require('@modelcontextprotocol/sdk/types.js');
const Ajv2020Module = require('ajv/dist/2020');
const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;

const TOOLS = ['write_task', 'write_report', 'get_submission', 'diagnose',
  'effect_begin', 'effect_complete', 'effect_extend', 'effect_resolve'];
const WRITE_TOOLS = ['write_task', 'write_report', 'effect_begin'];

const run = new SdkRun('idem-mcp-sdk.');
const { root, broker } = run;
const check = run.check.bind(run);
const clients = [];
const outputSchemas = new Map();
const ajv = new Ajv2020({ strict: true, allErrors: true });

// The files FCoP tools would see, anywhere they may have been moved to.
const taskFiles = () => countFiles(path.join(root, '_lifecycle'), 'TASK');
const reportFiles = () => countFiles(path.join(root, 'reports'), 'REPORT');

// ---- the client ------------------------------------------------------------

// A connected SDK client on a new idem-mcp; negotiated: the version the
// server answered (the SDK tells the transport, when it can hear it).
async function connect(args = []) {
  const transport = new StdioClientTransport({
    command: IDEM_MCP,
    args: ['--root', root, ...args],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    stderr: 'pipe',
  });
  const session = { negotiated: null, stderr: '' };
  transport.setProtocolVersion = (v) => { session.negotiated = v; };
  const client = new Client({ name: 'idem-sdk-test', version: '1.0.0' });
  await client.connect(transport);
  transport.stderr?.on('data', (chunk) => { session.stderr += chunk; });
  clients.push(client);
  session.client = client;
  return session;
}

// Every page of tools/list, following nextCursor; also the page count.
async function listAll(client) {
  const tools = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    pages++;
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return { tools, pages };
}

// callTool (the SDK validates structuredContent itself) plus our own
// check against the advertised outputSchema, and a short text first.
async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.ok(result.structuredContent !== undefined, `${name}: structuredContent`);
  const validate = outputSchemas.get(name);
  assert.ok(validate(result.structuredContent),
      `${name}: structuredContent does not match its outputSchema: ` +
      JSON.stringify(validate.errors) + ' ' + JSON.stringify(result.structuredContent));
  assert.equal(result.content[0].type, 'text');
  assert.ok(result.content[0].text.length > 0 && result.content[0].text.length < 600,
      `${name}: a short text: ${result.content[0].text}`);
  // The structured content again as JSON text, for clients without it.
  assert.deepEqual(JSON.parse(result.content[1].text), result.structuredContent);
  return result;
}

const task = (subject) => ({ sender: 'PM', recipient: 'DEV', subject, body: 'Steps:\n1. fix\n' });

let main;	// the session most tests share

before(async () => {
  fs.mkdirSync(root);
  await broker.start();
  main = await connect();
  const { tools } = await listAll(main.client);
  for (const tool of tools)
    outputSchemas.set(tool.name, ajv.compile(tool.outputSchema));
});

after(async () => {
  for (const client of clients)
    await client.close().catch(() => {});
  await broker.stop().catch(() => {});
  run.finish();
});

// ---- tests -----------------------------------------------------------------

check('initialize: the SDK negotiates its latest revision with idem-mcp', () => {
  assert.equal(main.negotiated, LATEST_PROTOCOL_VERSION);
  assert.equal(main.client.getServerVersion().name, 'idem-mcp');
  assert.ok(main.client.getServerCapabilities().tools, 'capabilities.tools');
  assert.match(main.client.getInstructions() ?? '', /client_submission_id/);
});

check('tools/list: pages through a cursor; schemas are JSON Schema objects', async () => {
  const paged = await connect(['--tools-page-size', '3']);
  const { tools, pages } = await listAll(paged.client);
  assert.equal(pages, Math.ceil(TOOLS.length / 3), 'pages of three');
  assert.deepEqual(tools.map((t) => t.name), TOOLS);
  const whole = await main.client.listTools({});
  assert.equal(whole.nextCursor, undefined, 'the default page holds them all');
  assert.deepEqual(whole.tools, tools, 'the same tools either way');
  await assert.rejects(paged.client.listTools({ cursor: 'not-a-cursor' }),
      (e) => e instanceof McpError && e.code === -32602);

  for (const tool of tools) {
    for (const which of ['inputSchema', 'outputSchema']) {
      const schema = tool[which];
      assert.equal(typeof schema, 'object', `${tool.name}.${which}`);
      assert.equal(schema.type, 'object', `${tool.name}.${which}.type`);
      // Strict Ajv (2020-12, MCP's default dialect): a valid schema
      // with no unknown keyword.
      assert.ok(ajv.validateSchema(schema), `${tool.name}.${which}: ` +
          JSON.stringify(ajv.errors));
      new Ajv2020({ strict: true }).compile(schema);
    }
    assert.equal(tool.annotations.idempotentHint, true, `${tool.name} idempotentHint`);
    assert.equal(tool.annotations.destructiveHint, false, `${tool.name} destructiveHint`);
  }
  for (const name of WRITE_TOOLS) {
    const tool = tools.find((t) => t.name === name);
    assert.ok(tool.inputSchema.required.includes('client_submission_id'),
        `${name} requires client_submission_id`);
    assert.equal(tool.inputSchema.additionalProperties, false);
    assert.equal(tool.annotations.readOnlyHint, false);
    // What the model is told: reuse the same id, never a new one.
    assert.match(tool.description, /EXACT SAME client_submission_id/);
    assert.match(tool.description, /never with a new one/);
    assert.match(tool.inputSchema.properties.client_submission_id.description,
        /NEVER invent a new client_submission_id on a retry/);
  }
  // The SDK itself checks every result of these tools against their
  // outputSchema (callTool throws on a mismatch): it holds a validator.
  for (const name of TOOLS)
    assert.equal(typeof main.client.getToolOutputValidator(name), 'function',
        `the SDK validates ${name}'s structuredContent`);
  for (const name of ['get_submission', 'diagnose'])
    assert.equal(tools.find((t) => t.name === name).annotations.readOnlyHint, true);
});

check('write_task: created, retried (reused, same receipt), conflict', async () => {
  const before = taskFiles();
  const first = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-create-1', task: task('Fix login') });
  assert.equal(first.isError, false);
  const sc = first.structuredContent;
  assert.equal(sc.disposition, 'created');
  assert.equal(sc.action_taken, true);
  assert.equal(sc.idempotent, true);
  assert.equal(sc.receipt.client_submission_id, 'sdk-create-1');
  assert.match(sc.receipt.task_id, /^TASK-\d{8}-\d{3}-PM-to-DEV$/);
  assert.ok(fs.existsSync(path.join(root, sc.receipt.task_path)));
  assert.equal(taskFiles(), before + 1);

  const again = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-create-1', task: task('Fix login') });
  assert.equal(again.isError, false);
  assert.equal(again.structuredContent.disposition, 'reused');
  assert.equal(again.structuredContent.action_taken, false);
  assert.deepEqual(again.structuredContent.receipt, sc.receipt);
  assert.equal(taskFiles(), before + 1);

  const conflict = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-create-1', task: task('Something else') });
  assert.equal(conflict.isError, true, 'a conflict is a tool error, not a protocol error');
  const c = conflict.structuredContent;
  assert.equal(c.disposition, 'conflict');
  assert.equal(c.action_taken, false);
  assert.equal(c.error.code, 'conflict');
  assert.equal(c.error.reason, 'digest_mismatch');
  assert.equal(c.error.retryable, false);
  assert.equal(c.existing.task_id, sc.receipt.task_id);
  assert.equal(c.existing.request_digest, sc.receipt.request_digest);
  assert.match(conflict.content[0].text, /conflict/);
  assert.equal(taskFiles(), before + 1);
});

check('broker restarted between a call and its retry: same task_id', async () => {
  const before = taskFiles();
  const first = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-restart-1', task: task('Survive a restart') });
  assert.equal(first.structuredContent.disposition, 'created');

  await broker.stop();
  await broker.start();
  // The same idem-mcp process: it reaches the new broker by itself.
  const retry = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-restart-1', task: task('Survive a restart') });
  assert.equal(retry.isError, false);
  assert.equal(retry.structuredContent.disposition, 'reused');
  assert.equal(retry.structuredContent.receipt.task_id, first.structuredContent.receipt.task_id);
  assert.deepEqual(retry.structuredContent.receipt, first.structuredContent.receipt);
  assert.equal(taskFiles(), before + 1);
});

check('broker down: a retryable tool error; the retry with the same id creates once', async () => {
  const before = taskFiles();
  await broker.stop();
  const args = { client_submission_id: 'sdk-down-1', task: task('While it is down') };
  const down = await call(main.client, 'write_task', args);
  assert.equal(down.isError, true);
  assert.equal(down.structuredContent.disposition, 'error');
  assert.equal(down.structuredContent.error.code, 'broker_unavailable');
  assert.equal(down.structuredContent.error.retryable, true);
  assert.equal(down.structuredContent.action_taken, false, 'nothing was sent');
  assert.match(down.content[0].text, /same client_submission_id/);
  // Read-only tools fail the same way.
  const lookup = await call(main.client, 'get_submission', { client_submission_id: 'sdk-down-1' });
  assert.equal(lookup.isError, true);
  assert.equal(lookup.structuredContent.error.code, 'broker_unavailable');
  assert.equal(taskFiles(), before);

  await broker.start();
  const retry = await call(main.client, 'write_task', args);
  assert.equal(retry.structuredContent.disposition, 'created');
  const again = await call(main.client, 'write_task', args);
  assert.equal(again.structuredContent.disposition, 'reused');
  assert.equal(again.structuredContent.receipt.task_id, retry.structuredContent.receipt.task_id);
  assert.equal(taskFiles(), before + 1);
});

check('write_report, get_submission and diagnose', async () => {
  const created = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-report-task', task: task('To report on') });
  const taskId = created.structuredContent.receipt.task_id;
  const reports = reportFiles();
  const args = { task_id: taskId, client_submission_id: 'sdk-report-1',
    report: { sender: 'DEV', status: 'done', body: 'Fixed.' } };
  const first = await call(main.client, 'write_report', args);
  assert.equal(first.isError, false);
  assert.equal(first.structuredContent.disposition, 'created');
  assert.equal(first.structuredContent.action_taken, true);
  assert.match(first.structuredContent.report_id, /^REPORT-/);
  assert.ok(fs.existsSync(path.join(root, first.structuredContent.report_path)));
  const again = await call(main.client, 'write_report', args);
  assert.equal(again.structuredContent.disposition, 'reused');
  assert.equal(again.structuredContent.action_taken, false);
  assert.equal(again.structuredContent.report_id, first.structuredContent.report_id);
  assert.equal(reportFiles(), reports + 1);
  const other = await call(main.client, 'write_report',
      { ...args, report: { ...args.report, body: 'Other.' } });
  assert.equal(other.isError, true);
  assert.equal(other.structuredContent.disposition, 'conflict');
  assert.equal(reportFiles(), reports + 1);
  const missing = await call(main.client, 'write_report',
      { ...args, task_id: 'TASK-20000101-001-PM-to-DEV' });
  assert.equal(missing.isError, true);
  assert.equal(missing.structuredContent.error.code, 'task_not_found');

  const found = await call(main.client, 'get_submission', { client_submission_id: 'sdk-report-task' });
  assert.equal(found.isError, false);
  assert.equal(found.structuredContent.found, true);
  assert.equal(found.structuredContent.submission.state, 'committed');
  assert.deepEqual(found.structuredContent.submission.receipt, created.structuredContent.receipt);
  const none = await call(main.client, 'get_submission', { client_submission_id: 'sdk-never-used' });
  assert.equal(none.structuredContent.found, false);

  const diag = await call(main.client, 'diagnose', {});
  assert.equal(diag.isError, false);
  assert.ok(Array.isArray(diag.structuredContent.entries));
  assert.ok(diag.structuredContent.counts.committed >= 1);
});

check('a task moved by FCoP tools: the receipt stays, current_path says where it is', async () => {
  const args = { client_submission_id: 'sdk-moved-1', task: task('To be moved') };
  const first = await call(main.client, 'write_task', args);
  const receipt = first.structuredContent.receipt;
  assert.equal(first.structuredContent.current_path, undefined, 'not moved yet');
  // What an FCoP tool does when an agent takes the task.
  const active = `_lifecycle/active/${receipt.task_id}.md`;
  fs.mkdirSync(path.join(root, '_lifecycle/active'), { recursive: true });
  fs.renameSync(path.join(root, receipt.task_path), path.join(root, active));
  const retry = await call(main.client, 'write_task', args);
  assert.equal(retry.structuredContent.disposition, 'reused');
  assert.deepEqual(retry.structuredContent.receipt, receipt);
  assert.equal(retry.structuredContent.current_path, active);
  assert.match(retry.content[0].text, new RegExp(active.replace(/[.]/g, '[.]')));
  const sub = await call(main.client, 'get_submission', { client_submission_id: 'sdk-moved-1' });
  assert.equal(sub.structuredContent.submission.current_path, active);
});

check('null for an optional task field means its default', async () => {
  const before = taskFiles();
  const nulls = await call(main.client, 'write_task', { client_submission_id: 'sdk-null-1',
    task: { ...task('Nulls'), priority: null, risk_level: null, references: null,
      depends_on: null, thread_key: null, parent: null } });
  assert.equal(nulls.isError, false, JSON.stringify(nulls.structuredContent));
  assert.equal(nulls.structuredContent.disposition, 'created');
  // The same intent without those fields digests the same: reused.
  const plain = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-null-1', task: task('Nulls') });
  assert.equal(plain.structuredContent.disposition, 'reused');
  assert.equal(taskFiles(), before + 1);
});

check('bad arguments: tool errors the model can act on; an unknown tool is a protocol error', async () => {
  const before = taskFiles();
  // No client_submission_id: a legacy call cannot be made through idem-mcp.
  const noId = await call(main.client, 'write_task', { task: task('No id') });
  assert.equal(noId.isError, true);
  assert.equal(noId.structuredContent.error.code, 'invalid_arguments');
  assert.match(noId.structuredContent.error.message, /client_submission_id/);
  const extra = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-bad-1', task: task('Extra'), op: 'write_task' });
  assert.equal(extra.isError, true);
  assert.equal(extra.structuredContent.error.code, 'invalid_arguments');
  const wrongType = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-bad-2', task: { ...task('Type'), references: 'doc/a.md' } });
  assert.equal(wrongType.isError, true);
  // Well-formed but refused by the broker: its field comes back.
  const role = await call(main.client, 'write_task',
      { client_submission_id: 'sdk-bad-3', task: { ...task('Role'), sender: 'pm' } });
  assert.equal(role.isError, true);
  assert.equal(role.structuredContent.error.code, 'invalid_request');
  assert.equal(role.structuredContent.error.field, 'task.sender');
  assert.equal(taskFiles(), before, 'nothing written');

  await assert.rejects(main.client.callTool({ name: 'no_such_tool', arguments: {} }),
      (e) => e instanceof McpError && e.code === -32602);
});

// ---- effects (SPEC.md, "Effects") ------------------------------------------

const mail = (to) => ({ to, subject: 'Deploy done', body: 'v1.4 is live' });

check('effects: proceed, complete, retries reused; in_progress; conflict; stale fence', async () => {
  const c = main.client;
  const key = { client_submission_id: 'sdk-fx-1', effect_kind: 'mail.send/v1' };
  const begin = await call(c, 'effect_begin', { ...key, request: mail('ops@example.com') });
  assert.equal(begin.isError, false);
  const b = begin.structuredContent;
  assert.equal(b.disposition, 'proceed');
  assert.equal(b.attempt, 1);
  assert.match(b.fence, /^1-/);
  assert.match(b.external_key, /^idem-/);
  assert.match(begin.content[0].text, /effect_complete/);

  // Another caller while the lease lives: retryable, nothing to perform.
  const busy = await call(c, 'effect_begin', { ...key, request: mail('ops@example.com') });
  assert.equal(busy.isError, true);
  assert.equal(busy.structuredContent.disposition, 'in_progress');
  assert.equal(busy.structuredContent.error.retryable, true);

  const done = await call(c, 'effect_complete',
      { ...key, fence: b.fence, outcome: 'applied', result: { message_id: 'm-1' } });
  assert.equal(done.isError, false);
  assert.equal(done.structuredContent.action_taken, true);
  assert.equal(done.structuredContent.receipt.external_key, b.external_key);
  assert.deepEqual(done.structuredContent.receipt.result, { message_id: 'm-1' });
  // Its answer lost: the same complete again gets the same receipt.
  const doneAgain = await call(c, 'effect_complete',
      { ...key, fence: b.fence, outcome: 'applied', result: { message_id: 'm-1' } });
  assert.equal(doneAgain.structuredContent.action_taken, false);
  assert.deepEqual(doneAgain.structuredContent.receipt, done.structuredContent.receipt);

  const reused = await call(c, 'effect_begin', { ...key, request: mail('ops@example.com') });
  assert.equal(reused.structuredContent.disposition, 'reused');
  assert.deepEqual(reused.structuredContent.receipt, done.structuredContent.receipt);
  assert.match(reused.content[0].text, /do not perform it again/);

  const conflict = await call(c, 'effect_begin', { ...key, request: mail('someone@example.com') });
  assert.equal(conflict.isError, true);
  assert.equal(conflict.structuredContent.disposition, 'conflict');
  assert.equal(conflict.structuredContent.error.reason, 'digest_mismatch');

  // not_applied releases: the next begin is attempt 2, same external_key;
  // the first fence is stale from then on.
  const key2 = { client_submission_id: 'sdk-fx-2', effect_kind: 'pr.open/v1' };
  const req2 = { repo: 'acme/api', branch: 'fix-login' };
  const first = (await call(c, 'effect_begin', { ...key2, request: req2 })).structuredContent;
  const released = await call(c, 'effect_complete', { ...key2, fence: first.fence, outcome: 'not_applied' });
  assert.equal(released.structuredContent.state, 'released');
  const second = (await call(c, 'effect_begin', { ...key2, request: req2 })).structuredContent;
  assert.equal(second.disposition, 'proceed');
  assert.equal(second.attempt, 2);
  assert.equal(second.external_key, first.external_key);
  const stale = await call(c, 'effect_complete', { ...key2, fence: first.fence, outcome: 'applied' });
  assert.equal(stale.isError, true);
  assert.equal(stale.structuredContent.error.reason, 'stale_fence');

  const sub = await call(c, 'get_submission', key);
  assert.equal(sub.structuredContent.found, true);
  assert.equal(sub.structuredContent.submission.state, 'committed');
});

check('effects: effect_extend keeps a long effect\'s lease; its refusals say why', async () => {
  const c = main.client;
  const key = { client_submission_id: 'sdk-fx-long', effect_kind: 'deploy/v1' };
  const begun = (await call(c, 'effect_begin',
      { ...key, request: { service: 'api' }, lease_ms: 60000 })).structuredContent;
  assert.equal(begun.disposition, 'proceed');
  // The SDK checks each result against effect_extend's outputSchema.
  const ext = await call(c, 'effect_extend', { ...key, fence: begun.fence, lease_ms: 600000 });
  assert.equal(ext.isError, false);
  assert.ok(Date.parse(ext.structuredContent.lease_expires_at) > Date.now() + 500000);
  assert.match(ext.content[0].text, /extend again before then/);
  const forged = begun.fence.replace(/-.*/, '-0000000000000000');
  const stale = await call(c, 'effect_extend', { ...key, fence: forged });
  assert.equal(stale.isError, true);
  assert.equal(stale.structuredContent.disposition, 'conflict');
  assert.equal(stale.structuredContent.error.reason, 'stale_fence');
  assert.match(stale.content[0].text, /stale_fence/);
  await call(c, 'effect_complete', { ...key, fence: begun.fence, outcome: 'applied' });
  const done = await call(c, 'effect_extend', { ...key, fence: begun.fence });
  assert.equal(done.isError, true);
  assert.equal(done.structuredContent.error.reason, 'already_committed');
});

check('effects: a lapsed lease is outcome_unknown until effect_resolve; a restart keeps the lease', async () => {
  const c = main.client;
  const key = { client_submission_id: 'sdk-fx-3', effect_kind: 'charge/v1' };
  const request = { amount: 1250, currency: 'EUR' };
  const lease = 200;
  const begin = (await call(c, 'effect_begin', { ...key, request, lease_ms: lease })).structuredContent;
  assert.equal(begin.disposition, 'proceed');
  // The lease is the broker's clock: wait until it has passed.
  await new Promise((r) => setTimeout(r, lease + 100));
  const unknown = await call(c, 'effect_begin', { ...key, request });
  assert.equal(unknown.isError, true);
  assert.equal(unknown.structuredContent.disposition, 'outcome_unknown');
  assert.equal(unknown.structuredContent.error.retryable, false);
  const resolved = await call(c, 'effect_resolve',
      { ...key, evidence: { observed: 'applied', result: { charge: 'ch_1' }, source: 'sdk test' } });
  assert.equal(resolved.isError, false);
  assert.equal(resolved.structuredContent.recovered, true);
  const reused = await call(c, 'effect_begin', { ...key, request });
  assert.equal(reused.structuredContent.disposition, 'reused');
  assert.equal(reused.structuredContent.recovered, true);

  // Begun, then the broker restarts: the complete with that fence is accepted.
  const key4 = { client_submission_id: 'sdk-fx-4', effect_kind: 'charge/v1' };
  const b4 = (await call(c, 'effect_begin', { ...key4, request, lease_ms: 60000 })).structuredContent;
  await broker.stop();
  await broker.start();
  const after = await call(c, 'effect_complete', { ...key4, fence: b4.fence, outcome: 'applied', result: { charge: 'ch_4' } });
  assert.equal(after.isError, false);
  assert.equal(after.structuredContent.receipt.attempt, 1);
  // Bad arguments: no effect_kind.
  const bad = await call(c, 'effect_begin', { client_submission_id: 'sdk-fx-5', request });
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.error.code, 'invalid_arguments');
});
