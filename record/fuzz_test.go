package record

import (
	"reflect"
	"testing"
)

// The fast path accepts only what the strict decoder accepts, and
// decodes it the same way.
func FuzzFastSegment(f *testing.F) {
	for _, s := range []Segment{executed("a"), suspend(snapA), resume(snapA, 12345), {Kind: Closed}, {Kind: Closed, Reason: "done"},
		resume(Snapshot{Root: snapA.Root, Manifest: snapA.Manifest, Memory: &snapB.Root}, 0)} {
		b, err := s.Bytes()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"idle_provenance":"Estimator x","idle_uj":01,"kind":"resumed","snapshot":{}}`))
	p, _, _ := placed(f)
	if b, err := p.Bytes(); err == nil {
		f.Add(b)
	}
	if b, err := forked(Parent{Record: "sb-0123456789ab", Genesis: snapA.Root, Head: snapB.Root}, snapA).Bytes(); err == nil {
		f.Add(b)
	}
	for _, s := range []Segment{exposed(8080, "token", 1767225600), unexposed(8080, "token", "revoked")} {
		if b, err := s.Bytes(); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"kind":"exposed","port":65536,"preview":"b3:` + snapA.Root.Hex() + `","until":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := fastSegment(b)
		slow, err := parseSegment(b)
		if ok && err != nil {
			t.Fatalf("%q: the fast path took what the decoder refuses: %v", b, err)
		}
		if ok && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, strict %+v", b, fast, slow)
		}
	})
}

// A record's wire form never panics the verifier, and whatever it
// accepts replays the same way twice.
func FuzzVerifyBytes(f *testing.F) {
	f.Add([]byte("{\"grants\":\"b3:" + grants.Hex() + "\",\"record\":\"sandbox.runrecord/1\",\"unit\":\"b3:" + unit.Hex() + "\"}\n"))
	f.Add([]byte("\n\n"))
	if b, err := forked(Parent{Record: "sb-0123456789ab", Genesis: snapA.Root, Head: snapB.Root}, snapA).Bytes(); err == nil {
		f.Add([]byte("{\"grants\":\"b3:" + grants.Hex() + "\",\"record\":\"sandbox.runrecord/1\",\"unit\":\"b3:" + unit.Hex() + "\"}\n" + string(b) + "\n"))
	}
	// A preview's life: exposed, withdrawn, another exposed and ended by
	// a suspension.
	life := "{\"grants\":\"b3:" + grants.Hex() + "\",\"record\":\"sandbox.runrecord/1\",\"unit\":\"b3:" + unit.Hex() + "\"}\n"
	for _, s := range []Segment{exposed(8080, "a", 1767225600), unexposed(8080, "a", "revoked"), exposed(9090, "b", 1767225600), suspend(snapA)} {
		if b, err := s.Bytes(); err == nil {
			life += string(b) + "\n"
		}
	}
	f.Add([]byte(life))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := VerifyBytes(b)
		if err != nil {
			return
		}
		st2, err := VerifyBytes(b)
		if err != nil || st2.Head != st.Head {
			t.Fatal("a record verified once, not twice")
		}
	})
}
