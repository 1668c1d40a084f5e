package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

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
// the API (sealed); service-s1: a sealed one-shot run of /bin/true
// through the API; wazero-run: the wazero CLI running the C hello
// module with its compilation cache; service-s2: the same module as a
// sealed one-shot run through the API; oneshot-s1 and oneshot-s2: the
// sandbox CLI with no service.
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
		for b.Loop() {
			if err := exec.Command(bw, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("live-exec", func(b *testing.B) {
		sb, err := c.Create(ctx, client.SandboxSpec{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Remove(ctx, sb.ID)
		exec := func() {
			if r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/bin/true"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
		syncs := countSyncs(b, exec)
		for b.Loop() {
			exec()
		}
		b.ReportMetric(syncs, "syncs/run")
	})
	b.Run("service-s1", func(b *testing.B) {
		run := func() {
			if r, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/true"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
		syncs := countSyncs(b, run)
		for b.Loop() {
			run()
		}
		b.ReportMetric(syncs, "syncs/run")
	})
	b.Run("wazero-run", func(b *testing.B) {
		wz := filepath.Join(tmp, "wazero")
		if out, err := exec.Command("go", "build", "-o", wz, "github.com/tetratelabs/wazero/cmd/wazero").CombinedOutput(); err != nil {
			b.Skipf("cannot build the wazero CLI: %v %s", err, out)
		}
		cache := filepath.Join(tmp, "wazero-cache")
		exec.Command(wz, "run", "-cachedir", cache, hello).Run()
		for b.Loop() {
			if err := exec.Command(wz, "run", "-cachedir", cache, hello).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("service-s2", func(b *testing.B) {
		run := func() {
			if r, err := c.Run(ctx, client.ExecSpec{Args: []string{hello}, Grants: []string{"cpu:1J"}}, nil, nil); err != nil || r.ExitStatus != 0 {
				b.Fatal(err, r)
			}
		}
		syncs := countSyncs(b, run)
		for b.Loop() {
			run()
		}
		b.ReportMetric(syncs, "syncs/run")
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
			for b.Loop() {
				if out, err := cmd().CombinedOutput(); err != nil {
					b.Fatal(err, string(out))
				}
			}
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
// connection. Issue 33's goals: oneshot at least bwrap's, exec at least
// twice it.
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
			})
		}
	}
}
