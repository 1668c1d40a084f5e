package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// The live sandboxes, in a running service ('sandbox serve'): made,
// exec'd into, copied into and out of, listed, suspended, resumed,
// closed, seeded, and claimed from its warm pools. Every command here
// talks to the service through its API (package client) and runs
// nothing of the engine itself. A live sandbox is a durable run (seed
// 000) whose run record survives it.

var sandboxesCommands = []command{
	{use: "create", make: createCmd},
	{use: "exec", make: execCmd},
	{use: "cp", make: cpCmd},
	{use: "ls", make: lsCmd},
	{use: "watch", make: watchCmd},
	{use: "ps", make: psCmd},
	{use: "rm", make: rmCmd},
	{use: "suspend", make: suspendCmd},
	{use: "fork", make: forkCmd},
	{use: "port", make: portCmd},
	{use: "resume", make: resumeCmd},
	{use: "close", make: closeCmd},
	{use: "seed", make: seedCmd},
	{use: "preservation", make: preservationCmd},
	{use: "pools", make: poolsCmd},
}

func createCmd(g *Globals) *cobra.Command {
	var (
		gf      GrantFlags
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
its own network namespace (loopback only), and an S5 sandbox's in its VM
(on 0.0.0.0 or the guest's address, 10.0.2.15: its VM monitor forwards
the port from the loopback of a network namespace of its own); recorded
in each exec's attestation. Nothing outside the sandbox but the service
can reach it, and the service only once 'sandbox port' exposes it for a
while.

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
		Args: UsageArgs(cobra.NoArgs),
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
				cl, err := g.Client()
				if err != nil {
					return err
				}
				defer cl.Close()
				sb, err := cl.Claim(cmd.Context(), poolArg)
				return printSandbox(cmd, asJSON, sb, err)
			}
			spec := client.SandboxSpec{Tier: tierArg, Grants: args, Listen: listen, Pids: pids, CPUs: cpus, Image: imgRef}
			if manFile != "" {
				if spec.Manifest, err = g.signedManifest(manFile); err != nil {
					return err
				}
			}
			if memory != "" {
				if spec.MemoryBytes, err = grant.ParseSize(memory); err != nil {
					return errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
				}
			}
			if spec.Env, err = ParseEnv(envArgs); err != nil {
				return err
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			sb, err := cl.Create(cmd.Context(), spec)
			return printSandbox(cmd, asJSON, sb, err)
		},
	}
	gf.Add(c)
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

