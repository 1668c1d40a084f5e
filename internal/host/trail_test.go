package host

import (
	"context"
	"os"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/trail"
	"github.com/opensubstrate/sandbox/tier"
)

func TestConformanceTEEStandIn(t *testing.T) {
	d, k := hosttest.State(t)
	w := executortest.Wasm{Image: guestbuild.Read(t, guestbuild.C, "conform")}
	executortest.Run(t, w.Subject(hosttest.TEE{Executor: hosttest.S2(t, d, k)}, t.TempDir()))
}

// Each S7 run cites the trail's head before it (audit_prev) and is
// appended once sealed; a restarted host replays the trail and goes on
// from its head, never from genesis again.
func TestS7RunsChainTheAuditTrail(t *testing.T) {
	h := newHost(t)
	h.Executors = append(h.Executors, hosttest.TEE{Executor: h.Executors[0]})
	run := func() *Run {
		r, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: image(t, "cat"), Entry: "cat", Args: []string{"cat"},
			Grants: grants(t, "locality:eu-west")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Choice.Chosen != tier.S7 {
			t.Fatalf("chosen %s", r.Choice.Chosen)
		}
		return r
	}
	r1 := run()
	if p := r1.Attestation.Claim.AuditPrev; p == nil || *p != trail.Genesis() || r1.Attestation.Claim.Type != attest.TypeV2 {
		t.Fatalf("the first S7 run: %+v", r1.Attestation.Claim)
	}
	r2 := run()
	b, _ := os.ReadFile(h.Store.Path("audit.jsonl"))
	head, n, err := trail.Verify(b, []addr.Addr{*r1.Attestation.Claim.AuditPrev, *r2.Attestation.Claim.AuditPrev})
	if err != nil || n != 2 || *r2.Attestation.Claim.AuditPrev == trail.Genesis() {
		t.Fatalf("%v %d", err, n)
	}
	// Another host process on the same state directory goes on from the
	// head it replays.
	h.trail.Close()
	h2 := &Host{Store: h.Store, Key: h.Key, Executors: h.Executors}
	h = h2
	r3 := run()
	if *r3.Attestation.Claim.AuditPrev != head {
		t.Fatalf("after a restart audit_prev is %s, the trail's head %s", *r3.Attestation.Claim.AuditPrev, head)
	}
}
