/* SPDX-License-Identifier: ISC */
// hostile_server.mjs: an MCP server that misbehaves on request, for
// tests/mcp/hostile.test.mjs to put behind `idem-mcp proxy`.  It speaks
// newline-delimited JSON-RPC itself (no SDK), so that it can write what
// no SDK would: two answers to one request, answers nobody asked for,
// lines that are not JSON, a NUL byte, invalid UTF-8, a line of many
// MiB, half a line before it dies.
//
// Its tool `act` has no annotations (the proxy wraps it; readOnlyHint
// with HOSTILE_ACT_READONLY=1) and records each execution as one line in
// $HOSTILE_LOG (label, mode, the idempotency_key argument it saw) before
// it answers, so that a
// test counts executions by counting lines.  arguments.mode says how it
// answers (ANSWER is the ordinary answer, its text JSON: label and the
// execution's number):
//   ok        ANSWER
//   twice     ANSWER, then a second, different answer with the same id
//   stray     answers to ids nobody asked for (two in the proxy's own
//             form, one of them not JSON (a raw NUL), one a client's),
//             then ANSWER
//   both      ANSWER's result and an error in one message
//   scalar    a result that is arguments.value, not an object
//   neither   a message with the id and neither result nor error
//   notjson   a line that is not JSON, then ANSWER
//   nested    a notification that is not JSON (a raw NUL) holding an
//             object with the call's id, then ANSWER
//   nul       ANSWER with a raw NUL byte in its text (not JSON)
//   nulbatch  the same, as a batch of one: [ANSWER] (not JSON)
//   huge      ANSWER whose text is arguments.mib MiB of 'x', one line
//   line      ANSWER of 'x's, one line of exactly arguments.bytes bytes
//   crline    the same and a CR, its LF 200 ms later (another read)
//   idlast    the same, its members in the TypeScript SDK's order:
//             {result, jsonrpc, id} (the id in its last bytes)
//   cut       half of ANSWER's line, then exit (status 3)
//   shout     a logging notification of arguments.mib MiB, then ANSWER
//   escnul    a result whose text holds U+0000 (valid JSON: \u0000),
//             then 600 e-acutes (two bytes each)
//   keynul    a notification with U+0000 in an object key (params.data's),
//             then ANSWER with U+0000 in an object key
//             (structuredContent's)
//   bigcut    a result over 64 KiB whose text is 1023 bytes of "a"s
//             (with arguments.nul: "a", U+0000, 1019 "a"s: U+0000 is
//             3 bytes as the stand-in writes it), then e-acutes (two
//             bytes each): one across byte 1024
//   mimic     a result with a stand-in's marker among its members:
//             {result_too_large: true, ...} if arguments.marker is
//             "large", else {result_not_storable: "U+0000", ...}
//   escbs     a result whose text is a backslash and u0000 (JSON
//             "\\u0000": an escaped backslash, no U+0000)
//   surrogate a result whose text ends in half of a UTF-16 surrogate
//             pair (valid JSON: \ud83d, as JavaScript writes it)
//   bigint    a result with an integer past 64 bits
//   sample    a sampling/createMessage request to the client (id
//             "hostile-sample-N"), then ANSWER at once; the client's
//             answer to it, whenever it comes, is a line in
//             $HOSTILE_LOG.sampled
//   late      ANSWER after arguments.ms, cancelled or not; a
//             cancellation heard is a line in $HOSTILE_LOG.cancelled
//   hang      never answer
// `peek` (readOnlyHint) answers how many executions there were;
// `configure` (readOnlyHint) with {readOnly: true} makes later tools/list
// answers give `act` readOnlyHint (as a server upgraded under a running
// proxy, or a hostile one, would); `hidden` is never listed but runs
// (recorded like act) when called.
// A line it cannot parse is answered as an SDK server does (-32700,
// id null); that line, and a blank one, is a line (JSON: the string)
// in $HOSTILE_LOG.odd.  The server exits when its stdin ends.

import fs from 'node:fs';

