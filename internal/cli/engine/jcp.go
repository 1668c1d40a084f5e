package engine

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// JCP: principals, grants and their chains, the budget ledger
// (docs/spec/jcp.md).

const jcpLong = `JCP grants let a principal spend energy on another's behalf: a grant names
who issued it, who it is for (its audience), the images a run may run,
a joule ceiling per device class, an expiry, and caveats (models, tiers,
network hosts, storage paths, a count of runs, a rate). Its audience may
delegate a narrower grant to someone else, and so on: a chain. A run
presented with a chain ('sandbox run --jcp FILE --as NAME') is decided by
the gate before anything runs, and its budget is reserved at every grant of
the chain in the budget ledger, then posted from its sealed receipt; the
decision, allow or deny, is sealed and kept. Anyone can recompute every
grant's budget from the ledger ('sandbox jcp ledger verify').

A principal is an Ed25519 key ('jcp principal new NAME', kept in the state
directory); a chain starts at a root key this host trusts ('jcp roots add').
Chain files hold a CBOR array of COSE_Sign1 envelopes, root first.

Narrowing flags (mint, delegate, amend, policy):
  --image ADDR|FILE       an image a run may run (b3:HEX, or a file hashed); repeatable
  --ceiling CLASS:ENERGY  e.g. cpu:50J, gpu:2kJ; repeatable
  --expires DURATION      from now, e.g. 1h, 7d (delegate and amend: never later than the parent)
  --caveat K=V            models=a,b  tiers=S1,S2  hosts=api.example.com:443,*.internal
                          paths=/data,/srv  runs=N  rate=N/DURATION (e.g. 60/1m)
A delegated grant keeps every term of its parent that the flags do not narrow.`

func jcpCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "jcp",
		Short: "JCP: principals, grants and delegation chains, budgets, the ledger",
		Long:  jcpLong,
	}
	c.AddCommand(jcpPrincipalCmd(g), jcpRootsCmd(g), jcpMintCmd(g), jcpDelegateCmd(g), jcpShowCmd(g), jcpVerifyCmd(g),
		jcpRevokeCmd(g), jcpAmendCmd(g), jcpPolicyCmd(g), jcpEventCmd(g), jcpCheckpointCmd(g), jcpLedgerCmd(g))
	return c
}

func jcpPrincipalCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{Use: "principal", Short: "Principal keys kept in the state directory"}
	var root bool
	mk := &cobra.Command{
		Use:   "new NAME",
		Short: "Make a principal key; print its public key (ed25519:HEX)",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			k, err := d.NewPrincipal(args[0], rand.Reader)
			if err != nil {
				return errs.Usage{Err: err}
			}
			if root {
				if err := addRoot(d, k.Public()); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.Public())
			return nil
		},
	}
	mk.Flags().BoolVar(&root, "root", false, "also trust it as a root: chains may start from it on this host")
	ls := &cobra.Command{
		Use:   "list",
		Short: "List the principal keys: NAME, public key, whether this host trusts it as a root",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			names, err := d.Principals()
			if err != nil {
				return err
			}
			roots, err := rootKeys(d)
			if err != nil {
				return err
			}
			for _, n := range names {
				k, err := d.Principal(n)
				if err != nil {
					return err
				}
				r := ""
				if slices.Contains(roots, k.Public()) {
					r = "  root"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s%s\n", n, k.Public(), r)
			}
			return nil
		},
	}
	c.AddCommand(mk, ls)
	return c
}

func rootsPath(d *state.Dir) string { return d.Path(host.JCPDir, host.JCPRoots) }

func rootKeys(d *state.Dir) ([]key.Public, error) {
	ks, err := key.ParseTrustArg(rootsPath(d))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return ks, err
}

func addRoot(d *state.Dir, k key.Public) error {
	ks, err := rootKeys(d)
	if err != nil {
		return err
	}
	if slices.Contains(ks, k) {
		return nil
	}
	var b bytes.Buffer
	for _, x := range append(ks, k) {
		fmt.Fprintln(&b, x)
	}
	if err := os.MkdirAll(d.Path(host.JCPDir), 0o700); err != nil {
		return err
	}
	return safefile.Write(rootsPath(d), b.Bytes(), 0o600)
}

func jcpRootsCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "roots [add NAME|KEY]...",
		Short: "List the root keys chains may start from on this host, or add one",
		Long:  "With no arguments, list the trusted roots (STATE/jcp/roots). 'add NAME|KEY' trusts a\nprincipal kept here, or a public key (ed25519:HEX), as a root.",
		Args:  cli.UsageArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			if len(args) > 0 {
				if args[0] != "add" || len(args) < 2 {
					return errs.Usage{Err: errors.New("usage: sandbox jcp roots [add NAME|KEY...]")}
				}
				for _, a := range args[1:] {
					k, err := principalKey(d, a)
					if err != nil {
						return err
					}
					if err := addRoot(d, k); err != nil {
						return err
					}
				}
			}
			ks, err := rootKeys(d)
			if err != nil {
				return err
			}
			for _, k := range ks {
				fmt.Fprintln(cmd.OutOrStdout(), k)
			}
			return nil
		},
	}
	return c
}

// principalKey is a principal kept here by NAME, or a public key.
func principalKey(d *state.Dir, s string) (key.Public, error) {
	if strings.HasPrefix(s, key.PublicPrefix) {
		k, err := key.ParsePublic(s)
		if err != nil {
			return k, errs.Usage{Err: err}
		}
		return k, nil
	}
	k, err := d.Principal(s)
	if err != nil {
		return key.Public{}, errs.Usage{Err: err}
	}
	return k.Public(), nil
}

// termFlags are the narrowing flags.
type termFlags struct {
	images   []string
	ceilings []string
	expires  time.Duration
	depth    int
	caveats  []string
}

func (f *termFlags) add(c *cobra.Command, depth bool) {
	c.Flags().StringArrayVar(&f.images, "image", nil, "an image a run may run: b3:HEX, or a file (hashed); repeatable")
	c.Flags().StringArrayVar(&f.ceilings, "ceiling", nil, "a joule ceiling, CLASS:ENERGY (cpu:50J); repeatable")
	c.Flags().DurationVar(&f.expires, "expires", 0, "expiry, from now")
	c.Flags().StringArrayVar(&f.caveats, "caveat", nil, "a caveat K=V: models=, tiers=, hosts=, paths= (comma-separated), runs=N, rate=N/DURATION; repeatable")
	if depth {
		c.Flags().IntVar(&f.depth, "depth", -1, "how many more delegations may follow below (default: the most the parent allows; 3 for a root)")
	}
}

// apply narrows base by the flags (base's terms where a flag is absent).
func (f *termFlags) apply(base jcp.Terms, now time.Time) (jcp.Terms, error) {
	t := base
	if len(f.images) > 0 {
		t.Images = nil
		for _, s := range f.images {
			a, err := imageAddr(s)
			if err != nil {
				return t, errs.Usage{Err: fmt.Errorf("--image %s: %w", s, err)}
			}
			if !slices.Contains(t.Images, a) {
				t.Images = append(t.Images, a)
			}
		}
		slices.SortFunc(t.Images, func(a, b addr.Addr) int { return bytes.Compare(a[:], b[:]) })
	}
	if len(f.ceilings) > 0 {
		t.Ceilings = map[device.Class]energy.Microjoules{}
		for _, s := range f.ceilings {
			cl, en, ok := strings.Cut(s, ":")
			c, err := device.ParseClass(cl)
			if !ok || err != nil {
				return t, errs.Usage{Err: fmt.Errorf("--ceiling %s: want CLASS:ENERGY, e.g. cpu:50J", s)}
			}
			e, err := energy.Parse(en)
			if err != nil || e == 0 {
				return t, errs.Usage{Err: fmt.Errorf("--ceiling %s: energy %q: want a positive energy, e.g. 50J, 2kJ", s, en)}
			}
			t.Ceilings[c] = e
		}
	}
	if f.expires > 0 {
		t.Exp = uint64(now.Add(f.expires).Unix())
	}
	for _, s := range f.caveats {
		if err := setCaveat(&t.Caveats, s); err != nil {
			return t, errs.Usage{Err: fmt.Errorf("--caveat %s: %w", s, err)}
		}
	}
	return t, nil
}

