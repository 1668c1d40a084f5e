// verify.js: the checks the console makes in the browser, from the bytes
// the service hands over, with no trust in the service's own verdict:
// BLAKE3 content addresses (docs/spec/addresses.md), RFC 8785 canonical
// JSON, Ed25519 by WebCrypto, the attestation (docs/spec/attestation.md),
// the JCR-1 receipt's COSE_Sign1 (docs/spec/receipt.md), a run record's
// heads and seals (docs/spec/run-record.md), a fleet item's RFC 9162
// inclusion proof under its signed checkpoint (docs/spec/fleet.md).
// Every function that checks throws a CheckError saying what failed.

export class CheckError extends Error {}

function fail(msg) { throw new CheckError(msg); }

const enc = new TextEncoder();
export const utf8 = (s) => enc.encode(s);
export const text = (b) => new TextDecoder("utf-8", { fatal: true }).decode(b);

export function hex(b) {
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}

export function unhex(s, n) {
  if (typeof s !== "string" || !/^([0-9a-f]{2})*$/.test(s) || (n !== undefined && s.length !== 2 * n)) {
    fail(`not ${n === undefined ? "" : n + " bytes of "}lowercase hex: ${String(s).slice(0, 40)}`);
  }
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

// b64 decodes standard base64 (with padding); b64url unpadded base64url.
export function b64(s) {
  if (typeof s !== "string" || !/^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(s)) fail(`not standard base64: ${String(s).slice(0, 40)}`);
  const bin = atob(s);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

export function b64url(s) {
  if (typeof s !== "string" || !/^[A-Za-z0-9_-]*$/.test(s) || s.length % 4 === 1) fail("not unpadded base64url");
  let t = s.replace(/-/g, "+").replace(/_/g, "/");
  while (t.length % 4) t += "=";
  return b64(t);
}

export function concat(...parts) {
  const n = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

export function equal(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// ---- BLAKE3 (the reference algorithm, one shot, 32-byte output) ----

const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8;

function g(s, a, b, c, d, x, y) {
  s[a] = (s[a] + s[b] + x) | 0; s[d] ^= s[a]; s[d] = (s[d] >>> 16) | (s[d] << 16);
  s[c] = (s[c] + s[d]) | 0; s[b] ^= s[c]; s[b] = (s[b] >>> 12) | (s[b] << 20);
  s[a] = (s[a] + s[b] + y) | 0; s[d] ^= s[a]; s[d] = (s[d] >>> 8) | (s[d] << 24);
  s[c] = (s[c] + s[d]) | 0; s[b] ^= s[c]; s[b] = (s[b] >>> 7) | (s[b] << 25);
}

function compress(cv, m, counter, len, flags) {
  const s = new Int32Array(16);
  for (let i = 0; i < 8; i++) s[i] = cv[i];
  s[8] = IV[0]; s[9] = IV[1]; s[10] = IV[2]; s[11] = IV[3];
  s[12] = counter % 0x100000000; s[13] = Math.floor(counter / 0x100000000);
  s[14] = len; s[15] = flags;
  let w = Int32Array.from(m);
  for (let r = 0; r < 7; r++) {
    g(s, 0, 4, 8, 12, w[0], w[1]); g(s, 1, 5, 9, 13, w[2], w[3]);
    g(s, 2, 6, 10, 14, w[4], w[5]); g(s, 3, 7, 11, 15, w[6], w[7]);
    g(s, 0, 5, 10, 15, w[8], w[9]); g(s, 1, 6, 11, 12, w[10], w[11]);
    g(s, 2, 7, 8, 13, w[12], w[13]); g(s, 3, 4, 9, 14, w[14], w[15]);
    if (r < 6) w = Int32Array.from(PERM, (p) => w[p]);
  }
  for (let i = 0; i < 8; i++) { s[i] ^= s[i + 8]; s[i + 8] ^= cv[i]; }
  return s;
}

function words(b, off, len) {
  const block = new Uint8Array(64);
  block.set(b.subarray(off, off + len));
  const dv = new DataView(block.buffer);
  const m = new Int32Array(16);
  for (let i = 0; i < 16; i++) m[i] = dv.getInt32(4 * i, true);
  return m;
}

// chunkCV hashes chunk n (1024 bytes from off, fewer for the last).
function chunkCV(b, off, len, n, root) {
  let cv = Int32Array.from(IV);
  const blocks = Math.max(1, Math.ceil(len / 64));
  let out;
  for (let i = 0; i < blocks; i++) {
    const bl = Math.min(64, len - 64 * i);
    let flags = (i === 0 ? CHUNK_START : 0) | (i === blocks - 1 ? CHUNK_END : 0);
    if (root && i === blocks - 1) flags |= ROOT;
    out = compress(cv, words(b, off + 64 * i, bl), n, bl, flags);
    cv = out.slice(0, 8);
  }
  return cv;
}

function largestPow2Below(n) { let p = 1; while (p * 2 < n) p *= 2; return p; }

function subtree(b, first, count, root) {
  if (count === 1) {
    const off = first * 1024;
    return chunkCV(b, off, Math.min(1024, b.length - off), first, root);
  }
  const left = largestPow2Below(count);
  const l = subtree(b, first, left, false), r = subtree(b, first + left, count - left, false);
  const m = new Int32Array(16);
  m.set(l, 0); m.set(r, 8);
  return compress(IV, m, 0, 64, PARENT | (root ? ROOT : 0)).slice(0, 8);
}

// blake3 is BLAKE3-256 of bytes b.
export function blake3(b) {
  const cv = subtree(b, 0, Math.max(1, Math.ceil(b.length / 1024)), true);
  const out = new Uint8Array(32);
  const dv = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) dv.setInt32(4 * i, cv[i], true);
  return out;
}

// address is the content address of b: "b3:" and its BLAKE3 in hex.
export const address = (b) => "b3:" + hex(blake3(b));

export function addressBytes(a, what) {
  if (typeof a !== "string" || !/^b3:[0-9a-f]{64}$/.test(a)) fail(`${what}: not a content address: ${String(a).slice(0, 80)}`);
  return unhex(a.slice(3), 32);
}

// ---- RFC 8785 canonical JSON ----

// jcs is v's canonical JSON (members sorted by UTF-16 code units, as
// Array.prototype.sort compares strings; ES numbers, as RFC 8785 says).
export function jcs(v) {
  if (v === null || typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number") {
    if (!Number.isFinite(v)) fail("a number that is not finite");
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
  if (typeof v === "object") {
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
  }
  fail(`a ${typeof v} is not JSON`);
}

// canonical parses bytes b as JSON that must be canonical: its bytes are
// its JCS (what every record here is written as).
export function canonical(b, what) {
  let s, v;
  try { s = text(b); } catch { fail(`${what}: not UTF-8`); }
  try { v = JSON.parse(s); } catch (e) { fail(`${what}: not JSON: ${e.message}`); }
  if (jcs(v) !== s) fail(`${what}: not canonical JSON (its bytes are not its RFC 8785 form)`);
  return v;
}

// ---- Ed25519 (WebCrypto) ----

const L = (1n << 252n) + 27742317777372353535851937790883648493n;

export function publicKey(k, what) {
  if (typeof k !== "string" || !/^ed25519:[0-9a-f]{64}$/.test(k)) fail(`${what}: not an ed25519: key`);
  return unhex(k.slice(8), 32);
}

// ed25519 checks sig (64 bytes, S below the group order) over msg under
// the 32-byte public key pub.
export async function ed25519(pub, sig, msg, what) {
  if (!globalThis.crypto || !crypto.subtle) fail("this browser gives no WebCrypto here (a secure context is needed: https)");
  if (sig.length !== 64) fail(`${what}: a signature of ${sig.length} bytes, want 64`);
  let s = 0n;
  for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(sig[i]);
  if (s >= L) fail(`${what}: the signature's S is not below the group order`);
  let key;
  try {
    key = await crypto.subtle.importKey("raw", pub, { name: "Ed25519" }, false, ["verify"]);
  } catch (e) {
    fail(`${what}: the key does not import (${e.name}: ${e.message})`);
  }
  if (!(await crypto.subtle.verify({ name: "Ed25519" }, key, sig, msg))) fail(`${what}: the signature does not verify under ${hex(pub).slice(0, 16)}…`);
}

export async function sha256(...parts) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", concat(...parts)));
}

// ---- tar (the run bundle: ustar entries runs/HEX/NAME) ----

export function untar(b) {
  const files = new Map();
  let off = 0;
  while (off + 512 <= b.length) {
    const h = b.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break;
    const str = (o, n) => { let e = o; while (e < o + n && h[e] !== 0) e++; return text(h.subarray(o, e)); };
    let name = str(0, 100);
    const prefix = str(345, 155);
    if (prefix) name = prefix + "/" + name;
    const size = parseInt(str(124, 12).trim() || "0", 8);
    const type = String.fromCharCode(h[156] || 48);
    if (!Number.isFinite(size) || size < 0 || off + 512 + size > b.length) fail(`bundle: entry ${name}: a size past its end`);
    if (type === "0" || type === "\0") files.set(name, b.slice(off + 512, off + 512 + size));
    off += 512 + Math.ceil(size / 512) * 512;
  }
  return files;
}

// ---- CBOR (what a COSE_Sign1 receipt needs: no floats, no indefinite lengths) ----

export function cbor(b) {
  let off = 0;
  const need = (n) => { if (off + n > b.length) fail("CBOR: ends early"); };
  function arg(info) {
    if (info < 24) return info;
    const n = { 24: 1, 25: 2, 26: 4, 27: 8 }[info];
    if (!n) fail(`CBOR: additional information ${info} (indefinite lengths are not core-deterministic)`);
    need(n);
    let v = 0n;
    for (let i = 0; i < n; i++) v = (v << 8n) | BigInt(b[off + i]);
    off += n;
    // An integer past 2^53 (a time in nanoseconds) stays a BigInt.
    return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  const len = (v) => { if (typeof v !== "number") fail("CBOR: a length past 2^53"); return v; };
  function item() {
    need(1);
    const ib = b[off++], major = ib >> 5, info = ib & 31;
    if (major === 7) {
      if (info === 20) return false;
      if (info === 21) return true;
      if (info === 22) return null;
      fail(`CBOR: simple value or float ${info}`);
    }
    const v = arg(info);
    switch (major) {
      case 0: return v;
      case 1: return typeof v === "bigint" ? -1n - v : -1 - v;
      case 2: need(len(v)); off += v; return b.slice(off - v, off);
      case 3: need(len(v)); off += v; return text(b.subarray(off - v, off));
      case 4: { const a = []; for (let i = 0; i < len(v); i++) a.push(item()); return a; }
      case 5: { const m = new Map(); for (let i = 0; i < len(v); i++) { const k = item(); m.set(k, item()); } return m; }
      case 6: return { tag: v, value: item() };
    }
  }
  const v = item();
  if (off !== b.length) fail("CBOR: bytes after the item");
  return v;
}

function cborHead(major, n) {
  if (n < 24) return Uint8Array.of((major << 5) | n);
  if (n < 256) return Uint8Array.of((major << 5) | 24, n);
  if (n < 65536) return Uint8Array.of((major << 5) | 25, n >> 8, n & 255);
  return Uint8Array.of((major << 5) | 26, (n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255);
}

// ---- the checks ----

// Check is one named check, run in order: its fn returns a detail (or
// nothing) when it holds and throws when it does not.
export class Check {
  constructor(name, fn) { this.name = name; this.fn = fn; this.state = "pending"; this.detail = ""; }
}

// runChecks runs checks in order, telling show(check) at each change
// (pending, running, then ok or fail with its reason). Each check
// builds on those before it: after a failure the rest are skipped,
// saying which failed.
export async function runChecks(checks, show) {
  for (const c of checks) show(c);
  let ok = true;
  for (const c of checks) {
    if (!ok) {
      c.state = "skipped";
      c.detail = `not checked: "${checks.find((x) => x.state === "fail").name}" failed`;
      show(c);
      continue;
    }
    c.state = "running"; show(c);
    try {
      c.detail = (await c.fn()) || "";
      c.state = "ok";
    } catch (e) {
      c.state = "fail";
      c.detail = e instanceof CheckError ? e.message : `${e.name}: ${e.message}`;
      ok = false;
    }
    show(c);
  }
  return ok;
}

// receipt opens receipt.cose's bytes as JCR-1 says: tag 18, four
// members, the protected header, and the Ed25519 signature over
// ["Signature1", protected, h'', payload]. It returns the payload.
export async function openReceipt(b, hostKey) {
  const env = cbor(b);
  if (!env || env.tag !== 18 || !Array.isArray(env.value) || env.value.length !== 4) fail("receipt: not a tagged COSE_Sign1 (tag 18, four members)");
  const [prot, unprot, payload, sig] = env.value;
  if (!(prot instanceof Uint8Array) || !(unprot instanceof Map) || !(payload instanceof Uint8Array) || !(sig instanceof Uint8Array)) fail("receipt: want [bstr, map, bstr, bstr]");
  if (unprot.size !== 0) fail("receipt: the unprotected header is not empty");
  const h = cbor(prot);
  if (!(h instanceof Map)) fail("receipt: the protected header is not a map");
  for (const k of h.keys()) if (![1, 3, 4].includes(k)) fail(`receipt: protected header label ${k}`);
  if (![-8, -19].includes(h.get(1))) fail(`receipt: alg ${h.get(1)}, want EdDSA`);
  if (h.get(3) !== "application/jcr-1+cbor") fail("receipt: content type is not application/jcr-1+cbor");
  const p = cbor(payload);
  if (!(p instanceof Map)) fail("receipt: the payload is not a map");
  const signer = p.get("signer");
  if (!(signer instanceof Uint8Array) || !equal(signer, hostKey)) fail("receipt: its signer is not the host's key");
  const kid = h.get(4);
  if (!(kid instanceof Uint8Array) || !equal(kid, blake3(signer))) fail("receipt: its kid does not name its signer");
  const tbs = concat(Uint8Array.of(0x84), cborHead(3, 10), utf8("Signature1"), cborHead(2, prot.length), prot, Uint8Array.of(0x40), cborHead(2, payload.length), payload);
  await ed25519(signer, sig, tbs, "receipt");
  const devices = p.get("devices");
  if (!Array.isArray(devices)) fail("receipt: no devices");
  return {
    unit: p.get("unit"),
    startNs: p.get("start_ns"),
    endNs: p.get("end_ns"),
    devices: devices.map((d) => ({ class: d.get("class"), measured_uj: d.get("measured_uj"), estimated_uj: d.get("estimated_uj") })),
  };
}

// runChecks for one sealed run: its bundle's files against the claim,
// the claim against its address and the host key, the receipt's
// signature and figures against what the service's report says.
export function runChecksFor(runID, bundle, hostKeyText, report) {
  let files, claim, claimBytes, signature, hostKey, receipt;
  const file = (name) => {
    const b = files.get(`runs/${runID.slice(3)}/${name}`);
    if (!b) fail(`${name}: not in the run's bundle`);
    return b;
  };
  return [
    new Check("bundle: the run's files", async () => {
      files = untar(new Uint8Array(await bundle()));
      const names = [...files.keys()];
      const bad = names.find((n) => !n.startsWith(`runs/${runID.slice(3)}/`));
      if (bad) fail(`an entry outside the run's directory: ${bad}`);
      return `${names.length} files`;
    }),
    new Check("attestation: canonical JSON", async () => {
      const env = canonical(file("attestation.json"), "attestation.json");
      if (!env || typeof env !== "object" || Object.keys(env).sort().join() !== "claim,signature") fail("attestation.json: want exactly claim and signature");
      claim = env.claim;
      claimBytes = utf8(jcs(claim));
      signature = env.signature;
      return claim.type;
    }),
    new Check("attestation: its address is the run's id", async () => {
      const a = address(claimBytes);
      if (a !== runID) fail(`BLAKE3(JCS(claim)) is ${a}, not ${runID}`);
      return a.slice(0, 19) + "…";
    }),
    new Check("attestation: signed by the host's key", async () => {
      hostKey = publicKey(hostKeyText, "GET /v1/key");
      if (claim.signer !== hostKeyText) fail(`its signer is ${claim.signer}, not the host's ${hostKeyText}`);
      return hostKeyText.slice(0, 24) + "…";
    }),
    new Check("attestation: Ed25519 signature over JCS(claim)", async () => {
      await ed25519(hostKey, b64url(signature), claimBytes, "attestation");
      return "WebCrypto Ed25519";
    }),
    new Check("unit.json, grants.json, decisions.json: bound by address", async () => {
      for (const [name, member] of [["unit.json", "unit"], ["grants.json", "grants"], ["decisions.json", "decisions"]]) {
        const a = address(file(name));
        if (a !== claim[member]) fail(`${name} hashes to ${a}, the claim's ${member} is ${claim[member]}`);
      }
      return "3 files";
    }),
    new Check("receipt.cose: bound by address", async () => {
      const a = address(file("receipt.cose"));
      if (a !== claim.receipt) fail(`receipt.cose hashes to ${a}, the claim's receipt is ${claim.receipt}`);
      return a.slice(0, 19) + "…";
    }),
    new Check("receipt: COSE_Sign1 signature", async () => {
      receipt = await openReceipt(file("receipt.cose"), hostKey);
      if (!equal(receipt.unit, addressBytes(claim.unit, "claim.unit"))) fail("the receipt is for another unit than the claim's");
      return `${receipt.devices.length} device class(es)`;
    }),
    new Check("receipt: the energy shown is the signed receipt's", async () => {
      const want = new Map((report.energy || []).map((e) => [e.class, e]));
      if (want.size !== receipt.devices.length) fail(`the service reports ${want.size} classes, the receipt has ${receipt.devices.length}`);
      const parts = [];
      for (const d of receipt.devices) {
        const e = want.get(d.class);
        if (!e || e.measured_uj !== d.measured_uj || e.estimated_uj !== d.estimated_uj) fail(`${d.class}: the receipt says ${d.measured_uj} measured, ${d.estimated_uj} estimated µJ; the service's report says otherwise`);
        parts.push(`${d.class} ${d.measured_uj + d.estimated_uj} µJ`);
      }
      return parts.join(", ");
    }),
  ];
}

const SEAL = "sandbox.runrecord-seal/1";

// recordChecks for a run record: every line canonical, the heads
// recomputed from the genesis, each entry's seal by the host's key over
// its head, and the last head the one the service lists.
export function recordChecks(id, lines, seals, listedHead, hostKeyText) {
  const heads = [];
  const entries = [];
  return {
    heads, entries,
    checks: [
      new Check("record: every line canonical, the genesis first", async () => {
        if (lines.length === 0) fail("no genesis");
        lines.forEach((l, i) => entries.push(canonical(utf8(l), `line ${i + 1}`)));
        const g = entries[0];
        if (g.record !== "sandbox.runrecord/1") fail(`line 1: not a genesis (record ${JSON.stringify(g.record)})`);
        entries.slice(1).forEach((e, i) => { if (typeof e.kind !== "string") fail(`line ${i + 2}: a segment without its kind`); });
        return `${lines.length} lines`;
      }),
      new Check("record: heads recomputed from the genesis", async () => {
        const g = entries[0];
        let h = blake3(concat(utf8("sandbox.runrecord/1"), addressBytes(g.unit, "genesis.unit"), addressBytes(g.grants, "genesis.grants")));
        heads.push("b3:" + hex(h));
        for (const l of lines.slice(1)) {
          h = blake3(concat(h, utf8(l)));
          heads.push("b3:" + hex(h));
        }
        if (heads[heads.length - 1] !== listedHead) fail(`the head is ${heads[heads.length - 1]}, the service lists ${listedHead}`);
        return heads[heads.length - 1].slice(0, 19) + "…";
      }),
      new Check("record: each entry sealed by the host's key", async () => {
        const pub = publicKey(hostKeyText, "GET /v1/key");
        if (seals.length < lines.length) fail(`${lines.length} entries, ${seals.length} seals: entry ${seals.length + 1} is not sealed`);
        if (seals.length > lines.length) fail(`a seal of entry ${lines.length + 1}, which the record does not have`);
        for (let i = 0; i < seals.length; i++) {
          const s = canonical(utf8(seals[i]), `seal ${i + 1}`);
          if (s.seal !== SEAL) fail(`seal ${i + 1}: not a ${SEAL}`);
          if (s.record !== id) fail(`seal ${i + 1}: of record ${s.record}, not ${id}`);
          if (s.entry !== i + 1) fail(`seal ${i + 1}: of entry ${s.entry}`);
          if (s.head !== heads[i]) fail(`seal ${i + 1}: of head ${s.head}, the record's is ${heads[i]}`);
          if (s.key !== hostKeyText) fail(`seal ${i + 1}: by ${s.key}, not the host's key`);
          const msg = concat(utf8(SEAL), Uint8Array.of(0), utf8(id), Uint8Array.of(0), utf8(String(i + 1)), Uint8Array.of(0), addressBytes(s.head, "seal head"));
          await ed25519(pub, unhex(s.sig, 64), msg, `seal ${i + 1}`);
        }
        return `${seals.length} seals`;
      }),
    ],
  };
}

// openNote checks a C2SP signed note by the host's key: the signature
// line's key name and hash, its Ed25519 signature over the text. It
// returns the text's lines.
export async function openNote(note, hostKey) {
  const i = note.lastIndexOf("\n\n");
  if (i < 0) fail("checkpoint: no blank line before its signatures");
  const body = note.slice(0, i + 1);
  const sigs = note.slice(i + 2).split("\n").filter((l) => l !== "");
  if (sigs.length === 0) fail("checkpoint: no signature");
  for (const line of sigs) {
    const m = /^\u2014 (\S+) ([A-Za-z0-9+/=]+)$/.exec(line);
    if (!m) fail(`checkpoint: a malformed signature line: ${line.slice(0, 60)}`);
    const raw = b64(m[2]);
    const id = (await sha256(utf8(m[1]), Uint8Array.of(0x0a, 0x01), hostKey)).slice(0, 4);
    if (raw.length !== 68 || !equal(raw.slice(0, 4), id)) continue; // another key's
    await ed25519(hostKey, raw.slice(4), utf8(body), "checkpoint");
    return { name: m[1], lines: body.slice(0, -1).split("\n") };
  }
  fail("checkpoint: no signature by the host's key");
}

// inclusion is RFC 9162 §2.1.3.2: the root that leaf at index in a
// tree of size gives with path, or a failure.
export async function inclusion(index, size, leaf, path) {
  if (!(index < size)) fail(`index ${index} is not below the tree's size ${size}`);
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) fail("the path is longer than the tree allows");
    if (fn % 2 === 1 || fn === sn) {
      r = await sha256(Uint8Array.of(1), p, r);
      if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      r = await sha256(Uint8Array.of(1), r, p);
    }
    fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
  }
  if (sn !== 0) fail("the path is shorter than the tree needs");
  return r;
}

// fleetChecks for one item's proof ({item, size, path, checkpoint}):
// the checkpoint signed by the host's key, of this fleet, of the proof's
// size; the item's leaf; the path to the checkpoint's root.
export function fleetChecks(fleetID, proof, hostKeyText) {
  let cp, root, leaf;
  return [
    new Check("checkpoint: signed note by the host's key", async () => {
      cp = await openNote(proof.checkpoint, publicKey(hostKeyText, "GET /v1/key"));
      return cp.name;
    }),
    new Check("checkpoint: this fleet's, of the proof's size", async () => {
      const [origin, size, r] = cp.lines;
      if (origin !== `sandbox/fleet/${fleetID}`) fail(`its origin is ${origin}, not sandbox/fleet/${fleetID}`);
      if (size !== String(proof.size)) fail(`a checkpoint of ${size} items, the proof is for ${proof.size}`);
      root = b64(r);
      if (root.length !== 32) fail("its root is not 32 bytes");
      return `${size} items`;
    }),
    new Check("item: its leaf, SHA-256(0x00 ‖ JCS(item))", async () => {
      leaf = await sha256(Uint8Array.of(0), utf8(jcs(proof.item)));
      return hex(leaf).slice(0, 16) + "…";
    }),
    new Check("inclusion: the path reaches the checkpoint's root (RFC 9162)", async () => {
      const got = await inclusion(proof.item.index, proof.size, leaf, proof.path.map((p) => b64(p)));
      if (!equal(got, root)) fail(`the path gives root ${hex(got).slice(0, 16)}…, the checkpoint's is ${hex(root).slice(0, 16)}…`);
      return `${proof.path.length} hashes`;
    }),
  ];
}
