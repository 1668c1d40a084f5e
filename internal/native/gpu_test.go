//go:build linux

package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia/nvidiatest"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// gpuExecutor is an S1 executor whose devices are found beneath root.
func gpuExecutor(t *testing.T, root string) *Executor {
	t.Helper()
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{StateDir: t.TempDir(), Memory: 256 << 20, Pids: 64, Self: helper, NoWarm: true, DevRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if p := e.Probe(context.Background()); !p.Available {
		t.Skipf("S1 is unavailable here: %s", p.Reason)
	}
	return e
}

// gpuScript reports, from inside the run, what it has of the GPU: the
// nodes in /dev (name and type), what opening each gives, the driver's
// libraries and the loader's path.
const gpuScript = `
for n in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-modeset; do
  if [ -c $n ]; then echo "$n char $(stat -c %t:%T $n)"; else echo "$n absent"; fi
  ( : < $n ) 2>&1 | sed 's/.*: //' | sed "s|^|$n open: |"
done
ls /dev | tr '\n' ' '; echo
cat /nvidia/lib/libcuda.so.1 2>&1; echo
( echo x > /nvidia/lib/libcuda.so.1 ) 2>&1 | sed 's/.*: //'
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if ( printf gpu > /proc/self/comm ) 2>/dev/null; then echo "proc write: ok"; else echo "proc write: refused"; fi
`

func runGPU(t *testing.T, e *Executor, devices []device.Class, grants ...string) (string, *executor.Result, error) {
	t.Helper()
	g := mustGrants(t, grants...)
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sh")), Entry: "/bin/sh", Args: []string{"sh", "-c", gpuScript},
		Env: map[string]string{"PATH": "/usr/bin:/bin"}, Devices: devices}
	var out, errb bytes.Buffer
	enf := grant.NewEnforcer(g)
	res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: enf, Stdout: &out, Stderr: &errb, Deadline: time.Minute, Cgroup: newDeviceGroup(t)})
	if err == nil && res.Outcome.Status != attest.Exited {
		t.Fatalf("outcome %+v: %s", res.Outcome, errb.String())
	}
	return out.String() + errb.String(), res, err
}

// newDeviceGroup is a run's group as the host makes it, with v1's
// devices controller where the host has one (the unified hierarchy's
// eBPF device program otherwise).
func newDeviceGroup(t *testing.T) *cgroup.Group {
	t.Helper()
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	g, err := h.Create(fmt.Sprintf("test-gpu-%d-%d", os.Getpid(), time.Now().UnixNano()), "cpuacct", "cpu", "memory", "pids", "freezer", "devices")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	return g
}

// TestGPUGivenAtS1: on a host with an NVIDIA GPU (here a fake tree with
// real character nodes of NVIDIA's numbers and no driver behind them), a
// run granted a Gpu has every node in its /dev as a character device of
// the host's numbers, and its cgroup and Landlock let it open them: the
// open reaches the (missing) driver, ENXIO, not a refusal; the driver's
// libraries are read-only at /nvidia/lib, on the loader's path. A run
// without the grant has no node and no library.
func TestGPUGivenAtS1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("S1 gives a GPU only as root, to a run in a cgroup of its own (euid %d)", os.Geteuid())
	}
	root := nvidiatest.FakeRoot(t)
	e := gpuExecutor(t, root)
	if !e.Gives(device.GPU) || e.Gives(device.NPU) {
		t.Fatalf("Gives: Gpu %v (%s), Npu %v", e.Gives(device.GPU), e.DeviceProbe(device.GPU).Reason, e.Gives(device.NPU))
	}
	out, _, err := runGPU(t, e, []device.Class{device.CPU, device.GPU}, "gpu:5J")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted:\n%s", out)
	for _, want := range []string{
		"/dev/nvidia0 char c3:0", "/dev/nvidia0 open: No such device or address",
		"/dev/nvidiactl char c3:ff", "/dev/nvidiactl open: No such device or address",
		"/dev/nvidia-uvm char 1ff:0", "/dev/nvidia-modeset char c3:fe",
		"fake libcuda", "Read-only file system", "LD_LIBRARY_PATH=/nvidia/lib",
		"proc write: ok", // CUDA's cuInit truncates and writes a file of /proc
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the granted run lacks %q", want)
		}
	}
	if strings.Contains(out, "not permitted") || strings.Contains(out, "Permission denied") {
		t.Errorf("the granted run was refused its GPU:\n%s", out)
	}
	out, _, err = runGPU(t, e, []device.Class{device.CPU})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("not granted:\n%s", out)
	for _, n := range []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"} {
		if !strings.Contains(out, n+" absent") {
			t.Errorf("a run without the grant has %s", n)
		}
	}
	if !strings.Contains(out, "proc write: refused") {
		t.Errorf("a run without the grant may write its /proc:\n%s", out)
	}
	if strings.Contains(out, "fake libcuda") || !strings.Contains(out, "LD_LIBRARY_PATH=\n") {
		t.Errorf("a run without the grant has the driver's libraries:\n%s", out)
	}
}

// TestGPUNodeRefusedByTheCgroup: a node of NVIDIA's that reached a run
// without the grant (planted by the test, as a bug or a mount would)
// cannot be opened: the run's cgroup refuses it (EPERM), while Landlock
// and the node's mode would allow it.
func TestGPUNodeRefusedByTheCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("cgroups need root (euid %d)", os.Geteuid())
	}
	root := nvidiatest.FakeRoot(t)
	e := gpuExecutor(t, root)
	h, err := nvidia.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	e.plant = h.Nodes()
	out, _, err := runGPU(t, e, []device.Class{device.CPU})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("planted, not granted:\n%s", out)
	for _, n := range []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"} {
		if !strings.Contains(out, n+" char") || !strings.Contains(out, n+" open: Operation not permitted") {
			t.Errorf("%s: planted in the root, not refused by the cgroup", n)
		}
	}
}

// TestGPURefusedWithTheProbesReason: on a host without a GPU the grant is
// refused, unavailable, with the probe's reason, and nothing runs.
func TestGPURefusedWithTheProbesReason(t *testing.T) {
	e, err := New(Config{StateDir: t.TempDir(), DevRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p := e.DeviceProbe(device.GPU)
	if p.Available || e.Gives(device.GPU) || !strings.Contains(p.Reason, "no /dev/nvidiactl: no NVIDIA driver on this host") {
		t.Fatalf("%+v", p)
	}
	if os.Geteuid() != 0 {
		return
	}
	e = gpuExecutor(t, t.TempDir())
	_, _, err = runGPU(t, e, []device.Class{device.CPU, device.GPU}, "gpu:5J")
	if !errors.Is(err, device.ErrUnavailable) || !strings.Contains(err.Error(), "no NVIDIA driver on this host") {
		t.Fatalf("%v", err)
	}
}
