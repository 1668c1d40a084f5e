package vectors

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// The published keys: RFC 8032 section 7.1, tests 1 and 2.
const (
	TestSeedHex  = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	OtherSeedHex = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"
)

// ManifestType is the type tag of manifest.json.
const ManifestType = "sandbox.conformance/1"

// Expect values other than reject codes.
const ExpectOK = "ok"

// Entry is one vector of the pack.
type Entry struct {
	Name   string     `json:"name"`
	Path   string     `json:"path"` // relative to the pack root: a file or a run directory
	Kind   string     `json:"kind"`
	Expect string     `json:"expect"` // "ok" or the reject code of the first failure
	Addr   *addr.Addr `json:"address,omitempty"`
	About  string     `json:"about"`
}

// Manifest lists the pack: its vectors, and every file of it (but
// itself) pinned by content address, so that no file of the pack, a
// case inside a multi-case file included, can change unseen.
type Manifest struct {
	Type       string     `json:"type"`
	TrustedKey key.Public `json:"trusted_key"`
	Entries    []Entry    `json:"entries"`
	Files      []PackFile `json:"files"`
}

// PackFile is one file of the pack and its BLAKE3 content address.
type PackFile struct {
	Path string    `json:"path"` // relative to the pack root, with "/"
	Addr addr.Addr `json:"address"`
}

// AddressVector is one content-address vector.
type AddressVector struct {
	Input   string    `json:"input_hex"`
	Address addr.Addr `json:"address"`
}

// TestKey returns the published test key.
func TestKey() key.Private { return mustSeed(TestSeedHex) }

// OtherKey returns the published key that verifiers are not told to trust.
func OtherKey() key.Private { return mustSeed(OtherSeedHex) }

func mustSeed(h string) key.Private {
	b, _ := hex.DecodeString(h)
	k, err := key.FromSeed(b)
	if err != nil {
		panic(err)
	}
	return k
}

// run is one complete set of run records.
type run struct {
	files map[string][]byte
	claim attest.Claim
	rcpt  receipt.Receipt
	unitB []byte
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// parts are a run's records before they are sealed, for a vector to
// change one thing about them.
type parts struct {
	g       grant.Set
	u       unit.Unit
	log     func(*grant.Enforcer)
	r       receipt.Receipt
	c       attest.Claim
	entries int // input entries of the journal before its outcome
	// outcome changes the journal's outcome entry; unbound leaves the
	// journal out of the claim (and the outputs out of the directory).
	outcome func(*journal.Outcome)
	unbound bool
}

// sampleRun builds the records of one fixed run, signed by k.
func sampleRun(k key.Private) (*run, error) { return sampleRunWith(k, nil) }

// sampleRunWith builds the fixed run with change applied to its parts
// before anything is sealed, so that every record is consistent but for
// what change changed.
func sampleRunWith(k key.Private, change func(*parts)) (*run, error) {
	g, err := grant.ParseArgs([]string{
		"fs:/work:rw:quota=1MiB", "fs:/data:ro", "kv:cache:rw", "clock", "cpu:5J",
		"exec:deny:" + addr.Of([]byte("a denied binary")).String(),
	}, "/")
	if err != nil {
		return nil, err
	}
	g.Net = []grant.Net{{Host: "api.example.com", Port: 443, Inject: []grant.Inject{{Header: "Authorization", Secret: "env:API_TOKEN"}}}}
	fuel := uint64(1_234_567)
	start, end := uint64(t0.UnixNano()), uint64(t0.Add(250*time.Millisecond).UnixNano())
	zero := 0
	pt := &parts{
		g: g,
		u: unit.Unit{
			Kind: tier.Wasm, Image: addr.Of([]byte("conformance module")), Entry: "hello.wasm",
			Args: []string{"hello.wasm", "world"}, Env: map[string]string{"LANG": "C"},
			Devices: []device.Class{device.CPU},
			Limits:  unit.Limits{DeadlineMS: 60_000, MemoryPages: 4096},
		},
		log: func(e *grant.Enforcer) {
			e.File("/data/input.txt", false)
			e.File("/data/input.txt", false)
			e.File("/etc/shadow", false)
			e.KV("cache", true)
			e.Clock()
			e.Random()
			e.Connect("evil.example.net", 443)
		},
		r: receipt.Receipt{
			StartNS: start, EndNS: end, Fuel: &fuel,
			Devices: []receipt.Device{{Class: device.CPU, Readings: []receipt.Reading{
				{Provenance: receipt.ModelBased, Scope: receipt.ScopeAlt, Source: "wasm-fuel", StartNS: start, EndNS: end,
					UJ: 24_691, Basis: "fuel 1234567 × 0.02 µJ per unit (model wasm-fuel/1, calibrated on the reference host)"},
				{Provenance: receipt.Estimator, Scope: receipt.ScopeRun, Source: "tdp", StartNS: start, EndNS: end,
					UJ: 3 * energy.Joule, Basis: "wall 0.25 s × 12 W per core (configured TDP)"},
			}}},
		},
		c: attest.Claim{
			Tier:     attest.Tier{Required: tier.S2, Chosen: tier.S2, Reason: "a wasm unit runs at S2 (Sandbox)"},
			Executor: "conformance/v1",
			Hardware: attest.Hardware{
				Host:    attest.Host{Name: "conformance-host", OS: "linux", Arch: "amd64", Kernel: "6.1.0", CPU: "Example CPU"},
				Devices: []attest.Device{{Class: device.CPU, Model: "Example CPU", Driver: "linux"}},
			},
			Outcome: attest.Outcome{Status: attest.Exited, ExitCode: &zero},
			Started: attest.Time(t0), Ended: attest.Time(t0.Add(250 * time.Millisecond)),
		},
		entries: 1,
	}
	if change != nil {
		change(pt)
	}
	gb, ga, err := pt.g.Canonical()
	if err != nil {
		return nil, err
	}
	u := pt.u
	u.Grants = ga
	ub, ua, err := u.Canonical()
	if err != nil {
		return nil, err
	}
	e := grant.NewEnforcer(pt.g)
	pt.log(e)
	db, da, err := e.Log().Canonical()
	if err != nil {
		return nil, err
	}
	r := pt.r
	r.Unit = ua
	if err := r.FillTotals(); err != nil {
		return nil, err
	}
	rb, err := receipt.Seal(&r, k)
	if err != nil {
		return nil, err
	}
	stdout, stderr := []byte("hello, world\n"), []byte{}
	var jb bytes.Buffer
	jw := journal.NewWriter(&jb)
	for i := 0; i < pt.entries; i++ {
		if err := jw.Append("clock.wall", nil, int64(t0.UnixNano())+int64(i)); err != nil {
			return nil, err
		}
	}
	var fuelUsed uint64
	if r.Fuel != nil {
		fuelUsed = *r.Fuel
	}
	o := journal.Outcome{Status: string(attest.Exited), ExitCode: 0,
		Stdout: addr.Of(stdout), StdoutLen: uint64(len(stdout)), Stderr: addr.Of(stderr), Fuel: fuelUsed}
	if pt.outcome != nil {
		pt.outcome(&o)
	}
	if err := jw.Append(journal.OutcomeKind, nil, o); err != nil {
		return nil, err
	}
	root := jw.Root()
	c := pt.c
	c.Unit, c.Image, c.Grants, c.Decisions, c.Receipt, c.Journal = ua, u.Image, ga, da, addr.Of(rb), &root
	if pt.unbound {
		c.Journal = nil
	}
	a, err := attest.Seal(c, k)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		verify.FileAttestation: a.Envelope,
		verify.FileReceipt:     rb,
		verify.FileUnit:        ub,
		verify.FileGrants:      gb,
		verify.FileDecisions:   db,
		verify.FileJournal:     jb.Bytes(),
		verify.FileStdout:      stdout,
		verify.FileStderr:      stderr,
	}
	if pt.unbound {
		delete(files, verify.FileStdout)
		delete(files, verify.FileStderr)
	}
	return &run{files: files, claim: a.Claim, rcpt: r, unitB: ub}, nil
}

