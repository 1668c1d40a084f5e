package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a net/http server on a unix socket, counting the
// connections it accepted, and a Transport of it.
func server(t *testing.T, h http.Handler) (*Transport, *atomic.Int64, *http.Server) {
	t.Helper()
	tr, conns, hs, _ := serverClosing(t, h)
	return tr, conns, hs
}

// serverClosing is server, with a channel told of each connection the
// server closed.
func serverClosing(t *testing.T, h http.Handler) (*Transport, *atomic.Int64, *http.Server, chan struct{}) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	closed := make(chan struct{}, 1024)
	hs := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed <- struct{}{}
		}
	}}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	tr := &Transport{Host: "sandbox", Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdle)
	return tr, &conns, hs, closed
}

func readAll(t *testing.T, resp *Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return string(b)
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789", 10000)
	tr, conns, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Method", r.Method)
			w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
			w.Header().Set("X-Host", r.Host)
			w.Header().Set("X-Query", r.URL.Query().Get("q"))
			w.Write(b)
		case "/big": // chunked: longer than the server's buffer
			io.WriteString(w, big)
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/missing":
			http.Error(w, "no such thing", http.StatusNotFound)
		}
	}))
	ctx := context.Background()
	resp, err := tr.Do(ctx, &Request{Method: "POST", Target: "/echo?q=a%20b", Header: Header{{"Content-Type", "application/json"}}, Body: []byte(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.StatusLine() != "200 OK" || resp.Length != 7 {
		t.Errorf("status %q, length %d", resp.StatusLine(), resp.Length)
	}
	if got := readAll(t, resp); got != `{"a":1}` {
		t.Errorf("body %q", got)
	}
	for k, want := range map[string]string{"x-method": "POST", "X-LENGTH": "7", "x-host": "sandbox", "x-query": "a b"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	resp, err = tr.Do(ctx, &Request{Method: "GET", Target: "/big"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Length != -1 || resp.Header.Get("Transfer-Encoding") != "chunked" {
		t.Errorf("length %d, coding %q: want a chunked body", resp.Length, resp.Header.Get("Transfer-Encoding"))
	}
	if got := readAll(t, resp); got != big {
		t.Errorf("chunked body: %d bytes, want %d", len(got), len(big))
	}
	resp, err = tr.Do(ctx, &Request{Method: "DELETE", Target: "/none"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 204 || readAll(t, resp) != "" {
		t.Errorf("204: %s", resp.StatusLine())
	}
	resp, err = tr.Do(ctx, &Request{Method: "GET", Target: "/missing"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusLine() != "404 Not Found" || readAll(t, resp) != "no such thing\n" {
		t.Errorf("404: %s", resp.StatusLine())
	}
	// Every request was read to its end: one connection carried them all.
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four requests read whole, want 1", n)
	}
	// A body closed before its end takes its connection with it.
	resp, err = tr.Do(ctx, &Request{Method: "GET", Target: "/big"})
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 10))
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
		t.Error("a closed body read")
	}
	resp, err = tr.Do(ctx, &Request{Method: "GET", Target: "/none"})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: a body closed early does not give its connection back", n)
	}
}

// TestKeptConnectionClosedByServer: a kept connection the server closed
// while idle is seen closed and not used; a request that met one anyway,
// none of it sent, is sent again on a new one.
func TestKeptConnectionClosedByServer(t *testing.T) {
	t.Parallel()
	tr, conns, hs, closed := serverClosing(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Method)
	}))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		resp, err := tr.Do(ctx, &Request{Method: "POST", Target: "/", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "POST" {
			t.Fatalf("body %q", got)
		}
		// The server ends its idle connections (as at its idle timeout);
		// wait until it says it closed this one.
		done := false
		for !done {
			hs.SetKeepAlivesEnabled(false)
			hs.SetKeepAlivesEnabled(true)
			select {
			case <-closed:
				done = true
			case <-time.After(time.Millisecond):
			}
		}
		// Its end reaches this side's socket at once (a unix socket).
		if tr.idleOpen() {
			t.Fatal("a kept connection the server closed is taken as open")
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
	// A connection that looks open but whose server went away between
	// the look and the request (its write fails, nothing sent): a POST
	// goes again on a new one.
	c, _, err := tr.conn(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	c.nc = &closedWriter{c.nc}
	tr.put(c)
	resp, err := tr.Do(ctx, &Request{Method: "POST", Target: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "POST" {
		t.Errorf("body %q", got)
	}
}

// TestNeverSendsAPOSTTwice: a request the server read and dropped its
// connection on before answering (a handler that panicked, a service
// killed) is not sent again when it is a POST, whatever kept
// connections there are; a GET is sent again once, on a new connection.
func TestNeverSendsAPOSTTwice(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	tr, _, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			return
		}
		calls.Add(1)
		panic(http.ErrAbortHandler) // the connection closed, no response
	}))
	ctx := context.Background()
	keep := func(n int) {
		// n kept connections, each used once: n requests at once.
		var resps []*Response
		for i := 0; i < n; i++ {
			resp, err := tr.Do(ctx, &Request{Method: "GET", Target: "/ok"})
			if err != nil {
				t.Fatal(err)
			}
			resps = append(resps, resp)
		}
		for _, r := range resps {
			readAll(t, r)
		}
	}
	keep(5)
	if _, err := tr.Do(ctx, &Request{Method: "POST", Target: "/create", Body: []byte("{}")}); err == nil {
		t.Error("a POST the server dropped succeeded")
	}
	if n := calls.Swap(0); n != 1 {
		t.Errorf("the server got the POST %d times, want 1", n)
	}
	keep(5)
	if _, err := tr.Do(ctx, &Request{Method: "GET", Target: "/read"}); err == nil {
		t.Error("a GET the server dropped twice succeeded")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the server got the GET %d times, want 2: once on a kept connection, once on a new one", n)
	}
}

// TestTLSConnectionSeenClosed: beneath TLS too, a kept connection whose
// server closed it is seen closed.
func TestTLSConnectionSeenClosed(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 16)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	ts.StartTLS()
	defer ts.Close()
	cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig
	tr := &Transport{Host: "x", Dial: func(ctx context.Context) (net.Conn, error) {
		return (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", ts.Listener.Addr().String())
	}}
	defer tr.CloseIdle()
	resp, err := tr.Do(context.Background(), &Request{Method: "GET", Target: "/"})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if !tr.idleOpen() {
		t.Fatal("a kept TLS connection is taken as closed while its server keeps it")
	}
	for done := false; !done; {
		ts.Config.SetKeepAlivesEnabled(false)
		ts.Config.SetKeepAlivesEnabled(true)
		select {
		case <-closed:
			done = true
		case <-time.After(time.Millisecond):
		}
	}
	// The server's close reaches this side's socket soon after it
	// closed (loopback TCP): wait for the fact, then ask.
	raw := tr.idle[0].nc.(*tls.Conn).NetConn()
	for waiting, _ := arrived(raw); !waiting; waiting, _ = arrived(raw) {
		time.Sleep(time.Millisecond)
	}
	if tr.idleOpen() {
		t.Error("a kept TLS connection whose server closed it is taken as open")
	}
}

// TestAnswerBeforeTheBodyIsHeard: a server that answers a large body
// before reading it all (refused over its limit) and closes is heard,
// not reported as a broken pipe.
func TestAnswerBeforeTheBodyIsHeard(t *testing.T) {
	t.Parallel()
	tr, _, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
			http.Error(w, "at most 1 MiB", http.StatusRequestEntityTooLarge)
		}
	}))
	resp, err := tr.Do(context.Background(), &Request{Method: "POST", Target: "/", Body: bytes.Repeat([]byte("A"), 32<<20)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.Status != 413 || got != "at most 1 MiB\n" {
		t.Errorf("%s %q, want the server's 413", resp.StatusLine(), got)
	}
}

// idleOpen says whether a kept connection is still open.
func (t *Transport) idleOpen() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.idle {
		if open(c) {
			return true
		}
	}
	return false
}

