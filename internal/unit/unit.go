package unit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// Type is the type tag of a unit's canonical JSON.
const Type = "sandbox.unit/1"

// Unit is a unit of work.
type Unit struct {
	Type    string            `json:"type"`
	Kind    tier.Kind         `json:"kind"`
	Image   addr.Addr         `json:"image"`
	Entry   string            `json:"entry"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Devices []device.Class    `json:"devices"`
	Grants  addr.Addr         `json:"grants"`
	// Dir is the working directory of a native unit; "" means /tmp.
	Dir string `json:"dir,omitempty"`
	// Root is the root filesystem a native unit runs in: the address of
	// an imported image's listing (sandbox.rootfs/1). Zero: the host's
	// system directories, read-only.
	Root addr.Addr `json:"root,omitzero"`
	// Limits are the limits the unit ran under, as applied: sealed with
	// it, so that the attestation binds them and a replay applies them.
	Limits Limits `json:"limits"`
}

// Limits bound one run. Zero means none (or, for the fields an executor
// does not use, not applicable).
type Limits struct {
	// DeadlineMS is the wall-clock deadline in milliseconds.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// MemoryBytes is the memory limit of the run's cgroup (S1).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids is the run's process and thread limit (S1).
	Pids int64 `json:"pids,omitempty"`
	// CPUMillis is the CPU quota in thousandths of a CPU (S1): 1500 is
	// one and a half CPUs.
	CPUMillis int64 `json:"cpu_millis,omitempty"`
	// MemoryPages is the WebAssembly memory limit in 64 KiB pages (S2).
	MemoryPages int64 `json:"memory_pages,omitempty"`
	// WorkspaceBytes is the size bound of the live sandbox's workspace the
	// unit ran in (its own filesystem: a write past it fails with ENOSPC);
	// absent where it had none.
	WorkspaceBytes int64 `json:"workspace_bytes,omitempty"`
}

// Normalize validates u and puts it in canonical form.
func (u *Unit) Normalize() error {
	u.Type = Type
	if _, err := u.Kind.Base(); err != nil {
		return reject.New(reject.Invalid, "unit.kind", "%v", err)
	}
	if u.Image.IsZero() {
		return reject.New(reject.MissingField, "unit.image", "a unit names its image by content address")
	}
	if u.Entry == "" {
		return reject.New(reject.MissingField, "unit.entry", "a unit names its entry point")
	}
	if !u.Root.IsZero() && u.Kind != tier.Native {
		return reject.New(reject.Invalid, "unit.root", "a root filesystem is for native units; a WebAssembly module has none")
	}
	if u.Grants.IsZero() {
		return reject.New(reject.MissingField, "unit.grants", "a unit binds its grant set by content address")
	}
	if u.Args == nil {
		u.Args = []string{}
	}
	if u.Env == nil {
		u.Env = map[string]string{}
	}
	for k := range u.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return reject.New(reject.Invalid, "unit.env", "variable name %q: names are non-empty and hold no '=' or NUL", k)
		}
		if strings.ContainsRune(u.Env[k], 0) {
			return reject.New(reject.Invalid, "unit.env."+k, "value holds a NUL byte")
		}
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"deadline_ms", u.Limits.DeadlineMS}, {"memory_bytes", u.Limits.MemoryBytes}, {"pids", u.Limits.Pids}, {"cpu_millis", u.Limits.CPUMillis}, {"memory_pages", u.Limits.MemoryPages}} {
		if l.v < 0 {
			return reject.New(reject.Invalid, "unit.limits."+l.name, "negative")
		}
	}
	for i, a := range u.Args {
		if strings.ContainsRune(a, 0) {
			return reject.New(reject.Invalid, fmt.Sprintf("unit.args[%d]", i), "argument holds a NUL byte")
		}
	}
	for _, c := range u.Devices {
		if !c.Valid() {
			return reject.New(reject.Invalid, "unit.devices", "unknown device class %q", c)
		}
	}
	// A copy: the caller's slice (shared by a value receiver) stays as it
	// was; Compact would zero its tail.
	u.Devices = slices.Clone(u.Devices)
	slices.SortFunc(u.Devices, func(a, b device.Class) int { return a.Rank() - b.Rank() })
	u.Devices = slices.Compact(u.Devices)
	if u.Devices == nil {
		u.Devices = []device.Class{}
	}
	return nil
}

// Canonical returns u's canonical JSON and content address.
func (u Unit) Canonical() ([]byte, addr.Addr, error) {
	if err := u.Normalize(); err != nil {
		return nil, addr.Addr{}, err
	}
	b, err := jcs.Marshal(u)
	if err != nil {
		return nil, addr.Addr{}, err
	}
	return b, addr.Of(b), nil
}

// Decode reads a unit from canonical JSON, refusing anything not canonical.
func Decode(b []byte) (Unit, error) {
	var u Unit
	if err := jcs.Unmarshal(b, &u); err != nil {
		return Unit{}, err
	}
	if u.Type != Type {
		return Unit{}, reject.New(reject.Invalid, "unit.type", "%q, want %q", u.Type, Type)
	}
	c := u
	c.Devices = slices.Clone(u.Devices)
	if err := c.Normalize(); err != nil {
		return Unit{}, err
	}
	if !slices.Equal(c.Devices, u.Devices) {
		return Unit{}, reject.New(reject.NonCanonical, "unit.devices", "device classes must be listed once each, in canonical order")
	}
	return u, nil
}

// Requirement computes the tier u needs under grants g, after checking
// that every device class u asks for is granted.
func (u Unit) Requirement(g grant.Set) (tier.Requirement, error) {
	for _, c := range u.Devices {
		if _, ok := g.Budget(c); !ok {
			return tier.Requirement{}, &grant.Error{Grant: strings.ToLower(string(c)), Field: "compute",
				Why: fmt.Sprintf("the unit asks for device class %s, and no compute grant gives it (add --grant %s:ENERGY)", c, strings.ToLower(string(c)))}
		}
	}
	return tier.Require(u.Kind, g.Needs()...)
}
