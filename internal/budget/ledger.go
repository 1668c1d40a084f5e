package budget

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Domain is the genesis's domain tag, and the origin and key name of the
// ledger's signed heads.
const Domain = "sandbox.jcp-ledger/1"

// Reservation is a run's budget, to be reserved at every grant of its
// path.
type Reservation struct {
	Path       []addr.Addr                         // leaf first, to the root; all admitted
	UJ         map[device.Class]energy.Microjoules // what is reserved at every grant of Path
	Invocation addr.Addr                           // seen once: a second reservation for it is a replay
	Until      time.Time                           // when, unsettled, it may be released as expired
}

// Ledger is the budget ledger kept in a file, held for appending.
//
// Every change is decided under one mutex against the state in memory,
// so the order of the entries is the order of the decisions, and then
// waits, outside it, for its line to be written and fsynced by the
// committer, which writes every line decided while it was syncing in one
// write and one fsync (a group commit). A change returns only once its
// entry is durable. A failed write leaves the ledger refusing everything
// (what it decided after the failure is not on disk): open it again.
// Budget, Tree and the other readings show what was decided; Head and
// the signed heads, what is on disk.
type Ledger struct {
	path   string
	signer key.Private
	clock  func() time.Time
	f      *chain.File // nil for a shared ledger
	sh     Shared      // a shared ledger's log (OpenShared)

	mu    sync.Mutex
	stale bool // a shared ledger's state may be ahead of its log: read it all again
	// seen is where a shared ledger keeps the longest log this host
	// saw (OpenShared), seenSize and seenHead that log.
	seen     string
	seenSize uint64
	seenHead addr.Addr
	st       *State
	pend     *batch
	err      error // sticky: closed, or a write failed
	closed   bool

	wake    chan struct{} // the committer has a batch to write
	stopped chan struct{} // the committer is gone

	durMu   sync.Mutex
	durSize uint64 // what is on disk: the entries and the head after them
	durHead addr.Addr

	headsMu sync.Mutex
	signed  uint64 // the size of the last head signed
}

// batch is the lines decided while the committer was busy: written
// together, acknowledged together.
type batch struct {
	lines [][]byte
	size  uint64    // the entries after the last of them
	head  addr.Addr // and the head
	done  chan struct{}
	err   error
}

// Open replays the ledger at path (a missing file is the genesis),
// refusing the first entry that breaks a rule of §7 with its line, and
// checks it against the heads signed beside it (path + ".heads"; under
// signer's key, when signer is set): a ledger cut short or rewritten
// after one was signed is refused (head-mismatch). It holds the file for
// appending. clock (nil: time.Now) stamps reservations and mints.
func Open(path string, roots key.Trust, signer key.Private, clock func() time.Time) (*Ledger, error) {
	if clock == nil {
		clock = time.Now
	}
	var v *note.Verifier
	if !signer.IsZero() {
		var err error
		if v, err = verifier(signer.Public()); err != nil {
			return nil, err
		}
	}
	f, entries, err := chain.OpenFile(path)
	if err != nil {
		return nil, err
	}
	st, hs, err := openState(path, entries, roots, v)
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &Ledger{path: path, signer: signer, clock: clock, f: f, st: st,
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	l.durSize, l.durHead = st.Head()
	l.signed = ^uint64(0)
	if len(hs) > 0 {
		l.signed = hs[len(hs)-1].size
	}
	go l.commit()
	return l, nil
}

func openState(path string, entries [][]byte, roots key.Trust, v *note.Verifier) (*State, []signed, error) {
	hs, err := loadHeads(path+".heads", v)
	if err != nil {
		return nil, nil, err
	}
	st, err := replay(entries, roots, hs)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return st, hs, nil
}

// Close waits for what was decided to be written, signs the head (when
// the ledger has a signer and it moved since the last one signed) and
// releases the file.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.err == nil {
		l.err = fmt.Errorf("%s: %w", l.path, os.ErrClosed)
	}
	l.mu.Unlock()
	close(l.wake)
	<-l.stopped
	var err error
	if size, _ := l.Head(); !l.signer.IsZero() && size != l.signedSize() {
		_, err = l.SignHead()
	}
	if l.f == nil {
		return err
	}
	return errors.Join(err, l.f.Close())
}

func (l *Ledger) signedSize() uint64 {
	l.headsMu.Lock()
	defer l.headsMu.Unlock()
	return l.signed
}

// commit is the committer: it writes each batch in one write and one
// fsync, in the order they were decided. After a failed write it writes
// nothing more: every later batch was decided on top of it.
func (l *Ledger) commit() {
	defer close(l.stopped)
	var failed error
	for range l.wake {
		failed = l.flush(failed)
	}
	l.flush(failed)
}

