package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/proof"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// Proof cells: what this substrate does on this machine, sealed and
// signed (docs/spec/proof.md).

// proofSkipTCG, set to 1, skips S5 where its VMs would run under TCG
// (emulated: slow), recording why; for tests only.
const proofSkipTCG = "SANDBOX_PROOF_SKIP_TCG"

func proofCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "proof",
		Short: "Proof cells: run the pack and every tier here, sealed and signed; verify a cell",
		Long: `A proof cell says, signed by this host's key, what this substrate did on
this machine: the target (OS, kernel, CPU, virtualisation, cloud,
accelerators, cgroups, Landlock, KVM or TCG), the conformance pack's
counts, and for every tier S0 to S7 a sealed run that verifies (green),
the failure where the tier should have worked (red), or the probe's
reason it cannot work here (unavailable). It is an in-toto Statement in
a DSSE envelope (docs/spec/proof.md).`,
	}
	c.AddCommand(proofRunCmd(g), proofVerifyCmd(g))
	c.AddCommand(proofLogCmds(g)...)
	return c
}

// ProofJSON is what `proof run --json` prints.
type ProofJSON struct {
	Cell      string     `json:"cell"` // the file written
	Address   string     `json:"address"`
	Predicate proof.Cell `json:"predicate"`
	Seconds   float64    `json:"seconds"`
}

