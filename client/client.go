package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/internal/h1"
)

// SocketName is the service's socket in the state directory.
const SocketName = "serve.sock"

// Client calls one sandbox service.
type Client struct {
	prefix string // of every path: the URL's path, without its last '/'
	token  string
	policy string // the Sandbox-Policy header's value; "" for none
	tr     *h1.Transport
}

// PolicyHeader is the request header in which a caller asks the service
// to hold it to a narrower policy than its own (docs/api.md,
// "Authority").
const PolicyHeader = "Sandbox-Policy"

// Narrowed is a client whose every call asks the service to hold it to
// the policy document doc as well as to its own authority (an MCP
// server's connection, whose tool arguments are a model's): the service
// refuses, as denied, any grant doc does not allow. It shares c's
// connections.
func (c *Client) Narrowed(doc []byte) *Client {
	n := *c
	n.policy = base64.RawURLEncoding.EncodeToString(doc)
	return &n
}

// Options configure a client.
type Options struct {
	// Token is the bearer token for a TCP service.
	Token string
	// DialTLS makes the TLS connection to an https:// service: with the
	// standard library, (&tls.Dialer{Config: cfg}).DialContext, where
	// cfg holds the roots the service's certificate is checked against
	// (nil for the system's). The client itself links no TLS, so that a
	// program that only talks to a unix socket (the sandbox command)
	// starts without it.
	DialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Dial returns a client of the service at addr: a unix socket's path,
// "unix:PATH", or an "https://host:port" URL (with Options.DialTLS).
// Nothing is sent until the first call. The client speaks HTTP/1.1,
// keeping connections between calls.
func Dial(addr string, o Options) (*Client, error) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok || strings.HasPrefix(addr, "/") {
		if !ok {
			p = addr
		}
		return &Client{token: o.Token, tr: &h1.Transport{Host: "sandbox", MaxIdle: 64, Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p)
		}}}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("client: %q: want a unix socket path, unix:PATH, or https://HOST:PORT", addr)
	}
	host := u.Host
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", host)
	}
	if u.Scheme == "https" {
		if o.DialTLS == nil {
			return nil, fmt.Errorf("client: %q: an https:// service needs Options.DialTLS, e.g. (&tls.Dialer{Config: cfg}).DialContext", addr)
		}
		dial = func(ctx context.Context) (net.Conn, error) { return o.DialTLS(ctx, "tcp", host) }
	}
	return &Client{prefix: strings.TrimSuffix(u.EscapedPath(), "/"), token: o.Token, tr: &h1.Transport{Host: u.Host, MaxIdle: 64, Dial: dial}}, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.tr.CloseIdle() }

// do makes a request with a body sent whole, or one streamed (stream
// not nil). A response of 400 or more is returned as an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body []byte, stream io.Reader, ctype string) (*h1.Response, error) {
	req := &h1.Request{Method: method, Target: c.prefix + path, Body: body, Stream: stream}
	if ctype != "" {
		req.Header = append(req.Header, h1.Field{Name: "Content-Type", Value: ctype})
	}
	if c.token != "" {
		req.Header = append(req.Header, h1.Field{Name: "Authorization", Value: "Bearer " + c.token})
	}
	if c.policy != "" {
		req.Header = append(req.Header, h1.Field{Name: PolicyHeader, Value: c.policy})
	}
	resp, err := c.tr.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Status >= 400 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *h1.Response) error {
	e := &APIError{Status: resp.Status}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, e) != nil || e.Message == "" {
		e.Category, e.Message = "internal", fmt.Sprintf("the service answered %s: %s", resp.StatusLine(), bytes.TrimSpace(b))
	}
	return e
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = b, "application/json"
	}
	resp, err := c.do(ctx, method, path, body, nil, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return err
	}
	// What is left is the encoder's line end: read to the end, the
	// connection is kept for the next call.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}

// Health says whether the service answers.
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, "GET", "/v1/health", nil, nil)
}

