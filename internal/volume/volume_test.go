package volume

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/volume/volumetest"
)

// TestAVolumeBoundsItsDirectoryWhileItIsWritten: a writer past the
// bound gets ENOSPC at the write; the volume says it is full; its image
// is sparse; Release leaves an ordinary empty directory and no image.
func TestAVolumeBoundsItsDirectoryWhileItIsWritten(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Make(dir, 1<<20); err == nil {
		t.Fatal("a volume under MinSize was made")
	}
	const size = 32 << 20
	if err := Make(dir, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("its mode: %v %v", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a new volume holds %d entries", len(ents))
	}
	var st syscall.Stat_t
	syscall.Stat(Image(dir), &st)
	if st.Blocks*512 > size/2 {
		t.Fatalf("the image takes %d bytes on disk: not sparse", st.Blocks*512)
	}
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var n int64
	for n <= 2*size {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("after %d bytes: %v, want ENOSPC", n, err)
			}
			break
		}
	}
	f.Close()
	if n > size {
		t.Fatalf("%d bytes written into a %d-byte bound", n, size)
	}
	u, ok, err := Of(dir)
	if err != nil || !ok || !u.Full() || u.Size > size {
		t.Fatalf("usage %+v %v %v", u, ok, err)
	}
	if err := Release(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(Image(dir)); !os.IsNotExist(err) {
		t.Fatalf("the image is left: %v", err)
	}
	if _, ok, _ := Of(dir); ok || mounted(dir) {
		t.Fatal("still mounted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatal("what was written is still seen in the directory")
	}
}

// TestAttachMountsAVolumeAgain: a volume whose mount went (a restart) is
// mounted again from its image, with what it held.
func TestAttachMountsAVolumeAgain(t *testing.T) {
	dir := smallVolume(t)
	os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644)
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := Attach(dir); err != nil || !ok {
		t.Fatalf("attach: %v %v", ok, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kept")); err != nil || string(b) != "x" {
		t.Fatalf("after attach: %q %v", b, err)
	}
	if ok, err := Attach(dir); err != nil || ok {
		t.Fatalf("a mounted volume attached again: %v %v", ok, err)
	}
}

// A volume copied by Snapshot and made again by MakeFrom holds what the
// volume held at the snapshot, not what was written after it, and each
// side's writes are its own afterwards; the copies share their extents
// (the filesystem under them loses far less than the data they hold).
// Where the images lie on a filesystem without reflinks (ext4), both
// refuse with ErrNoClone and leave nothing.
func TestSnapshotSharesExtents(t *testing.T) {
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	xfs := volumetest.XFS(t, 1<<30)
	a, b := filepath.Join(xfs, "a"), filepath.Join(xfs, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := Make(a, 256<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(a) })
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(a, "data"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(xfs, "snap.img")
	syscall.Sync() // the data on the filesystem under the image, before it is measured
	free := volumetest.Free(t, xfs)
	if err := Snapshot(a, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "later"), []byte("after the snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MakeFrom(b, img); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(b) })
	if used := free - volumetest.Free(t, xfs); used > 8<<20 {
		t.Fatalf("a copy of a volume holding 64 MiB took %d bytes of the filesystem under it: not shared", used)
	}
	if got, err := os.ReadFile(filepath.Join(b, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy's data: %d bytes, %v", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(b, "later")); !os.IsNotExist(err) {
		t.Fatalf("the copy holds a file written after its snapshot: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(b, "data")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the copy's mode: %v %v", fi, err)
	}
	if u, ok, err := Of(b); err != nil || !ok || u.Size > 256<<20 {
		t.Fatalf("the copy's bound: %+v %v %v", u, ok, err)
	}
	if err := os.WriteFile(filepath.Join(b, "data"), []byte("the copy's own"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(a, "data")); !bytes.Equal(got, data) {
		t.Fatal("a write to the copy reached the original")
	}
	// Ext4 under the images: no reflinks.
	plain := t.TempDir()
	c, d := filepath.Join(plain, "c"), filepath.Join(plain, "d")
	os.Mkdir(c, 0o700)
	os.Mkdir(d, 0o700)
	if err := Make(c, MinSize); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(c) })
	if err := Snapshot(c, filepath.Join(plain, "snap.img")); !errors.Is(err, ErrNoClone) {
		t.Fatalf("a snapshot on ext4: %v, want ErrNoClone", err)
	}
	if _, err := os.Stat(filepath.Join(plain, "snap.img")); !os.IsNotExist(err) {
		t.Fatalf("a refused snapshot left its image: %v", err)
	}
	if err := os.WriteFile(filepath.Join(c, "x"), []byte("still writable"), 0o600); err != nil {
		t.Fatalf("the volume after a refused snapshot (left frozen?): %v", err)
	}
	if err := MakeFrom(d, Image(c)); !errors.Is(err, ErrNoClone) {
		t.Fatalf("a copy on ext4: %v, want ErrNoClone", err)
	}
	if _, err := os.Stat(Image(d)); !os.IsNotExist(err) || mounted(d) {
		t.Fatalf("a refused copy left its image or mount: %v", err)
	}
}

// A volume frozen by a process that was killed before it thawed it
// (Snapshot's window) is thawed by Release before it is unmounted: its
// loop device goes, as any volume's. Unthawed, the frozen filesystem
// would stay in the kernel, holding the device and the deleted image.
func TestReleaseThawsAFrozenVolume(t *testing.T) {
	dir := smallVolume(t)
	t.Cleanup(func() { thaw(dir) }) // before smallVolume's Release
	img := Image(dir)
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, d.Fd(), fiFreeze, 0)
	d.Close()
	if e != 0 {
		t.Fatalf("freeze: %v", e)
	}
	if err := Release(dir); err != nil {
		t.Fatal(err)
	}
	// The device goes with the filesystem's last reference, which need
	// not be this unmount's: a mount namespace another process made
	// meanwhile (a sandbox starting beside this test) holds a copy of
	// the mount until it drops the host's mounts. Frozen, it would stay
	// for good. (A bound for a hang, not a measure.)
	backs := func() string {
		backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, b := range backing {
			if f, _ := os.ReadFile(b); strings.HasPrefix(string(f), img) {
				return b
			}
		}
		return ""
	}
	for deadline := time.Now().Add(time.Minute); backs() != ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still backs a loop device (%s) a minute after its release: the volume was unmounted frozen", img, backs())
		}
	}
}

// smallVolume is a volume of MinSize on a directory of the test's,
// released when it ends (skipped where volumes cannot be made).
func smallVolume(t *testing.T) string {
	t.Helper()
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	os.Mkdir(dir, 0o700)
	if err := Make(dir, MinSize); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
	return dir
}
