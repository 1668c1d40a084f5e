// Package storetest is the conformance suite of the store's interfaces
// (store.Blobs, store.Index): every backend runs it (the state
// directory's files and its SQLite index here; a PostgreSQL + S3 one
// later), so that the host cannot tell them apart.
package storetest
