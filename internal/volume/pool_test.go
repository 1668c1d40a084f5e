package volume

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A pool made beside a directory whose filesystem has no reflinks (the
// test's temporary directory: ext4 or tmpfs here) shares extents: a
// volume made in it is copied by Snapshot and MakeFrom, each side's
// writes its own. Its image is sparse and gets back the blocks of what
// is deleted in it (discard). Made again, it is the one mounted; after
// its unmount (a restart of the machine), Attach of a volume in it mounts
// it again first, holding what was written. A directory where another
// filesystem is mounted, or that holds files, and names another user
// made first (an image, a directory, a link), are refused; ReleasePool
// leaves nothing.
func TestPoolSharesExtentsOnAnyFilesystem(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	if _, err := xfsFormatter(); err != nil {
		t.Fatal(err, "(scripts/deps installs xfsprogs)")
	}
	base := t.TempDir()
	pool := filepath.Join(base, "pool")
	if err := Pool(pool, 1<<20); err == nil {
		t.Fatal("a pool under MinPool was made")
	}
	if err := Pool(pool, 2<<30); err != nil {
		t.Fatal(err)
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
		if err := unix.Unmount(d, 0); err != nil {
			t.Fatal(err)
		}
	}
	if PoolOf(a) != pool {
		t.Fatalf("PoolOf(%s) = %q", a, PoolOf(a))
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
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(other, unix.MNT_DETACH) })
	if err := Pool(other, 0); err == nil {
		t.Fatal("a pool on a tmpfs mount point")
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
	// Names another user made first, where anyone may write: an image
	// of theirs (mounted, their filesystem would hold the workspaces), a
	// directory of theirs, a link for the lock.
	theirs := filepath.Join(base, "theirs")
	os.Mkdir(theirs, 0o755)
	os.WriteFile(Image(theirs), []byte("their filesystem"), 0o600)
	os.Chown(Image(theirs), 65534, 65534)
	theirDir := filepath.Join(base, "their-dir")
	os.Mkdir(theirDir, 0o777)
	os.Chmod(theirDir, 0o777)
	linked := filepath.Join(base, "linked")
	os.Symlink(filepath.Join(base, "elsewhere"), linked+".lock")
	for _, d := range []string{theirs, theirDir, linked} {
		if err := Pool(d, 0); err == nil || mounted(d) {
			t.Fatalf("a pool made or mounted at %s, whose names another user made first: %v", d, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "elsewhere")); !os.IsNotExist(err) {
		t.Fatalf("the lock's link was followed: %v", err)
	}

	if err := ReleasePool(pool); err == nil {
		t.Fatal("a pool with volumes mounted in it released")
	}
	for _, d := range []string{b, a} {
		if err := Release(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := ReleasePool(pool); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pool, Image(pool), pool + ".lock"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", p, err)
		}
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
