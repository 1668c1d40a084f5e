package host

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/hw"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia"
	images "github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/internal/meter/nvml"
	"github.com/opensubstrate/sandbox/internal/meter/powercap"
	"github.com/opensubstrate/sandbox/internal/store"
)

// Config is what a host is made from: the state directory, what makes
// its executors, and the edges of this machine it reads.
type Config struct {
	// Home is the state directory (docs/spec/state.md).
	Home string
	// Rand makes the host key on first use; default crypto/rand.
	Rand io.Reader
	// Warm keeps a started S1 init ready for the next run: for a host
	// that runs many (the service); a one-shot run prewarms its own.
	Warm bool
	// CgroupRoot is where cgroups are mounted; default /sys/fs/cgroup.
	// Runs get their own groups only when sandbox is root.
	CgroupRoot string
	// SysfsRoot is where powercap is read; default /sys.
	SysfsRoot string
	// DevRoot is where the NVIDIA driver's nodes and /proc files are
	// read for the GPUs' identities where NVML gives none; default /.
	DevRoot string
	// TDP overrides the Estimator's rated powers ("cpu=225W,gpu=700W").
	TDP string
	// Warn receives warnings meant for people (a cache that cannot be
	// written); default none.
	Warn func(string)
	Log  *slog.Logger
	// Executors makes the executors the host runs units with, once the
	// state directory and the key are open (builtin.Config.Executors
	// makes the built-in ones); nil: none, and every tier is
	// unavailable.
	Executors func(executor.Site) ([]executor.Executor, error)
}

// New opens the state directory, takes this process's lease, and makes
// the executors (cfg.Executors), the meter and the cgroup hierarchy this
// machine has. Close releases what it holds.
func New(cfg Config) (*Host, error) {
	s, err := store.Open(cfg.Home)
	if err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	k, err := s.Key(cfg.Rand)
	if err != nil {
		return nil, err
	}
	// What this process makes for runs is named by its lease, so that
	// whatever it leaves if it is killed is found and removed (GC).
	if _, err := s.TakeLease(); err != nil {
		var en syscall.Errno
		if errors.As(err, &en) && (en == syscall.EROFS || en == syscall.EACCES || en == syscall.EPERM) {
			return nil, fmt.Errorf("the state directory %s cannot be written (%w): sandbox writes its leases, runs and caches there; give a writable one with --home or $SANDBOX_HOME", s.Root(), en)
		}
		return nil, err
	}
	root := cfg.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	var groups *cgroup.Hierarchy
	if cg, err := cgroup.Detect(root); err == nil && os.Geteuid() == 0 {
		groups = cg
	}
	var executors []executor.Executor
	if cfg.Executors != nil {
		site := executor.Site{StateDir: s.Root(), CacheDir: s.CacheDir(), TempName: s.Namer(), Derive: k.Derive, Warm: cfg.Warm, Warn: cfg.Warn, Cgroups: groups}
		if executors, err = cfg.Executors(site); err != nil {
			s.Lease.Close()
			return nil, err
		}
	}
	m, err := newMeter(cfg.SysfsRoot, cfg.TDP)
	if err != nil {
		s.Lease.Close()
		return nil, err
	}
	if err := OpenIndex(s); err != nil && cfg.Warn != nil {
		cfg.Warn(fmt.Sprintf("runs are listed by a scan: %v", err))
	}
	h := &Host{Store: s, Key: k, Executors: executors, Meter: m, Log: cfg.Log, closeLease: true, Images: images.Store{Dir: filepath.Join(s.Root(), "images")}}
	if cfg.Warm {
		// A host that runs many makes each run's directory ahead.
		s.Ready(4, RecordFiles)
	}
	h.Cgroups = groups
	for _, src := range m.Sources {
		if nv, ok := src.(*nvml.Source); ok {
			for _, st := range m.Statuses() {
				if st.Source == nv.Name() && st.State == meter.Live {
					h.Devices = append(h.Devices, nv.Devices()...)
				}
			}
		}
	}
	if !hasClass(h.Devices, device.GPU) {
		h.Devices = append(h.Devices, gpuIdentities(cfg.DevRoot)...)
	}
	return h, nil
}

// gpuIdentities are the host's NVIDIA GPUs as the attestation records
// them (model, driver, UUID), from the driver's /proc files beneath root
// (default /): where NVML is not built in or not loadable, a GPU that S1
// gives a run is still named. None where the driver is absent.
func gpuIdentities(root string) []attest.Device {
	if root == "" {
		root = "/"
	}
	nh, err := nvidia.Discover(root)
	if err != nil {
		return nil
	}
	var out []attest.Device
	for _, g := range nh.GPUs {
		out = append(out, attest.Device{Class: device.GPU, Model: g.Model, Driver: "nvidia " + nh.Driver, ID: g.UUID})
	}
	return out
}

func hasClass(ds []attest.Device, c device.Class) bool {
	for _, d := range ds {
		if d.Class == c {
			return true
		}
	}
	return false
}

// newMeter builds the meter of this machine: powercap under sysfs
// (default /sys), NVML, and the Estimator with rated powers detected or
// overridden by tdp ("cpu=225W,gpu=700W").
func newMeter(sysfs, tdp string) (*meter.Meter, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	n := runtime.NumCPU()
	m := &meter.Meter{
		Sources: []meter.Source{&powercap.Source{Root: sysfs}, &powercap.Source{Root: sysfs, DRAM: true}, &nvml.Source{}},
		NumCPU:  n,
		TDP:     map[device.Class]meter.TDP{device.CPU: meter.DetectTDP(hw.Describe("/proc").Host.CPU, n)},
		Burn:    burn,
	}
	if tdp != "" {
		conf, err := meter.ParseTDP(tdp)
		if err != nil {
			return nil, &ConfigError{Field: "TDP", Err: err}
		}
		for c, t := range conf {
			m.TDP[c] = t
		}
	}
	return m, nil
}

// ConfigError is a configuration value that cannot be used.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// Invalid says a configuration error is bad input.
func (e *ConfigError) Invalid() bool { return true }

// burn keeps one CPU busy until stop closes, for the meter's liveness probe.
func burn(stop <-chan struct{}) {
	x := uint64(1)
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 1<<16; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		sink = x
	}
}

var sink uint64
