package live

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/volume/volumetest"
	"github.com/opensubstrate/sandbox/tier"
)

// BenchmarkFork: a live sandbox whose workspace holds
// SANDBOX_BENCH_FORK_BYTES of random data (default 64 MiB; 1073741824
// for the 1 GiB), in files of ~10.7 MB, forked into 10. first-ms
// is the first fork (every chunk captured and staged); fork-ms each
// later one (the capture reads only what changed: one file rewritten
// between forks), children removed between iterations. "live" starts
// each child (its workspace restored from the shared chunks); "suspended"
// makes their records only. The goal is ≤ 1 s for all ten.
//
// "live-xfs" is "live" with the workspaces (and the state directory) on
// an XFS filesystem made for it: each child's workspace is then a copy
// of the parent's volume sharing its extents (volume.Snapshot), not its
// files restored from the chunks. "live-pool" is "live" with the
// workspaces in a pool the manager makes (UsePool, as sandbox serve
// --workspace-pool does), the state directory where it is. "live" and
// "suspended" keep them where the system's temporary directory is (ext4
// here: no reflinks).
func BenchmarkFork(b *testing.B) {
	b.Run("live", func(b *testing.B) { benchFork(b, false, "") })
	b.Run("live-xfs", func(b *testing.B) { benchFork(b, false, "xfs") })
	b.Run("live-pool", func(b *testing.B) { benchFork(b, false, "pool") })
	b.Run("suspended", func(b *testing.B) { benchFork(b, true, "") })
}

func benchFork(b *testing.B, suspended bool, where string) {
	if os.Geteuid() != 0 {
		b.Skip("live sandboxes' workspaces need root here")
	}
	if where == "xfs" {
		// Sparse: the parent's volume, the chunks, and what the
		// children and the parent write between forks.
		b.Setenv("TMPDIR", volumetest.XFS(b, 64<<30))
	}
	size := int64(64 << 20)
	if v := os.Getenv("SANDBOX_BENCH_FORK_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("SANDBOX_BENCH_FORK_BYTES=%q: want a positive number of bytes", v)
		}
		size = n
	}
	h := newBenchHost(b)
	hosttest.Lease(b, h.Store)
	if where == "pool" {
		base := b.TempDir()
		volumetest.Private(b, base)
		pool := filepath.Join(base, "pool")
		if _, err := h.UsePool(pool, 16<<30); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { releasePool(b, pool) })
	}
	defer h.Close()
	ctx := context.Background()
	// Its workspace bounded as the host's default bounds it (10 GiB).
	p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2})
	if err != nil {
		b.Fatal(err)
	}
	const file = (1 << 30) / 100
	buf := make([]byte, file)
	files := 0
	for left := size; left > 0; left -= file {
		n := min(left, file)
		rand.Read(buf[:n])
		if err := os.WriteFile(filepath.Join(p.Workspace, fmt.Sprintf("f%03d", files)), buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
		files++
	}
	fork := func() time.Duration {
		t0 := time.Now()
		f, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 10, Suspended: suspended})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range f.Children {
			if c.Err != nil {
				b.Fatalf("child %s: %v", c.ID, c.Err)
			}
			if err := h.CloseRecord(c.ID, "", "benchmark"); err != nil {
				b.Fatal(err)
			}
		}
		return d
	}
	// The workspace's writes on the disk before the first fork, so that
	// it does not depend on how much the kernel had written back by then
	// (a fork freezes the volume, which writes what is dirty).
	syscall.Sync()
	first := fork()
	var total time.Duration
	for b.Loop() {
		rand.Read(buf[:min(size, file)])
		os.WriteFile(filepath.Join(p.Workspace, "f000"), buf[:min(size, file)], 0o644)
		total += fork()
	}
	b.ReportMetric(float64(first.Milliseconds()), "first-ms")
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "fork-ms")
	b.ReportMetric(float64(size)/(1<<20), "workspace-MiB")
}
