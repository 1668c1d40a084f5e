package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/reject"
)

// Domain is the genesis tag of the hash chain.
const Domain = "sandbox.journal/1"

// Genesis returns head_0.
func Genesis() addr.Addr { return addr.Of([]byte(Domain)) }

// Entry is one recorded input.
type Entry struct {
	Kind string          `cbor:"k"`
	Req  cbor.RawMessage `cbor:"q"`
	Resp cbor.RawMessage `cbor:"r"`
}

func next(head addr.Addr, entry []byte) addr.Addr {
	h := blake3.New()
	h.Write(head[:])
	h.Write(entry)
	var out addr.Addr
	h.Sum(out[:0])
	return out
}

// Writer accumulates a journal in memory and streams it to w.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	head  addr.Addr
	n     int
	bytes int64
	err   error
}

// NewWriter returns a Writer that appends entries to w (which may be nil
// to keep only the root).
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, head: Genesis()} }

// Append records one entry; req and resp are encoded deterministically.
// A failed write to w (a full disk) does not stop the journal: entries
// are still chained, so the root is the one the run's record would have,
// nothing more is written, and Err reports the failure (the run is then
// not sealed). The guest is never refused an input because its record
// could not be kept. Append's own error is for entries that cannot be
// encoded.
func (j *Writer) Append(kind string, req, resp any) error {
	q, err := detcbor.Marshal(req)
	if err != nil {
		return err
	}
	r, err := detcbor.Marshal(resp)
	if err != nil {
		return err
	}
	return j.AppendEntry(Entry{Kind: kind, Req: q, Resp: r})
}

// AppendEntry records an entry as it was parsed (a continued run's
// journal starts with its parked part's entries).
func (j *Writer) AppendEntry(entry Entry) error {
	e, err := detcbor.Marshal(entry)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w != nil && j.err == nil {
		if _, err := j.w.Write(e); err != nil {
			j.err = fmt.Errorf("journal: %w", err)
		}
	}
	j.head = next(j.head, e)
	j.n++
	j.bytes += int64(len(e))
	return nil
}

// Root returns the current head of the chain.
func (j *Writer) Root() addr.Addr {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.head
}

// Len returns the number of entries and their total size in bytes.
func (j *Writer) Len() (int, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n, j.bytes
}

// Err returns the first write error, if any.
func (j *Writer) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Parse splits a journal file into entries and computes its root. Every
// entry must be core-deterministic CBOR with exactly the three fields.
// Errors are *reject.Error naming the entry.
func Parse(b []byte) ([]Entry, addr.Addr, error) {
	head := Genesis()
	var out []Entry
	for off, n := 0, 0; off < len(b); n++ {
		end, err := itemEnd(b, off)
		if err != nil {
			return nil, addr.Addr{}, reject.In(fmt.Sprintf("journal entry %d (offset %d)", n, off), err)
		}
		raw := b[off:end]
		var e Entry
		if err := detcbor.Unmarshal(raw, &e); err != nil {
			return nil, addr.Addr{}, reject.In(fmt.Sprintf("journal entry %d (offset %d)", n, off), err)
		}
		if e.Kind == "" {
			return nil, addr.Addr{}, reject.New(reject.MissingField, fmt.Sprintf("journal entry %d", n), "an entry names its kind")
		}
		head = next(head, raw)
		out = append(out, e)
		off = end
	}
	return out, head, nil
}

// itemEnd returns the end offset of the CBOR data item starting at off,
// checking that it is well-formed and core-deterministic.
func itemEnd(b []byte, off int) (int, error) {
	// Decode one item to find its length, then check it on its own.
	dec := cbor.NewDecoder(bytes.NewReader(b[off:]))
	var raw cbor.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, reject.New(reject.Truncated, "", "the journal ends inside an entry")
		}
		return 0, reject.New(reject.Malformed, "", "%v", err)
	}
	end := off + len(raw)
	if err := detcbor.Check(b[off:end]); err != nil {
		return 0, err
	}
	return end, nil
}

