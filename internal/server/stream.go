package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// frames streams an exec's output as NDJSON frames, flushed as they come.
type frames struct {
	mu sync.Mutex
	w  http.ResponseWriter
	f  http.Flusher
}

func (f *frames) send(fr client.Frame) error {
	b, _ := json.Marshal(fr)
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.w.Write(append(b, '\n'))
	if f.f != nil {
		f.f.Flush()
	}
	return err
}

type stream struct {
	f      *frames
	stderr bool
}

// Write sends what the program wrote as one frame. An error (the caller
// went away) is returned to the host, whose tee keeps the record whole.
func (s stream) Write(p []byte) (int, error) {
	fr := client.Frame{Stdout: p}
	if s.stderr {
		fr = client.Frame{Stderr: p}
	}
	if err := s.f.send(fr); err != nil {
		return 0, err
	}
	return len(p), nil
}

// beginWriter writes the status line before the first frame.
type beginWriter struct {
	http.ResponseWriter
	begin func()
}

func (b *beginWriter) Write(p []byte) (int, error) {
	b.begin()
	return b.ResponseWriter.Write(p)
}

// call is one exec or run as its request gave it: the command, and its
// stdin, whole or streamed.
type call struct {
	client.ExecSpec
	stdin io.Reader  // nil: none
	body  *bodyStdin // a streamed stdin, stopped when the call ends
}

// decodeExec reads an exec's or a run's body: a JSON command with its
// stdin inside (application/json, stdin at most MaxStdin), or the
// command as one line of JSON followed by the stdin to the end of the
// body (client.StdinStreamType), read as the program reads it.
func decodeExec(w http.ResponseWriter, r *http.Request) (call, error) {
	var c call
	if r.Header.Get("Content-Type") == client.StdinStreamType {
		br := bufio.NewReaderSize(r.Body, 64<<10)
		line, err := readLine(br, MaxBody)
		if err != nil {
			return c, err
		}
		if err := decodeBytes(line, &c.ExecSpec); err != nil {
			return c, err
		}
		if c.Stdin != nil {
			return c, badRequest("field \"stdin\": a streamed request's stdin is the body after its first line, not a field")
		}
		c.body = &bodyStdin{r: br, rc: http.NewResponseController(w)}
		c.body.idle = sync.NewCond(&c.body.mu)
		c.stdin = c.body
	} else {
		if err := decode(w, r, &c.ExecSpec, MaxBody+MaxStdin*4/3); err != nil {
			return c, err
		}
		if len(c.Stdin) > MaxStdin {
			return c, &host.LimitError{What: fmt.Sprintf("an exec's stdin is at most %d bytes (stream it: %s)", MaxStdin, client.StdinStreamType)}
		}
		if c.Stdin != nil {
			c.stdin = bytes.NewReader(c.Stdin)
		}
	}
	if len(c.Args) == 0 {
		return c, badRequest("field \"args\": want the command and its arguments")
	}
	if c.InterruptKey != "" && !interruptKey(c.InterruptKey) {
		return c, badRequest("field \"interrupt_key\": want 16 to 128 letters, digits, '-' or '_'")
	}
	if c.Dir != "" && (!filepath.IsAbs(c.Dir) || filepath.Clean(c.Dir) != c.Dir) {
		// The service has no directory of its caller's: a relative one
		// would make the program's path relative too.
		return c, badRequest(fmt.Sprintf("field \"dir\": %q is not an absolute, clean path (no . or .. parts, no doubled or trailing /)", c.Dir))
	}
	return c, nil
}

// readLine reads up to and without the first newline, refusing a line
// longer than max.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > max+1 {
			return nil, &host.LimitError{What: fmt.Sprintf("a streamed request's first line (its command) is at most %d bytes", max)}
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, badRequest("request body: a streamed request's command ends without a newline")
		}
		return nil, err
	}
}

// decodeBytes is decode for a body already read.
func decodeBytes(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return badRequest("request body: more than one JSON value in the first line")
	}
	return nil
}

// bodyStdin is a request body given to a program as its stdin while the
// response streams (HTTP/1.1 full duplex). stop ends it: a read in
// flight is woken by a read deadline and waited for, so that nothing
// reads the body after the handler returns.
type bodyStdin struct {
	r  io.Reader
	rc *http.ResponseController

	mu      sync.Mutex
	idle    *sync.Cond
	reading int
	stopped bool
	eof     bool
}