func imageAddr(s string) (addr.Addr, error) {
	if strings.HasPrefix(s, "b3:") {
		return addr.Parse(s)
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return addr.Addr{}, err
	}
	return addr.Of(b), nil
}

func setCaveat(c *jcp.Caveats, s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || v == "" {
		return errors.New("want K=V")
	}
	list := func() []string {
		l := strings.Split(v, ",")
		sort.Strings(l)
		return slices.Compact(l)
	}
	switch k {
	case "models":
		c.Models = list()
	case "tiers":
		c.Tiers = list()
	case "hosts":
		c.Hosts = list()
	case "paths":
		c.Paths = list()
	case "runs":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return errors.New("runs=N, N at least 1")
		}
		c.Runs = n
	case "rate":
		r, err := parseRate(v)
		if err != nil {
			return err
		}
		c.Rate = &r
	default:
		return fmt.Errorf("no caveat %q: models, tiers, hosts, paths, runs, rate", k)
	}
	return nil
}

func parseRate(v string) (jcp.Rate, error) {
	ns, ds, ok := strings.Cut(v, "/")
	n, err := strconv.ParseUint(ns, 10, 64)
	if !ok || err != nil || n == 0 {
		return jcp.Rate{}, errors.New("rate=N/DURATION, e.g. 60/1m")
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d < time.Second || d%time.Second != 0 {
		return jcp.Rate{}, errors.New("rate=N/DURATION, DURATION whole seconds, e.g. 60/1m")
	}
	return jcp.Rate{N: n, Per: uint64(d / time.Second)}, nil
}

// readChain reads a chain file, opening each element (not verifying it).
func readChain(p string) ([][]byte, []*jcp.Token, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, err
	}
	els, err := jcp.DecodeChain(b)
	if err != nil {
		return nil, nil, errs.Usage{Err: fmt.Errorf("%s: %w", p, err)}
	}
	if len(els) == 0 {
		return nil, nil, errs.Usage{Err: fmt.Errorf("%s: an empty chain", p)}
	}
	var ts []*jcp.Token
	for i, e := range els {
		t, err := jcp.Open(e)
		if err != nil {
			return nil, nil, errs.Usage{Err: fmt.Errorf("%s: element %d: %w", p, i, err)}
		}
		ts = append(ts, t)
	}
	if ts[len(ts)-1].Grant == nil {
		return nil, nil, errs.Usage{Err: fmt.Errorf("%s: does not end with a grant", p)}
	}
	return els, ts, nil
}

func writeChain(w io.Writer, out string, els [][]byte, leaf *jcp.Token) error {
	if out == "" {
		return errs.Usage{Err: errors.New("say where to write the chain: -o FILE")}
	}
	if err := safefile.Write(out, jcp.EncodeChain(els), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s  grant %s for %s, %d element(s)\n", out, leaf.ID, leaf.Grant.Aud, len(els))
	return nil
}

func jcpMintCmd(g *cli.Globals) *cobra.Command {
	var f termFlags
	var from, to, out string
	c := &cobra.Command{
		Use:   "mint --from NAME --to NAME|KEY --image ADDR|FILE... --ceiling CLASS:ENERGY... [--expires DUR] [--depth N] [--caveat K=V]... -o FILE",
		Short: "Issue a root grant from a principal kept here",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			k, err := d.Principal(from)
			if err != nil {
				return errs.Usage{Err: err}
			}
			aud, err := principalKey(d, to)
			if err != nil {
				return err
			}
			if len(f.images) == 0 || len(f.ceilings) == 0 {
				return errs.Usage{Err: errors.New("a root grant names its images (--image) and its ceilings (--ceiling)")}
			}
			now := time.Now()
			if f.expires == 0 {
				f.expires = 24 * time.Hour
			}
			t, err := f.apply(jcp.Terms{}, now)
			if err != nil {
				return err
			}
			depth := uint64(3)
			if f.depth >= 0 {
				depth = uint64(f.depth)
			}
			gr := &jcp.Grant{Aud: aud, Iat: uint64(now.Unix()), Exp: t.Exp, Depth: depth, Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats}
			tok, err := jcp.Seal(gr, k)
			if err != nil {
				return errs.Usage{Err: err}
			}
			return writeChain(cmd.OutOrStdout(), out, [][]byte{tok.Bytes}, tok)
		},
	}
	f.add(c, true)
	c.Flags().StringVar(&from, "from", "", "the issuer: a principal kept here")
	c.Flags().StringVar(&to, "to", "", "the audience: a principal kept here, or ed25519:HEX")
	c.Flags().StringVarP(&out, "output", "o", "", "the chain file to write")
	c.MarkFlagRequired("from")
	c.MarkFlagRequired("to")
	return c
}

