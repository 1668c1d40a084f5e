package budget

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/reject"
)

// The ops of a ledger entry (docs/spec/jcp.md §7).
const (
	opAdmit      = "admit"
	opReserve    = "reserve"
	opPost       = "post"
	opRelease    = "release"
	opRevoke     = "revoke"
	opAmend      = "amend"
	opMint       = "mint"
	opCheckpoint = "checkpoint"
)

// The reasons a reservation is released.
const (
	WhyRefused = "refused" // the run was refused after its reservation: it does not count
	WhyFailed  = "failed"  // the run ended without a seal
	WhyExpired = "expired" // the run never ended, and its until passed
)

// maxUJ bounds one entry's energy of one class: canonical JSON integers
// stop below 2^53.
const maxUJ = 1<<53 - 1

// entry is one ledger entry, decoded: op says which members are set.
type entry struct {
	op    string
	tok   *jcp.Token // admit, revoke, amend, mint, checkpoint
	n     uint64     // reserve, post, release
	path  []addr.Addr
	uj    map[device.Class]energy.Microjoules // reserve, post
	inv   addr.Addr
	at    int64 // reserve, mint: Unix ns
	until int64 // reserve
	run   addr.Addr
	why   string
	event string
}

// The wire forms, one per op: decoding is strict (every member present,
// none other), so each op has exactly its own.
type (
	tokenWire struct {
		Op    string   `json:"op"`
		Token envelope `json:"token"`
	}
	reserveWire struct {
		At    nanos                               `json:"at"`
		Inv   addr.Addr                           `json:"inv"`
		N     uint64                              `json:"n"`
		Op    string                              `json:"op"`
		Path  []addr.Addr                         `json:"path"`
		UJ    map[device.Class]energy.Microjoules `json:"uj"`
		Until nanos                               `json:"until"`
	}
	postWire struct {
		N   uint64                              `json:"n"`
		Op  string                              `json:"op"`
		Run addr.Addr                           `json:"run"`
		UJ  map[device.Class]energy.Microjoules `json:"uj"`
	}
	releaseWire struct {
		N   uint64 `json:"n"`
		Op  string `json:"op"`
		Why string `json:"why"`
	}
	mintWire struct {
		At    nanos    `json:"at"`
		Event string   `json:"event"`
		Op    string   `json:"op"`
		Token envelope `json:"token"`
	}
)

// envelope is a token's bytes: base64url without padding, one spelling.
type envelope []byte

var b64 = base64.RawURLEncoding.Strict()

func (e envelope) MarshalText() ([]byte, error) { return []byte(b64.EncodeToString(e)), nil }

func (e *envelope) UnmarshalText(b []byte) error {
	d, err := b64.DecodeString(string(b))
	if err != nil {
		return fmt.Errorf("not base64url without padding: %v", err)
	}
	*e = d
	return nil
}

// nanos is a time in Unix nanoseconds, written as a decimal string
// (canonical JSON integers stop below 2^53): digits, no leading zero,
// below 2^63.
type nanos int64

func (n nanos) MarshalText() ([]byte, error) { return strconv.AppendInt(nil, int64(n), 10), nil }

func (n *nanos) UnmarshalText(b []byte) error {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v < 0 || strconv.FormatInt(v, 10) != string(b) {
		return fmt.Errorf("%q is not Unix nanoseconds: decimal digits, no sign, no leading zero, below 2^63", b)
	}
	*n = nanos(v)
	return nil
}

// marshal is e's canonical line.
func (e *entry) marshal() ([]byte, error) {
	if line, ok := e.fastLine(); ok {
		return line, nil
	}
	var w any
	switch e.op {
	case opAdmit, opRevoke, opAmend, opCheckpoint:
		w = tokenWire{Op: e.op, Token: e.tok.Bytes}
	case opReserve:
		w = reserveWire{At: nanos(e.at), Inv: e.inv, N: e.n, Op: e.op, Path: e.path, UJ: e.uj, Until: nanos(e.until)}
	case opPost:
		w = postWire{N: e.n, Op: e.op, Run: e.run, UJ: e.uj}
	case opRelease:
		w = releaseWire{N: e.n, Op: e.op, Why: e.why}
	case opMint:
		w = mintWire{At: nanos(e.at), Event: e.event, Op: e.op, Token: e.tok.Bytes}
	default:
		return nil, fmt.Errorf("budget: no op %q", e.op)
	}
	return jcs.Marshal(w)
}

