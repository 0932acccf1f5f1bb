package codex

import "encoding/json"

// The rawInput of the tool calls and permission requests the plugin
// reports for codex's commands and file changes. A client (or a test)
// decodes them with these types; the plugin builds them from these types
// only, so the shape has one owner. Codex's own wire shapes (threadItem,
// approvalParams) stay unexported: these are the plugin's contract, not
// codex's.

// CommandInput is the rawInput of a command's tool call and of the
// permission request to run it.
type CommandInput struct {
	// Command is the command line as codex runs it: the model's command
	// wrapped in codex's login shell (/bin/bash -lc '<cmd>'). The tool
	// call's title is the unwrapped command.
	Command string `json:"command"`
	// Cwd is the directory the command runs in.
	Cwd string `json:"cwd"`
	// Reason is why codex asks; permission requests only, when codex
	// gives one.
	Reason string `json:"reason,omitempty"`
}

// PatchInput is the rawInput of a file change's tool call and of the
// permission request to apply it.
type PatchInput struct {
	// Changes are the files the change touches. Codex's request names
	// only the item, so a permission request carries them from the
	// fileChange item codex announced before asking; it has none if
	// codex announced none.
	Changes []FileChange `json:"changes,omitempty"`
	// GrantRoot is the directory codex asks write access to for the rest
	// of the session, if it asks for one; permission requests only.
	GrantRoot string `json:"grantRoot,omitempty"`
	// Reason is why codex asks; permission requests only, when codex
	// gives one.
	Reason string `json:"reason,omitempty"`
}

// FileChange is one file of a PatchInput.
type FileChange struct {
	Path string `json:"path"`
	// Kind is codex's kind of change as codex reports it, such as
	// {"type":"add"}.
	Kind json.RawMessage `json:"kind"`
	// Diff is the change to the file; permission requests only.
	Diff string `json:"diff,omitempty"`
}

// patchChanges is codex's file changes as a PatchInput's, with their
// diffs or without.
func patchChanges(changes []fileChange, withDiff bool) []FileChange {
	out := make([]FileChange, len(changes))
	for i, c := range changes {
		out[i] = FileChange{Path: c.Path, Kind: c.Kind}
		if withDiff {
			out[i].Diff = c.Diff
		}
	}
	return out
}