// closedWriter is a connection whose writes fail, as one the server
// closed does.
type closedWriter struct{ net.Conn }

func (c *closedWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestStreamBothWays: a chunked request is sent as it is read while
// the response streams back, as an exec's input and output do.
func TestStreamBothWays(t *testing.T) {
	t.Parallel()
	tr, _, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		rc.Flush() // the head first, as the service's streams send it
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintf(w, "got %s\n", sc.Text())
			rc.Flush()
		}
		fmt.Fprintf(w, "length %d, coding %v\n", r.ContentLength, r.TransferEncoding)
	}))
	pr, pw := io.Pipe()
	resp, err := tr.Do(context.Background(), &Request{Method: "POST", Target: "/", Stream: pr})
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for _, l := range []string{"one", "two"} {
		io.WriteString(pw, l+"\n")
		got, err := br.ReadString('\n')
		if err != nil || got != "got "+l+"\n" {
			t.Fatalf("echo of %q: %q, %v", l, got, err)
		}
	}
	pw.Close()
	rest, _ := io.ReadAll(br)
	if string(rest) != "length -1, coding [chunked]\n" {
		t.Errorf("end %q", rest)
	}
	resp.Body.Close()
}

// TestContextEndsTheCall: ending the context ends a request waiting
// for its response and a body being read, with the context's error.
func TestContextEndsTheCall(t *testing.T) {
	t.Parallel()
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	tr, _, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			io.WriteString(w, "first\n")
			http.NewResponseController(w).Flush()
		} else {
			arrived <- struct{}{}
		}
		<-release
	}))
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived // the request is in the server: Do waits for the head
		cancel()
	}()
	if _, err := tr.Do(ctx, &Request{Method: "GET", Target: "/head"}); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting for the head: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	resp, err := tr.Do(ctx, &Request{Method: "GET", Target: "/body"})
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if l, _ := br.ReadString('\n'); l != "first\n" {
		t.Fatalf("first line %q", l)
	}
	cancel()
	if _, err := br.ReadString('\n'); !errors.Is(err, context.Canceled) {
		t.Errorf("reading the body: %v, want context.Canceled", err)
	}
	resp.Body.Close()
}

