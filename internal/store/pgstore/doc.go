// Package pgstore keeps a cluster's system of record on PostgreSQL
// (github.com/jackc/pgx/v5): content-addressed blobs (store.Blobs) and
// the index of runs and run records (store.Index), for every host of a
// cluster at once.
//
// Blobs are rows of bytea named by their BLAKE3 address: a put is
// refused before anything is written when the bytes do not hash to the
// address, is one transaction (a writer killed before it commits leaves
// nothing visible: TestKilledMidPutLeavesNothing), and a read hashes
// what it got and refuses bytes that are not the address's, whoever
// wrote them. PostgreSQL keeps a bytea up to 1 GB; MaxBlob bounds what
// this package stores, and big objects (memory images, workspace
// chunks) belong in an object store (internal/store/s3blobs).
//
// The index is the truth's mirror as package index (SQLite) keeps it for
// one state directory, with the same semantics (pending rows around the
// commit of a run, rebuilds that replace rows written before a scan
// began), in tables of explicit columns. Unlike the SQLite index, which
// is not synced and is marked incomplete after a reboot, PostgreSQL's
// commits are durable (fsync on, the server's default), so a completed
// index stays complete.
//
// The schema is made on Open when missing, named in the meta table
// (Schema); a database holding another schema is refused, never
// altered.
package pgstore
