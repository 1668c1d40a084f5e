package cgroup

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartIn starts cmd stopped at its first instruction (traced), places
// it in g, and lets it go: nothing it starts escapes the group, on a v1
// hierarchy as on v2. With g nil it only starts cmd. Ptrace requests
// must come from the thread that started it.
func StartIn(cmd *exec.Cmd, g *Group) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if g == nil {
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
			errc <- fmt.Errorf("cgroup: %s did not stop at its start (%v, %v)", cmd.Path, err, ws)
			return
		}
		if err := g.AddProc(pid); err != nil {
			cmd.Process.Kill()
			unix.PtraceDetach(pid)
			errc <- err
			return
		}
		errc <- unix.PtraceDetach(pid)
	}()
	return <-errc
}
