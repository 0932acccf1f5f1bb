package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// The scripted agent's provider state is its conversation: the text of
// every prompt of the session, oldest first, as a real provider keeps a
// transcript. It lives in memory and, when the host gives a session
// directory, in a file there (history-<handle>.json), so a plugin started
// again on the same machine resumes it as claude resumes its transcript;
// ExportState hands it to a host on another machine and ImportState puts
// it in place there. The history command shows it.

var (
	_ sdk.StateExporter = (*agent)(nil)
	_ sdk.StateImporter = (*agent)(nil)
)

// EnvNoExport, set to 1 in the plugin's environment, makes the command
// serve NewLocal: a scripted agent that does not export its state, like a
// third-party plugin without StateExporter, whose sessions a cluster
// resumes only on their own machine.
const EnvNoExport = "AGENTHOST_SCRIPTED_NO_EXPORT"

// NewLocal is the sdk.Factory of the scripted agent without
// sdk.StateExporter and sdk.StateImporter (see EnvNoExport).
func NewLocal(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	a, err := New(ctx, env)
	if err != nil {
		return nil, err
	}
	return localAgent{agent: a.(*agent)}, nil
}

// localAgent is the scripted agent whose fields ExportState and
// ImportState hide the methods of those names *agent would promote (a
// shallower selector wins), so it is neither a StateExporter nor a
// StateImporter while keeping every other method.
type localAgent struct {
	*agent
	ExportState, ImportState struct{}
}

var _ sdk.Agent = localAgent{}

// exported is the state's encoding: versioned JSON, so an import can tell
// it from anything else.
type exported struct {
	Format  string   `json:"format"`
	Handle  string   `json:"handle"`
	Prompts []string `json:"prompts"`
}

const stateFormat = "scripted-history-1"

// ExportState implements sdk.StateExporter.
func (a *agent) ExportState(ctx context.Context, handle string) ([]byte, error) {
	a.mu.Lock()
	prompts := append([]string{}, a.history...)
	a.mu.Unlock()
	return json.Marshal(exported{Format: stateFormat, Handle: handle, Prompts: prompts})
}

// ImportState implements sdk.StateImporter: the history replaces what this
// machine held of the conversation, before ResumeSession reads it.
func (a *agent) ImportState(ctx context.Context, handle string, state []byte) error {
	var e exported
	if err := json.Unmarshal(state, &e); err != nil {
		return fmt.Errorf("scripted: the provider state is not the scripted agent's: %w", err)
	}
	if e.Format != stateFormat {
		return fmt.Errorf("scripted: the provider state has format %q, want %q", e.Format, stateFormat)
	}
	if e.Handle != handle {
		return fmt.Errorf("scripted: the provider state continues %q, not %q", e.Handle, handle)
	}
	// This machine's copy wins when it already holds the state's prompts
	// and more: the host's state may be a turn behind (its export failed).
	local, err := a.loadHistory(handle)
	if err != nil {
		return err
	}
	if len(local) >= len(e.Prompts) && slices.Equal(local[:len(e.Prompts)], e.Prompts) {
		a.log.Info("kept this machine's conversation, which contains the imported one", "handle", handle,
			"prompts", len(local), "imported", len(e.Prompts))
		return nil
	}
	a.mu.Lock()
	a.history = e.Prompts
	a.mu.Unlock()
	a.log.Info("imported provider state", "handle", handle, "prompts", len(e.Prompts))
	return a.saveHistory(handle)
}

// historyPath is the file of handle's history, "" without a session
// directory. The handle is escaped: it comes from the host.
func (a *agent) historyPath(handle string) string {
	if a.sessionDir == "" {
		return ""
	}
	return filepath.Join(a.sessionDir, "history-"+url.PathEscape(handle)+".json")
}

// loadHistory reads handle's history from this machine, none when it has
// no file.
func (a *agent) loadHistory(handle string) ([]string, error) {
	p := a.historyPath(handle)
	if p == "" {
		return nil, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scripted: read the conversation: %w", err)
	}
	var prompts []string
	if err := json.Unmarshal(b, &prompts); err != nil {
		return nil, fmt.Errorf("scripted: read the conversation %s: %w", p, err)
	}
	return prompts, nil
}

// saveHistory writes the history to this machine (atomically: a reader
// sees the old file or the new one).
func (a *agent) saveHistory(handle string) error {
	p := a.historyPath(handle)
	if p == "" {
		return nil
	}
	a.mu.Lock()
	b, err := json.Marshal(a.history)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("scripted: save the conversation: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("scripted: save the conversation: %w", err)
	}
	return nil
}

// remember adds a prompt to the conversation; a failure to save it is
// logged (the turn goes on, as a provider's would).
func (a *agent) remember(handle, prompt string) {
	a.mu.Lock()
	a.history = append(a.history, prompt)
	a.mu.Unlock()
	if err := a.saveHistory(handle); err != nil {
		a.log.Warn("the conversation was not saved", "error", err)
	}
}

// historyMessage is the history command's chunk.
func historyMessage(prompts []string) string {
	if len(prompts) == 0 {
		return "history: no earlier prompts"
	}
	return fmt.Sprintf("history: %d earlier prompts: %s", len(prompts), strings.Join(prompts, " | "))
}
