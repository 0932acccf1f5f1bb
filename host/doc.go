// Package host is the embeddable supervisor of agenthost: it owns the lease
// store, starts one plugin process per agent session, and reconciles every
// session when it is opened again after a crash or restart.
//
// The host is the only component that moves a lease. It admits a writer to a
// session only after the lease store has recorded a reservation, the spawned
// plugin's process identity and the provider handle the plugin proved, in
// that order and at one fence (see package leasestore). Process evidence
// comes from package probe; the host never declares an owner dead on a
// timeout.
//
// The supervisor itself arrives with the plugin protocol; this package
// currently holds only its documentation so the layout is stable for the
// packages that build on it.
package host
