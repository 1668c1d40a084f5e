// A run's bundle (GET /v1/runs/{id}/bundle) and the host's key (GET
// /v1/key): a run verified far from the service, over TCP with TLS, with a
// pinned key and with the published one; bundles tampered with on the way
// (a changed file, an extra file, names that climb, links, broken tars)
// refused, offline and through a service of the test's own that answers
// them.

import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  canonicalJSON,
  contentAddress,
  NotFoundError,
  parseRunBundle,
  SandboxClient,
  SandboxError,
  verifyRunBundle,
  VerificationError,
  type ExecResult,
  type RunVerification,
} from "@opensandbox/sdk";
import { service, skipped, track, type Service } from "../harness.js";
import { readTar, writeTar, type TarEntry } from "../tar.js";

describe("run bundles and remote verification", () => {
  let svc: Service;
  let client: SandboxClient;
  const scratch = mkdtempSync(join(tmpdir(), "sdk-ts-bundle-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  let pinned: string; // the host's key as its operator reads it, out of band
  let res: ExecResult;
  let hex: string;
  let tar: Buffer;
  let entries: { name: string; data: Uint8Array }[];

  before(async () => {
    svc = await service();
    client = svc.client;
    pinned = (await svc.cli("key", "--public")).trim();
    res = await client.run({ args: ["sh", "-c", "echo bundled; echo to-stderr >&2; exit 3"] });
    hex = res.run!.slice(3);
    tar = await client.runBundle(res.run!);
    entries = readTar(tar);
  });

  /** The bundle with its entries changed by `f`, re-tarred. */
  const rebuilt = (f: (es: TarEntry[]) => TarEntry[]) => writeTar(f(entries.map((e) => ({ name: e.name, data: e.data }))));
  const refused = (v: RunVerification, code: string, file: string, msg?: RegExp) => {
    assert.equal(v.ok, false, JSON.stringify(v.files));
    assert.equal(v.code, code, JSON.stringify(v.files));
    const bad = v.files.find((x) => !x.ok)!;
    assert.equal(bad.file, file, JSON.stringify(v.files));
    if (msg) assert.match(bad.message, msg);
  };

  it("serves a run's directory as runs/HEX/NAME entries, byte for byte", () => {
    const onDisk = readdirSync(res.records!).sort();
    assert.deepEqual(entries.map((e) => e.name).sort(), onDisk.map((n) => `runs/${hex}/${n}`));
    for (const e of entries) assert.ok(Buffer.from(e.data).equals(readFileSync(join(res.records!, e.name.split("/")[2]!))), e.name);
    const b = parseRunBundle(tar, { run: res.run! });
    assert.equal(b.run, res.run);
    assert.deepEqual(Object.keys(b.files).sort(), onDisk);
  });

  it("publishes the host's key (GET /v1/key): the one its operator reads", async () => {
    assert.match(pinned, /^ed25519:[0-9a-f]{64}$/);
    assert.equal(await client.hostKey(), pinned);
    assert.equal((await client.jcpInfo()).key, pinned);
  });

  it("verifies a run from its bundle with a pinned key, and from its directory where it is local", async () => {
    const v = await client.verifyRun(res, { from: "bundle", trust: pinned });
    assert.equal(v.ok, true, JSON.stringify(v.files));
    assert.equal(v.source, "bundle");
    assert.equal(v.run, res.run);
    assert.equal(v.attestation?.claim.outcome.exit_code, 3);
    const local = await client.verifyRun(res, { trust: pinned });
    assert.equal(local.source, "directory");
    assert.equal(local.ok, true);
    // By its id alone: the bundle, trusting the key the service publishes (opted in).
    const byId = await client.verifyRun(res.run!, { trustServiceKey: true });
    assert.equal(byId.ok, true);
    assert.equal(byId.source, "bundle");
    assert.equal(verifyRunBundle(tar, { trust: pinned }).ok, true);
  });

  it("trusts no key unless told which", async () => {
    await assert.rejects(client.verifyRun(res), (e: unknown) => e instanceof SandboxError && /no key to trust/.test(e.message));
    await assert.rejects(client.verifyRun(res.run!, { from: "bundle" }), /no key to trust/);
    const stranger = "ed25519:" + Buffer.from(generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" }).x!, "base64url").toString("hex");
    refused(await client.verifyRun(res, { from: "bundle", trust: stranger }), "untrusted-key", "attestation.json");
  });

  it("refuses a bundle with a file changed", () => {
    const out = rebuilt((es) => es.map((e) => (e.name.endsWith("/stdout.log") ? { ...e, data: Buffer.from("FORGED!\n") } : e)));
    refused(verifyRunBundle(out, { trust: pinned }), "address", "stdout.log");
    const att = rebuilt((es) =>
      es.map((e) => {
        if (!e.name.endsWith("/attestation.json")) return e;
        const env = JSON.parse(Buffer.from(e.data!).toString());
        env.claim.outcome.exit_code = 0; // "it succeeded", re-canonicalized: its signature no longer holds
        return { ...e, data: Buffer.from(canonicalJSON(env)) };
      }),
    );
    refused(verifyRunBundle(att, { trust: pinned }), "signature", "attestation.json");
    // A byte of a file's data flipped in the tar itself.
    const flipped = Buffer.from(tar);
    const i = flipped.indexOf(Buffer.from("bundled\n"));
    assert.ok(i > 0);
    flipped[i] = flipped[i]! ^ 0x20;
    refused(verifyRunBundle(flipped, { trust: pinned }), "address", "stdout.log");
  });

  it("refuses a bundle with an extra file, in the run's directory or beside it", () => {
    refused(verifyRunBundle(rebuilt((es) => [...es, { name: `runs/${hex}/notes.txt`, data: Buffer.from("x") }]), { trust: pinned }), "unrecognised", "notes.txt");
    for (const name of ["extra.txt", `runs/${hex}`, `runs/${hex}/noextension`, `runs/${"0".repeat(64)}/attestation.json`, `runs/${hex}/sub/attestation.json`, `blobs/${hex}`]) {
      refused(verifyRunBundle(rebuilt((es) => [...es, { name, data: Buffer.from("{}") }]), { trust: pinned }), "invalid", "bundle");
    }
    refused(verifyRunBundle(rebuilt((es) => [...es, { name: es[0]!.name, data: es[0]!.data }]), { trust: pinned }), "invalid", "bundle", /twice/);
  });

  it("refuses names that climb, however they are spelled, and writes nothing", () => {
    const target = join(scratch, "escaped.txt");
    const climb = relative(process.cwd(), target);
    const names: TarEntry[] = [
      { name: `runs/${hex}/../../${climb}` },
      { name: `../${climb}` },
      { name: target },
      { name: `runs/${hex}/..` },
      { name: `runs/${hex}/../attestation.json` },
      { name: `runs/${hex}/.hidden.json` },
      { name: `runs/${hex}/a..json` },
      { name: "escaped.txt", prefix: `runs/${hex}/../..` },
      { name: `runs/${hex}/stdout.log`, pax: { path: `runs/${hex}/../../${climb}` } },
      { name: `runs/${hex}/x\\..json` },
    ];
    for (const e of names) {
      const v = verifyRunBundle(rebuilt((es) => [...es, { ...e, data: Buffer.from("pwned") }]), { trust: pinned });
      refused(v, "invalid", "bundle", /runs\/HEX\/NAME/);
    }
    assert.equal(existsSync(target), false);
    assert.throws(() => parseRunBundle(writeTar([{ name: `runs/${hex}/../x.json`, data: Buffer.from("{}") }])), (e: unknown) => e instanceof VerificationError && e.code === "invalid");
  });

  it("refuses links, directories and other entries that are not regular files", () => {
    const cases: [TarEntry, RegExp][] = [
      [{ name: `runs/${hex}/stdout.log`, type: "2", linkname: "/etc/passwd" }, /symbolic link/],
      [{ name: `runs/${hex}/stdout.log`, type: "1", linkname: `runs/${hex}/stderr.log` }, /hard link/],
      [{ name: `runs/${hex}/`, type: "5" }, /directory/],
      [{ name: `runs/${hex}/fifo.log`, type: "6" }, /FIFO/],
      [{ name: "././@LongLink", type: "L", data: Buffer.from(`runs/${hex}/attestation.json`) }, /GNU long name/],
      [{ name: `runs/${hex}/stdout.log`, pax: { linkpath: "/etc/passwd" } }, /linkpath/],
    ];
    for (const [e, msg] of cases) {
      // In place of the real entry of that name (a symlink standing for stdout.log).
      const out = rebuilt((es) => [...es.filter((x) => x.name !== e.name), e]);
      refused(verifyRunBundle(out, { trust: pinned }), "invalid", "bundle", msg);
    }
  });

  it("refuses a broken tar: checksum, truncation, trailing bytes, bounds, another run's, none", async () => {
    const v = (t: Uint8Array, o = {}) => verifyRunBundle(t, { trust: pinned, ...o });
    refused(v(rebuilt((es) => [{ ...es[0]!, badChecksum: true }, ...es.slice(1)])), "malformed", "bundle", /checksum/);
    refused(v(tar.subarray(0, 700)), "truncated", "bundle");
    const whole = rebuilt((es) => es);
    refused(v(whole.subarray(0, whole.length - 1024)), "truncated", "bundle", /end-of-archive/);
    refused(v(Buffer.concat([tar, Buffer.from("trailing")])), "invalid", "bundle", /after the end/);
    refused(v(tar, { maxFileBytes: 100 }), "invalid", "bundle", /over the bound/);
    refused(v(tar, { maxEntries: 3 }), "invalid", "bundle", /more than 3/);
    refused(v(tar, { maxBytes: 1000 }), "invalid", "bundle", /over the bound/);
    refused(v(writeTar([])), "invalid", "bundle", /no file/);
    refused(v(Buffer.alloc(0)), "truncated", "bundle");
    const other = await client.run({ args: ["true"] });
    refused(v(await client.runBundle(other.run!), { expectRun: res.run! }), "address", "bundle");
  });

  describe("over TCP with TLS", () => {
    let alice: SandboxClient;
    let bob: SandboxClient;
    before(() => {
      if (svc.noTLS) return;
      alice = track(new SandboxClient({ address: svc.url!, token: svc.tokens[0], ca: svc.ca! }));
      bob = track(new SandboxClient({ address: svc.url!, token: svc.tokens[1], ca: svc.ca! }));
    });

    it("verifies an exec from its bundle, with the pinned key and with the published one", async (t) => {
      if (skipped(t, svc)) return;
      const sb = await alice.create();
      try {
        const r = await sb.exec(["sh", "-c", "echo far away"]);
        const v = await alice.verifyRun(r, { trust: pinned });
        assert.equal(v.ok, true, JSON.stringify(v.files));
        assert.equal(v.source, "bundle");
        assert.equal(v.run, r.run);
        assert.equal(v.outputs?.stdout.address, contentAddress(r.stdout!));
        assert.equal(await alice.hostKey(), pinned);
        const published = await alice.verifyRun(r, { trustServiceKey: true });
        assert.equal(published.ok, true);
        assert.equal(published.attestation?.claim.signer, pinned);
        // Another token does not see it: 404, as if it were not there.
        await assert.rejects(bob.verifyRun(r, { trust: pinned }), NotFoundError);
        await assert.rejects(bob.runBundle(r.run!), NotFoundError);
      } finally {
        await sb.remove();
      }
    });

    it("serves a token its own one-shot runs and exec runs (its sandbox gone), and no other's", async (t) => {
      if (skipped(t, svc)) return;
      const one = await alice.run({ args: ["echo", "one-shot"] });
      const v = await alice.verifyRun(one, { trust: pinned });
      assert.equal(v.ok, true, JSON.stringify(v.files));
      assert.equal(v.source, "bundle");
      assert.equal((await alice.getRun(one.run!)).verified, true);
      await assert.rejects(bob.runBundle(one.run!), NotFoundError);
      await assert.rejects(bob.getRun(one.run!), NotFoundError);
      const sb = await alice.create();
      const r = await sb.exec(["echo", "then removed"]);
      await sb.remove();
      assert.equal((await alice.verifyRun(r.run!, { trust: pinned })).ok, true);
      await assert.rejects(bob.verifyRun(r.run!, { trust: pinned }), NotFoundError);
    });
  });

  describe("through a service that answers tampered bundles", () => {
    let fake: Server;
    let url: string;
    let answer: Buffer;
    let length: string | undefined;
    before(async () => {
      fake = createServer((req, rsp) => {
        if (req.url === "/v1/key") return rsp.end(JSON.stringify({ key: pinned }));
        if (req.url?.endsWith("/bundle")) {
          rsp.writeHead(200, { "Content-Type": "application/x-tar", ...(length ? { "Content-Length": length } : {}) });
          return rsp.end(length ? undefined : answer);
        }
        rsp.writeHead(404).end(JSON.stringify({ category: "not-found", message: "nothing here" }));
      });
      await new Promise<void>((ok) => fake.listen(0, "127.0.0.1", ok));
      const a = fake.address();
      url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
    });
    after(() => new Promise<void>((ok) => fake.close(() => ok())));

    it("refuses a symlink, a changed file and an oversized answer, sent over the wire", async () => {
      const c = track(new SandboxClient({ address: url, env: {} }));
      answer = rebuilt((es) => [...es.filter((e) => !e.name.endsWith("/stdout.log")), { name: `runs/${hex}/stdout.log`, type: "2", linkname: "/etc/passwd" }]);
      const v = await c.verifyRun(res.run!, { trust: pinned });
      refused(v, "invalid", "bundle", /symbolic link/);
      assert.equal(v.source, "bundle");
      answer = rebuilt((es) => es.map((e) => (e.name.endsWith("/stderr.log") ? { ...e, data: Buffer.from("rewritten\n") } : e)));
      refused(await c.verifyRun(res, { from: "bundle", trustServiceKey: true }), "address", "stderr.log");
      answer = tar;
      assert.equal((await c.verifyRun(res.run!, { trust: pinned })).ok, true);
      length = String(2 ** 40);
      await assert.rejects(c.verifyRun(res.run!, { trust: pinned }), (e: unknown) => e instanceof SandboxError && /over the bound/.test(e.message));
      length = undefined;
    });
  });
});
