// The parts of an ACP client on the official TypeScript SDK that
// client.mjs and claude.mjs share: loading the SDK, starting the agent
// command and connecting to it over stdio, the updates received, the
// permission requests answered, and the checks' output.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';

// loadSDK imports @agentclientprotocol/sdk from $AGENTHOST_ACP_SDK (a
// directory npm installed it into, as make acp-sdk does) when set, else
// through node's own resolution.
async function loadSDK() {
  const dir = process.env.AGENTHOST_ACP_SDK;
  if (!dir) return import('@agentclientprotocol/sdk');
  const require = createRequire(path.join(path.resolve(dir), 'package.json'));
  return import(pathToFileURL(require.resolve('@agentclientprotocol/sdk')).href);
}

// A 1×1 PNG.
export const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';
const WAIT_MS = 10000;

// initialize opens the ACP connection and checks the agent declares
// image and embedded-context prompts, which both walks send; it returns
// the initialize result and its promptCapabilities.
export async function initialize(acp, agent) {
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
    clientInfo: { name: 'acp-ts-client', version: '1' },
  });
  const pc = init.agentCapabilities?.promptCapabilities ?? {};
  check(pc.image === true && pc.embeddedContext === true, `promptCapabilities image and embeddedContext, got ${JSON.stringify(pc)}`);
  return { init, pc };
}

export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

export function ok(step, detail) {
  console.log(`ok ${step}: ${detail}`);
}

// Updates is every session/update the client got, with a way to wait for
// one that has not come yet.
export class Updates {
  constructor() {
    this.all = [];
    this.waiters = [];
  }
  push(n) {
    this.all.push(n);
    for (const w of this.waiters.splice(0)) w();
  }
  // waitFor resolves with the first update from index from on that pred
  // accepts.
  async waitFor(what, pred, from = 0) {
    const deadline = Date.now() + WAIT_MS;
    for (let i = from; ; ) {
      for (; i < this.all.length; i++) if (pred(this.all[i].update)) return this.all[i].update;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${WAIT_MS} ms; got ${this.all.slice(from).map((n) => n.update.sessionUpdate)}`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => (clearTimeout(t), resolve()));
      });
    }
  }
  // text is the agent's message chunks from index from on.
  text(from) {
    return this.all
      .slice(from)
      .filter((n) => n.update.sessionUpdate === 'agent_message_chunk')
      .map((n) => n.update.content.text)
      .join('');
  }
}

// withAgent starts agentCommand (its stderr to $AGENT_STDERR when set),
// connects a client() app to it and runs body with what a session needs:
//   acp          the SDK
//   agent        the connection's ClientContext (agent.request, agent.notify)
//   updates      every session/update received
//   permissions  every session/request_permission, with the option chosen
//   answer       answer.kind is the option kind permission requests get
//                (none of that kind: cancelled)
//   prompter(id) [prompt(blocks), say(text)], each resolving with the
//                stop reason, the agent's text and the updates' index
//                before the prompt
//   cancel(id, held)  cancels the turn held resolves, until it does
// Once body returns, stdin is closed and the agent must exit 0.
export async function withAgent(agentCommand, body) {
  const acp = await loadSDK();
  const agentStderr = process.env.AGENT_STDERR ? fs.openSync(process.env.AGENT_STDERR, 'a') : 'inherit';
  const child = spawn(agentCommand[0], agentCommand.slice(1), { stdio: ['pipe', 'pipe', agentStderr] });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

  const updates = new Updates();
  const permissions = [];
  const answer = { kind: 'allow_once' };
  const app = acp
    .client()
    .onNotification(acp.methods.client.session.update, ({ params }) => updates.push(params))
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      const option = params.options.find((o) => o.kind === answer.kind);
      permissions.push({ params, answered: option?.optionId });
      return option ? { outcome: { outcome: 'selected', optionId: option.optionId } } : { outcome: { outcome: 'cancelled' } };
    });

  await app.connectWith(stream, async (agent) => {
    const prompter = (sessionId) => {
      const prompt = async (blocks) => {
        const at = updates.all.length;
        const res = await agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: blocks });
        return { stopReason: res.stopReason, text: updates.text(at), at };
      };
      return [prompt, (text) => prompt([{ type: 'text', text }])];
    };
    const cancel = async (sessionId, held) => {
      await agent.notify(acp.methods.agent.session.cancel, { sessionId });
      // Cancelling is idempotent: repeat it until the prompt is answered,
      // in case the first reached the host before the agent had the prompt.
      const again = setInterval(() => agent.notify(acp.methods.agent.session.cancel, { sessionId }).catch(() => {}), 1000);
      try {
        return await held;
      } finally {
        clearInterval(again);
      }
    };
    await body({ acp, agent, updates, permissions, answer, prompter, cancel });
  });

  child.stdin.end();
  const { code, signal } = await exited;
  check(code === 0, `the agent exited with ${code ?? signal}`);
  console.log('done');
}

// run runs main and exits 1, saying why, if it throws.
export function run(name, main) {
  main().catch((err) => {
    console.error(`${name}: ${err.stack || err.message}`);
    process.exit(1);
  });
}
