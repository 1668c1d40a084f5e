package live

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/internal/volume/volumetest"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// forkedSegment is the Forked segment of child id's record, and the
// record's entries.
func forkedSegment(t *testing.T, h *Manager, id string) (record.Segment, [][]byte) {
	t.Helper()
	entries, st, err := h.readRecord(id)
	if err != nil {
		t.Fatalf("%s's record: %v", id, err)
	}
	if st.Segments < 1 {
		t.Fatalf("%s's record has no segment", id)
	}
	seg, err := record.ParseSegment(entries[1])
	if err != nil || seg.Kind != record.Forked {
		t.Fatalf("%s's first segment: %+v %v", id, seg, err)
	}
	return seg, entries
}

// A live S1 sandbox forked into three: each child is a sandbox of its
// own (its id, its workspace restored from the parent's state, its
// record beginning with a Forked segment that cites the parent's record
// and the head it had), the three share one snapshot by address, what
// one child writes no other sees, and the parent runs on, its
// background process and its record as they were.
func TestForkS1(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Env: map[string]string{"WHO": "parent"}})
	if err != nil {
		t.Fatal(err)
	}
	execIn(t, h, p.ID, "sh", "-c", "mkdir -p d && echo state > d/f && head -c 2500000 /dev/urandom > big && (sleep 303 &)")
	_, before, _ := h.readRecord(p.ID)
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if out.Head != before.Head || out.Genesis != record.Genesis(before.Header.Unit, before.Header.Grants) {
		t.Fatalf("the fork cites %s/%s; the parent's record is at %s", out.Genesis, out.Head, before.Head)
	}
	if len(out.Children) != 3 {
		t.Fatalf("%d children", len(out.Children))
	}
	parentRecord, err := os.ReadFile(h.RecordPath(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{p.ID: true}
	for i, c := range out.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		if seen[c.ID] || c.Sandbox.ID != c.ID || c.Sandbox.Suspended || c.Sandbox.Workspace == "" || c.Sandbox.Workspace == p.Workspace {
			t.Fatalf("child %d: %+v", i, c.Sandbox)
		}
		seen[c.ID] = true
		if _, got := execIn(t, h, c.ID, "sh", "-c", "cat d/f; echo $WHO; wc -c < big"); got != "state\nparent\n2500000\n" {
			t.Fatalf("child %d sees %q", i, got)
		}
		seg, entries := forkedSegment(t, h, c.ID)
		want := record.Parent{Record: p.ID, Genesis: out.Genesis, Head: out.Head}
		if *seg.Parent != want || !seg.Snapshot.Equal(out.Snapshot) {
			t.Fatalf("child %d's forked segment: %+v %+v; want %+v %+v", i, seg.Parent, seg.Snapshot, want, out.Snapshot)
		}
		if _, err := record.ForkedFrom(parentRecord, *seg.Parent); err != nil {
			t.Fatalf("child %d's parent does not hold: %v", i, err)
		}
		resumed, err := record.ParseSegment(entries[2])
		if err != nil || resumed.Kind != record.Resumed || !resumed.Snapshot.Equal(out.Snapshot) {
			t.Fatalf("child %d's second segment: %+v %v", i, resumed, err)
		}
	}
	ownWrites(t, h, p.ID, out)
	// The parent ran on: its background process, and nothing in its
	// record from the fork (the exec just now is the one segment since).
	if l := processesWith(t, "sleep 303"); len(l) == 0 {
		t.Fatal("the parent's background process did not survive the fork")
	}
	if _, st, _ := h.readRecord(p.ID); st.Segments != before.Segments+1 || st.Phase != record.Active {
		t.Fatalf("the parent's record: %d segments, %s; before the fork %d", st.Segments, st.Phase, before.Segments)
	}
	// Each child is its owner's as any sandbox is: listed, removed.
	if l := h.Sandboxes(""); len(l) != 4 {
		t.Fatalf("%d live sandboxes, want the parent and 3 children", len(l))
	}
	if err := h.Remove(out.Children[2].ID, ""); err != nil {
		t.Fatal(err)
	}
}

