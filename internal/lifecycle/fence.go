package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Facts are what the host observed of a sandbox at an idle deadline, a
// stuck run or an expiry, for the fence to decide on.
type Facts struct {
	View        View   // its lifecycle record, as read now
	Incarnation string // the live incarnation (its init's)
	Account     string // the sandbox's owner on this host (an unseeded record's owner)
	// Frozen: its cgroup read back FROZEN from the kernel; FrozenWhy
	// says why not.
	Frozen    bool
	FrozenWhy string
	// Activity: a request came for it since the idle clock was sampled,
	// in the same tick included.
	Activity bool
	// Running: execs still running (a stuck run).
	Running int
	// Checkpoint: the capture just taken, nil with CheckpointErr if it
	// failed; Verified once it was read back whole.
	Checkpoint    *Checkpoint
	CheckpointErr error
	Verified      bool
	// Now, and the idle window a checkpoint must outlive, with grace.
	Now     time.Time
	MaxIdle time.Duration
	Grace   time.Duration
}

// Verdict is the fence's answer: park (a durable suspension: nothing is
// erased), or retain (the sandbox stays as it is), with the reason. It
// never says destroy.
type Verdict struct {
	Park   bool
	Reason string
}

func retain(f string, a ...any) Verdict { return Verdict{Reason: fmt.Sprintf(f, a...)} }

// Admit is the part of the fence that needs no freeze and no capture:
// a sandbox it retains is retained as it is, untouched; one it admits
// still has to pass Decide with its quiescence and checkpoint.
func Admit(f *Facts) (v Verdict, ok bool) {
	if f == nil {
		return retain("no preservation fence: retained"), false
	}
	defer func() {
		if r := recover(); r != nil {
			v, ok = retain("the preservation fence failed (%v): retained", r), false
		}
	}()
	_, v, ok = admit(f)
	return v, ok
}

// admit checks the request clock, the owner, the incarnation, running
// execs and owed operations; it returns the owner's digest.
func admit(f *Facts) (string, Verdict, bool) {
	if f.Activity {
		return "", retain("a request came since the idle clock was sampled: retained"), false
	}
	var owner string
	switch f.View.Class {
	case Bound, Legacy:
		c, ok := f.View.Owner()
		if !ok {
			return "", retain("its owner cannot be proved: retained"), false
		}
		owner = c.Digest()
	case Unseeded:
		if f.Account == "" {
			return "", retain("an unseeded sandbox with no owner: retained"), false
		}
		owner = AccountDigest(f.Account)
	default:
		why := f.View.Reason
		if why == "" {
			why = "it proves no owner"
		}
		return "", retain("its lifecycle record is %s (%s): retained", f.View.Class, why), false
	}
	if r := f.View.Record; r != nil && r.Incarnation != f.Incarnation {
		return "", retain("its incarnation changed (the record names %s, the live one is %s): retained", r.Incarnation, f.Incarnation), false
	}
	if f.Running > 0 {
		return "", retain("%d exec(s) still running (a stuck run): its processes' memory cannot be kept, so it is retained", f.Running), false
	}
	if r := f.View.Record; r != nil {
		if owed := r.Window.Owed(); len(owed) > 0 {
			return "", retain("%d operation(s) on it have no known outcome: retained", len(owed)), false
		}
	}
	return owner, Verdict{}, true
}

// AccountDigest names an unseeded sandbox's owner in its checkpoint.
func AccountDigest(account string) string {
	s := sha256.Sum256([]byte("sandbox.account/1\x00" + account))
	return hex.EncodeToString(s[:])
}

// Decide is the preservation fence. A nil f is a missing fence: retain.
func Decide(f *Facts) (v Verdict) {
	if f == nil {
		return retain("no preservation fence: retained")
	}
	defer func() {
		if r := recover(); r != nil {
			v = retain("the preservation fence failed (%v): retained", r)
		}
	}()
	owner, v, ok := admit(f)
	if !ok {
		return v
	}
	if !f.Frozen {
		why := f.FrozenWhy
		if why == "" {
			why = "its cgroup is not frozen"
		}
		return retain("its quiescence cannot be proved (%s): retained", why)
	}
	switch cp := f.Checkpoint; {
	case f.CheckpointErr != nil:
		return retain("its checkpoint failed (%v): retained", f.CheckpointErr)
	case cp == nil:
		return retain("no checkpoint of it: retained")
	case !f.Verified:
		return retain("its checkpoint was not verified: retained")
	case cp.Owner != owner:
		return retain("its checkpoint is another owner's: retained")
	case cp.Incarnation != f.Incarnation:
		return retain("its checkpoint is of another incarnation: retained")
	case !cp.RetainUntil.After(f.Now.Add(f.MaxIdle + f.Grace)):
		return retain("its checkpoint is kept until %s, not beyond the idle window and its grace: retained", cp.RetainUntil.UTC().Format(time.RFC3339))
	}
	return Verdict{Park: true, Reason: "quiescent (frozen), owned, this incarnation, checkpoint complete and verified: parked"}
}
