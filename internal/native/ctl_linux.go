//go:build linux

package native

import (
	"encoding/json"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/native/s1init"
)

// serveCtl answers init on the control socket until init closes it (or
// the run ends): the egress listener it passes is served by the run's
// proxy; exec questions go to o.execCtl.
func (e *Executor) serveCtl(fd int, o launchOpts) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		fds := s1init.ReceivedFDs(oob[:oobn])
		var m s1init.Ctl
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			s1init.CloseFDs(fds)
			return
		}
		switch {
		case m.Op == "listener" && len(fds) == 1 && o.proxy != nil:
			f := os.NewFile(uintptr(fds[0]), "egress")
			ln, err := net.FileListener(f)
			f.Close()
			if err == nil {
				go o.proxy.Serve(ln)
			}
		case m.Op == "exec" && o.execCtl != nil && len(fds) == 1:
			v := s1init.Ctl{Op: "verdict"}
			if a, err := e.fileAddr(fds[0]); err == nil {
				m.Addr = a.String()
				v = o.execCtl(m)
				v.Addr = m.Addr
			}
			unix.Close(fds[0])
			reply, _ := json.Marshal(v)
			if _, err := unix.Write(fd, reply); err != nil {
				return
			}
		default: // nothing init sends; dropped
			s1init.CloseFDs(fds)
		}
	}
}
