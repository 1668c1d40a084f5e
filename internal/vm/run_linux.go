package vm

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
	"github.com/opensubstrate/sandbox/tier"
)

// BootTimeout bounds a boot when the run has no deadline of its own:
// a guest whose agent has not said hello by then is ended.
var BootTimeout = 60 * time.Second

// TCGBootTimeout is BootTimeout for a guest QEMU emulates (no KVM): a
// TCG boot takes tens of seconds on an idle machine and several times
// that on a busy one, and a bound hit there would call a working tier
// unavailable.
var TCGBootTimeout = 5 * time.Minute

// bootTimeout is the bound of a boot under accel.
func bootTimeout(accel string) time.Duration {
	if accel == "kvm" {
		return BootTimeout
	}
	return TCGBootTimeout
}

// KVMProbeTimeout bounds the boot that proves KVM works here (on a PVM
// host, stock kernels hang under it).
var KVMProbeTimeout = 15 * time.Second

// KillGrace is how long an interrupted program has to end before it is
// killed.
const KillGrace = 2 * time.Second

// Nobody is who a run's program is in its guest: the guest's root is
// its agent's, which a program running as root could trace or kill (as
// at S1, where a run is nobody too).
const Nobody = 65534

// SystemDirs are the host directories every guest sees, read-only: its
// programs, and the links Debian reaches some of them through (awk,
// editor, ...: /etc/alternatives holds links only).
var SystemDirs = []string{"/usr", "/etc/alternatives"}

func check(j *executor.Job) error {
	g := j.Grants
	switch {
	case len(g.Exec.Allow) > 0 || len(g.Exec.Deny) > 0:
		return &RefusedError{"an exec list: the guest's kernel decides what runs inside it, and the host cannot see its execs (run it at S1)"}
	case g.Confidential || g.Locality != "":
		return &RefusedError{"a confidential or locality grant (S6 and S7)"}
	case j.RootDir != "" || !j.Unit.Root.IsZero():
		return &RefusedError{"an image's root filesystem: an S5 guest runs on its own boot image (a vm unit)"}
	}
	for _, s := range g.Storage {
		if s.Quota > 0 {
			return &RefusedError{"a storage quota (the guest writes through 9p, which counts no bytes)"}
		}
	}
	return nil
}

// image is the boot image a run boots: its unit's own (kind vm: the
// unit's image is a sandbox.vm/1 manifest whose files lie in ImageDir),
// else the default.
func (e *Executor) image(j *executor.Job) (*boot.Image, error) {
	if e.kind != tier.VM {
		return boot.Open(e.cfg.ImageDir)
	}
	return boot.OpenManifest(j.Image, e.cfg.ImageDir)
}

// Run boots the unit's VM, runs its program under the guest's kernel,
// and ends the VM.
func (e *Executor) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if err := check(j); err != nil {
		return nil, err
	}
	im, err := e.image(j)
	if err != nil {
		return nil, err
	}
	if _, err := e.version(); err != nil {
		return nil, err
	}
	accel, why := e.accelerator(ctx, im)
	name := e.executorName(accel)
	res := &executor.Result{Executor: name, Notes: []string{e.accelNote(accel, why), guestNote(im)}}
	dir, err := e.cfg.mkTemp("sandbox-vm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	spec := Spec{Image: im, QEMU: e.cfg.QEMU, Jail: e.cfg.Jail, Accel: accel, Dir: dir, Cgroup: j.Cgroup, Hostname: "sandbox"}
	spec.MemoryMiB, spec.CPUs = e.cfg.size(j.Unit.Limits)
	if err := limitVM(j.Cgroup, spec.MemoryMiB, j.Unit.Limits); err != nil {
		return nil, err
	}
	spec.Shares, err = e.shares(j.Grants.Storage, j.Remap, e.kind != tier.VM)
	if err != nil {
		return nil, err
	}
	defer closeShares(spec.Shares)
	env := j.Unit.Env
	var files map[string][]byte
	if len(j.Grants.Net) > 0 {
		proxy, vars, ca, err := newProxy(j, e.cfg.EgressRoots)
		if err != nil {
			return nil, err
		}
		defer proxy.Close()
		spec.Egress, spec.Refused = proxy, refusedNote(j.Enforcer)
		env = withDefaults(env, vars)
		files = ca
	}
	bootCtx, deadline, cancelBoot := bootContext(ctx, j.Deadline, bootTimeout(accel))
	defer cancelBoot()
	res.Start = time.Now()
	m, err := Start(bootCtx, spec)
	closeShares(spec.Shares) // QEMU has its own
	if err != nil {
		res.End = time.Now()
		res.Outcome = failure(err, ctx)
		return res, nil
	}
	defer m.Kill()
	for p, b := range files {
		if err := m.WriteFile(bootCtx, p, b, 0o644); err != nil {
			res.End = time.Now()
			res.Outcome = failure(err, ctx)
			return res, nil
		}
	}
	if e.kind != tier.VM {
		if err := writeProgram(bootCtx, m, j, spec.mounts()); err != nil {
			res.End = time.Now()
			res.Outcome = failure(err, ctx)
			return res, nil
		}
	}
	return execute(ctx, m, j, env, res, deadline, false)
}

