package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// The commands that read or write the budget ledger act on the running
// service's, through its API, when one answers (the service holds the
// ledger), else on this state directory's, in this process. Tokens are
// signed here either way, with the principal keys kept here: a service
// never holds a principal's key.

// ledgerAt is where the ledger commands act.
type ledgerAt struct {
	cl     *client.Client // the service's; nil: in this process
	h      *host.Host
	l      *budget.Ledger
	minter key.Public // the key that signs what a mint policy mints
}

func openLedger(ctx context.Context, g *cli.Globals) (*ledgerAt, error) {
	cl, _, err := g.Service()
	if err != nil {
		return nil, cli.APIErr(err)
	}
	if cl != nil {
		g.AtEnd(func() { cl.Close() })
		info, err := cl.JCPInfo(ctx)
		if err != nil {
			return nil, cli.APIErr(err)
		}
		k, err := key.ParsePublic(info.Key)
		if err != nil {
			return nil, err
		}
		return &ledgerAt{cl: cl, minter: k}, nil
	}
	m, err := hostOf(g)
	if err != nil {
		return nil, err
	}
	gt, err := m.Host.Gate()
	if err != nil {
		return nil, err
	}
	return &ledgerAt{h: m.Host, l: gt.Ledger, minter: m.Host.Key.Public()}, nil
}

func (a *ledgerAt) budgets(ctx context.Context, els [][]byte, ts []*jcp.Token) ([]client.JCPBudget, error) {
	if a.cl != nil {
		bs, err := a.cl.JCPBudgets(ctx, els)
		return bs, cli.APIErr(err)
	}
	var out []client.JCPBudget
	for _, t := range ts {
		if t.Grant != nil {
			out = append(out, server.JCPBudget(a.l, t))
		}
	}
	return out, nil
}

// record has the ledger record tok (a revocation, an amendment, a
// checkpoint) after the chain els.
func (a *ledgerAt) record(ctx context.Context, els [][]byte, ts []*jcp.Token, tok *jcp.Token) error {
	if a.cl != nil {
		var err error
		switch tok.Type {
		case jcp.TypeRevocation:
			_, err = a.cl.JCPRevoke(ctx, els, tok.Bytes)
		case jcp.TypeAmendment:
			_, err = a.cl.JCPAmend(ctx, els, tok.Bytes)
		case jcp.TypeCheckpoint:
			_, err = a.cl.JCPCheckpoint(ctx, els, tok.Bytes)
		}
		return cli.APIErr(err)
	}
	if err := a.l.Admit(ts...); err != nil {
		return err
	}
	var err error
	switch tok.Type {
	case jcp.TypeRevocation:
		err = a.l.Revoke(tok)
	case jcp.TypeAmendment:
		err = a.l.Amend(tok)
	case jcp.TypeCheckpoint:
		err = a.l.Checkpoint(tok)
	}
	if err != nil {
		return errs.Refused{Err: err}
	}
	return nil
}

// leafBudget is the budget (and effective terms) of a chain's last grant.
func (a *ledgerAt) leafBudget(ctx context.Context, els [][]byte, ts []*jcp.Token) (client.JCPBudget, error) {
	bs, err := a.budgets(ctx, els, ts)
	if err != nil {
		return client.JCPBudget{}, err
	}
	leaf := ts[len(ts)-1].ID.String()
	for _, b := range bs {
		if b.Grant == leaf {
			return b, nil
		}
	}
	return client.JCPBudget{}, fmt.Errorf("no budget for %s", leaf)
}

// signed runs f with the chain in file, the key of the principal who,
// and the ledger.
func signed(cmd *cobra.Command, g *cli.Globals, file, who string, f func(a *ledgerAt, els [][]byte, ts []*jcp.Token, k key.Private) error) error {
	els, ts, err := readChain(file)
	if err != nil {
		return err
	}
	d, err := g.StateDir()
	if err != nil {
		return err
	}
	k, err := d.Principal(who)
	if err != nil {
		return errs.Usage{Err: err}
	}
	a, err := openLedger(cmd.Context(), g)
	if err != nil {
		return err
	}
	return f(a, els, ts, k)
}

func jcpShowCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show FILE",
		Short: "Show a chain as a tree: each grant's ceiling, reserved, spent and remaining, from the ledger",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			els, ts, err := readChain(args[0])
			if err != nil {
				return err
			}
			a, err := openLedger(cmd.Context(), g)
			if err != nil {
				return err
			}
			bs, err := a.budgets(cmd.Context(), els, ts)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), bs)
			}
			printBudgets(cmd.OutOrStdout(), bs)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "the budgets as JSON")
	return c
}

