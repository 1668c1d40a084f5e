package native

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
)

// TestDeadSessionCloses: a live sandbox whose init was killed says so
// (Alive, any number of times), refuses an exec, and still closes at
// once: looking at it does not take init's exit from Close.
func TestDeadSessionCloses(t *testing.T) {
	e := testExecutor(t)
	s, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	s.p.cmd.Process.Kill()
	for i := 0; s.Alive(); i++ {
		if i > 500 {
			t.Fatal("still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		if s.Alive() {
			t.Fatal("alive again")
		}
	}
	if _, err := s.Run(context.Background(), &executor.Job{Unit: unit.Unit{Entry: "/bin/true"}}); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("an exec in a dead sandbox: %v", err)
	}
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a dead init")
	}
}
