package authority

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

// Principal is who asks: its name (the owner its sandboxes are kept
// under: "local", "token:…") and its policies, its own first, then the
// narrowings it asked to be held to. Every one must allow a grant.
type Principal struct {
	Name     string
	Policies []Policy
}

// Narrowed is p held to n as well.
func (p Principal) Narrowed(n Policy) Principal {
	return Principal{Name: p.Name, Policies: append(slices.Clone(p.Policies), n)}
}

// Ask is what a principal asks to be given.
type Ask struct {
	// Action names what is asked, for the refusal and the log: "run",
	// "create", "claim", "resume", "import", "exec", "files", "fleet".
	Action string
	Grants grant.Set
	// Tier is the tier the run or sandbox would run at.
	Tier tier.Tier
	// Devices are the device classes the unit asks for (Cpu is implied).
	Devices []device.Class
	// Image is the image root filesystem it runs in (zero: the host's).
	Image addr.Addr
	// Reads are host files the host reads to make the unit (a module, a
	// program, a VM image's manifest): each must be in Readable or
	// beneath a path the principal may grant.
	Reads []string
	// Own are the workspaces of the principal's own sandboxes: granting
	// them, or beneath them, is every principal's right.
	Own []string
	// Readable are host directories every run sees read-only (the
	// system directories): reading a program there needs no grant.
	Readable []string
}

// DeniedError is a grant the principal may not give.
type DeniedError struct {
	Principal string
	Action    string
	// Grant is what was refused, in the command line's syntax
	// ("fs:/etc:rw", "net:example.com:443", "tier:S0").
	Grant string
	// Rule is the policy member that refused it ("paths", "net", …),
	// and Policy which policy of the chain (0: the principal's own; 1
	// and up: its narrowings).
	Rule   string
	Policy int
	Why    string
}

func (e *DeniedError) Error() string {
	by := ""
	if e.Policy > 0 {
		by = " (a narrowing it asked for)"
	}
	return fmt.Sprintf("denied: %s may not %s with %s: rule %q of its policy%s: %s", e.Principal, e.Action, e.Grant, e.Rule, by, e.Why)
}

// Unwrap makes it a denial (the denied category).
func (e *DeniedError) Unwrap() error { return grant.ErrDenied }

// Check reports whether p may be given what a asks: nil, or the first
// *DeniedError.
func Check(p Principal, a Ask) error { return p.each(a, Policy.check) }

// CheckReads is Check of a.Reads alone: whether the host may read those
// files for the principal to make a unit (before it knows the tier).
func CheckReads(p Principal, a Ask) error { return p.each(a, Policy.checkReads) }

// CheckImage is Check of a.Image alone: whether the principal may run in
// that image root filesystem, asked before the host looks into it for
// the program (what is in an image it may not use is not its to learn).
func CheckImage(p Principal, a Ask) error { return p.each(a, Policy.checkImage) }

// each asks every policy of p's chain, in order, with check.
func (p Principal) each(a Ask, check func(Policy, Ask) *DeniedError) error {
	if len(p.Policies) == 0 {
		return &DeniedError{Principal: p.Name, Action: a.Action, Grant: "anything", Rule: "policy", Why: "it has no policy"}
	}
	for i, pol := range p.Policies {
		if err := check(pol, a); err != nil {
			err.Principal, err.Action, err.Policy = p.Name, a.Action, i
			return err
		}
	}
	return nil
}

func deny(g, rule, why string, args ...any) *DeniedError {
	return &DeniedError{Grant: g, Rule: rule, Why: fmt.Sprintf(why, args...)}
}

