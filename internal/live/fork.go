package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// A fork makes N sandboxes from one sandbox's state. The state is taken
// as a suspension takes it (the workspace as a content-addressed tree,
// an S5 VM's memory image), so that the children share its chunks
// rather than copies of its bytes; a live parent is frozen for that
// moment and then runs on, its record unchanged; a suspended one stays
// suspended, and its last snapshot is the state. Each child is a new
// sandbox (its own id, its parent's owner, tier, grants and limits)
// whose record begins with its genesis and a Forked segment citing the
// parent's record (id, head₀) and the head it had then: a fork is a new
// run, like a continuation under other grants. The child is parked at
// that snapshot, and started by being resumed from it.
//
// A crash midway leaves nothing gc does not collect: what the capture
// stored that the store did not have is staged in a directory of its
// own (STATE/forks/fork-LEASE-N), named by the fork's lease, and moved
// into the store only once the children's records name it. gc removes
// the stage of an ended fork whose children were never named, and
// finishes the move for one whose children were (their records name
// what it holds).

// MaxFork is the most sandboxes one fork makes.
const MaxFork = 64

// CheckForkCount refuses a fork's count outside 1 to MaxFork, naming
// the field.
func CheckForkCount(n int) error {
	if n < 1 || n > MaxFork {
		return &host.InvalidError{Err: fmt.Errorf("field \"count\": %d: a fork makes 1 to %d sandboxes", n, MaxFork)}
	}
	return nil
}

// ForkSpec is what a fork makes.
type ForkSpec struct {
	// Count is how many sandboxes: 1 to MaxFork.
	Count int
	// Suspended leaves the children suspended at the parent's state:
	// each starts when it is resumed.
	Suspended bool
}

// Forked is what a fork made.
type Forked struct {
	// Parent is the sandbox forked; Genesis and Head are its record's
	// head₀ and the head its state was taken at, as each child's record
	// cites them.
	Parent        string
	Genesis, Head addr.Addr
	// Snapshot is the state every child began from.
	Snapshot record.Snapshot
	// Children are the sandboxes made, in order, each its sandbox or why
	// it is not one.
	Children []ForkChild
}

// ForkChild is one child of a fork: a sandbox (live, or suspended where
// the fork was asked to leave them so), or the error that stopped it.
// A child whose record was begun and that could not be started has its
// record closed, saying why.
type ForkChild struct {
	ID      string
	Sandbox SandboxInfo
	Err     error
}

// ClosedError is a sandbox whose record is closed: it has nothing more
// to give (a fork of it, a resumption).
type ClosedError struct{ ID string }

func (e *ClosedError) Error() string {
	return fmt.Sprintf("sandbox %s is closed: its run ended, and a closed run is not forked (fork a live or suspended one)", e.ID)
}

// Invalid: a request that cannot be served as things stand.
func (e *ClosedError) Invalid() bool { return true }

// forkSource is the state a fork begins its children from: the parent's
// record (its header and head then), its unit and grants, the snapshot
// and the bytes it retains, and the stage of what the capture stored
// (nil: the snapshot is one the parent's record names already).
type forkSource struct {
	state    record.State
	unit     DurableUnit
	grants   grant.Set
	snap     record.Snapshot
	retained int64
	stage    *stage
	// image is a copy of the parent's workspace volume as the snapshot
	// was taken, sharing its extents, in imageDir ("": none, where the
	// filesystem under the workspaces has no reflinks): each child's
	// workspace is made a copy of it, not restored file by file.
	image, imageDir string
	known           []tree.Known // what the capture of the state read
}

