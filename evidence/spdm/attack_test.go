package spdm_test

// Attacks on the SPDM verifier: evidence that should not verify, inputs
// that should not panic or take long. Each either shows a weakness fixed
// here or pins a refusal that already held.

import (
	"bytes"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/evidence/spdm"
)

var (
	long    = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	forever = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// mustParse(t)(req, resp) is the parsed report, or t fails.
func mustParse(t *testing.T) func(req, resp []byte) *spdm.Report {
	return func(req, resp []byte) *spdm.Report {
		t.Helper()
		r, err := spdm.Parse(req, resp)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// Finding 7: the firmware binding (docs/spec/evidence.md §3, NVIDIA step
// 4) was checked only where the report's opaque data named a firmware.
// A device key whose certificate names its firmware verified a report
// that left the FWID item out, or whose opaque data was not NVIDIA's
// list at all: the binding the spec promises silently did not apply.
// Where the certificate names a firmware, the report must name the same.
func TestAttackFWIDLeftOut(t *testing.T) {
	p := newPKI(t, long, forever)
	dev := key(t, elliptic.P384())
	fwid := bytes.Repeat([]byte{0xF1}, 48)
	chain := []*x509.Certificate{p.leaf(t, &dev.PublicKey, long, forever, fwid), p.root}
	var nonce [32]byte
	digest := [][]byte{bytes.Repeat([]byte{0xD1}, 48)}

	driverOnly := binary.LittleEndian.AppendUint16(nil, spdm.OpaqueDriverVersion)
	driverOnly = binary.LittleEndian.AppendUint16(driverOnly, 6)
	driverOnly = append(driverOnly, "1.2.3\x00"...)
	for _, tc := range []struct {
		name   string
		opaque []byte
	}{
		{"no opaque data", nil},
		{"NVIDIA's items without a FWID", driverOnly},
		{"opaque data that is not NVIDIA's list", append(nvOpaque(fwid), 0xEE)},
		{"the FWID item twice (not a list NVIDIA writes)", append(nvOpaque(fwid), nvOpaque(fwid)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustParse(t)(report(t, nonce, digest, tc.opaque, dev))
			_, err := spdm.Verify(r, chain, p.pool(), spdm.Options{At: at})
			if err == nil {
				t.Fatal("a report without its certificate's firmware verified")
			}
			if c := code(t, err); c != spdm.ErrFWID {
				t.Fatalf("%v: %s, want %s", err, c, spdm.ErrFWID)
			}
		})
	}
	// A certificate that names no firmware, and a report that names none:
	// nothing to bind, accepted.
	bare := []*x509.Certificate{p.leaf(t, &dev.PublicKey, long, forever, nil), p.root}
	if _, err := spdm.Verify(mustParse(t)(report(t, nonce, digest, driverOnly, dev)), bare, p.pool(), spdm.Options{At: at}); err != nil {
		t.Fatal(err)
	}
}

// Finding 8: a nil certificate in the chain (Verify is public; a caller
// that builds a chain by hand) panicked. It is refused, naming where.
func TestAttackNilCertificate(t *testing.T) {
	req, resp := sample(t)
	chain := sampleChain(t)
	for _, c := range [][]*x509.Certificate{{nil}, {chain[0], nil, chain[2], chain[3]}} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			_, err := spdm.Verify(mustParse(t)(req, resp), c, spdm.Roots(), spdm.Options{At: at})
			if err == nil || code(t, err) != spdm.ErrChain || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("%v", err)
			}
		}()
	}
}

// Finding 9: the signing certificate could be a CA. NVIDIA's leaves are
// not (the sample's "GSP FMC LF" has no basic constraints) and its CAs
// carry no digitalSignature, so only a CA whose key usage is absent or
// includes digitalSignature got through; such a certificate's key
// certifies other keys and is not the device's attestation key.
func TestAttackCAAsTheDeviceKey(t *testing.T) {
	p := newPKI(t, long, forever)
	dev := key(t, elliptic.P384())
	var nonce [32]byte
	for _, ku := range []x509.KeyUsage{0, x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign} {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "a CA posing as a device"},
			NotBefore: long, NotAfter: forever, IsCA: true, BasicConstraintsValid: true, KeyUsage: ku,
		}
		ca := sign(t, tmpl, p.root, &dev.PublicKey, p.rootKey)
		r := mustParse(t)(report(t, nonce, [][]byte{make([]byte, 48)}, nil, dev))
		_, err := spdm.Verify(r, []*x509.Certificate{ca, p.root}, p.pool(), spdm.Options{At: at})
		if err == nil {
			t.Fatalf("key usage %v: a CA certificate signed the report", ku)
		}
		if c := code(t, err); c != spdm.ErrKey {
			t.Fatalf("%v: %s, want %s", err, c, spdm.ErrKey)
		}
	}
	// The sample's root offered as the device's certificate: refused.
	req, resp := sample(t)
	chain := sampleChain(t)
	if _, err := spdm.Verify(mustParse(t)(req, resp), chain[len(chain)-1:], spdm.Roots(), spdm.Options{At: at}); err == nil {
		t.Fatal("NVIDIA's root as the device certificate verified")
	}
}

