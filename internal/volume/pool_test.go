package volume

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/volume/volumetest"
)

// A pool made beside a directory whose filesystem has no reflinks (the
// test's temporary directory: ext4 or tmpfs here) shares extents: a
// volume made in it is copied by Snapshot and MakeFrom, each side's
// writes its own. Its image is sparse and gets back the blocks of what
// is deleted in it (discard). Made again, it is the one mounted; after
// its unmount (a restart of the machine), Attach of a volume in it mounts
// it again first, holding what was written. A directory where another
// filesystem is mounted, or that holds files, names another user made
// first (an image, a directory, a link), and a size above what is free
// under it are refused; ReleasePool leaves nothing.
func TestPoolSharesExtentsOnAnyFilesystem(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	if _, err := xfsFormatter(); err != nil {
		t.Fatal(err, "(scripts/deps installs xfsprogs)")
	}
	base := t.TempDir()
	volumetest.Private(t, base) // its unmounts below, a restart's, never busy for a copy elsewhere
	pool := filepath.Join(base, "pool")
	if err := Pool(pool, 1<<20); err == nil {
		t.Fatal("a pool under MinPool was made")
	}
	// Two makers at once: one makes it, the other uses it.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- Pool(pool, 2<<30) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := ReleasePool(pool); err != nil {
			unix.Unmount(pool, unix.MNT_DETACH)
		}
	})
	var st syscall.Stat_t
	if err := syscall.Stat(Image(pool), &st); err != nil || st.Blocks*512 > 256<<20 {
		t.Fatalf("the pool's image takes %d bytes on disk: not sparse (%v)", st.Blocks*512, err)
	}
	if ms, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Count(ms, []byte(" "+pool+" ")) != 1 {
		t.Fatalf("the pool is mounted %d times", bytes.Count(ms, []byte(" "+pool+" ")))
	}
	// Read and written directly, where the filesystem under it can (ext4
	// and XFS can; the test's temporary directory is one or the other
	// here, else this is not checked).
	var fs unix.Statfs_t
	unix.Statfs(base, &fs)
	if fs.Type == unix.EXT4_SUPER_MAGIC || fs.Type == unix.XFS_SUPER_MAGIC {
		backs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		dio := ""
		for _, b := range backs {
			if p, _ := os.ReadFile(b); strings.TrimSpace(string(p)) == Image(pool) {
				d, _ := os.ReadFile(filepath.Join(filepath.Dir(b), "dio"))
				dio = strings.TrimSpace(string(d))
			}
		}
		if dio != "1" {
			t.Fatalf("the pool's loop device reads its image through the page cache (dio %q)", dio)
		}
	}
	a, b := filepath.Join(pool, "a"), filepath.Join(pool, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := Make(a, 256<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(a) })
	data := make([]byte, 32<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(a, "data"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(pool, "snap.img")
	if err := Snapshot(a, img); err != nil {
		t.Fatalf("a snapshot in a pool: %v", err)
	}
	if err := MakeFrom(b, img); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(b) })
	if got, err := os.ReadFile(filepath.Join(b, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy's data: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(b, "data"), []byte("the copy's own"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(a, "data")); !bytes.Equal(got, data) {
		t.Fatal("a write to the copy reached the original")
	}

	// What is deleted in the pool is given back to the filesystem under
	// it (online discard, issued once the deletion is committed).
	big := filepath.Join(pool, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte{1}, 128<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	syncfs(t, pool)
	syscall.Stat(Image(pool), &st)
	held := st.Blocks * 512
	os.Remove(big)
	syncfs(t, pool)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		syscall.Stat(Image(pool), &st)
		if held-st.Blocks*512 >= 64<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 128 MiB file deleted in the pool: its image went from %d to %d bytes on disk", held, st.Blocks*512)
		}
	}

	if err := Pool(pool, 0); err != nil {
		t.Fatalf("the pool made again, where it is mounted: %v", err)
	}
	// The machine restarted: nothing mounted, the images kept.
	for _, d := range []string{b, a, pool} {
		unmount(t, d)
	}
	if p, err := poolOf(a); p != pool || err != nil {
		t.Fatalf("poolOf(%s) = %q, %v", a, p, err)
	}
	if ok, err := Attach(a); err != nil || !ok {
		t.Fatalf("a volume in an unmounted pool attached: %v %v", ok, err)
	}
	if got, err := os.ReadFile(filepath.Join(a, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the pool and the volume were mounted again: %d bytes, %v", len(got), err)
	}
	if ok, err := Attach(b); err != nil || !ok {
		t.Fatalf("the copy attached: %v %v", ok, err)
	}
	if got, _ := os.ReadFile(filepath.Join(b, "data")); string(got) != "the copy's own" {
		t.Fatalf("the copy after a restart: %q", got)
	}

	// Refused: another filesystem mounted there, or files.
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o755)
	// Its root root's, 0755: refused as no pool, not for its mode.
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(other, unix.MNT_DETACH) })
	if err := Pool(other, 0); err == nil || !strings.Contains(err.Error(), "not a volume pool") {
		t.Fatalf("a pool on a tmpfs mount point: %v", err)
	}
	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o600)
	if err := Pool(full, 0); err == nil {
		t.Fatal("a pool on a directory holding a file")
	}
	if _, err := os.Stat(Image(full)); !os.IsNotExist(err) {
		t.Fatalf("a refused pool left an image: %v", err)
	}
	// Names another user made first, where anyone may write: an XFS
	// image of theirs (mounted, their filesystem would hold the
	// workspaces), one of root's that others may read, a directory of
	// theirs, a link for the lock. None is mounted or followed.
	mkfsXFS := func(img string) {
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(MinPool)
		f.Close()
		mk, _ := xfsFormatter()
		if out, err := exec.Command(mk, "-q", "-f", "-m", "reflink=1", "-s", "size=4096", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.xfs: %v: %s", err, out)
		}
	}
	theirs := filepath.Join(base, "theirs")
	mkfsXFS(Image(theirs))
	os.Chown(Image(theirs), 65534, 65534)
	readable := filepath.Join(base, "readable")
	mkfsXFS(Image(readable))
	os.Chmod(Image(readable), 0o644)
	// A pool image of root's beside each of these: what refuses them is
	// the name another user made.
	theirDir := filepath.Join(base, "their-dir")
	os.Mkdir(theirDir, 0o755)
	os.Chown(theirDir, 65534, 65534)
	mkfsXFS(Image(theirDir))
	os.Chmod(Image(theirDir), 0o600)
	linked := filepath.Join(base, "linked")
	os.Symlink(filepath.Join(base, "elsewhere"), linked+".lock")
	mkfsXFS(Image(linked))
	os.Chmod(Image(linked), 0o600)
	for _, d := range []string{theirs, readable, theirDir, linked} {
		for _, f := range []func(string) error{func(d string) error { return Pool(d, 0) }, MountPool} {
			if err := f(d); err == nil || mounted(d) {
				t.Fatalf("a pool made or mounted at %s, whose names another user made first: %v", d, err)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "elsewhere")); !os.IsNotExist(err) {
		t.Fatalf("the lock's link was followed: %v", err)
	}
	if b, _ := exec.Command("losetup", "-j", Image(theirs)).Output(); len(b) > 0 {
		t.Fatalf("another user's image is on a loop device: %s", b)
	}
	// A pool larger than what is free under it, whose writes would fail
	// once that is used, is refused.
	small := filepath.Join(base, "small")
	os.Mkdir(small, 0o755)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=700m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	if err := Pool(filepath.Join(small, "pool"), 1<<30); err == nil {
		t.Fatal("a 1 GiB pool made where 700 MiB are free")
	}
	if err := Pool(filepath.Join(small, "pool"), 0); err == nil {
		t.Fatal("an auto pool made where what is free, less the reserve, is under MinPool")
	}
	if _, err := os.Stat(Image(filepath.Join(small, "pool"))); !os.IsNotExist(err) {
		t.Fatalf("a refused pool left its image: %v", err)
	}
	if err := MountPool(filepath.Join(base, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("MountPool where no pool was made: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(base, "none")); !os.IsNotExist(err) {
		t.Fatalf("MountPool where no pool was made left %v", err)
	}

	if err := ReleasePool(pool); err == nil {
		t.Fatal("a pool with volumes mounted in it released")
	}
	for _, d := range []string{b, a} {
		if err := Release(d); err != nil {
			t.Fatal(err)
		}
	}
	// Their loop devices may still hold their images open for a moment.
	if err := volumetest.WhileBusy(func() error { return ReleasePool(pool) }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pool, Image(pool), pool + ".lock"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", p, err)
		}
	}
}

// unmount unmounts dir, trying again while it is busy
// (volumetest.WhileBusy): a loop device whose filesystem was just
// unmounted lets its image (in dir) go a moment later.
func unmount(t *testing.T, dir string) {
	t.Helper()
	if err := volumetest.WhileBusy(func() error { return unix.Unmount(dir, 0) }); err != nil {
		t.Fatalf("unmount %s: %v", dir, err)
	}
}

func syncfs(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

// After a restart that emptied the temporary directory, another user
// may make a workspace's directory and image first: Attach mounts
// neither an image of theirs nor one on a directory of theirs, and says
// the volume is not there (false, no error: it is gone); an image of
// root's with another name (a hard link) or of another kind is an error
// (it may hold a workspace), and nothing is mounted. A volume whose
// directory alone is gone is mounted on a new one.
func TestAttachRefusesWhatAnotherUserMade(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	volumetest.Private(t, base)
	theirs := filepath.Join(base, "theirs")
	os.Mkdir(theirs, 0o700)
	if err := Make(theirs, MinSize); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(theirs, "planted"), []byte("x"), 0o644)
	unmount(t, theirs)
	t.Cleanup(func() { Release(theirs) })
	// An image of theirs.
	os.Chown(Image(theirs), 65534, 65534)
	if ok, err := Attach(theirs); err != nil || ok || mounted(theirs) {
		t.Fatalf("another user's image: %v %v, want false and no error, nothing mounted", ok, err)
	}
	// Root's image, with a second name.
	os.Chown(Image(theirs), 0, 0)
	if err := os.Link(Image(theirs), filepath.Join(base, "second")); err != nil {
		t.Fatal(err)
	}
	if ok, err := Attach(theirs); err == nil || ok || mounted(theirs) {
		t.Fatalf("an image with two names: %v %v, want an error", ok, err)
	}
	os.Remove(filepath.Join(base, "second"))
	// Root's image, readable by others.
	os.Chmod(Image(theirs), 0o644)
	if ok, err := Attach(theirs); err == nil || ok || mounted(theirs) {
		t.Fatalf("an image others may read: %v %v, want an error", ok, err)
	}
	os.Chmod(Image(theirs), 0o600)
	// A directory of theirs.
	os.Chown(theirs, 65534, 65534)
	if ok, err := Attach(theirs); err != nil || ok || mounted(theirs) {
		t.Fatalf("a volume on another user's directory: %v %v, want false and no error", ok, err)
	}
	// Its directory gone: made again.
	if err := os.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	if ok, err := Attach(theirs); err != nil || !ok {
		t.Fatalf("this host's volume, attached: %v %v", ok, err)
	}
	if b, err := os.ReadFile(filepath.Join(theirs, "planted")); err != nil || string(b) != "x" {
		t.Fatalf("the volume attached holds %q (%v)", b, err)
	}
}

// An ext4 volume unmounted here while it is still held elsewhere (a copy
// of the mounts another mount namespace keeps; here, a file open in it)
// is attached again through the loop device that still reads its image:
// the same filesystem, where a second device would make a second one
// writing the same image. A device that reads the image read-only beside
// it is refused, and no second device is made.
func TestAttachUsesTheDeviceThatReadsTheImage(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup (util-linux)")
	}
	base := t.TempDir()
	volumetest.Private(t, base)
	dir := filepath.Join(base, "ws")
	os.Mkdir(dir, 0o700)
	if err := Make(dir, MinSize); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
	held, err := os.Create(filepath.Join(dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	devices := func() string {
		b, _ := exec.Command("losetup", "-j", Image(dir)).Output()
		return string(b)
	}
	before := devices()
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if ok, err := Attach(dir); err != nil || !ok {
		t.Fatalf("attached while held elsewhere: %v %v", ok, err)
	}
	if after := devices(); after != before {
		t.Fatalf("a second device reads the image: before %q, after %q", before, after)
	}
	held.WriteString("the same filesystem")
	held.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "held")); string(b) != "the same filesystem" {
		t.Fatalf("attached again, the volume reads %q: another filesystem", b)
	}
	// A read-only device beside it, once it is unmounted again.
	unmount(t, dir)
	ro, err := exec.Command("losetup", "-r", "-f", "--show", Image(dir)).Output()
	if err != nil {
		t.Fatal(err)
	}
	roDev := strings.TrimSpace(string(ro))
	t.Cleanup(func() { exec.Command("losetup", "-d", roDev).Run() })
	n := strings.Count(devices(), "\n")
	if ok, err := Attach(dir); err == nil || ok || mounted(dir) {
		t.Fatalf("attached beside a read-only device on its image: %v %v", ok, err)
	}
	if strings.Count(devices(), "\n") != n {
		t.Fatalf("a device was made beside one that reads the image: %q", devices())
	}
}

