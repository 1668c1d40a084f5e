package fleet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

func items(n int) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = Item{Index: uint64(i), Input: addr.Of([]byte(fmt.Sprint("input ", i))), Run: addr.Of([]byte(fmt.Sprint("run ", i)))}
	}
	return out
}

// A fleet of 1,000: its signed checkpoint opens under the host's key,
// every 37th item's proof checks alone (and with the reference code), a
// changed item does not, and the checkpoint at 500 is consistent with the
// one at 1,000.
func TestFleet(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	f, err := New("sandbox.example/fleet/f-1", items(1000))
	if err != nil {
		t.Fatal(err)
	}
	vk, _ := note.VerifierKey("sandbox.example/host", k.Public())
	v, err := note.ParseVerifierKey(vk)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := f.Checkpoint(1000, "sandbox.example/host", k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint([]byte(cp), []note.Verifier{v})
	if err != nil || c.Size != 1000 || c.Origin != f.Origin {
		t.Fatalf("%+v %v", c, err)
	}
	for i := 0; i < 1000; i += 37 {
		p, err := f.Prove(i, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(c, p); err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		leafJSON, _ := jcs.Marshal(p.Item)
		path := make([][]byte, len(p.Path))
		for j := range p.Path {
			path[j] = append([]byte(nil), p.Path[j][:]...)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Item.Index, p.Size, rfc6962.DefaultHasher.HashLeaf(leafJSON), path, c.Root[:]); err != nil {
			t.Fatalf("item %d by the reference code: %v", i, err)
		}
		p.Item.Run = addr.Of([]byte("another run"))
		if err := Verify(c, p); !errors.Is(err, reject.Invalid) {
			t.Fatalf("a changed item %d: %v", i, err)
		}
	}
	half, _ := f.Checkpoint(500, "sandbox.example/host", k)
	h, err := OpenCheckpoint([]byte(half), []note.Verifier{v})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := f.Consistency(500, 1000)
	if err != nil || VerifyConsistency(h, c, cons) != nil {
		t.Fatalf("consistency: %v", err)
	}
	// The same proof by the reference code.
	raw := make([][]byte, len(cons))
	for j := range cons {
		raw[j] = append([]byte(nil), cons[j][:]...)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 500, 1000, raw, h.Root[:], c.Root[:]); err != nil {
		t.Fatalf("consistency by the reference code: %v", err)
	}
	// As a watcher gets it: both checkpoints, signed, and the proof.
	doc, err := f.ProveConsistency(half, cp, 500, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := CheckConsistency(doc, []note.Verifier{v}); err != nil {
		t.Fatalf("a consistency proof document: %v", err)
	}
	doc.Proof[0][0] ^= 1
	if _, _, err := CheckConsistency(doc, []note.Verifier{v}); !errors.Is(err, reject.Invalid) {
		t.Fatalf("a changed consistency proof: %v", err)
	}
	swapped := ConsistencyProof{Old: cp, New: half, Proof: nodes(cons)}
	if _, _, err := CheckConsistency(swapped, []note.Verifier{v}); !errors.Is(err, reject.Invalid) {
		t.Fatalf("checkpoints swapped: %v", err)
	}
	other, _ := New("sandbox.example/fleet/f-2", items(1000))
	ocp, _ := other.Checkpoint(1000, "sandbox.example/host", k)
	oc, _ := OpenCheckpoint([]byte(ocp), []note.Verifier{v})
	if err := VerifyConsistency(h, oc, cons); !errors.Is(err, reject.Splice) {
		t.Fatalf("two fleets: %v", err)
	}
	if _, err := OpenCheckpoint([]byte(strings.Replace(cp, "1000\n", "1001\n", 1)), []note.Verifier{v}); err == nil {
		t.Fatal("a checkpoint with its size changed opened")
	}
	if _, err := New("o", []Item{{Index: 1, Input: addr.Of(nil), Run: addr.Of(nil)}}); err == nil {
		t.Fatal("a fleet out of order")
	}
}

// A fleet's items.jsonl is read back from disk, where anyone may have
// changed it: New never panics, refuses with a reject error, and takes
// only items in index order from 0, each with its run and input.
func FuzzNew(f *testing.F) {
	var seed []byte
	for _, it := range items(3) {
		b, _ := jcs.Marshal(it)
		seed = append(append(seed, b...), '\n')
	}
	f.Add(seed)
	f.Add([]byte("{\"index\":1}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var its []Item
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var it Item
			if jcs.Unmarshal([]byte(line), &it) != nil {
				return
			}
			its = append(its, it)
		}
		fl, err := New("o", its)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("%v is not a reject error", err)
			}
			return
		}
		for i, it := range fl.Items {
			if it.Index != uint64(i) || it.Run.IsZero() || it.Input.IsZero() {
				t.Fatalf("took item %d: %+v", i, it)
			}
		}
	})
}
