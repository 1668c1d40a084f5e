package key

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RFC 8032 section 7.1, test 1.
const (
	rfcSeed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	rfcPub  = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	rfcSig  = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)

func TestRFC8032(t *testing.T) {
	seed, _ := hex.DecodeString(rfcSeed)
	k, err := FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Public().String(); got != PublicPrefix+rfcPub {
		t.Fatalf("public = %s", got)
	}
	sig := k.Sign(nil)
	if hex.EncodeToString(sig) != rfcSig {
		t.Fatalf("sig = %x", sig)
	}
	if !k.Public().Verify(nil, sig) {
		t.Fatal("Verify = false")
	}
	sig[0] ^= 1
	if k.Public().Verify(nil, sig) || k.Public().Verify(nil, sig[:10]) {
		t.Fatal("Verify accepted a bad signature")
	}
}

func TestTextForms(t *testing.T) {
	k, err := Generate(bytes.NewReader(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePublic(k.Public().String())
	if err != nil || p != k.Public() {
		t.Fatalf("ParsePublic: %v", err)
	}
	back, err := ParsePrivate(k.MarshalText())
	if err != nil || back.Public() != k.Public() {
		t.Fatalf("ParsePrivate: %v", err)
	}
	for _, bad := range []string{"", "ed25519:", "ed25519:" + strings.Repeat("A", 64), "ed448:" + strings.Repeat("a", 64), PublicPrefix + strings.Repeat("g", 64)} {
		if _, err := ParsePublic(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParsePublic(%q) = %v", bad, err)
		}
	}
	if _, err := ParsePrivate([]byte("ed25519-seed:00")); !errors.Is(err, ErrSyntax) {
		t.Error("short seed accepted")
	}
	if _, err := Generate(bytes.NewReader(nil)); err == nil {
		t.Error("Generate without randomness succeeded")
	}
}

func TestTrust(t *testing.T) {
	a, _ := Generate(bytes.NewReader(bytes.Repeat([]byte{1}, 32)))
	b, _ := Generate(bytes.NewReader(bytes.Repeat([]byte{2}, 32)))
	var zero Trust
	if zero.Trusts(a.Public()) || zero.Len() != 0 {
		t.Fatal("zero Trust trusts")
	}
	tr := NewTrust(a.Public())
	if !tr.Trusts(a.Public()) || tr.Trusts(b.Public()) {
		t.Fatal("Trusts")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "keys")
	os.WriteFile(f, []byte("# ours\n"+a.Public().String()+"\n\n"+b.Public().String()+"\n"), 0o600)
	ks, err := ParseTrustArg(f)
	if err != nil || len(ks) != 2 || ks[1] != b.Public() {
		t.Fatalf("ParseTrustArg(file) = %v, %v", ks, err)
	}
	ks, err = ParseTrustArg(a.Public().String())
	if err != nil || len(ks) != 1 {
		t.Fatalf("ParseTrustArg(key) = %v, %v", ks, err)
	}
	os.WriteFile(f, []byte("nonsense\n"), 0o600)
	if _, err := ParseTrustArg(f); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := ParseTrustArg(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("ed25519:" + rfcPub)
	f.Add("ed25519-seed:" + rfcSeed)
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePublic(s); err == nil && p.String() != s {
			t.Fatalf("ParsePublic(%q) prints %q", s, p)
		}
		if k, err := ParsePrivate([]byte(s)); err == nil && k.IsZero() {
			t.Fatal("zero key parsed")
		}
	})
}

func TestDerive(t *testing.T) {
	k, err := FromSeed(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	a, b := k.Derive("purpose one"), k.Derive("purpose two")
	if a == b || a != k.Derive("purpose one") || bytes.Equal(a[:], bytes.Repeat([]byte{1}, 32)) {
		t.Fatalf("derived keys: %x %x", a, b)
	}
	other, _ := FromSeed(bytes.Repeat([]byte{2}, 32))
	if other.Derive("purpose one") == a {
		t.Fatal("two keys derived the same key")
	}
}

// TestWeakKeys: the eight points of small order (the identity among
// them) and non-canonical encodings are refused, by ParsePublic and by
// Verify; an ordinary key is not.
func TestWeakKeys(t *testing.T) {
	for _, h := range []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // identity
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"0000000000000000000000000000000000000000000000000000000000000080", // order 4
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p + 1: the identity, non-canonical
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p: non-canonical
	} {
		if _, err := ParsePublic(PublicPrefix + h); !errors.Is(err, ErrWeak) {
			t.Errorf("%s: %v, want ErrWeak", h, err)
		}
		var p Public
		hex.Decode(p[:], []byte(h))
		// R = base point, S = 1: valid under the bare equation for the
		// identity key, whatever the message.
		sig, _ := hex.DecodeString("5866666666666666666666666666666666666666666666666666666666666666" + "01" + strings.Repeat("00", 31))
		if p.Verify([]byte("any message"), sig) {
			t.Errorf("%s: a forged signature verifies", h)
		}
	}
	k, _ := FromSeed(bytes.Repeat([]byte{7}, 32))
	if err := k.Public().Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePublic(k.Public().String()); err != nil {
		t.Fatal(err)
	}
}

// TestCheckCacheHoldsOnlyStrongKeys: Check remembers keys that passed, and
// a weak key stays refused however often it is checked, even after a
// strong key that shares its cache slot passed.
func TestCheckCacheHoldsOnlyStrongKeys(t *testing.T) {
	var weak Public
	weak[0] = 1 // the identity
	shared := 0
	for i := range 256 {
		k, _ := FromSeed(bytes.Repeat([]byte{byte(i)}, 32))
		for range 2 {
			if err := k.Public().Check(); err != nil {
				t.Fatalf("seed %d: %v", i, err)
			}
		}
		if strong.slot(k.Public()) == strong.slot(weak) {
			shared++
		}
		if err := weak.Check(); !errors.Is(err, ErrWeak) {
			t.Fatalf("after %d strong keys the identity key gives %v", i, err)
		}
	}
	if shared == 0 {
		t.Fatal("no strong key shared the identity key's slot: the test proves nothing")
	}
}

func BenchmarkCheck(b *testing.B) {
	k, _ := FromSeed(bytes.Repeat([]byte{7}, 32))
	p := k.Public()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if p.Check() != nil {
				b.Fatal()
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			if p.check() != nil {
				b.Fatal()
			}
		}
	})
}

// TestNonCanonicalSignature: S + L verifies the same equation as S and is
// refused; S itself is accepted.
func TestNonCanonicalSignature(t *testing.T) {
	k, _ := FromSeed(bytes.Repeat([]byte{9}, 32))
	msg := []byte("message")
	sig := k.Sign(msg)
	if !k.Public().Verify(msg, sig) || CheckSignature(sig) != nil {
		t.Fatal("a good signature is refused")
	}
	l, _ := hex.DecodeString("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
	bad := bytes.Clone(sig)
	carry := 0
	for i := 0; i < 32; i++ {
		v := int(bad[32+i]) + int(l[i]) + carry
		bad[32+i], carry = byte(v), v>>8
	}
	if k.Public().Verify(msg, bad) || !errors.Is(CheckSignature(bad), ErrNonCanonicalSignature) {
		t.Fatal("S + L is accepted")
	}
	if !errors.Is(CheckSignature(append(bytes.Clone(sig[:32]), l...)), ErrNonCanonicalSignature) {
		t.Fatal("S = L is accepted")
	}
	if CheckSignature(sig[:63]) == nil {
		t.Fatal("a 63-byte signature is accepted")
	}
}