func (p Policy) check(a Ask) *DeniedError {
	if !slices.Contains(p.Tiers, a.Tier) {
		return deny("tier:"+a.Tier.String(), "tiers", "%s is not among its tiers (%s)", a.Tier, listOf(p.Tiers))
	}
	for _, s := range a.Grants.Storage {
		g := fmt.Sprintf("fs:%s:%s", s.Path, s.Mode)
		if slices.ContainsFunc(a.Own, func(w string) bool { return grant.Within(w, s.Path) }) {
			continue
		}
		if !p.mayGrantPath(s.Path, s.Mode) {
			return deny(g, "paths", "%s is beneath none of the roots it may grant %s (%s), nor one of its own sandboxes' workspaces", s.Path, modeName(s.Mode), p.roots())
		}
	}
	for _, n := range a.Grants.Net {
		if !p.mayReach(n.Host, n.Port) {
			return deny(n.String(), "net", "%s port %d is not among its destinations (%s)", n.Host, n.Port, p.dests())
		}
		for _, in := range n.Inject {
			if !slices.Contains(p.Secrets, Any) && !slices.Contains(p.Secrets, in.Secret) {
				return deny(n.String()+" inject "+in.Header+"="+in.Secret, "secrets", "%s is not among the secrets it may have injected (%s)", in.Secret, listOf(p.Secrets))
			}
		}
	}
	for _, kv := range a.Grants.KV {
		if !p.mayUseNamespace(kv.Namespace) {
			return deny(fmt.Sprintf("kv:%s:%s", kv.Namespace, kv.Mode), "kv", "namespace %s is not among its namespaces (%s)", kv.Namespace, listOf(p.KV))
		}
	}
	classes := slices.Clone(a.Devices)
	for _, c := range a.Grants.Compute {
		classes = append(classes, c.Class)
		b, ok := p.budget(c.Class)
		switch {
		case !ok:
			return deny(computeGrant(c), "compute", "device class %s is not among its classes (%s)", c.Class, p.classes())
		case b.Max > 0 && c.Budget > b.Max:
			return deny(computeGrant(c), "compute", "a budget of %s is above its ceiling of %s for %s", c.Budget, b.Max, c.Class)
		}
	}
	for _, c := range classes {
		if _, ok := p.budget(c); !ok && c != device.CPU {
			return deny("device:"+strings.ToLower(string(c)), "compute", "device class %s is not among its classes (%s)", c, p.classes())
		}
	}
	if err := p.checkImage(a); err != nil {
		return err
	}
	return p.checkReads(a)
}

func (p Policy) checkImage(a Ask) *DeniedError {
	if !a.Image.IsZero() && !slices.Contains(p.Images, Any) && !slices.Contains(p.Images, a.Image.String()) {
		return deny("image:"+a.Image.String(), "images", "the image root filesystem %s is not among its images (%s)", a.Image.Short(), listOf(p.Images))
	}
	return nil
}

func (p Policy) checkReads(a Ask) *DeniedError {
	for _, r := range a.Reads {
		// Every root below is compared by its name: /usr/../root/x
		// would be "beneath /usr".
		if !filepath.IsAbs(r) || filepath.Clean(r) != r {
			return deny("program:"+r, "paths", "the host would read %s to make the run, which is not an absolute, clean path (no . or .. parts, no doubled or trailing /)", r)
		}
		if slices.ContainsFunc(a.Readable, func(d string) bool { return grant.Within(d, r) }) ||
			slices.ContainsFunc(a.Own, func(w string) bool { return grant.Within(w, r) }) || p.mayGrantPath(r, grant.RO) {
			continue
		}
		return deny("program:"+r, "paths", "the host would read %s to make the run, and it is beneath none of the roots it may grant (%s), nor the system directories", r, p.roots())
	}
	return nil
}

func (p Policy) mayGrantPath(path string, mode grant.Mode) bool {
	return slices.ContainsFunc(p.Paths, func(r Path) bool {
		return grant.Within(r.Root, path) && (mode == grant.RO || r.Mode == grant.RW)
	})
}

func (p Policy) mayReach(host string, port int) bool {
	return slices.ContainsFunc(p.Net, func(d Dest) bool {
		pd, err := parseDest(d.Host)
		return err == nil && (d.Port == 0 || d.Port == port) && pd.matches(host)
	})
}

func (p Policy) mayUseNamespace(ns string) bool {
	return slices.ContainsFunc(p.KV, func(pat string) bool {
		if pre, ok := strings.CutSuffix(pat, "*"); ok {
			return strings.HasPrefix(ns, pre)
		}
		return pat == ns
	})
}

func (p Policy) budget(c device.Class) (Budget, bool) {
	for _, b := range p.Compute {
		if b.Class == c {
			return b, true
		}
	}
	return Budget{}, false
}

func modeName(m grant.Mode) string {
	if m == grant.RW {
		return "read-write"
	}
	return "read-only"
}

func (p Policy) roots() string {
	var s []string
	for _, r := range p.Paths {
		s = append(s, r.Root+":"+string(r.Mode))
	}
	return listOf(s)
}

func (p Policy) dests() string {
	var s []string
	for _, d := range p.Net {
		if d.Port == 0 {
			s = append(s, d.Host+":any port")
		} else {
			s = append(s, fmt.Sprintf("%s:%d", d.Host, d.Port))
		}
	}
	return listOf(s)
}

func (p Policy) classes() string {
	var s []string
	for _, b := range p.Compute {
		if b.Max > 0 {
			s = append(s, fmt.Sprintf("%s up to %s", b.Class, b.Max))
		} else {
			s = append(s, string(b.Class))
		}
	}
	return listOf(s)
}

func listOf[T any](l []T) string {
	if len(l) == 0 {
		return "none"
	}
	s := make([]string, len(l))
	for i, x := range l {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// computeGrant is a compute grant in the command line's syntax.
func computeGrant(c grant.Compute) string {
	return strings.ToLower(string(c.Class)) + ":" + strings.ReplaceAll(c.Budget.String(), " ", "")
}