// Fork makes spec.Count sandboxes from the state of owner's sandbox id,
// live or suspended (the package's comment above says how). An error
// returned is the fork's as a whole: nothing was made. Otherwise every
// child is in Forked.Children, made or not, each with its own error.
func (h *Manager) Fork(ctx context.Context, id, owner string, spec ForkSpec) (Forked, error) {
	if err := CheckForkCount(spec.Count); err != nil {
		return Forked{}, err
	}
	src, err := h.forkSource(ctx, id, owner)
	if err != nil {
		return Forked{}, fmt.Errorf("fork %s: %w", id, err)
	}
	if src.stage != nil {
		defer src.stage.remove() // whatever happens below, nothing of it is left
	}
	if src.imageDir != "" {
		defer os.RemoveAll(src.imageDir) // each child has its own copy by then
	}
	out := Forked{Parent: id, Genesis: record.Genesis(src.state.Header.Unit, src.state.Header.Grants), Head: src.state.Head, Snapshot: src.snap}
	parent := record.Parent{Record: id, Genesis: out.Genesis, Head: out.Head}
	ids := make([]string, spec.Count)
	for i := range ids {
		ids[i] = newSandboxID()
	}
	if src.stage != nil {
		// From here gc finishes the stage's move for any of these whose
		// record it finds, and removes it for none.
		if err := src.stage.name(ids); err != nil {
			return Forked{}, fmt.Errorf("fork %s: %w", id, err)
		}
	}
	crash.At(crash.ForkStaged)
	out.Children = make([]ForkChild, spec.Count)
	named := 0
	for i, cid := range ids {
		out.Children[i].ID = cid
		if err := h.beginFork(cid, owner, src, parent); err != nil {
			out.Children[i].Err = err
			var ne *forkNamedError
			if errors.As(err, &ne) {
				named++ // its record names the stage's objects: they are published
			}
			continue
		}
		named++
	}
	crash.At(crash.ForkNamed)
	if src.stage != nil && named > 0 {
		if err := src.stage.publish(); err != nil {
			// Their records name objects the store does not have: they
			// end here, said so.
			for i := range out.Children {
				if out.Children[i].Err == nil {
					out.Children[i].Err = h.abandonFork(out.Children[i].ID, owner, fmt.Errorf("the fork's objects were not stored: %w", err))
				}
			}
			return out, nil
		}
	}
	if spec.Suspended {
		for i, c := range out.Children {
			if c.Err == nil {
				out.Children[i].Sandbox = h.suspendedInfo(c.ID, src)
			}
		}
		h.Logger().Info("sandbox forked", "sandbox", id, "head", out.Head, "children", named, "suspended", true)
		return out, nil
	}
	// Started side by side: each makes its workspace a copy of the
	// parent's image where there is one, else restores it from the
	// shared chunks, and starts its session.
	if src.image != "" {
		for _, c := range out.Children {
			if c.Err == nil {
				h.forkImages.Store(c.ID, forkImage{root: src.snap.Root, path: src.image, known: src.known})
			}
		}
		defer func() {
			for _, c := range out.Children {
				h.forkImages.Delete(c.ID)
			}
		}()
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(2, runtime.NumCPU()))
	for i := range out.Children {
		if out.Children[i].Err != nil {
			continue
		}
		wg.Add(1)
		go func(c *ForkChild) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			info, err := h.resumeHere(ctx, c.ID, owner, nil)
			if err != nil {
				c.Err = h.abandonFork(c.ID, owner, err)
				return
			}
			h.shareMade(c.ID, info.Tier, owner)
			c.Sandbox = info
		}(&out.Children[i])
	}
	wg.Wait()
	h.Logger().Info("sandbox forked", "sandbox", id, "head", out.Head, "children", named)
	return out, nil
}

