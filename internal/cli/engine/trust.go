package engine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// Verification, policies and the conformance pack: what sealed records
// prove, under which keys; what a principal may grant; the vectors any
// other implementation checks itself against.

func verifyCmd(g *cli.Globals) *cobra.Command {
	var trustArgs []string
	var trustHost, asJSON, allowSoftware bool
	var localityFile, evidencePolicy string
	c := &cobra.Command{
		Use: "verify [--trust KEY|FILE]... PATH...",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, tc string) ([]string, cobra.ShellCompDirective) {
			// Paths, or a stored run.
			ids, _ := completeRuns(g)(cmd, args, tc)
			return ids, cobra.ShellCompDirectiveDefault
		},
		Short: "Verify sealed artifacts: attestations, receipts, units, grants, decision logs, run directories",
		Long: `Verify each PATH, a file or a run directory, and print one line per artifact:

  OK    KIND  PATH  ADDRESS  what was established
  FAIL  KIND  PATH  CODE: where: why

PATH may also name a stored run: its id (or a unique prefix of 6 or more
hex digits) or "last".

An attestation (or a run directory) is checked completely: canonical form,
signature, trusted signer, and every object it binds (unit, grants, decision
log, receipt, replay journal) present beside it, at its address, valid, and
consistent with the claim. An S6 or S7 run's hardware evidence (evidence.bin)
is checked offline against the vendor's root at the run's end time and
must carry the claim's binding (docs/spec/attestation.md); software-grounded
evidence is refused unless --allow-software-evidence is given. An S7 run's
locality claim (locality.json) is checked against the anchors and regions
of --locality FILE, and refused without it. Only keys
given with --trust are trusted: a valid
signature by any other key fails with code untrusted-key. Codes are listed
in docs/spec/conformance.md.

Exit status: 0 when everything verified, 4 on any failure, 5 when the only
failures are untrusted keys, 3 when a PATH or run was not found.`,
		Args: cli.UsageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			trust, loc, err := verifierInputs(g, trustArgs, trustHost, localityFile)
			if err != nil {
				return err
			}
			v := &verify.Verifier{Trust: trust, AllowSoftware: allowSoftware, Locality: loc}
			if evidencePolicy != "" {
				b, err := readLimited(evidencePolicy, 1<<20)
				if err != nil {
					return err
				}
				p, err := evidence.ParsePolicy(b)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--evidence-policy %s: %w", evidencePolicy, err)}
				}
				v.EvidencePolicy = &p
			}
			out := cmd.OutOrStdout()
			worst := 0
			all := []VerifyJSON{}
			for _, p := range args {
				var results []verify.Result
				if _, err := os.Stat(p); err != nil {
					// Not a path: a stored run's id, a prefix, or "last".
					d, err := g.StateDir()
					if err == nil {
						p, err = live.Light(d).Resolve(p)
					}
					if err != nil {
						results = []verify.Result{{Path: p, Kind: "run", Err: err}}
					}
				}
				if results == nil {
					results = v.Path(p)
				}
				for _, r := range results {
					if asJSON {
						all = append(all, verifyJSONOf(r))
					} else {
						printResult(out, r)
					}
					if r.Err != nil {
						// Any integrity failure outranks the rest.
						code := errs.ExitCode(errs.Of(r.Err))
						if worst == 0 || code == errs.ExitCode(errs.Integrity) {
							worst = code
						}
					}
				}
			}
			if asJSON {
				if err := cli.PrintJSON(out, all); err != nil {
					return err
				}
			}
			if trust.Len() == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "sandbox: note: no --trust given, so no signature can be trusted")
			}
			if worst != 0 {
				return cli.ExitError{Code: worst}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&trustArgs, "trust", nil, "trust this public key (ed25519:<hex>) or the keys in this file, one per line; repeatable")
	c.Flags().BoolVar(&trustHost, "trust-host", false, "also trust this host's own key (host.pub in the state directory)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per artifact (docs/cli-json.md)")
	c.Flags().StringVar(&evidencePolicy, "evidence-policy", "", "a policy S6 and S7 runs' hardware evidence must meet besides its binding (JSON, docs/spec/evidence.md §4: measurements, min_tcb, allow_debug, ...)")
	c.Flags().StringVar(&localityFile, "locality", "", "check S7 runs' locality claims against this configuration's anchors and regions (docs/spec/locality.md)")
	c.Flags().BoolVar(&allowSoftware, "allow-software-evidence", false, "accept an S6 run's software-grounded evidence (a test provider's: no hardware vouches for it), shown as such")
	return c
}

func printResult(w io.Writer, r verify.Result) {
	a := "-"
	if !r.Addr.IsZero() {
		a = r.Addr.String()
	}
	if r.Err != nil {
		fmt.Fprintf(w, "FAIL  %-11s  %s  %s\n", r.Kind, r.Path, r.Err)
		return
	}
	fmt.Fprintf(w, "OK    %-11s  %s  %s  %s\n", r.Kind, r.Path, a, r.Note)
}

