/* SPDX-License-Identifier: ISC */
// proxy_server.mjs: a small MCP server (the official SDK's low-level
// Server over stdio) for tests/mcp/proxy.test.mjs to put behind
// `idem-mcp proxy`.  Its tool `act` has no annotations (so the proxy
// wraps it) and records every execution as one line in the file
// $PROXY_SERVER_LOG before it answers, so a test counts executions by
// counting lines.  arguments.mode says how the execution goes:
//   ok      answer; the text is JSON: the label, the execution's number,
//           the arguments and the _meta the server saw
//   slow    the same after arguments.ms milliseconds
//   hang    record, then never answer
//   crash   record, then die (SIGKILL) before answering
//   fail    answer a tool error (isError: true): it ran
//   big     answer arguments.bytes bytes of text
//   refuse  refuse with a JSON-RPC error, not recorded (it did not run);
//           each refusal is a line in $PROXY_SERVER_LOG.refused
// With a progressToken, `act` sends one progress notification first; a
// cancellation it hears is a line in $PROXY_SERVER_LOG.cancelled (the
// request id it came under).
// `peek` (readOnlyHint) answers how many executions there were.
// The server exits when its stdin ends, so that a test that kills the
// proxy leaves nothing behind.

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const PREFIX = process.env.IDEM_MCP_NODE_PREFIX;
const LOG = process.env.PROXY_SERVER_LOG;
const require = createRequire(path.join(PREFIX, 'package.json'));
const { Server } = require('@modelcontextprotocol/sdk/server/index.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { CallToolRequestSchema, ListToolsRequestSchema, McpError, ErrorCode } =
    require('@modelcontextprotocol/sdk/types.js');

const executions = () => fs.existsSync(LOG) ?
  fs.readFileSync(LOG, 'utf8').split('\n').filter((l) => l !== '').length : 0;

const server = new Server({ name: 'idem-test-server', version: '1.0.0' },
    { capabilities: { tools: {} } });

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: 'act',
      description: 'Performs a side effect once per call (counted).',
      inputSchema: {
        type: 'object',
        properties: {
          label: { type: 'string' },
          mode: { type: 'string' },
          ms: { type: 'number' },
          bytes: { type: 'number' },
        },
        required: ['label'],
      },
    },
    {
      name: 'peek',
      description: 'How many times act ran.',
      inputSchema: { type: 'object', properties: {} },
      annotations: { readOnlyHint: true },
    },
  ],
}));

server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const { name, arguments: args = {} } = request.params;
  const meta = request.params._meta ?? {};
  if (name === 'peek')
    return { content: [{ type: 'text', text: String(executions()) }] };
  if (name !== 'act')
    throw new McpError(ErrorCode.InvalidParams, `no tool ${name}`);
  const mode = args.mode ?? 'ok';
  if (mode === 'refuse') {
    fs.appendFileSync(LOG + '.refused', args.label + '\n');
    throw new McpError(ErrorCode.InvalidParams, `refused ${args.label}`);
  }
  fs.appendFileSync(LOG, JSON.stringify({ label: args.label, meta }) + '\n');
  const n = executions();
  if (meta.progressToken !== undefined)
    await extra.sendNotification({ method: 'notifications/progress',
      params: { progressToken: meta.progressToken, progress: 1, total: 1 } });
  if (mode === 'crash')
    process.kill(process.pid, 'SIGKILL');
  if (mode === 'hang')
    return new Promise(() => {});
  // A cancellation heard: its request id, one line in LOG.cancelled.
  extra.signal.addEventListener('abort', () => {
    fs.appendFileSync(LOG + '.cancelled', JSON.stringify(extra.requestId) + '\n');
  });
  if (mode === 'slow')
    await new Promise((resolve) => setTimeout(resolve, args.ms ?? 100));
  if (mode === 'big')
    return { content: [{ type: 'text', text: 'x'.repeat(args.bytes) }] };
  const text = JSON.stringify({ label: args.label, execution: n, arguments: args, meta });
  return { content: [{ type: 'text', text }], isError: mode === 'fail' };
});

process.stdin.on('end', () => process.exit(0));
await server.connect(new StdioServerTransport());
