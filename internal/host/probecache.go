package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/tier"
)

// ProbeKeyer is an executor whose probe result holds for as long as the
// machine runs the same kernel since the same boot and the executor's
// key (what it runs with: its helper's content address, its
// configuration) is the same: the host keeps it in the state directory,
// and a later process uses it instead of probing again.
type ProbeKeyer interface {
	ProbeKey() (string, error)
}

// cachedProbe is a probe result kept in cache/probes/NAME.json.
type cachedProbe struct {
	Boot   string     `json:"boot_id"`
	Kernel string     `json:"kernel"`
	Key    string     `json:"key"`
	Probe  tier.Probe `json:"probe"`
}

// bootAndKernel identify this boot of this kernel: the kernel's boot id
// and its release and version.
func bootAndKernel(procRoot string) (string, string) {
	b, _ := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id"))
	var u unix.Utsname
	unix.Uname(&u)
	return strings.TrimSpace(string(b)), unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Version[:])
}

// probeOf is an executor's probe: kept from an earlier process when
// boot, kernel and key are unchanged (and the host is not told to
// Reprobe), else probed now and kept if available. An unavailable
// result is never kept: whatever made it so may pass.
func (h *Host) probeOf(ctx context.Context, e Executor) tier.Probe {
	k, ok := e.(ProbeKeyer)
	if !ok || h.Store == nil {
		return e.Probe(ctx)
	}
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if p, ok := h.probes[e.Name()]; ok {
		return p
	}
	key, err := k.ProbeKey()
	if err != nil {
		return e.Probe(ctx)
	}
	boot, kernel := bootAndKernel(h.procRoot())
	path := h.Store.Path("cache", "probes", e.Name()+".json")
	if !h.Reprobe && boot != "" {
		var c cachedProbe
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &c) == nil &&
			c.Boot == boot && c.Kernel == kernel && c.Key == key && c.Probe.Available {
			h.remember(e.Name(), c.Probe)
			return c.Probe
		}
	}
	p := e.Probe(ctx)
	h.remember(e.Name(), p)
	if p.Available && boot != "" {
		b, _ := json.Marshal(cachedProbe{Boot: boot, Kernel: kernel, Key: key, Probe: p})
		if os.MkdirAll(filepath.Dir(path), 0o700) == nil {
			safefile.Write(path, b, 0o600) // a cache: a failure only costs the next process a probe
		}
	}
	return p
}

func (h *Host) remember(name string, p tier.Probe) {
	if h.probes == nil {
		h.probes = map[string]tier.Probe{}
	}
	h.probes[name] = p
}
