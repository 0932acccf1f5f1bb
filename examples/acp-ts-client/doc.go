// Package acptsclient holds client.mjs, a client of agenthost written on
// the official Agent Client Protocol TypeScript SDK
// (@agentclientprotocol/sdk 2.x), the library desktop apps and editors
// build ACP clients with. It starts `agenthost acp --agent scripted` as its
// agent over stdio and goes through what an app needs of a session:
// settings at session/new (a model and a mode in _meta.agenthost.options,
// an MCP server), set_mode and set_config_option with their updates, an
// image prompt, a permission request with a diff answered "allow always",
// a second edit not asked again, a title, a cancelled turn and an
// auth-required failure. Its test runs it where node and the SDK are
// installed (make acp-sdk installs the pinned SDK into .cache/acp-sdk).
//
//	make acp-sdk
//	AGENTHOST_ACP_SDK=.cache/acp-sdk node examples/acp-ts-client/client.mjs /tmp/ws \
//		agenthost --state-dir /tmp/ah acp --agent scripted --shutdown-sessions
package acptsclient
