package vectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// committed is the pack in the repository.
var committed = filepath.Join("..", "..", "conformance", "v1")

// TestGeneratedPackVerifies generates the pack in a fresh directory and
// checks every vector from the files.
func TestGeneratedPackVerifies(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir); err != nil {
		t.Fatal(err)
	}
	checkPack(t, dir)
}

// TestCommittedPackVerifies checks the committed pack from its files.
func TestCommittedPackVerifies(t *testing.T) {
	checkPack(t, committed)
}

func checkPack(t *testing.T, dir string) {
	t.Helper()
	outs, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) < 25 {
		t.Fatalf("only %d vectors", len(outs))
	}
	for _, o := range outs {
		if !o.Pass {
			t.Errorf("%s: %s (%v)", o.Entry.Path, o.Why, o.Err)
		}
	}
}

// TestRegenerationIsByteIdentical: generating twice gives the same bytes,
// and the committed pack is exactly what generation gives now.
func TestRegenerationIsByteIdentical(t *testing.T) {
	a := generated(t)
	b, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for n, x := range a {
		if !bytes.Equal(x, b[n]) {
			t.Fatalf("%s differs between two generations", n)
		}
	}
	for n, x := range a {
		got, err := os.ReadFile(filepath.Join(committed, filepath.FromSlash(n)))
		if err != nil {
			t.Errorf("%s: %v (run: go run ./cmd/sandbox-engine vectors gen conformance/v1)", n, err)
			continue
		}
		if !bytes.Equal(got, x) {
			t.Errorf("%s: committed bytes differ from a fresh generation (run: go run ./cmd/sandbox-engine vectors gen conformance/v1)", n)
		}
	}
	// And nothing committed that generation does not make.
	filepath.WalkDir(committed, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(committed, p)
		if _, ok := a[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s is committed but not generated", rel)
		}
		return nil
	})
}

// TestPackFilesArePinned: every file of the pack is pinned by address in
// its manifest, so a case dropped from (or changed in) a multi-case file
// refuses the pack, naming the file; so do a file missing and a file
// the manifest does not pin.
func TestPackFilesArePinned(t *testing.T) {
	fresh := func() string { return writePack(t) }
	durable := filepath.Join("positive", "durable.json")
	for _, tc := range []struct {
		name   string
		change func(dir string)
		code   reject.Code
		names  string
	}{
		{"a durable case dropped", func(dir string) {
			var d Durable
			b, _ := os.ReadFile(filepath.Join(dir, durable))
			if err := jcs.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			d.Cases = d.Cases[:len(d.Cases)-1]
			b, _ = jcs.Marshal(d)
			if err := CheckDurable(b); err != nil {
				t.Fatalf("the changed file no longer checks by itself: %v", err)
			}
			os.WriteFile(filepath.Join(dir, durable), b, 0o644)
		}, reject.Address, "positive/durable.json"},
		{"an environment case's expectation changed", func(dir string) {
			p := filepath.Join(dir, "positive", "environment.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"fields":["line 3, column 3"]`), []byte(`"fields":["line 3"]`), 1), 0o644)
		}, reject.Address, "positive/environment.json"},
		{"a run file removed", func(dir string) {
			os.Remove(filepath.Join(dir, "negative", "run-stdout-changed", "stdout.log"))
		}, reject.Missing, "negative/run-stdout-changed/stdout.log"},
		{"a file added", func(dir string) {
			os.WriteFile(filepath.Join(dir, "positive", "extra.json"), []byte("{}"), 0o644)
		}, reject.Unrecognised, "positive/extra.json"},
		{"the README edited", func(dir string) {
			os.WriteFile(filepath.Join(dir, "README.md"), []byte("# a pack\n"), 0o644)
		}, reject.Address, "README.md"},
	} {
		dir := fresh()
		tc.change(dir)
		_, err := Verify(dir)
		if !errors.Is(err, tc.code) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, tc.code, tc.names)
		}
	}
}

// TestEveryNegativeNamedInTheIssue is present, with its code.
func TestEveryRequiredNegative(t *testing.T) {
	want := map[reject.Code]bool{
		reject.Signature: false, reject.Address: false, reject.NonCanonical: false, reject.Float: false,
		reject.IntRange: false, reject.NonShortest: false, reject.Indefinite: false, reject.DuplicateKey: false,
		reject.UnsortedKeys: false, reject.Alg: false, reject.UnknownCritical: false, reject.Truncated: false,
		reject.UntrustedKey: false, reject.TotalMismatch: false,
	}
	outs, err := inMemory(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if !o.Pass {
			t.Errorf("%s: %s (%v)", o.Entry.Path, o.Why, o.Err)
		}
		if _, ok := want[reject.Code(o.Entry.Expect)]; ok && o.Got == o.Entry.Expect {
			want[reject.Code(o.Entry.Expect)] = true
		}
	}
	for c, seen := range want {
		if !seen {
			t.Errorf("no negative produces %s", c)
		}
	}
}

// inMemory checks the generated pack without the committed files.
func inMemory(t *testing.T) ([]Outcome, error) {
	return Verify(writePack(t))
}

