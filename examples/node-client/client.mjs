#!/usr/bin/env node
// A client of agenthost's local API, as a desktop app (Electron, say)
// would write one: Node.js, no dependencies.
//
// The API is JSON-RPC 2.0 over a unix socket, one JSON object per line,
// compatible with the Agent Client Protocol. This script:
//
//   1. connects and initializes,
//   2. starts a session of the scripted agent (session/new),
//   3. prompts "count 3" and prints the updates as they stream,
//   4. prompts "count 5 200ms" and disconnects after the first number,
//      as an app that crashes or restarts does; the turn goes on in the host,
//   5. reconnects and catches up on the session's journal from the entry
//      after the last one it saw (_agenthost/subscribe): it gets the rest of
//      the turn, nothing missed, nothing twice,
//   6. resumes the session (session/resume), prompts "sleep 30s" and
//      cancels it (session/cancel),
//   7. prompts again.
//
// Usage: node client.mjs [SOCKET]
// SOCKET defaults to $AGENTHOST_SOCKET, else agenthost.sock in the default
// state directory ($AGENTHOST_STATE_DIR, $XDG_STATE_HOME/agenthost or
// ~/.local/state/agenthost). Start a host first: agenthost serve.

import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

function defaultSocket() {
  if (process.env.AGENTHOST_SOCKET) return process.env.AGENTHOST_SOCKET;
  let dir = process.env.AGENTHOST_STATE_DIR;
  if (!dir && process.env.XDG_STATE_HOME) dir = path.join(process.env.XDG_STATE_HOME, 'agenthost');
  if (!dir) dir = path.join(os.homedir(), '.local', 'state', 'agenthost');
  return path.join(dir, 'agenthost.sock');
}

