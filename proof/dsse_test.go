package proof

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// TestPAE: the DSSE specification's example (protocol.md, "Test
// Vectors"), and the empty case.
func TestPAE(t *testing.T) {
	for _, c := range []struct{ typ, body, want string }{
		{"http://example.com/HelloWorld", "hello world", "DSSEv1 29 http://example.com/HelloWorld 11 hello world"},
		{"", "", "DSSEv1 0  0 "},
		{PayloadType, "{}", "DSSEv1 28 application/vnd.in-toto+json 2 {}"},
	} {
		if got := string(PAE(c.typ, []byte(c.body))); got != c.want {
			t.Errorf("PAE(%q, %q) = %q, want %q", c.typ, c.body, got, c.want)
		}
	}
}

func testKey(t testing.TB, b byte) key.Private {
	seed := make([]byte, 32)
	seed[0] = b
	k, err := key.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestEnvelope: a signature verifies under its key and no other, over
// the payload and its type both; DSSE's base64 forms are all read.
func TestEnvelope(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	e := Sign(k, "http://example.com/HelloWorld", []byte("hello world"))
	if e.Signatures[0].KeyID != k.Public().ID().String() {
		t.Errorf("keyid %s", e.Signatures[0].KeyID)
	}
	if err := e.Verify(k.Public()); err != nil {
		t.Fatal(err)
	}
	if err := e.Verify(other.Public()); !errors.Is(err, reject.ProofSignature) {
		t.Errorf("under another key: %v", err)
	}
	retyped := e
	retyped.PayloadType = "http://example.com/Other"
	if err := retyped.Verify(k.Public()); !errors.Is(err, reject.ProofSignature) {
		t.Errorf("another payload type: %v", err)
	}
	sig, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	url := e
	url.Signatures = []Signature{{Sig: base64.RawURLEncoding.EncodeToString(sig)}}
	url.Payload = base64.RawURLEncoding.EncodeToString([]byte("hello world"))
	if err := url.Verify(k.Public()); err != nil {
		t.Errorf("URL-safe unpadded base64: %v", err)
	}
	none := e
	none.Signatures = nil
	if err := none.Verify(k.Public()); !errors.Is(err, reject.ProofSignature) {
		t.Errorf("no signature: %v", err)
	}
	bad := e
	bad.Payload = "!!"
	if err := bad.Verify(k.Public()); !errors.Is(err, reject.Malformed) {
		t.Errorf("payload not base64: %v", err)
	}
}
