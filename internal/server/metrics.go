package server

import (
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
)

// metrics are the service's counters, served in Prometheus's text
// format at /metrics.
type metrics struct {
	mu                 sync.Mutex
	outcomes           map[string]int64 // sealed runs by outcome
	failures           int64            // runs refused or not sealed
	seconds            float64          // summed durations of sealed runs
	energy             map[string]int64 // µJ by device class
	denied             int64            // refused decisions in sealed runs
	requests           map[int]int64    // by HTTP status
	sandboxes          int64
	fleets, fleetItems int64
}

// fleet counts a fleet that ran and its items (each a sealed run, not
// counted among sandbox_runs_total).
func (m *metrics) fleet(items int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fleets++
	m.fleetItems += int64(items)
}

func (m *metrics) run(r *host.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.outcomes == nil {
		m.outcomes, m.energy = map[string]int64{}, map[string]int64{}
	}
	m.outcomes[string(r.Result.Outcome.Status)]++
	m.seconds += r.Result.End.Sub(r.Result.Start).Seconds()
	for _, d := range r.Receipt.Devices {
		m.energy[string(d.Class)] += int64(d.Measured + d.Estimated)
	}
	m.denied += int64(r.Denied)
}

func (m *metrics) failed() {
	m.mu.Lock()
	m.failures++
	m.mu.Unlock()
}

func (m *metrics) request(code int) {
	m.mu.Lock()
	if m.requests == nil {
		m.requests = map[int]int64{}
	}
	m.requests[code]++
	m.mu.Unlock()
}

func (m *metrics) sandbox(d int64) {
	m.mu.Lock()
	m.sandboxes += d
	m.mu.Unlock()
}

