package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// Any host of a cluster answers the API (docs/cluster.md): a request
// for a sandbox another host holds is forwarded to that host, as the
// caller's, signed by the forwarding host's key. The host that receives
// it checks the signature under the key of the cluster's host row it
// names, that it was meant for itself and is fresh, and then serves it
// as the owner it names: the cluster's hosts vouch for their callers to
// each other (their database is their membership). A forwarded request
// is never forwarded again.

// Headers of a forwarded request.
const (
	HeaderForwardedBy  = "Sandbox-Forwarded-By"  // the forwarding host's id
	HeaderForwardedFor = "Sandbox-Forwarded-For" // the caller, as the forwarding host knows it
	HeaderForwardedAt  = "Sandbox-Forwarded-At"  // unix seconds, the forwarding host's clock
	HeaderForwardedSig = "Sandbox-Forwarded-Sig" // base64url Ed25519 over forwardMessage
)

// ForwardSkew is how far a forwarded request's time may be from the
// receiving host's clock.
const ForwardSkew = 5 * time.Minute

// Peers is the cluster a host belongs to, as its API forwards through
// it.
type Peers interface {
	// Holder is the other host that holds sandbox id (live or
	// suspended there): ok false where none does (this host, or no
	// host of the cluster).
	Holder(ctx context.Context, id string) (p Peer, ok bool, err error)
	// Peer is host id of the cluster, its row verified.
	Peer(ctx context.Context, id string) (Peer, error)
	// Self is this host's id and key.
	Self() (string, key.Private)
	// TLS is how this host checks another's certificate (nil: the
	// system's roots).
	TLS() *tls.Config
	// Place chooses the host a new sandbox of tier t goes to: that
	// host, and the placement signed by this one.
	Place(ctx context.Context, t tier.Tier) (Peer, *record.Placement, error)
	// Kept says the cluster keeps a suspension of sandbox id that any
	// host may resume, and its tier.
	Kept(ctx context.Context, id string) (tier.Tier, bool, error)
	// Sandboxes are owner's sandboxes the cluster keeps ("": every
	// owner's), each with the host that holds it.
	Sandboxes(ctx context.Context, owner string) ([]client.Sandbox, error)
	// PoolHolder is the other host, alive, where a claim of warm pool
	// name goes: one with a ready sandbox left (as it last said, less
	// the claims sent there since), taken for this claim, and how many
	// it had left; else one that keeps the pool, and 0. ok false where
	// no other host keeps one.
	PoolHolder(ctx context.Context, name string) (p Peer, ready int, ok bool, err error)
}

// Peer is a host of the cluster: its id, key and where its API answers
// (a unix socket's path, or HOST:PORT with TLS).
type Peer struct {
	ID   string
	Key  key.Public
	Addr string
}

// forwardedKey marks a request another host forwarded.
type forwardedKey struct{}

func forwarded(r *http.Request) bool { return r.Context().Value(forwardedKey{}) != nil }

// forwardMessage is what a forwarding host signs: each field preceded by
// its length, so that no two lists make the same bytes.
func forwardMessage(by, to, method, uri, owner string, at int64, policies []string) []byte {
	var b bytes.Buffer
	for _, f := range append([]string{"sandbox.forward/1", by, to, method, uri, owner, strconv.FormatInt(at, 10)}, policies...) {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.Bytes()
}

// fromPeer serves a request that says another host forwarded it as the
// owner it names, once its signature holds; ok false: it says no such
// thing. A claim that does not hold is refused (403), never served as
// its transport's caller.
func (s *Server) fromPeer(w http.ResponseWriter, r *http.Request, next http.Handler) (ok bool) {
	by := r.Header.Get(HeaderForwardedBy)
	if by == "" {
		return false
	}
	owner, err := s.checkForwarded(r, by)
	if err != nil {
		s.Log.Warn("a forwarded request refused", "by", by, "path", r.URL.Path, "err", err)
		writeErr(w, &deniedError{"a forwarded request: " + err.Error()})
		return true
	}
	ctx := context.WithValue(r.Context(), ctxKey{}, owner)
	next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, forwardedKey{}, by)))
	return true
}

