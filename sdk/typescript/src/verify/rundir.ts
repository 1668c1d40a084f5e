// A run's records verified together, offline (docs/spec/run-directory.md):
// the attestation, then every file it binds (unit, grants, decisions,
// receipt, journal, outputs) by address, what can be re-derived from them,
// and no file that nothing binds.

import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { VerificationError } from "../errors.js";
import { blake3, contentAddress, toHex } from "./blake3.js";
import { verifyAttestation, claimTimeNS, TIERS, type Attestation, type AttestationClaim } from "./attestation.js";
import { CborMap, decodeCborAt, type CborValue } from "./cbor.js";
import { parseCanonicalJSON } from "./jcs.js";
import { DEVICE_CLASSES, openReceipt, type Receipt, type TrustOptions } from "./receipt.js";
import { check, S } from "./schema.js";

/** The files a run directory may hold. */
export const RUN_FILES = [
  "attestation.json",
  "receipt.cose",
  "unit.json",
  "grants.json",
  "decisions.json",
  "journal.cbor",
  "stdout.log",
  "stderr.log",
  "jcp-decision.cose",
  "evidence.bin",
  "locality.json",
  "evidence-devices.json",
] as const;

/** The records of one run, as bytes: a run directory's files by name. */
export type RunFiles = Partial<Record<(typeof RUN_FILES)[number], Uint8Array>> & Record<string, Uint8Array | undefined>;

/** One file's verdict. */
export interface FileCheck {
  /** The file's name in the run directory (`attestation.json`, …), or `claim` for the re-derivation. */
  file: string;
  /** Whether it verified. */
  ok: boolean;
  /** The refusal code where it did not (`address`, `signature`, `untrusted-key`, …). */
  code?: string;
  /** What was checked, or why it failed. */
  message: string;
}

/** What {@link verifyRunFiles} found. */
export interface RunVerification {
  /** True when every file verified and the signer is trusted. */
  ok: boolean;
  /** The run's id (the attestation's address), when the attestation could be read. */
  run?: string;
  /** The first failure's code, when not ok (in run-directory.md's order). */
  code?: string;
  /** Each file's verdict, in the order checked. */
  files: FileCheck[];
  /** The verified attestation, when its signature held. */
  attestation?: Attestation;
  /** The verified receipt, when it held. */
  receipt?: Receipt;
  /** The journal's outcome: the whole streams' lengths and BLAKE3 addresses. */
  outputs?: { stdout: { length: bigint; address: string }; stderr: { length: bigint; address: string } };
  /** What this verifier does not check (hardware evidence, locality claims, the JCP decision's chain). */
  unchecked: string[];
  /** Where `SandboxClient.verifyRun` read the files: the run directory here, or the bundle the service sent. */
  source?: "directory" | "bundle";
}

/** Options of a run verification. */
export interface RunVerifyOptions extends TrustOptions {
  /** The run id (`b3:…`) the attestation must have: a directory holding another run is refused `address`. */
  expectRun?: string;
}

const UNIT = S.obj({
  type: { type: S.str(), required: true },
  kind: { type: S.enumOf("native", "wasm", "vm"), required: true },
  image: { type: S.addr(), required: true },
  entry: { type: S.str(), required: true },
  args: { type: S.arr(S.str()), required: true },
  env: { type: S.map(S.str()), required: true },
  devices: { type: S.arr(S.enumOf(...DEVICE_CLASSES)), required: true },
  grants: { type: S.addr(), required: true },
  dir: { type: S.str() },
  root: { type: S.addr() },
  limits: {
    required: true,
    zeroOk: true,
    type: S.obj({
      deadline_ms: { type: S.int(1) },
      memory_bytes: { type: S.int(1) },
      pids: { type: S.int(1) },
      cpu_millis: { type: S.int(1) },
      memory_pages: { type: S.int(1) },
      workspace_bytes: { type: S.int(1) },
    }),
  },
});