// Divergence is a replayed run asking for something the journal does not
// hold at that point.
type Divergence struct {
	Index int
	Want  string // what the journal holds
	Got   string // what the replay asked for
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("replay diverged at journal entry %d: the original run recorded %s, the replay asked for %s", d.Index, d.Want, d.Got)
}

// Reader serves a journal's entries back in order.
type Reader struct {
	mu      sync.Mutex
	entries []Entry
	i       int
	err     error
	check   *Writer // re-chains what is served, so the replay's root is computed too
}

// NewReader returns a Reader over parsed entries.
func NewReader(entries []Entry) *Reader {
	return &Reader{entries: entries, check: NewWriter(nil)}
}

// Next returns the response recorded for the next entry, which must be of
// the given kind with the given request; resp is decoded into out.
func (j *Reader) Next(kind string, req, out any) error {
	q, err := detcbor.Marshal(req)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	if j.i >= len(j.entries) {
		j.err = &Divergence{Index: j.i, Want: "the end of the journal", Got: describe(kind, q)}
		return j.err
	}
	e := j.entries[j.i]
	if e.Kind != kind || !bytes.Equal(e.Req, q) {
		j.err = &Divergence{Index: j.i, Want: describe(e.Kind, e.Req), Got: describe(kind, q)}
		return j.err
	}
	j.i++
	if err := cbor.Unmarshal(e.Resp, out); err != nil {
		j.err = fmt.Errorf("journal entry %d: response: %w", j.i-1, err)
		return j.err
	}
	var resp cbor.RawMessage = e.Resp
	return j.check.Append(e.Kind, cbor.RawMessage(q), resp)
}

// Err returns the first divergence or decoding error.
func (j *Reader) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Remaining returns how many entries were not served.
func (j *Reader) Remaining() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries) - j.i
}

// Root returns the root of the entries served so far.
func (j *Reader) Root() addr.Addr { return j.check.Root() }

