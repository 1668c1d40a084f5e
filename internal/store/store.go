package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/kv"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/key"
)

// Store is an opened state directory.
type Store struct {
	Dir *state.Dir
	// Lease names what this process makes (partial run directories,
	// roots, cgroups); nil gives random names that nothing collects.
	Lease *state.Lease
	// Index lists runs and records without reading them; nil: runs are
	// listed by a scan of their directories.
	Index Index

	kvOnce sync.Once
	kv     *kv.Store
	kvErr  error

	commit groupSync // fsyncs of runs/
	syncs  atomic.Int64
	pool   pool
}

// Open opens (making it, mode 0700) the state directory at root.
func Open(root string) (*Store, error) {
	d, err := state.Open(root)
	if err != nil {
		return nil, err
	}
	return Of(d), nil
}

// Of wraps an opened state directory.
func Of(d *state.Dir) *Store { return &Store{Dir: d} }

// Root is the state directory's path.
func (s *Store) Root() string { return s.Dir.Root }

// Path is a path inside the state directory.
func (s *Store) Path(elem ...string) string { return s.Dir.Path(elem...) }

// Key is the host key, made from rand on first use.
func (s *Store) Key(rand io.Reader) (key.Private, error) { return s.Dir.HostKey(rand) }

// TakeLease takes this process's lease, once.
func (s *Store) TakeLease() (*state.Lease, error) {
	if s.Lease != nil {
		return s.Lease, nil
	}
	l, err := s.Dir.Lease()
	if err != nil {
		return nil, err
	}
	s.Lease = l
	return l, nil
}

// TempName names a temporary thing with the lease, or (without one)
// randomly, as nothing will collect it.
func (s *Store) TempName(prefix string) string {
	if s.Lease != nil {
		return s.Lease.Name(prefix)
	}
	var b [8]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Namer is TempName as the executors take it (nil without a lease).
func (s *Store) Namer() func(string) string {
	if s.Lease == nil {
		return nil
	}
	return s.Lease.Name
}

// CacheDir holds compiled-code caches.
func (s *Store) CacheDir() string { return s.Path("cache") }

// KV is the key-value store, opened once.
func (s *Store) KV() (*kv.Store, error) {
	s.kvOnce.Do(func() { s.kv, s.kvErr = kv.Open(s.Path("kv")) })
	return s.kv, s.kvErr
}

// PutBlob stores b under its address a, once; bytes that are not a's are
// refused.
func (s *Store) PutBlob(a addr.Addr, b []byte) error {
	p := s.Path("blobs", a.Hex())
	if _, err := os.Stat(p); err == nil {
		return nil // stored, and checked when it was
	}
	if got := addr.Of(b); got != a {
		return fmt.Errorf("blob %s: the bytes given hash to %s", a, got)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if err := safefile.Create(p, b, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// PutBlobFile stores the file at path under its address a, once, moving
// it into the store (a memory image is too large to hold in memory); a
// file that does not hash to a is refused.
func (s *Store) PutBlobFile(a addr.Addr, path string) error {
	p := s.Path("blobs", a.Hex())
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	got, err := addr.OfFile(path)
	if err != nil {
		return err
	}
	if got != a {
		return fmt.Errorf("blob %s: the file given hashes to %s", a, got)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if err := os.Rename(path, p); err != nil {
		return err
	}
	return safefile.SyncDir(filepath.Dir(p))
}

// RemoveBlob removes the blob at address a, which no record may name: a
// caller removes only what it stored itself and never recorded (a
// suspension's memory image when the suspension failed after storing it),
// or what a cluster's collector found no sandbox or job names
// (Collectable).
func (s *Store) RemoveBlob(a addr.Addr) error {
	p := s.Path("blobs", a.Hex())
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return safefile.SyncDir(filepath.Dir(p))
}

// HasBlob says whether content with address a is stored.
func (s *Store) HasBlob(a addr.Addr) bool {
	_, err := os.Stat(s.Path("blobs", a.Hex()))
	return err == nil
}

// BlobInto is Blob reading into buf where it is large enough (a restore
// reads a thousand 1 MiB chunks into one buffer, not into a thousand).
func (s *Store) BlobInto(a addr.Addr, buf []byte) ([]byte, error) {
	f, err := os.Open(s.Path("blobs", a.Hex()))
	if err != nil {
		return nil, fmt.Errorf("image %s is not in the blob store: %w", a, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := fi.Size()
	if int64(cap(buf)) < n+1 {
		buf = make([]byte, n+1)
	}
	m, err := io.ReadFull(f, buf[:n+1]) // one byte more: a file that grew is read whole or refused
	if err != io.ErrUnexpectedEOF && err != nil {
		return nil, fmt.Errorf("blob %s: %w", a, err)
	}
	if int64(m) != n {
		return nil, fmt.Errorf("blob %s changed while it was read", a)
	}
	b := buf[:n]
	if got := addr.Of(b); got != a {
		return nil, fmt.Errorf("blob %s is corrupt: it hashes to %s", a, got)
	}
	return b, nil
}

// Blob returns stored content, checking its address.
//
// Only a regular file is read, without following a link and without
// waiting on it: a directory others write too (a cluster's, file:///DIR)
// could hold a FIFO, a device or a link to one under a blob's name.
func (s *Store) Blob(a addr.Addr) ([]byte, error) {
	f, err := os.OpenFile(s.Path("blobs", a.Hex()), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("image %s is not in the blob store: %w", a, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("blob %s: %w: not a regular file (%s)", a, ErrCorrupt, fi.Mode().Type())
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", a, err)
	}
	if got := addr.Of(b); got != a {
		return nil, fmt.Errorf("blob %s is corrupt: %w: it hashes to %s", a, ErrCorrupt, got)
	}
	return b, nil
}