// Create makes a live sandbox.
func (c *Client) Create(ctx context.Context, spec SandboxSpec) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, "POST", "/v1/sandboxes", spec, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Claim takes a ready sandbox from the service's warm pool of that name:
// made ahead, it is the caller's now, and its record's first segment
// carries the energy spent keeping it ready.
func (c *Client) Claim(ctx context.Context, pool string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, "POST", "/v1/pools/"+url.PathEscape(pool)+"/claim", nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Pools are the service's warm pools and what each did.
func (c *Client) Pools(ctx context.Context) ([]Pool, error) {
	var l []Pool
	return l, c.call(ctx, "GET", "/v1/pools", nil, &l)
}

// Fleet runs a fleet in the service, telling progress each item's end
// (nil: nothing), and returns it once sealed.
func (c *Client) Fleet(ctx context.Context, spec FleetSpec, progress func(done, total int)) (*FleetResult, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, "POST", "/v1/fleets", b, nil, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var f FleetFrame
		if err := dec.Decode(&f); err != nil {
			if err == io.EOF {
				return nil, ErrNoResult
			}
			return nil, err
		}
		switch {
		case f.Error != nil:
			return nil, f.Error
		case f.Fleet != nil:
			return f.Fleet, nil
		case f.Progress != nil && progress != nil:
			progress(f.Progress.Done, f.Progress.Total)
		}
	}
}

// List lists the caller's sandboxes, live and suspended: in a cluster,
// those of every host, each naming the host that holds it (Sandbox.Host).
func (c *Client) List(ctx context.Context) ([]Sandbox, error) {
	var l []Sandbox
	return l, c.call(ctx, "GET", "/v1/sandboxes", nil, &l)
}

// Watch streams the changes under directory p of live sandbox id (and
// beneath it, with recursive) to fn, the first event "watching" (the
// watch is in place), until ctx ends, fn returns an error (returned), or
// the watch ends ("ended", then nil).
func (c *Client) Watch(ctx context.Context, id, p string, recursive bool, fn func(WatchEvent) error) error {
	q := url.Values{"path": {p}}
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.do(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id)+"/watch?"+q.Encode(), nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var e WatchEvent
		if err := dec.Decode(&e); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == io.EOF {
				return ErrNoResult
			}
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
		if e.Op == "ended" {
			return nil
		}
	}
}

// ListHere lists the caller's sandboxes on the host asked alone (in a
// cluster, List lists those of every host).
func (c *Client) ListHere(ctx context.Context) ([]Sandbox, error) {
	var l []Sandbox
	return l, c.call(ctx, "GET", "/v1/sandboxes?here=true", nil, &l)
}

// Get describes a live sandbox.
func (c *Client) Get(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id), nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Remove ends a live sandbox.
func (c *Client) Remove(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

// Suspend parks a live sandbox: frozen, its workspace kept by address,
// Suspended appended to its record, then torn down. Its processes do not
// survive (S1 keeps no memory image).
func (c *Client) Suspend(ctx context.Context, id string) (*Snapshot, error) {
	var s Snapshot
	return &s, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/suspend", nil, &s)
}

// Fork makes spec.Count sandboxes from the state of sandbox id, live
// (captured as a suspension captures it; it runs on) or suspended. An
// error is the fork's as a whole; a child that was not made says why
// in its Error.
func (c *Client) Fork(ctx context.Context, id string, spec ForkSpec) (*Forked, error) {
	var f Forked
	return &f, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/fork", spec, &f)
}

// Expose makes a preview of port, one of live sandbox id's listen ports:
// a URL on the service's TCP listener that reaches the port until it
// expires or is revoked.
func (c *Client) Expose(ctx context.Context, id string, spec PreviewSpec) (*Preview, error) {
	var p Preview
	return &p, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/ports", spec, &p)
}

// Previews lists live sandbox id's open previews (without their tokens).
func (c *Client) Previews(ctx context.Context, id string) ([]Preview, error) {
	var p Previews
	if err := c.call(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id)+"/ports", nil, &p); err != nil {
		return nil, err
	}
	return p.Previews, nil
}

