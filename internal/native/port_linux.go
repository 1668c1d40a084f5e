package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DialTimeout bounds one connect to a sandbox's port (a guest whose
// listener never accepts makes a connect wait for the kernel's retries).
const DialTimeout = 5 * time.Second

// ErrPortNotListed is wrapped when a port is asked of a sandbox that was
// not made to listen on it.
var ErrPortNotListed = errors.New("not one of the sandbox's listen ports")

// DialPort connects to port on the sandbox's own loopback, as a process
// inside it would: 127.0.0.1, then ::1 where nothing answers there. The
// port must be one the sandbox was made to listen on. The connection's
// socket is made in the sandbox's network namespace (held open since the
// session began, so it is the sandbox's whatever became of its init) by
// a thread that enters it for the dial only; entering it needs the
// service to hold CAP_SYS_ADMIN over it (root), and without it the dial
// is refused saying so.
func (s *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if !slices.Contains(s.sp.Exec.ListenPorts, port) {
		return nil, &invalidError{fmt.Sprintf("port %d: %v (it listens on %v)", port, ErrPortNotListed, s.sp.Exec.ListenPorts)}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || !s.Alive() {
		return nil, fmt.Errorf("port %d: %w", port, ErrSessionEnded)
	}
	c, err := dialIn(ctx, s.netns, "127.0.0.1", port)
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		if c6, err6 := dialIn(ctx, s.netns, "::1", port); err6 == nil {
			return c6, nil
		}
	}
	return c, err
}

// dialIn dials host:port from inside the network namespace ns. The
// dialling goroutine holds its thread, enters ns, makes the connection
// (the socket belongs to the namespace it was made in, wherever it is
// used after) and enters the service's own namespace again; a thread
// that cannot go back is not given back to the runtime (it ends with the
// goroutine).
func dialIn(ctx context.Context, ns *os.File, host string, port int) (net.Conn, error) {
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
		// The descriptor is used under its own reference (Control): a
		// Close racing this dial cannot hand its number to another
		// sandbox's namespace meanwhile.
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
