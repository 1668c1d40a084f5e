package vm

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/tier"
)

// ErrNoQEMU: there is no qemu-system-x86_64 to run.
var ErrNoQEMU = errors.New("vm: QEMU is not installed (Debian: qemu-system-x86)")

// Config is an S5 executor's setup.
type Config struct {
	// ImageDir holds the default guest image (boot.Build's output): the
	// one a native unit with a kernel grant boots.
	ImageDir string
	// QEMU is the program; default qemu-system-x86_64 from PATH.
	QEMU string
	// KVM is the KVM device; default /dev/kvm. Accel forces an
	// accelerator ("kvm" or "tcg"); default: by proof.
	KVM   string
	Accel string
	// MemoryMiB and CPUs are the guest's size when the unit sets none.
	MemoryMiB int
	CPUs      int
	// Pids bounds a program's processes in its guest; default 512.
	Pids int64
	// EgressRoots verify credential-injected servers; default the
	// system's.
	EgressRoots *x509.CertPool
	// Jail is the helper QEMU starts through, confined (sandbox's S1
	// helper, which runs the monitor jail of internal/confine); without
	// one the probe refuses the rung.
	Jail string
	// StateDir is the host's state directory, which no share may reach
	// (nor contain, nor lie inside); "" guards none.
	StateDir string
	// TempName names the directories VMs keep their sockets and console
	// in (the host's lease names them, so that what a killed process
	// left is collected); nil: random names.
	TempName func(prefix string) string
}

// mkTemp makes a VM's directory in the system's temporary directory,
// named by TempName.
func (c Config) mkTemp(prefix string) (string, error) {
	return state.MkdirNamed(os.TempDir(), prefix, c.TempName)
}

// Executor runs units in microVMs at S5: native programs (kind native,
// with a kernel grant) in the default guest image, and VM images (kind
// vm, a sandbox.vm/1 manifest) in their own.
type Executor struct {
	cfg  Config
	kind tier.Kind
	st   *shared
}

// shared is what the executors of one host share: the probe and the
// accelerator it proved.
type shared struct {
	probe tier.Kept
	mu    sync.Mutex // the rest
	accel string
	why   string // why not KVM
	qemu  string // version
	// guard is what no share may reach, made once (guardOnce).
	guardOnce sync.Once
	guard     hostpath.Guard
	guardErr  error
}

// New makes the two S5 executors (native programs, VM images), which
// share one probe.
func New(cfg Config) []*Executor {
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 512
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.Pids == 0 {
		cfg.Pids = 512
	}
	if cfg.KVM == "" {
		cfg.KVM = "/dev/kvm"
	}
	st := &shared{}
	return []*Executor{{cfg: cfg, kind: tier.Native, st: st}, {cfg: cfg, kind: tier.VM, st: st}}
}

// Name is "qemu-microvm".
func (e *Executor) Name() string {
	if e.kind == tier.VM {
		return "qemu-microvm-image"
	}
	return "qemu-microvm"
}

// Tier is S5.
func (e *Executor) Tier() tier.Tier { return tier.S5 }

// Kind is native or vm.
func (e *Executor) Kind() tier.Kind { return e.kind }

// Overhead is the memory a VM's QEMU process is allowed beyond its
// guest's: the run's cgroup limit is the guest's memory plus this.
const Overhead = 256 << 20

// DefaultLimits: the guest's memory and CPUs.
func (e *Executor) DefaultLimits() unit.Limits { return e.cfg.limits() }

// limits are the limits a unit gets from this configuration.
func (c Config) limits() unit.Limits {
	return unit.Limits{MemoryBytes: int64(c.MemoryMiB) << 20, CPUMillis: int64(c.CPUs) * 1000, Pids: c.Pids}
}

// size is a guest's memory (MiB, at least 128) and CPUs from a unit's
// limits, this configuration's where they set none.
func (c Config) size(l unit.Limits) (int, int) {
	mem := int(l.MemoryBytes >> 20)
	if mem == 0 {
		mem = c.MemoryMiB
	}
	cpus := int((l.CPUMillis + 999) / 1000)
	if cpus == 0 {
		cpus = c.CPUs
	}
	return max(mem, 128), max(cpus, 1)
}

