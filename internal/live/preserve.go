package live

import (
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// Preservation (seed 004): an idle deadline, a stuck run and a host that
// stops all pass one fence before anything is torn down. The fence parks
// a sandbox (a suspension: its workspace captured, its record Suspended)
// only when its quiescence (the kernel's frozen cgroup), its owner, its
// incarnation and a complete checkpoint are all proved; otherwise the
// sandbox is retained as it is. Nothing here destroys.

// Preservation defaults.
const (
	// MaxIdleWindow is the longest a parked sandbox is expected to wait
	// for its owner; a checkpoint must be kept beyond it, with
	// CheckpointGrace.
	MaxIdleWindow   = 7 * 24 * time.Hour
	CheckpointGrace = 24 * time.Hour
	// CheckpointRetention is how long this host keeps a checkpoint: its
	// store never removes a blob a record names, so this is a floor.
	CheckpointRetention = 90 * 24 * time.Hour
)

// newIncarnation names one life of a sandbox's processes: a new one at
// each creation and resumption.
func newIncarnation() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Manager) lifecyclePath(id string) string { return h.Store.Path("lifecycle", id+".json") }

// readLifecycle reads sandbox id's lifecycle record from disk: only
// durable metadata, never the sandbox.
func (h *Manager) readLifecycle(id string) lifecycle.View {
	b, err := os.ReadFile(h.lifecyclePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return lifecycle.Decode(nil)
	}
	if err != nil {
		return lifecycle.View{Class: lifecycle.Unknown, Reason: err.Error()}
	}
	return lifecycle.Decode(b)
}

// LifecycleError is a lifecycle record this host will not change: of a
// version it does not support, or malformed. It stays as it is, so the
// refusal outlives the process.
type LifecycleError struct {
	ID   string
	View lifecycle.View
}

func (e *LifecycleError) Error() string {
	return fmt.Sprintf("sandbox %s's lifecycle record is %s (%s): it is kept as it is, and nothing that would change it is done", e.ID, e.View.Class, e.View.Reason)
}

// Unavailable: this host cannot act on it.
func (e *LifecycleError) Unavailable() bool { return true }

// updateLifecycle rereads sandbox id's lifecycle record and writes back
// what f makes of it (temp, fsync, rename). A record it cannot read as
// one it may change (unavailable, malformed, unknown) is refused and
// left as it is; a missing one is given to f as nil only if create.
func (h *Manager) updateLifecycle(id string, create bool, f func(r *lifecycle.Record) (*lifecycle.Record, error)) error {
	h.lifecycleMu.Lock()
	defer h.lifecycleMu.Unlock()
	b, err := os.ReadFile(h.lifecyclePath(id))
	var cur *lifecycle.Record
	switch {
	case errors.Is(err, os.ErrNotExist):
		if !create {
			return &LifecycleError{ID: id, View: lifecycle.Decode(nil)}
		}
	case err != nil:
		return err
	default:
		v := lifecycle.Decode(b)
		if v.Record == nil {
			return &LifecycleError{ID: id, View: v}
		}
		cur = v.Record
	}
	next, err := f(cur)
	if err != nil {
		return err
	}
	if cur != nil {
		// What a seed bound is never changed by an update: an owner and
		// an origin are set once, at the seed's mark.
		if (cur.Claim != nil && (next.Claim == nil || *cur.Claim != *next.Claim)) || (cur.Origin != "" && cur.Origin != next.Origin) ||
			((cur.Claim != nil || cur.Origin != "") && cur.State != lifecycle.StateUnseeded && next.State == lifecycle.StateUnseeded) {
			return fmt.Errorf("sandbox %s's lifecycle record: an update may not change its owner or origin", id)
		}
	}
	nb, err := lifecycle.Encode(next)
	if err != nil {
		return fmt.Errorf("sandbox %s's lifecycle record: %w", id, err)
	}
	if err := os.MkdirAll(h.Store.Path("lifecycle"), 0o700); err != nil {
		return err
	}
	return safefile.Write(h.lifecyclePath(id), nb, 0o600)
}

// classifyUnseeded writes a new sandbox's lifecycle record before
// anything of it starts: unseeded, this incarnation.
func (h *Manager) classifyUnseeded(sb *Sandbox) error {
	return h.updateLifecycle(sb.ID, true, func(r *lifecycle.Record) (*lifecycle.Record, error) {
		if r != nil {
			return nil, fmt.Errorf("sandbox %s has a lifecycle record already", sb.ID)
		}
		return &lifecycle.Record{V: lifecycle.Version, Sandbox: sb.ID, State: lifecycle.StateUnseeded, Incarnation: sb.incarnation}, nil
	})
}

