// Package index is a state directory's embedded index (STATE/index.db):
// SQLite, through modernc.org/sqlite (pure Go, no cgo), listing runs and
// run records without reading them.
//
// The index is derived, never the truth: every row says what a run
// directory or a record file holds, and the whole index can be rebuilt
// from them (store.Reindex, which `sandbox gc` runs). A run is indexed in
// two steps around the rename that commits it: a pending row before, the
// row made final after; a pending row whose directory exists is a
// committed run whose process died before it said so, one whose
// directory does not is a run not (or never) committed, and is not
// listed. So a crash at any step leaves the index listing exactly the
// committed runs, without a scan.
//
// Several processes use one index (the service, one-shot runs): SQLite's
// write-ahead log and a busy timeout. Nothing is fsynced
// (synchronous=OFF: a one-shot run pays about 1 ms for its index, not
// 2.4): a process killed loses nothing written (the kernel has it), and
// a machine that went down may have lost rows or left the file damaged,
// so the index keeps the boot it was last opened in, and one opened in
// another boot is marked incomplete and rebuilt by the next listing (a
// damaged one is moved aside and made again).
package index
