package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

func TestObjectList(t *testing.T) {
	a, b, c := addr.Of([]byte("a")), addr.Of([]byte("b")), addr.Of([]byte("c"))
	list := EncodeObjects([]addr.Addr{c, a, b, a})
	if !bytes.Equal(list, EncodeObjects([]addr.Addr{b, c, a})) {
		t.Fatal("the same objects in another order or repeated: another list")
	}
	got, err := ParseObjects(list)
	if err != nil || len(got) != 3 {
		t.Fatalf("ParseObjects: %v %v", got, err)
	}
	if empty, err := ParseObjects(EncodeObjects(nil)); err != nil || len(empty) != 0 {
		t.Fatalf("an empty list: %v %v", empty, err)
	}
	body := list[len(objectsMagic):]
	swapped := append([]byte(objectsMagic), body[addr.Size:2*addr.Size]...)
	swapped = append(append(swapped, body[:addr.Size]...), body[2*addr.Size:]...)
	repeated := append(append([]byte(objectsMagic), body[:addr.Size]...), body[:addr.Size]...)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"another first line", "sandbox-objects/2\n" + string(body), "does not begin"},
		{"nothing", "", "does not begin"},
		{"a partial address", string(list[:len(list)-1]), "not a multiple of 32"},
		{"out of order", string(swapped), "not after the one before it"},
		{"repeated", string(repeated), "not after the one before it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseObjects([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	over := make([]byte, len(objectsMagic)+(MaxObjects+1)*addr.Size)
	copy(over, objectsMagic)
	if _, err := ParseObjects(over); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a list over MaxObjects: %v", err)
	}
}

// FuzzParseObjects: any bytes either fail to parse or are a list that
// encodes back to the same bytes (one form per list).
func FuzzParseObjects(f *testing.F) {
	f.Add(EncodeObjects([]addr.Addr{addr.Of([]byte("a")), addr.Of([]byte("b"))}))
	f.Add([]byte(objectsMagic))
	f.Add([]byte("sandbox-objects/1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := ParseObjects(b)
		if err != nil {
			return
		}
		if again := EncodeObjects(as); !bytes.Equal(again, b) {
			t.Fatalf("parsed %d objects that encode to other bytes", len(as))
		}
	})
}

// TestCollectionReadsObjectLists: a kept sandbox whose suspension stored
// an object list keeps what the list names, the list and the bundle,
// without its bundle being read (the namer here refuses every bundle);
// a list that is missing, spoiled, or a row naming no address stops the
// collection before anything is removed; a row without a list (an
// earlier version's) is read from its bundle.
func TestCollectionReadsObjectLists(t *testing.T) {
	c, logs := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	o := put(t, b, "bundle 1", "tree 1", "chunk 1", "stray", "bundle 2", "tree 2")
	list := EncodeObjects([]addr.Addr{o[1], o[2]})
	la := put(t, b, string(list))[0]
	if err := m.SandboxSuspended(ctx, hold(t, m), "sb-000000000001", "", addr.Of([]byte("head")), o[0], la); err != nil {
		t.Fatal(err)
	}
	n := &names{fail: errors.New("this bundle would not import")}
	got, err := c.CollectBlobs(ctx, b, n, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandboxes != 1 || got.Named != 4 || got.Removed != 3 {
		t.Fatalf("collected %+v, want 1 sandbox, 4 objects named (bundle, list, tree, chunk), 3 removed", got)
	}
	for _, a := range []addr.Addr{o[0], o[1], o[2], la} {
		if !b.HasBlob(a) {
			t.Fatalf("%s, which the kept sandbox names, was removed", a)
		}
	}
	if b.HasBlob(o[3]) {
		t.Fatal("the stray object was kept")
	}

	// A row of an earlier version, with no list: its bundle is read.
	o = put(t, b, "bundle 2", "tree 2", "stray 2")
	if err := m.SandboxSuspended(ctx, hold(t, m), "sb-000000000002", "", addr.Of([]byte("head")), o[0], addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "sb-000000000002's bundle") {
		t.Fatalf("a row with no list, whose bundle is unreadable: %v", err)
	}
	n.fail = nil
	n.set(o[0], o[1])
	if got, err := c.CollectBlobs(ctx, b, n, "test", false); err != nil || got.Removed != 1 || !b.HasBlob(o[1]) {
		t.Fatalf("a row with no list, read from its bundle: %+v %v", got, err)
	}

	// The list missing, or other bytes under its address: nothing removed.
	stray := put(t, b, "stray 3")[0]
	if err := b.RemoveBlobContext(ctx, la); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "sb-000000000001's object list") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("a kept sandbox whose list is gone: %v", err)
	}
	if !b.HasBlob(stray) || !strings.Contains(logs.String(), "object list could not be read") {
		t.Fatalf("removed with a kept list gone, or not logged: %s", logs)
	}
	spoiled := append([]byte(objectsMagic), list[len(objectsMagic):len(list)-1]...)
	la2 := put(t, b, string(spoiled))[0]
	if err := m.SandboxSuspended(ctx, hold(t, m), "sb-000000000001", "", addr.Of([]byte("head")), o[0], la2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "not a multiple") || !b.HasBlob(stray) {
		t.Fatalf("a kept sandbox whose list does not parse: %v", err)
	}
	exec(t, c, `UPDATE cluster_sandboxes SET objects = '\x0102' WHERE id = 'sb-000000000001'`)
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); !errors.Is(err, errEdited) || !b.HasBlob(stray) {
		t.Fatalf("a row whose list is not an address: %v", err)
	}
}
