package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// Shared is where a cluster keeps suspended sandboxes for any of its
// hosts to resume (docs/cluster.md). A manager with one publishes each
// suspension there and, before resuming, takes the sandbox from it: one
// suspended on another host is fetched and imported first (its record
// verified from genesis under the cluster's hosts' keys), and one held
// live elsewhere is refused.
type Shared interface {
	// Publish keeps the bundle of sandbox id, owner's, suspended here
	// with its record at head.
	Publish(ctx context.Context, id, owner string, head addr.Addr, bundle []byte) error
	// Take makes this host the holder of suspended sandbox id. It
	// returns the bundle to import where another host suspended it
	// last (nil where this host did, or where the cluster keeps nothing
	// of it: resume what is here), and a release that gives it back if
	// the resumption fails.
	// owner is who resumes it: the host's own user any, a principal
	// only its own.
	Take(ctx context.Context, id, owner string) (bundle []byte, release func(), err error)
	// Trust is the cluster's hosts' keys: a travelling record's seals.
	Trust(ctx context.Context) (key.Trust, error)
	// Made says sandbox id (of tier t, owner's) was made here and is
	// held here: the other hosts forward requests for it here.
	Made(ctx context.Context, id string, t tier.Tier, owner string) error
	// Closed says sandbox id, held here, was closed or removed: no host
	// resumes it from a suspension published before.
	Closed(ctx context.Context, id string) error
	// Claimed says sandbox id, made here for a warm pool, is now owner's.
	Claimed(ctx context.Context, id, owner string) error
}

// clusterHooks are a manager's cluster: its keeping of suspended
// sandboxes and its work queue (nil: fleets' items run here).
type clusterHooks struct {
	shared Shared
	queue  Queue
}

// Join makes the manager a host of a cluster: s keeps its suspended
// sandboxes, q (nil: none) runs its fleets' items on any host. Safe
// while the manager's goroutines run.
func (h *Manager) Join(s Shared, q Queue) {
	h.cluster.Store(&clusterHooks{shared: s, queue: q})
}

// Shared is the cluster's keeping of suspended sandboxes, nil outside
// a cluster.
func (h *Manager) Shared() Shared {
	if c := h.cluster.Load(); c != nil {
		return c.shared
	}
	return nil
}

// queue is the cluster's work queue, nil where there is none.
func (h *Manager) queue() Queue {
	if c := h.cluster.Load(); c != nil {
		return c.queue
	}
	return nil
}

// PoolReporter is a Shared that tells the cluster how many sandboxes
// this host's warm pools hold ready, for claims through other hosts to
// go where one is: PoolsChanged says the counts changed (a claim, a
// sandbox made or evicted); it must not block.
type PoolReporter interface {
	PoolsChanged()
}

// poolsChanged tells the cluster, where it wants to know, that a pool's
// ready count changed.
func (h *Manager) poolsChanged() {
	if pr, ok := h.Shared().(PoolReporter); ok {
		pr.PoolsChanged()
	}
}

// BlobSharer is a Shared whose blob store keeps a suspended sandbox's
// objects (its workspace's chunks and trees, memory images, its unit and
// grants) one by one, by address: a suspension stores there only those
// the store lacks and publishes a bundle without them (its record, seals
// and runs), and a host resuming it fetches only those it lacks itself,
// each checked against its address (docs/cluster.md).
type BlobSharer interface {
	Blobs() store.Blobs
}

// sharedBlobs is the cluster's blob store, where it keeps objects one
// by one; nil where a bundle travels whole.
func (h *Manager) sharedBlobs() store.Blobs {
	if bs, ok := h.Shared().(BlobSharer); ok {
		return bs.Blobs()
	}
	return nil
}

// shareMade tells the cluster of a sandbox made here; a failure leaves
// it reachable through this host only, said in the log.
func (h *Manager) shareMade(id string, t tier.Tier, owner string) {
	shared := h.Shared()
	if shared == nil {
		return
	}
	if err := shared.Made(context.Background(), id, t, owner); err != nil {
		h.Logger().Warn("a sandbox made here is not known to the cluster: other hosts will not forward to it", "sandbox", id, "err", err)
	}
}

