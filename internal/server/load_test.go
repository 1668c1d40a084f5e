package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/live"
)

// footprint is what the service holds that sandboxes could leak.
type footprint struct {
	fds, children, cgroups, mounts, temps int
	heap                                  uint64
}

func footprintOf(h *live.Manager) footprint {
	var f footprint
	fds, _ := os.ReadDir("/proc/self/fd")
	f.fds = len(fds)
	self := fmt.Sprint(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])); len(fs) > 1 && fs[1] == self {
			f.children++
		}
	}
	id := h.Store.Lease.ID
	if h.Cgroups != nil {
		for _, n := range h.Cgroups.Names() {
			if strings.Contains(n, id) {
				f.cgroups++
			}
		}
	}
	// Ours only: other tests that run beside this one (other packages)
	// mount and unmount in the same namespace.
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, id) || strings.Contains(l, h.Store.Root()) {
			f.mounts++
		}
	}
	tmp, _ := os.ReadDir(os.TempDir())
	for _, e := range tmp {
		if strings.Contains(e.Name(), id) {
			f.temps++
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.heap = ms.HeapInuse
	return f
}

// TestServiceLoad: 64 live sandboxes created and removed and 320 execs
// across them, from 16 concurrent clients of one service; then it holds
// no more processes, cgroups, mounts, descriptors or temporary
// directories than before, and its heap is back near where it started.
// A leak of one per sandbox or exec shows at this scale; the longer
// soak, 200 sandboxes, is SANDBOX_LOAD_SANDBOXES=200 (85 s under the
// race detector here, a tenth of the raced packages' test time).
func TestServiceLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	h, _, c := serve(t)
	ctx := context.Background()
	// Warm up: the first sandbox and exec make what is kept (a warm
	// init, caches, connections).
	sb, err := c.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the warm init refills
	before := footprintOf(h)
	sandboxes := 64
	if n, err := strconv.Atoi(os.Getenv("SANDBOX_LOAD_SANDBOXES")); err == nil && n > 0 {
		sandboxes = n
	}
	const perSandbox, clients = 5, 16
	jobs := make(chan int, sandboxes)
	for i := range sandboxes {
		jobs <- i
	}
	close(jobs)
	var execs, fails atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, _ := client.Dial(h.Store.Path(client.SocketName), client.Options{})
			defer cl.Close()
			for i := range jobs {
				sb, err := cl.Create(ctx, client.SandboxSpec{})
				if err != nil {
					t.Error(err)
					fails.Add(1)
					continue
				}
				for k := range perSandbox {
					args := []string{"sh", "-c", fmt.Sprintf("echo %d-%d", i, k)}
					if k == 0 {
						args = []string{"sh", "-c", "sleep 30 & echo started"} // left running for rm
					}
					var out bytes.Buffer
					r, err := cl.Exec(ctx, sb.ID, client.ExecSpec{Args: args}, &out, nil)
					if err != nil || r.ExitStatus != 0 {
						t.Errorf("exec %v: %v %+v", args, err, r)
						fails.Add(1)
						continue
					}
					execs.Add(1)
				}
				if err := cl.Remove(ctx, sb.ID); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d sandboxes, %d execs from %d clients in %v (%.1f execs/s including creates and removes)", sandboxes, execs.Load(), clients, took.Round(time.Millisecond), float64(execs.Load())/took.Seconds())
	if execs.Load() != int64(sandboxes*perSandbox) {
		t.Fatalf("%d of %d execs sealed", execs.Load(), sandboxes*perSandbox)
	}
	time.Sleep(200 * time.Millisecond)
	c.Close()
	after := footprintOf(h)
	t.Logf("before %+v\nafter  %+v", before, after)
	if after.children > before.children || after.cgroups > before.cgroups || after.mounts > before.mounts || after.temps > before.temps {
		t.Errorf("leaked: before %+v, after %+v", before, after)
	}
	if after.fds > before.fds+2 {
		t.Errorf("descriptors: %d before, %d after", before.fds, after.fds)
	}
	if after.heap > before.heap+32<<20 {
		t.Errorf("heap: %d MiB before, %d MiB after", before.heap>>20, after.heap>>20)
	}
	if l := h.Sandboxes("local"); len(l) != 0 {
		t.Errorf("%d sandboxes left", len(l))
	}
	runs, err := h.Runs()
	if err != nil || len(runs) != sandboxes*perSandbox+1 {
		t.Errorf("runs: %d (want %d), %v", len(runs), sandboxes*perSandbox+1, err)
	}
}
