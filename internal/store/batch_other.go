//go:build !linux

package store

import (
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/internal/safefile"
)

// SyncStaged makes the files names in dir (and dir's entries) durable,
// one fsync each and one of dir (where there is no syncfs), and says
// how many sync calls it made.
func SyncStaged(dir string, names []string) (int, error) {
	n := 0
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
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
	return n + 1, safefile.SyncDir(dir)
}
