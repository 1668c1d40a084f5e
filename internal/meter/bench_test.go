package meter

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/device"
)

// fileCounter reads a real file, as a powercap zone is read, so that the
// benchmark pays the syscalls a real sample pays.
type fileCounter struct{ paths []string }

func (f *fileCounter) Name() string            { return "files" }
func (f *fileCounter) Class() device.Class     { return device.CPU }
func (f *fileCounter) Open() error             { return nil }
func (f *fileCounter) Rails() []string         { return f.paths }
func (f *fileCounter) Interval() time.Duration { return time.Millisecond }
func (f *fileCounter) Read() ([]uint64, error) {
	out := make([]uint64, len(f.paths))
	for i, p := range f.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[i], _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	return out, nil
}
func (f *fileCounter) Delta(p, q []uint64) ([]uint64, error) {
	out := make([]uint64, len(q))
	for i := range q {
		out[i] = q[i] - p[i]
	}
	return out, nil
}

// BenchmarkSample is the cost of one background sample of a two-socket
// host (two package zones); the meter takes one per DefaultSample.
func BenchmarkSample(b *testing.B) {
	dir := b.TempDir()
	var paths []string
	for _, z := range []string{"a", "b"} {
		p := filepath.Join(dir, z)
		os.WriteFile(p, []byte("123456789\n"), 0o644)
		paths = append(paths, p)
	}
	m := &Meter{Sources: []Source{&fileCounter{paths}}, NumCPU: 2, Interval: time.Hour}
	m.statuses = []Status{{State: Live}}
	m.once.Do(func() {})
	m.live = m.Sources
	sp := m.Start()
	for b.Loop() {
		sp.sample()
	}
	sp.Stop(RunCPU{}, nil)
}

// BenchmarkMeterOverhead runs a span at the default sampling interval for
// a few seconds and reports the meter's own CPU time as a share of one
// core.
func BenchmarkMeterOverhead(b *testing.B) {
	dir := b.TempDir()
	var paths []string
	for _, z := range []string{"a", "b"} {
		p := filepath.Join(dir, z)
		os.WriteFile(p, []byte("123456789\n"), 0o644)
		paths = append(paths, p)
	}
	var ru0, ru1 syscall.Rusage
	for b.Loop() {
		m := &Meter{Sources: []Source{&fileCounter{paths}}, NumCPU: 2}
		m.statuses = []Status{{State: Live}}
		m.once.Do(func() {})
		m.live = m.Sources
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		t0 := time.Now()
		sp := m.Start()
		time.Sleep(5 * DefaultSample)
		sp.Stop(RunCPU{}, nil)
		wall := time.Since(t0)
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
	}
}
