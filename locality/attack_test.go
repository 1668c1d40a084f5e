package locality

// Attacks on S7 locality claims (docs/spec/locality.md): a host that
// tries to look nearer than it is, an attacker feeding the anchor and
// the verifier hostile bytes. Each test either shows a weakness fixed
// here or pins a refusal that already holds.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Finding 1: the anchor read `arrived` when the answer's headers came
// in, before its body. A host could send the answer's headers (its
// length is fixed) before it even asked for the nonce, then the body
// once it had one: the anchor measured arrived − sent < 0 and signed
// rtt_us = 1, a bound of 150 m from anywhere on Earth. The anchor must
// read its clock when the whole answer has arrived.
func TestAttackAnswerHeadersSentBeforeTheNonce(t *testing.T) {
	f := newFixture(t)
	a, err := NewAnchor(f.anchorA, paris)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)

	// The answer's body is always this long.
	bodyLen := len(`{"nonce":"","host_sig":""}`) + 2*NonceSize + 2*64
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: anchor\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", AnswerPath, bodyLen)
	time.Sleep(100 * time.Millisecond) // the handler starts on the headers

	_, body := postJSON(t, srv, ChallengePath, ChallengeRequest{Host: f.host.Public(), Binding: f.binding})
	var ch Challenge
	if err := json.Unmarshal(body, &ch); err != nil {
		t.Fatal(err)
	}
	// The host is far away: its answer takes 20 ms more to arrive.
	const far = 20 * time.Millisecond
	time.Sleep(far)
	ans, _ := json.Marshal(Answer{Nonce: ch.Nonce, HostSig: f.host.Sign(AnswerBytes(ch.Nonce, ch.Anchor, f.binding))})
	if len(ans) != bodyLen {
		t.Fatalf("answer of %d bytes, want %d", len(ans), bodyLen)
	}
	if _, err := conn.Write(ans); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", resp.Status, out.Bytes())
	}
	var m Measurement
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Statement.RTT < far.Microseconds() {
		t.Fatalf("the anchor signed rtt_us %d (a bound of %d m) for a round trip of at least %d µs",
			m.Statement.RTT, BoundM(m.Statement.RTT), far.Microseconds())
	}
}

// Finding 2: a clock that goes backwards (WithClock takes any function)
// made a negative round trip, which the anchor signed as 1 µs. An
// interval the anchor cannot have measured is refused, never rounded up
// into the tightest bound there is.
func TestAttackClockBackwards(t *testing.T) {
	f := newFixture(t)
	now := time.Unix(1_767_225_600, 0)
	clock := func() time.Time { now = now.Add(-time.Millisecond); return now }
	a, _ := NewAnchor(f.anchorA, paris, WithClock(clock))
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	_, err := Measure(t.Context(), srv.URL, f.host, f.binding)
	if err == nil {
		t.Fatal("a round trip measured backwards was signed")
	}
	if !strings.Contains(err.Error(), "500") {
		t.Fatalf("%v, want a 500 from the anchor", err)
	}
}

// Finding 3: the anchor handed out nonces for a host key that names no
// one (all zero, or of small order, under which host signatures can be
// forged) and for the all-zero binding; it signed measurements no
// verifier may accept. It refuses such a challenge (400), saying why.
func TestAttackChallengeForWeakHostOrNoBinding(t *testing.T) {
	f := newFixture(t)
	a, _ := NewAnchor(f.anchorA, paris)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	var small key.Public
	small[0] = 1 // the identity point: of order 1
	for _, tc := range []struct {
		name string
		req  ChallengeRequest
		want string
	}{
		{"zero host key", ChallengeRequest{Binding: f.binding}, "host"},
		{"small-order host key", ChallengeRequest{Host: small, Binding: f.binding}, "host"},
		{"zero binding", ChallengeRequest{Host: f.host.Public()}, "binding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := postJSON(t, srv, ChallengePath, tc.req)
			if code != 400 || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s, want 400 naming %q", code, body, tc.want)
			}
		})
	}
}

// rawPost posts body as is.
func rawPost(t *testing.T, srv *httptest.Server, path string, body []byte) (int, string) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.String()
}

