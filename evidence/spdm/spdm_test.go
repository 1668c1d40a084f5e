package spdm_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/evidence/spdm"
)

// at is a time the sample's chain is valid at.
var at = time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)

const (
	sampleNonce = "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb"
	sampleFWID  = "f5c384aebb579217a2c66b17ed0f28e6a9b8d639041acd7b4721cec004f7275494ba94bb5cdfdb3055ee051762b1f75d"
)

// sample is the trustee Hopper report: its request and its response.
func sample(t testing.TB) (req, resp []byte) {
	t.Helper()
	b, err := os.ReadFile("testdata/hopperAttestationReport.txt")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return raw[:spdm.RequestSize], raw[spdm.RequestSize:]
}

func sampleChain(t testing.TB) []*x509.Certificate {
	t.Helper()
	b, err := os.ReadFile("testdata/hopper_cert_chain_case1.txt")
	if err != nil {
		t.Fatal(err)
	}
	c, err := spdm.ParseChain(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// code is err's Code, checked to be reachable both ways.
func code(t *testing.T, err error) spdm.Code {
	t.Helper()
	var e *spdm.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not an *spdm.Error", err, err)
	}
	if !errors.Is(err, e.Code) {
		t.Fatalf("errors.Is(%v, %s) is false", err, e.Code)
	}
	return e.Code
}

func TestSampleVerifies(t *testing.T) {
	req, resp := sample(t)
	r, err := spdm.Parse(req, resp)
	if err != nil {
		t.Fatal(err)
	}
	if r.Request.Version != spdm.Version11 || r.Request.Operation != 0xFF || r.Request.Slot != 0 {
		t.Errorf("request %+v", r.Request)
	}
	if got := hex.EncodeToString(r.Request.Nonce[:]); got != sampleNonce {
		t.Errorf("request nonce %s", got)
	}
	if got := hex.EncodeToString(r.Response.Nonce[:]); got != "b4b8a06aaaa35542839388e159d447a5d6f6194998fd86513e2d591ccf640985" {
		t.Errorf("response nonce %s", got)
	}
	nonce, _ := hex.DecodeString(sampleNonce)
	res, err := spdm.Verify(r, sampleChain(t), spdm.Roots(), spdm.Options{At: at, ExpectedNonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Measurements) != 64 {
		t.Fatalf("%d measurements, want 64", len(res.Measurements))
	}
	for i, m := range res.Measurements {
		if int(m.Index) != i+1 || m.Type != spdm.MutableFirmware || m.Raw || len(m.Digest) != 96 {
			t.Errorf("measurement %d: %+v", i, m)
		}
	}
	if m := res.Measurements[1]; !strings.HasPrefix(m.Digest, "8048dfd18fe229bf16eb9d30cca0f11a24dafe6eb731de1462984645a0b189b7") {
		t.Errorf("measurement 2 is %s", m.Digest)
	}
	if hex.EncodeToString(res.Nonce[:]) != sampleNonce {
		t.Errorf("result nonce %x", res.Nonce)
	}
	if len(res.Chain) != 5 || res.Chain[4].Subject.CommonName != "NVIDIA Device Identity CA" || res.Chain[0].Subject.CommonName != "GH100 A01 GSP FMC LF" {
		t.Errorf("chain of %d", len(res.Chain))
	}
	n := res.NVIDIA
	if n == nil {
		t.Fatal("no NVIDIA opaque data")
	}
	if n.DriverVersion != "550.90.07" || n.VBIOSVersion != "96.00.9F.00.01" || hex.EncodeToString(n.FWID) != sampleFWID || len(n.Items) != 14 {
		t.Errorf("NVIDIA %q %q %x, %d items", n.DriverVersion, n.VBIOSVersion, n.FWID, len(n.Items))
	}
}

// TestParseReport reads the sample as NVIDIA's driver gives it, one
// buffer, and finds the same report.
func TestParseReport(t *testing.T) {
	req, resp := sample(t)
	r, err := spdm.ParseReport(append(append([]byte{}, req...), resp...))
	if err != nil {
		t.Fatal(err)
	}
	sreq, sresp := r.Signed()
	if !bytes.Equal(sreq, req) || !bytes.Equal(sresp, resp[:len(resp)-spdm.SignatureSize]) {
		t.Error("the signed bytes are not the request and the response less its signature")
	}
	if _, err := spdm.ParseReport(req[:10]); code(t, err) != spdm.ErrMalformed {
		t.Errorf("a 10-byte report: %v", err)
	}
}

// mutate returns copies of the sample's request and response changed by f.
func mutate(t *testing.T, f func(req, resp []byte) ([]byte, []byte)) ([]byte, []byte) {
	req, resp := sample(t)
	return f(bytes.Clone(req), bytes.Clone(resp))
}

func flip(off int, bit byte) func(req, resp []byte) ([]byte, []byte) {
	return func(req, resp []byte) ([]byte, []byte) { resp[off] ^= bit; return req, resp }
}

// The sample's response layout: the header is 8 bytes, 64 blocks of 55
// bytes, then the nonce at 3528, the opaque length at 3560, the opaque
// data at 3562 (422 bytes), the signature at 3984.
const (
	respNonce  = 8 + 64*55
	respOpaque = respNonce + 32 + 2
	respSig    = respOpaque + 422
)

// Every change to the sample is refused, with the code that says why.
func TestMutations(t *testing.T) {
	big := make([]byte, 10<<20)
	for _, tc := range []struct {
		name  string
		f     func(req, resp []byte) ([]byte, []byte)
		want  spdm.Code
		where string
	}{
		{"a bit of a measurement", flip(8+4+3+5, 0x10), spdm.ErrSignature, ""},
		{"a measurement's index", flip(8+55, 0x40), spdm.ErrSignature, ""},
		{"a measurement's type", flip(8+4, 0x02), spdm.ErrSignature, ""},
		{"a bit of the response's nonce", flip(respNonce+7, 0x01), spdm.ErrSignature, ""},
		{"a bit of the opaque data", flip(respOpaque+10, 0x01), spdm.ErrSignature, ""},
		{"a bit of the signature's r", flip(respSig+3, 0x80), spdm.ErrSignature, ""},
		{"a bit of the signature's s", flip(respSig+50, 0x01), spdm.ErrSignature, ""},
		{"a bit of the request's nonce", func(req, resp []byte) ([]byte, []byte) { req[20] ^= 1; return req, resp }, spdm.ErrSignature, ""},
		{"the slot's reserved bits of the response", flip(3, 0x40), spdm.ErrSignature, ""},
		{"the response truncated by a byte", func(req, resp []byte) ([]byte, []byte) { return req, resp[:len(resp)-1] }, spdm.ErrMalformed, "response offset 3984"},
		{"the response cut in its record", func(req, resp []byte) ([]byte, []byte) { return req, resp[:100] }, spdm.ErrMalformed, "response offset 5"},
		{"the response cut in its header", func(req, resp []byte) ([]byte, []byte) { return req, resp[:5] }, spdm.ErrMalformed, "response offset 5"},
		{"a byte after the signature", func(req, resp []byte) ([]byte, []byte) { return req, append(resp, 0) }, spdm.ErrMalformed, "response offset 4080"},
		{"the record one byte longer", flip(5, 0x01), spdm.ErrMalformed, "response offset 3528"},
		{"a block's size one longer", flip(8+2, 0x01), spdm.ErrMalformed, "response offset 13"},
		{"a DMTF value's size one shorter", func(req, resp []byte) ([]byte, []byte) { resp[8+5]--; return req, resp }, spdm.ErrMalformed, "response offset 13"},
		{"a block index twice", func(req, resp []byte) ([]byte, []byte) { resp[8+55] = 1; return req, resp }, spdm.ErrMalformed, "response offset 63"},
		{"a reserved block index", func(req, resp []byte) ([]byte, []byte) { resp[8] = 0; return req, resp }, spdm.ErrMalformed, "response offset 8"},
		{"a block in another specification", flip(8+1, 0x02), spdm.ErrMalformed, "response offset 9"},
		{"a block count one more", flip(4, 0x01), spdm.ErrMalformed, ""},
		{"opaque data over SPDM's limit", func(req, resp []byte) ([]byte, []byte) {
			binary.LittleEndian.PutUint16(resp[respNonce+32:], 1025)
			return req, resp
		}, spdm.ErrMalformed, "response offset 3560"},
		{"opaque data running past the end", func(req, resp []byte) ([]byte, []byte) {
			binary.LittleEndian.PutUint16(resp[respNonce+32:], 1000)
			return req, resp
		}, spdm.ErrMalformed, "response offset 3560"},
		{"a response of another code", flip(1, 0x01), spdm.ErrMalformed, "response offset 1"},
		{"a response of SPDM 1.2", func(req, resp []byte) ([]byte, []byte) { resp[0] = 0x12; return req, resp }, spdm.ErrVersion, "response offset 0"},
		{"a response for another slot", flip(3, 0x01), spdm.ErrMalformed, "response offset 3"},
		{"a request of SPDM 1.0", func(req, resp []byte) ([]byte, []byte) { req[0] = 0x10; return req, resp }, spdm.ErrVersion, "request offset 0"},
		{"a request of another code", func(req, resp []byte) ([]byte, []byte) { req[1] = 0xE1; return req, resp }, spdm.ErrMalformed, "request offset 1"},
		{"a request for no signature", func(req, resp []byte) ([]byte, []byte) { req[2] = 0; return req, resp }, spdm.ErrMalformed, "request offset 2"},
		{"a request with reserved attributes", func(req, resp []byte) ([]byte, []byte) { req[2] = 3; return req, resp }, spdm.ErrMalformed, "request offset 2"},
		{"a request for one index", func(req, resp []byte) ([]byte, []byte) { req[3] = 2; return req, resp }, spdm.ErrMalformed, "response offset 4"},
		{"a request for the count", func(req, resp []byte) ([]byte, []byte) { req[3] = 0; return req, resp }, spdm.ErrMalformed, "response offset 4"},
		{"a request for slot 9", func(req, resp []byte) ([]byte, []byte) { req[36] = 9; return req, resp }, spdm.ErrMalformed, "request offset 36"},
		{"a request truncated", func(req, resp []byte) ([]byte, []byte) { return req[:36], resp }, spdm.ErrMalformed, "request offset 36"},
		{"a request of 3 bytes", func(req, resp []byte) ([]byte, []byte) { return req[:3], resp }, spdm.ErrMalformed, "request offset 3"},
		{"a request too long", func(req, resp []byte) ([]byte, []byte) { return append(req, 0), resp }, spdm.ErrMalformed, "request"},
		{"requests swapped for another's", func(req, resp []byte) ([]byte, []byte) {
			other := bytes.Clone(req)
			copy(other[4:36], bytes.Repeat([]byte{0xAB}, 32))
			return other, resp
		}, spdm.ErrSignature, ""},
		{"a 10 MB response", func(req, resp []byte) ([]byte, []byte) { return req, big }, spdm.ErrTooLarge, "response"},
		{"a 10 MB request", func(req, resp []byte) ([]byte, []byte) { return big, resp }, spdm.ErrMalformed, "request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, resp := mutate(t, tc.f)
			r, err := spdm.Parse(req, resp)
			if err == nil {
				_, err = spdm.Verify(r, sampleChain(t), spdm.Roots(), spdm.Options{At: at})
			}
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
			if got := code(t, err); got != tc.want {
				t.Fatalf("%v: code %s, want %s", err, got, tc.want)
			}
			if e := err.(*spdm.Error); tc.where != "" && e.Where != tc.where {
				t.Errorf("%v: where %q, want %q", err, e.Where, tc.where)
			}
		})
	}
}

func TestParseReportTooLarge(t *testing.T) {
	_, err := spdm.ParseReport(make([]byte, 10<<20))
	if code(t, err) != spdm.ErrTooLarge || !strings.Contains(err.Error(), "10485760 bytes") {
		t.Errorf("%v", err)
	}
}

// pki makes P-384 certificates for tests: a root, and leaves under it.
type pki struct {
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
}

func newPKI(t testing.TB, notBefore, notAfter time.Time) *pki {
	t.Helper()
	k := key(t, elliptic.P384())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	return &pki{root: sign(t, tmpl, tmpl, &k.PublicKey, k), rootKey: k}
}

func key(t testing.TB, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub any, k *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// leaf is a device certificate for pub under p, valid from nb to na,
// naming the firmware fwid if it is not nil (the way NVIDIA's do).
func (p *pki) leaf(t testing.TB, pub any, nb, na time.Time, fwid []byte) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test device"},
		NotBefore: nb, NotAfter: na, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if fwid != nil {
		type fw struct {
			Alg    asn1.ObjectIdentifier
			Digest []byte
		}
		v, err := asn1.Marshal(struct {
			Version int
			Device  asn1.RawValue
			FWID    fw
		}{1, asn1.RawValue{FullBytes: []byte{0x30, 0}}, fw{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}, fwid}})
		if err != nil {
			t.Fatal(err)
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1}, Value: v}}
	}
	return sign(t, tmpl, p.root, pub, p.rootKey)
}

