package attest

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

func testKey(t testing.TB, b byte) key.Private {
	k, err := key.FromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sample() Claim {
	zero := 0
	j := addr.Of([]byte("journal"))
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 123456789, time.UTC)
	return Claim{
		Unit: addr.Of([]byte("u")), Image: addr.Of([]byte("i")), Grants: addr.Of([]byte("g")),
		Decisions: addr.Of([]byte("d")), Receipt: addr.Of([]byte("r")), Journal: &j,
		Tier:     Tier{Required: tier.S2, Chosen: tier.S2, Reason: "a wasm unit runs at S2"},
		Executor: "wazero/v1.12.0",
		Hardware: Hardware{Host: Host{Name: "h", OS: "linux", Arch: "amd64"},
			Devices: []Device{{Class: device.CPU, Model: "AMD EPYC", Driver: "linux"}}},
		Outcome: Outcome{Status: Exited, ExitCode: &zero},
		Started: Time(t0), Ended: Time(t0.Add(time.Second)),
	}
}

func TestSealVerify(t *testing.T) {
	k := testKey(t, 1)
	a, err := Seal(sample(), k)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(a.Envelope), `{"claim":{"decisions":"b3:`) {
		t.Fatalf("envelope = %s", a.Envelope)
	}
	got, err := Verify(a.Envelope, key.NewTrust(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Addr != a.Addr || got.Addr != addr.Of(a.ClaimJCS) || *got.Claim.Outcome.ExitCode != 0 {
		t.Fatalf("verify: %+v", got)
	}
	again, _ := Seal(sample(), k)
	if !bytes.Equal(again.Envelope, a.Envelope) {
		t.Fatal("not deterministic")
	}
	got, err = Verify(a.Envelope, key.Trust{})
	if !errors.Is(err, reject.UntrustedKey) || got == nil {
		t.Fatalf("untrusted: %v", err)
	}
}

// s6Evidence makes c an S6 run with an SEV-SNP report cited.
func s6Evidence(c *Claim) *Evidence {
	c.Tier = Tier{Required: tier.S6, Chosen: tier.S6, Reason: "grant confidential"}
	return &Evidence{Provider: "configfs-tsm", Kind: "sev-snp", Report: addr.Of([]byte("report"))}
}

// TestEvidenceSealsV4: a claim with evidence is sealed as /4 and
// verifies; its binding leaves the evidence out, so sealing the evidence
// does not change the binding it carries, and any other member does.
func TestEvidenceSealsV4(t *testing.T) {
	k := testKey(t, 1)
	c := sample()
	e := s6Evidence(&c)
	b1, err := Binding(c, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	c.Evidence = e
	a, err := Seal(c, k)
	if err != nil {
		t.Fatal(err)
	}
	if a.Claim.Type != TypeV4 {
		t.Fatalf("type %s", a.Claim.Type)
	}
	got, err := Verify(a.Envelope, key.NewTrust(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := Binding(got.Claim, k.Public())
	if b1 != b2 {
		t.Fatal("the binding changed when the evidence was sealed in")
	}
	got.Claim.Notes = []string{"changed"}
	if b3, _ := Binding(got.Claim, k.Public()); b3 == b1 {
		t.Fatal("the binding does not cover the notes")
	}
	if b4, _ := Binding(c, key.Public{}); b4 == b1 {
		t.Fatal("the binding does not cover the signer")
	}
}

func TestValidate(t *testing.T) {
	one := 1
	tests := []struct {
		name string
		mut  func(*Claim)
		want reject.Code
	}{
		{"zero receipt", func(c *Claim) { c.Receipt = addr.Addr{} }, reject.MissingField},
		{"zero journal", func(c *Claim) { c.Journal = &addr.Addr{} }, reject.NonCanonical},
		{"below required", func(c *Claim) { c.Tier.Chosen = tier.S1 }, reject.Invalid},
		{"no reason", func(c *Claim) { c.Tier.Reason = "" }, reject.MissingField},
		{"no executor", func(c *Claim) { c.Executor = "" }, reject.MissingField},
		{"no os", func(c *Claim) { c.Hardware.Host.OS = "" }, reject.MissingField},
		{"bad class", func(c *Claim) { c.Hardware.Devices[0].Class = "cpu" }, reject.Invalid},
		{"no driver", func(c *Claim) { c.Hardware.Devices[0].Driver = "" }, reject.MissingField},
		{"bad status", func(c *Claim) { c.Outcome.Status = "fine" }, reject.Invalid},
		{"killed with code", func(c *Claim) { c.Outcome.Status = Killed; c.Outcome.ExitCode = &one }, reject.Invalid},
		{"exited without code", func(c *Claim) { c.Outcome.ExitCode = nil }, reject.Invalid},
		{"bad time", func(c *Claim) { c.Started = "yesterday" }, reject.Invalid},
		{"backwards", func(c *Claim) { c.Started, c.Ended = c.Ended, c.Started }, reject.Invalid},
		{"/1 citing a record", func(c *Claim) { c.Record = &RecordCite{Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))} }, reject.UnknownField},
		{"/1 with audit_prev", func(c *Claim) { a := addr.Of([]byte("a")); c.AuditPrev = &a }, reject.UnknownField},
		{"/2 with neither", func(c *Claim) { c.Type = TypeV2 }, reject.NonCanonical},
		{"/5", func(c *Claim) { c.Type = "sandbox.attestation/5" }, reject.Unrecognised},
		{"/4 without evidence", func(c *Claim) { c.Type = TypeV4 }, reject.NonCanonical},
		{"/3 with evidence", func(c *Claim) { c.Type = TypeV3; c.Evidence = s6Evidence(c) }, reject.UnknownField},
		{"/4 evidence without provider", func(c *Claim) { c.Type = TypeV4; c.Evidence = s6Evidence(c); c.Evidence.Provider = "" }, reject.MissingField},
		{"/4 evidence with a zero report", func(c *Claim) { c.Type = TypeV4; c.Evidence = s6Evidence(c); c.Evidence.Report = addr.Addr{} }, reject.MissingField},
		{"/4 software not said", func(c *Claim) { c.Type = TypeV4; c.Evidence = s6Evidence(c); c.Evidence.Kind = "software" }, reject.Invalid},
		{"/4 hardware said software", func(c *Claim) { c.Type = TypeV4; c.Evidence = s6Evidence(c); c.Evidence.Software = true }, reject.Invalid},
		{"/4 locality at S6", func(c *Claim) {
			c.Type = TypeV4
			c.Evidence = s6Evidence(c)
			c.Locality = &LocalityCite{Claim: addr.Of([]byte("l")), Region: "eu"}
		}, reject.Invalid},
		{"/4 locality without region", func(c *Claim) {
			c.Type = TypeV4
			c.Evidence = s6Evidence(c)
			c.Tier.Chosen, c.Tier.Required = tier.S7, tier.S7
			c.Locality = &LocalityCite{Claim: addr.Of([]byte("l"))}
		}, reject.MissingField},
		{"/3 with locality", func(c *Claim) { c.Type = TypeV3; c.Locality = &LocalityCite{Claim: addr.Of([]byte("l")), Region: "eu"} }, reject.UnknownField},
		{"/4 at S5", func(c *Claim) { c.Type = TypeV4; c.Evidence = s6Evidence(c); c.Tier.Chosen = tier.S5 }, reject.Invalid},
		{"/3 without jcp", func(c *Claim) { c.Type = TypeV3 }, reject.NonCanonical},
		{"/3 with a zero jcp", func(c *Claim) { c.Type = TypeV3; c.JCP = &addr.Addr{} }, reject.MissingField},
		{"/2 with jcp", func(c *Claim) { j := addr.Of([]byte("d")); c.Type = TypeV2; c.JCP = &j }, reject.UnknownField},
		{"/1 with jcp", func(c *Claim) { j := addr.Of([]byte("d")); c.JCP = &j }, reject.UnknownField},
		{"/2 with a zero head", func(c *Claim) { c.Type = TypeV2; c.Record = &RecordCite{Genesis: addr.Of([]byte("g"))} }, reject.MissingField},
	}
	for _, tc := range tests {
		c := sample()
		c.Type = Type
		tc.mut(&c)
		if err := c.Validate(); !errors.Is(err, tc.want) {
			t.Errorf("%s: Validate = %v, want %s", tc.name, err, tc.want)
		}
	}
	c := sample()
	c.Tier = Tier{Required: tier.S1, Chosen: tier.S0, Reason: "explicit"}
	c.Type = Type
	if err := c.Validate(); err != nil {
		t.Errorf("S0 for S1: %v", err)
	}
	// Two zero addresses: the first in the claim's order is named, every
	// time (it was a map's order).
	for range 50 {
		c := sample()
		c.Type = Type
		c.Grants, c.Receipt = addr.Addr{}, addr.Addr{}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "claim.grants") {
			t.Fatalf("grants and receipt zero: %v, want claim.grants named", err)
		}
	}
}

// A claim that cites a run record is sealed as /2 and verifies as /2.
func TestSealV2(t *testing.T) {
	k := testKey(t, 1)
	c := sample()
	c.Record = &RecordCite{Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))}
	a, err := Seal(c, k)
	if err != nil {
		t.Fatal(err)
	}
	if a.Claim.Type != TypeV2 || !bytes.Contains(a.ClaimJCS, []byte(`"record":{"genesis":"b3:`)) {
		t.Fatalf("%s", a.ClaimJCS)
	}
	v, err := Verify(a.Envelope, key.NewTrust(k.Public()))
	if err != nil || v.Claim.Record == nil || v.Claim.Record.Head != c.Record.Head {
		t.Fatal(err)
	}
	plain, err := Seal(sample(), k)
	if err != nil || plain.Claim.Type != Type {
		t.Fatal("a claim citing nothing is /1")
	}
}

