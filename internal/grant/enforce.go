package grant

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/jcs"
)

// LogType is the type tag of a decision log's canonical JSON.
const LogType = "sandbox.decisions/1"

// Kind is the resource class of a request.
type Kind string

// The request kinds.
const (
	KindNet     Kind = "net"
	KindFS      Kind = "fs"
	KindKV      Kind = "kv"
	KindClock   Kind = "clock"
	KindRandom  Kind = "random"
	KindExec    Kind = "exec"
	KindCompute Kind = "compute"
	KindEnv     Kind = "env"
	// KindProcess is another process: a signal or a trace the kernel
	// refused across the run's boundary (S1's Landlock scopes).
	KindProcess Kind = "process"
)

// Operations.
const (
	OpConnect = "connect"
	OpRead    = "read"
	OpWrite   = "write"
	OpExec    = "exec"
	OpUse     = "use"
	OpInject  = "inject"
	OpBind    = "bind"   // listen on a port (S1: what Landlock refused)
	OpSignal  = "signal" // signal a process
	OpTrace   = "trace"  // ptrace a process
)

// Kinds and Ops are the decision log's vocabulary: a log with any other
// kind or op is refused.
var (
	Kinds = []Kind{KindNet, KindFS, KindKV, KindClock, KindRandom, KindExec, KindCompute, KindEnv, KindProcess}
	Ops   = []string{OpConnect, OpRead, OpWrite, OpExec, OpUse, OpInject, OpBind, OpSignal, OpTrace}
)

// ErrDenied is wrapped by every denial the Enforcer returns, and by
// every refusal of a grant (authority); it says its category.
var ErrDenied error = denied{}

type denied struct{}

func (denied) Error() string { return "denied" }

// Category names its category in the one map (internal/errs).
func (denied) Category() string { return "denied" }

// Denial is a refused request with the reason.
type Denial struct {
	Kind   Kind
	Op     string
	Target string
	Why    string
}

func (d *Denial) Error() string {
	return fmt.Sprintf("%s %s %s denied: %s", d.Kind, d.Op, d.Target, d.Why)
}

// Unwrap returns ErrDenied.
func (d *Denial) Unwrap() error { return ErrDenied }

// Decision is one entry of the log.
type Decision struct {
	Seq    int64  `json:"seq"`
	Kind   Kind   `json:"kind"`
	Op     string `json:"op"`
	Target string `json:"target"`
	Allow  bool   `json:"allow"`
	// Rule is the grant that allowed the request, or why it was denied.
	Rule string `json:"rule"`
	// Count is how many identical consecutive decisions this entry stands for.
	Count int64 `json:"count"`
}

// String is the decision for people: "allow net connect host:443 —
// net:host:443", "DENY  exec exec b3:… /tmp/x — exec:deny:b3:…", with
// " ×N" for a repeated decision.
func (d Decision) String() string {
	verdict := "allow"
	if !d.Allow {
		verdict = "DENY "
	}
	n := ""
	if d.Count > 1 {
		n = fmt.Sprintf(" ×%d", d.Count)
	}
	return fmt.Sprintf("%s %s %s %s — %s%s", verdict, d.Kind, d.Op, d.Target, d.Rule, n)
}

// Log is the decision log, the record an attestation binds.
type Log struct {
	Type      string     `json:"type"`
	Decisions []Decision `json:"decisions"`
}

// Canonical returns the log's canonical JSON and its address.
func (l Log) Canonical() ([]byte, addr.Addr, error) {
	l.Type = LogType
	if l.Decisions == nil {
		l.Decisions = []Decision{}
	}
	b, err := jcs.Marshal(l)
	if err != nil {
		return nil, addr.Addr{}, err
	}
	return b, addr.Of(b), nil
}

// Enforcer answers requests against a Set and logs every answer. It is safe
// for concurrent use.
type Enforcer struct {
	set Set

	mu   sync.Mutex
	log  []Decision
	seq  int64
	used map[string]int64 // bytes charged per storage grant path
}

// NewEnforcer returns an Enforcer for s, which must be normalized.
func NewEnforcer(s Set) *Enforcer {
	return &Enforcer{set: s, used: map[string]int64{}}
}

