package authority

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// LogDomain is the decision log's genesis domain tag.
const LogDomain = "sandbox.authority-log/1"

// Decision is one entry of the decision log: a grant refused to a
// principal, with the rule that refused it.
type Decision struct {
	Time      string `json:"time"` // RFC 3339, UTC
	Principal string `json:"principal"`
	Action    string `json:"action"`
	Decision  string `json:"decision"` // "deny"
	Grant     string `json:"grant"`
	Rule      string `json:"rule"`
	Policy    int    `json:"policy"`
	Why       string `json:"why"`
}

// DecisionOf is the log entry for a refusal at t.
func DecisionOf(e *DeniedError, t time.Time) Decision {
	return Decision{Time: t.UTC().Format(time.RFC3339Nano), Principal: e.Principal, Action: e.Action, Decision: "deny", Grant: e.Grant, Rule: e.Rule, Policy: e.Policy, Why: e.Why}
}

func parseDecision(b []byte) (Decision, error) {
	var d Decision
	if err := jcs.Unmarshal(b, &d); err != nil {
		return d, err
	}
	if _, err := time.Parse(time.RFC3339Nano, d.Time); err != nil {
		return d, reject.New(reject.Invalid, "time", "%q is not an RFC 3339 time", d.Time)
	}
	if d.Decision != "deny" {
		return d, reject.New(reject.Invalid, "decision", "%q: want deny", d.Decision)
	}
	if d.Principal == "" || d.Action == "" || d.Grant == "" || d.Rule == "" {
		return d, reject.New(reject.MissingField, "principal, action, grant, rule", "each is required")
	}
	return d, nil
}

// Append writes d at the end of the decision log at path (made if
// missing), fsynced before it returns, and returns the head after it.
// Each call opens and closes the log, so a service and a CLI on one
// state directory take turns (internal/chain's lock).
func Append(path string, d Decision) (addr.Addr, error) {
	b, err := jcs.Marshal(d)
	if err != nil {
		return addr.Addr{}, err
	}
	if _, err := parseDecision(b); err != nil {
		return addr.Addr{}, err
	}
	f, entries, err := chain.OpenFile(path)
	if err != nil {
		return addr.Addr{}, err
	}
	defer f.Close()
	head, err := replay(entries, nil)
	if err != nil {
		return addr.Addr{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Append(b); err != nil {
		return addr.Addr{}, err
	}
	return chain.Step(head, b), nil
}

func replay(entries [][]byte, each func(Decision)) (addr.Addr, error) {
	head := chain.Genesis(LogDomain)
	for i, b := range entries {
		d, err := parseDecision(b)
		if err != nil {
			return head, fmt.Errorf("entry %d: %w", i+1, err)
		}
		head = chain.Step(head, b)
		if each != nil {
			each(d)
		}
	}
	return head, nil
}

// ReadLog replays the decision log at path (a missing file holds none)
// and returns its decisions, oldest first, and its head.
func ReadLog(path string) ([]Decision, addr.Addr, error) {
	entries, torn, err := chain.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, chain.Genesis(LogDomain), nil
	}
	if err != nil {
		return nil, addr.Addr{}, err
	}
	_ = torn // an append never acknowledged: not an entry
	var out []Decision
	head, err := replay(entries, func(d Decision) { out = append(out, d) })
	if err != nil {
		return nil, addr.Addr{}, fmt.Errorf("%s: %w", path, err)
	}
	return out, head, nil
}