func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.root)
	return pool
}

// report builds a signed request and response the way a device does:
// the given blocks (index i+1, mutable firmware digests), the opaque
// data, signed by k.
func report(t testing.TB, nonce [32]byte, digests [][]byte, opaque []byte, k *ecdsa.PrivateKey) (req, resp []byte) {
	t.Helper()
	req = append([]byte{0x11, 0xE0, 0x01, 0xFF}, nonce[:]...)
	req = append(req, 0)
	var rec []byte
	for i, d := range digests {
		rec = append(rec, byte(i+1), 1)
		rec = binary.LittleEndian.AppendUint16(rec, uint16(3+len(d)))
		rec = append(rec, 0x01)
		rec = binary.LittleEndian.AppendUint16(rec, uint16(len(d)))
		rec = append(rec, d...)
	}
	resp = []byte{0x11, 0x60, 0, 0, byte(len(digests)), byte(len(rec)), byte(len(rec) >> 8), byte(len(rec) >> 16)}
	resp = append(resp, rec...)
	resp = append(resp, bytes.Repeat([]byte{0x5A}, 32)...)
	resp = binary.LittleEndian.AppendUint16(resp, uint16(len(opaque)))
	resp = append(resp, opaque...)
	h := sha512.New384()
	h.Write(req)
	h.Write(resp)
	r, s, err := ecdsa.Sign(rand.Reader, k, h.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	var sig [96]byte
	r.FillBytes(sig[:48])
	s.FillBytes(sig[48:])
	return req, append(resp, sig[:]...)
}

// nvOpaque is NVIDIA-style opaque data: a driver version and a FWID.
func nvOpaque(fwid []byte) []byte {
	var b []byte
	item := func(t uint16, v []byte) {
		b = binary.LittleEndian.AppendUint16(b, t)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
	}
	item(spdm.OpaqueDriverVersion, []byte("1.2.3\x00"))
	item(spdm.OpaqueFWID, fwid)
	return b
}

// A report built and signed here verifies under a root made here: the
// format checked is the one devices write, not only the sample's bytes;
// and each check of Verify refuses what it is for.
func TestVerify(t *testing.T) {
	req, resp := sample(t)
	nv, err := spdm.Parse(req, resp)
	if err != nil {
		t.Fatal(err)
	}
	chain := sampleChain(t)
	nonce, _ := hex.DecodeString(sampleNonce)
	yes, _ := hex.DecodeString(sampleFWID)
	no := bytes.Repeat([]byte{7}, 48)
	digest := bytes.Repeat([]byte{0xD1}, 48)

	long := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	forever := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPKI(t, long, forever)
	dev := key(t, elliptic.P384())
	var n32 [32]byte
	copy(n32[:], nonce)
	mine := func(k *ecdsa.PrivateKey, fwid []byte) *spdm.Report {
		q, s := report(t, n32, [][]byte{digest, digest}, nvOpaque(fwid), k)
		r, err := spdm.Parse(q, s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	good := mine(dev, yes)
	goodChain := []*x509.Certificate{p.leaf(t, &dev.PublicKey, long, forever, yes), p.root}
	expired := []*x509.Certificate{p.leaf(t, &dev.PublicKey, long, time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC), yes)}
	p256 := key(t, elliptic.P256())
	other := key(t, elliptic.P384())

	for _, tc := range []struct {
		name  string
		r     *spdm.Report
		chain []*x509.Certificate
		roots *x509.CertPool
		opts  spdm.Options
		want  spdm.Code // "" for accepted
	}{
		{"the sample", nv, chain, spdm.Roots(), spdm.Options{At: at}, ""},
		{"the sample with its nonce", nv, chain, spdm.Roots(), spdm.Options{At: at, ExpectedNonce: nonce}, ""},
		{"the sample without its root in the chain", nv, chain[:4], spdm.Roots(), spdm.Options{At: at}, ""},
		{"the sample before its intermediate was issued", nv, chain, spdm.Roots(), spdm.Options{At: time.Date(2021, 6, 1, 0, 0, 0, 0, time.UTC)}, spdm.ErrExpired},
		{"the sample before its leaf was issued", nv, chain, spdm.Roots(), spdm.Options{At: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)}, spdm.ErrExpired},
		{"no time", nv, chain, spdm.Roots(), spdm.Options{}, spdm.ErrOptions},
		{"no roots", nv, chain, nil, spdm.Options{At: at}, spdm.ErrOptions},
		{"no report", nil, chain, spdm.Roots(), spdm.Options{At: at}, spdm.ErrOptions},
		{"no chain", nv, nil, spdm.Roots(), spdm.Options{At: at}, spdm.ErrChain},
		{"the sample under another root", nv, chain, p.pool(), spdm.Options{At: at}, spdm.ErrChain},
		{"the sample missing an intermediate", nv, append([]*x509.Certificate{chain[0]}, chain[2:]...), spdm.Roots(), spdm.Options{At: at}, spdm.ErrChain},
		{"the sample's chain in reverse", nv, []*x509.Certificate{chain[4], chain[3], chain[2], chain[1], chain[0]}, spdm.Roots(), spdm.Options{At: at}, spdm.ErrKey},
		{"the sample, its leaf swapped for another key", nv, goodChain, p.pool(), spdm.Options{At: at}, spdm.ErrSignature},
		{"a leaf of ours under NVIDIA's root", good, goodChain, spdm.Roots(), spdm.Options{At: at}, spdm.ErrChain},
		{"the sample's nonce not the expected", nv, chain, spdm.Roots(), spdm.Options{At: at, ExpectedNonce: make([]byte, 32)}, spdm.ErrNonce},
		{"an expected nonce of 16 bytes", nv, chain, spdm.Roots(), spdm.Options{At: at, ExpectedNonce: nonce[:16]}, spdm.ErrNonce},
		{"the sample's measurements allowed", nv, chain, spdm.Roots(), spdm.Options{At: at, AllowedMeasurements: map[uint8][]string{
			1: {strings.Repeat("00", 48)},
			2: {"ff", strings.ToUpper("8048dfd18fe229bf16eb9d30cca0f11a24dafe6eb731de1462984645a0b189b77c4e4e17de727a5e19e3d07de51da338")},
		}}, ""},
		{"a measurement the policy does not allow", nv, chain, spdm.Roots(), spdm.Options{At: at, AllowedMeasurements: map[uint8][]string{
			2: {strings.Repeat("00", 48)},
		}}, spdm.ErrMeasurement},
		{"a measurement the policy requires absent", nv, chain, spdm.Roots(), spdm.Options{At: at, AllowedMeasurements: map[uint8][]string{
			65: {strings.Repeat("00", 48)},
		}}, spdm.ErrMeasurement},
		{"a policy with no value for an index", nv, chain, spdm.Roots(), spdm.Options{At: at, AllowedMeasurements: map[uint8][]string{1: nil}}, spdm.ErrMeasurement},
		{"ours", good, goodChain, p.pool(), spdm.Options{At: at, ExpectedNonce: nonce}, ""},
		{"ours after its leaf expired", good, expired, p.pool(), spdm.Options{At: at}, spdm.ErrExpired},
		{"ours signed by another key", mine(other, yes), goodChain, p.pool(), spdm.Options{At: at}, spdm.ErrSignature},
		{"ours naming other firmware than its certificate", mine(dev, no), goodChain, p.pool(), spdm.Options{At: at}, spdm.ErrFWID},
		{"ours naming firmware, its certificate none", good, []*x509.Certificate{p.leaf(t, &dev.PublicKey, long, forever, nil)}, p.pool(), spdm.Options{At: at}, spdm.ErrFWID},
		{"ours with a FWID of 20 bytes", mine(dev, no[:20]), goodChain, p.pool(), spdm.Options{At: at}, spdm.ErrFWID},
		{"ours with a P-256 key", good, []*x509.Certificate{p.leaf(t, &p256.PublicKey, long, forever, yes)}, p.pool(), spdm.Options{At: at}, spdm.ErrKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := spdm.Verify(tc.r, tc.chain, tc.roots, tc.opts)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if res == nil || len(res.Measurements) == 0 || len(res.Chain) < 2 {
					t.Fatalf("result %+v", res)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
			if got := code(t, err); got != tc.want {
				t.Fatalf("%v: code %s, want %s", err, got, tc.want)
			}
		})
	}
}

func TestParseChain(t *testing.T) {
	pemChain, err := os.ReadFile("testdata/hopper_cert_chain_case1.txt")
	if err != nil {
		t.Fatal(err)
	}
	certs := sampleChain(t)
	var der []byte
	for _, c := range certs {
		der = append(der, c.Raw...)
	}
	var many []byte
	for range spdm.MaxCerts + 1 {
		many = append(many, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[4].Raw})...)
	}
	withText := append([]byte("the chain:\n"), pemChain...)
	withText = append(withText, "\nend\n"...)
	for _, tc := range []struct {
		name string
		in   []byte
		n    int
		want spdm.Code
	}{
		{"the sample, PEM", pemChain, 5, ""},
		{"the sample, DER", der, 5, ""},
		{"the sample with text around it", withText, 5, ""},
		{"empty", nil, 0, spdm.ErrMalformed},
		{"garbage", []byte("not a certificate"), 0, spdm.ErrMalformed},
		{"DER truncated", der[:len(der)-1], 0, spdm.ErrMalformed},
		{"a private key block", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), 0, spdm.ErrMalformed},
		{"a certificate block of garbage", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 1, 2}}), 0, spdm.ErrMalformed},
		{"a broken block after a good one", append(bytes.Clone(pemChain), "\n-----BEGIN CERTIFICATE-----\nAAA"...), 0, spdm.ErrMalformed},
		{"17 certificates", many, 0, spdm.ErrTooLarge},
		{"a megabyte", make([]byte, 1<<20), 0, spdm.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spdm.ParseChain(tc.in)
			if tc.want != "" {
				if err == nil {
					t.Fatal("accepted")
				}
				if c := code(t, err); c != tc.want {
					t.Fatalf("%v: code %s, want %s", err, c, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n {
				t.Fatalf("%d certificates, want %d", len(got), tc.n)
			}
		})
	}
}

