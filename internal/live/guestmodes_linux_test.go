package live

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFoldGuestModes: an S5 workspace's files take, on the host, the
// permission bits its guest gave them (QEMU keeps them in an attribute):
// an executable stays one across a capture; set-id and sticky bits never
// reach the host's file; a file without the attribute, and a link, are
// left as they are.
func TestFoldGuestModes(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	mode := func(p string, m uint32) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], m)
		if err := unix.Setxattr(p, virtfsMode, b[:], 0); err != nil {
			t.Skipf("no user extended attributes here: %v", err)
		}
	}
	for _, f := range []string{"exec", "setuid", "plain"} {
		os.WriteFile(filepath.Join(ws, f), []byte(f), 0o600)
	}
	os.Mkdir(filepath.Join(ws, "d"), 0o700)
	mode(filepath.Join(ws, "exec"), unix.S_IFREG|0o755)
	mode(filepath.Join(ws, "setuid"), unix.S_IFREG|unix.S_ISUID|0o4755)
	mode(filepath.Join(ws, "d"), unix.S_IFDIR|0o755)
	os.Symlink("/etc/passwd", filepath.Join(ws, "link"))
	if err := foldGuestModes(ws); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"exec": 0o755, "setuid": 0o755, "plain": 0o600, "d": 0o755 | os.ModeDir} {
		fi, err := os.Lstat(filepath.Join(ws, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	if fi, _ := os.Stat("/etc/passwd"); fi.Mode().Perm() != 0o644 {
		t.Fatalf("a link was followed: /etc/passwd is %v", fi.Mode())
	}
}
