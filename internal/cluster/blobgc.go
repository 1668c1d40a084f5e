package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store"
)

// The cluster's blob store is collected (docs/cluster.md, "Collecting
// the blob store"): a collection removes every object that no sandbox
// the cluster keeps (live, suspended or lost: all but closed ones) and
// no fleet item's result not yet taken names. One row, cluster_blobgc,
// orders collections and the hosts that store objects:
//
//   - A host that stores objects and then names them in a row (a
//     suspension's objects and bundle, a fleet item's run) first holds the
//     store (HoldBlobs): it waits while a collection runs and notes the
//     row's epoch. It names what it stored in a transaction that holds
//     the row for share and refuses if the epoch moved since
//     (ErrCollected): a collection began meanwhile and may have removed
//     an object the host found stored and did not put again. The host
//     then holds again and stores again.
//   - A collection lists the store, then raises the epoch and leases
//     the row (until), which waits for those transactions: every name
//     said before it is in what it reads next, and none is said after
//     it until it ends. It reads what the cluster's rows name, then
//     removes what they do not of what it listed, stopping before its
//     lease ends unless it renewed it: a collector that stalled or lost
//     its network removes nothing once hosts may store again. What was
//     stored after the listing is not in it.

// ErrCollected: a collection of the blob store began since this host's
// hold, so an object it found stored may be gone: store again, then
// name it again.
var ErrCollected = errors.New("the cluster's blob store was collected since this host looked at it: store again")

// ErrCollecting: another collection of the blob store is running.
var ErrCollecting = errors.New("a collection of the cluster's blob store is running")

// BlobHold is a host's look at the cluster's blob store between storing
// objects and naming them (HoldBlobs).
type BlobHold struct {
	// Epoch is the number of collections the store had begun when the
	// hold was taken: what a host saw stored under an earlier epoch may
	// have been collected since.
	Epoch int64
}

// holdPoll is how often HoldBlobs looks again while a collection runs.
var holdPoll = 200 * time.Millisecond

// HoldBlobs waits until no collection of the blob store runs (or its
// lease has ended, and leaseGrace more: a collector that died, or
// stalled with a remove in flight) and returns a hold at the store's
// epoch.
func (c *Cluster) HoldBlobs(ctx context.Context) (BlobHold, error) {
	for logged := false; ; {
		epoch, running, by, err := c.blobState(ctx, "hold the blob store")
		if err != nil {
			return BlobHold{}, fmt.Errorf("cluster: hold the blob store: %w", err)
		}
		if !running {
			return BlobHold{Epoch: epoch}, nil
		}
		if !logged {
			c.log().Info("cluster: waiting for a collection of the blob store to end", "collector", by, "epoch", epoch)
			logged = true
		}
		select {
		case <-ctx.Done():
			return BlobHold{}, fmt.Errorf("cluster: hold the blob store: a collection by %s runs: %w", by, ctx.Err())
		case <-time.After(holdPoll):
		}
	}
}

// BlobEpoch is the blob store's epoch now (BlobHold.Epoch), without
// waiting for a collection that runs.
func (c *Cluster) BlobEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	err := c.retry(ctx, "the blob store's epoch", func() error {
		return c.pool.QueryRow(ctx, `SELECT epoch FROM cluster_blobgc`).Scan(&epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: the blob store's epoch: %w", err)
	}
	return epoch, nil
}

// held runs f in a transaction that holds the blob store's row for
// share at h's epoch: ErrCollected where a collection began since h.
func (c *Cluster) held(ctx context.Context, what string, h BlobHold, f func(pgx.Tx) error) error {
	return c.retry(ctx, what, func() error {
		return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var epoch int64
			if err := tx.QueryRow(ctx, `SELECT epoch FROM cluster_blobgc FOR SHARE`).Scan(&epoch); err != nil {
				return err
			}
			if epoch != h.Epoch {
				c.log().Info("cluster: the blob store was collected since this host stored objects: storing them again", "op", what, "held", h.Epoch, "epoch", epoch)
				return fmt.Errorf("%w (epoch %d, held at %d)", ErrCollected, epoch, h.Epoch)
			}
			return f(tx)
		})
	})
}