// reincarnate records a resumed sandbox's new incarnation. A sandbox
// suspended before lifecycle records existed has none: it was made
// unseeded (this host seeds none without writing one first).
func (h *Manager) reincarnate(sb *Sandbox) error {
	return h.updateLifecycle(sb.ID, true, func(r *lifecycle.Record) (*lifecycle.Record, error) {
		if r == nil {
			return &lifecycle.Record{V: lifecycle.Version, Sandbox: sb.ID, State: lifecycle.StateUnseeded, Incarnation: sb.incarnation}, nil
		}
		n := *r
		n.Incarnation = sb.incarnation
		n.Window.Reset() // operations of the last life: their outcome is owed
		return &n, nil
	})
}

// markClosing records that sandbox id's end has begun: its lifecycle
// record is closing from here on, and proves no owner. A record this
// host cannot act on is left as it is.
func (h *Manager) markClosing(id string) {
	h.updateLifecycle(id, false, func(r *lifecycle.Record) (*lifecycle.Record, error) {
		n := *r
		n.State, n.Verified = lifecycle.StateClosing, false
		return &n, nil
	})
}

// Retained is a teardown the preservation fence did not allow: the
// sandbox is as it was.
type Retained struct {
	ID     string
	Reason string
}

func (e *Retained) Error() string { return fmt.Sprintf("sandbox %s retained: %s", e.ID, e.Reason) }

// ownerDigest is how a checkpoint names sb's owner: its claim's digest
// where its record proves one, else its account's.
func ownerDigest(v lifecycle.View, account string) string {
	if c, ok := v.Owner(); ok {
		return c.Digest()
	}
	return lifecycle.AccountDigest(account)
}

// account is whose sb is on this host: its owner, the host's own user
// for the in-process CLI's ("").
func account(sb *Sandbox) string {
	if sb.Owner == "" {
		return host.LocalOwner
	}
	return sb.Owner
}

// checkpointComplete reads a captured tree back: its document, and every
// chunk it names present in the store.
func (h *Manager) checkpointComplete(root addr.Addr) error {
	t, err := tree.Load(h.Store, root)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		for _, c := range e.Chunks {
			if !h.Store.HasBlob(c) {
				return fmt.Errorf("%s: chunk %s is not stored", e.Path, c)
			}
		}
	}
	return nil
}

// fenced is the gate a preserving suspension passes after its capture
// and before anything is torn down: the facts gathered now, the fence's
// verdict, and, when it parks, the checkpoint written into the
// lifecycle record. admitted is the record as it was read before the
// freeze: the checkpoint is named for the owner and incarnation it
// proved then, so that a record changed during the capture does not
// match. sample is the sandbox's activity count when its idle clock was
// read.
func (h *Manager) fenced(sb *Sandbox, admitted lifecycle.View, sample uint64, snap record.Snapshot) error {
	now := h.Now().UTC()
	f := &lifecycle.Facts{View: h.readLifecycle(sb.ID), Incarnation: sb.incarnation, Account: account(sb), Now: now, MaxIdle: MaxIdleWindow, Grace: CheckpointGrace}
	switch {
	case isSnapshotter(sb.sess):
		// A VM is paused, not frozen (its QEMU's cgroup is not): the
		// witness is its monitor's run state, read back from QEMU after
		// the suspension stopped its vCPUs (the guest let go of its
		// shares before): nothing of the guest runs to change the
		// workspace. The guest's word is never asked.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		paused, status, err := sb.sess.(executor.Freezer).Frozen(ctx)
		cancel()
		f.Frozen = paused
		switch {
		case err != nil:
			f.FrozenWhy = "its VM's run state could not be read back: " + err.Error()
		case !paused:
			f.FrozenWhy = "its VM reads back as " + status + ", not paused"
		}
	case sb.cg != nil:
		frozen, err := sb.cg.Frozen()
		f.Frozen = frozen
		if err != nil {
			f.FrozenWhy = err.Error()
		}
	case sb.Tier == tier.S2:
		// Nothing of an S2 sandbox runs but its execs, inside this
		// process, and none runs now (they are parked or there were none).
		f.Frozen = true
	default:
		f.FrozenWhy = "it has no cgroup to freeze (the service is not root)"
	}
	inc := sb.incarnation
	if admitted.Record != nil {
		inc = admitted.Record.Incarnation
	}
	f.Checkpoint = &lifecycle.Checkpoint{Root: snap.Root.String(), Owner: ownerDigest(admitted, account(sb)), Incarnation: inc, Taken: now, RetainUntil: now.Add(CheckpointRetention)}
	if err := h.checkpointComplete(snap.Root); err != nil {
		f.CheckpointErr = err
		f.Checkpoint = nil
	} else {
		f.Verified = true
	}
	f.Activity = sb.activity.Load() != sample
	v := lifecycle.Decide(f)
	if !v.Park {
		return &Retained{ID: sb.ID, Reason: v.Reason}
	}
	cp := *f.Checkpoint
	if err := h.updateLifecycle(sb.ID, false, func(r *lifecycle.Record) (*lifecycle.Record, error) {
		n := *r
		if n.Incarnation != sb.incarnation {
			return nil, fmt.Errorf("its incarnation changed while it was captured")
		}
		n.Checkpoint = &cp
		return &n, nil
	}); err != nil {
		return &Retained{ID: sb.ID, Reason: "its checkpoint could not be recorded (" + err.Error() + ")"}
	}
	return nil
}

