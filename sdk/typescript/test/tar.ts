// A small tar reader and writer of the tests' own (independent of the
// SDK's parser under test): to take a bundle the service sent apart and
// put it back together tampered with, in ways a hostile service could.

/** One entry. */
export interface TarEntry {
  name: string;
  data?: Uint8Array;
  /** Typeflag: "0" a file (default), "1" a hard link, "2" a symbolic link, "5" a directory, "x" a PAX header… */
  type?: string;
  linkname?: string;
  /** Put in the ustar prefix field (the name then is what follows it). */
  prefix?: string;
  /** PAX records, written as an "x" entry before this one. */
  pax?: Record<string, string>;
  /** Write this checksum instead of the right one. */
  badChecksum?: boolean;
}

function field(h: Uint8Array, off: number, len: number, s: string): void {
  const b = Buffer.from(s, "latin1");
  if (b.length > len) throw new Error(`tar: ${JSON.stringify(s)} over ${len} bytes`);
  h.set(b, off);
}

const oct = (n: number, len: number) => n.toString(8).padStart(len - 1, "0");

function header(e: TarEntry, size: number): Uint8Array {
  const h = new Uint8Array(512);
  field(h, 0, 100, e.name);
  field(h, 100, 8, oct(0o600, 8));
  field(h, 108, 8, oct(0, 8));
  field(h, 116, 8, oct(0, 8));
  field(h, 124, 12, oct(size, 12));
  field(h, 136, 12, oct(0, 12));
  h[156] = (e.type ?? "0").charCodeAt(0);
  if (e.linkname) field(h, 157, 100, e.linkname);
  field(h, 257, 6, "ustar\0");
  field(h, 263, 2, "00");
  if (e.prefix) field(h, 345, 155, e.prefix);
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  if (e.badChecksum) sum += 1;
  field(h, 148, 8, oct(sum, 7) + "\0");
  return h;
}

function pad(n: number): Uint8Array {
  return new Uint8Array((512 - (n % 512)) % 512);
}

/** A tar of these entries, ended by two zero blocks. */
export function writeTar(entries: TarEntry[]): Buffer {
  const parts: Uint8Array[] = [];
  for (let e of entries) {
    // A name over the header's 100 bytes travels in a PAX record, as Go's writer does it.
    if (Buffer.byteLength(e.name) > 100 && !e.prefix) e = { ...e, name: "long-name", pax: { path: e.name, ...e.pax } };
    if (e.pax) {
      const recs = Object.entries(e.pax).map(([k, v]) => {
        const body = ` ${k}=${v}\n`;
        let n = body.length + 1;
        while (String(n).length + body.length !== n) n = String(n).length + body.length;
        return n + body;
      });
      const d = Buffer.from(recs.join(""), "utf8");
      parts.push(header({ name: "PaxHeaders/x", type: "x" }, d.length), d, pad(d.length));
    }
    const data = e.data ?? new Uint8Array(0);
    parts.push(header(e, data.length), data, pad(data.length));
  }
  parts.push(new Uint8Array(1024));
  return Buffer.concat(parts);
}

/** The regular files of a tar the service wrote (trusted here: it is the test's own input). */
export function readTar(tar: Uint8Array): { name: string; data: Uint8Array }[] {
  const out: { name: string; data: Uint8Array }[] = [];
  let off = 0;
  while (off + 512 <= tar.length) {
    const h = tar.subarray(off, off + 512);
    if (h.every((b) => b === 0)) break;
    const str = (o: number, l: number) => Buffer.from(h.subarray(o, o + l)).toString("latin1").replace(/\0.*$/s, "");
    const size = parseInt(str(124, 12).trim() || "0", 8);
    const type = String.fromCharCode(h[156]!);
    if (type !== "0" && type !== "\0") throw new Error(`readTar: entry of type ${type}`);
    out.push({ name: str(0, 100), data: tar.slice(off + 512, off + 512 + size) });
    off += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}
