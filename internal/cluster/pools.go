package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pool is a warm pool a host keeps, as it last said: its name and how
// many sandboxes it held ready then.
type Pool struct {
	Host  Seen
	Name  string
	Ready int
	Said  time.Time // when its host said so, by its own clock (signed)
	// Sent is how many claims other hosts have sent it since it said so
	// (ReservePool): Ready less Sent are still there to be claimed.
	Sent int
}

// Left is how many of the ready sandboxes the host said it held no
// claim has been sent for yet.
func (p Pool) Left() int { return max(p.Ready-p.Sent, 0) }

// poolMessage is what a host signs of a pool: the time it says so among
// the rest, so that an older row of its, put back, is told stale.
func poolMessage(host, name string, ready int, said int64) []byte {
	return fields("sandbox.cluster.pool/2", host, name, strconv.Itoa(ready), strconv.FormatInt(said, 10))
}

// ReportPools says which warm pools the member keeps and how many ready
// sandboxes each holds now, each in a row it signs; a pool it reported
// before and does not name now is removed. A claim through another host
// is sent where a pool of its name has ready sandboxes (PoolHosts).
func (m *Member) ReportPools(ctx context.Context, ready map[string]int) error {
	tx, err := m.c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("cluster: pools: %w", err)
	}
	defer tx.Rollback(ctx)
	names := make([]string, 0, len(ready))
	for name, n := range ready {
		if n < 0 {
			return fmt.Errorf("cluster: pools: pool %s: %d ready", name, n)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	id := m.Host.ID()
	said := time.Now().UnixMilli()
	for _, table := range []string{"cluster_pools", "cluster_pool_sends"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE host = $1 AND NOT (name = ANY($2))`, id, names); err != nil {
			return fmt.Errorf("cluster: pools: %w", err)
		}
	}
	for _, name := range names {
		n := ready[name]
		if _, err := tx.Exec(ctx, `INSERT INTO cluster_pools (host, name, ready, sig, said) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (host, name) DO UPDATE SET ready = $3, sig = $4, said = $5, updated = now()`, id, name, n, m.key.Sign(poolMessage(id, name, n, said)), said); err != nil {
			return fmt.Errorf("cluster: pools: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("cluster: pools: %w", err)
	}
	return nil
}

// PoolHosts lists the hosts that keep a warm pool called name, most
// ready sandboxes left first (Pool.Left; then most ready, then by id),
// each row checked: its host's row
// verifies, and the pool's row is signed by that host's key. A row that
// does not verify is logged and left out, and so is one whose host said
// it longer ago than the dead-after (by the database's clock, against
// the time the host signed): hosts say it again at each heartbeat, so an
// older row of theirs put back is stale. Whether a host is alive is its
// Age's to say (the caller's dead-after).
func (c *Cluster) PoolHosts(ctx context.Context, name string) ([]Pool, error) {
	return retried(ctx, c, "pool hosts", func() ([]Pool, error) { return c.poolHosts(ctx, name) })
}

func (c *Cluster) poolHosts(ctx context.Context, name string) ([]Pool, error) {
	rows, err := c.pool.Query(ctx, `SELECT p.ready, COALESCE(CASE WHEN s.said = p.said THEN s.sent END, 0) AS sent, p.sig, p.said, (extract(epoch FROM now()) * 1000)::bigint, h.id, h.pub, h.tiers, h.capacity, h.idle_mw, h.addr, h.sig, h.joined, h.seen, extract(epoch FROM now() - h.seen)
FROM cluster_pools p JOIN cluster_hosts h ON h.id = p.host LEFT JOIN cluster_pool_sends s ON s.host = p.host AND s.name = p.name
WHERE p.name = $1 ORDER BY GREATEST(p.ready - COALESCE(CASE WHEN s.said = p.said THEN s.sent END, 0), 0) DESC, p.ready DESC, h.id`, name)
	if err != nil {
		return nil, fmt.Errorf("cluster: pool %s: %w", name, err)
	}
	defer rows.Close()
	var out []Pool
	for rows.Next() {
		var (
			p            Pool
			psig         []byte
			said, now    int64
			id, tiers, a string
			pub, sig     []byte
			age          float64
		)
		if err := rows.Scan(&p.Ready, &p.Sent, &psig, &said, &now, &id, &pub, &tiers, &p.Host.Capacity, &p.Host.IdleMW, &a, &sig, &p.Host.Joined, &p.Host.Seen, &age); err != nil {
			return nil, fmt.Errorf("cluster: pool %s: %w", name, err)
		}
		p.Host.Addr, p.Host.Age = a, time.Duration(age*float64(time.Second))
		if err := p.Host.Host.fill(id, pub, tiers, sig); err != nil {
			c.log().Warn("cluster: a host row refused", "id", id, "err", err)
			continue
		}
		if p.Ready < 0 || !p.Host.Key.Verify(poolMessage(id, name, p.Ready, said), psig) {
			c.log().Warn("cluster: a pool row refused: its host's signature does not verify", "host", id, "pool", name)
			continue
		}
		if age := time.Duration(now-said) * time.Millisecond; age > c.deadAfterOr() {
			c.log().Warn("cluster: a pool row refused: its host said it too long ago", "host", id, "pool", name, "age", age)
			continue
		}
		p.Name, p.Said = name, time.UnixMilli(said)
		out = append(out, p)
	}
	return out, rows.Err()
}

// deadAfterOr is the cluster's dead-after, or DefaultDeadAfter.
func (c *Cluster) deadAfterOr() time.Duration {
	if c.DeadAfter > 0 {
		return c.DeadAfter
	}
	return DefaultDeadAfter
}

// ReservePool takes, for a claim this host sends on, one ready sandbox
// of pool name from the host that has the most left of those it last
// said it held (Pool.Left), among pools (PoolHosts' list, which the
// caller may have narrowed: hosts alive, not itself). Each report's
// ready sandboxes are taken once each, however many hosts claim at once
// (one statement a host, under its row's lock): claims made before the
// host's next report spread over the hosts that have some left rather
// than pile onto the one that said the most. A host's next report says
// anew what it holds, and its count starts again. ok false: no host
// has one left.
func (c *Cluster) ReservePool(ctx context.Context, pools []Pool) (Pool, bool, error) {
	for _, p := range pools {
		if p.Left() <= 0 {
			continue
		}
		var sent int
		err := c.pool.QueryRow(ctx, `INSERT INTO cluster_pool_sends (host, name, said, sent) VALUES ($1, $2, $3, 1)
ON CONFLICT (host, name) DO UPDATE SET said = $3, sent = CASE WHEN cluster_pool_sends.said = $3 THEN cluster_pool_sends.sent + 1 ELSE 1 END
WHERE cluster_pool_sends.said < $3 OR (cluster_pool_sends.said = $3 AND cluster_pool_sends.sent < $4)
RETURNING sent`, p.Host.ID(), p.Name, p.Said.UnixMilli(), p.Ready).Scan(&sent)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // taken meanwhile, or the host said anew since the list
		}
		if err != nil {
			return Pool{}, false, fmt.Errorf("cluster: pool %s on host %s: %w", p.Name, p.Host.ID(), err)
		}
		p.Sent = sent
		return p, true, nil
	}
	return Pool{}, false, nil
}
