package authority

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

// Type is a policy document's "type".
const Type = "sandbox.policy/1"

// Any is the pattern that matches every name in a list that takes
// patterns (net hosts: every DNS name; secrets, key-value namespaces,
// images: every one).
const Any = "*"

// MaxPolicy bounds a policy document's bytes.
const MaxPolicy = 1 << 20

// Policy is what a principal may grant. The zero value allows nothing.
type Policy struct {
	// Paths are the host directories it may grant, and beneath them.
	Paths []Path `json:"paths"`
	// Net are the destinations it may grant connections to.
	Net []Dest `json:"net"`
	// Secrets are the credential references ("env:NAME",
	// "file:/path") it may have injected into requests, or Any.
	Secrets []string `json:"secrets"`
	// KV are the key-value namespaces it may grant: a name, a prefix
	// ending in "*", or Any.
	KV []string `json:"kv"`
	// Tiers are the tiers its runs and sandboxes may run at.
	Tiers []tier.Tier `json:"tiers"`
	// Compute are the device classes it may grant, with a ceiling each.
	Compute []Budget `json:"compute"`
	// Images are the image root filesystems (b3:…) it may run in, or Any.
	Images []string `json:"images"`
	// WorkspaceBytes bounds each of its sandboxes' workspaces (0: the
	// host's default).
	WorkspaceBytes int64 `json:"workspace_bytes,omitempty"`
}

// Path is a host directory a principal may grant, and everything
// beneath it, in Mode (rw allows ro too).
type Path struct {
	Root string     `json:"root"`
	Mode grant.Mode `json:"mode"`
}

// Dest is a network destination a principal may grant: Host is a DNS
// name, "*.suffix" (any name below suffix), Any (any DNS name, never an
// IP address), an IP address, or an IP prefix ("10.0.0.0/8"); Port 0
// is any port.
type Dest struct {
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
}

// Budget is a device class a principal may grant, with the largest
// budget it may give one run (0: no ceiling).
type Budget struct {
	Class device.Class       `json:"class"`
	Max   energy.Microjoules `json:"max_uj,omitempty"`
}

// Default is the policy of a principal the operator wrote none for (a
// token with no policy, an MCP connection without --policy): nothing on
// the host beyond its own sandboxes' workspaces (which Check allows to
// every principal), no network, no secret, no key-value namespace; the
// tiers that confine (S1, S2, S5); the CPU at any budget (a budget only
// bounds the run); any image the operator imported.
func Default() Policy {
	return Policy{
		Tiers:   []tier.Tier{tier.S1, tier.S2, tier.S5},
		Compute: []Budget{{Class: device.CPU}},
		Images:  []string{Any},
	}
}

// Operator is the policy of the machine's owner (the service's own user
// at its socket, or root; whoever runs the CLI in-process): every path,
// destination, secret, namespace, tier, device class and image. What no
// grant may reach (the state directory, a link, sandbox's own binaries)
// is refused by the executors whoever asks.
func Operator() Policy {
	p := Policy{
		Paths:   []Path{{Root: "/", Mode: grant.RW}},
		Net:     []Dest{{Host: Any}, {Host: "0.0.0.0/0"}, {Host: "::/0"}},
		Secrets: []string{Any},
		KV:      []string{Any},
		Tiers:   slices.Clone(tier.All),
		Images:  []string{Any},
	}
	for _, c := range device.Classes {
		p.Compute = append(p.Compute, Budget{Class: c})
	}
	return p
}

// PolicyError is a policy document that cannot be read: where, and why.
type PolicyError struct {
	Where string // the field, e.g. "paths[1].root"
	Why   string
}

func (e *PolicyError) Error() string {
	if e.Where == "" {
		return "policy: " + e.Why
	}
	return "policy: " + e.Where + ": " + e.Why
}

// Invalid reports true: a malformed policy is bad input.
func (e *PolicyError) Invalid() bool { return true }

// policyWire is a policy document: a member left out is the Default's.
type policyWire struct {
	Type           string        `json:"type,omitempty"`
	Paths          *[]Path       `json:"paths"`
	Net            *[]Dest       `json:"net"`
	Secrets        *[]string     `json:"secrets"`
	KV             *[]string     `json:"kv"`
	Tiers          *[]string     `json:"tiers"`
	Compute        *[]budgetWire `json:"compute"`
	Images         *[]string     `json:"images"`
	WorkspaceBytes *int64        `json:"workspace_bytes"`
}