// Client is a minimal JSON-RPC 2.0 client over newline-delimited JSON.
class Client {
  constructor(socket) {
    this.socket = socket;
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject, method}
    this.listeners = []; // (method, params) => void, for notifications
    this.handlers = new Map(); // method -> (params) => result, for the server's requests
    this.closed = new Promise((resolve) => socket.on('close', resolve));
    let buffer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      buffer += chunk;
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.trim()) this.dispatch(JSON.parse(line));
      }
    });
    socket.on('close', () => {
      for (const { reject, method } of this.pending.values()) reject(new Error(`${method}: connection closed`));
      this.pending.clear();
    });
  }

  static connect(socketPath) {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection(socketPath);
      socket.once('connect', () => resolve(new Client(socket)));
      socket.once('error', reject);
    });
  }

  dispatch(msg) {
    if (msg.method !== undefined && msg.id !== undefined) {
      // A request from the server, e.g. session/request_permission.
      const handler = this.handlers.get(msg.method);
      const reply = handler
        ? { jsonrpc: '2.0', id: msg.id, result: handler(msg.params) }
        : { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `method not found: ${msg.method}` } };
      this.write(reply);
    } else if (msg.method !== undefined) {
      for (const listener of this.listeners) listener(msg.method, msg.params);
    } else {
      const call = this.pending.get(msg.id);
      if (!call) return;
      this.pending.delete(msg.id);
      if (msg.error) {
        const detail = msg.error.data && msg.error.data.error ? `: ${msg.error.data.error}` : '';
        const err = new Error(`${call.method}: ${msg.error.message}${detail}`);
        err.code = msg.error.code;
        call.reject(err);
      } else {
        call.resolve(msg.result);
      }
    }
  }

  write(msg) {
    this.socket.write(JSON.stringify(msg) + '\n');
  }

  call(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.write({ jsonrpc: '2.0', id, method, params });
    });
  }

  notify(method, params = {}) {
    this.write({ jsonrpc: '2.0', method, params });
  }

  on(listener) {
    this.listeners.push(listener);
  }

  close() {
    this.socket.end();
    return this.closed;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// describe renders an ACP session/update in a few words.
function describe(update) {
  switch (update.sessionUpdate) {
    case 'agent_message_chunk':
    case 'agent_thought_chunk':
    case 'user_message_chunk':
      return `${update.sessionUpdate} ${JSON.stringify(update.content?.text ?? '')}`;
    case 'tool_call':
      return `tool_call ${update.toolCallId} ${JSON.stringify(update.title)} ${update.status}`;
    case 'tool_call_update':
      return `tool_call_update ${update.toolCallId} ${update.status}`;
    default:
      return update.sessionUpdate;
  }
}

async function main() {
  const socketPath = process.argv[2] || defaultSocket();
  let lastSeen = 0; // the last journal seq this client saw

  // 1. Connect and initialize.
  let client = await Client.connect(socketPath);
  const init = await client.call('initialize', {
    protocolVersion: 1,
    clientInfo: { name: 'node-client', version: '1' },
    clientCapabilities: {},
  });
  console.log(`connected to ${socketPath}: ${init.agentInfo.name} ${init.agentInfo.version}, protocol ${init.protocolVersion}`);

  // Session updates carry the journal seq in _meta.agenthost.seq, and a
  // turn's its turnId. Updates of no turn (the agent's slash commands, a
  // title) come whenever the agent reports them: they are listed at the
  // end, not among the turn's.
  const sessionLevel = [];
  const onUpdate = (method, params) => {
    if (method !== 'session/update') return;
    const seq = params._meta?.agenthost?.seq ?? 0;
    lastSeen = Math.max(lastSeen, seq);
    if (!params._meta?.agenthost?.turnId) {
      sessionLevel.push(params.update.sessionUpdate);
      return;
    }
    console.log(`  update seq=${seq} ${describe(params.update)}`);
  };
  client.on(onUpdate);
  // Permission requests: this example allows the first "allow" option.
  client.handlers.set('session/request_permission', (params) => {
    const allow = params.options.find((o) => o.kind.startsWith('allow'));
    return allow ? { outcome: { outcome: 'selected', optionId: allow.optionId } } : { outcome: { outcome: 'cancelled' } };
  });

  // 2. Start a session of the scripted agent.
  const { sessionId } = await client.call('session/new', {
    cwd: process.cwd(),
    mcpServers: [],
    _meta: { agenthost: { agent: 'scripted' } },
  });
  console.log(`session ${sessionId}: created (agent scripted)`);

  // 3. A turn that streams.
  console.log('prompt "count 3":');
  let res = await client.call('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'count 3' }] });
  console.log(`  stop ${res.stopReason}`);

  // 4. A turn of five numbers, 200 ms apart: disconnect after the first.
  console.log('prompt "count 5 200ms", disconnecting after the first number:');
  let firstChunk;
  const gotFirst = new Promise((resolve) => (firstChunk = resolve));
  client.on((method, params) => {
    if (method === 'session/update' && params.update.sessionUpdate === 'agent_message_chunk') firstChunk();
  });
  client.call('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'count 5 200ms' }] }).catch(() => {});
  await gotFirst;
  await client.close();
  console.log(`disconnected; the last journal seq seen was ${lastSeen}`);

  // 5. Reconnect and catch up from the entry after the last one seen.
  //    _agenthost/subscribe sends every journal entry from fromSeq on as
  //    _agenthost/journal notifications, then follows new ones.
  client = await Client.connect(socketPath);
  await client.call('initialize', { protocolVersion: 1, clientCapabilities: {} });
  const entries = [];
  const stops = [];
  let mode = 'catch-up'; // then 'stops', then 'quiet'
  client.on((method, params) => {
    if (method !== '_agenthost/journal') return;
    entries.push(params);
    if (params.kind === 'stop') stops.push(params);
    if (mode === 'catch-up' && params.kind === 'update' && !params.payload.turnId) {
      console.log(`  entry seq=${params.seq} (of no turn) ${describe(params.payload.update)}`);
    } else if (mode === 'catch-up') {
      const what = params.kind === 'update' ? describe(params.payload.update) : params.kind === 'stop' ? `stop ${params.payload.stopReason}` : params.kind;
      console.log(`  entry seq=${params.seq} ${what}`);
    } else if (mode === 'stops' && params.kind === 'stop') {
      console.log(`  journal: seq=${params.seq} stop ${params.payload.stopReason}`);
    }
  });
  const from = lastSeen + 1;
  await client.call('_agenthost/subscribe', { sessionId, fromSeq: from });
  for (let waited = 0; stops.length < 1 && waited < 10000; waited += 20) await sleep(20);
  const seqs = entries.map((e) => e.seq);
  const gapFree = seqs.every((s, i) => s === from + i);
  console.log(`reconnected; caught up from seq ${from}: ${entries.length} entries (seq ${seqs[0]}..${seqs[seqs.length - 1]}), ${gapFree ? 'no gap' : 'GAP'}`);
  if (!gapFree || stops.length < 1) throw new Error(`catching up failed: seqs ${seqs}`);
  mode = 'stops'; // the subscription goes on; for now only turn ends are printed

  // 6. Resume the session on this connection; cancel a turn that would run
  //    for 30 s.
  client.on(onUpdate);
  await client.call('session/resume', { sessionId, cwd: process.cwd() });
  console.log(`session ${sessionId}: resumed`);
  console.log('prompt "sleep 30s", cancelled after 300 ms:');
  const held = client.call('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'sleep 30s' }] });
  await sleep(300);
  const cancelledAt = Date.now();
  client.notify('session/cancel', { sessionId });
  // Cancelling is idempotent: repeat it until the prompt is answered, in
  // case the first one reached the host before the agent had the prompt.
  const again = setInterval(() => client.notify('session/cancel', { sessionId }), 1000);
  try {
    res = await held;
    console.log(`  stop ${res.stopReason} after ${Date.now() - cancelledAt} ms`);
  } catch (err) {
    // The host may answer a cancelled prompt with an error; the turn's
    // own end (stop reason "cancelled") reaches the journal either way.
    console.log(`  answered after ${Date.now() - cancelledAt} ms: ${err.message}`);
  } finally {
    clearInterval(again);
  }
  for (let waited = 0; stops.length < 2 && waited < 10000; waited += 20) await sleep(20);
  if (stops.length < 2 || stops[1].payload.stopReason !== 'cancelled') throw new Error('the cancelled turn did not end as cancelled');
  mode = 'quiet';

  // 7. And a last turn.
  console.log('prompt "count 2":');
  res = await client.call('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'count 2' }] });
  console.log(`  stop ${res.stopReason}`);
  await client.close();
  console.log(`updates of no turn: ${[...new Set(sessionLevel)].join(', ') || 'none'}`);
  console.log('done');
}

main().catch((err) => {
  console.error(`node-client: ${err.message}`);
  process.exit(1);
});