func TestVerifyRefuses(t *testing.T) {
	k := testKey(t, 1)
	trust := key.NewTrust(k.Public())
	a, _ := Seal(sample(), k)
	env := string(a.Envelope)
	flip := []byte(env)
	i := strings.Index(env, `"signature":"`) + len(`"signature":"`)
	if flip[i] == 'A' {
		flip[i] = 'B'
	} else {
		flip[i] = 'A'
	}
	tests := []struct {
		name string
		in   string
		want reject.Code
	}{
		{"flipped signature", string(flip), reject.Signature},
		{"whitespace", env + "\n", reject.NonCanonical},
		{"truncated", env[:len(env)-5], reject.Truncated},
		{"unknown envelope field", strings.Replace(env, `"signature"`, `"sig":1,"signature"`, 1), reject.UnknownField},
		{"unknown claim field", strings.Replace(env, `"unit"`, `"unia":1,"unit"`, 1), reject.UnknownField},
		{"no signature", strings.Replace(env, `,"signature":"`+env[i:len(env)-2]+`"`, "", 1), reject.MissingField},
		{"padded signature", env[:len(env)-2] + `="}`, reject.Malformed},
		{"modified claim", strings.Replace(env, `"reason":"a wasm`, `"reason":"a WASM`, 1), reject.Signature},
	}
	for _, tc := range tests {
		if _, err := Verify([]byte(tc.in), trust); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %s", tc.name, err, tc.want)
		}
	}
}

