package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/meter/powercap"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

func (g *globals) host() (*host.Host, error) {
	d, err := g.stateDir()
	if err != nil {
		return nil, err
	}
	mem := int64(0)
	if g.memory != "" {
		if mem, err = grant.ParseSize(g.memory); err != nil {
			return nil, errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
		}
	}
	roots, err := egressRoots()
	if err != nil {
		return nil, err
	}
	h, err := host.New(host.Config{
		Home: d.Root, Rand: randReader(), MemoryPages: g.memoryPages, Memory: mem, Pids: g.pids, CPUs: g.cpus,
		Warm: g.warm, EgressRoots: roots, CgroupRoot: os.Getenv("SANDBOX_CGROUP_ROOT"), SysfsRoot: os.Getenv("SANDBOX_SYSFS_ROOT"),
		TDP:     os.Getenv("SANDBOX_TDP"),
		VMImage: os.Getenv("SANDBOX_VM_IMAGE"), VMAccel: os.Getenv("SANDBOX_VM_ACCEL"),
		Warn: func(m string) { fmt.Fprintf(g.stderr, "sandbox: warning: %s\n", m) },
		Log:  g.log,
	})
	var ce *host.ConfigError
	if errors.As(err, &ce) && ce.Field == "TDP" {
		return nil, errs.Usage{Err: fmt.Errorf("SANDBOX_TDP: %w", ce.Err)}
	}
	if err != nil {
		return nil, err
	}
	g.hosts = append(g.hosts, h)
	return h, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// egressRoots are the roots the egress proxy verifies credential-injected
// servers with: the system's, plus the PEM file SANDBOX_EGRESS_ROOTS
// names (a private CA, or a test server's certificate).
func egressRoots() (*x509.CertPool, error) {
	path := os.Getenv("SANDBOX_EGRESS_ROOTS")
	if path == "" {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %s holds no PEM certificate", path)
	}
	return pool, nil
}

func runCmd(g *globals) *cobra.Command {
	var (
		gf       grantFlags
		tierArg  string
		imageRef string
		escalate bool
		deadline time.Duration
		envArgs  []string
		quiet    bool
		jsonDest string
		idFile   string
		local    bool
	)
	c := &cobra.Command{
		Use:   "run [flags] -- (MODULE.wasm | COMMAND) [ARGS...]",
		Short: "Run a unit of work under grants, and seal its receipt and attestation",
		Long: `Run a unit at the lowest tier its grants require, with only what --grant
gives it: a WebAssembly module (a WASI preview 1 command) at S2, or a native
program at S1 (its own namespaces, a root with read-only system directories
and the storage grants at their host paths, Landlock, seccomp, no
privileges, its own cgroup; see docs/s1.md). Its stdout and stderr stream
through; sandbox exits with the guest's exit status. A summary
goes to stderr, and the sealed records (attestation, receipt, unit, grants,
decision log, replay journal, output) are stored as a run directory in the
state directory: see 'sandbox runs', 'sandbox show', 'sandbox verify',
'sandbox replay'.

A run with no Cpu grant gets ` + host.DefaultCPU + ` (a WASM unit) or ` + host.DefaultNativeCPU + ` (a native
one); say so with --grant cpu:ENERGY to choose. Each compute grant puts
its device class on the unit (gpu:5J: the unit uses a GPU, and its
receipt accounts Gpu); a unit is refused (exit 125) when the executor
chosen for it cannot give it a class: today S1 and S2 give the CPU only.
The budget is enforced against the figure the receipt states: a WASM unit's fuel is bought with it; a native run is
stopped when the meter's figure for its cgroup reaches it (outcome
budget-exhausted, the receipt at most one sampling interval over).

The guest sees no files, no network, and (WASM) no real clock and no
real randomness unless granted; its environment is only what --env
gives, plus, for a native unit, PATH, HOME and LANG defaults that are
recorded in the unit. A native command is looked up in the run's PATH;
it must be in a system directory or under a storage grant.

A native run with net grants reaches them, and nothing else, through the
run's egress proxy at 127.0.0.1:3128 inside its namespace (HTTP_PROXY,
HTTPS_PROXY and ALL_PROXY are set for it; HTTP, CONNECT and SOCKS5); a name
that resolves to a private or loopback address is refused unless that
address was granted. --inject adds a header the host holds to requests to
one granted host; for HTTPS the run trusts its own certificate authority
(` + "`SSL_CERT_FILE`" + ` and friends point at it). See docs/egress.md.

When a service is running ('sandbox serve': its socket in the state
directory, or $SANDBOX_HOST), the run is made by it, with the same
output, exit status and records (in the service's state directory), and
stdin streamed to it; a Ctrl-C interrupts it there and its sealed result
still comes back. A run with --inject, or --local, is made in this
process; so is any run when no service answers on the socket.

Grants:
` + grant.Syntax + `

Injected credentials (--inject):
` + grant.InjectSyntax + `

` + runExitTable,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			defer func() {
				var ee exitError
				if jsonDest != "" && err != nil && !errors.As(err, &ee) {
					// The message, then the object: the object is last.
					code := runErrorExit(err)
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %v\n", err)
					emitRunJSON(jsonDest, cmd.ErrOrStderr(), failedJSON(err, code))
					err = exitError{code}
				}
			}()
			if err := checkLimitFlags(g, deadline); err != nil {
				return err
			}
			s, err := gf.parse()
			if err != nil {
				return err
			}
			env, err := parseEnv(envArgs)
			if err != nil {
				return err
			}
			var want *tier.Tier
			if tierArg != "" {
				t, err := tier.Parse(tierArg)
				if err != nil {
					return errs.Usage{Err: err}
				}
				want = &t
			}
			out := runOutput{quiet: quiet, json: jsonDest, idFile: idFile}
			if !local {
				cl, forced, err := g.service()
				if err != nil {
					return err
				}
				switch {
				case cl == nil:
				case len(gf.inject) > 0 && forced:
					cl.Close()
					return errs.Usage{Err: fmt.Errorf("--inject: a credential is read by the process that runs the egress proxy, and $%s names a service: run in-process with --local", EnvHost)}
				case len(gf.inject) > 0:
					cl.Close() // the credential stays in this process
				default:
					defer cl.Close()
					x, err := runSpec(g, args, env, s, tierArg, escalate, deadline)
					if err != nil {
						return err
					}
					x.Image = imageRef
					if !isTerminal(os.Stdin) {
						x.StdinStream = cmd.InOrStdin()
					}
					res, err := cl.Run(cmd.Context(), x, cmd.OutOrStdout(), cmd.ErrOrStderr())
					var oe *client.OutputError
					switch {
					case res != nil:
						return out.finish(cmd, res, errors.As(err, &oe))
					case !forced && errors.As(apiErr(err), new(noService)):
						// A socket nothing serves on: the run is made here.
					default:
						return apiErr(err)
					}
				}
			}
			h, err := g.host()
			if err != nil {
				return err
			}
			defer h.Close()
			req, err := h.CommandIn(imageRef, host.CommandLine{Args: args, Env: env, Grants: s})
			if err != nil {
				return err
			}
			// What killed sandboxes left is removed before anything new
			// is made.
			if ls, err := h.Collect(); err == nil && !quiet {
				reportGC(cmd.ErrOrStderr(), ls)
			}
			req.Tier, req.Escalate, req.Deadline = want, escalate, deadline
			req.Stdout, req.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if tty := os.Stdin; isTerminal(tty) {
				req.Stdin = nil // an interactive terminal stays with sandbox
			} else {
				req.Stdin = cmd.InOrStdin()
			}
			r, err := h.Run(cmd.Context(), req)
			if err != nil {
				if c := context.Cause(cmd.Context()); c != nil {
					return fmt.Errorf("%w (%w)", err, c)
				}
				return err
			}
			return out.finish(cmd, server.ResultOf(r), r.OutputClosed)
		},
	}
	gf.add(c)
	c.Flags().StringVar(&tierArg, "tier", "", "run at this tier (S0..S7); above the requirement only with --escalate; S0 (a bare host process, nothing confined, grants recorded not enforced) only when asked for, for trusted native work")
	c.Flags().StringVar(&imageRef, "image", "", "run a native program in this imported image's root filesystem instead of the host's system directories ('sandbox image')")
	c.RegisterFlagCompletionFunc("tier", completeTiers)
	c.Flags().BoolVar(&escalate, "escalate", false, "allow --tier to go above what the grants require (recorded in the attestation)")
	c.Flags().DurationVar(&deadline, "deadline", time.Minute, "wall-clock limit; 0 for none")
	c.Flags().StringArrayVar(&envArgs, "env", nil, "set NAME=VALUE in the guest's environment (repeatable)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no summary on stderr")
	c.Flags().StringVar(&jsonDest, "json", "", "at the end, one JSON object (run id, outcome, exit status and whose it is, tier, energy per class, records directory; docs/cli-json.md) on stderr in place of the summary, or with --json=FILE in FILE")
	c.Flags().Lookup("json").NoOptDefVal = "-"
	c.Flags().StringVar(&idFile, "id-file", "", "write the sealed run's id (b3:…) to this file")
	c.Flags().BoolVar(&local, "local", false, "run in this process even when a service is running (see above)")
	limitFlags(c, g, "a native run's")
	return c
}

