package live

import (
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// A live sandbox is a durable run (seed 000): it has a run record,
// STATE/records/ID.jsonl, whose genesis binds the sandbox's unit (its
// durable-unit document) and its grant set as given. Each exec is an
// Executed segment; Suspend captures the workspace, appends Suspended
// and only then tears the sandbox down; Resume verifies the record,
// restores the workspace, starts the sandbox again and appends
// Resumed with the idle energy of the parked interval; Close (and rm)
// append Closed.

// DurableUnitType is a sandbox's unit document's "sandbox".
const DurableUnitType = "sandbox.durable-unit/1"

// DurableUnit is what a live sandbox is, apart from its grants: the
// genesis of its record binds its address.
type DurableUnit struct {
	Sandbox string            `json:"sandbox"` // DurableUnitType
	ID      string            `json:"id"`
	Tier    tier.Tier         `json:"tier"`
	Created string            `json:"created"` // RFC 3339, UTC
	Env     map[string]string `json:"env,omitempty"`
	Limits  unit.Limits       `json:"limits"`
	Listen  []int             `json:"listen,omitempty"`
	// Workspace says it has one: a directory of its own, granted
	// read-write, whose path is the host's (it differs after a resume).
	Workspace bool `json:"workspace,omitempty"`
	// GrantArgs are the grants as they were given (for people).
	GrantArgs []string `json:"grant_args,omitempty"`
	// Root is the image root filesystem its programs run in (the
	// address of its listing); Manifest the environment manifest it was
	// made from. Omitted: the host's system directories; no manifest.
	Root     addr.Addr `json:"root,omitzero"`
	Manifest addr.Addr `json:"manifest,omitzero"`
}

// EnvironmentType is a host environment manifest's "environment".
const EnvironmentType = "sandbox.host-environment/1"

// Environment is the manifest of what a sandbox's programs run in on
// this host: an image's root filesystem, by the address of its listing
// (Image), or the host's own system directories, named, not hashed by
// content; and the environment manifest the sandbox was made from. A
// resumption must be in an environment with the same address.
type Environment struct {
	Environment string    `json:"environment"` // EnvironmentType
	Tier        tier.Tier `json:"tier"`
	OS          string    `json:"os"`
	Arch        string    `json:"arch"`
	Root        string    `json:"root"`
	Image       addr.Addr `json:"image,omitzero"`
	Manifest    addr.Addr `json:"manifest,omitzero"`
}

// environment is the manifest, stored, and its address, of a sandbox of
// tier t here, in the root filesystem root (zero: the host's system
// directories), made from the manifest man (zero: none).
func (h *Manager) environment(t tier.Tier, root, man addr.Addr) (addr.Addr, error) {
	return h.environmentIn(h.Store, t, root, man)
}

// environmentIn is environment, stored in blobs (a fork's stage).
func (h *Manager) environmentIn(blobs tree.Blobs, t tier.Tier, root, man addr.Addr) (addr.Addr, error) {
	desc := "the host's system directories /usr, /etc, /opt, read-only (named, not hashed)"
	switch {
	case t == tier.S2:
		desc = "WebAssembly (WASI preview 1): no system directories"
	case t == tier.S5:
		// A memory image resumes only under the kernel it was taken
		// with: the boot image is part of the environment.
		v, err := h.sessioner(tier.S5)
		if err != nil {
			return addr.Addr{}, err
		}
		b, ok := v.(executor.BootImager)
		if !ok {
			return addr.Addr{}, fmt.Errorf("%w: the %s executor names no boot image", tier.ErrUnavailable, v.Name())
		}
		im, err := b.BootImage()
		if err != nil {
			return addr.Addr{}, err
		}
		desc = "an S5 microVM booted from " + im.String() + " (sandbox.vm/1), the host's /usr read-only over 9p"
	case !root.IsZero():
		desc = "an image's root filesystem, read-only (its sandbox.rootfs/1 listing's address is image)"
	}
	b, err := jcs.Marshal(Environment{Environment: EnvironmentType, Tier: t, OS: runtime.GOOS, Arch: runtime.GOARCH, Root: desc, Image: root, Manifest: man})
	if err != nil {
		return addr.Addr{}, err
	}
	a := addr.Of(b)
	return a, blobs.PutBlob(a, b)
}

// IdleModel is how the idle energy of a parked sandbox is estimated: the
// retained bytes times a storage power coefficient, for the parked
// interval. 1.2 W per TB is the coefficient the Cloud Carbon Footprint
// methodology gives SSD storage (its HDD one is 0.65); this host cannot
// measure what its retained bytes draw, so the figure is an estimate,
// and labelled so.
const (
	IdleWattsPerTB = 1.2
	IdleProvenance = "Estimator storage-retention/1 (retained bytes × 1.2 W per TB, the Cloud Carbon Footprint SSD coefficient, × the parked interval)"
)

// idleUJ is the estimated idle energy of bytes retained for d.
func idleUJ(bytes int64, d time.Duration) uint64 {
	if bytes <= 0 || d <= 0 {
		return 0
	}
	uj := float64(bytes) / 1e12 * IdleWattsPerTB * d.Seconds() * 1e6
	if uj >= record.MaxIdleUJ {
		return record.MaxIdleUJ - 1
	}
	return uint64(uj + 0.5)
}

// parked is what a host keeps beside a parked record (records/ID.json):
// not part of the chain, what Resume needs to price the parked interval
// and to know whose it is.
type parked struct {
	Owner     string    `json:"owner"`
	Suspended time.Time `json:"suspended"`
	Retained  int64     `json:"retained_bytes"`
}

// RecordPath is where sandbox id's run record is kept; its seals are
// beside it (record.SealPath).
func (h *Manager) RecordPath(id string) string { return h.Store.Path("records", id+".jsonl") }

// sealer seals the entries this host appends to sandbox id's record
// with its key (nil for a host without one: it appends nothing).
func (h *Manager) sealer(id string) *record.Sealer {
	if h.Key.IsZero() {
		return nil
	}
	return &record.Sealer{Key: h.Key, ID: id}
}

// beginRecord makes a new sandbox's record.
func (h *Manager) beginRecord(sb *Sandbox, given grant.Set) error {
	u := DurableUnit{Sandbox: DurableUnitType, ID: sb.ID, Tier: sb.Tier, Created: sb.Created.Format(time.RFC3339Nano),
		Env: sb.Env, Limits: sb.Limits, Listen: sb.Listen, Workspace: sb.Workspace != "", GrantArgs: sb.givenArgs, Root: sb.Root, Manifest: sb.Manifest}
	ub, err := jcs.Marshal(u)
	if err != nil {
		return err
	}
	gb, ga, err := given.Canonical()
	if err != nil {
		return err
	}
	ua := addr.Of(ub)
	if err := h.Store.PutBlob(ua, ub); err != nil {
		return err
	}
	if err := h.Store.PutBlob(ga, gb); err != nil {
		return err
	}
	if err := os.MkdirAll(h.Store.Path("records"), 0o700); err != nil {
		return err
	}
	f, err := record.CreateSealed(h.RecordPath(sb.ID), ua, ga, h.sealer(sb.ID))
	if err != nil {
		return err
	}
	sb.record = f
	h.indexRecord(sb.ID, f)
	return nil
}

// placed seals a placement into sb's new record: a placement of another
// host is refused.
func (h *Manager) placed(sb *Sandbox, p *record.Placement) error {
	if err := h.checkPlacement(p); err != nil {
		return err
	}
	if _, err := sb.record.Append(record.Segment{Kind: record.Placed, Placement: p}); err != nil {
		return err
	}
	h.indexRecord(sb.ID, sb.record)
	return nil
}

// checkPlacement refuses a placement of another host, or one not whole
// and signed by the host that chose.
func (h *Manager) checkPlacement(p *record.Placement) error {
	if p.Host != h.Key.Public() {
		return &host.InvalidError{Err: fmt.Errorf("a placement on host %s, not this one (%s)", p.Host, h.Key.Public())}
	}
	if err := p.Check(); err != nil {
		return &host.InvalidError{Err: err}
	}
	return nil
}

// ParkedError says a sandbox is parked: resume it first.
type ParkedError struct{ ID string }

func (e *ParkedError) Error() string {
	return fmt.Sprintf("sandbox %s is suspended: resume it first ('sandbox resume %s')", e.ID, e.ID)
}

// Invalid: a request that cannot be served as things stand.
func (e *ParkedError) Invalid() bool { return true }

// Suspend parks a live sandbox: its processes are frozen (nothing writes
// after that, detached processes included), its workspace is captured by
// content address, Suspended is appended to its record, and only then is
// it torn down. An exec in flight refuses the suspension. Processes do
// not survive it at S1: the record's snapshot has no memory image.
func (h *Manager) Suspend(ctx context.Context, id, owner string) (record.Snapshot, error) {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		return record.Snapshot{}, err
	}
	snap, err := h.suspend(sb)
	if err != nil {
		return snap, err
	}
	h.sandboxes.mu.Lock()
	delete(h.sandboxes.m, id)
	h.sandboxes.mu.Unlock()
	return snap, nil
}

