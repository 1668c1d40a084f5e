package tier

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseAndText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Tier
	}{{"S2", S2}, {"s5", S5}, {"sandbox", S2}, {"Sovereign", S7}, {"bare", S0}} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"S8", "", "2", "kvm"} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v", bad, err)
		}
	}
	var x Tier
	if err := x.UnmarshalText([]byte("s2")); err == nil {
		t.Error("wire form accepted lower case")
	}
	if err := x.UnmarshalText([]byte("S6")); err != nil || x != S6 {
		t.Error("UnmarshalText(S6)")
	}
	if _, err := Tier(9).MarshalText(); err == nil {
		t.Error("MarshalText(9)")
	}
}

func TestRequire(t *testing.T) {
	tests := []struct {
		name  string
		kind  Kind
		needs []Need
		want  Tier
		why   string
	}{
		{"native", Native, nil, S1, "native unit runs at S1"},
		{"wasm", Wasm, nil, S2, "wasm unit runs at S2"},
		{"vm", VM, nil, S5, "vm unit runs at S5"},
		{"wasm with a kernel need", Wasm, []Need{{S5, "grant kernel needs a kernel boundary"}}, S5, "grant kernel"},
		{"native confidential", Native, []Need{{S6, "grant confidential"}}, S6, "grant confidential"},
		{"highest need wins", Native, []Need{{S6, "c"}, {S7, "locality"}, {S5, "k"}}, S7, "locality"},
		{"lower need ignored", VM, []Need{{S1, "net"}}, S5, "vm unit"},
	}
	for _, tc := range tests {
		r, err := Require(tc.kind, tc.needs...)
		if err != nil || r.Tier != tc.want || !strings.Contains(r.Why, tc.why) {
			t.Errorf("%s: Require = %+v, %v; want %s (%q)", tc.name, r, err, tc.want, tc.why)
		}
	}
	if _, err := Require("elf"); err == nil {
		t.Error("unknown kind accepted")
	}
}

func ptr(t Tier) *Tier { return &t }

func TestChoose(t *testing.T) {
	avail := Availability{
		S1: {Available: true},
		S2: {Available: true},
		S0: {Available: true},
		S5: {Reason: "no /dev/kvm and no qemu-system-x86_64"},
	}
	s2 := Requirement{S2, "a wasm unit runs at S2"}
	s1 := Requirement{S1, "a native unit runs at S1"}
	tests := []struct {
		name    string
		req     Requirement
		ask     Request
		want    Tier
		wantErr error
		reason  string
	}{
		{"required", s2, Request{}, S2, nil, "wasm unit"},
		{"explicit same", s2, Request{Tier: ptr(S2)}, S2, nil, ""},
		{"below", s2, Request{Tier: ptr(S1)}, 0, ErrBelowRequired, ""},
		{"bare for wasm", s2, Request{Tier: ptr(S0)}, 0, ErrBelowRequired, ""},
		{"bare for native", s1, Request{Tier: ptr(S0)}, S0, nil, "explicit request"},
		{"above without escalate", s1, Request{Tier: ptr(S2)}, 0, ErrNotEscalated, ""},
		{"escalate", s1, Request{Tier: ptr(S2), Escalate: true}, S2, nil, "escalated on explicit request from S1 to S2"},
		{"escalate to unavailable", s2, Request{Tier: ptr(S5), Escalate: true}, 0, ErrUnavailable, ""},
		{"required unavailable", Requirement{S6, "grant confidential"}, Request{}, 0, ErrUnavailable, ""},
		{"escalate flag alone does nothing", s2, Request{Escalate: true}, S2, nil, ""},
	}
	for _, tc := range tests {
		c, err := Choose(tc.req, tc.ask, avail)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: Choose = %+v, %v; want %v", tc.name, c, err, tc.wantErr)
			}
			continue
		}
		if err != nil || c.Chosen != tc.want || c.Required != tc.req.Tier || !strings.Contains(c.Reason, tc.reason) {
			t.Errorf("%s: Choose = %+v, %v; want %s", tc.name, c, err, tc.want)
		}
	}
}

func TestUnavailableErrorNamesEverything(t *testing.T) {
	avail := Availability{S1: {Available: true}, S2: {Available: true}, S5: {Reason: "KVM hangs at boot"}}
	_, err := Choose(Requirement{S5, "a vm unit runs at S5"}, Request{}, avail)
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"S5", "MicroVM", "KVM hangs at boot", "available tiers: S1, S2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	_, err = Choose(Requirement{S7, "locality"}, Request{}, avail)
	if !strings.Contains(err.Error(), "no executor") {
		t.Errorf("missing tier: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("S2")
	f.Add("sovereign")
	f.Fuzz(func(t *testing.T, s string) {
		if tr, err := Parse(s); err == nil && !tr.Valid() {
			t.Fatalf("Parse(%q) = invalid %d", s, tr)
		}
		var tr Tier
		if tr.UnmarshalText([]byte(s)) == nil && tr.String() != s {
			t.Fatalf("UnmarshalText(%q) prints %q", s, tr)
		}
	})
}

// TestKeptKeepsOnlyAvailable: an available answer is kept; an
// unavailable one is returned and the next Get probes again.
func TestKeptKeepsOnlyAvailable(t *testing.T) {
	var k Kept
	n := 0
	probe := func() Probe {
		n++
		return Probe{Available: n >= 2, Reason: strconv.Itoa(n)}
	}
	for i, want := range []Probe{{Reason: "1"}, {Available: true, Reason: "2"}, {Available: true, Reason: "2"}} {
		if got := k.Get(probe); got.Available != want.Available || got.Reason != want.Reason {
			t.Errorf("get %d: %+v, want %+v", i, got, want)
		}
	}
	if n != 2 {
		t.Errorf("%d probes, want 2", n)
	}
}
