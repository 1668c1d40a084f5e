// JCR-1 energy receipts (docs/spec/receipt.md): COSE_Sign1 over
// core-deterministic CBOR, opened in the specification's verification
// order, the first failure refused with its code.

import { VerificationError } from "../errors.js";
import { blake3, toHex } from "./blake3.js";
import { CborMap, CborTag, decodeCbor, encodeCbor, type CborValue } from "./cbor.js";
import { verifyEd25519 } from "./ed25519.js";
import { trustSet, type TrustInput } from "./trust.js";

/** The device classes, in their canonical order. */
export const DEVICE_CLASSES = ["Cpu", "Simd", "Gpu", "Npu", "Tpu", "Lpu", "Photonic", "Quantum"] as const;

/** One reading of a receipt. Integers that can pass 2^53 are bigint. */
export interface ReceiptReading {
  /** `HwShunt`, `ModelBased` or `Estimator`. */
  provenance: string;
  /** `run`, `host` or `alt`. */
  scope: string;
  /** Where the figure came from (`tdp`, `powercap:package-0`, …). */
  source: string;
  /** The reading's interval, Unix nanoseconds. */
  start_ns: bigint;
  /** The reading's interval, Unix nanoseconds. */
  end_ns: bigint;
  /** The figure, µJ. */
  uj: bigint;
  /** The formula and its inputs (ModelBased and Estimator). */
  basis?: string;
}

/** One device class's account. */
export interface ReceiptDevice {
  /** The class (`Cpu`, `Gpu`, …). */
  class: string;
  /** Sum of its run-scope HwShunt readings, µJ. */
  measured_uj: bigint;
  /** Sum of its run-scope ModelBased and Estimator readings, µJ. */
  estimated_uj: bigint;
  /** Its readings. */
  readings: ReceiptReading[];
}

/** A verified receipt's payload. */
export interface Receipt {
  /** The version: 1. */
  v: bigint;
  /** The signer, `ed25519:HEX`. */
  signer: string;
  /** The unit that spent the energy, `b3:HEX`. */
  unit: string;
  /** The run's interval, Unix nanoseconds. */
  start_ns: bigint;
  /** The run's interval, Unix nanoseconds. */
  end_ns: bigint;
  /** WASM fuel consumed, where metered. */
  fuel?: bigint;
  /** One account per class, in canonical order. */
  devices: ReceiptDevice[];
  /** The receipt's content address: BLAKE3 of the envelope bytes. */
  address: string;
  /** Whether the signer is one of the trusted keys given. */
  trusted: boolean;
}

const PAYLOAD_KEYS: Record<string, boolean> = { v: true, signer: true, unit: true, start_ns: true, end_ns: true, fuel: false, devices: true };
const DEVICE_KEYS: Record<string, boolean> = { class: true, measured_uj: true, estimated_uj: true, readings: true };
const READING_KEYS: Record<string, boolean> = {
  provenance: true,
  scope: true,
  source: true,
  start_ns: true,
  end_ns: true,
  uj: true,
  basis: false,
};

function fields(m: CborValue, table: Record<string, boolean>, where: string): CborMap {
  if (!(m instanceof CborMap)) throw new VerificationError("invalid", where, "not a map");
  for (const k of m.keys()) {
    if (typeof k !== "string") throw new VerificationError("invalid", where, "a key that is not a text string");
    if (!(k in table)) throw new VerificationError("unknown-field", where ? `${where}.${k}` : k, "a member this version does not define");
  }
  for (const [k, req] of Object.entries(table)) {
    if (req && !m.has(k)) throw new VerificationError("missing-field", where ? `${where}.${k}` : k, "required");
  }
  return m;
}

function uint(v: CborValue, where: string): bigint {
  if (typeof v !== "bigint" || v < 0n || v >= 1n << 64n) throw new VerificationError("invalid", where, "want an unsigned integer");
  return v;
}
function text(v: CborValue, where: string): string {
  if (typeof v !== "string") throw new VerificationError("invalid", where, "want a text string");
  return v;
}
function bytes32(v: CborValue, where: string): Uint8Array {
  if (!(v instanceof Uint8Array) || v.length !== 32) throw new VerificationError("invalid", where, "want a 32-byte string");
  return v;
}

/** Options of a verification: the keys to trust. */
export interface TrustOptions {
  /** The keys to trust, `ed25519:HEX` (or 32 raw bytes each). None trusted is `untrusted-key`. */
  trust?: TrustInput;
  /**
   * Return an untrusted but otherwise valid record (with `trusted: false`)
   * instead of refusing it `untrusted-key`.
   */
  allowUntrusted?: boolean;
}

