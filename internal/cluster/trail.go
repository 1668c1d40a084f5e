package cluster

import (
	"context"
	"fmt"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/trail"
)

// The S7 audit trail of a cluster is one chain its hosts share
// (docs/cluster.md, chain.go): a host holds it for the whole of a run's
// sealing (the head it cites, then its entry), so no other entry comes
// between.

// TrailName is the chain's name in cluster_chains.
const TrailName = "audit"

// Trail is the cluster's S7 audit trail, as one member writes it.
type Trail struct{ c *Chain }

var _ trail.Trail = (*Trail)(nil)

// Trail is the cluster's audit trail for m to write.
func (m *Member) Trail() *Trail { return &Trail{m.Chain(TrailName, trail.Genesis())} }

// Hold takes the trail (waiting while another host holds it, at most
// TrailWait) and returns its head.
func (t *Trail) Hold(ctx context.Context) (addr.Addr, error) {
	_, head, err := t.c.Hold(ctx)
	return head, err
}

// Append adds run's entry after the head Hold gave, signed by this host,
// commits, and releases the trail.
func (t *Trail) Append(run addr.Addr, locality string) (addr.Addr, error) {
	line, err := trail.EntryBytes(run, locality)
	if err != nil {
		t.c.Release()
		return addr.Addr{}, err
	}
	return t.c.Append(line)
}

// Release gives the trail up without an entry (a run not sealed); after
// Append it does nothing.
func (t *Trail) Release() { t.c.Release() }

// TrailBytes is the cluster's audit trail as its file would be (one
// entry a line), every entry's signature checked under its writer's
// host row, and the head it replays to, which must be the row's: what
// trail.Verify checks against the heads S7 attestations cite.
func (c *Cluster) TrailBytes(ctx context.Context) ([]byte, addr.Addr, error) {
	b, head, err := c.ChainBytes(ctx, TrailName, trail.Genesis())
	if err != nil {
		return nil, addr.Addr{}, err
	}
	if _, _, err := trail.Verify(b, nil); err != nil {
		return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	return b, head, nil
}
