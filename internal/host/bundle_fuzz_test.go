package host

import (
	"archive/tar"
	"bytes"
	"testing"
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