// writeProgram gives the guest a native unit's program where it is not
// in what the guest shares with the host: the very bytes the unit names,
// at the same path.
func writeProgram(ctx context.Context, m *Machine, j *executor.Job, ms []wire.Mount) error {
	if under(j.Unit.Entry, ms) {
		return nil
	}
	return m.WriteFile(ctx, j.Unit.Entry, j.Image, 0o755)
}

// execute runs j's program in the running guest m and fills res. A
// deadline or a budget ends the VM, or in a live sandbox (live) kills
// the program's process group; an interruption signals the program.
func execute(ctx context.Context, m *Machine, j *executor.Job, env map[string]string, res *executor.Result, deadline <-chan time.Time, live bool) (*executor.Result, error) {
	prog := j.Unit.Entry
	if j.OnStart != nil {
		j.OnStart(executor.Control{Freeze: func() error { return m.pause(ctx) }, Thaw: func() error { return m.resume(ctx) }})
	}
	argv := j.Unit.Args
	if len(argv) == 0 {
		argv = []string{prog}
	}
	cmd := wire.Command{Path: prog, Argv: argv, Env: envList(env), Dir: j.Unit.Dir, UID: Nobody, GID: Nobody, Pids: j.Unit.Limits.Pids}
	if cmd.Dir == "" {
		cmd.Dir = "/tmp"
	}
	execCtx, cancelExec := context.WithCancelCause(context.Background())
	defer cancelExec(nil)
	kill := m.Kill
	if live {
		kill = func() { cancelExec(ErrKill) }
	}
	type answer struct {
		st  wire.ExitStatus
		err error
	}
	ans := make(chan answer, 1)
	go func() {
		st, err := m.Exec(execCtx, cmd, j.Stdin, j.Stdout, j.Stderr, KillGrace)
		ans <- answer{st, err}
	}()
	var a answer
	how := ""
	select {
	case a = <-ans:
	case <-deadline:
		how = "deadline"
		kill()
		a = <-ans
	case <-ctx.Done():
		how = "canceled"
		if errors.Is(context.Cause(ctx), executor.ErrBudget) {
			how = "budget"
			kill()
			a = <-ans
			break
		}
		cancelExec(context.Cause(ctx))
		select {
		case a = <-ans:
		case <-time.After(KillGrace + 2*time.Second):
			kill()
			a = <-ans
		}
	}
	res.End = time.Now()
	res.Outcome, res.Signal, res.ExecErrno = outcome(a.st, a.err, how)
	return res, nil
}

var errDeadline = errors.New("the wall-clock deadline passed")

// bootContext is the context a boot runs under and the run's deadline:
// the deadline covers the boot, so a guest that never answers is ended
// by it (or by bound, when the run has none). stop releases both.
func bootContext(ctx context.Context, d, bound time.Duration) (context.Context, <-chan time.Time, func()) {
	bctx, cancel := context.WithTimeout(ctx, bound)
	if d <= 0 {
		return bctx, nil, cancel
	}
	t := time.NewTimer(d)
	bctx, cancel2 := context.WithTimeoutCause(bctx, d, errDeadline)
	return bctx, t.C, func() { t.Stop(); cancel2(); cancel() }
}

// failure is the outcome of a VM that could not be started or set up.
func failure(err error, ctx context.Context) attest.Outcome {
	var pe *PanicError
	switch {
	case errors.Is(err, errDeadline):
		return attest.Outcome{Status: attest.Deadline, Detail: "the wall-clock deadline passed before the guest was ready: " + err.Error()}
	case errors.As(err, &pe):
		return attest.Outcome{Status: attest.Trapped, Detail: err.Error()}
	case ctx.Err() != nil:
		return attest.Outcome{Status: attest.Killed, Detail: "interrupted before the guest was ready"}
	}
	return attest.Outcome{Status: attest.Failed, Detail: err.Error()}
}