// preserve passes sb through the fence at its idle deadline: it is
// parked, or retained as it is (Retained says why).
func (h *Manager) preserve(sb *Sandbox, sample uint64) error {
	if err := h.fencedSuspend(sb, sample); err != nil {
		return err
	}
	h.sandboxes.mu.Lock()
	if h.sandboxes.m[sb.ID] == sb {
		delete(h.sandboxes.m, sb.ID)
	}
	h.sandboxes.mu.Unlock()
	h.Logger().Info("sandbox parked", "sandbox", sb.ID, "why", "idle")
	return nil
}

// fencedSuspend suspends sb through the fence: what needs no freeze is
// checked first, the rest after the capture; a *Retained says why it was
// not suspended, and it is then as it was.
func (h *Manager) fencedSuspend(sb *Sandbox, sample uint64) error {
	sb.mu.Lock()
	running := sb.running
	sb.mu.Unlock()
	if sb.Tier == tier.S2 {
		running = 0 // an S2 exec is parked with the sandbox, not lost
	}
	// What needs no freeze and no capture first: a sandbox the fence
	// would retain anyway is left untouched.
	admitted := h.readLifecycle(sb.ID)
	if v, ok := lifecycle.Admit(&lifecycle.Facts{View: admitted, Incarnation: sb.incarnation, Account: account(sb),
		Running: running, Activity: sb.activity.Load() != sample}); !ok {
		return &Retained{ID: sb.ID, Reason: v.Reason}
	}
	_, err := h.suspendGated(sb, func(snap record.Snapshot) error { return h.fenced(sb, admitted, sample, snap) })
	if err != nil {
		var r *Retained
		if errors.As(err, &r) {
			return r
		}
		return &Retained{ID: sb.ID, Reason: "its suspension failed (" + err.Error() + ")"}
	}
	return nil
}

// StartIdle parks live sandboxes that no request has touched for after
// (0: never), through the preservation fence: one the fence retains
// stays live and is tried again at its next deadline. It runs until the
// host closes.
func (h *Manager) StartIdle(after time.Duration) {
	if after <= 0 {
		return
	}
	tick := min(max(after/8, 10*time.Millisecond), 30*time.Second)
	h.idle.once.Do(func() { h.idle.stop = make(chan struct{}) })
	h.idle.wg.Add(1)
	go func() {
		defer h.idle.wg.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-h.idle.stop:
				return
			case <-t.C:
			}
			h.idleTick(after)
		}
	}()
}

type idleKeeper struct {
	once sync.Once
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// parked and retained count the fence's verdicts (IdleStats).
	parked, retained int
}

func (h *Manager) stopIdle() {
	h.idle.once.Do(func() { h.idle.stop = make(chan struct{}) })
	select {
	case <-h.idle.stop:
	default:
		close(h.idle.stop)
	}
	h.idle.wg.Wait()
}

// IdleStats are the idle deadline's counts: sandboxes parked, and
// retentions by the fence.
func (h *Manager) IdleStats() (parked, retained int) {
	h.idle.mu.Lock()
	defer h.idle.mu.Unlock()
	return h.idle.parked, h.idle.retained
}

func (h *Manager) idleTick(after time.Duration) {
	now := h.Now()
	h.sandboxes.mu.Lock()
	var due []*Sandbox
	for _, sb := range h.sandboxes.m {
		if host.IsPoolOwner(sb.Owner) {
			continue // a pool's ready sandboxes have their own deadlines
		}
		sb.mu.Lock()
		closing := sb.closed
		sb.mu.Unlock()
		if closing {
			continue // being removed or suspended already
		}
		if now.Sub(sb.lastActive()) >= after {
			due = append(due, sb)
		}
	}
	h.sandboxes.mu.Unlock()
	for _, sb := range due {
		sample := sb.activity.Load()
		if now.Sub(sb.lastActive()) < after {
			continue
		}
		err := h.preserve(sb, sample)
		h.idle.mu.Lock()
		if err == nil {
			h.idle.parked++
		} else {
			h.idle.retained++
		}
		h.idle.mu.Unlock()
		var r *Retained
		if errors.As(err, &r) {
			if sb.noteRetained(r.Reason) {
				h.Logger().Warn("idle sandbox retained by the preservation fence", "sandbox", sb.ID, "reason", r.Reason)
			}
			sb.touch(now) // its next deadline is a full idle period away
		}
	}
}

