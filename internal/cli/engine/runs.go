package engine

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/gate"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/verify"
)

// The sealed runs made and read in this process: run (when it is made
// here), runs, show and replay.

// runHere makes a run in this process: what run does with --local,
// --inject, or no service.
func runHere(g *cli.Globals, cmd *cobra.Command, r *cli.RunRequest) error {
	h, err := hostOf(g)
	if err != nil {
		return err
	}
	defer h.Close()
	req, err := h.CommandIn(r.Image, host.CommandLine{Args: r.Args, Env: r.Env, Grants: r.Grants})
	if err != nil {
		return err
	}
	// What killed sandboxes left is removed before anything new
	// is made.
	if ls, err := h.Collect(); err == nil && !r.Quiet {
		reportGC(cmd.ErrOrStderr(), ls)
	}
	req.Tier, req.Escalate, req.Deadline = r.Tier, r.Escalate, r.Deadline
	if r.JCP != nil {
		req.JCP = &gate.Presentation{Chain: r.JCP.Chain, Invocation: r.JCP.Invocation}
	}
	req.Stdout, req.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	if tty := os.Stdin; cli.IsTerminal(tty) {
		req.Stdin = nil // an interactive terminal stays with sandbox
	} else {
		req.Stdin = cmd.InOrStdin()
	}
	run, err := h.Run(cmd.Context(), req)
	if err != nil {
		if c := context.Cause(cmd.Context()); c != nil {
			return fmt.Errorf("%w (%w)", err, c)
		}
		return err
	}
	return r.Out.Finish(cmd, server.ResultOf(run), run.OutputClosed)
}

