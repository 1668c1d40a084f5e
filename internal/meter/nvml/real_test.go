//go:build linux && cgo && nvml

package nvml

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/meter"
)

// TestRealNVML runs the NVML probe against the real counter of this
// machine's GPUs (scripts/gpu-check runs it on a GPU machine, with a GPU
// load beside it). It prints the identities, the liveness status and the
// joules of a 2 s span. Without libnvidia-ml it checks the no-library
// report instead.
func TestRealNVML(t *testing.T) {
	src := &Source{}
	m := &meter.Meter{Sources: []meter.Source{src}, NumCPU: 1, Burn: func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}}
	st := m.Statuses()[0]
	t.Logf("nvml status: %s: %s", st.State, st.Detail)
	if st.State == meter.NoLibrary {
		var se *meter.StatusError
		if err := (&Source{}).Open(); !errors.As(err, &se) || se.State != meter.NoLibrary {
			t.Fatalf("no library, but Open says %v", err)
		}
		if os.Getenv("SANDBOX_EXPECT_GPU") != "" {
			t.Fatal("SANDBOX_EXPECT_GPU is set but NVML is not loadable")
		}
		return
	}
	for _, d := range src.Devices() {
		t.Logf("gpu: class %s model %q driver %q id %s", d.Class, d.Model, d.Driver, d.ID)
	}
	if st.State != meter.Live {
		t.Fatalf("NVML is loadable but not live: %v", st)
	}
	sp := m.Start()
	time.Sleep(2 * time.Second)
	rs := sp.Stop(meter.RunCPU{Time: 2 * time.Second, Known: true, Source: "wall"}, []device.Class{device.GPU})[device.GPU]
	for _, r := range rs {
		t.Logf("reading: %s %s %s = %s (%.1f W over 2 s) %s", r.Provenance, r.Scope, r.Source, r.UJ, float64(r.UJ)/2e6, r.Basis)
	}
}
