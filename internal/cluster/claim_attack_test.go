package cluster

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAttackJobAtTheLimits: a row made by hand (no valid signature) with
// its attempts (or fencing token) at its column's largest value would
// make every claim's lease overflow, stopping the whole queue; it is
// never picked, and the claim takes the good job behind it (found by an
// attacker's review of the one-statement claim).
func TestAttackJobAtTheLimits(t *testing.T) {
	c, _ := open(t)
	a := join(t, c, "a")
	ctx := context.Background()
	for _, edit := range []string{`attempts = 2147483647`, `fence = 9223372036854775807`} {
		forged, _ := a.Enqueue(ctx, Job{Kind: "exec", Payload: []byte("x")})
		good, _ := a.Enqueue(ctx, Job{Kind: "exec", Payload: []byte("echo ok")})
		exec(t, c, `UPDATE cluster_jobs SET payload = 'rm -rf /', `+edit+` WHERE id = $1`, forged)
		l, err := a.Claim(ctx, time.Minute, "exec")
		if err != nil || l.ID != good {
			t.Fatalf("%s: claim: %+v %v, want job %d", edit, l, err, good)
		}
		if err := a.Complete(ctx, l, nil); err != nil {
			t.Fatal(err)
		}
		if st, _ := c.JobState(ctx, forged); st.State != "queued" {
			t.Fatalf("%s: the row at the limit is %+v", edit, st)
		}
		exec(t, c, `DELETE FROM cluster_jobs WHERE id = $1`, forged)
	}
}

// cancelOn cancels when a log record's message holds s.
type cancelOn struct {
	slog.Handler
	s      string
	cancel func()
}

func (h cancelOn) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.s) {
		h.cancel()
	}
	return h.Handler.Handle(ctx, r)
}

// TestAttackClaimerStopsWhileRefusing: the claimer's context ends (its
// host stopping) while a claim marks a refused job failed, after the
// claim was committed: the refusal is made all the same, and the good
// job is handed out, not left leased to nobody for its lease (found by
// an attacker's review).
func TestAttackClaimerStopsWhileRefusing(t *testing.T) {
	c, _ := open(t)
	a := join(t, c, "a")
	bg := context.Background()
	forged, _ := a.Enqueue(bg, Job{Kind: "exec", Payload: []byte("x")})
	good, _ := a.Enqueue(bg, Job{Kind: "exec", Payload: []byte("echo ok")})
	exec(t, c, `UPDATE cluster_jobs SET payload = 'rm -rf /' WHERE id = $1`, forged)
	ctx, cancel := context.WithCancel(bg)
	c.Log = slog.New(cancelOn{slog.Default().Handler(), "a job refused", cancel})
	ls, err := a.ClaimN(ctx, 2, time.Hour, "exec")
	if err != nil || !slices.ContainsFunc(ls, func(l *Lease) bool { return l.ID == good }) {
		t.Fatalf("claim: %v %v, want job %d", ls, err, good)
	}
	if st, _ := c.JobState(bg, forged); st.State != "failed" || st.Attempts != 0 {
		t.Fatalf("the refused job: %+v", st)
	}
}
