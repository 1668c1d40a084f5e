package boot

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"github.com/klauspost/compress/zstd"
)

// maxVMLinux bounds an uncompressed kernel: a distribution's is 60-70 MiB.
const maxVMLinux = 512 << 20

// ErrNoPVH is wrapped when a kernel cannot be booted directly: it is no
// bzImage, its payload is compressed in a way this build cannot undo, or
// the ELF inside has no PVH entry point.
var ErrNoPVH = errors.New("boot: no directly bootable kernel")

// Uncompress returns the ELF kernel (vmlinux) a bzImage carries, where
// that ELF has a PVH entry point (Linux's CONFIG_PVH, which Debian's
// kernels have): QEMU's microvm and Firecracker then enter it directly.
// A bzImage instead decompresses itself in the guest, which under TCG
// (QEMU emulating the CPU) took 3.3 s of a 5 s boot here, and is most
// of a small VM's start even with KVM. xz payloads (Debian's) are undone
// by the xz command (xz-utils, on every Debian system), with its x86
// branch filter, which no Go package here reads; gzip and zstd ones in
// process. ErrNoPVH where it cannot.
func Uncompress(bz []byte) ([]byte, error) {
	payload, err := bzPayload(bz)
	if err != nil {
		return nil, err
	}
	var out []byte
	switch {
	case bytes.HasPrefix(payload, []byte("\xfd7zXZ\x00")):
		out, err = unxz(payload)
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		var r *gzip.Reader
		if r, err = gzip.NewReader(bytes.NewReader(payload)); err == nil {
			r.Multistream(false)
			out, err = readBounded(r)
		}
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		var d *zstd.Decoder
		if d, err = zstd.NewReader(bytes.NewReader(payload), zstd.WithDecoderConcurrency(1)); err == nil {
			out, err = readBounded(d)
			d.Close()
		}
	default:
		return nil, fmt.Errorf("%w: the bzImage's payload is compressed in a way this build does not read", ErrNoPVH)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: uncompressing the bzImage's payload: %v", ErrNoPVH, err)
	}
	if err := checkPVH(out); err != nil {
		return nil, err
	}
	return out, nil
}

// bzPayload is the compressed kernel inside a bzImage, located by its
// setup header (boot protocol 2.08 or later: payload_offset and
// payload_length, counted from the protected-mode code after the setup
// sectors).
func bzPayload(bz []byte) ([]byte, error) {
	if len(bz) < 0x250 || string(bz[0x202:0x206]) != "HdrS" {
		return nil, fmt.Errorf("%w: not a bzImage (no setup header)", ErrNoPVH)
	}
	if v := binary.LittleEndian.Uint16(bz[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("%w: the bzImage's boot protocol %#x names no payload (2.08 does)", ErrNoPVH, v)
	}
	setup := int(bz[0x1f1])
	if setup == 0 {
		setup = 4
	}
	off := uint64(setup+1)*512 + uint64(binary.LittleEndian.Uint32(bz[0x248:]))
	n := uint64(binary.LittleEndian.Uint32(bz[0x24c:]))
	if n == 0 || off+n > uint64(len(bz)) {
		return nil, fmt.Errorf("%w: the bzImage's payload (%d bytes at %d) is not inside its %d bytes", ErrNoPVH, n, off, len(bz))
	}
	return bz[off : off+n], nil
}

func unxz(payload []byte) ([]byte, error) {
	path, err := exec.LookPath("xz")
	if err != nil {
		return nil, fmt.Errorf("the xz command (Debian's xz-utils) is missing: %v", err)
	}
	cmd := exec.Command(path, "--decompress", "--stdout", "--single-stream", "--quiet")
	cmd.Stdin = bytes.NewReader(payload)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	out, rerr := readBounded(stdout)
	if rerr != nil {
		cmd.Process.Kill()
	}
	werr := cmd.Wait()
	if rerr != nil {
		return nil, rerr
	}
	if werr != nil {
		return nil, fmt.Errorf("xz: %v %s", werr, bytes.TrimSpace(errb.Bytes()))
	}
	return out, nil
}

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxVMLinux+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxVMLinux {
		return nil, fmt.Errorf("more than %d MiB uncompressed", maxVMLinux>>20)
	}
	return b, nil
}

// xenPVHEntry is XEN_ELFNOTE_PHYS32_ENTRY, the note of a kernel's PVH
// entry point, in a note named "Xen".
const xenPVHEntry = 18

// checkPVH refuses what is not a 64-bit x86 ELF with a PVH entry note.
func checkPVH(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%w: the uncompressed kernel is not an ELF: %v", ErrNoPVH, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("%w: the uncompressed kernel is not a 64-bit x86 executable", ErrNoPVH)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(io.LimitReader(p.Open(), 1<<20))
		if err != nil {
			return fmt.Errorf("%w: the kernel's notes: %v", ErrNoPVH, err)
		}
		if hasNote(notes, "Xen", xenPVHEntry, f.ByteOrder) {
			return nil
		}
	}
	return fmt.Errorf("%w: the kernel has no PVH entry point (CONFIG_PVH)", ErrNoPVH)
}

// hasNote reports whether an ELF note segment holds a note of this name
// and type (each note: namesz, descsz, type, then name and desc, each
// padded to 4 bytes).
func hasNote(b []byte, name string, typ uint32, bo binary.ByteOrder) bool {
	pad := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(b) >= 12 {
		nsz, dsz, t := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		b = b[12:]
		if pad(nsz) > uint64(len(b)) {
			return false
		}
		n := b[:nsz]
		b = b[pad(nsz):]
		if pad(dsz) > uint64(len(b)) {
			return false
		}
		b = b[pad(dsz):]
		if t == typ && string(bytes.TrimRight(n, "\x00")) == name {
			return true
		}
	}
	return false
}
