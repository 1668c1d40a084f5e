package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Unit is what a Progress counts.
type Unit int

const (
	Bytes Unit = iota // shown as KiB, MiB, …
	Items             // shown as a count, with its noun
)

// Progress shows how far a long piece of work is, on a terminal: what is
// done of the total (when it is known), the rate since it began and an
// estimate of the time left, on one line redrawn at most every
// ProgressEvery. On anything else (a pipe, a file) it shows nothing,
// and a command that prints JSON does not make one: the progress of a
// command is for a person watching it. A nil *Progress does nothing, so
// callers need not ask.
type Progress struct {
	w     io.Writer
	label string
	unit  Unit
	noun  string // for Items: "items", "layers", …
	now   func() time.Time

	mu    sync.Mutex
	total int64 // 0: not known
	done  int64
	start time.Time
	drawn time.Time // when the line was last drawn
	width int       // of the last line drawn, to blank what it leaves
	ended bool
}

// ProgressEvery is how often the line is redrawn at most.
const ProgressEvery = 200 * time.Millisecond

// ProgressSettle is how long work runs before a rate and an estimate are
// shown: one from its first milliseconds says little.
const ProgressSettle = 500 * time.Millisecond

// NewProgress is a Progress drawn on w when w is a terminal, else nil.
// label names the work ("export sb-…"); noun names an item (for Items).
func NewProgress(w io.Writer, label string, unit Unit, noun string, total int64) *Progress {
	f, ok := w.(*os.File)
	if !ok || !IsTerminal(f) {
		return nil
	}
	return newProgress(w, label, unit, noun, total, time.Now)
}

func newProgress(w io.Writer, label string, unit Unit, noun string, total int64, now func() time.Time) *Progress {
	return &Progress{w: w, label: label, unit: unit, noun: noun, total: total, now: now, start: now()}
}

// SetTotal says how much there is in all (0: not known).
func (p *Progress) SetTotal(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

// Set says how much is done.
func (p *Progress) Set(done int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	p.maybeDraw()
}

// Add says n more are done.
func (p *Progress) Add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.maybeDraw()
}

func (p *Progress) maybeDraw() {
	if p.ended {
		return
	}
	if t := p.now(); p.drawn.IsZero() || t.Sub(p.drawn) >= ProgressEvery {
		p.draw(t, false)
	}
}

// Done draws the last line, as it ended, and ends it.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.draw(p.now(), true)
		p.ended = true
	}
}

// Reader counts what is read through r.
func (p *Progress) Reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &counting{r: r, p: p}
}

// Writer counts what is written through w.
func (p *Progress) Writer(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return &counting{w: w, p: p}
}

type counting struct {
	r io.Reader
	w io.Writer
	p *Progress
}

func (c *counting) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.Add(int64(n))
	return n, err
}

func (c *counting) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.Add(int64(n))
	return n, err
}

// draw writes the line: "sandbox: LABEL DONE of TOTAL [NOUN] (P%), RATE, T left".
func (p *Progress) draw(t time.Time, last bool) {
	p.drawn = t
	line := "sandbox: " + p.label + " " + p.Line(t, last)
	pad := ""
	if len(line) < p.width {
		pad = strings.Repeat(" ", p.width-len(line))
	}
	p.width = len(line)
	end := ""
	if last {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}

// Line is the progress as words, at t (the caller holds p.mu).
func (p *Progress) Line(t time.Time, last bool) string {
	el := t.Sub(p.start)
	var b strings.Builder
	b.WriteString(p.amount(p.done))
	if p.total > 0 {
		b.WriteString(" of " + p.amount(p.total))
	}
	if p.unit == Items {
		b.WriteString(" " + p.noun)
	}
	if p.total > 0 {
		fmt.Fprintf(&b, " (%d%%)", min(100, p.done*100/p.total))
	}
	secs := el.Seconds()
	if (last || el >= ProgressSettle) && secs > 0 && p.done > 0 {
		rate := float64(p.done) / secs
		if p.unit == Bytes {
			fmt.Fprintf(&b, ", %s/s", IBytes(uint64(rate)))
		} else {
			fmt.Fprintf(&b, ", %.1f/s", rate)
		}
		if !last && p.total > p.done {
			left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
			fmt.Fprintf(&b, ", %s left", roundLeft(left))
		}
	}
	if last {
		fmt.Fprintf(&b, ", %s", roundLeft(el))
	}
	return b.String()
}

func (p *Progress) amount(n int64) string {
	if p.unit == Bytes {
		return IBytes(uint64(max(n, 0)))
	}
	return fmt.Sprint(n)
}

// iecUnits are IBytes's units, by power of 1024.
var iecUnits = [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// IBytes is n bytes for a person, in powers of 1024 with two or three
// significant digits: "9 B", "1.5 KiB", "15 MiB", "300 GiB". It is
// go-humanize's IBytes (v1.1.0: the tests hold the two equal), whose
// package compiles a regular expression and builds tables of big
// integers before main, in every program that links it.
func IBytes(n uint64) string {
	if n < 10 {
		return strconv.FormatUint(n, 10) + " B"
	}
	// The same floating-point steps as go-humanize, so that the same
	// values round the same way.
	e := math.Floor(math.Log(float64(n)) / math.Log(1024))
	v := float64(n) / math.Pow(1024, e)
	whole := digits(int64(v))
	places := max(2-whole, 0)
	r := math.Pow10(places)
	v = math.Floor(v*r+0.5) / r
	if d := digits(int64(v)); d > whole { // 9.96 became 10.0: one place fewer
		places = max(places-(d-whole), 0)
	}
	return strconv.FormatFloat(v, 'f', places, 64) + " " + iecUnits[int(e)]
}

// digits is the number of decimal digits of n > 0 (0 for 0).
func digits(n int64) int {
	d := 0
	for ; n != 0; n /= 10 {
		d++
	}
	return d
}

// roundLeft rounds a duration for a person: to the second, or to the
// tenth below ten seconds.
func roundLeft(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
