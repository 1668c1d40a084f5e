package vm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/confine"
	"github.com/opensubstrate/sandbox/internal/confine/netns"
	"github.com/opensubstrate/sandbox/internal/confine/syscalls"
	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// GuestIP is the guest's address on its network device, GuestAddr with
// its prefix. GuestProxy is where a guest with net grants reaches its
// egress proxy: QEMU's user network forwards this one address to the
// host's proxy and nothing else (restrict=on).
const (
	GuestIP    = "10.0.2.15"
	GuestAddr  = GuestIP + "/24"
	GuestProxy = "10.0.2.100:3128"
)

// Spec is one VM to start.
type Spec struct {
	Image *boot.Image
	QEMU  string // the program; default "qemu-system-x86_64"
	Accel string // "kvm" or "tcg"
	// MemoryMiB and CPUs size the guest.
	MemoryMiB int
	CPUs      int
	// Shares are host directories the guest sees at the same paths,
	// each held by hold: QEMU opens it through the descriptor it is
	// handed, never by path. Their holder closes them after Start.
	Shares []Share
	// Egress is the run's egress proxy (nil: none; without Listen ports
	// either, no network device at all).
	// The guest reaches it at GuestProxy, the one address QEMU's user
	// network forwards, to a Unix socket in Dir on which the proxy
	// serves only this VM's QEMU; another connection is closed unserved
	// and said through Refused (nil: not said).
	Egress  *egress.Proxy
	Refused func(string)
	// Listen are the guest's listen ports. QEMU's user network forwards
	// each from the same port on the loopback of the monitor's network
	// namespace (the jail's: Jail must be set) to the guest's address;
	// the host reaches them by entering that namespace (NetNS).
	Listen []int
	// Cgroup takes the QEMU process from its first instruction.
	Cgroup *cgroup.Group
	// Dir holds the VM's sockets and console log; it must exist.
	Dir string
	// Incoming is a memory image to resume from instead of booting.
	Incoming string
	// Hostname is the guest's.
	Hostname string
	// Jail is the helper QEMU is started through, confined (the monitor
	// jail, internal/confine: a read-only host but for Dir and the read-write mounts,
	// three capabilities, no_new_privs); "" starts QEMU as it is.
	Jail string
}

// command is QEMU's command line at path, through the jail if there is one.
func (s Spec) command(path string) (string, []string, error) {
	qemu := append([]string{path}, s.args()...)
	if s.Jail == "" {
		return path, qemu, nil
	}
	filter, err := syscalls.MonitorFilter()
	if err != nil {
		return "", nil, err
	}
	// Only the VM's own directory is writable in the jail: the shares
	// come by descriptor, writable where they are, and are mounted
	// nowhere in its namespace.
	a := []string{s.Jail, confine.MonitorJailArg, confine.InsnsText(filter), s.Dir}
	return s.Jail, append(append(a, "--"), qemu...), nil
}

// Machine is a running VM and its agent.
type Machine struct {
	spec    Spec
	cmd     *exec.Cmd
	agent   *conn
	egress  *egressListener
	Hello   wire.HelloMsg
	exited  chan struct{}
	waitErr error
	// pidfd is QEMU's (the jail executes it in its own process): it
	// names that process, never one its pid is given to after it.
	pidfd     int
	pidfdOnce sync.Once
	stderr    bytes.Buffer
	// Booted is when the agent's hello arrived.
	Booted time.Time
	// pause and resume stop and continue the guest's vCPUs through its
	// monitor (QMP for QEMU, the API for Firecracker), and state reads
	// back from it whether they run, and the monitor's word for it.
	pause, resume func(context.Context) error
	state         func(context.Context) (running bool, status string, err error)
}

// Console is the path of the guest's serial console log.
func (s Spec) console() string { return filepath.Join(s.Dir, "console.log") }

