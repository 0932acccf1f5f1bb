// Package faults is agenthost's fault-injection suite. It has no production
// code: its tests drive a real host, real plugin processes and a real Badger
// store into the failures a desktop machine produces (a full or read-only
// disk, a damaged store, a clock stepped backwards, plugins that flood,
// hang, lie or leave grandchildren behind, and sessions churned by the
// hundred) and check what must hold through each: no acknowledged journal
// entry lost or written twice, no process left behind, no host crash, and
// a clear error where the host cannot go on.
//
// `make test-faults` runs the suite verbosely, so every test's "injected:"
// and "held:" lines are printed; `make test` runs it too. Faults that need
// root (mounting a small tmpfs or a read-only bind mount, running a host as
// another user so that directory permissions bind it) skip with the reason
// when run without it. The test process is a child subreaper, so every
// process a plugin leaves behind is counted by the leak checks.
package faults
