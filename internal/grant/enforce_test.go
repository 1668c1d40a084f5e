package grant

import "testing"

// Since returns what was decided after a mark, a repeat of the last
// entry included.
func TestSinceMark(t *testing.T) {
	e := NewEnforcer(Set{})
	e.Note(KindNet, "connect", "a:1", true, "r")
	n, c := e.Mark()
	e.Note(KindNet, "connect", "a:1", true, "r") // a repeat: counted on the same entry
	e.Note(KindNet, "connect", "b:2", false, "no")
	got := e.Since(n, c)
	if len(got) != 2 || got[0].Target != "a:1" || got[0].Count != 1 || got[1].Target != "b:2" || got[1].Count != 1 {
		t.Fatalf("Since = %+v", got)
	}
	n, c = e.Mark()
	if got := e.Since(n, c); len(got) != 0 {
		t.Fatalf("nothing decided, Since = %+v", got)
	}
}

// ReplayInto notes each decision after the mark as many times as it was
// made, and nothing from before it.
func TestReplayInto(t *testing.T) {
	e := NewEnforcer(Set{})
	e.Note(KindNet, "connect", "a:1", true, "r")
	n, c := e.Mark()
	for range 3 {
		e.Note(KindNet, "connect", "b:2", false, "no")
	}
	into := NewEnforcer(Set{})
	e.ReplayInto(into, n, c)
	got := into.Since(0, 0)
	if len(got) != 1 || got[0].Target != "b:2" || got[0].Count != 3 || got[0].Allow {
		t.Fatalf("replayed %+v", got)
	}
}
