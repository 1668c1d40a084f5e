package live

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/state"
)

// Manager keeps a host's live sandboxes: it holds the host (the engine
// that plans, runs and seals every exec) and adds what outlives one run:
// sandboxes and their records, parking and the preservation fence, warm
// pools, seeding, files, bundles.
type Manager struct {
	*host.Host

	// ParkWait is how long a suspension waits for an S2 sandbox's execs
	// to park; 0 means ParkWait.
	ParkWait time.Duration
	// WorkspaceMax bounds each live sandbox's workspace, in bytes, where
	// its spec sets none (SandboxSpec.Limits.WorkspaceBytes); 0 means
	// DefaultWorkspaceMax, a negative value no bound.
	WorkspaceMax int64
	// Volumes is the directory bounded workspaces (volumes), and a
	// fork's copy of one, are made in; "" means the system's temporary
	// directory, where unbounded ones are always made. A pool
	// (volume.Pool, UsePool) where that directory's filesystem cannot
	// share extents: a fork then copies no data.
	Volumes string
	// cluster, once set (Join), is the cluster's keeping of suspended
	// sandboxes (shared.go) and its work queue (a fleet's items run on
	// whichever of its hosts takes them: fleetitem.go). Set while the
	// manager's goroutines (warm pools, the idle fence) run: read
	// atomically.
	cluster atomic.Pointer[clusterHooks]
	// sharedGood holds the addresses (addr.Addr) of objects this
	// process has seen whole in the cluster's blob store (put there, or
	// read back and checked), each with the store's epoch then
	// (BlobHolder): known only while no collection has begun since.
	sharedGood sync.Map
	// forkImages are the workspace images a fork made for its children
	// (child id → forkImage), taken by each child's making.
	forkImages sync.Map

	sandboxes sandboxes
	pools     pools
	idle      idleKeeper
	previews  previews
	// lifecycleMu: one writer of lifecycle records at a time.
	lifecycleMu sync.Mutex
}

// New is the manager of h's live sandboxes. h tells its authority check
// whose each workspace is through it.
func New(h *host.Host) *Manager {
	m := &Manager{Host: h}
	h.Workspaces = m.workspaces
	return m
}

// workspaces are the live sandboxes' workspaces and whose they are.
func (h *Manager) workspaces() []host.Workspace {
	h.sandboxes.mu.Lock()
	defer h.sandboxes.mu.Unlock()
	var out []host.Workspace
	for _, sb := range h.sandboxes.m {
		if sb.Workspace != "" {
			out = append(out, host.Workspace{Owner: sb.Owner, Path: sb.Workspace})
		}
	}
	return out
}

// Close ends the live sandboxes (each parked, or its record closed, as
// closeSandboxes does), the pools and the idle fence, then the host.
func (h *Manager) Close() error {
	h.stopPools()
	h.stopIdle()
	first := h.closeSandboxes()
	if err := h.Host.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// Light is a manager of a light host (host.Light): the state directory's
// records and bundles, no executor.
func Light(d *state.Dir) *Manager { return New(host.Light(d)) }
