package jcp

import (
	"fmt"
	"slices"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// Dest is a network destination a run is granted.
type Dest struct {
	Host string
	Port int
}

// Ask is what a run asks of a chain (§5).
type Ask struct {
	Image   addr.Addr
	Model   string // the model it says it runs ("" none)
	Tier    tier.Tier
	Classes []device.Class                      // the unit's classes
	Budgets map[device.Class]energy.Microjoules // what it declares it may spend
	Hosts   []Dest
	Paths   []string
}

// Admit checks an ask against one grant's effective terms (§5 step 5.3–5.7;
// counts, rates and budgets are the ledger's), at where.
func Admit(t Terms, a Ask, where string) error {
	if !t.HasImage(a.Image) {
		return reject.New(reject.ImageNotGranted, where+"images", "the image %s is not granted", a.Image)
	}
	cv := t.Caveats
	if cv.Models != nil && !slices.Contains(cv.Models, a.Model) {
		if a.Model == "" {
			return reject.New(reject.ModelNotGranted, where+"caveats.models", "the grant names models %v and the run names none (--model)", cv.Models)
		}
		return reject.New(reject.ModelNotGranted, where+"caveats.models", "%q is not among %v", a.Model, cv.Models)
	}
	if cv.Tiers != nil && !slices.Contains(cv.Tiers, a.Tier.String()) {
		return reject.New(reject.TierNotGranted, where+"caveats.tiers", "%s is not among %v", a.Tier, cv.Tiers)
	}
	for _, d := range a.Hosts {
		if !HostAllowed(cv.Hosts, d.Host, d.Port) {
			return reject.New(reject.HostNotGranted, where+"caveats.hosts", "%s is not covered by %v", dest(d), cv.Hosts)
		}
	}
	for _, p := range a.Paths {
		if !PathAllowed(cv.Paths, p) {
			return reject.New(reject.PathNotGranted, where+"caveats.paths", "%s is not within %v", p, cv.Paths)
		}
	}
	for _, c := range a.Classes {
		if _, ok := t.Ceilings[c]; !ok {
			return reject.New(reject.ClassNotGranted, where+"ceilings."+string(c), "the grant gives no %s", c)
		}
		if a.Budgets[c] == 0 {
			return reject.New(reject.CeilingUndeclared, "run.grants.compute."+string(c), "a run under a JCP grant declares what it may spend on each class (--grant %s:ENERGY)", lower(c))
		}
	}
	return nil
}

func dest(d Dest) string {
	if d.Port == 0 {
		return d.Host
	}
	return fmt.Sprintf("%s:%d", d.Host, d.Port)
}

func lower(c device.Class) string {
	b := []byte(c)
	if len(b) > 0 && b[0] >= 'A' && b[0] <= 'Z' {
		b[0] += 'a' - 'A'
	}
	return string(b)
}

// Present checks an invocation against the chain it presents (§5): signed
// by the leaf's audience, naming the leaf, timely at now.
func Present(c *Chain, inv *Token, now time.Time) error {
	i := inv.Invocation
	if i == nil {
		return reject.New(reject.Invalid, "invocation", "a %s, not an invocation", inv.Type)
	}
	leaf := c.Leaf()
	if i.Grant != leaf.ID {
		return reject.New(reject.BrokenChain, "invocation.grant", "names %s, not the chain's last grant %s", i.Grant, leaf.ID)
	}
	if i.Iss != leaf.Grant.Aud {
		return reject.New(reject.WrongAudience, "invocation.iss", "%s presents a grant for %s", i.Iss, leaf.Grant.Aud)
	}
	s, skew := unix(now), uint64(Skew/time.Second)
	if i.Iat+skew < s || i.Iat > s+skew {
		return reject.New(reject.StaleInvocation, "invocation.iat", "made at %s, more than %s from now", time.Unix(int64(i.Iat), 0).UTC().Format(time.RFC3339), Skew)
	}
	return nil
}
