package jcp

import (
	"fmt"
	"slices"

	"github.com/opensubstrate/sandbox/reject"
)

// Narrows checks child ⊑ parent term by term (§3.2, depth excluded),
// refusing at the first term that widens with that term's code, at
// where + the term. amend makes every refusal amend-widens (§8).
func Narrows(child, parent Terms, where string, amend bool) error {
	fail := func(code reject.Code, term, format string, args ...any) error {
		if amend {
			code = reject.AmendWidens
		}
		return reject.New(code, where+term, format, args...)
	}
	for _, a := range child.Images {
		if !parent.HasImage(a) {
			return fail(reject.WidenImages, "images", "%s is not among the parent's images", a)
		}
	}
	for _, c := range child.Classes() {
		pc, ok := parent.Ceilings[c]
		if !ok {
			return fail(reject.WidenCeiling, "ceilings."+string(c), "the parent gives no %s", c)
		}
		if child.Ceilings[c] > pc {
			return fail(reject.WidenCeiling, "ceilings."+string(c), "%s is above the parent's %s", child.Ceilings[c], pc)
		}
	}
	if child.Exp > parent.Exp {
		return fail(reject.WidenExpiry, "exp", "%d is after the parent's %d", child.Exp, parent.Exp)
	}
	cc, pc := child.Caveats, parent.Caveats
	if err := subset(cc.Models, pc.Models); err != nil {
		return fail(reject.WidenModels, "caveats.models", "%v", err)
	}
	if err := subset(cc.Tiers, pc.Tiers); err != nil {
		return fail(reject.WidenTiers, "caveats.tiers", "%v", err)
	}
	if pc.Hosts != nil {
		if cc.Hosts == nil {
			return fail(reject.WidenHosts, "caveats.hosts", "the parent limits hosts and the child does not")
		}
		for _, h := range cc.Hosts {
			p, err := parsePattern(h)
			if err != nil || !coveredBy(pc.Hosts, p) {
				return fail(reject.WidenHosts, "caveats.hosts", "%s is not covered by the parent's %v", h, pc.Hosts)
			}
		}
	}
	if pc.Paths != nil {
		if cc.Paths == nil {
			return fail(reject.WidenPaths, "caveats.paths", "the parent limits paths and the child does not")
		}
		for _, p := range cc.Paths {
			if !PathAllowed(pc.Paths, p) {
				return fail(reject.WidenPaths, "caveats.paths", "%s is not within the parent's %v", p, pc.Paths)
			}
		}
	}
	if pc.Runs != 0 && (cc.Runs == 0 || cc.Runs > pc.Runs) {
		return fail(reject.WidenRuns, "caveats.runs", "%s is above the parent's %d", runs(cc.Runs), pc.Runs)
	}
	if pr := pc.Rate; pr != nil {
		cr := cc.Rate
		if cr == nil || cr.N > pr.N || cr.Per < pr.Per {
			return fail(reject.WidenRate, "caveats.rate", "%s is faster than the parent's %d per %d s", rate(cr), pr.N, pr.Per)
		}
	}
	return nil
}

func runs(n uint64) string {
	if n == 0 {
		return "no limit"
	}
	return fmt.Sprint(n)
}

func rate(r *Rate) string {
	if r == nil {
		return "no limit"
	}
	return fmt.Sprintf("%d per %d s", r.N, r.Per)
}

func subset(child, parent []string) error {
	if parent == nil {
		return nil
	}
	if child == nil {
		return fmt.Errorf("the parent limits it to %v and the child does not", parent)
	}
	for _, m := range child {
		if !slices.Contains(parent, m) {
			return fmt.Errorf("%s is not among the parent's %v", m, parent)
		}
	}
	return nil
}

// PathAllowed says whether the paths caveat ps (nil: no caveat) allows
// path p: absolute and clean (a path with ".." is never below anything),
// and equal to one, or below it.
func PathAllowed(ps []string, p string) bool {
	if ps == nil {
		return true
	}
	if checkPath(p) != nil {
		return false
	}
	for _, r := range ps {
		if p == r || r == "/" || len(p) > len(r) && p[:len(r)] == r && p[len(r)] == '/' {
			return true
		}
	}
	return false
}

// delegates checks a child grant against its parent grant: depth, then
// the terms (§3.2).
func delegates(child, parent *Grant, where string) error {
	if parent.Depth == 0 {
		return reject.New(reject.DepthExhausted, where+"depth", "the parent grant may not be delegated (depth 0)")
	}
	if child.Depth > parent.Depth-1 {
		return reject.New(reject.WidenDepth, where+"depth", "%d; the parent allows at most %d below it", child.Depth, parent.Depth-1)
	}
	return Narrows(child.Terms(), parent.Terms(), where, false)
}
