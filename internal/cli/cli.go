package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/key"
)

// Globals are the flags and state every command shares.
type Globals struct {
	Home string // --home: the state directory
	// MemoryPages, Memory, Pids and CPUs are the limit flags (LimitFlags).
	MemoryPages uint32
	Memory      string
	Pids        int64
	CPUs        float64
	Stderr      io.Writer    // warnings
	Warm        bool         // keep a started S1 init ready (serve)
	Log         *slog.Logger // the service's structured log

	engine  *Engine   // nil: the thin program (stubs execute sandbox-engine)
	argv    []string  // the arguments as given, for sandbox-engine
	atEnd   []func()  // run when the command has ended (hosts' leases)
	stubs   stubIndex // the commands that run in sandbox-engine
	helpErr error     // why a stub's help could not be given
}

// AtEnd has f run when the command has ended.
func (g *Globals) AtEnd(f func()) { g.atEnd = append(g.atEnd, f) }

// StateDir is the state directory: --home, else $SANDBOX_HOME, else
// the XDG state directory.
func (g *Globals) StateDir() (*state.Dir, error) {
	root := g.Home
	if root == "" {
		var err error
		if root, err = state.Default(os.Getenv); err != nil {
			return nil, err
		}
	}
	return state.Open(root)
}

// HostKey is the state directory and its host key (made on first use).
func (g *Globals) HostKey() (*state.Dir, key.Private, error) {
	d, err := g.StateDir()
	if err != nil {
		return nil, key.Private{}, err
	}
	k, err := d.HostKey(rand.Reader)
	return d, k, err
}

// Main is the command line after a program's own checks: a context
// that ends on SIGINT, SIGTERM or SIGHUP (a closed terminal), with the
// signal as its cause, then the command. e is nil in the thin program.
// The caller exits with the status Main returns, at once, so the
// signals stay caught until then: stopping them first would cost three
// exchanges with the runtime's signal thread (0.1 ms of `sandbox
// version`) only to let a signal in the last microseconds kill the
// process rather than be caught.
func Main(args []string, e *Engine) int {
	if instant[invoked(args)] {
		return Run(context.Background(), args, os.Stdout, os.Stderr, e)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// A closed stdout is an error on write, not a death by SIGPIPE: a run
	// whose reader went away is ended and sealed (exit 141). Notify, not
	// Ignore: an ignored signal would stay ignored in the programs run.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		for s := range sigs {
			cancel(Interrupted{s.(syscall.Signal)})
		}
	}()
	return Run(ctx, args, os.Stdout, os.Stderr, e)
}

// instant are the commands that print what they know and end, looking at
// no context: they catch no signal, so SIGINT or a closed pipe ends
// them as it ends any small program (exit 130, 141). Catching signals
// costs os/signal's thread, a fifth of `sandbox version`'s start
// (docs/cli.md, "Start-up").
var instant = map[string]bool{"version": true, "grants": true}

// Interrupted is the cause of a context ended by a signal sandbox got.
type Interrupted struct{ Sig syscall.Signal }

func (i Interrupted) Error() string { return "interrupted by " + i.Sig.String() }

// Unwrap makes it a context.Canceled.
func (i Interrupted) Unwrap() error { return context.Canceled }

// ExitError carries an exit status chosen by a command (a guest's
// status, or the verdict of a verification) without an error message.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func init() {
	// Commands are listed in each group as written there, not sorted.
	cobra.EnableCommandSorting = false
}

// The groups of `sandbox --help`, in its order.
var groups = []*cobra.Group{
	{ID: "runs", Title: "Sealed runs:"},
	{ID: "sandboxes", Title: "Live sandboxes (in a running service, 'sandbox serve'):"},
	{ID: "records", Title: "Durable run records:"},
	{ID: "images", Title: "Images and environments:"},
	{ID: "fleets", Title: "Fleets:"},
	{ID: "trust", Title: "Grants, keys, policies and verification:"},
	{ID: "service", Title: "The service:"},
	{ID: "machine", Title: "This machine and this program:"},
}

// command is a command as its group lists it: data, made into a
// *cobra.Command only where it is needed: the thin program makes the one
// it runs, not the whole tree (docs/cli.md, "Start-up"). The lists are
// constant, laid out by the compiler: nothing is built before main.
type command struct {
	use   string                          // its name, then a stub's arguments
	short string                          // a stub's summary
	make  func(g *Globals) *cobra.Command // nil for a stub (Globals.stub)
}

// name is the command's name, as cobra names it.
func (c command) name() string {
	n, _, _ := strings.Cut(c.use, " ")
	return n
}

// build makes the command.
func (c command) build(g *Globals) *cobra.Command {
	if c.make == nil {
		return g.stub(c.use, c.short)
	}
	return c.make(g)
}

// commandsOf are group id's commands, as `sandbox --help` lists them.
func commandsOf(id string) []command {
	switch id {
	case "runs":
		return runsCommands
	case "sandboxes":
		return sandboxesCommands
	case "records":
		return recordsCommands
	case "images":
		return imagesCommands
	case "fleets":
		return fleetsCommands
	case "trust":
		return trustCommands
	case "service":
		return serviceCommands
	case "machine":
		return machineCommands
	}
	return nil
}