func (m *metrics) live() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sandboxes
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	m := &s.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintln(w, "# HELP sandbox_runs_total Sealed runs (one-shot and execs), by outcome.")
	fmt.Fprintln(w, "# TYPE sandbox_runs_total counter")
	var total int64
	for _, k := range sorted(m.outcomes) {
		fmt.Fprintf(w, "sandbox_runs_total{outcome=%q} %d\n", k, m.outcomes[k])
		total += m.outcomes[k]
	}
	fmt.Fprintln(w, "# HELP sandbox_runs_failed_total Runs refused, failed to start, or not sealed.")
	fmt.Fprintln(w, "# TYPE sandbox_runs_failed_total counter")
	fmt.Fprintf(w, "sandbox_runs_failed_total %d\n", m.failures)
	fmt.Fprintln(w, "# HELP sandbox_run_duration_seconds Wall-clock time of sealed runs.")
	fmt.Fprintln(w, "# TYPE sandbox_run_duration_seconds summary")
	fmt.Fprintf(w, "sandbox_run_duration_seconds_sum %g\nsandbox_run_duration_seconds_count %d\n", m.seconds, total)
	fmt.Fprintln(w, "# HELP sandbox_energy_microjoules_total Energy of sealed runs as their receipts state it (measured plus estimated), by device class.")
	fmt.Fprintln(w, "# TYPE sandbox_energy_microjoules_total counter")
	for _, k := range sorted(m.energy) {
		fmt.Fprintf(w, "sandbox_energy_microjoules_total{class=%q} %d\n", k, m.energy[k])
	}
	fmt.Fprintln(w, "# HELP sandbox_denied_decisions_total Refused decisions in the decision logs of sealed runs.")
	fmt.Fprintln(w, "# TYPE sandbox_denied_decisions_total counter")
	fmt.Fprintf(w, "sandbox_denied_decisions_total %d\n", m.denied)
	fmt.Fprintln(w, "# HELP sandbox_fleets_total Fleets run to their checkpoint.")
	fmt.Fprintln(w, "# TYPE sandbox_fleets_total counter")
	fmt.Fprintf(w, "sandbox_fleets_total %d\n", m.fleets)
	fmt.Fprintln(w, "# HELP sandbox_fleet_items_total Items of those fleets, each a sealed run.")
	fmt.Fprintln(w, "# TYPE sandbox_fleet_items_total counter")
	fmt.Fprintf(w, "sandbox_fleet_items_total %d\n", m.fleetItems)
	parked, retained := s.Live.IdleStats()
	fmt.Fprintln(w, "# HELP sandbox_idle_parked_total Idle sandboxes the preservation fence let park (suspended, nothing erased).")
	fmt.Fprintln(w, "# TYPE sandbox_idle_parked_total counter")
	fmt.Fprintf(w, "sandbox_idle_parked_total %d\n", parked)
	fmt.Fprintln(w, "# HELP sandbox_idle_retained_total Idle deadlines at which the preservation fence retained a sandbox as it was.")
	fmt.Fprintln(w, "# TYPE sandbox_idle_retained_total counter")
	fmt.Fprintf(w, "sandbox_idle_retained_total %d\n", retained)
	fmt.Fprintln(w, "# HELP sandbox_live_sandboxes Live sandboxes.")
	fmt.Fprintln(w, "# TYPE sandbox_live_sandboxes gauge")
	fmt.Fprintf(w, "sandbox_live_sandboxes %d\n", m.sandboxes)
	fmt.Fprintln(w, "# HELP sandbox_http_requests_total API requests, by status.")
	fmt.Fprintln(w, "# TYPE sandbox_http_requests_total counter")
	codes := make([]int, 0, len(m.requests))
	for c := range m.requests {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		fmt.Fprintf(w, "sandbox_http_requests_total{code=\"%d\"} %d\n", c, m.requests[c])
	}
	pools := s.Live.Pools()
	if len(pools) == 0 {
		return
	}
	for _, g := range []struct {
		name, typ, help string
		v               func(live.PoolStats) uint64
	}{
		{"sandbox_pool_ready", "gauge", "Sandboxes a warm pool keeps ready now.", func(p live.PoolStats) uint64 { return uint64(p.Ready) }},
		{"sandbox_pool_size", "gauge", "Sandboxes a warm pool is to keep ready.", func(p live.PoolStats) uint64 { return uint64(p.Size) }},
		{"sandbox_pool_draining", "gauge", "1 while a pool, idle past its maximum, keeps none ready.", func(p live.PoolStats) uint64 {
			if p.Draining {
				return 1
			}
			return 0
		}},
		{"sandbox_pool_made_total", "counter", "Sandboxes a pool made ahead.", func(p live.PoolStats) uint64 { return p.Made }},
		{"sandbox_pool_claims_total", "counter", "Ready sandboxes handed to a claim.", func(p live.PoolStats) uint64 { return p.Claims }},
		{"sandbox_pool_misses_total", "counter", "Claims that found none ready (made on demand).", func(p live.PoolStats) uint64 { return p.Misses }},
		{"sandbox_pool_evictions_total", "counter", "Ready sandboxes closed unclaimed (age, idleness, shutdown).", func(p live.PoolStats) uint64 { return p.Evictions }},
		{"sandbox_pool_failures_total", "counter", "Sandboxes a pool could not make.", func(p live.PoolStats) uint64 { return p.Failures }},
		{"sandbox_pool_claimed_idle_microjoules_total", "counter", "Idle energy of claimed sandboxes, attributed to the claiming runs' records (Estimator).", func(p live.PoolStats) uint64 { return p.ClaimedUJ }},
		{"sandbox_pool_evicted_idle_microjoules_total", "counter", "Idle energy of evicted sandboxes, recorded on their close: the pool's overhead (Estimator).", func(p live.PoolStats) uint64 { return p.EvictedUJ }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", g.name, g.help, g.name, g.typ)
		for _, p := range pools {
			fmt.Fprintf(w, "%s{pool=%q} %d\n", g.name, p.Name, g.v(p))
		}
	}
}

func sorted[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