func (b *bodyStdin) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.stopped || b.eof {
		b.mu.Unlock()
		return 0, io.EOF
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.reading--
	if err != nil {
		b.eof = true
	}
	b.idle.Broadcast()
	b.mu.Unlock()
	return n, err
}

func (b *bodyStdin) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.reading > 0 {
		b.rc.SetReadDeadline(time.Now())
	}
	for b.reading > 0 {
		b.idle.Wait()
	}
}

// fullDuplex lets the handler read the body while it writes frames.
func (b *bodyStdin) fullDuplex() {
	b.rc.EnableFullDuplex() // HTTP/2 is full duplex already
}

// interruptKey says whether k is what a client may name a call by, to
// interrupt it: 16 to 128 of A-Z, a-z, 0-9, '_' and '-'. (A loop, not a
// regular expression: `{16,128}` compiled 128 copies of its class at
// every start of sandbox-engine.)
func interruptKey(k string) bool {
	if len(k) < 16 || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// errInterrupted is the cause of a call ended by POST /v1/interrupts.
var errInterrupted = errors.New("interrupted by its caller (POST /v1/interrupts)")

// interrupts are the calls in flight a client named: owner and key to
// the call's cancel.
type interrupts struct {
	mu sync.Mutex
	m  map[string]context.CancelCauseFunc
}

func (in *interrupts) add(owner, key string, cancel context.CancelCauseFunc) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	k := owner + "\x00" + key
	if _, dup := in.m[k]; dup {
		return false
	}
	if in.m == nil {
		in.m = map[string]context.CancelCauseFunc{}
	}
	in.m[k] = cancel
	return true
}

func (in *interrupts) remove(owner, key string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.m, owner+"\x00"+key)
}

func (in *interrupts) fire(owner, key string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	cancel, ok := in.m[owner+"\x00"+key]
	if ok {
		cancel(errInterrupted)
	}
	return ok
}

// interrupt interrupts the caller's call in flight that it named by
// key: the program gets what an interrupt gives it, and the call's
// stream ends with its sealed result as usual.
func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	if !s.calls.fire(owner(r), r.PathValue("key")) {
		writeErr(w, fmt.Errorf("no call of yours in flight is named %q: %w", r.PathValue("key"), fs.ErrNotExist))
		return
	}
	w.WriteHeader(204)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	c, err := decodeExec(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(c.Grants) > 0 || c.GrantsJSON != nil || c.Tier != "" || c.Escalate || c.Limits != nil || c.Image != "" {
		writeErr(w, badRequest("fields \"grants\", \"grants_json\", \"tier\", \"escalate\", \"limits\" and \"image\" are a sandbox's, given when it is created, not an exec's"))
		return
	}
	var pres *gate.Presentation
	if c.JCP != nil {
		pres = &gate.Presentation{Chain: c.JCP.Chain, Invocation: c.JCP.Invocation}
	}
	s.stream(w, r, c, func(ctx context.Context, stdout, stderr io.Writer) (*host.Run, error) {
		run, err := s.Live.Exec(ctx, r.PathValue("id"), owner(r), live.ExecRequest{Args: c.Args, Env: c.Env, Dir: c.Dir,
			Deadline: deadline(c.DeadlineMS), Stdin: c.stdin, Stdout: stdout, Stderr: stderr, JCP: pres})
		if run != nil {
			s.Live.NoteOwner(run.ID, owner(r))
		}
		return run, err
	})
}

// deadline is a call's: its own, the default when it gives none, none
// when it is negative.
func deadline(ms int64) time.Duration {
	switch {
	case ms < 0:
		return 0
	case ms == 0:
		return DefaultDeadline
	}
	return time.Duration(ms) * time.Millisecond
}

// run is a one-shot sealed run through the service: what `sandbox run`
// does in-process.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	c, err := decodeExec(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	req, err := runRequest(r.Context(), s.Live.Host, c, owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	s.stream(w, r, c, func(ctx context.Context, stdout, stderr io.Writer) (*host.Run, error) {
		req.Stdout, req.Stderr = stdout, stderr
		run, err := s.Live.Run(ctx, req)
		if run != nil {
			s.Live.NoteOwner(run.ID, owner(r))
		}
		return run, err
	})
}

