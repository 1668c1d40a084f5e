package unit

import (
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

func sample() Unit {
	return Unit{
		Kind: tier.Wasm, Image: addr.Of([]byte("module")), Entry: "hello.wasm",
		Args: []string{"a", "b"}, Env: map[string]string{"Z": "1", "A": "2"},
		Devices: []device.Class{device.GPU, device.CPU, device.GPU}, Grants: addr.Of([]byte("g")),
		Limits: Limits{DeadlineMS: 60000, MemoryPages: 4096},
	}
}

func TestCanonical(t *testing.T) {
	b, a, err := sample().Canonical()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"args":["a","b"],"devices":["Cpu","Gpu"],"entry":"hello.wasm","env":{"A":"2","Z":"1"},"grants":"` + addr.Of([]byte("g")).String() + `","image":"` + addr.Of([]byte("module")).String() + `","kind":"wasm","limits":{"deadline_ms":60000,"memory_pages":4096},"type":"sandbox.unit/1"}`
	if string(b) != want {
		t.Fatalf("canonical\n got %s\nwant %s", b, want)
	}
	u, err := Decode(b)
	if err != nil || u.Entry != "hello.wasm" {
		t.Fatalf("Decode = %+v, %v", u, err)
	}
	if _, a2, _ := u.Canonical(); a2 != a {
		t.Fatal("address changed on round trip")
	}
	other := sample()
	other.Args = append(other.Args, "c")
	if _, a3, _ := other.Canonical(); a3 == a {
		t.Fatal("different args, same address")
	}
}

func TestInvalid(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*Unit)
		want reject.Code
	}{
		{"kind", func(u *Unit) { u.Kind = "elf" }, reject.Invalid},
		{"image", func(u *Unit) { u.Image = addr.Addr{} }, reject.MissingField},
		{"entry", func(u *Unit) { u.Entry = "" }, reject.MissingField},
		{"grants", func(u *Unit) { u.Grants = addr.Addr{} }, reject.MissingField},
		{"env name", func(u *Unit) { u.Env["A=B"] = "x" }, reject.Invalid},
		{"nul arg", func(u *Unit) { u.Args[0] = "a\x00" }, reject.Invalid},
		{"class", func(u *Unit) { u.Devices = []device.Class{"fpga"} }, reject.Invalid},
	}
	for _, tc := range tests {
		u := sample()
		tc.mut(&u)
		if _, _, err := u.Canonical(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	b, _, _ := sample().Canonical()
	bad := strings.Replace(string(b), `["Cpu","Gpu"]`, `["Gpu","Cpu"]`, 1)
	if _, err := Decode([]byte(bad)); !errors.Is(err, reject.NonCanonical) {
		t.Errorf("unordered devices: %v", err)
	}
	if _, err := Decode([]byte(strings.Replace(string(b), `"kind"`, `"kinc":1,"kind"`, 1))); !errors.Is(err, reject.UnknownField) {
		t.Errorf("unknown field: %v", err)
	}
}

func TestRequirement(t *testing.T) {
	u := sample()
	g, _ := grant.ParseArgs([]string{"cpu:1J"}, "/")
	if _, err := u.Requirement(g); err == nil || !strings.Contains(err.Error(), "--grant gpu:ENERGY") {
		t.Fatalf("ungranted gpu: %v", err)
	}
	g, _ = grant.ParseArgs([]string{"cpu:1J", "gpu:1J"}, "/")
	r, err := u.Requirement(g)
	if err != nil || r.Tier != tier.S2 {
		t.Fatalf("Requirement = %+v, %v", r, err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _, _ := sample().Canonical()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := Decode(b)
		if err != nil {
			return
		}
		c, _, err := u.Canonical()
		if err != nil || string(c) != string(b) {
			t.Fatalf("Decode accepted %q, canonical form %q (%v)", b, c, err)
		}
	})
}
