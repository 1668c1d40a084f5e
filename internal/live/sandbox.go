package live

import (
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// ErrNoSandbox is wrapped when a sandbox id names no live sandbox (of
// the caller's).
var ErrNoSandbox = fmt.Errorf("no such sandbox: %w", os.ErrNotExist)

// MaxSandboxes is how many live sandboxes a host keeps at once, by default.
const MaxSandboxes = 1024

// SandboxSpec is what a live sandbox is made with.
type SandboxSpec struct {
	// Tier is S1 (native programs: one confined init that every exec
	// joins) or S2 (WebAssembly modules sharing the workspace and
	// grants). Default S1.
	Tier   tier.Tier
	Grants grant.Set
	// Limits are the sandbox's (S1: its cgroup's memory, processes and
	// CPUs, shared by everything in it; S2: each module's pages).
	Limits unit.Limits
	// Env is added to each exec's environment.
	Env map[string]string
	// Owner is who made it: only the same owner sees it.
	Owner string
	// Placement is where a cluster placed it and why, signed by the
	// host that chose (this one, or the one that forwarded it here): its
	// host must be this one; it is sealed into the record first.
	Placement *record.Placement
	// NoWorkspace: no workspace directory.
	NoWorkspace bool
	// Listen are TCP ports an S1 or S5 sandbox's processes may listen
	// on, reached only by this service (S1: in its own network namespace,
	// loopback only; S5: forwarded by its VM's monitor from the loopback
	// of the monitor's own): recorded in every exec's attestation notes.
	Listen []int
	// GrantArgs are the grants as they were given (for people).
	GrantArgs []string
	// Image is an imported image (name, ID or unique prefix) whose root
	// filesystem an S1 sandbox's programs run in, in place of the
	// host's system directories.
	Image string
	// Manifest is the environment manifest it is made from: its image
	// (where Image is not given), its container and remote environment
	// (beneath Env) and forwarded ports (listen ports). The sandbox's
	// unit binds its address, and a resumption must be in the same.
	Manifest *manifest.Signed

	// A resumption's: its root filesystem and manifest, by address.
	root, manifestAddr addr.Addr
	// A resumption's: the sandbox's id and time of creation, and the
	// tree its workspace is restored from.
	id      string
	created time.Time
	restore *addr.Addr
	// memory is an S5 resumption's memory image, by address (nil: the
	// guest boots afresh).
	memory *addr.Addr
	// ready is called with the sandbox made, before anyone can see it:
	// a resumption appends Resumed to its record there.
	ready func(*Sandbox) error
}

// Sandbox is a live sandbox.
type Sandbox struct {
	// grantIDs are the host objects its session mounted for Grants'
	// storage (grantIDs), set before the session opens.
	grantIDs  []grantID
	ID        string
	Tier      tier.Tier
	Grants    grant.Set // as given, and the workspace
	Workspace string    // a host directory granted read-write; "" for none
	Limits    unit.Limits
	Env       map[string]string
	Owner     string
	Created   time.Time
	Listen    []int
	// Root is the image root filesystem its programs run in (zero: the
	// host's system directories), and Manifest the environment manifest
	// it was made from (zero: none).
	Root      addr.Addr
	Manifest  addr.Addr
	rootDir   string
	imageEnv  map[string]string // the image's environment: each exec's defaults
	grantArgs []string
	givenArgs []string     // the grants as given, without the workspace's
	record    *record.File // its run record (the durable run it is)

	mu       sync.Mutex
	execs    int // sealed so far
	seq      int // execs numbered so far
	running  int
	inflight map[*inflight]bool // S2 execs running: to park them
	parked   []ParkedExec       // S2 execs parked by a suspension
	closed   bool
	// sess is the executor's live session its execs run in (S1's
	// init, S5's VM); nil for S2, whose execs are runs of their own.
	sess     executor.Session
	cg       *cgroup.Group
	leftover []*cgroup.Group // execs' groups still holding background processes
	// settled is closed when what a claim wrote after answering (the
	// live file naming the new owner, the index row) is written: until
	// then nothing acts on the sandbox. Nil: nothing pending.
	settled chan struct{}
	// preserving is closed when a fenced suspension of it ends (parked
	// or retained); nil: none runs.
	preserving chan struct{}
	// forking is closed when a fork's capture of its state ends: its
	// teardown waits for it (fork.go).
	forking chan struct{}
	// incarnation names this life of its processes (lifecycle record).
	incarnation string
	// activity counts the requests that touched it; active is when the
	// last one did (its idle clock).
	activity    atomic.Uint64
	active      time.Time
	retainedWhy string // the fence's last reason to retain it
	// window bounds and accounts for its execs: Slots at once.
	window lifecycle.Window
	// unbounded says why its workspace has no size bound where the
	// host's default could not be given ("": it has one, or none was
	// asked for).
	unbounded string
}

// touch restarts sb's idle clock.
func (sb *Sandbox) touch(now time.Time) {
	sb.mu.Lock()
	if now.After(sb.active) {
		sb.active = now
	}
	sb.mu.Unlock()
}

func (sb *Sandbox) lastActive() time.Time {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.active
}

// noteRetained records the fence's reason; it reports whether it is a
// new one (worth a log line).
func (sb *Sandbox) noteRetained(why string) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.retainedWhy == why {
		return false
	}
	sb.retainedWhy = why
	return true
}

