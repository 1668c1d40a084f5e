// BLAKE3, written from the BLAKE3 paper and specification
// (https://github.com/BLAKE3-team/BLAKE3-specs): hash, keyed_hash and
// derive_key modes, incremental input, extendable output. Checked against
// the official test vectors (testdata/vectors/blake3) by the SDK's tests.

const IV = new Uint32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);
const MSG_SCHEDULE: readonly (readonly number[])[] = (() => {
  const perm = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
  const rounds: number[][] = [];
  let s = [...Array(16).keys()];
  for (let r = 0; r < 7; r++) {
    rounds.push(s);
    s = perm.map((i) => s[i]!);
  }
  return rounds;
})();

const CHUNK_START = 1;
const CHUNK_END = 2;
const PARENT = 4;
const ROOT = 8;
const KEYED_HASH = 16;
const DERIVE_KEY_CONTEXT = 32;
const DERIVE_KEY_MATERIAL = 64;
const BLOCK_LEN = 64;
const CHUNK_LEN = 1024;

/** The state of one compression, kept out of the hot loop's allocations. */
const st = new Uint32Array(16);
const mw = new Uint32Array(16);

function g(a: number, b: number, c: number, d: number, x: number, y: number): void {
  st[a] = (st[a]! + st[b]! + x) | 0;
  let t = st[d]! ^ st[a]!;
  st[d] = (t >>> 16) | (t << 16);
  st[c] = (st[c]! + st[d]!) | 0;
  t = st[b]! ^ st[c]!;
  st[b] = (t >>> 12) | (t << 20);
  st[a] = (st[a]! + st[b]! + y) | 0;
  t = st[d]! ^ st[a]!;
  st[d] = (t >>> 8) | (t << 24);
  st[c] = (st[c]! + st[d]!) | 0;
  t = st[b]! ^ st[c]!;
  st[b] = (t >>> 7) | (t << 25);
}

/** The compression function: all 16 words of its output. */
function compress(cv: Uint32Array, block: Uint32Array, counter: number, blockLen: number, flags: number): Uint32Array {
  st.set(cv, 0);
  st[8] = IV[0]!;
  st[9] = IV[1]!;
  st[10] = IV[2]!;
  st[11] = IV[3]!;
  st[12] = counter >>> 0;
  st[13] = Math.floor(counter / 0x100000000) >>> 0;
  st[14] = blockLen;
  st[15] = flags;
  for (let r = 0; r < 7; r++) {
    const s = MSG_SCHEDULE[r]!;
    g(0, 4, 8, 12, block[s[0]!]!, block[s[1]!]!);
    g(1, 5, 9, 13, block[s[2]!]!, block[s[3]!]!);
    g(2, 6, 10, 14, block[s[4]!]!, block[s[5]!]!);
    g(3, 7, 11, 15, block[s[6]!]!, block[s[7]!]!);
    g(0, 5, 10, 15, block[s[8]!]!, block[s[9]!]!);
    g(1, 6, 11, 12, block[s[10]!]!, block[s[11]!]!);
    g(2, 7, 8, 13, block[s[12]!]!, block[s[13]!]!);
    g(3, 4, 9, 14, block[s[14]!]!, block[s[15]!]!);
  }
  const out = new Uint32Array(16);
  for (let i = 0; i < 8; i++) {
    out[i] = st[i]! ^ st[i + 8]!;
    out[i + 8] = st[i + 8]! ^ cv[i]!;
  }
  return out;
}

function wordsOf(bytes: Uint8Array, off: number, len: number): Uint32Array {
  mw.fill(0);
  for (let i = 0; i < len; i++) {
    mw[i >> 2] = mw[i >> 2]! | (bytes[off + i]! << (8 * (i & 3)));
  }
  return mw;
}

/** What the final compression is given: enough to make any length of output. */
interface Output {
  cv: Uint32Array;
  block: Uint32Array;
  blockLen: number;
  counter: number;
  flags: number;
}

function chainingValue(o: Output): Uint32Array {
  return compress(o.cv, o.block, o.counter, o.blockLen, o.flags).slice(0, 8);
}

function rootBytes(o: Output, outLen: number): Uint8Array {
  const out = new Uint8Array(outLen);
  let pos = 0;
  for (let counter = 0; pos < outLen; counter++) {
    const w = compress(o.cv, o.block, counter, o.blockLen, o.flags | ROOT);
    for (let i = 0; i < 16 && pos < outLen; i++) {
      for (let b = 0; b < 4 && pos < outLen; b++) {
        out[pos++] = (w[i]! >>> (8 * b)) & 0xff;
      }
    }
  }
  return out;
}

function parentOutput(left: Uint32Array, right: Uint32Array, key: Uint32Array, flags: number): Output {
  const block = new Uint32Array(16);
  block.set(left, 0);
  block.set(right, 8);
  return { cv: key, block, blockLen: BLOCK_LEN, counter: 0, flags: flags | PARENT };
}

