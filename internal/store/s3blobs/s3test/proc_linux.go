package s3test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd if the test process dies first,
// so that no gateway outlives a test killed by its timeout.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