// TestRefusesWhatWouldBeReadAsMore: a request line or field that would
// split into another is refused before anything is sent.
func TestRefusesWhatWouldBeReadAsMore(t *testing.T) {
	t.Parallel()
	tr := &Transport{Host: "sandbox", Dial: func(context.Context) (net.Conn, error) {
		t.Error("dialled")
		return nil, errors.New("no")
	}}
	for name, req := range map[string]*Request{
		"method":       {Method: "GET /x HTTP/1.1\r\n", Target: "/"},
		"target space": {Method: "GET", Target: "/a b"},
		"target":       {Method: "GET", Target: "/a\r\nX: y"},
		"not a path":   {Method: "GET", Target: "http://x/"},
		"field name":   {Method: "GET", Target: "/", Header: Header{{"A:b", "c"}}},
		"field value":  {Method: "GET", Target: "/", Header: Header{{"A", "b\r\nX-Injected: 1"}}},
		"a length":     {Method: "POST", Target: "/", Header: Header{{"content-length", "0"}}, Body: []byte("x")},
		"a coding":     {Method: "POST", Target: "/", Header: Header{{"Transfer-Encoding", "chunked"}}},
		"a host":       {Method: "GET", Target: "/", Header: Header{{"Host", "other"}}},
	} {
		if _, err := tr.Do(context.Background(), req); err == nil {
			t.Errorf("%s: sent", name)
		}
	}
}