// ResultTaken says the result of job id was taken by the host that
// waited for it: the objects it names are the collector's once the job
// is done and its result taken.
func (c *Cluster) ResultTaken(ctx context.Context, id int64) error {
	err := c.retry(ctx, "result taken", func() error {
		_, err := c.pool.Exec(ctx, `UPDATE cluster_jobs SET taken = true WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: job %d's result taken: %w", id, err)
	}
	return nil
}

// Namer says which objects of the blob store what the cluster keeps
// names: a kept sandbox's bundle (the bundle itself among them), a job's
// result. An error means the collector cannot know what must stay, and
// it removes nothing.
type Namer interface {
	Bundle(ctx context.Context, bundle addr.Addr) ([]addr.Addr, error)
	Result(kind string, result []byte) ([]addr.Addr, error)
}

// Collection is what a collection of the blob store found and did.
type Collection struct {
	Epoch     int64 `json:"epoch"`     // the collection's (0: a dry run, which takes none)
	Sandboxes int   `json:"sandboxes"` // sandboxes kept, whose bundles name objects
	Results   int   `json:"results"`   // fleet items' results not yet taken
	Named     int   `json:"named"`     // distinct objects those name
	Stored    int   `json:"stored"`    // objects the store held
	Removed   int   `json:"removed"`   // of Stored, those no one names: removed, or in a dry run to be
	DryRun    bool  `json:"dry_run"`
}

// CollectLease is how long a collection holds the blob store between
// renewals (every sixth of it); it removes nothing in the last quarter
// of a lease it could not renew, each remove bounded to end before
// that, and hosts wait leaseGrace after a lease that was not ended.
var CollectLease = 60 * time.Second

// leaseGrace is how long after an unended lease hosts still wait: for a
// remove a stalled collector sent before its stop to land.
func leaseGrace() time.Duration { return CollectLease / 4 }

// CollectBlobs collects the cluster's blob store (see above), as host
// by (named in the row and the log); a dry run removes nothing and
// holds nothing, and says what a collection would remove now.
//
// The store is listed before the collection takes it from the hosts, so
// that they wait only while it reads what the rows name and removes
// what they do not, not while a large store is listed: an object stored
// after the listing is not in it and stays; one a host found listed and
// named before the collection began is in what the rows name; one it
// names after is refused (the epoch moved), and stored again.
func (c *Cluster) CollectBlobs(ctx context.Context, blobs store.Collectable, names Namer, by string, dryRun bool) (Collection, error) {
	col := Collection{DryRun: dryRun}
	if !dryRun {
		// Left to the collection that runs, before listing for nothing.
		if _, running, other, err := c.blobState(ctx, "collect: is one running"); err != nil {
			return col, fmt.Errorf("cluster: collect the blob store: %w", err)
		} else if running {
			return col, fmt.Errorf("cluster: collect the blob store: %w (by %s)", ErrCollecting, other)
		}
	}
	var stored []addr.Addr
	err := blobs.EachBlob(ctx, func(a addr.Addr) error {
		stored = append(stored, a)
		return nil
	})
	if err != nil {
		return col, fmt.Errorf("cluster: collect the blob store: listing it: %w", err)
	}
	col.Stored = len(stored)
	var lease *collectLease
	if !dryRun {
		l, err := c.beginCollect(ctx, by)
		if err != nil {
			return col, err
		}
		lease = l
		col.Epoch = l.epoch
		defer c.endCollect(l)
	}
	keep := func() error {
		if lease == nil {
			return nil
		}
		return c.renewCollect(ctx, lease)
	}
	named, err := c.named(ctx, blobs, names, keep, &col)
	if err != nil {
		return col, err
	}
	var gone []addr.Addr
	for _, a := range stored {
		if !named[a] {
			gone = append(gone, a)
		}
	}
	if dryRun {
		col.Removed = len(gone)
		return col, nil
	}
	for _, a := range gone {
		if err := keep(); err != nil {
			return col, err
		}
		rctx, cancel := context.WithTimeout(ctx, lease.left())
		err := blobs.RemoveBlobContext(rctx, a)
		cancel()
		if err != nil {
			return col, fmt.Errorf("cluster: collect the blob store: %w", err)
		}
		col.Removed++
	}
	c.log().Info("cluster: the blob store collected", "collector", by, "epoch", col.Epoch, "sandboxes", col.Sandboxes, "results", col.Results, "named", col.Named, "stored", col.Stored, "removed", col.Removed)
	return col, nil
}

// blobState is the blob store's row: its epoch, whether a collection's
// lease runs (or ended less than leaseGrace ago without being ended),
// and whose.
func (c *Cluster) blobState(ctx context.Context, what string) (epoch int64, running bool, by string, err error) {
	err = c.retry(ctx, what, func() error {
		return c.pool.QueryRow(ctx, `SELECT epoch, COALESCE(until + make_interval(secs => $1) > now(), false), by_host FROM cluster_blobgc`, leaseGrace().Seconds()).Scan(&epoch, &running, &by)
	})
	return epoch, running, by, err
}

// named reads what the cluster keeps and the objects it names: a kept
// sandbox's from the object list its suspension stored (read from
// blobs), or where its row names no list it can use (none, unreadable,
// made for another bundle), from its bundle (names). A kept sandbox's
// row that is not as the host that suspended it signed it (suspension),
// or a result its holder did not sign, stops the collection: nothing is
// removed.
func (c *Cluster) named(ctx context.Context, blobs store.Blobs, names Namer, keep func() error, col *Collection) (map[addr.Addr]bool, error) {
	type kept struct {
		id              string
		bundle, objects addr.Addr
	}
	var sbs []kept
	err := c.retry(ctx, "collect: sandboxes", func() error {
		sbs = sbs[:0]
		rows, err := c.pool.Query(ctx, `SELECT s.id, s.owner, s.head, s.bundle, s.objects, s.by_host, s.sig, p.pub
FROM cluster_sandboxes s LEFT JOIN cluster_hosts p ON p.id = s.by_host
WHERE s.state <> 'closed' AND (s.state = 'suspended' OR length(s.bundle) > 0 OR s.by_host <> '' OR length(s.sig) > 0) ORDER BY s.id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, owner, by string
			var head, b, o, sig, pub []byte
			if err := rows.Scan(&id, &owner, &head, &b, &o, &by, &sig, &pub); err != nil {
				return err
			}
			s, err := signedRow(id, owner, by, head, b, o, pub, sig)
			if err != nil {
				c.log().Warn("cluster: a kept sandbox's row refused: nothing collected", "sandbox", id, "err", err)
				return err
			}
			sbs = append(sbs, kept{id: id, bundle: s.bundle, objects: s.objects})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: collect the blob store: the sandboxes kept: %w", err)
	}
	type result struct {
		id     int64
		kind   string
		result []byte
	}
	var res []result
	err = c.retry(ctx, "collect: results", func() error {
		res = res[:0]
		rows, err := c.pool.Query(ctx, `SELECT j.id, j.kind, j.result, coalesce(j.holder, ''), j.by_host, j.payload, j.result_sig, p.pub
FROM cluster_jobs j LEFT JOIN cluster_hosts p ON p.id = j.holder
WHERE j.state = 'done' AND NOT j.taken ORDER BY j.id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r result
			var holder, by string
			var payload, sig, pub []byte
			if err := rows.Scan(&r.id, &r.kind, &r.result, &holder, &by, &payload, &sig, &pub); err != nil {
				return err
			}
			if err := resultChecked(r.id, holder, r.kind, by, payload, r.result, pub, sig); err != nil {
				c.log().Warn("cluster: a job's result refused: nothing collected", "job", r.id, "err", err)
				return err
			}
			res = append(res, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: collect the blob store: the results not taken: %w", err)
	}
	named := map[addr.Addr]bool{}
	for _, k := range sbs {
		if err := keep(); err != nil {
			return nil, err
		}
		if !k.objects.IsZero() {
			as, err := listed(blobs, k.objects, k.bundle)
			if err == nil {
				named[k.bundle], named[k.objects] = true, true
				for _, a := range as {
					named[a] = true
				}
				col.Sandboxes++
				continue
			}
			// Read the bundle instead, as for a row without a list.
			c.log().Warn("cluster: a kept sandbox's object list could not be used: its bundle is read", "sandbox", k.id, "objects", k.objects, "err", err)
		}
		as, err := names.Bundle(ctx, k.bundle)
		if err != nil {
			c.log().Warn("cluster: a kept sandbox's bundle could not be read: nothing collected", "sandbox", k.id, "bundle", k.bundle, "err", err)
			return nil, fmt.Errorf("cluster: collect the blob store: sandbox %s's bundle %s: %w (nothing was removed: close the sandbox, or put its objects back)", k.id, k.bundle, err)
		}
		for _, a := range as {
			named[a] = true
		}
		col.Sandboxes++
	}
	for _, r := range res {
		as, err := names.Result(r.kind, r.result)
		if err != nil {
			c.log().Warn("cluster: a job's result could not be read: nothing collected", "job", r.id, "kind", r.kind, "err", err)
			return nil, fmt.Errorf("cluster: collect the blob store: job %d's result: %w (nothing was removed)", r.id, err)
		}
		for _, a := range as {
			named[a] = true
		}
		col.Results++
	}
	col.Named = len(named)
	return named, nil
}

// listed reads the object list at a from blobs (checked against a),
// refused unless it was made for bundle.
func listed(blobs store.Blobs, a, bundle addr.Addr) ([]addr.Addr, error) {
	b, err := blobs.Blob(a)
	if err != nil {
		return nil, err
	}
	madeFor, as, err := ParseObjects(b)
	if err != nil {
		return nil, err
	}
	if madeFor != bundle {
		return nil, fmt.Errorf("object list %s: made for bundle %s, not the row's %s", a, madeFor, bundle)
	}
	return as, nil
}

// ErrEdited is wrapped by the refusal of a row no host wrote so: a
// column a host signs, edited in the database by hand (or written by a
// version before it was signed), or a column that is not of its form.
var ErrEdited error = edited{}

type edited struct{}

func (edited) Error() string { return "a row edited by hand" }

// Category is errs' integrity: what was stored does not verify.
func (edited) Category() string { return "integrity" }

// collectLease is a running collection's lease on the blob store.
type collectLease struct {
	epoch int64
	// stop is when, by this machine's boot clock (sinceBoot: it goes
	// on through a suspend, as the database's does), the collection
	// stops removing unless it renews: a quarter of the lease before
	// the database's until, counted from before the statement that set
	// it.
	stop    time.Duration
	renewed time.Duration
}

// left is how long the collection may still remove: a remove is bounded
// to end by the lease's stop.
func (l *collectLease) left() time.Duration { return max(l.stop-sinceBoot(), 0) }

// beginCollect raises the blob store's epoch and leases it to by, once
// every transaction that holds it for share has ended; ErrCollecting
// where another collection's lease runs.
func (c *Cluster) beginCollect(ctx context.Context, by string) (*collectLease, error) {
	// This call's own name: two collectors of one name (two containers
	// of one host name, each pid 1) never take each other's lease.
	var token [6]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, err
	}
	return c.leaseAs(ctx, fmt.Sprintf("%s [%x]", by, token))
}

// leaseAs is beginCollect under name, tried again while the database is
// away: a lease held under name already (a first try whose answer was
// lost) is taken over.
func (c *Cluster) leaseAs(ctx context.Context, name string) (*collectLease, error) {
	var l collectLease
	var found bool
	var other string
	err := c.retry(ctx, "collect: begin", func() error {
		l.renewed = sinceBoot()
		err := c.pool.QueryRow(ctx, `UPDATE cluster_blobgc SET epoch = epoch + 1, until = now() + make_interval(secs => $1), by_host = $2
WHERE until IS NULL OR until + make_interval(secs => $3) <= now() OR by_host = $2 RETURNING epoch`, CollectLease.Seconds(), name, leaseGrace().Seconds()).Scan(&l.epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return c.pool.QueryRow(ctx, `SELECT by_host FROM cluster_blobgc`).Scan(&other)
		}
		found = err == nil
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: collect the blob store: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("cluster: collect the blob store: %w (by %s)", ErrCollecting, other)
	}
	l.stop = l.renewed + CollectLease*3/4
	c.log().Info("cluster: collecting the blob store", "collector", name, "epoch", l.epoch)
	return &l, nil
}

// renewCollect renews l when a sixth of it has passed. It refuses at
// once where the database says the lease is no longer l's (it ended, or
// another collection took the row), and once l's stop has passed
// without a renewal; a renewal the database did not answer is tried
// again at the next call until then.
func (c *Cluster) renewCollect(ctx context.Context, l *collectLease) error {
	now := sinceBoot()
	if now >= l.stop {
		return fmt.Errorf("cluster: collect the blob store: the lease not renewed, stopped before its end")
	}
	if now-l.renewed < CollectLease/6 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, min(CollectLease/8, l.stop-now))
	tag, err := c.pool.Exec(rctx, `UPDATE cluster_blobgc SET until = now() + make_interval(secs => $1) WHERE epoch = $2 AND until > now()`, CollectLease.Seconds(), l.epoch)
	cancel()
	if err != nil {
		return nil // not answered: tried again before the stop
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("cluster: collect the blob store: the database says its lease (epoch %d) ended: stopped", l.epoch)
	}
	l.renewed, l.stop = now, now+CollectLease*3/4
	return nil
}

// endCollect ends l's lease: hosts may store again.
func (c *Cluster) endCollect(l *collectLease) {
	ctx, cancel := context.WithTimeout(context.Background(), RetryFor)
	defer cancel()
	err := c.retry(ctx, "collect: end", func() error {
		_, err := c.pool.Exec(ctx, `UPDATE cluster_blobgc SET until = NULL WHERE epoch = $1`, l.epoch)
		return err
	})
	if err != nil {
		c.log().Warn("cluster: a collection's lease not ended: hosts wait for it to run out", "epoch", l.epoch, "err", err)
	}
}
