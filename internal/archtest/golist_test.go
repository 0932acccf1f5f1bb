package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the module the rules in this package are written for.
const modulePath = "github.com/agenthost/agenthost"

// listedPackage holds the fields of `go list -json` output used here.
type listedPackage struct {
	Dir            string
	ImportPath     string
	Name           string
	DepOnly        bool
	GoFiles        []string
	CgoFiles       []string
	TestGoFiles    []string
	XTestGoFiles   []string
	IgnoredGoFiles []string // includes files for other platforms and ignored _test.go files
	Imports        []string // resolved import paths, one edge of the graph each
	Module         *struct{ Path string }
	Error          *struct{ Err string }
	DepsErrors     []*struct{ Err string }
}

// moduleRoot returns the directory holding the go.mod of the module under
// test, found by walking up from the test's working directory (go test runs
// a test in its package directory).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod found above the test's working directory")
		}
		dir = parent
	}
}

// goList runs `go list -e -json=<fields> args...` in the module root and
// returns the packages in output order. Asking for named fields keeps go
// list from computing staleness, which is most of its cost.
//
// go test puts $GOROOT/bin first on the PATH of the test binary, so "go"
// is the toolchain that runs the test.
func goList(t *testing.T, args ...string) []*listedPackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	const fields = "Dir,ImportPath,Name,DepOnly,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles,Imports,Module,Error,DepsErrors"
	cmd := exec.Command(goBin, append([]string{"list", "-e", "-json=" + fields}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.Bytes())
	}
	var pkgs []*listedPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("%v listed no packages", cmd)
	}
	return pkgs
}

// modulePackages returns the packages named by ./... after checking that
// they belong to modulePath and that go list could load them: a package it
// could not load has an incomplete import list, which would let a rule pass
// without looking.
func modulePackages(t *testing.T, pkgs []*listedPackage) []*listedPackage {
	t.Helper()
	var own []*listedPackage
	for _, p := range pkgs {
		if p.DepOnly {
			continue
		}
		if p.Module == nil || p.Module.Path != modulePath {
			t.Fatalf("package %s is not in module %s; update modulePath", p.ImportPath, modulePath)
		}
		// A directory whose files are all for other platforms is not
		// broken, just empty here.
		if p.Error != nil && !strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
			continue
		}
		for _, e := range p.DepsErrors {
			t.Errorf("go list: %s: dependency: %s", p.ImportPath, e.Err)
		}
		own = append(own, p)
	}
	return own
}