// limitFlags are the limits of runs (and, for serve, of live sandboxes
// by default): whose says whose cgroup they limit.
func limitFlags(c *cobra.Command, g *globals, whose string) {
	c.Flags().Uint32Var(&g.memoryPages, "memory-pages", 4096, "guest memory cap in 64 KiB pages (WASM)")
	c.Flags().StringVar(&g.memory, "memory", "1GiB", "memory limit of "+whose+" cgroup")
	c.Flags().Int64Var(&g.pids, "pids", 512, "process limit of "+whose+" cgroup")
	c.Flags().Float64Var(&g.cpus, "cpus", 0, "CPU limit of "+whose+" cgroup, in CPUs (0: none)")
}

// checkLimitFlags refuses limits no run can have, naming the flag: the
// checks are the API's (unit.CheckLimit), each flag's value taken as
// given (--pids 0 is no limit any run can have).
func checkLimitFlags(g *globals, deadline time.Duration) error {
	cpus := int64(-1) // not a number of CPUs: refused below
	if g.cpus >= 0 && !math.IsInf(g.cpus, 0) {
		cpus = int64(g.cpus*1000 + 0.5)
	}
	ms := deadline.Milliseconds()
	if deadline < 0 {
		ms = min(ms, -1)
	}
	type limitFlag struct {
		field, flag string
		v           int64
	}
	var flags []limitFlag
	if g.memory != "" {
		m, err := grant.ParseSize(g.memory)
		if err != nil {
			return errs.Usage{Err: fmt.Errorf("--memory %s: %w", g.memory, err)}
		}
		flags = append(flags, limitFlag{"memory_bytes", "--memory " + g.memory, m})
	}
	flags = append(flags,
		limitFlag{"pids", fmt.Sprintf("--pids %d", g.pids), g.pids},
		limitFlag{"cpu_millis", fmt.Sprintf("--cpus %v", g.cpus), cpus},
		limitFlag{"deadline_ms", "--deadline " + deadline.String(), ms},
		limitFlag{"memory_pages", fmt.Sprintf("--memory-pages %d", g.memoryPages), int64(g.memoryPages)})
	for _, f := range flags {
		if err := unit.CheckLimit(f.field, f.v); err != nil {
			var le *unit.LimitError
			if errors.As(err, &le) {
				err = errors.New(le.Why)
			}
			return errs.Usage{Err: fmt.Errorf("%s: %w", f.flag, err)}
		}
	}
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// describeOutcome says how a run ended: its status, exit code and detail.
func describeOutcome(o *client.Outcome) string {
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
	fmt.Fprintf(w, "sandbox: ended  %s after %s\n", describeOutcome(r.Outcome), time.Duration(r.DurationMS)*time.Millisecond)
	if r.Fuel != nil {
		fmt.Fprintf(w, "sandbox: fuel   %d\n", *r.Fuel)
	}
	for _, d := range r.Energy {
		fmt.Fprintf(w, "sandbox: energy %s %s measured, %s estimated [%s]\n", d.Class, energy.Microjoules(d.MeasuredUJ), energy.Microjoules(d.EstimatedUJ), strings.Join(d.Provenance, "; "))
	}
	fmt.Fprintf(w, "sandbox: records %s\n", r.Records)
}

func runsCmd(g *globals) *cobra.Command {
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
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return errs.Usage{Err: fmt.Errorf("-n %d: give a number of runs, or 0 for all", limit)}
			}
			if !cmd.Flags().Changed("limit") && (asJSON || scan) {
				limit = 0
			}
			d, err := g.stateDir()
			if err != nil {
				return err
			}
			h := host.Light(d)
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
					return printJSON(w, runsOf(runs))
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

func resolveRun(g *globals, ref string) (*host.Host, string, error) {
	h, err := g.host()
	if err != nil {
		return nil, "", err
	}
	dir, err := h.Resolve(ref)
	return h, dir, err
}

func replayCmd(g *globals) *cobra.Command {
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
		Args: usageArgs(cobra.ExactArgs(1)),
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
			return exitError{errs.ExitCode(errs.Integrity)}
		},
	}
	c.Flags().BoolVar(&show, "output", false, "also stream the replay's stdout and stderr")
	return c
}

func doctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Probe every tier of the ladder on this host and say which are available and why",
		Long: `Probe every tier of the ladder on this host (each probe runs a real,
confined check) and say which are available and why; list what ended
sandbox processes left behind (sandbox gc removes it); the energy
sources and what each can measure; whether S1 can log the kernel's
denials; how runs are attributed (cgroups).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := g.host()
			if err != nil {
				return err
			}
			h.Reprobe = true // doctor always probes, and refreshes what is kept
			d := doctorOf(cmd.Context(), h)
			if asJSON {
				return printJSON(cmd.OutOrStdout(), d)
			}
			printDoctor(cmd.OutOrStdout(), d)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs/cli-json.md)")
	return c
}

type executorJSON struct {
	Name      string `json:"name"`
	Tier      string `json:"tier"`
	Kind      string `json:"kind"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

// doctorJSON is what doctor found; printed as text or as JSON.
type doctorJSON struct {
	Schema int         `json:"schema"`
	Tiers  []tierProbe `json:"tiers"`
	// Executors lists every executor's probe, those a tier's first
	// available one hides included.
	Executors []executorJSON `json:"executors"`
	Leftovers []leftoverJSON `json:"leftovers"`
	// LeftoversError is why leftovers could not be looked for.
	LeftoversError string       `json:"leftovers_error,omitempty"`
	Energy         []sourceJSON `json:"energy"`
	EnergyNotes    []string     `json:"energy_notes,omitempty"`
	TDP            []tdpJSON    `json:"tdp,omitempty"`
	KernelDenials  denialsJSON  `json:"kernel_denials"`
	Cgroups        *cgroupsJSON `json:"cgroups"` // null: none (not root, or none mounted)
}

