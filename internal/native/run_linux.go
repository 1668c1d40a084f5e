//go:build linux

package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/confine/syscalls"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/internal/unit"
)

// SystemDirs are the host directories every run sees read-only, where
// they exist; at / they may be symlinks (merged /usr), which are copied.
var SystemDirs = []string{"/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// KillGrace is how long an interrupted run has between SIGINT and SIGKILL.
var KillGrace = 2 * time.Second

// CommitGrace is how long init has, once the host ends a run, to end its
// processes and commit their writes to quota'd grants.
var CommitGrace = 60 * time.Second

// base is the part of every run's root that does not depend on the run
// but on its root filesystem: the host's system directories (root ""),
// or an image's root filesystem at root.
func (e *Executor) base(root string) (s1init.Base, error) {
	b := s1init.Base{TmpSize: e.cfg.TmpSize, Hostname: "sandbox", UserNS: os.Geteuid() != 0}
	if root != "" {
		dirs, links, err := image.Top(root)
		if err != nil {
			return b, err
		}
		b.Image, b.System = root, dirs
		for _, n := range slices.Sorted(maps.Keys(links)) {
			b.Links = append(b.Links, s1init.Link{Name: n, Target: links[n]})
		}
		return b, nil
	}
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(d)
			if err != nil {
				return b, err
			}
			b.Links = append(b.Links, s1init.Link{Name: strings.TrimPrefix(d, "/"), Target: t})
			continue
		}
		if fi.IsDir() {
			b.System = append(b.System, d)
		}
	}
	return b, nil
}

// spec is a run's spec with the storage grants, before its program, in
// the root filesystem at root ("": the host's system directories).
func (e *Executor) spec(storage []grant.Storage, root string) (*s1init.Spec, error) {
	b, err := e.base(root)
	if err != nil {
		return nil, err
	}
	sp := &s1init.Spec{Base: b}
	ex := &sp.Exec
	ex.UID, ex.GID = s1init.Nobody, s1init.Nobody
	ex.KeepUID = b.UserNS
	ex.NoFile = e.cfg.NoFile
	f, err := syscalls.S1Filter()
	if err != nil {
		return nil, err
	}
	ex.Seccomp = f
	ex.ROPaths = append(append([]string{}, b.System...), "/proc", "/dev")
	ex.RWPaths = []string{"/tmp", "/dev/shm"}
	ex.RWFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
	guard, err := e.guard()
	if err != nil {
		return nil, err
	}
	sp.Guard = guard
	for _, s := range storage {
		if s.Mode == grant.RO && s.Quota > 0 {
			return nil, fmt.Errorf("S1 cannot meter reads: fs:%s is read-only with a quota, which only S2 (every read brokered) enforces; drop the quota or run a WASM unit", s.Path)
		}
		if k := s1init.KernelDir(s.Path); k != "" {
			return nil, &grant.StorageError{Grant: s, Err: fmt.Errorf("an S1 run has its own %s; the host's is not grantable", k)}
		}
		// The host checks here, to refuse before anything starts; init
		// walks the path again inside the run's mount namespace and
		// mounts the very object it checked.
		o, err := grant.Reach(guard, s, "")
		if err != nil {
			return nil, err
		}
		o.Close()
		sp.Binds = append(sp.Binds, s1init.Bind{Host: s.Path, Path: s.Path, RW: s.Mode == grant.RW, Quota: s.Quota})
		if s.Mode == grant.RW {
			ex.RWPaths = append(ex.RWPaths, s.Path)
		} else {
			ex.ROPaths = append(ex.ROPaths, s.Path)
		}
	}
	return sp, nil
}