// Roots gives a new pool each time: what one caller adds is not
// trusted by the next.
func TestRootsIsolated(t *testing.T) {
	p := newPKI(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	dev := key(t, elliptic.P384())
	leaf := p.leaf(t, &dev.PublicKey, p.root.NotBefore, p.root.NotAfter, nil)
	r := spdm.Roots()
	r.AddCert(p.root)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: r, CurrentTime: at}); err != nil {
		t.Fatalf("the pool given did not take the root: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: spdm.Roots(), CurrentTime: at}); err == nil {
		t.Fatal("a root added to one pool is trusted by the next")
	}
}

// Parse copies what it keeps: bytes changed after it do not change the
// report, which still verifies.
func TestParseCopies(t *testing.T) {
	req, resp := sample(t)
	req, resp = bytes.Clone(req), bytes.Clone(resp)
	r, err := spdm.Parse(req, resp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range resp {
		resp[i] = 0
	}
	for i := range req {
		req[i] = 0
	}
	if _, err := spdm.Verify(r, sampleChain(t), spdm.Roots(), spdm.Options{At: at}); err != nil {
		t.Fatal(err)
	}
}

// Each code names the category the module's error map (internal/errs)
// reads from it.
func TestCategory(t *testing.T) {
	for c, want := range map[spdm.Code]string{
		spdm.ErrTooLarge: "limit", spdm.ErrOptions: "invalid", spdm.ErrMeasurement: "denied", spdm.ErrChain: "untrusted",
		spdm.ErrMalformed: "integrity", spdm.ErrVersion: "integrity", spdm.ErrExpired: "integrity", spdm.ErrKey: "integrity",
		spdm.ErrSignature: "integrity", spdm.ErrFWID: "integrity", spdm.ErrNonce: "integrity",
	} {
		if got := (&spdm.Error{Code: c}).Category(); got != want {
			t.Errorf("%s: category %s, want %s", c, got, want)
		}
	}
}

// A refusal keeps the error beneath it and names its code.
func TestErrorWraps(t *testing.T) {
	req, resp := sample(t)
	r, err := spdm.Parse(req, resp)
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t, at.AddDate(-1, 0, 0), at.AddDate(1, 0, 0))
	_, err = spdm.Verify(r, sampleChain(t), p.pool(), spdm.Options{At: at})
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) || !errors.Is(err, spdm.ErrChain) || errors.Is(err, spdm.ErrSignature) {
		t.Fatalf("%v does not wrap x509's refusal under its code", err)
	}
	if spdm.ErrChain.Error() != "spdm-chain" || spdm.MutableFirmware.String() != "mutable-firmware" || spdm.ValueType(9).String() != "type-9" {
		t.Error("names")
	}
}
