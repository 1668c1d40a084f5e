package boot_test

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	. "github.com/opensubstrate/sandbox/internal/vm/boot"
)

// TestBuildBootsTheELFInside: the image Build makes from Debian's kernel
// package holds the ELF inside its bzImage (xz, with the x86 filter),
// which has a PVH entry point, and which is the bzImage's own kernel:
// the same release string is in both.
func TestBuildBootsTheELFInside(t *testing.T) {
	k, err := guestbuild.VMKernel()
	if err != nil {
		t.Fatal(err)
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(k, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		t.Fatalf("kernels: %v", vmlinuz)
	}
	bz, err := os.ReadFile(vmlinuz[0])
	if err != nil {
		t.Fatal(err)
	}
	vmlinux, err := Uncompress(bz)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil || f.Machine != elf.EM_X86_64 {
		t.Fatalf("not an x86-64 ELF: %v", err)
	}
	release := strings.TrimPrefix(filepath.Base(vmlinuz[0]), "vmlinuz-")
	if !bytes.Contains(vmlinux, []byte("Linux version "+release)) {
		t.Fatalf("the ELF does not say Linux version %s", release)
	}
	agent, err := guestbuild.VMAgent()
	if err != nil {
		t.Fatal(err)
	}
	im, err := Build(k, agent, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(im.Kernel)
	if !bytes.Equal(got, vmlinux) {
		t.Fatalf("the image's kernel is not the ELF inside the bzImage (%d bytes, want %d)", len(got), len(vmlinux))
	}
}

// bzImage makes the smallest bzImage whose payload is payload.
func bzImage(payload []byte) []byte {
	b := make([]byte, 5*512)
	b[0x1f1] = 4
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	binary.LittleEndian.PutUint32(b[0x248:], 0)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)))
	return append(b, payload...)
}

// TestUncompressRefuses: what is not a bzImage, a payload outside the
// file, an unknown compression, garbage after a known magic, and an
// ELF without a PVH entry point are each refused as ErrNoPVH, naming
// why; Build then keeps the bzImage.
func TestUncompressRefuses(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("\x7fELF not really"))
	w.Close()
	self, _ := os.ReadFile("/proc/self/exe") // an ELF with no PVH note
	var selfGz bytes.Buffer
	w = gzip.NewWriter(&selfGz)
	w.Write(self)
	w.Close()
	outside := bzImage([]byte("x"))
	binary.LittleEndian.PutUint32(outside[0x24c:], 1<<30)
	old := bzImage([]byte("x"))
	binary.LittleEndian.PutUint16(old[0x206:], 0x206)
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "not a bzImage"},
		{"an ELF", self, "not a bzImage"},
		{"an old boot protocol", old, "names no payload"},
		{"a payload outside the file", outside, "not inside"},
		{"lz4", bzImage([]byte{0x02, 0x21, 0x4c, 0x18, 0, 0}), "does not read"},
		{"a broken xz", bzImage([]byte("\xfd7zXZ\x00garbage")), "uncompressing"},
		{"a broken gzip", bzImage([]byte{0x1f, 0x8b, 8, 0, 1, 2}), "uncompressing"},
		{"a broken zstd", bzImage([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xff}), "uncompressing"},
		{"no ELF inside", bzImage(gz.Bytes()), "not an ELF"},
		{"an ELF without PVH", bzImage(selfGz.Bytes()), "no PVH entry point"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Uncompress(c.in)
			if !errors.Is(err, ErrNoPVH) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrNoPVH saying %q", err, c.want)
			}
		})
	}
}

func FuzzUncompress(f *testing.F) {
	f.Add(bzImage([]byte{0x1f, 0x8b, 8, 0}))
	f.Add(bzImage([]byte{0x28, 0xb5, 0x2f, 0xfd}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		// Whatever the bytes, a refusal is ErrNoPVH (and never a panic).
		if _, err := Uncompress(b); err != nil && !errors.Is(err, ErrNoPVH) {
			t.Fatalf("not ErrNoPVH: %v", err)
		}
	})
}
