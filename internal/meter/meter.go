package meter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/receipt"
)

// Source is one hardware energy counter.
type Source interface {
	// Name identifies the source, e.g. "powercap" or "nvml".
	Name() string
	// Class is the device class the counter measures.
	Class() device.Class
	// Open finds the counter's rails; an error here is the source's status
	// (absent, unreadable, no library).
	Open() error
	// Rails names the rails summed into the source's figure.
	Rails() []string
	// Read returns each rail's cumulative counter in µJ. A failed read is an
	// error, never zero.
	Read() ([]uint64, error)
	// Delta returns each rail's advance from prev to cur, handling that
	// rail's wrap; ErrReset when a counter went backwards without a wrap.
	Delta(prev, cur []uint64) ([]uint64, error)
	// Interval is the liveness sampling interval that suits the counter.
	Interval() time.Duration
}

// Rated is a Source that knows its devices' rated power (a GPU's power
// limit), which the estimator uses for its class where none is
// configured.
type Rated interface {
	RatedPower() (milliwatts uint64, origin string, ok bool)
}

// Deduper is a Source that can recognise rails that mirror each other
// from the liveness samples; it drops them and returns the indexes kept.
type Deduper interface {
	Dedupe(samples [][]uint64) []int
}

// ErrReset is returned by Delta when a counter was reset (a driver reload).
var ErrReset = errors.New("counter reset")

// State is why a source is, or is not, used.
type State string

// The states.
const (
	Live       State = "live"
	Absent     State = "absent"     // no such counter on this host
	Unreadable State = "unreadable" // present, but this process cannot read it
	NoLibrary  State = "no-library" // the vendor library is missing
	Frozen     State = "frozen"     // readable, never advanced under load
	Lumpy      State = "lumpy"      // advanced, but not in 4 of every 5 intervals
	Failed     State = "failed"     // a read failed during the probe
)

// Status is a source's liveness verdict with the evidence.
type Status struct {
	Source string
	Class  device.Class
	State  State
	Detail string
}

func (s Status) String() string {
	return fmt.Sprintf("%s (%s): %s: %s", s.Source, s.Class, s.State, s.Detail)
}

// StatusError carries a non-live state out of Open.
type StatusError struct {
	State  State
	Detail string
}

func (e *StatusError) Error() string { return string(e.State) + ": " + e.Detail }

// Liveness rule parameters (seed 001).
const (
	MinIntervals = 5
	WindowOf     = 5
	MinInWindow  = 4
	// ProbeIntervals is how many intervals the probe samples: at least two
	// windows, so that "4 of every 5" really tolerates a miss (with only
	// 5 intervals, "at least 5 advances" would demand every one).
	ProbeIntervals = 10
	MinSpan        = 300 * time.Millisecond
	DefaultSample  = time.Second // background sampling while a span is open
)

// Meter measures spans. The zero value is not usable; set Sources,
// NumCPU and TDP.
type Meter struct {
	Sources []Source
	// TDP is the rated power per class used by the Estimator, and where it
	// came from ("configured", "detected from …", "assumed …").
	TDP map[device.Class]TDP
	// NumCPU is the number of logical CPUs of the host.
	NumCPU int
	// Interval is the background sampling interval while a span is open;
	// 0 means DefaultSample.
	Interval time.Duration
	// Now and Sleep are the clock; tests inject fakes.
	Now   func() time.Time
	Sleep func(time.Duration)
	// Burn keeps a CPU busy until stop is closed, during liveness probes.
	Burn func(stop <-chan struct{})
	// Exclusive are the classes whose devices the host gives to one run at
	// a time: a counter's whole delta over the run is then the run's own.
	// For any other class but Cpu (which is apportioned by the run's CPU
	// time) a counter gives only host context, and the run's figure is
	// estimated.
	Exclusive map[device.Class]bool

	once     sync.Once
	statuses []Status
	live     []Source
}

// TDP is a class's rated power in milliwatts and its origin.
type TDP struct {
	MilliWatts uint64
	Origin     string
}

func (m *Meter) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Meter) sleep(d time.Duration) {
	if m.Sleep != nil {
		m.Sleep(d)
		return
	}
	time.Sleep(d)
}

