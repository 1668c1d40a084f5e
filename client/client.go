package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// SocketName is the service's socket in the state directory.
const SocketName = "serve.sock"

// Client calls one sandbox service.
type Client struct {
	base  string // "http://sandbox" for a unix socket, else the URL
	token string
	hc    *http.Client
}

// Options configure a client.
type Options struct {
	// Token is the bearer token for a TCP service.
	Token string
	// TLS configures the TLS of an https:// service (its roots, say).
	TLS *tls.Config
}

// Dial returns a client of the service at addr: a unix socket's path,
// "unix:PATH", or an "https://host:port" URL. Nothing is sent until the
// first call.
func Dial(addr string, o Options) (*Client, error) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok || strings.HasPrefix(addr, "/") {
		if !ok {
			p = addr
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", p)
			},
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
		}
		return &Client{base: "http://sandbox", hc: &http.Client{Transport: tr}, token: o.Token}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("client: %q: want a unix socket path, unix:PATH, or https://HOST:PORT", addr)
	}
	tr := &http.Transport{TLSClientConfig: o.TLS, MaxIdleConnsPerHost: 64}
	return &Client{base: strings.TrimSuffix(u.String(), "/"), hc: &http.Client{Transport: tr}, token: o.Token}, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	e := &APIError{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, e) != nil || e.Message == "" {
		e.Category, e.Message = "internal", fmt.Sprintf("the service answered %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return e
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
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

// List lists the caller's live sandboxes.
func (c *Client) List(ctx context.Context) ([]Sandbox, error) {
	var l []Sandbox
	return l, c.call(ctx, "GET", "/v1/sandboxes", nil, &l)
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

// Exec runs a command in a live sandbox, writing its output to stdout
// and stderr as it comes, and returns the sealed run. Cancelling ctx
// ends the exec; the service seals it as interrupted.
func (c *Client) Exec(ctx context.Context, id string, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	return c.stream(ctx, "/v1/sandboxes/"+url.PathEscape(id)+"/exec", x, stdout, stderr)
}

// Run makes a one-shot sealed run through the service.
func (c *Client) Run(ctx context.Context, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	return c.stream(ctx, "/v1/runs", x, stdout, stderr)
}

// ErrNoResult is returned when a stream ends without a result: the
// connection broke.
var ErrNoResult = errors.New("client: the service's stream ended without a result")

func (c *Client) stream(ctx context.Context, path string, x ExecSpec, stdout, stderr io.Writer) (*Result, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, "POST", path, bytes.NewReader(b), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var f Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return nil, fmt.Errorf("client: a malformed frame from the service: %w", err)
		}
		switch {
		case f.Error != nil:
			f.Error.Status = resp.StatusCode
			return nil, f.Error
		case f.Result != nil:
			return f.Result, nil
		}
		if len(f.Stdout) > 0 && stdout != nil {
			if _, err := stdout.Write(f.Stdout); err != nil {
				return nil, err
			}
		}
		if len(f.Stderr) > 0 && stderr != nil {
			if _, err := stderr.Write(f.Stderr); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, ErrNoResult
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
	resp, err := c.do(ctx, "PUT", filesPath(id, p, q), r, "application/octet-stream")
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
	resp, err := c.do(ctx, "GET", filesPath(id, p, nil), nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("client: %s: got %d of %d bytes", p, n, resp.ContentLength)
	}
	return n, err
}

// ListFiles lists directory p of a live sandbox.
func (c *Client) ListFiles(ctx context.Context, id, p string) ([]FileInfo, error) {
	var l []FileInfo
	return l, c.call(ctx, "GET", filesPath(id, p, url.Values{"list": {"1"}}), nil, &l)
}
