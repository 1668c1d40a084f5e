package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/note"
)

// Grants, keys, policies and verification: checking grants, this
// host's key and content addresses here; verifying records, policies and
// the conformance pack in sandbox-engine.

var trustCommands = []command{
	{use: "grants", make: grantsCmd},
	{use: "key", make: keyCmd},
	{use: "hash", make: hashCmd},
	{use: "verify [--trust KEY|FILE]... PATH...", short: "Verify sealed artifacts: attestations, receipts, units, grants, decision logs, run directories"},
	{use: "policy", short: "What a principal may grant: policy documents and the decision log"},
	{use: "vectors", short: "Generate or check the conformance pack (conformance/v1)"},
	{use: "proof", short: "Proof cells: run the pack and every tier here, sealed and signed; verify a cell"},
	{use: "jcp", short: "JCP: principals, grants and delegation chains, budgets, the ledger"},
	{use: "tee", short: "Hardware evidence: verify SEV-SNP reports, TDX quotes and NVIDIA GPU reports offline"},
}

func grantsCmd(*Globals) *cobra.Command {
	var gf GrantFlags
	c := &cobra.Command{
		Use:   "grants [--grant G]... [--grants FILE] [--inject I]...",
		Short: "Check grants and print their canonical form and content address",
		Long:  "Parse grants as 'sandbox run' would, and print the canonical JSON and its\ncontent address. Grant syntax:\n\n" + grant.Syntax + "\n\nInjected credentials (--inject):\n\n" + grant.InjectSyntax,
		Args:  UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := gf.Parse()
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
	gf.Add(c)
	return c
}

func keyCmd(g *Globals) *cobra.Command {
	var public bool
	c := &cobra.Command{
		Use:   "key",
		Short: "Print this host's public key and its id (the key is made on first use)",
		Long: `Print this host's public signing key and its id. The key is an Ed25519 key
made on first use and kept, mode 0600, as host.key in the state directory;
its id is the content address of the 32 public-key bytes.

Give the public key to whoever verifies this host's records:
  sandbox verify --trust "$(sandbox key --public)" RUN
The note line is the key as a C2SP verifier key, for the checkpoints this
host signs (fleets, the proof log): --trust of fleet verify and proof log.`,
		Args: UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, k, err := g.HostKey()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if public {
				fmt.Fprintln(out, k.Public())
				return nil
			}
			vkey, err := note.VerifierKey("sandbox/"+k.Public().ID().Short(), k.Public())
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "public  %s\nid      %s\nnote    %s\nfile    %s\n", k.Public(), k.Public().ID(), vkey, d.Path("host.pub"))
			return nil
		},
	}
	c.Flags().BoolVar(&public, "public", false, "print only the public key, for --trust")
	return c
}

// hashOf is the content address of file p ('-': standard input), read
// until ctx ends (a large file's hash stops at Ctrl-C).
func hashOf(ctx context.Context, p string) (addr.Addr, error) {
	if p == "-" {
		return addr.OfReader(readUntil{ctx, os.Stdin})
	}
	f, err := os.Open(p)
	if err != nil {
		return addr.Addr{}, err
	}
	defer f.Close()
	a, err := addr.OfReader(readUntil{ctx, f})
	if err != nil {
		return addr.Addr{}, fmt.Errorf("hash %s: %w", p, err)
	}
	return a, nil
}

// readUntil reads r until ctx ends, then says why it ended.
type readUntil struct {
	ctx context.Context
	r   io.Reader
}

func (r readUntil) Read(b []byte) (int, error) {
	if err := context.Cause(r.ctx); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}

func hashCmd(*Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "hash FILE...",
		Short: "Print the content address (b3:<hex>) of each file ('-' reads standard input)",
		Args:  UsageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			failed := false
			for _, p := range args {
				a, err := hashOf(cmd.Context(), p)
				if errors.Is(err, context.Canceled) {
					return err // Ctrl-C: no further file either
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %v\n", err)
					failed = true
					continue
				}
				fmt.Fprintf(out, "%s  %s\n", a, p)
			}
			if failed {
				return ExitError{errs.ExitCode(errs.NotFound)}
			}
			return nil
		},
	}
}