func outcome(st wire.ExitStatus, err error, how string) (attest.Outcome, syscall.Signal, syscall.Errno) {
	var pe *PanicError
	switch {
	case how == "deadline":
		return attest.Outcome{Status: attest.Deadline, Detail: "the wall-clock deadline passed; the VM was ended"}, 0, 0
	case how == "budget":
		return attest.Outcome{Status: attest.BudgetExhausted, Detail: "stopped when a compute budget was spent; the VM was ended"}, 0, 0
	case errors.As(err, &pe):
		return attest.Outcome{Status: attest.Trapped, Detail: err.Error()}, 0, 0
	case how == "canceled" && err == nil && st.Signal == 0 && st.Error == "":
		c := st.Code
		return attest.Outcome{Status: attest.Exited, ExitCode: &c, Detail: "interrupted; the program handled the signal and exited"}, 0, 0
	case how == "canceled":
		return attest.Outcome{Status: attest.Killed, Detail: "interrupted"}, syscall.Signal(st.Signal), 0
	case err != nil:
		return attest.Outcome{Status: attest.Failed, Detail: err.Error()}, 0, 0
	case st.Error != "":
		return attest.Outcome{Status: attest.Failed, Detail: "in the guest: " + st.Error}, 0, syscall.Errno(st.Errno)
	case st.Signal != 0:
		sig := syscall.Signal(st.Signal)
		return executor.SignalOutcome(sig, " in the guest"), sig, 0
	}
	c := st.Code
	return attest.Outcome{Status: attest.Exited, ExitCode: &c}, 0, 0
}

// shares are the system directories (read-only; not for a VM image,
// which runs from its own root) and the storage grants, as 9p shares at
// the same paths, each reached as every tier reaches a grant
// (grant.Reach: no link followed, never the state directory) and held
// (hold), so that QEMU shares the very directory checked; a grant held
// at another path (remap) is reached there. On an error none is held.
func (e *Executor) shares(storage []grant.Storage, remap map[string]string, system bool) (out []Share, err error) {
	guard, err := e.guard()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			closeShares(out)
			out = nil
		}
	}()
	if system {
		for i, d := range SystemDirs {
			sh, err := hold(guard, wire.Mount{Tag: fmt.Sprintf("sys%d", i), Path: d, ReadOnly: true}, "")
			if err != nil {
				return out, err
			}
			out = append(out, sh)
		}
	}
	for i, s := range storage {
		m := wire.Mount{Tag: fmt.Sprintf("g%d", i), Path: s.Path, ReadOnly: s.Mode != grant.RW}
		if !m.ReadOnly {
			m.Owner = Nobody // the runs' user writes in it, as at S1
		}
		sh, err := hold(guard, m, remap[s.Path])
		if err != nil {
			return out, err
		}
		out = append(out, sh)
	}
	return out, nil
}

// guard is what no share may reach: the state directory, and, writable,
// sandbox's binaries and the jail helper QEMU starts through. Made once.
func (e *Executor) guard() (hostpath.Guard, error) {
	e.st.guardOnce.Do(func() {
		exe, _ := os.Executable()
		e.st.guard, e.st.guardErr = hostpath.NewGuard(e.cfg.StateDir, exe, e.cfg.Jail)
	})
	return e.st.guard, e.st.guardErr
}

// Helpers is the jail helper QEMU starts through, which the host runs as
// root: no writable grant may reach it.
func (e *Executor) Helpers() []string {
	if e.cfg.Jail == "" {
		return nil
	}
	return []string{e.cfg.Jail}
}

// under says whether p lies in one of the mounts as the guest sees them
// (/bin and friends are links into /usr there).
func under(p string, ms []wire.Mount) bool {
	for _, l := range []string{"/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if strings.HasPrefix(p, l) {
			p = "/usr" + p
		}
	}
	for _, m := range ms {
		if p == m.Path || strings.HasPrefix(p, strings.TrimSuffix(m.Path, "/")+"/") {
			return true
		}
	}
	return false
}

// newProxy makes the run's egress proxy (Start serves it, to the VM's
// QEMU only), the proxy settings of its programs and the files its guest
// trusts it by.
func newProxy(j *executor.Job, roots *x509.CertPool) (*egress.Proxy, map[string]string, map[string][]byte, error) {
	inj, err := egress.Secrets(j.Grants, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := egress.New(egress.Config{Enforcer: j.Enforcer, Inject: inj, UpstreamRoots: roots})
	if err != nil {
		return nil, nil, nil, err
	}
	// The guest's /etc is its own: it gets the system's roots, and with
	// injections the run's authority too, as at S1.
	files := map[string][]byte{egress.SystemRoots: egress.TrustBundle(nil)}
	ca := ""
	if pem := p.CACertPEM(); pem != nil {
		files[egress.CAPath] = egress.TrustBundle(pem)
		ca = egress.CAPath
	}
	return p, egress.ProxyEnv("http://"+GuestProxy, ca), files, nil
}

// refusedNote notes a connection to the run's proxy that was not its
// VM's in the run's decision log (nil: none kept).
func refusedNote(enf *grant.Enforcer) func(string) {
	if enf == nil {
		return nil
	}
	return func(msg string) { enf.Note(grant.KindNet, grant.OpConnect, "the run's egress proxy", false, msg) }
}

// withDefaults is env with defaults where it sets none (a copy).
func withDefaults(env, defaults map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range defaults {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