func (s Spec) args() []string {
	im := s.Image
	a := []string{
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-display", "none",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-m", strconv.Itoa(s.MemoryMiB) + "M", "-smp", strconv.Itoa(max(1, s.CPUs)),
		"-kernel", im.Kernel, "-initrd", im.Initrd, "-append", s.cmdline(),
		"-serial", "file:" + s.console(),
		"-chardev", "socket,id=agent,path=" + filepath.Join(s.Dir, "agent.sock") + ",server=on,wait=off",
		"-device", "virtio-serial-device", "-device", "virtserialport,chardev=agent,name=" + wire.PortName,
		"-qmp", "unix:" + filepath.Join(s.Dir, "qmp.sock") + ",server=on,wait=off",
	}
	if s.Accel == "kvm" {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		a = append(a, "-accel", "tcg,tb-size=64", "-cpu", "max")
	}
	for i, sh := range s.Shares {
		// QEMU opens the share through the descriptor it inherits (the
		// i-th of ExtraFiles): the directory that was checked, whatever
		// its path names now.
		root := fmt.Sprintf("/proc/self/fd/%d", shareFD(i))
		// Read-write shares keep the guest's owners and modes in
		// extended attributes, not on the host's files: QEMU runs as root,
		// and a set-id bit a guest sets must never reach a host file.
		fs := fmt.Sprintf("local,id=fs%d,path=%s,security_model=mapped-xattr", i, root)
		if sh.Mount.ReadOnly {
			fs = fmt.Sprintf("local,id=fs%d,path=%s,security_model=none,readonly=on", i, root)
		}
		a = append(a, "-fsdev", fs, "-device", fmt.Sprintf("virtio-9p-device,fsdev=fs%d,mount_tag=%s", i, sh.Mount.Tag))
	}
	if s.Egress != nil || len(s.Listen) > 0 {
		// restrict=on: the guest reaches nothing but what is forwarded.
		nd := "user,id=n0,restrict=on,net=10.0.2.0/24"
		if s.Egress != nil {
			nd += ",guestfwd=tcp:" + GuestProxy + "-unix:" + filepath.Join(s.Dir, egressSock)
		}
		for _, p := range s.Listen {
			nd += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-%s:%d", p, GuestIP, p)
		}
		a = append(a, "-netdev", nd, "-device", "virtio-net-device,netdev=n0")
	}
	if s.Incoming != "" {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// cmdline is the manifest's command line, with the host's clock rate
// under TCG (boot.TCGClock).
func (s Spec) cmdline() string {
	if s.Accel == "kvm" {
		return s.Image.Manifest.Cmdline
	}
	return s.Image.Manifest.Cmdline + boot.TCGClock()
}

// shareFD is the descriptor QEMU has share i at: ExtraFiles start at 3.
func shareFD(i int) int { return 3 + i }

// mounts are how the guest mounts the shares.
func (s Spec) mounts() []wire.Mount {
	out := make([]wire.Mount, len(s.Shares))
	for i, sh := range s.Shares {
		out[i] = sh.Mount
	}
	return out
}

// Start starts QEMU in spec.Cgroup and waits for the agent's hello (or
// ctx): a VM that does not answer in time is ended.
func Start(ctx context.Context, spec Spec) (*Machine, error) {
	if spec.QEMU == "" {
		spec.QEMU = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(spec.QEMU)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoQEMU, err)
	}
	m := &Machine{spec: spec, exited: make(chan struct{})}
	m.pause = func(ctx context.Context) error { _, err := m.qmp(ctx, map[string]any{"execute": "stop"}); return err }
	m.resume = func(ctx context.Context) error { _, err := m.qmp(ctx, map[string]any{"execute": "cont"}); return err }
	m.state = func(ctx context.Context) (bool, string, error) {
		out, err := m.qmp(ctx, map[string]any{"execute": "query-status"})
		if err != nil {
			return false, "", err
		}
		var st struct {
			Running *bool  `json:"running"`
			Status  string `json:"status"`
		}
		if err := json.Unmarshal(out[0], &st); err != nil || st.Running == nil || st.Status == "" {
			return false, "", fmt.Errorf("vm: QMP query-status answered %s", out[0])
		}
		return *st.Running, st.Status, nil
	}
	prog, argv, err := spec.command(path)
	if err != nil {
		return nil, fmt.Errorf("vm: the monitor's seccomp filter: %w", err)
	}
	m.cmd = &exec.Cmd{Path: prog, Args: argv, Stderr: &lockedBuffer{b: &m.stderr}}
	m.pidfd = -1
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &m.pidfd}
	for _, sh := range spec.Shares {
		if sh.tree == nil {
			return nil, fmt.Errorf("vm: the share %s was not held (hold makes shares)", sh.Mount.Path)
		}
		m.cmd.ExtraFiles = append(m.cmd.ExtraFiles, sh.tree)
	}
	if spec.Egress != nil {
		// Listening before QEMU starts: its user network connects at once.
		if m.egress, err = listenEgress(filepath.Join(spec.Dir, egressSock), spec.Refused); err != nil {
			return nil, err
		}
		go spec.Egress.Serve(m.egress)
	}
	if err := cgroup.StartIn(m.cmd, spec.Cgroup); err != nil {
		if m.egress != nil {
			m.egress.Close()
		}
		if m.pidfd >= 0 {
			unix.Close(m.pidfd)
		}
		return nil, fmt.Errorf("vm: starting QEMU: %w", err)
	}
	if m.egress != nil {
		m.egress.admit(m.cmd.Process.Pid) // the jail executes QEMU in its own process
	}
	go func() { m.waitErr = m.cmd.Wait(); close(m.exited) }()
	ok := false
	defer func() {
		if !ok {
			m.Kill()
		}
	}()
	if spec.Incoming != "" {
		if err := m.incoming(ctx, spec.Incoming); err != nil {
			return nil, err
		}
	}
	c, err := m.dial(ctx, "agent.sock")
	if err != nil {
		return nil, err
	}
	m.agent = newConn(c)
	go m.agent.serve()
	if spec.Incoming == "" {
		if err := m.greet(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return m, nil
}

// greet takes a booted guest's hello and sets it up.
func (m *Machine) greet(ctx context.Context) error {
	f, err := m.recv(ctx, m.agent.control, "the guest agent's hello")
	if err != nil {
		return err
	}
	if f.Type != wire.Hello {
		return fmt.Errorf("%w: its first frame was %s, not hello", ErrGuest, f.Type)
	}
	if err := wire.Decode(f, &m.Hello); err != nil {
		return fmt.Errorf("%w: %v", ErrGuest, err)
	}
	m.Booted = time.Now()
	return m.setup(ctx)
}

func (m *Machine) setup(ctx context.Context) error {
	cfg := wire.Config{Mounts: m.spec.mounts(), Hostname: m.spec.Hostname}
	if m.spec.Egress != nil || len(m.spec.Listen) > 0 {
		cfg.Net = &wire.Net{Addr: GuestAddr}
		if m.spec.Egress != nil {
			cfg.Net.Proxy = "http://" + GuestProxy
		}
	}
	st, err := m.control(ctx, wire.Setup, cfg, "setup")
	if err == nil && st.Error != "" {
		err = fmt.Errorf("vm: the guest could not set up its mounts and network: %s", st.Error)
	}
	return err
}

// control sends a request on stream 0 and reads its Ready answer.
func (m *Machine) control(ctx context.Context, t wire.Type, v any, what string) (wire.Status, error) {
	var st wire.Status
	if err := m.agent.sendJSON(t, 0, v); err != nil {
		return st, m.ended(err)
	}
	f, err := m.recv(ctx, m.agent.control, "the guest's "+what)
	if err != nil {
		return st, err
	}
	if f.Type != wire.Ready {
		return st, fmt.Errorf("%w: it answered %s with %s", ErrGuest, what, f.Type)
	}
	if err := wire.Decode(f, &st); err != nil {
		return st, fmt.Errorf("%w: %v", ErrGuest, err)
	}
	return st, nil
}

// dial connects to one of QEMU's sockets once it exists.
func (m *Machine) dial(ctx context.Context, name string) (net.Conn, error) {
	p := filepath.Join(m.spec.Dir, name)
	for {
		c, err := net.Dial("unix", p)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, m.ended(context.Cause(ctx))
		case <-m.exited:
			return nil, m.ended(nil)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// recv takes the next frame of ch, or says why none comes.
func (m *Machine) recv(ctx context.Context, ch <-chan wire.Frame, what string) (wire.Frame, error) {
	select {
	case f, ok := <-ch:
		if !ok {
			return f, m.ended(m.agent.Err())
		}
		return f, nil
	case <-ctx.Done():
		return wire.Frame{}, m.ended(fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx)))
	case <-m.exited:
		return wire.Frame{}, m.ended(nil)
	}
}

// ended explains why the VM stopped answering: a panic in its console,
// QEMU's own error, or cause.
func (m *Machine) ended(cause error) error {
	if errors.Is(cause, ErrGuest) || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) || errors.Is(cause, errDeadline) {
		return cause
	}
	// The agent's connection ends before QEMU does: a panicking guest
	// powers off a moment after its agent is gone.
	select {
	case <-m.exited:
	case <-time.After(2 * time.Second):
		if cause != nil {
			return cause
		}
		return errors.New("vm: the guest agent stopped answering")
	}
	if p := m.Panic(); p != "" {
		return &PanicError{Line: p}
	}
	msg := strings.TrimSpace(m.stderrString())
	if msg != "" {
		return fmt.Errorf("vm: QEMU ended (%v): %s", m.waitErr, lastLine(msg))
	}
	if cause != nil {
		return cause
	}
	return fmt.Errorf("vm: the VM ended (%v) before its agent answered", m.waitErr)
}

// PanicError: the guest kernel panicked (the VM powered itself off).
type PanicError struct{ Line string }

func (e *PanicError) Error() string { return "vm: the guest kernel panicked: " + e.Line }

// Panic is the console's "Kernel panic" line, if the guest printed one.
func (m *Machine) Panic() string {
	b, _ := os.ReadFile(m.spec.console())
	i := bytes.Index(b, []byte("Kernel panic"))
	if i < 0 {
		return ""
	}
	line, _, _ := bytes.Cut(b[i:], []byte("\n"))
	return strings.TrimSpace(string(line))
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (m *Machine) stderrString() string {
	lb := m.cmd.Stderr.(*lockedBuffer)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return m.stderr.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}

// Kill ends the VM at once and waits for QEMU to be gone.
func (m *Machine) Kill() {
	if m.agent != nil {
		m.agent.Close()
	}
	if m.cmd.Process != nil {
		syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		m.cmd.Process.Kill()
	}
	<-m.exited
	m.pidfdOnce.Do(func() {
		if m.pidfd >= 0 {
			unix.Close(m.pidfd)
		}
	})
	if m.egress != nil {
		m.egress.Close()
	}
}

// NetNS opens the network namespace of the VM's monitor, whose loopback
// its Listen ports are forwarded from. It is refused when the monitor is
// in the service's own namespace (started without the jail) or has
// ended: its pid then names nothing of the VM's.
func (m *Machine) NetNS() (*os.File, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", m.cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("vm: the monitor's network namespace: %w", err)
	}
	// QEMU still lives (or is not reaped) after the open: the pid was
	// its when the namespace was opened, not another's it was given to.
	if m.pidfd < 0 || unix.PidfdSendSignal(m.pidfd, 0, nil, 0) != nil {
		ns.Close()
		return nil, m.ended(errors.New("vm: QEMU ended before its network namespace was held"))
	}
	if own, err := netns.Own(ns); err != nil || !own {
		ns.Close()
		if err == nil {
			err = errors.New("it is the service's own: QEMU was started without the monitor jail")
		}
		return nil, fmt.Errorf("vm: the monitor's network namespace: %w", err)
	}
	return ns, nil
}

// Exited is closed when QEMU has ended.
func (m *Machine) Exited() <-chan struct{} { return m.exited }

// Pid is QEMU's process.
func (m *Machine) Pid() int { return m.cmd.Process.Pid }

// ErrKill, as the cause of Exec's ctx, kills the program at once
// instead of interrupting it.
var ErrKill = errors.New("vm: killed")

// Exec runs a command in the guest: stdin is sent to it (nil: none),
// its output streamed to stdout and stderr. A done ctx sends it SIGINT,
// and after grace, SIGKILL; its exit status is still the answer.
func (m *Machine) Exec(ctx context.Context, c wire.Command, stdin io.Reader, stdout, stderr io.Writer, grace time.Duration) (wire.ExitStatus, error) {
	id, ch, err := m.agent.open()
	if err != nil {
		return wire.ExitStatus{}, m.ended(err)
	}
	defer m.agent.close(id)
	if err := m.agent.sendJSON(wire.Exec, id, c); err != nil {
		return wire.ExitStatus{}, m.ended(err)
	}
	if stdin != nil {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 && m.agent.send(wire.Frame{Type: wire.Stdin, Stream: id, Data: buf[:n]}) != nil {
					return
				}
				if err != nil {
					break
				}
			}
			m.agent.send(wire.Frame{Type: wire.Stdin, Stream: id, Data: []byte{}})
		}()
	} else {
		m.agent.send(wire.Frame{Type: wire.Stdin, Stream: id, Data: []byte{}})
	}
	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				return wire.ExitStatus{}, m.ended(m.agent.Err())
			}
			switch f.Type {
			case wire.Stdout:
				if stdout != nil {
					stdout.Write(f.Data)
				}
			case wire.Stderr:
				if stderr != nil {
					stderr.Write(f.Data)
				}
			case wire.Exit:
				var st wire.ExitStatus
				if err := wire.Decode(f, &st); err != nil {
					return st, fmt.Errorf("%w: %v", ErrGuest, err)
				}
				return st, nil
			default:
				return wire.ExitStatus{}, fmt.Errorf("%w: a %s frame in answer to an exec", ErrGuest, f.Type)
			}
		case <-done:
			done = nil
			if errors.Is(context.Cause(ctx), ErrKill) {
				m.agent.sendJSON(wire.Signal, id, wire.SignalMsg{Signal: int(syscall.SIGKILL)})
				break
			}
			m.agent.sendJSON(wire.Signal, id, wire.SignalMsg{Signal: int(syscall.SIGINT)})
			kill = time.After(grace)
		case <-kill:
			m.agent.sendJSON(wire.Signal, id, wire.SignalMsg{Signal: int(syscall.SIGKILL)})
			kill = nil
		case <-m.exited:
			return wire.ExitStatus{}, m.ended(nil)
		}
	}
}

