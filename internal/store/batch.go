package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/safefile"
)

// StagingDir is where batches stage their blobs, in the state directory
// (the blob store's filesystem: a blob is moved into the store, never
// copied).
const StagingDir = "staging"

// Batch stores many blobs with one sync: each is written to a staging
// directory of its own without a sync; Commit makes all of them durable
// at once (one syncfs of the filesystem where the system has it, else a
// sync of each file), then names each under its address in the blob
// store and syncs the store's directory once. No blob is ever visible
// under its address before its bytes are durable. A batch neither
// committed nor aborted (its process killed) leaves its staging
// directory, named by the process's lease (batch-LEASE-N), for gc to
// remove once that process has ended: nothing names what it holds.
//
// A suspension stores its chunks through one (a first suspension of a
// large workspace wrote a thousand chunks with a thousand fsyncs).
type Batch struct {
	s    *Store
	dir  string
	sync *Syncer // opened before anything was staged
	mu   sync.Mutex
	held map[addr.Addr]bool
	done bool
	// Syncs counts the sync calls Commit made (one syncfs, then one
	// directory sync, where the system has syncfs): for benchmarks.
	Syncs int
}

// NewBatch begins a batch of blobs.
func (s *Store) NewBatch() (*Batch, error) {
	dir := s.Path(StagingDir, s.TempName("batch"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sy, err := OpenSyncer(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Batch{s: s, dir: dir, sync: sy, held: map[addr.Addr]bool{}}, nil
}

func (b *Batch) path(a addr.Addr) string { return filepath.Join(b.dir, a.Hex()) }

func (b *Batch) has(a addr.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[a]
}

// HasBlob says whether the store or the batch holds a.
func (b *Batch) HasBlob(a addr.Addr) bool { return b.has(a) || b.s.HasBlob(a) }

// Blob reads a from the batch or the store, checking its address.
func (b *Batch) Blob(a addr.Addr) ([]byte, error) {
	if !b.has(a) {
		return b.s.Blob(a)
	}
	data, err := os.ReadFile(b.path(a))
	if err != nil {
		return nil, err
	}
	if got := addr.Of(data); got != a {
		return nil, fmt.Errorf("blob %s is corrupt in its batch: it hashes to %s", a, got)
	}
	return data, nil
}

// PutBlob stages data under its address a, unless the store or the batch
// has it; bytes that are not a's are refused. Nothing is synced yet.
func (b *Batch) PutBlob(a addr.Addr, data []byte) error {
	if b.HasBlob(a) {
		return nil
	}
	if got := addr.Of(data); got != a {
		return fmt.Errorf("blob %s: the bytes given hash to %s", a, got)
	}
	return b.put(a, data)
}

// PutHashed is PutBlob for a caller that has just computed a from these
// very bytes itself (a capture, which hashes each chunk it reads): they
// are not hashed a second time.
func (b *Batch) PutHashed(a addr.Addr, data []byte) error {
	if b.HasBlob(a) {
		return nil
	}
	return b.put(a, data)
}

func (b *Batch) put(a addr.Addr, data []byte) error {
	f, err := os.CreateTemp(b.dir, ".part-*") // two writers of one blob never meet half-way
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), b.path(a))
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	b.mu.Lock()
	b.held[a] = true
	b.mu.Unlock()
	return nil
}

// Commit makes every staged blob durable, then names each in the store,
// and removes the staging directory. After an error the blobs named so
// far are whole; the rest are left for gc with the directory.
func (b *Batch) Commit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	defer b.sync.Close()
	if len(b.held) == 0 {
		return os.RemoveAll(b.dir)
	}
	names := make([]string, 0, len(b.held))
	for a := range b.held {
		names = append(names, a.Hex())
	}
	n, err := b.sync.Sync(names)
	b.Syncs += n
	if err != nil {
		return fmt.Errorf("store: sync a batch of %d blobs: %w", len(b.held), err)
	}
	blobs := b.s.Path("blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	for a := range b.held {
		if b.s.HasBlob(a) {
			continue
		}
		if err := os.Rename(b.path(a), filepath.Join(blobs, a.Hex())); err != nil {
			return err
		}
	}
	b.Syncs++
	if err := safefile.SyncDir(blobs); err != nil {
		return err
	}
	return os.RemoveAll(b.dir)
}

// Abort drops what the batch staged (a capture that failed).
func (b *Batch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		b.sync.Close()
		os.RemoveAll(b.dir)
	}
}