// Root is the command tree: the thin program's (stubs for the engine's
// commands) when e is nil, else sandbox-engine's.
func Root(g *Globals, e *Engine) *cobra.Command { return tree(g, e, "") }

// tree is the command tree with every command, or only the one named
// only (when only is not ""), as the whole tree has it: the root, its
// flags and groups are the same either way, and so is the command. only
// is the thin program's (e nil): sandbox-engine makes its commands whole
// and checks each against its stub.
func tree(g *Globals, e *Engine, only string) *cobra.Command {
	g.engine = e
	root := &cobra.Command{
		Use:   "sandbox",
		Short: "Run untrusted work isolated, granted, metered and attested",
		Long: `sandbox runs a unit of work (a WASM module or a native program) at the lowest
isolation tier of the ladder S0-S7 that its grants require, lets it touch
only what it was granted, meters its energy per device class with honest
provenance, and seals a signed JCR-1 energy receipt and an Ed25519
attestation that anyone can verify with 'sandbox verify'.

State (host key, runs, caches) lives in $SANDBOX_HOME, else
$XDG_STATE_HOME/sandbox, else ~/.local/state/sandbox.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return errs.Usage{Err: err} })
	root.PersistentFlags().StringVar(&g.Home, "home", "", "state directory (overrides $SANDBOX_HOME)")
	root.AddGroup(groups...)
	root.SetHelpCommandGroupID("machine")
	root.SetCompletionCommandGroupID("machine")
	if only != "" {
		// Its completion command would be made for nothing: only the
		// whole tree runs it (or completes anything).
		root.CompletionOptions.DisableDefaultCmd = true
	}
	full := map[string]*cobra.Command{}
	if e != nil && e.Commands != nil {
		for _, c := range e.Commands(g) {
			full[c.Name()] = c
		}
	}
	for _, grp := range groups {
		for _, cmd := range commandsOf(grp.ID) {
			if only != "" && cmd.name() != only {
				continue
			}
			c := cmd.build(g)
			if g.stubs.is(c) {
				if f, ok := full[c.Name()]; ok {
					delete(full, c.Name())
					c = f
				} else if e != nil {
					// In sandbox-engine a stub would execute itself.
					panic("cli: the engine has no command " + c.Name())
				}
			}
			c.GroupID = grp.ID
			root.AddCommand(c)
		}
	}
	for n := range full {
		panic("cli: the engine's command " + n + " has no stub in a group")
	}
	return root
}

// Run runs the command line args with the given streams: in the thin
// program when e is nil, else in sandbox-engine.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, e *Engine) int {
	return run(ctx, args, stdout, stderr, e, false)
}

// run is Run, in the whole tree when whole is set, else (in the thin
// program) in the tree of the command invoked alone.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e *Engine, whole bool) int {
	g := &Globals{Stderr: stderr, argv: args}
	defer func() {
		for _, f := range g.atEnd {
			f()
		}
	}()
	if e == nil && tlsHost() {
		// The thin program links no TLS: sandbox-engine talks to an
		// https:// service, whatever the command.
		err := g.execEngine(ctx)
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return errs.ExitCode(errs.Of(err))
	}
	var root *cobra.Command
	if n := invoked(args); n != "" && e == nil && !whole {
		root = tree(g, nil, n)
	} else {
		root = tree(g, e, "")
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := g.forwardCompletion(root, args); err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return errs.ExitCode(errs.Of(err))
	}

	c, err := root.ExecuteContextC(ctx)
	if err == nil {
		err = g.helpErr // a stub's help, which sandbox-engine gives
	}
	if err == nil {
		return 0
	}
	var ee ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	fmt.Fprintf(stderr, "sandbox: %v\n", err)
	if c != nil && (c.Name() == "run" || c.Name() == "exec") && c.Parent() == root {
		// run's and exec's statuses are the guest's; their own are
		// 125-127 (runs.go).
		return g.runErrorExit(err)
	}
	if isUsage(err) {
		return errs.ExitCode(errs.Invalid)
	}
	return errs.ExitCode(errs.Of(err))
}

// invoked is the name of the command args run, past the root's flag
// (--home DIR): "" where that is not one of the groups' commands (help,
// completion, a name that is no command's, an argument that starts
// with '-' before it, or none), which cobra finds, lists or suggests in
// the whole tree. Where it is one, cobra finds the same command in the
// tree of that command alone (it skips --home and its value as this
// does), and runs it the same way.
func invoked(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--home":
			i++ // its value, whatever it is
		case strings.HasPrefix(a, "--home="):
		case strings.HasPrefix(a, "-"):
			return ""
		default:
			for _, grp := range groups {
				for _, c := range commandsOf(grp.ID) {
					if c.name() == a {
						return a
					}
				}
			}
			return ""
		}
	}
	return ""
}

// RefusedInput is input refused as it stands: a usage-class failure,
// whatever the reader's own codes say.
type RefusedInput struct{ Msg string }

func (e RefusedInput) Error() string { return e.Msg }

// Invalid: the input is refused.
func (RefusedInput) Invalid() bool { return true }

// isUsage recognises cobra's own argument and flag errors.
func isUsage(err error) bool {
	var u errs.Usage
	return errors.As(err, &u)
}

// UsageArgs wraps a cobra argument validator so its errors are usage
// errors.
func UsageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return errs.Usage{Err: err}
		}
		return nil
	}
}
