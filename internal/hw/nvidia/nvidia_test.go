package nvidia

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"

const information = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 0\nGPU UUID: \t GPU-8f6a2b1c-0000-1111-2222-333344445555\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n"

// FakeRoot makes a host tree beneath dir with NVIDIA-like nodes (real
// character devices 195:0, 195:255, 195:254 and 511:0 for nvidia-uvm,
// made with mknod), the driver's /proc files and library files. Needs
// root (mknod).
func fakeRoot(t *testing.T) string {
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
	write(t, filepath.Join(root, "proc/driver/nvidia/version"), version)
	write(t, filepath.Join(root, "proc/driver/nvidia/gpus/0000:18:00.0/information"), information)
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

func TestDiscoverFakeRoot(t *testing.T) {
	root := fakeRoot(t)
	h, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if h.Driver != "550.54.15" || len(h.GPUs) != 1 {
		t.Fatalf("%+v", h)
	}
	g := h.GPUs[0]
	if g.Model != "NVIDIA H200" || g.UUID != "GPU-8f6a2b1c-0000-1111-2222-333344445555" || g.Bus != "0000:18:00.0" ||
		g.Node != (Node{Path: "/dev/nvidia0", Host: root + "/dev/nvidia0", Major: 195, Minor: 0}) {
		t.Fatalf("%+v", g)
	}
	var ctl []string
	for _, n := range h.Control {
		ctl = append(ctl, n.Path)
	}
	if strings.Join(ctl, " ") != "/dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-modeset" || h.Control[1].Major != 511 {
		t.Fatalf("control nodes %+v", h.Control)
	}
	var libs []string
	for _, l := range h.Libs {
		libs = append(libs, l.Path)
		if l.Host != root+l.Path {
			t.Errorf("%+v", l)
		}
	}
	want := "/opt/nvidia/lib/libnvidia-ptxjitcompiler.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
	if got := strings.Join(libs, " "); got != want {
		t.Errorf("libraries\n got %s\nwant %s", got, want)
	}
	if len(h.Nodes()) != 4 {
		t.Errorf("nodes %+v", h.Nodes())
	}
}

// TestDiscoverSaysWhatIsMissing: each missing part gives the probe's
// reason, wrapping ErrNoDevice.
func TestDiscoverSaysWhatIsMissing(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(root string)
		want   string
	}{
		{"no driver", func(r string) { os.Remove(r + "/dev/nvidiactl") }, "no /dev/nvidiactl: no NVIDIA driver on this host"},
		{"a regular file", func(r string) { os.Remove(r + "/dev/nvidiactl"); os.WriteFile(r+"/dev/nvidiactl", nil, 0o666) }, "not a character device"},
		{"no version", func(r string) { os.Remove(r + "/proc/driver/nvidia/version") }, "/proc/driver/nvidia/version cannot be read"},
		{"no GPU", func(r string) { os.RemoveAll(r + "/proc/driver/nvidia/gpus") }, "reports no GPU"},
		{"no GPU node", func(r string) { os.Remove(r + "/dev/nvidia0") }, "there is no /dev/nvidia0"},
		{"bad information", func(r string) {
			os.WriteFile(r+"/proc/driver/nvidia/gpus/0000:18:00.0/information", []byte("Model: X\n"), 0o644)
		}, "no GPU UUID line"},
	} {
		root := fakeRoot(t)
		c.break_(root)
		_, err := Discover(root)
		if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrNoDevice saying %q", c.name, err, c.want)
		}
	}
	if _, err := Discover(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no /dev/nvidiactl: no NVIDIA driver on this host") {
		t.Errorf("empty root: %v", err)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{
		version: "550.54.15",
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:36:42 UTC 2024\n": "560.35.03",
		"": "", "NVRM version: nothing\n": "",
	} {
		if got := ParseVersion(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzParseInformation(f *testing.F) {
	f.Add(information)
	f.Add("Model: a\nGPU UUID: b\nDevice Minor: 300\n")
	f.Fuzz(func(t *testing.T, s string) {
		g, minor, err := ParseInformation(s)
		if err == nil && (g.Model == "" || g.UUID == "" || minor > 254) {
			t.Fatalf("%+v %d accepted", g, minor)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add(version)
	f.Fuzz(func(t *testing.T, s string) {
		if v := ParseVersion(s); v != "" && !versionWord.MatchString(v) {
			t.Fatalf("%q", v)
		}
	})
}
