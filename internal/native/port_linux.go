package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"

	"github.com/opensubstrate/sandbox/internal/confine/netns"
)

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
	c, err := netns.Dial(ctx, s.netns, "127.0.0.1", port)
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		if c6, err6 := netns.Dial(ctx, s.netns, "::1", port); err6 == nil {
			return c6, nil
		}
	}
	return c, err
}
