package tee

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/reject"
)

func key(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSoftware: the software provider's evidence says software, is
// refused by a verifier that did not allow it, and, allowed, verifies
// with the binding and the SHA-384 of the running executable.
func TestSoftware(t *testing.T) {
	k := key(t)
	s := &Software{Key: k, Now: func() time.Time { return at("2024-06-01T00:00:00Z") }}
	if p := s.Probe(); !p.Available || p.Reason != "software-grounded: for tests and wiring only, no hardware vouches for it" {
		t.Fatalf("probe: %+v", p)
	}
	data := binding()
	ev, err := s.Evidence(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Software || ev.Provider != "software" || ev.Platform != "software" {
		t.Fatalf("evidence: %+v", ev)
	}
	o := evidence.Options{At: at("2024-06-01T00:00:00Z")}
	if _, err := evidence.Verify(ev.Report, o); reject.CodeOf(err) != reject.EvidenceSoftware {
		t.Fatalf("verified by default: %v; want evidence-software", err)
	}

	exe, err := os.ReadFile(must(os.Executable()))
	if err != nil {
		t.Fatal(err)
	}
	m := sha512.Sum384(exe)
	o.AllowSoftware = true
	o.Policy = evidence.Policy{ReportData: hex.EncodeToString(data[:]), Measurements: []string{hex.EncodeToString(m[:])}}
	r, err := evidence.Verify(ev.Report, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Software || r.Signer != "software key "+hex.EncodeToString(k.Public().(ed25519.PublicKey)) {
		t.Fatalf("result: %+v", r)
	}
	sr, err := evidence.ParseSoftware(ev.Report)
	if err != nil || !sr.Time.Equal(at("2024-06-01T00:00:00Z")) {
		t.Fatalf("time: %v, %v", sr, err)
	}

	given := &Software{Key: k, Measurement: bytes.Repeat([]byte{9}, 48)}
	ev, err = given.Evidence(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	if sr, err := evidence.ParseSoftware(ev.Report); err != nil || !bytes.Equal(sr.Measurement[:], given.Measurement) {
		t.Fatalf("measurement: %v, %v", sr, err)
	}
	if _, err := (&Software{Key: k, Measurement: []byte{1}}).Evidence(context.Background(), data); err == nil || !strings.Contains(err.Error(), "48 bytes") {
		t.Fatalf("a short measurement: %v", err)
	}
}

// TestSoftwareZero: the zero provider has no key and gives nothing.
func TestSoftwareZero(t *testing.T) {
	var s Software
	if p := s.Probe(); p.Available {
		t.Fatalf("probe: %+v", p)
	}
	if _, err := s.Evidence(context.Background(), binding()); errs.Of(err) != errs.Unavailable {
		t.Fatalf("evidence: %v", err)
	}
	if _, err := (&Software{Key: key(t)}).Evidence(canceled(), binding()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled context: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
