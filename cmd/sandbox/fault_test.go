package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallStateDir mounts a tmpfs of size bytes as a fresh state directory,
// unmounted when the test ends.
func smallStateDir(t *testing.T, size int) string {
	t.Helper()
	home := t.TempDir()
	if err := unix.Mount("tmpfs", home, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(home, unix.MNT_DETACH) })
	return home
}

// fill writes into dir until its file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestFullStateDiskKeepsCallerOutput: with a state directory that is
// full, a guest writing 3 MB delivers every byte to the caller at S1 and
// S2 (the guest itself sees no error); the run is reported as not sealed
// with exit 125 and a message saying so; nothing half-written is stored
// or listed; a compile cache that cannot be written is only a warning.
func TestFullStateDiskKeepsCallerOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs as the state directory needs root")
	}
	const n = 3_000_000
	data := t.TempDir()
	line := strings.Repeat("x", 99) + "\n"
	big := []byte(strings.Repeat(line, n/len(line)))
	if err := os.WriteFile(filepath.Join(data, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tier string
		args []string
		want []byte
	}{
		{"S1", []string{"--", "/bin/sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo done", n)},
			append(bytes.Repeat([]byte("a"), n), "done\n"...)},
		{"S2", []string{"--grant", "fs:" + data + ":ro", "--", guestPath(t, "cat"), filepath.Join(data, "big")}, big},
	} {
		t.Run(tc.tier, func(t *testing.T) {
			home := smallStateDir(t, 16<<20)
			// The first run fits, but its compiled module (S2) does not.
			first, e, code := sandbox(t, home, append([]string{"run", "-q"}, tc.args...)...)
			if code != 0 || !bytes.Equal([]byte(first), tc.want) {
				t.Fatalf("first run: %d %s", code, e)
			}
			if tc.tier == "S2" && !strings.Contains(e, "warning") {
				t.Errorf("no warning about the cache that could not be written: %q", e)
			}
			fill(t, home)
			out, errOut, code := sandbox(t, home, append([]string{"run", "-q"}, tc.args...)...)
			if !bytes.Equal([]byte(out), tc.want) {
				t.Errorf("the caller got %d bytes of %d", len(out), len(tc.want))
			}
			if code != 125 || !strings.Contains(errOut, "ended exited 0 but was not sealed") {
				t.Errorf("exit %d, stderr %q", code, errOut)
			}
			if runs, _, _ := sandbox(t, home, "runs"); strings.Count(runs, "\n") != 1 {
				t.Errorf("runs lists more than the first run:\n%s", runs)
			}
			if os.Remove(filepath.Join(home, "filler")) != nil {
				t.Fatal("filler")
			}
			if dry, _, _ := sandbox(t, home, "gc", "-n"); dry != "nothing left behind\n" {
				t.Errorf("left behind:\n%s", dry)
			}
		})
	}
}
