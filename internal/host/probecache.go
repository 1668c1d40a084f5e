package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/tier"
)

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

// ProbeCache is where the state directory at root keeps the probes'
// results for its next processes.
func ProbeCache(root string) string { return filepath.Join(root, "cache", "probes") }

// ProbeRetry is how long a process goes on with an executor's
// unavailable probe before probing it again: what made it so (a package
// installed meanwhile, a machine too loaded to set up a child in time)
// may pass, and a long-running service must not refuse a tier for the
// rest of its life over one failed probe.
const ProbeRetry = 30 * time.Second

// ProbeOf is an executor's probe: the one this process has, if
// available or younger than ProbeRetry; else kept from an earlier
// process when boot, kernel and key are unchanged (and the host is not
// told to Reprobe); else probed now, and kept in the state directory if
// available. An unavailable result is never kept beyond the process.
func (h *Host) ProbeOf(ctx context.Context, e executor.Executor) tier.Probe {
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if r, ok := h.probes[e.Name()]; ok && (r.Available || h.Now().Sub(r.at) < ProbeRetry) {
		return r.Probe
	}
	k, ok := e.(executor.ProbeKeyer)
	if !ok || h.Store == nil {
		p := e.Probe(ctx)
		h.remember(e.Name(), p)
		return p
	}
	key, err := k.ProbeKey()
	if err != nil {
		p := e.Probe(ctx)
		h.remember(e.Name(), p)
		return p
	}
	boot, kernel := bootAndKernel(h.procRoot())
	path := filepath.Join(ProbeCache(h.Store.Root()), e.Name()+".json")
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

// probed is a probe's answer in this process, and when it was had.
type probed struct {
	tier.Probe
	at time.Time
}

func (h *Host) remember(name string, p tier.Probe) {
	if h.probes == nil {
		h.probes = map[string]probed{}
	}
	h.probes[name] = probed{p, h.Now()}
}