// VerifyJSON is one artifact's verdict in `sandbox verify --json`.
type VerifyJSON struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	OK      bool   `json:"ok"`
	Address string `json:"address,omitempty"`
	Note    string `json:"note,omitempty"`
	Code    string `json:"code,omitempty"` // docs/spec/conformance.md, on failure
	Error   string `json:"error,omitempty"`
}

func verifyJSONOf(r verify.Result) VerifyJSON {
	j := VerifyJSON{Path: r.Path, Kind: r.Kind, OK: r.Err == nil, Note: r.Note}
	if !r.Addr.IsZero() {
		j.Address = r.Addr.String()
	}
	if r.Err != nil {
		j.Error = r.Err.Error()
		if c := reject.CodeOf(r.Err); c != "" {
			j.Code = string(c)
		}
	}
	return j
}

func trustFrom(args []string) (key.Trust, error) {
	var t key.Trust
	for _, a := range args {
		ks, err := key.ParseTrustArg(a)
		if err != nil {
			return key.Trust{}, errs.Usage{Err: err}
		}
		for _, k := range ks {
			t.Add(k)
		}
	}
	return t, nil
}

func policyCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "What a principal may grant: policy documents and the decision log",
		Long: `Every grant is checked, before anything runs, against the policy of the
principal that asks for it (docs/spec/policy.md): the local user at the
service's socket may grant anything; a bearer token may grant what the
policy written beside it in the token file allows ('serve --token-file':
a token, then its policy file), and without one nothing on the host
beyond its own sandboxes' workspaces (no host directory, no network, no
secret, no key-value namespace; S1, S2 and S5; the CPU at any budget;
any imported image); an MCP connection is held to its own ('mcp
--policy'), which its model's tool arguments cannot widen. A refusal is
denied (exit 6, HTTP 403), names the grant and the rule, and is kept in
the decision log.`,
	}
	var asJSON bool
	def := &cobra.Command{
		Use:   "default",
		Short: "Print the policy of a principal the operator wrote none for",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printPolicy(cmd, authority.Default())
		},
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Read a policy document and print it whole (every member given), or say what is wrong and where",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			p, err := authority.Parse(b)
			if err != nil {
				return errs.Usage{Err: fmt.Errorf("%s: %w", args[0], err)}
			}
			return printPolicy(cmd, p)
		},
	}
	log := &cobra.Command{
		Use:   "log",
		Short: "Print the decision log: every grant refused, oldest first, verified from its genesis",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			ds, head, err := authority.ReadLog(d.Path(host.AuthorityLog))
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), map[string]any{"head": head, "decisions": append([]authority.Decision{}, ds...)})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tPRINCIPAL\tACTION\tGRANT\tRULE\tWHY")
			for _, x := range ds {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.Time, x.Principal, x.Action, x.Grant, x.Rule, x.Why)
			}
			tw.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "%d refusals; head %s\n", len(ds), head)
			return nil
		},
	}
	log.Flags().BoolVar(&asJSON, "json", false, "one JSON object: the head and the decisions")
	c.AddCommand(def, check, log)
	return c
}

func printPolicy(cmd *cobra.Command, p authority.Policy) error {
	b, err := p.Marshal()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
	return err
}

func vectorsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "vectors",
		Short: "Generate or check the conformance pack (conformance/v1)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "gen DIR",
		Short: "Write the conformance pack into DIR, deterministically, from the published test key",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := vectors.Write(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d files to %s\n", n, args[0])
			return nil
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "verify DIR",
		Short: "Check the pack in DIR: every file the one its manifest pins, positives verify, negatives fail with their named code",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			outs, err := vectors.Verify(args[0])
			out := cmd.OutOrStdout()
			var re *reject.Error
			if errors.As(err, &re) {
				// A pack whose files are not the pinned ones is refused whole.
				fmt.Fprintf(out, "FAIL  pack  %s: %v\n", args[0], err)
				return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
			}
			if err != nil {
				return err
			}
			bad := 0
			for _, o := range outs {
				if o.Pass {
					fmt.Fprintf(out, "PASS  %-45s  %s\n", o.Entry.Path, o.Got)
					continue
				}
				bad++
				fmt.Fprintf(out, "FAIL  %-45s  %s (%v)\n", o.Entry.Path, o.Why, o.Err)
			}
			fmt.Fprintf(out, "%d vectors, %d failed\n", len(outs), bad)
			if bad > 0 {
				return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
			}
			return nil
		},
	})
	return c
}

// verifierInputs are what verify and proof verify are given: the keys
// trusted (--trust, and this host's with --trust-host) and the locality
// configuration S7 runs are checked against (--locality).
func verifierInputs(g *cli.Globals, trustArgs []string, trustHost bool, localityFile string) (key.Trust, *locality.Config, error) {
	trust, err := trustFrom(trustArgs)
	if err != nil {
		return trust, nil, err
	}
	if trustHost {
		d, err := g.StateDir()
		if err != nil {
			return trust, nil, err
		}
		k, err := d.HostKey(rand.Reader)
		if err != nil {
			return trust, nil, err
		}
		trust.Add(k.Public())
	}
	loc, err := localityConfig(localityFile)
	if err != nil {
		return trust, nil, errs.Usage{Err: fmt.Errorf("--locality: %w", err)}
	}
	return trust, loc, nil
}