// TestReadsResponses: heads and bodies as servers frame them, and what
// is refused, each with an error naming it.
func TestReadsResponses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in, body, err string
		keep                bool
	}{
		{name: "length", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef", body: "abc", keep: true},
		{name: "chunked with extensions and a trailer", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n1\r\nd\r\n0\r\nT: v\r\n\r\n", body: "abcd", keep: true},
		{name: "bare line feeds", in: "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", body: "x", keep: true},
		{name: "until close", in: "HTTP/1.1 200 OK\r\n\r\nall of it", body: "all of it"},
		{name: "connection close", in: "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n"},
		{name: "HTTP/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "interim", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok", keep: true},
		{name: "no reason", in: "HTTP/1.1 204\r\n\r\n", keep: true},
		{name: "HTTP/2", in: "HTTP/2 200 OK\r\n\r\n", err: "not an HTTP/1.x status line"},
		{name: "status", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: "not three digits"},
		{name: "status 099", in: "HTTP/1.1 099 X\r\n\r\n", err: "not one HTTP has"},
		{name: "folded", in: "HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n", err: "is not NAME: VALUE"},
		{name: "folded with a colon", in: "HTTP/1.1 200 OK\r\nA: b\r\n c: d\r\n\r\n", err: "is not a token"},
		{name: "no colon", in: "HTTP/1.1 200 OK\r\nAb\r\n\r\n", err: "is not NAME: VALUE"},
		{name: "both framings", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", err: "both"},
		{name: "gzip", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "only chunked"},
		{name: "negative length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "not a length"},
		{name: "lengths disagree", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", err: "disagree"},
		{name: "short body", in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", err: "before the body did"},
		{name: "chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n", err: "not a size"},
		{name: "chunk overrun", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n0\r\n\r\n", err: "runs past its size"},
		{name: "chunk cut", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", err: "inside a chunk"},
		{name: "no head end", in: "HTTP/1.1 200 OK\r\nA: b\r\n", err: "unexpected EOF"},
		{name: "switching", in: "HTTP/1.1 101 Switching Protocols\r\n\r\n", err: "switched protocols"},
		{name: "long line", in: "HTTP/1.1 200 OK\r\nA: " + strings.Repeat("x", readBuffer) + "\r\n\r\n", err: "longer than"},
		{name: "control in value", in: "HTTP/1.1 200 OK\r\nA: b\x00c\r\n\r\n", err: "control character"},
	} {
		resp, r, keep, err := readResponse(bufio.NewReaderSize(strings.NewReader(c.in), readBuffer), "GET")
		var body []byte
		if err == nil {
			body, err = io.ReadAll(r)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case c.err == "" && (string(body) != c.body || keep != c.keep):
			t.Errorf("%s: body %q keep %v, want %q %v", c.name, body, keep, c.body, c.keep)
		case c.err == "" && resp == nil:
			t.Errorf("%s: no response", c.name)
		}
	}
}

// FuzzResponseAgainstNetHTTP: whatever a server sends, the head is read
// or refused and the body read to its end or refused, within bounds,
// never a panic; and where net/http reads the same response and body
// whole, it reads the same body, and where this package keeps the
// connection, leaves the same bytes after it. (Not compared: interim
// responses, which net/http returns to its caller, and HTTP/1.0, where
// this package keeps no connection.)
func FuzzResponseAgainstNetHTTP(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: v\r\n\r\nrest",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\nx",
		"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\nx",
		"HTTP/1.1 204\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), readBuffer)
		resp, r, keep, err := readResponse(br, "GET")
		if err != nil {
			return
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return
		}
		rest, _ := io.ReadAll(br)
		hb := bufio.NewReader(bytes.NewReader(in))
		hr, err := http.ReadResponse(hb, nil)
		if err != nil || hr.StatusCode < 200 || hr.ProtoMinor == 0 || hr.StatusCode != resp.Status {
			return
		}
		hbody, err := io.ReadAll(hr.Body)
		if err != nil {
			return
		}
		hrest, _ := io.ReadAll(hb)
		if !bytes.Equal(body, hbody) || (keep && !bytes.Equal(rest, hrest)) {
			t.Fatalf("body %q rest %q keep %v; net/http's body %q rest %q", body, rest, keep, hbody, hrest)
		}
	})
}

// TestReadCloseAndCancelAtOnce: a body read in one goroutine, closed in
// another, its context ended in a third; every connection kept after
// carries a whole, right response.
func TestReadCloseAndCancelAtOnce(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 70000)
	tr, _, _ := server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			io.WriteString(w, "small")
			return
		}
		io.WriteString(w, big)
	}))
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		target := "/big"
		if i%2 == 0 {
			target = "/small"
		}
		resp, err := tr.Do(ctx, &Request{Method: "GET", Target: target})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); io.Copy(io.Discard, resp.Body) }()
		go func() { defer wg.Done(); resp.Body.Close() }()
		go func() {
			defer wg.Done()
			if i%3 == 0 {
				cancel()
			}
		}()
		wg.Wait()
		cancel()
		resp, err = tr.Do(context.Background(), &Request{Method: "GET", Target: "/small"})
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "small" {
			t.Fatalf("after %d: %q", i, got)
		}
	}
}
