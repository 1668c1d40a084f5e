package host

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
)

// readKept reads p as a file of the system directories is read: its
// identity kept where the rules allow.
func readKept(t *testing.T, p string) Program {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prog, err := readProgram(f, 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// TestProgramHashedOncePerFile: a program read again, unchanged, takes
// the address its first read was hashed to, without hashing its bytes.
func TestProgramHashedOncePerFile(t *testing.T) {
	first, err := readRegular("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if first.id.zero() {
		t.Fatalf("/bin/true, unchanged for long, has no identity")
	}
	want := addr.Of(first.Bytes)
	if got := imageAddr(first.Bytes, first.id); got != want {
		t.Fatalf("first read: %s, want %s", got, want)
	}
	again, err := readRegular("/bin/true")
	if err != nil || again.id != first.id {
		t.Fatalf("read again: %+v %v, want identity %+v", again.id, err, first.id)
	}
	// Other bytes under the same identity: the kept address is
	// answered, so the bytes were not hashed.
	if got := imageAddr([]byte("not /bin/true"), again.id); got != want {
		t.Fatalf("read again: %s, want the kept %s", got, want)
	}
}

// TestProgramChangedIsHashedAgain: a file rewritten in place, at its
// size and with its modification time put back, is hashed again (its
// change time moved); and one changed within settleTime of its read has
// no identity at all, so nothing is kept for it.
func TestProgramChangedIsHashedAgain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho one\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if fresh := readKept(t, p); !fresh.id.zero() {
		t.Fatalf("a file written just now has an identity: %+v", fresh.id)
	}
	// As if settleTime had passed since.
	programClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { programClock = time.Now })
	one := readKept(t, p)
	if one.id.zero() {
		t.Fatalf("settled: no identity")
	}
	if got := imageAddr(one.Bytes, one.id); got != addr.Of(one.Bytes) {
		t.Fatalf("first: %s", got)
	}
	fi, _ := os.Stat(p)
	time.Sleep(50 * time.Millisecond) // past a coarse clock's tick: the change time moves
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho two\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	two := readKept(t, p)
	if bytes.Equal(two.Bytes, one.Bytes) || two.id == one.id {
		t.Fatalf("rewritten: the same identity %+v", two.id)
	}
	if got := imageAddr(two.Bytes, two.id); got != addr.Of(two.Bytes) {
		t.Fatalf("rewritten: %s, want %s", got, addr.Of(two.Bytes))
	}
}

// TestProgramOthersCanWriteIsHashedEachTime: a file anyone but root may
// write has no identity, so its address is never kept: a write through
// a shared mapping (which a guest with a writable grant can make)
// changes its bytes and neither of its times.
func TestProgramOthersCanWriteIsHashedEachTime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make files of root's and of another user's")
	}
	programClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { programClock = time.Now })
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		kept bool
	}{
		{"root's, 0755", 0o755, 0, true},
		{"root's, 0644", 0o644, 0, true},
		{"root's, group-writable", 0o775, 0, false},
		{"root's, writable by all", 0o757, 0, false},
		{"nobody's, 0755", 0o755, 65534, false},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte("program"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, c.uid, 0); err != nil {
			t.Fatal(err)
		}
		if id := readKept(t, p).id; !id.zero() != c.kept {
			t.Errorf("%s: identity %+v, want one: %v", c.name, id, c.kept)
		}
	}
}

// TestProgramMappedWriteIsSeen: the attack the rule above closes. A
// file written through a shared mapping keeps both its times, and is
// still hashed anew, being another user's.
func TestProgramMappedWriteIsSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a file of another user's")
	}
	programClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { programClock = time.Now })
	p := filepath.Join(t.TempDir(), "module")
	if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	m[0] = 'a' // the page is dirty from here on
	one := readKept(t, p)
	a1 := imageAddr(one.Bytes, one.id)
	fi1, _ := os.Stat(p)
	m[0] = 'b' // no fault: no time moves
	fi2, _ := os.Stat(p)
	two := readKept(t, p)
	if a2 := imageAddr(two.Bytes, two.id); a2 == a1 || a2 != addr.Of(two.Bytes) {
		t.Fatalf("after a mapped write: %s (first %s), want %s", a2, a1, addr.Of(two.Bytes))
	}
	if !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Logf("the mapped write moved the modification time here (%v → %v)", fi1.ModTime(), fi2.ModTime())
	}
}

// TestProgramOutsideTheSystemDirsIsHashedEachTime: a file outside the
// host's system directories (a workspace, a storage grant, the
// operator's own) has no identity, whoever owns it: a guest's file
// system (a workspace's image) may say any owner and times.
func TestProgramOutsideTheSystemDirsIsHashedEachTime(t *testing.T) {
	programClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { programClock = time.Now })
	p := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(p, []byte("program"), 0o755); err != nil {
		t.Fatal(err)
	}
	if prog, err := readRegular(p); err != nil || !prog.id.zero() {
		t.Fatalf("%s: identity %+v (%v), want none", p, prog.id, err)
	}
	if prog, err := readRegular("/bin/true"); err != nil || prog.id.zero() {
		t.Fatalf("/bin/true: no identity (%v)", err)
	}
}
