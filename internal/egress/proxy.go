package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/internal/grant"
)

// Resolver looks up a name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is a run's proxy.
type Config struct {
	// Enforcer decides and logs every destination: the run's own.
	Enforcer *grant.Enforcer
	// Inject are the headers to add, by "host:port" of the net grant
	// (Secrets makes them).
	Inject map[string][]Header
	// Resolver resolves names; default net.DefaultResolver.
	Resolver Resolver
	// Dial connects to a vetted address; default a net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// UpstreamRoots verify the servers of credential-injected hosts;
	// default the system's roots.
	UpstreamRoots *x509.CertPool
	// DialTimeout bounds a resolution and a connection; default 10 s.
	DialTimeout time.Duration
	// CAValidity is how long the run's authority is valid; default 7 days.
	CAValidity time.Duration
	// Now is the clock for the authority; default time.Now.
	Now func() time.Time
}

// Proxy is one run's egress proxy.
type Proxy struct {
	cfg       Config
	ca        *authority
	transport *http.Transport

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New returns a proxy for one run. With injections, it makes the run's
// certificate authority.
func New(cfg Config) (*Proxy, error) {
	if cfg.Enforcer == nil {
		return nil, errors.New("egress: an enforcer is required")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.CAValidity == 0 {
		cfg.CAValidity = 7 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Proxy{cfg: cfg, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	if len(cfg.Inject) > 0 {
		seen := map[string]bool{}
		var hosts []string
		for k := range cfg.Inject {
			h, _, _ := net.SplitHostPort(k)
			if !seen[h] {
				seen[h] = true
				hosts = append(hosts, h)
			}
		}
		sort.Strings(hosts)
		ca, err := newAuthority(hosts, cfg.Now(), cfg.CAValidity)
		if err != nil {
			return nil, err
		}
		p.ca = ca
	}
	p.transport = &http.Transport{
		DialContext:         p.dialVetted,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: cfg.DialTimeout,
	}
	return p, nil
}

// CACertPEM is the run's authority in PEM, for the run to trust; nil when
// the run has no injected credentials (and so no authority).
func (p *Proxy) CACertPEM() []byte {
	if p.ca == nil {
		return nil
	}
	return p.ca.pem
}

// Serve accepts the run's connections on ln until ln or the proxy is
// closed.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil
	}
	p.lns[ln] = struct{}{}
	p.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			delete(p.lns, ln)
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		if !p.track(c) {
			c.Close()
			return nil
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// Close stops every listener and ends every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	return nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// handle serves one connection from the run: SOCKS5 when it starts with
// version byte 5, else HTTP (absolute-form requests and CONNECT).
func (p *Proxy) handle(c net.Conn) {
	ctx := context.Background()
	br := bufio.NewReader(c)
	b, err := br.Peek(1)
	if err != nil {
		return
	}
	if b[0] == 5 {
		host, port, err := socksRequest(br, c)
		if err != nil {
			return
		}
		addrs, err := p.vet(ctx, host, port)
		if err != nil {
			socksReply(c, socksNotAllowed)
			return
		}
		p.open(ctx, c, br, host, port, addrs, func(err error) error {
			if err != nil {
				return socksReply(c, socksDialCode(err))
			}
			return socksReply(c, socksOK)
		})
		return
	}
	p.serveHTTP(ctx, c, br)
}

func socksDialCode(err error) byte {
	if errors.Is(err, errRefused) {
		return socksRefused
	}
	return socksUnreachable
}

var errRefused = errors.New("connection refused")

// vet decides host:port and returns the addresses to dial.
func (p *Proxy) vet(ctx context.Context, host string, port int) ([]netip.AddrPort, error) {
	var addrs []netip.AddrPort
	err := p.cfg.Enforcer.ConnectVetted(host, port, func() error {
		a, err := p.resolve(ctx, host, port)
		addrs = a
		return err
	})
	return addrs, err
}

// resolve turns a granted destination into addresses: an IP literal as
// it is (it was granted), a name by the resolver, without the internal
// addresses that were not themselves granted.
func (p *Proxy) resolve(ctx context.Context, host string, port int) ([]netip.AddrPort, error) {
	h := strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(ip.Unmap(), uint16(port))}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	ips, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve %s: %v", h, err)
	}
	var ok []netip.AddrPort
	var refused []string
	for _, ip := range ips {
		ip = ip.Unmap()
		if bad, what := internal(ip); bad {
			if _, granted := p.cfg.Enforcer.NetGrant(ip.String(), port); !granted {
				refused = append(refused, ip.String()+" ("+what+")")
				continue
			}
		}
		ok = append(ok, netip.AddrPortFrom(ip, uint16(port)))
	}
	if len(ok) == 0 {
		if len(refused) > 0 {
			return nil, fmt.Errorf("%s resolves only to %s, not granted: a granted name may not lead to an internal address (DNS rebinding)", h, strings.Join(refused, ", "))
		}
		return nil, fmt.Errorf("%s has no address", h)
	}
	return ok, nil
}

// dial connects to the first vetted address that answers.
func (p *Proxy) dial(ctx context.Context, addrs []netip.AddrPort) (net.Conn, error) {
	var first error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, "tcp", a.String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("no address to dial")
	}
	var se interface{ Timeout() bool }
	if !errors.As(first, &se) && strings.Contains(first.Error(), "refused") {
		return nil, fmt.Errorf("%w: %v", errRefused, first)
	}
	return nil, first
}

type vettedKey struct{}

// dialVetted is the transport's dialer: only addresses vetted for the
// request, which carries them in its context, are ever dialed.
func (p *Proxy) dialVetted(ctx context.Context, _, _ string) (net.Conn, error) {
	addrs, _ := ctx.Value(vettedKey{}).([]netip.AddrPort)
	if len(addrs) == 0 {
		return nil, errors.New("egress: a request without vetted addresses")
	}
	return p.dial(ctx, addrs)
}

// open connects the run to a vetted destination for a tunnel (CONNECT or
// SOCKS): reply reports success or the dial's failure to the client in
// its protocol. A destination with injected credentials is served by the
// proxy itself (TLS terminated with the run's authority); any other is
// spliced through.
func (p *Proxy) open(ctx context.Context, c net.Conn, br *bufio.Reader, host string, port int, addrs []netip.AddrPort, reply func(error) error) {
	if inj := p.injections(host, port); len(inj) > 0 {
		if reply(nil) != nil {
			return
		}
		p.intercept(ctx, c, br, host, port, addrs, inj)
		return
	}
	up, err := p.dial(ctx, addrs)
	if err != nil {
		reply(err)
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	if reply(nil) != nil {
		return
	}
	splice(c, br, up)
}

func (p *Proxy) injections(host string, port int) []Header {
	n, ok := p.cfg.Enforcer.NetGrant(host, port)
	if !ok {
		return nil
	}
	return p.cfg.Inject[key(n.Host, n.Port)]
}

// serveHTTP serves proxy requests on one connection: CONNECT, or
// absolute-form http:// requests forwarded with keep-alive.
func (p *Proxy) serveHTTP(ctx context.Context, c net.Conn, br *bufio.Reader) {
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				httpError(c, http.StatusBadRequest, "malformed proxy request: "+err.Error())
			}
			return
		}
		if req.Method == http.MethodConnect {
			host, port, err := splitAuthority(req.RequestURI, 443)
			if err != nil {
				httpError(c, http.StatusBadRequest, "CONNECT: "+err.Error())
				return
			}
			addrs, err := p.vet(ctx, host, port)
			if err != nil {
				httpError(c, http.StatusForbidden, err.Error())
				return
			}
			p.open(ctx, c, br, host, port, addrs, func(err error) error {
				if err != nil {
					return httpError(c, http.StatusBadGateway, err.Error())
				}
				_, err = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				return err
			})
			return
		}
		if req.URL.Scheme != "http" || req.URL.Host == "" {
			httpError(c, http.StatusBadRequest, "this is the run's egress proxy: send absolute http:// URLs, or CONNECT for anything else")
			return
		}
		host, port, err := splitAuthority(req.URL.Host, 80)
		if err != nil {
			httpError(c, http.StatusBadRequest, err.Error())
			return
		}
		addrs, err := p.vet(ctx, host, port)
		if err != nil {
			io.Copy(io.Discard, req.Body)
			httpError(c, http.StatusForbidden, err.Error())
			if req.Close {
				return
			}
			continue
		}
		if !p.forward(ctx, c, req, "http", host, port, addrs, p.injections(host, port)) {
			return
		}
	}
}