func proofRunCmd(g *cli.Globals) *cobra.Command {
	var out, runsDir, pack string
	var asJSON bool
	c := &cobra.Command{
		Use:   "run [--out CELL] [--runs DIR] [--pack DIR] [--json]",
		Short: "Make this machine's proof cell: the conformance pack, then a sealed run at every tier",
		Long: `Detect this machine, check the conformance pack (--pack, default
conformance/v1 under the current directory) through the verifier, then run
a small unit at every tier, S0 to S7, forced there: S0, S1 and S5 a native
'/bin/sh -c "echo proof"' (S5 with the grant kernel), S2 a WebAssembly
module that writes "proof", S6 the native unit with the grant confidential,
S7 with locality:REGION (the first region of $SANDBOX_LOCALITY's
configuration). A tier whose probe says it is available and whose run
does not seal, print "proof" and verify is red; S0 and S2, which need
nothing of the machine, are red when their probe fails; any other tier
whose probe fails is unavailable, with the probe's reason. Nothing is
skipped. One line per step is printed to stderr.

The cell is written to --out (default cell.json), signed with this host's
key; --runs DIR copies each green run's directory there (DIR/<address
hex>), for 'proof verify --runs DIR'.

Exit status: 0 when the pack passed and no tier is red, 4 otherwise (the
cell is written either way), 3 when the pack is not found.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return proofRun(cmd, g, out, runsDir, pack, asJSON)
		},
	}
	c.Flags().StringVar(&out, "out", "cell.json", "write the cell to this file")
	c.Flags().StringVar(&runsDir, "runs", "", "copy each green run's directory into this directory, named by its address")
	c.Flags().StringVar(&pack, "pack", "conformance/v1", "the conformance pack's directory")
	c.Flags().BoolVar(&asJSON, "json", false, "print the cell's file, address and predicate as one JSON object")
	return c
}

func proofRun(cmd *cobra.Command, g *cli.Globals, out, runsDir, pack string, asJSON bool) error {
	ctx := cmd.Context()
	say := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "proof: "+format+"\n", args...) }
	t0 := time.Now()
	manifest, err := os.ReadFile(filepath.Join(pack, vectors.ManifestFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--pack %s: no conformance pack there (%w): run in the source tree, or give the pack's directory", pack, err)
		}
		return fmt.Errorf("--pack %s: %w", pack, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the running executable: %w", err)
	}
	binary, err := os.ReadFile(self)
	if err != nil {
		return fmt.Errorf("the running executable: %w", err)
	}
	m, err := hostOf(g)
	if err != nil {
		return err
	}
	defer m.Close()
	h := m.Host
	c := proof.Cell{
		Substrate: proof.Substrate{Version: cli.ModuleVersion(), Binary: addr.Of(binary).String()},
		Started:   t0.UTC().Format(time.RFC3339),
	}
	say("substrate %s, %s", c.Substrate.Version, c.Substrate.Binary)

	var accel []string
	for _, d := range h.Devices {
		accel = append(accel, strings.TrimSpace(d.Model+" ("+string(d.Class)+", "+d.Driver+")"))
	}
	_, qemuErr := exec.LookPath(qemuSystem())
	c.Target = proof.DetectTarget(proof.Machine{Root: "/", Landlock: builtin.LandlockABI(), Accelerators: accel, QEMU: qemuErr == nil})
	tg := c.Target
	say("target %s/%s, kernel %s, %s; virtualisation %s, cloud %q; cgroup %s, Landlock ABI %d, VMs %s; %d accelerators",
		tg.OS, tg.Arch, tg.Kernel, tg.CPU, tg.Virtualisation, tg.Cloud, tg.Cgroup, tg.Landlock, tg.VM, len(tg.Accelerators))

	outs, err := vectors.Verify(pack)
	if err != nil {
		return fmt.Errorf("the conformance pack %s: %w", pack, err)
	}
	c.Pack = proof.PackCounts{Address: addr.Of(manifest).String(), Vectors: len(outs)}
	for _, o := range outs {
		if o.Pass {
			c.Pack.Passed++
		} else {
			c.Pack.Failed++
			say("pack: FAIL %s: %s", o.Entry.Path, o.Why)
		}
	}
	say("pack %s: %d vectors, %d passed, %d failed (%.1fs)", c.Pack.Address, c.Pack.Vectors, c.Pack.Passed, c.Pack.Failed, time.Since(t0).Seconds())

	loc, err := localityConfig(os.Getenv("SANDBOX_LOCALITY"))
	if err != nil {
		return errs.Usage{Err: fmt.Errorf("SANDBOX_LOCALITY: %w", err)}
	}
	vr := &verify.Verifier{Trust: key.NewTrust(h.Key.Public()), Locality: loc, AllowSoftware: os.Getenv("SANDBOX_TEE_PROVIDER") == "software"}
	ev := proof.Evidence{Binary: binary, Pack: manifest, Runs: map[addr.Addr][]byte{}}
	red := 0
	for _, t := range tier.All {
		ts := time.Now()
		r, att, dir := proofTier(ctx, h, t, c.Target, loc, vr)
		switch r.State {
		case proof.Green:
			ev.Runs[addr.MustParse(r.Run)] = att
			if runsDir != "" {
				a := addr.MustParse(r.Run)
				if err := copyDir(dir, filepath.Join(runsDir, a.Hex())); err != nil {
					return fmt.Errorf("--runs %s: %w", runsDir, err)
				}
			}
			given := ""
			if t == tier.S1 && h.Gives(ctx, t, device.GPU) {
				given = ", granted " + proofGPUBudget
			}
			say("%s green  %s  %s%s (%.1fs)", t, r.Run, r.Executor, given, time.Since(ts).Seconds())
		case proof.Red:
			red++
			say("%s RED    %s (%.1fs)", t, r.Error, time.Since(ts).Seconds())
		default:
			say("%s unavailable: %s", t, r.Reason)
		}
		c.Tiers = append(c.Tiers, r)
	}
	c.Ended = time.Now().UTC().Format(time.RFC3339)
	b, err := proof.Seal(h.Key, c, ev)
	if err != nil {
		return err
	}
	if err := safefile.Write(out, b, 0o644); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	say("cell %s written, %s (%.1fs)", out, addr.Of(b), secs)
	if asJSON {
		c.Host = h.Key.Public()
		if err := cli.PrintJSON(cmd.OutOrStdout(), ProofJSON{Cell: out, Address: addr.Of(b).String(), Predicate: c, Seconds: secs}); err != nil {
			return err
		}
	} else {
		for _, r := range c.Tiers {
			detail := r.Run + "  " + r.Executor
			switch r.State {
			case proof.Red:
				detail = r.Error
			case proof.Unavailable:
				detail = r.Reason
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s  %-11s  %s\n", r.Tier, r.State, detail)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "pack  %d vectors, %d failed\ncell  %s  %s\n", c.Pack.Vectors, c.Pack.Failed, out, addr.Of(b))
	}
	if red > 0 || c.Pack.Failed > 0 {
		return cli.ExitError{Code: errs.ExitCode(errs.Integrity)}
	}
	return nil
}

// proofTier runs tier t's unit and says what became of it: green (with
// the attestation's bytes and the run's directory), red or unavailable.
func proofTier(ctx context.Context, h *host.Host, t tier.Tier, tg proof.Target, loc *locality.Config, vr *verify.Verifier) (proof.TierResult, []byte, string) {
	r := proof.TierResult{Tier: t}
	p := h.Probe(ctx, t)
	if !p.Available {
		if t == tier.S0 || t == tier.S2 {
			// They need nothing of the machine: a probe that fails is a failure.
			r.State, r.Error = proof.Red, "the probe failed: "+p.Reason
			return r, nil, ""
		}
		r.State, r.Reason = proof.Unavailable, p.Reason
		return r, nil, ""
	}
	if t == tier.S5 && tg.VM == "tcg" && os.Getenv(proofSkipTCG) == "1" {
		r.State, r.Reason = proof.Unavailable, "skipped: S5 would run under TCG and "+proofSkipTCG+"=1 asked to skip it (a test's short cut)"
		return r, nil, ""
	}
	fail := func(format string, args ...any) (proof.TierResult, []byte, string) {
		r.State, r.Error = proof.Red, fmt.Sprintf(format, args...)
		return r, nil, ""
	}
	req, cleanup, err := proofRequest(t, loc, t == tier.S1 && h.Gives(ctx, t, device.GPU))
	defer cleanup()
	if err != nil {
		return fail("making the unit: %v", err)
	}
	var stdout, stderr bytes.Buffer
	req.Stdout, req.Stderr = &stdout, &stderr
	req.Tier = &t
	run, err := h.Run(ctx, req)
	if err != nil {
		return fail("%v", err)
	}
	if o := run.Attestation.Claim.Outcome; o.Status != attest.Exited || o.ExitCode == nil || *o.ExitCode != 0 {
		return fail("the run %s ended %s %s: %s", run.ID, o.Status, o.Detail, clipOutput(stderr.String()))
	}
	if got := stdout.String(); got != "proof\n" {
		return fail("the run %s printed %q, not \"proof\\n\"", run.ID, clipOutput(got))
	}
	for _, res := range vr.Path(run.Dir) {
		if res.Err != nil {
			return fail("the run %s does not verify: %s %s: %v", run.ID, res.Kind, res.Path, res.Err)
		}
	}
	att, err := os.ReadFile(filepath.Join(run.Dir, verify.FileAttestation))
	if err != nil {
		return fail("%v", err)
	}
	r.State, r.Run, r.Executor = proof.Green, run.ID.String(), run.Attestation.Claim.Executor
	return r, att, run.Dir
}

// proofGPUBudget is the GPU joules S1's unit is granted where S1 gives a
// GPU here: far above an idle GPU's draw over a shell's lifetime.
const proofGPUBudget = "gpu:1000J"

// proofRequest is tier t's unit: the WebAssembly module at S2, else the
// native 'sh -c "echo proof"' with the grants that ask for the tier, and
// a GPU granted where gpu says the tier gives one (so the cell's run
// shows the device given: its identity in the attestation, its joules on
// the receipt).
func proofRequest(t tier.Tier, loc *locality.Config, gpu bool) (host.Request, func(), error) {
	nothing := func() {}
	var gs grant.Set
	var grants []string
	switch t {
	case tier.S2:
		dir, err := os.MkdirTemp("", "sandbox-proof-")
		if err != nil {
			return host.Request{}, nothing, err
		}
		cleanup := func() { os.RemoveAll(dir) }
		p := filepath.Join(dir, "proof.wasm")
		if err := os.WriteFile(p, proofModule, 0o644); err != nil {
			return host.Request{}, cleanup, err
		}
		req, err := host.Command(host.CommandLine{Args: []string{p}, Grants: gs, Cwd: "/"})
		return req, cleanup, err
	case tier.S5:
		grants = []string{"kernel"}
	case tier.S6:
		grants = []string{"confidential"}
	case tier.S7:
		if loc == nil || len(loc.RegionNames()) == 0 {
			return host.Request{}, nothing, errors.New("no locality configuration names a region ($SANDBOX_LOCALITY)")
		}
		grants = []string{"locality:" + loc.RegionNames()[0]}
	}
	if gpu {
		grants = append(grants, proofGPUBudget)
	}
	for _, s := range grants {
		if err := gs.Parse(s, "/"); err != nil {
			return host.Request{}, nothing, err
		}
	}
	if err := gs.Normalize(); err != nil {
		return host.Request{}, nothing, err
	}
	req, err := host.Command(host.CommandLine{Args: []string{"/bin/sh", "-c", "echo proof"}, Grants: gs, Cwd: "/"})
	return req, nothing, err
}

// proofModule is a WASI command that writes "proof\n" to standard output:
//
//	(module
//	  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
//	  (memory (export "memory") 1)
//	  (data (i32.const 16) "proof\n")
//	  (func (export "_start")
//	    (i32.store (i32.const 0) (i32.const 16))  ;; iov.buf
//	    (i32.store (i32.const 4) (i32.const 6))   ;; iov.len
//	    (drop (call 0 (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
var proofModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x0c, 0x02, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00, // types
	0x02, 0x23, 0x01, 0x16, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
	0x08, 'f', 'd', '_', 'w', 'r', 'i', 't', 'e', 0x00, 0x00, // import fd_write
	0x03, 0x02, 0x01, 0x01, // one function of type 1
	0x05, 0x03, 0x01, 0x00, 0x01, // memory, 1 page
	0x07, 0x13, 0x02, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x01, // exports
	0x0a, 0x1d, 0x01, 0x1b, 0x00,
	0x41, 0x00, 0x41, 0x10, 0x36, 0x02, 0x00,
	0x41, 0x04, 0x41, 0x06, 0x36, 0x02, 0x00,
	0x41, 0x01, 0x41, 0x00, 0x41, 0x01, 0x41, 0x08, 0x10, 0x00, 0x1a, 0x0b, // code
	0x0b, 0x0c, 0x01, 0x00, 0x41, 0x10, 0x0b, 0x06, 'p', 'r', 'o', 'o', 'f', '\n', // data
}

// qemuSystem is the QEMU that runs this architecture's VMs.
func qemuSystem() string {
	switch runtime.GOARCH {
	case "amd64":
		return "qemu-system-x86_64"
	case "arm64":
		return "qemu-system-aarch64"
	}
	return "qemu-system-" + runtime.GOARCH
}

func clipOutput(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.TrimSpace(s)
}

// copyDir copies the regular files and directories under src to dst
// (made), each file written whole and synced.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return safefile.Write(to, b, 0o644)
	})
}

func proofVerifyCmd(g *cli.Globals) *cobra.Command {
	var trustArgs []string
	var trustHost, asJSON, allowSoftware bool
	var runsDir, localityFile string
	c := &cobra.Command{
		Use:   "verify CELL [--trust KEY|FILE]... [--runs DIR]",
		Short: "Verify a proof cell: its signature, its tiers and counts, and the runs it names in --runs",
		Long: `Verify a proof cell (docs/spec/proof.md §3): the DSSE signature under the
key the cell names as its host, that key trusted (--trust, --trust-host),
the predicate's schema (every tier S0 to S7 exactly once, in order; each
state green with its run, red with its error, unavailable with its
reason; the pack's counts adding up), the subjects the predicate's; then
every green run whose directory is in --runs (DIR/<address hex>, as
'proof run --runs' writes it): its attestation must hash to its subject's
digests and the run must verify as 'sandbox verify' checks it.

Prints one line for the cell and one per green run:

  OK    cell  PATH  SIGNER  what it says
  OK    run   S1  ADDRESS  DIR (or "not in --runs")
  FAIL  ...   CODE: where: why

Exit status: 0 when it verified, 4 on any failure, 5 when the only
failure is an untrusted key.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			trust, loc, err := verifierInputs(g, trustArgs, trustHost, localityFile)
			if err != nil {
				return err
			}
			b, err := readLimited(args[0], proof.MaxCellSize)
			if err != nil {
				return err
			}
			v := proof.Verifier{Trust: trust, Runs: runsDir, Run: func(dir string, host key.Public) error {
				vr := &verify.Verifier{Trust: key.NewTrust(host), AllowSoftware: allowSoftware, Locality: loc}
				var all []error
				for _, r := range vr.Path(dir) {
					if r.Err != nil {
						all = append(all, fmt.Errorf("%s %s: %w", r.Kind, r.Path, r.Err))
					}
				}
				return errors.Join(all...)
			}}
			got, err := v.Verify(b)
			return printProofVerify(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], got, err, asJSON, trust.Len() == 0)
		},
	}
	c.Flags().StringArrayVar(&trustArgs, "trust", nil, "trust this public key (ed25519:<hex>) or the keys in this file, one per line; repeatable")
	c.Flags().BoolVar(&trustHost, "trust-host", false, "also trust this host's own key (host.pub in the state directory)")
	c.Flags().StringVar(&runsDir, "runs", "", "re-verify the green runs whose directories are in DIR (DIR/<address hex>)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per artifact (docs/cli-json.md)")
	c.Flags().StringVar(&localityFile, "locality", "", "check S7 runs' locality claims against this configuration")
	c.Flags().BoolVar(&allowSoftware, "allow-software-evidence", false, "accept an S6 run's software-grounded evidence")
	return c
}

