package builtin

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net/http"
	"path/filepath"

	"github.com/opensubstrate/sandbox/internal/bare"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/internal/vm"
	"github.com/opensubstrate/sandbox/internal/wasm"
	"github.com/opensubstrate/sandbox/locality"
)

// Config is what the built-in executors are made with, beyond what the
// host gives them (executor.Site): the limits runs get by default and
// the parts of this machine they use. The zero value is the defaults.
type Config struct {
	// MemoryPages caps a WASM guest's memory, in 64 KiB pages; default 4096.
	MemoryPages uint32
	// Memory, Pids and CPUs are a native run's cgroup limits (S1), and
	// size an S5 guest; defaults 1 GiB, 512, none.
	Memory int64
	Pids   int64
	CPUs   float64
	// EgressRoots verify credential-injected servers; default the system's.
	EgressRoots *x509.CertPool
	// S1Helper is the program S1 runs start as their init, and S5's
	// monitor is jailed by (default: sandbox-s1 beside this executable,
	// else this executable).
	S1Helper string
	// VMImage is the directory of the S5 guest image native units with
	// a kernel grant boot, and where vm units' kernels and initramfses
	// are found (default: vm in the state directory; `sandbox vm build`
	// makes it). VMAccel forces S5's accelerator ("kvm", "tcg").
	VMImage string
	VMAccel string
	// TEEProvider names the provider of S6's hardware evidence:
	// "configfs-tsm" (the default, "": real evidence on a confidential
	// VM, unavailable elsewhere) or "software" (for tests and wiring
	// only, never chosen unless named). TEERoot is the root the
	// configfs-tsm provider finds /sys/kernel/config under (default /).
	TEEProvider string
	TEERoot     string
	// Locality is S7's configuration (locality.ParseConfig): the anchors
	// a run's locality is measured against and the regions grants name.
	// Nil: S7 is unavailable, and says why.
	Locality *locality.Config
}

// Executors makes the built-in executors for the host at site, in the
// order the host prefers them within a tier. It has the signature of
// host.Config.Executors.
func (c Config) Executors(site executor.Site) ([]executor.Executor, error) {
	if c.MemoryPages == 0 {
		c.MemoryPages = 4096
	}
	var made []executor.Executor
	fail := func(err error) ([]executor.Executor, error) {
		for _, e := range made {
			if cl, ok := e.(io.Closer); ok {
				err = errors.Join(err, cl.Close())
			}
		}
		return nil, err
	}
	w, err := wasm.New(wasm.Config{
		CacheDir: site.CacheDir, CacheKey: site.Derive(wasm.CacheKeyContext), StateDir: site.StateDir, MemoryLimitPages: c.MemoryPages,
		Warn: site.Warn, TempName: site.TempName,
	})
	if err != nil {
		return fail(err)
	}
	made = append(made, w)
	n, err := native.New(native.Config{StateDir: site.StateDir, Memory: c.Memory, Pids: c.Pids, CPUs: c.CPUs, NoWarm: !site.Warm, EgressRoots: c.EgressRoots, TempName: site.TempName, Self: c.S1Helper, Cgroups: site.Cgroups})
	if err != nil {
		return fail(err)
	}
	made = append(made, n, bare.Executor{})
	// The software provider signs with a key of this host's, derived
	// from its host key, so its reports say which host made them.
	seed := site.Derive(teeSoftwareKeyContext)
	p, err := tee.Select(c.TEEProvider, c.TEERoot, ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		return fail(err)
	}
	if in, ok := any(n).(s1Like); ok { // S1's capabilities: Linux only
		s6 := confidential{in: in, provider: p}
		made = append(made, s6, sovereign{confidential: s6, cfg: c.Locality, client: &http.Client{}})
	}
	if c.VMImage == "" {
		c.VMImage = filepath.Join(site.StateDir, "vm")
	}
	jail := c.S1Helper // the same helper starts S1 runs and jails QEMU
	if jail == "" {
		jail, _ = native.HelperPath()
	}
	vc := vm.Config{ImageDir: c.VMImage, Accel: c.VMAccel, EgressRoots: c.EgressRoots, StateDir: site.StateDir,
		MemoryMiB: int(c.Memory >> 20), CPUs: int(math.Ceil(c.CPUs)), Pids: c.Pids, TempName: site.TempName, Jail: jail}
	for _, e := range vm.New(vc) {
		made = append(made, e)
	}
	return append(made, vm.NewFirecracker(vc, "")), nil
}

// teeSoftwareKeyContext derives the software evidence provider's key.
const teeSoftwareKeyContext = "sandbox tee software provider v1"

// KernelDenials says whether S1 runs on this host log the denials the
// kernel reports (Landlock's, through audit), and why not where they do
// not: a fact of the machine the doctor shows.
func KernelDenials() (bool, string) { return native.DenialReports() }
