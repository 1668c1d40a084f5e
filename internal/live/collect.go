package live

import (
	"bytes"
	"fmt"
	"os"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/reject"
)

// BundleObjects are the objects a collection of a cluster's blob store
// keeps for the bundle stored there at a (docs/cluster.md, "Collecting
// the blob store"): the bundle, and every object its record names, as a
// resumption anywhere would fetch them (namedObjects: the unit, grants
// and manifests, each snapshot's tree and its chunks, memory images).
// The bundle is read as an import reads it (readBundle, staged in a
// temporary directory); an object it carries itself is read from it. An
// error (a bundle that is not one, a tree that is not in the store) means
// what it needs cannot be known. tempName names the staging directory
// (a host's Store.Namer, so that its GC finds one a killed collector
// left; nil: a random name).
func BundleObjects(shared store.Blobs, a addr.Addr, tempName func(prefix string) string) ([]addr.Addr, error) {
	data, err := shared.Blob(a) // checked against a
	if err != nil {
		return nil, err
	}
	stage, err := state.MkdirNamed(os.TempDir(), "sandbox-collect", tempName)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	b, err := readBundle(bytes.NewReader(data), stage)
	if err != nil {
		return nil, err
	}
	if b.record == nil {
		return nil, reject.New(reject.Missing, "bundle", "no record of %s", b.manifest.Sandbox)
	}
	entries, torn, err := chain.Split(b.record)
	if err == nil && torn > 0 {
		err = reject.New(reject.Truncated, "records/"+b.manifest.Sandbox+".jsonl", "%d bytes without their newline", torn)
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: the record: %w", err)
	}
	named, _, err := namedObjects(carriedOr{b: b, shared: shared}, entries)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return append([]addr.Addr{a}, named...), nil
}

// carriedOr reads a blob from a bundle where it carries it, else from a
// cluster's blob store.
type carriedOr struct {
	b      *bundle
	shared store.Blobs
}

func (s carriedOr) Blob(a addr.Addr) ([]byte, error) {
	if p, ok := s.b.staged(a); ok {
		return os.ReadFile(p) // hashed to a when it was staged
	}
	return s.shared.Blob(a)
}

func (s carriedOr) HasBlob(a addr.Addr) bool {
	_, ok := s.b.staged(a)
	return ok || s.shared.HasBlob(a)
}

func (s carriedOr) PutBlob(addr.Addr, []byte) error {
	return fmt.Errorf("a bundle being collected is read, not written")
}