// settle waits for what a claim of sb still writes.
func (sb *Sandbox) settle() {
	sb.mu.Lock()
	ch := sb.settled
	sb.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// SandboxInfo is what is said about a live sandbox.
type SandboxInfo struct {
	ID        string            `json:"id"`
	Tier      tier.Tier         `json:"tier"`
	Workspace string            `json:"workspace,omitempty"`
	Created   time.Time         `json:"created"`
	Execs     int               `json:"execs"`
	Running   int               `json:"running"`
	Grants    grant.Set         `json:"grants"`
	Env       map[string]string `json:"env,omitempty"`
	Listen    []int             `json:"listen,omitempty"`
	// GrantArgs are its grants as given, and its workspace's.
	GrantArgs []string `json:"grant_args"`
	// Root is the image root filesystem it runs in; Manifest the
	// environment manifest it was made from (omitted: none).
	Root     *addr.Addr `json:"root,omitempty"`
	Manifest *addr.Addr `json:"manifest,omitempty"`
	// Suspended: it is parked (Suspend); nothing of it runs.
	Suspended bool `json:"suspended,omitempty"`
	// Incarnation names this life of its processes.
	Incarnation string `json:"incarnation,omitempty"`
	// Continued are the parked execs its resumption continued.
	Continued []ContinuedExec `json:"-"`
}

func (s *Sandbox) info() SandboxInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := SandboxInfo{ID: s.ID, Tier: s.Tier, Workspace: s.Workspace, Created: s.Created, Execs: s.execs, Running: s.running, Grants: s.Grants, Env: s.Env, Listen: s.Listen, GrantArgs: s.grantArgs, Incarnation: s.incarnation}
	if !s.Root.IsZero() {
		r := s.Root
		i.Root = &r
	}
	if !s.Manifest.IsZero() {
		m := s.Manifest
		i.Manifest = &m
	}
	return i
}

// imageRef is the image a sandbox of spec runs in: its own, else its
// manifest's.
func (spec SandboxSpec) imageRef() string {
	if m := spec.Manifest; spec.Image == "" && m != nil {
		return m.Manifest.Image
	}
	return spec.Image
}

// environmentOf makes a sandbox's spec whole from its manifest and
// image: it returns the root filesystem's directory and the image's
// environment. A manifest's features are refused: each is installed by
// running its install script, a command, which a manifest may not carry.
func (h *Manager) environmentOf(ctx context.Context, spec *SandboxSpec, action string) (string, map[string]string, error) {
	if m := spec.Manifest; m != nil {
		if len(m.Manifest.Features) > 0 {
			return "", nil, &host.InvalidError{Err: fmt.Errorf("manifest %s names %d features (%s, ...): a feature is installed by running its install script, which no manifest may carry; build an image with them and name it in the manifest", m.Addr.Short(), len(m.Manifest.Features), m.Manifest.Features[0].ID)}
		}
		spec.Image = spec.imageRef()
		env := map[string]string{}
		for _, e := range []map[string]string{m.Manifest.ContainerEnv, m.Manifest.RemoteEnv, spec.Env} {
			for k, v := range e {
				env[k] = v
			}
		}
		spec.Env = env
		for _, p := range m.Manifest.ForwardPorts {
			if !slices.Contains(spec.Listen, p) {
				spec.Listen = append(spec.Listen, p)
			}
		}
		if err := h.Store.PutBlob(m.Addr, m.Canon); err != nil {
			return "", nil, err
		}
		spec.manifestAddr = m.Addr
	}
	if spec.Image == "" && spec.root.IsZero() {
		return "", nil, nil
	}
	if spec.Tier != tier.S1 {
		return "", nil, &host.InvalidError{Err: fmt.Errorf("an image's root filesystem is for S1 sandboxes (native programs); an S2 sandbox runs WebAssembly modules, which have none")}
	}
	var imageEnv map[string]string
	if spec.Image != "" {
		// An image the owner may not use is, to it, not there; what it
		// may is checked again below with the rest of what it asks.
		img, err := h.ResolveImage(spec.Image, h.ImageChecker(ctx, spec.Owner, action))
		if err != nil {
			return "", nil, err
		}
		spec.root = img.Root
		imageEnv = host.EnvMap(img.Config.Env)
	}
	d, err := h.Images.RootDir(spec.root)
	return d, imageEnv, err
}

