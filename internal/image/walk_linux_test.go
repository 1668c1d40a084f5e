package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWalkIsTheKernels: Walk opens what the run's kernel would open, and
// refuses what it would refuse: a name after a file (a trailing slash,
// ".", ".." included) is ENOTDIR, links resolve inside the root, and the
// stop function sees every path on the way, told when a link led there.
func TestWalkIsTheKernels(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "app"), 0o755)
	os.WriteFile(filepath.Join(root, "bin", "sh"), []byte("sh"), 0o755)
	for link, to := range map[string]string{"app/abs": "/bin/sh", "app/up": "../../../bin/sh", "app/slash": "/bin/sh/", "app/dir": "/bin", "app/loop": "/app/loop"} {
		os.Symlink(to, filepath.Join(root, link))
	}
	none := func(string, bool) error { return nil }
	for _, p := range []string{"/bin/sh", "/app/abs", "/app/up", "/app/dir/sh", "/app/../bin/./sh", "/../bin/sh"} {
		f, err := Walk(root, p, none)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "sh" {
			t.Errorf("%s: read %q", p, b)
		}
	}
	for p, want := range map[string]error{"/bin/sh/": unix.ENOTDIR, "/bin/sh/.": unix.ENOTDIR, "/bin/sh/../sh": unix.ENOTDIR, "/app/slash": unix.ENOTDIR, "/app/loop": unix.ELOOP, "/bin/nothing": fs.ErrNotExist} {
		if f, err := Walk(root, p, none); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", p, err, want)
			if f != nil {
				f.Close()
			}
		}
	}
	var seen []string
	stop := errors.New("stop")
	_, err := Walk(root, "/app/dir/sh", func(at string, linked bool) error {
		seen = append(seen, fmt.Sprintf("%s %v", at, linked))
		if at == "/bin/sh" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || strings.Join(seen, " ") != "/app false /app/dir false /bin true /bin/sh true" {
		t.Fatalf("the steps asked: %v (%v)", seen, err)
	}
}
