// Package sdktest runs the agenthost plugin conformance kit from a
// plugin's Go tests: it starts the plugin binary as a host does and checks,
// over the real go-plugin handshake and gRPC protocol, that it behaves as
// the host expects.
//
// Build the binary and hand it to Run, which runs each check as a subtest:
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