// pack accumulates files and manifest entries.
type pack struct {
	files   map[string][]byte
	entries []Entry
}

func (p *pack) add(e Entry, files map[string][]byte) {
	for name, b := range files {
		p.files[name] = b
	}
	p.entries = append(p.entries, e)
}

func (p *pack) runDir(dir string, files map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for n, b := range files {
		out[dir+"/"+n] = b
	}
	return out
}

// Generate returns every file of the pack, by path relative to its root.
func Generate() (map[string][]byte, error) {
	k, other := TestKey(), OtherKey()
	good, err := sampleRun(k)
	if err != nil {
		return nil, err
	}
	p := &pack{files: map[string][]byte{}}
	p.files["keys/test-key.pub"] = []byte(k.Public().String() + "\n")
	p.files["keys/test-key.seed"] = k.MarshalText()
	p.files["keys/other-key.pub"] = []byte(other.Public().String() + "\n")

	// Positives.
	p.add(Entry{Name: "run", Path: "positive/run", Kind: "run", Expect: ExpectOK,
		About: "a complete run directory: attestation, receipt, unit, grants and decision log"},
		p.runDir("positive/run", good.files))
	claimAddr := addrPtr(attestAddr(good.files[verify.FileAttestation]))
	p.entries[len(p.entries)-1].Addr = claimAddr
	for _, f := range []struct{ name, kind, about string }{
		{verify.FileReceipt, verify.KindReceipt, "a JCR-1 energy receipt (COSE_Sign1, EdDSA, core-deterministic CBOR)"},
		{verify.FileUnit, verify.KindUnit, "a unit of work in canonical JSON"},
		{verify.FileGrants, verify.KindGrants, "a grant set in canonical JSON"},
		{verify.FileDecisions, verify.KindDecisions, "an enforcer decision log in canonical JSON"},
	} {
		a := addr.Of(good.files[f.name])
		p.add(Entry{Name: f.kind, Path: "positive/run/" + f.name, Kind: f.kind, Expect: ExpectOK, Addr: &a, About: f.about}, nil)
	}
	pub := k.Public().ID()
	p.add(Entry{Name: "key", Path: "keys/test-key.pub", Kind: verify.KindKey, Expect: ExpectOK, Addr: &pub,
		About: "the published test key (RFC 8032 test 1); its id is the content address of its 32 bytes"}, nil)

	// The same receipt payload under the fully specified Ed25519 algorithm (-19).
	payload, err := payloadOf(good.files[verify.FileReceipt])
	if err != nil {
		return nil, err
	}
	alg19, err := receipt.SealPayload(payload, k, receipt.AlgEd25519, nil)
	if err != nil {
		return nil, err
	}
	a19 := addr.Of(alg19)
	p.add(Entry{Name: "receipt-alg-ed25519", Path: "positive/receipt-alg-ed25519.cose", Kind: verify.KindReceipt, Expect: ExpectOK, Addr: &a19,
		About: "the same receipt signed under alg -19 (Ed25519, RFC 9864), which verifiers accept"},
		map[string][]byte{"positive/receipt-alg-ed25519.cose": alg19})

	plain, err := plainVector(good.files[verify.FileAttestation], k.Public())
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "attestation-ed25519-jcs", Path: "positive/attestation-ed25519-jcs.json", Kind: KindEd25519JCS, Expect: ExpectOK, Addr: claimAddr,
		About: "the run's attestation spelled out for a plain verifier of Ed25519 over RFC 8785 JSON: Ed25519.Verify(public_key, JCS(claim), signature), nothing else"},
		map[string][]byte{"positive/attestation-ed25519-jcs.json": plain})

	enc, err := encodingVectors(good, k)
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "encoding", Path: "positive/encoding.json", Kind: KindEncoding, Expect: ExpectOK,
		About: "inputs in other forms and the exact bytes a conforming host writes for them: JCS of the unit, grants, decisions and claim; the receipt payload in deterministic CBOR; the attestation and receipt envelopes the test key makes (round-trip these to conform)"},
		map[string][]byte{"positive/encoding.json": enc})

	addrs, err := addressVectors()
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "addresses", Path: "positive/addresses.json", Kind: "addresses", Expect: ExpectOK,
		About: "inputs and their BLAKE3-256 content addresses"}, map[string][]byte{"positive/addresses.json": addrs})

	dur, err := durableVectors()
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "durable", Path: "positive/durable.json", Kind: KindDurable, Expect: ExpectOK,
		About: "run records (seed 000) in their wire form, JSONL: positives with the head, phase and counts their replay reaches; negatives with the reject code and line of their first failure (docs/spec/run-record.md)"},
		map[string][]byte{"positive/durable.json": dur})

	env, err := environmentVectors(k)
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "environment", Path: "positive/environment.json", Kind: KindEnvironment, Expect: ExpectOK,
		About: "devcontainer.json inputs and what a conforming reader makes of each: positives with the manifest's canonical bytes under the pack's key, its address and whether it is pinned; negatives with the reject code and every field named (docs/spec/manifest.md)"},
		map[string][]byte{"positive/environment.json": env})

	fv, err := fleetVectors(k)
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "fleet", Path: "positive/fleet.json", Kind: KindFleet, Expect: ExpectOK,
		About: "a fleet of 13 items: each leaf (SHA-256 of 0x00 and the item's canonical JSON), the root of every prefix, the signed checkpoint of all 13 under the pack's key (its C2SP verifier key given), inclusion and consistency proofs that verify and some that must not, and lists of items a fleet is made of or not (in index order from 0, each with its run and input) with the code of each refusal (internal/fleet)"},
		map[string][]byte{"positive/fleet.json": fv})

	jv, sv, err := jcpVectors()
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "jcp", Path: "positive/jcp.json", Kind: KindJCP, Expect: ExpectOK,
		About: "JCP/1 grants, chains, decisions, amendments and budget ledgers, each with ok or the code of its first refusal, under the pack's key as the trusted root at a fixed now (docs/spec/jcp.md § Vectors)"},
		map[string][]byte{"positive/jcp.json": jv})
	p.add(Entry{Name: "standing", Path: "positive/standing.json", Kind: KindJCP, Expect: ExpectOK,
		About: "JCP/1 standing grants: mint policies and the children minted under them, in chains and in the budget ledger (max, rate, events), each with ok or the code of its first refusal (docs/spec/jcp.md § Vectors)"},
		map[string][]byte{"positive/standing.json": sv})

	lv, err := localityVectors()
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "locality", Path: "locality/locality.json", Kind: KindLocality, Expect: ExpectOK,
		About: "sandbox.locality/1 claims, each with the host key and binding it is checked against and ok or the code of its first refusal, under two published anchors: claims that hold (one on the region's very edge) and claims falsified by distance, by a forged rtt or time, by an unknown or moved anchor, by another host or run (docs/spec/locality.md § Vectors)"},
		map[string][]byte{"locality/locality.json": lv})

	ev, err := evidenceVectors()
	if err != nil {
		return nil, err
	}
	p.add(Entry{Name: "evidence", Path: "evidence/evidence.json", Kind: KindEvidence, Expect: ExpectOK,
		About: "sandbox.attestation/4 claims, each with the evidence it cites (base64), the certificates it needs, the time it is checked at, whether software evidence is allowed, its binding and ok or the code of the first refusal, as a run directory's evidence.bin is checked: software evidence bound, refused, made for another claim or signer, with a flipped signature; a claim of the wrong kind; real SEV-SNP and TDX reports, which verify and are not bound (docs/spec/evidence.md § Vectors)"},
		map[string][]byte{"evidence/evidence.json": ev})

	if err := recordRunsVectors(p, k); err != nil {
		return nil, err
	}
	if err := negatives(p, good, k, other); err != nil {
		return nil, err
	}

	m := Manifest{Type: ManifestType, TrustedKey: k.Public(), Entries: p.entries}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	p.files["README.md"] = []byte(readme(m))
	for name, b := range p.files {
		m.Files = append(m.Files, PackFile{Path: name, Addr: addr.Of(b)})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	mb, err := jcs.Marshal(m)
	if err != nil {
		return nil, err
	}
	p.files[ManifestFile] = mb
	return p.files, nil
}

