// The keys a verifier trusts (docs/spec/keys.md: no key is trusted
// implicitly, not even the host's own).

import { toHex } from "./blake3.js";
import { checkPublicKey, parsePublicKey } from "./ed25519.js";

/** Keys to trust: `ed25519:HEX` text, or 32 raw bytes, one or many. */
export type TrustInput = string | Uint8Array | ReadonlyArray<string | Uint8Array> | undefined;

/**
 * The set of trusted keys in their text form. Each is checked as keys.md
 * requires (a weak key is refused even as a trusted one: `weak-key`).
 */
export function trustSet(t: TrustInput): Set<string> {
  const list = t === undefined ? [] : typeof t === "string" || t instanceof Uint8Array ? [t] : t;
  const out = new Set<string>();
  for (const k of list) {
    const raw = typeof k === "string" ? parsePublicKey(k.trim(), "trust") : k;
    checkPublicKey(raw, "trust");
    out.add("ed25519:" + toHex(raw));
  }
  return out;
}
