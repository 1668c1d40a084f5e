//go:build !linux

package bare

import (
	"fmt"
	"os/exec"
	"syscall"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
)

func start(*exec.Cmd, *executor.Job) error { return ErrNotSupported }

func killGroup(cmd *exec.Cmd) { cmd.Process.Kill() }

func interruptGroup(cmd *exec.Cmd) { cmd.Process.Kill() }

func outcome(_ *exec.Cmd, err error, _ string) (attest.Outcome, syscall.Signal) {
	return attest.Outcome{Status: attest.Failed, Detail: fmt.Sprint(err)}, 0
}
