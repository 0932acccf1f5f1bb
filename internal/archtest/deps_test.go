package archtest

import (
	"slices"
	"strings"
	"testing"
)

// depRule forbids the packages matched by from (minus except) to depend,
// directly or transitively, on any package matched by deny.
//
// Patterns are import paths; a trailing "/..." also matches every package
// below the path, as in the go command. A leading "./" stands for the
// module path. A rule whose from pattern matches no package yet is not an
// error, so rules can be written before the packages they protect.
type depRule struct {
	from   string
	except []string
	// exceptTestHelpers exempts packages with a path element ending in
	// "test" (sdktest, leasestoretest, logtest, archtest): they exist to be
	// imported by tests.
	exceptTestHelpers bool
	deny              []string
	// opaque packages are not looked into: a denied package reached only
	// through one of them is not reported. Each entry needs a reason in the
	// rule's comment.
	opaque []string
	reason string
}

// rules are the dependency directions of the design; the README's Layout
// section describes each package.
var rules = []depRule{
	{
		from: "./plugin/sdk",
		deny: []string{
			"./host/...", "./leasestore/...", "./journal/...", "./internal/pluginclient/...", "./probe/...",
			"github.com/dgraph-io/badger/v4/...", "github.com/shirou/gopsutil/v4/...",
			"testing",
		},
		opaque: []string{"github.com/hashicorp/go-plugin"},
		reason: "a plugin links plugin/sdk and nothing of the host's side: no store, no journal record, no plugin client",
	},
	{
		// The conformance kit drives a plugin through the host's own
		// plugin client, which hands it the journal's records; those
		// reach the store's model (plain types), never a backend.
		from:   "./plugin/sdk/...",
		except: []string{"./plugin/sdk/sdktest/..."},
		deny: []string{
			"./host/...", "./leasestore/badgerstore/...", "./probe/...",
			"github.com/dgraph-io/badger/v4/...", "github.com/shirou/gopsutil/v4/...",
			"testing",
		},
		// go-plugin ships test helpers (testing.go) in its production
		// package, so linking go-plugin links testing; the SDK itself must
		// still never import it.
		opaque: []string{"github.com/hashicorp/go-plugin"},
		reason: "third-party plugins import plugin/sdk; it must stay free of the host, its storage and the testing package",
	},
	{
		from: "./plugin/sdk/sdktest/...",
		deny: []string{
			"./host/...", "./leasestore/badgerstore/...",
			"github.com/dgraph-io/badger/v4/...", "github.com/shirou/gopsutil/v4/...",
		},
		reason: "third-party plugin tests import sdktest; it must not pull in the host or Badger",
	},
	{
		from:   "./leasestore/...",
		deny:   []string{"./host/...", "github.com/hashicorp/go-plugin/...", "./plugin/..."},
		reason: "the lease store sits below the host and knows nothing of plugins",
	},
	{
		from:   "./leasestore/...",
		except: []string{"./leasestore/badgerstore/...", "./leasestore/etcdstore/..."},
		deny:   []string{"github.com/dgraph-io/badger/v4/...", "google.golang.org/grpc/...", "go.etcd.io/..."},
		reason: "the lease store model and its conformance suite know no backend: a second backend must fit beside Badger",
	},
	{
		from:   "./leasestore/badgerstore/...",
		deny:   []string{"./leasestore/etcdstore/...", "go.etcd.io/..."},
		reason: "the backends sit beside each other: neither knows the other",
	},
	{
		from:   "./leasestore/etcdstore/...",
		deny:   []string{"./leasestore/badgerstore/...", "github.com/dgraph-io/badger/v4/..."},
		reason: "the backends sit beside each other: neither knows the other",
	},
	{
		from:   "./leasestore/leasestoretest/...",
		deny:   []string{"./leasestore/badgerstore/...", "./leasestore/etcdstore/..."},
		reason: "the conformance suite runs every backend through leasestore.Store only, so a second backend passes it unchanged",
	},
	{
		from: "./...",
		except: []string{
			"./leasestore/badgerstore/...",
			// The binary's wiring: the command and the CLI that opens
			// its store, the benchmark command, the examples.
			"./cmd/...", "./internal/cli/...", "./internal/benchrun/...", "./examples/...",
		},
		exceptTestHelpers: true,
		deny:              []string{"./leasestore/badgerstore/..."},
		reason:            "only the binary's wiring, tests and examples name the Badger backend; the host and everything else take a leasestore.Store",
	},
	{
		from: "./...",
		except: []string{
			"./leasestore/etcdstore/...",
			// The binary's wiring, the benchmark command, and the etcd
			// member the cluster demo and the fault test run.
			"./cmd/...", "./internal/cli/...", "./internal/benchrun/...", "./internal/etcdmember/...", "./examples/...",
		},
		exceptTestHelpers: true,
		deny:              []string{"./leasestore/etcdstore/...", "go.etcd.io/etcd/server/..."},
		reason:            "only the binary's wiring, tests and examples name the etcd backend (and only test helpers and the etcd member embed an etcd server)",
	},
	{
		from: "./journal/...",
		deny: []string{
			"./host/...", "./leasestore/badgerstore/...", "./internal/agentpb/...",
			"github.com/dgraph-io/badger/v4/...", "google.golang.org/grpc/...", "github.com/hashicorp/go-plugin/...",
		},
		reason: "the journal record knows the store's model only, no backend, no plugin protocol and no host",
	},
	{
		from: "./api/...",
		deny: []string{
			"./host/...", "./leasestore/...", "./journal/...", "./internal/agentpb/...",
			"github.com/dgraph-io/badger/v4/...", "google.golang.org/grpc/...", "github.com/hashicorp/go-plugin/...",
		},
		reason: "the API contract is imported by clients of the socket; it pulls in neither the host nor the store",
	},
	{
		from:   "./probe/...",
		deny:   []string{"./host/...", "github.com/hashicorp/go-plugin/...", "./plugin/..."},
		reason: "the process probe sits below the host and knows nothing of plugins",
	},
	{
		from:   "./probe/...",
		deny:   []string{"github.com/dgraph-io/badger/v4/...", "google.golang.org/grpc/...", "./leasestore/badgerstore/..."},
		reason: "the process probe reads the lease model only, never a storage backend or the wire",
	},
	{
		from:   "./host/...",
		deny:   []string{"./plugins/..."},
		reason: "the host talks to plugins only through the protocol, never by linking one",
	},
	{
		from: "./plugins/...",
		// The plugins' shared test helpers drive them through sdktest,
		// as a third-party plugin's tests do.
		except: []string{"./plugins/internal/plugintest/..."},
		deny: []string{
			"./host/...", "./leasestore/...", "./probe/...",
			"github.com/dgraph-io/badger/v4/...", "github.com/shirou/gopsutil/v4/...",
		},
		reason: "the reference plugins are built only on plugin/sdk, like a third-party plugin",
	},
	{
		// What the exception above lets through: sdktest reaches the
		// store's model through the journal record, and nothing more.
		from: "./plugins/internal/plugintest/...",
		deny: []string{
			"./host/...", "./leasestore/badgerstore/...", "./probe/...",
			"github.com/dgraph-io/badger/v4/...", "github.com/shirou/gopsutil/v4/...",
		},
		reason: "the plugins' test helpers drive them as a third party's tests would, through sdktest alone",
	},
	{
		from:   "./internal/bootclock/...",
		deny:   []string{"./..."},
		reason: "the boot clock is imported by both the plugin SDK and the lease store backends, so it depends on nothing of the module",
	},
	{
		from:              "./...",
		exceptTestHelpers: true,
		deny:              []string{"testing"},
		// See the plugin/sdk rule: go-plugin links testing by itself.
		opaque: []string{"github.com/hashicorp/go-plugin"},
		reason: "production code must not link the testing package (its flags and globals); only *test helper packages may",
	},
}