const LOG = process.env.HOSTILE_LOG;
let actReadOnly = process.env.HOSTILE_ACT_READONLY === '1';
let samples = 0;
const inFlight = new Map();	// id (JSON) -> true once cancelled

const executions = () => fs.existsSync(LOG) ?
  fs.readFileSync(LOG, 'utf8').split('\n').filter((l) => l !== '').length : 0;
const write = (data) => process.stdout.write(data);
const send = (msg) => write(JSON.stringify(msg) + '\n');
const text = (s) => ({ content: [{ type: 'text', text: s }] });

function tools() {
  return [
    {
      name: 'act',
      description: 'Performs a side effect once per call (counted).',
      inputSchema: { type: 'object', properties: { label: { type: 'string' },
        mode: { type: 'string' } } },
      ...(actReadOnly ? { annotations: { readOnlyHint: true } } : {}),
    },
    { name: 'peek', description: 'How many times act ran.',
      inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
    { name: 'configure', description: 'Changes what tools/list says.',
      inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
  ];
}

function act(id, args) {
  fs.appendFileSync(LOG, JSON.stringify({ label: args.label, mode: args.mode,
    key: args.idempotency_key }) + '\n');
  const n = executions();
  const answer = { jsonrpc: '2.0', id,
    result: text(JSON.stringify({ label: args.label, execution: n })) };
  switch (args.mode ?? 'ok') {
  case 'twice':
    send(answer);
    send({ jsonrpc: '2.0', id, result: text('the second answer') });
    return;
  case 'stray':
    send({ jsonrpc: '2.0', id: 'io.idem/proxy/999999', result: text('stray') });
    write('{"jsonrpc":"2.0","id":"io.idem/proxy/999998","result":"not\u0000JSON"}\n');
    send({ jsonrpc: '2.0', id: 424242, result: text('stray') });
    send(answer);
    return;
  case 'both':
    send({ ...answer, error: { code: -32603, message: 'and an error' } });
    return;
  case 'scalar':
    send({ jsonrpc: '2.0', id, result: args.value });
    return;
  case 'neither':
    send({ jsonrpc: '2.0', id });
    return;
  case 'notjson':
    write('this line is not JSON\n');
    send(answer);
    return;
  case 'nested':
    // Not JSON (a raw NUL), with the call's id in an object nested in it.
    write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"note":"[{\\"}","id":${JSON.stringify(id)},"x":"\u0000"}}}\n`);
    send(answer);
    return;
  case 'nul':
    write(JSON.stringify(answer).replace('execution', 'exe\u0000cution') + '\n');
    return;
  case 'nulbatch':
    write('[' + JSON.stringify(answer).replace('execution', 'exe\u0000cution') + ']\n');
    return;
  case 'huge':
    send({ jsonrpc: '2.0', id, result: text('x'.repeat(args.mib * 1024 * 1024)) });
    return;
  case 'line': {
    // ANSWER padded to a line of exactly arguments.bytes bytes.
    const bare = JSON.stringify({ jsonrpc: '2.0', id, result: text('') });
    send({ jsonrpc: '2.0', id, result: text('x'.repeat(args.bytes - bare.length)) });
    return;
  }
  case 'idlast': {
    const bare = JSON.stringify({ result: text(''), jsonrpc: '2.0', id });
    send({ result: text('x'.repeat(args.bytes - bare.length)), jsonrpc: '2.0', id });
    return;
  }
  case 'crline': {
    const bare = JSON.stringify({ jsonrpc: '2.0', id, result: text('') });
    write(JSON.stringify({ jsonrpc: '2.0', id,
      result: text('x'.repeat(args.bytes - bare.length)) }) + '\r');
    setTimeout(() => write('\n'), 200);
    return;
  }
  case 'cut': {
    const line = JSON.stringify(answer);
    // Written before the exit, which need not wait for a stream.
    fs.writeSync(1, line.slice(0, line.length >> 1));
    process.exit(3);
  }
  case 'sample':
    send({ jsonrpc: '2.0', id: `hostile-sample-${++samples}`,
      method: 'sampling/createMessage', params: { messages: [{ role: 'user',
        content: { type: 'text', text: 'hello?' } }], maxTokens: 10 } });
    send(answer);
    return;
  case 'late': {
    const key = JSON.stringify(id);
    inFlight.set(key, false);
    setTimeout(() => { inFlight.delete(key); send(answer); }, args.ms ?? 300);
    return;
  }
  case 'shout':
    send({ jsonrpc: '2.0', method: 'notifications/message',
      params: { level: 'info', data: 'x'.repeat(args.mib * 1024 * 1024) } });
    send(answer);
    return;
  case 'escnul':
    send({ jsonrpc: '2.0', id, result: text('a\u0000b' + '\u00e9'.repeat(600)) });
    return;
  case 'keynul':
    send({ jsonrpc: '2.0', method: 'notifications/message',
      params: { level: 'info', data: { 'n\u0000ote': 'keynul' } } });
    send({ ...answer, result: { ...answer.result, structuredContent: { 'k\u0000ey': 'v' } } });
    return;
  case 'bigcut':
    send({ jsonrpc: '2.0', id, result: text((args.nul ? 'a\u0000' + 'a'.repeat(1019) :
      'a'.repeat(1023)) + '\u00e9'.repeat(40000)) });
    return;
  case 'mimic': {
    const marker = args.marker === 'large' ? { result_too_large: true } :
      { result_not_storable: 'U+0000' };
    send({ jsonrpc: '2.0', id, result: { ...marker, bytes: 5, sha256: 'a'.repeat(64),
      text_start: 'mimic', ...text(JSON.stringify({ label: args.label, execution: n })) } });
    return;
  }
  case 'escbs':
    send({ jsonrpc: '2.0', id, result: text('\\u0000 is not NUL') });
    return;
  case 'surrogate':
    // JSON.stringify writes a lone surrogate as its escape: valid JSON.
    send({ jsonrpc: '2.0', id, result: text('cut \ud83d') });
    return;
  case 'bigint':
    write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[],"n":123456789012345678901234567890}}\n`);
    return;
  case 'hang':
    return;
  default:
    send(answer);
  }
}

function handle(msg) {
  const { id, method, params = {} } = msg;
  if (method === undefined) {
    // A response: the client's answer to one of our requests.
    if (typeof id === 'string' && id.startsWith('hostile-sample-'))
      fs.appendFileSync(LOG + '.sampled', JSON.stringify(msg) + '\n');
    return;
  }
  if (method === 'notifications/cancelled') {
    const key = JSON.stringify(params.requestId);
    if (inFlight.has(key))
      fs.appendFileSync(LOG + '.cancelled', key + '\n');
    return;
  }
  if (id === undefined)
    return;
  if (method === 'initialize') {
    send({ jsonrpc: '2.0', id, result: { protocolVersion: params.protocolVersion,
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: 'hostile', version: '1.0.0' } } });
  } else if (method === 'tools/list') {
    send({ jsonrpc: '2.0', id, result: { tools: tools() } });
  } else if (method === 'tools/call') {
    const args = params.arguments ?? {};
    if (params.name === 'act' || params.name === 'hidden')
      act(id, args);
    else if (params.name === 'peek')
      send({ jsonrpc: '2.0', id, result: text(String(executions())) });
    else if (params.name === 'configure') {
      actReadOnly = args.readOnly === true;
      send({ jsonrpc: '2.0', id, result: text('configured') });
    } else
      send({ jsonrpc: '2.0', id, error: { code: -32602, message: `no tool ${params.name}` } });
  } else if (method === 'ping') {
    send({ jsonrpc: '2.0', id, result: {} });
  } else {
    send({ jsonrpc: '2.0', id, error: { code: -32601, message: `no method ${method}` } });
  }
}

let pending = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) !== -1) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    let msg;
    try {
      msg = line.trim() === '' ? undefined : JSON.parse(line);
    } catch {
      // As an SDK server does: a parse error under a null id.
      send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'hostile: Parse error' } });
    }
    if (msg === undefined)
      fs.appendFileSync(LOG + '.odd', JSON.stringify(line) + '\n');
    else
      handle(msg);
  }
});
process.stdin.on('end', () => process.exit(0));