func jcpDelegateCmd(g *cli.Globals) *cobra.Command {
	var f termFlags
	var from, to, out string
	c := &cobra.Command{
		Use:   "delegate FILE --from NAME --to NAME|KEY [narrowing flags] -o FILE",
		Short: "Delegate the last grant of a chain: a narrower child, from its audience",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			els, ts, err := readChain(args[0])
			if err != nil {
				return err
			}
			k, err := d.Principal(from)
			if err != nil {
				return errs.Usage{Err: err}
			}
			aud, err := principalKey(d, to)
			if err != nil {
				return err
			}
			parent := ts[len(ts)-1]
			if k.Public() != parent.Grant.Aud {
				return errs.Usage{Err: fmt.Errorf("%s is not the audience of %s (%s): only its audience may delegate it", from, parent.ID, parent.Grant.Aud)}
			}
			now := time.Now()
			t, err := f.apply(parent.Grant.Terms(), now)
			if err != nil {
				return err
			}
			if parent.Grant.Depth == 0 {
				return errs.Usage{Err: fmt.Errorf("%s may not be delegated (depth 0)", parent.ID)}
			}
			depth := parent.Grant.Depth - 1
			if f.depth >= 0 {
				depth = uint64(f.depth)
			}
			gr := &jcp.Grant{Aud: aud, Parent: &parent.ID, Iat: uint64(now.Unix()), Exp: t.Exp, Depth: depth, Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats}
			tok, err := jcp.Seal(gr, k)
			if err != nil {
				return errs.Usage{Err: err}
			}
			// The child must follow its parent as a verifier reads it.
			if err := jcp.Link(parent, nil, tok, "delegate."); err != nil {
				return errs.Usage{Err: err}
			}
			return writeChain(cmd.OutOrStdout(), out, append(els, tok.Bytes), tok)
		},
	}
	f.add(c, true)
	c.Flags().StringVar(&from, "from", "", "the delegator: the parent's audience, a principal kept here")
	c.Flags().StringVar(&to, "to", "", "the audience: a principal kept here, or ed25519:HEX")
	c.Flags().StringVarP(&out, "output", "o", "", "the chain file to write")
	c.MarkFlagRequired("from")
	c.MarkFlagRequired("to")
	return c
}

func jcpVerifyCmd(g *cli.Globals) *cobra.Command {
	var roots []string
	c := &cobra.Command{
		Use:   "verify FILE [--root KEY|FILE]...",
		Short: "Verify a chain offline: from the trusted root keys alone",
		Long:  "Verify a chain file (docs/spec/jcp.md §4) from the root keys this host trusts\n(STATE/jcp/roots), or those given with --root. Revocations, amendments and\nbudgets are the ledger's: see 'jcp show'. Exit status 4 when it does not verify.",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			trust, err := jcpTrust(g, roots)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			els, err := jcp.DecodeChain(b)
			if err != nil {
				return err
			}
			ch, err := jcp.Verify(els, trust, time.Now())
			if err != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "FAIL  %s  %v\n", args[0], err)
				return cli.ExitError{Code: 4}
			}
			for i, t := range ch.Grants {
				fmt.Fprintf(cmd.OutOrStdout(), "OK    %s%s  %s → %s  %s\n", strings.Repeat("  ", i), t.ID, t.Grant.Iss.ID().Short(), t.Grant.Aud.ID().Short(), termsLine(t.Grant.Terms()))
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&roots, "root", nil, "a trusted root key, or a file of them (default: STATE/jcp/roots)")
	return c
}

