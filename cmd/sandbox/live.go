package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/reject"
)

// EnvHost names the service the CLI talks to: a unix socket's path or
// an https:// URL (with $SANDBOX_TOKEN).
const EnvHost = "SANDBOX_HOST"

// noService is the error of a live-sandbox command with no service to
// talk to.
type noService struct{ where string }

func (e noService) Error() string {
	return fmt.Sprintf("no sandbox service is running (%s): start one with 'sandbox serve &' (live sandboxes live in it), or point $%s at one", e.where, EnvHost)
}

func (noService) Unavailable() bool { return true }

// client finds the service: $SANDBOX_HOST, else the state directory's
// socket when something answers on it.
func (g *globals) client() (*client.Client, error) {
	if h := os.Getenv(EnvHost); h != "" {
		return client.Dial(h, client.Options{Token: os.Getenv("SANDBOX_TOKEN")})
	}
	d, err := g.stateDir()
	if err != nil {
		return nil, err
	}
	sock := d.Path(client.SocketName)
	if _, err := os.Stat(sock); err != nil {
		return nil, noService{"no socket at " + sock}
	}
	return client.Dial(sock, client.Options{})
}

// apiErr turns a service's error into the CLI's: the category decides
// the exit status, as for an in-process error.
func apiErr(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return categorized{ae}
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return noService{err.Error()} // a socket nothing serves on, or none
	}
	return err
}

// categorized carries a service error's category to errs.Of.
type categorized struct{ e *client.APIError }

func (c categorized) Error() string { return c.e.Message }
func (c categorized) Invalid() bool { return c.e.Category == "invalid" }
func (c categorized) Unavailable() bool {
	return c.e.Category == "unavailable"
}
func (c categorized) Limit() bool { return c.e.Category == "limit" }
func (c categorized) Unwrap() error {
	switch c.e.Category {
	case "not-found":
		return os.ErrNotExist
	case "denied":
		return grant.ErrDenied
	case "canceled":
		return context.Canceled
	case "integrity":
		return reject.New(reject.Invalid, "", "%s", c.e.Message) // exit 4
	case "untrusted":
		return reject.UntrustedKey
	}
	return nil
}

func createCmd(g *globals) *cobra.Command {
	var (
		gf      grantFlags
		tierArg string
		envArgs []string
		listen  []int
		asJSON  bool
		memory  string
		pids    int64
		cpus    float64
		imgRef  string
		manFile string
		poolArg string
	)
	c := &cobra.Command{
		Use:   "create [--tier S1|S2|S5] [--grant G]... [--listen PORT]...",
		Short: "Create a live sandbox in the running service; print its id",
		Long: `Create a live sandbox in the service ('sandbox serve') and print its id.
A live sandbox keeps its grants, limits and a workspace (a directory of
its own, granted read-write, where each exec starts) across many execs:
at S1 it is one confined init that every 'sandbox exec' joins, so a
process one exec starts in the background (a dev server) is there for
the next; at S2 each exec is a WebAssembly module run that shares the
workspace and grants; at S5 it is one microVM with its own kernel
(docs/s5.md) whose processes and memory a suspension keeps in a memory
image. Each exec is sealed as a run of its own, its
attestation naming the sandbox. 'sandbox rm' ends it.

--listen PORT lets an S1 sandbox's processes listen on a TCP port inside
its own network namespace (loopback only; recorded in each exec's
attestation): nothing outside the sandbox can reach it.

--pool NAME claims a sandbox the service's warm pool NAME made ahead
('sandbox serve --pool'): ready at once, its record carrying the energy
spent keeping it ready.

--image NAME runs an S1 sandbox's programs in an imported image's root
filesystem ('sandbox image') instead of the host's system directories.
--manifest FILE makes it from an environment manifest: a devcontainer.json
(read and signed with this host's key, as 'sandbox manifest' does) or a
signed manifest ('sandbox manifest -o'). Its image (which must be
imported; a pinned one, name@sha256:..., by that digest), its
containerEnv and remoteEnv (beneath --env) and its forwardPorts (as
--listen) make the sandbox; its features are refused (each is installed
by a script). The sandbox's unit binds the manifest's and the root
filesystem's addresses, and 'sandbox resume' checks both: the root
filesystem is listed again and must hash to the same address.

Grants:
` + grant.Syntax,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			args, err := gf.strings()
			if err != nil {
				return err
			}
			if poolArg != "" {
				var other []string
				cmd.Flags().Visit(func(f *pflag.Flag) {
					if f.Name != "pool" && f.Name != "json" && f.Name != "home" {
						other = append(other, "--"+f.Name)
					}
				})
				if len(other) > 0 {
					return errs.Usage{Err: fmt.Errorf("--pool takes a sandbox its pool made ahead, made as the pool says: %s does not apply", strings.Join(other, ", "))}
				}
				cl, err := g.client()
				if err != nil {
					return err
				}
				defer cl.Close()
				sb, err := cl.Claim(cmd.Context(), poolArg)
				if err != nil {
					return apiErr(err)
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), sb)
				}
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
				return nil
			}
			spec := client.SandboxSpec{Tier: tierArg, Grants: args, Listen: listen, Pids: pids, CPUs: cpus, Image: imgRef}
			if manFile != "" {
				if spec.Manifest, err = signedManifest(g, manFile); err != nil {
					return err
				}
			}
			if memory != "" {
				if spec.MemoryBytes, err = grant.ParseSize(memory); err != nil {
					return errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
				}
			}
			if spec.Env, err = parseEnv(envArgs); err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			sb, err := cl.Create(cmd.Context(), spec)
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	gf.add(c)
	c.Flags().StringVar(&tierArg, "tier", "S1", "S1 (native programs), S2 (WebAssembly modules) or S5 (native programs in a microVM)")
	c.Flags().StringVar(&imgRef, "image", "", "run the sandbox's programs in this imported image's root filesystem (S1)")
	c.Flags().StringVar(&manFile, "manifest", "", "make the sandbox from this devcontainer.json or signed manifest (see above)")
	c.Flags().StringVar(&poolArg, "pool", "", "claim a ready sandbox from the service's warm pool of this name ('sandbox serve --pool')")
	c.Flags().StringArrayVar(&envArgs, "env", nil, "set NAME=VALUE in every exec's environment (repeatable)")
	c.Flags().IntSliceVar(&listen, "listen", nil, "a TCP port its processes may listen on, inside the sandbox (S1; repeatable)")
	c.Flags().StringVar(&memory, "memory", "", "memory limit of the sandbox's cgroup (default: the service's)")
	c.Flags().Int64Var(&pids, "pids", 0, "process limit of the sandbox's cgroup (default: the service's)")
	c.Flags().Float64Var(&cpus, "cpus", 0, "CPU limit, in CPUs (default: the service's)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return c
}

