package hw

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/opensubstrate/sandbox/device"
)

func TestDescribeFakeProc(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys", "kernel"), 0o755)
	os.WriteFile(filepath.Join(root, "cpuinfo"), []byte("processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t: x\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sys", "kernel", "osrelease"), []byte("6.1.0-test\n"), 0o644)
	h := Describe(root)
	if h.Host.CPU != "Example CPU 9000" || h.Host.Kernel != "6.1.0-test" || h.Host.OS == "" {
		t.Fatalf("%+v", h.Host)
	}
	if len(h.Devices) != 1 || h.Devices[0].Class != device.CPU || h.Devices[0].Model != "Example CPU 9000" {
		t.Fatalf("%+v", h.Devices)
	}
	empty := Describe(t.TempDir())
	if empty.Devices[0].Model == "" || empty.Devices[0].Driver == "" {
		t.Fatalf("missing proc: %+v", empty.Devices)
	}
}

// TestDescribeReadsFixedFactsOnce: the CPU's model and the kernel's
// release are read once per proc root, where both could be read; a root
// missing one is read again on the next call.
func TestDescribeReadsFixedFactsOnce(t *testing.T) {
	root := t.TempDir()
	kernel := filepath.Join(root, "sys", "kernel", "osrelease")
	os.MkdirAll(filepath.Dir(kernel), 0o755)
	os.WriteFile(filepath.Join(root, "cpuinfo"), []byte("model name\t: First CPU\n"), 0o644)
	if h := Describe(root); h.Host.Kernel != "" || h.Host.CPU != "First CPU" {
		t.Fatalf("no osrelease yet: %+v", h.Host)
	}
	os.WriteFile(kernel, []byte("6.1.0-a\n"), 0o644)
	if h := Describe(root); h.Host.Kernel != "6.1.0-a" || h.Host.CPU != "First CPU" {
		t.Fatalf("osrelease written since: %+v", h.Host)
	}
	os.WriteFile(filepath.Join(root, "cpuinfo"), []byte("model name\t: Second CPU\n"), 0o644)
	os.WriteFile(kernel, []byte("6.1.0-b\n"), 0o644)
	if h := Describe(root); h.Host.Kernel != "6.1.0-a" || h.Host.CPU != "First CPU" || h.Devices[0].Driver != runtime.GOOS+" 6.1.0-a" {
		t.Fatalf("read again once both were read: %+v %+v", h.Host, h.Devices)
	}
}
