package locality

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// seeded is the key made from the SHA-256 of name: fixed keys for tests.
func seeded(t testing.TB, name string) key.Private {
	t.Helper()
	s := sha256.Sum256([]byte(name))
	k, err := key.FromSeed(s[:])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Places, in micro-degrees.
var (
	paris  = Position{Lat: 48_856_600, Lon: 2_352_200}
	london = Position{Lat: 51_507_400, Lon: -127_800}
	sydney = Position{Lat: -33_868_800, Lon: 151_209_300}
)

// fixture is a host, a binding and two published anchors.
type fixture struct {
	host, anchorA, anchorB key.Private
	binding                addr.Addr
	anchors                []PublishedAnchor
}

func newFixture(t testing.TB) fixture {
	f := fixture{
		host: seeded(t, "host"), anchorA: seeded(t, "anchor-paris"), anchorB: seeded(t, "anchor-sydney"),
		binding: addr.Of([]byte("run")),
	}
	f.anchors = []PublishedAnchor{{Key: f.anchorA.Public(), Position: paris}, {Key: f.anchorB.Public(), Position: sydney}}
	return f
}

// measure signs a statement of a round trip of rtt µs to anchor k at pos.
func (f fixture) measure(t testing.TB, k key.Private, pos Position, rtt int64, change func(*Statement)) Measurement {
	t.Helper()
	nonce := sha256.Sum256([]byte(k.Public().String() + string(rune(rtt))))
	s := Statement{Type: MeasurementType, Anchor: k.Public(), Position: pos, Nonce: nonce[:], Host: f.host.Public(),
		Binding: f.binding, RTT: rtt, At: 1_767_225_600}
	s.HostSig = f.host.Sign(AnswerBytes(s.Nonce, s.Anchor, s.Binding))
	if change != nil {
		change(&s)
	}
	m, err := Sign(k, s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f fixture) claim(t testing.TB, r Region, ms ...Measurement) []byte {
	t.Helper()
	b, err := jcs.Marshal(Claim{Type: Type, Host: f.host.Public(), Binding: f.binding, Region: r, Measurements: append([]Measurement{}, ms...)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGeometry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		a, b        Position
		great, rule int64
	}{
		{"same point", paris, paris, 0, 0},
		{"one degree on the equator", Position{}, Position{Lon: 1_000_000}, 111_196, 111_196 + 1_112},
		{"a quarter circle", Position{}, Position{Lat: 90_000_000}, 10_007_558, 10_007_558 + 100_076},
		{"pole to pole", Position{Lat: -90_000_000}, Position{Lat: 90_000_000}, 20_015_115, 20_015_115 + 200_152},
		{"antipodes on the equator", Position{Lon: -90_000_000}, Position{Lon: 90_000_000}, 20_015_115, 20_015_115 + 200_152},
		{"across the antimeridian", Position{Lon: 179_500_000}, Position{Lon: -179_500_000}, 111_196, 111_196 + 1_112},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g := GreatCircleM(tc.a, tc.b); g != tc.great {
				t.Errorf("GreatCircleM = %d, want %d", g, tc.great)
			}
			if g := GreatCircleM(tc.b, tc.a); g != tc.great {
				t.Errorf("GreatCircleM reversed = %d, want %d", g, tc.great)
			}
			if d := DistanceM(tc.a, tc.b); d != tc.rule {
				t.Errorf("DistanceM = %d, want %d", d, tc.rule)
			}
		})
	}
	// Paris to London is about 343.5 km on the ellipsoid; the rule's
	// distance must not be shorter.
	if d := DistanceM(paris, london); d < 343_500 || d > 350_000 {
		t.Errorf("Paris–London %d m", d)
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct{ rtt, want int64 }{
		{0, 0}, {1, 150}, {1000, 149_897}, {30_000, 4_496_887}, {MaxRTT, 8_993_773_740}, {MaxRTT + 1, 8_993_773_740}, {-5, 0},
	} {
		if got := BoundM(tc.rtt); got != tc.want {
			t.Errorf("BoundM(%d) = %d, want %d", tc.rtt, got, tc.want)
		}
	}
}

func TestVerifyHolds(t *testing.T) {
	f := newFixture(t)
	// 1 ms round trip to Paris: within 150 km of Paris; a region of
	// 500 km around London (343 km away) holds it.
	c := f.claim(t, Region{Centre: london, RadiusM: 500_000},
		f.measure(t, f.anchorB, sydney, 2_000, nil), f.measure(t, f.anchorA, paris, 1_000, nil))
	r, err := Verify(c, f.anchors, f.binding, f.host.Public())
	if err != nil {
		t.Fatal(err)
	}
	if r.Witness != 1 || len(r.Bounds) != 2 || r.Bounds[1].BoundM != 149_897 || r.Bounds[1].MarginM <= 0 || r.Bounds[0].MarginM >= 0 {
		t.Fatalf("%+v", r)
	}
}

// Every refusal, by its code, and where it is found.
func TestVerifyRefuses(t *testing.T) {
	f := newFixture(t)
	near := Region{Centre: paris, RadiusM: 1_000_000}
	good := func(change func(*Statement)) Measurement { return f.measure(t, f.anchorA, paris, 1_000, change) }
	other := seeded(t, "other")
	for _, tc := range []struct {
		name  string
		claim func() []byte
		host  key.Public
		bind  addr.Addr
		code  reject.Code
		where string
	}{
		{name: "too far: 30 ms from Paris for a 1000 km region",
			claim: func() []byte { return f.claim(t, near, f.measure(t, f.anchorA, paris, 30_000, nil)) },
			code:  reject.LocalityTooFar, where: "claim.region"},
		{name: "too far: the anchor itself is outside the region",
			claim: func() []byte { return f.claim(t, Region{Centre: london, RadiusM: 300_000}, good(nil)) },
			code:  reject.LocalityTooFar, where: "claim.region"},
		{name: "rtt lowered after signing",
			claim: func() []byte {
				m := f.measure(t, f.anchorA, paris, 30_000, nil)
				m.Statement.RTT = 1_000
				return f.claim(t, near, m)
			},
			code: reject.Signature, where: "claim.measurements[0].signature"},
		{name: "timestamp changed after signing",
			claim: func() []byte { m := good(nil); m.Statement.At++; return f.claim(t, near, m) },
			code:  reject.Signature, where: "claim.measurements[0].signature"},
		{name: "signature with S+L",
			claim: func() []byte { m := good(nil); m.Signature[63] |= 0xf0; return f.claim(t, near, m) },
			code:  reject.Signature, where: "claim.measurements[0].signature"},
		{name: "an anchor nobody published",
			claim: func() []byte { return f.claim(t, near, f.measure(t, other, paris, 1_000, nil)) },
			code:  reject.LocalityUnknownAnchor, where: "claim.measurements[0].statement.anchor"},
		{name: "an anchor claiming another position",
			claim: func() []byte { return f.claim(t, near, f.measure(t, f.anchorA, london, 1_000, nil)) },
			code:  reject.LocalityAnchorPosition, where: "claim.measurements[0].statement.position"},
		{name: "a measurement of another host",
			claim: func() []byte {
				return f.claim(t, near, good(func(s *Statement) {
					s.Host = other.Public()
					s.HostSig = other.Sign(AnswerBytes(s.Nonce, s.Anchor, s.Binding))
				}))
			},
			code: reject.LocalityHost, where: "claim.measurements[0].statement.host"},
		{name: "a measurement for another run",
			claim: func() []byte {
				return f.claim(t, near, good(func(s *Statement) { s.Binding = addr.Of([]byte("other")) }))
			},
			code: reject.LocalityBinding, where: "claim.measurements[0].statement.binding"},
		{name: "a host answer that does not verify",
			claim: func() []byte { return f.claim(t, near, good(func(s *Statement) { s.HostSig[0] ^= 1 })) },
			code:  reject.LocalityHost, where: "claim.measurements[0].statement.host_sig"},
		{name: "the claim of another host", claim: func() []byte { return f.claim(t, near, good(nil)) },
			host: other.Public(), code: reject.LocalityHost, where: "claim.host"},
		{name: "the claim of another run", claim: func() []byte { return f.claim(t, near, good(nil)) },
			bind: addr.Of([]byte("x")), code: reject.LocalityBinding, where: "claim.binding"},
		{name: "a weak anchor key",
			claim: func() []byte {
				m := good(nil)
				m.Statement.Anchor = key.Public{1}
				return f.claim(t, near, m)
			},
			code: reject.WeakKey, where: "claim.measurements[0].statement.anchor"},
		{name: "no measurements", claim: func() []byte { return f.claim(t, near) },
			code: reject.Invalid, where: "claim.measurements"},
		{name: "one round trip twice", claim: func() []byte { return f.claim(t, near, good(nil), good(nil)) },
			code: reject.Invalid, where: "claim.measurements[1].statement.nonce"},
		{name: "a radius of 0", claim: func() []byte { return f.claim(t, Region{Centre: paris}, good(nil)) },
			code: reject.Invalid, where: "claim.region.radius_m"},
		{name: "a latitude past the pole", claim: func() []byte { return f.claim(t, Region{Centre: Position{Lat: 90_000_001}, RadiusM: 1}, good(nil)) },
			code: reject.Invalid, where: "claim.region.centre.lat_udeg"},
		{name: "an rtt of 0", claim: func() []byte { return f.claim(t, near, good(func(s *Statement) { s.RTT = 0 })) },
			code: reject.Invalid, where: "claim.measurements[0].statement.rtt_us"},
		{name: "another type", claim: func() []byte {
			return bytes.Replace(f.claim(t, near, good(nil)), []byte(`"sandbox.locality/1"`), []byte(`"sandbox.locality/2"`), 1)
		}, code: reject.Unrecognised, where: "claim.type"},
		{name: "not canonical", claim: func() []byte { return append([]byte(" "), f.claim(t, near, good(nil))...) },
			code: reject.NonCanonical},
		{name: "an unknown member", claim: func() []byte {
			return bytes.Replace(f.claim(t, near, good(nil)), []byte(`{"binding"`), []byte(`{"a":1,"binding"`), 1)
		}, code: reject.UnknownField},
		{name: "too large", claim: func() []byte { return bytes.Repeat([]byte(" "), MaxClaimSize+1) },
			code: reject.Invalid, where: "claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, bind := f.host.Public(), f.binding
			if tc.host != (key.Public{}) {
				host = tc.host
			}
			if !tc.bind.IsZero() {
				bind = tc.bind
			}
			_, err := Verify(tc.claim(), f.anchors, bind, host)
			var re *reject.Error
			if !errors.As(err, &re) || re.Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if tc.where != "" && re.Where != tc.where {
				t.Errorf("where %q, want %q (%v)", re.Where, tc.where, err)
			}
		})
	}
}

// fakeClock advances by step at every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// The anchor measures on its own clock; Measure checks what comes back;
// the claim verifies; a nonce answers once.
func TestAnchorAndMeasure(t *testing.T) {
	f := newFixture(t)
	clock := &fakeClock{t: time.Unix(1_767_225_600, 0), step: 250 * time.Microsecond}
	a, err := NewAnchor(f.anchorA, paris, WithClock(clock.now))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	m, err := Measure(t.Context(), srv.URL, f.host, f.binding)
	if err != nil {
		t.Fatal(err)
	}
	// The answer's arrival is the clock's next reading after the
	// nonce's send.
	if m.Statement.RTT != 250 {
		t.Errorf("rtt %d µs, want 250", m.Statement.RTT)
	}
	c, err := NewClaim(f.host.Public(), f.binding, Region{Centre: paris, RadiusM: 100_000}, []Measurement{m})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(c, []PublishedAnchor{a.Published()}, f.binding, f.host.Public()); err != nil {
		t.Fatal(err)
	}
	// The same nonce answered again is refused.
	ans, _ := json.Marshal(Answer{Nonce: m.Statement.Nonce, HostSig: m.Statement.HostSig})
	resp, err := srv.Client().Post(srv.URL+AnswerPath, "application/json", bytes.NewReader(ans))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("a second answer: %s", resp.Status)
	}
}

