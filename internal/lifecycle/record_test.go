package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const inc = "0123456789abcdef0123456789abcdef"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func bound(verified bool) *Record {
	c := claim()
	return &Record{V: Version, Sandbox: "sb-1", State: StateBound, Verified: verified, Incarnation: inc, Claim: &c,
		Origin: "https://git.example.com/acme/widgets.git",
		Seed:   &Seed{Source: "/src/widgets", Ref: c.Ref, Head: c.Head, Attempted: t0}}
}

func enc(t *testing.T, r *Record) []byte {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLifecycleCodecTellsRecordsApart: complete legacy, pending,
// bound-but-unverified, bound, closing, unseeded, unknown, malformed and
// unsupported-version records are each told apart, and only a bound,
// verified record or a complete legacy one yields an owner.
func TestLifecycleCodecTellsRecordsApart(t *testing.T) {
	c := claim()
	cp := &Checkpoint{Root: "blake3:00", Owner: c.Digest(), Incarnation: inc, Taken: t0, RetainUntil: t0.Add(48 * time.Hour)}
	legacyJSON, _ := json.Marshal(map[string]any{"owner": c, "checkpoint": cp})
	pending := &Record{V: Version, Sandbox: "sb-1", State: StatePending, Incarnation: inc, Seed: &Seed{Source: "/src", Ref: "main", Attempted: t0}}
	closing := bound(true)
	closing.State, closing.Verified = StateClosing, false
	unseeded := &Record{V: Version, Sandbox: "sb-1", State: StateUnseeded, Incarnation: inc}
	for _, tc := range []struct {
		name  string
		b     []byte
		class Class
		owner bool
	}{
		{"missing", nil, Unknown, false},
		{"legacy complete", legacyJSON, Legacy, true},
		{"legacy without checkpoint", []byte(`{"owner":` + string(must(json.Marshal(c))) + `}`), Malformed, false},
		{"legacy with a bad owner", []byte(`{"owner":{"run":""},"checkpoint":` + string(must(json.Marshal(cp))) + `}`), Malformed, false},
		{"pending", enc(t, pending), Pending, false},
		{"bound, unverified", enc(t, bound(false)), BoundUnverified, false},
		{"bound, verified", enc(t, bound(true)), Bound, true},
		{"closing", enc(t, closing), Closing, false},
		{"unseeded", enc(t, unseeded), Unseeded, false},
		{"unknown state", []byte(strings.Replace(string(enc(t, unseeded)), `"unseeded"`, `"archived"`, 1)), Unknown, false},
		{"version 2", []byte(`{"v":2,"anything":true}`), Unavailable, false},
		{"version 0", []byte(`{"v":0}`), Unavailable, false},
		{"version not a number", []byte(`{"v":"1"}`), Malformed, false},
		{"not JSON", []byte(`{"v":1,`), Malformed, false},
		{"an array", []byte(`[1]`), Malformed, false},
		{"unknown field", []byte(strings.Replace(string(enc(t, unseeded)), `"v": 1`, `"v": 1, "owner_override": true`, 1)), Malformed, false},
		{"bad incarnation", []byte(strings.Replace(string(enc(t, unseeded)), inc, "xyz", 1)), Malformed, false},
		{"verified but pending", []byte(strings.Replace(string(enc(t, pending)), `"v": 1`, `"v": 1, "verified": true`, 1)), Malformed, false},
		{"trailing data", append(enc(t, unseeded), []byte(` {}`)...), Malformed, false},
		{"too large", make([]byte, MaxRecord+1), Malformed, false},
	} {
		v := Decode(tc.b)
		if v.Class != tc.class {
			t.Errorf("%s: %s (%s), want %s", tc.name, v.Class, v.Reason, tc.class)
		}
		if _, ok := v.Owner(); ok != tc.owner {
			t.Errorf("%s: owner %v, want %v", tc.name, ok, tc.owner)
		}
		if (tc.class == Malformed || tc.class == Unavailable || tc.class == Unknown) && v.Reason == "" {
			t.Errorf("%s: no reason", tc.name)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestCheckpointUpdatePreservesOwnerOriginAndLifecycle: adding a
// checkpoint to a record keeps its owner, origin and state, and what is
// written reads back as the same record.
func TestCheckpointUpdatePreservesOwnerOriginAndLifecycle(t *testing.T) {
	r := bound(true)
	before := *r.Claim
	r.Checkpoint = &Checkpoint{Root: "blake3:ab", Owner: r.Claim.Digest(), Incarnation: inc, Taken: t0, RetainUntil: t0.Add(time.Hour)}
	v := Decode(enc(t, r))
	if v.Class != Bound || *v.Record.Claim != before || v.Record.Origin != r.Origin || v.Record.Seed.Head != before.Head || v.Checkpoint().Root != "blake3:ab" {
		t.Fatalf("%+v", v)
	}
	// Encode refuses what Decode would not read back as written.
	bad := bound(true)
	bad.Origin = "https://u:p@example.com/x"
	if _, err := Encode(bad); err == nil {
		t.Fatal("a record with a credential in its origin was written")
	}
	bad = bound(true)
	bad.V = 2
	if _, err := Encode(bad); err == nil {
		t.Fatal("a v2 record was written")
	}
}

// FuzzDecode: arbitrary bytes as a lifecycle record never panic, and an
// owner comes only from a bound, verified record or a complete legacy
// one; a record read as v1 writes back as the same class.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":2}`))
	c := claim()
	f.Add(must(json.Marshal(map[string]any{"owner": c, "checkpoint": Checkpoint{Root: "r", Owner: "o", Incarnation: inc, Taken: t0, RetainUntil: t0}})))
	for _, r := range []*Record{bound(true), bound(false)} {
		f.Add(must(Encode(r)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := Decode(b)
		if _, ok := v.Owner(); ok && v.Class != Bound && v.Class != Legacy {
			t.Fatalf("an owner from a %s record", v.Class)
		}
		if v.Record != nil {
			again, err := Encode(v.Record)
			if err != nil {
				t.Fatalf("read as %s, not written back: %v", v.Class, err)
			}
			if w := Decode(again); w.Class != v.Class {
				t.Fatalf("read as %s, written back as %s", v.Class, w.Class)
			}
		}
	})
}