// ShareLive tells the cluster of every sandbox live here: those made
// before the manager had its Shared (a warm pool fills before its host
// joins) would otherwise be unknown to the other hosts, which could not
// forward to them (a claim through another host, then an exec there).
func (h *Manager) ShareLive() {
	h.sandboxes.mu.Lock()
	sbs := make([]*Sandbox, 0, len(h.sandboxes.m))
	for _, sb := range h.sandboxes.m {
		sbs = append(sbs, sb)
	}
	h.sandboxes.mu.Unlock()
	for _, sb := range sbs {
		h.sandboxes.mu.Lock()
		owner := sb.Owner
		h.sandboxes.mu.Unlock()
		h.shareMade(sb.ID, sb.Tier, owner)
	}
}

// shareClaimed tells the cluster a pool's sandbox held here was claimed
// by owner; a failure leaves it the pool's there (other hosts do not
// list it as owner's), said in the log.
func (h *Manager) shareClaimed(id, owner string) {
	shared := h.Shared()
	if shared == nil {
		return
	}
	if err := shared.Claimed(context.Background(), id, owner); err != nil {
		h.Logger().Warn("the cluster was not told a pool's sandbox was claimed: other hosts do not list it as its claimer's", "sandbox", id, "err", err)
	}
}

// shareClosed tells the cluster a sandbox held here was closed.
func (h *Manager) shareClosed(id string) {
	shared := h.Shared()
	if shared == nil {
		return
	}
	if err := shared.Closed(context.Background(), id); err != nil {
		h.Logger().Warn("the cluster was not told a sandbox closed: a suspension of it it keeps could still be resumed", "sandbox", id, "err", err)
	}
}

// publish keeps a suspended sandbox's bundle in the shared store; a
// failure leaves it suspended here only, said in the log.
func (h *Manager) publish(id, owner string, head addr.Addr) {
	shared := h.Shared()
	if shared == nil {
		return
	}
	var b bytes.Buffer
	ctx := context.Background()
	holder, _ := shared.(BlobHolder)
	var err error
	for try := 1; ; try++ {
		var epoch int64
		if holder != nil {
			if epoch, err = holder.HoldBlobs(ctx); err != nil {
				break
			}
		}
		b.Reset()
		var named []addr.Addr
		if named, err = h.export(id, &b, h.sharedBlobs(), epoch); err != nil {
			break
		}
		if holder != nil {
			err = holder.PublishHeld(ctx, epoch, id, owner, head, b.Bytes(), named)
		} else {
			err = shared.Publish(ctx, id, owner, head, b.Bytes())
		}
		if !errors.Is(err, ErrCollected) || try == HeldTries {
			break
		}
		h.Logger().Info("the cluster's blob store was collected while a suspension was stored there: storing it again", "sandbox", id, "try", try)
	}
	if err != nil {
		h.Logger().Warn("a suspended sandbox is kept here only: the cluster was not told", "sandbox", id, "err", err)
		return
	}
	h.Logger().Info("sandbox published to the cluster", "sandbox", id, "head", head, "bundle_bytes", b.Len())
}

// take takes sandbox id from the shared store before it is resumed
// here, importing it where another host suspended it last; the release
// it returns gives it back (nil: nothing to give back).
func (h *Manager) take(ctx context.Context, id, owner string) (func(), error) {
	shared := h.Shared()
	if shared == nil {
		return nil, nil
	}
	b, release, err := shared.Take(ctx, id, owner)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return release, nil
	}
	var epoch int64
	if holder, ok := shared.(BlobHolder); ok {
		if epoch, err = holder.BlobEpoch(ctx); err != nil {
			release()
			return nil, fmt.Errorf("resume %s from the cluster: %w", id, err)
		}
	}
	trust, err := shared.Trust(ctx)
	var im Imported
	if err == nil {
		trust.Add(h.Key.Public())
		im, err = h.importBundle(ctx, bytes.NewReader(b), owner, trust, h.sharedBlobs(), epoch)
		if err == nil && im.Phase != record.Parked {
			err = fmt.Errorf("its bundle's record is %s, not parked", im.Phase)
		}
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("resume %s from the cluster: %w", id, err)
	}
	h.Logger().Info("sandbox brought from the cluster", "sandbox", id, "bundle_bytes", len(b), "objects_placed", im.Blobs, "objects_fetched", im.Fetched)
	return release, nil
}

