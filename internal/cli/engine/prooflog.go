package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/proof"
	"github.com/opensubstrate/sandbox/reject"
)

// The proof log and the matrix: `proof log add|verify|prove|consistency|check`
// and `proof matrix`, attached under `proof` beside `proof run|verify`.

// maxProofFile bounds a cell or a proof read from a file.
const maxProofFile = 1 << 20

// proofLogCmds are the proof log's and the matrix's commands, for the
// `proof` command to hold.
func proofLogCmds(g *cli.Globals) []*cobra.Command {
	return []*cobra.Command{proofLogCmd(g), proofMatrixCmd(g)}
}

// logOpener opens a log's cells as `proof verify` reads them (strict,
// canonical) and checks each envelope's signature under the key its cell
// names; which keys are trusted is the signed checkpoints' to say.
func logOpener(*cli.Globals) proof.Opener {
	return func(b []byte) (*proof.Cell, error) {
		o, err := proof.Open(b)
		if err != nil {
			return nil, err
		}
		// The envelope verifies under the key the cell names: an entry
		// changed since it was logged does not open (proof-log-edited);
		// whether that key is trusted is the checkpoints' to say.
		c := o.Statement.Predicate
		if err := o.Envelope.Verify(c.Host); err != nil {
			return nil, err
		}
		return &c, nil
	}
}

func proofLogCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "log",
		Short: "Keep a proof log of cells: append, verify against checkpoints, prove inclusion and consistency",
		Long: `A proof log is a file of proof cells, one DSSE envelope per line, never
rewritten: each 'proof log add' appends one, fsyncs it, and signs a C2SP
checkpoint (origin, size, RFC 9162 Merkle root) with this host's key,
written beside the log (LOG.checkpoint) and printed. Anyone who keeps a
checkpoint can later tell whether a cell it covers was removed,
reordered or edited: a red cell cannot disappear quietly
(docs/spec/proof.md §5).`,
		Args: cli.UsageArgs(cobra.NoArgs),
	}
	c.AddCommand(proofLogAddCmd(g), proofLogVerifyCmd(g), proofLogProveCmd(g), proofLogConsistencyCmd(g), proofLogCheckCmd(g))
	return c
}

// readArg reads a file, or standard input for "-".
func readArg(cmd *cobra.Command, path string, limit int64) ([]byte, error) {
	if path != "-" {
		return readLimited(path, limit)
	}
	b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, cli.RefusedInput{Msg: fmt.Sprintf("standard input: over %d bytes", limit)}
	}
	return b, err
}

func proofLogAddCmd(g *cli.Globals) *cobra.Command {
	var origin string
	c := &cobra.Command{
		Use:   "add LOG CELL",
		Short: "Append a cell (a DSSE envelope file, '-': standard input) to LOG and sign its new checkpoint",
		Long: `Append CELL (a proof cell's DSSE envelope; '-': standard input) to the
proof log LOG (made if missing), then sign the log's new checkpoint with
this host's key: written to LOG.checkpoint, and printed after the entry's
index. The log is replayed first: an entry that does not open stops it.`,
		Args: cli.UsageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cell, err := readArg(cmd, args[1], maxProofFile)
			if err != nil {
				return err
			}
			_, k, err := g.HostKey()
			if err != nil {
				return err
			}
			i, cp, err := proof.Append(args[0], origin, cell, logOpener(g), k)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "entry %d\n%s", i, cp)
			return err
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin, named by its checkpoints")
	return c
}

