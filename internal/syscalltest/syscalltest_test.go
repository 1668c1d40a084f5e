package syscalltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Count sees the calls made, in this process and in a child, and only
// those asked for.
func TestCountSeesSyncs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("counting with perf needs root here")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Count(Syncs, func() {
		for range 7 {
			f.Sync()
		}
		f.Stat()
		if err := exec.Command("sync").Run(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["fsync"] != 7 || got["sync"] != 1 || Total(got) != 8 {
		t.Fatalf("counted %v, want 7 fsyncs here, the child's sync and nothing else", got)
	}
}
