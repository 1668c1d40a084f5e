// Attestations (docs/spec/attestation.md): canonical JSON
// `{"claim":{…},"signature":"…"}`, the signature Ed25519 over the claim's
// canonical bytes, the content address BLAKE3 of those bytes.

import { VerificationError } from "../errors.js";
import { blake3, toHex } from "./blake3.js";
import { verifyEd25519 } from "./ed25519.js";
import { canonicalJSONBytes, parseCanonicalJSON, type JSONValue } from "./jcs.js";
import { DEVICE_CLASSES, type TrustOptions } from "./receipt.js";
import { check, isZeroAddr, S, type Members } from "./schema.js";
import { trustSet } from "./trust.js";

/** The claim types this verifier knows. */
export const ATTESTATION_TYPES = ["sandbox.attestation/1", "sandbox.attestation/2", "sandbox.attestation/3", "sandbox.attestation/4"] as const;

/** The tiers, S0 to S7. */
export const TIERS = ["S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7"] as const;

/** The statuses a run ends with. */
export const STATUSES = ["exited", "killed", "deadline", "out-of-fuel", "out-of-memory", "trapped", "failed", "budget-exhausted"] as const;

/** An attestation's claim (docs/spec/attestation.md "Claim"). */
export interface AttestationClaim {
  type: string;
  signer: string;
  unit: string;
  image: string;
  grants: string;
  decisions: string;
  receipt: string;
  journal?: string;
  tier: { required: string; chosen: string; reason: string };
  executor: string;
  hardware: {
    host: { name: string; os: string; arch: string; kernel?: string; cpu?: string };
    devices: { class: string; model: string; driver: string; id?: string }[];
  };
  outcome: { status: string; exit_code?: number; detail?: string };
  notes?: string[];
  started: string;
  ended: string;
  record?: { genesis: string; head: string };
  audit_prev?: string;
  jcp?: string;
  evidence?: { provider: string; kind: string; report: string; software?: boolean; devices?: string };
  locality?: { claim: string; region: string };
}

/** A verified attestation. */
export interface Attestation {
  /** The claim, decoded. */
  claim: AttestationClaim;
  /** Its content address (`b3:…`): BLAKE3 of the claim's canonical bytes, the run's id. */
  address: string;
  /** The claim's canonical bytes: what the signature is over. */
  claimBytes: Uint8Array;
  /** Whether the signer is one of the trusted keys given. */
  trusted: boolean;
}

const CLAIM: Members = {
  type: { type: S.str(), required: true },
  signer: { type: S.key(), required: true },
  unit: { type: S.addr(), required: true },
  image: { type: S.addr(), required: true },
  grants: { type: S.addr(), required: true },
  decisions: { type: S.addr(), required: true },
  receipt: { type: S.addr(), required: true },
  journal: { type: S.addr(), zeroOk: true },
  tier: {
    required: true,
    type: S.obj({
      required: { type: S.enumOf(...TIERS), required: true },
      chosen: { type: S.enumOf(...TIERS), required: true },
      reason: { type: S.str(), required: true },
    }),
  },
  executor: { type: S.str(), required: true },
  hardware: {
    required: true,
    type: S.obj({
      host: {
        required: true,
        type: S.obj({
          name: { type: S.str(), required: true },
          os: { type: S.str(), required: true },
          arch: { type: S.str(), required: true },
          kernel: { type: S.str() },
          cpu: { type: S.str() },
        }),
      },
      devices: {
        required: true,
        type: S.arr(
          S.obj({
            class: { type: S.str(), required: true },
            model: { type: S.str(), required: true },
            driver: { type: S.str(), required: true },
            id: { type: S.str() },
          }),
        ),
      },
    }),
  },
  outcome: {
    required: true,
    type: S.obj({
      status: { type: S.str(), required: true },
      exit_code: { type: S.int(), zeroOk: true },
      detail: { type: S.str() },
    }),
  },
  notes: { type: S.arr(S.str()) },
  started: { type: S.str(), required: true },
  ended: { type: S.str(), required: true },
  record: { type: S.obj({ genesis: { type: S.addr(), required: true }, head: { type: S.addr(), required: true } }), zeroOk: true },
  audit_prev: { type: S.addr(), zeroOk: true },
  jcp: { type: S.addr(), zeroOk: true },
  evidence: {
    zeroOk: true,
    type: S.obj({
      provider: { type: S.str(), required: true },
      kind: { type: S.str(), required: true },
      report: { type: S.addr(), required: true },
      software: { type: S.bool() },
      devices: { type: S.addr(), zeroOk: true },
    }),
  },
  locality: { zeroOk: true, type: S.obj({ claim: { type: S.addr(), required: true }, region: { type: S.str(), required: true } }) },
};

const TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{9})Z$/;

/** Unix nanoseconds of a claim's time (RFC 3339 UTC, nine fraction digits); throws `invalid`. */
export function claimTimeNS(s: string, where: string): bigint {
  const m = TIME.exec(s);
  const ms = m ? Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!) : NaN;
  if (!m || Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 19) !== s.slice(0, 19)) {
    throw new VerificationError("invalid", where, `${JSON.stringify(s)}: want 2006-01-02T15:04:05.000000000Z`);
  }
  return BigInt(ms) * 1000000n + BigInt(m[7]!);
}

const tierRank = (t: string) => (TIERS as readonly string[]).indexOf(t);

/** The rules of attestation.md's table and its versions (Go: attest.Claim.Validate). */
function validateClaim(c: AttestationClaim): void {
  const [V1, V2, V3, V4] = ATTESTATION_TYPES;
  const v2 = c.record !== undefined || c.audit_prev !== undefined;
  if (c.evidence || c.locality || c.type === V4) {
    const member = c.evidence ? "claim.evidence" : "claim.locality";
    const e = c.evidence;
    if (c.type !== V4) throw new VerificationError("unknown-field", member, `a member of ${V4}, not of ${c.type}`);
    if (!e && c.locality) throw new VerificationError("missing-field", "claim.evidence", "a locality claim is sealed with the evidence that binds its host key");
    if (!e) throw new VerificationError("non-canonical", "claim.type", "a claim without evidence is /1, /2 or /3");
    if (!e.provider || !e.kind) throw new VerificationError("missing-field", "claim.evidence", "evidence names its provider and its kind");
    if (isZeroAddr(e.report)) throw new VerificationError("missing-field", "claim.evidence.report", "the zero address names no report");
    if (isZeroAddr(e.devices)) throw new VerificationError("missing-field", "claim.evidence.devices", "the zero address names no device evidence");
    if ((e.software === true) !== (e.kind === "software")) throw new VerificationError("invalid", "claim.evidence.software", "software is true exactly for evidence of kind software");
    if (isZeroAddr(c.jcp)) throw new VerificationError("missing-field", "claim.jcp", "the zero address names no decision");
    if (tierRank(c.tier.chosen) < 6) throw new VerificationError("invalid", "claim.evidence", `evidence is sealed into S6 and S7 runs, not ${c.tier.chosen}`);
    if (c.locality) {
      if (isZeroAddr(c.locality.claim)) throw new VerificationError("missing-field", "claim.locality.claim", "the zero address names no locality claim");
      if (!c.locality.region) throw new VerificationError("missing-field", "claim.locality.region", "a locality claim is for a named region");
      if (c.tier.chosen !== "S7") throw new VerificationError("invalid", "claim.locality", `a locality claim is sealed into S7 runs, not ${c.tier.chosen}`);
    }
  } else if (c.jcp !== undefined && c.type !== V3) {
    throw new VerificationError("unknown-field", "claim.jcp", `a member of ${V3}, not of ${c.type}`);
  } else if (c.type === V3 && c.jcp === undefined) {
    throw new VerificationError("non-canonical", "claim.type", "a claim without jcp is /1 or /2");
  } else if (c.type === V3 && isZeroAddr(c.jcp)) {
    throw new VerificationError("missing-field", "claim.jcp", "the zero address names no decision");
  } else if (c.type === V3) {
    // fine
  } else if (c.type === V1 && c.record !== undefined) {
    throw new VerificationError("unknown-field", "claim.record", `a member of ${V2}, not of ${V1}`);
  } else if (c.type === V1 && c.audit_prev !== undefined) {
    throw new VerificationError("unknown-field", "claim.audit_prev", `a member of ${V2}, not of ${V1}`);
  } else if (c.type === V2 && !v2) {
    throw new VerificationError("non-canonical", "claim.type", "a claim with neither record nor audit_prev is /1");
  } else if (c.type !== V1 && c.type !== V2) {
    throw new VerificationError("unrecognised", "claim.type", `${JSON.stringify(c.type)}, want one of ${ATTESTATION_TYPES.join(", ")}`);
  }
  if (c.record && (isZeroAddr(c.record.genesis) || isZeroAddr(c.record.head))) {
    throw new VerificationError("missing-field", "claim.record", "a record is cited by its genesis and a head, neither the zero address");
  }
  if (isZeroAddr(c.audit_prev)) throw new VerificationError("missing-field", "claim.audit_prev", "the zero address names no head");
  for (const name of ["unit", "image", "grants", "decisions", "receipt"] as const) {
    if (isZeroAddr(c[name])) throw new VerificationError("missing-field", `claim.${name}`, `a claim binds its ${name} by address`);
  }
  if (isZeroAddr(c.journal)) throw new VerificationError("non-canonical", "claim.journal", "the zero address; an absent journal is left out");
  if (!c.tier.reason) throw new VerificationError("missing-field", "claim.tier.reason", "the claim says why the tier was chosen");
  const req = tierRank(c.tier.required);
  const cho = tierRank(c.tier.chosen);
  if (cho < req && !(c.tier.chosen === "S0" && c.tier.required === "S1")) {
    throw new VerificationError("invalid", "claim.tier", `chosen ${c.tier.chosen} is below required ${c.tier.required}`);
  }
  if (!c.executor) throw new VerificationError("missing-field", "claim.executor", "the claim names its executor");
  if (!c.hardware.host.os || !c.hardware.host.arch) throw new VerificationError("missing-field", "claim.hardware.host", "os and arch are required");
  c.hardware.devices.forEach((d, i) => {
    if (!(DEVICE_CLASSES as readonly string[]).includes(d.class)) {
      throw new VerificationError("invalid", `claim.hardware.devices[${i}].class`, `unknown class ${JSON.stringify(d.class)}`);
    }
    if (!d.model || !d.driver) throw new VerificationError("missing-field", `claim.hardware.devices[${i}]`, "model and driver are required");
  });
  if (!(STATUSES as readonly string[]).includes(c.outcome.status)) {
    throw new VerificationError("invalid", "claim.outcome.status", `unknown status ${JSON.stringify(c.outcome.status)}`);
  }
  if ((c.outcome.status === "exited") !== (c.outcome.exit_code !== undefined)) {
    throw new VerificationError("invalid", "claim.outcome.exit_code", "an exit code is given exactly when the status is exited");
  }
  c.notes?.forEach((n, i) => {
    if (n === "") throw new VerificationError("invalid", `claim.notes[${i}]`, "an empty note");
  });
  const start = claimTimeNS(c.started, "claim.started");
  const end = claimTimeNS(c.ended, "claim.ended");
  if (end < start) throw new VerificationError("invalid", "claim.ended", "the run ends before it starts");
}

