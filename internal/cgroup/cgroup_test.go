package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func touch(t *testing.T, p, content string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDetectFakeTrees(t *testing.T) {
	// Pure v2.
	v2 := t.TempDir()
	touch(t, filepath.Join(v2, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	h, err := Detect(v2)
	if err != nil || h.Kind() != "v2" || h.V2 != v2 || len(h.V2Controllers) != 5 {
		t.Fatalf("v2: %+v %v", h, err)
	}
	// Hybrid, like these machines: v1 controllers, one combined, and a
	// controller-less unified hierarchy.
	hy := t.TempDir()
	for _, d := range []string{"cpu,cpuacct", "memory", "pids", "freezer"} {
		touch(t, filepath.Join(hy, d, "cgroup.procs"), "")
	}
	os.Symlink("cpu,cpuacct", filepath.Join(hy, "cpu"))
	os.Symlink("cpu,cpuacct", filepath.Join(hy, "cpuacct"))
	touch(t, filepath.Join(hy, "unified", "cgroup.controllers"), "")
	touch(t, filepath.Join(hy, "systemd", "cgroup.procs"), "") // name=systemd: no controller
	h, err = Detect(hy)
	if err != nil || h.Kind() != "hybrid" || h.V2 != filepath.Join(hy, "unified") {
		t.Fatalf("hybrid: %+v %v", h, err)
	}
	if h.V1["cpuacct"] != filepath.Join(hy, "cpu,cpuacct") || h.V1["cpu"] != h.V1["cpuacct"] || h.V1["memory"] == "" {
		t.Fatalf("v1 map %v", h.V1)
	}
	g, err := h.Create("run1", "cpuacct", "memory")
	if err != nil {
		t.Fatal(err)
	}
	if g.V2 != filepath.Join(hy, "unified", Parent, "run1") || g.V1["cpuacct"] != filepath.Join(hy, "cpu,cpuacct", Parent, "run1") || g.V1["cpu"] != g.V1["cpuacct"] {
		t.Fatalf("group %+v", g)
	}
	touch(t, filepath.Join(g.V1["cpuacct"], "cpuacct.usage"), "1500000\n")
	if d, src, err := g.CPU(); err == nil || !strings.Contains(err.Error(), "cpu.stat") {
		// The v2 group has no cpu.stat in a fake tree until written.
		t.Fatalf("CPU before cpu.stat: %v %s %v", d, src, err)
	}
	g.cpuFromV1.Store(true)
	if d, src, err := g.CPU(); err != nil || d != 1500*time.Microsecond || !strings.Contains(src, "cpuacct") {
		t.Fatalf("CPU = %v %s %v", d, src, err)
	}
	if _, err := Detect(t.TempDir()); !errors.Is(err, ErrNoCgroups) {
		t.Fatalf("empty root: %v", err)
	}
	if _, err := h.Create("../x"); err == nil {
		t.Fatal("bad name accepted")
	}
}

// TestRealThreadAccounting places a busy, locked OS thread in a real
// cgroup on this host and reads its CPU time back. It needs root and a
// v1 cpuacct hierarchy (hybrid hosts); on pure v2 it checks that the
// thread placement is refused, as documented.
func TestRealThreadAccounting(t *testing.T) {
	h := realHierarchy(t)
	g, err := h.Create("test-"+strings.ReplaceAll(t.Name(), "/", "-"), "cpuacct")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore, err := g.AddThread(unix.Gettid())
	if _, ok := h.V1["cpuacct"]; !ok {
		if !errors.Is(err, ErrThreadsUnsupported) {
			t.Fatalf("pure v2: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// Busy for 200 ms of this thread's own CPU time, not of the wall
	// clock: on a loaded machine the two differ.
	busy := func(d time.Duration) {
		t0 := threadCPU(t)
		for threadCPU(t)-t0 < d {
		}
	}
	busy(200 * time.Millisecond)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	d, src, err := g.CPU()
	if err != nil || d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("CPU of a 200 ms busy thread: %v (%s) %v", d, src, err)
	}
	// The thread is back where it was: more work is not charged.
	busy(100 * time.Millisecond)
	if d2, _, _ := g.CPU(); d2-d > 20*time.Millisecond {
		t.Fatalf("work after restore was charged: %v then %v", d, d2)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// TestMarkCPU: what a group's processes used before MarkCPU is not in
// CPU after it (a process placed ahead of its run: its start is not the
// run's), and what they use after it is.
func TestMarkCPU(t *testing.T) {
	h := realHierarchy(t)
	g, err := h.Create("test-"+strings.ReplaceAll(t.Name(), "/", "-"), "cpuacct", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	// A shell counting to 200,000 in the group: tens of milliseconds of
	// CPU.
	burn := func() {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`)
		if err := StartIn(cmd, g); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	burn()
	before, src, err := g.CPU()
	if err != nil || before < 10*time.Millisecond {
		t.Fatalf("CPU of a busy shell: %v (%s) %v", before, src, err)
	}
	if err := g.MarkCPU(); err != nil {
		t.Fatal(err)
	}
	if d, _, err := g.CPU(); err != nil || d != 0 {
		t.Fatalf("CPU right after MarkCPU, nothing in the group: %v %v", d, err)
	}
	burn()
	after, _, err := g.CPU()
	if err != nil || after < before/4 || after > 20*before {
		t.Fatalf("CPU of the same busy shell after MarkCPU: %v (before it: %v) %v", after, before, err)
	}
}

// BenchmarkMove: a process moved into a new group of every controller a
// run's group has (AddProc), the cost on a run's path that placing its
// init ahead takes off (docs/s1.md). On a kernel without favordynmods,
// the first write to cgroup.procs waits for an RCU grace period.
func BenchmarkMove(b *testing.B) {
	h := realHierarchy(b)
	cmd := exec.Command("/bin/sleep", "3600")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		g, err := h.Create("bench-move-"+strconv.Itoa(i), "cpuacct", "cpu", "memory", "pids", "freezer", "devices")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		prev := g
		defer prev.Remove()
		b.StartTimer()
	}
	b.StopTimer()
	cmd.Process.Kill()
	cmd.Wait()
}

// realHierarchy is the machine's cgroup layout, where tb may make groups
// (root); tb is skipped where it may not.
func realHierarchy(tb testing.TB) *Hierarchy {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to create cgroups")
	}
	h, err := Detect("/sys/fs/cgroup")
	if err != nil {
		tb.Skipf("no cgroup hierarchy mounted: %v", err)
	}
	return h
}
