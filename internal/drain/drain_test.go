package drain

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestNow: what the pipe holds is taken whole, in pieces, without
// waiting for more; an empty pipe returns at once; an ended one too.
func TestNow(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := bytes.Repeat([]byte("0123456789"), 5000)
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		Now(r, make([]byte, 4096), func(b []byte) { got.Write(b) })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a bound, not a measure: it must not wait for the writer
		t.Fatal("Now waited on a pipe whose writer is still open")
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("took %d bytes of %d", got.Len(), len(want))
	}
	w.Close()
	Now(r, make([]byte, 16), func(b []byte) { t.Fatalf("an ended pipe gave %q", b) })
}

// TestNowStopsAtCapacity: a writer that never stops (a process a program
// left behind) cannot keep Now reading: it takes at most the pipe's
// capacity.
func TestNowStopsAtCapacity(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		b := make([]byte, 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.Write(b)
		}
	}()
	n := 0
	Now(r, make([]byte, 4096), func(b []byte) { n += len(b) })
	if n > 1<<20 {
		t.Fatalf("took %d bytes from an endless writer", n)
	}
}
