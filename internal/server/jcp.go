package server

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// JCP through the API (docs/api.md, "JCP"): the operations of `sandbox
// jcp`. Every token is signed by its principal on the caller's side; the
// service verifies what it is given and records it through its gate's
// ledger, which checks each token's signature and rule: a caller cannot
// forge a revocation or an amendment, whoever it is. A caller acts on the
// chains it presents; what needs no chain (the whole ledger, its
// verification, posting an event that mints under anyone's policy) is the
// operator's alone.

// Bounds of a JCP request.
const (
	// MaxJCPBody bounds a JCP request's body: a chain of the most
	// elements, each of the largest token, and one token more, in base64.
	MaxJCPBody = (jcp.MaxDepth+2)*(jcp.MaxToken/3+1)*4 + 64<<10
	// MaxEventName bounds an event's name.
	MaxEventName = 256
)

func (s *Server) jcpRoutes(mux *routes) {
	mux.HandleFunc("GET /v1/jcp", answer(s.jcpInfo))
	mux.HandleFunc("GET /v1/jcp/ledger", answer(s.jcpLedger))
	mux.HandleFunc("POST /v1/jcp/ledger/verify", answer(s.jcpVerifyLedger))
	mux.HandleFunc("POST /v1/jcp/chains", answer(s.jcpAdmit))
	mux.HandleFunc("POST /v1/jcp/chains/verify", answer(s.jcpVerifyChain))
	mux.HandleFunc("POST /v1/jcp/chains/budget", answer(s.jcpBudgets))
	mux.HandleFunc("POST /v1/jcp/revocations", answer(s.jcpRevoke))
	mux.HandleFunc("POST /v1/jcp/amendments", answer(s.jcpAmend))
	mux.HandleFunc("POST /v1/jcp/policies", answer(s.jcpPolicy))
	mux.HandleFunc("POST /v1/jcp/events", answer(s.jcpEvent))
	mux.HandleFunc("POST /v1/jcp/checkpoints", answer(s.jcpCheckpoint))
}

// answer serves f: its value as JSON (200), or its error.
func answer(f func(http.ResponseWriter, *http.Request) (any, error)) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := f(w, r)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, v)
	}
}

// operator says whether r's caller is the service's operator: its own
// user on the unix socket, not holding itself to a narrower policy.
func operator(r *http.Request) bool {
	return owner(r) == host.LocalOwner && len(authority.Narrowings(r.Context())) == 0
}

func onlyOperator(r *http.Request, what string) error {
	if operator(r) {
		return nil
	}
	return &deniedError{fmt.Sprintf("only the service's operator (its own user on its socket, not narrowed) may %s; a caller acts on the chains it presents", what)}
}

// jcpError is a JCP refusal as the caller gets it: invalid (400) for
// bytes that do not open as what the field wants, denied (403) for a
// chain or token a rule refuses. Its refusal code is the answer's code.
type jcpError struct {
	category string
	err      error
}

func (e *jcpError) Error() string { return e.err.Error() }
func (e *jcpError) Unwrap() error { return e.err }

// Category is the error's category in the one map (internal/errs).
func (e *jcpError) Category() string { return e.category }

func jcpInvalid(field string, err error) error {
	return &jcpError{"invalid", fmt.Errorf("field %q: %w", field, err)}
}

// jcpDenied is a refusal by a rule of JCP; an error that is not one (the
// ledger could not write) is the host's failure, and stays as it is.
func jcpDenied(err error) error {
	if reject.CodeOf(err) == "" {
		return err
	}
	return &jcpError{"denied", fmt.Errorf("JCP: refused: %w", err)}
}

// The request bodies: envelopes in standard base64, decoded here so that
// an error names its field.
type (
	jcpChainIn struct {
		Chain []string `json:"chain"`
	}
	jcpRevocationIn struct {
		Chain      []string `json:"chain"`
		Revocation string   `json:"revocation"`
	}
	jcpAmendmentIn struct {
		Chain     []string `json:"chain"`
		Amendment string   `json:"amendment"`
	}
	jcpCheckpointIn struct {
		Chain      []string `json:"chain"`
		Checkpoint string   `json:"checkpoint"`
	}
	jcpEventIn struct {
		Name string `json:"name"`
	}
)

