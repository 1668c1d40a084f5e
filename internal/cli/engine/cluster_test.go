package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/store"
)

// TestGCRefusesAStateDirectory: a host's state directory named as a
// cluster's file:// blob store is refused before anything is collected
// (its blobs are its own records' too); a shared directory is not.
func TestGCRefusesAStateDirectory(t *testing.T) {
	shared := t.TempDir()
	if _, err := store.Open(shared); err != nil {
		t.Fatal(err)
	}
	if err := notAStateDir("file://" + shared); err != nil {
		t.Fatalf("a shared blob directory: %v", err)
	}
	for _, n := range []string{"host.key", "runs", "index.db"} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := notAStateDir("file://" + d); err == nil || !strings.Contains(err.Error(), n) {
			t.Errorf("a directory holding %s: %v", n, err)
		}
	}
	if err := notAStateDir("s3://bucket?endpoint=http://127.0.0.1:1"); err != nil {
		t.Fatalf("an S3 store: %v", err)
	}
}