func FuzzVerify(f *testing.F) {
	k := testKey(f, 1)
	a, _ := Seal(sample(), k)
	f.Add(a.Envelope)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Verify(b, key.NewTrust(k.Public()))
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if got.Addr != addr.Of(got.ClaimJCS) {
			t.Fatal("address does not match claim bytes")
		}
		again, err := jcs.Marshal(got.Claim)
		if err != nil || !bytes.Equal(again, got.ClaimJCS) {
			t.Fatalf("accepted a claim with another spelling: %s", got.ClaimJCS)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	k := testKey(b, 1)
	c := sample()
	for b.Loop() {
		if _, err := Seal(c, k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify verifies an attestation whole (attestation), side by
// side with the plain Ed25519 verification of the same signed bytes
// inside it (ed25519): what the envelope's parsing and the claim's
// checks add to the signature's cost.
func BenchmarkVerify(b *testing.B) {
	k := testKey(b, 1)
	a, _ := Seal(sample(), k)
	trust := key.NewTrust(k.Public())
	b.Run("attestation", func(b *testing.B) {
		b.SetBytes(int64(len(a.Envelope)))
		for b.Loop() {
			if _, err := Verify(a.Envelope, trust); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ed25519", func(b *testing.B) {
		msg := SignedMessage(a.ClaimJCS)
		kp := k.Public()
		pub := ed25519.PublicKey(kp[:])
		b.SetBytes(int64(len(a.Envelope)))
		for b.Loop() {
			if !ed25519.Verify(pub, msg, a.Signature) {
				b.Fatal("does not verify")
			}
		}
	})
}
