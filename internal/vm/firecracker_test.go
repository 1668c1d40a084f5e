//go:build linux

package vm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// fakeFirecracker is the Firecracker executor over the stand-in binary
// (internal/vm/testdata/fakefc: Firecracker's API, checked against its
// published schema, and its vsock socket, over a QEMU guest), with a KVM
// device that opens; log is where the stand-in writes each request and
// its verdict.
func fakeFirecracker(t *testing.T) (*Firecracker, string) {
	t.Helper()
	im := image(t, "")
	bin, err := guestbuild.FakeFirecracker()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := filepath.Abs("firecracker/testdata/firecracker-api.json")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "requests")
	t.Setenv("SANDBOX_FAKEFC_SCHEMA", schema)
	t.Setenv("SANDBOX_FAKEFC_LOG", log)
	kvm := filepath.Join(t.TempDir(), "kvm")
	os.WriteFile(kvm, nil, 0o600)
	return NewFirecracker(Config{ImageDir: filepath.Dir(im.Kernel), KVM: kvm}, bin), log
}

// TestFirecrackerRunsAVMUnit drives Firecracker's API (every request
// checked against its published schema) to boot a vm unit's image,
// reaches the guest agent over the vsock socket's CONNECT handshake, and
// runs the unit's program; the probe first earns the rung the same way.
func TestFirecrackerRunsAVMUnit(t *testing.T) {
	f, log := fakeFirecracker(t)
	if p := f.Probe(context.Background()); !p.Available {
		t.Fatalf("probe: %+v", p)
	}
	manifest, _ := os.ReadFile(filepath.Join(f.cfg.ImageDir, "manifest.json"))
	var out bytes.Buffer
	j := &executor.Job{Image: manifest, Grants: grant.Set{}, Stdout: &out,
		Unit: unit.Unit{Kind: tier.VM, Entry: "/sandbox/bin/sh", Args: []string{"sh", "-c", "uname -r; id -u; exit 3"}}}
	var ctlErr error
	j.OnStart = func(c executor.Control) { ctlErr = errors.Join(c.Freeze(), c.Thaw()) } // through the API: PATCH /vm
	res, err := f.Run(context.Background(), j)
	if err != nil || ctlErr != nil {
		t.Fatal(err, ctlErr)
	}
	if res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 3 || !strings.HasSuffix(out.String(), "\n65534\n") || res.Executor != "firecracker+kvm" {
		t.Fatalf("outcome %+v, stdout %q, executor %s", res.Outcome, out.String(), res.Executor)
	}
	b, _ := os.ReadFile(log)
	reqs := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(reqs) != 10 { // probe and run: machine-config, boot-source, vsock, actions each; the run's pause and resume
		t.Fatalf("requests:\n%s", b)
	}
	for _, r := range reqs {
		if !strings.HasSuffix(r, " <nil>") {
			t.Errorf("a request the API refuses: %s", r)
		}
	}
	j.Grants = grant.Set{Storage: []grant.Storage{{Path: t.TempDir(), Mode: grant.RW}}}
	if _, err := f.Run(context.Background(), j); err == nil || !strings.Contains(err.Error(), "shares no directories") {
		t.Fatalf("a storage grant: %v", err)
	}
}
