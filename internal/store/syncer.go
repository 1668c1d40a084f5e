package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// each fsyncs every named file and then the directory.
func (s *Syncer) each(names []string) (int, error) {
	n := 0
	for _, name := range names {
		f, err := os.Open(filepath.Join(s.d.Name(), name))
		if err != nil {
			return n, err
		}
		err = f.Sync()
		f.Close()
		n++
		if err != nil {
			return n, err
		}
	}
	if err := s.d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return n + 1, err
	}
	return n + 1, nil
}
