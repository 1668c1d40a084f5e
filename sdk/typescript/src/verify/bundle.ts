// A run's bundle (GET /v1/runs/{id}/bundle): its run directory as a POSIX
// tar of `runs/HEX/NAME` entries (the run entries of a bundle,
// docs/spec/bundle.md). The bytes come from the network, so they are read
// as hostile: parsed here, in memory (nothing is ever written to disk),
// and only regular files named `runs/<the run's hex>/<name>` are
// accepted, within bounds; anything else refuses the whole bundle.

import { VerificationError } from "../errors.js";
import { verifyRunFiles, type RunFiles, type RunVerification, type RunVerifyOptions } from "./rundir.js";

/** The bounds a bundle is read within (each has a default). */
export interface BundleLimits {
  /** The whole tar, bytes. Default 512 MiB. */
  maxBytes?: number;
  /** One file, bytes. Default 256 MiB (docs/spec/bundle.md's bound). */
  maxFileBytes?: number;
  /** Files. Default 32 (a run directory holds at most 12). */
  maxEntries?: number;
}

/** The defaults of {@link BundleLimits}. */
export const BUNDLE_LIMITS: Readonly<Required<BundleLimits>> = Object.freeze({
  maxBytes: 512 << 20,
  maxFileBytes: 256 << 20,
  maxEntries: 32,
});

/** Options of {@link parseRunBundle}. */
export interface ParseBundleOptions extends BundleLimits {
  /** The run (`b3:HEX` or HEX) the bundle must be of: entries of another run's directory are refused (`address`). */
  run?: string;
}

/** A bundle read: the run it is of and its files, by name. */
export interface RunBundle {
  /** `b3:HEX`, the directory's name. */
  run: string;
  /** Its files by name (`attestation.json`, …). */
  files: RunFiles;
}

const BLOCK = 512;
const MAX_PAX = 64 << 10;
const ENTRY = /^runs\/([0-9a-f]{64})\/([^/]+)$/;
// A run directory's file: letters, one dot, letters; hyphens only between
// letters (`jcp-decision.cose`, `evidence-devices.json`). Nothing else can
// name a place: no slash, no dot-dot, no leading dot, no NUL.
const NAME = /^[A-Za-z]+(?:-[A-Za-z]+)*\.[A-Za-z]+$/;

const latin1 = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("latin1");

/** A NUL-terminated field. */
function str(h: Uint8Array, off: number, len: number): string {
  const f = h.subarray(off, off + len);
  const z = f.indexOf(0);
  return latin1(z < 0 ? f : f.subarray(0, z));
}

/** An octal numeric field (spaces and NULs around it); base-256 and anything else is refused. */
function octal(h: Uint8Array, off: number, len: number, where: string, what: string): number {
  const f = h.subarray(off, off + len);
  if (f[0]! & 0x80) throw new VerificationError("invalid", where, `${what} in base-256: a number this large is over every bound`);
  const s = latin1(f).replace(/^[ \0]+|[ \0]+$/g, "");
  if (s === "") return 0;
  if (!/^[0-7]+$/.test(s)) throw new VerificationError("malformed", where, `${what} ${JSON.stringify(s)} is not octal`);
  const n = parseInt(s, 8);
  if (!Number.isSafeInteger(n)) throw new VerificationError("invalid", where, `${what} is over every bound`);
  return n;
}

function zeroBlock(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

/** The PAX records of an extended header ("LEN KEY=VALUE\n" each). */
function paxRecords(data: Uint8Array, where: string): Map<string, string> {
  const out = new Map<string, string>();
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0 || sp - off > 8) throw new VerificationError("malformed", where, "a PAX record without its length");
    const lenText = latin1(data.subarray(off, sp));
    if (!/^[1-9][0-9]*$/.test(lenText)) throw new VerificationError("malformed", where, `a PAX record's length ${JSON.stringify(lenText)}`);
    const len = Number(lenText);
    const end = off + len;
    if (end > data.length || data[end - 1] !== 0x0a || end <= sp + 1) throw new VerificationError("malformed", where, "a PAX record that does not end where its length says");
    const rec = Buffer.from(data.subarray(sp + 1, end - 1)).toString("utf8");
    const eq = rec.indexOf("=");
    if (eq <= 0) throw new VerificationError("malformed", where, "a PAX record without a key");
    const key = rec.slice(0, eq);
    if (out.has(key)) throw new VerificationError("invalid", where, `PAX record ${key} twice`);
    out.set(key, rec.slice(eq + 1));
    off = end;
  }
  return out;
}

