package evidence_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sevabi "github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"

	"github.com/google/go-tdx-guest/abi"
	pb "github.com/google/go-tdx-guest/proto/tdx"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/reject"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// sample is one piece of real evidence and what it needs to verify.
type sample struct {
	name   string
	file   string
	certs  []string
	at     time.Time
	kind   evidence.Kind
	signer string
	debug  bool // the sample's guest allows debugging: admitted only by a policy that allows it
}

// The real samples (testdata/README.md says where each comes from):
// each verifies under its own chain at a time inside its validity.
var samples = []sample{
	{"snp-v2-milan-vcek (go-sev-guest)", "attestation.bin", []string{"vcek.testcer"}, at("2024-06-01T00:00:00Z"), evidence.SNP, "VCEK", true},
	{"snp-v2-milan-vcek (trustee)", "test-report.bin", []string{"test-vcek.der"}, at("2024-06-01T00:00:00Z"), evidence.SNP, "VCEK", false},
	{"snp-v3-milan-vlek (trustee)", "test-vlek-report.bin", []string{"test-vlek.der"}, at("2025-06-01T00:00:00Z"), evidence.SNP, "VLEK", false},
	{"tdx-v4 (trustee)", "tdx_quote_4.dat", nil, at("2023-06-01T00:00:00Z"), evidence.TDX, "PCK", true},
	{"tdx-v4 SPR E4 (go-tdx-guest)", "tdx_prod_quote_SPR_E4.dat", nil, at("2024-06-01T00:00:00Z"), evidence.TDX, "PCK", false},
	{"tdx-v4 cos-113 (go-tdx-guest)", "cos-113-tdx-quote.dat", nil, at("2025-01-01T00:00:00Z"), evidence.TDX, "PCK", false},
	{"nvidia-hopper-spdm (trustee)", "../spdm/testdata/hopperAttestationReport.txt", []string{"../spdm/testdata/hopper_cert_chain_case1.txt"}, at("2024-06-01T00:00:00Z"), evidence.SPDM, "device", false},
}

func (s sample) options(t testing.TB) evidence.Options {
	o := evidence.Options{At: s.at, Policy: evidence.Policy{AllowDebug: s.debug}}
	for _, c := range s.certs {
		o.Certs = append(o.Certs, read(t, c))
	}
	return o
}

