package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/key"
)

// sandbox manifest as a user runs it: a real devcontainer.json taken and
// signed, one refused with every field named and exit 2.
func TestManifestCommand(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	corpus := filepath.Join("..", "..", "internal", "manifest", "testdata", "corpus")
	signed := filepath.Join(t.TempDir(), "m.json")
	out, e, code := sandbox(t, home, "manifest", "-o", signed, filepath.Join(corpus, "try-dotnet-10.json"))
	if code != 0 || !strings.HasPrefix(out, "b3:") || !strings.Contains(out, "not pinned") {
		t.Fatalf("%d %s %s", code, out, e)
	}
	d, _ := state.Open(home)
	k, _ := d.HostKey(nil)
	b, _ := os.ReadFile(signed)
	s, err := manifest.Verify(b, key.NewTrust(k.Public()))
	if err != nil || !strings.HasPrefix(out, s.Addr.String()) {
		t.Fatalf("the signed manifest: %v", err)
	}
	_, e, code = sandbox(t, home, "manifest", filepath.Join(corpus, "bustub.json"))
	if code != 2 || !strings.Contains(e, "runArgs:") || !strings.Contains(e, "postCreateCommand:") {
		t.Fatalf("a refused file: %d %s", code, e)
	}
}
