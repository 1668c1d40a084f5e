package tier

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Tier is a rung of the ladder, S0 to S7.
type Tier int

// The rungs.
const (
	S0 Tier = iota
	S1
	S2
	S3
	S4
	S5
	S6
	S7
)

// All lists every tier, lowest first.
var All = []Tier{S0, S1, S2, S3, S4, S5, S6, S7}

var names = [...]string{"Bare", "Capability", "Sandbox", "Partition", "Unikernel", "MicroVM", "Confidential", "Sovereign"}

// ErrSyntax is wrapped by Parse's error.
var ErrSyntax = errors.New("unknown tier")

// Valid reports whether t is S0..S7.
func (t Tier) Valid() bool { return t >= S0 && t <= S7 }

// String returns "S0".."S7".
func (t Tier) String() string {
	if !t.Valid() {
		return fmt.Sprintf("Tier(%d)", int(t))
	}
	return fmt.Sprintf("S%d", int(t))
}

// Name returns the rung's name, such as "Sandbox".
func (t Tier) Name() string {
	if !t.Valid() {
		return "?"
	}
	return names[t]
}

// Parse reads "S2", "s2" or a rung name such as "sandbox".
func Parse(s string) (Tier, error) {
	for _, t := range All {
		if strings.EqualFold(s, t.String()) || strings.EqualFold(s, t.Name()) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w %q: want S0..S7 or a rung name (Bare, Capability, Sandbox, Partition, Unikernel, MicroVM, Confidential, Sovereign)", ErrSyntax, s)
}

// MarshalText writes "S0".."S7".
func (t Tier) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrSyntax, int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads exactly "S0".."S7", the wire form.
func (t *Tier) UnmarshalText(b []byte) error {
	s := string(b)
	if len(s) == 2 && s[0] == 'S' && s[1] >= '0' && s[1] <= '7' {
		*t = Tier(s[1] - '0')
		return nil
	}
	return fmt.Errorf("%w %q: want S0..S7", ErrSyntax, s)
}

// Kind is the kind of a unit of work.
type Kind string

// The kinds.
const (
	Native Kind = "native" // a program for the host's OS and CPU
	Wasm   Kind = "wasm"   // a WebAssembly module (WASI preview 1)
	VM     Kind = "vm"     // a virtual machine image with its own kernel
)

// Base returns the lowest tier that runs a unit of kind k.
func (k Kind) Base() (Tier, error) {
	switch k {
	case Native:
		return S1, nil
	case Wasm:
		return S2, nil
	case VM:
		return S5, nil
	}
	return 0, fmt.Errorf("unknown unit kind %q: want native, wasm or vm", string(k))
}

// Need is one requirement a grant places on the tier, with its reason.
type Need struct {
	Tier Tier
	Why  string
}

// Requirement is the tier a unit needs and why.
type Requirement struct {
	Tier Tier
	Why  string
}

// Require returns the lowest tier that satisfies the unit's kind and every
// need of its grants. On a tie the kind's reason is kept.
func Require(kind Kind, needs ...Need) (Requirement, error) {
	base, err := kind.Base()
	if err != nil {
		return Requirement{}, err
	}
	r := Requirement{Tier: base, Why: fmt.Sprintf("a %s unit runs at %s (%s)", kind, base, base.Name())}
	for _, n := range needs {
		if !n.Tier.Valid() {
			return Requirement{}, fmt.Errorf("grant need %q names no tier", n.Why)
		}
		if n.Tier > r.Tier {
			r = Requirement{Tier: n.Tier, Why: n.Why}
		}
	}
	return r, nil
}

// Probe is a tier's earned status on this host.
type Probe struct {
	Available bool
	Reason    string  // why not, or what was verified
	Layers    []Layer // each confinement layer's answer, where the probe checks several
}

// Layer is one confinement layer's probe answer.
type Layer struct {
	Name   string
	OK     bool
	Detail string
}

// Availability maps each tier to its probe. A tier missing from the map is
// unavailable with reason "no executor".
type Availability map[Tier]Probe

// Available returns the available tiers, lowest first.
func (a Availability) Available() []Tier {
	var out []Tier
	for t, p := range a {
		if p.Available {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (a Availability) probe(t Tier) Probe {
	if p, ok := a[t]; ok {
		return p
	}
	return Probe{Reason: "no executor for this tier in this build"}
}

// Request is what the caller asked for: an explicit tier, if any, and
// whether going above the requirement is allowed.
type Request struct {
	Tier     *Tier
	Escalate bool
}

// Choice is the tier a unit runs at, with the requirement it satisfies.
type Choice struct {
	Required Tier
	Chosen   Tier
	Reason   string
}

// Errors Choose returns, wrapped with detail. Each says its category
// (Unavailable or Invalid) by a method, so that the one category map
// (internal/errs) needs to know no tier.
var (
	ErrUnavailable   error = category{"tier unavailable", false}
	ErrBelowRequired error = category{"tier below what the unit requires", true}
	ErrNotEscalated  error = category{"tier above the requirement without --escalate", true}
)

// category is a sentinel error that says its category.
type category struct {
	msg     string
	invalid bool
}

func (c category) Error() string { return c.msg }

// Category names its category in the one map (internal/errs): a tier
// this host cannot give is unavailable, a tier asked for wrongly invalid.
func (c category) Category() string {
	if c.invalid {
		return "invalid"
	}
	return "unavailable"
}

// UnavailableError says which tier cannot run here, why, and what can.
type UnavailableError struct {
	Tier      Tier
	Reason    string
	Available []Tier
}

func (e *UnavailableError) Error() string {
	avail := make([]string, len(e.Available))
	for i, t := range e.Available {
		avail[i] = t.String()
	}
	list := strings.Join(avail, ", ")
	if list == "" {
		list = "none"
	}
	return fmt.Sprintf("tier %s (%s) is unavailable on this host: %s; available tiers: %s", e.Tier, e.Tier.Name(), e.Reason, list)
}

// Unwrap returns ErrUnavailable.
func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// Choose picks the tier to run at and refuses it, with the probe's
// reason, when it is unavailable: a tier is never silently replaced.
func Choose(req Requirement, ask Request, avail Availability) (Choice, error) {
	c, err := Select(req, ask)
	if err != nil {
		return Choice{}, err
	}
	if p := avail.probe(c.Chosen); !p.Available {
		return Choice{}, &UnavailableError{Tier: c.Chosen, Reason: p.Reason, Available: avail.Available()}
	}
	return c, nil
}

// Select picks the tier to run at from the requirement and the request
// alone; the caller must still check that it is available (Choose does).
func Select(req Requirement, ask Request) (Choice, error) {
	c := Choice{Required: req.Tier, Chosen: req.Tier, Reason: req.Why}
	if ask.Tier != nil {
		t := *ask.Tier
		switch {
		case !t.Valid():
			return Choice{}, fmt.Errorf("%w: %d", ErrSyntax, int(t))
		case t == req.Tier:
		case t == S0 && req.Tier == S1:
			c.Chosen = S0
			c.Reason = req.Why + "; S0 on explicit request: trusted work, no confinement"
		case t < req.Tier:
			return Choice{}, fmt.Errorf("%w: %s was asked for, but %s", ErrBelowRequired, t, req.Why)
		case !ask.Escalate:
			return Choice{}, fmt.Errorf("%w: %s was asked for and the unit requires only %s; pass --escalate to run above the requirement", ErrNotEscalated, t, req.Tier)
		default:
			c.Chosen = t
			c.Reason = fmt.Sprintf("%s; escalated on explicit request from %s to %s", req.Why, req.Tier, t)
		}
	}
	return c, nil
}
