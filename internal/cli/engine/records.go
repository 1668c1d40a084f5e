package engine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// The durable run records read and written in this process: listed
// from the state directory (with no service to ask), verified, exported
// and imported.

// recordsHere lists the state directory's run records, read here: what
// records does with no service running.
func recordsHere(g *cli.Globals, cmd *cobra.Command, asJSON bool) error {
	d, err := g.StateDir()
	if err != nil {
		return err
	}
	l, err := live.Light(d).Records(host.LocalOwner)
	if err != nil {
		return err
	}
	var out []client.Record
	for _, ri := range l {
		out = append(out, server.RecordOf(ri))
	}
	return cli.PrintRecords(cmd, asJSON, out)
}

func recordCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "record",
		Short: "Work with run records (the durable runs of sandboxes)",
	}
	var cited string
	var asJSON, runs, trustHost bool
	var trustArgs []string
	v := &cobra.Command{
		Use:   "verify SANDBOX|FILE [--cited HEAD]",
		Short: "Verify a run record from its genesis",
		Long: `Verify a run record, a file or a sandbox's record in the state directory:
every line in order (canonical JSON, the members of its kind), the head
recomputed from the genesis, the phases (no execution while parked, no
resumption while active, nothing after the close) and the snapshot of
every resumption identical to the one suspended. With --cited HEAD the
record must also reach that head (be it, or have been it after some
segment): what a continuation or an export cites for it. The rules and
their codes are in docs/spec/run-record.md.

With --runs, every run the record names is verified too, completely, as
'sandbox verify' does (signature under a key given with --trust or
--trust-host, every bound object), from the state directory's runs/, and
each must cite this record: its genesis, and a head the record had
before the run's segment (splice, head-mismatch otherwise).

With --trust KEY (or --trust-host), every entry must also be sealed by
a trusted key: each host seals the entries it appends (the seals are
kept beside the record, FILE.seals; docs/spec/run-record.md).

Exit status: 0 when it verifies, 4 when it does not, 5 when the only
failures are keys not trusted, 3 when there is no such record.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if _, err := os.Stat(p); err != nil {
				d, err := g.StateDir()
				if err != nil {
					return err
				}
				p = live.Light(d).RecordPath(args[0])
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("no record %q: %w", args[0], os.ErrNotExist)
			}
			var st record.State
			trust, terr := trustFrom(trustArgs)
			if terr != nil {
				return terr
			}
			if trustHost {
				d, derr := g.StateDir()
				if derr != nil {
					return derr
				}
				k, kerr := d.HostKey(rand.Reader)
				if kerr != nil {
					return kerr
				}
				trust.Add(k.Public())
			}
			if runs {
				d, derr := g.StateDir()
				if derr != nil {
					return derr
				}
				v := &verify.Verifier{Trust: trust}
				st, _, err = v.Record(b, func(a addr.Addr) string { return d.Path("runs", a.Hex()) })
				if err == nil && cited != "" {
					a, perr := addr.Parse(cited)
					if perr != nil {
						return errs.Usage{Err: fmt.Errorf("--cited: %w", perr)}
					}
					st, err = record.Reaches(b, a)
				}
			} else if cited != "" {
				a, perr := addr.Parse(cited)
				if perr != nil {
					return errs.Usage{Err: fmt.Errorf("--cited: %w", perr)}
				}
				st, err = record.Reaches(b, a)
			} else {
				st, err = record.VerifyBytes(b)
			}
			if err == nil && trust.Len() > 0 {
				// Every entry sealed by a trusted key, by the host that
				// appended it (the seals beside the record).
				entries, _, _ := chain.Split(b)
				seals, serr := record.ReadSeals(p)
				if err = serr; err == nil {
					_, err = record.CheckSeals(strings.TrimSuffix(filepath.Base(p), ".jsonl"), entries, seals, trust.Trusts)
				}
			}
			out := recordJSON{Path: p, OK: err == nil, Head: st.Head.String(), Phase: string(st.Phase), Segments: st.Segments, Executed: st.Executed, IdleUJ: st.IdleUJ}
			if err != nil {
				out.Code, out.Error = string(reject.CodeOf(err)), err.Error()
			}
			switch {
			case asJSON:
				cli.PrintJSON(cmd.OutOrStdout(), out)
			case err != nil:
				fmt.Fprintf(cmd.OutOrStdout(), "FAIL  record  %s  %v\n", p, err)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "OK    record  %s  %s  %s, %d segments (%d executed), idle %s\n", p, st.Head, st.Phase, st.Segments, st.Executed, energy.Microjoules(st.IdleUJ))
			}
			if err != nil {
				var re *reject.Error
				switch {
				case errors.Is(err, reject.UntrustedKey):
					return cli.ExitError{Code: 5}
				case errors.As(err, &re):
					return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
				}
				return err
			}
			return nil
		},
	}
	v.Flags().StringVar(&cited, "cited", "", "a head the record must reach (b3:…)")
	v.Flags().BoolVar(&runs, "runs", false, "verify every run the record names too, and that each cites the record")
	v.Flags().StringArrayVar(&trustArgs, "trust", nil, "trust this key (ed25519:HEX, or a file holding one; repeatable): every entry must be sealed by a trusted key, and, with --runs, every run signed by one")
	v.Flags().BoolVar(&trustHost, "trust-host", false, "trust this state directory's host key (as --trust)")
	v.Flags().BoolVar(&asJSON, "json", false, "one JSON object")
	c.AddCommand(v)
	return c
}

// recordJSON is what `sandbox record verify --json` prints.
type recordJSON struct {
	Path     string `json:"path"`
	OK       bool   `json:"ok"`
	Code     string `json:"code,omitempty"`
	Error    string `json:"error,omitempty"`
	Head     string `json:"head"`
	Phase    string `json:"phase"`
	Segments int    `json:"segments"`
	Executed int    `json:"executed"`
	IdleUJ   uint64 `json:"idle_uj"`
}

func exportCmd(g *cli.Globals) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "export SANDBOX [-o FILE]",
		Short: "Write a suspended (or closed) sandbox's durable run as a bundle",
		Long: `Write a sandbox's durable run to stdout (or -o FILE) as a bundle, a tar
stream: its run record, every object the record names (its unit and
grants, each snapshot's workspace tree and chunks and environment
manifest) and every run it names, whole. 'sandbox import' on another host
takes it, and 'sandbox resume' continues it there. A live sandbox is
suspended first. No service is needed. On a terminal, the bytes written
and their rate are drawn on stderr.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, k, err := g.HostKey()
			if err != nil {
				return err
			}
			h := live.New(&host.Host{Store: store.Of(d), Key: k})
			bar := cli.NewProgress(cmd.ErrOrStderr(), "export "+args[0], cli.Bytes, "", 0)
			defer bar.Done()
			if out == "" || out == "-" {
				return h.Export(args[0], bar.Writer(cmd.OutOrStdout()))
			}
			f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
			if err != nil {
				return err
			}
			defer os.Remove(f.Name())
			if err := h.Export(args[0], bar.Writer(f)); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(f.Name(), out)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write the bundle to FILE (whole or not at all) instead of stdout")
	return c
}