func or(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

// groupLimits are the cgroup limits of a run or sandbox whose unit says
// l: the configuration's where the unit has none (a caller that did not
// fill them in).
func (e *Executor) groupLimits(l unit.Limits) cgroup.Limits {
	d := e.DefaultLimits()
	return cgroup.Limits{Memory: or(l.MemoryBytes, d.MemoryBytes), Pids: or(l.Pids, d.Pids), CPUs: float64(or(l.CPUMillis, d.CPUMillis)) / 1000}
}

// guard is what no grant of this executor's runs may reach: its state
// directory and the binaries of sandbox and its S1 helper. Made once.
func (e *Executor) guard() (hostpath.Guard, error) {
	e.guardOnce.Do(func() {
		exe, _ := os.Executable()
		e.guardVal, e.guardErr = hostpath.NewGuard(e.cfg.StateDir, exe, e.self())
	})
	return e.guardVal, e.guardErr
}

// Run executes the job's program confined.
func (e *Executor) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if j.Replay != nil {
		return nil, fmt.Errorf("S1 runs cannot be replayed: a native program's inputs are not brokered")
	}
	sp, err := e.spec(j.Grants.Storage, j.RootDir)
	if err != nil {
		return nil, err
	}
	ex := &sp.Exec
	ex.Path = j.Unit.Entry
	ex.Args = j.Unit.Args
	if len(ex.Args) == 0 {
		ex.Args = []string{filepath.Base(ex.Path)}
	}
	keys := make([]string, 0, len(j.Unit.Env))
	for k := range j.Unit.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ex.Env = append(ex.Env, k+"="+j.Unit.Env[k])
	}
	ex.Dir = j.Unit.Dir
	if ex.Dir == "" {
		ex.Dir = "/tmp"
	}
	if j.Cgroup != nil {
		if err := j.Cgroup.SetLimits(e.groupLimits(j.Unit.Limits)); err != nil {
			return nil, err
		}
	}
	res := &executor.Result{Executor: e.Name()}
	o := launchOpts{cg: j.Cgroup, stdin: j.Stdin, stdout: j.Stdout, stderr: j.Stderr, deadline: j.Deadline, onStart: j.OnStart, enforcer: j.Enforcer, notes: &res.Notes}
	if o.execCtl, err = e.execControl(j.Grants, j.Enforcer, &sp.Exec, j.RootDir); err != nil {
		return nil, err
	}
	sp.Exec.KernelExecOnly = e.kernelExecOnly
	if err := e.giveDevices(sp, j, o); err != nil {
		return nil, err
	}
	if j.Cgroup == nil && j.Enforcer != nil {
		// Said, and recorded in the attestation's notes: the unit's
		// limits are recorded, and a reader must not take them as held.
		o.note("S1: no cgroup of its own (sandbox is not root, or no cgroup hierarchy is mounted): the unit's memory, process and CPU limits are recorded but not enforced")
	}
	if len(j.Grants.Net) > 0 {
		proxy, cleanup, err := e.egress(j.Grants, j.Enforcer, sp)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		o.proxy = proxy
	}
	logBinds(sp, j.Enforcer, "committed at the end")
	kept, err := e.keepAside(sp)
	if err != nil {
		return nil, err
	}
	st, end, runErr := e.launch(ctx, sp, o)
	kept(&st)
	if runErr != nil {
		return nil, runErr
	}
	res.Start, res.End = end.start, end.end
	res.Outcome = outcomeOf(st, j.Cgroup, end)
	res.ExecErrno, res.Signal = syscall.Errno(st.ExecErrno), syscall.Signal(st.Signal)
	committed(st, sp, j.Enforcer, o)
	return res, nil
}

// logBinds logs what S1 shows a run of its storage, each grant mounted,
// as a decision: the record says what the run was given. commit says
// when a quota'd grant's writes are committed.
func logBinds(sp *s1init.Spec, enf *grant.Enforcer, commit string) {
	for _, b := range sp.Binds {
		if b.Internal {
			continue
		}
		op, how := grant.OpRead, "mounted read-only"
		if b.RW {
			op, how = grant.OpWrite, "mounted read-write"
			if b.Quota > 0 {
				how = fmt.Sprintf("mounted read-write through a quota'd overlay (%d bytes), %s", b.Quota, commit)
			}
		}
		enf.Note(grant.KindFS, op, b.Path, true, how)
	}
}

// keepAside makes, for each quota'd grant, the directory (under the
// state directory's kept/, named by the host's lease) where init keeps
// the run's writes if they cannot be committed. The function it returns,
// called once init has ended, removes those left empty and gives the
// others their lasting name (NAME.kept), in the status too.
func (e *Executor) keepAside(sp *s1init.Spec) (func(*s1init.Status), error) {
	var made []string
	for i, b := range sp.Binds {
		if !b.RW || b.Quota == 0 || e.cfg.StateDir == "" {
			continue
		}
		parent := filepath.Join(e.cfg.StateDir, "kept")
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return nil, fmt.Errorf("S1: the directory quota'd writes are kept in if they cannot be committed: %w", err)
		}
		d, err := e.mkTemp(parent, "kept")
		if err != nil {
			return nil, fmt.Errorf("S1: the directory quota'd writes are kept in if they cannot be committed: %w", err)
		}
		sp.Binds[i].Keep = d
		made = append(made, d)
	}
	return func(st *s1init.Status) {
		for _, d := range made {
			// Empty (nothing had to be kept) or gone: nothing to name.
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				continue
			}
			final := d + ".kept"
			if os.Rename(d, final) != nil {
				final = d
			}
			for i := range st.Commits {
				if st.Commits[i].Kept == d {
					st.Commits[i].Kept = final
				}
			}
		}
	}, nil
}

