package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/mcp"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// mcpWorld is a running service in its own state directory, where the
// principal root (trusted as a JCP root) grants agent 100 J of CPU on
// /bin/echo and /bin/true; the chain is in chainFile.
type mcpWorld struct {
	home, chainFile string
	api             *client.Client
	root, agent     key.Private
	grant           *jcp.Token
}

func newMCPWorld(t *testing.T) *mcpWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the service's S1 sandboxes need root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	w := &mcpWorld{home: t.TempDir()}
	g := &cli.Globals{Home: w.home}
	d, err := g.StateDir()
	if err != nil {
		t.Fatal(err)
	}
	if w.root, err = d.NewPrincipal("root", rand.Reader); err != nil {
		t.Fatal(err)
	}
	if w.agent, err = d.NewPrincipal("agent", rand.Reader); err != nil {
		t.Fatal(err)
	}
	if err := addRoot(d, w.root.Public()); err != nil {
		t.Fatal(err)
	}
	ho, err := host.New(host.Config{Home: w.home, Warm: true, Executors: builtin.Config{S1Helper: helper, Memory: 256 << 20, Pids: 128}.Executors})
	if err != nil {
		t.Fatal(err)
	}
	h := live.New(ho)
	sock := filepath.Join(w.home, client.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := (&server.Server{Live: h}).UnixServer()
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	if w.api, err = client.Dial(sock, client.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.api.Close)
	var images []addr.Addr
	for _, p := range []string{"/bin/echo", "/bin/true"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, addr.Of(b))
	}
	if bytes.Compare(images[1][:], images[0][:]) < 0 {
		images[0], images[1] = images[1], images[0]
	}
	now := uint64(time.Now().Unix())
	w.grant, err = jcp.Seal(&jcp.Grant{Aud: w.agent.Public(), Iat: now - 10, Exp: now + 3600, Depth: 2, Images: images,
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 100e6}}, w.root)
	if err != nil {
		t.Fatal(err)
	}
	w.chainFile = filepath.Join(w.home, "agent.jcp")
	if err := os.WriteFile(w.chainFile, jcp.EncodeChain([][]byte{w.grant.Bytes}), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// session connects an MCP client to the tools `sandbox mcp` serves with
// these flags' principal (none without a chain file), over the SDK's
// in-memory transport, held to the default policy as the command holds
// its connections.
func (w *mcpWorld) session(t *testing.T, chainFile, as string) *sdk.ClientSession {
	t.Helper()
	p, err := mcpPrincipal(&cli.Globals{Home: w.home}, chainFile, as)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := authority.Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := mcp.New(w.api.Narrowed(doc), "test", mcp.Options{JCP: p}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func tools(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// callTool calls tool with args and decodes its structured result into
// out (when not nil).
func callTool(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) error {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err
	}
	if res.IsError {
		return errors.New("tool error")
	}
	if out != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

// refusedWith checks that err is the JSON-RPC error of a denial with
// its JCP code.
func refusedWith(t *testing.T, what string, err error, code string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != int64(errs.MCPCode(errs.Denied)) {
		t.Fatalf("%s: want a denial (%d), got %v", what, errs.MCPCode(errs.Denied), err)
	}
	var data map[string]string
	json.Unmarshal(we.Data, &data)
	if data["category"] != "denied" || data["code"] != code {
		t.Fatalf("%s: data %s, want code %s", what, we.Data, code)
	}
}

// An agent served with `sandbox mcp --jcp FILE --as NAME`: every exec is
// presented with its chain (a fresh invocation each) and spends from its
// grant; it reads its budget, delegates a narrower child (one that
// widens is refused with its code) and checkpoints; no tool amends or
// revokes a grant.
func TestMCPAgentSpendsFromItsJCPGrant(t *testing.T) {
	w := newMCPWorld(t)
	plain := tools(t, w.session(t, "", ""))
	for _, n := range plain {
		if strings.HasPrefix(n, "jcp_") {
			t.Fatalf("without --jcp the tools have %s: %v", n, plain)
		}
	}
	cs := w.session(t, w.chainFile, "agent")
	names := tools(t, cs)
	for _, want := range []string{"exec", "jcp_budget", "jcp_delegate", "jcp_checkpoint"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Fatalf("no tool %s in %v", want, names)
		}
	}
	for _, n := range names {
		if strings.Contains(n, "amend") || strings.Contains(n, "revoke") || strings.Contains(n, "revocation") {
			t.Fatalf("an agent's tool may amend or revoke: %s", n)
		}
	}

	var sb client.Sandbox
	if err := callTool(t, cs, "create_sandbox", map[string]any{"grants": []string{"cpu:5J"}}, &sb); err != nil {
		t.Fatal(err)
	}
	// Two execs: each its own invocation (a reused one is a replay).
	var run string
	for i := range 2 {
		var x mcp.ExecOut
		if err := callTool(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": []string{"/bin/echo", "gated"}}, &x); err != nil || x.Stdout != "gated\n" || !x.Sealed {
			t.Fatalf("exec %d: %+v %v", i, x, err)
		}
		run = x.Run
	}
	var v mcp.VerifyOut
	if err := callTool(t, cs, "verify_run", map[string]any{"run": run}, &v); err != nil || !v.Verified {
		t.Fatalf("verify: %+v %v", v, err)
	}
	err := callTool(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": []string{"/bin/cat", "/dev/null"}}, nil)
	refusedWith(t, "an exec of an image the grant does not give", err, "image-not-granted")

	var bo mcp.BudgetOut
	if err := callTool(t, cs, "jcp_budget", nil, &bo); err != nil || len(bo.Budgets) != 1 {
		t.Fatalf("budget: %+v %v", bo, err)
	}
	if b := bo.Budgets[0]; b.Grant != w.grant.ID.String() || b.Runs != 2 || len(b.Classes) != 1 || b.Classes[0].CeilingUJ != 100e6 || b.Classes[0].ReservedUJ != 0 {
		t.Fatalf("budget after two execs: %+v", b)
	}

	// Delegation: a narrower child for bob, admitted; a wider one refused.
	bob, err := key.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var do mcp.DelegateOut
	if err := callTool(t, cs, "jcp_delegate", map[string]any{"to": bob.Public().String(), "ceilings": map[string]string{"cpu": "10J"}, "expires": "10m",
		"caveats": map[string]any{"runs": 3}}, &do); err != nil {
		t.Fatal(err)
	}
	if do.Audience != bob.Public().String() || do.Terms.Ceilings["Cpu"] != 10e6 || do.Terms.Caveats.Runs != 3 || do.Depth != 1 || len(do.Chain) != 2 {
		t.Fatalf("delegate: %+v", do)
	}
	var child [][]byte
	for _, s := range do.Chain {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		child = append(child, b)
	}
	if bs, err := w.api.JCPBudgets(context.Background(), child); err != nil || len(bs) != 2 || !bs[1].Admitted || bs[1].Grant != do.Grant {
		t.Fatalf("the child's budgets: %+v %v", bs, err)
	}
	err = callTool(t, cs, "jcp_delegate", map[string]any{"to": bob.Public().String(), "ceilings": map[string]string{"cpu": "500J"}}, nil)
	refusedWith(t, "a delegation that widens", err, "widen-ceiling")
	err = callTool(t, cs, "jcp_delegate", map[string]any{"to": bob.Public().String(), "expires": "1000h"}, nil)
	refusedWith(t, "a delegation that outlives the grant", err, "widen-expiry")
	var we *jsonrpc.Error
	if err := callTool(t, cs, "jcp_delegate", map[string]any{"to": "nobody"}, nil); !errors.As(err, &we) || we.Code != int64(errs.MCPCode(errs.Invalid)) {
		t.Fatalf("a delegation to no key: %v", err)
	}

	// Checkpoints, in order.
	for seq := uint64(1); seq <= 2; seq++ {
		var co mcp.CheckpointOut
		if err := callTool(t, cs, "jcp_checkpoint", map[string]any{"run": run, "state": addr.Of([]byte("state")).String()}, &co); err != nil || co.Seq != seq || co.Grant != w.grant.ID.String() {
			t.Fatalf("checkpoint %d: %+v %v", seq, co, err)
		}
	}
	if err := callTool(t, cs, "jcp_checkpoint", map[string]any{"run": "not-a-run"}, nil); !errors.As(err, &we) || we.Code != int64(errs.MCPCode(errs.Invalid)) {
		t.Fatalf("a checkpoint of no run: %v", err)
	}
}

// --jcp and --as go together, and --as must be the chain's audience.
func TestMCPPrincipalFlags(t *testing.T) {
	home := t.TempDir()
	g := &cli.Globals{Home: home}
	d, err := g.StateDir()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := d.NewPrincipal("root", rand.Reader)
	agent, _ := d.NewPrincipal("agent", rand.Reader)
	if _, err := d.NewPrincipal("other", rand.Reader); err != nil {
		t.Fatal(err)
	}
	now := uint64(time.Now().Unix())
	tok, err := jcp.Seal(&jcp.Grant{Aud: agent.Public(), Iat: now, Exp: now + 60, Images: []addr.Addr{addr.Of([]byte("x"))},
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6}}, root)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(home, "c.jcp")
	os.WriteFile(f, jcp.EncodeChain([][]byte{tok.Bytes}), 0o600)
	for _, tc := range []struct{ file, as, says string }{
		{f, "", "go together"},
		{"", "agent", "go together"},
		{f, "other", "not the audience"},
		{filepath.Join(home, "none"), "agent", "no such file"},
	} {
		if _, err := mcpPrincipal(g, tc.file, tc.as); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("--jcp %q --as %q: %v, want %q", tc.file, tc.as, err, tc.says)
		}
	}
	p, err := mcpPrincipal(g, f, "agent")
	if err != nil || p == nil {
		t.Fatal(err)
	}
	a, _ := p.Present()
	b, _ := p.Present()
	if bytes.Equal(a.Invocation, b.Invocation) {
		t.Fatal("two presentations share an invocation")
	}
}
