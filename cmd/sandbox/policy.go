package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
)

func policyCmd(g *globals) *cobra.Command {
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
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printPolicy(cmd, authority.Default())
		},
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Read a policy document and print it whole (every member given), or say what is wrong and where",
		Args:  usageArgs(cobra.ExactArgs(1)),
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
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.stateDir()
			if err != nil {
				return err
			}
			ds, head, err := authority.ReadLog(d.Path(host.AuthorityLog))
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"head": head, "decisions": append([]authority.Decision{}, ds...)})
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
