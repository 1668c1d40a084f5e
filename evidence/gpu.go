package evidence

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/opensubstrate/sandbox/evidence/spdm"
	"github.com/opensubstrate/sandbox/reject"
)

// spdmCodes maps the SPDM verifier's refusals to the evidence codes.
var spdmCodes = map[spdm.Code]reject.Code{
	spdm.ErrTooLarge:    reject.EvidenceTooLarge,
	spdm.ErrMalformed:   reject.EvidenceMalformed,
	spdm.ErrVersion:     reject.EvidenceUnsupported,
	spdm.ErrOptions:     reject.Invalid,
	spdm.ErrChain:       reject.EvidenceChain,
	spdm.ErrExpired:     reject.EvidenceExpired,
	spdm.ErrKey:         reject.EvidenceCert,
	spdm.ErrSignature:   reject.EvidenceSignature,
	spdm.ErrFWID:        reject.EvidenceBinding,
	spdm.ErrNonce:       reject.EvidenceReportData,
	spdm.ErrMeasurement: reject.EvidenceMeasurement,
}

func fromSPDM(err error) error {
	var e *spdm.Error
	if errors.As(err, &e) {
		if c, ok := spdmCodes[e.Code]; ok {
			return reject.Wrap(c, "nvidia-spdm "+e.Where, err)
		}
	}
	return reject.Wrap(reject.EvidenceMalformed, "nvidia-spdm", err)
}

// isSPDM reports whether b begins as an SPDM 1.x GET_MEASUREMENTS
// request, in binary or in hex.
func isSPDM(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0]&0xF0 == 0x10 && b[1] == 0xE0 ||
		len(b) >= 4 && b[0] == '1' && (b[2] == 'e' || b[2] == 'E') && b[3] == '0'
}

// unhex returns b decoded from hex when it is text (as NVIDIA's tools
// write reports: an SPDM message's first byte is 0x1_, never a printable
// character), else b.
func unhex(b []byte) ([]byte, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0]&0xF0 == 0x10 {
		return b, nil
	}
	t := bytes.Join(bytes.Fields(b), nil)
	out := make([]byte, hex.DecodedLen(len(t)))
	if _, err := hex.Decode(out, t); err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "nvidia-spdm", "neither an SPDM message nor hex text: %v", err)
	}
	return out, nil
}

// verifySPDM checks an NVIDIA GPU's SPDM measurement report: the
// GET_MEASUREMENTS request followed by its signed response, in binary
// or hex, with the device's certificate chain in o.Certs (PEM or DER),
// to NVIDIA's Device Identity CA bundled in evidence/spdm.
func verifySPDM(b []byte, o Options) (*Result, error) {
	raw, err := unhex(b)
	if err != nil {
		return nil, err
	}
	rep, err := spdm.ParseReport(raw)
	if err != nil {
		return nil, fromSPDM(err)
	}
	if rep.Request.Version < uint8(min(o.Policy.MinVersion, 255)) || o.Policy.MinVersion > 255 {
		return nil, reject.New(reject.EvidenceVersion, "nvidia-spdm request.version", "SPDM %#x; the policy's minimum is %#x", rep.Request.Version, o.Policy.MinVersion)
	}
	if len(o.Certs) == 0 {
		return nil, reject.New(reject.EvidenceCert, "nvidia-spdm", "no device certificate chain: give it (--cert)")
	}
	var chain []*x509.Certificate
	for _, c := range o.Certs {
		cs, err := spdm.ParseChain(c)
		if err != nil {
			return nil, fromSPDM(err)
		}
		chain = append(chain, cs...)
	}
	so := spdm.Options{At: o.At}
	if p := o.Policy.ReportData; p != "" {
		if so.ExpectedNonce, err = hex.DecodeString(p); err != nil {
			return nil, reject.New(reject.Invalid, "policy.report_data", "%v", err)
		}
	}
	if len(o.Policy.GPUMeasurements) > 0 {
		so.AllowedMeasurements = map[uint8][]string{}
		for k, v := range o.Policy.GPUMeasurements {
			i, err := strconv.ParseUint(k, 10, 8)
			if err != nil {
				return nil, reject.New(reject.Invalid, "policy.gpu_measurements", "index %q: %v", k, err)
			}
			so.AllowedMeasurements[uint8(i)] = v
		}
	}
	r, err := spdm.Verify(rep, chain, spdm.Roots(), so)
	if err != nil {
		return nil, fromSPDM(err)
	}
	out := &Result{
		Kind: SPDM, Version: uint32(rep.Request.Version), Product: "NVIDIA GPU", Signer: "device",
		ReportData: hex.EncodeToString(r.Nonce[:]),
		Chain:      subjects(r.Chain...),
		NotChecked: []string{"revocation: NVIDIA's OCSP is online", "reference values: NVIDIA's RIMs are the policy's to give"},
	}
	for _, m := range r.Measurements {
		out.Measurements = append(out.Measurements, fmt.Sprintf("%d:%s", m.Index, m.Digest))
	}
	if n := r.NVIDIA; n != nil {
		out.Firmware = fmt.Sprintf("driver %s, vbios %s", n.DriverVersion, n.VBIOSVersion)
	}
	return out, nil
}
