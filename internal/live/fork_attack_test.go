package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// attackShared is a cluster as a host's manager sees it (Shared): it
// remembers what it was told, and says, for the ids in gone, what the
// cluster says of a sandbox another host took and closed since.
type attackShared struct {
	mu    sync.Mutex
	made  map[string]string // id: the owner the cluster was told
	gone  map[string]bool
	taken []string
}

func newAttackShared() *attackShared {
	return &attackShared{made: map[string]string{}, gone: map[string]bool{}}
}

func (s *attackShared) Publish(ctx context.Context, id, owner string, head addr.Addr, bundle []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.made[id]; !ok {
		s.made[id] = owner
	}
	return nil
}

func (s *attackShared) Take(ctx context.Context, id, owner string) ([]byte, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken = append(s.taken, id)
	if s.gone[id] {
		// As clusterShared.Take says cluster.ErrClosed.
		return nil, nil, fmt.Errorf("%w: cluster: sandbox %s, on host other: the sandbox was closed", ErrNoSandbox, id)
	}
	return nil, func() {}, nil
}

func (s *attackShared) Trust(ctx context.Context) (key.Trust, error) { return key.Trust{}, nil }

func (s *attackShared) Made(ctx context.Context, id string, t tier.Tier, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made[id] = owner
	return nil
}

func (s *attackShared) Closed(ctx context.Context, id string) error { return nil }

func (s *attackShared) Claimed(ctx context.Context, id, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made[id] = owner
	return nil
}

// TestAttackForkOfSandboxClosedElsewhere: in a cluster, a sandbox
// suspended on this host was since taken by another host (resumed
// there, written to, closed). This host still has the record it
// suspended, parked, and the note beside it. A resumption here asks the
// cluster first (take) and is refused: the run was closed; so is a fork,
// which takes its state from the cluster as a resumption does (found by
// an attacker's review: it made a child from the stale suspension).
func TestAttackForkOfSandboxClosedElsewhere(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	sh := newAttackShared()
	h.Join(sh, nil)
	ctx := context.Background()
	p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Workspace, "f"), []byte("as suspended here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Suspend(ctx, p.ID, ""); err != nil {
		t.Fatal(err)
	}
	// Another host takes it, runs it on and closes it.
	sh.mu.Lock()
	sh.gone[p.ID] = true
	sh.mu.Unlock()

	if _, err := h.Resume(ctx, p.ID, ""); err == nil {
		t.Fatal("a sandbox the cluster says was closed was resumed here")
	}
	out, err := h.Fork(ctx, p.ID, "", ForkSpec{Count: 1})
	if err != nil {
		t.Logf("the fork was refused: %v", err)
		return
	}
	c := out.Children[0]
	t.Errorf("forked a sandbox the cluster says was closed on another host (resume refuses it): child %s (err %v) from the stale suspension at %s; the cluster was never asked (takes: %v)", c.ID, c.Err, out.Head, sh.taken)
}