// TestDependencyRules checks rules against the module's real import graph.
// go list without -test reports production imports only, so test files may
// import whatever they need.
func TestDependencyRules(t *testing.T) {
	all := goList(t, "-deps", "./...")
	graph := make(map[string][]string, len(all))
	for _, p := range all {
		graph[p.ImportPath] = p.Imports
	}
	var roots []string
	for _, p := range modulePackages(t, all) {
		roots = append(roots, p.ImportPath)
	}

	for _, r := range rules {
		if !slices.ContainsFunc(roots, func(p string) bool { return r.applies(modulePath, p) }) {
			t.Logf("rule for %s matches no package yet", r.from)
			continue
		}
		for _, v := range checkRule(r, modulePath, roots, graph) {
			t.Error(v)
		}
	}
}

// TestCheckRuleFindsViolations feeds the checker a synthetic import graph,
// so TestDependencyRules cannot pass merely because the checker is broken.
func TestCheckRuleFindsViolations(t *testing.T) {
	const mod = "example.com/m"
	graph := map[string][]string{
		mod + "/plugin/sdk":             {mod + "/internal/wire", "fmt"},
		mod + "/internal/wire":          {"testing"},
		mod + "/plugin/sdk/sdktest":     {mod + "/plugin/sdk", "testing"},
		mod + "/internal/logtest":       {"testing"},
		mod + "/plugins/claude":         {"fmt", "github.com/hashicorp/go-plugin"},
		mod + "/plugins/codex":          {mod + "/probe"},
		mod + "/probe":                  {mod + "/plugins/claude", "github.com/shirou/gopsutil/v4/process"},
		mod + "/host":                   {mod + "/plugins/claude", mod + "/probe"},
		mod + "/leasestore":             {"github.com/dgraph-io/badger/v4"},
		mod + "/leasestore/badgerstore": {mod + "/leasestore", "github.com/dgraph-io/badger/v4"},
		mod + "/internal/cli":           {mod + "/leasestore/badgerstore"},
		mod + "/host/localapi":          {mod + "/leasestore/badgerstore"},

		"github.com/shirou/gopsutil/v4/process": {"os"},
		"github.com/hashicorp/go-plugin":        {"testing"}, // opaque: not reported
		"github.com/dgraph-io/badger/v4":        {"os"},
		"fmt":                                   {"os"},
		"testing":                               {"fmt"},
	}
	var roots []string
	for p := range graph {
		if strings.HasPrefix(p, mod+"/") {
			roots = append(roots, p)
		}
	}

	var got []string
	for _, r := range rules {
		for _, v := range checkRule(r, mod, roots, graph) {
			s := v.pkg + " -> " + v.dep + " via " + strings.Join(v.path, ",")
			got = append(got, strings.ReplaceAll(s, mod+"/", ""))
		}
	}
	slices.Sort(got)
	// Not reported: sdktest and logtest importing testing (test helpers),
	// probe importing plugins/claude (plugins is not plugin/...), and
	// badgerstore importing Badger or the CLI importing badgerstore.
	want := []string{
		"host -> plugins/claude via plugins/claude",
		"host/localapi -> leasestore/badgerstore via leasestore/badgerstore",
		"internal/wire -> testing via testing",
		"leasestore -> github.com/dgraph-io/badger/v4 via github.com/dgraph-io/badger/v4",
		// Once by the sdk rule and once by the general testing rule.
		// plugin/sdk, plugin/sdk/... and ./...: three rules deny it.
		"plugin/sdk -> testing via internal/wire,testing",
		"plugin/sdk -> testing via internal/wire,testing",
		"plugin/sdk -> testing via internal/wire,testing",
		"plugins/codex -> github.com/shirou/gopsutil/v4/process via probe,github.com/shirou/gopsutil/v4/process",
		"plugins/codex -> probe via probe",
		// An opaque package is still itself denied where a rule says so.
		"probe -> github.com/hashicorp/go-plugin via plugins/claude,github.com/hashicorp/go-plugin",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, path string
		want          bool
	}{
		{"a/plugin/...", "a/plugin", true},
		{"a/plugin/...", "a/plugin/sdk", true},
		{"a/plugin/...", "a/plugins/claude", false},
		{"a/plugin", "a/plugin/sdk", false},
		{"testing", "testing", true},
		{"testing", "testing/fstest", false},
	} {
		if got := match(tt.pattern, tt.path); got != tt.want {
			t.Errorf("match(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

// violation is one package that reaches a denied dependency.
type violation struct {
	pkg, dep string
	path     []string // import chain from pkg (exclusive) to dep (inclusive)
	reason   string
}

func (v violation) String() string {
	return v.pkg + " must not depend on " + v.dep + " (imports " +
		strings.Join(v.path, " -> ") + "): " + v.reason
}

// checkRule reports, for each root package r applies to, every denied
// package it reaches in graph (import path -> resolved imports). Each
// denied package is reported once per root, with the shortest import chain
// that reaches it.
func checkRule(r depRule, mod string, roots []string, graph map[string][]string) []violation {
	var vs []violation
	for _, root := range roots {
		if !r.applies(mod, root) {
			continue
		}
		// Breadth-first search, remembering how each package was reached.
		parent := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, imp := range graph[p] {
				if _, seen := parent[imp]; seen {
					continue
				}
				parent[imp] = p
				if slices.ContainsFunc(r.opaque, func(o string) bool { return match(expand(mod, o), imp) }) {
					continue
				}
				queue = append(queue, imp)
				if !slices.ContainsFunc(r.deny, func(d string) bool { return match(expand(mod, d), imp) }) {
					continue
				}
				var chain []string
				for q := imp; q != root; q = parent[q] {
					chain = append(chain, q)
				}
				slices.Reverse(chain)
				vs = append(vs, violation{pkg: root, dep: imp, path: chain, reason: r.reason})
			}
		}
	}
	return vs
}

// applies reports whether r constrains package path in module mod.
func (r depRule) applies(mod, path string) bool {
	if !match(expand(mod, r.from), path) {
		return false
	}
	if slices.ContainsFunc(r.except, func(e string) bool { return match(expand(mod, e), path) }) {
		return false
	}
	if r.exceptTestHelpers {
		rel := strings.TrimPrefix(path, mod+"/")
		if slices.ContainsFunc(strings.Split(rel, "/"), func(elem string) bool { return strings.HasSuffix(elem, "test") }) {
			return false
		}
	}
	return true
}

// expand replaces a leading "./" in pattern with the module path.
func expand(mod, pattern string) string {
	if pattern == "./..." {
		return mod + "/..."
	}
	if rest, ok := strings.CutPrefix(pattern, "./"); ok {
		return mod + "/" + rest
	}
	return pattern
}

// match reports whether path matches pattern: equal to it, or, for a
// pattern ending in "/...", equal to or below its prefix.
func match(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return path == pattern
}
