package tier

import "sync"

// Kept holds a probe's answer once it is available. An unavailable one
// is returned but not kept: what made it so (a package not yet
// installed, a child that could not be set up on a loaded machine) may
// pass, and the next caller probes again. Probes run one at a time. The
// zero Kept is ready to use.
type Kept struct {
	mu sync.Mutex
	p  *Probe
}

// Get is the kept answer, or probe's now (kept if available).
func (k *Kept) Get(probe func() Probe) Probe {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.p != nil {
		return *k.p
	}
	p := probe()
	if p.Available {
		k.p = &p
	}
	return p
}
