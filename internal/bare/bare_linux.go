package bare

import (
	"fmt"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
)

// start starts cmd in the run's cgroup (stopped at its first
// instruction until it is placed), in a process group of its own.
func start(cmd *exec.Cmd, j *executor.Job) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cgroup.StartIn(cmd, j.Cgroup)
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
		return executor.SignalOutcome(st.Signal(), ""), st.Signal()
	}
	return attest.Outcome{Status: attest.Failed, Detail: fmt.Sprint(err)}, 0
}
