package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/verify"
)

// jcpWorld is a service whose host trusts root; root grants alice
// 100 J of CPU on /bin/true and /bin/echo, and alice delegates 50 J of
// it to bob.
type jcpWorld struct {
	h                       *live.Manager
	s                       *Server
	c                       *client.Client
	root, alice, bob, carol key.Private
	images                  []addr.Addr // /bin/true, /bin/echo: sorted
	g0, g1                  *jcp.Token
}

func newJCPWorld(t *testing.T) *jcpWorld {
	t.Helper()
	h, s, c := serve(t)
	w := &jcpWorld{h: h, s: s, c: c, root: jcpKey(t, 1), alice: jcpKey(t, 2), bob: jcpKey(t, 3), carol: jcpKey(t, 4)}
	if err := os.MkdirAll(h.JCPPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.JCPPath(host.JCPRoots), []byte(w.root.Public().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/bin/true", "/bin/echo"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		w.images = append(w.images, addr.Of(b))
	}
	slices.SortFunc(w.images, func(a, b addr.Addr) int { return bytes.Compare(a[:], b[:]) })
	now := uint64(time.Now().Unix())
	w.g0 = jcpSeal(t, &jcp.Grant{Aud: w.alice.Public(), Iat: now - 10, Exp: now + 3600, Depth: 2, Images: w.images,
		Ceilings: cpu(100e6)}, w.root)
	w.g1 = w.child(t, w.g0, w.alice, w.bob, 50e6)
	return w
}

func jcpKey(t testing.TB, n byte) key.Private {
	t.Helper()
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func jcpSeal(t testing.TB, v any, k key.Private) *jcp.Token {
	t.Helper()
	tok, err := jcp.Seal(v, k)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func cpu(uj energy.Microjoules) map[device.Class]energy.Microjoules {
	return map[device.Class]energy.Microjoules{device.CPU: uj}
}

// child is a delegation of parent from by to to, with a CPU ceiling
// (which may widen: the tests of refusals want that).
func (w *jcpWorld) child(t *testing.T, parent *jcp.Token, by, to key.Private, ceiling energy.Microjoules) *jcp.Token {
	t.Helper()
	p := parent.Grant
	return jcpSeal(t, &jcp.Grant{Aud: to.Public(), Parent: &parent.ID, Iat: p.Iat, Exp: p.Exp - 60, Depth: p.Depth - 1,
		Images: p.Images, Ceilings: cpu(ceiling)}, by)
}

func chainOfTokens(ts ...*jcp.Token) [][]byte {
	var els [][]byte
	for _, t := range ts {
		els = append(els, t.Bytes)
	}
	return els
}

// present is the chain with a fresh invocation signed by by.
func present(t *testing.T, by key.Private, ts ...*jcp.Token) *client.JCP {
	t.Helper()
	inv := jcpSeal(t, &jcp.Invocation{Grant: ts[len(ts)-1].ID, Iat: uint64(time.Now().Unix())}, by)
	return &client.JCP{Chain: chainOfTokens(ts...), Invocation: inv.Bytes}
}

// refused checks that err is the service's refusal: its status and its
// code.
func refused(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("%s: want %d with code %s, got %v (%+v)", what, status, code, err, ae)
	}
}

func classOf(t *testing.T, b client.JCPBudget) client.JCPClassBudget {
	t.Helper()
	if len(b.Classes) != 1 || b.Classes[0].Class != "Cpu" {
		t.Fatalf("budget of %s: classes %+v", b.Grant, b.Classes)
	}
	return b.Classes[0]
}

// Every JCP endpoint through the client, each refusal with its code.
func TestJCPThroughTheAPI(t *testing.T) {
	w := newJCPWorld(t)
	c, ctx := w.c, context.Background()
	chain := chainOfTokens(w.g0, w.g1)

	info, err := c.JCPInfo(ctx)
	if err != nil || info.Key != w.h.Key.Public().String() || !slices.Equal(info.Roots, []string{w.root.Public().String()}) {
		t.Fatalf("info %+v %v", info, err)
	}

	// Verify: offline, nothing recorded.
	v, err := c.JCPVerifyChain(ctx, chain)
	if err != nil || !v.OK || len(v.Grants) != 2 {
		t.Fatalf("verify: %+v %v", v, err)
	}
	if g := v.Grants[1]; g.ID != w.g1.ID.String() || g.Iss != w.alice.Public().String() || g.Aud != w.bob.Public().String() ||
		g.Parent != w.g0.ID.String() || g.Terms.Ceilings["Cpu"] != 50e6 || len(g.Terms.Images) != 2 || g.Depth != 1 {
		t.Fatalf("verified grant %+v", g)
	}
	widened := w.child(t, w.g0, w.alice, w.bob, 200e6)
	byStranger := w.child(t, w.g0, w.carol, w.bob, 10e6)
	notRoot := jcpSeal(t, &jcp.Grant{Aud: w.bob.Public(), Iat: w.g0.Grant.Iat, Exp: w.g0.Grant.Exp, Images: w.images, Ceilings: cpu(1e6)}, w.alice)
	for _, tc := range []struct {
		name        string
		chain       [][]byte
		code, where string
	}{
		{"a child that widens", chainOfTokens(w.g0, widened), "widen-ceiling", "chain[1].ceilings.Cpu"},
		{"a child by someone not the parent's audience", chainOfTokens(w.g0, byStranger), "wrong-issuer", "chain[1].iss"},
		{"a chain without its root", chainOfTokens(w.g1), "broken-chain", "chain[0].parent"},
		{"an untrusted root", chainOfTokens(notRoot), "untrusted-root", "chain[0].iss"},
		{"bytes that are no token", [][]byte{[]byte("hello")}, "truncated", "chain[0]"},
	} {
		v, err := c.JCPVerifyChain(ctx, tc.chain)
		if err != nil || v.OK || v.Refusal == nil || v.Refusal.Code != tc.code || !strings.HasPrefix(v.Refusal.Where, tc.where) {
			t.Errorf("verify %s: %+v %+v %v; want %s at %s", tc.name, v, v.Refusal, err, tc.code, tc.where)
		}
		if tc.code == "truncated" {
			continue
		}
		// Admitting it is refused the same way, as denied.
		_, err = c.JCPAdmit(ctx, tc.chain)
		refused(t, "admit "+tc.name, err, 403, tc.code)
	}

	// Budgets before and after the chain is admitted.
	bs, err := c.JCPBudgets(ctx, chain)
	if err != nil || len(bs) != 2 || bs[0].Admitted || classOf(t, bs[1]).RemainingUJ != 50e6 {
		t.Fatalf("budgets of an unseen chain: %+v %v", bs, err)
	}
	if a, err := c.JCPAdmit(ctx, chain); err != nil || !a.OK || len(a.Grants) != 2 {
		t.Fatalf("admit: %+v %v", a, err)
	}
	bs, err = c.JCPBudgets(ctx, chain)
	if err != nil || len(bs) != 2 || !bs[0].Admitted || !bs[1].Admitted || bs[1].Parent != w.g0.ID.String() || classOf(t, bs[0]).CeilingUJ != 100e6 {
		t.Fatalf("budgets: %+v %v", bs, err)
	}

	// Checkpoints: by the grant's audience, in order.
	run := addr.Of([]byte("a run"))
	now := uint64(time.Now().Unix())
	cp := jcpSeal(t, &jcp.Checkpoint{Grant: w.g1.ID, Run: run, Seq: 1, Iat: now}, w.bob)
	rec, err := c.JCPCheckpoint(ctx, chain, cp.Bytes)
	if err != nil || rec.Token != cp.ID.String() || rec.Grant != w.g1.ID.String() || rec.Seq != 1 || rec.Budget.Checkpoint != 1 {
		t.Fatalf("checkpoint: %+v %v", rec, err)
	}
	_, err = c.JCPCheckpoint(ctx, chain, jcpSeal(t, &jcp.Checkpoint{Grant: w.g1.ID, Run: run, Seq: 1, Iat: now + 1}, w.bob).Bytes)
	refused(t, "a checkpoint out of order", err, 403, "invalid")
	_, err = c.JCPCheckpoint(ctx, chain, jcpSeal(t, &jcp.Checkpoint{Grant: w.g1.ID, Run: run, Seq: 2, Iat: now}, w.alice).Bytes)
	refused(t, "a checkpoint by someone not the audience", err, 403, "wrong-audience")

	// Amendments: only the issuer, only narrowing, in order.
	amend := func(by key.Private, seq uint64, ceiling energy.Microjoules) []byte {
		return jcpSeal(t, &jcp.Amendment{Grant: w.g1.ID, Seq: seq, Iat: now, Exp: w.g1.Grant.Exp, Images: w.images, Ceilings: cpu(ceiling)}, by).Bytes
	}
	_, err = c.JCPAmend(ctx, chain, amend(w.bob, 1, 10e6))
	refused(t, "an amendment by the grant's audience", err, 403, "amend-not-issuer")
	_, err = c.JCPAmend(ctx, chain, amend(w.alice, 1, 80e6))
	refused(t, "an amendment that widens", err, 403, "amend-widens")
	rec, err = c.JCPAmend(ctx, chain, amend(w.alice, 1, 40e6))
	if err != nil || rec.Seq != 1 || rec.Budget.Amended != 1 || classOf(t, rec.Budget).CeilingUJ != 40e6 {
		t.Fatalf("amend: %+v %v", rec, err)
	}
	_, err = c.JCPAmend(ctx, chain, amend(w.alice, 1, 30e6))
	refused(t, "an amendment out of order", err, 403, "amend-stale")

	// Standing grants: a mint policy alice signs for carol, minted by the
	// service's key on an event.
	policy := func(by key.Private, minter key.Public) []byte {
		return jcpSeal(t, &jcp.Policy{Grant: w.g0.ID, Minter: minter, To: w.carol.Public(), Max: 1, Rate: jcp.Rate{N: 1, Per: 60},
			Events: []string{"event:deploy"}, Iat: now, Exp: w.g0.Grant.Exp,
			Template: jcp.Template{TTL: 600, Depth: 0, Images: w.images, Ceilings: cpu(10e6)}}, by).Bytes
	}
	_, err = c.JCPPolicy(ctx, [][]byte{w.g0.Bytes, policy(w.alice, w.carol.Public())})
	refused(t, "a policy another key would mint under", err, 400, "wrong-issuer")
	_, err = c.JCPPolicy(ctx, [][]byte{w.g0.Bytes, policy(w.bob, w.h.Key.Public())})
	refused(t, "a policy by someone not the grant's audience", err, 403, "wrong-issuer")
	pol, err := c.JCPPolicy(ctx, [][]byte{w.g0.Bytes, policy(w.alice, w.h.Key.Public())})
	if err != nil || !pol.OK || pol.Policy == "" || len(pol.Grants) != 1 {
		t.Fatalf("policy: %+v %v", pol, err)
	}
	ev, err := c.JCPEvent(ctx, "deploy")
	if err != nil || len(ev.Minted) != 1 || len(ev.Refused) != 0 || ev.Minted[0].Audience != w.carol.Public().String() {
		t.Fatalf("event: %+v %v", ev, err)
	}
	if v, err := c.JCPVerifyChain(ctx, ev.Minted[0].Chain); err != nil || !v.OK || v.Grants[1].Policy != pol.Policy || v.Grants[1].Terms.Ceilings["Cpu"] != 10e6 {
		t.Fatalf("the minted chain: %+v %v", v, err)
	}
	if ev, err := c.JCPEvent(ctx, "deploy"); err != nil || len(ev.Minted) != 0 || len(ev.Refused) != 1 || ev.Refused[0].Code != "runs-exhausted" {
		t.Fatalf("an event past the policy's max: %+v %v", ev, err)
	}
	if ev, err := c.JCPEvent(ctx, "nothing-names-it"); err != nil || len(ev.Minted)+len(ev.Refused) != 0 {
		t.Fatalf("an event no policy names: %+v %v", ev, err)
	}

	// Revocations: by the issuer of the grant or of an ancestor.
	revoke := func(by key.Private) []byte {
		return jcpSeal(t, &jcp.Revocation{Grant: w.g1.ID, Iat: now}, by).Bytes
	}
	_, err = c.JCPRevoke(ctx, chain, revoke(w.carol))
	refused(t, "a revocation by a stranger", err, 403, "wrong-issuer")
	_, err = c.JCPRevoke(ctx, chain, revoke(w.bob))
	refused(t, "a revocation by the grant's audience", err, 403, "wrong-issuer")
	rec, err = c.JCPRevoke(ctx, chain, revoke(w.root))
	if err != nil || !rec.Budget.Revoked || rec.Grant != w.g1.ID.String() {
		t.Fatalf("revoke by an ancestor's issuer: %+v %v", rec, err)
	}

	// The ledger, live and replayed from its files.
	l, err := c.JCPLedger(ctx)
	if err != nil || l.Entries < 6 || len(l.Grants) != 3 || l.Grants[0].Grant != w.g0.ID.String() {
		t.Fatalf("ledger: %+v %v", l, err)
	}
	rep, err := c.JCPVerifyLedger(ctx)
	if err != nil || !rep.OK || rep.Entries != l.Entries || rep.Head != l.Head || len(rep.Grants) != 3 {
		t.Fatalf("ledger verify: %+v %v (live: %d %s)", rep, err, l.Entries, l.Head)
	}
	// A ledger rewritten under the service does not verify: its report
	// names the entry.
	p := w.h.JCPPath(host.JCPLedger)
	log, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(log, []byte("\n"))
	if err := os.WriteFile(p, bytes.Join(append(lines[:1:1], lines[2:]...), nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.JCPVerifyLedger(ctx); err != nil || rep.OK || rep.Refusal == nil || !strings.Contains(rep.Refusal.Message, "entry ") {
		t.Fatalf("a ledger with an entry cut out: %+v %+v %v", rep, rep.Refusal, err)
	}
	if err := os.WriteFile(p, log, 0o600); err != nil {
		t.Fatal(err)
	}
}

// What a token's caller may do: act on the chains it presents, and
// nothing that reads or mints across everyone's.
func TestJCPTokenCallers(t *testing.T) {
	w := newJCPWorld(t)
	tc := tokenClients(t, w.s, nil, "token-jcp-aaaaaaaaaaaaaaa")[0]
	ctx := context.Background()
	chain := chainOfTokens(w.g0, w.g1)
	if _, err := tc.JCPLedger(ctx); status(err) != 403 {
		t.Fatalf("a token lists the ledger: %v", err)
	}
	if _, err := tc.JCPVerifyLedger(ctx); status(err) != 403 {
		t.Fatalf("a token verifies the ledger: %v", err)
	}
	if _, err := tc.JCPEvent(ctx, "deploy"); status(err) != 403 {
		t.Fatalf("a token posts an event: %v", err)
	}
	if v, err := tc.JCPVerifyChain(ctx, chain); err != nil || !v.OK {
		t.Fatalf("a token verifies a chain: %+v %v", v, err)
	}
	if _, err := tc.JCPAdmit(ctx, chain); err != nil {
		t.Fatalf("a token admits a delegation: %v", err)
	}
	if bs, err := tc.JCPBudgets(ctx, chain); err != nil || len(bs) != 2 {
		t.Fatalf("a token reads its chain's budgets: %+v %v", bs, err)
	}
	cp := jcpSeal(t, &jcp.Checkpoint{Grant: w.g1.ID, Run: addr.Of([]byte("r")), Seq: 1, Iat: uint64(time.Now().Unix())}, w.bob)
	if _, err := tc.JCPCheckpoint(ctx, chain, cp.Bytes); err != nil {
		t.Fatalf("a token posts its checkpoint: %v", err)
	}
	// It cannot forge: the ledger checks who signed.
	rev := jcpSeal(t, &jcp.Revocation{Grant: w.g0.ID, Iat: uint64(time.Now().Unix())}, w.bob)
	_, err := tc.JCPRevoke(ctx, chain, rev.Bytes)
	refused(t, "a token's revocation signed by the wrong key", err, 403, "wrong-issuer")
	rev = jcpSeal(t, &jcp.Revocation{Grant: w.g1.ID, Iat: uint64(time.Now().Unix())}, w.alice)
	if _, err := tc.JCPRevoke(ctx, chain, rev.Bytes); err != nil {
		t.Fatalf("a token's revocation signed by the issuer: %v", err)
	}
	// A narrowed local caller (an MCP connection) is no operator either.
	doc, err := authority.Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Narrowed(doc).JCPLedger(ctx); status(err) != 403 {
		t.Fatalf("a narrowed caller lists the ledger: %v", err)
	}
}

// Bad input is a 400 that names the field; nothing panics, and the
// service answers after it.
func TestJCPBadInput(t *testing.T) {
	w := newJCPWorld(t)
	raw := rawClient(w.h)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	g0 := b64(w.g0.Bytes)
	many := `"` + strings.Repeat(g0+`","`, 999) + g0 + `"`
	big := b64(make([]byte, jcp.MaxToken+1))
	for _, tc := range []struct {
		path, body string
		code       int
		says       string
	}{
		{"/v1/jcp/chains/verify", `{"chain": ["!!!!"]}`, 400, `field \"chain[0]\": not standard base64`},
		{"/v1/jcp/chains/verify", `{"chain": []}`, 400, `field \"chain\": 0 elements`},
		{"/v1/jcp/chains/verify", `{}`, 400, `field \"chain\": 0 elements`},
		{"/v1/jcp/chains/verify", `{"chain": [` + many + `]}`, 400, `field \"chain\": 1000 elements; a chain has 1 to 64`},
		{"/v1/jcp/chains/verify", `{"chain": ["` + big + `"]}`, 400, "a token is at most 65536"},
		{"/v1/jcp/chains/verify", `{"chain": ["` + g0 + `"], "colour": 1}`, 400, `unknown field \"colour\"`},
		{"/v1/jcp/chains/verify", `{"chain": "` + g0 + `"}`, 400, `field \"chain\"`},
		{"/v1/jcp/chains/verify", `{"chain": [`, 400, "malformed JSON"},
		{"/v1/jcp/chains", `{"chain": ["` + b64([]byte("hello")) + `"]}`, 400, `field \"chain[0]\": truncated`},
		{"/v1/jcp/chains", `{"chain": ["` + g0 + `", "!"]}`, 400, `field \"chain[1]\"`},
		{"/v1/jcp/chains/budget", `{"chain": ["` + g0 + `"], "extra": []}`, 400, `unknown field \"extra\"`},
		{"/v1/jcp/revocations", `{"chain": ["` + g0 + `"]}`, 400, `field \"revocation\": required`},
		{"/v1/jcp/revocations", `{"chain": ["` + g0 + `"], "revocation": "` + g0 + `"}`, 400, `field \"revocation\": invalid: protected.content_type: a application/jcp-grant+cbor; want a application/jcp-revocation+cbor`},
		{"/v1/jcp/amendments", `{"chain": ["` + g0 + `"], "amendment": "` + big + `"}`, 400, "a token is at most"},
		{"/v1/jcp/amendments", `{"chain": ["` + g0 + `"], "revocation": ""}`, 400, `unknown field \"revocation\"`},
		{"/v1/jcp/checkpoints", `{"chain": ["` + g0 + `"], "checkpoint": "AAAA"}`, 400, `field \"checkpoint\"`},
		{"/v1/jcp/policies", `{"chain": ["` + g0 + `"]}`, 400, "then the mint policy"},
		{"/v1/jcp/events", `{"name": ""}`, 400, `field \"name\"`},
		{"/v1/jcp/events", `{"name": "a\u0000b"}`, 400, `field \"name\"`},
		{"/v1/jcp/ledger/verify", `{"all": true}`, 400, `unknown field \"all\"`},
	} {
		req, _ := http.NewRequest("POST", "http://sandbox"+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e client.APIError
		json.Unmarshal(b, &e)
		if resp.StatusCode != tc.code || e.Category != "invalid" || !strings.Contains(string(b), tc.says) {
			t.Errorf("%s %.80s: %d %s; want %d saying %s", tc.path, tc.body, resp.StatusCode, b, tc.code, tc.says)
		}
	}
	if _, err := w.c.JCPInfo(context.Background()); err != nil {
		t.Fatalf("after the bad input: %v", err)
	}
}

// A run and an exec presented with a chain: decided by the gate before
// anything runs, sealed as sandbox.attestation/3 with the decision in
// the run directory, spent against every grant of the chain; a refusal
// is 403 with its code.
func TestJCPRunAndExecThroughTheAPI(t *testing.T) {
	w := newJCPWorld(t)
	c, ctx := w.c, context.Background()

	r, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:5J"}, JCP: present(t, w.bob, w.g0, w.g1)}, io.Discard, io.Discard)
	if err != nil || !r.Sealed || r.ExitStatus != 0 {
		t.Fatalf("run: %+v %v", r, err)
	}
	gated(t, c, r)
	bs, err := c.JCPBudgets(ctx, chainOfTokens(w.g0, w.g1))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if cb := classOf(t, b); b.Runs != 1 || cb.ReservedUJ != 0 || cb.RemainingUJ != cb.CeilingUJ-cb.SpentUJ {
			t.Fatalf("after the run, %s: %+v %+v", b.Grant, b, cb)
		}
	}

	// Refusals, each before anything ran.
	inv := present(t, w.bob, w.g0, w.g1)
	if _, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:5J"}, JCP: inv}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		x    client.ExecSpec
		code string
	}{
		{"an invocation seen before", client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:5J"}, JCP: inv}, "replay"},
		{"a budget over the ceiling", client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:60J"}, JCP: present(t, w.bob, w.g0, w.g1)}, "over-ceiling"},
		{"an image not granted", client.ExecSpec{Args: []string{"/bin/cat", "/dev/null"}, Grants: []string{"cpu:5J"}, JCP: present(t, w.bob, w.g0, w.g1)}, "image-not-granted"},
		{"presented by someone not the audience", client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:5J"}, JCP: present(t, w.alice, w.g0, w.g1)}, "wrong-audience"},
		{"a widening chain", client.ExecSpec{Args: []string{"/bin/true"}, Grants: []string{"cpu:5J"}, JCP: present(t, w.bob, w.g0, w.child(t, w.g0, w.alice, w.bob, 500e6))}, "widen-ceiling"},
	} {
		_, err := c.Run(ctx, tc.x, nil, nil)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 403 || ae.Category != "denied" || ae.Code != tc.code || !strings.Contains(ae.Message, "decision b3:") {
			t.Errorf("%s: want 403 denied %s naming its decision, got %v (%+v)", tc.name, tc.code, err, ae)
		}
	}

	// An exec in a live sandbox.
	sb, err := c.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:5J"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, err = c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/echo", "gated"}, JCP: present(t, w.bob, w.g0, w.g1)}, &out, io.Discard)
	if err != nil || !r.Sealed || out.String() != "gated\n" {
		t.Fatalf("exec: %+v %v %q", r, err, out.String())
	}
	gated(t, c, r)
	_, err = c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/echo", "x"}, JCP: present(t, w.carol, w.g0, w.g1)}, nil, nil)
	refused(t, "an exec presented by someone not the audience", err, 403, "wrong-audience")
	// Revoked: the next exec is refused.
	if _, err := c.JCPRevoke(ctx, chainOfTokens(w.g0, w.g1), jcpSeal(t, &jcp.Revocation{Grant: w.g1.ID, Iat: uint64(time.Now().Unix())}, w.alice).Bytes); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/echo", "x"}, JCP: present(t, w.bob, w.g0, w.g1)}, nil, nil)
	refused(t, "an exec under a revoked grant", err, 403, "revoked")
}

// gated checks that a sealed run was allowed by the gate: its
// attestation is /3 and cites the decision kept in its run directory,
// and the service verifies it.
func gated(t *testing.T, c *client.Client, r *client.Result) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Records, verify.FileJCPDecision))
	if err != nil {
		t.Fatal(err)
	}
	d, err := jcp.Open(b)
	if err != nil || d.Decision == nil || !d.Decision.Allow {
		t.Fatalf("the run's decision: %v %+v", err, d)
	}
	a, err := os.ReadFile(filepath.Join(r.Records, verify.FileAttestation))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(a, []byte(`"`+attest.TypeV3+`"`)) || !bytes.Contains(a, []byte(d.ID.String())) {
		t.Fatalf("the attestation is not /3 citing %s: %s", d.ID, a)
	}
	rep, err := c.RunReport(context.Background(), r.Run)
	if err != nil || !rep.Verified {
		t.Fatalf("the service does not verify the run: %+v %v", rep, err)
	}
}

