package vectors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

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
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate()
	for n, x := range a {
		if !bytes.Equal(x, b[n]) {
			t.Fatalf("%s differs between two generations", n)
		}
	}
	for n, x := range a {
		got, err := os.ReadFile(filepath.Join(committed, filepath.FromSlash(n)))
		if err != nil {
			t.Errorf("%s: %v (run: go run ./cmd/sandbox vectors gen conformance/v1)", n, err)
			continue
		}
		if !bytes.Equal(got, x) {
			t.Errorf("%s: committed bytes differ from a fresh generation (run: go run ./cmd/sandbox vectors gen conformance/v1)", n)
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

// TestEveryNegativeNamedInTheIssue is present, with its code.
func TestEveryRequiredNegative(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	_ = files
	want := map[reject.Code]bool{
		reject.Signature: false, reject.Address: false, reject.NonCanonical: false, reject.Float: false,
		reject.IntRange: false, reject.NonShortest: false, reject.Indefinite: false, reject.DuplicateKey: false,
		reject.UnsortedKeys: false, reject.Alg: false, reject.UnknownCritical: false, reject.Truncated: false,
		reject.UntrustedKey: false, reject.TotalMismatch: false,
	}
	outs, err := inMemory()
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

// inMemory checks a freshly generated pack without the committed files.
func inMemory() ([]Outcome, error) {
	dir, err := os.MkdirTemp("", "pack")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := Write(dir); err != nil {
		return nil, err
	}
	return Verify(dir)
}
