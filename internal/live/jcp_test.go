package live

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
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
	if err := h.StartPool(PoolSpec{Name: "p", Size: 1}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a bound, not a measure
	defer cancel()
	if err := h.WaitPool(wctx, "p", 1); err != nil {
		t.Fatal(err)
	}
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