type sandboxes struct {
	mu  sync.Mutex
	m   map[string]*Sandbox
	max int
	// making counts the sandboxes being made: each holds its room
	// against max until it is in m or has failed.
	making int
}

// MaxLive sets how many live sandboxes the host keeps at once (0: MaxSandboxes).
func (h *Manager) MaxLive(n int) {
	h.sandboxes.mu.Lock()
	h.sandboxes.max = n
	h.sandboxes.mu.Unlock()
}

// Create makes a live sandbox: its workspace (a directory of its own,
// granted read-write), at S1 its init, confined with the grants, and its
// run record (RecordPath), whose genesis binds its unit and its grants.
func (h *Manager) Create(ctx context.Context, spec SandboxSpec) (SandboxInfo, error) {
	spec.id, spec.restore, spec.ready = "", nil, nil
	info, _, err := h.create(ctx, spec)
	return info, err
}

// create makes a sandbox, or, for a resumption (spec.id), makes it
// again with its workspace restored.
func (h *Manager) create(ctx context.Context, spec SandboxSpec) (SandboxInfo, *Sandbox, error) {
	if spec.Tier == 0 {
		spec.Tier = tier.S1
	}
	if spec.Tier == tier.S2 && len(spec.Listen) > 0 {
		return SandboxInfo{}, nil, &host.InvalidError{Err: fmt.Errorf("listen ports are for S1 sandboxes: a WebAssembly module opens no sockets")}
	}
	if spec.Tier != tier.S1 && spec.Tier != tier.S2 && spec.Tier != tier.S5 {
		return SandboxInfo{}, nil, &host.InvalidError{Err: fmt.Errorf("a live sandbox is S1 (native programs), S2 (WebAssembly modules) or S5 (native programs in a microVM), not %s", spec.Tier)}
	}
	if p := h.Probe(ctx, spec.Tier); !p.Available {
		return SandboxInfo{}, nil, &tier.UnavailableError{Tier: spec.Tier, Reason: p.Reason, Available: h.Availability(ctx).Available()}
	}
	ss := &h.sandboxes
	ss.mu.Lock()
	max := ss.max
	if max == 0 {
		max = MaxSandboxes
	}
	if len(ss.m)+ss.making >= max {
		ss.mu.Unlock()
		return SandboxInfo{}, nil, &host.LimitError{What: fmt.Sprintf("this host keeps at most %d live sandboxes; remove one first", max)}
	}
	ss.making++ // its room, held while it is made (a fork makes many at once)
	ss.mu.Unlock()
	making := true
	defer func() {
		if making {
			ss.mu.Lock()
			ss.making--
			ss.mu.Unlock()
		}
	}()
	id, created := spec.id, spec.created
	if id == "" {
		var b [6]byte
		rand.Read(b[:])
		id, created = "sb-"+hex.EncodeToString(b[:]), h.Now().UTC()
	}
	action := "create"
	if spec.id != "" {
		action = "resume"
	}
	rootDir, imageEnv, err := h.environmentOf(ctx, &spec, action)
	if err != nil {
		return SandboxInfo{}, nil, err
	}
	// What it is given, checked against who asks before anything of it
	// is made (a resumption's: its record's genesis grants).
	if err := h.Authorize(ctx, spec.Owner, authority.Ask{Action: action, Grants: spec.Grants, Tier: spec.Tier, Image: spec.root}); err != nil {
		return SandboxInfo{}, nil, err
	}
	// Its workspace is bounded by the smallest bound the principal's
	// policies set, where that is below what the spec asks.
	for _, p := range h.Principal(ctx, spec.Owner).Policies {
		if b := p.WorkspaceBytes; b > 0 && (spec.Limits.WorkspaceBytes <= 0 || b < spec.Limits.WorkspaceBytes) {
			spec.Limits.WorkspaceBytes = b
		}
	}
	// Every grant it is given, reached before anything of it is made (its own
	// workspace is the host's).
	if err := h.ReachGrants(spec.Grants.Storage, nil); err != nil {
		return SandboxInfo{}, nil, err
	}
	sb := &Sandbox{ID: id, Tier: spec.Tier, Limits: spec.Limits, Env: spec.Env, Owner: spec.Owner, Created: created, Listen: spec.Listen, grantArgs: spec.GrantArgs, givenArgs: spec.GrantArgs,
		Root: spec.root, Manifest: spec.manifestAddr, rootDir: rootDir, imageEnv: imageEnv, incarnation: newIncarnation(), active: h.Now()}
	g := spec.Grants.Clone()
	g.Storage = append([]grant.Storage(nil), g.Storage...)
	fail := func(err error) (SandboxInfo, *Sandbox, error) {
		h.teardown(sb)
		return SandboxInfo{}, nil, err
	}
	sb.Limits.WorkspaceBytes = 0 // none without a workspace
	if !spec.NoWorkspace {
		sb.Limits.WorkspaceBytes, sb.unbounded = h.workspaceBound(spec.Limits.WorkspaceBytes)
		// A fork's child whose parent's workspace volume was copied as
		// its state was taken: a copy of that image, sharing its extents,
		// instead of its files restored one by one.
		ws := ""
		if fi, ok := h.forkImages.LoadAndDelete(id); ok && spec.restore != nil && fi.(forkImage).root == *spec.restore {
			var err error
			if ws, err = h.makeWorkspaceFrom(id, fi.(forkImage), sb.Limits.WorkspaceBytes); err != nil {
				h.Logger().Info("a fork's child restored from its snapshot's chunks: its workspace image was not shared", "sandbox", id, "err", err)
			}
		}
		if ws == "" {
			var err error
			if ws, err = h.makeWorkspace(sb.Limits.WorkspaceBytes); err != nil {
				return SandboxInfo{}, nil, err
			}
			sb.Workspace = ws
			if spec.restore != nil {
				if err := h.restoreWorkspace(id, ws, *spec.restore, spec.Tier); err != nil {
					return fail(err)
				}
			}
		}
		sb.Workspace = ws
		g.Storage = append(g.Storage, grant.Storage{Path: ws, Mode: grant.RW})
		sb.grantArgs = append(append([]string{}, spec.GrantArgs...), "fs:"+ws+":rw")
		if err := g.Normalize(); err != nil {
			return fail(err)
		}
	}
	sb.Grants = g
	if spec.restore == nil {
		if err := h.beginRecord(sb, spec.Grants); err != nil {
			return fail(fmt.Errorf("the sandbox's run record: %w", err))
		}
		if spec.Placement != nil {
			if err := h.placed(sb, spec.Placement); err != nil {
				return fail(fmt.Errorf("the sandbox's run record: its placement: %w", err))
			}
		}
		// Classified before anything of it starts: unseeded.
		if err := h.classifyUnseeded(sb); err != nil {
			return fail(fmt.Errorf("the sandbox's lifecycle record: %w", err))
		}
	} else if err := h.reincarnate(sb); err != nil {
		return fail(err)
	}
	if spec.Tier == tier.S1 || spec.Tier == tier.S5 {
		if err := h.openSession(ctx, sb, g, spec); err != nil {
			return fail(err)
		}
	}
	if err := h.writeLive(sb); err != nil {
		return fail(err)
	}
	if spec.ready != nil {
		if err := spec.ready(sb); err != nil {
			os.Remove(h.livePath(sb.ID))
			return fail(err)
		}
	}
	sb.touch(h.Now()) // its idle clock starts when it is handed over, not when its making began
	ss.mu.Lock()
	if ss.m == nil {
		ss.m = map[string]*Sandbox{}
	}
	ss.m[sb.ID] = sb
	ss.making--
	making = false
	ss.mu.Unlock()
	if spec.restore == nil {
		h.shareMade(sb.ID, sb.Tier, sb.Owner) // a resumption was taken from the cluster first
	}
	h.Logger().Info("sandbox created", "sandbox", sb.ID, "tier", sb.Tier, "workspace", sb.Workspace)
	return sb.info(), sb, nil
}