// TestAttackClaimedPoolSandboxOwnerNotShared: a sandbox made for a warm
// pool is the pool's in the cluster until it is claimed; the claim tells
// the cluster it is the claimer's, so the claimer's list on any host has
// it, and the claimer may take it (found by an attacker's review: the
// cluster kept it the pool's).
func TestAttackClaimedPoolSandboxOwnerNotShared(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	sh := newAttackShared()
	h.Join(sh, nil)
	ctx := context.Background()
	readyPool(t, h)
	const claimer = "token:0123456789abcdef"
	info, err := h.Claim(ctx, "p", claimer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Sandbox(info.ID, claimer); err != nil {
		t.Fatalf("the claimer's here: %v", err)
	}
	sh.mu.Lock()
	told, ok := sh.made[info.ID]
	sh.mu.Unlock()
	if !ok {
		t.Skipf("the cluster was never told of pool sandbox %s", info.ID)
	}
	if told != claimer {
		t.Errorf("claimed sandbox %s is %s's here; the cluster keeps it as %q's, so the claimer's ps on any other host does not list it", info.ID, claimer, told)
	}
}

// TestAttackForkRemoveRace: a fork of a live sandbox and a removal of
// it, at once. The removal's teardown waits for the fork's capture (an
// attacker's review found it tearing the workspace down under the
// capture): whatever the interleaving, every child made resumes with the
// parent's whole workspace, or the fork says it made none.
func TestAttackForkRemoveRace(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	for round := 0; round < 6; round++ {
		p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
		if err != nil {
			t.Fatal(err)
		}
		const files = 400
		for i := range files {
			if err := os.WriteFile(filepath.Join(p.Workspace, fmt.Sprintf("f%04d", i)), []byte(fmt.Sprintf("content %d of %s", i, p.ID)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var out Forked
		var ferr, rerr error
		wg.Add(2)
		go func() { defer wg.Done(); out, ferr = h.Fork(ctx, p.ID, "", ForkSpec{Count: 1, Suspended: true}) }()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(round) * 2 * time.Millisecond)
			rerr = h.Remove(p.ID, "")
		}()
		wg.Wait()
		t.Logf("round %d: fork %v, removal %v", round, ferr, rerr)
		if ferr != nil {
			continue // refused whole: fine
		}
		for _, c := range out.Children {
			if c.Err != nil {
				continue
			}
			tr, err := h.Resume(ctx, c.ID, "")
			if err != nil {
				t.Errorf("round %d: child %s of a fork that raced a removal (%v) does not resume: %v", round, c.ID, rerr, err)
				continue
			}
			ents, _ := os.ReadDir(tr.Workspace)
			if len(ents) != files {
				t.Errorf("round %d: child %s of a fork that raced a removal (%v) has %d of the parent's %d files: made from a workspace being torn down", round, c.ID, rerr, len(ents), files)
			}
			h.Remove(c.ID, "")
		}
	}
}

// TestAttackForkChildNotAnotherOwners: a fork by the sandbox's owner
// makes children that are the owner's alone: another principal neither
// lists, resumes, forks, execs in nor closes one; and a fork of a
// suspended sandbox by another principal is no sandbox of theirs.
func TestAttackForkChildNotAnotherOwners(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	const owner, other = "token:00000000000000aa", "token:00000000000000bb"
	p, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Suspend(ctx, p.ID, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fork(ctx, p.ID, other, ForkSpec{Count: 1}); errs.Of(err) != errs.NotFound {
		t.Fatalf("another principal forks a suspended sandbox: %v", err)
	}
	out, err := h.Fork(ctx, p.ID, owner, ForkSpec{Count: 2, Suspended: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range h.Suspended(other) {
		t.Errorf("another principal lists %s", l.ID)
	}
	for _, c := range out.Children {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
		if _, err := h.Resume(ctx, c.ID, other); err == nil {
			t.Errorf("another principal resumed child %s", c.ID)
		}
		if _, err := h.Fork(ctx, c.ID, other, ForkSpec{Count: 1}); err == nil {
			t.Errorf("another principal forked child %s", c.ID)
		}
		if err := h.CloseRecord(c.ID, other, "x"); err == nil {
			t.Errorf("another principal closed child %s", c.ID)
		}
		if _, st, _ := h.readRecord(c.ID); st.Phase != record.Parked {
			t.Errorf("child %s is %s", c.ID, st.Phase)
		}
	}
	in, err := h.Resume(ctx, out.Children[0].ID, owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(ctx, in.ID, other, ExecRequest{Args: []string{"true"}}); !errors.Is(err, ErrNoSandbox) {
		t.Errorf("another principal execs in a live child: %v", err)
	}
	if l := h.Sandboxes(other); len(l) != 0 {
		t.Errorf("another principal lists %d live sandboxes", len(l))
	}
}
