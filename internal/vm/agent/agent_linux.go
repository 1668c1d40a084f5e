package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/drain"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// Version is the agent's protocol version, said in its Hello.
const Version = "sandbox-vmagent/1"

// ModuleDir holds the kernel modules the guest image carries, and
// ModuleOrder lists them in load order.
const (
	ModuleDir   = "/sandbox/modules"
	ModuleOrder = "/sandbox/modules/order"
)

// Main is PID 1 of the guest.
func Main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "sandbox-vmagent: this is the init of sandbox's S5 guests; it runs inside a VM, not by hand")
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-vmagent: %v\n", err)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func run() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	os.Chmod("/tmp", os.ModeSticky|0o777) // not 0o1777: os.Chmod drops a bare 0o1000
	os.Chmod("/", 0o755)                  // the initramfs's root is the kernel's, writable by all until told

	if err := loadModules(); err != nil {
		return err
	}
	port, err := openTransport(10 * time.Second)
	if err != nil {
		return err
	}
	a := &agent{w: port, procs: map[uint32]*proc{}, writes: map[uint32]*os.File{}}
	go a.reap()
	var uts unix.Utsname
	unix.Uname(&uts)
	if err := a.send(wire.Hello, 0, wire.HelloMsg{Kernel: unix.ByteSliceToString(uts.Release[:]), Agent: Version}); err != nil {
		return err
	}
	return a.serve(bufio.NewReaderSize(port, 1<<16))
}

func loadModules() error {
	order, err := os.ReadFile(ModuleOrder)
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open(filepath.Join(ModuleDir, name))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", name, err)
		}
	}
	return nil
}

