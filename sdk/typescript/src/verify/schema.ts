// Strict decoding of a canonical JSON record into its type
// (docs/spec/canonical.md "Decoding a record into its type is strict"):
// member names exactly, required members present (`missing-field`), no
// member the type does not define (`unknown-field`), no optional member
// written out empty or null (`non-canonical`), every value of its type
// (`invalid`).

import { VerificationError } from "../errors.js";
import type { JSONValue } from "./jcs.js";

/** A member's type. */
export type Type =
  | { t: "string"; nonEmpty?: boolean }
  | { t: "int"; min?: number }
  | { t: "bool" }
  | { t: "addr" }
  | { t: "key" }
  | { t: "enum"; of: readonly string[] }
  | { t: "array"; of: Type }
  | { t: "map"; of: Type }
  | { t: "object"; members: Members }
  | { t: "any" };

/** An object's members: each with its type, and whether it is required. */
export type Members = Record<string, { type: Type; required?: boolean; /** an optional pointer member: its zero value is not "empty" */ zeroOk?: boolean }>;

/** Shorthands. */
export const S = {
  str: (nonEmpty = false): Type => ({ t: "string", nonEmpty }),
  int: (min?: number): Type => (min === undefined ? { t: "int" } : { t: "int", min }),
  bool: (): Type => ({ t: "bool" }),
  addr: (): Type => ({ t: "addr" }),
  key: (): Type => ({ t: "key" }),
  enumOf: (...of: string[]): Type => ({ t: "enum", of }),
  arr: (of: Type): Type => ({ t: "array", of }),
  map: (of: Type): Type => ({ t: "map", of }),
  obj: (members: Members): Type => ({ t: "object", members }),
  any: (): Type => ({ t: "any" }),
};

const ADDR = /^b3:[0-9a-f]{64}$/;
const KEY = /^ed25519:[0-9a-f]{64}$/;

function isEmpty(v: JSONValue): boolean {
  return (
    v === "" ||
    v === 0 ||
    v === false ||
    (Array.isArray(v) && v.length === 0) ||
    (typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).length === 0)
  );
}

/** Checks `v` against `type`, throwing the code of its first fault. `where` names it. */
export function check(v: JSONValue, type: Type, where: string): void {
  const bad = (why: string): never => {
    throw new VerificationError("invalid", where, why);
  };
  switch (type.t) {
    case "any":
      return;
    case "string":
      if (typeof v !== "string") bad("want a string");
      if (type.nonEmpty && v === "") bad("an empty string");
      return;
    case "int":
      if (typeof v !== "number" || !Number.isInteger(v)) bad("want an integer");
      if (type.min !== undefined && (v as number) < type.min) bad(`want at least ${type.min}`);
      return;
    case "bool":
      if (typeof v !== "boolean") bad("want true or false");
      return;
    case "addr":
      if (typeof v !== "string" || !ADDR.test(v)) bad("want an address, b3: and 64 lowercase hex digits");
      return;
    case "key":
      if (typeof v !== "string" || !KEY.test(v)) bad("want a key, ed25519: and 64 lowercase hex digits");
      return;
    case "enum":
      if (typeof v !== "string" || !type.of.includes(v)) bad(`${JSON.stringify(v)}: want one of ${type.of.join(", ")}`);
      return;
    case "array":
      if (!Array.isArray(v)) bad("want an array");
      (v as JSONValue[]).forEach((x, i) => check(x, type.of, `${where}[${i}]`));
      return;
    case "map":
      if (typeof v !== "object" || v === null || Array.isArray(v)) bad("want an object");
      for (const [k, x] of Object.entries(v as Record<string, JSONValue>)) check(x, type.of, `${where}.${k}`);
      return;
    case "object": {
      if (typeof v !== "object" || v === null || Array.isArray(v)) bad("want an object");
      const o = v as Record<string, JSONValue>;
      for (const [k, x] of Object.entries(o)) {
        const m = type.members[k];
        const w = where ? `${where}.${k}` : k;
        if (!m) throw new VerificationError("unknown-field", w, "a member this version does not define");
        if (x === null) {
          if (m.required) throw new VerificationError("invalid", w, "null is not a value of this member");
          throw new VerificationError("non-canonical", w, "an absent optional member is left out, not written null");
        }
        check(x, m.type, w);
        if (!m.required && !m.zeroOk && isEmpty(x)) {
          throw new VerificationError("non-canonical", w, "an optional member written out empty; it is left out");
        }
      }
      for (const [k, m] of Object.entries(type.members)) {
        if (m.required && !(k in o)) throw new VerificationError("missing-field", where ? `${where}.${k}` : k, "required");
      }
      return;
    }
  }
}

/** True for the all-zero address, which names nothing. */
export function isZeroAddr(a: string | undefined): boolean {
  return a !== undefined && /^b3:0{64}$/.test(a);
}
