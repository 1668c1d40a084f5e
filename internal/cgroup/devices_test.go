package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeGPUNode makes a character device 195:0 (NVIDIA's major; no driver
// answers it here, so an open that the group lets through fails with
// ENXIO, and one it refuses with EPERM).
func fakeGPUNode(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nvidia0")
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 0))); err != nil {
		t.Skipf("mknod: %v", err)
	}
	return p
}

// openIn opens each path from a shell placed in g and returns what the
// shell said of each ("ok" or its error).
func openIn(t *testing.T, g *Group, paths ...string) []string {
	t.Helper()
	var script strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&script, "( : < %s ) && echo ok\n", p)
	}
	cmd := exec.Command("/bin/sh", "-c", script.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := StartIn(cmd, g); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// TestDevicesAllowOnlyWhatIsGranted: a process in a group with device
// rules opens the devices allowed and is refused (EPERM) every other,
// however the node came to be; the host, outside the group, is not
// touched. Both mechanisms: v1's devices controller, and on the unified
// hierarchy an eBPF device program (tried here on the hybrid's
// controller-less v2, which runs it all the same).
func TestDevicesAllowOnlyWhatIsGranted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("cgroups need root (euid %d)", os.Geteuid())
	}
	h, err := Detect("/sys/fs/cgroup")
	if err != nil {
		t.Skip(err)
	}
	node := fakeGPUNode(t)
	base := []Device{{'c', 1, 3, "rw"}, {'c', 1, 5, "rw"}}
	for _, mech := range []string{"v1", "bpf"} {
		hh := *h
		switch mech {
		case "v1":
			if h.V1["devices"] == "" {
				t.Logf("v1: no devices controller here")
				continue
			}
		case "bpf":
			if h.V2 == "" {
				t.Logf("bpf: no unified hierarchy here")
				continue
			}
			hh.V1 = map[string]string{} // the v2 group alone
		}
		for _, c := range []struct {
			name  string
			allow []Device
			want  string // of the fake node
		}{
			{"without the grant", base, "Operation not permitted"},
			{"with the grant", append(base, Device{'c', 195, 0, "rw"}), "No such device"},
			{"another minor granted", append(base, Device{'c', 195, 1, "rw"}), "Operation not permitted"},
			{"the major granted", append(base, Device{'c', 195, Any, "rw"}), "No such device"},
			{"read-only granted", append(base, Device{'c', 195, 0, "r"}), "No such device"},
			{"mknod only", append(base, Device{'c', 195, 0, "m"}), "Operation not permitted"},
		} {
			name := fmt.Sprintf("devtest-%s-%d", mech, time.Now().UnixNano())
			g, err := hh.Create(name, "devices", "cpuacct")
			if err != nil {
				t.Fatal(err)
			}
			if err := g.SetDevices(c.allow); err != nil {
				g.Remove()
				t.Fatalf("%s %s: %v", mech, c.name, err)
			}
			got := openIn(t, g, node, "/dev/null", "/dev/full")
			g.Kill(5 * time.Second)
			g.Remove()
			if len(got) != 3 || !strings.Contains(got[0], c.want) || got[1] != "ok" || !strings.Contains(got[2], "Operation not permitted") {
				t.Errorf("%s, %s: the fake node, /dev/null, /dev/full: %q; want %q, ok, refused", mech, c.name, got, c.want)
			}
		}
	}
	// The host is untouched: this process, in no such group, opens /dev/full.
	if f, err := os.Open("/dev/full"); err != nil {
		t.Errorf("the host lost /dev/full: %v", err)
	} else {
		f.Close()
	}
	if f, err := os.Open(node); !errors.Is(err, unix.ENXIO) {
		t.Errorf("the host opening the fake node: %v, want ENXIO (no driver), not a refusal", err)
		if f != nil {
			f.Close()
		}
	}
}

func TestDeviceRulesAreChecked(t *testing.T) {
	g := &Group{Name: "x"}
	for _, d := range []Device{{'x', 1, 3, "rw"}, {'c', -2, 0, "r"}, {'c', 1, 3, ""}, {'c', 1, 3, "rwx"}} {
		if err := g.SetDevices([]Device{d}); err == nil || errors.Is(err, ErrNoDeviceControl) {
			t.Errorf("%+v: %v", d, err)
		}
	}
	if err := g.SetDevices(nil); !errors.Is(err, ErrNoDeviceControl) {
		t.Errorf("a group in no hierarchy: %v", err)
	}
	if s := (Device{'c', 195, Any, "rw"}).String(); s != "c 195:* rw" {
		t.Errorf("%q", s)
	}
}
