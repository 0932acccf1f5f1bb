// Package badgerstore is the embedded leasestore.Store: everything in one
// Badger directory under the host's state directory, tuned for a desktop
// footprint (see badgerOptions). Only the binary's wiring, tests and
// examples name it; the host takes any leasestore.Store.
//
// # Parts
//
// Open takes an exclusive lock naming its pid (lock.go), opens Badger behind
// a crash-loop guard and restores it from its backup when it is damaged
// (recovery.go, consistency.go), and then starts two parts that each own a
// goroutine: the writer (writer.go), through which every write goes and
// which group-commits whatever has queued into one synced transaction, so a
// durable append costs one sync however many sessions append at once (the
// moves of one ApplyBatch reach it together and share that transaction,
// unless Badger's transaction size limit splits them into several); the
// journal mirror (mirror.go), store.journal, a plain append-only copy of
// every journal entry that the writer appends to before anyone hears of a
// commit and that its goroutine syncs within BackupDelay; and the backup
// (backup.go), which rewrites store.backup, the session records and
// journal positions, shortly after every batch of lease changes. Close
// closes the journal handles, stops the writer, syncs and closes the
// mirror, stops the backup (writing a last one), then closes Badger.
//
// Provider state (providerstate.go) may be 64 MiB a session, far above one
// value or one transaction of this profile: a put writes chunks under a
// new generation and switches to it in one fence-checked transaction, so
// readers see the old state or the new one. It is kept under its own key
// prefix, out of the backup and the journal mirror: a restore from backup
// has none (so it cannot bring back a deleted session's), and Delete
// removes it after the journal, before the record. Each put rewrites the
// whole state through the LSM tree: a host exporting large states after
// every turn pays that write (and its compaction) each turn.
//
// # Hazards
//
// A second opener gets a LockedError naming the holder's pid. When that
// pid has exited the open first waits up to two seconds: a child the dead
// host was starting holds its descriptors until its exec.
//
// Badger can kill the process while opening a damaged table, so every open
// counts itself in a marker file: opens that keep dying (Options.OpenAttempts;
// Options.ProbeOpen tells them from deaths with other causes) mean damage.
// Damage, or an open error that proves it (a corrupt MANIFEST, a missing
// table, a checksum mismatch), moves the directory aside and restores the
// records from the backup; any other open error (a lock another program
// holds, a newer Badger's store, a read-only or full disk) is refused with
// advice and moves nothing. Some damage Badger opens silently (a MANIFEST
// cut short drops the tables its lost part listed), so a store that opened
// is compared with its backup: a session the backup holds alive that the
// store lacks, or a journal behind its backed-up position, restores too.
// Delete records the deletion in the backup before the record goes, so a
// deleted session is not mistaken for a lost one.
//
// The backup may miss the last commits, so a restored lease keeps its fence
// but gets a floor, MinNextFence, above anything the lost commits could
// have granted. Its journal comes back from the mirror (every entry of a
// process crash, all but the last BackupDelay of an OS crash or power cut)
// and jumps leasestore.RestoredSeqGap past the last seq the backup or the
// mirror knew. An open that finds a journal shorter than its mirror
// (Badger lost its memtable log, which holds every write not yet in a
// table) puts the missing entries back from the mirror, jumps the same gap
// and reports it (Store.Recovery); one that finds the mirror behind (its
// tail torn, its writes failed) catches the mirror up from the store. The
// floors are set before the restored store is put in place, and every step
// of a restore can be interrupted and is finished or redone by the next
// open. The report (Store.Recovery) lasts until a Close succeeds. Present
// tells whether a state directory holds a store without opening it.
//
// Badger writes through memory maps, where a page a full disk cannot back
// is a SIGBUS rather than an error. So the store keeps Options.MinFreeSpace
// free and refuses writes that would eat into it (leasestore.ErrNoSpace),
// whoever used the space, and resumes once it is back; Badger's files are
// allocated when created (a full disk is then an error Badger retries), and
// a reserve file gives Badger the room to flush when another program took
// the last byte (see MinFreeSpace). A commit
// that fails other than by a conflict may have taken effect; the store then
// refuses every further write with leasestore.ErrDamaged, asking for a
// restart. A Close that cannot finish (Badger retries a memtable flush it
// cannot write forever) returns when its context ends; the store keeps its
// lock until the process exits, and the next open replays Badger's log.
package badgerstore
