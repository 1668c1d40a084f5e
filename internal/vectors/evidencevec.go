package vectors

import (
	"bytes"
	"crypto/sha512"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// KindEvidence is the kind of the evidence vectors (evidence/evidence.json).
const KindEvidence = "evidence"

// EvidenceType is the "type" of evidence.json.
const EvidenceType = "sandbox.evidence-vectors/1"

// The real reports the hardware cases cite (samples/README.md).
var (
	//go:embed samples/test-report.bin
	sampleSNPReport []byte
	//go:embed samples/test-vcek.der
	sampleSNPVCEK []byte
	//go:embed samples/tdx_quote_4.dat
	sampleTDXQuote []byte
)

// EvidenceVectors is evidence.json: sandbox.attestation/4 claims, each
// with the evidence it cites and what a verifier of the evidence binding
// must conclude (docs/spec/evidence.md § Vectors).
type EvidenceVectors struct {
	Type  string         `json:"type"`
	Cases []EvidenceCase `json:"cases"`
}

// EvidenceCase is one claim and its evidence: the claim's exact canonical
// bytes as a string, the evidence (evidence.bin) in base64, endorsement
// certificates the evidence does not carry (DER, base64), the time its
// certificates are checked at (the claim's ended), whether software
// evidence is allowed, the claim's binding (hex), and "ok" or the code
// of the first refusal; and for evidence that verifies but for its
// binding, the report_data it carries.
type EvidenceCase struct {
	Name          string   `json:"name"`
	About         string   `json:"about"`
	Claim         string   `json:"claim"`
	Evidence      string   `json:"evidence"`
	Certs         []string `json:"certs,omitempty"`
	At            string   `json:"at"`
	AllowSoftware bool     `json:"allow_software"`
	Binding       string   `json:"binding"`
	// ReportData is the report_data the evidence carries (hex), for
	// evidence that verifies when no binding is asked of it: what a
	// verifier's reading of the report must find, bound or not.
	ReportData string `json:"report_data,omitempty"`
	Expect     string `json:"expect"`
}

// CheckEvidence runs every case of evidence.json through verify.Evidence,
// the check a run directory's evidence.bin goes through, after checking
// that the case is what it says: its claim canonical and valid, citing
// its evidence by address, at its ended time, with its binding.
func CheckEvidence(b []byte) error {
	var v EvidenceVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Type != EvidenceType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", v.Type, EvidenceType)
	}
	for _, c := range v.Cases {
		if got, err := RunEvidence(c); got != c.Expect {
			return fmt.Errorf("case %s: got %s, want %s (%v)", c.Name, got, c.Expect, err)
		}
	}
	return nil
}

// RunEvidence runs one case: "ok", or the code of its refusal. A case
// that is not well formed (its claim not canonical or not valid, its
// evidence not the claim's report by address, its at not the claim's
// ended, its binding not the claim's) is "case" and an error.
func RunEvidence(c EvidenceCase) (string, error) {
	var cl attest.Claim
	if err := jcs.Unmarshal([]byte(c.Claim), &cl); err != nil {
		return "case", fmt.Errorf("the claim: %w", err)
	}
	if err := cl.Validate(); err != nil {
		return "case", fmt.Errorf("the claim: %w", err)
	}
	if again, err := jcs.Marshal(cl); err != nil || !bytes.Equal(again, []byte(c.Claim)) {
		return "case", fmt.Errorf("the claim is not as attest.Seal writes it (%v)", err)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(c.Evidence)
	if err != nil {
		return "case", fmt.Errorf("evidence: %w", err)
	}
	var certs [][]byte
	for i, s := range c.Certs {
		der, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return "case", fmt.Errorf("certs[%d]: %w", i, err)
		}
		certs = append(certs, der)
	}
	switch binding, err := attest.Binding(cl, cl.Signer); {
	case cl.Evidence == nil:
		return "case", fmt.Errorf("the claim cites no evidence")
	case addr.Of(raw) != cl.Evidence.Report:
		return "case", fmt.Errorf("the evidence hashes to %s, the claim cites %s", addr.Of(raw), cl.Evidence.Report)
	case c.At != cl.Ended:
		return "case", fmt.Errorf("at %s, the claim ended %s", c.At, cl.Ended)
	case err != nil || c.Binding != hex.EncodeToString(binding[:]):
		return "case", fmt.Errorf("binding %s, the claim's is %x (%v)", c.Binding, binding, err)
	}
	if rd := reportData(raw, cl.Ended, certs); rd != c.ReportData {
		return "case", fmt.Errorf("report_data %q, the evidence carries %q", c.ReportData, rd)
	}
	if _, err := verify.Evidence(raw, &cl, c.AllowSoftware, certs...); err != nil {
		if code := reject.CodeOf(err); code != "" {
			return string(code), err
		}
		return "error", err
	}
	return ExpectOK, nil
}

