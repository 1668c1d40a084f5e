package vm

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// Share is a host directory a guest is given over 9p: how the guest
// mounts it, and the host object, reached by grant.Reach (walked without
// following a link, checked against the guard) and held as a detached
// clone of its mount, which QEMU opens through its descriptor
// (/proc/self/fd/N), never by path. Only hold makes one; its holder
// closes it once QEMU has started.
type Share struct {
	Mount wire.Mount
	// ID is the identity of the host directory reached.
	ID   hostpath.ID
	tree *os.File
}

// Close lets go of the host's descriptor of the share (QEMU keeps its own).
func (s Share) Close() error {
	if s.tree == nil {
		return nil
	}
	return s.tree.Close()
}

// closeShares closes every share of ss.
func closeShares(ss []Share) {
	for _, s := range ss {
		s.Close()
	}
}

// hold reaches the host directory a share gives (at, where it is held at
// another path than the guest sees; "" for m.Path) through grant.Reach,
// and holds it as a detached clone of its mount (open_tree of the walked
// descriptor): read-only where m is, never set-id programs or device
// nodes. QEMU is handed the clone's descriptor, so nothing done to the
// path after this check (a link swapped in, a directory renamed or
// replaced) reaches the VM: it shares the very directory checked.
func hold(guard hostpath.Guard, m wire.Mount, at string) (Share, error) {
	mode := grant.RW
	if m.ReadOnly {
		mode = grant.RO
	}
	o, err := grant.Reach(guard, grant.Storage{Path: m.Path, Mode: mode}, at)
	if err != nil {
		return Share{}, err
	}
	defer o.Close()
	fd, err := unix.OpenTree(o.FD(), "", unix.OPEN_TREE_CLONE|unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return Share{}, fmt.Errorf("vm: holding %s for the VM (open_tree): %w", m.Path, err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if m.ReadOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attr}); err != nil {
		unix.Close(fd)
		return Share{}, fmt.Errorf("vm: holding %s for the VM (mount_setattr): %w", m.Path, err)
	}
	return Share{Mount: m, ID: o.ID, tree: os.NewFile(uintptr(fd), m.Path)}, nil
}

// egressSock is the name, in a VM's own directory, of the Unix socket
// its egress proxy listens on.
const egressSock = "egress.sock"

// egressListener is a VM's egress proxy's listener: a Unix socket in the
// VM's own directory (0700, root's: no other user can even reach it),
// whose connections are served only when the peer (SO_PEERCRED) is that
// VM's QEMU, which connects to it for the guest's one forwarded address.
// Any other connection is closed unserved and said through refused.
type egressListener struct {
	*net.UnixListener
	refused func(string)
	once    sync.Once
	known   chan struct{} // closed once pid is set
	pid     int
}

// listenEgress listens on path (no comma or equals sign: QEMU's option
// syntax names it).
func listenEgress(path string, refused func(string)) (*egressListener, error) {
	if strings.ContainsAny(path, ",=") {
		return nil, fmt.Errorf("vm: the VM's directory %s has a comma or an equals sign, which QEMU's options cannot carry", path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vm: the egress proxy's socket: %w", err)
	}
	return &egressListener{UnixListener: ln, refused: refused, known: make(chan struct{})}, nil
}

// admit names the one process served (0: none), once.
func (l *egressListener) admit(pid int) {
	l.once.Do(func() { l.pid = pid; close(l.known) })
}

// Accept returns the next connection of the VM's QEMU.
func (l *egressListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		<-l.known
		if err == nil && l.pid != 0 && int(cred.Pid) == l.pid {
			return c, nil
		}
		c.Close()
		if l.refused != nil {
			who := fmt.Sprintf("an unknown peer (%v)", err)
			if err == nil {
				who = fmt.Sprintf("pid %d (uid %d)", cred.Pid, cred.Uid)
			}
			l.refused(fmt.Sprintf("a connection to the run's egress proxy from %s, not the run's VM: refused unserved", who))
		}
	}
}

// Close stops listening (and removes the socket).
func (l *egressListener) Close() error {
	l.admit(0)
	return l.UnixListener.Close()
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}