// newSandboxID is a new sandbox's id: "sb-" and 12 random hex digits.
func newSandboxID() string {
	var b [6]byte
	rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// forkSource takes the state of owner's sandbox id: a live one's as a
// suspension takes it, a suspended one's last snapshot. A closed one is
// refused (ClosedError); one that is not the owner's is no sandbox.
func (h *Manager) forkSource(ctx context.Context, id, owner string) (forkSource, error) {
	if sb, err := h.sandbox(id, owner); err == nil {
		return h.forkLive(ctx, sb)
	}
	if p, err := h.readParked(id); err == nil && p.Owner == owner {
		// In a cluster, what is parked here may be stale: another host
		// may have taken it since, run it on, closed it. It is taken
		// from the cluster as a resumption takes it (its newer bundle
		// brought here; refused if it is closed, lost or live
		// elsewhere), read, and given back.
		release, err := h.take(ctx, id, owner)
		if err != nil {
			return forkSource{}, err
		}
		if release != nil {
			defer release()
		}
		_, st, err := h.readRecord(id)
		if err != nil {
			return forkSource{}, err
		}
		if st.Phase == record.Parked {
			return h.forkParked(id, st, p.Retained)
		}
	}
	if h.owns(id, owner) {
		if _, st, err := h.readRecord(id); err == nil && st.Phase == record.Ended {
			return forkSource{}, &ClosedError{ID: id}
		}
	}
	return forkSource{}, fmt.Errorf("%w: %q", ErrNoSandbox, id)
}

// forkParked is the state of suspended sandbox id: its last snapshot,
// which its record names (nothing is staged). An S2 sandbox suspended
// with execs parked is refused: those execs are runs of its record, and
// a child continuing one would seal a run that cites another record.
func (h *Manager) forkParked(id string, st record.State, retained int64) (forkSource, error) {
	u, g, err := genesisOf(h.Store, st, id)
	if err != nil {
		return forkSource{}, err
	}
	if st.Last.Memory != nil && u.Tier == tier.S2 {
		return forkSource{}, &host.InvalidError{Err: fmt.Errorf("sandbox %s was suspended with execs in flight, parked in its snapshot: they are runs of its own record and go on only there; resume it, let them end, then fork it", id)}
	}
	return forkSource{state: st, unit: u, grants: g, snap: *st.Last, retained: retained}, nil
}

// forkLive takes the state of live sandbox sb between its execs: its
// processes frozen (an S5 VM stilled, its memory written), its
// workspace captured into a stage, and then it runs on. An exec in
// flight refuses the fork.
func (h *Manager) forkLive(ctx context.Context, sb *Sandbox) (src forkSource, err error) {
	sb.settle()
	sb.mu.Lock()
	switch {
	case sb.closed:
		sb.mu.Unlock()
		return src, fmt.Errorf("%w: %q is being removed", ErrNoSandbox, sb.ID)
	case sb.running > 0:
		sb.mu.Unlock()
		return src, &host.InvalidError{Err: fmt.Errorf("sandbox %s has %d exec(s) running: a fork takes its state between execs; wait for them, or interrupt them, then fork", sb.ID, sb.running)}
	case sb.record == nil:
		sb.mu.Unlock()
		return src, &host.InvalidError{Err: fmt.Errorf("sandbox %s keeps no run record: a fork's record cites its parent's", sb.ID)}
	case sb.forking != nil:
		sb.mu.Unlock()
		return src, &host.InvalidError{Err: fmt.Errorf("sandbox %s is being forked already: fork it again once that fork answers", sb.ID)}
	}
	// No exec starts while its state is taken, and a removal (its
	// teardown) waits for the capture to end.
	forking := make(chan struct{})
	sb.closed, sb.forking = true, forking
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		sb.closed, sb.forking = false, nil
		sb.mu.Unlock()
		close(forking)
	}()
	st := sb.record.State()
	src.state = st
	if src.unit, src.grants, err = genesisOf(h.Store, st, sb.ID); err != nil {
		return src, err
	}
	if src.stage, err = h.newStage(); err != nil {
		return src, err
	}
	defer func() {
		if err != nil {
			src.stage.remove()
		}
	}()
	var memory *addr.Addr
	var memBytes int64
	if snapper, ok := sb.sess.(executor.Snapshotter); ok {
		// The guest lets go of its shares and is stilled, its memory
		// written into the stage: the workspace is then still. It runs
		// on once the workspace is taken.
		m, err := snapper.Suspend(ctx, filepath.Join(src.stage.dir, "memory"))
		if err != nil {
			return src, fmt.Errorf("still its VM: %w", err)
		}
		defer snapper.Continue(context.Background())
		if err := src.stage.putFile(m.Addr, m.Path); err != nil {
			return src, fmt.Errorf("its memory image: %w", err)
		}
		memory, memBytes = &m.Addr, m.Size
	} else if sb.cg != nil {
		if err := sb.cg.Freeze(); err != nil {
			return src, fmt.Errorf("freeze: %w", err)
		}
		defer sb.cg.Thaw()
	}
	snap, retained, known, err := h.captureIn(src.stage, sb)
	if err != nil {
		return src, err
	}
	// Only where nothing can write the workspace while it is copied: an
	// S1 sandbox's processes frozen in their cgroup (without one, a write
	// through a shared mapping would reach the copy and not the capture),
	// an S2 sandbox with no exec in flight (its writes are the service's).
	if sb.Workspace != "" && (sb.Tier == tier.S1 && sb.cg != nil || sb.Tier == tier.S2) {
		src.image, src.imageDir = h.snapshotWorkspace(sb)
		src.known = known
	}
	snap.Memory = memory
	src.snap, src.retained = snap, retained+memBytes
	return src, nil
}

