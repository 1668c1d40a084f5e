package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// The JCP files of the state directory (docs/spec/state.md).
const (
	JCPDir        = "jcp"                // STATE/jcp
	JCPLedger     = "ledger.jsonl"       // the budget ledger, and ledger.jsonl.heads
	JCPSharedMark = "shared-ledger.seen" // in a cluster: the longest shared ledger this host saw
	JCPRoots      = "roots"              // the root keys a chain may start from, one per line
	JCPDenied     = "decisions"          // denied decisions, ID.cose
	JCPPrincip    = "principals"         // named principal keys, NAME.key
	jcpGrace      = 10 * time.Minute     // how long after its deadline an unsettled reservation is kept
)

// ErrNoJCPRoots refuses a JCP run on a host that trusts no root.
var ErrNoJCPRoots = errors.New("this host trusts no JCP root key: add one with 'sandbox jcp roots add NAME|KEY'")

// jcpState is the host's gate, opened at the first JCP call.
type jcpState struct {
	mu    sync.Mutex
	gate  *gate.Gate
	roots string // the roots file's stamp when the gate last read it
}

// JCPPath is a path under STATE/jcp.
func (h *Host) JCPPath(name ...string) string {
	return h.Store.Path(filepath.Join(append([]string{JCPDir}, name...)...))
}

// JCPRootKeys are the root keys this host trusts (STATE/jcp/roots).
// One key (ed25519:HEX) per line; blank lines and lines starting with '#'
// are ignored; no file, or none in it, trusts no root.
func (h *Host) JCPRootKeys() ([]key.Public, error) { return ReadJCPRoots(h.JCPPath(JCPRoots)) }

