package cli

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
)

// TestProgressLine: what a person reads, for bytes and for items, with a
// total and without; redrawn at most every ProgressEvery, the last line
// ended with a newline and the time it took; a shorter line blanks what
// the longer one before it left.
func TestProgressLine(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	tests := []struct {
		name        string
		unit        Unit
		noun        string
		total, done int64
		after       time.Duration
		last        bool
		want        string
	}{
		{"bytes of a total", Bytes, "", 4 << 30, 1 << 30, 10 * time.Second, false, "1.0 GiB of 4.0 GiB (25%), 102 MiB/s, 30s left"},
		{"bytes, no total", Bytes, "", 0, 300 << 20, 2 * time.Second, false, "300 MiB, 150 MiB/s"},
		{"items of a total", Items, "items", 200, 50, 5 * time.Second, false, "50 of 200 items (25%), 10.0/s, 15s left"},
		{"items, no total", Items, "layers", 0, 3, time.Second, false, "3 layers, 3.0/s"},
		{"ended", Items, "items", 200, 200, 20 * time.Second, true, "200 of 200 items (100%), 10.0/s, 20s"},
		{"nothing yet", Bytes, "", 100, 0, 0, false, "0 B of 100 B (0%)"},
		{"too soon for a rate", Bytes, "", 100, 1, ProgressSettle - time.Millisecond, false, "1 B of 100 B (1%)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProgress(io.Discard, "x", tc.unit, tc.noun, tc.total, now)
			p.done = tc.done
			if got := p.Line(clock.Add(tc.after), tc.last); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}

	var out bytes.Buffer
	p := newProgress(&out, "import", Bytes, "", 1000, now)
	p.Add(10) // drawn: the first
	p.Add(10) // not: too soon
	clock = clock.Add(ProgressEvery)
	p.Add(980)
	p.Done()
	p.Add(5) // after the end: nothing
	lines := strings.Split(out.String(), "\r")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "sandbox: import 10 B of 1000 B (1%)") || !strings.HasSuffix(out.String(), "\n") ||
		!strings.Contains(lines[3], "1000 B of 1000 B (100%)") {
		t.Fatalf("drawn: %q", out.String())
	}
	if len(lines[3]) < len(lines[2])-1 { // the last line blanks the longer one before it
		t.Fatalf("not padded: %q", out.String())
	}
}

// TestNoProgressOffATerminal: on a pipe or a file nothing is drawn, and
// the nil Progress it is does nothing and passes readers and writers
// through.
func TestNoProgressOffATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, out := range []io.Writer{w, &bytes.Buffer{}} {
		p := NewProgress(out, "x", Bytes, "", 10)
		if p != nil {
			t.Fatalf("a progress on %T", out)
		}
		p.Add(1)
		p.Set(2)
		p.SetTotal(3)
		p.Done()
		src := strings.NewReader("abc")
		if p.Reader(src) != io.Reader(src) {
			t.Fatal("the reader was wrapped")
		}
	}
}

// TestIBytesIsHumanizes: IBytes gives what go-humanize's IBytes gives
// (which it replaced, for the thin program's start), around every power
// of 1024 and where rounding carries into another digit.
func TestIBytesIsHumanizes(t *testing.T) {
	var ns []uint64
	for e := range 7 {
		p := uint64(1) << (10 * e)
		for _, f := range []float64{1, 1.5, 9.94, 9.95, 9.96, 9.99, 10, 99.4, 99.5, 99.6, 100, 999.5, 1000, 1023, 1023.4, 1023.5, 1023.9} {
			if c := f * float64(p); c < 1<<64 {
				n := uint64(c)
				for d := uint64(0); d < 3; d++ {
					ns = append(ns, n+d, n-min(n, d))
				}
			}
		}
	}
	ns = append(ns, 0, 9, 10, 11, 1<<64-1, 1<<63, 1<<62)
	for _, n := range ns {
		if got, want := IBytes(n), humanize.IBytes(n); got != want {
			t.Errorf("IBytes(%d) = %q, go-humanize %q", n, got, want)
		}
	}
}

func FuzzIBytes(f *testing.F) {
	for _, n := range []uint64{0, 9, 10, 1023, 1024, 10188, 1 << 20, 1<<64 - 1} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n uint64) {
		if got, want := IBytes(n), humanize.IBytes(n); got != want {
			t.Errorf("IBytes(%d) = %q, go-humanize %q", n, got, want)
		}
	})
}