// ownWrites checks that what fork out's first child writes (d/f, which
// holds "state" in parent's state) is its own: neither its sibling nor
// the parent sees it.
func ownWrites(t *testing.T, h *Manager, parent string, out Forked) {
	t.Helper()
	a, b := out.Children[0].ID, out.Children[1].ID
	execIn(t, h, a, "sh", "-c", "echo mine > d/f")
	if _, got := execIn(t, h, b, "cat", "d/f"); got != "state\n" {
		t.Fatalf("a sibling sees %q", got)
	}
	if _, got := execIn(t, h, parent, "cat", "d/f"); got != "state\n" {
		t.Fatalf("the parent sees %q", got)
	}
}

// A fork refuses what it cannot fork with a clear error of the right
// category, and makes nothing: a count out of bounds, no such sandbox,
// another owner's, a closed one, one with an exec in flight.
func TestForkRefused(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	sb, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The host's own user sees its closed records; another owner's
	// closed sandbox is no sandbox this host knows of theirs.
	closed, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t), Owner: host.LocalOwner})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(closed.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id, owner string
		count           int
		cat             errs.Category
		says            string
	}{
		{"no children", sb.ID, "", 0, errs.Invalid, `field "count": 0: a fork makes 1 to 64 sandboxes`},
		{"too many", sb.ID, "", MaxFork + 1, errs.Invalid, `field "count": 65`},
		{"negative", sb.ID, "", -1, errs.Invalid, `field "count": -1`},
		{"no such sandbox", "sb-000000000000", "", 2, errs.NotFound, "no such sandbox"},
		{"another owner's", sb.ID, "token:0123456789abcdef", 2, errs.NotFound, "no such sandbox"},
		{"closed", closed.ID, host.LocalOwner, 2, errs.Invalid, "is closed: its run ended"},
		{"closed, another's", closed.ID, "token:0123456789abcdef", 2, errs.NotFound, "no such sandbox"},
	} {
		before := len(h.recordIDs())
		_, err := h.Fork(ctx, tc.id, tc.owner, ForkSpec{Count: tc.count})
		if err == nil || errs.Of(err) != tc.cat || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v (%s), want %s saying %q", tc.name, err, errs.Of(err), tc.cat, tc.says)
		}
		if after := len(h.recordIDs()); after != before {
			t.Errorf("%s: %d records made", tc.name, after-before)
		}
	}
	// An exec in flight: its state is not between execs.
	s, err := h.sandbox(sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.running++
	s.mu.Unlock()
	if _, err := h.Fork(ctx, sb.ID, "", ForkSpec{Count: 1}); errs.Of(err) != errs.Invalid || !strings.Contains(err.Error(), "exec(s) running") {
		t.Fatalf("with an exec in flight: %v", err)
	}
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	if ents, _ := os.ReadDir(h.forksDir()); len(ents) != 0 {
		t.Fatalf("refused forks left stages: %v", ents)
	}
}

// A suspended sandbox forks from its last snapshot and stays
// suspended; children asked for suspended are made parked at that
// snapshot (their records and nothing else), and each starts when it is
// resumed. Nothing is staged: the parent's record names the snapshot.
func TestForkSuspendedS2(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Workspace, "f"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := h.Suspend(ctx, p.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 2, Suspended: true})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Snapshot.Equal(snap) {
		t.Fatalf("forked from %+v, suspended at %+v", out.Snapshot, snap)
	}
	if l := h.Suspended(""); len(l) != 3 {
		t.Fatalf("%d suspended, want the parent and its 2 children: %+v", len(l), l)
	}
	for _, c := range out.Children {
		if c.Err != nil || !c.Sandbox.Suspended || c.Sandbox.Tier != tier.S2 {
			t.Fatalf("%+v", c)
		}
		in, err := h.Resume(ctx, c.ID, "")
		if err != nil {
			t.Fatalf("resume %s: %v", c.ID, err)
		}
		if b, err := os.ReadFile(filepath.Join(in.Workspace, "f")); err != nil || string(b) != "kept\n" {
			t.Fatalf("child %s's workspace: %q %v", c.ID, b, err)
		}
	}
	if _, st, _ := h.readRecord(p.ID); st.Phase != record.Parked {
		t.Fatalf("the parent is %s after the fork", st.Phase)
	}
	if _, err := h.Resume(ctx, p.ID, ""); err != nil {
		t.Fatalf("the parent, resumed after its fork: %v", err)
	}
}

