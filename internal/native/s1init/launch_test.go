//go:build linux

package s1init

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
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

// TestAboveLaunchFDs: init's own program and the host's mounts are kept
// above every descriptor the launcher's child places (its seven, and
// the seven places it may move them to on the way), so that
// /proc/self/fd/N still names them when the child executes or chroots:
// the same file, close-on-exec, its old descriptor closed. On a GPU host
// whose init was handed fewer descriptors, the helper opened at 5 or 6,
// became the run's root or a socket in the child, and every S1 run failed
// "start the program's launcher: permission denied".
func TestAboveLaunchFDs(t *testing.T) {
	if launcherFDFloor < 2*7 {
		t.Fatalf("launcherFDFloor %d is within the child's reach (14)", launcherFDFloor)
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	low := f.Fd()
	var before unix.Stat_t
	if err := unix.Fstat(int(low), &before); err != nil {
		t.Fatal(err)
	}
	g, err := aboveLaunchFDs(f)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Fd() < launcherFDFloor {
		t.Fatalf("moved to %d, below %d", g.Fd(), launcherFDFloor)
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(g.Fd()), &after); err != nil || after.Ino != before.Ino || after.Dev != before.Dev {
		t.Fatalf("the moved descriptor is another file (%v)", err)
	}
	if flags, err := unix.FcntlInt(g.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the moved descriptor is not close-on-exec (flags %d, %v)", flags, err)
	}
	if err := unix.Fstat(int(low), &after); err == nil && after.Ino == before.Ino {
		t.Errorf("descriptor %d still holds the file", low)
	}
	if g, err := aboveLaunchFDs(nil); g != nil || err != nil {
		t.Errorf("nil: %v, %v", g, err)
	}
}