// intercept serves a tunnel to a credential-injected destination: TLS
// (the first byte is a handshake record) is terminated with a certificate
// from the run's authority, and each HTTP request is forwarded with the
// headers added; plain HTTP is served the same way without TLS.
func (p *Proxy) intercept(ctx context.Context, c net.Conn, br *bufio.Reader, host string, port int, addrs []netip.AddrPort, inj []Header) {
	b, err := br.Peek(1)
	if err != nil {
		return
	}
	conn, scheme := net.Conn(&bufConn{Conn: c, r: br}), "http"
	if b[0] == 0x16 {
		tc := tls.Server(conn, &tls.Config{
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.ca.leaf(strings.Trim(host, "[]")) },
			NextProtos:     []string{"http/1.1"},
			MinVersion:     tls.VersionTLS12,
		})
		hctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return
		}
		conn, scheme = tc, "https"
	}
	ir := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(ir)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				httpError(conn, http.StatusBadRequest, "malformed request: "+err.Error())
			}
			return
		}
		if !p.forward(ctx, conn, req, scheme, host, port, addrs, inj) {
			return
		}
	}
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// injectMethods are the methods forwarded to a host with injected
// credentials: what APIs use. TRACE (which echoes the request, secret
// and all), CONNECT and anything else are refused.
var injectMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// forward sends req to host:port (at the vetted addresses) with the
// injected headers and writes the response to w. It reports whether the
// client connection may carry another request.
//
// To a host with injections: only injectMethods are forwarded; the
// secret goes only over TLS (scheme https, the server's certificate
// verified) unless its injection allows plain HTTP; the response comes
// back unencoded and every form of the secret in it (headers and body) is
// redacted, with a decision logged.
func (p *Proxy) forward(ctx context.Context, w io.Writer, req *http.Request, scheme, host string, port int, addrs []netip.AddrPort, inj []Header) bool {
	dest := key(strings.Trim(host, "[]"), port)
	if len(inj) > 0 {
		refuse := func(code int, why string) bool {
			p.cfg.Enforcer.Note(grant.KindNet, grant.OpInject, dest, false, why)
			io.Copy(io.Discard, req.Body)
			httpError(w, code, why)
			return false
		}
		if !injectMethods[req.Method] {
			return refuse(http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not forwarded to a host with injected credentials", clip(req.Method)))
		}
		if scheme != "https" {
			for _, h := range inj {
				if !h.Plain {
					return refuse(http.StatusForbidden, fmt.Sprintf("the secret for %s goes only over TLS (https://); --inject http://%s:%s=... allows plain HTTP", dest, dest, h.Name))
				}
			}
		}
	}
	out := req.Clone(context.WithValue(ctx, vettedKey{}, addrs))
	out.RequestURI = ""
	out.URL.Scheme = scheme
	out.URL.Host = dest
	out.Host = ""
	for _, f := range out.Header.Values("Connection") {
		for _, h := range strings.Split(f, ",") {
			out.Header.Del(strings.TrimSpace(h))
		}
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Close = false
	for _, h := range inj {
		out.Header.Set(h.Name, h.Value)
		p.cfg.Enforcer.Note(grant.KindNet, grant.OpInject, dest, true, h.Name+" from "+h.Ref)
	}
	if len(inj) > 0 {
		out.Header.Set("Accept-Encoding", "identity") // what comes back is scanned
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		httpError(w, http.StatusBadGateway, "upstream: "+err.Error())
		return false
	}
	defer resp.Body.Close()
	keep := !req.Close && !resp.Close
	if !keep {
		resp.Close = true
	}
	if len(inj) > 0 {
		if err := p.scrub(resp, dest, inj); err != nil {
			p.cfg.Enforcer.Note(grant.KindNet, grant.OpInject, dest, false, err.Error())
			httpError(w, http.StatusBadGateway, err.Error())
			return false
		}
	}
	if err := resp.Write(w); err != nil {
		return false
	}
	return keep
}

// scrub readies a response from a host with injections for the run:
// decoded (gzip) so that it can be read, and every form of the secret
// redacted from its headers and body, each form found logged once.
func (p *Proxy) scrub(resp *http.Response, dest string, inj []Header) error {
	switch enc := strings.ToLower(resp.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("a gzip response from %s that cannot be read cannot be checked for the secret", dest)
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"} // its length is unknown now
	default:
		return fmt.Errorf("a response from %s in %q encoding cannot be checked for the secret", dest, clip(enc))
	}
	pats := patterns(inj)
	var mu sync.Mutex
	logged := map[string]bool{}
	found := func(form string) {
		mu.Lock()
		defer mu.Unlock()
		if !logged[form] {
			logged[form] = true
			p.cfg.Enforcer.Note(grant.KindNet, grant.OpInject, dest, false, "the response held the injected secret ("+form+"); redacted")
		}
	}
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		for _, vs := range h {
			for i := range vs {
				b := []byte(vs[i])
				for _, f := range redactBytes(b, pats) {
					found(f)
				}
				vs[i] = string(b)
			}
		}
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{newRedactor(resp.Body, pats, found), resp.Body}
	return nil
}

// clip shortens guest text for a message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// httpError answers a proxy request with code and a one-line reason.
func httpError(w io.Writer, code int, msg string) error {
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	body := "sandbox egress: " + msg + "\n"
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Sandbox-Egress: %s\r\n\r\n%s",
		code, http.StatusText(code), len(body), msg, body)
	return err
}

// splitAuthority splits host[:port] (the port defaulting to def).
func splitAuthority(hp string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(hp, "[]"), def, nil
		}
		return "", 0, fmt.Errorf("%q is not host:port", hp)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 1..65535", hp)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q: empty host", hp)
	}
	return host, port, nil
}