// A host that answers with another key's signature gets no measurement.
func TestAnchorRefusesAForeignAnswer(t *testing.T) {
	f := newFixture(t)
	a, _ := NewAnchor(f.anchorA, paris)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	_, err := Measure(t.Context(), srv.URL+"/", seeded(t, "impostor"), f.binding)
	if err != nil {
		t.Fatalf("an honest impostor key still measures: %v", err)
	}
	var ch Challenge
	body, _ := json.Marshal(ChallengeRequest{Host: f.host.Public(), Binding: f.binding})
	resp, err := srv.Client().Post(srv.URL+ChallengePath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&ch)
	resp.Body.Close()
	ans, _ := json.Marshal(Answer{Nonce: ch.Nonce, HostSig: seeded(t, "impostor").Sign(AnswerBytes(ch.Nonce, ch.Anchor, f.binding))})
	resp, err = srv.Client().Post(srv.URL+AnswerPath, "application/json", bytes.NewReader(ans))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("an answer signed by another key: %s", resp.Status)
	}
}

func TestRefusalsNameTheirPlace(t *testing.T) {
	_, err := Parse([]byte(`{"type":"sandbox.locality/1"}`))
	if err == nil || !strings.Contains(err.Error(), "claim") {
		t.Fatalf("%v", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	c := f.claim(b, Region{Centre: london, RadiusM: 500_000},
		f.measure(b, f.anchorB, sydney, 2_000, nil), f.measure(b, f.anchorA, paris, 1_000, nil))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(c, f.anchors, f.binding, f.host.Public()); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	fx := newFixture(f)
	f.Add(fx.claim(f, Region{Centre: paris, RadiusM: 1_000_000}, fx.measure(f, fx.anchorA, paris, 1_000, nil)))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"type":"sandbox.locality/1","measurements":[{}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("a refusal without a code: %v", err)
			}
			return
		}
		// What parses re-encodes to its own bytes, and verifies or is
		// refused by code.
		again, err := jcs.Marshal(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("parsed, and re-encodes to other bytes: %v", err)
		}
		if _, err := c.Verify(fx.anchors, c.Binding, c.Host); err != nil && reject.CodeOf(err) == "" {
			t.Fatalf("a refusal without a code: %v", err)
		}
	})
}

