package lifecycle

import (
	"errors"
	"fmt"
	"testing"
)

func what(err error) string {
	var we *WindowError
	if errors.As(err, &we) {
		return we.What
	}
	return fmt.Sprint(err)
}

// TestWindowRefusesOverflowBeforeEffects: the 17th operation is refused
// and the window is as it was; detached work has slots of its own.
func TestWindowRefusesOverflowBeforeEffects(t *testing.T) {
	var w Window
	effects := 0
	do := func(op Op) error {
		if err := w.Reserve(op); err != nil {
			return err
		}
		effects++ // the operation's effect, only once admitted
		return nil
	}
	for i := range Slots {
		if err := do(Op{Actor: "a", Ordinal: uint64(i), Kind: "exec"}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(w.Ops)
	err := do(Op{Actor: "a", Ordinal: 99, Kind: "exec"})
	var we *WindowError
	if !errors.As(err, &we) || !we.Limit() || effects != Slots || len(w.Ops) != before {
		t.Fatalf("overflow: %v, %d effects, %d ops", err, effects, len(w.Ops))
	}
	if err := do(Op{Actor: "a", Ordinal: 100, Kind: "checkpoint", Detached: true}); err != nil {
		t.Fatalf("detached work shares the attached slots: %v", err)
	}
	// A settled operation keeps its slot until it is acknowledged.
	w.Settle(0, "a", 0, "ok")
	if what(do(Op{Actor: "a", Ordinal: 101})) != "full" {
		t.Fatal("a settled, unacknowledged operation's slot was reused")
	}
	if err := w.Ack(0, "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := do(Op{Actor: "a", Ordinal: 101}); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
}

// TestWindowMatchesGenerationActorOrdinal: a callback settles only the
// operation with its generation, actor and ordinal; a duplicate is
// idempotent, a conflicting one refused, an unknown one refused, and
// callbacks may come in any order.
func TestWindowMatchesGenerationActorOrdinal(t *testing.T) {
	var w Window
	for _, op := range []Op{{Actor: "a", Ordinal: 1}, {Actor: "a", Ordinal: 2}, {Actor: "b", Ordinal: 1}} {
		if err := w.Reserve(op); err != nil {
			t.Fatal(err)
		}
	}
	if what(w.Reserve(Op{Actor: "a", Ordinal: 1})) != "duplicate" {
		t.Fatal("a duplicate reservation was taken")
	}
	if what(w.Reserve(Op{Gen: 3, Actor: "c", Ordinal: 1})) != "generation" {
		t.Fatal("a reservation of another generation was taken")
	}
	// Out of order: 2 before 1.
	if dup, err := w.Settle(0, "a", 2, "ok"); dup || err != nil {
		t.Fatal(dup, err)
	}
	if dup, err := w.Settle(0, "a", 2, "ok"); !dup || err != nil {
		t.Fatalf("a duplicate callback: %v %v", dup, err)
	}
	if what(func() error { _, err := w.Settle(0, "a", 2, "failed"); return err }()) != "conflict" {
		t.Fatal("a conflicting callback was taken")
	}
	for _, c := range []struct {
		gen   uint64
		actor string
		ord   uint64
	}{{1, "a", 1}, {0, "c", 1}, {0, "a", 3}} {
		if _, err := w.Settle(c.gen, c.actor, c.ord, "ok"); what(err) != "unknown" {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	if op, _ := w.Lookup(0, "a", 1); op.State != OpReserved {
		t.Fatalf("an unmatched callback changed %+v", op)
	}
	if _, err := w.Settle(0, "a", 1, "ok"); err != nil {
		t.Fatal(err)
	}
}

// TestWindowKeepsResetLostObligations: a reset makes every unsettled
// operation lost, kept and owed; its late outcome settles it; it is
// never acknowledged before; and a lost acknowledgement is read again
// without the operation running again.
func TestWindowKeepsResetLostObligations(t *testing.T) {
	var w Window
	w.Reserve(Op{Actor: "a", Ordinal: 1, Kind: "exec"})
	w.Reserve(Op{Actor: "a", Ordinal: 2, Kind: "checkpoint", Detached: true})
	w.Reserve(Op{Actor: "a", Ordinal: 3, Kind: "exec"})
	w.Settle(0, "a", 3, "exit 0")
	w.Reset()
	if w.Gen != 1 {
		t.Fatal(w.Gen)
	}
	owed := w.Owed()
	if len(owed) != 2 || owed[0].State != OpLost || owed[1].State != OpLost || !owed[1].Detached {
		t.Fatalf("owed %+v", owed)
	}
	if what(w.Ack(0, "a", 1)) != "unsettled" {
		t.Fatal("a lost obligation was acknowledged")
	}
	// The settled one's acknowledgement was lost with the reset: read it.
	before := fmt.Sprintf("%+v", w)
	op, ok := w.Lookup(0, "a", 3)
	if !ok || op.Result != "exit 0" || op.State != OpSettled || fmt.Sprintf("%+v", w) != before {
		t.Fatalf("%+v: the read changed the window", op)
	}
	if _, err := w.Settle(0, "a", 1, "exit 3"); err != nil {
		t.Fatalf("a lost operation's late outcome: %v", err)
	}
	if _, err := w.Settle(0, "a", 2, "stored"); err != nil {
		t.Fatal(err)
	}
	if len(w.Owed()) != 0 {
		t.Fatal(w.Owed())
	}
	// A new reservation is of the new generation.
	if err := w.Reserve(Op{Gen: 1, Actor: "a", Ordinal: 1}); err != nil {
		t.Fatalf("the same actor and ordinal in a new generation: %v", err)
	}
	// The window survives its record: written and read back.
	r := &Record{V: Version, Sandbox: "s", State: StateUnseeded, Incarnation: inc, Window: w}
	v := Decode(enc(t, r))
	if v.Class != Unseeded || len(v.Record.Window.Ops) != len(w.Ops) || v.Record.Window.Gen != 1 {
		t.Fatalf("%+v", v)
	}
}

// TestWindowRecordRefusesImpossibleWindows: a stored window with too
// many operations, an operation from the future, an unknown state, a
// twice-held operation or a detached one among the attached is
// malformed.
func TestWindowRecordRefusesImpossibleWindows(t *testing.T) {
	for name, w := range map[string]Window{
		"too many":   {Ops: make([]Op, Slots+1)},
		"future":     {Gen: 1, Ops: []Op{{Gen: 2, Actor: "a", State: OpReserved}}},
		"state":      {Ops: []Op{{Actor: "a", State: "done"}}},
		"twice":      {Ops: []Op{{Actor: "a", State: OpReserved}, {Actor: "a", State: OpSettled}}},
		"wrong list": {Ops: []Op{{Actor: "a", State: OpReserved, Detached: true}}},
		"bad actor":  {Ops: []Op{{Actor: "", State: OpReserved}}},
	} {
		r := &Record{V: Version, Sandbox: "s", State: StateUnseeded, Incarnation: inc, Window: w}
		if _, err := Encode(r); err == nil {
			t.Errorf("%s: written", name)
		}
	}
}