// suspend parks sb (Suspend), which the caller has taken from the live
// sandboxes or will.
func (h *Manager) suspend(sb *Sandbox) (record.Snapshot, error) {
	return h.suspendGated(sb, nil)
}

// suspendGated is suspend with a gate that the capture must pass before
// anything is recorded or torn down (the preservation fence); a gate's
// error thaws the sandbox and leaves it live. While a gated suspension
// runs, calls that act on the sandbox wait for it.
func (h *Manager) suspendGated(sb *Sandbox, gate func(record.Snapshot) error) (record.Snapshot, error) {
	sb.settle()
	id, owner := sb.ID, sb.Owner
	sb.mu.Lock()
	if gate != nil {
		done := make(chan struct{})
		sb.preserving = done
		defer func() {
			sb.mu.Lock()
			sb.preserving = nil
			sb.mu.Unlock()
			close(done)
		}()
	}
	switch {
	case sb.closed:
		sb.mu.Unlock()
		return record.Snapshot{}, fmt.Errorf("%w: %q is being removed", ErrNoSandbox, id)
	case sb.running > 0 && sb.Tier != tier.S2:
		sb.mu.Unlock()
		return record.Snapshot{}, &host.InvalidError{Err: fmt.Errorf("sandbox %s has %d exec(s) running: wait for them, or interrupt them, then suspend (an S1 process's memory is not kept; an S2 sandbox's execs are parked)", id, sb.running)}
	}
	sb.closed = true // no exec starts from here on
	sb.mu.Unlock()
	if sb.Tier == tier.S2 {
		// Each exec stops at its next host call, and is kept.
		h.parkExecs(sb)
	}
	reopen := func() {
		sb.mu.Lock()
		sb.closed = false
		sb.mu.Unlock()
	}
	var memory *addr.Addr
	var memBytes int64
	var memFresh bool // stored by this suspension: removed if it fails
	snapper, _ := sb.sess.(executor.Snapshotter)
	if snapper != nil {
		// The guest lets go of its shares and is paused, its memory
		// written to the store: the workspace is then still.
		m, n, fresh, err := h.suspendVM(snapper)
		if err != nil {
			reopen()
			return record.Snapshot{}, fmt.Errorf("suspend %s: %w", id, err)
		}
		memory, memBytes, memFresh = &m, n, fresh
	} else if sb.cg != nil {
		if err := sb.cg.Freeze(); err != nil {
			reopen()
			return record.Snapshot{}, fmt.Errorf("suspend %s: freeze: %w", id, err)
		}
	}
	thaw := func() {
		if snapper != nil {
			snapper.Continue(context.Background())
		} else if sb.cg != nil {
			sb.cg.Thaw()
		}
	}
	snap, retained, err := h.capture(sb)
	if err == nil && memory != nil {
		snap.Memory = memory
		retained += memBytes
	}
	if err == nil && gate != nil {
		err = gate(snap)
	}
	if err == nil && snap.Memory != nil && sb.Tier == tier.S2 {
		err = h.writeLivePark(sb, snap.Memory)
	}
	if err == nil {
		crash.At(crash.SuspendCaptured)
		memFresh = false // a failed append may yet have reached the disk: the record may name it
		_, err = sb.record.Append(record.Segment{Kind: record.Suspended, Snapshot: snap})
		h.indexRecord(id, sb.record)
	}
	if err != nil {
		// Nothing is torn down that the record does not hold. Execs it
		// parked go on here, at once, where they stopped: the workspace
		// is as they left it, and will not be after the next exec.
		thaw()
		reopen()
		h.writeLive(sb)
		if memFresh {
			// No record names it (none was written); it would lie in
			// the store for good.
			if rerr := h.Store.RemoveBlob(*memory); rerr != nil {
				h.Logger().Warn("a failed suspension's memory image was not removed", "sandbox", id, "blob", memory.String(), "err", rerr)
			}
		}
		sb.mu.Lock()
		execs := sb.parked
		sb.parked = nil
		sb.mu.Unlock()
		if len(execs) > 0 {
			go h.continueExecs(context.Background(), sb, S2Park{Sandbox: S2ParkType, Execs: execs})
		}
		return record.Snapshot{}, fmt.Errorf("suspend %s: %w", id, err)
	}
	crash.At(crash.SuspendAppended)
	// The record says parked: from here the suspension goes through. The
	// note beside it (whose, since when, how much) only prices and owns
	// the parked interval; without it the local owner may resume it and
	// its idle energy is counted as none. What is retained is the
	// snapshot, once: no copy of the workspace is kept beside it.
	if err := h.writeParked(id, parked{Owner: owner, Suspended: h.Now().UTC(), Retained: retained}); err != nil {
		h.Logger().Warn("no note beside a suspended sandbox's record", "sandbox", id, "err", err)
	}
	if snapper == nil && sb.cg != nil {
		sb.cg.Thaw() // frozen processes are ended by the teardown once thawed; a paused VM is killed as it is
	}
	// The workspace goes with the rest: its snapshot's chunks are its
	// only copy (a copy kept beside them as a cache doubled every
	// suspended workspace on disk), and a resumption restores it from
	// them, every chunk checked.
	if err := h.teardown(sb); err != nil {
		h.Logger().Warn("suspended sandbox torn down with errors", "sandbox", id, "err", err)
	}
	head := sb.record.State().Head
	sb.record.Close()
	os.Remove(h.livePath(id))
	h.Logger().Info("sandbox suspended", "sandbox", id, "root", snap.Root, "retained_bytes", retained)
	h.publish(id, owner, head)
	return snap, nil
}

