package etcdstore

// Pinned until the backend's tests land: they run an embedded etcd.
import _ "go.etcd.io/etcd/server/v3/embed"