// LiveIDs are the ids of the live sandboxes here, whoever's.
func (h *Manager) LiveIDs() []string {
	h.sandboxes.mu.Lock()
	defer h.sandboxes.mu.Unlock()
	out := make([]string, 0, len(h.sandboxes.m))
	for id := range h.sandboxes.m {
		out = append(out, id)
	}
	return out
}

// Live says sandbox id is live here.
func (h *Manager) Live(id string) bool {
	h.sandboxes.mu.Lock()
	defer h.sandboxes.mu.Unlock()
	_, ok := h.sandboxes.m[id]
	return ok
}

// Forfeit ends live sandbox id here without recording anything more of
// it: the cluster gave it to another host while this one was thought
// dead, and it continues there from its last suspension. Its record
// here is left as it was (stale); what it did here since that
// suspension is lost, and why is logged.
func (h *Manager) Forfeit(id, why string) error {
	h.sandboxes.mu.Lock()
	sb, ok := h.sandboxes.m[id]
	delete(h.sandboxes.m, id)
	h.sandboxes.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSandbox, id)
	}
	sb.settle()
	h.markClosing(id)
	err := h.teardown(sb)
	if sb.record != nil {
		sb.record.Close()
		os.Remove(h.livePath(id))
	}
	h.Logger().Warn("sandbox forfeited: another host holds it now; what it did here since its last suspension is lost", "sandbox", id, "why", why)
	return err
}

// BlobHolder is a BlobSharer whose store a collector sweeps
// (docs/cluster.md, "Collecting the blob store"): a suspension holds it
// from its first look at the store until the cluster names what it
// stored, and is refused where a collection began meanwhile.
type BlobHolder interface {
	BlobSharer
	// HoldBlobs waits while a collection of the store runs, and returns
	// the store's epoch: what this host saw there under an earlier one
	// may have been collected since.
	HoldBlobs(ctx context.Context) (int64, error)
	// BlobEpoch is the store's epoch now, without waiting: a resumption
	// reads only what the cluster keeps, which no collection removes.
	BlobEpoch(ctx context.Context) (int64, error)
	// PublishHeld is Publish of a bundle whose objects (named: every
	// object its record names, stored or carried) were stored under
	// epoch: refused, with an error wrapping ErrCollected, where a
	// collection began since. A collector keeps what named lists
	// without reading the bundle.
	PublishHeld(ctx context.Context, epoch int64, id, owner string, head addr.Addr, bundle []byte, named []addr.Addr) error
}

// ErrCollected is wrapped by the refusal of a suspension whose objects
// were stored before a collection of the cluster's blob store began:
// they are stored again (HeldTries in all).
var ErrCollected = errors.New("the cluster's blob store was collected since the objects were stored")

// HeldTries is how many times objects are stored in the cluster's blob
// store and named (a suspension, a fleet item's run) while collections
// keep beginning in between.
const HeldTries = 3

// sharedSeen notes that object a was seen whole in the cluster's blob
// store, or put there, at the store's epoch.
func (h *Manager) sharedSeen(a addr.Addr, epoch int64) { h.sharedGood.Store(a, epoch) }

// sharedKnown says whether object a was seen whole in the cluster's
// blob store at epoch: seen at another, a collection may have removed it
// since.
func (h *Manager) sharedKnown(a addr.Addr, epoch int64) bool {
	v, ok := h.sharedGood.Load(a)
	return ok && v.(int64) == epoch
}
