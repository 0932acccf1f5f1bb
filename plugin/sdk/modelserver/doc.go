// Package modelserver is a scripted model server for tests of coding-agent
// CLIs: it speaks the Anthropic Messages API as claude uses it and the
// OpenAI Responses API as codex uses it, on a loopback port of its own.
package modelserver