// snapshotWorkspace copies live sandbox sb's workspace volume, stilled
// and just captured, sharing its extents (volume.Snapshot), into a
// directory of its own beside the workspaces, named by this process's
// lease (gc removes one a crash left). It returns the image and its
// directory, or "" where there is no copy to share (no reflinks under the
// workspaces: the children are restored from the snapshot's chunks).
func (h *Manager) snapshotWorkspace(sb *Sandbox) (img, dir string) {
	dir, err := state.MkdirNamed(h.volumes(), "sandbox-fork", h.Store.Namer())
	if err != nil {
		return "", ""
	}
	img = filepath.Join(dir, "workspace.img")
	if err := volume.Snapshot(sb.Workspace, img); err != nil {
		os.RemoveAll(dir)
		if !errors.Is(err, volume.ErrNoClone) {
			h.Logger().Info("a fork's children restored from its snapshot's chunks: its workspace volume was not copied", "sandbox", sb.ID, "err", err)
		}
		return "", ""
	}
	return img, dir
}

// beginFork begins child id's record: its unit (its parent's, under its
// own id and time of making), its parent's genesis grants, the Forked
// segment; and the note that makes it owner's, parked.
func (h *Manager) beginFork(id, owner string, src forkSource, parent record.Parent) error {
	u := src.unit
	u.ID, u.Created = id, h.Now().UTC().Format(time.RFC3339Nano)
	ub, err := jcs.Marshal(u)
	if err != nil {
		return err
	}
	// Its parent's genesis grants, stored as they are (genesisOf read
	// them from the store by that address).
	ga := src.state.Header.Grants
	ua := addr.Of(ub)
	if err := h.Store.PutBlob(ua, ub); err != nil {
		return err
	}
	if err := os.MkdirAll(h.Store.Path("records"), 0o700); err != nil {
		return err
	}
	f, err := record.CreateSealed(h.RecordPath(id), ua, ga, h.sealer(id))
	if err != nil {
		return fmt.Errorf("its run record: %w", err)
	}
	defer f.Close()
	if _, err := f.Append(record.Segment{Kind: record.Forked, Parent: &parent, Snapshot: src.snap}); err != nil {
		// A genesis alone names nothing of the fork's: no child.
		f.Close()
		os.Remove(h.RecordPath(id))
		return fmt.Errorf("its run record: %w", err)
	}
	h.indexRecord(id, f)
	if err := h.writeParked(id, parked{Owner: owner, Suspended: h.Now().UTC(), Retained: src.retained}); err != nil {
		// Its record names the fork's objects (they are published with
		// the others'), but nobody would own it: it is closed, saying so.
		return &forkNamedError{h.abandonFork(id, owner, fmt.Errorf("its note: %w", err))}
	}
	return nil
}

// forkNamedError is a child whose record was begun, naming the fork's
// objects, and could not be started: it counts among those named.
type forkNamedError struct{ error }

func (e *forkNamedError) Unwrap() error { return e.error }

// abandonFork closes child id's record, begun by a fork that could not
// start it, saying why; it returns the error the caller is told.
func (h *Manager) abandonFork(id, owner string, why error) error {
	if err := h.CloseRecord(id, owner, "the fork that made it could not start it: "+why.Error()); err != nil {
		return errors.Join(why, fmt.Errorf("its record was not closed: %w", err))
	}
	return why
}

// suspendedInfo is child id, suspended, as a list says it.
func (h *Manager) suspendedInfo(id string, src forkSource) SandboxInfo {
	created := h.Now().UTC()
	if _, st, err := h.readRecord(id); err == nil {
		if u, _, err := genesisOf(h.Store, st, id); err == nil {
			created, _ = time.Parse(time.RFC3339Nano, u.Created)
		}
	}
	u := src.unit
	return SandboxInfo{ID: id, Tier: u.Tier, Created: created, Env: u.Env, Listen: u.Listen, Grants: src.grants, GrantArgs: src.grants.Args(), Suspended: true}
}

// stage is where a fork keeps the objects its capture stored that the
// store did not have, until the children's records name them
// (STATE/forks/fork-LEASE-N/blobs), and the children it will name
// (children.json): as a tree.Blobs, it reads the store and itself.
type stage struct {
	dir   string
	store *store.Store
	sync  *store.Syncer // opened before anything was staged
	mu    sync.Mutex
	held  map[addr.Addr]bool
}

// forksDir is where the stages of forks in progress are.
func (h *Manager) forksDir() string { return h.Store.Path("forks") }

