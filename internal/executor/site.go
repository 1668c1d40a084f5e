package executor

import "github.com/opensubstrate/sandbox/internal/cgroup"

// Site is what a host gives the executors it makes (host.Config's
// Executors): where they keep what they make and cache, how they name
// it, the keys their caches are sealed with, and what kind of host it is.
type Site struct {
	// StateDir is the host's state directory: no grant may reach it.
	StateDir string
	// CacheDir is where executors keep caches (compiled modules).
	CacheDir string
	// TempName names the temporary things runs make there, so that a
	// collector can tell whose they are (state.Lease.Name).
	TempName func(prefix string) string
	// Derive derives a key from the host key for a context: a cache's
	// MAC key, say.
	Derive func(context string) [32]byte
	// Warm says the host runs many units (the service): an executor may
	// keep something started ready for the next run (S1's init).
	Warm bool
	// Cgroups is the host's cgroup layout where runs get groups of their
	// own (root), nil where they do not: an executor that places its
	// next run's process ahead (Placer) makes its groups there.
	Cgroups *cgroup.Hierarchy
	// Warn receives warnings meant for people (a cache that cannot be
	// written); nil drops them.
	Warn func(string)
}
