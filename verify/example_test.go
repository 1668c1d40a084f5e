package verify_test

import (
	"fmt"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// Verify a run directory: here the conformance pack's positive run,
// signed by the published RFC 8032 test key.
func ExampleDir() {
	signer, err := key.ParsePublic("ed25519:d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
	if err != nil {
		panic(err)
	}
	results, err := verify.Dir("../conformance/v1/positive/run", signer)
	for _, r := range results {
		fmt.Println(r.Kind, r.Err == nil)
	}
	fmt.Println("verified:", err == nil)

	// The same run with its stdout changed after sealing.
	_, err = verify.Dir("../conformance/v1/negative/run-stdout-changed", signer)
	fmt.Println("forged output:", reject.CodeOf(err))
	// Output:
	// attestation true
	// unit true
	// grants true
	// decisions true
	// receipt true
	// claim true
	// journal true
	// output true
	// output true
	// verified: true
	// forged output: address
}
