// Package codex is the reference plugin that drives `codex app-server` over
// JSON-RPC on stdio, one app-server per session. It is built only on package
// plugin/sdk.
//
// The plugin is delivered by the Claude and Codex plugins issue.
package codex