// TestSamplesVerify: every real sample verifies under its correct
// chain, and says what it is.
func TestSamplesVerify(t *testing.T) {
	for _, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			r, err := evidence.Verify(read(t, s.file), s.options(t))
			if err != nil {
				t.Fatal(err)
			}
			ok := r.Kind == s.kind && r.Signer == s.signer && r.Debug == s.debug && len(r.NotChecked) > 0
			if s.kind == evidence.SPDM {
				ok = ok && len(r.Measurements) == 64 && len(r.ReportData) == 64 && len(r.Chain) == 5 && r.Firmware != ""
			} else {
				ok = ok && len(r.Measurement) == 96 && len(r.ReportData) == 128 && len(r.Chain) == 3
			}
			if !ok {
				t.Fatalf("%+v", *r)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// flip returns b with bit 0 of byte off inverted.
func flip(b []byte, off int) []byte {
	c := bytes.Clone(b)
	c[off] ^= 1
	return c
}

// SEV-SNP report offsets (AMD SEV-SNP ABI, table "ATTESTATION_REPORT").
const (
	snpPolicy      = 0x08
	snpReportData  = 0x50
	snpMeasurement = 0x90
	snpReportedTCB = 0x180
	snpSignature   = 0x2A0
)

// TDX quote v4 offsets: a 48-byte header, then the TD quote body.
const (
	tdxTeeTCBSVN  = 48
	tdxTdAttrs    = 48 + 120
	tdxMrTd       = 48 + 136
	tdxReportData = 48 + 520
	tdxSignature  = 48 + 584 + 4
)

// TestMutationsRefused: each change to a sample, or to what it is
// verified against, is refused with the code that names it.
func TestMutationsRefused(t *testing.T) {
	milan := samples[1]
	vlek := samples[2]
	tdx := samples[3]
	gpu := samples[6]
	bigPolicy := func(p evidence.Policy) func(*evidence.Options) {
		return func(o *evidence.Options) { p.AllowDebug = o.Policy.AllowDebug; o.Policy = p }
	}
	noDebug := func(o *evidence.Options) { o.Policy.AllowDebug = false }
	one := 1
	cases := []struct {
		name string
		s    sample
		mut  func([]byte) []byte
		opt  func(*evidence.Options)
		code reject.Code
	}{
		{"snp report_data bit", milan, func(b []byte) []byte { return flip(b, snpReportData) }, nil, reject.EvidenceSignature},
		{"snp measurement bit", milan, func(b []byte) []byte { return flip(b, snpMeasurement+47) }, nil, reject.EvidenceSignature},
		{"snp policy debug bit", milan, func(b []byte) []byte { c := bytes.Clone(b); c[snpPolicy+2] ^= 1 << 3; return c }, nil, reject.EvidenceSignature},
		{"snp reported tcb", milan, func(b []byte) []byte { return flip(b, snpReportedTCB+7) }, nil, reject.EvidenceSignature},
		{"snp signature", milan, func(b []byte) []byte { return flip(b, snpSignature+10) }, nil, reject.EvidenceSignature},
		{"snp truncated", milan, func(b []byte) []byte { return b[:1000] }, nil, reject.EvidenceMalformed},
		{"snp cert table garbage", milan, func(b []byte) []byte { return append(bytes.Clone(b), 1, 2, 3) }, nil, reject.EvidenceMalformed},
		{"snp milan against genoa", milan, nil, func(o *evidence.Options) { o.Product = "Genoa" }, reject.EvidenceChain},
		{"snp milan against turin", milan, nil, func(o *evidence.Options) { o.Product = "Turin" }, reject.EvidenceChain},
		{"snp unknown product", milan, nil, func(o *evidence.Options) { o.Product = "Naples" }, reject.EvidenceUnsupported},
		{"snp vcek report, vlek given", milan, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "test-vlek.der")} }, reject.EvidenceCert},
		{"snp vlek report, vcek given", vlek, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "test-vcek.der")} }, reject.EvidenceCert},
		{"snp no certificate", milan, nil, func(o *evidence.Options) { o.Certs = nil }, reject.EvidenceCert},
		{"snp certificate garbage", milan, nil, func(o *evidence.Options) { o.Certs = [][]byte{[]byte("not a certificate")} }, reject.EvidenceCert},
		{"snp another chip's vcek", milan, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "vcek.testcer")} }, reject.EvidenceSignature},
		{"snp invalid vcek (legacy)", milan, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "test-vcek-invalid-legacy.der")} }, reject.EvidenceChain},
		{"snp invalid vcek (new)", milan, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "test-vcek-invalid-new.der")} }, reject.EvidenceChain},
		{"snp expired", milan, nil, func(o *evidence.Options) { o.At = at("2031-01-01T00:00:00Z") }, reject.EvidenceExpired},
		{"snp not yet valid", milan, nil, func(o *evidence.Options) { o.At = at("2022-01-01T00:00:00Z") }, reject.EvidenceExpired},
		{"snp vlek expired", vlek, nil, func(o *evidence.Options) { o.At = at("2026-01-01T00:00:00Z") }, reject.EvidenceExpired},
		{"snp policy measurement", milan, nil, bigPolicy(evidence.Policy{Measurements: []string{strings.Repeat("00", 48)}}), reject.EvidenceMeasurement},
		{"snp policy report_data", milan, nil, bigPolicy(evidence.Policy{ReportData: strings.Repeat("ab", 64)}), reject.EvidenceReportData},
		{"snp policy host_data", milan, nil, bigPolicy(evidence.Policy{HostData: strings.Repeat("ab", 32)}), reject.EvidenceHostData},
		{"snp policy tcb", milan, nil, bigPolicy(evidence.Policy{MinTCB: &evidence.TCB{SNP: 127}}), reject.EvidenceTCB},
		{"snp policy version", milan, nil, bigPolicy(evidence.Policy{MinVersion: 3}), reject.EvidenceVersion},
		{"snp policy vmpl", milan, nil, bigPolicy(evidence.Policy{VMPL: &one}), reject.EvidenceVMPL},
		{"snp debug forbidden", samples[0], nil, noDebug, reject.EvidenceDebug},
		{"tdx debug forbidden", tdx, nil, noDebug, reject.EvidenceDebug},
		{"tdx report_data bit", tdx, func(b []byte) []byte { return flip(b, tdxReportData) }, nil, reject.EvidenceSignature},
		{"tdx mrtd bit", tdx, func(b []byte) []byte { return flip(b, tdxMrTd) }, nil, reject.EvidenceSignature},
		{"tdx debug attribute", tdx, func(b []byte) []byte { return flip(b, tdxTdAttrs) }, nil, reject.EvidenceSignature},
		{"tdx tcb svn", tdx, func(b []byte) []byte { return flip(b, tdxTeeTCBSVN) }, nil, reject.EvidenceSignature},
		{"tdx signature", tdx, func(b []byte) []byte { return flip(b, tdxSignature+3) }, nil, reject.EvidenceSignature},
		{"tdx truncated", tdx, func(b []byte) []byte { return b[:700] }, nil, reject.EvidenceMalformed},
		{"tdx v5", tdx, func(b []byte) []byte { return read(t, "tdx_quote_5.dat") }, nil, reject.EvidenceUnsupported},
		{"tdx another root", tdx, func(b []byte) []byte { return withForeignChain(t, b) }, nil, reject.EvidenceChain},
		{"tdx expired", tdx, nil, func(o *evidence.Options) { o.At = at("2040-01-01T00:00:00Z") }, reject.EvidenceExpired},
		{"tdx policy measurement", tdx, nil, bigPolicy(evidence.Policy{Measurements: []string{strings.Repeat("00", 48)}}), reject.EvidenceMeasurement},
		{"tdx policy report_data", tdx, nil, bigPolicy(evidence.Policy{ReportData: strings.Repeat("ab", 64)}), reject.EvidenceReportData},
		{"tdx policy mr_config_id", tdx, nil, bigPolicy(evidence.Policy{HostData: strings.Repeat("ab", 48)}), reject.EvidenceHostData},
		{"tdx policy tcb svn", tdx, nil, bigPolicy(evidence.Policy{MinTeeTCBSVN: strings.Repeat("ff", 16)}), reject.EvidenceTCB},
		{"tdx policy version", tdx, nil, bigPolicy(evidence.Policy{MinVersion: 5}), reject.EvidenceVersion},
		{"gpu signature", gpu, func(b []byte) []byte { c := bytes.Clone(b); c[len(c)-10] ^= 1; return c }, nil, reject.EvidenceSignature},
		{"gpu measurement", gpu, func(b []byte) []byte { c := bytes.Clone(b); c[110] = "01"[b2i(c[110] == '0')]; return c }, nil, reject.EvidenceSignature},
		{"gpu truncated", gpu, func(b []byte) []byte { return b[:len(b)/2] }, nil, reject.EvidenceMalformed},
		{"gpu not hex", gpu, func(b []byte) []byte { c := bytes.Clone(b); c[100] = 'x'; return c }, nil, reject.EvidenceMalformed},
		{"gpu no chain", gpu, nil, func(o *evidence.Options) { o.Certs = nil }, reject.EvidenceCert},
		{"gpu a cpu's chain", gpu, nil, func(o *evidence.Options) { o.Certs = [][]byte{read(t, "ask_ark_milan.pem")} }, reject.EvidenceChain},
		{"gpu expired", gpu, nil, func(o *evidence.Options) { o.At = at("2019-01-01T00:00:00Z") }, reject.EvidenceExpired},
		{"gpu nonce", gpu, nil, bigPolicy(evidence.Policy{ReportData: strings.Repeat("00", 32)}), reject.EvidenceReportData},
		{"gpu measurement policy", gpu, nil, bigPolicy(evidence.Policy{GPUMeasurements: map[string][]string{"1": {strings.Repeat("ff", 48)}}}), reject.EvidenceMeasurement},
		{"gpu measurement policy index", gpu, nil, bigPolicy(evidence.Policy{GPUMeasurements: map[string][]string{"x": {strings.Repeat("00", 48)}}}), reject.Invalid},
		{"neither kind", tdx, func(b []byte) []byte { return make([]byte, 2000) }, nil, reject.EvidenceUnsupported},
		{"too large", tdx, func(b []byte) []byte { return make([]byte, 10<<20) }, nil, reject.EvidenceTooLarge},
		{"no time", tdx, nil, func(o *evidence.Options) { o.At = time.Time{} }, reject.Invalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := read(t, c.s.file)
			if c.mut != nil {
				b = c.mut(b)
			}
			o := c.s.options(t)
			if c.opt != nil {
				c.opt(&o)
			}
			r, err := evidence.Verify(b, o)
			if got := reject.CodeOf(err); got != c.code {
				t.Fatalf("code %q (%v), want %q; result %+v", got, err, c.code, r)
			}
			var re *reject.Error
			if !errors.As(err, &re) || re.Where == "" {
				t.Fatalf("the refusal names no place: %v", err)
			}
		})
	}
}