// reportData is the report_data (hex) evidence carries, read by
// evidence.Verify with no binding asked of it (software allowed, a debug
// guest admitted), or "" where that refuses it.
func reportData(raw []byte, ended string, certs [][]byte) string {
	at, err := time.Parse(attest.TimeLayout, ended)
	if err != nil {
		return ""
	}
	r, err := evidence.Verify(raw, evidence.Options{At: at, Certs: certs, AllowSoftware: true, Policy: evidence.Policy{AllowDebug: true}})
	if err != nil {
		return ""
	}
	return r.ReportData
}

// evidenceVectors builds evidence.json: fixed keys, times and reports, so
// that every generation gives the same bytes.
func evidenceVectors() ([]byte, error) {
	var (
		host     = TestKey()
		other    = OtherKey()
		provider = seededKey("evidence vectors: the software provider").Ed25519()
		measured = sha512.Sum384([]byte("evidence vectors: the measured executable"))
		v        = EvidenceVectors{Type: EvidenceType}
		fail     error
	)
	const (
		swEnded  = "2026-01-01T00:00:01.250000000Z"
		snpEnded = "2024-06-01T00:00:00.000000000Z" // inside the VCEK's validity (2023-01-24 to 2030-01-24)
		tdxEnded = "2023-06-01T00:00:00.000000000Z" // inside the PCK chain's validity
	)
	// claim is the run's claim, unsealed, with no evidence yet.
	claim := func(ended string) attest.Claim {
		zero := 0
		return attest.Claim{
			Unit: addr.Of([]byte("evidence vectors: unit")), Image: addr.Of([]byte("evidence vectors: image")),
			Grants: addr.Of([]byte("evidence vectors: grants")), Decisions: addr.Of([]byte("evidence vectors: decisions")),
			Receipt:  addr.Of([]byte("evidence vectors: receipt")),
			Tier:     attest.Tier{Required: tier.S6, Chosen: tier.S6, Reason: "the unit requires S6"},
			Executor: "vectors/1",
			Hardware: attest.Hardware{Host: attest.Host{Name: "cvm-1", OS: "linux", Arch: "amd64"}},
			Outcome:  attest.Outcome{Status: attest.Exited, ExitCode: &zero},
			Started:  ended[:len("2006-01-02T")] + "00:00:00.000000000Z", Ended: ended,
		}
	}
	binding := func(c attest.Claim, signer key.Public) [64]byte {
		b, err := attest.Binding(c, signer)
		if err != nil && fail == nil {
			fail = err
		}
		return b
	}
	software := func(data [64]byte, ended string) []byte {
		t, err := time.Parse(attest.TimeLayout, ended)
		if err == nil {
			var b []byte
			if b, err = evidence.SignSoftware(provider, data, measured, t); err == nil {
				return b
			}
		}
		if fail == nil {
			fail = err
		}
		return nil
	}
	// add seals c citing raw as evidence of kind (provider software for
	// software, configfs-tsm otherwise) and adds the case.
	add := func(name, expect, about string, c attest.Claim, kind string, raw []byte, allow bool, certs ...[]byte) {
		prov := "configfs-tsm"
		if kind == string(evidence.KindSoftware) {
			prov = "software"
		}
		c.Evidence = &attest.Evidence{Provider: prov, Kind: kind, Report: addr.Of(raw), Software: kind == string(evidence.KindSoftware)}
		a, err := attest.Seal(c, host)
		if err != nil {
			if fail == nil {
				fail = fmt.Errorf("%s: %w", name, err)
			}
			return
		}
		b := binding(a.Claim, host.Public())
		ec := EvidenceCase{Name: name, About: about, Claim: string(a.ClaimJCS), Evidence: base64.StdEncoding.EncodeToString(raw),
			At: c.Ended, AllowSoftware: allow, Binding: hex.EncodeToString(b[:]), ReportData: reportData(raw, c.Ended, certs), Expect: expect}
		for _, d := range certs {
			ec.Certs = append(ec.Certs, base64.StdEncoding.EncodeToString(d))
		}
		v.Cases = append(v.Cases, ec)
	}
	sw := string(evidence.KindSoftware)
	snp, tdx := string(evidence.SNP), string(evidence.TDX)

	run := claim(swEnded)
	bound := software(binding(run, host.Public()), swEnded)
	add("software-bound", "ok", "software evidence whose report_data is the claim's binding, a verifier that allows software: ok, shown as software-grounded",
		run, sw, bound, true)
	add("software-not-allowed", "evidence-software", "the same, a verifier that does not allow software: refused before anything else is read",
		run, sw, bound, false)

	noted := run
	noted.Notes = []string{"a note the report was not made for"}
	add("software-other-notes", "evidence-report-data", "evidence bound to the claim without notes, cited by the same claim with a note added: the binding covers every member but evidence",
		noted, sw, bound, true)
	later := claim(swEnded)
	later.Ended = "2026-01-01T00:00:01.250000001Z"
	add("software-other-ended", "evidence-report-data", "evidence bound to the claim, cited by a claim that ended one nanosecond later",
		later, sw, software(binding(run, host.Public()), later.Ended), true)
	add("software-other-signer", "evidence-report-data", "evidence bound to the claim as the other key would sign it, cited by the claim the host key signs: the signer is part of the binding",
		run, sw, software(binding(run, other.Public()), swEnded), true)

	flipped := bytes.Clone(bound)
	flipped[len(flipped)-1] ^= 0x01
	add("software-signature", "evidence-signature", "bound software evidence with one bit of its Ed25519 signature flipped (the claim cites the flipped bytes)",
		run, sw, flipped, true)
	add("software-signature-not-allowed", "evidence-software", "the same, a verifier that does not allow software: refused for being software, before its signature",
		run, sw, flipped, false)
	add("software-short", "evidence-malformed", "bound software evidence without its last byte: a report is exactly 224 bytes",
		run, sw, bound[:len(bound)-1], true)

	add("kind-sev-snp-report-software", "invalid", "a claim that says its evidence is sev-snp (configfs-tsm, not software), citing bound software evidence, software allowed: the report verifies and is bound, and is not the kind the claim says",
		run, snp, bound, true)
	add("kind-sev-snp-report-software-not-allowed", "evidence-software", "the same, software not allowed: the report's own magic, not the claim, says it is software, and it is refused",
		run, snp, bound, false)

	hw := claim(snpEnded)
	add("sev-snp-unbound", "evidence-report-data", "a real Milan SEV-SNP report (trustee's test-report.bin) and its VCEK, at a time inside the VCEK's validity: the chain to AMD's ARK and the signature hold, and its report_data is not the claim's binding. Only AMD's firmware can sign a report over a binding, so a bound hardware vector cannot be made offline: every hardware case here is unbound",
		hw, snp, sampleSNPReport, false, sampleSNPVCEK)
	add("kind-software-report-sev-snp", "evidence-report-data", "a claim that says its evidence is software, citing the real SEV-SNP report: verified as what its bytes are, and refused by its binding before the kind is compared",
		hw, sw, sampleSNPReport, true, sampleSNPVCEK)
	add("sev-snp-no-vcek", "evidence-cert", "the SEV-SNP report without its VCEK: no endorsement certificate to check it with (hardware only: an independent verifier without ECDSA does not check this)",
		hw, snp, sampleSNPReport, false)
	expired := claim("2031-01-01T00:00:00.000000000Z")
	add("sev-snp-expired", "evidence-expired", "the SEV-SNP report cited by a claim that ended in 2031, after the VCEK's validity (hardware only: not checked without X.509)",
		expired, snp, sampleSNPReport, false, sampleSNPVCEK)
	forged := bytes.Clone(sampleSNPReport)
	forged[0x2a0] ^= 0x01
	add("sev-snp-signature", "evidence-signature", "the SEV-SNP report with one bit of its signature's R flipped (hardware only: not checked without ECDSA)",
		hw, snp, forged, false, sampleSNPVCEK)
	add("tdx-unbound", "evidence-report-data", "a real TDX v4 quote (trustee's tdx_quote_4.dat, a debug TD, which the run verifier admits and labels) at a time inside its PCK chain's validity: chain, QE report and quote signature hold, and its REPORTDATA is not the claim's binding",
		claim(tdxEnded), tdx, sampleTDXQuote, false)
	add("unsupported", "evidence-unsupported", "evidence that is none of the kinds: no SEV-SNP, TDX, SPDM header or software magic",
		run, sw, []byte("not evidence: an attestation report of no kind this verifier knows"), true)
	if fail != nil {
		return nil, fail
	}
	return jcs.Marshal(v)
}
