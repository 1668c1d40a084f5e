package native

import (
	"errors"
	"fmt"
	"sync"

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
	// Self is the path of the binary that holds the S1 helpers; default
	// /proc/self/exe.
	Self string
}

// Executor runs native units at S1.
type Executor struct {
	cfg       Config
	probeOnce sync.Once
	probe     tier.Probe
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
		cfg.Self = "/proc/self/exe"
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("native: a state directory is required")
	}
	return &Executor{cfg: cfg}, nil
}

// Name names the executor.
func (e *Executor) Name() string { return "linux-s1" }

// Tier is S1.
func (e *Executor) Tier() tier.Tier { return tier.S1 }

// Kind is native.
func (e *Executor) Kind() tier.Kind { return tier.Native }
