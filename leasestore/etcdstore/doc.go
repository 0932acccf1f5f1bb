// Package etcdstore is the leasestore backend for several machines: the
// sessions, leases and journals of every host in an etcd cluster, with
// each host's liveness as an etcd lease (leasestore.Cluster).
package etcdstore

import (
	// Pinned here until the backend lands, so go.mod keeps the versions
	// every helper builds against.
	_ "go.etcd.io/etcd/client/v3"
)