func runsCmd(g *cli.Globals) *cobra.Command {
	var (
		asJSON bool
		limit  int
		scan   bool
	)
	c := &cobra.Command{
		Use:   "runs",
		Short: "List runs, newest first: id, tier, outcome, started, program, directory",
		Long: `List the runs in the state directory, newest first: id, tier, outcome,
start time, program and run directory, from the state directory's index
(index.db, SQLite), without reading the runs: a run is indexed as it is
sealed (or imported), a run being written is never listed, and an index
that is missing or out of date is rebuilt by reading every run once.

--scan reads every run directory instead, and says which are damaged
(an attestation unreadable, a file it should hold missing, a name that is
not its attestation's address: listed as DAMAGED with what is wrong),
and rebuilds the index from what it read. Without it, a run damaged
after it was indexed is listed as it was sealed; 'sandbox show' and
'sandbox verify' read it.

It lists the newest 100 (saying so on stderr when there are more);
-n N lists the newest N, -n 0 all. --json and --scan list all unless
-n is given.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return errs.Usage{Err: fmt.Errorf("-n %d: give a number of runs, or 0 for all", limit)}
			}
			if !cmd.Flags().Changed("limit") && (asJSON || scan) {
				limit = 0
			}
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			h := live.Light(d)
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer w.Flush()
			if scan || asJSON {
				var runs []host.Summary
				if scan {
					runs, err = h.Store.Reindex()
					if limit > 0 && len(runs) > limit {
						runs = runs[:limit]
					}
				} else {
					runs, err = h.Store.ListRuns(store.RunQuery{Limit: limit})
				}
				if err != nil {
					return err
				}
				if asJSON {
					return cli.PrintJSON(w, runsOf(runs))
				}
				for _, r := range runs {
					w.Write(appendRunLine(nil, r))
				}
				return nil
			}
			// Printed as the index gives them: a long list is never
			// held whole.
			var line []byte
			q, n := store.RunQuery{Limit: limit}, 0
			if limit > 0 {
				q.Limit++ // one more says there are more
			}
			err = h.Store.EachRun(q, func(r host.Summary) error {
				if n++; limit > 0 && n > limit {
					return nil
				}
				line = appendRunLine(line[:0], r)
				_, err := w.Write(line)
				return err
			})
			if err == nil && limit > 0 && n > limit {
				w.Flush()
				fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: the newest %d runs; there are more (-n 0 lists all)\n", limit)
			}
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (docs/cli-json.md)")
	c.Flags().IntVarP(&limit, "limit", "n", 100, "list the newest N runs only (0: all)")
	c.Flags().BoolVar(&scan, "scan", false, "read every run directory (say which are damaged) and rebuild the index")
	return c
}

// appendRunLine appends the line `sandbox runs` prints for r: id, tier,
// outcome, start, program, directory, and what is damaged.
func appendRunLine(b []byte, r host.Summary) []byte {
	pad := func(b []byte, from, width int) []byte {
		for len(b)-from < width {
			b = append(b, ' ')
		}
		return b
	}
	if r.Status == "" {
		base := filepath.Base(r.Dir)
		from := len(b)
		b = append(b, base[:min(12, len(base))]...)
		b = pad(b, from, 12)
		b = append(b, "  DAMAGED  "...)
		b = append(b, r.Dir...)
		b = append(b, "  ("...)
		b = append(b, r.Damaged...)
		return append(b, ")\n"...)
	}
	var id [64]byte
	hex.Encode(id[:], r.ID[:])
	b = append(b, id[:12]...)
	b = append(b, "  "...)
	b = append(b, r.Tier.String()...)
	b = append(b, "  "...)
	from := len(b)
	b = append(b, r.Status...)
	if r.Exit != nil {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(*r.Exit), 10)
	}
	b = pad(b, from, 16)
	b = append(b, "  "...)
	from = len(b)
	b = r.Started.Local().AppendFormat(b, "2006-01-02 15:04:05")
	b = pad(b, from, 24)
	b = append(b, "  "...)
	b = append(b, r.Entry...)
	b = append(b, "  "...)
	b = append(b, r.Dir...)
	if r.Damaged != "" {
		b = append(b, "  DAMAGED ("...)
		b = append(b, r.Damaged...)
		b = append(b, ')')
	}
	return append(b, '\n')
}

// RunsJSON is one entry of `sandbox runs --json`.
type RunsJSON struct {
	Run      string `json:"run"`
	Tier     string `json:"tier,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Started  string `json:"started,omitempty"` // RFC 3339
	Entry    string `json:"entry,omitempty"`
	Records  string `json:"records"`
	Damaged  string `json:"damaged,omitempty"`
}

func runsOf(runs []host.Summary) []RunsJSON {
	out := []RunsJSON{}
	for _, r := range runs {
		j := RunsJSON{Run: r.ID.String(), Outcome: string(r.Status), ExitCode: r.Exit, Entry: r.Entry, Records: r.Dir, Damaged: r.Damaged}
		if r.ID.IsZero() {
			j.Run = ""
		}
		if r.Status != "" { // the claim was read
			j.Tier = r.Tier.String()
		}
		if !r.Started.IsZero() {
			j.Started = r.Started.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, j)
	}
	return out
}

func showCmd(g *cli.Globals) *cobra.Command {
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
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.StateDir()
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
				err = cli.PrintJSON(cmd.OutOrStdout(), showJSONOf(a, dir, damage))
			} else {
				err = show(cmd.OutOrStdout(), a, dir, damage)
			}
			if err == nil && len(damage) > 0 {
				return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
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
	for _, r := range (&verify.Verifier{Trust: key.NewTrust(a.Claim.Signer), AllowSoftware: true}).Attestation(filepath.Join(dir, verify.FileAttestation)) {
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
	if e := c.Evidence; e != nil {
		grounded := "hardware"
		if e.Software {
			grounded = "SOFTWARE-GROUNDED: no hardware vouches for it (a test provider's)"
		}
		fmt.Fprintf(w, "evidence   a %s report from the %s provider, %s (%s, %s)\n", e.Kind, e.Provider, grounded, verify.FileEvidence, e.Report)
	}
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

// ShowJSON is what `sandbox show --json` prints: the claim's facts and
// the records beside it, decoded. Unit and grants are their files'
// canonical JSON, as stored.
type ShowJSON struct {
	Schema    int              `json:"schema"`
	Run       string           `json:"run"`
	Records   string           `json:"records"`
	Signer    string           `json:"signer"`
	Started   string           `json:"started"`
	Ended     string           `json:"ended"`
	Outcome   client.Outcome   `json:"outcome"`
	Tier      tierJSON         `json:"tier"`
	Executor  string           `json:"executor"`
	Evidence  *attest.Evidence `json:"evidence,omitempty"`
	Notes     []string         `json:"notes,omitempty"`
	Unit      json.RawMessage  `json:"unit,omitempty"`
	Grants    json.RawMessage  `json:"grants,omitempty"`
	Fuel      *uint64          `json:"fuel,omitempty"`
	Energy    []client.Energy  `json:"energy,omitempty"`
	Decisions []grant.Decision `json:"decisions,omitempty"`
	Journal   *journalJSON     `json:"journal,omitempty"`
	Damaged   []damageJSON     `json:"damaged,omitempty"`
}

type tierJSON struct {
	Chosen   string `json:"chosen"`
	Required string `json:"required"`
	Reason   string `json:"reason"`
}

type journalJSON struct {
	Root    string `json:"root"`
	Entries int    `json:"entries"`
}

func showJSONOf(a *attest.Attestation, dir string, damage []damageJSON) ShowJSON {
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return b
	}
	c := a.Claim
	j := ShowJSON{Schema: cli.JSONSchema, Run: a.Addr.String(), Records: dir, Signer: c.Signer.String(), Started: c.Started, Ended: c.Ended,
		Outcome:  client.Outcome{Status: string(c.Outcome.Status), ExitCode: c.Outcome.ExitCode, Detail: c.Outcome.Detail},
		Tier:     tierJSON{Chosen: c.Tier.Chosen.String(), Required: c.Tier.Required.String(), Reason: c.Tier.Reason},
		Executor: c.Executor, Evidence: c.Evidence, Notes: c.Notes, Damaged: damage}
	if b := read(verify.FileUnit); json.Valid(b) {
		j.Unit = b
	}
	if b := read(verify.FileGrants); json.Valid(b) {
		j.Grants = b
	}
	if r, err := receipt.Open(read(verify.FileReceipt), key.NewTrust(c.Signer)); err == nil {
		j.Fuel, j.Energy = r.Fuel, server.EnergyOf(r)
	}
	if l, err := grant.DecodeLog(read(verify.FileDecisions)); err == nil {
		j.Decisions = l.Decisions
	}
	if entries, root, err := journal.Parse(read(verify.FileJournal)); err == nil {
		j.Journal = &journalJSON{Root: root.String(), Entries: len(entries)}
	}
	return j
}

func resolveRun(g *cli.Globals, ref string) (*live.Manager, string, error) {
	h, err := hostOf(g)
	if err != nil {
		return nil, "", err
	}
	dir, err := h.Resolve(ref)
	return h, dir, err
}

func replayCmd(g *cli.Globals) *cobra.Command {
	var show bool
	c := &cobra.Command{
		Use:               "replay RUN",
		ValidArgsFunction: completeRuns(g),
		Short:             "Re-execute a run from its journal and check that it does exactly the same",
		Long: `Re-execute RUN (an id, a run directory, or "last") from its replay journal:
every input the run received (file contents, key-value results, real clock
and random reads) is served from the journal, never from the host, and the
replay must produce the same stdout, stderr, exit status, fuel, decision
log and journal root. Otherwise it says what diverged and exits 4. A journal
changed after sealing is refused before anything runs.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, dir, err := resolveRun(g, args[0])
			if err != nil {
				return err
			}
			var out, errw io.Writer
			if show {
				out, errw = cmd.OutOrStdout(), cmd.ErrOrStderr()
			}
			rep, err := h.Replay(context.Background(), dir, out, errw)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if rep.Matches() {
				fmt.Fprintf(w, "replay of %s matches: stdout, stderr, exit status, fuel, decision log and journal root (%d entries, root %s)\n", rep.Run, rep.Entries, rep.Root)
				return nil
			}
			fmt.Fprintf(w, "replay of %s DIVERGED:\n", rep.Run)
			for _, d := range rep.Diffs {
				fmt.Fprintf(w, "  %s\n", d)
			}
			return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
		},
	}
	c.Flags().BoolVar(&show, "output", false, "also stream the replay's stdout and stderr")
	return c
}

// completeRuns completes a run argument: "last", and the ids of the
// stored runs (12 digits, with the outcome and program as a hint).
func completeRuns(g *cli.Globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		out := []string{"last\tthe newest run"}
		d, err := g.StateDir()
		if err != nil {
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		runs, _ := live.Light(d).Runs()
		for _, r := range runs {
			id := r.ID.Hex()
			if id == "" {
				continue
			}
			hint := string(r.Status) + " " + r.Entry
			if r.Damaged != "" {
				hint = "DAMAGED"
			}
			if strings.HasPrefix(id, strings.TrimPrefix(toComplete, "b3:")) {
				out = append(out, id[:12]+"\t"+strings.TrimSpace(hint))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