/**
 * Reads a run's bundle (the tar `GET /v1/runs/{id}/bundle` answers) in
 * memory, as hostile input, and returns its files. Refused, with a
 * {@link VerificationError}, at the first of: a header that is not POSIX
 * ustar or whose checksum is wrong (`malformed`); an entry that is not a
 * regular file (a link, a directory, a device, a GNU long name, a global
 * header), a name other than `runs/HEX/NAME` with NAME letters, one dot
 * and letters (hyphens between letters), a name twice, entries of two
 * runs, a PAX record naming a link or sparse data, more than `maxEntries`
 * files, a file over `maxFileBytes`, a tar over `maxBytes`, no file at all
 * (`invalid`); entries of a run other than `opts.run` (`address`); a tar
 * cut short or without its end (`truncated`), or with bytes after its end.
 *
 * Nothing is written anywhere: the files are copies in memory.
 */
export function parseRunBundle(tar: Uint8Array, opts: ParseBundleOptions = {}): RunBundle {
  const lim = { ...BUNDLE_LIMITS, ...definedOnly(opts) };
  if (tar.length > lim.maxBytes) throw new VerificationError("invalid", "bundle", `${tar.length} bytes, over the bound of ${lim.maxBytes}`);
  const want = opts.run === undefined ? undefined : opts.run.startsWith("b3:") ? opts.run.slice(3) : opts.run;
  const files: RunFiles = Object.create(null) as RunFiles;
  let hex: string | undefined;
  let count = 0;
  let pax: Map<string, string> | undefined;
  let off = 0;
  for (;;) {
    const at = `bundle: the header at byte ${off}`;
    if (off + BLOCK > tar.length) throw new VerificationError("truncated", at, "the tar ends without its end-of-archive blocks");
    const h = tar.subarray(off, off + BLOCK);
    if (zeroBlock(h)) {
      if (pax) throw new VerificationError("invalid", at, "a PAX header followed by no entry");
      // The end: one zero block, then another (or the end of the bytes), then nothing but zeros.
      if (!zeroBlock(tar.subarray(off + BLOCK))) throw new VerificationError("invalid", at, "bytes after the end of the archive");
      break;
    }
    // The checksum: the header's bytes summed, its own field as spaces.
    const want8 = octal(h, 148, 8, at, "checksum");
    let unsigned = 0;
    let signed = 0;
    for (let i = 0; i < BLOCK; i++) {
      const b = i >= 148 && i < 156 ? 0x20 : h[i]!;
      unsigned += b;
      signed += b > 127 ? b - 256 : b;
    }
    if (want8 !== unsigned && want8 !== signed) throw new VerificationError("malformed", at, "its checksum does not hold");
    if (latin1(h.subarray(257, 265)) !== "ustar\u000000") throw new VerificationError("malformed", at, "not a POSIX ustar header");
    const type = String.fromCharCode(h[156]!);
    let name = str(h, 0, 100);
    const prefix = str(h, 345, 155);
    if (prefix) name = prefix + "/" + name;
    let size = octal(h, 124, 12, at, "size");
    const bound = type === "x" ? MAX_PAX : lim.maxFileBytes;
    if (pax?.has("size")) {
      const s = pax.get("size")!;
      if (!/^(0|[1-9][0-9]{0,15})$/.test(s)) throw new VerificationError("malformed", at, `PAX size ${JSON.stringify(s)}`);
      size = Number(s);
    }
    if (pax?.has("path")) name = pax.get("path")!;
    const where = `bundle: ${JSON.stringify(name)}`;
    if (size > bound) throw new VerificationError("invalid", where, `${size} bytes, over the bound of ${bound}`);
    const dataEnd = off + BLOCK + size;
    const next = off + BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    if (next > tar.length) throw new VerificationError("truncated", where, `${size} bytes, and the tar ends before them`);
    const data = tar.subarray(off + BLOCK, dataEnd);
    off = next;
    if (type === "x") {
      if (pax) throw new VerificationError("invalid", at, "two PAX headers for one entry");
      pax = paxRecords(data, at);
      for (const k of pax.keys()) {
        if (k === "linkpath" || k.startsWith("GNU.sparse")) throw new VerificationError("invalid", at, `PAX record ${k}: only regular files, whole`);
      }
      continue;
    }
    pax = undefined;
    if (type !== "0" && type !== "\0") {
      const what = { "1": "a hard link", "2": "a symbolic link", "3": "a character device", "4": "a block device", "5": "a directory", "6": "a FIFO", g: "a global PAX header", L: "a GNU long name", K: "a GNU long link" }[type] ?? `an entry of type ${JSON.stringify(type)}`;
      throw new VerificationError("invalid", where, `${what}: a run's bundle holds only regular files`);
    }
    const m = ENTRY.exec(name);
    if (!m || !NAME.test(m[2]!) || m[2]!.length > 64) {
      throw new VerificationError("invalid", where, "not runs/HEX/NAME with NAME letters, one dot and letters: a run's bundle names nothing else");
    }
    const [, dirHex, file] = m as unknown as [string, string, string];
    if (want !== undefined && dirHex !== want) throw new VerificationError("address", where, `an entry of run b3:${dirHex}, not of b3:${want}`);
    if (hex !== undefined && dirHex !== hex) throw new VerificationError("invalid", where, `an entry of run b3:${dirHex} in the bundle of b3:${hex}`);
    hex = dirHex;
    if (Object.prototype.hasOwnProperty.call(files, file)) throw new VerificationError("invalid", where, "twice");
    if (++count > lim.maxEntries) throw new VerificationError("invalid", where, `more than ${lim.maxEntries} files`);
    files[file] = new Uint8Array(data); // a copy: the tar's buffer is not kept
  }
  if (hex === undefined) throw new VerificationError("invalid", "bundle", "no file: a run's bundle holds its directory");
  return { run: "b3:" + hex, files: { ...files } };
}

