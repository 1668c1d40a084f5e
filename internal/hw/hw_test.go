package hw

import (
	"os"
	"path/filepath"
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