/**
 * Opens a JCR-1 receipt (COSE_Sign1) and verifies it in receipt.md's order:
 * deterministic CBOR, the envelope's shape, its protected header (no
 * `crit`, only alg/content type/kid, alg EdDSA, `application/jcr-1+cbor`,
 * kid the address of the signer), the payload's members and types and
 * canonical form, the key (`weak-key`), the signature over the
 * Sig_structure, the payload's rules (classes in order, reading intervals,
 * bases, totals: `total-mismatch`) and last the trust (`untrusted-key`).
 * Throws a {@link VerificationError} with the code of the first failure.
 */
export function openReceipt(envelope: Uint8Array, opts: TrustOptions = {}): Receipt {
  // 1-2. deterministic CBOR, tag 18 around [bstr, map, bstr, bstr]
  const env = decodeCbor(envelope, "receipt");
  if (envelope[0] !== 0xd2 || envelope[1] !== 0x84 || !(env instanceof CborTag) || env.tag !== 18n) {
    throw new VerificationError("malformed", "receipt", "not tag 18 around an array of four");
  }
  const arr = env.value as CborValue[];
  const [protRaw, unprot, payloadRaw, sig] = arr;
  if (!(protRaw instanceof Uint8Array) || !(unprot instanceof CborMap) || !(payloadRaw instanceof Uint8Array) || !(sig instanceof Uint8Array)) {
    throw new VerificationError("malformed", "receipt", "not [bstr, map, bstr, bstr]");
  }
  // 3. protected header
  let prot: CborValue;
  try {
    prot = decodeCbor(protRaw, "protected");
  } catch (e) {
    throw new VerificationError("header", "protected", (e as Error).message);
  }
  if (!(prot instanceof CborMap) || [...prot.keys()].some((k) => typeof k !== "bigint")) {
    throw new VerificationError("header", "protected", "not a map with integer labels");
  }
  // 4-9.
  if (prot.has(2n)) throw new VerificationError("unknown-critical", "protected.crit", "this profile defines no critical headers");
  for (const k of prot.keys()) {
    if (k !== 1n && k !== 3n && k !== 4n) throw new VerificationError("header", "protected", `label ${String(k)}`);
  }
  if (unprot.size !== 0) throw new VerificationError("header", "unprotected", "not the empty map");
  const alg = prot.get(1n);
  if (alg !== -8n && alg !== -19n) throw new VerificationError("alg", "protected.alg", `algorithm ${String(alg)}`);
  if (prot.get(3n) !== "application/jcr-1+cbor") {
    throw new VerificationError("header", "protected.content-type", `${JSON.stringify(String(prot.get(3n)))}, want "application/jcr-1+cbor"`);
  }
  const kid = prot.get(4n);
  if (!(kid instanceof Uint8Array) || kid.length !== 32) throw new VerificationError("header", "protected.kid", "not a 32-byte string");
  // 10. the payload: deterministic, known keys, typed, re-encodes to itself
  const p = fields(decodeCbor(payloadRaw, "payload"), PAYLOAD_KEYS, "");
  const v = uint(p.get("v")!, "v");
  const signer = bytes32(p.get("signer")!, "signer");
  const unit = bytes32(p.get("unit")!, "unit");
  const start = uint(p.get("start_ns")!, "start_ns");
  const end = uint(p.get("end_ns")!, "end_ns");
  const fuel = p.has("fuel") ? uint(p.get("fuel")!, "fuel") : undefined;
  const devs = p.get("devices");
  if (!Array.isArray(devs)) throw new VerificationError("invalid", "devices", "want an array");
  const devices: ReceiptDevice[] = devs.map((d, i) => {
    const w = `devices[${i}]`;
    const m = fields(d, DEVICE_KEYS, w);
    const rs = m.get("readings");
    if (!Array.isArray(rs)) throw new VerificationError("invalid", `${w}.readings`, "want an array");
    return {
      class: text(m.get("class")!, `${w}.class`),
      measured_uj: uint(m.get("measured_uj")!, `${w}.measured_uj`),
      estimated_uj: uint(m.get("estimated_uj")!, `${w}.estimated_uj`),
      readings: rs.map((r, j) => {
        const rw = `${w}.readings[${j}]`;
        const rm = fields(r, READING_KEYS, rw);
        const reading: ReceiptReading = {
          provenance: text(rm.get("provenance")!, `${rw}.provenance`),
          scope: text(rm.get("scope")!, `${rw}.scope`),
          source: text(rm.get("source")!, `${rw}.source`),
          start_ns: uint(rm.get("start_ns")!, `${rw}.start_ns`),
          end_ns: uint(rm.get("end_ns")!, `${rw}.end_ns`),
          uj: uint(rm.get("uj")!, `${rw}.uj`),
        };
        if (rm.has("basis")) {
          reading.basis = text(rm.get("basis")!, `${rw}.basis`);
          if (reading.basis === "") throw new VerificationError("non-canonical", `${rw}.basis`, "an empty basis is left out");
        }
        return reading;
      }),
    };
  });
  if (compareEq(encodeCbor(p), payloadRaw) === false) {
    throw new VerificationError("non-canonical", "payload", "the payload does not re-encode to its bytes");
  }
  // 11. kid names the signer
  if (toHex(kid) !== toHex(blake3(signer))) throw new VerificationError("header", "protected.kid", "not the address of the payload's signer");
  // 12-14. key, signature over the Sig_structure
  const sigStructure = encodeCbor(["Signature1", protRaw, new Uint8Array(0), payloadRaw]);
  verifyEd25519(signer, sigStructure, sig, "signature", "signer");
  // 15. the receipt's rules
  const r: Receipt = {
    v,
    signer: "ed25519:" + toHex(signer),
    unit: "b3:" + toHex(unit),
    start_ns: start,
    end_ns: end,
    devices,
    address: "b3:" + toHex(blake3(envelope)),
    trusted: false,
  };
  if (fuel !== undefined) r.fuel = fuel;
  validateReceipt(r, unit);
  // 16. trust
  r.trusted = trustSet(opts.trust).has(r.signer);
  if (!r.trusted && !opts.allowUntrusted) {
    throw new VerificationError("untrusted-key", "signer", `a valid signature by ${r.signer}, which is not a trusted key`);
  }
  return r;
}

