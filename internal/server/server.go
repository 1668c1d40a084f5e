package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// OpenAPI is the API's OpenAPI document (docs/openapi.json).
//
//go:embed openapi.json
var OpenAPI []byte

// Bounds on what a request may carry.
const (
	MaxBody  = 1 << 20  // a JSON request body
	MaxStdin = 16 << 20 // an exec's stdin, in its JSON body (streamed: unbounded)
	// DefaultDeadline is an exec's deadline when it gives none.
	DefaultDeadline = time.Minute
)

// Server serves one host.
type Server struct {
	Live *live.Manager
	Log  *slog.Logger
	// Tokens are the bearer tokens TCP callers may present; each is its
	// own owner. Unix-socket callers need none.
	Tokens []string
	// MaxUpload bounds an upload (0: live.MaxUpload).
	MaxUpload int64
	// Peers, where set, is the cluster: a request for a sandbox another
	// host holds is forwarded there, and one another host forwarded is
	// served as the caller it names (forward.go).
	Peers Peers

	peerState

	// previewAddr is the TCP listener previews are served on (""
	// none: WithPreviews), previewApart whether it is theirs alone
	// (PreviewsApart).
	previewAddr  string
	previewApart bool

	metrics metrics
	calls   interrupts
	base    context.Context
	cancel  context.CancelCauseFunc
	once    sync.Once
}

// ctxKey carries the caller's identity.
type ctxKey struct{}

// owner is who calls: "local" on the unix socket, "token:<hash prefix>"
// over TCP.
func owner(r *http.Request) string {
	o, _ := r.Context().Value(ctxKey{}).(string)
	return o
}

func (s *Server) init() {
	s.once.Do(func() {
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		s.base, s.cancel = context.WithCancelCause(context.Background())
	})
}

// Handler is the API.
func (s *Server) Handler() http.Handler {
	s.init()
	return s.logged(narrowed(s.forward(s.routes())))
}

// routes is the API's mux, and the patterns it serves: a test holds
// docs/openapi.json to them.
type routes struct {
	*http.ServeMux
	patterns []string
}

// HandleFunc serves pattern with h, and records it.
func (m *routes) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

func (s *Server) routes() *routes {
	mux := &routes{ServeMux: http.NewServeMux()}
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		n := s.metrics.live()
		if o := owner(r); o != host.LocalOwner {
			n = int64(len(s.Live.Sandboxes(o))) // a tenant sees its own, not the host's
		}
		writeJSON(w, 200, map[string]any{"ok": true, "sandboxes": n})
	})
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	})
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("POST /v1/sandboxes", s.create)
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		ps := s.Live.Pools()
		if ps == nil {
			ps = []live.PoolStats{} // an array, as the schema says, even when empty
		}
		writeJSON(w, 200, ps)
	})
	mux.HandleFunc("POST /v1/pools/{name}/claim", s.claim)
	mux.HandleFunc("GET /v1/sandboxes", s.list)
	mux.HandleFunc("GET /v1/sandboxes/{id}", s.get)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", s.remove)
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", s.exec)
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", s.upload)
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", s.download)
	mux.HandleFunc("POST /v1/sandboxes/{id}/suspend", s.suspend)
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", s.fork)
	mux.HandleFunc("GET /v1/sandboxes/{id}/watch", s.watch)
	mux.HandleFunc("POST /v1/sandboxes/{id}/ports", s.expose)
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports", s.previews)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/ports/{port}", s.unexpose)
	mux.HandleFunc("POST /v1/sandboxes/{id}/seed", s.seed)
	mux.HandleFunc("GET /v1/runs/{id}", s.runReport)
	mux.HandleFunc("GET /v1/runs/{id}/bundle", s.runBundle)
	mux.HandleFunc("GET /v1/key", s.hostKey)
	mux.HandleFunc("POST /v1/sandboxes/{id}/preservation", s.preservation)
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", s.resume)
	mux.HandleFunc("POST /v1/sandboxes/{id}/close", s.closeRecord)
	mux.HandleFunc("GET /v1/records", s.records)
	mux.HandleFunc("POST /v1/runs", s.run)
	mux.HandleFunc("POST /v1/fleets", s.fleet)
	mux.HandleFunc("POST /v1/interrupts/{key}", s.interrupt)
	s.jcpRoutes(mux)
	return mux
}

