package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

// encode is EncodeObjects, which must not refuse.
func encode(t testing.TB, bundle addr.Addr, as ...addr.Addr) []byte {
	t.Helper()
	list, ok := EncodeObjects(bundle, as)
	if !ok {
		t.Fatalf("%d objects refused", len(as))
	}
	return list
}

func TestObjectList(t *testing.T) {
	a, b, c, bundle := addr.Of([]byte("a")), addr.Of([]byte("b")), addr.Of([]byte("c")), addr.Of([]byte("bundle"))
	list := encode(t, bundle, c, a, b, a)
	if !bytes.Equal(list, encode(t, bundle, b, c, a)) {
		t.Fatal("the same objects in another order or repeated: another list")
	}
	madeFor, got, err := ParseObjects(list)
	if err != nil || len(got) != 3 || madeFor != bundle {
		t.Fatalf("ParseObjects: %s %v %v", madeFor, got, err)
	}
	if madeFor, empty, err := ParseObjects(encode(t, bundle)); err != nil || len(empty) != 0 || madeFor != bundle {
		t.Fatalf("an empty list: %v %v", empty, err)
	}
	head := []byte(objectsMagic + string(bundle[:]))
	body := list[len(head):]
	swapped := append(append(bytes.Clone(head), body[addr.Size:2*addr.Size]...), body[:addr.Size]...)
	repeated := append(append(bytes.Clone(head), body[:addr.Size]...), body[:addr.Size]...)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"another first line", "sandbox-objects/2\n" + string(list[len(objectsMagic):]), "does not begin"},
		{"nothing", "", "does not begin"},
		{"no bundle", objectsMagic + "short", "its bundle's address"},
		{"a partial address", string(list[:len(list)-1]), "not a multiple of 32"},
		{"out of order", string(swapped), "not after the one before it"},
		{"repeated", string(repeated), "not after the one before it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParseObjects([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	over := make([]byte, len(head)+(MaxObjects+1)*addr.Size)
	copy(over, head)
	if _, _, err := ParseObjects(over); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a list over MaxObjects: %v", err)
	}
	many := make([]addr.Addr, MaxObjects+1)
	for i := range many {
		many[i][0], many[i][1], many[i][2] = byte(i), byte(i>>8), byte(i>>16)
	}
	if _, ok := EncodeObjects(bundle, many); ok {
		t.Fatal("a list over MaxObjects made")
	}
	if _, ok := EncodeObjects(bundle, append(many[:MaxObjects], many[0])); !ok {
		t.Fatal("MaxObjects objects, one of them twice, refused")
	}
}

// FuzzParseObjects: any bytes either fail to parse or are a list that
// encodes back to the same bytes (one form per list).
func FuzzParseObjects(f *testing.F) {
	f.Add(encode(f, addr.Of([]byte("bundle")), addr.Of([]byte("a")), addr.Of([]byte("b"))))
	f.Add([]byte(objectsMagic))
	f.Add([]byte("sandbox-objects/1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		bundle, as, err := ParseObjects(b)
		if err != nil {
			return
		}
		if again, ok := EncodeObjects(bundle, as); !ok || !bytes.Equal(again, b) {
			t.Fatalf("parsed %d objects that encode to other bytes", len(as))
		}
	})
}

// TestCollectionReadsObjectLists: a kept sandbox whose suspension stored
// an object list keeps what the list names, the list and the bundle,
// without its bundle being read (the namer here refuses every bundle).
// A row without a list, a list missing or spoiled, or one made for
// another bundle is read from its bundle instead; a row whose list is
// not an address stops the collection.
func TestCollectionReadsObjectLists(t *testing.T) {
	c, logs := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	o := put(t, b, "bundle 1", "tree 1", "chunk 1", "stray")
	la := put(t, b, string(encode(t, o[0], o[1], o[2])))[0]
	suspended := func(id string, bundle, list addr.Addr) {
		t.Helper()
		if err := m.SandboxSuspended(ctx, hold(t, m), id, "", addr.Of([]byte("head")), bundle, list); err != nil {
			t.Fatal(err)
		}
	}
	suspended("sb-000000000001", o[0], la)
	n := &names{fail: errors.New("this bundle would not import")}
	got, err := c.CollectBlobs(ctx, b, n, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandboxes != 1 || got.Named != 4 || got.Removed != 1 {
		t.Fatalf("collected %+v, want 1 sandbox, 4 objects named (bundle, list, tree, chunk), 1 removed", got)
	}
	for _, a := range []addr.Addr{o[0], o[1], o[2], la} {
		if !b.HasBlob(a) {
			t.Fatalf("%s, which the kept sandbox names, was removed", a)
		}
	}
	if b.HasBlob(o[3]) {
		t.Fatal("the stray object was kept")
	}

	// Each way a list cannot be used: the bundle is read, and (the namer
	// refusing it) nothing is removed; once the bundle reads, what it
	// names stays.
	o2 := put(t, b, "bundle 2", "tree 2")
	for _, tc := range []struct {
		name string
		list string // put before the collection ("": none; "-": a list the row names, not stored)
		why  string // in the log
	}{
		{"no list", "", ""},
		{"a list made for another bundle", string(encode(t, o[0], o[1])), "made for bundle " + o[0].String()},
		{"a list that does not parse", objectsMagic + "spoiled", "its bundle's address"},
		{"a list gone", "-", "not in the blob store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var list addr.Addr
			switch tc.list {
			case "":
			case "-":
				list = addr.Of([]byte("a list never stored"))
			default:
				list = put(t, b, tc.list)[0]
			}
			suspended("sb-000000000001", o2[0], list)
			stray := put(t, b, "stray "+tc.name)[0]
			n.fail = errors.New("this bundle would not import")
			if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "sb-000000000001's bundle") || !b.HasBlob(stray) {
				t.Fatalf("the bundle was not read, or something was removed: %v", err)
			}
			if tc.why != "" && (!strings.Contains(logs.String(), "object list could not be used") || !strings.Contains(logs.String(), tc.why)) {
				t.Fatalf("not logged, or not why (%q): %s", tc.why, logs)
			}
			n.fail = nil
			n.set(o2[0], o2[1])
			if got, err := c.CollectBlobs(ctx, b, n, "test", false); err != nil || b.HasBlob(stray) || !b.HasBlob(o2[1]) {
				t.Fatalf("read from its bundle: %+v %v", got, err)
			}
		})
	}
	exec(t, c, `UPDATE cluster_sandboxes SET objects = '\x0102' WHERE id = 'sb-000000000001'`)
	stray := put(t, b, "stray 3")[0]
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); !errors.Is(err, ErrEdited) || !b.HasBlob(stray) {
		t.Fatalf("a row whose list is not an address: %v", err)
	}
}
