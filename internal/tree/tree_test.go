package tree

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
)

func blobs(t *testing.T) *store.Store {
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store.Of(d)
}

// walk lists a directory as text: each entry's path, kind, mode and
// content or target.
func walk(t *testing.T, dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + fi.Mode().String())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			b.WriteString(" -> " + l)
		case fi.Mode().IsRegular():
			c, _ := os.ReadFile(p)
			b.WriteString(" " + addr.Of(c).Short())
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func TestCaptureRestore(t *testing.T) {
	s := blobs(t)
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "b", "small.txt"), []byte("hello\n"), 0o640)
	big := bytes.Repeat([]byte("0123456789abcdef"), ChunkSize/16*2+100) // two chunks and a bit
	os.WriteFile(filepath.Join(src, "big.bin"), big, 0o600)
	os.WriteFile(filepath.Join(src, "empty"), nil, 0o644)
	os.Symlink("/etc/shadow", filepath.Join(src, "a", "out"))
	os.Mkdir(filepath.Join(src, "ro"), 0o755)
	os.WriteFile(filepath.Join(src, "ro", "f"), []byte("x"), 0o444)
	os.Chmod(filepath.Join(src, "ro"), 0o555)
	defer os.Chmod(filepath.Join(src, "ro"), 0o755)
	c := &Capturer{Blobs: s}
	a, st, err := c.Capture(src)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 4 || st.Links != 1 || st.Dirs != 3 || st.Bytes != int64(len(big))+7 {
		t.Fatalf("%+v", st)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if err := Restore(s, a, dst, nil); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Join(dst, "ro"), 0o755)
	if got, want := walk(t, dst), walk(t, src); strings.Join(strings.Split(got, "\n")[1:], "\n") != strings.Join(strings.Split(want, "\n")[1:], "\n") {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
	}
	// Captured again after a small change: only the changed chunk is new,
	// and the unchanged files are not read.
	f, _ := os.OpenFile(filepath.Join(src, "big.bin"), os.O_WRONLY, 0)
	f.WriteAt([]byte("CHANGED"), ChunkSize+5)
	f.Close()
	a2, st2, err := c.Capture(src)
	if err != nil || a2 == a {
		t.Fatal(err)
	}
	if st2.Stored != ChunkSize || st2.Read != int64(len(big)) {
		t.Fatalf("second capture stored %d, read %d; want one chunk stored, only big.bin read", st2.Stored, st2.Read)
	}
	// Unchanged: the same tree, nothing read.
	a3, st3, err := c.Capture(src)
	if err != nil || a3 != a2 || st3.Read != 0 {
		t.Fatalf("%v %v %+v", err, a3 == a2, st3)
	}
}

// A file whose content changed while its mtime was put back is read
// again: ctime cannot be put back.
func TestCaptureSeesThroughAResetMtime(t *testing.T) {
	s := blobs(t)
	src := t.TempDir()
	p := filepath.Join(src, "f")
	os.WriteFile(p, []byte("aaaa"), 0o644)
	fi, _ := os.Stat(p)
	c := &Capturer{Blobs: s}
	a, _, _ := c.Capture(src)
	os.WriteFile(p, []byte("bbbb"), 0o644)
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	a2, _, err := c.Capture(src)
	if err != nil || a2 == a {
		t.Fatal("a change behind a reset mtime was not captured")
	}
}

// What the guest could plant: no setuid bit comes back, special files
// and names that are not UTF-8 are refused by name.
func TestCaptureHostileEntries(t *testing.T) {
	s := blobs(t)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "suid"), []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(filepath.Join(src, "suid"), 0o4755|os.ModeSetuid)
	syscall.Chmod(filepath.Join(src, "suid"), 0o4755)
	a, _, err := (&Capturer{Blobs: s}).Capture(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	if err := Restore(s, a, dst, nil); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "suid")); fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("restored mode %v", fi.Mode())
	}
	// A fifo (or a socket a server left) is left out, and said.
	dir := t.TempDir()
	syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	ta, st, err := (&Capturer{Blobs: s}).Capture(dir)
	if err != nil || len(st.Skipped) != 1 || st.Skipped[0] != "pipe" || st.Files != 1 {
		t.Fatalf("%v %+v", err, st)
	}
	tr, _ := Load(s, ta)
	if len(tr.Entries) != 1 || tr.Entries[0].Path != "f" {
		t.Fatalf("%+v", tr.Entries)
	}
}

// A corrupt chunk or a tree that escapes fails the restore, which leaves
// nothing behind.
func TestRestoreRefusesWhatDoesNotCheck(t *testing.T) {
	s := blobs(t)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("content"), 0o644)
	a, _, err := (&Capturer{Blobs: s}).Capture(src)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(s.Path("blobs", addr.Of([]byte("content")).Hex()), []byte("tampered"), 0o600)
	dst := filepath.Join(t.TempDir(), "r")
	if err := Restore(s, a, dst, nil); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a corrupt chunk: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a failed restore left its directory")
	}
	for _, bad := range []string{
		`{"entries":[{"kind":"dir","mode":493,"path":"../x"}],"tree":"sandbox.tree/1"}`,
		`{"entries":[{"kind":"dir","mode":493,"path":"/etc"}],"tree":"sandbox.tree/1"}`,
		`{"entries":[{"kind":"file","mode":2541,"path":"x"}],"tree":"sandbox.tree/1"}`,
		`{"entries":[{"kind":"file","mode":420,"path":"a/x"}],"tree":"sandbox.tree/1"}`,
		`{"entries":[{"kind":"fifo","path":"x"}],"tree":"sandbox.tree/1"}`,
	} {
		ta := addr.Of([]byte(bad))
		s.PutBlob(ta, []byte(bad))
		if err := Restore(s, ta, filepath.Join(t.TempDir(), "r"), nil); err == nil {
			t.Errorf("restored %s", bad)
		}
	}
}

// Names that are not UTF-8 survive (as hex on the wire), and a walk's
// order ("a/x" before "a-b") is put in path order.
func TestCaptureAnyName(t *testing.T) {
	s := blobs(t)
	src := t.TempDir()
	os.Mkdir(filepath.Join(src, "a"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "x"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(src, "a-b"), []byte("2"), 0o644)
	os.WriteFile(filepath.Join(src, "caf\xe9"), []byte("latin-1"), 0o644)
	os.Symlink("\xff", filepath.Join(src, "l"))
	a, _, err := (&Capturer{Blobs: s}).Capture(src)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := s.Blob(a)
	if !strings.Contains(string(raw), `"path_hex":"636166e9"`) || !strings.Contains(string(raw), `"target_hex":"ff"`) {
		t.Fatalf("%s", raw)
	}
	dst := filepath.Join(t.TempDir(), "r")
	if err := Restore(s, a, dst, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "caf\xe9")); err != nil || string(b) != "latin-1" {
		t.Fatalf("%q %v", b, err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "l")); l != "\xff" {
		t.Fatalf("%q", l)
	}
	// A UTF-8 name written as hex is a second form of it.
	bad := []byte(`{"entries":[{"kind":"dir","mode":493,"path_hex":"61"}],"tree":"sandbox.tree/1"}`)
	ba := addr.Of(bad)
	s.PutBlob(ba, bad)
	if _, err := Load(s, ba); err == nil {
		t.Fatal("a UTF-8 name as hex was taken")
	}
}
