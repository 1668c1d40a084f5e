package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/tier"
)

// tokenClients serves the API over TLS for tokens, with the host's
// policies set as serve sets them, and returns a client per token.
func tokenClients(t *testing.T, s *Server, policies map[string]authority.Policy, tokens ...string) []*client.Client {
	t.Helper()
	s.Tokens = tokens
	s.Live.Policies = map[string]authority.Policy{}
	for tok, p := range policies {
		s.Live.Policies[OwnerOf(tok)] = p
	}
	ts := httptest.NewTLSServer(s.TCP(s.Handler()))
	t.Cleanup(ts.Close)
	tlsConf := &tls.Config{RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	var out []*client.Client
	for _, tok := range tokens {
		c, err := client.Dial(ts.URL, client.Options{Token: tok, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		out = append(out, c)
	}
	return out
}

// denied checks that err is the service's denial naming grant and rule,
// and that the decision log kept it.
func denied(t *testing.T, h *live.Manager, err error, grant, rule string) {
	t.Helper()
	deniedAs(t, h, err, grant, grant, rule)
}

// deniedAs is denied where the caller is told the refusal of told, and
// the decision log has that of grant.
func deniedAs(t *testing.T, h *live.Manager, err error, told, grant, rule string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 403 || ae.Category != "denied" {
		t.Fatalf("want 403 denied for %s, got %v", grant, err)
	}
	if !strings.Contains(ae.Message, told) || !strings.Contains(ae.Message, `rule "`+rule+`"`) {
		t.Fatalf("the refusal does not name %s and rule %s: %s", told, rule, ae.Message)
	}
	ds, _, lerr := authority.ReadLog(h.Store.Path(host.AuthorityLog))
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, d := range ds {
		if d.Grant == grant && d.Rule == rule {
			return
		}
	}
	t.Fatalf("the decision log has no refusal of %s by %s: %+v", grant, rule, ds)
}

// A token holder cannot grant itself another tenant's workspace or any
// host directory, nor the network, a secret, a key-value namespace, S0
// or a device class its policy does not name; through a sandbox, a
// one-shot run, a fleet or a pool (issue 26's first finding).
func TestTokenGrantsOnlyWhatItsPolicyAllows(t *testing.T) {
	h, s, local := serve(t)
	hostDir := t.TempDir()
	os.WriteFile(filepath.Join(hostDir, "secret"), []byte("host file"), 0o644)
	shared := t.TempDir()
	os.MkdirAll(filepath.Join(shared, "data"), 0o755)
	alice, bob := "token-alice-aaaaaaaaaaaa", "token-bob-bbbbbbbbbbbbbb"
	// Bob's operator lets him read shared/ and the temporary directory
	// that holds every workspace: still not Alice's.
	bobPolicy := authority.Default()
	bobPolicy.Paths = []authority.Path{{Root: shared, Mode: "ro"}, {Root: os.TempDir(), Mode: "ro"}}
	cs := tokenClients(t, s, map[string]authority.Policy{bob: bobPolicy}, alice, bob)
	a, b := cs[0], cs[1]
	ctx := context.Background()

	sbA, err := a.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:5J"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, sbA.ID, client.ExecSpec{Args: []string{"/bin/sh", "-c", "echo mine > private"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Another tenant's workspace, guessed from one's own name.
	_, err = b.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + sbA.Workspace + ":ro"}})
	denied(t, h, err, "fs:"+sbA.Workspace+":ro", "workspaces")
	// A directory that holds it.
	_, err = b.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + filepath.Dir(sbA.Workspace) + ":ro"}})
	denied(t, h, err, "fs:"+filepath.Dir(sbA.Workspace)+":ro", "workspaces")
	// Any host directory, read-write, and read-only (no policy).
	_, err = a.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + hostDir + ":rw"}})
	denied(t, h, err, "fs:"+hostDir+":rw", "paths")
	_, err = a.Create(ctx, client.SandboxSpec{Grants: []string{"fs:/etc:ro"}})
	denied(t, h, err, "fs:/etc:ro", "paths")
	// The same through a one-shot run.
	var out bytes.Buffer
	_, err = a.Run(ctx, client.ExecSpec{Args: []string{"/bin/cat", hostDir + "/secret"}, Grants: []string{"fs:" + hostDir + ":ro"}}, &out, &out)
	denied(t, h, err, "fs:"+hostDir+":ro", "paths")
	if strings.Contains(out.String(), "host file") {
		t.Fatal("the run read the host file")
	}
	_, err = b.Run(ctx, client.ExecSpec{Args: []string{"/bin/cat", sbA.Workspace + "/private"}, Grants: []string{"fs:" + sbA.Workspace + ":ro"}}, &out, &out)
	denied(t, h, err, "fs:"+sbA.Workspace+":ro", "workspaces")
	// Within its policy: granted.
	if _, err := b.Run(ctx, client.ExecSpec{Args: []string{"/bin/ls", shared + "/data"}, Grants: []string{"fs:" + shared + "/data:ro"}}, nil, nil); err != nil {
		t.Fatalf("a grant its policy allows: %v", err)
	}
	// A bare command name is looked up, never read where it may not
	// read: no refusal for it.
	before, _, _ := authority.ReadLog(h.Store.Path(host.AuthorityLog))
	if _, err := b.Run(ctx, client.ExecSpec{Args: []string{"true"}, Dir: hostDir}, nil, nil); err != nil {
		t.Fatalf("a bare command: %v", err)
	}
	if after, _, _ := authority.ReadLog(h.Store.Path(host.AuthorityLog)); len(after) != len(before) {
		t.Fatalf("a bare command logged a refusal: %+v", after[len(before):])
	}
	_, err = b.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"fs:" + shared + "/data:rw"}}, nil, nil)
	denied(t, h, err, "fs:"+shared+"/data:rw", "paths")
	// Its own workspace: every principal's.
	sbA2, err := a.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + sbA.Workspace + ":ro"}})
	if err != nil {
		t.Fatalf("its own workspace: %v", err)
	}
	a.Remove(ctx, sbA2.ID)
	// The network, a secret, a namespace, a tier, a device.
	_, err = a.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"net:example.com:443"}}, nil, nil)
	denied(t, h, err, "net:example.com:443", "net")
	_, err = a.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Tier: "S0"}, nil, nil)
	denied(t, h, err, "tier:S0", "tiers")
	_, err = a.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"gpu:1J"}}, nil, nil)
	denied(t, h, err, "gpu:1J", "compute")
	_, err = a.Create(ctx, client.SandboxSpec{Tier: "S2", Grants: []string{"kv:shared:rw"}})
	denied(t, h, err, "kv:shared:rw", "kv")
	// A module the host would read from a path the token may not grant:
	// refused before the host says whether anything is there.
	for _, p := range []string{hostDir + "/m.wasm", hostDir + "/missing.wasm"} {
		_, err = a.Run(ctx, client.ExecSpec{Args: []string{p}}, nil, nil)
		denied(t, h, err, "program:"+p, "paths")
	}
	// A fleet.
	_, err = a.Fleet(ctx, client.FleetSpec{Args: []string{"/bin/cat"}, Inputs: []string{hostDir + "/secret"}, Grants: []string{"fs:" + hostDir + ":ro"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("a fleet with a host directory: %v", err)
	}
	// A pool whose grants the claimer may not be given.
	if err := h.StartPool(live.PoolSpec{Name: "wide", Size: 1, Sandbox: live.SandboxSpec{Tier: tier.S1, Grants: mustGrants(t, "fs:"+hostDir+":ro")}}); err != nil {
		t.Fatal(err)
	}
	// Refused by the rule, without the pool's host path, which is the
	// operator's to know (the decision log has it).
	_, err = a.Claim(ctx, "wide")
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || strings.Contains(ae.Message, hostDir) {
		t.Fatalf("the claim names the pool's host path: %v", err)
	}
	deniedAs(t, h, err, "(a grant of pool wide)", "fs:"+hostDir+":ro", "paths")
	// The local user (the operator) may grant it all.
	if _, err := local.Claim(ctx, "wide"); err != nil {
		t.Fatalf("the operator's claim: %v", err)
	}
	if _, err := local.Run(ctx, client.ExecSpec{Args: []string{"/bin/cat", hostDir + "/secret"}, Grants: []string{"fs:" + hostDir + ":ro"}}, nil, nil); err != nil {
		t.Fatalf("the operator's run: %v", err)
	}
}

// A caller held to a narrower policy (an MCP connection's) is refused
// what it does not allow: in a new sandbox, and in an existing one that
// holds more (an operator's), by exec and by the files API.
func TestNarrowedCallerCannotWiden(t *testing.T) {
	h, _, local := serve(t)
	hostDir := t.TempDir()
	os.WriteFile(filepath.Join(hostDir, "f"), []byte("x"), 0o644)
	doc, _ := authority.Default().Marshal()
	model := local.Narrowed(doc)
	ctx := context.Background()
	_, err := model.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + hostDir + ":rw"}})
	denied(t, h, err, "fs:"+hostDir+":rw", "paths")
	wide, err := local.Create(ctx, client.SandboxSpec{Grants: []string{"fs:" + hostDir + ":rw"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = model.Exec(ctx, wide.ID, client.ExecSpec{Args: []string{"/bin/true"}}, nil, nil)
	denied(t, h, err, "fs:"+hostDir+":rw", "paths")
	_, err = model.Upload(ctx, wide.ID, hostDir+"/planted", strings.NewReader("x"), 0o644)
	denied(t, h, err, "fs:"+hostDir+":rw", "paths")
	_, err = model.Download(ctx, wide.ID, hostDir+"/f", new(bytes.Buffer))
	denied(t, h, err, "fs:"+hostDir+":ro", "paths")
	if _, err := os.Stat(filepath.Join(hostDir, "planted")); err == nil {
		t.Fatal("the narrowed caller wrote a host file")
	}
	// In its own sandbox it works as before.
	own, err := model.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:5J"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.Upload(ctx, own.ID, own.Workspace+"/f", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := model.Exec(ctx, own.ID, client.ExecSpec{Args: []string{"/bin/cat", "f"}}, nil, nil); err != nil || res.ExitStatus != 0 {
		t.Fatalf("exec in its own sandbox: %+v %v", res, err)
	}
	// A header that does not parse is refused before anything is done.
	bad := local.Narrowed([]byte(`{"paths":"/"}`))
	if _, err := bad.Create(ctx, client.SandboxSpec{}); status(err) != 400 {
		t.Fatalf("a malformed policy header: %v", err)
	}
	if client.PolicyHeader != authority.Header {
		t.Fatalf("the client sends %s, the service reads %s", client.PolicyHeader, authority.Header)
	}
}

func mustGrants(t *testing.T, args ...string) grant.Set {
	t.Helper()
	g, err := parseGrants(args)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A token's policy bounds its sandboxes' workspaces (workspace_bytes):
// a writer past it is refused by the kernel as it writes.
func TestPolicyBoundsTheWorkspace(t *testing.T) {
	_, s, _ := serve(t)
	tok := "token-bounded-aaaaaaaaaaaa"
	p := authority.Default()
	p.WorkspaceBytes = 48 << 20
	c := tokenClients(t, s, map[string]authority.Policy{tok: p}, tok)[0]
	ctx := context.Background()
	sb, err := c.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:20J"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo status $?"}}, &out, &out)
	if err != nil || res.ExitStatus != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if !strings.Contains(out.String(), "No space left") || strings.Contains(out.String(), "status 0") {
		t.Fatalf("a writer past the policy's bound: %s", out.String())
	}
}
