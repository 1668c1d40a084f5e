package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// jcpWorld: root (trusted by h) grants alice ceiling on images.
type jcpWorld struct {
	root, alice key.Private
	g           *jcp.Token
}

func newJCPWorld(t *testing.T, h *Host, ceiling energy.Microjoules, images ...addr.Addr) *jcpWorld {
	t.Helper()
	w := &jcpWorld{root: testKey(t, 1), alice: testKey(t, 2)}
	if err := os.MkdirAll(h.JCPPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.JCPPath(JCPRoots), []byte(w.root.Public().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range images {
		for j := i + 1; j < len(images); j++ {
			if bytes.Compare(images[j][:], images[i][:]) < 0 {
				images[i], images[j] = images[j], images[i]
			}
		}
	}
	now := uint64(time.Now().Unix())
	tok, err := jcp.Seal(&jcp.Grant{Aud: w.alice.Public(), Iat: now - 10, Exp: now + 3600, Images: images,
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: ceiling}}, w.root)
	if err != nil {
		t.Fatal(err)
	}
	w.g = tok
	return w
}

func cpuGrant(t testing.TB, g string) grant.Set {
	s, err := grant.ParseArgs([]string{g}, "/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testKey(t testing.TB, n byte) key.Private {
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (w *jcpWorld) present(t *testing.T) *gate.Presentation {
	inv, err := jcp.Seal(&jcp.Invocation{Grant: w.g.ID, Iat: uint64(time.Now().Unix())}, w.alice)
	if err != nil {
		t.Fatal(err)
	}
	return &gate.Presentation{Chain: [][]byte{w.g.Bytes}, Invocation: inv.Bytes}
}

// A gated run is decided before it runs, sealed as /3 citing its
// decision, verifies, and its energy is posted to the ledger.
func TestJCPRunIsGatedSealedAndPosted(t *testing.T) {
	h := newHost(t)
	t.Cleanup(func() { h.Close() })
	hello := image(t, "hello")
	w := newJCPWorld(t, h, 100e6, addr.Of(hello))
	r, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: hello, Entry: "hello", Args: []string{"hello", "jcp"}, Grants: cpuGrant(t, "cpu:5J"), JCP: w.present(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Attestation.Claim
	if c.Type != attest.TypeV3 || c.JCP == nil {
		t.Fatalf("claim %s, jcp %v", c.Type, c.JCP)
	}
	for _, v := range verifyRun(t, h, r.Dir) {
		if v.Err != nil {
			t.Fatalf("%s: %v", v.Path, v.Err)
		}
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, verify.FileJCPDecision))
	if err != nil {
		t.Fatal(err)
	}
	d, err := jcp.Open(b)
	if err != nil || !d.Decision.Allow || d.ID != *c.JCP || d.Decision.Reserve[device.CPU] != 5e6 {
		t.Fatalf("decision %v %+v", err, d)
	}
	g, err := h.Gate()
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := g.Ledger.Budget(w.g.ID)
	total, _ := r.Receipt.Total()
	if cb := bu.Classes[0]; cb.Reserved != 0 || cb.Spent != total || total == 0 {
		t.Fatalf("budget after the run: %+v, receipt %s", cb, total)
	}
}

// A denied run runs nothing, seals no run, and keeps its decision.
func TestJCPDeniedRunRunsNothing(t *testing.T) {
	h := newHost(t)
	t.Cleanup(func() { h.Close() })
	hello := image(t, "hello")
	w := newJCPWorld(t, h, 1e6, addr.Of(hello))
	var out bytes.Buffer
	_, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: hello, Entry: "hello", Args: []string{"hello"}, Grants: cpuGrant(t, "cpu:5J"), JCP: w.present(t), Stdout: &out})
	var de *gate.DeniedError
	var re *reject.Error
	if !errors.As(err, &de) || !errors.As(err, &re) || re.Code != reject.OverCeiling {
		t.Fatalf("got %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("the guest ran: %q", out.String())
	}
	if runs, _ := h.Store.Runs(); len(runs) != 0 {
		t.Fatalf("a denied run was sealed: %v", runs)
	}
	if _, err := os.Stat(h.JCPPath(JCPDenied, de.Decision.Hex()+".cose")); err != nil {
		t.Fatal(err)
	}
	// No root trusted: every chain is refused, and says why.
	os.Remove(h.JCPPath(JCPRoots))
	h.closeJCP()
	_, err = h.Run(context.Background(), Request{Kind: tier.Wasm, Image: hello, Entry: "hello", Args: []string{"hello"}, Grants: cpuGrant(t, "cpu:1mJ"), JCP: w.present(t)})
	if !errors.As(err, &re) || re.Code != reject.UntrustedRoot {
		t.Fatalf("with no root trusted: %v", err)
	}
}

// An amendment that tightens the grant stops a running S1 run when its
// new budget is spent (docs/spec/jcp.md §8).
func TestJCPAmendmentStopsARunningRun(t *testing.T) {
	h := newS1Host(t)
	req, err := Command(CommandLine{Args: []string{"sh", "-c", "while :; do :; done"}, Grants: cpuGrant(t, "cpu:1kJ"), Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	w := newJCPWorld(t, h, 2000e6, addr.Of(req.Image))
	req.JCP, req.Deadline = w.present(t), 2*time.Minute
	g0 := w.g.Grant
	req.OnStart = func(executor.Control) {
		am, err := jcp.Seal(&jcp.Amendment{Grant: w.g.ID, Seq: 1, Iat: uint64(time.Now().Unix()), Exp: g0.Exp, Images: g0.Images,
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1000}}, w.root) // 1 mJ
		if err != nil {
			t.Error(err)
			return
		}
		g, err := h.Gate()
		if err == nil {
			err = g.Ledger.Amend(am)
		}
		if err != nil {
			t.Error(err)
		}
	}
	r, err := h.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	o := r.Attestation.Claim.Outcome
	if o.Status != attest.BudgetExhausted || !strings.Contains(o.Detail, "budget") {
		t.Fatalf("outcome %+v", o)
	}
}

// The gate follows the roots file: a root added or removed while the
// host runs (a service) counts from the next decision, without a restart,
// and a chain verified under a removed root is not remembered past it.
func TestJCPRootsFollowTheFile(t *testing.T) {
	h := newHost(t)
	t.Cleanup(func() { h.Close() })
	hello := image(t, "hello")
	w := newJCPWorld(t, h, 100e6, addr.Of(hello))
	run := func() error {
		_, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: hello, Entry: "hello", Args: []string{"hello"}, Grants: cpuGrant(t, "cpu:1J"), JCP: w.present(t)})
		return err
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.JCPPath(JCPRoots), []byte("# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var re *reject.Error
	if err := run(); !errors.As(err, &re) || re.Code != reject.UntrustedRoot {
		t.Fatalf("after the root was removed: %v", err)
	}
	if err := os.WriteFile(h.JCPPath(JCPRoots), []byte(w.root.Public().String()+"\n# back\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(); err != nil {
		t.Fatalf("after the root was added back: %v", err)
	}
}

// TestJCPRefusesAProgramTheRunCanReplace: a gated run's decision names
// its program by address, so a program that lies (or whose links lead)
// under a writable grant, where a process of this run or of another
// given that directory can replace it between the host's read and the
// exec, is refused before the gate; under a read-only grant it runs.
func TestJCPRefusesAProgramTheRunCanReplace(t *testing.T) {
	h := newS1Host(t)
	dir, err := os.MkdirTemp("/var/tmp", "sandbox-jcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	script := []byte("#!/bin/sh\necho pinned\n")
	if err := os.WriteFile(filepath.Join(dir, "tool"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/true", filepath.Join(dir, "true")); err != nil {
		t.Fatal(err)
	}
	trueBytes, err := readRegular("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	w := newJCPWorld(t, h, 50e6, addr.Of(script), addr.Of(trueBytes))
	for _, tc := range []struct {
		prog, mode string
		refused    bool
	}{
		{"tool", "rw", true},
		{"true", "rw", true}, // a link the run can point elsewhere
		{"tool", "ro", false},
	} {
		req, err := Command(CommandLine{Args: []string{filepath.Join(dir, tc.prog)}, Grants: grants(t, "fs:"+dir+":"+tc.mode), Cwd: "/"})
		if err != nil {
			t.Fatal(err)
		}
		req.JCP = w.present(t)
		_, err = h.Run(context.Background(), req)
		var ie *InvalidError
		switch {
		case tc.refused && (!errors.As(err, &ie) || !strings.Contains(err.Error(), "under the writable grant "+dir)):
			t.Errorf("%s under a %s grant: %v, want refused as replaceable", tc.prog, tc.mode, err)
		case !tc.refused && err != nil:
			t.Errorf("%s under a %s grant: %v, want it run", tc.prog, tc.mode, err)
		}
	}
}

// TestJCPSaysWhatItsDecisionBinds: a gated native run's decision names
// the bytes the host read, which are not checked again at the exec; the
// sealed run says so, naming the path and the address.
func TestJCPSaysWhatItsDecisionBinds(t *testing.T) {
	h := newS1Host(t)
	dir, err := os.MkdirTemp("/var/tmp", "sandbox-jcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	script := []byte("#!/bin/sh\necho decided\n")
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, script, 0o755); err != nil {
		t.Fatal(err)
	}
	w := newJCPWorld(t, h, 50e6, addr.Of(script))
	req, err := Command(CommandLine{Args: []string{tool}, Grants: grants(t, "fs:"+dir+":ro"), Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	req.JCP = w.present(t)
	var out bytes.Buffer
	req.Stdout = &out
	r, err := h.Run(context.Background(), req)
	if err != nil || out.String() != "decided\n" {
		t.Fatalf("%v %q", err, out.String())
	}
	notes := strings.Join(r.Attestation.Claim.Notes, "\n")
	if want := "the bytes the host read at " + tool + " (" + addr.Of(script).String() + "); they were not checked again at the exec"; !strings.Contains(notes, want) {
		t.Fatalf("notes %q, want %q", notes, want)
	}
}