const MODE = S.enumOf("ro", "rw");
const GRANTS = S.obj({
  type: { type: S.str(), required: true },
  net: {
    type: S.arr(
      S.obj({
        host: { type: S.str(true), required: true },
        port: { type: S.int(1), required: true },
        inject: { type: S.arr(S.obj({ header: { type: S.str(true), required: true }, secret: { type: S.str(true), required: true }, plain: { type: S.bool() } })) },
      }),
    ),
  },
  storage: { type: S.arr(S.obj({ path: { type: S.str(true), required: true }, mode: { type: MODE, required: true }, quota: { type: S.int(1) } })) },
  kv: { type: S.arr(S.obj({ namespace: { type: S.str(true), required: true }, mode: { type: MODE, required: true } })) },
  clock: { type: S.bool() },
  random: { type: S.bool() },
  exec: { required: true, type: S.obj({ allow: { type: S.arr(S.addr()), required: true }, deny: { type: S.arr(S.addr()), required: true } }) },
  compute: { type: S.arr(S.obj({ class: { type: S.enumOf(...DEVICE_CLASSES), required: true }, budget_uj: { type: S.int(1), required: true } })) },
  kernel: { type: S.bool() },
  confidential: { type: S.bool() },
  locality: { type: S.str() },
});

const DECISION_KINDS = ["net", "fs", "kv", "clock", "random", "exec", "compute", "env", "process"];
const DECISION_OPS = ["connect", "read", "write", "exec", "use", "inject", "bind", "signal", "trace"];
const DECISIONS = S.obj({
  type: { type: S.str(), required: true },
  decisions: {
    required: true,
    zeroOk: true,
    type: S.arr(
      S.obj({
        seq: { type: S.int(0), required: true },
        kind: { type: S.str(), required: true },
        op: { type: S.str(), required: true },
        target: { type: S.str(), required: true },
        allow: { type: S.bool(), required: true },
        rule: { type: S.str(), required: true },
        count: { type: S.int(1), required: true },
      }),
    ),
  },
});

interface Unit {
  type: string;
  kind: "native" | "wasm" | "vm";
  image: string;
  grants: string;
  devices: string[];
}
interface Grants {
  compute?: { class: string; budget_uj: number }[];
  kernel?: boolean;
  confidential?: boolean;
  locality?: string;
}

function decodeUnit(raw: Uint8Array): Unit {
  const v = parseCanonicalJSON(raw, "unit");
  check(v, UNIT, "unit");
  const u = v as unknown as Unit;
  if (u.type !== "sandbox.unit/1") throw new VerificationError("invalid", "unit.type", `${JSON.stringify(u.type)}, want "sandbox.unit/1"`);
  const ranks = u.devices.map((d) => (DEVICE_CLASSES as readonly string[]).indexOf(d));
  if (ranks.some((r, i) => i > 0 && r <= ranks[i - 1]!)) {
    throw new VerificationError("non-canonical", "unit.devices", "device classes are listed once each, in canonical order");
  }
  return u;
}

function decodeGrants(raw: Uint8Array): Grants {
  const v = parseCanonicalJSON(raw, "grants");
  check(v, GRANTS, "grants");
  const g = v as unknown as Grants & { type: string };
  if (g.type !== "sandbox.grants/1") throw new VerificationError("invalid", "grants.type", `${JSON.stringify(g.type)}, want "sandbox.grants/1"`);
  const ranks = (g.compute ?? []).map((c) => (DEVICE_CLASSES as readonly string[]).indexOf(c.class));
  if (ranks.some((r, i) => i > 0 && r <= ranks[i - 1]!)) throw new VerificationError("non-canonical", "grants.compute", "compute grants in class order, once each");
  return g;
}

function decodeDecisions(raw: Uint8Array): number {
  const v = parseCanonicalJSON(raw, "decisions");
  check(v, DECISIONS, "decisions");
  const l = v as unknown as { type: string; decisions: { seq: number; kind: string; op: string; target: string; allow: boolean; rule: string; count: number }[] };
  if (l.type !== "sandbox.decisions/1") throw new VerificationError("invalid", "decisions.type", `${JSON.stringify(l.type)}, want "sandbox.decisions/1"`);
  let next = 0;
  l.decisions.forEach((d, i) => {
    const w = `decisions[${i}]`;
    if (d.seq !== next) throw new VerificationError("invalid", `${w}.seq`, `${d.seq}, want ${next}: entries start at 0 and are contiguous`);
    next += d.count;
    if (!DECISION_KINDS.includes(d.kind)) throw new VerificationError("invalid", `${w}.kind`, `unknown kind ${JSON.stringify(d.kind)}`);
    if (!DECISION_OPS.includes(d.op)) throw new VerificationError("invalid", `${w}.op`, `unknown op ${JSON.stringify(d.op)}`);
    const p = l.decisions[i - 1];
    if (p && p.kind === d.kind && p.op === d.op && p.target === d.target && p.allow === d.allow && p.rule === d.rule) {
      throw new VerificationError("non-canonical", w, "identical to the entry before it: identical consecutive decisions are one entry with a count");
    }
  });
  return l.decisions.length;
}

