package builtin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// s6Host is a host with the built-in executors and the given evidence
// provider.
func s6Host(t *testing.T, provider string) *host.Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("S6 runs in S1's confinement, which needs root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Home: t.TempDir(), Executors: builtin.Config{S1Helper: helper, Memory: 256 << 20, Pids: 128, TEEProvider: provider}.Executors})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func s6Run(t *testing.T, h *host.Host) (*host.Run, error) {
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	return h.Run(context.Background(), host.Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "echo confidential"},
		Grants: hosttest.Grants(t, "confidential")})
}

func results(dir string, pub key.Public, allow bool) []verify.Result {
	return (&verify.Verifier{Trust: key.NewTrust(pub), AllowSoftware: allow}).Path(dir)
}

// TestS6SoftwareEvidence: with the software provider named, a unit
// granted confidential runs at S6; its attestation is /4 and cites its
// evidence, whose report_data is the claim's binding; verify accepts it
// only when told to allow software evidence, and says so; a changed
// evidence file is refused by its address.
func TestS6SoftwareEvidence(t *testing.T) {
	h := s6Host(t, "software")
	r, err := s6Run(t, h)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Attestation.Claim
	if r.Choice.Chosen != tier.S6 || c.Type != attest.TypeV4 || c.Evidence == nil || !c.Evidence.Software || c.Evidence.Kind != "software" {
		t.Fatalf("chosen %s, claim %s, evidence %+v", r.Choice.Chosen, c.Type, c.Evidence)
	}
	if !strings.HasSuffix(c.Executor, "+software") {
		t.Fatalf("executor %q does not name its provider", c.Executor)
	}
	pub := h.Key.Public()
	var ev *verify.Result
	for _, res := range results(r.Dir, pub, true) {
		if res.Err != nil {
			t.Fatalf("%s: %v", res.Path, res.Err)
		}
		if res.Kind == verify.KindEvidence {
			ev = &res
		}
	}
	if ev == nil || !strings.Contains(ev.Note, "SOFTWARE-GROUNDED") {
		t.Fatalf("the evidence is not shown as software-grounded: %+v", ev)
	}
	// Under a policy of measurements allowed: refused unless the
	// report's is among them.
	strict := &verify.Verifier{Trust: key.NewTrust(pub), AllowSoftware: true, EvidencePolicy: &evidence.Policy{Measurements: []string{strings.Repeat("00", 48)}}}
	for _, res := range strict.Path(r.Dir) {
		if res.Kind == verify.KindEvidence && !errors.Is(res.Err, reject.EvidenceMeasurement) {
			t.Fatalf("a measurement the policy does not allow: %v", res.Err)
		}
	}
	refused := false
	for _, res := range results(r.Dir, pub, false) {
		if res.Kind == verify.KindEvidence {
			refused = errors.Is(res.Err, reject.EvidenceSoftware)
		}
	}
	if !refused {
		t.Fatal("software evidence verified without being allowed")
	}
	// Another run's evidence in its place: its address is not the one
	// the claim cites.
	r2, err := s6Run(t, h)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := os.ReadFile(filepath.Join(r2.Dir, verify.FileEvidence))
	p := filepath.Join(r.Dir, verify.FileEvidence)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, other, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, res := range results(r.Dir, pub, true) {
		if res.Kind == verify.KindEvidence && !errors.Is(res.Err, reject.Address) {
			t.Fatalf("another run's evidence: %v", res.Err)
		}
	}
}

// TestS6UnavailableWithoutATEE: with the default provider (configfs-tsm)
// on a machine that is not a confidential VM, a unit granted
// confidential is refused, never run at a lower tier, and the refusal
// says why.
func TestS6UnavailableWithoutATEE(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/config/tsm/report"); err == nil {
		t.Skip("this machine has configfs-tsm: it may be a confidential VM")
	}
	h := s6Host(t, "")
	_, err := s6Run(t, h)
	if !errors.Is(err, tier.ErrUnavailable) || !strings.Contains(err.Error(), "configfs") {
		t.Fatalf("S6 without a TEE: %v", err)
	}
	p := h.Probe(context.Background(), tier.S6)
	if p.Available || !strings.Contains(p.Reason, "/sys/kernel/config/tsm/report") {
		t.Fatalf("the S6 probe: %+v", p)
	}
}