func printBudgets(w io.Writer, bs []client.JCPBudget) {
	depth := map[string]int{}
	for _, b := range bs {
		n := 0
		if b.Parent != "" {
			n = depth[b.Parent] + 1
		}
		depth[b.Grant] = n
		ind := strings.Repeat("  ", n)
		state := ""
		if !b.Admitted {
			state += "  (not yet in the ledger)"
		}
		if b.Revoked {
			state += "  REVOKED"
		}
		if b.Amended > 0 {
			state += fmt.Sprintf("  amended (seq %d)", b.Amended)
		}
		fmt.Fprintf(w, "%s%s  runs %d%s\n", ind, b.Grant, b.Runs, state)
		for _, c := range b.Classes {
			fmt.Fprintf(w, "%s  %-5s ceiling %s  reserved %s  spent %s  remaining %s\n", ind, c.Class,
				energy.Microjoules(c.CeilingUJ), energy.Microjoules(c.ReservedUJ), energy.Microjoules(c.SpentUJ), energy.Microjoules(c.RemainingUJ))
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
			return signed(cmd, g, args[0], from, func(a *ledgerAt, els [][]byte, ts []*jcp.Token, k key.Private) error {
				leaf := ts[len(ts)-1]
				rev, err := jcp.Seal(&jcp.Revocation{Grant: leaf.ID, Iat: uint64(time.Now().Unix())}, k)
				if err != nil {
					return err
				}
				if err := a.record(cmd.Context(), els, ts, rev); err != nil {
					return err
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

// termsOf reads terms as the API gives them.
func termsOf(t client.JCPTerms) (jcp.Terms, error) {
	out := jcp.Terms{Exp: t.Exp, Ceilings: map[device.Class]energy.Microjoules{}}
	for _, s := range t.Images {
		a, err := addr.Parse(s)
		if err != nil {
			return out, err
		}
		out.Images = append(out.Images, a)
	}
	for c, uj := range t.Ceilings {
		dc, err := device.ParseClass(c)
		if err != nil {
			return out, err
		}
		out.Ceilings[dc] = energy.Microjoules(uj)
	}
	cv := t.Caveats
	out.Caveats = jcp.Caveats{Models: cv.Models, Tiers: cv.Tiers, Hosts: cv.Hosts, Paths: cv.Paths, Runs: cv.Runs}
	if cv.Rate != nil {
		out.Caveats.Rate = &jcp.Rate{N: cv.Rate.N, Per: cv.Rate.Per}
	}
	return out, nil
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
			return signed(cmd, g, args[0], from, func(a *ledgerAt, els [][]byte, ts []*jcp.Token, k key.Private) error {
				leaf := ts[len(ts)-1]
				b, err := a.leafBudget(cmd.Context(), els, ts)
				if err != nil {
					return err
				}
				cur := leaf.Grant.Terms()
				if b.Terms != nil {
					if cur, err = termsOf(*b.Terms); err != nil {
						return err
					}
				}
				t, err := f.apply(cur, time.Now())
				if err != nil {
					return err
				}
				am, err := jcp.Seal(&jcp.Amendment{Grant: leaf.ID, Seq: b.Amended + 1, Iat: uint64(time.Now().Unix()), Exp: t.Exp, Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats}, k)
				if err != nil {
					return errs.Usage{Err: err}
				}
				if err := a.record(cmd.Context(), els, ts, am); err != nil {
					return err
				}
				if out != "" {
					if err := safefile.Write(out, am.Bytes, 0o644); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "amended %s (seq %d, amendment %s): %s\n", leaf.ID, b.Amended+1, am.ID, termsLine(t))
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
			cp := &jcp.Checkpoint{Run: ra, Iat: uint64(time.Now().Unix())}
			if st != "" {
				sa, err := addr.Parse(st)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--state: %w", err)}
				}
				cp.State = &sa
			}
			return signed(cmd, g, args[0], as, func(a *ledgerAt, els [][]byte, ts []*jcp.Token, k key.Private) error {
				leaf := ts[len(ts)-1]
				b, err := a.leafBudget(cmd.Context(), els, ts)
				if err != nil {
					return err
				}
				cp.Grant, cp.Seq = leaf.ID, b.Checkpoint+1
				tok, err := jcp.Seal(cp, k)
				if err != nil {
					return err
				}
				if err := a.record(cmd.Context(), els, ts, tok); err != nil {
					return err
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
'sandbox jcp event NAME'), pool-claim:POOL (a claim from that warm pool of a
running service), every:SECONDS (a running service's schedule). The children
are signed by the host's key (the minter: the running service's, else this
state directory's). The policy is admitted to the ledger and written, after
the chain, to -o.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRate(rate)
			if err != nil {
				return errs.Usage{Err: fmt.Errorf("--rate: %w", err)}
			}
			if maxN == 0 || ttl < time.Second || len(events) == 0 || out == "" {
				return errs.Usage{Err: errors.New("a mint policy names its events (--event), a --max of at least 1, a --ttl of at least 1s, and where to write it (-o)")}
			}
			return signed(cmd, g, args[0], from, func(a *ledgerAt, els [][]byte, ts []*jcp.Token, k key.Private) error {
				d, err := g.StateDir()
				if err != nil {
					return err
				}
				aud, err := principalKey(d, to)
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
				p := &jcp.Policy{Grant: held.ID, Minter: a.minter, To: aud, Max: maxN, Rate: r, Events: slices.Compact(evs),
					Template: jcp.Template{TTL: uint64(ttl / time.Second), Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats},
					Iat:      uint64(now.Unix()), Exp: t.Exp}
				tok, err := jcp.Seal(p, k)
				if err != nil {
					return errs.Usage{Err: err}
				}
				if err := jcp.PolicyWithin(tok, held, "policy."); err != nil {
					return errs.Usage{Err: err}
				}
				all := append(slices.Clone(els), tok.Bytes)
				if a.cl != nil {
					if _, err := a.cl.JCPPolicy(cmd.Context(), all); err != nil {
						return cli.APIErr(err)
					}
				} else if err := a.l.Admit(append(ts, tok)...); err != nil {
					return errs.Refused{Err: err}
				}
				if err := safefile.Write(out, jcp.EncodeChain(all), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  mint policy %s on %s: at most %d, %d per %ds, minted by %s\n", out, tok.ID, strings.Join(p.Events, ","), maxN, r.N, r.Per, a.minter)
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
			a, err := openLedger(cmd.Context(), g)
			if err != nil {
				return err
			}
			var ev *client.JCPEvent
			if a.cl != nil {
				if ev, err = a.cl.JCPEvent(cmd.Context(), args[0]); err != nil {
					return cli.APIErr(err)
				}
			} else {
				gt, err := a.h.Gate()
				if err != nil {
					return err
				}
				ev = &client.JCPEvent{}
				minted, notMinted := gt.Event("event:"+args[0], time.Now())
				for _, m := range minted {
					ev.Minted = append(ev.Minted, client.JCPMinted{Grant: m.Child.ID.String(), Audience: m.Child.Grant.Aud.String(), Chain: m.Elements})
				}
				for _, n := range notMinted {
					ev.Refused = append(ev.Refused, client.JCPNotMinted{Policy: n.Policy.String(), Message: n.Err.Error()})
				}
			}
			for _, m := range ev.Minted {
				p := filepath.Join(dir, strings.TrimPrefix(m.Grant, "b3:")+".jcp")
				if err := safefile.Write(p, jcp.EncodeChain(m.Chain), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "minted %s for %s: %s\n", m.Grant, m.Audience, p)
			}
			for _, r := range ev.Refused {
				fmt.Fprintf(cmd.OutOrStdout(), "not minted under %s: %s\n", r.Policy, r.Message)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&dir, "dir", "d", ".", "where to write the minted chains")
	return c
}

func jcpLedgerCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ledger [verify]",
		Short: "Show every grant's budget as a tree, or verify the ledger offline from its genesis",
		Long: `Without an argument, print every grant the ledger has admitted as a tree, with
each class's ceiling, reserved, spent and remaining, and the ledger's head.
'verify' replays the ledger (STATE/jcp/ledger.jsonl, or the running
service's) from its genesis checking every rule of docs/spec/jcp.md §7, and
every signed head beside it; exit status 4 when it does not verify.`,
		Args: cli.UsageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && args[0] != "verify" {
				return errs.Usage{Err: fmt.Errorf("unknown argument %q: 'sandbox jcp ledger [verify]'", args[0])}
			}
			a, err := openLedger(cmd.Context(), g)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return a.verify(cmd, g, asJSON)
			}
			var l client.JCPLedger
			if a.cl != nil {
				lp, err := a.cl.JCPLedger(cmd.Context())
				if err != nil {
					return cli.APIErr(err)
				}
				l = *lp
			} else {
				l = server.JCPLedger(a.l)
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), l)
			}
			printBudgets(cmd.OutOrStdout(), l.Grants)
			fmt.Fprintf(cmd.OutOrStdout(), "%d entries; head %s\n", l.Entries, l.Head)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "the budgets as JSON")
	return c
}

func (a *ledgerAt) verify(cmd *cobra.Command, g *cli.Globals, asJSON bool) error {
	var rep client.JCPLedgerReport
	if a.cl != nil {
		r, err := a.cl.JCPVerifyLedger(cmd.Context())
		if err != nil {
			return cli.APIErr(err)
		}
		rep = *r
	} else {
		d, err := g.StateDir()
		if err != nil {
			return err
		}
		roots, err := rootKeys(d)
		if err != nil {
			return err
		}
		if rep, err = server.VerifyJCPLedger(a.h.JCPPath(host.JCPLedger), key.NewTrust(roots...), a.h.Key.Public()); err != nil {
			return err
		}
	}
	if asJSON {
		if err := cli.PrintJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintf(cmd.OutOrStdout(), "OK    %d entries, head %s: every rule of docs/spec/jcp.md §7 and every signed head checked\n", rep.Entries, rep.Head)
		printBudgets(cmd.OutOrStdout(), rep.Grants)
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "FAIL  %s\n", rep.Refusal.Message)
	}
	if !rep.OK {
		return cli.ExitError{Code: 4}
	}
	return nil
}
