// Package sdktest tests agenthost agent plugins from their Go tests, in two
// ways: NewHarness drives an agent's behaviour in-process, and Run checks a
// plugin binary against the protocol with the conformance kit.
//
// # The harness
//
// NewHarness serves the agent a Factory creates inside the test process,
// over real gRPC on an in-memory connection, and drives it with the host's
// own plugin client, attached at fence 1: the test opens a session,
// prompts, reads the turn's updates (as the host receives them: each with
// its protocol kind and the journal's record of it, the shape an API client
// is sent), answers permission requests, cancels and closes, and sees
// every failure as agenthost would (match ErrAgent, ErrBusy, … with
// errors.Is):
//
//	func TestHello(t *testing.T) {
//		h := sdktest.NewHarness(t, myagent.New)
//		ctx := t.Context()
//		if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
//			t.Fatal(err)
//		}
//		ups, stop := h.Run("say hello", 10*time.Second)
//		if stop.StopReason != string(sdk.StopEndTurn) || sdktest.Messages(ups) != "hello" {
//			t.Fatalf("%s: %s", stop.StopReason, sdktest.Describe(ups))
//		}
//	}
//
// The factory and the agent run in the test's process when the first
// NewSession or ResumeSession arrives, so the agent's configuration is the
// test's to give: session options in that request, environment variables
// (the path of a fake CLI, a HOME holding a fake login) with t.Setenv
// before it. A CLI the agent starts is a child of the test process. What
// needs a plugin process of its own (its exit, signals sent to it) is for
// NewProcessHarness, which starts the plugin binary with the test's
// environment and drives it with the same methods; a test that kills it
// must not use NewHarness, whose agent is the test's own process.
//
// When the test ends, the harness cancels the running turn, closes the
// agent and waits for every goroutine it started; an agent whose Close
// fails fails the test.
//
// # Conformance
//
// Run starts the plugin binary as a host does and checks, over the real
// go-plugin handshake and gRPC protocol, that it behaves as the host
// expects; each check is a subtest:
//
//	func TestConformance(t *testing.T) {
//		bin := buildPlugin(t) // go build -o into t.TempDir()
//		sdktest.Run(t, bin, sdktest.WithPrompts(sdktest.Prompts{
//			Stream: "say hello", // a turn that streams and ends by itself
//			Hold:   "wait",      // a turn that runs until cancelled
//		}))
//	}
//
// The checks themselves, their order and what each expects are those of
// package plugin/sdk/conformance, which holds them without importing the
// testing package (the agenthost conformance command runs them too); this
// package re-exports its types and options, so either import works with the
// same values. Check returns the results instead of failing a test.
package sdktest
