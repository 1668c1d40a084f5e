package server

import (
	"context"
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
// (executor.Placer), one group at a time, never more; runs through it
// are sealed as before; and once the service closes, none of its groups
// is left.
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
	for i := range 4 {
		r, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/sh", "-c", "echo $((6*7))"}}, nil, nil)
		if err != nil || r.ExitStatus != 0 || r.Run == "" {
			t.Fatalf("run %d: %+v %v", i, r, err)
		}
		if i == 0 {
			continue // it told the executor the controllers
		}
		// The next run's init starts once a run ended: wait for it (a
		// bound, not a measure).
		var ahead []string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if ahead = mine(); len(ahead) > 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(ahead) != 1 {
			t.Fatalf("after run %d, %d groups made ahead, want 1: %v", i, len(ahead), ahead)
		}
		g := groups.Open(ahead[0])
		dir := g.V2
		if dir == "" {
			for _, d := range g.V1 {
				dir = d
			}
		}
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(procs)) {
			pid, _ := strconv.Atoi(f)
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if !strings.HasPrefix(string(cmd), "sandbox-s1-init") {
				t.Errorf("group %s made ahead holds pid %d (%q), not a waiting init", ahead[0], pid, cmd)
			}
		}
	}
}