// runRequest turns a run's body into the host's request for owner.
func runRequest(ctx context.Context, h *host.Host, c call, owner string) (host.Request, error) {
	g, err := runGrants(c.ExecSpec)
	if err != nil {
		return host.Request{}, err
	}
	var want *tier.Tier
	if c.Tier != "" {
		t, err := parseTier(c.Tier, 0)
		if err != nil {
			return host.Request{}, err
		}
		want = &t
	}
	lim, err := limitsOf(c.Limits)
	if err != nil {
		return host.Request{}, err
	}
	cwd := c.Dir
	if cwd == "" {
		cwd = "/"
	}
	req, err := h.CommandIn(c.Image, host.CommandLine{Args: c.Args, Env: c.Env, Grants: g, Cwd: cwd, Read: h.Reader(ctx, owner, "run"), Look: h.Looker(ctx, owner, "run"), Image: h.ImageChecker(ctx, owner, "run")})
	if err != nil {
		return host.Request{}, err
	}
	req.Owner = owner
	req.Tier, req.Escalate, req.Deadline, req.Limits, req.Stdin = want, c.Escalate, deadline(c.DeadlineMS), lim, c.stdin
	if c.JCP != nil {
		req.JCP = &gate.Presentation{Chain: c.JCP.Chain, Invocation: c.JCP.Invocation}
	}
	return req, nil
}

// runGrants are a run's grants: its command-line ones and its set in
// grants.json's form, read as one grant.Input (the service has no
// directory of its caller's: a relative path is refused).
func runGrants(x client.ExecSpec) (grant.Set, error) {
	g, err := grant.Input{Args: x.Grants, JSON: x.GrantsJSON}.Set()
	if err != nil {
		return grant.Set{}, grantsError(err)
	}
	for _, n := range g.Net {
		if len(n.Inject) > 0 {
			return grant.Set{}, badRequest("field \"grants_json\": net grant " + n.Host + ": injected credentials are read by the process that runs the egress proxy; run with them in-process")
		}
	}
	return g, nil
}

// limitsOf checks a run's limits (unit.Limits.Validate, as the command
// line's flags are checked), naming the field.
func limitsOf(l *client.Limits) (unit.Limits, error) {
	if l == nil {
		return unit.Limits{}, nil
	}
	out := unit.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUMillis: l.CPUMillis, MemoryPages: l.MemoryPages}
	if err := out.Validate(); err != nil {
		var le *unit.LimitError
		if errors.As(err, &le) {
			return unit.Limits{}, badRequest("field \"limits." + le.Field + "\": " + le.Why)
		}
		return unit.Limits{}, badRequest("field \"limits\": " + err.Error())
	}
	return out, nil
}

// stream runs do with the caller's output streamed as frames; the last
// frame is the sealed result, or the error. Before the first frame an
// error is an HTTP status; after it, an error frame. The call ends, and
// is sealed as interrupted, when its caller goes away, the service
// shuts down, or its caller interrupts it by key.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c call, do func(context.Context, io.Writer, io.Writer) (*host.Run, error)) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if c.InterruptKey != "" {
		if !s.calls.add(owner(r), c.InterruptKey, cancel) {
			writeErr(w, badRequest("field \"interrupt_key\": a call of yours in flight has it"))
			return
		}
	}
	if c.body != nil {
		c.body.fullDuplex()
		defer c.body.stop()
		// A full-duplex request whose body is left unread (a refusal, a
		// program that never read its stdin) makes net/http's next read
		// on the connection race its own (golang/go#68560: "invalid
		// concurrent Body.Read call"): such a connection is closed
		// after its answer.
		w.Header().Set("Connection", "close")
	}
	f, _ := w.(http.Flusher)
	started := false
	begin := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(200)
		}
	}
	fr := &frames{w: &beginWriter{ResponseWriter: w, begin: begin}, f: f}
	res, err := do(ctx, stream{f: fr}, stream{f: fr, stderr: true})
	if c.InterruptKey != "" {
		s.calls.remove(owner(r), c.InterruptKey) // ended: before its caller hears so
	}
	if err != nil {
		s.metrics.failed()
		if !started {
			writeErr(w, err)
			return
		}
		e := apiError(err)
		fr.send(client.Frame{Error: &e})
		return
	}
	s.metrics.run(res)
	fr.send(client.Frame{Result: ResultOf(res)})
}
