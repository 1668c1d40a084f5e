//go:build linux

package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

// watching runs a watch of p in sandbox id in the background: its
// events, and its end.
func watching(t *testing.T, h *Manager, id, p string, recursive bool, send func(WatchEvent) error) (<-chan WatchEvent, <-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	evs := make(chan WatchEvent, 4*WatchBuffer)
	done := make(chan error, 1)
	if send == nil {
		send = func(e WatchEvent) error { evs <- e; return nil }
	}
	go func() { done <- h.Watch(ctx, id, "", p, recursive, send) }()
	return evs, done, cancel
}

// next is the next event but settled's ready-N files, within a bound
// (not a measure: it fails only a watch that says nothing).
func next(t *testing.T, evs <-chan WatchEvent) WatchEvent {
	t.Helper()
	for {
		select {
		case e := <-evs:
			if strings.HasPrefix(filepath.Base(e.Path), "ready-") {
				continue
			}
			return e
		case <-time.After(30 * time.Second):
			t.Fatal("no event in 30 s")
			return WatchEvent{}
		}
	}
}

// settled waits until the watch reports a file made in dir (a new one
// each try, made until one is reported: a file made before the watch
// was in place is never reported): from then on, the watch of dir is in
// place.
func settled(t *testing.T, h *Manager, id string, evs <-chan WatchEvent, dir string) {
	t.Helper()
	for i := 0; ; i++ {
		execIn(t, h, id, "touch", fmt.Sprintf("%s/ready-%d", dir, i))
		deadline := time.After(200 * time.Millisecond)
	drain:
		for {
			select {
			case e := <-evs:
				if strings.HasPrefix(e.Path, dir+"/ready-") {
					return
				}
			case <-deadline:
				break drain
			}
		}
		if i == 600 {
			t.Fatalf("the watch never reported a file made in %s", dir)
		}
	}
}

