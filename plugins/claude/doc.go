// Package claude is the reference plugin that drives the `claude` command
// line agent in stream-json mode, one long-lived CLI process per session in
// the plugin's own process group. It is built only on package plugin/sdk.
//
// The plugin is delivered by the Claude and Codex plugins issue.
package claude
