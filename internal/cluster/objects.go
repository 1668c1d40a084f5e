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
// loading each tree). A list names the bundle it was made for: a row
// whose bundle is another is read from its bundle, as is one whose list
// cannot be read. (The row itself is signed by the host that suspended
// the sandbox: a row whose signature does not hold is refused first.)
//
// Its form: the line "sandbox-objects/1\n", the bundle's address, then
// the addresses of the objects, 32 bytes each, in increasing order,
// each once: one form per list.

const objectsMagic = "sandbox-objects/1\n"

// MaxObjects bounds a list (32 MiB of addresses). A record names every
// object of each of its suspensions: a 1 GiB workspace of large files
// is about 1,024 chunks of 1 MiB, while one of many small files is a
// chunk a file. A suspension that names more is kept without a list
// (EncodeObjects refuses it), and collections read its bundle.
const MaxObjects = 1 << 20

// EncodeObjects is the object list of as (in any order, repeats
// dropped) for bundle; ok false where as holds more than MaxObjects
// objects.
func EncodeObjects(bundle addr.Addr, as []addr.Addr) (list []byte, ok bool) {
	sorted := slices.Clone(as)
	slices.SortFunc(sorted, func(x, y addr.Addr) int { return bytes.Compare(x[:], y[:]) })
	sorted = slices.Compact(sorted)
	if len(sorted) > MaxObjects {
		return nil, false
	}
	b := make([]byte, 0, len(objectsMagic)+(1+len(sorted))*addr.Size)
	b = append(b, objectsMagic...)
	b = append(b, bundle[:]...)
	for _, a := range sorted {
		b = append(b, a[:]...)
	}
	return b, true
}

// ParseObjects reads an object list: the bundle it was made for and
// the objects. It refuses any other form: another first line, no
// bundle, a partial address, addresses out of order or repeated, more
// than MaxObjects.
func ParseObjects(b []byte) (bundle addr.Addr, objects []addr.Addr, err error) {
	if !bytes.HasPrefix(b, []byte(objectsMagic)) {
		return bundle, nil, fmt.Errorf("an object list: does not begin %q", objectsMagic)
	}
	rest := b[len(objectsMagic):]
	if len(rest) < addr.Size {
		return bundle, nil, fmt.Errorf("an object list: %d bytes where its bundle's address should be", len(rest))
	}
	copy(bundle[:], rest)
	rest = rest[addr.Size:]
	if len(rest)%addr.Size != 0 {
		return bundle, nil, fmt.Errorf("an object list: %d bytes of addresses, not a multiple of %d", len(rest), addr.Size)
	}
	n := len(rest) / addr.Size
	if n > MaxObjects {
		return bundle, nil, fmt.Errorf("an object list: %d objects, over %d", n, MaxObjects)
	}
	objects = make([]addr.Addr, n)
	for i := range objects {
		copy(objects[i][:], rest[i*addr.Size:])
		if i > 0 && bytes.Compare(objects[i-1][:], objects[i][:]) >= 0 {
			return bundle, nil, fmt.Errorf("an object list: address %d (%s) not after the one before it", i, objects[i])
		}
	}
	return bundle, objects, nil
}