// narrowed holds a request that carries authority.Header to that policy
// as well as to its caller's own: the host checks every grant against
// both. A header that does not parse is refused before anything is done.
func narrowed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs := r.Header.Values(authority.Header)
		if len(vs) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		for _, v := range vs {
			p, err := authority.DecodeHeader(v)
			if err != nil {
				writeErr(w, badRequest(err.Error()))
				return
			}
			ctx = authority.WithNarrowing(ctx, p)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// life is the context of what outlives r (a sandbox made by it): the
// server's, held to r's narrowings.
func (s *Server) life(r *http.Request) context.Context {
	ctx := s.base
	for _, n := range authority.Narrowings(r.Context()) {
		ctx = authority.WithNarrowing(ctx, n)
	}
	return ctx
}

// OwnerOf is the owner a bearer token's caller is: "token:" and the first
// 8 bytes of its SHA-256, in hex (the token itself is never kept).
func OwnerOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:8])
}

// logged logs each request and counts it.
func (s *Server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, code: 200}
		next.ServeHTTP(rw, r)
		s.metrics.request(rw.code)
		s.Log.Info("request", "method", r.Method, "path", logPath(r.URL.Path), "status", rw.code, "owner", owner(r), "ms", time.Since(start).Milliseconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

// Unwrap gives http.ResponseController the connection's writer (read
// deadlines, full duplex).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unix wraps the API for the unix socket: a caller whose uid is not the
// service's (or root) is refused before anything is read.
func (s *Server) Unix(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, ok := r.Context().Value(peerKey{}).(int)
		if !ok || (uid != os.Geteuid() && uid != 0) {
			writeErr(w, &deniedError{"only the service's own user (or root) may call it on its socket"})
			return
		}
		if s.fromPeer(w, r, next) {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, host.LocalOwner)))
	})
}

// TCP wraps the API for TCP: a bearer token from Tokens is required, and
// the caller is the token's owner.
func (s *Server) TCP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.fromPeer(w, r, next) {
			return
		}
		tok, found := Bearer(r, s.Tokens)
		if !found {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox"`)
			writeJSON(w, 401, client.APIError{Category: "denied", Message: "a bearer token the service was given (serve --token-file) is required"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, OwnerOf(tok))))
	})
}

// Bearer is the request's bearer token, and whether it is one of tokens
// (each compared in constant time, all of them every time).
func Bearer(r *http.Request, tokens []string) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	found := false
	for _, t := range tokens {
		if ok && subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			found = true
		}
	}
	return tok, found
}

type deniedError struct{ msg string }

func (e *deniedError) Error() string { return e.msg }
func (e *deniedError) Unwrap() error { return grant.ErrDenied }

// peerKey carries the unix peer's uid.
type peerKey struct{}

// ConnContext records a unix connection's peer credentials (SO_PEERCRED).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	if uid, err := peerUID(uc); err == nil {
		return context.WithValue(ctx, peerKey{}, uid)
	}
	return ctx
}

// UnixServer is the HTTP server for the unix socket: the API behind the
// peer check, each connection's credentials recorded, every request tied
// to the server's life (Shutdown).
func (s *Server) UnixServer() *http.Server {
	return &http.Server{Handler: s.Unix(s.Handler()), ConnContext: ConnContext, BaseContext: s.BaseContext, ReadHeaderTimeout: 10 * time.Second}
}

// Shutdown ends what runs: the S2 sandboxes with execs in flight are
// suspended, which parks those execs (a resumption continues them); the
// execs still in flight are interrupted and sealed.
func (s *Server) Shutdown(cause error) {
	s.init()
	s.Live.ParkRunning()
	s.cancel(cause)
}

// BaseContext ties each request to the server's life: Shutdown ends the
// execs in flight (sealed as interrupted), never silently.
func (s *Server) BaseContext(net.Listener) context.Context {
	s.init()
	return s.base
}

// decode reads a strict JSON body: unknown fields and trailing data are
// refused, and the error names the field.
func decode(w http.ResponseWriter, r *http.Request, v any, max int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return badRequest("request body: more than one JSON value")
	}
	return nil
}