// budgetWire is a Budget as people write it: "max": "100J".
type budgetWire struct {
	Class string `json:"class"`
	Max   string `json:"max,omitempty"`
	MaxUJ *int64 `json:"max_uj,omitempty"`
}

// Parse reads a policy document (JSON, "type": "sandbox.policy/1"
// optional). A member it leaves out is the Default's; a member it gives
// is exactly what it says (an empty list allows none). Unknown members,
// duplicate members and trailing data are refused.
func Parse(b []byte) (Policy, error) {
	if len(b) > MaxPolicy {
		return Policy{}, &PolicyError{Why: fmt.Sprintf("%d bytes; a policy is at most %d", len(b), MaxPolicy)}
	}
	if err := noDuplicates(b); err != nil {
		return Policy{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w policyWire
	if err := dec.Decode(&w); err != nil {
		return Policy{}, &PolicyError{Why: jsonWhy(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Policy{}, &PolicyError{Why: "more than one JSON value"}
	}
	if w.Type != "" && w.Type != Type {
		return Policy{}, &PolicyError{Where: "type", Why: fmt.Sprintf("%q: want %q", w.Type, Type)}
	}
	p := Default()
	if w.Paths != nil {
		p.Paths = *w.Paths
	}
	if w.Net != nil {
		p.Net = *w.Net
	}
	if w.Secrets != nil {
		p.Secrets = *w.Secrets
	}
	if w.KV != nil {
		p.KV = *w.KV
	}
	if w.Images != nil {
		p.Images = *w.Images
	}
	if w.WorkspaceBytes != nil {
		p.WorkspaceBytes = *w.WorkspaceBytes
	}
	if w.Tiers != nil {
		p.Tiers = nil
		for i, s := range *w.Tiers {
			t, err := tier.Parse(s)
			if err != nil {
				return Policy{}, &PolicyError{Where: fmt.Sprintf("tiers[%d]", i), Why: err.Error()}
			}
			p.Tiers = append(p.Tiers, t)
		}
	}
	if w.Compute != nil {
		p.Compute = nil
		for i, c := range *w.Compute {
			where := fmt.Sprintf("compute[%d]", i)
			class, err := device.ParseClass(c.Class)
			if err != nil {
				return Policy{}, &PolicyError{Where: where + ".class", Why: err.Error()}
			}
			var max energy.Microjoules
			switch {
			case c.Max != "" && c.MaxUJ != nil:
				return Policy{}, &PolicyError{Where: where, Why: "give max or max_uj, not both"}
			case c.Max != "":
				if max, err = energy.Parse(c.Max); err != nil {
					return Policy{}, &PolicyError{Where: where + ".max", Why: err.Error()}
				}
			case c.MaxUJ != nil:
				if *c.MaxUJ < 0 {
					return Policy{}, &PolicyError{Where: where + ".max_uj", Why: "negative"}
				}
				max = energy.Microjoules(*c.MaxUJ)
			}
			p.Compute = append(p.Compute, Budget{Class: class, Max: max})
		}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate checks that every rule of p is well formed.
func (p Policy) Validate() error {
	for i, r := range p.Paths {
		where := fmt.Sprintf("paths[%d]", i)
		if !filepath.IsAbs(r.Root) || filepath.Clean(r.Root) != r.Root {
			return &PolicyError{Where: where + ".root", Why: fmt.Sprintf("%q: want an absolute, clean path", r.Root)}
		}
		if r.Mode != grant.RO && r.Mode != grant.RW {
			return &PolicyError{Where: where + ".mode", Why: fmt.Sprintf("%q: want ro or rw", r.Mode)}
		}
	}
	for i, d := range p.Net {
		where := fmt.Sprintf("net[%d]", i)
		if _, err := parseDest(d.Host); err != nil {
			return &PolicyError{Where: where + ".host", Why: err.Error()}
		}
		if d.Port < 0 || d.Port > 65535 {
			return &PolicyError{Where: where + ".port", Why: "want 1..65535, or 0 (any port)"}
		}
	}
	for i, s := range p.Secrets {
		if s != Any && !strings.HasPrefix(s, "env:") && !strings.HasPrefix(s, "file:/") {
			return &PolicyError{Where: fmt.Sprintf("secrets[%d]", i), Why: fmt.Sprintf("%q: want env:NAME, file:/absolute/path or %q", s, Any)}
		}
	}
	for i, s := range p.KV {
		if s == "" || strings.Contains(strings.TrimSuffix(s, "*"), "*") {
			return &PolicyError{Where: fmt.Sprintf("kv[%d]", i), Why: fmt.Sprintf("%q: want a namespace, a prefix ending in '*', or %q", s, Any)}
		}
	}
	for i, t := range p.Tiers {
		if !t.Valid() {
			return &PolicyError{Where: fmt.Sprintf("tiers[%d]", i), Why: fmt.Sprintf("%v is no tier", t)}
		}
	}
	for i, c := range p.Compute {
		if !c.Class.Valid() {
			return &PolicyError{Where: fmt.Sprintf("compute[%d].class", i), Why: fmt.Sprintf("%q is no device class", c.Class)}
		}
	}
	for i, s := range p.Images {
		if s != Any && !strings.HasPrefix(s, "b3:") {
			return &PolicyError{Where: fmt.Sprintf("images[%d]", i), Why: fmt.Sprintf("%q: want an image's root filesystem address (b3:…) or %q", s, Any)}
		}
	}
	if p.WorkspaceBytes < 0 {
		return &PolicyError{Where: "workspace_bytes", Why: "negative"}
	}
	return nil
}

// Marshal writes p as a policy document that Parse reads back to p:
// every member given, so nothing falls back to the Default.
func (p Policy) Marshal() ([]byte, error) {
	w := policyWire{Type: Type, Paths: &p.Paths, Net: &p.Net, Secrets: &p.Secrets, KV: &p.KV, Images: &p.Images, WorkspaceBytes: &p.WorkspaceBytes}
	tiers := []string{}
	for _, t := range p.Tiers {
		tiers = append(tiers, t.String())
	}
	w.Tiers = &tiers
	compute := []budgetWire{}
	for _, c := range p.Compute {
		b := budgetWire{Class: string(c.Class)}
		if c.Max > 0 {
			uj := int64(c.Max)
			b.MaxUJ = &uj
		}
		compute = append(compute, b)
	}
	w.Compute = &compute
	for _, l := range []**[]string{&w.Secrets, &w.KV, &w.Images} {
		if **l == nil {
			*l = &[]string{}
		}
	}
	if *w.Paths == nil {
		w.Paths = &[]Path{}
	}
	if *w.Net == nil {
		w.Net = &[]Dest{}
	}
	return json.Marshal(w)
}

// jsonWhy names what is wrong with a JSON document.
func jsonWhy(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want %s, got %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.EOF):
		return "empty; want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: it ends early"
	}
	return err.Error()
}

// noDuplicates refuses a JSON document in which an object names a
// member twice (encoding/json keeps the last, silently).
func noDuplicates(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func(path string) error
	walk = func(path string) error {
		t, err := dec.Token()
		if err != nil {
			return &PolicyError{Why: jsonWhy(err)}
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return &PolicyError{Why: jsonWhy(err)}
				}
				key, _ := k.(string)
				if seen[key] {
					return &PolicyError{Where: strings.TrimPrefix(path+"."+key, "."), Why: "given twice"}
				}
				seen[key] = true
				if err := walk(path + "." + key); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		}
		if err != nil {
			return &PolicyError{Why: jsonWhy(err)}
		}
		return nil
	}
	return walk("")
}

// dest is a parsed Dest host.
type dest struct {
	any    bool         // every DNS name
	suffix string       // "*.suffix": ".suffix"
	name   string       // one DNS name
	prefix netip.Prefix // an address or a prefix
}

func parseDest(h string) (dest, error) {
	switch {
	case h == Any:
		return dest{any: true}, nil
	case strings.HasPrefix(h, "*."):
		s := strings.ToLower(h[1:])
		if len(s) < 2 || strings.Contains(s[1:], "*") {
			return dest{}, fmt.Errorf("%q: want *.example.com", h)
		}
		return dest{suffix: s}, nil
	case strings.Contains(h, "/"):
		p, err := netip.ParsePrefix(h)
		if err != nil {
			return dest{}, fmt.Errorf("%q: %v", h, err)
		}
		return dest{prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return dest{prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if h == "" || strings.ContainsAny(h, "*/ :") {
		return dest{}, fmt.Errorf("%q: want a DNS name, *.suffix, %q, an IP address or prefix", h, Any)
	}
	return dest{name: strings.ToLower(strings.TrimSuffix(h, "."))}, nil
}

// matches reports whether the destination allows host (a grant's:
// lower-case DNS name or IP literal).
func (d dest) matches(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return d.prefix.IsValid() && d.prefix.Contains(a.Unmap())
	}
	switch {
	case d.any:
		return true
	case d.suffix != "":
		return strings.HasSuffix(host, d.suffix)
	}
	return d.name != "" && d.name == host
}