// openTransport finds the agent's way to the host: its virtio-serial
// port, by name (there is no udev to make /dev/virtio-ports links), or,
// in a VM with a vsock device instead, the host's one connection to
// wire.VsockPort.
func openTransport(wait time.Duration) (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(wait)
	for {
		ports, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range ports {
			b, _ := os.ReadFile(p)
			if strings.TrimSpace(string(b)) == wire.PortName {
				f, err := os.OpenFile("/dev/"+filepath.Base(filepath.Dir(p)), os.O_RDWR, 0)
				if err != nil {
					return nil, err
				}
				return serialPort{f}, nil
			}
		}
		if devs, _ := filepath.Glob("/sys/bus/virtio/drivers/vmw_vsock_virtio_transport/virtio*"); len(devs) > 0 {
			return acceptVsock()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port named %s and no vsock device", wire.PortName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serialPort is the agent's virtio-serial port. A read of a port whose
// host side is not connected returns end of file: that is the host
// between two connections (a VM resumed from a memory image runs before
// the new host connects, and the kernel may see the old connection's
// end first), not the end of the agent's work, so a read waits for the
// host to connect again instead. The host ends a VM by ending QEMU.
type serialPort struct{ *os.File }

// reconnectPoll is how often a read looks for the host again.
const reconnectPoll = 20 * time.Millisecond

func (p serialPort) Read(b []byte) (int, error) {
	for {
		n, err := p.File.Read(b)
		if n > 0 || err != io.EOF {
			return n, err
		}
		time.Sleep(reconnectPoll)
	}
}

// acceptVsock listens on wire.VsockPort and takes the host's connection.
func acceptVsock() (io.ReadWriteCloser, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: wire.VsockPort}); err != nil {
		return nil, fmt.Errorf("vsock bind: %w", err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		return nil, fmt.Errorf("vsock listen: %w", err)
	}
	nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vsock accept: %w", err)
	}
	return os.NewFile(uintptr(nfd), "vsock"), nil
}

type agent struct {
	// mounts are the shares mounted, in order (serve's goroutine only).
	mounts []string
	netUp  bool
	mu     sync.Mutex // serializes frames to the host
	w      io.Writer
	pmu    sync.Mutex
	procs  map[uint32]*proc
	writes map[uint32]*os.File
}

type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (a *agent) send(t wire.Type, stream uint32, v any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return wire.WriteJSON(a.w, t, stream, v)
}

func (a *agent) data(t wire.Type, stream uint32, b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return wire.Write(a.w, wire.Frame{Type: t, Stream: stream, Data: b})
}

func (a *agent) serve(r io.Reader) error {
	for {
		f, err := wire.Read(r)
		if err != nil {
			return fmt.Errorf("reading the host's frames: %w", err)
		}
		switch f.Type {
		case wire.Setup:
			var c wire.Config
			st := wire.Status{}
			if err := wire.Decode(f, &c); err != nil {
				st = status(err)
			} else if err := a.setup(c); err != nil {
				st = status(err)
			}
			a.send(wire.Ready, 0, st)
		case wire.Quiesce:
			a.send(wire.Ready, 0, status(a.quiesce()))
		case wire.Exec:
			var c wire.Command
			if err := wire.Decode(f, &c); err != nil {
				a.send(wire.Exit, f.Stream, wire.ExitStatus{Code: -1, Error: err.Error()})
				continue
			}
			a.start(f.Stream, c)
		case wire.Stdin:
			a.pmu.Lock()
			p := a.procs[f.Stream]
			a.pmu.Unlock()
			if p == nil {
				continue
			}
			if len(f.Data) == 0 {
				p.stdin.Close()
			} else {
				p.stdin.Write(f.Data)
			}
		case wire.Signal:
			var s wire.SignalMsg
			a.pmu.Lock()
			p := a.procs[f.Stream]
			a.pmu.Unlock()
			if p != nil && wire.Decode(f, &s) == nil {
				unix.Kill(-p.cmd.Process.Pid, unix.Signal(s.Signal))
			}
		case wire.ReadFile:
			var fl wire.File
			if err := wire.Decode(f, &fl); err != nil {
				a.send(wire.FileEnd, f.Stream, status(err))
				continue
			}
			go a.readFile(f.Stream, fl.Path)
		case wire.WriteFile:
			var fl wire.File
			if err := wire.Decode(f, &fl); err != nil {
				a.send(wire.Done, f.Stream, status(err))
				continue
			}
			mode := os.FileMode(fl.Mode & 0o7777)
			if mode == 0 {
				mode = 0o644
			}
			if fl.Parents {
				os.MkdirAll(filepath.Dir(fl.Path), 0o755)
			}
			out, err := os.OpenFile(fl.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, mode)
			if err != nil {
				a.send(wire.Done, f.Stream, status(err))
				continue
			}
			a.writes[f.Stream] = out
		case wire.FileData:
			if out := a.writes[f.Stream]; out != nil {
				if _, err := out.Write(f.Data); err != nil {
					out.Close()
					delete(a.writes, f.Stream)
					a.send(wire.Done, f.Stream, status(err))
				}
			}
		case wire.FileEnd:
			if out := a.writes[f.Stream]; out != nil {
				delete(a.writes, f.Stream)
				err := out.Sync()
				if cerr := out.Close(); err == nil {
					err = cerr
				}
				a.send(wire.Done, f.Stream, status(err))
			}
		}
	}
}

func status(err error) wire.Status {
	if err == nil {
		return wire.Status{}
	}
	st := wire.Status{Error: err.Error()}
	var en syscall.Errno
	if errors.As(err, &en) {
		st.Errno = int(en)
	}
	return st
}

// quiesce unmounts every share, last first, so that QEMU can migrate the
// guest (it refuses while a 9p share is mounted). A share a process
// holds a file of stays, and the error names it.
func (a *agent) quiesce() error {
	var busy []string
	var kept []string
	for i := len(a.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(a.mounts[i], 0); err != nil {
			busy = append(busy, fmt.Sprintf("%s (%v)", a.mounts[i], err))
			kept = append([]string{a.mounts[i]}, kept...)
		}
	}
	a.mounts = kept
	if len(busy) > 0 {
		return fmt.Errorf("a process holds files in %s", strings.Join(busy, ", "))
	}
	return nil
}

func (a *agent) setup(c wire.Config) error {
	have := map[string]bool{}
	for _, p := range a.mounts {
		have[p] = true
	}
	for _, m := range c.Mounts {
		if have[m.Path] {
			continue
		}
		if !filepath.IsAbs(m.Path) {
			return fmt.Errorf("mount %s: not an absolute path", m.Path)
		}
		if err := os.MkdirAll(m.Path, 0o755); err != nil {
			return err
		}
		var flags uintptr
		if m.ReadOnly {
			flags = unix.MS_RDONLY
		}
		opts := "trans=virtio,version=9p2000.L,msize=262144,cache=none,access=any"
		if err := unix.Mount(m.Tag, m.Path, "9p", flags|unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.Tag, m.Path, err)
		}
		a.mounts = append(a.mounts, m.Path)
		if m.Owner != 0 && !m.ReadOnly {
			if err := os.Chown(m.Path, int(m.Owner), int(m.Owner)); err != nil {
				return fmt.Errorf("give %s to the runs' user: %w", m.Path, err)
			}
		}
	}
	if c.Hostname != "" {
		unix.Sethostname([]byte(c.Hostname))
	}
	if err := ifup("lo", "127.0.0.1/8"); err != nil {
		return err
	}
	if c.Net != nil && !a.netUp {
		a.netUp = true
		if err := ifup("eth0", c.Net.Addr); err != nil {
			return err
		}
	}
	return nil
}

