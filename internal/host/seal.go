package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hw"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/internal/trail"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// RecordFiles are the files of a run directory.
var RecordFiles = []string{verify.FileJournal, FileStdout, FileStderr, verify.FileUnit, verify.FileGrants, verify.FileDecisions, verify.FileReceipt, verify.FileAttestation}

// records are the files a run writes while it runs: its journal and its
// output, with their hashes.
type records struct {
	journal    *journal.Writer
	out, err   *os.File
	outH, errH *output // the whole streams
	outK, errK *output // the prefixes kept in out and err
}

// openRecords makes the files a run writes while it runs.
func openRecords(rec *store.Partial) (*records, error) {
	jf, err := rec.Create(verify.FileJournal)
	if err != nil {
		return nil, err
	}
	r := &records{journal: journal.NewWriter(jf), outH: newOutput(), errH: newOutput(), outK: newOutput(), errK: newOutput()}
	if r.out, err = rec.Create(FileStdout); err != nil {
		return nil, err
	}
	if r.err, err = rec.Create(FileStderr); err != nil {
		return nil, err
	}
	return r, nil
}

// outcomeOf is the journal's last entry for a run: how it ended and what
// it wrote; outK and errK are what its files kept (nil: all).
func outcomeOf(res *executor.Result, stdout, stderr, outK, errK *output) journal.Outcome {
	o := journal.Outcome{Status: string(res.Outcome.Status), ExitCode: -1,
		Stdout: stdout.Sum(), StdoutLen: stdout.n, Stderr: stderr.Sum(), StderrLen: stderr.n,
		StdoutKept: keptOf(stdout, outK), StderrKept: keptOf(stderr, errK)}
	if res.Outcome.ExitCode != nil {
		o.ExitCode = int64(*res.Outcome.ExitCode)
	}
	if res.Fuel != nil {
		o.Fuel = *res.Fuel
	}
	return o
}