func printProofVerify(out, errOut io.Writer, path string, got *proof.Verified, err error, asJSON, noTrust bool) error {
	var all []VerifyJSON
	add := func(j VerifyJSON) {
		if asJSON {
			all = append(all, j)
			return
		}
		if !j.OK {
			fmt.Fprintf(out, "FAIL  %-4s  %s  %s\n", j.Kind, j.Path, j.Error)
			return
		}
		fmt.Fprintf(out, "OK    %-4s  %s  %s  %s\n", j.Kind, j.Path, j.Address, j.Note)
	}
	cellJ := VerifyJSON{Path: path, Kind: "cell", OK: true}
	var runErr error
	if got != nil {
		cellJ.Address = got.Cell.Host.String()
		green, red, unavailable := 0, 0, 0
		for _, t := range got.Cell.Tiers {
			switch t.State {
			case proof.Green:
				green++
			case proof.Red:
				red++
			default:
				unavailable++
			}
		}
		cellJ.Note = fmt.Sprintf("%s/%s %s: pack %d vectors, %d failed; %d green, %d red, %d unavailable",
			got.Cell.Target.OS, got.Cell.Target.Arch, got.Cell.Target.Kernel, got.Cell.Pack.Vectors, got.Cell.Pack.Failed, green, red, unavailable)
		for _, rc := range got.Runs {
			if rc.Err != nil {
				runErr = rc.Err
			}
		}
	}
	if err != nil && (runErr == nil || reject.CodeOf(err) == reject.UntrustedKey) {
		cellJ.OK, cellJ.Error = false, err.Error()
		cellJ.Code = string(reject.CodeOf(err))
	}
	add(cellJ)
	if got != nil {
		for _, rc := range got.Runs {
			j := VerifyJSON{Path: rc.Tier.String(), Kind: "run", OK: rc.Err == nil, Address: rc.Run.String(), Note: rc.Dir}
			if rc.Dir == "" {
				j.Note = "not in --runs: not re-verified"
			}
			if rc.Err != nil {
				j.Error, j.Code = rc.Err.Error(), string(reject.CodeOf(rc.Err))
			}
			add(j)
		}
	}
	if asJSON {
		if err := cli.PrintJSON(out, all); err != nil {
			return err
		}
	}
	if noTrust {
		fmt.Fprintln(errOut, "sandbox: note: no --trust given, so no signature can be trusted")
	}
	if err != nil {
		return cli.ExitError{Code: errs.ExitCode(errs.Of(err))}
	}
	return nil
}
