package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func FuzzSOCKSRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 4, 'h', 'o', 's', 't', 1, 187})
	f.Add([]byte{5, 2, 1, 2})
	f.Add([]byte{5, 1, 0, 5, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 22})
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		host, port, err := socksRequest(bufio.NewReader(bytes.NewReader(in)), &out)
		if err == nil && (host == "" || port < 1 || port > 65535) {
			t.Fatalf("accepted %q:%d", host, port)
		}
	})
}

// FuzzProxyConn feeds arbitrary bytes to the proxy as a run would: it
// must answer or hang up, never panic, and never dial what was not
// granted (the only grant is 127.0.0.1:9, whose dial fails).
func FuzzProxyConn(f *testing.F) {
	f.Add([]byte("GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"))
	f.Add([]byte("CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n"))
	f.Add([]byte("CONNECT example.com:443 HTTP/1.1\r\n\r\n"))
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 9})
	f.Add([]byte("GET http://[::1]:9/ HTTP/1.0\r\n\r\n"))
	_, enf := grants(f, "net:127.0.0.1:9")
	p, err := New(Config{Enforcer: enf, Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
		if addr != "127.0.0.1:9" {
			panic("dialed " + addr)
		}
		return nil, errors.New("refused")
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p.handle(&bytesConn{r: bytes.NewReader(in)})
	})
}

// bytesConn is a connection whose peer sent in and then closed.
type bytesConn struct {
	r *bytes.Reader
}

func (c *bytesConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *bytesConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *bytesConn) Close() error                     { return nil }
func (c *bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }
