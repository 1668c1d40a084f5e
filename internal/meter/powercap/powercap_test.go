package powercap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/receipt"
)

// tree copies testdata/NAME to a temporary sysfs root.
func tree(t *testing.T, name string) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("testdata", name)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func zonePath(root, zone string) string {
	return filepath.Join(root, "class", "powercap", zone, "energy_uj")
}

func get(t *testing.T, root, zone string) uint64 {
	b, err := os.ReadFile(zonePath(root, zone))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func set(t *testing.T, root, zone string, v uint64) {
	if err := os.WriteFile(zonePath(root, zone), []byte(fmt.Sprintf("%d\n", v)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeClock drives a meter: each Sleep advances time and calls tick, which
// advances the counters as the scenario wants.
type fakeClock struct {
	t    time.Time
	step int
	tick func(step int)
}

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(d time.Duration) {
	c.t = c.t.Add(d)
	c.step++
	if c.tick != nil {
		c.tick(c.step)
	}
}

func newMeter(c *fakeClock, srcs ...meter.Source) *meter.Meter {
	return &meter.Meter{
		Sources: srcs, NumCPU: 4, Now: c.now, Sleep: c.sleep, Interval: time.Hour,
		TDP: map[device.Class]meter.TDP{device.CPU: {MilliWatts: 100_000, Origin: "configured"}},
	}
}

// advance adds per-zone amounts at every tick.
func advance(t *testing.T, root string, by map[string]uint64) func(int) {
	return func(int) {
		for z, d := range by {
			set(t, root, z, get(t, root, z)+d)
		}
	}
}

func TestIntelOneSocket(t *testing.T) {
	root := tree(t, "intel-1socket")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	// package and its MMIO twin advance together (the same counter); psys,
	// core, uncore and dram advance too, and must not be added to package.
	c.tick = advance(t, root, map[string]uint64{"intel-rapl:0": 1000, "intel-rapl-mmio:0": 1000, "intel-rapl:1": 5000, "intel-rapl:0:0": 600, "intel-rapl:0:2": 200})
	pkg := &Source{Root: root}
	dram := &Source{Root: root, DRAM: true}
	m := newMeter(c, pkg, dram)
	st := m.Statuses()
	if st[0].State != meter.Live || st[1].State != meter.Live {
		t.Fatalf("statuses %v", st)
	}
	if r := pkg.Rails(); len(r) != 1 || r[0] != "package-0" {
		t.Fatalf("package rails %v (the MMIO copy must be dropped)", r)
	}
	notes := strings.Join(pkg.Notes(), "; ")
	if !strings.Contains(notes, "psys present") || !strings.Contains(notes, "intel-rapl-mmio") {
		t.Fatalf("notes: %s", notes)
	}
	sp := m.Start()
	for range 10 {
		c.sleep(100 * time.Millisecond)
	}
	rs := sp.Stop(meter.RunCPU{Time: 500 * time.Millisecond, Known: true, Source: "test"}, []device.Class{device.CPU})[device.CPU]
	if len(rs) != 3 {
		t.Fatalf("readings %+v", rs)
	}
	host, run, dr := rs[0], rs[1], rs[2]
	if host.Provenance != receipt.HwShunt || host.Scope != receipt.ScopeHost || host.UJ != 10*1000 {
		t.Fatalf("host reading %+v (want package only: 10 ticks × 1000 µJ)", host)
	}
	// share = 10000 µJ × 0.5 s CPU / (4 CPUs × 1 s wall) = 1250 µJ
	if run.Provenance != receipt.ModelBased || run.Scope != receipt.ScopeRun || run.UJ != 1250 || !strings.Contains(run.Basis, "× run CPU 500000 µs / (4 CPUs × wall 1000000 µs)") {
		t.Fatalf("run reading %+v", run)
	}
	if dr.Source != "powercap-dram:intel-rapl:0:2" || dr.UJ != 10*200 || dr.Scope != receipt.ScopeHost {
		t.Fatalf("dram reading %+v", dr)
	}
}

func TestTwoSocketsWithHexIndexes(t *testing.T) {
	root := tree(t, "intel-2socket-hex")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	c.tick = advance(t, root, map[string]uint64{"intel-rapl:a": 700, "intel-rapl:b": 300, "intel-rapl:a:0": 10, "intel-rapl:b:0": 10})
	pkg := &Source{Root: root}
	m := newMeter(c, pkg)
	if st := m.Statuses(); st[0].State != meter.Live {
		t.Fatalf("status %v", st)
	}
	if r := strings.Join(pkg.Rails(), ","); r != "package-0,package-1" {
		t.Fatalf("rails %s", r)
	}
	sp := m.Start()
	c.sleep(time.Second)
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "test"}, []device.Class{device.CPU})[device.CPU]
	if rs[0].UJ != 1000 || rs[0].Source != "powercap:package-0+package-1" {
		t.Fatalf("host reading %+v (want both sockets summed)", rs[0])
	}
}

func TestAMDPerDieMirrorsCountedOnce(t *testing.T) {
	root := tree(t, "amd-mirrors")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	by := map[string]uint64{}
	for i := range 4 {
		by[fmt.Sprintf("intel-rapl:%d", i)] = 400 // one counter, four copies
	}
	c.tick = advance(t, root, by)
	pkg := &Source{Root: root}
	m := newMeter(c, pkg)
	if st := m.Statuses(); st[0].State != meter.Live {
		t.Fatalf("status %v", st)
	}
	if r := pkg.Rails(); len(r) != 1 {
		t.Fatalf("rails %v: mirrors not deduplicated", r)
	}
	sp := m.Start()
	c.sleep(time.Second)
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "test"}, []device.Class{device.CPU})[device.CPU]
	if rs[0].UJ != 400 {
		t.Fatalf("host reading %d, want 400 (one counter, not four)", rs[0].UJ)
	}
}

