package probe

import (
	"strings"
	"testing"
)

// FuzzParseStat feeds arbitrary /proc/<pid>/stat contents to the parser:
// it must never panic, and what it accepts must be what the fields say.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 184467\n"))
	f.Add([]byte("7 (a) b) c (d) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"))
	f.Add([]byte("9 (x"))
	f.Add([]byte(")"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Process
		if err := parseStat(b, &p); err != nil {
			return
		}
		s := string(b)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if p.Zombie != (rest[0] == "Z" || rest[0] == "X") {
			t.Fatalf("state %q parsed as zombie=%v", rest[0], p.Zombie)
		}
	})
}

// FuzzEnvValue feeds arbitrary environment blocks to the token reader.
func FuzzEnvValue(f *testing.F) {
	f.Add([]byte("A=1\x00AGENTHOST_SPAWN_TOKEN=tok\x00"), "AGENTHOST_SPAWN_TOKEN")
	f.Add([]byte("AGENTHOST_SPAWN_TOKEN_X=no\x00"), "AGENTHOST_SPAWN_TOKEN")
	f.Add([]byte("\x00\x00="), "")
	f.Fuzz(func(t *testing.T, env []byte, name string) {
		v := envValue(env, name)
		if v != "" && !strings.Contains(string(env), name+"="+v) {
			t.Fatalf("value %q for %q is not in the block", v, name)
		}
	})
}
