#!/usr/bin/env node
/* SPDX-License-Identifier: ISC */
// mcp_notify.mjs: an MCP server (the official TypeScript SDK, stdio)
// whose one tool has a side effect, sending a notification, made
// at-most-once per idempotency_key with idemd-client's runEffect.  An
// agent that retries the call (a lost answer, a restarted session, two
// workers racing) gets the first call's result; the notification goes
// out once.
//
//   npm install @modelcontextprotocol/sdk zod /path/to/idem/contrib/node
//   IDEM_SOCKET=/srv/fcop/.idem/idemd.sock node mcp_notify.mjs
//
// The "downstream system" is a file, NOTIFY_OUTBOX (default
// ./outbox.jsonl), one JSON line per notification sent; NOTIFY_DELAY_MS
// makes each send take that long (to watch a concurrent call meet the
// lease).  tests/node/example.test.mjs drives it with the SDK's client.

import fs from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import {
  Client, IdemConflict, IdemError, IdemInProgress, IdemOutcomeUnknown, runEffect,
} from 'idemd-client';

const OUTBOX = process.env.NOTIFY_OUTBOX || 'outbox.jsonl';
const DELAY_MS = Number(process.env.NOTIFY_DELAY_MS || 0);
const KIND = 'notify.send/v1';

// One connection to idemd ($IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock)
// for the whole server: calls are pipelined on it.
const idem = new Client();

/** The downstream system.  messageId is runEffect's externalKey: a real
 * mail or chat API would take it as its own idempotency key. */
async function send(messageId, to, text, signal) {
  if (DELAY_MS > 0)
    await sleep(DELAY_MS, undefined, { signal });
  await fs.appendFile(OUTBOX, JSON.stringify({ message_id: messageId, to, text }) + '\n');
  return { delivered: true, message_id: messageId };
}

/** What the agent is told when idem says no. */
function explain(e) {
  if (e instanceof IdemConflict) {
    return 'this idempotency_key was already used for another notification '
        + `(${e.reason}); nothing was sent: use a new key for a new notification`;
  }
  if (e instanceof IdemInProgress) {
    return 'a call with this idempotency_key is still running; retry later with the '
        + 'same key to get its result';
  }
  if (e instanceof IdemOutcomeUnknown) {
    return 'a call with this idempotency_key stopped without reporting, so the '
        + `notification may or may not have gone out (message_id ${e.externalKey}); `
        + 'an operator settles it (idemctl resolve) before it is retried';
  }
  return `idem: ${e.message}${e.retryable ? ' (retryable with the same key)' : ''}`;
}

const server = new McpServer({ name: 'notify', version: '0.1.0' });

server.registerTool('send_notification', {
  title: 'Send a notification',
  description: 'Send a text to a recipient, once per idempotency_key: a retry with the '
      + 'same key returns the first result and sends nothing.',
  inputSchema: {
    idempotency_key: z.string().min(1).max(200),
    to: z.string().min(1),
    text: z.string(),
  },
  outputSchema: { delivered: z.boolean(), message_id: z.string() },
  annotations: { readOnlyHint: false, idempotentHint: true },
}, async ({ idempotency_key: key, to, text }, extra) => {
  try {
    const result = await runEffect(idem, KIND, key, { to, text },
        (externalKey, ctx) => send(externalKey, to, text, ctx.signal),
        { leaseMs: 10000, signal: extra.signal });
    return {
      content: [{ type: 'text', text: `sent to ${to} (${result.message_id})` }],
      structuredContent: result,
    };
  } catch (e) {
    if (!(e instanceof IdemError))
      throw e;
    return { isError: true, content: [{ type: 'text', text: explain(e) }] };
  }
});

await server.connect(new StdioServerTransport());
