//go:build linux

package s1init

import (
	"os"
	"runtime"
)

// init keeps the main goroutine of a run's init on the process's main
// thread for good. The thread that confines itself and starts the program
// (startConfined) is then never the thread group leader: the kernel
// judges a signal, a ptrace access or a /proc read aimed at pid 1 by the
// leader's credentials and Landlock domain, and those must stay init's
// (root, or the user namespace's root with every capability, and no
// domain), never the guest's. Without this, with one P, the confining
// goroutine could run on the main thread, which the runtime then parks
// for good, wearing the guest's credentials.
//
// The launcher (launch_linux.go) confines its main thread and executes
// the program from it: its goroutine must not move.
func init() {
	if len(os.Args) > 1 && (os.Args[1] == InitArg || os.Args[1] == LaunchArg) {
		runtime.LockOSThread()
	}
}