func (s *Server) checkForwarded(r *http.Request, by string) (string, error) {
	if s.Peers == nil {
		return "", errors.New("this host is in no cluster")
	}
	owner := r.Header.Get(HeaderForwardedFor)
	at, err := strconv.ParseInt(r.Header.Get(HeaderForwardedAt), 10, 64)
	if err != nil || owner == "" {
		return "", fmt.Errorf("%s and %s are required", HeaderForwardedFor, HeaderForwardedAt)
	}
	if d := time.Since(time.Unix(at, 0)); d > ForwardSkew || d < -ForwardSkew {
		return "", fmt.Errorf("its time is %s from this host's clock, past %s", d.Round(time.Second), ForwardSkew)
	}
	sig, err := base64.RawURLEncoding.DecodeString(r.Header.Get(HeaderForwardedSig))
	if err != nil {
		return "", fmt.Errorf("%s: not base64url", HeaderForwardedSig)
	}
	p, err := s.Peers.Peer(r.Context(), by)
	if err != nil {
		return "", err
	}
	self, _ := s.Peers.Self()
	if !p.Key.Verify(forwardMessage(by, self, r.Method, r.URL.RequestURI(), owner, at, signedHeaders(r)), sig) {
		return "", fmt.Errorf("its signature does not verify under host %s's key (or it was meant for another host)", by)
	}
	return owner, nil
}

// forward sends a request for a sandbox another host holds to that
// host; anything else goes to next.
func (s *Server) forward(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := forwardable(r)
		if !ok || s.Peers == nil || forwarded(r) || s.Live.Live(id) {
			next.ServeHTTP(w, r)
			return
		}
		p, ok, err := s.Peers.Holder(r.Context(), id)
		if err != nil {
			s.Log.Warn("cluster: where a sandbox is", "sandbox", id, "err", err)
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		s.proxyTo(w, r, p, id)
	})
}

// forwardable is the sandbox a request is for, where another host that
// holds it may serve it: every call on one sandbox but its resumption
// (which brings it here) and its seeding from here.
func forwardable(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok || rest == "" {
		return "", false
	}
	id, op, _ := strings.Cut(rest, "/")
	op, _, _ = strings.Cut(op, "/") // ports/{port}
	switch op {
	case "", "exec", "files", "watch", "fork", "ports", "suspend", "close", "preservation":
		return id, true
	}
	return "", false
}

// policyHeader is authority.Header, spelled here for the signature.
const policyHeader = "Sandbox-Policy"

// signedHeaders are the headers a forwarding signature covers, each
// value after its name: the narrowing policies and the placement.
func signedHeaders(r *http.Request) []string {
	var out []string
	for _, h := range []string{policyHeader, HeaderPlacement} {
		for _, v := range r.Header.Values(h) {
			out = append(out, h, v)
		}
	}
	return out
}

// proxyTo forwards r to peer p, signed, streaming both ways.
func (s *Server) proxyTo(w http.ResponseWriter, r *http.Request, p Peer, id string) {
	tr, base, err := s.peerTransport(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	self, k := s.Peers.Self()
	own := owner(r)
	at := time.Now().Unix()
	uri := r.URL.RequestURI()
	sig := k.Sign(forwardMessage(self, p.ID, r.Method, uri, own, at, signedHeaders(r)))
	// An exec's stdin streams while its output does.
	http.NewResponseController(w).EnableFullDuplex()
	rp := &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base[0], base[1]
			pr.Out.Host = base[1]
			pr.Out.Header.Del("Authorization") // the caller's token is this host's, not the other's
			pr.Out.Header.Set(HeaderForwardedBy, self)
			pr.Out.Header.Set(HeaderForwardedFor, own)
			pr.Out.Header.Set(HeaderForwardedAt, strconv.FormatInt(at, 10))
			pr.Out.Header.Set(HeaderForwardedSig, base64.RawURLEncoding.EncodeToString(sig))
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.Log.Warn("cluster: a forwarded request failed", "sandbox", id, "host", p.ID, "err", err)
			writeErr(w, &unreachableError{fmt.Errorf("sandbox %s is held by host %s, which did not answer at %s: %w", id, p.ID, p.Addr, err)})
		},
	}
	s.Log.Info("request forwarded", "sandbox", id, "to", p.ID, "path", r.URL.Path)
	rp.ServeHTTP(w, r)
}

// unreachableError: the host that holds a sandbox did not answer.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string     { return e.err.Error() }
func (e *unreachableError) Unwrap() error     { return e.err }
func (e *unreachableError) Unavailable() bool { return true }