/** The outcome entry of a journal (docs/spec/journal.md). */
interface Outcome {
  status: string;
  exitCode: bigint;
  stdout: Uint8Array;
  stdoutLen: bigint;
  stderr: Uint8Array;
  stderrLen: bigint;
  fuel: bigint;
  stdoutKept?: { len: bigint; addr: Uint8Array };
  stderrKept?: { len: bigint; addr: Uint8Array };
}

function parseJournal(raw: Uint8Array): { entries: CborMap[]; root: string } {
  let head = blake3("sandbox.journal/1");
  const entries: CborMap[] = [];
  let off = 0;
  while (off < raw.length) {
    const where = `journal entry ${entries.length} (offset ${off})`;
    const [v, end] = decodeCborAt(raw, off, where);
    if (!(v instanceof CborMap) || v.size !== 3 || !v.has("k") || !v.has("q") || !v.has("r")) {
      if (v instanceof CborMap && [...v.keys()].some((k) => k !== "k" && k !== "q" && k !== "r")) {
        throw new VerificationError("unknown-field", where, "an entry has exactly k, q and r");
      }
      throw new VerificationError(v instanceof CborMap ? "missing-field" : "invalid", where, "an entry is a map of k, q and r");
    }
    const k = v.get("k");
    if (typeof k !== "string" || k === "") throw new VerificationError("invalid", `${where}.k`, "a non-empty text kind");
    const bytes = raw.subarray(off, end);
    const buf = new Uint8Array(32 + bytes.length);
    buf.set(head, 0);
    buf.set(bytes, 32);
    head = blake3(buf);
    entries.push(v);
    off = end;
  }
  return { entries, root: "b3:" + toHex(head) };
}