// committed logs what became of each quota'd grant's writes as a
// decision (the attestation binds the log) and tells the caller of any
// that were not committed.
func committed(st s1init.Status, sp *s1init.Spec, enf *grant.Enforcer, o launchOpts) {
	for _, c := range st.Commits {
		how := fmt.Sprintf("committed at the end of the run: %d entries, %d bytes of file data", c.Entries, c.Bytes)
		if c.Error != "" {
			how = fmt.Sprintf("not committed (%s), after %d entries, %d bytes of file data", c.Error, c.Entries, c.Bytes)
			if c.Kept != "" {
				how += "; every write of the run to it is kept at " + c.Kept
			}
			o.note("S1: the run's writes to %s: %s", c.Path, how)
		}
		if enf != nil {
			enf.Note(grant.KindFS, grant.OpWrite, c.Path, c.Error == "", how)
		}
	}
	if !st.Started || len(st.Commits) > 0 {
		return
	}
	for _, b := range sp.Binds {
		if b.RW && b.Quota > 0 {
			// Init ran the program but never said what it committed
			// (killed before it could): the writes are lost.
			msg := "init ended before it reported a commit: the run's writes to it may be lost"
			o.note("S1: %s: %s", b.Path, msg)
			if enf != nil {
				enf.Note(grant.KindFS, grant.OpWrite, b.Path, false, msg)
			}
		}
	}
}

// mapOwners id maps the grants so the guest owns what it was given: each
// distinct owner needs a user namespace holding its mapping to the
// guest's host identity, which init opens by path while its holder
// lives. What the guest makes there belongs on disk to the directory's
// owner, never to the guest's host id: a read-write grant that cannot be
// mapped is refused (a read-only one is bound as it is, and the guest
// sees its owner's permissions). It returns what ends the holders, once
// init has mounted the grants (or ended).
func (e *Executor) mapOwners(sp *s1init.Spec, note func(string, ...any)) (func(), error) {
	if sp.Base.UserNS {
		return func() {}, nil
	}
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	if sp.Exec.HostUID == 0 {
		return release, errors.New("S1: the run has no host id of its own to map its grants to")
	}
	maps := map[[2]int]string{}
	for i := range sp.Binds {
		b := &sp.Binds[i]
		o, err := hostpath.Open(b.Host)
		if err != nil {
			continue // init refuses it, naming why
		}
		key := [2]int{int(o.UID), int(o.GID)}
		o.Close()
		if path, ok := maps[key]; ok {
			b.IDMap = path
			continue
		}
		path, r, err := e.userns(key[0], key[1], sp.Exec.HostUID, sp.Exec.HostGID)
		if err != nil && b.RW {
			release()
			return func() {}, fmt.Errorf("S1: storage grant %s cannot be id mapped (%w): refused, since what the guest wrote there would belong to the run's host id", b.Path, err)
		}
		if err != nil {
			note("S1: %s cannot be id mapped (%v); the guest sees it with its owner's permissions", b.Path, err)
			continue
		}
		releases = append(releases, r)
		maps[key] = path
		b.IDMap = path
	}
	return release, nil
}

// userns starts a helper holding a user namespace whose mapping shows
// uid and gid as the guest's host user and group (ContainerID uid ↔
// HostID hostUID, as an idmapped mount reads it), and returns the
// namespace's path, for init to open, and a function that ends the
// helper.
func (e *Executor) userns(uid, gid, hostUID, hostGID int) (string, func(), error) {
	cmd := exec.Command(e.self(), s1init.UsernsArg)
	cmd.Args[0] = "sandbox-s1-userns"
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: hostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: hostGID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), func() { in.Close(); cmd.Wait() }, nil
}

// ending is how launch saw the run end.
type ending struct {
	start, end time.Time
	deadline   bool
	canceled   bool
	budget     bool // stopped by the host at a compute budget
}

