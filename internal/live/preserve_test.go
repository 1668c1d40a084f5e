package live

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/internal/volume/volumetest"
	"github.com/opensubstrate/sandbox/record"
)

// reopenHost is a second host on h's state directory (a restart), with
// a lease of its own.
func reopenHost(t *testing.T, h *Manager) *Manager {
	t.Helper()
	d, err := state.Open(h.Store.Dir.Root)
	if err != nil {
		t.Fatal(err)
	}
	k, err := d.HostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h2 := New(&host.Host{Store: store.Of(d), Key: k})
	lease, err := d.Lease()
	if err != nil {
		t.Fatal(err)
	}
	h2.Store.Lease = lease
	addS1(t, h2, lease.Name)
	t.Cleanup(func() {
		h2.Close()
		lease.Close()
		for _, id := range h2.recordIDs() {
			os.RemoveAll(h2.parkedDir(id))
		}
	})
	return h2
}

func recordPhase(t *testing.T, h *Manager, id string) record.Phase {
	t.Helper()
	b, err := os.ReadFile(h.RecordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	st, err := record.VerifyBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return st.Phase
}

// waitIdle waits until the idle deadline has parked n sandboxes and
// retained at least r times.
func waitIdle(t *testing.T, h *Manager, n, r int) {
	t.Helper()
	for i := 0; ; i++ {
		p, rt := h.IdleStats()
		if p >= n && rt >= r {
			return
		}
		if i > 6000 {
			t.Fatalf("idle: %d parked, %d retained; want %d, %d", p, rt, n, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleParksAQuiescentSandboxThroughTheFence: an idle S1 sandbox (a
// background writer included) is frozen, its workspace (its .git and
// ignored files too) checkpointed and verified, the checkpoint written
// into its lifecycle record for its owner and incarnation, and parked:
// never destroyed. A resumption finds every file.
func TestIdleParksAQuiescentSandboxThroughTheFence(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	v := h.readLifecycle(info.ID)
	if v.Class != lifecycle.Unseeded {
		t.Fatalf("a new sandbox's lifecycle record: %s %s", v.Class, v.Reason)
	}
	inc := v.Record.Incarnation
	execIn(t, h, info.ID, "sh", "-c", `mkdir -p .git && echo ref > .git/HEAD && echo 'build/' > .gitignore && mkdir build && echo out > build/o && (while :; do date > tick.new; mv tick.new tick; sleep 0.05; done) > /dev/null 2>&1 &`)
	h.StartIdle(300 * time.Millisecond)
	waitIdle(t, h, 1, 0)
	if p := recordPhase(t, h, info.ID); p != record.Parked {
		t.Fatalf("after the idle deadline the record is %s", p)
	}
	v = h.readLifecycle(info.ID)
	cp := v.Checkpoint()
	if v.Class != lifecycle.Unseeded || cp == nil || cp.Incarnation != inc || cp.Owner != lifecycle.AccountDigest(host.LocalOwner) || !cp.RetainUntil.After(time.Now().Add(MaxIdleWindow+CheckpointGrace)) {
		t.Fatalf("lifecycle after parking: %s %+v", v.Class, cp)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, out := execIn(t, h, info.ID, "sh", "-c", "cat .git/HEAD build/o .gitignore; test -s tick && echo tick"); out != "ref\nout\nbuild/\ntick\n" {
		t.Fatalf("after resuming: %q", out)
	}
	if v := h.readLifecycle(info.ID); v.Record.Incarnation == inc {
		t.Fatal("a resumption kept the incarnation")
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if v := h.readLifecycle(info.ID); v.Class != lifecycle.Closing {
		t.Fatalf("after its removal: %s", v.Class)
	}
}

// TestIdleRetainsAStuckInFlightWriter: an exec still running at the idle
// deadline is a stuck run: the sandbox is retained, live, its exec
// untouched.
func TestIdleRetainsAStuckInFlightWriter(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		var out strings.Builder
		// It runs until the test lets it end: after the idle deadline,
		// however slow the machine.
		r, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sh", "-c", "while [ ! -e release ]; do sleep 0.05; done; echo finished"}, Stdout: &out, Deadline: 5 * time.Minute})
		if err != nil {
			done <- err.Error()
			return
		}
		done <- string(r.Result.Outcome.Status) + " " + out.String()
	}()
	// The exec is running (not merely asked for) before the idle clock
	// starts: its request is not one that came since the clock's sample.
	for i := 0; ; i++ {
		h.sandboxes.mu.Lock()
		sb := h.sandboxes.m[info.ID]
		h.sandboxes.mu.Unlock()
		sb.mu.Lock()
		running := sb.running
		sb.mu.Unlock()
		if running > 0 {
			break
		}
		if i == 6000 {
			t.Fatal("the exec never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.StartIdle(50 * time.Millisecond)
	waitIdle(t, h, 0, 1)
	if err := os.WriteFile(filepath.Join(info.Workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != "exited finished\n" {
		t.Fatalf("the stuck exec: %q", got)
	}
	if p := recordPhase(t, h, info.ID); p != record.Active {
		t.Fatalf("the record is %s", p)
	}
	sb, _ := h.sandbox(info.ID, "")
	if sb == nil {
		t.Fatal("gone")
	}
	sb.mu.Lock()
	why := sb.retainedWhy
	sb.mu.Unlock()
	if !strings.Contains(why, "stuck") {
		t.Fatalf("retained for: %q", why)
	}
}

// TestIdleRetainsWhenTheLifecycleRecordCannotBeRead: a missing,
// malformed or unsupported lifecycle record retains the sandbox live and
// thawed; an unsupported one also refuses a resumption, after a restart
// too, and is never rewritten.
func TestIdleRetainsWhenTheLifecycleRecordCannotBeRead(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	var ids []string
	for _, b := range []string{"", "{", `{"v":2,"sandbox":"x"}`} {
		info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
		if err != nil {
			t.Fatal(err)
		}
		if b == "" {
			os.Remove(h.lifecyclePath(info.ID))
		} else {
			os.WriteFile(h.lifecyclePath(info.ID), []byte(b), 0o600)
		}
		ids = append(ids, info.ID)
	}
	h.StartIdle(100 * time.Millisecond)
	waitIdle(t, h, 0, 3)
	for _, id := range ids {
		if p := recordPhase(t, h, id); p != record.Active {
			t.Fatalf("%s: %s", id, p)
		}
		if _, out := execIn(t, h, id, "echo", "thawed"); out != "thawed\n" {
			t.Fatalf("%s after the fence retained it: %q", id, out)
		}
	}
	// The unsupported one: suspended by the user, it is not resumed.
	v2 := ids[2]
	if _, err := h.Suspend(ctx, v2, ""); err != nil {
		t.Fatal(err)
	}
	var le *LifecycleError
	if _, err := h.Resume(ctx, v2, ""); !errors.As(err, &le) || le.View.Class != lifecycle.Unavailable {
		t.Fatalf("resume with an unsupported lifecycle record: %v", err)
	}
	h2 := reopenHost(t, h)
	if _, err := h2.Resume(ctx, v2, ""); !errors.As(err, &le) {
		t.Fatalf("after a restart: %v", err)
	}
	if b, _ := os.ReadFile(h.lifecyclePath(v2)); string(b) != `{"v":2,"sandbox":"x"}` {
		t.Fatalf("the unsupported record was rewritten: %s", b)
	}
}

// TestIdleRetainsOnARequestDuringPreservation: a request that came after
// the idle clock was sampled (in the same tick, the clock not moving)
// retains the sandbox, thawed, and the request is served.
func TestIdleRetainsOnARequestDuringPreservation(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	frozen := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h.Clock = func() time.Time { return frozen }
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := h.sandbox(info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	sample := sb.activity.Load()
	sb.activity.Add(1) // a request, at the same instant
	err = h.preserve(sb, sample)
	var r *Retained
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "request") {
		t.Fatalf("%v", err)
	}
	if _, out := execIn(t, h, info.ID, "echo", "served"); out != "served\n" {
		t.Fatalf("%q", out)
	}
	if frozen, _ := sb.cg.Frozen(); frozen {
		t.Fatal("retained, and left frozen")
	}
}

// TestShutdownRetainsWhatItCannotPark: a host that stops while an exec
// runs does not close the sandbox: its workspace and record stay, and
// the next host's recovery parks it with its files.
func TestShutdownRetainsWhatItCannotPark(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info := retained(t, h, "echo unpublished > work")
	if b, err := os.ReadFile(info.Workspace + "/work"); err != nil || string(b) != "unpublished\n" {
		t.Fatalf("the workspace after shutdown: %q %v", b, err)
	}
	if p := recordPhase(t, h, info.ID); p != record.Active {
		t.Fatalf("the record after shutdown: %s", p)
	}
	h2 := reopenHost(t, h)
	old := h.Store.Lease.ID
	if rs := h2.Recover(func(l string) bool { return l == old }, false); len(rs) != 1 || rs[0].What != "suspended" || rs[0].Err != nil {
		t.Fatalf("recovery: %+v", rs)
	}
	if p := recordPhase(t, h2, info.ID); p != record.Parked {
		t.Fatalf("after recovery: %s", p)
	}
	if _, err := h2.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, out := execIn(t, h2, info.ID, "cat", "work"); out != "unpublished\n" {
		t.Fatalf("%q", out)
	}
}

// retained makes a sandbox in h, runs script in it, and closes h while
// an exec still runs: the shutdown cannot park it, so it retains it (its
// record active, its workspace as it is) for the next host's recovery.
func retained(t *testing.T, h *Manager, script string) SandboxInfo {
	t.Helper()
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	execIn(t, h, info.ID, "sh", "-c", script)
	go h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sleep", "30"}, Deadline: time.Minute})
	for i := 0; ; i++ {
		if sb, _ := h.sandbox(info.ID, ""); sb != nil && func() bool { sb.mu.Lock(); defer sb.mu.Unlock(); return sb.running > 0 }() {
			break
		}
		if i > 200 {
			t.Fatal("the exec did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.Close()
	return info
}

// After a restart that emptied the temporary directory, another user
// may make a retained sandbox's workspace (its directory and image)
// before the next host recovers it: the recovery takes the workspace as
// gone and closes the record, never capturing their files into it nor
// mounting their image, and it does not stall on them.
func TestRecoveryRefusesAPlantedWorkspace(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	info := retained(t, h, "true") // its record Active, its workspace kept
	ws := info.Workspace
	if err := volumetest.WhileBusy(func() error { return volume.Release(ws) }); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(ws)
	// Theirs: a directory with a file, an image.
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "planted"), []byte("theirs"), 0o644)
	os.WriteFile(volume.Image(ws), []byte("their image"), 0o600)
	for _, p := range []string{ws, filepath.Join(ws, "planted"), volume.Image(ws)} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(ws); os.Remove(volume.Image(ws)) })
	h2 := reopenHost(t, h)
	old := h.Store.Lease.ID
	if rs := h2.Recover(func(l string) bool { return l == old }, false); len(rs) != 1 || rs[0].What != "closed" || rs[0].Err != nil {
		t.Fatalf("recovery of a sandbox whose workspace another user made: %+v", rs)
	}
	if p := recordPhase(t, h2, info.ID); p != record.Ended {
		t.Fatalf("after recovery: %s", p)
	}
	if _, ok, _ := volume.Of(ws); ok {
		t.Fatal("their image was mounted")
	}
}

// TestExecWindowRefusesTheSeventeenthBeforeEffects: a sandbox runs at
// most lifecycle.Slots execs at once; one more is refused as a limit
// before anything of it runs or is recorded, and a slot is free again
// once an exec ends.
func TestExecWindowRefusesTheSeventeenthBeforeEffects(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := h.sandbox(info.ID, "")
	release := make(chan struct{})
	errc := make(chan error, lifecycle.Slots)
	for range lifecycle.Slots {
		go func() {
			_, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sh", "-c", "read x"}, Stdin: readerUntil(release), Deadline: time.Minute})
			errc <- err
		}()
	}
	for i := 0; ; i++ {
		sb.mu.Lock()
		n := sb.running
		sb.mu.Unlock()
		if n == lifecycle.Slots {
			break
		}
		if i > 1000 {
			t.Fatalf("%d running", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var le *host.LimitError
	if _, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sh", "-c", "echo ran > seventeenth"}}); !errors.As(err, &le) {
		t.Fatalf("the seventeenth: %v", err)
	}
	close(release)
	for range lifecycle.Slots {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(h.RecordPath(info.ID))
	if st, err := record.VerifyBytes(b); err != nil || st.Executed != lifecycle.Slots {
		t.Fatalf("the record holds %d execs, want the %d that ran: %v", st.Executed, lifecycle.Slots, err)
	}
	if _, out := execIn(t, h, info.ID, "sh", "-c", "test -e seventeenth && echo ran || echo refused"); out != "refused\n" {
		t.Fatalf("the refused exec had an effect: %q", out)
	}
	if len(sb.window.Ops) != 0 {
		t.Fatalf("slots still held: %+v", sb.window.Ops)
	}
}

// readerUntil reads as one line once release is closed.
func readerUntil(release chan struct{}) io.Reader {
	r, w := io.Pipe()
	go func() {
		<-release
		w.Write([]byte("go\n"))
		w.Close()
	}()
	return r
}
