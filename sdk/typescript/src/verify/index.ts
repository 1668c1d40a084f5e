// Offline verification of what the service seals: BLAKE3 content
// addresses, canonical JSON and deterministic CBOR, Ed25519 with the
// spec's strict checks, attestations, JCR-1 receipts and whole runs.

export { Blake3, blake3, contentAddress, toHex } from "./blake3.js";
export { parseCanonicalJSON, canonicalJSON, canonicalJSONBytes, type JSONValue } from "./jcs.js";
export { decodeCbor, decodeCborAt, encodeCbor, compareBytes, CborMap, CborTag, CborSimple, CborRawKey, type CborValue, type CborInput } from "./cbor.js";
export { checkPublicKey, verifyEd25519, parsePublicKey } from "./ed25519.js";
export { trustSet, type TrustInput } from "./trust.js";
export { openReceipt, DEVICE_CLASSES, type Receipt, type ReceiptDevice, type ReceiptReading, type TrustOptions } from "./receipt.js";
export { verifyAttestation, claimTimeNS, ATTESTATION_TYPES, TIERS, STATUSES, type Attestation, type AttestationClaim } from "./attestation.js";
export { verifyRunFiles, verifyRunDirectory, RUN_FILES, type RunFiles, type FileCheck, type RunVerification, type RunVerifyOptions } from "./rundir.js";
export { parseRunBundle, verifyRunBundle, BUNDLE_LIMITS, type BundleLimits, type ParseBundleOptions, type RunBundle, type BundleVerifyOptions } from "./bundle.js";