// ReadFile reads a guest file (at most limit bytes).
func (m *Machine) ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	id, ch, err := m.agent.open()
	if err != nil {
		return nil, m.ended(err)
	}
	defer m.agent.close(id)
	if err := m.agent.sendJSON(wire.ReadFile, id, wire.File{Path: path}); err != nil {
		return nil, m.ended(err)
	}
	var out bytes.Buffer
	for {
		f, err := m.recv(ctx, ch, "a file's contents")
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case wire.FileData:
			if int64(out.Len()+len(f.Data)) > limit {
				return nil, fmt.Errorf("vm: %s in the guest is over %d bytes", path, limit)
			}
			out.Write(f.Data)
		case wire.FileEnd:
			var st wire.Status
			if err := wire.Decode(f, &st); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrGuest, err)
			}
			if st.Error != "" {
				return nil, &GuestError{Op: "read", Path: path, Msg: st.Error, Errno: syscall.Errno(st.Errno)}
			}
			return out.Bytes(), nil
		default:
			return nil, fmt.Errorf("%w: a %s frame in answer to a read", ErrGuest, f.Type)
		}
	}
}

// WriteFile writes a guest file, making its missing directories.
func (m *Machine) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	id, ch, err := m.agent.open()
	if err != nil {
		return m.ended(err)
	}
	defer m.agent.close(id)
	if err := m.agent.sendJSON(wire.WriteFile, id, wire.File{Path: path, Mode: uint32(mode.Perm()), Parents: true}); err != nil {
		return m.ended(err)
	}
	for len(data) > 0 {
		n := min(len(data), 256<<10)
		if err := m.agent.send(wire.Frame{Type: wire.FileData, Stream: id, Data: data[:n]}); err != nil {
			return m.ended(err)
		}
		data = data[n:]
	}
	if err := m.agent.sendJSON(wire.FileEnd, id, wire.Status{}); err != nil {
		return m.ended(err)
	}
	f, err := m.recv(ctx, ch, "a write's end")
	if err != nil {
		return err
	}
	var st wire.Status
	if f.Type != wire.Done {
		return fmt.Errorf("%w: a %s frame in answer to a write", ErrGuest, f.Type)
	}
	if err := wire.Decode(f, &st); err != nil {
		return fmt.Errorf("%w: %v", ErrGuest, err)
	}
	if st.Error != "" {
		return &GuestError{Op: "write", Path: path, Msg: st.Error, Errno: syscall.Errno(st.Errno)}
	}
	return nil
}

