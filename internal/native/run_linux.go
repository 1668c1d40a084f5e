//go:build linux

package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/job"
)

// systemDirs are the host directories every run sees read-only, where
// they exist; at / they may be symlinks (merged /usr), which are copied.
var systemDirs = []string{"/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// nobody is the user a run becomes when the host is root.
const nobody = 65534

// KillGrace is how long an interrupted run has between SIGINT and SIGKILL.
var KillGrace = 2 * time.Second

func (e *Executor) baseSpec(storage []grant.Storage) (*spec, error) {
	sp := &spec{TmpSize: e.cfg.TmpSize, Hostname: "sandbox", UserNS: os.Geteuid() != 0}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			sp.Links = append(sp.Links, link{Name: strings.TrimPrefix(d, "/"), Target: t})
			continue
		}
		if fi.IsDir() {
			sp.System = append(sp.System, d)
		}
	}
	ex := &sp.Exec
	ex.UID, ex.GID = nobody, nobody
	ex.KeepUID = sp.UserNS
	ex.NoFile = e.cfg.NoFile
	ex.ROPaths = append(append([]string{}, sp.System...), "/proc", "/dev")
	ex.RWPaths = []string{"/tmp", "/dev/shm"}
	ex.RWFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
	for _, s := range storage {
		if s.Mode == grant.RO && s.Quota > 0 {
			return nil, fmt.Errorf("S1 cannot meter reads: fs:%s is read-only with a quota, which only S2 (every read brokered) enforces; drop the quota or run a WASM unit", s.Path)
		}
		fi, err := os.Stat(s.Path)
		if err != nil {
			return nil, fmt.Errorf("storage grant fs:%s: %w", s.Path, err)
		}
		sp.Binds = append(sp.Binds, bind{Host: s.Path, Path: s.Path, RW: s.Mode == grant.RW, Quota: s.Quota, File: !fi.IsDir()})
		if s.Mode == grant.RW {
			ex.RWPaths = append(ex.RWPaths, s.Path)
		} else {
			ex.ROPaths = append(ex.ROPaths, s.Path)
		}
	}
	return sp, nil
}

// Run executes the job's program confined.
func (e *Executor) Run(ctx context.Context, j *job.Job) (*job.Result, error) {
	if len(j.Grants.Net) > 0 {
		return nil, fmt.Errorf("S1 network grants (%s) need the egress proxy, which this build does not have yet: the run's network namespace has no route out", j.Grants.Net[0])
	}
	if j.Replay != nil {
		return nil, fmt.Errorf("S1 runs cannot be replayed: a native program's inputs are not brokered")
	}
	sp, err := e.baseSpec(j.Grants.Storage)
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
		if err := j.Cgroup.SetLimits(cgroup.Limits{Memory: e.cfg.Memory, Pids: e.cfg.Pids, CPUs: e.cfg.CPUs}); err != nil {
			return nil, err
		}
	}
	res := &job.Result{Executor: e.Name()}
	st, end, runErr := e.launch(ctx, sp, j.Cgroup, j.Stdin, j.Stdout, j.Stderr, j.Deadline, j.OnStart)
	if runErr != nil {
		return nil, runErr
	}
	res.Start, res.End = end.start, end.end
	res.Outcome = outcomeOf(st, j.Cgroup, end)
	if st.Commit != "" {
		fmt.Fprintf(j.Stderr, "sandbox: S1: committing quota'd writes: %s\n", st.Commit)
	}
	return res, nil
}

// userns returns a user namespace whose mapping shows uid and gid as the
// guest's user: ContainerID uid ↔ HostID nobody, as an idmapped mount
// reads it. A helper process holds it only until it is opened.
func (e *Executor) userns(uid, gid int) (*os.File, error) {
	cmd := exec.Command(e.cfg.Self, UsernsArg)
	cmd.Args[0] = "sandbox-s1-userns"
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: nobody, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: nobody, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	in.Close()
	cmd.Wait()
	return f, err
}

// ending is how launch saw the run end.
type ending struct {
	start, end time.Time
	deadline   bool
	canceled   bool
}