// Partial success: where the host has room for one more live sandbox,
// a fork into three makes one and reports, for each of the others, why
// not; their records are closed saying so, and nothing of them runs.
func TestForkPartial(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	h.MaxLive(2)
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	made, refused := 0, 0
	for _, c := range out.Children {
		if c.Err == nil {
			made++
			continue
		}
		refused++
		if errs.Of(c.Err) != errs.Limit || !strings.Contains(c.Err.Error(), "at most 2 live sandboxes") {
			t.Fatalf("child %s: %v (%s)", c.ID, c.Err, errs.Of(c.Err))
		}
		if _, st, err := h.readRecord(c.ID); err != nil || st.Phase != record.Ended {
			t.Fatalf("child %s not made: its record is %s (%v)", c.ID, st.Phase, err)
		}
	}
	if made != 1 || refused != 2 || len(h.Sandboxes("")) != 2 {
		t.Fatalf("%d made, %d refused, %d live", made, refused, len(h.Sandboxes("")))
	}
}

// A fork that ends midway leaves nothing gc does not collect: what its
// capture staged is removed where no child was named, and moved into
// the store where one was (its record names it), after which the child
// resumes with the parent's state.
func TestForkStageCollected(t *testing.T) {
	t.Parallel()
	for _, named := range []bool{false, true} {
		h := newHost(t)
		dead, err := h.Store.Dir.Lease()
		if err != nil {
			t.Fatal(err)
		}
		h.Store.Lease = dead // the forking process's
		ws := t.TempDir()
		content := []byte("only the fork captured this " + t.Name())
		if err := os.WriteFile(filepath.Join(ws, "f"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := h.newStage()
		if err != nil {
			t.Fatal(err)
		}
		snap, _, _, err := h.captureIn(st, &Sandbox{ID: "sb-aaaaaaaaaaaa", Tier: tier.S2, Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		chunk := addr.Of(content)
		if h.Store.HasBlob(snap.Root) || h.Store.HasBlob(chunk) || !st.HasBlob(chunk) {
			t.Fatal("the capture was not staged")
		}
		child := newSandboxID()
		if named {
			if err := st.name([]string{child}); err != nil {
				t.Fatal(err)
			}
			u := DurableUnit{Sandbox: DurableUnitType, Tier: tier.S2, Workspace: true}
			g := grants(t)
			gb, ga, _ := g.Canonical()
			h.Store.PutBlob(ga, gb)
			src := forkSource{state: record.State{Header: record.Header{Record: record.Domain, Grants: ga}}, unit: u, grants: g, snap: snap}
			if err := h.beginFork(child, "", src, record.Parent{Record: "sb-aaaaaaaaaaaa", Genesis: snap.Root, Head: snap.Root}); err != nil {
				t.Fatal(err)
			}
		}
		// The forking process ends; another collects.
		dead.Close()
		live, err := h.Store.Dir.Lease()
		if err != nil {
			t.Fatal(err)
		}
		h.Store.Lease = live
		ls, err := h.GC(false)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range ls {
			if l.Path == st.dir {
				found = l.Err == nil
			}
		}
		if !found {
			t.Fatalf("named %v: gc did not collect the stage: %+v", named, ls)
		}
		if _, err := os.Stat(st.dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("named %v: the stage is left: %v", named, err)
		}
		if h.Store.HasBlob(chunk) != named || h.Store.HasBlob(snap.Root) != named {
			t.Fatalf("named %v: in the store: chunk %v, tree %v", named, h.Store.HasBlob(chunk), h.Store.HasBlob(snap.Root))
		}
		if named {
			in, err := h.Resume(context.Background(), child, "")
			if err != nil {
				t.Fatalf("the named child, resumed: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(in.Workspace, "f")); err != nil || string(b) != string(content) {
				t.Fatalf("the named child's workspace: %q %v", b, err)
			}
		}
		live.Close()
		h.Close()
	}
}

// Where the workspaces lie on a filesystem with reflinks (XFS here), a
// fork copies the parent's workspace volume once, sharing its extents,
// and makes each child's workspace a copy of that copy: the children
// hold the parent's state and write their own, and the filesystem under
// them loses about what the parent's capture stored, not a workspace a
// child. A copy that does not hold the snapshot's tree is not used.
func TestForkSharesTheWorkspaceImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes with their own cgroups need root")
	}
	xfs := volumetest.XFS(t, 2<<30)
	t.Setenv("TMPDIR", xfs) // the workspaces (and this test's state) on it
	h := newS1Host(t)
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	execIn(t, h, p.ID, "sh", "-c", "mkdir -p d && echo state > d/f && head -c 33554432 /dev/urandom > big")
	syscall.Sync()
	free := volumetest.Free(t, xfs)
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	// Copied file by file, three children and the capture's chunks would
	// take 4 x 32 MiB; shared, about the chunks' 32.
	if used := free - volumetest.Free(t, xfs); used > 64<<20 {
		t.Fatalf("a fork of a 32 MiB workspace into 3 took %d bytes of the filesystem: the children's workspaces were not shared", used)
	}
	for i, c := range out.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		if _, ok, _ := volume.Of(c.Sandbox.Workspace); !ok {
			t.Fatalf("child %d's workspace is not a volume", i)
		}
		if _, got := execIn(t, h, c.ID, "sh", "-c", "cat d/f; wc -c < big"); got != "state\n33554432\n" {
			t.Fatalf("child %d sees %q", i, got)
		}
	}
	ownWrites(t, h, p.ID, out)
	a := out.Children[0].ID
	// What a tree does not hold (a second name of a file, a FIFO,
	// extended attributes) is not in the parent's snapshot: a child of it
	// has none of it, as one restored from the chunks would not.
	for _, c := range []struct{ what, make, check, want string }{
		{"a hard link", "ln d/f d/g", "stat -c %h d/f", "1\n"},
		{"an extended attribute", "rm d/g; python3 -c 'import os; os.setxattr(\"d/f\", \"user.hidden\", b\"not in the record\")'", "python3 -c 'import os; print(os.listxattr(\"d/f\"))'", "[]\n"},
		{"a set-id bit", "python3 -c 'import os; os.removexattr(\"d/f\", \"user.hidden\")'; chmod u+s d/f", "stat -c %a d/f", "644\n"},
		{"a FIFO", "chmod u-s d/f; mkfifo pipe", "ls", "big\nd\n"},
	} {
		execIn(t, h, p.ID, "sh", "-c", c.make)
		more, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 1})
		if err != nil || more.Children[0].Err != nil {
			t.Fatalf("a fork of a workspace with %s: %v %+v", c.what, err, more.Children)
		}
		if _, got := execIn(t, h, more.Children[0].ID, "sh", "-c", c.check); got != c.want {
			t.Fatalf("the child of a workspace holding %s sees %q, want %q", c.what, got, c.want)
		}
		h.Remove(more.Children[0].ID, "")
	}
	// A child suspended and resumed holds what it wrote: its workspace's
	// capture reads its copy as any workspace.
	if _, err := h.Suspend(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Resume(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if _, got := execIn(t, h, a, "cat", "d/f"); got != "mine\n" {
		t.Fatalf("the child after its resumption sees %q", got)
	}

	// A copy whose tree is not the snapshot's is removed, not used.
	sb, err := h.sandbox(p.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	img, dir := h.snapshotWorkspace(sb)
	if img == "" {
		t.Fatal("no copy of the parent's workspace volume on XFS")
	}
	defer os.RemoveAll(dir)
	before, _ := filepath.Glob(filepath.Join(xfs, "sandbox-ws-*"))
	ws, err := h.makeWorkspaceFrom("sb-000000000000", forkImage{root: addr.Of([]byte("another tree")), path: img, known: h.known(p.ID)}, sb.Limits.WorkspaceBytes)
	if err == nil || ws != "" || !strings.Contains(err.Error(), "not the fork's snapshot") {
		t.Fatalf("a copy of another tree: %q, %v", ws, err)
	}
	if after, _ := filepath.Glob(filepath.Join(xfs, "sandbox-ws-*")); len(after) != len(before) {
		t.Fatalf("the refused copy was left: %v, before %v", after, before)
	}
}

// Where the system's temporary directory has no reflinks (ext4 here), a
// manager given a pool (UsePool, as sandbox serve --workspace-pool makes
// one) makes its workspaces in it, and a fork shares the parent's
// workspace image there as it does on XFS: the pool's image, on the
// filesystem under it, grows by little more than metadata, and the
// children hold the parent's state and write their own; an unbounded
// workspace stays out of it. What a killed fork left in the pool is
// collected by gc.
func TestForkSharesTheWorkspaceImageInAPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes with their own cgroups need root")
	}
	if volume.Reflinks(os.TempDir()) == nil {
		t.Skip("the temporary directory shares extents itself: no pool is made")
	}
	base := t.TempDir()
	volumetest.Private(t, base)
	pool := filepath.Join(base, "pool")
	if err := volume.Pool(pool, 2<<30); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releasePool(t, pool) })
	h := newS1Host(t) // closed before the pool is released
	if dir, err := h.UsePool(pool, 0); err != nil || dir != pool {
		t.Fatalf("UsePool: %q %v", dir, err)
	}
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p.Workspace) != pool {
		t.Fatalf("the workspace %s is not in the pool %s", p.Workspace, pool)
	}
	execIn(t, h, p.ID, "sh", "-c", "mkdir -p d && echo state > d/f && head -c 33554432 /dev/urandom > big")
	// An unbounded workspace is no volume to share: it stays out of the
	// pool, where it could fill what the volumes share.
	h.WorkspaceMax = -1
	u, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	h.WorkspaceMax = 0
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(u.Workspace) != os.TempDir() {
		t.Fatalf("an unbounded workspace made in %s", u.Workspace)
	}
	h.Remove(u.ID, "")
	onDisk := func() int64 {
		syscall.Sync()
		var st syscall.Stat_t
		if err := syscall.Stat(volume.Image(pool), &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := onDisk()
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Copied, three children would take 3 x 32 MiB of the pool.
	if grew := onDisk() - before; grew > 24<<20 {
		t.Fatalf("a fork of a 32 MiB workspace into 3 grew the pool's image by %d bytes: not shared", grew)
	}
	for i, c := range out.Children {
		if c.Err != nil {
			t.Fatalf("child %d: %v", i, c.Err)
		}
		if filepath.Dir(c.Sandbox.Workspace) != pool {
			t.Fatalf("child %d's workspace %s is not in the pool", i, c.Sandbox.Workspace)
		}
		if _, got := execIn(t, h, c.ID, "sh", "-c", "cat d/f; wc -c < big"); got != "state\n33554432\n" {
			t.Fatalf("child %d sees %q", i, got)
		}
	}
	ownWrites(t, h, p.ID, out)

	const id = "0f0e0d0c0b0a0907" // a killed fork's process
	left := filepath.Join(pool, "sandbox-fork-"+id+"-1")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(left, "workspace.img"), []byte("x"), 0o600)
	collectedOnce(t, h, id, left)
}