// Set returns the grants the Enforcer enforces.
func (e *Enforcer) Set() Set { return e.set }

func (e *Enforcer) record(k Kind, op, target string, allow bool, rule string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.log); n > 0 {
		last := &e.log[n-1]
		if last.Kind == k && last.Op == op && last.Target == target && last.Allow == allow && last.Rule == rule {
			last.Count++
			e.seq++
			return e.result(k, op, target, allow, rule)
		}
	}
	e.log = append(e.log, Decision{Seq: e.seq, Kind: k, Op: op, Target: target, Allow: allow, Rule: rule, Count: 1})
	e.seq++
	return e.result(k, op, target, allow, rule)
}

func (e *Enforcer) result(k Kind, op, target string, allow bool, rule string) error {
	if allow {
		return nil
	}
	return &Denial{Kind: k, Op: op, Target: target, Why: rule}
}

// Log returns a copy of the decisions so far.
func (e *Enforcer) Log() Log {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Log{Type: LogType, Decisions: append([]Decision{}, e.log...)}
}

// Mark is where the log stands: its length, and the count of its last
// entry (a repeat of the last decision adds to its count, not to the
// length). Since(Mark()) is then what was decided after.
func (e *Enforcer) Mark() (n int, lastCount int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n = len(e.log); n > 0 {
		lastCount = max(e.log[n-1].Count, 1)
	}
	return n, lastCount
}

// Since returns the decisions made after the mark (n, lastCount), each
// with the count made since: the repeats of the entry that was last at
// the mark, then every later entry.
func (e *Enforcer) Since(n int, lastCount int64) []Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Decision
	for i := max(n-1, 0); i < len(e.log); i++ {
		d := e.log[i]
		d.Count = max(d.Count, 1)
		if i == n-1 {
			d.Count -= lastCount
		}
		if d.Count > 0 {
			out = append(out, d)
		}
	}
	return out
}

// ReplayInto notes in into every decision made after the mark, as many
// times as it was made: a live sandbox's proxy decides for the sandbox,
// and each exec's log takes what was decided while it ran.
func (e *Enforcer) ReplayInto(into *Enforcer, n int, lastCount int64) {
	for _, d := range e.Since(n, lastCount) {
		for range d.Count {
			into.Note(d.Kind, d.Op, d.Target, d.Allow, d.Rule)
		}
	}
}

// Connect decides a connection to host:port.
func (e *Enforcer) Connect(host string, port int) error {
	return e.ConnectVetted(host, port, nil)
}

// ConnectVetted decides a connection to host:port that needs more than
// the grant: when a grant covers it, vet (if not nil) runs (the egress
// proxy resolves the name and refuses private or loopback answers that
// were not granted) and its error, if any, is the denial. Either way one
// decision is logged.
func (e *Enforcer) ConnectVetted(host string, port int, vet func() error) error {
	target := net.JoinHostPort(host, strconv.Itoa(port))
	if _, err := normHost(host); err != nil {
		return e.record(KindNet, OpConnect, target, false, "not a host name or address")
	}
	n, ok := e.NetGrant(host, port)
	if !ok {
		return e.record(KindNet, OpConnect, target, false, "no net grant for this destination")
	}
	if vet != nil {
		if err := vet(); err != nil {
			return e.record(KindNet, OpConnect, target, false, err.Error())
		}
	}
	return e.record(KindNet, OpConnect, target, true, n.String())
}

// NetGrant returns the net grant for host:port, without deciding anything.
func (e *Enforcer) NetGrant(host string, port int) (Net, bool) {
	h, err := normHost(host)
	if err != nil {
		return Net{}, false
	}
	for _, n := range e.set.Net {
		if n.Host == h && n.Port == port {
			return n, true
		}
	}
	return Net{}, false
}

// Storage returns the most specific storage grant covering path (an
// absolute, clean path), or nil.
func (e *Enforcer) Storage(path string) *Storage {
	var best *Storage
	for i := range e.set.Storage {
		g := &e.set.Storage[i]
		if Within(g.Path, path) && (best == nil || len(g.Path) > len(best.Path)) {
			best = g
		}
	}
	return best
}

// Within reports whether path is root or below it, comparing whole path
// components. Both must be absolute and clean.
func Within(root, path string) bool {
	if root == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == root || strings.HasPrefix(path, root+"/")
}

