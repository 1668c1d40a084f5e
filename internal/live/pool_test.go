package live

import (
	"context"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/record"
)

// TestPoolSkipsADeadSandbox: a ready sandbox whose init died while it
// waited is never handed over: a claim takes a live one (or makes one),
// and the dead one's record is closed saying why.
func TestPoolSkipsADeadSandbox(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	if err := h.StartPool(PoolSpec{Name: "p", Size: 1}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.WaitPool(wctx, "p", 1); err != nil {
		t.Fatal(err)
	}
	h.pools.mu.Lock()
	p := h.pools.m["p"]
	h.pools.mu.Unlock()
	p.mu.Lock()
	dead := p.ready[0].sb
	p.mu.Unlock()
	if dead.cg == nil {
		t.Skip("no cgroup to kill the sandbox's init by")
	}
	dead.cg.Kill(2 * time.Second)
	for i := 0; dead.sess.Alive(); i++ {
		if i > 200 {
			t.Fatal("the init did not die")
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, err := h.Claim(ctx, "p", host.LocalOwner)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID == dead.ID {
		t.Fatal("a dead sandbox was handed over")
	}
	f, err := record.Open(h.RecordPath(dead.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st := f.State(); st.Phase != record.Ended {
		t.Fatalf("the dead sandbox's record is %v", st.Phase)
	}
	if _, err := h.Exec(ctx, info.ID, host.LocalOwner, ExecRequest{Args: []string{"/bin/true"}}); err != nil {
		t.Fatalf("exec in the claimed sandbox: %v", err)
	}
	for _, s := range h.Pools() {
		if s.Name == "p" && s.Evictions == 0 {
			t.Fatalf("no eviction counted: %+v", s)
		}
	}
}
