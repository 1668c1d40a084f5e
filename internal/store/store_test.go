package store

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/syscalltest"
)

func TestCommitStoresUnderTheAddress(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write("a.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	id := addr.Of([]byte("the attestation"))
	dir, err := p.Commit(id)
	if err != nil {
		t.Fatal(err)
	}
	if dir != s.Path("runs", id.Hex()) {
		t.Fatalf("stored at %s", dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("a.txt: %q %v", b, err)
	}
	p.Abort() // after a commit: nothing to remove
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Abort after Commit removed the run: %v", err)
	}
	ents, _ := os.ReadDir(s.Path("runs"))
	if len(ents) != 1 {
		t.Fatalf("runs/ holds %d entries, want the one run", len(ents))
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	s, _ := Open(t.TempDir())
	p, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	p.Write("x", []byte("y"))
	p.Abort()
	ents, _ := os.ReadDir(s.Path("runs"))
	if len(ents) != 0 {
		t.Fatalf("an aborted run left %v", ents)
	}
	if runs, err := s.Runs(); err != nil || len(runs) != 0 {
		t.Fatalf("Runs: %v %v", runs, err)
	}
}

// Callers that arrive while a directory fsync runs share the next one:
// 1 + 1 rounds for 16 callers, and every caller's change precedes the
// start of a round it waited for.
func TestGroupSyncShares(t *testing.T) {
	var g groupSync
	var rounds atomic.Int32
	var changes atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	var seen []int32 // changes made before each round began
	var mu sync.Mutex
	g.syncDir = func(string) error {
		n := rounds.Add(1)
		mu.Lock()
		seen = append(seen, changes.Load())
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release
		}
		return nil
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		changes.Add(1)
		if err := g.sync("d"); err != nil {
			t.Error(err)
		}
	}()
	<-first
	for range 15 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changes.Add(1)
			if err := g.sync("d"); err != nil {
				t.Error(err)
			}
		}()
	}
	for {
		g.mu.Lock()
		w := g.waiting
		g.mu.Unlock()
		if w == 15 {
			break
		}
		// The 15 are on their way to waiting.
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if n := rounds.Load(); n != 2 {
		t.Fatalf("16 callers took %d fsyncs, want 2 (one running, one shared by the 15 that came during it)", n)
	}
	if seen[1] != 16 {
		t.Fatalf("the shared round began after %d changes, want all 16", seen[1])
	}
}

func TestGroupSyncReportsItsRoundsError(t *testing.T) {
	var g groupSync
	bad := errors.New("disk gone")
	g.syncDir = func(string) error { return bad }
	if err := g.sync("d"); !errors.Is(err, bad) {
		t.Fatalf("got %v", err)
	}
	g.syncDir = func(string) error { return nil }
	if err := g.sync("d"); err != nil {
		t.Fatalf("a later round that succeeded: %v", err)
	}
}