// File decides opening path for reading or writing.
func (e *Enforcer) File(path string, write bool) error {
	op := OpRead
	if write {
		op = OpWrite
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return e.record(KindFS, op, path, false, "path is not absolute and clean")
	}
	g := e.Storage(path)
	switch {
	case g == nil:
		return e.record(KindFS, op, path, false, "no storage grant covers this path")
	case write && g.Mode != RW:
		return e.record(KindFS, op, path, false, "fs:"+g.Path+" is read-only")
	}
	return e.record(KindFS, op, path, true, "fs:"+g.Path+":"+string(g.Mode))
}

// Charge counts n bytes of I/O on path against its grant's quota. It
// refuses, and logs the refusal, when the quota would be exceeded; charges
// that fit are not logged one by one (the open that allowed them was).
func (e *Enforcer) Charge(path string, n int64, write bool) error {
	g := e.Storage(path)
	if g == nil {
		return e.File(path, write)
	}
	if g.Quota == 0 {
		return nil
	}
	e.mu.Lock()
	over := e.used[g.Path]+n > g.Quota
	if !over {
		e.used[g.Path] += n
	}
	used := e.used[g.Path]
	e.mu.Unlock()
	if !over {
		return nil
	}
	op := OpRead
	if write {
		op = OpWrite
	}
	return e.record(KindFS, op, path, false, fmt.Sprintf("quota of fs:%s exhausted (%d of %d bytes used)", g.Path, used, g.Quota))
}

// Used returns the bytes charged against the grant at root.
func (e *Enforcer) Used(root string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.used[root]
}

// KV decides access to a key-value namespace.
func (e *Enforcer) KV(ns string, write bool) error {
	op := OpRead
	if write {
		op = OpWrite
	}
	for _, g := range e.set.KV {
		if g.Namespace == ns {
			if write && g.Mode != RW {
				return e.record(KindKV, op, ns, false, "kv:"+ns+" is read-only")
			}
			return e.record(KindKV, op, ns, true, "kv:"+ns+":"+string(g.Mode))
		}
	}
	return e.record(KindKV, op, ns, false, "no kv grant for this namespace")
}

// Clock decides a read of the real clock.
func (e *Enforcer) Clock() error {
	if e.set.Clock {
		return e.record(KindClock, OpRead, "realtime", true, "clock")
	}
	return e.record(KindClock, OpRead, "realtime", false, "no clock grant")
}

// Random decides a read of real randomness.
func (e *Enforcer) Random() error {
	if e.set.Random {
		return e.record(KindRandom, OpRead, "entropy", true, "random")
	}
	return e.record(KindRandom, OpRead, "entropy", false, "no random grant")
}

// Exec decides executing the binary with content address a. A deny is
// absolute; an allow-list, when present, admits nothing else.
func (e *Enforcer) Exec(a addr.Addr, name string) error {
	target := a.String()
	if name != "" {
		target += " " + name
	}
	for _, d := range e.set.Exec.Deny {
		if d == a {
			return e.record(KindExec, OpExec, target, false, "exec:deny:"+a.String())
		}
	}
	if len(e.set.Exec.Allow) == 0 {
		return e.record(KindExec, OpExec, target, true, "no exec allow-list")
	}
	for _, al := range e.set.Exec.Allow {
		if al == a {
			return e.record(KindExec, OpExec, target, true, "exec:allow:"+a.String())
		}
	}
	return e.record(KindExec, OpExec, target, false, "not on the exec allow-list")
}

// Compute decides use of a device class.
func (e *Enforcer) Compute(c device.Class) error {
	if b, ok := e.set.Budget(c); ok {
		return e.record(KindCompute, OpUse, string(c), true, fmt.Sprintf("%s:%d µJ", strings.ToLower(string(c)), b))
	}
	return e.record(KindCompute, OpUse, string(c), false, "no compute grant for this class")
}

// Note records a decision taken outside the Enforcer's own rules, such as
// an executor refusing a host call its tier cannot broker (a socket
// without a network grant in S2), so that the log stays complete.
func (e *Enforcer) Note(k Kind, op, target string, allow bool, rule string) error {
	return e.record(k, op, target, allow, rule)
}