func jcpTrust(g *cli.Globals, roots []string) (key.Trust, error) {
	var ks []key.Public
	if len(roots) == 0 {
		d, err := g.StateDir()
		if err != nil {
			return key.Trust{}, err
		}
		if ks, err = rootKeys(d); err != nil {
			return key.Trust{}, err
		}
	}
	for _, r := range roots {
		k, err := key.ParseTrustArg(r)
		if err != nil {
			return key.Trust{}, errs.Usage{Err: fmt.Errorf("--root %s: %w", r, err)}
		}
		ks = append(ks, k...)
	}
	if len(ks) == 0 {
		return key.Trust{}, errs.Usage{Err: host.ErrNoJCPRoots}
	}
	return key.NewTrust(ks...), nil
}

func termsLine(t jcp.Terms) string {
	var parts []string
	for _, c := range t.Classes() {
		parts = append(parts, fmt.Sprintf("%s≤%s", c, t.Ceilings[c]))
	}
	parts = append(parts, fmt.Sprintf("%d image(s)", len(t.Images)), "until "+time.Unix(int64(t.Exp), 0).UTC().Format(time.RFC3339))
	cv := t.Caveats
	for _, x := range []struct {
		n string
		v []string
	}{{"models", cv.Models}, {"tiers", cv.Tiers}, {"hosts", cv.Hosts}, {"paths", cv.Paths}} {
		if x.v != nil {
			parts = append(parts, x.n+"="+strings.Join(x.v, ","))
		}
	}
	if cv.Runs != 0 {
		parts = append(parts, fmt.Sprintf("runs=%d", cv.Runs))
	}
	if cv.Rate != nil {
		parts = append(parts, fmt.Sprintf("rate=%d/%ds", cv.Rate.N, cv.Rate.Per))
	}
	return strings.Join(parts, "  ")
}

// signedOn runs f with the ledger (the chain in file admitted to it),
// the key of the principal who, and the chain's last grant.
func signedOn(g *cli.Globals, file, who string, f func(h *host.Host, l *budget.Ledger, k key.Private, leaf *jcp.Token) error) error {
	_, ts, err := readChain(file)
	if err != nil {
		return err
	}
	return withLedger(g, func(h *host.Host, l *budget.Ledger) error {
		k, err := h.Store.Dir.Principal(who)
		if err != nil {
			return errs.Usage{Err: err}
		}
		if err := l.Admit(ts...); err != nil {
			return err
		}
		return f(h, l, k, ts[len(ts)-1])
	})
}

// withLedger runs f with this host's gate (its ledger open; the ledger
// is held by one process: a running service holds it).
func withLedger(g *cli.Globals, f func(h *host.Host, l *budget.Ledger) error) error {
	m, err := hostOf(g)
	if err != nil {
		return err
	}
	gt, err := m.Host.Gate()
	if err != nil {
		return err
	}
	return f(m.Host, gt.Ledger)
}

func jcpShowCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show FILE",
		Short: "Show a chain as a tree: each grant's ceiling, reserved, spent and remaining, from the ledger",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, ts, err := readChain(args[0])
			if err != nil {
				return err
			}
			return withLedger(g, func(_ *host.Host, l *budget.Ledger) error {
				var bs []budget.Budget
				for _, t := range ts {
					if t.Grant == nil {
						continue
					}
					b, ok := l.Budget(t.ID)
					if !ok {
						b = unseen(t)
					}
					bs = append(bs, b)
				}
				if asJSON {
					return cli.PrintJSON(cmd.OutOrStdout(), bs)
				}
				printBudgets(cmd.OutOrStdout(), bs)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "the budgets as JSON")
	return c
}

// unseen is the budget of a grant the ledger has not admitted.
func unseen(t *jcp.Token) budget.Budget {
	b := budget.Budget{Grant: t.ID, Parent: t.Grant.Parent}
	tm := t.Grant.Terms()
	for _, c := range tm.Classes() {
		b.Classes = append(b.Classes, budget.ClassBudget{Class: c, Ceiling: tm.Ceilings[c], Remaining: tm.Ceilings[c]})
	}
	return b
}

