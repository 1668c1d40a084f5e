package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestDevicesSetAheadThenGiven: a group given the usual devices ahead of
// its run (a warm init's, on v1) and then a GPU by its run lets the run
// open the GPU; set back, the GPU is refused again; set the same twice,
// the same holds (the second writes nothing).
func TestDevicesSetAheadThenGiven(t *testing.T) {
	h := realHierarchy(t)
	if h.V1["devices"] == "" {
		t.Skip("no v1 devices controller here: devices are set once a group (Group.DevicesReplaceable)")
	}
	node := fakeGPUNode(t)
	base := []Device{{'c', 1, 3, "rw"}, {'c', 1, 5, "rw"}}
	g, err := h.Create(fmt.Sprintf("devtest-ahead-%d", time.Now().UnixNano()), "devices", "cpuacct")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if !g.DevicesReplaceable() {
		t.Fatal("a group with a v1 devices controller says its devices are not replaceable")
	}
	for i, c := range []struct {
		allow []Device
		want  string // of the fake node
	}{
		{base, "Operation not permitted"},
		{base, "Operation not permitted"},
		{append(slices.Clone(base), Device{'c', 195, 0, "rw"}), "No such device"},
		{append(slices.Clone(base), Device{'c', 195, 0, "rw"}), "No such device"},
		{base, "Operation not permitted"},
	} {
		if err := g.SetDevices(c.allow); err != nil {
			t.Fatal(err)
		}
		got := openIn(t, g, node, "/dev/null")
		if len(got) != 2 || !strings.Contains(got[0], c.want) || got[1] != "ok" {
			t.Errorf("set %d: the fake node, /dev/null: %q; want %q, ok", i, got, c.want)
		}
	}
	g.Kill(5 * time.Second)
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

// BenchmarkSetAhead: what a run's group costs to give its limits and
// devices (first), and what it costs when a warm init's group was given
// the same ahead (again: nothing is written).
//
//	go test -run '^$' -bench SetAhead ./internal/cgroup/
func BenchmarkSetAhead(b *testing.B) {
	h := realHierarchy(b)
	if h.V1["devices"] == "" {
		b.Skip("no v1 devices controller here")
	}
	base := []Device{{'c', 1, 3, "rw"}, {'c', 1, 5, "rw"}, {'c', 1, 7, "rw"}, {'c', 1, 8, "rw"}, {'c', 1, 9, "rw"}}
	l := Limits{Memory: 256 << 20, Pids: 128}
	g, err := h.Create(fmt.Sprintf("devtest-bench-%d", time.Now().UnixNano()), "devices", "memory", "pids", "cpuacct")
	if err != nil {
		b.Fatal(err)
	}
	defer g.Remove()
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			g.limits, g.devices = nil, nil
			if err := g.SetLimits(l); err != nil {
				b.Fatal(err)
			}
			if err := g.SetDevices(base); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("again", func(b *testing.B) {
		for b.Loop() {
			if err := g.SetLimits(l); err != nil {
				b.Fatal(err)
			}
			if err := g.SetDevices(base); err != nil {
				b.Fatal(err)
			}
		}
	})
}
