package host

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReadAllReadsWholeOrToItsLimit: a file is read whole, and one that
// says terabytes (sparse) is read to the limit and one byte more, so
// that its caller can tell it is over.
func TestReadAllReadsWholeOrToItsLimit(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole")
	want := bytes.Repeat([]byte("program "), 100_000)
	if err := os.WriteFile(whole, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := readAll(f, MaxRead); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("whole: %d bytes, %v; want %d", len(b), err, len(want))
	}
	sparse := filepath.Join(dir, "sparse")
	s, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Truncate(1 << 43); err != nil {
		t.Skipf("no sparse file of 8 TiB here: %v", err)
	}
	defer s.Close()
	if b, err := readAll(s, 10); err != nil || len(b) != 11 {
		t.Fatalf("sparse: %d bytes, %v; want 11", len(b), err)
	}
}
