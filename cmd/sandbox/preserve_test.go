package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestIdleServiceParksAndNeverErases: a service with --idle parks a
// sandbox no request touched (its workspace, .git included, kept), keeps
// one whose exec still runs, counts both in /metrics, and a resumption
// finds the work.
func TestIdleServiceParksAndNeverErases(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home, "--idle", "400ms")
	out, e, code := runCLI(t, home, "", "create")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	idle := strings.TrimSpace(out)
	if _, e, code := runCLI(t, home, "", "exec", idle, "--", "sh", "-c", "mkdir .git && echo unpublished > .git/WIP"); code != 0 {
		t.Fatalf("exec: %s", e)
	}
	out, _, _ = runCLI(t, home, "", "create")
	busy := strings.TrimSpace(out)
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, home, "", "exec", busy, "--", "sleep", "2")
		done <- code
	}()
	deadline := time.Now().Add(20 * time.Second)
	for servedMetric(t, home, "sandbox_idle_parked_total") < 1 || servedMetric(t, home, "sandbox_idle_retained_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("nothing parked and retained")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ps, _, _ := runCLI(t, home, "", "ps")
	var idleLine, busyLine string
	for _, l := range strings.Split(ps, "\n") {
		switch {
		case strings.HasPrefix(l, idle):
			idleLine = l
		case strings.HasPrefix(l, busy):
			busyLine = l
		}
	}
	if !strings.Contains(idleLine, "suspended") || !strings.Contains(busyLine, "live") {
		t.Fatalf("ps:\n%s", ps)
	}
	if c := <-done; c != 0 {
		t.Fatalf("the busy exec: %d", c)
	}
	if _, e, code := runCLI(t, home, "", "resume", idle); code != 0 {
		t.Fatalf("resume: %s", e)
	}
	if out, _, _ := runCLI(t, home, "", "exec", idle, "--", "cat", ".git/WIP"); out != "unpublished\n" {
		t.Fatalf("after resuming: %q", out)
	}
}
