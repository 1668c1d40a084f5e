package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/live"
)

// PreviewPrefix is where previews are served on the service's TCP
// listener: PreviewPrefix + TOKEN + "/" + the path asked of the port.
const PreviewPrefix = "/preview/"

// previewCSP is added to every response a preview serves: its documents
// run in an opaque origin of their own, never the service's (whose
// console keeps a token in the page's storage), with scripts, forms and
// popups as a page of its own would have them.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// previewHeaders are the caller's headers a preview never passes on to
// the sandbox: the API's credentials and authority, and the cluster's.
// (Cookie is filtered: previewCookies.)
var previewHeaders = []string{"Authorization", "Proxy-Authorization", policyHeader, HeaderPlacement}

// originHeaders are the sandbox's response headers a preview never
// passes on: each acts on the whole origin (HOST:PORT), which the API,
// the console and every other tenant's previews share: reporting (a
// browser would send later requests' URLs, other previews' tokens among
// them, to the guest's collector), clearing the site's storage (the
// console's token), pinning the host for a year.
var originHeaders = []string{"NEL", "Report-To", "Reporting-Endpoints", "Clear-Site-Data", "Strict-Transport-Security",
	"Alt-Svc", "Service-Worker-Allowed", "Origin-Agent-Cluster", "Permissions-Policy", "Cross-Origin-Opener-Policy"}

// cookiePrefix names the cookies a preview's sandbox set: only they are
// passed back to it (without the prefix), never the host's other
// cookies (another application on the same host name, a parent
// domain's).
const cookiePrefix = "sbp_"

// WithPreviews serves previews at PreviewPrefix beside api, on the
// service's TCP listener (tcpAddr, said in a preview's URL when it is
// asked for on the unix socket). A preview's token is its capability: no
// bearer token is asked.
func (s *Server) WithPreviews(api http.Handler, tcpAddr string) http.Handler {
	s.init()
	s.previewAddr = tcpAddr
	mux := http.NewServeMux()
	mux.Handle(PreviewPrefix, s.logged(http.HandlerFunc(s.servePreview)))
	mux.Handle("/", api)
	return mux
}

// logPath is a request's path as the log says it: a preview's token, a
// secret, is said as its address (as the exposing log line says it).
func logPath(p string) string {
	rest, ok := strings.CutPrefix(p, PreviewPrefix)
	if !ok || rest == "" {
		return p
	}
	token, tail, slash := strings.Cut(rest, "/")
	out := PreviewPrefix + addr.Of([]byte(token)).String()
	if slash {
		out += "/" + tail
	}
	return out
}

// PreviewsApart serves only previews, on a listener of their own (addr,
// whose port a preview's URL names): an origin apart from the API's and
// the console's. Anything else there is 404.
func (s *Server) PreviewsApart(addr string) http.Handler {
	s.init()
	s.previewAddr, s.previewApart = addr, true
	mux := http.NewServeMux()
	mux.Handle(PreviewPrefix, s.logged(http.HandlerFunc(s.servePreview)))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		previewError(w, ErrNotPreview)
	}))
	return mux
}

// ErrNotPreview is what a preview listener says of any other path.
var ErrNotPreview = fmt.Errorf("%w: this address serves only port previews (/preview/TOKEN/)", live.ErrNoPreview)

