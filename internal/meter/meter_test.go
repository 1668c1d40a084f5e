package meter

import (
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/receipt"
)

// counter is a one-rail fake Source whose value a test sets.
type counter struct {
	v       uint64
	openErr error
}

func (c *counter) Name() string            { return "fake" }
func (c *counter) Class() device.Class     { return device.CPU }
func (c *counter) Open() error             { return c.openErr }
func (c *counter) Rails() []string         { return []string{"rail"} }
func (c *counter) Read() ([]uint64, error) { return []uint64{c.v}, nil }
func (c *counter) Interval() time.Duration { return 60 * time.Millisecond }
func (c *counter) Delta(p, q []uint64) ([]uint64, error) {
	if q[0] < p[0] {
		return nil, ErrReset
	}
	return []uint64{q[0] - p[0]}, nil
}

func TestWindowsHold(t *testing.T) {
	tr, f := true, false
	tests := []struct {
		adv  []bool
		want bool
	}{
		{[]bool{tr, tr, tr, tr, tr}, true},
		{[]bool{tr, tr, f, tr, tr, tr}, true},
		{[]bool{tr, f, tr, f, tr}, false},
		{[]bool{tr, tr, tr, tr, f, f, tr, tr}, false},
	}
	for _, tc := range tests {
		if got := windowsHold(tc.adv); got != tc.want {
			t.Errorf("windowsHold(%v) = %v", tc.adv, got)
		}
	}
}

func TestProbeNeedsMinSpan(t *testing.T) {
	c := &counter{}
	now := time.Unix(0, 0)
	m := &Meter{Sources: []Source{c}, NumCPU: 1, Now: func() time.Time { return now },
		Sleep: func(d time.Duration) { now = now.Add(d); c.v += 10 }}
	st := m.Statuses()[0]
	if st.State != Live || !strings.Contains(st.Detail, "over 600ms") {
		t.Fatalf("status %v", st)
	}
	// At least ProbeIntervals (10) intervals of 60 ms, which is more than
	// the 300 ms minimum.
	if c.v != 100 {
		t.Fatalf("sampled %d intervals, want 10", c.v/10)
	}
	// Probed once per meter.
	m.Statuses()
	if c.v != 100 {
		t.Fatal("probed twice")
	}
}

// TestProbeToleratesOneMiss: with ten intervals, one interval in which
// the counter did not advance leaves it live (4 of every 5); two in one
// window do not.
func TestProbeToleratesOneMiss(t *testing.T) {
	for _, tc := range []struct {
		miss map[int]bool
		want State
	}{
		{map[int]bool{3: true}, Live},
		{map[int]bool{3: true, 5: true}, Lumpy},
	} {
		c := &counter{}
		now := time.Unix(0, 0)
		i := 0
		m := &Meter{Sources: []Source{c}, NumCPU: 1, Now: func() time.Time { return now },
			Sleep: func(d time.Duration) {
				now = now.Add(d)
				i++
				if !tc.miss[i] {
					c.v += 10
				}
			}}
		if st := m.Statuses()[0]; st.State != tc.want {
			t.Errorf("misses %v: %v, want %s", tc.miss, st, tc.want)
		}
	}
}

func TestOpenErrorIsTheStatus(t *testing.T) {
	m := &Meter{Sources: []Source{&counter{openErr: &StatusError{State: NoLibrary, Detail: "no NVML library"}}}, NumCPU: 2,
		TDP: map[device.Class]TDP{device.CPU: {MilliWatts: 10_000, Origin: "configured"}}}
	if st := m.Statuses()[0]; st.State != NoLibrary {
		t.Fatalf("status %v", st)
	}
	rs := m.Start().Stop(RunCPU{}, []device.Class{device.CPU})[device.CPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || !strings.Contains(rs[0].Basis, "as if one CPU were busy") || !strings.Contains(rs[0].Basis, "no NVML library") {
		t.Fatalf("readings %+v", rs)
	}
}

func TestMulDivAndApportion(t *testing.T) {
	if got := mulDiv(1<<62, 8, 16); got != 1<<61 {
		t.Fatalf("mulDiv = %d", got)
	}
	if got := mulDiv(1<<63, 1<<63, 1); got != ^uint64(0) {
		t.Fatalf("saturation = %d", got)
	}
	if got := apportion(1000, 2*time.Second, 1, time.Second); got != 1000 {
		t.Fatalf("share above the whole: %d", got)
	}
	if got := apportion(1000, time.Second, 4, time.Second); got != 250 {
		t.Fatalf("share = %d", got)
	}
}

func TestTDP(t *testing.T) {
	if d := DetectTDP("AMD EPYC 7B13 64-Core Processor", 2); d.MilliWatts != 3_750 || !strings.HasPrefix(d.Origin, "detected") {
		t.Fatalf("known: %+v", d)
	}
	if d := DetectTDP("AMD EPYC", 2); d.MilliWatts != 8_000 || !strings.HasPrefix(d.Origin, "assumed") {
		t.Fatalf("unknown: %+v", d)
	}
	m, err := ParseTDP("cpu=225W, gpu=700")
	if err != nil || m[device.CPU].MilliWatts != 225_000 || m[device.GPU].MilliWatts != 700_000 {
		t.Fatalf("ParseTDP = %v, %v", m, err)
	}
	for _, bad := range []string{"cpu", "fpga=1W", "cpu=-1W", "cpu=lots"} {
		if _, err := ParseTDP(bad); err == nil {
			t.Errorf("ParseTDP(%q) accepted", bad)
		}
	}
}