// post sends v as JSON to the anchor and returns the status and body.
func postJSON(t *testing.T, srv *httptest.Server, path string, v any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := srv.Client().Post(srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// A nonce answered after AnswerWindow is refused, and an anchor keeps
// no more than MaxPending nonces waiting: old ones are swept, and while
// all are fresh a new challenge is refused.
func TestAnchorForgets(t *testing.T) {
	f := newFixture(t)
	clock := &fakeClock{t: time.Unix(1_767_225_600, 0), step: time.Microsecond}
	a, _ := NewAnchor(f.anchorA, paris, WithClock(clock.now))
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	req := ChallengeRequest{Host: f.host.Public(), Binding: f.binding}

	_, body := postJSON(t, srv, ChallengePath, req)
	var ch Challenge
	if err := json.Unmarshal(body, &ch); err != nil {
		t.Fatal(err)
	}
	clock.mu.Lock()
	clock.t = clock.t.Add(AnswerWindow + time.Second)
	clock.mu.Unlock()
	sig := f.host.Sign(AnswerBytes(ch.Nonce, ch.Anchor, f.binding))
	if code, _ := postJSON(t, srv, AnswerPath, Answer{Nonce: ch.Nonce, HostSig: sig}); code != 410 {
		t.Errorf("a late answer: %d, want 410", code)
	}

	for i := 0; i < MaxPending; i++ {
		if code, body := postJSON(t, srv, ChallengePath, req); code != 200 {
			t.Fatalf("challenge %d: %d %s", i, code, body)
		}
	}
	if code, _ := postJSON(t, srv, ChallengePath, req); code != 503 {
		t.Errorf("a challenge past MaxPending: %d, want 503", code)
	}
	clock.mu.Lock()
	clock.t = clock.t.Add(AnswerWindow + time.Second)
	clock.mu.Unlock()
	if code, _ := postJSON(t, srv, ChallengePath, req); code != 200 {
		t.Errorf("a challenge after the old nonces expired: %d, want 200", code)
	}
	if code, _ := postJSON(t, srv, AnswerPath, map[string]any{"nonce": "00", "extra": 1}); code != 400 {
		t.Errorf("an answer with an unknown member: %d, want 400", code)
	}
}
