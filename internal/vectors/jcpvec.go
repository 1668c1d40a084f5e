package vectors

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// KindJCP is the kind of the JCP vectors (positive/jcp.json and
// positive/standing.json).
const KindJCP = "jcp"

// JCPType is the "type" of jcp.json and standing.json.
const JCPType = "sandbox.jcp-vectors/1"

// The kinds of a JCP case (docs/spec/jcp.md § Vectors).
const (
	CaseChain     = "chain"
	CaseDecision  = "decision"
	CaseLedger    = "ledger"
	CaseAmendment = "amendment"
	CaseMint      = "mint"
)

// JCPVectors is jcp.json or standing.json: JCP/1 tokens, chains,
// decisions and ledgers, and what a conforming verifier makes of each,
// under the trusted root keys Roots at the time Now (Unix seconds).
type JCPVectors struct {
	Type  string       `json:"type"`
	Roots []key.Public `json:"roots"`
	Now   int64        `json:"now"`
	Cases []JCPCase    `json:"cases"`
}

// JCPCase is one case: Expect is "ok" or the code of the first refusal.
// Chain, Invocation and Amendments are envelopes in base64url without
// padding; Ledger is ledger entries, one canonical JSON line each.
type JCPCase struct {
	Name       string   `json:"name"`
	About      string   `json:"about"`
	Kind       string   `json:"kind"`
	Chain      []string `json:"chain,omitempty"`
	Invocation string   `json:"invocation,omitempty"`
	Ask        *JCPAsk  `json:"ask,omitempty"`
	Ledger     []string `json:"ledger,omitempty"`
	Amendments []string `json:"amendments,omitempty"`
	Expect     string   `json:"expect"`
}

// JCPAsk is what a decision case's run asks for: its image, the tier
// chosen, the budget it declares per device class of its unit (µJ; 0:
// none declared), its network destinations (HOST:PORT, [IPv6]:PORT), its
// host paths, and the model it says it runs (the gate reads the model
// from the invocation; this repeats it).
type JCPAsk struct {
	Image   addr.Addr         `json:"image"`
	Tier    string            `json:"tier"`
	Classes map[string]uint64 `json:"classes"`
	Hosts   []string          `json:"hosts,omitempty"`
	Paths   []string          `json:"paths,omitempty"`
	Model   string            `json:"model,omitempty"`
}

var b64url = base64.RawURLEncoding.Strict()

// CheckJCP runs every case of a JCP vectors file through this
// implementation and refuses the file at the first case whose outcome is
// not its expectation.
func CheckJCP(b []byte) error {
	var v JCPVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Type != JCPType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", v.Type, JCPType)
	}
	for _, c := range v.Cases {
		got, err := v.Run(c)
		if got != c.Expect {
			return fmt.Errorf("case %s: got %s, want %s (%v)", c.Name, got, c.Expect, err)
		}
	}
	return nil
}

// Run runs one case: "ok", or the code of its refusal and the refusal.
// A case that cannot be run at all (a file the pack could not have made)
// is "error".
func (v *JCPVectors) Run(c JCPCase) (string, error) {
	err := v.run(c)
	switch code := reject.CodeOf(err); {
	case err == nil:
		return ExpectOK, nil
	case code != "":
		return string(code), err
	default:
		return "error", err
	}
}

func (v *JCPVectors) run(c JCPCase) error {
	roots := key.NewTrust(v.Roots...)
	now := time.Unix(v.Now, 0)
	els, err := unb64All(c.Chain, "chain")
	if err != nil {
		return err
	}
	switch c.Kind {
	case CaseChain, CaseMint:
		_, err := jcp.Verify(els, roots, now)
		return err
	case CaseDecision:
		return decide(els, c, roots, now)
	case CaseAmendment:
		return amend(els, c, roots, now)
	case CaseLedger:
		log := []byte(strings.Join(c.Ledger, "\n") + "\n")
		if len(c.Ledger) == 0 {
			log = nil
		}
		_, err := budget.Verify(log, nil, roots, nil)
		return err
	}
	return fmt.Errorf("case %s: no kind %q", c.Name, c.Kind)
}

func unb64All(ss []string, where string) ([][]byte, error) {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		b, err := b64url.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: not base64url without padding: %v", where, i, err)
		}
		out[i] = b
	}
	return out, nil
}

