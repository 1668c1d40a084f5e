package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// Field is one header field.
type Field struct{ Name, Value string }

// Header is a message's header fields, in the order they came.
type Header []Field

// Get is the value of the first field named name (in any case), or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if equalFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// values are the values of every field named name.
func (h Header) values(name string) []string {
	var v []string
	for _, f := range h {
		if equalFold(f.Name, name) {
			v = append(v, f.Value)
		}
	}
	return v
}

// Request is one request.
type Request struct {
	Method string // GET, POST, PUT, DELETE, ...
	Target string // the path and query: /v1/sandboxes?here=true
	Header Header // besides Host, Content-Length and Transfer-Encoding
	// Body is sent with its Content-Length. A request is sent again,
	// once, on a new connection when a kept one turns out closed before
	// the response began, and either none of it had left (the server
	// cannot have read it) or its method is idempotent (GET, HEAD,
	// OPTIONS, TRACE): a POST the server may have acted on is never
	// sent twice.
	Body []byte
	// Stream, when not nil, is the body instead: sent chunked as it is
	// read, while the response is read. Such a request has a new
	// connection of its own and is never sent twice.
	Stream io.Reader
}

// Response is a response whose body is still to be read.
type Response struct {
	Status int    // 200
	Reason string // "OK"
	Header Header
	// Length is the body's length as the response states it, -1 when it
	// is sent chunked or until the connection closes.
	Length int64
	// Body is the body. Close it: the connection is kept for the next
	// request only when the body was read to its end first.
	Body io.ReadCloser
}

// StatusLine is the status and its reason phrase: "404 Not Found".
func (r *Response) StatusLine() string {
	if r.Reason == "" {
		return strconv.Itoa(r.Status)
	}
	return strconv.Itoa(r.Status) + " " + r.Reason
}

// Transport makes requests of one server, keeping connections between
// them. Its methods may be called at once from many goroutines.
type Transport struct {
	// Dial makes a connection to the server.
	Dial func(ctx context.Context) (net.Conn, error)
	// Host is the Host header of every request.
	Host string
	// MaxIdle is how many connections are kept for later requests; 0
	// is 16.
	MaxIdle int

	mu   sync.Mutex
	idle []*conn
}

// conn is a connection and what of it was read ahead.
type conn struct {
	nc net.Conn
	br *bufio.Reader
}

// readBuffer bounds a line of a response's head (and of its chunk
// sizes): a longer one is refused.
const readBuffer = 16 << 10

// Do sends req and reads the response's head. The body is read from
// the response until ctx ends: ending ctx closes the connection, and a
// read then fails with ctx's error.
func (t *Transport) Do(ctx context.Context, req *Request) (*Response, error) {
	if err := check(req, t.Host); err != nil {
		return nil, err
	}
	reuse := req.Stream == nil
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("h1: %s %s: %w", req.Method, req.Target, err)
		}
		c, reused, err := t.conn(ctx, reuse)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("h1: %s %s: %w", req.Method, req.Target, err)
		}
		resp, err := t.roundTrip(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("h1: %s %s: %w", req.Method, req.Target, ctx.Err())
		}
		var br beforeResponse
		if reused && errors.As(err, &br) && (!br.sent || idempotent(req.Method)) {
			// A kept connection that was closed, the request unread
			// (or harmless to repeat): once more, on a new connection.
			reuse = false
			continue
		}
		return nil, fmt.Errorf("h1: %s %s: %w", req.Method, req.Target, err)
	}
}

// idempotent says whether a request of method may be sent twice with
// the effect of once (as net/http's Transport replays).
func idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// CloseIdle closes the connections kept for later requests.
func (t *Transport) CloseIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// beforeResponse is a failure before the response's first byte; sent
// says whether any byte of the request had left.
type beforeResponse struct {
	err  error
	sent bool
}

func (e beforeResponse) Error() string { return e.err.Error() }
func (e beforeResponse) Unwrap() error { return e.err }

// conn is a kept connection that is still open (reuse), else a new one.
func (t *Transport) conn(ctx context.Context, reuse bool) (*conn, bool, error) {
	for reuse {
		t.mu.Lock()
		var c *conn
		if n := len(t.idle); n > 0 {
			c, t.idle = t.idle[n-1], t.idle[:n-1]
		}
		t.mu.Unlock()
		if c == nil {
			break
		}
		if open(c) {
			return c, true, nil
		}
		c.nc.Close()
	}
	nc, err := t.Dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, readBuffer)}, false, nil
}

// open says whether a kept connection may carry a request: nothing
// arrived on it since its last response (no bytes, and no end: a
// server that closed an idle connection), looked at in the socket
// beneath TLS. A connection it cannot look at is taken as open; Do
// retries what may be retried when it was not.
func open(c *conn) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	nc := c.nc
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = u.NetConn() // TLS: its close_notify and the end are in the socket
	}
	waiting, looked := arrived(nc)
	return !looked || !waiting
}

// arrived says whether bytes or an end wait in nc's socket (peeked,
// not read), or the look failed; looked is false where nc has no socket
// to look at.
func arrived(nc net.Conn) (waiting, looked bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true, true
	}
	var (
		b      [1]byte
		peeked error
	)
	if err := rc.Read(func(fd uintptr) bool {
		_, _, peeked = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		return true, true
	}
	return peeked != syscall.EAGAIN, true
}