// decodeError names what is wrong with a JSON body.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var me *http.MaxBytesError
	switch {
	case errors.As(err, &me):
		return &host.LimitError{What: fmt.Sprintf("a request body is at most %d bytes", me.Limit)}
	case errors.As(err, &te):
		return badRequest(fmt.Sprintf("request body: field %q: want %s, got %s", te.Field, te.Type, te.Value))
	case errors.As(err, &se):
		return badRequest(fmt.Sprintf("request body: malformed JSON at byte %d: %v", se.Offset, err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body: malformed JSON: it ends early")
	case errors.Is(err, io.EOF):
		return badRequest("request body: empty; want a JSON object")
	}
	return badRequest("request body: " + err.Error())
}

// badRequest is a request that cannot be served as it is: 400.
func badRequest(msg string) error { return &host.InvalidError{Err: errors.New(msg)} }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func apiError(err error) client.APIError {
	c := errs.Of(err)
	e := client.APIError{Status: errs.HTTPStatus(c), Category: c.String(), Message: err.Error(), Code: string(reject.CodeOf(err))}
	var pe *host.ProgramError
	if errors.As(err, &pe) {
		e.ExitStatus = host.ExitCannotExec
		if pe.NotFound {
			e.ExitStatus = host.ExitNotFound
		}
	}
	return e
}

func writeErr(w http.ResponseWriter, err error) {
	e := apiError(err)
	writeJSON(w, e.Status, e)
}

// parseGrants reads a sandbox's command-line grants (grant.Input: the
// service has no directory of its caller's, so a relative path is
// refused).
func parseGrants(args []string) (grant.Set, error) {
	g, err := grant.Input{Args: args}.Set()
	if err != nil {
		return grant.Set{}, grantsError(err)
	}
	return g, nil
}

// grantsError names the field of a grant.Input's error: "grants_json"
// for its JSON set, else "grants".
func grantsError(err error) error {
	field := "grants"
	var ie *grant.InputError
	if errors.As(err, &ie) && ie.Part == grant.PartJSON {
		field = "grants_json"
	}
	return badRequest(fmt.Sprintf("field %q: %v", field, err))
}

func parseTier(t string, def tier.Tier) (tier.Tier, error) {
	if t == "" {
		return def, nil
	}
	v, err := tier.Parse(t)
	if err != nil {
		return 0, badRequest("field \"tier\": " + err.Error())
	}
	return v, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var spec client.SandboxSpec
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		writeErr(w, decodeError(err))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := decode(w, r, &spec, MaxBody); err != nil {
		writeErr(w, err)
		return
	}
	g, err := parseGrants(spec.Grants)
	if err != nil {
		writeErr(w, err)
		return
	}
	t, err := parseTier(spec.Tier, tier.S1)
	if err != nil {
		writeErr(w, err)
		return
	}
	if spec.MemoryBytes < 0 || spec.Pids < 0 || spec.CPUs < 0 {
		writeErr(w, badRequest("fields \"memory_bytes\", \"pids\", \"cpus\": want 0 (the default) or more"))
		return
	}
	hs := live.SandboxSpec{Tier: t, Grants: g, GrantArgs: spec.Grants, Env: spec.Env, Owner: owner(r), Listen: spec.Listen,
		Limits: unit.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, CPUMillis: int64(spec.CPUs * 1000)}, Image: spec.Image}
	if len(spec.Manifest) > 0 {
		m, err := manifest.Verify(spec.Manifest, key.NewTrust(s.Live.Key.Public()))
		if err != nil {
			writeErr(w, fmt.Errorf("field \"manifest\": %w", err))
			return
		}
		hs.Manifest = m
	}
	if hs.Placement, err = s.placement(r, spec, g, t); err != nil {
		writeErr(w, err)
		return
	}
	if hs.Placement != nil {
		if self, _ := s.Peers.Self(); hs.Placement.Host != s.Live.Key.Public() && !forwarded(r) {
			// Placed on another host: made there, as the caller's.
			p, err := s.Peers.Peer(r.Context(), hs.Placement.Host.ID().String())
			if err != nil {
				writeErr(w, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			s.proxyTo(w, r, p, "(new, placed by "+self+")")
			return
		}
	}
	info, err := s.Live.Create(s.life(r), hs)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(+1)
	writeJSON(w, 201, sandboxOf(info))
}

// claim hands the caller a ready sandbox of a warm pool. In a cluster
// (unless ?here=true) a claim this host cannot serve from a ready
// sandbox goes to the host whose pool of that name has the most ready,
// as the hosts last said: where none has one ready, a pool here makes
// one (a miss), and where there is none here, another host's does.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	here, err := hereParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	if s.Peers != nil && !here && !forwarded(r) {
		local, mine := -1, false
		for _, p := range s.Live.Pools() {
			if p.Name == name {
				local, mine = p.Ready, true
			}
		}
		if local <= 0 {
			p, ready, ok, err := s.Peers.PoolHolder(r.Context(), name)
			if err != nil {
				s.Log.Warn("cluster: where a pool's sandboxes are ready", "pool", name, "err", err)
			}
			if ok && (ready > 0 || !mine) {
				s.proxyTo(w, r, p, "pool "+name)
				return
			}
		}
	}
	info, err := s.Live.Claim(s.life(r), name, owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(+1)
	writeJSON(w, 201, sandboxOf(info))
}

func sandboxOf(i live.SandboxInfo) client.Sandbox {
	state := "live"
	if i.Suspended {
		state = "suspended"
	}
	sb := client.Sandbox{ID: i.ID, Tier: i.Tier.String(), State: state, Workspace: i.Workspace, Created: i.Created, Execs: i.Execs, Running: i.Running, Grants: i.GrantArgs, Env: i.Env, Listen: i.Listen, Incarnation: i.Incarnation}
	if sb.Grants == nil {
		sb.Grants = []string{} // an array, as the schema says, even when empty
	}
	if i.Root != nil {
		sb.Root = i.Root.String()
	}
	if i.Manifest != nil {
		sb.Manifest = i.Manifest.String()
	}
	return sb
}

// hereParam reads ?here= (true: this host alone, in a cluster).
func hereParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("here")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("query parameter \"here\": want true or false")
	}
	return b, nil
}

