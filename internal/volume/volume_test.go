package volume

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
	if err := Probe(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	os.Mkdir(dir, 0o700)
	if err := Make(dir, MinSize); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
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