// capture stores the sandbox's workspace as a tree and this host's
// environment manifest; it returns the snapshot and the bytes retained.
// Its objects are stored in one batch: written unsynced, made durable
// with one sync, and only then named in the store (store.Batch).
func (h *Manager) capture(sb *Sandbox) (record.Snapshot, int64, error) {
	b, err := h.Store.NewBatch()
	if err != nil {
		return record.Snapshot{}, 0, err
	}
	snap, n, _, err := h.captureIn(b, sb)
	if err != nil {
		b.Abort()
		return record.Snapshot{}, 0, err
	}
	crash.At(crash.SuspendStaged)
	if err := b.Commit(); err != nil {
		return record.Snapshot{}, 0, fmt.Errorf("store the snapshot of sandbox %s: %w", sb.ID, err)
	}
	return snap, n, nil
}

// captureIn is capture, its objects stored in blobs (a fork's stage); it
// also returns what the capture read of the workspace (tree.Known), as
// keepKnown keeps it.
func (h *Manager) captureIn(blobs tree.Blobs, sb *Sandbox) (record.Snapshot, int64, []tree.Known, error) {
	env, err := h.environmentIn(blobs, sb.Tier, sb.Root, sb.Manifest)
	if err != nil {
		return record.Snapshot{}, 0, nil, err
	}
	dir := sb.Workspace
	if dir == "" {
		// No workspace: an empty tree.
		if dir, err = os.MkdirTemp("", "sandbox-empty-"); err != nil {
			return record.Snapshot{}, 0, nil, err
		}
		defer os.Remove(dir)
	}
	if sb.Tier == tier.S5 && sb.Workspace != "" {
		// Its guest's modes are in extended attributes: the tree records
		// them, and a restoration gives them back (restoreWorkspace).
		if err := foldGuestModes(dir); err != nil {
			return record.Snapshot{}, 0, nil, fmt.Errorf("the guest's modes in its workspace: %w", err)
		}
	}
	root, st, err := h.capturer(sb.ID, blobs).Capture(dir)
	if err != nil {
		return record.Snapshot{}, 0, nil, err
	}
	mem, parkBytes, err := h.storePark(sb)
	if err != nil {
		return record.Snapshot{}, 0, nil, fmt.Errorf("its parked execs: %w", err)
	}
	h.keepKnown(sb.ID, st.Known)
	if len(st.Skipped) > 0 {
		h.Logger().Info("special files left out of a suspended workspace", "sandbox", sb.ID, "files", st.Skipped)
	}
	return record.Snapshot{Root: root, Manifest: env, Memory: mem}, st.Bytes + parkBytes, st.Known, nil
}

