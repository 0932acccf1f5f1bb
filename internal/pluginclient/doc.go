// Package pluginclient is the host side of the plugin protocol: one typed
// client over the generated Agent service, used by the host, the
// conformance kit and sdktest's harness. Callers pass and receive Go values;
// the generated protobuf stays behind this package.
//
// # Fencing
//
// Every call that drives a plugin carries the fence of the host that makes
// it, and the plugin refuses a fence below the one it is attached at, so a
// host that lost the session's lease can never drive it again. Here the
// fence is bound once: Client.Attach returns an Attachment, and every fenced
// call is a method of it. Identify carries no fence and is a method of the
// Client, so a host can ask who a process is before it decides to attach.
// An Attachment whose fence another Attach raised keeps its fence: its calls
// are refused with ErrStaleFence, which is how the conformance kit checks
// the refusal.
//
// # Errors
//
// A failed call returns an *Error, which prints as the gRPC status it came
// from and matches, with errors.Is, one sentinel saying what happened:
// ErrStaleFence, ErrBusy, ErrClosed, ErrUnavailable (the plugin is gone),
// …, or the caller's context error when its context ended. The SDK names
// the reason of each refusal in a status detail (see internal/wire), because
// it answers most of them with the same gRPC code; a refusal without a
// reason (a plugin not built on the SDK) matches the sentinel of its code,
// ErrRefused for FAILED_PRECONDITION. Only ErrStaleFence means a newer host
// took the plugin over: callers must not read any other refusal that way.
//
// # Across machines
//
// Two calls of protocol version 2 serve cluster mode, on the Client with
// an explicit fence and on an Attachment at its own: Heartbeat keeps a
// plugin spawned with wire.EnvSelfFence from fencing itself (a self-fenced
// plugin refuses prompts with ErrSelfFenced), and ExportState fetches the
// provider state a ResumeSessionRequest.ProviderState carries back on any
// machine (ExportState raises the receive limit to
// wire.MaxStateMessageSize for its answer). Against a version 1 plugin, or
// one built before them, both fail with ErrNotImplemented.
//
// # Updates
//
// Updates returns an UpdateStream whose elements are already the
// journal's records (package journal): the host journals them as they
// are, and the conformance kit and sdktest's harness read the same values,
// so the protocol's update messages are converted in one place.
package pluginclient
