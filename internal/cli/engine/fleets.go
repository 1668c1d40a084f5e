package engine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/reject"
)

// Fleets: many items run as one fleet, each sealed, in the service when
// one runs or here, and any one of them proved.

func fleetCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Run many items as one fleet, each sealed, and prove any one of them",
		Long: `A fleet is one command over many inputs: each input is appended to the
command's arguments and run as a sealed run of its own. Its aggregate is
an RFC 6962 Merkle tree over the items (index, input's address, run's
address) in index order, published as a C2SP signed-note checkpoint
signed with this host's key (STATE/fleets/ID). Anyone with the
checkpoint and one item's proof checks that item alone.`,
	}
	c.AddCommand(fleetRunCmd(g), fleetVerifyCmd(g), fleetProveCmd(g))
	return c
}

func fleetRunCmd(g *cli.Globals) *cobra.Command {
	var (
		inputs  string
		units   string
		workers int
		every   int
		local   bool
		gf      cli.GrantFlags
	)
	c := &cobra.Command{
		Use:   "run --inputs FILE [--workers N] [--grant G]... -- COMMAND [ARGS] | run --units FILE",
		Short: "Run COMMAND once per line of FILE, each sealed, and seal the fleet's checkpoint",
		Long: `Run COMMAND once per line of FILE (the line appended to its arguments),
each item a sealed run of its own, --workers at once; then seal the
fleet's aggregate: an RFC 6962 Merkle tree over the items in index
order, published as a C2SP signed-note checkpoint. While it runs, each
time the items done from index 0 grow by --checkpoint-every (default a
tenth of the fleet) that prefix's checkpoint is published too
(checkpoints/SIZE); the final one must extend each ('fleet verify').

--units FILE runs N units instead: each line of FILE is a JSON array, a
command line of its own (["/bin/wc", "-l", "/data/a"]); each is an item,
whose input (as its leaf names it) is that array's canonical JSON.

With a service running ('sandbox serve'), the fleet runs there, across
its workers, and its directory is in the service's state; --local runs
it in this process. On a terminal, progress (items done, their rate and
an estimate of the time left) is drawn on stderr.`,
		Args: cli.UsageArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if workers < 1 {
				return cli.RefusedInput{Msg: fmt.Sprintf("--workers %d: at least 1", workers)}
			}
			if (units != "") == (len(args) > 0) || units != "" && cmd.Flags().Changed("inputs") {
				return errs.Usage{Err: fmt.Errorf("give a COMMAND (its inputs from --inputs) or --units FILE, not both")}
			}
			src := inputs
			if units != "" {
				src = units
			}
			var r io.Reader = cmd.InOrStdin()
			if src != "-" {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			var in []string
			var us [][]string
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for n := 1; sc.Scan(); n++ {
				if units == "" {
					in = append(in, sc.Text())
					continue
				}
				var u []string
				if err := json.Unmarshal(sc.Bytes(), &u); err != nil || len(u) == 0 {
					return cli.RefusedInput{Msg: fmt.Sprintf("%s line %d: want a JSON array of strings, a command line", src, n)}
				}
				us = append(us, u)
			}
			if err := sc.Err(); err != nil {
				return err
			}
			if gf.Injects() {
				return cli.RefusedInput{Msg: "--inject: a fleet does not take injected credentials yet"}
			}
			gs, err := gf.Parse()
			if err != nil {
				return err
			}
			wd, _ := os.Getwd()
			bar := cli.NewProgress(cmd.ErrOrStderr(), "fleet", cli.Items, "items", int64(len(in)+len(us)))
			defer bar.Done()
			progress := func(done, total int) {
				bar.SetTotal(int64(total))
				bar.Set(int64(done))
			}
			if !local {
				cl, forced, err := g.Service()
				if err != nil {
					return err
				}
				if cl != nil {
					defer cl.Close()
					gj, _, err := gs.Canonical()
					if err != nil {
						return err
					}
					res, err := cl.Fleet(cmd.Context(), client.FleetSpec{Args: args, Dir: wd, GrantsJSON: gj, Inputs: in, Units: us, Workers: workers, CheckpointEvery: every}, progress)
					if err == nil {
						bar.Done()
					}
					switch {
					case err == nil:
						return printFleet(cmd, res.ID, res.Items, res.Failed, res.Dir, res.Checkpoint)
					case !forced && errors.As(cli.APIErr(err), new(cli.NoService)):
						// A socket nothing serves on: the fleet runs here.
					default:
						return cli.APIErr(err)
					}
				}
			}
			h, err := hostOf(g)
			if err != nil {
				return err
			}
			defer h.Close()
			res, err := h.RunFleet(cmd.Context(), host.FleetSpec{
				Command: host.CommandLine{Args: args, Grants: gs, Cwd: wd},
				Inputs:  in, Units: us, Workers: workers, CheckpointEvery: every, Progress: progress,
			})
			bar.Done()
			if err != nil {
				return err
			}
			return printFleet(cmd, res.ID, len(res.Items), res.Failed, res.Dir, res.Checkpoint)
		},
	}
	c.Flags().StringVar(&inputs, "inputs", "-", "a file of inputs, one per line ('-': standard input)")
	c.Flags().StringVar(&units, "units", "", "a file of command lines, one JSON array per line: N units in place of COMMAND and --inputs")
	c.Flags().IntVar(&workers, "workers", 2, "items run at once")
	c.Flags().IntVar(&every, "checkpoint-every", 0, "publish the done prefix's checkpoint each time it grows by N items (0: a tenth of the fleet; -1: none)")
	c.Flags().BoolVar(&local, "local", false, "run the fleet in this process even when a service is running")
	gf.Add(c)
	return c
}

