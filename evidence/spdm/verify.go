package spdm

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Options are what Verify checks beyond the signature and the chain.
// The zero value is refused: a verification needs a time.
type Options struct {
	// At is the time the certificates must be valid at. Required: a
	// zero At is refused (ErrOptions), never taken as now.
	At time.Time
	// ExpectedNonce, if not nil, is the nonce the verifier gave the
	// requester: the request's nonce (which the signature covers) must
	// be it, NonceSize bytes.
	ExpectedNonce []byte
	// AllowedMeasurements, if not nil, is a policy: each index it names
	// must be in the response, with a value (lowercase or uppercase hex)
	// among those it lists. Indices it does not name are not checked.
	AllowedMeasurements map[uint8][]string
}

// Measurement is one measurement of a verified report.
type Measurement struct {
	// Index is the measurement's index.
	Index uint8
	// Type is what was measured.
	Type ValueType
	// Raw says Digest is a raw bit stream, not a digest.
	Raw bool
	// Digest is the value in lowercase hex.
	Digest string
}

// Result is what a verified report states.
type Result struct {
	// Chain is the verified chain, the device's certificate first and
	// the trusted root last.
	Chain []*x509.Certificate
	// Nonce is the request's nonce: the freshness the signature binds.
	Nonce [NonceSize]byte
	// Measurements are the response's measurements, in its order.
	Measurements []Measurement
	// NVIDIA is the response's opaque data read as NVIDIA's, or nil.
	NVIDIA *NVIDIA
}

// Verify checks a parsed report against a certificate chain (the
// device's certificate first, as ParseChain returns it) and trusted
// roots (Roots for NVIDIA's), offline, in this order:
//
//   - every certificate of chain is valid at opts.At (ErrExpired);
//   - the chain leads from its first certificate to one of roots at
//     opts.At, through the others, under crypto/x509's rules, for any
//     extended key usage (ErrChain, or ErrExpired; a trusted root that
//     is not in chain and not valid at opts.At is ErrChain);
//   - the first certificate's key is ECDSA P-384, allowed to sign (ErrKey);
//   - the response's signature verifies under that key over SHA-384 of
//     the request and the response up to the signature (ErrSignature);
//   - the first certificate is not a CA (ErrKey);
//   - where the first certificate or the opaque data names the firmware
//     (NVIDIA's FWID), both do, and name the same (ErrFWID);
//   - the request's nonce is opts.ExpectedNonce, if given (ErrNonce);
//   - the measurements meet opts.AllowedMeasurements, if given
//     (ErrMeasurement).
//
// It does not check revocation: see the package documentation.
func Verify(r *Report, chain []*x509.Certificate, roots *x509.CertPool, opts Options) (*Result, error) {
	switch {
	case r == nil || r.response == nil:
		return nil, errorf(ErrOptions, "report", "no parsed report")
	case roots == nil:
		return nil, errorf(ErrOptions, "roots", "no trusted roots")
	case opts.At.IsZero():
		return nil, errorf(ErrOptions, "options", "no time to verify at: set Options.At")
	case len(chain) == 0:
		return nil, errorf(ErrChain, "chain", "no certificate")
	}
	for i, c := range chain {
		if c == nil {
			return nil, errorf(ErrChain, fmt.Sprintf("certificate %d", i), "absent (nil)")
		}
	}
	verified, err := verifyChain(chain, roots, opts.At)
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	switch {
	case !ok:
		return nil, errorf(ErrKey, "certificate 0", "the key is %s, not ECDSA P-384", leaf.PublicKeyAlgorithm)
	case pub.Curve != elliptic.P384():
		return nil, errorf(ErrKey, "certificate 0", "the key is ECDSA on %s, not P-384", pub.Curve.Params().Name)
	}
	if leaf.KeyUsage != 0 && leaf.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return nil, errorf(ErrKey, "certificate 0", "the key is not for digital signatures")
	}
	// A CA's key certifies other keys; the device's attestation key is a
	// leaf's (NVIDIA's "GSP FMC LF" has no basic constraints).
	if leaf.IsCA {
		return nil, errorf(ErrKey, "certificate 0", "%q is a CA, not the device's attestation key", leaf.Subject.CommonName)
	}
	req, resp := r.Signed()
	h := sha512.New384()
	h.Write(req)
	h.Write(resp)
	sig := r.Response.Signature
	rr, ss := new(big.Int).SetBytes(sig[:48]), new(big.Int).SetBytes(sig[48:])
	if !ecdsa.Verify(pub, h.Sum(nil), rr, ss) {
		return nil, errorf(ErrSignature, respAt(len(resp)), "the signature does not verify under the key of %q", leaf.Subject.CommonName)
	}
	// The firmware binding: where the certificate names the firmware that
	// holds its key, the report must name the same; where only the report
	// names one, the certificate does not vouch for it. A report that
	// leaves the item out (or whose opaque data is not NVIDIA's list) is
	// not let past the check.
	n := r.Response.NVIDIA
	named := n != nil && slices.ContainsFunc(n.Items, func(i OpaqueItem) bool { return i.Type == OpaqueFWID })
	if want := certFWID(leaf); want != nil || named {
		switch {
		case !named:
			return nil, errorf(ErrFWID, "opaque data", "no firmware id (NVIDIA item %d); the certificate was issued to %x", OpaqueFWID, want)
		case n.FWID == nil:
			return nil, errorf(ErrFWID, "opaque data", "a FWID item that is not 48 bytes")
		case want == nil:
			return nil, errorf(ErrFWID, "certificate 0", "the report names its firmware; the certificate does not")
		case subtle.ConstantTimeCompare(want, n.FWID) != 1:
			return nil, errorf(ErrFWID, "opaque data", "firmware %x; the certificate was issued to %x", n.FWID, want)
		}
	}
	if opts.ExpectedNonce != nil {
		got := r.Request.Nonce
		if subtle.ConstantTimeCompare(got[:], opts.ExpectedNonce) != 1 {
			return nil, errorf(ErrNonce, reqAt(4), "the request's nonce is %x, not the expected %x", got, opts.ExpectedNonce)
		}
	}
	res := &Result{Chain: verified, Nonce: r.Request.Nonce, NVIDIA: r.Response.NVIDIA}
	for _, b := range r.Response.Blocks {
		res.Measurements = append(res.Measurements, Measurement{Index: b.Index, Type: b.Type, Raw: b.Raw, Digest: b.Hex()})
	}
	if err := checkPolicy(res.Measurements, opts.AllowedMeasurements); err != nil {
		return nil, err
	}
	return res, nil
}