type tierProbe struct {
	Tier      string      `json:"tier"`
	Name      string      `json:"name"`
	Available bool        `json:"available"`
	Reason    string      `json:"reason"`
	Layers    []layerJSON `json:"layers,omitempty"`
}

type layerJSON struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type leftoverJSON struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Unowned bool   `json:"unowned,omitempty"`
}

type sourceJSON struct {
	Source string `json:"source"`
	Class  string `json:"class"`
	State  string `json:"state"`
	Detail string `json:"detail"`
}

type tdpJSON struct {
	Class      string `json:"class"`
	MilliWatts int64  `json:"milliwatts"`
	Origin     string `json:"origin"`
}

type denialsJSON struct {
	Logged bool   `json:"logged"`
	Why    string `json:"why"`
}

type cgroupsJSON struct {
	Kind string `json:"kind"`
	Root string `json:"root"`
}

func doctorOf(ctx context.Context, h *host.Host) doctorJSON {
	d := doctorJSON{Schema: jsonSchema, Leftovers: []leftoverJSON{}, Energy: []sourceJSON{}}
	avail := h.Availability(ctx)
	for _, t := range tier.All {
		p := avail[t]
		tp := tierProbe{Tier: t.String(), Name: t.Name(), Available: p.Available, Reason: p.Reason}
		for _, l := range p.Layers {
			tp.Layers = append(tp.Layers, layerJSON{l.Name, l.OK, l.Detail})
		}
		d.Tiers = append(d.Tiers, tp)
	}
	for _, e := range h.ExecutorProbes(ctx) {
		d.Executors = append(d.Executors, executorJSON{e.Name, e.Tier.String(), string(e.Kind), e.Probe.Available, e.Probe.Reason})
	}
	ls, err := h.GC(true)
	if err != nil {
		d.LeftoversError = err.Error()
	}
	for _, l := range ls {
		d.Leftovers = append(d.Leftovers, leftoverJSON{l.Kind, l.Path, l.Unowned})
	}
	for _, st := range h.Meter.Statuses() {
		d.Energy = append(d.Energy, sourceJSON{st.Source, string(st.Class), string(st.State), st.Detail})
	}
	for _, s := range h.Meter.Sources {
		if p, ok := s.(*powercap.Source); ok {
			for _, n := range p.Notes() {
				d.EnergyNotes = append(d.EnergyNotes, p.Name()+": "+n)
			}
		}
	}
	for _, c := range device.Classes {
		if t, ok := h.Meter.TDP[c]; ok {
			d.TDP = append(d.TDP, tdpJSON{string(c), int64(t.MilliWatts), t.Origin})
		}
	}
	d.KernelDenials.Logged, d.KernelDenials.Why = native.DenialReports()
	if h.Cgroups != nil {
		d.Cgroups = &cgroupsJSON{string(h.Cgroups.Kind()), h.Cgroups.Root}
	}
	return d
}