/** Options of {@link verifyRunBundle}. */
export interface BundleVerifyOptions extends RunVerifyOptions, BundleLimits {}

/**
 * Verifies a run's bundle offline: {@link parseRunBundle} (as hostile
 * input; `opts.expectRun` is the run its entries must be of), then
 * {@link verifyRunFiles} with the keys in `opts.trust`. A bundle that
 * cannot be read is not thrown: it is a verification that failed, its one
 * file `bundle` saying why (`code` `invalid`, `malformed`, `truncated` or
 * `address`).
 */
export function verifyRunBundle(tar: Uint8Array, opts: BundleVerifyOptions = {}): RunVerification {
  let b: RunBundle;
  try {
    b = parseRunBundle(tar, { ...bundleLimits(opts), ...(opts.expectRun ? { run: opts.expectRun } : {}) });
  } catch (e) {
    if (!(e instanceof VerificationError)) throw e;
    return { ok: false, code: e.code, files: [{ file: "bundle", ok: false, code: e.code, message: e.message }], unchecked: [] };
  }
  return verifyRunFiles(b.files, { ...opts, expectRun: opts.expectRun ?? b.run });
}

/** The bundle limits among options (undefined ones dropped). */
export function bundleLimits(o: BundleLimits): BundleLimits {
  return definedOnly({ maxBytes: o.maxBytes, maxFileBytes: o.maxFileBytes, maxEntries: o.maxEntries });
}

function definedOnly<T extends BundleLimits>(o: T): BundleLimits {
  const out: BundleLimits = {};
  if (o.maxBytes !== undefined) out.maxBytes = o.maxBytes;
  if (o.maxFileBytes !== undefined) out.maxFileBytes = o.maxFileBytes;
  if (o.maxEntries !== undefined) out.maxEntries = o.maxEntries;
  return out;
}
