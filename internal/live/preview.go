package live

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/record"
)

// Port previews: one of a live sandbox's listen ports, reached through
// the service at an unguessable path until an expiry. The token is the
// capability (whoever has the URL reaches the port); the record keeps
// the token's address, never the token.
const (
	// DefaultPreviewTTL is how long a preview lasts when its request
	// names no time; MaxPreviewTTL is the longest one may.
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 24 * time.Hour
	// MaxPreviews bounds the previews one sandbox has open at once.
	MaxPreviews = 16
	// previewTokenBytes is the token's randomness: 256 bits.
	previewTokenBytes = 32
	// probeTimeout bounds the probe connection made before a preview is
	// given.
	probeTimeout = 5 * time.Second
	// MaxPreviewDials bounds the connections being made through
	// previews at once on the host, MaxSandboxDials those into one
	// sandbox (each holds a thread in the sandbox's namespace until its
	// connect ends); MaxSandboxConns bounds the connections open through
	// one sandbox's previews. Past them a request is refused, never
	// queued: whoever has a preview's URL is no one the host trusts.
	MaxPreviewDials = 64
	MaxSandboxDials = 8
	MaxSandboxConns = 256
)

// ErrNoPreview is wrapped when a token names no preview: never given,
// revoked, or expired (a caller without the token learns nothing more).
var ErrNoPreview = fmt.Errorf("no such preview: %w", os.ErrNotExist)

// PreviewEndedError says a preview's sandbox is no longer live
// (suspended or closed): its previews ended with it.
type PreviewEndedError struct{ Sandbox string }

func (e *PreviewEndedError) Error() string {
	return fmt.Sprintf("the preview's sandbox %s is no longer live (suspended or closed); its previews ended with it", e.Sandbox)
}

// unavailableError: what a preview needs is not there (a tier without
// reachable ports, nothing listening).
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string     { return e.msg }
func (e *unavailableError) Unavailable() bool { return true }

// Preview is one exposed port of a live sandbox.
type Preview struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port"`
	// ID is the token's content address: what the record keeps.
	ID      addr.Addr `json:"preview"`
	Expires time.Time `json:"expires"`
	// Token is the secret path element; said only when it is made.
	Token string `json:"token,omitempty"`
}

// preview is a Preview the manager serves.
type preview struct {
	sb    *Sandbox
	port  int
	id    addr.Addr
	until time.Time
	// conns are the connections open through it (under previews.mu):
	// a revocation closes them.
	conns map[*previewConn]bool
}

// previewConn is a connection through a preview: it lasts no longer
// than the preview (its deadline is the expiry) and is forgotten when
// closed.
type previewConn struct {
	net.Conn
	ps   *previews
	pv   *preview
	once sync.Once
}

func (c *previewConn) Close() error {
	c.once.Do(func() {
		c.ps.mu.Lock()
		delete(c.pv.conns, c)
		c.ps.mu.Unlock()
	})
	return c.Conn.Close()
}

// previews are the host's open previews by the token's address.
type previews struct {
	mu sync.Mutex
	m  map[addr.Addr]*preview
	// dialing counts the connects in flight, in all and by sandbox.
	dialing   int
	dialingBy map[*Sandbox]int
}

// limitedError: a bound on previews' connections was reached.
type limitedError struct{ msg string }

func (e *limitedError) Error() string { return e.msg }
func (e *limitedError) Limit() bool   { return true }

// startDial takes a place for a connect into sb, or says why there is
// none; p.mu is held.
func (p *previews) startDial(sb *Sandbox) error {
	open := 0
	for _, pv := range p.m {
		if pv.sb == sb {
			open += len(pv.conns)
		}
	}
	switch {
	case open >= MaxSandboxConns:
		return &limitedError{fmt.Sprintf("sandbox %s has %d connections open through its previews, the most it may", sb.ID, open)}
	case p.dialing >= MaxPreviewDials:
		return &unavailableError{fmt.Sprintf("%d connections are being made through previews on this host, the most at once: try again", p.dialing)}
	case p.dialingBy[sb] >= MaxSandboxDials:
		return &unavailableError{fmt.Sprintf("%d connections are being made into sandbox %s, the most at once: try again", p.dialingBy[sb], sb.ID)}
	}
	if p.dialingBy == nil {
		p.dialingBy = map[*Sandbox]int{}
	}
	p.dialing++
	p.dialingBy[sb]++
	return nil
}