// ReadJCPRoots reads a roots file (STATE/jcp/roots).
func ReadJCPRoots(p string) ([]key.Public, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ks []key.Public
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := key.ParsePublic(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", p, i+1, err)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// Gate is the host's JCP gate, its ledger opened (replayed, verified,
// and reservations a killed host left settled) at the first call.
func (h *Host) Gate() (*gate.Gate, error) {
	h.jcp.mu.Lock()
	defer h.jcp.mu.Unlock()
	if h.jcp.gate != nil {
		// The roots file may have changed since (sandbox jcp roots add
		// while a service runs): the gate follows it.
		if st := h.rootsStamp(); st != h.jcp.roots {
			ks, err := h.JCPRootKeys()
			if err != nil {
				return nil, fmt.Errorf("JCP roots: %w", err)
			}
			h.jcp.gate.SetRoots(key.NewTrust(ks...))
			h.jcp.roots = st
		}
		return h.jcp.gate, nil
	}
	stamp := h.rootsStamp()
	roots, err := h.JCPRootKeys()
	if err != nil {
		return nil, fmt.Errorf("JCP roots: %w", err)
	}
	if err := os.MkdirAll(h.JCPPath(), 0o700); err != nil {
		return nil, err
	}
	trust := key.NewTrust(roots...)
	var l *budget.Ledger
	if h.SharedLedger != nil {
		l, err = budget.OpenShared(h.SharedLedger, trust, h.Now, h.JCPPath(JCPSharedMark))
	} else {
		l, err = budget.Open(h.JCPPath(JCPLedger), trust, h.Key, h.Now)
	}
	if err != nil {
		return nil, fmt.Errorf("the JCP ledger: %w", err)
	}
	g := &gate.Gate{Ledger: l, Key: h.Key, Roots: trust, Denied: h.JCPPath(JCPDenied), Clock: h.Now}
	if _, _, err := g.Recover(h.findGated); err != nil {
		l.Close()
		return nil, fmt.Errorf("settling the JCP reservations left open: %w", err)
	}
	h.jcp.gate, h.jcp.roots = g, stamp
	return g, nil
}

// rootsStamp says when the roots file last changed, and its size ("" when
// there is none).
func (h *Host) rootsStamp() string {
	fi, err := os.Stat(h.JCPPath(JCPRoots))
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", fi.ModTime().UnixNano(), fi.Size())
}

// findGated finds the sealed run of reservation n among the runs begun
// since: a run whose attestation cites a decision for n.
func (h *Host) findGated(n uint64, since time.Time) (*receipt.Receipt, addr.Addr, bool, error) {
	var found *store.Summary
	errFound := errors.New("found")
	err := h.Store.EachRun(store.RunQuery{}, func(r store.Summary) error {
		if r.Started.Before(since.Add(-time.Second)) {
			return errFound // newest first: nothing older can be it
		}
		b, err := os.ReadFile(filepath.Join(r.Dir, verify.FileJCPDecision))
		if err != nil {
			return nil
		}
		t, err := jcp.Open(b)
		if err != nil || t.Decision == nil || t.Decision.Reservation != n || t.Decision.Iss != h.Key.Public() {
			return nil
		}
		found = &r
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, addr.Addr{}, false, err
	}
	if found == nil {
		return nil, addr.Addr{}, false, nil
	}
	rb, err := os.ReadFile(filepath.Join(found.Dir, verify.FileReceipt))
	if err != nil {
		return nil, found.ID, false, err
	}
	r, err := receipt.Open(rb, key.NewTrust(h.Key.Public()))
	if err != nil {
		return nil, found.ID, false, err
	}
	return r, found.ID, true, nil
}

// closeJCP writes the ledger's signed head and releases it.
func (h *Host) closeJCP() error {
	h.jcp.mu.Lock()
	defer h.jcp.mu.Unlock()
	if h.jcp.gate == nil {
		return nil
	}
	err := h.jcp.gate.Ledger.Close()
	h.jcp.gate = nil
	return err
}

// jcpAsk is what a planned run asks of a chain.
func jcpAsk(p *Plan) jcp.Ask {
	g := p.grants
	a := jcp.Ask{Image: p.unit.Image, Tier: p.choice.Chosen, Classes: p.unit.Devices, Budgets: map[device.Class]energy.Microjoules{}}
	for _, c := range p.unit.Devices {
		if b, ok := g.Budget(c); ok {
			a.Budgets[c] = b
		}
	}
	for _, n := range g.Net {
		a.Hosts = append(a.Hosts, jcp.Dest{Host: n.Host, Port: n.Port})
	}
	for _, s := range g.Storage {
		a.Paths = append(a.Paths, s.Path)
	}
	return a
}

// decide asks the gate before a presented run starts; nil when the run
// was presented with no chain.
func (h *Host) decide(p *Plan) (*gate.Decided, error) {
	if p.req.JCP == nil {
		return nil, nil
	}
	if p.req.Kind == tier.Native {
		// The decision names the program by its address: it must be the
		// program that runs, which a program the run can write is not.
		w, err := writableInRun(p.rootDir, p.req.Entry, p.req.Grants)
		if err != nil {
			return nil, err
		}
		if w != "" {
			return nil, &InvalidError{Err: fmt.Errorf("JCP: the program %s lies (or its links lead) under the writable grant %s, where it can be replaced between the host's read and the exec, so the decision could name bytes that did not run: a gated run's program must be in its image, the system directories or a read-only grant", p.req.Entry, w)}
		}
	}
	g, err := h.Gate()
	if err != nil {
		return nil, err
	}
	deadline := time.Duration(p.unit.Limits.DeadlineMS) * time.Millisecond
	if deadline <= 0 {
		deadline = 24 * time.Hour
	}
	return g.Decide(*p.req.JCP, jcpAsk(p), h.Now().Add(deadline+jcpGrace))
}

// allowance is what a gated run may spend of a class now (nil: the run
// was not gated): its reservation, less what amendments took away since.
func (h *Host) allowance(d *gate.Decided) func(device.Class) energy.Microjoules {
	if d == nil {
		return nil
	}
	g := h.jcp.gate
	return func(c device.Class) energy.Microjoules { return g.Allowance(d, c) }
}

// JCPMinted is where the children minted by the service's events are
// kept, one chain file each (STATE/jcp/minted/ID.jcp).
const JCPMinted = "minted"

// JCPEvent posts an event to the gate (docs/spec/jcp.md §6): a child is
// minted under every standing grant that names it, and kept under
// STATE/jcp/minted. A host that never used JCP has no ledger and mints
// nothing (it is not made for an event); a cluster's hosts share theirs.
func (h *Host) JCPEvent(event string) ([]gate.Minted, []gate.NotMinted, error) {
	return h.jcpMint(func(g *gate.Gate) ([]gate.Minted, []gate.NotMinted) { return g.Event(event, h.Now()) })
}

// JCPTick mints under every scheduled standing grant whose period turned
// in (prev, now].
func (h *Host) JCPTick(prev, now time.Time) ([]gate.Minted, []gate.NotMinted, error) {
	return h.jcpMint(func(g *gate.Gate) ([]gate.Minted, []gate.NotMinted) { return g.Tick(prev, now) })
}

func (h *Host) jcpMint(mint func(*gate.Gate) ([]gate.Minted, []gate.NotMinted)) ([]gate.Minted, []gate.NotMinted, error) {
	if _, err := os.Stat(h.JCPPath(JCPLedger)); h.SharedLedger == nil && errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	g, err := h.Gate()
	if err != nil {
		return nil, nil, err
	}
	minted, refused := mint(g)
	if len(minted) > 0 {
		if err := os.MkdirAll(h.JCPPath(JCPMinted), 0o700); err != nil {
			return minted, refused, err
		}
	}
	for _, m := range minted {
		p := h.JCPPath(JCPMinted, m.Child.ID.Hex()+".jcp")
		if err := safefile.Write(p, jcp.EncodeChain(m.Elements), 0o600); err != nil {
			return minted, refused, err
		}
		h.Logger().Info("JCP child minted", "grant", m.Child.ID, "for", m.Child.Grant.Aud, "file", p)
	}
	for _, r := range refused {
		h.Logger().Info("JCP mint refused", "policy", r.Policy, "err", r.Err)
	}
	return minted, refused, nil
}
