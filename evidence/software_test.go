package evidence_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/reject"
)

// softwareReport makes a software report with a fresh key, bound to
// data, measuring m.
func softwareReport(t testing.TB, data [64]byte, m [48]byte) ([]byte, ed25519.PublicKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := evidence.SignSoftware(key, data, m, at("2024-06-01T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	return b, pub
}

func binding() (d [64]byte, m [48]byte) {
	copy(d[:], bytes.Repeat([]byte{0xb1}, 64))
	m = sha512.Sum384([]byte("the executable"))
	return d, m
}

// TestSoftwareRefusedByDefault: a software report is never accepted by
// a verifier that did not ask for it: evidence-software, whatever the
// policy.
func TestSoftwareRefusedByDefault(t *testing.T) {
	d, m := binding()
	b, _ := softwareReport(t, d, m)
	if k, err := evidence.Detect(b); err != nil || k != evidence.KindSoftware {
		t.Fatalf("Detect = %q, %v; want software", k, err)
	}
	_, err := evidence.Verify(b, evidence.Options{At: at("2024-06-01T00:00:00Z"), Policy: evidence.Policy{AllowDebug: true}})
	if reject.CodeOf(err) != reject.EvidenceSoftware || !strings.Contains(err.Error(), "no hardware vouches for it") {
		t.Fatalf("got %v; want evidence-software", err)
	}
}

// TestSoftwareAllowed: allowed, it verifies, says it is software, names
// its key, and the policy's report_data and measurements apply.
func TestSoftwareAllowed(t *testing.T) {
	d, m := binding()
	b, pub := softwareReport(t, d, m)
	o := evidence.Options{At: at("2024-06-01T00:00:00Z"), AllowSoftware: true, Policy: evidence.Policy{
		ReportData:   hex.EncodeToString(d[:]),
		Measurements: []string{hex.EncodeToString(m[:])},
	}}
	r, err := evidence.Verify(b, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Software || r.Kind != evidence.KindSoftware || r.Signer != "software key "+hex.EncodeToString(pub) ||
		r.ReportData != hex.EncodeToString(d[:]) || r.Measurement != hex.EncodeToString(m[:]) ||
		len(r.NotChecked) == 0 || !strings.HasPrefix(r.NotChecked[0], "hardware: none") {
		t.Fatalf("result %+v", r)
	}

	for _, tc := range []struct {
		name   string
		policy evidence.Policy
		code   reject.Code
	}{
		{"another binding", evidence.Policy{ReportData: strings.Repeat("00", 64)}, reject.EvidenceReportData},
		{"another measurement", evidence.Policy{Measurements: []string{strings.Repeat("00", 48)}}, reject.EvidenceMeasurement},
		{"a newer version", evidence.Policy{MinVersion: 2}, reject.EvidenceVersion},
		{"a TCB", evidence.Policy{MinTCB: &evidence.TCB{}}, reject.EvidenceTCB},
		{"a VMPL", evidence.Policy{VMPL: new(int)}, reject.EvidenceVMPL},
		{"host data", evidence.Policy{HostData: strings.Repeat("00", 32)}, reject.EvidenceHostData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			o.Policy = tc.policy
			if _, err := evidence.Verify(b, o); reject.CodeOf(err) != tc.code {
				t.Fatalf("got %v; want %s", err, tc.code)
			}
		})
	}
}

// TestSoftwareTampered: every flipped bit after the magic is a bad
// signature (or, in the time's top bits, a time out of range); a
// truncated or extended report is malformed.
func TestSoftwareTampered(t *testing.T) {
	d, m := binding()
	b, _ := softwareReport(t, d, m)
	o := evidence.Options{At: at("2024-06-01T00:00:00Z"), AllowSoftware: true}
	for i := len(evidence.SoftwareMagic); i < len(b); i++ {
		for _, bit := range []byte{0x01, 0x80} {
			c := bytes.Clone(b)
			c[i] ^= bit
			_, err := evidence.Verify(c, o)
			code := reject.CodeOf(err)
			if code != reject.EvidenceSignature && !(i == 8+64+48 && code == reject.EvidenceMalformed) {
				t.Fatalf("bit %#x of byte %d flipped: %v; want evidence-signature", bit, i, err)
			}
		}
	}
	for _, c := range [][]byte{b[:len(b)-1], b[:evidence.SoftwareSize/2], b[:len(evidence.SoftwareMagic)], append(bytes.Clone(b), 0)} {
		if _, err := evidence.Verify(c, o); reject.CodeOf(err) != reject.EvidenceMalformed {
			t.Fatalf("%d bytes: %v; want evidence-malformed", len(c), err)
		}
	}
}

// TestSoftwareNotAHardwareKind: the magic is told apart from every
// real sample, and no real sample is taken for software.
func TestSoftwareNotAHardwareKind(t *testing.T) {
	for _, s := range samples {
		if k, err := evidence.Detect(read(t, s.file)); err != nil || k == evidence.KindSoftware {
			t.Errorf("%s: Detect = %q, %v", s.name, k, err)
		}
	}
}

// FuzzSoftware: the software parser and verifier refuse or accept,
// never panic, and every refusal has a code.
func FuzzSoftware(f *testing.F) {
	d, m := binding()
	b, _ := softwareReport(f, d, m)
	f.Add(b)
	f.Add(b[:100])
	f.Add([]byte(evidence.SoftwareMagic))
	o := evidence.Options{At: at("2024-06-01T00:00:00Z"), AllowSoftware: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := evidence.ParseSoftware(b); err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
		if _, err := evidence.Verify(b, o); err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
	})
}