// keepKnown keeps what a capture of sandbox id's workspace read
// (cache/trees/ID.json), so that a later process, after a restart,
// reads again only what changed. A failure costs only speed.
func (h *Manager) keepKnown(id string, ks []tree.Known) {
	b, err := json.Marshal(ks)
	if err != nil {
		return
	}
	dir := h.Store.Path("cache", "trees")
	if os.MkdirAll(dir, 0o700) == nil {
		safefile.Write(filepath.Join(dir, id+".json"), b, 0o600)
	}
}

// capturer is a capturer for sandbox id's workspace into blobs, told
// what its last capture read (in this process or another): one per
// capture, so that what a long-lived service remembers is on disk, not
// in its memory.
func (h *Manager) capturer(id string, blobs tree.Blobs) *tree.Capturer {
	c := &tree.Capturer{Blobs: blobs}
	c.Seed(h.known(id))
	return c
}

// known is what the last capture of sandbox id's workspace read, as
// keepKnown kept it (nil: nothing kept).
func (h *Manager) known(id string) []tree.Known {
	b, err := os.ReadFile(h.Store.Path("cache", "trees", id+".json"))
	if err != nil {
		return nil
	}
	var ks []tree.Known
	if json.Unmarshal(b, &ks) != nil {
		return nil
	}
	return ks
}

func (h *Manager) writeParked(id string, p parked) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return safefile.Write(h.Store.Path("records", id+".json"), b, 0o600)
}

func (h *Manager) readParked(id string) (parked, error) {
	var p parked
	b, err := os.ReadFile(h.Store.Path("records", id+".json"))
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(b, &p)
}

// Resume un-parks a suspended sandbox, here or on another host that has
// its record and the objects it names (Import): the record is verified
// from its genesis, this host's environment must be the recorded one,
// the workspace is restored from the recorded tree, the sandbox starts
// again under the same id, unit and grants, and Resumed is appended
// with the idle energy of the parked interval.
func (h *Manager) Resume(ctx context.Context, id, owner string) (SandboxInfo, error) {
	return h.ResumePlaced(ctx, id, owner, nil)
}

// ResumePlaced is Resume where a cluster placed the resumption here: the
// placement (which must name this host, signed by the host that chose)
// is sealed into the record right after its Resumed segment.
func (h *Manager) ResumePlaced(ctx context.Context, id, owner string, pl *record.Placement) (info SandboxInfo, err error) {
	if pl != nil {
		if err := h.checkPlacement(pl); err != nil {
			return SandboxInfo{}, err
		}
	}
	if _, err := h.sandbox(id, owner); err == nil {
		return SandboxInfo{}, &host.InvalidError{Err: fmt.Errorf("sandbox %s is live, not suspended", id)}
	}
	release, err := h.take(ctx, id, owner)
	if err != nil {
		return SandboxInfo{}, err
	}
	if release != nil {
		defer func() {
			if err != nil {
				release()
			}
		}()
	}
	return h.resumeHere(ctx, id, owner, pl)
}