// sandbox is a live sandbox of owner's.
func (h *Manager) sandbox(id, owner string) (*Sandbox, error) {
	h.sandboxes.mu.Lock()
	sb := h.sandboxes.m[id]
	if sb == nil || sb.Owner != owner {
		h.sandboxes.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrNoSandbox, id)
	}
	h.sandboxes.mu.Unlock()
	sb.activity.Add(1) // a request: the idle fence retains what it touches
	sb.touch(h.Now())
	sb.settle() // a claimed one acts once its claim is written
	sb.mu.Lock()
	preserving := sb.preserving
	sb.mu.Unlock()
	if preserving != nil {
		<-preserving
		h.sandboxes.mu.Lock()
		still := h.sandboxes.m[id] == sb
		h.sandboxes.mu.Unlock()
		if !still {
			return nil, fmt.Errorf("%w: %q (parked while the request waited)", ErrNoSandbox, id)
		}
	}
	return sb, nil
}

// liveSandbox is sandbox(id, owner), or a ParkedError when it is the
// owner's and suspended: resume it first.
func (h *Manager) liveSandbox(id, owner string) (*Sandbox, error) {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		if p, perr := h.readParked(id); perr == nil && p.Owner == owner {
			return nil, &ParkedError{ID: id}
		}
		return nil, err
	}
	return sb, nil
}

