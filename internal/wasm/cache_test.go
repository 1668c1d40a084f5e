package wasm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/fuel"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// warnings collects an executor's warnings.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) add(m string) { w.mu.Lock(); w.msgs = append(w.msgs, m); w.mu.Unlock() }
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// process is one sandbox process: a fresh executor on a shared cache.
func process(t *testing.T, dir string, key [32]byte, w *warnings) *Executor {
	t.Helper()
	e, err := New(Config{CacheDir: dir, CacheKey: key, Warn: w.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func runOn(t *testing.T, e *Executor, image []byte, args ...string) string {
	t.Helper()
	g, _ := grant.ParseArgs([]string{"cpu:50J"}, "/")
	u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(image), Entry: "guest.wasm", Args: append([]string{"guest.wasm"}, args...)}
	var out, errb bytes.Buffer
	res, err := e.Run(context.Background(), &executor.Job{Unit: u, Image: image, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: time.Minute})
	if err != nil || res.Outcome.ExitCode == nil || *res.Outcome.ExitCode != 0 {
		t.Fatalf("%v %+v %s", err, res, errb.String())
	}
	return out.String()
}

// TestCacheRewriteIsDiscarded plays a guest that reached the caches: it
// replaces the cached instrumentation of one module with another
// module's, and rewrites, plants and strips entries of the compiled-code
// cache. The next process runs the right code, discards every changed
// entry with a warning, and compiles again.
func TestCacheRewriteIsDiscarded(t *testing.T) {
	dir, key := t.TempDir(), [32]byte{7}
	// The C programs: the caches are under test, and their modules compile
	// in a moment each time a process starts with an empty cache.
	hello, cat := cGuest(t, "hello"), cGuest(t, "cat")
	var w warnings
	first := process(t, dir, key, &w)
	if out := runOn(t, first, hello, "cache"); out != "hello, cache\n" {
		t.Fatalf("first run: %q", out)
	}
	runOn(t, first, cat)
	if m := w.take(); len(m) != 0 {
		t.Fatalf("warnings on a clean cache: %v", m)
	}
	// A clean cache is used as it is by the next process.
	runOn(t, process(t, dir, key, &w), hello, "again")
	if m := w.take(); len(m) != 0 {
		t.Fatalf("warnings on an untouched cache: %v", m)
	}

	// The instrumentation of hello becomes cat's.
	ha, ca := addr.Of(hello), addr.Of(cat)
	hp := filepath.Join(dir, "instrumented", fuel.Version+"-"+ha.Hex()+".wasm")
	catInst, err := os.ReadFile(filepath.Join(dir, "instrumented", fuel.Version+"-"+ca.Hex()+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hp, catInst, 0o600); err != nil {
		t.Fatal(err)
	}
	// Compiled entries: one rewritten, one with its sidecar gone, one planted.
	e := process(t, dir, key, &w)
	entries, err := e.sealed.entries()
	if err != nil || len(entries) < 2 {
		t.Fatalf("compiled entries: %v %v", entries, err)
	}
	b, _ := os.ReadFile(entries[0])
	b[len(b)/2] ^= 0xff
	os.WriteFile(entries[0], b, 0o600)
	os.Remove(entries[1] + ".mac")
	planted := filepath.Join(filepath.Dir(entries[0]), strings.Repeat("ab", 32))
	os.WriteFile(planted, []byte("machine code the guest wrote"), 0o600)

	if out := runOn(t, e, hello, "after"); out != "hello, after\n" {
		t.Fatalf("a rewritten cache ran other code: %q", out)
	}
	got := strings.Join(w.take(), "\n")
	for _, want := range []string{"discarded the cached instrumentation " + hp, "discarded the compiled-code cache entry " + entries[0],
		"discarded the compiled-code cache entry " + entries[1], "discarded the compiled-code cache entry " + planted} {
		if !strings.Contains(got, want) {
			t.Errorf("no warning %q in:\n%s", want, got)
		}
	}
	if _, err := os.Stat(planted); err == nil {
		t.Error("the planted entry is still there")
	}
	// What was compiled again is sealed: the next process is quiet.
	runOn(t, process(t, dir, key, &w), hello, "quiet")
	runOn(t, process(t, dir, key, &w), cat)
	if m := w.take(); len(m) != 0 {
		t.Fatalf("warnings after recompiling: %v", m)
	}
	// Another host's key (or none) does not trust this cache.
	runOn(t, process(t, dir, [32]byte{8}, &w), hello, "other")
	if m := w.take(); len(m) == 0 {
		t.Fatal("a cache sealed under another key was used without a word")
	}
	if _, err := New(Config{CacheDir: dir}); err == nil {
		t.Fatal("a cache directory without a key was accepted")
	}
}

// FuzzSidecar: a sidecar is bytes anyone who reached the cache could
// have written: decoding never panics, accepts only what this key
// encoded, and gives back what was encoded.
func FuzzSidecar(f *testing.F) {
	c := &compiledCache{key: [32]byte{3}}
	good := c.encode(entryID{ino: 7, size: 4096, ctime: 1700000000123456789}, [32]byte{9})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("SBXC1\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, sum, ok := c.decode(b)
		if !ok {
			return
		}
		if !bytes.Equal(c.encode(id, sum), b) {
			t.Fatalf("decoded %x as %+v %x, which encodes otherwise", b, id, sum)
		}
	})
}
