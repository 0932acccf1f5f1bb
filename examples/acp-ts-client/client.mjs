#!/usr/bin/env node
// A desktop app's session with agenthost, written on the official ACP
// TypeScript SDK (@agentclientprotocol/sdk 2.x, its client() app): it
// starts `agenthost acp --agent scripted` as its agent, as an editor does,
// and goes through what an app needs of a session. Every step checks what
// came back and prints "ok STEP: …"; the first that does not hold throws,
// and the script exits 1.
//
//   1. initialize: promptCapabilities image and embeddedContext
//   2. session/new with settings: a model and a mode in
//      _meta.agenthost.options, an MCP server in mcpServers; the result's
//      modes and configOptions; the slash commands
//   3. the settings and the MCP server reached the agent
//   4. session/set_mode plan: current_mode_update; the agent leaves plan
//      mode by itself (exitplan): current_mode_update again
//   5. session/set_config_option model smart: the result and
//      config_option_update
//   6. an image, an embedded resource and a resource link reach the agent
//   7. an edit asks, with a diff and a location, four options; answered
//      "allow always"; the file is written
//   8. a second edit is not asked again; the file is written
//   9. a title (session_info_update)
//  10. a long turn cancelled: stopReason "cancelled"
//  11. a provider refusing the credentials: the prompt fails with -32000
//
// Run again with --resume SESSION, against a new agenthost acp on the
// same state directory (the first one gone, and its plugin with it), it
// resumes the session and checks what the host kept: the mode and model
// set last, the MCP server, and the "allow always" grant (an edit is not
// asked).
//
// Usage: node client.mjs [--resume SESSION] WORKSPACE AGENT_COMMAND [ARG...]
//   e.g. node client.mjs /tmp/ws agenthost --state-dir /tmp/ah acp --agent scripted
// The SDK is imported from $AGENTHOST_ACP_SDK (a directory npm installed it
// into, as make acp-sdk does) when set, else from node's own resolution
// (lib.mjs). The agent's stderr goes to $AGENT_STDERR when set.

import fs from 'node:fs';
import path from 'node:path';

import { PNG, check, initialize, ok, run, withAgent } from './lib.mjs';