// Sandboxes lists owner's live sandboxes, oldest first.
func (h *Manager) Sandboxes(owner string) []SandboxInfo {
	h.sandboxes.mu.Lock()
	var l []*Sandbox
	for _, sb := range h.sandboxes.m {
		if sb.Owner == owner {
			l = append(l, sb)
		}
	}
	h.sandboxes.mu.Unlock()
	out := make([]SandboxInfo, 0, len(l))
	for _, sb := range l {
		out = append(out, sb.info())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Sandbox says what a live sandbox of owner's is.
func (h *Manager) Sandbox(id, owner string) (SandboxInfo, error) {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		return SandboxInfo{}, err
	}
	return sb.info(), nil
}

// ExecRequest is one command in a live sandbox.
type ExecRequest struct {
	Args     []string
	Env      map[string]string
	Dir      string // default: the workspace
	Deadline time.Duration
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	// JCP presents the exec with a JCP chain: the gate decides it before
	// it starts and reserves its budget (docs/spec/jcp.md).
	JCP *gate.Presentation
}

// Exec runs a command in a live sandbox and seals it as a run of its own:
// its receipt from the exec's own cgroup, its attestation naming the
// sandbox in its notes. A cancelled ctx (the caller went away) ends the
// exec like an interrupt and seals it.
func (h *Manager) Exec(ctx context.Context, id, owner string, x ExecRequest) (*host.Run, error) {
	sb, err := h.liveSandbox(id, owner)
	if err != nil {
		return nil, err
	}
	if err := sameGrants(sb); err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, e := range []map[string]string{sb.imageEnv, sb.Env, x.Env} {
		for k, v := range e {
			env[k] = v
		}
	}
	cwd := x.Dir
	if cwd == "" {
		cwd = sb.Workspace
	}
	if cwd == "" {
		cwd = "/tmp"
	}
	req, err := host.Command(host.CommandLine{Args: x.Args, Env: env, Grants: sb.Grants, Cwd: cwd, RootDir: sb.rootDir, Read: h.Reader(ctx, owner, "exec"), Look: h.Looker(ctx, owner, "exec")})
	if err != nil {
		return nil, err
	}
	req.Root, req.Owner = sb.Root, owner
	if sb.Tier == tier.S1 && req.Kind != tier.Native {
		return nil, &host.InvalidError{Err: fmt.Errorf("%s is an S1 sandbox: it runs native programs, and %s is a WebAssembly module (make an S2 sandbox for modules)", sb.ID, x.Args[0])}
	}
	if sb.Tier == tier.S5 && req.Kind != tier.Native {
		return nil, &host.InvalidError{Err: fmt.Errorf("%s is an S5 sandbox: it runs native programs in its VM, and %s is a WebAssembly module (make an S2 sandbox for modules)", sb.ID, x.Args[0])}
	}
	if sb.Tier == tier.S2 && req.Kind != tier.Wasm {
		return nil, &host.InvalidError{Err: fmt.Errorf("%s is an S2 sandbox: it runs WebAssembly modules, and %s is not one", sb.ID, x.Args[0])}
	}
	if req.Kind == tier.Native && x.Dir == "" && sb.Workspace != "" {
		req.Dir = sb.Workspace
	}
	t := sb.Tier
	req.Tier = &t // its kind's tier: never an escalation
	req.Limits = sb.Limits
	req.Deadline = x.Deadline
	req.Stdin, req.Stdout, req.Stderr = x.Stdin, x.Stdout, x.Stderr
	req.JCP = x.JCP
	return h.execIn(ctx, sb, req, 0, nil)
}

// execIn runs req in sb as its exec number n (0: the next), or
// continues a parked one (cont), and seals it as a segment of sb's
// record. An S2 exec can be parked while it runs (a suspension): it is
// then kept in sb.parked, not sealed, and its caller is told.
func (h *Manager) execIn(ctx context.Context, sb *Sandbox, req host.Request, n int, cont *host.Continuation) (*host.Run, error) {
	id := sb.ID
	sb.mu.Lock()
	if sb.closed {
		sb.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is being removed", ErrNoSandbox, id)
	}
	num := n
	if num == 0 {
		num = sb.seq + 1
	}
	// Its slot in the sandbox's operation window, before any effect: a
	// seventeenth exec at once is refused here.
	op := lifecycle.Op{Gen: sb.window.Gen, Actor: "exec", Ordinal: uint64(num), Kind: "exec"}
	if err := sb.window.Reserve(op); err != nil {
		sb.mu.Unlock()
		var we *lifecycle.WindowError
		if errors.As(err, &we) && we.Limit() {
			return nil, &host.LimitError{What: fmt.Sprintf("sandbox %s runs %d execs at once, its most: wait for one to end", id, lifecycle.Slots)}
		}
		return nil, err
	}
	sb.running++
	if n == 0 {
		sb.seq++
		n = sb.seq
	}
	sb.seq = max(sb.seq, n) // a continued exec keeps its number; the next is after it
	x := &inflight{}
	sb.mu.Unlock()
	outcome := "failed"
	defer func() {
		sb.mu.Lock()
		sb.running--
		delete(sb.inflight, x)
		// The caller has the outcome as this returns: settled and read.
		sb.window.Settle(op.Gen, op.Actor, op.Ordinal, outcome)
		sb.window.Ack(op.Gen, op.Actor, op.Ordinal)
		sb.mu.Unlock()
	}()
	if cont == nil {
		req.Notes = []string{fmt.Sprintf("an exec (#%d) in live sandbox %s, %s", n, sb.ID, sb.Tier)}
		if len(sb.Listen) > 0 {
			if sb.Tier == tier.S5 {
				req.Notes = append(req.Notes, fmt.Sprintf("the sandbox's processes may listen on TCP ports %v in its VM, forwarded from the loopback of the VM monitor's own network namespace", sb.Listen))
			} else {
				req.Notes = append(req.Notes, fmt.Sprintf("the sandbox's processes may listen on TCP ports %v inside its own network namespace (loopback only)", sb.Listen))
			}
		}
		if sb.record != nil {
			st := sb.record.State()
			req.Record = &attest.RecordCite{Genesis: record.Genesis(st.Header.Unit, st.Header.Grants), Head: st.Head}
		}
	}
	first := n == 1
	if sb.Tier == tier.S2 {
		// It can be parked; it can be stopped if it does not park.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		sb.mu.Lock()
		if sb.inflight == nil {
			sb.inflight = map[*inflight]bool{}
		}
		x.stop = stop
		sb.inflight[x] = true
		sb.mu.Unlock()
		req.OnStart = func(c executor.Control) {
			sb.mu.Lock()
			x.park = c.Park
			if x.wanted && c.Park != nil {
				c.Park()
			}
			sb.mu.Unlock()
		}
	}
	p, err := h.Plan(ctx, req)
	if err != nil {
		return nil, err
	}
	p.Continue = cont
	if cont != nil && p.UnitAddr() != cont.Unit {
		return nil, fmt.Errorf("its unit here would be %s; parked, it was %s: this host's S2 executor does not run it as the parked one ran", p.UnitAddr(), cont.Unit)
	}
	run := p.Executor().Run
	if sess := sb.sess; sess != nil {
		p.Live = true
		p.CgroupControllers = []string{"cpuacct"}
		if sb.Tier == tier.S1 {
			// What an exec left in the background runs on in its group.
			p.LeftoverGroup = func(g *cgroup.Group) {
				sb.mu.Lock()
				sb.leftover = append(sb.leftover, g)
				sb.mu.Unlock()
			}
		}
		run = func(ctx context.Context, j *executor.Job) (*executor.Result, error) {
			res, err := sess.Run(ctx, j)
			if res != nil && first {
				res.Notes = append(sess.Notes(), res.Notes...)
			}
			return res, err
		}
	}
	r, err := h.Execute(ctx, p, noteWorkspace(sb, run))
	var pr *host.ParkedRun
	if errors.As(err, &pr) {
		ws := ""
		if sb.Workspace != "" {
			ws = sb.Workspace
			if cont != nil && cont.Workspace != "" {
				ws = cont.Workspace // the unit's name for it
			}
		}
		pe, kerr := h.keepParked(n, pr, ws)
		if kerr != nil {
			return nil, fmt.Errorf("exec #%d parked, but what it is could not be kept: %w", n, kerr)
		}
		sb.mu.Lock()
		sb.parked = append(sb.parked, pe)
		sb.mu.Unlock()
		outcome = "parked"
		return nil, &ExecParkedError{ID: sb.ID, N: n, Boundary: pr.Parked.Boundary}
	}
	if err != nil {
		return nil, err
	}
	outcome = "sealed"
	sb.mu.Lock()
	sb.execs++
	sb.mu.Unlock()
	sb.touch(h.Now()) // its idle clock starts when the exec ends
	if sb.record != nil {
		if _, err := sb.record.Append(record.Segment{Kind: record.Executed, Attestation: r.ID}); err != nil {
			return nil, fmt.Errorf("the exec was sealed as run %s, but its sandbox's record did not take it: %w", r.ID, err)
		}
		h.indexRecord(sb.ID, sb.record)
	}
	return r, nil
}

// Remove ends a live sandbox: everything running in it ends (an exec in
// flight is sealed as killed), its writes to quota'd grants are committed,
// its workspace is removed.
func (h *Manager) Remove(id, owner string) error {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		if p, perr := h.readParked(id); perr == nil && p.Owner == owner {
			return h.CloseRecord(id, owner, "removed while suspended")
		}
		return err
	}
	h.sandboxes.mu.Lock()
	delete(h.sandboxes.m, id)
	h.sandboxes.mu.Unlock()
	defer h.shareClosed(id)
	return h.closeSandbox(sb, "removed")
}

