package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/verify"
)

func showCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:               "show RUN",
		ValidArgsFunction: completeRuns(g),
		Short:             "Print a run's records for a person to read (it does not verify them: use verify)",
		Long: `Print the records of RUN (an id, a unique prefix of 6 or more hex digits,
"last", or a run directory) for a person to read. It does not decide
trust (verify does), but it checks each record against the attestation
with the signer taken as it is, and a damaged run (a file missing,
changed, or unreadable) is shown with what is damaged at the top, and
exit status 4. Output is shown only as the run wrote it.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.stateDir()
			if err != nil {
				return err
			}
			dir, err := live.Light(d).Resolve(args[0])
			if err != nil {
				return err
			}
			a, err := host.OpenRun(dir)
			if err != nil {
				return err
			}
			damage := damageOf(a, dir)
			if asJSON {
				err = printJSON(cmd.OutOrStdout(), showJSONOf(a, dir, damage))
			} else {
				err = show(cmd.OutOrStdout(), a, dir, damage)
			}
			if err == nil && len(damage) > 0 {
				return exitError{errs.ExitCode(errs.Integrity)}
			}
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs/cli-json.md)")
	return c
}

// damageJSON is one file of a run directory that does not check out.
type damageJSON struct {
	File  string `json:"file"`
	Kind  string `json:"kind"`
	Error string `json:"error"`
}

// damageOf checks each of the run's records against its attestation, the
// signer taken as it is, and returns those that fail.
func damageOf(a *attest.Attestation, dir string) []damageJSON {
	var out []damageJSON
	for _, r := range (&verify.Verifier{Trust: key.NewTrust(a.Claim.Signer)}).Attestation(filepath.Join(dir, verify.FileAttestation)) {
		if r.Err != nil {
			out = append(out, damageJSON{File: filepath.Base(r.Path), Kind: r.Kind, Error: r.Err.Error()})
		}
	}
	return out
}

func show(w io.Writer, a *attest.Attestation, dir string, damage []damageJSON) error {
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return b
	}
	c := a.Claim
	fmt.Fprintf(w, "run        %s\ndirectory  %s\nsigned by  %s (key id %s)\n", a.Addr, dir, c.Signer, c.Signer.ID())
	for _, d := range damage {
		fmt.Fprintf(w, "DAMAGED    %s: %s\n", d.File, d.Error)
	}
	fmt.Fprintf(w, "started    %s\nended      %s\n", c.Started, c.Ended)
	o := string(c.Outcome.Status)
	if c.Outcome.ExitCode != nil {
		o += fmt.Sprintf(", exit status %d", *c.Outcome.ExitCode)
	}
	if c.Outcome.Detail != "" {
		o += " (" + c.Outcome.Detail + ")"
	}
	fmt.Fprintf(w, "outcome    %s\n", o)
	fmt.Fprintf(w, "tier       %s %s, required %s: %s\n", c.Tier.Chosen, c.Tier.Chosen.Name(), c.Tier.Required, c.Tier.Reason)
	fmt.Fprintf(w, "executor   %s\n", c.Executor)
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
	fmt.Fprintf(w, "host       %s %s/%s kernel %s, %s\n", c.Hardware.Host.Name, c.Hardware.Host.OS, c.Hardware.Host.Arch, c.Hardware.Host.Kernel, c.Hardware.Host.CPU)

	if u, err := unit.Decode(read(verify.FileUnit)); err == nil {
		fmt.Fprintf(w, "\nunit       %s (%s)\n  image    %s\n  entry    %s\n  args     %q\n", c.Unit, u.Kind, u.Image, u.Entry, u.Args)
		if !u.Root.IsZero() {
			fmt.Fprintf(w, "  root     %s (an image's root filesystem, by its listing)\n", u.Root)
		}
		keys := make([]string, 0, len(u.Env))
		for k := range u.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  env      %s=%s\n", k, u.Env[k])
		}
		fmt.Fprintf(w, "  limits   %s\n", limitsLine(u.Limits))
	}
	if gs, err := grant.Decode(read(verify.FileGrants)); err == nil {
		fmt.Fprintf(w, "\ngrants     %s\n", c.Grants)
		for _, l := range grantLines(gs) {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if r, err := receipt.Open(read(verify.FileReceipt), key.NewTrust(c.Signer)); err == nil {
		fmt.Fprintf(w, "\nenergy     receipt %s\n", c.Receipt)
		if r.Fuel != nil {
			fmt.Fprintf(w, "  fuel     %d\n", *r.Fuel)
		}
		for _, d := range r.Devices {
			fmt.Fprintf(w, "  %-8s %s measured, %s estimated\n", d.Class, d.Measured, d.Estimated)
			for _, rd := range d.Readings {
				fmt.Fprintf(w, "    %-10s %-4s %s  %s  (%s)\n", rd.Provenance, rd.Scope, rd.UJ, rd.Source, rd.Basis)
			}
		}
	}
	if l, err := grant.DecodeLog(read(verify.FileDecisions)); err == nil {
		allow, deny := 0, 0
		for _, d := range l.Decisions {
			if d.Allow {
				allow += int(d.Count)
			} else {
				deny += int(d.Count)
			}
		}
		fmt.Fprintf(w, "\ndecisions  %s: %d allowed, %d denied\n", c.Decisions, allow, deny)
		for _, d := range l.Decisions {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	if c.Journal != nil {
		if entries, root, err := journal.Parse(read(verify.FileJournal)); err == nil {
			kinds := map[string]int{}
			for _, e := range entries {
				kinds[e.Kind]++
			}
			var ks []string
			for k, n := range kinds {
				ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
			}
			sort.Strings(ks)
			noun := "entries"
			if len(entries) == 1 {
				noun = "entry"
			}
			fmt.Fprintf(w, "\njournal    root %s, %d %s: %s\n", root, len(entries), noun, strings.Join(ks, ", "))
		}
	}
	// Output is shown only as the run wrote it: checked against the
	// journal's outcome entry first (damageOf).
	bad := map[string]string{}
	for _, d := range damage {
		bad[d.File] = d.Error
	}
	for _, f := range []string{verify.FileStdout, verify.FileStderr} {
		why, isBad := bad[f]
		if jerr, ok := bad[verify.FileJournal]; ok {
			why, isBad = jerr, true
		}
		switch {
		case isBad:
			fmt.Fprintf(w, "\n%s not shown: it is not what the run wrote (%s)\n", f, why)
		default:
			if b := read(f); len(b) > 0 {
				fmt.Fprintf(w, "\n%s (%d bytes, as the run wrote it)\n%s", f, len(b), indent(clip(string(b), 2000)))
			}
		}
	}
	return nil
}

// limitsLine is a unit's limits for people.
func limitsLine(l unit.Limits) string {
	var parts []string
	if l.DeadlineMS > 0 {
		parts = append(parts, fmt.Sprintf("deadline %v", time.Duration(l.DeadlineMS)*time.Millisecond))
	} else {
		parts = append(parts, "no deadline")
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("%d processes", l.Pids))
	}
	if l.CPUMillis > 0 {
		parts = append(parts, fmt.Sprintf("%.3g CPUs", float64(l.CPUMillis)/1000))
	}
	if l.MemoryPages > 0 {
		parts = append(parts, fmt.Sprintf("%d WebAssembly pages (%d MiB)", l.MemoryPages, l.MemoryPages*64/1024))
	}
	return strings.Join(parts, ", ")
}

func grantLines(g grant.Set) []string {
	var out []string
	for _, n := range g.Net {
		out = append(out, n.String())
	}
	for _, s := range g.Storage {
		l := "fs:" + s.Path + ":" + string(s.Mode)
		if s.Quota > 0 {
			l += fmt.Sprintf(":quota=%dB", s.Quota)
		}
		out = append(out, l)
	}
	for _, k := range g.KV {
		out = append(out, "kv:"+k.Namespace+":"+string(k.Mode))
	}
	if g.Clock {
		out = append(out, "clock")
	}
	if g.Random {
		out = append(out, "random")
	}
	for _, a := range g.Exec.Allow {
		out = append(out, "exec:allow:"+a.String())
	}
	for _, a := range g.Exec.Deny {
		out = append(out, "exec:deny:"+a.String())
	}
	for _, c := range g.Compute {
		out = append(out, fmt.Sprintf("%s:%s", strings.ToLower(string(c.Class)), c.Budget))
	}
	if len(out) == 0 {
		out = append(out, "(nothing)")
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "\n... (truncated)\n"
	}
	return s
}

func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}
