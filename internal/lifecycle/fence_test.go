package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// proved is a seeded sandbox with everything the fence needs proved.
func proved() *Facts {
	r := bound(true)
	return &Facts{
		View:        Decode(must(Encode(r))),
		Incarnation: inc,
		Account:     "local",
		Frozen:      true,
		Checkpoint:  &Checkpoint{Root: "blake3:aa", Owner: r.Claim.Digest(), Incarnation: inc, Taken: t0, RetainUntil: t0.Add(30 * time.Hour)},
		Verified:    true,
		Now:         t0,
		MaxIdle:     24 * time.Hour,
		Grace:       time.Hour,
	}
}

// TestFenceParksOnlyWhenEverythingIsProved: with quiescence, ownership,
// the incarnation and a complete verified checkpoint proved, the fence
// parks; take any one away and it retains, saying which.
func TestFenceParksOnlyWhenEverythingIsProved(t *testing.T) {
	if v := Decide(proved()); !v.Park {
		t.Fatalf("everything proved: %s", v.Reason)
	}
	u := proved()
	u.View = Decode(must(Encode(&Record{V: Version, Sandbox: "s", State: StateUnseeded, Incarnation: inc})))
	u.Checkpoint.Owner = AccountDigest("local")
	if v := Decide(u); !v.Park {
		t.Fatalf("an unseeded sandbox, everything proved: %s", v.Reason)
	}
	for name, tc := range map[string]struct {
		mut  func(*Facts)
		want string
	}{
		"not frozen (a process list or a model's word is no witness)": {func(f *Facts) { f.Frozen = false; f.FrozenWhy = "the model says it is idle" }, "quiescence"},
		"owner unproved: bound, unverified":                           {func(f *Facts) { f.View = Decode(must(Encode(bound(false)))) }, "bound-unverified"},
		"owner changed during the upload":                             {func(f *Facts) { f.Checkpoint.Owner = AccountDigest("mallory") }, "another owner"},
		"incarnation changed":                                         {func(f *Facts) { f.Incarnation = strings.Repeat("f", 32) }, "incarnation"},
		"checkpoint of another incarnation":                           {func(f *Facts) { f.Checkpoint.Incarnation = strings.Repeat("e", 32) }, "another incarnation"},
		"failed backup":                                               {func(f *Facts) { f.Checkpoint, f.CheckpointErr = nil, errors.New("no space left on device") }, "checkpoint failed"},
		"no backup":                                                   {func(f *Facts) { f.Checkpoint = nil }, "no checkpoint"},
		"unverified backup":                                           {func(f *Facts) { f.Verified = false }, "not verified"},
		"backup kept too short":                                       {func(f *Facts) { f.Checkpoint.RetainUntil = t0.Add(25 * time.Hour) }, "not beyond the idle window"},
		"operations owed":                                             {func(f *Facts) { f.View.Record.Window.Ops = []Op{{Actor: "a", State: OpLost}} }, "no known outcome"},
		"unseeded without an owner": {func(f *Facts) {
			f.View = Decode(must(Encode(&Record{V: Version, Sandbox: "s", State: StateUnseeded, Incarnation: inc})))
			f.Account = ""
		}, "no owner"},
	} {
		f := proved()
		tc.mut(f)
		if v := Decide(f); v.Park || !strings.Contains(v.Reason, tc.want) || !strings.Contains(v.Reason, "retained") {
			t.Errorf("%s: %+v, want retained for %q", name, v, tc.want)
		}
	}
}

// TestFenceRetainsWhenTheFenceIsMissingOrThrows: no fence, or a fence
// that fails, retains.
func TestFenceRetainsWhenTheFenceIsMissingOrThrows(t *testing.T) {
	if v := Decide(nil); v.Park {
		t.Fatal("a missing fence parked")
	}
	f := proved()
	f.View.Record = nil // a view whose record went missing under it
	f.View.Class = Bound
	if v := Decide(f); v.Park {
		t.Fatalf("a fence that could not read the record parked: %+v", v)
	}
	// A panic inside is a retain, never a park or a crash.
	g := proved()
	g.View.legacy = nil
	g.View.Class = Legacy
	if v := Decide(g); v.Park {
		t.Fatalf("%+v", v)
	}
}

// TestFenceRetainsAnIdleSeededWriterWhenPreservationIsUncertain: every
// record class that proves no owner (pending, bound-unverified,
// closing, unknown, malformed, unsupported) is retained, whatever else
// is proved.
func TestFenceRetainsAnIdleSeededWriterWhenPreservationIsUncertain(t *testing.T) {
	closing := bound(true)
	closing.State, closing.Verified = StateClosing, false
	pending := &Record{V: Version, Sandbox: "s", State: StatePending, Incarnation: inc, Seed: &Seed{Source: "/src", Ref: "main", Attempted: t0}}
	for _, b := range [][]byte{nil, []byte("{"), []byte(`{"v":9}`), must(Encode(pending)), must(Encode(bound(false))), must(Encode(closing)),
		[]byte(strings.Replace(string(must(Encode(bound(true)))), `"bound"`, `"archived"`, 1))} {
		f := proved()
		f.View = Decode(b)
		if v := Decide(f); v.Park {
			t.Errorf("%s record parked", f.View.Class)
		}
	}
}

// TestFenceRetainsAStuckInFlightWriter: an exec still running is a stuck
// run: its processes' memory cannot be kept, so it is retained, frozen
// or not.
func TestFenceRetainsAStuckInFlightWriter(t *testing.T) {
	f := proved()
	f.Running = 1
	if v := Decide(f); v.Park || !strings.Contains(v.Reason, "stuck") {
		t.Fatalf("%+v", v)
	}
}

// TestFenceRetainsOnASameTickRequest: a request that came since the
// idle clock was sampled retains, even when the clock did not advance.
func TestFenceRetainsOnASameTickRequest(t *testing.T) {
	f := proved()
	f.Activity = true
	f.Now = t0 // the same tick
	if v := Decide(f); v.Park || !strings.Contains(v.Reason, "request") {
		t.Fatalf("%+v", v)
	}
}

// TestAdmitRetainsWithoutAFreeze: what the fence can tell without a
// freeze or a capture (a request, no owner, another incarnation, a
// running exec, an owed operation) retains at Admit; what it cannot
// (quiescence, the checkpoint) is left to Decide.
func TestAdmitRetainsWithoutAFreeze(t *testing.T) {
	if _, ok := Admit(nil); ok {
		t.Fatal("a missing fence admitted")
	}
	f := proved()
	f.Frozen, f.Checkpoint = false, nil
	if v, ok := Admit(f); !ok {
		t.Fatalf("unfrozen, uncaptured, otherwise proved: %s", v.Reason)
	}
	if v := Decide(f); v.Park {
		t.Fatal("Decide parked what Admit let through unfrozen")
	}
	for name, mut := range map[string]func(*Facts){
		"request":     func(f *Facts) { f.Activity = true },
		"pending":     func(f *Facts) { f.View = Decode([]byte("{")) },
		"incarnation": func(f *Facts) { f.Incarnation = strings.Repeat("f", 32) },
		"running":     func(f *Facts) { f.Running = 2 },
		"owed":        func(f *Facts) { f.View.Record.Window.Ops = []Op{{Actor: "a", State: OpReserved}} },
	} {
		f := proved()
		mut(f)
		if _, ok := Admit(f); ok {
			t.Errorf("%s admitted", name)
		}
	}
}
