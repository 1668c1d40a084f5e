package verify_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// knobs change one thing about a run before it is sealed.
type knobs struct {
	receiptUnit   *addr.Addr
	receiptSigner *key.Private
	unitGrants    *addr.Addr
	journal       *addr.Addr
}

// writeRun seals a small run into a fresh directory.
func writeRun(t *testing.T, k key.Private, kn knobs) string {
	t.Helper()
	g, _ := grant.ParseArgs([]string{"cpu:1J"}, "/")
	gb, ga, _ := g.Canonical()
	u := unit.Unit{Kind: tier.Wasm, Image: addr.Of([]byte("m")), Entry: "m.wasm", Grants: ga}
	if kn.unitGrants != nil {
		u.Grants = *kn.unitGrants
	}
	ub, ua, _ := u.Canonical()
	lb, la, _ := grant.NewEnforcer(g).Log().Canonical()
	r := receipt.Receipt{Unit: ua, StartNS: 1, EndNS: 2, Devices: []receipt.Device{{Class: device.CPU,
		Readings: []receipt.Reading{{Provenance: receipt.Estimator, Scope: receipt.ScopeRun, Source: "tdp", StartNS: 1, EndNS: 2, UJ: 5, Basis: "b"}}}}}
	if kn.receiptUnit != nil {
		r.Unit = *kn.receiptUnit
	}
	r.FillTotals()
	rk := k
	if kn.receiptSigner != nil {
		rk = *kn.receiptSigner
	}
	rb, err := receipt.Seal(&r, rk)
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	now := time.Unix(0, 1)
	a, err := attest.Seal(attest.Claim{
		Unit: ua, Image: u.Image, Grants: ga, Decisions: la, Receipt: addr.Of(rb), Journal: kn.journal,
		Tier: attest.Tier{Required: tier.S2, Chosen: tier.S2, Reason: "r"}, Executor: "test",
		Hardware: attest.Hardware{Host: attest.Host{OS: "linux", Arch: "amd64"}},
		Outcome:  attest.Outcome{Status: attest.Exited, ExitCode: &code}, Started: attest.Time(now), Ended: attest.Time(now.Add(1)),
	}, k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		verify.FileAttestation: a.Envelope, verify.FileReceipt: rb, verify.FileUnit: ub,
		verify.FileGrants: gb, verify.FileDecisions: lb,
	} {
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	return dir
}

func firstErr(rs []verify.Result) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func TestRunDirectory(t *testing.T) {
	k, other := vectors.TestKey(), vectors.OtherKey()
	v := &verify.Verifier{Trust: key.NewTrust(k.Public())}
	stray := addr.Of([]byte("stray"))
	j := addr.Of([]byte("journal root"))
	tests := []struct {
		name string
		kn   knobs
		want reject.Code
	}{
		{"good", knobs{}, ""},
		{"receipt for another unit", knobs{receiptUnit: &stray}, reject.Invalid},
		{"receipt by another key", knobs{receiptSigner: &other}, reject.UntrustedKey},
		{"unit binds other grants", knobs{unitGrants: &stray}, reject.Invalid},
		{"journal bound but no reader", knobs{journal: &j}, reject.Missing},
	}
	for _, tc := range tests {
		dir := writeRun(t, k, tc.kn)
		rs := v.Path(dir)
		err := firstErr(rs)
		if tc.want == "" {
			if err != nil || len(rs) != 6 {
				t.Errorf("%s: %d results, %v", tc.name, len(rs), err)
			}
			continue
		}
		if reject.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// A trusted other key still fails the signer match.
	v2 := &verify.Verifier{Trust: key.NewTrust(k.Public(), other.Public())}
	if err := firstErr(v2.Path(writeRun(t, k, knobs{receiptSigner: &other}))); reject.CodeOf(err) != reject.Invalid || !strings.Contains(err.Error(), "signed by") {
		t.Errorf("receipt by another trusted key: %v", err)
	}
}

// TestOutputsAreBound: stdout.log and stderr.log are checked against the
// journal's outcome entry: changed, cut short, extended, missing, and a
// file nothing binds are each refused with their own code.
func TestOutputsAreBound(t *testing.T) {
	k := vectors.TestKey()
	v := &verify.Verifier{Trust: key.NewTrust(k.Public())}
	stdout, stderr := []byte("hello, world\n"), []byte("")
	var jb bytes.Buffer
	w := journal.NewWriter(&jb)
	w.Append("clock.wall", nil, int64(1))
	w.Append(journal.OutcomeKind, nil, journal.Outcome{Status: "exited", Stdout: addr.Of(stdout), StdoutLen: uint64(len(stdout)), Stderr: addr.Of(stderr)})
	root := w.Root()
	write := func(out []byte, mutate func(dir string)) string {
		dir := writeRun(t, k, knobs{journal: &root})
		os.WriteFile(filepath.Join(dir, verify.FileJournal), jb.Bytes(), 0o644)
		os.WriteFile(filepath.Join(dir, verify.FileStdout), out, 0o644)
		os.WriteFile(filepath.Join(dir, verify.FileStderr), stderr, 0o644)
		if mutate != nil {
			mutate(dir)
		}
		return dir
	}
	tests := []struct {
		name   string
		out    []byte
		mutate func(string)
		want   reject.Code
	}{
		{"as written", stdout, nil, ""},
		{"changed", []byte("hello, World\n"), nil, reject.Address},
		{"cut short", stdout[:5], nil, reject.Truncated},
		{"extended", append(bytes.Clone(stdout), "forged\n"...), nil, reject.Extended},
		{"missing", stdout, func(d string) { os.Remove(filepath.Join(d, verify.FileStdout)) }, reject.Missing},
		{"stderr missing", stdout, func(d string) { os.Remove(filepath.Join(d, verify.FileStderr)) }, reject.Missing},
		{"a stray file", stdout, func(d string) { os.WriteFile(filepath.Join(d, "notes.txt"), nil, 0o644) }, reject.Unrecognised},
		{"journal changed", stdout, func(d string) { os.WriteFile(filepath.Join(d, verify.FileJournal), jb.Bytes()[:jb.Len()-1], 0o644) }, reject.Truncated},
	}
	for _, tc := range tests {
		rs := v.Path(write(tc.out, tc.mutate))
		err := firstErr(rs)
		if reject.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Without a journal nothing binds the outputs: they may not be there.
	dir := writeRun(t, k, knobs{})
	if err := firstErr(v.Path(dir)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, verify.FileStdout), stdout, 0o644)
	if err := firstErr(v.Path(dir)); reject.CodeOf(err) != reject.Unrecognised {
		t.Errorf("an output no journal binds: %v", err)
	}
}

// TestJournalOutcomeIsTheClaims: the journal's outcome entry says how
// the run ended, as the claim does, and what fuel it used, as the
// receipt does; where they differ the run is refused (invalid). A
// journal.cbor the claim does not bind is a file no record binds.
func TestJournalOutcomeIsTheClaims(t *testing.T) {
	k := vectors.TestKey()
	v := &verify.Verifier{Trust: key.NewTrust(k.Public())}
	stdout := []byte("hello, world\n")
	good := journal.Outcome{Status: "exited", Stdout: addr.Of(stdout), StdoutLen: uint64(len(stdout)), Stderr: addr.Of(nil)}
	write := func(o journal.Outcome) string {
		var jb bytes.Buffer
		w := journal.NewWriter(&jb)
		w.Append(journal.OutcomeKind, nil, o)
		root := w.Root()
		dir := writeRun(t, k, knobs{journal: &root})
		os.WriteFile(filepath.Join(dir, verify.FileJournal), jb.Bytes(), 0o644)
		os.WriteFile(filepath.Join(dir, verify.FileStdout), stdout, 0o644)
		os.WriteFile(filepath.Join(dir, verify.FileStderr), nil, 0o644)
		return dir
	}
	change := func(f func(*journal.Outcome)) journal.Outcome {
		o := good
		f(&o)
		return o
	}
	tests := []struct {
		name  string
		o     journal.Outcome
		want  reject.Code
		names string
	}{
		{"as the claim says", good, "", ""},
		{"another status", change(func(o *journal.Outcome) { o.Status = "killed"; o.ExitCode = -1 }), reject.Invalid, "status"},
		{"another exit code", change(func(o *journal.Outcome) { o.ExitCode = 1 }), reject.Invalid, "exit code"},
		{"no exit code for an exited run", change(func(o *journal.Outcome) { o.ExitCode = -1 }), reject.Invalid, "exit code"},
		{"fuel the receipt does not count", change(func(o *journal.Outcome) { o.Fuel = 7 }), reject.Invalid, "fuel"},
	}
	for _, tc := range tests {
		err := firstErr(v.Path(write(tc.o)))
		if reject.CodeOf(err) != tc.want || tc.want != "" && !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %v, want %q naming %s", tc.name, err, tc.want, tc.names)
		}
	}
	// A journal the claim does not bind: nothing vouches for it.
	dir := writeRun(t, k, knobs{})
	var jb bytes.Buffer
	journal.NewWriter(&jb).Append(journal.OutcomeKind, nil, good)
	os.WriteFile(filepath.Join(dir, verify.FileJournal), jb.Bytes(), 0o644)
	if err := firstErr(v.Path(dir)); reject.CodeOf(err) != reject.Unrecognised || !strings.Contains(err.Error(), "journal") {
		t.Errorf("a journal no claim binds: %v", err)
	}
}

func TestSingleFiles(t *testing.T) {
	k := vectors.TestKey()
	dir := writeRun(t, k, knobs{})
	v := &verify.Verifier{Trust: key.NewTrust(k.Public())}
	// Copied out of the run directory under other names, each is still recognised.
	tmp := t.TempDir()
	for name, kind := range map[string]string{
		verify.FileReceipt: verify.KindReceipt, verify.FileUnit: verify.KindUnit,
		verify.FileGrants: verify.KindGrants, verify.FileDecisions: verify.KindDecisions,
	} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		p := filepath.Join(tmp, "copy-of-"+name)
		os.WriteFile(p, b, 0o644)
		rs := v.Path(p)
		if len(rs) != 1 || rs[0].Kind != kind || rs[0].Err != nil || rs[0].Addr != addr.Of(b) {
			t.Errorf("%s: %+v", name, rs)
		}
	}
	// An attestation alone lacks its bound objects.
	b, _ := os.ReadFile(filepath.Join(dir, verify.FileAttestation))
	p := filepath.Join(tmp, "alone.json")
	os.WriteFile(p, b, 0o644)
	if err := firstErr(v.Path(p)); reject.CodeOf(err) != reject.Missing {
		t.Errorf("lone attestation: %v", err)
	}
	os.WriteFile(filepath.Join(tmp, "junk"), []byte("hello"), 0o644)
	if err := firstErr(v.Path(filepath.Join(tmp, "junk"))); reject.CodeOf(err) != reject.Unrecognised {
		t.Errorf("junk: %v", err)
	}
	if err := firstErr(v.Path(tmp)); reject.CodeOf(err) != reject.Missing {
		t.Errorf("directory without attestation: %v", err)
	}
	kp := filepath.Join(tmp, "k.pub")
	os.WriteFile(kp, []byte(k.Public().String()+"\n"), 0o644)
	if rs := v.Path(kp); rs[0].Err != nil || !strings.Contains(rs[0].Note, "(trusted)") {
		t.Errorf("key: %+v", rs)
	}
}