// Unexpose revokes every open preview of port of live sandbox id and
// says how many it ended.
func (c *Client) Unexpose(ctx context.Context, id string, port int) (int, error) {
	var r Revoked
	err := c.call(ctx, "DELETE", "/v1/sandboxes/"+url.PathEscape(id)+"/ports/"+strconv.Itoa(port), nil, &r)
	return r.Revoked, err
}

// Seed seeds live sandbox id's workspace with a git checkout (S1).
func (c *Client) Seed(ctx context.Context, id string, spec SeedSpec) (*Seeded, error) {
	var s Seeded
	return &s, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/seed", spec, &s)
}

// Receipt reads a passive preservation receipt of seeded sandbox id.
func (c *Client) Receipt(ctx context.Context, id string, spec ReceiptSpec) (*PreservationReceipt, error) {
	var r PreservationReceipt
	return &r, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/preservation", spec, &r)
}

// RunReport reads sealed run id (b3:…) as the service verifies it.
func (c *Client) RunReport(ctx context.Context, id string) (*RunReport, error) {
	var r RunReport
	return &r, c.call(ctx, "GET", "/v1/runs/"+url.PathEscape(id), nil, &r)
}

// Resume starts a suspended sandbox again from its record.
func (c *Client) Resume(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/resume", nil, &s)
}

// OpenAPI is the service's OpenAPI document, as it serves it.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) { return c.raw(ctx, "/v1/openapi.json") }

// Metrics is the service's metrics, in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) { return c.raw(ctx, "/metrics") }

// raw is a GET's body, whole (at most 16 MiB).
func (c *Client) raw(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.do(ctx, "GET", path, nil, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20+1))
	if err == nil && len(b) > 16<<20 {
		err = fmt.Errorf("client: %s: more than 16 MiB", path)
	}
	return b, err
}

// HostKey is the key the service's host seals with ("ed25519:HEX"):
// check it out of band before trusting what it signs.
func (c *Client) HostKey(ctx context.Context) (string, error) {
	var k HostKey
	err := c.call(ctx, "GET", "/v1/key", nil, &k)
	return k.Key, err
}

