package native

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
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

// TestPumpKeepsLastWords: what a program wrote before it ended is in its
// pipe when the host stops the pump (the exec's end came through init
// after the write), and is the caller's even when the pump had not read
// yet and the drain time is already past (a busy machine): only what
// comes after is discarded. It was lost: an exec of echo through a
// loaded service returned no output, and its record none either.
func TestPumpKeepsLastWords(t *testing.T) {
	// One P: the pump's goroutine does not read before stop has set its
	// deadline, as on a machine too busy to run it in time.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range 20 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("last words\n")); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		p := newPump(r, &out)
		p.stop(0)
		if out.String() != "last words\n" {
			t.Fatalf("the pump stopped with %q, want the program's last words", out.String())
		}
		// What comes after the stop is read and discarded, never
		// blocking its writer.
		if _, err := w.Write(bytes.Repeat([]byte("x"), 256<<10)); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if out.String() != "last words\n" {
			t.Fatalf("after the stop the caller got %d bytes more", out.Len()-len("last words\n"))
		}
	}
}
