// What needs no service: BLAKE3 against the official vectors, canonical
// JSON and CBOR, and the verifier against the conformance pack's vectors
// (each with the refusal code the pack expects).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  Blake3,
  blake3,
  canonicalJSON,
  contentAddress,
  decodeCbor,
  encodeCbor,
  openReceipt,
  parseCanonicalJSON,
  toHex,
  verifyAttestation,
  verifyRunDirectory,
  VerificationError,
} from "@opensandbox/sdk";
import { REPO } from "../harness.js";

interface Vectors {
  key: string;
  context_string: string;
  cases: { input_len: number; hash: string; keyed_hash: string; derive_key: string }[];
}

describe("BLAKE3", () => {
  const tv = JSON.parse(readFileSync(join(REPO, "testdata/vectors/blake3/test_vectors.json"), "utf8")) as Vectors;
  const input = (n: number) => Uint8Array.from({ length: n }, (_, i) => i % 251);

  it(`agrees with every official vector (${tv.cases.length} lengths; hash, keyed_hash, derive_key, full extended output)`, () => {
    assert.ok(tv.cases.length >= 30);
    for (const c of tv.cases) {
      const n = c.hash.length / 2;
      assert.equal(toHex(Blake3.hash().update(input(c.input_len)).digest(n)), c.hash, `hash of ${c.input_len} bytes`);
      assert.equal(toHex(Blake3.keyed(new TextEncoder().encode(tv.key)).update(input(c.input_len)).digest(n)), c.keyed_hash, `keyed_hash of ${c.input_len}`);
      assert.equal(toHex(Blake3.deriveKey(tv.context_string).update(input(c.input_len)).digest(n)), c.derive_key, `derive_key of ${c.input_len}`);
      assert.equal(toHex(blake3(input(c.input_len))), c.hash.slice(0, 64));
    }
  });

  it("gives the same digest however the input is cut", () => {
    const data = input(5000);
    const whole = toHex(blake3(data));
    for (const step of [1, 7, 64, 1023, 1024, 1025, 4096]) {
      const h = Blake3.hash();
      for (let i = 0; i < data.length; i += step) h.update(data.subarray(i, i + step));
      assert.equal(toHex(h.digest()), whole, `pieces of ${step}`);
    }
  });

  it("gives the content addresses of docs/spec/addresses.md", () => {
    assert.equal(contentAddress(new Uint8Array(0)), "b3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
    assert.equal(contentAddress("abc"), "b3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85");
  });
});

describe("canonical encodings", () => {
  const refuse = (text: string, code: string) =>
    assert.throws(() => parseCanonicalJSON(new TextEncoder().encode(text)), (e: unknown) => e instanceof VerificationError && e.code === code, `${text} → ${code}`);

  it("JCS: accepts the canonical form, refuses each other form with its code", () => {
    assert.deepEqual(parseCanonicalJSON(new TextEncoder().encode('{"a":[1,-2,"x\\n"],"b":{"c":null}}')), { a: [1, -2, "x\n"], b: { c: null } });
    refuse('{"b":1,"a":2}', "non-canonical");
    refuse('{"a":1,"a":2}', "duplicate-key");
    refuse('{"a": 1}', "non-canonical");
    refuse('{"a":1.5}', "float");
    refuse('{"a":1e3}', "float");
    refuse('{"a":9007199254740992}', "int-range");
    refuse('{"a":-0}', "non-canonical");
    refuse('{"a":01}', "malformed");
    refuse('{"a":"\\u0041"}', "non-canonical");
    refuse('{"a":"\\/"}', "non-canonical");
    refuse('{"a":1', "truncated");
    refuse('{"a":1} ', "non-canonical");
    assert.equal(canonicalJSON({ b: 1, a: [true, "é\u0001"], "\u00e9": 0, Z: null }), '{"Z":null,"a":[true,"é\\u0001"],"b":1,"é":0}');
  });

  it("CBOR: round-trips deterministic items, refuses other encodings with their codes", () => {
    const v = encodeCbor({ b: 1n, a: [new Uint8Array([1, 2]), "t", -5n, 1n << 40n] });
    assert.equal(Buffer.from(v).toString("hex"), "a26161844201026174241b00000100000000006162" + "01");
    assert.deepEqual(encodeCbor(decodeCbor(v) as never), v);
    const code = (hex: string, c: string) =>
      assert.throws(() => decodeCbor(Buffer.from(hex, "hex")), (e: unknown) => e instanceof VerificationError && e.code === c, `${hex} → ${c}`);
    code("1801", "cbor-non-shortest");
    code("5f4101ff", "cbor-indefinite");
    code("a2616201616101", "cbor-unsorted-keys");
    code("a2616101616102", "duplicate-key");
    code("190001", "cbor-non-shortest");
    code("1a0000", "truncated");
    code("0000", "malformed");
    code("fa3f800000", "cbor-non-shortest");
  });
});

describe("the verifier against conformance/v1", () => {
  const pack = join(REPO, "conformance/v1");
  const manifest = JSON.parse(readFileSync(join(pack, "manifest.json"), "utf8")) as {
    trusted_key: string;
    files: { path: string; address: string }[];
    entries: { kind: string; path: string; expect: string; name: string }[];
  };
  const trust = [manifest.trusted_key];

  it("reads a pack whose files are the ones its manifest pins (BLAKE3)", () => {
    assert.ok(manifest.files.length > 50);
    for (const { path, address } of manifest.files) assert.equal(contentAddress(readFileSync(join(pack, path))), address, path);
  });

  const entries = manifest.entries.filter((e) => ["attestation", "receipt", "run"].includes(e.kind));
  it(`has attestation, receipt and run vectors (${entries.length})`, () => assert.ok(entries.length >= 55));
  for (const e of entries) {
    it(`${e.kind} ${e.path} → ${e.expect}`, async () => {
      const p = join(pack, e.path);
      let got: string;
      try {
        if (e.kind === "attestation") verifyAttestation(readFileSync(p), { trust });
        else if (e.kind === "receipt") openReceipt(readFileSync(p), { trust });
        else {
          const r = await verifyRunDirectory(p, { trust });
          assert.equal(r.ok, r.code === undefined);
          if (!r.ok) throw new VerificationError(r.code!, p, JSON.stringify(r.files.filter((f) => !f.ok)));
        }
        got = "ok";
      } catch (err) {
        if (!(err instanceof VerificationError)) throw err;
        got = err.code;
      }
      assert.equal(got, e.expect);
    });
  }
});