func FuzzRecognise(f *testing.F) {
	f.Add("x.json", []byte(`{"claim":{}}`))
	f.Add("y", []byte{0xd2, 0x84})
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		switch verify.Recognise(name, b) {
		case verify.KindAttestation, verify.KindReceipt, verify.KindUnit, verify.KindGrants,
			verify.KindDecisions, verify.KindKey, verify.KindUnknown:
		default:
			t.Fatal("unknown kind")
		}
	})
}

// TestRederive: what a verifier can work out for itself must agree with
// the claim.
func TestRederive(t *testing.T) {
	g, _ := grant.ParseArgs([]string{"cpu:1J", "gpu:5J"}, "/")
	kernel := g
	kernel.Kernel = true
	wasm := unit.Unit{Kind: tier.Wasm, Devices: []device.Class{device.CPU}}
	native := unit.Unit{Kind: tier.Native, Devices: []device.Class{device.CPU}}
	gpu := unit.Unit{Kind: tier.Native, Devices: []device.Class{device.CPU, device.GPU}}
	rc := receipt.Receipt{StartNS: 1, EndNS: 2, Devices: []receipt.Device{{Class: device.CPU}}}
	rcGPU := rc
	rcGPU.Devices = append(rcGPU.Devices, receipt.Device{Class: device.GPU})
	claim := func(req, chosen tier.Tier, reason string) *attest.Claim {
		return &attest.Claim{Tier: attest.Tier{Required: req, Chosen: chosen, Reason: reason},
			Started: attest.Time(time.Unix(0, 1)), Ended: attest.Time(time.Unix(0, 2))}
	}
	why := "a native unit runs at S1 (Capability)"
	tests := []struct {
		name string
		c    *attest.Claim
		u    unit.Unit
		g    grant.Set
		r    receipt.Receipt
		bad  string // "" when it must pass
	}{
		{"wasm at S2", claim(tier.S2, tier.S2, "a wasm unit runs at S2 (Sandbox)"), wasm, g, rc, ""},
		{"native at S1", claim(tier.S1, tier.S1, why), native, g, rc, ""},
		{"native at S0 on request", claim(tier.S1, tier.S0, why+verify.ReasonS0), native, g, rc, ""},
		{"native at S0 without saying so", claim(tier.S1, tier.S0, why), native, g, rc, "claim.tier.reason"},
		{"native escalated without saying so", claim(tier.S1, tier.S5, why), native, g, rc, "claim.tier.reason"},
		{"native escalated on request", claim(tier.S1, tier.S5, why+verify.ReasonEscalate+"S1 to S5"), native, g, rc, ""},
		{"native recorded as S2", claim(tier.S1, tier.S2, why+verify.ReasonEscalate+"S1 to S2"), native, g, rc, "claim.tier.chosen"},
		{"wasm required recorded as S1", claim(tier.S1, tier.S1, why), wasm, g, rc, "claim.tier.required"},
		{"kernel grant recorded below S5", claim(tier.S1, tier.S1, why), native, kernel, rc, "claim.tier.required"},
		{"a gpu unit without a gpu reading", claim(tier.S1, tier.S1, why), gpu, g, rc, "receipt.devices"},
		{"a gpu unit with one", claim(tier.S1, tier.S1, why), gpu, g, rcGPU, ""},
		{"a device not granted", claim(tier.S1, tier.S1, why), gpu, grant.Set{Compute: g.Compute[:1]}, rcGPU, "unit.devices"},
		{"the receipt's interval is not the run's", claim(tier.S1, tier.S1, why), native, g, receipt.Receipt{StartNS: 0, EndNS: 2, Devices: rc.Devices}, "receipt.start_ns"},
	}
	for _, tc := range tests {
		err := verify.Rederive(tc.c, &tc.u, &tc.g, &tc.r)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.bad != "" && (reject.CodeOf(err) != reject.Invalid || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want invalid at %s", tc.name, err, tc.bad)
		}
	}
}
