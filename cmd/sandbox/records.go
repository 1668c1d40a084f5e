package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

func hashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash FILE...",
		Short: "Print the content address (b3:<hex>) of each file ('-' reads standard input)",
		Args:  usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			failed := false
			for _, p := range args {
				var a addr.Addr
				var err error
				if p == "-" {
					a, err = addr.OfReader(os.Stdin)
				} else {
					a, err = addr.OfFile(p)
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %v\n", err)
					failed = true
					continue
				}
				fmt.Fprintf(out, "%s  %s\n", a, p)
			}
			if failed {
				return exitError{errs.ExitCode(errs.NotFound)}
			}
			return nil
		},
	}
}

// hostKey is the state directory and its host key (made on first use).
func (g *globals) hostKey() (*state.Dir, key.Private, error) {
	d, err := g.stateDir()
	if err != nil {
		return nil, key.Private{}, err
	}
	k, err := d.HostKey(randReader())
	return d, k, err
}

func keyCmd(g *globals) *cobra.Command {
	var public bool
	c := &cobra.Command{
		Use:   "key",
		Short: "Print this host's public key and its id (the key is made on first use)",
		Long: `Print this host's public signing key and its id. The key is an Ed25519 key
made on first use and kept, mode 0600, as host.key in the state directory;
its id is the content address of the 32 public-key bytes.

Give the public key to whoever verifies this host's records:
  sandbox verify --trust "$(sandbox key --public)" RUN`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, k, err := g.hostKey()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if public {
				fmt.Fprintln(out, k.Public())
				return nil
			}
			fmt.Fprintf(out, "public  %s\nid      %s\nfile    %s\n", k.Public(), k.Public().ID(), d.Path("host.pub"))
			return nil
		},
	}
	c.Flags().BoolVar(&public, "public", false, "print only the public key, for --trust")
	return c
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

func verifyCmd(g *globals) *cobra.Command {
	var trustArgs []string
	var trustHost, asJSON bool
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
consistent with the claim. Only keys given with --trust are trusted: a valid
signature by any other key fails with code untrusted-key. Codes are listed
in docs/spec/conformance.md.

Exit status: 0 when everything verified, 4 on any failure, 5 when the only
failures are untrusted keys, 3 when a PATH or run was not found.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			trust, err := trustFrom(trustArgs)
			if err != nil {
				return err
			}
			if trustHost {
				d, err := g.stateDir()
				if err != nil {
					return err
				}
				k, err := d.HostKey(randReader())
				if err != nil {
					return err
				}
				trust.Add(k.Public())
			}
			v := &verify.Verifier{Trust: trust}
			out := cmd.OutOrStdout()
			worst := 0
			all := []verifyJSON{}
			for _, p := range args {
				var results []verify.Result
				if _, err := os.Stat(p); err != nil {
					// Not a path: a stored run's id, a prefix, or "last".
					d, err := g.stateDir()
					if err == nil {
						p, err = host.Light(d).Resolve(p)
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
				if err := printJSON(out, all); err != nil {
					return err
				}
			}
			if trust.Len() == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "sandbox: note: no --trust given, so no signature can be trusted")
			}
			if worst != 0 {
				return exitError{worst}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&trustArgs, "trust", nil, "trust this public key (ed25519:<hex>) or the keys in this file, one per line; repeatable")
	c.Flags().BoolVar(&trustHost, "trust-host", false, "also trust this host's own key (host.pub in the state directory)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per artifact (docs/cli-json.md)")
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

func vectorsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "vectors",
		Short: "Generate or check the conformance pack (conformance/v1)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "gen DIR",
		Short: "Write the conformance pack into DIR, deterministically, from the published test key",
		Args:  usageArgs(cobra.ExactArgs(1)),
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
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			outs, err := vectors.Verify(args[0])
			out := cmd.OutOrStdout()
			var re *reject.Error
			if errors.As(err, &re) {
				// A pack whose files are not the pinned ones is refused whole.
				fmt.Fprintf(out, "FAIL  pack  %s: %v\n", args[0], err)
				return exitError{errs.ExitCode(errs.Integrity)}
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
				return exitError{errs.ExitCode(errs.Integrity)}
			}
			return nil
		},
	})
	return c
}

func grantsCmd() *cobra.Command {
	var gf grantFlags
	c := &cobra.Command{
		Use:   "grants [--grant G]... [--grants FILE] [--inject I]...",
		Short: "Check grants and print their canonical form and content address",
		Long:  "Parse grants as 'sandbox run' would, and print the canonical JSON and its\ncontent address. Grant syntax:\n\n" + grant.Syntax + "\n\nInjected credentials (--inject):\n\n" + grant.InjectSyntax,
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := gf.parse()
			if err != nil {
				return err
			}
			b, a, err := s.Canonical()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", b, a)
			return nil
		},
	}
	gf.add(c)
	return c
}

// grantFlags are the flags that make a grant set.
type grantFlags struct {
	args   []string
	file   string
	inject []string
}

func (f *grantFlags) add(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.args, "grant", nil, "grant a capability (repeatable); see 'sandbox grants --help'")
	c.RegisterFlagCompletionFunc("grant", completeGrants)
	c.Flags().StringVar(&f.file, "grants", "", "read grants from a JSON file")
	c.Flags().StringArrayVar(&f.inject, "inject", nil, "add a credential to requests to a granted host: HOST:HEADER=env:NAME or HOST:HEADER=file:/PATH (repeatable; the value never enters the unit)")
}

// parse reads the grant flags as the service reads a caller's grants
// (grant.Input), relative paths against this directory.
func (f *grantFlags) parse() (grant.Set, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return grant.Set{}, err
	}
	return grant.Input{Args: f.args, File: f.file, Inject: f.inject, Dir: cwd}.Set()
}
