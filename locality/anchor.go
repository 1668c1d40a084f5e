package locality

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/key"
)

// The anchor's protocol (docs/spec/locality.md §5): two POSTs of JSON.
const (
	// ChallengePath asks for a nonce: {"host","binding"} → {"anchor","nonce"}.
	ChallengePath = "/locality/v1/challenge"
	// AnswerPath answers it: {"nonce","host_sig"} → a Measurement.
	AnswerPath = "/locality/v1/answer"
	// AnswerWindow is how long a nonce waits for its answer.
	AnswerWindow = 10 * time.Second
	// MaxPending is how many nonces an anchor keeps waiting at once.
	MaxPending = 4096
	// maxRequest is the largest request body an anchor reads.
	maxRequest = 4 << 10
)

// ChallengeRequest is the body of a POST to ChallengePath.
type ChallengeRequest struct {
	Host    key.Public `json:"host"`
	Binding addr.Addr  `json:"binding"`
}

// Challenge is the anchor's reply: its key and a fresh nonce.
type Challenge struct {
	Anchor key.Public `json:"anchor"`
	Nonce  Hex        `json:"nonce"`
}

// Answer is the body of a POST to AnswerPath: the nonce and the host's
// signature over AnswerBytes.
type Answer struct {
	Nonce   Hex `json:"nonce"`
	HostSig Hex `json:"host_sig"`
}

// Anchor is a locality anchor's side of the protocol: an http.Handler that
// hands out nonces and signs the round trips it measures. The zero value
// is not usable; make one with NewAnchor.
type Anchor struct {
	key  key.Private
	pos  Position
	now  func() time.Time
	rand io.Reader

	mu      sync.Mutex
	pending map[string]pending
}

// pending is a nonce sent and not yet answered.
type pending struct {
	host    key.Public
	binding addr.Addr
	sent    time.Time // with its monotonic reading
}

// AnchorOption changes what NewAnchor makes.
type AnchorOption func(*Anchor)

// WithClock makes the anchor read time from now instead of time.Now. Its
// round trips are the differences of now's readings, so now must be
// monotonic (time.Now's readings carry a monotonic clock).
func WithClock(now func() time.Time) AnchorOption { return func(a *Anchor) { a.now = now } }

// WithRand makes the anchor draw nonces from r instead of crypto/rand.
func WithRand(r io.Reader) AnchorOption { return func(a *Anchor) { a.rand = r } }

