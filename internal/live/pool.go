package live

import (
	"github.com/opensubstrate/sandbox/internal/host"
	images "github.com/opensubstrate/sandbox/internal/image"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// PoolSpec is a warm pool: sandboxes made ahead from one spec, kept
// ready, and handed over by Claim.
type PoolSpec struct {
	Name string
	// Sandbox is what each is made from (its Owner is the claimer's).
	Sandbox SandboxSpec
	// Size is how many it keeps ready.
	Size int
	// MaxIdle: with no claim for this long, the pool evicts what it
	// keeps and makes no more until the next claim (0: never).
	MaxIdle time.Duration
	// MaxAge: a ready sandbox older than this is evicted and replaced
	// (0: never).
	MaxAge time.Duration
}

// PoolStats say what a pool did.
type PoolStats struct {
	Name      string `json:"name"`
	Size      int    `json:"size"`
	Ready     int    `json:"ready"`
	Draining  bool   `json:"draining"` // idle past MaxIdle: keeping none ready
	Made      uint64 `json:"made"`
	Claims    uint64 `json:"claims"`
	Misses    uint64 `json:"misses"` // claims with none ready: made on demand
	Evictions uint64 `json:"evictions"`
	Failures  uint64 `json:"failures"` // sandboxes it could not make
	// ClaimedUJ is the idle energy handed to claiming runs' records;
	// EvictedUJ what evicted sandboxes spent, recorded on their close.
	ClaimedUJ uint64 `json:"claimed_uj"`
	EvictedUJ uint64 `json:"evicted_uj"`
}

// RefillDelay is how long after a claim a pool starts making its
// replacement.
var RefillDelay = 100 * time.Millisecond

// PoolProvenance is how a pooled sandbox's idle energy is had.
const PoolProvenance = "Estimator pool-idle/1"

func poolOwner(name string) string { return host.PoolOwnerPrefix + name }

type pooled struct {
	sb   *Sandbox
	made time.Time
}

type pool struct {
	spec  PoolSpec
	mu    sync.Mutex
	ready []pooled
	last  time.Time // the last claim, or when the pool began
	stats PoolStats
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

type pools struct {
	mu sync.Mutex
	m  map[string]*pool
}

// ErrNoPool is a claim from a pool this host does not keep.
var ErrNoPool = errors.New("no such pool")

// StartPool begins keeping spec.Size sandboxes ready. Pools end with the
// host (Close), their ready sandboxes evicted.
func (h *Manager) StartPool(spec PoolSpec) error {
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00 \t\n") {
		return &host.InvalidError{Err: fmt.Errorf("pool name %q: want a word without spaces or slashes", spec.Name)}
	}
	if spec.Size < 1 || spec.Size > MaxSandboxes {
		return &host.InvalidError{Err: fmt.Errorf("pool %s: size %d: want 1 to %d", spec.Name, spec.Size, MaxSandboxes)}
	}
	if spec.Sandbox.Tier == 0 {
		spec.Sandbox.Tier = tier.S1
	}
	h.pools.mu.Lock()
	defer h.pools.mu.Unlock()
	if h.pools.m == nil {
		h.pools.m = map[string]*pool{}
	}
	if _, ok := h.pools.m[spec.Name]; ok {
		return &host.InvalidError{Err: fmt.Errorf("pool %s: given twice", spec.Name)}
	}
	p := &pool{spec: spec, last: h.Now(), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.stats.Name, p.stats.Size = spec.Name, spec.Size
	h.pools.m[spec.Name] = p
	go h.keepPool(p)
	return nil
}

// Pools are the pools' statistics, by name.
func (h *Manager) Pools() []PoolStats {
	h.pools.mu.Lock()
	var out []PoolStats
	for _, p := range h.pools.m {
		p.mu.Lock()
		s := p.stats
		s.Ready = len(p.ready)
		p.mu.Unlock()
		out = append(out, s)
	}
	h.pools.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WaitPool waits until pool name has n sandboxes ready (a test's, or a
// benchmark's, start line).
func (h *Manager) WaitPool(ctx context.Context, name string, n int) error {
	for {
		for _, s := range h.Pools() {
			if s.Name == name && s.Ready >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Claim hands owner a ready sandbox of pool name: its record's first
// segment is Claimed, with the energy spent keeping it ready (its
// cgroup's CPU time since it was made, priced by the Estimator). With
// none ready, one is made now (a miss), recorded as made for owner.
func (h *Manager) Claim(ctx context.Context, name, owner string) (SandboxInfo, error) {
	h.pools.mu.Lock()
	p := h.pools.m[name]
	h.pools.mu.Unlock()
	if p == nil {
		return SandboxInfo{}, fmt.Errorf("%w %q: %w", ErrNoPool, name, fs.ErrNotExist)
	}
	// The pool's grants are the operator's; the claimer must be one who
	// may be given them.
	ask := authority.Ask{Action: "claim", Grants: p.spec.Sandbox.Grants, Tier: p.spec.Sandbox.Tier}
	if ask.Tier == 0 {
		ask.Tier = tier.S1
	}
	if ref := p.spec.Sandbox.imageRef(); ref != "" {
		if img, err := h.Images.Resolve(ref); err == nil {
			ask.Image = img.Root
		}
	}
	if err := h.Authorize(ctx, owner, ask); err != nil {
		return SandboxInfo{}, poolRefusal(name, err)
	}
	var got *pooled
	var dead []pooled
	p.mu.Lock()
	p.last = h.Now()
	for n := len(p.ready); n > 0 && got == nil; n = len(p.ready) {
		r := p.ready[n-1] // the freshest
		p.ready = p.ready[:n-1]
		if r.sb.sess != nil && !r.sb.sess.Alive() {
			dead = append(dead, r) // its init ended while it waited
			continue
		}
		got = &r
	}
	if got == nil {
		p.stats.Misses++
	}
	p.mu.Unlock()
	for _, r := range dead {
		h.evict(p, r, fmt.Sprintf("evicted from pool %s: its init ended while it was ready", p.spec.Name))
	}
	// The refill waits a little: on a small machine, making a sandbox
	// beside the claimer's first command would slow that command.
	time.AfterFunc(RefillDelay, p.kick)
	if got == nil {
		spec := p.spec.Sandbox
		spec.Owner = owner
		info, err := h.Create(ctx, spec)
		if nf := (*images.NotFoundError)(nil); errors.As(err, &nf) && nf.Among {
			// Not found among the claimer's images: told as a refusal
			// of the pool's image, which it does not name.
			err = &images.NotFoundError{Ref: "(the image of pool " + name + ")", Among: true}
		}
		return info, poolRefusal(name, err)
	}
	// The sandbox handed out runs in the root it was made in, which is
	// not the one the pool's image names now where that image was
	// re-tagged or removed since (or its name resolves to nothing): the
	// claimer must be one who may use the root it gets.
	if got.sb.Root != ask.Image {
		ask.Image = got.sb.Root
		if err := h.Authorize(ctx, owner, ask); err != nil {
			p.mu.Lock()
			p.ready = append(p.ready, *got)
			p.mu.Unlock()
			return SandboxInfo{}, poolRefusal(name, err)
		}
	}
	sb := got.sb
	uj, prov := h.readyEnergy(sb, got.made)
	if _, err := sb.record.Append(record.Segment{Kind: record.Claimed, Pool: name, IdleUJ: uj, IdleProvenance: prov}); err != nil {
		h.evict(p, *got, "its claim could not be recorded: "+err.Error())
		return SandboxInfo{}, fmt.Errorf("claim from pool %s: %w", name, err)
	}
	// The claim is durable in the record: the claimer is answered now.
	// The live file (its new owner, which a restarted service reads)
	// and the index row follow, and every call that acts on the
	// sandbox (an exec, a suspension, a removal) waits for them: nothing
	// happens in it before its owner is on disk. A service killed in
	// between closes it as never claimed, with nothing run in it.
	settled := make(chan struct{})
	sb.mu.Lock()
	sb.settled = settled
	sb.mu.Unlock()
	h.sandboxes.mu.Lock()
	sb.Owner = owner
	sb.touch(h.Now()) // its idle clock starts at its claim
	h.sandboxes.mu.Unlock()
	go func() {
		defer close(settled)
		crash.At(crash.ClaimAppended)
		live := make(chan error, 1)
		go func() { live <- h.writeLive(sb) }()
		h.indexRecord(sb.ID, sb.record)
		h.shareClaimed(sb.ID, owner)
		if err := <-live; err != nil {
			h.Logger().Warn("a claimed sandbox's live file", "sandbox", sb.ID, "err", err)
		}
	}()
	p.mu.Lock()
	p.stats.Claims++
	p.stats.ClaimedUJ += uj
	p.mu.Unlock()
	h.poolsChanged()
	h.Logger().Info("sandbox claimed", "pool", name, "sandbox", sb.ID, "idle_uj", uj)
	go h.claimEvent(name)
	return sb.info(), nil
}

// claimEvent mints under every standing JCP grant that names a claim
// from the pool (pool-claim:NAME), after the claimer is answered.
func (h *Manager) claimEvent(pool string) {
	if _, _, err := h.JCPEvent("pool-claim:" + pool); err != nil {
		h.Logger().Warn("JCP pool-claim event", "pool", pool, "err", err)
	}
}

// readyEnergy is what sb spent while it was kept ready: its cgroup's CPU
// time since it was made (its init's start, then its wait), priced by
// the Estimator's TDP. Without a cgroup there is no figure: zero, and
// the provenance says why.
func (h *Manager) readyEnergy(sb *Sandbox, made time.Time) (uint64, string) {
	ready := h.Now().Sub(made).Round(time.Millisecond)
	if sb.cg == nil {
		return 0, fmt.Sprintf("%s (no cgroup of its own, sandbox is not root: its CPU time is unknown and counted as 0; ready for %s)", PoolProvenance, ready)
	}
	cpu, src, err := sb.cg.CPU()
	if err != nil {
		return 0, fmt.Sprintf("%s (its cgroup's CPU time could not be read, %v: counted as 0; ready for %s)", PoolProvenance, err, ready)
	}
	uj, basis := h.MeterOf().EstimateCPU(cpu)
	return uj, fmt.Sprintf("%s (%s, from %s, since it was made; ready for %s)", PoolProvenance, basis, src, ready)
}

func (p *pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// keepPool keeps p's sandboxes ready until the pool stops.
func (h *Manager) keepPool(p *pool) {
	defer close(p.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		now := h.Now()
		type eviction struct {
			r   pooled
			why string
		}
		var old []eviction
		p.mu.Lock()
		draining := p.spec.MaxIdle > 0 && now.Sub(p.last) > p.spec.MaxIdle
		p.stats.Draining = draining
		keep := p.ready[:0]
		for _, r := range p.ready {
			switch {
			case draining:
				old = append(old, eviction{r, fmt.Sprintf("evicted from pool %s: no claim for %s", p.spec.Name, p.spec.MaxIdle)})
			case p.spec.MaxAge > 0 && now.Sub(r.made) > p.spec.MaxAge:
				old = append(old, eviction{r, fmt.Sprintf("evicted from pool %s: older than its maximum age %s", p.spec.Name, p.spec.MaxAge)})
			case r.sb.sess != nil && !r.sb.sess.Alive():
				old = append(old, eviction{r, fmt.Sprintf("evicted from pool %s: its init ended while it was ready", p.spec.Name)})
			default:
				keep = append(keep, r)
			}
		}
		p.ready = keep
		want := p.spec.Size - len(p.ready)
		p.mu.Unlock()
		for _, e := range old {
			h.evict(p, e.r, e.why)
		}
		for i := 0; i < want && !draining; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			spec := p.spec.Sandbox
			spec.Owner = poolOwner(p.spec.Name)
			_, sb, err := h.create(context.Background(), spec)
			p.mu.Lock()
			if err != nil {
				p.stats.Failures++
				p.mu.Unlock()
				h.Logger().Warn("a pool could not make a sandbox", "pool", p.spec.Name, "err", err)
				break
			}
			p.stats.Made++
			p.ready = append(p.ready, pooled{sb: sb, made: h.Now()})
			p.mu.Unlock()
			h.poolsChanged()
		}
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// evict closes a ready sandbox unclaimed, recording what it spent.
func (h *Manager) evict(p *pool, r pooled, why string) {
	uj, prov := h.readyEnergy(r.sb, r.made)
	h.sandboxes.mu.Lock()
	delete(h.sandboxes.m, r.sb.ID)
	h.sandboxes.mu.Unlock()
	seg := record.Segment{Kind: record.Closed, Reason: why}
	if uj > 0 {
		seg.IdleUJ, seg.IdleProvenance = uj, prov
	}
	if err := h.closeSandboxWith(r.sb, seg); err != nil {
		h.Logger().Warn("evicting a pooled sandbox", "sandbox", r.sb.ID, "err", err)
	}
	p.mu.Lock()
	p.stats.Evictions++
	p.stats.EvictedUJ += uj
	p.mu.Unlock()
	h.poolsChanged()
	h.Logger().Info("sandbox evicted", "pool", p.spec.Name, "sandbox", r.sb.ID, "idle_uj", uj, "why", why)
}

// stopPools stops every pool and evicts what each kept ready.
func (h *Manager) stopPools() {
	h.pools.mu.Lock()
	all := h.pools.m
	h.pools.m = nil
	h.pools.mu.Unlock()
	for _, p := range all {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		ready := p.ready
		p.ready = nil
		p.mu.Unlock()
		for _, r := range ready {
			h.evict(p, r, fmt.Sprintf("evicted from pool %s: its host shut down", p.spec.Name))
		}
	}
}

// poolRefusal is the claimer's refusal of pool name: it names the rule
// that refused, but not what of the pool's it refused (its image's root
// address, the host paths of its grants), which is the operator's to
// know (the decision log has it).
func poolRefusal(name string, err error) error {
	var de *authority.DeniedError
	if !errors.As(err, &de) {
		return err
	}
	told := *de
	if de.Rule == "images" {
		told.Grant = "image:(pool " + name + ")"
		told.Why = "the image of pool " + name + " is not among its images"
	} else {
		told.Grant = "(a grant of pool " + name + ")"
		told.Why = "pool " + name + "'s sandboxes are given what this rule does not allow it"
	}
	return &told
}
