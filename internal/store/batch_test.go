package store

import (
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

// A batch's blobs are readable through it at once, in the store only
// once committed, each under its address, with one sync of the
// filesystem and one of the store's directory; bytes that are not their
// address's are refused; what the store has is not staged again.
func TestBatchStoresOnCommit(t *testing.T) {
	// Quiet whatever the machine's state (another test's writes): the
	// two syncs are the quiet path's.
	defer func(m int64) { maxDirty = m; busySeen.Store(0) }(maxDirty)
	maxDirty = math.MaxInt64
	busySeen.Store(0)
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	old := []byte("stored before")
	if err := s.PutBlob(addr.Of(old), old); err != nil {
		t.Fatal(err)
	}
	b, err := s.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	var as []addr.Addr
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 64 {
		data := []byte(fmt.Sprintf("blob %d", i%32)) // each twice, at once
		a := addr.Of(data)
		wg.Go(func() {
			if err := b.PutBlob(a, data); err != nil {
				t.Error(err)
			}
			mu.Lock()
			as = append(as, a)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := b.PutBlob(addr.Of(old), old); err != nil {
		t.Fatal(err)
	}
	if err := b.PutBlob(addr.Of([]byte("x")), []byte("y")); err == nil {
		t.Fatal("bytes that are not their address's were staged")
	}
	for _, a := range as {
		if s.HasBlob(a) {
			t.Fatalf("%s is in the store before the commit", a)
		}
		if !b.HasBlob(a) {
			t.Fatalf("%s is not in the batch", a)
		}
		if _, err := b.Blob(a); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := b.Blob(addr.Of(old)); err != nil || string(got) != string(old) {
		t.Fatalf("the store's blob through the batch: %q %v", got, err)
	}
	if len(b.held) != 32 {
		t.Fatalf("%d blobs staged, want 32 (the store's one and repeats are not)", len(b.held))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if got, err := s.Blob(a); err != nil || addr.Of(got) != a {
			t.Fatalf("%s after the commit: %v", a, err)
		}
	}
	if runtime.GOOS == "linux" && b.Syncs != 2 {
		t.Fatalf("%d syncs for 32 blobs, want 2 (one syncfs, one directory)", b.Syncs)
	}
	if ents, _ := os.ReadDir(s.Path(StagingDir)); len(ents) != 0 {
		t.Fatalf("left in staging: %v", ents)
	}
	if err := b.Commit(); err != nil {
		t.Fatalf("a second commit: %v", err)
	}
}

// An aborted batch leaves nothing, in the store or beside it.
func TestBatchAbortLeavesNothing(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("dropped")
	if err := b.PutBlob(addr.Of(data), data); err != nil {
		t.Fatal(err)
	}
	b.Abort()
	if s.HasBlob(addr.Of(data)) {
		t.Fatal("an aborted batch's blob is in the store")
	}
	if ents, _ := os.ReadDir(s.Path(StagingDir)); len(ents) != 0 {
		t.Fatalf("left in staging: %v", ents)
	}
	if err := b.Commit(); err != nil || s.HasBlob(addr.Of(data)) {
		t.Fatalf("a commit after the abort: %v", err)
	}
}

// BenchmarkStoreChunks stores 1 GiB of 1 MiB chunks, as a first
// suspension does, one sync per chunk (PutBlob) against one batch, with
// cp -a of the same files and a sync beside them.
func BenchmarkStoreChunks(b *testing.B) {
	const chunk, n = 1 << 20, 1024
	src := b.TempDir()
	buf := make([]byte, chunk)
	var names []string
	for i := range n {
		rand.Read(buf)
		p := filepath.Join(src, fmt.Sprintf("c%04d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		names = append(names, p)
	}
	exec.Command("sync").Run()
	read := func(b *testing.B) [][]byte {
		out := make([][]byte, n)
		for i, p := range names {
			d, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = d
		}
		return out
	}
	b.Run("put-each-synced", func(b *testing.B) {
		for b.Loop() {
			s, _ := Open(b.TempDir())
			for _, d := range read(b) {
				if err := s.PutBlob(addr.Of(d), d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			s, _ := Open(b.TempDir())
			bt, err := s.NewBatch()
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range read(b) {
				if err := bt.PutBlob(addr.Of(d), d); err != nil {
					b.Fatal(err)
				}
			}
			if err := bt.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cp-a+sync", func(b *testing.B) {
		for b.Loop() {
			dst := filepath.Join(b.TempDir(), "copy")
			if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			exec.Command("sync").Run()
		}
	})
}
