package vectors

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/reject"
)

// KindLocality is the kind of the locality vectors (locality/locality.json).
const KindLocality = "locality"

// LocalityType is the "type" of locality.json.
const LocalityType = "sandbox.locality-vectors/1"

// LocalityVectors is locality.json: the published anchors, and claims
// each with the host key and binding a verifier expects and what it
// must conclude (docs/spec/locality.md § Vectors).
type LocalityVectors struct {
	Type    string                     `json:"type"`
	Anchors []locality.PublishedAnchor `json:"anchors"`
	Cases   []LocalityCase             `json:"cases"`
}

// LocalityCase is one claim: its exact bytes as a string, the host key
// and binding it is checked against, and "ok" or the code of its first
// refusal; for a claim whose signatures all verify, the metres each
// measurement's disk fits inside the region by (negative: it does not).
type LocalityCase struct {
	Name    string     `json:"name"`
	About   string     `json:"about"`
	Claim   string     `json:"claim"`
	Host    key.Public `json:"host"`
	Binding addr.Addr  `json:"binding"`
	Expect  string     `json:"expect"`
	Margins []int64    `json:"margins_m,omitempty"`
}

// CheckLocality runs every case of locality.json through locality.Verify.
func CheckLocality(b []byte) error {
	var v LocalityVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Type != LocalityType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", v.Type, LocalityType)
	}
	for _, c := range v.Cases {
		if got, err := v.Run(c); got != c.Expect {
			return fmt.Errorf("case %s: got %s, want %s (%v)", c.Name, got, c.Expect, err)
		}
	}
	return nil
}

// Run runs one case: "ok", or the code of its refusal, and the margins
// it found.
func (v *LocalityVectors) Run(c LocalityCase) (string, error) {
	r, err := locality.Verify([]byte(c.Claim), v.Anchors, c.Binding, c.Host)
	if r != nil {
		var ms []int64
		for _, b := range r.Bounds {
			ms = append(ms, b.MarginM)
		}
		if fmt.Sprint(ms) != fmt.Sprint(c.Margins) {
			return "margins", fmt.Errorf("margins %v, the case says %v", ms, c.Margins)
		}
	}
	if err == nil {
		return ExpectOK, nil
	}
	if code := reject.CodeOf(err); code != "" {
		return string(code), err
	}
	return "error", err
}

// seededKey is the key whose seed is the SHA-256 of name.
func seededKey(name string) key.Private {
	s := sha256.Sum256([]byte(name))
	k, err := key.FromSeed(s[:])
	if err != nil {
		panic(err)
	}
	return k
}

