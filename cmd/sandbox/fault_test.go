package main

import (
	"bufio"
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
	t.Parallel()
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
		// The Go cat: its compiled module (megabytes) does not fit.
		{"S2", []string{"--grant", "fs:" + data + ":ro", "--", goGuestPath(t, "cat"), filepath.Join(data, "big")}, big},
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

// TestWritesSurviveTheEnd: a run with a quota'd rw grant that is ended by
// its deadline, by its budget or by an interrupt it does not heed keeps
// what it wrote: committed to the grant, and the record says so; when
// the commit cannot be done (the grant's disk is full), every write is
// kept aside in the state directory and sandbox says where.
func TestWritesSurviveTheEnd(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 quota'd grants and cgroups need root")
	}
	const script = `trap '' INT; echo a > %[1]s/a; mkdir %[1]s/sub; head -c 100000 /dev/zero > %[1]s/sub/z; echo ready; %[2]s`
	for _, tc := range []struct {
		name  string
		flags []string
		tail  string
		full  bool // the grant's disk cannot take the writes
		code  int
		ended string // the outcome show gives: 124 alone is a deadline or a budget
	}{
		// The deadline leaves the guest time to make its writes on a
		// busy machine; the subtests wait for it side by side.
		{"deadline", []string{"--deadline", "10s"}, "sleep 60", false, 124, "outcome    deadline"},
		{"budget", []string{"--grant", "cpu:3J"}, "while :; do :; done", false, 124, "outcome    budget-exhausted"},
		{"interrupt", nil, "sleep 60", false, 130, "outcome    killed"},
		{"full", []string{"--deadline", "10s"}, "sleep 60", true, 124, "outcome    deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, dir := t.TempDir(), t.TempDir()
			if tc.full {
				dir = smallStateDir(t, 64<<10)
			}
			args := append([]string{"run", "-q", "--grant", "fs:" + dir + ":rw:quota=1MiB"}, tc.flags...)
			args = append(args, "--", "/bin/sh", "-c", fmt.Sprintf(script, dir, tc.tail))
			cmd := cliCmd(t, home, nil, args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The writes are in the run's overlay until the end: the
			// guest says when it has made them.
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the guest said %q (%v): %s", line, err, errb.String())
			}
			if tc.name == "interrupt" {
				cmd.Process.Signal(syscall.SIGINT)
			}
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, errb.String())
			}
			shown, _, _ := sandbox(t, home, "show", "last")
			if !strings.Contains(shown, tc.ended) {
				t.Errorf("not ended as expected (%s):\n%s", tc.ended, shown)
			}
			if _, _, code := sandbox(t, home, "verify", "--trust-host", "last"); code != 0 {
				t.Errorf("the run does not verify")
			}
			if !tc.full {
				if b, err := os.ReadFile(filepath.Join(dir, "sub", "z")); err != nil || len(b) != 100000 {
					t.Errorf("the writes were not committed: %v", err)
				}
				if !strings.Contains(shown, "committed at the end of the run: 3 entries, 100002 bytes") {
					t.Errorf("the record does not say what was committed:\n%s", shown)
				}
				return
			}
			ents, _ := os.ReadDir(filepath.Join(home, "kept"))
			if len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), ".kept") {
				t.Fatalf("kept: %v", ents)
			}
			kept := filepath.Join(home, "kept", ents[0].Name())
			if b, err := os.ReadFile(filepath.Join(kept, "sub", "z")); err != nil || len(b) != 100000 {
				t.Errorf("the writes were not kept aside: %v", err)
			}
			if !strings.Contains(errb.String(), "kept at "+kept) || !strings.Contains(shown, "kept at "+kept) || !strings.Contains(shown, "note       S1: the run's writes to") {
				t.Errorf("sandbox does not say where the writes are:\n%s\n%s", errb.String(), shown)
			}
			if dry, _, _ := sandbox(t, home, "gc", "-n"); dry != "nothing left behind\n" {
				t.Errorf("gc would touch kept work:\n%s", dry)
			}
		})
	}
}