// parse reads one entry from untrusted bytes: canonical JSON, an op this
// version knows, exactly its members, and a token that opens as the kind
// its op holds. The ledger's rules are the state's.
func parse(b []byte) (*entry, error) {
	if err := jcs.Check(b); err != nil {
		return nil, err
	}
	if e, ok := fastParse(b); ok {
		return e, nil
	}
	var members map[string]json.RawMessage // exact names, as the strict decoder reads them
	if err := json.Unmarshal(b, &members); err != nil {
		return nil, reject.New(reject.Invalid, "(top)", "an entry is a JSON object with an op: %v", err)
	}
	op, ok := members["op"]
	if !ok {
		return nil, reject.New(reject.MissingField, "op", "every entry has its op")
	}
	e := &entry{}
	if err := json.Unmarshal(op, &e.op); err != nil || e.op == "" {
		return nil, reject.New(reject.Invalid, "op", "%s is not an op", clip(string(op)))
	}
	switch e.op {
	case opAdmit, opRevoke, opAmend, opCheckpoint:
		var w tokenWire
		if err := decode(b, &w, e.op); err != nil {
			return nil, err
		}
		return e, e.open(w.Token)
	case opReserve:
		var w reserveWire
		if err := decode(b, &w, e.op); err != nil {
			return nil, err
		}
		e.n, e.path, e.uj, e.inv, e.at, e.until = w.N, w.Path, w.UJ, w.Inv, int64(w.At), int64(w.Until)
	case opPost:
		var w postWire
		if err := decode(b, &w, e.op); err != nil {
			return nil, err
		}
		e.n, e.uj, e.run = w.N, w.UJ, w.Run
	case opRelease:
		var w releaseWire
		if err := decode(b, &w, e.op); err != nil {
			return nil, err
		}
		e.n, e.why = w.N, w.Why
	case opMint:
		var w mintWire
		if err := decode(b, &w, e.op); err != nil {
			return nil, err
		}
		e.at, e.event = int64(w.At), w.Event
		return e, e.open(w.Token)
	default:
		return nil, reject.New(reject.Invalid, "op", "%q is not an op of sandbox.jcp-ledger/1 (admit, reserve, post, release, revoke, amend, mint, checkpoint)", clip(e.op))
	}
	return e, nil
}

func decode(b []byte, w any, op string) error {
	if err := jcs.Decode(b, w); err != nil {
		return reject.In(op, err)
	}
	return nil
}

// kinds is the token each op holds.
var kinds = map[string][]string{
	opAdmit:      {jcp.TypeGrant, jcp.TypePolicy},
	opRevoke:     {jcp.TypeRevocation},
	opAmend:      {jcp.TypeAmendment},
	opMint:       {jcp.TypeGrant},
	opCheckpoint: {jcp.TypeCheckpoint},
}

// open opens e's token and checks it is of a kind e's op holds.
func (e *entry) open(b []byte) error {
	t, err := jcp.Open(b)
	if err != nil {
		return reject.In("token", err)
	}
	for _, k := range kinds[e.op] {
		if t.Type == k {
			e.tok = t
			return nil
		}
	}
	return reject.New(reject.Invalid, "token", "a %s; %s holds %v", t.Type, e.op, kinds[e.op])
}

// checkUJ checks an entry's energies: known classes, each below 2^53 µJ,
// and (for a reservation) 1 to 8 of them, each at least 1 µJ.
func checkUJ(uj map[device.Class]energy.Microjoules, reserve bool) error {
	if reserve && len(uj) == 0 {
		return reject.New(reject.Invalid, "uj", "a reservation reserves at least one class")
	}
	if uj == nil {
		return reject.New(reject.Invalid, "uj", "a map of class to µJ, empty if nothing was spent")
	}
	for c, v := range uj {
		switch {
		case !c.Valid():
			return reject.New(reject.Invalid, "uj."+clip(string(c)), "not a device class")
		case v > maxUJ:
			return reject.New(reject.Invalid, "uj."+string(c), "%d µJ; one entry holds at most 2^53−1 µJ of a class", v)
		case reserve && v == 0:
			return reject.New(reject.Invalid, "uj."+string(c), "a reservation of 0 µJ; leave the class out")
		}
	}
	return nil
}

// ns is t in Unix nanoseconds: 0 for the zero time or any time before
// 1970, and at most 2^63−1.
func ns(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