func describe(kind string, q []byte) string {
	var v any
	if err := cbor.Unmarshal(q, &v); err != nil {
		return kind
	}
	s := fmt.Sprintf("%s %v", kind, v)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// OutcomeKind is the kind of a journal's last entry, which records what
// the run produced.
const OutcomeKind = "outcome"

// Outcome is the request-less last entry of every journal: how the run
// ended and what it wrote. Its CBOR form is an array, in this order, of
// seven items, or nine where the host kept only a prefix of a stream
// (its output bound): then Stdout and StdoutLen (Stderr, StderrLen) are
// the whole stream's, as the run wrote it and its caller received it,
// and StdoutKept (StderrKept) says what of it stdout.log (stderr.log)
// holds.
type Outcome struct {
	Status    string    // the attestation's outcome status
	ExitCode  int64     // -1 unless the status is exited
	Stdout    addr.Addr // BLAKE3 of everything the run wrote to stdout
	StdoutLen uint64    // its length in bytes
	Stderr    addr.Addr // BLAKE3 of everything it wrote to stderr
	StderrLen uint64
	Fuel      uint64 // 0 where the executor counts none
	// StdoutKept, StderrKept: nil where the file holds the whole stream;
	// else the prefix it holds, shorter than the stream.
	StdoutKept *Kept
	StderrKept *Kept
}

// Kept is the prefix of a stream that its file holds: its length and
// its BLAKE3.
type Kept struct {
	_    struct{} `cbor:",toarray"`
	Len  uint64
	Addr addr.Addr
}

// Cut reports whether either stream was kept only in part.
func (o Outcome) Cut() bool { return o.StdoutKept != nil || o.StderrKept != nil }

// outcome7 and outcome9 are the outcome's two wire forms.
type outcome7 struct {
	_         struct{} `cbor:",toarray"`
	Status    string
	ExitCode  int64
	Stdout    addr.Addr
	StdoutLen uint64
	Stderr    addr.Addr
	StderrLen uint64
	Fuel      uint64
}

type outcome9 struct {
	_          struct{} `cbor:",toarray"`
	Status     string
	ExitCode   int64
	Stdout     addr.Addr
	StdoutLen  uint64
	Stderr     addr.Addr
	StderrLen  uint64
	Fuel       uint64
	StdoutKept *Kept
	StderrKept *Kept
}

// MarshalCBOR writes the seven-item form unless a stream was cut.
func (o Outcome) MarshalCBOR() ([]byte, error) {
	if !o.Cut() {
		return detcbor.Marshal(outcome7{Status: o.Status, ExitCode: o.ExitCode, Stdout: o.Stdout, StdoutLen: o.StdoutLen, Stderr: o.Stderr, StderrLen: o.StderrLen, Fuel: o.Fuel})
	}
	return detcbor.Marshal(outcome9{Status: o.Status, ExitCode: o.ExitCode, Stdout: o.Stdout, StdoutLen: o.StdoutLen, Stderr: o.Stderr, StderrLen: o.StderrLen, Fuel: o.Fuel, StdoutKept: o.StdoutKept, StderrKept: o.StderrKept})
}

// UnmarshalCBOR reads either form; a nine-item one must cut a stream,
// each to a prefix shorter than it.
func (o *Outcome) UnmarshalCBOR(b []byte) error {
	if len(b) == 0 {
		return reject.New(reject.Invalid, "", "an empty outcome")
	}
	switch b[0] {
	case 0x87: // an array of 7
		var w outcome7
		if err := detcbor.Unmarshal(b, &w); err != nil {
			return err
		}
		*o = Outcome{Status: w.Status, ExitCode: w.ExitCode, Stdout: w.Stdout, StdoutLen: w.StdoutLen, Stderr: w.Stderr, StderrLen: w.StderrLen, Fuel: w.Fuel}
		return nil
	case 0x89: // an array of 9
		var w outcome9
		if err := detcbor.Unmarshal(b, &w); err != nil {
			return err
		}
		n := Outcome{Status: w.Status, ExitCode: w.ExitCode, Stdout: w.Stdout, StdoutLen: w.StdoutLen, Stderr: w.Stderr, StderrLen: w.StderrLen, Fuel: w.Fuel, StdoutKept: w.StdoutKept, StderrKept: w.StderrKept}
		if !n.Cut() {
			return reject.New(reject.NonCanonical, "", "an outcome of nine items that cuts no stream (its form is the seven-item one)")
		}
		for _, k := range []struct {
			name string
			kept *Kept
			n    uint64
		}{{"stdout", n.StdoutKept, n.StdoutLen}, {"stderr", n.StderrKept, n.StderrLen}} {
			if k.kept != nil && k.kept.Len >= k.n {
				return reject.New(reject.Invalid, k.name+" kept", "%d bytes kept of a stream of %d: a kept prefix is shorter than its stream", k.kept.Len, k.n)
			}
		}
		*o = n
		return nil
	}
	return reject.New(reject.Invalid, "", "an outcome is an array of 7 items, or of 9 where an output was cut")
}

// LastOutcome returns the outcome entry, which must be the last entry and
// the only one of its kind, with a null request; errors are
// *reject.Error naming the entry.
func LastOutcome(entries []Entry) (Outcome, error) {
	var o Outcome
	if len(entries) == 0 {
		return o, reject.New(reject.MissingField, "journal", "a journal ends with its outcome entry; this one is empty")
	}
	for i, e := range entries[:len(entries)-1] {
		if e.Kind == OutcomeKind {
			return o, reject.New(reject.Invalid, fmt.Sprintf("journal entry %d", i), "an outcome entry before the last")
		}
	}
	last := len(entries) - 1
	e := entries[last]
	where := fmt.Sprintf("journal entry %d", last)
	if e.Kind != OutcomeKind {
		return o, reject.New(reject.MissingField, where, "the last entry is %q, not the outcome", e.Kind)
	}
	if !bytes.Equal(e.Req, []byte{0xf6}) {
		return o, reject.New(reject.Invalid, where+".q", "the outcome entry's request is null")
	}
	if err := detcbor.Unmarshal(e.Resp, &o); err != nil {
		return o, reject.In(where+".r", err)
	}
	return o, nil
}
