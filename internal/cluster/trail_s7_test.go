package cluster

import (
	"context"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/trail"
	"github.com/opensubstrate/sandbox/tier"
)

// TestS7RunsOfHostsChainOneTrail: S7 runs sealed on two hosts of a
// cluster, in turn, each cite the head of the one trail the cluster
// keeps (audit_prev) and are appended to it; the trail read back from
// PostgreSQL verifies and reaches every head they cite.
func TestS7RunsOfHostsChainOneTrail(t *testing.T) {
	c, _ := open(t)
	var hosts []*host.Host
	for range 2 {
		d, k := hosttest.State(t)
		m, err := c.Join(context.Background(), k, Host{Key: k.Public(), Tiers: []tier.Tier{tier.S7}, Capacity: 1, Addr: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		s2 := hosttest.S2(t, d, k)
		hosts = append(hosts, &host.Host{Store: store.Of(d), Key: k, Executors: []executor.Executor{s2, hosttest.TEE{Executor: s2}}, Trail: m.Trail()})
	}
	var cited []addr.Addr
	prev := trail.Genesis()
	for i, h := range []*host.Host{hosts[0], hosts[1], hosts[0]} {
		r, err := h.Run(context.Background(), host.Request{Kind: tier.Wasm, Image: hosttest.Guest(t, "cat"), Entry: "cat", Args: []string{"cat"},
			Grants: hosttest.Grants(t, "locality:eu-west")})
		if err != nil {
			t.Fatal(err)
		}
		p := r.Attestation.Claim.AuditPrev
		if r.Choice.Chosen != tier.S7 || p == nil || (i == 0 && *p != prev) || (i > 0 && *p == prev) {
			t.Fatalf("run %d: chosen %s, audit_prev %v (the one before cited %s)", i, r.Choice.Chosen, p, prev)
		}
		prev = *p
		cited = append(cited, *p)
	}
	b, _, err := c.TrailBytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, n, err := trail.Verify(b, cited); err != nil || n != 3 {
		t.Fatalf("the cluster's trail: %d entries, %v", n, err)
	}
}
