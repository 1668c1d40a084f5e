package volumetest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

// Private makes dir, a directory of the test's, a mount point of its own
// that shares no mount events with any other (a private bind mount of
// itself), until the test ends: a mount namespace another process makes
// beside the test (a sandbox of a test in another package) takes a copy
// of what is mounted under it, but as no peer of it, so that an unmount
// here is never refused as busy for that copy's sake. It needs root.
func Private(tb testing.TB, dir string) {
	tb.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		tb.Fatalf("bind %s on itself: %v", dir, err)
	}
	tb.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		tb.Fatalf("make %s private: %v", dir, err)
	}
}

// WhileBusy calls f again while it fails with EBUSY, for up to a minute
// (a bound for a hang, not the time it takes): a loop device whose
// filesystem was just unmounted lets its image go a moment later
// (autoclear), and a sandbox's init lets its copy of the mounts go as it
// ends.
func WhileBusy(f func() error) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		err := f()
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
	}
}
