package verify

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// readFile reads what os.ReadFile reads and fails where it fails, with
// the same error.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 1 << 20} {
		p := filepath.Join(dir, "f"+string(rune('a'+len(paths))))
		if err := os.WriteFile(p, bytes.Repeat([]byte{'x', 0, 0xff}, n)[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// A file that says it is empty and is not; missing; a directory.
	paths = append(paths, "/proc/self/status", filepath.Join(dir, "missing"), dir)
	for _, p := range paths {
		want, werr := os.ReadFile(p)
		got, err := readFile(p)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Errorf("%s: error %v, os.ReadFile's %v", p, err, werr)
		}
		if p != "/proc/self/status" && !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, os.ReadFile read %d", p, len(got), len(want))
		}
		if p == "/proc/self/status" && !bytes.HasPrefix(got, []byte("Name:")) {
			t.Errorf("%s: %q", p, got)
		}
	}
}