// envelope decodes one base64 envelope, at most jcp.MaxToken bytes.
func envelope(field, s string) ([]byte, error) {
	switch {
	case s == "":
		return nil, badRequest(fmt.Sprintf("field %q: required: a COSE_Sign1 envelope, in base64", field))
	case len(s) > base64.StdEncoding.EncodedLen(jcp.MaxToken):
		return nil, badRequest(fmt.Sprintf("field %q: %d characters of base64; a token is at most %d bytes", field, len(s), jcp.MaxToken))
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("field %q: not standard base64: %v", field, err))
	}
	if len(b) > jcp.MaxToken {
		return nil, badRequest(fmt.Sprintf("field %q: %d bytes; a token is at most %d", field, len(b), jcp.MaxToken))
	}
	return b, nil
}

// envelopes decodes a chain's envelopes: 1 to max of them.
func envelopes(field string, in []string, max int) ([][]byte, error) {
	if len(in) == 0 || len(in) > max {
		return nil, badRequest(fmt.Sprintf("field %q: %d elements; a chain has 1 to %d, root first", field, len(in), max))
	}
	out := make([][]byte, len(in))
	for i, s := range in {
		b, err := envelope(fmt.Sprintf("%s[%d]", field, i), s)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// open opens one token from untrusted bytes, of type want ("" any).
func open(field string, b []byte, want string) (*jcp.Token, error) {
	t, err := jcp.Open(b)
	if err != nil {
		return nil, jcpInvalid(field, err)
	}
	if want != "" && t.Type != want {
		return nil, jcpInvalid(field, reject.New(reject.Invalid, "protected.content_type", "a %s; want a %s", t.Type, want))
	}
	return t, nil
}

// openChain opens each element of a chain, each a grant or a mint
// policy; it verifies nothing between them.
func openChain(field string, els [][]byte) ([]*jcp.Token, error) {
	ts := make([]*jcp.Token, len(els))
	for i, b := range els {
		f := fmt.Sprintf("%s[%d]", field, i)
		t, err := open(f, b, "")
		if err != nil {
			return nil, err
		}
		if t.Grant == nil && t.Policy == nil {
			return nil, jcpInvalid(f, reject.New(reject.Invalid, "protected.content_type", "a %s in a chain of grants", t.Type))
		}
		ts[i] = t
	}
	return ts, nil
}

// chainIn reads a body whose chain ends with a grant, its tokens opened.
func chainIn(field string, in []string) ([][]byte, []*jcp.Token, error) {
	els, err := envelopes(field, in, jcp.MaxDepth)
	if err != nil {
		return nil, nil, err
	}
	ts, err := openChain(field, els)
	if err != nil {
		return nil, nil, err
	}
	if ts[len(ts)-1].Grant == nil {
		return nil, nil, jcpInvalid(fmt.Sprintf("%s[%d]", field, len(ts)-1), reject.New(reject.BrokenChain, "", "a chain ends with the grant it presents, not a mint policy"))
	}
	return els, ts, nil
}

func decodeJCP(w http.ResponseWriter, r *http.Request, v any) error {
	return decode(w, r, v, MaxJCPBody)
}

func (s *Server) roots() (key.Trust, error) {
	ks, err := s.Live.JCPRootKeys()
	if err != nil {
		return key.Trust{}, fmt.Errorf("JCP roots: %w", err)
	}
	return key.NewTrust(ks...), nil
}

func (s *Server) jcpInfo(_ http.ResponseWriter, _ *http.Request) (any, error) {
	ks, err := s.Live.JCPRootKeys()
	if err != nil {
		return nil, fmt.Errorf("JCP roots: %w", err)
	}
	out := client.JCPInfo{Key: s.Live.Key.Public().String(), Roots: []string{}}
	for _, k := range ks {
		out.Roots = append(out.Roots, k.String())
	}
	return out, nil
}

func (s *Server) jcpLedger(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := onlyOperator(r, "list the whole ledger"); err != nil {
		return nil, err
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	return JCPLedger(g.Ledger), nil
}

// JCPLedger is a ledger's every grant's budget, parents before
// children, and its head: GET /v1/jcp/ledger, and `sandbox jcp ledger`
// without a service.
func JCPLedger(l *budget.Ledger) client.JCPLedger {
	n, head := l.Head()
	out := client.JCPLedger{Entries: n, Head: head.String(), Grants: []client.JCPBudget{}}
	for _, b := range l.Tree() {
		out.Grants = append(out.Grants, budgetOf(b, true, l.Checkpoints(b.Grant), effective(l, b.Grant)))
	}
	return out
}

// effective is an admitted grant's effective terms, for people.
func effective(l *budget.Ledger, id addr.Addr) *client.JCPTerms {
	t, ok := l.Effective(id)
	if !ok {
		return nil
	}
	tm := termsOf(t)
	return &tm
}

// jcpVerifyLedger replays the ledger's files as `sandbox jcp ledger
// verify` does: the signed heads are read first, then the log, whose
// final line a write in flight may have left without its newline (it is
// cut: what is verified is the log up to there, which every head signed
// before it covers).
func (s *Server) jcpVerifyLedger(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := onlyOperator(r, "verify the whole ledger"); err != nil {
		return nil, err
	}
	if err := decodeEmpty(w, r); err != nil {
		return nil, err
	}
	trust, err := s.roots()
	if err != nil {
		return nil, err
	}
	if sh := s.Live.SharedLedger; sh != nil {
		log, _, err := sh.Bytes(r.Context())
		if err != nil {
			return nil, err
		}
		return ledgerReport(log, nil, trust, nil)
	}
	return VerifyJCPLedger(s.Live.JCPPath(host.JCPLedger), trust, s.Live.Key.Public())
}

// VerifyJCPLedger replays the ledger at path and its signed heads from
// their files, a final line a write in flight left without its newline
// cut: POST /v1/jcp/ledger/verify, and `sandbox jcp ledger verify`.
func VerifyJCPLedger(path string, trust key.Trust, signer key.Public) (client.JCPLedgerReport, error) {
	heads, err := os.ReadFile(path + ".heads")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return client.JCPLedgerReport{}, err
	}
	log, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return client.JCPLedgerReport{}, err
	}
	log = log[:bytes.LastIndexByte(log, '\n')+1]
	return ledgerReport(log, heads, trust, &signer)
}

// ledgerReport replays a ledger's log and signed heads (budget.Verify).
func ledgerReport(log, heads []byte, trust key.Trust, signer *key.Public) (client.JCPLedgerReport, error) {
	st, err := budget.Verify(log, heads, trust, signer)
	if err != nil {
		ref := refusalOf(err)
		if ref == nil {
			return client.JCPLedgerReport{}, err
		}
		return client.JCPLedgerReport{Refusal: ref}, nil
	}
	n, head := st.Head()
	out := client.JCPLedgerReport{OK: true, Entries: n, Head: head.String(), Grants: []client.JCPBudget{}}
	for _, b := range st.Tree() {
		var terms *client.JCPTerms
		if t, ok := st.Effective(b.Grant); ok {
			tm := termsOf(t)
			terms = &tm
		}
		out.Grants = append(out.Grants, budgetOf(b, true, 0, terms))
	}
	return out, nil
}

// decodeEmpty reads a body that carries nothing: none, or {}.
func decodeEmpty(w http.ResponseWriter, r *http.Request) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		return decodeError(err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return decodeBytes(b, &struct{}{})
}

// refusalOf is err as a refusal, nil when it is not one.
func refusalOf(err error) *client.JCPRefusal {
	var re *reject.Error
	if !errors.As(err, &re) {
		return nil
	}
	return &client.JCPRefusal{Code: string(re.Code), Where: re.Where, Detail: re.Detail, Message: err.Error()}
}

func (s *Server) jcpVerifyChain(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpChainIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	els, err := envelopes("chain", in.Chain, jcp.MaxDepth)
	if err != nil {
		return nil, err
	}
	trust, err := s.roots()
	if err != nil {
		return nil, err
	}
	ch, err := jcp.Verify(els, trust, s.Live.Now())
	if err != nil {
		ref := refusalOf(err)
		if ref == nil {
			return nil, err
		}
		return client.JCPChain{Refusal: ref}, nil
	}
	return chainOf(ch), nil
}

// verified verifies a chain against the gate's roots at the host's time:
// a refusal is denied.
func (s *Server) verified(g *gate.Gate, els [][]byte) (*jcp.Chain, error) {
	ch, err := jcp.Verify(els, g.RootKeys(), s.Live.Now())
	if err != nil {
		return nil, jcpDenied(err)
	}
	return ch, nil
}

// tokens are a verified chain's tokens as the ledger admits them: each
// minted grant's policy before it.
func tokens(ch *jcp.Chain) []*jcp.Token {
	var ts []*jcp.Token
	for i, t := range ch.Grants {
		if ch.Policies[i] != nil {
			ts = append(ts, ch.Policies[i])
		}
		ts = append(ts, t)
	}
	return ts
}

func (s *Server) jcpAdmit(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpChainIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	els, _, err := chainIn("chain", in.Chain)
	if err != nil {
		return nil, err
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	ch, err := s.verified(g, els)
	if err != nil {
		return nil, err
	}
	if err := g.Ledger.Admit(tokens(ch)...); err != nil {
		return nil, jcpDenied(err)
	}
	return chainOf(ch), nil
}

func (s *Server) jcpBudgets(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpChainIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	_, ts, err := chainIn("chain", in.Chain)
	if err != nil {
		return nil, err
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	out := []client.JCPBudget{}
	for _, t := range ts {
		if t.Grant != nil {
			out = append(out, JCPBudget(g.Ledger, t))
		}
	}
	return out, nil
}

// JCPBudget is a grant's budget in the ledger, with its effective
// terms; an unseen grant's is its own ceilings and terms, nothing
// reserved or spent: POST /v1/jcp/chains/budget, and `sandbox jcp show`.
func JCPBudget(l *budget.Ledger, t *jcp.Token) client.JCPBudget {
	if b, ok := l.Budget(t.ID); ok {
		return budgetOf(b, true, l.Checkpoints(t.ID), effective(l, t.ID))
	}
	b := budget.Budget{Grant: t.ID, Parent: t.Grant.Parent}
	tm := t.Grant.Terms()
	for _, c := range tm.Classes() {
		b.Classes = append(b.Classes, budget.ClassBudget{Class: c, Ceiling: tm.Ceilings[c], Remaining: tm.Ceilings[c]})
	}
	terms := termsOf(tm)
	return budgetOf(b, false, 0, &terms)
}

// record admits a chain's tokens (time is not checked: a revocation of
// an expired grant is still one), then has the ledger record tok; the
// answer is the grant's budget after it.
func (s *Server) record(w http.ResponseWriter, r *http.Request, chain []string, field, b64, typ string, rec func(*budget.Ledger, *jcp.Token) error) (any, error) {
	_, ts, err := chainIn("chain", chain)
	if err != nil {
		return nil, err
	}
	b, err := envelope(field, b64)
	if err != nil {
		return nil, err
	}
	tok, err := open(field, b, typ)
	if err != nil {
		return nil, err
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	if err := g.Ledger.Admit(ts...); err != nil {
		return nil, jcpDenied(err)
	}
	if err := rec(g.Ledger, tok); err != nil {
		return nil, jcpDenied(err)
	}
	out := client.JCPRecorded{Token: tok.ID.String()}
	var grant *jcp.Token
	switch {
	case tok.Revocation != nil:
		grant, _ = g.Ledger.Token(tok.Revocation.Grant)
	case tok.Amendment != nil:
		grant, _ = g.Ledger.Token(tok.Amendment.Grant)
		out.Seq = tok.Amendment.Seq
	case tok.Checkpoint != nil:
		grant, _ = g.Ledger.Token(tok.Checkpoint.Grant)
		out.Seq = tok.Checkpoint.Seq
	}
	if grant != nil && grant.Grant != nil {
		out.Grant, out.Budget = grant.ID.String(), JCPBudget(g.Ledger, grant)
	}
	return out, nil
}

func (s *Server) jcpRevoke(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpRevocationIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	return s.record(w, r, in.Chain, "revocation", in.Revocation, jcp.TypeRevocation, (*budget.Ledger).Revoke)
}

func (s *Server) jcpAmend(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpAmendmentIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	return s.record(w, r, in.Chain, "amendment", in.Amendment, jcp.TypeAmendment, (*budget.Ledger).Amend)
}

func (s *Server) jcpCheckpoint(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpCheckpointIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	return s.record(w, r, in.Chain, "checkpoint", in.Checkpoint, jcp.TypeCheckpoint, (*budget.Ledger).Checkpoint)
}

// jcpPolicy admits a mint policy: the chain of the grant it holds, then
// the policy, which this service's key mints under.
func (s *Server) jcpPolicy(w http.ResponseWriter, r *http.Request) (any, error) {
	var in jcpChainIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	els, err := envelopes("chain", in.Chain, jcp.MaxDepth+1)
	if err != nil {
		return nil, err
	}
	ts, err := openChain("chain", els)
	if err != nil {
		return nil, err
	}
	last := len(ts) - 1
	field := fmt.Sprintf("chain[%d]", last)
	pol := ts[last]
	if pol.Policy == nil || last == 0 {
		return nil, jcpInvalid(field, reject.New(reject.Invalid, "", "want the chain of the grant it holds, then the mint policy"))
	}
	if me := s.Live.Key.Public(); pol.Policy.Minter != me {
		return nil, jcpInvalid(field, reject.New(reject.WrongIssuer, "payload.minter", "%s; this service mints with its host key %s (GET /v1/jcp)", pol.Policy.Minter, me))
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	ch, err := s.verified(g, els[:last])
	if err != nil {
		return nil, err
	}
	mp, held := pol.Policy, ch.Leaf()
	now := uint64(s.Live.Now().Unix())
	switch {
	case mp.Grant != held.ID:
		return nil, jcpDenied(reject.New(reject.BrokenChain, field+".grant", "the policy holds %s, not the chain's last grant %s", mp.Grant, held.ID))
	case mp.Exp <= now:
		return nil, jcpDenied(reject.New(reject.Expired, field+".exp", "expired at %s", time.Unix(int64(mp.Exp), 0).UTC().Format(time.RFC3339)))
	case mp.Iat > now+uint64(jcp.Skew/time.Second):
		return nil, jcpDenied(reject.New(reject.NotYet, field+".iat", "issued in the future"))
	}
	if err := g.Ledger.Admit(append(tokens(ch), pol)...); err != nil {
		return nil, jcpDenied(err)
	}
	out := chainOf(ch)
	out.Policy = pol.ID.String()
	return out, nil
}

func (s *Server) jcpEvent(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := onlyOperator(r, "post an event (it mints under every policy that names it)"); err != nil {
		return nil, err
	}
	var in jcpEventIn
	if err := decodeJCP(w, r, &in); err != nil {
		return nil, err
	}
	if in.Name == "" || len(in.Name) > MaxEventName || !utf8.ValidString(in.Name) || strings.ContainsFunc(in.Name, unicode.IsControl) {
		return nil, badRequest(fmt.Sprintf("field \"name\": want an event's name, 1 to %d bytes of UTF-8 without control characters (a policy names it event:NAME)", MaxEventName))
	}
	g, err := s.Live.Gate()
	if err != nil {
		return nil, err
	}
	minted, refused := g.Event("event:"+in.Name, s.Live.Now())
	out := client.JCPEvent{Minted: []client.JCPMinted{}, Refused: []client.JCPNotMinted{}}
	for _, m := range minted {
		out.Minted = append(out.Minted, client.JCPMinted{Grant: m.Child.ID.String(), Audience: m.Child.Grant.Aud.String(), Chain: m.Elements})
	}
	for _, n := range refused {
		out.Refused = append(out.Refused, client.JCPNotMinted{Policy: n.Policy.String(), Code: string(reject.CodeOf(n.Err)), Message: n.Err.Error()})
	}
	return out, nil
}

// chainOf describes a verified chain.
func chainOf(ch *jcp.Chain) client.JCPChain {
	out := client.JCPChain{OK: true}
	for i, t := range ch.Grants {
		g := t.Grant
		cg := client.JCPGrant{ID: t.ID.String(), Iss: g.Iss.String(), Aud: g.Aud.String(), Iat: g.Iat, Depth: g.Depth, Terms: termsOf(g.Terms())}
		if g.Parent != nil {
			cg.Parent = g.Parent.String()
		}
		if p := ch.Policies[i]; p != nil {
			cg.Policy = p.ID.String()
		}
		out.Grants = append(out.Grants, cg)
	}
	return out
}

func termsOf(t jcp.Terms) client.JCPTerms {
	out := client.JCPTerms{Exp: t.Exp, Images: []string{}, Ceilings: map[string]uint64{}}
	for _, a := range t.Images {
		out.Images = append(out.Images, a.String())
	}
	for c, e := range t.Ceilings {
		out.Ceilings[string(c)] = uint64(e)
	}
	cv := t.Caveats
	out.Caveats = client.JCPCaveats{Models: cv.Models, Tiers: cv.Tiers, Hosts: cv.Hosts, Paths: cv.Paths, Runs: cv.Runs}
	if cv.Rate != nil {
		out.Caveats.Rate = &client.JCPRate{N: cv.Rate.N, Per: cv.Rate.Per}
	}
	return out
}

func budgetOf(b budget.Budget, admitted bool, checkpoint uint64, terms *client.JCPTerms) client.JCPBudget {
	out := client.JCPBudget{Grant: b.Grant.String(), Admitted: admitted, Classes: []client.JCPClassBudget{},
		Runs: b.Runs, Revoked: b.Revoked, Amended: b.Amended, Checkpoint: checkpoint, Terms: terms}
	if b.Parent != nil {
		out.Parent = b.Parent.String()
	}
	for _, c := range b.Classes {
		out.Classes = append(out.Classes, client.JCPClassBudget{Class: string(c.Class), CeilingUJ: uint64(c.Ceiling),
			ReservedUJ: uint64(c.Reserved), SpentUJ: uint64(c.Spent), RemainingUJ: uint64(c.Remaining)})
	}
	return out
}
