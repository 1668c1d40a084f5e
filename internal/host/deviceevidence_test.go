package host

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/hw/nvidia/nvidiatest"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// gpuS6 stands where an S6 executor that gives a GPU would (the hardware
// edge: no GPU here): S1's runs, evidence from the software provider,
// and for the GPU a real NVIDIA Hopper SPDM report recorded in 2024
// (whatever nonce it is asked for: only the GPU can sign over ours).
type gpuS6 struct {
	*native.Executor
	cpu    tee.Provider
	report []byte
	chain  []byte
}

func (gpuS6) Name() string    { return "gpu-s6-stand-in" }
func (gpuS6) Tier() tier.Tier { return tier.S6 }
func (g gpuS6) Evidence(ctx context.Context, data [tee.ReportDataSize]byte) (tee.Evidence, error) {
	return g.cpu.Evidence(ctx, data)
}
func (g gpuS6) DeviceEvidence(_ context.Context, classes []device.Class, _ [32]byte) ([]tee.DeviceEvidence, error) {
	return []tee.DeviceEvidence{{Class: device.GPU, ID: "GPU-0", Kind: "nvidia-spdm", Report: g.report, Chain: g.chain}}, nil
}

// gpuS6Plain gives a GPU at S6 and has no device evidence.
type gpuS6Plain struct{ gpuS6 }

func (gpuS6Plain) DeviceEvidence() {}

// TestS6GPUEvidenceIsItsOwnLine: an S6 run granted a GPU seals the GPU's
// evidence on its own line (evidence-devices.json, cited by the claim's
// evidence), beside the CPU's, never folded into it. verify checks the
// line: the recorded report's chain to NVIDIA's root and its signature
// pass, and its nonce is not the run's (evidence-report-data); checked
// at a time its chain is not valid, evidence-expired. An S6 executor that gives a GPU without its
// evidence cannot run a unit granted one.
func TestS6GPUEvidenceIsItsOwnLine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("S1 runs in the host's tests need root (euid %d)", os.Geteuid())
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	// S1's own GPU passthrough, on a fake NVIDIA tree.
	ex, err := native.New(native.Config{StateDir: h.Store.Dir.Root, Memory: 256 << 20, Pids: 64, Self: helper, NoWarm: true, DevRoot: nvidiatest.FakeRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	td := filepath.Join("..", "..", "evidence", "spdm", "testdata")
	report, err := os.ReadFile(filepath.Join(td, "hopperAttestationReport.txt"))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := os.ReadFile(filepath.Join(td, "hopper_cert_chain_case1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := tee.Select("software", "", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	g := gpuS6{Executor: ex, cpu: cpu, report: report, chain: chain}
	h.Executors = append(h.Executors, g)
	// S1 gives a GPU only to a run whose cgroup refuses it to others.
	if cg, err := cgroup.Detect("/sys/fs/cgroup"); err == nil && os.Geteuid() == 0 {
		h.Cgroups = cg
	} else {
		t.Skipf("S1 gives a GPU only to a run in a cgroup of its own: %v (euid %d)", err, os.Geteuid())
	}
	h.Devices = append(h.Devices, attest.Device{Class: device.GPU, Model: "NVIDIA H100 (recorded)", Driver: "nvidia 550.90.07", ID: "GPU-0"})
	h.Meter = &meter.Meter{
		Sources:   []meter.Source{&fakeGPU{watts: 10}},
		NumCPU:    2,
		Interval:  5 * time.Millisecond,
		TDP:       map[device.Class]meter.TDP{device.CPU: {MilliWatts: 8000, Origin: "test"}},
		Exclusive: map[device.Class]bool{device.GPU: true},
	}
	sh, _ := os.ReadFile("/bin/sh")
	run := func() (*Run, error) {
		return h.Run(context.Background(), Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "true"},
			Grants: grants(t, "confidential", "gpu:10J"), Deadline: 30 * time.Second})
	}
	r, err := run()
	if err != nil {
		t.Fatal(err)
	}
	e := r.Attestation.Claim.Evidence
	if r.Choice.Chosen != tier.S6 || e == nil || e.Devices == nil {
		t.Fatalf("chosen %s, evidence %+v", r.Choice.Chosen, e)
	}
	raw, err := os.ReadFile(filepath.Join(r.Dir, verify.FileDeviceEvidence))
	if err != nil {
		t.Fatal(err)
	}
	d, err := attest.DecodeDevices(raw)
	if err != nil || len(d.Devices) != 1 || d.Devices[0].Class != device.GPU || d.Devices[0].Kind != "nvidia-spdm" {
		t.Fatalf("the device line: %+v %v", d, err)
	}
	checked := false
	for _, res := range (&verify.Verifier{Trust: key.NewTrust(h.Key.Public()), AllowSoftware: true}).Path(r.Dir) {
		switch {
		case res.Kind == verify.KindDevices:
			checked = true
			if !errors.Is(res.Err, reject.EvidenceReportData) {
				t.Fatalf("the recorded GPU report at the run's end: %v", res.Err)
			}
		case res.Err != nil:
			t.Fatalf("%s: %v", res.Path, res.Err)
		}
	}
	if !checked {
		t.Fatal("verify did not check the device evidence")
	}
	early, _ := time.Parse(time.RFC3339, "2019-01-01T00:00:00Z")
	if _, err := verify.DeviceEvidence(raw, &r.Attestation.Claim, early); !errors.Is(err, reject.EvidenceExpired) {
		t.Fatalf("the recorded GPU report in 2019, before its chain was issued: %v", err)
	}
	// Without device evidence, an S6 executor giving the GPU is refused.
	h.Executors = append(h.Executors[:len(h.Executors)-1], gpuS6Plain{g})
	if _, err := run(); !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("a GPU no evidence binds: %v", err)
	}
}