// generatedOnce is Generate's pack, made once for the tests that read it
// or change a copy: generation is deterministic
// (TestRegenerationIsByteIdentical), and each took seconds of the
// suite's CPU under the race detector, some fifteen times a run.
var generatedOnce = sync.OnceValues(Generate)

// generated is a copy of the generated pack's files.
func generated(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := generatedOnce()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte, len(files))
	for n, b := range files {
		out[n] = bytes.Clone(b)
	}
	return out
}

// writePack writes the generated pack in a new directory, as Write
// does (TestGeneratedPackVerifies checks Write itself).
func writePack(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := writeFiles(dir, generated(t)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEncodingCheckCatchesChanges: the encoding vectors are a real check.
// A changed output byte, a changed input and an unknown codec each fail.
func TestEncodingCheckCatchesChanges(t *testing.T) {
	good := generated(t)["positive/encoding.json"]
	if err := CheckEncoding(good); err != nil {
		t.Fatalf("the generated encoding vectors fail: %v", err)
	}
	var vs []Encoding
	if err := json.Unmarshal(good, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 7 {
		t.Fatalf("only %d encoding vectors", len(vs))
	}
	for i := range vs {
		for _, c := range []struct {
			what   string
			change func(e *Encoding)
		}{
			{"output", func(e *Encoding) { e.Output = flipHex(e.Output, len(e.Output)/2) }},
			{"input", func(e *Encoding) { e.Input = flipHex(e.Input, len(e.Input)-2) }},
			{"codec", func(e *Encoding) { e.Codec = "yaml" }},
		} {
			bad := slices.Clone(vs)
			c.change(&bad[i])
			b, err := jcs.Marshal(bad)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckEncoding(b); err == nil {
				t.Errorf("%s (%s): a changed %s still passes", vs[i].Name, vs[i].Codec, c.what)
			}
		}
	}
}

// flipHex changes the hex digit at i.
func flipHex(s string, i int) string {
	b := []byte(s)
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
	return string(b)
}

// TestCornerCaseVectors: each corner case docs/spec/canonical.md decides
// has its vector, refused with the code the spec gives.
func TestCornerCaseVectors(t *testing.T) {
	want := map[string]reject.Code{
		"attestation-zero-address.json":         reject.MissingField,
		"attestation-null-optional.json":        reject.NonCanonical,
		"grants-quota-zero.json":                reject.NonCanonical,
		"attestation-notes-empty.json":          reject.NonCanonical,
		"attestation-note-empty.json":           reject.Invalid,
		"receipt-fuel-zero.cose":                reject.Invalid,
		"attestation-minus-zero.json":           reject.NonCanonical,
		"attestation-leading-zero.json":         reject.Malformed,
		"attestation-wrong-type.json":           reject.Invalid,
		"receipt-wrong-type.cose":               reject.Invalid,
		"receipt-devices-out-of-order.cose":     reject.NonCanonical,
		"decisions-seq-from-one.json":           reject.Invalid,
		"decisions-unmerged.json":               reject.NonCanonical,
		"attestation-device-class-unknown.json": reject.Invalid,
		"receipt-untagged.cose":                 reject.Malformed,
		"attestation-signature-63-bytes.json":   reject.Signature,
		"receipt-signature-63-bytes.cose":       reject.Signature,
	}
	outs, err := inMemory(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		name := filepath.Base(o.Entry.Path)
		code, ok := want[name]
		if !ok {
			continue
		}
		delete(want, name)
		if o.Entry.Expect != string(code) || o.Got != string(code) {
			t.Errorf("%s: expects %s, verifier gives %s; the spec says %s", name, o.Entry.Expect, o.Got, code)
		}
	}
	for name := range want {
		t.Errorf("no vector %s", name)
	}
}

// A second implementation, written in Python from docs/spec/run-record.md
// and conformance.md alone (its own BLAKE3, checked against the official
// vectors first), agrees with every case of durable.json, and with the
// pack's pins: it takes the committed pack and refuses one with a case
// of durable.json dropped.
func TestIndependentRecordVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed for the independent verifier (scripts/deps installs it)")
	}
	const script, blake3 = "../../conformance/independent/runrecord.py", "../../testdata/vectors/blake3/test_vectors.json"
	out, err := exec.Command(py, script, "../../conformance/v1/positive/durable.json", blake3).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 disagree") {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err = exec.Command(py, script, "--pack", committed, blake3).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 differ") || !strings.Contains(string(out), " 0 disagree") {
		t.Fatalf("the committed pack: %v\n%s", err, out)
	}
	dir := writePack(t)
	p := filepath.Join(dir, "positive", "durable.json")
	var d Durable
	b, _ := os.ReadFile(p)
	if err := jcs.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	d.Cases = d.Cases[1:]
	b, _ = jcs.Marshal(d)
	os.WriteFile(p, b, 0o644)
	out, err = exec.Command(py, script, "--pack", dir, blake3).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "positive/durable.json: address") {
		t.Fatalf("a pack with a durable case dropped: %v\n%s", err, out)
	}
}
