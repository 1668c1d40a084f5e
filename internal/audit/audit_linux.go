package audit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	nlmsgHdrLen = 16
	groupRead   = 1 // AUDIT_NLGRP_READLOG
	rcvBuf      = 8 << 20
)

// Status is the kernel's audit status.
type Status struct {
	Enabled      bool
	Lost         uint32 // records the kernel dropped since boot
	Backlog      uint32
	BacklogLimit uint32
}

// GetStatus asks the kernel for its audit status.
func GetStatus() (Status, error) {
	fd, err := dial()
	if err != nil {
		return Status{}, err
	}
	defer unix.Close(fd)
	reply, err := request(fd, unix.AUDIT_GET, nil)
	if err != nil {
		return Status{}, err
	}
	if len(reply) < 32 {
		return Status{}, fmt.Errorf("audit: status reply of %d bytes", len(reply))
	}
	u := func(i int) uint32 { return binary.NativeEndian.Uint32(reply[4*i:]) }
	return Status{Enabled: u(1) != 0, Lost: u(6), Backlog: u(7), BacklogLimit: u(5)}, nil
}

// SetEnabled turns audit on or off host-wide. Only tests use it, and they
// restore what they found: whether audit runs is the operator's choice.
func SetEnabled(on bool) error {
	fd, err := dial()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st [40]byte
	binary.NativeEndian.PutUint32(st[0:], 1) // AUDIT_STATUS_ENABLED
	if on {
		binary.NativeEndian.PutUint32(st[4:], 1)
	}
	_, err = request(fd, unix.AUDIT_SET, st[:])
	sets.Add(1)
	return err
}

// sets counts the calls to SetEnabled in this process.
var sets atomic.Uint64

// Sets is how many times this process has called SetEnabled: an answer
// kept from before a call may be stale.
func Sets() uint64 { return sets.Load() }

func dial() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return -1, fmt.Errorf("audit: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("audit: bind: %w", err)
	}
	return fd, nil
}

var seq atomic.Uint32

// request sends one message and returns the payload of the kernel's
// reply of the same type, if it sends one, after its acknowledgement.
func request(fd int, typ uint16, body []byte) ([]byte, error) {
	s := seq.Add(1)
	msg := make([]byte, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], s)
	copy(msg[nlmsgHdrLen:], body)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("audit: send: %w", err)
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var reply []byte
	acked := false
	buf := make([]byte, 1<<16)
	for !(acked && (reply != nil || typ != unix.AUDIT_GET)) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("audit: receive: %w", err)
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(b))
			if l < nlmsgHdrLen || l > len(b) {
				return nil, fmt.Errorf("audit: a reply of length %d in %d bytes", l, len(b))
			}
			t, rs := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
			payload := b[nlmsgHdrLen:l]
			b = b[min((l+3)&^3, len(b)):]
			if rs != s {
				continue
			}
			switch {
			case t == unix.NLMSG_ERROR && len(payload) >= 4:
				if code := int32(binary.NativeEndian.Uint32(payload)); code != 0 {
					return nil, fmt.Errorf("audit: %w", unix.Errno(-code))
				}
				acked = true
			case t == typ:
				reply = append([]byte(nil), payload...)
			}
		}
	}
	return reply, nil
}

// Listener receives the kernel's audit records as they are sent, and
// collects Landlock's.
type Listener struct {
	fd       int
	wake     int // an eventfd: Close writes it to end the reader
	closed   atomic.Bool
	done     chan struct{}
	mu       sync.Mutex
	landlock *Landlock
	fences   map[string]chan struct{}
	overrun  bool // the socket's buffer overflowed: records were lost
	bad      int  // records that did not parse
}

// Listen joins the audit multicast group. It needs CAP_AUDIT_READ, and
// delivers records only while audit is enabled.
func Listen() (*Listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: netlink socket: %w", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groupRead}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: join the read-only multicast group (CAP_AUDIT_READ): %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: eventfd: %w", err)
	}
	l := &Listener{fd: fd, wake: wake, done: make(chan struct{}), landlock: NewLandlock(), fences: map[string]chan struct{}{}}
	go l.read()
	return l, nil
}

func (l *Listener) read() {
	defer close(l.done)
	buf := make([]byte, 1<<16)
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(l.wake), Events: unix.POLLIN}}
	for !l.closed.Load() {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if fds[1].Revents != 0 {
			return // Close
		}
		if fds[0].Revents != 0 && !l.drain(buf) {
			return
		}
	}
}

// drain reads every record waiting on the socket; false when the socket
// failed.
func (l *Listener) drain(buf []byte) bool {
	for {
		n, _, err := unix.Recvfrom(l.fd, buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return true
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			l.mu.Lock()
			l.overrun = true
			l.mu.Unlock()
			continue
		case err != nil:
			return false
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			sz := int(binary.NativeEndian.Uint32(b))
			if sz < nlmsgHdrLen || sz > len(b) {
				break
			}
			l.take(binary.NativeEndian.Uint16(b[4:]), b[nlmsgHdrLen:sz])
			b = b[min((sz+3)&^3, len(b)):]
		}
	}
}

func (l *Listener) take(typ uint16, text []byte) {
	if typ != TypeLandlockAccess && typ != TypeLandlockDomain && typ != TypeUser {
		return
	}
	r, err := Parse(typ, text)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.bad++
		return
	}
	if typ == TypeUser {
		if nonce, ok := strings.CutPrefix(r.Fields["msg"], fencePrefix); ok {
			if ch, ok := l.fences[nonce]; ok {
				close(ch)
				delete(l.fences, nonce)
			}
		}
		return
	}
	l.landlock.Add(r)
}

const fencePrefix = "sandbox: run ended, fence "

// Fence writes a user record through the kernel's audit queue and waits
// until it comes back, so that every record queued before it has been
// received. It needs CAP_AUDIT_WRITE.
func (l *Listener) Fence(ctx context.Context) error {
	var n [8]byte
	rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	ch := make(chan struct{})
	l.mu.Lock()
	l.fences[nonce] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.fences, nonce)
		l.mu.Unlock()
	}()
	fd, err := dial()
	if err != nil {
		return err
	}
	// NUL-terminated: the kernel drops the message's last byte.
	_, err = request(fd, TypeUser, []byte(fencePrefix+nonce+"\x00"))
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("audit: write the fence record (CAP_AUDIT_WRITE): %w", err)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit: the fence record did not come back: %w", context.Cause(ctx))
	}
}

// Landlock reports the Landlock denials in the domains pid created, and
// whether records may have been lost (the socket overflowed).
func (l *Listener) Landlock(pid int) (rep Report, overrun bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.landlock.Of(pid), l.overrun
}

// Ended reports whether the end of every domain pid created has been
// seen.
func (l *Listener) Ended(pid int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.landlock.Of(pid).Ended
}

// LandlockOfUID reports the Landlock denials in the domains processes of
// the host user uid created (Landlock.OfUID), and whether records may
// have been lost.
func (l *Listener) LandlockOfUID(uid int) (rep Report, overrun bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.landlock.OfUID(uid), l.overrun
}

// EndedUID reports whether the end of every domain processes of uid
// created has been seen.
func (l *Listener) EndedUID(uid int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.landlock.OfUID(uid).Ended
}

// Close stops listening.
func (l *Listener) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-l.done
	unix.Close(l.wake)
	return unix.Close(l.fd)
}
