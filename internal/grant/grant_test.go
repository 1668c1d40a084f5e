package grant

import (
	"errors"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

var hexA = strings.Repeat("ab", 32)

func TestParse(t *testing.T) {
	tests := []struct {
		in    string
		check func(Set) bool
	}{
		{"net:api.example.com:443", func(s Set) bool { return s.Net[0].Host == "api.example.com" && s.Net[0].Port == 443 }},
		{"net:API.Example.COM.:443", func(s Set) bool { return s.Net[0].Host == "api.example.com" }},
		{"net:[::1]:8080", func(s Set) bool { return s.Net[0].Host == "::1" && s.Net[0].Port == 8080 }},
		{"net:10.0.0.1:53", func(s Set) bool { return s.Net[0].Host == "10.0.0.1" }},
		{"fs:./work:rw", func(s Set) bool { return s.Storage[0] == Storage{Path: "/home/u/work", Mode: RW} }},
		{"fs:./data:ro:quota=1GiB", func(s Set) bool { return s.Storage[0] == Storage{Path: "/home/u/data", Mode: RO, Quota: 1 << 30} }},
		{"fs:/abs/path/:rw:quota=1.5KiB", func(s Set) bool { return s.Storage[0] == Storage{Path: "/abs/path", Mode: RW, Quota: 1536} }},
		{"fs:/a:b/c:ro", func(s Set) bool { return s.Storage[0].Path == "/a:b/c" }},
		{"kv:cache:rw", func(s Set) bool { return s.KV[0] == KV{Namespace: "cache", Mode: RW} }},
		{"clock", func(s Set) bool { return s.Clock }},
		{"random", func(s Set) bool { return s.Random }},
		{"cpu:5J", func(s Set) bool { return s.Compute[0] == Compute{Class: device.CPU, Budget: 5 * energy.Joule} }},
		{"GPU:2Wh", func(s Set) bool { return s.Compute[0] == Compute{Class: device.GPU, Budget: 7200 * energy.Joule} }},
		{"exec:deny:b3:" + hexA, func(s Set) bool { return s.Exec.Deny[0] == addr.MustParse("b3:"+hexA) && len(s.Exec.Allow) == 0 }},
		{"exec:allow:b3:" + hexA, func(s Set) bool { return s.Exec.Allow[0] == addr.MustParse("b3:"+hexA) }},
		{"kernel", func(s Set) bool { return s.Kernel }},
		{"confidential", func(s Set) bool { return s.Confidential }},
		{"locality:eu-west", func(s Set) bool { return s.Locality == "eu-west" }},
	}
	for _, tc := range tests {
		s, err := ParseArgs([]string{tc.in}, "/home/u")
		if err != nil {
			t.Errorf("ParseArgs(%q) = %v", tc.in, err)
			continue
		}
		if !tc.check(s) {
			t.Errorf("ParseArgs(%q) = %+v", tc.in, s)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, field, why string }{
		{"net:example.com", "host:port", "want net:HOST:PORT"},
		{"net:example.com:0", "port", "1..65535"},
		{"net:example.com:http", "port", "1..65535"},
		{"net:exa mple.com:80", "host", "not a DNS name"},
		{"net:-bad.com:80", "host", "starts or ends"},
		{"fs:./work", "mode", "fs:PATH:ro"},
		{"fs:./work:rx", "mode", `"rx": want ro or rw`},
		{"fs::rw", "path", "empty"},
		{"fs:./w:rw:quota=lots", "quota", "want a number"},
		{"fs:./w:rw:quota=0.5B", "quota", "whole number"},
		{"kv:cache", "mode", "kv:NAMESPACE"},
		{"kv:ca/che:rw", "namespace", "character"},
		{"kv:cache:wo", "mode", "want ro or rw"},
		{"clock:now", "", "takes no arguments"},
		{"exec:maybe:b3:" + hexA, "list", "want allow or deny"},
		{"exec:deny:" + hexA, "address", "malformed content address"},
		{"exec:deny", "list", "exec:allow"},
		{"cpu", "budget", "joule budget"},
		{"cpu:5", "budget", "unit"},
		{"cpu:0.5uJ", "budget", "finer"},
		{"fpga:5J", "kind", "unknown grant kind"},
		{"locality:", "name", "1 to 128"},
	}
	for _, tc := range tests {
		_, err := ParseArgs([]string{tc.in}, "/")
		var ge *Error
		if !errors.As(err, &ge) {
			t.Errorf("ParseArgs(%q) = %v, want *Error", tc.in, err)
			continue
		}
		if ge.Grant != tc.in || ge.Field != tc.field || !strings.Contains(ge.Why, tc.why) {
			t.Errorf("ParseArgs(%q) = grant %q field %q why %q; want field %q, why containing %q", tc.in, ge.Grant, ge.Field, ge.Why, tc.field, tc.why)
		}
		if !strings.Contains(err.Error(), tc.in) {
			t.Errorf("message %q does not name the grant", err)
		}
	}
}

func TestNormalize(t *testing.T) {
	s, err := ParseArgs([]string{
		"net:b.example:443", "net:a.example:443", "net:a.example:80", "net:A.example:80",
		"fs:/z:ro", "fs:/a:rw", "fs:/a/:rw",
		"gpu:1J", "cpu:2J",
		"exec:deny:b3:" + strings.Repeat("ff", 32), "exec:deny:b3:" + hexA, "exec:deny:b3:" + hexA,
	}, "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Net) != 3 || s.Net[0].String() != "net:a.example:80" || s.Net[2].Host != "b.example" {
		t.Errorf("net = %+v", s.Net)
	}
	if len(s.Storage) != 2 || s.Storage[0].Path != "/a" {
		t.Errorf("storage = %+v", s.Storage)
	}
	if s.Compute[0].Class != device.CPU {
		t.Errorf("compute = %+v", s.Compute)
	}
	if len(s.Exec.Deny) != 2 || s.Exec.Deny[0].Hex() != hexA {
		t.Errorf("deny = %v", s.Exec.Deny)
	}
	for _, conflict := range [][]string{{"fs:/a:ro", "fs:/a:rw"}, {"cpu:1J", "cpu:2J"}, {"kv:x:ro", "kv:x:rw"}} {
		if _, err := ParseArgs(conflict, "/"); err == nil || !strings.Contains(err.Error(), "different terms") {
			t.Errorf("ParseArgs(%v) = %v, want a conflict", conflict, err)
		}
	}
}

func TestCanonical(t *testing.T) {
	var zero Set
	b, a, err := zero.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"exec":{"allow":[],"deny":[]},"type":"sandbox.grants/1"}` {
		t.Fatalf("zero set = %s", b)
	}
	s1, _ := ParseArgs([]string{"fs:/b:ro", "cpu:1J", "fs:/a:rw"}, "/")
	s2, _ := ParseArgs([]string{"cpu:1J", "fs:/a:rw", "fs:/b:ro"}, "/")
	b1, a1, _ := s1.Canonical()
	b2, a2, _ := s2.Canonical()
	if string(b1) != string(b2) || a1 != a2 || a1 == a {
		t.Fatalf("order changed the canonical form:\n%s\n%s", b1, b2)
	}
	want := `{"compute":[{"budget_uj":1000000,"class":"Cpu"}],"exec":{"allow":[],"deny":[]},"storage":[{"mode":"rw","path":"/a"},{"mode":"ro","path":"/b"}],"type":"sandbox.grants/1"}`
	if string(b1) != want {
		t.Fatalf("canonical = %s", b1)
	}
}

func TestParseJSON(t *testing.T) {
	in := `{
	  "net": [{"host": "API.example.com", "port": 443, "inject": [{"header": "Authorization", "secret": "env:API_TOKEN"}]}],
	  "storage": [{"path": "work", "mode": "rw", "quota": 1024}],
	  "compute": [{"class": "Cpu", "budget_uj": 5000000}],
	  "clock": true
	}`
	s, err := ParseJSON([]byte(in), "/home/u")
	if err != nil {
		t.Fatal(err)
	}
	if s.Net[0].Host != "api.example.com" || s.Storage[0].Path != "/home/u/work" || !s.Clock || s.Compute[0].Budget != 5*energy.Joule {
		t.Fatalf("ParseJSON = %+v", s)
	}
	fromArgs, _ := ParseArgs([]string{"net:api.example.com:443", "fs:work:rw:quota=1KiB", "cpu:5J", "clock"}, "/home/u")
	fromArgs.Net[0].Inject = s.Net[0].Inject
	b1, _, _ := s.Canonical()
	b2, _, _ := fromArgs.Canonical()
	if string(b1) != string(b2) {
		t.Fatalf("file and args differ:\n%s\n%s", b1, b2)
	}
	bad := []struct{ in, want string }{
		{`{"net":[{"host":"x.com","port":443,"inject":[{"header":"Authorization","secret":"hunter2"}]}]}`, "never the value"},
		{`{"nett":[]}`, "unknown field"},
		{`{"storage":[{"path":"/a","mode":"rx"}]}`, "want ro or rw"},
		{`{"compute":[{"class":"Cpu","budget_uj":0}]}`, "above zero"},
		{`{"compute":[{"class":"Cpu","budget_uj":1.5}]}`, "budget_uj"},
		{`{"type":"sandbox.grants/2"}`, "want"},
		{`{"clock":true} {}`, "more than one"},
		{`{"clock":`, "not JSON"},
	}
	for _, tc := range bad {
		if _, err := ParseJSON([]byte(tc.in), "/"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseJSON(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestNeeds(t *testing.T) {
	s, _ := ParseArgs([]string{"kernel", "locality:eu"}, "/")
	r, err := tier.Require(tier.Wasm, s.Needs()...)
	if err != nil || r.Tier != tier.S7 || !strings.Contains(r.Why, "locality:eu") {
		t.Fatalf("Require = %+v, %v", r, err)
	}
}

func TestEnforcer(t *testing.T) {
	deny := addr.Of([]byte("evil"))
	allow := addr.Of([]byte("good"))
	s, err := ParseArgs([]string{
		"net:api.example.com:443", "fs:/data:ro", "fs:/data/out:rw:quota=10B", "kv:cache:ro",
		"clock", "exec:deny:" + deny.String(), "exec:allow:" + allow.String(), "exec:allow:" + deny.String(), "cpu:1J",
	}, "/")
	if err != nil {
		t.Fatal(err)
	}
	e := NewEnforcer(s)
	tests := []struct {
		name string
		call func() error
		ok   bool
	}{
		{"granted host", func() error { return e.Connect("API.example.com", 443) }, true},
		{"other port", func() error { return e.Connect("api.example.com", 80) }, false},
		{"other host", func() error { return e.Connect("evil.example.com", 443) }, false},
		{"read under ro", func() error { return e.File("/data/x", false) }, true},
		{"write under ro", func() error { return e.File("/data/x", true) }, false},
		{"write under nested rw", func() error { return e.File("/data/out/x", true) }, true},
		{"prefix is not a parent", func() error { return e.File("/database", false) }, false},
		{"outside", func() error { return e.File("/etc/shadow", false) }, false},
		{"unclean", func() error { return e.File("/data/../etc/shadow", false) }, false},
		{"relative", func() error { return e.File("data/x", false) }, false},
		{"quota fits", func() error { return e.Charge("/data/out/x", 10, true) }, true},
		{"quota exceeded", func() error { return e.Charge("/data/out/y", 1, true) }, false},
		{"no quota", func() error { return e.Charge("/data/x", 1<<40, false) }, true},
		{"kv read", func() error { return e.KV("cache", false) }, true},
		{"kv write ro", func() error { return e.KV("cache", true) }, false},
		{"kv other", func() error { return e.KV("secrets", false) }, false},
		{"clock", e.Clock, true},
		{"random", e.Random, false},
		{"deny beats allow", func() error { return e.Exec(deny, "renamed") }, false},
		{"allowed", func() error { return e.Exec(allow, "") }, true},
		{"not on allow-list", func() error { return e.Exec(addr.Of([]byte("other")), "") }, false},
		{"cpu", func() error { return e.Compute(device.CPU) }, true},
		{"gpu", func() error { return e.Compute(device.GPU) }, false},
	}
	for _, tc := range tests {
		err := tc.call()
		if tc.ok != (err == nil) {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v does not wrap ErrDenied", tc.name, err)
		}
	}
	log := e.Log()
	// Every call made a decision except charges that fit (2 of them).
	if got, want := len(log.Decisions), len(tests)-2; got != want {
		t.Fatalf("log has %d entries, want %d: %+v", got, want, log.Decisions)
	}
	for i, d := range log.Decisions {
		if d.Count != 1 || (i > 0 && d.Seq <= log.Decisions[i-1].Seq) {
			t.Fatalf("entry %d = %+v", i, d)
		}
	}
	if d := log.Decisions[0]; d.Kind != KindNet || !d.Allow || d.Rule != "net:api.example.com:443" {
		t.Fatalf("first entry = %+v", d)
	}
	// Identical consecutive decisions coalesce.
	for range 5 {
		e.Clock()
	}
	l2 := e.Log()
	if last := l2.Decisions[len(l2.Decisions)-1]; last.Count != 5 || last.Kind != KindClock {
		t.Fatalf("coalesced = %+v", last)
	}
	b, a, err := l2.Canonical()
	if err != nil || a != addr.Of(b) || !strings.HasPrefix(string(b), `{"decisions":[{"allow":true,"count":1,"kind":"net"`) {
		t.Fatalf("Canonical = %s, %v", b, err)
	}
}

func TestZeroSetDeniesEverything(t *testing.T) {
	var s Set
	s.Normalize()
	e := NewEnforcer(s)
	for name, err := range map[string]error{
		"net":     e.Connect("example.com", 443),
		"fs":      e.File("/", false),
		"kv":      e.KV("x", false),
		"clock":   e.Clock(),
		"random":  e.Random(),
		"compute": e.Compute(device.CPU),
	} {
		if !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		root, path string
		want       bool
	}{{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/", "/x", true}, {"/a/b", "/a", false}} {
		if Within(tc.root, tc.path) != tc.want {
			t.Errorf("Within(%q, %q) != %v", tc.root, tc.path, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"net:a.b:1", "fs:./x:rw:quota=1GiB", "kv:a:ro", "cpu:5J", "exec:deny:b3:" + hexA, "clock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, g string) {
		s, err := ParseArgs([]string{g}, "/home")
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		b, _, err := s.Canonical()
		if err != nil {
			t.Fatalf("accepted %q but cannot canonicalize: %v", g, err)
		}
		back, err := ParseJSON(b, "/")
		if err != nil {
			t.Fatalf("canonical form of %q does not parse: %v", g, err)
		}
		b2, _, _ := back.Canonical()
		if string(b) != string(b2) {
			t.Fatalf("round trip changed %s to %s", b, b2)
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"net":[{"host":"a.b","port":1}],"clock":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseJSON(b, "/")
		if err != nil {
			return
		}
		if _, _, err := s.Canonical(); err != nil {
			t.Fatalf("accepted but cannot canonicalize: %v", err)
		}
	})
}

func TestDecode(t *testing.T) {
	s, _ := ParseArgs([]string{"fs:/b:ro", "fs:/a:rw", "cpu:1J"}, "/")
	b, _, _ := s.Canonical()
	if _, err := Decode(b); err != nil {
		t.Fatal(err)
	}
	unsorted := strings.Replace(string(b), `{"mode":"rw","path":"/a"},{"mode":"ro","path":"/b"}`, `{"mode":"ro","path":"/b"},{"mode":"rw","path":"/a"}`, 1)
	if _, err := Decode([]byte(unsorted)); !errors.Is(err, reject.NonCanonical) {
		t.Fatalf("unsorted storage: %v", err)
	}
	e := NewEnforcer(s)
	e.Clock()
	e.Clock()
	e.File("/a/x", true)
	lb, _, _ := e.Log().Canonical()
	l, err := DecodeLog(lb)
	if err != nil || len(l.Decisions) != 2 || l.Decisions[1].Seq != 2 {
		t.Fatalf("DecodeLog = %+v, %v", l, err)
	}
	bad := strings.Replace(string(lb), `"seq":2`, `"seq":1`, 1)
	if _, err := DecodeLog([]byte(bad)); !errors.Is(err, reject.Invalid) {
		t.Fatalf("seq gap: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	s, _ := ParseArgs([]string{"fs:/a:rw", "cpu:1J", "net:a.b:1"}, "/")
	b, _, _ := s.Canonical()
	f.Add(b)
	lb, _, _ := NewEnforcer(s).Log().Canonical()
	f.Add(lb)
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := Decode(b); err == nil {
			c, _, err := s.Canonical()
			if err != nil || string(c) != string(b) {
				t.Fatalf("Decode accepted %s, canonical %s", b, c)
			}
		}
		if l, err := DecodeLog(b); err == nil {
			c, _, err := l.Canonical()
			if err != nil || string(c) != string(b) {
				t.Fatalf("DecodeLog accepted %s, canonical %s", b, c)
			}
		}
	})
}

func TestInjectArg(t *testing.T) {
	base := func() Set {
		s, err := ParseArgs([]string{"net:api.example.com:443", "net:api.example.com:80", "net:[::1]:8080"}, "/")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := base()
	if err := s.Inject("API.example.com:Authorization=env:API_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := s.Inject("[::1]:X-Key=file:/run/keys/k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Net {
		want := 1
		if len(n.Inject) != want {
			t.Errorf("%s: %v", n, n.Inject)
		}
	}
	for _, tc := range []struct{ arg, want string }{
		{"other.example.com:A=env:X", "no net grant for other.example.com"},
		{"api.example.com:Authorization=hunter2", "never the value itself"},
		{"api.example.com:Bad Header=env:X", "not a valid HTTP header name"},
		{"api.example.com", "want HOST:HEADER=SECRET"},
		{"api.example.com:A", "want HEADER=SECRET"},
		{"[::1:A=env:X", "want [IPV6]:HEADER=SECRET"},
		{"api.example.com:A=file:relative", "never the value itself"},
		{"http://api.example.com:A=env:X", "plain HTTP is allowed for one port at a time"},
		{"http://api.example.com:8443:A=env:X", "no net grant for api.example.com:8443"},
		{"http://api.example.com:0:A=env:X", "want http://HOST:PORT:HEADER=SECRET"},
	} {
		s := base()
		if err := s.Inject(tc.arg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.arg, err, tc.want)
		}
	}
	// http://HOST:PORT: that grant only, plain HTTP allowed.
	s = base()
	if err := s.Inject("http://api.example.com:80:A=env:X"); err != nil {
		t.Fatal(err)
	}
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Net {
		plain := n.Host == "api.example.com" && n.Port == 80
		if plain != (len(n.Inject) == 1) || (plain && !n.Inject[0].Plain) {
			t.Errorf("%s: %+v", n, n.Inject)
		}
	}
	s = base()
	s.Inject("api.example.com:A=env:X")
	s.Inject("api.example.com:a=env:Y")
	if err := s.Normalize(); err == nil || !strings.Contains(err.Error(), "injected twice") {
		t.Errorf("two values for one header: %v", err)
	}
}

// Canonical leaves the set it is given as it was: a set an Enforcer
// serves from may be read while it runs.
func TestCanonicalLeavesTheSetAlone(t *testing.T) {
	s := Set{Net: []Net{{Host: "b.example", Port: 443}, {Host: "a.example", Port: 443}}, Storage: []Storage{{Path: "/z", Mode: RO}, {Path: "/a", Mode: RO}}}
	if _, _, err := s.Canonical(); err != nil {
		t.Fatal(err)
	}
	if s.Net[0].Host != "b.example" || s.Storage[0].Path != "/z" {
		t.Fatalf("Canonical reordered the caller's set: %+v", s)
	}
}

// Args reads back, through ParseArgs, to the same set.
func TestArgsRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"fs:/srv/a:ro", "fs:/srv/b:rw:quota=4096", "net:example.com:443", "net:[::1]:8080", "kv:notes:rw", "clock", "random", "kernel", "cpu:5J", "gpu:250mJ", "npu:3uJ", "locality:eu-west", "exec:deny:b3:" + strings.Repeat("ab", 32)},
		{},
	} {
		s, err := ParseArgs(args, "/")
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseArgs(s.Args(), "/")
		if err != nil {
			t.Fatalf("%v: %v", s.Args(), err)
		}
		a, _, _ := s.Canonical()
		b, _, _ := back.Canonical()
		if string(a) != string(b) {
			t.Errorf("%v read back as\n%s\nnot\n%s", s.Args(), b, a)
		}
	}
}
