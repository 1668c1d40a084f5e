package vm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/firecracker"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
	"github.com/opensubstrate/sandbox/tier"
)

// Firecracker runs vm units (a sandbox.vm/1 image) in Firecracker
// microVMs, driven over the API socket, the agent reached over vsock.
// Firecracker shares no directories and has no user network: units with
// storage or net grants are refused (they run on QEMU).
type Firecracker struct {
	cfg    Config
	binary string
	probe  tier.Kept
}

// NewFirecracker is the Firecracker executor; binary "" is firecracker
// on PATH. It shares the QEMU executors' configuration (image, size).
func NewFirecracker(cfg Config, binary string) *Firecracker {
	if cfg.KVM == "" {
		cfg.KVM = "/dev/kvm"
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 512
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if binary == "" {
		binary = "firecracker"
	}
	return &Firecracker{cfg: cfg, binary: binary}
}

// Name is "firecracker".
func (f *Firecracker) Name() string { return "firecracker" }

// Tier is S5.
func (f *Firecracker) Tier() tier.Tier { return tier.S5 }

// Kind is vm.
func (f *Firecracker) Kind() tier.Kind { return tier.VM }

// Probe: a firecracker binary, KVM, the guest image, and a guest booted
// through the API that, from inside, runs its own kernel and sees none of
// the host's processes.
func (f *Firecracker) Probe(ctx context.Context) tier.Probe {
	return f.probe.Get(func() tier.Probe { return f.check(ctx) })
}

func (f *Firecracker) check(ctx context.Context) tier.Probe {
	if p := firecracker.Probe(f.binary, f.cfg.KVM); !p.Available {
		return p
	}
	im, err := boot.Open(f.cfg.ImageDir)
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, BootTimeout)
	defer cancel()
	m, err := f.start(ctx, im, 256, 1, nil)
	if err != nil {
		return tier.Probe{Reason: "a probe guest: " + err.Error()}
	}
	defer func() { m.Kill(); os.RemoveAll(m.spec.Dir) }()
	layers := isolation(ctx, m, im, boot.ToolDir+"/ls")
	for _, l := range layers {
		if !l.OK {
			return tier.Probe{Reason: "a probe guest: " + l.Name + ": " + l.Detail, Layers: layers}
		}
	}
	return tier.Probe{Available: true, Layers: layers, Reason: "a Firecracker microVM booted through its API and, from inside, ran its own kernel " + im.Manifest.Release + " and saw none of the host's processes (vm units without storage or net grants)"}
}

// start starts firecracker in cg, configures and boots the VM through
// the API, and connects to the guest agent over the vsock socket.
func (f *Firecracker) start(ctx context.Context, im *boot.Image, memMiB, cpus int, cg *cgroup.Group) (*Machine, error) {
	dir, err := f.cfg.mkTemp("sandbox-fc")
	if err != nil {
		return nil, err
	}
	spec := Spec{Image: im, Dir: dir}
	console, err := os.Create(spec.console())
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer console.Close()
	path, err := exec.LookPath(f.binary)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	api := filepath.Join(dir, "api.sock")
	m := &Machine{spec: spec, exited: make(chan struct{})}
	m.cmd = &exec.Cmd{Path: path, Args: []string{"firecracker", "--api-sock", api}, Stdout: console, Stderr: &lockedBuffer{b: &m.stderr}}
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cgroup.StartIn(m.cmd, cg); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("vm: starting firecracker: %w", err)
	}
	go func() { m.waitErr = m.cmd.Wait(); close(m.exited) }()
	ok := false
	defer func() {
		if !ok {
			m.Kill()
			os.RemoveAll(dir)
		}
	}()
	if c, err := m.dial(ctx, "api.sock"); err != nil {
		return nil, err
	} else {
		c.Close()
	}
	fc := firecracker.New(api)
	m.pause, m.resume = fc.Pause, fc.Resume
	m.state = func(ctx context.Context) (bool, string, error) {
		i, err := fc.Describe(ctx)
		if err != nil {
			return false, "", err
		}
		return i.State == "Running", i.State, nil
	}
	vsock := filepath.Join(dir, "v.sock")
	if err := fc.Configure(ctx, firecracker.Machine{VCPUs: cpus, MemoryMiB: memMiB}, firecracker.Boot{Kernel: im.Kernel, Initrd: im.Initrd, Cmdline: im.Manifest.Cmdline}, nil, &firecracker.Vsock{CID: 3, Path: vsock}); err != nil {
		return nil, err
	}
	if err := fc.Start(ctx); err != nil {
		return nil, err
	}
	c, err := m.connectVsock(ctx, vsock, wire.VsockPort)
	if err != nil {
		return nil, err
	}
	m.agent = newConn(c)
	go m.agent.serve()
	if err := m.greet(ctx); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// connectVsock connects to a guest port through Firecracker's vsock
// socket ("CONNECT port\n", answered "OK ...\n" once the guest listens;
// before that the connection is closed, and tried again).
func (m *Machine) connectVsock(ctx context.Context, path string, port uint32) (net.Conn, error) {
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			fmt.Fprintf(c, "CONNECT %d\n", port)
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err == nil && strings.HasPrefix(line, "OK ") {
				return &bufferedConn{Conn: c, r: br}, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, m.ended(fmt.Errorf("waiting for the guest agent on vsock port %d: %w", port, context.Cause(ctx)))
		case <-m.exited:
			return nil, m.ended(nil)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bufferedConn reads through the reader that read the handshake.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// DefaultLimits: the guest's memory and CPUs.
func (f *Firecracker) DefaultLimits() unit.Limits { return f.cfg.limits() }

// Run boots the unit's image, runs its program, and ends the VM.
func (f *Firecracker) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if err := check(j); err != nil {
		return nil, err
	}
	if len(j.Grants.Storage) > 0 || len(j.Grants.Net) > 0 {
		return nil, &RefusedError{"a storage or net grant on Firecracker, which shares no directories and has no user network (QEMU's microvm does)"}
	}
	im, err := boot.OpenManifest(j.Image, f.cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	mem, cpus := f.cfg.size(j.Unit.Limits)
	if err := limitVM(j.Cgroup, mem, j.Unit.Limits); err != nil {
		return nil, err
	}
	res := &executor.Result{Executor: "firecracker+kvm", Notes: []string{
		"S5 on Firecracker (KVM), driven over its API socket; the guest agent over vsock",
		guestNote(im)}}
	bctx, deadline, stop := bootContext(ctx, j.Deadline, BootTimeout)
	defer stop()
	res.Start = time.Now()
	// The VMM may have started others (a jailer's children), before its
	// boot ended or failed: a run that returns, however it ends, leaves
	// nothing running in its group.
	if j.Cgroup != nil {
		defer j.Cgroup.Kill(cgroup.EmptyWait)
	}
	m, err := f.start(bctx, im, mem, cpus, j.Cgroup)
	if err != nil {
		res.End = time.Now()
		res.Outcome = failure(err, ctx)
		return res, nil
	}
	defer func() {
		m.Kill()
		os.RemoveAll(m.spec.Dir)
	}()
	return execute(ctx, m, j, j.Unit.Env, res, deadline, false)
}
