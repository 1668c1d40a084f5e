package verify_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// conformanceRun reads the conformance pack's positive run directory.
func conformanceRun(tb testing.TB) map[string][]byte {
	tb.Helper()
	dir := filepath.Join("..", "conformance", "v1", "positive", "run")
	files := map[string][]byte{}
	for _, n := range verify.RunFiles {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) && (n == verify.FileJCPDecision || n == verify.FileEvidence || n == verify.FileLocality || n == verify.FileDeviceEvidence) {
			continue // the pack's run was not gated, and ran below S6
		}
		if err != nil {
			tb.Fatal(err)
		}
		files[n] = b
	}
	return files
}

// memVerifier verifies a run directory held in memory.
func memVerifier(files map[string][]byte) *verify.Verifier {
	return &verify.Verifier{
		Trust: vectorsTrust(),
		ReadFile: func(p string) ([]byte, error) {
			b, ok := files[filepath.Base(p)]
			if !ok {
				return nil, fs.ErrNotExist
			}
			return b, nil
		},
		ReadDir: func(string) ([]string, error) {
			names := make([]string, 0, len(files))
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			return names, nil
		},
	}
}

// FuzzRunDir changes one file of a valid run directory (replaces it,
// removes it, or adds a stray) and verifies the result. The verifier must
// never panic, must report every failure as a reject error with a known
// code, and must refuse every directory that is not byte for byte the
// original: every file of a run is bound.
func FuzzRunDir(f *testing.F) {
	orig := conformanceRun(f)
	for i, n := range verify.RunFiles {
		b := orig[n]
		f.Add(uint8(i), uint8(0), b)
		f.Add(uint8(i), uint8(0), append(bytes.Clone(b), 'x'))
		f.Add(uint8(i), uint8(0), b[:len(b)/2])
		f.Add(uint8(i), uint8(1), []byte(nil))
	}
	f.Add(uint8(0), uint8(2), []byte("stray"))
	f.Fuzz(func(t *testing.T, which, mode uint8, data []byte) {
		files := map[string][]byte{}
		for n, b := range orig {
			files[n] = b
		}
		name := verify.RunFiles[int(which)%len(verify.RunFiles)]
		changed := false
		switch mode % 3 {
		case 0:
			_, had := orig[name]
			files[name] = data
			changed = !had || !bytes.Equal(data, orig[name])
		case 1:
			_, changed = files[name]
			delete(files, name)
		case 2:
			files["extra.bin"] = data
			changed = true
		}
		rs := memVerifier(files).Attestation(filepath.Join("run", verify.FileAttestation))
		failed := false
		for _, r := range rs {
			if r.Err == nil {
				continue
			}
			failed = true
			var re *reject.Error
			if !errors.As(r.Err, &re) {
				t.Fatalf("%s: %v is not a reject error", r.Path, r.Err)
			}
			if !reject.Known(re.Code) {
				t.Fatalf("%s: unknown code %q", r.Path, re.Code)
			}
		}
		if changed && !failed {
			t.Fatalf("%s changed (mode %d, %d bytes) and the run still verifies", name, mode%3, len(data))
		}
		if !changed && failed {
			t.Fatalf("the unchanged run fails: %v", rs)
		}
	})
}

func vectorsTrust() key.Trust { return key.NewTrust(vectors.TestKey().Public()) }

// BenchmarkDir verifies the conformance run directory from disk, as
// `sandbox verify DIR` does: every file read, hashed and checked.
func BenchmarkDir(b *testing.B) {
	dir := filepath.Join("..", "conformance", "v1", "positive", "run")
	pub := vectors.TestKey().Public()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := verify.Dir(dir, pub); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirInMemory is BenchmarkDir without the file system.
func BenchmarkDirInMemory(b *testing.B) {
	v := memVerifier(conformanceRun(b))
	p := filepath.Join("run", verify.FileAttestation)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range v.Attestation(p) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}
