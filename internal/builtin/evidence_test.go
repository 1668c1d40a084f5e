//go:build linux

package builtin

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// recorded stands where the platform's firmware would (the hardware
// edge): it answers every request with one real SEV-SNP report and its
// certificate table, as configfs-tsm returns them, whatever report_data
// it was asked for, since only AMD's firmware can sign a report over
// ours.
type recorded struct{ report []byte }

func (recorded) Name() string { return "recorded-sev-snp" }
func (recorded) Probe() tier.Probe {
	return tier.Probe{Available: true, Reason: "a test's recorded report"}
}
func (r recorded) Evidence(context.Context, [tee.ReportDataSize]byte) (tee.Evidence, error) {
	return tee.Evidence{Provider: r.Name(), Platform: "sev_guest", Report: r.report}, nil
}

// TestS6HardwareEvidenceMustCarryTheBinding: an S6 run sealed with a real
// SEV-SNP report whose report_data is not the run's binding (a report
// made for something else, replayed) is refused by verify with
// evidence-report-data, though the report itself is genuine: its chain
// to AMD's root and its signature are checked and pass first.
func TestS6HardwareEvidenceMustCarryTheBinding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("S6 runs in S1's confinement, which needs root here")
	}
	td := filepath.Join("..", "..", "evidence", "testdata")
	rep, err := os.ReadFile(filepath.Join(td, "test-report.bin"))
	if err != nil {
		t.Fatal(err)
	}
	vcek, err := os.ReadFile(filepath.Join(td, "test-vcek.der"))
	if err != nil {
		t.Fatal(err)
	}
	report := append(rep, abi.CertsFromProto(&spb.CertificateChain{VcekCert: vcek}).Marshal()...)
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Home: t.TempDir(), Executors: func(site executor.Site) ([]executor.Executor, error) {
		n, err := native.New(native.Config{StateDir: site.StateDir, Memory: 256 << 20, Pids: 128, NoWarm: true, TempName: site.TempName, Self: helper})
		if err != nil {
			return nil, err
		}
		return []executor.Executor{n, confidential{in: n, provider: recorded{report}}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sh, _ := os.ReadFile("/bin/sh")
	r, err := h.Run(context.Background(), host.Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "true"},
		Grants: hosttest.Grants(t, "confidential")})
	if err != nil {
		t.Fatal(err)
	}
	if e := r.Attestation.Claim.Evidence; e == nil || e.Kind != "sev-snp" || e.Software {
		t.Fatalf("evidence %+v", e)
	}
	found := false
	for _, res := range (&verify.Verifier{Trust: key.NewTrust(h.Key.Public())}).Path(r.Dir) {
		if res.Kind == verify.KindEvidence {
			found = true
			if !errors.Is(res.Err, reject.EvidenceReportData) {
				t.Fatalf("a report not over the binding: %v", res.Err)
			}
		} else if res.Err != nil {
			t.Fatalf("%s: %v", res.Path, res.Err)
		}
	}
	if !found {
		t.Fatal("verify did not check the evidence")
	}
}

// S6 (S1 with the software provider here; configfs-tsm where the host is
// a confidential VM) passes the executor conformance suite; without
// evidence it is unavailable, with the provider's reason.
func TestConformanceS6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("S6 runs in S1's confinement, which needs root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	n, err := native.New(native.Config{StateDir: t.TempDir(), NoWarm: true, Self: helper})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	p, err := tee.Select("software", "", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	sh := executortest.Shell{}
	s := sh.Subject(confidential{in: n, provider: p})
	const net = "net:127.0.0.1:9" // a destination never reached: it gives the program the egress proxy
	s.Deny = executortest.Program{
		Job:    sh.Job("curl -sS -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:1/", net),
		Denied: &executortest.Denial{Kind: grant.KindNet, Target: "127.0.0.1:1"},
	}
	s.Unavailable = func(t *testing.T) (executor.Executor, string) {
		return confidential{in: n, provider: &tee.ConfigFS{Root: t.TempDir()}}, "not a confidential VM"
	}
	executortest.Run(t, s)
}

// BenchmarkVerifyS6Run: `sandbox verify` of a whole S6 run directory
// (its attestation, records, output and its evidence, here the software
// provider's), and of one carrying a real SEV-SNP report (refused at its
// binding, after its chain and signature were checked).
func BenchmarkVerifyS6Run(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("S6 runs in S1's confinement, which needs root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		b.Fatal(err)
	}
	td := filepath.Join("..", "..", "evidence", "testdata")
	rep, _ := os.ReadFile(filepath.Join(td, "test-report.bin"))
	vcek, _ := os.ReadFile(filepath.Join(td, "test-vcek.der"))
	snp := append(rep, abi.CertsFromProto(&spb.CertificateChain{VcekCert: vcek}).Marshal()...)
	soft, err := tee.Select("software", "", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []tee.Provider{soft, recorded{snp}} {
		h, err := host.New(host.Config{Home: b.TempDir(), Executors: func(site executor.Site) ([]executor.Executor, error) {
			n, err := native.New(native.Config{StateDir: site.StateDir, NoWarm: true, TempName: site.TempName, Self: helper})
			if err != nil {
				return nil, err
			}
			return []executor.Executor{n, confidential{in: n, provider: p}}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		sh, _ := os.ReadFile("/bin/sh")
		r, err := h.Run(context.Background(), host.Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "true"},
			Grants: hosttest.Grants(b, "confidential")})
		if err != nil {
			b.Fatal(err)
		}
		v := &verify.Verifier{Trust: key.NewTrust(h.Key.Public()), AllowSoftware: true}
		b.Run(p.Name(), func(b *testing.B) {
			for b.Loop() {
				v.Path(r.Dir)
			}
		})
		h.Close()
	}
}
