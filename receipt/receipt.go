package receipt

import (
	"fmt"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Version is the payload version this package writes and reads.
const Version = 1

// ContentType is the COSE content type of a JCR-1 payload.
const ContentType = "application/jcr-1+cbor"

// Provenance says how a reading was obtained.
type Provenance string

// The provenances.
const (
	HwShunt    Provenance = "HwShunt"
	ModelBased Provenance = "ModelBased"
	Estimator  Provenance = "Estimator"
)

// Scope says whether a reading counts towards the run's totals.
type Scope string

// The scopes.
const (
	// ScopeRun readings are the run's own energy and are summed.
	ScopeRun Scope = "run"
	// ScopeHost readings are whole-host context and are not summed.
	ScopeHost Scope = "host"
	// ScopeAlt readings are another model's figure for the run's own
	// energy (WASM fuel, say), shown beside the summed figure, not added.
	ScopeAlt Scope = "alt"
)

// Receipt is the payload of a JCR-1 envelope.
type Receipt struct {
	Version uint64     `cbor:"v"`
	Signer  key.Public `cbor:"signer"`
	// Unit is the content address of the unit of work that spent the energy.
	Unit    addr.Addr `cbor:"unit"`
	StartNS uint64    `cbor:"start_ns"` // Unix nanoseconds
	EndNS   uint64    `cbor:"end_ns"`
	// Fuel is the WASM fuel the run consumed, where it ran on a fuel-metered
	// executor.
	Fuel    *uint64  `cbor:"fuel,omitempty"`
	Devices []Device `cbor:"devices"`
}

// Device is the account for one device class.
type Device struct {
	Class     device.Class       `cbor:"class"`
	Measured  energy.Microjoules `cbor:"measured_uj"`
	Estimated energy.Microjoules `cbor:"estimated_uj"`
	Readings  []Reading          `cbor:"readings"`
}

// Reading is one figure from one source over one interval.
type Reading struct {
	Provenance Provenance         `cbor:"provenance"`
	Scope      Scope              `cbor:"scope"`
	Source     string             `cbor:"source"`
	StartNS    uint64             `cbor:"start_ns"`
	EndNS      uint64             `cbor:"end_ns"`
	UJ         energy.Microjoules `cbor:"uj"`
	// Basis states how a ModelBased or Estimator figure was computed
	// (the formula and its inputs). Required for those provenances.
	Basis string `cbor:"basis,omitempty"`
}

// Start returns the start of the receipt's interval.
func (r *Receipt) Start() time.Time { return time.Unix(0, int64(r.StartNS)).UTC() }

// End returns the end of the receipt's interval.
func (r *Receipt) End() time.Time { return time.Unix(0, int64(r.EndNS)).UTC() }

// Total returns measured plus estimated energy over all classes.
func (r *Receipt) Total() (energy.Microjoules, error) {
	var vs []energy.Microjoules
	for _, d := range r.Devices {
		vs = append(vs, d.Measured, d.Estimated)
	}
	return energy.Sum(vs...)
}

// Class returns the account for c, or nil.
func (r *Receipt) Class(c device.Class) *Device {
	for i := range r.Devices {
		if r.Devices[i].Class == c {
			return &r.Devices[i]
		}
	}
	return nil
}

// Sums returns the measured and estimated totals that readings imply.
func Sums(readings []Reading) (measured, estimated energy.Microjoules, err error) {
	for _, rd := range readings {
		if rd.Scope != ScopeRun {
			continue
		}
		switch rd.Provenance {
		case HwShunt:
			measured, err = energy.Add(measured, rd.UJ)
		default:
			estimated, err = energy.Add(estimated, rd.UJ)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return measured, estimated, nil
}

// FillTotals sets every class's totals to the sums of its readings.
func (r *Receipt) FillTotals() error {
	for i := range r.Devices {
		m, e, err := Sums(r.Devices[i].Readings)
		if err != nil {
			return fmt.Errorf("receipt: class %s: %w", r.Devices[i].Class, err)
		}
		r.Devices[i].Measured, r.Devices[i].Estimated = m, e
	}
	return nil
}

// Validate checks everything about r that does not need the signature:
// version, known and ordered classes, known provenances and scopes,
// intervals, a basis for every figure that is not a measurement, and totals
// that are the sums of their readings. Errors are *reject.Error.
func (r *Receipt) Validate() error {
	if r.Version != Version {
		return reject.New(reject.Invalid, "v", "version %d, want %d", r.Version, Version)
	}
	if r.Unit.IsZero() {
		return reject.New(reject.MissingField, "unit", "the unit address is zero")
	}
	if r.EndNS < r.StartNS {
		return reject.New(reject.Invalid, "end_ns", "interval ends (%d) before it starts (%d)", r.EndNS, r.StartNS)
	}
	if r.Fuel != nil && *r.Fuel == 0 {
		// Entering a module costs fuel: a fuel-metered run uses some; a
		// run that counted none omits the field.
		return reject.New(reject.Invalid, "fuel", "0: a run that counted no fuel omits fuel")
	}
	prev := -1
	for i, d := range r.Devices {
		where := fmt.Sprintf("devices[%d]", i)
		rank := d.Class.Rank()
		if rank < 0 {
			return reject.New(reject.Invalid, where+".class", "unknown device class %q", d.Class)
		}
		if rank <= prev {
			// A list a format sorts is non-canonical out of its order, as
			// everywhere (unit devices, grant lists, JSON members).
			return reject.New(reject.NonCanonical, where+".class", "class %s is repeated or out of canonical order", d.Class)
		}
		prev = rank
		for j, rd := range d.Readings {
			w := fmt.Sprintf("%s.readings[%d]", where, j)
			switch rd.Provenance {
			case HwShunt, ModelBased, Estimator:
			default:
				return reject.New(reject.Invalid, w+".provenance", "unknown provenance %q", rd.Provenance)
			}
			if rd.Scope != ScopeRun && rd.Scope != ScopeHost && rd.Scope != ScopeAlt {
				return reject.New(reject.Invalid, w+".scope", "unknown scope %q", rd.Scope)
			}
			if rd.Source == "" {
				return reject.New(reject.MissingField, w+".source", "a reading names its source")
			}
			if rd.EndNS < rd.StartNS {
				return reject.New(reject.Invalid, w+".end_ns", "interval ends before it starts")
			}
			if rd.Scope != ScopeHost && (rd.StartNS < r.StartNS || rd.EndNS > r.EndNS) {
				return reject.New(reject.Invalid, w+".start_ns", "a %s-scope reading is the run's own energy, so its interval %d..%d lies within the run's, %d..%d", rd.Scope, rd.StartNS, rd.EndNS, r.StartNS, r.EndNS)
			}
			if rd.Provenance != HwShunt && rd.Basis == "" {
				return reject.New(reject.MissingField, w+".basis", "a %s reading states its basis", rd.Provenance)
			}
		}
		m, e, err := Sums(d.Readings)
		if err != nil {
			return reject.New(reject.TotalMismatch, where, "readings overflow: %v", err)
		}
		if m != d.Measured {
			return reject.New(reject.TotalMismatch, where+".measured_uj", "%d, but its run-scope HwShunt readings sum to %d", d.Measured, m)
		}
		if e != d.Estimated {
			return reject.New(reject.TotalMismatch, where+".estimated_uj", "%d, but its run-scope ModelBased and Estimator readings sum to %d", d.Estimated, e)
		}
	}
	return nil
}
