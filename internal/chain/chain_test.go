package chain

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

func TestStepIsBlake3OfHeadAndEntry(t *testing.T) {
	head := Genesis("sandbox.audit/1")
	if head != addr.Addr(blake3.Sum256([]byte("sandbox.audit/1"))) {
		t.Fatal("genesis is not BLAKE3 of the domain tag")
	}
	entry := []byte(`{"a":1}`)
	want := blake3.Sum256(append(append([]byte{}, head[:]...), entry...))
	if Step(head, entry) != addr.Addr(want) {
		t.Fatal("step is not BLAKE3(head ‖ entry)")
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in      string
		entries int
		torn    int
		code    reject.Code
	}{
		{"", 0, 0, ""},
		{"a\n", 1, 0, ""},
		{"a\nb\n", 2, 0, ""},
		{"a\nb", 1, 1, ""},
		{"a\n\nb\n", 0, 0, reject.Malformed},
		{"\n", 0, 0, reject.Malformed},
		{strings.Repeat("x", MaxEntry+1) + "\n", 0, 0, reject.Invalid},
	} {
		e, torn, err := Split([]byte(tc.in))
		if tc.code != "" {
			if !errors.Is(err, tc.code) {
				t.Errorf("%.20q: %v, want %s", tc.in, err, tc.code)
			}
			continue
		}
		if err != nil || len(e) != tc.entries || torn != tc.torn {
			t.Errorf("%.20q: %d entries, torn %d, %v", tc.in, len(e), torn, err)
		}
	}
}

func TestAppendReopenAndTorn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l, entries, err := OpenFile(path)
	if err != nil || len(entries) != 0 {
		t.Fatal(err, entries)
	}
	for i := range 3 {
		if err := l.Append([]byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range [][]byte{nil, []byte("a\nb")} {
		if err := l.Append(bad); !errors.Is(err, reject.Invalid) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if _, _, err := OpenFile(path); !errors.As(err, new(*BusyError)) {
		t.Fatalf("a second writer: %v", err)
	}
	l.Close()
	// A crash mid-write leaves a fragment without its newline: it was
	// never acknowledged; the next writer cuts it.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"n":3`)
	f.Close()
	if e, torn, err := Read(path); err != nil || len(e) != 3 || torn != 6 {
		t.Fatalf("read: %d %d %v", len(e), torn, err)
	}
	l, entries, err = OpenFile(path)
	if err != nil || len(entries) != 3 {
		t.Fatal(err, len(entries))
	}
	if err := l.Append([]byte(`{"n":4}`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, _ := os.ReadFile(path)
	if string(b) != "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":4}\n" {
		t.Fatalf("%q", b)
	}
	// An empty line inside is no shorter history: it is refused.
	os.WriteFile(path, []byte("{\"n\":0}\n\n{\"n\":2}\n"), 0o600)
	if _, _, err := OpenFile(path); !errors.Is(err, reject.Malformed) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("an empty line: %v", err)
	}
}

// A full disk: the append fails, and the file keeps whole entries only.
func TestAppendOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	path := filepath.Join(dir, "log.jsonl")
	l, _, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	entry := bytes.Repeat([]byte("x"), 1000)
	n := 0
	for ; n < 100; n++ {
		if err := l.Append(entry); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append %d: %v", n, err)
			}
			break
		}
	}
	if n == 100 {
		t.Fatal("the disk never filled")
	}
	e, torn, err := Read(path)
	if err != nil || len(e) != n || torn != 0 {
		t.Fatalf("after ENOSPC: %d entries (acknowledged %d), torn %d, %v", len(e), n, torn, err)
	}
}

// A batch is one write and one fsync: all its entries, or (a bad entry
// among them) none.
func TestAppendBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l, _, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		batch [][]byte
		code  reject.Code
	}{
		{nil, ""},
		{[][]byte{[]byte(`{"n":0}`)}, ""},
		{[][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`), []byte(`{"n":3}`)}, ""},
		{[][]byte{[]byte(`{"n":4}`), nil}, reject.Invalid},
		{[][]byte{[]byte(`{"n":4}`), []byte("a\nb")}, reject.Invalid},
	} {
		if err := l.AppendBatch(tc.batch); tc.code == "" && err != nil || tc.code != "" && !errors.Is(err, tc.code) {
			t.Errorf("%q: %v, want %q", tc.batch, err, tc.code)
		}
	}
	b, _ := os.ReadFile(path)
	if string(b) != "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n" {
		t.Fatalf("%q", b)
	}
}