// Finding 4: the anchor read the first 4 KiB of a body and decoded the
// first JSON value in it: a body of megabytes was cut silently (and
// refused as "unexpected EOF"), and bytes after the value were ignored.
// A body over 4 KiB is 413, trailing bytes are 400, each saying so.
func TestAttackAnchorBodies(t *testing.T) {
	f := newFixture(t)
	a, _ := NewAnchor(f.anchorA, paris)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	req, _ := json.Marshal(ChallengeRequest{Host: f.host.Public(), Binding: f.binding})

	big := append(append([]byte{}, req[:len(req)-1]...), bytes.Repeat([]byte(" "), 1<<20)...)
	big = append(big, '}')
	if code, body := rawPost(t, srv, ChallengePath, big); code != 413 || !strings.Contains(body, "4096") {
		t.Errorf("a challenge of 1 MiB: %d %s, want 413 naming the limit", code, body)
	}
	if code, body := rawPost(t, srv, ChallengePath, append(append([]byte{}, req...), `{"more":1}`...)); code != 400 || !strings.Contains(body, "after") {
		t.Errorf("a challenge with trailing data: %d %s, want 400", code, body)
	}
	// Pinned: a duplicate member, a float, an unknown member: refused.
	for _, b := range []string{
		`{"host":"` + f.host.Public().String() + `","binding":"` + f.binding.String() + `","extra":1}`,
		`{"nonce":1.5,"host_sig":""}`,
	} {
		if code, _ := rawPost(t, srv, ChallengePath, []byte(b)); code != 400 {
			t.Errorf("%s: %d, want 400", b, code)
		}
	}
}

// Pinned: many open nonces. A flood fills MaxPending and the anchor
// answers 503, never grows without bound; the nonces it keeps are
// forgotten after AnswerWindow. (An unauthenticated client can hold the
// anchor at 503 for everyone by asking 4096 challenges every 10 s: the
// spec's limit bounds memory, not who gets served; an operator rate
// limits per client in front of it.)
func TestAttackPendingIsBounded(t *testing.T) {
	f := newFixture(t)
	clock := &fakeClock{t: time.Unix(1_767_225_600, 0), step: time.Microsecond}
	a, _ := NewAnchor(f.anchorA, paris, WithClock(clock.now))
	req := ChallengeRequest{Host: f.host.Public(), Binding: f.binding}
	body, _ := json.Marshal(req)
	for i := 0; i < MaxPending+100; i++ {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequest("POST", ChallengePath, bytes.NewReader(body)))
		if i >= MaxPending && w.Code != 503 {
			t.Fatalf("challenge %d: %d, want 503", i, w.Code)
		}
	}
	if n := len(a.pending); n != MaxPending {
		t.Fatalf("%d nonces pending, want %d", n, MaxPending)
	}
}

// Pinned: a measurement is good for one host key, one binding, one
// anchor. Replayed in a claim for another run or another host, or with
// its binding rewritten, it is refused; the same round trip twice in
// one claim is refused.
func TestAttackReuseAMeasurement(t *testing.T) {
	f := newFixture(t)
	near := Region{Centre: paris, RadiusM: 1_000_000}
	m := f.measure(t, f.anchorA, paris, 1000, nil)
	otherRun := addr.Of([]byte("another run"))
	otherHost := seeded(t, "accomplice")

	for _, tc := range []struct {
		name    string
		claim   []byte
		binding addr.Addr
		host    key.Public
		want    reject.Code
	}{
		{"for another run", mustClaim(t, f.host.Public(), otherRun, near, m), otherRun, f.host.Public(), reject.LocalityBinding},
		{"for another host", mustClaim(t, otherHost.Public(), f.binding, near, m), f.binding, otherHost.Public(), reject.LocalityHost},
		{"its binding rewritten", mustClaim(t, f.host.Public(), otherRun, near, rewrite(m, func(s *Statement) { s.Binding = otherRun })), otherRun, f.host.Public(), reject.Signature},
		{"its rtt rewritten", f.claim(t, near, rewrite(m, func(s *Statement) { s.RTT = 1 })), f.binding, f.host.Public(), reject.Signature},
		{"twice", f.claim(t, near, m, m), f.binding, f.host.Public(), reject.Invalid},
		{"its host re-signed for another run by the host, the anchor's signature kept", mustClaim(t, f.host.Public(), otherRun, near,
			rewrite(m, func(s *Statement) {
				s.Binding = otherRun
				s.HostSig = f.host.Sign(AnswerBytes(s.Nonce, s.Anchor, otherRun))
			})), otherRun, f.host.Public(), reject.Signature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.claim, f.anchors, tc.binding, tc.host)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %s", err, tc.want)
			}
		})
	}
}

