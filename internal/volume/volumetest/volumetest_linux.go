package volumetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// XFS mounts a new XFS filesystem of size bytes (sparse) on a directory
// of the test's and returns it; it is unmounted and removed when the test
// ends. It needs root and mkfs.xfs (xfsprogs, which scripts/deps
// installs): without root the test is skipped, without mkfs.xfs it fails.
func XFS(tb testing.TB, size int64) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("mounting a filesystem needs root")
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		if mkfs, err = exec.LookPath("/usr/sbin/mkfs.xfs"); err != nil {
			tb.Fatal("no mkfs.xfs: scripts/deps installs xfsprogs")
		}
	}
	base := tb.TempDir()
	img, dir := filepath.Join(base, "xfs.img"), filepath.Join(base, "xfs")
	f, err := os.Create(img)
	if err != nil {
		tb.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		tb.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		tb.Fatalf("mount an XFS image: %v: %s", err, out)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// Free is the bytes free on the filesystem holding dir.
func Free(tb testing.TB, dir string) int64 {
	tb.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