func TestDistinctDiesAreSummed(t *testing.T) {
	root := tree(t, "amd-mirrors")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	c.tick = func(step int) { // four real dies: different loads
		for i := range 4 {
			z := fmt.Sprintf("intel-rapl:%d", i)
			set(t, root, z, get(t, root, z)+uint64(100*(i+1)+step%3))
		}
	}
	pkg := &Source{Root: root}
	m := newMeter(c, pkg)
	m.Statuses()
	if r := pkg.Rails(); len(r) != 4 {
		t.Fatalf("rails %v: distinct dies were merged", r)
	}
}

func TestWrapMidSpan(t *testing.T) {
	root := tree(t, "wrap")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	c.tick = func(int) { set(t, root, "intel-rapl:0", (get(t, root, "intel-rapl:0")+300)%1000000) }
	m := newMeter(c, &Source{Root: root})
	if st := m.Statuses(); st[0].State != meter.Live {
		t.Fatalf("status %v", st)
	}
	set(t, root, "intel-rapl:0", 999000) // 1000 µJ below the zone's range
	before := get(t, root, "intel-rapl:0")
	sp := m.Start()
	for range 5 {
		c.sleep(100 * time.Millisecond)
	}
	after := get(t, root, "intel-rapl:0")
	if after > before {
		t.Fatalf("test did not wrap: %d → %d", before, after)
	}
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "test"}, []device.Class{device.CPU})[device.CPU]
	if rs[0].UJ != 1500 {
		t.Fatalf("across a wrap: %d µJ, want 1500", rs[0].UJ)
	}
}