// ManifestFile is the pack's manifest, the one file it does not pin.
const ManifestFile = "manifest.json"

func addrPtr(a addr.Addr) *addr.Addr { return &a }

// KindEd25519JCS is the kind of the plain Ed25519-over-JCS vector.
const KindEd25519JCS = "ed25519-jcs"

// PlainVector is an attestation as a plain Ed25519-over-JCS verifier sees
// it: a JSON object, a key and a signature over the object's RFC 8785
// form. Its address is BLAKE3 of that form.
type PlainVector struct {
	Check     string          `json:"check"`
	Claim     json.RawMessage `json:"claim"`
	PublicKey string          `json:"public_key_hex"`
	Signature string          `json:"signature_hex"`
}

// plainVector spells out an attestation for a verifier that knows only
// RFC 8785 and RFC 8032.
func plainVector(env []byte, pub key.Public) ([]byte, error) {
	a, err := attest.Verify(env, key.NewTrust(pub))
	if err != nil {
		return nil, err
	}
	return jcs.Marshal(PlainVector{
		Check:     "Ed25519.Verify(public_key, JCS(claim), signature)",
		Claim:     a.ClaimJCS,
		PublicKey: hex.EncodeToString(pub[:]),
		Signature: hex.EncodeToString(a.Signature),
	})
}