// Every route the server serves is in docs/openapi.json, and every path
// there is served.
func TestOpenAPIHasEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, p := range (&Server{}).routes().patterns {
		method, path, _ := strings.Cut(p, " ")
		served[strings.ToLower(method)+" "+path] = true
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("%s is served, not in docs/openapi.json", p)
		}
	}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" || m == "summary" || m == "description" {
				continue
			}
			if !served[m+" "+path] {
				t.Errorf("docs/openapi.json has %s %s; the server does not serve it", strings.ToUpper(m), path)
			}
		}
	}
}

// FuzzJCPBody: any body of a JCP request is decoded strictly, and its
// chain and token read (bounded, base64, opened), or refused as bad input
// (or over a limit); never a panic, never another kind of error.
func FuzzJCPBody(f *testing.F) {
	k, err := key.FromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	g, err := jcp.Seal(&jcp.Grant{Aud: k.Public(), Iat: 1, Exp: 2, Images: []addr.Addr{addr.Of(nil)}, Ceilings: cpu(1)}, k)
	if err != nil {
		f.Fatal(err)
	}
	rev, err := jcp.Seal(&jcp.Revocation{Grant: g.ID, Iat: 1}, k)
	if err != nil {
		f.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	for _, s := range []string{
		`{"chain":["` + b64(g.Bytes) + `"],"revocation":"` + b64(rev.Bytes) + `"}`,
		`{"chain":["` + b64(g.Bytes) + `","` + b64(g.Bytes) + `"],"revocation":"` + b64(g.Bytes) + `"}`,
		`{"chain":[]}`, `{"chain":["!"]}`, `{"chain":["AAAA"],"revocation":"AA=="}`, `{"colour":1}`, `{`, ``, `null`,
		`{"chain":"x"}`, `{"chain":[1]}`, `{"chain":["` + b64(rev.Bytes) + `"],"revocation":"` + b64(rev.Bytes[:20]) + `"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var in jcpRevocationIn
		w := httptest.NewRecorder()
		err := decodeJCP(w, httptest.NewRequest("POST", "/v1/jcp/revocations", strings.NewReader(body)), &in)
		if err == nil {
			_, _, err = chainIn("chain", in.Chain)
		}
		if err == nil {
			var b []byte
			if b, err = envelope("revocation", in.Revocation); err == nil {
				_, err = open("revocation", b, jcp.TypeRevocation)
			}
		}
		if err != nil {
			if c := errs.Of(err); c != errs.Invalid && c != errs.Limit {
				t.Fatalf("%q: %v is %s, want invalid or limit", body, err, c)
			}
		}
	})
}
