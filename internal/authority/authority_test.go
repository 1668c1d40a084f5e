package authority

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

func grants(t *testing.T, args ...string) grant.Set {
	t.Helper()
	g, err := grant.ParseArgs(args, "/")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCheck(t *testing.T) {
	alice, err := Parse([]byte(`{
		"paths": [{"root": "/srv/data", "mode": "ro"}, {"root": "/srv/scratch", "mode": "rw"}],
		"net": [{"host": "*.pypi.org", "port": 443}, {"host": "example.com"}, {"host": "10.1.0.0/16", "port": 80}],
		"secrets": ["env:PYPI_TOKEN"],
		"kv": ["alice.*", "shared"],
		"tiers": ["S1", "S2"],
		"compute": [{"class": "cpu", "max": "100J"}, {"class": "gpu", "max": "1kJ"}],
		"images": ["b3:0101010101010101010101010101010101010101010101010101010101010101"]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	var img addr.Addr
	for i := range img {
		img[i] = 1
	}
	ws := "/tmp/sandbox-ws-1"
	for _, tc := range []struct {
		name     string
		p        Policy
		ask      Ask
		rule     string // "" allowed
		inGrant  string
		narrowed *Policy
		by       int // which policy of the chain refuses
	}{
		{name: "nothing", p: Default(), ask: Ask{Tier: tier.S1}},
		{name: "default: own workspace", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:"+ws+":rw", "fs:"+ws+"/sub:ro"), Own: []string{ws}}},
		{name: "default: another workspace", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/tmp/sandbox-ws-2:ro"), Own: []string{ws}}, rule: "paths", inGrant: "fs:/tmp/sandbox-ws-2:ro"},
		{name: "default: a prefix of the workspace is not it", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/tmp/sandbox-ws-10:ro"), Own: []string{ws}}, rule: "paths"},
		{name: "default: host dir", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/etc:ro")}, rule: "paths"},
		{name: "default: net", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "net:example.com:443")}, rule: "net"},
		{name: "default: S0", p: Default(), ask: Ask{Tier: tier.S0}, rule: "tiers", inGrant: "tier:S0"},
		{name: "default: S5", p: Default(), ask: Ask{Tier: tier.S5}},
		{name: "default: cpu budget", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "cpu:1MJ")}},
		{name: "default: gpu", p: Default(), ask: Ask{Tier: tier.S1, Grants: grants(t, "gpu:1J")}, rule: "compute"},
		{name: "default: gpu device", p: Default(), ask: Ask{Tier: tier.S1, Devices: []device.Class{device.GPU}}, rule: "compute"},
		{name: "default: kv", p: Default(), ask: Ask{Tier: tier.S2, Grants: grants(t, "kv:notes:rw")}, rule: "kv"},
		{name: "default: any image", p: Default(), ask: Ask{Tier: tier.S1, Image: img}},
		{name: "default: a program in /usr", p: Default(), ask: Ask{Tier: tier.S1, Reads: []string{"/usr/bin/sh"}, Readable: []string{"/usr"}}},
		{name: "default: a module elsewhere", p: Default(), ask: Ask{Tier: tier.S2, Reads: []string{"/root/secret.wasm"}, Readable: []string{"/usr"}}, rule: "paths", inGrant: "program:/root/secret.wasm"},
		{name: "default: a module in its workspace", p: Default(), ask: Ask{Tier: tier.S2, Reads: []string{ws + "/m.wasm"}, Own: []string{ws}}},
		{name: "default: a module named through /usr/..", p: Default(), ask: Ask{Tier: tier.S2, Reads: []string{"/usr/../root/secret.wasm"}, Readable: []string{"/usr"}}, rule: "paths", inGrant: "program:/usr/../root/secret.wasm"},
		{name: "default: a module named through its workspace/..", p: Default(), ask: Ask{Tier: tier.S2, Reads: []string{ws + "/../other/m.wasm"}, Own: []string{ws}}, rule: "paths", inGrant: "program:" + ws + "/../other/m.wasm"},
		{name: "default: a relative module", p: Default(), ask: Ask{Tier: tier.S2, Reads: []string{"usr/m.wasm"}, Readable: []string{"/usr"}}, rule: "paths", inGrant: "program:usr/m.wasm"},
		{name: "operator: a path that is not clean", p: Operator(), ask: Ask{Tier: tier.S2, Reads: []string{"/usr//bin/sh"}}, rule: "paths", inGrant: "program:/usr//bin/sh"},

		{name: "ro beneath ro root", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/srv/data/x:ro")}},
		{name: "rw beneath ro root", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/srv/data/x:rw")}, rule: "paths", inGrant: "fs:/srv/data/x:rw"},
		{name: "rw root itself", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/srv/scratch:rw")}},
		{name: "sibling by prefix", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/srv/database:ro")}, rule: "paths"},
		{name: "parent of a root", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/srv:ro")}, rule: "paths"},
		{name: "subdomain", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:files.pypi.org:443")}},
		{name: "suffix is not the domain", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:pypi.org:443")}, rule: "net"},
		{name: "lookalike domain", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:evilpypi.org:443")}, rule: "net"},
		{name: "wrong port", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:files.pypi.org:80")}, rule: "net"},
		{name: "any port", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:example.com:8443")}},
		{name: "address in prefix", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:10.1.2.3:80")}},
		{name: "address outside prefix", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "net:127.0.0.1:80")}, rule: "net"},
		{name: "any name is no address", p: Operator(), ask: Ask{Tier: tier.S1, Grants: grants(t, "net:127.0.0.1:5432")}},
		{name: "kv prefix", p: alice, ask: Ask{Tier: tier.S2, Grants: grants(t, "kv:alice.notes:rw", "kv:shared:ro")}},
		{name: "kv outside", p: alice, ask: Ask{Tier: tier.S2, Grants: grants(t, "kv:bob.notes:ro")}, rule: "kv"},
		{name: "tier not listed", p: alice, ask: Ask{Tier: tier.S5}, rule: "tiers"},
		{name: "budget under ceiling", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "cpu:100J", "gpu:1kJ")}},
		{name: "budget over ceiling", p: alice, ask: Ask{Tier: tier.S1, Grants: grants(t, "cpu:101J")}, rule: "compute"},
		{name: "image listed", p: alice, ask: Ask{Tier: tier.S1, Image: img}},
		{name: "image not listed", p: alice, ask: Ask{Tier: tier.S1, Image: addr.Of([]byte("x"))}, rule: "images"},
		{name: "operator: anything", p: Operator(), ask: Ask{Tier: tier.S0, Grants: grants(t, "fs:/etc:rw", "net:example.com:443", "kv:x:rw", "gpu:1MJ"), Reads: []string{"/root/x.wasm"}}},
		{name: "narrowed operator", p: Operator(), narrowed: &Policy{Tiers: []tier.Tier{tier.S1}}, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/etc:ro")}, rule: "paths", by: 1},
		{name: "narrowing keeps own workspace", p: Operator(), narrowed: &Policy{Tiers: []tier.Tier{tier.S1}}, ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:"+ws+":rw"), Own: []string{ws}}},
		{name: "narrowing cannot widen", p: Default(), narrowed: func() *Policy { p := Operator(); return &p }(), ask: Ask{Tier: tier.S1, Grants: grants(t, "fs:/etc:ro")}, rule: "paths"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Principal{Name: "token:test", Policies: []Policy{tc.p}}
			if tc.narrowed != nil {
				p = p.Narrowed(*tc.narrowed)
			}
			tc.ask.Action = "create"
			err := Check(p, tc.ask)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var de *DeniedError
			if !errors.As(err, &de) || !errors.Is(err, grant.ErrDenied) {
				t.Fatalf("want a denial by rule %s, got %v", tc.rule, err)
			}
			if de.Rule != tc.rule || de.Principal != "token:test" || de.Action != "create" {
				t.Errorf("denied by %+v; want rule %s", de, tc.rule)
			}
			if tc.inGrant != "" && de.Grant != tc.inGrant {
				t.Errorf("names grant %q; want %q", de.Grant, tc.inGrant)
			}
			if de.Policy != tc.by {
				t.Errorf("refused by policy %d of the chain; want %d", de.Policy, tc.by)
			}
			if !strings.Contains(err.Error(), de.Grant) || !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("message %q names neither the grant nor the rule", err)
			}
		})
	}
	if err := Check(Principal{Name: "x"}, Ask{Tier: tier.S1}); err == nil {
		t.Error("a principal with no policy was allowed")
	}
	var zero Policy
	if err := Check(Principal{Name: "x", Policies: []Policy{zero}}, Ask{Tier: tier.S1}); err == nil {
		t.Error("the zero policy allowed a run")
	}
}

func TestInjectNeedsTheSecret(t *testing.T) {
	g := grant.Set{Net: []grant.Net{{Host: "example.com", Port: 443, Inject: []grant.Inject{{Header: "Authorization", Secret: "file:/root/.ssh/id_ed25519"}}}}}
	if err := g.Normalize(); err != nil {
		t.Fatal(err)
	}
	p := Policy{Tiers: []tier.Tier{tier.S1}, Net: []Dest{{Host: "example.com"}}, Secrets: []string{"env:TOKEN"}}
	var de *DeniedError
	if err := Check(Principal{Name: "t", Policies: []Policy{p}}, Ask{Tier: tier.S1, Grants: g}); !errors.As(err, &de) || de.Rule != "secrets" {
		t.Fatalf("an injection of a secret it may not use: %v", err)
	}
	p.Secrets = []string{"file:/root/.ssh/id_ed25519"}
	if err := Check(Principal{Name: "t", Policies: []Policy{p}}, Ask{Tier: tier.S1, Grants: g}); err != nil {
		t.Fatal(err)
	}
}

func TestParse(t *testing.T) {
	p, err := Parse([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if b1, _ := p.Marshal(); string(b1) != func() string { b, _ := d.Marshal(); return string(b) }() {
		t.Errorf("{} is not the Default: %s", b1)
	}
	p, err = Parse([]byte(`{"type":"sandbox.policy/1","tiers":[],"paths":[{"root":"/srv","mode":"rw"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tiers) != 0 || len(p.Paths) != 1 || len(p.Images) != 1 {
		t.Errorf("given members are what they say, others the Default's: %+v", p)
	}
	// Round trip: Marshal gives every member.
	for _, q := range []Policy{Default(), Operator(), p, {}} {
		b, err := q.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		r, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		b2, _ := r.Marshal()
		if string(b) != string(b2) {
			t.Errorf("round trip:\n%s\n%s", b, b2)
		}
	}
	for _, tc := range []struct{ in, where string }{
		{`{"paths":[{"root":"srv","mode":"ro"}]}`, "paths[0].root"},
		{`{"paths":[{"root":"/srv/../etc","mode":"ro"}]}`, "paths[0].root"},
		{`{"paths":[{"root":"/srv","mode":"rwx"}]}`, "paths[0].mode"},
		{`{"net":[{"host":"*"},{"host":"a b"}]}`, "net[1].host"},
		{`{"net":[{"host":"10.0.0.0/33"}]}`, "net[0].host"},
		{`{"net":[{"host":"x.org","port":70000}]}`, "net[0].port"},
		{`{"secrets":["TOKEN"]}`, "secrets[0]"},
		{`{"kv":["a*b"]}`, "kv[0]"},
		{`{"tiers":["S9"]}`, "tiers[0]"},
		{`{"compute":[{"class":"fpga"}]}`, "compute[0].class"},
		{`{"compute":[{"class":"cpu","max":"lots"}]}`, "compute[0].max"},
		{`{"compute":[{"class":"cpu","max":"1J","max_uj":1}]}`, "compute[0]"},
		{`{"images":["ubuntu"]}`, "images[0]"},
		{`{"workspace_bytes":-1}`, "workspace_bytes"},
		{`{"type":"other"}`, "type"},
		{`{"paths":[],"paths":[{"root":"/","mode":"rw"}]}`, "paths"},
		{`{"paths":[{"root":"/srv","mode":"ro","mode":"rw"}]}`, "paths[0].mode"},
		{`{"root":"/"}`, ""},
		{`{} {}`, ""},
		{`[`, ""},
		{``, ""},
	} {
		_, err := Parse([]byte(tc.in))
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.Where != tc.where {
			t.Errorf("Parse(%s) = %v; want an error at %q", tc.in, err, tc.where)
		}
	}
	if _, err := Parse(make([]byte, MaxPolicy+1)); err == nil {
		t.Error("an oversized policy was read")
	}
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "alice.json"), []byte(`{"paths":[{"root":"/srv/alice","mode":"rw"}]}`), 0o600)
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"paths":"/"}`), 0o600)
	write := func(s string) string {
		p := filepath.Join(dir, "tokens")
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	toks, err := ReadTokens(write("# comment\n\n0123456789abcdef0123 alice.json\n  fedcba9876543210fedc  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || toks[0].PolicyFile != "alice.json" || len(toks[0].Policy.Paths) != 1 || len(toks[1].Policy.Paths) != 0 || len(toks[1].Policy.Tiers) != 3 {
		t.Fatalf("tokens: %+v", toks)
	}
	for _, tc := range []struct{ in, want string }{
		{"short\n", "line 1: a token of 5 characters"},
		{"0123456789abcdef0123 a b\n", "line 1: 3 fields"},
		{"0123456789abcdef0123\n0123456789abcdef0123\n", "line 2: the token of line 1 again"},
		{"0123456789abcdef0123 missing.json\n", "line 1: policy missing.json"},
		{"0123456789abcdef0123 bad.json\n", "line 1: bad.json: policy: "},
		{"# nothing\n", "holds no token"},
	} {
		if _, err := ReadTokens(write(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.in, err, tc.want)
		}
	}
}

func TestHeaderAndNarrowing(t *testing.T) {
	p := Policy{Tiers: []tier.Tier{tier.S2}}
	b, _ := p.Marshal()
	q, err := DecodeHeader(EncodeHeader(b))
	if err != nil || len(q.Tiers) != 1 || q.Tiers[0] != tier.S2 || len(q.Compute) != 0 {
		t.Fatalf("header round trip: %+v %v", q, err)
	}
	for _, bad := range []string{"!!", EncodeHeader([]byte(`{"tiers":"S1"}`))} {
		if _, err := DecodeHeader(bad); err == nil {
			t.Errorf("DecodeHeader(%q) read", bad)
		}
	}
	ctx := WithNarrowing(context.Background(), p)
	ctx = WithNarrowing(ctx, Default())
	if n := Narrowings(ctx); len(n) != 2 || len(n[0].Tiers) != 1 {
		t.Errorf("narrowings: %+v", n)
	}
	if Narrowings(context.Background()) != nil {
		t.Error("a plain context narrows")
	}
}

func TestLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authority.jsonl")
	if ds, _, err := ReadLog(path); err != nil || len(ds) != 0 {
		t.Fatalf("a missing log: %v %v", ds, err)
	}
	e := &DeniedError{Principal: "token:ab", Action: "create", Grant: "fs:/etc:rw", Rule: "paths", Why: "no"}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	h1, err := Append(path, DecisionOf(e, now))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := Append(path, DecisionOf(e, now.Add(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	ds, head, err := ReadLog(path)
	if err != nil || len(ds) != 2 || head != h2 || head == h1 || ds[0].Grant != "fs:/etc:rw" || ds[1].Time != "2026-12-03T08:00:01Z" {
		t.Fatalf("log: %+v %s %v", ds, head, err)
	}
	// An edited entry is refused, not skipped.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"deny"`, `"allow"`, 1)), 0o600)
	if _, _, err := ReadLog(path); err == nil {
		t.Error("an edited log was read")
	}
	if _, err := Append(path, DecisionOf(e, now)); err == nil {
		t.Error("appended to an edited log")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"paths":[{"root":"/srv","mode":"ro"}],"net":[{"host":"*.x.org","port":443}],"tiers":["S1"],"compute":[{"class":"cpu","max":"1J"}]}`))
	f.Add([]byte(`{"net":[{"host":"10.0.0.0/8"}],"kv":["a*"],"images":["*"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("an error that is no PolicyError: %v", err)
			}
			return
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("what Marshal wrote does not read back: %s: %v", out, err)
		}
		out2, _ := q.Marshal()
		if string(out) != string(out2) {
			t.Fatalf("round trip: %s != %s", out, out2)
		}
		// Checking never panics, whatever the policy.
		Check(Principal{Name: "f", Policies: []Policy{p}}, Ask{Tier: tier.S1, Grants: grant.Set{Net: []grant.Net{{Host: "a.b", Port: 1}}, Storage: []grant.Storage{{Path: "/a", Mode: grant.RW}}}, Reads: []string{"/x"}})
	})
}

