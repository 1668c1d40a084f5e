package nvidia

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/hw/nvidia/nvidiatest"
)

func TestDiscoverFakeRoot(t *testing.T) {
	root := nvidiatest.FakeRoot(t)
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
		root := nvidiatest.FakeRoot(t)
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
		nvidiatest.Version: "550.54.15",
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:36:42 UTC 2024\n": "560.35.03",
		"": "", "NVRM version: nothing\n": "",
	} {
		if got := ParseVersion(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzParseInformation(f *testing.F) {
	f.Add(nvidiatest.Information)
	f.Add("Model: a\nGPU UUID: b\nDevice Minor: 300\n")
	f.Fuzz(func(t *testing.T, s string) {
		g, minor, err := ParseInformation(s)
		if err == nil && (g.Model == "" || g.UUID == "" || minor > 254) {
			t.Fatalf("%+v %d accepted", g, minor)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add(nvidiatest.Version)
	f.Fuzz(func(t *testing.T, s string) {
		if v := ParseVersion(s); v != "" && !versionWord.MatchString(v) {
			t.Fatalf("%q", v)
		}
	})
}
