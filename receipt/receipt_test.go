package receipt

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veraison/go-cose"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

func testKey(t testing.TB, b byte) key.Private {
	k, err := key.FromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sample() *Receipt {
	fuel := uint64(123456)
	r := &Receipt{
		Unit:    addr.Of([]byte("unit")),
		StartNS: 1_700_000_000_000_000_000,
		EndNS:   1_700_000_001_000_000_000,
		Fuel:    &fuel,
		Devices: []Device{{
			Class: device.CPU,
			Readings: []Reading{
				{Provenance: HwShunt, Scope: ScopeHost, Source: "powercap:package-0", StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_001_000_000_000, UJ: 9 * energy.Joule},
				{Provenance: ModelBased, Scope: ScopeRun, Source: "cgroup-share", StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_001_000_000_000, UJ: 3 * energy.Joule, Basis: "host × cpu_run/cpu_host"},
				{Provenance: Estimator, Scope: ScopeRun, Source: "tdp", StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_001_000_000_000, UJ: 5, Basis: "wall × 15 W"},
			},
		}, {
			Class:    device.GPU,
			Readings: []Reading{{Provenance: HwShunt, Scope: ScopeRun, Source: "nvml:GPU-0", StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_001_000_000_000, UJ: 7}},
		}},
	}
	if err := r.FillTotals(); err != nil {
		panic(err)
	}
	return r
}

func TestSealOpen(t *testing.T) {
	k := testKey(t, 1)
	r := sample()
	b, err := Seal(r, k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Open(b, key.NewTrust(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices[0].Estimated != 3*energy.Joule+5 || got.Devices[1].Measured != 7 || *got.Fuel != 123456 {
		t.Fatalf("round trip: %+v", got)
	}
	if tot, _ := got.Total(); tot != 3*energy.Joule+12 {
		t.Fatalf("Total = %d", tot)
	}
	// Deterministic: sealing again gives the same bytes.
	again, _ := Seal(sample(), k)
	if !bytes.Equal(again, b) {
		t.Fatal("sealing is not deterministic")
	}
	// Untrusted: the receipt comes back with the distinct error.
	got, err = Open(b, key.NewTrust(testKey(t, 2).Public()))
	if !errors.Is(err, reject.UntrustedKey) || got == nil {
		t.Fatalf("untrusted: %v, %v", got, err)
	}
}

func TestSealRefusesInvalid(t *testing.T) {
	r := sample()
	r.Devices[0].Measured++
	if _, err := Seal(r, testKey(t, 1)); !errors.Is(err, reject.TotalMismatch) {
		t.Fatalf("Seal with a wrong total = %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*Receipt)
		want reject.Code
	}{
		{"wrong version", func(r *Receipt) { r.Version = 2 }, reject.Invalid},
		{"zero unit", func(r *Receipt) { r.Unit = addr.Addr{} }, reject.MissingField},
		{"backwards", func(r *Receipt) { r.EndNS = 0 }, reject.Invalid},
		{"unknown class", func(r *Receipt) { r.Devices[1].Class = "Fpga" }, reject.Invalid},
		{"lower-case class", func(r *Receipt) { r.Devices[1].Class = "gpu" }, reject.Invalid},
		{"out of order", func(r *Receipt) { r.Devices[0], r.Devices[1] = r.Devices[1], r.Devices[0] }, reject.NonCanonical},
		{"repeated class", func(r *Receipt) { r.Devices[1].Class = device.CPU }, reject.NonCanonical},
		{"unknown provenance", func(r *Receipt) { r.Devices[0].Readings[0].Provenance = "Guess" }, reject.Invalid},
		{"unknown scope", func(r *Receipt) { r.Devices[0].Readings[0].Scope = "fleet" }, reject.Invalid},
		{"no source", func(r *Receipt) { r.Devices[0].Readings[0].Source = "" }, reject.MissingField},
		{"no basis", func(r *Receipt) { r.Devices[0].Readings[2].Basis = "" }, reject.MissingField},
		{"measured off", func(r *Receipt) { r.Devices[1].Measured = 8 }, reject.TotalMismatch},
		{"estimated off", func(r *Receipt) { r.Devices[0].Estimated = 0 }, reject.TotalMismatch},
		{"host reading counted", func(r *Receipt) { r.Devices[0].Measured = 9 * energy.Joule }, reject.TotalMismatch},
		{"overflow", func(r *Receipt) {
			r.Devices[1].Readings = append(r.Devices[1].Readings, Reading{Provenance: HwShunt, Scope: ScopeRun, Source: "x", StartNS: r.StartNS, EndNS: r.EndNS, UJ: 1<<64 - 1})
		}, reject.TotalMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := sample()
			r.Version = Version
			tc.mut(r)
			if err := r.Validate(); !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %s", err, tc.want)
			}
		})
	}
}

// resign builds an envelope around an arbitrary payload, to test what Open
// does with payloads and headers Seal would never produce.
func resign(t *testing.T, payload []byte, k key.Private, alg int64, extra map[int64]any) []byte {
	t.Helper()
	b, err := SealPayload(payload, k, alg, extra)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenRefuses(t *testing.T) {
	k := testKey(t, 1)
	trust := key.NewTrust(k.Public())
	good, err := Seal(sample(), k)
	if err != nil {
		t.Fatal(err)
	}
	r := sample()
	r.Version, r.Signer = Version, k.Public()
	payload, _ := detcbor.Marshal(r)

	// A payload map with one more field.
	var generic map[string]any
	if err := detcbor.Unmarshal(payload, &generic); err != nil {
		t.Fatal(err)
	}
	generic["zzz"] = 1
	extraField, _ := detcbor.Marshal(generic)

	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1

	bad := sample()
	bad.Version, bad.Signer = Version, k.Public()
	bad.Devices[1].Measured = 8
	badTotal, _ := detcbor.Marshal(bad)

	tests := []struct {
		name string
		b    []byte
		want reject.Code
	}{
		{"flipped signature bit", flipped, reject.Signature},
		{"truncated", good[:len(good)-10], reject.Truncated},
		{"empty", nil, reject.Truncated},
		{"not cose", []byte{0x01}, reject.Malformed},
		{"untagged", good[1:], reject.Malformed},
		{"wrong alg", resign(t, payload, k, -7, nil), reject.Alg},
		{"ed25519 alg accepted", resign(t, payload, k, AlgEd25519, nil), ""},
		{"unknown critical", resign(t, payload, k, AlgEdDSA, map[int64]any{2: []any{int64(99)}, 99: "x"}), reject.UnknownCritical},
		{"extra protected label", resign(t, payload, k, AlgEdDSA, map[int64]any{99: "x"}), reject.Header},
		{"wrong content type", resign(t, payload, k, AlgEdDSA, map[int64]any{3: "application/cbor"}), reject.Header},
		{"unknown payload field", resign(t, extraField, k, AlgEdDSA, nil), reject.UnknownField},
		{"total mismatch", resign(t, badTotal, k, AlgEdDSA, nil), reject.TotalMismatch},
		{"kid of another key", resign(t, payload, testKey(t, 2), AlgEdDSA, nil), reject.Header},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.b, trust)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %s", err, tc.want)
			}
		})
	}
}

