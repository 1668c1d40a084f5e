package evidence

import (
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/reject"
)

// Kind is what a piece of evidence is.
type Kind string

// The kinds this package verifies.
const (
	SNP  Kind = "sev-snp"     // an AMD SEV-SNP attestation report (ECDSA P-384, SHA-384)
	TDX  Kind = "tdx"         // an Intel TDX quote (ECDSA P-256, SHA-256)
	SPDM Kind = "nvidia-spdm" // an NVIDIA GPU's SPDM measurement report (ECDSA P-384)
)

// MaxSize is the largest evidence file read: an SEV-SNP report with its
// certificate table, or a TDX quote with its PCK chain, is a few
// kilobytes.
const MaxSize = 1 << 20

// Policy is what the caller requires of verified evidence, beyond its
// chain and signature (docs/spec/evidence.md). A zero Policy forbids
// debugging and checks nothing else.
type Policy struct {
	// Measurements allowed (hex): SEV-SNP's MEASUREMENT, TDX's MRTD,
	// 48 bytes each. Empty: any.
	Measurements []string `json:"measurements,omitempty"`
	// MinTCB is SEV-SNP's minimum reported TCB, component by component.
	MinTCB *TCB `json:"min_tcb,omitempty"`
	// MinTeeTCBSVN is TDX's minimum TEE_TCB_SVN (hex, 16 bytes),
	// compared byte by byte.
	MinTeeTCBSVN string `json:"min_tee_tcb_svn,omitempty"`
	// AllowDebug admits a guest whose policy allows debugging (SEV-SNP
	// policy bit 19, TDX TD attribute DEBUG). Forbidden by default.
	AllowDebug bool `json:"allow_debug,omitempty"`
	// VMPL is SEV-SNP's required VMPL, 0–3. Nil: any.
	VMPL *int `json:"vmpl,omitempty"`
	// MinVersion is the lowest report (SEV-SNP) or quote (TDX) version
	// admitted.
	MinVersion uint32 `json:"min_version,omitempty"`
	// ReportData is the 64 bytes (hex) the report must carry: a run's
	// binding; for an NVIDIA GPU, the 32-byte nonce of its request.
	// Empty: not checked.
	ReportData string `json:"report_data,omitempty"`
	// HostData is SEV-SNP's HOST_DATA (32 bytes) or TDX's MRCONFIGID
	// (48 bytes), hex. Empty: not checked.
	HostData string `json:"host_data,omitempty"`
	// GPUMeasurements are an NVIDIA GPU's allowed measurements: for each
	// index named (decimal), the digests (hex) allowed. Indices not
	// named are not checked.
	GPUMeasurements map[string][]string `json:"gpu_measurements,omitempty"`
}

// TCB is an SEV-SNP TCB version's security patch levels.
type TCB struct {
	Bootloader uint8 `json:"bl"`
	TEE        uint8 `json:"tee"`
	SNP        uint8 `json:"snp"`
	Microcode  uint8 `json:"ucode"`
}

func (t TCB) String() string {
	return fmt.Sprintf("bl=%d tee=%d snp=%d ucode=%d", t.Bootloader, t.TEE, t.SNP, t.Microcode)
}

// ParsePolicy reads a Policy from JSON, refusing unknown members and
// malformed hex.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return Policy{}, reject.Wrap(reject.Malformed, "policy", err)
	}
	if d.More() {
		return Policy{}, reject.New(reject.Malformed, "policy", "trailing data after the policy object")
	}
	check := func(field, h string, sizes ...int) error {
		if h == "" {
			return nil
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return reject.New(reject.Invalid, "policy."+field, "not hex: %v", err)
		}
		for _, n := range sizes {
			if len(b) == n {
				return nil
			}
		}
		return reject.New(reject.Invalid, "policy."+field, "%d bytes; want %v", len(b), sizes)
	}
	for i, m := range p.Measurements {
		if err := check(fmt.Sprintf("measurements[%d]", i), m, 48); err != nil {
			return Policy{}, err
		}
	}
	if err := errors.Join(check("report_data", p.ReportData, 64, 32), check("host_data", p.HostData, 32, 48),
		check("min_tee_tcb_svn", p.MinTeeTCBSVN, 16)); err != nil {
		return Policy{}, err
	}
	if p.VMPL != nil && (*p.VMPL < 0 || *p.VMPL > 3) {
		return Policy{}, reject.New(reject.Invalid, "policy.vmpl", "%d; want 0 to 3", *p.VMPL)
	}
	if err := gpuIndices(b); err != nil {
		return Policy{}, err
	}
	for k, ds := range p.GPUMeasurements {
		if i, err := strconv.Atoi(k); err != nil || strconv.Itoa(i) != k || i < 1 || i > 254 {
			return Policy{}, reject.New(reject.Invalid, "policy.gpu_measurements", "index %q: want a decimal 1 to 254, without leading zeros", k)
		}
		for j, d := range ds {
			if err := check(fmt.Sprintf("gpu_measurements[%s][%d]", k, j), d, 32, 48, 64); err != nil || d == "" {
				return Policy{}, reject.New(reject.Invalid, fmt.Sprintf("policy.gpu_measurements[%s][%d]", k, j), "a digest in hex, 32, 48 or 64 bytes")
			}
		}
	}
	return p, nil
}