// endDial gives back startDial's place; p.mu is held.
func (p *previews) endDial(sb *Sandbox) {
	p.dialing--
	if p.dialingBy[sb]--; p.dialingBy[sb] == 0 {
		delete(p.dialingBy, sb)
	}
}

// sweep forgets previews past their expiry or whose sandbox ended;
// p.mu is held.
func (p *previews) sweep(now time.Time) {
	for id, pv := range p.m {
		if !now.Before(pv.until) {
			delete(p.m, id)
		}
	}
}

// Expose gives a preview of port, one of owner's live sandbox id's listen
// ports, for ttl (0: DefaultPreviewTTL), once a probe connection shows
// something listens there. The exposure is sealed into the sandbox's
// record (an exposed segment) before the token is said.
func (h *Manager) Expose(ctx context.Context, id, owner string, port int, ttl time.Duration) (Preview, error) {
	switch {
	case ttl == 0:
		ttl = DefaultPreviewTTL
	case ttl < time.Second || ttl > MaxPreviewTTL:
		return Preview{}, &host.InvalidError{Err: errors.New(fmt.Sprintf("ttl %s: want 1s to %s", ttl, MaxPreviewTTL))}
	}
	if port < 1 || port > 65535 {
		return Preview{}, &host.InvalidError{Err: errors.New(fmt.Sprintf("port %d: want 1 to 65535", port))}
	}
	sb, err := h.liveSandbox(id, owner)
	if err != nil {
		return Preview{}, err
	}
	d, err := dialerOf(sb)
	if err != nil {
		return Preview{}, err
	}
	if !slices.Contains(sb.Listen, port) {
		return Preview{}, &host.InvalidError{Err: errors.New(fmt.Sprintf("port %d is not one sandbox %s listens on (it was made with listen ports %v)", port, sb.ID, sb.Listen))}
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	c, err := d.DialPort(pctx, port)
	cancel()
	if err != nil {
		return Preview{}, &unavailableError{fmt.Sprintf("nothing in sandbox %s answers on port %d: %v", sb.ID, port, err)}
	}
	c.Close()
	var raw [previewTokenBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Preview{}, err
	}
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	pv := &preview{sb: sb, port: port, id: addr.Of([]byte(token))}
	// Whole seconds, as the record says it: never later than it says.
	pv.until = time.Unix(h.Now().Add(ttl).Unix(), 0)

	h.previews.mu.Lock()
	defer h.previews.mu.Unlock()
	h.previews.sweep(h.Now())
	open := 0
	for _, o := range h.previews.m {
		if o.sb == sb {
			open++
		}
	}
	if open >= MaxPreviews {
		return Preview{}, &host.LimitError{What: fmt.Sprintf("sandbox %s has %d previews open, the most it may: revoke one first", sb.ID, open)}
	}
	sb.mu.Lock()
	closed := sb.closed
	sb.mu.Unlock()
	if closed || sb.record == nil {
		return Preview{}, &PreviewEndedError{Sandbox: sb.ID}
	}
	if _, err := sb.record.Append(record.Segment{Kind: record.Exposed, Port: port, Preview: pv.id, Until: pv.until.Unix()}); err != nil {
		return Preview{}, fmt.Errorf("seal the preview into sandbox %s's record: %w", sb.ID, err)
	}
	h.indexRecord(sb.ID, sb.record)
	if h.previews.m == nil {
		h.previews.m = map[addr.Addr]*preview{}
	}
	h.previews.m[pv.id] = pv
	h.Logger().Info("port exposed", "sandbox", sb.ID, "port", port, "preview", pv.id.String(), "until", pv.until)
	return Preview{Sandbox: sb.ID, Port: port, ID: pv.id, Expires: pv.until, Token: token}, nil
}

// dialerOf is sb's session as a PortDialer, or why it has none.
func dialerOf(sb *Sandbox) (executor.PortDialer, error) {
	if d, ok := sb.sess.(executor.PortDialer); ok {
		return d, nil
	}
	return nil, &unavailableError{fmt.Sprintf("sandbox %s is %s: only an S1 or S5 sandbox's listen ports can be previewed", sb.ID, sb.Tier)}
}

// Previews are the open previews of owner's live sandbox id, by port and
// expiry, without their tokens.
func (h *Manager) Previews(id, owner string) ([]Preview, error) {
	sb, err := h.liveSandbox(id, owner)
	if err != nil {
		return nil, err
	}
	h.previews.mu.Lock()
	h.previews.sweep(h.Now())
	out := []Preview{}
	for _, pv := range h.previews.m {
		if pv.sb == sb {
			out = append(out, Preview{Sandbox: sb.ID, Port: pv.port, ID: pv.id, Expires: pv.until})
		}
	}
	h.previews.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		return out[i].Expires.Before(out[j].Expires)
	})
	return out, nil
}

