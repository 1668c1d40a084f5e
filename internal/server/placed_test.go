package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/cgroup"
)

// TestOneShotRunsStartPlacedAhead: between one-shot runs the service
// keeps the next run's init waiting in a group of its own made ahead
// (executor.Placer), one group at a time, never more, with the run's
// launcher started ahead beside it (as root, where runs have host ids
// of their own); the next run's program is that launcher, executed in
// place, in that group; runs are sealed as before; and once the service
// closes, none of its groups is left.
func TestOneShotRunsStartPlacedAhead(t *testing.T) {
	var groups *cgroup.Hierarchy
	var prefix string
	mine := func() []string {
		var out []string
		for _, n := range groups.Names() {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		return out
	}
	t.Cleanup(func() { // after the service's own cleanups
		if groups != nil {
			if left := mine(); len(left) > 0 {
				t.Errorf("groups left once the service closed: %v", left)
			}
		}
	})
	h, _, c := serve(t)
	if h.Host.Cgroups == nil {
		t.Skip("no cgroup hierarchy: runs get no group of their own")
	}
	groups = h.Host.Cgroups
	// This host's names: "partial-LEASE-N".
	n := h.Host.Store.Namer()("partial")
	prefix = n[:strings.LastIndex(n, "-")+1]
	ctx := context.Background()
	// bound waits for what a run sets going after it ended (a bound, not
	// a measure).
	bound := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !f(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute", what)
			}
		}
	}
	read := func(pid int, file string) string {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
		return string(b)
	}
	run := func(i int, args ...string) {
		t.Helper()
		r, err := c.Run(ctx, client.ExecSpec{Args: args}, nil, nil)
		if err != nil || r.ExitStatus != 0 || r.Run == "" {
			t.Fatalf("run %d: %+v %v", i, r, err)
		}
	}
	run(0, "/bin/sh", "-c", "echo $((6*7))") // it tells the executor the controllers
	for i := 1; i < 4; i++ {
		var ahead []string
		bound("the next run's group", func() bool { ahead = mine(); return len(ahead) > 0 })
		if len(ahead) != 1 {
			t.Fatalf("before run %d, %d groups made ahead, want 1: %v", i, len(ahead), ahead)
		}
		g := groups.Open(ahead[0])
		dir := g.V2
		if dir == "" {
			for _, d := range g.V1 {
				dir = d
			}
		}
		var launcher int
		bound("the launcher started ahead", func() bool {
			procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			launcher = 0
			for _, f := range strings.Fields(string(procs)) {
				pid, _ := strconv.Atoi(f)
				switch cmd := read(pid, "cmdline"); {
				case cmd == "":
					// Between its fork and its exec's new command line
					// (the launcher being started), or ended: look again.
					return false
				case strings.HasPrefix(cmd, "sandbox-s1-init\x00"):
				case strings.HasPrefix(cmd, "sandbox-s1-launch\x00"):
					launcher = pid
				default:
					t.Fatalf("group %s made ahead holds pid %d (%q), not a waiting init or its launcher", ahead[0], pid, cmd)
				}
			}
			return launcher != 0
		})
		// The run's program is that launcher, executed in place, in
		// the group made ahead (the run's), in a cgroup namespace rooted
		// there, as nobody mapped to a host id of its own.
		done := make(chan error, 1)
		var out bytes.Buffer
		// The group's limits and devices were set when it was made; a run
		// given others (the last) has its own.
		memory, pids := int64(256<<20), int64(128) // serve's defaults
		var limits *client.Limits
		if i == 3 {
			memory, pids = 200<<20, 77
			limits = &client.Limits{MemoryBytes: memory, Pids: pids}
		}
		go func() {
			r, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/sh", "-c", "cat /proc/self/cgroup; exec sleep 1"}, Limits: limits}, &out, nil)
			if err == nil && r.ExitStatus != 0 {
				err = fmt.Errorf("exit status %d", r.ExitStatus)
			}
			done <- err
		}()
		var err error
		bound("the program in the launcher started ahead", func() bool {
			select {
			case err = <-done:
				t.Fatalf("run %d ended before its program was seen in the launcher started ahead: %v", i, err)
			default:
			}
			return read(launcher, "comm") == "sleep\n"
		})
		if cg := read(launcher, "cgroup"); !strings.Contains(cg, "/"+cgroup.Parent+"/"+ahead[0]+"\n") {
			t.Errorf("the program is not in the run's group %s:\n%s", ahead[0], cg)
		}
		// Opened again now that its init is in it: the group is seen as
		// soon as its first hierarchy has it, before the others do.
		g = groups.Open(ahead[0])
		limit := func(v2, v1ctl, v1 string) string {
			p := filepath.Join(g.V2, v2)
			if d, ok := g.V1[v1ctl]; ok {
				p = filepath.Join(d, v1)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
		if got := limit("memory.max", "memory", "memory.limit_in_bytes"); got != strconv.FormatInt(memory, 10) {
			t.Errorf("run %d's memory limit: %s, want %d", i, got, memory)
		}
		if got := limit("pids.max", "pids", "pids.max"); got != strconv.FormatInt(pids, 10) {
			t.Errorf("run %d's process limit: %s, want %d", i, got, pids)
		}
		if d, ok := g.V1["devices"]; ok {
			b, _ := os.ReadFile(filepath.Join(d, "devices.list"))
			if l := string(b); strings.Contains(l, "a *:*") || !strings.Contains(l, "c 1:3 rw") {
				t.Errorf("run %d's devices: %q, want /dev's own alone", i, l)
			}
		}
		if m := strings.Fields(read(launcher, "uid_map")); len(m) != 3 || m[0] != "65534" || m[1] == "0" || m[2] != "1" {
			t.Errorf("the program's user namespace maps %q, want nobody alone to a host id of its own", m)
		}
		if err = <-done; err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if !strings.HasSuffix(line, ":/") {
				t.Errorf("the program sees a cgroup outside its own: %q (its cgroup namespace is not rooted at its group)", line)
			}
		}
	}
}
