package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// The sealed runs: run (here, through a service; in sandbox-engine,
// in-process), runs, show and replay (sandbox-engine's).

var runsCommands = []command{
	{use: "run", make: runCmd},
	{use: "runs", short: "List runs, newest first: id, tier, outcome, started, program, directory"},
	{use: "show RUN", short: "Print a run's records for a person to read (it does not verify them: use verify)"},
	{use: "replay RUN", short: "Re-execute a run from its journal and check that it does exactly the same"},
}

// The exit statuses of `sandbox run` that are sandbox's own: the
// engine's (internal/host's, which a test holds these to).
const (
	ExitLimit      = 124 // stopped at a limit it was given: deadline, fuel, energy budget
	ExitFailed     = 125 // sandbox could not run it, refused to, or could not seal it
	ExitCannotExec = 126 // the program was found but cannot be executed
	ExitNotFound   = 127 // the program was not found
	ExitSignalBase = 128 // + N: the guest ended by signal N, or sandbox got signal N
)

// Whose an exit status of `sandbox run` is (--json's exit_status_from).
const (
	FromGuest   = "guest"
	FromSandbox = "sandbox"
)

// The CPU grant a run gets when it has none: the engine's (a test holds
// these to internal/host's).
const (
	DefaultCPU       = "cpu:50J"
	DefaultNativeCPU = "cpu:1kJ"
)

// runExitTable is the table run --help and the README give.
const runExitTable = `Exit status:
  0-255  the guest's own exit status, passed through unchanged
  128+N  the guest was ended by signal N (S1: e.g. 139 for SIGSEGV), or
         sandbox got signal N and ended the run: 130 SIGINT, 143 SIGTERM,
         129 SIGHUP, 141 when the reader of its output went away
  124    the guest was stopped at a limit it was given: --deadline, its
         fuel, or a joule budget (like timeout(1))
  134    the guest trapped (WebAssembly)
  137    the guest ran out of memory
  125    sandbox could not run it or refused to: a bad flag or grant, a
         tier or device this host cannot give, an internal error, or a
         run that ended but could not be sealed (the message says so)
  126    the program was found but cannot be executed: not executable,
         not a WebAssembly module, no entry point
  127    the program was not found
A guest's own 124-127 or 128+ status reads like sandbox's: --json says
which it was.`

// runExit is the exit status of `sandbox run` for a sealed run, and whose
// it is, given whether its output's reader went away and the cause its
// context ended with (a signal sandbox got), if any.
func runExit(r *client.Result, outputClosed bool, cause error) (int, string) {
	var in Interrupted
	switch {
	case outputClosed:
		return ExitSignalBase + int(syscall.SIGPIPE), FromSandbox
	case errors.As(cause, &in) && (r.Outcome == nil || r.Outcome.Status != string(attest.Exited)):
		return ExitSignalBase + int(in.Sig), FromSandbox
	}
	return r.ExitStatus, r.ExitFrom
}

// runErrorExit is the exit status of `sandbox run` when it did not seal
// a run: the program not found (127) or not executable (126), sandbox
// interrupted before the guest ran (128+N), anything else 125.
func (g *Globals) runErrorExit(err error) int {
	var in Interrupted
	var ce categorized
	if errors.As(err, &ce) && ce.e.ExitStatus != 0 {
		return ce.e.ExitStatus // the service's 126 or 127
	}
	if g.engine != nil && g.engine.ExitOf != nil {
		if code, ok := g.engine.ExitOf(err); ok {
			return code
		}
	}
	switch {
	case errors.As(err, &in):
		return ExitSignalBase + int(in.Sig)
	case errors.Is(err, context.Canceled):
		return ExitSignalBase + int(syscall.SIGINT)
	}
	return ExitFailed
}

// RunRequest is a run as run's flags give it, made in this process by
// Engine.Run.
type RunRequest struct {
	Args     []string
	Env      map[string]string
	Grants   grant.Set
	Tier     *tier.Tier
	Escalate bool
	Deadline time.Duration
	Image    string
	Quiet    bool
	Out      RunOutput
	// JCP is the chain the run is presented with, and its invocation.
	JCP *client.JCP
}