// peerTransport is a transport to peer p and the scheme and host of its
// URLs, made once per address.
func (s *Server) peerTransport(p Peer) (http.RoundTripper, [2]string, error) {
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.peerTr == nil {
		s.peerTr = map[string]http.RoundTripper{}
	}
	if strings.HasPrefix(p.Addr, "/") {
		tr, ok := s.peerTr[p.Addr]
		if !ok {
			path := p.Addr
			tr = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}}
			s.peerTr[p.Addr] = tr
		}
		return tr, [2]string{"http", "sandbox"}, nil
	}
	if _, _, err := net.SplitHostPort(p.Addr); err != nil {
		return nil, [2]string{}, &unreachableError{fmt.Errorf("host %s answers at %q: neither a socket's path nor HOST:PORT", p.ID, p.Addr)}
	}
	tr, ok := s.peerTr[p.Addr]
	if !ok {
		tr = &http.Transport{TLSClientConfig: s.Peers.TLS(), ForceAttemptHTTP2: false}
		s.peerTr[p.Addr] = tr
	}
	return tr, [2]string{"https", p.Addr}, nil
}

// peerState is the server's forwarding state.
type peerState struct {
	peerMu sync.Mutex
	peerTr map[string]http.RoundTripper
}

// HeaderPlacement carries a placement (record.Placement's canonical
// JSON, base64url) from the host that chose to the host it chose.
const HeaderPlacement = "Sandbox-Placement"

// placement is where a new sandbox goes, as the cluster decides: nil
// outside a cluster, for a sandbox that is this host's by what it names
// (an image, a manifest, a host path), or where no placement could be
// made (logged: it is made here, as without a cluster). A forwarded
// request carries the forwarding host's placement, which must be its
// own (signed by it) and name this host. On the way out, r carries the
// placement in its header for proxyTo to sign.
func (s *Server) placement(r *http.Request, spec client.SandboxSpec, g grant.Set, t tier.Tier) (*record.Placement, error) {
	if s.Peers == nil {
		return nil, nil
	}
	if forwarded(r) {
		return s.forwardedPlacement(r)
	}
	r.Header.Del(HeaderPlacement) // a caller's own is not the cluster's
	if spec.Image != "" || len(spec.Manifest) > 0 || len(g.Storage) > 0 {
		return nil, nil // made here: what it names is this host's
	}
	return s.place(r, t)
}

// place places what r makes or resumes (tier t) and puts the signed
// placement in r's header; none (logged) where no placement can be made.
func (s *Server) place(r *http.Request, t tier.Tier) (*record.Placement, error) {
	_, p, err := s.Peers.Place(r.Context(), t)
	if err != nil {
		s.Log.Warn("cluster: no placement: it is done here", "err", err)
		return nil, nil
	}
	b, err := jcs.Marshal(p)
	if err != nil {
		return nil, err
	}
	r.Header.Set(HeaderPlacement, base64.RawURLEncoding.EncodeToString(b))
	return p, nil
}

// forwardedPlacement is the placement a forwarded request carries (nil:
// none): the forwarding host's own, signed by it (the host it names is
// checked where it is sealed).
func (s *Server) forwardedPlacement(r *http.Request) (*record.Placement, error) {
	v := r.Header.Get(HeaderPlacement)
	if v == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, badRequest(HeaderPlacement + ": not base64url")
	}
	var p record.Placement
	if err := jcs.Unmarshal(b, &p); err != nil {
		return nil, badRequest(HeaderPlacement + ": " + err.Error())
	}
	by, err := s.Peers.Peer(r.Context(), r.Context().Value(forwardedKey{}).(string))
	if err != nil {
		return nil, err
	}
	if p.By != by.Key {
		return nil, &deniedError{fmt.Sprintf("%s: a placement by %s, forwarded by host %s", HeaderPlacement, p.By, by.ID)}
	}
	return &p, nil
}

// resumePlacement is where a resumption goes: with ?here, or where the
// cluster keeps no suspension of the sandbox, here, unplaced; else
// placed as a new sandbox is, the placement in r's header. A forwarded
// resumption carries its placement.
func (s *Server) resumePlacement(r *http.Request, id string) (*record.Placement, error) {
	if s.Peers == nil {
		return nil, nil
	}
	if forwarded(r) {
		return s.forwardedPlacement(r)
	}
	r.Header.Del(HeaderPlacement)
	if here, _ := strconv.ParseBool(r.URL.Query().Get("here")); here {
		return nil, nil
	}
	t, kept, err := s.Peers.Kept(r.Context(), id)
	if err != nil || !kept {
		return nil, err
	}
	return s.place(r, t)
}
