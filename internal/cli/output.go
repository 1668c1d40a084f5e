package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/tier"
)

// JSONSchema is the schema number of the objects --json prints
// (docs/cli.md): fields are added, never renamed or given another
// meaning, within one number.
const JSONSchema = 1

// PrintJSON writes v indented, for the listing commands.
func PrintJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// sealedJSON describes a sealed run, the exit status sandbox gives and
// whose it is: `sandbox run --json`'s object, the API's result of a run.
func sealedJSON(r *client.Result, code int, from string) client.Result {
	j := *r
	j.ExitStatus, j.ExitFrom = code, from
	return j
}

// failedJSON describes a run sandbox refused, could not start, or could
// not seal.
func (g *Globals) failedJSON(err error, code int) client.Result {
	j := client.Result{Schema: JSONSchema, Error: err.Error(), ExitStatus: code, ExitFrom: FromSandbox}
	if g.engine != nil && g.engine.Failed != nil {
		g.engine.Failed(err, &j)
	}
	return j
}

// emitRunJSON writes run's object to dest: "-" for stderr, else a file,
// replaced whole.
func emitRunJSON(dest string, stderr io.Writer, v client.Result) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if dest == "-" {
		_, err = stderr.Write(b)
		return err
	}
	return safefile.Write(dest, b, 0o644)
}

// writeIDFile writes the run's id, and a newline, to path, replaced whole.
func writeIDFile(path string, r *client.Result) error {
	if path == "" {
		return nil
	}
	return safefile.Write(path, []byte(r.Run+"\n"), 0o644)
}

// DescribeOutcome says how a run ended: its status, exit code and
// detail.
func DescribeOutcome(o *client.Outcome) string {
	if o == nil {
		return "(unknown)"
	}
	status := o.Status
	if o.ExitCode != nil {
		status += fmt.Sprintf(" %d", *o.ExitCode)
	}
	if o.Detail != "" {
		status += " (" + o.Detail + ")"
	}
	return status
}

// printSummary says what became of a run, for people: the same lines
// for a run in this process and for an exec in a service.
func printSummary(w io.Writer, r *client.Result) {
	fmt.Fprintf(w, "sandbox: run    %s\n", r.Run)
	name := ""
	if t, err := tier.Parse(r.Tier); err == nil {
		name = " " + t.Name()
	}
	fmt.Fprintf(w, "sandbox: tier   %s%s (required %s: %s)\n", r.Tier, name, r.TierRequired, r.TierReason)
	fmt.Fprintf(w, "sandbox: ended  %s after %s\n", DescribeOutcome(r.Outcome), time.Duration(r.DurationMS)*time.Millisecond)
	if r.Fuel != nil {
		fmt.Fprintf(w, "sandbox: fuel   %d\n", *r.Fuel)
	}
	for _, d := range r.Energy {
		fmt.Fprintf(w, "sandbox: energy %s %s measured, %s estimated [%s]\n", d.Class, energy.Microjoules(d.MeasuredUJ), energy.Microjoules(d.EstimatedUJ), strings.Join(d.Provenance, "; "))
	}
	fmt.Fprintf(w, "sandbox: records %s\n", r.Records)
}