func runCmd(g *Globals) *cobra.Command {
	var (
		gf       GrantFlags
		tierArg  string
		imageRef string
		escalate bool
		deadline time.Duration
		envArgs  []string
		quiet    bool
		jsonDest string
		idFile   string
		local    bool
		jcpFile  string
		jcpAs    string
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

A run with no Cpu grant gets ` + DefaultCPU + ` (a WASM unit) or ` + DefaultNativeCPU + ` (a native
one); say so with --grant cpu:ENERGY to choose. Each compute grant puts
its device class on the unit (gpu:5J: the unit uses a GPU, and its
receipt accounts Gpu); a unit is refused (exit 125) when the executor
chosen for it cannot give it a class: S1 gives an NVIDIA GPU where the
host has one and its driver (docs/s1.md), S2 gives the CPU only.
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
		Args: UsageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			defer func() {
				var ee ExitError
				if jsonDest != "" && err != nil && !errors.As(err, &ee) {
					// The message, then the object: the object is last.
					code := g.runErrorExit(err)
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %v\n", err)
					emitRunJSON(jsonDest, cmd.ErrOrStderr(), g.failedJSON(err, code))
					err = ExitError{code}
				}
			}()
			if err := g.CheckLimitFlags(deadline); err != nil {
				return err
			}
			s, err := gf.Parse()
			if err != nil {
				return err
			}
			env, err := ParseEnv(envArgs)
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
			out := RunOutput{quiet: quiet, json: jsonDest, idFile: idFile}
			var pres *client.JCP
			if jcpFile != "" || jcpAs != "" {
				if g.engine == nil {
					return g.execEngine(cmd.Context())
				}
				if pres, err = g.engine.Present(g, jcpFile, jcpAs); err != nil {
					return err
				}
			}
			if !local {
				cl, forced, err := g.Service()
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
					x, err := g.runSpec(args, env, s, tierArg, escalate, deadline)
					if err != nil {
						return err
					}
					x.Image, x.JCP = imageRef, pres
					if !IsTerminal(os.Stdin) {
						x.StdinStream = cmd.InOrStdin()
					}
					res, err := cl.Run(cmd.Context(), x, cmd.OutOrStdout(), cmd.ErrOrStderr())
					var oe *client.OutputError
					switch {
					case res != nil:
						return out.Finish(cmd, res, errors.As(err, &oe))
					case !forced && errors.As(APIErr(err), new(NoService)):
						// A socket nothing serves on: the run is made here.
					default:
						return APIErr(err)
					}
				}
			}
			if g.engine == nil {
				return g.execEngine(cmd.Context())
			}
			return g.engine.Run(g, cmd, &RunRequest{Args: args, Env: env, Grants: s, Tier: want, Escalate: escalate, Deadline: deadline, Image: imageRef, Quiet: quiet, Out: out, JCP: pres})
		},
	}
	gf.Add(c)
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
	c.Flags().StringVar(&jcpFile, "jcp", "", "present the run with this JCP chain file ('sandbox jcp'): the gate decides it before anything runs and reserves its --grant budgets at every grant of the chain")
	c.Flags().StringVar(&jcpAs, "as", "", "with --jcp: the principal presenting it (the audience of its last grant), a key kept in the state directory")
	g.LimitFlags(c, "a native run's")
	return c
}

// runSpec is a run's command line as the service takes it: the grants
// resolved here (relative paths against this directory, --grants files
// read), the limits of the flags.
func (g *Globals) runSpec(args []string, env map[string]string, s grant.Set, tierArg string, escalate bool, deadline time.Duration) (client.ExecSpec, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return client.ExecSpec{}, err
	}
	gj, _, err := s.Canonical()
	if err != nil {
		return client.ExecSpec{}, err
	}
	x := client.ExecSpec{Args: args, Env: env, Dir: filepath.Clean(cwd), GrantsJSON: gj, Tier: tierArg, Escalate: escalate, DeadlineMS: deadline.Milliseconds()}
	switch {
	case deadline == 0:
		x.DeadlineMS = -1 // none
	case x.DeadlineMS == 0:
		x.DeadlineMS = 1
	}
	mem, err := grant.ParseSize(g.Memory)
	if err != nil {
		return client.ExecSpec{}, errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
	}
	x.Limits = &client.Limits{MemoryBytes: mem, Pids: g.Pids, CPUMillis: int64(g.CPUs*1000 + 0.5), MemoryPages: int64(g.MemoryPages)}
	return x, nil
}

// RunOutput is what run says at the end, wherever the run was made.
type RunOutput struct {
	quiet        bool
	json, idFile string
}

// Finish says what became of a sealed run, for people or as --json,
// writes --id-file, and exits as the run table says.
func (o RunOutput) Finish(cmd *cobra.Command, res *client.Result, outputClosed bool) error {
	stderr := cmd.ErrOrStderr()
	code, from := runExit(res, outputClosed, context.Cause(cmd.Context()))
	switch {
	case o.json == "-":
		// The object takes the summary's place.
	case !o.quiet:
		printSummary(stderr, res)
	case res.Outcome == nil || res.Outcome.Status != string(attest.Exited) || outputClosed:
		// Whatever the exit status does not say by itself is said, -q
		// or not.
		fmt.Fprintf(stderr, "sandbox: ended  %s\n", DescribeOutcome(res.Outcome))
	}
	if err := writeIDFile(o.idFile, res); err != nil {
		fmt.Fprintf(stderr, "sandbox: --id-file: %v\n", err)
		code, from = ExitFailed, FromSandbox
	}
	if o.json != "" {
		if err := emitRunJSON(o.json, stderr, sealedJSON(res, code, from)); err != nil {
			fmt.Fprintf(stderr, "sandbox: --json: %v\n", err)
			code = ExitFailed
		}
	}
	if code != 0 {
		return ExitError{code}
	}
	return nil
}