func attestAddr(env []byte) addr.Addr {
	a, err := attest.Verify(env, key.Trust{})
	if a == nil {
		panic(err)
	}
	return a.Addr
}

func addressVectors() ([]byte, error) {
	var vs []AddressVector
	for _, in := range [][]byte{nil, []byte("abc"), bytes.Repeat([]byte{0xff}, 1025)} {
		vs = append(vs, AddressVector{Input: hex.EncodeToString(in), Address: addr.Of(in)})
	}
	return jcs.Marshal(vs)
}

// sign1 is a COSE_Sign1 array, read without checks.
type sign1 struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected cbor.RawMessage
	Payload     []byte
	Signature   []byte
}

// splitSign1 reads a tagged COSE_Sign1 envelope's four parts.
func splitSign1(env []byte) (sign1, error) {
	var e sign1
	if len(env) < 1 {
		return e, fmt.Errorf("an empty envelope")
	}
	err := cbor.Unmarshal(env[1:], &e)
	return e, err
}

// payloadOf extracts the payload bytes of a JCR-1 envelope.
func payloadOf(env []byte) ([]byte, error) {
	e, err := splitSign1(env)
	return e.Payload, err
}

// pairs returns a canonical CBOR map's entries as raw key and value bytes,
// in order.
func pairs(m []byte) ([][2][]byte, error) {
	var raw map[string]cbor.RawMessage
	if err := cbor.Unmarshal(m, &raw); err != nil {
		return nil, err
	}
	var out [][2][]byte
	for k, v := range raw {
		kb, _ := detcbor.Marshal(k)
		out = append(out, [2][]byte{kb, v})
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][0], out[j][0]) < 0 })
	return out, nil
}

// mapOf writes raw entries as a definite-length map, in the order given.
func mapOf(entries [][2][]byte) []byte {
	n := len(entries)
	var b []byte
	if n < 24 {
		b = []byte{0xa0 | byte(n)}
	} else {
		b = []byte{0xb8, byte(n)}
	}
	for _, e := range entries {
		b = append(b, e[0]...)
		b = append(b, e[1]...)
	}
	return b
}

