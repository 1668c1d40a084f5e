package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/syscalltest"
)

// The fast path, side by side in one run (docs/api.md has the figures):
//
//	go test -run '^$' -bench FastPath -count 10 ./internal/server/ | tee new.txt
//	benchstat new.txt
//
// bwrap: bubblewrap's start-to-exit of /bin/true with every namespace
// unshared; live-exec: an exec of /bin/true in a live S1 sandbox through
// the API (sealed); live-exec-idle: the same with the sandbox idle 50 ms
// before each exec (off the clock), as between an agent's tool calls;
// service-s1: a sealed one-shot run of /bin/true through the API;
// service-s1-idle: the same with the service idle 50 ms before each;
// bwrap-python3 and service-python3: the same two for
// python3 -c pass; wazero-run: the wazero CLI running the C hello
// module with its compilation cache; service-s2: the same module as a
// sealed one-shot run through the API; oneshot-s1 and oneshot-s2: the
// sandbox CLI with no service. cpu-ms/run beside each is the whole
// machine's CPU time over the row's loop, per run (machineCPU).
func BenchmarkFastPath(b *testing.B) {
	h, _, c := serve(b)
	ctx := context.Background()
	hello, err := guestbuild.C("hello")
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	b.Run("bwrap", func(b *testing.B) {
		bw, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("no bubblewrap (scripts/deps installs it)")
		}
		cpu0 := machineCPU()
		for b.Loop() {
			if err := exec.Command(bw, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	// trueIn is an exec of /bin/true in a live S1 sandbox made for b.
	trueIn := func(b *testing.B) func() {
		sb, err := c.Create(ctx, client.SandboxSpec{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Remove(ctx, sb.ID) })
		return func() {
			if r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/true"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
	}
	// trueRun is a sealed one-shot run of /bin/true through the API.
	trueRun := func(b *testing.B) func() {
		return func() {
			if r, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
	}
	// afterIdle times run with the service idle 50 ms before each (off
	// the clock).
	afterIdle := func(b *testing.B, run func()) {
		run()
		for b.Loop() {
			b.StopTimer()
			time.Sleep(50 * time.Millisecond)
			b.StartTimer()
			run()
		}
	}
	// backToBack times run back to back, with the syncs one costs and
	// the machine's CPU.
	backToBack := func(b *testing.B, run func()) {
		syncs := countSyncs(b, run)
		cpu0 := machineCPU()
		for b.Loop() {
			run()
		}
		reportCPU(b, cpu0)
		b.ReportMetric(syncs, "syncs/run")
	}
	b.Run("live-exec", func(b *testing.B) { backToBack(b, trueIn(b)) })
	// An agent's exec: the sandbox idle a moment before each (50 ms, off
	// the clock), as between a model's tool calls, not back to back.
	b.Run("live-exec-idle", func(b *testing.B) { afterIdle(b, trueIn(b)) })
	b.Run("service-s1", func(b *testing.B) { backToBack(b, trueRun(b)) })
	// The same after the service idled 50 ms (off the clock): its warm
	// init is ready, as back to back it is still being started.
	b.Run("service-s1-idle", func(b *testing.B) { afterIdle(b, trueRun(b)) })
	// An agent's usual one-shot: python3 (6.8 MB here), with bubblewrap
	// running it beside.
	python := []string{"/usr/bin/python3", "-c", "pass"}
	b.Run("bwrap-python3", func(b *testing.B) {
		bw, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("no bubblewrap (scripts/deps installs it)")
		}
		if _, err := os.Stat(python[0]); err != nil {
			b.Skip("no python3")
		}
		cpu0 := machineCPU()
		for b.Loop() {
			if err := exec.Command(bw, append([]string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent"}, python...)...).Run(); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("service-python3", func(b *testing.B) {
		if _, err := os.Stat(python[0]); err != nil {
			b.Skip("no python3")
		}
		cpu0 := machineCPU()
		for b.Loop() {
			if r, err := c.Run(ctx, client.ExecSpec{Args: python}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("wazero-run", func(b *testing.B) {
		wz := filepath.Join(tmp, "wazero")
		if out, err := exec.Command("go", "build", "-o", wz, "github.com/tetratelabs/wazero/cmd/wazero").CombinedOutput(); err != nil {
			b.Skipf("cannot build the wazero CLI: %v %s", err, out)
		}
		cache := filepath.Join(tmp, "wazero-cache")
		exec.Command(wz, "run", "-cachedir", cache, hello).Run()
		cpu0 := machineCPU()
		for b.Loop() {
			if err := exec.Command(wz, "run", "-cachedir", cache, hello).Run(); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("service-s2", func(b *testing.B) {
		backToBack(b, func() {
			if r, err := c.Run(ctx, client.ExecSpec{Args: []string{hello}, Grants: []string{"cpu:1J"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		})
	})
	sbx := filepath.Join(tmp, "sandbox")
	if out, err := exec.Command("go", "build", "-o", sbx, "github.com/opensubstrate/sandbox/cmd/sandbox").CombinedOutput(); err != nil {
		b.Fatalf("build sandbox: %v %s", err, out)
	}
	// The engine beside the thin sandbox: a one-shot run with no service
	// is made in it.
	if out, err := exec.Command("go", "build", "-o", filepath.Join(tmp, "sandbox-engine"), "github.com/opensubstrate/sandbox/cmd/sandbox-engine").CombinedOutput(); err != nil {
		b.Fatalf("build sandbox-engine: %v %s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(tmp, "sandbox-s1"), "github.com/opensubstrate/sandbox/cmd/sandbox-s1").CombinedOutput(); err != nil {
		b.Fatalf("build sandbox-s1: %v %s", err, out)
	}
	// One-shot: the CLI alone, and the CLI through the running service.
	for _, o := range []struct{ name, home, arg string }{
		{"oneshot-s1", filepath.Join(tmp, "home"), "/bin/true"},
		{"oneshot-s2", filepath.Join(tmp, "home"), hello},
		{"oneshot-s1-via-service", h.Store.Root(), "/bin/true"},
	} {
		home := o.home
		b.Run(o.name, func(b *testing.B) {
			cmd := func() *exec.Cmd {
				c := exec.Command(sbx, "--home", home, "run", "-q", "--", o.arg)
				c.Env = append(os.Environ(), "SANDBOX_HOME="+home)
				return c
			}
			cmd().Run() // the probes and caches this machine keeps
			cpu0 := machineCPU()
			for b.Loop() {
				if out, err := cmd().CombinedOutput(); err != nil {
					b.Fatal(err, string(out))
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// countSyncs says how many sync calls (fsync, fdatasync, syncfs, ...)
// one sealed run costs, to report beside a benchmark's time: strace
// counts them over 20 runs before the timed loop, in this process (the
// service) and the programs it starts.
func countSyncs(b *testing.B, run func()) float64 {
	const n = 20
	got, err := syscalltest.Count(syscalltest.Syncs, func() {
		for range n {
			run()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(syscalltest.Total(got)) / n
}

// BenchmarkThroughput: runs per second with 1, 2, 4, 8 and 16 concurrent
// clients, side by side: "bwrap" is the clients running bubblewrap
// (/bin/true, every namespace, /dev, /proc) themselves; "oneshot" sealed
// one-shot S1 runs of /bin/true through the service (POST /v1/runs);
// "exec" sealed execs of /bin/true in 4 live S1 sandboxes. runs/s is
// runs finished per second of wall time, each client on its own
// connection; cpu-ms/run is the whole machine's CPU time (every
// process's and the kernel's, from /proc/stat) over the loop, per run:
// on a quiet machine, what one run costs all told. Issue 33's goals:
// oneshot at least bwrap's, exec at least twice it.
func BenchmarkThroughput(b *testing.B) {
	h, _, c := serve(b)
	ctx := context.Background()
	bw, bwErr := exec.LookPath("bwrap")
	var ids []string
	for range 4 {
		sb, err := c.Create(ctx, client.SandboxSpec{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Remove(ctx, sb.ID)
		ids = append(ids, sb.ID)
	}
	ok := func(r *client.Result, err error) error {
		if err == nil && r.ExitStatus != 0 {
			err = fmt.Errorf("exit status %d", r.ExitStatus)
		}
		return err
	}
	true_ := client.ExecSpec{Args: []string{"/bin/true"}}
	for _, k := range []struct {
		name string
		run  func(cl *client.Client, i int) error
	}{
		{"bwrap", func(*client.Client, int) error {
			return exec.Command(bw, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "/bin/true").Run()
		}},
		{"oneshot", func(cl *client.Client, _ int) error { return ok(cl.Run(ctx, true_, nil, nil)) }},
		{"exec", func(cl *client.Client, i int) error { return ok(cl.Exec(ctx, ids[i%len(ids)], true_, nil, nil)) }},
	} {
		for _, n := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("%s/clients-%d", k.name, n), func(b *testing.B) {
				if k.name == "bwrap" && bwErr != nil {
					b.Skip("no bubblewrap (scripts/deps installs it)")
				}
				clients := make([]*client.Client, n)
				for i := range clients {
					cl, err := client.Dial(h.Store.Path(client.SocketName), client.Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer cl.Close()
					clients[i] = cl
				}
				work := make(chan struct{})
				var wg sync.WaitGroup
				b.ResetTimer()
				cpu0 := machineCPU()
				for i, cl := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range work {
							if err := k.run(cl, i); err != nil {
								b.Error(err)
							}
						}
					}()
				}
				for range b.N {
					work <- struct{}{}
				}
				close(work)
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
				reportCPU(b, cpu0)
			})
		}
	}
}

// machineCPU is the CPU time the whole machine has spent busy (user,
// nice, system, irq, softirq and steal of /proc/stat's first line), in
// seconds; 0 where it cannot be read.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // not idle (4) or iowait (5)
		n, err := strconv.ParseFloat(string(f[i]), 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return ticks / 100 // USER_HZ, 100 on Linux
}

// reportCPU reports the machine's CPU time since since (machineCPU) per
// iteration, where it could be read.
func reportCPU(b *testing.B, since float64) {
	if now := machineCPU(); since > 0 && now > 0 {
		b.ReportMetric((now-since)*1000/float64(b.N), "cpu-ms/run")
	}
}