func mustClaim(t *testing.T, host key.Public, b addr.Addr, r Region, ms ...Measurement) []byte {
	t.Helper()
	c, err := jcsClaim(Claim{Type: Type, Host: host, Binding: b, Region: r, Measurements: ms})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func jcsClaim(c Claim) ([]byte, error) { return jcs.Marshal(c) }

func rewrite(m Measurement, change func(*Statement)) Measurement {
	s := m.Statement
	s.Nonce = append(Hex{}, s.Nonce...)
	change(&s)
	return Measurement{Statement: s, Signature: m.Signature}
}

// Pinned: geometry at its edges. The antimeridian, the poles (where
// longitude says nothing), the largest and smallest numbers: no
// overflow, no NaN, distances that err farther.
func TestAttackGeometryEdges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     Position
		min, max int64 // GreatCircleM within [min, max]
	}{
		{"a micro-degree across the antimeridian", Position{Lon: 180_000_000}, Position{Lon: -180_000_000}, 0, 1},
		{"both poles' longitudes differ", Position{Lat: 90_000_000, Lon: 0}, Position{Lat: 90_000_000, Lon: 123_456_789}, 0, 1},
		{"south pole, any longitude", Position{Lat: -90_000_000, Lon: -180_000_000}, Position{Lat: -90_000_000, Lon: 180_000_000}, 0, 1},
		{"antipodes near the pole", Position{Lat: 89_999_999, Lon: 0}, Position{Lat: -89_999_999, Lon: 180_000_000}, 20_015_000, 20_015_115},
		{"one micro-degree", Position{}, Position{Lat: 1}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GreatCircleM(tc.a, tc.b)
			if g < tc.min || g > tc.max || GreatCircleM(tc.b, tc.a) != g {
				t.Fatalf("%d m, want %d to %d, symmetric", g, tc.min, tc.max)
			}
		})
	}
	if b := BoundM(MaxRTT); b != (MaxRTT*SpeedOfLightMPS+1_999_999)/2_000_000 || b <= 0 {
		t.Errorf("BoundM(MaxRTT) %d", b)
	}
	for _, r := range []int64{-1 << 63, -1, 0, MaxRTT + 1, 1<<63 - 1} {
		if b := BoundM(r); b < 0 || b > BoundM(MaxRTT) {
			t.Errorf("BoundM(%d) = %d", r, b)
		}
	}

	f := newFixture(t)
	good := f.measure(t, f.anchorA, paris, 1, nil)
	for _, tc := range []struct {
		name string
		r    Region
	}{
		{"radius 0", Region{Centre: paris, RadiusM: 0}},
		{"negative radius", Region{Centre: paris, RadiusM: -1}},
		{"radius past the antipode", Region{Centre: paris, RadiusM: MaxRadiusM + 1}},
		{"radius at int64's end", Region{Centre: paris, RadiusM: 1<<63 - 1}},
		{"latitude past the pole", Region{Centre: Position{Lat: 90_000_001}, RadiusM: 1}},
		{"longitude past the antimeridian", Region{Centre: Position{Lon: -180_000_001}, RadiusM: 1}},
		{"latitude at int64's end", Region{Centre: Position{Lat: -1 << 63}, RadiusM: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := jcsClaim(Claim{Type: Type, Host: f.host.Public(), Binding: f.binding, Region: tc.r, Measurements: []Measurement{good}})
			if err != nil {
				t.Skipf("not encodable: %v", err)
			}
			if _, err := Verify(c, f.anchors, f.binding, f.host.Public()); !errors.Is(err, reject.Invalid) && !errors.Is(err, reject.IntRange) {
				t.Fatalf("%v, want invalid", err)
			}
		})
	}
	// The whole sphere: the largest radius, an anchor at the centre's
	// antipode measured at the longest round trip: a margin, no overflow.
	anti := Position{Lat: -paris.Lat, Lon: paris.Lon - 180_000_000}
	far := f.measure(t, f.anchorB, anti, MaxRTT, nil)
	c := mustClaim(t, f.host.Public(), f.binding, Region{Centre: paris, RadiusM: MaxRadiusM}, far)
	res, err := Verify(c, []PublishedAnchor{{Key: f.anchorB.Public(), Position: anti}}, f.binding, f.host.Public())
	if !errors.Is(err, reject.LocalityTooFar) || res == nil || res.Bounds[0].MarginM >= 0 {
		t.Fatalf("%v %+v", err, res)
	}
}