// list lists the caller's sandboxes: this host's, live and suspended,
// then, in a cluster (unless ?here=true), those the cluster keeps on
// other hosts, each naming its host. A cluster that does not answer
// fails the list rather than leave those out unsaid.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	here, err := hereParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []client.Sandbox{}
	seen := map[string]bool{}
	for _, i := range s.Live.Sandboxes(owner(r)) {
		out = append(out, sandboxOf(i))
		seen[i.ID] = true
	}
	for _, i := range s.Live.Suspended(owner(r)) {
		out = append(out, sandboxOf(i))
		seen[i.ID] = true
	}
	if s.Peers != nil && !here && !forwarded(r) {
		others, err := s.Peers.Sandboxes(r.Context(), owner(r))
		if err != nil {
			writeErr(w, &unreachableError{fmt.Errorf("the cluster's sandboxes (?here=true lists this host's alone): %w", err)})
			return
		}
		for _, o := range others {
			if seen[o.ID] {
				continue // this host's own, listed above
			}
			out = append(out, o)
		}
	}
	writeJSON(w, 200, out)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	i, err := s.Live.Sandbox(id, owner(r))
	if err != nil {
		// A suspended one is the caller's too, as the list says.
		for _, p := range s.Live.Suspended(owner(r)) {
			if p.ID == id {
				writeJSON(w, 200, sandboxOf(p))
				return
			}
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, sandboxOf(i))
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	if err := s.Live.Remove(r.PathValue("id"), owner(r)); err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(-1)
	w.WriteHeader(204)
}

// ResultOf describes a sealed run as `sandbox run --json` does.
func ResultOf(r *host.Run) *client.Result {
	res := &client.Result{Schema: 1, Run: r.ID.String(), Sealed: true, Tier: r.Choice.Chosen.String(),
		TierRequired: r.Choice.Required.String(), TierReason: r.Choice.Reason,
		Outcome: OutcomeOf(r.Result), DurationMS: r.Result.End.Sub(r.Result.Start).Milliseconds(), Fuel: r.Result.Fuel,
		Energy: EnergyOf(r.Receipt), Records: r.Dir, Notes: r.Result.Notes}
	res.ExitStatus, res.ExitFrom = host.ExitStatus(r.Result)
	return res
}

// OutcomeOf is how a run ended, as the result says it.
func OutcomeOf(res *executor.Result) *client.Outcome {
	if res == nil {
		return nil
	}
	o := res.Outcome
	return &client.Outcome{Status: string(o.Status), ExitCode: o.ExitCode, Signal: int(res.Signal), Detail: o.Detail}
}

// EnergyOf is a receipt's energy per class, with each reading's
// provenance and source once.
func EnergyOf(r *receipt.Receipt) []client.Energy {
	var out []client.Energy
	for _, d := range r.Devices {
		e := client.Energy{Class: string(d.Class), MeasuredUJ: uint64(d.Measured), EstimatedUJ: uint64(d.Estimated), Provenance: []string{}}
		seen := map[string]bool{}
		for _, rd := range d.Readings {
			p := string(rd.Provenance) + " " + rd.Source
			if !seen[p] {
				seen[p] = true
				e.Provenance = append(e.Provenance, p)
			}
		}
		sort.Strings(e.Provenance)
		out = append(out, e)
	}
	return out
}