// TestWatchSeesWhatAnExecDoes: a recursive watch of a live S1 sandbox's
// workspace reports, in order, what an exec made, wrote, moved and
// removed, in a directory made after the watch began too; ending the
// sandbox ends the watch, saying so.
func TestWatchSeesWhatAnExecDoes(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	info, err := h.Create(context.Background(), SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	ws := info.Workspace
	evs, done, _ := watching(t, h, info.ID, ws, true, nil)
	settled(t, h, info.ID, evs, ws)
	execIn(t, h, info.ID, "mkdir", ws+"/d")
	if e := next(t, evs); e.Op != "create" || e.Path != ws+"/d" || !e.Dir {
		t.Fatalf("mkdir: %+v", e)
	}
	settled(t, h, info.ID, evs, ws+"/d")
	execIn(t, h, info.ID, "sh", "-c", "echo x > d/f && mv d/f d/g && rm d/g && echo y > top && mv d e")
	want := []WatchEvent{
		{Op: "create", Path: ws + "/d/f"},
		{Op: "modify", Path: ws + "/d/f"},
		{Op: "rename", Path: ws + "/d/g", From: ws + "/d/f"},
		{Op: "delete", Path: ws + "/d/g"},
		{Op: "create", Path: ws + "/top"},
		{Op: "modify", Path: ws + "/top"},
		{Op: "rename", Path: ws + "/e", From: ws + "/d", Dir: true},
	}
	for i, w := range want {
		if e := next(t, evs); e != w {
			t.Fatalf("event %d: %+v, want %+v", i, e, w)
		}
	}
	// The moved directory's watch follows it.
	execIn(t, h, info.ID, "touch", ws+"/e/after")
	if e := next(t, evs); e.Op != "create" || e.Path != ws+"/e/after" {
		t.Fatalf("in the moved directory: %+v", e)
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
	for {
		e := next(t, evs)
		if e.Op == "ended" {
			if e.Why == "" {
				t.Fatalf("ended without a reason: %+v", e)
			}
			break
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watch ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not end with its sandbox")
	}
}

// TestWatchIsHeldToTheGrants: a watch of a path outside the sandbox's
// grants, of a link, of another owner's sandbox is refused; a link the
// guest planted to a directory outside is never followed (what changes
// there is not reported), nor is a non-recursive watch told of what
// happens beneath it.
func TestWatchIsHeldToTheGrants(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	info, err := h.Create(context.Background(), SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove(info.ID, "")
	ws := info.Workspace
	outside := t.TempDir()
	execIn(t, h, info.ID, "sh", "-c", "mkdir sub && ln -s "+outside+" link")
	ctx := context.Background()
	nop := func(WatchEvent) error { return nil }
	for _, tc := range []struct {
		p, owner string
		want     error
	}{
		{"/etc", "", grant.ErrDenied},
		{ws + "/link", "", grant.ErrDenied},
		{ws + "/../x", "", nil}, // not clean: invalid, said as such below
		{ws, "someone-else", ErrNoSandbox},
	} {
		err := h.Watch(ctx, info.ID, tc.owner, tc.p, true, nop)
		if tc.want != nil && !errors.Is(err, tc.want) || err == nil {
			t.Errorf("watch %s as %q: %v, want %v", tc.p, tc.owner, err, tc.want)
		}
	}
	evs, _, _ := watching(t, h, info.ID, ws, true, nil)
	settled(t, h, info.ID, evs, ws+"/sub")
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600)
	flat, _, _ := watching(t, h, info.ID, ws, false, nil)
	settled(t, h, info.ID, flat, ws)
	execIn(t, h, info.ID, "touch", ws+"/sub/deep")
	execIn(t, h, info.ID, "touch", ws+"/last")
	for e := next(t, evs); e.Path != ws+"/last"; e = next(t, evs) {
		if strings.Contains(e.Path, "secret") || strings.HasPrefix(e.Path, outside) {
			t.Fatalf("a change behind the guest's link was reported: %+v", e)
		}
	}
	for e := next(t, flat); e.Path != ws+"/last"; e = next(t, flat) {
		if strings.HasPrefix(e.Path, ws+"/sub/") {
			t.Fatalf("a non-recursive watch was told of %+v", e)
		}
	}
}

// TestWatchOverflowIsSaid: a reader slower than the sandbox's changes
// loses events past WatchBuffer, and is told so by an overflow event.
func TestWatchOverflowIsSaid(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	info, err := h.Create(context.Background(), SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove(info.ID, "")
	ws := info.Workspace
	release := make(chan struct{})
	got := make(chan WatchEvent, 8*WatchBuffer)
	first := true
	slow := func(e WatchEvent) error {
		if first {
			first = false
			got <- e
			<-release // stalls while the exec below makes its files
			return nil
		}
		got <- e
		return nil
	}
	_, _, _ = watching(t, h, info.ID, ws, false, slow)
	settled(t, h, info.ID, got, ws)
	execIn(t, h, info.ID, "sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do : > f$i; i=$((i+1)); done; : > last", 2*WatchBuffer))
	close(release)
	for {
		e := next(t, got)
		if e.Op == "overflow" {
			if !strings.Contains(e.Why, "lost") {
				t.Fatalf("overflow without a reason: %+v", e)
			}
			return
		}
		if e.Path == ws+"/last" {
			t.Fatal("every event was delivered to a stalled reader: no overflow said")
		}
	}
}

// BenchmarkWatchLatency: from a file made in a watched workspace (by the
// host, beside the sandbox) to its event at the watch's reader; the
// p50 and p99 of b.N such.
func BenchmarkWatchLatency(b *testing.B) {
	h := newBenchHost(b)
	b.Cleanup(func() { cleanLive(h) })
	info, err := h.Create(context.Background(), SandboxSpec{Tier: tier.S2, Grants: grants(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan time.Time, 16)
	ready := make(chan struct{})
	go h.Watch(ctx, info.ID, "", info.Workspace, false, func(e WatchEvent) error {
		if e.Op == "create" {
			if e.Path == info.Workspace+"/ready" {
				close(ready)
				return nil
			}
			got <- time.Now()
		}
		return nil
	})
	for i := 0; ; i++ {
		os.WriteFile(filepath.Join(info.Workspace, "ready"), nil, 0o644)
		select {
		case <-ready:
		case <-time.After(100 * time.Millisecond):
			os.Remove(filepath.Join(info.Workspace, "ready"))
			continue
		}
		break
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		p := filepath.Join(info.Workspace, fmt.Sprintf("f%d", i))
		i++
		start := time.Now()
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
		lat = append(lat, (<-got).Sub(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
