package lifecycle

import "fmt"

// Slots is how many operations a window holds at once, attached and
// detached work each.
const Slots = 16

// The states of an operation in a window.
const (
	OpReserved = "reserved" // admitted, its outcome not yet known
	OpSettled  = "settled"  // its outcome is known, not yet acknowledged
	OpLost     = "lost"     // reserved before a reset: its outcome unknown, still owed
)

// Op is one operation on a sandbox: its generation (the window's at
// its reservation), who asked (actor) and their ordinal for it.
type Op struct {
	Gen      uint64 `json:"gen"`
	Actor    string `json:"actor"`
	Ordinal  uint64 `json:"ordinal"`
	Kind     string `json:"kind"`
	Detached bool   `json:"detached,omitempty"`
	State    string `json:"state"`
	Result   string `json:"result,omitempty"`
}

// Window is a fixed window of operations: at most Slots attached and
// Slots detached ones, each kept until its outcome is acknowledged.
type Window struct {
	Gen      uint64 `json:"gen"`
	Ops      []Op   `json:"ops,omitempty"`
	Detached []Op   `json:"detached,omitempty"`
}

// WindowError is an operation the window refused; nothing changed.
type WindowError struct {
	Op   Op
	What string // "full", "generation", "duplicate", "unknown", "conflict", "unsettled", "invalid"
	Msg  string
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("operation %s #%d of %s (generation %d): %s", e.Op.Kind, e.Op.Ordinal, e.Op.Actor, e.Op.Gen, e.Msg)
}

// Limit reports whether the window was full.
func (e *WindowError) Limit() bool { return e.What == "full" }

// Invalid reports whether the operation did not match the window.
func (e *WindowError) Invalid() bool { return e.What != "full" }

// locate is where the operation with this generation, actor and
// ordinal is: its list and index.
func (w *Window) locate(gen uint64, actor string, ordinal uint64) (*[]Op, int) {
	for _, l := range []*[]Op{&w.Ops, &w.Detached} {
		for i, op := range *l {
			if op.Gen == gen && op.Actor == actor && op.Ordinal == ordinal {
				return l, i
			}
		}
	}
	return nil, -1
}

func (w *Window) find(gen uint64, actor string, ordinal uint64) (*Op, bool) {
	l, i := w.locate(gen, actor, ordinal)
	if l == nil {
		return nil, false
	}
	return &(*l)[i], true
}

// Reserve admits op before it has any effect, or refuses it: a full
// window (attached and detached work have their own slots), a
// generation that is not the window's, an (actor, ordinal) already in
// the window.
func (w *Window) Reserve(op Op) error {
	if err := identity("actor", op.Actor); err != nil {
		return &WindowError{Op: op, What: "invalid", Msg: err.Error()}
	}
	if op.Gen != w.Gen {
		return &WindowError{Op: op, What: "generation", Msg: fmt.Sprintf("the window is at generation %d", w.Gen)}
	}
	if _, ok := w.find(op.Gen, op.Actor, op.Ordinal); ok {
		return &WindowError{Op: op, What: "duplicate", Msg: "already in the window"}
	}
	l := &w.Ops
	if op.Detached {
		l = &w.Detached
	}
	if len(*l) >= Slots {
		kind := "attached"
		if op.Detached {
			kind = "detached"
		}
		return &WindowError{Op: op, What: "full", Msg: fmt.Sprintf("all %d %s slots hold operations not yet acknowledged", Slots, kind)}
	}
	op.State, op.Result = OpReserved, ""
	*l = append(*l, op)
	return nil
}

// Settle records the outcome of the operation with exactly this
// generation, actor and ordinal, in whatever order callbacks come. A
// repeated callback with the same outcome is a duplicate (dup: nothing
// changes); with another outcome it is refused. A callback for an
// operation the window does not hold is refused. A lost operation's
// late outcome settles it.
func (w *Window) Settle(gen uint64, actor string, ordinal uint64, result string) (dup bool, err error) {
	op, ok := w.find(gen, actor, ordinal)
	if !ok {
		return false, &WindowError{Op: Op{Gen: gen, Actor: actor, Ordinal: ordinal}, What: "unknown", Msg: "the window holds no such operation"}
	}
	if op.State == OpSettled {
		if op.Result == result {
			return true, nil
		}
		return false, &WindowError{Op: *op, What: "conflict", Msg: fmt.Sprintf("settled already as %q, now %q", op.Result, result)}
	}
	op.State, op.Result = OpSettled, result
	return false, nil
}

// Lookup reads an operation's state and outcome without doing anything
// again: a caller that lost the acknowledgement reads it here.
func (w *Window) Lookup(gen uint64, actor string, ordinal uint64) (Op, bool) {
	op, ok := w.find(gen, actor, ordinal)
	if !ok {
		return Op{}, false
	}
	return *op, true
}

// Ack frees a settled operation's slot: its outcome was read. An
// operation still owed (reserved, lost) is not acknowledged.
func (w *Window) Ack(gen uint64, actor string, ordinal uint64) error {
	l, i := w.locate(gen, actor, ordinal)
	if l == nil {
		return &WindowError{Op: Op{Gen: gen, Actor: actor, Ordinal: ordinal}, What: "unknown", Msg: "the window holds no such operation"}
	}
	if op := (*l)[i]; op.State != OpSettled {
		return &WindowError{Op: op, What: "unsettled", Msg: "it is " + op.State + ": an obligation is kept until it settles"}
	}
	*l = append((*l)[:i], (*l)[i+1:]...)
	return nil
}

// Reset starts a new generation (a restart): every operation reserved
// and not settled becomes lost, an obligation kept in its slot until
// its outcome is known.
func (w *Window) Reset() {
	w.Gen++
	for _, l := range [][]Op{w.Ops, w.Detached} {
		for i := range l {
			if l[i].State == OpReserved {
				l[i].State = OpLost
			}
		}
	}
}

// Owed is every operation whose outcome is not known: reserved or lost,
// attached or detached.
func (w *Window) Owed() []Op {
	var out []Op
	for _, l := range [][]Op{w.Ops, w.Detached} {
		for _, op := range l {
			if op.State != OpSettled {
				out = append(out, op)
			}
		}
	}
	return out
}

func (w *Window) check() error {
	if len(w.Ops) > Slots || len(w.Detached) > Slots {
		return invalid("window", "more than %d operations", Slots)
	}
	type key struct {
		gen     uint64
		actor   string
		ordinal uint64
	}
	seen := map[key]bool{}
	for _, l := range []struct {
		ops      []Op
		detached bool
	}{{w.Ops, false}, {w.Detached, true}} {
		for _, op := range l.ops {
			if op.Detached != l.detached {
				return invalid("window", "operation %s #%d is in the wrong list", op.Actor, op.Ordinal)
			}
			if op.Gen > w.Gen {
				return invalid("window", "operation %s #%d is of generation %d, after the window's %d", op.Actor, op.Ordinal, op.Gen, w.Gen)
			}
			switch op.State {
			case OpReserved, OpSettled, OpLost:
			default:
				return invalid("window", "operation %s #%d: state %q", op.Actor, op.Ordinal, op.State)
			}
			if err := identity("actor", op.Actor); err != nil {
				return invalid("window", "%v", err)
			}
			k := key{op.Gen, op.Actor, op.Ordinal}
			if seen[k] {
				return invalid("window", "operation %s #%d twice", op.Actor, op.Ordinal)
			}
			seen[k] = true
		}
	}
	return nil
}