// TestPolicyAdmits: a policy the samples meet admits them (the checks
// above fail for their own reasons, not for any policy at all).
func TestPolicyAdmits(t *testing.T) {
	for _, s := range samples {
		o := s.options(t)
		r, err := evidence.Verify(read(t, s.file), o)
		if err != nil {
			t.Fatal(err)
		}
		o.Policy = evidence.Policy{AllowDebug: s.debug, Measurements: []string{strings.Repeat("00", 48), r.Measurement}, ReportData: r.ReportData, HostData: r.HostData, MinVersion: r.Version}
		switch s.kind {
		case evidence.SPDM:
			first := strings.SplitN(r.Measurements[0], ":", 2)
			o.Policy = evidence.Policy{ReportData: r.ReportData, GPUMeasurements: map[string][]string{first[0]: {strings.Repeat("00", 48), first[1]}}}
		case evidence.SNP:
			o.Policy.VMPL = r.VMPL
			o.Policy.MinTCB = &evidence.TCB{Bootloader: 1}
		default:
			o.Policy.MinTeeTCBSVN = strings.Repeat("00", 16)
		}
		if _, err := evidence.Verify(read(t, s.file), o); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
}

// withForeignChain replaces the quote's PCK chain by a chain of the
// same shape under a root that is not Intel's.
func withForeignChain(t testing.TB, b []byte) []byte {
	q, err := abi.QuoteToProto(b)
	if err != nil {
		t.Fatal(err)
	}
	quote := q.(*pb.QuoteV4)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var chain []byte
	var parent *x509.Certificate
	for i, cn := range []string{"Intel SGX Root CA", "Intel SGX PCK Platform CA", "Intel SGX PCK Certificate"} {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: cn},
			NotBefore: at("2020-01-01T00:00:00Z"), NotAfter: at("2030-01-01T00:00:00Z"), IsCA: i < 2, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		parent, _ = x509.ParseCertificate(der)
		chain = append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), chain...)
	}
	d := quote.SignedData.CertificationData.QeReportCertificationData.PckCertificateChainData
	if len(chain) > len(d.PckCertChain) {
		t.Fatalf("the foreign chain is longer (%d bytes) than the quote's (%d)", len(chain), len(d.PckCertChain))
	}
	// The same length, so that every size in the quote stays true.
	d.PckCertChain = append(chain, bytes.Repeat([]byte("\n"), len(d.PckCertChain)-len(chain))...)
	out, err := abi.QuoteToAbiBytes(quote)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParsePolicy(t *testing.T) {
	good := `{"measurements":["` + strings.Repeat("0a", 48) + `"],"min_tcb":{"bl":3,"tee":0,"snp":8,"ucode":115},"vmpl":0,"report_data":"` + strings.Repeat("00", 64) + `"}`
	if _, err := evidence.ParsePolicy([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"measurement":[]}`, `{"measurements":["zz"]}`, `{"measurements":["00"]}`, `{"vmpl":4}`,
		`{"report_data":"00"}`, `{"host_data":"` + strings.Repeat("00", 40) + `"}`, `{} {}`, `[`, `{"min_tcb":{"bl":300}}`,
	} {
		if _, err := evidence.ParsePolicy([]byte(bad)); reject.CodeOf(err) == "" {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// FuzzVerify: any bytes, as an SEV-SNP report (with the sample's VCEK)
// or a TDX quote, are verified or refused with a code; never a panic.
func FuzzVerify(f *testing.F) {
	for _, s := range samples {
		f.Add(read(f, s.file))
	}
	f.Add(read(f, "tdx_quote_5.dat"))
	vcek := read(f, "test-vcek.der")
	when := at("2024-06-01T00:00:00Z")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := evidence.Verify(b, evidence.Options{At: when, Certs: [][]byte{vcek}})
		if err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
	})
}

// FuzzParsePolicy: a policy file is parsed or refused, never a panic.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"measurements":["` + strings.Repeat("0a", 48) + `"],"vmpl":0}`))
	f.Add([]byte(`{"min_tcb":{"bl":1,"tee":2,"snp":3,"ucode":4},"allow_debug":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := evidence.ParsePolicy(b); err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
	})
}

// BenchmarkVerify: one verification of each sample kind, chains and
// roots cached (the goal: at most 5 ms each on one core).
func BenchmarkVerify(b *testing.B) {
	for _, s := range samples[1:] {
		if s.name == samples[5].name {
			continue
		}
		raw, o := read(b, s.file), s.options(b)
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := evidence.Verify(raw, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIntelRootPinned: the bundled Intel root is the one the spec names
// by its fingerprint.
func TestIntelRootPinned(t *testing.T) {
	c, err := evidence.IntelRoot()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(c.Raw)); got != "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3" {
		t.Fatalf("the bundled Intel root is %s", got)
	}
	spec, err := os.ReadFile("../docs/spec/evidence.md")
	if err != nil || !bytes.Contains(spec, []byte("44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3")) {
		t.Fatalf("docs/spec/evidence.md does not name the root's fingerprint: %v", err)
	}
}

// TestOfflineKDS: a VCEK that neither the report nor --cert carries is
// read from a directory laid out as AMD's KDS (the path of the URL that
// names the chip and its TCB), and only the VCEK: the chain is still the
// bundled one.
func TestOfflineKDS(t *testing.T) {
	s := samples[1]
	raw := read(t, s.file)
	rep, err := sevabi.ReportToProto(raw)
	if err != nil {
		t.Fatal(err)
	}
	url := kds.VCEKCertURL("Milan", rep.GetChipId(), kds.TCBVersion(rep.GetReportedTcb()))
	rel, ok := strings.CutPrefix(url, "https://kdsintf.amd.com/")
	if !ok {
		t.Fatalf("a KDS URL %s", url)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, read(t, "test-vcek.der"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.Verify(raw, evidence.Options{At: s.at, KDS: dir}); err != nil {
		t.Fatalf("from the offline KDS store: %v", err)
	}
	if _, err := evidence.Verify(raw, evidence.Options{At: s.at, KDS: t.TempDir()}); reject.CodeOf(err) != reject.EvidenceCert {
		t.Fatalf("an empty store: %v", err)
	}
}
