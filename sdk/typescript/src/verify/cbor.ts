// Core-deterministic CBOR (RFC 8949 §4.2.1) as docs/spec/canonical.md
// restricts it: a strict decoder that refuses any other encoding with the
// spec's codes (`malformed`, `truncated`, `cbor-non-shortest`,
// `cbor-indefinite`, `cbor-unsorted-keys`, `duplicate-key`), and the
// deterministic encoder (what COSE's Sig_structure is, and what a payload
// must re-encode to).

import { VerificationError } from "../errors.js";

/** A CBOR tag around a value. */
export class CborTag {
  /** @param tag the tag number; @param value the item it wraps */
  constructor(
    readonly tag: bigint,
    readonly value: CborValue,
  ) {}
}

/** A CBOR simple value other than false, true, null and undefined. */
export class CborSimple {
  /** @param value its number */
  constructor(readonly value: number) {}
}

/** A map key that is not an integer or a text string: kept by its encoded bytes. */
export class CborRawKey {
  /** @param hex the key's encoding, in hex */
  constructor(readonly hex: string) {}
}

/** A CBOR map, its keys in their encoded order (integers as bigint). */
export class CborMap extends Map<bigint | string | boolean | null | CborRawKey, CborValue> {}

/** A decoded CBOR item: integers are bigint, byte strings Uint8Array, floats number. */
export type CborValue =
  | bigint
  | number
  | string
  | Uint8Array
  | boolean
  | null
  | undefined
  | CborValue[]
  | CborMap
  | CborTag
  | CborSimple;

const MAX_DEPTH = 32;

/**
 * Decodes `data` as exactly one core-deterministic CBOR item, throwing a
 * {@link VerificationError} with canonical.md's code at the first
 * violation (its byte offset in the message).
 */
export function decodeCbor(data: Uint8Array, where = ""): CborValue {
  const [v, end] = decodeCborAt(data, 0, where);
  if (end !== data.length) throw new VerificationError("malformed", where, `${data.length - end} bytes after the item at offset ${end}`);
  return v;
}

/**
 * Decodes one core-deterministic CBOR item starting at `start`, returning
 * it and the offset after it (for a concatenation of items, a journal's).
 */
export function decodeCborAt(data: Uint8Array, start: number, where = ""): [CborValue, number] {
  const fail = (code: string, off: number, detail: string): never => {
    throw new VerificationError(code, where, `${detail} at offset ${off}`);
  };
  const need = (off: number, n: number) => {
    if (off + n > data.length) fail("truncated", data.length, "the item ends inside a value");
  };
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);

  function head(off: number): { major: number; ai: number; arg: bigint; next: number } {
    need(off, 1);
    const ib = data[off]!;
    const major = ib >> 5;
    const ai = ib & 31;
    if (ai < 24) return { major, ai, arg: BigInt(ai), next: off + 1 };
    if (ai === 28 || ai === 29 || ai === 30) fail("malformed", off, `reserved additional information ${ai}`);
    if (ai === 31) {
      if (major >= 2 && major <= 5) fail("cbor-indefinite", off, "an indefinite length");
      fail("malformed", off, `additional information 31 for major type ${major}`);
    }
    const n = 1 << (ai - 24);
    need(off + 1, n);
    let arg = 0n;
    for (let k = 0; k < n; k++) arg = (arg << 8n) | BigInt(data[off + 1 + k]!);
    if (major !== 7) {
      const shortest = ai === 24 ? arg >= 24n : arg >= 1n << BigInt(8 * (n >> 1));
      if (!shortest) fail("cbor-non-shortest", off, "an argument not in its shortest form");
    }
    return { major, ai, arg, next: off + 1 + n };
  }

  function float(ai: number, off: number): number {
    let v: number;
    if (ai === 25) {
      const h = dv.getUint16(off + 1);
      v = halfToNumber(h);
      if (Number.isNaN(v) && h !== 0x7e00) fail("cbor-non-shortest", off, "a NaN other than f97e00");
      return v;
    }
    v = ai === 26 ? dv.getFloat32(off + 1) : dv.getFloat64(off + 1);
    if (Number.isNaN(v)) fail("cbor-non-shortest", off, "a NaN other than f97e00");
    if (fitsHalf(v) || (ai === 27 && Math.fround(v) === v)) fail("cbor-non-shortest", off, "a float that fits a shorter form");
    return v;
  }

  function item(off: number, depth: number): [CborValue, number] {
    if (depth > MAX_DEPTH) fail("malformed", off, `nested more than ${MAX_DEPTH} deep`);
    const { major, ai, arg, next } = head(off);
    let p = next;
    switch (major) {
      case 0:
        return [arg, p];
      case 1:
        return [-1n - arg, p];
      case 2:
      case 3: {
        const len = Number(arg);
        if (arg > BigInt(data.length)) need(p, data.length + 1);
        need(p, len);
        const raw = data.slice(p, p + len);
        if (major === 2) return [raw, p + len];
        try {
          return [new TextDecoder("utf-8", { fatal: true }).decode(raw), p + len];
        } catch {
          return fail("malformed", off, "a text string that is not UTF-8");
        }
      }
      case 4: {
        if (arg > BigInt(data.length)) need(p, data.length + 1);
        const out: CborValue[] = [];
        for (let k = 0n; k < arg; k++) {
          const [v, n] = item(p, depth + 1);
          out.push(v);
          p = n;
        }
        return [out, p];
      }
      case 5: {
        if (arg > BigInt(data.length)) need(p, data.length + 1);
        const out = new CborMap();
        let prev: Uint8Array | undefined;
        for (let k = 0n; k < arg; k++) {
          const ks = p;
          const [key, kn] = item(p, depth + 1);
          const kraw = data.subarray(ks, kn);
          if (prev) {
            const c = compareBytes(kraw, prev);
            if (c === 0) fail("duplicate-key", ks, "a map key twice");
            if (c < 0) fail("cbor-unsorted-keys", ks, "a map key out of bytewise order");
          }
          prev = kraw;
          const [v, vn] = item(kn, depth + 1);
          p = vn;
          const mk =
            typeof key === "bigint" || typeof key === "string" || typeof key === "boolean" || key === null
              ? key
              : new CborRawKey(Buffer.from(kraw).toString("hex"));
          out.set(mk, v);
        }
        return [out, p];
      }
      case 6: {
        const [v, n] = item(p, depth + 1);
        return [new CborTag(arg, v), n];
      }
      default: {
        if (ai < 24) {
          if (ai === 20) return [false, p];
          if (ai === 21) return [true, p];
          if (ai === 22) return [null, p];
          if (ai === 23) return [undefined, p];
          return [new CborSimple(ai), p];
        }
        if (ai === 24) {
          if (arg < 32n) fail("malformed", off, `simple value ${arg} in the two-byte form`);
          return [new CborSimple(Number(arg)), p];
        }
        return [float(ai, off), p];
      }
    }
  }

  return item(start, 1);
}

function halfToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

function fitsHalf(v: number): boolean {
  if (!Number.isFinite(v)) return true;
  if (v === 0) return true;
  const a = Math.abs(v);
  if (a > 65504) return false;
  // Representable in binary16: a multiple of 2^-24 with an 11-bit significand.
  if (a < 2 ** -14) return Number.isInteger(a * 2 ** 24);
  const e = Math.floor(Math.log2(a));
  return Number.isInteger(a * 2 ** (10 - e));
}

/** Bytewise comparison: negative, zero or positive. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** A value the encoder takes: integers as bigint or safe-integer number. */
export type CborInput =
  | bigint
  | number
  | string
  | Uint8Array
  | boolean
  | null
  | CborInput[]
  | CborMap
  | CborTag
  | Map<unknown, unknown>
  | { [k: string]: CborInput | undefined };

function headBytes(major: number, n: bigint): number[] {
  const m = major << 5;
  if (n < 24n) return [m | Number(n)];
  const width = n < 0x100n ? 1 : n < 0x10000n ? 2 : n < 0x100000000n ? 4 : 8;
  const out = [m | (24 + Math.log2(width))];
  for (let k = width - 1; k >= 0; k--) out.push(Number((n >> BigInt(8 * k)) & 0xffn));
  return out;
}

/**
 * The core-deterministic encoding of a value (integers, byte and text
 * strings, arrays, maps with keys sorted by their encodings, booleans,
 * null, tags). Floats are refused: records carry none.
 */
export function encodeCbor(v: CborInput): Uint8Array {
  const parts: number[] = [];
  const push = (b: ArrayLike<number>) => {
    for (let i = 0; i < b.length; i++) parts.push(b[i]!);
  };
  function enc(x: unknown): void {
    if (typeof x === "number") {
      if (!Number.isSafeInteger(x)) throw new TypeError("encodeCbor: floats are not encoded");
      x = BigInt(x);
    }
    if (typeof x === "bigint") {
      push(x >= 0n ? headBytes(0, x) : headBytes(1, -1n - x));
    } else if (typeof x === "string") {
      const b = new TextEncoder().encode(x);
      push(headBytes(3, BigInt(b.length)));
      push(b);
    } else if (x instanceof Uint8Array) {
      push(headBytes(2, BigInt(x.length)));
      push(x);
    } else if (x === false) push([0xf4]);
    else if (x === true) push([0xf5]);
    else if (x === null) push([0xf6]);
    else if (Array.isArray(x)) {
      push(headBytes(4, BigInt(x.length)));
      x.forEach(enc);
    } else if (x instanceof CborTag) {
      push(headBytes(6, x.tag));
      enc(x.value);
    } else if (x instanceof Map || (typeof x === "object" && x !== null)) {
      const entries = x instanceof Map ? [...x.entries()] : Object.entries(x).filter(([, v]) => v !== undefined);
      const encoded = entries.map(([k, val]) => [encodeCbor(k as CborInput), encodeCbor(val as CborInput)] as const);
      encoded.sort((a, b) => compareBytes(a[0], b[0]));
      push(headBytes(5, BigInt(encoded.length)));
      for (const [k, val] of encoded) {
        push(k);
        push(val);
      }
    } else {
      throw new TypeError(`encodeCbor: cannot encode ${String(x)}`);
    }
  }
  enc(v);
  return Uint8Array.from(parts);
}
