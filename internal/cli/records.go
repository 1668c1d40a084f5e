package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/energy"
)

// The durable run records: listed (through the state directory's own
// service when one answers, else read here by sandbox-engine), verified,
// exported and imported (sandbox-engine's).

var recordsCommands = []command{
	{use: "records", make: recordsCmd},
	{use: "record", short: "Work with run records (the durable runs of sandboxes)"},
	{use: "export SANDBOX [-o FILE]", short: "Write a suspended (or closed) sandbox's durable run as a bundle"},
	{use: "import BUNDLE|-", short: "Take a durable run from a bundle into this state directory"},
}

func recordsCmd(g *Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "records",
		Short: "List the run records of this state directory's sandboxes",
		Long: `List the run records kept in the state directory (records/ID.jsonl), each
verified from its genesis: the sandbox, its phase (active, parked,
closed), its head, its segments and executions, and the idle energy of
its parked intervals, and what it cost: its executions' energy (the sum
of their receipts, measured and estimated, every class) plus its idle
energy. No service is needed; when the state directory's service is
running, it reads them.`,
		Args: UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cl, err := g.ownClient(); err == nil {
				l, err := cl.Records(cmd.Context())
				cl.Close()
				if err == nil {
					return PrintRecords(cmd, asJSON, l)
				}
				if err = APIErr(err); !isNoService(err) {
					return err
				}
				// A socket nothing serves on: read here.
			}
			if g.engine == nil {
				return g.execEngine(cmd.Context())
			}
			return g.engine.Records(g, cmd, asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

// PrintRecords prints run records as `sandbox records` does: a JSON
// array, or a table.
func PrintRecords(cmd *cobra.Command, asJSON bool, l []client.Record) error {
	if asJSON {
		if l == nil {
			l = []client.Record{}
		}
		return PrintJSON(cmd.OutOrStdout(), l)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tPHASE\tSEGMENTS\tEXECS\tACTIVE\tIDLE\tTOTAL\tHEAD")
	for _, r := range l {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tFAILS\t\t\t\t\t\t%s\n", r.ID, r.Error)
			continue
		}
		total := energy.Microjoules(r.TotalUJ).String()
		if r.RunsMissing > 0 {
			total += fmt.Sprintf(" (%d runs not here)", r.RunsMissing)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Phase, r.Segments, r.Executed, energy.Microjoules(r.ActiveUJ), energy.Microjoules(r.IdleUJ), total, shortHead(r.Head))
	}
	return tw.Flush()
}

// shortHead is a record's head for people: its first 12 hex digits, as
// addr.Addr.Short gives them.
func shortHead(head string) string {
	a, _ := addr.Parse(head)
	return a.Short()
}

// isNoService says whether err is that no service answers.
func isNoService(err error) bool { return errors.As(err, new(NoService)) }