// LimitFlags are the limits of runs (and, for serve, of live sandboxes
// by default): whose says whose cgroup they limit.
func (g *Globals) LimitFlags(c *cobra.Command, whose string) {
	c.Flags().Uint32Var(&g.MemoryPages, "memory-pages", 4096, "guest memory cap in 64 KiB pages (WASM)")
	c.Flags().StringVar(&g.Memory, "memory", "1GiB", "memory limit of "+whose+" cgroup")
	c.Flags().Int64Var(&g.Pids, "pids", 512, "process limit of "+whose+" cgroup")
	c.Flags().Float64Var(&g.CPUs, "cpus", 0, "CPU limit of "+whose+" cgroup, in CPUs (0: none)")
}

// CheckLimitFlags refuses limits no run can have, naming the flag: the
// checks are the API's (unit.CheckLimit), each flag's value taken as
// given (--pids 0 is no limit any run can have).
func (g *Globals) CheckLimitFlags(deadline time.Duration) error {
	cpus := int64(-1) // not a number of CPUs: refused below
	if g.CPUs >= 0 && !math.IsInf(g.CPUs, 0) {
		cpus = int64(g.CPUs*1000 + 0.5)
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
	if g.Memory != "" {
		m, err := grant.ParseSize(g.Memory)
		if err != nil {
			return errs.Usage{Err: fmt.Errorf("--memory %s: %w", g.Memory, err)}
		}
		flags = append(flags, limitFlag{"memory_bytes", "--memory " + g.Memory, m})
	}
	flags = append(flags,
		limitFlag{"pids", fmt.Sprintf("--pids %d", g.Pids), g.Pids},
		limitFlag{"cpu_millis", fmt.Sprintf("--cpus %v", g.CPUs), cpus},
		limitFlag{"deadline_ms", "--deadline " + deadline.String(), ms},
		limitFlag{"memory_pages", fmt.Sprintf("--memory-pages %d", g.MemoryPages), int64(g.MemoryPages)})
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

// GrantFlags are the flags that make a grant set.
type GrantFlags struct {
	args   []string
	file   string
	inject []string
}

// Add adds the flags to c.
func (f *GrantFlags) Add(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.args, "grant", nil, "grant a capability (repeatable); see 'sandbox grants --help'")
	c.RegisterFlagCompletionFunc("grant", completeGrants)
	c.Flags().StringVar(&f.file, "grants", "", "read grants from a JSON file")
	c.Flags().StringArrayVar(&f.inject, "inject", nil, "add a credential to requests to a granted host: HOST:HEADER=env:NAME or HOST:HEADER=file:/PATH (repeatable; the value never enters the unit)")
}

// Injects says whether --inject was given.
func (f *GrantFlags) Injects() bool { return len(f.inject) > 0 }

// Parse reads the grant flags as the service reads a caller's grants
// (grant.Input), relative paths against this directory.
func (f *GrantFlags) Parse() (grant.Set, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return grant.Set{}, err
	}
	return grant.Input{Args: f.args, File: f.file, Inject: f.inject, Dir: cwd}.Set()
}

// ParseEnv turns --env NAME=VALUE flags into an environment.
func ParseEnv(args []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range args {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, errs.Usage{Err: fmt.Errorf("--env %q: want NAME=VALUE", kv)}
		}
		env[k] = v
	}
	return env, nil
}

// IsTerminal says whether f is a terminal.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Shell completion ('sandbox completion bash|zsh|fish|powershell' writes
// the script): grant kinds after --grant, tiers after --tier; run ids
// where a command takes a run (sandbox-engine's: they are read from the
// state directory's index).

// grantKinds are the completions of --grant: each kind with what follows.
func grantKinds() []string {
	out := []string{
		"fs:\tfs:PATH:ro|rw[:quota=SIZE], a directory",
		"net:\tnet:HOST:PORT",
		"kv:\tkv:NAMESPACE:ro|rw",
		"clock\tthe real clock",
		"random\treal randomness",
		"exec:allow:\texec:allow:b3:HEX, a program the run may execute",
		"exec:deny:\texec:deny:b3:HEX, a program the run may not execute",
		"kernel\ta kernel of its own (S5)",
		"confidential\tconfidential computing (S6, S7)",
		"locality:\tlocality:NAME",
	}
	for _, c := range device.Classes {
		n := strings.ToLower(string(c))
		out = append(out, n+":\t"+n+":ENERGY, e.g. "+n+":5J, a budget for "+string(c))
	}
	return out
}

func completeGrants(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return grantKinds(), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

func completeTiers(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, t := range tier.All {
		out = append(out, t.String()+"\t"+t.Name())
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
