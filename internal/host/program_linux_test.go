package host

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
)

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
	fresh, err := readRegular(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fresh.id.zero() {
		t.Fatalf("a file written just now has an identity: %+v", fresh.id)
	}
	// As if settleTime had passed since.
	programClock = func() time.Time { return time.Now().Add(time.Hour) }
	t.Cleanup(func() { programClock = time.Now })
	one, err := readRegular(p)
	if err != nil || one.id.zero() {
		t.Fatalf("settled: %+v %v", one.id, err)
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
	two, err := readRegular(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(two.Bytes, one.Bytes) || two.id == one.id {
		t.Fatalf("rewritten: the same identity %+v", two.id)
	}
	if got := imageAddr(two.Bytes, two.id); got != addr.Of(two.Bytes) {
		t.Fatalf("rewritten: %s, want %s", got, addr.Of(two.Bytes))
	}
}