// fleetDir is a fleet's directory: an id in this state directory, or a
// path.
func fleetDir(g *cli.Globals, ref string) (string, error) {
	if fi, err := os.Stat(ref); err == nil && fi.IsDir() {
		return ref, nil
	}
	d, err := g.StateDir()
	if err != nil {
		return "", err
	}
	dir := d.Path("fleets", ref)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("no fleet %q in %s: %w", ref, d.Path("fleets"), os.ErrNotExist)
	}
	return dir, nil
}

// loadFleet is a fleet (an id here, or a directory): its directory,
// items and checkpoint's bytes.
func loadFleet(g *cli.Globals, ref string) (string, *fleet.Fleet, []byte, error) {
	dir, err := fleetDir(g, ref)
	if err != nil {
		return "", nil, nil, err
	}
	f, cp, err := host.LoadFleet(dir)
	return dir, f, cp, err
}

// verifiers are the keys checkpoints are checked under: --trust ones,
// else this host's.
func fleetVerifiers(g *cli.Globals, trust []string) ([]note.Verifier, error) {
	if len(trust) == 0 {
		_, k, err := g.HostKey()
		if err != nil {
			return nil, err
		}
		vk, err := (&host.Host{Key: k}).FleetVerifier()
		if err != nil {
			return nil, err
		}
		trust = []string{vk}
	}
	var vs []note.Verifier
	for _, t := range trust {
		v, err := note.ParseVerifierKey(t)
		if err != nil {
			return nil, cli.RefusedInput{Msg: fmt.Sprintf("--trust %q: %v", t, err)}
		}
		vs = append(vs, v)
	}
	return vs, nil
}

