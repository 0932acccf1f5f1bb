// Command protogen generates Go code from .proto files without protoc.
//
// It compiles the files with github.com/bufbuild/protocompile, builds the
// CodeGeneratorRequest that protoc would send, runs protoc-gen-go and
// protoc-gen-go-grpc (pinned as tools of this module) through `go tool`,
// and writes the files they return under -out. Run it from the tools
// module's directory (make generate does):
//
//	go run ./protogen -I ../proto -out .. ../proto/agenthost/agent/v1/agent.proto
//
// Every file name is taken relative to -I, so the descriptors name
// agenthost/agent/v1/agent.proto, and the plugins are given
// module=<-module>, so a go_package of <module>/internal/agentpb lands in
// <out>/internal/agentpb. The request carries no compiler version, so the
// output depends only on the inputs and the pinned plugin versions.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// plugins are the `go tool` names of the protoc plugins to run, in order.
var plugins = []string{"protoc-gen-go", "protoc-gen-go-grpc"}

func main() {
	importRoot := flag.String("I", ".", "proto import root; file names are relative to it")
	out := flag.String("out", ".", "directory the generated file names are relative to")
	module := flag.String("module", "github.com/agenthost/agenthost", "Go module prefix stripped from output paths")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: protogen [-I dir] [-out dir] [-module path] file.proto...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*importRoot, *out, "module="+*module, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run(importRoot, out, param string, paths []string) error {
	req, err := buildRequest(importRoot, param, paths)
	if err != nil {
		return err
	}
	for _, plugin := range plugins {
		if err := generate(plugin, req, out); err != nil {
			return fmt.Errorf("%s: %w", plugin, err)
		}
	}
	return nil
}

// buildRequest compiles paths (files under importRoot) and returns the
// request protoc would send: every file to generate and, before it, each
// of its transitive imports, with source info so comments carry over.
func buildRequest(importRoot, param string, paths []string) (*pluginpb.CodeGeneratorRequest, error) {
	names := make([]string, len(paths))
	for i, p := range paths {
		rel, err := filepath.Rel(importRoot, p)
		if err != nil || !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("%s is not under the import root %s", p, importRoot)
		}
		names[i] = filepath.ToSlash(rel)
	}
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{importRoot}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := c.Compile(context.Background(), names...)
	if err != nil {
		return nil, fmt.Errorf("compiling protos: %w", err)
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: names, Parameter: proto.String(param)}
	seen := map[string]bool{}
	var add func(f linker.File)
	add = func(f linker.File) { // post-order: imports before importers
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := range f.Imports().Len() {
			add(f.FindImportByPath(f.Imports().Get(i).Path()))
		}
		req.ProtoFile = append(req.ProtoFile, fileProto(f))
	}
	for _, f := range files {
		add(f)
	}
	return req, nil
}

// fileProto returns f as a descriptor proto, the compiler's own when it
// compiled f from source, so its source code info is kept as is.
func fileProto(f linker.File) *descriptorpb.FileDescriptorProto {
	if r, ok := f.(linker.Result); ok {
		return r.FileDescriptorProto()
	}
	return protodesc.ToFileDescriptorProto(f)
}

// generate runs `go tool plugin` in the current directory (the tools
// module) with req on stdin and writes the files of its response under out.
func generate(plugin string, req *pluginpb.CodeGeneratorRequest, out string) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshaling request: %w", err)
	}
	var stdout bytes.Buffer
	cmd := exec.Command("go", "tool", plugin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running go tool %s: %w", plugin, err)
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("parsing response: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("plugin failed: %s", resp.GetError())
	}
	for _, f := range resp.File {
		name := filepath.FromSlash(f.GetName())
		if f.GetInsertionPoint() != "" || !filepath.IsLocal(name) {
			return fmt.Errorf("unsupported output file %q (insertion point %q)", f.GetName(), f.GetInsertionPoint())
		}
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}
	return nil
}