func execCmd(g *globals) *cobra.Command {
	var (
		envArgs  []string
		dir      string
		deadline time.Duration
		quiet    bool
		asJSON   bool
		noStdin  bool
	)
	c := &cobra.Command{
		Use:   "exec [flags] SANDBOX -- COMMAND [ARGS...]",
		Short: "Run a command in a live sandbox, sealed as a run of its own",
		Long: `Run COMMAND in a live sandbox (see 'sandbox create'), with its output
streamed as it comes and sandbox's stdin streamed to it when it is not a
terminal and --no-stdin is not given.
The exec is sealed as a run of its own: its receipt from its own cgroup,
its attestation naming the sandbox; it is listed by 'sandbox runs' and
checked by 'sandbox verify' like any run. Interrupting sandbox (Ctrl-C)
interrupts the exec, which is sealed and summed up as usual (exit 130);
processes it started in the background keep running. Its own failures (a bad flag, no service,
an unknown sandbox) exit 125, as run's do.

` + runExitTable,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			x := client.ExecSpec{Args: args[1:], Dir: dir, DeadlineMS: deadline.Milliseconds()}
			if deadline < 0 {
				return errs.Usage{Err: errors.New("--deadline: want a duration above zero")}
			}
			var err error
			if x.Env, err = parseEnv(envArgs); err != nil {
				return err
			}
			if !noStdin && !isTerminal(os.Stdin) {
				x.StdinStream = cmd.InOrStdin()
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := cl.Exec(cmd.Context(), args[0], x, cmd.OutOrStdout(), cmd.ErrOrStderr())
			var oe *client.OutputError
			if res == nil {
				// As for run: sandbox's own statuses are 125 to 127
				// (exit.go), the message first.
				return apiErr(err)
			}
			code, _ := runExit(res, errors.As(err, &oe), context.Cause(cmd.Context()))
			switch {
			case asJSON:
				printJSON(cmd.ErrOrStderr(), res)
			case !quiet:
				printSummary(cmd.ErrOrStderr(), res)
			case res.Outcome == nil || res.Outcome.Status != "exited" || oe != nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: ended  %s\n", describeOutcome(res.Outcome))
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&envArgs, "env", nil, "set NAME=VALUE in the command's environment (repeatable)")
	c.Flags().StringVar(&dir, "dir", "", "working directory (default: the workspace)")
	c.Flags().DurationVar(&deadline, "deadline", time.Minute, "wall-clock limit of the exec")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no summary on stderr")
	c.Flags().BoolVar(&asJSON, "json", false, "the sealed run as JSON on stderr in place of the summary")
	c.Flags().BoolVarP(&noStdin, "no-stdin", "n", false, "give the command no stdin (read none from sandbox's)")
	return c
}

func psCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ps",
		Short: "List the sandboxes of the running service: live and suspended",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			l, err := cl.List(cmd.Context())
			if err != nil {
				return apiErr(err)
			}
			return printList(cmd, asJSON, l, "ID\tTIER\tSTATE\tCREATED\tEXECS\tRUNNING\tWORKSPACE", func(s client.Sandbox) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s", s.ID, s.Tier, s.State, s.Created.Local().Format("2006-01-02 15:04:05"), s.Execs, s.Running, s.Workspace)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func rmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SANDBOX...",
		Short: "End live sandboxes: everything in them ends, their workspaces go",
		Long: `End each live sandbox: every process in it ends (an exec in flight is
sealed as killed), its writes to quota'd grants are committed, and its
workspace is removed. Sealed runs of its execs stay.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			var errsOut []error
			for _, id := range args {
				if err := cl.Remove(cmd.Context(), id); err != nil {
					errsOut = append(errsOut, apiErr(err))
				}
			}
			return errors.Join(errsOut...)
		},
	}
}

// sandboxPath splits "SANDBOX:/path"; ok is false for a local path.
func sandboxPath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func cpCmd(g *globals) *cobra.Command {
	var mode uint32
	c := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a live sandbox (SANDBOX:/path)",
		Long: `Copy one file between this machine and a live sandbox. One side is
SANDBOX:/path, an absolute path under one of the sandbox's storage grants
(its workspace is one); the other is a local file, or - for stdin/stdout.
Into a sandbox, the path must be under a read-write grant; the file is
written whole or not at all. Symbolic links in the sandbox are never
followed.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, sp, sok := sandboxPath(args[0])
			did, dp, dok := sandboxPath(args[1])
			if sok == dok {
				return errs.Usage{Err: errors.New("want exactly one side as SANDBOX:/path")}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			if dok {
				var r io.Reader = cmd.InOrStdin()
				m := os.FileMode(mode)
				if args[0] != "-" {
					f, err := os.Open(args[0])
					if err != nil {
						return err
					}
					defer f.Close()
					if fi, err := f.Stat(); err == nil && mode == 0 {
						m = fi.Mode().Perm()
					}
					r = f
				}
				if m == 0 {
					m = 0o644
				}
				_, err := cl.Upload(cmd.Context(), did, dp, r, m)
				return apiErr0(err)
			}
			if args[1] == "-" {
				_, err := cl.Download(cmd.Context(), sid, sp, cmd.OutOrStdout())
				return apiErr0(err)
			}
			// Whole or nothing here too: a temporary file, renamed.
			dst := args[1]
			if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
				dst = filepath.Join(dst, filepath.Base(sp))
			}
			tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cp-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			if _, err := cl.Download(cmd.Context(), sid, sp, tmp); err != nil {
				tmp.Close()
				return apiErr(err)
			}
			if err := tmp.Close(); err != nil {
				return err
			}
			return os.Rename(tmp.Name(), dst)
		},
	}
	c.Flags().Uint32Var(&mode, "mode", 0, "permissions of a file copied in (octal, as 0644; default: the source's)")
	return c
}