// seal turns a run's result into its records: the journal's outcome, the
// decision log, the receipt and the attestation, signed, written beside
// the output, synced and committed under the attestation's address. A
// failure says the run ended but was not sealed (NotSealedError).
func (h *Host) seal(p *Plan, rec *store.Partial, f *records, enf *grant.Enforcer, res *executor.Result) (*Run, error) {
	notSealed := func(err error) error { return &NotSealedError{Result: res, Err: err} }
	if err := f.journal.Append(journal.OutcomeKind, nil, outcomeOf(res, f.outH, f.errH, f.outK, f.errK)); err != nil {
		return nil, notSealed(err)
	}
	if err := f.journal.Err(); err != nil {
		return nil, notSealed(err)
	}
	journalRoot := f.journal.Root()
	log := enf.Log()
	denied := int64(0)
	for _, d := range log.Decisions {
		if !d.Allow {
			denied += max(d.Count, 1)
		}
	}
	db, da, err := log.Canonical()
	if err != nil {
		return nil, notSealed(err)
	}
	rc := receipt.Receipt{Unit: p.ua, StartNS: uint64(res.Start.UnixNano()), EndNS: uint64(res.End.UnixNano()), Fuel: res.Fuel}
	for _, c := range device.Classes {
		if rs := res.Readings[c]; len(rs) > 0 {
			rc.Devices = append(rc.Devices, receipt.Device{Class: c, Readings: rs})
		}
	}
	if err := rc.FillTotals(); err != nil {
		return nil, notSealed(err)
	}
	rb, err := receipt.Seal(&rc, h.Key)
	if err != nil {
		return nil, notSealed(err)
	}
	hwd := hw.Describe(h.procRoot())
	hwd.Devices = append(hwd.Devices, h.Devices...)
	claim := attest.Claim{
		Unit: p.ua, Image: p.unit.Image, Grants: p.ga, Decisions: da, Receipt: addr.Of(rb), Journal: &journalRoot,
		Tier:     attest.Tier{Required: p.choice.Required, Chosen: p.choice.Chosen, Reason: p.choice.Reason},
		Executor: res.Executor, Hardware: hwd, Outcome: res.Outcome,
		Started: attest.Time(res.Start), Ended: attest.Time(res.End),
		Record: p.req.Record,
	}
	if p.decided != nil {
		id := p.decided.Decision.ID
		claim.JCP = &id
		if err := rec.Write(verify.FileJCPDecision, p.decided.Decision.Bytes); err != nil {
			return nil, notSealed(err)
		}
	}
	// An S7 run cites the audit trail's head before it, and is appended
	// to the trail once sealed, the trail held between (internal/trail).
	var tl trail.Trail
	if p.choice.Chosen == tier.S7 {
		var err error
		if tl, err = h.auditTrail(); err != nil {
			return nil, notSealed(fmt.Errorf("the S7 audit trail: %w", err))
		}
		prev, err := tl.Hold(context.Background())
		if err != nil {
			return nil, notSealed(fmt.Errorf("the S7 audit trail: %w", err))
		}
		defer tl.Release()
		claim.AuditPrev = &prev
	}
	for _, n := range append(res.Notes, p.req.Notes...) {
		if n != "" {
			claim.Notes = append(claim.Notes, n)
		}
	}
	// An S7 run's locality claim is made over the claim as it now
	// stands, and cited; then the evidence is obtained over the claim
	// that cites it (attest.LocalityBinding, attest.Binding).
	if lz, ok := p.ex.(executor.Localizer); ok && p.choice.Chosen == tier.S7 {
		cite, b, err := h.locality(lz, claim, p.grants.Locality)
		if err != nil {
			return nil, notSealed(err)
		}
		if err := rec.Write(verify.FileLocality, b); err != nil {
			return nil, notSealed(err)
		}
		claim.Locality = cite
	}
	// An S6 or S7 run's evidence is obtained last, bound to the claim as
	// it now stands, and cited by the claim the host signs.
	if ev, ok := p.ex.(executor.Evidencer); ok {
		binding, e, err := h.evidence(ev, claim)
		if err != nil {
			return nil, notSealed(err)
		}
		if err := rec.Write(verify.FileEvidence, e.Report); err != nil {
			return nil, notSealed(err)
		}
		cite := &attest.Evidence{Provider: e.Provider, Kind: e.Kind(), Report: addr.Of(e.Report), Software: e.Software}
		if classes := devicesBesidesCPU(p.unit.Devices); len(classes) > 0 {
			b, err := h.deviceEvidence(p.ex, classes, binding)
			if err != nil {
				return nil, notSealed(err)
			}
			if err := rec.Write(verify.FileDeviceEvidence, b); err != nil {
				return nil, notSealed(err)
			}
			a := addr.Of(b)
			cite.Devices = &a
		}
		claim.Evidence = cite
	}
	a, err := attest.Seal(claim, h.Key)
	if err != nil {
		return nil, notSealed(err)
	}
	for _, w := range []struct {
		name string
		b    []byte
	}{
		{verify.FileUnit, p.ub}, {verify.FileGrants, p.gb}, {verify.FileDecisions, db},
		{verify.FileReceipt, rb}, {verify.FileAttestation, a.Envelope},
	} {
		if err := rec.Write(w.name, w.b); err != nil {
			return nil, notSealed(err)
		}
	}
	row := store.Indexed(a, p.unit.Entry)
	final, err := rec.CommitIndexed(a.Addr, &row)
	var unsynced *store.UnsyncedError
	switch {
	case errors.As(err, &unsynced):
		return nil, err
	case err != nil:
		return nil, notSealed(err)
	}
	if tl != nil {
		if _, err := tl.Append(a.Addr, p.grants.Locality); err != nil {
			return nil, fmt.Errorf("run %s is sealed, but the S7 audit trail did not take it (the next S7 run's audit_prev will show the gap): %w", a.Addr, err)
		}
	}
	crash.At(crash.Sealed)
	r := &Run{ID: a.Addr, Dir: final, Attestation: a, Receipt: &rc, Result: res, Choice: p.choice, Denied: denied}
	r.Journal.Entries, r.Journal.Bytes = f.journal.Len()
	h.Logger().Info("run sealed", "run", a.Addr, "status", res.Outcome.Status, "dir", final)
	return r, nil
}

