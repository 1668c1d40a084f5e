package jcp

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// canonical refuses the forms of a decoded payload that re-encoding does
// not show (§2, canonical.md): an all-zero address names nothing, so in a
// required member or a list it is missing-field and in an optional member
// (written out for "absent") non-canonical; a set out of order or with a
// repeat is a second form of the same content (non-canonical).
func (t *Token) canonical() error {
	var req, opt []named
	var addrSets, textSets []namedSet
	terms := func(where string, im []addr.Addr, cv Caveats) {
		addrSets = append(addrSets, namedSet{where + ".images", im})
		for _, c := range []struct {
			n string
			s []string
		}{{"models", cv.Models}, {"tiers", cv.Tiers}, {"hosts", cv.Hosts}, {"paths", cv.Paths}} {
			textSets = append(textSets, namedSet{where + ".caveats." + c.n, c.s})
		}
	}
	switch {
	case t.Grant != nil:
		g := t.Grant
		opt = []named{{"parent", g.Parent}, {"policy", g.Policy}}
		terms("payload", g.Images, g.Caveats)
	case t.Policy != nil:
		p := t.Policy
		req = []named{{"grant", &p.Grant}}
		terms("payload.template", p.Template.Images, p.Template.Caveats)
		textSets = append(textSets, namedSet{"payload.events", p.Events})
	case t.Invocation != nil:
		req = []named{{"grant", &t.Invocation.Grant}}
		opt = []named{{"image", t.Invocation.Image}}
	case t.Amendment != nil:
		req = []named{{"grant", &t.Amendment.Grant}}
		terms("payload", t.Amendment.Images, t.Amendment.Caveats)
	case t.Revocation != nil:
		req = []named{{"grant", &t.Revocation.Grant}}
	case t.Checkpoint != nil:
		c := t.Checkpoint
		req = []named{{"grant", &c.Grant}, {"run", &c.Run}}
		opt = []named{{"state", c.State}}
	case t.Decision != nil:
		d := t.Decision
		req = []named{{"image", &d.Image}}
		opt = []named{{"invocation", d.Invocation}}
		for i := range d.Chain {
			req = append(req, named{fmt.Sprintf("chain[%d]", i), &d.Chain[i]})
		}
	}
	for _, s := range addrSets {
		for i, a := range s.v.([]addr.Addr) {
			req = append(req, named{fmt.Sprintf("%s[%d]", s.where[len("payload."):], i), &a})
		}
	}
	for _, n := range req {
		if n.a.IsZero() {
			return reject.New(reject.MissingField, "payload."+n.where, "the all-zero address names nothing")
		}
	}
	for _, n := range opt {
		if n.a != nil && n.a.IsZero() {
			return reject.New(reject.NonCanonical, "payload."+n.where, "the all-zero address means absent: an absent member is left out")
		}
	}
	for _, s := range addrSets {
		im := s.v.([]addr.Addr)
		for i := 1; i < len(im); i++ {
			if bytes.Compare(im[i-1][:], im[i][:]) >= 0 {
				return reject.New(reject.NonCanonical, s.where, "not a set: sorted ascending (bytewise) with no repeat")
			}
		}
	}
	for _, s := range textSets {
		ts := s.v.([]string)
		for i := 1; i < len(ts); i++ {
			if ts[i-1] >= ts[i] {
				return reject.New(reject.NonCanonical, s.where, "not a set: sorted ascending (by UTF-8 bytes) with no repeat")
			}
		}
	}
	return nil
}

type named struct {
	where string
	a     *addr.Addr
}

type namedSet struct {
	where string
	v     any
}

// validate checks a decoded payload's own rules (§3–§8).
func (t *Token) validate() error {
	switch {
	case t.Grant != nil:
		g := t.Grant
		if err := common(g.V, g.Iat, g.Exp, true); err != nil {
			return err
		}
		if g.Policy != nil && g.Parent == nil {
			return reject.New(reject.Invalid, "payload.policy", "a grant minted under a policy has a parent")
		}
		if g.Depth > MaxDepth {
			return reject.New(reject.Invalid, "payload.depth", "%d; at most %d", g.Depth, MaxDepth)
		}
		return checkTerms(g.Terms(), "payload")
	case t.Policy != nil:
		p := t.Policy
		if err := common(p.V, p.Iat, p.Exp, true); err != nil {
			return err
		}
		tm := p.Template
		if tm.TTL == 0 {
			return reject.New(reject.Invalid, "payload.template.ttl", "at least 1 second")
		}
		if tm.Depth > MaxDepth {
			return reject.New(reject.Invalid, "payload.template.depth", "%d; at most %d", tm.Depth, MaxDepth)
		}
		if err := checkTerms(Terms{Exp: 1, Images: tm.Images, Ceilings: tm.Ceilings, Caveats: tm.Caveats}, "payload.template"); err != nil {
			return err
		}
		if p.Max == 0 {
			return reject.New(reject.Invalid, "payload.max", "at least 1")
		}
		if err := checkRate(p.Rate, "payload.rate"); err != nil {
			return err
		}
		if len(p.Events) == 0 {
			return reject.New(reject.Invalid, "payload.events", "no events: a policy mints on at least one")
		}
		if err := set(p.Events, "payload.events", checkEvent); err != nil {
			return err
		}
		return nil
	case t.Invocation != nil:
		i := t.Invocation
		return common(i.V, i.Iat, 0, false)
	case t.Amendment != nil:
		a := t.Amendment
		if err := common(a.V, a.Iat, 0, false); err != nil {
			return err
		}
		if a.Seq == 0 {
			return reject.New(reject.Invalid, "payload.seq", "amendments count from 1")
		}
		return checkTerms(a.Terms(), "payload")
	case t.Revocation != nil:
		return common(t.Revocation.V, 0, 0, false)
	case t.Checkpoint != nil:
		c := t.Checkpoint
		if err := common(c.V, 0, 0, false); err != nil {
			return err
		}
		if c.Seq == 0 {
			return reject.New(reject.Invalid, "payload.seq", "checkpoints count from 1")
		}
		return nil
	case t.Decision != nil:
		d := t.Decision
		if d.V != Version {
			return reject.New(reject.Invalid, "payload.v", "%d, want %d", d.V, Version)
		}
		if d.Allow != (d.Code == "") {
			return reject.New(reject.Invalid, "payload.code", "a denial has a code and an allowed run none")
		}
		return nil
	}
	return reject.New(reject.Invalid, "payload", "no payload")
}