function lastOutcome(entries: CborMap[]): Outcome {
  const n = entries.length - 1;
  entries.forEach((e, i) => {
    if (e.get("k") === "outcome" && i !== n) throw new VerificationError("invalid", `journal entry ${i}`, "an outcome entry before the last");
  });
  const last = entries[n];
  if (!last || last.get("k") !== "outcome") throw new VerificationError("missing-field", "journal", "no outcome entry at its end");
  const where = `journal entry ${n}`;
  if (last.get("q") !== null) throw new VerificationError("invalid", `${where}.q`, "an outcome's request is null");
  const r = last.get("r");
  const bad = (why: string): never => {
    throw new VerificationError("invalid", `${where}.r`, why);
  };
  if (!Array.isArray(r) || (r.length !== 7 && r.length !== 9)) return bad("want an array of seven or nine items");
  const [status, code, so, soLen, se, seLen, fuel] = r as CborValue[];
  const b32 = (x: CborValue) => (x instanceof Uint8Array && x.length === 32 ? x : bad("want 32 bytes"));
  const u = (x: CborValue) => (typeof x === "bigint" && x >= 0n ? x : bad("want an unsigned integer"));
  if (typeof status !== "string") return bad("want a text status");
  if (typeof code !== "bigint") return bad("want an integer exit code");
  const o: Outcome = { status, exitCode: code, stdout: b32(so), stdoutLen: u(soLen), stderr: b32(se), stderrLen: u(seLen), fuel: u(fuel) };
  if (r.length === 9) {
    const kept = (x: CborValue, whole: bigint) => {
      if (x === null) return undefined;
      if (!Array.isArray(x) || x.length !== 2) return bad("a kept prefix is null or [length, BLAKE3]");
      const len = u(x[0]!);
      if (len >= whole) bad("a kept prefix is shorter than its stream");
      return { len, addr: b32(x[1]!) };
    };
    const a = kept(r[7]!, o.stdoutLen);
    const b = kept(r[8]!, o.stderrLen);
    if (!a && !b) throw new VerificationError("non-canonical", `${where}.r`, "a nine-item outcome that cuts neither stream");
    if (a) o.stdoutKept = a;
    if (b) o.stderrKept = b;
  }
  return o;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function tierRequired(u: Unit, g: Grants): string {
  for (const d of u.devices) {
    if (!(g.compute ?? []).some((c) => c.class === d)) {
      throw new VerificationError("invalid", "unit.devices", `the unit asks for device class ${d}, and no compute grant gives it`);
    }
  }
  let t = u.kind === "native" ? 1 : u.kind === "wasm" ? 2 : 5;
  if (g.kernel) t = Math.max(t, 5);
  if (g.confidential) t = Math.max(t, 6);
  if (g.locality) t = Math.max(t, 7);
  return TIERS[t]!;
}

/** Re-derives what the claim says from the unit, grants and receipt (Go: verify.Rederive). */
function rederive(c: AttestationClaim, u: Unit, g: Grants, r: Receipt): void {
  const need = tierRequired(u, g);
  const { required, chosen, reason } = c.tier;
  const rank = (t: string) => (TIERS as readonly string[]).indexOf(t);
  if (required !== need) throw new VerificationError("invalid", "claim.tier.required", `recorded ${required}; a ${u.kind} unit under these grants requires ${need}`);
  if (chosen === required) {
    // as required
  } else if (chosen === "S0" && required === "S1") {
    if (!reason.endsWith("; S0 on explicit request: trusted work, no confinement")) {
      throw new VerificationError("invalid", "claim.tier.reason", "S0 is chosen only on explicit request, and the reason does not say so");
    }
  } else if (rank(chosen) > rank(required)) {
    if (!reason.includes("; escalated on explicit request from ")) {
      throw new VerificationError("invalid", "claim.tier.reason", "a tier above the requirement is chosen only on explicit request, and the reason does not say so");
    }
  } else {
    throw new VerificationError("invalid", "claim.tier.chosen", `${chosen} is below the required ${required}`);
  }
  if (u.kind === "native" && chosen === "S2") throw new VerificationError("invalid", "claim.tier.chosen", "a native unit cannot run at S2, which runs WebAssembly");
  if (u.kind === "wasm" && rank(chosen) < 2) throw new VerificationError("invalid", "claim.tier.chosen", `a WASM unit runs at S2 or above, not ${chosen}`);
  for (const d of u.devices) {
    if (!r.devices.some((x) => x.class === d)) throw new VerificationError("invalid", "receipt.devices", `the unit asks for ${d}, and the receipt accounts no ${d}`);
  }
  if (claimTimeNS(c.started, "claim.started") !== r.start_ns || claimTimeNS(c.ended, "claim.ended") !== r.end_ns) {
    throw new VerificationError("invalid", "receipt.start_ns", `the receipt's interval ${r.start_ns}..${r.end_ns} is not the run's, ${c.started}..${c.ended}`);
  }
}

/**
 * Verifies a run's records given as bytes (a run directory's files by
 * name), in run-directory.md's order: the attestation; `unit.json`,
 * `grants.json`, `decisions.json`, `receipt.cose` present and hashing to
 * what the claim binds, each canonical and valid (the receipt signed by
 * the attestation's signer, for its unit); the tier, devices and interval
 * re-derived; the journal's root and outcome; `stdout.log` and
 * `stderr.log` against the journal; no file that nothing binds.
 *
 * An untrusted signer is reported (`untrusted-key`) only where nothing
 * else failed, as `sandbox verify` does. Hardware evidence (S6/S7),
 * locality claims and a JCP decision's own chain are not checked here:
 * their files are checked for presence and address only, and named in
 * `unchecked`.
 */
export function verifyRunFiles(files: RunFiles, opts: RunVerifyOptions = {}): RunVerification {
  const out: RunVerification = { ok: false, files: [], unchecked: [] };
  const record = (file: string, fn: () => string): boolean => {
    try {
      out.files.push({ file, ok: true, message: fn() });
      return true;
    } catch (e) {
      if (!(e instanceof VerificationError)) throw e;
      out.files.push({ file, ok: false, code: e.code, message: e.message });
      return false;
    }
  };
  const finish = (): RunVerification => {
    const failed = out.files.filter((f) => !f.ok);
    const first = failed.find((f) => f.code !== "untrusted-key") ?? failed[0];
    out.ok = failed.length === 0;
    if (first?.code) out.code = first.code;
    return out;
  };

  const attRaw = files["attestation.json"];
  let att: Attestation | undefined;
  let untrusted: VerificationError | undefined;
  record("attestation.json", () => {
    if (!attRaw) throw new VerificationError("missing", "attestation.json", "nothing here says what ran");
    try {
      att = verifyAttestation(attRaw, opts);
    } catch (e) {
      if (e instanceof VerificationError && e.code === "untrusted-key") {
        att = verifyAttestation(attRaw, { ...opts, allowUntrusted: true });
        untrusted = e;
      } else throw e;
    }
    if (opts.expectRun && att.address !== opts.expectRun) {
      throw new VerificationError("address", "attestation.json", `the attestation is of run ${att.address}, not ${opts.expectRun}`);
    }
    if (untrusted) throw untrusted;
    const c = att.claim;
    return `${c.outcome.status} at ${c.tier.chosen} (required ${c.tier.required}), ${c.executor}, signed by ${c.signer}`;
  });
  if (!att) return finish();
  out.attestation = att;
  out.run = att.address;
  const c = att.claim;

  const bound = (name: string, want: string, fn: (raw: Uint8Array) => string) =>
    record(name, () => {
      const raw = files[name];
      if (!raw) throw new VerificationError("missing", name, `the attestation binds ${want}, and it is not beside it`);
      const got = contentAddress(raw);
      if (got !== want) throw new VerificationError("address", name, `hashes to ${got}, the attestation binds ${want}`);
      return fn(raw);
    });

  let unit: Unit | undefined;
  let grants: Grants | undefined;
  let receipt: Receipt | undefined;
  bound("unit.json", c.unit, (raw) => {
    const u = decodeUnit(raw);
    if (u.grants !== c.grants) throw new VerificationError("invalid", "unit.grants", `the unit binds grants ${u.grants}, the attestation ${c.grants}`);
    if (u.image !== c.image) throw new VerificationError("invalid", "unit.image", `the unit binds image ${u.image}, the attestation ${c.image}`);
    unit = u;
    return `${u.kind} unit, bound`;
  });
  bound("grants.json", c.grants, (raw) => {
    grants = decodeGrants(raw);
    return "grant set, bound";
  });
  bound("decisions.json", c.decisions, (raw) => `decision log, ${decodeDecisions(raw)} entries, bound`);
  bound("receipt.cose", c.receipt, (raw) => {
    const r = openReceipt(raw, { ...opts, allowUntrusted: true });
    if (r.unit !== c.unit) throw new VerificationError("invalid", "receipt.unit", `the receipt is for unit ${r.unit}, the attestation for ${c.unit}`);
    if (r.signer !== c.signer) throw new VerificationError("invalid", "receipt.signer", `the receipt is signed by ${r.signer}, the attestation by ${c.signer}`);
    receipt = r;
    const energy = r.devices.map((d) => `${d.class} ${d.measured_uj} µJ measured + ${d.estimated_uj} µJ estimated`).join("; ") || "no device readings";
    return `${energy}, bound`;
  });
  if (receipt) out.receipt = receipt;

  const citedOnly = (name: string, want: string | undefined, what: string) => {
    if (want) {
      out.unchecked.push(`${name}: ${what} (its presence and address are checked)`);
      bound(name, want, () => `bound by address; ${what} not checked by this SDK`);
    } else if (files[name]) {
      record(name, () => {
        throw new VerificationError("unrecognised", name, `the attestation cites none, so nothing binds ${name}`);
      });
    }
  };
  citedOnly("jcp-decision.cose", c.jcp, "the JCP decision's own signature and chain");
  citedOnly("evidence.bin", c.evidence?.report, "the hardware evidence and its binding");
  citedOnly("evidence-devices.json", c.evidence?.devices, "the device evidence");
  citedOnly("locality.json", c.locality?.claim, "the locality claim");

  if (unit && grants && receipt) {
    const [u, g, r] = [unit, grants, receipt];
    record("claim", () => {
      rederive(c, u, g, r);
      return "tier, devices and times re-derived from the unit, grants and receipt";
    });
  }

  let outcome: Outcome | undefined;
  if (c.journal) {
    const want = c.journal;
    record("journal.cbor", () => {
      const raw = files["journal.cbor"];
      if (!raw) throw new VerificationError("missing", "journal.cbor", `the attestation binds a journal with root ${want}, and it is not beside it`);
      const { entries, root } = parseJournal(raw);
      if (root !== want) throw new VerificationError("address", "journal.cbor", `journal root is ${root}, the attestation binds ${want}`);
      const o = lastOutcome(entries);
      if (unit?.kind === "native" && entries.length !== 1) {
        throw new VerificationError("invalid", "journal entry 0", `a native unit's journal holds its outcome alone, not ${entries.length} entries`);
      }
      const where = `journal entry ${entries.length - 1}`;
      const code = c.outcome.exit_code !== undefined ? BigInt(c.outcome.exit_code) : -1n;
      if (o.status !== c.outcome.status) throw new VerificationError("invalid", `${where}.status`, `the journal's outcome is ${o.status}, the attestation's ${c.outcome.status}`);
      if (o.exitCode !== code) throw new VerificationError("invalid", `${where}.exit_code`, `the journal's exit code is ${o.exitCode}, the attestation's ${code}`);
      if (receipt && o.fuel !== (receipt.fuel ?? 0n)) throw new VerificationError("invalid", `${where}.fuel`, `the journal's fuel is ${o.fuel}, the receipt's ${receipt.fuel ?? 0n}`);
      outcome = o;
      return `journal, ${entries.length} entries, root bound`;
    });
  } else if (files["journal.cbor"]) {
    record("journal.cbor", () => {
      throw new VerificationError("unrecognised", "journal.cbor", "the attestation binds no journal, so nothing binds journal.cbor");
    });
  }
  if (outcome) {
    out.outputs = {
      stdout: { length: outcome.stdoutLen, address: "b3:" + toHex(outcome.stdout) },
      stderr: { length: outcome.stderrLen, address: "b3:" + toHex(outcome.stderr) },
    };
  }
  for (const name of ["stdout.log", "stderr.log"] as const) {
    const raw = files[name];
    if (!c.journal) {
      if (raw) record(name, () => { throw new VerificationError("unrecognised", name, "the attestation binds no journal, so nothing binds it"); });
      continue;
    }
    if (!outcome) continue; // the journal failed; its verdict says why
    const o = outcome;
    record(name, () => {
      const isOut = name === "stdout.log";
      const kept = isOut ? o.stdoutKept : o.stderrKept;
      const want = kept ? kept.addr : isOut ? o.stdout : o.stderr;
      const n = kept ? kept.len : isOut ? o.stdoutLen : o.stderrLen;
      if (!raw) throw new VerificationError("missing", name, `the journal records ${name} (${n} bytes), and it is not beside it`);
      const got = BigInt(raw.length);
      if (got === n && sameBytes(blake3(raw), want)) return `${n} bytes, bound by the journal's outcome${kept ? " (the prefix the record kept)" : ""}`;
      if (got < n) throw new VerificationError("truncated", name, `${got} bytes, the run wrote ${n}`);
      if (got > n && sameBytes(blake3(raw.subarray(0, Number(n))), want)) throw new VerificationError("extended", name, `${got} bytes: the ${n} the run wrote, and more after them`);
      throw new VerificationError("address", name, `hashes to ${contentAddress(raw)}, the run wrote ${n} bytes hashing to b3:${toHex(want)}`);
    });
  }
  for (const name of Object.keys(files)) {
    if (files[name] && !(RUN_FILES as readonly string[]).includes(name)) {
      record(name, () => {
        throw new VerificationError("unrecognised", name, "a file in a run directory that no record binds");
      });
    }
  }
  return finish();
}

/**
 * Reads a run directory (`Result.records`, where the service keeps the
 * run: readable only on the service's own host) and verifies it with
 * {@link verifyRunFiles}.
 */
export async function verifyRunDirectory(dir: string, opts: RunVerifyOptions = {}): Promise<RunVerification> {
  const files: RunFiles = {};
  for (const name of await readdir(dir)) files[name] = new Uint8Array(await readFile(join(dir, name)));
  return verifyRunFiles(files, opts);
}
