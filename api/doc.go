// Package api is the contract of agenthost's local API: the JSON-RPC 2.0
// methods the host serves on its socket (package host/localapi), their
// params and results, the error codes it answers with, and the journal
// entry a subscriber receives. The server, the Go client
// (internal/apiclient) and the CLI all use these types, and a Go program
// that talks to the socket can import them too.
//
// # The model
//
// The local API is the Agent Client Protocol (ACP) plus agenthost's own
// methods under the "_agenthost/" prefix. ACP's methods and shapes belong
// to ACP (github.com/coder/acp-go-sdk); this package names them and adds
// what agenthost puts under _meta.agenthost. Its own methods are
// subscribe (a session's journal from a sequence number, as
// _agenthost/journal notifications), stop, session (one session's
// record), status (the host) and agents.
//
// A journal entry's payload is left as JSON here: package journal owns
// its shape and decodes it (journal.DecodePayload). This package imports
// neither the host nor the store, so a storage field renamed cannot
// change the API: the host converts its own types to these.
//
// # Hazards
//
// These types are wire bytes. Every result marshals exactly as the API
// always answered, so members once written from maps are declared in
// sorted order and omitted members stay omitted; testdata/golden in
// host/localapi fixes the bytes. Adding a member is a change clients see;
// renaming or removing one breaks them.
package api