function compareEq(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function validateReceipt(r: Receipt, unit: Uint8Array): void {
  if (r.v !== 1n) throw new VerificationError("invalid", "v", `version ${r.v}, want 1`);
  if (unit.every((b) => b === 0)) throw new VerificationError("missing-field", "unit", "the unit address is zero");
  if (r.end_ns < r.start_ns) throw new VerificationError("invalid", "end_ns", "the interval ends before it starts");
  if (r.fuel === 0n) throw new VerificationError("invalid", "fuel", "0: a run that counted no fuel omits fuel");
  let prev = -1;
  r.devices.forEach((d, i) => {
    const w = `devices[${i}]`;
    const rank = (DEVICE_CLASSES as readonly string[]).indexOf(d.class);
    if (rank < 0) throw new VerificationError("invalid", `${w}.class`, `unknown device class ${JSON.stringify(d.class)}`);
    if (rank <= prev) throw new VerificationError("non-canonical", `${w}.class`, `class ${d.class} is repeated or out of canonical order`);
    prev = rank;
    let measured = 0n;
    let estimated = 0n;
    d.readings.forEach((rd, j) => {
      const rw = `${w}.readings[${j}]`;
      if (!["HwShunt", "ModelBased", "Estimator"].includes(rd.provenance)) {
        throw new VerificationError("invalid", `${rw}.provenance`, `unknown provenance ${JSON.stringify(rd.provenance)}`);
      }
      if (!["run", "host", "alt"].includes(rd.scope)) throw new VerificationError("invalid", `${rw}.scope`, `unknown scope ${JSON.stringify(rd.scope)}`);
      if (rd.source === "") throw new VerificationError("missing-field", `${rw}.source`, "a reading names its source");
      if (rd.end_ns < rd.start_ns) throw new VerificationError("invalid", `${rw}.end_ns`, "the interval ends before it starts");
      if (rd.scope !== "host" && (rd.start_ns < r.start_ns || rd.end_ns > r.end_ns)) {
        throw new VerificationError("invalid", `${rw}.start_ns`, `a ${rd.scope}-scope reading lies within the run's interval`);
      }
      if (rd.provenance !== "HwShunt" && !rd.basis) throw new VerificationError("missing-field", `${rw}.basis`, `a ${rd.provenance} reading states its basis`);
      if (rd.scope === "run") {
        if (rd.provenance === "HwShunt") measured += rd.uj;
        else estimated += rd.uj;
      }
    });
    if (measured >= 1n << 64n || estimated >= 1n << 64n) throw new VerificationError("total-mismatch", w, "readings overflow");
    if (measured !== d.measured_uj) throw new VerificationError("total-mismatch", `${w}.measured_uj`, `${d.measured_uj}, but its run-scope HwShunt readings sum to ${measured}`);
    if (estimated !== d.estimated_uj) {
      throw new VerificationError("total-mismatch", `${w}.estimated_uj`, `${d.estimated_uj}, but its run-scope estimates sum to ${estimated}`);
    }
  });
}