// Statuses probes every source once per Meter and returns the verdicts.
func (m *Meter) Statuses() []Status {
	m.once.Do(func() {
		for _, s := range m.Sources {
			st := m.probe(s)
			m.statuses = append(m.statuses, st)
			if st.State == Live {
				m.live = append(m.live, s)
			}
		}
	})
	return m.statuses
}

// probe applies the liveness rule to one source.
func (m *Meter) probe(s Source) Status {
	st := Status{Source: s.Name(), Class: s.Class()}
	if err := s.Open(); err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			st.State, st.Detail = se.State, se.Detail
		} else {
			st.State, st.Detail = Failed, err.Error()
		}
		return st
	}
	stop := make(chan struct{})
	if m.Burn != nil {
		go m.Burn(stop)
	}
	defer close(stop)
	iv := s.Interval()
	n := ProbeIntervals
	if need := int((MinSpan + iv - 1) / iv); need > n {
		n = need
	}
	first, err := s.Read()
	if err != nil {
		st.State, st.Detail = Failed, "read: "+err.Error()
		return st
	}
	samples := [][]uint64{first}
	start := m.now()
	for i := 0; i < n; i++ {
		m.sleep(iv)
		cur, err := s.Read()
		if err != nil {
			st.State, st.Detail = Failed, "read: "+err.Error()
			return st
		}
		samples = append(samples, cur)
	}
	if d, ok := s.(Deduper); ok {
		keep := d.Dedupe(samples)
		for k, smp := range samples {
			proj := make([]uint64, len(keep))
			for i, j := range keep {
				proj[i] = smp[j]
			}
			samples[k] = proj
		}
	}
	rails := s.Rails()
	advanced := make([][]bool, len(rails)) // per rail, per interval
	for k := 1; k < len(samples); k++ {
		d, err := s.Delta(samples[k-1], samples[k])
		if err != nil {
			st.State, st.Detail = Failed, err.Error()
			return st
		}
		for r := range rails {
			advanced[r] = append(advanced[r], d[r] > 0)
		}
	}
	span := m.now().Sub(start)
	if span < MinSpan {
		st.State, st.Detail = Failed, fmt.Sprintf("the probe spanned %v, less than %v", span, MinSpan)
		return st
	}
	for r, adv := range advanced {
		count := 0
		for _, a := range adv {
			if a {
				count++
			}
		}
		switch {
		case count == 0:
			st.State = Frozen
			st.Detail = fmt.Sprintf("rail %s did not advance in any of %d intervals of %v while the CPU was busy", rails[r], len(adv), iv)
			return st
		case count < MinIntervals || !windowsHold(adv):
			st.State = Lumpy
			st.Detail = fmt.Sprintf("rail %s advanced in %d of %d intervals of %v, not in at least %d of every %d", rails[r], count, len(adv), iv, MinInWindow, WindowOf)
			return st
		}
	}
	st.State = Live
	st.Detail = fmt.Sprintf("%s advanced in at least %d of every %d intervals of %v over %v while the CPU was busy", strings.Join(rails, " + "), MinInWindow, WindowOf, iv, span.Round(time.Millisecond))
	return st
}

// windowsHold reports whether every window of WindowOf consecutive
// intervals has at least MinInWindow advances.
func windowsHold(adv []bool) bool {
	for i := 0; i+WindowOf <= len(adv); i++ {
		c := 0
		for _, a := range adv[i : i+WindowOf] {
			if a {
				c++
			}
		}
		if c < MinInWindow {
			return false
		}
	}
	return true
}

// Span brackets one run.
type Span struct {
	m     *Meter
	start time.Time
	mu    sync.Mutex
	srcs  []*spanSource
	stop  chan struct{}
	done  chan struct{}
	// held are the classes whose devices the run holds alone for this
	// span (Hold), as Meter.Exclusive says for every span.
	held map[device.Class]bool
}

// Hold says the run holds the devices of class c alone for the whole
// span (the host leased them to it before the span started and keeps
// them until it is read): a counter's whole delta is then the run's, as
// for a class in Meter.Exclusive. Call it before the span is read.
func (sp *Span) Hold(c device.Class) {
	if sp.held == nil {
		sp.held = map[device.Class]bool{}
	}
	sp.held[c] = true
}