// limitVM bounds the cgroup a VM's monitor runs in (nil: none): the
// guest's memory and Overhead, the unit's CPU bandwidth.
func limitVM(cg *cgroup.Group, memMiB int, l unit.Limits) error {
	if cg == nil {
		return nil
	}
	return cg.SetLimits(cgroup.Limits{Memory: int64(memMiB)<<20 + Overhead, CPUs: float64(l.CPUMillis) / 1000})
}

// guestNote names the boot image a run's guest booted.
func guestNote(im *boot.Image) string {
	return fmt.Sprintf("S5 guest: kernel %s (%s), initramfs %s, boot manifest %s", im.Manifest.Kernel, im.Manifest.Release, im.Manifest.Initrd, im.Addr)
}

// qemuVersion is QEMU's version, "7.2.22".
func qemuVersion(prog string) (string, error) {
	if prog == "" {
		prog = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(prog)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoQEMU, err)
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("vm: %s --version: %v", p, err)
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "version" && i+1 < len(f) {
			return f[i+1], nil
		}
	}
	return "", fmt.Errorf("vm: cannot read QEMU's version from %q", strings.TrimSpace(string(out)))
}

// What S5 is, by the executor contract.
var (
	_ executor.Executor    = (*Executor)(nil)
	_ executor.Resumer     = (*Executor)(nil)
	_ executor.BootImager  = (*Executor)(nil)
	_ executor.Limiter     = (*Executor)(nil)
	_ executor.Session     = (*Session)(nil)
	_ executor.Snapshotter = (*Session)(nil)
	_ executor.PortDialer  = (*Session)(nil)
	_ executor.Executor    = (*Firecracker)(nil)
)

// OpenSession boots a live S5 sandbox's VM (Open) with spec. Its execs
// are native programs: the executor of vm units opens none, and a VM
// has no root filesystem but its boot image's. Its listen ports
// (spec.Listen) are forwarded by QEMU's user network from the loopback
// of the monitor's network namespace (Session.DialPort), which only the
// monitor jail gives it: without Config.Jail they are refused.
func (e *Executor) OpenSession(ctx context.Context, spec executor.SessionSpec) (executor.Session, error) {
	if err := e.sessionSpec(spec); err != nil {
		return nil, err
	}
	s, err := e.open(ctx, spec.Grants, spec.Limits, spec.Cgroup, "", spec.Listen)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ResumeSession resumes a suspended sandbox's VM (Reopen) from the
// memory image at path.
func (e *Executor) ResumeSession(ctx context.Context, spec executor.SessionSpec, path string) (executor.Session, error) {
	if err := e.sessionSpec(spec); err != nil {
		return nil, err
	}
	s, err := e.open(ctx, spec.Grants, spec.Limits, spec.Cgroup, path, spec.Listen)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// RefusedError is a grant S5 cannot honour as asked.
type RefusedError struct{ What string }

func (e *RefusedError) Error() string {
	return "S5 cannot honour " + e.What
}

// Invalid: the request cannot run at S5 as given.
func (e *RefusedError) Invalid() bool { return true }

// sessionSpec refuses what a live S5 sandbox cannot be.
func (e *Executor) sessionSpec(spec executor.SessionSpec) error {
	switch {
	case e.kind != tier.Native:
		return &RefusedError{"a live sandbox of vm units: a live S5 sandbox runs native programs in the executor's own guest image"}
	case slices.ContainsFunc(spec.Listen, func(p int) bool { return p < 1 || p > 65535 }):
		return &RefusedError{fmt.Sprintf("listen ports %v: a TCP port is 1 to 65535", spec.Listen)}
	case len(spec.Listen) > 0 && e.cfg.Jail == "":
		return &RefusedError{"listen ports without the monitor jail: the guest's ports are forwarded from the loopback of the network namespace the jail gives QEMU, and QEMU started as it is has the service's own"}
	case spec.RootDir != "":
		return &RefusedError{"an image's root filesystem: an S5 guest runs on its own boot image (a vm unit)"}
	}
	return nil
}