func outcomeOf(st s1init.Status, cg *cgroup.Group, end ending) attest.Outcome {
	oom := cg != nil && cg.OOMKills() > 0
	switch {
	case end.budget:
		return attest.Outcome{Status: attest.BudgetExhausted, Detail: "stopped when a compute budget was spent"}
	case end.deadline:
		return attest.Outcome{Status: attest.Deadline, Detail: "the wall-clock deadline passed"}
	case end.canceled && st.Exited:
		c := st.Code
		return attest.Outcome{Status: attest.Exited, ExitCode: &c, Detail: "interrupted; the program handled the signal and exited"}
	case end.canceled:
		return attest.Outcome{Status: attest.Killed, Detail: "interrupted"}
	case st.Error != "":
		return attest.Outcome{Status: attest.Failed, Detail: st.Error}
	case st.Exited:
		c := st.Code
		if oom && c != 0 {
			return attest.Outcome{Status: attest.OutOfMem, Detail: fmt.Sprintf("the kernel killed a process of the run at its memory limit; the program exited with status %d", c)}
		}
		return attest.Outcome{Status: attest.Exited, ExitCode: &c}
	case st.Signal != 0:
		sig := syscall.Signal(st.Signal)
		if oom && sig == syscall.SIGKILL {
			return attest.Outcome{Status: attest.OutOfMem, Detail: "killed by the kernel at the run's memory limit"}
		}
		return executor.SignalOutcome(sig, "")
	}
	return attest.Outcome{Status: attest.Failed, Detail: "the run's init reported nothing"}
}

// initProc is a started init: it builds the base root as it starts and
// then waits for its spec.
type initProc struct {
	base    string // the base it was given, as JSON, less its root
	cmd     *exec.Cmd
	specW   *os.File
	ctl     *os.File // the host's end of the control socket
	session *os.File // the host's end of a live sandbox's session socket
	statR   *os.File
	stdinW  *os.File
	stdoutR *os.File
	stderrR *os.File
	// done gets init's exit once (one receiver takes it); exited is
	// closed when it has exited, for any number of lookers.
	done   chan error
	exited chan struct{}
	// group is the control group it was placed in ahead of its run, with
	// controllers ctls (Placer); nil if none.
	group *cgroup.Group
	ctls  []string
	// lease is the host identity its launcher was started ahead as
	// (Base.Launcher), for its run; nil if none.
	lease *idLease
}

func (p *initProc) discard() {
	p.cmd.Process.Kill()
	<-p.done
	for _, f := range []*os.File{p.specW, p.statR, p.stdinW, p.stdoutR, p.stderrR, p.ctl, p.session} {
		f.Close()
	}
	if p.group != nil {
		p.group.Remove()
	}
	if p.lease != nil {
		p.lease.Release() // init, and its launcher with it, has ended
		p.lease = nil
	}
}

// rootMount is the directory every init mounts its run's root on, each
// in a mount namespace of its own (startInit).
func (e *Executor) rootMount() string {
	return filepath.Join(e.cfg.StateDir, "roots", "init")
}

// baseKey identifies a base apart from its root.
func baseKey(b s1init.Base) string {
	b.Root, b.Launcher = "", 0
	k, _ := json.Marshal(b)
	return string(k)
}

