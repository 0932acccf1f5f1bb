package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeNamesRealTests requires every test the README's capability
// table names as evidence to exist: a renamed or deleted test would
// otherwise leave the table claiming a capability nothing shows.
func TestReadmeNamesRealTests(t *testing.T) {
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	const heading = "### The ACP surface, capability by capability"
	start := strings.Index(readme, heading)
	if start < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	section := readme[start+len(heading):]
	if end := strings.Index(section, "\n### "); end >= 0 {
		section = section[:end]
	}
	testName := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	named := testName.FindAllStringSubmatch(section, -1)
	if len(named) < 20 {
		t.Fatalf("the capability table names %d tests; it should name the tests behind every row", len(named))
	}
	// The faults table names the tests of the faults checked outside
	// internal/faults.
	const faults = "## When things go wrong"
	fstart := strings.Index(readme, faults)
	if fstart < 0 {
		t.Fatalf("README.md has no section %q", faults)
	}
	fsection := readme[fstart+len(faults):]
	if end := strings.Index(fsection, "\n## "); end >= 0 {
		fsection = fsection[:end]
	}
	named = append(named, testName.FindAllStringSubmatch(fsection, -1)...)
	declared := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".cache" || d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "third_party") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			declared[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range named {
		if !declared[m[1]] {
			t.Errorf("README.md names %s in a table, which no test file declares", m[1])
		}
	}
}
