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

func rootKeys(d *state.Dir) ([]key.Public, error) { return host.ReadJCPRoots(rootsPath(d)) }

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
			k, aud, err := fromTo(g, from, to)
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
	issueFlags(c, &f, &from, &to, &out, "the issuer: a principal kept here")
	return c
}

// fromTo are the key of the principal from, kept here, and the public
// key of to (a principal kept here, or ed25519:HEX).
func fromTo(g *cli.Globals, from, to string) (key.Private, key.Public, error) {
	d, err := g.StateDir()
	if err != nil {
		return key.Private{}, key.Public{}, err
	}
	k, err := d.Principal(from)
	if err != nil {
		return key.Private{}, key.Public{}, errs.Usage{Err: err}
	}
	aud, err := principalKey(d, to)
	return k, aud, err
}

// issueFlags are the flags of a command that issues a grant.
func issueFlags(c *cobra.Command, f *termFlags, from, to, out *string, fromUsage string) {
	f.add(c, true)
	c.Flags().StringVar(from, "from", "", fromUsage)
	c.Flags().StringVar(to, "to", "", "the audience: a principal kept here, or ed25519:HEX")
	c.Flags().StringVarP(out, "output", "o", "", "the chain file to write")
	c.MarkFlagRequired("from")
	c.MarkFlagRequired("to")
}

func jcpDelegateCmd(g *cli.Globals) *cobra.Command {
	var f termFlags
	var from, to, out string
	c := &cobra.Command{
		Use:   "delegate FILE --from NAME --to NAME|KEY [narrowing flags] -o FILE",
		Short: "Delegate the last grant of a chain: a narrower child, from its audience",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			els, ts, err := readChain(args[0])
			if err != nil {
				return err
			}
			k, aud, err := fromTo(g, from, to)
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
	issueFlags(c, &f, &from, &to, &out, "the delegator: the parent's audience, a principal kept here")
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