// gpuIndices refuses a gpu_measurements object naming an index twice
// (encoding/json keeps the last, silently).
func gpuIndices(b []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return reject.Wrap(reject.Malformed, "policy", err)
	}
	raw, ok := top["gpu_measurements"]
	if !ok {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return reject.New(reject.Invalid, "policy.gpu_measurements", "not an object")
	}
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return reject.Wrap(reject.Malformed, "policy.gpu_measurements", err)
		}
		k, _ := t.(string)
		if seen[k] {
			return reject.New(reject.DuplicateKey, "policy.gpu_measurements", "index %q twice", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return reject.Wrap(reject.Malformed, "policy.gpu_measurements", err)
		}
	}
	return nil
}

// Options are what one verification is given besides the evidence.
type Options struct {
	// At is the time certificates must be valid at. Required: a zero At
	// is refused, never replaced by the clock.
	At time.Time
	// Policy is checked after the chain and the signature.
	Policy Policy
	// Certs are certificates the evidence does not carry (DER or PEM):
	// an SEV-SNP report's VCEK or VLEK. Intermediates and roots are
	// the bundled ones whatever is given here.
	Certs [][]byte
	// KDS is a directory laid out as AMD's Key Distribution Service
	// (vcek/v1/Milan/<hwid>?blSPL=…), read for an endorsement
	// certificate neither the evidence nor Certs holds.
	KDS string
	// Product forces the SEV-SNP product line (Milan, Genoa, Turin)
	// whose bundled roots are used, instead of the one the report or
	// its certificate names.
	Product string
	// AllowSoftware admits software-grounded evidence (KindSoftware),
	// for tests and wiring. Refused by default: no hardware vouches
	// for it.
	AllowSoftware bool
}

// Result is what verified evidence says.
type Result struct {
	Kind        Kind   `json:"kind"`
	Version     uint32 `json:"version"`
	Product     string `json:"product,omitempty"`     // Milan, Genoa, Turin; TDX
	Signer      string `json:"signer"`                // VCEK, VLEK, PCK
	Measurement string `json:"measurement,omitempty"` // hex: MEASUREMENT, MRTD
	ReportData  string `json:"report_data"`           // hex
	HostData    string `json:"host_data,omitempty"`
	ChipID      string `json:"chip_id,omitempty"`
	TCB         string `json:"tcb,omitempty"` // hex: REPORTED_TCB, TEE_TCB_SVN
	Debug       bool   `json:"debug"`
	VMPL        *int   `json:"vmpl,omitempty"`
	// Measurements are an NVIDIA GPU's, "index:digest" in hex.
	Measurements []string `json:"measurements,omitempty"`
	// Firmware is what an NVIDIA GPU states of its firmware.
	Firmware string `json:"firmware,omitempty"`
	// Chain is the subjects from the endorsement key to the root.
	Chain []string `json:"chain"`
	// NotChecked names what an offline verification could not check.
	NotChecked []string `json:"not_checked"`
	// Software is true for software-grounded evidence: no hardware
	// vouches for it.
	Software bool `json:"software,omitempty"`
}

// Detect tells an SEV-SNP report, a TDX quote and an NVIDIA GPU's SPDM
// report (binary or hex) apart by their headers, and a software report
// (KindSoftware) by its magic.
func Detect(b []byte) (Kind, error) {
	if len(b) >= len(SoftwareMagic) && string(b[:len(SoftwareMagic)]) == SoftwareMagic {
		return KindSoftware, nil
	}
	if isSPDM(b) {
		return SPDM, nil
	}
	if len(b) >= 8 {
		version := binary.LittleEndian.Uint16(b)
		keyType := binary.LittleEndian.Uint16(b[2:])
		tee := binary.LittleEndian.Uint32(b[4:])
		if (version == 4 || version == 5) && keyType == 2 && tee == 0x81 {
			return TDX, nil
		}
	}
	if len(b) >= 0x38 {
		version := binary.LittleEndian.Uint32(b)
		algo := binary.LittleEndian.Uint32(b[0x34:])
		if version >= 2 && version <= 5 && algo == 1 {
			return SNP, nil
		}
	}
	return "", reject.New(reject.EvidenceUnsupported, "offset 0", "not an SEV-SNP report (version 2-5, ECDSA P-384), a TDX quote (version 4-5, TEE type 0x81) or an SPDM measurement request and response")
}

