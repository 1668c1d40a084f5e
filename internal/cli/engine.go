package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
)

// EngineName is the program that runs the engine in its process: the
// same command line with the engine linked in. The thin program finds
// it beside itself, as sandbox-s1 is found.
const EngineName = "sandbox-engine"

// Engine is what sandbox-engine links in (package engine): the
// commands that run the engine in this process. The thin program has
// none (a nil *Engine) and executes sandbox-engine in their place.
type Engine struct {
	// Commands are the full commands that take their stubs' places, by
	// name: every stub has one.
	Commands func(g *Globals) []*cobra.Command
	// Run makes a run in this process (run --local, or no service).
	Run func(g *Globals, cmd *cobra.Command, r *RunRequest) error
	// Records lists the state directory's run records, read here.
	Records func(g *Globals, cmd *cobra.Command, asJSON bool) error
	// ExitOf is the exit status of an error of run or exec that only
	// the engine makes (a program not found: 127, one that cannot be
	// executed: 126), and whether err is one.
	ExitOf func(err error) (int, bool)
	// Failed adds to run --json's object what the engine knows of a run
	// that failed: one that ended but could not be sealed.
	Failed func(err error, j *client.Result)
	// Present reads a JCP chain file and signs a fresh invocation of it
	// as a principal kept in the state directory (run --jcp FILE --as
	// NAME). The thin program hands a presented run to sandbox-engine:
	// it links no COSE or CBOR.
	Present func(g *Globals, file, as string) (*client.JCP, error)
	// DialTLS makes the connection to an https:// service. The thin
	// program links no TLS: it hands every command to sandbox-engine
	// when $SANDBOX_HOST is one (tlsHost).
	DialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
}

// tlsHost says whether $SANDBOX_HOST names a service reached by TLS.
func tlsHost() bool {
	return strings.HasPrefix(strings.ToLower(os.Getenv(EnvHost)), "https:")
}

// stubIndex is the set of stubs made.
type stubIndex map[*cobra.Command]bool

func (s stubIndex) is(c *cobra.Command) bool { return s[c] }

// stub is a command that runs in sandbox-engine: listed here, in its
// group, by its name and summary (the full command's, which a test
// checks), and run by executing sandbox-engine with the arguments as
// given, its help and its completions included.
func (g *Globals) stub(use, short string) *cobra.Command {
	c := &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE:               func(cmd *cobra.Command, _ []string) error { return g.execEngine(cmd.Context()) },
	}
	c.SetHelpFunc(func(cmd *cobra.Command, _ []string) { g.helpErr = g.execEngine(cmd.Context()) })
	if g.stubs == nil {
		g.stubs = stubIndex{}
	}
	g.stubs[c] = true
	return c
}

// forwardCompletion executes sandbox-engine for a shell's completion
// request within a stub's command (its flags and arguments are the
// engine's to complete); nil when args are no such request.
func (g *Globals) forwardCompletion(root *cobra.Command, args []string) error {
	// cobra adds its completion command as it executes: find it by name
	// past the root's flags (--home DIR).
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--home":
			i++
		case strings.HasPrefix(a, "-"):
		case a == cobra.ShellCompRequestCmd || a == cobra.ShellCompNoDescRequestCmd:
			if c, _, err := root.Find(args[i+1:]); err == nil && g.stubs.is(c) {
				return g.execEngine(context.Background())
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// noEngine is the error of a command that runs in sandbox-engine when
// there is none beside this program.
type noEngine struct{ path, self string }

func (e noEngine) Error() string {
	what := "this command runs"
	if tlsHost() {
		what = "$" + EnvHost + " is an https:// service, which sandbox reaches"
	}
	return fmt.Sprintf("%s in %s, and there is none at %s: build it beside %s with 'go build -o %s ./cmd/%s' (README, Install)",
		what, EngineName, e.path, e.self, e.path, EngineName)
}

// Unavailable: this installation lacks the program.
func (noEngine) Unavailable() bool { return true }

// beside is the path of the program name beside this one, and this
// one's path.
func beside(name string) (path, self string, err error) {
	self, err = os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("finding %s: %w", name, err)
	}
	return filepath.Join(filepath.Dir(self), name), self, nil
}

// isExecutable says whether p is a file someone may execute.
func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// enginePath is sandbox-engine beside this program.
func enginePath() (string, error) {
	p, self, err := beside(EngineName)
	if err != nil {
		return "", err
	}
	if !isExecutable(p) {
		return "", noEngine{p, self}
	}
	return p, nil
}

// execEngine replaces this process with sandbox-engine given the same
// arguments: the same process, streams and signals; its exit status is
// this command's. It returns only when it cannot (no sandbox-engine
// beside this program, or a signal that came first).
func (g *Globals) execEngine(ctx context.Context) error {
	p, err := enginePath()
	if err != nil {
		return err
	}
	if ctx != nil {
		if c := context.Cause(ctx); c != nil {
			return c
		}
	}
	err = syscall.Exec(p, append([]string{p}, g.argv...), os.Environ())
	return fmt.Errorf("executing %s: %w", p, err)
}

// The groups whose commands all run in sandbox-engine.

var imagesCommands = []command{
	{use: "image", short: "Import, list, check and remove the images native runs can have as their root"},
	{use: "manifest DEVCONTAINER.json", short: "Read a devcontainer.json into a signed, content-addressed environment manifest"},
	{use: "vm", short: "Build and check the guest image S5 microVMs boot"},
}

var fleetsCommands = []command{
	{use: "fleet", short: "Run many items as one fleet, each sealed, and prove any one of them"},
}

var serviceCommands = []command{
	{use: "serve", short: "Serve the host API: live sandboxes, execs, files, one-shot runs (HTTP/JSON)"},
	{use: "mcp [--policy FILE] [--jcp FILE --as NAME] [--http ADDR --token-file FILE]", short: "Serve the sandbox's tools to an MCP client (stdio, or streamable HTTP)"},
	{use: "cluster", short: "See a cluster's hosts and work queue (hosts join with 'serve --cluster')"},
}