func common(v, iat, exp uint64, hasExp bool) error {
	if v != Version {
		return reject.New(reject.Invalid, "payload.v", "%d, want %d", v, Version)
	}
	if hasExp && exp <= iat {
		return reject.New(reject.Invalid, "payload.exp", "%d is not after iat %d", exp, iat)
	}
	return nil
}

// checkTerms checks terms' shapes: sets sorted and bounded, classes
// known, ceilings at least 1 µJ, caveats well formed.
func checkTerms(t Terms, where string) error {
	if len(t.Images) == 0 || len(t.Images) > MaxImages {
		return reject.New(reject.Invalid, where+".images", "%d images; 1 to %d", len(t.Images), MaxImages)
	}
	if len(t.Ceilings) == 0 || len(t.Ceilings) > MaxClasses {
		return reject.New(reject.Invalid, where+".ceilings", "%d classes; 1 to %d", len(t.Ceilings), MaxClasses)
	}
	for c, uj := range t.Ceilings {
		if !c.Valid() {
			return reject.New(reject.Invalid, where+".ceilings."+string(c), "not a device class")
		}
		if uj == 0 {
			return reject.New(reject.Invalid, where+".ceilings."+string(c), "a ceiling of 0; leave the class out")
		}
	}
	cv, cw := t.Caveats, where+".caveats"
	if err := set(cv.Models, cw+".models", nil); err != nil {
		return err
	}
	if err := set(cv.Tiers, cw+".tiers", func(s string) error {
		if _, err := tier.Parse(s); err != nil {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	if err := set(cv.Hosts, cw+".hosts", func(s string) error { _, err := parsePattern(s); return err }); err != nil {
		return err
	}
	if err := set(cv.Paths, cw+".paths", checkPath); err != nil {
		return err
	}
	if cv.Rate != nil {
		return checkRate(*cv.Rate, cw+".rate")
	}
	return nil
}

func checkRate(r Rate, where string) error {
	if r.N == 0 || r.Per == 0 {
		return reject.New(reject.Invalid, where, "n and per are at least 1")
	}
	return nil
}

// set checks a text set's members: bounded, none empty, each by each
// (its order is the canonical form's).
func set(s []string, where string, each func(string) error) error {
	if len(s) > MaxSet {
		return reject.New(reject.Invalid, where, "%d members; at most %d", len(s), MaxSet)
	}
	for i, m := range s {
		if m == "" {
			return reject.New(reject.Invalid, where, "an empty member")
		}
		if each != nil {
			if err := each(m); err != nil {
				return reject.New(reject.Invalid, fmt.Sprintf("%s[%d]", where, i), "%q: %v", m, err)
			}
		}
	}
	return nil
}

func checkPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("not an absolute, clean path")
	}
	return nil
}

func checkEvent(e string) error {
	kind, name, ok := strings.Cut(e, ":")
	if !ok || name == "" || !slices.Contains([]string{"event", "pool-claim", "every"}, kind) {
		return fmt.Errorf("an event is event:NAME, pool-claim:POOL or every:SECONDS")
	}
	if kind == "every" {
		if strings.TrimLeft(name, "0123456789") != "" || strings.TrimLeft(name, "0") == "" || len(name) > 9 {
			return fmt.Errorf("every:SECONDS takes a whole number of seconds from 1")
		}
	}
	return nil
}

// Classes are terms' classes in canonical order.
func (t Terms) Classes() []device.Class {
	cs := make([]device.Class, 0, len(t.Ceilings))
	for c := range t.Ceilings {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b device.Class) int { return a.Rank() - b.Rank() })
	return cs
}

// Ceiling is terms' ceiling for c (0: none).
func (t Terms) Ceiling(c device.Class) energy.Microjoules { return t.Ceilings[c] }

// HasImage says whether a is one of terms' images.
func (t Terms) HasImage(a addr.Addr) bool {
	_, ok := slices.BinarySearchFunc(t.Images, a, func(x, y addr.Addr) int { return bytes.Compare(x[:], y[:]) })
	return ok
}
