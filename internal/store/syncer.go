package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Syncer makes the files written in one directory durable at once: one
// syncfs of their filesystem where the system has it (Linux), else an
// fsync of each and of the directory. Open it before anything is
// written in the directory: the kernel reports a write-back error to a
// sync only through a descriptor opened before the error, so one
// opened at the end could miss an error met while the files were
// written, and call them durable.
type Syncer struct {
	d *os.File
}

// OpenSyncer opens dir for a later Sync.
func OpenSyncer(dir string) (*Syncer, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return &Syncer{d: d}, nil
}

// Sync makes names (files in the directory) and the directory's entries
// durable, and says how many sync calls it made.
func (s *Syncer) Sync(names []string) (int, error) {
	n, err := s.sync(names)
	if err != nil {
		return n, fmt.Errorf("sync %s: %w", s.d.Name(), err)
	}
	return n, nil
}

// Close closes the directory (not syncing anything).
func (s *Syncer) Close() error { return s.d.Close() }

// syncsAtOnce bounds how many files each syncs at the same time.
const syncsAtOnce = 16

// each fsyncs every named file, several at once, and then the directory.
// A journalling filesystem commits the syncs that wait together in one
// transaction: on ext4 here, eight small files took 4.3 ms synced one
// after another and 1.6 ms at once (BenchmarkSyncEach).
func (s *Syncer) each(names []string) (int, error) {
	var (
		next, made atomic.Int64
		mu         sync.Mutex
		first      error
		wg         sync.WaitGroup
	)
	for range min(len(names), syncsAtOnce) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) {
					return
				}
				made.Add(1)
				if err := syncFile(filepath.Join(s.d.Name(), names[i])); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(len(names))) // the others stop
					return
				}
			}
		}()
	}
	wg.Wait()
	n := int(made.Load())
	if first != nil {
		return n, first
	}
	if err := s.d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return n + 1, err
	}
	return n + 1, nil
}

// syncFile fsyncs the file at p.
func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	return err
}