func printDoctor(out io.Writer, d doctorJSON) {
	fmt.Fprintln(out, "tiers")
	for _, t := range d.Tiers {
		mark := "no "
		if t.Available {
			mark = "yes"
		}
		fmt.Fprintf(out, "  %s %-12s %s  %s\n", t.Tier, t.Name, mark, t.Reason)
		for _, l := range t.Layers {
			ok := "ok  "
			if !l.OK {
				ok = "FAIL"
			}
			fmt.Fprintf(out, "       %s %-14s %s\n", ok, l.Name, l.Detail)
		}
	}
	fmt.Fprintln(out, "executors")
	for _, e := range d.Executors {
		mark := "no "
		if e.Available {
			mark = "yes"
		}
		fmt.Fprintf(out, "  %-18s %s %-6s %s  %s\n", e.Name, e.Tier, e.Kind, mark, e.Reason)
	}
	fmt.Fprintln(out, "leftovers")
	switch {
	case d.LeftoversError != "":
		fmt.Fprintf(out, "  cannot look: %s\n", d.LeftoversError)
	case len(d.Leftovers) == 0:
		fmt.Fprintln(out, "  none: nothing of an ended sandbox process is left")
	}
	for _, l := range d.Leftovers {
		if l.Unowned {
			fmt.Fprintf(out, "  unowned  %-16s %s (no lease in its name: made before leases; remove it by hand once no older sandbox runs)\n", l.Kind, l.Path)
		} else {
			fmt.Fprintf(out, "  ended    %-16s %s ('sandbox gc' removes it)\n", l.Kind, l.Path)
		}
	}
	fmt.Fprintln(out, "energy")
	for _, st := range d.Energy {
		fmt.Fprintf(out, "  %-14s %-4s %-11s %s\n", st.Source, st.Class, st.State, st.Detail)
	}
	for _, n := range d.EnergyNotes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	for _, t := range d.TDP {
		fmt.Fprintf(out, "  estimator      %-4s TDP %.1f W (%s)\n", t.Class, float64(t.MilliWatts)/1000, t.Origin)
	}
	fmt.Fprintln(out, "kernel denials")
	if d.KernelDenials.Logged {
		fmt.Fprintf(out, "  S1 logs them  %s\n", d.KernelDenials.Why)
	} else {
		fmt.Fprintf(out, "  S1 cannot log them: %s\n", d.KernelDenials.Why)
	}
	fmt.Fprintln(out, "attribution")
	if d.Cgroups != nil {
		fmt.Fprintf(out, "  cgroups %s at %s: each run gets its own group\n", d.Cgroups.Kind, d.Cgroups.Root)
	} else {
		fmt.Fprintln(out, "  no cgroups (not root, or none mounted): run CPU time from the guest thread's CPU clock")
	}
}

