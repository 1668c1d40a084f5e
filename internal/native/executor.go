package native

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/internal/unit"

	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/tier"
)

// ErrNotSupported is wrapped where S1 cannot exist (not Linux).
var ErrNotSupported = errors.New("S1 needs Linux")

// Config configures the S1 executor.
type Config struct {
	// StateDir holds the per-run root directories (roots/).
	StateDir string
	// Limits of each run's cgroup.
	Memory int64   // bytes; default 1 GiB
	Pids   int64   // default 512
	CPUs   float64 // default: no limit
	// TmpSize is the private /tmp's size in bytes; default 256 MiB.
	TmpSize int64
	// NoFile is RLIMIT_NOFILE; default 4096.
	NoFile uint64
	// Self is the path of the S1 helper binary (cmd/sandbox-s1, or any
	// binary that calls s1init.Main first). Default: sandbox-s1 beside
	// this executable if there is one, else this executable itself
	// (which works, but starts more slowly: it is larger).
	Self string
	// NoWarm turns off keeping one started init ready for the next run.
	NoWarm bool
	// EgressRoots verify the servers of credential-injected hosts (the
	// egress proxy speaks TLS to them itself); default the system's.
	EgressRoots *x509.CertPool
	// TempName names the temporary things runs make (roots, CA bundles,
	// probe directories) so that a collector can tell whose they are
	// (state.Lease.Name); nil gives random names, which nothing collects.
	TempName func(prefix string) string
	// DevRoot is where the host's devices and the driver's /proc files
	// and libraries are found ("/" by default; tests give a fake tree).
	DevRoot string
	// Cgroups is the host's cgroup layout where runs get groups of their
	// own (executor.Site's): the warm init is placed ahead in a group
	// made for its run (executor.Placer). Nil: it is not.
	Cgroups *cgroup.Hierarchy
}

// mkTemp makes a temporary directory under parent, named by TempName.
func (e *Executor) mkTemp(parent, prefix string) (string, error) {
	return state.MkdirNamed(parent, prefix, e.cfg.TempName)
}

// Executor runs native units at S1.
type Executor struct {
	cfg  Config
	warm warmPool
	// kernelExecOnly (tests) runs exec control on its fanotify layer alone.
	kernelExecOnly bool
	// addrs caches exec control's hashes by file identity (Linux).
	addrMu sync.Mutex
	addrs  map[s1init.FileKey]addr.Addr
	// loaders are the addresses of the system's ELF loaders (Linux).
	loadersOnce sync.Once
	loaders     map[addr.Addr]bool
	probe       tier.Kept
	rootProbes  sync.Map // image root directory → *tier.Kept
	guardOnce   sync.Once
	guardVal    hostpath.Guard
	guardErr    error
	// hostIDs leases runs' host identities (Linux, root); nil: the
	// host's range (tests set their own).
	hostIDs *hostIDs
	// gpuProbe keeps the GPU probe's available answer, gpuHost what it
	// found.
	gpuProbe tier.Kept
	gpuMu    sync.Mutex
	gpuHost  *nvidia.Host
	// plant (tests) puts device nodes in every run's root without
	// allowing them in its cgroup: what the cgroup alone refuses.
	plant []nvidia.Node
}

// New returns an S1 executor.
func New(cfg Config) (*Executor, error) {
	if cfg.Memory == 0 {
		cfg.Memory = 1 << 30
	}
	if cfg.Pids == 0 {
		cfg.Pids = 512
	}
	if cfg.TmpSize == 0 {
		cfg.TmpSize = 256 << 20
	}
	if cfg.NoFile == 0 {
		cfg.NoFile = 4096
	}
	if cfg.Self == "" {
		cfg.Self, _ = HelperPath()
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("native: a state directory is required")
	}
	return &Executor{cfg: cfg}, nil
}

// HelperPath is the program S1 runs start as their init, and how it was
// found: sandbox-s1 beside this executable (small, quick to start), else
// this executable itself, which carries the same helper.
func HelperPath() (path, how string) {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "sandbox-s1"); isExecutable(p) {
			return p, "sandbox-s1 beside sandbox"
		}
	}
	return "/proc/self/exe", "sandbox itself (no sandbox-s1 beside it: S1 runs start sandbox's own binary as their init)"
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func (e *Executor) self() string { return e.cfg.Self }

// Helpers is the S1 helper the host runs as root (each run's init): no
// writable grant may reach it.
func (e *Executor) Helpers() []string { return []string{e.self()} }

// Helper runs this process as an S1 helper when its arguments say so (see
// s1init.Main).
func Helper() (int, bool) { return s1init.Main() }

// DefaultLimits are the limits a run gets from this executor's
// configuration, as a unit records them.
func (e *Executor) DefaultLimits() unit.Limits {
	return unit.Limits{MemoryBytes: e.cfg.Memory, Pids: e.cfg.Pids, CPUMillis: int64(e.cfg.CPUs*1000 + 0.5)}
}

// Name names the executor.
func (e *Executor) Name() string { return "linux-s1" }

// Tier is S1.
func (e *Executor) Tier() tier.Tier { return tier.S1 }

// Kind is native.
func (e *Executor) Kind() tier.Kind { return tier.Native }

// What S1 is, by the executor contract.
var (
	_ executor.Executor  = (*Executor)(nil)
	_ executor.Sessioner = (*Executor)(nil)
	_ executor.Limiter   = (*Executor)(nil)
	_ executor.Prewarmer = (*Executor)(nil)
	_ executor.Helpers   = (*Executor)(nil)
	_ executor.Session   = (*Session)(nil)
	_ executor.Freezer   = (*Session)(nil)
)

// OpenSession opens a live S1 sandbox (Open) with spec.
func (e *Executor) OpenSession(ctx context.Context, spec executor.SessionSpec) (executor.Session, error) {
	s, err := e.Open(ctx, spec.Grants, spec.Limits, spec.Cgroup, spec.Listen, spec.RootDir)
	if err != nil {
		return nil, err
	}
	return s, nil
}
