package vm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// ErrGuest is wrapped by every error about what the guest sent: it is
// hostile input, and such an error ends the VM.
var ErrGuest = errors.New("vm: the guest agent broke the protocol")

// conn is the host's end of the agent's port: one reader demultiplexes
// the guest's frames to the streams the host opened.
type conn struct {
	c       net.Conn
	wmu     sync.Mutex
	next    atomic.Uint32
	mu      sync.Mutex
	streams map[uint32]chan wire.Frame
	// control is stream 0's: hello and setup.
	control chan wire.Frame
	err     error // why reading stopped
	done    chan struct{}
}

func newConn(c net.Conn) *conn {
	ctl := make(chan wire.Frame, 4)
	return &conn{c: c, streams: map[uint32]chan wire.Frame{0: ctl}, control: ctl, done: make(chan struct{})}
}

// serve reads frames until the connection ends or the guest breaks the
// protocol; then every open stream sees its channel closed.
func (c *conn) serve() {
	r := bufio.NewReaderSize(c.c, 1<<16)
	var err error
	for {
		var f wire.Frame
		f, err = wire.Read(r)
		if err != nil {
			break
		}
		switch f.Type {
		case wire.Hello, wire.Ready, wire.Stdout, wire.Stderr, wire.Exit, wire.FileData, wire.FileEnd, wire.Done:
		default:
			err = fmt.Errorf("%w: it sent a %s frame, which only the host sends", ErrGuest, f.Type)
		}
		if err != nil {
			break
		}
		c.mu.Lock()
		ch, ok := c.streams[f.Stream]
		c.mu.Unlock()
		if !ok && f.Stream <= c.next.Load() {
			continue // the host closed it (an exec it stopped waiting for, a read over its limit): the rest is dropped
		}
		if !ok {
			err = fmt.Errorf("%w: a %s frame on stream %d, which the host did not open", ErrGuest, f.Type, f.Stream)
			break
		}
		select {
		case ch <- f:
		case <-c.done:
			return
		}
	}
	if errors.Is(err, wire.ErrFrame) {
		err = fmt.Errorf("%w: %v", ErrGuest, err)
	}
	c.mu.Lock()
	c.err = err
	for id, ch := range c.streams {
		close(ch)
		delete(c.streams, id)
	}
	c.mu.Unlock()
}

// open opens a stream for one request.
func (c *conn) open() (uint32, chan wire.Frame, error) {
	id := c.next.Add(1)
	ch := make(chan wire.Frame, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, nil, c.broken()
	}
	c.streams[id] = ch
	return id, ch, nil
}

func (c *conn) close(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

// broken is why the connection stopped; c.mu is held or reading is over.
func (c *conn) broken() error {
	if c.err == nil || errors.Is(c.err, io.EOF) || errors.Is(c.err, net.ErrClosed) {
		return errors.New("vm: the guest agent's connection ended")
	}
	return c.err
}

// Err is why the connection ended, once it has.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken()
}

func (c *conn) send(f wire.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return wire.Write(c.c, f)
}

func (c *conn) sendJSON(t wire.Type, stream uint32, v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return wire.WriteJSON(c.c, t, stream, v)
}

func (c *conn) Close() error {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return c.c.Close()
}
