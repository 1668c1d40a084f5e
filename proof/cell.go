package proof

import (
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// PredicateType is the in-toto predicate type of a proof cell.
const PredicateType = "https://opensubstrate.dev/sandbox/proof-cell/1"

// State is what one tier did on a target.
type State string

// The states: every tier of the ladder has one, none is skipped.
const (
	Green       State = "green"       // a sealed run that verifies; Run is its address
	Red         State = "red"         // it should have worked here and did not; Error says how
	Unavailable State = "unavailable" // the probe's reason it cannot work here
)

// Cell is a proof cell's predicate: the target, the pack's counts and
// one result per tier, S0 to S7 in order.
type Cell struct {
	Substrate Substrate    `json:"substrate"`
	Target    Target       `json:"target"`
	Pack      PackCounts   `json:"pack"`
	Tiers     []TierResult `json:"tiers"`
	Started   string       `json:"started"` // RFC 3339 UTC
	Ended     string       `json:"ended"`
	// Host is the public key of the host that ran the cell: it signs the
	// envelope and every sealed run the cell names.
	Host key.Public `json:"host"`
}

// Substrate is the program that made the cell.
type Substrate struct {
	Version string `json:"version"`
	Binary  string `json:"binary"` // the address (b3:…) of the sandbox-engine that ran
}

// Target is the machine, as detected.
type Target struct {
	OS             string   `json:"os"`
	Kernel         string   `json:"kernel"`
	Arch           string   `json:"arch"`
	CPU            string   `json:"cpu"`
	Virtualisation string   `json:"virtualisation,omitempty"` // e.g. "kvm guest", "none"
	Cloud          string   `json:"cloud,omitempty"`
	Accelerators   []string `json:"accelerators,omitempty"` // model and driver of each
	Cgroup         string   `json:"cgroup"`                 // "v2", "v1", "hybrid"
	Landlock       int      `json:"landlock_abi"`           // 0: none
	VM             string   `json:"vm"`                     // "kvm", "tcg", "none"
}

// PackCounts is the conformance pack's result on the target.
type PackCounts struct {
	Address string `json:"address"` // the pack's manifest address
	Vectors int    `json:"vectors"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
}

// TierResult is one tier's result.
type TierResult struct {
	Tier     tier.Tier `json:"tier"`
	State    State     `json:"state"`
	Run      string    `json:"run,omitempty"`      // green: the sealed run's address
	Executor string    `json:"executor,omitempty"` // green, red: which executor
	Reason   string    `json:"reason,omitempty"`   // unavailable: the probe's reason
	Error    string    `json:"error,omitempty"`    // red: what failed
}
