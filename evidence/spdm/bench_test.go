package spdm_test

import (
	"testing"

	"github.com/opensubstrate/sandbox/evidence/spdm"
)

// BenchmarkVerify verifies the sample: the chain of five certificates
// (four P-384 signatures) and the report's signature; the roots built
// once, as a verifier keeps them.
func BenchmarkVerify(b *testing.B) {
	req, resp := sample(b)
	r, err := spdm.Parse(req, resp)
	if err != nil {
		b.Fatal(err)
	}
	chain, roots := sampleChain(b), spdm.Roots()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := spdm.Verify(r, chain, roots, spdm.Options{At: at}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse reads the sample's request and response.
func BenchmarkParse(b *testing.B) {
	req, resp := sample(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(req) + len(resp)))
	for b.Loop() {
		if _, err := spdm.Parse(req, resp); err != nil {
			b.Fatal(err)
		}
	}
}