async function main() {
  let args = process.argv.slice(2);
  let resume;
  if (args[0] === '--resume') [, resume, ...args] = args;
  const [workspace, ...agentCommand] = args;
  if (!workspace || agentCommand.length === 0) throw new Error('usage: node client.mjs [--resume SESSION] WORKSPACE AGENT_COMMAND [ARG...]');

  await withAgent(agentCommand, async ({ acp, agent, updates, permissions, answer, prompter, cancel }) => {
    // 1. initialize
    const { init, pc } = await initialize(acp, agent);
    check(!pc.audio, 'no audio: the scripted agent does not declare it');
    ok('initialize', `protocol ${init.protocolVersion}, promptCapabilities ${JSON.stringify(pc)}`);

    const mcpServer = { name: 'files', command: '/bin/true', args: ['--serve'], env: [{ name: 'ROOT', value: workspace }] };
    const mcpLine = `mcp: files (stdio) /bin/true --serve ROOT=${workspace}\n`;
    const file = path.join(workspace, 'notes.txt');
    if (resume) {
      // The session again, from a host that never saw it run.
      const r = await agent.request(acp.methods.agent.session.resume, { sessionId: resume, cwd: workspace });
      const m = (r.configOptions ?? []).find((o) => o.id === 'model');
      check(r.modes?.currentModeId === 'default' && m?.currentValue === 'smart', `resumed in mode default with model smart, got ${JSON.stringify(r)}`);
      const [, say] = prompter(resume);
      let t = await say('settings');
      check(t.text === 'mode default, model smart, effort medium', `the agent's settings after the resume, got ${JSON.stringify(t.text)}`);
      t = await say('mcp');
      check(t.text === mcpLine, `the MCP server passed again, got ${JSON.stringify(t.text)}`);
      answer.kind = 'reject_once'; // were it asked, it would be refused
      t = await say('edit notes.txt third');
      check(permissions.length === 0, `no permission request after the resume, got ${permissions.length}`);
      check(t.text === 'edited notes.txt' && fs.readFileSync(file, 'utf8') === 'third\n', `the edit made, got ${JSON.stringify(t.text)}`);
      ok('resume', 'mode default, model smart, the MCP server and the "allow always" grant survived the host and its plugin');
      return;
    }

    // 2. session/new with settings
    const from = updates.all.length;
    const s = await agent.request(acp.methods.agent.session.new, {
      cwd: workspace,
      mcpServers: [mcpServer],
      _meta: { agenthost: { agent: 'scripted', options: { model: 'fast', mode: 'default', report_commands: 'true' } } },
    });
    const sessionId = s.sessionId;
    check(s.modes?.currentModeId === 'default', `modes.currentModeId default, got ${JSON.stringify(s.modes)}`);
    const modeIds = (s.modes?.availableModes ?? []).map((m) => m.id);
    check(['default', 'acceptEdits', 'plan'].every((m) => modeIds.includes(m)), `modes default, acceptEdits, plan, got ${modeIds}`);
    const model = (s.configOptions ?? []).find((o) => o.id === 'model');
    check(model?.currentValue === 'fast' && model.category === 'model', `config option model = fast, got ${JSON.stringify(model)}`);
    check((s.configOptions ?? []).some((o) => o.id === 'effort'), 'a config option effort');
    const cmds = await updates.waitFor('available_commands_update', (u) => u.sessionUpdate === 'available_commands_update', from);
    check(cmds.availableCommands.some((c) => c.name === 'edit'), `an edit command, got ${cmds.availableCommands.map((c) => c.name)}`);
    ok('session/new', `session ${sessionId}: modes ${modeIds}, model ${model.currentValue}, ${cmds.availableCommands.length} commands`);

    const [prompt, say] = prompter(sessionId);

    // 3. what reached the agent
    let r = await say('settings');
    check(r.text === 'mode default, model fast, effort medium', `the agent's settings, got ${JSON.stringify(r.text)}`);
    r = await say('mcp');
    check(r.text === mcpLine, `the MCP server reached the agent, got ${JSON.stringify(r.text)}`);
    ok('settings', `the agent has ${JSON.stringify('mode default, model fast, effort medium')} and ${JSON.stringify(r.text.trim())}`);

    // 4. set mode; the agent leaves plan mode by itself
    let at = updates.all.length;
    await agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: 'plan' });
    await updates.waitFor('current_mode_update plan', (u) => u.sessionUpdate === 'current_mode_update' && u.currentModeId === 'plan', at);
    r = await say('edit plan.txt nothing');
    check(r.text.startsWith('plan mode: plan.txt not edited') && !fs.existsSync(path.join(workspace, 'plan.txt')), `no edit in plan mode, got ${JSON.stringify(r.text)}`);
    r = await say('exitplan');
    await updates.waitFor('current_mode_update default from the agent', (u) => u.sessionUpdate === 'current_mode_update' && u.currentModeId === 'default', r.at);
    ok('session/set_mode', 'plan: current_mode_update plan, no edit made; exitplan: current_mode_update default');

    // 5. set model
    at = updates.all.length;
    const set = await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: 'model', value: 'smart' });
    check(set.configOptions.find((o) => o.id === 'model')?.currentValue === 'smart', `the result's model smart, got ${JSON.stringify(set.configOptions)}`);
    await updates.waitFor('config_option_update model smart', (u) => u.sessionUpdate === 'config_option_update' && u.configOptions.some((o) => o.id === 'model' && o.currentValue === 'smart'), at);
    r = await say('settings');
    check(r.text === 'mode default, model smart, effort medium', `the agent's settings after set_config_option, got ${JSON.stringify(r.text)}`);
    ok('session/set_config_option', 'model smart: in the result, in config_option_update and in the agent');

    // 6. rich prompts
    r = await prompt([
      { type: 'text', text: 'what is in these?' },
      { type: 'image', mimeType: 'image/png', data: PNG },
      { type: 'resource', resource: { uri: 'file:///notes/todo.md', mimeType: 'text/markdown', text: '- ship it' } },
      { type: 'resource_link', uri: 'file:///notes/big.log', name: 'big.log' },
    ]);
    const png = Buffer.from(PNG, 'base64').length;
    const want = `received image image/png, ${png} bytes\nreceived resource file:///notes/todo.md (text/markdown), 9 characters: "- ship it"\nreceived resource_link file:///notes/big.log (big.log)\nwhat is in these?`;
    check(r.stopReason === 'end_turn' && r.text === want, `the blocks reached the agent, got ${JSON.stringify(r.text)}`);
    ok('image prompt', `the agent received the image (${png} bytes), the resource and the link`);

    // 7. an edit asks, with its diff; allow always
    fs.writeFileSync(file, 'old\n');
    answer.kind = 'allow_always';
    r = await say('edit notes.txt hello');
    check(permissions.length === 1, `one permission request, got ${permissions.length}`);
    const req = permissions[0].params;
    const diff = (req.toolCall.content ?? []).find((c) => c.type === 'diff');
    check(diff && diff.path === file && diff.oldText === 'old\n' && diff.newText === 'hello\n', `a diff of ${file} old -> hello, got ${JSON.stringify(req.toolCall.content)}`);
    check(req.toolCall.kind === 'edit' && req.toolCall.locations?.[0]?.path === file, `kind edit at ${file}, got ${JSON.stringify(req.toolCall)}`);
    const kinds = req.options.map((o) => o.kind).sort().join(',');
    check(kinds === 'allow_always,allow_once,reject_always,reject_once', `the four options, got ${kinds}`);
    check(r.text === 'edited notes.txt' && fs.readFileSync(file, 'utf8') === 'hello\n', `the file written, got ${JSON.stringify(r.text)}`);
    const call = await updates.waitFor('tool_call with the diff', (u) => u.sessionUpdate === 'tool_call' && (u.content ?? []).some((c) => c.type === 'diff'), r.at);
    ok('permission with a diff', `${req.toolCall.title}: diff ${JSON.stringify(diff.oldText)} -> ${JSON.stringify(diff.newText)}, options ${kinds}; answered ${permissions[0].answered}; tool_call ${call.toolCallId} shows the diff too`);

    // 8. the second edit is not asked
    answer.kind = 'reject_once'; // were it asked, it would be refused
    r = await say('edit notes.txt again');
    check(permissions.length === 1, `no second permission request, got ${permissions.length}`);
    check(r.text === 'edited notes.txt' && fs.readFileSync(file, 'utf8') === 'again\n', `the second edit made, got ${JSON.stringify(r.text)}`);
    ok('allow always', 'the second edit was not asked and the file was written');

    // 9. a title
    r = await say('title Tidy the notes');
    await updates.waitFor('session_info_update', (u) => u.sessionUpdate === 'session_info_update' && u.title === 'Tidy the notes', r.at);
    ok('title', 'session_info_update "Tidy the notes"');

    // 10. cancel
    at = updates.all.length;
    const held = say('sleep 30s');
    await updates.waitFor('the long turn', (u) => u.sessionUpdate === 'user_message_chunk' && u.content.text === 'sleep 30s', at);
    const cancelledAt = Date.now();
    r = await cancel(sessionId, held);
    check(r.stopReason === 'cancelled', `stopReason cancelled, got ${r.stopReason}`);
    ok('cancel', `stopReason cancelled after ${Date.now() - cancelledAt} ms`);

    // 11. auth required
    const refused = await say('auth').then(() => null, (err) => err);
    check(refused?.code === -32000, `code -32000 (auth required), got ${refused?.code}: ${refused?.message}`);
    ok('auth required', `${refused.code} ${refused.message}`);
  });
}

run('acp-ts-client', main);
