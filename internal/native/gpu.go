package native

import (
	"fmt"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia"
	"github.com/opensubstrate/sandbox/tier"
)

// GPULibDir is where a GPU run finds the driver's libraries that are not
// already in its root at their host paths (an image root, or a driver
// installed outside the system directories).
const GPULibDir = "/nvidia/lib"

// What S1 gives besides the CPU.
var (
	_ executor.DeviceGiver  = (*Executor)(nil)
	_ executor.DeviceProber = (*Executor)(nil)
)

// Gives says S1 gives a run a GPU where the host has an NVIDIA GPU and
// its driver (DeviceProbe).
func (e *Executor) Gives(c device.Class) bool { return e.DeviceProbe(c).Available }

// DeviceProbe is whether S1 can give a run a device of class c here, and
// if not, why: for Gpu, the NVIDIA driver's nodes and /proc files found
// beneath Config.DevRoot (nvidia.Discover). An available answer is kept.
func (e *Executor) DeviceProbe(c device.Class) tier.Probe {
	if c != device.GPU {
		return tier.Probe{Reason: fmt.Sprintf("S1 gives no %s device", c)}
	}
	return e.gpuProbe.Get(func() tier.Probe {
		h, err := nvidia.Discover(e.devRoot())
		if err != nil {
			return tier.Probe{Reason: err.Error()}
		}
		e.gpuMu.Lock()
		e.gpuHost = h
		e.gpuMu.Unlock()
		var ids []string
		for _, g := range h.GPUs {
			ids = append(ids, g.Model+" "+g.UUID)
		}
		return tier.Probe{Available: true, Reason: fmt.Sprintf("NVIDIA driver %s, %d GPU(s): %v", h.Driver, len(h.GPUs), ids)}
	})
}

// GPUs is what the GPU probe found: nil where it is unavailable.
func (e *Executor) GPUs() *nvidia.Host {
	if !e.DeviceProbe(device.GPU).Available {
		return nil
	}
	e.gpuMu.Lock()
	defer e.gpuMu.Unlock()
	return e.gpuHost
}

func (e *Executor) devRoot() string {
	if e.cfg.DevRoot == "" {
		return "/"
	}
	return e.cfg.DevRoot
}
