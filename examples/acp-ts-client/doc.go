// Package acptsclient holds clients of agenthost written on the official
// Agent Client Protocol TypeScript SDK (@agentclientprotocol/sdk 2.x, its
// client() app), the library desktop apps and editors build ACP clients
// with, and the tests that run them where node and the SDK are installed
// (make acp-sdk installs the pinned SDK into .cache/acp-sdk; make test
// runs it first).
//
// client.mjs starts `agenthost acp --agent scripted` as its agent over
// stdio and goes through what an app needs of a session: settings at
// session/new (a model and a mode in _meta.agenthost.options, an MCP
// server), set_mode and set_config_option with their updates, an image
// prompt, a permission request with a diff answered "allow always", a
// second edit not asked again, a title, a cancelled turn and an
// auth-required failure; run again with --resume against a new host, it
// finds the settings and the grant kept. claude.mjs walks the same way
// through a session of the real claude CLI, whose model is a scripted
// model server its test starts. lib.mjs is what the two share.
//
//	make acp-sdk build
//	AGENTHOST_ACP_SDK=.cache/acp-sdk node examples/acp-ts-client/client.mjs /tmp/ws \
//		bin/agenthost --state-dir /tmp/ah acp --agent scripted --shutdown-sessions
//
// The 2.x SDK dropped ClientSideConnection for client().onRequest(…)
// .onNotification(…).connectWith(stream, …), which these use. It checks
// every message it reads against the ACP schema and logs what fails
// ("Invalid message"); the tests fail on such a line.
package acptsclient