func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123 p.json\n# c\nfedcba9876543210fedc\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		toks, err := ParseTokens(b, func(string) ([]byte, error) { return []byte(`{}`), nil })
		if err == nil && len(toks) == 0 {
			t.Fatal("no error and no token")
		}
		for _, tk := range toks {
			if len(tk.Secret) < MinToken || strings.ContainsAny(tk.Secret, " \t\n") {
				t.Fatalf("token %q", tk.Secret)
			}
		}
	})
}

// TestCheckImageAlone: CheckImage asks the images rule alone, of every
// policy in the chain (a narrowing too), whatever the tier or grants.
func TestCheckImageAlone(t *testing.T) {
	mine, theirs := addr.Of([]byte("mine")), addr.Of([]byte("theirs"))
	p := Default()
	p.Images = []string{mine.String()}
	p.Tiers = nil // no tier at all: not asked
	pr := Principal{Name: "mallory", Policies: []Policy{p}}
	if err := CheckImage(pr, Ask{Action: "run", Image: mine}); err != nil {
		t.Fatalf("its own image: %v", err)
	}
	var de *DeniedError
	if err := CheckImage(pr, Ask{Action: "run", Image: theirs}); !errors.As(err, &de) || de.Rule != "images" || de.Policy != 0 {
		t.Fatalf("another image: %v", err)
	}
	narrowed := Default()
	narrowed.Images = []string{theirs.String()}
	pr.Policies = append(pr.Policies, narrowed)
	if err := CheckImage(pr, Ask{Action: "run", Image: mine}); !errors.As(err, &de) || de.Rule != "images" || de.Policy != 1 {
		t.Fatalf("an image its narrowing leaves out: %v", err)
	}
}
