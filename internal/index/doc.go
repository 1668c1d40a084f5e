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
// write-ahead log, a busy timeout, and synchronous=NORMAL (a row made
// durable by the next checkpoint; one lost to a power cut is rebuilt,
// the run directory being durable).
package index
