package trail

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

func TestTrail(t *testing.T) {
	if Genesis() != addr.Addr(blake3.Sum256([]byte("sandbox.audit/1"))) {
		t.Fatal("genesis")
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path)
	if err != nil || l.Lock() != Genesis() {
		t.Fatal(err)
	}
	l.Unlock()
	var cited []addr.Addr
	for i := range 3 {
		prev := l.Lock()
		cited = append(cited, prev)
		if _, err := l.Append(addr.Of([]byte{byte(i)}), "eu-west"); err != nil {
			t.Fatal(err)
		}
		l.Unlock()
	}
	head := l.Lock()
	l.Unlock()
	l.Close()
	// Replayed on open: the same head, never stored.
	l, err = Open(path)
	if err != nil || l.Len() != 3 {
		t.Fatal(err)
	}
	if l.Lock() != head {
		t.Fatal("another head after a reopen")
	}
	l.Unlock()
	l.Close()
	b, _ := os.ReadFile(path)
	if h, n, err := Verify(b, cited); err != nil || h != head || n != 3 {
		t.Fatal(err)
	}
	// A consistent truncation replays by itself, and the attestations'
	// audit_prev values catch it (the last entry's loss only a later
	// run's would: the last run cites the head before it).
	cut := b[:len(b)-len(b)/2]
	cut = cut[:lastNL(cut)+1]
	if _, _, err := Verify(cut, nil); err != nil {
		t.Fatalf("a cut trail replays by itself: %v", err)
	}
	if _, _, err := Verify(cut, cited); !errors.Is(err, reject.HeadMismatch) {
		t.Fatalf("the cited heads catch the cut: %v", err)
	}
	// A reset trail (a new file): the first audit_prev after a restart is
	// genesis again, and the earlier runs' values are not reached.
	if _, _, err := Verify(nil, cited); !errors.Is(err, reject.HeadMismatch) {
		t.Fatalf("a reset trail: %v", err)
	}
	// An entry that does not parse is fatal, never a shorter history.
	os.WriteFile(path, append(append([]byte{}, b...), []byte("{\"run\":1}\n")...), 0o600)
	if _, err := Open(path); err == nil {
		t.Fatal("an unparseable entry opened")
	}
}

func lastNL(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}
