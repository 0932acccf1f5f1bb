// Package nodeclient holds client.mjs, an example client of agenthost's
// local API in Node.js with no dependencies, the way a desktop app would
// speak to `agenthost serve` over its unix socket: it creates a session,
// prompts, cancels a turn, reconnects and catches up on the journal from
// the last seq it saw, resumes the session and prompts again. Its test
// runs it against a real host when node is installed.
//
//	agenthost serve --state-dir /tmp/ah &
//	node examples/node-client/client.mjs /tmp/ah/agenthost.sock
package nodeclient
