package locality

import (
	"crypto/rand"
	"encoding/json"
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
	// The answer's arrival is read before anything else is done with it,
	// so that the anchor's own work after it never counts.
	arrived := a.now()
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case ChallengePath:
		a.challenge(w, r)
	case AnswerPath:
		a.answer(w, r, arrived)
	default:
		http.NotFound(w, r)
	}
}

func (a *Anchor) challenge(w http.ResponseWriter, r *http.Request) {
	var req ChallengeRequest
	if err := readJSON(r, &req); err != nil {
		http.Error(w, "challenge: "+err.Error(), http.StatusBadRequest)
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

func (a *Anchor) answer(w http.ResponseWriter, r *http.Request, arrived time.Time) {
	var ans Answer
	if err := readJSON(r, &ans); err != nil {
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
	body, err := json.Marshal(m)
	if err != nil {
		http.Error(w, "answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// readJSON reads one small JSON body into v, refusing members v does not
// have.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequest))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
