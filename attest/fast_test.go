package attest

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// sealedKinds are claims of every version, with every optional member
// somewhere, sealed.
func sealedKinds(tb testing.TB) [][]byte {
	k := testKey(tb, 1)
	minus, big := -1, 1<<31-1
	a := addr.Of([]byte("a"))
	var out [][]byte
	for _, mut := range []func(*Claim){
		func(*Claim) {},
		func(c *Claim) { c.Journal = nil; c.Hardware.Devices = nil },
		func(c *Claim) {
			c.Record = &RecordCite{Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))}
			c.AuditPrev = &a
		},
		func(c *Claim) { c.AuditPrev = &a },
		func(c *Claim) {
			c.JCP = &a
			c.Notes = []string{"a grant bound as it is", "ünïcødé ✓ 𝄞 \u2028"}
		},
		func(c *Claim) {
			c.Outcome = Outcome{Status: Killed, Detail: "signal: killed"}
			c.Hardware.Host.CPU, c.Hardware.Host.Kernel = "AMD EPYC 9654", "6.8.0"
			c.Hardware.Devices = append(c.Hardware.Devices, Device{Class: device.GPU, Model: "H100", Driver: "nvidia 550", ID: "GPU-0f1e"})
		},
		func(c *Claim) { c.Outcome.ExitCode = &minus },
		func(c *Claim) { c.Outcome.ExitCode = &big }, // ten digits: the strict path's
		func(c *Claim) { c.Evidence = s6Evidence(c) },
		func(c *Claim) {
			c.Evidence = s6Evidence(c)
			c.Evidence.Kind, c.Evidence.Provider, c.Evidence.Software = "software", "software", true
			c.Evidence.Devices = &a
			c.JCP = &a
			c.Tier = Tier{Required: tier.S7, Chosen: tier.S7, Reason: "grant sovereign"}
			c.Locality = &LocalityCite{Claim: addr.Of([]byte("l")), Region: "eu-west"}
			c.Record = &RecordCite{Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))}
			c.AuditPrev = &a
		},
	} {
		c := sample()
		mut(&c)
		s, err := Seal(c, k)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, s.Envelope)
	}
	return out
}

// Every envelope Seal writes takes the fast path, but for an exit code
// of ten digits.
func TestFastEnvelopeTakesSealed(t *testing.T) {
	for _, env := range sealedKinds(t) {
		_, _, _, ok := fastEnvelope(env)
		if want := !bytes.Contains(env, []byte(`"exit_code":2147483647`)); ok != want {
			t.Errorf("fast path %v, want %v: %s", ok, want, env)
		}
		a, err := Verify(env, key.NewTrust(testKey(t, 1).Public()))
		if err != nil || !bytes.Equal(a.Envelope, env) {
			t.Fatalf("%s: %v", env, err)
		}
	}
}

// The fast path accepts only what the strict path accepts (jcs.Check of
// the envelope, splitEnvelope, jcs.Decode of the claim), and decodes it
// the same way.
func FuzzFastEnvelope(f *testing.F) {
	for _, env := range sealedKinds(f) {
		f.Add(env)
		s := string(env)
		for _, r := range [][2]string{
			{`"status":"exited"`, `"status":"exit\u0065d"`},
			{`"exit_code":0`, `"exit_code":-0`},
			{`"exit_code":0`, `"exit_code":00`},
			{`"exit_code":0`, `"exit_code":0.0`},
			{`"exit_code":0`, `"exit_code":null`},
			{`"exit_code":0`, `"exit_code":9007199254740993`},
			{`"devices":[{`, `"devices":[],"x":[{`},
			{`"notes":[`, `"notes":[],"x":[`},
			{`"kernel":"6.8.0"`, `"kernel":""`},
			{`"notes":["a grant`, `"notes":["","a grant`},
			{`"os":"linux"`, `"os":"linux","os":"linux"`},
			{`"chosen":"S`, `"chosen":"s`},
			{`"signer":"ed25519:`, `"signer":"ED25519:`},
			{`"unit":"b3:`, `"unit":"B3:`},
			{`"software":true`, `"software":false`},
			{`"claim":{`, `"claim": {`},
			{`"}`, `="}`},
			{`ü`, "\xc3"},
			{`,"cpu"`, `,"Cpu"`},
		} {
			if m := strings.Replace(s, r[0], r[1], 1); m != s {
				f.Add([]byte(m))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, claim, sig, ok := fastEnvelope(b)
		if !ok {
			return
		}
		if err := jcs.Check(b); err != nil {
			t.Fatalf("%q: the fast path took what is not canonical: %v", b, err)
		}
		env, err := splitEnvelope(b)
		if err != nil || !bytes.Equal(env.Claim, claim) || env.Signature != sig {
			t.Fatalf("%q: fast split %q %q, strict %q %q (%v)", b, claim, sig, env.Claim, env.Signature, err)
		}
		var strict Claim
		if err := jcs.Decode(claim, &strict); err != nil {
			t.Fatalf("%q: the fast path took a claim the decoder refuses: %v", b, err)
		}
		if !reflect.DeepEqual(c, strict) {
			t.Fatalf("%q: fast %+v, strict %+v", b, c, strict)
		}
	})
}