// Run directories made ahead hold the named files; a commit keeps only
// those written; Close removes the unused ones.
func TestReadyDirectories(t *testing.T) {
	s, _ := Open(t.TempDir())
	s.Ready(2, []string{"a", "b", "c"})
	var p *Partial
	for i := 0; i < 200; i++ {
		s.pool.mu.Lock()
		n := len(s.pool.ready)
		s.pool.mu.Unlock()
		if n == 2 {
			break
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	p, err := s.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ready) != 3 {
		t.Fatalf("a directory made ahead holds %d files, want 3", len(p.ready))
	}
	if err := p.Write("a", []byte("A")); err != nil {
		t.Fatal(err)
	}
	f, _ := p.Create("b")
	f.Write([]byte("B"))
	dir, err := p.Commit(addr.Of([]byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 || ents[0].Name() != "a" || ents[1].Name() != "b" {
		t.Fatalf("the run holds %v, want a and b", ents)
	}
	s.Close()
	all, _ := os.ReadDir(s.Path("runs"))
	if len(all) != 1 {
		t.Fatalf("after Close runs/ holds %v, want the one run", all)
	}
	// After Close, Begin still works, without the pool.
	p, err = s.Begin()
	if err != nil || len(p.ready) != 0 {
		t.Fatalf("%v %v", p, err)
	}
	p.Abort()
}

// TestBlobFileMovedInAndRemoved: a file is moved into the store under its
// address (refused under another), and a removed blob is gone; removing
// one that is not there is no error.
func TestBlobFileMovedInAndRemoved(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "memory")
	b := []byte("a memory image")
	os.WriteFile(src, b, 0o600)
	if err := s.PutBlobFile(addr.Of([]byte("other")), src); err == nil {
		t.Fatal("a file stored under an address not its own")
	}
	a := addr.Of(b)
	if err := s.PutBlobFile(a, src); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was not moved: %v", err)
	}
	if got, err := s.Blob(a); err != nil || string(got) != string(b) {
		t.Fatalf("blob: %q %v", got, err)
	}
	if err := s.RemoveBlob(a); err != nil || s.HasBlob(a) {
		t.Fatalf("remove: %v, still there: %v", err, s.HasBlob(a))
	}
	if err := s.RemoveBlob(a); err != nil {
		t.Errorf("removing an absent blob: %v", err)
	}
}

// A run directory of eight files, some made ahead, is made durable and
// named with two sync calls (as the kernel counts them): one syncfs for
// every file and entry, one fsync of runs/ for the name. With much
// waiting to be written back on the machine (another tenant's
// gigabytes), it is an fsync of each file and of the directory instead.
func TestCommitSyncs(t *testing.T) {
	if runtime.GOOS != "linux" || os.Getuid() != 0 {
		t.Skip("counted with perf: Linux, as root")
	}
	for _, c := range []struct {
		name     string
		maxDirty int64
		want     map[string]int
	}{
		// Quiet whatever the machine's state (another test's writes):
		// TestQuietHoldsAfterBusy checks the threshold itself.
		{"syncfs", math.MaxInt64, map[string]int{"syncfs": 1, "fsync": 1}},
		{"busy", -1, map[string]int{"fsync": 8 + 1 + 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(m int64) { maxDirty = m; busySeen.Store(0) }(maxDirty)
			maxDirty = c.maxDirty
			busySeen.Store(0)
			s, _ := Open(t.TempDir())
			s.Ready(1, []string{"a", "b", "c", "d"})
			defer s.Close()
			var dir string
			got, err := syscalltest.Count(syscalltest.Syncs, func() {
				p, err := s.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for i, n := range []string{"a", "b", "c", "e", "f", "g", "h", "i"} {
					if err := p.Write(n, []byte{byte(i)}); err != nil {
						t.Fatal(err)
					}
				}
				if dir, err = p.Commit(addr.Of([]byte("x"))); err != nil {
					t.Fatal(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, c.want) {
				t.Fatalf("a commit made %v, want %v", got, c.want)
			}
			if n := s.Syncs(); n != int64(syscalltest.Total(c.want)) {
				t.Fatalf("the store counted %d syncs, want %d", n, syscalltest.Total(c.want))
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 8 {
				t.Fatalf("the run holds %d files, want 8", len(ents))
			}
		})
	}
}

// TestSyncEachReportsAFailure: where one of many files cannot be synced
// (here: it is not there), each says so, naming it, and does not sync
// the directory as if the files were durable.
func TestSyncEachReportsAFailure(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for i := range 40 {
		n := fmt.Sprintf("f%02d", i)
		if i != 17 {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, n)
	}
	s, err := OpenSyncer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := s.each(names)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "f17") {
		t.Fatalf("each with a file missing: %v", err)
	}
	if n < 1 || n > len(names) {
		t.Fatalf("each made %d syncs of %d files and no directory sync", n, len(names))
	}
	names = slices.Delete(names, 17, 18)
	if n, err := s.each(names); err != nil || n != len(names)+1 {
		t.Fatalf("each of %d files: %d syncs, %v", len(names), n, err)
	}
}

// BenchmarkSyncEach: a run directory's eight small files and the
// directory made durable file by file (the busy machine's way, when a
// syncfs would wait for other tenants' writes), one after another as
// before and several at once (Syncer.each).
func BenchmarkSyncEach(b *testing.B) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	write := func(b *testing.B) string {
		b.StopTimer()
		defer b.StartTimer()
		dir := b.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), make([]byte, 1500), 0o600); err != nil {
				b.Fatal(err)
			}
		}
		return dir
	}
	b.Run("one-after-another", func(b *testing.B) {
		for b.Loop() {
			dir := write(b)
			for _, n := range names {
				if err := syncFile(filepath.Join(dir, n)); err != nil {
					b.Fatal(err)
				}
			}
			d, _ := os.Open(dir)
			d.Sync()
			d.Close()
		}
	})
	b.Run("at-once", func(b *testing.B) {
		for b.Loop() {
			s, err := OpenSyncer(write(b))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.each(names); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}