func negatives(p *pack, good *run, k, other key.Private) error {
	neg := func(name, kind string, code reject.Code, about string, b []byte) {
		path := "negative/" + name
		p.add(Entry{Name: name, Path: path, Kind: kind, Expect: string(code), About: about}, map[string][]byte{path: b})
	}
	envA := good.files[verify.FileAttestation]
	envR := good.files[verify.FileReceipt]

	// Signatures.
	flippedA := flipSigBit(envA)
	neg("attestation-flipped-signature.json", verify.KindAttestation, reject.Signature,
		"one bit of the Ed25519 signature flipped", flippedA)
	flippedR := bytes.Clone(envR)
	flippedR[len(flippedR)-1] ^= 0x01
	neg("receipt-flipped-signature.cose", verify.KindReceipt, reject.Signature,
		"one bit of the COSE signature flipped", flippedR)

	// Wrong address: a run whose unit.json is not the unit the attestation binds.
	wrong := cloneFiles(good.files)
	wrong[verify.FileUnit] = bytes.Replace(good.unitB, []byte(`"world"`), []byte(`"World"`), 1)
	p.add(Entry{Name: "run-wrong-address", Path: "negative/run-wrong-address", Kind: "run", Expect: string(reject.Address),
		About: "unit.json was changed after sealing, so it no longer hashes to the address the attestation binds"},
		p.runDir("negative/run-wrong-address", wrong))

	for _, o := range []struct {
		name, about string
		code        reject.Code
		change      func(files map[string][]byte)
	}{
		{"run-stdout-changed", "stdout.log changed after sealing: same length, other bytes", reject.Address,
			func(f map[string][]byte) { f[verify.FileStdout] = []byte("hello, World\n") }},
		{"run-stdout-extended", "a line appended to stdout.log after sealing", reject.Extended,
			func(f map[string][]byte) { f[verify.FileStdout] = []byte("hello, world\nand one more line\n") }},
		{"run-stdout-truncated", "stdout.log cut short after sealing", reject.Truncated,
			func(f map[string][]byte) { f[verify.FileStdout] = []byte("hello") }},
		{"run-stdout-missing", "stdout.log, which the journal's outcome records, deleted", reject.Missing,
			func(f map[string][]byte) { delete(f, verify.FileStdout) }},
		{"run-stray-file", "a file no record binds in the run directory", reject.Unrecognised,
			func(f map[string][]byte) { f["notes.txt"] = []byte("added later\n") }},
	} {
		files := cloneFiles(good.files)
		o.change(files)
		p.add(Entry{Name: o.name, Path: "negative/" + o.name, Kind: "run", Expect: string(o.code), About: o.about},
			p.runDir("negative/"+o.name, files))
	}

	// What a verifier re-derives: each run is consistent and signed, but
	// for the one thing its claim gets wrong.
	for _, d := range []struct {
		name, about string
		code        reject.Code
		change      func(*parts)
	}{
		{"run-tier-required-wrong", "a WASM unit's claim records S1 required (and chosen): a WASM unit requires S2", reject.Invalid,
			func(p *parts) { p.c.Tier.Required, p.c.Tier.Chosen = tier.S1, tier.S1 }},
		{"run-tier-escalated-unasked", "chosen S5 above the required S2 with a reason that does not say it was asked for", reject.Invalid,
			func(p *parts) { p.c.Tier.Chosen = tier.S5 }},
		{"run-native-at-s2", "a native unit recorded as run at S2, which runs only WebAssembly", reject.Invalid,
			func(p *parts) {
				p.u.Kind = tier.Native
				p.c.Tier = attest.Tier{Required: tier.S1, Chosen: tier.S2, Reason: "a native unit runs at S1 (Capability); escalated on explicit request from S1 to S2"}
				p.entries = 0
			}},
		{"run-device-unaccounted", "the unit asks for Cpu and Gpu, a compute grant gives each, and the receipt accounts Cpu only", reject.Invalid,
			func(p *parts) {
				p.u.Devices = []device.Class{device.CPU, device.GPU}
				p.g.Compute = append(p.g.Compute, grant.Compute{Class: device.GPU, Budget: 5 * energy.Joule})
			}},
		{"run-device-not-granted", "the unit asks for Gpu, and no compute grant gives it", reject.Invalid,
			func(p *parts) { p.u.Devices = []device.Class{device.CPU, device.GPU} }},
		{"run-receipt-interval", "the receipt's interval starts a millisecond before the run the attestation states", reject.Invalid,
			func(p *parts) {
				p.r.StartNS -= 1_000_000
				for i := range p.r.Devices[0].Readings {
					p.r.Devices[0].Readings[i].StartNS = p.r.StartNS
				}
			}},
		{"run-native-journal-inputs", "a native unit's journal with an input entry before its outcome (S1 brokers no inputs)", reject.Invalid,
			func(p *parts) {
				p.u.Kind = tier.Native
				p.c.Tier = attest.Tier{Required: tier.S1, Chosen: tier.S1, Reason: "a native unit runs at S1 (Capability)"}
			}},
		{"run-journal-unbound", "a journal.cbor beside a claim that binds no journal (and no outputs): nothing vouches for it", reject.Unrecognised,
			func(p *parts) { p.unbound = true }},
		{"run-journal-status", "the journal's outcome says killed (exit code -1), the attestation exited 0", reject.Invalid,
			func(p *parts) {
				p.outcome = func(o *journal.Outcome) { o.Status, o.ExitCode = string(attest.Killed), -1 }
			}},
		{"run-journal-exit-code", "the journal's outcome says exit code 3, the attestation 0", reject.Invalid,
			func(p *parts) { p.outcome = func(o *journal.Outcome) { o.ExitCode = 3 } }},
		{"run-journal-fuel", "the journal's outcome says fuel 1, the receipt 1234567", reject.Invalid,
			func(p *parts) { p.outcome = func(o *journal.Outcome) { o.Fuel = 1 } }},
	} {
		r, err := sampleRunWith(k, d.change)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		p.add(Entry{Name: d.name, Path: "negative/" + d.name, Kind: "run", Expect: string(d.code), About: d.about},
			p.runDir("negative/"+d.name, r.files))
	}

	// Decision logs: each valid JSON, canonical, but against the log's rules.
	l, err := grant.DecodeLog(good.files[verify.FileDecisions])
	if err != nil {
		return err
	}
	for _, d := range []struct {
		name, about string
		code        reject.Code
		change      func(ds []grant.Decision) []grant.Decision
	}{
		{"decisions-unknown-kind.json", `an entry of kind "disk", which the vocabulary does not have`, reject.Invalid,
			func(ds []grant.Decision) []grant.Decision { ds[0].Kind = "disk"; return ds }},
		{"decisions-unknown-op.json", `an entry with op "delete", which the vocabulary does not have`, reject.Invalid,
			func(ds []grant.Decision) []grant.Decision { ds[0].Op = "delete"; return ds }},
		{"decisions-seq-from-one.json", "sequence numbers that start at 1 (they start at 0)", reject.Invalid,
			func(ds []grant.Decision) []grant.Decision {
				for i := range ds {
					ds[i].Seq++
				}
				return ds
			}},
		{"decisions-unmerged.json", "the first entry (count 2) written as two identical entries of count 1 (identical consecutive decisions are one entry, so this is the same log in a second form)", reject.NonCanonical,
			func(ds []grant.Decision) []grant.Decision {
				one := ds[0]
				one.Count = 1
				two := one
				two.Seq = 1
				out := []grant.Decision{one, two}
				return append(out, ds[1:]...)
			}},
	} {
		cl := l
		cl.Decisions = d.change(slices.Clone(l.Decisions))
		b, err := jcs.Marshal(cl)
		if err != nil {
			return err
		}
		neg(d.name, verify.KindDecisions, d.code, d.about, b)
	}

	missing := cloneFiles(good.files)
	delete(missing, verify.FileReceipt)
	p.add(Entry{Name: "run-missing-receipt", Path: "negative/run-missing-receipt", Kind: "run", Expect: string(reject.Missing),
		About: "the receipt the attestation binds is not in the run directory"},
		p.runDir("negative/run-missing-receipt", missing))

	// Canonical JSON: each claim is signed exactly as written, so only the
	// profile check can refuse it.
	claimJSON, err := jcs.Marshal(good.claim)
	if err != nil {
		return err
	}
	swap := bytes.Replace(claimJSON, []byte(`{"decisions":`), []byte(`{"grants":"`+good.claim.Grants.String()+`","decisions":`), 1)
	swap = bytes.Replace(swap, []byte(`,"grants":"`+good.claim.Grants.String()+`"`), nil, 1)
	neg("attestation-keys-out-of-order.json", verify.KindAttestation, reject.NonCanonical,
		`claim members not in JCS order ("grants" before "decisions"), signed as written`, envelopeOf(swap, k))
	float := bytes.Replace(claimJSON, []byte(`"exit_code":0`), []byte(`"exit_code":0.5`), 1)
	neg("attestation-float.json", verify.KindAttestation, reject.Float,
		"a number with a fraction in the claim, signed as written", envelopeOf(float, k))
	big := bytes.Replace(claimJSON, []byte(`"exit_code":0`), []byte(`"exit_code":9007199254740992`), 1)
	neg("attestation-int-2p53.json", verify.KindAttestation, reject.IntRange,
		"an integer equal to 2^53 in the claim, signed as written", envelopeOf(big, k))
	dup := bytes.Replace(claimJSON, []byte(`"executor":"conformance/v1"`), []byte(`"executor":"conformance/v1","executor":"conformance/v1"`), 1)
	neg("attestation-duplicate-key.json", verify.KindAttestation, reject.DuplicateKey,
		"a claim member written twice, signed as written", envelopeOf(dup, k))
	unknown := bytes.Replace(claimJSON, []byte(`"executor":`), []byte(`"exclusive":true,"executor":`), 1)
	neg("attestation-unknown-field.json", verify.KindAttestation, reject.UnknownField,
		"a claim member this version does not define, signed as written", envelopeOf(unknown, k))
	// Decisions about corner cases, each written down in docs/spec.
	for _, d := range []struct {
		name, about string
		code        reject.Code
		old, new    string
	}{
		{"attestation-zero-address.json", "the claim binds its unit by the all-zero address, which names nothing", reject.MissingField,
			`"unit":"` + good.claim.Unit.String() + `"`, `"unit":"b3:` + strings.Repeat("0", 64) + `"`},
		{"attestation-null-optional.json", `an optional member written as null ("detail":null) instead of left out`, reject.NonCanonical,
			`"outcome":{"exit_code"`, `"outcome":{"detail":null,"exit_code"`},
		{"attestation-minus-zero.json", "the exit code written -0, whose JCS form is 0", reject.NonCanonical,
			`"exit_code":0`, `"exit_code":-0`},
		{"attestation-leading-zero.json", "the exit code written 00: JSON has no number with a leading zero (malformed, not merely non-canonical)", reject.Malformed,
			`"exit_code":0`, `"exit_code":00`},
		{"attestation-wrong-type.json", `the exit code as the string "0": a value of the wrong JSON type is invalid, not non-canonical`, reject.Invalid,
			`"exit_code":0`, `"exit_code":"0"`},
		{"attestation-notes-empty.json", `"notes":[]: no notes are written by leaving the member out`, reject.NonCanonical,
			`"outcome":{`, `"notes":[],"outcome":{`},
		{"attestation-note-empty.json", `"notes":[""]: a note is a non-empty string`, reject.Invalid,
			`"outcome":{`, `"notes":[""],"outcome":{`},
		{"attestation-device-class-unknown.json", `hardware.devices[].class "Fpga", which the device-class vocabulary does not have`, reject.Invalid,
			`"class":"Cpu"`, `"class":"Fpga"`},
		{"attestation-v1-with-record.json", `a sandbox.attestation/1 claim citing a run record: "record" is a member of /2 only`, reject.UnknownField,
			`"signer":`, `"record":{"genesis":"` + addr.Of([]byte("genesis")).String() + `","head":"` + addr.Of([]byte("head")).String() + `"},"signer":`},
		{"attestation-v2-without-its-members.json", `typed sandbox.attestation/2 with neither "record" nor "audit_prev": such a claim is /1`, reject.NonCanonical,
			`"type":"sandbox.attestation/1"`, `"type":"sandbox.attestation/2"`},
		{"attestation-type-unknown.json", `typed sandbox.attestation/5, which this version does not know`, reject.Unrecognised,
			`"type":"sandbox.attestation/1"`, `"type":"sandbox.attestation/5"`},
	} {
		c := bytes.Replace(claimJSON, []byte(d.old), []byte(d.new), 1)
		if bytes.Equal(c, claimJSON) {
			return fmt.Errorf("%s: the claim has no %s", d.name, d.old)
		}
		neg(d.name, verify.KindAttestation, d.code, d.about+"; signed as written", envelopeOf(c, k))
	}
	a63, err := attest.Verify(envA, key.Trust{})
	if a63 == nil {
		return err
	}
	neg("attestation-signature-63-bytes.json", verify.KindAttestation, reject.Signature,
		"the valid signature without its last byte: an Ed25519 signature is 64 bytes", rawEnvelope(a63.ClaimJCS, a63.Signature[:63]))
	gq := strings.Replace(string(good.files[verify.FileGrants]), `{"mode":"ro","path":"/data"}`, `{"mode":"ro","path":"/data","quota":0}`, 1)
	if gq == string(good.files[verify.FileGrants]) {
		return fmt.Errorf("grants-quota-zero: no /data grant to change")
	}
	neg("grants-quota-zero.json", verify.KindGrants, reject.NonCanonical,
		`a storage grant with "quota":0: no quota is written by leaving the member out`, []byte(gq))

	// Deterministic CBOR: each payload is re-signed, so only the payload
	// checks can refuse it.
	payload, err := payloadOf(envR)
	if err != nil {
		return err
	}
	ents, err := pairs(payload)
	if err != nil {
		return err
	}
	resign := func(pl []byte) ([]byte, error) { return receipt.SealPayload(pl, k, receipt.AlgEdDSA, nil) }
	// reseal encodes a changed receipt as written (no validation) and
	// signs it, so only the check the vector is about can refuse it.
	reseal := func(r receipt.Receipt) ([]byte, error) {
		r.Version, r.Signer = receipt.Version, k.Public()
		pl, err := detcbor.Marshal(r)
		if err != nil {
			return nil, err
		}
		return resign(pl)
	}
	vKey, _ := detcbor.Marshal("v")
	vText, _ := detcbor.Marshal("1")
	var nonShortest, wrongType [][2][]byte
	for _, e := range ents {
		n, w := e, e
		if bytes.Equal(e[0], vKey) {
			n = [2][]byte{e[0], {0x18, 0x01}} // 1 in a one-byte argument
			w = [2][]byte{e[0], vText}
		}
		nonShortest = append(nonShortest, n)
		wrongType = append(wrongType, w)
	}
	variants := []struct {
		name  string
		code  reject.Code
		about string
		pl    []byte
	}{
		{"receipt-non-shortest-int.cose", reject.NonShortest, `payload "v": 1 encoded as 0x1801 instead of 0x01`, mapOf(nonShortest)},
		{"receipt-indefinite-length.cose", reject.Indefinite, "payload map written with indefinite length (0xbf ... 0xff)",
			append(append([]byte{0xbf}, mapOf(ents)[1:]...), 0xff)},
		{"receipt-duplicate-key.cose", reject.DuplicateKey, `payload map with the "v" entry twice`,
			mapOf(append([][2][]byte{{vKey, {0x01}}}, ents...))},
		{"receipt-unsorted-keys.cose", reject.UnsortedKeys, "payload map with its first two keys swapped",
			mapOf(append([][2][]byte{ents[1], ents[0]}, ents[2:]...))},
		{"receipt-wrong-type.cose", reject.Invalid, `payload "v" as the text string "1": a value of the wrong CBOR type is invalid, not non-canonical`, mapOf(wrongType)},
	}
	// The duplicate must sit next to its twin to be a duplicate, not an
	// ordering error: put it right before the original "v" entry.
	variants[2].pl = mapOf(insertBefore(ents, vKey, [2][]byte{vKey, {0x01}}))
	for _, v := range variants {
		b, err := resign(v.pl)
		if err != nil {
			return err
		}
		neg(v.name, verify.KindReceipt, v.code, v.about+"; re-signed", b)
	}
	extra, _ := detcbor.Marshal("zzz")
	withExtra := append(append([][2][]byte{}, ents...), [2][]byte{extra, {0x01}})
	sort.Slice(withExtra, func(i, j int) bool { return bytes.Compare(withExtra[i][0], withExtra[j][0]) < 0 })
	b, err := resign(mapOf(withExtra))
	if err != nil {
		return err
	}
	neg("receipt-unknown-field.cose", verify.KindReceipt, reject.UnknownField, `payload with a field "zzz" this version does not define; re-signed`, b)

	// A receipt whose run-scope reading reaches past the run.
	late := good.rcpt
	late.Devices = []receipt.Device{good.rcpt.Devices[0]}
	late.Devices[0].Readings = slices.Clone(late.Devices[0].Readings)
	late.Devices[0].Readings[1].EndNS += 1_000_000
	if b, err = reseal(late); err != nil {
		return err
	}
	neg("receipt-reading-outside-run.cose", verify.KindReceipt, reject.Invalid,
		"a run-scope reading that ends a millisecond after the run: the run's readings lie within its interval; signed", b)

	// Headers.
	b, err = receipt.SealPayload(payload, k, -7, nil)
	if err != nil {
		return err
	}
	neg("receipt-wrong-alg.cose", verify.KindReceipt, reject.Alg, "protected alg is -7 (ES256)", b)
	b, err = receipt.SealPayload(payload, k, receipt.AlgEdDSA, map[int64]any{2: []any{int64(99)}, 99: "must-understand"})
	if err != nil {
		return err
	}
	neg("receipt-unknown-critical.cose", verify.KindReceipt, reject.UnknownCritical, "protected crit lists label 99, which this profile does not define", b)
	neg("receipt-truncated.cose", verify.KindReceipt, reject.Truncated, "the envelope with its last 17 bytes cut off", envR[:len(envR)-17])
	neg("receipt-untagged.cose", verify.KindReceipt, reject.Malformed, "the COSE_Sign1 array without its tag 18 (0xd2): JCR-1 envelopes are tagged", envR[1:])
	if b, err = withSignature(envR, func(sig []byte) []byte { return sig[:63] }); err != nil {
		return err
	}
	neg("receipt-signature-63-bytes.cose", verify.KindReceipt, reject.Signature, "the valid receipt with its signature's last byte cut: an Ed25519 signature is 64 bytes", b)
	zf := good.rcpt
	zero64 := uint64(0)
	zf.Fuel = &zero64
	if b, err = reseal(zf); err != nil {
		return err
	}
	neg("receipt-fuel-zero.cose", verify.KindReceipt, reject.Invalid, "fuel 0: a run that counted no fuel omits the field (entering a module costs fuel); signed", b)
	two := good.rcpt
	two.Devices = []receipt.Device{{Class: device.GPU, Readings: []receipt.Reading{{Provenance: receipt.Estimator, Scope: receipt.ScopeRun, Source: "tdp",
		StartNS: good.rcpt.StartNS, EndNS: good.rcpt.EndNS, UJ: 1, Basis: "b"}}}, good.rcpt.Devices[0]}
	for i := range two.Devices {
		m, e, _ := receipt.Sums(two.Devices[i].Readings)
		two.Devices[i].Measured, two.Devices[i].Estimated = m, e
	}
	if b, err = reseal(two); err != nil {
		return err
	}
	neg("receipt-devices-out-of-order.cose", verify.KindReceipt, reject.NonCanonical, "Gpu's account before Cpu's: device accounts are in the canonical class order (a list out of its order is non-canonical, as everywhere); signed", b)

	// Totals.
	bad := good.rcpt
	bad.Devices = []receipt.Device{good.rcpt.Devices[0]}
	bad.Devices[0].Estimated++
	if b, err = reseal(bad); err != nil {
		return err
	}
	neg("receipt-total-mismatch.cose", verify.KindReceipt, reject.TotalMismatch, "Cpu estimated_uj is one more than the sum of its readings; signed", b)

	if err := keyNegatives(neg, good, payload); err != nil {
		return err
	}

	// Untrusted keys: everything valid, signed by the RFC 8032 test 2 key.
	o, err := sampleRun(other)
	if err != nil {
		return err
	}
	neg("receipt-untrusted-key.cose", verify.KindReceipt, reject.UntrustedKey, "a valid receipt signed by a key the verifier was not given", o.files[verify.FileReceipt])
	p.add(Entry{Name: "run-untrusted-key", Path: "negative/run-untrusted-key", Kind: "run", Expect: string(reject.UntrustedKey),
		About: "a valid run signed by a key the verifier was not given"}, p.runDir("negative/run-untrusted-key", o.files))
	return nil
}