// closeSandbox tears a sandbox down and closes its record: its durable
// run ends.
func (h *Manager) closeSandbox(sb *Sandbox, why string) error {
	return h.closeSandboxWith(sb, record.Segment{Kind: record.Closed, Reason: why})
}

// closeSandboxWith is closeSandbox with the Closed segment given.
func (h *Manager) closeSandboxWith(sb *Sandbox, seg record.Segment) error {
	sb.settle()
	h.markClosing(sb.ID)
	err := h.teardown(sb)
	if sb.record != nil {
		if _, rerr := sb.record.Append(seg); rerr != nil {
			err = errors.Join(err, fmt.Errorf("close sandbox %s's record: %w", sb.ID, rerr))
		}
		h.indexRecord(sb.ID, sb.record)
		sb.record.Close()
		os.Remove(h.livePath(sb.ID))
	}
	return err
}

// teardown ends everything a sandbox runs and removes its workspace,
// once a fork taking its state has taken it.
func (h *Manager) teardown(sb *Sandbox) error {
	sb.mu.Lock()
	f := sb.forking
	sb.mu.Unlock()
	if f != nil {
		<-f
	}
	sb.mu.Lock()
	sb.closed = true
	sb.mu.Unlock()
	var errs []error
	if sb.sess != nil {
		if err := sb.sess.Close(); err != nil {
			errs = append(errs, fmt.Errorf("end sandbox %s: %w", sb.ID, err))
		}
	}
	sb.mu.Lock()
	left := sb.leftover
	sb.leftover = nil
	sb.mu.Unlock()
	for _, g := range left {
		g.Kill(2 * time.Second)
		g.Remove()
	}
	if sb.cg != nil {
		sb.cg.Kill(2 * time.Second)
		if err := sb.cg.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if sb.Workspace != "" {
		if err := removeWorkspace(sb.Workspace); err != nil {
			errs = append(errs, err)
		}
	}
	h.Logger().Info("sandbox removed", "sandbox", sb.ID)
	return errors.Join(errs...)
}

// retainAtShutdown ends sb's processes (their host is ending) and keeps
// everything else as it is: the workspace, the record without a new
// segment, the live file naming both. The next host's recovery parks it.
func (h *Manager) retainAtShutdown(sb *Sandbox, why error) error {
	ws := sb.Workspace
	sb.Workspace = "" // not removed by the teardown
	err := h.teardown(sb)
	sb.Workspace = ws
	if sb.record != nil {
		sb.record.Close()
	}
	h.Logger().Warn("sandbox retained at shutdown: its workspace and record are kept for the next host", "sandbox", sb.ID, "why", why)
	return err
}

// closeSandboxes ends every live sandbox (Close).
func (h *Manager) closeSandboxes() error {
	h.sandboxes.mu.Lock()
	all := h.sandboxes.m
	h.sandboxes.m = nil
	h.sandboxes.mu.Unlock()
	var errs []error
	for _, sb := range all {
		// A host that stops suspends its sandboxes through the
		// preservation fence: their work is kept and a later host resumes
		// them. One the fence retains (or that cannot be suspended: an
		// exec still running) is never closed: its processes end with
		// their host, and its workspace, record and live file stay for
		// the next host's recovery to park.
		if sb.record != nil {
			err := h.fencedSuspend(sb, sb.activity.Load())
			if err == nil {
				continue
			}
			errs = append(errs, h.retainAtShutdown(sb, err))
			continue
		}
		errs = append(errs, h.closeSandbox(sb, "its host shut down"))
	}
	return errors.Join(errs...)
}

// sessioner is the host's executor of native programs at tier t that
// opens live sessions.
func (h *Manager) sessioner(t tier.Tier) (executor.Sessioner, error) {
	for _, e := range h.Executors {
		if x, ok := e.(executor.Sessioner); ok && x.Tier() == t && x.Kind() == tier.Native {
			return x, nil
		}
	}
	return nil, fmt.Errorf("%w: no %s executor of live sandboxes on this host", tier.ErrUnavailable, t)
}

// openSession opens a sandbox's live session (S1's init, S5's VM), or
// resumes it from its memory image. An S5 sandbox's execs need the
// kernel boundary: its grants say so.
func (h *Manager) openSession(ctx context.Context, sb *Sandbox, g grant.Set, spec SandboxSpec) error {
	x, err := h.sessioner(spec.Tier)
	if err != nil {
		return err
	}
	if spec.Tier == tier.S5 {
		g.Kernel = true
		sb.Grants = g
	} else if _, err := h.RootDir(ctx, x, sb.Root); err != nil {
		return err
	}
	h.sandboxGroup(sb)
	if sb.grantIDs, err = grantIDs(g); err != nil {
		return err
	}
	ss := executor.SessionSpec{Grants: g, Limits: spec.Limits, Cgroup: sb.cg, Listen: spec.Listen, RootDir: sb.rootDir}
	if spec.memory == nil {
		sb.sess, err = x.OpenSession(ctx, ss)
		return err
	}
	r, ok := x.(executor.Resumer)
	if !ok {
		return fmt.Errorf("%w: the %s executor resumes no memory image", tier.ErrUnavailable, x.Name())
	}
	path := h.Store.Path("blobs", spec.memory.Hex())
	if got, err := addr.OfFile(path); err != nil || got != *spec.memory {
		return fmt.Errorf("the memory image %s: not in the blob store as its address says (%v)", spec.memory, err)
	}
	sb.sess, err = r.ResumeSession(ctx, ss, path)
	return err
}

// sandboxGroup gives a sandbox its own cgroup, where the host has
// cgroups; without one it runs, unaccounted apart, and a warning says so.
func (h *Manager) sandboxGroup(sb *Sandbox) {
	if h.Cgroups == nil {
		return
	}
	cg, err := h.Cgroups.Create(h.Store.TempName("partial"), "cpuacct", "cpu", "memory", "pids", "freezer")
	if err != nil {
		h.Logger().Warn("no cgroup for the sandbox", "err", err)
		return
	}
	sb.cg = cg
}