type coseExample struct {
	Input struct {
		Plaintext string `json:"plaintext"`
		Sign0     struct {
			Key struct {
				D string `json:"d_hex"`
				X string `json:"x_hex"`
			} `json:"key"`
		} `json:"sign0"`
	} `json:"input"`
	Intermediates struct {
		ToBeSign string `json:"ToBeSign_hex"`
	} `json:"intermediates"`
	Output struct {
		CBOR string `json:"cbor"`
	} `json:"output"`
}

// TestCOSEWGEdDSAVector: the cose-wg Ed25519 COSE_Sign1 example, signed with
// this package's signer through go-cose, is the published bytes exactly,
// and verifies with this package's verifier. Open refuses it, because its
// headers (content type 0, a kid in the unprotected bucket) are not JCR-1.
func TestCOSEWGEdDSAVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "cose-wg-examples", "eddsa-examples", "eddsa-sig-01.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex coseExample
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatal(err)
	}
	seed, _ := hex.DecodeString(ex.Input.Sign0.Key.D)
	k, err := key.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if pub := k.Public(); hex.EncodeToString(pub[:]) != ex.Input.Sign0.Key.X {
		t.Fatal("public key differs from the vector")
	}
	msg := cose.NewSign1Message()
	msg.Headers.Protected.SetAlgorithm(cose.AlgorithmEdDSA)
	msg.Headers.Protected[cose.HeaderLabelContentType] = 0
	msg.Headers.Unprotected[cose.HeaderLabelKeyID] = []byte("11")
	msg.Payload = []byte(ex.Input.Plaintext)
	if err := msg.Sign(nil, nil, signer{k, cose.AlgorithmEdDSA}); err != nil {
		t.Fatal(err)
	}
	got, err := msg.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ToLower(ex.Output.CBOR); hex.EncodeToString(got) != want {
		t.Fatalf("COSE bytes\n got %x\nwant %s", got, want)
	}
	var back cose.Sign1Message
	if err := back.UnmarshalCBOR(got); err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(nil, verifier{k.Public(), cose.AlgorithmEdDSA}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	back.Signature[0] ^= 1
	if err := back.Verify(nil, verifier{k.Public(), cose.AlgorithmEdDSA}); err == nil {
		t.Fatal("verified a flipped signature")
	}
	if _, err := Open(got, key.NewTrust(k.Public())); !errors.Is(err, reject.Header) {
		t.Fatalf("Open(cose-wg example) = %v, want %s", err, reject.Header)
	}
}

