package spdm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/opensubstrate/sandbox/evidence/spdm"
)

// FuzzParse: Parse never panics, refuses only with an *Error, and what
// it accepts is exactly what it says: every byte of the response
// accounted for by its parts.
func FuzzParse(f *testing.F) {
	req, resp := sample(f)
	f.Add(req, resp)
	f.Add(req, resp[:len(resp)-1])
	f.Add(req, resp[:200])
	one := bytes.Clone(req)
	one[3] = 1
	f.Add(one, resp)
	f.Add(req[:4], []byte{0x11, 0x60, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		r, err := spdm.Parse(req, resp)
		if err != nil {
			var e *spdm.Error
			if r != nil || !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("refusal %v (%T) with report %v", err, err, r)
			}
			return
		}
		n := 8 + spdm.NonceSize + 2 + len(r.Response.Opaque) + spdm.SignatureSize
		seen := map[uint8]bool{}
		for _, b := range r.Response.Blocks {
			n += 4 + 3 + len(b.Value)
			if seen[b.Index] || b.Index == 0 || b.Index == 0xFF {
				t.Fatalf("block index %d", b.Index)
			}
			seen[b.Index] = true
		}
		if n != len(resp) || len(req) != spdm.RequestSize {
			t.Fatalf("accepted %d+%d bytes; its parts take %d", len(req), len(resp), n)
		}
		if rl := int(resp[5]) | int(resp[6])<<8 | int(resp[7])<<16; rl != n-8-spdm.NonceSize-2-len(r.Response.Opaque)-spdm.SignatureSize {
			t.Fatalf("record length %d", rl)
		}
		if int(binary.LittleEndian.Uint16(resp[len(resp)-spdm.SignatureSize-len(r.Response.Opaque)-2:])) != len(r.Response.Opaque) {
			t.Fatal("opaque length")
		}
		if !bytes.Equal(r.Response.Signature[:], resp[len(resp)-spdm.SignatureSize:]) {
			t.Fatal("signature is not the last bytes")
		}
	})
}

// FuzzParseChain: ParseChain never panics and refuses only with an *Error.
func FuzzParseChain(f *testing.F) {
	b, err := os.ReadFile("testdata/hopper_cert_chain_case1.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, c := range sampleChain(f) {
		f.Add(c.Raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := spdm.ParseChain(b)
		var e *spdm.Error
		switch {
		case err != nil && !errors.As(err, &e):
			t.Fatalf("refusal %v (%T)", err, err)
		case err == nil && (len(certs) == 0 || len(certs) > spdm.MaxCerts):
			t.Fatalf("%d certificates", len(certs))
		}
	})
}