// exclusive says the run's figure for c is a counter's whole delta.
func (sp *Span) exclusive(c device.Class) bool { return sp.m.Exclusive[c] || sp.held[c] }

type spanSource struct {
	src   Source
	last  []uint64
	total []uint64
	err   error
}

// Start opens a span: it reads every live source and starts the
// background sampler.
func (m *Meter) Start() *Span {
	m.Statuses()
	sp := &Span{m: m, start: m.now(), stop: make(chan struct{}), done: make(chan struct{})}
	for _, s := range m.live {
		ss := &spanSource{src: s, total: make([]uint64, len(s.Rails()))}
		ss.last, ss.err = s.Read()
		sp.srcs = append(sp.srcs, ss)
	}
	iv := m.Interval
	if iv == 0 {
		iv = DefaultSample
	}
	if len(sp.srcs) == 0 {
		close(sp.done)
		return sp
	}
	go func() {
		defer close(sp.done)
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			select {
			case <-sp.stop:
				return
			case <-t.C:
				sp.sample()
			}
		}
	}()
	return sp
}

// sample reads every source and accumulates per-rail deltas.
func (sp *Span) sample() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, ss := range sp.srcs {
		if ss.err != nil {
			continue
		}
		cur, err := ss.src.Read()
		if err != nil {
			ss.err = fmt.Errorf("read: %w", err)
			continue
		}
		d, err := ss.src.Delta(ss.last, cur)
		if err != nil {
			ss.err = err
			continue
		}
		for i := range d {
			ss.total[i] += d[i]
		}
		ss.last = cur
	}
}

// RunCPU is the run's CPU time and where it came from.
type RunCPU struct {
	Time   time.Duration
	Known  bool
	Source string // e.g. "cgroup v1 cpuacct.usage"
}

// Stop closes the span and returns the readings for each class in
// classes, over the span.
func (sp *Span) Stop(cpu RunCPU, classes []device.Class) map[device.Class][]receipt.Reading {
	return sp.StopAt(cpu, classes, time.Time{}, time.Time{})
}

// StopAt closes the span and returns the readings for each class in
// classes for a run that ran from start to end, within the span: the
// run's readings (an estimate, a share) are stamped with and computed
// over the run's window, never the span's; a whole-host counter reading
// keeps the span's window, which is what it measured. Zero times mean
// the span's.
func (sp *Span) StopAt(cpu RunCPU, classes []device.Class, start, end time.Time) map[device.Class][]receipt.Reading {
	close(sp.stop)
	<-sp.done
	sp.sample()
	spanEnd := sp.m.now()
	if start.IsZero() || start.Before(sp.start) {
		start = sp.start
	}
	if end.IsZero() || end.After(spanEnd) || end.Before(start) {
		end = spanEnd
	}
	out := map[device.Class][]receipt.Reading{}
	w := window{
		spanStart: uint64(sp.start.UnixNano()), spanEnd: uint64(spanEnd.UnixNano()), spanWall: spanEnd.Sub(sp.start),
		start: uint64(start.UnixNano()), end: uint64(end.UnixNano()), wall: end.Sub(start),
	}
	for _, c := range classes {
		rs, ok := sp.measured(c, cpu, w)
		if !ok {
			rs = append([]receipt.Reading{sp.estimate(c, cpu, w)}, rs...)
		}
		out[c] = rs
	}
	return out
}

// window is a span's interval and the run's within it.
type window struct {
	spanStart, spanEnd uint64
	spanWall           time.Duration
	start, end         uint64
	wall               time.Duration
}

