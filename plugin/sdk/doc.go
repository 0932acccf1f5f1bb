// Package sdk is what a third-party agent plugin imports: a small Agent
// interface, Serve to run it as a hashicorp go-plugin subprocess, and the
// outbox that keeps every update until the host has journaled it.
//
// The package must stay light for plugin authors: it imports neither the
// host, the lease store, Badger, gopsutil nor the testing package (a test in
// internal/archtest enforces this). The protocol and Serve arrive with the
// plugin SDK issue.
package sdk
