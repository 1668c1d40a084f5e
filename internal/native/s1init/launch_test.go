//go:build linux

package s1init

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// TestHasLoader: a program with a PT_INTERP header is linked dynamically,
// one without is not, and what cannot be read as a 64-bit little-endian
// ELF program counts as linked dynamically (the launcher then starts in
// the host's mounts, which is always safe).
func TestHasLoader(t *testing.T) {
	elf := func(types ...uint32) []byte {
		b := make([]byte, 64+56*len(types))
		copy(b, "\x7fELF")
		b[4], b[5] = 2, 1 // 64-bit, little-endian
		binary.LittleEndian.PutUint64(b[32:], 64)
		binary.LittleEndian.PutUint16(b[54:], 56)
		binary.LittleEndian.PutUint16(b[56:], uint16(len(types)))
		for i, ty := range types {
			binary.LittleEndian.PutUint32(b[64+56*i:], ty)
		}
		return b
	}
	truncated := elf(1, 1)[:100]
	big := elf(1)
	big[4] = 1 // 32-bit
	tests := []struct {
		name string
		b    []byte
		want bool
	}{
		{"static", elf(6, 1, 1, 4), false},
		{"dynamic", elf(6, 3, 1, 1), true},
		{"no program headers", elf(), false},
		{"truncated headers", truncated, true},
		{"32-bit", big, true},
		{"a script", []byte("#!/bin/sh\necho\n"), true},
		{"empty", nil, true},
	}
	dir := t.TempDir()
	for _, tc := range tests {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, tc.b, 0o755)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := hasLoader(f); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		f.Close()
	}
	if f, err := os.Open("/bin/sh"); err == nil {
		if !hasLoader(f) {
			t.Error("/bin/sh reads as statically linked")
		}
		f.Close()
	}
	if hasLoader(nil) {
		t.Error("no program at all reads as linked dynamically")
	}
}