// startInit starts an init in new namespaces, its own process group and
// its stdio on pipes, and sends it the base; it waits for a spec on fd 3.
// Where lease is not nil, the init starts its run's launcher ahead as
// that host identity, and holds the lease until it ends. before, if not
// nil, is called once init has started and before it has the base (it
// has done nothing yet): false ends it.
func (e *Executor) startInit(b s1init.Base, session bool, lease *idLease, before func(*initProc) bool) (*initProc, error) {
	// Every init mounts its root's tmpfs on the same directory: it does
	// so in a mount namespace of its own, private before it mounts
	// anything, so no init sees another's and the host sees none. A run
	// then makes and removes no directory on the state directory's file
	// system (where deleted inodes are many, as on a journal-less ext4,
	// each made one costs the allocator a scan past them).
	root := e.rootMount()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	var err error
	var parent, child []*os.File
	pipe := func() (*os.File, *os.File) {
		r, w, perr := os.Pipe()
		if perr != nil && err == nil {
			err = perr
		}
		return r, w
	}
	specR, specW := pipe()
	statR, statW := pipe()
	stdinR, stdinW := pipe()
	stdoutR, stdoutW := pipe()
	stderrR, stderrW := pipe()
	var ctlP, ctlC *os.File
	if pair, perr := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0); perr != nil {
		if err == nil {
			err = perr
		}
	} else {
		ctlP, ctlC = os.NewFile(uintptr(pair[0]), "ctl"), os.NewFile(uintptr(pair[1]), "ctl-init")
	}
	var sessP, sessC *os.File
	if session {
		if pair, perr := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0); perr != nil {
			if err == nil {
				err = perr
			}
		} else {
			sessP, sessC = os.NewFile(uintptr(pair[0]), "session"), os.NewFile(uintptr(pair[1]), "session-init")
		}
	}
	parent = []*os.File{specW, statR, stdinW, stdoutR, stderrR, ctlP, sessP}
	child = []*os.File{specR, statW, stdinR, stdoutW, stderrW, ctlC, sessC}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		closeAll(parent)
		closeAll(child)
		return nil, err
	}
	cmd := exec.Command(e.self(), s1init.InitArg)
	cmd.Args[0] = "sandbox-s1-init"
	// GOMAXPROCS set spares the Go runtime reading cgroup files to pick
	// it (milliseconds); init needs one thread's worth of work (exec
	// control raises it). The program gets the environment of its spec,
	// not init's.
	cmd.Env = []string{"GOMAXPROCS=1", "GOGC=off"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{specR, statW, ctlC}
	if session {
		cmd.ExtraFiles = append(cmd.ExtraFiles, sessC) // fd 6
	}
	attr := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
		Pdeathsig:  syscall.SIGKILL,
		// Its own process group: a terminal's Ctrl-C reaches sandbox, which
		// forwards one SIGINT; the program does not get two.
		Setpgid: true,
	}
	if b.UserNS {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	err = cmd.Start()
	closeAll(child)
	if err != nil {
		closeAll(parent)
		return nil, fmt.Errorf("S1: start the run's init: %w", err)
	}
	p := &initProc{base: baseKey(b), cmd: cmd, specW: specW, ctl: ctlP, session: sessP, statR: statR, stdinW: stdinW, stdoutR: stdoutR, stderrR: stderrR, done: make(chan error, 1), exited: make(chan struct{}), lease: lease}
	go func() {
		p.done <- cmd.Wait()
		close(p.exited)
	}()
	if before != nil && !before(p) {
		p.discard()
		return nil, errors.New("S1: the run's init could not be placed in its group")
	}
	b.Root = root
	if lease != nil {
		b.Launcher = lease.ID
	}
	if err := json.NewEncoder(specW).Encode(b); err != nil {
		p.discard()
		return nil, fmt.Errorf("S1: send the run's init its base: %w", err)
	}
	return p, nil
}

// warmPool keeps at most one init started ahead, so that a run does not
// wait for a process start and the base root (several milliseconds).
// Where the host gives runs cgroups (Site.Cgroups) and has asked for a
// placed group once, that init is placed ahead too, in a group of its
// own made for its run (PlacedGroup).
type warmPool struct {
	mu       sync.Mutex
	ready    *initProc
	starting chan struct{} // while a start is in flight; closed when it ends
	closed   bool
	// ctls are the controllers PlacedGroup was last asked for: warm
	// inits are placed in groups of them (none until it is asked).
	ctls []string
	// placed are the inits PlacedGroup handed out with their groups,
	// until the Run given the group (or Unplace) takes them.
	placed map[*cgroup.Group]*initProc
}

// claim returns an init for a run with base b in group cg (nil: none),
// and whether it is in cg already: the one placed in cg ahead, or the
// warm one, if it is alive and was built for b (waiting for it if it is
// still starting), else a new one.
func (e *Executor) claim(b s1init.Base, cg *cgroup.Group) (*initProc, bool, error) {
	usable := func(p *initProc) bool {
		select {
		case <-p.exited: // it died while waiting (discard reaps it)
		default:
			if p.base == baseKey(b) {
				return true
			}
		}
		p.discard()
		return false
	}
	if cg != nil {
		if p := e.warm.unplace(cg); p != nil {
			p.group = nil // cg is the run's now: its host removes it
			if usable(p) {
				return p, true, nil
			}
		}
	}
	if p := e.warm.take(); p != nil && usable(p) {
		return p, false, nil
	}
	p, err := e.startInit(b, false, nil, nil)
	return p, false, err
}