// Weak keys and malleable signatures. The identity point (01 00…00) as
// a public key accepts R = [S]B for any S and any message: here R is the
// base point and S is 1, a "signature" anyone can make. S + L verifies
// the same equation as S.
var (
	identityKey = key.Public{1}
	forgedSig   = append(mustHex("5866666666666666666666666666666666666666666666666666666666666666"), append([]byte{1}, make([]byte, 31)...)...)
	groupOrder  = mustHex("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
)

func mustHex(h string) []byte {
	b, err := hex.DecodeString(h)
	if err != nil {
		panic(err)
	}
	return b
}

// withSignature rewrites a tagged COSE_Sign1 with its signature changed.
func withSignature(env []byte, change func(sig []byte) []byte) ([]byte, error) {
	e, err := splitSign1(env)
	if err != nil {
		return nil, err
	}
	return rawSign1(e.Protected, e.Payload, change(e.Signature))
}

// plusL returns a signature with S + L in place of S.
func plusL(sig []byte) []byte {
	out := bytes.Clone(sig)
	carry := 0
	for i := 0; i < 32; i++ {
		v := int(out[32+i]) + int(groupOrder[i]) + carry
		out[32+i], carry = byte(v), v>>8
	}
	return out
}

func keyNegatives(neg func(name, kind string, code reject.Code, about string, b []byte), good *run, payload []byte) error {
	c := good.claim
	c.Signer = identityKey
	claim, err := jcs.Marshal(c)
	if err != nil {
		return err
	}
	neg("attestation-weak-key.json", verify.KindAttestation, reject.WeakKey,
		"signed by the identity point (01 00…00), with R the base point and S = 1: a signature that verifies under the bare equation for any message; refused even where the key is trusted", rawEnvelope(claim, forgedSig))
	envA := good.files[verify.FileAttestation]
	a, err := attest.Verify(envA, key.Trust{})
	if a == nil {
		return err
	}
	neg("attestation-signature-s-plus-l.json", verify.KindAttestation, reject.Signature,
		"the valid signature with S replaced by S + L (RFC 8032 requires S < L)", rawEnvelope(a.ClaimJCS, plusL(a.Signature)))

	r := good.rcpt
	r.Version, r.Signer = receipt.Version, identityKey
	pl, err := detcbor.Marshal(r)
	if err != nil {
		return err
	}
	id := identityKey.ID()
	prot, err := detcbor.Marshal(map[int64]any{1: receipt.AlgEdDSA, 3: receipt.ContentType, 4: id[:]})
	if err != nil {
		return err
	}
	b, err := rawSign1(prot, pl, forgedSig)
	if err != nil {
		return err
	}
	neg("receipt-weak-key.cose", verify.KindReceipt, reject.WeakKey,
		"a receipt whose signer (and kid) is the identity point, with the signature R = base point, S = 1", b)
	envR := good.files[verify.FileReceipt]
	if b, err = withSignature(envR, plusL); err != nil {
		return err
	}
	neg("receipt-signature-s-plus-l.cose", verify.KindReceipt, reject.Signature,
		"the valid receipt with S replaced by S + L in its signature", b)
	_ = payload
	return nil
}

// rawEnvelope wraps claim bytes and a signature as an attestation,
// signing nothing.
func rawEnvelope(claim, sig []byte) []byte {
	return []byte(`{"claim":` + string(claim) + `,"signature":"` + base64.RawURLEncoding.EncodeToString(sig) + `"}`)
}

// rawSign1 assembles a tagged COSE_Sign1 from its parts, signing nothing.
func rawSign1(protected, payload, sig []byte) ([]byte, error) {
	b, err := detcbor.Marshal([]any{protected, map[int64]any{}, payload, sig})
	if err != nil {
		return nil, err
	}
	return append([]byte{0xd2}, b...), nil
}

func insertBefore(ents [][2][]byte, k []byte, e [2][]byte) [][2][]byte {
	var out [][2][]byte
	for _, x := range ents {
		if bytes.Equal(x[0], k) {
			out = append(out, e)
		}
		out = append(out, x)
	}
	return out
}

func cloneFiles(m map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// envelopeOf signs claim bytes exactly as given and wraps them.
func envelopeOf(claim []byte, k key.Private) []byte {
	sig := k.Sign(attest.SignedMessage(claim))
	return []byte(`{"claim":` + string(claim) + `,"signature":"` + base64.RawURLEncoding.EncodeToString(sig) + `"}`)
}

// flipSigBit flips the lowest bit of the first signature byte of an
// attestation envelope.
func flipSigBit(env []byte) []byte {
	const marker = `,"signature":"`
	i := bytes.LastIndex(env, []byte(marker)) + len(marker)
	j := bytes.LastIndexByte(env, '"')
	sig, err := base64.RawURLEncoding.DecodeString(string(env[i:j]))
	if err != nil {
		panic(err)
	}
	sig[0] ^= 1
	return []byte(string(env[:i]) + base64.RawURLEncoding.EncodeToString(sig) + string(env[j:]))
}

func readme(m Manifest) string {
	var b strings.Builder
	b.WriteString("# Conformance pack v1\n\nGenerated by `sandbox vectors gen`; do not edit. Specification: docs/spec/conformance.md.\n\n")
	fmt.Fprintf(&b, "Trusted key: `%s` (RFC 8032 section 7.1 test 1; seed in keys/test-key.seed).\n", m.TrustedKey)
	b.WriteString("Untrusted key: keys/other-key.pub (RFC 8032 test 2).\n\n")
	b.WriteString("Every file of the pack but manifest.json (this README included) is pinned there by its BLAKE3 address (`files`): a pack with a file that differs, is missing or is not pinned is refused whole, before any vector.\n\n")
	b.WriteString("| vector | kind | expect | about |\n|---|---|---|---|\n")
	for _, e := range m.Entries {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", e.Path, e.Kind, e.Expect, strings.ReplaceAll(e.About, "|", "\\|"))
	}
	return b.String()
}
