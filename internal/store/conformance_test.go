package store_test

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/storetest"
)

// The state directory's blob store passes the conformance suite.
func TestBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) store.Blobs { return openStore(t) })
}

// openStore is a state directory's store in a directory of the test's.
func openStore(t *testing.T) *store.Store {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// And the collector's part of it (a cluster's shared directory).
func TestCollectableConformance(t *testing.T) {
	storetest.Collectable(t, func(t *testing.T) store.Collectable { return openStore(t) })
}