// Pinned: the claim's bytes are canonical or refused, whatever the
// trick: a duplicate member, a float, an exponent, -0, a leading zero,
// whitespace, members out of order, deep nesting, 65 measurements.
func TestAttackClaimEncodings(t *testing.T) {
	f := newFixture(t)
	near := Region{Centre: paris, RadiusM: 1_000_000}
	good := f.claim(t, near, f.measure(t, f.anchorA, paris, 1000, nil))
	if _, err := Verify(good, f.anchors, f.binding, f.host.Public()); err != nil {
		t.Fatal(err)
	}
	rtt := []byte(`"rtt_us":1000`)
	if !bytes.Contains(good, rtt) {
		t.Fatalf("no %s in %s", rtt, good)
	}
	swap := func(old, new string) []byte { return bytes.Replace(good, []byte(old), []byte(new), 1) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"a duplicate member", swap(`"rtt_us":1000`, `"rtt_us":1,"rtt_us":1000`)},
		{"a float", swap(`"rtt_us":1000`, `"rtt_us":1000.0`)},
		{"an exponent", swap(`"rtt_us":1000`, `"rtt_us":1e3`)},
		{"a leading zero", swap(`"rtt_us":1000`, `"rtt_us":01000`)},
		{"minus zero", swap(`"radius_m":1000000`, `"radius_m":-0`)},
		{"whitespace", swap(`"rtt_us":1000`, `"rtt_us": 1000`)},
		{"members out of order", swap(`"at":1767225600,`, ``)},
		{"an escaped letter", swap(`"type":"sandbox.locality/1"`, `"type":"sandbox.locality\u002f1"`)},
		{"deep nesting", append(bytes.Repeat([]byte("["), 30000), bytes.Repeat([]byte("]"), 30000)...)},
		{"a number past 2^53", swap(`"rtt_us":1000`, `"rtt_us":9007199254740993`)},
		{"a number past int64", swap(`"rtt_us":1000`, `"rtt_us":99999999999999999999999`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Verify(tc.b, f.anchors, f.binding, f.host.Public())
			if err == nil {
				t.Fatal("accepted")
			}
			if time.Since(start) > time.Second {
				t.Errorf("took %s", time.Since(start))
			}
			t.Log(err)
		})
	}
	ms := make([]Measurement, MaxMeasurements+1)
	for i := range ms {
		ms[i] = f.measure(t, f.anchorA, paris, int64(1000+i), nil)
	}
	if _, err := Verify(f.claim(t, near, ms...), f.anchors, f.binding, f.host.Public()); !errors.Is(err, reject.Invalid) {
		t.Errorf("65 measurements: %v", err)
	}
}

// Pinned, and what it means (finding 5, the spec): a host key held by
// an accomplice near the anchor passes for a host near the anchor. The
// measurement says where the key's holder was; §1 says so ("a key shared
// with a machine near an anchor would pass for that machine") and leaves
// tying the key to one machine to the TEE report (S6).
func TestAttackRelayThroughAnAccompliceWithTheKey(t *testing.T) {
	f := newFixture(t)
	a, _ := NewAnchor(f.anchorA, paris)
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	// The accomplice in Paris holds the host key of a host in Sydney.
	m, err := Measure(t.Context(), srv.URL, f.host, f.binding)
	if err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, f.host.Public(), f.binding, Region{Centre: paris, RadiusM: 4_000_000}, m)
	if _, err := Verify(c, f.anchors, f.binding, f.host.Public()); err != nil {
		t.Fatalf("the key's holder was near: %v", err)
	}
}

// Finding 6: a nonce drawn again while it waits (a broken random
// source: WithRand takes any reader) replaced the waiting one, moving its
// `sent` and its host; a host that can predict nonces can answer early in
// any case, but the anchor never hands out a nonce that is waiting.
func TestAttackPredictableNonceAnsweredOnce(t *testing.T) {
	f := newFixture(t)
	a, _ := NewAnchor(f.anchorA, paris, WithRand(bytes.NewReader(make([]byte, 2*NonceSize))))
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	req := ChallengeRequest{Host: f.host.Public(), Binding: f.binding}
	code1, _ := postJSON(t, srv, ChallengePath, req)
	code2, _ := postJSON(t, srv, ChallengePath, req)
	if code1 != 200 || code2 != 500 {
		t.Fatalf("the same nonce twice: %d then %d, want 200 then 500", code1, code2)
	}
	if len(a.pending) != 1 {
		t.Fatalf("%d pending for one nonce drawn twice", len(a.pending))
	}
}
