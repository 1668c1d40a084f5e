// Ed25519 as docs/spec/keys.md holds it: node:crypto verifies the
// signature (RFC 8032), after the strict checks the spec makes explicit,
// done here: a key must be the canonical encoding of a curve point that
// is not of small order (`weak-key`), a signature exactly 64 bytes with
// S below the group order L (`signature`).

import { createPublicKey, verify as cryptoVerify, type KeyObject } from "node:crypto";
import { VerificationError } from "../errors.js";

const P = (1n << 255n) - 19n;
const L = (1n << 252n) + 27742317777372353535851937790883648493n;

function mod(a: bigint): bigint {
  const r = a % P;
  return r < 0n ? r + P : r;
}

function pow(b: bigint, e: bigint): bigint {
  let r = 1n;
  b = mod(b);
  while (e > 0n) {
    if (e & 1n) r = (r * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return r;
}

const D = mod(-121665n * pow(121666n, P - 2n));
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

type Point = [bigint, bigint, bigint, bigint];

function add(p: Point, q: Point): Point {
  const [x1, y1, z1, t1] = p;
  const [x2, y2, z2, t2] = q;
  const a = mod((y1 - x1) * (y2 - x2));
  const b = mod((y1 + x1) * (y2 + x2));
  const c = mod(t1 * 2n * D * t2);
  const d = mod(z1 * 2n * z2);
  const e = b - a;
  const f = d - c;
  const g = d + c;
  const h = b + a;
  return [mod(e * f), mod(g * h), mod(f * g), mod(e * h)];
}

function littleEndian(b: Uint8Array): bigint {
  let v = 0n;
  for (let i = b.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(b[i]!);
  return v;
}

/** RFC 8032 §5.1.3, strictly: null unless `s` is a curve point's canonical encoding. */
function decodePoint(s: Uint8Array): Point | null {
  if (s.length !== 32) return null;
  const v = littleEndian(s);
  const y = v & ((1n << 255n) - 1n);
  const sign = v >> 255n;
  if (y >= P) return null;
  const u = mod(y * y - 1n);
  const w = mod(D * y * y + 1n);
  let x = mod(u * pow(w, 3n) * pow(u * pow(w, 7n), (P - 5n) / 8n));
  if (mod(w * x * x - u) !== 0n) {
    if (mod(w * x * x + u) !== 0n) return null;
    x = mod(x * SQRT_M1);
  }
  if (x === 0n && sign === 1n) return null;
  if ((x & 1n) !== sign) x = P - x;
  return [x, y, 1n, mod(x * y)];
}

/**
 * Checks an Ed25519 public key as keys.md requires: the canonical encoding
 * of a curve point whose order is not small ([8]A is not the identity).
 * Throws a {@link VerificationError} `weak-key` otherwise.
 */
export function checkPublicKey(pub: Uint8Array, where = "key"): void {
  const a = decodePoint(pub);
  if (!a) throw new VerificationError("weak-key", where, "not the canonical encoding of a curve point");
  let q = a;
  for (let i = 0; i < 3; i++) q = add(q, q);
  // The identity in extended coordinates: X = 0 and Y = Z.
  if (q[0] === 0n && mod(q[1] - q[2]) === 0n) {
    throw new VerificationError("weak-key", where, "a point of small order: it accepts signatures made without a private key");
  }
}

function keyObject(pub: Uint8Array): KeyObject {
  return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(pub).toString("base64url") }, format: "jwk" });
}

/**
 * Verifies an Ed25519 signature with keys.md's strict checks: the key
 * first (`weak-key`), then 64 bytes with S < L, then the signature itself
 * (`signature`). Throws a {@link VerificationError}.
 */
export function verifyEd25519(pub: Uint8Array, message: Uint8Array, sig: Uint8Array, where = "signature", keyWhere = "signer"): void {
  checkPublicKey(pub, keyWhere);
  if (sig.length !== 64) throw new VerificationError("signature", where, `${sig.length} bytes, not 64`);
  if (littleEndian(sig.subarray(32)) >= L) throw new VerificationError("signature", where, "S is not below the group order L");
  let ok = false;
  try {
    ok = cryptoVerify(null, message, keyObject(pub), sig);
  } catch (e) {
    throw new VerificationError("signature", where, `does not verify: ${(e as Error).message}`);
  }
  if (!ok) throw new VerificationError("signature", where, "does not verify under the signer's key");
}

/** The 32 key bytes of an `ed25519:<64 hex>` text key; throws `invalid` for any other form. */
export function parsePublicKey(text: string, where = "key"): Uint8Array {
  const m = /^ed25519:([0-9a-f]{64})$/.exec(text);
  if (!m) throw new VerificationError("invalid", where, `${JSON.stringify(text)}: want ed25519: and 64 lowercase hex digits`);
  return Uint8Array.from(Buffer.from(m[1]!, "hex"));
}