func printBudgets(w io.Writer, bs []budget.Budget) {
	depth := map[addr.Addr]int{}
	for _, b := range bs {
		n := 0
		if b.Parent != nil {
			n = depth[*b.Parent] + 1
		}
		depth[b.Grant] = n
		ind := strings.Repeat("  ", n)
		state := ""
		if b.Revoked {
			state += "  REVOKED"
		}
		if b.Amended > 0 {
			state += fmt.Sprintf("  amended (seq %d)", b.Amended)
		}
		fmt.Fprintf(w, "%s%s  runs %d%s\n", ind, b.Grant, b.Runs, state)
		for _, c := range b.Classes {
			fmt.Fprintf(w, "%s  %-5s ceiling %s  reserved %s  spent %s  remaining %s\n", ind, c.Class, c.Ceiling, c.Reserved, c.Spent, c.Remaining)
		}
	}
}

func jcpRevokeCmd(g *cli.Globals) *cobra.Command {
	var from string
	c := &cobra.Command{
		Use:   "revoke FILE --from NAME",
		Short: "Revoke the last grant of a chain (and all its descendants), from the next decision on",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signedOn(g, args[0], from, func(_ *host.Host, l *budget.Ledger, k key.Private, leaf *jcp.Token) error {
				rev, err := jcp.Seal(&jcp.Revocation{Grant: leaf.ID, Iat: uint64(time.Now().Unix())}, k)
				if err != nil {
					return err
				}
				if err := l.Revoke(rev); err != nil {
					return errs.Refused{Err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (revocation %s)\n", leaf.ID, rev.ID)
				return nil
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "the revoker: the issuer of the grant or of one of its ancestors, a principal kept here")
	c.MarkFlagRequired("from")
	return c
}

func jcpAmendCmd(g *cli.Globals) *cobra.Command {
	var f termFlags
	var from, out string
	c := &cobra.Command{
		Use:   "amend FILE --from NAME [narrowing flags] [-o FILE]",
		Short: "Tighten a live grant (the chain's last): only its issuer may, and only to narrow",
		Long: `Amend the last grant of a chain: a lower ceiling, an earlier expiry, fewer
images or hosts, tighter caveats. Only the grant's issuer may amend it (never
its audience), and only to tighten; the amendment is recorded in the ledger
and takes effect at the next decision and at the next budget check of a
running run (a running S1 or S5 run is stopped when its tightened budget is
spent). -o also writes the signed amendment to a file.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signedOn(g, args[0], from, func(_ *host.Host, l *budget.Ledger, k key.Private, leaf *jcp.Token) error {
				cur, ok := l.Effective(leaf.ID)
				if !ok {
					cur = leaf.Grant.Terms()
				}
				t, err := f.apply(cur, time.Now())
				if err != nil {
					return err
				}
				seq := uint64(1)
				if b, ok := l.Budget(leaf.ID); ok {
					seq = b.Amended + 1
				}
				am, err := jcp.Seal(&jcp.Amendment{Grant: leaf.ID, Seq: seq, Iat: uint64(time.Now().Unix()), Exp: t.Exp, Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats}, k)
				if err != nil {
					return errs.Usage{Err: err}
				}
				if err := l.Amend(am); err != nil {
					return errs.Refused{Err: err}
				}
				if out != "" {
					if err := safefile.Write(out, am.Bytes, 0o644); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "amended %s (seq %d, amendment %s): %s\n", leaf.ID, seq, am.ID, termsLine(t))
				return nil
			})
		},
	}
	f.add(c, false)
	c.Flags().StringVar(&from, "from", "", "the grant's issuer, a principal kept here")
	c.Flags().StringVarP(&out, "output", "o", "", "also write the signed amendment here")
	c.MarkFlagRequired("from")
	return c
}

func jcpPolicyCmd(g *cli.Globals) *cobra.Command {
	var f termFlags
	var from, to, out, rate string
	var events []string
	var maxN uint64
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "policy FILE --from NAME --to NAME|KEY --event E... --max N --rate N/DUR --ttl DUR [narrowing flags] -o FILE",
		Short: "Make a standing grant: a mint policy that lets the gate mint children of a held grant on events",
		Long: `Sign, as the holder (audience) of the chain's last grant, a mint policy
(docs/spec/jcp.md §6): on each event it names, the gate mints a child of the
held grant for --to, bounded by the narrowing flags (the template) and --ttl,
at most --max in all and at most --rate. Events: event:NAME (posted with
'sandbox jcp event NAME'), pool-claim:POOL, every:SECONDS. The children are
signed by this host's key (the minter). The policy is admitted to the ledger
and written, after the chain, to -o.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			els, ts, err := readChain(args[0])
			if err != nil {
				return err
			}
			r, err := parseRate(rate)
			if err != nil {
				return errs.Usage{Err: fmt.Errorf("--rate: %w", err)}
			}
			if maxN == 0 || ttl < time.Second || len(events) == 0 {
				return errs.Usage{Err: errors.New("a mint policy names its events (--event), a --max of at least 1 and a --ttl of at least 1s")}
			}
			return withLedger(g, func(h *host.Host, l *budget.Ledger) error {
				k, err := h.Store.Dir.Principal(from)
				if err != nil {
					return errs.Usage{Err: err}
				}
				aud, err := principalKey(h.Store.Dir, to)
				if err != nil {
					return err
				}
				held := ts[len(ts)-1]
				now := time.Now()
				t, err := f.apply(held.Grant.Terms(), now)
				if err != nil {
					return err
				}
				evs := slices.Clone(events)
				sort.Strings(evs)
				evs = slices.Compact(evs)
				depth := uint64(0)
				p := &jcp.Policy{Grant: held.ID, Minter: h.Key.Public(), To: aud, Max: maxN, Rate: r, Events: evs,
					Template: jcp.Template{TTL: uint64(ttl / time.Second), Depth: depth, Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats},
					Iat:      uint64(now.Unix()), Exp: t.Exp}
				tok, err := jcp.Seal(p, k)
				if err != nil {
					return errs.Usage{Err: err}
				}
				if err := jcp.PolicyWithin(tok, held, "policy."); err != nil {
					return errs.Usage{Err: err}
				}
				if err := l.Admit(append(ts, tok)...); err != nil {
					return err
				}
				if out == "" {
					return errs.Usage{Err: errors.New("say where to write the policy: -o FILE")}
				}
				if err := safefile.Write(out, jcp.EncodeChain(append(els, tok.Bytes)), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  mint policy %s on %s: at most %d, %d per %ds\n", out, tok.ID, strings.Join(evs, ","), maxN, r.N, r.Per)
				return nil
			})
		},
	}
	f.add(c, false)
	c.Flags().StringVar(&from, "from", "", "the holder of the grant (its audience), a principal kept here")
	c.Flags().StringVar(&to, "to", "", "the audience of every minted child: a principal kept here, or ed25519:HEX")
	c.Flags().StringArrayVar(&events, "event", nil, "an event that mints a child: event:NAME, pool-claim:POOL, every:SECONDS; repeatable")
	c.Flags().Uint64Var(&maxN, "max", 0, "how many children it may mint in all")
	c.Flags().StringVar(&rate, "rate", "", "at most N mints per DURATION: N/DURATION, e.g. 60/1m")
	c.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long each minted child lives")
	c.Flags().StringVarP(&out, "output", "o", "", "where to write the chain with the policy")
	c.MarkFlagRequired("from")
	c.MarkFlagRequired("to")
	c.MarkFlagRequired("rate")
	return c
}

func jcpEventCmd(g *cli.Globals) *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "event NAME [-d DIR]",
		Short: "Post a named event: mint a child under every standing grant that names event:NAME",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLedger(g, func(h *host.Host, l *budget.Ledger) error {
				gt, err := h.Gate()
				if err != nil {
					return err
				}
				minted, refused := gt.Event("event:"+args[0], time.Now())
				for _, m := range minted {
					p := fmt.Sprintf("%s/%s.jcp", dir, m.Leaf().ID.Hex())
					if err := safefile.Write(p, jcp.EncodeChain(m.Elements), 0o644); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "minted %s for %s: %s\n", m.Leaf().ID, m.Leaf().Grant.Aud, p)
				}
				for _, r := range refused {
					fmt.Fprintf(cmd.OutOrStdout(), "not minted under %s: %v\n", r.Policy, r.Err)
				}
				return nil
			})
		},
	}
	c.Flags().StringVarP(&dir, "dir", "d", ".", "where to write the minted chains")
	return c
}