// why collects the reasons no counter was used for class c.
func (sp *Span) why(c device.Class) string {
	var rs []string
	for _, st := range sp.m.Statuses() {
		if st.Class == c && st.State != Live {
			rs = append(rs, fmt.Sprintf("%s %s (%s)", st.Source, st.State, st.Detail))
		}
	}
	for _, ss := range sp.srcs {
		if ss.src.Class() == c && ss.err != nil {
			rs = append(rs, fmt.Sprintf("%s failed during the span (%v)", ss.src.Name(), ss.err))
		}
	}
	if c != device.CPU && !sp.exclusive(c) {
		for _, ss := range sp.srcs {
			if ss.src.Class() == c && ss.err == nil {
				rs = append(rs, ss.src.Name()+" is live, but the device is not held by one run at a time and the counter has no per-process figure: its reading is host context")
			}
		}
	}
	if len(rs) == 0 {
		return "no energy counter for this class on this host"
	}
	return strings.Join(rs, "; ")
}

// Figure is the run's figure for class c so far, computed exactly as
// StopAt would at this moment (the sum of its run-scope readings), for a
// host that stops a run when it reaches its budget. The span stays open.
func (sp *Span) Figure(c device.Class, cpu RunCPU, start time.Time) energy.Microjoules {
	sp.sample()
	now := sp.m.now()
	if start.IsZero() || start.Before(sp.start) {
		start = sp.start
	}
	w := window{
		spanStart: uint64(sp.start.UnixNano()), spanEnd: uint64(now.UnixNano()), spanWall: now.Sub(sp.start),
		start: uint64(start.UnixNano()), end: uint64(now.UnixNano()), wall: now.Sub(start),
	}
	sp.mu.Lock()
	errs := make([]error, len(sp.srcs))
	for i, ss := range sp.srcs {
		errs[i] = ss.err
	}
	sp.mu.Unlock()
	rs, ok := sp.measured(c, cpu, w)
	if !ok {
		rs = []receipt.Reading{sp.estimate(c, cpu, w)}
	}
	// measured may mark a source failed for this call; the final reading
	// decides for itself.
	sp.mu.Lock()
	for i, ss := range sp.srcs {
		ss.err = errs[i]
	}
	sp.mu.Unlock()
	_, e, _ := receipt.Sums(rs)
	m, _, _ := receipt.Sums(rs)
	return m + e
}

func (sp *Span) measured(c device.Class, cpu RunCPU, w window) ([]receipt.Reading, bool) {
	var out []receipt.Reading
	primary := false
	for _, ss := range sp.srcs {
		if ss.src.Class() != c || ss.err != nil {
			continue
		}
		var total uint64
		for _, t := range ss.total {
			total += t
		}
		if total == 0 {
			ss.err = errors.New("the counter held across the span (the held-CPU rule: no reading)")
			continue
		}
		src := ss.src.Name() + ":" + strings.Join(ss.src.Rails(), "+")
		host := receipt.Reading{Provenance: receipt.HwShunt, Scope: receipt.ScopeHost, Source: src, StartNS: w.spanStart, EndNS: w.spanEnd, UJ: energy.Microjoules(total)}
		if primary {
			out = append(out, host) // a further rail (dram): its own line, not apportioned
			continue
		}
		if c != device.CPU {
			// A device's energy is never apportioned by CPU time: the
			// whole delta is the run's only where the run held the device
			// alone; otherwise it is host context and the run's figure is
			// estimated.
			if !sp.exclusive(c) {
				out = append(out, host) // context; the run's figure is estimated
				continue
			}
			// Held alone, the device's counter is the run's own
			// measurement (the lease brackets the span).
			run := receipt.Reading{
				Provenance: receipt.HwShunt, Scope: receipt.ScopeRun, Source: src + "/exclusive",
				StartNS: w.start, EndNS: w.end, UJ: energy.Microjoules(total),
				Basis: fmt.Sprintf("the device's whole ΔE %d µJ over the meter's span: the host gives the device to one run at a time", total),
			}
			out = append([]receipt.Reading{host, run}, out...)
			primary = true
			continue
		}
		if !cpu.Known || sp.m.NumCPU <= 0 || w.spanWall <= 0 {
			ss.err = errors.New("the run's CPU time is unknown, so its share cannot be apportioned")
			continue
		}
		// The counters ran over the span; the run's CPU time is its own.
		share := apportion(total, cpu.Time, sp.m.NumCPU, w.spanWall)
		run := receipt.Reading{
			Provenance: receipt.ModelBased, Scope: receipt.ScopeRun, Source: src + "/cpu-share",
			StartNS: w.start, EndNS: w.end, UJ: energy.Microjoules(share),
			Basis: fmt.Sprintf("host ΔE %d µJ × run CPU %d µs / (%d CPUs × wall %d µs); run CPU from %s; ΔE and wall over the meter's span, which brackets the run",
				total, cpu.Time.Microseconds(), sp.m.NumCPU, w.spanWall.Microseconds(), cpu.Source),
		}
		out = append([]receipt.Reading{host, run}, out...)
		primary = true
	}
	return out, primary
}