// Unexpose revokes every open preview of port of owner's live sandbox
// id, each sealed into its record (an unexposed segment), and says how
// many; none open is ErrNoPreview.
func (h *Manager) Unexpose(id, owner string, port int) (int, error) {
	sb, err := h.liveSandbox(id, owner)
	if err != nil {
		return 0, err
	}
	h.previews.mu.Lock()
	defer h.previews.mu.Unlock()
	h.previews.sweep(h.Now())
	var ids []addr.Addr
	for pid, pv := range h.previews.m {
		if pv.sb == sb && pv.port == port {
			ids = append(ids, pid)
		}
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("%w: sandbox %s has no open preview of port %d", ErrNoPreview, sb.ID, port)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	var errs []error
	for _, pid := range ids {
		// Unreachable from now on, whatever the record says next; what
		// is open through it is cut.
		for c := range h.previews.m[pid].conns {
			c.Conn.Close()
		}
		delete(h.previews.m, pid)
		if _, err := sb.record.Append(record.Segment{Kind: record.Unexposed, Port: port, Preview: pid, Reason: "revoked"}); err != nil {
			errs = append(errs, fmt.Errorf("seal the revocation of %s into sandbox %s's record: %w", pid, sb.ID, err))
		}
	}
	h.indexRecord(sb.ID, sb.record)
	h.Logger().Info("port unexposed", "sandbox", sb.ID, "port", port, "previews", len(ids))
	return len(ids), errors.Join(errs...)
}

// PreviewOpen says whether token names an open preview whose sandbox is
// still live: ErrNoPreview (never given, revoked or expired, said alike)
// or a PreviewEndedError otherwise.
func (h *Manager) PreviewOpen(token string) error {
	_, err := h.openPreview(token)
	return err
}

// openPreview is the open preview token names, checked as PreviewOpen
// says.
func (h *Manager) openPreview(token string) (*preview, error) {
	if len(token) != base64.RawURLEncoding.EncodedLen(previewTokenBytes) {
		return nil, ErrNoPreview
	}
	id := addr.Of([]byte(token))
	now := h.Now()
	h.previews.mu.Lock()
	pv := h.previews.m[id]
	if pv != nil && !now.Before(pv.until) {
		delete(h.previews.m, id)
		pv = nil
	}
	h.previews.mu.Unlock()
	if pv == nil {
		return nil, ErrNoPreview
	}
	sb := pv.sb
	h.sandboxes.mu.Lock()
	current := h.sandboxes.m[sb.ID] == sb
	h.sandboxes.mu.Unlock()
	sb.mu.Lock()
	closed := sb.closed
	sb.mu.Unlock()
	if !current || closed {
		return nil, &PreviewEndedError{Sandbox: sb.ID}
	}
	return pv, nil
}

// DialPreview connects to the port the preview token names, as its
// sandbox's own processes would reach it, once openPreview has checked
// the token. Each dial counts as a request to the sandbox for its idle
// fence; the connection ends at the preview's expiry at the latest, and
// when it is revoked.
func (h *Manager) DialPreview(ctx context.Context, token string) (net.Conn, error) {
	pv, err := h.openPreview(token)
	if err != nil {
		return nil, err
	}
	sb := pv.sb
	sb.activity.Add(1) // a request: the idle fence retains what it touches
	sb.touch(h.Now())
	d, err := dialerOf(sb)
	if err != nil {
		return nil, err
	}
	h.previews.mu.Lock()
	err = h.previews.startDial(sb)
	h.previews.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := d.DialPort(ctx, pv.port)
	h.previews.mu.Lock()
	h.previews.endDial(sb)
	h.previews.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// The expiry is the host's clock's; a deadline is the system's.
	c.SetDeadline(time.Now().Add(pv.until.Sub(h.Now())))
	pc := &previewConn{Conn: c, ps: &h.previews, pv: pv}
	h.previews.mu.Lock()
	defer h.previews.mu.Unlock()
	if h.previews.m[pv.id] != pv {
		// Revoked while it dialled.
		c.Close()
		return nil, ErrNoPreview
	}
	if pv.conns == nil {
		pv.conns = map[*previewConn]bool{}
	}
	pv.conns[pc] = true
	return pc, nil
}