// resumeHere resumes suspended sandbox id from its record here (Resume),
// the cluster's keeping of it taken care of (or none to take).
func (h *Manager) resumeHere(ctx context.Context, id, owner string, pl *record.Placement) (SandboxInfo, error) {
	p, err := h.readParked(id)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return SandboxInfo{}, err
	}
	// Whose it is: the suspender's; a record brought from another host
	// (no sidecar) is the local user's.
	if (err == nil && p.Owner != owner) || (err != nil && owner != host.LocalOwner) {
		return SandboxInfo{}, fmt.Errorf("%w: %q", ErrNoSandbox, id)
	}
	f, err := h.openSealed(id)
	if errors.Is(err, os.ErrNotExist) {
		return SandboxInfo{}, fmt.Errorf("%w: %q (no record of it here)", ErrNoSandbox, id)
	}
	if err != nil {
		return SandboxInfo{}, err
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	st := f.State()
	if st.Phase != record.Parked {
		return SandboxInfo{}, &host.InvalidError{Err: fmt.Errorf("sandbox %s's record is %s, not parked: only a suspended sandbox is resumed", id, st.Phase)}
	}
	var u DurableUnit
	ub, err := h.Store.Blob(st.Header.Unit)
	if err == nil {
		err = jcs.Unmarshal(ub, &u)
	}
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("resume %s: its unit: %w", id, err)
	}
	if u.Sandbox != DurableUnitType || u.ID != id {
		return SandboxInfo{}, reject.New(reject.Invalid, "unit", "the record's unit is not sandbox %s's", id)
	}
	given, err := h.genesisGrants(st)
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("resume %s: %w", id, err)
	}
	// Who resumes it may have it (create asks again, as for any
	// sandbox) before this host is looked into for it: a root filesystem
	// its policy no longer lists is refused alike whether this host still
	// holds it or not.
	if err := h.Authorize(ctx, owner, authority.Ask{Action: "resume", Grants: given, Tier: u.Tier, Image: u.Root}); err != nil {
		return SandboxInfo{}, err
	}
	env, err := h.environment(u.Tier, u.Root, u.Manifest)
	if err != nil {
		return SandboxInfo{}, err
	}
	if env != st.Last.Manifest {
		return SandboxInfo{}, reject.New(reject.ManifestMismatch, h.RecordPath(id), "this host's environment is %s; the sandbox was suspended in %s", env, st.Last.Manifest)
	}
	if !u.Root.IsZero() {
		// The same toolchain, checked by hash: the root filesystem here
		// must list as the address the sandbox was made with.
		if err := h.Images.VerifyRoot(u.Root); err != nil {
			return SandboxInfo{}, fmt.Errorf("resume %s: %w", id, err)
		}
	}
	var park *S2Park
	var memory *addr.Addr
	if m := st.Last.Memory; m != nil && u.Tier == tier.S5 {
		memory = m // the VM resumes from it
	} else if m != nil {
		if u.Tier != tier.S2 {
			return SandboxInfo{}, reject.New(reject.Invalid, h.RecordPath(id), "a %s sandbox's snapshot has a memory image (%s): only S2 and S5 keep one", u.Tier, m)
		}
		p, err := h.loadPark(*m)
		if err != nil {
			return SandboxInfo{}, fmt.Errorf("resume %s: %w", id, err)
		}
		park = &p
	}
	created, _ := time.Parse(time.RFC3339Nano, u.Created)
	idle := uint64(0)
	if !p.Suspended.IsZero() {
		idle = idleUJ(p.Retained, h.Now().Sub(p.Suspended))
	}
	// It resumes with its genesis grants, and only those, shown as such
	// (never the unit's account of them); create checks them against who
	// resumes it.
	spec := SandboxSpec{Tier: u.Tier, Grants: given, Limits: u.Limits, Env: u.Env, Owner: owner, Listen: u.Listen, GrantArgs: given.Args(), NoWorkspace: !u.Workspace,
		id: id, created: created, restore: &st.Last.Root, memory: memory, root: u.Root, manifestAddr: u.Manifest,
		ready: func(sb *Sandbox) error {
			// Appended before the sandbox can be seen: no exec comes
			// before its Resumed. A failure here tears it down.
			crash.At(crash.ResumeRestored)
			if _, err := f.Resume(*st.Last, env, idle, IdleProvenance); err != nil {
				return err
			}
			if pl != nil {
				if _, err := f.Append(record.Segment{Kind: record.Placed, Placement: pl}); err != nil {
					return err
				}
			}
			h.indexRecord(id, f)
			crash.At(crash.ResumeAppended)
			sb.record = f
			return nil
		}}
	info, _, err := h.create(ctx, spec)
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("resume %s: %w", id, err)
	}
	keep = true
	os.Remove(h.Store.Path("records", id+".json"))
	h.Logger().Info("sandbox resumed", "sandbox", id, "idle_uj", idle)
	if park != nil {
		// Its parked execs go on where they stopped.
		sb, err := h.sandbox(id, owner)
		if err != nil {
			return info, err
		}
		info.Continued = h.continueExecs(ctx, sb, *park)
		c := info.Continued
		info = sb.info()
		info.Continued = c
	}
	return info, nil
}

// CloseRecord closes a suspended sandbox's record: abandonment is an
// honest outcome. (A live sandbox's is closed by Remove.)
func (h *Manager) CloseRecord(id, owner, reason string) error {
	if _, err := h.sandbox(id, owner); err == nil {
		return h.Remove(id, owner)
	}
	p, err := h.readParked(id)
	if err != nil || p.Owner != owner {
		return fmt.Errorf("%w: %q (no suspended sandbox of yours by that id)", ErrNoSandbox, id)
	}
	f, err := h.openSealed(id)
	if err != nil {
		return err
	}
	defer f.Close()
	h.markClosing(id)
	if _, err := f.Append(record.Segment{Kind: record.Closed, Reason: reason}); err != nil {
		return err
	}
	h.shareClosed(id)
	h.indexRecord(id, f)
	os.RemoveAll(h.parkedDir(id))
	os.Remove(h.livePath(id))
	os.Remove(h.Store.Path("cache", "trees", id+".json"))
	return os.Remove(h.Store.Path("records", id+".json"))
}