// Owned: a directory of this user's, whatever its mode; not another
// user's, not a link to one of this user's, not a file.
func TestOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("another user's directory is made with chown: root")
	}
	base := t.TempDir()
	mine, theirs, file := filepath.Join(base, "mine"), filepath.Join(base, "theirs"), filepath.Join(base, "file")
	os.Mkdir(mine, 0o777)
	os.Chmod(mine, 0o777)
	os.Mkdir(theirs, 0o700)
	os.Chown(theirs, 65534, 65534)
	os.WriteFile(file, nil, 0o600)
	os.Symlink(mine, filepath.Join(base, "link"))
	if err := Owned(mine); err != nil {
		t.Fatalf("this user's directory: %v", err)
	}
	for _, p := range []string{theirs, file, filepath.Join(base, "link"), filepath.Join(base, "none")} {
		if err := Owned(p); err == nil {
			t.Fatalf("%s taken as this user's directory", p)
		}
	}
}

// A pool unmounted here while its filesystem is still held elsewhere (a
// copy of the mounts another mount namespace keeps; here, a file open in
// it) is mounted again on the loop device that still reads its image:
// the same filesystem, not a second one writing the same image (which
// XFS refuses, as a duplicate UUID).
func TestPoolMountedAgainWhileHeldElsewhere(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	volumetest.Private(t, base)
	pool := filepath.Join(base, "pool")
	if err := Pool(pool, MinPool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := volumetest.WhileBusy(func() error { return ReleasePool(pool) }); err != nil {
			t.Error(err)
			unix.Unmount(pool, unix.MNT_DETACH)
		}
	})
	held, err := os.Create(filepath.Join(pool, "held"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(pool, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := MountPool(pool); err != nil {
		held.Close()
		t.Fatalf("the pool mounted again while held elsewhere: %v", err)
	}
	held.WriteString("the same filesystem")
	held.Close()
	if b, err := os.ReadFile(filepath.Join(pool, "held")); err != nil || string(b) != "the same filesystem" {
		t.Fatalf("mounted again, the pool reads %q (%v): another filesystem", b, err)
	}
}