func execCmd(g *Globals) *cobra.Command {
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
		Args: UsageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			x := client.ExecSpec{Args: args[1:], Dir: dir, DeadlineMS: deadline.Milliseconds()}
			if deadline < 0 {
				return errs.Usage{Err: errors.New("--deadline: want a duration above zero")}
			}
			var err error
			if x.Env, err = ParseEnv(envArgs); err != nil {
				return err
			}
			if !noStdin && !IsTerminal(os.Stdin) {
				x.StdinStream = cmd.InOrStdin()
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := cl.Exec(cmd.Context(), args[0], x, cmd.OutOrStdout(), cmd.ErrOrStderr())
			var oe *client.OutputError
			if res == nil {
				// As for run: sandbox's own statuses are 125 to 127
				// (exit.go), the message first.
				return APIErr(err)
			}
			code, _ := runExit(res, errors.As(err, &oe), context.Cause(cmd.Context()))
			switch {
			case asJSON:
				PrintJSON(cmd.ErrOrStderr(), res)
			case !quiet:
				printSummary(cmd.ErrOrStderr(), res)
			case res.Outcome == nil || res.Outcome.Status != "exited" || oe != nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: ended  %s\n", DescribeOutcome(res.Outcome))
			}
			if code != 0 {
				return ExitError{code}
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

func cpCmd(g *Globals) *cobra.Command {
	var mode uint32
	c := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a live sandbox (SANDBOX:/path)",
		Long: `Copy one file between this machine and a live sandbox. One side is
SANDBOX:/path, an absolute path under one of the sandbox's storage grants
(its workspace is one); the other is a local file, or - for stdin/stdout.
Into a sandbox, the path must be under a read-write grant; the file is
written whole or not at all. Symbolic links in the sandbox are never
followed. The file streams both ways (nothing holds it whole); on a
terminal, the bytes copied and their rate are drawn on stderr.`,
		Args: UsageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, sp, sok := sandboxPath(args[0])
			did, dp, dok := sandboxPath(args[1])
			if sok == dok {
				return errs.Usage{Err: errors.New("want exactly one side as SANDBOX:/path")}
			}
			cl, err := g.Client()
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
				var size int64
				if f, ok := r.(*os.File); ok {
					if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
						size = fi.Size()
					}
				}
				bar := NewProgress(cmd.ErrOrStderr(), "cp "+args[1], Bytes, "", size)
				_, err := cl.Upload(cmd.Context(), did, dp, bar.Reader(r), m)
				bar.Done()
				return APIErr(err)
			}
			bar := NewProgress(cmd.ErrOrStderr(), "cp "+args[0], Bytes, "", 0)
			defer bar.Done()
			if args[1] == "-" {
				_, err := cl.Download(cmd.Context(), sid, sp, bar.Writer(cmd.OutOrStdout()))
				return APIErr(err)
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
			if _, err := cl.Download(cmd.Context(), sid, sp, bar.Writer(tmp)); err != nil {
				tmp.Close()
				return APIErr(err)
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

// sandboxPath splits "SANDBOX:/path"; ok is false for a local path.
func sandboxPath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func lsCmd(g *Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls SANDBOX:/path",
		Short: "List a directory of a live sandbox",
		Args:  UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, p, ok := sandboxPath(args[0])
			if !ok {
				return errs.Usage{Err: fmt.Errorf("%q: want SANDBOX:/path", args[0])}
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			l, err := cl.ListFiles(cmd.Context(), id, p)
			if err != nil {
				return APIErr(err)
			}
			if asJSON {
				if l == nil {
					l = []client.FileInfo{}
				}
				return PrintJSON(cmd.OutOrStdout(), l)
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

func watchCmd(g *Globals) *cobra.Command {
	var asJSON, recursive bool
	c := &cobra.Command{
		Use:   "watch SANDBOX:/dir [-r]",
		Short: "Print the changes under a directory of a live sandbox as they happen",
		Long: `Watch a directory of a live sandbox (under one of its storage grants; its
workspace is one) and print each change as it happens, one a line:
"create PATH", "modify PATH", "delete PATH", "rename OLD -> NEW" (a
directory's with a trailing /), until interrupted or until the sandbox is
suspended, closed or removed. -r follows every directory beneath it too
(at most 4096). Changes that come faster than they can be read are dropped
past a bound, and a line "overflow: ..." says so; nothing is silently
lost. Symbolic links in the sandbox are never followed. --json prints the
service's events (docs/api.md), one JSON object a line.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, p, ok := sandboxPath(args[0])
			if !ok {
				return errs.Usage{Err: fmt.Errorf("%q: want SANDBOX:/dir", args[0])}
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			err = cl.Watch(cmd.Context(), id, p, recursive, func(e client.WatchEvent) error {
				if asJSON {
					return enc.Encode(e)
				}
				path := e.Path
				if e.Dir {
					path += "/"
				}
				var err error
				switch e.Op {
				case "watching":
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: watching %s\n", e.Path)
				case "rename":
					from := e.From
					if e.Dir {
						from += "/"
					}
					_, err = fmt.Fprintf(out, "rename %s -> %s\n", from, path)
				case "overflow", "ended":
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %s: %s\n", e.Op, e.Why)
				default:
					_, err = fmt.Fprintf(out, "%s %s\n", e.Op, path)
				}
				return err
			})
			if cmd.Context().Err() != nil {
				return context.Cause(cmd.Context()) // interrupted: exits as an interrupted command does
			}
			return APIErr(err)
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch every directory beneath it too")
	c.Flags().BoolVar(&asJSON, "json", false, "print the events as JSON, one a line")
	return c
}

// printSandbox prints what the service answered a create or a claim
// with: the sandbox's ID, or it as JSON.
func printSandbox(cmd *cobra.Command, asJSON bool, sb *client.Sandbox, err error) error {
	if err != nil {
		return APIErr(err)
	}
	if asJSON {
		return PrintJSON(cmd.OutOrStdout(), sb)
	}
	fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
	return nil
}

func psCmd(g *Globals) *cobra.Command {
	var here bool
	list := func(cl *client.Client, ctx context.Context) ([]client.Sandbox, error) {
		if here {
			return cl.ListHere(ctx)
		}
		return cl.List(ctx)
	}
	c := serviceList(g, "ps", "List the sandboxes of the running service (in a cluster, of every host): live and suspended",
		list, "ID\tTIER\tSTATE\tCREATED\tEXECS\tRUNNING\tWORKSPACE", func(s client.Sandbox) string {
			where := s.Workspace
			if s.Host != "" {
				where = "on host " + s.Host
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s", s.ID, s.Tier, s.State, s.Created.Local().Format("2006-01-02 15:04:05"), s.Execs, s.Running, where)
		})
	c.Long = `List the caller's sandboxes: live and suspended. On a host of a cluster
(docs/cluster.md), also those the cluster keeps on its other hosts (live,
suspended, or lost with their host), each shown "on host ID" in place of
its workspace, with what the cluster keeps of it (its tier, state and
creation; its execs are its host's to count); --here lists this host's
alone. A cluster that does not answer fails the list (exit 7) rather
than leave sandboxes out unsaid.`
	c.Flags().BoolVar(&here, "here", false, "in a cluster, this host's sandboxes alone")
	return c
}

// serviceList is a command that lists what the running service's list
// call returns: a table with header and a row of each, or a JSON array.
func serviceList[T any](g *Globals, use, short string, list func(*client.Client, context.Context) ([]T, error), header string, row func(T) string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			l, err := list(cl, cmd.Context())
			if err != nil {
				return APIErr(err)
			}
			return PrintList(cmd, asJSON, l, header, row)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func rmCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SANDBOX...",
		Short: "End live sandboxes: everything in them ends, their workspaces go",
		Long: `End each live sandbox: every process in it ends (an exec in flight is
sealed as killed), its writes to quota'd grants are committed, and its
workspace is removed. Sealed runs of its execs stay.`,
		Args: UsageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			var errsOut []error
			for _, id := range args {
				if err := cl.Remove(cmd.Context(), id); err != nil {
					errsOut = append(errsOut, APIErr(err))
				}
			}
			return errors.Join(errsOut...)
		},
	}
}

func suspendCmd(g *Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "suspend SANDBOX",
		Short: "Park a live sandbox: keep its workspace by address, then tear it down",
		Long: `Suspend a live sandbox: everything in it is frozen (nothing writes after
that, background processes included), its workspace is stored in the
state directory as a content-addressed tree (a second suspension stores
only what changed), a Suspended segment naming the tree and this host's
environment is appended to its run record, and only then is it torn
down. S1 processes do not survive: S1 keeps no memory image, and the
record says so by naming none; an exec in flight in an S1 sandbox
refuses the suspension. An S2 sandbox's execs in flight are parked at
their next host call (their journal, memory and open files kept, the
snapshot's memory image naming them; their callers are told), and
'sandbox resume' continues them where they stopped; one that makes no
host call within 10 s is interrupted and sealed instead.
'sandbox resume' starts it again; 'sandbox close' abandons it.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callService(cmd, g, asJSON, func(cl *client.Client) (*client.Snapshot, error) { return cl.Suspend(cmd.Context(), args[0]) },
				func(s *client.Snapshot) string {
					return fmt.Sprintf("%s suspended: workspace %s, environment %s", args[0], s.Root, s.Manifest)
				})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	return c
}

func forkCmd(g *Globals) *cobra.Command {
	var asJSON, suspended bool
	var n int
	c := &cobra.Command{
		Use:   "fork SANDBOX -n N",
		Short: "Make N sandboxes from one sandbox's state",
		Long: `Fork a sandbox into N (1 to 64): one call makes N new sandboxes, each with
the state the sandbox has now. A live sandbox is frozen between its
execs (an exec in flight refuses the fork), its workspace is kept by
content address as a suspension keeps it (an S5 VM's memory image too),
and then it runs on, its record unchanged; a suspended one gives its
last snapshot and stays suspended. The children share that snapshot's
chunks; each is a sandbox of its own, yours, with the sandbox's tier,
grants and limits, and its own run record, which begins with a forked
segment citing the sandbox's record and the head it had then. Each is
started by being resumed from the snapshot (its workspace restored);
--suspended leaves them suspended, to be resumed when wanted.

A child that could not be made (the host's room for live sandboxes, say)
is said in its place, its record closed saying why; the others stand.
The exit status is then that of the first child's error. A closed
sandbox is not forked.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || n > client.MaxFork {
				return errs.Usage{Err: fmt.Errorf("-n %d: a fork makes 1 to %d sandboxes", n, client.MaxFork)}
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			f, err := cl.Fork(cmd.Context(), args[0], client.ForkSpec{Count: n, Suspended: suspended})
			if err != nil {
				return APIErr(err)
			}
			var first error
			failed := 0
			for _, ch := range f.Children {
				if ch.Error != nil {
					failed++
					if first == nil {
						first = APIErr(ch.Error)
					}
				}
			}
			if asJSON {
				if err := PrintJSON(cmd.OutOrStdout(), f); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s forked at head %s: %d of %d made\n", f.Parent, f.Head, len(f.Children)-failed, len(f.Children))
				for _, ch := range f.Children {
					switch {
					case ch.Error != nil:
						fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %s was not made: %s\n", ch.ID, ch.Error.Message)
					case ch.Sandbox.State == "suspended":
						fmt.Fprintf(cmd.OutOrStdout(), "%s  suspended\n", ch.ID)
					default:
						fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  %s\n", ch.ID, ch.Sandbox.State, ch.Sandbox.Workspace)
					}
				}
			}
			if first != nil {
				return fmt.Errorf("%d of %d children of %s were not made; the first: %w", failed, len(f.Children), f.Parent, first)
			}
			return nil
		},
	}
	c.Flags().IntVarP(&n, "count", "n", 1, "how many sandboxes to make (1 to 64)")
	c.Flags().BoolVar(&suspended, "suspended", false, "leave the children suspended: each starts when it is resumed")
	c.Flags().BoolVar(&asJSON, "json", false, "print the fork (every child, made or not) as JSON")
	return c
}

func resumeCmd(g *Globals) *cobra.Command {
	var asJSON, here bool
	c := &cobra.Command{
		Use:   "resume SANDBOX",
		Short: "Start a suspended sandbox again from its run record",
		Long: `Resume a suspended sandbox: its run record is verified from its genesis,
this host's environment must be the one recorded (manifest-mismatch
otherwise), its workspace is restored from the recorded tree (every
chunk checked against its address), it starts again under its id, unit
and grants, and a Resumed segment is appended with the idle energy its
retained state drew while parked (estimated, and labelled so). Its
workspace has a new path on this host.

An S2 sandbox suspended while execs ran had them parked at a host call;
resume continues each where it stopped (its journal replayed to the
park point, its memory and open files checked there), seals it as one
run, and prints what it wrote after the park point, then a line on
stderr naming its run. It answers when they have ended.

In a cluster (serve --cluster), a sandbox whose suspension the cluster
keeps is placed as a new one is (docs/cluster.md): it resumes on the
host where it costs least, which may be another than the one asked
(the placement is sealed into its record); --here resumes it on the
host asked.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			resume := cl.Resume
			if here {
				resume = cl.ResumeHere
			}
			sb, err := resume(cmd.Context(), args[0])
			if err != nil {
				return APIErr(err)
			}
			if asJSON {
				return PrintJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s resumed: workspace %s\n", sb.ID, sb.Workspace)
			var failed error
			for _, c := range sb.Continued {
				cmd.OutOrStdout().Write(c.Stdout)
				cmd.ErrOrStderr().Write(c.Stderr)
				switch {
				case c.Error != "":
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: exec #%d was not continued: %s\n", c.N, c.Error)
					failed = fmt.Errorf("exec #%d of %s was not continued: %s", c.N, sb.ID, c.Error)
				case c.Result != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: exec #%d continued and sealed: run %s, %s\n", c.N, c.Result.Run, DescribeOutcome(c.Result.Outcome))
				}
			}
			return failed
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	c.Flags().BoolVar(&here, "here", false, "in a cluster: resume it on the host asked, not where the cluster places it")
	return c
}

func closeCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "close SANDBOX",
		Short: "End a sandbox's durable run, live or suspended",
		Long: `Close a sandbox's run record: a live sandbox is removed as 'sandbox rm'
does, a suspended one is abandoned (its record gets a Closed segment and
can no longer be resumed). The record, and what it names, stay.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			return APIErr(cl.CloseRecord(cmd.Context(), args[0]))
		},
	}
}

// claimFlags are an owner claim's fields as flags: all or none.
type claimFlags struct {
	run, requester, thread, repository, head string
}

func (f *claimFlags) add(c *cobra.Command, what string) {
	c.Flags().StringVar(&f.run, "run", "", "the owner claim's run ("+what+")")
	c.Flags().StringVar(&f.requester, "requester", "", "the owner claim's requester")
	c.Flags().StringVar(&f.thread, "thread", "", "the owner claim's thread")
	c.Flags().StringVar(&f.repository, "repository", "", "the owner claim's repository name (e.g. acme/widgets)")
	c.Flags().StringVar(&f.head, "head", "", "the commit the ref resolved to, in full (40 or 64 hex digits)")
}

// claim is the claim the flags give, nil when none is.
func (f *claimFlags) claim(ref string) (*client.Claim, error) {
	fields := map[string]string{"--run": f.run, "--requester": f.requester, "--thread": f.thread, "--repository": f.repository, "--head": f.head}
	var set, unset []string
	for _, k := range []string{"--run", "--requester", "--thread", "--repository", "--head"} {
		if fields[k] != "" {
			set = append(set, k)
		} else {
			unset = append(unset, k)
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	if len(unset) > 0 {
		return nil, errs.Usage{Err: fmt.Errorf("an owner claim needs %s too (given: %s)", strings.Join(unset, ", "), strings.Join(set, ", "))}
	}
	return &client.Claim{Run: f.run, Requester: f.requester, Thread: f.thread, Repository: f.repository, Ref: ref, Head: f.head}, nil
}

func seedCmd(g *Globals) *cobra.Command {
	var (
		spec       client.SeedSpec
		cf         claimFlags
		bearerFile string
		asJSON     bool
	)
	c := &cobra.Command{
		Use:   "seed SANDBOX --source REPO --ref BRANCH [--run R --requester U --thread T --repository NAME --head COMMIT]",
		Short: "Seed a live sandbox's workspace with a git checkout bound to an owner",
		Long: `Seed a live S1 sandbox's workspace with a checkout of a git repository
(docs/preservation.md). --source is an absolute path the sandbox may read
(it was created with fs:PATH:ro) or an https URL it may reach (a net
grant), with no credential in it; --bearer-file gives a token for an
https fetch, used once on git's standard input and never stored.

The owner claim (--run, --requester, --thread, --repository, --head: all
or none) is yours to give from what you trust, never from what the
sandbox ran. The seed is marked in the sandbox's lifecycle record before
the workspace is touched; git runs inside the sandbox, confined, each
step a sealed exec; the claim binds only when the checkout's head is
--head. --origin binds a credential-free https remote to the owner
(default: --source when it is an https URL). Without a claim the seed
works but has no owner: it stays protected (never parked for idleness)
and its receipt is unknown.

Seeding again with the same claim, source, ref, origin (and
--incarnation, if given) answers as the first seed did and leaves the
checkout as it is, even if its HEAD moved; anything else is refused
before the checkout or origin is touched.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.claim(spec.Ref)
			if err != nil {
				return err
			}
			spec.Claim = cl
			if bearerFile != "" {
				b, err := os.ReadFile(bearerFile)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--bearer-file: %w", err)}
				}
				spec.Bearer = strings.TrimSpace(string(b))
				if spec.Bearer == "" {
					return errs.Usage{Err: errors.New("--bearer-file is empty")}
				}
			}
			return callService(cmd, g, asJSON, func(c *client.Client) (*client.Seeded, error) { return c.Seed(cmd.Context(), args[0], spec) },
				func(s *client.Seeded) string {
					what := "seeded"
					if s.Cached {
						what = "already seeded (the first seed's answer; the checkout untouched)"
					}
					return fmt.Sprintf("%s %s: %s at %s, incarnation %s", s.Sandbox, what, s.State, s.Head, s.Incarnation)
				})
		},
	}
	c.Flags().StringVar(&spec.Source, "source", "", "the repository: an absolute path or an https URL")
	c.Flags().StringVar(&spec.Ref, "ref", "", "the branch to check out (Git's branch-name rules; '+' is fine)")
	c.Flags().StringVar(&spec.Origin, "origin", "", "a credential-free https remote to bind to the owner")
	c.Flags().StringVar(&spec.Incarnation, "incarnation", "", "on a retry: the incarnation the first seed answered")
	c.Flags().StringVar(&bearerFile, "bearer-file", "", "a file holding a token for an https fetch (never stored)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cf.add(c, "with --requester, --thread, --repository and --head")
	return c
}

func preservationCmd(g *Globals) *cobra.Command {
	var (
		spec   client.ReceiptSpec
		cf     claimFlags
		ref    string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "preservation SANDBOX --source REPO --ref BRANCH --run R --requester U --thread T --repository NAME --head COMMIT --incarnation I",
		Short: "Read the passive preservation receipt of a seeded sandbox",
		Long: `Print what is kept of a seeded sandbox for one exact owner claim, seed
source and incarnation: present (a complete checkpoint of it is stored),
lost (its record names a checkpoint no longer whole in the store) or
unknown. It is read from the sandbox's lifecycle record and the store
alone: it never wakes, starts or resumes the sandbox. A claim, source or
incarnation that is not the record's is refused, and learns nothing.
A receipt is never a permit to retire the sandbox.`,
		Args: UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.claim(ref)
			if err != nil {
				return err
			}
			if cl == nil {
				return errs.Usage{Err: errors.New("a receipt is for an owner claim: give --run, --requester, --thread, --repository and --head")}
			}
			spec.Claim = *cl
			return callService(cmd, g, asJSON, func(c *client.Client) (*client.PreservationReceipt, error) {
				return c.Receipt(cmd.Context(), args[0], spec)
			}, func(r *client.PreservationReceipt) string {
				s := fmt.Sprintf("%s: %s (%s)", r.Sandbox, r.State, r.Reason)
				if r.Checkpoint != "" {
					s += fmt.Sprintf("\ncheckpoint %s, taken %s, kept until %s", r.Checkpoint, r.Taken.Format("2006-01-02T15:04:05Z"), r.RetainUntil.Format("2006-01-02"))
				}
				return s
			})
		},
	}
	c.Flags().StringVar(&spec.Source, "source", "", "the seed's source, as it was seeded")
	c.Flags().StringVar(&ref, "ref", "", "the claim's ref")
	c.Flags().StringVar(&spec.Incarnation, "incarnation", "", "the incarnation asked about")
	c.Flags().BoolVar(&asJSON, "json", false, "print the receipt as JSON")
	cf.add(c, "with --requester, --thread, --repository and --head")
	return c
}

func poolsCmd(g *Globals) *cobra.Command {
	return serviceList(g, "pools", "List the service's warm pools: ready sandboxes, claims, misses, evictions, idle energy",
		(*client.Client).Pools, "POOL\tREADY\tSIZE\tCLAIMS\tMISSES\tEVICTIONS\tCLAIMED IDLE\tEVICTED IDLE", func(p client.Pool) string {
			ready := fmt.Sprint(p.Ready)
			if p.Draining {
				ready += " (draining)"
			}
			return fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%.3f J\t%.3f J", p.Name, ready, p.Size, p.Claims, p.Misses, p.Evictions, float64(p.ClaimedUJ)/1e6, float64(p.EvictedUJ)/1e6)
		})
}

// strings are the grant flags as the service takes them: checked here
// first (the message names the flag), relative paths made absolute from
// this directory. --grants files and --inject are not taken by live
// sandboxes yet.
func (f *GrantFlags) strings() ([]string, error) {
	if f.file != "" || len(f.inject) > 0 {
		return nil, errs.Usage{Err: errors.New("--grants and --inject are not taken by live sandboxes yet: give each grant with --grant")}
	}
	if _, err := f.Parse(); err != nil {
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

// ReadDevcontainer reads file up to one byte over manifest.MaxSize:
// enough for the reader to refuse it, naming the bound, without reading
// a file of any size whole.
func ReadDevcontainer(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, manifest.MaxSize+1))
}

// signedManifest is the signed manifest file holds: as it is, when it is
// one; else read as a devcontainer.json and signed with this host's key.
// Either is read up to manifest.MaxSize.
func (g *Globals) signedManifest(file string) ([]byte, error) {
	b, err := ReadDevcontainer(file)
	if err != nil {
		return nil, err
	}
	if s, err := manifest.Verify(b, key.Trust{}); s != nil && (err == nil || errors.Is(err, reject.UntrustedKey)) {
		return b, nil // the service decides whom it trusts
	}
	m, err := manifest.FromDevcontainer(b)
	if err != nil {
		return nil, RefusedInput{fmt.Sprintf("%s: %v", file, err)}
	}
	_, k, err := g.HostKey()
	if err != nil {
		return nil, err
	}
	s, err := manifest.Seal(m, k)
	if err != nil {
		return nil, err
	}
	return s.Envelope, nil
}

func portCmd(g *Globals) *cobra.Command {
	var asJSON, revoke bool
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "port SANDBOX [PORT] [--ttl D] [--revoke]",
		Short: "Preview a port a live sandbox listens on, through the service",
		Long: `Expose one of a live S1 or S5 sandbox's listen ports (create --listen PORT)
through the service: the service answers with a URL on its TCP listener
(serve --listen), https://HOST:PORT/preview/TOKEN/, that reaches the port
as a process inside the sandbox would, for whoever has the URL, until it
expires (--ttl, default 1h, at most 24h) or is revoked (--revoke, every
open preview of the port). The URL is printed once: the service keeps
only the token's address, which the sandbox's run record seals with the
port and the expiry (an exposed segment; a revocation, an unexposed one).
A preview ends when its sandbox is suspended or closed. Each request
through it counts as activity for the idle fence. Its pages run in an
origin of their own, never the service's. Nothing listening on the port
is refused before a URL is made.

With no PORT, the sandbox's open previews are listed (without their
tokens).`,
		Args: UsageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			port := 0
			if len(args) == 2 {
				p, err := strconv.Atoi(args[1])
				if err != nil || p < 1 || p > 65535 {
					return errs.Usage{Err: fmt.Errorf("port %q: want 1 to 65535", args[1])}
				}
				port = p
			}
			switch {
			case revoke && port == 0:
				return errs.Usage{Err: errors.New("--revoke needs the PORT whose previews it ends")}
			case ttl != 0 && (port == 0 || revoke):
				return errs.Usage{Err: errors.New("--ttl is for making a preview: give a PORT, without --revoke")}
			case ttl < 0 || (ttl != 0 && ttl < time.Second) || ttl > 24*time.Hour:
				return errs.Usage{Err: fmt.Errorf("--ttl %s: want 1s to 24h", ttl)}
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			out := cmd.OutOrStdout()
			switch {
			case port == 0:
				ps, err := cl.Previews(cmd.Context(), args[0])
				if err != nil {
					return APIErr(err)
				}
				if asJSON {
					return PrintJSON(out, client.Previews{Previews: ps})
				}
				if len(ps) == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %s has no open previews\n", args[0])
				}
				for _, p := range ps {
					fmt.Fprintf(out, "%d  until %s  %s\n", p.Port, p.Expires.Local().Format(time.RFC3339), p.ID)
				}
				return nil
			case revoke:
				n, err := cl.Unexpose(cmd.Context(), args[0], port)
				if err != nil {
					return APIErr(err)
				}
				if asJSON {
					return PrintJSON(out, client.Revoked{Revoked: n})
				}
				fmt.Fprintf(out, "revoked %d preview(s) of port %d\n", n, port)
				return nil
			}
			p, err := cl.Expose(cmd.Context(), args[0], client.PreviewSpec{Port: port, TTLSeconds: int64(ttl / time.Second)})
			if err != nil {
				return APIErr(err)
			}
			if asJSON {
				return PrintJSON(out, p)
			}
			fmt.Fprintln(out, p.URL)
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: port %d of %s until %s (preview %s)\n", p.Port, p.Sandbox, p.Expires.Local().Format(time.RFC3339), p.ID)
			return nil
		},
	}
	c.Flags().DurationVar(&ttl, "ttl", 0, "how long the preview lasts (1s to 24h; default 1h)")
	c.Flags().BoolVar(&revoke, "revoke", false, "end every open preview of PORT")
	c.Flags().BoolVar(&asJSON, "json", false, "print the preview (or the list) as JSON")
	return c
}
