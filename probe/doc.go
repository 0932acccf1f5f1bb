// Package probe answers one question with evidence: is the process a lease
// names still the process that was started for it?
//
// # Identity
//
// A process identity (leasestore.ProcessIdentity) is the host id, the pid,
// the start time, the boot the start time counts from, and the spawn token
// the host minted at reservation and placed in the child's environment. On
// Linux the start time is the exact start tick from /proc/<pid>/stat and the
// boot is /proc/sys/kernel/random/boot_id, compared exactly: a start tick is
// fixed for a process's life, so no wall-clock tolerance (and no clock step)
// enters the comparison. Elsewhere gopsutil v4's creation time is compared
// within DefaultStartTolerance. Prober.Identify reads an identity.
//
// # Outcomes
//
// Prober.ProbeAll judges every lease's owner and answers one Outcome each:
// exit-observed, pid-absent, identity-mismatch{field},
// identity-matched{matchedOn}, reservation-unused, or indeterminate{reason}.
// The rules fail closed, because a wrong "dead" puts a second writer on one
// provider conversation while a wrong "alive" only delays:
//
//   - An owner on another host id is indeterminate and never probed, and so
//     is an ownerless reservation another host made (Lease.ReservedBy): its
//     spawn token was minted for a child on that host, so a scan here would
//     find nobody carrying it and wrongly answer unused.
//   - Only the kernel's "no such process" is absence; a permission error or
//     any other failure to read is indeterminate.
//   - A spawn token read back from the process that differs from the
//     recorded one is a mismatch; an equal one is a match. A start time that
//     differs is a mismatch, unless the token matched: then the evidence
//     contradicts itself and the answer is indeterminate. A boot id that
//     differs is a mismatch. A present pid with nothing verifiable is
//     indeterminate: a bare pid match is exactly how a reused pid becomes a
//     second writer.
//   - A lease with no owner: durable pre-spawn proof makes it
//     reservation-unused without probing; no token and not reserved is
//     reservation-unused without a scan (nothing was minted that a child
//     could carry); reserved with no token is indeterminate; otherwise one
//     scan of the process table decides — a host that cannot enumerate
//     tokens, a process of this user whose environment cannot be read, a
//     live process carrying the token, or a provider handle reported at
//     this fence each leave it indeterminate.
//   - A boot id belongs to the start evidence: another boot is a mismatch,
//     unless the token matched (contradictory, so indeterminate).
//
// All local owners are judged from one read of the process table, and all
// reservations from one token scan, however many sessions there are.
//
// # Reaping orphans
//
// Reaper stops processes that carry this host's spawn-token variable (see
// TokenVariable) but whose token no lease owns, and removes the socket
// directories such plugins left behind. It signals a plugin's whole process
// group, SIGTERM then SIGKILL after a grace period, and re-identifies every
// process through a pidfd right before each signal, so a recycled pid is
// never signalled. It never touches its own process, its ancestors or their
// process groups (a host may be started from inside an old plugin's tree),
// nor a token it inherited; and when it cannot tell which tokens leases own,
// it signals nothing. Its failures go to an error callback with the scope
// ReaperScope, or to the log; it never fails the host's start.
//
// CanVerifyIdentity says whether this platform can do all of this for a
// location; the host refuses to create sessions where it cannot.
package probe
