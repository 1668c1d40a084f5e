package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/reject"
)

func teeCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "tee",
		Short: "Hardware evidence: verify SEV-SNP reports, TDX quotes and NVIDIA GPU reports offline",
		Args:  cli.UsageArgs(cobra.NoArgs),
	}
	c.AddCommand(teeVerifyCmd())
	return c
}

// TEEVerifyJSON is one line of `sandbox tee verify --json`.
type TEEVerifyJSON struct {
	Path     string           `json:"path"`
	OK       bool             `json:"ok"`
	At       string           `json:"at"`
	Code     string           `json:"code,omitempty"`
	Where    string           `json:"where,omitempty"`
	Error    string           `json:"error,omitempty"`
	Evidence *evidence.Result `json:"evidence,omitempty"`
}

func teeVerifyCmd() *cobra.Command {
	var certs []string
	var policyFile, atFlag, kdsDir, product string
	var asJSON, allowSoftware bool
	c := &cobra.Command{
		Use:   "verify FILE [--cert FILE]... [--policy FILE] [--at RFC3339-TIME] [--json]",
		Short: "Verify an SEV-SNP report, a TDX quote or an NVIDIA GPU SPDM report offline",
		Long: `Verify hardware evidence offline, the way the field's verifiers do
(docs/spec/evidence.md): the endorsement key's certificate chained to the
vendor's root bundled in this program (AMD's ARK for Milan, Genoa and
Turin; Intel's SGX Root CA; NVIDIA's Device Identity CA), the signature,
the endorsement certificate's chip id and TCB against the report, then
the policy.

FILE is detected by its header:
  an AMD SEV-SNP attestation report (v2 and later, VCEK or VLEK), 1184
    bytes, optionally followed by its certificate table (GET_EXT_REPORT);
  an Intel TDX quote v4 with its PCK chain (v5 is refused as unsupported:
    the verifier used, go-tdx-guest v0.3.1, reads v4 only);
  an NVIDIA GPU's SPDM 1.1 GET_MEASUREMENTS request and signed response,
    binary or hex; its device certificate chain is given with --cert;
  a software report (sandbox.software-evidence/1, the software provider's,
    for tests and wiring): refused unless --allow-software is given, and
    then shown as SOFTWARE-GROUNDED: no hardware vouches for it.

--cert gives a certificate the evidence does not carry (DER or PEM): an
SEV-SNP report's VCEK or VLEK, a GPU's chain. Intermediates and roots are
always the bundled ones. --kds DIR reads a missing VCEK from a directory
laid out as AMD's KDS (vcek/v1/Milan/<hwid>?blSPL=...).

--policy FILE is JSON: {"measurements": [hex], "min_tcb": {"bl","tee",
"snp","ucode"}, "min_tee_tcb_svn": hex, "allow_debug": false, "vmpl": N,
"min_version": N, "report_data": hex, "host_data": hex,
"gpu_measurements": {"INDEX": [hex]}}. Debugging is forbidden unless the
policy allows it; the rest is checked only when given.

--at is the time certificates must be valid at; without it, the current
time, which the output states. Revocation lists and Intel's TCB status are
online and not checked: the output lists what was not.

Exit status: 0 verified; 4 refused (the code names the check: evidence-chain,
evidence-expired, evidence-signature, ...; docs/spec/conformance.md);
2 on bad flags or a malformed policy; 3 when FILE does not exist.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := evidence.Options{At: time.Now().UTC().Truncate(time.Second), KDS: kdsDir, Product: product, AllowSoftware: allowSoftware}
			if atFlag != "" {
				t, err := time.Parse(time.RFC3339, atFlag)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--at: %w", err)}
				}
				o.At = t
			}
			if policyFile != "" {
				b, err := readLimited(policyFile, 1<<20)
				if err != nil {
					return err
				}
				if o.Policy, err = evidence.ParsePolicy(b); err != nil {
					return errs.Usage{Err: fmt.Errorf("--policy %s: %w", policyFile, err)}
				}
			}
			for _, f := range certs {
				b, err := readLimited(f, 1<<20)
				if err != nil {
					return err
				}
				o.Certs = append(o.Certs, b)
			}
			b, err := readLimited(args[0], evidence.MaxSize)
			if err != nil {
				return err
			}
			r, verr := evidence.Verify(b, o)
			out := TEEVerifyJSON{Path: args[0], OK: verr == nil, At: o.At.Format(time.RFC3339), Evidence: r}
			var re *reject.Error
			if errors.As(verr, &re) {
				out.Code, out.Where = string(re.Code), re.Where
			}
			if verr != nil {
				out.Error = verr.Error()
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if err := cli.PrintJSON(w, out); err != nil {
					return err
				}
			} else {
				printEvidence(w, out)
			}
			if verr != nil {
				return cli.ExitError{Code: errs.ExitCode(errs.Of(verr))}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&certs, "cert", nil, "a certificate the evidence does not carry (DER or PEM): a VCEK or VLEK, a GPU's chain; repeatable")
	c.Flags().StringVar(&policyFile, "policy", "", "a policy file (JSON; docs/spec/evidence.md)")
	c.Flags().StringVar(&atFlag, "at", "", "verify the certificates at this time (RFC 3339); default: now, stated in the output")
	c.Flags().StringVar(&kdsDir, "kds", "", "a directory laid out as AMD's KDS, for a VCEK neither the evidence nor --cert holds")
	c.Flags().StringVar(&product, "product", "", "SEV-SNP: the product line whose bundled roots to use (Milan, Genoa, Turin) instead of the report's")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: ok, code, where, error, evidence")
	c.Flags().BoolVar(&allowSoftware, "allow-software", false, "accept software-grounded evidence (a test provider's: no hardware vouches for it), shown as such")
	return c
}

// readLimited reads at most limit bytes of path, refusing a longer file.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, reject.New(reject.EvidenceTooLarge, path, "over %d bytes", limit)
	}
	return b, nil
}

func printEvidence(w io.Writer, v TEEVerifyJSON) {
	if !v.OK {
		fmt.Fprintf(w, "FAIL  %s  %s (at %s)\n", v.Path, v.Error, v.At)
		return
	}
	r := v.Evidence
	if r.Software {
		fmt.Fprintf(w, "OK    %s  SOFTWARE-GROUNDED evidence (no hardware vouches for it), signed by %s, at %s\n", v.Path, r.Signer, v.At)
	} else {
		fmt.Fprintf(w, "OK    %s  %s v%d, %s, signed by its %s, at %s\n", v.Path, r.Kind, r.Version, r.Product, r.Signer, v.At)
	}
	if r.Measurement != "" {
		fmt.Fprintf(w, "  measurement  %s\n", r.Measurement)
	}
	fmt.Fprintf(w, "  report_data  %s\n", r.ReportData)
	if r.TCB != "" {
		fmt.Fprintf(w, "  tcb          %s\n", r.TCB)
	}
	fmt.Fprintf(w, "  debug        %v\n", r.Debug)
	if r.Firmware != "" {
		fmt.Fprintf(w, "  firmware     %s\n", r.Firmware)
	}
	if len(r.Measurements) > 0 {
		fmt.Fprintf(w, "  measurements %d (--json lists them)\n", len(r.Measurements))
	}
	fmt.Fprintf(w, "  chain        %s\n", strings.Join(r.Chain, " <- "))
	fmt.Fprintf(w, "  not checked  %s\n", strings.Join(r.NotChecked, "; "))
}