func (a *agent) start(stream uint32, c wire.Command) {
	if c.Path == "" || len(c.Argv) == 0 {
		a.send(wire.Exit, stream, wire.ExitStatus{Code: -1, Error: "no program"})
		return
	}
	cmd := &exec.Cmd{Path: c.Path, Args: c.Argv}
	cmd.Env = c.Env
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if c.UID != 0 || c.GID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	if c.Pids > 0 {
		fd, err := pidsGroup(stream, c.Pids)
		if err != nil {
			a.send(wire.Exit, stream, wire.ExitStatus{Code: -1, Error: err.Error()})
			return
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
	// Plain pipes, not exec's copying ones: a background process that
	// keeps the program's output open must not hold its exit back.
	stdin, inW, err1 := os.Pipe()
	outR, outW, err2 := os.Pipe()
	errR, errW, err3 := os.Pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		a.send(wire.Exit, stream, wire.ExitStatus{Code: -1, Error: err.Error()})
		return
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	// Started and listed under pmu, so that the reaper never takes a
	// program's exit status from the goroutine that waits for it.
	a.pmu.Lock()
	err := cmd.Start()
	if err == nil {
		a.procs[stream] = &proc{cmd: cmd, stdin: inW}
	}
	a.pmu.Unlock()
	stdin.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		st := wire.ExitStatus{Code: -1, Error: err.Error()}
		var en syscall.Errno
		if errors.As(err, &en) {
			st.Errno = int(en)
		}
		a.send(wire.Exit, stream, st)
		return
	}
	var wg sync.WaitGroup
	pump := func(t wire.Type, r *os.File) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				a.data(t, stream, buf[:n])
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Cut, below, with the program gone: what the pipe
				// holds was written before (its last words among it),
				// and is taken without waiting.
				r.SetReadDeadline(time.Time{})
				drain.Now(r, buf, func(b []byte) { a.data(t, stream, b) })
				return
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(wire.Stdout, outR)
	go pump(wire.Stderr, errR)
	go func() {
		cmd.Wait()
		if c.Pids > 0 {
			// Gone with its last process; one left running keeps it.
			os.Remove(fmt.Sprintf("%s/exec-%d", cgroupRoot, stream))
		}
		// What the program wrote is read to its end; what a process it
		// left behind still holds open is cut after a moment.
		drained := make(chan struct{})
		go func() { wg.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(200 * time.Millisecond):
			outR.SetReadDeadline(time.Now())
			errR.SetReadDeadline(time.Now())
			<-drained
		}
		outR.Close()
		errR.Close()
		inW.Close()
		a.pmu.Lock()
		delete(a.procs, stream)
		a.pmu.Unlock()
		st := wire.ExitStatus{}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = int(ws.Signal())
			st.Code = -1
		} else {
			st.Code = cmd.ProcessState.ExitCode()
		}
		a.send(wire.Exit, stream, st)
	}()
}

// reap waits for the processes the programs left behind. As the guest's
// PID 1 the agent is the parent of every orphan, and one never waited
// for stays a zombie until the VM ends, holding a pid of its exec's
// limit. On each SIGCHLD, every zombie child that is not a program the
// agent started (whose own goroutine waits for it) is waited for.
func (a *agent) reap() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGCHLD)
	for range ch {
		a.reapOrphans()
	}
}

func (a *agent) reapOrphans() {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	mine := make(map[int]bool, len(a.procs))
	for _, p := range a.procs {
		mine[p.cmd.Process.Pid] = true
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || mine[pid] {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold anything, ")" too.
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); i > 0 && len(f) > 1 && f[0] == "Z" && f[1] == "1" {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

func (a *agent) readFile(stream uint32, path string) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		a.send(wire.FileEnd, stream, status(err))
		return
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			a.data(wire.FileData, stream, buf[:n])
		}
		if err == io.EOF {
			a.send(wire.FileEnd, stream, wire.Status{})
			return
		}
		if err != nil {
			a.send(wire.FileEnd, stream, status(err))
			return
		}
	}
}

// cgroups mounts the guest's cgroup2 hierarchy with the pids
// controller for its children, once; every exec sees the one answer.
var cgroups = sync.OnceValue(func() error {
	os.MkdirAll(cgroupRoot, 0o755)
	if err := unix.Mount("cgroup2", cgroupRoot, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	return os.WriteFile(cgroupRoot+"/cgroup.subtree_control", []byte("+pids"), 0o644)
})

const cgroupRoot = "/sys/fs/cgroup"

// pidsGroup makes the guest cgroup one exec runs in, bounded to pids
// processes and threads, and returns its directory's descriptor.
func pidsGroup(stream uint32, pids int64) (int, error) {
	if err := cgroups(); err != nil {
		return -1, fmt.Errorf("the guest's cgroups: %w", err)
	}
	dir := fmt.Sprintf("%s/exec-%d", cgroupRoot, stream)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, err
	}
	if err := os.WriteFile(dir+"/pids.max", []byte(fmt.Sprint(pids)), 0o644); err != nil {
		return -1, err
	}
	return unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
}