// evidence asks an S6 or S7 executor for evidence bound to claim, and
// returns the binding with it.
func (h *Host) evidence(ev executor.Evidencer, claim attest.Claim) ([64]byte, tee.Evidence, error) {
	data, err := attest.Binding(claim, h.Key.Public())
	if err != nil {
		return data, tee.Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), evidenceTimeout)
	defer cancel()
	e, err := ev.Evidence(ctx, data)
	if err != nil {
		return data, tee.Evidence{}, fmt.Errorf("the run's hardware evidence: %w", err)
	}
	if len(e.Report) == 0 || e.Kind() == "" {
		return data, tee.Evidence{}, fmt.Errorf("the run's hardware evidence: the provider %q gave no report of a known kind (platform %q)", e.Provider, e.Platform)
	}
	return data, e, nil
}

// deviceEvidence asks an S6 or S7 executor for the evidence of each
// device of classes it gave the run, over the binding's device nonce,
// and returns the device evidence file.
func (h *Host) deviceEvidence(ex executor.Executor, classes []device.Class, binding [64]byte) ([]byte, error) {
	de, ok := ex.(executor.DeviceEvidencer)
	if !ok {
		return nil, fmt.Errorf("%s gave the run %v and cannot have them vouch for themselves", ex.Name(), classes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), evidenceTimeout)
	defer cancel()
	es, err := de.DeviceEvidence(ctx, classes, attest.DeviceNonce(binding))
	if err != nil {
		return nil, fmt.Errorf("the run's device evidence: %w", err)
	}
	var d attest.Devices
	for _, e := range es {
		d.Devices = append(d.Devices, attest.DeviceReport{Class: e.Class, ID: e.ID, Kind: e.Kind, Report: hex.EncodeToString(e.Report), Chain: string(e.Chain)})
	}
	for _, c := range classes {
		if !slices.ContainsFunc(es, func(e tee.DeviceEvidence) bool { return e.Class == c }) {
			return nil, fmt.Errorf("the run's device evidence: no %s vouched for itself", c)
		}
	}
	return d.Encode()
}

// devicesBesidesCPU are the device classes of a unit other than the CPU.
func devicesBesidesCPU(cs []device.Class) []device.Class {
	var out []device.Class
	for _, c := range cs {
		if c != device.CPU {
			out = append(out, c)
		}
	}
	return out
}

// locality asks an S7 executor for a locality claim bound to claim.
func (h *Host) locality(lz executor.Localizer, claim attest.Claim, region string) (*attest.LocalityCite, []byte, error) {
	if region == "" {
		return nil, nil, errors.New("an S7 run without a locality grant names no region")
	}
	binding, err := attest.LocalityBinding(claim, h.Key.Public())
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), evidenceTimeout)
	defer cancel()
	b, err := lz.Locality(ctx, region, h.Key, binding)
	if err != nil {
		return nil, nil, fmt.Errorf("the run's locality claim (region %s): %w", region, err)
	}
	return &attest.LocalityCite{Claim: addr.Of(b), Region: region}, b, nil
}

// evidenceTimeout bounds how long a provider may take to report (the
// kernel's configfs-tsm asks the platform's firmware: milliseconds).
const evidenceTimeout = 30 * time.Second

// auditTrail is the S7 audit trail: the cluster's (h.Trail), or the
// host's own (STATE/audit.jsonl), opened (replayed) once.
func (h *Host) auditTrail() (trail.Trail, error) {
	if h.Trail != nil {
		return h.Trail, nil
	}
	h.trailOnce.Do(func() { h.trail, h.trailErr = trail.Open(h.Store.Path("audit.jsonl")) })
	return h.trail, h.trailErr
}
