package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackageDocs requires every package in the module to have exactly one
// package doc comment, as tailscale's pkgdoc_test does. A library's doc must
// begin "Package <name>"; a command's may begin any way it likes (usually
// "Command <name>"), but it must be there. One doc file keeps go doc from
// concatenating fragments, and the prefix check catches a license header
// that became the doc because of a missing blank line.
func TestPackageDocs(t *testing.T) {
	for _, p := range modulePackages(t, goList(t, "./...")) {
		files := slices.Concat(p.GoFiles, p.CgoFiles, p.IgnoredGoFiles)
		if len(files) == 0 {
			continue // test-only package: there is nothing for go doc to show
		}
		var withDoc []string
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", p.ImportPath, err)
				continue
			}
			// Skip generated files, and ignored files of another package
			// such as a `//go:build ignore` generator in package main.
			if ast.IsGenerated(f) || f.Name.Name != p.Name {
				continue
			}
			// Text drops directives, so a lone //go:generate line above
			// the package clause does not count as a doc.
			text := f.Doc.Text()
			if strings.TrimSpace(text) == "" {
				continue
			}
			withDoc = append(withDoc, name)
			if msg := checkDoc(p.Name, text); msg != "" {
				t.Errorf("%s: %s: %s", p.ImportPath, name, msg)
			}
		}
		switch len(withDoc) {
		case 0:
			t.Errorf("%s: no package doc comment (add a doc.go beginning %q)", p.ImportPath, docPrefix(p.Name))
		case 1:
		default:
			t.Errorf("%s: package doc comment in %d files %q; keep exactly one", p.ImportPath, len(withDoc), withDoc)
		}
	}
}

// checkDoc returns what is wrong with the package doc text of a package
// called name, or "" if nothing is.
func checkDoc(name, text string) string {
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return "empty package doc comment"
	case name == "main":
		return ""
	case !strings.HasPrefix(text+" ", docPrefix(name)+" ") && !strings.HasPrefix(text+"\n", docPrefix(name)+"\n"):
		first, _, _ := strings.Cut(text, "\n")
		return "package doc must begin " + `"` + docPrefix(name) + `", not "` + first + `"`
	}
	return ""
}

func docPrefix(name string) string {
	if name == "main" {
		return "Command <name>"
	}
	return "Package " + name
}

func TestCheckDoc(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		ok         bool
	}{
		{"sdk", "Package sdk is the plugin SDK.\n", true},
		{"sdk", "Package sdk\n", true},
		{"sdk", "Package sdktest runs conformance tests.\n", false},
		{"sdk", "SPDX-License-Identifier: MIT\nPackage sdk is the plugin SDK.\n", false},
		{"sdk", "  \n", false},
		{"main", "Command agenthost runs the host.\n", true},
		{"main", "The agenthost binary.\n", true},
		{"main", "", false},
	} {
		if got := checkDoc(tt.name, tt.text); (got == "") != tt.ok {
			t.Errorf("checkDoc(%q, %q) = %q, want ok=%v", tt.name, tt.text, got, tt.ok)
		}
	}
}