// decide presents the chain with the invocation to a gate whose ledger
// is empty, at now.
func decide(els [][]byte, c JCPCase, roots key.Trust, now time.Time) error {
	if c.Ask == nil {
		return fmt.Errorf("case %s: a decision without its ask", c.Name)
	}
	ask, err := c.Ask.ask()
	if err != nil {
		return fmt.Errorf("case %s: %w", c.Name, err)
	}
	inv, err := b64url.DecodeString(c.Invocation)
	if err != nil {
		return fmt.Errorf("case %s: the invocation is not base64url without padding: %v", c.Name, err)
	}
	dir, err := os.MkdirTemp("", "jcp-vector-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	clock := func() time.Time { return now }
	l, err := budget.Open(filepath.Join(dir, "ledger"), roots, key.Private{}, clock)
	if err != nil {
		return err
	}
	defer l.Close()
	g := &gate.Gate{Ledger: l, Key: jcpKey("gate host"), Roots: roots, Clock: clock}
	_, err = g.Decide(gate.Presentation{Chain: els, Invocation: inv}, ask, now.Add(time.Hour))
	return err
}

func (a *JCPAsk) ask() (jcp.Ask, error) {
	t, err := tier.Parse(a.Tier)
	if err != nil {
		return jcp.Ask{}, err
	}
	out := jcp.Ask{Image: a.Image, Model: a.Model, Tier: t, Paths: a.Paths, Budgets: map[device.Class]energy.Microjoules{}}
	for _, c := range device.Classes {
		if uj, ok := a.Classes[string(c)]; ok {
			out.Classes = append(out.Classes, c)
			out.Budgets[c] = energy.Microjoules(uj)
		}
	}
	if len(out.Classes) != len(a.Classes) {
		return jcp.Ask{}, fmt.Errorf("classes %v: not device classes", a.Classes)
	}
	for _, h := range a.Hosts {
		d, err := parseDest(h)
		if err != nil {
			return jcp.Ask{}, err
		}
		out.Hosts = append(out.Hosts, d)
	}
	return out, nil
}

// parseDest reads a destination: HOST:PORT, or [IPv6]:PORT.
func parseDest(s string) (jcp.Dest, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return jcp.Dest{}, fmt.Errorf("destination %q: HOST:PORT", s)
	}
	host, port := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return jcp.Dest{}, fmt.Errorf("destination %q: port 1 to 65535", s)
	}
	return jcp.Dest{Host: host, Port: n}, nil
}

// amend verifies the chain at now, admits its tokens to an empty ledger
// and records each amendment, in order, of the chain's last grant.
func amend(els [][]byte, c JCPCase, roots key.Trust, now time.Time) error {
	ch, err := jcp.Verify(els, roots, now)
	if err != nil {
		return err
	}
	var lines []string
	for _, b := range els {
		lines = append(lines, tokenLine("admit", b))
	}
	ams, err := unb64All(c.Amendments, "amendments")
	if err != nil {
		return err
	}
	for i, b := range ams {
		where := fmt.Sprintf("amendments[%d]", i)
		t, err := jcp.Open(b)
		if err != nil {
			return reject.In(where, err)
		}
		if t.Amendment == nil {
			return reject.New(reject.Invalid, where, "a %s, not an amendment", t.Type)
		}
		if t.Amendment.Grant != ch.Leaf().ID {
			return reject.New(reject.BrokenChain, where+".grant", "amends %s, not the chain's last grant", t.Amendment.Grant)
		}
		lines = append(lines, tokenLine("amend", b))
	}
	_, err = budget.Verify([]byte(strings.Join(lines, "\n")+"\n"), nil, roots, nil)
	return err
}

// jcpKey is a principal of the vectors: its seed the BLAKE3 of its name.
func jcpKey(name string) key.Private {
	a := addr.Of([]byte("sandbox jcp vectors: " + name))
	k, err := key.FromSeed(a[:])
	if err != nil {
		panic(err)
	}
	return k
}

// nonceOf is a fixed nonce: the first 16 bytes of the BLAKE3 of label.
func nonceOf(label string) []byte {
	a := addr.Of([]byte("sandbox jcp vectors nonce: " + label))
	return bytes.Clone(a[:16])
}

// Ledger lines, as the ledger writes them (canonical JSON).

func tokenLine(op string, b []byte) string {
	return mustLine(map[string]any{"op": op, "token": b64url.EncodeToString(b)})
}

func mustLine(m map[string]any) string {
	b, err := jcs.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func nsText(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func ids(ts ...*jcp.Token) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID.String()
	}
	return out
}

var errJCP = errors.New("vectors: a JCP vector could not be made")

func sortAddrs(as ...addr.Addr) []addr.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, func(a, b addr.Addr) int { return bytes.Compare(a[:], b[:]) })
	return out
}
