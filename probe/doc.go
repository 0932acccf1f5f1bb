// Package probe answers one question with evidence: is the process a lease
// names still the process that was started for it?
//
// A process identity is the host id, the pid, the exact start time (on Linux
// the start tick from /proc/<pid>/stat together with the boot id), and the
// spawn token the host placed in the child's environment. Only "no such
// process" proves a process absent; a permission error or any other gap in
// the evidence is "indeterminate", because a wrong "dead" would let a second
// writer onto a provider conversation while the first is still running.
//
// The owner probe, the batch probe over one process-table pass and the
// orphan reaper live here; they are delivered by the probe issue that follows
// the lease store.
package probe
