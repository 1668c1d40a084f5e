// Package evidence verifies hardware evidence offline: an AMD SEV-SNP
// attestation report, an Intel TDX quote, and (evidence/spdm) an NVIDIA
// GPU's SPDM measurement report. Each is checked the way the field's
// verifiers check it (Confidential Containers' trustee, go-sev-guest,
// go-tdx-guest): the endorsement key's certificate chained to the
// vendor's root bundled in this package, at a time the caller pins
// (never "now" silently); the report's signature under that key; the
// endorsement certificate's chip id and TCB against the report; then a
// Policy the caller writes (docs/spec/evidence.md): the measurements
// allowed, a minimum TCB and report version, debug forbidden, the VMPL,
// the report_data and host_data expected.
//
// A refusal is a *reject.Error whose Code names the check that failed
// (reject.EvidenceChain, reject.EvidenceExpired, ...), so that a caller,
// the CLI's exit status and the conformance vectors branch on the code,
// not on a message. The parsers of untrusted bytes are fuzzed; a report
// larger than MaxSize is refused before it is read whole.
//
// What is not checked, offline: certificate revocation (AMD's and
// Intel's CRLs, NVIDIA's OCSP) and Intel's TCB status (PCS collateral):
// both need the vendor's servers, and the result says so.
package evidence
