package bare

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/job"
)

// start starts cmd stopped at its first instruction (traced), places it
// in the run's cgroup, and lets it go: nothing it starts escapes the
// group. Ptrace requests must come from the thread that started it.
func start(cmd *exec.Cmd, j *job.Job) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if j.Cgroup == nil {
		return cmd.Start()
	}
	cmd.SysProcAttr.Ptrace = true
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			errc <- err
			return
		}
		pid := cmd.Process.Pid
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
			cmd.Process.Kill()
			errc <- fmt.Errorf("bare: the program did not stop at its start (%v, %v)", err, ws)
			return
		}
		if err := j.Cgroup.AddProc(pid); err != nil {
			cmd.Process.Kill()
			unix.PtraceDetach(pid)
			errc <- err
			return
		}
		errc <- unix.PtraceDetach(pid)
	}()
	return <-errc
}

func killGroup(cmd *exec.Cmd) { unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }

func interruptGroup(cmd *exec.Cmd) { unix.Kill(-cmd.Process.Pid, unix.SIGINT) }

// outcome is how the program ended; how says why it was ended, if it
// was ("deadline", "budget", "canceled").
func outcome(cmd *exec.Cmd, err error, how string) (attest.Outcome, syscall.Signal) {
	if cmd.ProcessState == nil {
		return attest.Outcome{Status: attest.Failed, Detail: fmt.Sprint(err)}, 0
	}
	st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case how == "deadline":
		return attest.Outcome{Status: attest.Deadline, Detail: "the wall-clock deadline passed"}, st.Signal()
	case how == "budget":
		return attest.Outcome{Status: attest.BudgetExhausted, Detail: "stopped when a compute budget was spent"}, st.Signal()
	case how == "canceled" && st.Exited():
		c := st.ExitStatus()
		return attest.Outcome{Status: attest.Exited, ExitCode: &c, Detail: "interrupted; the program handled the signal and exited"}, 0
	case how == "canceled":
		return attest.Outcome{Status: attest.Killed, Detail: "interrupted"}, st.Signal()
	case st.Exited():
		c := st.ExitStatus()
		return attest.Outcome{Status: attest.Exited, ExitCode: &c}, 0
	case st.Signaled():
		sig := st.Signal()
		switch sig {
		case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGSYS, syscall.SIGTRAP:
			return attest.Outcome{Status: attest.Trapped, Detail: "terminated by " + unix.SignalName(sig)}, sig
		}
		return attest.Outcome{Status: attest.Killed, Detail: "terminated by " + unix.SignalName(sig)}, sig
	}
	return attest.Outcome{Status: attest.Failed, Detail: fmt.Sprint(err)}, 0
}