func fleetVerifyCmd(g *cli.Globals) *cobra.Command {
	var (
		trust       []string
		consistency string
	)
	c := &cobra.Command{
		Use:   "verify FLEET | --consistency FILE",
		Short: "Check a fleet (its checkpoints and items), or a consistency proof between two of its checkpoints",
		Long: `Check a fleet (an id, or its directory): the checkpoint opens under this
host's verifier key (or --trust VKEY, a C2SP verifier key), names the
fleet's origin and size, and the items in items.jsonl make exactly its
root; and every intermediate checkpoint it published while it ran
(checkpoints/SIZE) opens and is consistent with the final one (an RFC
6962 log-size proof: no item of that prefix changed since). Exits 4
when anything does not hold.

--consistency FILE checks a proof 'sandbox fleet prove FLEET --from M'
wrote, alone (no fleet directory needed): both checkpoints open under
the trusted keys, name one fleet, and the new one extends the old.`,
		Args: cli.UsageArgs(cobra.RangeArgs(0, 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (consistency == "") == (len(args) == 0) {
				return errs.Usage{Err: fmt.Errorf("give a FLEET or --consistency FILE")}
			}
			if consistency != "" {
				b, err := os.ReadFile(consistency)
				if err != nil {
					return err
				}
				var doc fleet.ConsistencyProof
				if err := json.Unmarshal(b, &doc); err != nil {
					return cli.RefusedInput{Msg: fmt.Sprintf("%s: %v", consistency, err)}
				}
				vs, err := fleetVerifiers(g, trust)
				if err != nil {
					return err
				}
				a, b2, err := fleet.CheckConsistency(doc, vs)
				if err != nil {
					return fmt.Errorf("%s: %w", consistency, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK    consistency  %s: %d items extend to %d\n", a.Origin, a.Size, b2.Size)
				return nil
			}
			dir, f, cp, err := loadFleet(g, args[0])
			if err != nil {
				return err
			}
			vs, err := fleetVerifiers(g, trust)
			if err != nil {
				return err
			}
			c, err := fleet.OpenCheckpoint(cp, vs)
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, "checkpoint"), err)
			}
			n := len(f.Items)
			switch {
			case c.Origin != f.Origin:
				return reject.New(reject.Invalid, "checkpoint", "origin %q, the fleet's is %q", c.Origin, f.Origin)
			case c.Size != uint64(n):
				return reject.New(reject.Invalid, "checkpoint", "size %d, the fleet has %d items", c.Size, n)
			case c.Root != f.Root(n):
				return reject.New(reject.Invalid, "items.jsonl", "its items make another root than the checkpoint's")
			}
			sizes, err := host.FleetCheckpoints(dir)
			if err != nil {
				return err
			}
			for _, m := range sizes {
				p := filepath.Join(dir, "checkpoints", strconv.Itoa(m))
				old, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if m > n {
					return reject.New(reject.Invalid, p, "a checkpoint of %d items; the fleet has %d", m, n)
				}
				doc, err := f.ProveConsistency(string(old), string(cp), m, n)
				if err != nil {
					return err
				}
				a, _, err := fleet.CheckConsistency(doc, vs)
				if err == nil && a.Size != uint64(m) {
					err = reject.New(reject.Invalid, "checkpoint", "size %d under the name %d", a.Size, m)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "OK    fleet  %s  %d items, signed by %s; %d intermediate checkpoints consistent with it\n", dir, n, strings.Join(c.By, ", "), len(sizes))
			return nil
		},
	}
	c.Flags().StringArrayVar(&trust, "trust", nil, "a verifier key (NAME+ID+KEY) to check the checkpoint under; default: this host's")
	c.Flags().StringVar(&consistency, "consistency", "", "check this consistency proof ('fleet prove --from') alone")
	return c
}

func fleetProveCmd(g *cli.Globals) *cobra.Command {
	var from int
	c := &cobra.Command{
		Use:   "prove FLEET ITEM | prove FLEET --from M",
		Short: "Print the proof that item ITEM is in the fleet's checkpoint, or that it extends its checkpoint of M items",
		Long: `Print, as JSON, the inclusion proof of item ITEM (its index) in the fleet's
checkpoint: the item, the tree's size and the audit path. With the
checkpoint, it is all anyone needs to check that one item.

--from M prints the consistency proof from the fleet's intermediate
checkpoint of M items (checkpoints/M, published while it ran) to its
final one: both checkpoints, as signed, and the log-size proof; 'sandbox
fleet verify --consistency FILE' checks it alone.`,
		Args: cli.UsageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, f, cp, err := loadFleet(g, args[0])
			if err != nil {
				return err
			}
			if from > 0 {
				if len(args) != 1 {
					return errs.Usage{Err: fmt.Errorf("--from M proves the fleet's extension, not an item: drop ITEM")}
				}
				old, err := os.ReadFile(filepath.Join(dir, "checkpoints", strconv.Itoa(from)))
				if err != nil {
					sizes, _ := host.FleetCheckpoints(dir)
					return cli.RefusedInput{Msg: fmt.Sprintf("--from %d: the fleet published no checkpoint of %d items (it has: %v)", from, from, sizes)}
				}
				doc, err := f.ProveConsistency(string(old), string(cp), from, len(f.Items))
				if err != nil {
					return err
				}
				return cli.PrintJSON(cmd.OutOrStdout(), doc)
			}
			if len(args) != 2 {
				return errs.Usage{Err: fmt.Errorf("give ITEM (an index) or --from M")}
			}
			i, err := strconv.Atoi(args[1])
			if err != nil || i < 0 || i >= len(f.Items) {
				return cli.RefusedInput{Msg: fmt.Sprintf("item %q: an index from 0 to %d", args[1], len(f.Items)-1)}
			}
			p, err := f.Prove(i, len(f.Items))
			if err != nil {
				return err
			}
			return cli.PrintJSON(cmd.OutOrStdout(), p)
		},
	}
	c.Flags().IntVar(&from, "from", 0, "prove the final checkpoint extends the intermediate one of M items")
	return c
}

// printFleet says what a fleet that ran is, wherever it ran.
func printFleet(cmd *cobra.Command, id string, items, failed int, dir, checkpoint string) error {
	fmt.Fprintf(cmd.OutOrStdout(), "%s  %d items (%d failed)  %s\n", id, items, failed, dir)
	_, err := fmt.Fprint(cmd.OutOrStdout(), checkpoint)
	return err
}