// verifyChain checks chain at t, to roots, and returns the path found.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, t time.Time) ([]*x509.Certificate, error) {
	for i, c := range chain {
		if t.Before(c.NotBefore) || t.After(c.NotAfter) {
			return nil, errorf(ErrExpired, fmt.Sprintf("certificate %d", i), "%q is valid from %s to %s, not at %s",
				c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
		}
	}
	// A self-signed certificate (the chain's copy of its root) is no
	// intermediate: only a trusted root anchors a chain, and offering it
	// again costs crypto/x509 two more signature checks.
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		if !bytes.Equal(c.RawSubject, c.RawIssuer) {
			inter.AddCert(c)
		}
	}
	chains, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   t,
		// NVIDIA's device certificates carry no extended key usage.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			return nil, wrap(ErrExpired, "chain", err)
		}
		return nil, wrap(ErrChain, "chain", err)
	}
	return chains[0], nil
}

// checkPolicy checks ms against allowed.
func checkPolicy(ms []Measurement, allowed map[uint8][]string) error {
	idx := make([]uint8, 0, len(allowed))
	for i := range allowed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		at := slices.IndexFunc(ms, func(m Measurement) bool { return m.Index == i })
		if at < 0 {
			return errorf(ErrMeasurement, fmt.Sprintf("measurement %d", i), "absent from the response; the policy requires it")
		}
		got := ms[at].Digest
		if !slices.ContainsFunc(allowed[i], func(v string) bool { return strings.EqualFold(v, got) && isHex(v) }) {
			return errorf(ErrMeasurement, fmt.Sprintf("measurement %d", i), "%s is not among the %d values the policy allows", got, len(allowed[i]))
		}
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}
