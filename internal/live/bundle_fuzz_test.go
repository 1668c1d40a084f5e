package live

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// A bundle is hostile input: readBundle never panics, and what it takes
// is only what its names allow.
func FuzzReadBundle(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{
		{"bundle.json", `{"bundle":"sandbox.bundle/1","head":"b3:` + zeros + `","sandbox":"sb-000000000000","signer":"ed25519:` + zeros + `"}`},
		{"records/sb-000000000000.jsonl", "{}\n"},
		{"blobs/" + zeros, "x"},
		{"../escape", "x"},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o600, Size: int64(len(e.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(e.body))
	}
	tw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		bd, err := readBundle(bytes.NewReader(b), t.TempDir())
		if err != nil {
			return
		}
		if bd.record == nil || !sandboxID.MatchString(bd.manifest.Sandbox) {
			t.Fatalf("took a bundle without a record or a sandbox id: %+v", bd.manifest)
		}
	})
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// A park document can come in a bundle from anyone: parsePark never
// panics, and what it takes has every address set and every open file
// numbered and placed as a continuation needs.
func FuzzParsePark(f *testing.F) {
	a := "b3:" + zeros[:63] + "1"
	f.Add([]byte(`{"execs":[{"boundary":7,"fuel":9,"grants":"` + a + `","handles":[{"flag":577,"h":1,"offset":12,"path":"/w/f"}],"journal":"` + a + `","memory":"` + a + `","n":1,"next_handle":2,"unit":"` + a + `","workspace":"/w"}],"sandbox":"sandbox.s2-park/1"}`))
	f.Add([]byte(`{"execs":[],"sandbox":"sandbox.s2-park/1"}`))
	f.Add([]byte(`{"sandbox":"sandbox.tree/1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePark(b)
		if err != nil {
			return
		}
		if p.Sandbox != S2ParkType || len(p.Execs) == 0 {
			t.Fatalf("took %+v", p)
		}
		for _, x := range p.Execs {
			if x.N <= 0 || x.Unit.IsZero() || x.Memory.IsZero() {
				t.Fatalf("took exec %+v", x)
			}
			for _, h := range x.Handles {
				if h.H == 0 || h.H >= x.NextHandle || h.Offset < 0 || h.Path == "" || h.Path[0] != '/' {
					t.Fatalf("took handle %+v", h)
				}
			}
		}
	})
}

// seedBundle is a small bundle whose record names everything it holds:
// a parked S1 sandbox's genesis (unit and grants), and a suspension of a
// workspace of one file.
func seedBundle(tb testing.TB) []byte {
	tb.Helper()
	d, err := state.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	s := store.Of(d)
	ws := tb.TempDir()
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o644)
	root, _, err := (&tree.Capturer{Blobs: s}).Capture(ws)
	if err != nil {
		tb.Fatal(err)
	}
	put := func(b []byte) addr.Addr {
		a := addr.Of(b)
		if err := s.PutBlob(a, b); err != nil {
			tb.Fatal(err)
		}
		return a
	}
	ub, _ := jcs.Marshal(DurableUnit{Sandbox: DurableUnitType, ID: "sb-000000000000", Tier: tier.S1, Created: "2026-01-01T00:00:00Z"})
	gb, _, _ := grant.Set{}.Canonical()
	ua, ga, ma := put(ub), put(gb), put([]byte(`{"environment":"sandbox.host-environment/1"}`))
	hb, _ := jcs.Marshal(record.Header{Record: record.Domain, Unit: ua, Grants: ga})
	sb, _ := record.Segment{Kind: record.Suspended, Snapshot: record.Snapshot{Root: root, Manifest: ma}}.Bytes()
	rec := string(hb) + "\n" + string(sb) + "\n"
	st, err := record.VerifyBytes([]byte(rec))
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, b []byte) {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	mb, _ := jcs.Marshal(BundleManifest{Bundle: BundleType, Sandbox: "sb-000000000000", Head: st.Head, Signer: key.Public{1}})
	add("bundle.json", mb)
	add("records/sb-000000000000.jsonl", []byte(rec))
	add("records/sb-000000000000.seals", nil) // read whole; checked by import, not here
	ents, _ := os.ReadDir(s.Path("blobs"))
	for _, e := range ents {
		b, _ := os.ReadFile(s.Path("blobs", e.Name()))
		add("blobs/"+e.Name(), b)
	}
	tw.Close()
	return buf.Bytes()
}

// What an import takes is whole: checkNamed never panics, refuses with a
// reject error, and passes a bundle only when every object its record
// names is in it (the store it is checked against here being empty).
func FuzzCheckNamed(f *testing.F) {
	f.Add(seedBundle(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		bd, err := readBundle(bytes.NewReader(b), t.TempDir())
		if err != nil {
			return
		}
		st, err := record.VerifyBytes(bd.record)
		if err != nil {
			return
		}
		d, err := state.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		h := New(&host.Host{Store: store.Of(d)})
		err = h.checkNamed(bd, st)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("%v is not a reject error", err)
			}
			return
		}
		entries, _, _ := chain.Split(bd.record)
		for _, e := range entries[1:] {
			seg, _ := record.ParseSegment(e)
			if seg.Kind != record.Suspended {
				continue
			}
			for _, a := range []addr.Addr{seg.Snapshot.Root, seg.Snapshot.Manifest} {
				if _, ok := bd.blobs[a]; !ok {
					t.Fatalf("took a bundle without %s, which its record names", a)
				}
			}
		}
	})
}

// The fuzz seed is whole, and the same bundle without its chunk is not:
// FuzzCheckNamed starts from a bundle checkNamed takes.
func TestSeedBundleIsWhole(t *testing.T) {
	t.Parallel()
	check := func(raw []byte) error {
		bd, err := readBundle(bytes.NewReader(raw), t.TempDir())
		if err != nil {
			return err
		}
		st, err := record.VerifyBytes(bd.record)
		if err != nil {
			return err
		}
		d, _ := state.Open(t.TempDir())
		return New(&host.Host{Store: store.Of(d)}).checkNamed(bd, st)
	}
	raw := seedBundle(t)
	if err := check(raw); err != nil {
		t.Fatal(err)
	}
	chunk := addr.Of([]byte("hello\n"))
	if err := check(without(t, raw, "blobs/"+chunk.Hex())); reject.CodeOf(err) != reject.Missing || !strings.Contains(err.Error(), chunk.String()) {
		t.Fatalf("without its chunk: %v", err)
	}
}
