package mcp

import (
	"context"
	"encoding/base64"
	"errors"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opensubstrate/sandbox/client"
)

// Principal is an agent's JCP principal: the chain it presents, root
// first, whose last grant's audience it is, and its key, which stays on
// the side of the process that serves the tools (the service never holds
// it). It signs a fresh invocation for each call, and what an agent may
// sign under its grant: a narrower child, a checkpoint. It signs no
// amendment and no revocation: an agent never amends its own grant, and
// no tool asks it to.
type Principal interface {
	// Chain is the chain the agent presents, root first.
	Chain() [][]byte
	// Present signs a fresh invocation of the chain: never reused.
	Present() (*client.JCP, error)
	// Delegate signs a child of the chain's last grant for d.To, its
	// terms the grant's narrowed by d, and returns the chain with the
	// child after it. Whether the child narrows is the service's to
	// decide.
	Delegate(d DelegateIn) ([][]byte, error)
	// Checkpoint signs a checkpoint (seq) of the chain's last grant: the
	// run it checkpoints and the state it saved (b3:…; "" none).
	Checkpoint(run, state string, seq uint64) ([]byte, error)
}

// addJCP adds the tools of an agent holding a JCP grant.
func addJCP(s *sdk.Server, t *tools) {
	sdk.AddTool(s, &sdk.Tool{Name: "jcp_budget", Description: "Show your JCP grant's budget, and every grant above it: per device class its ceiling, reserved, spent and remaining microjoules; runs, whether revoked or amended."}, t.jcpBudget)
	sdk.AddTool(s, &sdk.Tool{Name: "jcp_delegate", Description: "Delegate part of your JCP grant to another principal (its public key): a child grant that may only narrow yours (lower ceilings, fewer images, an earlier expiry, tighter caveats, less depth). It is signed with your key and admitted by the service; one that widens is refused with its code (widen-ceiling, …). Returns the child's chain for its holder."}, t.jcpDelegate)
	sdk.AddTool(s, &sdk.Tool{Name: "jcp_checkpoint", Description: "Checkpoint a run under your JCP grant: a signed statement of where it is (the run, b3:…, and the state it saved), recorded in the service's budget ledger."}, t.jcpCheckpoint)
}

// BudgetOut is jcp_budget's output.
type BudgetOut struct {
	Budgets []client.JCPBudget `json:"budgets" jsonschema:"each grant of your chain, root first; yours is the last"`
}

func (t *tools) jcpBudget(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, BudgetOut, error) {
	bs, err := t.api.JCPBudgets(ctx, t.jcp.Chain())
	if err != nil {
		return nil, BudgetOut{}, toolErr(err)
	}
	return nil, BudgetOut{Budgets: append([]client.JCPBudget{}, bs...)}, nil
}

// DelegateIn is jcp_delegate's input: the child's audience, and how it
// narrows the agent's grant. What it leaves out is the grant's own.
type DelegateIn struct {
	To       string             `json:"to" jsonschema:"the child's audience: its public key, ed25519:HEX"`
	Ceilings map[string]string  `json:"ceilings,omitempty" jsonschema:"joule ceilings by device class, e.g. {\"cpu\": \"10J\"}: each at most your grant's, a class your grant has"`
	Expires  string             `json:"expires,omitempty" jsonschema:"how long the child lives from now, e.g. 30m (never past your grant)"`
	Images   []string           `json:"images,omitempty" jsonschema:"the images (b3:…) it may run: some of your grant's"`
	Caveats  *client.JCPCaveats `json:"caveats,omitempty" jsonschema:"caveats that replace your grant's: models, tiers, hosts, paths (each a subset of yours), runs, rate"`
	Depth    *uint64            `json:"depth,omitempty" jsonschema:"how many more delegations may follow below it (default: one fewer than your grant's)"`
}

// DelegateOut is jcp_delegate's output.
type DelegateOut struct {
	Grant    string          `json:"grant" jsonschema:"the child's id (b3:…)"`
	Audience string          `json:"audience"`
	Depth    uint64          `json:"depth"`
	Terms    client.JCPTerms `json:"terms"`
	Chain    []string        `json:"chain" jsonschema:"the child's chain, root first, each element a COSE_Sign1 envelope in base64: hand it to its holder"`
}

func (t *tools) jcpDelegate(ctx context.Context, _ *sdk.CallToolRequest, in DelegateIn) (*sdk.CallToolResult, DelegateOut, error) {
	if in.To == "" {
		return nil, DelegateOut{}, invalid("\"to\" is required: the child's audience, ed25519:HEX")
	}
	els, err := t.jcp.Delegate(in)
	if err != nil {
		return nil, DelegateOut{}, toolErr(err)
	}
	v, err := t.api.JCPAdmit(ctx, els)
	if err != nil {
		return nil, DelegateOut{}, toolErr(err)
	}
	leaf := v.Grants[len(v.Grants)-1]
	out := DelegateOut{Grant: leaf.ID, Audience: leaf.Aud, Depth: leaf.Depth, Terms: leaf.Terms}
	for _, e := range els {
		out.Chain = append(out.Chain, base64.StdEncoding.EncodeToString(e))
	}
	return nil, out, nil
}

// CheckpointIn is jcp_checkpoint's input.
type CheckpointIn struct {
	Run   string `json:"run" jsonschema:"the run it checkpoints (b3:…, as exec returned it), or a run record's head"`
	State string `json:"state,omitempty" jsonschema:"the address (b3:…) of the state it saved"`
}

// CheckpointOut is jcp_checkpoint's output.
type CheckpointOut struct {
	Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint's id (b3:…)"`
	Grant      string `json:"grant"`
	Seq        uint64 `json:"seq"`
}

func (t *tools) jcpCheckpoint(ctx context.Context, _ *sdk.CallToolRequest, in CheckpointIn) (*sdk.CallToolResult, CheckpointOut, error) {
	if in.Run == "" {
		return nil, CheckpointOut{}, invalid("\"run\" is required")
	}
	chain := t.jcp.Chain()
	bs, err := t.api.JCPBudgets(ctx, chain)
	if err != nil {
		return nil, CheckpointOut{}, toolErr(err)
	}
	if len(bs) == 0 {
		return nil, CheckpointOut{}, toolErr(errors.New("the service gave no budget of the chain's grants"))
	}
	cp, err := t.jcp.Checkpoint(in.Run, in.State, bs[len(bs)-1].Checkpoint+1)
	if err != nil {
		return nil, CheckpointOut{}, toolErr(err)
	}
	r, err := t.api.JCPCheckpoint(ctx, chain, cp)
	if err != nil {
		return nil, CheckpointOut{}, toolErr(err)
	}
	return nil, CheckpointOut{Checkpoint: r.Token, Grant: r.Grant, Seq: r.Seq}, nil
}
