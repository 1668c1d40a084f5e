//go:build linux

package native

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
)

// baseDevices are the devices every run's /dev holds (null, zero, full,
// random, urandom): the only ones its cgroup lets it open unless it is
// given more.
var baseDevices = []cgroup.Device{{Type: 'c', Major: 1, Minor: 3, Access: "rw"}, {Type: 'c', Major: 1, Minor: 5, Access: "rw"},
	{Type: 'c', Major: 1, Minor: 7, Access: "rw"}, {Type: 'c', Major: 1, Minor: 8, Access: "rw"}, {Type: 'c', Major: 1, Minor: 9, Access: "rw"}}

// giveDevices gives a run the devices its unit asks for besides the CPU
// (a Gpu: every NVIDIA node, the driver's libraries read-only, its
// /proc/driver entries), and has its cgroup refuse every other device.
// A run without a Gpu gets no node of one, and its cgroup refuses them
// all the same, wherever a node might come from.
func (e *Executor) giveDevices(sp *s1init.Spec, j *executor.Job, o launchOpts) error {
	allow := append([]cgroup.Device{}, baseDevices...)
	gpu := slices.Contains(j.Unit.Devices, device.GPU)
	if gpu {
		p := e.DeviceProbe(device.GPU)
		h := e.GPUs()
		if h == nil {
			return fmt.Errorf("%w: S1 cannot give this run a Gpu: %s", device.ErrUnavailable, p.Reason)
		}
		if j.Cgroup == nil {
			return fmt.Errorf("%w: S1 gives a Gpu only to a run in a cgroup of its own, which refuses the device to every other run (sandbox runs as root)", device.ErrUnavailable)
		}
		var nodes []string
		for _, n := range h.Nodes() {
			sp.Devices = append(sp.Devices, s1init.DevNode{Host: n.Host, Path: n.Path, Major: n.Major, Minor: n.Minor})
			sp.Exec.RWFiles = append(sp.Exec.RWFiles, n.Path)
			allow = append(allow, cgroup.Device{Type: 'c', Major: int64(n.Major), Minor: int64(n.Minor), Access: "rw"})
			nodes = append(nodes, fmt.Sprintf("%s (%d:%d)", n.Path, n.Major, n.Minor))
		}
		sp.ProcDriver = "nvidia"
		// The CUDA driver opens a file of /proc for writing, truncating
		// it (fopen "w"), as it initialises, and fails with
		// CUDA_ERROR_OPERATING_SYSTEM (304) when Landlock refuses: shown
		// on an H200 (scripts/gpu-proof). The run's /proc is its own pid
		// namespace's; /proc/sys, /proc/irq, /proc/bus and the masks are
		// read-only mounts whatever Landlock allows.
		sp.Exec.WriteBeneath = append(sp.Exec.WriteBeneath, "/proc")
		bound, err := e.driverLibs(sp, h.Libs)
		if err != nil {
			return err
		}
		var gpus []string
		for _, g := range h.GPUs {
			gpus = append(gpus, fmt.Sprintf("%s %s at %s", g.Model, g.UUID, g.Bus))
		}
		rule := fmt.Sprintf("given: %s; NVIDIA driver %s; nodes %s, the only devices besides /dev's own its cgroup allows", strings.Join(gpus, ", "), h.Driver, strings.Join(nodes, ", "))
		if bound > 0 {
			rule += fmt.Sprintf("; %d of the driver's libraries read-only at %s (LD_LIBRARY_PATH=%s where the unit sets none)", bound, GPULibDir, GPULibDir)
		}
		if j.Enforcer != nil {
			j.Enforcer.Note(grant.KindCompute, grant.OpUse, string(device.GPU), true, rule)
		}
	}
	for _, n := range e.plant {
		sp.Devices = append(sp.Devices, s1init.DevNode{Host: n.Host, Path: n.Path, Major: n.Major, Minor: n.Minor})
		sp.Exec.RWFiles = append(sp.Exec.RWFiles, n.Path)
	}
	if j.Cgroup == nil {
		return nil
	}
	if err := j.Cgroup.SetDevices(allow); err != nil {
		if gpu {
			return fmt.Errorf("%w: the run's cgroup cannot be made to refuse the GPU to others: %v", device.ErrUnavailable, err)
		}
		// Said, in the attestation's notes; no node but /dev's own is in
		// its root all the same.
		why := err.Error()
		if errors.Is(err, cgroup.ErrNoDeviceControl) {
			why = "the run's cgroup does not control devices here"
		}
		o.note("S1: %s; its root holds no device node but null, zero, full, random and urandom", why)
	}
	return nil
}

// driverLibs binds the driver's libraries that the run's root does not
// already show at their host paths (a driver outside the system
// directories, an image root, a fake tree) read-only at GPULibDir, and
// has the loader look there when the unit sets no LD_LIBRARY_PATH. It
// returns how many it bound.
func (e *Executor) driverLibs(sp *s1init.Spec, libs []nvidia.Lib) (int, error) {
	seen := map[string]bool{}
	n := 0
	for _, l := range libs {
		if e.devRoot() == "/" && sp.Base.Image == "" && visible(l.Path, sp.Base.System) {
			continue
		}
		name := filepath.Base(l.Path)
		if seen[name] {
			continue
		}
		seen[name] = true
		real, err := filepath.EvalSymlinks(l.Host)
		if err != nil {
			return 0, fmt.Errorf("the driver's library %s: %w", l.Path, err)
		}
		sp.Binds = append(sp.Binds, s1init.Bind{Host: real, Path: GPULibDir + "/" + name, File: true, Internal: true})
		n++
	}
	if n == 0 {
		return 0, nil
	}
	sp.Exec.ROPaths = append(sp.Exec.ROPaths, GPULibDir)
	for _, kv := range sp.Exec.Env {
		if strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			return n, nil
		}
	}
	sp.Exec.Env = append(sp.Exec.Env, "LD_LIBRARY_PATH="+GPULibDir)
	return n, nil
}

// visible says whether a host library at p is in a run's root at p: its
// directory, links resolved, is beneath one of the system directories
// bound at their own paths.
func visible(p string, system []string) bool {
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return false
	}
	for _, s := range system {
		if dir == s || strings.HasPrefix(dir, s+"/") {
			return true
		}
	}
	return false
}