// PlacedGroup hands out the warm init's group, the init inside it, for
// the Run given that group (executor.Placer), if the init is alive and
// was placed with controllers ctls; else nil, and the warm inits started
// from now on are placed in groups of ctls.
func (e *Executor) PlacedGroup(ctls []string) *cgroup.Group {
	if e.cfg.Cgroups == nil {
		return nil
	}
	w := &e.warm
	w.mu.Lock()
	w.ctls = slices.Clone(ctls)
	w.mu.Unlock()
	p := w.take()
	if p == nil {
		return nil
	}
	select {
	case <-p.exited:
		p.discard()
		return nil
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.group == nil || !slices.Equal(p.ctls, ctls) || w.closed {
		if w.ready == nil && !w.closed {
			w.ready = p // for claim, unplaced (a start since keeps its own)
		} else {
			go p.discard()
		}
		return nil
	}
	if w.placed == nil {
		w.placed = map[*cgroup.Group]*initProc{}
	}
	w.placed[p.group] = p
	return p.group
}

// Unplace ends the init PlacedGroup handed out with g, where no Run took
// it (executor.Placer); the group is the caller's to remove.
func (e *Executor) Unplace(g *cgroup.Group) {
	if p := e.warm.unplace(g); p != nil {
		p.group = nil
		p.discard()
	}
}

// unplace takes the init handed out with g, nil if there is none.
func (w *warmPool) unplace(g *cgroup.Group) *initProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.placed[g]
	delete(w.placed, g)
	return p
}

// placeAhead puts a warm init in a group of its own made for its run,
// with the controllers PlacedGroup was last asked for; where the group
// cannot be made the init stays unplaced (its run moves it, as without a
// Placer). False: the init is in some of the group's hierarchies and not
// in others, and must be ended (which removes the group).
func (e *Executor) placeAhead(p *initProc) bool {
	w := &e.warm
	w.mu.Lock()
	ctls := w.ctls
	w.mu.Unlock()
	if e.cfg.Cgroups == nil || ctls == nil {
		return true
	}
	g, err := e.cfg.Cgroups.Create(e.groupName(), ctls...)
	if err != nil {
		return true
	}
	// The limits and devices most runs are given (Run), set now, off the
	// run's path: a run given the same writes nothing (Group.SetLimits,
	// SetDevices). Devices only where another set replaces these (v1),
	// so that a run given a GPU still gets it; a write that fails here is
	// made again by the run.
	g.SetLimits(e.groupLimits(unit.Limits{}))
	if g.DevicesReplaceable() {
		g.SetDevices(baseDevices)
	}
	p.group, p.ctls = g, ctls
	return g.AddProc(p.cmd.Process.Pid) == nil
}

// groupName names a group made ahead as the host names its runs'
// ("partial-…", by the lease where TempName is set), so that a collector
// finds it when its host is gone.
func (e *Executor) groupName() string {
	if e.cfg.TempName != nil {
		return e.cfg.TempName("partial")
	}
	return "partial-" + rand.Text()
}

// refill starts the next warm init in the background, unless warm inits
// are off.
func (e *Executor) refill(b s1init.Base) {
	if !e.cfg.NoWarm {
		e.startWarm(b)
	}
}

// Prewarm starts an init for the next run in the background, even when
// warm inits are off: a host that knows a run is coming calls it before
// its own preparations (records, the run's cgroup), which then overlap
// the init's start.
func (e *Executor) Prewarm() {
	if b, err := e.base(""); err == nil {
		e.startWarm(b)
	}
}

// startWarm starts an init in the background, unless one is ready or
// starting.
func (e *Executor) startWarm(b s1init.Base) {
	w := &e.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.ready != nil || w.starting != nil {
		return
	}
	s := make(chan struct{})
	w.starting = s
	go func() {
		// The run's host identity, taken now, so that its launcher is
		// started ahead too (root; rootless, the run is the invoking
		// user's).
		var l *idLease
		if !b.UserNS {
			l, _ = e.ids().lease() // none: the run takes one
		}
		p, err := e.startInit(b, false, l, e.placeAhead)
		if err != nil && l != nil {
			l.Release()
		}
		w.mu.Lock()
		if err == nil && w.closed {
			// Ended before the start is told done: Close, which waits
			// for it, returns with nothing of it left (its group among
			// them).
			w.mu.Unlock()
			p.discard()
			w.mu.Lock()
			p = nil
		}
		w.starting = nil
		if p != nil {
			if w.closed || w.ready != nil {
				// One was put back meanwhile (PlacedGroup).
				go p.discard()
			} else {
				w.ready = p
			}
		}
		w.mu.Unlock()
		close(s)
	}()
}

// waitWarm waits for a warm init in flight to have started.
func (e *Executor) waitWarm() { e.warm.wait() }

