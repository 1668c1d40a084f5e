package cluster

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPoolsReportedAndChecked: each host says which warm pools it keeps
// and how many ready sandboxes each holds; PoolHosts lists the hosts of
// a pool, most ready first; a pool a host no longer names is gone from
// the list; a row whose ready count was edited by hand, or that names a
// host with no row, is refused and logged, never listed.
func TestPoolsReportedAndChecked(t *testing.T) {
	c, log := open(t)
	a, b, d := join(t, c, "a"), join(t, c, "b"), join(t, c, "d")
	ctx := context.Background()
	for _, r := range []struct {
		m     *Member
		ready map[string]int
	}{
		{a, map[string]int{"dev": 1, "gpu": 0}},
		{b, map[string]int{"dev": 3}},
		{d, map[string]int{"dev": 2}},
	} {
		if err := r.m.ReportPools(ctx, r.ready); err != nil {
			t.Fatal(err)
		}
	}
	hosts := func(name string) []string {
		t.Helper()
		ps, err := c.PoolHosts(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			if p.Name != name {
				t.Fatalf("PoolHosts(%q) listed pool %q", name, p.Name)
			}
			out = append(out, p.Host.Addr+"="+string(rune('0'+p.Ready)))
		}
		return out
	}
	if got := strings.Join(hosts("dev"), " "); got != "b:7070=3 d:7070=2 a:7070=1" {
		t.Fatalf("dev's hosts: %s", got)
	}
	if got := strings.Join(hosts("gpu"), " "); got != "a:7070=0" {
		t.Fatalf("gpu's hosts: %s", got)
	}
	// a keeps dev alone now; b's dev is drained.
	if err := a.ReportPools(ctx, map[string]int{"dev": 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.ReportPools(ctx, map[string]int{"dev": 0}); err != nil {
		t.Fatal(err)
	}
	if got := hosts("gpu"); len(got) != 0 {
		t.Fatalf("a pool its host no longer keeps is listed: %v", got)
	}
	if got := strings.Join(hosts("dev"), " "); got != "d:7070=2 a:7070=1 b:7070=0" {
		t.Fatalf("dev's hosts after: %s", got)
	}
	// Edited by hand: d's count raised; a row for a host with no row.
	exec(t, c, `UPDATE cluster_pools SET ready = 9 WHERE host = $1`, d.Host.ID())
	exec(t, c, `INSERT INTO cluster_pools (host, name, ready, sig) VALUES ('b3:nobody', 'dev', 5, '\x00')`)
	if got := strings.Join(hosts("dev"), " "); got != "a:7070=1 b:7070=0" {
		t.Fatalf("dev's hosts with edited rows: %s", got)
	}
	if !strings.Contains(log.String(), "a pool row refused") {
		t.Errorf("the edited row was not logged: %s", log)
	}
	if err := a.ReportPools(ctx, map[string]int{"dev": -1}); err == nil {
		t.Fatal("a negative ready count was reported")
	}
}

// TestAttackPoolRowReplayed: an older row a host signed (7 ready), put
// back after it said 0: it verifies, but its host said it longer ago
// than the dead-after, and hosts say theirs again at each heartbeat: it
// is stale, refused and logged (found by an attacker's review).
func TestAttackPoolRowReplayed(t *testing.T) {
	c, log := open(t)
	c.DeadAfter = time.Second
	a := join(t, c, "a")
	ctx := context.Background()
	if err := a.ReportPools(ctx, map[string]int{"dev": 7}); err != nil {
		t.Fatal(err)
	}
	var old []byte
	var said int64
	if err := c.pool.QueryRow(ctx, `SELECT sig, said FROM cluster_pools WHERE host = $1`, a.Host.ID()).Scan(&old, &said); err != nil {
		t.Fatal(err)
	}
	// Later, by the database's clock, than the dead-after.
	exec(t, c, `SELECT pg_sleep(1.2)`)
	if err := a.ReportPools(ctx, map[string]int{"dev": 0}); err != nil {
		t.Fatal(err)
	}
	exec(t, c, `UPDATE cluster_pools SET ready = 7, sig = $2, said = $3 WHERE host = $1`, a.Host.ID(), old, said)
	ps, err := c.PoolHosts(ctx, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 0 {
		t.Fatalf("a replayed row is listed: %+v", ps)
	}
	if !strings.Contains(log.String(), "too long ago") {
		t.Errorf("not logged: %s", log)
	}
}

// TestPoolClaimsSpread: claims sent before a host reports again take
// its ready sandboxes once each, however many claim at once, and then
// go to the host with some left; none is left once every report's are
// taken; a host's next report starts its count again; a host that said
// it anew since the claimer's list is not taken on the old word.
func TestPoolClaimsSpread(t *testing.T) {
	c, _ := open(t)
	b, d := join(t, c, "b"), join(t, c, "d")
	ctx := context.Background()
	if err := b.ReportPools(ctx, map[string]int{"dev": 3}); err != nil {
		t.Fatal(err)
	}
	if err := d.ReportPools(ctx, map[string]int{"dev": 2}); err != nil {
		t.Fatal(err)
	}
	list := func() []Pool {
		t.Helper()
		ps, err := c.PoolHosts(ctx, "dev")
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	// Eight claims at once, each from its own list: five find a
	// sandbox, three of b's and two of d's; three find none left.
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, ok, err := c.ReservePool(ctx, list())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				got[p.Host.Addr]++
			} else {
				got["none"]++
			}
		}()
	}
	wg.Wait()
	if want := map[string]int{"b:7070": 3, "d:7070": 2, "none": 3}; !maps.Equal(got, want) {
		t.Fatalf("claims went %v, want %v", got, want)
	}
	for _, p := range list() {
		if p.Left() != 0 {
			t.Fatalf("%s: %d left after its every ready sandbox was taken", p.Host.Addr, p.Left())
		}
	}
	// b says anew (a later time): its count starts again. A list made
	// before that says the old word, which takes nothing, even where it
	// seems to have some left, nor undoes the new word's count.
	stale := list()
	for i := range stale {
		stale[i].Sent = 0
	}
	time.Sleep(2 * time.Millisecond) // a later millisecond for b's word
	if err := b.ReportPools(ctx, map[string]int{"dev": 2}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true, false} {
		from := list()
		if i%2 == 1 {
			from = stale
		}
		p, ok, err := c.ReservePool(ctx, from)
		if err != nil || ok != want || ok && (p.Host.Addr != "b:7070" || p.Sent != i/2+1) {
			t.Fatalf("claim %d after b said anew (from an old list: %v): %+v %v %v", i, i%2 == 1, p, ok, err)
		}
	}
	if _, ok, _ := c.ReservePool(ctx, list()); ok {
		t.Fatal("a claim past b's new word")
	}
}
