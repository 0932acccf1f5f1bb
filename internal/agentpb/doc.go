// Package agentpb holds the generated Go code of the agenthost plugin
// protocol (proto/agenthost/agent/v1). Regenerate with make generate; never
// edit by hand.
package agentpb