// wait waits for a start in flight, if there is one.
func (w *warmPool) wait() {
	w.mu.Lock()
	s := w.starting
	w.mu.Unlock()
	if s != nil {
		<-s
	}
}

// take waits for a start in flight, then removes the ready init (nil if
// there is none).
func (w *warmPool) take() *initProc {
	w.wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.ready
	w.ready = nil
	return p
}

// Close ends the warm init, if there is one.
func (e *Executor) Close() error {
	w := &e.warm
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	if p := w.take(); p != nil {
		p.discard()
	}
	w.mu.Lock()
	placed := w.placed
	w.placed = nil
	w.mu.Unlock()
	for _, p := range placed {
		p.group = nil // handed out: its host removes it
		p.discard()
	}
	return nil
}

// launch runs sp in a claimed init and waits for it.
// launchOpts are what a run has besides its spec.
type launchOpts struct {
	cg             *cgroup.Group
	stdin          io.Reader
	stdout, stderr io.Writer
	deadline       time.Duration
	onStart        func(executor.Control)
	proxy          *egress.Proxy // serves the run's egress, when it has net grants
	execCtl        func(s1init.Ctl) s1init.Ctl
	enforcer       *grant.Enforcer // logs the denials the kernel reports
	notes          *[]string       // remarks for the caller, not the run's output
	// started is told init's pid and the run's host id (0: none) once
	// init has its spec.
	started func(initPid, hostID int)
}

func (o launchOpts) note(format string, args ...any) {
	if o.notes != nil {
		*o.notes = append(*o.notes, fmt.Sprintf(format, args...))
	}
}

func (e *Executor) launch(ctx context.Context, sp *s1init.Spec, o launchOpts) (s1init.Status, ending, error) {
	cg, stdin, stdout, stderr, deadline, onStart, note := o.cg, o.stdin, o.stdout, o.stderr, o.deadline, o.onStart, o.note
	var end ending
	p, placed, err := e.claim(sp.Base, cg)
	if err != nil {
		return s1init.Status{}, end, err
	}
	if !sp.Base.UserNS {
		// The program's own host identity, for this run alone (root;
		// rootless, the run is the invoking user's in a user namespace):
		// the one its launcher was started ahead as, else a new one.
		l := p.lease
		p.lease = nil
		if l == nil {
			if l, err = e.ids().lease(); err != nil {
				p.discard()
				e.refill(sp.Base)
				return s1init.Status{}, end, err
			}
		}
		defer l.Release() // last: init, and with it every process of the run, has ended
		sp.Exec.HostUID, sp.Exec.HostGID = l.ID, l.ID
	}
	unmap, err := e.mapOwners(sp, note)
	defer unmap()
	if err != nil {
		p.discard()
		e.refill(sp.Base)
		return s1init.Status{}, end, err
	}
	// A launcher started ahead is in init's group and cgroup namespace
	// as they were then: the run's only if init was placed in the run's
	// group before it had its base (or the run has no group).
	sp.LauncherReady = cg == nil || placed
	if ahead := p.group; ahead != nil {
		// Made ahead for a run that did not take it: removed once init
		// has left it (moved to cg, or ended).
		p.group = nil
		defer ahead.Remove()
	}
	// The next run's init starts once this one has ended.
	defer e.refill(sp.Base)
	sp.Base.Root = e.rootMount()
	if cg != nil && !placed {
		if err := cg.AddProc(p.cmd.Process.Pid); err != nil {
			p.discard()
			return s1init.Status{}, end, err
		}
	}
	var copies sync.WaitGroup
	pump := func(w io.Writer, r *os.File) {
		copies.Add(1)
		go func() {
			defer copies.Done()
			if w == nil {
				w = io.Discard
			}
			io.Copy(w, r)
			r.Close()
		}()
	}
	pump(stdout, p.stdoutR)
	pump(stderr, p.stderrR)
	if stdin != nil {
		go func() { io.Copy(p.stdinW, stdin); p.stdinW.Close() }()
	} else {
		p.stdinW.Close()
	}
	// Listening before the spec goes: the run's Landlock domain is made
	// once init has it.
	var kernel *kernelWatch
	if o.enforcer != nil {
		kernel = watchKernel()
	}
	run := o.enforcer != nil // not the tier probe
	if run {
		crash.At(crash.Init)
	}
	if cg != nil {
		// The run's CPU counts from here: what init used starting ahead
		// of it, or an init of another base ended in its group, is not
		// the run's.
		if err := cg.MarkCPU(); err != nil {
			note("S1: the run's CPU is counted from its init's start, not from the run's own: %v", err)
		}
	}
	end.start = time.Now()
	json.NewEncoder(p.specW).Encode(sp)
	p.specW.Close()
	if run {
		crash.At(crash.Started)
	}
	if o.started != nil {
		o.started(p.cmd.Process.Pid, sp.Exec.HostUID)
	}
	ctlDone := make(chan struct{})
	ctlFD := int(p.ctl.Fd())
	go func() {
		defer close(ctlDone)
		e.serveCtl(ctlFD, o)
	}()
	if onStart != nil && cg != nil {
		onStart(executor.Control{Freeze: cg.Freeze, Thaw: cg.Thaw})
	}

	var timeout <-chan time.Time
	if deadline > 0 {
		t := time.NewTimer(deadline)
		defer t.Stop()
		timeout = t.C
	}
	// stop ends the run as the host decided: init kills every process of
	// it at once and commits what they wrote to quota'd grants; only an
	// init that does not finish in CommitGrace is killed.
	stop := func() {
		if cg != nil {
			cg.Thaw() // a frozen init cannot act
		}
		// Sent again until init ends: one that comes before init has
		// set up its handler (a run ended at once) is lost.
		grace := time.After(CommitGrace)
		again := time.NewTicker(50 * time.Millisecond)
		defer again.Stop()
		for {
			p.cmd.Process.Signal(s1init.EndSignal)
			select {
			case <-p.done:
				return
			case <-again.C:
				continue
			case <-grace:
				note("S1: init did not end the run and commit its writes within %s; killed", CommitGrace)
				p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
				return
			}
		}
	}
	select {
	case <-p.done:
	case <-timeout:
		end.deadline = true
		stop()
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), executor.ErrBudget) {
			end.budget = true
			stop()
			break
		}
		end.canceled = true
		p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(KillGrace):
			stop()
		}
	}
	if cg != nil {
		cg.Thaw() // a frozen group cannot be killed or reaped
	}
	end.end = time.Now()
	copies.Wait()
	for _, n := range kernel.finish(p.cmd.Process.Pid, sp.Exec.HostUID, o.enforcer) {
		note("%s", n)
	}
	// Init is gone, and with it the other end; shutting ours down wakes
	// the reader in any case, before the descriptor is closed.
	unix.Shutdown(ctlFD, unix.SHUT_RDWR)
	<-ctlDone
	p.ctl.Close()
	b, _ := io.ReadAll(p.statR)
	p.statR.Close()
	return initReport(b, p.cmd.ProcessState, end), end, nil
}

