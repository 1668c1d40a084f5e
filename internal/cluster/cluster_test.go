package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
	"github.com/opensubstrate/sandbox/internal/trail"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

var server *pgtest.Server

func TestMain(m *testing.M) {
	s, err := pgtest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: a PostgreSQL for the tests: %v\n", err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// logged collects what the cluster logs as refused.
type logged struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logged) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Reset forgets what was logged.
func (l *logged) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
}

func (l *logged) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func open(t testing.TB) (*Cluster, *logged) {
	t.Helper()
	c, err := Open(context.Background(), server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	l := &logged{}
	c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(l), nil))
	return c, l
}

func join(t testing.TB, c *Cluster, name string) *Member {
	t.Helper()
	k, err := key.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(context.Background(), k, Host{Key: k.Public(), Tiers: []tier.Tier{tier.S0, tier.S1, tier.S2}, Capacity: 8, IdleMW: 40_000, Addr: name + ":7070"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func exec(t testing.TB, c *Cluster, sql string, args ...any) {
	t.Helper()
	if _, err := c.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestHostsJoinAndVerify: hosts that join are listed with what they
// said, their rows verified; a heartbeat is taken; a row edited by hand
// is refused and logged, never listed.
func TestHostsJoinAndVerify(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	if err := a.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs, err := c.Hosts(context.Background())
	if err != nil || len(hs) != 2 {
		t.Fatalf("hosts: %+v %v", hs, err)
	}
	for _, h := range hs {
		if h.ID() != a.Host.ID() && h.ID() != b.Host.ID() || h.Capacity != 8 || len(h.Tiers) != 3 || h.Age < 0 {
			t.Errorf("host %+v", h)
		}
	}
	exec(t, c, `UPDATE cluster_hosts SET capacity = 1000 WHERE id = $1`, b.Host.ID())
	hs, err = c.Hosts(context.Background())
	if err != nil || len(hs) != 1 || hs[0].ID() != a.Host.ID() {
		t.Fatalf("after an edit by hand: %+v %v", hs, err)
	}
	if !strings.Contains(log.String(), "a host row refused") {
		t.Errorf("the refusal was not logged: %s", log)
	}
}

// TestImpostorRefused: a row under a host's id but another key (planted
// before the host joined) keeps that host out, refused and logged, and
// is itself never listed (its id is not its key's).
func TestImpostorRefused(t *testing.T) {
	c, log := open(t)
	k, _ := key.Generate(rand.Reader)
	other, _ := key.Generate(rand.Reader)
	h := Host{Key: k.Public(), Capacity: 1}
	exec(t, c, `INSERT INTO cluster_hosts (id, pub, tiers, capacity, idle_mw, addr, sig) VALUES ($1, $2, '', 1, 0, '', '\x00')`, h.ID(), func() []byte { p := other.Public(); return p[:] }())
	if _, err := c.Join(context.Background(), k, h); !errors.Is(err, ErrImpostor) {
		t.Fatalf("joining under an id registered to another key: %v", err)
	}
	if hs, _ := c.Hosts(context.Background()); len(hs) != 0 {
		t.Fatalf("the planted row is listed: %+v", hs)
	}
	if !strings.Contains(log.String(), "another key") {
		t.Errorf("not logged: %s", log)
	}
	if _, err := c.Join(context.Background(), other, h); err == nil {
		t.Fatal("joined naming one key and signing with another")
	}
}

// TestEachJobClaimedOnce: three members claiming at once take every job
// exactly once.
func TestEachJobClaimedOnce(t *testing.T) {
	c, _ := open(t)
	ms := []*Member{join(t, c, "a"), join(t, c, "b"), join(t, c, "c")}
	const n = 300
	jobs := make([]Job, n)
	for i := range jobs {
		jobs[i] = Job{Kind: "item", Payload: []byte(fmt.Sprint(i))}
	}
	if _, err := ms[0].EnqueueBatch(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		m := ms[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := m.Claim(context.Background(), time.Minute, "item")
				if errors.Is(err, ErrNoJob) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[string(l.Job.Payload)]++
				mu.Unlock()
				if err := m.Complete(context.Background(), l, l.Job.Payload); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d of %d jobs claimed", len(seen), n)
	}
	for p, k := range seen {
		if k != 1 {
			t.Errorf("job %s claimed %d times", p, k)
		}
	}
}

// TestStalledHostIsFenced: a host whose lease ran out (it stalled) and
// that comes back cannot renew, complete or fail the job another host
// claimed since: a stale fencing token, refused and logged; the job's
// outcome is the second host's, once.
func TestStalledHostIsFenced(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	id, err := a.Enqueue(context.Background(), Job{Kind: "exec", Payload: []byte("echo hi")})
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Claim(context.Background(), time.Minute, "exec")
	if err != nil || la.ID != id || la.Fence != 1 {
		t.Fatalf("a's claim: %+v %v", la, err)
	}
	if _, err := b.Claim(context.Background(), time.Minute, "exec"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("b claimed a leased job: %v", err)
	}
	// a stalls: its lease runs out by the database's clock.
	exec(t, c, `UPDATE cluster_jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	lb, err := b.Claim(context.Background(), time.Minute, "exec")
	if err != nil || lb.ID != id || lb.Fence != 2 || lb.Attempts != 2 {
		t.Fatalf("b's claim after a's lease ran out: %+v %v", lb, err)
	}
	for name, f := range map[string]func() error{
		"renew":    func() error { return a.Renew(context.Background(), la, time.Minute) },
		"complete": func() error { return a.Complete(context.Background(), la, []byte("a's result")) },
		"fail":     func() error { return a.Fail(context.Background(), la, "a gave up") },
	} {
		if err := f(); !errors.Is(err, ErrStaleFence) {
			t.Errorf("a's %s after b's claim: %v", name, err)
		}
	}
	if err := b.Complete(context.Background(), lb, []byte("b's result")); err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(context.Background(), lb, []byte("again")); !errors.Is(err, ErrStaleFence) {
		t.Errorf("completing twice: %v", err)
	}
	st, err := c.JobState(context.Background(), id)
	if err != nil || st.State != "done" || string(st.Result) != "b's result" || st.Holder != b.Host.ID() {
		t.Fatalf("the job: %+v %v", st, err)
	}
	if !strings.Contains(log.String(), "stale fencing token") {
		t.Errorf("not logged: %s", log)
	}
}

// TestEditedJobRefused: a job whose row was edited by hand, or queued
// under no host of the cluster, is never handed out: it is marked failed
// with the reason and logged, and the claim goes on to the next.
func TestEditedJobRefused(t *testing.T) {
	c, log := open(t)
	a := join(t, c, "a")
	edited, _ := a.Enqueue(context.Background(), Job{Kind: "exec", Payload: []byte("echo hi")})
	orphan, _ := a.Enqueue(context.Background(), Job{Kind: "exec", Payload: []byte("echo ho")})
	good, _ := a.Enqueue(context.Background(), Job{Kind: "exec", Payload: []byte("echo ok")})
	exec(t, c, `UPDATE cluster_jobs SET payload = 'rm -rf /' WHERE id = $1`, edited)
	exec(t, c, `UPDATE cluster_jobs SET by_host = 'b3:nobody' WHERE id = $1`, orphan)
	l, err := a.Claim(context.Background(), time.Minute, "exec")
	if err != nil || l.ID != good {
		t.Fatalf("claim: %+v %v, want job %d", l, err, good)
	}
	for _, id := range []int64{edited, orphan} {
		st, _ := c.JobState(context.Background(), id)
		if st.State != "failed" || !strings.HasPrefix(st.Reason, "refused: ") || st.Attempts != 0 {
			t.Errorf("job %d: %+v", id, st)
		}
	}
	if !strings.Contains(log.String(), "a job refused") {
		t.Errorf("not logged: %s", log)
	}
}

// TestEditedResultRefused: a job's result is signed by the host that
// completed it, with the job it ran. Edited by hand (another run named,
// none, another holder, another kind, no signature, another job's signed
// result copied in), it is refused when read, logged, and a collection
// removes nothing; put back, it reads again. A job whose payload was
// swapped for another's before it ran reads with the payload it ran, so
// its queuer sees that it is not what it queued.
func TestEditedResultRefused(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	blobs := blobStore(t)
	o := put(t, blobs, "a run's bundle", "another run's bundle", "stray")
	id := completeWith(t, a, "fleet-item", []byte(o[0].String()))
	second := completeWith(t, b, "fleet-item", []byte(o[1].String()))
	st, err := c.JobState(ctx, id)
	if err != nil || string(st.Result) != o[0].String() || string(st.Payload) != "p" {
		t.Fatalf("the result as completed: %+v %v", st, err)
	}
	var sig, theirs []byte
	if err := c.pool.QueryRow(ctx, `SELECT result_sig FROM cluster_jobs WHERE id = $1`, id).Scan(&sig); err != nil {
		t.Fatal(err)
	}
	if err := c.pool.QueryRow(ctx, `SELECT result_sig FROM cluster_jobs WHERE id = $1`, second).Scan(&theirs); err != nil {
		t.Fatal(err)
	}
	n := &names{}
	for _, tc := range []struct {
		name, set string
		args      []any
	}{
		{"result", `result = '` + o[1].String() + `'`, nil},
		{"no result", `result = NULL`, nil},
		{"holder", `holder = '` + b.Host.ID() + `'`, nil},
		{"a holder the cluster does not have", `holder = 'b3:nobody'`, nil},
		{"kind", `kind = 'not-a-fleet-item'`, nil},
		{"queuer", `by_host = '` + b.Host.ID() + `'`, nil},
		{"payload", `payload = 'q'`, nil},
		{"no signature", `result_sig = ''`, nil},
		{"another job's result", `result = $2, holder = $3, result_sig = $4`, []any{[]byte(o[1].String()), b.Host.ID(), theirs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec(t, c, `UPDATE cluster_jobs SET `+tc.set+` WHERE id = $1`, append([]any{id}, tc.args...)...)
			log.Reset()
			if st, err := c.Wait(ctx, id, time.Millisecond); !errors.Is(err, ErrEdited) || st.Result != nil {
				t.Fatalf("read: %+v %v", st, err)
			}
			if !strings.Contains(log.String(), "a job's result refused") {
				t.Fatalf("not logged: %s", log)
			}
			if _, err := c.CollectBlobs(ctx, blobs, n, "test", false); !errors.Is(err, ErrEdited) || !blobs.HasBlob(o[2]) {
				t.Fatalf("collected: %v", err)
			}
			exec(t, c, `UPDATE cluster_jobs SET result = $2, holder = $3, result_sig = $4, kind = 'fleet-item', payload = 'p', by_host = $3 WHERE id = $1`, id, []byte(o[0].String()), a.Host.ID(), sig)
		})
	}
	if st, err := c.Wait(ctx, id, time.Millisecond); err != nil || string(st.Result) != o[0].String() {
		t.Fatalf("put back: %+v %v", st, err)
	}
	if _, err := c.CollectBlobs(ctx, blobs, n, "test", false); err != nil || !blobs.HasBlob(o[0]) || !blobs.HasBlob(o[1]) || blobs.HasBlob(o[2]) {
		t.Fatalf("collected: %v", err)
	}

	// Two jobs queued; the second's payload and signature copied into
	// the first's row before either ran: the first runs the second's
	// payload, honestly signed, and reads so.
	x, _ := a.Enqueue(ctx, Job{Kind: "swap", Payload: []byte("item x")})
	y, _ := a.Enqueue(ctx, Job{Kind: "swap", Payload: []byte("item y")})
	exec(t, c, `UPDATE cluster_jobs SET payload = j.payload, sig = j.sig FROM cluster_jobs j WHERE cluster_jobs.id = $1 AND j.id = $2`, x, y)
	l, err := b.Claim(ctx, time.Minute, "swap")
	if err != nil || l.ID != x || string(l.Job.Payload) != "item y" {
		t.Fatalf("the claim: %+v %v", l, err)
	}
	if err := b.Complete(ctx, l, []byte("ran item y")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, x, time.Millisecond); err != nil || string(st.Payload) != "item y" {
		t.Fatalf("job %d reads: %+v %v, want the payload it ran", x, st, err)
	}
}

// BenchmarkClaim: jobs claimed and completed per second by 8 workers of
// 2 members, one job per claim, PostgreSQL with fsync on (its default).
func BenchmarkClaim(b *testing.B) { benchClaim(b, 1) }

// BenchmarkClaim32: the same, 32 jobs per claim (a host taking a share
// of a fleet), each still completed in a transaction of its own.
func BenchmarkClaim32(b *testing.B) { benchClaim(b, 32) }

func benchClaim(b *testing.B, n int) {
	c, _ := open(b)
	ms := []*Member{join(b, c, "a"), join(b, c, "b")}
	jobs := make([]Job, b.N)
	for i := range jobs {
		jobs[i] = Job{Kind: "item", Payload: []byte(fmt.Sprint(i))}
	}
	for i := 0; i < len(jobs); i += 1000 {
		if _, err := ms[0].EnqueueBatch(context.Background(), jobs[i:min(i+1000, len(jobs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range 8 {
		m := ms[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ls, err := m.ClaimN(context.Background(), n, time.Minute, "item")
				if err != nil {
					return
				}
				for _, l := range ls {
					m.Complete(context.Background(), l, nil)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// TestClaimNTakesAShare: claims of up to ten take the oldest jobs in
// order, never one another's, until none is left; asking for none is
// refused.
func TestClaimNTakesAShare(t *testing.T) {
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	jobs := make([]Job, 25)
	for i := range jobs {
		jobs[i] = Job{Kind: "item", Payload: []byte(fmt.Sprint(i))}
	}
	ids, err := a.EnqueueBatch(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for i, m := range []*Member{a, b, a} {
		ls, err := m.ClaimN(context.Background(), 10, time.Minute, "item")
		if err != nil || len(ls) != []int{10, 10, 5}[i] {
			t.Fatalf("claim %d: %d leases, %v", i, len(ls), err)
		}
		for _, l := range ls {
			got = append(got, l.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("claimed %v, want %v", got, ids)
	}
	if _, err := b.ClaimN(context.Background(), 10, time.Minute, "item"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("after every job: %v", err)
	}
	if _, err := b.ClaimN(context.Background(), 0, time.Minute, "item"); err == nil {
		t.Fatal("a claim of no job was taken")
	}
}

// TestSandboxTravelsOnce: a sandbox suspended on A is taken by B (which
// learns A's bundle), cannot then be taken by A or anyone, nor suspended
// by A (it no longer holds it); B gives it back when its resume fails,
// and suspends it itself later.
func TestSandboxTravelsOnce(t *testing.T) {
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	head, bundle := addr.Of([]byte("head")), addr.Of([]byte("bundle"))
	if _, err := b.TakeSandbox(ctx, "sb-000000000001", ""); !errors.Is(err, ErrNotShared) {
		t.Fatalf("a sandbox the cluster does not keep: %v", err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), "sb-000000000001", "", head, bundle, addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	k, err := b.TakeSandbox(ctx, "sb-000000000001", "")
	if err != nil || k.Host != a.Host.ID() || k.Bundle != bundle || k.Head != head {
		t.Fatalf("b takes it: %+v %v", k, err)
	}
	if _, err := a.TakeSandbox(ctx, "sb-000000000001", ""); !errors.Is(err, ErrHeldElsewhere) || !strings.Contains(err.Error(), b.Host.ID()) {
		t.Fatalf("a takes it while b holds it: %v", err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), "sb-000000000001", "", head, bundle, addr.Addr{}); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("a suspends what b holds: %v", err)
	}
	if err := b.ReleaseSandbox(ctx, "sb-000000000001", k.Fence); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseSandbox(ctx, "sb-000000000001", k.Fence); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("releasing twice: %v", err)
	}
	k, err = b.TakeSandbox(ctx, "sb-000000000001", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SandboxSuspended(ctx, hold(t, b), "sb-000000000001", "", addr.Of([]byte("head 2")), addr.Of([]byte("bundle 2")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if k, err := a.TakeSandbox(ctx, "sb-000000000001", ""); err != nil || k.Host != b.Host.ID() || k.Bundle != addr.Of([]byte("bundle 2")) {
		t.Fatalf("a takes it back from b: %+v %v", k, err)
	}
}

// TestSandboxOfADeadHostComesBack: a sandbox live on a host that stopped
// heartbeating is taken by another, from its last suspension, said; the
// host that comes back learns it lost it, and cannot suspend it; a
// sandbox live on a host that heartbeats is never taken.
func TestSandboxOfADeadHostComesBack(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	id := "sb-00000000000d"
	if err := a.SandboxSuspended(ctx, hold(t, a), id, "", addr.Of([]byte("h")), addr.Of([]byte("b")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TakeSandbox(ctx, id, ""); err != nil { // resumed on a: live there
		t.Fatal(err)
	}
	if _, err := b.TakeSandbox(ctx, id, ""); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("taken from a live host: %v", err)
	}
	// a stops heartbeating: its last one is older than DeadAfter by the
	// database's clock.
	exec(t, c, `UPDATE cluster_hosts SET seen = now() - interval '1 hour' WHERE id = $1`, a.Host.ID())
	k, err := b.TakeSandbox(ctx, id, "")
	if err != nil || !k.Dead || k.Host != a.Host.ID() || k.Bundle != addr.Of([]byte("b")) {
		t.Fatalf("taken from a dead host: %+v %v", k, err)
	}
	if !strings.Contains(log.String(), "stopped heartbeating") {
		t.Errorf("not logged: %s", log)
	}
	// a comes back.
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := a.Lost(ctx, []string{id, "sb-0000000000ff"})
	if err != nil || len(lost) != 1 || lost[0] != id {
		t.Fatalf("what a lost: %v %v", lost, err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), id, "", addr.Of([]byte("h2")), addr.Of([]byte("b2")), addr.Addr{}); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("a suspends what it lost: %v", err)
	}
	if lost, _ := b.Lost(ctx, []string{id}); len(lost) != 0 {
		t.Fatalf("b lost what it holds: %v", lost)
	}
}

// TestReleasedAndWithdrawnJobs: a host that stops before it ran a job
// gives it back (Release) and another claims it at once, under a higher
// fence, the first's lease then stale; a queuer that no longer waits
// withdraws a job nobody holds yet, never one a host holds, nor another
// host's; Wait returns when a job ended and when its context does.
func TestReleasedAndWithdrawnJobs(t *testing.T) {
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	id, err := a.Enqueue(ctx, Job{Kind: "fleet-item", Payload: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Claim(ctx, time.Hour, "fleet-item")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Claim(ctx, time.Hour, "fleet-item")
	if err != nil || lb.ID != id || lb.Fence != la.Fence+1 {
		t.Fatalf("b's claim of the released job: %+v %v", lb, err)
	}
	if err := a.Complete(ctx, la, []byte("a")); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("a completed the job it gave back: %v", err)
	}
	if ok, err := a.Withdraw(ctx, id, "gone"); ok || err != nil {
		t.Fatalf("withdrew a job b holds: %v %v", ok, err)
	}
	done := make(chan State, 1)
	go func() {
		st, _ := c.Wait(ctx, id, 20*time.Millisecond)
		done <- st
	}()
	if err := b.Complete(ctx, lb, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if st := <-done; st.State != "done" || string(st.Result) != "b" {
		t.Fatalf("waited for: %+v", st)
	}
	id2, _ := a.Enqueue(ctx, Job{Kind: "fleet-item", Payload: []byte("2")})
	if ok, err := b.Withdraw(ctx, id2, "not mine"); ok || err != nil {
		t.Fatalf("b withdrew a's job: %v %v", ok, err)
	}
	if ok, err := a.Withdraw(ctx, id2, "the fleet ended"); !ok || err != nil {
		t.Fatalf("a's withdrawal: %v %v", ok, err)
	}
	st, _ := c.JobState(ctx, id2)
	if st.State != "failed" || !strings.Contains(st.Reason, "the fleet ended") {
		t.Fatalf("withdrawn: %+v", st)
	}
	if _, err := b.Claim(ctx, time.Hour, "fleet-item"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("a withdrawn job claimed: %v", err)
	}
	id3, _ := a.Enqueue(ctx, Job{Kind: "fleet-item", Payload: []byte("3")})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Wait(cctx, id3, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait past its context: %v", err)
	}
}

// TestMadeClosedAndLostSandboxes: a sandbox made on a host is known to
// the cluster as live there (Holder names the host, its row verified);
// one never suspended is lost with a host that stops heartbeating
// (marked so, logged, never taken empty); a closed one is never resumed
// from a suspension published before; an id the cluster keeps cannot be
// made again.
func TestMadeClosedAndLostSandboxes(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	made, closed := "sb-00000000000a", "sb-00000000000c"
	for _, id := range []string{made, closed} {
		if err := a.SandboxMade(ctx, id, tier.S1, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SandboxMade(ctx, made, tier.S1, ""); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("made twice: %v", err)
	}
	// Said again by its holder (a host that joins tells of what it made
	// before): the same, not another.
	if err := a.SandboxMade(ctx, made, tier.S1, ""); err != nil {
		t.Fatalf("said again by its holder: %v", err)
	}
	if err := a.SandboxMade(ctx, made, tier.S1, "token:someone"); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("said again for another owner: %v", err)
	}
	h, err := c.Holder(ctx, made)
	if err != nil || h.Host.ID() != a.Host.ID() || h.State != "live" || h.Host.Addr != a.Host.Addr {
		t.Fatalf("holder: %+v %v", h, err)
	}
	if _, err := c.Holder(ctx, "sb-0000000000ff"); !errors.Is(err, ErrNotShared) {
		t.Fatalf("holder of nothing: %v", err)
	}
	if _, err := b.TakeSandbox(ctx, made, ""); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("taken from a live host: %v", err)
	}
	// The closed one was suspended and published first.
	if err := a.SandboxSuspended(ctx, hold(t, a), closed, "", addr.Of([]byte("h")), addr.Of([]byte("b")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := a.SandboxClosed(ctx, closed); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakeSandbox(ctx, closed, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed sandbox taken: %v", err)
	}
	exec(t, c, `UPDATE cluster_hosts SET seen = now() - interval '1 hour' WHERE id = $1`, a.Host.ID())
	if _, err := b.TakeSandbox(ctx, made, ""); !errors.Is(err, ErrLost) {
		t.Fatalf("a never-suspended sandbox of a dead host: %v", err)
	}
	if h, _ := c.Holder(ctx, made); h.State != "lost" {
		t.Fatalf("not marked lost: %+v", h)
	}
	if _, err := b.TakeSandbox(ctx, made, ""); !errors.Is(err, ErrLost) {
		t.Fatalf("taken after it was lost: %v", err)
	}
	if !strings.Contains(log.String(), "lost with its host") {
		t.Errorf("not logged: %s", log)
	}
	// The list: the lost one with its host, the closed one not; another
	// owner's sandbox only to that owner and the operator ("").
	if err := b.SandboxMade(ctx, "sb-00000000000d", tier.S2, "tok-x"); err != nil {
		t.Fatal(err)
	}
	ls, err := c.Sandboxes(ctx, "")
	if err != nil || len(ls) != 2 || ls[0].ID != made || ls[0].State != "lost" || ls[0].Host != a.Host.ID() || ls[1].Tier != tier.S2 || ls[1].Created.IsZero() {
		t.Fatalf("the operator's list: %+v %v", ls, err)
	}
	if ls, err := c.Sandboxes(ctx, "tok-x"); err != nil || len(ls) != 1 || ls[0].ID != "sb-00000000000d" || ls[0].State != "live" {
		t.Fatalf("tok-x's list: %+v %v", ls, err)
	}
	if ls, err := c.Sandboxes(ctx, "tok-y"); err != nil || len(ls) != 0 {
		t.Fatalf("tok-y's list: %+v %v", ls, err)
	}
	// A pool's sandbox claimed: the claimer's from then on; a host that
	// does not hold it cannot say so.
	if err := b.SandboxMade(ctx, "sb-00000000000e", tier.S1, "\x00pool:p"); err != nil {
		t.Fatal(err)
	}
	if err := a.SandboxClaimed(ctx, "sb-00000000000e", "tok-y"); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("claimed by a host that does not hold it: %v", err)
	}
	if err := b.SandboxClaimed(ctx, "sb-00000000000e", "tok-y"); err != nil {
		t.Fatal(err)
	}
	if ls, err := c.Sandboxes(ctx, "tok-y"); err != nil || len(ls) != 1 || ls[0].ID != "sb-00000000000e" {
		t.Fatalf("tok-y's list after its claim: %+v %v", ls, err)
	}
	// A row edited by hand to another key's host: Holder refuses it.
	exec(t, c, `UPDATE cluster_hosts SET addr = 'elsewhere:1' WHERE id = $1`, b.Host.ID())
	exec(t, c, `UPDATE cluster_sandboxes SET host = $2 WHERE id = $1`, made, b.Host.ID())
	if _, err := c.Holder(ctx, made); !errors.Is(err, ErrForged) {
		t.Fatalf("an edited host row: %v", err)
	}
}

// ownServer is a PostgreSQL of t's own (one it may stop and start), a
// cluster on it, and what the cluster logs.
func ownServer(t *testing.T) (*pgtest.Server, *Cluster, *logged) {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	c, err := Open(context.Background(), pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	log := &logged{}
	c.Log = slog.New(slog.NewTextHandler(log, nil))
	return pg, c, log
}

// TestQueueOutlivesARestart: PostgreSQL restarted (its connections cut)
// while a queuer waits on a job and before its host completes it: the
// wait, the completion and a new job each go on once it answers again,
// said in the log; nothing is lost.
func TestQueueOutlivesARestart(t *testing.T) {
	pg, c, _ := ownServer(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	id, err := a.Enqueue(ctx, Job{Kind: "fleet-item", Payload: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Claim(ctx, time.Hour, "fleet-item")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan State, 1)
	go func() {
		st, err := c.Wait(ctx, id, 20*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		waited <- st
	}()
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(ctx, l, []byte("done")); err != nil {
		t.Fatalf("complete after the restart: %v", err)
	}
	if st := <-waited; st.State != "done" || string(st.Result) != "done" {
		t.Fatalf("waited for: %+v", st)
	}
	if _, err := a.Enqueue(ctx, Job{Kind: "fleet-item", Payload: []byte("2")}); err != nil {
		t.Fatalf("enqueue after the restart: %v", err)
	}
	for _, e := range []error{errors.New("x"), context.Canceled, ErrStaleFence} {
		if Transient(e) {
			t.Errorf("%v is not the database being away", e)
		}
	}
}

// TestReadsOutliveARestart: every read a host makes of the cluster
// (its hosts, one host, a sandbox's holder, the live counts, the
// sandboxes, a pool's hosts, a chain), asked while PostgreSQL is down,
// is tried again, said in the log, and answers once the database is
// back: a fleet or a placement under way goes on (issue 27: a fleet's
// item failed on "cluster: hosts" across a restart).
func TestReadsOutliveARestart(t *testing.T) {
	pg, c, log := ownServer(t)
	a := join(t, c, "a")
	ctx := context.Background()
	if err := a.SandboxMade(ctx, "sb-1", tier.S1, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := a.ReportPools(ctx, map[string]int{"dev": 2}); err != nil {
		t.Fatal(err)
	}
	var genesis addr.Addr
	ch := a.Chain("c", genesis)
	if _, _, err := ch.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Append([]byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		op   string // the op its retry logs
		read func() error
	}{
		{"hosts", func() error { _, err := c.Hosts(ctx); return err }},
		{"host", func() error { _, err := c.Host(ctx, a.Host.ID()); return err }},
		{"holder", func() error { _, err := c.Holder(ctx, "sb-1"); return err }},
		{"live sandboxes", func() error { _, err := c.LiveCounts(ctx); return err }},
		{"sandboxes", func() error { _, err := c.Sandboxes(ctx, ""); return err }},
		{"pool hosts", func() error { _, err := c.PoolHosts(ctx, "dev"); return err }},
		{"chain c", func() error { _, _, err := c.ChainBytes(ctx, "c", genesis); return err }},
	}
	pg.Down()
	errs := make(chan error, len(reads))
	for _, r := range reads {
		go func() {
			if err := r.read(); err != nil {
				errs <- fmt.Errorf("%s: %w", r.op, err)
				return
			}
			errs <- nil
		}()
	}
	// Each read has failed once and waits to try again.
	deadline := time.Now().Add(time.Minute)
	for _, r := range reads {
		for !strings.Contains(log.String(), fmt.Sprintf("op=%q", r.op)) && !strings.Contains(log.String(), "op="+r.op+" ") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no retry logged while the database was down:\n%s", r.op, log)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := pg.Up(); err != nil {
		t.Fatal(err)
	}
	for range reads {
		if err := <-errs; err != nil {
			t.Errorf("after the restart: %v", err)
		}
	}
}

// TestSandboxesOfAPrincipal: a principal's sandbox is taken by that
// principal, or by a host's operator, never by another principal (as if
// it were not there).
func TestSandboxesOfAPrincipal(t *testing.T) {
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	id := "sb-0000000000a1"
	if err := a.SandboxMade(ctx, id, tier.S1, "token:alice"); err != nil {
		t.Fatal(err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), id, "token:alice", addr.Of([]byte("h")), addr.Of([]byte("b")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakeSandbox(ctx, id, "token:mallory"); !errors.Is(err, ErrNotYours) {
		t.Fatalf("another principal took it: %v", err)
	}
	if _, err := b.TakeSandbox(ctx, id, "token:alice"); err != nil {
		t.Fatalf("its principal: %v", err)
	}
	if err := b.SandboxSuspended(ctx, hold(t, b), id, "token:alice", addr.Of([]byte("h2")), addr.Of([]byte("b2")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TakeSandbox(ctx, id, ""); err != nil {
		t.Fatalf("a host's operator: %v", err)
	}
}

// TestTrailOneWriterAtATime: the cluster's S7 audit trail is one chain:
// a host that holds it keeps every other out until it appended (the
// other then sees the new head) or gave it up; a host that dies holding
// it loses the hold at once; the trail read back replays to the row's
// head, every entry signed by its writer, and reaches the heads the runs
// cited; an entry edited by hand is refused.
func TestTrailOneWriterAtATime(t *testing.T) {
	ctx := context.Background()
	dsn := server.NewDatabase(t)
	c, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	a, b := join(t, c, "a"), join(t, c, "b")
	ta, tb := a.Trail(), b.Trail()
	h0, err := ta.Hold(ctx)
	if err != nil || h0 != trail.Genesis() {
		t.Fatalf("hold: %s %v", h0, err)
	}
	got := make(chan addr.Addr, 1)
	go func() {
		h, err := tb.Hold(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	select {
	case h := <-got:
		t.Fatalf("b held the trail while a did: %s", h)
	case <-time.After(300 * time.Millisecond): // b waits: not a measure, a's hold is held until a appends
	}
	h1, err := ta.Append(addr.Of([]byte("run 1")), "eu")
	if err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != h1 {
		t.Fatalf("b held it at %s, after a's append it is %s", h, h1)
	}
	h2, err := tb.Append(addr.Of([]byte("run 2")), "eu")
	if err != nil {
		t.Fatal(err)
	}
	// A hold given up appends nothing.
	if _, err := ta.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	ta.Release()
	// A host that dies holding it: its connections go, and its hold.
	dying, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := key.Generate(rand.Reader)
	dm, err := dying.Join(ctx, k, Host{Key: k.Public(), Capacity: 1, Addr: "d:1"})
	if err != nil {
		t.Fatal(err)
	}
	dt := dm.Trail()
	if _, err := dt.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	// It dies: the server ends its connection (as it does when a host's
	// process or network goes).
	exec(t, c, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`)
	if h, err := tb.Hold(ctx); err != nil || h != h2 {
		t.Fatalf("after a holder died: %s %v", h, err)
	}
	tb.Release()
	dt.Release()
	dying.Close()
	b2, head, err := c.TrailBytes(ctx)
	if err != nil || head != h2 || bytes.Count(b2, []byte("\n")) != 2 {
		t.Fatalf("the trail: %q %s %v", b2, head, err)
	}
	if _, n, err := trail.Verify(b2, []addr.Addr{h0, h1}); err != nil || n != 2 {
		t.Fatalf("verify: %d %v", n, err)
	}
	exec(t, c, `UPDATE cluster_chain_entries SET line = convert_to(replace(convert_from(line, 'UTF8'), 'eu', 'us'), 'UTF8') WHERE seq = 1`)
	if _, _, err := c.TrailBytes(ctx); !errors.Is(err, ErrForged) {
		t.Fatalf("an edited entry: %v", err)
	}
}

// hold is m's hold on the blob store, as a host takes one before it
// stores a suspension's objects.
func hold(t testing.TB, m *Member) BlobHold {
	t.Helper()
	h, err := m.c.HoldBlobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHostsStartWhileOthersRun: hosts that open the cluster's database
// (making its schema where anything is missing) while other hosts use
// it, claiming and suspending, all open it: none fails on the locks the
// schema's statements take (PostgreSQL had ended one with "deadlock
// detected" on a busy CI run).
func TestHostsStartWhileOthersRun(t *testing.T) {
	dsn := server.NewDatabase(t)
	ctx := context.Background()
	c, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := join(t, c, "a")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("sb-%012d", i*100000+j)
				h, err := c.HoldBlobs(ctx)
				if err == nil {
					err = m.SandboxSuspended(ctx, h, id, "", addr.Of([]byte("head")), addr.Of([]byte(id)), addr.Addr{})
				}
				if err == nil {
					_, err = m.Enqueue(ctx, Job{Kind: "k", Payload: []byte(id)})
				}
				if err == nil {
					_, err = m.Claim(ctx, time.Minute, "k")
				}
				if err != nil && !errors.Is(err, ErrNoJob) {
					t.Error(err)
					return
				}
			}
		}()
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			o, err := Open(ctx, dsn)
			if err == nil {
				o.Close()
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a host opening the database while others use it: %v", err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestEditedSandboxRowRefused: each column a suspension's signature
// covers, edited in the database by hand (another owner, head, bundle or
// object list, none, another signer, no signature, another sandbox's
// signed suspension copied in), makes the row refused: no host takes the
// sandbox (it stays suspended, and a claim of it is refused too), a
// collection removes nothing, and each is logged. Put back as its host
// signed it, the row is taken again. A claim of a kept sandbox signs its
// suspension again, for its new owner (a pool's, whose owner holds a
// NUL, claimed).
func TestEditedSandboxRowRefused(t *testing.T) {
	c, log := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	blobs := blobStore(t)
	o := put(t, blobs, "bundle", "tree", "stray", "another sandbox's bundle")
	list := put(t, blobs, string(encode(t, o[0], o[1])))[0]
	id, another := "sb-0000000000e1", "sb-0000000000e2"
	const pool = "\x00pool:py"
	if err := a.SandboxSuspended(ctx, hold(t, a), id, pool, addr.Of([]byte("head")), o[0], list); err != nil {
		t.Fatal(err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), another, "token:mallory", addr.Of([]byte("its head")), o[3], addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	type row struct {
		owner, by    string
		head, bundle []byte
		objects, sig []byte
	}
	read := func(id string) (r row) {
		t.Helper()
		if err := c.pool.QueryRow(ctx, `SELECT owner, by_host, head, bundle, objects, sig FROM cluster_sandboxes WHERE id = $1`, id).
			Scan(&r.owner, &r.by, &r.head, &r.bundle, &r.objects, &r.sig); err != nil {
			t.Fatal(err)
		}
		return r
	}
	was, theirs := read(id), read(another)
	other := addr.Of([]byte("another sandbox's bundle"))
	for _, tc := range []struct {
		name, set string
		args      []any
		owner     string // who takes it
	}{
		{"owner", `owner = 'token:mallory'`, nil, "token:mallory"},
		{"head", `head = '\x` + addr.Of([]byte("an older head")).Hex() + `'`, nil, ""},
		{"bundle", `bundle = '\x` + other.Hex() + `'`, nil, ""},
		{"no bundle", `bundle = ''`, nil, ""},
		{"object list", `objects = ''`, nil, ""},
		{"signer", `by_host = '` + b.Host.ID() + `'`, nil, ""},
		{"no signer", `by_host = ''`, nil, ""},
		{"no signature", `sig = ''`, nil, ""},
		{"neither signer nor signature", `by_host = '', sig = ''`, nil, ""},
		{"no suspension at all", `head = '', bundle = '', objects = '', by_host = '', sig = ''`, nil, ""},
		{"a signer the cluster does not have", `by_host = 'b3:nobody'`, nil, ""},
		{"another sandbox's suspension", `owner = $2, head = $3, bundle = $4, objects = $5, sig = $6`, []any{theirs.owner, theirs.head, theirs.bundle, theirs.objects, theirs.sig}, "token:mallory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec(t, c, `UPDATE cluster_sandboxes SET `+tc.set+` WHERE id = $1`, append([]any{id}, tc.args...)...)
			log.Reset()
			if _, err := b.TakeSandbox(ctx, id, tc.owner); !errors.Is(err, ErrEdited) || !strings.Contains(err.Error(), id) {
				t.Fatalf("taken: %v", err)
			}
			if !strings.Contains(log.String(), "a sandbox's row refused") {
				t.Fatalf("not logged: %s", log)
			}
			var state string
			if err := c.pool.QueryRow(ctx, `SELECT state FROM cluster_sandboxes WHERE id = $1`, id).Scan(&state); err != nil || state != "suspended" {
				t.Fatalf("after the refusal: %q %v", state, err)
			}
			n := &names{}
			n.set(o[0], o[1])
			n.set(o[3])
			if _, err := c.CollectBlobs(ctx, blobs, n, "test", false); !errors.Is(err, ErrEdited) || !blobs.HasBlob(o[2]) {
				t.Fatalf("collected: %v", err)
			}
			if !strings.Contains(log.String(), "a kept sandbox's row refused") {
				t.Fatalf("the collection's refusal not logged: %s", log)
			}
			exec(t, c, `UPDATE cluster_sandboxes SET owner = $2, by_host = $3, head = $4, bundle = $5, objects = $6, sig = $7 WHERE id = $1`,
				id, was.owner, was.by, was.head, was.bundle, was.objects, was.sig)
		})
	}
	// Neither signer nor signature, on the host that suspended it (a
	// version before signed suspensions): that host takes it, from what
	// it keeps itself; another host does not (above).
	exec(t, c, `UPDATE cluster_sandboxes SET by_host = '', sig = '' WHERE id = $1`, id)
	k, err := a.TakeSandbox(ctx, id, "")
	if err != nil || k.Host != a.Host.ID() || !k.Bundle.IsZero() {
		t.Fatalf("an unsigned row of its own suspension, on its host: %+v %v", k, err)
	}
	if err := a.SandboxSuspended(ctx, hold(t, a), id, pool, addr.Of([]byte("head")), o[0], list); err != nil {
		t.Fatal(err)
	}
	if r := read(id); r.by != a.Host.ID() || len(r.sig) == 0 {
		t.Fatalf("suspended again, not signed: %+v", r)
	}
	k, err = b.TakeSandbox(ctx, id, pool)
	if err != nil || k.Bundle != o[0] {
		t.Fatalf("the row as a signed it: %+v %v", k, err)
	}
	// Claimed on b (as a pool's sandbox is): signed again, by b, for
	// its new owner; a claim of an edited row is refused.
	if err := b.SandboxClaimed(ctx, id, "token:bob"); err != nil {
		t.Fatal(err)
	}
	// b stops heartbeating: a takes the sandbox from b's claim's
	// signature, for bob alone.
	exec(t, c, `UPDATE cluster_hosts SET seen = now() - interval '1 hour' WHERE id = $1`, b.Host.ID())
	for _, who := range []string{pool, "token:alice"} {
		if _, err := a.TakeSandbox(ctx, id, who); !errors.Is(err, ErrNotYours) {
			t.Fatalf("%q took it: %v", who, err)
		}
	}
	if k, err = a.TakeSandbox(ctx, id, "token:bob"); err != nil || !k.Dead || k.Bundle != o[0] {
		t.Fatalf("its new owner: %+v %v", k, err)
	}
	exec(t, c, `UPDATE cluster_sandboxes SET bundle = $2 WHERE id = $1`, id, other[:])
	if err := a.SandboxClaimed(ctx, id, "token:carol"); !errors.Is(err, ErrEdited) {
		t.Fatalf("a claim of an edited row: %v", err)
	}
}

// TestSandboxTakenByOneAtATime: two hosts that take one suspended
// sandbox at once: one takes it, the other is told another host holds
// it, every time. Both are made to wait on the sandbox's row (a
// transaction of the test's holds it) before either reads anything, so
// that they meet every time (pg_stat_activity shows both waiting on a
// lock, in this test's database): the row is locked before its holder's
// heartbeat is read, and the second sees the first alive.
func TestSandboxTakenByOneAtATime(t *testing.T) {
	c, _ := open(t)
	c.DeadAfter = time.Hour // the hosts are alive however slow this machine is
	x, a, b := join(t, c, "x"), join(t, c, "a"), join(t, c, "b")
	ctx := context.Background()
	for i := range 5 {
		id := fmt.Sprintf("sb-%012x", 0xc000+i)
		if err := x.SandboxSuspended(ctx, hold(t, x), id, "", addr.Of([]byte("head")), addr.Of([]byte("bundle")), addr.Addr{}); err != nil {
			t.Fatal(err)
		}
		tx, err := c.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM cluster_sandboxes WHERE id = $1 FOR UPDATE`, id); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, m := range []*Member{a, b} {
			go func() {
				_, err := m.TakeSandbox(ctx, id, "")
				errs <- err
			}()
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			var waiting int
			if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %d: the two takers did not both wait on its row within a minute (%d waiting)", i, waiting)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		e1, e2 := <-errs, <-errs
		taken := 0
		for _, err := range []error{e1, e2} {
			switch {
			case err == nil:
				taken++
			case !errors.Is(err, ErrHeldElsewhere):
				t.Fatalf("sandbox %d: %v", i, err)
			}
		}
		if taken != 1 {
			t.Fatalf("sandbox %d taken by %d hosts at once: %v, %v", i, taken, e1, e2)
		}
	}
}

// TestTakenFromItsLastSuspension: a host resumes a sandbox from what it
// keeps itself only where the sandbox's last suspension is its own: one
// another host suspended since is fetched, even after this host took it
// and gave it back (the row then names this host as its holder, with
// the other's suspension).
func TestTakenFromItsLastSuspension(t *testing.T) {
	c, _ := open(t)
	h, g := join(t, c, "h"), join(t, c, "g")
	ctx := context.Background()
	id := "sb-0000000000f1"
	if err := h.SandboxSuspended(ctx, hold(t, h), id, "", addr.Of([]byte("v1")), addr.Of([]byte("bundle 1")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	k, err := h.TakeSandbox(ctx, id, "")
	if err != nil || !k.Local {
		t.Fatalf("its own suspension: %+v %v", k, err)
	}
	if err := h.SandboxSuspended(ctx, hold(t, h), id, "", addr.Of([]byte("v1")), addr.Of([]byte("bundle 1")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	if k, err = g.TakeSandbox(ctx, id, ""); err != nil || k.Local || k.Bundle != addr.Of([]byte("bundle 1")) {
		t.Fatalf("g takes h's: %+v %v", k, err)
	}
	if err := g.SandboxSuspended(ctx, hold(t, g), id, "", addr.Of([]byte("v2")), addr.Of([]byte("bundle 2")), addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time after h gave it back
		k, err = h.TakeSandbox(ctx, id, "")
		if err != nil || k.Local || k.Bundle != addr.Of([]byte("bundle 2")) {
			t.Fatalf("h takes g's: %+v %v", k, err)
		}
		if err := h.ReleaseSandbox(ctx, id, k.Fence); err != nil {
			t.Fatal(err)
		}
	}
}
