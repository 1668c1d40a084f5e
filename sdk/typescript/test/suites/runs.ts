// One-shot sealed runs: streamed, reported by the service, and verified
// offline here with the service's published host key; tampered records
// refused.

import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  blake3,
  canonicalJSON,
  contentAddress,
  DeniedError,
  NotFoundError,
  toHex,
  verifyAttestation,
  verifyRunDirectory,
  VerificationError,
  type ExecResult,
  type SandboxClient,
} from "@opensandbox/sdk";
import { service, type Service } from "../harness.js";

describe("one-shot runs and their verification", () => {
  let svc: Service;
  let client: SandboxClient;
  let res: ExecResult;
  let streamed = "";
  const scratch = mkdtempSync(join(tmpdir(), "sdk-ts-tamper-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  before(async () => {
    svc = await service();
    client = svc.client;
    res = await client.run(
      { args: ["sh", "-c", "echo run-out; echo run-err >&2; cat; exit 5"], stdin: "fed in\n" },
      { onStdout: (b) => (streamed += b.toString()), collect: true },
    );
  });

  it("runs, streams and seals", () => {
    assert.equal(streamed, "run-out\nfed in\n");
    assert.equal(res.stdout?.toString(), streamed);
    assert.equal(res.stderr?.toString(), "run-err\n");
    assert.equal(res.exit_status, 5);
    assert.equal(res.outcome?.status, "exited");
    assert.equal(res.sealed, true);
    assert.equal(res.tier, "S1");
    assert.match(res.run!, /^b3:[0-9a-f]{64}$/);
    assert.ok(res.energy?.some((e) => e.class === "Cpu"));
  });

  it("is reported verified by the service (GET /v1/runs/{id})", async () => {
    const rep = await client.getRun(res.run!);
    assert.equal(rep.run, res.run);
    assert.equal(rep.verified, true);
    assert.equal(rep.outcome?.exit_code, 5);
    assert.equal(rep.signer, await client.hostKey());
    await assert.rejects(client.getRun("b3:" + "0".repeat(63) + "1"), NotFoundError);
  });

  it("verifies offline with the published host key, which the CLI confirms", async () => {
    const key = await client.hostKey();
    assert.equal((await svc.cli("key", "--public")).trim(), key);
    const v = await client.verifyRun(res, { trustServiceKey: true });
    assert.equal(v.source, "directory"); // on the service's machine: its run directory
    assert.equal(v.ok, true, JSON.stringify(v.files));
    assert.equal(v.run, res.run);
    assert.deepEqual(
      v.files.map((f) => f.file),
      ["attestation.json", "unit.json", "grants.json", "decisions.json", "receipt.cose", "claim", "journal.cbor", "stdout.log", "stderr.log"],
    );
    assert.equal(v.attestation?.claim.signer, key);
    assert.equal(v.attestation?.claim.outcome.exit_code, 5);
    assert.equal(v.receipt?.signer, key);
    assert.equal(v.receipt?.unit, v.attestation?.claim.unit);
    // What streamed to us is what the run sealed: its journal's BLAKE3 of stdout.
    assert.equal(v.outputs?.stdout.address, contentAddress(res.stdout!));
    assert.equal(v.outputs?.stdout.length, BigInt(res.stdout!.length));
    assert.equal(v.outputs?.stderr.address, contentAddress(res.stderr!));
  });

  it("verifies an exec in a live sandbox too (a /2 claim citing its record)", async () => {
    const sb = await client.create();
    try {
      const r = await sb.exec(["echo", "in a sandbox"]);
      const v = await client.verifyRun(r, { trust: await client.hostKey() });
      assert.equal(v.ok, true, JSON.stringify(v.files));
      assert.equal(v.attestation?.claim.type, "sandbox.attestation/2");
      assert.ok(v.attestation?.claim.record);
    } finally {
      await sb.remove();
    }
  });

  const copy = (name: string) => {
    const d = join(scratch, name);
    cpSync(res.records!, d, { recursive: true });
    return d;
  };

  it("refuses a tampered attestation: a claim changed and re-canonicalized fails its signature", async () => {
    const d = copy("claim-changed");
    const env = JSON.parse(readFileSync(join(d, "attestation.json"), "utf8"));
    env.claim.outcome.exit_code = 0; // "it succeeded"
    writeFileSync(join(d, "attestation.json"), canonicalJSON(env));
    const key = await client.hostKey();
    const v = await verifyRunDirectory(d, { trust: [key] });
    assert.equal(v.ok, false);
    assert.equal(v.code, "signature");
    assert.throws(() => verifyAttestation(readFileSync(join(d, "attestation.json")), { trust: [key] }), (e: unknown) => e instanceof VerificationError && e.code === "signature");
  });

  it("refuses another run's records given for this run (expectRun: address)", async () => {
    const other = await client.run({ args: ["echo", "another run"] });
    const v = await client.verifyRun({ run: res.run!, records: other.records! }, { trustServiceKey: true });
    assert.equal(v.ok, false);
    assert.equal(v.code, "address");
    assert.equal((await client.verifyRun(other, { trustServiceKey: true })).ok, true);
  });

  it("refuses a flipped signature bit, a swapped receipt, a changed output and a stray file", async () => {
    const key = await client.hostKey();
    const d1 = copy("sig-flipped");
    const env = JSON.parse(readFileSync(join(d1, "attestation.json"), "utf8"));
    const sig = Buffer.from(env.signature, "base64url");
    sig[10] = sig[10]! ^ 1;
    env.signature = sig.toString("base64url");
    writeFileSync(join(d1, "attestation.json"), canonicalJSON(env));
    assert.equal((await verifyRunDirectory(d1, { trust: [key] })).code, "signature");

    const d2 = copy("receipt-swapped");
    const other = await client.run({ args: ["true"] });
    cpSync(join(other.records!, "receipt.cose"), join(d2, "receipt.cose"));
    const v2 = await verifyRunDirectory(d2, { trust: [key] });
    assert.equal(v2.code, "address");
    assert.equal(v2.files.find((f) => !f.ok)?.file, "receipt.cose");

    const d3 = copy("stdout-changed");
    writeFileSync(join(d3, "stdout.log"), "run-out\nfed IN\n");
    assert.equal((await verifyRunDirectory(d3, { trust: [key] })).code, "address");

    const d4 = copy("stray");
    writeFileSync(join(d4, "notes.txt"), "added later");
    assert.equal((await verifyRunDirectory(d4, { trust: [key] })).code, "unrecognised");
  });

  it("refuses a run signed by a key it was not told to trust (untrusted-key)", async () => {
    const pub = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" }).x!;
    const stranger = "ed25519:" + Buffer.from(pub, "base64url").toString("hex");
    const v = await client.verifyRun(res, { trust: [stranger] });
    assert.equal(v.ok, false);
    assert.equal(v.code, "untrusted-key");
    // Everything else checked out: untrusted is the only failure.
    assert.deepEqual(v.files.filter((f) => !f.ok).map((f) => f.file), ["attestation.json"]);
  });

  it("names the run by the BLAKE3 of its claim's canonical bytes", () => {
    const raw = readFileSync(join(res.records!, "attestation.json"));
    const env = JSON.parse(raw.toString());
    assert.equal("b3:" + toHex(blake3(canonicalJSON(env.claim))), res.run);
  });

  it("holds a narrowed client (Sandbox-Policy) to its policy", async () => {
    const narrow = client.narrowed({ type: "sandbox.policy/1", paths: [] });
    await assert.rejects(narrow.run({ args: ["cat", "/etc/hostname"], grants: ["fs:/etc:ro"] }), (e: unknown) => e instanceof DeniedError && e.status === 403 && /fs:\/etc/.test(e.message));
    const ok = await client.run({ args: ["true"], grants: ["fs:/etc:ro"] });
    assert.equal(ok.exit_status, 0);
    await assert.rejects(narrow.jcpLedger(), DeniedError);
  });

  it("streams a run's output through runStream, with limits applied", async () => {
    const call = client.runStream({ args: ["sh", "-c", "for i in 1 2 3; do echo $i; done"], limits: { memory_bytes: 64 << 20, pids: 16 } });
    const got: string[] = [];
    for await (const c of call) got.push(c.data.toString());
    assert.equal(got.join(""), "1\n2\n3\n");
    assert.equal((await call.result).exit_status, 0);
  });
});