// releasePool releases the test's pool (volume.ReleasePool), once
// nothing holds it.
func releasePool(t testing.TB, pool string) {
	if err := volumetest.WhileBusy(func() error { return volume.ReleasePool(pool) }); err != nil {
		t.Error(err)
		syscall.Unmount(pool, syscall.MNT_DETACH)
	}
}

// sandbox gc, which is given no pool, finds the host's pool where a
// service makes it (volume.PoolDir), mounts it again where a restart
// left it unmounted (a dry run does not), and collects what a killed
// process left in it.
func TestGCFindsTheHostsPool(t *testing.T) {
	if err := volume.Probe(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	volumetest.Private(t, tmp) // its unmount below, a restart's, never busy for a copy elsewhere
	t.Setenv("TMPDIR", tmp)
	pool := volume.PoolDir()
	if err := volume.Pool(pool, 1<<30); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releasePool(t, pool) })
	h := newHost(t)
	const id = "0f0e0d0c0b0a0906" // a killed process's lease
	left := filepath.Join(pool, "sandbox-fork-"+id+"-1")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := volumetest.WhileBusy(func() error { return syscall.Unmount(pool, 0) }); err != nil { // a restart
		t.Fatal(err)
	}
	// A dry run (doctor, gc -n) mounts nothing.
	if _, err := h.GC(true); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := volume.Of(pool); ok {
		t.Fatal("a dry run of gc mounted the pool")
	}
	collectedOnce(t, h, id, left)
}