// RecordInfo is a record as `sandbox records` lists it.
type RecordInfo struct {
	ID       string       `json:"id"`
	Phase    record.Phase `json:"phase"`
	Head     addr.Addr    `json:"head"`
	Segments int          `json:"segments"`
	Executed int          `json:"executed"`
	IdleUJ   uint64       `json:"idle_uj"`
	// ActiveUJ is the energy of its executions, from their receipts
	// (measured and estimated, every class); TotalUJ adds the idle
	// energy: what the durable run cost. RunsMissing counts executions
	// whose receipts are not here (ActiveUJ leaves them out).
	ActiveUJ    uint64 `json:"active_uj"`
	TotalUJ     uint64 `json:"total_uj"`
	RunsMissing int    `json:"runs_missing,omitempty"`
	Err         string `json:"error,omitempty"`
}

// Cost sums what a record's executions drew, from the receipts of its
// runs in this state directory, and adds its idle energy.
func (h *Manager) cost(entries [][]byte, ri *RecordInfo) {
	for _, e := range entries[1:] {
		seg, err := record.ParseSegment(e)
		if err != nil || seg.Kind != record.Executed {
			continue
		}
		b, err := os.ReadFile(h.Store.Path("runs", seg.Attestation.Hex(), "receipt.cose"))
		var rc *receipt.Receipt
		if err == nil {
			rc, _ = receipt.Open(b, key.Trust{}) // its figures; trust is verify's
		}
		if rc == nil {
			ri.RunsMissing++
			continue
		}
		for _, d := range rc.Devices {
			ri.ActiveUJ += uint64(d.Measured) + uint64(d.Estimated)
		}
	}
	ri.TotalUJ = ri.ActiveUJ + ri.IdleUJ
}

// Records lists the run records of owner's sandboxes, each verified from
// its genesis: those live or suspended by owner, and, for the local
// owner, those whose owner this host no longer knows (closed, or
// brought from another host).
func (h *Manager) Records(owner string) ([]RecordInfo, error) {
	var out []RecordInfo
	for _, id := range h.recordIDs() {
		if !h.owns(id, owner) {
			continue
		}
		ri := RecordInfo{ID: id}
		entries, st, err := h.readRecord(id)
		ri.Phase, ri.Head, ri.Segments, ri.Executed, ri.IdleUJ = st.Phase, st.Head, st.Segments, st.Executed, st.IdleUJ
		if err == nil {
			h.cost(entries, &ri)
		} else {
			ri.Err = err.Error()
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// owns says whether sandbox id's record is owner's to see.
func (h *Manager) owns(id, owner string) bool {
	if _, err := h.sandbox(id, owner); err == nil {
		return true
	}
	h.sandboxes.mu.Lock()
	_, live := h.sandboxes.m[id]
	h.sandboxes.mu.Unlock()
	if live {
		return false // another's
	}
	if p, err := h.readParked(id); err == nil {
		return p.Owner == owner
	}
	return owner == host.LocalOwner
}

// restoreWorkspace fills the empty workspace ws from tree a, from the
// store, every chunk checked. A copy an earlier version of this host
// kept beside the snapshot is not trusted, only removed. An S5
// workspace's files are its guest's runs' user's (uid 65534 in the
// guest), with the modes its guest gave them (foldGuestModes): a share
// shows a file without attributes of the guest's as the host has it.
func (h *Manager) restoreWorkspace(id, ws string, a addr.Addr, t tier.Tier) error {
	fi, err := os.Stat(ws)
	if err != nil {
		return err
	}
	os.RemoveAll(h.parkedDir(id))
	var owner *[2]int
	if t == tier.S5 {
		owner = &[2]int{guestUser, guestUser}
	}
	if err := tree.Restore(h.Store, a, ws, owner); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("restore the workspace: its snapshot does not fit in its bound (%w)", err)
		}
		return fmt.Errorf("restore the workspace: %w", err)
	}
	if ks, err := (&tree.Capturer{Blobs: h.Store}).Remember(ws, a); err == nil {
		h.keepKnown(id, ks)
	}
	return os.Chmod(ws, fi.Mode().Perm())
}

// guestUser is the user an S5 guest's runs are (uid and gid 65534).
const guestUser = 65534

// parkedDir is where earlier versions of this host kept a suspended
// sandbox's workspace beside its snapshot (a doubling on disk that this
// one no longer makes): restoreWorkspace and gc remove it.
func (h *Manager) parkedDir(id string) string {
	return filepath.Join(os.TempDir(), "sandbox-parked-"+id)
}

// live is what a host keeps beside a live sandbox's record
// (records/ID.live): whose it is, its workspace and the lease of the
// process that runs it. If that process ends without suspending or
// closing it (kill -9, a crash), Recover finds the record by it.
type live struct {
	Owner     string `json:"owner"`
	Workspace string `json:"workspace,omitempty"`
	Lease     string `json:"lease"`
	Cgroup    string `json:"cgroup,omitempty"`
	// Park is the park of the execs a suspension parked, stored before
	// Suspended is appended: a host that dies between the two does not
	// lose them (Recover suspends with it).
	Park *addr.Addr `json:"park,omitempty"`
}

func (h *Manager) livePath(id string) string { return h.Store.Path("records", id+".live") }

func (h *Manager) writeLive(sb *Sandbox) error { return h.writeLivePark(sb, nil) }

func (h *Manager) writeLivePark(sb *Sandbox, park *addr.Addr) error {
	l := live{Owner: sb.Owner, Workspace: sb.Workspace, Park: park}
	if sb.cg != nil {
		l.Cgroup = sb.cg.Name
	}
	if h.Store.Lease != nil {
		l.Lease = h.Store.Lease.ID
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return safefile.Write(h.livePath(sb.ID), b, 0o600)
}

// Recovered is a live sandbox whose process ended without suspending or
// closing it, and what Recover made of it.
type Recovered struct {
	ID   string
	What string // "suspended", "closed", "cleaned"
	Err  error
}

// Recover takes the live sandboxes of ended processes (their lease is
// dead) and makes their records whole: one still active is suspended
// from its workspace as the process left it (Suspended appended, then
// the workspace parked), or closed when its workspace is gone; one the
// process had suspended or closed already is finished (its note
// written, its workspace parked or removed). dead says whether a lease
// has ended. What the process acknowledged is in the record; nothing is
// lost that the workspace still holds.
func (h *Manager) Recover(dead func(lease string) bool, dryRun bool) []Recovered {
	ents, _ := os.ReadDir(h.Store.Path("records"))
	var out []Recovered
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".live")
		if !ok || !sandboxID.MatchString(id) {
			continue
		}
		var l live
		b, err := os.ReadFile(h.livePath(id))
		if err == nil {
			err = json.Unmarshal(b, &l)
		}
		if err != nil || !dead(l.Lease) {
			continue
		}
		r := Recovered{ID: id}
		if !dryRun {
			r.What, r.Err = h.recover(id, l)
		}
		out = append(out, r)
	}
	return out
}

