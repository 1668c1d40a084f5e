package cluster

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

func seen(t *testing.T, capacity int, idleMW int64, age time.Duration, tiers ...tier.Tier) Seen {
	k, err := key.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Seen{Host: Host{Key: k.Public(), Tiers: tiers, Capacity: capacity, IdleMW: idleMW}, Age: age}
}

// TestPlace: the host where one more run carries the least of its
// host's idle power wins among those alive that give the tier and have
// room; ties go to room, then to the deciding host; every input and the
// reason are in the placement; no host eligible says why each was left.
func TestPlace(t *testing.T) {
	busy := seen(t, 8, 12000, time.Second, tier.S1, tier.S2) // 2 live: 4000 mW a run
	idle := seen(t, 8, 6000, time.Second, tier.S1)           // 0 live: 6000 mW
	full := seen(t, 1, 100, time.Second, tier.S1)            // full
	dead := seen(t, 8, 100, time.Minute, tier.S1)            // silent
	noS1 := seen(t, 8, 100, time.Second, tier.S2)            // no S1
	live := map[string]int64{busy.ID(): 2, full.ID(): 1}
	hosts := []Seen{busy, idle, full, dead, noS1}
	got, p, err := Place(hosts, live, tier.S1, idle.ID(), 10, 30*time.Second, nil)
	if err != nil || got.ID() != busy.ID() || p.Host != busy.Key || len(p.Candidates) != 2 || p.Tier != "S1" {
		t.Fatalf("placed on %s: %+v %v", got.ID(), p, err)
	}
	if !strings.Contains(p.Why, "4000 mW") || !strings.Contains(p.Why, "12000 mW over 3 runs") {
		t.Fatalf("why: %s", p.Why)
	}
	// A tie in cost: the one with more room, then the deciding host.
	a, b := seen(t, 4, 1000, 0, tier.S1), seen(t, 8, 1000, 0, tier.S1)
	if got, _, _ := Place([]Seen{a, b}, nil, tier.S1, a.ID(), 3, 0, nil); got.ID() != b.ID() {
		t.Fatalf("the tie went to less room")
	}
	c := seen(t, 8, 1000, 0, tier.S1)
	if got, _, _ := Place([]Seen{b, c}, nil, tier.S1, c.ID(), 3, 0, nil); got.ID() != c.ID() {
		t.Fatalf("a full tie went to another host than the deciding one")
	}
	// Best of K: K weighed, drawn from those eligible.
	many := []Seen{}
	for range 10 {
		many = append(many, seen(t, 8, 1000, 0, tier.S1))
	}
	_, p, err = Place(many, nil, tier.S1, "", 3, 0, mrand.New(mrand.NewPCG(1, 2)))
	if err != nil || len(p.Candidates) != 3 || !strings.Contains(p.Why, "of 10 that give S1") {
		t.Fatalf("best of 3: %+v %v", p, err)
	}
	if _, _, err := Place([]Seen{full, dead, noS1}, live, tier.S1, "", 3, 30*time.Second, nil); err == nil ||
		!strings.Contains(err.Error(), "full") || !strings.Contains(err.Error(), "heartbeaten") || !strings.Contains(err.Error(), "does not give S1") {
		t.Fatalf("none eligible: %v", err)
	}
}
