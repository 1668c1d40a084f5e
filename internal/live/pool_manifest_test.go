package live

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/tier"
)

// TestAPoolsManifestImageIsNotNamed: a pool whose image its manifest
// names, claimed by one who may use no image when none is ready (a miss,
// where the claim makes one), is refused without the image's name, which
// is the operator's to know (helper-57's finding).
func TestAPoolsManifestImageIsNotNamed(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	withImages(t, h)
	const secret = "operators-secret-image:v9"
	m, err := manifest.Seal(manifest.Manifest{Image: secret}, h.Key)
	if err != nil {
		t.Fatal(err)
	}
	// A pool with no filler: every claim is a miss.
	spec := PoolSpec{Name: "mp", Size: 1, Sandbox: SandboxSpec{Tier: tier.S1, Manifest: m}}
	p := &pool{spec: spec, last: h.Now(), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.pools.mu.Lock()
	if h.pools.m == nil {
		h.pools.m = map[string]*pool{}
	}
	h.pools.m["mp"] = p
	h.pools.mu.Unlock()
	t.Cleanup(func() {
		h.pools.mu.Lock()
		delete(h.pools.m, "mp")
		h.pools.mu.Unlock()
	})
	none := authority.Default()
	none.Images = nil
	h.Policies = map[string]authority.Policy{"mallory": none}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a measure
	defer cancel()
	_, err = h.Claim(ctx, "mp", "mallory")
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "pool mp") {
		t.Fatalf("mallory's claim of a pool in an image it may not use: %v; want refused, naming the pool and not its image", err)
	}
}
