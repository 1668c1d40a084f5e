// Package nvidiatest makes fake NVIDIA hosts for tests: a tree with real
// character device nodes (mknod) of NVIDIA's numbers, the driver's /proc
// files and library files, beneath a temporary root.
package nvidiatest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Version is a driver's /proc/driver/nvidia/version.
const Version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"

// Information is an H200's /proc/driver/nvidia/gpus/BUS/information.
const Information = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 0\nGPU UUID: \t GPU-8f6a2b1c-0000-1111-2222-333344445555\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n"

// FakeRoot makes a host tree beneath dir with NVIDIA-like nodes (real
// character devices 195:0, 195:255, 195:254 and 511:0 for nvidia-uvm,
// made with mknod), the driver's /proc files and library files. Needs
// root (mknod).
func FakeRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("making character device nodes needs root (euid %d)", os.Geteuid())
	}
	root := t.TempDir()
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"nvidia0", 195, 0}, {"nvidiactl", 195, 255}, {"nvidia-modeset", 195, 254}, {"nvidia-uvm", 511, 0}} {
		mknod(t, filepath.Join(root, "dev", n.name), n.major, n.minor)
	}
	write(t, filepath.Join(root, "dev/nvidia-caps-not-a-node"), "")
	write(t, filepath.Join(root, "proc/driver/nvidia/version"), Version)
	write(t, filepath.Join(root, "proc/driver/nvidia/gpus/0000:18:00.0/information"), Information)
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	write(t, filepath.Join(lib, "libcuda.so.550.54.15"), "fake libcuda")
	os.Symlink("libcuda.so.550.54.15", filepath.Join(lib, "libcuda.so.1"))
	write(t, filepath.Join(lib, "libnvidia-ml.so.550.54.15"), "fake nvml")
	write(t, filepath.Join(lib, "libc.so.6"), "not the driver's")
	write(t, filepath.Join(root, "etc/ld.so.conf.d/nvidia.conf"), "# the driver's\n/opt/nvidia/lib\n")
	write(t, filepath.Join(root, "opt/nvidia/lib/libnvidia-ptxjitcompiler.so.1"), "fake jit")
	return root
}

func mknod(t *testing.T, p string, major, minor uint32) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