// NewAnchor is the anchor whose key is k, published at pos.
func NewAnchor(k key.Private, pos Position, opts ...AnchorOption) (*Anchor, error) {
	if k.IsZero() {
		return nil, fmt.Errorf("locality: an anchor needs its key")
	}
	if err := pos.check("anchor.position"); err != nil {
		return nil, fmt.Errorf("locality: %w", err)
	}
	a := &Anchor{key: k, pos: pos, now: time.Now, rand: rand.Reader, pending: map[string]pending{}}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Published is the anchor as its operator publishes it.
func (a *Anchor) Published() PublishedAnchor {
	return PublishedAnchor{Key: a.key.Public(), Position: a.pos}
}

// ServeHTTP serves ChallengePath and AnswerPath.
func (a *Anchor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case ChallengePath:
		a.challenge(w, r)
	case AnswerPath:
		a.answer(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (a *Anchor) challenge(w http.ResponseWriter, r *http.Request) {
	var req ChallengeRequest
	if code, err := readJSON(w, r, &req); err != nil {
		http.Error(w, "challenge: "+err.Error(), code)
		return
	}
	// A host key that names no one, or one under which signatures can be
	// forged, and a binding that binds nothing, make measurements no
	// verifier may accept (docs/spec/locality.md §3.1, §6 step 5f).
	if err := req.Host.Check(); err != nil {
		http.Error(w, "challenge: host: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Binding.IsZero() {
		http.Error(w, "challenge: binding: the all-zero address binds nothing", http.StatusBadRequest)
		return
	}
	nonce := make([]byte, NonceSize)
	if _, err := io.ReadFull(a.rand, nonce); err != nil {
		http.Error(w, "challenge: no randomness", http.StatusInternalServerError)
		return
	}
	body, err := json.Marshal(Challenge{Anchor: a.key.Public(), Nonce: nonce})
	if err != nil {
		http.Error(w, "challenge: "+err.Error(), http.StatusInternalServerError)
		return
	}
	a.mu.Lock()
	if len(a.pending) >= MaxPending {
		a.sweep()
	}
	if len(a.pending) >= MaxPending {
		a.mu.Unlock()
		http.Error(w, "challenge: too many nonces waiting", http.StatusServiceUnavailable)
		return
	}
	if _, dup := a.pending[string(nonce)]; dup {
		// Only a broken random source repeats a nonce; handing it out
		// again would move the waiting one's send time.
		a.mu.Unlock()
		http.Error(w, "challenge: the random source repeated a nonce", http.StatusInternalServerError)
		return
	}
	// Sent is read before the reply is written: writing it only adds to
	// the round trip.
	a.pending[string(nonce)] = pending{host: req.Host, binding: req.Binding, sent: a.now()}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// sweep forgets nonces older than AnswerWindow; a.mu is held.
func (a *Anchor) sweep() {
	now := a.now()
	for n, p := range a.pending {
		if now.Sub(p.sent) > AnswerWindow {
			delete(a.pending, n)
		}
	}
}

func (a *Anchor) answer(w http.ResponseWriter, r *http.Request) {
	body, code, err := readBody(w, r)
	// The answer has arrived when its last byte has: the clock is read
	// then, before anything else is done with it. (Read when the headers
	// came in, it let a host send them before it had the nonce and the
	// body after, and be measured as nearer than it is.)
	arrived := a.now()
	if err != nil {
		http.Error(w, "answer: "+err.Error(), code)
		return
	}
	var ans Answer
	if err := decodeJSON(body, &ans); err != nil {
		http.Error(w, "answer: "+err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	p, ok := a.pending[string(ans.Nonce)]
	delete(a.pending, string(ans.Nonce)) // one answer per nonce, right or wrong
	a.mu.Unlock()
	rtt := arrived.Sub(p.sent)
	switch {
	case !ok:
		http.Error(w, "answer: no such nonce waiting", http.StatusNotFound)
		return
	case rtt < 0:
		// A monotonic clock never does this: no bound is signed from it.
		http.Error(w, "answer: the anchor's clock went backwards; no round trip measured", http.StatusInternalServerError)
		return
	case rtt > AnswerWindow:
		http.Error(w, "answer: the nonce expired", http.StatusGone)
		return
	case !p.host.Verify(AnswerBytes(ans.Nonce, a.key.Public(), p.binding), ans.HostSig):
		http.Error(w, "answer: the signature does not verify under the host key", http.StatusForbidden)
		return
	}
	// Rounded up to a whole microsecond, and never below one.
	us := max((rtt+time.Microsecond-1)/time.Microsecond, 1)
	m, err := Sign(a.key, Statement{
		Type: MeasurementType, Anchor: a.key.Public(), Position: a.pos, Nonce: ans.Nonce,
		Host: p.host, Binding: p.binding, HostSig: ans.HostSig, RTT: int64(us), At: arrived.Unix(),
	})
	if err != nil {
		http.Error(w, "answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	out, err := json.Marshal(m)
	if err != nil {
		http.Error(w, "answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// readJSON reads one small JSON body into v, refusing members v does not
// have; the status code goes with the error.
func readJSON(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	body, code, err := readBody(w, r)
	if err != nil {
		return code, err
	}
	if err := decodeJSON(body, v); err != nil {
		return http.StatusBadRequest, err
	}
	return http.StatusOK, nil
}

// readBody reads a request's whole body, at most maxRequest bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequest))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is over %d bytes", maxRequest)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	return b, http.StatusOK, nil
}

// decodeJSON reads b as one JSON object into v, refusing members v does
// not have and anything after the object.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON object at offset %d", dec.InputOffset())
	}
	return nil
}
