package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPruneRemovesEndedJobs: the rows of jobs that ended (failed,
// withdrawn, done with the result taken or naming nothing) go once they
// are older than the first bound, a done job's result no host took only
// once it is older than the second; a queued or leased job is never
// removed; a row that ended before the queue kept when is timed from
// when it was queued.
func TestPruneRemovesEndedJobs(t *testing.T) {
	c, _ := open(t)
	a := join(t, c, "a")
	ctx := context.Background()
	enqueue := func(payload string) int64 {
		t.Helper()
		id, err := a.Enqueue(ctx, Job{Kind: "prune-" + payload, Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	claim := func(payload string) *Lease {
		t.Helper()
		enqueue(payload)
		l, err := a.Claim(ctx, time.Hour, "prune-"+payload)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	untaken, taken, empty, failed := claim("untaken"), claim("taken"), claim("empty"), claim("failed")
	leased := claim("leased")
	queued := enqueue("queued")
	withdrawn := enqueue("withdrawn")
	for _, e := range []error{
		a.Complete(ctx, untaken, []byte(`{"bundle":"b3:…"}`)),
		a.Complete(ctx, taken, []byte(`{"bundle":"b3:…"}`)),
		c.ResultTaken(ctx, taken.ID),
		a.Complete(ctx, empty, nil),
		a.Fail(ctx, failed, "it failed"),
	} {
		if e != nil {
			t.Fatal(e)
		}
	}
	if ok, err := a.Withdraw(ctx, withdrawn, "gone"); !ok || err != nil {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	kept := func(want map[int64]bool) {
		t.Helper()
		for id, k := range want {
			_, err := c.JobState(ctx, id)
			if (err == nil) != k {
				t.Errorf("job %d: kept %v, want %v (%v)", id, err == nil, k, err)
			}
		}
	}
	// Nothing is old enough.
	if p, err := c.Prune(ctx); err != nil || p != (Pruned{}) {
		t.Fatalf("prune of jobs that just ended: %+v %v", p, err)
	}
	p, err := c.pruneOlder(ctx, 0, time.Hour)
	if err != nil || p != (Pruned{Ended: 4}) {
		t.Fatalf("prune of what ended (results taken): %+v %v", p, err)
	}
	kept(map[int64]bool{untaken.ID: true, taken.ID: false, empty.ID: false, failed.ID: false, withdrawn: false, leased.ID: true, queued: true})
	if p, err = c.pruneOlder(ctx, 0, 0); err != nil || p != (Pruned{Untaken: 1}) {
		t.Fatalf("prune of results never taken: %+v %v", p, err)
	}
	kept(map[int64]bool{untaken.ID: false, leased.ID: true, queued: true})

	// A row of an earlier version: no ended, queued two days ago.
	old := claim("old")
	if err := a.Fail(ctx, old, "long ago"); err != nil {
		t.Fatal(err)
	}
	exec(t, c, `UPDATE cluster_jobs SET ended = NULL, queued = now() - interval '2 days' WHERE id = $1`, old.ID)
	if p, err := c.Prune(ctx); err != nil || p != (Pruned{Ended: 1}) {
		t.Fatalf("prune of a row without an end: %+v %v", p, err)
	}
	kept(map[int64]bool{old.ID: false, leased.ID: true, queued: true})
	if _, err := c.JobState(ctx, old.ID); err == nil || err.Error() != fmt.Sprintf("cluster: job %d: no such job", old.ID) {
		t.Fatalf("the state of a pruned job: %v", err)
	}
}