// openCheckpoints reads and opens checkpoint files under vs.
func openCheckpoints(paths []string, origin string, vs []note.Verifier) ([]proof.Checked, error) {
	var out []proof.Checked
	for _, p := range paths {
		b, err := readLimited(p, proof.MaxCheckpoint)
		if err != nil {
			return nil, err
		}
		c, err := proof.OpenCheckpoint(b, origin, vs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func proofLogVerifyCmd(g *cli.Globals) *cobra.Command {
	var (
		origin string
		cps    []string
		trust  []string
	)
	c := &cobra.Command{
		Use:   "verify LOG [--checkpoint CP]...",
		Short: "Replay LOG and check it extends each checkpoint given (and its own)",
		Long: `Replay the proof log LOG at rest (every entry a cell that opens, no torn
line), recompute its Merkle root, and check that it extends each
checkpoint given (--checkpoint, repeated) and the one beside it
(LOG.checkpoint): each opens under this host's verifier key (or --trust
VKEY), names the log's origin, and its first SIZE entries make its root,
shown by an RFC 9162 consistency proof to the log's root. Exits 4 with
proof-log-inconsistent (an entry removed or reordered since the
checkpoint), proof-log-forged (a checkpoint whose signature does not
verify) or proof-log-edited (an entry that does not open).`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			vs, err := fleetVerifiers(g, trust)
			if err != nil {
				return err
			}
			paths := cps
			if _, err := os.Stat(proof.CheckpointPath(args[0])); err == nil {
				paths = append([]string{proof.CheckpointPath(args[0])}, paths...)
			}
			checked, err := openCheckpoints(paths, origin, vs)
			if err != nil {
				return err
			}
			l, err := proof.VerifyLog(b, origin, logOpener(g), checked)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			var sizes []string
			for _, c := range checked {
				sizes = append(sizes, strconv.FormatUint(c.Size, 10))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "OK    proof log  %s  %d cells; extends %d checkpoints (sizes %s)\n", args[0], l.Size(), len(checked), strings.Join(sizes, ", "))
			return err
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin")
	c.Flags().StringArrayVar(&cps, "checkpoint", nil, "a checkpoint of the log (a signed note file) it must extend")
	c.Flags().StringArrayVar(&trust, "trust", nil, "a verifier key (NAME+ID+KEY) checkpoints are checked under; default: this host's")
	return c
}

// logAndCheckpoint replays a log and opens the checkpoint proofs are
// made against: cp, or the one beside the log; the log must extend it.
func logAndCheckpoint(g *cli.Globals, path, cp, origin string, vs []note.Verifier) (*proof.Log, proof.Checked, error) {
	l, err := proof.ReadLog(path, origin, logOpener(g))
	if err != nil {
		return nil, proof.Checked{}, err
	}
	if cp == "" {
		cp = proof.CheckpointPath(path)
	}
	cs, err := openCheckpoints([]string{cp}, origin, vs)
	if err != nil {
		return nil, proof.Checked{}, err
	}
	if cs[0].Size > uint64(l.Size()) || l.Root(int(cs[0].Size)) != cs[0].Root {
		return nil, proof.Checked{}, reject.New(reject.ProofLogInconsistent, cp, "a checkpoint of %d entries the log's %d do not make", cs[0].Size, l.Size())
	}
	return l, cs[0], nil
}

func proofLogProveCmd(g *cli.Globals) *cobra.Command {
	var origin, cp string
	var trust []string
	c := &cobra.Command{
		Use:   "prove LOG INDEX [--checkpoint CP]",
		Short: "Print the proof that entry INDEX is in LOG's checkpoint",
		Long: `Print, as JSON, the RFC 9162 inclusion proof of entry INDEX (from 0) in
the log's checkpoint (LOG.checkpoint, or --checkpoint CP of a prefix):
the index, the tree's size, the entry's leaf hash, the audit path and
the checkpoint as signed. With the cell's bytes it is all anyone needs
to check that one cell ('proof log check PROOF --cell CELL').`,
		Args: cli.UsageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			vs, err := fleetVerifiers(g, trust)
			if err != nil {
				return err
			}
			l, c, err := logAndCheckpoint(g, args[0], cp, origin, vs)
			if err != nil {
				return err
			}
			i, err := strconv.Atoi(args[1])
			if err != nil || i < 0 || uint64(i) >= c.Size {
				return cli.RefusedInput{Msg: fmt.Sprintf("entry %q: an index from 0 to %d", args[1], int(c.Size)-1)}
			}
			p, err := l.Prove(i, int(c.Size), c.Signed)
			if err != nil {
				return err
			}
			return cli.PrintJSON(cmd.OutOrStdout(), p)
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin")
	c.Flags().StringVar(&cp, "checkpoint", "", "the checkpoint to prove against (default: LOG.checkpoint)")
	c.Flags().StringArrayVar(&trust, "trust", nil, "a verifier key (NAME+ID+KEY) checkpoints are checked under; default: this host's")
	return c
}

func proofLogConsistencyCmd(g *cli.Globals) *cobra.Command {
	var origin, log string
	var trust []string
	c := &cobra.Command{
		Use:   "consistency OLD NEW --log LOG",
		Short: "Print the proof that checkpoint NEW of LOG extends checkpoint OLD",
		Long: `Print, as JSON, the RFC 9162 consistency proof that the log's checkpoint
NEW extends its checkpoint OLD (both signed note files): both as signed,
and the proof's hashes, computed from LOG (whose first entries must make
both). 'proof log check PROOF' checks it alone.`,
		Args: cli.UsageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if log == "" {
				return errs.Usage{Err: fmt.Errorf("--log LOG: the log the proof is computed from")}
			}
			vs, err := fleetVerifiers(g, trust)
			if err != nil {
				return err
			}
			l, a, err := logAndCheckpoint(g, log, args[0], origin, vs)
			if err != nil {
				return err
			}
			_, b, err := logAndCheckpoint(g, log, args[1], origin, vs)
			if err != nil {
				return err
			}
			if a.Size == 0 || a.Size > b.Size {
				return cli.RefusedInput{Msg: fmt.Sprintf("a checkpoint of %d entries cannot be extended by one of %d", a.Size, b.Size)}
			}
			p, err := l.ProveConsistency(a.Signed, b.Signed, int(a.Size), int(b.Size))
			if err != nil {
				return err
			}
			if _, _, err := proof.CheckConsistency(p, origin, vs); err != nil {
				return err
			}
			return cli.PrintJSON(cmd.OutOrStdout(), p)
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin")
	c.Flags().StringVar(&log, "log", "", "the proof log both checkpoints are of")
	c.Flags().StringArrayVar(&trust, "trust", nil, "a verifier key (NAME+ID+KEY) checkpoints are checked under; default: this host's")
	return c
}

func proofLogCheckCmd(g *cli.Globals) *cobra.Command {
	var origin, cell string
	var trust []string
	c := &cobra.Command{
		Use:   "check PROOF [--cell CELL]",
		Short: "Check an inclusion or consistency proof alone, under the trusted keys",
		Long: `Check a proof 'proof log prove' or 'proof log consistency' printed, alone
(no log needed): its checkpoints open under this host's verifier key (or
--trust VKEY) and name the log's origin; an inclusion proof's path leads
from its leaf to its checkpoint's root, and with --cell CELL the cell's
bytes are that leaf (proof-log-edited if not); a consistency proof shows
the new checkpoint extends the old (proof-log-inconsistent if not).`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readArg(cmd, args[0], maxProofFile)
			if err != nil {
				return err
			}
			vs, err := fleetVerifiers(g, trust)
			if err != nil {
				return err
			}
			var fields map[string]json.RawMessage
			if json.Unmarshal(b, &fields) != nil {
				return cli.RefusedInput{Msg: fmt.Sprintf("%s: not a proof (a JSON object)", args[0])}
			}
			if _, ok := fields["old_checkpoint"]; ok {
				if cell != "" {
					return errs.Usage{Err: fmt.Errorf("--cell: a consistency proof is of no cell")}
				}
				p, err := proof.ParseConsistency(b)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				a, n, err := proof.CheckConsistency(p, origin, vs)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "OK    consistency  %s: %d entries extend to %d\n", a.Origin, a.Size, n.Size)
				return err
			}
			p, err := proof.ParseInclusion(b)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			var cb []byte
			if cell != "" {
				if cb, err = readArg(cmd, cell, maxProofFile); err != nil {
					return err
				}
			}
			cp, err := proof.VerifyInclusion(p, cb, origin, vs)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			what := "its leaf"
			if cell != "" {
				what = cell
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "OK    inclusion  %s is entry %d of %s's %d, signed by %s\n", what, p.Index, cp.Origin, cp.Size, strings.Join(cp.By, ", "))
			return err
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin")
	c.Flags().StringVar(&cell, "cell", "", "an inclusion proof's cell (its DSSE envelope file), checked to be its leaf")
	c.Flags().StringArrayVar(&trust, "trust", nil, "a verifier key (NAME+ID+KEY) checkpoints are checked under; default: this host's")
	return c
}

func proofMatrixCmd(g *cli.Globals) *cobra.Command {
	var origin, format, out string
	c := &cobra.Command{
		Use:   "matrix LOG [--format text|markdown|html] [--out FILE]",
		Short: "Render a proof log as the matrix: a row per target, a column per tier",
		Long: `Render the proof log LOG as a table: one row per target (OS, kernel,
arch, CPU, virtualisation, accelerators), its latest cell in log order
(the row says how many it summarizes), one column per tier S0 to S7,
each green, red or unavailable with the reason. --format html writes one
self-contained page (inline CSS, no script, no external resource; every
string of a cell escaped). Check the log first ('proof log verify'):
the matrix reads cells, it does not vouch for them.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := proof.ReadLog(args[0], origin, logOpener(g))
			if err != nil {
				return err
			}
			m := proof.NewMatrix(l)
			var b bytes.Buffer
			switch format {
			case "text":
				err = m.Text(&b)
			case "markdown", "md":
				err = m.Markdown(&b)
			case "html":
				err = m.HTML(&b)
			default:
				return errs.Usage{Err: fmt.Errorf("--format %q: text, markdown or html", format)}
			}
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(b.Bytes())
				return err
			}
			return safefile.Write(out, b.Bytes(), 0o644)
		},
	}
	c.Flags().StringVar(&origin, "origin", proof.DefaultOrigin, "the log's origin")
	c.Flags().StringVar(&format, "format", "text", "text, markdown or html")
	c.Flags().StringVar(&out, "out", "", "write the matrix to FILE (atomically) instead of standard output")
	return c
}