// Pinned: time at its edges. A certificate is valid at its NotAfter and
// NotBefore (RFC 5280: inclusive) and not a nanosecond outside; a zero
// time is refused.
func TestAttackTimeEdges(t *testing.T) {
	p := newPKI(t, long, forever)
	dev := key(t, elliptic.P384())
	nb := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	na := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	chain := []*x509.Certificate{p.leaf(t, &dev.PublicKey, nb, na, nil), p.root}
	var nonce [32]byte
	r := mustParse(t)(report(t, nonce, [][]byte{make([]byte, 48)}, nil, dev))
	for _, tc := range []struct {
		at   time.Time
		want spdm.Code
	}{
		{nb, ""}, {na, ""},
		{nb.Add(-time.Nanosecond), spdm.ErrExpired}, {na.Add(time.Nanosecond), spdm.ErrExpired},
		{time.Time{}, spdm.ErrOptions},
	} {
		_, err := spdm.Verify(r, chain, p.pool(), spdm.Options{At: tc.at})
		if tc.want == "" {
			if err != nil {
				t.Errorf("at %s: %v", tc.at, err)
			}
			continue
		}
		if err == nil || code(t, err) != tc.want {
			t.Errorf("at %s: %v, want %s", tc.at, err, tc.want)
		}
	}
}

// Pinned: a chain of thousands of certificates is refused, and fast,
// in PEM and in DER.
func TestAttackHugeChain(t *testing.T) {
	leaf := sampleChain(t)[0]
	var der, pemb []byte
	for len(der)+len(leaf.Raw) <= spdm.MaxChain {
		der = append(der, leaf.Raw...)
	}
	for len(pemb) < spdm.MaxChain-2048 {
		pemb = append(pemb, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})...)
	}
	for name, b := range map[string][]byte{"der": der, "pem": pemb} {
		start := time.Now()
		_, err := spdm.ParseChain(b)
		if err == nil || code(t, err) != spdm.ErrTooLarge {
			t.Errorf("%s: %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
	if _, err := spdm.ParseChain(append(pemb, pemb...)); err == nil || code(t, err) != spdm.ErrTooLarge {
		t.Errorf("over MaxChain: %v", err)
	}
}

// Pinned: the request's nonce is the policy's only when it is exactly
// it: a prefix, a longer value, an empty one are refused; upper-case hex
// in a measurement policy matches, a value that is not hex never does.
func TestAttackNonceAndPolicyEdges(t *testing.T) {
	req, resp := sample(t)
	chain := sampleChain(t)
	n, _ := hex.DecodeString(sampleNonce)
	for _, bad := range [][]byte{{}, n[:31], append(append([]byte{}, n...), 0), append(append([]byte{}, n...), n...)} {
		_, err := spdm.Verify(mustParse(t)(req, resp), chain, spdm.Roots(), spdm.Options{At: at, ExpectedNonce: bad})
		if err == nil || code(t, err) != spdm.ErrNonce {
			t.Errorf("nonce of %d bytes: %v", len(bad), err)
		}
	}
	r := mustParse(t)(req, resp)
	res, err := spdm.Verify(r, chain, spdm.Roots(), spdm.Options{At: at})
	if err != nil {
		t.Fatal(err)
	}
	d := res.Measurements[1]
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{d.Digest, true}, {strings.ToUpper(d.Digest), true},
		{d.Digest[:len(d.Digest)-2], false}, {d.Digest + "00", false},
		{" " + d.Digest, false}, {"", false},
	} {
		_, err := spdm.Verify(r, chain, spdm.Roots(), spdm.Options{At: at, AllowedMeasurements: map[uint8][]string{d.Index: {tc.v}}})
		if (err == nil) != tc.ok {
			t.Errorf("policy %q: %v", tc.v, err)
		}
	}
}

// Pinned: a response of the largest size, every block at its largest,
// parses in well under a second, and a lying length anywhere is an
// error naming its offset, never a panic.
func TestAttackLargeResponse(t *testing.T) {
	var nonce [32]byte
	var digests [][]byte
	for i := 0; i < 15; i++ {
		digests = append(digests, bytes.Repeat([]byte{byte(i)}, 60000))
	}
	dev := key(t, elliptic.P384())
	req, resp := report(t, nonce, digests, nil, dev)
	start := time.Now()
	if _, err := spdm.Parse(req, resp); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %s", d)
	}
	// Every 3-byte length in the header at its largest.
	bad := append([]byte{}, resp...)
	bad[5], bad[6], bad[7] = 0xFF, 0xFF, 0xFF
	if _, err := spdm.Parse(req, bad); err == nil || code(t, err) != spdm.ErrMalformed || !strings.Contains(err.Error(), "offset") {
		t.Errorf("%v", err)
	}
}
