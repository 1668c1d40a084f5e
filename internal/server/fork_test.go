package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/live"
)

// The client's bound on a fork is the service's.
func TestForkBoundIsTheServices(t *testing.T) {
	if client.MaxFork != live.MaxFork {
		t.Fatalf("client.MaxFork %d, live.MaxFork %d", client.MaxFork, live.MaxFork)
	}
}

// POST /v1/sandboxes/{id}/fork: a live sandbox forked into two through
// the API; each child is the caller's sandbox, with the parent's
// workspace, its record citing the parent's; the parent runs on.
func TestServiceFork(t *testing.T) {
	_, _, c := serve(t)
	ctx := context.Background()
	p, err := c.Create(ctx, client.SandboxSpec{Tier: "S2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, p.ID, p.Workspace+"/f", strings.NewReader("from the parent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := c.Records(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %+v %v", recs, err)
	}
	f, err := c.Fork(ctx, p.ID, client.ForkSpec{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if f.Parent != p.ID || f.Head != recs[0].Head || f.Snapshot.Root == "" || len(f.Children) != 2 {
		t.Fatalf("%+v; the parent's record was at %s", f, recs[0].Head)
	}
	for _, ch := range f.Children {
		if ch.Error != nil || ch.Sandbox == nil || ch.Sandbox.ID != ch.ID || ch.Sandbox.State != "live" {
			t.Fatalf("child %+v (%+v)", ch, ch.Error)
		}
		var b bytes.Buffer
		if _, err := c.Download(ctx, ch.ID, ch.Sandbox.Workspace+"/f", &b); err != nil || b.String() != "from the parent\n" {
			t.Fatalf("child %s's workspace: %q %v", ch.ID, b.String(), err)
		}
		if _, err := c.Get(ctx, ch.ID); err != nil {
			t.Fatalf("child %s: %v", ch.ID, err)
		}
	}
	if l, err := c.List(ctx); err != nil || len(l) != 3 {
		t.Fatalf("list after the fork: %d %v", len(l), err)
	}
	if _, err := c.Upload(ctx, p.ID, p.Workspace+"/g", strings.NewReader("on"), 0o644); err != nil {
		t.Fatalf("the parent after its fork: %v", err)
	}
	// Suspended children: records only, each resumed when asked.
	f, err = c.Fork(ctx, p.ID, client.ForkSpec{Count: 1, Suspended: true})
	if err != nil || len(f.Children) != 1 || f.Children[0].Sandbox == nil || f.Children[0].Sandbox.State != "suspended" {
		t.Fatalf("a suspended fork: %+v %v", f, err)
	}
	sb, err := c.Resume(ctx, f.Children[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := c.Download(ctx, sb.ID, sb.Workspace+"/g", &b); err != nil || b.String() != "on" {
		t.Fatalf("the suspended child, resumed: %q %v", b.String(), err)
	}
}