func gcCmd(g *globals) *cobra.Command {
	var dry bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what killed or crashed sandbox processes left behind, and say what",
		Long: `Every sandbox process holds a lease (a locked file under leases/ in the
state directory) and names what it makes for a run with it: the run
directory being written (runs/.partial-*), S1 roots and CA bundles
(roots/), probe scratch, live sandboxes' workspaces and S5 VMs'
directories (QEMU's sockets and console) in the temporary directory, and cgroups
(sandbox/partial-* in each hierarchy). The kernel drops the lock when the
process ends, however it ends. gc removes everything named by a lease
that is no longer held (ending any process still in a leftover cgroup
first), then the lease. Nothing of a live process is touched, and
nothing is judged by its age. 'sandbox run' does the same before a run
when some lease is dead; 'sandbox doctor' lists leftovers without
removing them.

Things whose names carry no lease (made by a sandbox from before
leases) are listed as unowned and left alone.

Exit status: 0 when everything found was removed; 1 when something could
not be.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := g.host()
			if err != nil {
				return err
			}
			defer h.Close()
			ls, err := h.GC(dry)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, l := range ls {
				verb := "removed"
				switch {
				case l.Unowned:
					verb = "unowned"
				case l.Err != nil:
					verb, bad = "FAILED", bad+1
				case dry:
					verb = "would remove"
				}
				fmt.Fprintf(out, "%-12s %-16s %s", verb, l.Kind, l.Path)
				if l.Err != nil {
					fmt.Fprintf(out, ": %v", l.Err)
				}
				fmt.Fprintln(out)
			}
			if len(ls) == 0 {
				fmt.Fprintln(out, "nothing left behind")
			}
			if bad > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&dry, "dry-run", "n", false, "list what would be removed, remove nothing")
	return cmd
}

// reportGC says in one line what a run's start removed, if anything.
func reportGC(w io.Writer, ls []host.Leftover) {
	removed, failed := 0, 0
	for _, l := range ls {
		switch {
		case l.Unowned || l.Kind == "lease":
		case l.Err != nil:
			failed++
		default:
			removed++
		}
	}
	if removed > 0 {
		fmt.Fprintf(w, "sandbox: removed %d things killed sandbox processes left (sandbox gc -n lists what is left)\n", removed)
	}
	if failed > 0 {
		fmt.Fprintf(w, "sandbox: %d things killed sandbox processes left could not be removed: see sandbox gc\n", failed)
	}
}
