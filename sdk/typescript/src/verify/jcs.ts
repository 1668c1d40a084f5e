// Canonical JSON as docs/spec/canonical.md restricts RFC 8785 (JCS): a
// strict parser that refuses any second form of the same content with the
// code of its first violation (by byte offset), and the canonical
// serializer.

import { VerificationError } from "../errors.js";

/** A JSON value as the canonical parser returns it (integers only). */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [k: string]: JSONValue };

const MAX_DEPTH = 64;
const MAX_SAFE = 2 ** 53;

/**
 * Parses `bytes` as canonical JSON (canonical.md), throwing a
 * {@link VerificationError} whose code names the first violation:
 * `malformed`, `truncated`, `non-canonical` (whitespace, member order,
 * escapes, `-0`, trailing bytes), `duplicate-key`, `float`, `int-range`.
 */
export function parseCanonicalJSON(bytes: Uint8Array, where = ""): JSONValue {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new VerificationError("malformed", where, "not valid UTF-8");
  }
  // Offsets below are in UTF-16 code units of text; a report gives them as such.
  let i = 0;
  const fail = (code: string, detail: string): never => {
    throw new VerificationError(code, where, `${detail} at offset ${i}`);
  };
  const need = () => {
    if (i >= text.length) fail("truncated", "the value ends early");
  };
  const isWS = (c: string) => c === " " || c === "\t" || c === "\n" || c === "\r";

  function value(depth: number): JSONValue {
    need();
    if (depth > MAX_DEPTH) fail("malformed", `nested more than ${MAX_DEPTH} deep`);
    const c = text[i]!;
    if (isWS(c)) fail("non-canonical", "insignificant whitespace");
    if (c === "{") return object(depth);
    if (c === "[") return array(depth);
    if (c === '"') return string();
    if (c === "-" || (c >= "0" && c <= "9")) return number();
    for (const [lit, v] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ] as const) {
      if (text.startsWith(lit, i)) {
        i += lit.length;
        return v;
      }
      if (lit.startsWith(text.slice(i)) && text.length - i < lit.length) fail("truncated", "the value ends early");
    }
    return fail("malformed", `unexpected ${JSON.stringify(c)}`);
  }

  function object(depth: number): JSONValue {
    i++; // {
    const out: { [k: string]: JSONValue } = Object.create(null);
    need();
    if (text[i] === "}") {
      i++;
      return out;
    }
    let prev: string | undefined;
    for (;;) {
      need();
      if (isWS(text[i]!)) fail("non-canonical", "insignificant whitespace");
      if (text[i] !== '"') fail("malformed", "want a member name");
      const at = i;
      const k = string();
      if (prev !== undefined) {
        if (k === prev || Object.prototype.hasOwnProperty.call(out, k)) {
          i = at;
          fail("duplicate-key", `member ${JSON.stringify(k)} twice`);
        }
        if (k < prev) {
          i = at;
          fail("non-canonical", `member ${JSON.stringify(k)} after ${JSON.stringify(prev)}: not in JCS order`);
        }
      }
      prev = k;
      need();
      if (isWS(text[i]!)) fail("non-canonical", "insignificant whitespace");
      if (text[i] !== ":") fail("malformed", "want ':'");
      i++;
      out[k] = value(depth + 1);
      need();
      const c = text[i]!;
      if (isWS(c)) fail("non-canonical", "insignificant whitespace");
      if (c === ",") {
        i++;
        continue;
      }
      if (c === "}") {
        i++;
        // A plain object for callers (the null prototype only guarded parsing).
        return Object.assign({}, out);
      }
      fail("malformed", "want ',' or '}'");
    }
  }

  function array(depth: number): JSONValue {
    i++; // [
    const out: JSONValue[] = [];
    need();
    if (text[i] === "]") {
      i++;
      return out;
    }
    for (;;) {
      out.push(value(depth + 1));
      need();
      const c = text[i]!;
      if (isWS(c)) fail("non-canonical", "insignificant whitespace");
      if (c === ",") {
        i++;
        continue;
      }
      if (c === "]") {
        i++;
        return out;
      }
      fail("malformed", "want ',' or ']'");
    }
  }

  function string(): string {
    i++; // "
    let out = "";
    for (;;) {
      need();
      const c = text[i]!;
      const code = c.charCodeAt(0);
      if (c === '"') {
        i++;
        return out;
      }
      if (code < 0x20) fail("malformed", "a control character in a string");
      if (c !== "\\") {
        out += c;
        i++;
        continue;
      }
      i++;
      need();
      const e = text[i]!;
      const simple: Record<string, string> = { '"': '"', "\\": "\\", b: "\b", t: "\t", n: "\n", f: "\f", r: "\r" };
      if (e in simple) {
        out += simple[e];
        i++;
        continue;
      }
      if (e === "/") fail("non-canonical", "'\\/' is written '/'");
      if (e !== "u") fail("malformed", `an invalid escape '\\${e}'`);
      const hex = text.slice(i + 1, i + 5);
      if (hex.length < 4) fail("truncated", "the value ends early");
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("malformed", "an invalid \\u escape");
      const v = parseInt(hex, 16);
      if (v >= 0x20 || /[A-F]/.test(hex) || v === 0x08 || v === 0x09 || v === 0x0a || v === 0x0c || v === 0x0d) {
        fail("non-canonical", `\\u${hex} is not how JCS escapes it`);
      }
      out += String.fromCharCode(v);
      i += 5;
    }
  }

  function number(): number {
    const start = i;
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) {
      if (i + 1 >= text.length) fail("truncated", "the value ends early");
      return fail("malformed", "not a JSON number");
    }
    i += m[0].length;
    if (m[2] !== undefined || m[3] !== undefined) {
      i = start;
      fail("float", `${m[0]}: numbers in records are integers`);
    }
    if (m[0] === "-0") {
      i = start;
      fail("non-canonical", "-0 is written 0");
    }
    const v = Number(m[0]);
    if (Math.abs(v) >= MAX_SAFE || m[1]!.length > 16) {
      i = start;
      fail("int-range", `${m[0]}: integers are below 2^53 in magnitude`);
    }
    return v;
  }

  if (text.length === 0) fail("truncated", "no value");
  const v = value(1);
  if (i !== text.length) fail("non-canonical", `${text.length - i} bytes after the value`);
  return v;
}

/**
 * The canonical JSON (RFC 8785 JCS) of a value: members sorted by the
 * UTF-16 code units of their names, no whitespace, strings and numbers as
 * ECMAScript's JSON.stringify writes them (which JCS adopts). Undefined
 * members are left out.
 */
export function canonicalJSON(v: unknown): string {
  if (v === null || typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new TypeError("canonicalJSON: a non-finite number has no JSON form");
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return "[" + v.map((x) => (x === undefined ? "null" : canonicalJSON(x))).join(",") + "]";
  if (typeof v === "object") {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonicalJSON(o[k])).join(",") + "}";
  }
  throw new TypeError(`canonicalJSON: a ${typeof v} has no JSON form`);
}

/** The canonical JSON of a value, as UTF-8 bytes. */
export function canonicalJSONBytes(v: unknown): Uint8Array {
  return new TextEncoder().encode(canonicalJSON(v));
}