func TestFrozenLumpyUnreadableAbsent(t *testing.T) {
	// Frozen: never advances.
	root := tree(t, "intel-1socket")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	m := newMeter(c, &Source{Root: root})
	if st := m.Statuses(); st[0].State != meter.Frozen {
		t.Fatalf("frozen: %v", st)
	}
	rs := m.Start().Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "cgroup"}, []device.Class{device.CPU})[device.CPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || !strings.Contains(rs[0].Basis, "powercap frozen") {
		t.Fatalf("frozen host reading: %+v", rs)
	}
	// 1 s CPU × 100 W / 4 CPUs = 25 J
	if rs[0].UJ != 25_000_000 {
		t.Fatalf("estimate %d", rs[0].UJ)
	}

	// Lumpy: advances in 3 of every 5 intervals.
	root = tree(t, "intel-1socket")
	c = &fakeClock{t: time.Unix(1e9, 0)}
	c.tick = func(step int) {
		if step%5 < 3 {
			set(t, root, "intel-rapl:0", get(t, root, "intel-rapl:0")+1000)
		}
	}
	m = newMeter(c, &Source{Root: root})
	if st := m.Statuses(); st[0].State != meter.Lumpy || !strings.Contains(st[0].Detail, "not in at least 4 of every 5") {
		t.Fatalf("lumpy: %v", st)
	}

	// Unreadable: energy_uj refused (root-only on current kernels).
	root = tree(t, "intel-1socket")
	deny := func(p string) ([]byte, error) {
		if filepath.Base(p) == "energy_uj" {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
		}
		return os.ReadFile(p)
	}
	m = newMeter(&fakeClock{t: time.Unix(1e9, 0)}, &Source{Root: root, ReadFile: deny})
	if st := m.Statuses(); st[0].State != meter.Unreadable || !strings.Contains(st[0].Detail, "root-only") {
		t.Fatalf("unreadable: %v", st)
	}

	// Absent.
	m = newMeter(&fakeClock{t: time.Unix(1e9, 0)}, &Source{Root: t.TempDir()})
	if st := m.Statuses(); st[0].State != meter.Absent {
		t.Fatalf("absent: %v", st)
	}
}

func TestFailedReadIsAnErrorNotZero(t *testing.T) {
	root := tree(t, "intel-1socket")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	c.tick = advance(t, root, map[string]uint64{"intel-rapl:0": 1000})
	fail := false
	src := &Source{Root: root, ReadFile: func(p string) ([]byte, error) {
		if fail && filepath.Base(p) == "energy_uj" {
			return nil, errors.New("EIO")
		}
		return os.ReadFile(p)
	}}
	m := newMeter(c, src)
	m.Statuses()
	sp := m.Start()
	fail = true
	c.sleep(time.Second)
	rs := sp.Stop(meter.RunCPU{Time: time.Second, Known: true, Source: "t"}, []device.Class{device.CPU})[device.CPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || !strings.Contains(rs[0].Basis, "failed during the span") {
		t.Fatalf("a failed read became a reading: %+v", rs)
	}
	os.WriteFile(zonePath(root, "intel-rapl:0"), []byte("garbage\n"), 0o644)
	if _, err := src.Read(); err == nil {
		t.Fatal("garbage counter read as a value")
	}
}

func TestHeldCounterIsNoReading(t *testing.T) {
	root := tree(t, "intel-1socket")
	c := &fakeClock{t: time.Unix(1e9, 0)}
	moving := true
	c.tick = func(int) {
		if moving {
			set(t, root, "intel-rapl:0", get(t, root, "intel-rapl:0")+1000)
		}
	}
	m := newMeter(c, &Source{Root: root})
	if m.Statuses()[0].State != meter.Live {
		t.Fatal("not live")
	}
	moving = false
	sp := m.Start()
	c.sleep(50 * time.Millisecond)
	rs := sp.Stop(meter.RunCPU{Time: 10 * time.Millisecond, Known: true, Source: "t"}, []device.Class{device.CPU})[device.CPU]
	if len(rs) != 1 || rs[0].Provenance != receipt.Estimator || !strings.Contains(rs[0].Basis, "held across the span") {
		t.Fatalf("held counter: %+v", rs)
	}
}
