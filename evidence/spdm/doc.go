// Package spdm verifies a device's signed SPDM 1.1 measurement report
// (DSP0274 1.1: a GET_MEASUREMENTS request and its MEASUREMENTS
// response), offline, as an NVIDIA GPU (Hopper, GH100) gives it in
// confidential-computing mode: the device's certificate chain leads to
// NVIDIA's Device Identity CA, which is embedded (Roots).
//
// Parse reads a request and its response from untrusted bytes (fuzzed:
// FuzzParse); ParseReport reads the two one after the other, the way
// NVIDIA's driver returns them; ParseChain reads a certificate chain,
// PEM or DER. Verify checks a parsed report against a chain and trusted
// roots at a given time, and returns what it states: the measurements
// (index, type, digest), the requester's nonce, NVIDIA's opaque data.
//
// What Verify establishes:
//
//   - the chain leads from the device's certificate to a trusted root,
//     every certificate valid at Options.At (never the clock: a zero At
//     is refused);
//   - the device's key (ECDSA P-384) signed SHA-384 of the request and
//     the response up to the signature: the measurements, both nonces
//     and the opaque data are as the device sent them;
//   - the request's nonce, which the signature covers, is the one the
//     verifier chose (Options.ExpectedNonce): the report is fresh, not
//     replayed; the responder's own nonce is exposed, not checked;
//   - the device's certificate is not a CA, and where it or NVIDIA's
//     opaque data names the firmware (FWID), both do and name the same:
//     the certificate was issued to that firmware;
//   - the measurements meet a policy of allowed digests, if one is given.
//
// What it does not:
//
//   - revocation: no CRL or OCSP is fetched (this package makes no
//     network call); a device certificate NVIDIA has revoked still
//     verifies. A caller that needs it checks NVIDIA's OCSP service for
//     each certificate of Result.Chain itself;
//   - reference values: which measurements are good is the caller's
//     policy (NVIDIA publishes them as signed RIMs; this package does
//     not read RIMs);
//   - the rest of the SPDM session: in SPDM 1.1 the measurement
//     signature covers the GET_MEASUREMENTS exchanges alone, not the
//     version, capability and algorithm negotiation; this package reads
//     one exchange (a signature that also covers earlier unsigned
//     exchanges fails to verify, it is not passed), and only ECDSA
//     P-384 signatures and DMTF measurement blocks.
//
// Every refusal is an *Error with a Code (ErrMalformed, ErrSignature,
// ...; errors.Is matches a Code) naming what was wrong and where: a byte
// offset in the request or response, a certificate's position, an
// option. Inputs over the limits (MaxResponse, MaxChain, MaxCerts) are
// refused before they are read. Parse never panics.
//
// The embedded root, nvidia_device_root.pem, is NVIDIA's Device
// Identity CA as confidential-containers/trustee ships it (Apache-2.0;
// see testdata/README.md).
//
// The package imports nothing of the module: it sits in the records
// layer (docs/architecture.md) so that any verifier may use it.
package spdm