func (l *Ledger) flush(failed error) error {
	l.mu.Lock()
	b := l.pend
	l.pend = nil
	l.mu.Unlock()
	if b == nil {
		return failed
	}
	if failed == nil {
		if err := l.f.AppendBatch(b.lines); err != nil {
			failed = fmt.Errorf("budget: the ledger refuses everything after a failed write (open it again): %w", err)
			l.mu.Lock()
			l.err = failed
			l.mu.Unlock()
		} else {
			l.durMu.Lock()
			l.durSize, l.durHead = b.size, b.head
			l.durMu.Unlock()
		}
	}
	b.err = failed
	close(b.done)
	return failed
}

// decide checks e against the state and, if it holds, applies it and
// queues its line; the caller holds l.mu and waits on the batch after
// releasing it. An entry that breaks a rule changes nothing.
func (l *Ledger) decide(e *entry) (*batch, error) {
	if l.err != nil {
		return nil, l.err
	}
	if err := l.st.check(e); err != nil {
		return nil, err
	}
	line, err := e.marshal()
	if err != nil {
		return nil, err
	}
	l.st.step(e, line)
	crash.At(crash.BudgetDecided)
	if l.pend == nil {
		l.pend = &batch{done: make(chan struct{})}
	}
	b := l.pend
	b.lines = append(b.lines, line)
	b.size, b.head = l.st.Head()
	if l.sh == nil {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return b, nil
}

// wait waits for b to be durable.
func wait(b *batch) error {
	if b == nil {
		return nil
	}
	<-b.done
	if b.err != nil {
		return b.err
	}
	crash.At(crash.BudgetAppended)
	return nil
}

// one decides one entry and waits for it.
func (l *Ledger) one(e *entry) error {
	if err := l.begin(); err != nil {
		return err
	}
	b, err := l.decide(e)
	return errors.Join(err, l.finish(b))
}

// reopen opens a token's bytes again: what the ledger appends is what a
// verifier will open, never a payload made by hand.
func reopen(t *jcp.Token) (*jcp.Token, error) {
	if t == nil {
		return nil, reject.New(reject.Invalid, "token", "no token")
	}
	o, err := jcp.Open(t.Bytes)
	if err != nil {
		return nil, reject.In("token", err)
	}
	return o, nil
}

// Admit records grants and mint policies, each parent before its
// children (a policy after the grant it holds, a minted grant after its
// policy): one admit entry for each not admitted before. The rules of
// §7 hold (a root's issuer trusted, a child following its admitted
// parent, through its admitted policy if minted); times are not checked.
// It stops at the first token refused, naming it; those before it stay
// admitted.
func (l *Ledger) Admit(ts ...*jcp.Token) error {
	es := make([]*entry, len(ts))
	for i, t := range ts {
		if t != nil && l.Admitted(t.ID) {
			continue // a gate admits the same chain decision after decision
		}
		o, err := reopen(t)
		if err != nil {
			return fmt.Errorf("token %d: %w", i, err)
		}
		es[i] = &entry{op: opAdmit, tok: o}
	}
	var last *batch
	if err := l.begin(); err != nil {
		return err
	}
	for i, e := range es {
		if e == nil || l.st.admitted(e.tok.ID) {
			continue
		}
		b, err := l.decide(e)
		if err != nil {
			return errors.Join(fmt.Errorf("token %d: %w", i, err), l.finish(last))
		}
		last = b
	}
	return l.finish(last)
}

// Reserve reserves r at every grant of its path, in one entry, if every
// rule of §7 holds: the grants admitted and linked to a root, none
// revoked, the invocation never seen, every class granted at each, each
// grant's runs and rate (reservations counted by their at, the clock's
// now) and ceilings (outstanding + spent + UJ ≤ the effective ceiling).
// It returns the reservation's number.
func (l *Ledger) Reserve(r Reservation) (uint64, error) {
	e := &entry{op: opReserve, path: slicesClone(r.Path), uj: maps.Clone(r.UJ), inv: r.Invocation, until: ns(r.Until)}
	if err := l.begin(); err != nil {
		return 0, err
	}
	e.n, e.at = l.st.last+1, ns(l.clock())
	b, err := l.decide(e)
	if err = errors.Join(err, l.finish(b)); err != nil {
		return 0, err
	}
	return e.n, nil
}

func slicesClone(p []addr.Addr) []addr.Addr { return append([]addr.Addr(nil), p...) }

// Post records what reservation n's run spent (its attestation: run),
// which may be more than was reserved; n is then closed.
func (l *Ledger) Post(n uint64, uj map[device.Class]energy.Microjoules, run addr.Addr) error {
	if uj == nil {
		uj = map[device.Class]energy.Microjoules{}
	}
	return l.one(&entry{op: opPost, n: n, uj: maps.Clone(uj), run: run})
}

// Release voids reservation n: WhyRefused (it does not count as a run),
// WhyFailed or WhyExpired.
func (l *Ledger) Release(n uint64, why string) error {
	return l.one(&entry{op: opRelease, n: n, why: why})
}

// Revoke records a revocation: the grant and its descendants are refused
// from the next reservation on. Its issuer issued the grant or one of its
// ancestors (wrong-issuer otherwise).
func (l *Ledger) Revoke(rev *jcp.Token) error {
	return l.token(opRevoke, rev, jcp.TypeRevocation)
}

// Amend records an amendment (§8): by the grant's issuer, never its
// audience (amend-not-issuer), after the last (amend-stale), narrowing
// the effective terms (amend-widens). It takes effect at the next
// reservation.
func (l *Ledger) Amend(am *jcp.Token) error {
	return l.token(opAmend, am, jcp.TypeAmendment)
}

// Checkpoint records the grant's audience's checkpoint (§8), its seq
// after the last.
func (l *Ledger) Checkpoint(cp *jcp.Token) error {
	return l.token(opCheckpoint, cp, jcp.TypeCheckpoint)
}

func (l *Ledger) token(op string, t *jcp.Token, typ string) error {
	o, err := reopen(t)
	if err != nil {
		return err
	}
	if o.Type != typ {
		return reject.New(reject.Invalid, "token", "a %s; %s takes a %s", o.Type, op, typ)
	}
	return l.one(&entry{op: op, tok: o})
}

// Mint records a child minted under an admitted mint policy (§6), on
// event: it follows the policy's grant through the policy, the grant is
// not revoked, event is one of the policy's, and the policy's max
// (runs-exhausted) and rate (rate-exceeded, by the clock's now) hold.
// The entry admits the child.
func (l *Ledger) Mint(child *jcp.Token, event string) error {
	o, err := reopen(child)
	if err != nil {
		return err
	}
	if o.Grant == nil {
		return reject.New(reject.Invalid, "token", "a %s; a mint is of a grant", o.Type)
	}
	e := &entry{op: opMint, tok: o, event: event}
	if err := l.begin(); err != nil {
		return err
	}
	e.at = ns(l.clock())
	b, err := l.decide(e)
	return errors.Join(err, l.finish(b))
}

// Effective is an admitted grant's terms after its amendments.
func (l *Ledger) Effective(id addr.Addr) (jcp.Terms, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Effective(id)
}

// Revoked says whether the grant or one of its ancestors is revoked.
func (l *Ledger) Revoked(id addr.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Revoked(id)
}

// Token is an admitted grant or mint policy.
func (l *Ledger) Token(id addr.Addr) (*jcp.Token, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Token(id)
}

// Budget is an admitted grant's budget.
func (l *Ledger) Budget(id addr.Addr) (Budget, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Budget(id)
}

// Tree is every admitted grant's budget, parents before children.
func (l *Ledger) Tree() []Budget {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Tree()
}

// Outstanding is the open reservations, by number: what recovery settles.
func (l *Ledger) Outstanding() []Pending {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.Outstanding()
}

// Head is what is durable: the number of entries on disk and the head
// after them.
func (l *Ledger) Head() (size uint64, head addr.Addr) {
	if l.sh != nil {
		l.mu.Lock()
		l.refresh()
		l.mu.Unlock()
	}
	l.durMu.Lock()
	defer l.durMu.Unlock()
	return l.durSize, l.durHead
}

// SignHead signs the durable head as a C2SP checkpoint
// ("sandbox.jcp-ledger/1\nSIZE\nbase64(HEAD)\n", key name Domain) and
// appends the note to the heads file, fsynced, before it returns it.
func (l *Ledger) SignHead() (string, error) {
	if l.signer.IsZero() {
		return "", fmt.Errorf("budget: %s has no signer to sign its head", l.path)
	}
	l.headsMu.Lock()
	defer l.headsMu.Unlock()
	size, head := l.Head()
	text, err := note.Checkpoint(Domain, size, head)
	if err != nil {
		return "", err
	}
	n, err := note.Sign(text, Domain, l.signer)
	if err != nil {
		return "", err
	}
	if err := appendHead(l.path+".heads", n); err != nil {
		return "", err
	}
	l.signed = size
	return n, nil
}