func outcomeOf(st status, cg *cgroup.Group, end ending) attest.Outcome {
	oom := cg != nil && cg.OOMKills() > 0
	switch {
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
		switch sig {
		case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGSYS, syscall.SIGTRAP:
			return attest.Outcome{Status: attest.Trapped, Detail: "terminated by " + unix.SignalName(sig)}
		}
		return attest.Outcome{Status: attest.Killed, Detail: "terminated by " + unix.SignalName(sig)}
	}
	return attest.Outcome{Status: attest.Failed, Detail: "the run's init reported nothing"}
}

// launch starts init with sp and waits for it. extra are files bound for
// the probe.
func (e *Executor) launch(ctx context.Context, sp *spec, cg *cgroup.Group, stdin io.Reader, stdout, stderr io.Writer, deadline time.Duration, onStart func(job.Control)) (status, ending, error) {
	var end ending
	roots := filepath.Join(e.cfg.StateDir, "roots")
	if err := os.MkdirAll(roots, 0o700); err != nil {
		return status{}, end, err
	}
	dir, err := os.MkdirTemp(roots, "run-")
	if err != nil {
		return status{}, end, err
	}
	defer os.Remove(dir)
	sp.Root = dir

	specR, specW, err := os.Pipe()
	if err != nil {
		return status{}, end, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return status{}, end, err
	}
	cmd := exec.Command(e.cfg.Self, InitArg)
	cmd.Args[0] = "sandbox-s1-init"
	cmd.Env = []string{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{specR, statW}
	if !sp.UserNS {
		// Grants are id mapped so the guest (nobody) owns what it was given;
		// each distinct owner needs a user namespace holding its mapping.
		maps := map[[2]int]int{}
		for i := range sp.Binds {
			b := &sp.Binds[i]
			var st unix.Stat_t
			if err := unix.Stat(b.Host, &st); err != nil {
				continue
			}
			key := [2]int{int(st.Uid), int(st.Gid)}
			if fd, ok := maps[key]; ok {
				b.IDMap = fd
				continue
			}
			f, err := e.userns(key[0], key[1])
			if err != nil {
				fmt.Fprintf(stderr, "sandbox: S1: %s cannot be id mapped (%v); the guest sees it with its owner's permissions\n", b.Path, err)
				continue
			}
			defer f.Close()
			cmd.ExtraFiles = append(cmd.ExtraFiles, f)
			fd := 2 + len(cmd.ExtraFiles) // ExtraFiles[i] is fd 3+i
			maps[key] = fd
			b.IDMap = fd
		}
	}
	attr := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
		Pdeathsig:  syscall.SIGKILL,
	}
	if sp.UserNS {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	var cgfd *os.File
	if cg != nil && cg.V2 != "" {
		if f, err := os.Open(cg.V2); err == nil {
			cgfd = f
			attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
		}
	}
	cmd.SysProcAttr = attr
	err = cmd.Start()
	if cgfd != nil {
		cgfd.Close()
	}
	specR.Close()
	statW.Close()
	if err != nil {
		specW.Close()
		statR.Close()
		return status{}, end, fmt.Errorf("S1: start the run's init: %w", err)
	}
	end.start = time.Now()
	if cg != nil {
		if err := cg.AddProc(cmd.Process.Pid); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			specW.Close()
			statR.Close()
			return status{}, end, err
		}
	}
	json.NewEncoder(specW).Encode(sp)
	specW.Close()
	if onStart != nil && cg != nil {
		onStart(job.Control{Freeze: cg.Freeze, Thaw: cg.Thaw})
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if deadline > 0 {
		t := time.NewTimer(deadline)
		defer t.Stop()
		timeout = t.C
	}
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timeout:
		end.deadline = true
		cmd.Process.Signal(syscall.SIGKILL)
		waitErr = <-done
	case <-ctx.Done():
		end.canceled = true
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case waitErr = <-done:
		case <-time.After(KillGrace):
			cmd.Process.Signal(syscall.SIGKILL)
			waitErr = <-done
		}
	}
	if cg != nil {
		cg.Thaw() // a frozen group cannot be killed or reaped
	}
	end.end = time.Now()
	var st status
	b, _ := io.ReadAll(statR)
	statR.Close()
	if len(b) > 0 {
		if err := json.Unmarshal(b, &st); err != nil {
			return status{}, end, fmt.Errorf("S1: the run's init reported %q: %w", b, err)
		}
	} else if !end.deadline && !end.canceled {
		return status{}, end, fmt.Errorf("S1: the run's init ended without a report (%v)", waitErr)
	}
	return st, end, nil
}