func jcpCheckpointCmd(g *cli.Globals) *cobra.Command {
	var as, run, st string
	c := &cobra.Command{
		Use:   "checkpoint FILE --as NAME --run ADDR [--state ADDR]",
		Short: "Checkpoint a run under a grant: a signed statement, by the grant's audience, of where its run is",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ra, err := addr.Parse(run)
			if err != nil {
				return errs.Usage{Err: fmt.Errorf("--run: %w", err)}
			}
			return signedOn(g, args[0], as, func(_ *host.Host, l *budget.Ledger, k key.Private, leaf *jcp.Token) error {
				cp := &jcp.Checkpoint{Grant: leaf.ID, Run: ra, Seq: l.Checkpoints(leaf.ID) + 1, Iat: uint64(time.Now().Unix())}
				if st != "" {
					sa, err := addr.Parse(st)
					if err != nil {
						return errs.Usage{Err: fmt.Errorf("--state: %w", err)}
					}
					cp.State = &sa
				}
				tok, err := jcp.Seal(cp, k)
				if err != nil {
					return err
				}
				if err := l.Checkpoint(tok); err != nil {
					return errs.Refused{Err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "checkpoint %s of %s (seq %d) at %s\n", tok.ID, leaf.ID, cp.Seq, ra)
				return nil
			})
		},
	}
	c.Flags().StringVar(&as, "as", "", "the grant's audience, a principal kept here")
	c.Flags().StringVar(&run, "run", "", "the run record head, or the run, it checkpoints")
	c.Flags().StringVar(&st, "state", "", "the address of the state it saved")
	c.MarkFlagRequired("as")
	c.MarkFlagRequired("run")
	return c
}

func jcpLedgerCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ledger [verify]",
		Short: "Show every grant's budget as a tree, or verify the ledger offline from its genesis",
		Long: `Without an argument, print every grant the ledger has admitted as a tree, with
each class's ceiling, reserved, spent and remaining, and the ledger's head.
'verify' replays STATE/jcp/ledger.jsonl from its genesis checking every rule
of docs/spec/jcp.md §7, and every signed head beside it; exit status 4 when
it does not verify.`,
		Args: cli.UsageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && args[0] != "verify" {
				return errs.Usage{Err: fmt.Errorf("unknown argument %q: 'sandbox jcp ledger [verify]'", args[0])}
			}
			if len(args) == 1 {
				return verifyLedger(cmd, g, asJSON)
			}
			return withLedger(g, func(_ *host.Host, l *budget.Ledger) error {
				if asJSON {
					return cli.PrintJSON(cmd.OutOrStdout(), l.Tree())
				}
				printBudgets(cmd.OutOrStdout(), l.Tree())
				n, head := l.Head()
				fmt.Fprintf(cmd.OutOrStdout(), "%d entries; head %s\n", n, head)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "the budgets as JSON")
	return c
}

func verifyLedger(cmd *cobra.Command, g *cli.Globals, asJSON bool) error {
	d, k, err := g.HostKey()
	if err != nil {
		return err
	}
	roots, err := rootKeys(d)
	if err != nil {
		return err
	}
	p := d.Path(host.JCPDir, host.JCPLedger)
	log, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		log = nil
	} else if err != nil {
		return err
	}
	heads, err := os.ReadFile(p + ".heads")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	pub := k.Public()
	st, err := budget.Verify(log, heads, key.NewTrust(roots...), &pub)
	if err != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "FAIL  %s  %v\n", p, err)
		return cli.ExitError{Code: 4}
	}
	if asJSON {
		return cli.PrintJSON(cmd.OutOrStdout(), st.Tree())
	}
	n, head := st.Head()
	fmt.Fprintf(cmd.OutOrStdout(), "OK    %s  %d entries, head %s, every rule of docs/spec/jcp.md §7 and every signed head checked\n", p, n, head)
	printBudgets(cmd.OutOrStdout(), st.Tree())
	return nil
}