// localityVectors builds locality.json: fixed keys, nonces and times, so
// that every generation gives the same bytes.
func localityVectors() ([]byte, error) {
	var (
		host      = TestKey()
		other     = OtherKey()
		binding   = addr.Of([]byte("locality vectors: the run"))
		paris     = locality.Position{Lat: 48_856_600, Lon: 2_352_200}
		london    = locality.Position{Lat: 51_507_400, Lon: -127_800}
		sydney    = locality.Position{Lat: -33_868_800, Lon: 151_209_300}
		frankfurt = locality.Position{Lat: 50_110_900, Lon: 8_682_100}
		aParis    = seededKey("locality anchor paris")
		aSydney   = seededKey("locality anchor sydney")
		aStray    = seededKey("locality anchor nobody published")
	)
	v := LocalityVectors{Type: LocalityType, Anchors: []locality.PublishedAnchor{
		{Key: aParis.Public(), Position: paris}, {Key: aSydney.Public(), Position: sydney},
	}}
	seq := 0
	measure := func(k key.Private, pos locality.Position, rtt int64, change func(*locality.Statement)) locality.Measurement {
		seq++
		n := sha256.Sum256([]byte(fmt.Sprintf("locality vectors: nonce %d", seq)))
		s := locality.Statement{Type: locality.MeasurementType, Anchor: k.Public(), Position: pos, Nonce: n[:],
			Host: host.Public(), Binding: binding, RTT: rtt, At: 1_767_225_600 + int64(seq)}
		s.HostSig = host.Sign(locality.AnswerBytes(s.Nonce, s.Anchor, s.Binding))
		if change != nil {
			change(&s)
		}
		m, err := locality.Sign(k, s)
		if err != nil {
			panic(err)
		}
		return m
	}
	claimOf := func(r locality.Region, ms ...locality.Measurement) []byte {
		b, err := jcs.Marshal(locality.Claim{Type: locality.Type, Host: host.Public(), Binding: binding, Region: r,
			Measurements: append([]locality.Measurement{}, ms...)})
		if err != nil {
			panic(err)
		}
		return b
	}
	add := func(name, expect, about string, claim []byte) {
		v.Cases = append(v.Cases, LocalityCase{Name: name, About: about, Claim: string(claim), Host: host.Public(),
			Binding: binding, Expect: expect})
	}
	near := locality.Region{Centre: paris, RadiusM: 1_000_000}
	good := measure(aParis, paris, 1_000, nil)
	far := measure(aParis, paris, 30_000, nil)
	// Exactly on the edge: the radius is the distance plus the bound.
	edge := measure(aParis, paris, 2_345, nil)
	edgeR := locality.DistanceM(paris, frankfurt) + locality.BoundM(2_345)

	add("near", "ok", "1 ms to the Paris anchor: within 150 km of it, inside 1000 km of Paris", claimOf(near, good))
	add("near-london", "ok", "the same round trip, for 500 km around London (343 km from Paris), beside a Sydney measurement that places nothing",
		claimOf(locality.Region{Centre: london, RadiusM: 500_000}, measure(aSydney, sydney, 2_000, nil), good))
	add("edge", "ok", "a region around Frankfurt whose radius is exactly the rule's distance from the Paris anchor plus the bound: the disk fits with 0 m to spare",
		claimOf(locality.Region{Centre: frankfurt, RadiusM: edgeR}, edge))
	add("edge-minus-one", "locality-too-far", "the same, one metre smaller: it does not fit",
		claimOf(locality.Region{Centre: frankfurt, RadiusM: edgeR - 1}, edge))
	add("too-far", "locality-too-far", "30 ms to the Paris anchor bounds the host within 4497 km only: not inside 1000 km of Paris", claimOf(near, far))
	add("antipode", "locality-too-far", "1 ms to the Sydney anchor, claimed for 1000 km around Paris", claimOf(near, measure(aSydney, sydney, 1_000, nil)))
	add("half-earth", "ok", "30 ms to Paris, for 10000 km around Paris",
		claimOf(locality.Region{Centre: paris, RadiusM: 10_000_000}, measure(aParis, paris, 30_000, nil)))
	forged := far
	forged.Statement.RTT = 1_000
	add("forged-rtt", "signature", "the 30 ms measurement with its rtt lowered to 1000 µs after the anchor signed it", claimOf(near, forged))
	at := good
	at.Statement.At -= 3600
	add("forged-timestamp", "signature", "a measurement whose time was moved an hour back after the anchor signed it", claimOf(near, at))
	sl := good
	sl.Signature = addSL(sl.Signature)
	add("signature-s-plus-l", "signature", "the anchor's signature with S replaced by S + L", claimOf(near, sl))
	add("unknown-anchor", "locality-unknown-anchor", "signed by an anchor key nobody published", claimOf(near, measure(aStray, paris, 1_000, nil)))
	add("anchor-moved", "locality-anchor-position", "the Paris anchor's key, signing a position in London", claimOf(near, measure(aParis, london, 1_000, nil)))
	add("wrong-binding", "locality-binding", "a measurement for another run", claimOf(near, measure(aParis, paris, 1_000, func(s *locality.Statement) {
		s.Binding = addr.Of([]byte("another run"))
		s.HostSig = host.Sign(locality.AnswerBytes(s.Nonce, s.Anchor, s.Binding))
	})))
	add("wrong-host", "locality-host", "a round trip answered by another host key", claimOf(near, measure(aParis, paris, 1_000, func(s *locality.Statement) {
		s.Host = other.Public()
		s.HostSig = other.Sign(locality.AnswerBytes(s.Nonce, s.Anchor, s.Binding))
	})))
	add("host-sig", "locality-host", "a host answer that does not verify (one bit flipped before the anchor signed)",
		claimOf(near, measure(aParis, paris, 1_000, func(s *locality.Statement) { s.HostSig[0] ^= 1 })))
	weak := good
	weak.Statement.Anchor = key.Public{1}
	add("weak-anchor", "weak-key", "an anchor key that is the identity point", claimOf(near, weak))
	add("no-measurements", "invalid", "a claim with no measurements", claimOf(near))
	add("nonce-twice", "invalid", "one round trip twice", claimOf(near, good, good))
	add("radius-zero", "invalid", "a region of radius 0", claimOf(locality.Region{Centre: paris}, good))
	add("radius-too-big", "invalid", "a radius past the antipode", claimOf(locality.Region{Centre: paris, RadiusM: locality.MaxRadiusM + 1}, good))
	add("lat-past-pole", "invalid", "an anchor latitude of 90.000001°", claimOf(near, measure(aParis, locality.Position{Lat: 90_000_001}, 1_000, nil)))
	add("rtt-zero", "invalid", "an rtt of 0 µs", claimOf(near, measure(aParis, paris, 0, nil)))
	add("rtt-too-big", "invalid", "an rtt of 60000001 µs", claimOf(near, measure(aParis, paris, locality.MaxRTT+1, nil)))
	add("short-nonce", "invalid", "a nonce of 31 bytes", claimOf(near, measure(aParis, paris, 1_000, func(s *locality.Statement) { s.Nonce = s.Nonce[:31] })))
	okb := claimOf(near, good)
	add("type-2", "unrecognised", "typed sandbox.locality/2", bytes.Replace(okb, []byte(`"sandbox.locality/1"`), []byte(`"sandbox.locality/2"`), 1))
	add("whitespace", "non-canonical", "the claim with a space after its first brace", append([]byte("{ "), okb[1:]...))
	add("unknown-field", "unknown-field", "a member \"a\" the claim does not define", bytes.Replace(okb, []byte(`{"binding"`), []byte(`{"a":1,"binding"`), 1))
	add("missing-region", "missing-field", "the claim without its region", cutMember(okb, `"region":`))
	add("duplicate-key", "duplicate-key", "the claim's type member written twice", bytes.Replace(okb, []byte(`"type":"sandbox.locality/1"`), []byte(`"type":"sandbox.locality/1","type":"sandbox.locality/1"`), 1))
	add("float", "float", "a radius written 1000000.5", bytes.Replace(okb, []byte(`"radius_m":1000000`), []byte(`"radius_m":1000000.5`), 1))
	add("not-json", "malformed", "not JSON", []byte(`{"type":"sandbox.locality/1"]`))
	add("truncated", "truncated", "the claim cut inside a value", okb[:20])

	for i := range v.Cases {
		c := &v.Cases[i]
		if r, _ := locality.Verify([]byte(c.Claim), v.Anchors, c.Binding, c.Host); r != nil {
			for _, b := range r.Bounds {
				c.Margins = append(c.Margins, b.MarginM)
			}
		}
	}
	return jcs.Marshal(v)
}

// addSL is sig with S replaced by S + L (little-endian), which verifies
// under the bare equation and which RFC 8032 refuses.
func addSL(sig []byte) []byte {
	l := [32]byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	out := append([]byte(nil), sig...)
	carry := 0
	for i := 0; i < 32; i++ {
		s := int(out[32+i]) + int(l[i]) + carry
		out[32+i], carry = byte(s), s>>8
	}
	return out
}

// cutMember removes the member that starts with name (an object value
// with no nested braces but one level, as the region's) from b.
func cutMember(b []byte, name string) []byte {
	s := string(b)
	i := strings.Index(s, name)
	depth, j := 0, i+len(name)
	for ; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
		}
		if depth == 0 && s[j] == '}' {
			break
		}
	}
	return []byte(s[:i] + s[j+2:]) // the value's closing brace and its comma
}
