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
