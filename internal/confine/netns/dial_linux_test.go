package netns

import (
	"context"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// namespace makes a network namespace with its loopback up and a server
// on it that greets each connection, and returns the namespace and the
// server's port.
func namespace(t *testing.T) (*os.File, int) {
	t.Helper()
	type made struct {
		ns   *os.File
		port int
		err  error
	}
	ch := make(chan made, 1)
	go func() {
		// This thread enters the new namespace and never leaves it: it
		// is not given back to the runtime (it ends with the goroutine).
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- made{err: err}
			return
		}
		fd, _ := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		ifr, _ := unix.NewIfreq("lo")
		unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr)
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		unix.Close(fd)
		if err != nil {
			ch <- made{err: err}
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- made{err: err}
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ch <- made{err: err}
			return
		}
		t.Cleanup(func() { ln.Close() })
		ch <- made{ns: ns, port: ln.Addr().(*net.TCPAddr).Port}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "inside\n")
			c.Close()
		}
	}()
	m := <-ch
	if m.err != nil {
		t.Skipf("no network namespace of its own here: %v", m.err)
	}
	t.Cleanup(func() { m.ns.Close() })
	return m.ns, m.port
}

// Dial reaches a server on a namespace's loopback, which the service's
// own loopback does not reach; the namespace is another's (Own), the
// service's is not; no namespace is an error, not a panic.
func TestDial(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("entering a network namespace needs root")
	}
	runtime.LockOSThread() // a thread of the service's namespace, whatever namespace makes
	self, err := os.Open("/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	ns, port := namespace(t)
	c, err := Dial(context.Background(), ns, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "inside\n" {
		t.Fatalf("read %q, %v", b, err)
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) == "inside\n" {
			t.Fatal("the namespace's server answered on the service's own loopback")
		}
	}
	if own, err := Own(ns); err != nil || !own {
		t.Fatalf("a new namespace: own %v, %v", own, err)
	}
	if own, err := Own(self); err != nil || own {
		t.Fatalf("the service's namespace: own %v, %v", own, err)
	}
	if _, err := Dial(context.Background(), nil, "127.0.0.1", port); err == nil {
		t.Fatal("no namespace, yet a connection")
	}
}
