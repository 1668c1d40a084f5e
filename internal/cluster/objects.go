package cluster

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/opensubstrate/sandbox/addr"
)

// A suspension's object list (docs/cluster.md, "Collecting the blob
// store") is what its bundle names in the blob store, kept beside the
// bundle as a blob of its own: the suspending host wrote it from the
// record it exported, so a collection reads one small blob per kept
// sandbox instead of reading its bundle as an import would (staging it,
// loading each tree). What the guest put in its workspace shapes the
// trees and the bundle, never this list's form: a sandbox whose bundle
// would not import (too many entries, a tree the importer refuses)
// cannot stop the collections of every other sandbox.
//
// Its form: the line "sandbox-objects/1\n", then the addresses, 32
// bytes each, in increasing order, each once. One form per list, so the
// same list is the same blob whichever host wrote it.

const objectsMagic = "sandbox-objects/1\n"

// MaxObjects bounds a list read (a 1 GiB workspace in 64 KiB chunks
// names about 16,000 objects): 32 MiB of addresses.
const MaxObjects = 1 << 20

// EncodeObjects is the object list of as (in any order, repeats
// dropped).
func EncodeObjects(as []addr.Addr) []byte {
	sorted := make([]addr.Addr, len(as))
	copy(sorted, as)
	slices.SortFunc(sorted, func(x, y addr.Addr) int { return bytes.Compare(x[:], y[:]) })
	b := make([]byte, 0, len(objectsMagic)+len(sorted)*addr.Size)
	b = append(b, objectsMagic...)
	for i, a := range sorted {
		if i > 0 && a == sorted[i-1] {
			continue
		}
		b = append(b, a[:]...)
	}
	return b
}

// ParseObjects reads an object list, refusing any other form: another
// first line, a partial address, addresses out of order or repeated,
// more than MaxObjects.
func ParseObjects(b []byte) ([]addr.Addr, error) {
	if !bytes.HasPrefix(b, []byte(objectsMagic)) {
		return nil, fmt.Errorf("an object list: does not begin %q", objectsMagic)
	}
	rest := b[len(objectsMagic):]
	if len(rest)%addr.Size != 0 {
		return nil, fmt.Errorf("an object list: %d bytes of addresses, not a multiple of %d", len(rest), addr.Size)
	}
	n := len(rest) / addr.Size
	if n > MaxObjects {
		return nil, fmt.Errorf("an object list: %d objects, over %d", n, MaxObjects)
	}
	out := make([]addr.Addr, n)
	for i := range out {
		copy(out[i][:], rest[i*addr.Size:])
		if i > 0 && bytes.Compare(out[i-1][:], out[i][:]) >= 0 {
			return nil, fmt.Errorf("an object list: address %d (%s) not after the one before it", i, out[i])
		}
	}
	return out, nil
}
