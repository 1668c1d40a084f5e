package ledger

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/reject"
)

func build(i int) Entry {
	return Entry{Input: addr.Of([]byte(fmt.Sprint("manifest ", i%2))), Output: addr.Of([]byte(fmt.Sprint("image ", i))), Run: addr.Of([]byte(fmt.Sprint("run ", i)))}
}

func TestLedger(t *testing.T) {
	if Genesis() != addr.Addr(blake3.Sum256([]byte("sandbox.build-ledger/1"))) {
		t.Fatal("genesis")
	}
	path := filepath.Join(t.TempDir(), "builds.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if h, n := l.Head(); h != Genesis() || n != 0 {
		t.Fatal("a new ledger is not at its genesis")
	}
	var cited []addr.Addr
	for i := range 4 {
		h, err := l.Append(build(i))
		if err != nil {
			t.Fatal(err)
		}
		cited = append(cited, h)
	}
	// The latest build from an input wins.
	if e, ok := l.Lookup(build(0).Input); !ok || e != build(2) {
		t.Fatalf("lookup: %+v %v", e, ok)
	}
	if _, ok := l.Lookup(addr.Of([]byte("never built"))); ok {
		t.Fatal("found a build never made")
	}
	head, _ := l.Head()
	l.Close()
	// Replayed on open: the same head and lookups, never stored.
	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if h, n := l.Head(); h != head || n != 4 {
		t.Fatal("another head after a reopen")
	}
	if e, _ := l.Lookup(build(1).Input); e != build(3) {
		t.Fatalf("lookup after a reopen: %+v", e)
	}
	l.Close()
	b, _ := os.ReadFile(path)
	if h, n, err := Verify(b, cited); err != nil || h != head || n != 4 {
		t.Fatal(err)
	}
	// A consistent truncation replays by itself; the cited heads catch it.
	cut := b[:len(b)/2]
	for cut[len(cut)-1] != '\n' {
		cut = cut[:len(cut)-1]
	}
	if _, _, err := Verify(cut, nil); err != nil {
		t.Fatalf("a cut ledger replays by itself: %v", err)
	}
	if _, _, err := Verify(cut, cited); !errors.Is(err, reject.HeadMismatch) {
		t.Fatalf("the cited heads catch the cut: %v", err)
	}
	// An entry without its run, or one that does not parse, is fatal.
	for _, bad := range []string{
		`{"input":"b3:` + fmt.Sprintf("%x", [32]byte{1}) + `","output":"b3:` + fmt.Sprintf("%x", [32]byte{2}) + `","run":"b3:` + fmt.Sprintf("%x", [32]byte{}) + `"}`,
		`{"input":1}`,
	} {
		os.WriteFile(path, append(append([]byte{}, b...), bad+"\n"...), 0o600)
		if _, err := Open(path); err == nil {
			t.Fatalf("opened a ledger ending in %s", bad)
		}
	}
	if _, err := (&Ledger{}).Append(Entry{Input: build(0).Input}); err == nil {
		t.Fatal("appended an entry without output and run")
	}
}

const helperEnv = "SANDBOX_LEDGER_HELPER"

// TestAppendHelper appends build 9 to the ledger at $SANDBOX_LEDGER_HELPER
// when run by TestKilledAtEveryStep.
func TestAppendHelper(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("run by TestKilledAtEveryStep")
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(build(9)); err != nil {
		t.Fatal(err)
	}
}

// kill -9 at every step of an append loses nothing acknowledged: the
// build is there whole or not at all, and the ledger goes on.
func TestKilledAtEveryStep(t *testing.T) {
	for _, point := range crash.LogPoints {
		t.Run(point, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "builds.jsonl")
			l, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			l.Append(build(0))
			l.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^TestAppendHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+path, crash.Env+"="+point)
			out, _ := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the helper was not killed at %s: %v %s", point, cmd.ProcessState, out)
			}
			l, err = Open(path)
			if err != nil {
				t.Fatalf("after kill -9 at %s: %v", point, err)
			}
			defer l.Close()
			if _, n := l.Head(); n != 1 && n != 2 {
				t.Fatalf("%d builds after the crash; 1 was acknowledged", n)
			}
			if _, err := l.Append(build(1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
