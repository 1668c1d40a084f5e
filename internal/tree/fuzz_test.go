package tree

import (
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

// memBlobs is a blob store in memory, for the fuzzer.
type memBlobs map[addr.Addr][]byte

func (m memBlobs) PutBlob(a addr.Addr, b []byte) error { m[a] = b; return nil }
func (m memBlobs) HasBlob(a addr.Addr) bool            { _, ok := m[a]; return ok }
func (m memBlobs) Blob(a addr.Addr) ([]byte, error)    { return m[a], nil }

// A tree comes from a bundle another host made: Load never panics, and
// whatever it takes names only clean relative paths under directories
// of the tree, with permission bits only.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"entries":[{"kind":"dir","mode":493,"path":"a"},{"chunks":["b3:` + addr.Of([]byte("x")).Hex() + `"],"kind":"file","mode":420,"path":"a/f","size":1},{"kind":"link","path":"l","target":"/etc"}],"tree":"sandbox.tree/1"}`))
	f.Add([]byte(`{"entries":[{"kind":"dir","mode":493,"path":"../x"}],"tree":"sandbox.tree/1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := memBlobs{}
		a := addr.Of(b)
		m[a] = b
		tr, err := Load(m, a)
		if err != nil {
			return
		}
		for _, e := range tr.Entries {
			if e.Mode&^0o777 != 0 || e.Path == "" || e.Path[0] == '/' || e.Path == ".." || len(e.Path) > 2 && e.Path[:3] == "../" {
				t.Fatalf("took %+v", e)
			}
		}
	})
}