// apportion computes ΔE × cpu / (ncpu × wall) in integers, capped at ΔE.
func apportion(total uint64, cpu time.Duration, ncpu int, wall time.Duration) uint64 {
	den := uint64(ncpu) * uint64(wall.Nanoseconds())
	if den == 0 {
		return 0
	}
	num := mulDiv(total, uint64(cpu.Nanoseconds()), den)
	if num > total {
		num = total
	}
	return num
}

// tdp is class c's rated power: configured, or a source's.
func (m *Meter) tdp(c device.Class) TDP {
	if tdp, ok := m.TDP[c]; ok {
		return tdp
	}
	for _, s := range m.Sources {
		if r, isRated := s.(Rated); isRated && s.Class() == c {
			if mw, origin, known := r.RatedPower(); known {
				return TDP{MilliWatts: mw, Origin: origin}
			}
		}
	}
	return TDP{MilliWatts: 0, Origin: "no TDP known for this class"}
}

func (m *Meter) ncpu() int {
	if m.NumCPU <= 0 {
		return 1
	}
	return m.NumCPU
}

// EstimateCPU is the Estimator's energy, in µJ, for cpu of CPU time:
// cpu × the Cpu class's TDP / the CPUs this host sees, and the basis of
// the figure.
func (m *Meter) EstimateCPU(cpu time.Duration) (uint64, string) {
	tdp, ncpu := m.tdp(device.CPU), m.ncpu()
	uj := mulDiv(uint64(cpu.Nanoseconds()), tdp.MilliWatts, uint64(ncpu)*1_000_000)
	return uj, fmt.Sprintf("CPU %d µs × TDP %d mW / %d CPUs (TDP %s)", cpu.Microseconds(), tdp.MilliWatts, ncpu, tdp.Origin)
}

func (sp *Span) estimate(c device.Class, cpu RunCPU, w window) receipt.Reading {
	wall := w.wall
	tdp, ncpu := sp.m.tdp(c), sp.m.ncpu()
	basis := ""
	var uj uint64
	switch {
	case c != device.CPU:
		// A device other than the CPU: its rated power (a GPU's power
		// limit) over the run's wall time, as if busy throughout; never
		// scaled by the CPU count.
		uj = mulDiv(uint64(wall.Nanoseconds()), tdp.MilliWatts, 1_000_000)
		basis = fmt.Sprintf("wall %d µs × rated power %d mW, as if the device were busy throughout (%s)", wall.Microseconds(), tdp.MilliWatts, tdp.Origin)
	case cpu.Known:
		// µJ = cpu_ns × mW / ncpu / 1e6
		uj = mulDiv(uint64(cpu.Time.Nanoseconds()), tdp.MilliWatts, uint64(ncpu)*1_000_000)
		basis = fmt.Sprintf("run CPU %d µs × TDP %d mW / %d CPUs (TDP %s; CPU from %s)", cpu.Time.Microseconds(), tdp.MilliWatts, ncpu, tdp.Origin, cpu.Source)
	default:
		uj = mulDiv(uint64(wall.Nanoseconds()), tdp.MilliWatts, uint64(ncpu)*1_000_000)
		basis = fmt.Sprintf("wall %d µs × TDP %d mW / %d CPUs, as if one CPU were busy throughout (TDP %s)", wall.Microseconds(), tdp.MilliWatts, ncpu, tdp.Origin)
	}
	return receipt.Reading{
		Provenance: receipt.Estimator, Scope: receipt.ScopeRun, Source: "tdp",
		StartNS: w.start, EndNS: w.end, UJ: energy.Microjoules(uj),
		Basis: basis + "; estimated because: " + sp.why(c),
	}
}
