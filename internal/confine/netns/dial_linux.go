package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// DialTimeout bounds one connect into a sandbox (a listener that never
// accepts makes a connect wait for the kernel's retries).
const DialTimeout = 5 * time.Second

// Dial connects to host:port over TCP from inside the network namespace
// ns. The dialling goroutine holds its thread, enters ns, makes the
// connection (the socket belongs to the namespace it was made in,
// wherever it is used after) and enters the service's own namespace
// again; a thread that cannot go back is not given back to the runtime
// (it ends with the goroutine). Entering ns needs CAP_SYS_ADMIN over
// it: without it the error says the service must run as root.
func Dial(ctx context.Context, ns *os.File, host string, port int) (net.Conn, error) {
	if ns == nil {
		return nil, errors.New("the sandbox has no network namespace of its own")
	}
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open the service's network namespace: %w", err)}
			return
		}
		defer self.Close()
		rc, err := ns.SyscallConn()
		if err == nil {
			if cerr := rc.Control(func(fd uintptr) { err = unix.Setns(int(fd), unix.CLONE_NEWNET) }); cerr != nil {
				err = cerr
			}
		}
		if err != nil {
			runtime.UnlockOSThread()
			if errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w (reaching a sandbox's ports needs the service to run as root)", err)
			}
			done <- result{err: fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		// The thread is the sandbox's until the connect ends: bounded.
		d := net.Dialer{Timeout: DialTimeout}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if back := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); back == nil {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// service is the network namespace this process started in, taken
// before main, while no thread of it can have entered another (a thread
// that Dial could not bring back stays in a sandbox's; /proc/self names
// the main thread's, which may be such a one).
var service = func() (st unix.Stat_t) {
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		st = unix.Stat_t{}
	}
	return st
}()

// Own reports whether ns is a namespace other than the one the service
// started in: a sandbox's, not the service's.
func Own(ns *os.File) (bool, error) {
	if service.Ino == 0 {
		return false, errors.New("the service's own network namespace was not read at its start")
	}
	var a unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &a); err != nil {
		return false, err
	}
	return a.Dev != service.Dev || a.Ino != service.Ino, nil
}