/**
 * Verifies an attestation (`attestation.json`'s bytes) as attestation.md's
 * "Verification" says: canonical JSON, exactly `claim` and `signature`, the
 * claim decoded strictly and valid, the signature unpadded base64url, the
 * signer not a weak key, the signature 64 bytes with S < L verifying over
 * the claim's canonical bytes, and last the signer trusted. Throws a
 * {@link VerificationError} with the first failure's code.
 */
export function verifyAttestation(envelope: Uint8Array, opts: TrustOptions = {}): Attestation {
  const env = parseCanonicalJSON(envelope, "attestation");
  check(env, S.obj({ claim: { type: S.any(), required: true }, signature: { type: S.any(), required: true } }), "");
  const o = env as { claim: JSONValue; signature: JSONValue };
  if (typeof o.claim !== "object" || o.claim === null || Array.isArray(o.claim)) throw new VerificationError("invalid", "claim", "want an object");
  check(o.claim, S.obj(CLAIM), "claim");
  const claim = o.claim as unknown as AttestationClaim;
  validateClaim(claim);
  if (typeof o.signature !== "string" || !/^[A-Za-z0-9_-]*$/.test(o.signature) || o.signature.length % 4 === 1) {
    throw new VerificationError("malformed", "signature", "not unpadded base64url");
  }
  const sig = Uint8Array.from(Buffer.from(o.signature, "base64url"));
  if (Buffer.from(sig).toString("base64url") !== o.signature) throw new VerificationError("malformed", "signature", "not unpadded base64url");
  const claimBytes = canonicalJSONBytes(claim);
  const signer = Uint8Array.from(Buffer.from(claim.signer.slice("ed25519:".length), "hex"));
  verifyEd25519(signer, claimBytes, sig, "signature", "claim.signer");
  const trusted = trustSet(opts.trust).has(claim.signer);
  if (!trusted && !opts.allowUntrusted) {
    throw new VerificationError("untrusted-key", "claim.signer", `a valid signature by ${claim.signer}, which is not a trusted key`);
  }
  return { claim, address: "b3:" + toHex(blake3(claimBytes)), claimBytes, trusted };
}