// previewBase is HOST:PORT of a preview's URL, for a request r that
// made it: the listener's address, with the host the caller reached
// the API by where it came over TLS (a listener's own address may be
// 0.0.0.0).
func (s *Server) previewBase(r *http.Request) string {
	if r.TLS == nil || r.Host == "" {
		return s.previewAddr
	}
	if !s.previewApart {
		return r.Host // as the caller reached this listener
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	_, port, err := net.SplitHostPort(s.previewAddr)
	if err != nil {
		return s.previewAddr
	}
	return net.JoinHostPort(host, port)
}

// expose: POST /v1/sandboxes/{id}/ports.
func (s *Server) expose(w http.ResponseWriter, r *http.Request) {
	var spec client.PreviewSpec
	if err := decode(w, r, &spec, MaxBody); err != nil {
		writeErr(w, err)
		return
	}
	if s.previewAddr == "" {
		writeErr(w, &unavailableError{"previews are served on the service's TCP listener, and this service has none: start it with serve --listen"})
		return
	}
	if spec.TTLSeconds < 0 || spec.TTLSeconds > int64(live.MaxPreviewTTL/time.Second) {
		writeErr(w, badRequest(fmt.Sprintf("field \"ttl_seconds\": want 1 to %d (0: %d)", int64(live.MaxPreviewTTL/time.Second), int64(live.DefaultPreviewTTL/time.Second))))
		return
	}
	p, err := s.Live.Expose(r.Context(), r.PathValue("id"), owner(r), spec.Port, time.Duration(spec.TTLSeconds)*time.Second)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := previewOf(p)
	out.Token = p.Token
	out.URL = "https://" + s.previewBase(r) + PreviewPrefix + p.Token + "/"
	writeJSON(w, 201, out)
}

// previews: GET /v1/sandboxes/{id}/ports.
func (s *Server) previews(w http.ResponseWriter, r *http.Request) {
	ps, err := s.Live.Previews(r.PathValue("id"), owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := client.Previews{Previews: []client.Preview{}}
	for _, p := range ps {
		out.Previews = append(out.Previews, previewOf(p))
	}
	writeJSON(w, 200, out)
}

// unexpose: DELETE /v1/sandboxes/{id}/ports/{port}.
func (s *Server) unexpose(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeErr(w, badRequest(fmt.Sprintf("port %q: want 1 to 65535", r.PathValue("port"))))
		return
	}
	n, err := s.Live.Unexpose(r.PathValue("id"), owner(r), port)
	if err != nil && n == 0 {
		writeErr(w, err)
		return
	}
	if err != nil {
		s.Log.Error("revoking a preview", "sandbox", r.PathValue("id"), "port", port, "err", err)
	}
	writeJSON(w, 200, client.Revoked{Revoked: n})
}

// unavailableError: what the request needs, this service does not have.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string     { return e.msg }
func (e *unavailableError) Unavailable() bool { return true }

func previewOf(p live.Preview) client.Preview {
	return client.Preview{Sandbox: p.Sandbox, Port: p.Port, ID: p.ID.String(), Expires: p.Expires.UTC()}
}

// servePreview passes a request at PreviewPrefix + TOKEN + "/…" to the
// port the token's preview names, in its sandbox: unknown, revoked or
// expired tokens are 404 (said alike), a sandbox no longer live 410, a
// port nothing answers on 502. Each request dials anew, so expiry and
// revocation hold for every request; a connection lasts no longer than
// its preview (live.Manager.DialPreview).
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), PreviewPrefix)
	token, path, slash := strings.Cut(rest, "/")
	if err := s.Live.PreviewOpen(token); err != nil {
		previewError(w, err)
		return
	}
	if !slash {
		// The page's relative links resolve beneath the token.
		u := PreviewPrefix + token + "/"
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, u, http.StatusMovedPermanently)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := &url.URL{Scheme: "http", Host: "localhost", Path: "/", RawQuery: r.URL.RawQuery}
			if p, err := url.PathUnescape(path); err == nil {
				u.Path, u.RawPath = "/"+p, "/"+path
			}
			pr.Out.URL = u
			pr.Out.Host = "localhost"
			for _, h := range previewHeaders {
				pr.Out.Header.Del(h)
			}
			previewCookies(pr.Out.Header)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return s.Live.DialPreview(ctx, token)
			},
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
		ModifyResponse: func(resp *http.Response) error {
			scopeCookies(resp.Header, PreviewPrefix+token)
			for _, h := range originHeaders {
				resp.Header.Del(h)
			}
			resp.Header.Add("Content-Security-Policy", previewCSP)
			resp.Header.Set("X-Content-Type-Options", "nosniff")
			resp.Header.Set("Referrer-Policy", "no-referrer") // the token is in the URL
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { previewError(w, err) },
	}
	rp.ServeHTTP(w, r)
}

// scopeCookies keeps the cookies a sandbox sets to its own preview: each
// Set-Cookie's Path is put beneath prefix and its Domain dropped, so that
// the browser never sends them to the API, the console or another
// sandbox's preview on the same host (and never sends theirs here), and
// its name gets cookiePrefix (previewCookies passes back only those).
// One that does not parse is dropped.
func scopeCookies(h http.Header, prefix string) {
	set := h.Values("Set-Cookie")
	if len(set) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range set {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			continue
		}
		p := c.Path
		if !strings.HasPrefix(p, "/") {
			p = "/"
		}
		c.Name, c.Path, c.Domain = cookiePrefix+c.Name, prefix+p, ""
		if v := c.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}

// previewCookies keeps of a request's cookies only those its preview's
// sandbox set (cookiePrefix), under their own names.
func previewCookies(h http.Header) {
	if len(h.Values("Cookie")) == 0 {
		return
	}
	r := http.Request{Header: h}
	var keep []string
	for _, c := range r.Cookies() {
		if name, ok := strings.CutPrefix(c.Name, cookiePrefix); ok && name != "" {
			keep = append(keep, (&http.Cookie{Name: name, Value: c.Value, Quoted: c.Quoted}).String())
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// previewError answers a preview request that did not reach its port.
// Its body is plain text: a browser shows it.
func previewError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	var ended *live.PreviewEndedError
	switch {
	case errors.Is(err, live.ErrNoPreview):
		code, err = http.StatusNotFound, errors.New("no such preview (it may have expired or been revoked)")
	case errors.As(err, &ended):
		code = http.StatusGone
	case errs.Of(err) == errs.Canceled:
		return
	case errs.Of(err) == errs.Limit:
		code = http.StatusTooManyRequests
	case errs.Of(err) == errs.Unavailable:
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, err)
}
