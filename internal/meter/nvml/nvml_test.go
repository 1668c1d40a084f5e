package nvml

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/receipt"
)

// fakeLib is a fake NVML: the hardware edge.
type fakeLib struct {
	initErr error
	gpus    []*fakeGPU
}

type fakeGPU struct {
	name, uuid string
	mj         uint64
	energyErr  error
	limit      uint64 // mW
}

func (f *fakeLib) Init() error                    { return f.initErr }
func (f *fakeLib) Shutdown() error                { return nil }
func (f *fakeLib) DriverVersion() (string, error) { return "550.54.15", nil }
func (f *fakeLib) Devices() ([]Device, error) {
	out := make([]Device, len(f.gpus))
	for i, g := range f.gpus {
		out[i] = g
	}
	return out, nil
}
func (g *fakeGPU) Name() (string, error)        { return g.name, nil }
func (g *fakeGPU) UUID() (string, error)        { return g.uuid, nil }
func (g *fakeGPU) TotalEnergy() (uint64, error) { return g.mj, g.energyErr }
func (g *fakeGPU) PowerLimit() (uint64, error) {
	if g.limit == 0 {
		return 0, errors.New("not supported")
	}
	return g.limit, nil
}

type clock struct {
	t    time.Time
	tick func()
}

func (c *clock) now() time.Time { return c.t }
func (c *clock) sleep(d time.Duration) {
	c.t = c.t.Add(d)
	if c.tick != nil {
		c.tick()
	}
}

func setup(lib *fakeLib, tick func()) (*meter.Meter, *clock, *Source) {
	c := &clock{t: time.Unix(1e9, 0), tick: tick}
	src := &Source{Lib: lib}
	return &meter.Meter{Sources: []meter.Source{src}, NumCPU: 8, Now: c.now, Sleep: c.sleep, Interval: time.Hour,
		TDP: map[device.Class]meter.TDP{device.GPU: {MilliWatts: 700_000, Origin: "configured"}}}, c, src
}

func TestLive(t *testing.T) {
	g := &fakeGPU{name: "NVIDIA H200", uuid: "GPU-1234", mj: 1_000_000}
	m, c, src := setup(&fakeLib{gpus: []*fakeGPU{g}}, func() { g.mj += 7_000 }) // 70 W at 100 ms
	st := m.Statuses()[0]
	if st.State != meter.Live || !strings.Contains(st.Detail, "GPU-1234") {
		t.Fatalf("status %v", st)
	}
	devs := src.Devices()
	if len(devs) != 1 || devs[0].Model != "NVIDIA H200" || devs[0].ID != "GPU-1234" || devs[0].Driver != "nvidia 550.54.15" || devs[0].Class != device.GPU {
		t.Fatalf("identity %+v", devs)
	}
	// Shared: the counter is host context; the run's figure is the power
	// limit over the wall time, never a CPU-time share.
	sp := m.Start()
	c.sleep(time.Second)
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "t"}, []device.Class{device.GPU})[device.GPU]
	if len(rs) != 2 || rs[0].Provenance != receipt.Estimator || rs[0].Scope != receipt.ScopeRun || rs[0].UJ != 700*energy.Joule ||
		!strings.Contains(rs[0].Basis, "not held by one run at a time") ||
		rs[1].Provenance != receipt.HwShunt || rs[1].Scope != receipt.ScopeHost || rs[1].UJ != 7_000_000 || rs[1].Source != "nvml:GPU-1234" {
		t.Fatalf("readings %+v", rs)
	}
	// Held by one run at a time: the whole delta is the run's.
	m.Exclusive = map[device.Class]bool{device.GPU: true}
	sp = m.Start()
	c.sleep(time.Second)
	rs = sp.Stop(meter.RunCPU{Time: time.Millisecond, Known: true, Source: "t"}, []device.Class{device.GPU})[device.GPU]
	if len(rs) != 2 || rs[1].Scope != receipt.ScopeRun || rs[1].Provenance != receipt.HwShunt || rs[1].UJ != 7_000_000 || !strings.Contains(rs[1].Basis, "one run at a time") {
		t.Fatalf("exclusive readings %+v", rs)
	}
}

func TestFrozen(t *testing.T) {
	m, _, _ := setup(&fakeLib{gpus: []*fakeGPU{{uuid: "GPU-1", mj: 5}}}, nil)
	if st := m.Statuses()[0]; st.State != meter.Frozen {
		t.Fatalf("status %v", st)
	}
}

func TestDriverReloadIsNotAWrap(t *testing.T) {
	g := &fakeGPU{uuid: "GPU-1", mj: 1_000_000}
	m, c, _ := setup(&fakeLib{gpus: []*fakeGPU{g}}, func() { g.mj += 1000 })
	if m.Statuses()[0].State != meter.Live {
		t.Fatal("not live")
	}
	sp := m.Start()
	c.sleep(time.Second)
	g.mj = 500 // the driver reloaded: the counter restarted
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "t"}, []device.Class{device.GPU})[device.GPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || !strings.Contains(rs[0].Basis, "driver reload") {
		t.Fatalf("readings after a reload %+v", rs)
	}
}

func TestLibraryMissing(t *testing.T) {
	m, _, _ := setup(&fakeLib{initErr: ErrNoLibrary}, nil)
	st := m.Statuses()[0]
	if st.State != meter.NoLibrary || !strings.Contains(st.Detail, "no NVML library") {
		t.Fatalf("status %v", st)
	}
	// The library this binary was built with (the stub, or the real one on a
	// machine without the driver) also says so.
	src := &Source{}
	err := src.Open()
	var se *meter.StatusError
	if !errors.As(err, &se) || se.State != meter.NoLibrary {
		t.Fatalf("default library on this machine: %v", err)
	}
}

func TestNoEnergyCounter(t *testing.T) {
	m, _, _ := setup(&fakeLib{gpus: []*fakeGPU{{uuid: "GPU-1", energyErr: errors.New("Not Supported")}}}, nil)
	if st := m.Statuses()[0]; st.State != meter.Unreadable {
		t.Fatalf("status %v", st)
	}
}

// TestEstimateUsesThePowerLimit: with no configured rated power, a GPU
// run's estimate is the power limit over the wall time, not a CPU
// count's share.
func TestEstimateUsesThePowerLimit(t *testing.T) {
	g := &fakeGPU{uuid: "GPU-9", mj: 1, limit: 350_000}
	m, c, _ := setup(&fakeLib{gpus: []*fakeGPU{g}}, nil) // frozen: not live
	delete(m.TDP, device.GPU)
	sp := m.Start()
	c.sleep(2 * time.Second)
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "t"}, []device.Class{device.GPU})[device.GPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || rs[0].UJ != 700*energy.Joule || !strings.Contains(rs[0].Basis, "NVML enforced power limit") {
		t.Fatalf("readings %+v", rs)
	}
}
