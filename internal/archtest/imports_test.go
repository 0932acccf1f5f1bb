package archtest

import (
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// importRule lets only the files of the packages matched by allow import
// pkg directly, test files included; dependencies through them are the
// point. Unlike a depRule it is about who speaks a package's vocabulary,
// not who links it. Patterns are those of depRule.
type importRule struct {
	pkg    string
	allow  []string
	reason string
}

var importRules = []importRule{
	{
		pkg:    "./internal/agentpb",
		allow:  []string{"./internal/pluginclient", "./internal/wire", "./plugin/sdk/..."},
		reason: "only the plugin client, wire and the SDK speak the generated protocol; everything else uses their Go types",
	},
}

// TestImportRules checks importRules against every Go file of the module,
// tests included (testdata directories are not part of the module's
// packages: their plugins implement the protocol's server side).
func TestImportRules(t *testing.T) {
	files := map[string][]string{} // module path of a file → its imports
	fset := token.NewFileSet()
	for _, p := range modulePackages(t, goList(t, "./...")) {
		for _, name := range slices.Concat(p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Errorf("%s: %v", p.ImportPath, err)
				continue
			}
			var imps []string
			for _, imp := range f.Imports {
				if path, err := strconv.Unquote(imp.Path.Value); err == nil {
					imps = append(imps, path)
				}
			}
			files[p.ImportPath+"/"+name] = imps
		}
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	for _, r := range importRules {
		for _, v := range checkImportRule(r, modulePath, files) {
			t.Error(v)
		}
	}
}

// checkImportRule reports every file that imports r.pkg without being
// allowed to; files maps the module path of each file to its imports.
func checkImportRule(r importRule, mod string, files map[string][]string) []string {
	pkg := expand(mod, r.pkg)
	var out []string
	for _, file := range slices.Sorted(maps.Keys(files)) {
		if !slices.Contains(files[file], pkg) {
			continue
		}
		dir := file[:strings.LastIndexByte(file, '/')]
		if dir == pkg || slices.ContainsFunc(r.allow, func(a string) bool { return match(expand(mod, a), dir) }) {
			continue
		}
		out = append(out, strings.TrimPrefix(file, mod+"/")+" must not import "+pkg+": "+r.reason)
	}
	return out
}

// TestCheckImportRuleFindsViolations feeds the checker synthetic files, so
// TestImportRules cannot pass merely because the checker is broken.
func TestCheckImportRuleFindsViolations(t *testing.T) {
	const mod = "example.com/m"
	pb := mod + "/internal/agentpb"
	files := map[string][]string{
		mod + "/internal/agentpb/agent.pb.go":           {"fmt"},
		mod + "/internal/pluginclient/client.go":        {pb},
		mod + "/internal/wire/wire.go":                  {pb},
		mod + "/plugin/sdk/server.go":                   {pb},
		mod + "/plugin/sdk/conformance/checks.go":       {pb},
		mod + "/host/journal.go":                        {pb},
		mod + "/host/session.go":                        {pb, "fmt"},
		mod + "/host/session_test.go":                   {pb},
		mod + "/host/plugin.go":                         {mod + "/internal/pluginclient"},
		mod + "/plugins/claude/harness_test.go":         {pb},
		mod + "/internal/pluginclientx/client.go":       {pb},
		mod + "/internal/benchrun/main.go":              {pb},
		mod + "/plugin/sdkx/x.go":                       {pb},
		mod + "/internal/agentpb/internal/extra/x.go":   {pb},
		mod + "/cmd/agenthost/main.go":                  {"os"},
		mod + "/plugins/codex/internal/codextest/ct.go": {pb},
	}
	var got []string
	for _, r := range importRules {
		for _, v := range checkImportRule(r, mod, files) {
			file, _, _ := strings.Cut(v, " ")
			got = append(got, file)
		}
	}
	want := []string{
		"host/journal.go", "host/session.go", "host/session_test.go",
		"internal/agentpb/internal/extra/x.go", "internal/benchrun/main.go",
		"internal/pluginclientx/client.go", "plugin/sdkx/x.go",
		"plugins/claude/harness_test.go", "plugins/codex/internal/codextest/ct.go",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
