#!/usr/bin/env node
// client.mjs's walk through a session, against the real claude CLI behind
// `agenthost acp --agent claude`, on the official ACP TypeScript SDK. The
// CLI's model is a scripted model server (its test sets it up), which
// answers the prompts below in order: a text, an Edit of notes.txt
// ("old" to "hello"), a second Edit ("hello" to "again"), and a slow text
// that is cancelled. Each step
// prints "ok STEP: …"; what only the model server sees (the image, the
// model chosen) its test checks.
//
//   1. initialize: promptCapabilities image and embeddedContext
//   2. session/new with the model and mode options; modes and config options
//   3. session/set_mode plan then default: current_mode_update each time
//   4. session/set_config_option model: the result and config_option_update
//   5. an image prompt
//   6. an Edit asks, with a diff; answered "allow always"; the file written
//   7. a second Edit is not asked; the file written
//   8. a slow answer cancelled: stopReason "cancelled"
//
// Usage: node claude.mjs WORKSPACE MODEL NEXT_MODEL AGENT_COMMAND [ARG...]

import fs from 'node:fs';
import path from 'node:path';

import { PNG, check, initialize, ok, run, withAgent } from './lib.mjs';

async function main() {
  const [workspace, model, nextModel, ...agentCommand] = process.argv.slice(2);
  if (!nextModel || agentCommand.length === 0) throw new Error('usage: node claude.mjs WORKSPACE MODEL NEXT_MODEL AGENT_COMMAND [ARG...]');

  await withAgent(agentCommand, async ({ acp, agent, updates, permissions, answer, prompter, cancel }) => {
    const { init, pc } = await initialize(acp, agent);
    ok('initialize', `promptCapabilities ${JSON.stringify(pc)}, authMethods ${(init.authMethods ?? []).map((m) => m.id)}`);

    const s = await agent.request(acp.methods.agent.session.new, {
      cwd: workspace,
      mcpServers: [],
      _meta: { agenthost: { agent: 'claude', options: { model, mode: 'default' } } },
    });
    const sessionId = s.sessionId;
    const modeIds = (s.modes?.availableModes ?? []).map((m) => m.id);
    check(s.modes?.currentModeId === 'default' && ['acceptEdits', 'plan'].every((m) => modeIds.includes(m)), `claude's modes, got ${JSON.stringify(s.modes)}`);
    const modelOpt = (s.configOptions ?? []).find((o) => o.id === 'model');
    check(modelOpt?.currentValue === model, `config option model = ${model}, got ${JSON.stringify(modelOpt)}`);
    ok('session/new', `session ${sessionId}: modes ${modeIds}, model ${modelOpt.currentValue}`);

    let at = updates.all.length;
    await agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: 'plan' });
    await updates.waitFor('current_mode_update plan', (u) => u.sessionUpdate === 'current_mode_update' && u.currentModeId === 'plan', at);
    at = updates.all.length;
    await agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: 'default' });
    await updates.waitFor('current_mode_update default', (u) => u.sessionUpdate === 'current_mode_update' && u.currentModeId === 'default', at);
    ok('session/set_mode', 'plan, then default: current_mode_update each time');

    at = updates.all.length;
    const set = await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: 'model', value: nextModel });
    check(set.configOptions.find((o) => o.id === 'model')?.currentValue === nextModel, `the result's model ${nextModel}, got ${JSON.stringify(set.configOptions)}`);
    await updates.waitFor(`config_option_update model ${nextModel}`, (u) => u.sessionUpdate === 'config_option_update' && u.configOptions.some((o) => o.id === 'model' && o.currentValue === nextModel), at);
    ok('session/set_config_option', `model ${nextModel}: in the result and in config_option_update`);

    const [prompt, say] = prompter(sessionId);
    let r = await prompt([{ type: 'text', text: 'what is this?' }, { type: 'image', mimeType: 'image/png', data: PNG }]);
    check(r.stopReason === 'end_turn' && r.text.length > 0, `the image turn: ${r.stopReason} ${JSON.stringify(r.text)}`);
    ok('image prompt', `answered ${JSON.stringify(r.text)}`);

    const file = path.join(workspace, 'notes.txt');
    answer.kind = 'allow_always';
    r = await say('write the notes');
    check(permissions.length === 1, `one permission request, got ${permissions.length}`);
    const req = permissions[0].params;
    const diff = (req.toolCall.content ?? []).find((c) => c.type === 'diff');
    check(diff && diff.path === file && diff.oldText === 'old' && diff.newText === 'hello', `a diff of ${file} old -> hello, got ${JSON.stringify(req.toolCall.content)}`);
    const kinds = req.options.map((o) => o.kind);
    check(kinds.includes('allow_always'), `an allow_always option, got ${kinds}`);
    check(r.stopReason === 'end_turn' && fs.readFileSync(file, 'utf8') === 'hello\n', `the file written, got ${r.stopReason}`);
    ok('permission with a diff', `${req.toolCall.title}: diff ${JSON.stringify(diff.oldText)} -> ${JSON.stringify(diff.newText)}, options ${kinds}; answered ${permissions[0].answered}`);

    answer.kind = 'reject_once'; // were it asked, it would be refused
    r = await say('write them again');
    check(permissions.length === 1, `no second permission request, got ${permissions.length}`);
    check(r.stopReason === 'end_turn' && fs.readFileSync(file, 'utf8') === 'again\n', `the second Edit made, got ${r.stopReason}`);
    ok('allow always', 'the second Edit was not asked and the file was written');

    at = updates.all.length;
    const held = say('talk slowly');
    await updates.waitFor('the slow answer', (u) => u.sessionUpdate === 'agent_message_chunk', at);
    r = await cancel(sessionId, held);
    check(r.stopReason === 'cancelled', `stopReason cancelled, got ${r.stopReason}`);
    ok('cancel', 'stopReason cancelled');
  });
}

run('acp-ts-client claude', main);
