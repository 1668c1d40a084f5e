package verify

import (
	"slices"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// The reasons a claim gives for running away from the required tier; the
// rest of the reason is the requirement's own.
const (
	ReasonS0       = "; S0 on explicit request: trusted work, no confinement"
	ReasonEscalate = "; escalated on explicit request from "
)

// Rederive checks what a verifier can work out for itself against what
// the claim says: the required tier from the unit's kind and the grants;
// the chosen tier against it (equal, or S0 for an S1 unit, or higher,
// each only with the reason that says it was asked for; never S2 for a
// native unit, nor below S2 for a WASM one); every device class the unit
// asks for is granted and accounted in the receipt; and the receipt's
// interval is the run's. Errors are *reject.Error.
func Rederive(c *attest.Claim, u *unit.Unit, g *grant.Set, r *receipt.Receipt) error {
	need, err := u.Requirement(*g)
	if err != nil {
		return reject.New(reject.Invalid, "unit.devices", "%v", err)
	}
	t := c.Tier
	if t.Required != need.Tier {
		return reject.New(reject.Invalid, "claim.tier.required", "recorded %s; a %s unit under these grants requires %s (%s)", t.Required, u.Kind, need.Tier, need.Why)
	}
	switch {
	case t.Chosen == t.Required:
	case t.Chosen == tier.S0 && t.Required == tier.S1:
		if !strings.HasSuffix(t.Reason, ReasonS0) {
			return reject.New(reject.Invalid, "claim.tier.reason", "S0 is chosen only on explicit request, and the reason does not say so")
		}
	case t.Chosen > t.Required:
		if !strings.Contains(t.Reason, ReasonEscalate) {
			return reject.New(reject.Invalid, "claim.tier.reason", "a tier above the requirement is chosen only on explicit request, and the reason does not say so")
		}
	default:
		return reject.New(reject.Invalid, "claim.tier.chosen", "%s is below the required %s", t.Chosen, t.Required)
	}
	switch {
	case u.Kind == tier.Native && t.Chosen == tier.S2:
		return reject.New(reject.Invalid, "claim.tier.chosen", "a native unit cannot run at S2, which runs WebAssembly")
	case u.Kind == tier.Wasm && t.Chosen < tier.S2:
		return reject.New(reject.Invalid, "claim.tier.chosen", "a WASM unit runs at S2 or above, not %s", t.Chosen)
	}
	for _, d := range u.Devices {
		if !slices.ContainsFunc(r.Devices, func(rd receipt.Device) bool { return rd.Class == d }) {
			return reject.New(reject.Invalid, "receipt.devices", "the unit asks for %s, and the receipt accounts no %s (a receipt accounts per device class)", d, d)
		}
	}
	start, err1 := time.Parse(attest.TimeLayout, c.Started)
	end, err2 := time.Parse(attest.TimeLayout, c.Ended)
	if err1 != nil || err2 != nil {
		return reject.New(reject.Invalid, "claim.started", "unreadable times")
	}
	if uint64(start.UnixNano()) != r.StartNS || uint64(end.UnixNano()) != r.EndNS {
		return reject.New(reject.Invalid, "receipt.start_ns", "the receipt's interval %d..%d is not the run's, %s..%s", r.StartNS, r.EndNS, c.Started, c.Ended)
	}
	return nil
}