// killedLease leaves lease id's file in h's state directory, unlocked,
// as a process killed while it held the lease leaves it.
func killedLease(t *testing.T, h *Manager, id string) {
	t.Helper()
	os.MkdirAll(h.Store.Dir.Path("leases"), 0o700)
	if err := os.WriteFile(h.Store.Dir.Path("leases", id+".lock"), []byte("pid 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// collectedOnce: once the process whose lease is id was killed (its
// lease's file left, unlocked), gc removes left, what it left, and says
// so.
func collectedOnce(t *testing.T, h *Manager, id, left string) {
	t.Helper()
	killedLease(t, h, id)
	ls, err := h.GC(false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range ls {
		found = found || l.Path == left && l.Err == nil
	}
	if _, err := os.Stat(left); !found || !os.IsNotExist(err) {
		t.Fatalf("what a killed process left, %s: collected %v, still there: %v (%+v)", left, found, err, ls)
	}
}

// The copy of a workspace volume that a fork's process left when it was
// killed (between its copy and its children), and the bundle a killed
// collector of a cluster's blob store staged, are removed by gc, as
// anything beside the workspaces named by a dead lease of this state
// directory; ones named by a lease this state directory does not know
// (of another's) are left alone.
func TestForkCopyCollected(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	const id = "0f0e0d0c0b0a0908" // the killed process's lease
	left := map[string]string{    // directory → the kind gc names it by
		filepath.Join(os.TempDir(), "sandbox-fork-"+id+"-1"):    "fork's copy",
		filepath.Join(os.TempDir(), "sandbox-collect-"+id+"-2"): "collection of the cluster's blob store",
	}
	for dir := range left {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "workspace.img"), []byte("an image"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.GC(false); err != nil {
		t.Fatal(err)
	}
	for dir := range left {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("gc removed %s, named by a lease it does not know: %v", dir, err)
		}
	}
	killedLease(t, h, id)
	ls, err := h.GC(false)
	if err != nil {
		t.Fatal(err)
	}
	for dir, kind := range left {
		found := false
		for _, l := range ls {
			found = found || l.Path == dir && l.Err == nil && strings.Contains(l.Kind, kind)
		}
		if _, err := os.Stat(dir); !found || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("gc did not collect %s (%v): %+v", dir, err, ls)
		}
	}
}
