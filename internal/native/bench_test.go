//go:build linux

package native

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// BenchmarkStartToExit runs /bin/true three ways, side by side: a bare
// exec, Debian's bubblewrap (--unshare-all, the system directories bound
// read-only, its own /proc, /dev and /tmp), and S1 (every layer, with
// and without the run's cgroup, with and without a warm init). Debian's bubblewrap comes from
// scripts/deps.
func BenchmarkStartToExit(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bwrap", func(b *testing.B) {
		bw, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("bubblewrap is not installed (scripts/deps installs it)")
		}
		args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"}
		for _, l := range []string{"bin", "sbin", "lib", "lib32", "lib64"} {
			if t, err := os.Readlink("/" + l); err == nil {
				args = append(args, "--symlink", t, "/"+l)
			}
		}
		args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true")
		for b.Loop() {
			if out, err := exec.Command(bw, args...).CombinedOutput(); err != nil {
				b.Fatalf("%v %s", err, out)
			}
		}
	})
	helper, err := guestbuild.S1Helper()
	if err != nil {
		b.Fatal(err)
	}
	state := b.TempDir()
	e, err := New(Config{StateDir: state, Self: helper})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	cold, err := New(Config{StateDir: state, Self: helper, NoWarm: true})
	if err != nil {
		b.Fatal(err)
	}
	g, _ := grant.ParseArgs([]string{"cpu:1J"}, "/")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("true")), Entry: "/bin/true", Args: []string{"true"}}
	run := func(b *testing.B, e *Executor, cg *cgroup.Group) {
		res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute, Cgroup: cg})
		if err != nil || res.Outcome.ExitCode == nil || *res.Outcome.ExitCode != 0 {
			b.Fatalf("%v %+v", err, res.Outcome)
		}
	}
	// s1-cold starts each run's init on the run's path, as the CLI does
	// (one run per process); s1 has one started ahead, as a service does.
	b.Run("s1-cold", func(b *testing.B) {
		for b.Loop() {
			run(b, cold, nil)
		}
	})
	b.Run("s1", func(b *testing.B) {
		for b.Loop() {
			run(b, e, nil)
		}
	})
	// s1-idle is a service between runs: the warm init has had time to
	// start and build the base root before the run arrives.
	b.Run("s1-idle", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			e.waitWarm()
			time.Sleep(20 * time.Millisecond)
			b.StartTimer()
			run(b, e, nil)
		}
	})
	b.Run("s1+cgroup", func(b *testing.B) {
		h, err := cgroup.Detect("/sys/fs/cgroup")
		if err != nil || os.Geteuid() != 0 {
			b.Skip("no cgroups to create")
		}
		i := 0
		for b.Loop() {
			cg, err := h.Create(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), "cpuacct", "cpu", "memory", "pids", "freezer")
			if err != nil {
				b.Fatal(err)
			}
			run(b, e, cg)
			cg.Remove()
			i++
		}
	})
}

// BenchmarkExecControl runs a shell loop of 200 execs of /bin/true at
// S1 without and with exec control (a deny list naming another binary),
// and reports the time per exec.
func BenchmarkExecControl(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("exec control needs root")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(Config{StateDir: b.TempDir(), Self: helper, NoWarm: true})
	if err != nil {
		b.Fatal(err)
	}
	whoami, _ := addr.OfFile("/usr/bin/whoami")
	const n = 200
	loop := fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done", n)
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sh")), Entry: "/bin/sh", Args: []string{"sh", "-c", loop}}
	for _, tc := range []struct {
		name   string
		grants []string
	}{{"off", nil}, {"deny-list", []string{"exec:deny:" + whoami.String()}}} {
		b.Run(tc.name, func(b *testing.B) {
			g, _ := grant.ParseArgs(append([]string{"cpu:1J"}, tc.grants...), "/")
			for b.Loop() {
				res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute})
				if err != nil || res.Outcome.ExitCode == nil || *res.Outcome.ExitCode != 0 {
					b.Fatalf("%v %+v", err, res)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/exec")
		})
	}
}