func importCmd(g *cli.Globals) *cobra.Command {
	var trustArgs []string
	c := &cobra.Command{
		Use:   "import BUNDLE|-",
		Short: "Take a durable run from a bundle into this state directory",
		Long: `Read a bundle ('sandbox export') and put the durable run it carries in
this state directory, checked whole before anything is placed: every
object must hash to its name, every run's attestation to its directory
(under a valid signature), every run whole, the record must verify from
its genesis and name nothing that is neither in the bundle nor here
(its unit and grants, each suspension's workspace tree and every chunk
of it, its environment manifest and memory image, what an S2 park
names, every run; else it is refused naming the first missing, exit 4),
and every entry of it must be sealed by the host that appended it with a
key this host trusts: its own, or one given with --trust (the exporting
host's 'sandbox key'). A bundle carries evidence, never authority: the
sandbox resumes with the grants its record's genesis binds, and only if
you may give them. A record already here is replaced only by one that
extends it and carries this host's seals of what it had. The parked
interval here starts at the import, priced by what this host retains. A
suspended sandbox imported is then resumed with 'sandbox resume' (its
environment must be this host's). On a terminal, the bytes read, their
rate and (from a file) the time left are drawn on stderr.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.StateDir()
			if err != nil {
				return err
			}
			r := cmd.InOrStdin()
			var size int64
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
					size = fi.Size()
				}
				r = f
			}
			bar := cli.NewProgress(cmd.ErrOrStderr(), "import", cli.Bytes, "", size)
			r = bar.Reader(r)
			trust, err := trustFrom(trustArgs)
			if err != nil {
				return err
			}
			h := live.Light(d)
			if h.Key, err = d.HostKey(rand.Reader); err != nil {
				return err
			}
			im, err := h.Import(cmd.Context(), r, host.LocalOwner, trust)
			bar.Done()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s imported: %s, head %s, %d objects and %d runs new here; exported by %s; sealed by %s\n", im.Sandbox, im.Phase, im.Head, im.Blobs, im.Runs, im.Signer, keyList(im.Sealers))
			return nil
		},
	}
	c.Flags().StringArrayVar(&trustArgs, "trust", nil, "accept entries sealed by this key (ed25519:HEX, or a file holding one; repeatable): the exporting host's")
	return c
}

// keyList names keys for people: their text forms, comma-separated.
func keyList(ks []key.Public) string {
	var out []string
	for _, k := range ks {
		out = append(out, k.String())
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