// newStage makes a fork's stage, named by this process's lease.
func (h *Manager) newStage() (*stage, error) {
	if err := os.MkdirAll(h.forksDir(), 0o700); err != nil {
		return nil, err
	}
	dir := filepath.Join(h.forksDir(), h.Store.TempName("fork"))
	if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o700); err != nil {
		return nil, err
	}
	sy, err := store.OpenSyncer(filepath.Join(dir, "blobs"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &stage{dir: dir, store: h.Store, sync: sy, held: map[addr.Addr]bool{}}, nil
}

func (s *stage) path(a addr.Addr) string { return filepath.Join(s.dir, "blobs", a.Hex()) }

func (s *stage) has(a addr.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[a]
}

// HasBlob says whether the store or the stage holds a.
func (s *stage) HasBlob(a addr.Addr) bool { return s.has(a) || s.store.HasBlob(a) }

// Blob reads a from the stage or the store.
func (s *stage) Blob(a addr.Addr) ([]byte, error) {
	if s.has(a) {
		return os.ReadFile(s.path(a))
	}
	return s.store.Blob(a)
}

// PutBlob stages b under its address a unless the store or the stage
// has it; bytes that are not a's are refused. It is written aside, then
// staged as putFile stages a file.
func (s *stage) PutBlob(a addr.Addr, b []byte) error {
	if s.HasBlob(a) {
		return nil
	}
	if got := addr.Of(b); got != a {
		return fmt.Errorf("blob %s: the bytes given hash to %s", a, got)
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "blobs"), ".part-*") // no address: never published
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.putFile(a, f.Name())
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// putFile stages the file at path (in the stage) under its address a,
// whose content its writer computed: named by a, unsynced (the stage is
// made durable once, when the children are named: until then a crash
// leaves a stage gc removes whole). Where the store or the stage has a
// already, the file goes.
func (s *stage) putFile(a addr.Addr, path string) error {
	if s.HasBlob(a) {
		return os.Remove(path)
	}
	if err := os.Rename(path, s.path(a)); err != nil {
		return err
	}
	s.mu.Lock()
	s.held[a] = true
	s.mu.Unlock()
	return nil
}

// stageChildren is a stage's children.json: the children a fork names.
type stageChildren struct {
	Children []string `json:"children"`
}

// name writes the children the fork will name, its blobs synced first:
// from here an ended fork's stage is moved into the store by gc where
// one of them has a record.
func (s *stage) name(ids []string) error {
	s.mu.Lock()
	names := make([]string, 0, len(s.held))
	for a := range s.held {
		names = append(names, a.Hex())
	}
	s.mu.Unlock()
	if _, err := s.sync.Sync(names); err != nil {
		return err
	}
	b, err := json.Marshal(stageChildren{Children: ids})
	if err != nil {
		return err
	}
	return safefile.Write(filepath.Join(s.dir, "children.json"), b, 0o600)
}

// publish moves the stage's objects into the store, each under its
// address (none is there twice), and syncs the store's directory once.
func (s *stage) publish() error {
	return publishStage(s.store, s.dir)
}

// remove removes the stage and what it still holds.
func (s *stage) remove() {
	s.sync.Close()
	os.RemoveAll(s.dir)
}

// publishStage moves the objects in the stage at dir into st.
func publishStage(st *store.Store, dir string) error {
	ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(st.Path("blobs"), 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		a, err := addr.Parse("b3:" + e.Name())
		if err != nil {
			continue // not an object: a temporary file a crash left
		}
		if st.HasBlob(a) {
			continue
		}
		if err := os.Rename(filepath.Join(dir, "blobs", e.Name()), st.Path("blobs", a.Hex())); err != nil {
			return err
		}
	}
	return safefile.SyncDir(st.Path("blobs"))
}

// collectForks is gc's part for forks a process began and did not end:
// the stage of one whose children were never named is removed; one
// whose children were has its objects moved into the store (their
// records name them), then its stage removed. consider judges each by
// the lease in its name.
func (h *Manager) collectForks(consider func(kind, path, name string, unownedToo bool, remove func() error)) {
	ents, _ := os.ReadDir(h.forksDir())
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "fork-") {
			continue
		}
		dir := filepath.Join(h.forksDir(), e.Name())
		kind := "a fork's staged objects, its children never named"
		var sc stageChildren
		if b, err := os.ReadFile(filepath.Join(dir, "children.json")); err == nil && json.Unmarshal(b, &sc) == nil {
			for _, id := range sc.Children {
				if _, err := os.Stat(h.RecordPath(id)); sandboxID.MatchString(id) && err == nil {
					kind = "a fork's staged objects, moved into the store: its children's records name them"
					break
				}
			}
		}
		named := strings.HasSuffix(kind, "name them")
		consider(kind, dir, e.Name(), true, func() error {
			if named {
				if err := publishStage(h.Store, dir); err != nil {
					return err
				}
			}
			return os.RemoveAll(dir)
		})
	}
}
