package store_test

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/storetest"
)

// The state directory's blob store passes the conformance suite.
func TestBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) store.Blobs {
		s, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// And the collector's part of it (a cluster's shared directory).
func TestCollectableConformance(t *testing.T) {
	storetest.Collectable(t, func(t *testing.T) store.Collectable {
		s, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