// RunBundle writes run id's directory, as a tar of runs/HEX/NAME
// entries, to w: its sealed files, to verify offline.
func (c *Client) RunBundle(ctx context.Context, id string, w io.Writer) error {
	resp, err := c.do(ctx, "GET", "/v1/runs/"+url.PathEscape(id)+"/bundle", nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ResumeHere is Resume on the host asked, where a cluster would place
// the resumption elsewhere.
func (c *Client) ResumeHere(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/resume?here=true", nil, &s)
}

// CloseRecord ends a sandbox's durable run, live (as Remove) or
// suspended.
func (c *Client) CloseRecord(ctx context.Context, id string) error {
	return c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/close", nil, nil)
}

// Records lists the caller's sandboxes' run records.
func (c *Client) Records(ctx context.Context) ([]Record, error) {
	var l []Record
	return l, c.call(ctx, "GET", "/v1/records", nil, &l)
}

// Exec runs a command in a live sandbox, writing its output to stdout
// and stderr as it comes, and returns the sealed run. Cancelling ctx
// interrupts the exec: the service seals it, and its result is still
// returned (or, when it cannot be had within InterruptWait, ctx's
// error). When writing its output fails, the exec is interrupted the
// same way and its result is returned with an *OutputError.
func (c *Client) Exec(ctx context.Context, id string, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	return c.stream(ctx, "/v1/sandboxes/"+url.PathEscape(id)+"/exec", x, stdout, stderr)
}

// Run makes a one-shot sealed run through the service: what `sandbox
// run` does in-process. Cancelling ctx and failed writes are as for
// Exec.
func (c *Client) Run(ctx context.Context, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	return c.stream(ctx, "/v1/runs", x, stdout, stderr)
}

// Interrupt interrupts the caller's call in flight named key (an
// ExecSpec's InterruptKey).
func (c *Client) Interrupt(ctx context.Context, key string) error {
	return c.call(ctx, "POST", "/v1/interrupts/"+url.PathEscape(key), nil, nil)
}

// InterruptWait bounds how long a call whose context ended waits for its
// sealed result once the service was asked to interrupt it.
const InterruptWait = 15 * time.Second

// ErrNoResult is returned when a stream ends without a result: the
// connection broke.
var ErrNoResult = errors.New("client: the service's stream ended without a result")

// OutputError is a failure to write a call's output to the caller's
// writer (a closed pipe): the call was interrupted because of it.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return "client: writing the program's output: " + e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

func newKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// stream makes a call and reads its frames. The request is not tied to
// ctx directly: when ctx ends, the service is asked to interrupt the
// call by its key, and the sealed result is still read.
func (c *Client) stream(ctx context.Context, path string, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	if x.InterruptKey == "" {
		x.InterruptKey = newKey()
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	body, stream, ctype := b, io.Reader(nil), "application/json"
	if x.StdinStream != nil && x.Stdin == nil {
		body, stream, ctype = nil, io.MultiReader(bytes.NewReader(append(b, '\n')), x.StdinStream), StdinStreamType
	}
	rctx, drop := context.WithCancel(context.WithoutCancel(ctx))
	defer drop()
	var once sync.Once
	interrupt := func() {
		once.Do(func() {
			go func() {
				ictx, cancel := context.WithTimeout(rctx, InterruptWait)
				defer cancel()
				// Not in flight: not yet (the service has not read the
				// call) or no longer (its result is on its way). Asked
				// again for a moment; then the connection is dropped,
				// and the service seals what it started.
				for try := 0; ; try++ {
					err := c.Interrupt(ictx, x.InterruptKey)
					if err == nil {
						break
					}
					var ae *APIError
					if !errors.As(err, &ae) || ae.Status != 404 || try == 20 {
						drop()
						return
					}
					select {
					case <-ictx.Done():
						drop()
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
				<-ictx.Done()
				drop()
			}()
		})
	}
	defer context.AfterFunc(ctx, interrupt)()
	resp, err := c.do(rctx, "POST", path, body, stream, ctype)
	if err != nil {
		return nil, ended(ctx, err)
	}
	defer resp.Body.Close()
	var outErr error
	write := func(w io.Writer, p []byte) {
		if w == nil || len(p) == 0 || outErr != nil {
			return
		}
		if _, err := w.Write(p); err != nil {
			outErr = &OutputError{err}
			interrupt()
		}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var f Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return nil, fmt.Errorf("client: a malformed frame from the service: %w", err)
		}
		switch {
		case f.Error != nil:
			f.Error.Status = resp.Status
			return nil, f.Error
		case f.Result != nil:
			return f.Result, outErr
		}
		write(stdout, f.Stdout)
		write(stderr, f.Stderr)
	}
	if err := sc.Err(); err != nil {
		return nil, ended(ctx, err)
	}
	return nil, ended(ctx, ErrNoResult)
}

// ended is a call's error, with ctx's when ctx ended it.
func ended(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return err
}

func filesPath(id, p string, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("path", p)
	return "/v1/sandboxes/" + url.PathEscape(id) + "/files?" + q.Encode()
}

// Upload writes r to path p in a live sandbox (under a read-write grant).
func (c *Client) Upload(ctx context.Context, id, p string, r io.Reader, mode os.FileMode) (int64, error) {
	q := url.Values{"mode": {strconv.FormatUint(uint64(mode.Perm()), 8)}}
	resp, err := c.do(ctx, "PUT", filesPath(id, p, q), nil, r, "application/octet-stream")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Size int64 `json:"size"`
	}
	return out.Size, json.NewDecoder(resp.Body).Decode(&out)
}

// Download writes file p of a live sandbox to w.
func (c *Client) Download(ctx context.Context, id, p string, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, "GET", filesPath(id, p, nil), nil, nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.Length >= 0 && n != resp.Length {
		err = fmt.Errorf("client: %s: got %d of %d bytes", p, n, resp.Length)
	}
	return n, err
}

// ListFiles lists directory p of a live sandbox.
func (c *Client) ListFiles(ctx context.Context, id, p string) ([]FileInfo, error) {
	var l []FileInfo
	return l, c.call(ctx, "GET", filesPath(id, p, url.Values{"list": {"1"}}), nil, &l)
}