// bufConn reads what a bufio.Reader already holds before the connection.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// splice copies both ways until both are done; a side's clean end is
// passed on as a half-close, an error ends both.
func splice(c net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	pass := func(dst net.Conn, src io.Reader) {
		if _, err := io.Copy(dst, src); err != nil {
			c.Close()
			up.Close()
		} else {
			closeWrite(dst)
		}
		done <- struct{}{}
	}
	// What the reader holds goes first; then the connection itself, so
	// that io.Copy can use the kernel's splice between sockets.
	var src io.Reader = c
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		src = io.MultiReader(bytes.NewReader(append([]byte(nil), b...)), c)
	}
	go pass(up, src)
	go pass(c, up)
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// ProxyEnv are the variables that point a run's programs at its proxy
// (url) and, where the run has its own authority, at the bundle of roots
// it trusts (ca, "" for none): every tier sets the same.
func ProxyEnv(url, ca string) map[string]string {
	vars := map[string]string{
		"HTTP_PROXY": url, "HTTPS_PROXY": url, "ALL_PROXY": url,
		"http_proxy": url, "https_proxy": url, "all_proxy": url,
	}
	if ca != "" {
		for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "NPM_CONFIG_CAFILE"} {
			vars[k] = ca
		}
	}
	return vars
}

// CAPath is where a run with injected credentials finds the roots it
// trusts, at every tier: the system's and the run's own authority.
const CAPath = "/run/sandbox/ca.pem"

// SystemRoots is the system's CA bundle (Debian's path).
var SystemRoots = "/etc/ssl/certs/ca-certificates.crt"

// TrustBundle is the system's roots followed by extra (PEM; nil for
// none): the bundle a run's programs verify servers with.
func TrustBundle(extra []byte) []byte {
	b, _ := os.ReadFile(SystemRoots)
	if len(b) > 0 && b[len(b)-1] != '\n' && len(extra) > 0 {
		b = append(b, '\n')
	}
	return append(b, extra...)
}
