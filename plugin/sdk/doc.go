// Package sdk is what a third-party agent plugin imports. A plugin is a
// program whose main calls Serve with a Factory; agenthost starts one such
// process per session (over hashicorp go-plugin and gRPC) and drives it
// through a small protocol shaped after the Agent Client Protocol.
//
// An Agent has three required methods — NewSession, ResumeSession and
// Prompt — and optional interfaces (Closer, Describer); embed
// UnimplementedAgent to grow one step by step. Prompt reports a turn's
// progress through a Turn: message and thought chunks, tool calls and their
// updates, plans, usage, provider handle changes, and permission requests
// that wait for the user's answer. Returning StopCancelled when the turn's
// context is cancelled is how cancellation works; returning an error fails
// the turn with that message.
//
// Every update is numbered and kept in an outbox until the host confirms it
// is in its journal. A host that crashes or restarts reattaches, asks again
// from its last journaled update, and gets the rest: nothing is lost and
// nothing is written twice. The outbox keeps a bounded amount in memory and
// spills the oldest updates to a file in the session's directory.
//
// Every call from a host carries its lease fence. The plugin remembers the
// highest fence it was attached at and refuses lower ones, so a host that
// lost the session can never drive the plugin again. The protocol's whole
// contract, which this package meets for an Agent, is docs/protocol.md in the
// repository.
//
// Rules for plugin code: never write to stdout (it carries the go-plugin
// handshake); log through Environment.Logger, which writes hclog JSON to the
// session's log file. Serve handles SIGPIPE (a plugin whose host died must
// not die writing to a broken pipe) and SIGTERM (cancel the turn, close the
// agent, stop).
//
// The package stays light for plugin authors: it imports neither the host,
// the lease store, Badger, gopsutil nor the testing package (a test in
// internal/archtest enforces this). Package sdktest tests a plugin: its
// harness drives an agent in-process (served with ServeListener, over real
// gRPC), and its conformance kit checks a plugin binary against the
// protocol.
package sdk
