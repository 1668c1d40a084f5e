package kv

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/internal/safefile"
)

// Limits.
const (
	MaxKey   = 512
	MaxValue = 1 << 20
)

// Errors.
var (
	ErrNotFound = errors.New("kv: no such key")
	ErrTooLarge = errors.New("kv: key or value too large")
)

// Store is a file-backed key-value store.
type Store struct {
	root string
}

// Open returns the store rooted at dir, creating it if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	return &Store{root: dir}, nil
}

func (s *Store) path(ns string, key []byte) (string, error) {
	if len(key) == 0 || len(key) > MaxKey {
		return "", fmt.Errorf("%w: key of %d bytes (1 to %d)", ErrTooLarge, len(key), MaxKey)
	}
	if ns == "" || ns == "." || ns == ".." || filepath.Base(ns) != ns {
		return "", fmt.Errorf("kv: bad namespace %q", ns)
	}
	return filepath.Join(s.root, ns, hex.EncodeToString(key)), nil
}

// Get returns the value of key in namespace ns.
func (s *Store) Get(ns string, key []byte) ([]byte, error) {
	p, err := s.path(ns, key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

// Put stores value under key, durably.
func (s *Store) Put(ns string, key, value []byte) error {
	if len(value) > MaxValue {
		return fmt.Errorf("%w: value of %d bytes (at most %d)", ErrTooLarge, len(value), MaxValue)
	}
	p, err := s.path(ns, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return safefile.Write(p, value, 0o600)
}

// Delete removes key; deleting a missing key is ErrNotFound.
func (s *Store) Delete(ns string, key []byte) error {
	p, err := s.path(ns, key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); errors.Is(err, os.ErrNotExist) {
		return ErrNotFound
	} else if err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return safefile.SyncDir(filepath.Dir(p))
}