func apiErr0(err error) error {
	if err == nil {
		return nil
	}
	return apiErr(err)
}

func lsCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls SANDBOX:/path",
		Short: "List a directory of a live sandbox",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, p, ok := sandboxPath(args[0])
			if !ok {
				return errs.Usage{Err: fmt.Errorf("%q: want SANDBOX:/path", args[0])}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			l, err := cl.ListFiles(cmd.Context(), id, p)
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				if l == nil {
					l = []client.FileInfo{}
				}
				return printJSON(cmd.OutOrStdout(), l)
			}
			for _, f := range l {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %10d %s %s\n", f.Mode, f.Size, f.ModTime.Local().Format("2006-01-02 15:04"), f.Name)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

// strings are the grant flags as the service takes them: checked here
// first (the message names the flag), relative paths made absolute from
// this directory. --grants files and --inject are not taken by live
// sandboxes yet.
func (f *grantFlags) strings() ([]string, error) {
	if f.file != "" || len(f.inject) > 0 {
		return nil, errs.Usage{Err: errors.New("--grants and --inject are not taken by live sandboxes yet: give each grant with --grant")}
	}
	if _, err := f.parse(); err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(f.args))
	for i, a := range f.args {
		if out[i], err = grant.ResolveArg(a, cwd); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseEnv turns --env NAME=VALUE flags into an environment.
func parseEnv(args []string) (map[string]string, error) {
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

func poolsCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "pools",
		Short: "List the service's warm pools: ready sandboxes, claims, misses, evictions, idle energy",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			l, err := cl.Pools(cmd.Context())
			if err != nil {
				return apiErr(err)
			}
			return printList(cmd, asJSON, l, "POOL\tREADY\tSIZE\tCLAIMS\tMISSES\tEVICTIONS\tCLAIMED IDLE\tEVICTED IDLE", func(p client.Pool) string {
				ready := fmt.Sprint(p.Ready)
				if p.Draining {
					ready += " (draining)"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%.3f J\t%.3f J", p.Name, ready, p.Size, p.Claims, p.Misses, p.Evictions, float64(p.ClaimedUJ)/1e6, float64(p.EvictedUJ)/1e6)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

// printList prints l as a JSON array (empty for none) or as a table
// under header, a row each.
func printList[T any](cmd *cobra.Command, asJSON bool, l []T, header string, row func(T) string) error {
	if asJSON {
		if l == nil {
			l = []T{}
		}
		return printJSON(cmd.OutOrStdout(), l)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, x := range l {
		fmt.Fprintln(tw, row(x))
	}
	return tw.Flush()
}