// Verify checks evidence of the kind Detect finds in b.
func Verify(b []byte, o Options) (r *Result, err error) {
	if len(b) > MaxSize {
		return nil, reject.New(reject.EvidenceTooLarge, "evidence", "%d bytes; the limit is %d", len(b), MaxSize)
	}
	if o.At.IsZero() {
		return nil, reject.New(reject.Invalid, "options.at", "no time to verify at: give one (never the clock, silently)")
	}
	k, err := Detect(b)
	if err != nil {
		return nil, err
	}
	// The vendors' parsers (go-sev-guest, go-tdx-guest) index slices by
	// lengths the evidence states, and some of them panic on a lying
	// length instead of returning an error: that is malformed evidence.
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, reject.New(reject.EvidenceMalformed, string(k), "a length or offset in the evidence is out of range (%v)", p)
		}
	}()
	switch k {
	case SNP:
		r, err = verifySNP(b, o)
	case SPDM:
		r, err = verifySPDM(b, o)
	case KindSoftware:
		return verifySoftware(b, o)
	default:
		r, err = verifyTDX(b, o)
	}
	if err != nil {
		return nil, err
	}
	if err := unmet(k, o.Policy); err != nil {
		return nil, err
	}
	return r, nil
}

// unmet refuses a policy member evidence of kind k states nothing of
// (a VMPL for a TDX quote, a CPU measurement for a GPU): a policy written
// for another kind is not met by silence.
func unmet(k Kind, p Policy) error {
	// What each kind states nothing of.
	silent := map[Kind][]string{
		SNP:  {"min_tee_tcb_svn", "gpu_measurements"},
		TDX:  {"min_tcb", "vmpl", "gpu_measurements"},
		SPDM: {"measurements", "min_tcb", "min_tee_tcb_svn", "vmpl", "host_data"},
	}[k]
	for _, m := range []struct {
		name string
		set  bool
		code reject.Code
	}{
		{"measurements", len(p.Measurements) > 0, reject.EvidenceMeasurement},
		{"min_tcb", p.MinTCB != nil, reject.EvidenceTCB},
		{"min_tee_tcb_svn", p.MinTeeTCBSVN != "", reject.EvidenceTCB},
		{"vmpl", p.VMPL != nil, reject.EvidenceVMPL},
		{"host_data", p.HostData != "", reject.EvidenceHostData},
		{"gpu_measurements", len(p.GPUMeasurements) > 0, reject.EvidenceMeasurement},
	} {
		if m.set && slices.Contains(silent, m.name) {
			return reject.New(m.code, "policy."+m.name, "%s evidence states nothing of it: a policy for another kind is not met here", k)
		}
	}
	return nil
}

// validAt refuses a certificate of a chain outside its validity at t.
func validAt(where string, t time.Time, certs ...*x509.Certificate) error {
	for _, c := range certs {
		if c == nil {
			continue
		}
		if t.Before(c.NotBefore) || t.After(c.NotAfter) {
			return reject.New(reject.EvidenceExpired, where, "%q is valid from %s to %s, not at %s",
				c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// oneOf reports whether got (bytes) is among the hex strings allowed.
func oneOf(got []byte, allowed []string) bool {
	h := hex.EncodeToString(got)
	for _, a := range allowed {
		if strings.EqualFold(a, h) {
			return true
		}
	}
	return false
}

// checkCommon applies the parts of a policy both kinds share.
func checkCommon(kind string, p Policy, version uint32, measurement, reportData []byte, debug bool) error {
	switch {
	case version < p.MinVersion:
		return reject.New(reject.EvidenceVersion, kind+".version", "%d; the policy's minimum is %d", version, p.MinVersion)
	case debug && !p.AllowDebug:
		return reject.New(reject.EvidenceDebug, kind+".policy", "the guest allows debugging (its memory is readable by the host); the policy forbids it")
	case len(p.Measurements) > 0 && !oneOf(measurement, p.Measurements):
		return reject.New(reject.EvidenceMeasurement, kind+".measurement", "%x is not among the policy's %d", measurement, len(p.Measurements))
	case p.ReportData != "" && !strings.EqualFold(p.ReportData, hex.EncodeToString(reportData)):
		return reject.New(reject.EvidenceReportData, kind+".report_data", "%x, not the expected %s", reportData, p.ReportData)
	}
	return nil
}

func subjects(certs ...*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		if c != nil {
			out = append(out, c.Subject.String())
		}
	}
	return out
}