// initReport is what the host takes from a finished init: its report on
// the status pipe (a pipe only init holds, which the guest cannot reach:
// docs/s1.md), but only when the kernel says init itself ended as it
// should. An init that crashed, was killed, or exited with a status other
// than its own (0, or 1 after reporting a setup error) is a failed run
// whatever it wrote; so is a report that is missing, malformed or
// followed by anything. Past a deadline or an interrupt, init was killed
// on purpose and its report, if any, is only used to tell how the
// program ended.
func initReport(b []byte, ps *os.ProcessState, end ending) s1init.Status {
	var st s1init.Status
	dec := json.NewDecoder(bytes.NewReader(b))
	perr := dec.Decode(&st)
	if perr == nil {
		if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 || dec.More() {
			perr = errors.New("more than one report")
		}
	}
	if end.deadline || end.canceled || end.budget {
		if perr != nil {
			return s1init.Status{}
		}
		return st
	}
	switch {
	case ps == nil:
		return s1init.Status{Error: "the run's init was never waited for"}
	case !ps.Exited():
		return s1init.Status{Error: fmt.Sprintf("the run's init was killed (%s); nothing it reported is trusted", ps)}
	case ps.ExitCode() == 1 && perr == nil && st.Error != "" && !st.Started:
		return st // a setup error, reported before exiting 1
	case ps.ExitCode() != 0:
		return s1init.Status{Error: fmt.Sprintf("the run's init ended abnormally (%s); nothing it reported is trusted", ps)}
	case len(bytes.TrimSpace(b)) == 0:
		return s1init.Status{Error: "the run's init ended without a report"}
	case perr != nil:
		return s1init.Status{Error: fmt.Sprintf("the run's init sent a malformed report (%v)", perr)}
	}
	return st
}