class ChunkState {
  cv: Uint32Array;
  counter: number;
  block = new Uint8Array(BLOCK_LEN);
  blockLen = 0;
  blocksCompressed = 0;
  constructor(
    key: Uint32Array,
    counter: number,
    readonly flags: number,
  ) {
    this.cv = key.slice();
    this.counter = counter;
  }
  get len(): number {
    return BLOCK_LEN * this.blocksCompressed + this.blockLen;
  }
  private startFlag(): number {
    return this.blocksCompressed === 0 ? CHUNK_START : 0;
  }
  update(input: Uint8Array): void {
    let off = 0;
    while (off < input.length) {
      if (this.blockLen === BLOCK_LEN) {
        const w = wordsOf(this.block, 0, BLOCK_LEN);
        this.cv = compress(this.cv, w, this.counter, BLOCK_LEN, this.flags | this.startFlag()).slice(0, 8);
        this.blocksCompressed++;
        this.blockLen = 0;
      }
      const take = Math.min(BLOCK_LEN - this.blockLen, input.length - off);
      this.block.set(input.subarray(off, off + take), this.blockLen);
      this.blockLen += take;
      off += take;
    }
  }
  output(): Output {
    const block = wordsOf(this.block, 0, this.blockLen).slice();
    return {
      cv: this.cv,
      block,
      blockLen: this.blockLen,
      counter: this.counter,
      flags: this.flags | this.startFlag() | CHUNK_END,
    };
  }
}

function keyWords(key: Uint8Array): Uint32Array {
  if (key.length !== 32) throw new RangeError(`blake3: a key is 32 bytes, not ${key.length}`);
  return wordsOf(key, 0, 32).slice(0, 8);
}

/**
 * An incremental BLAKE3 hasher: {@link Blake3.update} it with the input in
 * as many pieces as it comes, then {@link Blake3.digest} any length of
 * output (32 bytes by default: a content address's).
 */
export class Blake3 {
  private readonly key: Uint32Array;
  private readonly flags: number;
  private chunk: ChunkState;
  private readonly stack: Uint32Array[] = [];

  /** @internal Use {@link Blake3.hash}, {@link Blake3.keyed} or {@link Blake3.deriveKey}. */
  constructor(key: Uint32Array = IV, flags = 0) {
    this.key = key;
    this.flags = flags;
    this.chunk = new ChunkState(key, 0, flags);
  }

  /** A hasher in BLAKE3's default (unkeyed) hash mode. */
  static hash(): Blake3 {
    return new Blake3();
  }

  /** A hasher in keyed_hash mode under a 32-byte key. */
  static keyed(key: Uint8Array): Blake3 {
    return new Blake3(keyWords(key), KEYED_HASH);
  }

  /** A hasher in derive_key mode for a context string; feed it the key material. */
  static deriveKey(context: string): Blake3 {
    const ctx = new Blake3(IV, DERIVE_KEY_CONTEXT);
    ctx.update(new TextEncoder().encode(context));
    return new Blake3(keyWords(ctx.digest(32)), DERIVE_KEY_MATERIAL);
  }

  private addChunkCV(cv: Uint32Array, totalChunks: number): void {
    let n = totalChunks;
    while ((n & 1) === 0) {
      cv = chainingValue(parentOutput(this.stack.pop()!, cv, this.key, this.flags));
      n = Math.floor(n / 2);
    }
    this.stack.push(cv);
  }

  /** Adds input; returns this hasher. */
  update(input: Uint8Array | string): this {
    const data = typeof input === "string" ? new TextEncoder().encode(input) : input;
    let off = 0;
    while (off < data.length) {
      if (this.chunk.len === CHUNK_LEN) {
        const cv = chainingValue(this.chunk.output());
        const total = this.chunk.counter + 1;
        this.addChunkCV(cv, total);
        this.chunk = new ChunkState(this.key, total, this.flags);
      }
      const take = Math.min(CHUNK_LEN - this.chunk.len, data.length - off);
      this.chunk.update(data.subarray(off, off + take));
      off += take;
    }
    return this;
  }

  /** The output so far, `outLen` bytes of it (32 by default); the hasher may go on. */
  digest(outLen = 32): Uint8Array {
    let out = this.chunk.output();
    for (let i = this.stack.length - 1; i >= 0; i--) {
      out = parentOutput(this.stack[i]!, chainingValue(out), this.key, this.flags);
    }
    return rootBytes(out, outLen);
  }
}

/** BLAKE3-256 (or `outLen` bytes) of `data` in the default hash mode. */
export function blake3(data: Uint8Array | string, outLen = 32): Uint8Array {
  return Blake3.hash().update(data).digest(outLen);
}

/** The lowercase hex of bytes. */
export function toHex(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");
}

/** The content address of bytes (docs/spec/addresses.md): `b3:` and the hex of their BLAKE3-256. */
export function contentAddress(data: Uint8Array | string): string {
  return "b3:" + toHex(blake3(data));
}
