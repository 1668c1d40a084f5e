package client

import "context"

// JCP through the service (docs/api.md, "JCP"; docs/spec/jcp.md). Every
// token is signed by its principal on the caller's side: the service
// never holds a principal's key. It verifies what it is given and
// records it in its budget ledger. Envelopes are COSE_Sign1 bytes
// (base64 in JSON); ids are b3:HEX, keys ed25519:HEX, energies µJ.

// JCPInfo is what the service's gate trusts and signs with.
type JCPInfo struct {
	// Key is the service's host key: it signs every decision, the
	// ledger's heads and the children it mints under a mint policy (a
	// policy's minter must be it).
	Key string `json:"key"`
	// Roots are the root keys a chain may start from here.
	Roots []string `json:"roots"`
}

// JCPRefusal is why a chain or a ledger does not verify: its refusal
// code (docs/spec/jcp.md §9), where, and why.
type JCPRefusal struct {
	Code   string `json:"code"`
	Where  string `json:"where,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Message is the whole refusal as text: the entry of a ledger, say
	// ("entry 17: over-ceiling: …").
	Message string `json:"message"`
}

// JCPRate is at most N in any Per seconds.
type JCPRate struct {
	N   uint64 `json:"n"`
	Per uint64 `json:"per"`
}

// JCPCaveats are a grant's caveats; an absent one restricts nothing.
type JCPCaveats struct {
	Models []string `json:"models,omitempty"`
	Tiers  []string `json:"tiers,omitempty"`
	Hosts  []string `json:"hosts,omitempty"`
	Paths  []string `json:"paths,omitempty"`
	Runs   uint64   `json:"runs,omitempty"`
	Rate   *JCPRate `json:"rate,omitempty"`
}

// JCPTerms are what a delegation narrows and an amendment replaces.
type JCPTerms struct {
	Exp      uint64            `json:"exp"`      // Unix seconds
	Images   []string          `json:"images"`   // b3:HEX
	Ceilings map[string]uint64 `json:"ceilings"` // device class (Cpu, Gpu, …) → µJ
	Caveats  JCPCaveats        `json:"caveats"`
}

// JCPGrant is one grant of a verified chain.
type JCPGrant struct {
	ID     string `json:"id"`
	Iss    string `json:"iss"`
	Aud    string `json:"aud"`
	Parent string `json:"parent,omitempty"`
	// Policy is the mint policy it was minted under, if any.
	Policy string   `json:"policy,omitempty"`
	Iat    uint64   `json:"iat"`
	Depth  uint64   `json:"depth"`
	Terms  JCPTerms `json:"terms"`
}

// JCPChain is a chain as the service read it: verified (OK, its grants
// root first) or refused (Refusal). An admission also names the mint
// policy it admitted after the chain (Policy).
type JCPChain struct {
	OK      bool        `json:"ok"`
	Refusal *JCPRefusal `json:"refusal,omitempty"`
	Grants  []JCPGrant  `json:"grants,omitempty"`
	Policy  string      `json:"policy,omitempty"`
}

// JCPClassBudget is a grant's budget of one device class, in µJ.
// Remaining is Ceiling − Reserved − Spent, floored at 0.
type JCPClassBudget struct {
	Class       string `json:"class"`
	CeilingUJ   uint64 `json:"ceiling_uj"`
	ReservedUJ  uint64 `json:"reserved_uj"`
	SpentUJ     uint64 `json:"spent_uj"`
	RemainingUJ uint64 `json:"remaining_uj"`
}

// JCPBudget is one grant's budget after the ledger.
type JCPBudget struct {
	Grant  string `json:"grant"`
	Parent string `json:"parent,omitempty"`
	// Admitted is false for a grant the ledger has not seen: its own
	// ceilings, nothing reserved or spent.
	Admitted bool             `json:"admitted"`
	Classes  []JCPClassBudget `json:"classes"`
	Runs     uint64           `json:"runs"`    // reservations on its subtree
	Revoked  bool             `json:"revoked"` // it or an ancestor
	Amended  uint64           `json:"amended"` // the last amendment's seq; 0: none
	// Checkpoint is the seq of its audience's last checkpoint (0: none),
	// as the live ledger answers it (a replay's report leaves it out).
	Checkpoint uint64 `json:"checkpoint,omitempty"`
	// Terms are its effective terms: its own, or its last amendment's.
	Terms *JCPTerms `json:"terms,omitempty"`
}

// JCPLedger is the service's budget ledger: every admitted grant's
// budget, parents before children, and its head.
type JCPLedger struct {
	Entries uint64      `json:"entries"`
	Head    string      `json:"head"`
	Grants  []JCPBudget `json:"grants"`
}

// JCPLedgerReport is the ledger replayed from its genesis, every rule
// and signed head checked: OK with the budgets, or the first refusal
// (its Where names the entry).
type JCPLedgerReport struct {
	OK      bool        `json:"ok"`
	Refusal *JCPRefusal `json:"refusal,omitempty"`
	Entries uint64      `json:"entries"`
	Head    string      `json:"head,omitempty"`
	Grants  []JCPBudget `json:"grants,omitempty"`
}

// JCPRecorded is a token the ledger recorded (a revocation, an
// amendment, a checkpoint) and the grant's budget after it.
type JCPRecorded struct {
	Token  string    `json:"token"` // its id
	Grant  string    `json:"grant"`
	Seq    uint64    `json:"seq,omitempty"` // an amendment's or a checkpoint's
	Budget JCPBudget `json:"budget"`
}

// JCPMinted is a child the service minted under a mint policy: its id,
// its audience, and its whole chain, root first.
type JCPMinted struct {
	Grant    string   `json:"grant"`
	Audience string   `json:"audience"`
	Chain    [][]byte `json:"chain"`
}

// JCPNotMinted is a policy that names the event and minted nothing.
type JCPNotMinted struct {
	Policy  string `json:"policy"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// JCPEvent is what a named event minted, and what it did not.
type JCPEvent struct {
	Minted  []JCPMinted    `json:"minted"`
	Refused []JCPNotMinted `json:"refused"`
}

// The request bodies.
type (
	jcpChainSpec struct {
		Chain [][]byte `json:"chain"`
	}
	jcpRevocationSpec struct {
		Chain      [][]byte `json:"chain"`
		Revocation []byte   `json:"revocation"`
	}
	jcpAmendmentSpec struct {
		Chain     [][]byte `json:"chain"`
		Amendment []byte   `json:"amendment"`
	}
	jcpCheckpointSpec struct {
		Chain      [][]byte `json:"chain"`
		Checkpoint []byte   `json:"checkpoint"`
	}
	jcpEventSpec struct {
		Name string `json:"name"`
	}
)

// JCPInfo is the service's host key and the root keys it trusts.
func (c *Client) JCPInfo(ctx context.Context) (*JCPInfo, error) {
	var i JCPInfo
	return &i, c.call(ctx, "GET", "/v1/jcp", nil, &i)
}

// JCPLedger is every grant's budget in the service's ledger, and its
// head (the operator only).
func (c *Client) JCPLedger(ctx context.Context) (*JCPLedger, error) {
	var l JCPLedger
	return &l, c.call(ctx, "GET", "/v1/jcp/ledger", nil, &l)
}

// JCPVerifyLedger replays the service's ledger from its files, offline,
// as `sandbox jcp ledger verify` does (the operator only). A ledger that
// does not verify is a report with its refusal, not an error.
func (c *Client) JCPVerifyLedger(ctx context.Context) (*JCPLedgerReport, error) {
	var r JCPLedgerReport
	return &r, c.call(ctx, "POST", "/v1/jcp/ledger/verify", struct{}{}, &r)
}

// JCPVerifyChain verifies a chain from the service's root keys at the
// service's time, as `sandbox jcp verify` does. A chain that does not
// verify is a JCPChain with its refusal, not an error.
func (c *Client) JCPVerifyChain(ctx context.Context, chain [][]byte) (*JCPChain, error) {
	var v JCPChain
	return &v, c.call(ctx, "POST", "/v1/jcp/chains/verify", jcpChainSpec{chain}, &v)
}

// JCPAdmit verifies a chain and admits its grants (and the policies of
// minted ones) to the ledger: a delegation made on the caller's side
// becomes known before it is presented. A refusal is a denied
// *APIError with its code.
func (c *Client) JCPAdmit(ctx context.Context, chain [][]byte) (*JCPChain, error) {
	var v JCPChain
	return &v, c.call(ctx, "POST", "/v1/jcp/chains", jcpChainSpec{chain}, &v)
}

// JCPBudgets are the budgets of a chain's grants, root first, as
// `sandbox jcp show` gives them.
func (c *Client) JCPBudgets(ctx context.Context, chain [][]byte) ([]JCPBudget, error) {
	var bs []JCPBudget
	return bs, c.call(ctx, "POST", "/v1/jcp/chains/budget", jcpChainSpec{chain}, &bs)
}

// JCPRevoke records a revocation (signed by the issuer of the grant it
// names, or of an ancestor) of a grant of chain.
func (c *Client) JCPRevoke(ctx context.Context, chain [][]byte, revocation []byte) (*JCPRecorded, error) {
	var r JCPRecorded
	return &r, c.call(ctx, "POST", "/v1/jcp/revocations", jcpRevocationSpec{chain, revocation}, &r)
}

// JCPAmend records an amendment (signed by the grant's issuer, only
// narrowing) of a grant of chain.
func (c *Client) JCPAmend(ctx context.Context, chain [][]byte, amendment []byte) (*JCPRecorded, error) {
	var r JCPRecorded
	return &r, c.call(ctx, "POST", "/v1/jcp/amendments", jcpAmendmentSpec{chain, amendment}, &r)
}

// JCPPolicy admits a mint policy: chain ends with it, after the grant
// it holds; its minter is the service's key (JCPInfo.Key).
func (c *Client) JCPPolicy(ctx context.Context, chain [][]byte) (*JCPChain, error) {
	var v JCPChain
	return &v, c.call(ctx, "POST", "/v1/jcp/policies", jcpChainSpec{chain}, &v)
}

// JCPEvent posts the named event: the service mints a child under every
// mint policy that names event:NAME (the operator only).
func (c *Client) JCPEvent(ctx context.Context, name string) (*JCPEvent, error) {
	var e JCPEvent
	return &e, c.call(ctx, "POST", "/v1/jcp/events", jcpEventSpec{name}, &e)
}

// JCPCheckpoint records a checkpoint (signed by the grant's audience) of
// a grant of chain.
func (c *Client) JCPCheckpoint(ctx context.Context, chain [][]byte, checkpoint []byte) (*JCPRecorded, error) {
	var r JCPRecorded
	return &r, c.call(ctx, "POST", "/v1/jcp/checkpoints", jcpCheckpointSpec{chain, checkpoint}, &r)
}
