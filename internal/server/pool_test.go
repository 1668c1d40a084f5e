package server

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/record"
)

// TestPoolClaimAndEvict: a pool keeps its size ready; a claim hands one
// over whose record begins with a claimed segment carrying its idle
// energy (its cgroup's CPU time since it was made, read), the pool makes
// another, an aged one is evicted with its overhead recorded on the
// close, and /metrics says all of it.
func TestPoolClaimAndEvict(t *testing.T) {
	h, s, c := serve(t)
	ctx := context.Background()
	if err := h.StartPool(live.PoolSpec{Name: "dev", Size: 2, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a bound on a busy machine, not a measure
	defer cancel()
	if err := h.WaitPool(wctx, "dev", 2); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Claim(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/echo", "claimed"}}, &out, io.Discard); err != nil || r.ExitStatus != 0 || out.String() != "claimed\n" {
		t.Fatalf("exec: %v %+v %q", err, r, out.String())
	}
	entries, err := readRecord(h.RecordPath(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	seg, err := record.ParseSegment(entries[1])
	// Its idle energy is its cgroup's CPU time priced: a reading of the
	// group (which may be 0 µs for one claimed as soon as it was ready,
	// its init asleep), never an unknown counted as 0.
	measured := strings.Contains(seg.IdleProvenance, "cpu.stat usage_usec") || strings.Contains(seg.IdleProvenance, "cpuacct.usage")
	if err != nil || seg.Kind != record.Claimed || seg.Pool != "dev" || !measured || !strings.HasPrefix(seg.IdleProvenance, live.PoolProvenance) {
		t.Fatalf("the first segment: %+v %v", seg, err)
	}
	st, err := record.Verify(entries)
	if err != nil || st.IdleUJ != seg.IdleUJ || st.Executed != 1 {
		t.Fatalf("verify: %+v %v", st, err)
	}
	// The claimer's now: listed for it, not for another owner.
	if l, _ := c.List(ctx); len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("list: %+v", l)
	}
	// A pool that does not exist: 404.
	if _, err := c.Claim(ctx, "nope"); status(err) != 404 {
		t.Fatalf("claim from no pool: %v", err)
	}
	if err := h.WaitPool(wctx, "dev", 2); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`sandbox_pool_claims_total{pool="dev"} 1`, `sandbox_pool_ready{pool="dev"} 2`, `sandbox_pool_made_total{pool="dev"} 3`, `sandbox_pool_claimed_idle_microjoules_total{pool="dev"} `} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, body)
		}
	}
	// Evicted at its age: closed with what it spent.
	if err := h.StartPool(live.PoolSpec{Name: "short", Size: 1, MaxAge: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute) // a bound on a busy machine, not a measure
	for {
		var ev live.PoolStats
		for _, p := range h.Pools() {
			if p.Name == "short" {
				ev = p
			}
		}
		if ev.Evictions > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no eviction: %+v", ev)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var closed int
	recs, _ := os.ReadDir(h.Store.Path("records"))
	for _, e := range recs {
		if !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		es, err := readRecord(h.Store.Path("records", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		last, err := record.ParseSegment(es[len(es)-1])
		if err == nil && last.Kind == record.Closed && strings.Contains(last.Reason, "older than its maximum age") {
			// Its overhead is its group's CPU time, read (0 µs is a reading).
			measured := strings.Contains(last.IdleProvenance, "cpu.stat usage_usec") || strings.Contains(last.IdleProvenance, "cpuacct.usage")
			if !measured || !strings.HasPrefix(last.IdleProvenance, live.PoolProvenance) {
				t.Fatalf("an eviction's close: %+v", last)
			}
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no record closed by an eviction")
	}
}

// BenchmarkPoolClaim: from a claim of a ready sandbox to the first byte
// of its first command's output (/bin/echo), through the API. p50 and
// p99 are reported; each claim is from a full pool, and the refill
// after it is not timed.
//
//	go test -run '^$' -bench PoolClaim -count 6 ./internal/server/
func BenchmarkPoolClaim(b *testing.B) {
	h, _, c := serve(b)
	ctx := context.Background()
	if err := h.StartPool(live.PoolSpec{Name: "bench", Size: 2}); err != nil {
		b.Fatal(err)
	}
	var claims, firsts []time.Duration
	for b.Loop() {
		b.StopTimer()
		// A full pool: no refill beside the claim (a claim's own refill
		// is in the next wait).
		if err := h.WaitPool(ctx, "bench", 2); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		sb, err := c.Claim(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		claimed := time.Since(t0)
		fw := &firstWrite{}
		fw.start = t0
		r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/echo", "x"}}, fw, io.Discard)
		b.StopTimer()
		if err != nil || r.ExitStatus != 0 || fw.at == 0 {
			b.Fatal(err, r)
		}
		claims, firsts = append(claims, claimed), append(firsts, fw.at)
		c.Remove(ctx, sb.ID)
		b.StartTimer()
	}
	b.ReportMetric(pct(claims, 50), "claim-p50-ms")
	b.ReportMetric(pct(claims, 99), "claim-p99-ms")
	b.ReportMetric(pct(firsts, 50), "first-output-p50-ms")
	b.ReportMetric(pct(firsts, 99), "first-output-p99-ms")
}

type firstWrite struct {
	mu    sync.Mutex
	start time.Time
	at    time.Duration
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.mu.Lock()
	if f.at == 0 && len(p) > 0 {
		f.at = time.Since(f.start)
	}
	f.mu.Unlock()
	return len(p), nil
}

func readRecord(path string) ([][]byte, error) {
	es, _, err := chain.Read(path)
	return es, err
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[(len(s)-1)*p/100].Microseconds()) / 1000
}

// TestFleetThroughTheService: a fleet runs in the service, its progress
// streamed, each item a sealed run, its checkpoint signed by the
// service's key and its intermediate checkpoints published.
func TestFleetThroughTheService(t *testing.T) {
	h, s, c := serve(t)
	hello, err := guestbuild.C("hello")
	if err != nil {
		t.Fatal(err)
	}
	var frames []int
	res, err := c.Fleet(context.Background(), client.FleetSpec{Args: []string{hello}, Inputs: []string{"a", "b", "c", "d", "e", "f", "g", "h"}, Workers: 1, CheckpointEvery: 2}, func(done, total int) {
		if total != 8 {
			t.Errorf("total %d", total)
		}
		frames = append(frames, done)
	})
	if err != nil || res.Items != 8 || res.Failed != 0 || !strings.HasPrefix(res.Checkpoint, "sandbox/fleet/"+res.ID+"\n8\n") {
		t.Fatalf("fleet: %+v %v", res, err)
	}
	if len(frames) == 0 || frames[len(frames)-1] != 8 {
		t.Fatalf("progress %v", frames)
	}
	f, cp, err := host.LoadFleet(res.Dir)
	if err != nil || len(f.Items) != 8 || string(cp) != res.Checkpoint {
		t.Fatalf("load: %v", err)
	}
	for _, it := range f.Items {
		if _, err := os.Stat(h.Store.Path("runs", it.Run.Hex())); err != nil {
			t.Fatalf("item %d's run: %v", it.Index, err)
		}
	}
	// One worker: the done prefix grows one item at a time, so a
	// checkpoint is published at each multiple of 2 below 8, whichever
	// item is slow (with several workers a slow item 0 makes the prefix
	// jump from 0 to 8, and none is).
	if sizes, _ := host.FleetCheckpoints(res.Dir); len(sizes) != 3 {
		t.Fatalf("intermediate checkpoints at %v, want at 2, 4 and 6", sizes)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "sandbox_fleet_items_total 8") {
		t.Fatalf("metrics:\n%s", rec.Body.String())
	}
	// N units, each its own command line.
	ures, err := c.Fleet(context.Background(), client.FleetSpec{Units: [][]string{{hello, "x"}, {hello}}}, nil)
	if err != nil || ures.Items != 2 || ures.Failed != 0 {
		t.Fatalf("a fleet of units: %+v %v", ures, err)
	}
	if _, err := c.Fleet(context.Background(), client.FleetSpec{Args: []string{hello}, Units: [][]string{{hello}}}, nil); status(err) != 400 {
		t.Fatalf("units and args: %v", err)
	}
	// Refused before anything runs: no inputs; a command that is not there.
	if _, err := c.Fleet(context.Background(), client.FleetSpec{Args: []string{hello}}, nil); status(err) != 400 {
		t.Fatalf("no inputs: %v", err)
	}
	if _, err := c.Fleet(context.Background(), client.FleetSpec{Args: []string{"/no/such"}, Inputs: []string{"x"}}, nil); status(err) != 404 && status(err) != 400 {
		t.Fatalf("no such command: %v", err)
	}
}

// BenchmarkFleet runs one fleet of trivial S2 runs (the C hello module)
// through the service, end to end: items/s. Its size is
// $SANDBOX_FLEET_ITEMS (default 10000):
//
//	go test -run '^$' -bench Fleet -benchtime 1x ./internal/server/
func BenchmarkFleet(b *testing.B) {
	_, _, c := serve(b)
	hello, err := guestbuild.C("hello")
	if err != nil {
		b.Fatal(err)
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("SANDBOX_FLEET_ITEMS")); err == nil && v > 0 {
		n = v
	}
	in := make([]string, n)
	for i := range in {
		in[i] = strconv.Itoa(i)
	}
	for b.Loop() {
		t0 := time.Now()
		res, err := c.Fleet(context.Background(), client.FleetSpec{Args: []string{hello}, Grants: []string{"cpu:1J"}, Inputs: in, Workers: 4}, nil)
		if err != nil || res.Items != n || res.Failed != 0 {
			b.Fatal(err, res)
		}
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "items/s")
	}
}