// GuestError is a file operation the guest refused.
type GuestError struct {
	Op, Path, Msg string
	Errno         syscall.Errno
}

func (e *GuestError) Error() string { return fmt.Sprintf("vm: guest %s %s: %s", e.Op, e.Path, e.Msg) }
func (e *GuestError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// qmp runs one QMP session: capabilities, then the commands in order.
func (m *Machine) qmp(ctx context.Context, cmds ...map[string]any) ([]json.RawMessage, error) {
	c, err := m.dial(ctx, "qmp.sock")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	r := bufio.NewReader(c)
	read := func() (map[string]json.RawMessage, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, fmt.Errorf("vm: QMP: %w", err)
			}
			var msg map[string]json.RawMessage
			if err := json.Unmarshal(line, &msg); err != nil {
				return nil, fmt.Errorf("vm: QMP: %w", err)
			}
			if _, ev := msg["event"]; ev {
				continue
			}
			return msg, nil
		}
	}
	if _, err := read(); err != nil { // greeting
		return nil, err
	}
	var out []json.RawMessage
	for _, cmd := range append([]map[string]any{{"execute": "qmp_capabilities"}}, cmds...) {
		b, _ := json.Marshal(cmd)
		if _, err := c.Write(append(b, '\n')); err != nil {
			return nil, fmt.Errorf("vm: QMP: %w", err)
		}
		msg, err := read()
		if err != nil {
			return nil, err
		}
		if e, ok := msg["error"]; ok {
			return nil, fmt.Errorf("vm: QMP %v: %s", cmd["execute"], e)
		}
		out = append(out, msg["return"])
	}
	return out[1:], nil
}

// quiesce asks the agent to unmount every share; see Session.Suspend.
func (m *Machine) quiesce(ctx context.Context) error {
	st, err := m.control(ctx, wire.Quiesce, struct{}{}, "unmounting")
	if err == nil && st.Error != "" {
		err = &BusyError{Msg: st.Error}
	}
	return err
}

// BusyError: the guest could not let go of a share, so it cannot be
// snapshotted (QEMU refuses while a 9p share is mounted).
type BusyError struct{ Msg string }

func (e *BusyError) Error() string {
	return "vm: the guest cannot be snapshotted while " + e.Msg + ": end those processes, or start them from outside the shares (" + "/sandbox/bin, the guest's /tmp), then suspend"
}

// Invalid: the caller can fix it.
func (e *BusyError) Invalid() bool { return true }