// openSealed opens sandbox id's record, every entry this host appends
// sealed, and logs what opening it repaired in its seals (a crash's).
func (h *Manager) openSealed(id string) (*record.File, error) {
	f, err := record.OpenSealed(h.RecordPath(id), h.sealer(id))
	if err == nil && f.Repaired() != "" {
		h.Logger().Warn("a run record's seals repaired on opening", "sandbox", id, "repaired", f.Repaired())
	}
	return f, err
}

func (h *Manager) recover(id string, l live) (string, error) {
	f, err := h.openSealed(id)
	if errors.Is(err, os.ErrNotExist) {
		removeWorkspace(l.Workspace)
		return "cleaned", os.Remove(h.livePath(id))
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	defer func() { h.indexRecord(id, f) }()
	// Nothing of it may run while its workspace is taken: its processes
	// die with their init, but a frozen one (a suspension cut short)
	// waits to be thawed.
	if h.Cgroups != nil && l.Cgroup != "" {
		h.Cgroups.Open(l.Cgroup).Kill(2 * time.Second)
	}
	st := f.State()
	hasWS := false
	if l.Workspace != "" {
		// A bounded workspace whose mount went with a restart of the
		// machine: its image holds it.
		if _, err := volume.Attach(l.Workspace); err != nil {
			return "", fmt.Errorf("its workspace's filesystem: %w", err)
		}
		// Made by this host, not planted by another user where anyone
		// may write (the temporary directory, emptied by a restart).
		hasWS = volume.Owned(l.Workspace) == nil
	}
	what := "cleaned"
	switch st.Phase {
	case record.Active:
		if host.IsPoolOwner(l.Owner) {
			// Kept ready by a pool and never claimed: nobody's work. Or
			// claimed, and its host ended before the claimer was written
			// down (nothing acts on a claimed sandbox before that): its
			// owner is unknown, and nothing ran in it.
			why := "kept ready by a pool whose host ended before it was claimed"
			if st.Segments > 0 {
				why = "claimed from a pool, but its host ended before the claimer was written down; nothing ran in it"
			}
			if _, err := f.Append(record.Segment{Kind: record.Closed, Reason: why}); err != nil {
				return "", err
			}
			what = "closed"
			break
		}
		if !hasWS && l.Workspace != "" {
			if _, err := f.Append(record.Segment{Kind: record.Closed, Reason: "its host ended, and its workspace is gone"}); err != nil {
				return "", err
			}
			what = "closed"
			break
		}
		var u DurableUnit
		if ub, err := h.Store.Blob(st.Header.Unit); err == nil {
			jcs.Unmarshal(ub, &u)
		}
		sb := &Sandbox{ID: id, Tier: u.Tier, Workspace: l.Workspace}
		if sb.Tier == 0 {
			sb.Tier = tier.S1
		}
		snap, retained, err := h.capture(sb)
		if err != nil {
			return "", err
		}
		if l.Park != nil {
			// Parked by a suspension cut short: nothing ran after the
			// park, so the workspace is the one the execs parked in.
			if _, err := h.loadPark(*l.Park); err != nil {
				h.Logger().Warn("the execs a suspension parked are lost", "sandbox", id, "err", err)
			} else {
				snap.Memory = l.Park
			}
		}
		if _, err := f.Append(record.Segment{Kind: record.Suspended, Snapshot: snap}); err != nil {
			return "", err
		}
		if err := h.writeParked(id, parked{Owner: l.Owner, Suspended: h.Now().UTC(), Retained: retained}); err != nil {
			return "", err
		}
		what = "suspended"
	case record.Parked:
		if _, err := h.readParked(id); err != nil {
			var size int64
			if t, err := tree.Load(h.Store, st.Last.Root); err == nil {
				for _, e := range t.Entries {
					size += e.Size
				}
			}
			if err := h.writeParked(id, parked{Owner: l.Owner, Suspended: h.Now().UTC(), Retained: size}); err != nil {
				return "", err
			}
		}
		what = "suspended"
	}
	if hasWS {
		// Captured (its snapshot is its copy) or ended: it goes.
		removeWorkspace(l.Workspace)
	}
	return what, os.Remove(h.livePath(id))
}

// recordIDs lists the sandboxes this state directory has records of.
func (h *Manager) recordIDs() []string {
	ents, _ := os.ReadDir(h.Store.Path("records"))
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok && sandboxID.MatchString(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// genesisGrants is the grant set a record's genesis binds, checked by
// its address.
func (h *Manager) genesisGrants(st record.State) (grant.Set, error) {
	gb, err := h.Store.Blob(st.Header.Grants)
	if err != nil {
		return grant.Set{}, fmt.Errorf("its grants: %w", err)
	}
	if addr.Of(gb) != st.Header.Grants {
		return grant.Set{}, reject.New(reject.Address, "grants", "the blob named %s hashes to %s", st.Header.Grants, addr.Of(gb))
	}
	g, err := grant.Decode(gb)
	if err != nil {
		return grant.Set{}, fmt.Errorf("its grants: %w", err)
	}
	return g, nil
}

// readRecord replays sandbox id's record as it stands on disk (a torn,
// unacknowledged tail aside), returning its entries and state.
func (h *Manager) readRecord(id string) ([][]byte, record.State, error) {
	entries, _, err := chain.Read(h.RecordPath(id))
	if err != nil {
		return nil, record.State{}, err
	}
	st, err := record.Verify(entries)
	return entries, st, err
}

// Suspended lists owner's suspended sandboxes, oldest first, as their
// records and units say them.
func (h *Manager) Suspended(owner string) []SandboxInfo {
	var out []SandboxInfo
	for _, id := range h.parkedIDs() {
		p, err := h.readParked(id)
		if err != nil || p.Owner != owner {
			continue
		}
		_, st, err := h.readRecord(id)
		if err != nil || st.Phase != record.Parked {
			continue
		}
		var u DurableUnit
		if ub, err := h.Store.Blob(st.Header.Unit); err == nil {
			jcs.Unmarshal(ub, &u)
		}
		given, _ := h.genesisGrants(st)
		created, _ := time.Parse(time.RFC3339Nano, u.Created)
		out = append(out, SandboxInfo{ID: id, Tier: u.Tier, Created: created, Execs: st.Executed, Env: u.Env, Listen: u.Listen, Grants: given, GrantArgs: given.Args(), Suspended: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// indexRecord keeps the index's row of sandbox id's record, f, as it is
// now. A row the index did not take marks its records for a rebuild.
func (h *Manager) indexRecord(id string, f *record.File) {
	if h.Store.Index == nil || f == nil {
		return
	}
	st := f.State()
	r := store.IndexedRecord{ID: id, Phase: string(st.Phase), Head: st.Head, Segments: st.Segments, Executed: st.Executed, Updated: h.Now().UTC()}
	if err := h.Store.Index.PutRecord(r); err != nil {
		os.WriteFile(h.Store.Path("index.records-stale"), []byte(err.Error()+"\n"), 0o600)
	}
}

// parkedIDs are the ids of the parked records: from the index where
// its records are complete, else read from every record (rebuilding the
// index's rows of them).
func (h *Manager) parkedIDs() []string {
	x := h.Store.Index
	stale := h.Store.Path("index.records-stale")
	if x != nil {
		if _, err := os.Stat(stale); errors.Is(err, os.ErrNotExist) {
			if ok, err := x.RecordsComplete(); err == nil && ok {
				if rows, err := x.Records(); err == nil {
					var out []string
					for _, r := range rows {
						if r.Phase == string(record.Parked) {
							out = append(out, r.ID)
						}
					}
					return out
				}
			}
		}
	}
	since := time.Now()
	os.Remove(stale)
	var out []string
	var rows []store.IndexedRecord
	for _, id := range h.recordIDs() {
		_, st, err := h.readRecord(id)
		if err != nil {
			continue
		}
		rows = append(rows, store.IndexedRecord{ID: id, Phase: string(st.Phase), Head: st.Head, Segments: st.Segments, Executed: st.Executed, Updated: since.UTC()})
		if st.Phase == record.Parked {
			out = append(out, id)
		}
	}
	if x != nil {
		if err := x.RebuildRecords(rows, since); err != nil {
			os.WriteFile(stale, []byte(err.Error()+"\n"), 0o600)
		}
	}
	return out
}

// suspendVM quiesces and pauses an S5 sandbox's VM and stores its memory
// image in the blob store, by address; it returns the address and size.
// On failure the VM runs on as it was.
func (h *Manager) suspendVM(s executor.Snapshotter) (a addr.Addr, size int64, fresh bool, err error) {
	// In the state directory: the image is moved into the store, not copied.
	if err := os.MkdirAll(h.Store.Path("cache"), 0o700); err != nil {
		return addr.Addr{}, 0, false, err
	}
	tmp, err := os.MkdirTemp(h.Store.Path("cache"), "vm-memory-")
	if err != nil {
		return addr.Addr{}, 0, false, err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	snap, err := s.Suspend(ctx, filepath.Join(tmp, "memory"))
	if err != nil {
		return addr.Addr{}, 0, false, err
	}
	fresh = !h.Store.HasBlob(snap.Addr)
	if err := h.Store.PutBlobFile(snap.Addr, snap.Path); err != nil {
		s.Continue(ctx)
		return addr.Addr{}, 0, false, fmt.Errorf("storing its memory image: %w", err)
	}
	return snap.Addr, snap.Size, fresh, nil
}