// TestCOSEWGSign1Tests: none of the cose-wg ES256 Sign1 cases, passing or
// failing, is accepted as a JCR-1 receipt.
func TestCOSEWGSign1Tests(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join("..", "testdata", "vectors", "cose-wg-examples", "sign1-tests", "*.json"))
	if len(names) != 9 {
		t.Fatalf("found %d sign1 tests, want 9", len(names))
	}
	for _, n := range names {
		raw, _ := os.ReadFile(n)
		var ex coseExample
		json.Unmarshal(raw, &ex)
		b, _ := hex.DecodeString(ex.Output.CBOR)
		if _, err := Open(b, key.Trust{}); reject.CodeOf(err) == "" {
			t.Errorf("%s: Open = %v, want a refusal", filepath.Base(n), err)
		}
	}
}

func FuzzOpen(f *testing.F) {
	k := testKey(f, 1)
	good, _ := Seal(sample(), k)
	f.Add(good)
	f.Add(good[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Open(b, key.NewTrust(k.Public()))
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("opened an invalid receipt: %v", err)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	k := testKey(b, 1)
	for b.Loop() {
		if _, err := Seal(sample(), k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	k := testKey(b, 1)
	env, _ := Seal(sample(), k)
	trust := key.NewTrust(k.Public())
	b.SetBytes(int64(len(env)))
	for b.Loop() {
		if _, err := Open(env, trust); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRunReadingsWithinTheRun: a run- or alt-scope reading outside the
// receipt's interval is refused; a host reading may be wider.
func TestRunReadingsWithinTheRun(t *testing.T) {
	for _, tc := range []struct {
		scope Scope
		ok    bool
	}{{ScopeRun, false}, {ScopeAlt, false}, {ScopeHost, true}} {
		r := sample()
		r.Devices[0].Readings = append(r.Devices[0].Readings, Reading{Provenance: Estimator, Scope: tc.scope, Source: "x", Basis: "b",
			StartNS: r.StartNS - 1, EndNS: r.EndNS})
		r.FillTotals()
		r.Version = Version
		if err := r.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s reading before the run: %v", tc.scope, err)
		}
	}
}