// put keeps c for a later request.
func (t *Transport) put(c *conn) {
	max := t.MaxIdle
	if max <= 0 {
		max = 16
	}
	t.mu.Lock()
	if len(t.idle) < max {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// inline bounds a request written before its response is read: a
// larger one is written while the response is read, so that a server
// that answers before reading it all (a body over its limit) is heard.
const inline = 64 << 10

// sendResult is how a request written beside its response's reading
// ended: bytes written, and the error.
type sendResult struct {
	n   int64
	err error
}

// roundTrip sends req on c and reads the response's head.
func (t *Transport) roundTrip(ctx context.Context, c *conn, req *Request) (*Response, error) {
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	head := t.head(req)
	var wrote chan sendResult // nil: written whole before the response
	if req.Stream == nil && len(head)+len(req.Body) <= inline {
		if r := send(c.nc, head, req); r.err != nil {
			stop()
			return nil, beforeResponse{fmt.Errorf("writing the request: %w", r.err), r.n > 0}
		}
	} else {
		wrote = make(chan sendResult, 1)
		go func() { wrote <- send(c.nc, head, req) }()
	}
	if _, err := c.br.Peek(1); err != nil {
		stop()
		sent := true
		if wrote != nil {
			c.nc.Close() // the writer's end, if it is stuck
			sent = (<-wrote).n > 0
		}
		return nil, beforeResponse{fmt.Errorf("reading the response: %w", err), sent}
	}
	resp, r, keep, err := readResponse(c.br, req.Method)
	if err != nil {
		stop()
		return nil, err
	}
	resp.Body = &body{t: t, c: c, r: r, keep: keep, stop: stop, wrote: wrote, ctx: ctx}
	return resp, nil
}

// send writes req's head, then its body: whole, or its Stream chunked.
// A Stream that fails to read closes the connection: the server must
// not take what was sent as the whole body. A failed write leaves the
// connection to the response, which may already be there (a server that
// refused the body and closed).
func send(nc net.Conn, head []byte, req *Request) sendResult {
	if req.Stream == nil {
		n, err := nc.Write(append(head, req.Body...))
		return sendResult{int64(n), err}
	}
	n, err := nc.Write(head)
	if err != nil {
		return sendResult{int64(n), err}
	}
	m, err := writeChunked(nc, req.Stream)
	var src sourceError
	if errors.As(err, &src) {
		nc.Close()
	}
	return sendResult{int64(n) + m, err}
}

// head is req's request line and header.
func (t *Transport) head(req *Request) []byte {
	b := make([]byte, 0, 256)
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.Target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.Host...)
	b = append(b, "\r\n"...)
	for _, f := range req.Header {
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	switch {
	case req.Stream != nil:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case req.Body != nil || req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH":
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(req.Body)), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// writeChunked sends r as a chunked body, a chunk for each read (a
// program's input reaches it as it is typed), then its last chunk; it
// returns the bytes written.
func writeChunked(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	frame := make([]byte, 0, len(buf)+32)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			frame = strconv.AppendInt(frame[:0], int64(n), 16)
			frame = append(frame, "\r\n"...)
			frame = append(frame, buf[:n]...)
			frame = append(frame, "\r\n"...)
			m, werr := w.Write(frame)
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			m, werr := w.Write([]byte("0\r\n\r\n"))
			return total + int64(m), werr
		}
		if err != nil {
			return total, sourceError{err}
		}
	}
}

// sourceError is a failure to read a request's Stream.
type sourceError struct{ err error }

func (e sourceError) Error() string { return "reading the request's body: " + e.err.Error() }
func (e sourceError) Unwrap() error { return e.err }

// check refuses a request whose line or header would be read as
// something else: a method that is not a token, a target that is not a
// path, a field with a line break in it.
func check(req *Request, host string) error {
	if req.Method == "" || !isToken(req.Method) {
		return fmt.Errorf("h1: method %q is not a token", req.Method)
	}
	if len(req.Target) == 0 || req.Target[0] != '/' || !isVisible(req.Target) {
		return fmt.Errorf("h1: request target %q is not a path of visible characters", req.Target)
	}
	if !isFieldValue(host) {
		return fmt.Errorf("h1: host %q holds a control character", host)
	}
	for _, f := range req.Header {
		if f.Name == "" || !isToken(f.Name) {
			return fmt.Errorf("h1: header name %q is not a token", f.Name)
		}
		for _, own := range []string{"Host", "Content-Length", "Transfer-Encoding", "Connection"} {
			if equalFold(f.Name, own) {
				return fmt.Errorf("h1: header %s is the transport's own", f.Name)
			}
		}
		if !isFieldValue(f.Value) {
			return fmt.Errorf("h1: header %s holds a control character", f.Name)
		}
	}
	return nil
}

// body is a response's body on its connection.
type body struct {
	t     *Transport
	c     *conn
	r     io.Reader // the framing's reader
	keep  bool      // the connection may carry another request after it
	stop  func() bool
	wrote chan sendResult // the request's end, written beside the response; nil when written first
	ctx   context.Context

	eof    atomic.Bool // read to its end
	closed atomic.Bool
}

// Read reads the body. One goroutine reads; another may Close it
// meanwhile, which closes the connection and so ends the read.
func (b *body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("h1: read of a closed body")
	}
	if b.eof.Load() {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil && b.ctx.Err() != nil:
		err = fmt.Errorf("h1: reading the body: %w", b.ctx.Err())
	case err != nil:
		err = fmt.Errorf("h1: reading the body: %w", err)
	}
	return n, err
}

// Close ends the body: its connection is kept when the body was read
// to its end, the request was sent whole, and the response let it.
func (b *body) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	reuse := b.stop() && b.keep && b.eof.Load()
	if reuse && b.wrote != nil {
		select {
		case r := <-b.wrote:
			reuse = r.err == nil
		default:
			reuse = false
		}
	}
	if reuse {
		b.t.put(b.c)
	} else {
		b.c.nc.Close()
	}
	return nil
}
