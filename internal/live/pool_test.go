package live

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/image/imagetest"
	"github.com/opensubstrate/sandbox/record"
)

// TestPoolSkipsADeadSandbox: a ready sandbox whose init died while it
// waited is never handed over: a claim takes a live one (or makes one),
// and the dead one's record is closed saying why.
func TestPoolSkipsADeadSandbox(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	readyPool(t, h)
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

// TestPoolClaimChecksTheRootItHandsOut: a ready sandbox made from an
// image that its pool's name no longer resolves to (re-tagged since) is
// handed only to a claimer who may use the root it runs in; refused, it
// stays ready, and the claimer is not told the root (the operator's log
// is).
func TestPoolClaimChecksTheRootItHandsOut(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	if err := h.StartPool(PoolSpec{Name: "pi", Size: 1, Sandbox: SandboxSpec{Image: imagetest.Name}}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound on a busy machine, not a measure
	defer cancel()
	if err := h.WaitPool(wctx, "pi", 1); err != nil {
		t.Fatal(err)
	}
	mine := authority.Default()
	mine.Images = []string{img.Root.String()}
	h.Policies = map[string]authority.Policy{"mallory": mine}
	h.pools.mu.Lock()
	p := h.pools.m["pi"]
	h.pools.mu.Unlock()
	// As if the ready sandbox had been made before the name was moved
	// to the image mallory may use.
	earlier := addr.Of([]byte("the image the name named before"))
	p.mu.Lock()
	sb := p.ready[0].sb
	sb.Root = earlier
	p.mu.Unlock()
	_, err := h.Claim(context.Background(), "pi", "mallory")
	p.mu.Lock()
	ready := len(p.ready)
	sb.Root = img.Root
	p.mu.Unlock()
	var de *authority.DeniedError
	if !errors.As(err, &de) || de.Rule != "images" {
		t.Fatalf("a claim of a sandbox in a root mallory may not use: %v", err)
	}
	if strings.Contains(err.Error(), earlier.String()) || strings.Contains(err.Error(), earlier.Short()) {
		t.Fatalf("the claimer's refusal names the root, which is the operator's to know: %v", err)
	}
	if ds, _, _ := authority.ReadLog(h.Store.Path(host.AuthorityLog)); len(ds) == 0 || !strings.Contains(ds[len(ds)-1].Grant, earlier.String()) {
		t.Fatalf("the operator's log has not the refusal with its root: %+v", ds)
	}
	if ready != 1 {
		t.Fatalf("the refused claim took the sandbox out of the pool: %d ready", ready)
	}
	if info, err := h.Claim(context.Background(), "pi", "mallory"); err != nil || info.ID != sb.ID {
		t.Fatalf("mallory, in the pool's own image: %+v %v", info, err)
	}
}

// readyPool starts pool "p" of one S1 sandbox on h and waits until its
// sandbox is ready.
func readyPool(t *testing.T, h *Manager) {
	t.Helper()
	if err := h.StartPool(PoolSpec{Name: "p", Size: 1}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound on a busy machine, not a measure
	defer cancel()
	if err := h.WaitPool(wctx, "p", 1); err != nil {
		t.Fatal(err)
	}
}

// poolWatcher is a cluster (Shared) that wants to know of pool changes
// (PoolReporter): it counts them.
type poolWatcher struct {
	*attackShared
	mu      sync.Mutex
	changes int
}

func (w *poolWatcher) PoolsChanged() {
	w.mu.Lock()
	w.changes++
	w.mu.Unlock()
}

func (w *poolWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changes
}

// TestPoolChangesToldToTheCluster: a cluster that routes claims by the
// ready counts hosts report (PoolReporter) is told each time a pool's
// count changes, not only at heartbeats: when the pool makes a sandbox
// and when one is claimed.
func TestPoolChangesToldToTheCluster(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	w := &poolWatcher{attackShared: newAttackShared()}
	h.Join(w, nil)
	ctx := context.Background()
	readyPool(t, h)
	made := w.count()
	if made == 0 {
		t.Fatal("the cluster was not told of the sandbox the pool made")
	}
	if _, err := h.Claim(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	if w.count() <= made {
		t.Fatalf("the cluster was not told of the claim (%d changes before it, %d after)", made, w.count())
	}
}
