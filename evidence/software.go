package evidence

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/opensubstrate/sandbox/reject"
)

// KindSoftware is software-grounded evidence (sandbox.software-evidence/1):
// a report signed by a key of the host, no hardware behind it. It exists
// for tests and wiring; Verify refuses it unless Options.AllowSoftware.
const KindSoftware Kind = "software"

// SoftwareMagic begins every sandbox.software-evidence/1 report.
const SoftwareMagic = "SBXSOFT1"

// SoftwareSize is the exact size of a sandbox.software-evidence/1
// report: magic (8) ‖ report_data (64) ‖ measurement (48) ‖ time (8) ‖
// public key (32) ‖ signature (64).
const SoftwareSize = 8 + 64 + 48 + 8 + ed25519.PublicKeySize + ed25519.SignatureSize

// softwareDomain prefixes the signed bytes, so that a software report's
// signature can never be taken for a signature over anything else the
// same key signs.
const softwareDomain = "sandbox.software-evidence/1\x00"

// The offsets of the fields.
const (
	swData    = 8
	swMeasure = swData + 64
	swTime    = swMeasure + 48
	swKey     = swTime + 8
	swSig     = swKey + ed25519.PublicKeySize
)

// SoftwareReport is a parsed sandbox.software-evidence/1 report. Its
// signature is checked by Verify, not by ParseSoftware.
type SoftwareReport struct {
	// ReportData is the 64-byte binding the report carries.
	ReportData [64]byte
	// Measurement is what the provider measured (its SHA-384 of the
	// running executable), 48 bytes.
	Measurement [48]byte
	// Time is when the provider made the report, in whole seconds.
	Time time.Time
	// Key is the Ed25519 public key that signed the report.
	Key ed25519.PublicKey
	// Signature is the Ed25519 signature over the domain prefix and
	// the report's bytes before it.
	Signature []byte
}

// SignSoftware makes a sandbox.software-evidence/1 report bound to
// reportData, stating measurement and t, signed with key. No hardware
// vouches for it: it is for tests and wiring only.
func SignSoftware(key ed25519.PrivateKey, reportData [64]byte, measurement [48]byte, t time.Time) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("evidence: a software report needs an Ed25519 private key")
	}
	if t.Unix() < 0 {
		return nil, errors.New("evidence: a software report's time is before 1970")
	}
	b := make([]byte, swSig, SoftwareSize)
	copy(b, SoftwareMagic)
	copy(b[swData:], reportData[:])
	copy(b[swMeasure:], measurement[:])
	binary.BigEndian.PutUint64(b[swTime:], uint64(t.Unix()))
	copy(b[swKey:], key.Public().(ed25519.PublicKey))
	return append(b, ed25519.Sign(key, softwareSigned(b))...), nil
}

// softwareSigned is what a software report's signature covers.
func softwareSigned(body []byte) []byte {
	return append([]byte(softwareDomain), body[:swSig]...)
}

// ParseSoftware reads a sandbox.software-evidence/1 report: exactly
// SoftwareSize bytes beginning with SoftwareMagic. It checks the layout,
// not the signature (Verify does).
func ParseSoftware(b []byte) (*SoftwareReport, error) {
	if !bytes.HasPrefix(b, []byte(SoftwareMagic)) {
		return nil, reject.New(reject.EvidenceMalformed, "software at offset 0", "not %q", SoftwareMagic)
	}
	if len(b) != SoftwareSize {
		return nil, reject.New(reject.EvidenceMalformed, "software", "%d bytes; a report is exactly %d", len(b), SoftwareSize)
	}
	secs := binary.BigEndian.Uint64(b[swTime:])
	if secs > 1<<62 {
		return nil, reject.New(reject.EvidenceMalformed, "software.time at offset 120", "%d seconds is out of range", secs)
	}
	r := &SoftwareReport{
		Time:      time.Unix(int64(secs), 0).UTC(),
		Key:       ed25519.PublicKey(bytes.Clone(b[swKey:swSig])),
		Signature: bytes.Clone(b[swSig:]),
	}
	copy(r.ReportData[:], b[swData:swMeasure])
	copy(r.Measurement[:], b[swMeasure:swTime])
	return r, nil
}

// verifySoftware checks a software report: allowed at all, its
// signature, then the policy.
func verifySoftware(b []byte, o Options) (*Result, error) {
	if !o.AllowSoftware {
		return nil, reject.New(reject.EvidenceSoftware, "software", "software-grounded evidence: no hardware vouches for it (a verifier admits it only when told to, for tests)")
	}
	r, err := ParseSoftware(b)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(r.Key, softwareSigned(b), r.Signature) {
		return nil, reject.New(reject.EvidenceSignature, "software.signature", "does not verify under the report's key %x", []byte(r.Key))
	}
	p := o.Policy
	if err := checkCommon("software", p, 1, r.Measurement[:], r.ReportData[:], false); err != nil {
		return nil, err
	}
	// What only hardware states, a software report cannot meet.
	switch {
	case p.MinTCB != nil || p.MinTeeTCBSVN != "":
		return nil, reject.New(reject.EvidenceTCB, "software", "no TCB: the policy requires one, and no hardware stands behind this report")
	case p.VMPL != nil:
		return nil, reject.New(reject.EvidenceVMPL, "software", "no VMPL: the policy requires %d, and no hardware stands behind this report", *p.VMPL)
	case p.HostData != "":
		return nil, reject.New(reject.EvidenceHostData, "software", "no host data: the policy requires %s", p.HostData)
	}
	signer := "software key " + hex.EncodeToString(r.Key)
	return &Result{
		Kind:        KindSoftware,
		Version:     1,
		Signer:      signer,
		Measurement: hex.EncodeToString(r.Measurement[:]),
		ReportData:  hex.EncodeToString(r.ReportData[:]),
		Chain:       []string{signer},
		NotChecked: []string{
			"hardware: none; a software provider's key, for tests only",
			"key: any key verifies its own report; whose key this is, compare the signer with the key you expect",
		},
		Software: true,
	}, nil
}
