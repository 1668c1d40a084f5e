package live

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// A claim from a warm pool mints under every standing JCP grant that
// names the pool (pool-claim:POOL), and the child's chain verifies.
func TestPoolClaimMintsUnderAStandingGrant(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ks := make([]key.Private, 3) // root, alice (the holder), bob (the children's audience)
	for i := range ks {
		k, err := key.FromSeed(bytes.Repeat([]byte{byte(i + 1)}, 32))
		if err != nil {
			t.Fatal(err)
		}
		ks[i] = k
	}
	if err := os.MkdirAll(h.JCPPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.JCPPath(host.JCPRoots), []byte(ks[0].Public().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := uint64(time.Now().Unix())
	img := addr.Of([]byte("a tool"))
	cpu := map[device.Class]energy.Microjoules{device.CPU: 10e6}
	g0, err := jcp.Seal(&jcp.Grant{Aud: ks[1].Public(), Iat: now - 10, Exp: now + 3600, Depth: 1, Images: []addr.Addr{img}, Ceilings: cpu}, ks[0])
	if err != nil {
		t.Fatal(err)
	}
	pol, err := jcp.Seal(&jcp.Policy{Grant: g0.ID, Minter: h.Key.Public(), To: ks[2].Public(), Max: 5, Rate: jcp.Rate{N: 5, Per: 60},
		Events: []string{"pool-claim:p"}, Iat: now - 10, Exp: now + 3600,
		Template: jcp.Template{TTL: 600, Images: []addr.Addr{img}, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6}}}, ks[1])
	if err != nil {
		t.Fatal(err)
	}
	gt, err := h.Gate()
	if err != nil {
		t.Fatal(err)
	}
	if err := gt.Ledger.Admit(g0, pol); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	readyPool(t, h)
	if _, err := h.Claim(ctx, "p", host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	// The mint follows the claimer's answer.
	var files []string
	for deadline := time.Now().Add(time.Minute); len(files) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nothing minted after the claim")
		}
		files, _ = filepath.Glob(h.JCPPath(host.JCPMinted, "*.jcp"))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	els, err := jcp.DecodeChain(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jcp.Verify(els, key.NewTrust(ks[0].Public()), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if leaf := c.Leaf().Grant; leaf.Aud != ks[2].Public() || leaf.Ceilings[device.CPU] != 1e6 || c.Policies[1] == nil {
		t.Fatalf("minted %+v", leaf)
	}
}

// An amendment that tightens a JCP grant stops a running S5 run when its
// new budget is spent, as it does an S1 run (the host's budget watch).
func TestJCPAmendmentStopsARunningS5Run(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	addS5(t, h)
	root, alice := testPrincipal(t, 1), testPrincipal(t, 2)
	if err := os.MkdirAll(h.JCPPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.JCPPath(host.JCPRoots), []byte(root.Public().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := grant.ParseArgs([]string{"cpu:2000J"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	req, err := host.Command(host.CommandLine{Args: []string{"sh", "-c", "while :; do :; done"}, Grants: g, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(time.Now().Unix())
	g0, err := jcp.Seal(&jcp.Grant{Aud: alice.Public(), Iat: now - 10, Exp: now + 3600, Images: []addr.Addr{addr.Of(req.Image)},
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 4000e6}}, root)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := jcp.Seal(&jcp.Invocation{Grant: g0.ID, Iat: now}, alice)
	if err != nil {
		t.Fatal(err)
	}
	s5 := tier.S5
	req.Tier, req.Escalate, req.Deadline = &s5, true, 10*time.Minute // a bound: the amendment, not the deadline, must end it
	req.JCP = &gate.Presentation{Chain: [][]byte{g0.Bytes}, Invocation: inv.Bytes}
	req.OnStart = func(executor.Control) {
		am, err := jcp.Seal(&jcp.Amendment{Grant: g0.ID, Seq: 1, Iat: uint64(time.Now().Unix()), Exp: g0.Grant.Exp, Images: g0.Grant.Images,
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1000}}, root)
		if err == nil {
			var gt *gate.Gate
			if gt, err = h.Gate(); err == nil {
				err = gt.Ledger.Amend(am)
			}
		}
		if err != nil {
			t.Error(err)
		}
	}
	r, err := h.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if o := r.Attestation.Claim.Outcome; o.Status != attest.BudgetExhausted || r.Choice.Chosen != tier.S5 {
		t.Fatalf("at %s: outcome %+v", r.Choice.Chosen, o)
	}
}

func testPrincipal(t *testing.T, n byte) key.Private {
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
