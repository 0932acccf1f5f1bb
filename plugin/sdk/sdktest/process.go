package sdktest

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
)

// NewProcessHarness starts the plugin binary at binaryPath as a host does
// (go-plugin's handshake, gRPC, the process leading a process group of
// its own) and drives it as NewHarness drives an in-process agent:
// attached at fence 1, following the session's updates from seq 1.
//
// It is for what only a plugin process shows: its own death (Identify's
// PID is the process's, so a test can signal it) and what that does to
// the CLI it started. The process's environment is the test's at the call,
// so t.Setenv configures it as it configures an in-process agent, plus the
// session directory the harness makes. Its log lines reach the
// WithAgentLogger logger (default: the test's log), at that logger's level
// unless the test set AGENTHOST_PLUGIN_LOG_LEVEL. When the test ends the
// process is stopped as a host stops it, through go-plugin's shutdown, and
// its process group is killed, so nothing it started outlives the test.
func NewProcessHarness(t testing.TB, binaryPath string, opts ...HarnessOption) *Harness {
	t.Helper()
	cfg := newHarnessConfig(t, opts)
	// os/exec keeps the last of duplicate keys: the test's log level wins
	// over the logger's, the harness's session directory over the test's.
	env := append([]string{wire.EnvLogLevel + "=" + cfg.logger.GetLevel().String()}, os.Environ()...)
	env = append(env, wire.EnvSessionDir+"="+t.TempDir())
	cmd := exec.Command(binaryPath)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     30 * time.Second,
		Logger:           cfg.logger,
	})
	stop := func() {
		pc.Kill()
		if cmd.Process != nil {
			// A pgid is not reused while its group has members.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	rpc, err := pc.Client()
	if err != nil {
		stop()
		t.Fatalf("sdktest: start the plugin %s: %v", binaryPath, err)
	}
	client, err := pluginclient.Dispense(rpc, pc.NegotiatedVersion())
	if err != nil {
		stop()
		t.Fatalf("sdktest: %v", err)
	}
	return attach(t, client, stop)
}
