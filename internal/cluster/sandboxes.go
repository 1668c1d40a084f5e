package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/opensubstrate/sandbox/addr"
)

// A suspended sandbox travels (docs/cluster.md): the host that suspends
// it keeps its bundle in the cluster's blob store and says so here; any
// host that resumes it takes it here first, so that one host at a time
// holds it live. Each change raises the row's fencing token.

// ErrHeldElsewhere: the sandbox is live on another host, or was taken by
// one since this host last held it.
var ErrHeldElsewhere = errors.New("the sandbox is held by another host")

// ErrNotShared: the cluster keeps nothing of this sandbox (it was never
// suspended on a host of the cluster).
var ErrNotShared = errors.New("the cluster keeps nothing of this sandbox")

// Kept is a sandbox as the cluster keeps it.
type Kept struct {
	Host   string    // the host that holds it, or last suspended it
	State  string    // live, suspended
	Head   addr.Addr // its record's head when suspended
	Bundle addr.Addr // its bundle in the blob store
	Fence  int64
}

// SandboxSuspended says this host suspended sandbox id, its record at
// head, its bundle stored under bundle. Refused (ErrHeldElsewhere) when
// another host took the sandbox since this one held it: the suspension
// this host made is then of a copy it no longer holds.
func (m *Member) SandboxSuspended(ctx context.Context, id string, head, bundle addr.Addr) error {
	tag, err := m.c.pool.Exec(ctx, `INSERT INTO cluster_sandboxes (id, host, state, head, bundle, fence) VALUES ($1, $2, 'suspended', $3, $4, 1)
ON CONFLICT (id) DO UPDATE SET state = 'suspended', head = $3, bundle = $4, fence = cluster_sandboxes.fence + 1, updated = now()
WHERE cluster_sandboxes.host = $2`, id, m.Host.ID(), head[:], bundle[:])
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s suspended: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		m.c.log().Warn("cluster: a suspension of a sandbox another host holds", "sandbox", id, "host", m.Host.ID())
		return fmt.Errorf("cluster: sandbox %s: %w", id, ErrHeldElsewhere)
	}
	return nil
}

// TakeSandbox makes this host the holder of suspended sandbox id, live,
// and returns what the cluster keeps of it (its bundle to fetch when
// another host suspended it last). A sandbox live on a host, this one
// included, is refused (ErrHeldElsewhere, naming the host); one the
// cluster keeps nothing of is ErrNotShared.
func (m *Member) TakeSandbox(ctx context.Context, id string) (Kept, error) {
	var k Kept
	var head, bundle []byte
	err := m.c.pool.QueryRow(ctx, `WITH prev AS (SELECT id, host FROM cluster_sandboxes WHERE id = $1 FOR UPDATE)
UPDATE cluster_sandboxes s SET state = 'live', host = $2, fence = s.fence + 1, updated = now() FROM prev
WHERE s.id = prev.id AND s.state = 'suspended' RETURNING prev.host, s.head, s.bundle, s.fence`, id, m.Host.ID()).Scan(&k.Host, &head, &bundle, &k.Fence)
	if errors.Is(err, pgx.ErrNoRows) {
		var host, state string
		err := m.c.pool.QueryRow(ctx, `SELECT host, state FROM cluster_sandboxes WHERE id = $1`, id).Scan(&host, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return k, fmt.Errorf("cluster: sandbox %s: %w", id, ErrNotShared)
		}
		if err != nil {
			return k, fmt.Errorf("cluster: sandbox %s: %w", id, err)
		}
		return k, fmt.Errorf("cluster: sandbox %s is %s on host %s: %w", id, state, host, ErrHeldElsewhere)
	}
	if err != nil {
		return k, fmt.Errorf("cluster: sandbox %s: %w", id, err)
	}
	if len(head) != len(k.Head) || len(bundle) != len(k.Bundle) {
		return k, fmt.Errorf("cluster: sandbox %s: its row names no addresses (%d, %d bytes): refused", id, len(head), len(bundle))
	}
	copy(k.Head[:], head)
	copy(k.Bundle[:], bundle)
	k.State = "live"
	return k, nil
}

// ReleaseSandbox gives back a sandbox this host took under fence but
// could not resume: suspended again, as it was.
func (m *Member) ReleaseSandbox(ctx context.Context, id string, fence int64) error {
	tag, err := m.c.pool.Exec(ctx, `UPDATE cluster_sandboxes SET state = 'suspended', fence = fence + 1, updated = now()
WHERE id = $1 AND host = $2 AND fence = $3 AND state = 'live'`, id, m.Host.ID(), fence)
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("cluster: sandbox %s (fence %d): %w", id, fence, ErrStaleFence)
	}
	return nil
}