// ReceiptRequest asks what is kept of one seeded sandbox for one exact
// owner: its claim (every field), the seed's source and an incarnation.
type ReceiptRequest struct {
	Sandbox     string
	Claim       lifecycle.Claim
	Source      string
	Incarnation string
}

// The states a preservation receipt reports.
const (
	ReceiptPresent = "present" // a complete checkpoint of that owner and incarnation is stored
	ReceiptLost    = "lost"    // its record names a checkpoint that is no longer whole in the store
	ReceiptUnknown = "unknown" // nothing durable says either
)

// PreservationReceipt is a passive, read-only answer from durable
// metadata only. It is never a permit to retire the sandbox: it says
// what is stored, not that nothing else holds work.
type PreservationReceipt struct {
	Sandbox     string
	State       string
	Reason      string
	Checkpoint  string // the checkpoint's root, when one is named (present or lost)
	Incarnation string
	Taken       time.Time
	RetainUntil time.Time
}

// ErrNoReceipt is a receipt refused: the sandbox's record has no such
// owner, seed or incarnation. It says nothing of what the record holds.
var ErrNoReceipt = fmt.Errorf("no preservation receipt for that owner, seed and incarnation: %w", os.ErrNotExist)

// Receipt answers req from the sandbox's lifecycle record and the
// store's contents (what exists, never what the checkout holds). It
// never touches a live sandbox, starts one, resumes one or wakes one.
func (h *Manager) Receipt(req ReceiptRequest) (PreservationReceipt, error) {
	if !sandboxID.MatchString(req.Sandbox) {
		return PreservationReceipt{}, &host.InvalidError{Err: fmt.Errorf("sandbox %q is not a sandbox id", req.Sandbox)}
	}
	if err := req.Claim.Validate(); err != nil {
		return PreservationReceipt{}, &host.InvalidError{Err: fmt.Errorf("claim: %w", err)}
	}
	if req.Source == "" {
		return PreservationReceipt{}, &host.InvalidError{Err: errors.New("the seed's source is required")}
	}
	if err := lifecycle.CheckIncarnation(req.Incarnation); err != nil {
		return PreservationReceipt{}, &host.InvalidError{Err: err}
	}
	out := PreservationReceipt{Sandbox: req.Sandbox, State: ReceiptUnknown, Incarnation: req.Incarnation}
	v := h.readLifecycle(req.Sandbox)
	r := v.Record
	owner, ok := v.Owner()
	if !ok {
		// No owner proved (a pending or unverified seed, a closing or
		// unreadable record): unknown, said only to the claim it names
		// (or, unclaimed, to its source); to anyone else nothing.
		switch {
		case r != nil && r.Claim != nil && *r.Claim == req.Claim && r.Seed != nil && r.Seed.Source == req.Source,
			r != nil && r.Claim == nil && r.Seed != nil && r.Seed.Source == req.Source:
			out.Reason = "its lifecycle record proves no owner (" + v.Class.String() + ")"
			return out, nil
		}
		return PreservationReceipt{}, ErrNoReceipt
	}
	cp := v.Checkpoint()
	seedOK := r != nil && r.Seed != nil && r.Seed.Source == req.Source && r.Seed.Head == req.Claim.Head
	incOK := (r != nil && r.Incarnation == req.Incarnation) || (cp != nil && cp.Incarnation == req.Incarnation)
	if owner != req.Claim || !seedOK || !incOK {
		return PreservationReceipt{}, ErrNoReceipt
	}
	if cp == nil || cp.Incarnation != req.Incarnation {
		out.Reason = "no checkpoint of that incarnation is recorded"
		return out, nil
	}
	out.Checkpoint, out.Taken, out.RetainUntil = cp.Root, cp.Taken, cp.RetainUntil
	root, err := addr.Parse(cp.Root)
	if err != nil {
		out.State, out.Reason = ReceiptLost, "its recorded checkpoint is not an address: "+err.Error()
		return out, nil
	}
	if err := h.checkpointComplete(root); err != nil {
		out.State, out.Reason = ReceiptLost, "its checkpoint is not whole in the store: "+err.Error()
		return out, nil
	}
	out.State, out.Reason = ReceiptPresent, "a complete checkpoint of that owner and incarnation is stored (this says what is stored, not that the sandbox may be retired)"
	return out, nil
}

// isSnapshotter says whether a session is stilled by suspending it whole
// (a VM, paused by its monitor) rather than by freezing its cgroup.
func isSnapshotter(s executor.Session) bool {
	_, ok := s.(executor.Snapshotter)
	return ok
}
