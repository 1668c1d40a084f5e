package live

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/tier"
)

// BenchmarkSuspendResume: a live sandbox with a 1 GiB workspace (100
// files of ~10.7 MB), suspended once; then each iteration changes 1% of
// it (one file rewritten), suspends and resumes. suspend-ms and
// resume-ms are the medians' inputs; the goals are ≤ 1 s and
// ≤ 0.5 s on these machines.
func BenchmarkSuspendResume(b *testing.B) {
	// Every capture is by a capturer of its own, told what the last one
	// read by cache/trees: as a new process would be.
	b.Run("kept", func(b *testing.B) { benchSuspendResume(b, false) })
	// Resumed from the store, every chunk read and checked: as on another
	// host, or with the kept copy gone.
	b.Run("from-store", func(b *testing.B) { benchSuspendResume(b, true) })
}

func benchSuspendResume(b *testing.B, fromStore bool) {
	if os.Geteuid() != 0 {
		b.Skip("live sandboxes with their own cgroups need root")
	}
	h := newBenchHost(b)
	lease, err := h.Store.Dir.Lease()
	if err != nil {
		b.Fatal(err)
	}
	defer lease.Close()
	h.Store.Lease = lease
	defer func() {
		h.Close()
		for _, id := range h.recordIDs() {
			os.RemoveAll(h.parkedDir(id))
		}
	}()
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S2})
	if err != nil {
		b.Fatal(err)
	}
	const files, size = 100, (1 << 30) / 100
	buf := make([]byte, size)
	for i := range files {
		rand.Read(buf)
		if err := os.WriteFile(filepath.Join(info.Workspace, "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		b.Fatal(err)
	}
	var sus, res time.Duration
	for i := 0; b.Loop(); i++ {
		in, err := h.Resume(ctx, info.ID, "")
		if err != nil {
			b.Fatal(err)
		}
		rand.Read(buf)
		os.WriteFile(filepath.Join(in.Workspace, "faa"), buf, 0o644)
		t0 := time.Now()
		if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
			b.Fatal(err)
		}
		sus += time.Since(t0)
		if fromStore {
			os.RemoveAll(h.parkedDir(info.ID))
		}
		t1 := time.Now()
		in, err = h.Resume(ctx, info.ID, "")
		if err != nil {
			b.Fatal(err)
		}
		res += time.Since(t1)
		if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sus.Milliseconds())/float64(b.N), "suspend-ms")
	b.ReportMetric(float64(res.Milliseconds())/float64(b.N), "resume-ms")
}

// BenchmarkFirstSuspend: a live sandbox's 1 GiB workspace (100 files of
// ~10.7 MB) suspended for the first time (every chunk new), against cp -a
// of the same kind of workspace (a live sandbox's, on its volume) into
// the state directory's filesystem and a sync (issue 33's goal: ≤ 1.5×).
func BenchmarkFirstSuspend(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("live sandboxes with their own cgroups need root")
	}
	const files, size = 100, (1 << 30) / 100
	each := func(b *testing.B, what func(h *Manager, info SandboxInfo)) {
		h := newBenchHost(b)
		lease, err := h.Store.Dir.Lease()
		if err != nil {
			b.Fatal(err)
		}
		defer lease.Close()
		h.Store.Lease = lease
		defer func() {
			h.Close()
			for _, id := range h.recordIDs() {
				os.RemoveAll(h.parkedDir(id))
			}
		}()
		buf := make([]byte, size)
		for b.Loop() {
			b.StopTimer()
			info, err := h.Create(context.Background(), SandboxSpec{Tier: tier.S2})
			if err != nil {
				b.Fatal(err)
			}
			for i := range files {
				rand.Read(buf)
				if err := os.WriteFile(filepath.Join(info.Workspace, fmt.Sprintf("f%03d", i)), buf, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			exec.Command("sync").Run()
			b.StartTimer()
			what(h, info)
			b.StopTimer()
			h.CloseRecord(info.ID, "", "benchmark")
			b.StartTimer()
		}
	}
	b.Run("suspend", func(b *testing.B) {
		each(b, func(h *Manager, info SandboxInfo) {
			if _, err := h.Suspend(context.Background(), info.ID, ""); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("cp-a+sync", func(b *testing.B) {
		each(b, func(h *Manager, info SandboxInfo) {
			dst := h.Store.Path("copy-" + info.ID)
			if out, err := exec.Command("cp", "-a", info.Workspace, dst).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			exec.Command("sync").Run()
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		})
	})
}
